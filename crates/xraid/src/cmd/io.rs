//! `xraid read` and `xraid write`: the array's bytes to and from files or pipes, and
//! what the engine found and repaired on the way (the server logs the same as it
//! happens).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use xraid_array::{Array, OpenMode};
use xraid_driver::BackendChoice;
use xraid_engine::Event;
use xraid_layout::SECTOR_BYTES;

use super::open_array_with_faults;
use super::output::Output;
use crate::cli::{ReadArgs, WriteArgs};
use crate::progress::bytes_bar;

pub fn read(args: ReadArgs, backend: BackendChoice) -> Result<()> {
    let mut array = open_array_with_faults(&args.array, OpenMode::ReadOnly, backend, &args.fault)?;
    let size = array.driver().engine().array_sectors() * SECTOR_BYTES;
    check_offset(args.offset, size)?;
    let length = args.length.unwrap_or(size - args.offset);
    if args.offset + length > size {
        bail!(
            "--offset {} plus --length {length} reaches past the array's end at {size} bytes",
            args.offset
        );
    }
    if !length.is_multiple_of(SECTOR_BYTES) {
        bail!("--length {length} is not a multiple of 512 bytes");
    }
    if let Some(path) = &args.output {
        refuse_member_as_output(path)?;
    }
    let output = args.output.as_deref().map(Output::create).transpose()?;
    let mut out: Box<dyn Write> = match &output {
        Some(output) => Box::new(BufWriter::new(output.file.try_clone()?)),
        None => Box::new(std::io::stdout().lock()),
    };
    let bar = bytes_bar(length, "reading");
    let mut unreadable = Vec::new();
    let mut progress = |done| bar.set_position(done);
    let result = if args.keep_going {
        array.driver().read_stream_past_unreadable(
            args.offset,
            length,
            &mut out,
            &mut progress,
            &mut unreadable,
        )
    } else {
        array
            .driver()
            .read_stream(args.offset, length, &mut out, &mut progress)
    };
    bar.finish_and_clear();
    drop(out);
    report_repairs(
        &mut array,
        &args.array,
        true,
        result.is_ok() && unreadable.is_empty(),
    );
    if let Err(error) = result {
        // A read that stopped part way leaves nothing behind under the output's name.
        let left = match output {
            Some(output) => output.discard(),
            None => "standard output got the bytes before them".to_owned(),
        };
        if let xraid_driver::DriverError::Engine(xraid_engine::EngineError::Unreadable {
            sector,
            end,
        }) = error
        {
            bail!(
                "array bytes {}..{} cannot be read: a member returned read errors there, blocks that fail their checksums, sectors its bad block log lists or rows a cut-off write left unknown, and no redundancy is left to rebuild them ({left})",
                sector * SECTOR_BYTES,
                end * SECTOR_BYTES,
            );
        }
        return Err(error).context(format!(
            "reading bytes {}..{} of the array ({left})",
            args.offset,
            args.offset + length
        ));
    }
    let kept_in = match output {
        Some(output) => {
            let path = output.shown.display().to_string();
            output.keep()?;
            path
        }
        None => "standard output".to_owned(),
    };
    array.close()?;
    if !unreadable.is_empty() {
        let lost: u64 = unreadable.iter().map(|r| r.end - r.start).sum();
        let shown: Vec<String> = unreadable
            .iter()
            .take(MAX_RANGES_SHOWN)
            .map(|r| format!("{}..{}", r.start, r.end))
            .collect();
        let more = unreadable.len().saturating_sub(MAX_RANGES_SHOWN);
        bail!(
            "{lost} bytes in {} range{} of the array could not be read and are zeros in {kept_in}; the rest was read: array bytes {}{}",
            unreadable.len(),
            if unreadable.len() == 1 { "" } else { "s" },
            shown.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() }
        );
    }
    Ok(())
}

/// Unreadable ranges `read --keep-going` lists by name; the rest are counted.
const MAX_RANGES_SHOWN: usize = 20;

/// What one member did wrong during a read or write, gathered from the engine's events.
#[derive(Debug, Default)]
struct Trouble {
    /// Per member read that met blocks failing their checksums, the member data bytes
    /// from the first of them to the last.
    checksum_ranges: Vec<std::ops::Range<u64>>,
    /// Read errors rebuilt from redundancy and rewritten.
    corrected: u64,
}

/// Checksum blocks in `ranges` of member bytes (which overlap when a block is read
/// again), each counted once.
fn distinct_blocks(mut ranges: Vec<std::ops::Range<u64>>) -> u64 {
    let block = xraid_format::BLOCK_BYTES as u64;
    ranges.sort_by_key(|r| r.start);
    let (mut blocks, mut covered) = (0, 0u64);
    for r in ranges {
        let (start, end) = ((r.start / block).max(covered), r.end.div_ceil(block));
        blocks += end.saturating_sub(start);
        covered = covered.max(end);
    }
    blocks
}

/// Prints, one warning line per member, what the engine found on the way: blocks that
/// failed their checksums, read errors, members it failed. `succeeded`: the read or
/// write as a whole got through (so what was found was rebuilt from redundancy).
fn report_repairs(array: &mut Array, array_arg: &[PathBuf], read_only: bool, succeeded: bool) {
    let failures = array.driver().take_failures();
    let events = array.take_events().unwrap_or_default();
    let mut trouble: BTreeMap<u16, Trouble> = BTreeMap::new();
    for event in events {
        match event {
            Event::ChecksumMismatch {
                member,
                sector,
                sectors,
            } => {
                let (lo, hi) = (sector * SECTOR_BYTES, (sector + sectors) * SECTOR_BYTES);
                trouble
                    .entry(member.0)
                    .or_default()
                    .checksum_ranges
                    .push(lo..hi);
            }
            Event::ReadErrorCorrected { member, .. } => {
                trouble.entry(member.0).or_default().corrected += 1;
            }
            _ => {}
        }
    }
    let engine = array.driver_ref().engine();
    let members = engine.member_states().len();
    let mut plain_errors = BTreeMap::new();
    for role in 0..members {
        let member = xraid_engine::MemberIdx(role as u16);
        let checksum_reads = trouble
            .get(&member.0)
            .map_or(0, |t| t.checksum_ranges.len() as u64);
        let errors = u64::from(engine.read_errors(member)).saturating_sub(checksum_reads);
        if errors > 0 {
            plain_errors.insert(member.0, errors);
        }
    }
    let redundant = engine.geometry().level() != xraid_layout::Level::Raid0;
    let array_words = array_arg
        .iter()
        .map(|p| super::shell_word(&p.display().to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let name = |role: u16| {
        array
            .role_path(usize::from(role))
            .map_or_else(|| format!("role {role}"), |p| p.display().to_string())
    };
    let roles: std::collections::BTreeSet<u16> =
        trouble.keys().chain(plain_errors.keys()).copied().collect();
    for role in roles {
        let t = trouble.remove(&role).unwrap_or_default();
        let errors = plain_errors.get(&role).copied().unwrap_or(0);
        let mut found = Vec::new();
        if !t.checksum_ranges.is_empty() {
            let lo = t.checksum_ranges.iter().map(|r| r.start).min().unwrap_or(0);
            let hi = t.checksum_ranges.iter().map(|r| r.end).max().unwrap_or(0);
            let at = format!(" (member data bytes {lo}..{hi})");
            let blocks = distinct_blocks(t.checksum_ranges);
            found.push(format!(
                "{blocks} block{} {} checksum{at}: silent corruption",
                if blocks == 1 { "" } else { "s" },
                if blocks == 1 {
                    "fails its"
                } else {
                    "fail their"
                },
            ));
        }
        if errors > 0 {
            found.push(format!(
                "{errors} read{} failed",
                if errors == 1 { "" } else { "s" }
            ));
        }
        let outcome = if !redundant {
            "the array has no redundancy to rebuild from".to_owned()
        } else if !succeeded {
            "what redundancy was left could not rebuild all of it".to_owned()
        } else if read_only {
            format!("the data was rebuilt from redundancy for this read, but the member still holds the bad blocks (the array was opened to read only): `xraid scrub repair {array_words}` rewrites them")
        } else if t.corrected > 0 {
            "rebuilt from redundancy and rewritten".to_owned()
        } else {
            "rebuilt from redundancy".to_owned()
        };
        eprintln!(
            "xraid: warning: {}: {}; {outcome}",
            name(role),
            found.join(", ")
        );
    }
    // Past the level's redundancy the array has failed: it does not run degraded.
    let lost = array.driver_ref().engine().lost_error();
    for failure in failures {
        let outcome = match (&lost, read_only) {
            (Some(lost), _) => format!("it is left out, and the array has failed ({lost})"),
            (None, true) => {
                "it is left out for the rest of this read (nothing is recorded)".to_owned()
            }
            (None, false) => "it is left out and the array runs degraded".to_owned(),
        };
        eprintln!(
            "xraid: warning: member {} failed ({}): {outcome}",
            failure.name,
            failure.why(),
        );
    }
}

pub fn write(args: WriteArgs, backend: BackendChoice) -> Result<()> {
    let input: Box<dyn Read> = match &args.input {
        Some(path) => Box::new(File::open(path).with_context(|| format!("{}", path.display()))?),
        None => Box::new(std::io::stdin().lock()),
    };
    let input_len = match &args.input {
        Some(path) => {
            let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
            if meta.is_dir() {
                bail!("{}: is a directory, not a file to write", path.display());
            }
            Some(meta.len())
        }
        None => None,
    };
    let mut array = open_array_with_faults(&args.array, OpenMode::ReadWrite, backend, &args.fault)?;
    let size = array.driver().engine().array_sectors() * SECTOR_BYTES;
    check_offset(args.offset, size)?;
    if let Some(len) = input_len {
        if args.offset + len > size {
            bail!(
                "{} bytes at --offset {} do not fit: the array holds {size} bytes",
                len,
                args.offset
            );
        }
    }
    array.begin_writes()?;
    let bar = bytes_bar(input_len.unwrap_or(0), "writing");
    let mut input = UpToTheEnd {
        input,
        room: size - args.offset,
        more: false,
    };
    let mut moved = 0;
    let result = array.write_stream(args.offset, &mut input, &mut |done| {
        moved = done;
        bar.set_position(done)
    });
    bar.finish_and_clear();
    report_repairs(&mut array, &args.array, false, result.is_ok());
    // Mark the array clean even when the input failed part-way: what was written is
    // flushed and consistent.
    let closed = array.close();
    let written = match result {
        Ok(written) => written,
        Err(xraid_array::ArrayError::Driver(xraid_driver::DriverError::Engine(
            xraid_engine::EngineError::Unwritable { sector, end },
        ))) => bail!(
            "array bytes {}..{} could not be written: a member refused them and the array has no redundancy to keep them elsewhere (it was not failed for it; the input before them was written)",
            sector * SECTOR_BYTES,
            end * SECTOR_BYTES
        ),
        Err(error) => bail!(
            "{error} (the first {moved} bytes of the input were written from --offset {})",
            args.offset
        ),
    };
    closed?;
    if input.more {
        bail!(
            "the input does not fit: {written} bytes were written from --offset {} up to the array's end at {size} bytes, and the rest of the input was not",
            args.offset
        );
    }
    Ok(())
}

/// The input of `xraid write`, ending where the array does: a pipe's length is known
/// only once it has been read, so the bytes up to the array's end are written and
/// `more` says whether the input went on beyond them. Finding that out takes one more
/// read, which waits for a writer that keeps the pipe open without writing (a
/// terminal): the end of the array is no end of the input.
struct UpToTheEnd {
    input: Box<dyn Read>,
    room: u64,
    more: bool,
}

impl Read for UpToTheEnd {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            if !self.more && !buf.is_empty() {
                let mut probe = [0u8; 1];
                self.more = loop {
                    match self.input.read(&mut probe) {
                        Ok(n) => break n > 0,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                };
            }
            return Ok(0);
        }
        let len = buf
            .len()
            .min(usize::try_from(self.room).unwrap_or(usize::MAX));
        let got = self.input.read(&mut buf[..len])?;
        self.room -= got as u64;
        Ok(got)
    }
}

fn check_offset(offset: u64, size: u64) -> Result<()> {
    if !offset.is_multiple_of(SECTOR_BYTES) {
        bail!("--offset {offset} is not a multiple of 512 bytes");
    }
    if offset > size {
        bail!("--offset {offset} is past the array's end at {size} bytes");
    }
    Ok(())
}

/// Refuses an output file that holds an md superblock: an array's own member (under
/// any name: the member's lock does not stop a file from being replaced by a rename),
/// or another array's, would be lost under the array's contents.
fn refuse_member_as_output(path: &std::path::Path) -> Result<()> {
    let options = xraid_member::OpenOptions {
        write: false,
        direct: xraid_member::DirectMode::Off,
        lock: false,
    };
    let Ok(file) = xraid_member::FileMember::open(path, &options) else {
        // Nothing there yet (or nothing readable): the output's own checks speak.
        return Ok(());
    };
    if let Ok(Some(sb)) = xraid_array::read_superblock(&file, path) {
        bail!(
            "{} holds an md superblock (a member of array '{}'): writing the array's contents there would destroy it; give another -o",
            path.display(),
            sb.name()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::distinct_blocks;

    #[test]
    fn blocks_read_again_are_counted_once() {
        assert_eq!(distinct_blocks(vec![]), 0);
        assert_eq!(distinct_blocks(vec![4096..8192, 4096..4608, 4608..5120]), 1);
        assert_eq!(
            distinct_blocks(vec![0..12288, 8192..16384, 1 << 20..(1 << 20) + 1]),
            5
        );
    }
}
