//! Why a geometry, level or layout is refused; each message names the value and the fix.

use crate::Level;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("unknown RAID level '{0}': use raid0, raid1, raid4, raid5, raid6 or raid10")]
    UnknownLevel(String),
    #[error(
        "md level {0} is not supported: xraid handles raid0, raid1, raid4, raid5, raid6 and raid10"
    )]
    UnsupportedMdLevel(i32),
    #[error("layout '{name}' does not apply to {level}: use {choices}")]
    UnknownLayout {
        level: Level,
        name: String,
        choices: &'static str,
    },
    #[error("md layout {value:#x} of {level} is not supported")]
    UnsupportedMdLayout { level: Level, value: u32 },
    #[error("{level} needs {min} to {max} members, {given} given")]
    MemberCount {
        level: Level,
        given: u16,
        min: u16,
        max: u16,
    },
    #[error(
        "chunk of {bytes} bytes is not a power of two between 4K and 16M: use e.g. 64K or 512K"
    )]
    Chunk { bytes: u64 },
    #[error("raid10 layout {layout} keeps {copies} copies, which needs at least {copies} members ({members} given) and at least 2 copies (offset copies only with one near copy)")]
    Raid10Copies {
        layout: String,
        copies: u16,
        members: u16,
    },
    #[error("members hold {member_sectors} data sectors, less than one chunk ({chunk_sectors} sectors): use larger members or a smaller chunk")]
    TooSmall {
        member_sectors: u64,
        chunk_sectors: u32,
    },
}
