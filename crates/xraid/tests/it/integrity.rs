//! Integrity mode (`xraid create --integrity`): silent corruption — bits flipped on a
//! member behind xraid's back, or by a member that corrupts what it writes — is
//! caught on read, repaired from redundancy, counted, and reported; scrubs know which
//! copy is bad; crashes raise no false alarms; md's tools still read the members.

use std::path::{Path, PathBuf};

use crate::nbd_clients::run;
use crate::require_tool;
use crate::server::Server;
use crate::util::{fails, ok, p, random_bytes, scrub, sha256_file, sha256_of_read, tempdir};

/// md's data offset of an array xraid made with 64K chunks (1 MiB).
const DATA_OFFSET: u64 = 1 << 20;

/// An array of `level` on four members of `size` with integrity mode (chunk 64K).
fn integrity_array(dir: &Path, level: &str, size: &str, integrity: bool) -> PathBuf {
    integrity_array_with(dir, level, size, integrity, &[])
}

/// [`integrity_array`] with more flags for `xraid create`.
fn integrity_array_with(
    dir: &Path,
    level: &str,
    size: &str,
    integrity: bool,
    more: &[&str],
) -> PathBuf {
    let mut extra = Vec::new();
    if integrity {
        extra.push("--integrity");
    }
    extra.extend_from_slice(more);
    crate::server::create_array(dir, level, 4, size, &extra)
}

/// Flips bit `bit` of the byte at `offset` of `member`'s data area, behind xraid's back.
fn flip(member: &Path, offset: u64, bit: u8) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(member)
        .expect("member");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, DATA_OFFSET + offset).expect("read");
    b[0] ^= 1 << bit;
    f.write_all_at(&b, DATA_OFFSET + offset).expect("write");
    f.sync_all().expect("sync");
}

/// Writes `image` into the array through `xraid write`.
fn fill(disks: &Path, image: &Path) {
    ok(&["write", p(disks), "-i", p(image)]);
}

#[test]
fn flipped_bits_are_caught_repaired_and_counted_through_nbd() {
    require_tool!("nbdcopy");
    let dir = tempdir();
    let disks = integrity_array(dir.path(), "5", "16M", true);
    let status = ok(&["status", p(&disks)]);
    assert!(status.contains("Integrity : on"), "{status}");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(40 << 20, 51)).expect("image");
    fill(&disks, &image);
    // Three members, three stripes: within RAID-5's redundancy everywhere.
    flip(&disks.join("d0"), 5 * 65536 + 100, 3);
    flip(&disks.join("d1"), 17 * 65536 + 4000, 0);
    flip(&disks.join("d3"), 40 * 65536 + 9, 7);
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let copy = dir.path().join("copy.raw");
    run("nbdcopy", &[&server.uri("xraid"), p(&copy)]);
    let copied = std::fs::read(&copy).expect("copy");
    let want = std::fs::read(&image).expect("image");
    assert!(
        copied[..want.len()] == want[..],
        "every byte read back right"
    );
    let log = server.wait_for_log(0, &["disagrees with its checksums"]);
    assert!(log.contains("repaired from redundancy"), "{log}");
    let live = ok(&["status", "--json", p(&disks)]);
    let json: serde_json::Value = serde_json::from_str(&live).expect("status json");
    assert_eq!(json["integrity"], true, "{live}");
    let bad: u64 = (0..4)
        .map(|m| {
            json["members"][m]["checksum_mismatches"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    // Parity blocks are not read by a healthy read: the flips that hit data are.
    assert!((1..=3).contains(&bad), "{live}");
    server.stop();
    // What the reads did not touch (parity), a check finds; then all is clean.
    let first = scrub("check", &disks);
    assert_eq!(first["mismatched_units"], 0, "{first}");
    assert_eq!(
        first["checksum_mismatches"].as_u64().unwrap_or(0) + bad,
        3,
        "every flip found once: {first}"
    );
    let second = scrub("check", &disks);
    assert_eq!(second["checksum_mismatches"], 0, "{second}");
    assert_eq!(second["read_errors_corrected"], 0, "{second}");
    assert_eq!(
        sha256_of_read(&[p(&disks), "--length", "40M"]),
        sha256_file(&image)
    );
}

#[test]
fn a_repair_scrub_restores_flipped_data_only_in_integrity_mode() {
    // md's repair trusts the data and rewrites parity: a flipped data bit becomes
    // permanent. With checksums the bad block is known, rebuilt and rewritten.
    for integrity in [false, true] {
        let dir = tempdir();
        let disks = integrity_array(dir.path(), "5", "8M", integrity);
        let image = dir.path().join("image.raw");
        std::fs::write(&image, random_bytes(20 << 20, 52)).expect("image");
        fill(&disks, &image);
        // Stripe 3's data chunk on member 0 (left-symmetric: parity on member 0 in
        // stripe 3, so member 1 holds data there).
        flip(&disks.join("d1"), 3 * 65536 + 777, 2);
        let report = scrub("repair", &disks);
        let read = sha256_of_read(&[p(&disks), "--length", "20M"]);
        if integrity {
            assert_eq!(report["mismatched_units"], 0, "{report}");
            assert_eq!(report["checksum_mismatches"], 1, "{report}");
            assert_eq!(read, sha256_file(&image), "the flipped block is rebuilt");
        } else {
            assert_eq!(report["mismatched_units"], 1, "{report}");
            assert_ne!(read, sha256_file(&image), "md's repair keeps the bad data");
        }
        let again = scrub("check", &disks);
        assert_eq!(again["mismatched_units"], 0, "{again}");
    }
}

#[test]
fn raid1_reads_the_copy_that_is_right() {
    let dir = tempdir();
    let disks = integrity_array(dir.path(), "1", "8M", true);
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(6 << 20, 53)).expect("image");
    fill(&disks, &image);
    // The same block flipped on two of four copies; reads go to the first copy.
    flip(&disks.join("d0"), 1 << 20, 1);
    flip(&disks.join("d1"), 1 << 20, 1);
    assert_eq!(
        sha256_of_read(&[p(&disks), "--length", "6M"]),
        sha256_file(&image)
    );
    let report = scrub("check", &disks);
    assert_eq!(report["checksum_mismatches"], 2, "{report}");
    assert_eq!(report["mismatched_units"], 0, "{report}");
}

#[test]
fn raid0_reports_a_flipped_block_as_unreadable_instead_of_returning_it() {
    let dir = tempdir();
    let disks = integrity_array(dir.path(), "0", "8M", true);
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(8 << 20, 54)).expect("image");
    fill(&disks, &image);
    flip(&disks.join("d2"), 4096 + 10, 0);
    let err = fails(&["read", p(&disks), "--length", "8M"]);
    assert!(err.contains("cannot be read"), "{err}");
    // The member and the block are named, not just the request's range.
    assert!(
        err.contains("d2: 1 block fails its checksum (member data bytes 4096..8192)")
            && err.contains("no redundancy to rebuild from"),
        "{err}"
    );
    // A failed `read -o` leaves no half-written file: a file that was there keeps its
    // bytes, and a new one is not made.
    let kept = dir.path().join("kept.raw");
    std::fs::write(&kept, b"what was here before").expect("kept");
    let err = fails(&["read", p(&disks), "-o", p(&kept)]);
    assert!(err.contains("is left as it was"), "{err}");
    assert_eq!(std::fs::read(&kept).expect("kept"), b"what was here before");
    let new = dir.path().join("new.raw");
    let err = fails(&["read", p(&disks), "-o", p(&new)]);
    assert!(err.contains("was not made"), "{err}");
    assert!(!new.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("xraid-read"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    // The rest of the array still reads, into a file too.
    ok(&[
        "read",
        p(&disks),
        "--offset",
        "4M",
        "--length",
        "4M",
        "-o",
        p(&new),
    ]);
    assert_eq!(
        std::fs::read(&new).expect("new")[..],
        std::fs::read(&image).expect("image")[4 << 20..]
    );
}

#[test]
fn a_read_that_keeps_going_gets_all_but_the_bad_blocks_and_names_them() {
    let dir = tempdir();
    let disks = integrity_array(dir.path(), "0", "8M", true);
    let image = dir.path().join("image.raw");
    let mut expected = random_bytes(8 << 20, 58);
    std::fs::write(&image, &expected).expect("image");
    fill(&disks, &image);
    // RAID-0 of four, 64K chunks: d2's first chunk is array chunk 2, d0's second one
    // array chunk 4. One block in each goes bad.
    flip(&disks.join("d2"), 4096 + 10, 0);
    flip(&disks.join("d0"), 65536 + 100, 6);
    let out = dir.path().join("out.raw");
    let err = fails(&[
        "read",
        "--keep-going",
        "--length",
        "8M",
        "-o",
        p(&out),
        p(&disks),
    ]);
    assert!(
        err.contains("8192 bytes in 2 ranges of the array could not be read and are zeros in")
            && err.contains("array bytes 135168..139264, 262144..266240"),
        "{err}"
    );
    assert!(err.contains("d0: 1 block fails its checksum"), "{err}");
    assert!(err.contains("d2: 1 block fails its checksum"), "{err}");
    expected[135168..139264].fill(0);
    expected[262144..266240].fill(0);
    assert!(
        std::fs::read(&out).expect("the output is kept") == expected[..8 << 20],
        "everything else is read"
    );
    // Nothing was failed along the way: a plain read still stops at the first bad block
    // (not at a failed member), and the good ranges read as before.
    let err = fails(&["read", p(&disks), "--length", "8M"]);
    // Which of the two chunks with a bad block is named depends on which answers first.
    assert!(
        err.contains("array bytes 131072..196608 cannot be read")
            || err.contains("array bytes 262144..327680 cannot be read"),
        "{err}"
    );
    ok(&["read", p(&disks), "--offset", "1M", "--length", "7M"]);
}

#[test]
fn a_read_that_keeps_going_fails_no_copy_it_still_needs() {
    // A two-way mirror: blocks bad on both copies are lost; a block bad on one copy is
    // read from the other. Rereading the lost ones (ten errors a block on each copy)
    // must not fail a copy: the other copy's own bad block would be lost with it.
    let dir = tempdir();
    let disks = crate::server::create_array(dir.path(), "1", 2, "8M", &["--integrity"]);
    let image = dir.path().join("image.raw");
    let mut expected = random_bytes(6 << 20, 59);
    std::fs::write(&image, &expected).expect("image");
    fill(&disks, &image);
    let lost = [1u64 << 20, 2 << 20, 3 << 20];
    for at in lost {
        flip(&disks.join("d0"), at + 17, 1);
        flip(&disks.join("d1"), at + 33, 2);
    }
    flip(&disks.join("d0"), (4 << 20) + 5, 3);
    flip(&disks.join("d1"), (5 << 20) + 9, 4);
    let out = dir.path().join("out.raw");
    let err = fails(&[
        "read",
        "--keep-going",
        "--length",
        "6M",
        "-o",
        p(&out),
        p(&disks),
    ]);
    assert!(
        err.contains("12288 bytes in 3 ranges of the array could not be read"),
        "only the blocks bad on both copies are lost: {err}"
    );
    assert!(!err.contains("failed ("), "no copy is failed: {err}");
    for at in lost {
        expected[at as usize..at as usize + 4096].fill(0);
    }
    assert!(
        std::fs::read(&out).expect("the output") == expected[..6 << 20],
        "every block with a good copy is read"
    );
}

#[test]
fn an_offline_read_says_what_it_rebuilt_and_that_the_member_still_holds_it() {
    let dir = tempdir();
    let disks = integrity_array(dir.path(), "5", "8M", true);
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(12 << 20, 57)).expect("image");
    fill(&disks, &image);
    // Chunk 1 of d1 holds data (left-symmetric, 4 members: d1 holds P of stripe 2 only).
    flip(&disks.join("d1"), 65536 + 8192 + 3, 4);
    let out = crate::util::xraid()
        .args(["read", p(&disks), "--length", "12M"])
        .output()
        .expect("read");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        out.stdout == std::fs::read(&image).expect("image"),
        "the flipped block is rebuilt for the read"
    );
    assert!(
        err.contains(
            "d1: 1 block fails its checksum (member data bytes 73728..77824): silent corruption"
        ) && err.contains("opened to read only")
            && err.contains("xraid scrub repair"),
        "{err}"
    );
    // Read-only means read-only: the bad block is still there, and found again.
    let again = crate::util::xraid()
        .args(["read", p(&disks), "--length", "12M"])
        .output()
        .expect("read");
    assert!(String::from_utf8_lossy(&again.stderr).contains("fails its checksum"));
    let report = scrub("repair", &disks);
    assert_eq!(report["checksum_mismatches"], 1, "{report}");
    let clean = crate::util::xraid()
        .args(["read", p(&disks), "--length", "12M"])
        .output()
        .expect("read");
    assert!(clean.status.success());
    assert!(
        clean.stderr.is_empty(),
        "nothing to say after the repair: {}",
        String::from_utf8_lossy(&clean.stderr)
    );
}

#[test]
fn a_member_that_corrupts_its_writes_is_caught_under_fio() {
    require_tool!("fio");
    let dir = tempdir();
    let disks = integrity_array(dir.path(), "6", "16M", true);
    // Every write member 1 takes in the first 256 KiB of its data lands with a bit
    // flipped (few enough blocks that it is not failed for too many read errors).
    let server = Server::unix(
        dir.path(),
        &["--fault", "role=1,flips=1M..1280K", p(&disks)],
    );
    let uri = server.uri("xraid");
    let out = run(
        "fio",
        &[
            "--name=verify",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=64k",
            "--size=12M",
            "--iodepth=8",
            "--numjobs=2",
            "--offset_increment=12M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            // No verify state files left in the working directory.
            "--verify_state_save=0",
        ],
    );
    assert!(!out.contains("verify: bad"), "{out}");
    let log = server.wait_for_log(0, &["disagrees with its checksums"]);
    assert!(log.contains("member 1"), "{log}");
    server.stop();
    // The repairs' rewrites went through the faulty member too: a check offline
    // finds those blocks once more and rewrites them right.
    let report = scrub("check", &disks);
    assert_eq!(report["mismatched_units"], 0, "{report}");
    assert!(report["checksum_mismatches"].as_u64() > Some(0), "{report}");
    assert_eq!(scrub("check", &disks)["checksum_mismatches"], 0);
}

#[test]
fn a_crash_raises_no_false_alarm_and_md_still_reads_the_members() {
    require_tool!("fio");
    require_tool!("nbdcopy");
    let dir = tempdir();
    let disks = integrity_array(dir.path(), "5", "16M", true);
    for round in 0..3 {
        let server = Server::unix(dir.path(), &[p(&disks)]);
        let uri = server.uri("xraid");
        let mut fio = std::process::Command::new("fio")
            .args([
                "--name=storm",
                "--ioengine=nbd",
                &format!("--uri={uri}"),
                "--rw=randwrite",
                "--bs=4k",
                "--size=40M",
                "--iodepth=16",
                "--time_based",
                "--runtime=30",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("fio");
        std::thread::sleep(std::time::Duration::from_millis(700 + 300 * round));
        server.kill();
        let _ = fio.kill();
        let _ = fio.wait();
        let again = Server::unix(dir.path(), &[p(&disks)]);
        let copy = dir.path().join("copy.raw");
        run("nbdcopy", &[&again.uri("xraid"), p(&copy)]);
        let stopped = again.stop();
        assert!(
            !stopped.stderr.contains("disagrees with its checksums"),
            "round {round}: {}",
            stopped.stderr
        );
        let report = scrub("check", &disks);
        assert_eq!(report["mismatched_units"], 0, "round {round}: {report}");
        assert_eq!(report["checksum_mismatches"], 0, "round {round}: {report}");
    }
    if crate::util::has_tool("mdadm") {
        let out = run("mdadm", &["--examine", p(&disks.join("d0"))]);
        assert!(out.contains("State : clean"), "{out}");
        assert!(
            !out.contains("after=0 sectors"),
            "room for checksums: {out}"
        );
    }
}

#[test]
fn integrity_exports_take_4k_requests_at_least_and_bad_creates_change_nothing() {
    require_tool!("nbdinfo");
    let dir = tempdir();
    let disks = integrity_array(dir.path(), "5", "8M", true);
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let info = run("nbdinfo", &[&server.uri("xraid")]);
    assert!(info.contains("block_size_minimum: 4096"), "{info}");
    server.stop();
    // Members with room for one chunk of data but not for its checksums too (1088K
    // would do without --integrity): refused, nothing made.
    let small = dir.path().join("small");
    std::fs::create_dir(&small).expect("folder");
    let members: Vec<PathBuf> = (0..3).map(|i| small.join(format!("m{i}"))).collect();
    let mut args = vec![
        "create",
        "-l",
        "5",
        "-c",
        "64K",
        "--size",
        "1095K",
        "--integrity",
    ];
    args.extend(members.iter().map(|m| p(m)));
    let err = fails(&args);
    assert!(err.contains("a member needs at least"), "{err}");
    assert!(members.iter().all(|m| !m.exists()), "nothing was made");
}

/// A RAID-5 with integrity mode on four 8M members, bitmap chunks of 256K (so that a
/// catch-up skips most of a member), filled with random data: its folder and data.
fn small_bitmap_array(dir: &Path) -> (PathBuf, Vec<u8>) {
    let disks = integrity_array_with(dir, "5", "8M", true, &["--bitmap-chunk", "256K"]);
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status json");
    let size = status["array_size_bytes"].as_u64().expect("array size");
    let data = random_bytes(usize::try_from(size).expect("size"), 73);
    let image = dir.join("image.raw");
    std::fs::write(&image, &data).expect("image");
    fill(&disks, &image);
    (disks, data)
}

/// Once member 1 of `disks` (served by `server`) has caught up: flips a bit where it
/// holds data written before it left (stripe 80: parity on d3, data chunk 1 on d1,
/// far from the chunks written while it was out), and finds the flip caught on read,
/// repaired and counted, and every byte right; then stops the server and finds the
/// array scrubbing clean.
fn a_flip_on_member_1_is_caught(server: Server, disks: &Path, expected: &[u8]) {
    use crate::nbd_raw::Client;
    let d1 = disks.join("d1");
    let chunk = 64usize << 10;
    let at = (80 * 3 + 1) * chunk;
    let member_offset = 80 * chunk as u64 + 100;
    let mut b = [0u8; 1];
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&d1).expect("d1");
        f.read_exact_at(&mut b, DATA_OFFSET + member_offset)
            .expect("read d1");
    }
    assert_eq!(b[0], expected[at + 100], "the layout this test assumes");
    flip(&d1, member_offset, 5);
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    let got = client
        .read(at as u64, u32::try_from(chunk).expect("chunk"))
        .expect("read");
    assert!(
        got == expected[at..at + chunk],
        "the flipped block is repaired"
    );
    for piece in (0..expected.len()).step_by(1 << 20) {
        let len = (1usize << 20).min(expected.len() - piece);
        let got = client
            .read(piece as u64, u32::try_from(len).expect("len"))
            .expect("read");
        assert!(got == expected[piece..piece + len], "wrong data at {piece}");
    }
    client.disconnect();
    let live: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(disks)])).expect("status json");
    assert_eq!(live["members"][1]["checksum_mismatches"], 1, "{live}");
    server.stop();
    let check = scrub("check", disks);
    assert_eq!(check["mismatched_units"], 0, "{check}");
    assert_eq!(check["checksum_mismatches"], 0, "{check}");
}

/// A member that failed while served and comes back (`xraid add` of the same disk)
/// catches up on the bitmap's dirty chunks only, and keeps the checksums its own area
/// held for the rest: a bit flipped there afterwards is caught, where a table starting
/// unknown would learn the flipped block and return it.
#[test]
fn a_member_back_after_an_absence_keeps_its_checksums() {
    let dir = tempdir();
    let (disks, mut expected) = small_bitmap_array(dir.path());
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    crate::control::write_while_d1_is_out_then_add_it_back(&server, &disks, &mut expected, 74);
    let log = server.wait_for_log(0, &["recover done"]);
    assert!(
        log.contains("skipped"),
        "caught up from the bitmap only: {log}"
    );
    a_flip_on_member_1_is_caught(server, &disks, &expected);
}

/// The same with the array not served: `xraid fail`, a write, and `xraid add` of the
/// same disk, which catches it up from the bitmap there and then (md's re-add: it keeps
/// its identity, and its checksums are trusted outside the dirty chunks).
#[test]
fn a_member_re_added_while_not_served_keeps_its_checksums() {
    let dir = tempdir();
    let (disks, mut expected) = small_bitmap_array(dir.path());
    let d1 = disks.join("d1");
    ok(&["fail", p(&disks), p(&d1)]);
    let fresh = random_bytes(1 << 20, 75);
    let input = dir.path().join("fresh.raw");
    std::fs::write(&input, &fresh).expect("fresh");
    ok(&["write", "--offset", "2M", "-i", p(&input), p(&disks)]);
    expected[2 << 20..3 << 20].copy_from_slice(&fresh);
    let out = ok(&["add", p(&disks), p(&d1)]);
    assert!(out.contains("caught up on"), "from the bitmap only: {out}");
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    a_flip_on_member_1_is_caught(server, &disks, &expected);
}
