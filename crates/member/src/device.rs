//! What the kernel knows about an open member: its size and, for block devices, the
//! logical block size O_DIRECT must be aligned to and whether it is write-protected.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;

/// Alignment assumed for O_DIRECT on regular files: no common file system asks for
/// more than 4 KiB.
pub(crate) const FILE_DIRECT_ALIGN: usize = 4096;

/// The smallest logical block size a block device can have.
const MIN_SECTOR: usize = 512;

/// Size of a block device: seeking to the end works on every architecture, unlike
/// BLKGETSIZE64 whose request number differs between them. Positional I/O never uses
/// the file position, so moving it is harmless.
pub(crate) fn block_device_size(mut file: &File) -> io::Result<u64> {
    file.seek(SeekFrom::End(0))
}

/// The logical block size of a block device (BLKSSZGET), at least 512.
pub(crate) fn logical_block_size(file: &File) -> io::Result<usize> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one c_int through the pointer, which points at `size`,
    // alive for the call; the descriptor belongs to the borrowed `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut size) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let size = usize::try_from(size).unwrap_or(0);
    Ok(size.max(MIN_SECTOR))
}

/// BLKROGET, `_IO(0x12, 94)`, which libc does not name. Where `_IOC_NONE` is 1 rather
/// than 0 (mips, powerpc, sparc), the direction sits in bit 29, as libc's BLKSSZGET
/// shows for those architectures.
const BLKROGET: libc::Ioctl = if cfg!(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "sparc",
    target_arch = "sparc64"
)) {
    0x2000_125e
} else {
    0x125e
};

/// Whether the kernel holds the block device read-only (a write-protect switch,
/// `blockdev --setro`, a read-only loop device). Opening it to write succeeds all the
/// same; only the writes fail.
pub(crate) fn read_only(file: &File) -> io::Result<bool> {
    let mut ro: libc::c_int = 0;
    // SAFETY: BLKROGET writes one c_int through the pointer, which points at `ro`,
    // alive for the call; the descriptor belongs to the borrowed `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKROGET, &mut ro) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ro != 0)
}
