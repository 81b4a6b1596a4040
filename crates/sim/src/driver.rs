//! The simulated driver: a discrete-event loop that runs the real array engine
//! ([`Engine`]) against simulated [`Disk`]s in simulated time, under a workload in
//! fio's terms, deterministic for a seed.
//!
//! The loop is the real driver's, with the OS taken out: client requests go in through
//! `handle_request`, member I/Os come out of `poll_member_io` and go to the disks'
//! tagged queues (held back while a disk's queue is full), disk completions go back
//! through `handle_completion`, replies come out of `poll_reply`. The clock jumps from
//! one event to the next (the earliest of every disk's and the engine's next instant);
//! events at the same instant are taken disk by disk in index order, so a run depends
//! on nothing but its configuration and seed. Disks hold no data: buffers are the
//! engine's, lent and returned, and their bytes are whatever they were.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use xraid_engine::{
    Area, BufId, Engine, EngineConfig, EngineError, Event, IoId, IoKind, MemberIdx, MemberState,
    Nanos, Request, RequestId, RequestKind, Stats, SyncError, SyncKind,
};
use xraid_layout::{Geometry, Layout, LayoutError, Level, SECTOR_BYTES};

use crate::controller::{
    Cache, ControllerParams, ControllerStats, Elevator, Link, LinkStats, Topology, TopologyError,
};
use crate::disk::{DiskOp, DiskRequest, DiskStats};
use crate::drive::{Drive, DriveModel};
use crate::params::DiskModel;
use crate::workload::{Generator, Workload, WorkloadError};

/// Where each member's data area starts on its disk, in sectors: md's smallest data
/// offset for superblock 1.2 (1 MiB), leaving room for the superblock, the bitmap and
/// the stripe log before it, as on a real member.
pub const DATA_OFFSET_SECTORS: u64 = 2048;
/// Where the write-intent bitmap sits (md's internal bitmap: 4 KiB after the
/// superblock at 4 KiB).
const BITMAP_OFFSET_SECTORS: u64 = 16;
/// Where the stripe log ring sits, between the bitmap and the data.
const LOG_OFFSET_SECTORS: u64 = 1024;

/// Bits of a request id that name its slot among those in flight.
const SLOT_BITS: u32 = 16;
/// Most requests a run completes: every latency is kept until the end for exact
/// percentiles, so a bound keeps a long `--runtime` run's memory bounded (80 MB).
pub const MAX_RUN_REQUESTS: u64 = 10_000_000;

/// Steps of a run between two reports of its progress (a report costs a few
/// divisions; a step, a few hundred nanoseconds of host time).
const PROGRESS_EVERY: u64 = 1 << 10;

/// The array to build on the disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArraySpec {
    pub level: Level,
    pub layout: Layout,
    pub disks: u16,
    pub chunk_sectors: u32,
}

/// Latency figures of one kind of request, in simulated time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    pub min: Nanos,
    pub mean: Nanos,
    pub p50: Nanos,
    pub p99: Nanos,
    pub max: Nanos,
}

impl Latency {
    /// The figures of `samples` (sorted here); all zero for none.
    fn of(samples: &mut [u64]) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let n = samples.len();
        let pct = |p: usize| Nanos(samples[(n - 1) * p / 100]);
        let sum: u128 = samples.iter().map(|&v| u128::from(v)).sum();
        Latency {
            min: Nanos(samples[0]),
            mean: Nanos((sum / n as u128) as u64),
            p50: pct(50),
            p99: pct(99),
            max: Nanos(samples[n - 1]),
        }
    }
}

/// What a run measured; all in simulated time. Equal for equal inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    /// From the first request to the last reply.
    pub span: Nanos,
    /// From the run's start to its end: the span, or longer when a rebuild went on
    /// after the workload (what components' utilisation is counted over).
    pub elapsed: Nanos,
    /// The member rebuilt beside the workload ([`SimArray::start_rebuild`]).
    pub rebuild: Option<RebuildResult>,
    /// Every request's latency, and reads' and writes' apart.
    pub latency: Latency,
    pub read_latency: Latency,
    pub write_latency: Latency,
    /// The engine's counters (all zero for a plain disk).
    pub engine: Stats,
    pub disks: Vec<DiskStats>,
    /// Each string's, controller's and host bus's counters (empty without a topology).
    pub strings: Vec<LinkStats>,
    pub controllers: Vec<ControllerStats>,
    pub buses: Vec<LinkStats>,
    /// The run stopped at [`MAX_RUN_REQUESTS`] rather than at its own end.
    pub capped: bool,
    /// A digest of every reply's id and time: equal digests, equal runs.
    pub digest: u64,
}

/// A member rebuilt in a run: one member failed and a blank drive of the same model
/// in its place rebuilt by the engine's recover, from redundancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebuildResult {
    /// The role rebuilt.
    pub role: u16,
    /// Bytes of the member's data area, all of which the rebuild writes.
    pub member_bytes: u64,
    /// Simulated time from its start to its end (flushes included).
    pub duration: Nanos,
    /// Member bytes rebuilt when the workload's last request was answered (all of
    /// them when the rebuild ended first).
    pub done_with_workload: u64,
    /// Sync units it could not rebuild (none unless redundancy is gone).
    pub unrecoverable: u64,
}

impl RebuildResult {
    /// Member bytes rebuilt per simulated second.
    pub fn bytes_per_sec(&self) -> f64 {
        if self.duration.0 == 0 {
            return 0.0;
        }
        self.member_bytes as f64 * 1e9 / self.duration.0 as f64
    }
}

/// A rebuild under way in a run.
#[derive(Debug, Clone, Copy)]
struct RebuildTrack {
    role: u16,
    started: Nanos,
    /// When the engine said it ended, and the units it could not rebuild.
    finished: Option<(Nanos, u64)>,
    /// The engine's recover has begun (with the run's first requests).
    sync_started: bool,
}

/// Why a run could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The array's shape is refused.
    #[error("array: {0}")]
    Layout(#[from] LayoutError),
    /// The disks are smaller than the array's metadata area.
    #[error("a disk of {sectors} sectors has no room for data after the {DATA_OFFSET_SECTORS}-sector metadata area: use a larger disk")]
    DiskTooSmall { sectors: u64 },
    /// The workload is refused.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The array's member count and the disks given differ.
    #[error("the array has {members} members but {disks} disks were given")]
    DiskCount { members: u16, disks: usize },
    /// The strings, controllers and buses are refused.
    #[error("topology: {0}")]
    Topology(#[from] TopologyError),
    /// A rebuild was asked of a target that cannot do one.
    #[error("cannot rebuild: {0}")]
    Rebuild(String),
}

/// A controller in a run: its policies, its data path, its cache, its counters.
#[derive(Debug, Clone)]
struct Ctl {
    p: ControllerParams,
    link: Link,
    cache: Cache,
    stats: ControllerStats,
}

/// Something the topology does at a time of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A read's data (read-ahead included) has crossed the string to the controller.
    AtController {
        disk: usize,
        tag: u64,
        lba: u64,
        asked: u64,
        fetched: u64,
    },
    /// A command's reply reaches the host.
    Reply { tag: u64 },
}

/// A read a controller sent to a disk: what was asked and what it fetched.
#[derive(Debug, Clone, Copy)]
struct Fetch {
    lba: u64,
    asked: u64,
    fetched: u64,
}

/// Simulated disks under a workload: an array run by the engine, or one plain disk.
#[derive(Debug)]
pub struct SimArray {
    /// None: one plain disk, requests go to it as they are (block addresses from 0).
    engine: Option<Engine>,
    disks: Vec<Drive>,
    /// Member I/Os waiting for room in each disk's tagged queue.
    waiting: Vec<VecDeque<DiskRequest>>,
    outstanding: Vec<u32>,
    depth: Vec<u32>,
    now: Nanos,
    topo: Topology,
    strings: Vec<Link>,
    ctls: Vec<Ctl>,
    buses: Vec<Link>,
    elevators: Vec<Elevator>,
    /// Reads each disk is doing for its controller, by tag.
    fetches: Vec<HashMap<u64, Fetch>>,
    /// Topology events by time, then by the order they were decided.
    events: BinaryHeap<Reverse<(Nanos, u64, Ev)>>,
    event_seq: u64,
    /// Each disk's next instant ([`Disk::poll_timeout`]), kept up to date whenever the
    /// disk is handed a command or the time, so a step looks only at disks with
    /// something due instead of asking every disk.
    wake: Vec<Option<Nanos>>,
    /// Disks handed a command since the last step: a submission may finish a command
    /// at once, and the step collects it.
    submitted: Vec<bool>,
    rebuild: Option<RebuildTrack>,
}

type Replies = Vec<(RequestId, Result<(), EngineError>)>;

impl SimArray {
    /// Builds the array on one disk of `model` per member, all active.
    pub fn new(spec: ArraySpec, model: &DiskModel) -> Result<SimArray, RunError> {
        SimArray::with_drives(spec, vec![model.clone().into(); usize::from(spec.disks)])
    }

    /// Builds the array on the given disks, one per member in role order; members are
    /// as large as the smallest disk.
    pub fn with_disks(spec: ArraySpec, models: Vec<DiskModel>) -> Result<SimArray, RunError> {
        SimArray::with_drives(spec, models.into_iter().map(DriveModel::from).collect())
    }

    /// Builds the array on the given drives (disks, SSDs or both), one per member in
    /// role order; members are as large as the smallest drive.
    pub fn with_drives(spec: ArraySpec, models: Vec<DriveModel>) -> Result<SimArray, RunError> {
        if models.len() != usize::from(spec.disks) {
            return Err(RunError::DiskCount {
                members: spec.disks,
                disks: models.len(),
            });
        }
        let sectors = models.iter().map(DriveModel::sectors).min().unwrap_or(0);
        if sectors <= DATA_OFFSET_SECTORS {
            return Err(RunError::DiskTooSmall { sectors });
        }
        let geo = Geometry::new(
            spec.level,
            spec.layout,
            spec.disks,
            spec.chunk_sectors,
            sectors - DATA_OFFSET_SECTORS,
        )?;
        let n = usize::from(spec.disks);
        let mut engine = Engine::new(geo, vec![MemberState::Active; n]);
        // Simulated disks never hang, and the engine's stall check scans every I/O in
        // flight each time it is asked for its next timer, which in a simulation is
        // once per event (a fifth of the host time of a deep random run).
        engine.set_config(EngineConfig {
            stall_timeout: Nanos(0),
            ..engine.config()
        });
        Ok(SimArray::build(Some(engine), models))
    }

    /// One plain disk: each request goes to the disk as it is, without an array.
    pub fn single(model: DiskModel) -> SimArray {
        SimArray::single_drive(model.into())
    }

    /// One plain drive, disk or SSD.
    pub fn single_drive(model: DriveModel) -> SimArray {
        SimArray::build(None, vec![model])
    }

    fn build(engine: Option<Engine>, models: Vec<DriveModel>) -> SimArray {
        let n = models.len();
        SimArray {
            engine,
            depth: models.iter().map(|m| m.queue_depth().max(1)).collect(),
            disks: models.into_iter().map(Drive::new).collect(),
            waiting: vec![VecDeque::new(); n],
            outstanding: vec![0; n],
            now: Nanos(0),
            topo: Topology {
                disk_string: vec![None; n],
                ..Topology::default()
            },
            strings: Vec::new(),
            ctls: Vec::new(),
            buses: Vec::new(),
            elevators: vec![Elevator::default(); n],
            fetches: vec![HashMap::new(); n],
            events: BinaryHeap::new(),
            event_seq: 0,
            wake: vec![None; n],
            submitted: vec![false; n],
            rebuild: None,
        }
    }

    /// Fails member `role` and sets up the rebuild of a blank drive in its place, at a
    /// pace of `min_bytes_per_sec` per member while client requests are in flight and
    /// `max_bytes_per_sec` when none are (0: no cap) — `xraid serve`'s
    /// `--rebuild-min`/`--rebuild-max`. The next [`SimArray::run`] begins the rebuild
    /// with its first requests, goes on until the rebuild has ended, and reports it.
    /// Simulated drives hold no data, so the failed member's drive stands in for its
    /// blank replacement: the same model in the same place on its string.
    pub fn start_rebuild(
        &mut self,
        role: u16,
        min_bytes_per_sec: u64,
        max_bytes_per_sec: u64,
    ) -> Result<(), RunError> {
        let disks = self.disks.len();
        let Some(engine) = self.engine.as_mut() else {
            return Err(RunError::Rebuild(
                "a plain disk has no array to rebuild a member of".into(),
            ));
        };
        if usize::from(role) >= disks {
            return Err(RunError::Rebuild(format!(
                "the array has members 0 to {}, not {role}",
                disks - 1
            )));
        }
        if self.rebuild.is_some() || !engine.is_idle() {
            return Err(RunError::Rebuild(
                "a rebuild starts on an idle array, once".into(),
            ));
        }
        if engine.geometry().level() == Level::Raid0 {
            return Err(RunError::Rebuild(
                SyncError::NoRedundancy("rebuild").to_string(),
            ));
        }
        let member = MemberIdx(role);
        engine.fail_member(member);
        let refused = |e: SyncError| RunError::Rebuild(e.to_string());
        engine.mark_rebuilding(member).map_err(refused)?;
        engine.set_config(EngineConfig {
            sync_min_bytes_per_sec: min_bytes_per_sec,
            sync_max_bytes_per_sec: max_bytes_per_sec,
            ..engine.config()
        });
        engine.can_start_sync(SyncKind::Recover).map_err(refused)?;
        self.rebuild = Some(RebuildTrack {
            role,
            started: self.now,
            finished: None,
            sync_started: false,
        });
        Ok(())
    }

    /// Starts the recover [`SimArray::start_rebuild`] set up, once the run's first
    /// requests are in: begun before them, it would find the clients idle and launch
    /// a whole window of units at the idle pace, ahead of the workload's first request.
    fn start_rebuild_sync(&mut self, replies: &mut Replies) -> Result<(), RunError> {
        let Some(track) = self.rebuild.as_mut().filter(|r| !r.sync_started) else {
            return Ok(());
        };
        track.sync_started = true;
        track.started = self.now;
        if let Some(engine) = self.engine.as_mut() {
            engine
                .start_sync(SyncKind::Recover, 0)
                .map_err(|e| RunError::Rebuild(e.to_string()))?;
        }
        self.pump(replies);
        Ok(())
    }

    /// Whether a rebuild started and has not ended yet.
    fn rebuilding(&self) -> bool {
        self.rebuild.is_some_and(|r| r.finished.is_none())
    }

    /// Member bytes the running rebuild has done (all of them once it ended).
    fn rebuilt_bytes(&self) -> u64 {
        let Some(engine) = &self.engine else { return 0 };
        let member_bytes = engine.geometry().member_sectors() * SECTOR_BYTES;
        match (self.rebuild, engine.sync_progress()) {
            (Some(RebuildTrack { finished: None, .. }), Some(p)) if p.total_units > 0 => {
                let done = u128::from(p.done_below) * u128::from(member_bytes);
                (done / u128::from(p.total_units)) as u64
            }
            (Some(RebuildTrack { finished: None, .. }), _) => 0,
            _ => member_bytes,
        }
    }

    /// Takes the engine's events: the end of a rebuild is one.
    fn take_events(&mut self) {
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        while let Some(event) = engine.poll_event() {
            if let Event::SyncFinished {
                kind: SyncKind::Recover,
                unrecoverable,
                ..
            } = event
            {
                if let Some(r) = self.rebuild.as_mut().filter(|r| r.finished.is_none()) {
                    r.finished = Some((self.now, unrecoverable));
                }
            }
        }
    }

    /// Puts the disks on strings behind controllers on host buses (before a run).
    /// Disks the topology leaves off strings keep their own link to the host.
    pub fn set_topology(&mut self, topo: Topology) -> Result<(), RunError> {
        topo.check(self.disks.len())?;
        self.strings = topo
            .strings
            .iter()
            .map(|s| Link::new(Some(s.bytes_per_sec)))
            .collect();
        self.ctls = topo
            .controllers
            .iter()
            .map(|p| Ctl {
                link: Link::new(p.bytes_per_sec),
                cache: Cache::new(p.cache_sectors),
                stats: ControllerStats::default(),
                p: p.clone(),
            })
            .collect();
        self.buses = topo.buses.iter().map(|&b| Link::new(Some(b))).collect();
        for (d, s) in self.disks.iter_mut().zip(&topo.disk_string) {
            d.set_external_link(s.is_some());
        }
        self.topo = topo;
        Ok(())
    }

    /// The string and controller of disk `m`, when it is on a string.
    fn path(&self, m: usize) -> Option<(usize, usize)> {
        let s = self.topo.disk_string[m]?;
        Some((s, self.topo.strings[s].controller))
    }

    /// A string's rate for disk `m`'s data: the string's or the drive's, the slower.
    fn string_rate(&self, s: usize, m: usize) -> Option<u64> {
        let drive = self.disks[m].interface_bytes_per_sec();
        Some(self.topo.strings[s].bytes_per_sec.min(drive))
    }

    fn schedule(&mut self, at: Nanos, ev: Ev) {
        self.events.push(Reverse((at, self.event_seq, ev)));
        self.event_seq += 1;
    }

    /// Controller `c` sends `bytes` (and its reply) to the host from `at`: its
    /// overhead and data path, then its host bus, pipelined.
    fn send_to_host(&mut self, c: usize, tag: u64, bytes: u64, at: Nanos) {
        let ctl = &mut self.ctls[c];
        let dur = Nanos(ctl.p.overhead.0 + Link::duration(bytes, ctl.link.bytes_per_sec).0);
        let (start, mut end) = ctl.link.reserve(at, dur, bytes);
        if let Some(b) = ctl.p.bus {
            let bus = &mut self.buses[b];
            let dur = Link::duration(bytes, bus.bytes_per_sec);
            let (_, e) = bus.reserve(start, dur, bytes);
            end = end.max(e);
        }
        self.schedule(end, Ev::Reply { tag });
    }

    /// A command for disk `m` from the engine (or the workload): straight to the
    /// disk's queue, or through its controller, which may answer a read itself.
    fn enqueue(&mut self, m: usize, req: DiskRequest) {
        let Some((_, c)) = self.path(m) else {
            self.waiting[m].push_back(req);
            return;
        };
        let now = self.now;
        let ctl = &mut self.ctls[c];
        let (lba, n) = (req.lba, req.sectors);
        match req.op {
            DiskOp::Read => {
                ctl.stats.reads += 1;
                if ctl.p.search && ctl.cache.lookup(m, lba, n) {
                    ctl.stats.cache_hits += 1;
                    self.send_to_host(c, req.tag, n * SECTOR_BYTES, now);
                    return;
                }
                let p = &ctl.p;
                let end = self.disks[m].read_ahead_end(
                    lba,
                    n,
                    p.read_ahead_sectors,
                    p.read_ahead_across_head,
                    p.read_ahead_across_cylinder,
                );
                ctl.stats.read_ahead_sectors += end - lba - n;
                let fetch = Fetch {
                    lba,
                    asked: n,
                    fetched: end - lba,
                };
                self.fetches[m].insert(req.tag, fetch);
                self.waiting[m].push_back(DiskRequest {
                    sectors: end - lba,
                    ..req
                });
            }
            DiskOp::Write => {
                ctl.stats.writes += 1;
                if ctl.p.flush_on_write {
                    ctl.cache.clear();
                    ctl.stats.cache_flushes += 1;
                } else {
                    ctl.cache.invalidate(m, lba, n);
                }
                if ctl.p.save_writes {
                    ctl.cache.insert(m, lba, lba + n);
                }
                self.waiting[m].push_back(req);
            }
            DiskOp::Flush => self.waiting[m].push_back(req),
        }
    }

    /// Hands disk `m` its next waiting command: the first, or the elevator's choice
    /// behind a sorting controller; a write's data crosses the host bus, the
    /// controller and the string on the way.
    fn dispatch(&mut self, m: usize) -> bool {
        let Some((s, c)) = self.path(m) else {
            let Some(req) = self.waiting[m].pop_front() else {
                return false;
            };
            self.disks[m].submit(req, self.now);
            self.wake[m] = self.disks[m].poll_timeout();
            self.submitted[m] = true;
            return true;
        };
        let (sort_reads, sort_writes) = (self.ctls[c].p.sort_reads, self.ctls[c].p.sort_writes);
        let i = self.elevators[m].pick(self.waiting[m].make_contiguous(), sort_reads, sort_writes);
        let Some(req) = self.waiting[m].remove(i) else {
            return false;
        };
        let mut data_at = self.now;
        if req.op == DiskOp::Write {
            let bytes = req.sectors * SECTOR_BYTES;
            let mut start = self.now;
            if let Some(b) = self.ctls[c].p.bus {
                let bus = &mut self.buses[b];
                let (s0, e0) = bus.reserve(start, Link::duration(bytes, bus.bytes_per_sec), bytes);
                start = s0;
                data_at = data_at.max(e0);
            }
            let ctl = &mut self.ctls[c].link;
            let (s1, e1) = ctl.reserve(start, Link::duration(bytes, ctl.bytes_per_sec), bytes);
            data_at = data_at.max(e1);
            let rate = self.string_rate(s, m);
            let (_, e2) = self.strings[s].reserve(s1, Link::duration(bytes, rate), bytes);
            data_at = data_at.max(e2);
        }
        self.disks[m].submit_with_data(req, self.now, data_at);
        self.wake[m] = self.disks[m].poll_timeout();
        self.submitted[m] = true;
        true
    }

    /// A command of disk `m` is done at `at`.
    fn disk_done(&mut self, m: usize, tag: u64, at: Nanos, replies: &mut Replies) {
        self.outstanding[m] -= 1;
        let Some((s, c)) = self.path(m) else {
            self.complete(tag, at, replies);
            return;
        };
        match self.fetches[m].remove(&tag) {
            Some(f) => {
                let bytes = f.fetched * SECTOR_BYTES;
                let rate = self.string_rate(s, m);
                let (_, end) = self.strings[s].reserve(at, Link::duration(bytes, rate), bytes);
                let ev = Ev::AtController {
                    disk: m,
                    tag,
                    lba: f.lba,
                    asked: f.asked,
                    fetched: f.fetched,
                };
                self.schedule(end, ev);
            }
            None => self.send_to_host(c, tag, 0, at),
        }
    }

    /// The reply to `tag` reaches the host (the engine, or the workload) at `at`.
    fn complete(&mut self, tag: u64, at: Nanos, replies: &mut Replies) {
        match self.engine.as_mut() {
            Some(engine) => engine.handle_completion(IoId(tag), Ok(()), at),
            None => replies.push((RequestId(tag), Ok(()))),
        }
    }

    /// Handles the topology's events due by now.
    fn topology_events(&mut self, replies: &mut Replies) {
        while let Some(Reverse((at, _, ev))) = self.events.peek().copied() {
            if at > self.now {
                break;
            }
            self.events.pop();
            match ev {
                Ev::Reply { tag } => self.complete(tag, at, replies),
                Ev::AtController {
                    disk,
                    tag,
                    lba,
                    asked,
                    fetched,
                } => {
                    let Some((_, c)) = self.path(disk) else {
                        unreachable!("only disks on strings fetch for a controller");
                    };
                    let ctl = &mut self.ctls[c];
                    let from = if ctl.p.save_reads { lba } else { lba + asked };
                    ctl.cache.insert(disk, from, lba + fetched);
                    self.send_to_host(c, tag, asked * SECTOR_BYTES, at);
                }
            }
        }
    }

    /// The engine, for an array.
    pub fn engine(&self) -> Option<&Engine> {
        self.engine.as_ref()
    }

    pub fn disks(&self) -> &[Drive] {
        &self.disks
    }

    /// Sectors the workload can address: the array's, or the plain disk's.
    pub fn target_sectors(&self) -> u64 {
        match &self.engine {
            Some(e) => e.array_sectors(),
            None => self.disks[0].sectors(),
        }
    }

    /// Moves the engine's member I/Os to the disks and returns its replies.
    fn pump(&mut self, replies: &mut Replies) {
        while let Some(io) = self.engine.as_mut().and_then(Engine::poll_member_io) {
            let m = io.member.index();
            let base = match io.area {
                Area::Data => DATA_OFFSET_SECTORS,
                Area::Log => LOG_OFFSET_SECTORS,
                Area::Bitmap => BITMAP_OFFSET_SECTORS,
                // Simulated arrays run without integrity mode, so the engine sends
                // nothing here; were it on, the table would sit past the data.
                Area::Checksums => DATA_OFFSET_SECTORS,
            };
            let op = match io.kind {
                IoKind::Read => DiskOp::Read,
                // The simulated disks have no FUA, and their engine is told so
                // (`EngineConfig::fua_writes` stays off): none comes here.
                IoKind::Write | IoKind::WriteFua => DiskOp::Write,
                IoKind::Flush => DiskOp::Flush,
            };
            let req = DiskRequest {
                tag: io.id.0,
                op,
                lba: base + io.sector,
                sectors: io.buf.len as u64 / SECTOR_BYTES,
            };
            self.enqueue(m, req);
        }
        for m in 0..self.disks.len() {
            while self.outstanding[m] < self.depth[m] && self.dispatch(m) {
                self.outstanding[m] += 1;
            }
        }
        if let Some(engine) = self.engine.as_mut() {
            while let Some(reply) = engine.poll_reply() {
                replies.push((reply.id, reply.result));
            }
        }
        self.take_events();
    }

    /// Advances the clock to the next event and handles everything due then; false
    /// when nothing is left to happen.
    fn step(&mut self, replies: &mut Replies) -> bool {
        let next = self
            .wake
            .iter()
            .flatten()
            .copied()
            .chain(self.engine.as_ref().and_then(Engine::poll_timeout))
            .chain(self.events.peek().map(|Reverse((at, _, _))| *at))
            .min();
        let Some(next) = next else {
            return false;
        };
        self.now = self.now.max(next);
        for m in 0..self.disks.len() {
            // A disk with nothing due would do nothing when handed the time.
            let due = self.wake[m].is_some_and(|w| w <= self.now);
            if !due && !self.submitted[m] {
                continue;
            }
            self.submitted[m] = false;
            self.disks[m].handle_timeout(self.now);
            while let Some(c) = self.disks[m].poll_done() {
                self.disk_done(m, c.tag, c.at, replies);
            }
            self.wake[m] = self.disks[m].poll_timeout();
        }
        self.topology_events(replies);
        if let Some(engine) = self.engine.as_mut() {
            if engine.poll_timeout().is_some_and(|t| t <= self.now) {
                engine.handle_timeout(self.now);
            }
        }
        self.pump(replies);
        true
    }

    /// Hands one request to the engine, or to the plain disk.
    fn issue(&mut self, id: RequestId, read: bool, sector: u64, bs: u64) -> Option<BufId> {
        let sectors = bs / SECTOR_BYTES;
        match self.engine.as_mut() {
            Some(engine) => {
                // `bs` is at most MAX_BS (checked), so it fits a usize.
                let buf = engine.buffers_mut().alloc(bs as usize);
                let kind = if read {
                    RequestKind::Read
                } else {
                    RequestKind::Write
                };
                let req = Request {
                    id,
                    kind,
                    sector,
                    sectors,
                    buf: Some(buf),
                };
                engine.handle_request(req, self.now);
                Some(buf)
            }
            None => {
                let op = if read { DiskOp::Read } else { DiskOp::Write };
                let req = DiskRequest {
                    tag: id.0,
                    op,
                    lba: sector,
                    sectors,
                };
                self.enqueue(0, req);
                None
            }
        }
    }

    /// Runs `w` to its end.
    pub fn run(&mut self, w: &Workload) -> Result<RunResult, RunError> {
        self.run_with_progress(w, &mut |_| {})
    }

    /// Runs `w` to its end, telling `progress` now and then how far the run has got:
    /// the fraction (0 to 1) of what ends it — the workload's requests or simulated
    /// time, and the rebuild, whichever is further from its end — and 1 at the end.
    /// A run that takes long on the host (a whole large drive rebuilt, say) can show
    /// it; the run itself is the same with or without.
    pub fn run_with_progress(
        &mut self,
        w: &Workload,
        progress: &mut dyn FnMut(f64),
    ) -> Result<RunResult, RunError> {
        let region = w.check(self.target_sectors())?;
        let jobs = w.numjobs as usize;
        let mut gens: Vec<Generator> = (0..w.numjobs)
            .map(|j| Generator::new(w, region, j))
            .collect();
        // Requests in flight by slot; a request's id carries its slot in the low bits
        // so a reply finds its start without a search.
        let slots_total = jobs * w.iodepth;
        let mut slots: Vec<Option<InFlight>> = vec![None; slots_total];
        let mut free_slots: Vec<u64> = (0..slots_total as u64).rev().collect();
        let mut issued = vec![0u64; jobs];
        let mut in_flight = vec![0usize; jobs];
        let (mut all, mut reads, mut writes) = (Vec::new(), Vec::new(), Vec::new());
        let mut replies = Vec::new();
        let mut r = RunResult {
            requests: 0,
            reads: 0,
            writes: 0,
            bytes: 0,
            read_bytes: 0,
            write_bytes: 0,
            errors: 0,
            span: Nanos(0),
            elapsed: Nanos(0),
            rebuild: None,
            latency: Latency::default(),
            read_latency: Latency::default(),
            write_latency: Latency::default(),
            engine: Stats::default(),
            disks: Vec::new(),
            strings: Vec::new(),
            controllers: Vec::new(),
            buses: Vec::new(),
            capped: false,
            digest: 0xcbf2_9ce4_8422_2325,
        };
        let t0 = self.now;
        let stop_at = w.runtime.map(|d| Nanos(t0.0.saturating_add(d.0)));
        let mut total_issued = 0u64;
        let mut last_reply = t0;
        let mut done_with_workload = None;
        // Requests the run issues at most, all jobs together.
        let planned = w
            .requests
            .saturating_mul(u64::from(w.numjobs))
            .min(MAX_RUN_REQUESTS);
        let mut steps = 0u64;
        loop {
            steps += 1;
            if steps.is_multiple_of(PROGRESS_EVERY) {
                let by_requests = total_issued as f64 / planned.max(1) as f64;
                let workload = match stop_at {
                    _ if planned == 0 => 1.0,
                    Some(stop) => {
                        let by_time = (self.now.0 - t0.0) as f64 / (stop.0 - t0.0).max(1) as f64;
                        by_time.max(by_requests)
                    }
                    None => by_requests,
                };
                let rebuild = match &self.engine {
                    Some(engine) if self.rebuilding() => {
                        let member = engine.geometry().member_sectors() * SECTOR_BYTES;
                        self.rebuilt_bytes() as f64 / member.max(1) as f64
                    }
                    _ => 1.0,
                };
                progress(workload.min(rebuild).clamp(0.0, 1.0));
            }
            let in_time = stop_at.is_none_or(|s| self.now < s);
            r.capped |= in_time
                && total_issued >= MAX_RUN_REQUESTS
                && issued.iter().any(|&n| n < w.requests);
            if in_time && total_issued < MAX_RUN_REQUESTS {
                for j in 0..jobs {
                    while issued[j] < w.requests
                        && in_flight[j] < w.iodepth
                        && total_issued < MAX_RUN_REQUESTS
                    {
                        let (read, sector) = gens[j].next();
                        let Some(slot) = free_slots.pop() else {
                            unreachable!("fewer than numjobs x iodepth requests in flight");
                        };
                        let id = RequestId(total_issued << SLOT_BITS | slot);
                        let buf = self.issue(id, read, sector, w.bs);
                        slots[slot as usize] = Some(InFlight {
                            start: self.now,
                            read,
                            buf,
                            job: j,
                        });
                        issued[j] += 1;
                        in_flight[j] += 1;
                        total_issued += 1;
                        self.pump(&mut replies);
                    }
                }
            }
            self.start_rebuild_sync(&mut replies)?;
            let issuing = stop_at.is_none_or(|s| self.now < s)
                && total_issued < MAX_RUN_REQUESTS
                && issued.iter().any(|&n| n < w.requests);
            if !issuing && in_flight.iter().all(|&n| n == 0) {
                done_with_workload.get_or_insert_with(|| self.rebuilt_bytes());
                if !self.rebuilding() {
                    break;
                }
            }
            if replies.is_empty() && !self.step(&mut replies) {
                unreachable!("requests in flight or a rebuild running, but no event pending");
            }
            for (id, result) in replies.drain(..) {
                let slot = id.0 & ((1 << SLOT_BITS) - 1);
                free_slots.push(slot);
                let Some(f) = slots[slot as usize].take() else {
                    unreachable!("reply to a request not in flight");
                };
                if let (Some(buf), Some(engine)) = (f.buf, self.engine.as_mut()) {
                    engine.buffers_mut().free(buf);
                }
                let latency = self.now.0 - f.start.0;
                last_reply = self.now;
                all.push(latency);
                in_flight[f.job] -= 1;
                r.requests += 1;
                r.errors += u64::from(result.is_err());
                if f.read {
                    reads.push(latency);
                    r.reads += 1;
                    r.read_bytes += w.bs;
                } else {
                    writes.push(latency);
                    r.writes += 1;
                    r.write_bytes += w.bs;
                }
                r.bytes += w.bs;
                for v in [id.0, self.now.0] {
                    r.digest = (r.digest ^ v).wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
        progress(1.0);
        r.span = Nanos(last_reply.0 - t0.0);
        r.elapsed = Nanos(self.now.0 - t0.0);
        if let (Some(track), Some(engine)) = (self.rebuild.take(), &self.engine) {
            let (end, unrecoverable) = track.finished.unwrap_or((self.now, 0));
            r.rebuild = Some(RebuildResult {
                role: track.role,
                member_bytes: engine.geometry().member_sectors() * SECTOR_BYTES,
                duration: Nanos(end.0 - track.started.0),
                done_with_workload: done_with_workload.unwrap_or(0),
                unrecoverable,
            });
        }
        r.latency = Latency::of(&mut all);
        r.read_latency = Latency::of(&mut reads);
        r.write_latency = Latency::of(&mut writes);
        r.engine = self.engine.as_ref().map(Engine::stats).unwrap_or_default();
        r.disks = self.disks.iter().map(Drive::stats).collect();
        r.strings = self.strings.iter().map(LinkStats::from).collect();
        r.buses = self.buses.iter().map(LinkStats::from).collect();
        r.controllers = self
            .ctls
            .iter()
            .map(|c| ControllerStats {
                busy: c.link.busy,
                bytes: c.link.bytes,
                ..c.stats
            })
            .collect();
        Ok(r)
    }
}

/// One request in flight.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    start: Nanos,
    read: bool,
    buf: Option<BufId>,
    job: usize,
}
