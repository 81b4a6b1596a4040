//! Opening the O_DIRECT descriptor of a member, and finding out whether O_DIRECT really
//! works there: some file systems refuse the flag (tmpfs), others accept it and then
//! fail the I/O, so a test read is part of the check.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Length of the test read: one page covers every logical block size up to 4 KiB.
const PROBE_BYTES: usize = 4096;

const UNSUPPORTED: &str = "the file system does not support O_DIRECT";
const IN_MEMORY: &str =
    "the file system keeps files in memory (tmpfs): O_DIRECT would bypass nothing and make every I/O wait for a kernel worker";

/// statfs magic numbers of the file systems that live in memory.
const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// The O_DIRECT descriptor, or why there is none.
pub(crate) enum Direct {
    Available(File),
    Unavailable(String),
}

/// Opens `path` again with O_DIRECT and, when the member is large enough, reads its
/// first block through it. `is_block`: `path` is a block device node, whose data lies
/// on the device, not in the file system that holds the node (/dev is devtmpfs, which
/// statfs reports as tmpfs: asking it would deny every disk O_DIRECT).
pub(crate) fn open_direct(
    path: &Path,
    is_block: bool,
    write: bool,
    size: u64,
    align: usize,
) -> Direct {
    if !is_block && in_memory(path) {
        return Direct::Unavailable(IN_MEMORY.to_owned());
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            return Direct::Unavailable(UNSUPPORTED.to_owned())
        }
        Err(e) => return Direct::Unavailable(format!("opening with O_DIRECT failed: {e}")),
    };
    match probe(&file, size, align) {
        Ok(()) => Direct::Available(file),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Direct::Unavailable(UNSUPPORTED.to_owned())
        }
        Err(e) => Direct::Unavailable(format!("an O_DIRECT test read failed: {e}")),
    }
}

/// Whether `path` lies on tmpfs or ramfs. There the page cache is the storage: reads
/// and writes through it complete at once (io_uring does them inline), while O_DIRECT
/// ones are handed to kernel workers.
fn in_memory(path: &Path) -> bool {
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into the zeroed local struct; the path is NUL-terminated.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c_path.as_ptr(), &mut st) != 0 {
            return false;
        }
        let magic = st.f_type as i64;
        magic == TMPFS_MAGIC || magic == RAMFS_MAGIC
    }
}

/// Reads the first block through the O_DIRECT descriptor; members too small for one
/// block are not probed (nothing will be read from them with O_DIRECT anyway).
fn probe(file: &File, size: u64, align: usize) -> io::Result<()> {
    let len = PROBE_BYTES.max(align);
    if size < len as u64 {
        return Ok(());
    }
    let mut storage = vec![0u8; len + align];
    let start = storage.as_ptr().align_offset(align);
    let Some(buf) = storage.get_mut(start..start + len) else {
        // align_offset may in principle give up; then there is nothing to test with.
        return Ok(());
    };
    file.read_at(buf, 0).map(drop)
}
