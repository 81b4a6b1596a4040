//! Workloads in fio's terms, and the generators that draw each job's request
//! addresses and directions from a seeded [`Rng`].
//!
//! Besides fio's six `--rw` patterns there is [`Pattern::Fsck`], a seek-heavy read
//! pattern shaped like a file-system check (see its doc).

use xraid_engine::Nanos;
use xraid_layout::SECTOR_BYTES;

use crate::rng::Rng;

/// Most requests a job keeps in flight (fio's own iodepth limit).
pub const MAX_IODEPTH: usize = 65_536;
/// Most jobs a run has; jobs times depth must fit [`MAX_IODEPTH`] too (the driver's
/// request ids carry the slot in 16 bits).
pub const MAX_NUMJOBS: u32 = 4096;
/// Largest block: a request's buffer is allocated for each request in flight, so a
/// bound keeps a run's memory bounded.
pub const MAX_BS: u64 = 64 << 20;
/// Longest simulated run time: a day covers any sensible experiment.
pub const MAX_RUNTIME: Nanos = Nanos(86_400_000_000_000);
/// An ext2/3/4 block group with 4 KiB blocks (32768 blocks): the region the fsck
/// pattern walks group by group.
const FSCK_GROUP_BYTES: u64 = 128 << 20;
/// The share of a group its inode table takes: mke2fs's default of one 256-byte inode
/// per 16 KiB gives 2 MiB of table per 128 MiB group.
const FSCK_TABLE_FRACTION: u64 = 64;

/// fio's `--rw`, plus the file-system-check pattern.
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
    /// Reads shaped like e2fsck's first pass: the region is cut into 128 MiB block
    /// groups; each group's inode table (its first 1/64) is read in order, and after
    /// every inode-table block one block anywhere in the region is read, as the
    /// extent or indirect block of an inode just read would be. Every other request
    /// seeks, which is why fsck time was the classic seek-bound benchmark.
    Fsck,
}

impl Pattern {
    /// The name `--rw` takes.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::Rw => "rw",
            Pattern::RandRw => "randrw",
            Pattern::Fsck => "fsck",
        }
    }

    fn is_random(self) -> bool {
        matches!(
            self,
            Pattern::RandRead | Pattern::RandWrite | Pattern::RandRw
        )
    }
}

/// A workload in fio's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    pub rw: Pattern,
    /// Block size in bytes (a multiple of 512).
    pub bs: u64,
    /// Requests each job keeps in flight.
    pub iodepth: usize,
    /// Independent jobs, each with its own generator (seeded from `seed` and its
    /// index) over the same region, as fio's jobs without offset_increment.
    pub numjobs: u32,
    /// Percent of reads in a mixed pattern.
    pub rwmixread: u8,
    /// Region of the target used, in bytes; `size` 0 for all of it from `offset`.
    pub offset: u64,
    pub size: u64,
    /// Requests each job completes (u64::MAX: no limit, `runtime` ends the run).
    pub requests: u64,
    /// Stop issuing once this much simulated time has passed.
    pub runtime: Option<Nanos>,
    pub seed: u64,
}

/// Why a workload is refused; each message names the value and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// The block size is not a positive multiple of 512 bytes, or too large.
    #[error("--bs {bs} must be a multiple of 512 bytes from 512 to {MAX_BS}")]
    BlockSize { bs: u64 },
    /// iodepth out of range.
    #[error("--iodepth {iodepth} must be from 1 to {MAX_IODEPTH}")]
    IoDepth { iodepth: usize },
    /// numjobs out of range, or too many requests in flight in all.
    #[error("--numjobs {numjobs} must be from 1 to {MAX_NUMJOBS}, with numjobs x iodepth at most {MAX_IODEPTH}")]
    NumJobs { numjobs: u32 },
    /// rwmixread is a percentage.
    #[error("--rwmixread {0} must be a percentage from 0 to 100")]
    Mix(u8),
    /// The region is empty or lies beyond the target.
    #[error("region --offset {offset} --size {size} does not fit the target's {target_bytes} bytes with one block of {bs} (offset must be a multiple of --bs)")]
    Region {
        offset: u64,
        size: u64,
        target_bytes: u64,
        bs: u64,
    },
    /// Runtime out of range.
    #[error("--runtime must be more than 0 and at most {} simulated seconds", MAX_RUNTIME.0 / 1_000_000_000)]
    Runtime,
}

impl Workload {
    /// Checks the workload against a target of `target_sectors` and returns the first
    /// block and the block count of its region.
    pub fn check(&self, target_sectors: u64) -> Result<(u64, u64), WorkloadError> {
        if self.bs == 0 || !self.bs.is_multiple_of(SECTOR_BYTES) || self.bs > MAX_BS {
            return Err(WorkloadError::BlockSize { bs: self.bs });
        }
        if self.iodepth == 0 || self.iodepth > MAX_IODEPTH {
            return Err(WorkloadError::IoDepth {
                iodepth: self.iodepth,
            });
        }
        let total = (self.numjobs as usize).saturating_mul(self.iodepth);
        if self.numjobs == 0 || self.numjobs > MAX_NUMJOBS || total > MAX_IODEPTH {
            return Err(WorkloadError::NumJobs {
                numjobs: self.numjobs,
            });
        }
        if self.rwmixread > 100 {
            return Err(WorkloadError::Mix(self.rwmixread));
        }
        if self
            .runtime
            .is_some_and(|r| r.0 == 0 || r.0 > MAX_RUNTIME.0)
        {
            return Err(WorkloadError::Runtime);
        }
        let target_bytes = target_sectors.saturating_mul(SECTOR_BYTES);
        let size = if self.size == 0 {
            target_bytes.saturating_sub(self.offset)
        } else {
            self.size
        };
        let end = self.offset.checked_add(size);
        if !self.offset.is_multiple_of(self.bs)
            || size < self.bs
            || end.is_none_or(|e| e > target_bytes)
        {
            return Err(WorkloadError::Region {
                offset: self.offset,
                size: self.size,
                target_bytes,
                bs: self.bs,
            });
        }
        Ok((self.offset / self.bs, size / self.bs))
    }
}

/// Draws one job's request addresses and directions.
#[derive(Debug)]
pub(crate) struct Generator {
    rw: Pattern,
    mix: u8,
    first_block: u64,
    blocks: u64,
    block_sectors: u64,
    cursor: u64,
    /// Fsck: blocks per group, inode-table blocks per group, groups, and whether the
    /// next request is the random one.
    group_blocks: u64,
    table_blocks: u64,
    groups: u64,
    scattered_next: bool,
    rng: Rng,
}

impl Generator {
    /// The generator of job `job`; `region` is what [`Workload::check`] returned.
    pub(crate) fn new(w: &Workload, region: (u64, u64), job: u32) -> Generator {
        let (first_block, blocks) = region;
        let group_blocks = (FSCK_GROUP_BYTES / w.bs).clamp(1, blocks);
        Generator {
            rw: w.rw,
            mix: w.rwmixread,
            first_block,
            blocks,
            block_sectors: w.bs / SECTOR_BYTES,
            cursor: 0,
            group_blocks,
            table_blocks: (group_blocks / FSCK_TABLE_FRACTION).max(1),
            groups: blocks / group_blocks,
            scattered_next: false,
            // Job 0 draws what a one-job run draws; the others their own streams.
            rng: Rng::new(
                w.seed
                    .wrapping_add(u64::from(job).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            ),
        }
    }

    /// The next request: whether it reads, and its first sector.
    pub(crate) fn next(&mut self) -> (bool, u64) {
        let read = match self.rw {
            Pattern::Read | Pattern::RandRead | Pattern::Fsck => true,
            Pattern::Write | Pattern::RandWrite => false,
            Pattern::Rw | Pattern::RandRw => self.rng.below(100) < u64::from(self.mix),
        };
        let block = if self.rw == Pattern::Fsck {
            self.next_fsck()
        } else if self.rw.is_random() {
            self.rng.below(self.blocks)
        } else {
            let b = self.cursor;
            self.cursor = (self.cursor + 1) % self.blocks;
            b
        };
        (read, (self.first_block + block) * self.block_sectors)
    }

    fn next_fsck(&mut self) -> u64 {
        if self.scattered_next {
            self.scattered_next = false;
            return self.rng.below(self.blocks);
        }
        self.scattered_next = true;
        // `cursor` counts inode-table blocks read: group, then block within its table.
        let group = (self.cursor / self.table_blocks) % self.groups;
        let within = self.cursor % self.table_blocks;
        self.cursor = self.cursor.wrapping_add(1);
        group * self.group_blocks + within
    }
}
