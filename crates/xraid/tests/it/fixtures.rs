//! Real arrays made by Linux md assemble and read back bit-exact: whole, with members
//! left out within the level's redundancy, and with a stale member returning.

use std::path::PathBuf;

use crate::require_tool;
use crate::util::{fixtures_dir, manifest, ok, p, sha256_of_read, tempdir, unpack_fixture};

const FIXTURES: [&str; 5] = [
    "raid0-3d-32k",
    "raid1-2d",
    "raid10-n2-4d-64k",
    "raid5-ls-4d-64k",
    "raid6-5d-64k",
];

fn fixtures_present() -> bool {
    let present = fixtures_dir().is_dir();
    if !present {
        eprintln!(
            "skipped: fixtures not found at {}",
            fixtures_dir().display()
        );
    }
    present
}

fn read_hash(paths: &[PathBuf]) -> String {
    let args: Vec<&str> = paths.iter().map(|x| p(x)).collect();
    sha256_of_read(&args)
}

#[test]
fn every_fixture_assembles_with_the_manifest_hash() {
    require_tool!("xz");
    if !fixtures_present() {
        return;
    }
    for name in FIXTURES {
        let dir = tempdir();
        unpack_fixture(name, dir.path());
        let want = manifest(name)["sha256"].as_str().expect("sha").to_owned();
        assert_eq!(
            sha256_of_read(&[p(dir.path())]),
            want,
            "{name} via its folder"
        );
        let status = ok(&["status", "--json", p(dir.path())]);
        let json: serde_json::Value = serde_json::from_str(&status).expect("json");
        let m = manifest(name);
        assert_eq!(json["array_size_bytes"], m["array_size_bytes"], "{name}");
        assert_eq!(json["raid_disks"], m["raid_devices"], "{name}");
        assert_eq!(json["degraded"], false, "{name}");
    }
}

#[test]
fn fixtures_read_right_with_members_left_out() {
    require_tool!("xz");
    if !fixtures_present() {
        return;
    }
    for (name, tolerated) in [
        ("raid1-2d", 1),
        ("raid10-n2-4d-64k", 1),
        ("raid5-ls-4d-64k", 1),
        ("raid6-5d-64k", 2),
    ] {
        let dir = tempdir();
        let members = unpack_fixture(name, dir.path());
        let want = manifest(name)["sha256"].as_str().expect("sha").to_owned();
        let n = members.len();
        for a in 0..n {
            let without: Vec<PathBuf> = members
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != a)
                .map(|(_, m)| m.clone())
                .collect();
            assert_eq!(read_hash(&without), want, "{name} without member {a}");
            if tolerated == 2 {
                for b in a + 1..n {
                    let without: Vec<PathBuf> = members
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != a && *i != b)
                        .map(|(_, m)| m.clone())
                        .collect();
                    assert_eq!(read_hash(&without), want, "{name} without {a} and {b}");
                }
            }
        }
    }
}

#[test]
fn a_member_behind_on_events_is_stale_and_left_out() {
    require_tool!("xz");
    if !fixtures_present() {
        return;
    }
    let name = "raid5-ls-4d-64k";
    let dir = tempdir();
    let members = unpack_fixture(name, dir.path());
    // Write while member 1 is absent: the others move on, member 1 falls behind.
    let new_data = dir.path().join("new.bin");
    let bytes: Vec<u8> = (0..3 * 65536u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&new_data, &bytes).expect("write input");
    let degraded = [p(&members[0]), p(&members[2]), p(&members[3])];
    let mut args = vec!["write", "--offset", "64K", "-i", p(&new_data)];
    args.extend_from_slice(&degraded);
    ok(&args);
    let after_write = read_hash(&[members[0].clone(), members[2].clone(), members[3].clone()]);
    // Member 1 returns: xraid sees it is stale and leaves it out; data still right.
    let status = ok(&["status", "--json", p(dir.path())]);
    let json: serde_json::Value = serde_json::from_str(&status).expect("json");
    assert_eq!(json["degraded"], true, "{status}");
    let left_out = json["left_out"].as_array().expect("left_out");
    assert_eq!(left_out.len(), 1, "{status}");
    assert!(
        left_out[0]["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("stale"),
        "{status}"
    );
    assert!(left_out[0]["path"]
        .as_str()
        .unwrap_or("")
        .ends_with("member1.img"));
    assert_eq!(sha256_of_read(&[p(dir.path())]), after_write);
    // And the written bytes are where they were written.
    let out = dir.path().join("part.bin");
    ok(&[
        "read",
        "--offset",
        "64K",
        "--length",
        "192K",
        "-o",
        p(&out),
        p(dir.path()),
    ]);
    assert_eq!(std::fs::read(&out).expect("read part"), bytes);
}
