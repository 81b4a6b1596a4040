//! Rows nobody knows (`unknown` in the engine): a member dies with the power under a
//! write that changed two chunks of the same rows, and the replay cannot tell what
//! the gone chunk held. Its rows read as errors — through another power cut, and after
//! the member is rebuilt — until a write covers them; every other row reads right.

mod common;
use common::{
    filled_array_on, full_stripes_cut, logged_array, neither, rebuild_on_a_new_device,
    two_chunk_write_cut, SECTOR,
};

use xraid_engine::sim::SimArray;
use xraid_engine::{EngineError, MARKER_RECORDS};
use xraid_layout::{Geometry, Layout, Level};

/// Checks every sector of the array but chunk 0 of stripe 0 (sectors 0..16): chunk 1
/// of stripe 0 holds the write's rows or the old ones, the rest what the fill wrote.
fn the_rest_reads_right(array: &mut SimArray, old: &[u8], new: &[u8]) {
    let total = array.engine.array_sectors();
    let got = array.read(16, total - 16).expect("the rest reads");
    assert!(
        !neither(
            &got[..16 * SECTOR],
            &old[16 * SECTOR..32 * SECTOR],
            &new[16 * SECTOR..]
        ),
        "chunk 1 reads as neither old nor new"
    );
    assert!(
        got[16 * SECTOR..] == old[32 * SECTOR..],
        "other stripes changed"
    );
}

#[test]
fn a_gone_chunk_the_replay_cannot_know_reads_as_an_error_and_nothing_else_does() {
    let mut unknown = 0;
    for seed in 0..32u64 {
        let (mut array, old, new, _) = two_chunk_write_cut(7_100 + seed);
        match array.read(0, 16) {
            Ok(got) => assert!(
                !neither(&got, &old[..16 * SECTOR], &new[..16 * SECTOR]),
                "seed {seed}: chunk 0 reads as neither old nor new"
            ),
            Err(EngineError::Unreadable { .. }) => unknown += 1,
            Err(e) => panic!("seed {seed}: {e}"),
        }
        the_rest_reads_right(&mut array, &old, &new);
    }
    // Every seed leaves chunk 0's rows unknowable: the replay cannot tell whether P
    // holds the write where chunk 1 does not, or the other way round.
    assert_eq!(unknown, 32, "the unknown rows read as errors");
}

#[test]
fn unknown_rows_stay_so_through_another_cut_and_a_rebuild_until_written() {
    for seed in 0..16u64 {
        let (mut array, old, new, dying) = two_chunk_write_cut(7_200 + seed);
        assert!(
            array.read(0, 16).is_err(),
            "seed {seed}: unknown after the cut"
        );
        // Another power cut: the rings' marker names the rows.
        array.flush().expect("flush");
        array.power_cut();
        array.run();
        assert!(
            array.read(0, 16).is_err(),
            "seed {seed}: unknown after a second cut"
        );
        assert!(array.read(8, 1).is_err(), "seed {seed}: any sector of them");
        // Rebuilt on a new device: parity gives the rows a value, still unknown.
        rebuild_on_a_new_device(&mut array, dying);
        assert!(
            array.read(0, 16).is_err(),
            "seed {seed}: unknown after the rebuild"
        );
        the_rest_reads_right(&mut array, &old, &new);
        // A write over half of them makes that half known; the rest stays lost.
        let fresh = vec![0xc3u8; 8 * SECTOR];
        array.write(0, &fresh).expect("write over them");
        assert_eq!(array.read(0, 8).expect("written rows read"), fresh);
        assert!(array.read(8, 8).is_err(), "seed {seed}: the other half");
        array.flush().expect("flush");
        array.power_cut();
        array.run();
        assert_eq!(array.read(0, 8).expect("after a cut"), fresh);
        assert!(
            array.read(8, 8).is_err(),
            "seed {seed}: the other half, after a cut"
        );
        // Any other member can still be rebuilt: parity agrees with the value the
        // unknown rows were given.
        let other = array.engine.geometry().stripe_map(0).data_member(1);
        rebuild_on_a_new_device(&mut array, other);
        the_rest_reads_right(&mut array, &old, &new);
    }
}

#[test]
fn a_one_chunk_write_under_a_dying_member_reads_old_or_new() {
    for seed in 0..32u64 {
        let (mut array, old) = logged_array(Level::Raid5, 4, 7_300 + seed);
        let dying = array.engine.geometry().stripe_map(0).data_member(0);
        let mut new = vec![0u8; 16 * SECTOR];
        array.rng().fill(&mut new);
        array.write(0, &new).expect("write");
        array.power_cut_with(|a| {
            a.kill_member(dying);
            a.engine.fail_member(dying);
        });
        array.run();
        // One chunk changed: parity as the cut left it gives old or new, both right.
        let got = array.read(0, 16).expect("a single change is known");
        assert!(!neither(&got, &old[..16 * SECTOR], &new), "seed {seed}");
    }
}

/// More unknown bands than a marker names ([`MARKER_RECORDS`]): the rest go into the parity members'
/// bad block logs, so that every one of them still reads as an error after another
/// power cut.
#[test]
fn more_unknown_rows_than_a_marker_names_outlive_another_cut() {
    for seed in 0..4u64 {
        let geo = Geometry::new(Level::Raid5, Layout::default_for(Level::Raid5), 4, 16, 8192)
            .expect("geometry");
        let (mut array, old) = filled_array_on(geo, 7_400 + seed, 2048);
        array.enable_bad_block_logs(64);
        let dying = geo.stripe_map(0).data_member(0);
        let stripe_sectors = geo.stripe_data_sectors();
        // Every stripe written whole, none of it flushed.
        let new = full_stripes_cut(&mut array, geo.stripes(), dying);
        // The dying member's chunk in each stripe where it holds data.
        let chunk = u64::from(geo.chunk_sectors());
        let its_chunks: Vec<u64> = (0..geo.stripes())
            .filter_map(|stripe| {
                let map = geo.stripe_map(stripe);
                (0..map.data_disks())
                    .find(|&i| map.data_member(i) == dying)
                    .map(|i| stripe * stripe_sectors + u64::from(i) * chunk)
            })
            .collect();
        assert!(
            its_chunks.len() > MARKER_RECORDS,
            "more bands than a marker names"
        );
        let check = |array: &mut SimArray, when: &str| {
            for &at in &its_chunks {
                assert!(
                    array.read(at, chunk).is_err(),
                    "seed {seed}: sector {at} readable {when}"
                );
            }
        };
        check(&mut array, "after the cut");
        array.flush().expect("flush");
        array.power_cut();
        array.run();
        check(&mut array, "after a second cut");
        // Every other chunk reads old or new.
        for stripe in 0..geo.stripes() {
            for i in 0..u64::from(geo.data_disks()) {
                let at = stripe * stripe_sectors + i * chunk;
                if its_chunks.contains(&at) {
                    continue;
                }
                let got = array.read(at, chunk).expect("another member's chunk");
                let r = at as usize * SECTOR..(at + chunk) as usize * SECTOR;
                assert!(
                    !neither(&got, &old[r.clone()], &new[r]),
                    "seed {seed}: sector {at}"
                );
            }
        }
    }
}

/// Unknown rows a marker named before md ran the array stay unknown after md's
/// session, though md's writes are unknown to the rings: the rows may be ones md
/// wrote since (and served), or ones it never wrote, which hold what nobody wrote.
/// xraid cannot tell which, and refuses them until a write covers them (loud; a
/// false refusal where md wrote them), where dropping them would serve rows nobody
/// wrote without an error. Here md writes the chunk whole: xraid refuses it, and a
/// write of xraid's own makes it readable again (found by a review of the
/// superblock stamp, which left this as it was).
#[test]
fn unknown_rows_stay_unknown_after_md_ran_the_array_until_written() {
    for seed in 0..8u64 {
        let (mut array, _, _, _) = two_chunk_write_cut(7_900 + seed);
        assert!(
            array.read(0, 16).is_err(),
            "seed {seed}: unknown after the cut"
        );
        array.flush().expect("flush");
        let geo = *array.engine.geometry();
        let map = geo.stripe_map(0);
        let chunk = u64::from(geo.chunk_sectors()) as usize * SECTOR;
        let mut md_data = vec![0u8; chunk];
        array.rng().fill(&mut md_data);
        let md = md_data.clone();
        // md runs the degraded array, writes the missing member's chunk (parity from
        // md's data and the other chunks) and stops cleanly.
        array.power_cut_then_clean_open_with(move |a: &mut SimArray| {
            a.engine.superblocks_unstamped();
            let mut p = md.clone();
            for d in 1..usize::from(geo.data_disks()) {
                let m = map.data_member(d as u16).index();
                for (x, y) in p.iter_mut().zip(&a.members[m].data[..chunk]) {
                    *x ^= y;
                }
            }
            a.members[map.p().index()].data[..chunk].copy_from_slice(&p);
        });
        array.run();
        assert!(
            array.read(0, 16).is_err(),
            "seed {seed}: rows the marker named unknown read after md's session"
        );
        array.write(0, &md_data).expect("a write over the rows");
        assert_eq!(array.read(0, 16).expect("written"), md_data, "seed {seed}");
    }
}
