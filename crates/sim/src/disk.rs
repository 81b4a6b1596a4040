//! One simulated disk drive, sans-I/O: commands in with [`Disk::submit`], time in with
//! [`Disk::handle_timeout`], completions out with [`Disk::poll_done`], and the next
//! instant it needs the clock at from [`Disk::poll_timeout`] — the engine's own shape,
//! so a driver runs both the same way.
//!
//! Inside: a tagged command queue (FIFO or shortest-positioning-time-first), one
//! processor that serves one command at a time (command overhead, then the buffer or
//! the media), the drive's buffer with read-ahead and optional write-back, and the
//! drive's link to the host, which carries one transfer at a time (so two commands'
//! data contend for it). A read's data crosses the link after it is all in the
//! buffer, a write's before it goes to the media (store and forward).

use std::collections::{BTreeSet, VecDeque};

use xraid_engine::Nanos;

use crate::buffer::{DriveBuffer, Lookup};
use crate::geometry::Loc;
use crate::mechanics::{Dir, HeadPos};
use crate::params::{DiskModel, Scheduler};
use crate::ssd::SsdStats;

/// What a command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskOp {
    Read,
    Write,
    /// Completes when every write the drive acknowledged is on the media.
    Flush,
}

/// One command from the host; `tag` comes back in its [`Completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskRequest {
    pub tag: u64,
    pub op: DiskOp,
    pub lba: u64,
    pub sectors: u64,
}

/// A command finished at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub tag: u64,
    pub at: Nanos,
}

/// Counters of one drive; every figure is simulated time or a count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub sectors_read: u64,
    pub sectors_written: u64,
    /// Reads served from the buffer without waiting for the media.
    pub buffer_hits: u64,
    /// Reads that waited for the read-ahead stream.
    pub stream_hits: u64,
    /// Time the drive's processor or arm was busy with commands.
    pub busy: Nanos,
    /// Seeks (moves to another cylinder before a media transfer) and their time, write
    /// settling included; head switches and rotation are not in it.
    pub seeks: u64,
    pub seek_time: Nanos,
    /// An SSD's flash side (None for a disk); its `busy` is then the busiest part's.
    pub ssd: Option<SsdStats>,
}

#[derive(Debug, Clone, Copy)]
struct Queued {
    /// None: a write-back destage the drive does on its own.
    tag: Option<u64>,
    op: DiskOp,
    lba: u64,
    sectors: u64,
    destage_seq: u64,
    /// Where `lba` lies and its angular slot, found once at arrival: the scheduler
    /// looks at each queued command many times.
    loc: Loc,
    slot: u32,
    /// When a write's data is in the drive (on a string, the controller sends it).
    data_at: Nanos,
}

/// A simulated drive.
#[derive(Debug, Clone)]
pub struct Disk {
    model: DiskModel,
    head: HeadPos,
    /// The processor (and arm) is busy until then.
    free_at: Nanos,
    queue: VecDeque<Queued>,
    buffer: DriveBuffer,
    link_free: Nanos,
    /// Completions due, in the order they were decided.
    pending: Vec<Completion>,
    done: VecDeque<Completion>,
    dirty_bytes: u64,
    next_destage: u64,
    destaging: BTreeSet<u64>,
    flush_waiters: Vec<(u64, u64)>,
    stats: DiskStats,
    /// The drive's data crosses a string the driver models: no link time here.
    external_link: bool,
}

impl Disk {
    pub fn new(model: DiskModel) -> Disk {
        let buffer = DriveBuffer::new(model.cache_segments, model.segment_sectors);
        Disk {
            model,
            head: HeadPos::default(),
            free_at: Nanos(0),
            queue: VecDeque::new(),
            buffer,
            link_free: Nanos(0),
            pending: Vec::new(),
            done: VecDeque::new(),
            dirty_bytes: 0,
            next_destage: 0,
            destaging: BTreeSet::new(),
            flush_waiters: Vec::new(),
            stats: DiskStats::default(),
            external_link: false,
        }
    }

    pub fn model(&self) -> &DiskModel {
        &self.model
    }

    pub fn stats(&self) -> DiskStats {
        self.stats
    }

    /// Whether nothing is queued, in service or due.
    pub fn is_idle(&self, now: Nanos) -> bool {
        self.queue.is_empty()
            && self.pending.is_empty()
            && self.done.is_empty()
            && self.free_at <= now
    }

    /// Hands the drive's link to the caller: a read completes when its data is in the
    /// buffer and a write's data arrives when [`Disk::submit_with_data`] says, the
    /// caller timing the transfers on the string the drive shares.
    pub fn set_external_link(&mut self, on: bool) {
        self.external_link = on;
    }

    /// Takes a command at `now`. The caller keeps at most the model's queue depth of
    /// its own commands outstanding; the drive's own destages queue beside them.
    pub fn submit(&mut self, req: DiskRequest, now: Nanos) {
        self.submit_with_data(req, now, now);
    }

    /// [`Disk::submit`], a write's data reaching the drive at `data_at` (used with an
    /// external link only).
    pub fn submit_with_data(&mut self, req: DiskRequest, now: Nanos, data_at: Nanos) {
        assert!(
            req.op == DiskOp::Flush
                || (req.sectors > 0 && req.lba + req.sectors <= self.model.sectors()),
            "command beyond the disk"
        );
        if req.op == DiskOp::Flush {
            self.stats.flushes += 1;
            if self.destaging.is_empty() {
                let at = Nanos(now.0.max(self.free_at.0) + self.model.command_overhead.0);
                self.pending.push(Completion { tag: req.tag, at });
            } else {
                self.flush_waiters.push((req.tag, self.next_destage));
            }
        } else {
            let loc = self.model.mech.format.locate(req.lba);
            let slot = self
                .model
                .mech
                .format
                .slot(loc.zone, loc.cylinder, loc.head, loc.sector);
            self.queue.push_back(Queued {
                tag: Some(req.tag),
                op: req.op,
                lba: req.lba,
                sectors: req.sectors,
                destage_seq: 0,
                loc,
                slot,
                data_at,
            });
        }
        self.handle_timeout(now);
    }

    /// The next instant the drive has something to do.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let reply = self.pending.iter().map(|c| c.at).min();
        let start = (!self.queue.is_empty()).then_some(self.free_at);
        match (reply, start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Lets the drive act up to `now`: start queued commands, release completions due.
    pub fn handle_timeout(&mut self, now: Nanos) {
        while self.free_at <= now && !self.queue.is_empty() {
            let start = Nanos(now.0.max(self.free_at.0));
            let i = self.pick(start);
            let Some(q) = self.queue.remove(i) else {
                unreachable!("picked index is in the queue");
            };
            self.serve(q, start);
        }
        if self.pending.iter().any(|c| c.at <= now) {
            // Released in time order (ties in decision order) so a replay matches.
            let mut due: Vec<Completion> = Vec::new();
            self.pending.retain(|c| {
                if c.at <= now {
                    due.push(*c);
                    false
                } else {
                    true
                }
            });
            due.sort_by_key(|c| c.at);
            self.done.extend(due);
        }
    }

    pub fn poll_done(&mut self) -> Option<Completion> {
        self.done.pop_front()
    }

    /// Which queued command to serve next at `t`.
    fn pick(&mut self, t: Nanos) -> usize {
        match self.model.scheduler {
            Scheduler::Fifo => 0,
            Scheduler::Sptf => {
                let depth = (self.model.queue_depth as usize).max(1);
                let mech = &self.model.mech;
                let arm = self.buffer.arm_at(mech, t).unwrap_or(self.head);
                let after = Nanos(t.0 + self.model.command_overhead.0);
                let mut best = (u64::MAX, 0);
                for (i, q) in self.queue.iter().enumerate().take(depth) {
                    let dir = if q.op == DiskOp::Read {
                        Dir::Read
                    } else {
                        Dir::Write
                    };
                    let at = mech.arrival_at(arm, dir, q.loc, q.slot, after);
                    if at.0 < best.0 {
                        best = (at.0, i);
                    }
                }
                best.1
            }
        }
    }

    fn reply(&mut self, tag: Option<u64>, at: Nanos) {
        if let Some(tag) = tag {
            self.pending.push(Completion { tag, at });
        }
    }

    /// Serves one command starting at `t`.
    fn serve(&mut self, q: Queued, t: Nanos) {
        let bytes = q.sectors * 512;
        let t_cmd = Nanos(
            t.0 + if q.tag.is_some() {
                self.model.command_overhead.0
            } else {
                0
            },
        );
        match (q.op, q.tag) {
            (DiskOp::Read, _) => {
                self.stats.reads += 1;
                self.stats.sectors_read += q.sectors;
                let ra = self.model.read_ahead_sectors;
                let mech = &self.model.mech;
                let ready = match self.buffer.lookup(mech, q.lba, q.sectors, t_cmd, ra) {
                    Lookup::Hit => {
                        self.stats.buffer_hits += 1;
                        t_cmd
                    }
                    Lookup::Streaming(at) => {
                        self.stats.stream_hits += 1;
                        Nanos(at.0.max(t_cmd.0))
                    }
                    Lookup::Miss => {
                        if let Some(h) = self.buffer.stop_stream(mech, t_cmd) {
                            self.head = h;
                        }
                        let seek = mech.move_time(self.head, q.loc, Dir::Read);
                        if self.head.cylinder != q.loc.cylinder {
                            self.stats.seeks += 1;
                            self.stats.seek_time = Nanos(self.stats.seek_time.0 + seek.0);
                        }
                        let mech = &self.model.mech;
                        let end = mech.transfer(&mut self.head, Dir::Read, q.lba, q.sectors, t_cmd);
                        self.buffer
                            .insert(mech, q.lba, q.lba + q.sectors, end, self.head, ra);
                        end
                    }
                };
                self.set_free(t, ready);
                if self.external_link {
                    self.reply(q.tag, ready);
                } else {
                    let start = ready.max(self.link_free);
                    self.link_free = Nanos(start.0 + self.model.bus_time(bytes).0);
                    self.reply(q.tag, self.link_free);
                }
            }
            (DiskOp::Write, Some(tag)) => {
                self.stats.writes += 1;
                self.stats.sectors_written += q.sectors;
                let in_buffer = if self.external_link {
                    t_cmd.max(q.data_at)
                } else {
                    let start = t_cmd.max(self.link_free);
                    self.link_free = Nanos(start.0 + self.model.bus_time(bytes).0);
                    self.link_free
                };
                if self.model.write_back
                    && self.dirty_bytes + bytes <= self.model.write_buffer_bytes
                {
                    self.dirty_bytes += bytes;
                    self.destaging.insert(self.next_destage);
                    self.queue.push_back(Queued {
                        tag: None,
                        destage_seq: self.next_destage,
                        ..q
                    });
                    self.next_destage += 1;
                    self.set_free(t, in_buffer);
                    self.reply(Some(tag), in_buffer);
                } else {
                    let end = self.write_media(q, in_buffer);
                    self.set_free(t, end);
                    self.reply(Some(tag), end);
                }
            }
            (DiskOp::Write, None) => {
                let end = self.write_media(q, t);
                self.set_free(t, end);
                self.dirty_bytes -= bytes;
                self.destaging.remove(&q.destage_seq);
                let oldest = self.destaging.first().copied().unwrap_or(u64::MAX);
                let overhead = self.model.command_overhead;
                let mut ready = Vec::new();
                self.flush_waiters.retain(|&(tag, mark)| {
                    let done = oldest >= mark;
                    if done {
                        ready.push(tag);
                    }
                    !done
                });
                for tag in ready {
                    self.reply(Some(tag), Nanos(end.0 + overhead.0));
                }
            }
            (DiskOp::Flush, _) => unreachable!("flushes never queue"),
        }
    }

    fn write_media(&mut self, q: Queued, t: Nanos) -> Nanos {
        let mech = &self.model.mech;
        if let Some(h) = self.buffer.stop_stream(mech, t) {
            self.head = h;
        }
        if self.head.cylinder != q.loc.cylinder {
            let seek = mech.move_time(self.head, q.loc, Dir::Write);
            self.stats.seeks += 1;
            self.stats.seek_time = Nanos(self.stats.seek_time.0 + seek.0);
        }
        let mech = &self.model.mech;
        mech.transfer(&mut self.head, Dir::Write, q.lba, q.sectors, t)
    }

    fn set_free(&mut self, start: Nanos, free: Nanos) {
        self.stats.busy = Nanos(self.stats.busy.0 + (free.0 - start.0));
        self.free_at = free;
    }
}
