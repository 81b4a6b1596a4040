//! md's bad block log on real md-made arrays: sectors a member's log lists are never
//! returned, whatever the member holds there; a repair scrub rebuilds and rewrites
//! them and empties the log, as `mdadm --examine-badblocks` then shows; with no
//! redundancy to rebuild from, the read fails and names the bytes.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use xraid_format::{
    bad_block_log_sectors, BadBlocks, Superblock, MD_FEATURE_BAD_BLOCKS, SUPERBLOCK_BYTES,
    SUPERBLOCK_OFFSET_BYTES,
};

use crate::require_tool;
use crate::util::{fails, fixtures_dir, manifest, ok, p, sha256_of_read, tempdir, unpack_fixture};

const SECTOR: u64 = 512;

/// Records member sectors `range` (counted from its data area) as bad in `member`'s
/// log, as md does when it cannot rewrite them, and fills them with garbage.
fn mark_bad(member: &Path, range: std::ops::Range<u64>) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(member)
        .expect("open member");
    let mut bytes = vec![0u8; SUPERBLOCK_BYTES];
    file.read_exact_at(&mut bytes, SUPERBLOCK_OFFSET_BYTES)
        .expect("read superblock");
    let mut sb = Superblock::parse(&bytes).expect("md superblock");
    let log = bad_block_log_sectors(&sb).expect("mdadm makes a bad block log");
    let mut bad = BadBlocks::new();
    bad.add(sb.data_offset + range.start..sb.data_offset + range.end);
    let image = bad
        .encode(sb.bblog_shift, usize::from(sb.bblog_size) * SECTOR as usize)
        .expect("fits");
    file.write_all_at(&image, log.start * SECTOR)
        .expect("write log");
    sb.feature_map |= MD_FEATURE_BAD_BLOCKS;
    sb.sb_csum = sb.compute_checksum();
    file.write_all_at(&sb.to_bytes(), SUPERBLOCK_OFFSET_BYTES)
        .expect("write superblock");
    let garbage = vec![0xa5u8; ((range.end - range.start) * SECTOR) as usize];
    file.write_all_at(&garbage, (sb.data_offset + range.start) * SECTOR)
        .expect("scribble");
}

/// Writes 1 MiB of seeded bytes through `xraid write --fault FAULT`, which must
/// succeed (redundancy takes what the member refuses) and leave member 1 active.
/// Returns the bytes and the status that followed.
fn write_refused(dir: &Path, disks: &Path, fault: &str, seed: u64) -> (Vec<u8>, serde_json::Value) {
    let image = dir.join("image.raw");
    let bytes = crate::util::random_bytes(1 << 20, seed);
    std::fs::write(&image, &bytes).expect("image");
    let out = crate::util::xraid()
        .args(["write", "--fault", fault, "-i", p(&image), p(disks)])
        .output()
        .expect("xraid runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "redundancy takes it: {err}");
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(disks)])).expect("status json");
    assert_eq!(status["members"][1]["state"], "active", "{status}");
    (bytes, status)
}

/// What `mdadm --examine-badblocks` says of `member`.
pub(crate) fn mdadm_badblocks(member: &Path) -> String {
    let out = Command::new("mdadm")
        .arg("--examine-badblocks")
        .arg(member)
        .output()
        .expect("mdadm runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn listed_bad_sectors_are_rebuilt_never_returned_and_a_repair_makes_them_good() {
    require_tool!("xz");
    require_tool!("mdadm");
    if !fixtures_dir().is_dir() {
        eprintln!("skipped: fixtures not found");
        return;
    }
    let name = "raid5-ls-4d-64k";
    let dir = tempdir();
    let members = unpack_fixture(name, dir.path());
    let want = manifest(name)["sha256"].as_str().expect("sha").to_owned();
    // Member 1's second chunk (64 KiB = 128 sectors): data of stripe 1.
    mark_bad(&members[1], 130..138);
    let listed = mdadm_badblocks(&members[1]);
    assert!(listed.contains("2178 for 8 sectors"), "{listed}");
    let examine = ok(&["examine", p(&members[1])]);
    assert!(examine.contains("- bad blocks present."), "{examine}");
    let dir_arg = p(dir.path());
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", dir_arg])).expect("json");
    assert_eq!(status["members"][1]["bad_block_sectors"], 8, "{status}");
    assert!(ok(&["status", dir_arg]).contains("active (8 bad sectors listed)"));

    assert_eq!(
        sha256_of_read(&[dir_arg]),
        want,
        "what the log lists is rebuilt from parity, not read"
    );
    let report = ok(&["scrub", "repair", "--json", dir_arg]);
    let report: serde_json::Value = serde_json::from_str(&report).expect("json");
    assert_eq!(report["completed"], true, "{report}");
    assert_eq!(report["listed_sectors_rewritten"], 8, "{report}");
    assert_eq!(report["listed_sectors_left"], 0, "{report}");
    let listed = mdadm_badblocks(&members[1]);
    assert!(
        listed.contains("Bad-blocks list is empty"),
        "the repair rewrote the range and emptied the log: {listed}"
    );
    let examine = ok(&["examine", p(&members[1])]);
    assert!(!examine.contains("bad blocks present"), "{examine}");
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", dir_arg])).expect("json");
    assert_eq!(status["members"][1]["bad_block_sectors"], 0, "{status}");
    let md = Command::new("mdadm")
        .arg("--examine")
        .arg(&members[1])
        .output()
        .expect("mdadm runs");
    let md = String::from_utf8_lossy(&md.stdout);
    assert!(md.contains(" - correct"), "md takes the superblock: {md}");
    assert!(!md.contains("bad blocks present"), "{md}");
    assert_eq!(sha256_of_read(&[dir_arg]), want);
    let check = ok(&["scrub", "check", "--json", dir_arg]);
    let check: serde_json::Value = serde_json::from_str(&check).expect("json");
    assert_eq!(check["mismatched_units"], 0, "{check}");
}

#[test]
fn a_raid0_members_listed_bad_sectors_fail_the_read_and_are_named() {
    require_tool!("xz");
    if !fixtures_dir().is_dir() {
        eprintln!("skipped: fixtures not found");
        return;
    }
    let name = "raid0-3d-32k";
    let dir = tempdir();
    let members = unpack_fixture(name, dir.path());
    // Member 0's first 8 sectors are the array's first 4 KiB.
    mark_bad(&members[0], 0..8);
    let err = fails(&["read", "-o", "/dev/null", p(dir.path())]);
    assert!(err.contains("cannot be read"), "{err}");
    assert!(err.contains("bad block log"), "{err}");
    // Reread sector by sector, exactly the listed bytes are lost.
    let out = dir.path().join("out");
    let err = fails(&["read", "--keep-going", "-o", p(&out), p(dir.path())]);
    assert!(err.contains("0..4096"), "names the bytes: {err}");
    let read = std::fs::read(&out).expect("the rest was read");
    let size = manifest(name)["array_size_bytes"].as_u64().expect("size");
    assert_eq!(read.len() as u64, size);
    assert!(
        read[..4096].iter().all(|&b| b == 0),
        "lost bytes read as zeros, not garbage"
    );
}

/// A mirror copy that refuses a write (`--fault write-errors=`) keeps its place: the
/// write stands on the other copy, the range goes into the copy's bad block log (as
/// md's own `--examine-badblocks` shows), reads never take that copy's old contents,
/// and a repair scrub rewrites the range and empties the log.
#[test]
fn a_mirror_copy_that_refuses_a_write_records_it_in_its_log_and_serves_on() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = crate::server::create_array(dir.path(), "1", 2, "16M", &[]);
    let member1 = disks.join("d1");
    // md's data offset is 1 MiB: member 1 refuses its data's bytes 64K..68K.
    let (bytes, _) = write_refused(dir.path(), &disks, "role=1,write-errors=1088K..1092K", 41);
    let listed = mdadm_badblocks(&member1);
    let sectors: Vec<(u64, u64)> = listed
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let first = words.next()?.parse().ok()?;
            let count = words.nth(1)?.parse().ok()?;
            Some((first, count))
        })
        .collect();
    // Member sectors 2048 + 128.. hold the refused 4 KiB (the whole member write
    // that carried them is recorded).
    assert!(
        sectors
            .iter()
            .any(|&(first, count)| first <= 2176 && 2184 <= first + count),
        "{listed}"
    );
    let read = crate::util::ok_bytes(&["read", "--length", "1M", p(&disks)]);
    assert!(
        read == bytes,
        "the refused range reads from the copy that took it"
    );
    let report = ok(&["scrub", "repair", p(&disks)]);
    assert!(
        report.contains("sectors the bad block logs listed rebuilt and rewritten"),
        "{report}"
    );
    let listed = mdadm_badblocks(&member1);
    assert!(listed.contains("Bad-blocks list is empty"), "{listed}");
    let read = crate::util::ok_bytes(&["read", "--length", "1M", p(&disks)]);
    assert!(read == bytes);
}

/// `xraid examine --badblocks` says what `mdadm --examine-badblocks` says, word for
/// word, with and without entries.
#[test]
fn examine_badblocks_agrees_with_mdadm() {
    require_tool!("xz");
    require_tool!("mdadm");
    if !fixtures_dir().is_dir() {
        eprintln!("skipped: fixtures not found");
        return;
    }
    let dir = tempdir();
    let members = unpack_fixture("raid5-ls-4d-64k", dir.path());
    mark_bad(&members[2], 700..1900);
    for member in &members[1..3] {
        let ours = ok(&["examine", "--badblocks", p(member)]);
        assert_eq!(ours, mdadm_badblocks(member));
    }
    assert!(ok(&["examine", "--badblocks", p(&members[2])]).contains("2748 for 512 sectors"));
}

/// A log md could not have written (an entry of no sectors) is refused at open, in
/// one line naming the member, and nothing is written to any member.
#[test]
fn a_damaged_bad_block_log_is_refused_and_nothing_is_written() {
    require_tool!("xz");
    if !fixtures_dir().is_dir() {
        eprintln!("skipped: fixtures not found");
        return;
    }
    let dir = tempdir();
    let members = unpack_fixture("raid5-ls-4d-64k", dir.path());
    mark_bad(&members[1], 8..16);
    // Entry 0 becomes "sector 2056 for 0 sectors".
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&members[1])
        .expect("open");
    let mut bytes = vec![0u8; SUPERBLOCK_BYTES];
    std::fs::File::open(&members[1])
        .expect("open")
        .read_exact_at(&mut bytes, SUPERBLOCK_OFFSET_BYTES)
        .expect("read");
    let sb = Superblock::parse(&bytes).expect("sb");
    let log = bad_block_log_sectors(&sb).expect("log");
    file.write_all_at(&((2056u64) << 10).to_le_bytes(), log.start * SECTOR)
        .expect("damage");
    drop(file);
    let before = crate::util::hashes(&members);
    for args in [vec!["read", "-o", "/dev/null"], vec!["scrub", "repair"]] {
        let mut args = args.clone();
        args.push(p(dir.path()));
        let err = fails(&args);
        assert!(
            err.contains("d1") || err.contains("member1"),
            "names the member: {err}"
        );
        assert!(err.contains("bad block log entry 0"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    assert_eq!(crate::util::hashes(&members), before, "nothing written");
    // Status still shows the array, and says what is wrong.
    let out = crate::util::xraid()
        .args(["status", p(dir.path())])
        .output()
        .expect("xraid runs");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad block log entry 0"));
}

/// A RAID-5 member that refuses a write (`--fault write-errors=`) keeps its place: the
/// rows go into its bad block log, as md's `--examine-badblocks` shows, and the
/// written data reads back, rebuilt from parity; a repair scrub rewrites them.
#[test]
fn a_raid5_member_that_refuses_a_write_records_it_in_its_log_and_serves_on() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = crate::server::raid5(dir.path(), "16M");
    let member1 = disks.join("d1");
    // md's data offset is 1 MiB: member 1's first 4 KiB of data.
    let (bytes, status) = write_refused(dir.path(), &disks, "role=1,write-errors=1M..1028K", 43);
    assert!(
        status["members"][1]["bad_block_sectors"]
            .as_u64()
            .unwrap_or(0)
            >= 8
    );
    let listed = mdadm_badblocks(&member1);
    assert!(
        listed.lines().skip(1).any(|l| l.contains(" for ")),
        "{listed}"
    );
    let read = crate::util::ok_bytes(&["read", "--length", "1M", p(&disks)]);
    assert!(read == bytes, "rebuilt from parity");
    ok(&["scrub", "repair", p(&disks)]);
    assert!(mdadm_badblocks(&member1).contains("Bad-blocks list is empty"));
    let read = crate::util::ok_bytes(&["read", "--length", "1M", p(&disks)]);
    assert!(read == bytes);
}

/// A RAID-5 whose members are all on one power rail takes a client's 4 KiB write at
/// array byte 0 and loses power before any flush. Returns the temp dir, the disks,
/// and the bytes there before and after the write; the stripe log has the write's
/// entry to replay at the next open. Stripe 0's parity is on member 3
/// (left-symmetric); data starts 1 MiB into each member.
fn raid5_cut_after_a_write() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>, Vec<u8>) {
    raid5_cut_after_a_write_with(|_| {}, &[])
}

/// [`raid5_cut_after_a_write`], with `prepare` run on the disks' folder before the
/// server starts and `serve_args` given to it.
fn raid5_cut_after_a_write_with(
    prepare: impl FnOnce(&Path),
    serve_args: &[&str],
) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>, Vec<u8>) {
    use crate::server::Server;
    let dir = tempdir();
    let disks = crate::server::raid5(dir.path(), "16M");
    prepare(&disks);
    let rail: Vec<String> = (0..4)
        .map(|role| format!("role={role},power-cut-on-signal"))
        .collect();
    let mut args: Vec<&str> = serve_args.to_vec();
    args.extend(rail.iter().flat_map(|f| ["--fault", f.as_str()]));
    args.push(p(&disks));
    let server = Server::tcp(dir.path(), &args);
    let mut client = crate::nbd_raw::Client::open(server.tcp_addr(), "xraid", false);
    let old = client.read(0, 4096).expect("read");
    let new = crate::util::random_bytes(4096, 71);
    assert_eq!(client.write(0, &new), 0, "write");
    server.cut_power();
    (dir, disks, old, new)
}

/// Serves `disks` with `fault`, reads the first 4 KiB, which must be `old` or `new`,
/// and stops; returns what it read, the server's log and the status after.
fn serve_and_read(
    dir: &Path,
    disks: &Path,
    fault: &str,
    old: &[u8],
    new: &[u8],
) -> (Vec<u8>, String, serde_json::Value) {
    let server = crate::server::Server::tcp(dir, &["--fault", fault, p(disks)]);
    let mut client = crate::nbd_raw::Client::open(server.tcp_addr(), "xraid", false);
    let got = client.read(0, 4096).expect("read after the replay");
    assert!(got == old || got == new, "the write, or what was there");
    client.disconnect();
    let log = server.stop().stderr;
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(disks)])).expect("status json");
    (got, log, status)
}

/// The superblock of `member`.
fn superblock_of(member: &Path) -> Superblock {
    let mut bytes = vec![0u8; SUPERBLOCK_BYTES];
    std::fs::File::open(member)
        .expect("open member")
        .read_exact_at(&mut bytes, SUPERBLOCK_OFFSET_BYTES)
        .expect("read superblock");
    Superblock::parse(&bytes).expect("md superblock")
}

/// A fault for the member of role 3 (`member`, the parity of [`raid5_cut_after_a_write`]'s
/// stripe): it refuses the replay's parity rows and every write to its bad block log.
fn refusing_parity_and_its_log(member: &Path) -> String {
    let log = bad_block_log_sectors(&superblock_of(member)).expect("a bad block log");
    format!(
        "role=3,write-errors=1M..1028K,write-errors={}..{}",
        log.start * SECTOR,
        log.end * SECTOR
    )
}

/// Power fails after a client's write and before any flush; at the restart the
/// stripe log's replay writes the stripe's parity again, and the member holding it
/// refuses those rows (`--fault write-errors=`). The rows go into its bad block log
/// (recorded before the rings say the replay is done, so that a second crash cannot
/// find them unlisted with nothing left to replay) and it serves on, where before the
/// refusal failed it. The stripe reads back the same with and without the fault.
#[test]
fn a_member_that_refuses_the_replays_parity_records_it_and_serves_on() {
    require_tool!("mdadm");
    let (dir, disks, old, new) = raid5_cut_after_a_write();
    let (got, log, status) = serve_and_read(
        dir.path(),
        &disks,
        "role=3,write-errors=1M..1028K",
        &old,
        &new,
    );
    assert!(
        log.lines().any(|l| l.contains("member 3 (")
            && l.contains("at device sectors 2048..2056 refused a write")),
        "one line says so, in mdadm's numbering (the data starts at 1 MiB): {log}"
    );
    assert_eq!(status["members"][3]["state"], "active", "{status}");
    assert!(
        status["members"][3]["bad_block_sectors"]
            .as_u64()
            .unwrap_or(0)
            >= 8,
        "{status}"
    );
    let listed = mdadm_badblocks(&disks.join("d3"));
    assert!(
        listed.lines().skip(1).any(|l| l.contains(" for ")),
        "{listed}"
    );
    let read = crate::util::ok_bytes(&["read", "--length", "4096", p(&disks)]);
    assert!(read == got, "the same without the fault");
    let check = crate::util::scrub("check", &disks);
    assert_eq!(check["mismatched_units"], 0, "{check}");
}

/// The same, with the member's bad block log refusing writes too: it cannot record
/// what it refused, so it is failed (the others hold its rows) and the array opens
/// degraded and serves the same data — where the open failed, over and over.
#[test]
fn a_member_that_cannot_record_the_replays_refusal_is_failed_and_the_array_opens() {
    let (dir, disks, old, new) = raid5_cut_after_a_write();
    let fault = refusing_parity_and_its_log(&disks.join("d3"));
    let (got, log, status) = serve_and_read(dir.path(), &disks, &fault, &old, &new);
    assert!(
        log.contains("member") && log.contains("d3 failed"),
        "the log names it: {log}"
    );
    assert_eq!(status["members"][3]["state"], "missing", "{status}");
    assert_eq!(status["degraded"], true, "{status}");
    let read = crate::util::ok_bytes(&["read", "--length", "4096", p(&disks)]);
    assert!(read == got, "the same after a restart");
}

/// A member that fails during the stripe log's replay at open while a replacement is
/// being built for it hands its role to the replacement (md's want_replacement), and
/// the superblocks written at open go to each device as itself: the replacement holds
/// the role from its checkpoint, the member is faulty. Before, the open wrote the
/// member's superblock onto the replacement's device (its device UUID and slot), and a
/// crash right after the open left a replacement posing as the member. `xraid write`
/// at an offset past the array's end opens the array and stops there, as a crash would.
#[test]
fn a_replacement_that_takes_over_during_the_replay_keeps_its_own_superblock() {
    let (_dir, disks, old, new) = raid5_cut_after_a_write_with(
        |disks| {
            crate::replace::replace_without_copy(disks, "d3", "n3");
        },
        // The copy barely moves before the cut.
        &["--rebuild-min", "1", "--rebuild-max", "1"],
    );
    let fault = refusing_parity_and_its_log(&disks.join("d3"));
    let error = fails(&[
        "write",
        "--offset",
        "1T",
        "--input",
        "/dev/null",
        "--fault",
        &fault,
        p(&disks),
    ]);
    assert!(error.contains("--offset"), "{error}");
    let (d0, d3, n3) = (
        superblock_of(&disks.join("d0")),
        superblock_of(&disks.join("d3")),
        superblock_of(&disks.join("n3")),
    );
    assert_ne!(n3.device_uuid, d3.device_uuid, "the replacement is itself");
    assert_eq!(n3.events, d0.events, "and as fresh as the array");
    assert_eq!(
        d0.dev_roles[n3.dev_number as usize], 3,
        "{:?}",
        d0.dev_roles
    );
    assert_eq!(
        d0.dev_roles[d3.dev_number as usize],
        xraid_format::ROLE_FAULTY,
        "{:?}",
        d0.dev_roles
    );
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status json");
    let role3 = &status["members"][3];
    assert!(
        role3["path"].as_str().is_some_and(|p| p.ends_with("n3")),
        "{status}"
    );
    assert_eq!(role3["state"], "rebuilding", "{status}");
    let read = crate::util::ok_bytes(&["read", "--length", "4096", p(&disks)]);
    assert!(read == old || read == new, "the write, or what was there");
}

/// A RAID-5 (4 x 16M, bitmap chunk 1M) in `root`/disks holding `data` from byte 0,
/// stopped cleanly, then d3 being replaced by n3 (no copy yet), then a 4 KiB write at
/// byte 0 cut off by a power failure. Returns the disks and the new 4 KiB.
fn cut_with_a_replacement(root: &Path, data: &[u8]) -> (std::path::PathBuf, Vec<u8>) {
    let disks = crate::server::create_array(root, "5", 4, "16M", &["--bitmap-chunk", "1M"]);
    let input = root.join("data");
    std::fs::write(&input, data).expect("data file");
    ok(&["write", "--offset", "0", "--input", p(&input), p(&disks)]);
    crate::replace::replace_without_copy(&disks, "d3", "n3");
    let rail: Vec<String> = (0..4)
        .map(|role| format!("role={role},power-cut-on-signal"))
        .collect();
    let mut args: Vec<&str> = vec!["--rebuild-min", "1", "--rebuild-max", "1"];
    args.extend(rail.iter().flat_map(|f| ["--fault", f.as_str()]));
    args.push(p(&disks));
    let server = crate::server::Server::tcp(root, &args);
    let mut client = crate::nbd_raw::Client::open(server.tcp_addr(), "xraid", false);
    let new = crate::util::random_bytes(4096, 71);
    assert_eq!(client.write(0, &new), 0, "write");
    server.cut_power();
    (disks, new)
}

/// d3 fails during the replay at the next open and n3 takes role 3 over. Its copy had
/// not started: the recover that follows gives it all of role 3, not only the chunks
/// the bitmap has dirty (found by a review: taken in at open, the take-over was
/// recovered from the bitmap, and 320 blocks of role 3 read back wrong).
#[test]
fn a_replacement_that_takes_over_during_the_replay_is_rebuilt_whole() {
    let dir = tempdir();
    let data = crate::util::random_bytes(8 << 20, 5);
    let (disks, new) = cut_with_a_replacement(dir.path(), &data);
    let fault = refusing_parity_and_its_log(&disks.join("d3"));
    let server = crate::server::Server::tcp(dir.path(), &["--fault", &fault, p(&disks)]);
    server.wait_for_log(0, &["recover done"]);
    server.stop();
    let read = crate::util::ok_bytes(&["read", "--length", "8M", p(&disks)]);
    assert!(read[..4096] == new[..] || read[..4096] == data[..4096]);
    let wrong = (4096..data.len())
        .step_by(4096)
        .filter(|&at| read[at..at + 4096] != data[at..at + 4096])
        .count();
    assert_eq!(wrong, 0, "4 KiB blocks read back wrong after the recover");
}

/// n3 is dropped during the replay at the next open (it refuses the replay's parity
/// write: its file system is full): the array opens with d3 in role 3 (found by a
/// review: the open failed with "nothing to recover", the dropped replacement still
/// in its books). Needs a tmpfs of its own (mount), else it is skipped.
#[test]
fn a_replacement_dropped_during_the_replay_lets_the_array_open() {
    let dir = tempdir();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=160m", "tmpfs", p(&mnt)])
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let data = crate::util::random_bytes(4 << 20, 6);
    let (disks, new) = cut_with_a_replacement(&mnt, &data);
    // Every member's pages are allocated; n3's stripe-0 parity rows are freed, and
    // nothing is left to allocate them again.
    for m in ["d0", "d1", "d2", "d3", "n3"] {
        let path = disks.join(m);
        let len = std::fs::metadata(&path).unwrap().len().to_string();
        let st = std::process::Command::new("fallocate")
            .args(["--length", &len, p(&path)])
            .status()
            .expect("fallocate");
        assert!(st.success());
    }
    let n3 = disks.join("n3");
    let st = std::process::Command::new("fallocate")
        .args(["--punch-hole", "--offset", "1M", "--length", "64K", p(&n3)])
        .status()
        .expect("fallocate");
    assert!(st.success());
    let filler = mnt.join("filler");
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", &format!("of={}", p(&filler)), "bs=64k"])
        .output();
    let out = crate::util::xraid()
        .args(["write", "--offset", "1T", "--input", "/dev/null", p(&disks)])
        .output()
        .expect("xraid write");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("{stderr}");
    std::fs::remove_file(&filler).unwrap();
    assert!(stderr.contains("--offset"), "the open succeeds: {stderr}");
    let read = crate::util::ok_bytes(&["read", "--length", "4096", p(&disks)]);
    assert!(read == new || read[..] == data[..4096]);
}

/// md's write hole with a second fault, end to end: a RAID-5 missing d1, a 4 KiB
/// write at byte 0 cut off by the power (stripe 0: data on d0 and d1, parity on d3),
/// and at the restart d3's stripe-log ring fails to read (`--fault read-errors=`
/// over it: pending sectors, which the replay's wipe of the ring then rewrites),
/// taking the write's entry with it. d1's chunk of stripe 0 would be rebuilt
/// from parity the cut may have torn: it reads as an error instead (d3's parity rows
/// there go into its bad block log, recorded where mdadm sees them, and one line of
/// the server's log says so); a stripe whose parity is elsewhere reads as before.
#[test]
fn a_lost_ring_on_a_degraded_array_reads_the_missing_rows_as_errors() {
    require_tool!("mdadm");
    let (dir, disks, old, new) = raid5_cut_after_a_write_with(
        |disks| {
            ok(&["fail", p(disks), p(&disks.join("d1"))]);
        },
        &[],
    );
    // The ring lies just below the data, 1 MiB in.
    let fault = format!("role=3,read-errors={}..{}", (1 << 20) - (64 << 10), 1 << 20);
    let server = crate::server::Server::tcp(dir.path(), &["--fault", &fault, p(&disks)]);
    let mut client = crate::nbd_raw::Client::open(server.tcp_addr(), "xraid", false);
    let written = client.read(0, 4096).expect("d0's chunk reads");
    assert!(
        written == old || written == new,
        "the write, or what was there"
    );
    assert!(
        client.read(64 << 10, 4096).is_err(),
        "d1's chunk of stripe 0 reads as an error"
    );
    client
        .read(192 << 10, 192 << 10)
        .expect("stripe 1 (parity on d2) reads");
    // Until the owed resync completes (d1 replaced and rebuilt), no write goes over
    // the lost rows: a later walk could not know it made them good.
    let whole = crate::util::random_bytes(192 << 10, 72);
    assert_ne!(
        client.write(0, &whole),
        0,
        "a full-stripe write fails, loudly"
    );
    assert!(
        client.read(64 << 10, 4096).is_err(),
        "and the rows stay lost"
    );
    client.disconnect();
    let log = server.stop().stderr;
    assert!(
        log.lines()
            .filter(|l| l.contains("member 3 (")
                && l.contains("holds parity that a crash may have torn"))
            .count()
            == 1,
        "one line says so: {log}"
    );
    let listed = mdadm_badblocks(&disks.join("d3"));
    assert!(
        listed.lines().any(|l| l.contains(" for 128 sectors")),
        "mdadm sees the list: {listed}"
    );
}

/// md's write hole met by a read error: a RAID-5 without the stripe log, its power cut
/// after a write to stripe 0, served again with d1's rows of that stripe failing to
/// read before the resync has put parity right. Rebuilt through that parity they may
/// be what was never written (md returns them so); xraid answers with an error, the
/// resync lists the parity rows it cannot make agree (mdadm sees them), and the rows
/// stay lost — loudly — while the rest of the array reads back.
#[test]
fn a_read_error_in_a_stripe_a_cut_may_have_torn_fails_loudly() {
    require_tool!("mdadm");
    let (dir, disks, old, new) = raid5_cut_after_a_write_with(|_| {}, &["--consistency", "resync"]);
    // d1's first 4 KiB of data (its chunk of stripe 0), 1 MiB in.
    let fault = format!("role=1,read-errors={}..{}", 1 << 20, (1 << 20) + 4096);
    let server = crate::server::Server::tcp(
        dir.path(),
        &["--consistency", "resync", "--fault", &fault, p(&disks)],
    );
    let mut client = crate::nbd_raw::Client::open(server.tcp_addr(), "xraid", false);
    assert!(
        client.read(64 << 10, 4096).is_err(),
        "d1's failing rows read as an error, not as rebuilt through parity in doubt"
    );
    let written = client.read(0, 4096).expect("d0's chunk reads");
    assert!(
        written == old || written == new,
        "the write, or what was there"
    );
    server.wait_for_log(0, &["resync done"]);
    assert!(client.read(64 << 10, 4096).is_err(), "after the resync too");
    client
        .read((64 << 10) + 4096, 60 << 10)
        .expect("the rest of d1's chunk reads");
    client.disconnect();
    let log = server.stop().stderr;
    assert!(
        log.lines()
            .any(|l| l.contains("member 3 (")
                && l.contains("holds parity that a crash may have torn")),
        "one line says so: {log}"
    );
    let listed = mdadm_badblocks(&disks.join("d3"));
    assert!(
        listed.lines().any(|l| l.contains(" for 8 sectors")),
        "mdadm sees the parity rows listed: {listed}"
    );
}
