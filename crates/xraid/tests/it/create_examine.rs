//! For arrays xraid creates, at every level and layout, `mdadm --examine` on each
//! member agrees with `xraid examine`.

use std::collections::BTreeMap;
use std::process::Command;

use crate::require_tool;
use crate::util::{ok, p, tempdir};

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
