//! Why a superblock could not be read: each message is one line naming the problem and
//! what to do about it.

/// A superblock that cannot be used, as found by [`crate::Superblock::parse`].
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
}
