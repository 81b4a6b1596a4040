//! Cases a review of the first unknown-rows change (65d1f78, 2026-11-27) found, each
//! failing then: unknown rows forgotten while they still hold a value nobody wrote
//! (silent wrong data), or still unknown after a durable client write made them known
//! (acknowledged data lost, loudly), and skipped stripes losing their doubt to them.

mod common;
use common::{
    filled_array_on, full_stripes_cut, neither, rebuild_on_a_new_device, two_chunk_write_cut,
    SECTOR,
};

use xraid_engine::{EngineError, Nanos, MARKER_RECORDS};
use xraid_layout::{Geometry, Layout, Level, MemberIdx};

/// More unknown bands than a marker's records ([`MARKER_RECORDS`]; 26 then), and no
/// bad block logs to spill them into: the marker kept the first 26 and dropped the
/// rest, which after a second (clean) power cut read, silently, the value torn parity
/// gave them. Now the rest go into the marker's span.
#[test]
fn more_unknown_bands_than_a_marker_names_are_not_forgotten_at_the_next_open() {
    let mut failures = Vec::new();
    for seed in 0..4u64 {
        let geo = Geometry::new(Level::Raid5, Layout::default_for(Level::Raid5), 5, 16, 8192)
            .expect("geometry");
        let (mut array, old) = filled_array_on(geo, 31_000 + seed, 2048);
        let per_stripe = 16 * u64::from(geo.data_disks());
        // Member 4 holds data in four stripes of five: more bands than a marker names.
        let stripes = MARKER_RECORDS as u64 * 5 / 4 + 20;
        // A full-stripe write in each of those stripes, none flushed.
        let dying = MemberIdx(4);
        let new = full_stripes_cut(&mut array, stripes, dying);
        let before = array.engine.unknown_sectors();
        // Another power cut, nothing in flight, everything flushed.
        array.flush().expect("flush");
        array.power_cut();
        array.run();
        let after = array.engine.unknown_sectors();
        // Reads of the dying member's chunks: each must fail, or read old or new.
        let mut silent = Vec::new();
        for s in 0..stripes {
            let map = geo.stripe_map(s);
            let Some(k) = (0..geo.data_disks()).find(|&k| map.data_member(k) == dying) else {
                continue;
            };
            let at = s * per_stripe + u64::from(k) * 16;
            let r = at as usize * SECTOR..(at as usize + 16) * SECTOR;
            match array.read(at, 16) {
                Ok(got) if neither(&got, &old[r.clone()], &new[r]) => silent.push(s),
                Ok(_) | Err(EngineError::Unreadable { .. }) => {}
                Err(e) => panic!("seed {seed} stripe {s}: {e}"),
            }
        }
        // More than was lost may count unknown after the cut (the markers' span),
        // never less.
        if after < before || !silent.is_empty() {
            failures.push(format!(
                "seed {seed}: unknown sectors {before} before the second cut, {after} after; \
                 stripes reading neither old nor new, silently: {silent:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A write over unknown rows in a stripe whose parity member is missing goes out
/// unlogged (no parity member in sync); no seq became durable, so the flush wrote no
/// marker and the rings still named the rows: after a clean power cut (the write
/// flushed and acknowledged) they read as errors again. Now the flush round owes a
/// marker, numbered above the last.
#[test]
fn a_flushed_unlogged_write_over_unknown_rows_reads_back_after_a_cut() {
    let mut failures = Vec::new();
    for seed in 0..8u64 {
        let (mut array, _old, _new, dying) = two_chunk_write_cut(31_100 + seed);
        assert!(
            array.read(0, 16).is_err(),
            "seed {seed}: unknown after the cut"
        );
        rebuild_on_a_new_device(&mut array, dying);
        let p = array.engine.geometry().stripe_map(0).p();
        array.kill_member(p);
        array.engine.fail_member(p);
        array.run();
        let fresh = vec![0x3cu8; 16 * SECTOR];
        array.write(0, &fresh).expect("write over the unknown rows");
        assert_eq!(array.read(0, 16).expect("written"), fresh);
        array.flush().expect("flush");
        array.power_cut();
        array.run();
        match array.read(0, 16) {
            Ok(got) if got == fresh => {}
            Ok(_) => failures.push(format!("seed {seed}: wrong data")),
            Err(e) => failures.push(format!(
                "seed {seed}: flushed write reads as an error after a cut: {e} (unknown sectors {})",
                array.engine.unknown_sectors()
            )),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Unknown rows were forgotten when the write over them finished, before it was
/// durable: a flush issued while the write was in flight wrote a marker without them,
/// a power cut undid the write on the (rebuilt) member, and they read, silently,
/// neither old nor new. Now the markers name them until a flush round begun after the
/// write completes.
#[test]
fn unknown_rows_are_not_forgotten_before_the_write_over_them_is_durable() {
    let mut failures = Vec::new();
    let mut forgotten = 0;
    for seed in 0..32u64 {
        let (mut array, old, _new, dying) = two_chunk_write_cut(31_200 + seed);
        rebuild_on_a_new_device(&mut array, dying);
        let geo = *array.engine.geometry();
        let map = geo.stripe_map(0);
        // A write elsewhere that the flush below makes durable (so a marker follows).
        let elsewhere = 5 * 16 * u64::from(geo.data_disks());
        array
            .write(elsewhere, &vec![0x11u8; 8 * SECTOR])
            .expect("write");
        // The flush's I/O to one member (only that one) is slow: it answers long after
        // the write over chunk 0 finished.
        let slow = map.data_member(2);
        let mut fresh = vec![0u8; 16 * SECTOR];
        array.rng().fill(&mut fresh);
        array.start_write(0, &fresh);
        array.role_device_mut(slow).extra_latency = Nanos(1_000_000_000);
        array.start_flush();
        array.role_device_mut(slow).extra_latency = Nanos(0);
        array.run();
        let unknown_before_cut = array.engine.unknown_sectors();
        array.power_cut();
        array.run();
        match array.read(0, 16) {
            Ok(got) => {
                if array.engine.unknown_sectors() == 0 {
                    forgotten += 1;
                }
                if neither(&got, &old[..16 * SECTOR], &fresh) {
                    failures.push(format!(
                        "seed {seed}: reads neither old nor new, silently (unknown before the cut: {unknown_before_cut})"
                    ));
                }
            }
            Err(EngineError::Unreadable { .. }) => {}
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    assert!(
        failures.is_empty(),
        "forgotten in {forgotten} seeds: {failures:#?}"
    );
}

/// Unknown rows took the marker's records first, so one unknown band pushed the last
/// of a marker's worth of skipped stripes
/// (`as_many_skipped_stripes_as_a_marker_names_keep_their_doubt`) off the list
/// (FLAG_SKIPPED, an unpinned doubt), and after a second cut a member lost later was
/// rebuilt there through the parity the first cut may have torn, silently. Now the
/// skipped bands come first.
#[test]
fn an_unknown_band_does_not_cost_a_skipped_stripe_its_doubt() {
    let mut wrong_seeds = Vec::new();
    for seed in 0..8u64 {
        let geo = Geometry::new(Level::Raid5, Layout::default_for(Level::Raid5), 5, 16, 8192)
            .expect("geometry");
        let (mut array, data) = filled_array_on(geo, 31_300 + seed, 8192);
        // Each member fails a fifth of the replay's reads: none is failed for them.
        array.engine.set_config(xraid_engine::EngineConfig {
            max_read_errors: u32::MAX,
            ..array.engine.config()
        });
        array.enable_bad_block_logs(64);
        let per_stripe = 16 * u64::from(geo.data_disks());
        let n = MARKER_RECORDS as u64;
        // One unknown band, past the skipped stripes below: a two-chunk write there,
        // member 0 dying with the power, then rebuilt on a new device (the array is
        // whole again).
        let s_u = n + 10;
        let dying = geo.stripe_map(s_u).data_member(0);
        let mut new = vec![0u8; 32 * SECTOR];
        array.rng().fill(&mut new);
        array.write(s_u * per_stripe, &new).expect("write");
        array.power_cut_with(|a| {
            a.kill_member(dying);
            a.engine.fail_member(dying);
        });
        array.run();
        assert!(
            array.engine.unknown_sectors() > 0,
            "seed {seed}: an unknown band"
        );
        rebuild_on_a_new_device(&mut array, dying);
        // Now the skipped stripes of `skipped_in_stripes` (parity_in_doubt_review2),
        // as many as a marker names.
        let skipped_before = array.engine.stats().log_entries_skipped;
        for s in 0..n {
            array
                .write(s * per_stripe, &vec![0x6bu8; 8 * SECTOR])
                .expect("write");
        }
        let bad: Vec<(MemberIdx, std::ops::Range<u64>)> = (0..n)
            .map(|s| {
                let m = geo.stripe_map(s).data_member(1);
                (m, geo.member_sector(s, 0)..geo.member_sector(s, 8))
            })
            .collect();
        array.power_cut_with(move |a| {
            for (m, r) in bad {
                a.members[m.index()].bad_ranges.push(r);
            }
        });
        array.run();
        assert_eq!(
            array.engine.stats().log_entries_skipped - skipped_before,
            n,
            "seed {seed}: every write's entry skipped"
        );
        for m in &mut array.members {
            m.bad_ranges.clear();
        }
        array.power_cut();
        array.run();
        // A member holding data in the last of them (the one pushed off the list).
        let gone = geo.stripe_map(n - 1).data_member(2);
        array.kill_member(gone);
        array.engine.fail_member(gone);
        array.run();
        let mut wrong = Vec::new();
        for s in 0..n {
            let map = geo.stripe_map(s);
            let Some(k) = (2..geo.data_disks()).find(|&k| map.data_member(k) == gone) else {
                continue;
            };
            let at = s * per_stripe + u64::from(k) * 16;
            if let Ok(got) = array.read(at, 8) {
                if got != data[at as usize * SECTOR..(at as usize + 8) * SECTOR] {
                    wrong.push(s);
                }
            }
        }
        if !wrong.is_empty() {
            wrong_seeds.push((seed, wrong));
        }
    }
    assert!(
        wrong_seeds.is_empty(),
        "stripes read back wrong, silently: {wrong_seeds:?}"
    );
}
