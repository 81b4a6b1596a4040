//! The fallback backend: worker threads doing blocking pread/pwrite/fdatasync, fed
//! through one channel and answering through another.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::blocking::perform;
use crate::waker::{WakerInner, WAKE_TOKEN};
use crate::{BackendError, Completion, IoOp, Waker};

/// A pool of threads doing one blocking I/O at a time each.
#[derive(Debug)]
pub struct ThreadPool {
    /// `None` only while dropping: closing the channel tells the workers to stop.
    jobs: Option<Sender<IoOp>>,
    done: Receiver<Completion>,
    /// Kept for wakers, which post a marker completion.
    done_tx: Sender<Completion>,
    workers: Vec<JoinHandle<()>>,
    in_flight: usize,
}

impl ThreadPool {
    /// Starts `workers` threads (at least one).
    pub fn new(workers: usize) -> Result<ThreadPool, BackendError> {
        let (jobs, job_rx) = mpsc::channel::<IoOp>();
        let (done_tx, done) = mpsc::channel();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let mut pool = ThreadPool {
            jobs: Some(jobs),
            done,
            done_tx: done_tx.clone(),
            workers: Vec::new(),
            in_flight: 0,
        };
        for i in 0..workers.max(1) {
            let job_rx = Arc::clone(&job_rx);
            let done_tx = done_tx.clone();
            // On failure, dropping `pool` stops and joins the threads already started.
            let worker = std::thread::Builder::new()
                .name(format!("xraid-io-{i}"))
                .spawn(move || work(&job_rx, &done_tx))
                .map_err(BackendError::Threads)?;
            pool.workers.push(worker);
        }
        Ok(pool)
    }

    /// I/Os submitted and not yet returned by [`ThreadPool::wait`].
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Queues one I/O for the workers.
    ///
    /// # Safety
    /// As for [`crate::Backend::submit`].
    pub unsafe fn submit(&mut self, op: IoOp) -> Result<(), (BackendError, IoOp)> {
        let Some(jobs) = &self.jobs else {
            return Err((BackendError::WorkersGone, op));
        };
        match jobs.send(op) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            Err(mpsc::SendError(op)) => Err((BackendError::WorkersGone, op)),
        }
    }

    /// A handle that makes a blocked [`ThreadPool::wait`] return.
    pub fn waker(&self) -> Waker {
        Waker(WakerInner::Channel(self.done_tx.clone()))
    }

    /// Waits until at least `min` completions (at most those in flight) have arrived, a
    /// [`Waker`] fired or `timeout` passed, then appends every arrived completion to
    /// `out`.
    pub fn wait(
        &mut self,
        min: usize,
        out: &mut Vec<Completion>,
        timeout: Option<Duration>,
    ) -> Result<(), BackendError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let target = min.min(self.in_flight);
        let mut got = 0;
        while got < target {
            let completion = match deadline {
                None => self.done.recv().map_err(|_| BackendError::WorkersGone)?,
                Some(deadline) => {
                    match self
                        .done
                        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    {
                        Ok(completion) => completion,
                        Err(mpsc::RecvTimeoutError::Timeout) => break,
                        Err(mpsc::RecvTimeoutError::Disconnected) => {
                            return Err(BackendError::WorkersGone)
                        }
                    }
                }
            };
            if completion.token == WAKE_TOKEN {
                break;
            }
            out.push(completion);
            got += 1;
        }
        while let Ok(completion) = self.done.try_recv() {
            if completion.token == WAKE_TOKEN {
                continue;
            }
            out.push(completion);
            got += 1;
        }
        self.in_flight -= got;
        Ok(())
    }
}

/// A worker's life: take the next I/O, do it, report it; stop when the pool closes the
/// job channel (after the I/Os already queued, so no buffer is left half-done).
fn work(jobs: &Mutex<Receiver<IoOp>>, done: &Sender<Completion>) {
    loop {
        // The lock is held only to take one job; a poisoned lock still guards a
        // working receiver.
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(op) = job else { return };
        // SAFETY: the submitter promised (Backend::submit) that the op's memory and
        // descriptor stay valid and unshared until its completion is returned, which
        // happens only after this send.
        let result = unsafe { perform(&op) };
        // The pool outlives its workers (Drop joins them), so the receiver is there.
        let _ = done.send(Completion {
            token: op.token,
            result,
        });
    }
}

impl Drop for ThreadPool {
    /// Waits for the workers to finish every queued I/O: the caller may free the
    /// buffers as soon as the pool is gone.
    fn drop(&mut self) {
        drop(self.jobs.take());
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}
