//! `xraid examine`: a member's superblock in mdadm --examine's words, with
//! `--bitmap` its write-intent bitmap in mdadm --examine-bitmap's, or with
//! `--badblocks` its bad block log in mdadm --examine-badblocks'.

use anyhow::{bail, Context, Result};
use xraid_array::read_superblock;
use xraid_format::{
    bad_block_log_sectors, bitmap_start_sector, parse_bitmap, BadBlocks, BitmapSuper, Superblock,
    BITMAP_SUPER_BYTES, MD_FEATURE_BAD_BLOCKS,
};
use xraid_member::{DirectMode, FileMember, Member, OpenOptions};

use crate::cli::ExamineArgs;

pub fn run(args: ExamineArgs) -> Result<()> {
    let options = OpenOptions {
        write: false,
        direct: DirectMode::Off,
        lock: false,
    };
    for path in &args.members {
        let member = FileMember::open(path, &options)?;
        let sb = match read_superblock(&member, path) {
            Ok(Some(sb)) => sb,
            Ok(None) => bail!(
                "{}: not an md member (no md superblock at 4 KiB)",
                path.display()
            ),
            Err(xraid_array::ArrayError::Superblock {
                source: xraid_format::FormatError::BadChecksum { stored, computed },
                ..
            }) => {
                // What it says is what an admin needs to see now (mdadm shows it too,
                // with both checksums); no command uses such a member.
                eprintln!(
                    "xraid: warning: {}: its superblock's checksum is wrong (stored {stored:x}, computed {computed:x}): shown as it stands; xraid and md leave this member out",
                    path.display()
                );
                superblock_despite_checksum(&member, path)?
            }
            Err(e) => return Err(e.into()),
        };
        let name = path.display().to_string();
        if args.badblocks {
            print!("{}", bad_blocks_text(&member, &sb, &name)?);
            continue;
        }
        let bitmap = read_bitmap(&member, &sb).with_context(|| name.clone());
        if args.bitmap {
            let Some(bytes) = bitmap? else {
                bail!("{name}: the array keeps no internal bitmap");
            };
            let (bsb, bits) = parse_bitmap(&bytes).with_context(|| name.clone())?;
            print!("{}", xraid_format::examine_bitmap_text(&bsb, &bits, &name));
            continue;
        }
        // A bitmap that cannot be read does not hide the superblock (mdadm shows it).
        let bitmap = bitmap.ok().flatten();
        let bsb = bitmap.as_deref().and_then(|b| BitmapSuper::parse(b).ok());
        let device_sectors = member.size_bytes() / 512;
        let text = xraid_format::examine_text_on_device(&sb, bsb.as_ref(), &name, device_sectors);
        print!("{text}");
        if let Some(line) = integrity_line(&member, &sb) {
            println!("{line}");
        }
        // mdadm's arithmetic above wraps for a device shorter than its superblock
        // says (its "Unused Space ... after" turns huge); say plainly what is wrong.
        let data_end = sb.data_offset.saturating_add(sb.data_size);
        if device_sectors < data_end {
            eprintln!(
                "xraid: warning: {name} is shorter than its superblock says ({device_sectors} sectors; its data area ends at sector {data_end}): truncated, or the wrong device"
            );
        }
    }
    Ok(())
}

/// The member's bad block log as `mdadm --examine-badblocks` prints it.
/// The superblock at 4 KiB of `member`, read whatever its checksum says.
fn superblock_despite_checksum(member: &FileMember, path: &std::path::Path) -> Result<Superblock> {
    let mut buf = vec![0u8; 4096];
    member
        .read_at(&mut buf, xraid_format::SUPERBLOCK_OFFSET_BYTES)
        .with_context(|| path.display().to_string())?;
    Superblock::parse_despite_checksum(&buf).with_context(|| path.display().to_string())
}

fn bad_blocks_text(member: &FileMember, sb: &Superblock, name: &str) -> Result<String> {
    // mdadm calls a log over 100 sectors none (the kernel reads at most 8).
    let Some(at) = bad_block_log_sectors(sb).filter(|_| sb.bblog_size <= 100) else {
        return Ok(format!("No bad-blocks list configured on {name}\n"));
    };
    if sb.feature_map & MD_FEATURE_BAD_BLOCKS == 0 {
        return Ok(format!("Bad-blocks list is empty in {name}\n"));
    }
    let mut log = vec![0u8; usize::try_from((at.end - at.start) * 512)?];
    member
        .read_at(&mut log, at.start * 512)
        .with_context(|| format!("{name}: reading its bad block log"))?;
    let bad = BadBlocks::parse(&log, sb.bblog_shift).with_context(|| name.to_owned())?;
    let mut text = format!("Bad-blocks on {name}:\n");
    for line in bad.examine_lines(sb.bblog_shift) {
        text.push_str(&line);
        text.push('\n');
    }
    Ok(text)
}

/// xraid's own line, after mdadm's: the member's integrity area, if it has one.
fn integrity_line(member: &FileMember, sb: &Superblock) -> Option<String> {
    let at = xraid_format::area_start_sector(sb) * 512;
    let mut head = vec![0u8; xraid_format::PAGE_BYTES];
    if at + head.len() as u64 > member.size_bytes() || member.read_at(&mut head, at).is_err() {
        return None;
    }
    let header = xraid_format::IntegrityHeader::parse(&head).ok()?;
    let state = if header.set_uuid != sb.set_uuid || header.device_uuid != sb.device_uuid {
        "of another array or device: not used"
    } else if header.events < sb.events {
        "older than the superblock (written elsewhere since): checksums unknown until read"
    } else {
        "current"
    };
    Some(format!(
        "      Integrity : CRC-32C per 4K block, {} blocks at sector {}, {state}",
        header.blocks,
        at / 512
    ))
}

/// The bytes of the member's internal bitmap (its superblock and bits), if the
/// superblock says it has one.
fn read_bitmap(member: &FileMember, sb: &Superblock) -> Result<Option<Vec<u8>>> {
    let Some(start) = bitmap_start_sector(sb) else {
        return Ok(None);
    };
    let mut head = vec![0u8; BITMAP_SUPER_BYTES];
    member.read_at(&mut head, start * 512)?;
    let Ok(bsb) = BitmapSuper::parse(&head) else {
        return Ok(Some(head));
    };
    // md's bitmaps are small; a header claiming more than this is not read whole.
    const MAX_BITMAP_BYTES: u64 = 64 << 20;
    let bytes_claimed = bsb.on_disk_bytes();
    if bytes_claimed > MAX_BITMAP_BYTES {
        bail!("its bitmap claims {bytes_claimed} bytes (at most {MAX_BITMAP_BYTES} are read)");
    }
    let len = usize::try_from(bytes_claimed).context("bitmap larger than memory")?;
    let mut bytes = vec![0u8; len];
    member.read_at(&mut bytes, start * 512)?;
    Ok(Some(bytes))
}
