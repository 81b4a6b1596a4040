//! Offline runs (a write, a sync of an array not served) record each member failure
//! as they go, and a failure at their end is recorded before they say so: the
//! superblocks must let `serve --force` tell the member that failed with the array
//! from one that failed before it, and never record a failed array clean. A sync
//! records its progress as it goes too.

use std::path::{Path, PathBuf};

use xraid_driver::BackendChoice;
use xraid_engine::SyncKind;
use xraid_format::Superblock;
use xraid_layout::Level;
use xraid_member::MemberFault;

use crate::assemble::member_options;
use crate::handoff_tests::{read_sb, write_sb};
use crate::{add_member, assemble, create, Array, ArrayError, CreateOptions, OpenMode};

const MIB: u64 = 1 << 20;

/// The roles no device holds in the role table of the member at `path`'s own
/// superblock: the failures it saw recorded.
fn roles_failed_as_seen_by(path: &Path) -> Vec<u16> {
    let sb = read_sb(path);
    (0..sb.raid_disks as u16)
        .filter(|role| !sb.dev_roles.contains(role))
        .collect()
}

fn make(dir: &Path, level: Level, members: usize, size: u64, bitmap: bool) -> Vec<PathBuf> {
    let paths: Vec<PathBuf> = (0..members).map(|i| dir.join(format!("d{i}"))).collect();
    let opts = CreateOptions {
        chunk_bytes: 64 << 10,
        size_bytes: Some(size),
        backend: BackendChoice::Threads,
        bitmap,
        ..CreateOptions::new(level, "offline", paths.clone())
    };
    create(&opts, &mut |_, _| {}).expect("create");
    paths
}

fn open_with(paths: &[PathBuf], faults: &[&str]) -> Result<Array, ArrayError> {
    let faults: Vec<MemberFault> = faults.iter().map(|f| f.parse().expect("fault")).collect();
    let assembled = assemble(paths, &member_options(true)).expect("assemble");
    Array::open_with_faults(
        assembled,
        OpenMode::ReadWrite,
        BackendChoice::Threads,
        &faults,
    )
}

/// An array of `level` over `count` members of `size` bytes in `dir`, whose member
/// `role` was failed, removed and replaced by a blank one added (recorded as being
/// rebuilt, the rebuild left to the next open): the original members, the paths of
/// the array as it stands (the blank one last) and the blank one.
fn with_a_blank_member(
    dir: &Path,
    level: Level,
    count: usize,
    size: u64,
    role: usize,
) -> (Vec<PathBuf>, Vec<PathBuf>, PathBuf) {
    let members = make(dir, level, count, size, false);
    crate::fail_member(&members, &members[role]).expect("fail");
    crate::remove_member(&members, &members[role]).expect("remove");
    let blank = dir.join(format!("n{role}"));
    let mut paths = members.clone();
    paths.remove(role);
    let added = add_member(&paths, &blank, Some(size), false, false).expect("add");
    assert_eq!(added.role, Some(role as u16));
    paths.push(blank.clone());
    (members, paths, blank)
}

/// A recover run offline (`xraid add` of an array not served) records each member
/// failure as it comes, as a server does: a RAID-6 rebuilding role 0 loses role 1
/// early and role 2 much later, and role 2's own superblock shows role 1 failed —
/// which tells a forced start that role 2 failed with the array and role 1 did not.
/// Recorded only at the end (as before 2026-11-29), neither showed the other.
#[test]
fn a_recover_records_each_member_failure_as_it_comes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (members, paths, _) = with_a_blank_member(dir.path(), Level::Raid6, 5, 16 * MIB, 0);
    let mut array =
        open_with(&paths, &["role=1,fail-after=20", "role=2,fail-after=120"]).expect("open");
    // 240 units of 64 KiB, each reading every member once: role 1 fails within the
    // first 16 units in flight, role 2 far past them.
    let _ = array.sync(SyncKind::Recover, |_| {});
    assert!(
        array.driver_ref().engine().lost_error().is_some(),
        "roles 1 and 2 failed"
    );
    let _ = array.close();
    assert_eq!(
        roles_failed_as_seen_by(&members[1]),
        Vec::<u16>::new(),
        "role 1 failed with role 0 held by the member being rebuilt"
    );
    assert_eq!(
        roles_failed_as_seen_by(&members[2]),
        vec![1],
        "role 2's superblock recorded role 1's failure before its own"
    );
}

/// An offline recover (`xraid add` of an array not served) records its progress in
/// the superblocks as it goes, every `sync_checkpoint_pace` (2 s or more; 20 ms here), as a
/// server does: the member being rebuilt shows a recovery offset past 0 while the
/// recover still runs, so a kill or a power cut there costs only the work since.
/// Before 2026-11-29 an offline sync recorded it only when it stopped.
#[test]
fn an_offline_recover_records_its_progress_as_it_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, paths, blank) = with_a_blank_member(dir.path(), Level::Raid5, 4, 16 * MIB, 1);
    // 256 units of 64 KiB, 16 in flight, each waiting 10 ms on role 0: about 160 ms.
    let mut array = open_with(&paths, &["role=0,latency=10ms"]).expect("open");
    array.sync_checkpoint_pace = crate::CheckpointPace {
        every: std::time::Duration::from_millis(20),
        spacing: 0,
    };
    let unit_sectors = 128;
    let mut recorded = Vec::new();
    let stall_timeout = array.driver_ref().engine().config().stall_timeout;
    let began = std::time::Instant::now();
    let report = array
        .sync(SyncKind::Recover, |p| {
            // Not a timing: a sync whose units a checkpoint let go, left unsent, waited
            // for the engine's next timer (the stall timeout) after every checkpoint,
            // the whole recover taking minutes (a first build of the checkpoints' hold).
            let took = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
            assert!(
                took < stall_timeout.0,
                "the recover stalled after a checkpoint: {took} ns in"
            );
            let offset = read_sb(&blank).recovery_offset;
            assert!(
                offset <= p.done_below * unit_sectors,
                "recorded {offset} sectors, with units below {} rebuilt",
                p.done_below
            );
            recorded.push(offset);
        })
        .expect("recover");
    assert!(report.completed);
    recorded.dedup();
    assert!(
        recorded.iter().filter(|&&o| o > 0).count() >= 2,
        "progress recorded on the way: {recorded:?}"
    );
    array.close().expect("close");
    let sb = read_sb(&blank);
    assert_eq!(
        sb.feature_map & xraid_format::MD_FEATURE_RECOVERY_OFFSET,
        0,
        "rebuilt"
    );
}

/// A member failing on a checkpoint's flush during an offline recover, losing the
/// array: the failure is in the superblocks when the sync returns, before any close
/// (found by a review: the checkpoint's error ended the sync, and `xraid add` returned
/// on it without closing, role 2 left recorded active). Role 2 fails at each of its
/// I/Os in turn, a checkpoint due at every step.
#[test]
fn a_failure_on_a_checkpoints_flush_is_recorded() {
    let mut lost = 0;
    for k in 0..130 {
        let dir = tempfile::tempdir().expect("tempdir");
        let (members, paths, _) = with_a_blank_member(dir.path(), Level::Raid5, 4, 8 * MIB, 1);
        let fault = format!("role=2,fail-after={k}");
        let Ok(mut array) = open_with(&paths, &[&fault]) else {
            continue;
        };
        array.sync_checkpoint_pace = crate::CheckpointPace {
            every: std::time::Duration::ZERO,
            spacing: 0,
        };
        let result = array.sync(SyncKind::Recover, |_| {});
        if array.driver_ref().engine().lost_error().is_none() {
            continue;
        }
        lost += 1;
        assert_eq!(
            roles_failed_as_seen_by(&members[0]),
            vec![2],
            "fail-after {k}: the sync returned ({result:?}) with role 2's failure unrecorded"
        );
        let _ = array.close();
    }
    assert!(lost > 0, "no run lost the array");
}

/// A scrub of an array left dirty runs the resync it owes first, in a loop of its own:
/// that loop records failures as they come too (a review found it did not).
#[test]
fn a_scrub_records_failures_during_the_resync_it_owes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let members = make(dir.path(), Level::Raid5, 4, 16 * MIB, false);
    // Left dirty, as a crash leaves it (md: resync_offset 0, one event more).
    for m in &members {
        let mut sb = read_sb(m);
        sb.events += 1;
        sb.resync_offset = 0;
        write_sb(m, &sb);
    }
    let mut array =
        open_with(&members, &["role=1,fail-after=20", "role=2,fail-after=150"]).expect("open");
    assert_eq!(
        array.driver_ref().engine().sync_progress().map(|p| p.kind),
        Some(SyncKind::Resync),
        "the owed resync runs at open"
    );
    let _ = array.sync(SyncKind::Check, |_| {});
    assert!(array.driver_ref().engine().lost_error().is_some(), "lost");
    let _ = array.close();
    assert_eq!(roles_failed_as_seen_by(&members[2]), vec![1]);
}

/// Role 2 failing at each I/O near the end of a write of a degraded RAID-5 (role 1
/// failed early): during the last requests, on the stream's flush, on close's flush,
/// while its superblock update runs (bitmap header, superblocks, the flush after
/// them). Whenever the array ended failed, the write or the close said so, and every
/// member left records both failures with the array owing a resync — never clean,
/// never a round written to some members and not others. A review found each of
/// those: exit 0 with the array failed, role 2 left recorded active, "clean, failed",
/// half a round.
#[test]
fn a_failure_at_the_end_of_a_write_is_recorded_and_reported() {
    let data: Vec<u8> = (0..20u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut ended_failed = 0;
    for bitmap in [true, false] {
        for k in 155..180 {
            let dir = tempfile::tempdir().expect("tempdir");
            let members = make(dir.path(), Level::Raid5, 4, 8 * MIB, bitmap);
            let fault = format!("role=2,fail-after={k}");
            let mut array = open_with(&members, &["role=1,fail-after=20", &fault]).expect("open");
            array.begin_writes().expect("begin");
            let written = array.write_stream(0, &mut &data[..], &mut |_| {});
            let closed = array.close();
            let tag = format!("bitmap {bitmap}, role 2 failing after {k} I/Os");
            let survivors: Vec<Superblock> = [0, 3].iter().map(|&r| read_sb(&members[r])).collect();
            let failed = roles_failed_as_seen_by(&members[0]) == vec![1, 2];
            if failed {
                ended_failed += 1;
                assert!(
                    written.is_err() || closed.is_err(),
                    "{tag}: the array failed and nothing said so"
                );
            } else {
                assert!(
                    written.is_ok() && closed.is_ok(),
                    "{tag}: {written:?} {closed:?}"
                );
            }
            let events = survivors[0].events;
            for (r, sb) in [0, 3].iter().zip(&survivors) {
                assert_eq!(sb.events, events, "{tag}: role {r} missed a round");
                assert_eq!(
                    roles_failed_as_seen_by(&members[*r]),
                    if failed { vec![1, 2] } else { vec![1] },
                    "{tag}: role {r}"
                );
                assert_eq!(
                    sb.resync_offset == u64::MAX,
                    !failed,
                    "{tag}: role {r} clean only when the array did not fail"
                );
            }
        }
    }
    assert!(
        ended_failed > 10,
        "the range reaches role 2's last I/Os: {ended_failed}"
    );
}

/// Writes not flushed (as a client that never flushes leaves them), then close, with
/// role 2 of a degraded RAID-5 failing at each of its I/Os around close: on close's
/// flush, on the stripe log's marker write after it (whose loss the flush's answer
/// does not wait for), on the bitmap header, on the superblocks. Whenever the writes
/// went through and the array failed during close, close says so (a review found a
/// marker-write loss reported as a clean stop, by the server too).
#[test]
fn a_failure_during_close_is_reported() {
    let data: Vec<u8> = (0..256u32 << 10)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let mut failed_in_close = 0;
    for bitmap in [false, true] {
        for k in 0..60 {
            let dir = tempfile::tempdir().expect("tempdir");
            let members = make(dir.path(), Level::Raid5, 4, 8 * MIB, bitmap);
            let fault = format!("role=2,fail-after={k}");
            let Ok(mut array) = open_with(&members, &["role=1,fail-now", &fault]) else {
                continue; // role 2 failed at open
            };
            let written = array.begin_writes().is_ok()
                && (0..4u64).all(|i| {
                    array
                        .driver()
                        .write_at(&data, i * data.len() as u64)
                        .is_ok()
                });
            if !written || array.driver_ref().engine().lost_error().is_some() {
                continue;
            }
            let closed = array.close();
            if roles_failed_as_seen_by(&members[0]).contains(&2) {
                failed_in_close += 1;
                assert!(
                    matches!(closed, Err(ArrayError::FailedWhileClosing { .. })),
                    "bitmap {bitmap}, role 2 failing after {k} I/Os: {closed:?}"
                );
            } else {
                assert!(closed.is_ok(), "bitmap {bitmap}, k {k}: {closed:?}");
            }
        }
    }
    assert!(
        failed_in_close > 3,
        "the range reaches close: {failed_in_close}"
    );
}
