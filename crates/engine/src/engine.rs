//! The engine's state and its whole surface: requests and completions in, member I/Os
//! and replies out.

use std::collections::{HashMap, VecDeque};

use xraid_layout::{Geometry, Level, MemberIdx, SECTOR_BYTES};

use crate::buffers::{BufId, BufSlice, Buffers};
use crate::mirror::MirrorOp;
use crate::slab::Slab;
use crate::stripe::StripeOp;
use crate::sync::SyncState;
use crate::{
    Area, EngineConfig, EngineError, Event, FailReason, IoFailed, IoId, IoKind, MemberIo,
    MemberState, Nanos, Reply, Request, RequestId, RequestKind, Stats,
};

/// A contiguous piece of one request: array sectors and where they sit in its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    pub(crate) sector: u64,
    pub(crate) sectors: u64,
    pub(crate) buf_off: usize,
    pub(crate) write: bool,
}

/// What a member I/O in flight belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IoTarget {
    /// Straight between a member and a client buffer, with no lock: reads, and RAID-0
    /// writes.
    Direct {
        req: usize,
        member: MemberIdx,
        seg: Segment,
    },
    /// Part of a stripe operation.
    Stripe { op: usize, member: MemberIdx },
    /// Part of a mirror operation.
    Mirror { op: usize, member: MemberIdx },
    /// A block of a mirror write the member refused, tried again: its member sectors.
    MirrorRetry {
        op: usize,
        member: MemberIdx,
        sector: u64,
        sectors: u64,
    },
    /// A block of a stripe operation's write the member refused, tried again: its
    /// member sectors.
    StripeRetry {
        op: usize,
        member: MemberIdx,
        sector: u64,
        sectors: u64,
    },
    /// A member flush for a client flush.
    Flush { req: usize, member: MemberIdx },
    /// A flush answered already because its member was failed while it waited (see
    /// `abandon_flushes`): the device's own answer, whenever it comes, is ignored.
    Abandoned,
    /// A member flush ending a sync, of the sync's `round` of them.
    SyncFlush { member: MemberIdx, round: u64 },
    /// A flush making log entries durable so that their room can be reused.
    LogCheckpoint { member: MemberIdx },
    /// An I/O of the log's recovery at start.
    LogRecovery { member: MemberIdx },
    /// A block of a replay write the member refused, tried again: its member sectors.
    LogReplayRetry {
        member: MemberIdx,
        sector: u64,
        sectors: u64,
    },
    /// A durable-marker write to a member's ring, or the flush after it.
    LogMarker { member: MemberIdx, flushed: bool },
    /// A write of a batch of log entries to a member's ring, or the flush after it.
    LogBatch { member: MemberIdx },
    /// A write-intent bitmap write, or a flush of its round.
    Intent {
        member: MemberIdx,
        buf: BufId,
        /// The bitmap round the I/O belongs to (see `intent::on_io`).
        round: u64,
    },
    /// A write of checksum table pages (integrity mode) to the device in `slot`.
    ChecksumPages {
        member: MemberIdx,
        slot: MemberIdx,
        buf: BufId,
        generation: u32,
    },
}

/// Who waits for a lock on a sync unit: writes, repairs and sync work on one unit
/// take turns so that redundancy always matches the data it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    Stripe(usize),
    Mirror(usize),
}

/// Whom an operation reports to when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Client(usize),
    Sync,
}

#[derive(Debug)]
pub(crate) struct ReqState {
    id: RequestId,
    pub(crate) buf: Option<BufId>,
    /// The engine made `buf` itself (a flush's empty buffer) and frees it at the end.
    own_buf: bool,
    /// For a flush with the log on: the log entries below this seq are durable once it
    /// succeeds; and its flush round (see `ppl::LogState::flushed_round`).
    log_covers: Option<(u64, u64)>,
    /// The write-intent chunks a write is counted in on, while it runs.
    intent: Option<(u64, u64)>,
    /// A [`RequestKind::Checkpoint`]: its flushes wait for the checksum tables.
    pub(crate) checkpoint: bool,
    /// Sub-operations still running, plus one while the request is being planned.
    pending: u32,
    error: Option<EngineError>,
}

/// One array's engine. See the crate documentation for what it does and never does.
#[derive(Debug)]
pub struct Engine {
    pub(crate) geo: Geometry,
    members: Vec<MemberState>,
    pub(crate) bufs: Buffers,
    pub(crate) reqs: Slab<ReqState>,
    /// Requests in `reqs` that are clients' (not the array's own checkpoints): what a
    /// paced sync yields to.
    client_reqs: usize,
    pub(crate) ops: Slab<StripeOp>,
    pub(crate) mops: Slab<MirrorOp>,
    ios: Slab<IoTarget>,
    /// Per-unit FIFO of operations; the one in front holds the unit.
    locks: HashMap<u64, VecDeque<Holder>>,
    out_io: VecDeque<MemberIo>,
    out_reply: VecDeque<Reply>,
    out_event: VecDeque<Event>,
    pub(crate) stats: Stats,
    /// Spreads reads over mirror copies.
    pub(crate) read_rotor: usize,
    pub(crate) config: EngineConfig,
    /// Read errors each member returned so far.
    read_errors: Vec<u32>,
    pub(crate) sync: Option<SyncState>,
    /// The empty buffer sync flushes carry.
    pub(crate) sync_flush_buf: Option<BufId>,
    /// Rounds of closing sync flushes sent so far: each flush carries its round, so
    /// one sent before a recover started over (or by an earlier sync) is not counted
    /// for the round now waited on.
    pub(crate) sync_flush_rounds: u64,
    /// Units below which the superblocks record the running recover's targets as
    /// rebuilt (md's recovery_offset), as the driver last said (see
    /// `sync::rebuilt_unrecorded`); a restart of the walk sets it back to 0.
    pub(crate) recovery_recorded: u64,
    /// The running sync launches nothing new while the driver records its
    /// checkpoint ([`Engine::hold_sync`]).
    pub(crate) sync_held: bool,
    /// Per role, being rebuilt: units below which it was rebuilt by an earlier walk of
    /// the recover (one that started over for a newcomer, or ended early); md keeps a
    /// recovery_offset per device.
    pub(crate) rebuilt_floor: Vec<u64>,
    /// Per role, being rebuilt: units below which the superblocks record it rebuilt
    /// from before the running walk.
    pub(crate) recorded_floor: Vec<u64>,
    /// The array was stopped uncleanly and no resync has completed since (see
    /// [`Engine::owe_resync`]).
    pub(crate) resync_owed: bool,
    /// The resync owed was left by a clean stop, which recorded it done below this
    /// unit (md's resync_offset): nothing was cut off since (see
    /// [`Engine::owe_resync_after_a_clean_stop`]).
    pub(crate) resync_after_clean_stop: Option<u64>,
    /// The newest superblock carries no stamp of a session that kept the stripe log
    /// (see [`Engine::superblocks_unstamped`]).
    pub(crate) superblocks_unstamped: bool,
    /// Members whose failure took the array past its redundancy, or came after: each
    /// holds its own rows, old or new where a write was cut off (see
    /// `stripe::torn_by_the_loss`).
    pub(crate) failed_at_loss: Vec<MemberIdx>,
    /// The resync owed is the array's initial one and nothing has written it since it
    /// was made (see [`Engine::owe_initial_resync`]).
    pub(crate) initial_resync: bool,
    /// A resync has gone over the whole array since it was opened: parity is in doubt
    /// nowhere (see `sync::parity_in_doubt`), even where the resync stays owed.
    pub(crate) resync_passed: bool,
    /// What resyncs that ended without completing put right since the open (see
    /// `sync::ResyncReach`): parity is not in doubt there, though the resync stays owed.
    pub(crate) resync_reached: Vec<crate::sync::ResyncReach>,
    /// Per stripe whose parity is in doubt, the rows (chunk offsets, sorted, apart)
    /// whose parity a client write has computed afresh from every data chunk since
    /// the open: no longer in doubt (see `sync::parity_in_doubt`).
    pub(crate) fresh_parity: HashMap<u64, Vec<(u32, u32)>>,
    /// Rows a recover has recomputed since the open: parity there is in doubt no
    /// longer.
    pub(crate) recomputed: crate::rebuilt::Recomputed,
    /// The partial-parity log, when on (RAID-4/5/6 with `log_sectors`).
    pub(crate) log: Option<crate::ppl::LogState>,
    /// The write-intent bitmap, when on.
    pub(crate) intent: Option<crate::intent::WriteIntent>,
    /// Per-block checksums, in integrity mode.
    pub(crate) integrity: Option<crate::integrity::Integrity>,
    pub(crate) latency: crate::latency::Latency,
    /// Members past the stall timeout that could not be failed (see `check_stalls`).
    stall_excused: Vec<bool>,
    /// Per role, how many times a new device took it ([`Engine::replace_member`]); per
    /// I/O in flight (by key), the count when it was sent.
    member_gen: Vec<u32>,
    /// Client and sync flushes out to members, and [`Engine::members_standing`] when
    /// they were last looked at for devices that no longer serve.
    flushes_out: usize,
    flushes_checked_at: u64,
    io_gen: Vec<u32>,
    /// The member whose completion being handled came from a replaced device.
    stale_member: Option<MemberIdx>,
    /// Each device's known bad ranges (its bad block log).
    pub(crate) known_bad: crate::badblocks::KnownBad,
    /// The completion being handled is a read of a known bad range: its error is no
    /// news about the device, and is not counted.
    pub(crate) known_bad_read: bool,
    /// Per role, the driver slot of the device that serves it: `r` or `raid_disks + r`.
    /// A replacement lives in the role's other slot, so that when it takes the role
    /// over only this table changes (the driver's slots never move under I/O in flight).
    slots: Vec<MemberIdx>,
    /// Per role, whether a replacement is being built for it (md's want_replacement).
    /// Inside the engine a replacement is the pseudo-member `raid_disks + r`.
    replacing: Vec<bool>,
    /// Per role, whether its device came in as a replacement: a write still in flight
    /// to the replacement pseudo-member that fails fails the role.
    took_over: Vec<bool>,
    now: Nanos,
}

impl Engine {
    /// An engine for `geo` whose members start in `members` (one entry per role; a
    /// member left out of the array is [`MemberState::Failed`]).
    pub fn new(geo: Geometry, members: Vec<MemberState>) -> Engine {
        assert_eq!(
            members.len(),
            usize::from(geo.raid_disks()),
            "one state per member"
        );
        let roles = members.len();
        Engine {
            geo,
            bufs: Buffers::new(),
            reqs: Slab::default(),
            client_reqs: 0,
            ops: Slab::default(),
            mops: Slab::default(),
            ios: Slab::default(),
            locks: HashMap::new(),
            out_io: VecDeque::new(),
            out_reply: VecDeque::new(),
            out_event: VecDeque::new(),
            stats: Stats::default(),
            read_rotor: 0,
            config: EngineConfig::default(),
            read_errors: vec![0; members.len()],
            sync: None,
            sync_flush_buf: None,
            sync_flush_rounds: 0,
            recovery_recorded: 0,
            sync_held: false,
            rebuilt_floor: vec![0; roles],
            recorded_floor: vec![0; roles],
            resync_owed: false,
            initial_resync: false,
            resync_after_clean_stop: None,
            superblocks_unstamped: false,
            failed_at_loss: Vec::new(),
            resync_passed: false,
            resync_reached: Vec::new(),
            fresh_parity: HashMap::new(),
            recomputed: Default::default(),
            log: None,
            intent: None,
            integrity: None,
            latency: crate::latency::Latency::new(members.len()),
            stall_excused: vec![false; members.len()],
            // Roles, then their replacement pseudo-members.
            member_gen: vec![0; 2 * members.len()],
            flushes_out: 0,
            flushes_checked_at: 0,
            io_gen: Vec::new(),
            stale_member: None,
            known_bad: crate::badblocks::KnownBad::new(2 * members.len()),
            known_bad_read: false,
            slots: (0..members.len()).map(member_idx).collect(),
            replacing: vec![false; members.len()],
            took_over: vec![false; members.len()],
            now: Nanos(0),
            members,
        }
    }

    pub fn config(&self) -> EngineConfig {
        self.config
    }

    /// Changes the tunables; a running sync takes the new pace from its next unit.
    /// Turning the partial-parity log on (RAID-4/5/6) first reads every member's ring
    /// and replays what a crash cut off; client requests wait for that.
    pub fn set_config(&mut self, config: EngineConfig) {
        self.config = EngineConfig {
            sync_window: config.sync_window.max(1),
            ..config
        };
        let wants_log =
            config.log_sectors > crate::ppl::RING_START && self.geo.level().has_parity();
        if wants_log && self.log.is_none() {
            self.log = Some(crate::ppl::LogState::new(
                config.log_sectors,
                self.members.len(),
            ));
            crate::ppl::start_recovery(self);
        }
    }

    /// Whether the partial-parity log is still reading or replaying its rings.
    pub fn log_recovering(&self) -> bool {
        self.log.as_ref().is_some_and(|l| l.recovering())
    }

    /// Whether the stripe log's rings held no marker or entry of the array at an open
    /// that owed a resync, or only ones older than another writer's session (see
    /// [`Engine::superblocks_unstamped`]): the log knows nothing of how its parity
    /// came to disagree (made over old contents and not yet resynced, or left dirty by
    /// md or by a server without the log), and vouches for it nowhere until the resync
    /// completes.
    pub fn log_knew_nothing(&self) -> bool {
        crate::ppl::knew_nothing(self)
    }

    /// Read errors `member` returned so far.
    pub fn read_errors(&self, member: MemberIdx) -> u32 {
        self.read_errors[member.index()]
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Size of the array in sectors.
    pub fn array_sectors(&self) -> u64 {
        self.geo.array_sectors()
    }

    pub fn buffers(&self) -> &Buffers {
        &self.bufs
    }

    pub fn buffers_mut(&mut self) -> &mut Buffers {
        &mut self.bufs
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Whether the stripe log lost a ring's entries at an unclean open and the resync
    /// that open owes has not completed: the parity of the stripes that ring held is
    /// in doubt until then, and a second fault there (a member missing, or refusing a
    /// write) is past the redundancy.
    pub fn log_rings_lost(&self) -> bool {
        crate::ppl::rings_lost(self)
    }

    /// The roles whose rings [`Engine::log_rings_lost`] counts lost: in the stripes
    /// each one holds parity of, that parity is in doubt.
    pub fn lost_log_rings(&self) -> Vec<MemberIdx> {
        crate::ppl::lost_rings(self)
    }

    /// Sectors of data the array has lost beyond its redundancy without a member
    /// saying so: rows of a member that died with the power under a write the stripe
    /// log could not work out (see `unknown`). They read as errors until written.
    pub fn unknown_sectors(&self) -> u64 {
        crate::unknown::sectors(self)
    }

    /// Whether any rows are unknown (see `unknown`): cheap, for paths that read the
    /// members without the engine and must not return them.
    pub fn has_unknown_rows(&self) -> bool {
        crate::unknown::any(self)
    }

    pub fn member_states(&self) -> &[MemberState] {
        &self.members
    }

    pub(crate) fn members_mut(&mut self) -> &mut [MemberState] {
        &mut self.members
    }

    /// The latest time the driver handed in.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Marks a member failed (the driver or an operator learned it is gone); later
    /// work avoids it.
    pub fn fail_member(&mut self, member: MemberIdx) {
        self.fail_member_for(member, FailReason::Requested);
    }

    /// [`Engine::fail_member`], for `reason`: the driver saw one of its I/Os fail
    /// outside the engine (a superblock write).
    pub fn fail_member_for(&mut self, member: MemberIdx, reason: FailReason) {
        // Entries waiting for this member's next log batch go on without it.
        crate::ppl::gather(self);
        self.fail(member, reason);
        self.abandon_flushes();
        crate::ppl::release(self);
    }

    pub(crate) fn fail(&mut self, member: MemberIdx, reason: FailReason) {
        if self.stale_member == Some(member) {
            return;
        }
        if let Some(role) = self.pseudo_role(member) {
            if self.replacing[role] {
                self.drop_replacement(role, reason);
            } else if self.took_over[role] {
                // A write sent to the replacement before it took the role failed: the
                // role's device missed it.
                self.fail(member_idx(role), reason);
            }
            return;
        }
        if self.replacing[member.index()] && self.members[member.index()] == MemberState::Active {
            self.out_event
                .push_back(Event::MemberFailed { member, reason });
            self.take_over(member.index());
            return;
        }
        let state = &mut self.members[member.index()];
        if *state == MemberState::Failed {
            return;
        }
        let was_rebuilding = *state == MemberState::Rebuilding;
        *state = MemberState::Failed;
        self.recomputed.forget(member);
        self.latency.left(member);
        self.out_event
            .push_back(Event::MemberFailed { member, reason });
        crate::intent::member_gone(self, member);
        if self.lost_error().is_some() {
            self.failed_at_loss.push(member);
        }
        crate::ppl::member_left(self);
        if was_rebuilding {
            crate::sync::targets_changed(self);
        }
    }

    /// The member of `role` left while a replacement was being built for it: the
    /// replacement takes the role over and goes on as an ordinary rebuild. Units a
    /// running recover has done are on it (copied, and every write since went to it
    /// too), which is exactly what [`MemberState::Rebuilding`] trusts.
    fn take_over(&mut self, role: usize) {
        let member = member_idx(role);
        let old_slot = self.slots[role];
        self.slots[role] = other_slot(old_slot, self.members.len());
        self.replacing[role] = false;
        self.took_over[role] = true;
        // What the old device still answers no longer counts for the role.
        self.member_gen[role] += 1;
        self.flushes_follow_takeover(role);
        self.read_errors[role] = 0;
        self.fresh_figures(role);
        crate::integrity::device_changed(self, role);
        self.stall_excused[role] = false;
        self.members[role] = MemberState::Rebuilding;
        self.recomputed.forget(member);
        self.rebuilt_floor[role] = 0;
        self.recorded_floor[role] = 0;
        crate::intent::member_gone(self, member);
        crate::ppl::member_left(self);
        // Its bitmap area holds what it was given when it came: write it all; and
        // its ring what the rings say.
        crate::intent::rewrite_all(self);
        crate::ppl::device_joined(self);
        self.out_event.push_back(Event::ReplacementTookOver {
            role: member,
            old_slot,
        });
        crate::sync::targets_changed(self);
    }

    /// The replacement of `role` failed: dropped; the role's member serves on.
    fn drop_replacement(&mut self, role: usize, reason: FailReason) {
        self.replacing[role] = false;
        // Its I/Os still in flight no longer count.
        self.member_gen[self.members.len() + role] += 1;
        self.out_event.push_back(Event::ReplacementFailed {
            role: member_idx(role),
            reason,
        });
        crate::sync::targets_changed(self);
    }

    /// A replacement that holds all of its role takes it over (at the end of a
    /// recover); the device that held it leaves.
    pub(crate) fn promote_replacement(&mut self, role: usize) {
        let old_slot = self.slots[role];
        self.slots[role] = other_slot(old_slot, self.members.len());
        self.replacing[role] = false;
        self.took_over[role] = true;
        self.member_gen[role] += 1;
        self.flushes_follow_takeover(role);
        self.read_errors[role] = 0;
        self.fresh_figures(role);
        crate::integrity::device_changed(self, role);
        self.stall_excused[role] = false;
        crate::intent::member_gone(self, member_idx(role));
        crate::intent::rewrite_all(self);
        crate::ppl::device_joined(self);
        self.out_event.push_back(Event::ReplacementDone {
            role: member_idx(role),
            old_slot,
        });
    }

    /// Starts building a replacement for the active member of `role` (md's
    /// want_replacement): from now on every write to the role also goes to the
    /// replacement, in the driver slot [`Engine::replacement_slot`] names, and a
    /// [`SyncKind::Recover`](crate::SyncKind::Recover) (started, or restarted from unit
    /// 0, by the caller as for [`Engine::mark_rebuilding`]) copies the role's data onto
    /// it, reading the member directly and rebuilding from the others where that read
    /// fails. When the recover completes the replacement takes the role
    /// ([`Event::ReplacementDone`]); if the member fails first, the replacement takes
    /// the role over and is rebuilt ([`Event::ReplacementTookOver`]); if the
    /// replacement fails, it is dropped ([`Event::ReplacementFailed`]).
    pub fn start_replacement(&mut self, role: MemberIdx) -> Result<(), crate::SyncError> {
        let r = role.index();
        if self.geo.level() == Level::Raid0 {
            return Err(crate::SyncError::NoRedundancy("replace a member"));
        }
        if self.replacing.get(r).copied().unwrap_or(false) {
            return Err(crate::SyncError::AlreadyReplacing(role.0));
        }
        if self.members.get(r) != Some(&MemberState::Active) {
            return Err(crate::SyncError::NotActive(role.0));
        }
        let n = self.members.len();
        // What an earlier replacement of this role still answers does not count.
        self.member_gen[n + r] += 1;
        crate::badblocks::device_changed(self, self.replacement_slot(role));
        self.replacing[r] = true;
        self.took_over[r] = false;
        crate::sync::restart_recover(self);
        Ok(())
    }

    /// Whether a replacement is being built for `role`.
    pub fn is_replacing(&self, role: MemberIdx) -> bool {
        self.replacing.get(role.index()).copied().unwrap_or(false)
    }

    /// The driver slot of the device serving `role` (`role`, or `raid_disks + role`
    /// once a replacement took it over). Drivers keep `2 * raid_disks` slots.
    pub fn device_slot(&self, role: MemberIdx) -> MemberIdx {
        self.slots[role.index()]
    }

    /// The driver slot the replacement of `role` lives in: the role's other slot.
    pub fn replacement_slot(&self, role: MemberIdx) -> MemberIdx {
        other_slot(self.slots[role.index()], self.members.len())
    }

    /// Whether the array could go on without the device in driver slot `slot`: a
    /// replacement being built always can (its role's member serves on), a role's
    /// member where the redundancy allows, a device that serves no role trivially.
    /// The stall timeout fails only such devices; the others are waited for (see
    /// `check_stalls`), and so is the driver's own I/O to them.
    pub fn can_do_without_device(&self, slot: MemberIdx) -> bool {
        let roles = (0..self.members.len()).map(member_idx);
        for role in roles {
            if self.is_replacing(role) && self.replacement_slot(role) == slot {
                return true;
            }
            if self.device_slot(role) == slot && self.members[role.index()] != MemberState::Failed {
                return !self.cannot_do_without(role);
            }
        }
        true
    }

    /// Drops the replacement being built for `role` (an operator failed it); the
    /// role's member serves on. False when none is being built.
    pub fn fail_replacement(&mut self, role: MemberIdx) -> bool {
        match self.replacement_of(role) {
            Some(pseudo) => {
                self.fail_member(pseudo);
                true
            }
            None => false,
        }
    }

    /// [`Engine::fail_replacement`] for `reason` (an I/O the driver made itself to
    /// it failed), which its event reports.
    pub fn fail_replacement_for(&mut self, role: MemberIdx, reason: FailReason) -> bool {
        match self.replacement_of(role) {
            Some(pseudo) => {
                self.fail_member_for(pseudo, reason);
                true
            }
            None => false,
        }
    }

    /// The role whose replacement pseudo-member `member` is, if it is one.
    pub(crate) fn pseudo_role(&self, member: MemberIdx) -> Option<usize> {
        member.index().checked_sub(self.members.len())
    }

    /// The replacement pseudo-member of `role`, while one is being built.
    pub(crate) fn replacement_of(&self, role: MemberIdx) -> Option<MemberIdx> {
        self.replacing
            .get(role.index())
            .copied()
            .unwrap_or(false)
            .then(|| member_idx(self.members.len() + role.index()))
    }

    /// Whether any replacement is being built.
    pub(crate) fn any_replacing(&self) -> bool {
        self.replacing.contains(&true)
    }

    /// Replacement pseudo-members being built, in role order.
    pub(crate) fn replacements(&self) -> Vec<MemberIdx> {
        (0..self.members.len())
            .filter_map(|r| self.replacement_of(member_idx(r)))
            .collect()
    }

    /// The driver slot an I/O for `member` (a role or a replacement) goes to.
    pub(crate) fn slot_of(&self, member: MemberIdx) -> MemberIdx {
        match self.pseudo_role(member) {
            Some(role) => other_slot(self.slots[role], self.members.len()),
            None => self.slots[member.index()],
        }
    }

    /// A read from `member` failed: a device gone is failed at once, a medium error
    /// counted (the caller repairs around it).
    pub(crate) fn read_failed(&mut self, member: MemberIdx, failure: IoFailed) {
        match failure {
            IoFailed::Gone => self.fail(member, FailReason::DeviceGone),
            IoFailed::Medium => self.note_read_error(member),
        }
    }

    /// A write (or flush) to `member` failed: it is failed.
    pub(crate) fn write_failed(&mut self, member: MemberIdx, failure: IoFailed) {
        let reason = match failure {
            IoFailed::Gone => FailReason::DeviceGone,
            IoFailed::Medium => FailReason::WriteError,
        };
        self.fail(member, reason);
    }

    /// Counts a read error of `member`; past the limit, fails it — where the array
    /// survives without it. A member the array cannot do without (any RAID-0 member,
    /// the last copy of a degraded array's data) keeps serving what it can read, and
    /// only the ranges it cannot read are lost (reported unreadable): failing it would
    /// lose the whole array instead. md fails no RAID-0 member for read errors either,
    /// and keeps a mirror's last device (its `fail_last_dev` off).
    pub(crate) fn note_read_error(&mut self, member: MemberIdx) {
        if self.stale_member == Some(member) || self.known_bad_read {
            return;
        }
        let count = &mut self.read_errors[member.index()];
        *count = count.saturating_add(1);
        if *count <= self.config.max_read_errors {
            return;
        }
        let count = *count;
        if !self.cannot_do_without(member) {
            self.fail(member, FailReason::ReadErrors(count));
        }
    }

    /// Whether failing `member` would lose data: it holds the last copy of some of it
    /// (any RAID-0 member; a degraded array's). Never a replacement: its role's member
    /// serves on without it.
    pub(crate) fn cannot_do_without(&self, member: MemberIdx) -> bool {
        if self.pseudo_role(member).is_some() {
            return false;
        }
        let mut states = self.members.clone();
        states[member.index()] = MemberState::Failed;
        Engine::lost_with(self.geo, states).is_some()
    }

    /// Starts the service-time figures of `role` afresh (see `Latency::forget`); a
    /// member that was slow is reported no longer so.
    pub(crate) fn fresh_figures(&mut self, role: usize) {
        let member = member_idx(role);
        if self.latency.forget(member) {
            self.push_event(Event::SlowMember {
                member,
                slow: false,
                mean: Nanos(0),
                peers: Nanos(0),
            });
        }
    }

    pub(crate) fn push_event(&mut self, event: Event) {
        self.out_event.push_back(event);
    }

    /// Whether nothing is in flight: no request, operation, member I/O or sync.
    pub fn is_idle(&self) -> bool {
        self.reqs.len() == 0
            && self.ops.len() == 0
            && self.mops.len() == 0
            && self.ios.len() == 0
            && self.sync.is_none()
            && !self.log_recovering()
            && self.write_intent_settled()
    }

    /// Whether any member I/O is out (its completion will come back to the engine).
    pub(crate) fn member_io_out(&self) -> bool {
        self.ios.len() > 0
    }

    /// Whether no request (a client's, or the array's own checkpoint) is in flight (a
    /// sync may be running).
    pub fn clients_idle(&self) -> bool {
        self.reqs.len() == 0
    }

    /// Whether a client's request is in flight: the array's own checkpoints (the
    /// flushes before a sync's progress is recorded) do not make a sync yield.
    pub(crate) fn clients_busy(&self) -> bool {
        self.client_reqs > 0
    }

    /// Takes a client request. Bad requests are answered at once through
    /// [`Engine::poll_reply`]; good ones produce member I/Os.
    pub fn handle_request(&mut self, req: Request, now: Nanos) {
        // Stripe writes ready to log meanwhile share their members' next log batches.
        crate::ppl::gather(self);
        self.request(req, now);
        crate::ppl::release(self);
    }

    /// [`Engine::handle_request`] within the log's gathering.
    fn request(&mut self, req: Request, now: Nanos) {
        self.now = now;
        if let Some(log) = self.log.as_mut().filter(|l| l.recovering()) {
            log.hold(req, now);
            return;
        }
        if let Err(error) = self.validate(&req) {
            self.out_reply.push_back(Reply {
                id: req.id,
                result: Err(error),
            });
            return;
        }
        let flush = matches!(req.kind, RequestKind::Flush | RequestKind::Checkpoint);
        if !flush && req.sectors == 0 {
            self.out_reply.push_back(Reply {
                id: req.id,
                result: Ok(()),
            });
            return;
        }
        if req.kind != RequestKind::Checkpoint {
            self.client_reqs += 1;
        }
        let key = self.reqs.insert(ReqState {
            id: req.id,
            buf: req.buf,
            own_buf: false,
            log_covers: None,
            intent: None,
            checkpoint: req.kind == RequestKind::Checkpoint,
            pending: 1,
            error: None,
        });
        match req.kind {
            RequestKind::Flush | RequestKind::Checkpoint => self.submit_flush(key),
            RequestKind::Read | RequestKind::Write => {
                let seg = Segment {
                    sector: req.sector,
                    sectors: req.sectors,
                    buf_off: 0,
                    write: req.kind == RequestKind::Write,
                };
                // A write waits until its chunks' bits are on every member.
                if !seg.write || crate::intent::admit(self, key, seg) {
                    self.submit_segment(key, seg);
                }
            }
        }
        self.request_step_done(key, None);
        crate::sync::pump(self);
    }

    fn validate(&self, req: &Request) -> Result<(), EngineError> {
        // The array's own barrier still runs on what is left of a failed array: the
        // superblocks that record the failure must be durable, or the next open would
        // take back the member that failed as if it held everything.
        if req.kind != RequestKind::Checkpoint {
            if let Some(error) = self.lost_error() {
                return Err(error);
            }
        }
        if matches!(req.kind, RequestKind::Flush | RequestKind::Checkpoint) {
            return Ok(());
        }
        let end = req.sector.saturating_add(req.sectors);
        if end > self.geo.array_sectors() {
            return Err(EngineError::OutOfRange {
                sector: req.sector,
                end,
                array_sectors: self.geo.array_sectors(),
            });
        }
        let expected = sectors_to_bytes(req.sectors);
        let actual = req.buf.map_or(0, |b| self.bufs.len(b));
        if actual != expected {
            return Err(EngineError::BufferSize { expected, actual });
        }
        Ok(())
    }

    /// Takes the result of a member I/O the engine emitted.
    pub fn handle_completion(&mut self, io: IoId, result: Result<(), IoFailed>, now: Nanos) {
        // Stripe writes ready to log meanwhile share their members' next log batches.
        crate::ppl::gather(self);
        self.completion(io, result, now);
        self.abandon_flushes();
        crate::ppl::release(self);
    }

    /// [`Engine::handle_completion`] within the log's gathering.
    fn completion(&mut self, io: IoId, result: Result<(), IoFailed>, now: Nanos) {
        self.now = now;
        let key = usize::try_from(io.0).expect("io ids fit usize");
        let target = self.ios.remove(key);
        match target {
            IoTarget::Abandoned => return,
            IoTarget::Flush { .. } | IoTarget::SyncFlush { .. } => self.flushes_out -= 1,
            _ => {}
        }
        // An I/O sent to a member since replaced in its role (a spare stepped in)
        // completes with no bearing on the newcomer: its failure fails nobody.
        let stale = target_member(&target)
            .filter(|m| self.io_gen.get(key).copied().unwrap_or(0) != self.member_gen[m.index()]);
        self.stale_member = stale;
        // Before the checksums are looked at: a known bad range's contents are nobody's.
        let (result, known_bad_read) =
            crate::badblocks::on_completion(self, key, stale.is_none(), result);
        self.known_bad_read = known_bad_read;
        let result = crate::integrity::check_read(
            self,
            key,
            target_member(&target),
            stale.is_some(),
            result,
        );
        if let Some(member) =
            target_member(&target).filter(|m| stale.is_none() && self.pseudo_role(*m).is_none())
        {
            self.stall_excused[member.index()] = false;
            if let Some(slow) = self.latency.completed(key, member, now) {
                let (mean, peers) = self.latency.against_peers(member);
                let (mean, peers) = (mean.unwrap_or_default(), peers.unwrap_or_default());
                self.push_event(Event::SlowMember {
                    member,
                    slow,
                    mean,
                    peers,
                });
            }
        }
        if result.is_err() {
            self.stats.io_errors += 1;
        }
        match target {
            IoTarget::Abandoned => {}
            IoTarget::Direct { req, member, seg } => {
                if stale.is_some() && !seg.write {
                    // See `completion_is_stale`: planned again, around the newcomer.
                    self.submit_segment(req, seg);
                } else if let Err(failure) = result {
                    if seg.write && failure == IoFailed::Medium && self.cannot_do_without(member) {
                        // Nowhere else to keep these sectors: the write fails and the
                        // member serves on (md's raid0); failing it would lose every
                        // other sector it holds. Its checksums of them were taken for
                        // data it refused.
                        let at = self
                            .geo
                            .copies(seg.sector)
                            .as_slice()
                            .iter()
                            .find(|p| p.member == member)
                            .map(|p| p.sector);
                        if let Some(at) = at {
                            let slot = self.slot_of(member);
                            crate::integrity::forget_refused(self, slot, at, seg.sectors);
                        }
                        self.fail_request(
                            req,
                            EngineError::Unwritable {
                                sector: seg.sector,
                                end: seg.sector + seg.sectors,
                            },
                        );
                    } else if seg.write {
                        self.write_failed(member, failure);
                        if let Some(error) = self.segment_lost(seg) {
                            self.fail_request(req, error);
                        }
                    } else {
                        self.read_failed(member, failure);
                        if failure == IoFailed::Gone {
                            // Gone: plan the read again around it.
                            self.submit_segment(req, seg);
                        } else {
                            self.submit_repair_read(req, seg, member);
                        }
                    }
                }
                self.request_step_done(req, None);
            }
            IoTarget::Stripe { op, member } => {
                crate::stripe::on_completion(self, op, member, result);
            }
            IoTarget::Mirror { op, member } => {
                crate::mirror::on_completion(self, op, member, result);
            }
            IoTarget::MirrorRetry {
                op,
                member,
                sector,
                sectors,
            } => {
                crate::mirror::on_retry(self, op, member, sector, sectors, result);
            }
            IoTarget::StripeRetry {
                op,
                member,
                sector,
                sectors,
            } => {
                crate::stripe::on_retry(self, op, member, sector, sectors, result);
            }
            IoTarget::Flush { req, member } => {
                let mut error = None;
                if result.is_err() {
                    self.fail(member, FailReason::WriteError);
                    error = self.lost_error();
                }
                self.request_step_done(req, error);
            }
            IoTarget::SyncFlush { member, round } => {
                if result.is_err() {
                    self.fail(member, FailReason::WriteError);
                }
                crate::sync::flush_done(self, round);
            }
            IoTarget::LogCheckpoint { member } => {
                crate::ppl::on_checkpoint_flush(self, member, result);
            }
            IoTarget::LogRecovery { member } => {
                crate::ppl::on_recovery_io(self, member, result);
            }
            IoTarget::LogReplayRetry {
                member,
                sector,
                sectors,
            } => {
                crate::ppl::on_replay_retry(self, member, sector, sectors, result);
            }
            IoTarget::LogMarker { member, flushed } => {
                crate::ppl::on_marker_io(self, member, flushed, result);
            }
            IoTarget::LogBatch { member } => {
                crate::ppl::on_batch_io(self, member, result);
            }
            IoTarget::Intent { member, buf, round } => {
                crate::intent::on_io(self, member, (buf, round), result, stale.is_some());
            }
            IoTarget::ChecksumPages {
                member,
                slot,
                buf,
                generation,
            } => {
                crate::integrity::on_pages_written(
                    self,
                    member,
                    slot,
                    buf,
                    generation,
                    result,
                    stale.is_some(),
                );
            }
        }
        self.stale_member = None;
        self.known_bad_read = false;
        crate::sync::pump(self);
    }

    /// Advances the engine's notion of time: a sync paced to its rate limit goes on.
    pub fn handle_timeout(&mut self, now: Nanos) {
        // Stripe writes ready to log meanwhile share their members' next log batches.
        crate::ppl::gather(self);
        self.timeout(now);
        crate::ppl::release(self);
    }

    /// [`Engine::handle_timeout`] within the log's gathering.
    fn timeout(&mut self, now: Nanos) {
        self.now = now;
        self.check_stalls();
        self.abandon_flushes();
        crate::intent::kick(self);
        crate::sync::pump(self);
    }

    /// Fails members with an I/O outstanding past the stall timeout.
    fn check_stalls(&mut self) {
        let Some(first) = self.stall_deadline() else {
            return;
        };
        if self.now < first {
            return;
        }
        let timeout = self.config.stall_timeout.0;
        let now = self.now.0;
        let mut stalled: Vec<MemberIdx> = self
            .ios
            .iter()
            .filter(|(key, _)| self.latency.issued_at(*key).0.saturating_add(timeout) <= now)
            .filter_map(|(key, target)| {
                target_member(target).filter(|m| {
                    self.io_gen.get(key).copied().unwrap_or(0) == self.member_gen[m.index()]
                })
            })
            .filter(|m| self.is_present(*m) && !self.is_stall_excused(*m))
            .collect();
        stalled.sort_unstable();
        stalled.dedup();
        for member in stalled {
            if self.pseudo_role(member).is_some() {
                // A replacement is never the only copy of anything: it is dropped (as
                // one that fails), and writes stop going to it; the role's member
                // serves on.
                self.fail(member, FailReason::Stalled);
                continue;
            }
            // Only where the array survives without it: failing the last copy of some
            // data would turn a slow answer into none.
            if !self.cannot_do_without(member) {
                self.fail(member, FailReason::Stalled);
            } else {
                // Waited for as it is, until it answers.
                self.stall_excused[member.index()] = true;
            }
        }
    }

    /// Answers the client and sync flushes still out to devices that no longer serve
    /// (their member failed, or another device took the role), as if the devices
    /// had refused them: what the flush was to make durable there no longer counts,
    /// and a device that hangs in the kernel for good then holds no client flush back
    /// (its data I/O still waits: its buffer is lent to the kernel; a flush's buffer
    /// is never looked at). The slot stays taken until the device answers, and that
    /// answer is ignored. Looked at only while a flush is out and the members'
    /// standing has changed since the last look, so the I/O path pays nothing.
    pub(crate) fn abandon_flushes(&mut self) {
        if self.flushes_out == 0 {
            return;
        }
        let standing = self.members_standing();
        if standing == self.flushes_checked_at {
            return;
        }
        self.flushes_checked_at = standing;
        let gone: Vec<usize> = self
            .ios
            .iter()
            .filter_map(|(key, target)| match *target {
                IoTarget::Flush { member, .. } | IoTarget::SyncFlush { member, .. }
                    if !self.flush_device_serves(key, member) =>
                {
                    Some(key)
                }
                _ => None,
            })
            .collect();
        let mut sync_flush = false;
        for key in gone {
            let target = std::mem::replace(self.ios.get_mut(key), IoTarget::Abandoned);
            self.flushes_out -= 1;
            match target {
                IoTarget::Flush { req, .. } => {
                    let error = self.lost_error();
                    self.request_step_done(req, error);
                }
                IoTarget::SyncFlush { round, .. } => {
                    crate::sync::flush_done(self, round);
                    sync_flush = true;
                }
                _ => unreachable!("only flushes are abandoned"),
            }
        }
        if sync_flush {
            crate::sync::pump(self);
        }
    }

    /// Whether the device flush `key` went to (for `member`, a role or a replacement's
    /// slot) still serves: the same device generation, and a role not failed — a
    /// replacement while it is being built, or once it took the role over, its role's.
    fn flush_device_serves(&self, key: usize, member: MemberIdx) -> bool {
        if self.io_gen.get(key).copied().unwrap_or(0) != self.member_gen[member.index()] {
            return false;
        }
        match self.pseudo_role(member) {
            Some(role) if self.took_over[role] => self.members[role] != MemberState::Failed,
            Some(role) => self.replacing[role],
            None => self.members[member.index()] != MemberState::Failed,
        }
    }

    /// The replacement of `role` took the role: its flushes still out are the role's
    /// from now on. The generation of the replacement's slot moves on with the next
    /// replacement, which would make them look sent to a device that left (and get
    /// them answered with the role's device unflushed), and the stall check would
    /// not see them hang.
    fn flushes_follow_takeover(&mut self, role: usize) {
        let pseudo = member_idx(self.members.len() + role);
        let gen = self.member_gen[pseudo.index()];
        let keys: Vec<usize> = self
            .ios
            .iter()
            .filter(|(key, target)| {
                matches!(**target,
                    IoTarget::Flush { member, .. } | IoTarget::SyncFlush { member, .. }
                        if member == pseudo)
                    && self.io_gen.get(*key).copied().unwrap_or(0) == gen
            })
            .map(|(key, _)| key)
            .collect();
        for key in keys {
            if let IoTarget::Flush { member, .. } | IoTarget::SyncFlush { member, .. } =
                self.ios.get_mut(key)
            {
                *member = member_idx(role);
            }
            self.io_gen[key] = self.member_gen[role];
        }
    }

    /// A digest of who serves: member states, device generations, replacements.
    fn members_standing(&self) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut mix = |v: u64| h = (h ^ v).wrapping_mul(0x0100_0000_01b3);
        for m in &self.members {
            mix(*m as u64);
        }
        for &g in &self.member_gen {
            mix(u64::from(g));
        }
        for (&r, &t) in self.replacing.iter().zip(&self.took_over) {
            mix(u64::from(r) | u64::from(t) << 1);
        }
        h
    }

    /// Whether `member`'s stalls are waited out: a role's member that the array cannot
    /// do without, until it next answers (never a replacement).
    fn is_stall_excused(&self, member: MemberIdx) -> bool {
        self.stall_excused
            .get(member.index())
            .copied()
            .unwrap_or(false)
    }

    /// When the oldest I/O in flight to a present member passes the stall timeout.
    /// A member that cannot be failed is excused until it next answers.
    fn stall_deadline(&self) -> Option<Nanos> {
        let timeout = self.config.stall_timeout.0;
        if timeout == 0 {
            return None;
        }
        self.ios
            .iter()
            .filter(|(key, t)| {
                target_member(t).is_some_and(|m| {
                    self.is_present(m)
                        && !self.is_stall_excused(m)
                        && self.io_gen.get(*key).copied().unwrap_or(0) == self.member_gen[m.index()]
                })
            })
            .map(|(key, _)| self.latency.issued_at(key).0.saturating_add(timeout))
            .min()
            .map(Nanos)
    }

    /// When the engine next wants [`Engine::handle_timeout`]: when a paced sync may
    /// issue its next unit, or an I/O in flight passes the stall timeout.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        [
            crate::sync::next_wakeup(self),
            self.stall_deadline(),
            crate::intent::next_wakeup(self),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Something the driver should record (a member failed, a sync ended...).
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out_event.pop_front()
    }

    pub fn poll_member_io(&mut self) -> Option<MemberIo> {
        self.out_io.pop_front()
    }

    pub fn poll_reply(&mut self) -> Option<Reply> {
        self.out_reply.pop_front()
    }

    /// Records the write-intent chunks request `req` is counted in on.
    pub(crate) fn set_request_intent(&mut self, req: usize, chunks: (u64, u64)) {
        self.reqs.get_mut(req).intent = Some(chunks);
    }

    /// Plans a read or write of `seg` (a write's write-intent bits are on the members).
    pub(crate) fn submit_segment(&mut self, req: usize, seg: Segment) {
        match self.geo.level() {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => crate::stripe::submit(self, req, seg),
            Level::Raid0 | Level::Raid1 | Level::Raid10 => crate::mirror::submit(self, req, seg),
        }
    }

    /// A direct read of `seg` from `bad` failed: read it again around `bad`, and
    /// rewrite what `bad` could not return.
    fn submit_repair_read(&mut self, req: usize, seg: Segment, bad: MemberIdx) {
        match self.geo.level() {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                crate::stripe::submit_repair_read(self, req, seg, bad)
            }
            Level::Raid1 | Level::Raid10 => crate::mirror::submit_repair_read(self, req, seg, bad),
            Level::Raid0 => self.fail_request(
                req,
                EngineError::Unreadable {
                    sector: seg.sector,
                    end: seg.sector + seg.sectors,
                },
            ),
        }
    }

    fn submit_flush(&mut self, req: usize) {
        // On a failed array (only the array's own checkpoints get here) the log vouches
        // for nothing more: writes the failure cut off are torn beyond redundancy.
        let lost = self.reqs.get(req).checkpoint && self.lost_error().is_some();
        let covers = self
            .log
            .as_mut()
            .filter(|_| !lost)
            .map(|log| (log.flush_covers(), log.begin_flush_round()));
        self.reqs.get_mut(req).log_covers = covers;
        // Replacements too: what a client made durable must be durable on the device
        // that will hold the role.
        for member in self.flush_targets() {
            let buf = self.empty_slice(req);
            self.emit(
                member,
                IoKind::Flush,
                0,
                buf,
                IoTarget::Flush { req, member },
            );
        }
    }

    /// Flushes `member` for the end of a sync.
    pub(crate) fn emit_sync_flush(&mut self, member: MemberIdx, round: u64) {
        let buf = match self.sync_flush_buf {
            Some(buf) => buf,
            None => {
                let buf = self.bufs.alloc(0);
                self.sync_flush_buf = Some(buf);
                buf
            }
        };
        let slice = BufSlice {
            buf,
            offset: 0,
            len: 0,
        };
        self.emit(
            member,
            IoKind::Flush,
            0,
            slice,
            IoTarget::SyncFlush { member, round },
        );
    }

    /// A zero-length slice for I/Os that move no data.
    fn empty_slice(&mut self, req: usize) -> BufSlice {
        let buf = match self.reqs.get(req).buf {
            Some(buf) => buf,
            None => {
                let buf = self.bufs.alloc(0);
                let state = self.reqs.get_mut(req);
                state.buf = Some(buf);
                state.own_buf = true;
                buf
            }
        };
        BufSlice {
            buf,
            offset: 0,
            len: 0,
        }
    }

    /// Whether the completion being handled is of an I/O sent to the device that
    /// served its slot before a newcomer took the slot (a hot spare stepping into a
    /// failed role). A read's bytes are then not the role's: the role's device holds
    /// nothing yet — and they may not even be the old device's, since the driver
    /// sends what it had not yet submitted to the device in the slot when it does
    /// (found by a server whose resync read a newcomer's blanks as data and "repaired"
    /// parity to them). Such a read is planned again, as one from a device gone.
    pub(crate) fn completion_is_stale(&self) -> bool {
        self.stale_member.is_some()
    }

    /// Whether `member` holds good data for sync unit `unit` (and so serves reads
    /// there and takes writes).
    pub(crate) fn in_sync(&self, member: MemberIdx, unit: u64) -> bool {
        match self.members[member.index()] {
            MemberState::Active => true,
            MemberState::Failed => false,
            MemberState::Rebuilding => {
                unit < self.rebuilt_floor[member.index()] || crate::sync::recovered(self, unit)
            }
        }
    }

    /// The superblocks now record the running recover's targets as rebuilt below
    /// `unit` (its checkpoint, made durable first; a member rebuilt further before
    /// the walk started over keeps its own record). Until the driver says so, stripe
    /// writes over units the recover has rebuilt since keep those members' rows in
    /// their stripe-log entries: after a crash the members count as rebuilt only up
    /// to the record, and a replay could not read their rows from them.
    pub fn set_recovery_recorded(&mut self, unit: u64) {
        self.recovery_recorded = unit;
    }

    /// Holds the running sync's new launches (`true`) while the driver records its
    /// checkpoint, or lets it go on (`false`). A superblock update writes the members
    /// one by one, each after the engine's I/O to it has left the kernel: with the
    /// sync launching on meanwhile, each member's write waits for a fresh window of
    /// sync reads (on members answering in 20 ms a checkpoint, which the clients wait
    /// through, took 150-190 ms so, 120 ms held). Units in flight complete; clients'
    /// requests go on.
    pub fn hold_sync(&mut self, held: bool) {
        self.sync_held = held;
        if !held {
            crate::sync::pump(self);
        }
    }

    /// The unit below which the superblocks record `member`, being rebuilt, as
    /// rebuilt: what [`Engine::set_recovery_recorded`] last said for the running walk
    /// (or where it started), or what was recorded for the member before the walk
    /// started over, whichever is further.
    pub fn recovery_recorded(&self, member: MemberIdx) -> u64 {
        self.recorded_floor[member.index()].max(self.recovery_recorded)
    }

    /// The unit below which `member`, being rebuilt, holds everything: what the
    /// running recover has done, or what an earlier walk did for it, whichever is
    /// further (0 when it is not being rebuilt).
    pub fn rebuilt_below(&self, member: MemberIdx) -> u64 {
        if self.members[member.index()] != MemberState::Rebuilding {
            return 0;
        }
        let walk = self
            .sync_progress()
            .filter(|p| p.kind == crate::SyncKind::Recover)
            .map_or(0, |p| p.done_below);
        walk.max(self.rebuilt_floor[member.index()])
    }

    /// A member being rebuilt ([`Engine::mark_rebuilding`]) whose superblock records it
    /// as rebuilt below `unit` (read at open, or kept across a crash): it serves
    /// those units from now on, and the recover need not rebuild them for it. Start
    /// the recover from the lowest such unit among the members being rebuilt.
    pub fn resume_rebuilding(&mut self, member: MemberIdx, unit: u64) {
        if self.members[member.index()] == MemberState::Rebuilding {
            self.rebuilt_floor[member.index()] = unit;
            self.recorded_floor[member.index()] = unit;
        }
    }

    /// Whether every stripe write logged while a member that has left since was
    /// present is durable: such entries lack its rows, so until then a power cut could
    /// leave a torn stripe the replay cannot put right. The engine makes them durable
    /// as soon as their writes finish (a flush of every member), not at the next
    /// client flush.
    pub fn departures_durable(&self) -> bool {
        crate::ppl::departures_durable(self)
    }

    /// The array was found stopped uncleanly: until a resync completes, the copies of
    /// a mirror and a stripe's parity may disagree with its data where writes were
    /// cut off — also while the resync waits for a recover to make the array whole
    /// first. Reads of mirrors then take the copy the resync will keep (as md does
    /// while its resync is pending), and stripe writes do not trust old parity. With
    /// the stripe log, a replay that read every entry put parity right, and nothing
    /// is owed for parity.
    pub fn owe_resync(&mut self) {
        self.resync_owed = true;
        self.resync_after_clean_stop = None;
        self.initial_resync = false;
    }

    /// [`Engine::owe_resync`] for an array made over old contents that nothing has
    /// written since (md's `resync_offset` 0 and its superblocks' first event count):
    /// its parity never agreed with its data, but no write was ever cut off either.
    /// The stripe log, which holds nothing of it yet, keeps the resync owed and writes
    /// ahead of it away from the old parity, yet lets a row that fails to read be
    /// rebuilt from parity as md would: wherever a client writes from now on, it makes
    /// parity from all the stripe's data, and the first marker carries that on. (An
    /// array whose log knows nothing of it otherwise — left dirty by md or by a server
    /// without the log — may hold parity a cut-off write tore, and is not trusted.)
    pub fn owe_initial_resync(&mut self) {
        self.owe_resync();
        self.initial_resync = true;
    }

    /// [`Engine::owe_resync`] where the array was stopped cleanly with its resync
    /// done below md's `resync_offset` `offset` (recorded by the stop; see
    /// [`Engine::unit_to_resync_offset`]): every write was durable then, so the stripe
    /// log's rings lost nothing a crash cut off, and what the resync did below that
    /// point stands.
    pub fn owe_resync_after_a_clean_stop(&mut self, offset: u64) {
        self.resync_owed = true;
        self.resync_after_clean_stop = Some(self.resync_offset_to_unit(offset));
    }

    /// The newest superblock does not carry the stamp a session that kept the stripe
    /// log puts on every superblock it writes (the driver's: xraid writes the update
    /// time to the microsecond then, md and mdadm whole seconds): md ran the array
    /// since, or mdadm changed it, or an xraid session without the log (or a build
    /// before the stamp) wrote it. Said before the log's recovery starts
    /// (`EngineConfig::log_sectors`).
    ///
    /// Where the rings' newest entry or marker comes from a build that stamps (every
    /// one this build writes says so), something wrote the array after the log last
    /// did, and the rings know nothing of its writes: their entries are older than
    /// them, so the open replays none (partial parity of rows written since would
    /// make parity wrong), and their markers' word on parity is stale — where the
    /// superblocks owe a resync, the log vouches for parity nowhere until one
    /// completes, on top of the doubts an earlier marker pins to stripes. Where it
    /// comes from an older build, nothing tells who wrote last, and the rings count
    /// as before.
    pub fn superblocks_unstamped(&mut self) {
        self.superblocks_unstamped = true;
    }

    /// Whether a resync is owed (see [`Engine::owe_resync`]) and has not completed.
    pub fn resync_owed(&self) -> bool {
        self.resync_owed
    }

    /// A member's mean service time, once measured.
    pub fn member_latency(&self, member: MemberIdx) -> Option<Nanos> {
        self.latency.mean(member)
    }

    /// Whether `member` is slow next to its peers (RAID-1/10 reads avoid it).
    pub fn is_slow(&self, member: MemberIdx) -> bool {
        self.latency.is_slow(member)
    }

    /// A new device takes `member`'s role (a spare stepping in): what the old one still
    /// answers no longer counts for (or against) the role, and the newcomer is rebuilt.
    pub fn replace_member(&mut self, member: MemberIdx) -> Result<(), crate::SyncError> {
        self.member_gen[member.index()] += 1;
        crate::badblocks::device_changed(self, self.slot_of(member));
        self.took_over[member.index()] = false;
        crate::intent::member_gone(self, member);
        self.stall_excused[member.index()] = false;
        self.read_errors[member.index()] = 0;
        self.fresh_figures(member.index());
        crate::integrity::device_changed(self, member.index());
        if self.geo.level() == Level::Raid0 {
            return Err(crate::SyncError::NoRedundancy("rebuild"));
        }
        // Even over a member being rebuilt: the new device holds none of it.
        crate::sync::begin_rebuild(self, member);
        Ok(())
    }

    /// Members to flush: those still part of the array, and replacements being built.
    pub(crate) fn flush_targets(&self) -> Vec<MemberIdx> {
        let mut members = self.present_members();
        members.extend(self.replacements());
        members
    }

    /// Members still part of the array (active or being rebuilt), in role order.
    pub(crate) fn present_members(&self) -> Vec<MemberIdx> {
        (0..self.members.len())
            .map(member_idx)
            .filter(|&m| self.is_present(m))
            .collect()
    }

    /// Emits a flush with the empty slice of `buf` to each of `members`.
    pub(crate) fn emit_flushes(
        &mut self,
        members: &[MemberIdx],
        buf: BufId,
        target: impl Fn(MemberIdx) -> IoTarget,
    ) {
        for &m in members {
            let slice = BufSlice {
                buf,
                offset: 0,
                len: 0,
            };
            self.emit(m, IoKind::Flush, 0, slice, target(m));
        }
    }

    /// The data-loss error an array of `geo` would report with members in `states`:
    /// a probe for "could the array survive this member failing?".
    pub fn lost_with(geo: Geometry, states: Vec<MemberState>) -> Option<EngineError> {
        Engine::new(geo, states).lost_error()
    }

    /// Whether `member` is still part of the array (active or being rebuilt).
    pub(crate) fn is_present(&self, member: MemberIdx) -> bool {
        match self.pseudo_role(member) {
            Some(role) => self.replacing[role],
            None => self.members[member.index()] != MemberState::Failed,
        }
    }

    /// Whether every member is active: none failed, none being rebuilt.
    pub fn is_whole(&self) -> bool {
        self.failed_count() == 0
    }

    /// Members that are failed or not yet rebuilt.
    pub(crate) fn failed_count(&self) -> usize {
        self.members
            .iter()
            .filter(|s| **s != MemberState::Active)
            .count()
    }

    /// Takes the lock of sync unit `unit` for `holder`; true if it holds it now,
    /// false if it waits in line (it is started when its turn comes).
    pub(crate) fn lock(&mut self, unit: u64, holder: Holder) -> bool {
        let queue = self.locks.entry(unit).or_default();
        queue.push_back(holder);
        queue.len() == 1
    }

    /// Puts `holders` next in line for `unit`, in order, right behind the holder (the
    /// rest of an operation that holds it, cut in parts).
    pub(crate) fn lock_next(&mut self, unit: u64, holders: &[Holder]) {
        let queue = self
            .locks
            .get_mut(&unit)
            .expect("a running op holds its unit");
        for (at, &holder) in holders.iter().enumerate() {
            queue.insert(1 + at, holder);
        }
    }

    /// Releases `holder`'s lock on `unit` and starts the next in line.
    pub(crate) fn unlock(&mut self, unit: u64, holder: Holder) {
        let queue = self
            .locks
            .get_mut(&unit)
            .expect("a running op holds its unit");
        let front = queue.pop_front();
        debug_assert_eq!(front, Some(holder), "only the holder unlocks");
        let next = queue.front().copied();
        if next.is_none() {
            self.locks.remove(&unit);
        }
        match next {
            Some(Holder::Stripe(op)) => crate::stripe::start(self, op),
            Some(Holder::Mirror(op)) => crate::mirror::start(self, op),
            None => {}
        }
    }

    /// The error to report when the array as a whole has lost data, if it has (more
    /// members failed than the level survives).
    pub fn lost_error(&self) -> Option<EngineError> {
        let failed = self.failed_count();
        let tolerated = match self.geo.level() {
            Level::Raid0 => 0,
            Level::Raid1 => self.members.len() - 1,
            Level::Raid4 | Level::Raid5 | Level::Raid6 => {
                usize::from(self.geo.level().parity_count())
            }
            Level::Raid10 => {
                if !crate::mirror::raid10_lost(self) {
                    return None;
                }
                failed.saturating_sub(1)
            }
        };
        (failed > tolerated).then(|| self.data_lost(tolerated))
    }

    pub(crate) fn data_lost(&self, tolerated: usize) -> EngineError {
        EngineError::DataLost {
            failed: self.failed_count(),
            raid_disks: self.geo.raid_disks(),
            level: self.geo.level(),
            tolerated,
        }
    }

    fn segment_lost(&self, seg: Segment) -> Option<EngineError> {
        match self.geo.level() {
            Level::Raid0 | Level::Raid1 | Level::Raid10 => crate::mirror::segment_lost(self, seg),
            Level::Raid4 | Level::Raid5 | Level::Raid6 => self.lost_error(),
        }
    }

    /// Queues one member I/O to the data area and remembers what it belongs to.
    pub(crate) fn emit(
        &mut self,
        member: MemberIdx,
        kind: IoKind,
        sector: u64,
        buf: BufSlice,
        target: IoTarget,
    ) {
        self.emit_to(member, kind, Area::Data, sector, buf, target);
    }

    /// Queues one member I/O to `area`.
    pub(crate) fn emit_to(
        &mut self,
        member: MemberIdx,
        kind: IoKind,
        area: Area,
        sector: u64,
        buf: BufSlice,
        target: IoTarget,
    ) {
        debug_assert!(self.is_present(member), "I/O planned for a failed member");
        if let IoTarget::Direct { req, .. } | IoTarget::Flush { req, .. } = target {
            self.reqs.get_mut(req).pending += 1;
        }
        if kind.is_write() && area == Area::Data {
            self.mirror_to_replacement(member, kind, sector, buf, target);
        }
        if let IoTarget::Flush { .. } | IoTarget::SyncFlush { .. } = target {
            self.flushes_out += 1;
        }
        let key = self.ios.insert(target);
        self.latency.issued(key, self.now, kind);
        if self.io_gen.len() <= key {
            self.io_gen.resize(key + 1, 0);
        }
        self.io_gen[key] = self.member_gen[member.index()];
        let id = IoId(key as u64);
        let role = member;
        let member = self.slot_of(member);
        let (mut sector, mut buf) = (sector, buf);
        if area == Area::Data && self.integrity.is_some() {
            match kind {
                IoKind::Write | IoKind::WriteFua => {
                    crate::integrity::record_write(self, member, sector, buf);
                }
                IoKind::Read => {
                    (sector, buf) = crate::integrity::note_read(self, key, member, sector, buf);
                }
                IoKind::Flush => {}
            }
        }
        if area == Area::Data {
            let sectors = sector..sector + buf.len as u64 / SECTOR_BYTES;
            crate::badblocks::note_io(self, key, member, kind, sectors);
        }
        match kind {
            IoKind::Read => {
                self.stats.member_reads += 1;
                self.stats.read_bytes += buf.len as u64;
            }
            IoKind::Write | IoKind::WriteFua => {
                self.stats.member_writes += 1;
                self.stats.write_bytes += buf.len as u64;
            }
            IoKind::Flush => self.stats.member_flushes += 1,
        }
        let io = MemberIo {
            id,
            member,
            kind,
            area,
            sector,
            buf,
        };
        if kind == IoKind::Flush
            && self.integrity.is_some()
            && crate::integrity::is_barrier(self, &target)
        {
            if let Some(io) = crate::integrity::hold_flush(self, role, io) {
                self.out_io.push_back(io);
            }
            return;
        }
        self.out_io.push_back(io);
    }

    /// The kind of a write that must be durable before what follows it goes out: a
    /// durable (FUA) write where the driver takes them, else a write that a flush
    /// must follow.
    pub(crate) fn durable_write_kind(&self) -> IoKind {
        if self.config.fua_writes {
            IoKind::WriteFua
        } else {
            IoKind::Write
        }
    }

    /// Sends a member I/O planned earlier and held back (a flush that waited for
    /// checksum pages).
    pub(crate) fn push_io(&mut self, io: MemberIo) {
        self.out_io.push_back(io);
    }

    /// A write to the data of a role being replaced goes to the replacement as well,
    /// everywhere (not only where the copy has been): a unit copied later is copied
    /// whole under its lock, so the extra writes are never wrong, and the replacement
    /// is never behind where it is trusted. The copy counts as one more I/O of the
    /// operation, so the operation (and the buffer) waits for it.
    fn mirror_to_replacement(
        &mut self,
        member: MemberIdx,
        kind: IoKind,
        sector: u64,
        buf: BufSlice,
        target: IoTarget,
    ) {
        let Some(pseudo) = self.replacement_of(member) else {
            return;
        };
        let copy = match target {
            IoTarget::Stripe { op, .. } => {
                self.ops.get_mut(op).pending += 1;
                IoTarget::Stripe { op, member: pseudo }
            }
            IoTarget::Mirror { op, .. } => {
                self.mops.get_mut(op).pending += 1;
                IoTarget::Mirror { op, member: pseudo }
            }
            // The stripe log's replay at open puts parity right on the role; the
            // replacement (resumed from a checkpoint) must hold that parity too.
            IoTarget::LogRecovery { .. } => {
                crate::ppl::replay_write_added(self);
                IoTarget::LogRecovery { member: pseudo }
            }
            // Data writes of other kinds (RAID-0's, which has no replacement) have
            // nothing to mirror.
            _ => return,
        };
        self.emit(pseudo, kind, sector, buf, copy);
    }

    /// Records an error on a request without ending it; it replies once its work drains.
    pub(crate) fn fail_request(&mut self, req: usize, error: EngineError) {
        let state = self.reqs.get_mut(req);
        state.error.get_or_insert(error);
    }

    /// One sub-operation of a request finished (with an error or not).
    pub(crate) fn request_step_done(&mut self, req: usize, error: Option<EngineError>) {
        let state = self.reqs.get_mut(req);
        if let Some(error) = error {
            state.error.get_or_insert(error);
        }
        state.pending -= 1;
        if state.pending == 0 {
            // A flush with the log on: what it made durable goes on the rings (a marker)
            // before the client hears of it, or a crash could replay durable entries.
            if let (Some((covers, round)), None) = (state.log_covers.take(), &state.error) {
                if let Some(log) = self.log.as_mut() {
                    log.flushed_round(covers, round);
                    if log.needs_marker() {
                        self.reqs.get_mut(req).pending = 1;
                        crate::ppl::persist(self, crate::ppl::Waiter::Client(req));
                        return;
                    }
                }
            }
            let state = self.reqs.remove(req);
            if !state.checkpoint {
                self.client_reqs -= 1;
            }
            if let (true, Some(buf)) = (state.own_buf, state.buf) {
                self.bufs.free(buf);
            }
            if let Some(chunks) = state.intent {
                crate::intent::write_done(self, chunks);
            }
            self.out_reply.push_back(Reply {
                id: state.id,
                result: state.error.map_or(Ok(()), Err),
            });
        }
    }

    /// Adds a sub-operation to a request (a stripe operation).
    pub(crate) fn request_step_started(&mut self, req: usize) {
        self.reqs.get_mut(req).pending += 1;
    }

    /// The client buffer of a request.
    pub(crate) fn request_buf(&self, req: usize) -> BufId {
        self.reqs
            .get(req)
            .buf
            .expect("reads and writes carry a buffer")
    }
}

/// The other driver slot of a role: slots `r` and `raid_disks + r` take turns.
fn other_slot(slot: MemberIdx, raid_disks: usize) -> MemberIdx {
    let s = slot.index();
    member_idx(if s < raid_disks {
        s + raid_disks
    } else {
        s - raid_disks
    })
}

pub(crate) fn member_idx(m: usize) -> MemberIdx {
    MemberIdx(u16::try_from(m).expect("member counts fit u16"))
}

pub(crate) fn sectors_to_bytes(sectors: u64) -> usize {
    usize::try_from(sectors * SECTOR_BYTES).expect("request sizes fit usize")
}

/// The member an I/O in flight went to.
fn target_member(target: &IoTarget) -> Option<MemberIdx> {
    match *target {
        IoTarget::Direct { member, .. }
        | IoTarget::Stripe { member, .. }
        | IoTarget::Mirror { member, .. }
        | IoTarget::MirrorRetry { member, .. }
        | IoTarget::StripeRetry { member, .. }
        | IoTarget::Flush { member, .. }
        | IoTarget::SyncFlush { member, .. }
        | IoTarget::LogCheckpoint { member }
        | IoTarget::LogRecovery { member }
        | IoTarget::LogReplayRetry { member, .. }
        | IoTarget::LogMarker { member, .. }
        | IoTarget::LogBatch { member }
        | IoTarget::Intent { member, .. }
        | IoTarget::ChecksumPages { member, .. } => Some(member),
        IoTarget::Abandoned => None,
    }
}
