//! The io_uring backend. Each I/O owns a slot whose index is the SQE's user_data; the
//! kernel holds at most as many I/Os as the submission queue has entries (so the
//! completion queue, twice that size, never overflows), and the rest wait in a
//! user-space queue, so submitting never fails for lack of room.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring, Probe};

use crate::op::{advance, is_transient, Progress, MAX_PIECE};
use crate::waker::{drain_eventfd, new_eventfd, WakerInner};
use crate::{BackendError, Completion, IoOp, OpKind, Waker};

/// user_data of the setup probe's NOP, which is no slot.
const PROBE: u64 = u64::MAX;
/// user_data of the poll on the waker's eventfd, which is no slot either.
const WAKE: u64 = u64::MAX - 1;

/// The kernel caps ring sizes; far fewer entries than this already keep a disk busy.
const MAX_ENTRIES: u32 = 4096;

/// Transfers at least this long are sent straight to the kernel's async workers
/// (IOSQE_ASYNC) instead of being tried inline first: an inline buffered write of a
/// megabyte would hold the submitting thread for the whole copy, and with it every
/// small I/O queued behind.
const ASYNC_BYTES: u32 = 64 * 1024;

/// Pause before retrying when the kernel is out of resources or the enter call keeps
/// failing, so that a retry loop does not spin.
const BACKOFF: Duration = Duration::from_millis(1);

/// One I/O between submit and its completion being returned.
#[derive(Debug)]
struct Slot {
    op: IoOp,
    /// Bytes already transferred, for I/Os the kernel did in pieces.
    done: usize,
}

/// The io_uring backend.
pub struct UringBackend {
    /// Boxed: the ring's bookkeeping is large, and `Backend` holds this or a small pool.
    ring: Box<IoUring>,
    /// Indexed by user_data; `None` for free slots.
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Slots waiting for room in the kernel: new I/Os and the rest of short transfers.
    waiting: VecDeque<usize>,
    /// SQEs pushed and not yet completed.
    in_kernel: usize,
    /// The most SQEs in the kernel at once: the submission queue's size.
    limit: usize,
    /// I/Os that finished without the kernel (nothing to transfer, invalid).
    finished: Vec<Completion>,
    /// I/Os submitted and not yet returned by `wait`.
    in_flight: usize,
    /// The eventfd wakers write to, once a waker was asked for.
    wake_fd: Option<Arc<OwnedFd>>,
    /// Whether a poll on `wake_fd` is in the kernel.
    wake_armed: bool,
    /// Whether the wake poll fired since the last `wait` began.
    woken: bool,
}

impl fmt::Debug for UringBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringBackend")
            .field("entries", &self.limit)
            .field("in_flight", &self.in_flight)
            .field("in_kernel", &self.in_kernel)
            .field("waiting", &self.waiting.len())
            .finish_non_exhaustive()
    }
}

impl UringBackend {
    /// Sets up a ring of `depth` entries (rounded to a power of two, at most 4096) and
    /// checks that it works: that the kernel has the opcodes used here and completes a
    /// NOP (setup can succeed where seccomp or a sandbox then refuses the I/O).
    pub fn new(depth: u32) -> io::Result<UringBackend> {
        let ring = IoUring::new(depth.clamp(1, MAX_ENTRIES))?;
        check_opcodes(&ring)?;

        let limit = ring.params().sq_entries() as usize;
        let mut backend = UringBackend {
            ring: Box::new(ring),
            slots: Vec::new(),
            free: Vec::new(),
            waiting: VecDeque::new(),
            in_kernel: 0,
            limit,
            finished: Vec::new(),
            in_flight: 0,
            wake_fd: None,
            wake_armed: false,
            woken: false,
        };
        backend.nop_round_trip()?;
        Ok(backend)
    }

    fn nop_round_trip(&mut self) -> io::Result<()> {
        let nop = opcode::Nop::new().build().user_data(PROBE);
        // SAFETY: a NOP refers to no memory and no descriptor.
        unsafe { self.ring.submission().push(&nop) }
            .map_err(|_| io::Error::other("the new ring has no room for one entry"))?;
        self.in_kernel += 1;
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error().is_some_and(is_transient) => {}
                Err(e) => {
                    // The NOP may still be in the kernel; Drop waits for it.
                    return Err(e);
                }
            }
            if let Some(cqe) = self.ring.completion().next() {
                self.in_kernel -= 1;
                let res = cqe.result();
                return if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else {
                    Ok(())
                };
            }
        }
    }

    /// A handle that makes a blocked [`UringBackend::wait`] return.
    pub fn waker(&mut self) -> io::Result<Waker> {
        let fd = match &self.wake_fd {
            Some(fd) => Arc::clone(fd),
            None => {
                let fd = Arc::new(new_eventfd()?);
                self.wake_fd = Some(Arc::clone(&fd));
                fd
            }
        };
        Ok(Waker(WakerInner::EventFd(fd)))
    }

    /// Puts a poll on the waker's eventfd into the kernel, so a wake ends a wait.
    fn arm_wake(&mut self) {
        let Some(fd) = &self.wake_fd else { return };
        if self.wake_armed {
            return;
        }
        let poll = opcode::PollAdd::new(types::Fd(fd.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(WAKE);
        // SAFETY: a poll refers to no memory; the eventfd stays open while the ring
        // lives (this backend holds it), and Drop waits for the poll to complete.
        if unsafe { self.ring.submission().push(&poll) }.is_ok() {
            self.wake_armed = true;
            self.in_kernel += 1;
        }
    }

    /// I/Os submitted and not yet returned by [`UringBackend::wait`].
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Queues one I/O; it reaches the kernel now if there is room, else later.
    ///
    /// # Safety
    /// As for [`crate::Backend::submit`].
    pub unsafe fn submit(&mut self, op: IoOp) -> Result<(), (BackendError, IoOp)> {
        self.in_flight += 1;
        if let Some(err) = op.invalid() {
            self.finished.push(Completion {
                token: op.token,
                result: Err(err),
            });
            return Ok(());
        }
        if op.is_empty() {
            self.finished.push(Completion {
                token: op.token,
                result: Ok(0),
            });
            return Ok(());
        }
        let slot = Some(Slot { op, done: 0 });
        let idx = match self.free.pop() {
            Some(idx) => {
                self.slots[idx] = slot;
                idx
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.waiting.push_back(idx);
        self.push_waiting();
        // A full queue goes to the kernel at once, so the disk works while the caller
        // prepares more; errors are left for `wait`, which submits again.
        if self.ring.submission().is_full() {
            let _ = self.ring.submit();
        }
        Ok(())
    }

    /// Moves waiting I/Os into the submission queue while the kernel has room.
    fn push_waiting(&mut self) {
        let mut sq = self.ring.submission();
        while self.in_kernel < self.limit {
            let Some(&idx) = self.waiting.front() else {
                break;
            };
            let Some(slot) = &self.slots[idx] else {
                self.waiting.pop_front();
                continue;
            };
            let entry = sqe_for(slot, idx);
            // SAFETY: the entry points into the op's buffer and names its descriptor,
            // both of which the submitter keeps valid and unshared until the op's
            // completion is returned (`submit`'s contract); that happens only after
            // this SQE's CQE has been reaped, and Drop waits for every CQE.
            if unsafe { sq.push(&entry) }.is_err() {
                break;
            }
            self.waiting.pop_front();
            self.in_kernel += 1;
        }
    }

    /// Submits everything queued, waits until at least `min` completions (at most those
    /// in flight) are available or `timeout` has passed, and appends every available
    /// completion to `out`.
    pub fn wait(
        &mut self,
        min: usize,
        out: &mut Vec<Completion>,
        timeout: Option<Duration>,
    ) -> Result<(), BackendError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let target = min.min(self.in_flight);
        let mut got = self.finished.len();
        out.append(&mut self.finished);
        self.woken = false;
        loop {
            self.push_waiting();
            got += self.reap(out);
            let ios_in_kernel = self.in_kernel - usize::from(self.wake_armed);
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let timed_out = left.is_some_and(|l| l.is_zero());
            let must_wait = got < target && ios_in_kernel > 0 && !self.woken && !timed_out;
            if must_wait {
                self.arm_wake();
            }
            let unsubmitted = !self.ring.submission().is_empty();
            if !unsubmitted && !must_wait {
                break;
            }
            match self.enter(must_wait, left) {
                Ok(_) => {}
                // The timeout passed: the loop sees it and ends.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ETIME)) => {}
                // Out of kernel resources, or completions to reap first: retry after
                // reaping, without spinning.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => {
                    std::thread::sleep(BACKOFF);
                }
                Err(e) => {
                    self.in_flight -= got;
                    return Err(BackendError::Submit(e));
                }
            }
        }
        self.in_flight -= got;
        Ok(())
    }

    /// Submits what is queued and, with `wait`, blocks for one completion: for at
    /// most `left` when given. A kernel without timed waits (before 5.11) is polled
    /// instead, a nap at a time.
    fn enter(&mut self, wait: bool, left: Option<Duration>) -> io::Result<usize> {
        let Some(left) = left.filter(|_| wait) else {
            return self.ring.submit_and_wait(usize::from(wait));
        };
        if !self.ring.params().is_feature_ext_arg() {
            let submitted = self.ring.submit()?;
            if self.ring.completion().is_empty() {
                std::thread::sleep(left.min(BACKOFF));
            }
            return Ok(submitted);
        }
        let ts = types::Timespec::new()
            .sec(left.as_secs())
            .nsec(left.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        self.ring.submitter().submit_with_args(1, &args)
    }

    /// Takes every CQE: finished I/Os go to `out` (their count is returned), short
    /// transfers and transient errors go back to wait for the kernel.
    fn reap(&mut self, out: &mut Vec<Completion>) -> usize {
        let mut finished = 0;
        for cqe in self.ring.completion() {
            self.in_kernel -= 1;
            if cqe.user_data() == WAKE {
                self.wake_armed = false;
                self.woken = true;
                if let Some(fd) = &self.wake_fd {
                    drain_eventfd(fd);
                }
                continue;
            }
            let Ok(idx) = usize::try_from(cqe.user_data()) else {
                continue;
            };
            let Some(Some(slot)) = self.slots.get_mut(idx) else {
                continue;
            };
            let res = cqe.result();
            let result = if res < 0 {
                if is_transient(-res) {
                    self.waiting.push_back(idx);
                    continue;
                }
                Err(io::Error::from_raw_os_error(-res))
            } else if slot.op.kind == OpKind::Fsync {
                Ok(0)
            } else {
                match advance(&slot.op, slot.done, res.unsigned_abs() as usize) {
                    Progress::Done(result) => result,
                    Progress::More { done } => {
                        slot.done = done;
                        self.waiting.push_back(idx);
                        continue;
                    }
                }
            };
            out.push(Completion {
                token: slot.op.token,
                result,
            });
            self.slots[idx] = None;
            self.free.push(idx);
            finished += 1;
        }
        finished
    }
}

/// The SQE for the next piece of a slot's I/O.
fn sqe_for(slot: &Slot, idx: usize) -> squeue::Entry {
    let op = &slot.op;
    let fd = types::Fd(op.fd);
    let (ptr, len, offset) = op.piece(slot.done);
    // `piece` never returns more than MAX_PIECE, which fits in u32.
    let len = len.min(MAX_PIECE) as u32;
    let entry = match op.kind {
        OpKind::Read => opcode::Read::new(fd, ptr, len).offset(offset).build(),
        OpKind::Write => opcode::Write::new(fd, ptr.cast_const(), len)
            .offset(offset)
            .build(),
        OpKind::WriteDsync => opcode::Write::new(fd, ptr.cast_const(), len)
            .offset(offset)
            .rw_flags(libc::RWF_DSYNC)
            .build(),
        OpKind::Fsync => opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build(),
    };
    let entry = if len >= ASYNC_BYTES {
        entry.flags(squeue::Flags::ASYNC)
    } else {
        entry
    };
    entry.user_data(idx as u64)
}

/// Fails unless the kernel knows READ, WRITE and FSYNC (some sandboxes implement only a
/// few opcodes; kernels before 5.6 have no READ/WRITE and no probe either).
fn check_opcodes(ring: &IoUring) -> io::Result<()> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let needed = [
        ("READ", opcode::Read::CODE),
        ("WRITE", opcode::Write::CODE),
        ("FSYNC", opcode::Fsync::CODE),
    ];
    match needed.iter().find(|(_, code)| !probe.is_supported(*code)) {
        Some((name, _)) => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the kernel's io_uring has no {name} operation"),
        )),
        None => Ok(()),
    }
}

impl Drop for UringBackend {
    /// Waits for every SQE the kernel has (or may yet see): their buffers belong to the
    /// caller, who may free them once the backend is gone. I/Os still waiting in user
    /// space never reached the kernel and are simply forgotten.
    fn drop(&mut self) {
        // Fire our own wake poll, if armed, so that it completes like every other SQE.
        if self.wake_armed {
            if let Ok(waker) = self.waker() {
                waker.wake();
            }
        }
        while self.in_kernel > 0 {
            let entered = self.ring.submit_and_wait(1);
            self.in_kernel -= self.ring.completion().count();
            match entered {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(_) => {
                    // SQEs the kernel never took will never run; only those it took
                    // need waiting for.
                    if self.in_kernel <= self.ring.submission().len() {
                        break;
                    }
                    // Completions still arrive without io_uring_enter (returning from
                    // the sleep runs the kernel's task work), so poll for them.
                    std::thread::sleep(BACKOFF);
                }
            }
        }
    }
}
