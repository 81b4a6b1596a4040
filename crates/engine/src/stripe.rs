//! Plans for the parity levels (RAID-4/5/6): one operation per stripe touched by a
//! write (or by a read of a missing member), serialised per stripe — one per band of
//! rows where bad block logs list some of the stripe's rows (see `listing_cuts`).
//!
//! An operation works on the *rows* `lo..hi` of its stripe: the hull of the chunk
//! offsets its segments touch. Its scratch buffer holds one row range per member,
//! member `m` at `m * row_bytes`. Plans, by the member reads they need:
//! - read-modify-write: old data under the segments, and P (and Q) rows;
//! - reconstruct-write: every data row the segments do not cover (none for a
//!   full-stripe write);
//! - reconstruct: with a member missing whose old rows are needed, every live member's
//!   rows, so that the missing rows are rebuilt before new parity is computed.

use xraid_layout::{MemberIdx, StripeMap};

use crate::buffers::{BufId, BufSlice};
use crate::engine::{member_idx, sectors_to_bytes, Engine, Holder, IoTarget, Owner, Segment};
use crate::sync::UnitOutcome;
use crate::{EngineError, Event, IoFailed, IoKind, MemberState, SyncKind};

/// The part of a stripe's data chunk `data_index` that an operation reads or writes,
/// in sectors from the chunk's start, and where it sits in the client buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg {
    data_index: u16,
    start: u32,
    end: u32,
    buf_off: usize,
}

/// What an operation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// Read segments whose member is missing, or whose read failed.
    Read,
    Write,
    /// One unit of a background sync.
    Sync(SyncKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    ReadModifyWrite,
    ReconstructWrite,
    Reconstruct,
    DegradedRead,
    Sync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued,
    Reading,
    /// Waiting for room in the log ring.
    LogWait,
    /// Waiting for its log member's next batch (see `ppl`).
    LogQueued,
    /// Its log entry is in a batch being written, then flushed; the batch lets it go.
    Logging,
    Writing,
}

#[derive(Debug)]
pub(crate) struct StripeOp {
    owner: Owner,
    purpose: Purpose,
    stripe: u64,
    segs: Vec<Seg>,
    lo: u32,
    hi: u32,
    scratch: Option<BufId>,
    /// I/Os in flight (a write's copy to a replacement counts too).
    pub(crate) pending: u32,
    /// A read failed: plan again around the member once the others finish.
    replan: bool,
    plan: Plan,
    phase: Phase,
    /// Members whose reads failed in this operation: missing here, and their rows
    /// are rewritten from the rebuilt ones (md's read-error correction).
    bad: Vec<MemberIdx>,
    /// Of `bad`, parity members in doubt that no log could list (see
    /// [`through_parity_in_doubt`]): planned around and rewritten like a member whose
    /// read failed, but no read error was corrected there.
    planned_around: Vec<MemberIdx>,
    /// Members the plan did not read (missing for this operation when it was
    /// planned); their rows are rebuilt from the others.
    missing: Vec<MemberIdx>,
    /// A sync found redundancy disagreeing with the data.
    mismatch: bool,
    /// The write's log entry: seq (0 until written), the member whose ring takes it,
    /// its buffer and size.
    log: Option<(u64, MemberIdx, BufId, u64)>,
    /// In-place writes held back until the log entry is durable.
    deferred: Vec<(MemberIdx, u64, BufSlice)>,
    /// A recover unit that only copies members being replaced onto their
    /// replacements: it read just those members' rows, nothing to rebuild.
    direct_copy: bool,
    /// A client write under way when a member left: its log entry (built before, or
    /// planned around the member's failed read) may lack that member's rows, so it is
    /// made durable as soon as the write finishes.
    durable_soon: bool,
    /// The log entry goes out only once every seq up to this one is durable: its
    /// partial parity counts on rows earlier writes left on members (0: no wait).
    log_after: u64,
    /// The rings the entry goes to: its parity member's, and on RAID-6 the other
    /// parity member's too, so that it outlives either one dying with the power.
    log_rings: Vec<MemberIdx>,
    /// Rings of `log_rings` the entry has yet to be given room on.
    log_rings_todo: Vec<MemberIdx>,
    /// The entry's batches under way (queued, or being written and flushed).
    log_batches_out: u8,
    /// Every seq the entry was given, one per ring.
    log_seqs: Vec<u64>,
    /// In the log's waiters (for ring room or for earlier writes to be durable).
    log_waiting: bool,
    /// The member writes sent: member, first sector, and the data.
    written: Vec<(MemberIdx, u64, BufSlice)>,
    /// One of them failed (see `torn_by_the_loss`).
    write_failed: bool,
    /// Members that refused their write (a medium error): settled once every write
    /// has answered (`settle`).
    refused: Vec<MemberIdx>,
    /// Once refused writes were tried again in blocks (`narrow`).
    narrowed: Option<Narrowed>,
    /// A client write whose rows a refusal left beyond the redundancy: it fails.
    unwritten: bool,
    /// Past the redundancy only where bad block logs list rows: a loss already
    /// recorded, and loud (a sync unit that found it has nothing new to report).
    listed_loss: bool,
}

/// Refused writes of an operation, tried again in blocks (`narrow`).
#[derive(Debug)]
struct Narrowed {
    /// The members whose writes were tried again.
    tried: Vec<MemberIdx>,
    /// The blocks they refused again.
    refused_again: Vec<(MemberIdx, std::ops::Range<u64>)>,
}

impl StripeOp {
    fn row_bytes(&self) -> usize {
        sectors_to_bytes(u64::from(self.hi - self.lo))
    }

    /// Members whose reads failed in this operation: `bad` but for the parity it
    /// plans around.
    fn failed_reads(&self) -> impl Iterator<Item = MemberIdx> + '_ {
        self.bad
            .iter()
            .copied()
            .filter(|m| !self.planned_around.contains(m))
    }
}

/// Whether the stripe-log entry of write `o` keeps member `m`'s rows although `m`
/// takes the write: rebuilt here only in memory so far (see `sync::rebuilt_unrecorded`).
/// So does a full-band write for a member whose log lists rows there (see
/// [`rewrites_band`]): until the write is durable and the list recorded, a restart
/// finds them listed, and the replay puts the logged rows back.
fn log_keeps_rows(engine: &Engine, o: &StripeOp, m: MemberIdx) -> bool {
    engine.log.is_some()
        && !o.bad.contains(&m)
        && (crate::sync::rebuilt_unrecorded(engine, m, o.stripe)
            || durably_listed_here(engine, o, m))
}

/// Whether a restart would find `m`'s bad block log listing rows of operation `o`:
/// listed now, or made good since the lists were last recorded (the replay would
/// then take `m` for gone there and work its rows out, not read them).
fn durably_listed_here(engine: &Engine, o: &StripeOp, m: MemberIdx) -> bool {
    crate::badblocks::is_durably_known_bad(engine, m, op_rows(engine, o))
}

/// Whether client write `o` covers every data chunk's rows lo..hi: it reads nothing,
/// and every member it reaches ends up holding its data or parity made from it alone.
/// A member whose log lists rows there takes such a write like any other (which makes
/// them good): rows lost past the redundancy — a rebuild past listed rows, a lost
/// stripe-log ring on a degraded array — can be written again (md clears listed
/// blocks a write reaches the same way).
fn rewrites_band(engine: &Engine, o: &StripeOp) -> bool {
    o.purpose == Purpose::Write
        && (0..engine.geo.data_disks()).all(|i| wholly_covered(&o.segs, i, o.lo, o.hi))
        && listed_rows_fit_the_log(engine, o)
        // While stripe-log rings are counted lost, a later walk may list the stripe's
        // parity again (it cannot know a write made it good): the rows stay lost
        // until the owed resync completes.
        && !crate::ppl::rings_lost(engine)
}

/// Whether the stripe-log entry of a whole-band write can carry the rows of every
/// data member that is listed here or cannot take it: beyond the redundancy that can
/// be more than the bound a ring is sized for (`ppl::log_entry_max_sectors`), and an
/// entry that does not fit the ring goes out unlogged (`build_log_entry`) — a power cut then leaves torn
/// parity that a missing member is rebuilt from. Such a write is planned around the
/// listed members as before (it fails, loudly).
fn listed_rows_fit_the_log(engine: &Engine, o: &StripeOp) -> bool {
    if engine.log.is_none() {
        return true;
    }
    let map = engine.geo.stripe_map(o.stripe);
    let carried = (0..map.data_disks())
        .map(|i| map.data_member(i))
        .filter(|&m| {
            !engine.in_sync(m, o.stripe)
                || o.bad.contains(&m)
                || listed_here(engine, o, m)
                || crate::sync::rebuilt_unrecorded(engine, m, o.stripe)
        })
        .count();
    let records = carried + usize::from(map.data_disks());
    crate::ppl::fits(engine, carried, records, o.lo, o.hi)
}

/// Whether the stripe-log entry of write `o` must carry data chunk `data_index`'s rows
/// for its partial parity to hold: an earlier write to the stripe, not durable yet,
/// covered that chunk in rows `o` leaves (partly) alone. After a power cut that
/// earlier write may be lost on the member while this one lands; the partial parity
/// counts the chunk as written, so the replay needs its rows as they are now (md's PPL
/// has this flaw).
fn carries_earlier_write(engine: &Engine, o: &StripeOp, data_index: u16) -> bool {
    !wholly_covered(&o.segs, data_index, o.lo, o.hi)
        && crate::ppl::written_since_durable(engine, o.stripe, data_index, o.lo, o.hi)
}

/// Whether operation `o` may read `m`: in sync for the stripe, not failing here, and
/// holding the operation's rows (its bad block log lists none of them). A member
/// whose log lists some is planned around as a missing one — a write's log entry
/// carries its rows, as a missing member's — and gets its rows rebuilt and rewritten.
fn op_live(engine: &Engine, o: &StripeOp, m: MemberIdx) -> bool {
    engine.in_sync(m, o.stripe)
        && !o.bad.contains(&m)
        && (!listed_here(engine, o, m) || rewrites_band(engine, o))
}

/// A recover unit past the redundancy because other members' logs list rows of it:
/// the members being rebuilt cannot get these rows, which go into their own logs
/// (lost, read as errors), and the rebuild goes on (md's recovery does the same). The
/// operation's rows are listed: a band of the unit where the same members list rows
/// ([`listing_cuts`]). Returns false where that cannot be done (a replacement being
/// built, a full log): the unit is then not rebuilt, and its members stay so.
fn lost_in_rebuild(engine: &mut Engine, op: usize, missing: &[MemberIdx]) -> bool {
    let o = engine.ops.get(op);
    if o.purpose != Purpose::Sync(SyncKind::Recover)
        || !missing.iter().any(|&m| listed_here(engine, o, m))
    {
        return false;
    }
    let rows = op_rows(engine, o);
    list_lost_on_rebuilt_members(engine, missing, rows)
}

/// The members being rebuilt among `missing` cannot get rows `rows`: they go into
/// their logs (lost, read as errors). Returns whether they did: not while a
/// replacement is built, nor where a log has no room.
fn list_lost_on_rebuilt_members(
    engine: &mut Engine,
    missing: &[MemberIdx],
    rows: std::ops::Range<u64>,
) -> bool {
    let targets: Vec<MemberIdx> = missing
        .iter()
        .copied()
        .filter(|&m| engine.member_states()[m.index()] == MemberState::Rebuilding)
        .collect();
    !engine.any_replacing()
        && !targets.is_empty()
        && targets
            .iter()
            .all(|&m| crate::badblocks::record_lost(engine, m, rows.clone()))
}

/// Operation `op` would rebuild a data member's rows (one of `missing`, which it
/// needs) through parity a power cut may have torn and nothing has put right yet
/// (`sync::parity_in_doubt`): what that gives back may never have been written —
/// md's write hole, met by a read error or a listing before the resync got there.
/// Where another parity member is trusted (a RAID-6 whose other ring was lost), the
/// ones in doubt are listed for the operation's rows, as a lost ring's are at open,
/// and it is planned again, around them. Else the rows are lost, loudly: a client
/// request fails (`Unreadable`); a resync lists the parity in doubt (the rows it
/// cannot make agree outlive it, past the redundancy) and goes on; a recover lists
/// what it cannot rebuild on the members it builds. Returns whether the operation
/// was dealt with here.
fn through_parity_in_doubt(engine: &mut Engine, op: usize, missing: &[MemberIdx]) -> bool {
    let o = engine.ops.get(op);
    let map = engine.geo.stripe_map(o.stripe);
    // A write over a missing member's rows makes parity in doubt fresh (see
    // `sync::parity_made_fresh`), but in memory only where a lost ring's doubt is
    // what pins it: the rings' marker names the ring, not the stripes written since,
    // so the next open doubts the stripe again, and the rows written would read as
    // lost — an acknowledged write. Such a write needs those rows as a read does:
    // refused where no trusted parity is left, as where that parity is listed.
    let covering_stays_in_doubt = o.purpose == Purpose::Write
        && !missing.is_empty()
        && crate::sync::parity_in_doubt(engine, o.stripe, (o.lo, o.hi), false)
            .into_iter()
            .any(|p| !missing.contains(&p) && crate::ppl::listed_at_a_later_open(engine, p));
    let needed: Vec<MemberIdx> = (0..map.data_disks())
        .filter(|&i| {
            o.purpose != Purpose::Write
                || covering_stays_in_doubt
                || !wholly_covered(&o.segs, i, o.lo, o.hi)
        })
        .map(|i| map.data_member(i))
        .filter(|m| missing.contains(m))
        .collect();
    if needed.is_empty() {
        return false;
    }
    // Rows that fail to read count against any doubt; rows whose only copy is parity
    // (listed, or a missing member's) only against doubts the log pins to the stripe.
    let unpinned = needed.iter().any(|m| o.bad.contains(m));
    let doubted: Vec<MemberIdx> =
        crate::sync::parity_in_doubt(engine, o.stripe, (o.lo, o.hi), unpinned)
            .into_iter()
            .filter(|p| !missing.contains(p))
            .collect();
    if doubted.is_empty() {
        return false;
    }
    if matches!(o.purpose, Purpose::Sync(_)) {
        // What a sync cannot rebuild stays lost: only where it must be. Rows a
        // client write made fresh are rebuilt, and where a member failed to read,
        // only the blocks that fail again are lost (md's stripes are a page each).
        let mut cuts = crate::sync::fresh_edges(engine, o.stripe, (o.lo, o.hi));
        if !o.bad.is_empty() {
            let block = xraid_format::BLOCK_SECTORS as u32;
            cuts.extend(
                (o.lo / block + 1..)
                    .map(|b| b * block)
                    .take_while(|&row| row < o.hi),
            );
        }
        if !cuts.is_empty() {
            plan_again_in_bands(engine, op, cuts);
            return true;
        }
    }
    let rows = op_rows(engine, o);
    let parity_count = usize::from(engine.geo.level().parity_count());
    let trusted_left = missing.len() + doubted.len() <= parity_count;
    match o.purpose {
        _ if trusted_left => {
            let listed = doubted
                .iter()
                .all(|&p| crate::ppl::list_parity_in_doubt(engine, p, rows.clone()));
            let o = engine.ops.get(op);
            let unplanned: Vec<MemberIdx> = doubted
                .iter()
                .copied()
                .filter(|&p| op_live(engine, o, p))
                .collect();
            if !listed || !unplanned.is_empty() {
                // No bad block log (or none with room) to list them in: this operation
                // plans around them itself, and rewrites their rows from the data and
                // the parity trusted, as for a member whose read failed.
                let o = engine.ops.get_mut(op);
                for p in unplanned {
                    if !o.bad.contains(&p) {
                        o.bad.push(p);
                        o.planned_around.push(p);
                    }
                }
            }
            start(engine, op);
        }
        Purpose::Read | Purpose::Write | Purpose::Sync(SyncKind::Check) => {
            let (sector, end) = op_extent(engine, o);
            finish(engine, op, Some(EngineError::Unreadable { sector, end }));
        }
        Purpose::Sync(SyncKind::Recover) => {
            let listed = list_lost_on_rebuilt_members(engine, missing, rows);
            let (sector, end) = op_extent(engine, engine.ops.get(op));
            let error = (!listed).then_some(EngineError::Unreadable { sector, end });
            finish(engine, op, error);
        }
        Purpose::Sync(_) => {
            // Where a log has no room the loss stays unrecorded: the resync does not
            // complete, and the doubt stays (loud) until one does.
            let listed = doubted
                .into_iter()
                .all(|p| crate::ppl::list_parity_in_doubt(engine, p, rows.clone()));
            let (sector, end) = op_extent(engine, engine.ops.get(op));
            engine.ops.get_mut(op).listed_loss = listed;
            finish(engine, op, Some(EngineError::Unreadable { sector, end }));
        }
    }
    true
}

/// Cuts sync operation `op` at `cuts` (rows inside it): it keeps the first band and
/// each other becomes an operation of its own, next in line for the stripe, all read
/// again (see [`through_parity_in_doubt`]).
fn plan_again_in_bands(engine: &mut Engine, op: usize, mut cuts: Vec<u32>) {
    cuts.sort_unstable();
    cuts.dedup();
    let o = engine.ops.get(op);
    let (owner, purpose, stripe, hi) = (o.owner, o.purpose, o.stripe, o.hi);
    {
        let o = engine.ops.get_mut(op);
        o.hi = cuts[0];
        o.bad.clear();
        o.planned_around.clear();
        let scratch = o.scratch.take();
        if let Some(buf) = scratch {
            engine.bufs.free(buf);
        }
    }
    let mut next = Vec::new();
    for (a, b) in bands(cuts[0], hi, &cuts[1..]) {
        crate::sync::unit_split(engine, stripe);
        let band = insert_op(engine, owner, purpose, stripe, Vec::new(), a, b, Vec::new());
        next.push(Holder::Stripe(band));
    }
    engine.lock_next(stripe, &next);
    start(engine, op);
}

/// Whether client read `o` asks for rows nobody knows (see [`crate::unknown`]): lost,
/// and loudly, whatever parity would make of them.
fn reads_unknown_rows(engine: &Engine, o: &StripeOp) -> bool {
    o.purpose == Purpose::Read && {
        let map = engine.geo.stripe_map(o.stripe);
        o.segs.iter().any(|s| {
            crate::unknown::any_in(
                engine,
                o.stripe,
                map.data_member(s.data_index),
                s.start,
                s.end,
            )
        })
    }
}

/// The rows operation `o` covers, per data member: (member, from, to).
fn data_rows(engine: &Engine, o: &StripeOp) -> Vec<(MemberIdx, u32, u32)> {
    let map = engine.geo.stripe_map(o.stripe);
    o.segs
        .iter()
        .map(|s| (map.data_member(s.data_index), s.start, s.end))
        .collect()
}

/// Whether client write `op` would split unknown rows into more bands than the
/// stripe log's markers name, so that the markers would take in rows known (see
/// `unknown::write_outgrows_markers`).
fn splits_unknown_rows_past_the_markers(engine: &Engine, op: usize) -> bool {
    let o = engine.ops.get(op);
    if o.purpose != Purpose::Write || !crate::unknown::any(engine) {
        return false;
    }
    crate::unknown::write_outgrows_markers(
        engine,
        o.stripe,
        &data_rows(engine, o),
        crate::ppl::unknown_rows_room(engine),
    )
}

/// Whether `m`'s bad block log lists any of operation `o`'s rows.
fn listed_here(engine: &Engine, o: &StripeOp, m: MemberIdx) -> bool {
    crate::badblocks::any(engine) && crate::badblocks::is_known_bad(engine, m, op_rows(engine, o))
}

/// The member sectors of operation `o`'s rows lo..hi (any member's).
fn op_rows(engine: &Engine, o: &StripeOp) -> std::ops::Range<u64> {
    engine.geo.member_sector(o.stripe, o.lo)..engine.geo.member_sector(o.stripe, o.hi)
}

/// Splits a segment at chunk boundaries. Reads of members in sync go straight to the
/// client buffer; everything else becomes one operation per stripe.
pub(crate) fn submit(engine: &mut Engine, req: usize, seg: Segment) {
    let chunk = u64::from(engine.geo.chunk_sectors());
    let client = engine.request_buf(req);
    let end = seg.sector + seg.sectors;
    let mut sector = seg.sector;
    let mut buf_off = seg.buf_off;
    let mut group: Option<(u64, Vec<Seg>)> = None;
    let purpose = if seg.write {
        Purpose::Write
    } else {
        Purpose::Read
    };
    while sector < end {
        let pos = engine.geo.stripe_pos(sector);
        let sectors = (chunk - u64::from(pos.offset_in_chunk)).min(end - sector);
        let piece = Seg {
            data_index: pos.data_index,
            start: pos.offset_in_chunk,
            end: pos.offset_in_chunk + u32::try_from(sectors).expect("within a chunk"),
            buf_off,
        };
        let member = engine
            .geo
            .stripe_map(pos.stripe)
            .data_member(pos.data_index);
        // Rows nobody knows go the long way, to fail there.
        let known = || !crate::unknown::any_in(engine, pos.stripe, member, piece.start, piece.end);
        if !seg.write && engine.in_sync(member, pos.stripe) && known() {
            let buf = BufSlice {
                buf: client,
                offset: buf_off,
                len: sectors_to_bytes(sectors),
            };
            let target = IoTarget::Direct {
                req,
                member,
                seg: Segment {
                    sector,
                    sectors,
                    buf_off,
                    write: false,
                },
            };
            let member_sector = engine.geo.member_sector(pos.stripe, pos.offset_in_chunk);
            engine.emit(member, IoKind::Read, member_sector, buf, target);
        } else {
            match &mut group {
                Some((stripe, segs)) if *stripe == pos.stripe => segs.push(piece),
                _ => {
                    if let Some((stripe, segs)) = group.take() {
                        client_op(engine, req, purpose, stripe, segs, Vec::new());
                    }
                    group = Some((pos.stripe, vec![piece]));
                }
            }
        }
        sector += sectors;
        buf_off += sectors_to_bytes(sectors);
    }
    if let Some((stripe, segs)) = group {
        client_op(engine, req, purpose, stripe, segs, Vec::new());
    }
}

/// A direct read of `seg` (one chunk piece) from `bad` failed: read the stripe's rows
/// around it, rebuild the piece, and rewrite `bad`'s rows.
pub(crate) fn submit_repair_read(engine: &mut Engine, req: usize, seg: Segment, bad: MemberIdx) {
    // A read that failed because the member's log lists part of it: the listing says
    // which rows (the operation plans around them band by band), the rest it holds.
    let bad = if engine.known_bad_read {
        Vec::new()
    } else {
        vec![bad]
    };
    let pos = engine.geo.stripe_pos(seg.sector);
    let piece = Seg {
        data_index: pos.data_index,
        start: pos.offset_in_chunk,
        end: pos.offset_in_chunk + u32::try_from(seg.sectors).expect("within a chunk"),
        buf_off: seg.buf_off,
    };
    client_op(engine, req, Purpose::Read, pos.stripe, vec![piece], bad);
}

fn client_op(
    engine: &mut Engine,
    req: usize,
    purpose: Purpose,
    stripe: u64,
    segs: Vec<Seg>,
    bad: Vec<MemberIdx>,
) {
    let (lo, hi) = rows_of(engine, &segs);
    engine.request_step_started(req);
    new_op(
        engine,
        Owner::Client(req),
        purpose,
        stripe,
        segs,
        lo,
        hi,
        bad,
    );
}

/// The rows an operation on `segs` works on: their hull, in integrity mode widened to
/// whole checksum blocks, so that parity and the rows of a member that failed to read
/// are written (and checked) a whole block at a time.
fn rows_of(engine: &Engine, segs: &[Seg]) -> (u32, u32) {
    let lo = segs
        .iter()
        .map(|s| s.start)
        .min()
        .expect("an op has segments");
    let hi = segs
        .iter()
        .map(|s| s.end)
        .max()
        .expect("an op has segments");
    if engine.integrity_on() {
        let block = xraid_format::BLOCK_SECTORS as u32;
        (
            lo / block * block,
            hi.next_multiple_of(block).min(engine.geo.chunk_sectors()),
        )
    } else {
        (lo, hi)
    }
}

/// Rows strictly inside lo..hi of `stripe` where some member's bad block log starts
/// or stops listing rows (in integrity mode, at the checksum block holding that row),
/// lowest first; none where no log lists anything there. An operation cut there counts
/// listed rows band by band: two members listing different rows of one stripe are
/// one missing member in each band, not two across the stripe — a RAID-5 then still
/// reads, writes and rebuilds every row, as md does page by page.
fn listing_cuts(engine: &Engine, stripe: u64, lo: u32, hi: u32) -> Vec<u32> {
    if !crate::badblocks::any(engine) {
        return Vec::new();
    }
    let base = engine.geo.member_sector(stripe, 0);
    let rows = base + u64::from(lo)..base + u64::from(hi);
    let block = if engine.integrity_on() {
        xraid_format::BLOCK_SECTORS as u32
    } else {
        1
    };
    let mut cuts: Vec<u32> = (0..engine.geo.raid_disks())
        .map(MemberIdx)
        .flat_map(|m| crate::badblocks::split(engine, m, rows.clone()).1)
        .flat_map(|listed| {
            let row = |at: u64| u32::try_from(at - base).expect("within the stripe");
            // The blocks holding listed rows: a start rounds down, an end up.
            [
                row(listed.start) / block * block,
                row(listed.end).next_multiple_of(block),
            ]
        })
        .filter(|&row| lo < row && row < hi)
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The row bands lo..hi is cut into at `cuts`.
fn bands(lo: u32, hi: u32, cuts: &[u32]) -> impl Iterator<Item = (u32, u32)> + '_ {
    std::iter::once(lo)
        .chain(cuts.iter().copied())
        .zip(cuts.iter().copied().chain(std::iter::once(hi)))
}

impl Seg {
    /// The part of the segment in rows a..b, if any, with its place in the buffer.
    fn clipped(&self, a: u32, b: u32) -> Option<Seg> {
        let (start, end) = (self.start.max(a), self.end.min(b));
        (start < end).then(|| Seg {
            data_index: self.data_index,
            start,
            end,
            buf_off: self.buf_off + sectors_to_bytes(u64::from(start - self.start)),
        })
    }
}

/// One unit (stripe) of a background sync: its whole chunk rows.
pub(crate) fn start_sync_unit(engine: &mut Engine, stripe: u64, kind: SyncKind) {
    let hi = engine.geo.chunk_sectors();
    new_op(
        engine,
        Owner::Sync,
        Purpose::Sync(kind),
        stripe,
        Vec::new(),
        0,
        hi,
        Vec::new(),
    );
}

/// Cuts operation `op`, which has just taken its stripe, where bad block logs start
/// or stop listing rows of it ([`listing_cuts`]): it keeps the first band of rows, and
/// each other band becomes an operation of its own, next in line for the stripe (a
/// client request, or a sync unit, is done when its last band is). Cut here rather
/// than when the operation is made, since the operations ahead of it may have listed
/// rows meanwhile.
fn cut_at_listings(engine: &mut Engine, op: usize) {
    let o = engine.ops.get(op);
    let cuts = listing_cuts(engine, o.stripe, o.lo, o.hi);
    if cuts.is_empty() {
        return;
    }
    let (owner, purpose, stripe) = (o.owner, o.purpose, o.stripe);
    // The other bands ask for themselves which parity to plan around.
    let bad: Vec<MemberIdx> = o.failed_reads().collect();
    let sync = matches!(purpose, Purpose::Sync(_));
    // A client operation's bands hold its segments' rows there (a band between two
    // segments may hold none); a sync's are its rows.
    let bands: Vec<(Vec<Seg>, u32, u32)> = bands(o.lo, o.hi, &cuts)
        .map(|(a, b)| {
            let segs: Vec<Seg> = o.segs.iter().filter_map(|s| s.clipped(a, b)).collect();
            (segs, a, b)
        })
        .filter(|(segs, _, _)| sync || !segs.is_empty())
        .map(|(segs, a, b)| {
            let (lo, hi) = if sync { (a, b) } else { rows_of(engine, &segs) };
            (segs, lo, hi)
        })
        .collect();
    let mut bands = bands.into_iter();
    let Some((segs, lo, hi)) = bands.next() else {
        return;
    };
    {
        let o = engine.ops.get_mut(op);
        o.segs = segs;
        o.lo = lo;
        o.hi = hi;
    }
    let mut next = Vec::new();
    for (segs, lo, hi) in bands {
        match owner {
            Owner::Client(req) => engine.request_step_started(req),
            Owner::Sync => crate::sync::unit_split(engine, stripe),
        }
        let band = insert_op(engine, owner, purpose, stripe, segs, lo, hi, bad.clone());
        next.push(Holder::Stripe(band));
    }
    engine.lock_next(stripe, &next);
}

#[allow(clippy::too_many_arguments)]
fn new_op(
    engine: &mut Engine,
    owner: Owner,
    purpose: Purpose,
    stripe: u64,
    segs: Vec<Seg>,
    lo: u32,
    hi: u32,
    bad: Vec<MemberIdx>,
) {
    let op = insert_op(engine, owner, purpose, stripe, segs, lo, hi, bad);
    if engine.lock(stripe, Holder::Stripe(op)) {
        start(engine, op);
    }
}

/// A new operation, not yet in line for its stripe.
#[allow(clippy::too_many_arguments)]
fn insert_op(
    engine: &mut Engine,
    owner: Owner,
    purpose: Purpose,
    stripe: u64,
    segs: Vec<Seg>,
    lo: u32,
    hi: u32,
    bad: Vec<MemberIdx>,
) -> usize {
    engine.ops.insert(StripeOp {
        owner,
        purpose,
        stripe,
        segs,
        lo,
        hi,
        scratch: None,
        pending: 0,
        replan: false,
        plan: Plan::DegradedRead,
        phase: Phase::Queued,
        bad,
        planned_around: Vec::new(),
        missing: Vec::new(),
        mismatch: false,
        log: None,
        deferred: Vec::new(),
        direct_copy: false,
        durable_soon: false,
        log_after: 0,
        log_rings: Vec::new(),
        log_rings_todo: Vec::new(),
        log_batches_out: 0,
        log_seqs: Vec::new(),
        log_waiting: false,
        written: Vec::new(),
        write_failed: false,
        refused: Vec::new(),
        narrowed: None,
        unwritten: false,
        listed_loss: false,
    })
}

/// Array sectors an operation's segments cover (for error messages).
fn op_extent(engine: &Engine, o: &StripeOp) -> (u64, u64) {
    let chunk = u64::from(engine.geo.chunk_sectors());
    let base = o.stripe * engine.geo.stripe_data_sectors();
    let at = |s: &Seg, off: u32| base + u64::from(s.data_index) * chunk + u64::from(off);
    let lo = o.segs.iter().map(|s| at(s, s.start)).min().unwrap_or(base);
    let hi = o.segs.iter().map(|s| at(s, s.end)).max().unwrap_or(base);
    (lo, hi)
}

/// The operation holds its stripe: plan, then issue the reads the plan needs.
pub(crate) fn start(engine: &mut Engine, op: usize) {
    if engine.ops.get(op).phase == Phase::Queued {
        cut_at_listings(engine, op);
    }
    if reads_unknown_rows(engine, engine.ops.get(op)) {
        let (sector, end) = op_extent(engine, engine.ops.get(op));
        finish(engine, op, Some(EngineError::Unreadable { sector, end }));
        return;
    }
    if engine.ops.get(op).phase == Phase::Queued && splits_unknown_rows_past_the_markers(engine, op)
    {
        let (sector, end) = op_extent(engine, engine.ops.get(op));
        finish(
            engine,
            op,
            Some(EngineError::UnknownRowsFull { sector, end }),
        );
        return;
    }
    let parity_count = usize::from(engine.geo.level().parity_count());
    let raid_disks = usize::from(engine.geo.raid_disks());
    let missing: Vec<MemberIdx> = {
        let o = engine.ops.get(op);
        (0..raid_disks)
            .map(member_idx)
            .filter(|&m| !op_live(engine, o, m))
            .collect()
    };
    if through_parity_in_doubt(engine, op, &missing) {
        return;
    }
    if missing.len() > parity_count && lost_in_rebuild(engine, op, &missing) {
        finish(engine, op, None);
        return;
    }
    if missing.len() > parity_count {
        let o = engine.ops.get(op);
        // Past the redundancy because of members that are gone: the array is. Because
        // of reads that failed, or rows a member's bad block log lists: these rows.
        let array_wide = o.bad.is_empty() && !missing.iter().any(|&m| listed_here(engine, o, m));
        let listed_loss = o.bad.is_empty() && !array_wide;
        let error = if array_wide {
            engine.data_lost(parity_count)
        } else {
            let (sector, end) = op_extent(engine, o);
            EngineError::Unreadable { sector, end }
        };
        engine.ops.get_mut(op).listed_loss = listed_loss;
        finish(engine, op, Some(error));
        return;
    }
    let (stripe, lo, hi, row_bytes) = {
        let o = engine.ops.get(op);
        (o.stripe, o.lo, o.hi, o.row_bytes())
    };
    let map = engine.geo.stripe_map(stripe);
    let scratch = match engine.ops.get(op).scratch {
        Some(buf) => buf,
        None => {
            // A sync keeps room for the parity it computes, to compare with what it read.
            let extra = match engine.ops.get(op).purpose {
                Purpose::Sync(_) => parity_count,
                _ => 0,
            };
            let buf = engine.bufs.alloc((raid_disks + extra) * row_bytes);
            engine.ops.get_mut(op).scratch = Some(buf);
            buf
        }
    };
    let plan = choose_plan(engine, op, &map);
    let direct_copy = plan == Plan::Sync && direct_copy_only(engine, op);
    {
        let o = engine.ops.get_mut(op);
        o.missing = missing;
        o.direct_copy = direct_copy;
    }
    let mut reads: Vec<(MemberIdx, u32, u32)> = Vec::new();
    let o = engine.ops.get(op);
    match plan {
        Plan::Sync if direct_copy => {
            // Reading the member being replaced is cheaper than rebuilding its rows
            // from all the others; a read that fails plans the unit again without it.
            for m in (0..raid_disks).map(member_idx) {
                if engine.is_replacing(m) {
                    reads.push((m, lo, hi));
                }
            }
        }
        Plan::DegradedRead | Plan::Reconstruct | Plan::Sync => {
            for m in (0..raid_disks).map(member_idx) {
                if op_live(engine, o, m) {
                    reads.push((m, lo, hi));
                }
            }
        }
        Plan::ReadModifyWrite => {
            for s in &o.segs {
                reads.push((map.data_member(s.data_index), s.start, s.end));
            }
            reads.extend(parity_members(&map).map(|m| (m, lo, hi)));
        }
        Plan::ReconstructWrite => {
            for i in 0..map.data_disks() {
                let m = map.data_member(i);
                if !op_live(engine, o, m) {
                    continue;
                }
                let (a, b) = covered(&o.segs, i);
                for (x, y) in [(lo, a.max(lo)), (b.min(hi).max(lo), hi)] {
                    if x < y {
                        reads.push((m, x, y));
                    }
                }
            }
        }
    }
    let stats = &mut engine.stats;
    match plan {
        Plan::ReadModifyWrite => stats.rmw += 1,
        Plan::ReconstructWrite if reads.is_empty() => stats.full_stripe += 1,
        Plan::ReconstructWrite => stats.rcw += 1,
        Plan::Reconstruct | Plan::DegradedRead => stats.reconstruct += 1,
        Plan::Sync => {}
    }
    {
        let o = engine.ops.get_mut(op);
        o.plan = plan;
        o.phase = Phase::Reading;
        o.pending = u32::try_from(reads.len()).expect("few reads per stripe");
    }
    if reads.is_empty() {
        after_reads(engine, op);
        return;
    }
    for (m, a, b) in reads {
        let buf = BufSlice {
            buf: scratch,
            offset: m.index() * row_bytes + sectors_to_bytes(u64::from(a - lo)),
            len: sectors_to_bytes(u64::from(b - a)),
        };
        let sector = engine.geo.member_sector(stripe, a);
        engine.emit(
            m,
            IoKind::Read,
            sector,
            buf,
            IoTarget::Stripe { op, member: m },
        );
    }
}

/// Whether a sync unit is a recover with nothing to do but copy members being
/// replaced, each readable here, onto their replacements. Not when no member is
/// being replaced any more (a replacement that failed is dropped while its units are
/// in flight): such a unit may still have a member whose read failed, whose rows must
/// then be rebuilt from the others before they are written back.
fn direct_copy_only(engine: &Engine, op: usize) -> bool {
    let o = engine.ops.get(op);
    let replaced: Vec<MemberIdx> = (0..engine.geo.raid_disks())
        .map(MemberIdx)
        .filter(|&m| engine.is_replacing(m))
        .collect();
    o.purpose == Purpose::Sync(SyncKind::Recover)
        && !engine.member_states().contains(&MemberState::Rebuilding)
        && !replaced.is_empty()
        && replaced.iter().all(|&m| op_live(engine, o, m))
}

/// Whether the segment of `data_index` covers every row of lo..hi.
fn wholly_covered(segs: &[Seg], data_index: u16, lo: u32, hi: u32) -> bool {
    let (a, b) = covered(segs, data_index);
    a < b && a <= lo && b >= hi
}

/// The chunk range segment `data_index` covers, or an empty range at 0.
fn covered(segs: &[Seg], data_index: u16) -> (u32, u32) {
    segs.iter()
        .find(|s| s.data_index == data_index)
        .map_or((0, 0), |s| (s.start, s.end))
}

fn parity_members(map: &StripeMap) -> impl Iterator<Item = MemberIdx> {
    std::iter::once(map.p()).chain(map.q())
}

/// Chooses the write plan with the fewest member reads; ties go to reconstruct-write,
/// which does not trust old parity. Stripes a resync has not reached yet never trust
/// old parity (md does the same past `recovery_cp`).
fn choose_plan(engine: &Engine, op: usize, map: &StripeMap) -> Plan {
    let o = engine.ops.get(op);
    match o.purpose {
        Purpose::Read => return Plan::DegradedRead,
        Purpose::Sync(_) => return Plan::Sync,
        Purpose::Write => {}
    }
    let (lo, hi) = (o.lo, o.hi);
    // Pieces of lo..hi a data member's segment leaves uncovered: before it, after it.
    let pieces = |i: u16| {
        let (a, b) = covered(&o.segs, i);
        if a == b {
            1
        } else {
            usize::from(a > lo) + usize::from(b < hi)
        }
    };
    let raid_disks = engine.geo.raid_disks();
    let degraded = (0..raid_disks).any(|m| !op_live(engine, o, MemberIdx(m)));
    if !degraded {
        let rmw_reads = o.segs.len() + usize::from(engine.geo.level().parity_count());
        let rcw_reads: usize = (0..map.data_disks()).map(pieces).sum();
        let trust_parity = !crate::sync::awaiting_resync(engine, o.stripe);
        // The log entry needs every row of such a member, which only reconstruct-write
        // reads.
        let log_rows = (0..map.data_disks()).any(|i| {
            log_keeps_rows(engine, o, map.data_member(i)) || carries_earlier_write(engine, o, i)
        });
        return if rcw_reads <= rmw_reads || !trust_parity || log_rows {
            Plan::ReconstructWrite
        } else {
            Plan::ReadModifyWrite
        };
    }
    // Reconstruct-write never needs a missing member's old rows when every missing data
    // member is wholly overwritten over lo..hi.
    let needs_missing_rows = (0..map.data_disks())
        .any(|i| !op_live(engine, o, map.data_member(i)) && !wholly_covered(&o.segs, i, lo, hi));
    if needs_missing_rows {
        Plan::Reconstruct
    } else {
        Plan::ReconstructWrite
    }
}

pub(crate) fn on_completion(
    engine: &mut Engine,
    op: usize,
    member: MemberIdx,
    result: Result<(), IoFailed>,
) {
    let phase = engine.ops.get(op).phase;
    if phase == Phase::Reading && engine.completion_is_stale() {
        // See `Engine::completion_is_stale`: planned again, around the newcomer.
        engine.ops.get_mut(op).replan = true;
    } else if let Err(failure) = result {
        match phase {
            Phase::Reading => {
                engine.read_failed(member, failure);
                let o = engine.ops.get_mut(op);
                o.replan = true;
                if !o.bad.contains(&member) {
                    o.bad.push(member);
                }
            }
            // A member that refuses its write: settled once every write has answered.
            _ if failure == IoFailed::Medium && engine.pseudo_role(member).is_none() => {
                let o = engine.ops.get_mut(op);
                o.write_failed = true;
                if !o.refused.contains(&member) {
                    o.refused.push(member);
                }
            }
            _ => {
                engine.ops.get_mut(op).write_failed = true;
                engine.write_failed(member, failure);
            }
        }
    }
    let o = engine.ops.get_mut(op);
    o.pending -= 1;
    if o.pending > 0 {
        return;
    }
    match o.phase {
        Phase::Reading if o.replan => {
            o.replan = false;
            start(engine, op);
        }
        Phase::Reading => after_reads(engine, op),
        Phase::LogWait | Phase::LogQueued | Phase::Logging => {
            unreachable!("a logging op has no I/O of its own in flight")
        }
        Phase::Writing => writes_answered(engine, op),
        Phase::Queued => unreachable!("a queued op has no I/O in flight"),
    }
}

/// Every write of the operation has answered (and any tried again in blocks): settle
/// the refusals and finish.
fn writes_answered(engine: &mut Engine, op: usize) {
    let o = engine.ops.get(op);
    if !o.refused.is_empty() && o.narrowed.is_none() && narrow(engine, op) {
        return;
    }
    settle(engine, op);
    report_corrections(engine, op);
    let o = engine.ops.get(op);
    let error = match o.purpose {
        Purpose::Write if o.unwritten => Some(unwritten(engine, o)),
        Purpose::Write => engine.lost_error(),
        Purpose::Read | Purpose::Sync(_) => None,
    };
    finish(engine, op, error);
}

/// Members refused their writes: each write of theirs longer than a block is tried
/// again block by block, so that only the blocks refused again are listed (as a
/// mirror's, see `mirror::narrow`). Returns whether retries are in flight.
fn narrow(engine: &mut Engine, op: usize) -> bool {
    let o = engine.ops.get(op);
    let mut retries = Vec::new();
    for &m in &o.refused {
        if !engine.is_present(m) || engine.bad_block_log_capacity(engine.slot_of(m)) == 0 {
            continue;
        }
        let written = o
            .written
            .iter()
            .filter(|w| w.0 == m)
            .map(|&(_, at, buf)| (at, buf));
        if let Some(blocks) = crate::badblocks::retry_blocks(written) {
            retries.push((m, blocks));
        }
    }
    if retries.is_empty() {
        return false;
    }
    let o = engine.ops.get_mut(op);
    o.narrowed = Some(Narrowed {
        tried: retries.iter().map(|(m, _)| *m).collect(),
        refused_again: Vec::new(),
    });
    let blocks: usize = retries.iter().map(|(_, b)| b.len()).sum();
    o.pending = u32::try_from(blocks).expect("a stripe's rows in blocks");
    for (member, blocks) in retries {
        crate::badblocks::send_retries(engine, member, blocks, |sector, sectors| {
            IoTarget::StripeRetry {
                op,
                member,
                sector,
                sectors,
            }
        });
    }
    true
}

/// A block of a refused write, tried again (see `narrow`), answered.
pub(crate) fn on_retry(
    engine: &mut Engine,
    op: usize,
    member: MemberIdx,
    sector: u64,
    sectors: u64,
    result: Result<(), IoFailed>,
) {
    match result {
        Ok(()) => {}
        Err(IoFailed::Medium) => {
            if let Some(narrowed) = &mut engine.ops.get_mut(op).narrowed {
                narrowed
                    .refused_again
                    .push((member, sector..sector + sectors));
            }
        }
        Err(failure) => engine.write_failed(member, failure),
    }
    let o = engine.ops.get_mut(op);
    o.pending -= 1;
    if o.pending == 0 {
        writes_answered(engine, op);
    }
}

/// Every write of the operation has answered; members refused theirs. Each goes on
/// with what it refused in its bad block log, where the log has room (md's raid5
/// does the same): its rows there are rebuilt from the others when read, as the
/// parity just written says them. Without room it is failed, as before logs. Where
/// that leaves a refusing data member's rows beyond the redundancy (a degraded
/// array), a client write fails (`Unwritable`) — its rows, and the rows they share a
/// stripe with on the missing member, are lost, loudly, and the array goes on.
fn settle(engine: &mut Engine, op: usize) {
    let o = engine.ops.get(op);
    if o.refused.is_empty() {
        return;
    }
    let (stripe, lo, hi) = (o.stripe, o.lo, o.hi);
    let written: Vec<(MemberIdx, std::ops::Range<u64>)> = o
        .written
        .iter()
        .map(|&(m, at, buf)| (m, at..at + buf.len as u64 / xraid_layout::SECTOR_BYTES))
        .collect();
    // What each member refused: the blocks it refused again where it was tried again
    // (none: it took them all), else the whole of its writes.
    let mut refused: Vec<(MemberIdx, Vec<std::ops::Range<u64>>)> = Vec::new();
    for &member in &o.refused {
        let ranges: Vec<std::ops::Range<u64>> = match &o.narrowed {
            Some(n) if n.tried.contains(&member) => n
                .refused_again
                .iter()
                .filter(|(m, _)| *m == member)
                .map(|(_, r)| r.clone())
                .collect(),
            _ => written
                .iter()
                .filter(|(m, _)| *m == member)
                .map(|(_, r)| r.clone())
                .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
                .into_iter()
                .collect(),
        };
        if !ranges.is_empty() {
            refused.push((member, ranges));
        }
    }
    let map = engine.geo.stripe_map(stripe);
    // Members whose refusal is in no log (without room they are failed, if they can
    // be): they hold none of the operation's rows.
    let mut unrecorded = Vec::new();
    for (member, ranges) in &refused {
        let recorded = ranges
            .iter()
            .all(|range| crate::badblocks::record_refusal(engine, *member, range.clone()));
        if !recorded {
            engine.write_failed(*member, IoFailed::Medium);
            unrecorded.push(*member);
        }
    }
    // Band by band (the refusals just listed cut it too, see `listing_cuts`): where
    // the write's data is held by no member of its own (missing, listed, refused) and
    // the band is past the redundancy, only parity held it, and that is gone too: the
    // write fails. Rows each band's redundancy covers are held, wherever the other
    // bands' refusals are.
    let parity_count = usize::from(engine.geo.level().parity_count());
    // Parity a later unclean open may list (its stripe-log ring was lost, and the
    // resync owed has not completed: that open's walk cannot know a write made it
    // fresh) holds nothing to count on either: a refused write whose rows only it
    // would hold fails now, rather than be acknowledged and lost at that open.
    let parity = [Some(map.p()), map.q()];
    let holds_nothing = |engine: &Engine, m: MemberIdx, rows: std::ops::Range<u64>| {
        !engine.is_present(m)
            || !engine.in_sync(m, stripe)
            || unrecorded.contains(&m)
            // Rebuilt here in memory only: a cut resumes the recover from what was
            // recorded, and its rows are rebuilt again — from parity this refusal
            // may have left alone as the only holder.
            || crate::sync::rebuilt_unrecorded(engine, m, stripe)
            || crate::badblocks::is_known_bad(engine, m, rows)
            || (parity.contains(&Some(m)) && crate::ppl::listed_at_a_later_open(engine, m))
    };
    let cuts = listing_cuts(engine, stripe, lo, hi);
    let o = engine.ops.get(op);
    let lost = bands(lo, hi, &cuts).any(|(a, b)| {
        let rows = engine.geo.member_sector(stripe, a)..engine.geo.member_sector(stripe, b);
        let unavailable = (0..map.data_disks())
            .map(|i| map.data_member(i))
            .chain([Some(map.p()), map.q()].into_iter().flatten())
            .filter(|&m| holds_nothing(engine, m, rows.clone()))
            .count();
        let only_in_parity = o
            .segs
            .iter()
            .filter(|seg| seg.clipped(a, b).is_some())
            .any(|seg| holds_nothing(engine, map.data_member(seg.data_index), rows.clone()));
        only_in_parity && unavailable > parity_count
    });
    if lost {
        engine.ops.get_mut(op).unwritten = true;
    }
}

/// The error of a client write a refusal left beyond the redundancy: its array
/// sectors in this stripe.
fn unwritten(engine: &Engine, o: &StripeOp) -> EngineError {
    let chunk = u64::from(engine.geo.chunk_sectors());
    let stripe_start = o.stripe * chunk * u64::from(engine.geo.data_disks());
    let at = |index: u16, row: u32| stripe_start + u64::from(index) * chunk + u64::from(row);
    let sector = o
        .segs
        .iter()
        .map(|s| at(s.data_index, s.start))
        .min()
        .unwrap_or(stripe_start);
    let end = o
        .segs
        .iter()
        .map(|s| at(s.data_index, s.end))
        .max()
        .unwrap_or(sector);
    EngineError::Unwritable { sector, end }
}

/// The rewrites of members whose reads failed are done: count those that took.
fn report_corrections(engine: &mut Engine, op: usize) {
    let o = engine.ops.get(op);
    let (stripe, lo, hi) = (o.stripe, o.lo, o.hi);
    let fixed: Vec<MemberIdx> = o
        .failed_reads()
        .filter(|&m| engine.config.repair_writes && engine.in_sync(m, stripe))
        .collect();
    for member in fixed {
        engine.stats.read_errors_corrected += 1;
        let sector = engine.geo.member_sector(stripe, lo);
        engine.push_event(Event::ReadErrorCorrected {
            member,
            sector,
            sectors: u64::from(hi - lo),
        });
    }
}

/// All reads are in: compute, then write (or, for a degraded read, copy out).
fn after_reads(engine: &mut Engine, op: usize) {
    let o = engine.ops.get(op);
    let (plan, stripe, lo) = (o.plan, o.stripe, o.lo);
    let scratch = o.scratch.expect("scratch is allocated at start");
    let segs = o.segs.clone();
    let row_bytes = o.row_bytes();
    let map = engine.geo.stripe_map(stripe);
    let mut full_rows: Vec<MemberIdx> = Vec::new();
    match plan {
        Plan::DegradedRead => {
            let client = engine.request_buf(client_req(o));
            rebuild_missing(engine, op, &map, scratch, row_bytes);
            for s in &segs {
                let m = map.data_member(s.data_index);
                let (from, to) = seg_slices(s, m, lo, row_bytes, scratch, client);
                let (dst, src) = engine.bufs.pair_mut(to, from);
                dst.copy_from_slice(src);
            }
        }
        Plan::Sync => {
            let Purpose::Sync(kind) = o.purpose else {
                unreachable!("sync plans belong to sync ops")
            };
            // Every data member read fine (a parity member may be missing), or a RAID-6
            // lacks one data member and has both parities (its rows come from P): the
            // parity present can be compared with what the data says, and put right,
            // as md checks Q then. A parity in doubt is among the missing here.
            let one_data_row_from_p = map.q().is_some()
                && o.missing.len() == 1
                && !parity_members(&map).any(|p| o.missing.contains(&p));
            let complete = one_data_row_from_p
                || o.missing
                    .iter()
                    .all(|&m| parity_members(&map).any(|p| p == m));
            if !o.direct_copy {
                rebuild_missing(engine, op, &map, scratch, row_bytes);
            }
            if kind == SyncKind::Recover {
                full_rows.extend(
                    (0..engine.geo.raid_disks())
                        .map(MemberIdx)
                        .filter(|&m| engine.member_states()[m.index()] == MemberState::Rebuilding),
                );
            } else if complete {
                // Every member read fine: compare parity with what the data says.
                let mismatch = parity_mismatch(engine, &map, scratch, row_bytes);
                engine.ops.get_mut(op).mismatch = mismatch;
                if mismatch && kind != SyncKind::Check {
                    let o = engine.ops.get(op);
                    full_rows.extend(parity_members(&map).filter(|m| !o.missing.contains(m)));
                }
            }
        }
        Plan::ReadModifyWrite => {
            let client = engine.request_buf(client_req(o));
            read_modify_write(engine, &map, &segs, lo, scratch, client)
        }
        Plan::ReconstructWrite | Plan::Reconstruct => {
            let client = engine.request_buf(client_req(o));
            if plan == Plan::Reconstruct {
                rebuild_missing(engine, op, &map, scratch, row_bytes);
            }
            for s in &segs {
                let m = map.data_member(s.data_index);
                let (into, from) = seg_slices(s, m, lo, row_bytes, scratch, client);
                let (dst, src) = engine.bufs.pair_mut(into, from);
                dst.copy_from_slice(src);
            }
            generate_parity(engine, &map, scratch, row_bytes);
        }
    }
    let o = engine.ops.get(op);
    let mut writes: Vec<(MemberIdx, u64, BufSlice)> = Vec::new();
    if matches!(
        plan,
        Plan::ReadModifyWrite | Plan::ReconstructWrite | Plan::Reconstruct
    ) {
        let client = engine.request_buf(client_req(o));
        for s in &segs {
            let m = map.data_member(s.data_index);
            if op_live(engine, o, m) {
                let (_, from) = seg_slices(s, m, lo, row_bytes, scratch, client);
                writes.push((m, engine.geo.member_sector(stripe, s.start), from));
            }
        }
        full_rows.extend(parity_members(&map).filter(|&m| op_live(engine, o, m)));
    }
    // Members whose reads failed get their rebuilt (or newly computed) rows back, and
    // so do members whose bad block log lists rows here (the plan rebuilt them).
    let rebuilt_here = plan != Plan::ReadModifyWrite && !o.direct_copy;
    let listed: Vec<MemberIdx> = (0..engine.geo.raid_disks())
        .map(MemberIdx)
        .filter(|&m| rebuilt_here && engine.is_present(m) && listed_here(engine, o, m))
        .collect();
    for m in o.bad.iter().copied().chain(listed) {
        // Parity planned around is rewritten by a write whatever the configuration
        // (its plan counts the rows as made fresh: `sync::parity_made_fresh`), never
        // by a check, which changes nothing that read fine, and otherwise as a failed
        // read's rows are (not on an array opened to read only).
        let rewrite = match o.purpose {
            Purpose::Write if o.planned_around.contains(&m) => true,
            Purpose::Sync(SyncKind::Check) if o.planned_around.contains(&m) => false,
            _ => engine.config.repair_writes,
        };
        if rewrite && engine.in_sync(m, stripe) && !full_rows.contains(&m) {
            full_rows.push(m);
        }
    }
    for m in full_rows {
        let buf = BufSlice {
            buf: scratch,
            offset: m.index() * row_bytes,
            len: row_bytes,
        };
        writes.push((m, engine.geo.member_sector(stripe, lo), buf));
    }
    if plan == Plan::Sync && engine.ops.get(op).purpose == Purpose::Sync(SyncKind::Recover) {
        // Replacements get their role's rows: read from the member being replaced, or
        // rebuilt from the others where that read failed.
        for m in (0..engine.geo.raid_disks()).map(MemberIdx) {
            if let Some(pseudo) = engine.replacement_of(m) {
                let buf = BufSlice {
                    buf: scratch,
                    offset: m.index() * row_bytes,
                    len: row_bytes,
                };
                writes.push((pseudo, engine.geo.member_sector(stripe, lo), buf));
            }
        }
    }
    let logged = engine.ops.get(op).purpose == Purpose::Write
        && !writes.is_empty()
        && engine.log.is_some()
        && build_log_entry(engine, op, &map, scratch, row_bytes);
    if logged {
        engine.ops.get_mut(op).deferred = writes;
        retry_log(engine, op);
        return;
    }
    emit_writes(engine, op, writes);
}

fn emit_writes(engine: &mut Engine, op: usize, writes: Vec<(MemberIdx, u64, BufSlice)>) {
    // The array failed while this write read or logged: it fails whole, writing
    // nothing, rather than tear one more stripe (see `torn_by_the_loss`).
    if engine.ops.get(op).purpose == Purpose::Write {
        if let Some(error) = engine.lost_error() {
            finish(engine, op, Some(error));
            return;
        }
    }
    // A member may have failed while the log entry was written.
    let writes: Vec<_> = writes
        .into_iter()
        .filter(|(m, _, _)| engine.is_present(*m))
        .collect();
    let o = engine.ops.get_mut(op);
    o.phase = Phase::Writing;
    o.pending = u32::try_from(writes.len()).expect("few writes per stripe");
    if writes.is_empty() {
        let error = match o.purpose {
            Purpose::Write => engine.lost_error(),
            _ => None,
        };
        finish(engine, op, error);
        return;
    }
    let mut p_entries = parity_from_data(engine, op, &writes);
    for (m, sector, buf) in writes {
        if p_entries.as_ref().is_some_and(|(p, _)| *p == m) {
            if let Some((_, derive)) = p_entries.take() {
                derive.end(engine, buf);
            }
        }
        engine.ops.get_mut(op).written.push((m, sector, buf));
        engine.emit(
            m,
            IoKind::Write,
            sector,
            buf,
            IoTarget::Stripe { op, member: m },
        );
    }
    crate::integrity::forget_parity_entries(engine);
}

/// In integrity mode, begins P's entries for client write `op`'s `writes` from its
/// data rows' entries (see `integrity::ParityFromData`): a read-modify-write or
/// reconstruct-write with every member there, whose data writes all go out before
/// P's. Returns P's role with them.
fn parity_from_data(
    engine: &Engine,
    op: usize,
    writes: &[(MemberIdx, u64, BufSlice)],
) -> Option<(MemberIdx, crate::integrity::ParityFromData)> {
    use crate::integrity::{ParityFromData, ParityPlan};
    if !engine.integrity_on() {
        return None;
    }
    let o = engine.ops.get(op);
    let plan = match o.plan {
        Plan::ReadModifyWrite => ParityPlan::ReadModifyWrite,
        Plan::ReconstructWrite => ParityPlan::ReconstructWrite,
        _ => return None,
    };
    let map = engine.geo.stripe_map(o.stripe);
    let raid_disks = engine.geo.raid_disks();
    let all_there = o.bad.is_empty()
        && (0..raid_disks)
            .map(MemberIdx)
            .all(|m| op_live(engine, o, m) && engine.is_present(m));
    let p = map.p();
    let p_at = writes.iter().position(|(m, _, _)| *m == p)?;
    let data_members: Vec<MemberIdx> = (0..map.data_disks()).map(|i| map.data_member(i)).collect();
    let data_first = !writes[p_at + 1..]
        .iter()
        .any(|(m, _, _)| data_members.contains(m));
    if !all_there || !data_first {
        return None;
    }
    let at = |row: u32| engine.geo.member_sector(o.stripe, row);
    let data = match plan {
        ParityPlan::ReadModifyWrite => o
            .segs
            .iter()
            .map(|s| (map.data_member(s.data_index), at(s.start), at(s.end)))
            .collect(),
        ParityPlan::ReconstructWrite => data_members
            .iter()
            .map(|&m| (m, at(o.lo), at(o.hi)))
            .collect(),
    };
    let derive = ParityFromData::begin(engine, plan, p, (at(o.lo), at(o.hi)), data)?;
    Some((p, derive))
}

/// Builds the stripe-log entry of a client write whose new rows are all in the scratch
/// (see `ppl`), to be written to P's ring (Q's if P is missing). Returns false when no
/// parity member is in sync (with no parity to disagree, there is no hole), and when
/// the entry could never fit the ring (a ring configured too small).
fn build_log_entry(
    engine: &mut Engine,
    op: usize,
    map: &StripeMap,
    scratch: BufId,
    row_bytes: usize,
) -> bool {
    let o = engine.ops.get(op);
    // A parity member whose read failed in this operation still takes the write (its
    // rows are rewritten), so its ring takes the entry too.
    let Some(log_member) = parity_members(map).find(|&m| engine.in_sync(m, o.stripe)) else {
        return false;
    };
    let (stripe, lo, hi) = (o.stripe, o.lo, o.hi);
    let row_slice = |i: u16| BufSlice {
        buf: scratch,
        offset: map.data_member(i).index() * row_bytes,
        len: row_bytes,
    };
    // Data chunks whose members do not take this write: their rows after it, from the
    // scratch (rebuilt, with the write's new data copied in).
    let missing: Vec<(u16, BufSlice)> = (0..map.data_disks())
        .filter(|&i| {
            let m = map.data_member(i);
            (!op_live(engine, o, m) && !o.bad.contains(&m)) || log_keeps_rows(engine, o, m)
        })
        .map(|i| (i, row_slice(i)))
        .collect();
    let written: Vec<(u16, u32, u32)> = o
        .segs
        .iter()
        .map(|s| (s.data_index, s.start, s.end))
        .collect();
    // The partial parity covers the chunks the write leaves alone (in some rows) and
    // the entry does not carry. Where an earlier write, not yet durable, covered such
    // a chunk in these rows, the entry carries that chunk's rows too (the plan read
    // them: reconstruct-write) while it stays within the ring's bound for one entry;
    // beyond it, the entry waits until those writes are durable instead. An entry
    // that would not fit the ring even so goes without a partial parity.
    let alone = |i: u16| !wholly_covered(&o.segs, i, lo, hi);
    let is_missing = |i: u16| missing.iter().any(|&(k, _)| k == i);
    let left_alone: Vec<u16> = (0..map.data_disks())
        .filter(|&i| alone(i) && !is_missing(i))
        .collect();
    let earlier: Vec<u16> = left_alone
        .iter()
        .copied()
        .filter(|&i| carries_earlier_write(engine, o, i))
        .collect();
    let bound = crate::ppl::log_entry_max_sectors(
        map.data_disks(),
        engine.geo.chunk_sectors(),
        engine.geo.level().parity_count(),
    );
    // On a whole RAID-6 (both parity members in sync, every data member taking the
    // write) the partial parity comes with a partial Q, so that two members dying with
    // the power can both be worked out.
    let whole = parity_members(map).all(|m| engine.in_sync(m, stripe))
        && (0..map.data_disks())
            .map(|i| map.data_member(i))
            .all(|m| op_live(engine, o, m) || o.bad.contains(&m));
    let syndromes = if map.q().is_some() && whole { 2 } else { 1 };
    // Carrying every chunk left alone leaves nothing for a partial parity to cover.
    let rest_needs_parity = left_alone.len() > earlier.len();
    let with_earlier =
        missing.len() + earlier.len() + if rest_needs_parity { syndromes } else { 0 };
    let records = with_earlier + written.len();
    let (carried, log_after, partial) = if left_alone.is_empty() {
        (missing.clone(), 0, false)
    } else if o.plan != Plan::ReadModifyWrite
        && crate::ppl::entry_sectors(with_earlier, records, lo, hi) <= bound
        && crate::ppl::fits(engine, with_earlier, records, lo, hi)
    {
        let mut carried = missing.clone();
        carried.extend(earlier.iter().map(|&i| (i, row_slice(i))));
        (carried, 0, rest_needs_parity)
    } else if crate::ppl::fits(
        engine,
        missing.len() + syndromes,
        missing.len() + syndromes + written.len(),
        lo,
        hi,
    ) {
        let after = earlier
            .iter()
            .map(|&i| crate::ppl::latest_write_since_durable(engine, stripe, i, lo, hi))
            .max()
            .unwrap_or(0);
        (missing.clone(), after, true)
    } else {
        (missing.clone(), 0, false)
    };
    let (partial_parity, partial_q) = if partial {
        let (pp, pq) = partial_syndromes(
            engine,
            op,
            map,
            scratch,
            row_bytes,
            &carried,
            syndromes == 2,
        );
        (Some(pp), pq)
    } else {
        (None, None)
    };
    let free_syndromes = |engine: &mut Engine| {
        for s in [partial_parity, partial_q].into_iter().flatten() {
            engine.bufs.free(s.buf);
        }
    };
    let with_parity =
        carried.len() + usize::from(partial_parity.is_some()) + usize::from(partial_q.is_some());
    if !crate::ppl::fits(engine, with_parity, with_parity + written.len(), lo, hi) {
        free_syndromes(engine);
        return false;
    }
    // On RAID-6 every entry goes to both parity members' rings: carried rows are all
    // there is of a member that cannot take the write, either parity member may die
    // with the power, and so may a data member with it, which the other parity
    // member's ring then answers for — and the replay must see every later write of
    // a stripe (a full-stripe write's entry carries nothing, yet an earlier entry's
    // partial parity no longer holds once it landed; seed 1484341991224288798).
    let mirror = map
        .q()
        .filter(|&q| q != log_member && engine.in_sync(q, stripe));
    let o = engine.ops.get_mut(op);
    o.log_after = log_after;
    o.log_rings = std::iter::once(log_member).chain(mirror).collect();
    o.log_rings_todo = o.log_rings.clone();
    let parts = crate::ppl::EntryParts {
        rows: &carried,
        written: &written,
        partial_parity,
        partial_q,
    };
    let (buf, sectors) = crate::ppl::build(engine, stripe, lo, hi, &parts);
    free_syndromes(engine);
    engine.ops.get_mut(op).log = Some((0, log_member, buf, sectors));
    true
}

/// The partial parity of a write's rows lo..hi, in a buffer of its own: row by row, the
/// XOR of the data chunks the write does not cover there and whose rows the entry
/// does not carry (`carried`) — and with `with_q` (RAID-6) the same chunks' partial Q
/// in another. After a power cut that takes one such chunk's member with it (two,
/// with the partial Q), that chunk's rows are worked out from these and the others'
/// rows, whatever of the write landed (see `ppl`).
fn partial_syndromes(
    engine: &mut Engine,
    op: usize,
    map: &StripeMap,
    scratch: BufId,
    row_bytes: usize,
    carried: &[(u16, BufSlice)],
    with_q: bool,
) -> (BufSlice, Option<BufSlice>) {
    let o = engine.ops.get(op);
    let (lo, hi, plan) = (o.lo, o.hi, o.plan);
    let segs = o.segs.clone();
    let client = engine.request_buf(client_req(o));
    let alloc = |engine: &mut Engine| BufSlice {
        buf: engine.bufs.alloc(row_bytes),
        offset: 0,
        len: row_bytes,
    };
    let pp = alloc(engine);
    let pq = with_q.then(|| alloc(engine));
    let q_member = map.q().filter(|_| with_q);
    let rows_at = |buf: BufId, offset: usize, from: u32, to: u32| BufSlice {
        buf,
        offset: offset + sectors_to_bytes(u64::from(from - lo)),
        len: sectors_to_bytes(u64::from(to - from)),
    };
    // Folds rows from..to of data chunk `i`, found at `src`, into both syndromes.
    let fold = |engine: &mut Engine, i: u16, src: BufSlice, from: u32, to: u32| {
        let dst = rows_at(pp.buf, 0, from, to);
        let (dst, s) = engine.bufs.pair_mut(dst, src);
        xraid_parity::xor_into(dst, s);
        if let Some(pq) = pq {
            let dst = rows_at(pq.buf, 0, from, to);
            let coef = xraid_parity::gf_exp2(map.syndrome_slot(i));
            let (dst, s) = engine.bufs.pair_mut(dst, src);
            xraid_parity::mul_xor_into(dst, s, coef);
        }
    };
    if plan == Plan::ReadModifyWrite {
        // Only the written rows and parity were read; the new parity is the syndrome
        // of every data chunk, so taking the new rows out of it leaves the rest.
        // (Nothing is carried: carried rows need the other plans.)
        let parity_rows = |m: MemberIdx| BufSlice {
            buf: scratch,
            offset: m.index() * row_bytes,
            len: row_bytes,
        };
        crate::ppl::copy(engine, pp, parity_rows(map.p()));
        if let (Some(pq), Some(q)) = (pq, q_member) {
            crate::ppl::copy(engine, pq, parity_rows(q));
        }
        for s in &segs {
            let new = BufSlice {
                buf: client,
                offset: s.buf_off,
                len: sectors_to_bytes(u64::from(s.end - s.start)),
            };
            fold(engine, s.data_index, new, s.start, s.end);
        }
        return (pp, pq);
    }
    // The scratch holds every data chunk's rows after the write.
    for s in [Some(pp), pq].into_iter().flatten() {
        engine.bufs.get_mut(s.buf).fill(0);
    }
    for i in 0..map.data_disks() {
        if carried.iter().any(|&(k, _)| k == i) {
            continue;
        }
        let offset = map.data_member(i).index() * row_bytes;
        for (from, to) in crate::ppl::rows_outside(&[covered(&segs, i)], lo, hi) {
            fold(engine, i, rows_at(scratch, offset, from, to), from, to);
        }
    }
    (pp, pq)
}

/// Sends the operation's log entry to its ring's next batch (see `ppl`): its parity
/// member's, or the other parity member's where that one has failed; a second ring
/// (RAID-6) follows once the first has given the entry room ([`log_second_ring`]).
/// When every batch is done the operation goes on.
pub(crate) fn retry_log(engine: &mut Engine, op: usize) {
    engine.ops.get_mut(op).log_waiting = false;
    let after = engine.ops.get(op).log_after;
    if !crate::ppl::durable_up_to(engine, after) {
        // Its partial parity counts on earlier writes: a checkpoint makes them durable.
        log_wait(engine, op, None);
        crate::ppl::start_checkpoint(engine);
        return;
    }
    engine.ops.get_mut(op).phase = Phase::LogQueued;
    next_ring(engine, op);
}

/// Enqueues the entry on the next ring it has yet to be on whose member is present (a
/// ring whose member failed is dropped: its parity is gone with it); with none left,
/// the operation goes on once its batches are done.
fn next_ring(engine: &mut Engine, op: usize) {
    loop {
        let o = engine.ops.get_mut(op);
        if o.log_rings_todo.is_empty() {
            if o.log_batches_out == 0 && !o.log_waiting {
                log_done_now(engine, op);
            }
            return;
        }
        let ring = o.log_rings_todo.remove(0);
        if engine.is_present(ring) {
            engine.ops.get_mut(op).log_batches_out += 1;
            crate::ppl::enqueue(engine, ring, op);
            return;
        }
    }
}

/// The entry has room on its first ring: a second one (RAID-6) takes it too, written
/// alongside. Called once the first ring's batch is set up.
pub(crate) fn log_second_ring(engine: &mut Engine, op: usize) {
    let o = engine.ops.get(op);
    if !o.log_rings_todo.is_empty() && !o.log_waiting {
        next_ring(engine, op);
    }
}

/// The operation's log entry: its buffer and sectors.
pub(crate) fn log_entry(engine: &Engine, op: usize) -> (BufId, u64) {
    let (_, _, buf, sectors) = engine.ops.get(op).log.expect("a logged write");
    (buf, sectors)
}

/// The operation's entry has room on a ring and `seq`, and is being written in a batch.
pub(crate) fn log_reserved(engine: &mut Engine, op: usize, seq: u64) {
    let o = engine.ops.get_mut(op);
    let log = o.log.as_mut().expect("a logged write");
    log.0 = seq;
    o.log_seqs.push(seq);
    if !o.log_waiting {
        o.phase = Phase::Logging;
    }
    let o = engine.ops.get(op);
    let stripe = o.stripe;
    let written: Vec<(u16, u32, u32)> = o
        .segs
        .iter()
        .map(|s| (s.data_index, s.start, s.end))
        .collect();
    crate::ppl::note_written(engine, stripe, seq, &written);
}

/// The operation's entry found no room on `ring` (or must wait for earlier writes to
/// be durable: `None`): it waits for a checkpoint. A seq it holds on its other ring
/// is given back first — finished, as a write that changed nothing in place (none of
/// its in-place writes has gone out) — and the entry goes to both rings again after
/// the checkpoint: a seq whose write has not finished holds back what a checkpoint
/// makes durable, and two writes each holding one ring's room while waiting for the
/// other's would wait for each other forever. (The entry left on that ring is replayed
/// only if power fails before the checkpoint, as a write none of which landed.)
pub(crate) fn log_wait(engine: &mut Engine, op: usize, ring: Option<MemberIdx>) {
    let o = engine.ops.get_mut(op);
    if let Some(ring) = ring {
        o.log_rings_todo.insert(0, ring);
        o.log_batches_out -= 1;
        if !o.log_seqs.is_empty() {
            o.log_rings_todo = o.log_rings.clone();
            let held = std::mem::take(&mut o.log_seqs);
            engine.stats.log_second_ring_retries += 1;
            for seq in held {
                crate::ppl::finished(engine, seq);
            }
        }
    }
    let o = engine.ops.get_mut(op);
    o.phase = Phase::LogWait;
    if !o.log_waiting {
        o.log_waiting = true;
        let log = engine.log.as_mut().expect("logging is on");
        log.waiters.push_back(op);
    }
}

/// One of the operation's batches is done: its entry is durable on that ring (or the
/// ring's member failed, and the parity it guards with it). Once every ring has it,
/// the in-place writes go; an entry whose first ring's member failed before it got
/// room there goes to the next.
pub(crate) fn log_done(engine: &mut Engine, op: usize) {
    let o = engine.ops.get_mut(op);
    o.log_batches_out -= 1;
    if o.log_waiting {
        return;
    }
    if o.log_seqs.is_empty() || o.log_batches_out == 0 {
        next_ring(engine, op);
    }
}

fn log_done_now(engine: &mut Engine, op: usize) {
    let writes = std::mem::take(&mut engine.ops.get_mut(op).deferred);
    emit_writes(engine, op, writes);
}

fn client_req(o: &StripeOp) -> usize {
    match o.owner {
        Owner::Client(req) => req,
        Owner::Sync => unreachable!("client plans belong to client ops"),
    }
}

/// Computes parity from the data rows into the spare rows after the members' and
/// compares it with the parity read; on a mismatch the computed parity replaces the
/// read one in the members' rows (for a repair to write).
fn parity_mismatch(engine: &mut Engine, map: &StripeMap, scratch: BufId, row_bytes: usize) -> bool {
    let raid_disks = usize::from(engine.geo.raid_disks());
    let order = syndrome_order(map);
    let data_count = usize::from(map.data_disks());
    let all = engine.bufs.get_mut(scratch);
    let (members, spare) = all.split_at_mut(raid_disks * row_bytes);
    let mut rows = member_rows(members, row_bytes);
    let mut spare_rows = spare.chunks_exact_mut(row_bytes);
    let p_new = spare_rows.next().expect("room for P");
    let q_new = map.q().map(|_| spare_rows.next().expect("room for Q"));
    let p_old = rows[map.p().index()].take().expect("P row");
    let q_old = map.q().map(|q| rows[q.index()].take().expect("Q row"));
    let data: Vec<&[u8]> = order[..data_count]
        .iter()
        .map(|m| &*rows[m.index()].take().expect("data row"))
        .collect();
    match (q_new, q_old) {
        (Some(q_new), Some(q_old)) => {
            xraid_parity::pq_gen(&data, p_new, q_new);
            let differs = *p_new != *p_old || *q_new != *q_old;
            p_old.copy_from_slice(p_new);
            q_old.copy_from_slice(q_new);
            differs
        }
        _ => {
            xraid_parity::xor_gen(&data, p_new);
            let differs = *p_new != *p_old;
            p_old.copy_from_slice(p_new);
            differs
        }
    }
}

/// A segment's rows in the scratch buffer and its bytes in the client buffer.
fn seg_slices(
    s: &Seg,
    member: MemberIdx,
    lo: u32,
    row_bytes: usize,
    scratch: BufId,
    client: BufId,
) -> (BufSlice, BufSlice) {
    let len = sectors_to_bytes(u64::from(s.end - s.start));
    let rows = BufSlice {
        buf: scratch,
        offset: member.index() * row_bytes + sectors_to_bytes(u64::from(s.start - lo)),
        len,
    };
    let bytes = BufSlice {
        buf: client,
        offset: s.buf_off,
        len,
    };
    (rows, bytes)
}

/// The scratch rows of every member, indexed by member.
fn member_rows(scratch: &mut [u8], row_bytes: usize) -> Vec<Option<&mut [u8]>> {
    scratch.chunks_exact_mut(row_bytes).map(Some).collect()
}

/// Members in syndrome order: data by syndrome slot, then P, then Q.
fn syndrome_order(map: &StripeMap) -> Vec<MemberIdx> {
    let data_disks = usize::from(map.data_disks());
    let mut order = vec![MemberIdx(0); data_disks];
    for i in 0..map.data_disks() {
        order[map.syndrome_slot(i)] = map.data_member(i);
    }
    order.extend(parity_members(map));
    order
}

/// Rebuilds the rows of every member the operation could not read from the others.
fn rebuild_missing(
    engine: &mut Engine,
    op: usize,
    map: &StripeMap,
    scratch: BufId,
    row_bytes: usize,
) {
    let order = syndrome_order(map);
    let o = engine.ops.get(op);
    let missing: Vec<usize> = (0..order.len())
        .filter(|&k| o.missing.contains(&order[k]))
        .collect();
    if missing.is_empty() {
        return;
    }
    let has_q = map.q().is_some();
    let data_count = usize::from(map.data_disks());
    let mut rows = member_rows(engine.bufs.get_mut(scratch), row_bytes);
    let mut blocks: Vec<&mut [u8]> = order
        .iter()
        .map(|m| rows[m.index()].take().expect("each member once"))
        .collect();
    xraid_parity::recover(&mut blocks, data_count, has_q, &missing)
        .expect("missing count was checked against the level's redundancy");
}

/// Computes P (and Q) rows from the data rows in scratch.
fn generate_parity(engine: &mut Engine, map: &StripeMap, scratch: BufId, row_bytes: usize) {
    let order = syndrome_order(map);
    let data_count = usize::from(map.data_disks());
    let mut rows = member_rows(engine.bufs.get_mut(scratch), row_bytes);
    let p = rows[map.p().index()].take().expect("P row");
    let q = map.q().map(|q| rows[q.index()].take().expect("Q row"));
    let data: Vec<&[u8]> = order[..data_count]
        .iter()
        .map(|m| &*rows[m.index()].take().expect("data row"))
        .collect();
    match q {
        Some(q) => xraid_parity::pq_gen(&data, p, q),
        None => xraid_parity::xor_gen(&data, p),
    }
}

/// Folds each segment's change (old ^ new) into the P (and Q) rows read from disk.
fn read_modify_write(
    engine: &mut Engine,
    map: &StripeMap,
    segs: &[Seg],
    lo: u32,
    scratch: BufId,
    client: BufId,
) {
    let row_bytes = engine.bufs.len(scratch) / usize::from(engine.geo.raid_disks());
    let scratch_all = BufSlice {
        buf: scratch,
        offset: 0,
        len: engine.bufs.len(scratch),
    };
    for s in segs {
        let m = map.data_member(s.data_index);
        let len = sectors_to_bytes(u64::from(s.end - s.start));
        let at = sectors_to_bytes(u64::from(s.start - lo));
        let new = BufSlice {
            buf: client,
            offset: s.buf_off,
            len,
        };
        let (rows_all, new) = engine.bufs.pair_mut(scratch_all, new);
        let mut rows = member_rows(rows_all, row_bytes);
        let delta = &mut rows[m.index()].take().expect("data row")[at..at + len];
        xraid_parity::xor_into(delta, new);
        let p = rows[map.p().index()].take().expect("P row");
        xraid_parity::xor_into(&mut p[at..at + len], delta);
        if let Some(q) = map.q() {
            let q = rows[q.index()].take().expect("Q row");
            let coef = xraid_parity::gf_exp2(map.syndrome_slot(s.data_index));
            xraid_parity::mul_xor_into(&mut q[at..at + len], delta, coef);
        }
    }
}

/// Ends an operation: frees its scratch, reports to its owner and hands the stripe
/// to the next in line.
fn finish(engine: &mut Engine, op: usize, error: Option<EngineError>) {
    let o = engine.ops.get(op);
    if o.purpose == Purpose::Write
        && o.write_failed
        && o.phase == Phase::Writing
        && engine.lost_error().is_some()
    {
        torn_by_the_loss(engine, op);
    }
    let o = engine.ops.get(op);
    let fresh = o.purpose == Purpose::Write
        && error.is_none()
        && matches!(o.plan, Plan::ReconstructWrite | Plan::Reconstruct)
        && o.phase == Phase::Writing;
    if fresh {
        let (stripe, lo, hi) = (o.stripe, o.lo, o.hi);
        crate::sync::parity_made_fresh(engine, stripe, lo, hi);
    }
    let o = engine.ops.get(op);
    if o.purpose == Purpose::Sync(SyncKind::Recover)
        && error.is_none()
        && o.phase == Phase::Writing
        && !o.direct_copy
    {
        rows_recomputed(engine, op);
    }
    let o = engine.ops.get(op);
    let written = o.purpose == Purpose::Write && error.is_none() && o.phase == Phase::Writing;
    if written && crate::unknown::any(engine) {
        // The write's rows hold its data now (parity too, on a missing member).
        let round = engine.log.as_ref().map_or(0, |l| l.flush_round);
        let rows = data_rows(engine, o);
        let stripe = o.stripe;
        for (m, a, b) in rows {
            crate::unknown::written_over(engine, stripe, m, a, b, round);
        }
    }
    let o = engine.ops.remove(op);
    if let Some(buf) = o.scratch {
        engine.bufs.free(buf);
    }
    if let Some((_, _, buf, _)) = o.log {
        engine.bufs.free(buf);
        for &seq in &o.log_seqs {
            crate::ppl::finished(engine, seq);
        }
    }
    if o.durable_soon {
        let seq = o.log.map_or(0, |(seq, _, _, _)| seq);
        crate::ppl::departure_write_done(engine, seq);
    }
    match o.owner {
        Owner::Client(req) => engine.request_step_done(req, error),
        Owner::Sync => {
            let outcome = UnitOutcome {
                mismatch: o.mismatch,
                unrecoverable: error.is_some(),
                new_loss: error.is_some() && !o.listed_loss,
            };
            crate::sync::unit_done(engine, o.stripe, outcome);
        }
    }
    engine.unlock(o.stripe, Holder::Stripe(op));
}

/// Recover operation `op` wrote its rows: members it rebuilt rather than read
/// (missing from its plan, being rebuilt still) hold rows computed from the others
/// now (see `rebuilt`).
fn rows_recomputed(engine: &mut Engine, op: usize) {
    let o = engine.ops.get(op);
    let whole = o.lo == 0 && o.hi == engine.geo.chunk_sectors();
    let recomputed: Vec<MemberIdx> = o
        .missing
        .iter()
        .copied()
        .filter(|m| o.written.iter().any(|(w, _, _)| w == m))
        .filter(|m| engine.member_states()[m.index()] == MemberState::Rebuilding)
        .collect();
    let (stripe, rows) = (o.stripe, (o.lo, o.hi));
    for m in recomputed {
        engine.recomputed.add(m, stripe, rows, whole);
    }
}

/// Write `op` ended with a member's write failed while the array failed past its
/// redundancy: parity and the other data members may hold the write, the member whose
/// write failed not (it holds its rows, old or new, and may be taken back by a forced
/// start: mdadm's `--assemble --force`, xraid's `serve --force`). A member missing
/// before the loss has its rows here rebuilt from that parity, which may agree with
/// neither: they are unknown (see `unknown`), named on the rings' markers, and read
/// as errors until a write covers them. Without the log md's write hole stays open
/// there (the next start says so).
fn torn_by_the_loss(engine: &mut Engine, op: usize) {
    if engine.log.is_none() {
        return;
    }
    let o = engine.ops.get(op);
    let (stripe, lo, hi) = (o.stripe, o.lo, o.hi);
    let map = engine.geo.stripe_map(stripe);
    let missing: Vec<MemberIdx> = (0..map.data_disks())
        .map(|i| map.data_member(i))
        .filter(|&m| !engine.in_sync(m, stripe) && !engine.failed_at_loss.contains(&m))
        .collect();
    if missing.is_empty() {
        return;
    }
    for member in missing {
        crate::unknown::add(engine, stripe, member, lo, hi);
    }
    crate::ppl::say_unknown_rows(engine);
}

/// A member left the array: every client write under way is to be made durable as
/// soon as it finishes, for its log entry may lack that member's rows (see
/// `ppl::member_left`). Returns how many were marked.
pub(crate) fn mark_writes_durable_soon(engine: &mut Engine) -> u32 {
    let mut marked = 0;
    for (_, o) in engine.ops.iter_mut() {
        if o.purpose == Purpose::Write && !o.durable_soon {
            o.durable_soon = true;
            marked += 1;
        }
    }
    marked
}
