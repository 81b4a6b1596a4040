//! Our examine text against a live `mdadm --examine` on member files written from our
//! superblocks: every level and layout xraid makes, and superblocks in states xraid
//! only reads (spare, faulty, journal, replacing, degraded, reshaping, PPL...).
//! Runs only when mdadm 4.2 is installed (other versions word things differently).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{comparable, sample};
use crate::{
    examine_text, Superblock, MD_FEATURE_BAD_BLOCKS, MD_FEATURE_MULTIPLE_PPLS,
    MD_FEATURE_NEW_OFFSET, MD_FEATURE_PPL, MD_FEATURE_RAID0_LAYOUT, MD_FEATURE_RECOVERY_OFFSET,
    MD_FEATURE_REPLACEMENT, MD_FEATURE_RESHAPE_ACTIVE, ROLE_FAULTY, ROLE_JOURNAL, ROLE_SPARE,
    SUPERBLOCK_OFFSET_BYTES,
};

pub(super) fn mdadm_42() -> bool {
    let Ok(out) = Command::new("mdadm").arg("--version").output() else {
        eprintln!("skipped: mdadm is not installed");
        return false;
    };
    let version =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    if !version.contains("v4.2 ") {
        eprintln!("skipped: mdadm is not 4.2 ({})", version.trim());
        return false;
    }
    true
}

pub(super) struct Scratch(pub(super) PathBuf);

impl Scratch {
    pub(super) fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("xraid-format-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A sparse member file holding `image` (a superblock image, maybe deliberately
/// damaged) and ending after the data area, as mdadm makes members.
fn write_member(path: &Path, sb: &Superblock, image: &[u8]) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::create(path).unwrap();
    file.set_len((sb.data_offset + sb.data_size) * 512).unwrap();
    file.write_all_at(image, SUPERBLOCK_OFFSET_BYTES).unwrap();
}

pub(super) fn mdadm_examine(path: &Path) -> String {
    let out = Command::new("mdadm")
        .arg("--examine")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn agree(dir: &Scratch, what: &str, sb: &Superblock, image: &[u8]) {
    let path = dir.0.join(format!("{}.img", what.replace([' ', '/'], "_")));
    write_member(&path, sb, image);
    let theirs = mdadm_examine(&path);
    let ours = examine_text(sb, &path.display().to_string());
    assert_eq!(ours.lines().next(), theirs.lines().next(), "{what}");
    assert_eq!(
        comparable(&ours),
        comparable(&theirs),
        "{what}\nmdadm:\n{theirs}\nours:\n{ours}"
    );
}

fn agree_sealed(dir: &Scratch, what: &str, mut sb: Superblock) {
    sb.sb_csum = sb.compute_checksum();
    let image = sb.to_bytes();
    agree(dir, what, &sb, &image);
}

#[test]
fn examine_agrees_with_mdadm_at_every_level_and_layout() {
    if !mdadm_42() {
        return;
    }
    let dir = Scratch::new("levels");
    let cases: [(i32, u32, u32); 15] = [
        (0, 0, 3),
        (1, 0, 2),
        (4, 5, 4),
        (5, 0, 4),
        (5, 1, 4),
        (5, 2, 4),
        (5, 3, 4),
        (5, 4, 4),
        (5, 5, 4),
        (6, 2, 5),
        (6, 1, 5),
        (6, 4, 5),
        (10, 0x102, 4),
        (10, 0x201, 4),
        (10, 0x10201, 4),
    ];
    for (level, layout, disks) in cases {
        for role in 0..disks {
            let sb = sample(level, layout, disks, role);
            agree_sealed(&dir, &format!("l{level} {layout:x} r{role}"), sb);
        }
    }
}

#[test]
fn examine_agrees_with_mdadm_in_states_xraid_only_reads() {
    if !mdadm_42() {
        return;
    }
    let dir = Scratch::new("states");
    let base = || sample(5, 2, 4, 1);
    let mut variants: Vec<(&str, Superblock)> = Vec::new();

    let mut sb = base();
    sb.resync_offset = 0;
    sb.size = 12000;
    variants.push(("active smaller", sb));
    let mut sb = base();
    sb.dev_roles[1] = ROLE_SPARE;
    variants.push(("spare", sb));
    let mut sb = base();
    sb.dev_roles[1] = ROLE_FAULTY;
    variants.push(("faulty", sb));
    let mut sb = base();
    sb.dev_roles[1] = ROLE_JOURNAL;
    sb.feature_map = crate::MD_FEATURE_JOURNAL;
    variants.push(("journal", sb));
    let mut sb = base();
    sb.dev_roles[2] = ROLE_FAULTY;
    variants.push(("degraded", sb));
    let mut sb = base();
    sb.dev_roles[5] = 2;
    sb.dev_number = 5;
    sb.feature_map = MD_FEATURE_REPLACEMENT | MD_FEATURE_RECOVERY_OFFSET;
    sb.recovery_offset = 4096;
    variants.push(("replacing", sb));
    let mut sb = base();
    sb.dev_roles[5] = 2;
    sb.dev_roles[6] = 2;
    sb.dev_roles[7] = 200;
    variants.push(("inconsistent", sb));
    let mut sb = base();
    sb.feature_map = MD_FEATURE_RESHAPE_ACTIVE;
    sb.raid_disks = 3;
    sb.delta_disks = -1;
    sb.new_level = 6;
    sb.new_layout = 18;
    sb.new_chunk = 256;
    sb.reshape_position = 123_456;
    variants.push(("reshape shrink", sb));
    let mut sb = sample(10, 0x102, 4, 0);
    sb.feature_map = MD_FEATURE_RESHAPE_ACTIVE | MD_FEATURE_NEW_OFFSET;
    sb.delta_disks = 2;
    sb.raid_disks = 6;
    sb.new_layout = 0x201;
    sb.new_offset = (-1024i32) as u32;
    variants.push(("reshape raid10", sb));
    let mut sb = base();
    sb.feature_map = MD_FEATURE_PPL;
    sb.bitmap_offset = (8u32 | 2040 << 16) as i32;
    sb.bblog_size = 0;
    sb.bblog_offset = 0;
    variants.push(("ppl", sb));
    let mut sb = base();
    sb.feature_map = MD_FEATURE_MULTIPLE_PPLS | MD_FEATURE_BAD_BLOCKS;
    sb.bitmap_offset = (8u32 | 2000 << 16) as i32;
    variants.push(("ppls", sb));
    let mut sb = sample(0, 2, 3, 2);
    sb.feature_map = MD_FEATURE_RAID0_LAYOUT;
    sb.size = 0;
    variants.push(("raid0 alternate", sb));
    let mut sb = sample(0, 0, 3, 2);
    sb.size = 0;
    variants.push(("raid0 size 0", sb));
    let mut sb = base();
    sb.devflags = 3;
    sb.set_name = *b"host:a-name-that-fills-32-bytes!";
    variants.push(("flags name32", sb));
    let mut sb = base();
    sb.layout = 9;
    sb.level = 3;
    variants.push(("unknown level", sb));
    let mut sb = sample(6, 9, 5, 0);
    sb.layout = 9;
    variants.push(("raid6 ddf", sb));
    let mut sb = sample(10, 0x101, 2, 0);
    sb.layout = 0x101;
    variants.push(("raid10 single", sb));
    let mut sb = sample(10, 0x302, 6, 0);
    sb.layout = 0x302;
    variants.push(("raid10 n2f3", sb));
    let mut sb = sample(-1, 0, 3, 0);
    sb.chunksize = 0;
    variants.push(("linear", sb));
    let mut sb = base();
    sb.data_size = 3 * 1024 * 1024 * 1024;
    sb.size = 3 * 1024 * 1024 * 1024 - 128;
    variants.push(("1.5 TiB", sb));
    let mut sb = base();
    sb.data_size = 5000 * 1024 * 1024;
    sb.size = 5000 * 1024 * 1024;
    variants.push(("2.4 TiB", sb));
    let mut sb = base();
    sb.data_offset = 24;
    sb.bblog_offset = 8;
    variants.push(("tight offset", sb));

    for (what, sb) in variants {
        agree_sealed(&dir, what, sb);
    }

    // A wrong stored checksum: mdadm says what it expected.
    let mut sb = base();
    sb.sb_csum = sb.compute_checksum().wrapping_add(1);
    let mut image = sb.to_bytes();
    image[216..220].copy_from_slice(&sb.sb_csum.to_le_bytes());
    agree(&dir, "bad checksum", &sb, &image);
}
