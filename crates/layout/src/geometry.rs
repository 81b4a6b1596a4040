//! An array's shape — level, layout, members, chunk, member size — and the mapping
//! from array sectors to member sectors that follows from it.

use crate::raid10;
use crate::{
    Layout, LayoutError, Level, MemberIdx, ParityAlgorithm, StripeMap, MAX_CHUNK_SECTORS,
    MIN_CHUNK_SECTORS, SECTOR_BYTES,
};

/// Most copies of one sector: RAID-1 with every member, or RAID-10 near × far.
pub const MAX_COPIES: usize = crate::MAX_MEMBERS as usize;

/// A sector on a member, counted from the start of the member's data area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Place {
    pub member: MemberIdx,
    pub sector: u64,
}

/// Every copy of a run of array sectors that stays contiguous on each member.
#[derive(Debug, Clone, Copy)]
pub struct Copies {
    places: [Place; MAX_COPIES],
    len: usize,
    /// Sectors from the asked-for sector on that stay contiguous on every copy.
    pub run_sectors: u64,
}

impl Copies {
    fn new(run_sectors: u64) -> Copies {
        Copies {
            places: [Place::default(); MAX_COPIES],
            len: 0,
            run_sectors,
        }
    }

    fn push(&mut self, place: Place) {
        self.places[self.len] = place;
        self.len += 1;
    }

    /// The copies, in md's order (the first is where md reads from by default).
    pub fn as_slice(&self) -> &[Place] {
        &self.places[..self.len]
    }
}

/// Where an array sector of a RAID-4/5/6 array falls within its stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripePos {
    /// Stripe number: the chunk row on every member.
    pub stripe: u64,
    /// Which data chunk of the stripe (not which member: see [`StripeMap::data_member`]).
    pub data_index: u16,
    /// Sector within the chunk.
    pub offset_in_chunk: u32,
}

/// The shape of an array. Construction checks it; every method is then total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    level: Level,
    layout: Layout,
    raid_disks: u16,
    /// 0 for RAID-1.
    chunk_sectors: u32,
    /// Sectors of each member's data area the array uses (md's `size`/`dev_sectors`).
    member_sectors: u64,
    array_sectors: u64,
    /// RAID-10: distance between far copies, in chunks.
    stride_chunks: u64,
}

impl Geometry {
    /// Checks and builds a geometry. `member_sectors` is the usable size of the
    /// smallest member's data area; it is rounded down as md rounds it (to whole
    /// chunks; for RAID-10 to what md's `calc_sectors` uses). `chunk_sectors` is
    /// ignored for RAID-1.
    pub fn new(
        level: Level,
        layout: Layout,
        raid_disks: u16,
        chunk_sectors: u32,
        member_sectors: u64,
    ) -> Result<Geometry, LayoutError> {
        if raid_disks < level.min_members() || raid_disks > level.max_members() {
            return Err(LayoutError::MemberCount {
                level,
                given: raid_disks,
                min: level.min_members(),
                max: level.max_members(),
            });
        }
        check_layout(level, layout, raid_disks)?;
        let chunk_sectors = if level.has_chunk() {
            if !chunk_sectors.is_power_of_two()
                || !(MIN_CHUNK_SECTORS..=MAX_CHUNK_SECTORS).contains(&chunk_sectors)
            {
                return Err(LayoutError::Chunk {
                    bytes: u64::from(chunk_sectors) * SECTOR_BYTES,
                });
            }
            chunk_sectors
        } else {
            0
        };
        let too_small = || LayoutError::TooSmall {
            member_sectors,
            chunk_sectors: chunk_sectors.max(1),
        };
        let mut geo = Geometry {
            level,
            layout,
            raid_disks,
            chunk_sectors,
            member_sectors: 0,
            array_sectors: 0,
            stride_chunks: 0,
        };
        let disks = u64::from(raid_disks);
        if level == Level::Raid1 {
            if member_sectors == 0 {
                return Err(too_small());
            }
            geo.member_sectors = member_sectors;
            geo.array_sectors = member_sectors;
            return Ok(geo);
        }
        let chunk = u64::from(chunk_sectors);
        let member_chunks = member_sectors / chunk;
        match layout {
            Layout::Raid10(r10) => {
                let sizes = raid10::sizes(r10, raid_disks, member_chunks);
                geo.member_sectors = sizes.member_chunks * chunk;
                geo.array_sectors = sizes.array_chunks * chunk;
                geo.stride_chunks = sizes.stride_chunks;
            }
            _ => {
                let data_disks = disks - u64::from(level.parity_count());
                geo.member_sectors = member_chunks * chunk;
                geo.array_sectors = geo.member_sectors * data_disks;
            }
        }
        if geo.array_sectors == 0 {
            return Err(too_small());
        }
        Ok(geo)
    }

    pub fn level(&self) -> Level {
        self.level
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn raid_disks(&self) -> u16 {
        self.raid_disks
    }

    /// Chunk size in sectors; 0 for RAID-1.
    pub fn chunk_sectors(&self) -> u32 {
        self.chunk_sectors
    }

    /// Sectors of each member's data area the array uses (what md stores as `size`).
    pub fn member_sectors(&self) -> u64 {
        self.member_sectors
    }

    /// The array's size in sectors.
    pub fn array_sectors(&self) -> u64 {
        self.array_sectors
    }

    /// Data chunks per stripe (members for RAID-0; copies-adjusted for RAID-10).
    pub fn data_disks(&self) -> u16 {
        match self.layout {
            Layout::Raid10(r) => self.raid_disks / r.copies().max(1),
            _ if self.level == Level::Raid1 => 1,
            _ => self.raid_disks - u16::from(self.level.parity_count()),
        }
    }

    /// Array sectors in one full stripe of data (one chunk row across the members).
    pub fn stripe_data_sectors(&self) -> u64 {
        match self.level {
            Level::Raid1 => 8,
            Level::Raid10 => u64::from(self.chunk_sectors) * u64::from(self.raid_disks),
            _ => u64::from(self.chunk_sectors) * u64::from(self.data_disks()),
        }
    }

    /// Copies of every sector: 1 for RAID-0/4/5/6, all members for RAID-1.
    pub fn copies_count(&self) -> u16 {
        match (self.level, self.layout) {
            (Level::Raid1, _) => self.raid_disks,
            (_, Layout::Raid10(r)) => r.copies(),
            _ => 1,
        }
    }

    /// The parity algorithm of a RAID-4/5/6 array.
    fn algorithm(&self) -> ParityAlgorithm {
        match self.layout {
            Layout::Parity(a) => a,
            _ => ParityAlgorithm::ParityLast,
        }
    }

    /// Where array sector `sector` of a RAID-4/5/6 array falls in its stripe.
    pub fn stripe_pos(&self, sector: u64) -> StripePos {
        debug_assert!(self.level.has_parity());
        let chunk = u64::from(self.chunk_sectors);
        let chunk_number = sector / chunk;
        let data_disks = u64::from(self.data_disks());
        StripePos {
            stripe: chunk_number / data_disks,
            data_index: u16::try_from(chunk_number % data_disks).expect("below data_disks"),
            offset_in_chunk: u32::try_from(sector % chunk).expect("below chunk_sectors"),
        }
    }

    /// P, Q and data placement in stripe `stripe` of a RAID-4/5/6 array.
    pub fn stripe_map(&self, stripe: u64) -> StripeMap {
        debug_assert!(self.level.has_parity());
        StripeMap::new(self.level, self.algorithm(), self.raid_disks, stripe)
    }

    /// Number of stripes (chunk rows) of a RAID-4/5/6 array.
    pub fn stripes(&self) -> u64 {
        self.member_sectors / u64::from(self.chunk_sectors.max(1))
    }

    /// The member sector of `offset_in_chunk` in stripe `stripe` (any member).
    pub fn member_sector(&self, stripe: u64, offset_in_chunk: u32) -> u64 {
        stripe * u64::from(self.chunk_sectors) + u64::from(offset_in_chunk)
    }

    /// Where array sector `sector` holds its data: for RAID-1 and RAID-10 every copy,
    /// for the other levels the one data location.
    pub fn copies(&self, sector: u64) -> Copies {
        debug_assert!(sector < self.array_sectors);
        let chunk = u64::from(self.chunk_sectors);
        match (self.level, self.layout) {
            (Level::Raid1, _) => {
                let mut c = Copies::new(self.array_sectors - sector);
                for m in 0..self.raid_disks {
                    c.push(Place {
                        member: MemberIdx(m),
                        sector,
                    });
                }
                c
            }
            (_, Layout::Raid10(r10)) => {
                let mut c = Copies::new(chunk - sector % chunk);
                raid10::find_copies(
                    r10,
                    self.raid_disks,
                    self.chunk_sectors,
                    self.stride_chunks,
                    sector,
                    |p| c.push(p),
                );
                c
            }
            (Level::Raid0, _) => {
                let disks = u64::from(self.raid_disks);
                let chunk_number = sector / chunk;
                let mut c = Copies::new(chunk - sector % chunk);
                c.push(Place {
                    member: MemberIdx(
                        u16::try_from(chunk_number % disks).expect("below raid_disks"),
                    ),
                    sector: chunk_number / disks * chunk + sector % chunk,
                });
                c
            }
            _ => {
                let pos = self.stripe_pos(sector);
                let mut c = Copies::new(chunk - u64::from(pos.offset_in_chunk));
                c.push(Place {
                    member: self.stripe_map(pos.stripe).data_member(pos.data_index),
                    sector: self.member_sector(pos.stripe, pos.offset_in_chunk),
                });
                c
            }
        }
    }
}

fn check_layout(level: Level, layout: Layout, raid_disks: u16) -> Result<(), LayoutError> {
    let mismatch = || LayoutError::UnknownLayout {
        level,
        name: layout.short_name(),
        choices: "the level's own layouts (see --help)",
    };
    match (level, layout) {
        (Level::Raid0 | Level::Raid1, Layout::None) => Ok(()),
        (Level::Raid4, Layout::Parity(ParityAlgorithm::ParityLast)) => Ok(()),
        (Level::Raid5 | Level::Raid6, Layout::Parity(_)) => Ok(()),
        (Level::Raid10, Layout::Raid10(r)) => {
            let copies = r.copies();
            // Offset copies combined with near copies collide in md's own arithmetic when a
            // near set wraps to the next row, so xraid refuses them.
            let offset_ok = !r.offset || (r.far_copies >= 2 && r.near_copies == 1);
            if copies < 2 || copies > raid_disks || !offset_ok {
                return Err(LayoutError::Raid10Copies {
                    layout: r.short_name_owned(),
                    copies,
                    members: raid_disks,
                });
            }
            Ok(())
        }
        _ => Err(mismatch()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_md() {
        let ls = Layout::default_for(Level::Raid5);
        let g = Geometry::new(Level::Raid5, ls, 4, 128, 30720 + 100).expect("valid");
        assert_eq!(g.member_sectors(), 30720);
        assert_eq!(g.array_sectors(), 30720 * 3);
        let g = Geometry::new(
            Level::Raid6,
            Layout::default_for(Level::Raid6),
            5,
            128,
            30720,
        )
        .expect("valid");
        assert_eq!(g.array_sectors(), 30720 * 3);
        let g = Geometry::new(
            Level::Raid10,
            Layout::default_for(Level::Raid10),
            4,
            128,
            30720,
        )
        .expect("valid");
        assert_eq!(g.array_sectors(), 30720 * 2);
        let g = Geometry::new(Level::Raid1, Layout::None, 2, 64, 1001).expect("valid");
        assert_eq!((g.array_sectors(), g.chunk_sectors()), (1001, 0));
    }

    #[test]
    fn bad_geometries_are_refused() {
        let ls = Layout::default_for(Level::Raid5);
        let err = Geometry::new(Level::Raid5, ls, 4, 96, 1 << 20).expect_err("not a power of two");
        assert!(err.to_string().contains("power of two"), "{err}");
        assert!(Geometry::new(Level::Raid5, ls, 4, 4, 1 << 20).is_err());
        assert!(Geometry::new(Level::Raid5, ls, 4, 65536, 1 << 20).is_err());
        let err = Geometry::new(Level::Raid6, ls, 3, 128, 1 << 20).expect_err("too few");
        assert!(err.to_string().contains("raid6 needs 4 to 64"), "{err}");
        assert!(Geometry::new(Level::Raid5, ls, 4, 128, 127).is_err());
        let n3 = Layout::parse(Level::Raid10, "n3").expect("n3");
        assert!(Geometry::new(Level::Raid10, n3, 2, 128, 1 << 20).is_err());
        assert!(Geometry::new(Level::Raid5, Layout::None, 4, 128, 1 << 20).is_err());
    }

    #[test]
    fn raid0_stripes_across_members() {
        let g = Geometry::new(Level::Raid0, Layout::None, 3, 64, 30720).expect("valid");
        let c = g.copies(64 * 4 + 5);
        assert_eq!(
            c.as_slice(),
            [Place {
                member: MemberIdx(1),
                sector: 64 + 5
            }]
        );
        assert_eq!(c.run_sectors, 59);
    }
}
