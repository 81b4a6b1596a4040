//! Replacing a member while it serves (md's want_replacement), on the deterministic
//! simulator: writes during the replacement land on the member and on its
//! replacement, the copy reads the member itself (rebuilding only where that read
//! fails), the replacement takes the role at the end, a member that fails mid-way
//! leaves the replacement to go on as a rebuild, and a replacement that fails is
//! dropped while the member serves on.

use xraid_engine::sim::SimArray;
use xraid_engine::{Event, Geometry, MemberIdx, MemberState, Nanos, SyncError, SyncKind};
use xraid_layout::{Layout, Level};

const SECTOR: usize = 512;
const ROLE: MemberIdx = MemberIdx(1);

fn geometry(level: Level) -> Geometry {
    let disks = if level == Level::Raid1 { 2 } else { 4 };
    // RAID-1 syncs in 512 KiB units: enough of them to act part way.
    let (chunk, sectors) = if level == Level::Raid1 {
        (0, 16 * 1024)
    } else {
        (16, 512)
    };
    Geometry::new(level, Layout::default_for(level), disks, chunk, sectors).expect("geometry")
}

/// An array of `level` filled with random data, and the data.
fn filled(level: Level, seed: u64) -> (SimArray, Vec<u8>) {
    let geo = geometry(level);
    let mut array = SimArray::new(geo, seed);
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    (array, data)
}

/// Paces the recover to `units_per_sec` units per second of simulated time, so that
/// a test can act while it is part way.
fn slow_sync(array: &mut SimArray, units_per_sec: u64) {
    let mut config = array.engine.config();
    let unit_bytes = match array.engine.geometry().level() {
        Level::Raid1 => 1024 * 512,
        _ => 16 * 512,
    };
    config.sync_min_bytes_per_sec = unit_bytes * units_per_sec;
    config.sync_max_bytes_per_sec = unit_bytes * units_per_sec;
    array.engine.set_config(config);
}

/// Starts building a replacement for [`ROLE`] and the recover that copies it; returns
/// the replacement's slot.
fn start_copy(array: &mut SimArray) -> MemberIdx {
    array.start_replacement(ROLE).expect("replace");
    let slot = array.engine.replacement_slot(ROLE);
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    slot
}

/// Writes `len` random sectors at `sector`, keeping `data` in step.
fn write_random(array: &mut SimArray, data: &mut [u8], sector: u64, len: u64) {
    let mut bytes = vec![0u8; len as usize * SECTOR];
    array.rng().fill(&mut bytes);
    array.write(sector, &bytes).expect("write");
    let at = sector as usize * SECTOR;
    data[at..at + bytes.len()].copy_from_slice(&bytes);
}

/// Fails every member but `keep` that the level can spare, then reads the whole array:
/// what is read can only have come from `keep` and what the level still needs.
fn read_leaning_on(array: &mut SimArray, keep: MemberIdx) -> Vec<u8> {
    let geo = *array.engine.geometry();
    let spare = match geo.level() {
        Level::Raid1 | Level::Raid10 => 1,
        Level::Raid6 => 2,
        _ => 1,
    };
    let others: Vec<MemberIdx> = (0..geo.raid_disks())
        .map(MemberIdx)
        .filter(|&m| m != keep)
        // RAID-10 near: role 0 holds the other copy of role 1's chunks.
        .filter(|&m| geo.level() != Level::Raid10 || m.0 != 0)
        .take(spare)
        .collect();
    for m in others {
        array.engine.fail_member(m);
    }
    array.read(0, geo.array_sectors()).expect("read")
}

#[test]
fn writes_during_a_replacement_land_on_both_and_the_replacement_takes_the_role() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10] {
        let (mut array, mut data) = filled(level, 11);
        let geo = *array.engine.geometry();
        slow_sync(&mut array, 1000);
        let old_slot = array.engine.device_slot(ROLE);
        let new_slot = start_copy(&mut array);
        assert_ne!(old_slot, new_slot);
        // Far past where the copy is: only the write itself can put it on the
        // replacement.
        let end = geo.array_sectors();
        let mut reached = 0;
        for (sector, len) in [(end - 64, 64), (end - 200, 7), (end / 2 + 3, 40)] {
            let before = array.slot(old_slot).data.clone();
            write_random(&mut array, &mut data, sector, len);
            let old = &array.slot(old_slot).data;
            let new = &array.slot(new_slot).data;
            let changed: Vec<usize> = (0..old.len()).filter(|&i| old[i] != before[i]).collect();
            // Not every write touches role 1 (its data, or parity).
            reached += usize::from(!changed.is_empty());
            for i in changed {
                assert_eq!(old[i], new[i], "{level:?}: byte {i} of the write on both");
            }
        }
        assert!(reached > 0, "{level:?}: some write reached role 1");
        let progress = array.engine.sync_progress().expect("recover runs");
        assert!(
            progress.done_below < progress.total_units / 2,
            "{level:?}: the copy is still early ({progress:?})"
        );
        let reads_before = array.slot(old_slot).reads;
        array.run_sync();
        let events = array.take_events();
        assert!(
            events.contains(&Event::ReplacementDone {
                role: ROLE,
                old_slot
            }),
            "{level:?}: {events:?}"
        );
        // The copy read the member itself, not only the others.
        assert!(array.slot(old_slot).reads > reads_before, "{level:?}");
        assert_eq!(array.engine.device_slot(ROLE), new_slot, "{level:?}");
        assert!(!array.engine.is_replacing(ROLE));
        assert_eq!(
            array.engine.member_states(),
            vec![MemberState::Active; usize::from(geo.raid_disks())].as_slice()
        );
        // The old device gets nothing from now on.
        let reads_after = array.slot(old_slot).reads;
        assert_eq!(array.read(0, geo.array_sectors()).expect("read"), data);
        write_random(&mut array, &mut data, 0, 32);
        assert_eq!(array.slot(old_slot).reads, reads_after, "{level:?}");
        assert_eq!(read_leaning_on(&mut array, ROLE), data, "{level:?}");
    }
}

#[test]
fn the_member_failing_mid_way_leaves_the_replacement_to_finish_as_a_rebuild() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6] {
        let (mut array, mut data) = filled(level, 12);
        let geo = *array.engine.geometry();
        // Slow enough that the writes below (100 us per member I/O) find it part way.
        slow_sync(&mut array, 100);
        let old_slot = array.engine.device_slot(ROLE);
        let new_slot = start_copy(&mut array);
        array.pass_time(Nanos(100_000_000));
        let progress = array.engine.sync_progress().expect("recover runs");
        assert!(progress.done_below > 0 && progress.done_below < progress.total_units);
        // The member dies; the next write to it finds out. Writes go before and
        // after the copy's cursor.
        array.slot_mut(old_slot).health = xraid_engine::sim::SimMemberHealth::Dead;
        write_random(&mut array, &mut data, 0, geo.array_sectors());
        write_random(&mut array, &mut data, 5, 100);
        let events = array.take_events();
        assert!(
            events.contains(&Event::ReplacementTookOver {
                role: ROLE,
                old_slot
            }),
            "{level:?}: {events:?}"
        );
        assert_eq!(array.engine.device_slot(ROLE), new_slot);
        assert_eq!(
            array.engine.member_states()[ROLE.index()],
            MemberState::Rebuilding
        );
        assert_eq!(array.read(0, geo.array_sectors()).expect("read"), data);
        array.run_sync();
        let events = array.take_events();
        assert!(
            events.iter().any(|e| matches!(
                e,
                Event::SyncFinished {
                    kind: SyncKind::Recover,
                    completed: true,
                    unrecoverable: 0,
                    ..
                }
            )),
            "{level:?}: {events:?}"
        );
        assert_eq!(
            array.engine.member_states()[ROLE.index()],
            MemberState::Active
        );
        assert_eq!(read_leaning_on(&mut array, ROLE), data, "{level:?}");
    }
}

#[test]
fn a_replacement_that_fails_is_dropped_and_the_member_serves_on() {
    let (mut array, mut data) = filled(Level::Raid5, 13);
    let geo = *array.engine.geometry();
    slow_sync(&mut array, 1000);
    let old_slot = array.engine.device_slot(ROLE);
    let new_slot = start_copy(&mut array);
    array.pass_time(Nanos(5_000_000));
    array.slot_mut(new_slot).health = xraid_engine::sim::SimMemberHealth::Dead;
    write_random(&mut array, &mut data, 0, geo.array_sectors());
    array.run_sync();
    let events = array.take_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::ReplacementFailed { role: ROLE, .. })),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::SyncFinished {
                completed: false,
                ..
            }
        )),
        "{events:?}"
    );
    assert!(!array.engine.is_replacing(ROLE));
    assert_eq!(array.engine.device_slot(ROLE), old_slot);
    assert!(array.engine.is_whole());
    assert_eq!(read_leaning_on(&mut array, ROLE), data);
}

#[test]
fn where_the_member_cannot_be_read_the_copy_rebuilds_from_the_others() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6] {
        let (mut array, data) = filled(level, 14);
        let old_slot = array.engine.device_slot(ROLE);
        array.slot_mut(old_slot).bad_ranges.push(40..300);
        start_copy(&mut array);
        array.run_sync();
        let events = array.take_events();
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::ReplacementDone { role: ROLE, .. })),
            "{level:?}: {events:?}"
        );
        assert!(array.engine.stats().read_errors_corrected > 0, "{level:?}");
        assert_eq!(read_leaning_on(&mut array, ROLE), data, "{level:?}");
    }
}

#[test]
fn what_cannot_be_replaced_is_refused() {
    let geo = Geometry::new(Level::Raid0, Layout::default_for(Level::Raid0), 2, 8, 512)
        .expect("geometry");
    let mut raid0 = SimArray::new(geo, 1);
    assert_eq!(
        raid0.engine.start_replacement(MemberIdx(0)),
        Err(SyncError::NoRedundancy("replace a member"))
    );
    let (mut array, _) = filled(Level::Raid5, 15);
    array.start_replacement(ROLE).expect("replace");
    assert_eq!(
        array.engine.start_replacement(ROLE),
        Err(SyncError::AlreadyReplacing(1))
    );
    array.engine.fail_member(MemberIdx(2));
    assert_eq!(
        array.engine.start_replacement(MemberIdx(2)),
        Err(SyncError::NotActive(2))
    );
}

/// Found by the fault stories (seed 10705647263793395291): a replacement that dies is
/// dropped while other units of its copy are in flight; a unit whose read of the
/// member failed is then planned again with no member left to copy, and must rebuild
/// the member's rows from the others before writing them back, not write back
/// whatever its scratch held.
#[test]
fn a_unit_replanned_after_its_replacement_died_rebuilds_what_it_writes_back() {
    for level in [Level::Raid5, Level::Raid6] {
        for bad_start in [0, 16, 40, 100] {
            let (mut array, data) = filled(level, 15 + bad_start);
            let mut config = array.engine.config();
            config.sync_window = 4;
            array.engine.set_config(config);
            let old_slot = array.engine.device_slot(ROLE);
            array.start_replacement(ROLE).expect("replace");
            let new_slot = array.engine.replacement_slot(ROLE);
            array.slot_mut(new_slot).health = xraid_engine::sim::SimMemberHealth::Dead;
            array
                .slot_mut(old_slot)
                .bad_ranges
                .push(bad_start..bad_start + 8);
            array
                .engine
                .start_sync(SyncKind::Recover, 0)
                .expect("recover");
            array.run_sync();
            assert!(!array.engine.is_replacing(ROLE), "{level:?}");
            // The member serves on. A read repairs what is still unreadable there;
            // what the copy wrote back must be right, or it is returned as it is.
            let sectors = array.engine.geometry().array_sectors();
            let got = array.read(0, sectors).expect("read");
            assert!(got == data, "{level:?} bad range at {bad_start}");
            // And parity rows written back agree with the data.
            array.engine.start_sync(SyncKind::Check, 0).expect("check");
            array.run_sync();
            let mismatches: Vec<u64> = array
                .take_events()
                .iter()
                .filter_map(|e| match e {
                    Event::SyncFinished {
                        kind: SyncKind::Check,
                        mismatches,
                        ..
                    } => Some(*mismatches),
                    _ => None,
                })
                .collect();
            assert_eq!(mismatches, [0], "{level:?} bad range at {bad_start}");
        }
    }
}

/// A replacement that stops answering is dropped after the stall timeout, as one that
/// fails: the writes already waiting on it wait for its answer (their buffers are
/// lent to it), but new writes no longer go to it, and the member serves on.
#[test]
fn a_stalled_replacement_is_dropped_and_new_writes_stop_waiting_for_it() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10] {
        let (mut array, mut data) = filled(level, 23);
        let geo = *array.engine.geometry();
        let mut config = array.engine.config();
        config.stall_timeout = Nanos(1_000_000_000);
        array.engine.set_config(config);
        slow_sync(&mut array, 1000);
        let slot = start_copy(&mut array);
        // The replacement stops answering for a minute.
        array.slot_mut(slot).extra_latency = Nanos(60_000_000_000);
        let end = geo.array_sectors();
        write_random(&mut array, &mut data, end - 64, 64);
        let events = array.take_events();
        assert!(
            events.contains(&Event::ReplacementFailed {
                role: ROLE,
                reason: xraid_engine::FailReason::Stalled
            }),
            "{level:?}: {events:?}"
        );
        assert!(!array.engine.is_replacing(ROLE), "{level:?}");
        assert!(array.engine.is_whole(), "{level:?}: the member serves on");
        // From now on writes do not wait for it.
        let before = array.now();
        for i in 0..8 {
            write_random(&mut array, &mut data, i * 64, 16);
        }
        assert!(
            array.now().0 - before.0 < 1_000_000_000,
            "{level:?}: new writes waited for the stalled replacement"
        );
        array.run_sync();
        assert_eq!(array.read(0, end).expect("read"), data, "{level:?}");
    }
}

/// Power fails while a replacement is being built, after a write its copy had already
/// passed: the write may have stayed on the member and not on the replacement, or the
/// other way round. The copy goes on from its checkpoint but takes again what writes
/// not yet flushed touched (here, without a bitmap, everything): what a read returns
/// just after the cut is what the array keeps once the replacement has the role.
#[test]
fn a_replacement_resumed_after_a_power_cut_copies_again_what_was_not_flushed() {
    let geo = geometry(Level::Raid5);
    let mut torn = 0;
    for seed in 0..64 {
        let (mut array, _) = filled(Level::Raid5, 900 + seed);
        array.flush().expect("flush");
        slow_sync(&mut array, 200);
        start_copy(&mut array);
        assert!(array.run_sync_until(8), "seed {seed}: the copy goes on");
        // The driver's checkpoint: a flush, then the record.
        let done = array.engine.sync_progress().expect("copying").done_below;
        array.checkpoint().expect("checkpoint");
        array.engine.set_recovery_recorded(done);
        // Stripe 1 (role 1 holds data there), which the copy has passed, written
        // whole; not flushed.
        let stripe = 1u64;
        let sectors = u64::from(geo.chunk_sectors()) * u64::from(geo.data_disks());
        let mut bytes = vec![0u8; sectors as usize * SECTOR];
        array.rng().fill(&mut bytes);
        array.write(stripe * sectors, &bytes).expect("write");
        array.power_cut_now_resuming();
        assert!(
            array.engine.is_replacing(ROLE),
            "seed {seed}: still replacing"
        );
        let rows = |slot: MemberIdx, array: &SimArray| {
            let at = (stripe * u64::from(geo.chunk_sectors())) as usize * SECTOR;
            let len = geo.chunk_sectors() as usize * SECTOR;
            array.slot(slot).data[at..at + len].to_vec()
        };
        let replacement = array.engine.replacement_slot(ROLE);
        if rows(ROLE, &array) == rows(replacement, &array) {
            continue;
        }
        torn += 1;
        let after_cut = array
            .read(stripe * sectors, sectors)
            .expect("read after the cut");
        array.run_sync();
        assert!(!array.engine.is_replacing(ROLE), "seed {seed}: replaced");
        array
            .engine
            .start_sync_where_dirty(SyncKind::Resync, 0)
            .expect("resync");
        array.run_sync();
        assert!(
            array.read(stripe * sectors, sectors).expect("read") == after_cut,
            "seed {seed}: the replacement kept its own version of stripe {stripe}"
        );
    }
    assert!(
        torn > 4,
        "the cut tore member and replacement apart in {torn} of 64"
    );
}

/// A recover that ends before it is done (cancelled here; or with units it could not
/// rebuild) leaves its member rebuilding but keeps what it did: writes go on reaching
/// the member there, so what the superblocks recorded of its progress stays true (a
/// crash trusts it there).
#[test]
fn a_recover_cut_short_leaves_its_member_what_it_rebuilt() {
    let geo = geometry(Level::Raid5);
    let (mut array, mut data) = filled(Level::Raid5, 41);
    slow_sync(&mut array, 200);
    array.kill_member(ROLE);
    array.return_member(ROLE, true).expect("a blank member");
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    assert!(array.run_sync_until(8), "the recover goes on");
    array.engine.cancel_sync();
    array.run_sync();
    assert_eq!(
        array.engine.member_states()[ROLE.index()],
        MemberState::Rebuilding
    );
    assert!(
        array.engine.rebuilt_below(ROLE) >= 8,
        "it keeps what was rebuilt"
    );
    // Stripes 0..8 written now: member 1 takes its rows, so every stripe's rows
    // still XOR to zero across the members (parity agrees with what member 1 holds).
    let sectors = u64::from(geo.chunk_sectors()) * u64::from(geo.data_disks());
    write_random(&mut array, &mut data, 0, 8 * sectors);
    let bytes = 8 * geo.chunk_sectors() as usize * SECTOR;
    let mut xor = vec![0u8; bytes];
    for m in 0..geo.raid_disks() {
        let rows = &array.slot(MemberIdx(m)).data[..bytes];
        xor.iter_mut().zip(rows).for_each(|(x, r)| *x ^= r);
    }
    assert!(xor.iter().all(|&b| b == 0), "member 1 took the writes");
    assert!(array.read(0, 8 * sectors).expect("read") == data[..bytes * 3]);
}
