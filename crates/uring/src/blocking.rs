//! One I/O done with blocking system calls, as the thread pool's workers do it.

use std::io;

use crate::op::{advance, is_transient, Progress};
use crate::{IoOp, OpKind};

/// Performs `op` to the end: resumes short transfers and retries EINTR/EAGAIN.
///
/// # Safety
/// `op.ptr..op.ptr + op.len` must be valid for the transfer (writable for a read) and
/// not accessed by anyone else until this returns.
pub(crate) unsafe fn perform(op: &IoOp) -> io::Result<usize> {
    if let Some(err) = op.invalid() {
        return Err(err);
    }
    if op.kind == OpKind::Fsync {
        return retrying(|| {
            // SAFETY: fdatasync takes only a descriptor number; a bad one gives EBADF.
            unsafe { libc::fdatasync(op.fd) as isize }
        })
        .map(|_| 0);
    }
    let mut done = 0;
    while done < op.len {
        let (ptr, len, offset) = op.piece(done);
        // `invalid()` checked that every offset in the op fits in off_t.
        let offset = offset as libc::off_t;
        let moved = retrying(|| match op.kind {
            // SAFETY: `ptr..ptr + len` lies inside the op's buffer, which the caller
            // keeps valid, writable and unshared (this function's contract).
            OpKind::Read => unsafe { libc::pread(op.fd, ptr.cast(), len, offset) },
            // SAFETY: as above; pwrite only reads the buffer.
            OpKind::Write => unsafe { libc::pwrite(op.fd, ptr.cast_const().cast(), len, offset) },
            OpKind::WriteDsync => {
                let iov = libc::iovec {
                    iov_base: ptr.cast(),
                    iov_len: len,
                };
                // SAFETY: as above; the one iovec describes that piece, and pwritev2
                // only reads it.
                unsafe { libc::pwritev2(op.fd, &iov, 1, offset, libc::RWF_DSYNC) }
            }
            OpKind::Fsync => unreachable!("fsync returned above"),
        })?;
        match advance(op, done, moved) {
            Progress::Done(result) => return result,
            Progress::More { done: now } => done = now,
        }
    }
    Ok(op.len)
}

/// Runs a system call until it gives something other than EINTR/EAGAIN.
fn retrying(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let rc = call();
        if rc >= 0 {
            return Ok(rc.unsigned_abs());
        }
        let err = io::Error::last_os_error();
        if !err.raw_os_error().is_some_and(is_transient) {
            return Err(err);
        }
    }
}
