//! The write-intent bitmap end to end: `mdadm --examine-bitmap` reads what xraid
//! wrote (event counts, chunks, dirty bits) after a crash under writes; the next start
//! resyncs only the dirty chunks and a clean stop leaves none; a member back after a
//! short absence catches up on what changed only.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::require_tool;
use crate::server::Server;
use crate::util::{fails, ok, p, random_bytes, tempdir};

/// A RAID-5 of four 16 MiB members with a 1 MiB bitmap chunk (15 bits over 15 MiB used per member).
fn raid5_with_bitmap(dir: &Path) -> PathBuf {
    crate::server::create_array(dir, "5", 4, "16M", &["--bitmap-chunk", "1M"])
}

/// The array in `disks` reads back as `expected` (from its start).
fn assert_reads(disks: &Path, expected: &[u8]) {
    assert_reads_at(disks, 0, expected);
}

/// The array in `disks` reads back as `expected` at byte `offset`.
fn assert_reads_at(disks: &Path, offset: u64, expected: &[u8]) {
    let (offset, length) = (offset.to_string(), expected.len().to_string());
    let out = crate::util::ok_bytes(&["read", p(disks), "--offset", &offset, "--length", &length]);
    assert_eq!(out[..], expected[..]);
}

/// Rewrites the sync size in every member's bitmap superblock (8 KiB into the member,
/// field at byte 40) with `new(old size)`, behind xraid's back.
fn set_sync_size(disks: &Path, new: impl Fn(u64) -> u64) {
    const AT: usize = 8192 + 40;
    for i in 0..4 {
        let member = disks.join(format!("d{i}"));
        let mut bytes = std::fs::read(&member).expect("member");
        let size = u64::from_le_bytes(bytes[AT..AT + 8].try_into().expect("8 bytes"));
        bytes[AT..AT + 8].copy_from_slice(&new(size).to_le_bytes());
        std::fs::write(&member, &bytes).expect("damage");
    }
}

/// "label : value" lines as pairs.
fn field(text: &str, label: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(" : ")?;
        (k.trim() == label).then(|| v.trim().to_owned())
    })
}

/// What mdadm 4.x prints with `--examine-bitmap` for the bitmap of `member`: mdadm
/// looks for internal bitmaps on block devices only and reads a regular file as a
/// bitmap file, so it is handed the bytes from where `--examine` says the bitmap is.
fn mdadm_examine_bitmap(member: &Path, scratch: &Path) -> String {
    let examine = Command::new("mdadm")
        .args(["--examine", p(member)])
        .output()
        .expect("mdadm runs");
    let examine = String::from_utf8_lossy(&examine.stdout).into_owned();
    let offset: u64 = field(&examine, "Internal Bitmap")
        .and_then(|v| {
            v.strip_suffix(" sectors from superblock")
                .map(str::to_owned)
        })
        .expect("mdadm sees an internal bitmap")
        .parse()
        .expect("a number");
    let start = (8 + offset) * 512;
    let bytes = std::fs::read(member).expect("member");
    let bitmap = scratch.join("bitmap.bin");
    std::fs::write(&bitmap, &bytes[start as usize..start as usize + 64 * 1024]).expect("write");
    let out = Command::new("mdadm")
        .args(["--examine-bitmap", p(&bitmap)])
        .output()
        .expect("mdadm runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// mdadm's and xraid's bitmap reports agree on every field but the file name; the
/// fields that matter most are returned: (events, events cleared, bitmap line).
pub(crate) fn bitmaps_agree(member: &Path, scratch: &Path) -> (String, String, String) {
    let md = mdadm_examine_bitmap(member, scratch);
    let ours = ok(&["examine", "--bitmap", p(member)]);
    let strip = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.trim_start().starts_with("Filename"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(strip(&md), strip(&ours), "mdadm:\n{md}\nxraid:\n{ours}");
    (
        field(&ours, "Events").expect("events"),
        field(&ours, "Events Cleared").expect("events cleared"),
        field(&ours, "Bitmap").expect("bitmap line"),
    )
}

fn qemu_io(server: &Server, commands: &[&str]) {
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw", &server.uri("")]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    let out = cmd.output().expect("qemu-io runs");
    assert!(
        out.status.success(),
        "qemu-io failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mdadm_reads_the_bitmap_left_by_a_crash_and_the_restart_resyncs_its_chunks_only() {
    require_tool!("mdadm");
    require_tool!("qemu-io");
    let dir = tempdir();
    let disks = raid5_with_bitmap(dir.path());
    let member = disks.join("d1");
    let (_, _, line) = bitmaps_agree(&member, dir.path());
    assert!(line.starts_with("15 bits (chunks), 0 dirty"), "{line}");

    // Writes to three chunks, flushed, then SIGKILL before the quiet time clears them.
    let server = Server::unix(dir.path(), &[p(&disks)]);
    qemu_io(
        &server,
        &[
            "write -P 1 0 64k",
            "write -P 2 20M 64k",
            "write -P 3 40M 4k",
            "flush",
        ],
    );
    server.kill();
    let (events, _, line) = bitmaps_agree(&member, dir.path());
    assert!(line.starts_with("15 bits (chunks), 3 dirty"), "{line}");
    let sb_events = field(&ok(&["examine", p(&member)]), "Events").expect("events");
    assert_eq!(
        events, sb_events,
        "the bitmap's events follow the superblock's"
    );

    // The restart resyncs the dirty chunks (3 of 15 chunks of 1 MiB: at most 3 MiB
    // of member sectors, 48 of 240 stripes) and a clean stop clears every bit.
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let log = server.wait_for_log(0, &["resync done"]);
    let stopped = server.stop();
    assert!(
        log.contains("only the 3 chunks") || stopped.stderr.contains("only the 3 chunks"),
        "the resync says how much it visits:\n{log}\n{}",
        stopped.stderr
    );
    let (events, cleared, line) = bitmaps_agree(&member, dir.path());
    assert!(line.starts_with("15 bits (chunks), 0 dirty"), "{line}");
    assert_eq!(events, cleared, "a whole array moves events_cleared along");
    let scrub = ok(&["scrub", "check", p(&disks)]);
    assert!(scrub.contains(" 0 of "), "{scrub}");
}

/// A mirror that runs degraded and then loses its server too resyncs the copies it
/// still has at the next start, as md's raid1 and raid10 do: copies a cut-off write
/// left different agree again without waiting for the missing member. (Before, only a
/// whole array resynced, and reads kept to one copy until the member was back.)
#[test]
fn a_degraded_mirror_stopped_uncleanly_resyncs_the_copies_it_has() {
    require_tool!("qemu-io");
    let dir = tempdir();
    let disks = crate::server::create_array(dir.path(), "1", 3, "16M", &["--bitmap-chunk", "1M"]);
    std::fs::remove_file(disks.join("d2")).expect("take a member away");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    qemu_io(&server, &["write -P 7 1M 64k", "flush"]);
    server.kill();

    // Where the write was cut off, the copies disagree: here made so by hand, in the
    // chunk the write dirtied (data starts 2048 sectors into a member).
    let data_offset = 2048 * 512;
    let d1 = disks.join("d1");
    let mut bytes = std::fs::read(&d1).expect("member");
    let at = data_offset + (1 << 20);
    bytes[at..at + 4096].fill(0xee);
    std::fs::write(&d1, &bytes).expect("tear the copy");

    let server = Server::unix(dir.path(), &[p(&disks)]);
    server.wait_for_log(0, &["was not stopped cleanly", "resync running"]);
    let line = server.wait_for_log(0, &["resync done"]);
    assert!(line.contains("(1 mismatched units"), "{line}");
    server.stop();
    let d0 = std::fs::read(disks.join("d0")).expect("member");
    let d1 = std::fs::read(&d1).expect("member");
    assert!(
        d0[data_offset..] == d1[data_offset..],
        "the copies agree after the resync"
    );
    assert_eq!(d0[at], 7, "the copy reads took is kept");
    assert_reads_at(&disks, 1 << 20, &[7u8; 65536]);
}

#[test]
fn a_member_back_after_a_short_absence_catches_up_on_what_changed_only() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = raid5_with_bitmap(dir.path());
    let data = random_bytes(40 << 20, 11);
    let image = dir.path().join("data");
    std::fs::write(&image, &data).expect("data");
    ok(&["write", "-i", p(&image), p(&disks)]);

    // d2 is left out while 64 KiB change in one chunk.
    let away = dir.path().join("away");
    std::fs::create_dir(&away).expect("folder");
    std::fs::rename(disks.join("d2"), away.join("d2")).expect("move d2 out");
    let change = random_bytes(64 << 10, 12);
    let patch = dir.path().join("patch");
    std::fs::write(&patch, &change).expect("patch");
    ok(&["write", "--offset", "30M", "-i", p(&patch), p(&disks)]);
    let (_, _, line) = bitmaps_agree(&disks.join("d0"), dir.path());
    assert!(line.starts_with("15 bits (chunks), 1 dirty"), "{line}");

    std::fs::rename(away.join("d2"), disks.join("d2")).expect("d2 back");
    let added = ok(&["add", p(&disks), p(&disks.join("d2"))]);
    assert!(added.contains("caught up on "), "{added}");
    let visited: u64 = added
        .split("caught up on ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a unit count");
    assert!(
        visited <= 16,
        "one 1 MiB chunk is 16 stripes of 64K: {added}"
    );

    // Without d0 the array reads through the caught-up d2.
    ok(&["fail", p(&disks), p(&disks.join("d0"))]);
    let mut expected = data;
    expected[30 << 20..(30 << 20) + change.len()].copy_from_slice(&change);
    assert_reads(&disks, &expected);
}

/// Offline, as served: with two roles missing, a member back for role 3 takes role 3
/// and catches up there, not the lowest missing role.
#[test]
fn a_member_back_while_two_roles_are_missing_takes_its_own() {
    let dir = tempdir();
    let disks = crate::server::create_array(dir.path(), "6", 5, "8M", &["--bitmap-chunk", "256K"]);
    let data = random_bytes(12 << 20, 13);
    let image = dir.path().join("data");
    std::fs::write(&image, &data).expect("data");
    ok(&["write", "-i", p(&image), p(&disks)]);
    let away = dir.path().join("away");
    std::fs::create_dir(&away).expect("folder");
    for d in ["d1", "d3"] {
        std::fs::rename(disks.join(d), away.join(d)).expect("move out");
    }
    let change = random_bytes(64 << 10, 14);
    let patch = dir.path().join("patch");
    std::fs::write(&patch, &change).expect("patch");
    ok(&["write", "--offset", "5M", "-i", p(&patch), p(&disks)]);
    std::fs::rename(away.join("d3"), disks.join("d3")).expect("d3 back");
    let added = ok(&["add", p(&disks), p(&disks.join("d3"))]);
    assert!(added.contains("added as role 3"), "{added}");
    assert!(added.contains("caught up on "), "{added}");
    let mut expected = data;
    expected[5 << 20..(5 << 20) + change.len()].copy_from_slice(&change);
    assert_reads(&disks, &expected);
}

/// A member back for its role catches up from the bitmap while a hot spare steps into
/// another missing role in the same open: the spare is rebuilt whole. Before
/// 2026-11-25 the spare's superblock was copied from the freshest one — the returning
/// member's, which says "catch up from the bitmap" — and the recover visited only the
/// dirty chunks, leaving the spare's role unwritten (found by an offline churn run).
#[test]
fn a_spare_stepping_in_beside_a_member_catching_up_is_rebuilt_whole() {
    let dir = tempdir();
    let disks = crate::server::create_array(dir.path(), "6", 5, "8M", &["--bitmap-chunk", "256K"]);
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("json");
    let size = status["array_size_bytes"].as_u64().expect("array size");
    let mut data = random_bytes(usize::try_from(size).expect("size"), 15);
    let image = dir.path().join("data");
    std::fs::write(&image, &data).expect("data");
    ok(&["write", "-i", p(&image), p(&disks)]);
    // d4 misses a write; then d0 fails and a spare is added, with nothing opened to
    // write in between.
    let away = dir.path().join("away");
    std::fs::create_dir(&away).expect("folder");
    std::fs::rename(disks.join("d4"), away.join("d4")).expect("move out");
    let change = random_bytes(64 << 10, 16);
    let patch = dir.path().join("patch");
    std::fs::write(&patch, &change).expect("patch");
    ok(&["write", "--offset", "1M", "-i", p(&patch), p(&disks)]);
    data[1 << 20..(1 << 20) + change.len()].copy_from_slice(&change);
    ok(&["fail", p(&disks), p(&disks.join("d0"))]);
    ok(&[
        "add",
        "--spare",
        "--size",
        "8M",
        p(&disks),
        p(&disks.join("s0")),
    ]);
    std::fs::rename(away.join("d4"), disks.join("d4")).expect("d4 back");
    let added = ok(&["add", p(&disks), p(&disks.join("d4"))]);
    assert!(added.contains("added as role 4"), "{added}");
    // Without d4 and d1, the array reads through the spare's role 0: it must be whole.
    std::fs::rename(disks.join("d4"), away.join("d4")).expect("d4 out again");
    std::fs::rename(disks.join("d1"), away.join("d1")).expect("d1 out");
    assert_reads(&disks, &data);
}

#[test]
fn bad_bitmap_requests_are_refused_before_anything_is_written() {
    let dir = tempdir();
    let m = |i: usize| dir.path().join(format!("m{i}"));
    let err = fails(&[
        "create",
        "-l",
        "0",
        "--bitmap",
        "internal",
        "--size",
        "8M",
        p(&m(0)),
        p(&m(1)),
    ]);
    assert!(err.contains("no redundancy"), "{err}");
    let err = fails(&[
        "create",
        "-l",
        "1",
        "--bitmap",
        "sideways",
        "--size",
        "8M",
        p(&m(0)),
        p(&m(1)),
    ]);
    assert!(err.contains("internal or none"), "{err}");
    let err = fails(&[
        "create",
        "-l",
        "1",
        "--bitmap-chunk",
        "3K",
        "--size",
        "8M",
        p(&m(0)),
        p(&m(1)),
    ]);
    assert!(err.contains("chunk"), "{err}");
    assert!(!m(0).exists() && !m(1).exists(), "nothing was made");
    // An array without a bitmap has none to show.
    ok(&[
        "create",
        "-l",
        "1",
        "--bitmap",
        "none",
        "--size",
        "8M",
        p(&m(0)),
        p(&m(1)),
    ]);
    let err = fails(&["examine", "--bitmap", p(&m(0))]);
    assert!(err.contains("no internal bitmap"), "{err}");
}

#[test]
fn a_member_added_back_to_a_running_server_catches_up_from_the_bitmap() {
    require_tool!("qemu-io");
    let dir = tempdir();
    let disks = raid5_with_bitmap(dir.path());
    let data = random_bytes(40 << 20, 13);
    let image = dir.path().join("data");
    std::fs::write(&image, &data).expect("data");
    ok(&["write", "-i", p(&image), p(&disks)]);

    // Served without d2, which is away while 64 KiB change.
    let away = dir.path().join("away");
    std::fs::create_dir(&away).expect("folder");
    std::fs::rename(disks.join("d2"), away.join("d2")).expect("move d2 out");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    qemu_io(&server, &["write -P 7 30M 64k", "flush"]);
    std::fs::rename(away.join("d2"), disks.join("d2")).expect("d2 back");
    let added = ok(&["add", p(&disks), p(&disks.join("d2"))]);
    assert!(added.contains("rebuilt by the server"), "{added}");
    let log = server.wait_for_log(0, &["recover done"]);
    let line = log
        .lines()
        .find(|l| l.contains("recover done"))
        .expect("recover line")
        .to_owned();
    let visited: u64 = line
        .split("visited ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("units visited in: {line}"));
    assert!(
        visited <= 16,
        "one 1 MiB chunk is 16 stripes of 64K: {line}"
    );
    server.stop();

    // d2 holds the change: without d0 the array reads it through d2.
    ok(&["fail", p(&disks), p(&disks.join("d0"))]);
    let mut expected = data;
    expected[30 << 20..(30 << 20) + (64 << 10)].fill(7);
    assert_reads(&disks, &expected);
}

#[test]
fn a_bitmap_claiming_a_huge_size_is_not_read_whole_and_the_array_puts_it_right() {
    let dir = tempdir();
    let disks = raid5_with_bitmap(dir.path());
    // Every member's bitmap claims a sync size of 2^50 sectors: bits far beyond the
    // room before the data.
    set_sync_size(&disks, |_| 1 << 50);
    let err = fails(&["examine", "--bitmap", p(&disks.join("d0"))]);
    assert!(err.contains("bitmap"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Plain examine still shows the superblock, as mdadm does.
    let sb = ok(&["examine", p(&disks.join("d0"))]);
    assert!(sb.contains("Raid Level : raid5"), "{sb}");
    // md takes the sync size from the array: opened to write, the bitmap is whole
    // again (all dirty, then cleared by the clean stop).
    let patch = dir.path().join("patch");
    std::fs::write(&patch, [1u8; 4096]).expect("patch");
    ok(&["write", "-i", p(&patch), p(&disks)]);
    let report = ok(&["examine", "--bitmap", p(&disks.join("d0"))]);
    let line = field(&report, "Bitmap").expect("bitmap line");
    assert!(line.starts_with("15 bits (chunks), 0 dirty"), "{line}");
}

#[test]
fn a_member_that_left_mid_rebuild_is_rebuilt_whole_when_added_back() {
    let dir = tempdir();
    let disks = raid5_with_bitmap(dir.path());
    let data = random_bytes(40 << 20, 14);
    let image = dir.path().join("data");
    std::fs::write(&image, &data).expect("data");
    ok(&["write", "-i", p(&image), p(&disks)]);
    // d1 is replaced by a blank file recorded as being recovered from sector 0, and
    // taken away before any rebuild; the array is written meanwhile.
    std::fs::remove_file(disks.join("d1")).expect("lose d1");
    ok(&[
        "add",
        "--no-rebuild",
        "--size",
        "16M",
        p(&disks),
        p(&disks.join("d1")),
    ]);
    let away = dir.path().join("away");
    std::fs::create_dir(&away).expect("folder");
    std::fs::rename(disks.join("d1"), away.join("d1")).expect("move d1 out");
    let change = dir.path().join("patch");
    std::fs::write(&change, [5u8; 65536]).expect("patch");
    ok(&["write", "--offset", "30M", "-i", p(&change), p(&disks)]);
    std::fs::rename(away.join("d1"), disks.join("d1")).expect("d1 back");
    let added = ok(&["add", p(&disks), p(&disks.join("d1"))]);
    assert!(
        !added.contains("caught up"),
        "it held nothing to catch up from: {added}"
    );
    // Without d0 the array reads right through the rebuilt d1.
    ok(&["fail", p(&disks), p(&disks.join("d0"))]);
    let mut expected = data;
    expected[30 << 20..(30 << 20) + 65536].fill(5);
    assert_reads(&disks, &expected);
}

#[test]
fn a_bitmap_counting_another_sync_size_is_taken_as_all_dirty_and_put_right() {
    let dir = tempdir();
    let disks = raid5_with_bitmap(dir.path());
    let right = field(
        &ok(&["examine", "--bitmap", p(&disks.join("d0"))]),
        "Sync Size",
    )
    .expect("sync size");
    // Every member's bitmap claims half the sync range: its bits mean other chunks.
    set_sync_size(&disks, |size| size / 2);
    let patch = dir.path().join("patch");
    std::fs::write(&patch, [3u8; 4096]).expect("patch");
    ok(&["write", "-i", p(&patch), p(&disks)]);
    for i in 0..4 {
        let report = ok(&["examine", "--bitmap", p(&disks.join(format!("d{i}")))]);
        assert_eq!(
            field(&report, "Sync Size").as_deref(),
            Some(right.as_str()),
            "{report}"
        );
        let bitmap = field(&report, "Bitmap").expect("bitmap line");
        assert!(
            bitmap.contains(" 0 dirty"),
            "a clean stop clears them: {bitmap}"
        );
    }
}

/// `create --bitmap-delay` sets md's daemon_sleep (mdadm's `--delay`): md and xraid
/// read the same flush period, and the served array clears a quiet chunk's bit after
/// it, not after the default 5 s.
#[test]
fn bitmap_delay_sets_md_flush_period_and_the_served_quiet_time() {
    let dir = tempdir();
    let disks = crate::server::create_array(
        dir.path(),
        "5",
        4,
        "16M",
        &["--bitmap-chunk", "1M", "--bitmap-delay", "1"],
    );
    let member = disks.join("d0");
    let said = ok(&["examine", "--bitmap", p(&member)]);
    assert!(said.contains("Daemon : 1s flush period"), "{said}");
    if crate::util::has_tool("mdadm") {
        crate::bitmap::bitmaps_agree(&member, dir.path());
    }
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let mut client = crate::nbd_raw::Client::open(server.tcp_addr(), "xraid", false);
    assert_eq!(client.write(0, &random_bytes(64 * 1024, 9)), 0);
    assert_eq!(client.flush(), 0);
    client.disconnect();
    let dirty = || ok(&["examine", "--bitmap", p(&member)]);
    assert!(dirty().contains(", 1 dirty"), "{}", dirty());
    // Cleared within a few quiet times of 1 s (5 s each by default).
    let start = std::time::Instant::now();
    while !dirty().contains(", 0 dirty") {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(4),
            "the bit is still set after 4 s: {}",
            dirty()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    server.stop();
}

/// `--bitmap-delay` out of range, or without a bitmap, is refused before any member
/// is touched.
#[test]
fn bitmap_delay_out_of_range_or_without_a_bitmap_is_refused() {
    for (args, says) in [
        (
            &["--bitmap-delay", "0"][..],
            "--bitmap-delay 0: say 1 to 3600 seconds",
        ),
        (&["--bitmap-delay", "3601"][..], "say 1 to 3600 seconds"),
        (
            &["--bitmap", "none", "--bitmap-delay", "5"][..],
            "--bitmap-delay needs a bitmap",
        ),
    ] {
        let dir = tempdir();
        let members: Vec<String> = (0..4)
            .map(|i| dir.path().join(format!("d{i}")).display().to_string())
            .collect();
        let mut all = vec!["create", "-l", "5", "--size", "16M"];
        all.extend_from_slice(args);
        all.extend(members.iter().map(String::as_str));
        let error = fails(&all);
        assert!(error.contains(says), "{args:?}: {error}");
        for m in &members {
            assert!(!Path::new(m).exists(), "{args:?} made {m}");
        }
    }
}
