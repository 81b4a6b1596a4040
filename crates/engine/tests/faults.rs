//! Deterministic fault simulation: thousands of seeds, each a random story told to one
//! array — client reads, writes and flushes in flight together, members dying and
//! coming back (or replaced by blank disks and rebuilt), ranges that fail to read,
//! power cuts that drop what members had not flushed (and take members with them, at
//! once or in the middle of the stripe log's replay), scrubs — checked after every
//! step against an in-memory oracle:
//!
//! - no acknowledged write is lost (after a power cut: every sector holds what the last
//!   completed flush made durable or something written since);
//! - no read ever returns wrong data;
//! - a request fails only when the faults exceed the level's redundancy, and then
//!   loudly (`DataLost` or `Unreadable`), never with wrong data;
//! - after recovery and resync a check scrub finds no mismatch;
//! - with the stripe log, after a power cut on a whole array, the log's replay alone
//!   leaves parity agreeing with the data (a check before the resync finds nothing).
//!
//! A failing seed prints itself; `XRAID_SEED=<seed> cargo test -p xraid-engine --test
//! faults` replays exactly that story (`XRAID_SEEDS=<n>` runs more or fewer seeds,
//! `XRAID_SEEDS_FROM=<i>` another range of them; members refuse writes too unless
//! `XRAID_WRITE_ERRORS=0`; `XRAID_NO_LOGS=1` tells them without bad block logs;
//! `XRAID_LEVELS=5,6` only of those levels).

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

/// Power cuts told across all stories, and those in the middle of a recover.
static POWER_CUTS: AtomicU64 = AtomicU64::new(0);
static POWER_CUTS_MID_RECOVER: AtomicU64 = AtomicU64::new(0);
static POWER_CUTS_KILLING: AtomicU64 = AtomicU64::new(0);
static POWER_CUTS_KILLING_TWO: AtomicU64 = AtomicU64::new(0);
/// Power cuts again while the replay after one ran, a member having died in it.
static POWER_CUTS_IN_REPLAY: AtomicU64 = AtomicU64::new(0);
/// Power cuts after which a member's stripe-log ring failed to read.
static POWER_CUTS_RING_UNREADABLE: AtomicU64 = AtomicU64::new(0);
/// Of those, cuts of an array degraded then (or losing a member with the power).
static POWER_CUTS_RING_LOST_DEGRADED: AtomicU64 = AtomicU64::new(0);
/// Stories whose reads after a power cut found sectors lost, loudly.
static CUTS_LOSING_SECTORS: AtomicU64 = AtomicU64::new(0);
/// Of those, cuts whose lost sectors include rows of a member that died with the
/// power under a write the replay could not work out.
static CUTS_LOSING_UNKNOWN_ROWS: AtomicU64 = AtomicU64::new(0);
/// Client batches run while a resync after a power cut had units still to do.
static BATCHES_MID_RESYNC: AtomicU64 = AtomicU64::new(0);
/// Resyncs after a power cut stopped part-way and started again from their checkpoint.
static RESYNCS_STOPPED: AtomicU64 = AtomicU64::new(0);
/// Power cuts while a resync ran (a kill -9 of the server during it), and of those,
/// cuts after the resync had cleared bits behind it.
static POWER_CUTS_MID_RESYNC: AtomicU64 = AtomicU64::new(0);
static POWER_CUTS_MID_RESYNC_CLEARED: AtomicU64 = AtomicU64::new(0);

use xraid_engine::sim::{SimArray, SimMemberHealth, SimRng};
use xraid_engine::{
    BufId, Engine, EngineConfig, EngineError, Event, MemberIdx, MemberState, Nanos, RequestId,
    SyncKind, WriteIntentSetup, INTENT_HEADER_BYTES,
};
use xraid_layout::{Geometry, Layout, Level, ParityAlgorithm, Raid10Layout};

const SECTOR: usize = 512;

/// What the array must hold, sector by sector.
struct Oracle {
    /// The latest acknowledged contents.
    current: Vec<u8>,
    /// Per sector, contents a power cut may bring back instead: what was there before
    /// writes that no completed flush has covered yet.
    maybe: Vec<HashSet<u64>>,
    /// Sectors a failed write (past the redundancy) may have changed in any way.
    unknown: Vec<bool>,
}

fn hash(bytes: &[u8]) -> u64 {
    // FNV-1a: enough to tell sector contents apart in a test.
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Oracle {
    fn wrote(&mut self, sector: u64, data: &[u8]) {
        for (i, new) in data.chunks(SECTOR).enumerate() {
            let s = sector as usize + i;
            let old = &self.current[s * SECTOR..(s + 1) * SECTOR];
            self.maybe[s].insert(hash(old));
            self.current[s * SECTOR..(s + 1) * SECTOR].copy_from_slice(new);
        }
    }

    fn flushed(&mut self) {
        self.maybe.iter_mut().for_each(HashSet::clear);
    }

    fn expect(&self, sector: u64, got: &[u8]) -> Result<(), String> {
        let at = sector as usize * SECTOR;
        if got == &self.current[at..at + got.len()] {
            return Ok(());
        }
        let Some(bad) = got
            .chunks(SECTOR)
            .zip(self.current[at..].chunks(SECTOR))
            .enumerate()
            .position(|(i, (g, c))| g != c && !self.unknown[sector as usize + i])
        else {
            return Ok(());
        };
        Err(format!(
            "read at sector {sector} returned wrong data in sector {}",
            sector + bad as u64
        ))
    }
}

struct Story {
    array: SimArray,
    oracle: Oracle,
    tolerance: usize,
    /// The faults went past the redundancy at some point: from then on requests may
    /// fail (loudly), and the story ends soon.
    over: bool,
    /// The partial-parity log is on (parity levels): power may fail on a degraded array.
    log_on: bool,
    /// A member was killed since the last completed flush (see `power_cut`).
    died_since_flush: bool,
    /// Members active at the last completed flush (or power cut): one that left the
    /// array since (killed, or failed by the engine, even if back now) excludes a
    /// power cut as `died_since_flush` does, until the engine has made the writes it
    /// left without its rows durable.
    active_at_flush: Vec<bool>,
    /// A power cut cut a recover short: the resync follows once it is done.
    resync_owed: bool,
    /// Sectors a power cut may have left unknown: those written since the last flush
    /// on a member that died with the power (their write may or may not have reached
    /// it, and where it changed another chunk too no redundancy says which; md's PPL
    /// leaves them wrong). They read old or new, or fail loudly: then lost.
    unknown_after_cut: Vec<bool>,
    /// Sectors the array has reported unknown since (such rows of a member that died
    /// with the power): reads of them fail, loudly, until a write covers them; the
    /// story goes on around them.
    unknown_rows: Vec<bool>,
    /// Unknown rows a write covered that no completed flush has made durable: the
    /// markers still name them, and a power cut may leave them unknown again.
    written_unknown: Vec<bool>,
    /// Roles whose device is a replacement that took the role over part way through
    /// its copy and did not finish it, moved to the role's first slot by a power cut:
    /// if it comes back, it is rebuilt whole (see `return_member`).
    half_built: HashSet<usize>,
    /// Per role, the driver slot of the last device seen holding the whole role
    /// (active): a device back in the role from another slot is a replacement that
    /// took the role over part way (its copy unfinished) and is rebuilt whole.
    whole_slot: Vec<MemberIdx>,
    /// The write-intent bitmap (chunk sectors, quiet time) when on: resyncs after
    /// power cuts and the catch-up of returning members visit only its dirty chunks.
    intent: Option<(u64, Nanos)>,
    /// Integrity mode is on: bits may flip silently on members.
    integrity: bool,
    /// Members may also refuse writes (`write_error_range`); off for the stories of
    /// seeds kept from before write errors were told, so that they tell what they did.
    write_errors: bool,
    /// Members with a flipped bit somewhere, until a check has been over everything.
    flipped: HashSet<usize>,
    /// Members that ever had a bit flipped: only their blocks may fail a checksum.
    ever_flipped: HashSet<usize>,
    /// Draws whether a cut that takes a member on a whole RAID-6 takes a second one,
    /// and which: a stream of its own, so that the stories told before cuts took two
    /// go on as they did up to such a cut.
    second_victim: SimRng,
    /// Whether the power fails again during a replay a member died in, and when.
    replay_cut: SimRng,
    /// Whether a member's stripe-log ring fails to read at a restart, and whose.
    ring_error: SimRng,
    /// The same for a restart of a degraded array, or one a member dies with (a
    /// stream of its own, so that the stories told before such cuts stay as they were).
    degraded_ring_error: SimRng,
    /// Whether, and when, a member the power cut takes dies only once the stripe log's
    /// replay is under way (its own stream, so that other stories stay as they were).
    late_death: SimRng,
    /// Whether the power fails while a resync runs, and after how long (its own
    /// stream, so that other stories stay as they were).
    mid_resync_cut: SimRng,
    log: Vec<String>,
}

impl Story {
    fn rng(&mut self) -> &mut SimRng {
        self.array.rng()
    }

    fn active_now(&self) -> Vec<bool> {
        let states = self.array.engine.member_states();
        states.iter().map(|s| *s == MemberState::Active).collect()
    }

    /// Members that hold a fault: failed or rebuilding in the engine's eyes, dead, or
    /// with ranges that fail to read.
    fn faulty(&self) -> Vec<usize> {
        let states = self.array.engine.member_states();
        (0..states.len())
            .filter(|&m| {
                let sim = self.array.role_device(MemberIdx(m as u16));
                states[m] != MemberState::Active
                    || sim.health == SimMemberHealth::Dead
                    || !sim.bad_ranges.is_empty()
                    || !sim.write_error_ranges.is_empty()
                    || !self
                        .array
                        .engine
                        .bad_blocks(self.array.engine.device_slot(MemberIdx(m as u16)))
                        .is_empty()
                    || self.flipped.contains(&m)
            })
            .collect()
    }

    /// A stripe-log ring lost at the last unclean open counts as one more fault until
    /// the resync owed completes: its stripes' parity is in doubt (a write a member
    /// refuses there, which only that parity would hold, fails).
    /// Within the level's redundancy: members faulty, and in any one stripe the
    /// parity members that are not but whose stripe-log ring was lost (their parity
    /// is in doubt there), at most the tolerance.
    fn within_redundancy(&self) -> bool {
        let faulty = self.faulty();
        let lost: Vec<MemberIdx> = self
            .array
            .engine
            .lost_log_rings()
            .into_iter()
            .filter(|m| !faulty.contains(&m.index()))
            .collect();
        let geo = self.array.engine.geometry();
        let doubted = if lost.is_empty() || !geo.level().has_parity() {
            lost.len()
        } else {
            (0..geo.stripes())
                .map(|stripe| {
                    let map = geo.stripe_map(stripe);
                    [Some(map.p()), map.q()]
                        .into_iter()
                        .flatten()
                        .filter(|p| lost.contains(p))
                        .count()
                })
                .max()
                .unwrap_or(0)
        };
        !self.over && faulty.len() + doubted <= self.tolerance
    }

    /// The most sectors one client request of a batch covers.
    fn max_sectors(&self) -> u64 {
        let geo = self.array.engine.geometry();
        u64::from(geo.chunk_sectors().max(8)) * u64::from(geo.raid_disks()) * 2
    }

    fn random_extent(&mut self, max_sectors: u64) -> (u64, u64) {
        let total = self.array.engine.array_sectors();
        let sectors = 1 + self.rng().below(max_sectors.min(total));
        let sector = self.rng().below(total - sectors + 1);
        (sector, sectors)
    }

    /// Up to four non-overlapping reads and writes in flight together.
    /// Notes the slot of every role's device that holds the whole role now.
    fn note_whole_devices(&mut self) {
        for r in 0..self.whole_slot.len() {
            let role = MemberIdx(r as u16);
            if self.array.engine.member_states()[r] == MemberState::Active {
                self.whole_slot[r] = self.array.engine.device_slot(role);
            }
        }
    }

    fn batch(&mut self, max_sectors: u64) -> Result<(), String> {
        self.note_whole_devices();
        // Faults may be repaired during the batch: it is within the redundancy only if
        // it was so both before and after.
        let within_before = self.within_redundancy();
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let mut reads: Vec<(RequestId, BufId, u64)> = Vec::new();
        let mut writes: Vec<(RequestId, BufId, u64, Vec<u8>)> = Vec::new();
        let count = 1 + self.rng().below(4);
        for _ in 0..count {
            let (sector, sectors) = self.random_extent(max_sectors);
            if taken
                .iter()
                .any(|&(s, n)| sector < s + n && s < sector + sectors)
            {
                continue;
            }
            taken.push((sector, sectors));
            let write = self.rng().below(2) == 0;
            // Integrity mode: clients write whole 4 KiB blocks (the export's minimum
            // block size), so that no write leaves a block unchecked.
            let (sector, sectors) = if write && self.integrity {
                let block = xraid_format::BLOCK_SECTORS;
                let total = self.array.engine.array_sectors();
                let start = sector / block * block;
                let end = (sector + sectors)
                    .next_multiple_of(block)
                    .min(total / block * block);
                if end <= start
                    || taken
                        .iter()
                        .any(|&(s, n)| start < s + n && s < end && (s, n) != (sector, sectors))
                {
                    taken.pop();
                    continue;
                }
                taken.pop();
                taken.push((start, end - start));
                (start, end - start)
            } else {
                (sector, sectors)
            };
            let kind = if write { "write" } else { "read" };
            let sync = self.array.engine.sync_progress();
            self.log
                .push(format!("  {kind} {sector}+{sectors} (sync {sync:?})"));
            if write {
                let mut data = vec![0u8; sectors as usize * SECTOR];
                self.rng().fill(&mut data);
                let (id, buf) = self.array.start_write(sector, &data);
                writes.push((id, buf, sector, data));
            } else {
                let (id, buf) = self.array.start_read(sector, sectors);
                reads.push((id, buf, sector));
            }
        }
        let replies = self.array.run();
        let within = within_before && self.within_redundancy();
        let result_of = |id: RequestId| {
            replies
                .iter()
                .find(|r| r.id == id)
                .map(|r| r.result.clone())
                .ok_or_else(|| format!("request {id:?} got no reply"))
        };
        let mut outcome = Ok(());
        for (id, buf, sector, data) in writes {
            match result_of(id)? {
                Ok(()) => {
                    self.oracle.wrote(sector, &data);
                    // Written, they are known again.
                    let span = sector as usize..sector as usize + data.len() / SECTOR;
                    for s in span {
                        self.written_unknown[s] |= self.unknown_rows[s];
                        self.unknown_rows[s] = false;
                        self.oracle.unknown[s] = false;
                    }
                }
                Err(e) if !within && loud(&e) => {
                    // The write may have reached some members: nothing is promised
                    // about those sectors any more, and the story ends after this batch.
                    let n = data.len() / SECTOR;
                    let first = sector as usize;
                    self.oracle.unknown[first..first + n].fill(true);
                    outcome = Err(format!("over redundancy: {e}"));
                }
                Err(e) => return Err(format!("write at {sector} failed within redundancy: {e}")),
            }
            self.array.engine.buffers_mut().free(buf);
        }
        for (id, buf, sector) in reads {
            let result = result_of(id)?;
            let got = self.array.engine.buffers().get(buf).to_vec();
            self.array.engine.buffers_mut().free(buf);
            let n = got.len() / SECTOR;
            let span = sector as usize..sector as usize + n;
            match result {
                Ok(()) => self.oracle.expect(sector, &got)?,
                Err(e) if loud(&e) && self.unknown_rows[span.clone()].contains(&true) => {
                    // Unknown rows fail: every other sector asked for still reads right.
                    for s in span.filter(|&s| !self.unknown_rows[s]) {
                        match self.array.read(s as u64, 1) {
                            Ok(bytes) => self.oracle.expect(s as u64, &bytes)?,
                            Err(e) if !within && loud(&e) => {}
                            Err(e) => {
                                return Err(format!("read of {s} beside unknown rows failed: {e}"))
                            }
                        }
                    }
                }
                Err(e) if !within && loud(&e) => outcome = Err(format!("over redundancy: {e}")),
                Err(e) => return Err(format!("read at {sector} failed within redundancy: {e}")),
            }
        }
        outcome
    }

    /// A client's flush; while a recover runs, sometimes the driver's checkpoint
    /// instead: a flush, then the recover's progress recorded in the superblocks
    /// (`Array::checkpoint_sync`), which a power cut resumes from.
    fn flush(&mut self) -> Result<(), String> {
        let recovering = self
            .array
            .engine
            .sync_progress()
            .filter(|p| p.kind == SyncKind::Recover);
        let record = recovering.filter(|_| self.rng().below(2) == 0);
        let flushed = match record {
            Some(p) => {
                // The driver holds the recover's launches while it records a
                // checkpoint (`Engine::hold_sync`); here at odd units only, drawing
                // nothing, so that stories whose checkpoints fall on even units (or
                // that take none) run as they did before.
                let held = p.done_below % 2 == 1;
                self.log.push(format!(
                    "  checkpoint the recover at unit {}{}",
                    p.done_below,
                    if held { ", its launches held" } else { "" }
                ));
                self.array.engine.hold_sync(held);
                let flushed = self.array.checkpoint();
                self.array.engine.hold_sync(false);
                flushed
            }
            None => {
                self.log.push("  flush".into());
                self.array.flush()
            }
        };
        match flushed {
            Ok(()) => {
                // The driver records what a flush made durable (lists made good too).
                self.array.record_now();
                if let Some(p) = record.filter(|p| p.done_below > 0) {
                    self.array.engine.set_recovery_recorded(p.done_below);
                }
                self.oracle.flushed();
                self.written_unknown.fill(false);
                self.died_since_flush = false;
                self.active_at_flush = self.active_now();
                if self.intent.is_some() {
                    // Quiet time: bits of chunks no longer written may be cleared.
                    let quiet = Nanos(self.rng().below(3_000_000));
                    self.log.push(format!("  quiet {} us", quiet.0 / 1000));
                    self.array.pass_time(quiet);
                }
                Ok(())
            }
            Err(e) if !self.within_redundancy() && loud(&e) => Err(format!("over redundancy: {e}")),
            Err(e) => Err(format!("flush failed within redundancy: {e}")),
        }
    }

    /// Reads the whole array. Past the redundancy a loud error is an answer too: then
    /// sector by sector, so that every sector that still reads is checked; the second
    /// vector says which failed.
    fn read_all(&mut self) -> Result<(Vec<u8>, Vec<bool>), EngineError> {
        let total = self.array.engine.array_sectors();
        let first = self.array.read(0, total);
        if first.is_err() && std::env::var("XRAID_TRACE").is_ok() {
            let slots = 2 * self.array.members.len();
            let events = self.array.take_events();
            eprintln!(
                "read_all failed {:?}: states {:?} unknown {} rings lost {} bad {:?} events {:?}",
                first.as_ref().err(),
                self.array.engine.member_states(),
                self.array.engine.unknown_sectors(),
                self.array.engine.log_rings_lost(),
                (0..slots)
                    .map(|m| self.array.engine.bad_blocks(MemberIdx(m as u16)))
                    .collect::<Vec<_>>(),
                events
            );
        }
        match first {
            Ok(got) => Ok((got, vec![false; total as usize])),
            // So is one after a power cut that took a member under a write, where the
            // replay could not know its rows (checked in `resync_after_cut`). (The
            // read itself may list rows: the redundancy is told after it.)
            Err(e)
                if (!self.within_redundancy()
                    || self.unknown_after_cut.contains(&true)
                    || self.unknown_rows.contains(&true)
                    || self.written_unknown.contains(&true))
                    && loud(&e) =>
            {
                let mut got = vec![0u8; total as usize * SECTOR];
                let mut lost = vec![false; total as usize];
                for s in 0..total {
                    match self.array.read(s, 1) {
                        Ok(bytes) => got[s as usize * SECTOR..][..SECTOR].copy_from_slice(&bytes),
                        Err(e) if loud(&e) => lost[s as usize] = true,
                        Err(e) => return Err(e),
                    }
                }
                Ok((got, lost))
            }
            Err(e) => Err(e),
        }
    }

    /// Runs any sync to its end, then checks every sector (where redundancy allows).
    fn settle(&mut self) -> Result<(), String> {
        self.finish_sync()?;
        self.resync_when_whole()?;
        if std::env::var("XRAID_TRACE").is_ok() {
            let events = self.array.take_events();
            eprintln!(
                "settle: states {:?} bad {:?} events {:?}",
                self.array.engine.member_states(),
                self.array
                    .members
                    .iter()
                    .map(|m| m.bad_ranges.clone())
                    .collect::<Vec<_>>(),
                events
            );
        }
        let (got, lost) = self
            .read_all()
            .map_err(|e| format!("whole-array read failed: {e}"))?;
        for (s, &lost) in lost.iter().enumerate() {
            if !lost {
                self.oracle
                    .expect(s as u64, &got[s * SECTOR..(s + 1) * SECTOR])?;
            } else if self.within_redundancy() && !self.unknown_rows[s] {
                return Err(format!("sector {s} lost within the redundancy"));
            }
        }
        Ok(())
    }

    fn finish_sync(&mut self) -> Result<(), String> {
        let replies = self.array.run_sync();
        if !replies.is_empty() {
            return Err("a sync produced client replies".into());
        }
        for event in self.array.take_events() {
            if let Event::SyncFinished {
                kind,
                completed,
                mismatches,
                unrecoverable,
                ..
            } = event
            {
                self.log.push(format!(
                    "{} ended: completed={completed} mismatches={mismatches} unrecoverable={unrecoverable}",
                    kind.name()
                ));
                if kind == SyncKind::Check && completed && mismatches > 0 {
                    return Err(format!("check found {mismatches} mismatched units"));
                }
                if unrecoverable > 0 && self.within_redundancy() {
                    return Err(format!(
                        "{} found {unrecoverable} unrecoverable units within redundancy",
                        kind.name()
                    ));
                }
            }
        }
        Ok(())
    }

    /// A fault on a healthy member, if the budget allows (or, rarely, past it).
    fn pick_victim(&mut self, allow_over: bool) -> Option<usize> {
        // No new fault before an owed resync has run (as after any power cut): copies
        // torn by the cut would then be chosen between by which one reads — md's
        // resync too takes the first copy that reads whole, and reads before it took
        // the first copy.
        if self.resync_owed {
            return None;
        }
        let faulty = self.faulty();
        if faulty.len() >= self.tolerance && !allow_over {
            return None;
        }
        let n = self.array.members.len() as u64;
        let m = self.rng().below(n) as usize;
        (!faulty.contains(&m)).then_some(m)
    }

    fn kill(&mut self, allow_over: bool) -> Result<(), String> {
        if let Some(m) = self.pick_victim(allow_over) {
            self.log.push(format!("kill member {m}"));
            self.array.kill_member(MemberIdx(m as u16));
            self.died_since_flush = true;
        }
        self.note_over()
    }

    /// Past the redundancy, the story ends after one more batch of checks.
    fn note_over(&mut self) -> Result<(), String> {
        if self.faulty().len() > self.tolerance {
            self.over = true;
            return Err("over redundancy: faults injected past it".into());
        }
        Ok(())
    }

    /// A member to fault (see `pick_victim`) and a range of up to 16 of its sectors.
    fn victim_range(&mut self, allow_over: bool) -> Option<(usize, std::ops::Range<u64>)> {
        let m = self.pick_victim(allow_over)?;
        let member_sectors = self.array.engine.geometry().member_sectors();
        let start = self.rng().below(member_sectors);
        let len = 1 + self.rng().below(16);
        Some((m, start..(start + len).min(member_sectors)))
    }

    /// A range of a member's data that takes no write (a medium error) from now on,
    /// until the member leaves and comes back: within the redundancy the member is
    /// failed by the first write there; the last copy of some data refuses it instead,
    /// and that write fails loudly.
    fn write_error_range(&mut self, allow_over: bool) -> Result<(), String> {
        if let Some((m, range)) = self.victim_range(allow_over) {
            self.log.push(format!(
                "write errors {}..{} on member {m}",
                range.start, range.end
            ));
            self.array
                .role_device_mut(MemberIdx(m as u16))
                .write_error_ranges
                .push(range);
        }
        self.note_over()
    }

    fn bad_range(&mut self, allow_over: bool) -> Result<(), String> {
        if let Some((m, range)) = self.victim_range(allow_over) {
            self.log.push(format!(
                "bad range {}..{} on member {m}",
                range.start, range.end
            ));
            self.array.add_bad_range(MemberIdx(m as u16), range);
        }
        self.note_over()
    }

    /// Integrity mode: a bit flips silently in a block of a healthy member whose
    /// checksum is known (a block flipped before its checksum is known, or one
    /// learned after the flip, cannot be caught: what was stored is all there is).
    fn flip(&mut self, allow_over: bool) -> Result<(), String> {
        let Some(m) = self.pick_victim(allow_over) else {
            return self.note_over();
        };
        let role = MemberIdx(m as u16);
        let slot = self.array.engine.device_slot(role);
        let Some(table) = self.array.engine.checksum_table(slot).cloned() else {
            return Ok(());
        };
        let blocks = table.blocks();
        let block = self.rng().below(blocks);
        if table.get(block) == xraid_format::UNKNOWN {
            return Ok(());
        }
        let byte = block as usize * xraid_format::BLOCK_BYTES
            + self.rng().below(xraid_format::BLOCK_BYTES as u64) as usize;
        let bit = self.rng().below(8) as u8;
        if byte >= self.array.role_device(role).data.len() {
            return Ok(());
        }
        self.log
            .push(format!("flip bit {bit} of byte {byte} on member {m}"));
        self.array.flip_bit(role, byte, bit);
        self.flipped.insert(m);
        self.ever_flipped.insert(m);
        self.note_over()
    }

    /// A failed member comes back (or is replaced by a blank disk) and is rebuilt
    /// while client I/O goes on.
    fn return_member(&mut self) -> Result<(), String> {
        let states = self.array.engine.member_states().to_vec();
        let failed: Vec<usize> = (0..states.len())
            .filter(|&m| states[m] == MemberState::Failed)
            .collect();
        if failed.is_empty() {
            return Ok(());
        }
        let m = failed[self.rng().below(failed.len() as u64) as usize];
        let replace = self.rng().below(2) == 0;
        if let Some(p) = self.array.engine.sync_progress() {
            if p.kind != SyncKind::Recover {
                self.array.engine.cancel_sync();
                self.finish_sync()?;
            }
        }
        self.log
            .push(format!("return member {m} (replace={replace})"));
        self.array
            .return_member(MemberIdx(m as u16), replace)
            .map_err(|e| format!("return member {m}: {e}"))?;
        if self.array.engine.sync_progress().is_none() {
            // A member back with its old contents catches up on the dirty chunks only.
            // Not a replacement that took the role over part way through its copy
            // (another slot than the last whole device's): the array resumes that one
            // from its recovery offset, so the story rebuilds it whole.
            let role = MemberIdx(m as u16);
            let half_built = self.array.engine.device_slot(role) != self.whole_slot[m]
                || self.half_built.remove(&m);
            let started = if replace || self.intent.is_none() || half_built {
                self.array.engine.start_sync(SyncKind::Recover, 0)
            } else {
                self.log.push("  catch up from the bitmap".into());
                self.array
                    .engine
                    .start_sync_where_dirty(SyncKind::Recover, 0)
            };
            started.map_err(|e| format!("start recover: {e}"))?;
        }
        Ok(())
    }

    /// A healthy member is replaced while it serves (md's want_replacement): a new
    /// device is built from it under client I/O, and takes the role over at the end.
    /// Now and then the new device dies on the way (it is dropped; the member serves
    /// on); the member itself may die through `kill` (the copy goes on as a rebuild).
    fn replace(&mut self) -> Result<(), String> {
        if let Some(p) = self.array.engine.sync_progress() {
            if p.kind == SyncKind::Recover {
                // One recover at a time: kill a replacement being built, sometimes.
                let building: Vec<usize> = (0..self.array.members.len())
                    .filter(|&r| self.array.engine.is_replacing(MemberIdx(r as u16)))
                    .collect();
                if !building.is_empty() && self.rng().below(3) == 0 {
                    let r = building[self.rng().below(building.len() as u64) as usize];
                    let slot = self.array.engine.replacement_slot(MemberIdx(r as u16));
                    self.log.push(format!("kill the replacement of member {r}"));
                    self.array.slot_mut(slot).health = SimMemberHealth::Dead;
                }
                return Ok(());
            }
            self.array.engine.cancel_sync();
            self.finish_sync()?;
        }
        let faulty = self.faulty();
        let candidates: Vec<usize> = (0..self.array.members.len())
            .filter(|m| !faulty.contains(m))
            .collect();
        if candidates.is_empty() || self.array.engine.geometry().level() == Level::Raid0 {
            return Ok(());
        }
        let r = candidates[self.rng().below(candidates.len() as u64) as usize];
        self.log.push(format!("replace member {r}"));
        self.array
            .start_replacement(MemberIdx(r as u16))
            .map_err(|e| format!("start replacement of {r}: {e}"))?;
        if self.array.engine.sync_progress().is_none() {
            self.array
                .engine
                .start_sync(SyncKind::Recover, 0)
                .map_err(|e| format!("start the replacement's copy: {e}"))?;
        }
        Ok(())
    }

    /// As md does when a spare is in place: a member left rebuilding with no recover
    /// running (its recover was cancelled or hit an unreadable unit) gets a new one.
    fn resume_recovery(&mut self) -> Result<(), String> {
        let rebuilding = self
            .array
            .engine
            .member_states()
            .contains(&MemberState::Rebuilding);
        if rebuilding && self.array.engine.sync_progress().is_none() {
            self.log.push("recover again".into());
            self.array
                .engine
                .start_sync(SyncKind::Recover, 0)
                .map_err(|e| format!("restart recover: {e}"))?;
        }
        self.resync_when_whole()
    }

    /// Power fails between batches; the array restarts dirty and resyncs. In the
    /// middle of a recover, half the time: members being rebuilt stay so and the
    /// recover resumes from the progress last recorded (see `flush`).
    fn power_cut(&mut self) -> Result<(), String> {
        let recovering = self
            .array
            .engine
            .sync_progress()
            .is_some_and(|p| p.kind == SyncKind::Recover);
        let mid_recover = recovering && self.rng().below(2) == 0;
        // A resync running now (see `resync_after_cut`) is cut off too, after a
        // while: what it cleared behind it stays cleared, and the next resync visits
        // only what is still set.
        let mid_resync = self
            .array
            .engine
            .sync_progress()
            .is_some_and(|p| p.kind == SyncKind::Resync);
        let mut cleared_mid_resync = false;
        if mid_resync {
            let before = self.array.engine.write_intent_dirty();
            let span = Nanos(self.mid_resync_cut.below(30_000_000));
            self.array.pass_time(span);
            cleared_mid_resync = self.array.engine.write_intent_dirty() < before;
        }
        let mid_resync = mid_resync
            && self
                .array
                .engine
                .sync_progress()
                .is_some_and(|p| p.kind == SyncKind::Resync);
        if !mid_recover && !mid_resync {
            self.finish_sync()?;
        }
        // On a whole array the resync makes parity agree again. With a member missing
        // that is md's write hole, which the stripe log closes for the parity levels;
        // mirrors have no hole. Not covered, as in md: a sector that fails to read in a
        // stripe whose write the cut tore (two faults in one stripe for RAID-5; the log
        // cannot recompute parity without it), and a member leaving the array (killed,
        // or failed by the engine — even if it is back, being rebuilt, by the time of
        // the cut) after a write and power failing before that write is durable: the
        // log holds no rows of a member that took the write, so the replay cannot read
        // them (the engine makes such writes durable at once; see below).
        let faulty = self.faulty();
        let parity = self.array.engine.geometry().level().has_parity();
        let rebuilding = self
            .array
            .engine
            .member_states()
            .contains(&MemberState::Rebuilding);
        let roles = self.array.members.len();
        let unreadable = (0..roles).any(|m| {
            !self
                .array
                .role_device(MemberIdx(m as u16))
                .bad_ranges
                .is_empty()
        });
        // A flipped block reads as an error (integrity mode): the same as a bad range.
        let unreadable = unreadable || !self.flipped.is_empty();
        let allowed = faulty.is_empty()
            || (self.within_redundancy() && (self.log_on || !parity) && !unreadable);
        let left_since_flush = self
            .active_now()
            .iter()
            .zip(&self.active_at_flush)
            .any(|(&now, &then)| then && !now);
        // A member that left since the last flush (killed, or failed by the engine)
        // leaves writes whose entries lack its rows: a cut is fair again once the
        // engine has noticed every dead member and made those writes durable, which it
        // does as soon as they finish (`Engine::departures_durable`).
        let states = self.array.engine.member_states().to_vec();
        let unnoticed = (0..roles).any(|m| {
            let dead = self.array.role_device(MemberIdx(m as u16)).health == SimMemberHealth::Dead;
            dead && states[m] != MemberState::Failed
        });
        let exposed = (self.died_since_flush || left_since_flush)
            && (unnoticed || !self.array.engine.departures_durable());
        if !allowed || (rebuilding && !mid_recover) || exposed {
            return Ok(());
        }
        // Now and then a member dies with the power (the restart does not find it) —
        // md's PPL case: the log's partial parity brings back its rows the cut-off
        // writes left alone. Only within the redundancy (a RAID-6 may be missing one
        // member already: its entries are on both parity members' rings), with
        // nothing unreadable and no recover in the way.
        let failed: Vec<usize> = (0..roles)
            .filter(|&m| self.array.engine.member_states()[m] == MemberState::Failed)
            .collect();
        // On a whole RAID-6, half of those cuts take two members: its partial Q and
        // the entries on both parity members' rings answer for that.
        let room = self.tolerance.saturating_sub(faulty.len());
        let dies: Vec<usize> = if self.log_on
            && parity
            && room > 0
            && faulty == failed
            && !unreadable
            && !mid_recover
            && !mid_resync
            && !rebuilding
            && self.rng().below(3) == 0
        {
            let mut alive: Vec<usize> = (0..roles).filter(|m| !failed.contains(m)).collect();
            let first = alive.remove(self.rng().below(alive.len() as u64) as usize);
            let mut dies = vec![first];
            if room >= 2 && self.second_victim.below(2) == 0 {
                dies.push(alive[self.second_victim.below(alive.len() as u64) as usize]);
            }
            dies
        } else {
            Vec::new()
        };
        POWER_CUTS.fetch_add(1, Ordering::Relaxed);
        if mid_recover {
            POWER_CUTS_MID_RECOVER.fetch_add(1, Ordering::Relaxed);
        }
        if mid_resync {
            POWER_CUTS_MID_RESYNC.fetch_add(1, Ordering::Relaxed);
            if cleared_mid_resync {
                POWER_CUTS_MID_RESYNC_CLEARED.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !dies.is_empty() {
            POWER_CUTS_KILLING.fetch_add(1, Ordering::Relaxed);
        }
        if dies.len() == 2 {
            POWER_CUTS_KILLING_TWO.fetch_add(1, Ordering::Relaxed);
        }
        for &d in &dies {
            self.mark_unflushed_on(d);
        }
        self.log.push(format!(
            "power cut{}{} (faulty members {faulty:?}, engine states {:?}, recorded units {:?})",
            if mid_recover {
                " mid-recover"
            } else if mid_resync {
                " mid-resync"
            } else {
                ""
            },
            if dies.is_empty() {
                String::new()
            } else {
                format!(" taking members {dies:?} with it")
            },
            self.array.engine.member_states(),
            (0..roles)
                .map(|m| self.array.engine.recovery_recorded(MemberIdx(m as u16)))
                .collect::<Vec<_>>()
        ));
        // A repair's rewrite that the cut undoes leaves its bad range healed in the
        // model, holding the old bytes, which parity need not agree with.
        let mut heal_undone =
            (0..2 * roles).any(|m| self.array.slot(MemberIdx(m as u16)).unflushed_heal());
        // The restart finds a replacement that took its role over in the role's first
        // slot; one that had not finished is remembered as half built.
        for m in 0..roles {
            let role = MemberIdx(m as u16);
            if self.array.engine.device_slot(role) != role
                && self.array.engine.member_states()[m] != MemberState::Active
            {
                self.half_built.insert(m);
            }
        }
        // Half the time the last member the cut takes answers the restart and dies
        // while the replay reads (or writes) the rings and rows: the replay must plan
        // again without it.
        let late =
            (!dies.is_empty() && self.late_death.below(2) == 0).then(|| dies[dies.len() - 1]);
        let late_steps = self.late_death.below(12);
        // Now and then a member's ring fails to read at the restart: the replay
        // cannot vouch for the stripes whose entries it held. On a whole array the
        // resync owed puts them right; on a degraded one (or one a member dies with)
        // that is a second fault in those stripes, md's write hole, and reads of the
        // missing member's rows there must fail loudly, never return wrong data.
        for m in 0..roles {
            self.array.members[m].ring_unreadable = false;
        }
        let ring_unreadable = if faulty.is_empty() && dies.is_empty() {
            (self.log_on && parity && self.ring_error.below(6) == 0)
                .then(|| self.ring_error.below(roles as u64) as usize)
        } else {
            let present: Vec<usize> = (0..roles)
                .filter(|m| !failed.contains(m) && !dies.contains(m))
                .collect();
            (self.log_on && parity && !present.is_empty() && self.degraded_ring_error.below(6) == 0)
                .then(|| present[self.degraded_ring_error.below(present.len() as u64) as usize])
        };
        if let Some(m) = ring_unreadable {
            POWER_CUTS_RING_UNREADABLE.fetch_add(1, Ordering::Relaxed);
            if !faulty.is_empty() || !dies.is_empty() {
                POWER_CUTS_RING_LOST_DEGRADED.fetch_add(1, Ordering::Relaxed);
            }
            self.log
                .push(format!("member {m}'s ring fails to read at the restart"));
        }
        let intent = self.intent;
        let restart = |array: &mut SimArray| {
            if let Some(m) = ring_unreadable {
                array.members[m].ring_unreadable = true;
            }
            for &d in dies.iter().filter(|&&d| Some(d) != late) {
                let member = MemberIdx(d as u16);
                array.kill_member(member);
                array.engine.fail_member(member);
            }
            restore_intent(array, intent);
        };
        if mid_recover {
            self.array.power_cut_now_resuming_with(restart);
        } else if mid_resync {
            self.array.power_cut_now_with(restart);
        } else {
            self.array.power_cut_with(restart);
        }
        if let Some(d) = late {
            for _ in 0..late_steps {
                if !self.array.engine.log_recovering() || !self.array.step() {
                    break;
                }
            }
            self.log.push(format!(
                "member {d} dies during the replay ({} steps in)",
                late_steps
            ));
            self.array.kill_member(MemberIdx(d as u16));
            // Half the time the power fails again before the replay is done, and the
            // member answers that restart (a loose cable): recorded as faulty by then,
            // it stays out; if not, the rings must still owe the replay, which runs
            // again with it. Back as current after the rings said the replay was done,
            // it would hold rows the replay never wrote.
            if self.replay_cut.below(2) == 0 {
                // Some steps on, or (half the time) a few steps after the rings'
                // marker that ends the replay went out.
                let at_marker = self.replay_cut.below(2) == 0;
                while at_marker
                    && self.array.engine.log_recovering()
                    && !self.array.in_flight().any(|io| {
                        io.area == xraid_engine::Area::Log && io.kind == xraid_engine::IoKind::Write
                    })
                {
                    if !self.array.step() {
                        break;
                    }
                }
                let more = self.replay_cut.below(if at_marker { 4 } else { 16 });
                for _ in 0..more {
                    if !self.array.engine.log_recovering() || !self.array.step() {
                        break;
                    }
                }
                if self.array.engine.log_recovering() {
                    self.log.push(format!(
                        "the power fails again {more} steps on{}; member {d} answers the restart",
                        if at_marker {
                            " from the replay's marker"
                        } else {
                            ""
                        }
                    ));
                    POWER_CUTS_IN_REPLAY.fetch_add(1, Ordering::Relaxed);
                    self.array.role_device_mut(MemberIdx(d as u16)).health =
                        SimMemberHealth::Healthy;
                    heal_undone |= (0..2 * roles)
                        .any(|m| self.array.slot(MemberIdx(m as u16)).unflushed_heal());
                    self.array
                        .power_cut_now_with(|array| restore_intent(array, intent));
                }
            }
        }
        // With the stripe log, on a whole array, the log's replay alone must leave
        // parity agreeing with the data everywhere (md's PPL answers a crash so, with
        // no resync): a check before the resync finds nothing.
        // (Not while a replacement's copy resumed by the restart runs: the check
        // waits for no sync.)
        let whole = self.array.engine.is_whole();
        let resumed = self.array.engine.sync_progress().is_some();
        if self.log_on && whole && !unreadable && !heal_undone && !resumed {
            // The replay runs to its end first; entries whose rows it could not read
            // are left to the resync (and counted).
            self.array.run();
            // A member that refused a write of the replay is failed by it: no check then.
            if self.array.engine.stats().log_entries_skipped > 0 || !self.array.engine.is_whole() {
                return self.resync_after_cut();
            }
            self.log.push("check after the log's replay".into());
            self.array
                .engine
                .start_sync(SyncKind::Check, 0)
                .map_err(|e| format!("start check: {e}"))?;
            self.finish_sync()?;
        }
        self.resync_after_cut()
    }

    /// Marks the array sectors on data member `member` written since the last flush as
    /// ones the coming power cut may leave unknown (lost, loudly).
    fn mark_unflushed_on(&mut self, member: usize) {
        let geo = *self.array.engine.geometry();
        let chunk = u64::from(geo.chunk_sectors());
        let per_stripe = chunk * u64::from(geo.data_disks());
        for (s, maybe) in self.oracle.maybe.iter().enumerate() {
            if maybe.is_empty() {
                continue;
            }
            let stripe = s as u64 / per_stripe;
            let data_index = ((s as u64 % per_stripe) / chunk) as u16;
            if geo.stripe_map(stripe).data_member(data_index).index() == member {
                self.unknown_after_cut[s] = true;
            }
        }
    }

    /// After a power cut: the resync of what may be torn (where the bitmap says so),
    /// and the oracle's check of every sector.
    fn resync_after_cut(&mut self) -> Result<(), String> {
        // The restart found each role's device in the role's first slot.
        self.note_whole_devices();
        // A recover resumed by the restart runs first; the resync follows it.
        let resumed = self.array.engine.sync_progress().is_some();
        if !resumed {
            self.start_resync()?;
        }
        if self.array.engine.unknown_sectors() > 0 {
            self.log.push(format!(
                "  the replay left {} sectors unknown",
                self.array.engine.unknown_sectors()
            ));
        }
        // Every sector holds what was durable or something written since; from now
        // on that is what the array holds.
        let (got, lost) = self
            .read_all()
            .map_err(|e| format!("read after power cut: {e}"))?;
        if std::env::var("XRAID_TRACE").is_ok() {
            let events = self.array.take_events();
            eprintln!(
                "after cut: states {:?} events {:?}",
                self.array.engine.member_states(),
                events
            );
        }
        for (s, bytes) in got.chunks(SECTOR).enumerate() {
            let at = s * SECTOR;
            let same = bytes == &self.oracle.current[at..at + SECTOR];
            if !same
                && !self.oracle.maybe[s].contains(&hash(bytes))
                && std::env::var("XRAID_TRACE").is_ok()
                && self.array.engine.geometry().level().has_parity()
            {
                let geo = *self.array.engine.geometry();
                let per = geo.chunk_sectors() as u64 * geo.data_disks() as u64;
                let stripe = s as u64 / per;
                let map = geo.stripe_map(stripe);
                let idx = ((s as u64 % per) / geo.chunk_sectors() as u64) as u16;
                let row = (s as u64 % per) % geo.chunk_sectors() as u64;
                let ms = geo.member_sector(stripe, row as u32) as usize * SECTOR;
                for m in 0..geo.raid_disks() as usize {
                    eprintln!("member {m}: {:02x?} other {:02x?} (data member of idx {idx}: {:?}, p {:?})", &self.array.members[m].data[ms..ms + 8], &self.array.other_slots[m].data[ms..ms + 8], map.data_member(idx), map.p());
                }
                eprintln!(
                    "got {:02x?} current {:02x?}",
                    &bytes[..8],
                    &self.oracle.current[at..at + 8]
                );
            }
            if !same && !lost[s] && !self.oracle.maybe[s].contains(&hash(bytes)) {
                return Err(format!(
                    "after a power cut sector {s} holds data never written there"
                ));
            }
            // Within the redundancy only a member dying under a write loses rows.
            if lost[s]
                && self.within_redundancy()
                && !self.unknown_after_cut[s]
                && !self.unknown_rows[s]
                && !self.written_unknown[s]
            {
                return Err(format!(
                    "after a power cut sector {s} is lost within the redundancy"
                ));
            }
        }
        let unknown_lost = lost
            .iter()
            .zip(&self.unknown_after_cut)
            .any(|(&l, &u)| l && u);
        // Lost only where a member died under a write: the story goes on around them.
        let only_unknown_rows = self.within_redundancy()
            && lost.iter().enumerate().all(|(s, &l)| {
                !l || self.unknown_after_cut[s] || self.unknown_rows[s] || self.written_unknown[s]
            });
        self.unknown_after_cut.fill(false);
        // What failed to read is lost, loudly: nothing is promised of it any more.
        for (s, &lost) in lost.iter().enumerate() {
            if lost {
                self.oracle.unknown[s] = true;
            } else {
                self.oracle.current[s * SECTOR..(s + 1) * SECTOR]
                    .copy_from_slice(&got[s * SECTOR..(s + 1) * SECTOR]);
            }
        }
        self.oracle.flushed();
        self.written_unknown.fill(false);
        if lost.contains(&true) {
            CUTS_LOSING_SECTORS.fetch_add(1, Ordering::Relaxed);
            if unknown_lost {
                CUTS_LOSING_UNKNOWN_ROWS.fetch_add(1, Ordering::Relaxed);
            }
            if !only_unknown_rows {
                return Err("over redundancy: sectors lost after a power cut".into());
            }
            for (s, &l) in lost.iter().enumerate() {
                self.unknown_rows[s] |= l;
            }
            let unknown: Vec<usize> = (0..self.unknown_rows.len())
                .filter(|&s| self.unknown_rows[s])
                .collect();
            self.log.push(format!("  sectors unknown: {unknown:?}"));
        }
        self.active_at_flush = self.active_now();
        // Clients go on while the resync runs: their writes and reads meet units it has
        // done and units it has yet to reach.
        if !resumed && self.array.engine.sync_progress().is_some() {
            let batches = self.rng().below(4);
            for _ in 0..batches {
                if self.array.engine.sync_progress().is_some() {
                    BATCHES_MID_RESYNC.fetch_add(1, Ordering::Relaxed);
                }
                self.batch(self.max_sectors())?;
            }
        }
        // Sometimes the power fails again while it runs (a server killed during its
        // resync).
        let resyncing = self
            .array
            .engine
            .sync_progress()
            .is_some_and(|p| p.kind == SyncKind::Resync);
        if !resumed && resyncing && self.mid_resync_cut.below(3) == 0 {
            self.power_cut()?;
            // Unless a fault kept the cut away, its own resync has run by now.
            return self.finish_sync();
        }
        // Sometimes the resync is stopped and started again from its checkpoint (a
        // server stopped and started): what it had done stays done.
        if !resumed && self.rng().below(4) == 0 {
            if let Some(p) = self.array.engine.sync_progress() {
                self.log.push(format!(
                    "  resync stopped at unit {}, started again from there",
                    p.done_below
                ));
                RESYNCS_STOPPED.fetch_add(1, Ordering::Relaxed);
                self.array.engine.cancel_sync();
                self.finish_sync()?;
                self.array
                    .engine
                    .start_sync_where_dirty(SyncKind::Resync, p.done_below)
                    .map_err(|e| format!("start resync again: {e}"))?;
                for _ in 0..self.rng().below(3) {
                    self.batch(self.max_sectors())?;
                }
            }
        }
        // Resync before any new fault: without the log, parity not yet matching data
        // and a second fault would be md's write hole.
        if resumed {
            self.resync_owed = true;
            return self.resync_when_whole();
        }
        self.finish_sync()
    }

    /// After a power cut in the middle of a recover: once the recover has made the
    /// array whole, the resync follows (as md's does after its recovery, and the
    /// driver's `Array::maintain`); a recover that could not finish leaves it owed.
    fn resync_when_whole(&mut self) -> Result<(), String> {
        if !self.resync_owed {
            return Ok(());
        }
        self.finish_sync()?;
        if !self.array.engine.is_whole() {
            return Ok(());
        }
        self.resync_owed = false;
        self.log.push("resync after the recover".into());
        self.start_resync()?;
        self.finish_sync()
    }

    fn start_resync(&mut self) -> Result<(), String> {
        self.array
            .engine
            .start_sync_where_dirty(SyncKind::Resync, 0)
            .map_err(|e| format!("start resync: {e}"))
    }

    fn scrub(&mut self) -> Result<(), String> {
        if self.array.engine.sync_progress().is_some() || !self.within_redundancy() {
            return Ok(());
        }
        // A RAID-6 missing one member still has redundancy to check (Q against the
        // data rebuilt through P, where the member held data).
        let states = self.array.engine.member_states();
        let failed = states.iter().filter(|&&s| s == MemberState::Failed).count();
        let whole = states.iter().all(|&s| s == MemberState::Active);
        let raid6_missing_one = self.array.engine.geometry().level() == Level::Raid6
            && failed == 1
            && states
                .iter()
                .all(|&s| s == MemberState::Active || s == MemberState::Failed);
        // Not where the only parity left may be in doubt: a ring lost at the last
        // unclean open leaves its stripes' parity to the resync owed, which waits
        // for the array to be whole (md's write hole; reads there are checked).
        if !whole && (!raid6_missing_one || self.array.engine.log_rings_lost()) {
            return Ok(());
        }
        self.log.push("check".into());
        self.array
            .engine
            .start_sync(SyncKind::Check, 0)
            .map_err(|e| format!("start check: {e}"))?;
        self.finish_sync()?;
        // The check read every block and repaired those that failed their checksums.
        if self.array.engine.sync_progress().is_none() && self.within_redundancy() {
            self.flipped.clear();
        }
        Ok(())
    }
}

fn loud(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::DataLost { .. }
            | EngineError::Unreadable { .. }
            | EngineError::Unwritable { .. }
            | EngineError::UnknownRowsFull { .. }
    )
}

/// The levels `XRAID_LEVELS` names (`1,4,5,6,10`), if set.
fn story_levels() -> Option<Vec<Level>> {
    let list = std::env::var("XRAID_LEVELS").ok()?;
    let levels: Vec<Level> = list
        .split(',')
        .map(|l| match l.trim() {
            "1" => Level::Raid1,
            "4" => Level::Raid4,
            "5" => Level::Raid5,
            "6" => Level::Raid6,
            "10" => Level::Raid10,
            other => panic!("XRAID_LEVELS takes 1, 4, 5, 6 and 10, not {other:?}"),
        })
        .collect();
    Some(levels)
}

fn random_geometry(rng: &mut SimRng) -> Geometry {
    use ParityAlgorithm::*;
    let levels = [
        Level::Raid1,
        Level::Raid4,
        Level::Raid5,
        Level::Raid5,
        Level::Raid6,
        Level::Raid6,
        Level::Raid10,
    ];
    let drawn = rng.below(levels.len() as u64) as usize;
    // `XRAID_LEVELS=5,6` tells stories of those levels only (the same draws
    // otherwise, so that unset it changes no story).
    let level = match story_levels() {
        Some(only) => only[drawn % only.len()],
        None => levels[drawn],
    };
    let layout = match level {
        Level::Raid5 | Level::Raid6 => {
            let all = [
                LeftAsymmetric,
                RightAsymmetric,
                LeftSymmetric,
                RightSymmetric,
                ParityFirst,
                ParityLast,
            ];
            Layout::Parity(all[rng.below(6) as usize])
        }
        Level::Raid10 => {
            let all = [(2, 1, false), (1, 2, false), (1, 2, true)];
            let (near_copies, far_copies, offset) = all[rng.below(3) as usize];
            Layout::Raid10(Raid10Layout {
                near_copies,
                far_copies,
                offset,
            })
        }
        _ => Layout::default_for(level),
    };
    let disks = level.min_members() + rng.below(4) as u16;
    let chunk = 8u32 << rng.below(3);
    let member_sectors = u64::from(chunk) * (4 + rng.below(4));
    Geometry::new(level, layout, disks, chunk, member_sectors)
        .unwrap_or_else(|e| panic!("{level:?} {layout:?} {disks} disks: {e}"))
}

fn tolerance(geo: &Geometry) -> usize {
    match geo.level() {
        Level::Raid0 => 0,
        Level::Raid1 => usize::from(geo.raid_disks()) - 1,
        // Two failures survive only if they are not copies of each other.
        Level::Raid10 => 1,
        level => usize::from(level.parity_count()),
    }
}

/// The write-intent bitmap of a restarted engine (`intent`: the story's chunk size and
/// quiet time, when it keeps one): the engine's memory is gone, and the bits come back
/// from a member's bitmap.
fn restore_intent(array: &mut SimArray, intent: Option<(u64, Nanos)>) {
    let Some((chunk_sectors, quiet)) = intent else {
        return;
    };
    let states = array.engine.member_states().to_vec();
    let first = (0..states.len())
        .find(|&m| states[m] == MemberState::Active)
        .expect("an active member");
    let image = array.members[first].bitmap.clone();
    let setup = intent_setup(&array.engine, chunk_sectors, quiet, Some(image));
    array.engine.enable_write_intent(setup);
    array.engine.allow_write_intent_clears(true);
}

/// A bitmap of `chunk_sectors` per bit over the engine's sync range (array sectors
/// for RAID-10, member sectors otherwise): blank and written whole, or as found in
/// `image`.
fn intent_setup(
    engine: &Engine,
    chunk_sectors: u64,
    quiet: Nanos,
    image: Option<Vec<u8>>,
) -> WriteIntentSetup {
    let geo = engine.geometry();
    let range = if geo.level() == Level::Raid10 {
        geo.array_sectors()
    } else {
        geo.member_sectors()
    };
    let chunks = range.div_ceil(chunk_sectors);
    let bytes = (INTENT_HEADER_BYTES as u64 + chunks.div_ceil(8)).next_multiple_of(512) as usize;
    let rewrite = image.is_none();
    let mut image = image.unwrap_or_default();
    image.resize(bytes, 0);
    WriteIntentSetup {
        image,
        chunks,
        chunk_sectors,
        block_bytes: 512,
        clear_after: quiet,
        rewrite,
    }
}

/// Tells one story; `Err` says what went wrong.
fn run_seed(seed: u64) -> Result<(), (String, Vec<String>)> {
    tell(seed, false)
}

/// Tells one story, with members that refuse writes among its faults if
/// `write_errors`, and bad block logs unless `XRAID_NO_LOGS` says otherwise.
fn tell(seed: u64, write_errors: bool) -> Result<(), (String, Vec<String>)> {
    tell_with(
        seed,
        write_errors,
        std::env::var_os("XRAID_NO_LOGS").is_none(),
    )
}

/// [`tell`], with bad block logs on the members if `logs`.
fn tell_with(seed: u64, write_errors: bool, logs: bool) -> Result<(), (String, Vec<String>)> {
    let mut rng = SimRng::new(seed);
    let geo = random_geometry(&mut rng);
    let mut array = SimArray::new(geo, rng.next_u64());
    // The partial-parity log on two seeds in three (parity levels), with rings from
    // just big enough (entries wait for checkpoints) to roomy.
    let parity_count = geo.level().parity_count();
    let log_on = parity_count > 0 && rng.below(3) != 0;
    let entry =
        xraid_engine::log_entry_max_sectors(geo.data_disks(), geo.chunk_sectors(), parity_count);
    let log_sectors = if log_on {
        2 * entry + rng.below(4 * entry)
    } else {
        0
    };
    array.engine.set_config(EngineConfig {
        max_read_errors: 2 + rng.below(20) as u32,
        sync_min_bytes_per_sec: 1_000_000,
        sync_max_bytes_per_sec: [0, 50_000_000][rng.below(2) as usize],
        sync_window: 1 + rng.below(4) as usize,
        log_sectors,
        log_tag: seed,
        stall_timeout: EngineConfig::default().stall_timeout,
        repair_writes: true,
        // Durable (FUA) log writes, as the real driver has them, on one seed in two
        // (a bit of the seed, not a draw: the stories go on as they did).
        fua_writes: seed & 2 == 0,
    });
    // The write-intent bitmap on one seed in two (levels with redundancy), with chunks
    // from a few sectors (many bits, many rounds) to large, and quiet times from none
    // to longer than a story's pauses.
    let intent = (geo.level().parity_count() > 0 || tolerance(&geo) > 0)
        .then(|| rng.below(2) == 0)
        .filter(|on| *on)
        .map(|_| {
            let chunk_sectors = 8u64 << rng.below(7);
            let quiet = Nanos([0, 500_000, 2_000_000, 10_000_000][rng.below(4) as usize]);
            (chunk_sectors, quiet)
        });
    if let Some((chunk_sectors, quiet)) = intent {
        let setup = intent_setup(&array.engine, chunk_sectors, quiet, None);
        array.engine.enable_write_intent(setup);
        array.engine.allow_write_intent_clears(true);
    }
    // Integrity mode on one seed in two.
    let integrity = rng.below(2) == 0;
    if integrity {
        array.enable_integrity();
    }
    // Bad block logs, as every member mdadm or xraid makes has one: a mirror copy
    // that refuses a write another copy took keeps serving, the range in its log.
    // (Without a log, `XRAID_NO_LOGS=1`, such a copy is failed, which reaches the
    // limit RELIABILITY.md describes with write errors on.)
    if logs {
        array.enable_bad_block_logs(512);
    }
    // Half the stories record lists made good as the driver does, after a flush and
    // with the engine going on meanwhile (here: at the next client flush, or with the
    // next range added), so that a power cut can come first; the others at once.
    let late_records = logs && SimRng::new(seed ^ 0x1ec0).below(2) == 0;
    array.defer_records = late_records;
    array.defer_only_clears = late_records;
    let total = geo.array_sectors() as usize * SECTOR;
    let mut initial = vec![0u8; total];
    array.rng().fill(&mut initial);
    array.write(0, &initial).expect("initial fill");
    array.flush().expect("initial flush");
    let mut story = Story {
        array,
        oracle: Oracle {
            current: initial,
            maybe: vec![HashSet::new(); total / SECTOR],
            unknown: vec![false; total / SECTOR],
        },
        tolerance: tolerance(&geo),
        over: false,
        log_on,
        died_since_flush: false,
        active_at_flush: vec![true; usize::from(geo.raid_disks())],
        resync_owed: false,
        unknown_after_cut: vec![false; total / SECTOR],
        unknown_rows: vec![false; total / SECTOR],
        written_unknown: vec![false; total / SECTOR],
        half_built: HashSet::new(),
        whole_slot: (0..geo.raid_disks()).map(MemberIdx).collect(),
        second_victim: SimRng::new(seed ^ 0x7770),
        replay_cut: SimRng::new(seed ^ 0x2c07),
        ring_error: SimRng::new(seed ^ 0x0e11),
        degraded_ring_error: SimRng::new(seed ^ 0x0e12),
        late_death: SimRng::new(seed ^ 0x1a7e),
        mid_resync_cut: SimRng::new(seed ^ 0x5e5c),
        intent,
        integrity,
        write_errors,
        flipped: HashSet::new(),
        ever_flipped: HashSet::new(),
        log: vec![format!(
            "{:?} {:?} {} disks, chunk {} sectors, {} member sectors, log ring {} sectors, bitmap {intent:?}, integrity {integrity}, bad block logs {logs}, lists made good recorded late {late_records}",
            geo.level(),
            geo.layout(),
            geo.raid_disks(),
            geo.chunk_sectors(),
            geo.member_sectors(),
            log_sectors
        )],
    };
    let max_sectors = story.max_sectors();
    let result = (|| {
        for _ in 0..40 {
            story.resume_recovery()?;
            // The driver's part of md's rule: on a whole array, a bitmap superblock
            // with a current events_cleared goes out, and bits may be cleared again.
            let whole = story.array.engine.is_whole();
            if whole && story.intent.is_some() {
                story.array.engine.allow_write_intent_clears(true);
            }
            let roll = story.rng().below(100);
            let over = story.rng().below(50) == 0;
            let step = match roll {
                0..=5 if story.integrity => story.flip(over),
                0..=49 => story.batch(max_sectors),
                50..=57 => story.flush(),
                58..=65 => story.kill(over),
                66..=75 if story.write_errors && story.rng().below(3) == 0 => {
                    story.write_error_range(over)
                }
                66..=75 => story.bad_range(over),
                76..=87 => story.return_member(),
                88..=92 => story.power_cut(),
                93..=95 => story.replace(),
                _ => story.scrub(),
            };
            // A block fails its checksum only where a bit was flipped: anything else
            // (a table page not written before a flush, checksums not forgotten
            // where a power cut tore writes) would be a false alarm.
            for m in 0..story.array.members.len() {
                let found = story.array.engine.checksum_mismatches(MemberIdx(m as u16));
                if found > 0 && !story.ever_flipped.contains(&m) {
                    return Err(format!(
                        "member {m} failed {found} checksums but no bit flipped there"
                    ));
                }
            }
            match step {
                // Past the redundancy the story ends: one more batch and a full read,
                // where every read that succeeds must still be right.
                Err(e) if e.starts_with("over redundancy") => {
                    story.over = true;
                    story.log.push(e);
                    let _ = story.batch(max_sectors);
                    return story.settle();
                }
                other => other?,
            }
        }
        story.settle()?;
        story.scrub()
    })();
    let buffers = story.array.engine.buffers().live();
    match result {
        Ok(()) if story.array.engine.is_idle() && buffers == 0 => Ok(()),
        Ok(()) => Err((format!("left work or {buffers} buffers behind"), story.log)),
        Err(e) => Err((e, story.log)),
    }
}

#[test]
fn thousands_of_fault_stories_lose_nothing() {
    let seeds = common::story_seeds(2000, common::spread(0x5eed));
    // Members may refuse writes too (a third of the bad ranges), unless
    // XRAID_WRITE_ERRORS=0 tells the stories without (as before 2026-11-26).
    let write_errors = std::env::var("XRAID_WRITE_ERRORS").map_or(true, |v| v != "0");
    // The replay line names what changes the story.
    let replay: String = ["XRAID_WRITE_ERRORS", "XRAID_NO_LOGS", "XRAID_LEVELS"]
        .iter()
        .filter_map(|name| Some(format!("{name}={} ", std::env::var(name).ok()?)))
        .collect();
    let stories = seeds.len();
    for seed in seeds {
        if let Err((error, log)) = tell(seed, write_errors) {
            panic!(
                "seed {seed} failed: {error}\nstory:\n  {}\nreplay: {replay}XRAID_SEED={seed} cargo test -p xraid-engine --test faults",
                log.join("\n  ")
            );
        }
    }
    eprintln!(
        "{stories} stories, {} power cuts ({} in the middle of a recover, {} taking a member with them, {} of those two; {} more during the replay after one; {} with a ring unreadable at the restart, {} of those degraded; {} leaving sectors lost, loudly, {} of those a dying member's unknowable rows), {} client batches while a resync ran, {} resyncs stopped and started again, {} power cuts while a resync ran, {} of those after it had cleared bits behind it since the last step",
        POWER_CUTS.load(Ordering::Relaxed),
        POWER_CUTS_MID_RECOVER.load(Ordering::Relaxed),
        POWER_CUTS_KILLING.load(Ordering::Relaxed),
        POWER_CUTS_KILLING_TWO.load(Ordering::Relaxed),
        POWER_CUTS_IN_REPLAY.load(Ordering::Relaxed),
        POWER_CUTS_RING_UNREADABLE.load(Ordering::Relaxed),
        POWER_CUTS_RING_LOST_DEGRADED.load(Ordering::Relaxed),
        CUTS_LOSING_SECTORS.load(Ordering::Relaxed),
        CUTS_LOSING_UNKNOWN_ROWS.load(Ordering::Relaxed),
        BATCHES_MID_RESYNC.load(Ordering::Relaxed),
        RESYNCS_STOPPED.load(Ordering::Relaxed),
        POWER_CUTS_MID_RESYNC.load(Ordering::Relaxed),
        POWER_CUTS_MID_RESYNC_CLEARED.load(Ordering::Relaxed)
    );
}

/// The stories as they were told before members refused writes in them
/// (`XRAID_WRITE_ERRORS=0`), 1,000 on every run: the seeds tell other stories with
/// write errors, and these stay covered.
#[test]
fn a_thousand_stories_without_write_errors_lose_nothing() {
    if std::env::var_os("XRAID_SEED").is_some() {
        return;
    }
    for i in 0..1000u64 {
        let seed = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed;
        if let Err((error, log)) = tell(seed, false) {
            panic!(
                "seed {seed} failed: {error}\nstory:\n  {}\nreplay: XRAID_WRITE_ERRORS=0 XRAID_SEED={seed} cargo test -p xraid-engine --test faults thousands",
                log.join("\n  ")
            );
        }
    }
}

/// Seeds beyond the default 2,000 that once failed (each found a gap, since closed);
/// kept so that every test run tells their stories again. A change to the stories
/// changes what a seed tells, so these are a smoke test, not a proof.
#[test]
fn the_seeds_that_found_gaps_pass() {
    let seeds = [
        // The story's check of a RAID-6 missing P compared the data with Q, whose
        // ring was lost at the cut (in doubt until the resync owed, which waits for
        // the array to be whole): the story no longer checks there (2026-11-29).
        821_456_055_365_057_562,
        // The story took a replacement that had taken its role over half built (in
        // the slot the role's original device had held before an earlier
        // replacement) for a member back, and caught it up from the bitmap only.
        9_423_390_309_228_867_359,
        // A marker naming unknown rows reached one ring before a cut; the next open
        // wrote none, and the one after, that ring unreadable, forgot them
        // (2026-11-27, found once the stories went on past unknown rows).
        15_587_522_901_455_182_054,
        1_940_494_889_538_086_635,
        // The same with the one ring left a member's back since: wiped when it came,
        // no marker had reached it.
        11_934_823_807_726_139_549,
        3_943_308_148_353_575_338,
        // A bitmap write failing as its member died ended the whole-bitmap round a
        // replacement taking the role over had just started (2026-11-27): the new
        // device lost its bits at the cut, and a member back caught up too little.
        9_320_719_860_955_080_590,
        // RAID-10 read between a crash and its owed resync (owe_resync).
        14_255_565_950_771_681_200,
        // A member joining a recover reset the others' recorded progress.
        11_428_516_483_237_352_702,
        // A member failing between a write and the power cut (the stories' exclusion).
        16_457_716_730_898_841_872,
        // A replacement resumed after a power cut below its checkpoint.
        17_154_181_661_179_543_078,
        // A mirror recover copying from the replaced member while a resync is owed.
        18_140_036_187_887_152_859,
        // The check after the log's replay while a replacement's copy resumed.
        9_208_251_746_700_153_119,
        // A former member built again as a replacement, its ring's stale entry replayed.
        7_147_192_369_432_286_795,
        // Cuts after a member left, once the engine made its writes durable.
        17_732_233_145_095_186_241,
        17_026_080_507_310_395_532,
        11_113_052_473_078_067_451,
        12_415_768_384_695_867_392,
        9_272_323_323_835_077_553,
        // Members dying with the power (the partial parity): a gone chunk's written
        // rows left torn between P and Q; a P member's ring gone with it (Q resynced
        // without P); an entry past the ring's bound dropping its partial parity; an
        // earlier entry's replay rewriting rows a later one counted on.
        3_326_683_750_974_654_015,
        2_969_428_286_667_467_589,
        3_340_207_749_624_814_641,
        15_909_330_077_231_845_187,
        // The log's checkpoints left replacements unflushed, and declared durable
        // entries whose writes a replacement (taking its role over) could lose.
        15_488_209_250_617_407_096,
        11_071_247_316_803_817_335,
        // A RAID-6 missing a member whose stripe's P member dies with the power (the
        // entries now on both parity rings), and a write that held one ring's room
        // while it waited for the other's.
        3_874_494_654_581_067_642,
        13_077_580_693_460_667_493,
        // Two writes of one checksum-table page in flight, the older landing last.
        2_274_648_606_167_995_363,
        // A RAID-6 entry whose second ring had no room went to its first ring only,
        // and that ring's member died with the power (found once markers went out as
        // durable writes; the entry now gives its seq back and goes to both later).
        2_742_247_101_040_949_516,
        // A whole RAID-6's full-stripe write (an entry with nothing to carry) logged on
        // P's ring only; P and a data member died with the power, and the replay of
        // the stripe's earlier entry wrote Q from a partial parity the later write had
        // made stale.
        1_484_341_991_224_288_798,
        // A degraded read used a block from a member failed meanwhile (a checksum
        // mismatch in another read of it, its replacement taking the role over); and
        // a read from a member whose replacement was done meanwhile, which must still
        // serve (it is checked against the table of the device it went to).
        4_543_560_435_652_374_088,
        16_429_521_914_674_922_756,
        // The mirror's timing, before the log's checkpoints flushed replacements.
        5_604_059_148_568_132_654,
    ];
    for seed in seeds {
        if let Err((error, log)) = run_seed(seed) {
            panic!(
                "seed {seed} failed: {error}\nstory:\n  {}",
                log.join("\n  ")
            );
        }
    }
}

/// Stories told without bad block logs (`XRAID_NO_LOGS=1`) that once failed.
#[test]
fn the_seeds_without_logs_that_found_gaps_pass() {
    let seeds: [u64; 7] = [
        // RAID-6 of 6: member 2's ring unreadable at a restart and member 0 dying
        // during the replay; member 2 was failed whole (no log to list its torn
        // parity rows in), and after a cut at the replay's end the second replay
        // worked its data rows under unfinished writes out from parity: unknown,
        // refused (2026-11-29; it serves on since, the rule doubting its parity).
        4_895_343_933_784_872_779,
        // A parity member whose ring was lost at a cut, rebuilt whole since, was
        // doubted again at the next open (the rings' marker named its ring), and its
        // stripes refused where it was the parity left (a review, 2026-11-29).
        7_030_988_007_557_873_080,
        2_853_731_716_777_416_971,
        1_542_301_681_223_456_171,
        // RAID-6 of 5 whose member 1 was replaced and member 4 killed after a cut,
        // sectors 64..96 refused (found by a sweep, 2026-11-29; fixed with those).
        6_742_646_080_549_779_301,
        // RAID-6 of 4: member 1 dead and member 3 being replaced at a power cut, member
        // 3's ring unreadable at the restart (which fails it: no log to list its torn
        // rows in). Member 3 rebuilt on a new device, its parity computed from the
        // data; member 1's rebuild then still took that parity for the lost ring's,
        // in doubt, and refused two stripes reads through the other parity had
        // returned (lost_rings.rs `parity_a_recover_recomputed_...`).
        9_799_827_229_265_890_352,
        // RAID-5 past its redundancy after a power cut: a paced recover's units ended
        // at once (nothing left to read), and a client read refused at once moved the
        // engine's clock past the next launch; with no completion to pump the sync,
        // and the launch not reported as a due timer, the recover never ended.
        3_659_440_092_853_739_142,
    ];
    for seed in seeds {
        if let Err((error, log)) = tell_with(seed, false, false) {
            panic!(
                "seed {seed} failed: {error}\nstory:\n  {}\nreplay: XRAID_NO_LOGS=1 XRAID_WRITE_ERRORS=0 XRAID_SEED={seed} cargo test -p xraid-engine --test faults",
                log.join("\n  ")
            );
        }
    }
}

/// Stories with members that refuse writes that once failed, each found a gap since
/// closed.
#[test]
fn the_write_error_seeds_that_found_gaps_pass() {
    let seeds: [u64; 28] = [
        // RAID-1: a recover rewrote a copy's listed sectors 0..4, the copy refused,
        // and the whole unit was tried again block by block: block 0..8 was listed,
        // and the resync then kept another copy's sectors 4..8 than reads had
        // returned (found by a review's sweep; a refusal lists what was written).
        18_187_592_623_851_998_032,
        // A parity member refused a write of the stripe log's replay after a power cut
        // and was failed when the replay ended (its rows now go into its log): reads
        // of the stripe then returned data never written.
        3_704_117_108_011_943_336,
        5_759_051_026_394_747_800,
        6_659_289_477_736_771_648,
        // A RAID-6 member refused a parity write of the stripe log's replay after a
        // power cut and was failed at once: later entries of the replay then worked its
        // rows out from parity the cut had left torn, where the member held them right.
        4_240_108_409_717_838_119,
        12_636_742_320_857_677_801,
        // RAID-10: after a power cut, a copy that refused a resync's or a client's
        // write was failed while units whose first copy it was were still to be
        // resynced (the mirror limit, closed by bad block logs); the last two with a
        // replacement that had taken its role over, whose log the stories forgot.
        13_701_369_881_147_205_221,
        6_114_668_555_786_507_071,
        8_374_751_621_660_119_754,
        16_066_452_353_212_736_968,
        8_141_453_998_077_369_746,
        12_874_523_650_187_163_409,
        9_500_932_653_462_698_604,
        // Bad block logs, while they were built: a recover's source whose log listed
        // part of a unit was rewritten whole from another copy (and the copy the
        // reads had kept lost what they returned); a sync composing a unit around
        // listed sectors wrote sectors no copy held; reads awaiting the resync took
        // another copy than the resync kept.
        1_855_870_439_598_004_752,
        2_993_283_700_958_683_993,
        1_692_362_997_599_051_163,
        14_560_698_545_289_861_557,
        11_788_964_530_553_612_200,
        17_583_003_368_360_248_052,
        7_237_338_360_299_457_949,
        18_077_086_837_865_382_402,
        // RAID-5: a data member's rows listed after a refused write, and a later write
        // to the stripe torn by a power cut: its log entry did not carry those rows,
        // and they were rebuilt from torn parity (listed rows are now planned as a
        // missing member's).
        1_815_298_443_647_653_938,
        // RAID-10: a recover unit whose only source's log listed all of it read
        // nothing, and waited for reads that never came (found by a review's sweep).
        4_332_002_293_977_488_683,
        7_957_721_348_482_626_469,
        10_572_155_170_684_728_169,
        103_554_716_575_334_303,
        3_159_986_327_319_617_932,
        2_839_932_359_400_437_504,
    ];
    for seed in seeds {
        if let Err((error, log)) = tell(seed, true) {
            panic!(
                "seed {seed} failed: {error}\nstory:\n  {}",
                log.join("\n  ")
            );
        }
    }
}

#[test]
fn a_read_error_is_repaired_from_parity_and_rewritten() {
    let geo = Geometry::new(Level::Raid5, Layout::default_for(Level::Raid5), 4, 16, 256)
        .expect("geometry");
    let mut array = SimArray::new(geo, 1);
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    // Sector 0 of the array is chunk 0 of stripe 0: member 0 in left-symmetric.
    array.add_bad_range(MemberIdx(0), 2..4);
    let got = array.read(0, 8).expect("read around the bad range");
    assert_eq!(got, data[..8 * SECTOR]);
    assert!(
        array.members[0].bad_ranges.is_empty(),
        "the range was rewritten"
    );
    assert_eq!(array.engine.member_states()[0], MemberState::Active);
    assert_eq!(array.engine.stats().read_errors_corrected, 1);
    let events = array.take_events();
    assert!(
        events.iter().any(
            |e| matches!(e, Event::ReadErrorCorrected { member, .. } if *member == MemberIdx(0))
        ),
        "{events:?}"
    );
}

#[test]
fn too_many_read_errors_fail_the_member() {
    let geo = Geometry::new(Level::Raid1, Layout::default_for(Level::Raid1), 2, 0, 256)
        .expect("geometry");
    let mut array = SimArray::new(geo, 1);
    array.shuffle = false;
    array.engine.set_config(EngineConfig {
        max_read_errors: 2,
        ..EngineConfig::default()
    });
    let data = vec![7u8; geo.array_sectors() as usize * SECTOR];
    array.write(0, &data).expect("fill");
    for round in 0..3 {
        for m in 0..2 {
            array.add_bad_range(MemberIdx(m), 0..1);
        }
        // Reads alternate copies; whichever fails is repaired from the other.
        let _ = array.read(0, 1);
        let _ = round;
    }
    let failed = array
        .engine
        .member_states()
        .iter()
        .filter(|s| **s == MemberState::Failed)
        .count();
    assert!(failed >= 1, "a member past 2 read errors is failed");
    assert!(array.take_events().iter().any(|e| matches!(
        e,
        Event::MemberFailed {
            reason: xraid_engine::FailReason::ReadErrors(3),
            ..
        }
    )));
}

#[test]
fn a_blank_replacement_is_rebuilt_and_then_serves() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10] {
        let geo = Geometry::new(level, Layout::default_for(level), 4, 16, 512).expect("geometry");
        let mut array = SimArray::new(geo, 5);
        let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
        array.rng().fill(&mut data);
        array.write(0, &data).expect("fill");
        array.kill_member(MemberIdx(1));
        array.read(0, geo.array_sectors()).expect("degraded read");
        array.return_member(MemberIdx(1), true).expect("replace");
        array
            .engine
            .start_sync(SyncKind::Recover, 0)
            .expect("recover");
        array.run_sync();
        assert_eq!(
            array.engine.member_states(),
            &[MemberState::Active; 4],
            "{level:?}"
        );
        // Now fail every other member the level can spare: the rebuilt one must carry it.
        let spare = match level {
            Level::Raid1 => vec![0, 2, 3],
            Level::Raid6 => vec![0, 2],
            Level::Raid5 => vec![0],
            _ => vec![0],
        };
        for m in spare {
            array.kill_member(MemberIdx(m));
        }
        assert_eq!(
            array.read(0, geo.array_sectors()).expect("read"),
            data,
            "{level:?}"
        );
    }
}

#[test]
fn check_counts_and_repair_fixes_a_parity_mismatch() {
    let geo = Geometry::new(Level::Raid6, Layout::default_for(Level::Raid6), 5, 16, 256)
        .expect("geometry");
    let mut array = SimArray::new(geo, 3);
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    // Flip a bit in two different stripes behind the engine's back.
    array.flip_bit(MemberIdx(2), 100, 3);
    array.flip_bit(MemberIdx(4), 16 * SECTOR * 3 + 7, 0);
    let mismatches = |array: &mut SimArray, kind| {
        array.engine.start_sync(kind, 0).expect("sync");
        array.run_sync();
        array
            .take_events()
            .iter()
            .find_map(|e| match e {
                Event::SyncFinished { mismatches, .. } => Some(*mismatches),
                _ => None,
            })
            .expect("sync finished")
    };
    assert_eq!(mismatches(&mut array, SyncKind::Check), 2);
    assert_eq!(
        mismatches(&mut array, SyncKind::Check),
        2,
        "check changes nothing"
    );
    assert_eq!(mismatches(&mut array, SyncKind::Repair), 2);
    assert_eq!(
        mismatches(&mut array, SyncKind::Check),
        0,
        "repair fixed parity"
    );
}

/// A RAID-6 resync with only a parity member missing still compares the other parity
/// with the data and puts it right: the data is all there. (A power cut that takes a
/// stripe's P member with it takes the stripe-log entries on its ring too, and Q may
/// be torn; before 2026-11-24 a degraded resync left every stripe as it was.)
#[test]
fn a_resync_without_p_puts_q_right() {
    let geo = Geometry::new(Level::Raid6, Layout::default_for(Level::Raid6), 4, 16, 256)
        .expect("geometry");
    let mut array = SimArray::new(geo, 17);
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    let map = geo.stripe_map(0);
    let q = map.q().expect("RAID-6 has Q");
    // Q of stripe 0 disagrees with the data, and P is gone.
    array.flip_bit(q, 100, 3);
    array.kill_member(map.p());
    array.engine.fail_member(map.p());
    array
        .engine
        .start_sync(SyncKind::Resync, 0)
        .expect("resync");
    array.run_sync();
    let mismatches = array.take_events().iter().find_map(|e| match e {
        Event::SyncFinished { mismatches, .. } => Some(*mismatches),
        _ => None,
    });
    assert_eq!(mismatches, Some(1), "the resync found Q wrong");
    // With a data member gone too, stripe 0 is rebuilt from Q.
    array.kill_member(map.data_member(0));
    let got = array.read(0, 32).expect("read from Q");
    assert!(got == data[..32 * SECTOR], "Q was put right");
}

/// A read still out to a member when another read's checksum mismatch fails it (its
/// replacement taking the role over) comes back from a device that no longer holds
/// the role: its blocks cannot be checked, and it must not be used. Fault story
/// 4543560435652374088 found it: before 2026-11-25 a degraded read rebuilt a missing
/// chunk from the very block whose flipped bit had failed the member.
#[test]
fn a_read_from_a_member_failed_meanwhile_is_not_trusted() {
    let geo = Geometry::new(Level::Raid6, Layout::default_for(Level::Raid6), 5, 16, 256)
        .expect("geometry");
    let mut array = SimArray::new(geo, 5);
    array.engine.set_config(EngineConfig {
        max_read_errors: 0,
        ..EngineConfig::default()
    });
    array.enable_integrity();
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    // In issue order: the direct read of `flipped` fails its checksum (and the member)
    // before the degraded read of `gone`'s chunk has its own read of `flipped` back.
    array.shuffle = false;
    let map = geo.stripe_map(0);
    let (flipped, gone) = (map.data_member(0), map.data_member(1));
    array.kill_member(gone);
    array.engine.fail_member(gone);
    array.start_replacement(flipped).expect("replace");
    array.flip_bit(flipped, 100, 3);
    let got = array.read(0, 32).expect("read around two missing chunks");
    assert!(got == data[..32 * SECTOR], "wrong data came back");
    assert_eq!(
        array.engine.member_states()[flipped.index()],
        MemberState::Rebuilding,
        "the replacement took the role over"
    );
}

/// The write hole, shown and closed: a RAID-5 with a data member missing takes a write
/// to another chunk of the same stripe, and power fails before a flush (each member's
/// unflushed writes kept or lost at random). Without the log the missing member's data,
/// which nobody wrote, comes back wrong in some of the seeds; with it, never.
#[test]
fn the_log_closes_the_write_hole_that_is_open_without_it() {
    let wrong = |log_sectors: u64| {
        let mut wrong = 0;
        for seed in 0..64 {
            let geo = Geometry::new(Level::Raid5, Layout::default_for(Level::Raid5), 4, 16, 256)
                .expect("geometry");
            let mut array = SimArray::new(geo, seed);
            array.engine.set_config(EngineConfig {
                log_sectors,
                ..EngineConfig::default()
            });
            let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
            array.rng().fill(&mut data);
            array.write(0, &data).expect("fill");
            array.flush().expect("flush");
            // Stripe 0 holds array sectors 0..48: chunk 0 on member 0, chunk 1 on member 1.
            array.kill_member(MemberIdx(1));
            array.engine.fail_member(MemberIdx(1));
            let mut new = vec![0u8; 8 * SECTOR];
            array.rng().fill(&mut new);
            array.write(0, &new).expect("degraded write");
            array.power_cut();
            let chunk1 = array.read(16, 16).expect("read the missing member's chunk");
            if chunk1 != data[16 * SECTOR..32 * SECTOR] {
                wrong += 1;
            }
        }
        wrong
    };
    assert!(
        wrong(0) > 0,
        "without the log the hole must show in some seeds"
    );
    assert_eq!(wrong(256), 0, "with the log no untouched data is lost");
}

/// A degraded RAID-5 loses a second member while full-stripe writes are under way:
/// the array fails. A stripe whose write reached parity but not the failing member
/// leaves the missing member's rows rebuilt from that parity, neither old nor new data
/// — md's write hole, which a forced start would open. Exactly those rows are named
/// unknown (checked by rebuilding them from what the members hold), and writes that
/// had not begun their in-place writes write nothing.
#[test]
fn writes_a_failure_past_the_redundancy_cut_off_leave_the_missing_rows_unknown() {
    let mut torn_seen = 0;
    for seed in 0..48 {
        let geo = Geometry::new(Level::Raid5, Layout::default_for(Level::Raid5), 4, 16, 256)
            .expect("geometry");
        let mut array = SimArray::new(geo, seed);
        array.engine.set_config(EngineConfig {
            log_sectors: 256,
            ..EngineConfig::default()
        });
        let total = geo.array_sectors() as usize * SECTOR;
        let mut old = vec![0u8; total];
        array.rng().fill(&mut old);
        array.write(0, &old).expect("fill");
        array.flush().expect("flush");
        array.kill_member(MemberIdx(0));
        array.engine.fail_member(MemberIdx(0));
        let mut new = vec![0u8; total];
        array.rng().fill(&mut new);
        let stripe_bytes = 48 * SECTOR;
        for at in (0..total).step_by(stripe_bytes) {
            array.start_write((at / SECTOR) as u64, &new[at..at + stripe_bytes]);
        }
        let steps = array.rng().below(60);
        for _ in 0..steps {
            array.step();
        }
        array.kill_member(MemberIdx(1));
        array.run();
        if array.engine.lost_error().is_none() {
            // Every write ended before member 1 died: nothing was cut off.
            assert_eq!(array.engine.unknown_sectors(), 0, "seed {seed}");
            continue;
        }
        // Member 0's rows as the others rebuild them now, against old and new.
        let chunk = 16 * SECTOR;
        let mut torn = 0u64;
        for stripe in 0..geo.stripes() {
            let map = geo.stripe_map(stripe);
            let Some(i) = (0..map.data_disks()).find(|&i| map.data_member(i) == MemberIdx(0))
            else {
                continue;
            };
            let row = stripe as usize * chunk;
            let mut rebuilt = vec![0u8; chunk];
            for m in 1..4u16 {
                let data = &array.role_device(MemberIdx(m)).data[row..row + chunk];
                for (r, b) in rebuilt.iter_mut().zip(data) {
                    *r ^= b;
                }
            }
            let at = (stripe as usize * usize::from(map.data_disks()) + usize::from(i)) * chunk;
            if rebuilt[..] != old[at..at + chunk] && rebuilt[..] != new[at..at + chunk] {
                torn += 1;
            }
        }
        torn_seen += torn;
        assert_eq!(
            array.engine.unknown_sectors(),
            torn * 16,
            "seed {seed}: the rows named unknown are the rows rebuilt wrong"
        );
    }
    assert!(torn_seen > 0, "some seeds cut writes off");
}

#[test]
fn a_slow_mirror_member_is_found_and_reads_avoid_it() {
    let geo = Geometry::new(Level::Raid1, Layout::default_for(Level::Raid1), 3, 0, 2048)
        .expect("geometry");
    let mut array = SimArray::new(geo, 11);
    let data = vec![9u8; geo.array_sectors() as usize * SECTOR];
    array.write(0, &data).expect("fill");
    // Member 2 answers 20 ms late; the others in 0.1 ms.
    array.members[2].extra_latency = xraid_engine::Nanos(20_000_000);
    for round in 0..200u64 {
        let got = array.read((round * 8) % 2000, 8).expect("read");
        assert_eq!(got, data[..8 * SECTOR]);
    }
    assert!(array.engine.is_slow(MemberIdx(2)), "member 2 found slow");
    assert!(!array.engine.is_slow(MemberIdx(0)));
    let events = array.take_events();
    assert!(
        events.iter().any(|e| matches!(
            e,
            Event::SlowMember { member, slow: true, .. } if *member == MemberIdx(2)
        )),
        "{events:?}"
    );
    let before: Vec<u64> = array.members.iter().map(|m| m.reads).collect();
    for round in 0..100u64 {
        array.read((round * 8) % 2000, 8).expect("read");
    }
    let after: Vec<u64> = array.members.iter().map(|m| m.reads).collect();
    assert_eq!(after[2], before[2], "no read goes to the slow member");
    assert_eq!(after[0] - before[0] + after[1] - before[1], 100);
}

#[test]
fn a_rebuilt_member_is_not_counted_slow_for_its_rebuild_writes() {
    let geo = Geometry::new(
        Level::Raid1,
        Layout::default_for(Level::Raid1),
        3,
        0,
        64 << 11,
    )
    .expect("geometry");
    let mut array = SimArray::new(geo, 12);
    // Small client writes give every member a write figure.
    let block = vec![5u8; 8 * SECTOR];
    for round in 0..100u64 {
        array.write((round * 8) % 2000, &block).expect("write");
    }
    // A new device in role 2 whose rebuild writes (64 of them: 32 are needed to judge)
    // take 20 ms each (a sparse file filling, say), where client writes took 0.1 ms.
    array.kill_member(MemberIdx(2));
    array.engine.fail_member(MemberIdx(2));
    array.return_member(MemberIdx(2), true).expect("replace");
    array.role_device_mut(MemberIdx(2)).extra_latency = xraid_engine::Nanos(20_000_000);
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    array.run_sync();
    assert_eq!(array.engine.member_states()[2], MemberState::Active);
    array.role_device_mut(MemberIdx(2)).extra_latency = xraid_engine::Nanos(0);
    // Judged on its rebuild, it would stand far above its peers' client writes.
    assert!(!array.engine.is_slow(MemberIdx(2)), "not slow once rebuilt");
    let events = array.take_events();
    let last_slow = events.iter().rev().find_map(|e| match e {
        Event::SlowMember { member, slow, .. } if *member == MemberIdx(2) => Some(*slow),
        _ => None,
    });
    assert_ne!(last_slow, Some(true), "{events:?}");
    // And it serves reads as its peers do.
    let before = array.role_device(MemberIdx(2)).reads;
    for round in 0..60u64 {
        array.read((round * 8) % 2000, 8).expect("read");
    }
    assert!(
        array.role_device(MemberIdx(2)).reads > before,
        "reads reach it"
    );
}

#[test]
fn a_stalled_member_is_failed_and_new_reads_go_around_it() {
    let geo = Geometry::new(Level::Raid1, Layout::default_for(Level::Raid1), 2, 0, 2048)
        .expect("geometry");
    let mut array = SimArray::new(geo, 12);
    array.engine.set_config(EngineConfig {
        stall_timeout: xraid_engine::Nanos(1_000_000_000),
        ..EngineConfig::default()
    });
    let data = vec![4u8; geo.array_sectors() as usize * SECTOR];
    array.write(0, &data).expect("fill");
    // Member 1 stops answering for a minute.
    array.members[1].extra_latency = xraid_engine::Nanos(60_000_000_000);
    let reads: Vec<_> = (0..4).map(|i| array.start_read(i * 8, 8)).collect();
    let replies = array.run();
    assert_eq!(
        replies.len(),
        4,
        "the stuck reads complete when the member answers"
    );
    assert!(replies.iter().all(|r| r.result.is_ok()));
    for (_, buf) in reads {
        assert_eq!(array.engine.buffers().get(buf), &data[..8 * SECTOR]);
        array.engine.buffers_mut().free(buf);
    }
    assert_eq!(array.engine.member_states()[1], MemberState::Failed);
    assert!(array.take_events().iter().any(|e| matches!(
        e,
        Event::MemberFailed {
            member,
            reason: xraid_engine::FailReason::Stalled
        } if *member == MemberIdx(1)
    )));
    // From now on reads go around it at once.
    let before = array.now();
    for i in 0..8 {
        assert_eq!(array.read(i * 8, 8).expect("read"), data[..8 * SECTOR]);
    }
    assert!(
        array.now().0 - before.0 < 1_000_000_000,
        "new reads did not wait for the stalled member"
    );
}

/// A new array of `level` (md's default layout) that serves requests in order, filled
/// with a pattern that differs from sector to sector; and what it holds.
fn filled_array(
    level: Level,
    disks: u16,
    chunk_sectors: u32,
    member_sectors: u64,
    seed: u64,
) -> (SimArray, Vec<u8>) {
    let geo = Geometry::new(
        level,
        Layout::default_for(level),
        disks,
        chunk_sectors,
        member_sectors,
    )
    .expect("geometry");
    let mut array = SimArray::new(geo, seed);
    array.shuffle = false;
    let data: Vec<u8> = (0..geo.array_sectors() as usize * SECTOR)
        .map(|i| (i / SECTOR) as u8 ^ seed as u8)
        .collect();
    array.write(0, &data).expect("fill");
    (array, data)
}

#[test]
fn read_errors_fail_no_member_the_array_cannot_do_without() {
    // RAID-0: every member holds the only copy of its data.
    let (mut array, data) = filled_array(Level::Raid0, 2, 8, 2048, 14);
    // Member sectors 0..4 of member 1 hold array sectors 8..12.
    array.add_bad_range(MemberIdx(1), 0..4);
    let limit = EngineConfig::default().max_read_errors;
    for _ in 0..limit + 5 {
        assert!(
            matches!(array.read(8, 4), Err(EngineError::Unreadable { .. })),
            "the bad range is reported lost"
        );
    }
    assert_eq!(
        array.engine.member_states(),
        &[MemberState::Active, MemberState::Active],
        "past the error limit, the member still serves"
    );
    assert_eq!(
        array.read(16, 8).expect("the rest of member 1 reads"),
        data[16 * SECTOR..24 * SECTOR]
    );

    // A degraded RAID-5: its members hold the last copy of everything.
    let (mut array, data) = filled_array(Level::Raid5, 3, 8, 2048, 15);
    array.kill_member(MemberIdx(2));
    array.engine.fail_member(MemberIdx(2));
    array.add_bad_range(MemberIdx(0), 0..4);
    for _ in 0..limit + 5 {
        assert!(array.read(0, 4).is_err(), "member 0's bad sectors are lost");
    }
    assert_eq!(array.engine.member_states()[0], MemberState::Active);
    assert_eq!(
        array.read(32, 8).expect("the rest reads"),
        data[32 * SECTOR..40 * SECTOR]
    );
}

#[test]
fn a_raid0_write_error_fails_the_write_not_the_member() {
    let (mut array, data) = filled_array(Level::Raid0, 2, 8, 2048, 16);
    // Member sectors 0..4 of member 1 hold array sectors 8..12; they take no write.
    array.members[1].write_error_ranges.push(0..4);
    let new = vec![9u8; 8 * SECTOR];
    assert_eq!(
        array.write(8, &new),
        Err(EngineError::Unwritable { sector: 8, end: 16 }),
        "the write is refused, named"
    );
    assert_eq!(
        array.engine.member_states(),
        &[MemberState::Active, MemberState::Active],
        "the member serves on"
    );
    // Everything else of the member is written and read as before.
    array
        .write(16, &new)
        .expect("a write elsewhere on member 1");
    assert_eq!(array.read(16, 8).expect("read"), new);
    assert_eq!(array.read(0, 8).expect("read"), data[..8 * SECTOR]);
    assert!(
        !array
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::MemberFailed { .. })),
        "no member failed"
    );
}

#[test]
fn a_degraded_mirror_write_error_on_the_last_copy_fails_the_write_not_the_copy() {
    let (mut array, data) = filled_array(Level::Raid1, 2, 0, 2048, 17);
    array.kill_member(MemberIdx(1));
    array.engine.fail_member(MemberIdx(1));
    array.members[0].write_error_ranges.push(8..12);
    let new = vec![6u8; 8 * SECTOR];
    assert_eq!(
        array.write(8, &new),
        Err(EngineError::Unwritable { sector: 8, end: 16 })
    );
    assert_eq!(
        array.engine.member_states()[0],
        MemberState::Active,
        "the last copy serves on"
    );
    array.write(64, &new).expect("a write elsewhere");
    assert_eq!(array.read(64, 8).expect("read"), new);
    assert_eq!(array.read(0, 8).expect("read"), data[..8 * SECTOR]);

    // Whole, the same error fails the member as before: the other copy takes the write.
    let (mut array, _) = filled_array(Level::Raid1, 2, 0, 2048, 18);
    array.members[0].write_error_ranges.push(8..12);
    array.write(8, &new).expect("the other copy takes it");
    assert_eq!(array.engine.member_states()[0], MemberState::Failed);
    assert_eq!(array.read(8, 8).expect("read"), new);
}

#[test]
fn a_refused_write_leaves_no_false_checksum_behind() {
    let geo = Geometry::new(Level::Raid0, Layout::default_for(Level::Raid0), 2, 16, 2048)
        .expect("geometry");
    let mut array = SimArray::new(geo, 19);
    array.shuffle = false;
    array.enable_integrity();
    let data = vec![4u8; geo.array_sectors() as usize * SECTOR];
    array.write(0, &data).expect("fill");
    array.take_events();
    // Member 1's first block (array sectors 16..24) takes no write.
    array.members[1].write_error_ranges.push(0..8);
    assert!(matches!(
        array.write(16, &vec![9u8; 8 * SECTOR]),
        Err(EngineError::Unwritable { .. })
    ));
    array.members[1].write_error_ranges.clear();
    // The member still holds the old block; it reads back as such, not as corrupt.
    assert_eq!(array.read(16, 8).expect("read"), data[..8 * SECTOR]);
    assert!(
        !array
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::ChecksumMismatch { .. })),
        "no false alarm"
    );
}

#[test]
fn a_copy_being_rebuilt_that_took_a_write_the_last_copy_refused_is_failed() {
    let (mut array, data) = filled_array(Level::Raid1, 2, 0, 64 << 11, 20);
    array.kill_member(MemberIdx(1));
    array.engine.fail_member(MemberIdx(1));
    array
        .return_member(MemberIdx(1), true)
        .expect("a new member 1");
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    assert!(array.run_sync_until(2), "the rebuild is past unit 0");
    // Member 1 is in sync for sector 0 now and takes writes there; member 0 refuses.
    array.members[0].write_error_ranges.push(0..8);
    assert!(matches!(
        array.write(0, &vec![6u8; 8 * SECTOR]),
        Err(EngineError::Unwritable { .. })
    ));
    array.members[0].write_error_ranges.clear();
    assert_eq!(array.engine.member_states()[0], MemberState::Active);
    assert_eq!(
        array.engine.member_states()[1],
        MemberState::Failed,
        "the copy that took the write would disagree: it is left out"
    );
    assert!(array.take_events().iter().any(|e| matches!(
        e,
        Event::MemberFailed {
            member: MemberIdx(1),
            reason: xraid_engine::FailReason::Diverged
        }
    )));
    for _ in 0..4 {
        assert_eq!(array.read(0, 8).expect("read"), data[..8 * SECTOR]);
    }
}

#[test]
fn a_stalled_raid0_member_is_waited_for_not_failed() {
    let geo = Geometry::new(Level::Raid0, Layout::default_for(Level::Raid0), 2, 8, 2048)
        .expect("geometry");
    let mut array = SimArray::new(geo, 13);
    array.engine.set_config(EngineConfig {
        stall_timeout: xraid_engine::Nanos(1_000_000_000),
        ..EngineConfig::default()
    });
    let data = vec![6u8; 64 * SECTOR];
    array.write(0, &data).expect("write");
    array.members[1].extra_latency = xraid_engine::Nanos(5_000_000_000);
    assert_eq!(array.read(0, 64).expect("read, late"), data);
    assert_eq!(
        array.engine.member_states(),
        &[MemberState::Active, MemberState::Active],
        "no copy to go around: it is waited for"
    );
}

#[test]
fn a_replaced_members_late_answer_does_not_fail_its_replacement() {
    let geo = Geometry::new(Level::Raid1, Layout::default_for(Level::Raid1), 2, 0, 2048)
        .expect("geometry");
    let mut array = SimArray::new(geo, 14);
    array.engine.set_config(EngineConfig {
        stall_timeout: xraid_engine::Nanos(1_000_000_000),
        ..EngineConfig::default()
    });
    let data = vec![3u8; geo.array_sectors() as usize * SECTOR];
    array.write(0, &data).expect("fill");
    // Member 1 hangs; reads are sent to it and it is failed after a second.
    array.members[1].extra_latency = xraid_engine::Nanos(60_000_000_000);
    let reads: Vec<_> = (0..4).map(|i| array.start_read(i * 8, 8)).collect();
    while array.engine.member_states()[1] != MemberState::Failed {
        assert!(array.step(), "the stall is found");
    }
    // A new device takes the role while the old one's reads are still out.
    array.members[1].extra_latency = xraid_engine::Nanos(0);
    array.return_member(MemberIdx(1), true).expect("replace");
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    let replies = array.run_sync();
    let replies: Vec<_> = replies.into_iter().chain(array.run()).collect();
    assert_eq!(replies.len(), 4);
    for (_, buf) in reads {
        array.engine.buffers_mut().free(buf);
    }
    assert_eq!(
        array.engine.member_states(),
        &[MemberState::Active, MemberState::Active],
        "the old device's failures did not fail the new one"
    );
    array.kill_member(MemberIdx(0));
    assert_eq!(array.read(0, geo.array_sectors()).expect("read"), data);
}

/// Power fails on a RAID-1 while a member is being rebuilt and a write to the other two
/// copies is not yet flushed, so the copies may differ after the restart. Until the
/// resync — owed, but waiting for the recover — has run, every read returns the copy
/// the resync keeps (the first), never one copy now and the other later.
#[test]
fn a_mirror_read_after_a_crash_takes_the_copy_the_owed_resync_keeps() {
    // The RAID-1 sync unit (2 MiB), and four of them per member.
    let unit = 4096u64;
    let geo = Geometry::new(
        Level::Raid1,
        Layout::default_for(Level::Raid1),
        3,
        16,
        4 * unit,
    )
    .expect("geometry");
    let mut torn = 0;
    for seed in 0..64 {
        let mut array = SimArray::new(geo, seed);
        let mut config = array.engine.config();
        config.sync_min_bytes_per_sec = 1_000_000;
        config.sync_max_bytes_per_sec = 1_000_000;
        array.engine.set_config(config);
        let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
        array.rng().fill(&mut data);
        array.write(0, &data).expect("fill");
        array.flush().expect("flush");
        array.kill_member(MemberIdx(2));
        array.return_member(MemberIdx(2), true).expect("replace");
        array
            .engine
            .start_sync(SyncKind::Recover, 0)
            .expect("recover");
        // Unit 3 is the recover's last: still to be rebuilt at the cut.
        let mut new = vec![0u8; unit as usize * SECTOR];
        array.rng().fill(&mut new);
        array.write(3 * unit, &new).expect("write");
        array.power_cut_now_resuming();
        assert_eq!(array.engine.member_states()[2], MemberState::Rebuilding);
        let bytes = |m: usize| {
            let at = (3 * unit) as usize * SECTOR;
            array.members[m].data[at..at + unit as usize * SECTOR].to_vec()
        };
        let (first, second) = (bytes(0), bytes(1));
        if first == second {
            continue;
        }
        torn += 1;
        for _ in 0..4 {
            let got = array.read(3 * unit, unit).expect("read");
            assert!(got == first, "seed {seed}: a read took the second copy");
        }
        array.run_sync();
        assert!(array.engine.is_whole(), "seed {seed}: rebuilt");
        array
            .engine
            .start_sync_where_dirty(SyncKind::Resync, 0)
            .expect("resync");
        array.run_sync();
        assert!(!array.engine.resync_owed(), "seed {seed}: resynced");
        for _ in 0..4 {
            let got = array.read(3 * unit, unit).expect("read");
            assert!(got == first, "seed {seed}: the resync kept the first copy");
        }
    }
    assert!(
        torn > 4,
        "the cut tore the copies apart in {torn} of 64 seeds"
    );
}

/// A mirror copy that refuses a client write while a resync runs is failed at once,
/// and durably (its superblock records it), so nothing can read what it missed. Here it
/// is the unit's first copy (the one a resync copies to the others, and reads take
/// until it has): the write the other copy took, acknowledged, is what the unit reads,
/// also after a power cut. Failing such copies only when the resync ends was tried on
/// 2026-11-26 and dropped: an in-memory exemption does not outlive a stop, a power cut
/// or a cleared bitmap bit (the three tests after this one; docs/RELIABILITY.md).
///
/// With a bad block log the copy is not failed: the range goes into its log, which
/// outlives all three, and the copy serves on.
#[test]
fn a_first_copy_that_refuses_a_write_while_a_resync_runs_is_failed_at_once() {
    for logs in [false, true] {
        a_first_copy_refuses_a_write_while_a_resync_runs(logs);
    }
}

fn a_first_copy_refuses_a_write_while_a_resync_runs(logs: bool) {
    let chunk = 16usize;
    let (mut array, _) = filled_array(Level::Raid10, 3, chunk as u32, 256, 8);
    if logs {
        array.enable_bad_block_logs(512);
    }
    let mut config = array.engine.config();
    config.sync_window = 1;
    config.sync_min_bytes_per_sec = 1;
    config.sync_max_bytes_per_sec = 1;
    array.engine.set_config(config);
    // Chunk 2's first copy is member 1's row 1 (near-2 on three members).
    array.members[1]
        .write_error_ranges
        .push(chunk as u64..2 * chunk as u64);
    array.engine.owe_resync();
    array
        .engine
        .start_sync(SyncKind::Resync, 0)
        .expect("resync");
    let new = vec![0x3cu8; chunk * SECTOR];
    array
        .write(2 * chunk as u64, &new)
        .expect("the other copy takes it");
    if logs {
        assert_eq!(array.engine.member_states()[1], MemberState::Active);
        let bad = array.engine.bad_blocks(MemberIdx(1));
        assert!(bad.covers(chunk as u64..2 * chunk as u64), "{bad:?}");
    } else {
        assert_eq!(array.engine.member_states()[1], MemberState::Failed);
    }
    array.flush().expect("flush");
    array.power_cut_now();
    array.engine.owe_resync();
    let got = array.read(2 * chunk as u64, chunk as u64).expect("read");
    assert!(
        got == new,
        "logs {logs}: the acknowledged write reads back after the cut"
    );
}

/// RAID-1 of `disks` copies (with a write-intent bitmap of one bit per unit if
/// `bitmap`, and bad block logs if `logs`), a resync running slowly; member 1 refuses
/// a client write of unit 2, which the other copies take, acknowledged and flushed.
/// Returns the array and the new data. With logs, member 1 serves on.
fn refused_while_a_resync_runs(
    disks: u16,
    seed: u64,
    bitmap: bool,
    logs: bool,
) -> (SimArray, Vec<u8>) {
    let unit = 1024u64;
    let (mut array, _) = filled_array(Level::Raid1, disks, 16, 4 * unit, seed);
    if logs {
        array.enable_bad_block_logs(512);
    }
    if bitmap {
        let setup = intent_setup(&array.engine, unit, Nanos(1_000), None);
        array.engine.enable_write_intent(setup);
        array.engine.allow_write_intent_clears(true);
        array.pass_time(Nanos(1_000_000));
    }
    let mut config = array.engine.config();
    config.sync_window = 1;
    config.sync_min_bytes_per_sec = 1;
    config.sync_max_bytes_per_sec = 1;
    array.engine.set_config(config);
    array.engine.owe_resync();
    array
        .engine
        .start_sync(SyncKind::Resync, 0)
        .expect("resync");
    array.members[1].write_error_ranges.push(2 * unit..3 * unit);
    let new = vec![0xc3u8; unit as usize * SECTOR];
    array
        .write(2 * unit, &new)
        .expect("the write is acknowledged");
    array.flush().expect("flush");
    let expected = if logs {
        MemberState::Active
    } else {
        MemberState::Failed
    };
    assert_eq!(array.engine.member_states()[1], expected, "logs {logs}");
    (array, new)
}

fn sync_at_full_speed(array: &mut SimArray) {
    let mut config = array.engine.config();
    config.sync_min_bytes_per_sec = 1_000_000_000;
    config.sync_max_bytes_per_sec = 0;
    array.engine.set_config(config);
}

/// The resync is stopped after the refusal, then the first copy of the unit fails a
/// read: the read must not be answered by the copy that missed the write.
#[test]
fn a_copy_that_refused_a_write_answers_no_read_after_the_resync_stops() {
    let unit = 1024u64;
    for logs in [false, true] {
        let (mut array, new) = refused_while_a_resync_runs(3, 31, false, logs);
        array.engine.cancel_sync();
        while array.engine.sync_progress().is_some() && array.step() {}
        array.add_bad_range(MemberIdx(0), 2 * unit..2 * unit + 8);
        let got = array.read(2 * unit, unit).expect("read");
        assert!(
            got == new,
            "logs {logs}: a read returned the copy that refused the write"
        );
    }
}

/// A power cut after the refusal, then a read error on the unit's first copy while the
/// next resync runs: the resync must not copy the copy that missed the write (flushed,
/// acknowledged) over the others.
#[test]
fn a_copy_that_refused_a_write_is_not_resynced_from_after_a_power_cut() {
    let unit = 1024u64;
    for logs in [false, true] {
        let (mut array, new) = refused_while_a_resync_runs(3, 32, false, logs);
        array.power_cut_now();
        array.add_bad_range(MemberIdx(0), 2 * unit..2 * unit + 8);
        sync_at_full_speed(&mut array);
        array
            .engine
            .start_sync_where_dirty(SyncKind::Resync, 0)
            .expect("resync");
        array.run_sync();
        let got = array.read(2 * unit, unit).expect("read");
        assert!(
            got == new,
            "logs {logs}: the acknowledged, flushed write is lost"
        );
    }
}

/// A two-way mirror with a write-intent bitmap: the resync is stopped after the
/// refusal and the bits are cleared (as `Array::close` does on a whole array), and the
/// next resync visits only dirty chunks: reads spread over the copies afterwards must
/// never return the one that missed the write.
#[test]
fn a_copy_that_refused_a_write_answers_no_read_after_its_bit_is_cleared() {
    for logs in [false, true] {
        refused_then_bit_cleared(logs);
    }
}

fn refused_then_bit_cleared(logs: bool) {
    let unit = 1024u64;
    let (mut array, new) = refused_while_a_resync_runs(2, 33, true, logs);
    array.engine.cancel_sync();
    while array.engine.sync_progress().is_some() && array.step() {}
    array.engine.clear_write_intent_now();
    array.pass_time(Nanos(10_000_000));
    array.flush().expect("flush");
    array.power_cut_with(|a| {
        let image = a.members[0].bitmap.clone();
        let setup = intent_setup(&a.engine, unit, Nanos(1_000), Some(image));
        a.engine.enable_write_intent(setup);
        a.engine.allow_write_intent_clears(true);
    });
    sync_at_full_speed(&mut array);
    array
        .engine
        .start_sync_where_dirty(SyncKind::Resync, 2)
        .expect("resync from the checkpoint");
    array.run_sync();
    for i in 0..4 {
        let got = array.read(2 * unit, unit).expect("read");
        assert!(
            got == new,
            "logs {logs}: read {i} returned the copy that refused the write"
        );
    }
}

/// After a crash the resync is owed until one completes: on a degraded mirror the
/// copies left then agree (reads may spread over them again), while a degraded
/// parity array's resync could check nothing and leaves it owed.
#[test]
fn a_degraded_mirror_resync_pays_what_is_owed_and_a_degraded_parity_one_does_not() {
    for (level, disks, owed_after) in [(Level::Raid1, 3, false), (Level::Raid5, 4, true)] {
        let geo =
            Geometry::new(level, Layout::default_for(level), disks, 16, 2048).expect("geometry");
        let mut array = SimArray::new(geo, 3);
        let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
        array.rng().fill(&mut data);
        array.write(0, &data).expect("fill");
        array.flush().expect("flush");
        array.engine.fail_member(MemberIdx(1));
        array.power_cut();
        assert!(array.engine.resync_owed(), "{level:?}: owed after the cut");
        array
            .engine
            .start_sync(SyncKind::Resync, 0)
            .expect("resync");
        array.run_sync();
        assert_eq!(array.engine.resync_owed(), owed_after, "{level:?}");
        let got = array.read(0, geo.array_sectors()).expect("read");
        assert!(got == data, "{level:?}: the data reads back");
    }
}

#[test]
fn a_client_flush_does_not_wait_for_a_member_failed_for_stalling_on_it() {
    // A device that hangs in the kernel for good never answers its flush; once the
    // stall timeout fails it, the flush is answered from the members left (its
    // data I/O still waits: its buffers are lent, a flush lends none).
    for level in [Level::Raid1, Level::Raid5] {
        let geo = Geometry::new(level, Layout::default_for(level), 3, 8, 2048).expect("geometry");
        let mut array = SimArray::new(geo, 31);
        array.engine.set_config(EngineConfig {
            stall_timeout: xraid_engine::Nanos(1_000_000_000),
            ..EngineConfig::default()
        });
        let data = vec![6u8; 64 * SECTOR];
        array.write(0, &data).expect("write");
        // Member 2 stops answering for ten minutes.
        array.members[2].extra_latency = xraid_engine::Nanos(600_000_000_000);
        array.start_flush();
        let start = array.now();
        while !array.engine.clients_idle() {
            assert!(array.step(), "{level:?}: the flush is never answered");
        }
        let waited = array.now().0 - start.0;
        assert!(
            waited < 2_000_000_000,
            "{level:?}: the flush waited {waited} ns, past the stall timeout"
        );
        assert_eq!(array.engine.member_states()[2], MemberState::Failed);
        let replies = array.run();
        assert_eq!(replies.len(), 1, "{level:?}");
        assert!(
            replies[0].result.is_ok(),
            "{level:?}: {:?}",
            replies[0].result
        );
        // The device's late answer changes nothing; the array goes on degraded.
        assert_eq!(array.read(0, 64).expect("read"), data, "{level:?}");
        array.write(8, &data[..8 * SECTOR]).expect("write after");
        array.flush().expect("flush after");
    }
}

#[test]
fn a_flush_to_a_replaced_members_hung_device_does_not_hold_the_client() {
    // Role 2's device hangs while its replacement is being built: the stall fails it,
    // the replacement takes the role over, and the old device's flush (another
    // generation now) is answered; the replacement's own flush is waited for.
    let geo = Geometry::new(Level::Raid1, Layout::default_for(Level::Raid1), 3, 0, 2048)
        .expect("geometry");
    let mut array = SimArray::new(geo, 32);
    array.engine.set_config(EngineConfig {
        stall_timeout: xraid_engine::Nanos(1_000_000_000),
        sync_max_bytes_per_sec: 1_000_000,
        ..EngineConfig::default()
    });
    let data = vec![7u8; 64 * SECTOR];
    array.write(0, &data).expect("write");
    array.start_replacement(MemberIdx(2)).expect("replace");
    array
        .engine
        .start_sync(xraid_engine::SyncKind::Recover, 0)
        .expect("recover");
    array.members[2].extra_latency = xraid_engine::Nanos(600_000_000_000);
    array.start_flush();
    let start = array.now();
    while !array.engine.clients_idle() {
        assert!(array.step(), "the flush is never answered");
    }
    let waited = array.now().0 - start.0;
    assert!(waited < 2_000_000_000, "the flush waited {waited} ns");
    assert_eq!(
        array.engine.member_states(),
        &[
            MemberState::Active,
            MemberState::Active,
            MemberState::Rebuilding
        ]
    );
    let replies = array.run();
    assert!(replies.iter().all(|r| r.result.is_ok()), "{replies:?}");
    array.run_sync();
    assert_eq!(array.read(0, 64).expect("read"), data);
}

#[test]
fn a_sync_flush_answered_for_a_failed_member_lets_the_recover_end() {
    // The recover's closing flushes are out; one member's hangs and the operator
    // fails that member: its flush is answered, and the recover ends (the
    // replacement takes its role) instead of waiting for the hung device.
    let geo = Geometry::new(Level::Raid1, Layout::default_for(Level::Raid1), 3, 0, 2048)
        .expect("geometry");
    let mut array = SimArray::new(geo, 33);
    array.engine.set_config(EngineConfig {
        stall_timeout: xraid_engine::Nanos(0),
        ..EngineConfig::default()
    });
    let data = vec![9u8; 64 * SECTOR];
    array.write(0, &data).expect("write");
    array.start_replacement(MemberIdx(0)).expect("replace");
    array
        .engine
        .start_sync(xraid_engine::SyncKind::Recover, 0)
        .expect("recover");
    // The last unit under way: the closing flushes that follow find member 1 hung.
    let total = array.engine.sync_progress().map_or(0, |p| p.total_units);
    assert!(array.run_sync_until(total - 1));
    array.members[1].extra_latency = xraid_engine::Nanos(600_000_000_000);
    // Run until only member 1's flush is left of the recover.
    let mut steps = 0;
    while array.now().0 < 1_000_000_000 && steps < 10_000 {
        let flushing_only_member_1 = array
            .engine
            .sync_progress()
            .is_some_and(|p| p.done_below == total)
            && array.in_flight().count() == 1
            && array.in_flight().all(|io| io.member == MemberIdx(1));
        if flushing_only_member_1 {
            break;
        }
        assert!(array.step());
        steps += 1;
    }
    assert!(
        array.in_flight().count() == 1 && array.in_flight().all(|io| io.member == MemberIdx(1)),
        "only member 1's flush is out"
    );
    array.engine.fail_member(MemberIdx(1));
    let start = array.now();
    while array.engine.sync_progress().is_some() {
        assert!(array.step(), "the recover never ends");
        assert!(
            array.now().0 - start.0 < 1_000_000_000,
            "the recover waited for the hung device"
        );
    }
    assert!(array.engine.member_states()[0] != MemberState::Failed);
    assert_eq!(array.read(0, 64).expect("read"), data);
}

#[test]
fn a_flush_to_a_replacement_that_took_its_role_is_waited_for_after_the_next_replacement_starts() {
    // A client flush goes to the replacement being built (and to the members); the
    // replacement then takes its role, and a new replacement for that role starts.
    // The first replacement holds the role now: the client's flush must wait for it.
    let geo = Geometry::new(Level::Raid1, Layout::default_for(Level::Raid1), 3, 0, 2048)
        .expect("geometry");
    let mut array = SimArray::new(geo, 34);
    array.engine.set_config(EngineConfig {
        stall_timeout: xraid_engine::Nanos(0),
        ..EngineConfig::default()
    });
    let data = vec![5u8; 64 * SECTOR];
    array.write(0, &data).expect("write");
    let role = MemberIdx(2);
    array.start_replacement(role).expect("replace");
    let new_slot = array.engine.replacement_slot(role);
    array
        .engine
        .start_sync(xraid_engine::SyncKind::Recover, 0)
        .expect("recover");
    let total = array.engine.sync_progress().map_or(0, |p| p.total_units);
    assert!(array.run_sync_until(total));
    // The recover's closing flushes are out; the new device turns slow, and a client
    // flush goes to it.
    array.slot_mut(new_slot).extra_latency = xraid_engine::Nanos(600_000_000_000);
    array.start_flush();
    while array.engine.sync_progress().is_some() {
        assert!(array.step(), "the recover never ends");
    }
    assert_eq!(array.engine.device_slot(role), new_slot, "it took the role");
    assert!(
        !array.engine.clients_idle(),
        "the flush waits for the new device"
    );
    // Another replacement of the same role starts (its slot's generation moves on),
    // and a read completes meanwhile.
    array.start_replacement(role).expect("replace again");
    let before = array.now();
    let (_, buf) = array.start_read(0, 8);
    while array.now().0 - before.0 < 1_000_000_000 {
        assert!(array.step());
        assert!(
            array.in_flight().count() > 0 || array.now().0 - before.0 >= 1_000_000_000,
            "nothing left in flight"
        );
        if array.in_flight().count() == 1 {
            break;
        }
    }
    assert!(
        !array.engine.clients_idle(),
        "the flush was answered without the device that holds the role"
    );
    while !array.engine.clients_idle() {
        assert!(array.step());
    }
    assert!(
        array.now().0 - before.0 > 500_000_000_000,
        "answered when the device did"
    );
    let replies = array.run();
    assert!(replies.iter().all(|r| r.result.is_ok()), "{replies:?}");
    array.engine.buffers_mut().free(buf);
}

#[test]
fn a_sync_flush_from_before_the_recover_started_over_does_not_end_the_next_round() {
    // The recover's closing flushes are out, member 1's slow. A member returns, so the
    // recover walks again and flushes again; member 3's flush of that second round is
    // the slowest. Member 1's flush of the first round, answered meanwhile, must not
    // count for the second round: the recover ends only once member 3's is answered.
    let geo = Geometry::new(Level::Raid1, Layout::default_for(Level::Raid1), 4, 0, 2048)
        .expect("geometry");
    let mut array = SimArray::new(geo, 35);
    array.shuffle = false;
    array.engine.set_config(EngineConfig {
        stall_timeout: xraid_engine::Nanos(0),
        ..EngineConfig::default()
    });
    let data = vec![7u8; 64 * SECTOR];
    array.write(0, &data).expect("write");
    array.kill_member(MemberIdx(2));
    array.return_member(MemberIdx(2), false).expect("return");
    array.members[1].extra_latency = xraid_engine::Nanos(1_500_000_000);
    array
        .engine
        .start_sync(xraid_engine::SyncKind::Recover, 0)
        .expect("recover");
    let total = array.engine.sync_progress().map_or(0, |p| p.total_units);
    assert!(array.run_sync_until(total));
    let first_round_flushes = |array: &SimArray| {
        array
            .in_flight()
            .filter(|io| io.kind == xraid_engine::IoKind::Flush)
            .count()
    };
    assert!(
        first_round_flushes(&array) > 0,
        "the closing flushes are out"
    );
    // Let every first-round flush but member 1's be answered.
    while array
        .in_flight()
        .any(|io| io.kind == xraid_engine::IoKind::Flush && io.member != MemberIdx(1))
    {
        assert!(array.step());
    }
    let flushes_sent = array.now();
    array.members[1].extra_latency = xraid_engine::Nanos(0);
    array.members[3].extra_latency = xraid_engine::Nanos(1_000_000_000);
    array.kill_member(MemberIdx(3));
    array.return_member(MemberIdx(3), false).expect("return");
    // The driver's next tick walks again (as `xraid serve` ticks).
    let now = array.now();
    array.engine.handle_timeout(now);
    let mut last_flush_to_3 = None;
    while array.engine.sync_progress().is_some() {
        if array
            .in_flight()
            .any(|io| io.kind == xraid_engine::IoKind::Flush && io.member == MemberIdx(3))
        {
            last_flush_to_3 = Some(array.now());
        }
        assert!(array.step(), "the recover never ends");
        assert!(
            array.now().0 - flushes_sent.0 < 10_000_000_000,
            "the recover ran for ten seconds"
        );
    }
    assert!(
        last_flush_to_3.is_some(),
        "the second round flushed member 3"
    );
    assert!(
        !array
            .in_flight()
            .any(|io| io.kind == xraid_engine::IoKind::Flush && io.member == MemberIdx(3)),
        "the recover ended with member 3's flush still out"
    );
    assert!(array
        .engine
        .member_states()
        .iter()
        .all(|s| *s == MemberState::Active));
    assert_eq!(array.read(0, 64).expect("read"), data);
}
