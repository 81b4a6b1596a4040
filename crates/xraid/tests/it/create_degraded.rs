//! `create` with roles left `missing` (a degraded array from the start, as mdadm
//! makes one) and with `--assume-clean` (no initial sync: new disks, or an array
//! made again over its own members after its superblocks were lost).

use std::path::{Path, PathBuf};

use crate::util::{fails, ok, p, random_bytes, scrub, tempdir};

const MIB: usize = 1 << 20;

/// Paths `name0..nameN` in `dir`.
fn paths(dir: &Path, name: &str, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| dir.join(format!("{name}{i}"))).collect()
}

/// Members of `bytes` random bytes each (old contents a create must not lose).
fn random_members(dir: &Path, n: usize, bytes: usize, seed: u64) -> Vec<PathBuf> {
    let members = paths(dir, "m", n);
    for (i, m) in members.iter().enumerate() {
        std::fs::write(m, random_bytes(bytes, seed + i as u64)).expect("member");
    }
    members
}

fn status_json(array: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&["status", "--json", p(array)])).expect("status JSON")
}

/// Writes `data` through `xraid write` at 0.
fn write_array(array: &Path, data: &[u8]) {
    let input = tempfile::NamedTempFile::new().expect("input");
    std::fs::write(input.path(), data).expect("input");
    ok(&["write", "-i", p(input.path()), p(array)]);
}

/// The array's first `len` bytes, through `xraid read`.
fn read_array(array: &Path, len: usize) -> Vec<u8> {
    let out = tempfile::NamedTempFile::new().expect("output");
    ok(&["read", "-o", p(out.path()), p(array)]);
    let mut bytes = std::fs::read(out.path()).expect("output");
    bytes.truncate(len);
    bytes
}

/// A RAID-5 with one role `missing` is degraded from the start, as mdadm's is:
/// md's tools see the role empty, data written meanwhile is kept, and `add` fills the
/// role; the array then scrubs clean and reads back what was written.
#[test]
fn a_role_left_missing_makes_a_degraded_array_that_add_completes() {
    let dir = tempdir();
    let names = ["d0", "d1", "missing", "d3"];
    let out = xraid_create(
        dir.path(),
        &["-l", "5", "-c", "64K", "--size", "16M"],
        &names,
    );
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("degraded") && stderr.contains("role 2"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("missing").exists(),
        "`missing` is a word, not a file to make"
    );
    let status = status_json(dir.path());
    assert_eq!(status["members"][2]["state"], "missing", "{status}");
    assert!(
        status["health"]
            .as_str()
            .is_some_and(|h| h.contains("degraded")),
        "{status}"
    );
    if crate::util::has_tool("mdadm") {
        let examine = std::process::Command::new("mdadm")
            .args(["--examine", p(&dir.path().join("d0"))])
            .output()
            .expect("mdadm runs");
        let text = String::from_utf8_lossy(&examine.stdout);
        assert!(text.contains("Array State : AA.A"), "{text}");
    }
    let data = random_bytes(8 * MIB, 41);
    write_array(dir.path(), &data);
    assert!(
        read_array(dir.path(), data.len()) == data,
        "read back degraded"
    );
    let new = dir.path().join("d2");
    ok(&["add", "--size", "16M", p(dir.path()), p(&new)]);
    let status = status_json(dir.path());
    assert_eq!(status["members"][2]["state"], "active", "{status}");
    assert_eq!(scrub("check", dir.path())["mismatched_units"], 0);
    assert!(
        read_array(dir.path(), data.len()) == data,
        "read back whole"
    );
}

/// A RAID-6 missing one role over members that hold old data still has redundancy
/// to make agree: the initial sync runs degraded and writes only the parity that
/// disagrees. Once the role is filled the array scrubs clean, and the data chunks
/// kept their bytes throughout.
#[test]
fn a_raid6_missing_one_role_over_old_data_is_synced_degraded() {
    const MEMBER: usize = 8 * MIB;
    let dir = tempdir();
    let members = random_members(dir.path(), 4, MEMBER, 900);
    let mut names: Vec<&str> = members.iter().map(|m| p(m)).collect();
    std::fs::remove_file(&members[1]).expect("rm");
    names[1] = "missing";
    let whole = [&["create", "-l", "6", "-c", "64K"][..], &names].concat();
    let out = ok(&whole);
    assert!(out.contains("parity initialised"), "{out}");
    let fill = dir.path().join("m1");
    ok(&["add", "--size", "8M", p(&members[0]), p(&fill)]);
    assert_eq!(scrub("check", dir.path())["mismatched_units"], 0);
}

/// Missing roles that take the array's data with them are refused, and so is
/// `missing` among the spares; nothing is made or written.
#[test]
fn missing_roles_beyond_the_levels_redundancy_are_refused_and_change_nothing() {
    let dir = tempdir();
    let old = random_members(dir.path(), 1, 4 * MIB, 77);
    let before = std::fs::read(&old[0]).expect("member");
    let d = |n: &str| p(&dir.path().join(n)).to_owned();
    let cases: [(&[&str], Vec<String>, &str); 5] = [
        (
            &["-l", "5"],
            vec![
                d("a"),
                "missing".into(),
                "missing".into(),
                p(&old[0]).into(),
            ],
            "without its data",
        ),
        (
            &["-l", "0"],
            vec![d("a"), "missing".into()],
            "without its data",
        ),
        (
            &["-l", "1"],
            vec!["missing".into(), "missing".into()],
            "without its data",
        ),
        (
            // Roles 0 and 1 hold the same chunks in a near-2 RAID-10.
            &["-l", "10"],
            vec!["missing".into(), "missing".into(), d("c"), d("e")],
            "without its data",
        ),
        (
            &["-l", "5", "--spares", "1"],
            vec![d("a"), d("b"), d("c"), "missing".into()],
            "spares",
        ),
    ];
    for (opts, members, says) in cases {
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        let args = [&["create", "--size", "4M"][..], opts, &members].concat();
        let err = fails(&args);
        assert!(err.contains(says), "{args:?}: {err}");
        for name in ["a", "b", "c", "e"] {
            assert!(!dir.path().join(name).exists(), "{args:?} made {name}");
        }
        assert!(
            std::fs::read(&old[0]).expect("member") == before,
            "{args:?} wrote to an existing member"
        );
    }
    // Two roles of different copy sets in the same RAID-10 leave a copy of each.
    let members = [d("a"), "missing".into(), "missing".into(), d("e")];
    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    ok(&[&["create", "--size", "4M", "-l", "10"][..], &members].concat());
}

/// mdadm's way back from lost superblocks: the array made again over its own
/// members, with the same shape, `--assume-clean`. Nothing but metadata is written,
/// the data reads back as it was, and the array scrubs clean.
#[test]
fn assume_clean_makes_an_array_again_over_its_members_without_touching_their_data() {
    const DATA_OFFSET: usize = MIB;
    let dir = tempdir();
    let members = paths(dir.path(), "m", 4);
    let names: Vec<&str> = members.iter().map(|m| p(m)).collect();
    let shape = ["create", "-l", "5", "-c", "64K", "-N", "again"];
    ok(&[&shape[..], &["--size", "16M"], &names].concat());
    let data = random_bytes(20 * MIB, 7);
    write_array(dir.path(), &data);
    let held: Vec<Vec<u8>> = members
        .iter()
        .map(|m| std::fs::read(m).expect("member")[DATA_OFFSET..].to_vec())
        .collect();
    // The superblocks are lost (zeroed where md keeps them).
    for m in &members {
        let mut bytes = std::fs::read(m).expect("member");
        bytes[4096..8192].fill(0);
        std::fs::write(m, bytes).expect("member");
    }
    let out = ok(&[&shape[..], &["--assume-clean"], &names].concat());
    assert!(out.contains("--assume-clean"), "{out}");
    assert!(!out.contains("parity initialised"), "{out}");
    for (m, held) in members.iter().zip(&held) {
        let now = std::fs::read(m).expect("member");
        // The bitmap and log areas before the data are the new array's.
        assert!(
            now[DATA_OFFSET..] == held[..],
            "{}: data area changed",
            m.display()
        );
    }
    assert!(read_array(dir.path(), data.len()) == data);
    assert_eq!(scrub("check", dir.path())["mismatched_units"], 0);
    // Checksums of old contents cannot be assumed.
    let err = fails(
        &[
            &shape[..],
            &["--force", "--assume-clean", "--integrity"],
            &names,
        ]
        .concat(),
    );
    assert!(err.contains("--assume-clean"), "{err}");
    assert!(
        read_array(dir.path(), data.len()) == data,
        "the refusal changed nothing"
    );
}

/// A two-way mirror made with one side missing (`Missing`: the word in any case, as
/// mdadm takes it), as when moving data onto a new mirror: made on the new disk,
/// filled, then the old disk added.
#[test]
fn a_mirror_made_with_one_side_missing_is_completed_by_add() {
    let dir = tempdir();
    let out = xraid_create(
        dir.path(),
        &["-l", "1", "--size", "8M"],
        &["Missing", "new"],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(!dir.path().join("Missing").exists(), "a word, not a file");
    let data = random_bytes(4 * MIB, 3);
    write_array(dir.path(), &data);
    let old = dir.path().join("old");
    std::fs::write(&old, random_bytes(8 * MIB, 4)).expect("old disk");
    ok(&["add", p(dir.path()), p(&old)]);
    assert_eq!(scrub("check", dir.path())["mismatched_units"], 0);
    assert!(read_array(dir.path(), data.len()) == data);
}

/// `xraid create` run in `dir` (so that `missing` and bare names are as a user
/// types them), its whole output.
fn xraid_create(dir: &Path, opts: &[&str], members: &[&str]) -> std::process::Output {
    crate::util::xraid()
        .current_dir(dir)
        .arg("create")
        .args(opts)
        .args(members)
        .output()
        .expect("xraid runs")
}

/// Hot spares named at create, with a role left missing or not, each get an entry of
/// the role table of their own (their superblocks' dev_number): md takes two devices
/// with one dev_number for the same device, and binds only the first.
#[test]
fn spares_named_at_create_get_role_table_entries_of_their_own() {
    use std::os::unix::fs::FileExt;
    let dev_number = |member: &Path| {
        let mut bytes = vec![0u8; xraid_format::SUPERBLOCK_BYTES];
        std::fs::File::open(member)
            .expect("member")
            .read_exact_at(&mut bytes, xraid_format::SUPERBLOCK_OFFSET_BYTES)
            .expect("superblock");
        xraid_format::Superblock::parse(&bytes)
            .expect("md superblock")
            .dev_number
    };
    for names in [
        &["d0", "missing", "d2", "s0", "s1"][..],
        &["d0", "d1", "d2", "s0", "s1"][..],
    ] {
        let dir = tempdir();
        let out = xraid_create(
            dir.path(),
            &["-l", "5", "-c", "64K", "--size", "8M", "--spares", "2"],
            names,
        );
        assert!(out.status.success(), "{out:?}");
        let mut numbers: Vec<u32> = names
            .iter()
            .filter(|&&n| n != "missing")
            .map(|n| dev_number(&dir.path().join(n)))
            .collect();
        let all = numbers.clone();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), all.len(), "{names:?}: dev numbers {all:?}");
        let status = status_json(dir.path());
        assert_eq!(
            status["spares"].as_array().map(Vec::len),
            Some(2),
            "{status}"
        );
    }
}

/// A hot spare that cannot be one refuses the whole create, before anything is made
/// or written: a spare named twice, one in a folder that does not exist, one holding
/// a partition table. Before, the array was made first and the spare refused after,
/// with a failed exit and an array the user had not asked for (a second try then
/// met "already a member").
#[test]
fn a_spare_that_cannot_be_one_refuses_the_create_and_nothing_is_made() {
    let dir = tempdir();
    let d = |n: &str| p(&dir.path().join(n)).to_owned();
    let table = dir.path().join("table");
    let mut mbr = vec![0u8; 16 * MIB];
    mbr[446 + 4] = 0x83;
    mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&4096u32.to_le_bytes());
    mbr[510..512].copy_from_slice(&[0x55, 0xaa]);
    std::fs::write(&table, &mbr).expect("a disk with a partition table");
    let cases: [(Vec<String>, &str); 3] = [
        (vec![d("a"), d("b"), d("a")], "the same file"),
        (vec![d("a"), d("b"), d("nowhere/s")], "nowhere"),
        (
            vec![d("a"), d("b"), p(&table).to_owned()],
            "partition table",
        ),
    ];
    for (members, says) in cases {
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        let args = [
            &["create", "-l", "1", "--size", "16M", "--spares", "1"][..],
            &members,
        ]
        .concat();
        let err = fails(&args);
        assert!(err.contains(says), "{args:?}: {err}");
        for name in ["a", "b"] {
            assert!(!dir.path().join(name).exists(), "{args:?} made {name}");
        }
        assert!(
            std::fs::read(&table).expect("table") == mbr,
            "{args:?} wrote"
        );
    }
}

/// A copy of a present member (`dd`, ddrescue) holds its identity: `add` refuses it,
/// naming the member it copies, as md cannot hold two devices with one identity, and
/// writes nothing. Before, it was told it was "already an active member".
#[test]
fn a_copy_of_a_present_member_is_refused_by_add_naming_the_member() {
    let (dir, elsewhere) = (tempdir(), tempdir());
    // The copy outside the array's folder, where its siblings are found.
    let (member, copy) = (dir.path().join("a"), elsewhere.path().join("copy"));
    let out = xraid_create(dir.path(), &["-l", "1", "--size", "8M"], &["a", "missing"]);
    assert!(out.status.success(), "{out:?}");
    std::fs::copy(&member, &copy).expect("copy");
    let before = std::fs::read(&copy).expect("copy");
    let err = fails(&["add", p(&member), p(&copy)]);
    assert!(
        err.contains("holds the superblock of") && err.contains(p(&member)),
        "{err}"
    );
    assert!(
        std::fs::read(&copy).expect("copy") == before,
        "nothing written"
    );
}
