//! md's bad block log: the sectors of one member that hold no good data (a write the
//! member refused, a read it could not answer and nobody could rewrite), kept in the
//! few sectors the superblock's `bblog_offset` and `bblog_size` point at, so that
//! they stay known across restarts (the kernel's `super_1_load` and `super_1_sync`,
//! mdadm's `--examine-badblocks`).
//!
//! On disk the log is an array of little-endian 64-bit entries: the low 10 bits the
//! length, the rest the first sector, both in blocks of `1 << bblog_shift` sectors and
//! counted from the start of the device (not of the data area). An entry of all ones
//! ends the list; md writes at most 512 blocks per entry. `MD_FEATURE_BAD_BLOCKS` in
//! the feature map says the list is not empty.

use std::ops::Range;

use crate::error::FormatError;
use crate::superblock::Superblock;

/// md writes at most this many blocks in one entry (the kernel's `BB_MAX_LEN`).
const MAX_ENTRY_BLOCKS: u64 = 512;
const LENGTH_BITS: u32 = 10;
const LENGTH_MASK: u64 = (1 << LENGTH_BITS) - 1;
const END_OF_LIST: u64 = u64::MAX;
const ENTRY_BYTES: usize = 8;
/// Past this, a block's first sector would not fit in 64 bits.
const MAX_SHIFT: u8 = 53;

/// One member's bad sectors, counted from the start of the device: sorted, each
/// range apart from the next (touching ranges are merged).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BadBlocks {
    ranges: Vec<Range<u64>>,
}

impl BadBlocks {
    pub fn new() -> BadBlocks {
        BadBlocks::default()
    }

    /// The list stored in `log` (the log's `bblog_size` sectors), with blocks of
    /// `1 << shift` sectors.
    pub fn parse(log: &[u8], shift: u8) -> Result<BadBlocks, FormatError> {
        check_shift(shift)?;
        let mut bad = BadBlocks::new();
        for (index, bytes) in log.chunks_exact(ENTRY_BYTES).enumerate() {
            let mut entry = [0u8; ENTRY_BYTES];
            entry.copy_from_slice(bytes);
            let entry = u64::from_le_bytes(entry);
            if entry == END_OF_LIST {
                break;
            }
            let blocks = entry & LENGTH_MASK;
            let first = entry >> LENGTH_BITS;
            let block = 1u64 << shift;
            let range = first
                .checked_mul(block)
                .zip(blocks.checked_mul(block))
                .and_then(|(start, len)| Some(start..start.checked_add(len)?))
                .filter(|r| !r.is_empty());
            let Some(range) = range else {
                return Err(FormatError::BadBlockEntry { index, entry });
            };
            bad.add(range);
        }
        Ok(bad)
    }

    /// The log's bytes (`bytes` of them, a whole number of sectors) holding this list
    /// with blocks of `1 << shift` sectors; ranges not on block boundaries grow to
    /// them. Fails when the list needs more entries than fit.
    pub fn encode(&self, shift: u8, bytes: usize) -> Result<Vec<u8>, FormatError> {
        check_shift(shift)?;
        let entries = self.entries(shift);
        let capacity = bytes / ENTRY_BYTES;
        if entries.len() > capacity {
            return Err(FormatError::BadBlockLogFull {
                needed: entries.len(),
                capacity,
            });
        }
        let mut log = vec![0xff; bytes];
        for (slot, entry) in log.chunks_exact_mut(ENTRY_BYTES).zip(&entries) {
            slot.copy_from_slice(&entry.to_le_bytes());
        }
        Ok(log)
    }

    /// How many log entries the list takes with blocks of `1 << shift` sectors.
    pub fn entries_needed(&self, shift: u8) -> usize {
        self.entries(shift).len()
    }

    fn entries(&self, shift: u8) -> Vec<u64> {
        let block = 1u64 << shift.min(MAX_SHIFT);
        let mut entries = Vec::new();
        let mut last_end: Option<u64> = None;
        for range in &self.ranges {
            let mut first = range.start / block;
            let end = range.end.div_ceil(block);
            // Two ranges within one block share it: the block is written once.
            if let Some(prev) = last_end {
                first = first.max(prev);
            }
            while first < end {
                let blocks = (end - first).min(MAX_ENTRY_BLOCKS);
                entries.push((first << LENGTH_BITS) | blocks);
                first += blocks;
            }
            last_end = Some(end);
        }
        entries
    }

    /// Marks `range` bad. Returns whether the list changed.
    pub fn add(&mut self, range: Range<u64>) -> bool {
        if range.is_empty() || self.covers(range.clone()) {
            return false;
        }
        let (mut start, mut end) = (range.start, range.end);
        // Every range that touches or overlaps the new one is merged into it.
        let first = self.ranges.partition_point(|r| r.end < start);
        let last = self.ranges.partition_point(|r| r.start <= end);
        for r in &self.ranges[first..last] {
            start = start.min(r.start);
            end = end.max(r.end);
        }
        self.ranges.splice(first..last, std::iter::once(start..end));
        true
    }

    /// Marks `range` good again (written since). Returns whether the list changed.
    pub fn clear(&mut self, range: Range<u64>) -> bool {
        if range.is_empty() || !self.overlaps(range.clone()) {
            return false;
        }
        let first = self.ranges.partition_point(|r| r.end <= range.start);
        let last = self.ranges.partition_point(|r| r.start < range.end);
        let mut kept = Vec::with_capacity(2);
        let (head, tail) = (&self.ranges[first], &self.ranges[last - 1]);
        if head.start < range.start {
            kept.push(head.start..range.start);
        }
        if tail.end > range.end {
            kept.push(range.end..tail.end);
        }
        self.ranges.splice(first..last, kept);
        true
    }

    /// Whether any sector of `range` is bad.
    pub fn overlaps(&self, range: Range<u64>) -> bool {
        let at = self.ranges.partition_point(|r| r.end <= range.start);
        self.ranges
            .get(at)
            .is_some_and(|r| r.start < range.end && !range.is_empty())
    }

    /// Whether every sector of `range` is bad.
    pub fn covers(&self, range: Range<u64>) -> bool {
        let at = self.ranges.partition_point(|r| r.end <= range.start);
        self.ranges
            .get(at)
            .is_some_and(|r| r.start <= range.start && range.end <= r.end)
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The bad ranges, lowest first.
    pub fn ranges(&self) -> &[Range<u64>] {
        &self.ranges
    }

    /// How many sectors are bad.
    pub fn sectors(&self) -> u64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }

    /// The list as `mdadm --examine-badblocks` prints it (after its first line):
    /// one line per log entry, its first sector and its length.
    pub fn examine_lines(&self, shift: u8) -> Vec<String> {
        self.entries(shift)
            .iter()
            .map(|entry| {
                let first = (entry >> LENGTH_BITS) << shift;
                let count = (entry & LENGTH_MASK) << shift;
                format!("{first:>20} for {count} sectors")
            })
            .collect()
    }
}

fn check_shift(shift: u8) -> Result<(), FormatError> {
    if shift > MAX_SHIFT {
        return Err(FormatError::BadBlockShift { shift });
    }
    Ok(())
}

/// The most sectors of bad block log md reads (one page: the kernel refuses a member
/// whose superblock claims more).
pub const MAX_LOG_SECTORS: u16 = 8;

/// Where a member's bad block log lies, in sectors from the start of the device, if
/// its superblock reserves one.
pub fn bad_block_log_sectors(sb: &Superblock) -> Option<Range<u64>> {
    if sb.bblog_size == 0 || sb.bblog_offset == 0 {
        return None;
    }
    let start = sb
        .super_offset
        .checked_add_signed(i64::from(sb.bblog_offset as i32))?;
    Some(start..start.saturating_add(u64::from(sb.bblog_size)))
}
