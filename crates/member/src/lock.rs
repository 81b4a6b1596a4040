//! The exclusive flock that keeps a second xraid (or anything else using flock(2),
//! such as `flock(1)`) off a member while this process drives it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Whether the lock was taken, or someone else holds it.
pub(crate) enum Locked {
    Yes,
    HeldElsewhere,
}

/// How long a lock held elsewhere is waited for. A process that was just killed can
/// hold its members a moment longer: the kernel's io_uring workers finishing its last
/// I/O keep the files open. A restart right after a crash should not fail on that.
pub(crate) const GRACE: std::time::Duration = std::time::Duration::from_millis(1500);

/// Takes an exclusive flock on `file`, waiting up to [`GRACE`] for another holder to
/// go. The lock lives as long as the open file description, so it goes away when
/// `file` is closed.
pub(crate) fn lock_exclusive(file: &File) -> io::Result<Locked> {
    let start = std::time::Instant::now();
    loop {
        match try_lock(file)? {
            Locked::HeldElsewhere if start.elapsed() < GRACE => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            outcome => return Ok(outcome),
        }
    }
}

fn try_lock(file: &File) -> io::Result<Locked> {
    loop {
        // SAFETY: flock only reads its integer arguments; the descriptor belongs to
        // `file`, which is borrowed for the duration of the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Locked::Yes);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(Locked::HeldElsewhere),
            _ => return Err(err),
        }
    }
}
