//! How a member is to be opened, and the descriptors it lends to the driver.

use std::os::fd::RawFd;

/// How to use O_DIRECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectMode {
    /// Try O_DIRECT; fall back to buffered I/O (with a reason) where it is unavailable.
    Auto,
    /// Buffered I/O only.
    Off,
    /// O_DIRECT is required: opening fails where it is unavailable.
    On,
}

/// How to open a [`crate::FileMember`].
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Open for writing as well as reading.
    pub write: bool,
    pub direct: DirectMode,
    /// Take an exclusive flock, so that a second xraid on the same member is refused;
    /// a block device opened to write is opened with O_EXCL too, so that one the
    /// kernel holds (mounted, an md or LVM member) is refused.
    pub lock: bool,
}

/// Descriptors the real driver submits kernel I/O on.
#[derive(Debug, Clone, Copy)]
pub struct DirectFd {
    /// Descriptor for aligned I/O: opened with O_DIRECT where available, else the same
    /// as `buffered_fd`.
    pub fd: RawFd,
    /// A buffered (page-cache) descriptor of the same file, for I/O whose buffer, length
    /// or offset is not aligned.
    pub buffered_fd: RawFd,
    /// Alignment O_DIRECT needs for buffer address, length and offset (the device's
    /// logical block size, at least 512; 4096 for files); 1 when `fd` is buffered.
    pub align: usize,
}
