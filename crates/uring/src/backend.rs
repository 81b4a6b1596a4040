//! The backend as the driver sees it: one closed enum over io_uring and the thread pool,
//! and the choice between them.

use crate::{
    BackendChoice, BackendError, BackendKind, Completion, IoOp, ThreadPool, UringBackend, Waker,
};

/// The most worker threads the fallback starts: beyond this, more threads add context
/// switches rather than throughput.
const MAX_WORKERS: u32 = 16;

/// The kernel I/O backend.
#[derive(Debug)]
pub enum Backend {
    Uring(UringBackend),
    Threads(ThreadPool),
}

impl Backend {
    /// Sets up the backend `choice` asks for, with room for `depth` I/Os in the kernel.
    /// `Auto` tries io_uring (including a test I/O, since seccomp or the sysctl
    /// `kernel.io_uring_disabled` can refuse it) and falls back to threads; `Uring` fails
    /// where io_uring does not work.
    pub fn new(choice: BackendChoice, depth: u32) -> Result<Backend, BackendError> {
        let threads = || {
            let workers = depth.clamp(1, MAX_WORKERS) as usize;
            ThreadPool::new(workers).map(Backend::Threads)
        };
        match choice {
            BackendChoice::Uring => UringBackend::new(depth)
                .map(Backend::Uring)
                .map_err(BackendError::Setup),
            BackendChoice::Threads => threads(),
            BackendChoice::Auto => match UringBackend::new(depth) {
                Ok(ring) => Ok(Backend::Uring(ring)),
                Err(_) => threads(),
            },
        }
    }

    pub fn kind(&self) -> BackendKind {
        match self {
            Backend::Uring(_) => BackendKind::Uring,
            Backend::Threads(_) => BackendKind::Threads,
        }
    }

    /// A handle another thread uses to end a blocked [`Backend::wait`] early.
    pub fn waker(&mut self) -> Result<Waker, BackendError> {
        match self {
            Backend::Uring(ring) => ring.waker().map_err(BackendError::Setup),
            Backend::Threads(pool) => Ok(pool.waker()),
        }
    }

    /// I/Os submitted and not yet returned by [`Backend::wait`].
    pub fn in_flight(&self) -> usize {
        match self {
            Backend::Uring(ring) => ring.in_flight(),
            Backend::Threads(pool) => pool.in_flight(),
        }
    }

    /// Queues one I/O. Never fails for lack of room: I/Os beyond the depth wait in user
    /// space. On error the op is handed back, and it was not counted as in flight.
    ///
    /// # Safety
    /// `op.ptr..op.ptr + op.len` must stay valid (and not be accessed by the caller) and
    /// `op.fd` open until the op's [`Completion`] is returned by [`Backend::wait`], or,
    /// if that never happens, until the backend has been dropped.
    pub unsafe fn submit(&mut self, op: IoOp) -> Result<(), (BackendError, IoOp)> {
        match self {
            // SAFETY: the caller upholds the same contract, passed on unchanged.
            Backend::Uring(ring) => unsafe { ring.submit(op) },
            // SAFETY: as above.
            Backend::Threads(pool) => unsafe { pool.submit(op) },
        }
    }

    /// Submits everything queued, waits until at least `min` completions are available
    /// (0: don't block; never more than are in flight) or a [`Waker`] fired, and
    /// appends all available
    /// completions to `out`. Every `Ok` completion transferred its whole length.
    pub fn wait(&mut self, min: usize, out: &mut Vec<Completion>) -> Result<(), BackendError> {
        self.wait_for_at_most(min, out, None)
    }

    /// [`Backend::wait`], blocking for at most `timeout` when given: a caller with a
    /// clock to run (a stall timeout) must not wait on a device that never answers.
    pub fn wait_for_at_most(
        &mut self,
        min: usize,
        out: &mut Vec<Completion>,
        timeout: Option<std::time::Duration>,
    ) -> Result<(), BackendError> {
        match self {
            Backend::Uring(ring) => ring.wait(min, out, timeout),
            Backend::Threads(pool) => pool.wait(min, out, timeout),
        }
    }
}
