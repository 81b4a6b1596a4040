//! What sits between the host and the disks: host buses, controllers with their
//! caches, and strings (a SCSI bus, or an SMD cable, shared by the disks on it).
//!
//! The policies are those the 1987 VME controllers let one set: search the cache on a
//! read, save read data, save write data, read-ahead size, whether read-ahead may cross
//! to the next head and to the next cylinder, sort reads and sort writes (an elevator
//! per disk) — and their flaw, which can be switched on: every write invalidates the
//! whole read cache.
//!
//! Every component that carries data is a [`Link`]: a server that takes `bytes / rate`
//! per transfer, one transfer at a time, first come first served. A transfer crosses
//! its path's links pipelined (a hop starts no earlier than the one before it started,
//! and ends no earlier than the one before it ended), so each link is busy only for
//! its own share and the slowest one sets the pace. The timing is done by the driver;
//! this module holds the parameters, the cache and the elevator.

use xraid_engine::Nanos;

use crate::disk::{DiskOp, DiskRequest};
use crate::geometry::Format;

/// A controller's parameters and policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerParams {
    /// Processing per command (charged once, as the reply goes out).
    pub overhead: Nanos,
    /// Its data path, bytes per second; None: not a limit.
    pub bytes_per_sec: Option<u64>,
    /// Cache size in sectors (0: no cache).
    pub cache_sectors: u64,
    /// Reads look in the cache first.
    pub search: bool,
    /// The data a read asked for is kept in the cache.
    pub save_reads: bool,
    /// The data a write brought is kept in the cache (written through to the disk).
    pub save_writes: bool,
    /// Sectors read past what a missed read asked for, kept in the cache.
    pub read_ahead_sectors: u64,
    /// Read-ahead may go on to the next head of the cylinder (else it stops at the end
    /// of the track the read ended on).
    pub read_ahead_across_head: bool,
    /// Read-ahead may go on to the next cylinder (else it stops at the cylinder's end).
    pub read_ahead_across_cylinder: bool,
    /// Queued reads, and writes, are taken in elevator order instead of as they came.
    pub sort_reads: bool,
    pub sort_writes: bool,
    /// The flaw: every write invalidates the whole read cache.
    pub flush_on_write: bool,
    /// The host bus it sits on; None: straight on the host.
    pub bus: Option<usize>,
}

impl Default for ControllerParams {
    /// A pass-through: no overhead, no limit, no cache, no sorting.
    fn default() -> ControllerParams {
        ControllerParams {
            overhead: Nanos(0),
            bytes_per_sec: None,
            cache_sectors: 0,
            search: false,
            save_reads: false,
            save_writes: false,
            read_ahead_sectors: 0,
            read_ahead_across_head: false,
            read_ahead_across_cylinder: false,
            sort_reads: false,
            sort_writes: false,
            flush_on_write: false,
            bus: None,
        }
    }
}

/// A string: the disks on it share its bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StringParams {
    pub bytes_per_sec: u64,
    pub controller: usize,
}

/// Host buses, controllers, strings, and the string of each disk (None: the disk is
/// on its own link straight to the host, as without a topology).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    /// Each host bus's bytes per second.
    pub buses: Vec<u64>,
    pub controllers: Vec<ControllerParams>,
    pub strings: Vec<StringParams>,
    pub disk_string: Vec<Option<usize>>,
}

/// Why a topology was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("the topology places {placed} disks but the target has {disks}")]
    DiskCount { placed: usize, disks: usize },
    #[error("{what} {index} refers to {to} {target}, which does not exist")]
    Dangling {
        what: &'static str,
        index: usize,
        to: &'static str,
        target: usize,
    },
    #[error("{what} {index} has a rate of 0 bytes per second")]
    ZeroRate { what: &'static str, index: usize },
}

impl Topology {
    /// Checks every reference and rate against `disks` disks.
    pub fn check(&self, disks: usize) -> Result<(), TopologyError> {
        if self.disk_string.len() != disks {
            return Err(TopologyError::DiskCount {
                placed: self.disk_string.len(),
                disks,
            });
        }
        let dangling = |what, index, to, target| TopologyError::Dangling {
            what,
            index,
            to,
            target,
        };
        for (i, s) in self.disk_string.iter().enumerate() {
            if let Some(s) = *s {
                if s >= self.strings.len() {
                    return Err(dangling("disk", i, "string", s));
                }
            }
        }
        for (i, s) in self.strings.iter().enumerate() {
            if s.controller >= self.controllers.len() {
                return Err(dangling("string", i, "controller", s.controller));
            }
            if s.bytes_per_sec == 0 {
                return Err(TopologyError::ZeroRate {
                    what: "string",
                    index: i,
                });
            }
        }
        for (i, c) in self.controllers.iter().enumerate() {
            if let Some(b) = c.bus {
                if b >= self.buses.len() {
                    return Err(dangling("controller", i, "bus", b));
                }
            }
            if c.bytes_per_sec == Some(0) {
                return Err(TopologyError::ZeroRate {
                    what: "controller",
                    index: i,
                });
            }
        }
        if let Some(i) = self.buses.iter().position(|&b| b == 0) {
            return Err(TopologyError::ZeroRate {
                what: "bus",
                index: i,
            });
        }
        Ok(())
    }
}

/// A component that carries data: one transfer at a time, `bytes / rate` each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Link {
    /// None: infinitely fast (a controller without a rate).
    pub bytes_per_sec: Option<u64>,
    pub free: Nanos,
    pub busy: Nanos,
    pub bytes: u64,
}

impl Link {
    pub fn new(bytes_per_sec: Option<u64>) -> Link {
        Link {
            bytes_per_sec,
            ..Link::default()
        }
    }

    /// Time for `bytes` at `rate` (the link's, or a slower one of the sender's).
    pub fn duration(bytes: u64, rate: Option<u64>) -> Nanos {
        match rate {
            None => Nanos(0),
            Some(r) => Nanos((u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(r)) as u64),
        }
    }

    /// Occupies the link for `dur` from `at` or when it is free; returns start, end.
    pub fn reserve(&mut self, at: Nanos, dur: Nanos, bytes: u64) -> (Nanos, Nanos) {
        let start = at.max(self.free);
        let end = Nanos(start.0 + dur.0);
        self.free = end;
        self.busy = Nanos(self.busy.0 + dur.0);
        self.bytes += bytes;
        (start, end)
    }
}

/// Counters of one controller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControllerStats {
    pub reads: u64,
    pub writes: u64,
    /// Reads served from the cache without going to a disk.
    pub cache_hits: u64,
    /// Sectors read past what reads asked for.
    pub read_ahead_sectors: u64,
    /// Times the flaw threw the read cache away.
    pub cache_flushes: u64,
    /// Time its processor and data path were busy.
    pub busy: Nanos,
    /// Bytes through its data path.
    pub bytes: u64,
}

/// Counters of a string or a host bus.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub busy: Nanos,
    pub bytes: u64,
}

impl From<&Link> for LinkStats {
    fn from(l: &Link) -> LinkStats {
        LinkStats {
            busy: l.busy,
            bytes: l.bytes,
        }
    }
}

/// One cached extent: sectors `start..end` of a disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extent {
    disk: usize,
    start: u64,
    end: u64,
    used: u64,
}

/// A controller's cache: extents of its disks' sectors, least recently used evicted
/// first. A read hits only when one extent holds all of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cache {
    capacity: u64,
    held: u64,
    extents: Vec<Extent>,
    clock: u64,
}

impl Cache {
    pub fn new(capacity_sectors: u64) -> Cache {
        Cache {
            capacity: capacity_sectors,
            ..Cache::default()
        }
    }

    /// Whether `lba..lba + n` of `disk` is held (and marks it used).
    pub fn lookup(&mut self, disk: usize, lba: u64, n: u64) -> bool {
        self.clock += 1;
        let clock = self.clock;
        match self
            .extents
            .iter_mut()
            .find(|e| e.disk == disk && e.start <= lba && lba + n <= e.end)
        {
            Some(e) => {
                e.used = clock;
                true
            }
            None => false,
        }
    }

    /// Drops whatever is held of `lba..lba + n` of `disk`.
    pub fn invalidate(&mut self, disk: usize, lba: u64, n: u64) {
        let end = lba + n;
        let mut kept = Vec::with_capacity(self.extents.len() + 1);
        for e in self.extents.drain(..) {
            if e.disk != disk || e.end <= lba || end <= e.start {
                kept.push(e);
                continue;
            }
            if e.start < lba {
                kept.push(Extent { end: lba, ..e });
            }
            if end < e.end {
                kept.push(Extent { start: end, ..e });
            }
        }
        self.extents = kept;
        self.held = self.extents.iter().map(|e| e.end - e.start).sum();
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        self.extents.clear();
        self.held = 0;
    }

    /// Holds `start..end` of `disk`, evicting the least recently used extents to make
    /// room; a range larger than the cache keeps its first sectors.
    pub fn insert(&mut self, disk: usize, start: u64, end: u64) {
        if self.capacity == 0 || end <= start {
            return;
        }
        let end = end.min(start + self.capacity);
        self.invalidate(disk, start, end - start);
        while self.held + (end - start) > self.capacity {
            let Some(i) = self
                .extents
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.used)
                .map(|(i, _)| i)
            else {
                break;
            };
            let e = self.extents.swap_remove(i);
            self.held -= e.end - e.start;
        }
        self.clock += 1;
        self.extents.push(Extent {
            disk,
            start,
            end,
            used: self.clock,
        });
        self.held += end - start;
    }
}

/// Where a read that missed should stop, read-ahead included: `ra` sectors past
/// `lba + n`, cut at the end of the track the read ended on unless read-ahead may cross
/// heads, at the end of its cylinder unless it may cross cylinders, and at the disk's
/// end. Crossing cylinders implies crossing heads.
pub fn read_ahead_end(
    format: &Format,
    lba: u64,
    n: u64,
    ra: u64,
    across_head: bool,
    across_cylinder: bool,
) -> u64 {
    let asked = lba + n;
    let want = asked.saturating_add(ra).min(format.sectors());
    if want <= asked {
        return asked;
    }
    let loc = format.locate(asked - 1);
    let z = format.zone(loc.zone);
    let spt = u64::from(z.sectors_per_track);
    let heads = u64::from(format.heads());
    let cyl = u64::from(loc.cylinder - z.first_cylinder);
    let limit = if across_cylinder {
        u64::MAX
    } else if across_head {
        z.first_lba + (cyl + 1) * heads * spt
    } else {
        z.first_lba + (cyl * heads + u64::from(loc.head) + 1) * spt
    };
    want.min(limit).max(asked)
}

/// An elevator over one disk's waiting commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Elevator {
    /// Where the last command dispatched ended.
    pos: u64,
    down: bool,
}

impl Elevator {
    /// Which of `queue` to dispatch next. A command of a kind that is not sorted
    /// keeps its place: when it is first it goes, and sorted commands behind it wait.
    /// Among the sorted commands before the first unsorted one, the elevator takes the
    /// nearest in its direction of travel (ties to the earliest), reversing at the end.
    pub fn pick(&mut self, queue: &[DiskRequest], sort_reads: bool, sort_writes: bool) -> usize {
        let sorted = |r: &DiskRequest| match r.op {
            DiskOp::Read => sort_reads,
            DiskOp::Write => sort_writes,
            DiskOp::Flush => false,
        };
        let n = queue.iter().position(|r| !sorted(r)).unwrap_or(queue.len());
        let pick = if n == 0 {
            0
        } else {
            let best = |down: bool| {
                queue[..n]
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| {
                        if down {
                            r.lba < self.pos
                        } else {
                            r.lba >= self.pos
                        }
                    })
                    .min_by_key(|(_, r)| r.lba.abs_diff(self.pos))
                    .map(|(i, _)| i)
            };
            match best(self.down) {
                Some(i) => i,
                None => {
                    self.down = !self.down;
                    best(self.down).unwrap_or(0)
                }
            }
        };
        if let Some(r) = queue.get(pick) {
            if r.op != DiskOp::Flush {
                self.pos = r.lba + r.sectors;
            }
        }
        pick
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::ZoneInfo;

    fn req(lba: u64, op: DiskOp) -> DiskRequest {
        DiskRequest {
            tag: lba,
            op,
            lba,
            sectors: 8,
        }
    }

    #[test]
    fn read_ahead_stops_at_the_track_the_cylinder_or_the_disk() {
        // 10 sectors per track, 4 heads, 5 cylinders: a cylinder is 40 sectors.
        let f = Format::new(
            4,
            vec![ZoneInfo {
                first_cylinder: 0,
                cylinders: 5,
                sectors_per_track: 10,
                slots: 10,
                first_lba: 0,
                head_skew: 0,
                cylinder_skew: 0,
            }],
        );
        assert_eq!(read_ahead_end(&f, 42, 3, 100, false, false), 50, "track");
        assert_eq!(read_ahead_end(&f, 42, 3, 100, true, false), 80, "cylinder");
        assert_eq!(read_ahead_end(&f, 42, 3, 100, true, true), 145, "size");
        assert_eq!(read_ahead_end(&f, 42, 3, 4, false, false), 49, "size first");
        assert_eq!(read_ahead_end(&f, 190, 5, 100, true, true), 200, "disk end");
        assert_eq!(
            read_ahead_end(&f, 42, 8, 100, false, false),
            50,
            "read ends on the track end"
        );
        assert_eq!(read_ahead_end(&f, 42, 3, 0, true, true), 45, "none");
    }

    #[test]
    fn the_cache_holds_invalidates_and_evicts_least_recently_used() {
        let mut c = Cache::new(100);
        c.insert(0, 0, 60);
        assert!(c.lookup(0, 10, 50));
        assert!(!c.lookup(1, 10, 5), "another disk");
        assert!(!c.lookup(0, 50, 20), "partly held is a miss");
        c.invalidate(0, 20, 10);
        assert!(c.lookup(0, 0, 20) && c.lookup(0, 30, 30) && !c.lookup(0, 15, 10));
        c.lookup(0, 0, 20);
        c.insert(1, 0, 60); // 50 + 60 held > 100: the least recently used goes (30..60)
        assert!(c.lookup(0, 0, 20) && !c.lookup(0, 30, 5) && c.lookup(1, 0, 60));
        c.clear();
        assert!(!c.lookup(0, 0, 1));
        c.insert(0, 0, 500);
        assert!(
            c.lookup(0, 0, 100) && !c.lookup(0, 100, 1),
            "first 100 kept"
        );
    }

    #[test]
    fn the_elevator_sweeps_and_unsorted_kinds_keep_their_place() {
        let q = [
            req(500, DiskOp::Read),
            req(100, DiskOp::Read),
            req(300, DiskOp::Read),
        ];
        let mut e = Elevator::default();
        assert_eq!(e.pick(&q, true, false), 1, "nearest upward from 0");
        assert_eq!(e.pick(&[q[0], q[2]], true, false), 1, "then 300");
        let mut e = Elevator::default();
        assert_eq!(e.pick(&q, false, true), 0, "reads unsorted: FIFO");
        let q = [
            req(500, DiskOp::Read),
            req(100, DiskOp::Write),
            req(50, DiskOp::Read),
        ];
        let mut e = Elevator::default();
        assert_eq!(
            e.pick(&q, true, false),
            0,
            "the write bars the read behind it"
        );
        let mut e = Elevator {
            pos: 600,
            down: false,
        };
        assert_eq!(
            e.pick(&q[..1], true, true),
            0,
            "reverses when nothing is above"
        );
        assert!(e.down);
    }
}
