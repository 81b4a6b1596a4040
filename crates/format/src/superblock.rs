//! The superblock itself: md's fields, reading them from the 4 KiB at
//! [`crate::SUPERBLOCK_OFFSET_BYTES`] with every check md makes before trusting them,
//! and writing them back so that a parsed superblock reproduces its bytes exactly.

use crate::checksum::{sb_checksum, SB_CSUM_OFFSET};
use crate::constants::{
    MAX_DEVS, MD_SB_MAGIC, ROLE_SPARE, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSET_SECTORS,
};
use crate::error::FormatError;

/// Size of the fixed part before the role table.
pub(crate) const HEADER_BYTES: usize = 256;

/// The kernel refuses members whose data area is smaller than this (`super_1_load`).
const MIN_DATA_SECTORS: u64 = 10;

/// Seconds occupy the low 40 bits of `ctime` and `utime`; md may keep microseconds above.
const TIME_SECONDS_MASK: u64 = (1 << 40) - 1;

/// md's version-1 superblock, field for field (names as in `md_p.h`). Integers are host
/// values; the on-disk form is little-endian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// [`MD_SB_MAGIC`].
    pub magic: u32,
    /// Always 1.
    pub major_version: u32,
    /// `MD_FEATURE_*` bits.
    pub feature_map: u32,
    /// Written as 0 by md; the kernel refuses a member where it is not.
    pub pad0: u32,
    /// The array's UUID, shared by all members.
    pub set_uuid: [u8; 16],
    /// The array's name, NUL-padded; may fill all 32 bytes without a NUL.
    pub set_name: [u8; 32],
    /// Creation time: seconds in the low 40 bits, microseconds (or 0) in the top 24.
    pub ctime: u64,
    /// md level: -4 multipath, -1 linear, 0, 1, 4, 5, 6, 10.
    pub level: i32,
    /// md layout number (raid5/6 algorithm, raid10 near/far/offset copies, raid0 layout).
    pub layout: u32,
    /// Sectors of each member used by the array (md leaves 0 for raid0).
    pub size: u64,
    /// Chunk size in sectors.
    pub chunksize: u32,
    /// Number of slots in the array.
    pub raid_disks: u32,
    /// Sectors from the superblock to the internal bitmap (signed); with
    /// `MD_FEATURE_PPL` the same 4 bytes hold the PPL offset (low 16 bits, signed) and
    /// size (high 16 bits).
    pub bitmap_offset: i32,
    /// Level being reshaped to (valid with `MD_FEATURE_RESHAPE_ACTIVE`).
    pub new_level: i32,
    /// Next array sector the reshape handles.
    pub reshape_position: u64,
    /// Change in `raid_disks` (signed).
    pub delta_disks: i32,
    /// Layout being reshaped to.
    pub new_layout: u32,
    /// Chunk size being reshaped to, sectors.
    pub new_chunk: u32,
    /// Signed sectors added to `data_offset` by the reshape (valid with
    /// `MD_FEATURE_NEW_OFFSET`).
    pub new_offset: u32,
    /// Sector where this member's data starts.
    pub data_offset: u64,
    /// Sectors of this member usable for data.
    pub data_size: u64,
    /// Sector where this superblock lives (8 for metadata 1.2).
    pub super_offset: u64,
    /// Sectors of data already recovered onto this member (valid with
    /// `MD_FEATURE_RECOVERY_OFFSET`); a journal device's tail shares the field.
    pub recovery_offset: u64,
    /// Index of this member in `dev_roles` (not its role).
    pub dev_number: u32,
    /// Read errors corrected by rewriting.
    pub cnt_corrected_read: u32,
    /// This member's UUID.
    pub device_uuid: [u8; 16],
    /// Per-member flags: 1 write-mostly, 2 failfast.
    pub devflags: u8,
    /// Shift from sectors to the bad-block log's block size.
    pub bblog_shift: u8,
    /// Sectors reserved for the bad-block log.
    pub bblog_size: u16,
    /// Sectors from the superblock to the bad-block log (signed, stored unsigned).
    pub bblog_offset: u32,
    /// Last update time, encoded like `ctime`.
    pub utime: u64,
    /// Event count: the member with the highest count has the newest view.
    pub events: u64,
    /// Array sectors known to be in sync; `u64::MAX` (md's `MaxSector`) means clean.
    pub resync_offset: u64,
    /// The checksum as stored; [`Superblock::to_bytes`] writes a fresh one.
    pub sb_csum: u32,
    /// Number of entries in the role table.
    pub max_dev: u32,
    /// Reserved, written as 0 by md; kept so that parsing and writing round-trip.
    pub pad3: [u8; 32],
    /// Role of each device number: a slot, or `ROLE_SPARE`/`ROLE_FAULTY`/`ROLE_JOURNAL`.
    pub dev_roles: Vec<u16>,
}

pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(w)
}

pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

pub(crate) fn bytes_at<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut w = [0u8; N];
    w.copy_from_slice(&b[off..off + N]);
    w
}

pub(crate) fn put(b: &mut [u8], off: usize, bytes: &[u8]) {
    b[off..off + bytes.len()].copy_from_slice(bytes);
}

/// Bytes of superblock md checksums and writes for `max_dev` roles.
pub(crate) fn image_len(max_dev: u32) -> usize {
    HEADER_BYTES + 2 * max_dev as usize
}

impl Superblock {
    /// Parses a superblock from the bytes read at [`crate::SUPERBLOCK_OFFSET_BYTES`]
    /// (callers pass 4096; at least `256 + 2 * max_dev` are needed).
    ///
    /// Checks, in md's order: the magic (else [`FormatError::NotMd`]), major version 1,
    /// a role table that fits in 4 KiB, the checksum, then that the superblock says it
    /// is at sector 8, that the data area starts after it and is big enough, and that
    /// `dev_number` indexes the role table.
    pub fn parse(buf: &[u8]) -> Result<Superblock, FormatError> {
        Self::parse_checked(buf, true)
    }

    /// [`Superblock::parse`] of a superblock whose checksum is wrong, for showing what
    /// it says (`mdadm --examine` shows such a superblock, with both checksums); never
    /// to use the member.
    pub fn parse_despite_checksum(buf: &[u8]) -> Result<Superblock, FormatError> {
        Self::parse_checked(buf, false)
    }

    fn parse_checked(buf: &[u8], check: bool) -> Result<Superblock, FormatError> {
        if buf.len() < HEADER_BYTES {
            return Err(FormatError::TooShort {
                len: buf.len(),
                needed: HEADER_BYTES,
            });
        }
        let magic = u32_at(buf, 0);
        if magic != MD_SB_MAGIC {
            return Err(FormatError::NotMd { found: magic });
        }
        let major_version = u32_at(buf, 4);
        if major_version != 1 {
            return Err(FormatError::UnsupportedVersion {
                found: major_version,
            });
        }
        let max_dev = u32_at(buf, 220);
        if max_dev > MAX_DEVS {
            return Err(FormatError::TooManyDevices {
                max_dev,
                limit: MAX_DEVS,
            });
        }
        let len = image_len(max_dev);
        if buf.len() < len {
            return Err(FormatError::TooShort {
                len: buf.len(),
                needed: len,
            });
        }
        let stored = u32_at(buf, SB_CSUM_OFFSET);
        let computed = sb_checksum(&buf[..len]);
        if check && stored != computed {
            return Err(FormatError::BadChecksum { stored, computed });
        }

        let sb = Superblock {
            magic,
            major_version,
            feature_map: u32_at(buf, 8),
            pad0: u32_at(buf, 12),
            set_uuid: bytes_at(buf, 16),
            set_name: bytes_at(buf, 32),
            ctime: u64_at(buf, 64),
            level: u32_at(buf, 72) as i32,
            layout: u32_at(buf, 76),
            size: u64_at(buf, 80),
            chunksize: u32_at(buf, 88),
            raid_disks: u32_at(buf, 92),
            bitmap_offset: u32_at(buf, 96) as i32,
            new_level: u32_at(buf, 100) as i32,
            reshape_position: u64_at(buf, 104),
            delta_disks: u32_at(buf, 112) as i32,
            new_layout: u32_at(buf, 116),
            new_chunk: u32_at(buf, 120),
            new_offset: u32_at(buf, 124),
            data_offset: u64_at(buf, 128),
            data_size: u64_at(buf, 136),
            super_offset: u64_at(buf, 144),
            recovery_offset: u64_at(buf, 152),
            dev_number: u32_at(buf, 160),
            cnt_corrected_read: u32_at(buf, 164),
            device_uuid: bytes_at(buf, 168),
            devflags: buf[184],
            bblog_shift: buf[185],
            bblog_size: u16_at(buf, 186),
            bblog_offset: u32_at(buf, 188),
            utime: u64_at(buf, 192),
            events: u64_at(buf, 200),
            resync_offset: u64_at(buf, 208),
            sb_csum: stored,
            max_dev,
            pad3: bytes_at(buf, 224),
            dev_roles: (0..max_dev as usize)
                .map(|i| u16_at(buf, HEADER_BYTES + 2 * i))
                .collect(),
        };
        sb.check_geometry()?;
        Ok(sb)
    }

    /// The checks on offsets and sizes the kernel makes before it trusts a member.
    fn check_geometry(&self) -> Result<(), FormatError> {
        if self.super_offset != SUPERBLOCK_OFFSET_SECTORS {
            return Err(FormatError::WrongSuperOffset {
                found: self.super_offset,
            });
        }
        // The kernel rounds the superblock up to whole blocks; 512 bytes is the
        // smallest block, so this is the least it can occupy.
        let sb_sectors = image_len(self.max_dev).div_ceil(512) as u64;
        let min = self.super_offset + sb_sectors;
        if self.data_offset < min {
            return Err(FormatError::DataOffsetOverlapsSuperblock {
                data_offset: self.data_offset,
                min,
            });
        }
        if self.data_size < MIN_DATA_SECTORS {
            return Err(FormatError::DataSizeTooSmall {
                data_size: self.data_size,
                min: MIN_DATA_SECTORS,
            });
        }
        // Callers turn sectors into byte offsets; the end must stay representable.
        let fits = self
            .data_offset
            .checked_add(self.data_size)
            .is_some_and(|end| end <= u64::MAX / 512);
        if !fits {
            return Err(FormatError::DataAreaTooLarge {
                data_offset: self.data_offset,
                data_size: self.data_size,
            });
        }
        if self.size > self.data_size {
            return Err(FormatError::UsedSizeTooLarge {
                size: self.size,
                data_size: self.data_size,
            });
        }
        if self.dev_number >= self.max_dev {
            return Err(FormatError::DevNumberOutOfRange {
                dev_number: self.dev_number,
                max_dev: self.max_dev,
            });
        }
        Ok(())
    }

    /// The 4096-byte image to write at [`crate::SUPERBLOCK_OFFSET_BYTES`], with the
    /// checksum recomputed and zeros after the role table.
    ///
    /// The table written has `max_dev` entries: `dev_roles` entries past `max_dev` are
    /// left out and missing ones are written as [`crate::ROLE_SPARE`], which is what md
    /// keeps in unused entries. A `max_dev` above [`MAX_DEVS`] cannot be represented;
    /// only the entries that fit are written.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; SUPERBLOCK_BYTES];
        let len = self.write_unchecksummed(&mut out);
        let csum = sb_checksum(&out[..len]);
        put(&mut out, SB_CSUM_OFFSET, &csum.to_le_bytes());
        out
    }

    /// Writes everything but the checksum into `out` (4096 zeroed bytes) and returns
    /// how many bytes md's checksum covers.
    fn write_unchecksummed(&self, out: &mut [u8]) -> usize {
        put(out, 0, &self.magic.to_le_bytes());
        put(out, 4, &self.major_version.to_le_bytes());
        put(out, 8, &self.feature_map.to_le_bytes());
        put(out, 12, &self.pad0.to_le_bytes());
        put(out, 16, &self.set_uuid);
        put(out, 32, &self.set_name);
        put(out, 64, &self.ctime.to_le_bytes());
        put(out, 72, &self.level.to_le_bytes());
        put(out, 76, &self.layout.to_le_bytes());
        put(out, 80, &self.size.to_le_bytes());
        put(out, 88, &self.chunksize.to_le_bytes());
        put(out, 92, &self.raid_disks.to_le_bytes());
        put(out, 96, &self.bitmap_offset.to_le_bytes());
        put(out, 100, &self.new_level.to_le_bytes());
        put(out, 104, &self.reshape_position.to_le_bytes());
        put(out, 112, &self.delta_disks.to_le_bytes());
        put(out, 116, &self.new_layout.to_le_bytes());
        put(out, 120, &self.new_chunk.to_le_bytes());
        put(out, 124, &self.new_offset.to_le_bytes());
        put(out, 128, &self.data_offset.to_le_bytes());
        put(out, 136, &self.data_size.to_le_bytes());
        put(out, 144, &self.super_offset.to_le_bytes());
        put(out, 152, &self.recovery_offset.to_le_bytes());
        put(out, 160, &self.dev_number.to_le_bytes());
        put(out, 164, &self.cnt_corrected_read.to_le_bytes());
        put(out, 168, &self.device_uuid);
        out[184] = self.devflags;
        out[185] = self.bblog_shift;
        put(out, 186, &self.bblog_size.to_le_bytes());
        put(out, 188, &self.bblog_offset.to_le_bytes());
        put(out, 192, &self.utime.to_le_bytes());
        put(out, 200, &self.events.to_le_bytes());
        put(out, 208, &self.resync_offset.to_le_bytes());
        put(out, 220, &self.max_dev.to_le_bytes());
        put(out, 224, &self.pad3);
        let entries = self.max_dev.min(MAX_DEVS) as usize;
        for i in 0..entries {
            let role = self.dev_roles.get(i).copied().unwrap_or(ROLE_SPARE);
            put(out, HEADER_BYTES + 2 * i, &role.to_le_bytes());
        }
        image_len(self.max_dev.min(MAX_DEVS))
    }

    /// The checksum md would compute for this superblock (what
    /// [`Superblock::to_bytes`] stores).
    pub fn compute_checksum(&self) -> u32 {
        let mut out = vec![0u8; SUPERBLOCK_BYTES];
        let len = self.write_unchecksummed(&mut out);
        sb_checksum(&out[..len])
    }

    /// The array's name as mdadm shows it: `set_name` up to the first NUL, as lossy
    /// UTF-8.
    pub fn name(&self) -> String {
        let end = self
            .set_name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.set_name.len());
        String::from_utf8_lossy(&self.set_name[..end]).into_owned()
    }

    /// mdadm's text for a UUID: four groups of eight hex digits joined with ':', bytes
    /// in stored order, e.g. `775edceb:cdf449a1:a0a14e2f:a9ce53a0`.
    pub fn uuid_string(uuid: &[u8; 16]) -> String {
        let mut s = String::with_capacity(35);
        for (i, b) in uuid.iter().enumerate() {
            if i > 0 && i % 4 == 0 {
                s.push(':');
            }
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// This member's role, `dev_roles[dev_number]`; `None` when `dev_number` is beyond
    /// the role table.
    pub fn role(&self) -> Option<u16> {
        if self.dev_number >= self.max_dev {
            return None;
        }
        self.dev_roles.get(self.dev_number as usize).copied()
    }

    /// Whether the array was shut down cleanly (`resync_offset` is md's `MaxSector`).
    pub fn is_clean(&self) -> bool {
        self.resync_offset == u64::MAX
    }

    /// Creation time in seconds since the epoch (the low 40 bits of `ctime`).
    pub fn ctime_secs(&self) -> u64 {
        self.ctime & TIME_SECONDS_MASK
    }

    /// Last update time in seconds since the epoch (the low 40 bits of `utime`).
    pub fn utime_secs(&self) -> u64 {
        self.utime & TIME_SECONDS_MASK
    }

    /// Seconds since the epoch encoded as md stores them in `ctime`/`utime`.
    pub fn encode_time(secs: u64) -> u64 {
        secs & TIME_SECONDS_MASK
    }

    /// `since_epoch` to the microsecond, in the 24 bits above the seconds that
    /// md_p.h gives them in `utime`. The microseconds are never 0 (0 is written as 1):
    /// md and mdadm write whole seconds, so a time written so tells a superblock
    /// written by xraid from one they wrote (see [`Superblock::utime_has_microseconds`]).
    pub fn encode_time_precise(since_epoch: std::time::Duration) -> u64 {
        let micros = u64::from(since_epoch.subsec_micros()).max(1);
        Self::encode_time(since_epoch.as_secs()) | (micros << 40)
    }

    /// Whether `utime` carries microseconds: the last writer was not md nor mdadm,
    /// which write whole seconds (`md_update_sb` takes `ktime_get_real_seconds`).
    pub fn utime_has_microseconds(&self) -> bool {
        self.utime >> 40 != 0
    }
}
