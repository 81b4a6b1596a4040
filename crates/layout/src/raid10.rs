//! md's RAID-10 arithmetic: how much of each member is used (`calc_sectors`), the
//! array's size (`raid10_size`) and where each copy of a chunk lives
//! (`__raid10_find_phys`), for the original layout (far sets spanning all members).

use crate::{MemberIdx, Place, Raid10Layout};

/// Sizes md derives from the members' usable size, in chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raid10Sizes {
    /// Chunks of array data.
    pub array_chunks: u64,
    /// Chunks used on each member (md's `dev_sectors`).
    pub member_chunks: u64,
    /// Distance between far copies on a member, in chunks (md's `stride`).
    pub stride_chunks: u64,
}

pub(crate) fn sizes(layout: Raid10Layout, raid_disks: u16, member_chunks: u64) -> Raid10Sizes {
    let near = u64::from(layout.near_copies);
    let far = u64::from(layout.far_copies);
    let disks = u64::from(raid_disks);
    let array_chunks = member_chunks / far * disks / near;
    let used = (array_chunks * near * far).div_ceil(disks);
    let stride_chunks = if layout.offset { 1 } else { used / far };
    Raid10Sizes {
        array_chunks,
        member_chunks: used,
        stride_chunks,
    }
}

/// Every copy of array sector `sector`, in md's order (near copies, each followed by
/// its far copies). `push` receives each place.
pub(crate) fn find_copies(
    layout: Raid10Layout,
    raid_disks: u16,
    chunk_sectors: u32,
    stride_chunks: u64,
    sector: u64,
    mut push: impl FnMut(Place),
) {
    let chunk = u64::from(chunk_sectors);
    let disks = u64::from(raid_disks);
    let near = u64::from(layout.near_copies);
    let far = u64::from(layout.far_copies);
    let stride = stride_chunks * chunk;
    let chunk_index = sector / chunk * near;
    let mut dev = chunk_index % disks;
    let mut row = chunk_index / disks;
    if layout.offset {
        row *= far;
    }
    let mut member_sector = row * chunk + sector % chunk;
    for _ in 0..near {
        let mut d = dev;
        let mut s = member_sector;
        push(place(d, s));
        for _ in 1..far {
            d = (d + near) % disks;
            s += stride;
            push(place(d, s));
        }
        dev += 1;
        if dev >= disks {
            dev = 0;
            member_sector += chunk;
        }
    }
}

fn place(member: u64, sector: u64) -> Place {
    Place {
        member: MemberIdx(u16::try_from(member).expect("member index below raid_disks")),
        sector,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copies(layout: Raid10Layout, disks: u16, sector: u64, stride: u64) -> Vec<(u16, u64)> {
        let mut v = Vec::new();
        find_copies(layout, disks, 8, stride, sector, |p| {
            v.push((p.member.0, p.sector))
        });
        v
    }

    const N2: Raid10Layout = Raid10Layout {
        near_copies: 2,
        far_copies: 1,
        offset: false,
    };
    const F2: Raid10Layout = Raid10Layout {
        near_copies: 1,
        far_copies: 2,
        offset: false,
    };
    const O2: Raid10Layout = Raid10Layout {
        near_copies: 1,
        far_copies: 2,
        offset: true,
    };

    #[test]
    fn near_copies_on_neighbours() {
        // 3 members, n2: chunk 0 on members 0,1; chunk 1 on 2 and (wrapping) 0 one row down.
        assert_eq!(copies(N2, 3, 0, 0), [(0, 0), (1, 0)]);
        assert_eq!(copies(N2, 3, 8, 0), [(2, 0), (0, 8)]);
        assert_eq!(copies(N2, 3, 16, 0), [(1, 8), (2, 8)]);
    }

    #[test]
    fn far_and_offset_copies() {
        let s = sizes(F2, 4, 100);
        assert_eq!(s.array_chunks, 200);
        assert_eq!(s.stride_chunks, 50);
        // f2: the second copy in the far half, on the next member.
        assert_eq!(copies(F2, 4, 0, 50), [(0, 0), (1, 400)]);
        assert_eq!(copies(F2, 4, 3 * 8 + 1, 50), [(3, 1), (0, 401)]);
        // o2: the second copy in the next chunk row, on the next member.
        assert_eq!(copies(O2, 4, 0, 1), [(0, 0), (1, 8)]);
        assert_eq!(copies(O2, 4, 4 * 8, 1), [(0, 16), (1, 24)]);
    }

    #[test]
    fn sizes_are_md_fixed_points() {
        for layout in [N2, F2, O2] {
            for disks in 2..9u16 {
                for member in 2..64u64 {
                    let s = sizes(layout, disks, member);
                    assert!(s.member_chunks <= member);
                    assert_eq!(
                        sizes(layout, disks, s.member_chunks).array_chunks,
                        s.array_chunks
                    );
                }
            }
        }
    }
}
