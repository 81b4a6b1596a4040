//! Each member's bad block log (md's) between the disk and the engine: read at open
//! and handed to the engine as known bad ranges of the data area, so that what a
//! member holds there is never returned; written back with the superblocks once the
//! engine has rewritten ranges and made them good.
//!
//! md records device sectors; the engine counts from the data area. A range outside
//! the data area (in the metadata, or past it) is nothing the engine reads, and is
//! kept in the log as it was.
//!
//! A superblock made for a device from another member's (a spare stepping in, an
//! added or replacing member) says its list is empty ([`fresh_superblock`]): the
//! other member's bad blocks are not this device's, and a device's own old list
//! means nothing once it is rebuilt whole. A member coming back to catch up from the
//! bitmap is rebuilt whole instead when its log lists ranges.

use std::path::Path;

use xraid_format::{
    bad_block_log_sectors, BadBlocks, FormatError, Superblock, MAX_LOG_SECTORS,
    MD_FEATURE_BAD_BLOCKS,
};
use xraid_layout::SECTOR_BYTES;
use xraid_member::Member;

use crate::scan::io_error;
use crate::ArrayError;

/// One member's log as found at open.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemberBadBlocks {
    /// Within the data area, in data-area sectors: the engine's.
    pub(crate) data: BadBlocks,
    /// Outside it, in device sectors: kept as found.
    pub(crate) outside: BadBlocks,
    /// Ranges the engine may add (the log's room less what `outside` takes; 0 when
    /// the log's blocks are larger than a sector, which the engine does not record).
    pub(crate) capacity: usize,
}

/// How many ranges `sb`'s log has room for, in single-sector blocks.
pub(crate) fn capacity(sb: &Superblock) -> usize {
    match bad_block_log_sectors(sb).filter(|_| sb.bblog_size <= MAX_LOG_SECTORS) {
        Some(at) if sb.bblog_shift == 0 => (at.end - at.start) as usize * SECTOR_BYTES as usize / 8,
        _ => 0,
    }
}

/// `sb`, made from another member's superblock for a device joining the array, with
/// an empty bad block list.
pub(crate) fn fresh_superblock(sb: &mut Superblock) {
    sb.feature_map &= !MD_FEATURE_BAD_BLOCKS;
}

/// Whether the log of the device whose superblock is `sb` lists bad ranges.
pub(crate) fn lists_ranges(sb: &Superblock) -> bool {
    sb.feature_map & MD_FEATURE_BAD_BLOCKS != 0
}

/// The list `member`'s log holds: empty when its superblock keeps no log, or says
/// the log is empty (no `MD_FEATURE_BAD_BLOCKS`).
pub(crate) fn load(
    member: &dyn Member,
    sb: &Superblock,
    member_sectors: u64,
    path: &Path,
) -> Result<MemberBadBlocks, ArrayError> {
    let room = capacity(sb);
    if lists_ranges(sb) && sb.bblog_size > MAX_LOG_SECTORS {
        return Err(ArrayError::Superblock {
            path: path.to_path_buf(),
            source: FormatError::BadBlockLogTooLarge {
                sectors: sb.bblog_size,
            },
        });
    }
    let Some(at) = bad_block_log_sectors(sb).filter(|_| lists_ranges(sb)) else {
        return Ok(MemberBadBlocks {
            capacity: room,
            ..MemberBadBlocks::default()
        });
    };
    let mut log = vec![0u8; (at.end - at.start) as usize * SECTOR_BYTES as usize];
    member
        .read_at(&mut log, at.start * SECTOR_BYTES)
        .map_err(|e| io_error(path, e))?;
    let device =
        BadBlocks::parse(&log, sb.bblog_shift).map_err(|source| ArrayError::Superblock {
            path: path.to_path_buf(),
            source,
        })?;
    let mut split = split(&device, sb.data_offset, member_sectors);
    split.capacity = room.saturating_sub(split.outside.entries_needed(sb.bblog_shift));
    Ok(split)
}

/// `device` (device sectors) as the engine's part and the rest.
fn split(device: &BadBlocks, data_offset: u64, member_sectors: u64) -> MemberBadBlocks {
    let data_end = data_offset.saturating_add(member_sectors);
    let mut split = MemberBadBlocks::default();
    for range in device.ranges() {
        let inside = range.start.max(data_offset)..range.end.min(data_end);
        if inside.is_empty() {
            split.outside.add(range.clone());
            continue;
        }
        split
            .data
            .add(inside.start - data_offset..inside.end - data_offset);
        split.outside.add(range.start..inside.start);
        split.outside.add(inside.end..range.end);
    }
    split
}

/// Writes `member`'s log — the engine's `data` ranges as they stand now, and what
/// lay `outside` the data area — and sets or clears `MD_FEATURE_BAD_BLOCKS` in `sb`,
/// which the caller writes next. A member without a log keeps none; a list that
/// does not fit (the engine adds only what fits) leaves the log as it was.
pub(crate) fn store(
    member: &dyn Member,
    sb: &mut Superblock,
    data: &BadBlocks,
    outside: &BadBlocks,
    path: &Path,
) -> Result<(), ArrayError> {
    let Some(at) = bad_block_log_sectors(sb) else {
        return Ok(());
    };
    let mut device = outside.clone();
    for range in data.ranges() {
        device.add(range.start + sb.data_offset..range.end + sb.data_offset);
    }
    let bytes = (at.end - at.start) as usize * SECTOR_BYTES as usize;
    let Ok(log) = device.encode(sb.bblog_shift, bytes) else {
        return Ok(());
    };
    member
        .write_at(&log, at.start * SECTOR_BYTES)
        .map_err(|e| io_error(path, e))?;
    if device.is_empty() {
        sb.feature_map &= !MD_FEATURE_BAD_BLOCKS;
    } else {
        sb.feature_map |= MD_FEATURE_BAD_BLOCKS;
    }
    Ok(())
}

/// How many sectors of its data area `member`'s bad block log lists (for `xraid
/// status` on an array that is not served).
pub fn listed_bad_sectors(
    member: &dyn Member,
    sb: &Superblock,
    member_sectors: u64,
    path: &Path,
) -> Result<u64, ArrayError> {
    let listed = load(member, sb, member_sectors, path)?;
    Ok(listed.data.sectors())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_split_at_the_edges_of_the_data_area() {
        let mut device = BadBlocks::new();
        device.add(16..24); // in the metadata
        device.add(2040..2056); // across the data area's start
        device.add(3000..3008); // inside
        device.add(4090..4100); // across its end
        let split = split(&device, 2048, 2048);
        let data: Vec<_> = split.data.ranges().to_vec();
        assert_eq!(data, vec![0..8, 952..960, 2042..2048]);
        let outside: Vec<_> = split.outside.ranges().to_vec();
        assert_eq!(outside, vec![16..24, 2040..2048, 4096..4100]);
    }
}
