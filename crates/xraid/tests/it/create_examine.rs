//! For arrays xraid creates, at every level and layout, `mdadm --examine` on each
//! member agrees with `xraid examine`.

use std::collections::BTreeMap;
use std::process::Command;

use crate::require_tool;
use crate::util::{ok, p, random_bytes, tempdir};

/// Fields both tools must agree on.
const FIELDS: [&str; 14] = [
    "Magic",
    "Version",
    "Feature Map",
    "Array UUID",
    "Name",
    "Raid Level",
    "Raid Devices",
    "Avail Dev Size",
    "Array Size",
    "Data Offset",
    "Super Offset",
    "State",
    "Device UUID",
    "Events",
];
const MORE_FIELDS: [&str; 4] = ["Layout", "Chunk Size", "Device Role", "Array State"];

fn fields(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(" : "))
        .map(|(k, v)| {
            let v = v.trim();
            // mdadm adds "(local to host ...)" when the name's host matches this host.
            let v = v.split("  (local to host").next().unwrap_or(v);
            (k.trim().to_owned(), v.to_owned())
        })
        .collect()
}

#[test]
fn mdadm_examine_agrees_with_xraid_examine_at_every_level_and_layout() {
    require_tool!("mdadm");
    let cases: Vec<(&str, Option<&str>, usize)> = vec![
        ("raid0", None, 3),
        ("raid1", None, 2),
        ("raid4", None, 4),
        ("raid5", Some("left-asymmetric"), 4),
        ("raid5", Some("right-asymmetric"), 4),
        ("raid5", Some("left-symmetric"), 4),
        ("raid5", Some("right-symmetric"), 4),
        ("raid5", Some("parity-first"), 4),
        ("raid5", Some("parity-last"), 4),
        ("raid6", Some("left-symmetric"), 5),
        ("raid6", Some("right-asymmetric"), 5),
        ("raid6", Some("parity-first"), 5),
        ("raid10", Some("n2"), 4),
        ("raid10", Some("f2"), 4),
        ("raid10", Some("o2"), 4),
    ];
    for (level, layout, n) in cases {
        let dir = tempdir();
        let members: Vec<_> = (0..n)
            .map(|i| dir.path().join(format!("d{i}.img")))
            .collect();
        let mut args = vec![
            "create", "-l", level, "-c", "64K", "--size", "8M", "-N", "exam",
        ];
        if let Some(layout) = layout {
            args.extend_from_slice(&["--layout", layout]);
        }
        args.extend(members.iter().map(|m| p(m)));
        ok(&args);
        for (role, member) in members.iter().enumerate() {
            let ours = fields(&ok(&["examine", p(member)]));
            let out = Command::new("mdadm")
                .args(["--examine", p(member)])
                .output()
                .expect("mdadm runs");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "mdadm --examine failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let theirs = fields(&text);
            let what = format!("{level} {layout:?} member {role}");
            assert!(
                theirs
                    .get("Checksum")
                    .is_some_and(|c| c.ends_with("correct")),
                "{what}: mdadm finds the checksum wrong:\n{text}"
            );
            assert_eq!(
                theirs.get("Raid Level").map(String::as_str),
                Some(level),
                "{what}"
            );
            assert_eq!(
                theirs.get("Device Role").map(String::as_str),
                Some(format!("Active device {role}").as_str()),
                "{what}"
            );
            for key in FIELDS.iter().chain(MORE_FIELDS.iter()) {
                assert_eq!(
                    ours.get(*key),
                    theirs.get(*key),
                    "{what}: field '{key}'\nmdadm:\n{text}"
                );
            }
        }
    }
}

/// `create` over members that hold data makes parity from it as md's initial resync
/// does — with `--sync-now` before it returns, else in a resync the next open to
/// write runs (here the scrub's): a check finds nothing to repair, and every data
/// chunk keeps its bytes — only parity chunks are written. Over members that hold
/// zeros nothing but the metadata is written: they stay sparse. (Before 2026-11-28
/// create rewrote the whole array: every byte of every member, a full write of each
/// disk.)
#[test]
fn create_over_existing_members_writes_only_parity() {
    const MEMBER: usize = 8 << 20;
    const CHUNK: usize = 64 << 10;
    const DATA_OFFSET: usize = 2048 * 512;
    let dir = tempdir();
    for (round, (flags, said)) in [
        (&["--sync-now"][..], "parity initialised"),
        (&[][..], "in the background"),
    ]
    .into_iter()
    .enumerate()
    {
        let members: Vec<std::path::PathBuf> = (0..4)
            .map(|i| dir.path().join(format!("r{round}m{i}")))
            .collect();
        let before: Vec<Vec<u8>> = members
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let bytes = random_bytes(MEMBER, 700 + 10 * round as u64 + i as u64);
                std::fs::write(m, &bytes).expect("member");
                bytes
            })
            .collect();
        let names: Vec<&str> = members.iter().map(|m| p(m)).collect();
        let out = ok(&[&["create", "-l", "5", "-c", "64K"][..], flags, &names].concat());
        assert!(out.contains(said), "{out}");
        let check: serde_json::Value =
            serde_json::from_str(&ok(&[&["scrub", "check", "--json"][..], &names].concat()))
                .expect("scrub JSON");
        assert_eq!(check["mismatched_units"], 0, "{flags:?}: {check}");
        let stripes = (MEMBER - DATA_OFFSET) / CHUNK;
        for (m, path) in members.iter().enumerate() {
            let after = std::fs::read(path).expect("member");
            for s in 0..stripes {
                // left-symmetric: stripe s keeps its parity on member 3 - s % 4.
                if m == 3 - s % 4 {
                    continue;
                }
                let at = DATA_OFFSET + s * CHUNK;
                assert!(
                    after[at..at + CHUNK] == before[m][at..at + CHUNK],
                    "{flags:?}: member {m}, stripe {s}: a data chunk was changed"
                );
            }
        }
    }

    let zeros: Vec<std::path::PathBuf> = (0..4).map(|i| dir.path().join(format!("z{i}"))).collect();
    for z in &zeros {
        std::fs::File::create(z)
            .and_then(|f| f.set_len(64 << 20))
            .expect("sparse member");
    }
    let names: Vec<&str> = zeros.iter().map(|m| p(m)).collect();
    ok(&[&["create", "-l", "6", "-c", "64K"][..], &names].concat());
    for z in &zeros {
        use std::os::unix::fs::MetadataExt;
        let allocated = std::fs::metadata(z).expect("member").blocks() * 512;
        assert!(
            allocated < 1 << 20,
            "{}: {allocated} bytes allocated: more than the metadata was written",
            z.display()
        );
    }
}
