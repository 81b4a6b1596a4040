//! Background syncs — recover, resync, check, repair — walked unit by unit.
//!
//! A sync unit is what one sync operation covers under one lock: a stripe for the
//! parity levels, a chunk for RAID-10, [`RAID1_UNIT_SECTORS`] for RAID-1. Client
//! writes take the same unit locks, so a unit is never rebuilt or checked while a
//! write to it is half done.
//!
//! A [`MemberState::Rebuilding`] member is in sync exactly for the units a running
//! recover has finished: below the launch cursor and not in flight. That is also
//! why a member that starts rebuilding while a recover runs restarts it from unit 0.
//!
//! Pace: the next unit is issued no sooner than its bytes allow at the configured
//! rate — [`EngineConfig::sync_min_bytes_per_sec`] while client requests are in
//! flight, [`EngineConfig::sync_max_bytes_per_sec`] (or flat out) when clients are
//! idle — so clients come first but a sync always moves (md's sync_speed_min/max).

use std::collections::{BTreeSet, HashMap};

use xraid_layout::{Layout, Level, SECTOR_BYTES};

use crate::engine::Engine;
use crate::{EngineConfig, Event, MemberIdx, MemberState, Nanos, SyncKind, SyncProgress};

/// Array sectors in one RAID-1 sync unit (2 MiB; 512 KiB until 2026-11-27, when 2 MiB
/// rebuilt a mirror on tmpfs about twice as fast with no cost to client writes
/// measured: docs/PERFORMANCE.md).
pub(crate) const RAID1_UNIT_SECTORS: u64 = 4096;

/// Why a sync cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncError {
    #[error("a {0} is already running")]
    Busy(&'static str),
    #[error("RAID-0 has no redundancy to {0}")]
    NoRedundancy(&'static str),
    #[error("the array has no redundancy left to {0} against (a member is missing): add one first (xraid add), and its rebuild will read everything")]
    NoRedundancyLeft(&'static str),
    #[error("nothing to recover: no member is being rebuilt or replaced")]
    NoTarget,
    #[error("role {0} has no active member to replace")]
    NotActive(u16),
    #[error("a replacement for role {0} is already being built")]
    AlreadyReplacing(u16),
}

#[derive(Debug)]
pub(crate) struct SyncState {
    pub(crate) kind: SyncKind,
    /// The unit it started from.
    from: u64,
    /// The next unit to launch.
    next: u64,
    total: u64,
    in_flight: BTreeSet<u64>,
    /// Units done as several operations (the parity levels cut a unit where bad block
    /// logs start or stop listing rows): the operations still running, and what the
    /// finished ones found. The unit is done when the last one ends.
    split_units: HashMap<u64, (u32, UnitOutcome)>,
    /// Units that could not be done (a recover leaves its targets stale there).
    failed_units: BTreeSet<u64>,
    mismatches: u64,
    unrecoverable: u64,
    /// Of those, units lost for another reason than rows logs list already.
    new_losses: u64,
    cancelled: bool,
    /// Earliest time the next unit may be issued.
    next_launch: Nanos,
    /// The round of member flushes sent after the last unit (`Engine::sync_flush_rounds`)
    /// and how many of them are still running: a sync ends only when what it wrote is
    /// durable, so a rebuilt member is never declared in sync on data a power cut could
    /// still take away.
    flushing: Option<(u64, u32)>,
    /// Below this unit, visit only units whose write-intent bits are set (a resync
    /// after a crash, the catch-up of a member that returns, the part a replacement
    /// had copied before a crash), skipping the rest as done.
    dirty_only_below: u64,
    /// Units issued so far, and units skipped as clean in the bitmap.
    visited: u64,
    skipped: u64,
}

/// Member sectors in one unit (what the pace is counted in).
pub(crate) fn unit_sectors(engine: &Engine) -> u64 {
    match engine.geo.level() {
        Level::Raid1 => RAID1_UNIT_SECTORS,
        _ => u64::from(engine.geo.chunk_sectors()),
    }
}

/// Units a sync walks over.
fn total_units(engine: &Engine) -> u64 {
    let geo = &engine.geo;
    match geo.level() {
        Level::Raid4 | Level::Raid5 | Level::Raid6 => geo.stripes(),
        _ => geo.array_sectors().div_ceil(unit_sectors(engine)),
    }
}

/// The sync unit of array sector `sector` for the levels without parity (for the
/// parity levels the unit is the stripe, which the stripe module knows).
pub(crate) fn mirror_unit(engine: &Engine, sector: u64) -> u64 {
    sector / unit_sectors(engine)
}

/// Whether a running recover has rebuilt `unit`.
pub(crate) fn recovered(engine: &Engine, unit: u64) -> bool {
    match &engine.sync {
        Some(s) if s.kind == SyncKind::Recover => {
            unit < s.next && !s.in_flight.contains(&unit) && !s.failed_units.contains(&unit)
        }
        _ => false,
    }
}

/// Whether `member`, being rebuilt, holds `unit` only in this engine's memory so far:
/// rebuilt by the running recover, but past what the superblocks record (see
/// [`Engine::set_recovery_recorded`]). After a crash it would be taken for not rebuilt
/// there, so the stripe log keeps its rows as for a member that is missing.
pub(crate) fn rebuilt_unrecorded(engine: &Engine, member: MemberIdx, unit: u64) -> bool {
    engine.member_states()[member.index()] == MemberState::Rebuilding
        && unit >= engine.recovery_recorded(member)
        && engine.in_sync(member, unit)
}

/// Whether a running or owed resync has yet to make `unit`'s redundancy agree with its
/// data (writes there must not trust old parity; mirror reads take the first copy).
/// A unit the running resync could not put right (rows past the redundancy that no
/// log could list) stays so: the resync stays owed, and the doubt with it. Units a
/// resync that ended without completing did put right stay put right
/// (`Engine::resync_reached`).
pub(crate) fn awaiting_resync(engine: &Engine, unit: u64) -> bool {
    let put_right_before = || engine.resync_reached.iter().any(|r| r.put_right(unit));
    match &engine.sync {
        Some(s) if s.kind == SyncKind::Resync => {
            (unit >= s.next || s.in_flight.contains(&unit) || s.failed_units.contains(&unit))
                && !put_right_before()
        }
        _ => engine.resync_owed && !log_replayed_every_entry(engine) && !put_right_before(),
    }
}

/// The units a resync that ended without completing put right: from where it started
/// to where it got, but those it failed (a resync stays owed where a unit is past the
/// redundancy and no log can list its rows). Until the next open they stay so: what
/// a write changes there after, it changes in step with parity.
#[derive(Debug, Clone)]
pub(crate) struct ResyncReach {
    from: u64,
    to: u64,
    failed: BTreeSet<u64>,
}

impl ResyncReach {
    fn put_right(&self, unit: u64) -> bool {
        (self.from..self.to).contains(&unit) && !self.failed.contains(&unit)
    }
}

/// The present parity members of `stripe` whose rows lo..hi (`rows`, chunk offsets)
/// may not agree with its data: a power cut may have torn a write there (the
/// write-intent bitmap, if any, had the stripe's bit set when it was loaded), no
/// resync has reached the stripe since, no client write has computed their parity
/// afresh since ([`parity_made_fresh`]), and the stripe log does not vouch for them
/// ([`crate::ppl::vouches_for`]). A data member's rows rebuilt through them may be
/// what was never written. With `unpinned`, doubts the log cannot pin to the stripe
/// count too: every stripe without the log (md's write hole), every one while an
/// earlier replay's skipped entries are unknown — for rows that fail to read; rows
/// whose only copy is parity (a member's refused write, listed; a missing member)
/// would be lost for good by such a broad doubt, and rebuilding them is what md does.
pub(crate) fn parity_in_doubt(
    engine: &Engine,
    stripe: u64,
    rows: (u32, u32),
    unpinned: bool,
) -> Vec<MemberIdx> {
    if !engine.geo.level().has_parity()
        || engine.resync_passed
        || engine
            .resync_after_clean_stop
            .is_some_and(|done| stripe < done)
        || !awaiting_resync(engine, stripe)
        || (engine.log.is_none() && !unpinned)
        || !engine.unit_dirty_at_load(stripe)
        || made_fresh(engine, stripe, rows)
    {
        return Vec::new();
    }
    let map = engine.geo.stripe_map(stripe);
    [Some(map.p()), map.q()]
        .into_iter()
        .flatten()
        .filter(|&p| engine.in_sync(p, stripe))
        .filter(|&p| !engine.recomputed.covers(p, stripe, rows))
        .filter(|&p| !crate::ppl::vouches_for(engine, stripe, rows, p, unpinned))
        .collect()
}

/// Where rows lo..hi of `stripe` cross the edges of rows made fresh (see
/// [`parity_made_fresh`]) or recomputed by a recover (`rebuilt`): an operation cut
/// there asks of each band alone.
pub(crate) fn fresh_edges(engine: &Engine, stripe: u64, (lo, hi): (u32, u32)) -> Vec<u32> {
    let members = (0..engine.geo.raid_disks()).map(MemberIdx);
    engine
        .fresh_parity
        .get(&stripe)
        .into_iter()
        .flatten()
        .flat_map(|&(a, b)| [a, b])
        .chain(engine.recomputed.band_edges(stripe, members))
        .filter(|&row| lo < row && row < hi)
        .collect()
}

/// Whether client writes since the open computed parity afresh over all of `rows`
/// of `stripe` (see [`parity_made_fresh`]).
fn made_fresh(engine: &Engine, stripe: u64, (lo, hi): (u32, u32)) -> bool {
    engine
        .fresh_parity
        .get(&stripe)
        .is_some_and(|bands| bands.iter().any(|&(a, b)| a <= lo && hi <= b))
}

/// A client write computed `stripe`'s parity over rows lo..hi from every data
/// chunk (reconstruct-write): where parity was in doubt there, it no longer is.
pub(crate) fn parity_made_fresh(engine: &mut Engine, stripe: u64, lo: u32, hi: u32) {
    if parity_in_doubt(engine, stripe, (lo, hi), true).is_empty() {
        return;
    }
    // A skipped entry's doubt is over there too, for good (the rings' next marker
    // no longer names those rows).
    crate::ppl::parity_agrees_again(engine, stripe, lo, hi);
    crate::ppl::add_band(engine.fresh_parity.entry(stripe).or_default(), lo, hi);
}

/// The stripe log's replay read every entry it found: parity agrees with the data
/// wherever a crash could have torn a write.
fn log_replayed_every_entry(engine: &Engine) -> bool {
    engine
        .log
        .as_ref()
        .is_some_and(|l| !l.recovering() && engine.stats.log_entries_skipped == 0)
}

impl Engine {
    /// Marks a member whose contents cannot be trusted — a replacement in a failed
    /// slot, a failed member come back, or one recorded as being recovered — as being
    /// rebuilt. Start (or restart) a [`SyncKind::Recover`] to rebuild it.
    pub fn mark_rebuilding(&mut self, member: MemberIdx) -> Result<(), SyncError> {
        if self.member_states()[member.index()] == MemberState::Rebuilding {
            return Ok(());
        }
        if self.geo.level() == Level::Raid0 {
            return Err(SyncError::NoRedundancy("rebuild"));
        }
        begin_rebuild(self, member);
        Ok(())
    }

    /// Starts a sync from unit `from` (0, or a checkpoint from [`Engine::sync_progress`]).
    pub fn start_sync(&mut self, kind: SyncKind, from: u64) -> Result<(), SyncError> {
        self.start_sync_over(kind, from, 0, from)
    }

    /// Like [`Engine::start_sync`], but a resync or recover visits only the units whose
    /// write-intent bits are set (everything without a bitmap): after a crash only
    /// those can disagree, and a member that left a degraded array and returns missed
    /// only those.
    pub fn start_sync_where_dirty(&mut self, kind: SyncKind, from: u64) -> Result<(), SyncError> {
        // A replacement is built whole: its device held nothing of the role before.
        let whole = kind == SyncKind::Recover && self.any_replacing();
        let dirty_only_below = if whole { 0 } else { u64::MAX };
        self.start_sync_over(kind, from, dirty_only_below, from)
    }

    /// Starts a recover from unit 0 that visits the units below `recorded` only where
    /// write-intent bits are set (all of them without a bitmap), and every unit from
    /// `recorded` on: how a replacement goes on from its checkpoint after an unclean
    /// stop. It holds what its copy wrote below the checkpoint, but a write not yet
    /// flushed may have reached the member it replaces and not it (or the other way
    /// round), and such writes lie in chunks whose bits are set (and stay set until a
    /// resync). Members being rebuilt resume as with [`Engine::start_sync`] from the
    /// lowest record among them ([`Engine::resume_rebuilding`]), which `recorded`
    /// must not exceed.
    pub fn start_recover_after_unclean_stop(&mut self, recorded: u64) -> Result<(), SyncError> {
        self.start_sync_over(SyncKind::Recover, 0, recorded, recorded)
    }

    fn start_sync_over(
        &mut self,
        kind: SyncKind,
        from: u64,
        dirty_only_below: u64,
        recorded: u64,
    ) -> Result<(), SyncError> {
        self.can_start_sync(kind)?;
        let dirty_only_below = if self.intent.is_some() && crate::intent::sync_may_skip(kind) {
            dirty_only_below
        } else {
            0
        };
        let total = total_units(self);
        if kind == SyncKind::Recover {
            // A recover resumes from what the superblocks record (or starts over).
            self.recovery_recorded = recorded.min(total);
        }
        self.sync = Some(SyncState {
            kind,
            from: from.min(total),
            next: from.min(total),
            total,
            in_flight: BTreeSet::new(),
            split_units: HashMap::new(),
            failed_units: BTreeSet::new(),
            mismatches: 0,
            unrecoverable: 0,
            new_losses: 0,
            cancelled: false,
            next_launch: self.now(),
            flushing: None,
            dirty_only_below: dirty_only_below.min(total),
            visited: 0,
            skipped: 0,
        });
        crate::intent::sync_started(self);
        pump(self);
        Ok(())
    }

    /// Whether a `kind` sync could start now, and why not.
    pub fn can_start_sync(&self, kind: SyncKind) -> Result<(), SyncError> {
        if let Some(s) = &self.sync {
            return Err(SyncError::Busy(s.kind.name()));
        }
        if self.geo.level() == Level::Raid0 {
            return Err(SyncError::NoRedundancy(kind.name()));
        }
        let rebuilding = self.member_states().contains(&MemberState::Rebuilding);
        if kind == SyncKind::Recover && !rebuilding && !self.any_replacing() {
            return Err(SyncError::NoTarget);
        }
        if matches!(kind, SyncKind::Check | SyncKind::Repair) && !self.redundancy_left() {
            return Err(SyncError::NoRedundancyLeft(kind.name()));
        }
        Ok(())
    }

    /// Whether some unit still has redundancy: some active member could fail without
    /// data being lost (RAID-5 missing one member has none; RAID-10 missing one still
    /// has the other pairs).
    fn redundancy_left(&self) -> bool {
        let states = self.member_states().to_vec();
        (0..states.len()).any(|m| {
            states[m] == MemberState::Active && {
                let mut without = states.clone();
                without[m] = MemberState::Failed;
                Engine::lost_with(self.geo, without).is_none()
            }
        })
    }

    /// Stops issuing sync units; the sync ends (with [`crate::Event::SyncFinished`],
    /// not completed) when those in flight are done.
    pub fn cancel_sync(&mut self) {
        if let Some(s) = &mut self.sync {
            s.cancelled = true;
        }
        pump(self);
    }

    /// Where the running sync stands, if one runs.
    pub fn sync_progress(&self) -> Option<SyncProgress> {
        self.sync.as_ref().map(|s| SyncProgress {
            kind: s.kind,
            done_below: done_below(s),
            total_units: s.total,
            unit_sectors: unit_sectors(self),
            mismatches: s.mismatches,
            unrecoverable: s.unrecoverable,
        })
    }

    /// The member sector below which a member rebuilt up to unit `unit` holds good
    /// data (md's `recovery_offset`), where the layout makes that a single point:
    /// every level but RAID-10's far and offset layouts, whose copies of consecutive
    /// units do not lie in member order (0 there, so a resume starts over).
    pub fn unit_to_member_sector(&self, unit: u64) -> u64 {
        let geo = &self.geo;
        match (geo.level(), geo.layout()) {
            (Level::Raid10, Layout::Raid10(r)) => {
                if r.far_copies > 1 || r.offset {
                    return 0;
                }
                // Near copies: unit (array chunk) c starts at chunk row c*near/disks.
                let row = unit * u64::from(r.near_copies) / u64::from(geo.raid_disks());
                row * u64::from(geo.chunk_sectors())
            }
            _ => unit * unit_sectors(self),
        }
    }

    /// md's `resync_offset` for a resync done below unit `unit`, in the sectors md's
    /// resync walks: member sectors for RAID-1/4/5/6, and array sectors for RAID-10,
    /// whose resync md runs over the array's (virtual) addresses and whose recovery
    /// over the members' (see [`Engine::unit_to_member_sector`] for that).
    pub fn unit_to_resync_offset(&self, unit: u64) -> u64 {
        unit * unit_sectors(self)
    }

    /// The first unit a resync recorded at md's `resync_offset` `offset` has not done
    /// — the inverse of [`Engine::unit_to_resync_offset`], rounded down.
    pub fn resync_offset_to_unit(&self, offset: u64) -> u64 {
        offset / unit_sectors(self).max(1)
    }

    /// The first unit not known to be done for a member recovered up to member
    /// sector `sector` — the inverse of [`Engine::unit_to_member_sector`], rounded down.
    pub fn member_sector_to_unit(&self, sector: u64) -> u64 {
        let geo = &self.geo;
        match (geo.level(), geo.layout()) {
            (Level::Raid10, Layout::Raid10(r)) => {
                if r.far_copies > 1 || r.offset {
                    return 0;
                }
                let row = sector / u64::from(geo.chunk_sectors());
                row * u64::from(geo.raid_disks()) / u64::from(r.near_copies)
            }
            _ => sector / unit_sectors(self),
        }
    }

    pub(crate) fn set_member_state(&mut self, member: MemberIdx, state: MemberState) {
        if self.member_states()[member.index()] != state {
            // What a member being rebuilt held and had recorded is its own.
            self.rebuilt_floor[member.index()] = 0;
            self.recorded_floor[member.index()] = 0;
            if state != MemberState::Active {
                self.recomputed.forget(member);
            }
        }
        self.members_mut()[member.index()] = state;
    }
}

/// `member` holds nothing the array can trust (a new device, or one back from an
/// absence): the recover's walk starts over for it, and the members it was
/// rebuilding keep what it did for them.
pub(crate) fn begin_rebuild(engine: &mut Engine, member: MemberIdx) {
    restart_recover(engine);
    engine.set_member_state(member, MemberState::Rebuilding);
    engine.recomputed.forget(member);
    engine.rebuilt_floor[member.index()] = 0;
    engine.recorded_floor[member.index()] = 0;
    // Its bitmap missed every bit set while it was away; its ring was wiped.
    crate::intent::rewrite_all(engine);
    crate::ppl::device_joined(engine);
}

/// The recover's walk ends or starts over: every member it was rebuilding keeps the
/// units below `done` as rebuilt, and what the superblocks record of them.
fn keep_rebuilt_progress(engine: &mut Engine, done: u64) {
    for m in 0..engine.member_states().len() {
        if engine.member_states()[m] == MemberState::Rebuilding {
            engine.rebuilt_floor[m] = engine.rebuilt_floor[m].max(done);
            engine.recorded_floor[m] = engine.recorded_floor[m].max(engine.recovery_recorded);
        }
    }
}

/// Where a running resync stands, in the sectors the write-intent bitmap counts
/// (member sectors; array sectors for RAID-10): every unit below is done, its copies
/// or parity made to agree with its data (`u64::MAX` once every unit is). `None`
/// when no resync runs or it was cancelled.
pub(crate) fn resync_front(engine: &Engine) -> Option<u64> {
    let s = engine
        .sync
        .as_ref()
        .filter(|s| s.kind == SyncKind::Resync && !s.cancelled)?;
    let done = done_below(s);
    if done >= s.total {
        return Some(u64::MAX);
    }
    Some(done * unit_sectors(engine))
}

/// Every unit below this one is done: neither in flight nor failed.
fn done_below(s: &SyncState) -> u64 {
    let in_flight = s.in_flight.first().copied().unwrap_or(s.next);
    let failed = s.failed_units.first().copied().unwrap_or(s.next);
    s.next.min(in_flight).min(failed)
}

/// A newcomer (a member to rebuild, a replacement to build) is joining while a recover
/// runs: the units already done hold nothing for it, so the recover walks again (units
/// still in flight are waited for before they are issued anew) and flushes again at
/// the end; whatever the newcomer is, it is recovered whole. The members the walk was
/// rebuilding keep the units it had done for them, and what the superblocks record
/// of that (call this before the newcomer is marked).
pub(crate) fn restart_recover(engine: &mut Engine) {
    if let Some(done) = engine
        .sync
        .as_ref()
        .filter(|s| s.kind == SyncKind::Recover)
        .map(done_below)
    {
        keep_rebuilt_progress(engine, done);
    }
    if let Some(s) = &mut engine.sync {
        if s.kind == SyncKind::Recover {
            s.next = 0;
            s.failed_units.clear();
            s.flushing = None;
            s.dirty_only_below = 0;
        }
    }
    engine.recovery_recorded = 0;
    // No takeover is near any more.
    crate::ppl::release_takeover_holds(engine);
}

/// Issues units while the window, the pace and the cancel flag allow; ends the sync
/// when nothing is left.
pub(crate) fn pump(engine: &mut Engine) {
    if engine.log_recovering() {
        // Parity is being put right from the log first.
        return;
    }
    loop {
        let now = engine.now();
        let clients_busy = engine.clients_busy();
        let config = engine.config;
        let unit_bytes = unit_sectors(engine) * SECTOR_BYTES;
        if let Some(s) = engine
            .sync
            .as_ref()
            .filter(|s| s.next < s.dirty_only_below && !s.cancelled)
        {
            let next = crate::intent::next_dirty_unit(engine, s.next, s.dirty_only_below);
            if let Some(s) = &mut engine.sync {
                s.skipped += next - s.next;
                s.next = next;
            }
        }
        let Some(s) = &mut engine.sync else { return };
        let exhausted = s.cancelled || s.next >= s.total;
        if exhausted {
            if s.in_flight.is_empty() {
                match s.flushing {
                    None => {
                        let takeover =
                            s.kind == SyncKind::Recover && !s.cancelled && s.unrecoverable == 0;
                        if crate::ppl::ready_for_takeover(engine, takeover) {
                            start_flush(engine);
                        }
                    }
                    Some((_, 0)) => finish(engine),
                    Some(_) => {}
                }
            }
            return;
        }
        // A held sync launches nothing (one whose last units are out still ends, as
        // above). A unit still in flight from before a restart is not issued twice at
        // once (it would look done when the older operation ends).
        if engine.sync_held
            || s.in_flight.len() >= config.sync_window
            || now < s.next_launch
            || s.in_flight.contains(&s.next)
        {
            return;
        }
        let unit = s.next;
        s.next += 1;
        s.visited += 1;
        s.in_flight.insert(unit);
        s.next_launch =
            Nanos(s.next_launch.0.max(now.0) + pace_nanos(&config, clients_busy, unit_bytes));
        let kind = s.kind;
        match engine.geo.level() {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                crate::stripe::start_sync_unit(engine, unit, kind)
            }
            _ => crate::mirror::start_sync_unit(engine, unit, kind),
        }
    }
}

/// Nanoseconds one unit of `unit_bytes` takes at the pace that applies now.
fn pace_nanos(config: &EngineConfig, clients_busy: bool, unit_bytes: u64) -> u64 {
    let rate = if clients_busy {
        config.sync_min_bytes_per_sec
    } else {
        config.sync_max_bytes_per_sec
    };
    if rate == 0 {
        return 0;
    }
    u64::try_from(u128::from(unit_bytes) * 1_000_000_000 / u128::from(rate)).unwrap_or(u64::MAX)
}

/// When a paced sync may issue its next unit. A launch the clock has passed is left
/// to the next member I/O's completion, which pumps the sync (under client load that
/// comes at once, and a timer would only add wake-ups); with none out it is due now:
/// the clock can pass it through a client request that sent no member I/O (one
/// refused at once, past the redundancy), and then only a timer pumps the sync. Never
/// while the pump would still hold back (the log's replay runs, the window is full,
/// the next unit is still out).
pub(crate) fn next_wakeup(engine: &Engine) -> Option<Nanos> {
    let s = engine.sync.as_ref()?;
    let due = engine.now() >= s.next_launch;
    let waiting = !s.cancelled
        && s.next < s.total
        && s.in_flight.len() < engine.config.sync_window
        && !s.in_flight.contains(&s.next)
        && !engine.log_recovering()
        && !engine.sync_held
        && (!due || !engine.member_io_out());
    waiting.then_some(s.next_launch)
}

/// What one unit found.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct UnitOutcome {
    pub(crate) mismatch: bool,
    pub(crate) unrecoverable: bool,
    /// Unrecoverable for another reason than rows bad block logs list already (a
    /// loss recorded before, which a resync cannot and need not put right).
    pub(crate) new_loss: bool,
}

/// Sync unit `unit` is done as one more operation (see [`SyncState::split_units`]).
pub(crate) fn unit_split(engine: &mut Engine, unit: u64) {
    if let Some(s) = &mut engine.sync {
        s.split_units
            .entry(unit)
            .or_insert((1, UnitOutcome::default()))
            .0 += 1;
    }
}

/// A sync unit's operation ended.
pub(crate) fn unit_done(engine: &mut Engine, unit: u64, outcome: UnitOutcome) {
    let mut outcome = outcome;
    if let Some(s) = &mut engine.sync {
        if let Some((running, found)) = s.split_units.get_mut(&unit) {
            found.mismatch |= outcome.mismatch;
            found.unrecoverable |= outcome.unrecoverable;
            found.new_loss |= outcome.new_loss;
            *running -= 1;
            if *running > 0 {
                return;
            }
            outcome = *found;
            s.split_units.remove(&unit);
        }
    }
    engine.stats.sync_units += 1;
    if let Some(s) = &mut engine.sync {
        s.in_flight.remove(&unit);
        if outcome.unrecoverable {
            s.failed_units.insert(unit);
        }
        s.mismatches += u64::from(outcome.mismatch);
        s.unrecoverable += u64::from(outcome.unrecoverable);
        s.new_losses += u64::from(outcome.new_loss);
    }
    // The caller's completion path pumps afterwards.
}

/// Flushes every present member once the last unit is done.
fn start_flush(engine: &mut Engine) {
    // Replacements too: one is declared holding its role only on durable data.
    let members = engine.flush_targets();
    engine.sync_flush_rounds += 1;
    let round = engine.sync_flush_rounds;
    if let Some(s) = &mut engine.sync {
        s.flushing = Some((round, u32::try_from(members.len()).expect("few members")));
    }
    for member in members {
        engine.emit_sync_flush(member, round);
    }
    if members_flushing(engine) == Some(0) {
        finish(engine);
    }
}

fn members_flushing(engine: &Engine) -> Option<u32> {
    engine
        .sync
        .as_ref()
        .and_then(|s| s.flushing)
        .map(|(_, n)| n)
}

/// One of the final flushes of `round` completed (a failed one has failed its
/// member). A flush of an earlier round — sent before the recover started over, or
/// by an earlier sync — made nothing of this round's durable, and is not counted.
pub(crate) fn flush_done(engine: &mut Engine, round: u64) {
    if let Some(s) = &mut engine.sync {
        if let Some((waited, n)) = &mut s.flushing {
            if *waited == round {
                *n -= 1;
            }
        }
    }
    // The completion path pumps afterwards, which finishes at zero.
}

/// A rebuilding member or a replacement failed: with none left, a recover has
/// nothing to do.
pub(crate) fn targets_changed(engine: &mut Engine) {
    let any = engine.member_states().contains(&MemberState::Rebuilding) || engine.any_replacing();
    if let Some(s) = &mut engine.sync {
        if s.kind == SyncKind::Recover && !any {
            s.cancelled = true;
        }
    }
}

fn finish(engine: &mut Engine) {
    let Some(s) = engine.sync.take() else { return };
    if let Some(buf) = engine.sync_flush_buf.take() {
        engine.bufs.free(buf);
    }
    let completed = !s.cancelled && s.next >= s.total;
    // A resync that went over everything has put right all it could: units past the
    // redundancy only where logs list rows are lost, loudly, whatever parity says.
    let resynced = s.kind == SyncKind::Resync && completed && s.new_losses == 0;
    if resynced {
        engine.stats.resyncs_completed += 1;
        // Where parity was in doubt it now agrees with the data, or the rows it
        // could not make agree are listed (see `stripe::through_parity_in_doubt`) —
        // on an array that is not whole too, where the resync stays owed.
        engine.resync_passed = true;
        engine.resync_reached = Vec::new();
        engine.fresh_parity = HashMap::new();
        engine.recomputed = Default::default();
    }
    if s.kind == SyncKind::Resync && !resynced && s.from < s.next {
        // Before 2026-11-29 forgotten here: a stripe the resync had put right was
        // doubted again once it ended, and a member missing since lost its rows there.
        let mut failed = s.failed_units.clone();
        failed.extend(s.in_flight.iter().copied());
        failed.extend(s.split_units.keys().copied());
        engine.resync_reached.push(ResyncReach {
            from: s.from,
            to: s.next,
            failed,
        });
    }
    if s.kind == SyncKind::Recover && completed && s.unrecoverable == 0 {
        let roles = engine.member_states().len();
        // A member recomputed whole holds no parity a lost ring left in doubt.
        let stripes = engine.geo.stripes();
        let recomputed_whole: Vec<MemberIdx> = (0..roles)
            .map(crate::engine::member_idx)
            .filter(|&m| engine.member_states()[m.index()] == MemberState::Rebuilding)
            .filter(|&m| engine.recomputed.covers_every_stripe(m, stripes))
            .collect();
        for m in recomputed_whole {
            crate::ppl::ring_rebuilt(engine, m);
        }
        // Every rebuilt member is active before any replacement is promoted: a
        // promotion can start writes that waited (on the bitmap), and those must go to
        // every member that holds its role now.
        for m in 0..roles {
            if engine.member_states()[m] == MemberState::Rebuilding {
                engine.set_member_state(crate::engine::member_idx(m), MemberState::Active);
                engine.fresh_figures(m);
            }
        }
        for m in 0..roles {
            // A replacement holds all of its role now (durable: flushed above).
            if engine.is_replacing(crate::engine::member_idx(m)) {
                engine.promote_replacement(m);
            }
        }
    }
    if s.kind == SyncKind::Recover && !(completed && s.unrecoverable == 0) {
        // Members left rebuilding keep what the walk did for them: writes go on
        // reaching them there, so what the superblocks record of it stays true.
        keep_rebuilt_progress(engine, done_below(&s));
    }
    // Stripe writes held for the takeover log to the replacements' rings now.
    crate::ppl::release_takeover_holds(engine);
    let whole = engine.is_whole();
    let recovered = s.kind == SyncKind::Recover && completed && s.unrecoverable == 0;
    if (resynced || recovered) && whole {
        crate::intent::sync_completed(engine, s.kind);
    }
    // The copies present now agree. Parity on an array that is not whole could not be
    // checked: it stays owed there.
    let mirrored = !engine.geo.level().has_parity();
    if resynced && (whole || mirrored) {
        engine.resync_owed = false;
        crate::ppl::resync_completed(engine);
    } else if resynced {
        crate::ppl::resync_passed(engine);
    }
    // The sync's flush made every write finished before it durable: the stripe log's
    // rings say so too (a checkpoint), or a power cut soon after would have the
    // replay take their entries for writes it may have torn.
    if engine.log.as_ref().is_some_and(|l| !l.recovering()) {
        crate::ppl::start_checkpoint(engine);
    }
    engine.push_event(Event::SyncFinished {
        kind: s.kind,
        completed,
        mismatches: s.mismatches,
        unrecoverable: s.unrecoverable,
        visited: s.visited,
        skipped: s.skipped,
        total: s.total,
    });
}
