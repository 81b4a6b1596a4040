//! A deterministic in-memory driver: members are byte vectors, member I/Os complete
//! one at a time in an order drawn from a seed, and time is a simulated clock.
//!
//! It drives the same [`Engine`] the real driver does, with no threads and no OS, so
//! tests can replay any interleaving from its seed and inject member failures.

use std::collections::VecDeque;

use xraid_layout::{Geometry, MemberIdx, SECTOR_BYTES};

use crate::{
    BufId, Engine, EngineError, IoFailed, IoKind, MemberIo, MemberState, Nanos, Reply, Request,
    RequestId, RequestKind,
};

/// Simulated time one member I/O takes; only its order matters to tests.
const IO_TICK: Nanos = Nanos(100_000);

/// A small, fast, seedable generator (SplitMix64): enough for picking orders.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// How a simulated member behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimMemberHealth {
    Healthy,
    /// Every I/O to it fails.
    Dead,
}

/// An array of in-memory members driven by an [`Engine`].
#[derive(Debug)]
pub struct SimArray {
    pub engine: Engine,
    /// Each member's data area.
    pub members: Vec<Vec<u8>>,
    pub health: Vec<SimMemberHealth>,
    rng: SimRng,
    now: Nanos,
    in_flight: Vec<MemberIo>,
    replies: VecDeque<Reply>,
    next_id: u64,
    /// Complete member I/Os in seeded random order (true) or in issue order.
    pub shuffle: bool,
}

impl SimArray {
    /// Zero-filled members for `geo`, all healthy.
    pub fn new(geo: Geometry, seed: u64) -> SimArray {
        let n = usize::from(geo.raid_disks());
        let member_bytes =
            usize::try_from(geo.member_sectors() * SECTOR_BYTES).expect("fits memory");
        SimArray {
            engine: Engine::new(geo, vec![MemberState::Active; n]),
            members: vec![vec![0; member_bytes]; n],
            health: vec![SimMemberHealth::Healthy; n],
            rng: SimRng::new(seed),
            now: Nanos(0),
            in_flight: Vec::new(),
            replies: VecDeque::new(),
            next_id: 0,
            shuffle: true,
        }
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    pub fn rng(&mut self) -> &mut SimRng {
        &mut self.rng
    }

    /// Starts a read of `sectors` at `sector`; returns its id and buffer.
    pub fn start_read(&mut self, sector: u64, sectors: u64) -> (RequestId, BufId) {
        let len = usize::try_from(sectors * SECTOR_BYTES).expect("fits memory");
        let buf = self.engine.buffers_mut().alloc(len);
        let id = self.submit(RequestKind::Read, sector, sectors, Some(buf));
        (id, buf)
    }

    /// Starts a write of `data` at `sector`; returns its id and buffer.
    pub fn start_write(&mut self, sector: u64, data: &[u8]) -> (RequestId, BufId) {
        let buf = self.engine.buffers_mut().alloc(data.len());
        self.engine.buffers_mut().get_mut(buf).copy_from_slice(data);
        let sectors = data.len() as u64 / SECTOR_BYTES;
        let id = self.submit(RequestKind::Write, sector, sectors, Some(buf));
        (id, buf)
    }

    pub fn start_flush(&mut self) -> RequestId {
        self.submit(RequestKind::Flush, 0, 0, None)
    }

    fn submit(
        &mut self,
        kind: RequestKind,
        sector: u64,
        sectors: u64,
        buf: Option<BufId>,
    ) -> RequestId {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let req = Request {
            id,
            kind,
            sector,
            sectors,
            buf,
        };
        self.engine.handle_request(req, self.now);
        self.collect();
        id
    }

    fn collect(&mut self) {
        while let Some(io) = self.engine.poll_member_io() {
            self.in_flight.push(io);
        }
        while let Some(reply) = self.engine.poll_reply() {
            self.replies.push_back(reply);
        }
    }

    /// Completes one member I/O, if any is in flight. Returns whether one was.
    pub fn step(&mut self) -> bool {
        if self.in_flight.is_empty() {
            return false;
        }
        let pick = if self.shuffle {
            self.rng.below(self.in_flight.len() as u64) as usize
        } else {
            0
        };
        let io = self.in_flight.swap_remove(pick);
        self.now = Nanos(self.now.0 + IO_TICK.0);
        let result = self.perform(&io);
        self.engine.handle_completion(io.id, result, self.now);
        self.collect();
        true
    }

    fn perform(&mut self, io: &MemberIo) -> Result<(), IoFailed> {
        let m = io.member.index();
        if self.health[m] == SimMemberHealth::Dead {
            return Err(IoFailed);
        }
        let at = usize::try_from(io.sector * SECTOR_BYTES).expect("fits memory");
        let member = &mut self.members[m];
        let bufs = self.engine.buffers_mut();
        match io.kind {
            IoKind::Read => bufs
                .slice_mut(io.buf)
                .copy_from_slice(&member[at..at + io.buf.len]),
            IoKind::Write => member[at..at + io.buf.len].copy_from_slice(bufs.slice(io.buf)),
            IoKind::Flush => {}
        }
        Ok(())
    }

    /// Runs until no member I/O is in flight; returns the replies gathered.
    pub fn run(&mut self) -> Vec<Reply> {
        while self.step() {}
        self.replies.drain(..).collect()
    }

    /// Reads synchronously (runs everything in flight to completion).
    pub fn read(&mut self, sector: u64, sectors: u64) -> Result<Vec<u8>, EngineError> {
        let (id, buf) = self.start_read(sector, sectors);
        let result = self.finish(id);
        let data = self.engine.buffers().get(buf).to_vec();
        self.engine.buffers_mut().free(buf);
        result.map(|()| data)
    }

    /// Writes synchronously.
    pub fn write(&mut self, sector: u64, data: &[u8]) -> Result<(), EngineError> {
        let (id, buf) = self.start_write(sector, data);
        let result = self.finish(id);
        self.engine.buffers_mut().free(buf);
        result
    }

    fn finish(&mut self, id: RequestId) -> Result<(), EngineError> {
        let replies = self.run();
        let mine = replies
            .iter()
            .find(|r| r.id == id)
            .expect("request replied");
        assert!(
            replies.iter().all(|r| r.id == id),
            "synchronous calls run alone"
        );
        mine.result.clone()
    }

    /// Takes a member out: its I/Os fail from now on, and the engine learns of it from
    /// the first one that fails.
    pub fn kill_member(&mut self, member: MemberIdx) {
        self.health[member.index()] = SimMemberHealth::Dead;
    }
}
