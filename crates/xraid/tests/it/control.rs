//! The control socket of a served array: `xraid status`, `scrub`, `fail`, `add` and
//! `remove` reach the running server (which holds the members) instead of the members
//! themselves.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::nbd_raw::Client;
use crate::server::{raid5, Server};
use crate::util::{
    fails, ok, ok_once_let_go, p, random_bytes, sha256_file, sha256_of_read, tempdir,
};

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn live_status(disks: &Path) -> serde_json::Value {
    json(&ok(&["status", "--json", p(disks)]))
}

/// Fails member d1 of the array `server` serves, writes 1 MiB of `seed`'s bytes at
/// 2 MiB while it is out (keeping `expected` in step), and adds the same disk back
/// while clients are served: into its own role, with that write to catch up on.
pub(crate) fn write_while_d1_is_out_then_add_it_back(
    server: &Server,
    disks: &Path,
    expected: &mut [u8],
    seed: u64,
) {
    let d1 = disks.join("d1");
    ok(&["fail", p(disks), p(&d1)]);
    assert_eq!(live_status(disks)["health"], "degraded");
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    let fresh = random_bytes(1 << 20, seed);
    assert_eq!(client.write(2 << 20, &fresh), 0);
    assert_eq!(client.flush(), 0);
    expected[2 << 20..3 << 20].copy_from_slice(&fresh);
    client.disconnect();
    let out = ok(&["add", p(disks), p(&d1)]);
    assert!(out.contains("added as role 1 by the server"), "{out}");
}

#[test]
fn status_scrub_and_fail_reach_the_running_server() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(45 << 20, 41)).expect("image");
    ok(&["write", p(&disks), "-i", p(&image)]);
    ok(&["add", "--size", "16M", p(&disks), p(&disks.join("s0"))]);
    let server = Server::unix(dir.path(), &[p(&disks)]);

    let s = live_status(&disks);
    assert_eq!(s["served"], true, "{s}");
    assert_eq!(s["health"], "clean", "{s}");
    assert_eq!(s["members"].as_array().map(Vec::len), Some(4), "{s}");
    assert!(s["spares"][0].as_str().unwrap_or("").ends_with("s0"), "{s}");
    let text = ok(&["status", p(&disks)]);
    assert!(text.contains("served, clean raid5"), "{text}");

    let check = json(&ok(&["scrub", "check", "--json", p(&disks)]));
    assert_eq!(check["served"], true, "{check}");
    assert_eq!(check["completed"], true, "{check}");
    assert_eq!(check["mismatched_units"], 0, "{check}");

    // Failing a member: the spare steps in and is rebuilt while the server runs.
    let out = ok(&["fail", p(&disks), p(&disks.join("d2"))]);
    assert!(out.contains("by the server"), "{out}");
    server.wait_for_log(0, &["recover done (0 mismatched units, 0 unrecoverable)"]);
    let s = live_status(&disks);
    assert_eq!(s["health"], "clean", "{s}");
    assert!(
        s["members"][2]["path"]
            .as_str()
            .unwrap_or("")
            .ends_with("s0"),
        "{s}"
    );

    // Refusals come back as one clear line and change nothing.
    let err = fails(&["fail", p(&disks), p(&dir.path().join("image.raw"))]);
    assert!(err.contains("is not an active member"), "{err}");
    let err = fails(&["add", "--size", "1M", p(&disks), p(&disks.join("s1"))]);
    assert!(err.contains("but a member needs at least"), "{err}");
    assert!(!disks.join("s1").exists(), "nothing created");
    // Each command first checks that a server answers (connects, closes): no error
    // for that in the server's log.
    let log = server.stderr();
    assert!(!log.contains("control request failed"), "{log}");

    server.stop();
    let s = json(&ok(&["status", "--json", p(&disks)]));
    assert!(s.get("served").is_none(), "offline now: {s}");
    assert_eq!(s["state"], "clean", "{s}");
    assert_eq!(s["degraded"], false, "{s}");
    std::fs::remove_file(disks.join("d0")).expect("lose d0");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

/// The live status counts how the server did its stripe writes and what its stripe
/// log wrote: a small write is a read-modify-write with a log entry, a write over
/// whole stripes reads nothing.
#[test]
fn the_live_status_counts_stripe_writes_and_log_entries() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let before = live_status(&disks)["io"].clone();
    assert_eq!(before["stripe_log"]["entries"], 0, "{before}");
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    // 4 KiB into a stripe, then three whole stripes (3 x 64K data chunks each).
    const STRIPE: u64 = 3 * 64 * 1024;
    assert_eq!(client.write(4096, &random_bytes(4096, 5)), 0);
    assert_eq!(
        client.write(STRIPE * 3, &random_bytes(STRIPE as usize * 3, 6)),
        0
    );
    assert_eq!(client.flush(), 0);
    client.disconnect();
    let io = live_status(&disks)["io"].clone();
    let count = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let small = count(&io["stripe_writes"]["read_modify_write"])
        + count(&io["stripe_writes"]["reconstruct_write"]);
    assert!(small >= 1, "{io}");
    assert!(count(&io["stripe_writes"]["full_stripe"]) >= 3, "{io}");
    assert!(count(&io["stripe_log"]["entries"]) >= 4, "{io}");
    assert!(count(&io["stripe_log"]["ring_writes"]) >= 1, "{io}");
    assert!(
        count(&io["member_writes"]) > count(&before["member_writes"]),
        "{io}"
    );
    server.stop();
}

#[test]
fn a_stale_control_socket_is_no_server() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    server.kill();
    // The killed server's socket file is left behind: nobody answers there.
    let s = json(&ok(&["status", "--json", p(&disks)]));
    assert!(s.get("served").is_none(), "{s}");
    // A new server takes the place over.
    let server = Server::unix(dir.path(), &[p(&disks)]);
    assert_eq!(live_status(&disks)["served"], true);
    server.stop();
}

/// What a membership change would change in a live status: health, each role's state
/// and path, the spares (not the latencies, which move with every I/O).
fn membership(s: &serde_json::Value) -> serde_json::Value {
    let members: Vec<serde_json::Value> = s["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| serde_json::json!([m["state"], m["path"]]))
        .collect();
    serde_json::json!({ "health": s["health"], "members": members, "spares": s["spares"] })
}

/// The 4 KiB where md 1.2 keeps its superblock: all zeros once it has been erased.
fn superblock_erased(member: &Path) -> bool {
    let bytes = std::fs::read(member).expect("member");
    bytes[4096..8192].iter().all(|&b| b == 0)
}

/// Polls the live status until `health` is `want` (up to 30 s).
pub(crate) fn wait_for_health(disks: &Path, want: &str) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let s = live_status(disks);
        if s["health"] == want {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "still {} after 30 s: {s}",
            s["health"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_member_added_live_to_a_whole_array_becomes_a_hot_spare() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let server = Server::unix(dir.path(), &[p(&disks)]);

    let s0 = disks.join("s0");
    let out = ok(&["add", "--size", "8M", p(&disks), p(&s0)]);
    assert!(out.contains("added as a hot spare by the server"), "{out}");
    let s = live_status(&disks);
    assert_eq!(s["health"], "clean", "{s}");
    assert_eq!(s["spares"].as_array().map(Vec::len), Some(1), "{s}");
    assert!(s["spares"][0].as_str().unwrap_or("").ends_with("s0"), "{s}");
    server.wait_for_log(0, &["s0 added as a hot spare"]);

    // Each refusal is one line and changes nothing.
    let before = membership(&s);
    let small = dir.path().join("small");
    std::fs::write(&small, vec![0u8; 1 << 20]).expect("small member");
    let (s1, d1) = (disks.join("s1"), disks.join("d1"));
    let refusals: [(&[&str], &str); 6] = [
        (
            &["add", p(&disks), p(&small)],
            "but a member needs at least",
        ),
        (
            &["add", "--size", "1M", p(&disks), p(&s1)],
            "but a member needs at least",
        ),
        (&["add", p(&disks), p(&s1)], "does not exist: give --size"),
        (&["add", p(&disks), p(&d1)], "is already an active member"),
        (&["add", p(&disks), p(&s0)], "is already a hot spare"),
        (
            &["remove", p(&disks), p(&d1)],
            "is an active member: fail it first",
        ),
    ];
    for (args, needle) in refusals {
        let err = fails(args);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(
            membership(&live_status(&disks)),
            before,
            "{args:?} changed something"
        );
    }
    assert!(!s1.exists(), "nothing created");
    assert!(superblock_erased(&small), "the small file was not written");

    server.stop();
    let s = json(&ok(&["status", "--json", p(&disks)]));
    assert_eq!(s["state"], "clean", "{s}");
    assert_eq!(s["degraded"], false, "{s}");
    assert_eq!(s["left_out"].as_array().map(Vec::len), Some(0), "{s}");
    assert_eq!(s["spares"].as_array().map(Vec::len), Some(1), "{s}");
}

#[test]
fn a_member_added_live_into_a_failed_role_is_rebuilt_while_clients_are_served() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let size = json(&ok(&["status", "--json", p(&disks)]))["array_size_bytes"]
        .as_u64()
        .expect("array size");
    let mut expected = random_bytes(usize::try_from(size).expect("size"), 51);
    let image = dir.path().join("image.raw");
    std::fs::write(&image, &expected).expect("image");
    ok(&["write", p(&disks), "-i", p(&image)]);
    // A slow rebuild, so that the clients below meet it.
    let server = Server::tcp(dir.path(), &["--rebuild-max", "2", p(&disks)]);

    let d2 = disks.join("d2");
    ok(&["fail", p(&disks), p(&d2)]);
    assert_eq!(live_status(&disks)["health"], "degraded");
    // Its disk is gone for good: its entry is freed all the same.
    std::fs::remove_file(&d2).expect("d2 gone");
    let out = ok(&["remove", p(&disks), p(&d2)]);
    assert!(
        out.contains("removed from the array by the server"),
        "{out}"
    );
    // No device holds the role: "missing", as the status of an array not served says
    // (it read "faulty" with no path before 2026-11-29).
    let s = live_status(&disks);
    assert_eq!(s["members"][2]["state"], "missing", "{s}");
    assert!(s["members"][2]["path"].is_null(), "{s}");
    let n2 = disks.join("n2");
    let out = ok(&["add", "--no-rebuild", "--size", "8M", p(&disks), p(&n2)]);
    assert!(out.contains("added as role 2 by the server"), "{out}");
    let s = live_status(&disks);
    assert_eq!(s["health"], "recovering", "{s}");
    assert_eq!(s["members"][2]["state"], "rebuilding", "{s}");
    // Progress in bytes of a member's data area, for the CLI's bar (rate and ETA).
    let (done, total) = (
        s["sync"]["done_bytes"].as_u64().expect("done bytes"),
        s["sync"]["total_bytes"].as_u64().expect("total bytes"),
    );
    assert!(done <= total && total >= 7 << 20, "{s}");
    assert!(
        s["members"][2]["rebuilt_bytes"]
            .as_u64()
            .is_some_and(|b| b <= total),
        "{s}"
    );
    assert!(
        s["members"][2]["path"]
            .as_str()
            .unwrap_or("")
            .ends_with("n2"),
        "{s}"
    );

    // Clients are served meanwhile: every byte reads right, and writes land.
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    let piece = 1usize << 20;
    for at in (0..expected.len()).step_by(piece) {
        let len = piece.min(expected.len() - at);
        let got = client
            .read(at as u64, len as u32)
            .expect("read while recovering");
        assert!(
            got == expected[at..at + len],
            "wrong data at {at} while recovering"
        );
    }
    let fresh = random_bytes(3 * piece, 52);
    assert_eq!(client.write(5 * piece as u64, &fresh), 0);
    assert_eq!(client.flush(), 0);
    expected[5 * piece..8 * piece].copy_from_slice(&fresh);
    assert_eq!(
        live_status(&disks)["health"],
        "recovering",
        "the clients were served while the rebuild ran"
    );
    // A scrub waits for the rebuild: refused, with what to do.
    let err = fails(&["scrub", "check", p(&disks)]);
    assert!(
        err.contains("a recover is already running; try again once it has ended"),
        "{err}"
    );
    client.disconnect();
    // Its progress goes to the superblocks every 2 s (quick checkpoints on files), and
    // the status says how long the last record held the clients.
    let mut timed = None;
    while timed.is_none() {
        let s = live_status(&disks);
        if s["health"] != "recovering" {
            break;
        }
        if let Some(last) = s["sync"]["last_checkpoint_ms"].as_u64() {
            timed = Some((last, s["sync"]["checkpoint_every_ms"].clone()));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (last, every) = timed.expect("a checkpoint was timed while the rebuild ran");
    let every = every.as_u64().expect("a recover's checkpoint interval");
    let spaced = (last * 100).min(60_000);
    assert!(
        every >= 2000 && every >= spaced,
        "{every} ms after {last} ms"
    );

    let s = wait_for_health(&disks, "clean");
    for m in s["members"].as_array().expect("members") {
        assert_eq!(m["state"], "active", "{s}");
    }
    server.wait_for_log(0, &["recover done (0 mismatched units, 0 unrecoverable)"]);
    let check = json(&ok(&["scrub", "check", "--json", p(&disks)]));
    assert_eq!(check["mismatched_units"], 0, "{check}");

    server.stop();
    let s = json(&ok(&["status", "--json", p(&disks)]));
    assert_eq!(s["state"], "clean", "{s}");
    assert_eq!(s["degraded"], false, "{s}");
    std::fs::write(&image, &expected).expect("expected image");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
    // The rebuilt member alone stands in for d0: its data is right.
    let (d1, d3) = (disks.join("d1"), disks.join("d3"));
    assert_eq!(
        sha256_of_read(&[p(&d1), p(&n2), p(&d3)]),
        sha256_file(&image)
    );
}

#[test]
fn failed_members_and_spares_are_removed_live() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(12 << 20, 61)).expect("image");
    ok(&["write", p(&disks), "-i", p(&image)]);
    ok(&["add", "--size", "8M", p(&disks), p(&disks.join("s0"))]);
    let server = Server::unix(dir.path(), &[p(&disks)]);

    // A failed member whose role a spare took.
    let d1 = disks.join("d1");
    ok(&["fail", p(&disks), p(&d1)]);
    let s = wait_for_health(&disks, "clean");
    // Status lists it as left out, for `xraid remove`.
    let left: Vec<&str> = s["left_out"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["path"].as_str())
        .collect();
    assert!(left.iter().any(|l| l.ends_with("d1")), "{s}");
    assert!(ok(&["status", p(&disks)]).contains("d1: faulty"));
    let out = ok(&["remove", p(&disks), p(&d1)]);
    assert!(
        out.contains("removed from the array by the server"),
        "{out}"
    );
    assert!(superblock_erased(&d1));
    let s = live_status(&disks);
    assert_eq!(s["left_out"].as_array().map(Vec::len), Some(0), "{s}");
    // A spare took its place: the server closed it (before 2026-11-25 it held it until
    // it stopped), so it comes back while served, as a hot spare of the whole array.
    let out = ok_once_let_go(&["add", p(&disks), p(&d1)]);
    assert!(out.contains("added as a hot spare"), "{out}");
    let s = live_status(&disks);
    assert_eq!(s["spares"].as_array().map(Vec::len), Some(1), "{s}");
    ok(&["remove", p(&disks), p(&d1)]);

    // A spare added live, removed live.
    let s1 = disks.join("s1");
    ok(&["add", "--spare", "--size", "8M", p(&disks), p(&s1)]);
    assert_eq!(
        live_status(&disks)["spares"].as_array().map(Vec::len),
        Some(1)
    );
    ok(&["remove", p(&disks), p(&s1)]);
    let s = live_status(&disks);
    assert_eq!(s["spares"].as_array().map(Vec::len), Some(0), "{s}");
    assert!(superblock_erased(&s1));

    // A failed member with no spare to take its role: the role stays failed, empty
    // ("missing", as offline status says; "faulty" before 2026-11-29).
    let d3 = disks.join("d3");
    ok(&["fail", p(&disks), p(&d3)]);
    ok(&["remove", p(&disks), p(&d3)]);
    let s = live_status(&disks);
    assert_eq!(s["health"], "degraded", "{s}");
    assert_eq!(s["members"][3]["state"], "missing", "{s}");
    assert!(s["members"][3]["path"].is_null(), "{s}");
    assert!(superblock_erased(&d3));
    let err = fails(&["remove", p(&disks), p(&d3)]);
    assert!(err.contains("is not a member of array"), "{err}");

    // The removed disk itself fills it again (the server closed it on removal; before
    // 2026-11-25 it held it until it stopped); `xraid add` follows the rebuild.
    let out = ok_once_let_go(&["add", p(&disks), p(&d3)]);
    assert!(
        out.contains("added as role 3") && out.contains("rebuilt by the server"),
        "{out}"
    );
    let s = live_status(&disks);
    assert_eq!(s["health"], "clean", "{s}");
    assert!(
        s["members"][3]["path"]
            .as_str()
            .unwrap_or("")
            .ends_with("d3"),
        "{s}"
    );

    server.stop();
    let s = json(&ok(&["status", "--json", p(&disks)]));
    assert_eq!(s["state"], "clean", "{s}");
    assert_eq!(s["degraded"], false, "{s}");
    assert_eq!(s["left_out"].as_array().map(Vec::len), Some(0), "{s}");
    let read = dir.path().join("read.raw");
    ok(&["read", "--length", "12M", "-o", p(&read), p(&disks)]);
    assert_eq!(sha256_file(&read), sha256_file(&image));
    // Let go by the server, a removed member can come back (here as a spare).
    let out = ok(&["add", p(&disks), p(&d1)]);
    assert!(out.contains("hot spare"), "{out}");
}

#[test]
fn a_second_name_of_a_serving_member_is_not_removed_live() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let alias = dir.path().join("alias");
    std::fs::hard_link(disks.join("d0"), &alias).expect("hard link");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let before = membership(&live_status(&disks));
    let err = fails(&["remove", p(&disks), p(&alias)]);
    assert!(err.contains("active member"), "{err}");
    assert_eq!(membership(&live_status(&disks)), before);
    assert!(
        !superblock_erased(&disks.join("d0")),
        "d0 keeps its superblock"
    );
    server.stop();
}

/// With two roles failed, the member that left role 3 comes back into role 3 (and
/// catches up from the bitmap there), not into the lowest failed role. Before
/// 2026-11-25 it went into role 1 and was rebuilt whole, while status still showed
/// the same file as role 3's failed member.
#[test]
fn a_member_back_while_two_roles_are_failed_takes_its_own() {
    let dir = tempdir();
    let (disks, mut expected) = filled_with_small_bitmap_chunks(dir.path(), "6", 5, 81);
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let (d1, d3) = (disks.join("d1"), disks.join("d3"));
    ok(&["fail", p(&disks), p(&d1)]);
    ok(&["fail", p(&disks), p(&d3)]);
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    let fresh = random_bytes(1 << 20, 82);
    assert_eq!(client.write(2 << 20, &fresh), 0);
    assert_eq!(client.flush(), 0);
    expected[2 << 20..3 << 20].copy_from_slice(&fresh);
    let out = ok(&["add", p(&disks), p(&d3)]);
    assert!(out.contains("added as role 3 by the server"), "{out}");
    let log = server.wait_for_log(0, &["recover done"]);
    assert!(
        log.contains("skipped"),
        "caught up from the bitmap only: {log}"
    );
    let s = live_status(&disks);
    assert_eq!(s["health"], "degraded", "{s}");
    assert_eq!(s["members"][3]["state"], "active", "{s}");
    assert!(
        s["members"][3]["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("d3")),
        "{s}"
    );
    assert_eq!(s["members"][1]["state"], "faulty", "{s}");
    reads_back(&mut client, &expected);
    client.disconnect();
    server.stop();
}

/// An array of `members` 8 MiB members at `level` whose bitmap chunks are small
/// enough that a catch-up skips most of a member, filled with `seed`'s bytes; returns
/// its folder and what it holds.
fn filled_with_small_bitmap_chunks(
    dir: &Path,
    level: &str,
    members: usize,
    seed: u64,
) -> (std::path::PathBuf, Vec<u8>) {
    let disks = crate::server::create_array(dir, level, members, "8M", &["--bitmap-chunk", "256K"]);
    let size = json(&ok(&["status", "--json", p(&disks)]))["array_size_bytes"]
        .as_u64()
        .expect("array size");
    let expected = random_bytes(usize::try_from(size).expect("size"), seed);
    let image = dir.join("image.raw");
    std::fs::write(&image, &expected).expect("image");
    ok(&["write", p(&disks), "-i", p(&image)]);
    (disks, expected)
}

/// Reads the whole export through `client`, 1 MiB at a time, against `expected`.
fn reads_back(client: &mut Client, expected: &[u8]) {
    let piece = 1usize << 20;
    for at in (0..expected.len()).step_by(piece) {
        let len = piece.min(expected.len() - at);
        let got = client.read(at as u64, len as u32).expect("read");
        assert!(got == expected[at..at + len], "wrong data at {at}");
    }
}

#[test]
fn a_member_that_failed_while_served_comes_back_live_and_catches_up() {
    let dir = tempdir();
    let (disks, mut expected) = filled_with_small_bitmap_chunks(dir.path(), "5", 4, 71);
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    // Written while it is out: only this much is for it to catch up on.
    write_while_d1_is_out_then_add_it_back(&server, &disks, &mut expected, 72);
    let s = wait_for_health(&disks, "clean");
    assert_eq!(s["members"][1]["state"], "active", "{s}");
    let log = server.wait_for_log(0, &["recover done"]);
    assert!(
        log.contains("skipped"),
        "caught up from the bitmap only: {log}"
    );
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    reads_back(&mut client, &expected);
    client.disconnect();
    server.stop();
    let check = json(&ok(&["scrub", "check", "--json", p(&disks)]));
    assert_eq!(check["mismatched_units"], 0, "{check}");
}

/// A served array holds its hot spares open and locked, as md does, so that nothing
/// else takes one over while it waits (before, `create --force` could make a spare a
/// member of another array, and the server then rebuilt over it when a member
/// failed); removing the spare lets it go.
#[test]
fn hot_spares_are_held_while_served() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    ok(&[
        "add",
        "--spare",
        "--size",
        "8M",
        p(&disks),
        p(&disks.join("s0")),
    ]);
    let _server = Server::unix(dir.path(), &[p(&disks)]);
    let s1 = disks.join("s1");
    ok(&["add", "--spare", "--size", "8M", p(&disks), p(&s1)]);
    let other = dir.path().join("other");
    std::fs::create_dir(&other).expect("folder");
    // A RAID-1 of another array, made over `member` by force.
    let take_over = |partner: &str, member: &Path| {
        crate::util::xraid()
            .args(["create", "-l", "1", "--force", "--size", "8M"])
            .args([p(&other.join(partner)), p(member)])
            .output()
            .expect("xraid runs")
    };
    for spare in ["s0", "s1"] {
        let out = take_over("e0", &disks.join(spare));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spare} was taken over");
        assert!(err.contains("in use by another process"), "{spare}: {err}");
    }
    ok(&["remove", p(&disks), p(&s1)]);
    let moved = other.join("s1");
    std::fs::rename(&s1, &moved).expect("move the removed spare away");
    assert!(
        take_over("e1", &moved).status.success(),
        "let go once removed"
    );
    // The spare found at start still steps in when a member fails.
    ok(&["fail", p(&disks), p(&disks.join("d2"))]);
    let s = wait_for_health(&disks, "clean");
    assert!(
        s["members"][2]["path"]
            .as_str()
            .is_some_and(|path| path.ends_with("s0")),
        "{s}"
    );
}
