//! `xraid read` and `xraid write`: the array's bytes to and from files or pipes.

use std::fs::File;
use std::io::{BufWriter, Read, Write};

use anyhow::{bail, Context, Result};
use xraid_array::OpenMode;
use xraid_driver::BackendChoice;
use xraid_layout::SECTOR_BYTES;

use super::open_array;
use crate::cli::{ReadArgs, WriteArgs};
use crate::progress::bytes_bar;

pub fn read(args: ReadArgs, backend: BackendChoice) -> Result<()> {
    let mut array = open_array(&args.array, OpenMode::ReadOnly, backend)?;
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
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(BufWriter::new(
            File::create(path).with_context(|| format!("{}", path.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let bar = bytes_bar(length, "reading");
    array
        .driver()
        .read_stream(args.offset, length, &mut out, &mut |done| {
            bar.set_position(done)
        })?;
    bar.finish_and_clear();
    array.close()?;
    Ok(())
}

pub fn write(args: WriteArgs, backend: BackendChoice) -> Result<()> {
    let mut input: Box<dyn Read> = match &args.input {
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
    let mut array = open_array(&args.array, OpenMode::ReadWrite, backend)?;
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
    let result = array
        .driver()
        .write_stream(args.offset, &mut input, &mut |done| bar.set_position(done));
    bar.finish_and_clear();
    // Mark the array clean even when the input failed part-way: what was written is
    // flushed and consistent.
    let closed = array.close();
    result?;
    closed?;
    Ok(())
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
