//! Why a superblock or bitmap could not be read, or a bitmap not be made: each message
//! is one line naming the problem and what to do about it.

use crate::superblock::Superblock;

/// A superblock or bitmap that cannot be used, as found by [`crate::Superblock::parse`],
/// [`crate::BitmapSuper::parse`] and the bitmap checks, or a bitmap that cannot be
/// made as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Fewer bytes than the superblock needs.
    #[error(
        "superblock buffer is {len} bytes but needs {needed}: read 4096 bytes at offset 4096 of the member"
    )]
    TooShort { len: usize, needed: usize },

    /// No md magic at 4 KiB: not an md member.
    #[error("no md superblock (magic {found:#010x})")]
    NotMd { found: u32 },

    /// md magic, but not a version-1 superblock.
    #[error(
        "md superblock major version {found} is not supported (only metadata 1.x is): copy the data to an array made with metadata 1.2"
    )]
    UnsupportedVersion { found: u32 },

    /// `max_dev` claims more role-table entries than fit in 4 KiB.
    #[error(
        "superblock claims {max_dev} device slots but at most {limit} fit in 4 KiB: the superblock is damaged; restore it or leave this member out"
    )]
    TooManyDevices { max_dev: u32, limit: u32 },

    /// The stored checksum is not the one md computes.
    #[error(
        "superblock checksum is wrong (stored {stored:#010x}, computed {computed:#010x}): the superblock is damaged; restore it or leave this member out"
    )]
    BadChecksum { stored: u32, computed: u32 },

    /// `super_offset` does not say sector 8, where the superblock was read.
    #[error(
        "superblock says it is at sector {found} but metadata 1.2 keeps it at sector 8: it is damaged or was copied from elsewhere; restore it or leave this member out"
    )]
    WrongSuperOffset { found: u64 },

    /// The data area would start inside the superblock.
    #[error(
        "data offset {data_offset} sectors overlaps the superblock (data must start at sector {min} or later): the superblock is damaged; restore it or leave this member out"
    )]
    DataOffsetOverlapsSuperblock { data_offset: u64, min: u64 },

    /// The data area is smaller than md accepts.
    #[error(
        "data size {data_size} sectors is too small (md needs at least {min}): the superblock is damaged; restore it or leave this member out"
    )]
    DataSizeTooSmall { data_size: u64, min: u64 },

    /// The data area ends beyond any addressable device.
    #[error(
        "data area (offset {data_offset} + size {data_size} sectors) ends beyond any device: the superblock is damaged; restore it or leave this member out"
    )]
    DataAreaTooLarge { data_offset: u64, data_size: u64 },

    /// The used size per member is larger than the data area.
    #[error(
        "used size {size} sectors is larger than the data area of {data_size} sectors: the superblock is damaged; restore it or leave this member out"
    )]
    UsedSizeTooLarge { size: u64, data_size: u64 },

    /// `dev_number` indexes past the role table.
    #[error(
        "device number {dev_number} is beyond the role table of {max_dev} entries: the superblock is damaged; restore it or leave this member out"
    )]
    DevNumberOutOfRange { dev_number: u32, max_dev: u32 },

    /// Fewer bytes than the bitmap (superblock or bits) needs.
    #[error(
        "bitmap buffer is {len} bytes but needs {needed}: read the whole bitmap at the member's bitmap offset"
    )]
    BitmapTooShort { len: usize, needed: usize },

    /// No bitmap magic where the superblock says the bitmap is.
    #[error(
        "no md bitmap (magic {found:#010x}) where the superblock says it is: the bitmap is missing or damaged; remove the bitmap feature or restore it"
    )]
    NotBitmap { found: u32 },

    /// A bitmap version other than the little-endian one mdadm writes for 1.x.
    #[error(
        "md bitmap version {found} is not supported (only version 4, the non-clustered little-endian bitmap, is): remove the bitmap with mdadm --grow --bitmap=none and add it again"
    )]
    UnsupportedBitmapVersion { found: u32 },

    /// A chunk size md refuses: not a power of two, or below a sector.
    #[error(
        "bitmap chunk size {chunksize} bytes is not a power of two of at least 512: use a power of two such as 65536"
    )]
    BadBitmapChunkSize { chunksize: u32 },

    /// md refuses a bitmap whose flush period is zero.
    #[error(
        "bitmap daemon sleep is 0 seconds but md needs at least 1: the bitmap superblock is damaged; re-create the bitmap"
    )]
    BitmapDaemonSleepZero,

    /// More write-behind than md's counters can hold.
    #[error(
        "bitmap write-behind {write_behind} is above md's limit of {max}: the bitmap superblock is damaged; re-create the bitmap"
    )]
    BitmapWriteBehindTooLarge { write_behind: u32, max: u32 },

    /// State bits md never writes (or the host-endian flag, whose bit order depends on
    /// the machine that wrote it).
    #[error(
        "bitmap state {state:#x} has bits xraid does not know: re-create the bitmap with mdadm --grow --bitmap=none then --bitmap=internal"
    )]
    UnknownBitmapState { state: u32 },

    /// A clustered bitmap (one per node).
    #[error(
        "bitmap is clustered ({nodes} nodes), which xraid does not support: use the array from one host without md-cluster"
    )]
    ClusteredBitmap { nodes: u32 },

    /// A sync size whose byte count does not fit in 64 bits.
    #[error(
        "bitmap sync size {sync_size} sectors is beyond any device: the bitmap superblock is damaged; re-create the bitmap"
    )]
    BitmapSyncSizeTooLarge { sync_size: u64 },

    /// A reserved size too small for the bits (md would silently grow the chunk size).
    #[error(
        "bitmap reserves {sectors_reserved} sectors but its bits need {needed}: the bitmap superblock is damaged; re-create the bitmap"
    )]
    BitmapReservedTooSmall { sectors_reserved: u32, needed: u64 },

    /// The superblock does not have `MD_FEATURE_BITMAP_OFFSET`.
    #[error("the superblock has no internal bitmap: there is no bitmap to read on this member")]
    NoInternalBitmap,

    /// The bitmap belongs to another array; md refuses it.
    #[error(
        "bitmap UUID {} is not the array's {}: the bitmap belongs to another array; re-create the bitmap",
        Superblock::uuid_string(.bitmap),
        Superblock::uuid_string(.array)
    )]
    BitmapUuidMismatch { bitmap: [u8; 16], array: [u8; 16] },

    /// The bitmap does not lie between the superblock and the data.
    #[error(
        "bitmap at sectors {start}..{end} is not between the superblock (ends at sector {superblock_end}) and the data (starts at sector {data_offset}): use a larger bitmap chunk or a larger data offset"
    )]
    BitmapOutsideGap {
        start: u64,
        end: u64,
        superblock_end: u64,
        data_offset: u64,
    },

    /// The bitmap and the bad-block log share sectors.
    #[error(
        "bitmap at sectors {start}..{end} overlaps the bad-block log at sectors {bblog_start}..{bblog_end}: the superblock is damaged; restore it or leave this member out"
    )]
    BitmapOverlapsBadBlockLog {
        start: u64,
        end: u64,
        bblog_start: u64,
        bblog_end: u64,
    },

    /// md keeps no bitmap for this level, or the raid10 layout has no copies.
    #[error(
        "no write-intent bitmap for level {level} layout {layout:#x}: bitmaps need raid1, raid4, raid5, raid6 or a valid raid10 layout"
    )]
    BitmapUnsupportedArray { level: i32, layout: u32 },

    /// mdadm keeps no room for a bitmap on members this small.
    #[error(
        "members of {used_sectors} sectors are too small for an internal bitmap (mdadm keeps room for one from 128 sectors): use larger members or no bitmap"
    )]
    NoRoomForBitmap { used_sectors: u64 },

    /// The chunk asked for makes more bits than fit in the room kept for them.
    #[error(
        "bitmap chunk {chunksize} bytes makes too many bits for the room mdadm keeps: use a chunk of at least {min} bytes"
    )]
    BitmapChunkTooSmall { chunksize: u32, min: u64 },

    /// The chunk needed is beyond md's 32-bit chunk size.
    #[error(
        "a bitmap over {sync_sectors} sectors needs {chunk}-byte chunks, beyond md's 32-bit chunk size: use no bitmap"
    )]
    BitmapChunkTooLarge { sync_sectors: u64, chunk: u64 },

    /// An entry of a bad block log md could not have written.
    #[error(
        "bad block log entry {index} ({entry:#018x}) is not a valid range: the log is damaged; restore the member's metadata or leave it out"
    )]
    BadBlockEntry { index: usize, entry: u64 },

    /// A log larger than the one page md reads.
    #[error(
        "the superblock says its bad block log is {sectors} sectors, more than the 8 md reads: the superblock is damaged; restore it or leave this member out"
    )]
    BadBlockLogTooLarge { sectors: u16 },

    /// Blocks of the log so large that their sectors would not fit 64 bits.
    #[error(
        "bad block log blocks of 2^{shift} sectors are beyond any device: the superblock is damaged; restore it or leave this member out"
    )]
    BadBlockShift { shift: u8 },

    /// More bad ranges than the member's log has room for.
    #[error(
        "the bad block log has room for {capacity} entries but {needed} are needed: the member has too many bad blocks to keep a record of"
    )]
    BadBlockLogFull { needed: usize, capacity: usize },
}
