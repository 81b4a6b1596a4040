//! The moving parts: where the heads are, how the platters' angle follows simulated
//! time, and how long a media transfer takes from a given head position and instant.
//!
//! Time is integer nanoseconds. The platters' angle is an exact function of time:
//! one revolution is `60e9 / rpm` ns, kept as the exact fraction (angles are counted in
//! units of ns·rpm·slots), so no rounding error accumulates over a long run and a
//! replay gives the same answers bit for bit.

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

/// Where the arm and the selected head are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeadPos {
    pub cylinder: u32,
    pub head: u32,
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
            Nanos(self.seek.time(from.cylinder.abs_diff(to.cylinder)).0 + extra)
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
