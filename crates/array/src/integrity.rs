//! Integrity mode on the members (chosen at create): each member keeps xraid's
//! integrity area after md's data area — a header and a CRC-32C per 4 KiB block
//! (`xraid_format`'s layout) — and the engine checks every read against it.
//!
//! What is trusted at open: a member's table is believed when its header names this
//! array and this device and is at least as new as the member's superblock (xraid
//! writes the header before the superblock; anything else that writes the array, md,
//! raises the superblock's event count past it). Otherwise its checksums are unknown
//! (nothing is checked; reads learn them) and the whole table is written again. After
//! an unclean stop the engine forgets the checksums where writes may have been cut off
//! (see `xraid_engine`'s integrity module).

use std::path::Path;
use std::sync::Arc;

use xraid_engine::ChecksumTable;
use xraid_format::{
    area_sectors, area_start_sector, blocks_for, decode_page, IntegrityHeader, Superblock,
    ENTRIES_PER_PAGE, HEADER_SECTORS, PAGE_BYTES, UNKNOWN,
};
use xraid_layout::SECTOR_BYTES;
use xraid_member::Member;

use crate::scan::io_error;
use crate::ArrayError;

/// Bytes read at once while loading a table.
const LOAD_BYTES: usize = 1 << 20;

/// Where a member's checksum table starts, in bytes.
pub(crate) fn table_offset_bytes(sb: &Superblock) -> u64 {
    (area_start_sector(sb) + HEADER_SECTORS) * SECTOR_BYTES
}

/// Whether a member of `member_bytes` whose superblock is `sb` has room for the
/// integrity area of an array whose members hold `member_sectors` each.
pub(crate) fn has_room(member_bytes: u64, sb: &Superblock, member_sectors: u64) -> bool {
    sb.data_size >= member_sectors
        && (area_start_sector(sb) + area_sectors(member_sectors)) * SECTOR_BYTES <= member_bytes
}

/// md's data size for a member of an array with integrity: the largest multiple of
/// `unit` sectors after `data_offset` that leaves room for its integrity area.
pub(crate) fn data_sectors(member_bytes: u64, data_offset: u64, unit: u64) -> Option<u64> {
    let avail = (member_bytes / SECTOR_BYTES).checked_sub(data_offset)?;
    xraid_format::data_sectors_with_area(avail, unit)
}

/// The integrity header of a member, if it has a readable one.
pub(crate) fn read_header(
    member: &dyn Member,
    sb: &Superblock,
    path: &Path,
) -> Result<Option<IntegrityHeader>, ArrayError> {
    let at = area_start_sector(sb) * SECTOR_BYTES;
    if at + PAGE_BYTES as u64 > member.size_bytes() {
        return Ok(None);
    }
    let mut buf = vec![0u8; PAGE_BYTES];
    member
        .read_at(&mut buf, at)
        .map_err(|source| io_error(path, source))?;
    Ok(IntegrityHeader::parse(&buf).ok())
}

/// Writes a member's integrity header, saying its table is as new as superblock `sb`.
pub(crate) fn write_header(
    member: &dyn Member,
    sb: &Superblock,
    member_sectors: u64,
    path: &Path,
) -> Result<(), ArrayError> {
    put_header(
        member,
        sb,
        &IntegrityHeader::for_member(sb, blocks_for(member_sectors)),
        path,
    )
}

/// Writes `header` where the integrity area of the member with superblock `sb` starts.
fn put_header(
    member: &dyn Member,
    sb: &Superblock,
    header: &IntegrityHeader,
    path: &Path,
) -> Result<(), ArrayError> {
    member
        .write_at(&header.to_bytes(), area_start_sector(sb) * SECTOR_BYTES)
        .map_err(|source| io_error(path, source))
}

/// Before superblock `sb` replaces the one on `member`: a header that was current
/// stays current (the data did not change; only the array's bookkeeping did). A
/// header that was not is left behind, so its table stays untrusted.
pub(crate) fn keep_header_current(
    member: &dyn Member,
    sb: &Superblock,
    path: &Path,
) -> Result<(), ArrayError> {
    let Some(header) = read_header(member, sb, path)? else {
        return Ok(());
    };
    let Some(old) = crate::scan::read_superblock(member, path)? else {
        return Ok(());
    };
    if header.set_uuid != sb.set_uuid
        || header.device_uuid != sb.device_uuid
        || header.events < old.events
        || header.events >= sb.events
    {
        return Ok(());
    }
    let header = IntegrityHeader {
        events: sb.events,
        ..header
    };
    put_header(member, sb, &header, path)
}

/// Whether the member whose superblock is `sb` keeps checksums for its array.
pub(crate) fn keeps_checksums(
    member: &dyn Member,
    sb: &Superblock,
    path: &Path,
) -> Result<bool, ArrayError> {
    Ok(read_header(member, sb, path)?.is_some_and(|h| h.set_uuid == sb.set_uuid))
}

/// A member's table as the engine takes it, and whether all of it must be written
/// (its area on disk is not to be believed).
#[derive(Debug)]
pub(crate) struct LoadedTable {
    pub(crate) table: Arc<ChecksumTable>,
    pub(crate) write_all: bool,
}

/// Reads the table of a member with superblock `sb` (members of `member_sectors`), or
/// makes an unknown one when its header is missing, foreign or older than `sb`.
pub(crate) fn load(
    member: &dyn Member,
    sb: &Superblock,
    member_sectors: u64,
    path: &Path,
) -> Result<LoadedTable, ArrayError> {
    let blocks = blocks_for(member_sectors);
    let trusted = read_header(member, sb, path)?.is_some_and(|h| h.trusts(sb, blocks));
    if !trusted {
        return Ok(unknown(member_sectors));
    }
    let pages = xraid_format::pages_for(blocks);
    let mut entries = Vec::with_capacity(usize::try_from(blocks).unwrap_or(0));
    let mut damaged = false;
    let start = table_offset_bytes(sb);
    let mut buf = vec![0u8; LOAD_BYTES];
    let mut page = 0u64;
    while page < pages {
        let n = (pages - page).min((LOAD_BYTES / PAGE_BYTES) as u64);
        let len = usize::try_from(n).unwrap_or(0) * PAGE_BYTES;
        member
            .read_at(&mut buf[..len], start + page * PAGE_BYTES as u64)
            .map_err(|source| io_error(path, source))?;
        for (i, bytes) in buf[..len].chunks_exact(PAGE_BYTES).enumerate() {
            let index = page + i as u64;
            let want = (blocks - index * ENTRIES_PER_PAGE).min(ENTRIES_PER_PAGE) as usize;
            match decode_page(bytes, index) {
                Some(values) => entries.extend_from_slice(&values[..want]),
                None => {
                    damaged = true;
                    entries.extend(std::iter::repeat_n(UNKNOWN, want));
                }
            }
        }
        page += n;
    }
    Ok(LoadedTable {
        table: Arc::new(ChecksumTable::new(entries)),
        write_all: damaged,
    })
}

/// A table of unknown checksums for a device whose area says nothing useful (a
/// newcomer, a member another system wrote), written whole at the next barrier.
pub(crate) fn unknown(member_sectors: u64) -> LoadedTable {
    LoadedTable {
        table: Arc::new(ChecksumTable::unknown(blocks_for(member_sectors))),
        write_all: true,
    }
}

/// Whether the assembled array keeps checksums (some present member has an integrity
/// header naming it).
pub fn array_keeps_checksums(assembled: &crate::Assembled) -> Result<bool, ArrayError> {
    for m in assembled.roles.iter().flatten() {
        if keeps_checksums(&m.member, &m.superblock, &m.path)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Bytes a newcomer must have to join an array whose data starts at `data_offset`
/// and whose members hold `member_sectors` (and, with integrity, its area after).
pub(crate) fn newcomer_need_bytes(data_offset: u64, member_sectors: u64, integrity: bool) -> u64 {
    let area = if integrity {
        area_sectors(member_sectors)
    } else {
        0
    };
    (data_offset + member_sectors + area) * SECTOR_BYTES
}

/// md's data size for a newcomer of `member_bytes`: all it has after `data_offset`,
/// or with integrity what leaves room for the integrity area after it.
pub(crate) fn newcomer_data_size(member_bytes: u64, data_offset: u64, integrity: bool) -> u64 {
    let all = (member_bytes / SECTOR_BYTES).saturating_sub(data_offset);
    if integrity {
        data_sectors(member_bytes, data_offset, xraid_format::BLOCK_SECTORS).unwrap_or(all)
    } else {
        all
    }
}
