//! A deterministic in-memory driver: members are byte vectors, member I/Os complete
//! one at a time in an order drawn from a seed, and time is a simulated clock.
//! Members can die, return, fail reads in ranges, flip bits and lose the writes in
//! their volatile caches to a power cut.
//!
//! It drives the same [`Engine`] the real driver does, with no threads and no OS, so
//! tests can replay any interleaving from its seed and inject member failures.

use std::collections::VecDeque;
use std::ops::Range;

use xraid_layout::{Geometry, MemberIdx, SECTOR_BYTES};

use crate::{
    Area, BufId, Engine, EngineError, Event, IoFailed, IoKind, MemberIo, MemberState, Nanos, Reply,
    Request, RequestId, RequestKind, SyncError,
};

/// Simulated time one member I/O takes; only its order matters to tests.
const IO_TICK: Nanos = Nanos(100_000);

/// A small, fast, seedable generator (SplitMix64): enough for picking orders.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// How a simulated member behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimMemberHealth {
    Healthy,
    /// Every I/O to it fails as from a vanished device.
    Dead,
}

/// A write a member's volatile cache holds until the next flush: where, and the
/// bytes it replaced (a power cut may put them back).
#[derive(Debug, Clone)]
struct Unflushed {
    area: Area,
    at: usize,
    old: Vec<u8>,
    /// The member's count of completed writes when this one completed.
    seq: u64,
    /// The write covered part of a bad range (and made it good).
    healed: bool,
}

/// One simulated member: its data area, its health, the ranges that fail to read
/// (until written, as a drive remaps a bad sector on write) and its volatile cache.
#[derive(Debug, Clone)]
pub struct SimMember {
    pub data: Vec<u8>,
    /// The member's partial-parity log ring (grown on first use).
    pub log: Vec<u8>,
    /// The member's write-intent bitmap area (grown on first use).
    pub bitmap: Vec<u8>,
    /// The member's checksum table in integrity mode (grown on first use).
    pub checksums: Vec<u8>,
    pub health: SimMemberHealth,
    /// Member sector ranges whose reads fail with a medium error.
    pub bad_ranges: Vec<Range<u64>>,
    /// Member sector ranges whose writes fail with a medium error (they take none).
    pub write_error_ranges: Vec<Range<u64>>,
    /// Time each of its I/Os takes beyond the others' (a slow disk).
    pub extra_latency: Nanos,
    /// Reads of its stripe-log ring fail with a medium error.
    pub ring_unreadable: bool,
    /// Data-area reads it served.
    pub reads: u64,
    /// Which device holds the role (a replacement is a new device): I/O sent to an
    /// earlier one fails as gone.
    device: u32,
    unflushed: Vec<Unflushed>,
    /// Writes completed so far (what a flush sent now would cover).
    completed_writes: u64,
}

impl SimMember {
    /// Whether a write no flush has made durable yet covered part of a bad range: a
    /// power cut may undo its data, while the model keeps the range healed.
    pub fn unflushed_heal(&self) -> bool {
        self.unflushed.iter().any(|u| u.healed)
    }

    /// Whether a write to bytes `range` of `area` is still only in the volatile cache
    /// (a power cut may undo it).
    pub fn unflushed_in(&self, area: Area, range: Range<usize>) -> bool {
        self.unflushed
            .iter()
            .any(|u| u.area == area && u.at < range.end && range.start < u.at + u.old.len())
    }

    fn new(bytes: usize) -> SimMember {
        SimMember {
            data: vec![0; bytes],
            log: Vec::new(),
            bitmap: Vec::new(),
            checksums: Vec::new(),
            health: SimMemberHealth::Healthy,
            bad_ranges: Vec::new(),
            write_error_ranges: Vec::new(),
            extra_latency: Nanos(0),
            ring_unreadable: false,
            reads: 0,
            device: 0,
            unflushed: Vec::new(),
            completed_writes: 0,
        }
    }

    /// The bytes of one area of the member.
    fn store(&mut self, area: Area) -> &mut Vec<u8> {
        match area {
            Area::Data => &mut self.data,
            Area::Log => &mut self.log,
            Area::Bitmap => &mut self.bitmap,
            Area::Checksums => &mut self.checksums,
        }
    }

    fn read_fails(&self, range: &Range<u64>) -> bool {
        self.bad_ranges
            .iter()
            .any(|b| b.start < range.end && range.start < b.end)
    }

    /// A write over part of a bad range makes that part good again.
    fn remap(&mut self, range: &Range<u64>) {
        let mut kept = Vec::new();
        for b in self.bad_ranges.drain(..) {
            if b.start < range.start {
                kept.push(b.start..b.end.min(range.start));
            }
            if b.end > range.end {
                kept.push(b.start.max(range.end)..b.end);
            }
        }
        self.bad_ranges = kept;
    }
}

/// An array of in-memory members driven by an [`Engine`].
#[derive(Debug)]
pub struct SimArray {
    pub engine: Engine,
    /// Driver slots `0..raid_disks`: the members, role by role, until a replacement
    /// takes a role over (see [`Engine::device_slot`]).
    pub members: Vec<SimMember>,
    /// Driver slots `raid_disks..2 * raid_disks`, where replacements live.
    pub other_slots: Vec<SimMember>,
    rng: SimRng,
    now: Nanos,
    /// Member I/Os in flight, each with the time it may complete (a slow member's are
    /// held back by its extra latency).
    in_flight: Vec<(MemberIo, Nanos, u32)>,
    /// Per flush in flight (by I/O id): its member's count of completed writes when it
    /// was sent.
    flush_covers: std::collections::HashMap<u64, u64>,
    replies: VecDeque<Reply>,
    events: Vec<Event>,
    next_id: u64,
    /// Complete member I/Os in seeded random order (true) or in issue order.
    pub shuffle: bool,
    /// Integrity mode is on: the engine's checksum tables live in the members'
    /// `checksums` areas and come back from there after a power cut.
    integrity: bool,
    /// Every device keeps a bad block log with room for this many ranges (see
    /// [`SimArray::enable_bad_block_logs`]).
    bad_block_logs: Option<usize>,
    /// The members' states as the superblocks last recorded them. The driver records
    /// a failure before any reply (as `xraid serve` does), so outside the stripe log's
    /// recovery at open they are the engine's; during it, only when the replay waits
    /// for the record ([`Engine::replay_awaits_record`]).
    recorded_states: Vec<MemberState>,
    /// While set, the driver records nothing, so that a test sees what the engine does
    /// while it waits for a record; [`SimArray::record_now`] records.
    pub defer_records: bool,
    /// With `defer_records`: ranges added are still recorded at once (as the driver
    /// records them, with a flush, before any reply); only lists made good wait.
    pub defer_only_clears: bool,
    /// I/O sent to a device that a newcomer has replaced in its slot goes to the
    /// newcomer, as the driver sends what it has not yet submitted to the kernel to
    /// the device in the slot when it submits it; else it fails as from a device gone.
    pub stale_io_to_newcomer: bool,
    /// The next restart finds superblocks that say the array was stopped cleanly
    /// (see [`SimArray::power_cut_then_clean_open_with`]).
    clean_open: bool,
}

impl SimArray {
    /// Zero-filled members for `geo`, all healthy.
    pub fn new(geo: Geometry, seed: u64) -> SimArray {
        let n = usize::from(geo.raid_disks());
        let member_bytes =
            usize::try_from(geo.member_sectors() * SECTOR_BYTES).expect("fits memory");
        SimArray {
            engine: Engine::new(geo, vec![MemberState::Active; n]),
            members: vec![SimMember::new(member_bytes); n],
            other_slots: vec![SimMember::new(member_bytes); n],
            rng: SimRng::new(seed),
            now: Nanos(0),
            in_flight: Vec::new(),
            flush_covers: std::collections::HashMap::new(),
            replies: VecDeque::new(),
            events: Vec::new(),
            next_id: 0,
            shuffle: true,
            integrity: false,
            bad_block_logs: None,
            recorded_states: vec![MemberState::Active; n],
            defer_records: false,
            defer_only_clears: false,
            stale_io_to_newcomer: false,
            clean_open: false,
        }
    }

    /// Gives every device a bad block log with room for `capacity` ranges: a mirror
    /// copy that refuses a write another copy took gets the range recorded there
    /// instead of being failed. The driver's part is played as `xraid serve` plays
    /// it: when the engine adds a range, every member is flushed and the lists are
    /// recorded before anything else happens, and a power cut brings back the lists
    /// as last recorded.
    pub fn enable_bad_block_logs(&mut self, capacity: usize) {
        self.bad_block_logs = Some(capacity);
        for m in 0..2 * self.members.len() {
            let slot = MemberIdx(u16::try_from(m).expect("few members"));
            let list = self.engine.bad_blocks(slot);
            self.engine.set_bad_block_log(slot, list, capacity);
        }
    }

    /// The driver records what changed: the members' states (see
    /// [`SimArray::recorded_states`]), then the bad block lists.
    fn record(&mut self) {
        // With only lists made good held back, a replay waiting for the record gets it
        // (the driver makes it then).
        if self.defer_records
            && !(self.defer_only_clears
                && (crate::badblocks::additions_pending(&self.engine)
                    || self.engine.replay_awaits_record()))
        {
            return;
        }
        let recovering = self.engine.log_recovering();
        if !recovering || self.engine.replay_awaits_record() {
            self.recorded_states = self.engine.member_states().to_vec();
            if recovering {
                let serving = self.engine.serving_devices();
                self.engine.replay_failures_recorded(&serving);
            }
        }
        self.record_bad_blocks();
    }

    /// Records what [`SimArray::defer_records`] held back.
    pub fn record_now(&mut self) {
        let deferred = std::mem::replace(&mut self.defer_records, false);
        self.record();
        self.defer_records = deferred;
    }

    /// The driver records the engine's changed bad ranges (added, or made good): a
    /// flush of every member (what has completed is durable), then the lists.
    fn record_bad_blocks(&mut self) {
        if !self.engine.bad_blocks_to_record() {
            return;
        }
        let (generation, lists) = self.engine.bad_blocks_snapshot();
        for m in 0..2 * self.members.len() {
            let slot = MemberIdx(u16::try_from(m).expect("few members"));
            self.slot_mut(slot).unflushed.clear();
        }
        self.engine.bad_blocks_recorded(generation, lists);
    }

    /// Turns integrity mode on: each device's table is computed from what it holds
    /// now (and so agrees with it).
    pub fn enable_integrity(&mut self) {
        self.integrity = true;
        let n = self.members.len();
        let tables = (0..2 * n)
            .map(|s| {
                let m = if s < n {
                    &self.members[s]
                } else {
                    &self.other_slots[s - n]
                };
                let entries = m
                    .data
                    .chunks(xraid_format::BLOCK_BYTES)
                    .map(|b| {
                        if b.len() == xraid_format::BLOCK_BYTES {
                            xraid_format::block_entry(b)
                        } else {
                            xraid_format::UNKNOWN
                        }
                    })
                    .collect();
                Some(std::sync::Arc::new(crate::ChecksumTable::new(entries)))
            })
            .collect();
        self.engine.enable_integrity(tables, true);
    }

    /// The tables as the devices' checksum areas hold them (a sparse area reads as
    /// zeros, which says "all zeros"), for an engine starting over.
    fn tables_from_areas(&self) -> Vec<Option<std::sync::Arc<crate::ChecksumTable>>> {
        let n = self.members.len();
        let blocks = xraid_format::blocks_for(self.engine.geometry().member_sectors());
        let pages = xraid_format::pages_for(blocks);
        (0..2 * n)
            .map(|s| {
                let m = if s < n {
                    &self.members[s]
                } else {
                    &self.other_slots[s - n]
                };
                let mut entries = Vec::new();
                for page in 0..pages {
                    let at = usize::try_from(page).expect("small") * xraid_format::PAGE_BYTES;
                    let mut bytes = [0u8; xraid_format::PAGE_BYTES];
                    if let Some(stored) = m.checksums.get(at..) {
                        let len = stored.len().min(bytes.len());
                        bytes[..len].copy_from_slice(&stored[..len]);
                    }
                    let want = (blocks - page * xraid_format::ENTRIES_PER_PAGE)
                        .min(xraid_format::ENTRIES_PER_PAGE)
                        as usize;
                    match xraid_format::decode_page(&bytes, page) {
                        Some(values) => entries.extend_from_slice(&values[..want]),
                        None => entries.extend(std::iter::repeat_n(xraid_format::UNKNOWN, want)),
                    }
                }
                Some(std::sync::Arc::new(crate::ChecksumTable::new(entries)))
            })
            .collect()
    }

    /// Gives the device in `slot` (a new one, full of garbage) an unknown table.
    fn unknown_table(&mut self, slot: MemberIdx) {
        if self.integrity {
            let blocks = xraid_format::blocks_for(self.engine.geometry().member_sectors());
            let table = std::sync::Arc::new(crate::ChecksumTable::unknown(blocks));
            self.engine.set_checksum_table(slot, Some(table), true);
        }
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    pub fn rng(&mut self) -> &mut SimRng {
        &mut self.rng
    }

    /// Starts a read of `sectors` at `sector`; returns its id and buffer.
    pub fn start_read(&mut self, sector: u64, sectors: u64) -> (RequestId, BufId) {
        let len = usize::try_from(sectors * SECTOR_BYTES).expect("fits memory");
        let buf = self.engine.buffers_mut().alloc(len);
        let id = self.submit(RequestKind::Read, sector, sectors, Some(buf));
        (id, buf)
    }

    /// Starts a write of `data` at `sector`; returns its id and buffer.
    pub fn start_write(&mut self, sector: u64, data: &[u8]) -> (RequestId, BufId) {
        let buf = self.engine.buffers_mut().alloc(data.len());
        self.engine.buffers_mut().get_mut(buf).copy_from_slice(data);
        let sectors = data.len() as u64 / SECTOR_BYTES;
        let id = self.submit(RequestKind::Write, sector, sectors, Some(buf));
        (id, buf)
    }

    pub fn start_flush(&mut self) -> RequestId {
        self.submit(RequestKind::Flush, 0, 0, None)
    }

    /// Starts a checkpoint: a flush that also writes the checksum tables.
    pub fn start_checkpoint(&mut self) -> RequestId {
        self.submit(RequestKind::Checkpoint, 0, 0, None)
    }

    fn submit(
        &mut self,
        kind: RequestKind,
        sector: u64,
        sectors: u64,
        buf: Option<BufId>,
    ) -> RequestId {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let req = Request {
            id,
            kind,
            sector,
            sectors,
            buf,
        };
        self.engine.handle_request(req, self.now);
        self.collect();
        id
    }

    fn collect(&mut self) {
        while let Some(io) = self.engine.poll_member_io() {
            let extra = self.slot(io.member).extra_latency;
            let device = self.slot(io.member).device;
            if io.kind == IoKind::Flush {
                let covers = self.slot(io.member).completed_writes;
                self.flush_covers.insert(io.id.0, covers);
            }
            self.in_flight
                .push((io, Nanos(self.now.0 + extra.0), device));
        }
        while let Some(reply) = self.engine.poll_reply() {
            self.replies.push_back(reply);
        }
        while let Some(event) = self.engine.poll_event() {
            self.events.push(event);
        }
    }

    /// Runs the array until the running sync has done every unit below `unit` (or has
    /// ended); returns whether it got there.
    pub fn run_sync_until(&mut self, unit: u64) -> bool {
        loop {
            match self.engine.sync_progress() {
                Some(p) if p.done_below < unit => {}
                Some(_) => return true,
                None => return false,
            }
            if !self.step() {
                return false;
            }
        }
    }

    /// Completes one member I/O, if any is in flight; with none in flight, moves the
    /// clock to the engine's next timer (a paced sync). Returns whether anything happened.
    pub fn step(&mut self) -> bool {
        // Calls made on the engine directly (starting a sync...) may have left I/O.
        self.collect();
        if self.in_flight.is_empty() {
            let Some(at) = self.engine.poll_timeout() else {
                return false;
            };
            self.now = Nanos(self.now.0.max(at.0));
            self.engine.handle_timeout(self.now);
            self.collect();
            return true;
        }
        // Only I/Os whose time has come may complete; with none, the clock jumps.
        let mut ready: Vec<usize> = (0..self.in_flight.len())
            .filter(|&i| self.in_flight[i].1 <= self.now)
            .collect();
        if ready.is_empty() {
            let next = self
                .in_flight
                .iter()
                .map(|(_, t, _)| *t)
                .min()
                .expect("in flight");
            // An engine timer (a stalled member) may come first.
            if let Some(at) = self.engine.poll_timeout().filter(|at| *at < next) {
                self.now = Nanos(self.now.0.max(at.0));
                self.engine.handle_timeout(self.now);
                self.record();
                self.collect();
                return true;
            }
            self.now = next;
            ready = (0..self.in_flight.len())
                .filter(|&i| self.in_flight[i].1 <= self.now)
                .collect();
        }
        let pick = if self.shuffle {
            ready[self.rng.below(ready.len() as u64) as usize]
        } else {
            ready[0]
        };
        let (io, _, device) = self.in_flight.swap_remove(pick);
        self.now = Nanos(self.now.0 + IO_TICK.0);
        let result = if device == self.slot(io.member).device || self.stale_io_to_newcomer {
            self.perform(&io)
        } else {
            // Sent to a device that has since been replaced: it is gone.
            Err(IoFailed::Gone)
        };
        self.engine.handle_completion(io.id, result, self.now);
        self.record();
        self.collect();
        true
    }

    fn perform(&mut self, io: &MemberIo) -> Result<(), IoFailed> {
        let n = self.members.len();
        let member = match io.member.index().checked_sub(n) {
            Some(i) => &mut self.other_slots[i],
            None => &mut self.members[io.member.index()],
        };
        if member.health == SimMemberHealth::Dead {
            return Err(IoFailed::Gone);
        }
        let at = usize::try_from(io.sector * SECTOR_BYTES).expect("fits memory");
        let range = io.sector..io.sector + io.buf.len as u64 / SECTOR_BYTES;
        let data = io.area == Area::Data;
        let bad = data && member.read_fails(&range);
        let unreadable = bad || (io.area == Area::Log && member.ring_unreadable);
        let write_fails = data
            && member
                .write_error_ranges
                .iter()
                .any(|b| b.start < range.end && range.start < b.end);
        let store = member.store(io.area);
        if !data && store.len() < at + io.buf.len {
            store.resize(at + io.buf.len, 0);
        }
        let bufs = self.engine.buffers_mut();
        match io.kind {
            IoKind::Read => {
                if unreadable {
                    return Err(IoFailed::Medium);
                }
                bufs.slice_mut(io.buf)
                    .copy_from_slice(&store[at..at + io.buf.len]);
                if data {
                    member.reads += 1;
                }
            }
            IoKind::Write | IoKind::WriteFua => {
                if write_fails {
                    return Err(IoFailed::Medium);
                }
                let new = bufs.slice(io.buf);
                // What a power cut restores, for a write it may undo.
                let undo = (io.kind == IoKind::Write).then(|| store[at..at + new.len()].to_vec());
                store[at..at + new.len()].copy_from_slice(new);
                member.completed_writes += 1;
                if let Some(old) = undo {
                    let seq = member.completed_writes;
                    member.unflushed.push(Unflushed {
                        area: io.area,
                        at,
                        old,
                        seq,
                        healed: bad,
                    });
                } else {
                    // Durable as it completes: a power cut that undoes an earlier
                    // write under it must leave this one's bytes where they overlap.
                    for u in member.unflushed.iter_mut().filter(|u| u.area == io.area) {
                        let from = u.at.max(at);
                        let to = (u.at + u.old.len()).min(at + new.len());
                        if from < to {
                            u.old[from - u.at..to - u.at].copy_from_slice(&new[from - at..to - at]);
                        }
                    }
                }
                if data {
                    member.remap(&range);
                }
            }
            // A flush makes durable what had completed when it was sent: a write
            // completing while it is out may still be lost.
            IoKind::Flush => {
                let covers = self.flush_covers.remove(&io.id.0).unwrap_or(u64::MAX);
                member.unflushed.retain(|u| u.seq > covers);
            }
        }
        Ok(())
    }

    /// Runs until no member I/O is in flight and no client request waits; returns the
    /// replies gathered. A sync may still be running (see [`SimArray::run_sync`]).
    pub fn run(&mut self) -> Vec<Reply> {
        self.collect();
        while !self.in_flight.is_empty() || !self.engine.clients_idle() {
            if !self.step() {
                break;
            }
        }
        self.replies.drain(..).collect()
    }

    /// Lets `span` of simulated time pass: every I/O in flight completes and the
    /// engine's timers due meanwhile run (a quiet bitmap chunk gets cleared).
    pub fn pass_time(&mut self, span: Nanos) {
        let until = Nanos(self.now.0.saturating_add(span.0));
        loop {
            self.collect();
            if !self.in_flight.is_empty() {
                self.step();
                continue;
            }
            match self.engine.poll_timeout() {
                Some(at) if at <= until => {
                    self.now = Nanos(self.now.0.max(at.0));
                    self.engine.handle_timeout(self.now);
                }
                _ => break,
            }
        }
        self.now = Nanos(self.now.0.max(until.0));
        self.engine.handle_timeout(self.now);
        self.collect();
    }

    /// Runs until the running sync (if any) ends; returns the replies gathered.
    pub fn run_sync(&mut self) -> Vec<Reply> {
        while self.engine.sync_progress().is_some() || !self.in_flight.is_empty() {
            if !self.step() {
                break;
            }
        }
        self.replies.drain(..).collect()
    }

    /// The engine's events since the last call.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Reads synchronously (runs every client request in flight to completion).
    pub fn read(&mut self, sector: u64, sectors: u64) -> Result<Vec<u8>, EngineError> {
        let (id, buf) = self.start_read(sector, sectors);
        let result = self.finish(id);
        let data = self.engine.buffers().get(buf).to_vec();
        self.engine.buffers_mut().free(buf);
        result.map(|()| data)
    }

    /// Writes synchronously.
    pub fn write(&mut self, sector: u64, data: &[u8]) -> Result<(), EngineError> {
        let (id, buf) = self.start_write(sector, data);
        let result = self.finish(id);
        self.engine.buffers_mut().free(buf);
        result
    }

    /// Flushes synchronously.
    pub fn flush(&mut self) -> Result<(), EngineError> {
        let id = self.start_flush();
        self.finish(id)
    }

    /// A checkpoint (a flush that also writes the checksum tables), synchronously.
    pub fn checkpoint(&mut self) -> Result<(), EngineError> {
        let id = self.submit(RequestKind::Checkpoint, 0, 0, None);
        self.finish(id)
    }

    fn finish(&mut self, id: RequestId) -> Result<(), EngineError> {
        let replies = self.run();
        let mine = replies
            .iter()
            .find(|r| r.id == id)
            .expect("request replied");
        assert!(
            replies.iter().all(|r| r.id == id),
            "synchronous calls run alone"
        );
        mine.result.clone()
    }

    /// The member in driver slot `slot`.
    pub fn slot(&self, slot: MemberIdx) -> &SimMember {
        let n = self.members.len();
        match slot.index().checked_sub(n) {
            Some(i) => &self.other_slots[i],
            None => &self.members[slot.index()],
        }
    }

    /// The member in driver slot `slot`, to change.
    pub fn slot_mut(&mut self, slot: MemberIdx) -> &mut SimMember {
        let n = self.members.len();
        match slot.index().checked_sub(n) {
            Some(i) => &mut self.other_slots[i],
            None => &mut self.members[slot.index()],
        }
    }

    /// The device serving `role` now.
    pub fn role_device(&self, role: MemberIdx) -> &SimMember {
        self.slot(self.engine.device_slot(role))
    }

    /// Puts a new device full of garbage in the replacement slot of `role` and has
    /// the engine build it as the role's replacement; the caller starts the recover.
    pub fn start_replacement(&mut self, role: MemberIdx) -> Result<(), SyncError> {
        let slot = self.engine.replacement_slot(role);
        let mut garbage = vec![0; self.members[0].data.len()];
        self.rng.fill(&mut garbage);
        let m = self.slot_mut(slot);
        // I/O still in flight to whatever was there fails as gone.
        m.device += 1;
        m.health = SimMemberHealth::Healthy;
        m.bad_ranges.clear();
        m.write_error_ranges.clear();
        m.unflushed.clear();
        m.data = garbage;
        // As the driver does for every device joining: its ring is wiped.
        m.log.fill(0);
        self.engine.start_replacement(role)?;
        self.unknown_table(slot);
        self.give_log(slot);
        Ok(())
    }

    /// A device joining the array gets an empty bad block log, when devices have them.
    fn give_log(&mut self, slot: MemberIdx) {
        if let Some(capacity) = self.bad_block_logs {
            self.engine
                .set_bad_block_log(slot, crate::BadBlocks::new(), capacity);
        }
    }

    /// Takes a member out: its I/Os fail from now on as from a vanished device, and
    /// the engine learns of it from the first one.
    pub fn kill_member(&mut self, member: MemberIdx) {
        self.role_device_mut(member).health = SimMemberHealth::Dead;
    }

    /// The device serving `role` now, to change (a replacement that took the role
    /// over lives in the role's other slot).
    pub fn role_device_mut(&mut self, role: MemberIdx) -> &mut SimMember {
        let slot = self.engine.device_slot(role);
        self.slot_mut(slot)
    }

    /// Puts a member back in service (the old device returning, or with `replace`, a
    /// new one full of garbage) and tells the engine to rebuild it; the caller starts
    /// the recover.
    pub fn return_member(&mut self, member: MemberIdx, replace: bool) -> Result<(), SyncError> {
        if self.engine.member_states()[member.index()] == MemberState::Active {
            // The engine has not tripped over the dead member yet: an operator
            // removes it first.
            self.engine.fail_member(member);
        }
        let m = self.role_device_mut(member);
        m.health = SimMemberHealth::Healthy;
        m.bad_ranges.clear();
        m.write_error_ranges.clear();
        m.unflushed.clear();
        // As the driver does for every device joining: its ring is wiped.
        m.log.fill(0);
        if replace {
            m.device += 1;
            let mut garbage = std::mem::take(&mut m.data);
            self.rng.fill(&mut garbage);
            self.role_device_mut(member).data = garbage;
            self.engine.replace_member(member)?;
            let slot = self.engine.device_slot(member);
            self.unknown_table(slot);
            self.give_log(slot);
            return Ok(());
        }
        self.engine.mark_rebuilding(member)
    }

    /// Makes reads of member sectors `range` of `member` fail until they are written.
    pub fn add_bad_range(&mut self, member: MemberIdx, range: Range<u64>) {
        self.role_device_mut(member).bad_ranges.push(range);
    }

    /// Flips one bit of a member's data behind the engine's back.
    pub fn flip_bit(&mut self, member: MemberIdx, byte: usize, bit: u8) {
        self.role_device_mut(member).data[byte] ^= 1 << (bit % 8);
    }

    /// The member I/Os issued and not completed yet.
    pub fn in_flight(&self) -> impl Iterator<Item = &MemberIo> {
        self.in_flight.iter().map(|(io, _, _)| io)
    }

    /// Power fails with I/Os in flight: they never reach their members (a power cut
    /// between two steps of the engine's protocol), then as [`SimArray::power_cut`].
    pub fn power_cut_now(&mut self) {
        self.power_cut_now_with(|_| {});
    }

    /// [`SimArray::power_cut_now`], with `restart` run on the new engine as in
    /// [`SimArray::power_cut_with`].
    pub fn power_cut_now_with(&mut self, restart: impl FnOnce(&mut SimArray)) {
        self.in_flight.clear();
        self.flush_covers.clear();
        self.power_cut_with(restart);
    }

    /// [`SimArray::power_cut_now`], where the superblocks had recorded the running
    /// recover's progress ([`Engine::set_recovery_recorded`]): members being rebuilt
    /// stay so, and the recover goes on from what was recorded, as a driver resumes it
    /// at open.
    pub fn power_cut_now_resuming(&mut self) {
        self.power_cut_now_resuming_with(|_| {});
    }

    /// [`SimArray::power_cut_now_resuming`], with `restart` run on the new engine as
    /// in [`SimArray::power_cut_with`].
    pub fn power_cut_now_resuming_with(&mut self, restart: impl FnOnce(&mut SimArray)) {
        self.in_flight.clear();
        self.flush_covers.clear();
        self.cut_power(restart, true);
    }

    /// Power fails with nothing in flight: each write still in a member's volatile
    /// cache is lost or kept at random, and the engine starts over with the members
    /// it had (its memory is gone). The caller decides what to resync.
    pub fn power_cut(&mut self) {
        self.power_cut_with(|_| {});
    }

    /// [`SimArray::power_cut`], with `restart` run on the new engine before it reads
    /// anything, as a driver sets an array up at open (the write-intent bitmap back
    /// from a member...). In integrity mode the tables then come back from the
    /// members' areas and are forgotten where the bitmap says writes may have been
    /// cut off (everywhere without one), and only then does the stripe log replay.
    pub fn power_cut_with(&mut self, restart: impl FnOnce(&mut SimArray)) {
        self.cut_power(restart, false);
    }

    /// Every device's stripe-log ring as a build before the superblock stamp wrote
    /// it: its entries and markers say nothing of stamping, so superblocks without
    /// the stamp tell nothing (see `Engine::superblocks_unstamped`).
    pub fn rings_from_an_older_build(&mut self) {
        for member in self.members.iter_mut().chain(&mut self.other_slots) {
            crate::ppl::unstamp_ring(&mut member.log);
        }
    }

    /// [`SimArray::power_cut_with`], after which something else runs the array and
    /// stops it cleanly (`restart` plays it on the members): the open finds superblocks
    /// that say so, and owes no resync.
    pub fn power_cut_then_clean_open_with(&mut self, restart: impl FnOnce(&mut SimArray)) {
        self.clean_open = true;
        self.cut_power(restart, false);
    }

    /// The power cut; with `resume`, members being rebuilt stay so, replacements being
    /// built stay too, and the recover resumes from what the superblocks recorded.
    fn cut_power(&mut self, restart: impl FnOnce(&mut SimArray), resume: bool) {
        assert!(
            self.in_flight.is_empty(),
            "power cuts happen between batches"
        );
        for m in 0..2 * self.members.len() {
            let slot = MemberIdx(u16::try_from(m).expect("few members"));
            let unflushed = std::mem::take(&mut self.slot_mut(slot).unflushed);
            for u in unflushed.into_iter().rev() {
                if self.rng.below(2) == 0 {
                    let store = self.slot_mut(slot).store(u.area);
                    store[u.at..u.at + u.old.len()].copy_from_slice(&u.old);
                }
            }
        }
        // Replacements being built stay with `resume` (else they are forgotten), and go
        // on from their checkpoints as the driver has them after an unclean stop (see
        // `Engine::start_recover_after_unclean_stop`): a write not yet flushed may
        // have reached the member or its replacement and not the other.
        let replaced: Vec<(MemberIdx, u64)> = (0..self.members.len())
            .map(|r| MemberIdx(u16::try_from(r).expect("few members")))
            .filter(|&role| resume && self.engine.is_replacing(role))
            .map(|role| (role, self.engine.recovery_recorded(role)))
            .collect();
        // As assembly does after a restart: the device that serves a role (a
        // replacement that took it over) is found in the role's first slot.
        for r in 0..self.members.len() {
            let role = MemberIdx(u16::try_from(r).expect("few members"));
            if self.engine.device_slot(role) != role {
                std::mem::swap(&mut self.members[r], &mut self.other_slots[r]);
            }
        }
        // Each device's bad block log, as last recorded, comes back with it.
        let logs: Vec<(crate::BadBlocks, usize)> = (0..self.members.len())
            .map(|r| {
                let slot = self
                    .engine
                    .device_slot(MemberIdx(u16::try_from(r).expect("few")));
                (
                    self.engine.durable_bad_blocks(slot),
                    self.engine.bad_block_log_capacity(slot),
                )
            })
            .collect();
        let before = self.engine.member_states().to_vec();
        let rebuilding: Vec<MemberIdx> = (0..before.len())
            .filter(|&m| resume && before[m] == MemberState::Rebuilding)
            .map(|m| MemberIdx(u16::try_from(m).expect("few members")))
            .collect();
        // What the superblocks record of each, which the recover resumes from.
        let recorded: Vec<u64> = rebuilding
            .iter()
            .map(|&m| self.engine.recovery_recorded(m))
            .collect();
        if !self.engine.log_recovering() {
            // Recorded before any reply (what tests do to the engine directly too).
            self.recorded_states = before.clone();
        }
        let states: Vec<MemberState> = before
            .iter()
            .zip(&self.recorded_states)
            .map(|(s, recorded)| match (s, recorded) {
                (MemberState::Active, _) => MemberState::Active,
                // Failed during the stripe log's recovery and not recorded yet: the
                // superblocks still say it serves, and it comes back so.
                (MemberState::Failed, MemberState::Active) => MemberState::Active,
                _ => MemberState::Failed,
            })
            .collect();
        self.recorded_states = states.clone();
        let config = self.engine.config();
        self.engine = Engine::new(*self.engine.geometry(), states);
        for (r, (list, capacity)) in logs.into_iter().enumerate() {
            let slot = MemberIdx(u16::try_from(r).expect("few members"));
            self.engine.set_bad_block_log(slot, list, capacity);
        }
        self.replies.clear();
        for (&m, &unit) in rebuilding.iter().zip(&recorded) {
            self.engine
                .mark_rebuilding(m)
                .expect("a member rebuilding before the cut");
            self.engine.resume_rebuilding(m, unit);
        }
        // The array comes back dirty: its resync is owed until one completes (unless
        // what ran it since stopped it cleanly).
        if !std::mem::take(&mut self.clean_open) {
            self.engine.owe_resync();
        }
        restart(self);
        // What the restart found (a member it failed) is what the open records.
        self.recorded_states = self.engine.member_states().to_vec();
        if self.integrity {
            let tables = self.tables_from_areas();
            self.engine.enable_integrity(tables, true);
            self.engine.forget_checksums_where_dirty();
        }
        for &(role, _) in &replaced {
            self.engine
                .start_replacement(role)
                .expect("a replacement being built before the cut");
            // As the driver opens it: its checksums are learned again as it is copied.
            let slot = self.engine.replacement_slot(role);
            self.unknown_table(slot);
            self.give_log(slot);
        }
        self.engine.set_config(config);
        let from = recorded
            .iter()
            .chain(replaced.iter().map(|(_, unit)| unit))
            .min();
        if let Some(&from) = from {
            let started = if replaced.is_empty() {
                self.engine.start_sync(crate::SyncKind::Recover, from)
            } else {
                self.engine.start_recover_after_unclean_stop(from)
            };
            started.expect("the recover resumes");
        }
    }
}
