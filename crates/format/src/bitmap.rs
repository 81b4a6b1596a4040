//! md's internal write-intent bitmap as metadata 1.2 keeps it on each member: the
//! 256-byte bitmap superblock (`bitmap_super_t` of the kernel's
//! `drivers/md/md-bitmap.h`), the bit array after it (one bit per bitmap chunk, set
//! when the chunk may differ between members), where the two sit on a member, how big
//! they are, and the choices `mdadm --create --bitmap=internal` makes for a new array.
//!
//! Nothing here does I/O: callers read the bytes at [`bitmap_start_sector`] of a member
//! and hand them to [`parse_bitmap`], and write back what [`bitmap_image`] or
//! [`new_member_bitmap`] returns at the same place.

use std::ops::Range;

use crate::constants::{MD_FEATURE_BITMAP_OFFSET, SUPERBLOCK_OFFSET_SECTORS};
use crate::create::{bitmap_space, NewArray};
use crate::error::FormatError;
use crate::superblock::{bytes_at, image_len, put, u32_at, u64_at, Superblock};

/// `BITMAP_MAGIC` ("bitm" read as a little-endian `u32`).
pub const BITMAP_MAGIC: u32 = 0x6d74_6962;

/// `BITMAP_MAJOR_HI`: the little-endian, non-clustered bitmap, which mdadm writes for
/// every 1.x internal bitmap and the only version this crate reads.
pub const BITMAP_MAJOR_HI: u32 = 4;

/// Size of the bitmap superblock; the bits follow it directly.
pub const BITMAP_SUPER_BYTES: usize = 256;

/// `state` bit: the bitmap is out of date (md ignores its bits and resyncs everything).
pub const BITMAP_STALE: u32 = 1 << 1;
/// `state` bit: a write to the bitmap failed.
pub const BITMAP_WRITE_ERROR: u32 = 1 << 2;
/// `state` bit: the bitmap is used for the first time and is to be cleared.
pub const BITMAP_FIRST_USE: u32 = 1 << 3;
/// `state` bit: the bitmap has been cleared.
pub const BITMAP_CLEARED: u32 = 1 << 4;
/// `state` bit: md's bitmap daemon was busy.
pub const BITMAP_DAEMON_BUSY: u32 = 1 << 5;

/// `state` bits md can leave on disk: the kernel stores its in-memory flags word, and
/// these are the flags it has defined since the bit array became little-endian. The
/// host-endian flag (bit 15) would make the bit order depend on the machine that wrote
/// it, so it is refused with the rest.
const KNOWN_STATE: u32 =
    BITMAP_STALE | BITMAP_WRITE_ERROR | BITMAP_FIRST_USE | BITMAP_CLEARED | BITMAP_DAEMON_BUSY;

/// `bitmap_offset` mdadm gives a metadata-1.2 bitmap: 4 KiB after the superblock.
pub const BITMAP_OFFSET_SECTORS: i32 = 8;

/// mdadm's default `daemon_sleep` (`DEFAULT_BITMAP_DELAY`), seconds.
pub const DEFAULT_DAEMON_SLEEP: u32 = 5;

/// Largest `write_behind` md accepts (`COUNTER_MAX` of its 14-bit write counters).
pub const MAX_WRITE_BEHIND: u32 = 16383;

/// The kernel refuses bitmap chunks smaller than a sector.
const MIN_CHUNK_BYTES: u32 = 512;

/// mdadm's smallest chunk when it picks one: "sub-page chunks don't work yet".
const MDADM_MIN_CHUNK: u128 = 4096;

/// mdadm's default chunk for internal bitmaps: 64 MiB, or more when the bits would not
/// fit in the space kept for them.
const MDADM_DEFAULT_CHUNK: u128 = 64 << 20;

/// Levels md keeps a bitmap for: raid1, raid4/5/6 and raid10 (linear and raid0 have no
/// redundancy to resync; mdadm refuses a bitmap for them).
const BITMAP_LEVELS: [i32; 5] = [1, 4, 5, 6, 10];

/// Bitmap chunks needed to cover `sync_sectors` (mdadm's `bitmap_bits`, the kernel's
/// `DIV_ROUND_UP(sectors, chunk_sectors)`); 0 for a zero chunk size.
pub fn bitmap_chunks(sync_sectors: u64, chunk_bytes: u32) -> u64 {
    if chunk_bytes == 0 {
        return 0;
    }
    // In u128 so that no sync size overflows the byte count; only a chunk below 512
    // bytes could make the quotient exceed u64.
    let chunks = (u128::from(sync_sectors) * 512).div_ceil(u128::from(chunk_bytes));
    u64::try_from(chunks).unwrap_or(u64::MAX)
}

/// Bytes of superblock plus bits, before any rounding.
fn raw_bytes(chunks: u64) -> u64 {
    BITMAP_SUPER_BYTES as u64 + chunks.div_ceil(8)
}

/// Bytes md reads and writes for a bitmap of `chunks` bits: superblock and bits
/// rounded up to whole 512-byte sectors (the kernel writes the last page only up to
/// the last sector holding bits).
pub fn bitmap_bytes(chunks: u64) -> u64 {
    raw_bytes(chunks).div_ceil(512) * 512
}

/// Bytes mdadm reserves for a bitmap of `chunks` bits: superblock and bits rounded up
/// to 4 KiB (mdadm's `calc_bitmap_size(bms, 4096)`), which is also what it writes
/// for a bitmap on a 4 KiB boundary and what it counts when it places the bad-block
/// log after the bitmap.
pub fn bitmap_reserved_bytes(chunks: u64) -> u64 {
    raw_bytes(chunks).div_ceil(4096) * 4096
}

/// md's bitmap superblock, field for field (names as in `md-bitmap.h`). Integers are
/// host values; the on-disk form is little-endian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitmapSuper {
    /// [`BITMAP_MAGIC`].
    pub magic: u32,
    /// [`BITMAP_MAJOR_HI`].
    pub version: u32,
    /// The array's UUID, the superblock's `set_uuid` byte for byte.
    pub uuid: [u8; 16],
    /// Event count of the last bitmap update; md treats a bitmap older than the
    /// superblock as stale (see [`BitmapSuper::is_stale_for`]).
    pub events: u64,
    /// Event count when bits were last cleared: a member whose events are at least
    /// this can be brought up to date from the bitmap instead of fully.
    pub events_cleared: u64,
    /// Sectors the bitmap covers: each member's used size (raid1/4/5/6), the array
    /// size (raid10).
    pub sync_size: u64,
    /// `BITMAP_*` state bits.
    pub state: u32,
    /// Bytes of data per bit: a power of two, at least 512.
    pub chunksize: u32,
    /// Seconds between md's sweeps that clear bits of chunks no longer written.
    pub daemon_sleep: u32,
    /// Most writes to write-mostly members md lets run behind; 0 for none.
    pub write_behind: u32,
    /// Sectors reserved for the bitmap; 0 (what mdadm writes) lets md work it out.
    pub sectors_reserved: u32,
    /// Cluster nodes (clustered bitmaps only); 0.
    pub nodes: u32,
    /// Cluster name (clustered bitmaps only), NUL-padded; kept so that parsing and
    /// writing round-trip.
    pub cluster_name: [u8; 64],
    /// Reserved, written as 0 by md; kept so that parsing and writing round-trip.
    pub pad: [u8; 120],
}

impl BitmapSuper {
    /// Parses the 256 bytes at the start of a bitmap (more may be passed; the rest is
    /// ignored).
    ///
    /// Checks the fields in the kernel's order (magic, version, chunk size, daemon
    /// sleep, write-behind), then what this crate relies on: known state bits, no
    /// cluster nodes, a sync size whose bit count is representable, and a reserved
    /// size (when given) that holds the bits. `uuid` and `events` only mean something
    /// next to the array's superblock: [`BitmapSuper::check_member`] and
    /// [`BitmapSuper::is_stale_for`] compare them. `events_cleared` may hold any
    /// count; `cluster_name` and `pad` are kept as found.
    pub fn parse(buf: &[u8]) -> Result<BitmapSuper, FormatError> {
        if buf.len() < BITMAP_SUPER_BYTES {
            return Err(FormatError::BitmapTooShort {
                len: buf.len(),
                needed: BITMAP_SUPER_BYTES,
            });
        }
        let bsb = BitmapSuper {
            magic: u32_at(buf, 0),
            version: u32_at(buf, 4),
            uuid: bytes_at(buf, 8),
            events: u64_at(buf, 24),
            events_cleared: u64_at(buf, 32),
            sync_size: u64_at(buf, 40),
            state: u32_at(buf, 48),
            chunksize: u32_at(buf, 52),
            daemon_sleep: u32_at(buf, 56),
            write_behind: u32_at(buf, 60),
            sectors_reserved: u32_at(buf, 64),
            nodes: u32_at(buf, 68),
            cluster_name: bytes_at(buf, 72),
            pad: bytes_at(buf, 136),
        };
        bsb.check()?;
        Ok(bsb)
    }

    /// The field checks of [`BitmapSuper::parse`].
    fn check(&self) -> Result<(), FormatError> {
        if self.magic != BITMAP_MAGIC {
            return Err(FormatError::NotBitmap { found: self.magic });
        }
        if self.version != BITMAP_MAJOR_HI {
            return Err(FormatError::UnsupportedBitmapVersion {
                found: self.version,
            });
        }
        if self.chunksize < MIN_CHUNK_BYTES || !self.chunksize.is_power_of_two() {
            return Err(FormatError::BadBitmapChunkSize {
                chunksize: self.chunksize,
            });
        }
        if self.daemon_sleep == 0 {
            return Err(FormatError::BitmapDaemonSleepZero);
        }
        if self.write_behind > MAX_WRITE_BEHIND {
            return Err(FormatError::BitmapWriteBehindTooLarge {
                write_behind: self.write_behind,
                max: MAX_WRITE_BEHIND,
            });
        }
        if self.state & !KNOWN_STATE != 0 {
            return Err(FormatError::UnknownBitmapState { state: self.state });
        }
        if self.nodes != 0 {
            return Err(FormatError::ClusteredBitmap { nodes: self.nodes });
        }
        // Byte offsets of chunks are sector * 512; past this they do not fit in u64.
        if self.sync_size > u64::MAX / 512 {
            return Err(FormatError::BitmapSyncSizeTooLarge {
                sync_size: self.sync_size,
            });
        }
        // md shrinks its view of the bitmap to the reserved space by growing the chunk
        // size, which would change what every bit means.
        let needed = bitmap_bytes(self.chunks()).div_ceil(512);
        if self.sectors_reserved != 0 && u64::from(self.sectors_reserved) < needed {
            return Err(FormatError::BitmapReservedTooSmall {
                sectors_reserved: self.sectors_reserved,
                needed,
            });
        }
        Ok(())
    }

    /// The 256 bytes to write at the start of the bitmap.
    pub fn to_bytes(&self) -> [u8; BITMAP_SUPER_BYTES] {
        let mut out = [0u8; BITMAP_SUPER_BYTES];
        put(&mut out, 0, &self.magic.to_le_bytes());
        put(&mut out, 4, &self.version.to_le_bytes());
        put(&mut out, 8, &self.uuid);
        put(&mut out, 24, &self.events.to_le_bytes());
        put(&mut out, 32, &self.events_cleared.to_le_bytes());
        put(&mut out, 40, &self.sync_size.to_le_bytes());
        put(&mut out, 48, &self.state.to_le_bytes());
        put(&mut out, 52, &self.chunksize.to_le_bytes());
        put(&mut out, 56, &self.daemon_sleep.to_le_bytes());
        put(&mut out, 60, &self.write_behind.to_le_bytes());
        put(&mut out, 64, &self.sectors_reserved.to_le_bytes());
        put(&mut out, 68, &self.nodes.to_le_bytes());
        put(&mut out, 72, &self.cluster_name);
        put(&mut out, 136, &self.pad);
        out
    }

    /// The bitmap superblock of a new member whose superblock is `sb` (with its final
    /// `events`), as mdadm makes it for `choice`: this array's UUID, the superblock's
    /// event count (md takes a bitmap whose count is below the superblock's as stale),
    /// `events_cleared` equal to it (all bits start clear), state 0, no reserved size
    /// given (mdadm leaves it to md).
    pub fn for_member(sb: &Superblock, choice: &BitmapChoice) -> BitmapSuper {
        BitmapSuper {
            magic: BITMAP_MAGIC,
            version: BITMAP_MAJOR_HI,
            uuid: sb.set_uuid,
            events: sb.events,
            events_cleared: sb.events,
            sync_size: choice.sync_sectors,
            state: 0,
            chunksize: choice.chunk_bytes,
            daemon_sleep: choice.daemon_sleep,
            write_behind: choice.write_behind,
            sectors_reserved: 0,
            nodes: 0,
            cluster_name: [0; 64],
            pad: [0; 120],
        }
    }

    /// Number of bits: chunks of `chunksize` bytes covering `sync_size` sectors.
    pub fn chunks(&self) -> u64 {
        bitmap_chunks(self.sync_size, self.chunksize)
    }

    /// Sectors of data per bit.
    pub fn chunk_sectors(&self) -> u64 {
        u64::from(self.chunksize / 512)
    }

    /// The chunk (bit) holding `sector` of the sync range; callers check that it is
    /// below [`BitmapSuper::chunks`].
    pub fn chunk_of(&self, sector: u64) -> u64 {
        if self.chunksize == 0 {
            return 0;
        }
        let chunk = u128::from(sector) * 512 / u128::from(self.chunksize);
        u64::try_from(chunk).unwrap_or(u64::MAX)
    }

    /// Sectors of the sync range that chunk `chunk` covers, cut at `sync_size`.
    pub fn chunk_range(&self, chunk: u64) -> Range<u64> {
        let per = self.chunk_sectors();
        let start = chunk.saturating_mul(per).min(self.sync_size);
        let end = start.saturating_add(per).min(self.sync_size);
        start..end
    }

    /// Bytes md reads and writes for this bitmap ([`bitmap_bytes`]).
    pub fn on_disk_bytes(&self) -> u64 {
        bitmap_bytes(self.chunks())
    }

    /// Bytes mdadm reserves for this bitmap ([`bitmap_reserved_bytes`]).
    pub fn reserved_bytes(&self) -> u64 {
        bitmap_reserved_bytes(self.chunks())
    }

    /// Whether md would ignore the bits and resync everything: the bitmap says it is
    /// stale, or its event count is behind the superblock's.
    pub fn is_stale_for(&self, sb: &Superblock) -> bool {
        self.state & BITMAP_STALE != 0 || self.events < sb.events
    }

    /// Checks this bitmap against the superblock of the member it was read from: the
    /// superblock says it has an internal bitmap, the UUIDs agree (md refuses the
    /// bitmap otherwise), and the bitmap lies after the superblock, ends before the
    /// data and does not overlap the bad-block log.
    ///
    /// The bitmap's extent is counted the way mdadm counts it: rounded up to 4 KiB
    /// when it starts on a 4 KiB boundary, else to 512 bytes.
    pub fn check_member(&self, sb: &Superblock) -> Result<(), FormatError> {
        if sb.feature_map & MD_FEATURE_BITMAP_OFFSET == 0 {
            return Err(FormatError::NoInternalBitmap);
        }
        if self.uuid != sb.set_uuid {
            return Err(FormatError::BitmapUuidMismatch {
                bitmap: self.uuid,
                array: sb.set_uuid,
            });
        }
        let sb_end = sb.super_offset + (image_len(sb.max_dev) as u64).div_ceil(512);
        let start = sb
            .super_offset
            .checked_add_signed(i64::from(sb.bitmap_offset))
            .unwrap_or(0);
        let bytes = if sb.bitmap_offset % 8 == 0 {
            self.reserved_bytes()
        } else {
            self.on_disk_bytes()
        };
        let end = start.saturating_add(bytes / 512);
        if sb.bitmap_offset <= 0 || start < sb_end || end > sb.data_offset {
            return Err(FormatError::BitmapOutsideGap {
                start,
                end,
                superblock_end: sb_end,
                data_offset: sb.data_offset,
            });
        }
        if let Some(bblog) = crate::badblocks::bad_block_log_sectors(sb) {
            if bblog.start < end && start < bblog.end {
                return Err(FormatError::BitmapOverlapsBadBlockLog {
                    start,
                    end,
                    bblog_start: bblog.start,
                    bblog_end: bblog.end,
                });
            }
        }
        Ok(())
    }
}

/// Sector (from the device start) where the internal bitmap of a member begins:
/// `super_offset + bitmap_offset`; `None` without `MD_FEATURE_BITMAP_OFFSET` (the same
/// bytes may then hold a PPL position) or when the sum leaves the device.
pub fn bitmap_start_sector(sb: &Superblock) -> Option<u64> {
    if sb.feature_map & MD_FEATURE_BITMAP_OFFSET == 0 {
        return None;
    }
    sb.super_offset
        .checked_add_signed(i64::from(sb.bitmap_offset))
}

/// Sectors a metadata-1.2 member leaves for its bitmap: from [`bitmap_start_sector`]
/// to the bad-block log when that comes after the bitmap's start, else to the data.
/// `None` without a bitmap, or when the bitmap would start outside that gap.
pub fn bitmap_room_sectors(sb: &Superblock) -> Option<u64> {
    let start = bitmap_start_sector(sb)?;
    let mut limit = sb.data_offset;
    if let Some(bblog) = crate::badblocks::bad_block_log_sectors(sb) {
        if bblog.start >= start {
            limit = limit.min(bblog.start);
        }
    }
    if start <= sb.super_offset {
        return None;
    }
    limit.checked_sub(start)
}

/// Sectors covered by the bitmap of an array: each member's used size for raid1 and
/// raid4/5/6, the array's size for raid10 (whose bitmap, like its resync, runs over
/// array sectors), counted as the kernel's `raid10_size` counts it so that md finds
/// the number it would write itself.
pub fn bitmap_sync_sectors(
    level: i32,
    layout: u32,
    raid_disks: u32,
    chunk_sectors: u32,
    member_sectors: u64,
) -> Result<u64, FormatError> {
    if !BITMAP_LEVELS.contains(&level) {
        return Err(FormatError::BitmapUnsupportedArray { level, layout });
    }
    if level != 10 {
        return Ok(member_sectors);
    }
    let near = u128::from(layout & 255);
    let far = u128::from((layout >> 8) & 255);
    let chunk = u128::from(chunk_sectors);
    if near == 0 || far == 0 || chunk == 0 {
        return Err(FormatError::BitmapUnsupportedArray { level, layout });
    }
    let chunks = u128::from(member_sectors) / chunk / far * u128::from(raid_disks) / near;
    u64::try_from(chunks * chunk).map_err(|_| FormatError::BitmapUnsupportedArray { level, layout })
}

/// The bitmap chunk mdadm picks for `--bitmap=internal` on a new metadata-1.2 array
/// (`add_internal_bitmap1`): room is what mdadm keeps after the superblock for a
/// member using `used_sectors` (`choose_bm_space`: 4 KiB, 64 KiB over 8 GiB, 128 KiB
/// over 200 GiB); the smallest chunk (from 4 KiB, doubling) whose bits for
/// `sync_sectors` fit in that room is the least allowed; without a request the chunk
/// is that or 64 MiB, whichever is larger.
///
/// `requested` asks for a chunk (in bytes) instead, like `--bitmap-chunk`: it must be a
/// power of two and at least the least allowed.
pub fn choose_bitmap_chunk(
    used_sectors: u64,
    sync_sectors: u64,
    requested: Option<u32>,
) -> Result<u32, FormatError> {
    let room = u128::from(bitmap_space(used_sectors));
    if room <= 1 {
        return Err(FormatError::NoRoomForBitmap { used_sectors });
    }
    let max_bits = (room * 512 - BITMAP_SUPER_BYTES as u128) * 8;
    let mut min_chunk = MDADM_MIN_CHUNK;
    // mdadm's estimate, one more than a whole division; halved (rounding up) with
    // every doubling of the chunk.
    let mut bits = u128::from(sync_sectors) * 512 / min_chunk + 1;
    while bits > max_bits {
        min_chunk *= 2;
        bits = bits.div_ceil(2);
    }
    let chunk = match requested {
        None => min_chunk.max(MDADM_DEFAULT_CHUNK),
        Some(c) if c < MIN_CHUNK_BYTES || !c.is_power_of_two() => {
            return Err(FormatError::BadBitmapChunkSize { chunksize: c });
        }
        Some(c) if u128::from(c) < min_chunk => {
            return Err(FormatError::BitmapChunkTooSmall {
                chunksize: c,
                min: u64::try_from(min_chunk).unwrap_or(u64::MAX),
            });
        }
        Some(c) => u128::from(c),
    };
    u32::try_from(chunk).map_err(|_| FormatError::BitmapChunkTooLarge {
        sync_sectors,
        chunk: u64::try_from(chunk).unwrap_or(u64::MAX),
    })
}

/// How the internal bitmap of a new array is made: what
/// `mdadm --create --bitmap=internal` decides, resolved to numbers so that every
/// member gets the same bitmap. Make one with [`BitmapChoice::internal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitmapChoice {
    /// Bytes of data per bit: a power of two, at least 4096.
    pub chunk_bytes: u32,
    /// Sectors the bitmap covers ([`bitmap_sync_sectors`]).
    pub sync_sectors: u64,
    /// Seconds between md's sweeps that clear bits ([`DEFAULT_DAEMON_SLEEP`]).
    pub daemon_sleep: u32,
    /// Writes md may let run behind on write-mostly members; 0 (mdadm's default).
    pub write_behind: u32,
}

impl BitmapChoice {
    /// mdadm's internal bitmap for the array `new` with `member_sectors` used on each
    /// member: the sync range md will use, the chunk [`choose_bitmap_chunk`] picks
    /// (or `chunk_bytes`, when asked for), mdadm's default daemon sleep and no
    /// write-behind; refused when the bitmap would not end before
    /// `new.data_offset_sectors`.
    pub fn internal(
        new: &NewArray,
        member_sectors: u64,
        chunk_bytes: Option<u32>,
    ) -> Result<BitmapChoice, FormatError> {
        let sync_sectors = bitmap_sync_sectors(
            new.level,
            new.layout,
            new.raid_disks,
            new.chunk_sectors,
            member_sectors,
        )?;
        let chunk = choose_bitmap_chunk(member_sectors, sync_sectors, chunk_bytes)?;
        let choice = BitmapChoice {
            chunk_bytes: chunk,
            sync_sectors,
            daemon_sleep: DEFAULT_DAEMON_SLEEP,
            write_behind: 0,
        };
        let start = SUPERBLOCK_OFFSET_SECTORS + BITMAP_OFFSET_SECTORS as u64;
        let end = start + choice.reserved_sectors();
        if end > new.data_offset_sectors {
            return Err(FormatError::BitmapOutsideGap {
                start,
                end,
                superblock_end: start,
                data_offset: new.data_offset_sectors,
            });
        }
        Ok(choice)
    }

    /// Bits of this bitmap.
    pub fn chunks(&self) -> u64 {
        bitmap_chunks(self.sync_sectors, self.chunk_bytes)
    }

    /// Sectors mdadm reserves for this bitmap after the superblock.
    pub fn reserved_sectors(&self) -> u64 {
        bitmap_reserved_bytes(self.chunks()) / 512
    }
}

/// The bit array after the bitmap superblock: bit `i` is chunk `i`, set when the chunk
/// may differ between members. md stores it little-endian (`set_bit_le`): chunk `i`
/// is bit `i % 8` (value `1 << (i % 8)`) of byte `i / 8`.
///
/// Bits of the last byte beyond the last chunk mean nothing (mdadm writes them as
/// ones); they are kept as found so that parsing and writing round-trip, and never
/// counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitmapBits {
    chunks: u64,
    bytes: Vec<u8>,
}

/// `ceil(chunks / 8)` as a buffer length, when memory can hold it.
fn bits_len(chunks: u64) -> Option<usize> {
    usize::try_from(chunks.div_ceil(8)).ok()
}

impl BitmapBits {
    /// `chunks` clear bits.
    ///
    /// # Panics
    ///
    /// When `ceil(chunks / 8)` bytes cannot be addressed on this machine.
    pub fn new(chunks: u64) -> BitmapBits {
        let len = bits_len(chunks).unwrap_or(usize::MAX);
        BitmapBits {
            chunks,
            bytes: vec![0; len],
        }
    }

    /// `chunks` bits, every one set (dirty); the bits past the last chunk in the last
    /// byte stay clear.
    ///
    /// # Panics
    ///
    /// As [`BitmapBits::new`].
    pub fn all_dirty(chunks: u64) -> BitmapBits {
        let mut bits = BitmapBits::new(chunks);
        bits.bytes.fill(0xff);
        let tail = chunks % 8;
        if let (Some(last), true) = (bits.bytes.last_mut(), tail != 0) {
            *last = (1u8 << tail) - 1;
        }
        bits
    }

    /// The bits of `chunks` chunks from the bytes that follow the bitmap superblock
    /// (more may be passed; the rest is ignored).
    pub fn parse(buf: &[u8], chunks: u64) -> Result<BitmapBits, FormatError> {
        let needed = bits_len(chunks).unwrap_or(usize::MAX);
        if buf.len() < needed {
            return Err(FormatError::BitmapTooShort {
                len: buf.len(),
                needed,
            });
        }
        Ok(BitmapBits {
            chunks,
            bytes: buf[..needed].to_vec(),
        })
    }

    /// Number of chunks (bits).
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// The bytes to write after the bitmap superblock: `ceil(chunks / 8)` of them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn locate(&self, chunk: u64) -> (usize, u8) {
        assert!(
            chunk < self.chunks,
            "chunk {chunk} is beyond the bitmap's {} chunks",
            self.chunks
        );
        // chunk < chunks and the buffer holds ceil(chunks / 8) bytes, so this fits.
        ((chunk / 8) as usize, 1 << (chunk % 8))
    }

    /// Marks chunk `chunk` dirty.
    ///
    /// # Panics
    ///
    /// When `chunk` is not below [`BitmapBits::chunks`].
    pub fn set(&mut self, chunk: u64) {
        let (byte, mask) = self.locate(chunk);
        self.bytes[byte] |= mask;
    }

    /// Marks chunk `chunk` clean.
    ///
    /// # Panics
    ///
    /// When `chunk` is not below [`BitmapBits::chunks`].
    pub fn clear(&mut self, chunk: u64) {
        let (byte, mask) = self.locate(chunk);
        self.bytes[byte] &= !mask;
    }

    /// Whether chunk `chunk` is dirty.
    ///
    /// # Panics
    ///
    /// When `chunk` is not below [`BitmapBits::chunks`].
    pub fn test(&self, chunk: u64) -> bool {
        let (byte, mask) = self.locate(chunk);
        self.bytes[byte] & mask != 0
    }

    /// Marks every chunk in `range` dirty (cut at [`BitmapBits::chunks`]).
    pub fn set_range(&mut self, range: Range<u64>) {
        for chunk in range.start..range.end.min(self.chunks) {
            self.set(chunk);
        }
    }

    /// Marks every chunk clean (the bits past the last chunk are left as they are).
    pub fn clear_all(&mut self) {
        let whole = (self.chunks / 8) as usize;
        self.bytes[..whole].fill(0);
        let rest = self.chunks % 8;
        if rest != 0 {
            self.bytes[whole] &= !((1u8 << rest) - 1);
        }
    }

    /// Number of dirty chunks.
    pub fn count(&self) -> u64 {
        self.count_first(self.chunks)
    }

    /// Set bits among the first `n` of the buffer (bounded by its length), counting
    /// as mdadm counts: whole bytes, then the low bits of a partial one.
    pub(crate) fn count_first(&self, n: u64) -> u64 {
        let n = n.min(self.bytes.len() as u64 * 8);
        let whole = (n / 8) as usize;
        let mut count: u64 = self.bytes[..whole]
            .iter()
            .map(|b| u64::from(b.count_ones()))
            .sum();
        let rest = n % 8;
        if rest != 0 {
            let mask = (1u8 << rest) - 1;
            count += u64::from((self.bytes[whole] & mask).count_ones());
        }
        count
    }

    /// Bits available in the buffer (whole bytes), which mdadm reads when it counts.
    pub(crate) fn buffer_bits(&self) -> u64 {
        self.bytes.len() as u64 * 8
    }

    /// The runs of dirty chunks, in order, each as the range of its chunk numbers;
    /// neighbouring runs are separated by at least one clean chunk.
    pub fn dirty_ranges(&self) -> DirtyRanges<'_> {
        DirtyRanges {
            bits: self,
            next: 0,
        }
    }

    /// First chunk at or after `from` whose bit is `dirty`, or `chunks`.
    fn find(&self, from: u64, dirty: bool) -> u64 {
        let mut chunk = from;
        while chunk < self.chunks {
            let byte = self.bytes[(chunk / 8) as usize];
            // Whole bytes with nothing of interest are skipped at once.
            let skip = if dirty { 0x00 } else { 0xff };
            if chunk.is_multiple_of(8) && byte == skip {
                chunk += 8;
                continue;
            }
            if (byte & (1 << (chunk % 8)) != 0) == dirty {
                return chunk;
            }
            chunk += 1;
        }
        self.chunks
    }
}

/// Iterator over the runs of dirty chunks of a [`BitmapBits`].
#[derive(Debug, Clone)]
pub struct DirtyRanges<'a> {
    bits: &'a BitmapBits,
    next: u64,
}

impl Iterator for DirtyRanges<'_> {
    type Item = Range<u64>;

    fn next(&mut self) -> Option<Range<u64>> {
        let start = self.bits.find(self.next, true);
        if start >= self.bits.chunks {
            self.next = start;
            return None;
        }
        let end = self.bits.find(start, false);
        self.next = end;
        Some(start..end)
    }
}

/// Parses a whole bitmap read at [`bitmap_start_sector`]: the superblock, then the
/// bits it describes. `buf` needs at least `256 + ceil(chunks / 8)` bytes.
pub fn parse_bitmap(buf: &[u8]) -> Result<(BitmapSuper, BitmapBits), FormatError> {
    let bsb = BitmapSuper::parse(buf)?;
    let bits =
        BitmapBits::parse(&buf[BITMAP_SUPER_BYTES..], bsb.chunks()).map_err(|e| match e {
            FormatError::BitmapTooShort { len, needed } => FormatError::BitmapTooShort {
                len: len + BITMAP_SUPER_BYTES,
                needed: needed.saturating_add(BITMAP_SUPER_BYTES),
            },
            other => other,
        })?;
    Ok((bsb, bits))
}

/// The bytes to write at [`bitmap_start_sector`]: the superblock, the bits, zeros to
/// the end of the last 512-byte sector (the unit md reads and writes).
pub fn bitmap_image(bsb: &BitmapSuper, bits: &BitmapBits) -> Vec<u8> {
    let len = BITMAP_SUPER_BYTES + bits.as_bytes().len();
    let mut out = vec![0u8; len.div_ceil(512) * 512];
    out[..BITMAP_SUPER_BYTES].copy_from_slice(&bsb.to_bytes());
    out[BITMAP_SUPER_BYTES..len].copy_from_slice(bits.as_bytes());
    out
}

/// The bitmap of a new member whose superblock is `sb` (with its final `events`), to
/// write at [`bitmap_start_sector`]: [`BitmapSuper::for_member`] with every bit clear
/// (the new array is in sync), filling the space mdadm reserves for it so that
/// nothing left over from earlier use of the device remains there.
///
/// mdadm itself writes every bit set and lets md clear them once the array runs;
/// for an array created clean the result is the same.
pub fn new_member_bitmap(sb: &Superblock, choice: &BitmapChoice) -> Vec<u8> {
    member_bitmap(sb, choice, BitmapBits::new)
}

/// [`new_member_bitmap`] with every bit set, as mdadm writes it: for an array made
/// over old contents whose initial resync is still to run, which visits every chunk
/// and clears the bits behind it.
pub fn new_member_bitmap_all_dirty(sb: &Superblock, choice: &BitmapChoice) -> Vec<u8> {
    member_bitmap(sb, choice, BitmapBits::all_dirty)
}

fn member_bitmap(
    sb: &Superblock,
    choice: &BitmapChoice,
    bits: impl FnOnce(u64) -> BitmapBits,
) -> Vec<u8> {
    let bsb = BitmapSuper::for_member(sb, choice);
    let mut out = bitmap_image(&bsb, &bits(bsb.chunks()));
    let reserved = usize::try_from(bsb.reserved_bytes()).unwrap_or(out.len());
    out.resize(reserved.max(out.len()), 0);
    out
}

/// The cluster name as mdadm prints it: up to the first NUL, as lossy UTF-8.
pub(crate) fn cluster_name(bsb: &BitmapSuper) -> String {
    let end = bsb
        .cluster_name
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(bsb.cluster_name.len());
    String::from_utf8_lossy(&bsb.cluster_name[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_counts_round_up() {
        assert_eq!(bitmap_chunks(16000, 4096), 2000);
        assert_eq!(bitmap_chunks(16001, 4096), 2001);
        assert_eq!(bitmap_chunks(1, 64 << 20), 1);
        assert_eq!(bitmap_chunks(0, 4096), 0);
        assert_eq!(bitmap_chunks(100, 0), 0);
        assert_eq!(bitmap_chunks(u64::MAX, 512), u64::MAX);
    }

    #[test]
    fn sizes_round_like_md_and_mdadm() {
        // 2001 bits: 251 bytes after the 256-byte superblock.
        assert_eq!(bitmap_bytes(2001), 512);
        assert_eq!(bitmap_reserved_bytes(2001), 4096);
        // 2049 bits: 257 bytes, one byte into the next sector.
        assert_eq!(bitmap_bytes(2049), 1024);
        // The most 4 KiB holds, and one more.
        assert_eq!(bitmap_reserved_bytes(30720), 4096);
        assert_eq!(bitmap_reserved_bytes(30721), 8192);
        assert_eq!(bitmap_bytes(0), 512);
    }

    #[test]
    fn bits_are_little_endian_within_bytes() {
        let mut bits = BitmapBits::new(20);
        bits.set(0);
        assert_eq!(bits.as_bytes(), [0x01, 0, 0]);
        bits.set(7);
        assert_eq!(bits.as_bytes(), [0x81, 0, 0]);
        bits.set(8);
        bits.set(19);
        assert_eq!(bits.as_bytes(), [0x81, 0x01, 0x08]);
        bits.clear(0);
        assert_eq!(bits.as_bytes(), [0x80, 0x01, 0x08]);
        assert!(bits.test(7) && bits.test(8) && bits.test(19));
        assert!(!bits.test(0) && !bits.test(1) && !bits.test(18));
        assert_eq!(bits.count(), 3);
    }

    #[test]
    fn trailing_bits_are_kept_but_not_counted() {
        // 10 chunks: byte 1 holds chunks 8 and 9 in its low bits.
        let bits = BitmapBits::parse(&[0x00, 0xfe, 0xaa], 10).unwrap();
        assert_eq!(bits.as_bytes(), [0x00, 0xfe]);
        assert_eq!(bits.count(), 1);
        assert!(!bits.test(8));
        assert!(bits.test(9));
        assert_eq!(bits.dirty_ranges().collect::<Vec<_>>(), vec![9..10]);
        let mut cleared = bits.clone();
        cleared.clear_all();
        assert_eq!(cleared.as_bytes(), [0x00, 0xfc]);
        assert_eq!(cleared.count(), 0);
    }

    #[test]
    fn dirty_ranges_are_maximal_runs() {
        let mut bits = BitmapBits::new(40);
        bits.set_range(3..5);
        bits.set_range(7..17);
        bits.set(39);
        bits.set_range(38..100);
        assert_eq!(
            bits.dirty_ranges().collect::<Vec<_>>(),
            vec![3..5, 7..17, 38..40]
        );
        assert_eq!(bits.count(), 14);
        assert_eq!(BitmapBits::new(0).dirty_ranges().count(), 0);
    }

    #[test]
    #[should_panic(expected = "beyond the bitmap")]
    fn setting_past_the_end_panics() {
        BitmapBits::new(9).set(9);
    }

    #[test]
    fn too_few_bit_bytes_are_refused() {
        assert_eq!(
            BitmapBits::parse(&[0; 250], 2001),
            Err(FormatError::BitmapTooShort {
                len: 250,
                needed: 251
            })
        );
    }

    #[test]
    fn mdadm_chunk_choice() {
        // 8 MiB members keep 4 KiB: 30720 bits fit; the default is 64 MiB.
        assert_eq!(choose_bitmap_chunk(16384, 16384, None), Ok(64 << 20));
        assert_eq!(choose_bitmap_chunk(16384, 16384, Some(4096)), Ok(4096));
        // Asking for a chunk that is not a power of two, or below a sector.
        assert_eq!(
            choose_bitmap_chunk(16384, 16384, Some(6144)),
            Err(FormatError::BadBitmapChunkSize { chunksize: 6144 })
        );
        assert_eq!(
            choose_bitmap_chunk(16384, 16384, Some(256)),
            Err(FormatError::BadBitmapChunkSize { chunksize: 256 })
        );
        // Below mdadm's 4 KiB floor.
        assert_eq!(
            choose_bitmap_chunk(16384, 16384, Some(2048)),
            Err(FormatError::BitmapChunkTooSmall {
                chunksize: 2048,
                min: 4096
            })
        );
        // 8 GiB members keep 4 KiB (30720 bits): 2^21 + 1 estimated bits at 4 KiB,
        // halved seven times to 16385 at 512 KiB.
        let eight_gib = 8 * 1024 * 1024 * 2;
        assert_eq!(
            choose_bitmap_chunk(eight_gib, eight_gib, Some(256 << 10)),
            Err(FormatError::BitmapChunkTooSmall {
                chunksize: 256 << 10,
                min: 512 << 10
            })
        );
        assert_eq!(
            choose_bitmap_chunk(eight_gib, eight_gib, Some(512 << 10)),
            Ok(512 << 10)
        );
        // Over 8 GiB, 64 KiB are kept (522240 bits); 10 GiB at 4 KiB is 2621441 bits,
        // halved three times to 327681 at 32 KiB.
        let ten_gib = 10 * 1024 * 1024 * 2;
        assert_eq!(
            choose_bitmap_chunk(ten_gib, ten_gib, Some(16 << 10)),
            Err(FormatError::BitmapChunkTooSmall {
                chunksize: 16 << 10,
                min: 32 << 10
            })
        );
        // 16 TiB over 128 KiB of room (1046528 bits): 32 MiB chunks are the least, so
        // the 64 MiB default stands; at 256 TiB the least is 512 MiB.
        let tib = 1024 * 1024 * 1024 * 2u64;
        assert_eq!(choose_bitmap_chunk(16 * tib, 16 * tib, None), Ok(64 << 20));
        assert_eq!(
            choose_bitmap_chunk(256 * tib, 256 * tib, None),
            Ok(512 << 20)
        );
        // Members under 64 KiB get no bitmap space at all.
        assert_eq!(
            choose_bitmap_chunk(127, 127, None),
            Err(FormatError::NoRoomForBitmap { used_sectors: 127 })
        );
        // Chunks beyond md's 32-bit field.
        assert!(matches!(
            choose_bitmap_chunk(u64::MAX, u64::MAX, None),
            Err(FormatError::BitmapChunkTooLarge { .. })
        ));
    }

    #[test]
    fn raid10_bitmaps_cover_the_array() {
        assert_eq!(bitmap_sync_sectors(1, 0, 2, 0, 16384), Ok(16384));
        assert_eq!(bitmap_sync_sectors(5, 2, 4, 128, 16384), Ok(16384));
        // near=2 over 4 disks: twice a member.
        assert_eq!(bitmap_sync_sectors(10, 0x102, 4, 128, 16384), Ok(32768));
        // far=2 over 3 disks: whole chunks of a member halved, times 3.
        assert_eq!(
            bitmap_sync_sectors(10, 0x201, 3, 128, 16384 + 100),
            Ok(64 * 3 * 128)
        );
        // offset=2 counts like far.
        assert_eq!(bitmap_sync_sectors(10, 0x10201, 4, 128, 16384), Ok(32768));
        for (level, layout) in [(0, 0), (-1, 0), (10, 0x100), (10, 0x2), (3, 0)] {
            assert_eq!(
                bitmap_sync_sectors(level, layout, 4, 128, 16384),
                Err(FormatError::BitmapUnsupportedArray { level, layout })
            );
        }
        assert!(bitmap_sync_sectors(10, 0x102, 4, 0, 16384).is_err());
    }
}
