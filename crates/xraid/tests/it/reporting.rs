//! What the commands report about an array says the same served or not: `xraid status`
//! reaches the server of an array that has failed, its JSON has the offline one's
//! fields, a served scrub says what it repaired as an offline one does, a refused
//! `xraid fail` gives the real reason, `xraid add --no-rebuild` says what happens, and
//! a stop says no resync is left where there is none to run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::nbd_raw::Client;
use crate::server::{create_array, raid5, Server};
use crate::util::{fails, ok, p, random_bytes, tempdir};

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn status(disks: &Path) -> serde_json::Value {
    json(&ok(&["status", "--json", p(disks)]))
}

/// The keys of a JSON object.
fn keys(v: &serde_json::Value) -> Vec<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// Keys of `offline` that `served` lacks.
fn missing(offline: &serde_json::Value, served: &serde_json::Value) -> Vec<String> {
    let have = keys(served);
    keys(offline)
        .into_iter()
        .filter(|k| !have.contains(k))
        .collect()
}

#[test]
fn a_served_array_that_has_failed_is_reported_by_its_server() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    // Two members of a RAID-5 fail under the writes: the array has lost data, and its
    // members no longer assemble offline.
    let server = Server::tcp(
        dir.path(),
        &[
            "--fault",
            "role=1,fail-after=20",
            "--fault",
            "role=2,fail-after=40",
            p(&disks),
        ],
    );
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    let data = random_bytes(64 << 10, 3);
    let mut refused = 0;
    for i in 0..64 {
        if client.write(i * (64 << 10), &data) != 0 {
            refused += 1;
        }
    }
    if client.flush() != 0 {
        refused += 1;
    }
    client.disconnect();
    let start = Instant::now();
    let s = loop {
        let s = status(&disks);
        if s["health"] == "failed" || start.elapsed() > Duration::from_secs(10) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(s["served"], true, "the server's view, not the disks': {s}");
    assert_eq!(s["health"], "failed", "{s}");
    assert_eq!(s["members"][1]["state"], "faulty", "{s}");
    assert_eq!(s["members"][2]["state"], "faulty", "{s}");
    // Every request answered EIO once the array had failed is a lost one.
    assert!(refused > 0, "writes after the second failure fail");
    assert_eq!(s["lost_requests"], refused, "{s}");
    let text = ok(&["status", p(&disks)]);
    assert!(text.contains(": served, failed raid5"), "{text}");
    assert!(
        text.contains(&format!("Lost : {refused} requests")),
        "{text}"
    );
    server.stop();
}

#[test]
fn the_served_status_json_has_the_fields_of_the_offline_one() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    // A member failed before the server starts is left out by it.
    ok(&["fail", p(&disks), p(&disks.join("d1"))]);
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    assert_eq!(client.write(0, &random_bytes(4096, 9)), 0);
    assert_eq!(client.flush(), 0);
    client.disconnect();
    let served = status(&disks);
    assert_eq!(served["served"], true, "{served}");
    server.stop();
    let offline = status(&disks);
    assert!(offline.get("served").is_none(), "{offline}");

    assert_eq!(missing(&offline, &served), Vec::<String>::new(), "{served}");
    for role in 0..4 {
        let (o, s) = (&offline["members"][role], &served["members"][role]);
        assert_eq!(missing(o, s), Vec::<String>::new(), "role {role}: {s}");
    }
    for field in ["member_data_bytes", "degraded", "uuid", "raid_disks"] {
        assert_eq!(served[field], offline[field], "{field}: {served}");
    }
    assert_eq!(served["degraded"], true, "{served}");
    // Written while served, then stopped cleanly: as the superblocks say.
    assert_eq!(served["state"], "active", "{served}");
    assert_eq!(offline["state"], "clean", "{offline}");
    for role in [0, 2, 3] {
        let (o, s) = (&offline["members"][role], &served["members"][role]);
        assert_eq!(s["device_uuid"], o["device_uuid"], "role {role}: {s}");
        assert!(s["events"].as_u64().is_some(), "role {role}: {s}");
    }
    let left = &served["left_out"][0];
    assert!(
        left["path"].as_str().unwrap_or("").ends_with("d1"),
        "{served}"
    );
    assert_eq!(left["events"], offline["left_out"][0]["events"], "{served}");
}

/// Flips a byte of `member`'s data area (md's data offset of these arrays: 1 MiB),
/// behind xraid's back.
fn flip(member: &Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(member)
        .expect("member");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, (1 << 20) + offset).expect("read");
    b[0] ^= 0xff;
    f.write_all_at(&b, (1 << 20) + offset).expect("write");
    f.sync_all().expect("sync");
}

fn copy_folder(from: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir(to).expect("copy folder");
    for entry in std::fs::read_dir(from).expect("members") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            std::fs::copy(&path, to.join(path.file_name().expect("a name"))).expect("copy");
        }
    }
    to.to_path_buf()
}

#[test]
fn a_served_scrub_reports_what_it_repaired_as_an_offline_one_does() {
    let dir = tempdir();
    let disks = create_array(dir.path(), "1", 2, "16M", &["--integrity"]);
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(4 << 20, 17)).expect("image");
    ok(&["write", p(&disks), "-i", p(&image)]);
    // One block that fails its checksum: found and repaired by either scrub.
    flip(&disks.join("d1"), 8192 + 7);
    let offline_disks = copy_folder(&disks, &dir.path().join("offline"));

    let server = Server::unix(dir.path(), &[p(&disks)]);
    let served = json(&ok(&["scrub", "check", "--json", p(&disks)]));
    server.stop();
    let offline = json(&ok(&["scrub", "check", "--json", p(&offline_disks)]));
    assert_eq!(served["served"], true, "{served}");
    assert_eq!(offline["served"], false, "{offline}");
    assert_eq!(keys(&served), keys(&offline), "{served} {offline}");
    for field in keys(&offline).iter().filter(|k| *k != "served") {
        assert_eq!(served[field], offline[field], "{field}: {served} {offline}");
    }
    assert_eq!(served["read_errors_corrected"], 1, "{served}");
    assert_eq!(served["checksum_mismatches"], 1, "{served}");

    // The text says the same, the server named.
    flip(&disks.join("d1"), 8192 + 7);
    std::fs::remove_dir_all(&offline_disks).expect("old copy");
    copy_folder(&disks, &offline_disks);
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let served = ok(&["scrub", "check", p(&disks)]);
    server.stop();
    let offline = ok(&["scrub", "check", p(&offline_disks)]);
    assert!(
        served.contains("1 read errors corrected (1 of them blocks that failed their checksums)"),
        "{served}"
    );
    assert_eq!(
        served.replace(" (by the server that serves it)", ""),
        offline,
        "{served}"
    );
}

#[test]
fn raid10_refuses_to_fail_the_last_copy_and_says_so() {
    let dir = tempdir();
    let disks = create_array(dir.path(), "10", 4, "16M", &[]);
    // Near-2 mirrors roles 0+1 and 2+3: one of each pair may go.
    ok(&["fail", p(&disks), p(&disks.join("d0"))]);
    ok(&["fail", p(&disks), p(&disks.join("d2"))]);
    let err = fails(&["fail", p(&disks), p(&disks.join("d3"))]);
    assert!(
        err.contains("it holds the last copy of some data, whose other copy, on role 2, has failed: raid10 would lose that data"),
        "{err}"
    );
    assert!(!err.contains("survives at most"), "{err}");

    let server = Server::unix(dir.path(), &[p(&disks)]);
    let err = fails(&["fail", p(&disks), p(&disks.join("d1"))]);
    assert!(err.contains("the server says"), "{err}");
    assert!(
        err.contains("it holds the last copy of some data, whose other copy, on role 0, has failed: raid10 would lose that data"),
        "{err}"
    );
    assert_eq!(status(&disks)["members"][1]["state"], "active");
    server.stop();
}

#[test]
fn a_raid5_refusal_still_counts_members() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    ok(&["fail", p(&disks), p(&disks.join("d0"))]);
    let err = fails(&["fail", p(&disks), p(&disks.join("d1"))]);
    assert!(
        err.contains("2 of 4 members have failed and raid5 survives at most 1"),
        "{err}"
    );
}

#[test]
fn add_without_rebuild_says_the_member_is_not_rebuilt_yet() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    std::fs::remove_file(disks.join("d2")).expect("lose d2");
    let out = ok(&[
        "add",
        "--no-rebuild",
        "--size",
        "8M",
        p(&disks),
        p(&disks.join("d2")),
    ]);
    assert!(out.contains("not rebuilt yet"), "{out}");
    assert!(out.contains("`xraid serve` rebuilds it"), "{out}");
    assert!(!out.contains("it is rebuilt from the others"), "{out}");
    assert_eq!(status(&disks)["members"][2]["rebuilt_percent"], 0);
}

#[test]
fn replace_without_copy_says_the_replacement_is_not_copied_yet() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let out = ok(&[
        "replace",
        "--no-rebuild",
        "--size",
        "8M",
        p(&disks),
        p(&disks.join("d1")),
        p(&disks.join("n1")),
    ]);
    assert!(out.contains("not copied yet"), "{out}");
    assert!(out.contains("`xraid serve` copies it"), "{out}");
    assert!(!out.contains("it is rebuilt from"), "{out}");
    assert_eq!(
        status(&disks)["members"][1]["replacement"]["copied_percent"],
        0
    );
}

/// A RAID-0 left dirty (its server killed after a write) has no resync to owe: md
/// has nothing to resync on it, and xraid runs none ("nothing to resync with"). A
/// clean stop of the next server must then neither say that "the next start goes on
/// with" a resync, nor leave the array active for good — every later stop would say
/// the same, and no resync ever comes to finish it.
#[test]
fn a_raid0_left_dirty_is_not_said_to_leave_a_resync_unfinished() {
    let dir = tempdir();
    let disks = create_array(dir.path(), "0", 2, "16M", &[]);
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    assert_eq!(client.write(0, &random_bytes(1 << 20, 5)), 0);
    assert_eq!(client.flush(), 0);
    client.disconnect();
    server.kill();

    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let stopped = server.stop();
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status JSON");
    assert!(
        !stopped.stdout.contains("resync left unfinished")
            && !stopped.stderr.contains("with its resync unfinished"),
        "a RAID-0 has no resync to go on with: {}\n{}",
        stopped.stdout,
        stopped.stderr
    );
    assert_eq!(status["state"], "clean", "{status}");
}
