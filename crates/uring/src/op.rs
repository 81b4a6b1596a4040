//! What passes through the backend: the choice of backend, one I/O, its completion, and
//! the bookkeeping of a transfer that the kernel may do in several pieces.

use std::fmt;
use std::io;
use std::os::fd::RawFd;

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// io_uring where it works, else the thread pool.
    #[default]
    Auto,
    /// io_uring, or an error.
    Uring,
    /// The pread/pwrite thread pool.
    Threads,
}

/// Which backend is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Uring,
    Threads,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Uring => "io_uring",
            BackendKind::Threads => "threads",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    /// A write that is durable when it completes (RWF_DSYNC: the kernel makes this
    /// write's data durable, with a FUA write where the device has one, or a write and
    /// a cache flush where it has not), so that one I/O does what a write and an
    /// fsync do.
    WriteDsync,
    /// fdatasync of the whole file; `offset`, `ptr` and `len` are ignored.
    Fsync,
}

/// One I/O. `ptr`/`len` describe memory the caller keeps valid until the completion is
/// returned.
#[derive(Debug, Clone, Copy)]
pub struct IoOp {
    /// The caller's name for this I/O, handed back in its [`Completion`].
    pub token: u64,
    pub fd: RawFd,
    pub kind: OpKind,
    pub offset: u64,
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: an IoOp is a description of memory, not a handle that owns or aliases it
// safely; whoever submits it promises (Backend::submit's contract) that the memory stays
// valid and untouched by anyone else until the completion comes back, so the thread
// that performs the I/O is its only user meanwhile, whichever thread that is.
unsafe impl Send for IoOp {}

/// The end of one I/O.
#[derive(Debug)]
pub struct Completion {
    pub token: u64,
    /// Bytes transferred (always the full `len`; 0 for fsync) or the error. A read past
    /// the end of the file fails with [`io::ErrorKind::UnexpectedEof`].
    pub result: io::Result<usize>,
}

/// The most one kernel call transfers: io_uring lengths are 32-bit, and Linux moves at
/// most about 2 GiB per read or write anyway; larger I/Os go in pieces.
pub(crate) const MAX_PIECE: usize = 1 << 30;

impl IoOp {
    /// Why the kernel must not see this I/O at all: offsets beyond i64::MAX are negative
    /// to pread, and u64::MAX tells io_uring to use the file position.
    pub(crate) fn invalid(&self) -> Option<io::Error> {
        let end = self.offset.checked_add(self.len as u64);
        let in_range = end.is_some_and(|end| end <= i64::MAX as u64);
        (self.kind != OpKind::Fsync && !in_range).then(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "I/O of {} bytes at offset {} is out of range",
                    self.len, self.offset
                ),
            )
        })
    }

    /// Whether there is nothing to transfer: a zero-length read or write.
    pub(crate) fn is_empty(&self) -> bool {
        self.kind != OpKind::Fsync && self.len == 0
    }

    /// Address, length and file offset of the next piece after `done` bytes.
    pub(crate) fn piece(&self, done: usize) -> (*mut u8, usize, u64) {
        (
            self.ptr.wrapping_add(done),
            (self.len - done).min(MAX_PIECE),
            self.offset + done as u64,
        )
    }
}

/// Where a read or write stands after the kernel moved `moved` more bytes.
pub(crate) enum Progress {
    Done(io::Result<usize>),
    /// `done` bytes are through; the rest must be submitted again.
    More {
        done: usize,
    },
}

/// Accounts for a transfer of `moved` bytes after `done`; a transfer of nothing before
/// the end means the file ended (read) or the device took nothing (write).
pub(crate) fn advance(op: &IoOp, done: usize, moved: usize) -> Progress {
    let done = done + moved;
    if done >= op.len {
        return Progress::Done(Ok(op.len));
    }
    if moved > 0 {
        return Progress::More { done };
    }
    let (kind, what) = match op.kind {
        OpKind::Read => (
            io::ErrorKind::UnexpectedEof,
            "read past the end of the file",
        ),
        _ => (io::ErrorKind::WriteZero, "write made no progress"),
    };
    Progress::Done(Err(io::Error::new(
        kind,
        format!("{what}: {done} of {} bytes at offset {}", op.len, op.offset),
    )))
}

/// Whether an errno means "try the same I/O again".
pub(crate) fn is_transient(errno: i32) -> bool {
    errno == libc::EINTR || errno == libc::EAGAIN
}
