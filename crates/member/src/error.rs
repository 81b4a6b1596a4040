//! Why a member could not be opened or created: one-line messages that name the path
//! and say what to do.

use std::io;
use std::path::PathBuf;

/// Why a member could not be opened or created.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    // No hint of --size: most commands only open members; those that create them
    // (create, add) check for missing files first and say so themselves.
    #[error("{}: no such file: check the path", path.display())]
    NotFound { path: PathBuf },
    #[error(
        "{} is in use by another process (locked): stop the other xraid first",
        path.display()
    )]
    InUse { path: PathBuf },
    #[error(
        "{} is in use (mounted, a member of md or LVM, or held by another xraid): \
         unmount it or stop what holds it first",
        path.display()
    )]
    Busy { path: PathBuf },
    #[error(
        "{} is read-only (write-protected): make it writable (blockdev --setrw), or only \
         read the array (xraid read, xraid serve --read-only)",
        path.display()
    )]
    ReadOnly { path: PathBuf },
    #[error("{}: cannot open: {source}: check the path and its permissions", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("{}: cannot lock: {source}: use a file system that supports flock", path.display())]
    Lock { path: PathBuf, source: io::Error },
    #[error(
        "{}: O_DIRECT is required but unavailable ({reason}): use a file system or device \
         that supports it, or allow buffered I/O",
        path.display()
    )]
    DirectRequired { path: PathBuf, reason: String },
    #[error("{}: not a regular file or block device: give a file or a block device", path.display())]
    NotFileOrBlock { path: PathBuf },
    #[error("{}: cannot find its size: {source}", path.display())]
    Size { path: PathBuf, source: io::Error },
    #[error("{}: already exists: remove it, or leave out --size to use it as it is", path.display())]
    Exists { path: PathBuf },
    #[error("{}: cannot create: {source}: check the directory and its free space", path.display())]
    Create { path: PathBuf, source: io::Error },
}
