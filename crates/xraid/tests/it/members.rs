//! `xraid add`: a blank disk, or a member that went stale, into a degraded array's
//! missing role, rebuilt from the others — at once with a progress bar, or (with
//! `--no-rebuild`) in the background of the next `xraid serve`; hot spares, which take
//! a lost member's place when the array is opened to write; md's tools read the
//! member's state as xraid does at every step; bad requests change nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::require_tool;
use crate::server::{raid5, Server};
use crate::util::{fails, ok, p, random_bytes, sha256_file, sha256_of_read, tempdir};

const ARRAY_BYTES: usize = 45 << 20;

/// `Key : value` lines of `mdadm --examine` / `xraid examine`, trimmed.
fn fields(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(" : "))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// `mdadm --examine` and `xraid examine` agree on the member's state; returns mdadm's
/// fields.
pub(crate) fn md_agrees(member: &Path) -> BTreeMap<String, String> {
    let out = Command::new("mdadm")
        .args(["--examine", p(member)])
        .output()
        .expect("mdadm runs");
    assert!(out.status.success(), "mdadm --examine {member:?} failed");
    let theirs = fields(&String::from_utf8_lossy(&out.stdout));
    let ours = fields(&ok(&["examine", p(member)]));
    for key in [
        "Feature Map",
        "Recovery Offset",
        "State",
        "Events",
        "Device Role",
        "Array State",
        "Device UUID",
    ] {
        assert_eq!(ours.get(key), theirs.get(key), "{key} of {member:?}");
    }
    assert!(
        theirs
            .get("Checksum")
            .is_some_and(|c| c.ends_with("correct")),
        "{theirs:?}"
    );
    theirs
}

/// `xraid status --json` of an array.
pub(crate) fn status(disks: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&["status", "--json", p(disks)])).expect("status json")
}

/// A RAID-5 holding a random image; returns the image's path.
fn filled(dir: &Path, disks: &Path, seed: u64) -> std::path::PathBuf {
    let image = dir.join("image.raw");
    std::fs::write(&image, random_bytes(ARRAY_BYTES, seed)).expect("image");
    ok(&["write", p(disks), "-i", p(&image)]);
    image
}

#[test]
fn a_blank_member_replaces_a_lost_one_and_is_rebuilt() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = filled(dir.path(), &disks, 31);
    std::fs::remove_file(disks.join("d1")).expect("lose d1");
    assert_eq!(status(&disks)["degraded"], true);
    let out = ok(&["add", "--size", "16M", p(&disks), p(&disks.join("d1"))]);
    assert!(
        out.contains("added as role 1") && out.contains("rebuilt"),
        "{out}"
    );
    let s = status(&disks);
    assert_eq!(s["degraded"], false, "{s}");
    assert_eq!(s["state"], "clean", "{s}");
    assert_eq!(s["members"][1]["state"], "active", "{s}");
    let md = md_agrees(&disks.join("d1"));
    assert_eq!(md["Device Role"], "Active device 1");
    assert_eq!(
        md["Feature Map"], "0x1",
        "recovered: no recovery offset left, the bitmap kept"
    );
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
    // The rebuilt member carries the array: lose another and read it all back.
    std::fs::remove_file(disks.join("d3")).expect("lose d3");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn without_rebuild_md_sees_a_recovering_member_and_serve_rebuilds_it() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = filled(dir.path(), &disks, 32);
    std::fs::remove_file(disks.join("d2")).expect("lose d2");
    ok(&[
        "add",
        "--no-rebuild",
        "--size",
        "16M",
        p(&disks),
        p(&disks.join("d2")),
    ]);
    let s = status(&disks);
    assert_eq!(s["members"][2]["state"], "rebuilding", "{s}");
    assert_eq!(s["members"][2]["rebuilt_percent"], 0, "{s}");
    assert_eq!(s["degraded"], true, "not in sync yet: {s}");
    assert_eq!(s["health"], "recovering", "{s}");
    let md = md_agrees(&disks.join("d2"));
    assert_eq!(md["Recovery Offset"], "0 sectors");
    assert_eq!(md["Feature Map"], "0x3");
    // Reads are right while the member is not rebuilt: it is treated as missing.
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
    // So a second member away is one too many, and the refusal says why.
    let away = dir.path().join("d3.away");
    std::fs::rename(disks.join("d3"), &away).expect("d3 away");
    let err = fails(&["read", "-o", "/dev/null", p(&disks)]);
    assert!(
        err.contains("3 of 4 members present") && err.contains("role 2 only 0% rebuilt"),
        "{err}"
    );
    // Status still shows what is there, as failed, and why.
    let s = status(&disks);
    assert_eq!(s["health"], "failed", "{s}");
    assert!(
        s["failed_because"]
            .as_str()
            .is_some_and(|w| w.contains("role 2 only 0% rebuilt")),
        "{s}"
    );
    assert!(ok(&["status", p(&disks)]).contains("Failed : cannot start"));
    std::fs::rename(&away, disks.join("d3")).expect("d3 back");

    let server = Server::unix(dir.path(), &[p(&disks)]);
    server.wait_for_log(0, &["recover done"]);
    let log = server.stderr();
    assert!(log.contains("has members being rebuilt"), "{log}");
    server.stop();
    let s = status(&disks);
    assert_eq!(s["members"][2]["state"], "active", "{s}");
    assert_eq!(s["state"], "clean", "{s}");
    assert_eq!(md_agrees(&disks.join("d2"))["Feature Map"], "0x1");
    let check: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("json");
    assert_eq!(check["mismatched_units"], 0, "{check}");
    std::fs::remove_file(disks.join("d0")).expect("lose d0");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn a_stale_member_comes_back_with_what_was_written_meanwhile() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    filled(dir.path(), &disks, 33);
    // d3 goes away; the array is written without it; it returns stale.
    let away = dir.path().join("d3.away");
    std::fs::rename(disks.join("d3"), &away).expect("take d3 away");
    let newer = dir.path().join("newer.raw");
    std::fs::write(&newer, random_bytes(ARRAY_BYTES, 34)).expect("image");
    ok(&["write", p(&disks), "-i", p(&newer)]);
    std::fs::rename(&away, disks.join("d3")).expect("d3 returns");
    let s = status(&disks);
    assert!(
        s["left_out"][0]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("stale"),
        "{s}"
    );
    ok(&["add", p(&disks), p(&disks.join("d3"))]);
    let s = status(&disks);
    assert_eq!(s["degraded"], false, "{s}");
    assert_eq!(s["left_out"].as_array().map(Vec::len), Some(0), "{s}");
    md_agrees(&disks.join("d3"));
    std::fs::remove_file(disks.join("d0")).expect("lose d0");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&newer));
}

#[test]
fn bad_adds_are_refused_and_change_nothing() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let before: Vec<String> = (0..4)
        .map(|i| sha256_file(&disks.join(format!("d{i}"))))
        .collect();
    let unchanged = |what: &str| {
        for (i, hash) in before.iter().enumerate() {
            assert_eq!(
                &sha256_file(&disks.join(format!("d{i}"))),
                hash,
                "{what}: member d{i} changed"
            );
        }
    };
    let err = fails(&["add", p(&disks), p(&disks.join("d1"))]);
    assert!(err.contains("already an active member"), "{err}");
    unchanged("active member");

    std::fs::remove_file(disks.join("d1")).expect("lose d1");
    let before: Vec<String> = [0, 2, 3]
        .iter()
        .map(|i| sha256_file(&disks.join(format!("d{i}"))))
        .collect();
    let unchanged = |what: &str| {
        for (k, i) in [0, 2, 3].iter().enumerate() {
            assert_eq!(
                sha256_file(&disks.join(format!("d{i}"))),
                before[k],
                "{what}: member d{i} changed"
            );
        }
    };
    let small = dir.path().join("small");
    let err = fails(&["add", "--size", "1M", p(&disks), p(&small)]);
    assert!(err.contains("a member needs at least"), "{err}");
    assert!(!small.exists(), "no file is left behind");
    unchanged("too small");

    let err = fails(&["add", p(&disks), p(&dir.path().join("nowhere"))]);
    assert!(err.contains("does not exist"), "{err}");
    unchanged("missing file");

    let other = dir.path().join("other");
    std::fs::create_dir(&other).expect("other folder");
    ok(&[
        "create",
        "-l",
        "1",
        "--size",
        "16M",
        "--name",
        "other",
        p(&other.join("a")),
        p(&other.join("b")),
    ]);
    let err = fails(&["add", p(&disks), p(&other.join("a"))]);
    assert!(err.contains("already belongs to array 'other'"), "{err}");
    unchanged("member of another array");
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
        "--randseed=7",
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
fn a_rebuild_under_fio_writes_finishes_and_the_array_scrubs_clean() {
    require_tool!("fio");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    filled(dir.path(), &disks, 35);
    std::fs::remove_file(disks.join("d1")).expect("lose d1");
    ok(&[
        "add",
        "--no-rebuild",
        "--size",
        "16M",
        p(&disks),
        p(&disks.join("d1")),
    ]);
    // Paced so that the rebuild (16 MiB per member) outlasts the start of fio.
    let server = Server::unix(
        dir.path(),
        &["--rebuild-min", "2", "--rebuild-max", "4", p(&disks)],
    );
    let uri = server.uri("xraid");
    let before_fio = server.stderr();
    assert!(
        !before_fio.contains("recover done"),
        "the rebuild must still run when fio starts: {before_fio}"
    );
    fio(dir.path(), &uri, false);
    server.wait_for_log(0, &["recover done (0 mismatched units, 0 unrecoverable)"]);
    fio(dir.path(), &uri, true);
    server.stop();
    let s = status(&disks);
    assert_eq!(s["degraded"], false, "{s}");
    assert_eq!(s["state"], "clean", "{s}");
    let check: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("json");
    assert_eq!(check["mismatched_units"], 0, "{check}");
    // The rebuilt member carries its share: without another member, fio's data reads back.
    std::fs::remove_file(disks.join("d3")).expect("lose d3");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    fio(dir.path(), &server.uri("xraid"), true);
    server.stop();
}

#[test]
fn a_hot_spare_takes_the_place_of_a_lost_member() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = dir.path().join("disks");
    std::fs::create_dir(&disks).expect("disks");
    let names = ["d0", "d1", "d2", "d3", "s0"];
    let paths: Vec<std::path::PathBuf> = names.iter().map(|n| disks.join(n)).collect();
    let mut args = vec![
        "create", "-l", "5", "-c", "64K", "--size", "16M", "--spares", "1",
    ];
    args.extend(paths.iter().map(|m| p(m)));
    let out = ok(&args);
    assert!(out.contains("s0: hot spare"), "{out}");
    let image = filled(dir.path(), &disks, 36);
    let s = status(&disks);
    assert_eq!(s["degraded"], false, "{s}");
    assert!(
        s["spares"][0].as_str().is_some_and(|p| p.ends_with("s0")),
        "{s}"
    );
    assert_eq!(md_agrees(&disks.join("s0"))["Device Role"], "spare");

    std::fs::remove_file(disks.join("d1")).expect("lose d1");
    // Read-only use leaves the spare alone.
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
    assert_eq!(status(&disks)["spares"].as_array().map(Vec::len), Some(1));
    // Opened to write, the spare takes the missing role and is rebuilt.
    let server = Server::unix(dir.path(), &[p(&disks)]);
    server.wait_for_log(0, &["recover done"]);
    assert!(server.stderr().contains("spare"), "{}", server.stderr());
    server.stop();
    let s = status(&disks);
    assert_eq!(s["degraded"], false, "{s}");
    assert!(
        s["members"][1]["path"]
            .as_str()
            .unwrap_or("")
            .ends_with("s0"),
        "{s}"
    );
    assert_eq!(
        md_agrees(&disks.join("s0"))["Device Role"],
        "Active device 1"
    );
    std::fs::remove_file(disks.join("d2")).expect("lose d2");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn spares_must_leave_members_for_the_array() {
    let dir = tempdir();
    let m: Vec<std::path::PathBuf> = (0..3).map(|i| dir.path().join(format!("m{i}"))).collect();
    let err = fails(&[
        "create",
        "-l",
        "1",
        "--size",
        "16M",
        "--spares",
        "3",
        p(&m[0]),
        p(&m[1]),
        p(&m[2]),
    ]);
    assert!(err.contains("--spares 3 leaves no member"), "{err}");
    assert!(m.iter().all(|m| !m.exists()), "nothing created");
}

#[test]
fn a_member_added_to_a_whole_array_is_a_spare() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let out = ok(&["add", "--size", "16M", p(&disks), p(&disks.join("s0"))]);
    assert!(out.contains("hot spare"), "{out}");
    let s = status(&disks);
    assert_eq!(s["spares"].as_array().map(Vec::len), Some(1), "{s}");
    assert_eq!(s["degraded"], false, "{s}");
}

/// A spare added from outside the folder that names the array would be left out at
/// the next start, unsaid (an audit found it forgotten after a restart): `add` warns,
/// and says nothing for one inside the folder.
#[test]
fn a_spare_added_from_outside_the_arrays_folder_is_warned_of() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let add = |spare: &Path| {
        let out = crate::util::xraid()
            .args(["add", "--spare", "--size", "16M", p(&disks), p(spare)])
            .output()
            .expect("xraid runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let inside = add(&disks.join("s0"));
    assert!(!inside.contains("warning"), "{inside}");
    let outside = dir.path().join("elsewhere.img");
    let err = add(&outside);
    assert!(
        err.contains("is not in") && err.contains("the next start leaves it out"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // What the warning says: the folder's status does not see it.
    let s = status(&disks);
    assert_eq!(s["spares"].as_array().map(Vec::len), Some(1), "{s}");
}

#[test]
fn fail_then_remove_a_member_and_a_spare_steps_in() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = filled(dir.path(), &disks, 37);
    ok(&["add", "--size", "16M", p(&disks), p(&disks.join("s0"))]);
    let out = ok(&["fail", p(&disks), p(&disks.join("d2"))]);
    assert!(out.contains("marked faulty (role 2)"), "{out}");
    let s = status(&disks);
    assert_eq!(s["degraded"], true, "{s}");
    assert_eq!(s["health"], "degraded", "{s}");
    assert_eq!(s["members"][2]["state"], "missing", "{s}");
    let md = md_agrees(&disks.join("d0"));
    assert_eq!(md["Array State"].split(' ').next(), Some("AA.A"), "{md:?}");

    // Failing a second member of a RAID-5 would lose data: refused, nothing changes.
    let before = sha256_file(&disks.join("d0"));
    let err = fails(&["fail", p(&disks), p(&disks.join("d1"))]);
    assert!(
        err.contains("refused") && err.contains("data lost"),
        "{err}"
    );
    assert_eq!(sha256_file(&disks.join("d0")), before);

    // An active member cannot be removed; the failed one can, for good.
    let err = fails(&["remove", p(&disks), p(&disks.join("d1"))]);
    assert!(err.contains("fail it first"), "{err}");
    ok(&["remove", p(&disks), p(&disks.join("d2"))]);
    let out = Command::new("mdadm")
        .args(["--examine", p(&disks.join("d2"))])
        .output()
        .expect("mdadm runs");
    assert!(!out.status.success(), "no md superblock is left on d2");
    let s = status(&disks);
    assert_eq!(
        s["left_out"].as_array().map(Vec::len),
        Some(0),
        "nothing is left out: {s}"
    );
    assert_eq!(
        s["spares"].as_array().map(Vec::len),
        Some(1),
        "the spare: {s}"
    );
    let err = fails(&["remove", p(&disks), p(&dir.path().join("image.raw"))]);
    assert!(
        err.contains("not an md member") || err.contains("not a member"),
        "{err}"
    );

    // Opened to write, the spare takes role 2.
    let server = Server::unix(dir.path(), &[p(&disks)]);
    server.wait_for_log(0, &["recover done"]);
    server.stop();
    let s = status(&disks);
    assert_eq!(s["degraded"], false, "{s}");
    assert!(
        s["members"][2]["path"]
            .as_str()
            .unwrap_or("")
            .ends_with("s0"),
        "{s}"
    );
    std::fs::remove_file(disks.join("d0")).expect("lose d0");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

#[test]
fn a_rebuild_cut_off_by_a_crash_goes_on_from_its_checkpoint() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = filled(dir.path(), &disks, 38);
    std::fs::remove_file(disks.join("d1")).expect("lose d1");
    ok(&[
        "add",
        "--no-rebuild",
        "--size",
        "16M",
        p(&disks),
        p(&disks.join("d1")),
    ]);
    // 2 MB/s: the 15 MiB member takes about 8 s; checkpoints go out every 2 s.
    let server = Server::unix(
        dir.path(),
        &["--rebuild-min", "2", "--rebuild-max", "2", p(&disks)],
    );
    std::thread::sleep(std::time::Duration::from_millis(4500));
    server.kill();
    let s = status(&disks);
    assert_eq!(s["members"][1]["state"], "rebuilding", "{s}");
    let done = s["members"][1]["rebuilt_percent"].as_u64().unwrap_or(0);
    assert!(done > 0 && done < 100, "a checkpoint was recorded: {s}");

    let server = Server::unix(dir.path(), &[p(&disks)]);
    server.wait_for_log(0, &["recover done (0 mismatched units, 0 unrecoverable)"]);
    let log = server.stderr();
    assert!(
        !log.contains("from unit 0 of"),
        "the recover resumed, not restarted: {log}"
    );
    server.stop();
    let s = status(&disks);
    assert_eq!(s["degraded"], false, "{s}");
    let check: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("json");
    assert_eq!(check["mismatched_units"], 0, "{check}");
    std::fs::remove_file(disks.join("d0")).expect("lose d0");
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

/// A device joining the array — added while the array is not served, or while it is —
/// gets its stripe-log ring wiped: whatever it held (a former member of this same
/// array keeps entries with its tag) must never be found by a replay.
#[test]
fn a_joining_device_gets_its_log_ring_wiped() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    filled(dir.path(), &disks, 33);
    // The ring lies between the metadata and the data (2048 sectors in).
    let data_offset = 2048 * 512;
    let ring_tail = data_offset - (64 << 10)..data_offset;
    let leftovers = |name: &str| {
        let path = disks.join(name);
        std::fs::write(&path, vec![0xab; 16 << 20]).expect("a used device");
        path
    };
    let ring_is_wiped = |path: &Path| {
        let bytes = std::fs::read(path).expect("member");
        bytes[ring_tail.clone()].iter().all(|&b| b == 0)
    };
    std::fs::remove_file(disks.join("d1")).expect("lose d1");
    let d1 = leftovers("d1");
    ok(&["add", "--no-rebuild", p(&disks), p(&d1)]);
    assert!(ring_is_wiped(&d1), "added while not served");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    server.wait_for_log(0, &["recover done"]);
    ok(&["fail", p(&disks), p(&disks.join("d2"))]);
    let n2 = leftovers("n2");
    ok(&["add", "--no-rebuild", p(&disks), p(&n2)]);
    assert!(ring_is_wiped(&n2), "added while served");
    server.stop();
}

/// Sets member `path`'s superblock event count to `events` (as a crash that cut a
/// superblock update off part way leaves it).
fn set_events(path: &Path, events: u64) {
    use std::os::unix::fs::FileExt;
    use xraid_format::{Superblock, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET_BYTES};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open member");
    let mut bytes = vec![0u8; SUPERBLOCK_BYTES];
    file.read_exact_at(&mut bytes, SUPERBLOCK_OFFSET_BYTES)
        .expect("read superblock");
    let mut sb = Superblock::parse(&bytes).expect("md superblock");
    sb.events = events;
    sb.sb_csum = sb.compute_checksum();
    file.write_all_at(&sb.to_bytes(), SUPERBLOCK_OFFSET_BYTES)
        .expect("write superblock");
}

fn events_of(path: &Path) -> u64 {
    fields(&ok(&["examine", p(path)]))["Events"]
        .parse()
        .expect("an event count")
}

/// A power cut in the middle of a superblock update leaves some members one event
/// behind the others. md counts them (its margin of one event); so does xraid — before,
/// it left them out as stale, and a RAID-6 whose update reached one member of five
/// would not start. Two behind, or recorded faulty by the newer update, they stay out.
#[test]
fn a_member_one_event_behind_missed_only_a_cut_off_update_and_counts() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(1 << 20, 41)).expect("image");
    ok(&["write", "-i", p(&image), p(&disks)]);
    let want = sha256_of_read(&[p(&disks)]);
    let members: Vec<_> = (0..4).map(|i| disks.join(format!("d{i}"))).collect();
    let events = events_of(&members[0]);
    // Three of four one behind: the update reached only member 0.
    for m in &members[1..] {
        set_events(m, events - 1);
    }
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("json");
    assert_eq!(status["degraded"], false, "{status}");
    assert_eq!(
        status["left_out"].as_array().map(Vec::len),
        Some(0),
        "{status}"
    );
    assert_eq!(sha256_of_read(&[p(&disks)]), want);
    // Opened to write, every member takes the array's new count.
    ok(&["write", "-i", p(&image), p(&disks)]);
    let now = events_of(&members[0]);
    assert!(
        members.iter().all(|m| events_of(m) == now),
        "one count again"
    );
    // Two behind: stale, left out.
    set_events(&members[1], now - 2);
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("json");
    assert_eq!(status["degraded"], true, "{status}");
    assert!(status["left_out"][0]["reason"]
        .as_str()
        .is_some_and(|r| r.starts_with("stale")));
    // One behind but failed by the update it missed: recorded faulty, left out.
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let d1 = disks.join("d1");
    ok(&["fail", p(&disks), p(&d1)]);
    let events = events_of(&disks.join("d0"));
    set_events(&d1, events - 1);
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("json");
    assert_eq!(status["degraded"], true, "{status}");
    assert_eq!(
        status["left_out"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
}

/// Ctrl-C during an offline `xraid add` keeps what the rebuild has done: the member's
/// superblock records its recovery offset (before, the process died and the next open
/// rebuilt it from the start), the command says so in one line, and the next open to
/// write goes on from there to a member that reads right.
#[test]
fn an_interrupted_offline_rebuild_keeps_its_progress() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempdir();
    let disks = crate::server::create_array(dir.path(), "5", 4, "512M", &["--bitmap", "none"]);
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(8 << 20, 41)).expect("image");
    ok(&["write", p(&disks), "-i", p(&image)]);
    let want = sha256_of_read(&[p(&disks)]);
    ok(&["fail", p(&disks), p(&disks.join("d1"))]);
    ok(&["remove", p(&disks), p(&disks.join("d1"))]);
    let blank = disks.join("n1");
    let mut child = crate::util::xraid()
        .args(["add", "--size", "512M", p(&disks), p(&blank)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xraid add runs");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    assert!(line.contains("added as role 1"), "{line}");
    std::thread::sleep(std::time::Duration::from_millis(150));
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
    // SAFETY: kill takes no pointers; the pid is our own child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let done = child.wait_with_output().expect("xraid add ends");
    let stderr = String::from_utf8_lossy(&done.stderr);
    if done.status.success() {
        // The rebuild beat the signal: nothing to check on this machine.
        eprintln!("skipped: the rebuild finished before the interrupt");
        return;
    }
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let s = crate::members::status(&disks);
    assert_eq!(s["members"][1]["state"], "rebuilding", "{s}");
    let kept = s["members"][1]["rebuilt_percent"].as_u64().unwrap_or(0);
    assert!(kept > 0, "the rebuild's progress is kept: {s}");
    // The next open to write (an offline scrub here) goes on from there.
    ok(&["scrub", "repair", p(&disks)]);
    let s = crate::members::status(&disks);
    assert_eq!(s["members"][1]["state"], "active", "{s}");
    assert_eq!(sha256_of_read(&[p(&disks)]), want);
}

/// One member's path names its whole array for `fail`, `add`, `replace` and
/// `remove`, as their help says: the other members are found beside it (the files of
/// its folder; a folder that also holds another array's members and other files
/// changes nothing). Before, it named an array of that one member, which cannot start.
#[test]
fn one_members_path_names_its_whole_array() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = filled(dir.path(), &disks, 37);
    // Another array's members and a stray file beside them.
    ok(&[
        "create",
        "-l",
        "1",
        "--size",
        "8M",
        p(&disks.join("other0")),
        p(&disks.join("other1")),
    ]);
    std::fs::write(disks.join("notes.txt"), b"not a member").expect("stray file");
    let d0 = disks.join("d0");
    let out = ok(&["fail", p(&d0), p(&disks.join("d2"))]);
    assert!(out.contains("marked faulty (role 2)"), "{out}");
    let out = ok(&["remove", p(&d0), p(&disks.join("d2"))]);
    assert!(out.contains("removed from the array"), "{out}");
    let out = ok(&["add", p(&d0), p(&disks.join("d2"))]);
    assert!(out.contains("added as role 2"), "{out}");
    let new = dir.path().join("n3");
    let out = ok(&[
        "replace",
        "--size",
        "16M",
        p(&d0),
        p(&disks.join("d3")),
        p(&new),
    ]);
    assert!(out.contains("holds role 3 now"), "{out}");
    let paths = [disks.join("d0"), disks.join("d1"), disks.join("d2"), new];
    let members = paths.each_ref().map(|m| p(m));
    let s: serde_json::Value = serde_json::from_str(&ok(&[
        "status", "--json", members[0], members[1], members[2], members[3],
    ]))
    .expect("status json");
    assert_eq!(s["degraded"], false, "{s}");
    assert_eq!(sha256_of_read(&members), sha256_file(&image));
    // The other array was left alone.
    let other: serde_json::Value = serde_json::from_str(&ok(&[
        "status",
        "--json",
        p(&disks.join("other0")),
        p(&disks.join("other1")),
    ]))
    .expect("status json");
    assert_eq!(other["level"], "raid1", "{other}");
    assert_eq!(other["degraded"], false, "{other}");
}

/// A member added once and still being rebuilt is not "already an active member": it
/// is said to be rebuilt, how far, and what carries it on — offline and served.
#[test]
fn adding_a_member_still_being_rebuilt_says_so() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    std::fs::remove_file(disks.join("d1")).expect("lose d1");
    let d1 = disks.join("d1");
    ok(&["add", "--no-rebuild", "--size", "16M", p(&disks), p(&d1)]);
    let err = fails(&["add", p(&disks), p(&d1)]);
    assert!(
        err.contains("is already a member of array 'xraid', being rebuilt into role 1 (0% done)"),
        "{err}"
    );
    assert!(err.contains("the next open to write"), "{err}");
    // Served, at a pace that keeps the rebuild going while the add is asked.
    let server = Server::unix(
        dir.path(),
        &["--rebuild-min", "1", "--rebuild-max", "1", p(&disks)],
    );
    server.wait_for_log(0, &["recover"]);
    let err = fails(&["add", p(&disks), p(&d1)]);
    assert!(err.contains("being rebuilt into role 1"), "{err}");
    assert!(
        err.contains("the server rebuilds it in the background"),
        "{err}"
    );
    server.stop();
}

/// An offline scrub of an array with a member left part way through its rebuild runs
/// that rebuild first (as md's sync_action waits for recovery): it says so.
#[test]
fn a_scrub_says_the_rebuild_left_pending_runs_first() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    std::fs::remove_file(disks.join("d1")).expect("lose d1");
    let d1 = disks.join("d1");
    ok(&["add", "--no-rebuild", "--size", "16M", p(&disks), p(&d1)]);
    let out = crate::util::xraid()
        .args(["scrub", "check", p(&disks)])
        .output()
        .expect("xraid runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "the rebuild of role 1 left part way (0% done) runs first; the check follows it"
        ),
        "{err}"
    );
    let s: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("json");
    assert_eq!(s["degraded"], false, "{s}");
}
