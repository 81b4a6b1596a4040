//! An array whose parity never agreed with its data: made over members that held
//! something else (`xraid create` without `--assume-clean`, its initial resync left
//! to run in the background), or made by md and never resynced. Its superblocks say
//! a resync is owed from the start, and its stripe-log rings hold no marker of it.
//! The log cannot vouch for such parity: writes must not fold their change into it
//! (read-modify-write) before the resync has passed, or a member lost then is
//! rebuilt from parity that never matched — the client's acknowledged data read back
//! wrong, without an error.

mod common;
use common::SECTOR;

use xraid_engine::sim::SimArray;
use xraid_engine::{Event, SyncKind};
use xraid_layout::{Geometry, Layout, Level};

/// A RAID-5 of 6 members (a one-chunk write is cheaper as read-modify-write there),
/// logging, restarted as an array made over old contents: every member holds random
/// bytes (parity agrees nowhere), the rings hold no marker of it, and a resync is
/// owed from the start.
fn made_over_old_contents(seed: u64) -> SimArray {
    made_over_old_contents_of(seed, 256)
}

/// [`made_over_old_contents`] with members of `member_sectors`.
fn made_over_old_contents_of(seed: u64, member_sectors: u64) -> SimArray {
    let geo = Geometry::new(
        Level::Raid5,
        Layout::default_for(Level::Raid5),
        6,
        16,
        member_sectors,
    )
    .expect("geometry");
    let mut array = common::blank_array_on(geo, seed, 256);
    array.power_cut_with(|a| {
        common::old_contents(a);
        // As the driver opens an array made over old contents that nothing has
        // written since (resync_offset 0 and the superblocks' first event count).
        a.engine.owe_initial_resync();
    });
    array.run();
    array.take_events();
    array
}

/// Writes one 4 KiB block into chunk 0 of `stripe` and fails that chunk's member.
/// Returns the block written and where it lies.
fn write_then_lose_its_member(array: &mut SimArray, stripe: u64) -> (Vec<u8>, u64) {
    let geo = *array.engine.geometry();
    let at = stripe * geo.stripe_data_sectors();
    let mut block = vec![0u8; 8 * SECTOR];
    array.rng().fill(&mut block);
    array.write(at, &block).expect("write");
    let member = geo.stripe_map(stripe).data_member(0);
    array.kill_member(member);
    array.engine.fail_member(member);
    array.run();
    (block, at)
}

/// What is wrong with reading `block` back at `at`, if anything.
fn read_back_wrong(array: &mut SimArray, at: u64, block: &[u8]) -> Option<String> {
    match array.read(at, (block.len() / SECTOR) as u64) {
        Ok(got) if got == block => None,
        Ok(_) => Some("read back wrong".into()),
        Err(e) => Some(e.to_string()),
    }
}

#[test]
fn a_write_before_the_initial_resync_survives_its_member_failing() {
    let mut wrong = Vec::new();
    for seed in 0..8u64 {
        let mut array = made_over_old_contents(3100 + seed);
        assert!(array.engine.resync_owed());
        let (block, at) = write_then_lose_its_member(&mut array, 3);
        if let Some(what) = read_back_wrong(&mut array, at, &block) {
            wrong.push((seed, what));
        }
    }
    assert!(
        wrong.is_empty(),
        "a write before the initial resync was lost with its member (seed, what): {wrong:?}"
    );
}

/// The same after a crash before the member fails: the marker the first open wrote
/// says the resync is still owed, so the next open does not trust parity either.
#[test]
fn the_owed_initial_resync_outlives_a_crash() {
    let mut wrong = Vec::new();
    for seed in 0..8u64 {
        let mut array = made_over_old_contents(3200 + seed);
        array.power_cut();
        array.run();
        assert!(array.engine.resync_owed());
        let (block, at) = write_then_lose_its_member(&mut array, 5);
        if let Some(what) = read_back_wrong(&mut array, at, &block) {
            wrong.push((seed, what));
        }
    }
    assert!(
        wrong.is_empty(),
        "after a crash, a write before the initial resync was lost with its member (seed, what): {wrong:?}"
    );
}

/// The resync makes parity agree everywhere (it repairs what it finds); a check
/// afterwards finds nothing, and what was written reads back.
#[test]
fn the_initial_resync_makes_parity_agree_and_keeps_what_was_written() {
    let mut array = made_over_old_contents(3300);
    let geo = *array.engine.geometry();
    let mut block = vec![0u8; 8 * SECTOR];
    array.rng().fill(&mut block);
    let at = 2 * geo.stripe_data_sectors() + 16;
    array.write(at, &block).expect("write");
    array
        .engine
        .start_sync(SyncKind::Resync, 0)
        .expect("resync");
    array.run_sync();
    assert!(!array.engine.resync_owed());
    let resynced = array.take_events().into_iter().find_map(|e| match e {
        Event::SyncFinished {
            kind: SyncKind::Resync,
            completed: true,
            mismatches,
            ..
        } => Some(mismatches),
        _ => None,
    });
    assert!(
        resynced.is_some_and(|m| m > 0),
        "the resync found parity that disagreed: {resynced:?}"
    );
    array.engine.start_sync(SyncKind::Check, 0).expect("check");
    array.run_sync();
    let checked = array.take_events().into_iter().find_map(|e| match e {
        Event::SyncFinished {
            kind: SyncKind::Check,
            completed: true,
            mismatches,
            ..
        } => Some(mismatches),
        _ => None,
    });
    assert_eq!(checked, Some(0));
    assert_eq!(array.read(at, 8).expect("read"), block);
}

/// A clean stop part way through the initial resync (the superblocks record where it
/// got to): below that point parity agrees, above it still not, and the next open
/// must not trust it there — the marker the first open wrote says the resync is owed.
#[test]
fn a_clean_stop_part_way_through_the_initial_resync_keeps_the_rest_owed() {
    let mut wrong = Vec::new();
    for seed in 0..8u64 {
        // Stripes enough that the resync's window stops well short of the last.
        let mut array = made_over_old_contents_of(3400 + seed, 4096);
        array
            .engine
            .start_sync(SyncKind::Resync, 0)
            .expect("resync");
        assert!(array.run_sync_until(4));
        let reached = array.engine.sync_progress().expect("running").done_below;
        array.engine.cancel_sync();
        array.run_sync();
        array.flush().expect("flush");
        array.power_cut_with(|a| a.engine.owe_resync_after_a_clean_stop(reached * 16));
        array.run();
        assert!(array.engine.resync_owed());
        let stripes = array.engine.geometry().stripes();
        let (block, at) = write_then_lose_its_member(&mut array, stripes - 2);
        if let Some(what) = read_back_wrong(&mut array, at, &block) {
            wrong.push((seed, reached, what));
        }
    }
    assert!(
        wrong.is_empty(),
        "after a clean stop mid-resync, a write past its checkpoint was lost with its member (seed, checkpoint, what): {wrong:?}"
    );
}

/// A block written before the initial resync that then fails to read is rebuilt from
/// the parity that write made, and returned right — also after a restart, when
/// nothing in memory says which rows a write made agree: no write of an array made
/// over old contents was ever cut off but under the log, so its parity is trusted as
/// md trusts it. (An array left dirty by md or without the log is not:
/// `review_no_marker.rs`.)
#[test]
fn a_block_written_before_the_initial_resync_that_fails_to_read_is_rebuilt() {
    let mut wrong = Vec::new();
    for seed in 0..8u64 {
        let mut array = made_over_old_contents(3500 + seed);
        let geo = *array.engine.geometry();
        let stripe = 4;
        let at = stripe * geo.stripe_data_sectors() + 16;
        let mut block = vec![0u8; 8 * SECTOR];
        array.rng().fill(&mut block);
        array.write(at, &block).expect("write");
        if seed % 2 == 1 {
            array.flush().expect("flush");
            array.power_cut();
            array.run();
        }
        let member = geo.stripe_map(stripe).data_member(1);
        let sector = stripe * u64::from(geo.chunk_sectors());
        array.add_bad_range(member, sector..sector + 8);
        if let Some(what) = read_back_wrong(&mut array, at, &block) {
            wrong.push((seed, what));
        }
    }
    assert!(
        wrong.is_empty(),
        "a block written before the initial resync was not rebuilt (seed, what): {wrong:?}"
    );
}
