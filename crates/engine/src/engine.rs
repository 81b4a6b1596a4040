//! The engine's state and its whole surface: requests and completions in, member I/Os
//! and replies out.

use std::collections::{HashMap, VecDeque};

use xraid_layout::{Geometry, Level, MemberIdx, SECTOR_BYTES};

use crate::buffers::{BufId, BufSlice, Buffers};
use crate::slab::Slab;
use crate::stripe::StripeOp;
use crate::{
    EngineError, IoFailed, IoId, IoKind, MemberIo, MemberState, Nanos, Reply, Request, RequestId,
    RequestKind, Stats,
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
    /// Straight between a member and a client buffer.
    Direct {
        req: usize,
        member: MemberIdx,
        seg: Segment,
    },
    /// Part of a stripe operation.
    Stripe { op: usize, member: MemberIdx },
    /// A member flush for a client flush.
    Flush { req: usize, member: MemberIdx },
}

#[derive(Debug)]
pub(crate) struct ReqState {
    id: RequestId,
    pub(crate) buf: Option<BufId>,
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
    pub(crate) ops: Slab<StripeOp>,
    ios: Slab<IoTarget>,
    /// Per-stripe FIFO of operations; the one in front holds the stripe.
    pub(crate) locks: HashMap<u64, VecDeque<usize>>,
    out_io: VecDeque<MemberIo>,
    out_reply: VecDeque<Reply>,
    pub(crate) stats: Stats,
    /// Spreads reads over mirror copies.
    pub(crate) read_rotor: usize,
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
        Engine {
            geo,
            members,
            bufs: Buffers::new(),
            reqs: Slab::default(),
            ops: Slab::default(),
            ios: Slab::default(),
            locks: HashMap::new(),
            out_io: VecDeque::new(),
            out_reply: VecDeque::new(),
            stats: Stats::default(),
            read_rotor: 0,
            now: Nanos(0),
        }
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

    pub fn member_states(&self) -> &[MemberState] {
        &self.members
    }

    /// The latest time the driver handed in.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Marks a member failed (the driver learned it is gone); later work avoids it.
    pub fn fail_member(&mut self, member: MemberIdx) {
        self.members[member.index()] = MemberState::Failed;
    }

    /// Whether nothing is in flight: no request, stripe operation or member I/O.
    pub fn is_idle(&self) -> bool {
        self.reqs.len() == 0 && self.ops.len() == 0 && self.ios.len() == 0
    }

    /// Takes a client request. Bad requests are answered at once through
    /// [`Engine::poll_reply`]; good ones produce member I/Os.
    pub fn handle_request(&mut self, req: Request, now: Nanos) {
        self.now = now;
        if let Err(error) = self.validate(&req) {
            self.out_reply.push_back(Reply {
                id: req.id,
                result: Err(error),
            });
            return;
        }
        if req.kind != RequestKind::Flush && req.sectors == 0 {
            self.out_reply.push_back(Reply {
                id: req.id,
                result: Ok(()),
            });
            return;
        }
        let key = self.reqs.insert(ReqState {
            id: req.id,
            buf: req.buf,
            pending: 1,
            error: None,
        });
        match req.kind {
            RequestKind::Flush => self.submit_flush(key),
            RequestKind::Read | RequestKind::Write => {
                let seg = Segment {
                    sector: req.sector,
                    sectors: req.sectors,
                    buf_off: 0,
                    write: req.kind == RequestKind::Write,
                };
                self.submit_segment(key, seg);
            }
        }
        self.request_step_done(key, None);
    }

    fn validate(&self, req: &Request) -> Result<(), EngineError> {
        if let Some(error) = self.lost_error() {
            return Err(error);
        }
        if req.kind == RequestKind::Flush {
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
        self.now = now;
        let key = usize::try_from(io.0).expect("io ids fit usize");
        let target = self.ios.remove(key);
        if result.is_err() {
            self.stats.io_errors += 1;
        }
        match target {
            IoTarget::Direct { req, member, seg } => {
                if result.is_err() {
                    self.fail_member(member);
                    if seg.write {
                        // The other copies were written; the data survives if one is live.
                        if let Some(error) = self.segment_lost(seg) {
                            self.fail_request(req, error);
                        }
                    } else {
                        self.submit_segment(req, seg);
                    }
                }
                self.request_step_done(req, None);
            }
            IoTarget::Stripe { op, member } => {
                crate::stripe::on_completion(self, op, member, result);
            }
            IoTarget::Flush { req, member } => {
                let mut error = None;
                if result.is_err() {
                    self.fail_member(member);
                    error = self.lost_error();
                }
                self.request_step_done(req, error);
            }
        }
    }

    /// Advances the engine's notion of time. The engine keeps no timers yet: stall
    /// detection arrives with member fault handling.
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.now = now;
    }

    /// When the engine next wants [`Engine::handle_timeout`]; `None` while it has no timer.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    pub fn poll_member_io(&mut self) -> Option<MemberIo> {
        self.out_io.pop_front()
    }

    pub fn poll_reply(&mut self) -> Option<Reply> {
        self.out_reply.pop_front()
    }

    fn submit_segment(&mut self, req: usize, seg: Segment) {
        match self.geo.level() {
            Level::Raid4 | Level::Raid5 | Level::Raid6 => crate::stripe::submit(self, req, seg),
            Level::Raid0 | Level::Raid1 | Level::Raid10 => crate::mirror::submit(self, req, seg),
        }
    }

    fn submit_flush(&mut self, req: usize) {
        for m in 0..self.members.len() {
            let member = member_idx(m);
            if self.is_live(member) {
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
    }

    /// A zero-length slice for I/Os that move no data.
    fn empty_slice(&mut self, req: usize) -> BufSlice {
        let buf = match self.reqs.get(req).buf {
            Some(buf) => buf,
            None => {
                let buf = self.bufs.alloc(0);
                self.reqs.get_mut(req).buf = Some(buf);
                buf
            }
        };
        BufSlice {
            buf,
            offset: 0,
            len: 0,
        }
    }

    pub(crate) fn is_live(&self, member: MemberIdx) -> bool {
        self.members[member.index()] == MemberState::Active
    }

    pub(crate) fn failed_count(&self) -> usize {
        self.members
            .iter()
            .filter(|s| **s == MemberState::Failed)
            .count()
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

    /// Queues one member I/O and remembers what it belongs to.
    pub(crate) fn emit(
        &mut self,
        member: MemberIdx,
        kind: IoKind,
        sector: u64,
        buf: BufSlice,
        target: IoTarget,
    ) {
        debug_assert!(self.is_live(member), "I/O planned for a failed member");
        if let IoTarget::Direct { req, .. } | IoTarget::Flush { req, .. } = target {
            self.reqs.get_mut(req).pending += 1;
        }
        let id = IoId(self.ios.insert(target) as u64);
        match kind {
            IoKind::Read => {
                self.stats.member_reads += 1;
                self.stats.read_bytes += buf.len as u64;
            }
            IoKind::Write => {
                self.stats.member_writes += 1;
                self.stats.write_bytes += buf.len as u64;
            }
            IoKind::Flush => self.stats.member_flushes += 1,
        }
        self.out_io.push_back(MemberIo {
            id,
            member,
            kind,
            sector,
            buf,
        });
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
            let state = self.reqs.remove(req);
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

pub(crate) fn member_idx(m: usize) -> MemberIdx {
    MemberIdx(u16::try_from(m).expect("member counts fit u16"))
}

pub(crate) fn sectors_to_bytes(sectors: u64) -> usize {
    usize::try_from(sectors * SECTOR_BYTES).expect("request sizes fit usize")
}
