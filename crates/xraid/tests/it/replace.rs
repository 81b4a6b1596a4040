//! `xraid replace`: a new member rebuilt from an active one while it goes on serving
//! (md's want_replacement) — offline with a progress bar, or recorded with
//! `--no-rebuild` and copied at the next open; live on a served array under fio's
//! writes; resumed from its checkpoint after a kill. md's tools read the replacement
//! as md writes one ("Replacement device N", its recovery offset) at every step, and
//! bad requests change nothing.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::members::{md_agrees, status};
use crate::require_tool;
use crate::server::{raid5, Server};
use crate::util::{
    fails, ok, ok_once_let_go, p, random_bytes, sha256_file, sha256_of_read, tempdir,
};

fn fill(dir: &Path, disks: &Path, bytes: usize, seed: u64) -> std::path::PathBuf {
    let image = dir.join("image.raw");
    std::fs::write(&image, random_bytes(bytes, seed)).expect("image");
    ok(&["write", p(disks), "-i", p(&image)]);
    image
}

/// Records `new` (16M) as the replacement of member `old` of `disks`, its copy not
/// started (`replace --no-rebuild`): by the server when one serves the array.
pub(crate) fn replace_without_copy(disks: &Path, old: &str, new: &str) -> String {
    ok(&[
        "replace",
        "--no-rebuild",
        "--size",
        "16M",
        p(disks),
        p(&disks.join(old)),
        p(&disks.join(new)),
    ])
}

fn ends_with(v: &serde_json::Value, tail: &str) -> bool {
    v.as_str().is_some_and(|s| s.ends_with(tail))
}

#[test]
fn an_offline_replace_of_a_raid5_member_keeps_the_data_and_marks_the_old_one_faulty() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = fill(dir.path(), &disks, 45 << 20, 61);
    let out = replace_without_copy(&disks, "d1", "n1");
    assert!(out.contains("replaces"), "{out}");
    // Recorded as md records a replacement: same role, REPLACEMENT + RECOVERY_OFFSET.
    let s = status(&disks);
    assert_eq!(s["health"], "replacing", "{s}");
    assert!(ends_with(&s["members"][1]["path"], "d1"), "{s}");
    assert!(
        ends_with(&s["members"][1]["replacement"]["path"], "n1"),
        "{s}"
    );
    assert_eq!(s["members"][1]["replacement"]["copied_percent"], 0, "{s}");
    let md = md_agrees(&disks.join("n1"));
    assert_eq!(md["Device Role"], "Replacement device 1", "{md:?}");
    assert_eq!(md["Recovery Offset"], "0 sectors", "{md:?}");
    let state = md_agrees(&disks.join("d0"))["Array State"].clone();
    assert!(state.starts_with("ARAA "), "{state}");
    let text = ok(&["status", p(&disks)]);
    assert!(text.contains("active, being replaced 0%"), "{text}");
    assert!(text.contains("replacement 0%"), "{text}");
    // Read-only use leaves it alone; the data reads as before.
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));

    // Opened to write, the copy runs (here before a check).
    let check: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("json");
    assert_eq!(check["mismatched_units"], 0, "{check}");
    let s = status(&disks);
    assert_eq!(s["health"], "clean", "{s}");
    assert!(ends_with(&s["members"][1]["path"], "n1"), "{s}");
    assert!(s["members"][1].get("replacement").is_none(), "{s}");
    assert!(
        s["left_out"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|l| ends_with(&l["path"], "d1")),
        "the old member is out: {s}"
    );
    let md = md_agrees(&disks.join("n1"));
    assert_eq!(md["Device Role"], "Active device 1", "{md:?}");
    assert!(md["Array State"].starts_with("AAAA "), "{md:?}");
    // The old member's entry of the role table is faulty, as md marks a replaced one.
    // (md_p.h: max_dev at byte 220 of the superblock, dev_roles from byte 256.)
    let bytes = std::fs::read(disks.join("d0")).expect("d0");
    let sb = &bytes[4096..8192];
    let max_dev = u32::from_le_bytes(sb[220..224].try_into().expect("4 bytes")) as usize;
    let roles: Vec<u16> = (0..max_dev)
        .map(|i| u16::from_le_bytes([sb[256 + 2 * i], sb[257 + 2 * i]]))
        .collect();
    assert_eq!(
        roles.iter().filter(|&&r| r == 0xfffe).count(),
        1,
        "one faulty entry in {roles:?}"
    );
    assert_eq!(
        roles.iter().filter(|&&r| r == 1).count(),
        1,
        "role 1 held once: {roles:?}"
    );
    // The replacement carries the role: without d1 and without d3, the data is whole.
    std::fs::remove_file(disks.join("d1")).expect("drop d1");
    std::fs::remove_file(disks.join("d3")).expect("lose d3");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn an_offline_replace_of_a_raid1_member_copies_it_with_a_progress_bar() {
    let dir = tempdir();
    let disks = dir.path().join("disks");
    std::fs::create_dir(&disks).expect("disks");
    ok(&[
        "create",
        "-l",
        "1",
        "--size",
        "16M",
        p(&disks.join("a")),
        p(&disks.join("b")),
    ]);
    let image = fill(dir.path(), &disks, 15 << 20, 62);
    // A hot spare of the array may be the replacement.
    ok(&[
        "add",
        "--spare",
        "--size",
        "16M",
        p(&disks),
        p(&disks.join("s")),
    ]);
    let out = ok(&[
        "replace",
        p(&disks),
        p(&disks.join("a")),
        p(&disks.join("s")),
    ]);
    assert!(out.contains("holds role 0 now"), "{out}");
    let s = status(&disks);
    assert!(ends_with(&s["members"][0]["path"], "s"), "{s}");
    assert_eq!(s["degraded"], false, "{s}");
    std::fs::remove_file(disks.join("a")).expect("drop a");
    std::fs::remove_file(disks.join("b")).expect("lose b");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn bad_replace_requests_are_refused_and_change_nothing() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let d = |n: &str| disks.join(n);
    let sums = || {
        let mut names: Vec<_> = std::fs::read_dir(&disks)
            .expect("disks")
            .map(|e| e.expect("entry").path())
            .collect();
        names.sort();
        names.iter().map(|n| sha256_file(n)).collect::<Vec<_>>()
    };
    let before = sums();
    let refused = |args: &[&str], says: &str| {
        let err = fails(args);
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    };
    refused(
        &[
            "replace",
            "--size",
            "8M",
            p(&disks),
            p(&d("zz")),
            p(&d("n")),
        ],
        "is not an active member",
    );
    refused(
        &["replace", p(&disks), p(&d("d1")), p(&d("d2"))],
        "is already an active member",
    );
    refused(
        &[
            "replace",
            "--size",
            "1M",
            p(&disks),
            p(&d("d1")),
            p(&d("n")),
        ],
        "but a member needs at least",
    );
    assert!(!d("n").exists(), "nothing made");
    // A member of another array needs --force.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).expect("other");
    ok(&[
        "create",
        "-l",
        "1",
        "--size",
        "8M",
        p(&other.join("o0")),
        p(&other.join("o1")),
    ]);
    refused(
        &["replace", p(&disks), p(&d("d1")), p(&other.join("o0"))],
        "pass --force",
    );
    assert_eq!(sums(), before, "nothing changed");
    // One replacement per role at a time.
    ok(&[
        "replace",
        "--no-rebuild",
        "--size",
        "8M",
        p(&disks),
        p(&d("d1")),
        p(&d("n1")),
    ]);
    refused(
        &[
            "replace",
            "--size",
            "8M",
            p(&disks),
            p(&d("d1")),
            p(&d("n2")),
        ],
        "is already being replaced",
    );
    assert!(!d("n2").exists(), "nothing made");
    // RAID-0: nothing to fall back on.
    let r0 = dir.path().join("r0");
    std::fs::create_dir(&r0).expect("r0");
    ok(&[
        "create",
        "-l",
        "0",
        "--size",
        "8M",
        p(&r0.join("a")),
        p(&r0.join("b")),
    ]);
    refused(
        &[
            "replace",
            "--size",
            "8M",
            p(&r0),
            p(&r0.join("a")),
            p(&r0.join("n")),
        ],
        "no redundancy",
    );
    assert!(!r0.join("n").exists(), "nothing made");
}

/// fio's nbd engine over four connections: random 4 KiB writes with checksums, or
/// (`verify_only`) a read-back of what such a run wrote.
fn fio(dir: &Path, uri: &str, verify_only: bool) {
    let uri = format!("--uri={uri}");
    let mut args = vec![
        "--name=v",
        "--ioengine=nbd",
        &uri,
        "--rw=randwrite",
        "--bs=4k",
        "--size=8M",
        "--offset_increment=8M",
        "--numjobs=4",
        "--iodepth=16",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--randseed=9",
        "--group_reporting",
    ];
    if verify_only {
        args.push("--verify_only=1");
    }
    let out = Command::new("timeout")
        .args(["--signal=KILL", "120", "fio"])
        .args(&args)
        .current_dir(dir)
        .output()
        .expect("fio runs");
    assert!(
        out.status.success(),
        "fio {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_live_replace_under_fio_writes_finishes_and_the_array_scrubs_clean() {
    require_tool!("fio");
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    // Paced so that the copy (16 MiB) outlasts the start of fio.
    let server = Server::unix(
        dir.path(),
        &["--rebuild-min", "2", "--rebuild-max", "4", p(&disks)],
    );
    let uri = server.uri("xraid");
    let out = replace_without_copy(&disks, "d2", "n2");
    assert!(out.contains("by the server"), "{out}");
    let s = status(&disks);
    assert_eq!(s["served"], true, "{s}");
    assert!(
        ends_with(&s["members"][2]["replacement"]["path"], "n2"),
        "{s}"
    );
    let text = ok(&["status", p(&disks)]);
    assert!(text.contains("active, being replaced"), "{text}");
    // md sees it as md's own replacement while it runs.
    assert_eq!(
        md_agrees(&disks.join("n2"))["Device Role"],
        "Replacement device 2"
    );
    // Refused while served: a second replacement for the role.
    let err = fails(&[
        "replace",
        "--size",
        "16M",
        p(&disks),
        p(&disks.join("d2")),
        p(&disks.join("n3")),
    ]);
    assert!(err.contains("is already being replaced"), "{err}");
    assert!(!disks.join("n3").exists());
    fio(dir.path(), &uri, false);
    server.wait_for_log(0, &["replacement done"]);
    fio(dir.path(), &uri, true);
    let s = status(&disks);
    assert!(ends_with(&s["members"][2]["path"], "n2"), "{s}");
    assert_eq!(s["health"], "clean", "{s}");
    // The replaced member is closed (its lock let go): back as a hot spare, served.
    let out = ok_once_let_go(&["add", "--spare", p(&disks), p(&disks.join("d2"))]);
    assert!(out.contains("added as a hot spare"), "{out}");
    let s = status(&disks);
    assert!(ends_with(&s["spares"][0], "d2"), "{s}");
    server.stop();
    let check: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("json");
    assert_eq!(check["mismatched_units"], 0, "{check}");
    assert_eq!(
        md_agrees(&disks.join("n2"))["Device Role"],
        "Active device 2"
    );
    // The replacement carries its role: without d2 and without d0, fio's data verifies.
    std::fs::remove_file(disks.join("d2")).expect("drop d2");
    std::fs::remove_file(disks.join("d0")).expect("lose d0");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    fio(dir.path(), &server.uri("xraid"), true);
    server.stop();
}

#[test]
fn a_replacement_cut_off_by_a_kill_resumes_from_its_checkpoint() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = fill(dir.path(), &disks, 45 << 20, 63);
    let server = Server::unix(
        dir.path(),
        &["--rebuild-min", "2", "--rebuild-max", "2", p(&disks)],
    );
    replace_without_copy(&disks, "d0", "n0");
    // The progress reaches the superblocks every 2 seconds.
    let deadline = Instant::now() + Duration::from_secs(60);
    let offset = loop {
        let md = md_agrees(&disks.join("n0"));
        let sectors: u64 = md["Recovery Offset"]
            .trim_end_matches(" sectors")
            .parse()
            .expect("offset");
        if sectors > 0 {
            break sectors;
        }
        assert!(Instant::now() < deadline, "no checkpoint: {md:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    server.kill();
    let s = status(&disks);
    let copied = s["members"][0]["replacement"]["copied_percent"]
        .as_u64()
        .expect("still a replacement");
    assert!(copied > 0 && copied < 100, "{s}");
    let md = md_agrees(&disks.join("n0"));
    assert_eq!(md["Device Role"], "Replacement device 0", "{md:?}");
    assert!(offset < 16 << 11, "part way: {offset}");
    // The next open to write goes on from there, and finishes.
    let server = Server::unix(dir.path(), &[p(&disks)]);
    server.wait_for_log(0, &["replacement done"]);
    let log = server.stderr();
    assert!(
        !log.contains("left out"),
        "the replacement is opened beside its member, not left out: {log}"
    );
    server.stop();
    let s = status(&disks);
    assert!(ends_with(&s["members"][0]["path"], "n0"), "{s}");
    let check: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("json");
    assert_eq!(check["mismatched_units"], 0, "{check}");
    std::fs::remove_file(disks.join("d0")).expect("drop d0");
    std::fs::remove_file(disks.join("d2")).expect("lose d2");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn a_read_only_export_refuses_a_replace() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let server = Server::unix(dir.path(), &["--read-only", p(&disks)]);
    let err = fails(&[
        "replace",
        "--size",
        "8M",
        p(&disks),
        p(&disks.join("d1")),
        p(&disks.join("n1")),
    ]);
    assert!(err.contains("read-only"), "{err}");
    assert!(!disks.join("n1").exists());
    server.stop();
}

/// A replacement that waits for a resync (one sync at a time) and then takes its role
/// over, its member failing first, is rebuilt whole once the resync ends — not only
/// where the write-intent bitmap has bits set, which is how a member back after a short
/// absence catches up (found by a review: the take-over left the array recovering
/// from the bitmap, and the replacement's never-copied chunks would have been served).
#[test]
fn a_replacement_that_takes_over_while_waiting_for_a_resync_is_rebuilt_whole() {
    let dir = tempdir();
    let disks = crate::server::create_array(dir.path(), "5", 4, "16M", &["--bitmap-chunk", "1M"]);
    let image = fill(dir.path(), &disks, 40 << 20, 17);
    let mut expected = std::fs::read(&image).expect("image");
    // Writes spread over the array, then a kill: the restart owes a resync of those
    // chunks, paced to last.
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let mut client = crate::nbd_raw::Client::open(server.tcp_addr(), "xraid", false);
    for i in 0..32u64 {
        let at = i * (1 << 20) + 8192;
        let block = random_bytes(4096, 100 + i);
        assert_eq!(client.write(at, &block), 0, "write");
        expected[at as usize..at as usize + 4096].copy_from_slice(&block);
    }
    server.kill();
    let server = Server::unix(
        dir.path(),
        &["--rebuild-min", "4", "--rebuild-max", "4", p(&disks)],
    );
    server.wait_for_log(0, &["resync running"]);
    replace_without_copy(&disks, "d3", "n3");
    ok(&["fail", p(&disks), p(&disks.join("d3"))]);
    let s = status(&disks);
    assert!(ends_with(&s["members"][3]["path"], "n3"), "{s}");
    let start = Instant::now();
    while !server
        .log_lines()
        .iter()
        .any(|l| l.contains("recover done"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "no recover done: {}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
    let read = crate::util::ok_bytes(&["read", "--length", "40M", p(&disks)]);
    let wrong = (0..expected.len())
        .step_by(4096)
        .filter(|&at| read[at..at + 4096] != expected[at..at + 4096])
        .count();
    assert_eq!(wrong, 0, "4 KiB blocks read back wrong after the recover");
    let check: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("json");
    assert_eq!(check["mismatched_units"], 0, "{check}");
}

/// A replacement still being built, on a served array: `xraid remove` refuses it (its
/// copy goes on in the server; before, its superblock was erased under it and it was
/// handed the role all the same, so that after a clean stop the array could not start
/// once another member had failed), and `xraid fail` drops it — the member it was to
/// replace serves on, the replacement can then be removed, and the array survives a
/// later failure and a restart.
#[test]
fn a_replacement_being_built_is_dropped_by_fail_and_only_then_removed() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = fill(dir.path(), &disks, 45 << 20, 71);
    let want = sha256_file(&image);
    let server = Server::unix(
        dir.path(),
        &["--rebuild-min", "1", "--rebuild-max", "1", p(&disks)],
    );
    replace_without_copy(&disks, "d2", "n2");
    let n2 = disks.join("n2");
    let err = fails(&["remove", p(&disks), p(&n2)]);
    assert!(err.contains("replacement of role 2"), "{err}");
    assert!(err.contains("fail it first"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let s = status(&disks);
    assert!(
        ends_with(&s["members"][2]["replacement"]["path"], "n2"),
        "{s}"
    );
    // The same file under another name is the same replacement.
    let link = dir.path().join("n2-link");
    std::fs::hard_link(&n2, &link).expect("hard link");
    let err = fails(&["remove", p(&disks), p(&link)]);
    assert!(err.contains("replacement of role 2"), "{err}");
    std::fs::remove_file(&link).expect("unlink");

    let out = ok(&["fail", p(&disks), p(&n2)]);
    assert!(out.contains("dropped"), "{out}");
    let s = status(&disks);
    assert!(s["members"][2]["replacement"].is_null(), "{s}");
    assert_eq!(s["members"][2]["state"], "active", "{s}");
    assert!(ends_with(&s["members"][2]["path"], "d2"), "{s}");
    ok_once_let_go(&["remove", p(&disks), p(&n2)]);
    let examined = Command::new("mdadm")
        .args(["--examine", p(&n2)])
        .output()
        .expect("mdadm runs");
    assert!(!examined.status.success(), "n2 keeps no md superblock");

    // The array does not count the dropped replacement: it survives d0 failing, and
    // starts again after a clean stop.
    ok(&["fail", p(&disks), p(&disks.join("d0"))]);
    server.stop();
    let s = status(&disks);
    assert_eq!(s["health"], "degraded", "{s}");
    assert_eq!(sha256_of_read(&["--length", "45M", p(&disks)]), want);
}
