//! Failures of the backend itself, as opposed to one I/O's error (which travels in its
//! [`crate::Completion`]).

use std::io;

/// Why the backend could not be set up or could not go on.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// io_uring was asked for explicitly and cannot be used.
    #[error("io_uring is not available: {0}: use the threads backend (--io-backend threads)")]
    Setup(#[source] io::Error),
    /// The I/O worker threads could not be started.
    #[error("cannot start the I/O threads: {0}")]
    Threads(#[source] io::Error),
    /// Entering the kernel to submit or wait failed.
    #[error("io_uring_enter failed: {0}")]
    Submit(#[source] io::Error),
    /// The I/O worker threads are gone, so no I/O can be submitted or completed.
    #[error("the I/O worker threads stopped")]
    WorkersGone,
}
