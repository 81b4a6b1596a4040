//! xraid's integrity area: a CRC-32C per 4 KiB block of a member's data area, kept
//! where md ignores it — right after md's data area (`data_offset + data_size`), which
//! `mdadm --examine` shows as "Unused Space ... after". md knows nothing of it, so an
//! array with one still assembles under md; the header's event count tells xraid
//! whether anything else wrote the array since (see [`IntegrityHeader::trusts`]).
//!
//! Layout, in sectors from the area's start: one 4 KiB header, then table pages of
//! 4 KiB, each holding [`ENTRIES_PER_PAGE`] little-endian entries and a page checksum
//! in its last four bytes. Entry `b` describes data-area block `b` (member sectors
//! `8b..8b+8`).
//!
//! Values are chosen so that a never-written (sparse, all-zero) area is valid and says
//! "every block holds zeros", which is exactly what a new sparse member holds: an entry
//! is the block's CRC-32C xor the CRC-32C of a zero block, and a page's checksum is
//! xor'ed with that of a zero page at the same place. [`UNKNOWN`] marks a block whose
//! checksum is not known (written in part, or cut off by a crash); it is not checked.

use crate::superblock::Superblock;

/// Bytes of data one entry covers.
pub const BLOCK_BYTES: usize = 4096;
/// Sectors of data one entry covers.
pub const BLOCK_SECTORS: u64 = 8;
/// Bytes of one table page, and of the header.
pub const PAGE_BYTES: usize = 4096;
/// Sectors of one table page.
pub const PAGE_SECTORS: u64 = 8;
/// Entries in one table page (the last four bytes hold the page's checksum).
pub const ENTRIES_PER_PAGE: u64 = (PAGE_BYTES / 4 - 1) as u64;
/// Sectors of the header before the table.
pub const HEADER_SECTORS: u64 = 8;
/// An entry whose block's checksum is not known: nothing is checked there.
pub const UNKNOWN: u32 = u32::MAX;

const MAGIC: &[u8; 8] = b"XRAIDSUM";
const VERSION: u32 = 1;
/// Bytes of the header covered by its checksum (which follows them).
const HEADER_USED: usize = 96;

/// CRC-32C of `bytes` (Castagnoli, as iSCSI and ext4 use; hardware-accelerated).
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// CRC-32C of one block of zeros, computed once.
fn zero_block_crc() -> u32 {
    static ZERO: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ZERO.get_or_init(|| crc32c(&[0u8; BLOCK_BYTES]))
}

/// The entry for a block holding `block` (exactly [`BLOCK_BYTES`]): zero for a block of
/// zeros. In the one case in 2^32 where that is [`UNKNOWN`], the block goes unchecked.
pub fn block_entry(block: &[u8]) -> u32 {
    debug_assert_eq!(block.len(), BLOCK_BYTES);
    block_entry_of_crc(crc32c(block))
}

/// The entry of a block whose CRC-32C is `crc`.
pub(crate) fn block_entry_of_crc(crc: u32) -> u32 {
    crc ^ zero_block_crc()
}

/// Data-area blocks of a member whose data area is `data_sectors` long (a block cut
/// short at the end counts, and is never checked).
pub fn blocks_for(data_sectors: u64) -> u64 {
    data_sectors.div_ceil(BLOCK_SECTORS)
}

/// Table pages for `blocks` entries.
pub fn pages_for(blocks: u64) -> u64 {
    blocks.div_ceil(ENTRIES_PER_PAGE)
}

/// Sectors the whole area (header and table) takes for a data area of `data_sectors`.
pub fn area_sectors(data_sectors: u64) -> u64 {
    HEADER_SECTORS + pages_for(blocks_for(data_sectors)) * PAGE_SECTORS
}

/// The largest data area (a multiple of `unit` sectors) that leaves room for its own
/// integrity area within `avail` sectors; `None` if not even one unit fits.
pub fn data_sectors_with_area(avail: u64, unit: u64) -> Option<u64> {
    let unit = unit.max(BLOCK_SECTORS);
    // Start from the bound that ignores rounding, then step down until it fits.
    let mut data = avail.saturating_sub(HEADER_SECTORS) * ENTRIES_PER_PAGE * BLOCK_SECTORS
        / (ENTRIES_PER_PAGE * BLOCK_SECTORS + PAGE_SECTORS);
    data = data / unit * unit;
    while data > 0 && data + area_sectors(data) > avail {
        data -= unit;
    }
    (data > 0).then_some(data)
}

/// Where a member's integrity area starts, in sectors from the member's start: right
/// after md's data area, at a 4 KiB boundary.
pub fn area_start_sector(sb: &Superblock) -> u64 {
    (sb.data_offset + sb.data_size).next_multiple_of(BLOCK_SECTORS)
}

/// The integrity area's header: which array and device it belongs to, how many
/// entries it holds, and the event count of the last superblocks xraid wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntegrityHeader {
    pub set_uuid: [u8; 16],
    pub device_uuid: [u8; 16],
    /// Entries in the table (data-area blocks covered).
    pub blocks: u64,
    /// The event count of the superblocks xraid wrote with (or just before) this
    /// header. Anything else that writes the array (md) raises the superblock's count
    /// past it.
    pub events: u64,
}

/// Why an integrity header could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IntegrityError {
    #[error("no integrity header (this member keeps no checksums)")]
    NoHeader,
    #[error("integrity header checksum is wrong: the header is damaged")]
    BadChecksum,
    #[error("integrity header version {0} is not supported")]
    Version(u32),
}

impl IntegrityHeader {
    /// The header's bytes (a whole page).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; PAGE_BYTES];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(BLOCK_BYTES as u32).to_le_bytes());
        b[16..32].copy_from_slice(&self.set_uuid);
        b[32..48].copy_from_slice(&self.device_uuid);
        b[48..56].copy_from_slice(&self.blocks.to_le_bytes());
        b[56..64].copy_from_slice(&self.events.to_le_bytes());
        let crc = crc32c(&b[..HEADER_USED]);
        b[HEADER_USED..HEADER_USED + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads a header from the first bytes of an integrity area.
    pub fn parse(b: &[u8]) -> Result<IntegrityHeader, IntegrityError> {
        if b.len() < HEADER_USED + 4 || &b[..8] != MAGIC {
            return Err(IntegrityError::NoHeader);
        }
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        if u32_at(HEADER_USED) != crc32c(&b[..HEADER_USED]) {
            return Err(IntegrityError::BadChecksum);
        }
        let version = u32_at(8);
        if version != VERSION || u32_at(12) != BLOCK_BYTES as u32 {
            return Err(IntegrityError::Version(version));
        }
        let mut set_uuid = [0u8; 16];
        set_uuid.copy_from_slice(&b[16..32]);
        let mut device_uuid = [0u8; 16];
        device_uuid.copy_from_slice(&b[32..48]);
        Ok(IntegrityHeader {
            set_uuid,
            device_uuid,
            blocks: u64_at(48),
            events: u64_at(56),
        })
    }

    /// A header for the member whose superblock is `sb`, covering `blocks` entries.
    pub fn for_member(sb: &Superblock, blocks: u64) -> IntegrityHeader {
        IntegrityHeader {
            set_uuid: sb.set_uuid,
            device_uuid: sb.device_uuid,
            blocks,
            events: sb.events,
        }
    }

    /// Whether this header's table can be believed for the member whose superblock is
    /// `sb`: the same array and device, at least `blocks` entries, and no superblock
    /// written since by anything but xraid (which writes the header first).
    pub fn trusts(&self, sb: &Superblock, blocks: u64) -> bool {
        self.set_uuid == sb.set_uuid
            && self.device_uuid == sb.device_uuid
            && self.blocks >= blocks
            && self.events >= sb.events
    }
}

/// The checksum a table page at index `page` stores for its entries' bytes: their
/// CRC-32C xor that of zero entries (so zero entries give zero) xor a value of the
/// page's index, so that a page written to the wrong place fails. (Seeding the CRC
/// with the index would not do: CRC is affine, and the xor cancels any seed.)
fn page_crc(entries: &[u8], page: u64) -> u32 {
    debug_assert_eq!(entries.len(), PAGE_BYTES - 4);
    crc32c(entries) ^ zero_entries_crc() ^ crc32c(&page.to_le_bytes())
}

fn zero_entries_crc() -> u32 {
    static ZERO: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ZERO.get_or_init(|| crc32c(&[0u8; PAGE_BYTES - 4]))
}

/// The bytes of table page `page` holding `entries` (at most [`ENTRIES_PER_PAGE`];
/// the rest of the page says [`UNKNOWN`]). A page of zero entries is all zeros, as
/// a sparse area reads.
pub fn encode_page(entries: &[u32], page: u64) -> [u8; PAGE_BYTES] {
    debug_assert!(entries.len() as u64 <= ENTRIES_PER_PAGE);
    let mut b = [0u8; PAGE_BYTES];
    if entries.len() as u64 == ENTRIES_PER_PAGE && entries.iter().all(|&e| e == 0) {
        return b;
    }
    for (i, chunk) in b[..PAGE_BYTES - 4].chunks_exact_mut(4).enumerate() {
        let v = entries.get(i).copied().unwrap_or(UNKNOWN);
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    let crc = page_crc(&b[..PAGE_BYTES - 4], page);
    b[PAGE_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The entries of table page `page` read as `bytes`, or `None` when its checksum
/// fails (a damaged page: its blocks are unknown).
pub fn decode_page(bytes: &[u8], page: u64) -> Option<Vec<u32>> {
    if bytes.len() != PAGE_BYTES {
        return None;
    }
    let stored = u32::from_le_bytes(bytes[PAGE_BYTES - 4..].try_into().expect("4 bytes"));
    // A page never written (a sparse area) holds zeros: every block there is zeros.
    let never_written = stored == 0 && bytes.iter().all(|&b| b == 0);
    if !never_written && stored != page_crc(&bytes[..PAGE_BYTES - 4], page) {
        return None;
    }
    Some(
        bytes[..PAGE_BYTES - 4]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_block_and_a_zero_page_are_what_a_sparse_area_holds() {
        assert_eq!(block_entry(&[0u8; BLOCK_BYTES]), 0);
        let page = decode_page(&[0u8; PAGE_BYTES], 7).expect("a zero page is valid");
        assert!(page.iter().all(|&e| e == 0));
    }

    #[test]
    fn pages_round_trip_and_catch_damage_and_misplacement() {
        let entries: Vec<u32> = (0..ENTRIES_PER_PAGE as u32).map(|i| i * 7919).collect();
        let bytes = encode_page(&entries, 3);
        assert_eq!(decode_page(&bytes, 3), Some(entries));
        assert_eq!(
            decode_page(&bytes, 4),
            None,
            "a page written to another place"
        );
        let mut flipped = bytes;
        flipped[100] ^= 0x10;
        assert_eq!(decode_page(&flipped, 3), None);
        let zeros = encode_page(&[0; ENTRIES_PER_PAGE as usize], 9);
        assert!(
            zeros.iter().all(|&b| b == 0),
            "zero entries write a zero page"
        );
        assert!(decode_page(&zeros, 2).is_some());
    }

    #[test]
    fn a_short_page_says_unknown_past_its_entries() {
        let bytes = encode_page(&[1, 2, 3], 0);
        let back = decode_page(&bytes, 0).expect("valid");
        assert_eq!(&back[..3], &[1, 2, 3]);
        assert!(back[3..].iter().all(|&e| e == UNKNOWN));
    }

    #[test]
    fn the_header_round_trips_and_refuses_damage() {
        let h = IntegrityHeader {
            set_uuid: [1; 16],
            device_uuid: [2; 16],
            blocks: 123_456,
            events: 42,
        };
        let bytes = h.to_bytes();
        assert_eq!(IntegrityHeader::parse(&bytes), Ok(h));
        let mut bad = bytes.clone();
        bad[50] ^= 1;
        assert_eq!(
            IntegrityHeader::parse(&bad),
            Err(IntegrityError::BadChecksum)
        );
        assert_eq!(
            IntegrityHeader::parse(&[0u8; PAGE_BYTES]),
            Err(IntegrityError::NoHeader)
        );
    }

    #[test]
    fn the_data_area_leaves_room_for_its_table() {
        for avail in [2048u64, 2049, 100_000, 1 << 21, (1 << 31) + 12345] {
            for unit in [8u64, 128, 1024] {
                let Some(data) = data_sectors_with_area(avail, unit) else {
                    continue;
                };
                assert_eq!(data % unit, 0);
                assert!(data + area_sectors(data) <= avail, "{avail} {unit}");
                // And no larger data area would have fit.
                let more = data + unit;
                assert!(more + area_sectors(more) > avail, "{avail} {unit}");
            }
        }
        assert_eq!(data_sectors_with_area(16, 8), None);
    }

    #[test]
    fn entries_tell_blocks_apart() {
        let mut block = [0u8; BLOCK_BYTES];
        block[17] = 1;
        let a = block_entry(&block);
        block[17] = 0;
        block[18] = 1;
        assert_ne!(a, block_entry(&block));
        assert_ne!(a, 0);
    }
}
