//! The kernel I/O backend the driver submits member I/O to: io_uring, or a pool of
//! pread/pwrite threads where io_uring is unavailable (old kernels, seccomp, sysctl
//! `kernel.io_uring_disabled`), as one closed enum, [`Backend`].
//!
//! **Architecture invariant:** this is the only crate with io_uring `unsafe`. Callers
//! promise, through [`Backend::submit`]'s contract, that buffers and descriptors outlive
//! their I/O; the backend promises that an I/O reported done is done in full (short
//! transfers are resumed here) and that dropping it never leaves the kernel writing
//! into memory the caller may free.

mod backend;
mod blocking;
mod error;
mod op;
mod ring;
mod threads;
mod waker;

pub use backend::Backend;
pub use error::BackendError;
pub use op::{BackendChoice, BackendKind, Completion, IoOp, OpKind};
pub use ring::UringBackend;
pub use threads::ThreadPool;
pub use waker::Waker;

#[cfg(test)]
mod tests;
