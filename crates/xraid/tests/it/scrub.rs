//! `xraid scrub check|repair` on real md-made arrays: md's own parity and mirrors check
//! clean, a flipped parity byte is counted by check, left alone by check, rewritten by
//! repair, and the array's contents never change.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};

use crate::require_tool;
use crate::util::{
    fails, fixtures_dir, manifest, ok, p, scrub, sha256_of_read, tempdir, unpack_fixture,
};

#[test]
fn md_arrays_scrub_clean() {
    require_tool!("xz");
    if !fixtures_dir().is_dir() {
        eprintln!("skipped: fixtures not found");
        return;
    }
    for name in [
        "raid1-2d",
        "raid10-n2-4d-64k",
        "raid5-ls-4d-64k",
        "raid6-5d-64k",
    ] {
        let dir = tempdir();
        unpack_fixture(name, dir.path());
        let report = scrub("check", p(dir.path()));
        assert_eq!(report["completed"], true, "{name}: {report}");
        assert_eq!(report["mismatched_units"], 0, "{name}: {report}");
        assert!(
            report["units"].as_u64().unwrap_or(0) > 0,
            "{name}: {report}"
        );
        let want = manifest(name)["sha256"].as_str().expect("sha").to_owned();
        assert_eq!(sha256_of_read(&[p(dir.path())]), want, "{name}");
    }
}

#[test]
fn check_counts_a_flipped_parity_byte_and_repair_rewrites_it() {
    require_tool!("xz");
    if !fixtures_dir().is_dir() {
        eprintln!("skipped: fixtures not found");
        return;
    }
    let name = "raid5-ls-4d-64k";
    let dir = tempdir();
    let members = unpack_fixture(name, dir.path());
    let want = manifest(name)["sha256"].as_str().expect("sha").to_owned();
    // Left-symmetric on 4 members keeps stripe 0's parity on the last member; its data
    // area starts at 1 MiB (data offset 2048 sectors).
    let parity_member = &members[3];
    let at = 1024 * 1024 + 1000;
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(parity_member)
        .expect("open member");
    let mut byte = [0u8; 1];
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.read_exact(&mut byte).expect("read");
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(&[byte[0] ^ 0x10]).expect("flip");
    drop(f);

    let dir_arg = p(dir.path());
    assert_eq!(scrub("check", dir_arg)["mismatched_units"], 1);
    assert_eq!(
        scrub("check", dir_arg)["mismatched_units"],
        1,
        "check changes nothing"
    );
    assert_eq!(sha256_of_read(&[dir_arg]), want, "parity is not data");
    let text = ok(&["scrub", "repair", dir_arg]);
    assert!(
        text.contains("1 of") && text.contains("rewritten"),
        "repair says what it did: {text}"
    );
    assert_eq!(scrub("check", dir_arg)["mismatched_units"], 0, "repaired");
    assert_eq!(sha256_of_read(&[dir_arg]), want);
    // md reads the repaired array the same way: the member's superblock is clean.
    let status = ok(&["status", "--json", dir_arg]);
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    assert_eq!(status["state"], "clean", "{status}");
}

#[test]
fn raid0_has_nothing_to_scrub() {
    require_tool!("xz");
    if !fixtures_dir().is_dir() {
        eprintln!("skipped: fixtures not found");
        return;
    }
    let dir = tempdir();
    unpack_fixture("raid0-3d-32k", dir.path());
    let err = fails(&["scrub", "check", p(dir.path())]);
    assert!(
        err.contains("RAID-0 has no redundancy to check"),
        "one clear line: {err}"
    );
    let want = manifest("raid0-3d-32k")["sha256"]
        .as_str()
        .expect("sha")
        .to_owned();
    assert_eq!(sha256_of_read(&[p(dir.path())]), want, "nothing changed");
    let status = ok(&["status", "--json", p(dir.path())]);
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    assert_eq!(
        status["state"], "clean",
        "not even the superblocks: {status}"
    );
}

/// A scrub needs something to check against: refused on a RAID-5 missing a member
/// (before, it "found 0 mismatched units" of a check it could not make), run on a
/// RAID-10 missing one (the other pair still has both copies).
#[test]
fn a_scrub_without_redundancy_left_is_refused_and_says_why() {
    let dir = tempdir();
    let r5 = crate::server::create_array(dir.path(), "5", 3, "8M", &[]);
    ok(&["fail", p(&r5), p(&r5.join("d1"))]);
    let err = fails(&["scrub", "check", p(&r5)]);
    assert!(err.contains("no redundancy left to check against"), "{err}");
    let err = fails(&["scrub", "repair", p(&r5)]);
    assert!(
        err.contains("no redundancy left to repair against"),
        "{err}"
    );

    let dir = tempdir();
    let r10 = crate::server::create_array(dir.path(), "10", 4, "8M", &[]);
    ok(&["fail", p(&r10), p(&r10.join("d1"))]);
    let check = scrub("check", p(&r10));
    assert_eq!(check["completed"], true, "{check}");
    assert_eq!(check["mismatched_units"], 0, "{check}");
}
