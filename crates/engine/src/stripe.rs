//! Plans for the parity levels (RAID-4/5/6): one operation per stripe touched by a
//! write (or by a read of a missing member), serialised per stripe.
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
use crate::engine::{member_idx, sectors_to_bytes, Engine, IoTarget, Segment};
use crate::{IoFailed, IoKind};

/// The part of a stripe's data chunk `data_index` that an operation reads or writes,
/// in sectors from the chunk's start, and where it sits in the client buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg {
    data_index: u16,
    start: u32,
    end: u32,
    buf_off: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    ReadModifyWrite,
    ReconstructWrite,
    Reconstruct,
    DegradedRead,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued,
    Reading,
    Writing,
}

#[derive(Debug)]
pub(crate) struct StripeOp {
    req: usize,
    stripe: u64,
    write: bool,
    segs: Vec<Seg>,
    lo: u32,
    hi: u32,
    scratch: Option<BufId>,
    pending: u32,
    /// A read failed: plan again around the failed member once the others finish.
    replan: bool,
    plan: Plan,
    phase: Phase,
}

impl StripeOp {
    fn row_bytes(&self) -> usize {
        sectors_to_bytes(u64::from(self.hi - self.lo))
    }
}

/// Splits a segment at chunk boundaries. Reads of live members go straight to the
/// client buffer; everything else becomes one operation per stripe.
pub(crate) fn submit(engine: &mut Engine, req: usize, seg: Segment) {
    let chunk = u64::from(engine.geo.chunk_sectors());
    let client = engine.request_buf(req);
    let end = seg.sector + seg.sectors;
    let mut sector = seg.sector;
    let mut buf_off = seg.buf_off;
    let mut group: Option<(u64, Vec<Seg>)> = None;
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
        if !seg.write && engine.is_live(member) {
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
                        new_op(engine, req, stripe, seg.write, segs);
                    }
                    group = Some((pos.stripe, vec![piece]));
                }
            }
        }
        sector += sectors;
        buf_off += sectors_to_bytes(sectors);
    }
    if let Some((stripe, segs)) = group {
        new_op(engine, req, stripe, seg.write, segs);
    }
}

fn new_op(engine: &mut Engine, req: usize, stripe: u64, write: bool, segs: Vec<Seg>) {
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
    engine.request_step_started(req);
    let op = engine.ops.insert(StripeOp {
        req,
        stripe,
        write,
        segs,
        lo,
        hi,
        scratch: None,
        pending: 0,
        replan: false,
        plan: Plan::DegradedRead,
        phase: Phase::Queued,
    });
    let queue = engine.locks.entry(stripe).or_default();
    queue.push_back(op);
    if queue.len() == 1 {
        start(engine, op);
    }
}

/// The operation holds its stripe: plan, then issue the reads the plan needs.
fn start(engine: &mut Engine, op: usize) {
    let parity_count = usize::from(engine.geo.level().parity_count());
    if engine.failed_count() > parity_count {
        let error = engine.data_lost(parity_count);
        finish(engine, op, Some(error));
        return;
    }
    let (stripe, lo, hi, row_bytes) = {
        let o = engine.ops.get(op);
        (o.stripe, o.lo, o.hi, o.row_bytes())
    };
    let map = engine.geo.stripe_map(stripe);
    let raid_disks = usize::from(engine.geo.raid_disks());
    let scratch = match engine.ops.get(op).scratch {
        Some(buf) => buf,
        None => {
            let buf = engine.bufs.alloc(raid_disks * row_bytes);
            engine.ops.get_mut(op).scratch = Some(buf);
            buf
        }
    };
    let plan = choose_plan(engine, op, &map);
    let mut reads: Vec<(MemberIdx, u32, u32)> = Vec::new();
    let o = engine.ops.get(op);
    match plan {
        Plan::DegradedRead | Plan::Reconstruct => {
            for m in (0..raid_disks).map(member_idx) {
                if engine.is_live(m) {
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
                if !engine.is_live(m) {
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
/// which does not trust old parity.
fn choose_plan(engine: &Engine, op: usize, map: &StripeMap) -> Plan {
    let o = engine.ops.get(op);
    if !o.write {
        return Plan::DegradedRead;
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
    let degraded = engine.failed_count() > 0;
    if !degraded {
        let rmw_reads = o.segs.len() + usize::from(engine.geo.level().parity_count());
        let rcw_reads: usize = (0..map.data_disks()).map(pieces).sum();
        return if rcw_reads <= rmw_reads {
            Plan::ReconstructWrite
        } else {
            Plan::ReadModifyWrite
        };
    }
    // Reconstruct-write never needs a missing member's old rows when every missing data
    // member is wholly overwritten over lo..hi.
    let needs_missing_rows = (0..map.data_disks()).any(|i| {
        let (a, b) = covered(&o.segs, i);
        let wholly_overwritten = a <= lo && b >= hi;
        !engine.is_live(map.data_member(i)) && !wholly_overwritten
    });
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
    if result.is_err() {
        engine.fail_member(member);
    }
    let o = engine.ops.get_mut(op);
    o.pending -= 1;
    if result.is_err() && o.phase == Phase::Reading {
        o.replan = true;
    }
    if o.pending > 0 {
        return;
    }
    match o.phase {
        Phase::Reading if o.replan => {
            o.replan = false;
            start(engine, op);
        }
        Phase::Reading => after_reads(engine, op),
        Phase::Writing => {
            let error = engine.lost_error();
            finish(engine, op, error);
        }
        Phase::Queued => unreachable!("a queued op has no I/O in flight"),
    }
}

/// All reads are in: compute, then write (or, for a degraded read, copy out).
fn after_reads(engine: &mut Engine, op: usize) {
    let o = engine.ops.get(op);
    let (plan, stripe, lo) = (o.plan, o.stripe, o.lo);
    let scratch = o.scratch.expect("scratch is allocated at start");
    let segs = o.segs.clone();
    let row_bytes = o.row_bytes();
    let client = engine.request_buf(o.req);
    let map = engine.geo.stripe_map(stripe);
    match plan {
        Plan::DegradedRead => {
            rebuild_missing(engine, &map, scratch, row_bytes);
            for s in &segs {
                let m = map.data_member(s.data_index);
                let (from, to) = seg_slices(s, m, lo, row_bytes, scratch, client);
                let (dst, src) = engine.bufs.pair_mut(to, from);
                dst.copy_from_slice(src);
            }
            finish(engine, op, None);
            return;
        }
        Plan::ReadModifyWrite => read_modify_write(engine, &map, &segs, lo, scratch, client),
        Plan::ReconstructWrite | Plan::Reconstruct => {
            if plan == Plan::Reconstruct {
                rebuild_missing(engine, &map, scratch, row_bytes);
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
    let mut writes: Vec<(MemberIdx, u64, BufSlice)> = Vec::new();
    for s in &segs {
        let m = map.data_member(s.data_index);
        if engine.is_live(m) {
            let (_, from) = seg_slices(s, m, lo, row_bytes, scratch, client);
            writes.push((m, engine.geo.member_sector(stripe, s.start), from));
        }
    }
    for m in parity_members(&map) {
        if engine.is_live(m) {
            let buf = BufSlice {
                buf: scratch,
                offset: m.index() * row_bytes,
                len: row_bytes,
            };
            writes.push((m, engine.geo.member_sector(stripe, lo), buf));
        }
    }
    let o = engine.ops.get_mut(op);
    o.phase = Phase::Writing;
    o.pending = u32::try_from(writes.len()).expect("few writes per stripe");
    if writes.is_empty() {
        let error = engine.lost_error();
        finish(engine, op, error);
        return;
    }
    for (m, sector, buf) in writes {
        engine.emit(
            m,
            IoKind::Write,
            sector,
            buf,
            IoTarget::Stripe { op, member: m },
        );
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

/// Rebuilds the rows of every failed member of the stripe from the others.
fn rebuild_missing(engine: &mut Engine, map: &StripeMap, scratch: BufId, row_bytes: usize) {
    let order = syndrome_order(map);
    let missing: Vec<usize> = (0..order.len())
        .filter(|&k| !engine.is_live(order[k]))
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

/// Ends an operation: frees its scratch, hands the stripe to the next in line and
/// reports to the request.
fn finish(engine: &mut Engine, op: usize, error: Option<crate::EngineError>) {
    let o = engine.ops.remove(op);
    if let Some(buf) = o.scratch {
        engine.bufs.free(buf);
    }
    let queue = engine
        .locks
        .get_mut(&o.stripe)
        .expect("a running op holds its stripe");
    let front = queue.pop_front();
    debug_assert_eq!(front, Some(op), "only the holder finishes");
    let next = queue.front().copied();
    if next.is_none() {
        engine.locks.remove(&o.stripe);
    }
    engine.request_step_done(o.req, error);
    if let Some(next) = next {
        start(engine, next);
    }
}
