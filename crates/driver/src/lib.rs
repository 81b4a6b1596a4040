//! The real driver: runs one array's [`Engine`] on the calling thread, hands its member
//! I/Os to the kernel (io_uring, or a pread/pwrite thread pool where io_uring is not
//! allowed) and feeds completions back.
//!
//! The engine stays free of the OS; everything it needs from the OS is here: member
//! descriptors, the data offset of each member, the choice between the O_DIRECT and
//! the buffered descriptor for each I/O, and the clock.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use xraid_engine::{
    Area, BufId, Engine, EngineConfig, EngineError, Event, FailReason, IoFailed, IoId, IoKind,
    MemberIo, MemberState, Nanos, Reply, Request, RequestId, RequestKind, SECTOR_BYTES,
};
use xraid_layout::{Geometry, MemberIdx};
use xraid_member::Member;
use xraid_uring::{Backend, BackendKind, Completion, IoOp, OpKind};

pub use device_io::{DeviceIo, DeviceWait, DeviceWaitWatch};
pub use xraid_uring::{BackendChoice, Waker};

/// Member I/Os the driver keeps in the kernel at once; more wait in the engine's queue.
const QUEUE_DEPTH: u32 = 256;

/// How long a wait for member I/O naps when only held I/Os (see [`Held`]) are out: the
/// backend cannot wait with nothing in the kernel, and a nap this short keeps new
/// requests from waiting long while the array thread does not spin.
const HELD_NAP: Duration = Duration::from_millis(1);

/// Set in the I/O id of a token for an I/O the driver makes to a device itself
/// ([`ArrayDriver::device_io`]), not the engine: engine I/O ids are slab indexes, far
/// below it.
const DEVICE_IO: u64 = 1 << 31;

/// An I/O to a member that is slow or stalls on purpose ([`Member::hold_for`]), held
/// aside until it is due instead of waited out on the thread that drives every member
/// and the engine's clock: the other members' I/Os go on meanwhile, and several held
/// I/Os to the slow member wait out their time together, as on a device with a queue.
#[derive(Debug)]
struct Held {
    io: MemberIo,
    offset: u64,
    /// The generation of the device in the I/O's slot when it was held (see `slot_gen`).
    gen: u16,
    due: Instant,
}

/// Why the driver could not go on.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The I/O backend itself failed (not one member's I/O).
    #[error("I/O backend failed: {0}")]
    Backend(String),
    /// A request failed in the engine.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Reading the input or writing the output of a stream failed.
    #[error("{0}")]
    Stream(#[source] io::Error),
    /// A byte offset or length that is not a whole number of sectors.
    #[error("offset {offset} and length {length} must be multiples of 512 bytes")]
    Unaligned { offset: u64, length: u64 },
}

/// One member of the array as the driver sees it.
#[derive(Debug)]
pub struct MemberSlot {
    /// Shared: connection threads read through it directly (see `bypass`).
    pub member: Arc<dyn Member>,
    /// Where the member's data area starts, in bytes (md's data_offset).
    pub data_offset_bytes: u64,
    /// Where the member's stripe-log ring starts, in bytes, if it has one (between the
    /// metadata and the data, where md ignores it).
    pub log_offset_bytes: Option<u64>,
    /// Where the member's write-intent bitmap starts (md's `super_offset +
    /// bitmap_offset`), in bytes, if the array keeps one.
    pub bitmap_offset_bytes: Option<u64>,
    /// Where the member's checksum table starts (integrity mode: after the header of
    /// xraid's integrity area, past md's data area), in bytes.
    pub checksums_offset_bytes: Option<u64>,
}

/// A device that left its driver slot, open until the kernel is done with it.
#[derive(Debug)]
struct Retired {
    device: MemberSlot,
    slot: MemberIdx,
    gen: u16,
    in_kernel: u32,
}

/// A member the engine failed, with the last I/O error it returned, for the front end
/// to report.
#[derive(Debug)]
pub struct MemberFailure {
    pub member: MemberIdx,
    pub name: String,
    pub reason: FailReason,
    /// The member's last I/O error, if an I/O failed (none when an operator failed it).
    pub error: Option<io::Error>,
}

impl MemberFailure {
    /// Why the member was failed, in words for a log line or a warning.
    pub fn why(&self) -> String {
        fail_reason_words(self.reason, self.error.as_ref())
    }
}

/// Why a device was failed, in words for a log line or a warning: `reason`, and the
/// last I/O error it returned, if one is known.
pub fn fail_reason_words(reason: FailReason, error: Option<&io::Error>) -> String {
    match (error, reason) {
            (_, FailReason::ReadErrors(n)) => format!("{n} read errors"),
            (_, FailReason::Diverged) => {
                "it took a write the last in-sync copy refused, and would disagree with it"
                    .to_owned()
            }
            (_, FailReason::TornParity) => {
                "a crash may have torn its parity where a member is missing, the stripe log's entries for it are lost, and its bad block log had no room to list them".to_owned()
            }
            (_, FailReason::Stalled) => {
                "an I/O did not complete within the stall timeout".to_owned()
            }
            (Some(error), _) => error.to_string(),
            (None, FailReason::WriteError) => "a write failed".to_owned(),
            (None, FailReason::DeviceGone) => "the device went away".to_owned(),
            (None, _) => "failed by request".to_owned(),
    }
}

/// An array being driven: the engine, its members and the I/O backend.
#[derive(Debug)]
pub struct ArrayDriver {
    /// Declared first, so dropped first: its drop waits for every I/O the kernel (or
    /// a worker thread) still has, whose buffers are the engine's and `lent`'s and
    /// whose descriptors are the members' — freed only after it.
    backend: Backend,
    engine: Engine,
    /// Driver slots: `0..raid_disks` hold the members role by role at first, and
    /// `raid_disks..` the replacements being built; a role's device is in the slot
    /// [`Engine::device_slot`] names (a replacement that takes a role over stays in
    /// its slot).
    members: Vec<Option<MemberSlot>>,
    completions: Vec<Completion>,
    /// Completions of I/Os done inline (members without a kernel descriptor).
    inline_done: VecDeque<(IoId, Result<(), IoFailed>)>,
    /// I/Os to slow or stalled members, oldest first; counted in `in_kernel` as I/Os
    /// the kernel holds are, so that a device that leaves its slot stays open for them.
    held: Vec<Held>,
    replies: VecDeque<Reply>,
    failures: Vec<MemberFailure>,
    /// Each member's last I/O error, for the report when the engine fails it.
    last_error: Vec<Option<io::Error>>,
    events: Vec<Event>,
    /// Per driver slot, which device it holds: bumped each time a device leaves the
    /// slot, and carried in every I/O's token, so that a completion finds the device
    /// it went to.
    slot_gen: Vec<u16>,
    /// Per driver slot, I/Os in the kernel for the device it holds now.
    in_kernel: Vec<u32>,
    /// Devices that left their slot (a member replaced, a spare stepping in, a
    /// replacement dropped) with I/O still in the kernel: closed, and their locks let
    /// go, when the last one completes.
    retired: Vec<Retired>,
    epoch: Instant,
    next_request: u64,
    /// Buffers of device I/Os ([`ArrayDriver::device_io`]) in the kernel. Declared
    /// after `backend`, so dropped after it: the backend's drop waits for what the
    /// kernel still has, and until then the kernel may read or write these.
    lent: Vec<device_io::Lent>,
    next_device_io: u64,
    /// The driver slot a device I/O is being made to: the engine's new I/O to that
    /// device waits in `deferred` meanwhile (see [`ArrayDriver::device_io`]).
    quiet_slot: Option<MemberIdx>,
    /// The same device I/O, and since when, for other threads to see.
    device_wait: device_io::DeviceWaitWatch,
    /// The engine's I/O held back by `quiet_slot`, with the generation of its slot's
    /// device when the engine sent it: one whose device has left the slot since fails
    /// as gone rather than reach the newcomer.
    deferred: Vec<(MemberIo, u16)>,
    /// Reads other threads do straight from active members (see `bypass`).
    bypass: ReadBypass,
    /// Reads in the kernel from members that lay something over them when they
    /// complete ([`Member::lays_over_reads`]: an overlay's writes), with where they
    /// read.
    laid_over: Vec<(IoId, u64, xraid_engine::BufSlice)>,
}

impl ArrayDriver {
    /// Drives `geo` over `members` (one per role; `None` for a missing member).
    pub fn new(
        geo: Geometry,
        members: Vec<Option<MemberSlot>>,
        backend: BackendChoice,
    ) -> Result<ArrayDriver, DriverError> {
        let states = members
            .iter()
            .map(|m| match m {
                Some(_) => MemberState::Active,
                None => MemberState::Failed,
            })
            .collect();
        let mut members = members;
        let raid_disks = usize::from(geo.raid_disks());
        members.resize_with(2 * raid_disks, || None);
        let backend =
            Backend::new(backend, QUEUE_DEPTH).map_err(|e| DriverError::Backend(e.to_string()))?;
        // Every member I/O path here takes durable writes: io_uring and the thread pool
        // with RWF_DSYNC, other members as a write and a flush (`Member::write_durable_at`).
        let mut engine = Engine::new(geo, states);
        engine.set_config(EngineConfig {
            fua_writes: true,
            ..engine.config()
        });
        let driver = ArrayDriver {
            engine,
            members,
            backend,
            completions: Vec::new(),
            inline_done: VecDeque::new(),
            held: Vec::new(),
            replies: VecDeque::new(),
            failures: Vec::new(),
            last_error: (0..2 * geo.raid_disks()).map(|_| None).collect(),
            events: Vec::new(),
            slot_gen: vec![0; 2 * raid_disks],
            in_kernel: vec![0; 2 * raid_disks],
            retired: Vec::new(),
            epoch: Instant::now(),
            next_request: 0,
            lent: Vec::new(),
            next_device_io: 0,
            quiet_slot: None,
            device_wait: std::sync::Arc::default(),
            deferred: Vec::new(),
            bypass: bypass::new_bypass(geo),
            laid_over: Vec::new(),
        };
        driver.publish_bypass();
        Ok(driver)
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The member in `role`, if present.
    pub fn member(&self, role: MemberIdx) -> Option<&MemberSlot> {
        let slot = self.engine.device_slot(role);
        self.members.get(slot.index()).and_then(Option::as_ref)
    }

    /// The replacement being built for `role`, if one is.
    pub fn replacement(&self, role: MemberIdx) -> Option<&MemberSlot> {
        if !self.engine.is_replacing(role) {
            return None;
        }
        let slot = self.engine.replacement_slot(role);
        self.members.get(slot.index()).and_then(Option::as_ref)
    }

    /// The member in driver slot `slot` (see [`Engine::device_slot`]), if any.
    pub fn slot(&self, slot: MemberIdx) -> Option<&MemberSlot> {
        self.members.get(slot.index()).and_then(Option::as_ref)
    }

    /// Puts `slot` in `role` (a spare stepping in for a failed member). The engine must
    /// already count the role as failed or rebuilding, so that nothing new is sent to
    /// the old member; it is closed once the kernel is done with what it was sent.
    pub fn replace_member(&mut self, role: MemberIdx, slot: MemberSlot) {
        let at = self.engine.device_slot(role);
        self.put(at, slot);
    }

    /// Puts `slot` where the replacement of `role` lives and has the engine build it
    /// (md's want_replacement; see [`Engine::start_replacement`]). The caller starts
    /// (or restarts) the recover. Refused, with nothing changed, when the engine
    /// refuses.
    pub fn start_replacement(
        &mut self,
        role: MemberIdx,
        slot: MemberSlot,
    ) -> Result<(), xraid_engine::SyncError> {
        // Checked first: the slot is only filled for a replacement the engine takes.
        if self.engine.is_replacing(role) {
            return Err(xraid_engine::SyncError::AlreadyReplacing(role.0));
        }
        let at = self.engine.replacement_slot(role);
        self.send_queued_io();
        let previous = self.members[at.index()].replace(slot);
        match self.engine.start_replacement(role) {
            Ok(()) => {
                self.last_error[at.index()] = None;
                if let Some(old) = previous {
                    self.retire_device(at, old);
                }
                Ok(())
            }
            Err(e) => {
                if let Some(new) = std::mem::replace(&mut self.members[at.index()], previous) {
                    drop(new);
                }
                Err(e)
            }
        }
    }

    /// Puts `slot` into driver slot `at`; what was there is retired.
    fn put(&mut self, at: MemberIdx, slot: MemberSlot) {
        self.send_queued_io();
        self.retire(at);
        self.last_error[at.index()] = None;
        self.members[at.index()] = Some(slot);
    }

    /// Takes the device out of driver slot `at`, if it holds one: closed at once when
    /// the kernel has none of its I/O, or when the last of it completes.
    fn retire(&mut self, at: MemberIdx) {
        if let Some(device) = self.members[at.index()].take() {
            self.retire_device(at, device);
        }
    }

    /// `device` has left driver slot `at`: the I/O counted for the slot was its.
    fn retire_device(&mut self, at: MemberIdx, device: MemberSlot) {
        let i = at.index();
        let in_kernel = std::mem::take(&mut self.in_kernel[i]);
        let gen = self.slot_gen[i];
        self.slot_gen[i] = gen.wrapping_add(1);
        if in_kernel > 0 {
            self.retired.push(Retired {
                device,
                slot: at,
                gen,
                in_kernel,
            });
        }
    }

    /// One I/O the kernel had for the device `gen` of driver slot `slot` is done.
    fn out_of_kernel(&mut self, slot: MemberIdx, gen: u16) {
        let i = slot.index();
        if self.slot_gen[i] == gen {
            self.in_kernel[i] = self.in_kernel[i].saturating_sub(1);
            return;
        }
        if let Some(at) = self
            .retired
            .iter()
            .position(|r| r.slot == slot && r.gen == gen)
        {
            let retired = &mut self.retired[at];
            retired.in_kernel -= 1;
            if retired.in_kernel == 0 {
                // The last reference the driver holds: the device closes here (unless
                // a reader on another thread still has it for a moment).
                self.retired.swap_remove(at);
            }
        }
    }

    /// Whether the driver still has the device at `path` open: in a role, being built
    /// as a replacement, or retired with I/O in the kernel.
    pub fn holds(&self, path: &std::path::Path) -> bool {
        let canonical =
            |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let wanted = canonical(path);
        self.members
            .iter()
            .flatten()
            .chain(self.retired.iter().map(|r| &r.device))
            .any(|slot| canonical(std::path::Path::new(slot.member.name())) == wanted)
    }

    /// Closes the device of `role`, which the engine failed, once nothing sent to it is
    /// still in the kernel — so that the same disk can come back (an `xraid add` of
    /// it) or go (`xraid remove`) without waiting for the driver to go. Returns
    /// whether it is closed now: false while I/O sent to it is still in the kernel
    /// (it closes when that completes), or when the role is not failed.
    pub fn let_go_of_failed(&mut self, role: MemberIdx) -> bool {
        let failed = self.engine.member_states().get(role.index()) == Some(&MemberState::Failed);
        if !failed || self.engine.is_replacing(role) {
            return false;
        }
        let slot = self.engine.device_slot(role);
        self.retire(slot);
        self.last_error[slot.index()] = None;
        // The bypass held it too.
        self.publish_bypass();
        !self.retired.iter().any(|r| r.slot == slot)
    }

    /// A handle other threads use to end a blocking [`ArrayDriver::pump`] early (a new
    /// request has arrived for the engine).
    pub fn waker(&mut self) -> Result<Waker, DriverError> {
        self.backend
            .waker()
            .map_err(|e| DriverError::Backend(e.to_string()))
    }

    pub fn backend_kind(&self) -> BackendKind {
        self.backend.kind()
    }

    /// Members the engine failed since the last call, oldest first.
    pub fn take_failures(&mut self) -> Vec<MemberFailure> {
        self.drain_events();
        std::mem::take(&mut self.failures)
    }

    /// The engine's events since the last call (member failures included), oldest first.
    pub fn take_events(&mut self) -> Vec<Event> {
        self.drain_events();
        std::mem::take(&mut self.events)
    }

    fn drain_events(&mut self) {
        while let Some(event) = self.engine.poll_event() {
            match event {
                Event::MemberFailed { member, reason } => {
                    let slot = self.engine.device_slot(member);
                    let error = self.last_error[slot.index()]
                        .as_ref()
                        .map(|e| io::Error::new(e.kind(), e.to_string()));
                    let name = self.member_name(member);
                    self.failures.push(MemberFailure {
                        member,
                        name,
                        reason,
                        error,
                    });
                }
                Event::ReplacementTookOver { role, old_slot } => {
                    // The failure just reported was the old device's, whose slot the
                    // role has left by now.
                    let name = self.slot_name(old_slot, role);
                    let error = self.last_error[old_slot.index()]
                        .as_ref()
                        .map(|e| io::Error::new(e.kind(), e.to_string()));
                    if let Some(f) = self.failures.iter_mut().rev().find(|f| f.member == role) {
                        f.name = name;
                        f.error = error;
                    }
                    self.retire_left(role, old_slot);
                }
                Event::ReplacementDone { role, old_slot } => self.retire_left(role, old_slot),
                Event::ReplacementFailed { role, .. } => {
                    let slot = self.engine.replacement_slot(role);
                    self.retire_left(role, slot);
                }
                _ => {}
            }
            self.events.push(event);
        }
    }

    /// The device in driver slot `slot` has left `role` (replaced, failed as a
    /// replacement, or failed with its replacement taking over): retired, unless a new
    /// replacement of the role fills the slot by now (that retired the old one).
    fn retire_left(&mut self, role: MemberIdx, slot: MemberIdx) {
        if !self.engine.is_replacing(role) && self.engine.device_slot(role) != slot {
            self.retire(slot);
        }
    }

    fn now(&self) -> Nanos {
        Nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Hands a request to the engine; its reply arrives through [`ArrayDriver::poll`].
    pub fn submit(
        &mut self,
        kind: RequestKind,
        sector: u64,
        sectors: u64,
        buf: Option<BufId>,
    ) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        let now = self.now();
        self.engine.handle_request(
            Request {
                id,
                kind,
                sector,
                sectors,
                buf,
            },
            now,
        );
        id
    }

    /// Moves work along: submits the engine's member I/Os, and, when `wait` is set and
    /// something is in flight, blocks for at least one completion (or a [`Waker`]).
    /// Replies are queued for [`ArrayDriver::next_reply`].
    pub fn pump(&mut self, wait: bool) -> Result<(), DriverError> {
        self.pump_until(wait, None)
    }

    /// [`ArrayDriver::pump`], waiting no later than `until` when given.
    fn pump_until(&mut self, wait: bool, until: Option<Instant>) -> Result<(), DriverError> {
        self.release_held();
        loop {
            while let Some(io) = self.engine.poll_member_io() {
                self.dispatch(io);
            }
            if let Some((id, result)) = self.inline_done.pop_front() {
                let now = self.now();
                self.engine.handle_completion(id, result, now);
                continue;
            }
            break;
        }
        // A held I/O falls due without a completion to wake the wait: bound it, the
        // ones just sent included (bounded before them, a wait beside an I/O stuck in
        // the kernel slept past their due time, up to the engine's next timer).
        let until = [until, self.held.iter().map(|h| h.due).min()]
            .into_iter()
            .flatten()
            .min();
        self.drain_replies();
        let must_wait = wait && self.replies.is_empty() && self.backend.in_flight() > 0;
        if wait && self.replies.is_empty() && self.backend.in_flight() == 0 {
            if let Some(due) = self.held.iter().map(|h| h.due).min() {
                let due = until.map_or(due, |until| until.min(due));
                std::thread::sleep(due.saturating_duration_since(Instant::now()).min(HELD_NAP));
                return self.pump(false);
            }
        }
        self.completions.clear();
        let timeout = until.map(|until| until.saturating_duration_since(Instant::now()));
        self.backend
            .wait_for_at_most(usize::from(must_wait), &mut self.completions, timeout)
            .map_err(|e| DriverError::Backend(e.to_string()))?;
        let done = std::mem::take(&mut self.completions);
        for c in &done {
            let (id, member, gen) = decode_token(c.token);
            // Before the device may be let go with its last I/O.
            self.lay_over(id, member, gen, c.result.is_ok());
            self.out_of_kernel(member, gen);
            if id.0 & DEVICE_IO != 0 {
                self.device_io_done(id.0 & !DEVICE_IO, &c.result);
                continue;
            }
            let result = match &c.result {
                Ok(_) => Ok(()),
                Err(error) => {
                    self.note_failure(member, error);
                    Err(IoFailed::from_errno(error.raw_os_error()))
                }
            };
            let now = self.now();
            self.engine.handle_completion(id, result, now);
        }
        self.completions = done;
        if !self.completions.is_empty() {
            // Completions may have produced new member I/Os and replies.
            return self.pump(false);
        }
        self.drain_replies();
        Ok(())
    }

    fn drain_replies(&mut self) {
        while let Some(reply) = self.engine.poll_reply() {
            self.replies.push_back(reply);
        }
    }

    /// How long until the engine's next timer (a paced sync), if it has one.
    pub fn until_timer(&self) -> Option<std::time::Duration> {
        let at = self.engine.poll_timeout()?;
        Some(std::time::Duration::from_nanos(
            at.0.saturating_sub(self.now().0),
        ))
    }

    /// Moves work along as [`ArrayDriver::pump`] with `wait` does, but waits no later
    /// than the engine's next timer (or a held I/O's due time) and then hands the engine
    /// the time: a wait on the array's thread never stops the engine's clock, so a
    /// member whose I/O does not complete is failed at the stall timeout.
    pub fn step(&mut self) -> Result<(), DriverError> {
        self.step_until(None)
    }

    /// [`ArrayDriver::step`], waiting no later than `deadline` either.
    fn step_until(&mut self, deadline: Option<Instant>) -> Result<(), DriverError> {
        let timer = self
            .engine
            .poll_timeout()
            .map(|at| self.epoch + Duration::from_nanos(at.0));
        let held = self.held.iter().map(|h| h.due).min();
        // A timer already due still waits a nap for completions, so that a timer the
        // engine keeps due cannot make this spin.
        let until = [deadline, timer, held]
            .into_iter()
            .flatten()
            .min()
            .map(|until| until.max(Instant::now() + HELD_NAP));
        self.pump_until(true, until)?;
        if self
            .engine
            .poll_timeout()
            .is_some_and(|at| at <= self.now())
        {
            self.tick();
        }
        Ok(())
    }

    /// Hands the engine the time, for its timers.
    pub fn tick(&mut self) {
        let now = self.now();
        self.engine.handle_timeout(now);
    }

    /// The next reply, if one is ready.
    pub fn next_reply(&mut self) -> Option<Reply> {
        self.replies.pop_front()
    }

    /// Whether requests or member I/Os are still in flight.
    pub fn busy(&self) -> bool {
        !self.engine.is_idle() || !self.replies.is_empty()
    }

    /// Whether member I/Os are in flight.
    pub fn io_in_flight(&self) -> bool {
        self.backend.in_flight() > 0 || !self.inline_done.is_empty() || !self.held.is_empty()
    }

    /// Fails the member in `role` after an I/O the driver did not make itself failed
    /// (a superblock write): the failure is reported with `error`, as one of the
    /// engine's own I/Os would be.
    pub fn fail_member_on_error(&mut self, role: MemberIdx, reason: FailReason, error: &io::Error) {
        let slot = self.engine.device_slot(role);
        self.note_failure(slot, error);
        self.engine.fail_member_for(role, reason);
    }

    /// Drops the replacement being built for `role` after an I/O the driver did not
    /// make itself failed on it (a superblock write): reported with `error`, as one
    /// of the engine's own I/Os would be. The role's member serves on.
    pub fn fail_replacement_on_error(&mut self, role: MemberIdx, error: &io::Error) {
        if self.engine.is_replacing(role) {
            let slot = self.engine.replacement_slot(role);
            self.note_failure(slot, error);
            self.engine
                .fail_replacement_for(role, FailReason::WriteError);
        }
    }

    /// Records the last I/O error of the device in driver slot `slot`.
    fn note_failure(&mut self, slot: MemberIdx, error: &io::Error) {
        self.last_error[slot.index()] = Some(io::Error::new(error.kind(), error.to_string()));
    }

    fn member_name(&self, role: MemberIdx) -> String {
        self.slot_name(self.engine.device_slot(role), role)
    }

    fn slot_name(&self, slot: MemberIdx, role: MemberIdx) -> String {
        self.members[slot.index()].as_ref().map_or_else(
            || format!("role {}", role.0),
            |m| m.member.name().to_owned(),
        )
    }

    /// Sends the member I/O the engine has queued to the devices in their slots now,
    /// before a device leaves its slot: the engine sent it for that device, and the
    /// newcomer holds nothing it is meant for (a read of it would return the
    /// newcomer's blocks; a write of bitmap or ring bytes could land after the
    /// newcomer's own).
    fn send_queued_io(&mut self) {
        while let Some(io) = self.engine.poll_member_io() {
            self.dispatch(io);
        }
    }

    /// Sends the member I/Os the engine has queued since the last pump (a call made on
    /// it directly, such as [`Engine::hold_sync`] letting a sync go), taking no
    /// completion: left queued until the next pump, they are not in flight as
    /// [`ArrayDriver::io_in_flight`] sees it, and a caller that then sleeps until the
    /// engine's next timer may find them counted stalled.
    pub fn send_queued(&mut self) {
        while let Some(io) = self.engine.poll_member_io() {
            self.dispatch(io);
        }
    }

    /// Sends one member I/O to the kernel, or performs it inline for members that have
    /// no descriptor (in-memory members).
    fn dispatch(&mut self, io: MemberIo) {
        if self.quiet_slot == Some(io.member) {
            let gen = self.slot_gen[io.member.index()];
            self.deferred.push((io, gen));
            return;
        }
        let Some(slot) = self.members[io.member.index()].as_ref() else {
            // Queued for a device before it left its role, and retired since: it fails
            // as gone, which counts against no one (the role's I/Os are another
            // generation now).
            self.inline_done.push_back((io.id, Err(IoFailed::Gone)));
            return;
        };
        let base = match io.area {
            Area::Data => Some(slot.data_offset_bytes),
            Area::Log => slot.log_offset_bytes,
            Area::Bitmap => slot.bitmap_offset_bytes,
            Area::Checksums => slot.checksums_offset_bytes,
        };
        let Some(base) = base else {
            // The engine was configured with a log this member has no room for.
            let error = io::Error::other("no room on this member for the area the engine wrote");
            self.note_failure(io.member, &error);
            self.inline_done.push_back((io.id, Err(IoFailed::Medium)));
            return;
        };
        let offset = base + io.sector * SECTOR_BYTES;
        if let Some(hold) = slot.member.hold_for() {
            // Held aside, not waited out here: this thread drives the other members and
            // the engine's clock, whose stall timeout is what fails a stalled member.
            self.in_kernel[io.member.index()] += 1;
            self.held.push(Held {
                io,
                offset,
                gen: self.slot_gen[io.member.index()],
                // A stall past any run of the server is as good as forever (and
                // cannot overflow the clock).
                due: Instant::now() + hold.min(Duration::from_secs(1 << 32)),
            });
            return;
        }
        self.perform_now(io, offset);
    }

    /// Performs `io` (at member byte `offset`) on this thread, or hands it to the
    /// kernel.
    fn perform_now(&mut self, io: MemberIo, offset: u64) {
        let Some(slot) = self.members[io.member.index()].as_ref() else {
            // As in `dispatch`; a held I/O comes here only while its device is there.
            self.inline_done.push_back((io.id, Err(IoFailed::Gone)));
            return;
        };
        let discard = io.kind == IoKind::Write
            && io.area == Area::Data
            && self.engine.buffers().is_discard(io.buf.buf);
        if discard {
            // Zeros that may be stored by freeing the range: a punched hole where the
            // member can, done here (fallocate is a metadata change, not a transfer).
            let result = slot.member.zero_range(offset, io.buf.len as u64);
            self.complete_inline(io.id, io.member, result);
            return;
        }
        // A flush moves no data: its buffer is never looked at (the engine may have
        // answered it and freed the buffer already, for a device that left the array).
        let (ptr, len) = if io.kind == IoKind::Flush {
            (std::ptr::null_mut(), 0)
        } else {
            (self.engine.buffers().raw_ptr(io.buf), io.buf.len)
        };
        let direct = if io.kind == IoKind::Read {
            slot.member.read_fd()
        } else {
            slot.member.direct_fd()
        };
        let Some(direct) = direct else {
            let result = self.perform_inline(&io, offset);
            self.complete_inline(io.id, io.member, result);
            return;
        };
        let aligned = |v: usize| v.is_multiple_of(direct.align);
        let use_direct = io.kind != IoKind::Flush
            && aligned(ptr as usize)
            && aligned(len)
            && u64::try_from(direct.align).is_ok_and(|a| offset.is_multiple_of(a));
        let fd = if use_direct {
            direct.fd
        } else {
            direct.buffered_fd
        };
        let kind = match io.kind {
            IoKind::Read => OpKind::Read,
            IoKind::Write => OpKind::Write,
            IoKind::WriteFua => OpKind::WriteDsync,
            IoKind::Flush => OpKind::Fsync,
        };
        let op = IoOp {
            token: encode_token(io.id, io.member, self.slot_gen[io.member.index()]),
            fd,
            kind,
            offset,
            ptr,
            len,
        };
        // SAFETY: a flush has no buffer (null, 0); the buffer behind any other `ptr` belongs to the engine's buffer table and stays
        // allocated, unmoved and untouched by the engine until this I/O's completion is
        // handed back (the engine frees scratch and the caller frees request buffers only
        // after the reply); the member's descriptors stay open until this I/O completes:
        // counted in `in_kernel`, a device that leaves its slot is retired, not closed,
        // until its count drops to zero (see `retire_device`).
        let submitted = unsafe { self.backend.submit(op) };
        match submitted {
            Ok(()) => {
                self.in_kernel[io.member.index()] += 1;
                if io.kind == IoKind::Read && slot.member.lays_over_reads() {
                    self.laid_over.push((io.id, offset, io.buf));
                }
            }
            Err((error, op)) => {
                let error = io::Error::other(error.to_string());
                self.note_failure(io.member, &error);
                self.inline_done
                    .push_back((decode_token(op.token).0, Err(IoFailed::Medium)));
            }
        }
    }

    /// A read `id` of driver slot `slot`'s device `gen` completed in the kernel (with
    /// success or not): what its member holds beyond the device goes over it before
    /// the engine sees it.
    fn lay_over(&mut self, id: IoId, slot: MemberIdx, gen: u16, succeeded: bool) {
        if self.laid_over.is_empty() {
            return;
        }
        let Some(at) = self.laid_over.iter().position(|(i, _, _)| *i == id) else {
            return;
        };
        let (_, offset, buf) = self.laid_over.swap_remove(at);
        if !succeeded {
            return;
        }
        let device = if self.slot_gen[slot.index()] == gen {
            self.members[slot.index()].as_ref()
        } else {
            self.retired
                .iter()
                .find(|r| r.slot == slot && r.gen == gen)
                .map(|r| &r.device)
        };
        if let Some(device) = device {
            device
                .member
                .lay_over_read(self.engine.buffers_mut().slice_mut(buf), offset);
        }
    }

    /// Performs the held I/Os that are due, oldest first, and completes as gone,
    /// unperformed, those whose device the engine failed or that left its slot: a
    /// stalled device answers nobody it was failed for (an injected stall can be taken
    /// back, unlike memory lent to the kernel), so what waited on it goes on around it
    /// at once.
    fn release_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let now = Instant::now();
        let (ready, waiting): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.due <= now || !self.serving(h.io.member, h.gen));
        self.held = waiting;
        for h in ready {
            let slot = h.io.member;
            if self.serving(slot, h.gen) {
                xraid_member::with_hold_waited(|| self.perform_now(h.io, h.offset));
            } else {
                self.inline_done.push_back((h.io.id, Err(IoFailed::Gone)));
            }
            self.out_of_kernel(slot, h.gen);
        }
    }

    /// Whether the device `gen` of driver slot `slot` still serves: in its slot, and
    /// there a role's member the engine has not failed or a replacement being built.
    fn serving(&self, slot: MemberIdx, gen: u16) -> bool {
        if self.slot_gen[slot.index()] != gen {
            return false;
        }
        let engine = &self.engine;
        (0..engine.geometry().raid_disks())
            .map(MemberIdx)
            .any(|role| {
                (engine.device_slot(role) == slot
                    && engine.member_states().get(role.index()) != Some(&MemberState::Failed))
                    || (engine.is_replacing(role) && engine.replacement_slot(role) == slot)
            })
    }

    /// Queues the completion of an I/O done on this thread.
    fn complete_inline(&mut self, id: IoId, member: MemberIdx, result: io::Result<()>) {
        if let Err(error) = &result {
            self.note_failure(member, error);
        }
        self.inline_done.push_back((
            id,
            result.map_err(|e| IoFailed::from_errno(e.raw_os_error())),
        ));
    }

    fn perform_inline(&mut self, io: &MemberIo, offset: u64) -> io::Result<()> {
        let slot = self.members[io.member.index()]
            .as_ref()
            .expect("present member");
        match io.kind {
            IoKind::Read => {
                let buf = self.engine.buffers_mut().slice_mut(io.buf);
                slot.member.read_at(buf, offset)
            }
            IoKind::Write => slot
                .member
                .write_at(self.engine.buffers().slice(io.buf), offset),
            IoKind::WriteFua => slot
                .member
                .write_durable_at(self.engine.buffers().slice(io.buf), offset),
            IoKind::Flush => slot.member.flush(),
        }
    }

    /// Runs until `id` has replied; returns its result. Other replies that arrive
    /// meanwhile stay queued.
    pub fn wait_for(&mut self, id: RequestId) -> Result<(), DriverError> {
        loop {
            if let Some(pos) = self.replies.iter().position(|r| r.id == id) {
                let reply = self.replies.remove(pos).expect("position is valid");
                return reply.result.map_err(DriverError::Engine);
            }
            self.step()?;
        }
    }

    /// Reads `out.len()` bytes at byte `offset` (both multiples of 512).
    pub fn read_at(&mut self, out: &mut [u8], offset: u64) -> Result<(), DriverError> {
        let (sector, sectors) = sector_range(offset, out.len() as u64)?;
        let buf = self.engine.buffers_mut().alloc(out.len());
        let id = self.submit(RequestKind::Read, sector, sectors, Some(buf));
        let result = self.wait_for(id);
        if result.is_ok() {
            out.copy_from_slice(self.engine.buffers().get(buf));
        }
        self.engine.buffers_mut().free(buf);
        result
    }

    /// Writes `data` at byte `offset` (both multiples of 512).
    pub fn write_at(&mut self, data: &[u8], offset: u64) -> Result<(), DriverError> {
        let (sector, sectors) = sector_range(offset, data.len() as u64)?;
        let buf = self.engine.buffers_mut().alloc(data.len());
        self.engine.buffers_mut().get_mut(buf).copy_from_slice(data);
        let id = self.submit(RequestKind::Write, sector, sectors, Some(buf));
        let result = self.wait_for(id);
        self.engine.buffers_mut().free(buf);
        result
    }

    /// Makes every completed write durable on every live member, and in integrity
    /// mode the checksum tables too (a checkpoint).
    pub fn flush(&mut self) -> Result<(), DriverError> {
        let id = self.submit(RequestKind::Checkpoint, 0, 0, None);
        self.wait_for(id)
    }
}

/// Packs the engine's I/O id and the member into the backend's 64-bit token, so that a
/// failed completion names its member without a lookup table.
/// An I/O's token for the backend: its id, the driver slot and the generation of the
/// device in that slot.
fn encode_token(id: IoId, slot: MemberIdx, gen: u16) -> u64 {
    debug_assert!(id.0 < 1 << 32, "I/O ids are slab indexes, far below 2^32");
    (id.0 << 32) | (u64::from(gen) << 16) | u64::from(slot.0)
}

fn decode_token(token: u64) -> (IoId, MemberIdx, u16) {
    (
        IoId(token >> 32),
        MemberIdx((token & 0xffff) as u16),
        ((token >> 16) & 0xffff) as u16,
    )
}

fn sector_range(offset: u64, length: u64) -> Result<(u64, u64), DriverError> {
    if !offset.is_multiple_of(SECTOR_BYTES) || !length.is_multiple_of(SECTOR_BYTES) {
        return Err(DriverError::Unaligned { offset, length });
    }
    Ok((offset / SECTOR_BYTES, length / SECTOR_BYTES))
}

mod allocation;
mod bypass;
mod device_io;
mod stream;
pub use allocation::AllocationRun;
pub use bypass::ReadBypass;
pub use stream::{
    write_stream, StreamProgress, StreamRunner, DEFAULT_STREAM_DEPTH, DEFAULT_STREAM_REQUEST_BYTES,
};
