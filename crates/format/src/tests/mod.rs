//! Tests across modules: the superblocks of real md arrays, error cases, round trips,
//! and agreement with a live `mdadm --examine` when one is installed.

mod badblocks;
mod bitmap;
mod errors;
mod fixtures;
mod live_mdadm;
mod live_mdadm_bitmap;
mod roundtrip;

use crate::{NewArray, Superblock};

/// The superblock of member `role` of a small array as xraid would create it, with
/// 8 MiB members fully used.
pub(crate) fn sample(level: i32, layout: u32, raid_disks: u32, role: u32) -> Superblock {
    let new = NewArray {
        set_uuid: [
            0x77, 0x5e, 0xdc, 0xeb, 0xcd, 0xf4, 0x49, 0xa1, 0xa0, 0xa1, 0x4e, 0x2f, 0xa9, 0xce,
            0x53, 0xa0,
        ],
        name: "exam".to_owned(),
        level,
        layout,
        chunk_sectors: if level == 1 { 0 } else { 128 },
        raid_disks,
        ctime: 1_795_349_027,
        data_offset_sectors: 2048,
        bitmap: None,
    };
    let mut device_uuid = [0u8; 16];
    for (i, b) in device_uuid.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37).wrapping_add(role as u8);
    }
    let mut sb = Superblock::new_member(&new, role, device_uuid, 16384);
    sb.size = 16384;
    sb.events = 1;
    sb.sb_csum = sb.compute_checksum();
    sb
}

/// Lines of an examine text to compare: without the device line, the dates (mdadm
/// prints local time) and mdadm's "(local to host ...)" remark.
pub(crate) fn comparable(text: &str) -> Vec<String> {
    text.lines()
        .skip(1)
        .filter(|l| !l.starts_with("  Creation Time :") && !l.starts_with("    Update Time :"))
        .map(|l| match l.find("  (local to host") {
            Some(i) => l[..i].to_owned(),
            None => l.to_owned(),
        })
        .collect()
}
