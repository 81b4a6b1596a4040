//! Waking a thread that is blocked in [`crate::Backend::wait`] from another thread: a
//! server's array thread sleeps on member completions and must also wake when a client
//! request arrives.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use crate::Completion;

/// The token of the completion a thread-pool waker sends; never a real I/O's.
pub(crate) const WAKE_TOKEN: u64 = u64::MAX;

/// Wakes the backend's waiting thread (or makes its next wait return at once).
#[derive(Debug, Clone)]
pub struct Waker(pub(crate) WakerInner);

#[derive(Debug, Clone)]
pub(crate) enum WakerInner {
    /// io_uring: an eventfd the ring polls while waiting.
    EventFd(Arc<OwnedFd>),
    /// Thread pool: a marker completion on the completion channel.
    Channel(Sender<Completion>),
}

impl Waker {
    pub fn wake(&self) {
        match &self.0 {
            WakerInner::EventFd(fd) => {
                let one = 1u64.to_ne_bytes();
                // SAFETY: writes 8 bytes from a live local array to an eventfd this
                // waker keeps open. A full counter (EAGAIN) already means "woken".
                unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            }
            WakerInner::Channel(tx) => {
                // A gone pool has nobody left to wake.
                let _ = tx.send(Completion {
                    token: WAKE_TOKEN,
                    result: Ok(0),
                });
            }
        }
    }
}

/// A non-blocking eventfd for a ring's waker.
pub(crate) fn new_eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor that nothing else owns.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Empties an eventfd's counter so that the next poll waits for a new wake.
pub(crate) fn drain_eventfd(fd: &OwnedFd) {
    let mut buf = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live local buffer; EAGAIN (already empty)
    // is fine to ignore.
    unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
}
