//! The moving parts: where the heads are, how the platters' angle follows simulated
//! time, and how long a media transfer takes from a given head position and instant.
//!
//! Time is integer nanoseconds. The platters' angle is an exact function of time:
//! one revolution is `60e9 / rpm` ns, kept as the exact fraction (angles are counted in
//! units of ns·rpm·slots), so no rounding error accumulates over a long run and a
//! replay gives the same answers bit for bit.

use std::sync::Arc;

use xraid_engine::Nanos;

use crate::geometry::{Format, Loc};
use crate::seek::SeekCurve;

/// ns·rpm in one revolution (one minute in nanoseconds).
const REV: u64 = 60_000_000_000;

/// How far past a slot's start (ns) the head may be and still catch it. Transfer ends
/// are rounded up to whole nanoseconds, one rounding per track piece and one per wait,
/// so a transfer that continues where another ended finds the head a few ns "late";
/// a slot lasts microseconds, so this slack changes no physics.
const ON_TIME_NS: u64 = 16;

/// Largest disk (in cylinders) whose seek times are tabled: 8 MiB of table, shared by
/// every disk of a model. Real disks stay well below it; beyond it the curve is
/// evaluated each time.
const SEEK_TABLE_MAX_CYLINDERS: u32 = 1 << 20;

/// The seek time of every distance, worked out once from the curve: the scheduler
/// asks for one per queued command at every decision, and the curve's square root and
/// rounding cost more than the lookup.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SeekTable(Arc<[u64]>);

impl SeekTable {
    pub(crate) fn new(curve: &SeekCurve, cylinders: u32) -> SeekTable {
        let n = if cylinders <= SEEK_TABLE_MAX_CYLINDERS {
            cylinders
        } else {
            0
        };
        SeekTable((0..n).map(|d| curve.time(d).0).collect())
    }
}

impl std::fmt::Debug for SeekTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SeekTable({} distances)", self.0.len())
    }
}

/// Where the arm and the selected head are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeadPos {
    pub cylinder: u32,
    pub head: u32,
}

/// Where a walk over a read's tracks stands ([`Mechanics::read_progress_from`]): the
/// whole tracks passed so far and when the heads reach the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadCursor {
    /// When the read started.
    t0: Nanos,
    /// The next track's first sector to read, and when the heads are there.
    loc: Loc,
    at: Nanos,
    /// Sectors read in the tracks passed, and where the heads were for the last of
    /// them (`head` for none).
    done: u64,
    last: HeadPos,
    /// When the last track passed was done (`t0` for none).
    passed: Nanos,
}

impl ReadCursor {
    /// When the last whole track it passed was done: later questions may go on from
    /// it, earlier ones must start a new cursor.
    pub fn passed(&self) -> Nanos {
        self.passed
    }
}

/// Whether a transfer reads or writes the media (writes settle longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// Everything that fixes a disk's mechanical timing; built from [`crate::DiskParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct Mechanics {
    pub format: Format,
    pub rpm: u32,
    pub seek: SeekCurve,
    /// `seek` at every distance (empty for a disk too large to table).
    pub(crate) seek_table: SeekTable,
    pub head_switch: Nanos,
    pub cylinder_switch: Nanos,
    pub write_settle_extra: Nanos,
    /// Reads start with whichever sector of the track comes under the head first
    /// ("zero latency" or read-on-arrival), so a whole-track read takes one revolution
    /// from wherever the head lands.
    pub zero_latency: bool,
}

impl Mechanics {
    /// One revolution, rounded down to a nanosecond.
    pub fn revolution(&self) -> Nanos {
        Nanos(REV / u64::from(self.rpm))
    }

    fn units_per_ns(&self, slots: u32) -> u64 {
        u64::from(self.rpm) * u64::from(slots)
    }

    /// The platters' angle at `t` in units of ns·rpm·slots (a revolution is
    /// `REV * slots` of them). `REV` ns is a whole number (rpm) of turns, so `t` is
    /// reduced modulo `REV` first; that keeps every product inside u64 for any time,
    /// rpm below 10^6 and fewer than 10^7 slots per track (checked when built).
    fn phase(&self, t: Nanos, slots: u32) -> u64 {
        let turn_units = ((t.0 % REV) * u64::from(self.rpm)) % REV;
        turn_units * u64::from(slots)
    }

    /// Time for `n` slots of a track with `slots` slots to pass under the head.
    pub fn slots_time(&self, n: u64, slots: u32) -> Nanos {
        Nanos((n * REV).div_ceil(self.units_per_ns(slots)))
    }

    /// Time from `t` until the start of slot `slot` comes under the head. A head up to
    /// [`ON_TIME_NS`] past the slot's start is taken as on time, not as a revolution
    /// late.
    pub fn wait_for_slot(&self, t: Nanos, slot: u32, slots: u32) -> Nanos {
        let per_ns = self.units_per_ns(slots);
        let rev_units = REV * u64::from(slots);
        let target = u64::from(slot) * REV;
        let diff = (target + rev_units - self.phase(t, slots)) % rev_units;
        if rev_units - diff <= per_ns * ON_TIME_NS {
            return Nanos(0);
        }
        Nanos(diff.div_ceil(per_ns))
    }

    /// The slot under the head at `t` (the one whose start has last passed).
    fn slot_at(&self, t: Nanos, slots: u32) -> u32 {
        (self.phase(t, slots) / REV) as u32
    }

    /// Time to move the arm (or switch heads) from `from` to the track of `to`.
    pub fn move_time(&self, from: HeadPos, to: Loc, dir: Dir) -> Nanos {
        let extra = match dir {
            Dir::Read => 0,
            Dir::Write => self.write_settle_extra.0,
        };
        if from.cylinder != to.cylinder {
            let d = from.cylinder.abs_diff(to.cylinder);
            let seek = match self.seek_table.0.get(d as usize) {
                Some(&ns) => ns,
                None => self.seek.time(d).0,
            };
            Nanos(seek + extra)
        } else if from.head != to.head {
            self.head_switch
        } else {
            Nanos(0)
        }
    }

    /// When the first sector of `lba` would start under the head if the arm left
    /// `from` at `t`: seek or head switch, then rotational latency.
    pub fn arrival(&self, from: HeadPos, dir: Dir, lba: u64, t: Nanos) -> Nanos {
        let loc = self.format.locate(lba);
        let slot = self
            .format
            .slot(loc.zone, loc.cylinder, loc.head, loc.sector);
        self.arrival_at(from, dir, loc, slot, t)
    }

    /// [`Mechanics::arrival`] for a block already located (at `loc`, angular `slot`).
    pub fn arrival_at(&self, from: HeadPos, dir: Dir, loc: Loc, slot: u32, t: Nanos) -> Nanos {
        let t = Nanos(t.0 + self.move_time(from, loc, dir).0);
        let slots = self.format.zone(loc.zone).slots;
        Nanos(t.0 + self.wait_for_slot(t, slot, slots).0)
    }

    /// Transfers `n` sectors from `lba` on with the arm leaving `head` at `t`; returns
    /// when the last sector has passed under the head, and moves `head` to the last
    /// track touched. Track boundaries cost a head switch or a cylinder switch, then
    /// whatever rotation remains until the next track's (skewed) first sector.
    pub fn transfer(&self, head: &mut HeadPos, dir: Dir, lba: u64, n: u64, t: Nanos) -> Nanos {
        assert!(
            n > 0 && lba + n <= self.format.sectors(),
            "transfer beyond the disk"
        );
        let mut loc = self.format.locate(lba);
        let mut t = Nanos(t.0 + self.move_time(*head, loc, dir).0);
        let mut left = n;
        let mut first = true;
        loop {
            let z = *self.format.zone(loc.zone);
            let len = u64::from(z.sectors_per_track - loc.sector).min(left);
            let slot = self
                .format
                .slot(loc.zone, loc.cylinder, loc.head, loc.sector);
            let wait = self.wait_for_slot(t, slot, z.slots);
            let landed_inside = {
                let under = self.slot_at(t, z.slots);
                u64::from((under + z.slots - slot) % z.slots) < len && wait.0 > 0
            };
            t = if first && dir == Dir::Read && self.zero_latency && landed_inside {
                // Read from the next slot start on, round to where it started: one
                // revolution after that slot start.
                let under = self.slot_at(t, z.slots);
                let next = (under + 1) % z.slots;
                let to_next = self.wait_for_slot(t, next, z.slots);
                Nanos(t.0 + to_next.0 + self.slots_time(u64::from(z.slots), z.slots).0)
            } else {
                Nanos(t.0 + wait.0 + self.slots_time(len, z.slots).0)
            };
            first = false;
            left -= len;
            *head = HeadPos {
                cylinder: loc.cylinder,
                head: loc.head,
            };
            if left == 0 {
                return t;
            }
            let Some(next) = self.format.next_track(loc) else {
                unreachable!("checked against the disk's end above");
            };
            t = Nanos(t.0 + self.switch_time(loc, next, dir).0);
            loc = next;
        }
    }

    /// How much of a read of `n` sectors from `lba`, the arm leaving `head` at `t0`,
    /// is done by `t`: the largest count whose [`Mechanics::transfer`] ends by `t`,
    /// and where that transfer leaves the heads (`head` for none). A read-ahead stream
    /// asks this at every scheduling decision, so it walks the tracks once instead of
    /// searching with whole transfers; `transfer` stays the definition, and a test
    /// holds the two together.
    pub fn read_progress(
        &self,
        head: HeadPos,
        lba: u64,
        n: u64,
        t0: Nanos,
        t: Nanos,
    ) -> (u64, HeadPos) {
        let mut cursor = self.read_cursor(head, lba, t0);
        self.read_progress_from(&mut cursor, n, t)
    }

    /// When the read of `len` sectors of the track from `loc` on ends, the heads there
    /// at `at`; `first`: the read's first track, where read-on-arrival may start
    /// anywhere under the head (as [`Mechanics::transfer`] reads).
    fn read_piece_end(&self, loc: Loc, at: Nanos, first: bool, len: u64) -> Nanos {
        let z = *self.format.zone(loc.zone);
        let slot = self
            .format
            .slot(loc.zone, loc.cylinder, loc.head, loc.sector);
        let wait = self.wait_for_slot(at, slot, z.slots);
        if first && self.zero_latency && wait.0 > 0 {
            let under = self.slot_at(at, z.slots);
            if u64::from((under + z.slots - slot) % z.slots) < len {
                let next = (under + 1) % z.slots;
                let to_next = self.wait_for_slot(at, next, z.slots);
                let rev = self.slots_time(u64::from(z.slots), z.slots);
                return Nanos(at.0 + to_next.0 + rev.0);
            }
        }
        Nanos(at.0 + wait.0 + self.slots_time(len, z.slots).0)
    }

    /// When the read `cursor` walks has its first `n` sectors (more than the cursor has
    /// passed): the end of [`Mechanics::transfer`] of them, walked from the cursor on.
    pub fn read_end_from(&self, cursor: &ReadCursor, n: u64) -> Nanos {
        let (mut loc, mut at, mut done) = (cursor.loc, cursor.at, cursor.done);
        let mut first = done == 0;
        loop {
            let z = *self.format.zone(loc.zone);
            let full = u64::from(z.sectors_per_track - loc.sector).min(n - done);
            let piece_end = self.read_piece_end(loc, at, first, full);
            done += full;
            if done >= n {
                return piece_end;
            }
            first = false;
            let Some(next) = self.format.next_track(loc) else {
                unreachable!("a read-ahead stream stops at the disk's end");
            };
            at = Nanos(piece_end.0 + self.switch_time(loc, next, Dir::Read).0);
            loc = next;
        }
    }

    /// A walk of a read from `lba`, the arm leaving `head` at `t0`, before its first
    /// track.
    pub fn read_cursor(&self, head: HeadPos, lba: u64, t0: Nanos) -> ReadCursor {
        let loc = self.format.locate(lba);
        ReadCursor {
            t0,
            loc,
            at: Nanos(t0.0 + self.move_time(head, loc, Dir::Read).0),
            done: 0,
            last: head,
            passed: t0,
        }
    }

    /// [`Mechanics::read_progress`] of the read `cursor` walks (of `n` sectors in all),
    /// going on from the whole tracks the cursor has passed; `t` must be no earlier
    /// than [`ReadCursor::passed`], and `n` no smaller than in the questions before (a
    /// stream's end only moves on). The cursor moves on over the whole tracks done by
    /// `t`, so a stream asked again later walks only the tracks since: a long
    /// sequential read (a rebuild's) costs its tracks once, not once per question.
    pub fn read_progress_from(&self, cursor: &mut ReadCursor, n: u64, t: Nanos) -> (u64, HeadPos) {
        debug_assert!(
            t >= cursor.passed,
            "a read cursor only goes forward in time"
        );
        debug_assert!(n >= cursor.done, "a read cursor's read only grows");
        if n <= cursor.done || t <= cursor.t0 {
            return (n.min(cursor.done), cursor.last);
        }
        let ReadCursor {
            mut loc,
            mut at,
            mut done,
            ..
        } = *cursor;
        let mut last = cursor.last;
        let mut first = done == 0;
        loop {
            let z = *self.format.zone(loc.zone);
            let full = u64::from(z.sectors_per_track - loc.sector).min(n - done);
            let end_of = |len: u64| self.read_piece_end(loc, at, first, len);
            let piece_end = end_of(full);
            let here = HeadPos {
                cylinder: loc.cylinder,
                head: loc.head,
            };
            if piece_end > t {
                let len = if first && self.zero_latency {
                    // Read-on-arrival makes the end a step function of the length:
                    // search it (it rises with the length, as a transfer's end does).
                    let (mut lo, mut hi) = (0, full);
                    while hi - lo > 1 {
                        let mid = lo + (hi - lo) / 2;
                        if end_of(mid) <= t {
                            lo = mid;
                        } else {
                            hi = mid;
                        }
                    }
                    lo
                } else {
                    // slots_time(len) = ceil(len·REV / per_ns) <= x  <=>  len·REV <= x·per_ns.
                    let slot = self
                        .format
                        .slot(loc.zone, loc.cylinder, loc.head, loc.sector);
                    let wait = self.wait_for_slot(at, slot, z.slots);
                    let x = t.0.saturating_sub(at.0 + wait.0);
                    let per_ns = u128::from(self.units_per_ns(z.slots));
                    let len = u128::from(x) * per_ns / u128::from(REV);
                    u64::try_from(len).unwrap_or(u64::MAX).min(full - 1)
                };
                return if len == 0 {
                    (done, last)
                } else {
                    (done + len, here)
                };
            }
            first = false;
            done += full;
            last = here;
            if done == n {
                return (n, last);
            }
            let Some(next) = self.format.next_track(loc) else {
                unreachable!("a read-ahead stream stops at the disk's end");
            };
            at = Nanos(piece_end.0 + self.switch_time(loc, next, Dir::Read).0);
            loc = next;
            // The track was read whole (a piece cut short by `n` ended the walk above):
            // any later question, with `n` as large or larger, passes it the same way.
            *cursor = ReadCursor {
                loc,
                at,
                done,
                last,
                passed: piece_end,
                ..*cursor
            };
        }
    }

    /// A switch between consecutive tracks during a transfer.
    fn switch_time(&self, from: Loc, to: Loc, dir: Dir) -> Nanos {
        if from.cylinder == to.cylinder {
            self.head_switch
        } else {
            let extra = match dir {
                Dir::Read => 0,
                Dir::Write => self.write_settle_extra.0,
            };
            Nanos(self.cylinder_switch.0 + extra)
        }
    }
}
