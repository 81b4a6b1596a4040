//! Holes: which parts of a file hold data (SEEK_DATA/SEEK_HOLE), and zeroing a range
//! by freeing it (fallocate's PUNCH_HOLE) where the file system or device can.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;

/// The parts of `offset..offset + length` of `file` that may hold data; everything
/// else in the range surely reads as zeros. Where the file system cannot tell (or a
/// look-up fails) the rest of the range counts as data, so the answer errs towards
/// data, never towards zeros.
pub fn data_ranges(file: &File, offset: u64, length: u64) -> Vec<Range<u64>> {
    let end = offset.saturating_add(length);
    let mut ranges = Vec::new();
    let mut at = offset;
    while at < end {
        let data = match seek(file, at, libc::SEEK_DATA) {
            Ok(data) => data,
            // No data from `at` to the end of the file.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => break,
            Err(_) => {
                ranges.push(at..end);
                break;
            }
        };
        if data >= end {
            break;
        }
        let hole = seek(file, data, libc::SEEK_HOLE).map_or(end, |hole| hole.min(end));
        if hole <= data {
            // A file system that answers nonsense is taken to hold data to the end.
            ranges.push(data..end);
            break;
        }
        ranges.push(data..hole);
        at = hole;
    }
    ranges
}

/// Makes `offset..offset + length` of `file` read as zeros without writing them: a
/// punched hole where the file system (or, for a block device, the device) can free
/// the range, else the file system's zero-range. `Unsupported` when neither exists;
/// the caller then writes zeros.
pub fn zero_without_writing(file: &File, offset: u64, length: u64) -> io::Result<()> {
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    let zero = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
    for mode in [punch, zero] {
        match fallocate(file, mode, offset, length) {
            Ok(()) => return Ok(()),
            Err(e) if not_supported(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Writes zeros over `offset..offset + length` through `write_at`, a MiB at a time:
/// the way to zero a member that cannot free ranges.
pub(crate) fn write_zeros(
    write_at: impl Fn(&[u8], u64) -> io::Result<()>,
    offset: u64,
    length: u64,
) -> io::Result<()> {
    const PIECE: u64 = 1 << 20;
    let zeros = vec![0u8; PIECE.min(length) as usize];
    let mut at = offset;
    let end = offset + length;
    while at < end {
        let n = (end - at).min(PIECE);
        write_at(&zeros[..n as usize], at)?;
        at += n;
    }
    Ok(())
}

fn not_supported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL | libc::ENODEV)
    )
}

fn seek(file: &File, offset: u64, whence: i32) -> io::Result<u64> {
    let offset = libc::off_t::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: lseek on a descriptor `file` owns; it changes only the (unused) file
    // position, and positional I/O never reads it.
    let at = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
    if at < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(at as u64)
}

fn fallocate(file: &File, mode: i32, offset: u64, length: u64) -> io::Result<()> {
    let offset = libc::off_t::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    let length = libc::off_t::try_from(length).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: fallocate on a descriptor `file` owns, with no memory passed in.
    if unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, length) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;

    const K: u64 = 1024;

    fn sparse_file(size: u64) -> File {
        let file = tempfile::tempfile().expect("temp file");
        file.set_len(size).expect("size");
        file
    }

    #[test]
    fn a_new_sparse_file_has_no_data() {
        let file = sparse_file(1024 * K);
        assert_eq!(data_ranges(&file, 0, 1024 * K), Vec::<Range<u64>>::new());
    }

    #[test]
    fn written_blocks_are_data_and_the_rest_holes() {
        let file = sparse_file(1024 * K);
        file.write_all_at(&[7u8; 4096], 256 * K).expect("write");
        file.write_all_at(&[7u8; 4096], 900 * K).expect("write");
        let ranges = data_ranges(&file, 0, 1024 * K);
        // File systems may round data up to their own block size, never down.
        assert_eq!(ranges.len(), 2, "{ranges:?}");
        assert!(ranges[0].start <= 256 * K && ranges[0].end >= 260 * K);
        assert!(ranges[1].start <= 900 * K && ranges[1].end >= 904 * K);
        // A window that starts inside data is clipped to the window.
        let inside = data_ranges(&file, 257 * K, K);
        assert_eq!(inside.len(), 1, "{inside:?}");
        assert_eq!((inside[0].start, inside[0].end), (257 * K, 258 * K));
        // One that holds only holes has no data.
        assert!(data_ranges(&file, 300 * K, 500 * K).is_empty());
    }

    #[test]
    fn zeroing_frees_the_range_and_reads_back_zeros() {
        let file = sparse_file(1024 * K);
        file.write_all_at(&[9u8; 64 * 1024], 0).expect("write");
        match zero_without_writing(&file, 0, 64 * K) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Unsupported => return,
            Err(e) => panic!("zero: {e}"),
        }
        let mut back = vec![1u8; 64 * 1024];
        file.read_exact_at(&mut back, 0).expect("read");
        assert!(back.iter().all(|&b| b == 0));
        assert!(data_ranges(&file, 0, 64 * K).is_empty());
    }

    #[test]
    fn written_zeros_replace_data() {
        let file = sparse_file(3 << 20);
        file.write_all_at(&vec![5u8; 3 << 20], 0).expect("write");
        write_zeros(|b, at| file.write_all_at(b, at), 4096, (2 << 20) + 512).expect("zeros");
        let mut back = vec![0u8; 3 << 20];
        file.read_exact_at(&mut back, 0).expect("read");
        let end = 4096 + (2 << 20) + 512;
        assert!(back[..4096].iter().all(|&b| b == 5));
        assert!(back[4096..end].iter().all(|&b| b == 0));
        assert!(back[end..].iter().all(|&b| b == 5));
    }
}
