//! The superblocks of a new array, laid out as `mdadm --create --metadata=1.2` lays
//! them out (`init_super1` and `write_init_super1` in mdadm's `super1.c`), with or
//! without `--bitmap=internal` (`add_internal_bitmap1`), so that md and mdadm take an
//! array xraid made for one of their own.

use crate::bitmap::{BitmapChoice, BITMAP_OFFSET_SECTORS};
use crate::constants::{
    MAX_DEVS, MD_FEATURE_BITMAP_OFFSET, MD_SB_MAGIC, ROLE_SPARE, SUPERBLOCK_OFFSET_SECTORS,
};
use crate::superblock::{Superblock, HEADER_BYTES};

/// Everything needed to make the superblocks of a new array.
#[derive(Debug, Clone)]
pub struct NewArray {
    /// The array's UUID.
    pub set_uuid: [u8; 16],
    /// md's `set_name`: at most 32 bytes are kept, cut at a character boundary.
    pub name: String,
    /// md level: 0, 1, 4, 5, 6, 10.
    pub level: i32,
    /// md layout number.
    pub layout: u32,
    /// Chunk size in sectors; 0 for raid1.
    pub chunk_sectors: u32,
    /// Number of slots.
    pub raid_disks: u32,
    /// Creation time, seconds since the epoch.
    pub ctime: u64,
    /// Sector where each member's data starts.
    pub data_offset_sectors: u64,
    /// An internal write-intent bitmap ([`BitmapChoice::internal`]), or `None` for
    /// none (the superblocks are then those of an array made without `--bitmap`).
    pub bitmap: Option<BitmapChoice>,
}

/// Sectors mdadm reserves for the bad-block log.
const BBLOG_SECTORS: u16 = 8;

/// `set_name` bytes for `name`: md has 32 bytes; a longer name is cut at the last
/// character boundary that fits so the stored name stays valid UTF-8.
fn set_name(name: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut end = name.len().min(out.len());
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    out[..end].copy_from_slice(&name.as_bytes()[..end]);
    out
}

/// mdadm's role-table size: the table for the devices of the array (no spares at
/// create) rounded up so that the superblock fills whole 512-byte sectors, i.e. 128
/// entries for up to 128 devices.
fn max_dev_for(raid_disks: u32) -> u32 {
    let bytes = HEADER_BYTES as u64 + 2 * u64::from(raid_disks);
    let rounded = bytes.div_ceil(512) * 512;
    let max_dev = (rounded - HEADER_BYTES as u64) / 2;
    u32::try_from(max_dev).unwrap_or(MAX_DEVS).min(MAX_DEVS)
}

/// mdadm's `choose_bm_space`: sectors kept free after the superblock for a bitmap,
/// by size of the used area of each member; an internal bitmap made at create time
/// gets its chunk chosen to fit in the same room.
pub fn bitmap_space(used_sectors: u64) -> u64 {
    if used_sectors < 64 * 2 {
        0
    } else if used_sectors - 64 * 2 >= 200 * 1024 * 1024 * 2 {
        128 * 2
    } else if used_sectors - 4 * 2 > 8 * 1024 * 1024 * 2 {
        64 * 2
    } else {
        4 * 2
    }
}

/// Where mdadm puts the bad-block log for metadata 1.2: after `bm_space` sectors kept
/// for a bitmap 4 KiB after the superblock, or squeezed just before the data; none
/// when the data starts too early. Returns `(bblog_size, bblog_offset)` in sectors,
/// the offset counted from the superblock.
///
/// With a bitmap present, the squeezed-in log could land on the bitmap (mdadm does not
/// look); it is left out then rather than let md write one over the other.
fn bad_block_log(data_offset: u64, bm_space: u64, has_bitmap: bool) -> (u16, u32) {
    let sb = SUPERBLOCK_OFFSET_SECTORS;
    let bm_offset = BITMAP_OFFSET_SECTORS as u64;
    let bblog = u64::from(BBLOG_SECTORS);
    if data_offset >= sb + bm_offset + bm_space + bblog {
        (BBLOG_SECTORS, (bm_offset + bm_space) as u32)
    } else if data_offset >= sb + 16 && !has_bitmap {
        let offset = data_offset - bblog - sb;
        (BBLOG_SECTORS, u32::try_from(offset).unwrap_or(0))
    } else {
        (0, 0)
    }
}

impl Superblock {
    /// The superblock of role `role` of a new array, as mdadm writes it for metadata
    /// 1.2: the superblock at sector 8, data of `avail_sectors` sectors at
    /// `data_offset_sectors`, `dev_number` equal to the role, a role table of
    /// 128 entries (for up to 128 devices) with unused entries spare, an 8-sector
    /// bad-block log, events 0 (callers bump it), clean (`resync_offset` `u64::MAX`:
    /// the redundancy was initialised).
    ///
    /// With `new.bitmap`, the superblock has `MD_FEATURE_BITMAP_OFFSET` and the bitmap
    /// 4 KiB after it, and the bad-block log follows the space mdadm reserves for that
    /// bitmap; write [`crate::new_member_bitmap`] there once the superblock is final.
    ///
    /// `size` is left 0 for the caller to set to the used size of each member.
    pub fn new_member(
        new: &NewArray,
        role: u32,
        device_uuid: [u8; 16],
        avail_sectors: u64,
    ) -> Superblock {
        let max_dev = max_dev_for(new.raid_disks);
        let dev_roles = (0..max_dev)
            .map(|i| {
                if i < new.raid_disks {
                    i as u16
                } else {
                    ROLE_SPARE
                }
            })
            .collect();
        // mdadm sizes the bitmap gap by the array's used size per member, which for
        // raid0 (and linear) it records as 0; for the others the available size is the
        // same figure or within a chunk of it.
        let used = if new.level <= 0 { 0 } else { avail_sectors };
        // With a bitmap, mdadm places the log after the bitmap's own reserved size;
        // without, after the room it keeps for a bitmap added later.
        let (bm_space, feature_map, bitmap_offset) = match &new.bitmap {
            Some(choice) => (
                choice.reserved_sectors(),
                MD_FEATURE_BITMAP_OFFSET,
                BITMAP_OFFSET_SECTORS,
            ),
            None => (bitmap_space(used), 0, 0),
        };
        let (bblog_size, bblog_offset) =
            bad_block_log(new.data_offset_sectors, bm_space, new.bitmap.is_some());
        let time = Superblock::encode_time(new.ctime);
        let mut sb = Superblock {
            magic: MD_SB_MAGIC,
            major_version: 1,
            feature_map,
            pad0: 0,
            set_uuid: new.set_uuid,
            set_name: set_name(&new.name),
            ctime: time,
            level: new.level,
            layout: new.layout,
            size: 0,
            chunksize: new.chunk_sectors,
            raid_disks: new.raid_disks,
            bitmap_offset,
            new_level: 0,
            reshape_position: 0,
            delta_disks: 0,
            new_layout: 0,
            new_chunk: 0,
            new_offset: 0,
            data_offset: new.data_offset_sectors,
            data_size: avail_sectors,
            super_offset: SUPERBLOCK_OFFSET_SECTORS,
            recovery_offset: 0,
            dev_number: role,
            cnt_corrected_read: 0,
            device_uuid,
            devflags: 0,
            bblog_shift: 0,
            bblog_size,
            bblog_offset,
            utime: time,
            events: 0,
            resync_offset: u64::MAX,
            sb_csum: 0,
            max_dev,
            pad3: [0; 32],
            dev_roles,
        };
        sb.sb_csum = sb.compute_checksum();
        sb
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_at_char_boundaries() {
        assert_eq!(&set_name("abc")[..4], b"abc\0");
        let long = "é".repeat(20); // 40 bytes
        let b = set_name(&long);
        assert_eq!(&b[..], &long.as_bytes()[..32]);
        let odd = format!("a{}", "é".repeat(20)); // boundary falls inside a char at 32
        let b = set_name(&odd);
        assert_eq!(&b[..31], &odd.as_bytes()[..31]);
        assert_eq!(b[31], 0);
        assert!(std::str::from_utf8(&b[..31]).is_ok());
    }

    #[test]
    fn role_table_size_is_mdadms() {
        assert_eq!(max_dev_for(1), 128);
        assert_eq!(max_dev_for(128), 128);
        assert_eq!(max_dev_for(129), 384);
        assert_eq!(max_dev_for(5000), MAX_DEVS);
    }

    #[test]
    fn bad_block_log_is_placed_like_mdadm() {
        let log = |data_offset, used| bad_block_log(data_offset, bitmap_space(used), false);
        // 15 MiB members, data at 1 MiB: "512 entries available at offset 16 sectors".
        assert_eq!(log(2048, 30720), (8, 16));
        // raid0 records no used size, so no bitmap gap: offset 8.
        assert_eq!(log(2048, 0), (8, 8));
        // Over 8 GiB: 64 KiB kept for a bitmap; over 200 GiB: 128 KiB.
        assert_eq!(log(2048, 20 * 1024 * 1024 * 2), (8, 136));
        assert_eq!(log(2048, 300 * 1024 * 1024 * 2), (8, 264));
        // Data too close for the gap: the log sits just before the data.
        assert_eq!(log(40, 20 * 1024 * 1024 * 2), (8, 24));
        assert_eq!(log(16, 30720), (0, 0));
    }

    #[test]
    fn bad_block_log_follows_an_internal_bitmap() {
        // A bitmap reserving 8 KiB: the log 16 sectors after the bitmap's start.
        assert_eq!(bad_block_log(2048, 16, true), (8, 24));
        // No room after the bitmap: no log, rather than one on top of the bitmap.
        assert_eq!(bad_block_log(40, 32, true), (0, 0));
        assert_eq!(bad_block_log(40, 32, false), (8, 24));
    }
}
