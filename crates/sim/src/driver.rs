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

use std::collections::VecDeque;

use xraid_engine::{
    Area, BufId, Engine, EngineConfig, EngineError, IoId, IoKind, MemberState, Nanos, Request,
    RequestId, RequestKind, Stats,
};
use xraid_layout::{Geometry, Layout, LayoutError, Level, SECTOR_BYTES};

use crate::disk::{Disk, DiskOp, DiskRequest, DiskStats};
use crate::params::DiskModel;
use crate::rng::Rng;

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
/// Most requests a workload keeps in flight (fio's own iodepth limit is 65536 too).
pub const MAX_IODEPTH: usize = 1 << SLOT_BITS;

/// fio's `--rw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Read,
    Write,
    RandRead,
    RandWrite,
    /// Sequential, mixed by `rwmixread`.
    Rw,
    /// Random, mixed by `rwmixread`.
    RandRw,
}

/// A workload in fio's terms; one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    pub rw: Pattern,
    /// Block size in bytes (a multiple of 512).
    pub bs: u64,
    pub iodepth: usize,
    /// Percent of reads in a mixed pattern.
    pub rwmixread: u8,
    /// Region of the array used, in bytes; `size` 0 for all of it from `offset`.
    pub offset: u64,
    pub size: u64,
    /// Requests to complete.
    pub requests: u64,
    pub seed: u64,
}

/// The array to build on the disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArraySpec {
    pub level: Level,
    pub disks: u16,
    pub chunk_sectors: u32,
}

/// What a run measured; all in simulated time. Equal for equal inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    pub errors: u64,
    /// From the first request to the last reply.
    pub span: Nanos,
    pub latency_mean: Nanos,
    pub latency_p50: Nanos,
    pub latency_p99: Nanos,
    pub latency_max: Nanos,
    pub engine: Stats,
    pub disks: Vec<DiskStats>,
    /// A digest of every reply's id and time: equal digests, equal runs.
    pub digest: u64,
}

/// Why a run could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The array's shape is refused.
    #[error("array: {0}")]
    Layout(#[from] LayoutError),
    /// The disks are smaller than the array's metadata area.
    #[error("a disk of {sectors} sectors has no room for data after the {DATA_OFFSET_SECTORS}-sector metadata area")]
    DiskTooSmall { sectors: u64 },
    /// The block size is not a positive multiple of 512 bytes.
    #[error("block size {bs} is not a positive multiple of 512 bytes")]
    BlockSize { bs: u64 },
    /// The region is empty or lies beyond the array.
    #[error("region offset {offset} size {size} does not fit the array's {array_bytes} bytes with one block of {bs}")]
    Region {
        offset: u64,
        size: u64,
        array_bytes: u64,
        bs: u64,
    },
    /// iodepth 0 would never issue a request.
    #[error("iodepth must be from 1 to {MAX_IODEPTH}")]
    IoDepth,
}

/// An array of simulated disks run by the engine.
#[derive(Debug)]
pub struct SimArray {
    engine: Engine,
    disks: Vec<Disk>,
    /// Member I/Os waiting for room in each disk's tagged queue.
    waiting: Vec<VecDeque<DiskRequest>>,
    outstanding: Vec<u32>,
    depth: Vec<u32>,
    now: Nanos,
}

impl SimArray {
    /// Builds the array on one disk of `model` per member, all active.
    pub fn new(spec: ArraySpec, model: &DiskModel) -> Result<SimArray, RunError> {
        let sectors = model.sectors();
        if sectors <= DATA_OFFSET_SECTORS {
            return Err(RunError::DiskTooSmall { sectors });
        }
        let geo = Geometry::new(
            spec.level,
            Layout::default_for(spec.level),
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
        Ok(SimArray {
            engine,
            disks: (0..n).map(|_| Disk::new(model.clone())).collect(),
            waiting: vec![VecDeque::new(); n],
            outstanding: vec![0; n],
            depth: vec![model.queue_depth.max(1); n],
            now: Nanos(0),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn disks(&self) -> &[Disk] {
        &self.disks
    }

    /// Moves the engine's member I/Os to the disks and returns its replies.
    fn pump(&mut self, replies: &mut Vec<(RequestId, Result<(), EngineError>)>) {
        while let Some(io) = self.engine.poll_member_io() {
            let m = io.member.index();
            let base = match io.area {
                Area::Data => DATA_OFFSET_SECTORS,
                Area::Log => LOG_OFFSET_SECTORS,
                Area::Bitmap => BITMAP_OFFSET_SECTORS,
            };
            let op = match io.kind {
                IoKind::Read => DiskOp::Read,
                IoKind::Write => DiskOp::Write,
                IoKind::Flush => DiskOp::Flush,
            };
            self.waiting[m].push_back(DiskRequest {
                tag: io.id.0,
                op,
                lba: base + io.sector,
                sectors: io.buf.len as u64 / SECTOR_BYTES,
            });
        }
        for m in 0..self.disks.len() {
            while self.outstanding[m] < self.depth[m] {
                let Some(req) = self.waiting[m].pop_front() else {
                    break;
                };
                self.outstanding[m] += 1;
                self.disks[m].submit(req, self.now);
            }
        }
        while let Some(reply) = self.engine.poll_reply() {
            replies.push((reply.id, reply.result));
        }
    }

    /// Advances the clock to the next event and handles everything due then; false
    /// when nothing is left to happen.
    fn step(&mut self, replies: &mut Vec<(RequestId, Result<(), EngineError>)>) -> bool {
        let next = self
            .disks
            .iter()
            .filter_map(Disk::poll_timeout)
            .chain(self.engine.poll_timeout())
            .min();
        let Some(next) = next else {
            return false;
        };
        self.now = self.now.max(next);
        for m in 0..self.disks.len() {
            self.disks[m].handle_timeout(self.now);
            while let Some(c) = self.disks[m].poll_done() {
                self.outstanding[m] -= 1;
                self.engine.handle_completion(IoId(c.tag), Ok(()), c.at);
            }
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= self.now) {
            self.engine.handle_timeout(self.now);
        }
        self.pump(replies);
        true
    }

    /// Runs `w` to its end.
    pub fn run(&mut self, w: &Workload) -> Result<RunResult, RunError> {
        let mut gen = Generator::new(w, self.engine.array_sectors())?;
        // Requests in flight by slot; a request's id carries its slot in the low bits
        // so a reply finds its start without a search.
        let mut slots: Vec<Option<(Nanos, bool, BufId)>> = vec![None; w.iodepth];
        let mut free_slots: Vec<u64> = (0..w.iodepth as u64).rev().collect();
        let mut latencies = Vec::with_capacity(usize::try_from(w.requests).unwrap_or(0));
        let mut replies = Vec::new();
        let (mut issued, mut done, mut in_flight) = (0u64, 0u64, 0usize);
        let mut r = RunResult {
            requests: 0,
            reads: 0,
            writes: 0,
            bytes: 0,
            errors: 0,
            span: Nanos(0),
            latency_mean: Nanos(0),
            latency_p50: Nanos(0),
            latency_p99: Nanos(0),
            latency_max: Nanos(0),
            engine: Stats::default(),
            disks: Vec::new(),
            digest: 0xcbf2_9ce4_8422_2325,
        };
        let t0 = self.now;
        while done < w.requests {
            while issued < w.requests && in_flight < w.iodepth {
                let (read, sector) = gen.next();
                let len = usize::try_from(w.bs).map_err(|_| RunError::BlockSize { bs: w.bs })?;
                let buf = self.engine.buffers_mut().alloc(len);
                let Some(slot) = free_slots.pop() else {
                    unreachable!("fewer than iodepth requests in flight");
                };
                slots[slot as usize] = Some((self.now, read, buf));
                let req = Request {
                    id: RequestId(issued << SLOT_BITS | slot),
                    kind: if read {
                        RequestKind::Read
                    } else {
                        RequestKind::Write
                    },
                    sector,
                    sectors: w.bs / SECTOR_BYTES,
                    buf: Some(buf),
                };
                self.engine.handle_request(req, self.now);
                issued += 1;
                in_flight += 1;
                self.pump(&mut replies);
            }
            if replies.is_empty() && !self.step(&mut replies) {
                unreachable!("requests in flight but no event pending");
            }
            for (id, result) in replies.drain(..) {
                let slot = id.0 & ((1 << SLOT_BITS) - 1);
                free_slots.push(slot);
                let Some((start, read, buf)) = slots[slot as usize].take() else {
                    unreachable!("reply to a request not in flight");
                };
                self.engine.buffers_mut().free(buf);
                let latency = self.now.0 - start.0;
                latencies.push(latency);
                in_flight -= 1;
                done += 1;
                if result.is_err() {
                    r.errors += 1;
                }
                if read {
                    r.reads += 1;
                } else {
                    r.writes += 1;
                }
                r.bytes += w.bs;
                for v in [id.0, self.now.0] {
                    r.digest = (r.digest ^ v).wrapping_mul(0x0100_0000_01b3);
                }
            }
        }
        r.requests = done;
        r.span = Nanos(self.now.0 - t0.0);
        latencies.sort_unstable();
        let pct = |p: usize| Nanos(latencies[(latencies.len() - 1) * p / 100]);
        if !latencies.is_empty() {
            r.latency_mean = Nanos(latencies.iter().sum::<u64>() / latencies.len() as u64);
            r.latency_p50 = pct(50);
            r.latency_p99 = pct(99);
            r.latency_max = pct(100);
        }
        r.engine = self.engine.stats();
        r.disks = self.disks.iter().map(Disk::stats).collect();
        Ok(r)
    }
}

/// Draws request addresses and directions.
#[derive(Debug)]
struct Generator {
    rw: Pattern,
    mix: u8,
    first_block: u64,
    blocks: u64,
    block_sectors: u64,
    cursor: u64,
    rng: Rng,
}

impl Generator {
    fn new(w: &Workload, array_sectors: u64) -> Result<Generator, RunError> {
        if w.bs == 0 || !w.bs.is_multiple_of(SECTOR_BYTES) {
            return Err(RunError::BlockSize { bs: w.bs });
        }
        if w.iodepth == 0 || w.iodepth > MAX_IODEPTH {
            return Err(RunError::IoDepth);
        }
        let array_bytes = array_sectors * SECTOR_BYTES;
        let size = if w.size == 0 {
            array_bytes.saturating_sub(w.offset)
        } else {
            w.size
        };
        let end = w.offset.checked_add(size);
        if !w.offset.is_multiple_of(w.bs) || size < w.bs || end.is_none_or(|e| e > array_bytes) {
            return Err(RunError::Region {
                offset: w.offset,
                size: w.size,
                array_bytes,
                bs: w.bs,
            });
        }
        Ok(Generator {
            rw: w.rw,
            mix: w.rwmixread.min(100),
            first_block: w.offset / w.bs,
            blocks: size / w.bs,
            block_sectors: w.bs / SECTOR_BYTES,
            cursor: 0,
            rng: Rng::new(w.seed),
        })
    }

    /// The next request: whether it reads, and its first sector.
    fn next(&mut self) -> (bool, u64) {
        let random = matches!(
            self.rw,
            Pattern::RandRead | Pattern::RandWrite | Pattern::RandRw
        );
        let read = match self.rw {
            Pattern::Read | Pattern::RandRead => true,
            Pattern::Write | Pattern::RandWrite => false,
            Pattern::Rw | Pattern::RandRw => self.rng.below(100) < u64::from(self.mix),
        };
        let block = if random {
            self.rng.below(self.blocks)
        } else {
            let b = self.cursor;
            self.cursor = (self.cursor + 1) % self.blocks;
            b
        };
        (read, (self.first_block + block) * self.block_sectors)
    }
}
