//! The write-intent bitmap (md's internal bitmap): one bit per bitmap chunk of the
//! sync range, set on every member *before* a client write reaches that chunk and
//! cleared once the chunk has been quiet for a while with the array whole. After a
//! crash only chunks whose bit is set can disagree between members, and a member that
//! left a degraded array misses only chunks whose bit is set — so a resync, or the
//! catch-up of a returning member, visits those and skips the rest.
//!
//! The engine keeps the bitmap area's bytes as the driver read them (md's 256-byte
//! bitmap superblock, the bits, padding to whole blocks) and writes back whole blocks
//! of it; the bytes' meaning beyond "bit `i` of the bits after byte 256" stays with the
//! format crate. Updates go out in *rounds*, one at a time, so that a bit's set and its
//! later clear never cross on the way to a disk:
//! - a **set round** writes the blocks holding newly wanted bits to every present
//!   member and flushes them; every write that waited for one of those bits starts
//!   when the round ends. Writes arriving while a round runs are batched into the
//!   next one, so under load one round serves many writes (md pays a synchronous
//!   bitmap write per newly dirtied chunk; this is what keeps the cost small);
//! - a **clear round** first flushes every member (the quiet chunks' data becomes
//!   durable) and then writes the blocks with their bits cleared. It runs only while
//!   every member is active, as md clears nothing on a degraded array (the bits are
//!   what a returning member catches up on), and while a sync runs only behind a
//!   resync (see below).
//!
//! Bits found set when the bitmap was loaded are kept until a resync or recover has
//! been over them (they are the work list after a crash). A resync releases them as
//! it goes, chunk by chunk behind it, so that they are cleared while it runs and a
//! crash midway resyncs only what it had not reached (md ends the sync of the chunks
//! behind its resync the same way, `md_bitmap_cond_end_sync`).

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use xraid_layout::{Level, MemberIdx};

use crate::buffers::{BufId, BufSlice};
use crate::engine::{Engine, IoTarget, Segment};
use crate::{Area, FailReason, IoFailed, IoKind, Nanos, SyncKind};

/// Bytes of md's bitmap superblock, which come before the bits.
pub const INTENT_HEADER_BYTES: usize = 256;

/// What the driver hands the engine to keep a write-intent bitmap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteIntentSetup {
    /// The bitmap area as on the members: the bitmap superblock, the bits (chunk `i`
    /// is bit `i % 8` of byte `256 + i / 8`), and padding to a whole number of blocks.
    pub image: Vec<u8>,
    /// Bits in use.
    pub chunks: u64,
    /// Sectors of the sync range per bit: member sectors for RAID-1/4/5/6, array
    /// sectors for RAID-10 (md's bitmap runs where its resync runs).
    pub chunk_sectors: u64,
    /// Bytes written at once; the image's length is a multiple of it, and the driver
    /// places the area so that a block is as aligned as the members need.
    pub block_bytes: usize,
    /// How long a chunk must stay quiet before its bit is cleared (md's
    /// `daemon_sleep`).
    pub clear_after: Nanos,
    /// Write the whole image to every member before any client write (a bitmap found
    /// stale, whose bits the driver set all at once).
    pub rewrite: bool,
}

/// How a chunk is being used by client writes since the bitmap was loaded.
#[derive(Debug, Clone, Copy)]
struct ChunkUse {
    /// Client writes in flight to it.
    writers: u32,
    /// When the last one ended.
    quiet_since: Nanos,
}

/// A round of bitmap I/O in flight.
#[derive(Debug)]
struct Round {
    /// The blocks written, and the buffer holding their bytes back to back.
    blocks: Vec<u64>,
    buf: BufId,
    /// Flush before writing (clear) or after (set); which step runs now.
    writing: bool,
    /// A set round's writes went out durable (FUA): no flush follows them. Decided
    /// when they are issued, whatever the configuration says by the time they end.
    durable_writes: bool,
    /// I/Os of the current step still out.
    pending: u32,
    /// The chunks a clear round clears (none: a set round).
    cleared: Vec<u64>,
    /// The round's number ([`WriteIntent::rounds`] when it started).
    number: u64,
}

impl Round {
    fn clearing(&self) -> bool {
        !self.cleared.is_empty()
    }
}

/// A write waiting for its bits.
#[derive(Debug, Clone, Copy)]
struct Parked {
    req: usize,
    seg: Segment,
    chunks: (u64, u64),
}

#[derive(Debug)]
pub(crate) struct WriteIntent {
    image: Vec<u8>,
    chunks: u64,
    chunk_sectors: u64,
    block_bytes: usize,
    clear_after: Nanos,
    /// Chunks client writes have used since load.
    used: HashMap<u64, ChunkUse>,
    /// Bits wanted set by parked writes, not yet in a round.
    wanted: BTreeSet<u64>,
    /// Bits the set round in flight is writing (set in `image`, not yet durable).
    setting: BTreeSet<u64>,
    parked: Vec<Parked>,
    /// Blocks to write in the next set round regardless of bits (the superblock block
    /// after a new header, or everything after a stale load).
    blocks_due: BTreeSet<u64>,
    round: Option<Round>,
    /// Clear every quiet bit at once, without waiting `clear_after` (a clean stop).
    clear_now: bool,
    /// Bits found set at load: what a resync after a crash must visit. Only a
    /// resync lets them go, behind it as it runs or all at its end (client writes
    /// there and recovers do not).
    pinned: Vec<u8>,
    /// The running resync has released the chunks below this one (see
    /// [`release_behind_resync`]), last at `resync_released_at`.
    resync_released: u64,
    resync_released_at: Nanos,
    /// Whether the running resync may release chunks: the array has been whole since
    /// it started (behind a resync on a degraded array parity was not checked).
    resync_may_release: bool,
    /// The driver has written a bitmap superblock whose `events_cleared` is current
    /// on a whole array: only then may bits be cleared (md raises `events_cleared`
    /// before it clears, or a member that left earlier would be caught up from bits
    /// that no longer cover what it missed).
    clears_allowed: bool,
    /// Per member, bitmap I/Os of the round in flight (a member failed meanwhile is
    /// not waited for).
    outstanding: Vec<u32>,
    /// Per round buffer, its I/Os not returned yet: a buffer outlives its round while
    /// a device not waited for (failed, stalled) may still read from it.
    buf_users: HashMap<BufId, u32>,
    /// Set and clear rounds done (for tests and the lab).
    pub(crate) rounds: u64,
}

/// The block of the bitmap area holding chunk `chunk`'s bit.
fn block_of(chunk: u64, block_bytes: usize) -> u64 {
    (INTENT_HEADER_BYTES as u64 + chunk / 8) / block_bytes as u64
}

/// Bit `chunk` of a bitmap image.
fn bit_in(image: &[u8], chunk: u64) -> bool {
    let byte = INTENT_HEADER_BYTES + usize::try_from(chunk / 8).expect("bits fit memory");
    image[byte] & (1 << (chunk % 8)) != 0
}

impl WriteIntent {
    fn bit(&self, chunk: u64) -> bool {
        bit_in(&self.image, chunk)
    }

    fn put_bit(&mut self, chunk: u64, on: bool) {
        let byte = INTENT_HEADER_BYTES + usize::try_from(chunk / 8).expect("bits fit memory");
        let mask = 1u8 << (chunk % 8);
        if on {
            self.image[byte] |= mask;
        } else {
            self.image[byte] &= !mask;
        }
    }

    fn unpin(&mut self, chunk: u64) {
        let byte = usize::try_from(chunk / 8).expect("bits fit memory");
        if let Some(b) = self.pinned.get_mut(byte) {
            *b &= !(1 << (chunk % 8));
        }
    }

    /// Chunks wholly below bitmap sector `front` (all of them at `u64::MAX`).
    fn chunks_below(&self, front: u64) -> u64 {
        if front == u64::MAX {
            self.chunks
        } else {
            (front / self.chunk_sectors).min(self.chunks)
        }
    }

    fn is_pinned(&self, chunk: u64) -> bool {
        let byte = usize::try_from(chunk / 8).expect("bits fit memory");
        self.pinned
            .get(byte)
            .is_some_and(|b| b & (1 << (chunk % 8)) != 0)
    }

    fn block_of(&self, chunk: u64) -> u64 {
        block_of(chunk, self.block_bytes)
    }

    /// Asks for every bit in `chunks` not set yet.
    fn want_missing(&mut self, (first, end): (u64, u64)) {
        for c in first..end {
            if !self.bit(c) {
                self.wanted.insert(c);
            }
        }
    }

    /// Lets every set bit not pinned by a crash be cleared once quiet (a sync has
    /// been over them, or the array was stopped cleanly).
    fn release_set_bits(&mut self) {
        for c in 0..self.chunks {
            if self.bit(c) && !self.is_pinned(c) {
                self.used.entry(c).or_insert(ChunkUse {
                    writers: 0,
                    quiet_since: Nanos(0),
                });
            }
        }
    }

    /// Whether `chunk`'s bit is set on every member (a write there may go ahead).
    fn durable(&self, chunk: u64) -> bool {
        self.bit(chunk) && !self.setting.contains(&chunk)
    }

    /// Whether nothing is in flight or waiting.
    fn settled(&self) -> bool {
        self.round.is_none()
            && self.wanted.is_empty()
            && self.parked.is_empty()
            && self.blocks_due.is_empty()
    }

    /// Number of bits set.
    fn dirty(&self) -> u64 {
        (0..self.chunks).filter(|&c| self.bit(c)).count() as u64
    }
}

/// Sectors of the bitmap's range a client write to `seg` touches.
fn intent_sectors(engine: &Engine, seg: Segment) -> Range<u64> {
    let geo = &engine.geo;
    match geo.level() {
        Level::Raid4 | Level::Raid5 | Level::Raid6 => {
            // Every member sector of the stripes the write touches: parity too.
            let per = geo.stripe_data_sectors();
            let chunk = u64::from(geo.chunk_sectors());
            let first = seg.sector / per;
            let last = (seg.sector + seg.sectors - 1) / per;
            first * chunk..(last + 1) * chunk
        }
        _ => seg.sector..seg.sector + seg.sectors,
    }
}

fn chunk_span(wi: &WriteIntent, sectors: Range<u64>) -> (u64, u64) {
    let first = (sectors.start / wi.chunk_sectors).min(wi.chunks);
    let end = sectors.end.div_ceil(wi.chunk_sectors).min(wi.chunks);
    (first, end)
}

impl Engine {
    /// Turns the write-intent bitmap on (RAID-1/4/5/6/10): from now on no client
    /// write reaches a chunk before its bit is set on every present member.
    pub fn enable_write_intent(&mut self, setup: WriteIntentSetup) {
        if self.geo.level() == Level::Raid0 || setup.chunk_sectors == 0 || setup.block_bytes == 0 {
            return;
        }
        let bits_end = INTENT_HEADER_BYTES as u64 + setup.chunks.div_ceil(8);
        assert!(
            setup.image.len() as u64 >= bits_end
                && setup.image.len().is_multiple_of(setup.block_bytes),
            "the bitmap image holds the bits in whole blocks"
        );
        let blocks = setup.image.len() / setup.block_bytes;
        let bits = &setup.image[INTENT_HEADER_BYTES..];
        let pinned =
            bits[..usize::try_from(setup.chunks.div_ceil(8)).expect("bits fit memory")].to_vec();
        // Bits set on the member read may be missing on others (a crash during a clear
        // round): they go out to every member again before any write relies on them.
        let blocks_due = if setup.rewrite {
            (0..blocks as u64).collect()
        } else {
            (0..setup.chunks)
                .filter(|&c| bit_in(&setup.image, c))
                .map(|c| block_of(c, setup.block_bytes))
                .collect()
        };
        let members = self.member_states().len();
        self.intent = Some(WriteIntent {
            image: setup.image,
            chunks: setup.chunks,
            chunk_sectors: setup.chunk_sectors,
            block_bytes: setup.block_bytes,
            clear_after: setup.clear_after,
            used: HashMap::new(),
            wanted: BTreeSet::new(),
            setting: BTreeSet::new(),
            parked: Vec::new(),
            blocks_due,
            round: None,
            clear_now: false,
            pinned,
            resync_released: 0,
            resync_released_at: Nanos(0),
            resync_may_release: false,
            clears_allowed: false,
            outstanding: vec![0; members],
            buf_users: HashMap::new(),
            rounds: 0,
        });
        kick(self);
    }

    /// The bitmap area as the engine last wrote (or is writing) it.
    pub fn write_intent_image(&self) -> Option<&[u8]> {
        self.intent.as_ref().map(|wi| wi.image.as_slice())
    }

    /// Bits set now.
    pub fn write_intent_dirty(&self) -> Option<u64> {
        self.intent.as_ref().map(WriteIntent::dirty)
    }

    /// Bits in the bitmap (chunks it covers).
    pub fn write_intent_chunks(&self) -> Option<u64> {
        self.intent.as_ref().map(|wi| wi.chunks)
    }

    /// Bitmap rounds (set and clear) written so far.
    pub fn write_intent_rounds(&self) -> u64 {
        self.intent.as_ref().map_or(0, |wi| wi.rounds)
    }

    /// Replaces the bitmap superblock (new event counts) and writes it to every
    /// member in the next round; [`Engine::write_intent_settled`] says when it is on.
    pub fn set_write_intent_header(&mut self, header: &[u8; INTENT_HEADER_BYTES]) {
        let Some(wi) = self.intent.as_mut() else {
            return;
        };
        wi.image[..INTENT_HEADER_BYTES].copy_from_slice(header);
        wi.blocks_due.insert(0);
        kick(self);
    }

    /// Whether the bitmap superblock handed in last is not on every member yet.
    pub fn write_intent_header_pending(&self) -> bool {
        self.intent.as_ref().is_some_and(|wi| {
            wi.blocks_due.contains(&0) || wi.round.as_ref().is_some_and(|r| r.blocks.contains(&0))
        })
    }

    /// Whether no bitmap I/O is in flight or waiting (true without a bitmap).
    pub fn write_intent_settled(&self) -> bool {
        self.intent.as_ref().is_none_or(WriteIntent::settled)
    }

    /// The array was stopped cleanly: the bits found at load are no crash's work list
    /// (they are what a member that left may catch up on, or a stale bitmap's all-set
    /// bits), and may be cleared under the usual rules.
    pub fn release_write_intent_pins(&mut self) {
        let Some(wi) = self.intent.as_mut() else {
            return;
        };
        wi.pinned.fill(0);
        wi.release_set_bits();
        kick(self);
    }

    /// Says whether the bitmap superblock last written has a current `events_cleared`
    /// on a whole array (the driver's part of md's rule); bits are cleared only then.
    pub fn allow_write_intent_clears(&mut self, allowed: bool) {
        if let Some(wi) = self.intent.as_mut() {
            wi.clears_allowed = allowed;
        }
        kick(self);
    }

    /// Clears every quiet bit now rather than after the quiet time (a clean stop:
    /// md's bitmap flush). Happens only with every member active and no sync running.
    pub fn clear_write_intent_now(&mut self) {
        if let Some(wi) = self.intent.as_mut() {
            wi.clear_now = true;
        }
        kick(self);
    }

    /// Whether some chunk overlapping sync unit `unit` has its bit set: with a bitmap,
    /// syncs started by [`Engine::start_sync_where_dirty`] skip the others.
    pub(crate) fn unit_dirty(&self, unit: u64) -> bool {
        self.any_chunk_of_unit(unit, WriteIntent::bit)
    }

    /// Whether some chunk overlapping sync unit `unit` had its bit set when the bitmap
    /// was loaded and no resync has been over it since: a write may have been cut off
    /// there. Without a bitmap, anywhere.
    pub(crate) fn unit_dirty_at_load(&self, unit: u64) -> bool {
        self.any_chunk_of_unit(unit, WriteIntent::is_pinned)
    }

    /// Whether `test` holds for some bitmap chunk overlapping sync unit `unit` (true
    /// without a bitmap).
    fn any_chunk_of_unit(&self, unit: u64, test: impl Fn(&WriteIntent, u64) -> bool) -> bool {
        let Some(wi) = self.intent.as_ref() else {
            return true;
        };
        let per = crate::sync::unit_sectors(self);
        let (first, end) = chunk_span(wi, unit * per..(unit + 1) * per);
        (first..end).any(|c| test(wi, c))
    }
}

/// Whether the round in flight clears bits (its flush makes the quiet chunks' data
/// durable first).
pub(crate) fn clearing(engine: &Engine) -> bool {
    engine
        .intent
        .as_ref()
        .and_then(|wi| wi.round.as_ref())
        .is_some_and(Round::clearing)
}

/// The ranges of the bitmap's sectors (member sectors; array sectors for RAID-10)
/// whose bits are set.
pub(crate) fn set_ranges(engine: &Engine) -> Vec<Range<u64>> {
    let Some(wi) = engine.intent.as_ref() else {
        return Vec::new();
    };
    (0..wi.chunks)
        .filter(|&c| wi.bit(c))
        .map(|c| c * wi.chunk_sectors..(c + 1) * wi.chunk_sectors)
        .collect()
}

/// Writes the whole bitmap to every member in the next round: a member back in the
/// array holds whatever bitmap it left with.
pub(crate) fn rewrite_all(engine: &mut Engine) {
    let Some(wi) = engine.intent.as_mut() else {
        return;
    };
    wi.clears_allowed = false;
    let blocks = (wi.image.len() / wi.block_bytes) as u64;
    wi.blocks_due.extend(0..blocks);
    kick(engine);
}

/// Lets a client write through when every bit it needs is on the members; otherwise
/// parks it (the caller counts it as a step in progress) and asks for the bits.
/// Returns whether the write may be submitted now.
pub(crate) fn admit(engine: &mut Engine, req: usize, seg: Segment) -> bool {
    if engine.intent.is_none() {
        return true;
    }
    let sectors = intent_sectors(engine, seg);
    let wi = engine.intent.as_mut().expect("checked above");
    let chunks = chunk_span(wi, sectors);
    if try_enter(engine, req, chunks) {
        return true;
    }
    let wi = engine.intent.as_mut().expect("checked above");
    wi.want_missing(chunks);
    wi.parked.push(Parked { req, seg, chunks });
    engine.request_step_started(req);
    kick(engine);
    false
}

/// Counts the write in on its chunks if every one is durable.
fn try_enter(engine: &mut Engine, req: usize, (first, end): (u64, u64)) -> bool {
    let now = engine.now();
    let wi = engine.intent.as_mut().expect("intent is on");
    if !(first..end).all(|c| wi.durable(c)) {
        return false;
    }
    for c in first..end {
        wi.used
            .entry(c)
            .or_insert(ChunkUse {
                writers: 0,
                quiet_since: now,
            })
            .writers += 1;
    }
    engine.set_request_intent(req, (first, end));
    true
}

/// A client write counted in on `chunks` ended.
pub(crate) fn write_done(engine: &mut Engine, (first, end): (u64, u64)) {
    let now = engine.now();
    let Some(wi) = engine.intent.as_mut() else {
        return;
    };
    for c in first..end {
        if let Some(u) = wi.used.get_mut(&c) {
            u.writers -= 1;
            if u.writers == 0 {
                u.quiet_since = now;
            }
        }
    }
}

/// A resync or recover ran over the whole array and left every member active: the
/// bits it covered may be cleared — all of them after a resync, those not pinned by a
/// crash after a recover (which makes the rebuilt member agree with the others but
/// not the others with each other).
pub(crate) fn sync_completed(engine: &mut Engine, kind: SyncKind) {
    let Some(wi) = engine.intent.as_mut() else {
        return;
    };
    if kind == SyncKind::Resync {
        wi.pinned.fill(0);
    }
    wi.release_set_bits();
    kick(engine);
}

/// Whether a clear round under way may still write its cleared bits: every member
/// active and clearing still allowed (a sync may have started meanwhile; it walks the
/// chunks it needs under its own locks and finds their data already durable).
fn may_clear_now(engine: &Engine) -> bool {
    engine.intent.as_ref().is_some_and(|wi| wi.clears_allowed) && engine.is_whole()
}

/// The chunks below which a clear round may clear bits now: as [`may_clear_now`],
/// and with no sync running every chunk; during a resync, those it has released
/// behind it; during any other sync, none (a recover's or a check's work list is
/// the bitmap as it stands).
fn clear_limit(engine: &Engine) -> u64 {
    let Some(wi) = engine.intent.as_ref() else {
        return 0;
    };
    if !may_clear_now(engine) {
        return 0;
    }
    match &engine.sync {
        None => u64::MAX,
        Some(_) if crate::sync::resync_front(engine).is_some() => wi.resync_released,
        Some(_) => 0,
    }
}

/// Chunks whose bit may be cleared now.
fn clearable(engine: &Engine) -> Vec<u64> {
    let Some(wi) = engine.intent.as_ref() else {
        return Vec::new();
    };
    let limit = clear_limit(engine);
    if limit == 0 {
        return Vec::new();
    }
    let now = engine.now().0;
    let mut out: Vec<u64> = wi
        .used
        .iter()
        .filter(|(c, u)| {
            **c < limit
                && u.writers == 0
                && (wi.clear_now || u.quiet_since.0.saturating_add(wi.clear_after.0) <= now)
                && wi.bit(**c)
                && !wi.is_pinned(**c)
                && !wi.wanted.contains(c)
                && !wi.setting.contains(c)
        })
        .map(|(c, _)| *c)
        .collect();
    out.sort_unstable();
    out
}

/// When the next bit may be cleared, if one is waiting for its quiet time, or the
/// running resync may next release the chunks behind it.
pub(crate) fn next_wakeup(engine: &Engine) -> Option<Nanos> {
    let wi = engine.intent.as_ref()?;
    if wi.round.is_some() {
        return None;
    }
    let release = next_release(engine);
    let limit = clear_limit(engine);
    if limit == 0 {
        return release;
    }
    wi.used
        .iter()
        .filter(|(c, u)| **c < limit && u.writers == 0 && wi.bit(**c) && !wi.is_pinned(**c))
        .map(|(_, u)| Nanos(u.quiet_since.0.saturating_add(wi.clear_after.0)))
        .chain(release)
        .min()
}

/// A sync started: a resync on a whole array releases the chunks behind it from
/// the first quiet time on.
pub(crate) fn sync_started(engine: &mut Engine) {
    let now = engine.now();
    let releases = crate::sync::resync_front(engine).is_some() && engine.is_whole();
    if let Some(wi) = engine.intent.as_mut() {
        wi.resync_released = 0;
        wi.resync_released_at = now;
        wi.resync_may_release = releases;
    }
}

/// When the running resync may release the chunks it has passed since it last did.
fn next_release(engine: &Engine) -> Option<Nanos> {
    let wi = engine.intent.as_ref()?;
    let front = crate::sync::resync_front(engine)?;
    (wi.resync_may_release && engine.is_whole() && wi.chunks_below(front) > wi.resync_released)
        .then(|| Nanos(wi.resync_released_at.0.saturating_add(wi.clear_after.0)))
}

/// A running resync releases the bits of the chunks wholly behind it — their copies
/// or parity agree with their data now — so that a clear round may clear them
/// while it goes on (md's `md_bitmap_cond_end_sync`); a crash midway then resyncs
/// only what it had not reached. At most once per quiet time, so that the clear
/// rounds (each a flush of every member) stay few.
fn release_behind_resync(engine: &mut Engine) {
    let Some(due) = next_release(engine) else {
        return;
    };
    if engine.now() < due {
        return;
    }
    let Some(front) = crate::sync::resync_front(engine) else {
        return;
    };
    let now = engine.now();
    let wi = engine.intent.as_mut().expect("a release is due");
    let below = wi.chunks_below(front);
    for c in wi.resync_released..below {
        wi.unpin(c);
        if wi.bit(c) {
            wi.used.entry(c).or_insert(ChunkUse {
                writers: 0,
                quiet_since: Nanos(0),
            });
        }
    }
    wi.resync_released = below;
    wi.resync_released_at = now;
}

/// Starts the next round if none runs: bits wanted first, then bits to clear.
pub(crate) fn kick(engine: &mut Engine) {
    release_behind_resync(engine);
    let Some(wi) = engine.intent.as_mut() else {
        return;
    };
    if wi.round.is_some() {
        return;
    }
    if !wi.wanted.is_empty() || !wi.blocks_due.is_empty() {
        let mut blocks = std::mem::take(&mut wi.blocks_due);
        let wanted = std::mem::take(&mut wi.wanted);
        for &c in &wanted {
            wi.put_bit(c, true);
            blocks.insert(wi.block_of(c));
        }
        wi.setting = wanted;
        start_round(engine, blocks.into_iter().collect(), Vec::new());
        return;
    }
    let clear = clearable(engine);
    let wi = engine.intent.as_mut().expect("checked above");
    if clear.is_empty() {
        wi.clear_now = false;
        // Forget chunks whose bits are already clear and that nobody writes.
        let image = &wi.image;
        wi.used.retain(|c, u| u.writers > 0 || bit_in(image, *c));
        return;
    }
    let mut blocks = BTreeSet::new();
    for &c in &clear {
        wi.put_bit(c, false);
        wi.used.remove(&c);
        blocks.insert(wi.block_of(c));
    }
    start_round(engine, blocks.into_iter().collect(), clear);
}

/// Starts a round writing `blocks`: a set round, or a clear round of `cleared`.
fn start_round(engine: &mut Engine, blocks: Vec<u64>, cleared: Vec<u64>) {
    let clearing = !cleared.is_empty();
    let wi = engine.intent.as_ref().expect("intent is on");
    let bb = wi.block_bytes;
    let buf = engine.bufs.alloc(blocks.len() * bb);
    let bytes = engine.bufs.get_mut(buf);
    for (i, &b) in blocks.iter().enumerate() {
        let at = usize::try_from(b).expect("blocks fit memory") * bb;
        bytes[i * bb..(i + 1) * bb].copy_from_slice(&wi.image[at..at + bb]);
    }
    let wi = engine.intent.as_mut().expect("intent is on");
    wi.rounds += 1;
    wi.round = Some(Round {
        blocks,
        buf,
        writing: !clearing,
        durable_writes: false,
        pending: 0,
        cleared,
        number: wi.rounds,
    });
    issue_step(engine);
}

/// Issues the current step of the round to every present member (or ends the round
/// when none is left to take it).
fn issue_step(engine: &mut Engine) {
    let members = engine.present_members();
    let durable = engine.durable_write_kind();
    let wi = engine.intent.as_mut().expect("intent is on");
    let round = wi.round.as_mut().expect("a round runs");
    let bb = wi.block_bytes;
    let sectors_per_block = (bb / 512) as u64;
    let writes: Vec<(u64, usize)> = round
        .blocks
        .iter()
        .enumerate()
        .map(|(i, &b)| (b * sectors_per_block, i * bb))
        .collect();
    let (buf, writing, number) = (round.buf, round.writing, round.number);
    // A set round's bits must be durable before the writes they cover go: as durable
    // writes where the driver takes them (no flush follows), else a write and a
    // flush. A clear round's write needs no flush (a lost clear costs a resync of
    // the chunk, nothing more).
    let kind = if round.clearing() {
        IoKind::Write
    } else {
        durable
    };
    if writing {
        round.durable_writes = kind == IoKind::WriteFua;
    }
    let per_member = if writing { writes.len() } else { 1 };
    round.pending = u32::try_from(members.len() * per_member).expect("few I/Os");
    let per = u32::try_from(per_member).expect("few I/Os");
    for &m in &members {
        wi.outstanding[m.index()] = per;
    }
    *wi.buf_users.entry(buf).or_insert(0) += round.pending;
    if members.is_empty() {
        step_done(engine);
        return;
    }
    for m in members {
        if writing {
            for &(sector, offset) in &writes {
                let slice = BufSlice {
                    buf,
                    offset,
                    len: bb,
                };
                engine.emit_to(
                    m,
                    kind,
                    Area::Bitmap,
                    sector,
                    slice,
                    IoTarget::Intent {
                        member: m,
                        buf,
                        round: number,
                    },
                );
            }
        } else {
            let slice = BufSlice {
                buf,
                offset: 0,
                len: 0,
            };
            engine.emit_to(
                m,
                IoKind::Flush,
                Area::Data,
                0,
                slice,
                IoTarget::Intent {
                    member: m,
                    buf,
                    round: number,
                },
            );
        }
    }
}

/// A bitmap write or flush completed. A member that fails to take its bitmap is
/// failed, as md fails a member whose bitmap write fails.
pub(crate) fn on_io(
    engine: &mut Engine,
    member: MemberIdx,
    (buf, round): (BufId, u64),
    result: Result<(), IoFailed>,
    stale: bool,
) {
    release_buf(engine, buf, 1);
    if stale {
        // From a device since replaced in its role: no longer waited for.
        return;
    }
    if let Err(failure) = result {
        let reason = match failure {
            IoFailed::Gone => FailReason::DeviceGone,
            IoFailed::Medium => FailReason::WriteError,
        };
        engine.fail(member, reason);
    }
    // Only the round it belongs to counts it. Failing the member may have ended that
    // round and started another (a replacement taking the role over gets the whole
    // bitmap at once): counted against that one, this I/O would end it before the
    // new device had its bits.
    let current = engine
        .intent
        .as_ref()
        .and_then(|wi| wi.round.as_ref())
        .is_some_and(|r| r.number == round);
    if current {
        count_done(engine, member, 1);
    }
}

/// `n` I/Os using `buf` returned; the buffer is freed once none is out and its round
/// is over.
fn release_buf(engine: &mut Engine, buf: BufId, n: u32) {
    let Some(wi) = engine.intent.as_mut() else {
        return;
    };
    let current = wi.round.as_ref().is_some_and(|r| r.buf == buf);
    let users = wi.buf_users.entry(buf).or_insert(0);
    *users = users.saturating_sub(n);
    if *users == 0 && !current {
        wi.buf_users.remove(&buf);
        engine.bufs.free(buf);
    }
}

/// `n` of `member`'s bitmap I/Os in the round no longer hold it up.
fn count_done(engine: &mut Engine, member: MemberIdx, n: u32) {
    let Some(wi) = engine.intent.as_mut() else {
        return;
    };
    let Some(round) = wi.round.as_mut() else {
        return;
    };
    let left = &mut wi.outstanding[member.index()];
    let n = n.min(*left);
    if n == 0 {
        return;
    }
    *left -= n;
    round.pending -= n;
    if round.pending == 0 {
        step_done(engine);
    }
}

/// `member` failed or was replaced: the round does not wait for what it still owes
/// (a stalled device may never answer); the others carry the bits.
pub(crate) fn member_gone(engine: &mut Engine, member: MemberIdx) {
    // Degraded (or rebuilding) from now on: events_cleared must go up again, on a
    // whole array, before anything is cleared.
    if let Some(wi) = engine.intent.as_mut() {
        wi.clears_allowed = false;
        wi.resync_may_release = false;
    }
    let owed = engine
        .intent
        .as_ref()
        .map_or(0, |wi| wi.outstanding[member.index()]);
    count_done(engine, member, owed);
}

fn step_done(engine: &mut Engine) {
    let wi = engine.intent.as_mut().expect("intent is on");
    let round = wi.round.as_mut().expect("a round runs");
    // Set rounds write then flush (or only write, durably); clear rounds flush then
    // write.
    let fua_set = round.durable_writes && !round.clearing();
    let more = round.clearing() != round.writing && !fua_set;
    if more && round.clearing() && !may_clear_now(engine) {
        // A member failed during the flush (its data may not be durable) or the array
        // changed: the bits stay set, on disk and here.
        let now = engine.now();
        let round = end_round(engine);
        let wi = engine.intent.as_mut().expect("intent is on");
        for &c in &round.cleared {
            wi.put_bit(c, true);
            wi.used.entry(c).or_insert(ChunkUse {
                writers: 0,
                quiet_since: now,
            });
        }
    } else if more {
        let wi = engine.intent.as_mut().expect("intent is on");
        let round = wi.round.as_mut().expect("a round runs");
        round.writing = !round.writing;
        issue_step(engine);
        return;
    } else {
        end_round(engine);
    }
    release_parked(engine);
    kick(engine);
}

/// Takes the round in flight off: what it set is on the members now, and its buffer
/// goes once its last I/O has returned.
fn end_round(engine: &mut Engine) -> Round {
    let wi = engine.intent.as_mut().expect("intent is on");
    let round = wi.round.take().expect("a round runs");
    wi.setting.clear();
    release_buf(engine, round.buf, 0);
    round
}

/// Starts every parked write whose bits are now on the members.
fn release_parked(engine: &mut Engine) {
    let parked = std::mem::take(&mut engine.intent.as_mut().expect("intent is on").parked);
    for p in parked {
        if try_enter(engine, p.req, p.chunks) {
            engine.submit_segment(p.req, p.seg);
            engine.request_step_done(p.req, None);
        } else {
            let wi = engine.intent.as_mut().expect("intent is on");
            wi.want_missing(p.chunks);
            wi.parked.push(p);
        }
    }
}

/// Where a sync that visits only dirty chunks goes next from `unit` on: the first
/// unit at or after it overlapping a set bit (or `total`).
pub(crate) fn next_dirty_unit(engine: &Engine, unit: u64, total: u64) -> u64 {
    let Some(wi) = engine.intent.as_ref() else {
        return unit;
    };
    let per = crate::sync::unit_sectors(engine);
    let mut u = unit;
    while u < total {
        if engine.unit_dirty(u) {
            return u;
        }
        // Jump past the chunk holding the unit's last sector.
        let chunk = ((u + 1) * per - 1) / wi.chunk_sectors;
        u = ((chunk + 1) * wi.chunk_sectors / per).max(u + 1);
    }
    total
}

/// Whether `kind` can use the bitmap to skip clean chunks.
pub(crate) fn sync_may_skip(kind: SyncKind) -> bool {
    matches!(kind, SyncKind::Resync | SyncKind::Recover)
}
