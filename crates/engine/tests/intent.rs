//! The write-intent bitmap in the simulator: bits reach every member before the
//! writes they cover, rounds batch concurrent writes, quiet chunks are cleared only on
//! a whole array, and resyncs and catch-ups visit only dirty chunks.

mod common;
use common::check_mismatches;

use xraid_engine::sim::SimArray;
use xraid_engine::{
    Engine, Event, MemberIdx, Nanos, SyncKind, WriteIntentSetup, INTENT_HEADER_BYTES,
};
use xraid_layout::{Geometry, Layout, Level, ParityAlgorithm};

/// Sectors of the sync range per bit in these tests.
const CHUNK_SECTORS: u64 = 64;
const QUIET: Nanos = Nanos(5_000_000_000);

fn raid5() -> Geometry {
    Geometry::new(
        Level::Raid5,
        Layout::Parity(ParityAlgorithm::LeftSymmetric),
        4,
        16,
        1024,
    )
    .expect("geometry")
}

fn raid1() -> Geometry {
    Geometry::new(Level::Raid1, Layout::None, 2, 0, 2048).expect("geometry")
}

/// A bitmap over `geo`'s members with the chunks in `set` dirty (as found after a
/// crash), or blank and written whole.
fn setup(geo: Geometry, set: &[u64], rewrite: bool) -> WriteIntentSetup {
    let chunks = geo.member_sectors().div_ceil(CHUNK_SECTORS);
    let bytes = (INTENT_HEADER_BYTES as u64 + chunks.div_ceil(8)).next_multiple_of(512) as usize;
    let mut image = vec![0; bytes];
    for &c in set {
        image[INTENT_HEADER_BYTES + (c / 8) as usize] |= 1 << (c % 8);
    }
    WriteIntentSetup {
        image,
        chunks,
        chunk_sectors: CHUNK_SECTORS,
        block_bytes: 512,
        clear_after: QUIET,
        rewrite,
    }
}

fn with_bitmap(geo: Geometry) -> SimArray {
    let mut array = SimArray::new(geo, 7);
    array.engine.enable_write_intent(setup(geo, &[], true));
    // No superblocks here: events_cleared is always current.
    array.engine.allow_write_intent_clears(true);
    array
}

fn bit(image: &[u8], chunk: u64) -> bool {
    image[INTENT_HEADER_BYTES + (chunk / 8) as usize] & (1 << (chunk % 8)) != 0
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Sync units the next sync visits: the engine's counter before and after.
fn run_sync_units(array: &mut SimArray) -> u64 {
    let before = array.engine.stats().sync_units;
    array.run_sync();
    array.engine.stats().sync_units - before
}

#[test]
fn a_write_is_acknowledged_only_once_its_bit_is_on_every_member() {
    let mut array = with_bitmap(raid1());
    array
        .write(3 * CHUNK_SECTORS + 5, &pattern(1, 4096))
        .expect("write");
    for m in &array.members {
        assert!(bit(&m.bitmap, 3), "the bit is on the member");
        assert!(!bit(&m.bitmap, 2) && !bit(&m.bitmap, 4));
    }
    // A second write to the same chunk needs no bitmap I/O.
    let rounds = array.engine.write_intent_rounds();
    array
        .write(3 * CHUNK_SECTORS + 40, &pattern(2, 512))
        .expect("write");
    assert_eq!(array.engine.write_intent_rounds(), rounds);
}

#[test]
fn concurrent_writes_to_new_chunks_share_bitmap_rounds() {
    let mut array = with_bitmap(raid1());
    array.run();
    let rounds = array.engine.write_intent_rounds();
    let data = pattern(3, 512);
    let mut bufs = Vec::new();
    for chunk in 0..16 {
        let (_, buf) = array.start_write(chunk * CHUNK_SECTORS, &data);
        bufs.push(buf);
    }
    let replies = array.run();
    assert_eq!(replies.len(), 16);
    assert!(replies.iter().all(|r| r.result.is_ok()));
    for buf in bufs {
        array.engine.buffers_mut().free(buf);
    }
    let used = array.engine.write_intent_rounds() - rounds;
    // The first write's round, then one for everything that arrived meanwhile.
    assert!(used <= 2, "16 new chunks took {used} rounds");
    assert_eq!(array.engine.write_intent_dirty(), Some(16));
}

#[test]
fn quiet_chunks_are_cleared_on_a_whole_array_only() {
    let mut array = with_bitmap(raid5());
    array.write(0, &pattern(4, 8192)).expect("write");
    array.flush().expect("flush");
    assert_eq!(array.engine.write_intent_dirty(), Some(1));
    array.pass_time(Nanos(QUIET.0 / 2));
    assert_eq!(
        array.engine.write_intent_dirty(),
        Some(1),
        "not quiet long enough"
    );
    array.pass_time(QUIET);
    assert_eq!(array.engine.write_intent_dirty(), Some(0));
    for m in &array.members {
        assert!(!bit(&m.bitmap, 0), "the clear reached the member");
    }
    // Degraded, bits stay: they are what a returning member catches up on.
    array.kill_member(MemberIdx(2));
    let last = array.engine.geometry().array_sectors() - 16;
    array
        .write(last, &pattern(5, 8192))
        .expect("write degraded");
    array.flush().expect("flush");
    array.pass_time(Nanos(QUIET.0 * 3));
    assert_eq!(array.engine.write_intent_dirty(), Some(1));
}

#[test]
fn a_returning_member_catches_up_on_what_changed_only() {
    let geo = raid5();
    let mut array = with_bitmap(geo);
    let total = geo.array_sectors();
    let mut expected = pattern(6, (total * 512) as usize);
    array.write(0, &expected).expect("fill");
    array.flush().expect("flush");
    array.pass_time(Nanos(QUIET.0 * 2));
    assert_eq!(array.engine.write_intent_dirty(), Some(0));

    array.kill_member(MemberIdx(1));
    let change = pattern(7, 4096);
    let at = 3 * geo.stripe_data_sectors();
    array.write(at, &change).expect("write while degraded");
    expected[(at * 512) as usize..(at * 512) as usize + change.len()].copy_from_slice(&change);
    array.flush().expect("flush");

    array
        .return_member(MemberIdx(1), false)
        .expect("member returns");
    array
        .engine
        .start_sync_where_dirty(SyncKind::Recover, 0)
        .expect("catch-up");
    let units = run_sync_units(&mut array);
    let stripes = geo.stripes();
    let per_chunk = CHUNK_SECTORS / u64::from(geo.chunk_sectors());
    assert!(
        units <= per_chunk,
        "caught up {units} of {stripes} stripes; one chunk is {per_chunk}"
    );
    assert!(array.take_events().iter().any(|e| matches!(
        e,
        Event::SyncFinished {
            completed: true,
            kind: SyncKind::Recover,
            ..
        }
    )));
    // The member is whole again: once the driver has moved events_cleared up the
    // bits clear, and without another member the returned one serves what it was
    // away for.
    array.pass_time(Nanos(QUIET.0 * 2));
    assert_eq!(array.engine.write_intent_dirty(), Some(1), "not before");
    array.engine.allow_write_intent_clears(true);
    array.pass_time(Nanos(QUIET.0 * 2));
    assert_eq!(array.engine.write_intent_dirty(), Some(0));
    array.kill_member(MemberIdx(0));
    assert_eq!(array.read(0, total).expect("read"), expected);
}

#[test]
fn after_a_power_cut_only_dirty_chunks_are_resynced() {
    let geo = raid5();
    let mut array = with_bitmap(geo);
    let total = geo.array_sectors();
    array
        .write(0, &pattern(8, (total * 512) as usize))
        .expect("fill");
    array.flush().expect("flush");
    array.pass_time(Nanos(QUIET.0 * 2));
    let at = 5 * geo.stripe_data_sectors();
    array.write(at, &pattern(9, 2048)).expect("write");
    array.power_cut();
    // The engine's memory is gone: the bits come back from member 0's bitmap.
    let mut found = setup(geo, &[], false);
    found.image = array.members[0].bitmap.clone();
    array.engine.enable_write_intent(found);
    array.engine.allow_write_intent_clears(true);
    assert_eq!(array.engine.write_intent_dirty(), Some(1));
    array
        .engine
        .start_sync_where_dirty(SyncKind::Resync, 0)
        .expect("resync");
    let units = run_sync_units(&mut array);
    assert!(units <= CHUNK_SECTORS / u64::from(geo.chunk_sectors()));
    assert_eq!(check_mismatches(&mut array), 0);
}

#[test]
fn raid0_keeps_no_bitmap() {
    let geo = Geometry::new(Level::Raid0, Layout::None, 2, 16, 1024).expect("geometry");
    let mut engine = Engine::new(geo, vec![xraid_engine::MemberState::Active; 2]);
    engine.enable_write_intent(WriteIntentSetup {
        image: vec![0; 512],
        chunks: 16,
        chunk_sectors: 64,
        block_bytes: 512,
        clear_after: QUIET,
        rewrite: true,
    });
    assert_eq!(engine.write_intent_dirty(), None);
}

#[test]
fn bits_found_after_a_crash_stay_until_a_resync_not_a_write_or_a_recover() {
    let geo = raid5();
    let mut array = SimArray::new(geo, 9);
    array.engine.enable_write_intent(setup(geo, &[2, 5], false));
    array.engine.allow_write_intent_clears(true);
    // A write into a crash chunk, then quiet time: the bit stays.
    array
        .write(2 * CHUNK_SECTORS * 3, &pattern(1, 4096))
        .expect("write");
    array.flush().expect("flush");
    array.pass_time(Nanos(QUIET.0 * 3));
    assert_eq!(array.engine.write_intent_dirty(), Some(2));
    // A member rebuilt meanwhile does not settle them either.
    array.kill_member(MemberIdx(3));
    array.write(0, &pattern(2, 512)).expect("degraded write");
    array.return_member(MemberIdx(3), true).expect("replace");
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    array.run_sync();
    array.engine.allow_write_intent_clears(true);
    array.pass_time(Nanos(QUIET.0 * 3));
    let dirty = array.engine.write_intent_dirty().expect("bitmap");
    assert!(dirty >= 2, "crash chunks kept: {dirty}");
    // A resync does.
    array
        .engine
        .start_sync_where_dirty(SyncKind::Resync, 0)
        .expect("resync");
    array.run_sync();
    array.pass_time(Nanos(QUIET.0 * 3));
    assert_eq!(array.engine.write_intent_dirty(), Some(0));
}

#[test]
fn bits_are_cleared_only_once_the_driver_allows_it() {
    let mut array = SimArray::new(raid1(), 3);
    array.engine.enable_write_intent(setup(raid1(), &[], true));
    array.write(0, &pattern(3, 512)).expect("write");
    array.pass_time(Nanos(QUIET.0 * 3));
    assert_eq!(
        array.engine.write_intent_dirty(),
        Some(1),
        "events_cleared not current"
    );
    array.engine.allow_write_intent_clears(true);
    array.pass_time(Nanos(QUIET.0 * 3));
    assert_eq!(array.engine.write_intent_dirty(), Some(0));
}

#[test]
fn a_stalled_member_does_not_hold_up_bitmap_rounds() {
    let mut array = with_bitmap(raid1());
    // Member 1 answers a minute late: past the stall timeout it is failed, and the
    // write waiting for its bit goes on with member 0.
    array.members[1].extra_latency = Nanos(60_000_000_000);
    let start = array.now();
    let (_, buf) = array.start_write(7 * CHUNK_SECTORS, &pattern(4, 512));
    while !array.engine.clients_idle() {
        assert!(array.step(), "the engine stalled with the write pending");
    }
    let waited = array.now().0 - start.0;
    // The late I/Os still come back (the buffer they use lives until then).
    array.run();
    array.engine.buffers_mut().free(buf);
    assert_eq!(array.engine.buffers().live(), 0, "no buffer left behind");
    assert!(
        waited < 59_000_000_000,
        "the write waited {waited} ns for the stalled member"
    );
    assert_eq!(
        array.engine.member_states()[1],
        xraid_engine::MemberState::Failed
    );
}

#[test]
fn a_member_failing_during_a_clear_rounds_flush_keeps_the_bits() {
    let mut array = with_bitmap(raid1());
    array
        .write(4 * CHUNK_SECTORS, &pattern(5, 512))
        .expect("write");
    array.flush().expect("flush");
    // Member 1 dies unnoticed; the clear round's flush is the first I/O to find out.
    array.kill_member(MemberIdx(1));
    array.pass_time(Nanos(QUIET.0 * 3));
    assert_eq!(
        array.engine.member_states()[1],
        xraid_engine::MemberState::Failed
    );
    assert_eq!(array.engine.write_intent_dirty(), Some(1));
    assert!(
        bit(&array.members[0].bitmap, 4),
        "not cleared on the survivor"
    );
}

/// Parity of every stripe made to disagree with its data, every bit set and the
/// resync owed, paced to one stripe per second: an array made over old contents (or
/// found after a crash with every bit set), at the start of its resync.
fn owing_a_paced_resync(seed: u64) -> SimArray {
    let geo = raid5();
    let mut array = SimArray::new(geo, seed);
    let total = geo.array_sectors();
    array
        .write(0, &pattern(10, (total * 512) as usize))
        .expect("fill");
    array.flush().expect("flush");
    let stripe_bytes = u64::from(geo.chunk_sectors()) * 512;
    for stripe in 0..geo.stripes() {
        let p = geo.stripe_map(stripe).p();
        array.flip_bit(p, (stripe * stripe_bytes) as usize + 100, 3);
    }
    let chunks = geo.member_sectors().div_ceil(CHUNK_SECTORS);
    let all: Vec<u64> = (0..chunks).collect();
    array.power_cut_with(|a| {
        a.engine.enable_write_intent(setup(geo, &all, false));
        a.engine.allow_write_intent_clears(true);
        a.engine.owe_resync();
    });
    let mut config = array.engine.config();
    config.sync_max_bytes_per_sec = stripe_bytes;
    config.sync_min_bytes_per_sec = stripe_bytes;
    array.engine.set_config(config);
    array
        .engine
        .start_sync_where_dirty(SyncKind::Resync, 0)
        .expect("resync");
    array
}

#[test]
fn a_resync_clears_the_bits_behind_it_and_a_crash_resyncs_only_the_rest() {
    let geo = raid5();
    let chunks = geo.member_sectors().div_ceil(CHUNK_SECTORS);
    let stripes_per_chunk = CHUNK_SECTORS / u64::from(geo.chunk_sectors());
    let mut array = owing_a_paced_resync(12);
    // Two quiet times and a bit: the resync has released what lay behind it twice.
    array.pass_time(Nanos(QUIET.0 * 2 + QUIET.0 / 2));
    let front = array
        .engine
        .sync_progress()
        .expect("still running")
        .done_below;
    let behind = front / stripes_per_chunk;
    assert!(behind >= 2, "the resync got to stripe {front} only");
    let on_disk = array.members[0].bitmap.clone();
    let cleared: Vec<u64> = (0..chunks).filter(|&c| !bit(&on_disk, c)).collect();
    assert!(!cleared.is_empty(), "nothing cleared behind the resync");
    assert!(
        cleared.iter().all(|&c| c < behind),
        "cleared {cleared:?}, ahead of the resync at chunk {behind}"
    );
    for m in &array.members {
        assert_eq!(m.bitmap, on_disk, "every member has the same bits");
    }
    // A crash now: only the chunks still set are resynced, and parity agrees after.
    array.power_cut_now_with(|a| {
        let mut found = setup(geo, &[], false);
        found.image = a.members[0].bitmap.clone();
        a.engine.enable_write_intent(found);
        a.engine.allow_write_intent_clears(true);
        a.engine.owe_resync();
    });
    assert_eq!(
        array.engine.write_intent_dirty(),
        Some(chunks - cleared.len() as u64)
    );
    array
        .engine
        .start_sync_where_dirty(SyncKind::Resync, 0)
        .expect("resync");
    let units = run_sync_units(&mut array);
    assert_eq!(
        units,
        geo.stripes() - cleared.len() as u64 * stripes_per_chunk,
        "the restarted resync visits the chunks it had not cleared"
    );
    assert_eq!(check_mismatches(&mut array), 0);
}

#[test]
fn a_resync_on_an_array_that_lost_a_member_clears_nothing_behind_it() {
    let mut array = owing_a_paced_resync(13);
    array.pass_time(Nanos(QUIET.0 / 2));
    array.kill_member(MemberIdx(2));
    // The next I/O to it finds out; the resync goes on without it.
    array.pass_time(Nanos(QUIET.0 * 3));
    assert_eq!(
        array.engine.member_states()[2],
        xraid_engine::MemberState::Failed
    );
    let chunks = raid5().member_sectors().div_ceil(CHUNK_SECTORS);
    assert_eq!(array.engine.write_intent_dirty(), Some(chunks));
    assert!((0..chunks).all(|c| bit(&array.members[0].bitmap, c)));
}
