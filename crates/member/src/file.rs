//! Members that are kernel files: regular files and block devices.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::device::{block_device_size, logical_block_size, read_only, FILE_DIRECT_ALIGN};
use crate::direct::{open_direct, Direct};
use crate::lock::{lock_exclusive, Locked};
use crate::{DirectFd, DirectMode, Member, MemberError, OpenOptions};

/// A regular file or block device used as a member.
#[derive(Debug)]
pub struct FileMember {
    path: PathBuf,
    name: String,
    /// The page-cache descriptor: unaligned I/O, flush, and the flock.
    buffered: File,
    /// The O_DIRECT descriptor, where O_DIRECT works.
    direct: Option<File>,
    /// O_DIRECT alignment for `direct`.
    align: usize,
    /// The logical block size: a block device's own, 512 for a file.
    logical: u32,
    size: u64,
    /// Why O_DIRECT was wanted (Auto) but is not used.
    direct_reason: Option<String>,
}

impl FileMember {
    /// Opens a regular file or block device; see [`OpenOptions`] for locking and
    /// O_DIRECT.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<FileMember, MemberError> {
        // Checked before opening too, so that a FIFO is never opened (that would block).
        let meta = std::fs::metadata(path).map_err(|e| open_error(path, e))?;
        if !(meta.is_file() || meta.file_type().is_block_device()) {
            return Err(MemberError::NotFileOrBlock {
                path: path.to_owned(),
            });
        }
        let exclusive = opts.lock && opts.write && meta.file_type().is_block_device();
        let buffered = open_buffered(path, opts.write, exclusive)?;
        let meta = buffered.metadata().map_err(|e| open_error(path, e))?;
        let is_block = meta.file_type().is_block_device();
        if !(meta.is_file() || is_block) {
            return Err(MemberError::NotFileOrBlock {
                path: path.to_owned(),
            });
        }
        if opts.lock {
            match lock_exclusive(&buffered) {
                Ok(Locked::Yes) => {}
                Ok(Locked::HeldElsewhere) => {
                    return Err(MemberError::InUse {
                        path: path.to_owned(),
                    })
                }
                Err(source) => {
                    return Err(MemberError::Lock {
                        path: path.to_owned(),
                        source,
                    })
                }
            }
        }
        let size_error = |source| MemberError::Size {
            path: path.to_owned(),
            source,
        };
        // Refused here, before anything is written: its writes would fail (EPERM) and
        // the array would mark it faulty and run degraded over a write-protect flag
        // (md starts such an array read-only instead). A device that cannot say is
        // taken as writable: its writes then fail as before.
        if is_block && opts.write && read_only(&buffered).unwrap_or(false) {
            return Err(MemberError::ReadOnly {
                path: path.to_owned(),
            });
        }
        let (size, align) = if is_block {
            let size = block_device_size(&buffered).map_err(size_error)?;
            (size, logical_block_size(&buffered).map_err(size_error)?)
        } else {
            (meta.len(), FILE_DIRECT_ALIGN)
        };
        let (direct, direct_reason) = settle_direct(opts.direct, || {
            open_direct(path, is_block, opts.write, size, align)
        })
        .map_err(|reason| MemberError::DirectRequired {
            path: path.to_owned(),
            reason,
        })?;
        Ok(FileMember {
            path: path.to_owned(),
            name: path.display().to_string(),
            buffered,
            direct,
            align,
            logical: if is_block {
                u32::try_from(align).unwrap_or(u32::MAX)
            } else {
                512
            },
            size,
            direct_reason,
        })
    }

    /// Creates a sparse regular file of `size` bytes; refuses a path that exists.
    pub fn create_sparse(path: &Path, size: u64) -> Result<(), MemberError> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|source| match source.kind() {
                io::ErrorKind::AlreadyExists => MemberError::Exists {
                    path: path.to_owned(),
                },
                _ => MemberError::Create {
                    path: path.to_owned(),
                    source,
                },
            })?;
        file.set_len(size).map_err(|source| {
            // A file of the wrong size must not be left behind to be taken for a member.
            let _ = std::fs::remove_file(path);
            MemberError::Create {
                path: path.to_owned(),
                source,
            }
        })
    }

    /// Why O_DIRECT is not used, when it was wanted ([`DirectMode::Auto`]) but is
    /// unavailable; `None` otherwise.
    pub fn direct_unavailable_reason(&self) -> Option<&str> {
        self.direct_reason.as_deref()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether its path still names the file it has open (the same device and inode):
    /// not so once the file was deleted or replaced, or the disk went away, while it
    /// was held open.
    pub fn still_at_path(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.buffered.metadata(), std::fs::metadata(&self.path)) {
            (Ok(held), Ok(named)) => held.dev() == named.dev() && held.ino() == named.ino(),
            _ => false,
        }
    }
}

/// What the member uses given the mode asked for and what O_DIRECT turned out to be:
/// the O_DIRECT file and the reason it is missing, or, when O_DIRECT is required and
/// unavailable, the reason as an error.
fn settle_direct(
    mode: DirectMode,
    try_direct: impl FnOnce() -> Direct,
) -> Result<(Option<File>, Option<String>), String> {
    match mode {
        DirectMode::Off => Ok((None, None)),
        DirectMode::Auto | DirectMode::On => match (try_direct(), mode) {
            (Direct::Available(file), _) => Ok((Some(file), None)),
            (Direct::Unavailable(reason), DirectMode::On) => Err(reason),
            (Direct::Unavailable(reason), _) => Ok((None, Some(reason))),
        },
    }
}

/// Opens the page-cache descriptor. `exclusive`: a block device to be locked for
/// writing is opened with O_EXCL as well, as md opens its members, so that the kernel
/// refuses it while it is mounted, an md or LVM member, or opened so by another
/// program (EBUSY): flock alone sees none of those, and create wrote over a mounted
/// file system. Reading such a device harms nothing, so readers are not refused. A
/// holder that is another xraid may be one just killed whose last I/O the kernel is
/// still finishing: it is waited for as long as a flock would be.
fn open_buffered(path: &Path, write: bool, exclusive: bool) -> Result<File, MemberError> {
    let flags = if exclusive { libc::O_EXCL } else { 0 };
    let start = std::time::Instant::now();
    loop {
        match std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(flags)
            .open(path)
        {
            Ok(file) => return Ok(file),
            Err(e) if exclusive && e.raw_os_error() == Some(libc::EBUSY) => {
                if start.elapsed() >= crate::lock::GRACE {
                    return Err(MemberError::Busy {
                        path: path.to_owned(),
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(open_error(path, e)),
        }
    }
}

fn open_error(path: &Path, source: io::Error) -> MemberError {
    let path = path.to_owned();
    match source.raw_os_error() {
        Some(libc::ENOENT) => MemberError::NotFound { path },
        Some(libc::EISDIR) => MemberError::NotFileOrBlock { path },
        _ => MemberError::Open { path, source },
    }
}

// Reads and writes go through the page-cache descriptor: it takes any alignment, and
// Linux keeps it coherent with the O_DIRECT descriptor the driver may use.
impl Member for FileMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.buffered.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.buffered.write_all_at(buf, offset)
    }

    // One fdatasync on any descriptor of the inode covers writes through both, and
    // also flushes the device's volatile cache.
    fn flush(&self) -> io::Result<()> {
        self.buffered.sync_data()
    }

    fn data_ranges(&self, offset: u64, length: u64) -> Vec<std::ops::Range<u64>> {
        crate::sparse::data_ranges(&self.buffered, offset, length)
    }

    fn zero_range(&self, offset: u64, length: u64) -> io::Result<()> {
        match crate::sparse::zero_without_writing(&self.buffered, offset, length) {
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                crate::sparse::write_zeros(|buf, at| self.write_at(buf, at), offset, length)
            }
            done => done,
        }
    }

    fn logical_block_bytes(&self) -> u32 {
        self.logical
    }

    fn direct_fd(&self) -> Option<DirectFd> {
        let buffered_fd = self.buffered.as_raw_fd();
        Some(match &self.direct {
            Some(direct) => DirectFd {
                fd: direct.as_raw_fd(),
                buffered_fd,
                align: self.align,
            },
            None => DirectFd {
                fd: buffered_fd,
                buffered_fd,
                align: 1,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{settle_direct, Direct, DirectMode};

    fn unavailable() -> Direct {
        Direct::Unavailable("no O_DIRECT here".to_owned())
    }

    // tmpfs takes O_DIRECT since Linux 6.6, so the fallback is also checked without a
    // file system that refuses it.
    #[test]
    fn unavailable_o_direct_falls_back_or_fails_by_mode() {
        let (file, reason) = settle_direct(DirectMode::Auto, unavailable).expect("auto");
        assert!(file.is_none());
        assert_eq!(reason.as_deref(), Some("no O_DIRECT here"));
        let err = settle_direct(DirectMode::On, unavailable).expect_err("on");
        assert_eq!(err, "no O_DIRECT here");
        let (file, reason) =
            settle_direct(DirectMode::Off, || panic!("not tried when off")).expect("off");
        assert!(file.is_none() && reason.is_none());
    }
}
