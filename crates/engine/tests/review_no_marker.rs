//! Review of 457fd56/2582783: the rule for rings that hold no marker of the array
//! at an open that owes a resync.

mod common;
use common::SECTOR;

use xraid_engine::{EngineConfig, MemberIdx};
use xraid_layout::{Geometry, Layout, Level};

/// An array whose parity agrees (made on zeros; with `degraded`, its member 3 gone
/// before the write), first opened to write, written but cut before its first flush:
/// the rings hold its entries but no marker yet. The replay reads every entry:
/// nothing was skipped, parity is right. Returns the replay's skipped count.
fn skipped_after_a_cut_before_the_first_flush(seed: u64, degraded: bool) -> u64 {
    skipped_after_a_cut(seed, degraded, true)
}

/// A new array (made on zeros; with `degraded`, its member 3 gone first), written
/// once and cut: after the write's I/O went out (`sent`), or before any of it did.
/// Returns the replay's skipped count.
fn skipped_after_a_cut(seed: u64, degraded: bool, sent: bool) -> u64 {
    let geo = Geometry::new(Level::Raid5, Layout::default_for(Level::Raid5), 4, 16, 256)
        .expect("geometry");
    let mut array = common::blank_array_on(geo, seed, 256);
    if degraded {
        array.kill_member(MemberIdx(3));
        array.engine.fail_member(MemberIdx(3));
        array.run();
    }
    let mut block = vec![0u8; 8 * SECTOR];
    array.rng().fill(&mut block);
    // A write, never flushed by the client.
    let _ = array.start_write(3 * geo.stripe_data_sectors(), &block);
    if sent {
        array.run();
        array.power_cut();
    } else {
        array.power_cut_now();
    }
    array.run();
    array.engine.stats().log_entries_skipped
}

#[test]
fn a_cut_before_the_first_flush_of_a_clean_array_skips_nothing() {
    let skipped: Vec<(u64, u64)> = (0..8u64)
        .map(|seed| {
            (
                seed,
                skipped_after_a_cut_before_the_first_flush(4100 + seed, false),
            )
        })
        .filter(|&(_, n)| n != 0)
        .collect();
    assert!(
        skipped.is_empty(),
        "a clean array cut before its first flush: replay counted skipped entries (seed, count): {skipped:?}"
    );
}

/// The same, degraded: a member was already missing when the write came.
#[test]
fn a_cut_before_the_first_flush_of_a_degraded_clean_array_skips_nothing() {
    let skipped: Vec<(u64, u64)> = (0..8u64)
        .map(|seed| {
            (
                seed,
                skipped_after_a_cut_before_the_first_flush(4200 + seed, true),
            )
        })
        .filter(|&(_, n)| n != 0)
        .collect();
    assert!(skipped.is_empty(), "(seed, count): {skipped:?}");
}

/// An array served without the stripe log (`--consistency resync`, or by md) is cut
/// mid-write, then opened with the log: its rings hold no marker of it. Chunk 0's
/// write to stripe 0 may have been torn (data without parity or the other way), and
/// chunk 1's rows then fail to read: rebuilt through that parity they may be what was
/// never written. Opened again without the log the read is refused
/// (`parity_in_doubt.rs`, md's write hole); with the log, whose rings know nothing of
/// the cut, it must be too — not answered wrong.
#[test]
fn a_torn_stripe_of_an_array_served_without_the_log_is_not_rebuilt_wrong_with_it() {
    for with_log in [false, true] {
        let mut wrong = Vec::new();
        let mut errors = 0;
        for seed in 0..32u64 {
            let (mut array, data) = common::filled_array(Level::Raid5, 5, seed + 7100, 0);
            let geo = *array.engine.geometry();
            let map = geo.stripe_map(0);
            let failing = map.data_member(1);
            let rows = geo.member_sector(0, 0)..geo.member_sector(0, 8);
            array.write(0, &vec![0x6bu8; 8 * SECTOR]).expect("write");
            array.power_cut();
            if with_log {
                let config = array.engine.config();
                array.engine.set_config(EngineConfig {
                    log_sectors: 256,
                    ..config
                });
            }
            array.run();
            assert!(array.engine.resync_owed());
            array.members[failing.index()].bad_ranges.push(rows);
            match array.read(16, 8) {
                Ok(got) if got != data[16 * SECTOR..24 * SECTOR] => wrong.push(seed),
                Ok(_) => {}
                Err(_) => errors += 1,
            }
        }
        assert!(
            wrong.is_empty(),
            "opened {} the log: rows rebuilt through torn parity read back wrong (seeds {wrong:?}; {errors} refused)",
            if with_log { "with" } else { "without" }
        );
    }
}

/// A new array's first open owes no resync, and its rings hold nothing of it: a
/// marker goes on them before any write. Cut after a write began (the superblocks
/// gone dirty: the next open owes a resync) but before its entry reached a ring, the
/// replay finds the array known with nothing cut off, and skips nothing. Before
/// 2026-11-29 the rings then knew nothing of the array, the rule for such rings
/// counted a skip, and a degraded array stayed dirty for good (a crash loop's first
/// kill, under load, found the window: `degraded_raid6_with_checksums_survives_a_crash_loop`).
#[test]
fn a_cut_before_the_first_entry_of_a_new_array_skips_nothing() {
    let skipped: Vec<(bool, u64, u64)> = [false, true]
        .into_iter()
        .flat_map(|degraded| (0..8u64).map(move |seed| (degraded, seed)))
        .map(|(degraded, seed)| {
            (
                degraded,
                seed,
                skipped_after_a_cut(4300 + seed, degraded, false),
            )
        })
        .filter(|&(_, _, n)| n != 0)
        .collect();
    assert!(skipped.is_empty(), "(degraded, seed, skipped): {skipped:?}");
}
