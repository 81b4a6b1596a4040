//! The internal write-intent bitmap as the array keeps it: written blank on each
//! member at create, read from the freshest member at open and handed to the engine
//! (which sets and clears its bits), and its superblock's event counts kept in step
//! with the md superblocks'.

use std::path::Path;

use xraid_engine::{Nanos, WriteIntentSetup, INTENT_HEADER_BYTES};
use xraid_format::{
    bitmap_start_sector, bitmap_sync_sectors, BitmapBits, BitmapSuper, Superblock, BITMAP_STALE,
    BITMAP_SUPER_BYTES,
};
use xraid_layout::SECTOR_BYTES;
use xraid_member::Member;

use crate::scan::io_error;
use crate::ArrayError;

/// Bytes the engine writes at once where the bitmap starts on a 4 KiB boundary
/// (mdadm's placement): whole pages, so members opened with O_DIRECT take them.
const PAGE_BYTES: usize = 4096;

/// Largest bitmap area read into memory. md's own bitmaps stay far below this (a
/// 64 MiB chunk over a 1 PiB member is 2 MiB of bits); a superblock claiming more is
/// refused rather than trusted with an allocation.
const MAX_BITMAP_BYTES: u64 = 64 << 20;

/// The bitmap an open array keeps, as found at open.
#[derive(Debug, Clone)]
pub(crate) struct KeptBitmap {
    pub(crate) bsb: BitmapSuper,
}

impl KeptBitmap {
    /// The bitmap superblock to write with superblocks of event count `events`; a
    /// whole array also moves `events_cleared` up (md: a member that left at or
    /// after this count missed only chunks whose bits are set).
    pub(crate) fn header(&mut self, events: u64, whole: bool) -> [u8; INTENT_HEADER_BYTES] {
        self.bsb.events = events;
        if whole {
            self.bsb.events_cleared = events;
        }
        self.bsb.state &= !BITMAP_STALE;
        self.bsb.to_bytes()
    }
}

/// Where `member`'s bitmap starts (superblock `sb`) and the bytes of its bitmap
/// superblock; `None` when the superblock says it keeps none.
fn read_head(
    member: &dyn Member,
    sb: &Superblock,
    path: &Path,
) -> Result<Option<(u64, Vec<u8>)>, ArrayError> {
    let Some(start) = offset_bytes(sb) else {
        return Ok(None);
    };
    let mut head = vec![0u8; BITMAP_SUPER_BYTES];
    member
        .read_at(&mut head, start)
        .map_err(|e| io_error(path, e))?;
    Ok(Some((start, head)))
}

/// `len` bytes of the bitmap area from `start`; `None` past [`MAX_BITMAP_BYTES`].
fn read_area(
    member: &dyn Member,
    start: u64,
    len: u64,
    path: &Path,
) -> Result<Option<Vec<u8>>, ArrayError> {
    let Some(len) = usize::try_from(len)
        .ok()
        .filter(|&l| l as u64 <= MAX_BITMAP_BYTES)
    else {
        return Ok(None);
    };
    let mut area = vec![0u8; len];
    member
        .read_at(&mut area, start)
        .map_err(|e| io_error(path, e))?;
    Ok(Some(area))
}

/// The bytes of `member`'s bitmap (superblock `sb`): its superblock and bits, in
/// whole sectors; `None` without a bitmap that names this array.
pub(crate) fn read_image(
    member: &dyn Member,
    sb: &Superblock,
    path: &Path,
) -> Result<Option<Vec<u8>>, ArrayError> {
    let Some((start, head)) = read_head(member, sb, path)? else {
        return Ok(None);
    };
    let Ok(bsb) = BitmapSuper::parse(&head) else {
        return Ok(None);
    };
    // Only a bitmap that lies where the superblock leaves room for it is copied.
    if bsb.uuid != sb.set_uuid || bsb.check_member(sb).is_err() {
        return Ok(None);
    }
    read_area(member, start, bsb.on_disk_bytes(), path)
}

/// Gives a newcomer (superblock `sb`, with its final event count) a copy of the
/// array's bitmap `image`, so that md's tools and the next open find a bitmap, not
/// stale, with the array's dirty bits.
pub(crate) fn write_copy(
    member: &dyn Member,
    sb: &Superblock,
    image: &[u8],
    path: &Path,
) -> Result<(), ArrayError> {
    let Some(start) = offset_bytes(sb) else {
        return Ok(());
    };
    let Ok(mut bsb) = BitmapSuper::parse(image) else {
        return Ok(());
    };
    bsb.events = sb.events;
    let mut image = image.to_vec();
    image[..BITMAP_SUPER_BYTES].copy_from_slice(&bsb.to_bytes());
    member
        .write_at(&image, start)
        .map_err(|e| io_error(path, e))
}

/// Moves the event count of `member`'s bitmap (superblock `sb`, about to be rewritten
/// with `events`) along with its superblock, as md does whenever it writes superblocks:
/// a bitmap left behind would read as stale and cost a full resync. A bitmap already
/// stale (or missing) is left so.
pub(crate) fn follow_events(
    member: &dyn Member,
    sb: &Superblock,
    events: u64,
    path: &Path,
) -> Result<(), ArrayError> {
    let Some((start, head)) = read_head(member, sb, path)? else {
        return Ok(());
    };
    let Ok(mut bsb) = BitmapSuper::parse(&head) else {
        return Ok(());
    };
    if bsb.uuid != sb.set_uuid || bsb.is_stale_for(sb) {
        return Ok(());
    }
    bsb.events = events;
    member
        .write_at(&bsb.to_bytes(), start)
        .map_err(|e| io_error(path, e))
}

/// Whether a member that left the array with event count `events` can catch up from
/// the bitmap of `freshest` (a present member whose superblock is `sb`) instead of
/// being rebuilt whole — md's re-add: the bitmap is not stale and no bit has been
/// cleared since the member left (bits are cleared only on a whole array, and
/// `events_cleared` follows them).
pub(crate) fn covers_member_since(
    freshest: &dyn Member,
    sb: &Superblock,
    events: u64,
    path: &Path,
) -> bool {
    let Ok(Some((_, head))) = read_head(freshest, sb, path) else {
        return false;
    };
    BitmapSuper::parse(&head).is_ok_and(|bsb| {
        bsb.uuid == sb.set_uuid && !bsb.is_stale_for(sb) && events >= bsb.events_cleared
    })
}

/// Where the bitmap of the member with superblock `sb` starts, in bytes.
pub(crate) fn offset_bytes(sb: &Superblock) -> Option<u64> {
    bitmap_start_sector(sb).map(|s| s * SECTOR_BYTES)
}

/// Reads the bitmap of `member` (superblock `sb`, freshest of its array) and makes
/// the engine's setup of it: the image of the bitmap area (the whole space mdadm
/// reserves, written in pages, when it starts on a page boundary; else in sectors),
/// its bits (all set, and written out, when the bitmap is stale: md then resyncs
/// everything), and md's quiet time before clearing.
pub(crate) fn load(
    member: &dyn Member,
    sb: &Superblock,
    path: &Path,
) -> Result<Option<(KeptBitmap, WriteIntentSetup)>, ArrayError> {
    let Some((start, head)) = read_head(member, sb, path)? else {
        return Ok(None);
    };
    let bad = |source| ArrayError::Superblock {
        path: path.to_path_buf(),
        source,
    };
    let mut bsb = BitmapSuper::parse(&head).map_err(bad)?;
    // md takes the sync range from the array, not from the bitmap (md_bitmap_read_sb
    // overwrites it); bits counted over another range would mean other chunks, so
    // such a bitmap is taken as all dirty.
    let expected = bitmap_sync_sectors(sb.level, sb.layout, sb.raid_disks, sb.chunksize, sb.size)
        .map_err(bad)?;
    let resized = bsb.sync_size != expected;
    bsb.sync_size = expected;
    bsb.check_member(sb).map_err(bad)?;
    let paged = sb.bitmap_offset % 8 == 0 && start.is_multiple_of(PAGE_BYTES as u64);
    let (len, block_bytes) = if paged {
        (bsb.reserved_bytes(), PAGE_BYTES)
    } else {
        (bsb.on_disk_bytes(), 512)
    };
    let mut image =
        read_area(member, start, len, path)?.ok_or_else(|| ArrayError::Unsupported {
            path: path.to_path_buf(),
            what: format!("a write-intent bitmap of {len} bytes (at most {MAX_BITMAP_BYTES})"),
        })?;
    let stale = bsb.is_stale_for(sb) || resized;
    if stale {
        // Every chunk may differ: all bits set, as md does with an old bitmap.
        let mut bits =
            BitmapBits::parse(&image[BITMAP_SUPER_BYTES..], bsb.chunks()).map_err(bad)?;
        bits.set_range(0..bsb.chunks());
        let bytes = bits.as_bytes();
        image[BITMAP_SUPER_BYTES..BITMAP_SUPER_BYTES + bytes.len()].copy_from_slice(bytes);
    }
    let mut kept = KeptBitmap { bsb };
    let header = kept.header(sb.events, false);
    image[..BITMAP_SUPER_BYTES].copy_from_slice(&header);
    let setup = WriteIntentSetup {
        chunks: kept.bsb.chunks(),
        chunk_sectors: kept.bsb.chunk_sectors(),
        block_bytes,
        clear_after: Nanos(u64::from(kept.bsb.daemon_sleep) * 1_000_000_000),
        rewrite: stale,
        image,
    };
    Ok(Some((kept, setup)))
}
