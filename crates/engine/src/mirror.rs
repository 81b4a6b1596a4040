//! Plans for the levels without parity (RAID-0, RAID-1, RAID-10).
//!
//! Reads go straight from one in-sync copy to the client's buffer, with no lock. RAID-1
//! and RAID-10 writes take the lock of their sync unit and go to every copy in sync
//! there (a copy being rebuilt gets the unit from the rebuild when it reaches it); the
//! lock keeps a rebuild or a repair from copying old data over a newer write. RAID-0
//! writes go straight to their one place.
//!
//! A failed read is read again from another copy under the unit's lock, and the copy
//! that failed is rewritten with what the good one returned. A sync unit copies
//! (recover) or compares (check, repair, resync) the copies of one unit under its lock.

use xraid_layout::{Level, MemberIdx, Place};

use crate::buffers::{BufId, BufSlice};
use crate::engine::{sectors_to_bytes, Engine, Holder, IoTarget, Owner, Segment};
use crate::sync::{mirror_unit, unit_sectors, UnitOutcome};
use crate::{EngineError, Event, FailReason, IoFailed, IoKind, MemberState, SyncKind};

/// What a mirror operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    Write,
    /// Read again from another copy, then rewrite the copies in `bad`.
    RepairRead,
    Sync(SyncKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Queued,
    Reading,
    Writing,
}

#[derive(Debug)]
pub(crate) struct MirrorOp {
    owner: Owner,
    work: Work,
    unit: u64,
    /// The array sectors covered (within one copy run and one unit).
    seg: Segment,
    /// Copies whose reads failed in this operation: skipped as sources, rewritten.
    bad: Vec<MemberIdx>,
    /// Copies read by a sync, in the order of their rows in `scratch`.
    read_from: Vec<Place>,
    scratch: Option<BufId>,
    /// I/Os in flight (a write's copy to a replacement counts too).
    pub(crate) pending: u32,
    phase: Phase,
    replan: bool,
    mismatch: bool,
    /// A repair read widened to whole checksum blocks (integrity mode) reads into
    /// scratch: where the client's part goes in its buffer, where it starts in
    /// scratch, and its length, in bytes.
    client_part: Option<(usize, usize, usize)>,
    /// A client write the last copy of its unit refused: it fails (`Unwritable`), and
    /// the member serves on.
    unwritten: bool,
    /// The writes sent: copy, first sector, and the bytes. A refused write is tried
    /// again from them block by block, to record only the blocks that refuse; a
    /// sync's writes to a copy may be pieces of the unit (its listed sectors), and
    /// only those pieces are its to refuse.
    written: Vec<(MemberIdx, u64, BufSlice)>,
    /// Copies whose writes are being (or were) tried again block by block.
    narrowed: Vec<MemberIdx>,
    /// Copies that refused a client write (a medium error): settled once every copy
    /// has answered (`settle`).
    refused: Vec<MemberIdx>,
    settled: bool,
    /// A sync found sectors every copy's bad block log lists: nothing holds them.
    unrecoverable: bool,
}

/// Splits a segment at copy-run boundaries (and, for RAID-1 writes or while a sync
/// runs, at unit boundaries): reads go to one in-sync copy, rotating among copies to
/// spread load; writes take their unit's lock.
pub(crate) fn submit(engine: &mut Engine, req: usize, seg: Segment) {
    let client = engine.request_buf(req);
    let level = engine.geo.level();
    let split_units = level == Level::Raid1 && (seg.write || engine.sync.is_some());
    let unit_len = unit_sectors(engine);
    let end = seg.sector + seg.sectors;
    let mut sector = seg.sector;
    let mut buf_off = seg.buf_off;
    while sector < end {
        let copies = engine.geo.copies(sector);
        let mut sectors = copies.run_sectors.min(end - sector);
        if split_units {
            sectors = sectors.min(unit_len - sector % unit_len);
        }
        let keep = if seg.write {
            None
        } else {
            resync_keeps(engine, &copies, sector, &mut sectors)
        };
        let piece = Segment {
            sector,
            sectors,
            buf_off,
            write: seg.write,
        };
        let buf = BufSlice {
            buf: client,
            offset: buf_off,
            len: sectors_to_bytes(sectors),
        };
        let unit = mirror_unit(engine, sector);
        if seg.write && level != Level::Raid0 {
            engine.request_step_started(req);
            new_op(
                engine,
                Owner::Client(req),
                Work::Write,
                unit,
                piece,
                Vec::new(),
                None,
            );
        } else {
            let live = live_copies(engine, &copies, unit);
            if live.is_empty() {
                let error = lost(engine);
                engine.fail_request(req, error);
                return;
            }
            // Until a resync reaches a unit its copies may differ (an unclean stop):
            // read the copy the resync will copy to the others, as md does.
            let place = if let Some(place) = keep {
                place
            } else if seg.write || crate::sync::awaiting_resync(engine, unit) {
                live[0]
            } else {
                // Copies whose bad block log lists part of the range are left out
                // while another copy holds all of it (md's read_balance): reading
                // them would only fail and send the read to another copy.
                let live = if crate::badblocks::any(engine) {
                    let whole: Vec<Place> = live
                        .iter()
                        .copied()
                        .filter(|p| {
                            !crate::badblocks::is_known_bad(
                                engine,
                                p.member,
                                p.sector..p.sector + sectors,
                            )
                        })
                        .collect();
                    if whole.is_empty() {
                        live
                    } else {
                        whole
                    }
                } else {
                    live
                };
                // Spread reads over the copies, leaving out slow members while a
                // copy on a member that is not slow exists.
                let fast: Vec<Place> = live
                    .iter()
                    .copied()
                    .filter(|p| !engine.is_slow(p.member))
                    .collect();
                let choices = if fast.is_empty() { &live } else { &fast };
                let pick = choices[engine.read_rotor % choices.len()];
                engine.read_rotor = engine.read_rotor.wrapping_add(1);
                pick
            };
            let kind = if seg.write {
                IoKind::Write
            } else {
                IoKind::Read
            };
            let target = IoTarget::Direct {
                req,
                member: place.member,
                seg: piece,
            };
            engine.emit(place.member, kind, place.sector, buf, target);
        }
        sector += sectors;
        buf_off += buf.len;
    }
}

/// The copies of a place in sync for `unit`, in layout order.
fn live_copies(engine: &Engine, copies: &xraid_layout::Copies, unit: u64) -> Vec<Place> {
    copies
        .as_slice()
        .iter()
        .copied()
        .filter(|p| engine.in_sync(p.member, unit))
        .collect()
}

/// Where a read at `sector` waits for a resync and a copy's bad block log lists
/// sectors there: the copy the resync will keep for the first of them — the first
/// copy whose log does not list it (see `compose`) — with `sectors` cut to where
/// that stays so. `None` where the first copy in sync holds all of them (or nothing
/// is listed anywhere): the caller reads it as before.
fn resync_keeps(
    engine: &Engine,
    copies: &xraid_layout::Copies,
    sector: u64,
    sectors: &mut u64,
) -> Option<Place> {
    if !crate::badblocks::any(engine) {
        return None;
    }
    let unit = mirror_unit(engine, sector);
    if !crate::sync::awaiting_resync(engine, unit) {
        return None;
    }
    let live = live_copies(engine, copies, unit);
    // Sector by sector, the first copy whose log does not list it (as `compose`).
    let keeper = |offset: u64| {
        live.iter().position(|p| {
            !crate::badblocks::is_known_bad(
                engine,
                p.member,
                p.sector + offset..p.sector + offset + 1,
            )
        })
    };
    let first = keeper(0);
    let run = (1..*sectors)
        .find(|&offset| keeper(offset) != first)
        .unwrap_or(*sectors);
    match first {
        // The first copy holds all of it: read as before.
        Some(0) if run == *sectors => None,
        Some(i) => {
            *sectors = run;
            Some(live[i])
        }
        // No copy holds the first sectors: read as before, and the read fails loudly.
        None => {
            *sectors = run;
            None
        }
    }
}

/// A direct read of `seg` from `bad` failed: read each unit of it again from another
/// copy, and rewrite `bad` there.
pub(crate) fn submit_repair_read(engine: &mut Engine, req: usize, seg: Segment, bad: MemberIdx) {
    let unit_len = unit_sectors(engine);
    let end = seg.sector + seg.sectors;
    let mut sector = seg.sector;
    let mut buf_off = seg.buf_off;
    while sector < end {
        let sectors = (unit_len - sector % unit_len).min(end - sector);
        let piece = Segment {
            sector,
            sectors,
            buf_off,
            write: false,
        };
        let unit = mirror_unit(engine, sector);
        engine.request_step_started(req);
        let (piece, client_part) = widen_to_blocks(engine, piece, unit_len);
        new_op(
            engine,
            Owner::Client(req),
            Work::RepairRead,
            unit,
            piece,
            vec![bad],
            client_part,
        );
        sector += sectors;
        buf_off += sectors_to_bytes(sectors);
    }
}

/// One unit of a background sync.
pub(crate) fn start_sync_unit(engine: &mut Engine, unit: u64, kind: SyncKind) {
    let unit_len = unit_sectors(engine);
    let sector = unit * unit_len;
    let seg = Segment {
        sector,
        sectors: unit_len.min(engine.geo.array_sectors() - sector),
        buf_off: 0,
        write: false,
    };
    new_op(
        engine,
        Owner::Sync,
        Work::Sync(kind),
        unit,
        seg,
        Vec::new(),
        None,
    );
}

/// Integrity mode: a repair read covering whole checksum blocks (within its unit and
/// the array), so that the copy rewritten is written, and checked, whole; with where
/// the client's part lies in it. Unchanged otherwise, or when already whole.
fn widen_to_blocks(
    engine: &Engine,
    piece: Segment,
    unit_len: u64,
) -> (Segment, Option<(usize, usize, usize)>) {
    if !engine.integrity_on() {
        return (piece, None);
    }
    let block = xraid_format::BLOCK_SECTORS;
    let unit_start = piece.sector / unit_len * unit_len;
    let unit_end = (unit_start + unit_len).min(engine.geo.array_sectors());
    let start = (piece.sector / block * block).max(unit_start);
    let end = (piece.sector + piece.sectors)
        .next_multiple_of(block)
        .min(unit_end);
    if start == piece.sector && end == piece.sector + piece.sectors {
        return (piece, None);
    }
    let wide = Segment {
        sector: start,
        sectors: end - start,
        buf_off: 0,
        write: false,
    };
    let part = (
        piece.buf_off,
        sectors_to_bytes(piece.sector - start),
        sectors_to_bytes(piece.sectors),
    );
    (wide, Some(part))
}

fn new_op(
    engine: &mut Engine,
    owner: Owner,
    work: Work,
    unit: u64,
    seg: Segment,
    bad: Vec<MemberIdx>,
    client_part: Option<(usize, usize, usize)>,
) {
    let op = engine.mops.insert(MirrorOp {
        owner,
        work,
        unit,
        seg,
        bad,
        read_from: Vec::new(),
        scratch: None,
        pending: 0,
        phase: Phase::Queued,
        replan: false,
        mismatch: false,
        client_part,
        unwritten: false,
        written: Vec::new(),
        narrowed: Vec::new(),
        refused: Vec::new(),
        settled: false,
        unrecoverable: false,
    });
    if engine.lock(unit, Holder::Mirror(op)) {
        start(engine, op);
    }
}

/// Every copy of the operation's sectors.
fn places(engine: &Engine, op: &MirrorOp) -> Vec<Place> {
    engine.geo.copies(op.seg.sector).as_slice().to_vec()
}

/// The client buffer slice of a client operation.
fn client_slice(engine: &Engine, o: &MirrorOp) -> BufSlice {
    let Owner::Client(req) = o.owner else {
        unreachable!("sync operations have no client buffer")
    };
    BufSlice {
        buf: engine.request_buf(req),
        offset: o.seg.buf_off,
        len: sectors_to_bytes(o.seg.sectors),
    }
}

/// The operation holds its unit: issue its reads (or, for a write, its writes).
pub(crate) fn start(engine: &mut Engine, op: usize) {
    let o = engine.mops.get(op);
    let unit = o.unit;
    let all = places(engine, o);
    let sources: Vec<Place> = all
        .iter()
        .copied()
        .filter(|p| engine.in_sync(p.member, unit) && !o.bad.contains(&p.member))
        .collect();
    let len = sectors_to_bytes(o.seg.sectors);
    let o_sectors = o.seg.sectors;
    let mut ios: Vec<(Place, IoKind, BufSlice)> = Vec::new();
    match o.work {
        Work::Write => {
            if sources.is_empty() {
                let error = lost(engine);
                finish(engine, op, Some(error));
                return;
            }
            let buf = client_slice(engine, o);
            ios.extend(sources.iter().map(|&p| (p, IoKind::Write, buf)));
        }
        Work::RepairRead => {
            let Some(&source) = sources.first() else {
                let error = EngineError::Unreadable {
                    sector: o.seg.sector,
                    end: o.seg.sector + o.seg.sectors,
                };
                finish(engine, op, Some(error));
                return;
            };
            let into = if o.client_part.is_some() {
                // Widened to whole blocks: read into scratch, copied out after.
                let scratch = match o.scratch {
                    Some(buf) => buf,
                    None => engine.bufs.alloc(len),
                };
                engine.mops.get_mut(op).scratch = Some(scratch);
                BufSlice {
                    buf: scratch,
                    offset: 0,
                    len,
                }
            } else {
                client_slice(engine, o)
            };
            ios.push((source, IoKind::Read, into));
        }
        Work::Sync(kind) => {
            if sources.is_empty() {
                let error = lost(engine);
                finish(engine, op, Some(error));
                return;
            }
            let rebuilding = all
                .iter()
                .any(|p| is_rebuilding(engine, p.member) || engine.is_replacing(p.member));
            // A member being replaced is read itself where it can be — but not where
            // a resync has yet to make the copies agree: there the copy reads take
            // (the first) is the one the rebuilt and the replacing devices get too.
            let source = sources
                .iter()
                .copied()
                .find(|p| engine.is_replacing(p.member))
                .filter(|_| !crate::sync::awaiting_resync(engine, unit))
                .unwrap_or(sources[0]);
            let listed = |p: &Place| {
                crate::badblocks::is_known_bad(engine, p.member, p.sector..p.sector + o_sectors)
            };
            let read_from: Vec<Place> = match kind {
                SyncKind::Recover if !rebuilding => Vec::new(),
                // The source's log lists part of the unit: those sectors come from
                // the other copies (see `compose`), and the rest from the source.
                SyncKind::Recover if crate::badblocks::any(engine) && listed(&source) => {
                    let mut from = vec![source];
                    from.extend(sources.iter().copied().filter(|p| *p != source));
                    from
                }
                SyncKind::Recover => vec![source],
                _ => sources.clone(),
            };
            if read_from.is_empty() {
                finish(engine, op, None);
                return;
            }
            // Planned again (a read failed), it may read from more copies than before.
            let scratch = match engine.mops.get(op).scratch {
                Some(buf) if engine.bufs.get(buf).len() >= read_from.len() * len => buf,
                Some(buf) => {
                    engine.bufs.free(buf);
                    engine.bufs.alloc(read_from.len() * len)
                }
                None => engine.bufs.alloc(read_from.len() * len),
            };
            for (i, &p) in read_from.iter().enumerate() {
                // A sync reads only what each copy holds: the sectors its bad block
                // log lists come from the other copies (see `compose`).
                let (pieces, _) =
                    crate::badblocks::split(engine, p.member, p.sector..p.sector + o_sectors);
                for piece in pieces {
                    let buf = BufSlice {
                        buf: scratch,
                        offset: i * len + sectors_to_bytes(piece.start - p.sector),
                        len: sectors_to_bytes(piece.end - piece.start),
                    };
                    let place = Place {
                        member: p.member,
                        sector: piece.start,
                    };
                    ios.push((place, IoKind::Read, buf));
                }
            }
            let o = engine.mops.get_mut(op);
            o.scratch = Some(scratch);
            o.read_from = read_from;
        }
    }
    let o = engine.mops.get_mut(op);
    o.phase = if o.work == Work::Write {
        Phase::Writing
    } else {
        Phase::Reading
    };
    o.pending = u32::try_from(ios.len()).expect("few copies");
    if o.work == Work::Write {
        o.written = ios
            .iter()
            .map(|&(p, _, buf)| (p.member, p.sector, buf))
            .collect();
    }
    if ios.is_empty() && o.phase == Phase::Reading {
        // A sync whose copies' logs list the whole unit reads nothing (see `compose`).
        after_reads(engine, op);
        return;
    }
    for (p, kind, buf) in ios {
        engine.emit(
            p.member,
            kind,
            p.sector,
            buf,
            IoTarget::Mirror {
                op,
                member: p.member,
            },
        );
    }
}

fn is_rebuilding(engine: &Engine, member: MemberIdx) -> bool {
    engine.member_states()[member.index()] == MemberState::Rebuilding
}

pub(crate) fn on_completion(
    engine: &mut Engine,
    op: usize,
    member: MemberIdx,
    result: Result<(), IoFailed>,
) {
    let phase = engine.mops.get(op).phase;
    if phase == Phase::Reading && engine.completion_is_stale() {
        // See `Engine::completion_is_stale`: planned again, around the newcomer.
        engine.mops.get_mut(op).replan = true;
    } else if let Err(failure) = result {
        match phase {
            Phase::Reading => {
                engine.read_failed(member, failure);
                let o = engine.mops.get_mut(op);
                o.replan = true;
                if !o.bad.contains(&member) {
                    o.bad.push(member);
                }
            }
            // A copy that refuses a client write: what becomes of it depends on whether
            // another copy takes the write, which only the end of the operation tells.
            _ if failure == IoFailed::Medium
                && engine.mops.get(op).work == Work::Write
                && engine.pseudo_role(member).is_none() =>
            {
                let o = engine.mops.get_mut(op);
                if !o.refused.contains(&member) {
                    o.refused.push(member);
                }
            }
            // Another copy holds what it refused (the source of a sync or repair):
            // with room in its bad block log, the range goes there and the copy serves
            // on elsewhere (md's answer) — first tried again block by block, so that
            // only the blocks that refuse go there.
            _ if failure == IoFailed::Medium && narrow(engine, op, member) => {}
            _ if failure == IoFailed::Medium && record_refusal(engine, op, member) => {}
            _ => engine.write_failed(member, failure),
        }
    }
    io_done(engine, op);
}

/// One I/O of the operation is done: when none is left, on to what comes next.
fn io_done(engine: &mut Engine, op: usize) {
    let o = engine.mops.get_mut(op);
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
        Phase::Writing if o.work == Work::Write && !o.refused.is_empty() && !o.settled => {
            settle(engine, op);
            // Unless blocks of a refused write are being tried again.
            if engine.mops.get(op).pending == 0 {
                writes_done(engine, op);
            }
        }
        Phase::Writing => writes_done(engine, op),
        Phase::Queued => unreachable!("a queued op has no I/O in flight"),
    }
}

/// Every write of the operation has answered: it ends.
fn writes_done(engine: &mut Engine, op: usize) {
    report_corrections(engine, op);
    let o = engine.mops.get(op);
    let error = match o.work {
        Work::Write if o.unwritten => Some(EngineError::Unwritable {
            sector: o.seg.sector,
            end: o.seg.sector + o.seg.sectors,
        }),
        Work::Write => segment_lost(engine, o.seg),
        _ => None,
    };
    finish(engine, op, error);
}

/// Every copy has answered a client write some copies refused. Where an active copy
/// in sync took it, the refusing copies are stale there: each goes on with the range
/// in its bad block log (tried again block by block first), or is failed without room
/// there. Where none did, nothing holds the write: it fails (`Unwritable`) and the
/// refusing copies serve on with what they held — failing the last copy would lose
/// every other sector it holds (md's raid1 and raid10 never fail the device that would
/// fail the array).
fn settle(engine: &mut Engine, op: usize) {
    let o = engine.mops.get_mut(op);
    o.settled = true;
    let refused = o.refused.clone();
    let o = engine.mops.get(op);
    let landed = places(engine, o).iter().any(|p| {
        !refused.contains(&p.member)
            && engine.pseudo_role(p.member).is_none()
            && engine.member_states()[p.member.index()] == MemberState::Active
            && engine.in_sync(p.member, o.unit)
            && !known_bad_there(engine, o, p)
    });
    for member in refused {
        if !landed {
            refused_by_last_copy(engine, op, member);
        } else if !narrow(engine, op, member) && !record_refusal(engine, op, member) {
            engine.write_failed(member, IoFailed::Medium);
        }
    }
}

/// Whether copy `p` of the operation's sectors is known bad somewhere in them: it
/// holds nothing there to count on.
fn known_bad_there(engine: &Engine, o: &MirrorOp, p: &Place) -> bool {
    crate::badblocks::is_known_bad(engine, p.member, p.sector..p.sector + o.seg.sectors)
}

/// `member` refused its copy of the operation's write, and another copy holds the
/// data: where a write of its spans more than one block, its writes are tried again
/// block by block, where its log has room to record what refuses again. Returns
/// whether they were.
fn narrow(engine: &mut Engine, op: usize, member: MemberIdx) -> bool {
    let slot = engine.slot_of(member);
    if engine.pseudo_role(member).is_some()
        || !engine.is_present(member)
        || engine.bad_block_log_capacity(slot) == 0
    {
        return false;
    }
    let o = engine.mops.get(op);
    if o.narrowed.contains(&member) {
        // Another of its writes refused too: all are being tried again already.
        return true;
    }
    let written = o
        .written
        .iter()
        .filter(|w| w.0 == member)
        .map(|&(_, at, buf)| (at, buf));
    let Some(retries) = crate::badblocks::retry_blocks(written) else {
        return false;
    };
    let o = engine.mops.get_mut(op);
    o.pending += u32::try_from(retries.len()).expect("few blocks");
    o.narrowed.push(member);
    crate::badblocks::send_retries(engine, member, retries, |sector, sectors| {
        IoTarget::MirrorRetry {
            op,
            member,
            sector,
            sectors,
        }
    });
    true
}

/// A block of a refused write, tried again (see `narrow`), is done: refused again, it
/// goes into the member's log (or, without room, the member is failed).
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
        Err(IoFailed::Medium)
            if crate::badblocks::record_refusal(engine, member, sector..sector + sectors) => {}
        Err(failure) => engine.write_failed(member, failure),
    }
    io_done(engine, op);
}

/// `member` refused its copy of the operation's write, and another copy holds the
/// data: records what was written to it in its bad block log, if it has room.
fn record_refusal(engine: &mut Engine, op: usize, member: MemberIdx) -> bool {
    let ranges: Vec<std::ops::Range<u64>> = engine
        .mops
        .get(op)
        .written
        .iter()
        .filter(|w| w.0 == member)
        .map(|&(_, at, buf)| at..at + buf.len as u64 / xraid_layout::SECTOR_BYTES)
        .collect();
    !ranges.is_empty()
        && ranges
            .into_iter()
            .all(|r| crate::badblocks::record_refusal(engine, member, r))
}

/// The last in-sync copy of a client write's unit refused it: the write fails
/// (`Unwritable`) and that copy serves on with what it held. Its checksums of the unit
/// are forgotten (they were taken for the data it refused), and the devices that took
/// the write besides it — a member being rebuilt, a replacement — are failed: their
/// copies now disagree with the one the array keeps.
fn refused_by_last_copy(engine: &mut Engine, op: usize, member: MemberIdx) {
    let o = engine.mops.get_mut(op);
    o.unwritten = true;
    let refused = o.refused.clone();
    let (unit, sectors) = (o.unit, o.seg.sectors);
    let all = places(engine, engine.mops.get(op));
    if let Some(p) = all.iter().find(|p| p.member == member) {
        let slot = engine.slot_of(member);
        crate::integrity::forget_refused(engine, slot, p.sector, sectors);
    }
    let others: Vec<MemberIdx> = all
        .iter()
        .filter(|p| !known_bad_there(engine, engine.mops.get(op), p))
        .map(|p| p.member)
        .filter(|&m| m != member && !refused.contains(&m) && engine.in_sync(m, unit))
        .chain(all.iter().filter_map(|p| engine.replacement_of(p.member)))
        .collect();
    for m in others {
        engine.fail(m, FailReason::Diverged);
    }
}

/// A comparing sync's reads are in, where some copy's bad block log lists sectors of
/// the unit (each copy was read only where it holds data). The unit's data is, sector
/// by sector, the first copy's where its log does not list it, else the next copy's
/// that holds it — so a copy's listed sectors never decide which version of the rest
/// of the unit is kept (reads while the resync is owed take the same). Composed into
/// the first row of scratch (`good`). Copies that disagree elsewhere get the whole
/// unit (a resync or repair); every copy gets its listed sectors rewritten, except
/// where no copy holds them (the unit is then unrecoverable there).
fn compose(
    engine: &mut Engine,
    op: usize,
    kind: SyncKind,
    good: BufSlice,
    writes: &mut Vec<(Place, BufSlice)>,
) -> Vec<bool> {
    let o = engine.mops.get(op);
    let sectors = o.seg.sectors;
    let len = sectors_to_bytes(sectors);
    let read_from = o.read_from.clone();
    // Per copy, its listed sectors, as offsets into the unit.
    let listed: Vec<Vec<std::ops::Range<u64>>> = read_from
        .iter()
        .map(|p| {
            crate::badblocks::split(engine, p.member, p.sector..p.sector + sectors)
                .1
                .into_iter()
                .map(|r| r.start - p.sector..r.end - p.sector)
                .collect()
        })
        .collect();
    let is_listed = |i: usize, s: u64| listed[i].iter().any(|r| r.contains(&s));
    let sector_bytes = sectors_to_bytes(1);
    let mut held = vec![true; usize::try_from(sectors).expect("fits")];
    let rows = engine.bufs.get_mut(good.buf);
    for s in 0..sectors {
        if !is_listed(0, s) {
            continue;
        }
        let at = sectors_to_bytes(s);
        match (1..read_from.len()).find(|&i| !is_listed(i, s)) {
            Some(i) => {
                let from = i * len + at;
                rows.copy_within(from..from + sector_bytes, at);
            }
            None => held[s as usize] = false,
        }
    }
    let mut differing = Vec::new();
    for i in 1..read_from.len() {
        let differs = (0..sectors).any(|s| {
            let at = sectors_to_bytes(s);
            !is_listed(i, s)
                && rows[at..at + sector_bytes] != rows[i * len + at..i * len + at + sector_bytes]
        });
        if differs {
            differing.push(i);
        }
    }
    let mismatch = !differing.is_empty();
    for (i, p) in read_from.iter().enumerate() {
        // A copy that disagrees gets the whole unit (a resync, a repair), any other
        // its listed sectors — in both cases only where some copy holds them: a write
        // where none does would make garbage good.
        let whole = matches!(kind, SyncKind::Repair | SyncKind::Resync) && differing.contains(&i);
        let wanted = |s: u64| held[s as usize] && (whole || is_listed(i, s));
        let mut s = 0;
        while s < sectors {
            if !wanted(s) {
                s += 1;
                continue;
            }
            let from = s;
            while s < sectors && wanted(s) {
                s += 1;
            }
            let place = Place {
                member: p.member,
                sector: p.sector + from,
            };
            let piece = BufSlice {
                buf: good.buf,
                offset: good.offset + sectors_to_bytes(from),
                len: sectors_to_bytes(s - from),
            };
            writes.push((place, piece));
        }
    }
    let o = engine.mops.get_mut(op);
    // A recover compares nothing: it copies.
    o.mismatch = mismatch && kind != SyncKind::Recover;
    o.unrecoverable = held.iter().any(|h| !h);
    held
}

/// Runs of `held` with the value `want`, as sector offsets.
fn runs(held: &[bool], want: bool) -> Vec<std::ops::Range<u64>> {
    let mut out = Vec::new();
    let mut s = 0;
    while s < held.len() {
        if held[s] != want {
            s += 1;
            continue;
        }
        let from = s;
        while s < held.len() && held[s] == want {
            s += 1;
        }
        out.push(from as u64..s as u64);
    }
    out
}

/// Whether a bad block log lists any sector of the unit on a copy the sync read.
fn any_listed(engine: &Engine, op: usize) -> bool {
    let o = engine.mops.get(op);
    crate::badblocks::any(engine)
        && o.read_from.iter().any(|p| {
            crate::badblocks::is_known_bad(engine, p.member, p.sector..p.sector + o.seg.sectors)
        })
}

/// Reads are in: write what the operation must write.
fn after_reads(engine: &mut Engine, op: usize) {
    let o = engine.mops.get(op);
    let unit = o.unit;
    let len = sectors_to_bytes(o.seg.sectors);
    let all = places(engine, o);
    let mut writes: Vec<(Place, BufSlice)> = Vec::new();
    // What the copies that failed to read (or disagree) get written with.
    let good = match o.work {
        Work::RepairRead if o.client_part.is_none() => client_slice(engine, o),
        _ => BufSlice {
            buf: o.scratch.expect("a sync reads into scratch"),
            offset: 0,
            len,
        },
    };
    if let (Work::RepairRead, Some((buf_off, at, part_len))) = (o.work, o.client_part) {
        let Owner::Client(req) = o.owner else {
            unreachable!("repair reads belong to clients")
        };
        let client = BufSlice {
            buf: engine.request_buf(req),
            offset: buf_off,
            len: part_len,
        };
        let from = BufSlice {
            buf: good.buf,
            offset: at,
            len: part_len,
        };
        let (dst, src) = engine.bufs.pair_mut(client, from);
        dst.copy_from_slice(src);
    }
    let o = engine.mops.get(op);
    if let Work::Sync(kind) = o.work {
        let scratch = good.buf;
        match kind {
            SyncKind::Recover => {
                if any_listed(engine, op) {
                    let held = compose(engine, op, kind, good, &mut writes);
                    if engine.mops.get(op).unrecoverable {
                        // Sectors no copy holds: they go into the logs of the members
                        // being rebuilt (lost, read as errors), which get the rest —
                        // never the garbage, which a write would make good. Where a
                        // target cannot list them (a replacement, a full log), the
                        // unit is not rebuilt and its members stay so.
                        let targets: Vec<Place> = all
                            .iter()
                            .copied()
                            .filter(|p| is_rebuilding(engine, p.member))
                            .collect();
                        let listed = !engine.any_replacing()
                            && targets.iter().all(|p| {
                                runs(&held, false).into_iter().all(|r| {
                                    crate::badblocks::record_lost(
                                        engine,
                                        p.member,
                                        p.sector + r.start..p.sector + r.end,
                                    )
                                })
                            });
                        writes.retain(|(p, _)| !is_rebuilding(engine, p.member));
                        if listed {
                            for p in &targets {
                                for r in runs(&held, true) {
                                    let place = Place {
                                        member: p.member,
                                        sector: p.sector + r.start,
                                    };
                                    let piece = BufSlice {
                                        buf: good.buf,
                                        offset: good.offset + sectors_to_bytes(r.start),
                                        len: sectors_to_bytes(r.end - r.start),
                                    };
                                    writes.push((place, piece));
                                }
                            }
                            engine.mops.get_mut(op).unrecoverable = false;
                        }
                        finish_writes(engine, op, writes);
                        return;
                    }
                }
                writes.extend(
                    all.iter()
                        .filter(|p| is_rebuilding(engine, p.member))
                        .map(|&p| (p, good)),
                );
                // Replacements get their role's copy, at the role's place.
                writes.extend(all.iter().filter_map(|p| {
                    engine.replacement_of(p.member).map(|member| {
                        let place = Place {
                            member,
                            sector: p.sector,
                        };
                        (place, good)
                    })
                }));
            }
            SyncKind::Check | SyncKind::Repair | SyncKind::Resync if any_listed(engine, op) => {
                compose(engine, op, kind, good, &mut writes);
            }
            SyncKind::Check | SyncKind::Repair | SyncKind::Resync => {
                let bytes = engine.bufs.get(scratch);
                let first = &bytes[..len];
                let differing: Vec<Place> = o
                    .read_from
                    .iter()
                    .enumerate()
                    .skip(1)
                    .filter(|(i, _)| bytes[i * len..(i + 1) * len] != *first)
                    .map(|(_, p)| *p)
                    .collect();
                let mismatch = !differing.is_empty();
                if kind != SyncKind::Check {
                    writes.extend(differing.into_iter().map(|p| (p, good)));
                }
                engine.mops.get_mut(op).mismatch = mismatch;
            }
        }
    }
    let o = engine.mops.get(op);
    for p in &all {
        if engine.config.repair_writes
            && o.bad.contains(&p.member)
            && engine.in_sync(p.member, unit)
        {
            writes.push((*p, good));
        }
    }
    finish_writes(engine, op, writes);
}

/// Sends a sync's (or repair's) writes; with none, the operation ends.
fn finish_writes(engine: &mut Engine, op: usize, writes: Vec<(Place, BufSlice)>) {
    let o = engine.mops.get_mut(op);
    o.phase = Phase::Writing;
    o.pending = u32::try_from(writes.len()).expect("few copies");
    o.written = writes
        .iter()
        .map(|&(p, buf)| (p.member, p.sector, buf))
        .collect();
    if writes.is_empty() {
        finish(engine, op, None);
        return;
    }
    for (p, buf) in writes {
        engine.emit(
            p.member,
            IoKind::Write,
            p.sector,
            buf,
            IoTarget::Mirror {
                op,
                member: p.member,
            },
        );
    }
}

/// Rewrites of copies whose reads failed are done: count those that took.
fn report_corrections(engine: &mut Engine, op: usize) {
    let o = engine.mops.get(op);
    let unit = o.unit;
    let fixed: Vec<Place> = places(engine, o)
        .into_iter()
        .filter(|p| {
            engine.config.repair_writes
                && o.bad.contains(&p.member)
                && engine.in_sync(p.member, unit)
        })
        .collect();
    let sectors = o.seg.sectors;
    for p in fixed {
        engine.stats.read_errors_corrected += 1;
        engine.push_event(Event::ReadErrorCorrected {
            member: p.member,
            sector: p.sector,
            sectors,
        });
    }
}

fn finish(engine: &mut Engine, op: usize, error: Option<EngineError>) {
    let o = engine.mops.remove(op);
    if let Some(buf) = o.scratch {
        engine.bufs.free(buf);
    }
    match o.owner {
        Owner::Client(req) => engine.request_step_done(req, error),
        Owner::Sync => {
            let outcome = UnitOutcome {
                mismatch: o.mismatch,
                unrecoverable: error.is_some() || o.unrecoverable,
                new_loss: error.is_some() || o.unrecoverable,
            };
            crate::sync::unit_done(engine, o.unit, outcome);
        }
    }
    engine.unlock(o.unit, Holder::Mirror(op));
}

fn lost(engine: &Engine) -> EngineError {
    let tolerated = match engine.geo.level() {
        Level::Raid1 => engine.member_states().len() - 1,
        Level::Raid10 => usize::from(engine.geo.copies_count()) - 1,
        _ => 0,
    };
    engine.data_lost(tolerated)
}

/// The error for a segment none of whose copies is in sync any more.
pub(crate) fn segment_lost(engine: &Engine, seg: Segment) -> Option<EngineError> {
    let end = seg.sector + seg.sectors;
    let mut sector = seg.sector;
    while sector < end {
        let copies = engine.geo.copies(sector);
        let unit = mirror_unit(engine, sector);
        if !copies
            .as_slice()
            .iter()
            .any(|p| engine.in_sync(p.member, unit))
        {
            return Some(lost(engine));
        }
        sector += copies.run_sectors.min(end - sector);
    }
    None
}

/// Whether some chunk of a RAID-10 array has no active copy. Copy placement repeats
/// every `raid_disks * copies` chunks, so checking that many covers every pattern.
pub(crate) fn raid10_lost(engine: &Engine) -> bool {
    if engine.failed_count() == 0 {
        return false;
    }
    let chunk = u64::from(engine.geo.chunk_sectors());
    let period = u64::from(engine.geo.raid_disks()) * u64::from(engine.geo.copies_count());
    let chunks = (engine.geo.array_sectors() / chunk.max(1)).min(period);
    (0..chunks).any(|c| {
        let copies = engine.geo.copies(c * chunk);
        !copies
            .as_slice()
            .iter()
            .any(|p| engine.member_states()[p.member.index()] == MemberState::Active)
    })
}
