//! md's on-disk numbers for metadata 1.2: where the superblock lives, its magic, the
//! special role values and the `feature_map` bits (kernel `md_p.h`).

/// Where metadata 1.2 keeps the superblock: 4 KiB from the member's start.
pub const SUPERBLOCK_OFFSET_BYTES: u64 = 4096;

/// [`SUPERBLOCK_OFFSET_BYTES`] in 512-byte sectors, the value of `super_offset`.
pub const SUPERBLOCK_OFFSET_SECTORS: u64 = SUPERBLOCK_OFFSET_BYTES / 512;

/// Bytes read and written at [`SUPERBLOCK_OFFSET_BYTES`]: md reserves 4 KiB for the
/// superblock and its role table.
pub const SUPERBLOCK_BYTES: usize = 4096;

/// `MD_SB_MAGIC`, stored little-endian.
pub const MD_SB_MAGIC: u32 = 0xa92b_4efc;

/// Role of a device that holds no slot (md's `MD_DISK_ROLE_SPARE`); also what unused
/// entries of the role table hold.
pub const ROLE_SPARE: u16 = 0xffff;
/// Role of a device md has failed (`MD_DISK_ROLE_FAULTY`).
pub const ROLE_FAULTY: u16 = 0xfffe;
/// Role of a raid5 write journal device (`MD_DISK_ROLE_JOURNAL`).
pub const ROLE_JOURNAL: u16 = 0xfffd;
/// Largest value md treats as a slot number (`MD_DISK_ROLE_MAX`).
pub const ROLE_MAX: u16 = 0xff00;

/// Most role-table entries that fit in 4 KiB after the 256-byte header; the kernel
/// refuses a larger `max_dev`.
pub const MAX_DEVS: u32 = (SUPERBLOCK_BYTES as u32 - 256) / 2;

/// An internal write-intent bitmap lives at `bitmap_offset`.
pub const MD_FEATURE_BITMAP_OFFSET: u32 = 1;
/// `recovery_offset` is valid: this device is part-way through recovery.
pub const MD_FEATURE_RECOVERY_OFFSET: u32 = 2;
/// A reshape is in progress (`reshape_position`, `new_*` and `delta_disks` are valid).
pub const MD_FEATURE_RESHAPE_ACTIVE: u32 = 4;
/// The bad-block log is not empty.
pub const MD_FEATURE_BAD_BLOCKS: u32 = 8;
/// This device is replacing the active device of the same role.
pub const MD_FEATURE_REPLACEMENT: u32 = 16;
/// The reshape runs backwards.
pub const MD_FEATURE_RESHAPE_BACKWARDS: u32 = 32;
/// `new_offset` is valid.
pub const MD_FEATURE_NEW_OFFSET: u32 = 64;
/// The recovery of this device is tracked by the bitmap.
pub const MD_FEATURE_RECOVERY_BITMAP: u32 = 128;
/// The array is clustered (md-cluster).
pub const MD_FEATURE_CLUSTERED: u32 = 256;
/// The array has a raid5 write journal.
pub const MD_FEATURE_JOURNAL: u32 = 512;
/// A partial-parity log is kept (the union at `bitmap_offset` describes it).
pub const MD_FEATURE_PPL: u32 = 1024;
/// Several partial-parity logs are kept.
pub const MD_FEATURE_MULTIPLE_PPLS: u32 = 2048;
/// `layout` is meaningful for raid0.
pub const MD_FEATURE_RAID0_LAYOUT: u32 = 4096;

/// `feature_map` bits xraid can serve: the raid0 layout flag, which md sets on raid0
/// arrays and which changes nothing for members of equal size, and the internal
/// write-intent bitmap, which the array keeps. Other bits describe state (reshape,
/// journal, PPL...) xraid does not handle, so callers refuse a member that has one.
pub const SUPPORTED_FEATURES: u32 = MD_FEATURE_RAID0_LAYOUT | MD_FEATURE_BITMAP_OFFSET;
