//! A superblock in `mdadm --examine`'s words (`examine_super1` in mdadm 4.2's
//! `super1.c`), and a bitmap in `mdadm --examine-bitmap`'s (`ExamineBitmap` in its
//! `bitmap.c`), line for line, so that scripts and people reading one can read the
//! other.
//!
//! Where mdadm does its arithmetic in C's unsigned or signed 32/64-bit types, this does
//! the same (wrapping, unsigned comparisons of the level) so odd superblocks print as
//! mdadm prints them. What it cannot know, it assumes: dates are in UTC (mdadm uses
//! the local zone), the member ends right after its data area (mdadm asks the device),
//! and, unless the bitmap superblock is given ([`examine_text_with_bitmap`]), an
//! internal bitmap has the smallest size and no cluster name.

use std::fmt;

use crate::bitmap::{cluster_name, BitmapBits, BitmapSuper, BITMAP_MAGIC};
use crate::clock::ctime;
use crate::constants::{
    MAX_DEVS, MD_FEATURE_BAD_BLOCKS, MD_FEATURE_BITMAP_OFFSET, MD_FEATURE_MULTIPLE_PPLS,
    MD_FEATURE_NEW_OFFSET, MD_FEATURE_PPL, MD_FEATURE_RAID0_LAYOUT, MD_FEATURE_RECOVERY_OFFSET,
    MD_FEATURE_REPLACEMENT, MD_FEATURE_RESHAPE_ACTIVE, ROLE_FAULTY, ROLE_JOURNAL, ROLE_MAX,
    ROLE_SPARE,
};
use crate::human::human_size;
use crate::names::{level_name, r0_layout_name, r10_layout_text, r5_layout_name, r6_layout_name};
use crate::superblock::Superblock;

/// `devflags` bits.
const WRITE_MOSTLY: u8 = 1;
const FAIL_FAST: u8 = 2;

/// The superblock in `mdadm --examine`'s words, for the member at `path`: the path
/// line, then mdadm's lines, each ending in a newline.
pub fn examine_text(sb: &Superblock, path: &str) -> String {
    Examine {
        sb,
        path,
        bitmap: None,
        device_sectors: None,
    }
    .to_string()
}

/// [`examine_text`] (or, with `bitmap`, [`examine_text_with_bitmap`]) for a member
/// whose device holds `device_sectors`: mdadm asks the device for its size, which
/// shows in the unused space after the data (where xraid's integrity area lives).
pub fn examine_text_on_device(
    sb: &Superblock,
    bitmap: Option<&BitmapSuper>,
    path: &str,
    device_sectors: u64,
) -> String {
    let mut shown = sb.clone();
    let bitmap = match bitmap {
        Some(b) if sb.feature_map & MD_FEATURE_BITMAP_OFFSET != 0 => {
            if b.magic != BITMAP_MAGIC || b.uuid != sb.set_uuid {
                shown.feature_map &= !MD_FEATURE_BITMAP_OFFSET;
                None
            } else {
                Some(b)
            }
        }
        _ => None,
    };
    Examine {
        sb: &shown,
        path,
        bitmap,
        device_sectors: Some(device_sectors),
    }
    .to_string()
}

/// [`examine_text`] for a member whose bitmap superblock (the 256 bytes at
/// [`crate::bitmap_start_sector`]) is `bitmap`, which mdadm reads along with the
/// superblock: its size counts in the unused space before the data, a cluster name is
/// shown, and a bitmap mdadm does not recognise (wrong magic or UUID) makes it show the
/// superblock without its bitmap feature, as it does.
pub fn examine_text_with_bitmap(sb: &Superblock, bitmap: &BitmapSuper, path: &str) -> String {
    if sb.feature_map & MD_FEATURE_BITMAP_OFFSET == 0 {
        // mdadm reads no bitmap then.
        return examine_text(sb, path);
    }
    if bitmap.magic != BITMAP_MAGIC || bitmap.uuid != sb.set_uuid {
        // mdadm's load_super1 drops the feature bit in memory; the stored checksum is
        // then no longer the one it computes, and it says so.
        let mut shown = sb.clone();
        shown.feature_map &= !MD_FEATURE_BITMAP_OFFSET;
        return examine_text(&shown, path);
    }
    Examine {
        sb,
        path,
        bitmap: Some(bitmap),
        device_sectors: None,
    }
    .to_string()
}

struct Examine<'a> {
    sb: &'a Superblock,
    path: &'a str,
    /// The bitmap superblock mdadm read, when it found one.
    bitmap: Option<&'a BitmapSuper>,
    /// The device's size, when known (else it is taken to end with the data).
    device_sectors: Option<u64>,
}

/// The role table as md reads it: exactly `max_dev` entries (bounded by what fits in
/// 4 KiB), unused ones spare.
fn role_table(sb: &Superblock) -> Vec<u16> {
    (0..sb.max_dev.min(MAX_DEVS) as usize)
        .map(|i| sb.dev_roles.get(i).copied().unwrap_or(ROLE_SPARE))
        .collect()
}

fn unknown(name: Option<&'static str>) -> &'static str {
    name.unwrap_or("-unknown-")
}

fn has(sb: &Superblock, feature: u32) -> bool {
    sb.feature_map & feature != 0
}

/// The PPL's offset (signed) and size, which share the bytes of `bitmap_offset`.
fn ppl(sb: &Superblock) -> (i16, u16) {
    let raw = sb.bitmap_offset as u32;
    ((raw & 0xffff) as u16 as i16, (raw >> 16) as u16)
}

/// Free sectors before and after the data area (mdadm's `getinfo_super1`), with
/// mdadm's "after = 1" marker for "no room at all". `bitmap_sectors` is the size
/// mdadm gives the internal bitmap.
fn unused_space(
    sb: &Superblock,
    roles: &[u16],
    bitmap_sectors: u64,
    device_sectors: Option<u64>,
) -> (u64, u64) {
    let super_offset = sb.super_offset;
    let data_offset = sb.data_offset;
    let bitmap = has(sb, MD_FEATURE_BITMAP_OFFSET);
    let bitmap_offset = if bitmap {
        i64::from(sb.bitmap_offset)
    } else {
        0
    };
    let (ppl_offset, ppl_size) = if !bitmap && has(sb, MD_FEATURE_PPL | MD_FEATURE_MULTIPLE_PPLS) {
        let (o, s) = ppl(sb);
        (i64::from(o), i64::from(s))
    } else {
        (0, 0)
    };
    let bblog = sb.bblog_offset != 0 && sb.bblog_size != 0;
    let bblog_offset = i64::from(sb.bblog_offset as i32);
    let used = if sb.level <= 0 { sb.data_size } else { sb.size };
    // mdadm asks the device for its size; without it, a 1.2 member normally ends with
    // its data.
    let device_size = device_sectors.unwrap_or_else(|| data_offset.wrapping_add(sb.data_size));

    let (before, mut after);
    if data_offset < super_offset {
        before = data_offset;
        let mut end = super_offset;
        if bblog {
            let bb = super_offset.wrapping_add(bblog_offset as u64);
            end = end.min(bb);
        }
        let other = super_offset
            .wrapping_add(bitmap_offset as u64)
            .wrapping_add(ppl_offset as u64);
        end = end.min(other);
        after = if data_offset.wrapping_add(used) < end {
            end.wrapping_sub(used).wrapping_sub(data_offset)
        } else {
            0
        };
    } else {
        let mut earliest = super_offset.wrapping_add((32 + 4) * 2);
        if bitmap_offset > 0 {
            // mdadm counts from the device start here (not from the superblock).
            earliest = earliest.max((bitmap_offset as u64).wrapping_add(bitmap_sectors));
        } else if ppl_offset > 0 {
            earliest = earliest.max((ppl_offset + ppl_size) as u64);
        }
        if bblog {
            let bbend = super_offset
                .wrapping_add(bblog_offset as u64)
                .wrapping_add(u64::from(sb.bblog_size));
            earliest = earliest.max(bbend);
        }
        before = data_offset.saturating_sub(earliest);
        after = device_size.wrapping_sub(used).wrapping_sub(data_offset);
    }
    if before == 0 && after == 0 {
        after = 1;
    }
    let role = if sb.dev_number >= sb.max_dev || sb.dev_number >= MAX_DEVS {
        ROLE_FAULTY
    } else {
        roles
            .get(sb.dev_number as usize)
            .copied()
            .unwrap_or(ROLE_SPARE)
    };
    if role == ROLE_JOURNAL {
        after = device_size.wrapping_sub(data_offset) % 8;
    }
    (before, after)
}

impl fmt::Display for Examine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sb = self.sb;
        let roles = role_table(sb);
        // mdadm compares the level as unsigned in several places.
        let level_u = sb.level as u32;

        writeln!(f, "{}:", self.path)?;
        writeln!(f, "          Magic : {:08x}", sb.magic)?;
        let minor = match sb.super_offset {
            0..=4 => 1,
            5..=8 => 2,
            _ => 0,
        };
        writeln!(f, "        Version : 1.{minor}")?;
        writeln!(f, "    Feature Map : {:#x}", sb.feature_map)?;
        writeln!(
            f,
            "     Array UUID : {}",
            Superblock::uuid_string(&sb.set_uuid)
        )?;
        writeln!(f, "           Name : {}", sb.name())?;
        if let Some(bitmap) = self.bitmap.filter(|b| b.nodes > 0) {
            writeln!(f, "   Cluster Name : {:<64}", cluster_name(bitmap))?;
        }
        writeln!(f, "  Creation Time : {}", ctime(sb.ctime_secs()))?;
        writeln!(f, "     Raid Level : {}", unknown(level_name(sb.level)))?;
        writeln!(f, "   Raid Devices : {}", sb.raid_disks as i32)?;
        writeln!(f)?;
        writeln!(
            f,
            " Avail Dev Size : {} sectors{}",
            sb.data_size,
            human_size((sb.data_size << 9) as i64)
        )?;
        if level_u > 0 {
            let raid_disks = sb.raid_disks as i32;
            let (ddsks, denom) = match sb.level {
                1 => (1, 1),
                4 | 5 => (raid_disks.wrapping_sub(1), 1),
                6 => (raid_disks.wrapping_sub(2), 1),
                10 => {
                    let near = (sb.layout & 255) as i32;
                    let far = ((sb.layout >> 8) & 255) as i32;
                    (raid_disks, near * far)
                }
                _ => (0, 1),
            };
            // mdadm divides by zero (and dies) on a raid10 layout with no copies.
            if ddsks != 0 && denom != 0 {
                let asize =
                    ((sb.size as i64) << 9).wrapping_mul(i64::from(ddsks)) / i64::from(denom);
                writeln!(
                    f,
                    "     Array Size : {} KiB{}",
                    (asize >> 10) as u64,
                    human_size(asize)
                )?;
            }
            if sb.size != sb.data_size {
                writeln!(
                    f,
                    "  Used Dev Size : {} sectors{}",
                    sb.size,
                    human_size((sb.size << 9) as i64)
                )?;
            }
        }
        if sb.data_offset != 0 {
            writeln!(f, "    Data Offset : {} sectors", sb.data_offset)?;
        }
        if sb.new_offset != 0 && has(sb, MD_FEATURE_NEW_OFFSET) {
            let offset = sb
                .data_offset
                .wrapping_add(i64::from(sb.new_offset as i32) as u64);
            writeln!(f, "     New Offset : {offset} sectors")?;
        }
        writeln!(f, "   Super Offset : {} sectors", sb.super_offset)?;
        if has(sb, MD_FEATURE_RECOVERY_OFFSET) {
            writeln!(f, "Recovery Offset : {} sectors", sb.recovery_offset)?;
        }
        // mdadm sizes the bitmap from its superblock (calc_bitmap_size rounded to
        // 4 KiB, in a C unsigned int); without one at hand, assume the smallest.
        let bitmap_sectors = self
            .bitmap
            .map_or(8, |b| u64::from(b.reserved_bytes() as u32) / 512);
        let (before, after) = unused_space(sb, &roles, bitmap_sectors, self.device_sectors);
        if after != 1 && !has(sb, MD_FEATURE_NEW_OFFSET) {
            writeln!(
                f,
                "   Unused Space : before={before} sectors, after={after} sectors"
            )?;
        }
        let state = if sb.resync_offset.wrapping_add(1) != 0 {
            "active"
        } else {
            "clean"
        };
        writeln!(f, "          State : {state}")?;
        writeln!(
            f,
            "    Device UUID : {}",
            Superblock::uuid_string(&sb.device_uuid)
        )?;
        writeln!(f)?;

        if has(sb, MD_FEATURE_BITMAP_OFFSET) {
            writeln!(
                f,
                "Internal Bitmap : {} sectors from superblock",
                sb.bitmap_offset
            )?;
        } else if has(sb, MD_FEATURE_PPL | MD_FEATURE_MULTIPLE_PPLS) {
            let (offset, size) = ppl(sb);
            writeln!(
                f,
                "            PPL : {size} sectors at offset {offset} sectors from superblock"
            )?;
        }
        let mut delta_extra: u32 = 0;
        if has(sb, MD_FEATURE_RESHAPE_ACTIVE) {
            writeln!(
                f,
                "  Reshape pos'n : {}{}",
                sb.reshape_position / 2,
                human_size((sb.reshape_position << 9) as i64)
            )?;
            if sb.delta_disks != 0 {
                writeln!(
                    f,
                    "  Delta Devices : {} ({}->{})",
                    sb.delta_disks,
                    sb.raid_disks.wrapping_sub(sb.delta_disks as u32) as i32,
                    sb.raid_disks as i32
                )?;
                if sb.delta_disks < 0 {
                    delta_extra = (sb.delta_disks as u32).wrapping_neg();
                }
            }
            if sb.new_level != sb.level {
                writeln!(f, "      New Level : {}", unknown(level_name(sb.new_level)))?;
            }
            if sb.new_layout != sb.layout {
                match sb.level {
                    5 => writeln!(
                        f,
                        "     New Layout : {}",
                        unknown(r5_layout_name(sb.new_layout))
                    )?,
                    6 => writeln!(
                        f,
                        "     New Layout : {}",
                        unknown(r6_layout_name(sb.new_layout))
                    )?,
                    10 => writeln!(f, "     New Layout :{}", r10_layout_text(sb.new_layout))?,
                    _ => {}
                }
            }
            if sb.new_chunk != sb.chunksize {
                writeln!(f, "  New Chunksize : {}K", (sb.new_chunk / 2) as i32)?;
            }
            writeln!(f)?;
        }
        if sb.devflags != 0 {
            write!(f, "          Flags :")?;
            if sb.devflags & WRITE_MOSTLY != 0 {
                write!(f, " write-mostly")?;
            }
            if sb.devflags & FAIL_FAST != 0 {
                write!(f, " failfast")?;
            }
            writeln!(f)?;
        }

        writeln!(f, "    Update Time : {}", ctime(sb.utime_secs()))?;
        if sb.bblog_size != 0 && sb.bblog_offset != 0 {
            write!(
                f,
                "  Bad Block Log : {} entries available at offset {} sectors",
                u32::from(sb.bblog_size) * 512 / 8,
                sb.bblog_offset as i32
            )?;
            if has(sb, MD_FEATURE_BAD_BLOCKS) {
                write!(f, " - bad blocks present.")?;
            }
            writeln!(f)?;
        }
        let computed = sb.compute_checksum();
        if computed == sb.sb_csum {
            writeln!(f, "       Checksum : {:x} - correct", sb.sb_csum)?;
        } else {
            writeln!(
                f,
                "       Checksum : {:x} - expected {computed:x}",
                sb.sb_csum
            )?;
        }
        writeln!(f, "         Events : {}", sb.events)?;
        writeln!(f)?;

        match sb.level {
            0 if has(sb, MD_FEATURE_RAID0_LAYOUT) => {
                writeln!(
                    f,
                    "         Layout : {}",
                    unknown(r0_layout_name(sb.layout))
                )?;
            }
            5 => writeln!(
                f,
                "         Layout : {}",
                unknown(r5_layout_name(sb.layout))
            )?,
            6 => writeln!(
                f,
                "         Layout : {}",
                unknown(r6_layout_name(sb.layout))
            )?,
            10 => writeln!(f, "         Layout :{}", r10_layout_text(sb.layout))?,
            _ => {}
        }
        match sb.level {
            0 | 4 | 5 | 6 | 10 => writeln!(f, "     Chunk Size : {}K", (sb.chunksize / 2) as i32)?,
            -1 => writeln!(f, "       Rounding : {}K", (sb.chunksize / 2) as i32)?,
            _ => {}
        }
        writeln!(f)?;

        let role = if sb.dev_number < sb.max_dev {
            roles
                .get(sb.dev_number as usize)
                .copied()
                .unwrap_or(ROLE_SPARE)
        } else {
            ROLE_SPARE
        };
        write!(f, "   Device Role : ")?;
        if role >= ROLE_FAULTY {
            writeln!(f, "spare")?;
        } else if role == ROLE_JOURNAL {
            writeln!(f, "Journal")?;
        } else if has(sb, MD_FEATURE_REPLACEMENT) {
            writeln!(f, "Replacement device {role}")?;
        } else {
            writeln!(f, "Active device {role}")?;
        }

        write!(f, "   Array State : ")?;
        let mut holders = vec![0u32; usize::from(u16::MAX) + 1];
        for &r in &roles {
            holders[usize::from(r)] += 1;
        }
        let slots = sb.raid_disks.wrapping_add(delta_extra);
        let mut inconsistent = false;
        // Slots past the largest role value are all missing; stop there rather than
        // print billions of dots for a damaged raid_disks.
        for d in 0..slots.min(u32::from(u16::MAX) + 1) {
            let c = match holders[d as usize] {
                2 if level_u > 0 => 'R',
                1 => 'A',
                0 => '.',
                _ => {
                    inconsistent = true;
                    '?'
                }
            };
            write!(f, "{c}")?;
        }
        writeln!(f, " ('A' == active, '.' == missing, 'R' == replacing)")?;
        if roles.iter().any(|&r| r <= ROLE_MAX && u32::from(r) > slots) {
            inconsistent = true;
        }
        if inconsistent {
            writeln!(
                f,
                "WARNING Array state is inconsistent - each number should appear only once"
            )?;
            for (d, &r) in roles.iter().enumerate() {
                if r >= ROLE_FAULTY {
                    write!(f, " {d}:-")?;
                } else {
                    write!(f, " {d}:{r}")?;
                }
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// The bitmap of one member in `mdadm --examine-bitmap`'s words (what `mdadm -X`
/// prints on standard output), for the bitmap read from `path`: `bitmap` is its
/// superblock and `bits` the bits read after it.
///
/// Like mdadm, this counts the bits the superblock describes, or as many as `bits`
/// holds in whole bytes when that is fewer (mdadm warns of a short file then), and
/// stops after the version line for a version it does not know. For a clustered bitmap
/// it prints the cluster lines but not the other nodes' bitmaps, which are not at hand.
pub fn examine_bitmap_text(bitmap: &BitmapSuper, bits: &BitmapBits, path: &str) -> String {
    ExamineBitmap { bitmap, bits, path }.to_string()
}

struct ExamineBitmap<'a> {
    bitmap: &'a BitmapSuper,
    bits: &'a BitmapBits,
    path: &'a str,
}

/// mdadm's `bitmap_state`: only two values have names.
fn bitmap_state(state: u32) -> &'static str {
    match state {
        0 => "OK",
        2 => "Out of date",
        _ => "Unknown",
    }
}

/// mdadm's `human_chunksize`: whole units, truncating ("1536" is "1 KB").
fn human_chunksize(bytes: u32) -> String {
    const SUFFIXES: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut bytes = bytes;
    let mut i = 0;
    while bytes >> 10 != 0 {
        bytes >>= 10;
        i += 1;
    }
    format!("{bytes} {}", SUFFIXES[i])
}

/// mdadm's `BITMAP_MAJOR_LO` and `BITMAP_MAJOR_CLUSTERED`: the versions it prints.
const KNOWN_VERSIONS: std::ops::RangeInclusive<u32> = 3..=5;

impl fmt::Display for ExamineBitmap<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bsb = self.bitmap;
        writeln!(f, "        Filename : {}", self.path)?;
        writeln!(f, "           Magic : {:08x}", bsb.magic)?;
        writeln!(f, "         Version : {}", bsb.version as i32)?;
        if !KNOWN_VERSIONS.contains(&bsb.version) {
            return Ok(());
        }
        writeln!(
            f,
            "            UUID : {}",
            Superblock::uuid_string(&bsb.uuid)
        )?;
        if bsb.nodes == 0 {
            writeln!(f, "          Events : {}", bsb.events)?;
            writeln!(f, "  Events Cleared : {}", bsb.events_cleared)?;
            writeln!(f, "           State : {}", bitmap_state(bsb.state))?;
        }
        writeln!(f, "       Chunksize : {}", human_chunksize(bsb.chunksize))?;
        writeln!(
            f,
            "          Daemon : {}s flush period",
            bsb.daemon_sleep as i32
        )?;
        if bsb.write_behind != 0 {
            writeln!(
                f,
                "      Write Mode : Allow write behind, max {}",
                bsb.write_behind as i32
            )?;
        } else {
            writeln!(f, "      Write Mode : Normal")?;
        }
        writeln!(
            f,
            "       Sync Size : {}{}",
            bsb.sync_size / 2,
            human_size(bsb.sync_size.wrapping_mul(512) as i64)
        )?;
        if bsb.nodes != 0 {
            writeln!(f, "   Cluster nodes : {}", bsb.nodes as i32)?;
            writeln!(f, "    Cluster name : {:<64}", cluster_name(bsb))?;
            return Ok(());
        }
        // mdadm reads no bits when either number is zero.
        let total = if bsb.sync_size == 0 || bsb.chunksize == 0 {
            0
        } else {
            bsb.chunks().min(self.bits.buffer_bits())
        };
        let dirty = self.bits.count_first(total);
        let percent = 100.0 * dirty as f64 / total.max(1) as f64;
        writeln!(
            f,
            "          Bitmap : {total} bits (chunks), {dirty} dirty ({percent:.1}%)"
        )
    }
}
