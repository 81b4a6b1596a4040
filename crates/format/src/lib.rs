//! Linux md's version-1.2 superblock (`struct mdp_superblock_1` of the kernel's
//! `include/uapi/linux/raid/md_p.h`): parse and validate it, compute md's checksum,
//! write it back byte for byte, make the superblocks of a new array the way mdadm does,
//! and describe one in `mdadm --examine`'s words. Likewise md's internal write-intent
//! bitmap ([`BitmapSuper`], [`BitmapBits`]), in `mdadm --examine-bitmap`'s words.
//!
//! Nothing here does I/O: callers read [`SUPERBLOCK_BYTES`] at
//! [`SUPERBLOCK_OFFSET_BYTES`] of a member and hand the bytes over, and write back
//! what [`Superblock::to_bytes`] returns at the same place; the bitmap's bytes sit at
//! [`bitmap_start_sector`], the bad block log's ([`BadBlocks`]) at
//! [`bad_block_log_sectors`]. And xraid's own integrity area (per-block checksums, after
//! md's data area): [`IntegrityHeader`], [`encode_page`], [`decode_page`].

mod badblocks;
mod bitmap;
mod block_crc;
mod checksum;
mod clock;
mod constants;
mod create;
mod error;
mod examine;
mod human;
mod integrity;
mod names;
mod superblock;

pub use badblocks::{bad_block_log_sectors, BadBlocks, MAX_LOG_SECTORS};
pub use bitmap::{
    bitmap_bytes, bitmap_chunks, bitmap_image, bitmap_reserved_bytes, bitmap_room_sectors,
    bitmap_start_sector, bitmap_sync_sectors, choose_bitmap_chunk, new_member_bitmap,
    new_member_bitmap_all_dirty, parse_bitmap, BitmapBits, BitmapChoice, BitmapSuper, DirtyRanges,
    BITMAP_CLEARED, BITMAP_DAEMON_BUSY, BITMAP_FIRST_USE, BITMAP_MAGIC, BITMAP_MAJOR_HI,
    BITMAP_OFFSET_SECTORS, BITMAP_STALE, BITMAP_SUPER_BYTES, BITMAP_WRITE_ERROR,
    DEFAULT_DAEMON_SLEEP, MAX_WRITE_BEHIND,
};
pub use block_crc::block_entries;
pub use checksum::sb_checksum;
pub use constants::{
    MAX_DEVS, MD_FEATURE_BAD_BLOCKS, MD_FEATURE_BITMAP_OFFSET, MD_FEATURE_CLUSTERED,
    MD_FEATURE_JOURNAL, MD_FEATURE_MULTIPLE_PPLS, MD_FEATURE_NEW_OFFSET, MD_FEATURE_PPL,
    MD_FEATURE_RAID0_LAYOUT, MD_FEATURE_RECOVERY_BITMAP, MD_FEATURE_RECOVERY_OFFSET,
    MD_FEATURE_REPLACEMENT, MD_FEATURE_RESHAPE_ACTIVE, MD_FEATURE_RESHAPE_BACKWARDS, MD_SB_MAGIC,
    ROLE_FAULTY, ROLE_JOURNAL, ROLE_MAX, ROLE_SPARE, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET_BYTES,
    SUPERBLOCK_OFFSET_SECTORS, SUPPORTED_FEATURES,
};
pub use create::{bitmap_space, NewArray};
pub use error::FormatError;
pub use examine::{
    examine_bitmap_text, examine_text, examine_text_on_device, examine_text_with_bitmap,
};
pub use integrity::{
    area_sectors, area_start_sector, block_entry, blocks_for, crc32c, data_sectors_with_area,
    decode_page, encode_page, pages_for, IntegrityError, IntegrityHeader, BLOCK_BYTES,
    BLOCK_SECTORS, ENTRIES_PER_PAGE, HEADER_SECTORS, PAGE_BYTES, PAGE_SECTORS, UNKNOWN,
};
pub use superblock::Superblock;

#[cfg(test)]
mod tests;
