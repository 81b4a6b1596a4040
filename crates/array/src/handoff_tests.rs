//! Handing an array between xraid and md (written by a review of md's field
//! meanings): the stripe log's rings live in the gap
//! between md's metadata and the data, which md neither reads nor writes. After md has
//! run the array (its superblocks' event count moved on, `resync_offset` saying what
//! md left: `MaxSector` after a clean stop, 0 after a crash), what the rings say is
//! from before md's session and no longer describes the members.
//!
//! md's meaning (drivers/md/md.c `super_1_sync`, `super_1_validate`): `resync_offset`
//! 0 with the array not in sync means the next assembly resyncs from 0 (raid5
//! recomputes parity from the data everywhere); `MaxSector` means the members agree
//! and nothing is owed. These tests write superblocks as md would at the end of such a
//! session and check that xraid then honours them.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use xraid_driver::BackendChoice;
use xraid_engine::SyncKind;
use xraid_format::{Superblock, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET_BYTES};
use xraid_layout::{Level, SECTOR_BYTES};

use crate::assemble::member_options;
use crate::{assemble, create, Array, CreateOptions, OpenMode};

const MIB: u64 = 1 << 20;
const CHUNK_BYTES: u64 = 64 << 10;

fn raid5(dir: &Path) -> Vec<PathBuf> {
    let members: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("d{i}"))).collect();
    let opts = CreateOptions {
        chunk_bytes: CHUNK_BYTES,
        size_bytes: Some(16 * MIB),
        backend: BackendChoice::Threads,
        bitmap: false,
        ..CreateOptions::new(Level::Raid5, "handoff", members.clone())
    };
    create(&opts, &mut |_, _| {}).expect("create");
    members
}

fn open(members: &[PathBuf]) -> Array {
    let assembled = assemble(members, &member_options(true)).expect("assemble");
    Array::open(assembled, OpenMode::ReadWrite, BackendChoice::Threads).expect("open")
}

/// The md superblock of the member at `path`, read straight from the file.
pub(crate) fn read_sb(path: &Path) -> Superblock {
    let mut bytes = vec![0u8; SUPERBLOCK_BYTES];
    std::fs::File::open(path)
        .expect("member")
        .read_exact_at(&mut bytes, SUPERBLOCK_OFFSET_BYTES)
        .expect("superblock");
    Superblock::parse(&bytes).expect("md superblock")
}

/// Writes `sb` as the md superblock of the member at `path`, straight to the file.
pub(crate) fn write_sb(path: &Path, sb: &Superblock) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("member")
        .write_all_at(&sb.to_bytes(), SUPERBLOCK_OFFSET_BYTES)
        .expect("superblock");
}

/// One superblock update of md's on every member: the next event count, the time in
/// whole seconds (`md_update_sb`), and `resync_offset` as md's `super_1_sync` writes
/// it (0 while active, the checkpoint — `u64::MAX` when in sync — when clean).
fn md_update(members: &[PathBuf], resync_offset: u64) {
    for m in members {
        let mut sb = read_sb(m);
        sb.events += 1;
        sb.utime = Superblock::encode_time(crate::members::now_secs());
        sb.resync_offset = resync_offset;
        write_sb(m, &sb);
    }
}

/// Where array byte `offset` (one 4 KiB block, inside one chunk) lives: (data member,
/// parity member, byte offset on both member files).
fn place(array: &Array, members: &[PathBuf], offset: u64) -> (usize, usize, u64) {
    let geo = array.driver_ref().engine().geometry();
    let pos = geo.stripe_pos(offset / SECTOR_BYTES);
    let map = geo.stripe_map(pos.stripe);
    let sector = geo.member_sector(pos.stripe, pos.offset_in_chunk);
    let data_offset = read_sb(&members[0]).data_offset;
    (
        map.data_member(pos.data_index).index(),
        map.p().index(),
        (data_offset + sector) * SECTOR_BYTES,
    )
}

fn read_file(path: &Path, at: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    std::fs::File::open(path)
        .expect("member")
        .read_exact_at(&mut out, at)
        .expect("read member");
    out
}

fn write_file(path: &Path, at: u64, bytes: &[u8]) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("member")
        .write_all_at(bytes, at)
        .expect("write member");
}

/// md writes `new` at a data block of a RAID-5 of three: data and parity together
/// (read-modify-write), as a completed md write leaves them.
fn md_write(members: &[PathBuf], data: usize, parity: usize, at: u64, new: &[u8]) {
    let old = read_file(&members[data], at, new.len());
    let mut p = read_file(&members[parity], at, new.len());
    for i in 0..new.len() {
        p[i] ^= old[i] ^ new[i];
    }
    write_file(&members[data], at, new);
    write_file(&members[parity], at, &p);
}

/// xraid stops uncleanly after a write (here its stripe-log entry is already covered
/// by a marker: an entry no marker covers is not reached through this API, and a
/// power cut between the two stays untested); md then assembles the array (dirty: it resyncs, which changes nothing here as the
/// write completed), serves a newer write to the same block, and stops cleanly
/// (`resync_offset` = MaxSector, two more events). xraid assembling the array after
/// md must serve md's data, not replay its old entry over the block md overwrote:
/// md's superblocks say the members agree and owe nothing.
#[test]
fn a_stripe_log_entry_from_before_md_ran_the_array_is_not_replayed_over_mds_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let members = raid5(dir.path());
    let offset = 5 * CHUNK_BYTES; // some block of stripe 2
    let old = vec![0xaau8; 4096];
    let new = vec![0x55u8; 4096];

    let mut array = open(&members);
    let (data, parity, at) = place(&array, &members, offset);
    array.begin_writes().expect("active");
    array.driver().write_at(&old, offset).expect("xraid write");
    // The crash: the process ends without closing (nothing more written).
    drop(array);
    assert_eq!(
        read_file(&members[data], at, 4096),
        old,
        "xraid's write landed"
    );
    assert_eq!(read_sb(&members[0]).resync_offset, 0, "left active");

    // md's session: assembled dirty, resynced, a newer write, a clean stop.
    md_update(&members, 0);
    md_write(&members, data, parity, at, &new);
    md_update(&members, u64::MAX);

    let mut array = open(&members);
    let mut got = vec![0u8; 4096];
    array.driver().read_at(&mut got, offset).expect("read");
    array.close().expect("close");
    assert!(
        got == new,
        "xraid serves {:#04x}.. where md last wrote {:#04x}..: its stripe log, from before \
         md ran the array, was replayed over md's write",
        got[0],
        new[0]
    );
    assert_eq!(
        read_file(&members[data], at, 4096),
        new,
        "md's write is gone from the member"
    );
}

/// xraid stops a RAID-5 cleanly (its rings' newest marker: durable, no resync owed).
/// md then runs it and crashes mid-write: `resync_offset` 0 on a new event count, a
/// data block written without its parity (md's write hole). md would resync the whole
/// array at its next assembly. xraid must too (or at least not call it clean), not
/// take its own older marker's word that the log covers every cut-off write and
/// mark the array clean with parity that disagrees.
#[test]
fn a_raid5_md_left_dirty_after_xraid_stopped_it_cleanly_is_resynced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let members = raid5(dir.path());
    let offset = 5 * CHUNK_BYTES;

    let mut array = open(&members);
    let (data, _parity, at) = place(&array, &members, offset);
    array.begin_writes().expect("active");
    array
        .driver()
        .write_at(&vec![0xaau8; 4096], offset)
        .expect("xraid write");
    array.close().expect("close");
    assert_eq!(read_sb(&members[0]).resync_offset, u64::MAX, "clean");

    // md's session: active (resync_offset 0), a write reaches the data member and not
    // the parity member, then the crash.
    md_update(&members, 0);
    write_file(&members[data], at, &vec![0x55u8; 4096]);

    let array = open(&members);
    let owed = array.resync_pending()
        || array
            .driver_ref()
            .engine()
            .sync_progress()
            .is_some_and(|p| p.kind == SyncKind::Resync);
    array.close().expect("close");
    let sb = read_sb(&members[0]);
    eprintln!(
        "owed {owed}, resync_offset after xraid's open and close {:#x}",
        sb.resync_offset
    );
    let mut array = open(&members);
    let report = array
        .sync_until(SyncKind::Check, |_| {}, || false)
        .expect("check");
    array.close().expect("close");
    assert!(
        owed || sb.resync_offset != u64::MAX || report.mismatches == 0,
        "md left the array dirty (resync_offset 0) with a torn stripe; xraid owed no \
         resync (pending {owed}), marked it clean (resync_offset {:#x}) and a check finds \
         {} mismatched units",
        sb.resync_offset,
        report.mismatches
    );
}

/// Whether xraid can tell its own superblock writes from md's: xraid writes the
/// update time to the microsecond, md whole seconds. An open after md's session
/// (clean or not) is told the rings know nothing of md's writes; one after xraid's
/// own unclean stop is not. An offline role-table write (`fail`) over md's
/// superblocks does not hide that md wrote last.
#[test]
fn an_open_tells_superblocks_md_wrote_last_from_xraids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let members = raid5(dir.path());
    let xraids = |when: &str| {
        let sbs: Vec<Superblock> = members.iter().map(|m| read_sb(m)).collect();
        assert!(
            sbs.iter().all(Superblock::utime_has_microseconds),
            "{when}: xraid's superblocks carry microseconds"
        );
    };
    xraids("after create");

    // xraid's own unclean stop: the rings' word stands.
    let mut array = open(&members);
    array.begin_writes().expect("active");
    array
        .driver()
        .write_at(&[0xaau8; 4096], 5 * CHUNK_BYTES)
        .expect("xraid write");
    drop(array);
    xraids("after xraid's session");
    let array = open(&members);
    assert!(
        !array.driver_ref().engine().log_knew_nothing(),
        "after xraid's own unclean stop its rings vouch as before"
    );
    array.close().expect("close");
    xraids("after xraid's close");

    // md runs the array and is cut off: its superblocks, whole seconds.
    md_update(&members, 0);
    assert!(!read_sb(&members[0]).utime_has_microseconds());
    // An offline `fail` of a member (a role-table write with a new event count)
    // keeps md's mark.
    crate::fail_member(&members, &members[2]).expect("offline fail");
    assert!(
        !read_sb(&members[0]).utime_has_microseconds(),
        "an offline role-table write hid md's session"
    );
    let array = open(&members[..2]);
    assert!(
        array.driver_ref().engine().log_knew_nothing(),
        "the rings vouched for an array md wrote last"
    );
    array.close().expect("close");
}

/// RAID-10 near layouts: md's per-device `recovery_offset` is a member (physical)
/// sector, every sector below it rebuilt (raid10's recovery walks the members'
/// addresses; md.c `md_do_sync` "recovery follows the physical size of devices").
/// xraid's recover walks array chunks. Brute force over small shapes: a checkpoint
/// xraid records claims only member rows whose every chunk it has rebuilt, and one md
/// recorded resumes at a unit with no chunk before it left unrebuilt.
#[test]
fn raid10_near_recovery_offset_maps_both_ways() {
    use xraid_engine::{Engine, MemberState};
    use xraid_layout::{Geometry, Layout, Raid10Layout};
    for (disks, near) in [(2u16, 2u8), (3, 2), (4, 2), (5, 2), (4, 3), (5, 3), (7, 3)] {
        let chunk = 8u32;
        let layout = Layout::Raid10(Raid10Layout {
            near_copies: near,
            far_copies: 1,
            offset: false,
        });
        let geo = Geometry::new(Level::Raid10, layout, disks, chunk, 40 * u64::from(chunk))
            .expect("geometry");
        let engine = Engine::new(geo, vec![MemberState::Active; usize::from(disks)]);
        let chunks = geo.array_sectors() / u64::from(chunk);
        // (member, row) -> array chunk held there.
        let mut at = std::collections::HashMap::new();
        for c in 0..chunks {
            for place in geo.copies(c * u64::from(chunk)).as_slice() {
                at.insert((place.member.index(), place.sector / u64::from(chunk)), c);
            }
        }
        for unit in 0..=chunks {
            let rows = engine.unit_to_member_sector(unit) / u64::from(chunk);
            for (&(_, row), &c) in &at {
                assert!(
                    row >= rows || c < unit,
                    "n{near} on {disks}: unit {unit} recorded as row {rows}, chunk {c} at row {row}"
                );
            }
        }
        for rows in 0..=40u64 {
            let unit = engine.member_sector_to_unit(rows * u64::from(chunk));
            for (&(_, row), &c) in &at {
                assert!(
                    c >= unit || row < rows,
                    "n{near} on {disks}: md's row {rows} resumed at unit {unit}, chunk {c} at row {row}"
                );
            }
        }
    }
}

/// Stripe 2 of the RAID-5 of three: the array bytes of its first and second data
/// chunks' first blocks, and what xraid writes to the first.
const FIRST: u64 = 4 * CHUNK_BYTES;
const SECOND: u64 = 5 * CHUNK_BYTES;
const WANT: [u8; 4096] = [0x77; 4096];

/// xraid, with the log, writes [`WANT`] at [`FIRST`] and stops cleanly (a clean
/// marker on the rings). Returns the first chunk's member and byte offset there, and
/// the second's.
fn xraid_writes_the_first_chunk(members: &[PathBuf]) -> ((usize, u64), (usize, u64)) {
    let mut array = open(members);
    let (first_member, _, first_at) = place(&array, members, FIRST);
    let (second_member, _, second_at) = place(&array, members, SECOND);
    array.begin_writes().expect("active");
    array.driver().write_at(&WANT, FIRST).expect("xraid write");
    array.close().expect("close");
    ((first_member, first_at), (second_member, second_at))
}

/// An open without the stripe log (`serve --consistency resync`).
fn open_without_the_log(members: &[PathBuf]) -> Array {
    let assembled = assemble(members, &member_options(true)).expect("assemble");
    Array::open_with(
        assembled,
        OpenMode::ReadWrite,
        BackendChoice::Threads,
        &[],
        crate::Consistency::Resync,
    )
    .expect("open without the log")
}

/// An open with the log, where the first chunk's block fails to read; returns what
/// reading it gives (an error, or bytes rebuilt from parity) and whether the log
/// knew nothing of the array.
fn read_the_first_block_through_parity(
    members: &[PathBuf],
    (first_member, first_at): (usize, u64),
) -> (Result<Vec<u8>, String>, bool) {
    use xraid_member::{FaultPlan, MemberFault};
    let assembled = assemble(members, &member_options(true)).expect("assemble");
    let fault = MemberFault {
        role: u16::try_from(first_member).expect("small"),
        plan: FaultPlan {
            read_error_ranges: std::iter::once(first_at..first_at + 4096).collect(),
            ..FaultPlan::default()
        },
    };
    let mut array = Array::open_with_faults(
        assembled,
        OpenMode::ReadWrite,
        BackendChoice::Threads,
        &[fault],
    )
    .expect("open with the log");
    let knew_nothing = array.driver_ref().engine().log_knew_nothing();
    let mut got = vec![0u8; 4096];
    let read = array.driver().read_at(&mut got, FIRST);
    drop(array);
    (read.map(|_| got).map_err(|e| e.to_string()), knew_nothing)
}

/// An open without the stripe log (`serve --consistency resync`) never puts the log's
/// doubt about md's session on the rings, so it must not stamp the superblocks. md
/// left the array dirty with a torn stripe (data written, parity not); the
/// resync-mode open marks the array active and the power fails before its resync
/// gets anywhere. The next open, with the log, must not take the rings' old (clean)
/// marker's word for parity md tore: a row that fails to read in that stripe is
/// refused, not rebuilt wrong (found by a review: the first version of the stamp
/// stamped there).
#[test]
fn a_resync_mode_open_does_not_hide_mds_session_from_the_next_log_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let members = raid5(dir.path());
    let (first, (second_member, second_at)) = xraid_writes_the_first_chunk(&members);

    // md runs it and is cut off mid-write: the second chunk written, its parity not.
    md_update(&members, 0);
    write_file(&members[second_member], second_at, &[0x55u8; 4096]);
    assert!(!read_sb(&members[0]).utime_has_microseconds());

    // xraid serves it without the log; the power fails right after the open.
    drop(open_without_the_log(&members));
    assert_eq!(
        read_sb(&members[0]).resync_offset,
        0,
        "still owes its resync"
    );
    assert!(
        !read_sb(&members[0]).utime_has_microseconds(),
        "an open without the log stamped the superblocks"
    );

    let (read, knew_nothing) = read_the_first_block_through_parity(&members, first);
    assert!(
        read.as_ref().map_or(true, |got| got[..] == WANT),
        "a row that failed to read was rebuilt through parity md tore: {read:?}"
    );
    assert!(knew_nothing, "the rings vouched for an array md wrote last");
}

/// The same hole without md, older than the stamp: xraid's own session without the
/// stripe log (`--consistency resync`) is one the rings know nothing of either. It
/// tears a stripe (a write cut off: data reached, parity not) and the power fails;
/// the next open with the log must not take the rings' clean marker's word for that
/// stripe's parity (found by the same review: before the stamp, nothing told).
#[test]
fn a_resync_mode_session_of_xraids_own_is_not_vouched_for_by_the_next_log_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let members = raid5(dir.path());
    let (first, (second_member, second_at)) = xraid_writes_the_first_chunk(&members);

    let mut array = open_without_the_log(&members);
    array.begin_writes().expect("active");
    // Its write to the second chunk is cut off: the data reached the member, its
    // parity did not.
    write_file(&members[second_member], second_at, &[0x55u8; 4096]);
    drop(array);
    assert_eq!(read_sb(&members[0]).resync_offset, 0, "left active");

    let (read, _) = read_the_first_block_through_parity(&members, first);
    assert!(
        read.as_ref().map_or(true, |got| got[..] == WANT),
        "a row that failed to read was rebuilt through parity a write without the log \
         tore: {read:?}"
    );
}
