//! Known bad ranges (a member's bad block log) in the simulator: what the member
//! holds there is never returned, the range is rebuilt and rewritten and so made
//! good, a write over it makes it good, and a read of it is no read error. A mirror
//! copy that refuses a write another copy took gets the range in its log and serves on.

use xraid_engine::sim::SimArray;
use xraid_engine::{EngineConfig, EngineError, Event, MemberIdx, MemberState, Nanos, SyncKind};
use xraid_format::BadBlocks;
use xraid_layout::{Geometry, Layout, Level, ParityAlgorithm};

const SECTOR: usize = 512;

fn geometry(level: Level, disks: u16) -> Geometry {
    let layout = match level {
        Level::Raid5 | Level::Raid6 => Layout::Parity(ParityAlgorithm::LeftSymmetric),
        _ => Layout::default_for(level),
    };
    let chunk = if level == Level::Raid1 { 0 } else { 16 };
    Geometry::new(level, layout, disks, chunk, 256).expect("geometry")
}

/// An array filled with seeded data, reads not spread at random over mirror copies.
fn filled(level: Level, disks: u16) -> (SimArray, Vec<u8>) {
    let geo = geometry(level, disks);
    let mut array = SimArray::new(geo, 11);
    array.shuffle = false;
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    array.flush().expect("flush");
    (array, data)
}

fn bad(range: std::ops::Range<u64>) -> BadBlocks {
    let mut list = BadBlocks::new();
    list.add(range);
    list
}

/// Overwrites member sectors `range` of role `member` with garbage, as a device that
/// lost them might return.
fn scribble(array: &mut SimArray, member: u16, range: std::ops::Range<u64>) -> Vec<u8> {
    let bytes = range.start as usize * SECTOR..range.end as usize * SECTOR;
    let data = &mut array.role_device_mut(MemberIdx(member)).data;
    let before = data[bytes.clone()].to_vec();
    data[bytes].iter_mut().for_each(|b| *b = !*b);
    before
}

#[test]
fn a_known_bad_range_is_never_returned_and_a_parity_read_rewrites_it() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10] {
        let (mut array, data) = filled(level, 4);
        let geo = *array.engine.geometry();
        // A member whose first chunk is data (a RAID-6's member 0 holds Q there) and
        // is read first (a mirror's first copy).
        let m = if level == Level::Raid6 { 1 } else { 0 };
        let held = scribble(&mut array, m, 2..6);
        array.engine.set_bad_block_log(MemberIdx(m), bad(2..6), 0);
        let got = array
            .read(0, geo.array_sectors())
            .expect("read around the bad range");
        assert!(got == data, "{level:?}: the member's garbage was returned");
        if level.has_parity() {
            assert_eq!(
                array.members[usize::from(m)].data[2 * SECTOR..6 * SECTOR],
                held,
                "{level:?}: the range was rewritten"
            );
            assert!(
                array.engine.bad_blocks(MemberIdx(m)).is_empty(),
                "{level:?}"
            );
            // Made good, and recorded so at once (the sim plays the driver's part).
            let durable = array.engine.durable_bad_blocks(MemberIdx(m));
            assert!(durable.is_empty(), "{level:?}");
        } else {
            // Mirror reads go to a copy that holds the whole range (md's read
            // balancing): the listed range waits for a write or a scrub.
            let listed = array.engine.bad_blocks(MemberIdx(m));
            assert!(listed.covers(2..6), "{level:?}");
        }
        let state = array.engine.member_states()[usize::from(m)];
        assert_eq!(state, MemberState::Active);
    }
}

#[test]
fn mirror_reads_leave_a_copy_with_a_listed_range_alone() {
    for level in [Level::Raid1, Level::Raid10] {
        let (mut array, data) = filled(level, 2);
        array.shuffle = true;
        array.engine.set_bad_block_log(MemberIdx(1), bad(8..16), 0);
        let reads = array.members[1].reads;
        for _ in 0..8 {
            assert!(array.read(8, 8).expect("read") == data[8 * SECTOR..16 * SECTOR]);
        }
        assert_eq!(
            array.members[1].reads, reads,
            "{level:?}: no read went to it"
        );
        // Ranges it holds whole are read from it as before.
        for _ in 0..8 {
            array.read(16, 8).expect("read");
        }
        assert!(array.members[1].reads > reads, "{level:?}");
    }
}

#[test]
fn a_known_bad_range_counts_as_no_read_error() {
    let (mut array, data) = filled(Level::Raid5, 4);
    array.engine.set_config(EngineConfig {
        max_read_errors: 0,
        ..EngineConfig::default()
    });
    scribble(&mut array, 1, 0..8);
    array.engine.set_bad_block_log(MemberIdx(1), bad(0..8), 0);
    let total = array.engine.array_sectors();
    assert!(array.read(0, total).expect("read") == data);
    assert_eq!(array.engine.read_errors(MemberIdx(1)), 0);
    assert_eq!(array.engine.member_states()[1], MemberState::Active);
}

#[test]
fn a_write_over_part_of_a_known_bad_range_makes_that_part_good() {
    let (mut array, _) = filled(Level::Raid1, 2);
    array.engine.set_bad_block_log(MemberIdx(1), bad(10..20), 0);
    let new = vec![0x5a; 4 * SECTOR];
    array.write(12, &new).expect("write");
    let left = array.engine.bad_blocks(MemberIdx(1));
    assert_eq!(left.ranges(), &[10..12, 16..20]);
    assert_eq!(array.members[1].data[12 * SECTOR..16 * SECTOR], new[..]);
}

#[test]
fn a_raid0_known_bad_range_is_unreadable_not_garbage() {
    let (mut array, data) = filled(Level::Raid0, 3);
    scribble(&mut array, 0, 0..4);
    array.engine.set_bad_block_log(MemberIdx(0), bad(0..4), 0);
    // Array sector 0 is member 0's sector 0.
    assert!(matches!(
        array.read(0, 8),
        Err(EngineError::Unreadable { .. })
    ));
    assert_eq!(array.engine.member_states()[0], MemberState::Active);
    // The rest of the member's chunk reads as it was.
    let got = array.read(4, 4).expect("the sectors after it");
    assert!(got == data[4 * SECTOR..8 * SECTOR]);
    // Written, it is good again.
    array.write(0, &data[..8 * SECTOR]).expect("write");
    assert!(array.read(0, 8).expect("read") == data[..8 * SECTOR]);
    assert!(array.engine.bad_blocks(MemberIdx(0)).is_empty());
}

#[test]
fn a_degraded_array_loses_only_the_known_bad_range() {
    let (mut array, data) = filled(Level::Raid5, 4);
    array.engine.fail_member(MemberIdx(3));
    scribble(&mut array, 0, 0..4);
    array.engine.set_bad_block_log(MemberIdx(0), bad(0..4), 0);
    assert!(matches!(
        array.read(0, 8),
        Err(EngineError::Unreadable { .. })
    ));
    assert_eq!(array.engine.member_states()[0], MemberState::Active);
    let got = array.read(8, 8).expect("the rest of the chunk");
    assert!(got == data[8 * SECTOR..16 * SECTOR]);
}

#[test]
fn a_check_scrub_rewrites_a_known_bad_range() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10] {
        let (mut array, data) = filled(level, 4);
        let held = scribble(&mut array, 2, 40..48);
        array.engine.set_bad_block_log(MemberIdx(2), bad(40..48), 0);
        array
            .engine
            .start_sync(SyncKind::Check, 0)
            .expect("start the check");
        array.run_sync();
        assert!(
            array.engine.bad_blocks(MemberIdx(2)).is_empty(),
            "{level:?}: the check rewrote it"
        );
        assert_eq!(array.members[2].data[40 * SECTOR..48 * SECTOR], held);
        let total = array.engine.array_sectors();
        assert!(array.read(0, total).expect("read") == data, "{level:?}");
    }
}

#[test]
fn a_new_device_in_the_role_has_no_known_bad_ranges() {
    let (mut array, _) = filled(Level::Raid1, 2);
    array.engine.set_bad_block_log(MemberIdx(1), bad(0..8), 0);
    array.kill_member(MemberIdx(1));
    array.return_member(MemberIdx(1), true).expect("replace");
    assert!(array.engine.bad_blocks(MemberIdx(1)).is_empty());
}

#[test]
fn a_mirror_copy_that_refuses_a_write_gets_the_range_in_its_log_and_serves_on() {
    for level in [Level::Raid1, Level::Raid10] {
        let (mut array, _) = filled(level, 2);
        array.enable_bad_block_logs(512);
        array.members[1].write_error_ranges.push(8..16);
        let new = vec![0x77u8; 32 * SECTOR];
        array.write(0, &new).expect("the other copy takes it");
        assert_eq!(
            array.engine.member_states()[1],
            MemberState::Active,
            "{level:?}"
        );
        // Tried again block by block: only the block that refuses again is listed.
        assert_eq!(array.engine.bad_blocks(MemberIdx(1)), bad(8..16));
        assert!(array.take_events().iter().any(|e| matches!(
            e,
            Event::WriteRefusedRecorded { member, .. } if *member == MemberIdx(1)
        )));
        // Recorded before anything else happened: a restart finds it.
        assert!(!array.engine.bad_blocks_to_record());
        assert!(array.engine.durable_bad_blocks(MemberIdx(1)).covers(8..16));
        // Every read of it comes from the copy that took the write.
        for _ in 0..4 {
            assert!(array.read(0, 32).expect("read") == new, "{level:?}");
        }
        assert_eq!(array.engine.member_states()[1], MemberState::Active);
    }
}

#[test]
fn a_refused_write_is_narrowed_to_the_blocks_that_refuse_again() {
    let (mut array, _) = filled(Level::Raid1, 2);
    array.enable_bad_block_logs(512);
    // Sectors 13..14 and 40..41 refuse; a 64-sector write covers both.
    array.members[1].write_error_ranges.push(13..14);
    array.members[1].write_error_ranges.push(40..41);
    let new = vec![0x42u8; 64 * SECTOR];
    array.write(4, &new).expect("write");
    let listed = array.engine.bad_blocks(MemberIdx(1));
    assert_eq!(
        listed.ranges(),
        &[8..16, 40..48],
        "4 KiB blocks that refuse"
    );
    // Everything else of the write reached the copy.
    assert!(array.members[1].data[4 * SECTOR..8 * SECTOR] == new[..4 * SECTOR]);
    assert!(array.members[1].data[16 * SECTOR..40 * SECTOR] == new[12 * SECTOR..36 * SECTOR]);
    assert!(array.members[1].data[48 * SECTOR..68 * SECTOR] == new[44 * SECTOR..]);
    assert_eq!(array.engine.member_states()[1], MemberState::Active);
}

/// A sync rewrites a copy's listed sectors 0..4 from another copy, and the copy
/// refuses them again: its log keeps 0..4 — not the block 0..8, nor the unit. Its
/// sectors 4..8 hold data the unit may have been composed from (the first copy not
/// listed there), and listing them would have the next resync keep another copy's
/// version of them than the reads returned (RAID-1 seed 18187592623851998032).
#[test]
fn a_syncs_refused_rewrite_lists_only_the_sectors_it_rewrote() {
    let (mut array, data) = filled(Level::Raid1, 2);
    array.enable_bad_block_logs(512);
    let x = MemberIdx(0);
    scribble(&mut array, 0, 0..4);
    array.engine.set_bad_block_log(x, bad(0..4), 512);
    array.members[0].write_error_ranges.push(0..4);
    array.engine.start_sync(SyncKind::Check, 0).expect("check");
    array.run_sync();
    assert_eq!(array.engine.member_states()[0], MemberState::Active);
    assert_eq!(array.engine.bad_blocks(x), bad(0..4));
    assert!(array.read(0, 16).expect("read") == data[..16 * SECTOR]);
}

#[test]
fn without_a_log_the_copy_that_refuses_a_write_is_failed() {
    let (mut array, _) = filled(Level::Raid1, 2);
    array.members[1].write_error_ranges.push(8..16);
    array.write(0, &vec![0x77u8; 32 * SECTOR]).expect("write");
    assert_eq!(array.engine.member_states()[1], MemberState::Failed);
}

#[test]
fn a_write_both_copies_refuse_fails_and_both_serve_on() {
    let (mut array, data) = filled(Level::Raid1, 2);
    array.enable_bad_block_logs(512);
    for m in 0..2 {
        array.members[m].write_error_ranges.push(8..16);
    }
    let err = array.write(8, &vec![0x77u8; 8 * SECTOR]).unwrap_err();
    assert!(matches!(err, EngineError::Unwritable { .. }), "{err:?}");
    let states = array.engine.member_states().to_vec();
    assert_eq!(states, vec![MemberState::Active; 2]);
    // The rest of the array is as it was.
    assert!(array.read(16, 16).expect("read") == data[16 * SECTOR..32 * SECTOR]);
}

#[test]
fn a_recorded_range_outlives_a_power_cut() {
    let (mut array, _) = filled(Level::Raid1, 2);
    array.enable_bad_block_logs(512);
    array.members[1].write_error_ranges.push(8..16);
    let new = vec![0x77u8; 8 * SECTOR];
    array.write(8, &new).expect("write");
    array.flush().expect("flush");
    array.power_cut();
    array.members[1].write_error_ranges.clear();
    assert!(array.engine.bad_blocks(MemberIdx(1)).covers(8..16));
    // With the copy that took the write gone, the one that refused it has nothing
    // to give: the range is lost, loudly, and its old contents are never returned.
    array.engine.fail_member(MemberIdx(0));
    assert!(matches!(
        array.read(8, 8),
        Err(EngineError::Unreadable { .. })
    ));
    // Written again, it is good.
    array.write(8, &new).expect("write");
    assert!(array.read(8, 8).expect("read") == new);
}

/// A copy refuses a client write, then the other copy vanishes before its write
/// lands: nothing holds the write, so it fails, and the refusing copy serves on with
/// what it held (nothing is listed: no copy holds anything newer).
#[test]
fn a_write_no_copy_holds_fails_and_the_refusing_copy_serves_on() {
    let (mut array, data) = filled(Level::Raid1, 2);
    array.enable_bad_block_logs(512);
    array.members[0].write_error_ranges.push(8..16);
    let (id, _) = array.start_write(8, &vec![0x77u8; 8 * SECTOR]);
    assert!(array.step(), "copy 0 refuses");
    array.kill_member(MemberIdx(1));
    let replies = array.run();
    let reply = replies.iter().find(|r| r.id == id).expect("replied");
    assert!(
        matches!(reply.result, Err(EngineError::Unwritable { .. })),
        "{:?}",
        reply.result
    );
    assert_eq!(array.engine.member_states()[0], MemberState::Active);
    assert!(array.engine.bad_blocks(MemberIdx(0)).is_empty());
    assert!(array.read(8, 8).expect("read") == data[8 * SECTOR..16 * SECTOR]);
}

/// The other copy's log lists part of the range and it takes the write (which makes
/// that part good), while the first copy refuses: the refusal is recorded, and every
/// read returns the write.
#[test]
fn a_refusal_is_settled_once_every_copy_has_answered() {
    let (mut array, _) = filled(Level::Raid1, 2);
    array.enable_bad_block_logs(512);
    array
        .engine
        .set_bad_block_log(MemberIdx(1), bad(8..16), 512);
    array.members[0].write_error_ranges.push(0..32);
    let new = vec![0x44u8; 32 * SECTOR];
    array.write(0, &new).expect("copy 1 takes it");
    assert!(array.engine.bad_blocks(MemberIdx(1)).is_empty());
    assert!(array.engine.bad_blocks(MemberIdx(0)).covers(0..32));
    for _ in 0..4 {
        assert!(array.read(0, 32).expect("read") == new);
    }
}

/// A RAID-5 member's log lists 0..8; a client write makes it good and is flushed,
/// and the list goes to the log at once. A later write to another chunk of the
/// stripe is torn by a power cut (its parity lost): after the restart the range is
/// not listed, so nothing is rebuilt from the torn parity, by a read or the resync.
#[test]
fn a_range_made_good_is_recorded_before_a_crash_can_tear_its_stripe() {
    let (mut array, _) = filled(Level::Raid5, 4);
    let map = array.engine.geometry().stripe_map(0);
    let (m0, p) = (map.data_member(0), map.p());
    array
        .engine
        .set_bad_block_log(array.engine.device_slot(m0), bad(0..8), 512);
    let w = vec![0x11u8; 8 * SECTOR];
    array.write(0, &w).expect("write");
    array.flush().expect("flush");
    assert!(array.engine.durable_bad_blocks(m0).is_empty(), "recorded");
    let p_before = array.members[p.index()].data[..8 * SECTOR].to_vec();
    array.write(16, &vec![0x22u8; 8 * SECTOR]).expect("write");
    array.flush().expect("flush");
    array.members[p.index()].data[..8 * SECTOR].copy_from_slice(&p_before);
    array.power_cut();
    assert!(array.engine.bad_blocks(m0).is_empty());
    assert!(array.read(0, 8).expect("read") == w);
    array
        .engine
        .start_sync(SyncKind::Resync, 0)
        .expect("resync");
    array.run_sync();
    assert!(array.read(0, 8).expect("read") == w);
}

/// A read to a member whose replacement takes its role over while the read is out:
/// its completion is stale, and the member's listed garbage is not returned.
#[test]
fn a_stale_read_of_a_listed_range_returns_nothing_listed() {
    let (mut array, data) = filled(Level::Raid5, 4);
    let m = array.engine.geometry().stripe_map(0).data_member(0);
    array.members[m.index()].data[..8 * SECTOR]
        .iter_mut()
        .for_each(|b| *b = !*b);
    array.engine.set_bad_block_log(m, bad(0..8), 512);
    array.members[m.index()].write_error_ranges.push(0..8);
    array.start_replacement(m).expect("replace");
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    assert!(array.step());
    array.members[m.index()].extra_latency = Nanos(1_000_000_000);
    let (id, buf) = array.start_read(0, 8);
    array.members[m.index()].extra_latency = Nanos(0);
    let mut replies = array.run_sync();
    replies.extend(array.run());
    let reply = replies.iter().find(|r| r.id == id).expect("replied");
    let got = array.engine.buffers().get(buf).to_vec();
    assert!(
        reply.result.is_err() || got == data[..8 * SECTOR],
        "garbage returned: {:?}",
        reply.result
    );
}

/// After a power cut, with a resync owed, a copy's log lists some sectors of a unit
/// and a write cut off by the power reached only that copy elsewhere in the unit.
/// Reads take, sector by sector, the copy the resync keeps; the resync keeps the
/// same, so what a read returned stays.
#[test]
fn reads_and_the_resync_keep_the_same_copy_around_listed_sectors() {
    let (mut array, _) = filled(Level::Raid1, 2);
    array.enable_bad_block_logs(512);
    let torn = vec![0x33u8; 8 * SECTOR];
    array.members[0].data[16 * SECTOR..24 * SECTOR].copy_from_slice(&torn);
    array.power_cut();
    array.engine.set_bad_block_log(MemberIdx(0), bad(0..8), 512);
    let first = array.read(0, 24).expect("read");
    assert!(
        first[16 * SECTOR..] == torn[..],
        "copy 0 where it holds data"
    );
    array
        .engine
        .start_sync(SyncKind::Resync, 0)
        .expect("resync");
    array.run_sync();
    assert!(
        array.read(0, 24).expect("read") == first,
        "the resync kept the same"
    );
    assert!(
        array.engine.bad_blocks(MemberIdx(0)).is_empty(),
        "the resync rewrote the listed sectors"
    );
}

/// A member is rebuilt from the only copy left, whose log lists sectors of a unit:
/// nothing holds those sectors, so they go into the new member's log too (never its
/// garbage, which a write would make good), the rebuild completes around them, and
/// reads of them fail loudly (md's recovery does the same).
#[test]
fn a_rebuild_from_a_copy_with_listed_sectors_loses_only_those_loudly() {
    let (mut array, data) = filled(Level::Raid1, 2);
    array.enable_bad_block_logs(512);
    scribble(&mut array, 0, 0..8);
    array.engine.set_bad_block_log(MemberIdx(0), bad(0..8), 512);
    array.kill_member(MemberIdx(1));
    array.engine.fail_member(MemberIdx(1));
    array
        .return_member(MemberIdx(1), true)
        .expect("a new device");
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    array.run_sync();
    let events = array.take_events();
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::LostInRebuild { member, sector: 0, sectors: 8 } if *member == MemberIdx(1)
        )),
        "{events:?}"
    );
    assert_eq!(array.engine.member_states()[1], MemberState::Active);
    assert!(array.engine.bad_blocks(MemberIdx(1)).covers(0..8));
    assert!(matches!(
        array.read(0, 8),
        Err(EngineError::Unreadable { .. })
    ));
    assert!(array.read(8, 8).expect("read") == data[8 * SECTOR..16 * SECTOR]);
}

/// A RAID-5 whose stripe 0 data member 1 is rebuilt onto a new device while data
/// member 0's log lists its rows `listed` of that stripe (garbage there): returns the
/// array once the recover has run, the data, and the rebuilt member.
fn rebuilt_past_listed_rows(listed: std::ops::Range<u64>) -> (SimArray, Vec<u8>, MemberIdx) {
    let (mut array, data) = filled(Level::Raid5, 4);
    array.enable_bad_block_logs(512);
    let map = array.engine.geometry().stripe_map(0);
    let (x, m) = (map.data_member(0), map.data_member(1));
    scribble(&mut array, x.0, listed.clone());
    array.engine.set_bad_block_log(x, bad(listed), 512);
    array.kill_member(m);
    array.engine.fail_member(m);
    array.return_member(m, true).expect("a new device");
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    array.run_sync();
    assert_eq!(array.engine.member_states()[m.index()], MemberState::Active);
    (array, data, m)
}

/// The same on RAID-5: a member is rebuilt while another's log lists rows of a
/// stripe. Those rows of the stripe are lost on the rebuilt member (listed), the
/// rebuild completes, and every other stripe reads right.
#[test]
fn a_parity_rebuild_past_listed_rows_completes_around_them() {
    let (mut array, data, m) = rebuilt_past_listed_rows(0..8);
    assert!(array.engine.bad_blocks(m).covers(0..8));
    assert!(matches!(
        array.read(0, 8),
        Err(EngineError::Unreadable { .. })
    ));
    let chunk = u64::from(array.engine.geometry().chunk_sectors());
    let next = 3 * chunk;
    let total = array.engine.array_sectors();
    let got = array.read(next, total - next).expect("read");
    assert!(got == data[next as usize * SECTOR..]);
}

/// Only the rows past the redundancy are lost: the rebuilt member's log takes the
/// listed rows alone, not the stripe's whole chunk rows, and its other rows of that
/// stripe are rebuilt.
#[test]
fn a_parity_rebuild_loses_only_the_rows_listed_elsewhere() {
    let (mut array, data, m) = rebuilt_past_listed_rows(4..8);
    assert_eq!(array.engine.bad_blocks(m), bad(4..8), "those rows alone");
    // Member m holds array sectors 16..32 of stripe 0: rows 0..4 and 8..16 came back.
    let got = array.read(16, 4).expect("rows before the lost ones");
    assert!(got == data[16 * SECTOR..20 * SECTOR]);
    let got = array.read(24, 8).expect("rows after them");
    assert!(got == data[24 * SECTOR..32 * SECTOR]);
    assert!(matches!(
        array.read(20, 4),
        Err(EngineError::Unreadable { .. })
    ));
}

/// Two RAID-5 members list different rows of one stripe (0..8 and 8..16): each row
/// has one member missing, within the redundancy. The stripe reads back whole, takes
/// a write across both, and a check scrub rewrites both ranges good — where counting
/// them per operation made it two members missing, and every one of those failed.
#[test]
fn two_members_listing_different_rows_of_a_stripe_lose_nothing() {
    for level in [Level::Raid5, Level::Raid6] {
        let (mut array, mut data) = filled(level, 4);
        array.enable_bad_block_logs(512);
        let map = array.engine.geometry().stripe_map(0);
        let (a, b) = (map.data_member(0), map.data_member(1));
        let extra = if level == Level::Raid6 {
            // RAID-6: P lists rows 4..12 too, three members in the stripe.
            scribble(&mut array, map.p().0, 4..12);
            array.engine.set_bad_block_log(map.p(), bad(4..12), 512);
            "and P"
        } else {
            ""
        };
        scribble(&mut array, a.0, 0..8);
        scribble(&mut array, b.0, 8..16);
        array.engine.set_bad_block_log(a, bad(0..8), 512);
        array.engine.set_bad_block_log(b, bad(8..16), 512);
        let stripe = array.engine.geometry().stripe_data_sectors();
        let got = array.read(0, stripe).expect("every row has redundancy");
        assert!(got == data[..stripe as usize * SECTOR], "{level:?} {extra}");
        // Member a's rows 0..16 alone: its direct read fails on the listed rows.
        let got = array.read(0, 16).expect("one member's chunk");
        assert!(got == data[..16 * SECTOR], "{level:?}");
        // A write over the end of a's chunk and the start of b's.
        let new = vec![0x3cu8; 16 * SECTOR];
        array.write(8, &new).expect("write across both");
        data[8 * SECTOR..24 * SECTOR].copy_from_slice(&new);
        let got = array.read(0, stripe).expect("read back");
        assert!(got == data[..stripe as usize * SECTOR], "{level:?}");
        array.engine.start_sync(SyncKind::Check, 0).expect("check");
        array.run_sync();
        assert!(
            array.engine.bad_blocks(a).is_empty() && array.engine.bad_blocks(b).is_empty(),
            "{level:?}: rewritten good"
        );
        let got = array.read(0, stripe).expect("read after the check");
        assert!(got == data[..stripe as usize * SECTOR], "{level:?}");
    }
}

/// The bands are cut when an operation takes its stripe, not when it is made: a
/// write queued behind two writes whose refusals list rows of two members (0..8 and
/// 8..16) still goes through, and so do they (found by a review: cut when made, the
/// third write failed as two members missing).
#[test]
fn a_write_queued_behind_refusals_is_cut_at_the_rows_they_listed() {
    let (mut array, mut data) = filled(Level::Raid5, 4);
    array.enable_bad_block_logs(512);
    let map = array.engine.geometry().stripe_map(0);
    let (a, b) = (map.data_member(0), map.data_member(1));
    let chunk = u64::from(array.engine.geometry().chunk_sectors());
    array.members[a.index()].write_error_ranges.push(0..8);
    array.members[b.index()].write_error_ranges.push(8..16);
    let writes = [(0, 8, 0x11u8), (chunk + 8, 8, 0x22), (2 * chunk, 16, 0x33)];
    let ids: Vec<_> = writes
        .iter()
        .map(|&(at, sectors, byte)| {
            let bytes = vec![byte; sectors as usize * SECTOR];
            data[at as usize * SECTOR..(at + sectors) as usize * SECTOR].copy_from_slice(&bytes);
            array.start_write(at, &bytes).0
        })
        .collect();
    let replies = array.run();
    assert!(array.engine.bad_blocks(a).covers(0..8));
    assert!(array.engine.bad_blocks(b).covers(8..16));
    for id in ids {
        let reply = replies.iter().find(|r| r.id == id).expect("replied");
        assert!(reply.result.is_ok(), "{id:?}: {:?}", reply.result);
    }
    let stripe = array.engine.geometry().stripe_data_sectors();
    assert!(array.read(0, stripe).expect("read") == data[..stripe as usize * SECTOR]);
}

/// Likewise a recover unit queued behind a degraded write whose refusal lists rows
/// 4..8 of another member: the rebuilt member loses those rows alone, not the
/// stripe's whole chunk rows (found by the same review).
#[test]
fn a_recover_unit_queued_behind_a_refusal_loses_only_the_rows_it_listed() {
    let (mut array, data) = filled(Level::Raid5, 4);
    array.enable_bad_block_logs(512);
    let map = array.engine.geometry().stripe_map(0);
    let (x, m) = (map.data_member(0), map.data_member(1));
    array.kill_member(m);
    array.engine.fail_member(m);
    array.return_member(m, true).expect("a new device");
    array.members[x.index()].write_error_ranges.push(4..8);
    // Fails, loudly: x's rows 4..8 and m's are past the redundancy.
    array.start_write(4, &vec![0x5cu8; 4 * SECTOR]);
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    array.run_sync();
    assert_eq!(array.engine.member_states()[m.index()], MemberState::Active);
    assert!(array.engine.bad_blocks(x).covers(4..8));
    assert_eq!(array.engine.bad_blocks(m), bad(4..8), "x's rows alone");
    let got = array.read(16, 4).expect("m's rows 0..4, rebuilt");
    assert!(got == data[16 * SECTOR..20 * SECTOR]);
}

/// Bands in integrity mode start and end at checksum blocks, also where listings
/// start or end inside one (from the same review).
#[test]
fn bands_in_integrity_mode_keep_whole_checksum_blocks() {
    for (ra, rb) in [(0..8u64, 8..16u64), (1..7, 9..15), (0..3, 13..16)] {
        let (mut array, mut data) = filled(Level::Raid5, 4);
        array.enable_integrity();
        array.enable_bad_block_logs(512);
        let map = array.engine.geometry().stripe_map(0);
        let (a, b) = (map.data_member(0), map.data_member(1));
        scribble(&mut array, a.0, ra.clone());
        scribble(&mut array, b.0, rb.clone());
        array.engine.set_bad_block_log(a, bad(ra.clone()), 512);
        array.engine.set_bad_block_log(b, bad(rb.clone()), 512);
        let stripe = array.engine.geometry().stripe_data_sectors();
        let got = array.read(0, stripe).expect("read");
        assert!(got == data[..stripe as usize * SECTOR], "{ra:?} {rb:?}");
        let new = vec![0x3cu8; 14 * SECTOR];
        array.write(5, &new).expect("write across both");
        data[5 * SECTOR..19 * SECTOR].copy_from_slice(&new);
        array
            .engine
            .start_sync(SyncKind::Repair, 0)
            .expect("repair");
        array.run_sync();
        let all = array.engine.geometry().array_sectors();
        assert!(array.read(0, all).expect("read") == data, "{ra:?} {rb:?}");
    }
}

/// A RAID-5 data member refuses a write: the range goes into its log, it serves on,
/// and the write reads back, rebuilt from parity (md's raid5 with its log does so).
#[test]
fn a_parity_member_that_refuses_a_write_is_listed_not_failed() {
    for level in [Level::Raid5, Level::Raid6] {
        let (mut array, _) = filled(level, 4);
        array.enable_bad_block_logs(512);
        let x = array.engine.geometry().stripe_map(0).data_member(0);
        array.members[x.index()].write_error_ranges.push(0..8);
        let held = array.members[x.index()].data[..8 * SECTOR].to_vec();
        let new = vec![0x5cu8; 8 * SECTOR];
        array.write(0, &new).expect("parity holds it");
        assert_eq!(array.engine.member_states()[x.index()], MemberState::Active);
        assert!(array.engine.bad_blocks(x).covers(0..8), "{level:?}");
        assert!(
            array.members[x.index()].data[..8 * SECTOR] == held[..],
            "the member kept what it held"
        );
        for _ in 0..2 {
            assert!(array.read(0, 8).expect("read") == new, "{level:?}");
        }
    }
}

/// A parity member's refused write is tried again in 4 KiB blocks, as a mirror's is:
/// only the block that refuses again goes into its log, and the member takes the rest.
#[test]
fn a_parity_members_refused_write_is_narrowed_to_the_blocks_that_refuse_again() {
    for level in [Level::Raid5, Level::Raid6] {
        let (mut array, _) = filled(level, 4);
        array.enable_bad_block_logs(512);
        let x = array.engine.geometry().stripe_map(0).data_member(0);
        array.members[x.index()].write_error_ranges.push(10..12);
        let new = vec![0x6du8; 16 * SECTOR];
        array.write(0, &new).expect("parity holds it");
        assert_eq!(array.engine.member_states()[x.index()], MemberState::Active);
        assert_eq!(
            array.engine.bad_blocks(x),
            bad(8..16),
            "{level:?}: one block"
        );
        assert!(
            array.members[x.index()].data[..8 * SECTOR] == new[..8 * SECTOR],
            "{level:?}: the block it took is on it"
        );
        assert!(array.read(0, 16).expect("read") == new, "{level:?}");
    }
}

/// Two members refuse different blocks of one write (RAID-5; on RAID-6 with a member
/// missing, a data member and P): every row still has its redundancy, the write
/// reads back, and it is acknowledged — not failed as if both refusals covered the
/// whole write (found by a review).
#[test]
fn refusals_in_different_blocks_of_a_write_leave_it_whole() {
    for level in [Level::Raid5, Level::Raid6] {
        let disks = if level == Level::Raid6 { 5 } else { 4 };
        let (mut array, _) = filled(level, disks);
        array.enable_bad_block_logs(512);
        let map = array.engine.geometry().stripe_map(0);
        let a = map.data_member(0);
        let b = if level == Level::Raid6 {
            array.engine.fail_member(map.data_member(2));
            map.p()
        } else {
            map.data_member(1)
        };
        let chunk = u64::from(array.engine.geometry().chunk_sectors());
        array.members[a.index()].write_error_ranges.push(2..4);
        array.members[b.index()].write_error_ranges.push(10..12);
        let new = vec![0x42u8; 2 * chunk as usize * SECTOR];
        let written = array.write(0, &new);
        assert_eq!(array.engine.bad_blocks(a), bad(0..8), "{level:?}");
        assert_eq!(array.engine.bad_blocks(b), bad(8..16), "{level:?}");
        let got = array.read(0, 2 * chunk).expect("every row is held");
        assert!(got == new, "{level:?}: reads back new");
        assert!(written.is_ok(), "{level:?}: {written:?}");
    }
}

/// The same on a degraded RAID-5: the refused rows and the missing member's rows of
/// that stripe are lost — the write fails and reads of them fail, loudly — and the
/// array goes on (before bad block logs the member was failed, and the array lost).
#[test]
fn a_degraded_parity_array_loses_only_the_rows_a_member_refused() {
    let (mut array, data) = filled(Level::Raid5, 4);
    array.enable_bad_block_logs(512);
    let map = array.engine.geometry().stripe_map(0);
    let (x, gone) = (map.data_member(0), map.data_member(1));
    array.engine.fail_member(gone);
    array.members[x.index()].write_error_ranges.push(0..8);
    let err = array.write(0, &vec![0x5cu8; 8 * SECTOR]).unwrap_err();
    assert!(matches!(err, EngineError::Unwritable { .. }), "{err:?}");
    assert_eq!(array.engine.member_states()[x.index()], MemberState::Active);
    assert!(array.engine.lost_error().is_none(), "the array goes on");
    // The missing member's rows beside the refused ones: lost, loudly.
    let chunk = u64::from(array.engine.geometry().chunk_sectors());
    assert!(matches!(
        array.read(chunk, 8),
        Err(EngineError::Unreadable { .. })
    ));
    // Its other rows, and the other stripes, read as they were.
    let at = (chunk + 8) as usize * SECTOR;
    assert!(array.read(chunk + 8, 8).expect("read") == data[at..at + 8 * SECTOR]);
    let next_stripe = 3 * chunk;
    let at = next_stripe as usize * SECTOR;
    assert!(array.read(next_stripe, 16).expect("read") == data[at..at + 16 * SECTOR]);
}

/// A degraded RAID-5 (and a RAID-6 short of two): the write's data for a missing
/// member lives in parity only, and parity refuses it. It must not be acknowledged.
#[test]
fn a_write_only_parity_held_fails_when_parity_refuses_it() {
    for (level, disks, gone) in [(Level::Raid5, 4, 1), (Level::Raid6, 5, 2)] {
        let (mut array, _) = filled(level, disks);
        array.enable_bad_block_logs(512);
        let map = array.engine.geometry().stripe_map(0);
        for i in 1..=gone {
            array.engine.fail_member(map.data_member(i));
        }
        array.members[map.p().index()].write_error_ranges.push(0..8);
        let new = vec![0x5cu8; 8 * SECTOR];
        let written = array.write(16, &new);
        let read = array.read(16, 8);
        assert!(
            written.is_err() || read.as_ref().is_ok_and(|g| *g == new),
            "{level:?}: write {written:?} acknowledged, read back {:?}",
            read.map(|_| "data")
        );
    }
}

/// A logged RAID-5 with bad block logs, filled and flushed.
fn logged_raid5_with_logs(seed: u64) -> (SimArray, Vec<u8>) {
    let geo = geometry(Level::Raid5, 4);
    let mut array = SimArray::new(geo, seed);
    array.shuffle = false;
    array.engine.set_config(EngineConfig {
        log_sectors: 256,
        ..EngineConfig::default()
    });
    array.run();
    array.enable_bad_block_logs(512);
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    array.flush().expect("flush");
    // The (empty) replay at the start is not the one a test looks for.
    array.take_events();
    (array, data)
}

/// The stripe log's replay after a power cut writes to a member that refuses it: a
/// data member refusing rows its log lists already (a later write carried them in
/// its entry, and the replay writes them back), or the parity member refusing the
/// parity the replay recomputed. The rows stay (or go) in its log and it serves on;
/// every flushed write reads back, and the torn one old or new in each sector. The
/// replay's refused write is tried again in blocks: only the blocks refused again
/// are listed. Before, the refusal failed the member at the replay's end,
/// and a read then came back with data never written (RAID-4 seed
/// 3704117108011943336 of the write-error stories).
#[test]
fn a_member_that_refuses_the_replays_write_is_listed_not_failed() {
    for (seed, parity_refuses) in (0..16).map(|s| (s, s % 2 == 1)) {
        let (mut array, mut data) = logged_raid5_with_logs(100 + seed);
        let map = array.engine.geometry().stripe_map(0);
        let (x, p) = (map.data_member(0), map.p());
        let chunk = u64::from(array.engine.geometry().chunk_sectors());
        let write = |array: &mut SimArray, data: &mut [u8], at: u64, sectors: usize, byte: u8| {
            let bytes = vec![byte; sectors * SECTOR];
            array.write(at, &bytes).expect("write");
            let at = at as usize * SECTOR;
            data[at..at + bytes.len()].copy_from_slice(&bytes);
        };
        let refuser = if parity_refuses {
            p
        } else {
            // X refuses a client write to rows 0..8: listed, and recorded.
            array.members[x.index()].write_error_ranges.push(0..8);
            write(&mut array, &mut data, 0, 8, 0x5c);
            assert!(array.engine.durable_bad_blocks(x).covers(0..8));
            x
        };
        // A write to the next chunk of the stripe, rows 0..16, torn by the power cut:
        // not flushed, it may read back old or new.
        let before = data.clone();
        write(&mut array, &mut data, chunk, 16, 0xa7);
        if parity_refuses {
            // Of the replay's parity rows 0..16, P refuses 2..4: tried again in
            // blocks, it lists block 0..8 alone.
            array.members[p.index()].write_error_ranges.push(2..4);
        }
        array.power_cut();
        array.run();
        let replays: Vec<Event> = array
            .take_events()
            .into_iter()
            .filter(|e| matches!(e, Event::LogRecovered { .. }))
            .collect();
        assert!(
            matches!(replays[..], [Event::LogRecovered { replayed: 1.., .. }]),
            "seed {seed}: {replays:?}"
        );
        assert_eq!(
            array.engine.member_states()[refuser.index()],
            MemberState::Active,
            "seed {seed}: listed, not failed"
        );
        assert_eq!(array.engine.bad_blocks(refuser), bad(0..8), "seed {seed}");
        let sectors = array.engine.geometry().array_sectors();
        let got = array.read(0, sectors).expect("read");
        let torn = chunk as usize * SECTOR..(chunk + 16) as usize * SECTOR;
        // Sector by sector: cut in bands where X's log lists rows, the write went to
        // its member as two writes, and the cut may keep one.
        for at in torn.clone().step_by(SECTOR) {
            let sector = at..at + SECTOR;
            assert!(
                got[sector.clone()] == data[sector.clone()]
                    || got[sector.clone()] == before[sector],
                "seed {seed}: the unflushed write reads back old or new"
            );
        }
        assert!(
            got[..torn.start] == data[..torn.start] && got[torn.end..] == data[torn.end..],
            "seed {seed}: every other write reads back"
        );
    }
}

/// Rows listed on two members of a RAID-5 stripe are lost (loudly); a write that
/// overwrites the whole band needs none of them, goes through, and makes them good.
#[test]
fn rows_lost_beyond_the_redundancy_can_be_written_again() {
    let (mut array, _) = filled(Level::Raid5, 4);
    array.enable_bad_block_logs(512);
    let map = array.engine.geometry().stripe_map(0);
    let (a, b) = (map.data_member(0), map.data_member(1));
    array.engine.set_bad_block_log(a, bad(0..8), 512);
    array.engine.set_bad_block_log(b, bad(0..8), 512);
    assert!(matches!(
        array.read(0, 8),
        Err(EngineError::Unreadable { .. })
    ));
    let new = vec![0x5cu8; 48 * SECTOR];
    array
        .write(0, &new)
        .expect("a full-stripe write needs nothing listed");
    assert!(array.read(0, 48).expect("read") == new);
    assert!(array.engine.bad_blocks(a).is_empty() && array.engine.bad_blocks(b).is_empty());
}
