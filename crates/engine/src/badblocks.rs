//! Known bad ranges: the sectors of each device that hold no good data, as its bad
//! block log records them (md's, read by the driver at open). A read that touches
//! one is answered as a read error without trusting what the device returns — so
//! the range is rebuilt from redundancy, returned, and rewritten (md's read-error
//! correction), and is not counted against the member's read-error limit — and a
//! write that lands on one makes those sectors good again.
//!
//! A mirror copy that refuses a write (a medium error) where another copy holds the
//! data gets the range added to its list instead of being failed, as md does with
//! its bad block log: the copy serves on everywhere else. The driver records an
//! addition in the log before any reply goes out ([`Engine::bad_blocks_to_record`]),
//! so a restart finds it; ranges made good are recorded when convenient (a restart
//! that finds them bad still rebuilds them from redundancy).
//!
//! Lists are per driver slot (a replacement is a device of its own), in sectors of
//! the data area; the driver keeps them on disk with the superblocks.

use std::collections::HashMap;
use std::ops::Range;

use xraid_format::BadBlocks;
use xraid_layout::MemberIdx;

use crate::engine::Engine;
use crate::{IoFailed, IoKind};

/// An I/O in flight that touches a known bad range of its device.
#[derive(Debug, Clone)]
pub(crate) struct Touch {
    slot: MemberIdx,
    sectors: Range<u64>,
    write: bool,
}

#[derive(Debug, Default)]
pub(crate) struct KnownBad {
    /// Per driver slot.
    lists: Vec<BadBlocks>,
    /// Per driver slot: the list its log holds, as a restart would find it — the
    /// list last recorded, with every range added since.
    durable: Vec<BadBlocks>,
    /// Per driver slot: how many ranges its log has room for (0: it keeps none, and
    /// a refused write fails it as before).
    capacity: Vec<usize>,
    /// By I/O key.
    touching: HashMap<usize, Touch>,
    /// Counts every change to the lists (a range added, or made good).
    generation: u64,
    /// The generation the driver last recorded (see [`Engine::bad_blocks_recorded`]).
    recorded: u64,
    /// Ranges added since then, with the generation of each: what a restart finds
    /// besides the recorded lists (the driver records them before any reply).
    added: Vec<(u64, usize, Range<u64>)>,
}

impl KnownBad {
    pub(crate) fn new(slots: usize) -> KnownBad {
        KnownBad {
            lists: vec![BadBlocks::new(); slots],
            durable: vec![BadBlocks::new(); slots],
            capacity: vec![0; slots],
            touching: HashMap::new(),
            generation: 0,
            recorded: 0,
            added: Vec::new(),
        }
    }

    fn list(&self, slot: MemberIdx) -> Option<&BadBlocks> {
        self.lists.get(slot.index())
    }
}

/// Notes member I/O `key` to device `slot` if it touches a known bad range there.
pub(crate) fn note_io(
    engine: &mut Engine,
    key: usize,
    slot: MemberIdx,
    kind: IoKind,
    at: Range<u64>,
) {
    let write = match kind {
        IoKind::Read => false,
        IoKind::Write | IoKind::WriteFua => true,
        IoKind::Flush => return,
    };
    let known = &mut engine.known_bad;
    if known.list(slot).is_some_and(|l| l.overlaps(at.clone())) {
        known.touching.insert(
            key,
            Touch {
                slot,
                sectors: at,
                write,
            },
        );
    }
}

/// Member I/O `key` completed with `result`: a read that touched a known bad range
/// failed, whatever the device returned; a write that did made its sectors good.
/// Returns the result to act on, and whether it is a known bad range's read error
/// (not counted against the member). `current` is false for an I/O whose device has
/// left its slot since.
pub(crate) fn on_completion(
    engine: &mut Engine,
    key: usize,
    current: bool,
    result: Result<(), IoFailed>,
) -> (Result<(), IoFailed>, bool) {
    // Most arrays have no known bad ranges: no hashing on every completion.
    if engine.known_bad.touching.is_empty() {
        return (result, false);
    }
    let Some(touch) = engine.known_bad.touching.remove(&key) else {
        return (result, false);
    };
    let known = &mut engine.known_bad;
    match (touch.write, result) {
        // From a device that has left its slot since: what it read is nobody's
        // (the stale completion goes around it as from a vanished device).
        (false, _) if !current => (Err(IoFailed::Gone), false),
        (false, Ok(())) => (Err(IoFailed::Medium), true),
        (false, Err(failure)) => (Err(failure), failure == IoFailed::Medium),
        (true, Ok(())) if current => {
            if known.lists[touch.slot.index()].clear(touch.sectors) {
                known.generation += 1;
            }
            (result, false)
        }
        (true, _) => (result, false),
    }
}

/// A new device takes driver slot `slot`: it has no known bad ranges yet, and no
/// log until the driver says so.
pub(crate) fn device_changed(engine: &mut Engine, slot: MemberIdx) {
    let known = &mut engine.known_bad;
    let i = slot.index();
    if i < known.lists.len() {
        if !known.lists[i].is_empty() {
            known.generation += 1;
        }
        known.added.retain(|&(_, s, _)| s != i);
        known.lists[i] = BadBlocks::new();
        known.durable[i] = BadBlocks::new();
        known.capacity[i] = 0;
    }
}

/// `role`'s device refused a write to its data sectors `sectors`, which the array
/// holds elsewhere: records the range as bad on it, if its log has room. Returns
/// whether it did (else the caller fails the member, as without a log).
pub(crate) fn record_refusal(engine: &mut Engine, role: MemberIdx, sectors: Range<u64>) -> bool {
    let event = crate::Event::WriteRefusedRecorded {
        member: role,
        sector: sectors.start,
        sectors: sectors.end - sectors.start,
    };
    list(engine, role, sectors, event)
}

/// `role`'s device is being rebuilt, and no other member holds its data sectors
/// `sectors` (their copies, or the rows parity needs, are listed elsewhere): they are
/// lost, and go into its log, so that the rebuild can complete around them and reads
/// of them fail loudly (md's recovery records such blocks the same way). Returns
/// whether they did (a log with room).
pub(crate) fn record_lost(engine: &mut Engine, role: MemberIdx, sectors: Range<u64>) -> bool {
    let event = crate::Event::LostInRebuild {
        member: role,
        sector: sectors.start,
        sectors: sectors.end - sectors.start,
    };
    list(engine, role, sectors, event)
}

/// A crash may have torn `role`'s parity rows `sectors` where a data member is
/// missing, and the stripe-log entries that would put them right are lost: they
/// go into its log, so that rebuilding the missing rows from them fails loudly.
/// Returns whether they did (a log with room).
pub(crate) fn record_torn_parity(
    engine: &mut Engine,
    role: MemberIdx,
    sectors: Range<u64>,
) -> bool {
    let event = crate::Event::TornParityListed {
        member: role,
        sector: sectors.start,
        sectors: sectors.end - sectors.start,
    };
    list(engine, role, sectors, event)
}

/// [`record_torn_parity`] on the replacement being built for `role`: it may have
/// copied those parity rows already, and would serve them unlisted once it takes the
/// role. Said by the role's own event. Returns whether they went into its log.
pub(crate) fn record_torn_parity_on_replacement(
    engine: &mut Engine,
    role: MemberIdx,
    sectors: Range<u64>,
) -> bool {
    let slot = engine.replacement_slot(role);
    list_slot(engine, slot, sectors, None)
}

fn list(engine: &mut Engine, role: MemberIdx, sectors: Range<u64>, event: crate::Event) -> bool {
    if engine.pseudo_role(role).is_some() {
        return false;
    }
    let slot = engine.slot_of(role);
    list_slot(engine, slot, sectors, Some(event))
}

fn list_slot(
    engine: &mut Engine,
    slot: MemberIdx,
    sectors: Range<u64>,
    event: Option<crate::Event>,
) -> bool {
    let known = &mut engine.known_bad;
    let i = slot.index();
    let Some(&capacity) = known.capacity.get(i) else {
        return false;
    };
    if capacity > 0
        && known.durable[i].covers(sectors.clone())
        && known.lists[i].covers(sectors.clone())
    {
        // Refused again (a repair's rewrite): recorded already.
        return true;
    }
    let mut grown = known.lists[i].clone();
    grown.add(sectors.clone());
    let mut durable = known.durable[i].clone();
    durable.add(sectors.clone());
    if capacity == 0 || grown.entries_needed(0) > capacity || durable.entries_needed(0) > capacity {
        return false;
    }
    known.lists[i] = grown;
    known.durable[i] = durable;
    known.generation += 1;
    let generation = known.generation;
    known.added.push((generation, i, sectors.clone()));
    if let Some(event) = event {
        engine.push_event(event);
    }
    true
}

/// A refused write is tried again in blocks of this many sectors (4 KiB, a drive's
/// physical sector), so that only blocks that refuse again go into the log; md
/// narrows to its log's block size the same way (`narrow_write_error`).
pub(crate) const NARROW_SECTORS: u64 = 8;

/// Member sectors `at..at + sectors` in aligned [`NARROW_SECTORS`] blocks (the first
/// and last may be shorter).
pub(crate) fn narrow_blocks(at: u64, sectors: u64) -> Vec<Range<u64>> {
    let mut blocks = Vec::new();
    let mut sector = at;
    while sector < at + sectors {
        let end = ((sector / NARROW_SECTORS + 1) * NARROW_SECTORS).min(at + sectors);
        blocks.push(sector..end);
        sector = end;
    }
    blocks
}

/// The blocks a device's refused writes (first sector, bytes) are tried again in,
/// each with its bytes; none when every write is one block already (trying it again
/// whole would tell nothing new).
pub(crate) fn retry_blocks(
    writes: impl Iterator<Item = (u64, crate::buffers::BufSlice)>,
) -> Option<Vec<(Range<u64>, crate::buffers::BufSlice)>> {
    let mut retries = Vec::new();
    let mut pieces = 0;
    for (at, buf) in writes {
        pieces += 1;
        let sectors = buf.len as u64 / xraid_layout::SECTOR_BYTES;
        for block in narrow_blocks(at, sectors) {
            let slice = crate::buffers::BufSlice {
                buf: buf.buf,
                offset: buf.offset + crate::engine::sectors_to_bytes(block.start - at),
                len: crate::engine::sectors_to_bytes(block.end - block.start),
            };
            retries.push((block, slice));
        }
    }
    (retries.len() > pieces).then_some(retries)
}

/// Sends `blocks` of writes `member` refused to try them again, each with the target
/// `target` makes of its first sector and length.
pub(crate) fn send_retries(
    engine: &mut Engine,
    member: MemberIdx,
    blocks: Vec<(Range<u64>, crate::buffers::BufSlice)>,
    target: impl Fn(u64, u64) -> crate::engine::IoTarget,
) {
    for (block, buf) in blocks {
        let io = target(block.start, block.end - block.start);
        engine.emit(member, IoKind::Write, block.start, buf, io);
    }
}

/// Whether ranges were added since the driver last recorded the lists (the
/// simulator records those at once even while it holds back lists made good).
pub(crate) fn additions_pending(engine: &Engine) -> bool {
    !engine.known_bad.added.is_empty()
}

/// Whether any device has known bad ranges (most arrays have none: the read path
/// then skips looking).
pub(crate) fn any(engine: &Engine) -> bool {
    engine.known_bad.lists.iter().any(|l| !l.is_empty())
}

/// Whether role `member`'s device is known bad anywhere in its data sectors `sectors`.
pub(crate) fn is_known_bad(engine: &Engine, member: MemberIdx, sectors: Range<u64>) -> bool {
    engine
        .known_bad
        .list(engine.slot_of(member))
        .is_some_and(|l| l.overlaps(sectors))
}

/// Whether role `member`'s device is known bad anywhere in `sectors` as a restart
/// would find it (the list last recorded, with every range added since): ranges made
/// good since the last record still count.
pub(crate) fn is_durably_known_bad(
    engine: &Engine,
    member: MemberIdx,
    sectors: Range<u64>,
) -> bool {
    engine
        .known_bad
        .durable
        .get(engine.slot_of(member).index())
        .is_some_and(|l| l.overlaps(sectors))
}

/// Whether role `member`'s device is known bad in every sector of `sectors`.
pub(crate) fn is_all_known_bad(engine: &Engine, member: MemberIdx, sectors: Range<u64>) -> bool {
    engine
        .known_bad
        .list(engine.slot_of(member))
        .is_some_and(|l| l.covers(sectors))
}

/// The parts of `sectors` of role `member`'s device that are not known bad, lowest
/// first, and the parts that are.
pub(crate) fn split(
    engine: &Engine,
    member: MemberIdx,
    sectors: Range<u64>,
) -> (Vec<Range<u64>>, Vec<Range<u64>>) {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    let mut at = sectors.start;
    if let Some(list) = engine.known_bad.list(engine.slot_of(member)) {
        for r in list.ranges() {
            if r.end <= sectors.start || r.start >= sectors.end {
                continue;
            }
            let from = r.start.max(sectors.start);
            let to = r.end.min(sectors.end);
            if at < from {
                good.push(at..from);
            }
            bad.push(from..to);
            at = to;
        }
    }
    if at < sectors.end {
        good.push(at..sectors.end);
    }
    (good, bad)
}

impl Engine {
    /// The known bad ranges of the device in driver slot `slot` (data-area sectors),
    /// read from its bad block log at open, and how many ranges the log has room for
    /// (0 when it keeps none: a write the device refuses then fails it, as it did
    /// before md had bad block logs). Replaces what was known for that slot.
    pub fn set_bad_block_log(&mut self, slot: MemberIdx, bad: BadBlocks, capacity: usize) {
        let known = &mut self.known_bad;
        let i = slot.index();
        if i < known.lists.len() {
            known.durable[i] = bad.clone();
            known.lists[i] = bad;
            known.capacity[i] = capacity;
            known.added.retain(|&(_, s, _)| s != i);
        }
    }

    /// The known bad ranges of the device in driver slot `slot`, in data-area sectors.
    pub fn bad_blocks(&self, slot: MemberIdx) -> BadBlocks {
        self.known_bad.list(slot).cloned().unwrap_or_default()
    }

    /// How many sectors of role `role`'s device are known bad (its bad block log).
    pub fn bad_block_sectors(&self, role: MemberIdx) -> u64 {
        self.known_bad
            .list(self.device_slot(role))
            .map_or(0, BadBlocks::sectors)
    }

    /// How many sectors the bad block logs of the array's roles list, together.
    pub fn listed_sectors(&self) -> u64 {
        (0..self.member_states().len())
            .map(|role| self.bad_block_sectors(crate::MemberIdx(role as u16)))
            .sum()
    }

    /// The known bad ranges the log of the device in slot `slot` holds, as a restart
    /// would find them: the list last recorded, with every range added since.
    pub fn durable_bad_blocks(&self, slot: MemberIdx) -> BadBlocks {
        let known = &self.known_bad;
        known.durable.get(slot.index()).cloned().unwrap_or_default()
    }

    /// How many ranges the log of the device in slot `slot` has room for.
    pub fn bad_block_log_capacity(&self, slot: MemberIdx) -> usize {
        self.known_bad
            .capacity
            .get(slot.index())
            .copied()
            .unwrap_or(0)
    }

    /// Whether the lists changed since the driver last recorded them (ranges added,
    /// or made good). The driver records them before any reply goes out: a write a
    /// copy refused is acknowledged on the strength of that record, and a range made
    /// good must not come back listed after a crash (on a parity level it would then
    /// be rebuilt from parity a later write may have left torn).
    pub fn bad_blocks_to_record(&self) -> bool {
        self.known_bad.generation != self.known_bad.recorded
    }

    /// The lists as they stand, to record (every slot's), with their generation.
    /// Take it before the flush that makes the writes behind them durable: what
    /// completes during that flush is not covered by it.
    pub fn bad_blocks_snapshot(&self) -> (u64, Vec<BadBlocks>) {
        (self.known_bad.generation, self.known_bad.lists.clone())
    }

    /// The driver wrote `snapshot` (of generation `generation`) to the logs, after a
    /// flush of every member. Changes since stay to be recorded.
    pub fn bad_blocks_recorded(&mut self, generation: u64, snapshot: Vec<BadBlocks>) {
        let known = &mut self.known_bad;
        if snapshot.len() != known.lists.len() || generation < known.recorded {
            return;
        }
        known.recorded = generation;
        known.durable = snapshot;
        known.added.retain(|&(g, _, _)| g > generation);
        for (_, slot, range) in &known.added {
            known.durable[*slot].add(range.clone());
        }
        crate::ppl::lists_recorded(self);
    }

    /// Whether the stripe log's replay at open is done and flushed and waits for the
    /// driver to record the bad block lists it changed ([`Engine::bad_blocks_snapshot`],
    /// then [`Engine::bad_blocks_recorded`]) and the members failed since the log's
    /// recovery began ([`Engine::replay_failures_to_record`], then
    /// [`Engine::replay_failures_recorded`]): a member that refused the replay's write
    /// gets the rows listed, one failed meanwhile is recorded as faulty, and the rings
    /// may say the entries are done with only once a restart would find that. Client
    /// requests wait meanwhile, flushes too: every member was flushed just before.
    pub fn replay_awaits_record(&self) -> bool {
        crate::ppl::awaits_record(self)
    }

    /// Whether a device stopped serving since the stripe log's recovery began (the
    /// array as opened) and is not recorded so yet: a member failed, a replacement
    /// dropped, or a member whose replacement took its role over.
    pub fn replay_failures_to_record(&self) -> bool {
        crate::ppl::failures_to_record(self)
    }

    /// Per driver slot (see [`Engine::device_slot`]), whether its device serves: the
    /// device of a role whose member is not failed, or a replacement being built.
    pub fn serving_devices(&self) -> Vec<bool> {
        let n = self.member_states().len();
        let mut serving = vec![false; 2 * n];
        for (r, state) in self.member_states().iter().enumerate() {
            let role = crate::engine::member_idx(r);
            if *state != crate::MemberState::Failed {
                serving[self.device_slot(role).index()] = true;
            }
            if self.is_replacing(role) {
                serving[self.replacement_slot(role).index()] = true;
            }
        }
        serving
    }

    /// The driver recorded in the superblocks which devices serve: `serving` is
    /// [`Engine::serving_devices`] as taken before they were written. A replay waiting
    /// for the record goes on once the lists are recorded too.
    pub fn replay_failures_recorded(&mut self, serving: &[bool]) {
        crate::ppl::failures_recorded(self, serving);
    }
}
