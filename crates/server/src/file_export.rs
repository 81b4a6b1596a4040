//! A plain file (or block device) served as it is: reads and writes go straight to it,
//! holes are found with SEEK_DATA/SEEK_HOLE, trims punch holes.
//!
//! This is the export xraid's NBD path is compared with other servers through, and the
//! way to serve an image that is not an md member.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use xraid_nbd::consts::{EIO, ENOSPC, ENOTSUP, EPERM, STATE_HOLE, STATE_ZERO};

use crate::mapped::Mapping;

/// A served file.
#[derive(Debug)]
pub(crate) struct FileExport {
    file: File,
    size: u64,
    /// The file mapped whole, for long reads to clients on this machine; `None` where
    /// it cannot be mapped.
    mapping: Option<Mapping>,
}

/// One run of the file: data, or a hole that reads as zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub offset: u64,
    pub length: u64,
    pub hole: bool,
}

impl Extent {
    pub(crate) fn nbd_flags(&self) -> u32 {
        if self.hole {
            STATE_HOLE | STATE_ZERO
        } else {
            0
        }
    }
}

impl FileExport {
    pub(crate) fn open(path: &Path, read_only: bool) -> io::Result<FileExport> {
        // A block device served to write is claimed as a member is (O_EXCL): one that
        // is mounted, or that md or LVM holds, is refused rather than written over.
        let claim = !read_only
            && std::fs::metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()));
        let file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .custom_flags(if claim { libc::O_EXCL } else { 0 })
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EBUSY) if claim => io::Error::new(
                    e.kind(),
                    "in use (mounted, a member of md or LVM, or held by another program): unmount it or stop what holds it first, or serve it --read-only",
                ),
                _ => e,
            })?;
        let size = file_size(&file)?;
        let mapping = Mapping::new(file.as_raw_fd(), size, !read_only);
        Ok(FileExport {
            file,
            size,
            mapping,
        })
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The file's pages mapped, to be sent from (never read by us: see `mapped`).
    pub(crate) fn mapping(&self) -> Option<&Mapping> {
        self.mapping.as_ref()
    }

    /// Appends `len` bytes read at `offset` to `out`, reading straight into its spare
    /// capacity: no zero-fill first, which for a megabyte is a whole extra pass over
    /// memory. On an error `out` is as it was.
    pub(crate) fn read_append(
        &self,
        out: &mut Vec<u8>,
        len: usize,
        offset: u64,
    ) -> Result<(), u32> {
        out.reserve(len);
        let mut done = 0;
        while done < len {
            let spare = &mut out.spare_capacity_mut()[done..len];
            let Ok(at) = i64::try_from(offset + done as u64) else {
                return Err(EIO);
            };
            // SAFETY: the kernel writes at most `spare.len()` bytes to the pointer, which
            // addresses that much writable (uninitialised) memory owned by `out`; the
            // descriptor is the open file.
            let n = unsafe {
                libc::pread(
                    self.file.as_raw_fd(),
                    spare.as_mut_ptr().cast::<libc::c_void>(),
                    spare.len(),
                    at,
                )
            };
            match n {
                // The file is shorter than it was when opened.
                0 => return Err(EIO),
                n if n > 0 => done += n as usize,
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(errno_of(&e));
                    }
                }
            }
        }
        // SAFETY: the `len` bytes after the old length were all written by pread above
        // (`done` counts them), and `reserve` made room for them.
        unsafe { out.set_len(out.len() + len) };
        Ok(())
    }

    /// The file's descriptor, for sendfile(2).
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The file's size now (it may have changed since it was opened, if someone else
    /// truncated it) and whether it may have holes, from one fstat.
    pub(crate) fn now(&self) -> io::Result<(u64, bool)> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata()?;
        if !m.is_file() {
            return Ok((self.size, false));
        }
        Ok((m.size(), m.blocks() * 512 < m.size()))
    }

    pub(crate) fn write(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), u32> {
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| errno_of(&e))?;
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    pub(crate) fn flush(&self) -> Result<(), u32> {
        self.file.sync_data().map_err(|e| errno_of(&e))
    }

    /// Discards a range: punches a hole where the file system can, and otherwise does
    /// nothing (a trim is only a hint).
    pub(crate) fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), u32> {
        let _ = self.fallocate(
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            length,
        );
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    /// Makes a range read as zeros: a hole if allowed, else zeroed blocks; writes zeros
    /// only when the file system can do neither, and never when `fast` was asked for.
    pub(crate) fn write_zeroes(
        &self,
        offset: u64,
        length: u64,
        may_trim: bool,
        fast: bool,
        fua: bool,
    ) -> Result<(), u32> {
        let punched = may_trim
            && self
                .fallocate(
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset,
                    length,
                )
                .is_ok();
        let zeroed = punched
            || self
                .fallocate(
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                    offset,
                    length,
                )
                .is_ok();
        if !zeroed {
            if fast {
                return Err(ENOTSUP);
            }
            let zeros = vec![0u8; 1 << 20];
            let mut at = offset;
            while at < offset + length {
                let n = (offset + length - at).min(zeros.len() as u64) as usize;
                self.file
                    .write_all_at(&zeros[..n], at)
                    .map_err(|e| errno_of(&e))?;
                at += n as u64;
            }
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    /// Asks the kernel to read a range ahead into its cache.
    pub(crate) fn cache(&self, offset: u64, length: u64) -> Result<(), u32> {
        let (Ok(off), Ok(len)) = (i64::try_from(offset), i64::try_from(length)) else {
            return Ok(());
        };
        // SAFETY: posix_fadvise takes no pointers; the descriptor is the open file.
        unsafe { libc::posix_fadvise(self.file.as_raw_fd(), off, len, libc::POSIX_FADV_WILLNEED) };
        Ok(())
    }

    /// Whether the file may have holes: it has fewer blocks allocated than its size
    /// needs. Cheap (one fstat), unlike SEEK_DATA on some file systems (tmpfs takes
    /// hundreds of microseconds on a large file), so reads ask this first.
    pub(crate) fn may_have_holes(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        self.file
            .metadata()
            .map_or(true, |m| m.is_file() && m.blocks() * 512 < m.size())
    }

    /// The data and hole extents covering `offset..offset+length` (at most `max`
    /// extents, the last one possibly cut short). Without SEEK_DATA support the whole
    /// range is data.
    pub(crate) fn extents(&self, offset: u64, length: u64, max: usize) -> Vec<Extent> {
        let end = (offset + length).min(self.size);
        let mut out = Vec::new();
        let mut at = offset;
        while at < end && out.len() < max {
            let Some(data) = self.seek(at, libc::SEEK_DATA) else {
                // ENXIO: no data after `at`, the rest is a hole; other errors: no
                // SEEK_DATA here, call it data.
                let hole = self.seek_failed_with_enxio();
                out.push(Extent {
                    offset: at,
                    length: end - at,
                    hole,
                });
                break;
            };
            if data > at {
                let stop = data.min(end);
                out.push(Extent {
                    offset: at,
                    length: stop - at,
                    hole: true,
                });
                at = stop;
                continue;
            }
            let hole = self.seek(at, libc::SEEK_HOLE).unwrap_or(end).min(end);
            if hole <= at {
                // A write or trim raced the two seeks: call the rest data rather than
                // report an empty extent (clients would ask again forever).
                out.push(Extent {
                    offset: at,
                    length: end - at,
                    hole: false,
                });
                break;
            }
            out.push(Extent {
                offset: at,
                length: hole - at,
                hole: false,
            });
            at = hole;
        }
        out
    }

    fn seek(&self, offset: u64, whence: i32) -> Option<u64> {
        let off = i64::try_from(offset).ok()?;
        // SAFETY: lseek takes no pointers; the descriptor is the open file. The file's
        // position is never used for I/O here (all I/O is positional).
        let r = unsafe { libc::lseek(self.file.as_raw_fd(), off, whence) };
        u64::try_from(r).ok()
    }

    fn seek_failed_with_enxio(&self) -> bool {
        io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO)
    }

    fn fallocate(&self, mode: i32, offset: u64, length: u64) -> io::Result<()> {
        let (Ok(off), Ok(len)) = (i64::try_from(offset), i64::try_from(length)) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        // SAFETY: fallocate takes no pointers; the descriptor is the open file.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), mode, off, len) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// The size of a regular file or a block device.
fn file_size(file: &File) -> io::Result<u64> {
    let meta = file.metadata()?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    // SAFETY: lseek takes no pointers; the descriptor is the open file.
    let end = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_END) };
    u64::try_from(end).map_err(|_| io::Error::last_os_error())
}

/// The NBD error for an I/O error.
pub(crate) fn errno_of(e: &io::Error) -> u32 {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES | libc::EROFS) => EPERM,
        Some(libc::ENOSPC | libc::EDQUOT) => ENOSPC,
        _ => EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_find_holes_in_a_sparse_file() {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let path = dir.path().join("f.img");
        let f = File::create(&path).expect("create");
        f.set_len(4 << 20).expect("size");
        f.write_all_at(&[1u8; 65536], 1 << 20).expect("data");
        drop(f);
        let export = FileExport::open(&path, false).expect("open");
        let ext = export.extents(0, 4 << 20, 100);
        assert_eq!(ext.iter().map(|e| e.length).sum::<u64>(), 4 << 20);
        let data: Vec<&Extent> = ext.iter().filter(|e| !e.hole).collect();
        assert!(!data.is_empty());
        assert!(data
            .iter()
            .all(|e| e.offset <= 1 << 20 && e.offset + e.length >= (1 << 20) + 65536));
        assert!(ext[0].hole, "{ext:?}");
        export.trim(1 << 20, 65536, false).expect("trim");
        let mut buf = vec![9u8; 3];
        export.read_append(&mut buf, 65536, 1 << 20).expect("read");
        assert_eq!(buf.len(), 65539);
        assert_eq!(buf[..3], [9, 9, 9]);
        let buf = &buf[3..];
        assert!(
            buf.iter().all(|&b| b == 0),
            "trimmed range reads as zeros here"
        );
    }
}
