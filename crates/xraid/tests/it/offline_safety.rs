//! Offline commands that must refuse rather than lose data: members whose superblocks
//! disagree on the array's shape, members of md arrays in a metadata version xraid
//! does not use, and `xraid read -o` aimed at a member.

use std::os::unix::fs::FileExt;
use std::path::Path;

use xraid_format::Superblock;

use crate::server::raid5;
use crate::util::{fails, hashes, ok, p, random_bytes, tempdir};

/// Rewrites the 1.2 superblock of `member` through `change`, with a right checksum.
fn patch_superblock(member: &Path, change: impl FnOnce(&mut Superblock)) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(member)
        .expect("member");
    let mut buf = vec![0u8; 4096];
    file.read_exact_at(&mut buf, 4096).expect("superblock");
    let mut sb = Superblock::parse(&buf).expect("a 1.2 superblock");
    change(&mut sb);
    file.write_all_at(&sb.to_bytes(), 4096).expect("patched");
}

/// A change to one member's superblock.
type Patch = fn(&mut Superblock);

/// md refuses a set whose superblocks disagree on level, layout, chunk, size or
/// member count (mdadm's compare_super). Before, xraid took the shape of whichever
/// member came first or last, read different data by the order the members were
/// named, and `xraid write` wrote parity for the wrong shape.
#[test]
fn members_that_disagree_on_the_shape_are_refused_in_any_order() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let image = dir.path().join("image.raw");
    std::fs::write(&image, random_bytes(1 << 20, 51)).expect("image");
    ok(&["write", p(&disks), "-i", p(&image)]);
    let members: Vec<_> = (0..4).map(|i| disks.join(format!("d{i}"))).collect();
    let cases: [(&str, Patch); 3] = [
        ("chunk size", |sb| sb.chunksize *= 2),
        ("level", |sb| sb.level = 6),
        ("member count", |sb| sb.raid_disks += 1),
    ];
    for (field, change) in cases {
        let before = std::fs::read(&members[3]).expect("member 3");
        patch_superblock(&members[3], change);
        let untouched = hashes(&members);
        let forward: Vec<&str> = members.iter().map(|m| p(m)).collect();
        let backward: Vec<&str> = forward.iter().rev().copied().collect();
        for order in [&forward, &backward] {
            let mut args = vec!["read", "--length", "4K"];
            args.extend_from_slice(order);
            let err = fails(&args);
            assert!(err.contains(&format!("disagree on its {field}")), "{err}");
            let mut args = vec!["write", "-i", p(&image)];
            args.extend_from_slice(order);
            fails(&args);
        }
        assert!(fails(&["status", p(&disks)]).contains("disagree"));
        assert_eq!(hashes(&members), untouched, "{field}: nothing written");
        std::fs::write(&members[3], before).expect("member 3 back");
    }
}

/// Writes an md magic number where md's metadata `version` keeps its superblock.
fn plant_md_magic(file: &Path, version: &str) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .expect("file");
    let size = f.metadata().expect("size").len();
    let at = match version {
        "1.1" => 0,
        "1.0" => ((size / 512 - 16) & !7) * 512,
        _ => ((size >> 16) - 1) << 16,
    };
    f.write_all_at(&0xa92b_4efc_u32.to_le_bytes(), at)
        .expect("magic");
}

/// `create` refuses members that hold md metadata 0.90, 1.0 or 1.1 without --force
/// (before, it overwrote them, saying they were "not md members"), and the other
/// commands name the version instead of "not an md member".
#[test]
fn members_of_md_arrays_in_other_metadata_versions_are_not_overwritten() {
    let dir = tempdir();
    for version in ["1.1", "1.0", "0.90"] {
        let files: Vec<_> = (0..3)
            .map(|i| dir.path().join(format!("v{version}-{i}")))
            .collect();
        for f in &files {
            std::fs::write(f, vec![0u8; 8 << 20]).expect("file");
            plant_md_magic(f, version);
        }
        let before = hashes(&files);
        let mut args = vec!["create", "--level", "5", "--size", "8M"];
        args.extend(files.iter().map(|f| p(f)));
        let err = fails(&args);
        assert!(err.contains(&format!("version {version}")), "{err}");
        assert!(err.contains("--force"), "{err}");
        assert_eq!(hashes(&files), before, "{version}: nothing written");
        let err = fails(&["read", "--length", "4K", p(&files[0])]);
        assert!(err.contains(&format!("version {version}")), "{err}");
        // --force is the way to reuse them on purpose.
        args.insert(1, "--force");
        ok(&args);
    }
}

/// A member holding a file system or a partition table is refused by create, which
/// would write md's superblock over it (at 4 KiB: ext4's group descriptors) and the
/// array's data after, as mdadm asks before it goes on; `--force` takes it.
#[test]
fn create_will_not_write_over_a_file_system_or_a_partition_table() {
    crate::require_tool!("mkfs.ext4");
    let dir = tempdir();
    let files: Vec<_> = (0..3).map(|i| dir.path().join(format!("m{i}"))).collect();
    for f in &files {
        std::fs::write(f, vec![0u8; 16 << 20]).expect("file");
    }
    let mkfs = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", p(&files[1])])
        .status()
        .expect("mkfs.ext4 runs");
    assert!(mkfs.success());
    // An MBR listing one partition, on another.
    let mut mbr = vec![0u8; 512];
    mbr[446 + 4] = 0x83;
    mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&8192u32.to_le_bytes());
    mbr[510..].copy_from_slice(&[0x55, 0xaa]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&files[2])
        .expect("member");
    file.write_all_at(&mbr, 0).expect("the MBR");
    let before = hashes(&files);
    let mut args = vec!["create", "--level", "5"];
    args.extend(files.iter().map(|f| p(f)));
    let err = fails(&args);
    assert!(
        err.contains(p(&files[1])) && err.contains("an ext2/3/4 file system"),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(hashes(&files), before, "nothing written");
    let args_mbr = ["create", "--level", "1", p(&files[0]), p(&files[2])];
    let err = fails(&args_mbr);
    assert!(err.contains("a DOS (MBR) partition table"), "{err}");
    assert_eq!(hashes(&files), before, "nothing written");
    // A ZFS pool member: an uberblock in its first label (a new pool leaves the first
    // slots empty), made by hand here as there is no zpool.
    let zfs = dir.path().join("zfs");
    let mut label = vec![0u8; 16 << 20];
    let slot = 128 * 1024 + 9 * 1024;
    label[slot..slot + 8].copy_from_slice(&0x00ba_b10cu64.to_le_bytes());
    label[slot + 8..slot + 16].copy_from_slice(&5000u64.to_le_bytes());
    std::fs::write(&zfs, &label).expect("zfs member");
    let err = fails(&["create", "--level", "1", p(&files[0]), p(&zfs)]);
    assert!(err.contains("a ZFS pool member"), "{err}");
    assert!(
        std::fs::read(&zfs).expect("zfs member") == label,
        "nothing written"
    );
    args.insert(1, "--force");
    ok(&args);
}

/// `xraid read -o` onto one of the array's members (under any name) would replace
/// it with the array's contents: refused, the member unchanged.
#[test]
fn a_read_will_not_overwrite_a_member() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let members: Vec<_> = (0..4).map(|i| disks.join(format!("d{i}"))).collect();
    let before = hashes(&members);
    let link = dir.path().join("d3-link");
    std::fs::hard_link(&members[3], &link).expect("hard link");
    for out in [&members[3], &link] {
        let err = fails(&["read", "--length", "64K", "-o", p(out), p(&disks)]);
        assert!(err.contains("holds an md superblock"), "{err}");
    }
    assert_eq!(hashes(&members), before, "members unchanged");
    let out = dir.path().join("image.out");
    ok(&["read", "--length", "64K", "-o", p(&out), p(&disks)]);
}

/// A member whose superblock carries a feature xraid cannot honour (md's journal) is
/// named in the refusal, whichever order the members come in; before, the check
/// looked at the freshest superblock only, named the first member given, and let the
/// member pass when the order put it before the others.
#[test]
fn a_member_with_features_xraid_cannot_honour_is_named_in_any_order() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let members: Vec<_> = (0..4).map(|i| disks.join(format!("d{i}"))).collect();
    patch_superblock(&members[3], |sb| sb.feature_map |= 0x200);
    let forward: Vec<&str> = members.iter().map(|m| p(m)).collect();
    let backward: Vec<&str> = forward.iter().rev().copied().collect();
    for order in [&forward, &backward] {
        let mut args = vec!["read", "--length", "4K"];
        args.extend_from_slice(order);
        let err = fails(&args);
        assert!(err.contains(p(&members[3])), "{err}");
        assert!(!err.contains(p(&members[0])), "{err}");
    }
}
