//! The control socket of a served array: `xraid status`, `scrub` and `fail` reach the
//! running server (which holds the members) instead of the members themselves.

use std::path::Path;

use crate::server::{raid5, Server};
use crate::util::{fails, ok, p, random_bytes, sha256_file, sha256_of_read, tempdir};

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn live_status(disks: &Path) -> serde_json::Value {
    json(&ok(&["status", "--json", p(disks)]))
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
    let err = fails(&["add", "--size", "16M", p(&disks), p(&disks.join("s1"))]);
    assert!(err.contains("served by a running xraid"), "{err}");
    assert!(!disks.join("s1").exists(), "nothing created");

    server.stop();
    let s = json(&ok(&["status", "--json", p(&disks)]));
    assert!(s.get("served").is_none(), "offline now: {s}");
    assert_eq!(s["state"], "clean", "{s}");
    assert_eq!(s["degraded"], false, "{s}");
    std::fs::remove_file(disks.join("d0")).expect("lose d0");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
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
