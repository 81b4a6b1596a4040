//! I/O the driver makes to an array's devices itself, outside the engine: the array's
//! metadata (superblocks, bad block logs, integrity headers) while the array is open.
//! It takes the road the engine's I/O to that device takes — held aside for a device
//! that is slow or stalls on purpose, the kernel for a device with descriptors, inline
//! for an in-memory one — and is waited for while the engine runs on, for no longer
//! than the engine's stall timeout: a device that does not answer costs the caller an
//! error ([`io::ErrorKind::TimedOut`]), never the array's thread.

use std::io;
use std::time::{Duration, Instant};

use xraid_engine::{IoFailed, IoId};
use xraid_layout::MemberIdx;
use xraid_uring::{IoOp, OpKind};

use crate::{encode_token, ArrayDriver, DriverError, DEVICE_IO};

/// The device I/O the array's thread is waiting on, where other threads can see it
/// (see [`ArrayDriver::device_io_watch`]): a status asked while the thread is held
/// can say on which device, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceWait {
    /// The driver slot: a role, or `raid_disks + role` for a role's replacement.
    pub slot: MemberIdx,
    /// The device in the slot when the wait began (a slot's device changes: a spare
    /// steps into the failed member's slot and is written at once).
    pub name: String,
    pub since: Instant,
}

/// Shared view of the device I/O being waited on, if any.
pub type DeviceWaitWatch = std::sync::Arc<std::sync::Mutex<Option<DeviceWait>>>;

/// One I/O to a device of the array, at a byte offset from the device's start.
#[derive(Debug)]
pub enum DeviceIo<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
    Flush,
}

/// The buffer of a device I/O handed to the kernel, kept until the kernel is done
/// with it, even when whoever asked gave up waiting: memory lent to the kernel is
/// never freed under it.
#[derive(Debug)]
pub(crate) struct Lent {
    seq: u64,
    /// The device it went to: driver slot and the slot's generation then.
    slot: MemberIdx,
    gen: u16,
    buf: Vec<u8>,
    /// The completion, once the kernel has returned it.
    result: Option<io::Result<()>>,
    /// Whoever asked gave up waiting: dropped on completion.
    abandoned: bool,
}

impl ArrayDriver {
    /// Performs `io` on the device in driver slot `slot` at byte `offset` of the device
    /// (not of its data area), the engine running on meanwhile. Fails with
    /// [`io::ErrorKind::TimedOut`] when it has not completed within the engine's stall
    /// timeout (a buffer the kernel still has stays with the driver until it is done)
    /// — only where the array could go on without the device: one it cannot do
    /// without (a RAID-0 member, the last copy) is waited for, as the engine waits
    /// for its own I/O to it — and when the device is failed or leaves its slot while
    /// its I/O is held aside. While an earlier device I/O that timed out is still in
    /// the kernel, another to that device fails at once: it could land before the
    /// earlier one, which would then leave the older metadata on the device. A
    /// failure of the backend itself comes back as this I/O's error too: the caller
    /// learns of it again at its next pump.
    ///
    /// The device is quiet meanwhile: the engine's I/O to it already in the kernel
    /// completes first, and new I/O the engine sends it waits until this one is done
    /// (the other devices' goes on). A metadata write through the page cache racing
    /// the engine's direct I/O to the same sectors lands in either order, and the
    /// kernel fails the direct one (EIO) when it cannot drop the cached pages under it.
    pub fn device_io(&mut self, slot: MemberIdx, io: DeviceIo<'_>, offset: u64) -> io::Result<()> {
        self.quiet_slot = Some(slot);
        let name = self
            .members
            .get(slot.index())
            .and_then(Option::as_ref)
            .map(|d| d.member.name().to_owned())
            .unwrap_or_default();
        self.set_device_wait(Some(DeviceWait {
            slot,
            name,
            since: Instant::now(),
        }));
        let result = self.device_io_quiet(slot, io, offset);
        self.set_device_wait(None);
        self.quiet_slot = None;
        for (io, gen) in std::mem::take(&mut self.deferred) {
            if self.slot_gen[io.member.index()] == gen {
                self.dispatch(io);
            } else {
                // Its device left the slot meanwhile: gone, as for a retired slot. (No
                // path changes a slot's device during a device I/O today; this keeps
                // one that comes from sending the newcomer what was meant for the old.)
                self.inline_done.push_back((io.id, Err(IoFailed::Gone)));
            }
        }
        result
    }

    /// [`ArrayDriver::device_io`], with the engine's new I/O to `slot` deferred.
    fn device_io_quiet(
        &mut self,
        slot: MemberIdx,
        io: DeviceIo<'_>,
        offset: u64,
    ) -> io::Result<()> {
        let Some(device) = self.members.get(slot.index()).and_then(Option::as_ref) else {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        };
        let member = device.member.clone();
        let gen = self.slot_gen[slot.index()];
        while self
            .lent
            .iter()
            .any(|l| l.abandoned && l.slot == slot && l.gen == gen)
        {
            if self.engine.can_do_without_device(slot) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "an earlier write to the device has not completed: it did not answer within the stall timeout",
                ));
            }
            // A device the array cannot do without (a peer failed since) is waited
            // for: the earlier write leaves the kernel first.
            self.device_io_step(None)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        let stall = self.engine.config().stall_timeout.0;
        let deadline = (stall > 0).then(|| Instant::now() + Duration::from_nanos(stall));
        // The engine's I/O to the device in the kernel (or held) completes first.
        let engine_ios = |d: &Self| {
            let abandoned = d
                .lent
                .iter()
                .filter(|l| l.slot == slot && l.gen == gen)
                .count();
            d.in_kernel[slot.index()] as usize > abandoned
        };
        let served = self.serving(slot, gen);
        while engine_ios(self) && self.serving(slot, gen) {
            let live = deadline.filter(|_| self.engine.can_do_without_device(slot));
            if live.is_some_and(|d| d <= Instant::now()) {
                self.timers_before_timing_out();
                if !self.serving(slot, gen) {
                    break;
                }
                return Err(timed_out());
            }
            self.device_io_step(live)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        if served && !self.serving(slot, gen) {
            // Failed (or gone) while its engine I/O was waited for: as in
            // `device_io_held`, nothing more goes to it (a write would land whenever
            // the device drains, for an array that has changed since).
            return Err(io::Error::other(
                "the device was failed while this I/O waited on it",
            ));
        }
        let result = if let Some(hold) = member.hold_for() {
            self.device_io_held(slot, io, offset, hold, deadline)
        } else if let Some(direct) = member.direct_fd() {
            self.device_io_in_kernel(slot, direct.buffered_fd, io, offset, deadline)
        } else {
            return perform(member.as_ref(), io, offset);
        };
        result.unwrap_or_else(|e: DriverError| Err(io::Error::other(e.to_string())))
    }

    /// A device I/O to a member that holds its I/O ([`xraid_member::Member::hold_for`]),
    /// performed once its time is up as the engine's are.
    fn device_io_held(
        &mut self,
        slot: MemberIdx,
        io: DeviceIo<'_>,
        offset: u64,
        hold: Duration,
        deadline: Option<Instant>,
    ) -> Result<io::Result<()>, DriverError> {
        let gen = self.slot_gen[slot.index()];
        let due = Instant::now() + hold.min(Duration::from_secs(1 << 32));
        loop {
            if !self.serving(slot, gen) {
                // As an engine I/O held for a member failed meanwhile: taken back.
                return Ok(Err(io::Error::other(
                    "the device was failed while this I/O waited on it",
                )));
            }
            let now = Instant::now();
            if due <= now {
                let Some(device) = self.members[slot.index()].as_ref() else {
                    return Ok(Err(io::Error::from_raw_os_error(libc::ENODEV)));
                };
                let member = device.member.clone();
                return Ok(xraid_member::with_hold_waited(|| {
                    perform(member.as_ref(), io, offset)
                }));
            }
            // Whether the array can do without it is asked again at each wait: a
            // peer failing meanwhile can make it the last copy.
            let deadline = deadline.filter(|_| self.engine.can_do_without_device(slot));
            if deadline.is_some_and(|d| d <= now) {
                self.timers_before_timing_out();
                if !self.serving(slot, gen) {
                    continue;
                }
                return Ok(Err(timed_out()));
            }
            let until = deadline.map_or(due, |d| d.min(due));
            self.device_io_step(Some(until))?;
        }
    }

    /// A device I/O handed to the kernel on `fd` (the device's page-cache descriptor,
    /// which takes any alignment, as the member's own reads and writes do).
    fn device_io_in_kernel(
        &mut self,
        slot: MemberIdx,
        fd: std::os::fd::RawFd,
        io: DeviceIo<'_>,
        offset: u64,
        deadline: Option<Instant>,
    ) -> Result<io::Result<()>, DriverError> {
        let seq = self.next_device_io;
        self.next_device_io = (seq + 1) % DEVICE_IO;
        let (kind, mut buf) = match &io {
            DeviceIo::Read(out) => (OpKind::Read, vec![0u8; out.len()]),
            DeviceIo::Write(data) => (OpKind::Write, data.to_vec()),
            DeviceIo::Flush => (OpKind::Fsync, Vec::new()),
        };
        let op = IoOp {
            token: encode_token(IoId(DEVICE_IO | seq), slot, self.slot_gen[slot.index()]),
            fd,
            kind,
            offset,
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        };
        // SAFETY: `buf` goes into `lent` below, unmoved (a Vec's heap buffer stays put
        // when the Vec is moved) and untouched until its completion is returned, and
        // `lent` is dropped only after the backend (see the field); the descriptor
        // stays open until the I/O completes: counted in `in_kernel`, a device that
        // leaves its slot is retired, not closed, until its count drops to zero.
        if let Err((error, _)) = unsafe { self.backend.submit(op) } {
            return Ok(Err(io::Error::other(error.to_string())));
        }
        self.in_kernel[slot.index()] += 1;
        self.lent.push(Lent {
            seq,
            slot,
            gen: self.slot_gen[slot.index()],
            buf,
            result: None,
            abandoned: false,
        });
        loop {
            let at = self
                .lent
                .iter()
                .position(|l| l.seq == seq)
                .expect("a device I/O stays lent until taken here");
            if let Some(result) = self.lent[at].result.take() {
                let lent = self.lent.swap_remove(at);
                if let (DeviceIo::Read(out), Ok(())) = (io, &result) {
                    out.copy_from_slice(&lent.buf);
                }
                return Ok(result);
            }
            let live = deadline.filter(|_| self.engine.can_do_without_device(slot));
            if live.is_some_and(|d| d <= Instant::now()) {
                // Said to the caller after the engine's own stalls are seen (the
                // member may be failed for one of them now: it is gone either way).
                self.timers_before_timing_out();
                self.lent[at].abandoned = true;
                return Ok(Err(timed_out()));
            }
            self.device_io_step(live)?;
        }
    }

    /// Where other threads see which device I/O this driver's thread waits on.
    pub fn device_io_watch(&self) -> DeviceWaitWatch {
        std::sync::Arc::clone(&self.device_wait)
    }

    fn set_device_wait(&self, wait: Option<DeviceWait>) {
        *self
            .device_wait
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = wait;
    }

    /// A device I/O's own deadline has passed: the engine's timers run first, so that a
    /// member whose older I/O (the engine's, sent before this one) stalled is failed
    /// for that, as the clock has it, even where this thread woke late, past both
    /// deadlines. Otherwise which of the two was seen first would depend on the
    /// thread's scheduling: a superblock update would take the device for one that
    /// refused its write rather than one the engine failed meanwhile (a changed array,
    /// which the update follows and counts), and give up, or not, by chance. Not while
    /// the stripe log replays (see [`ArrayDriver::device_io_step`]).
    fn timers_before_timing_out(&mut self) {
        if !self.engine.log_recovering() {
            self.tick();
        }
    }

    /// One wait of a device I/O: [`ArrayDriver::step_until`], but with no timer
    /// handed to the engine while the stripe log replays at open — the replay takes no
    /// stall or pacing decision in the middle (the superblocks it waits to have
    /// recorded are what these I/Os write).
    fn device_io_step(&mut self, deadline: Option<Instant>) -> Result<(), DriverError> {
        if self.engine.log_recovering() {
            let until = deadline.map(|d| d.max(Instant::now() + crate::HELD_NAP));
            return self.pump_until(true, until);
        }
        self.step_until(deadline)
    }

    /// The kernel returned device I/O `seq`: its result waits for whoever asked, or,
    /// if they gave up, its buffer is freed now.
    pub(crate) fn device_io_done(&mut self, seq: u64, result: &io::Result<usize>) {
        let Some(at) = self.lent.iter().position(|l| l.seq == seq) else {
            return;
        };
        if self.lent[at].abandoned {
            self.lent.swap_remove(at);
            return;
        }
        self.lent[at].result = Some(match result {
            Ok(_) => Ok(()),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        });
    }
}

/// Performs `io` on `member` on this thread.
fn perform(member: &dyn xraid_member::Member, io: DeviceIo<'_>, offset: u64) -> io::Result<()> {
    match io {
        DeviceIo::Read(out) => member.read_at(out, offset),
        DeviceIo::Write(data) => member.write_at(data, offset),
        DeviceIo::Flush => member.flush(),
    }
}

fn timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the device did not answer within the stall timeout",
    )
}
