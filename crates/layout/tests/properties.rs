//! Property tests of md's address arithmetic: every array sector has exactly one data
//! location (and RAID-1/10 copies never share a place), and parity rotates exactly as a
//! line-by-line transcription of md's `raid5_compute_sector` says.

use std::collections::HashSet;

use proptest::prelude::*;
use xraid_layout::{
    Geometry, Layout, Level, MemberIdx, ParityAlgorithm, Place, Raid10Layout, StripeRole,
};

fn parity_geometry() -> impl Strategy<Value = Geometry> {
    (
        prop::sample::select(vec![Level::Raid4, Level::Raid5, Level::Raid6]),
        prop::sample::select(ParityAlgorithm::ALL.to_vec()),
        0u16..10,
        3u32..6,
        1u64..12,
    )
        .prop_map(|(level, algorithm, extra, chunk_shift, member_chunks)| {
            let layout = if level == Level::Raid4 {
                Layout::default_for(level)
            } else {
                Layout::Parity(algorithm)
            };
            let disks = level.min_members() + extra;
            let chunk = 1u32 << chunk_shift;
            Geometry::new(
                level,
                layout,
                disks,
                chunk,
                u64::from(chunk) * member_chunks,
            )
            .expect("valid geometry")
        })
}

fn copy_geometry() -> impl Strategy<Value = Geometry> {
    (
        prop::sample::select(vec![Level::Raid0, Level::Raid1, Level::Raid10]),
        1u8..4,
        1u8..4,
        any::<bool>(),
        2u16..9,
        3u32..6,
        1u64..12,
    )
        .prop_filter_map(
            "raid10 needs copies ≤ members",
            |(level, near, far, offset, disks, chunk_shift, member_chunks)| {
                let layout = match level {
                    Level::Raid10 => Layout::Raid10(Raid10Layout {
                        near_copies: near,
                        far_copies: far,
                        offset: offset && far > 1 && near == 1,
                    }),
                    _ => Layout::None,
                };
                let chunk = 1u32 << chunk_shift;
                Geometry::new(
                    level,
                    layout,
                    disks,
                    chunk,
                    u64::from(chunk) * member_chunks,
                )
                .ok()
            },
        )
}

proptest! {
    #[test]
    fn parity_levels_map_each_sector_to_one_data_place(geo in parity_geometry()) {
        let mut seen: HashSet<Place> = HashSet::new();
        for sector in 0..geo.array_sectors() {
            let copies = geo.copies(sector);
            prop_assert_eq!(copies.as_slice().len(), 1);
            let place = copies.as_slice()[0];
            prop_assert!(place.sector < geo.member_sectors());
            prop_assert!(place.member.0 < geo.raid_disks());
            prop_assert!(seen.insert(place), "{:?} mapped twice", place);
            let pos = geo.stripe_pos(sector);
            let map = geo.stripe_map(pos.stripe);
            prop_assert_eq!(map.role_of(place.member), StripeRole::Data(pos.data_index));
        }
        // Data fills every member sector except those of P and Q.
        let parity = u64::from(geo.level().parity_count());
        prop_assert_eq!(seen.len() as u64, geo.member_sectors() * (u64::from(geo.raid_disks()) - parity));
    }

    #[test]
    fn parity_rotates_as_md(geo in parity_geometry()) {
        let n = geo.raid_disks();
        let algorithm = match geo.layout() { Layout::Parity(a) => a.md_value(), _ => 5 };
        for stripe in 0..u64::from(n) * 2 {
            let map = geo.stripe_map(stripe);
            let mut slots = Vec::new();
            for i in 0..map.data_disks() {
                let (dd, pd, qd) = md_compute(geo.level().md_level(), algorithm, n, stripe, i);
                prop_assert_eq!(map.data_member(i), MemberIdx(dd));
                prop_assert_eq!(map.p(), MemberIdx(pd));
                prop_assert_eq!(map.q().map(|q| q.0), qd);
                slots.push(map.syndrome_slot(i));
            }
            slots.sort_unstable();
            prop_assert_eq!(slots, (0..usize::from(map.data_disks())).collect::<Vec<_>>());
            if let Some(q) = qd_of(&map) {
                // md numbers data in the order it meets them walking from after Q.
                let d0 = if q == n - 1 { 0 } else { q + 1 };
                let mut slot = 0;
                for k in 0..n {
                    let m = MemberIdx((d0 + k) % n);
                    if let StripeRole::Data(i) = map.role_of(m) {
                        prop_assert_eq!(map.syndrome_slot(i), slot);
                        slot += 1;
                    }
                }
            }
        }
    }

    #[test]
    fn copies_never_share_a_place(geo in copy_geometry()) {
        let mut seen: HashSet<Place> = HashSet::new();
        let mut sector = 0;
        while sector < geo.array_sectors() {
            let copies = geo.copies(sector);
            prop_assert_eq!(copies.as_slice().len(), usize::from(geo.copies_count()));
            let members: HashSet<u16> = copies.as_slice().iter().map(|p| p.member.0).collect();
            prop_assert_eq!(members.len(), copies.as_slice().len(), "copies on distinct members");
            for p in copies.as_slice() {
                prop_assert!(p.sector < geo.member_sectors(), "{:?} beyond {}", p, geo.member_sectors());
                prop_assert!(seen.insert(*p), "{:?} used twice", p);
            }
            prop_assert!(copies.run_sectors >= 1);
            // Sectors within a run map contiguously on every copy.
            let last = sector + copies.run_sectors.min(geo.array_sectors() - sector) - 1;
            let end = geo.copies(last);
            for (a, b) in copies.as_slice().iter().zip(end.as_slice()) {
                prop_assert_eq!(a.member, b.member);
                prop_assert_eq!(b.sector - a.sector, last - sector);
            }
            // Walk every sector of small arrays, one per run of larger ones.
            sector += if geo.array_sectors() < 4096 { 1 } else { copies.run_sectors };
        }
    }
}

fn qd_of(map: &xraid_layout::StripeMap) -> Option<u16> {
    map.q().map(|q| q.0)
}

/// md's `raid5_compute_sector` (drivers/md/raid5.c), the part that places data, P and
/// Q, transcribed statement by statement: returns (dd_idx, pd_idx, qd_idx).
fn md_compute(
    level: i32,
    algorithm: u32,
    raid_disks: u16,
    stripe: u64,
    data_index: u16,
) -> (u16, u16, Option<u16>) {
    let max_degraded = if level == 6 { 2 } else { 1 };
    let data_disks = raid_disks - max_degraded;
    let mut dd_idx = data_index;
    let stripe2 = u16::try_from(stripe % u64::from(raid_disks)).expect("small");
    let mut qd_idx = None;
    let pd_idx;
    match level {
        4 => pd_idx = data_disks,
        5 => match algorithm {
            0 => {
                pd_idx = data_disks - stripe2;
                if dd_idx >= pd_idx {
                    dd_idx += 1;
                }
            }
            1 => {
                pd_idx = stripe2;
                if dd_idx >= pd_idx {
                    dd_idx += 1;
                }
            }
            2 => {
                pd_idx = data_disks - stripe2;
                dd_idx = (pd_idx + 1 + dd_idx) % raid_disks;
            }
            3 => {
                pd_idx = stripe2;
                dd_idx = (pd_idx + 1 + dd_idx) % raid_disks;
            }
            4 => {
                pd_idx = 0;
                dd_idx += 1;
            }
            _ => pd_idx = data_disks,
        },
        _ => match algorithm {
            0 | 1 => {
                pd_idx = if algorithm == 0 {
                    raid_disks - 1 - stripe2
                } else {
                    stripe2
                };
                let mut q = pd_idx + 1;
                if pd_idx == raid_disks - 1 {
                    dd_idx += 1;
                    q = 0;
                } else if dd_idx >= pd_idx {
                    dd_idx += 2;
                }
                qd_idx = Some(q);
            }
            2 | 3 => {
                pd_idx = if algorithm == 2 {
                    raid_disks - 1 - stripe2
                } else {
                    stripe2
                };
                qd_idx = Some((pd_idx + 1) % raid_disks);
                dd_idx = (pd_idx + 2 + dd_idx) % raid_disks;
            }
            4 => {
                pd_idx = 0;
                qd_idx = Some(1);
                dd_idx += 2;
            }
            _ => {
                pd_idx = data_disks;
                qd_idx = Some(data_disks + 1);
            }
        },
    }
    (dd_idx, pd_idx, qd_idx)
}
