//! A superblock in `mdadm --examine`'s words (`examine_super1` in mdadm 4.2's
//! `super1.c`), line for line, so that scripts and people reading one can read the
//! other.
//!
//! Where mdadm does its arithmetic in C's unsigned or signed 32/64-bit types, this does
//! the same (wrapping, unsigned comparisons of the level) so odd superblocks print as
//! mdadm prints them. What it cannot know, it assumes: dates are in UTC (mdadm uses
//! the local zone), the member ends right after its data area (mdadm asks the device),
//! an internal bitmap has the smallest size, and the cluster name, kept in the bitmap
//! superblock, is not shown.

use std::fmt;

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
    Examine { sb, path }.to_string()
}

struct Examine<'a> {
    sb: &'a Superblock,
    path: &'a str,
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
/// mdadm's "after = 1" marker for "no room at all".
fn unused_space(sb: &Superblock, roles: &[u16]) -> (u64, u64) {
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
    // mdadm asks the device for its size; a 1.2 member normally ends with its data.
    let device_size = data_offset.wrapping_add(sb.data_size);

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
            // mdadm counts from the device start here, and adds the bitmap's size from
            // its own superblock, which is not at hand: assume the smallest, 4 KiB.
            earliest = earliest.max((bitmap_offset + 8) as u64);
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
        let (before, after) = unused_space(sb, &roles);
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
