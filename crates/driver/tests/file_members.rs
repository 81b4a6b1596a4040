//! The driver over sparse file members: which array sectors surely read as zeros
//! (runs found from the members' holes, through every level's mapping, with members
//! missing), and reads that other threads do straight from active members.

use std::os::unix::fs::FileExt;
use std::path::Path;

use xraid_driver::{AllocationRun, ArrayDriver, BackendChoice, MemberSlot};
use xraid_engine::{Event, FailReason, MemberState, SyncKind};
use xraid_layout::MemberIdx;
use xraid_layout::{Geometry, Layout, Level};
use xraid_member::{DirectMode, FileMember, Member, OpenOptions};

const DATA_OFFSET: u64 = 1 << 20;
const MEMBER_BYTES: u64 = DATA_OFFSET + (8 << 20);
const CHUNK_SECTORS: u32 = 128; // 64 KiB

fn member(dir: &Path, i: usize) -> Box<dyn Member> {
    let path = dir.join(format!("m{i}"));
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(MEMBER_BYTES))
        .expect("sparse member");
    let opts = OpenOptions {
        write: true,
        direct: DirectMode::Off,
        lock: false,
    };
    Box::new(FileMember::open(&path, &opts).expect("open member"))
}

fn array(dir: &Path, level: Level, members: usize, missing: &[usize]) -> ArrayDriver {
    let geo = Geometry::new(
        level,
        Layout::default_for(level),
        members as u16,
        CHUNK_SECTORS,
        (MEMBER_BYTES - DATA_OFFSET) / 512,
    )
    .expect("geometry");
    let slots = (0..members)
        .map(|i| {
            let m = member(dir, i);
            (!missing.contains(&i)).then(|| MemberSlot {
                member: m.into(),
                data_offset_bytes: DATA_OFFSET,
                log_offset_bytes: None,
                bitmap_offset_bytes: None,
                checksums_offset_bytes: None,
            })
        })
        .collect();
    ArrayDriver::new(geo, slots, BackendChoice::Threads).expect("driver")
}

fn run(sectors: u64, zero: bool) -> AllocationRun {
    AllocationRun { sectors, zero }
}

/// The runs of the whole array, asked for in one go.
fn whole(d: &ArrayDriver) -> Vec<AllocationRun> {
    let sectors = d.engine().array_sectors();
    let runs = d.allocation(0, sectors, 1024);
    assert_eq!(
        runs.iter().map(|r| r.sectors).sum::<u64>(),
        sectors,
        "{runs:?}"
    );
    runs
}

#[test]
fn a_new_sparse_array_is_all_zeros_at_every_level() {
    for (level, members) in [
        (Level::Raid0, 3),
        (Level::Raid1, 2),
        (Level::Raid4, 3),
        (Level::Raid5, 4),
        (Level::Raid6, 5),
        (Level::Raid10, 4),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let d = array(dir.path(), level, members, &[]);
        assert_eq!(
            whole(&d),
            vec![run(d.engine().array_sectors(), true)],
            "{level:?}"
        );
    }
}

#[test]
fn written_ranges_are_data_and_the_rest_zeros() {
    for (level, members) in [
        (Level::Raid0, 3),
        (Level::Raid1, 2),
        (Level::Raid5, 4),
        (Level::Raid6, 5),
        (Level::Raid10, 4),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let mut d = array(dir.path(), level, members, &[]);
        // 8 KiB at 200 KiB and 4 KiB at 3 MiB (4 KiB-aligned: file systems keep data
        // in 4 KiB blocks).
        d.write_at(&[0xa5; 8192], 200 << 10).expect("write");
        d.write_at(&[0x5a; 4096], 3 << 20).expect("write");
        let sectors = d.engine().array_sectors();
        let expected = vec![
            run(400, true),
            run(16, false),
            run(6144 - 416, true),
            run(8, false),
            run(sectors - 6152, true),
        ];
        assert_eq!(whole(&d), expected, "{level:?}");
        // Asked from the middle of a hole, for a window, and capped at two runs.
        assert_eq!(
            d.allocation(100, 400, 1024),
            vec![run(300, true), run(16, false), run(84, true)]
        );
        assert_eq!(
            d.allocation(100, 400, 2),
            vec![run(300, true), run(16, false)]
        );
    }
}

#[test]
fn a_missing_data_member_counts_as_data_where_it_holds_data_chunks() {
    let dir = tempfile::tempdir().expect("dir");
    // RAID-5 left-symmetric over 4: stripe 0 keeps data chunks on members 0, 1, 2.
    let d = array(dir.path(), Level::Raid5, 4, &[1]);
    let runs = d.allocation(0, 3 * 128, 16);
    assert_eq!(runs, vec![run(128, true), run(128, false), run(128, true)]);
}

#[test]
fn a_mirror_is_zero_only_where_every_live_copy_is_a_hole() {
    let write_second_copy = |dir: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("m1"))
            .and_then(|f| f.write_all_at(&[1; 4096], DATA_OFFSET + 4096))
            .expect("write m1");
    };
    // Data on the second copy only (as after a crash mid-write): not zero.
    let dir = tempfile::tempdir().expect("dir");
    let d = array(dir.path(), Level::Raid1, 2, &[]);
    write_second_copy(dir.path());
    assert_eq!(
        d.allocation(0, 32, 16),
        vec![run(8, true), run(8, false), run(16, true)]
    );

    // A failed copy is never read: its data does not count.
    let dir = tempfile::tempdir().expect("dir");
    let d = array(dir.path(), Level::Raid1, 2, &[1]);
    write_second_copy(dir.path());
    assert_eq!(d.allocation(0, 32, 16), vec![run(32, true)]);
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

#[test]
fn the_bypass_reads_what_the_engine_wrote_at_every_level() {
    for (level, members) in [
        (Level::Raid0, 3),
        (Level::Raid1, 2),
        (Level::Raid4, 3),
        (Level::Raid5, 4),
        (Level::Raid6, 5),
        (Level::Raid10, 4),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let mut d = array(dir.path(), level, members, &[]);
        let data = pattern(1 << 20, members as u8);
        d.write_at(&data, 256 << 10).expect("write");
        d.publish_bypass();
        let bypass = d.read_bypass();
        // Aligned, unaligned to chunks, and crossing chunk boundaries.
        for (at, len) in [
            (256 << 10, 4096),
            (300 << 10, 200 << 10),
            (256 << 10, 1 << 20),
        ] {
            let mut buf = vec![0u8; len];
            assert!(bypass.read(&mut buf, at), "{level:?} {at} {len}");
            let from = (at - (256 << 10)) as usize;
            assert!(buf == data[from..from + len], "{level:?} {at} {len}");
        }
        // Not whole sectors, or past the end: the engine's.
        let mut buf = vec![0u8; 4096];
        assert!(!bypass.read(&mut buf[..100], 0));
        assert!(!bypass.read(&mut buf, 7));
        let end = d.engine().array_sectors() * 512;
        assert!(!bypass.read(&mut buf, end - 512));
    }
}

#[test]
fn the_bypass_leaves_missing_failed_and_rebuilding_members_to_the_engine() {
    let dir = tempfile::tempdir().expect("dir");
    // RAID-5 left-symmetric over 4: stripe 0 keeps data chunks 0, 1, 2 on members 0, 1, 2.
    let mut d = array(dir.path(), Level::Raid5, 4, &[1]);
    d.write_at(&pattern(192 << 10, 1), 0)
        .expect("degraded write");
    d.publish_bypass();
    let bypass = d.read_bypass();
    let mut buf = vec![0u8; 4096];
    assert!(bypass.read(&mut buf, 0), "member 0 is there");
    assert!(!bypass.read(&mut buf, 64 << 10), "member 1 is missing");
    // The engine rebuilds it for a read.
    let mut via_engine = vec![0u8; 4096];
    d.read_at(&mut via_engine, 64 << 10).expect("degraded read");
    assert!(via_engine == pattern(192 << 10, 1)[64 << 10..(64 << 10) + 4096]);

    // Beyond redundancy (a second member gone) the engine answers every read.
    d.engine_mut().fail_member(MemberIdx(0));
    d.publish_bypass();
    assert!(
        !bypass.read(&mut buf, 128 << 10),
        "data lost: nothing bypassed"
    );

    // On a whole array, a member that fails is no longer read from once published.
    let dir = tempfile::tempdir().expect("dir");
    let mut d = array(dir.path(), Level::Raid5, 4, &[]);
    d.write_at(&pattern(192 << 10, 2), 0).expect("write");
    d.publish_bypass();
    let bypass = d.read_bypass();
    d.engine_mut().fail_member(MemberIdx(0));
    assert!(bypass.read(&mut buf, 0), "not published yet");
    d.publish_bypass();
    assert!(!bypass.read(&mut buf, 0), "failed");
    assert!(bypass.read(&mut buf, 128 << 10), "member 2 still active");
    assert_eq!(d.engine().member_states()[2], MemberState::Active);
    assert!(buf == pattern(192 << 10, 2)[128 << 10..(128 << 10) + 4096]);

    // A member being rebuilt in its place is left to the engine too.
    d.engine_mut()
        .replace_member(MemberIdx(0))
        .expect("rebuild");
    d.publish_bypass();
    assert_eq!(d.engine().member_states()[0], MemberState::Rebuilding);
    assert!(!bypass.read(&mut buf, 0), "rebuilding");
}

/// Replaces the member of `role` with a new file `m{file}` and runs the copy to its end.
fn replace(d: &mut ArrayDriver, dir: &Path, role: u16, file: usize) {
    let new = MemberSlot {
        member: member(dir, file).into(),
        data_offset_bytes: DATA_OFFSET,
        log_offset_bytes: None,
        bitmap_offset_bytes: None,
        checksums_offset_bytes: None,
    };
    d.start_replacement(MemberIdx(role), new)
        .expect("replacement");
    d.engine_mut()
        .start_sync(SyncKind::Recover, 0)
        .expect("copy");
    while d.engine().sync_progress().is_some() || d.io_in_flight() {
        d.pump(true).expect("pump");
        d.tick();
    }
}

#[test]
fn the_bypass_follows_a_replacement_that_takes_over_a_role() {
    let dir = tempfile::tempdir().expect("dir");
    let mut d = array(dir.path(), Level::Raid5, 4, &[]);
    let data = pattern(192 << 10, 3);
    d.write_at(&data, 0).expect("write");
    // A fifth file replaces member 0 (which holds data chunk 0 of stripe 0).
    replace(&mut d, dir.path(), 0, 9);
    assert!(
        !d.engine().is_replacing(MemberIdx(0)),
        "the replacement took over"
    );
    d.publish_bypass();
    // The old file is no longer the role's: garbage there must not be read.
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.path().join("m0"))
        .and_then(|f| f.write_all_at(&[0xee; 4096], DATA_OFFSET))
        .expect("scribble on the old member");
    let mut buf = vec![0u8; 4096];
    assert!(d.read_bypass().read(&mut buf, 0));
    assert!(buf == data[..4096], "read from the replacement");
}

/// Descriptors this process has open on `path`.
fn open_fds(path: &Path) -> usize {
    let wanted = std::fs::canonicalize(path).expect("path");
    std::fs::read_dir("/proc/self/fd")
        .expect("fd list")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| *target == wanted)
        .count()
}

#[test]
fn a_member_that_left_its_role_is_closed() {
    let dir = tempfile::tempdir().expect("dir");
    let mut d = array(dir.path(), Level::Raid5, 4, &[]);
    d.write_at(&pattern(192 << 10, 5), 0).expect("write");
    let (old, new) = (dir.path().join("m1"), dir.path().join("m9"));
    replace(&mut d, dir.path(), 1, 9);
    assert!(
        d.holds(&old) && open_fds(&old) > 0,
        "open until the events are seen"
    );
    let events = d.take_events();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, xraid_engine::Event::ReplacementDone { .. })),
        "{events:?}"
    );
    // The bypass held it too, until told the role's device changed.
    d.publish_bypass();
    assert!(!d.holds(&old), "the driver let go of the old member");
    assert_eq!(open_fds(&old), 0, "the old member's file is closed");
    assert!(d.holds(&new) && open_fds(&new) > 0);
}

/// A replacement the driver drops because an I/O it made to it itself failed (the
/// array's superblock write, `fail_replacement_on_error`) is reported as failed on a
/// write error, not as failed by request (before 120e4dc it was dropped as an
/// operator's `fail` would drop it, and its event said `Requested`).
#[test]
fn a_replacement_dropped_on_a_refused_write_is_reported_as_a_write_error() {
    let dir = tempfile::tempdir().expect("dir");
    let mut d = array(dir.path(), Level::Raid5, 4, &[]);
    let new = MemberSlot {
        member: member(dir.path(), 9).into(),
        data_offset_bytes: DATA_OFFSET,
        log_offset_bytes: None,
        bitmap_offset_bytes: None,
        checksums_offset_bytes: None,
    };
    d.start_replacement(MemberIdx(1), new).expect("replacement");
    let refused = std::io::Error::other("the replacement refused its superblock");
    d.fail_replacement_on_error(MemberIdx(1), &refused);
    assert!(!d.engine().is_replacing(MemberIdx(1)), "dropped");
    assert_eq!(d.engine().member_states()[1], MemberState::Active);
    let events = d.take_events();
    let reasons: Vec<FailReason> = events
        .iter()
        .filter_map(|e| match e {
            Event::ReplacementFailed { role, reason } if *role == MemberIdx(1) => Some(*reason),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, [FailReason::WriteError], "{events:?}");
}
