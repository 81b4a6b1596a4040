//! The sans-I/O array engine: it turns client requests on an array into plans of
//! member I/Os and turns member completions into client replies.
//!
//! **Architecture invariant:** the engine never calls the operating system and never
//! reads a clock. It is handed requests ([`Engine::handle_request`]), member
//! completions ([`Engine::handle_completion`]) and the time ([`Engine::handle_timeout`]);
//! it emits member I/Os ([`Engine::poll_member_io`]) and replies ([`Engine::poll_reply`]).
//! Members are plain [`MemberIdx`] numbers and member sectors are relative to each
//! member's data area; the driver owns files, descriptors and the data offset.
//! Buffers live in the engine's [`Buffers`] table and are lent to the driver by handle.
//!
//! What it plans, per request:
//! - RAID-0/1/10: reads go to one live copy, straight into the client's buffer; writes go
//!   to every live copy, straight from it.
//! - RAID-4/5/6 reads: straight into the client's buffer from the member holding the
//!   data; data on a missing member is rebuilt from the rest of its stripe.
//! - RAID-4/5/6 writes: per stripe, read-modify-write or reconstruct-write (a full-stripe
//!   write is a reconstruct-write with nothing to read), whichever needs fewer member
//!   reads; with members missing, a plan that never needs their contents, or else a
//!   rebuild of the stripe's rows before new parity is computed. Writes to one stripe are
//!   serialised by a per-stripe lock, so parity always matches the data it covers.
//!
//! A member whose I/O fails is marked failed and the affected work is planned again
//! around it, as long as the level's redundancy allows; beyond that the request fails
//! with [`EngineError::DataLost`].

pub mod buffers;
mod engine;
mod mirror;
pub mod sim;
mod slab;
mod stripe;

pub use buffers::{BufId, BufSlice, Buffers, IoBuf, BUF_ALIGN};
pub use engine::Engine;
pub use xraid_layout::{Geometry, MemberIdx, SECTOR_BYTES};

/// A point in time handed to the engine, in nanoseconds from an origin the driver picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

/// The caller's name for a request; echoed in its [`Reply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId(pub u64);

/// What a client asks of the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// Fill `buf` with `sectors` sectors from `sector` on.
    Read,
    /// Store `buf`'s `sectors` sectors at `sector`.
    Write,
    /// Make every completed write durable on every live member.
    Flush,
}

/// One client request. `buf` holds exactly `sectors * 512` bytes (none for a flush); the
/// engine borrows it until the request's reply and never frees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub id: RequestId,
    pub kind: RequestKind,
    pub sector: u64,
    pub sectors: u64,
    pub buf: Option<BufId>,
}

/// The outcome of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub id: RequestId,
    pub result: Result<(), EngineError>,
}

/// The engine's name for one member I/O; the driver passes it back on completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IoId(pub u64);

/// What a member I/O does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    Flush,
}

/// One I/O the driver must perform on a member. `sector` counts from the start of the
/// member's data area; `buf` is the memory to read into or write from (empty for flush).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberIo {
    pub id: IoId,
    pub member: MemberIdx,
    pub kind: IoKind,
    pub sector: u64,
    pub buf: BufSlice,
}

/// Why a member I/O failed, as far as the engine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoFailed;

/// A member's standing in the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Serving I/O.
    Active,
    /// Absent from the start, or failed while running: no I/O is sent to it.
    Failed,
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The request reaches past the array's end.
    #[error("request for sectors {sector}..{end} reaches past the array's end at sector {array_sectors}")]
    OutOfRange {
        sector: u64,
        end: u64,
        array_sectors: u64,
    },
    /// The buffer does not hold exactly the request's bytes.
    #[error("request of {expected} bytes came with a buffer of {actual} bytes")]
    BufferSize { expected: usize, actual: usize },
    /// More members have failed than the level can survive.
    #[error("data lost: {failed} of {raid_disks} members have failed and {level} survives at most {tolerated}")]
    DataLost {
        failed: usize,
        raid_disks: u16,
        level: xraid_layout::Level,
        tolerated: usize,
    },
}

/// Counters of what the engine planned; the lab and tests read them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub member_reads: u64,
    pub member_writes: u64,
    pub member_flushes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Stripe writes done by read-modify-write.
    pub rmw: u64,
    /// Stripe writes done by reconstruct-write that had to read something.
    pub rcw: u64,
    /// Stripe writes that covered whole rows and read nothing.
    pub full_stripe: u64,
    /// Stripe writes or reads that rebuilt a missing member's rows first.
    pub reconstruct: u64,
    /// Member I/Os that failed.
    pub io_errors: u64,
}
