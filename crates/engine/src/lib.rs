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
//! Faults, the way md handles them:
//! - a member whose *write* (or flush) fails is marked failed and the affected work is
//!   planned again around it, as long as the level's redundancy allows; beyond that the
//!   request fails with [`EngineError::DataLost`];
//! - a member whose *read* fails keeps serving: the range is rebuilt from redundancy,
//!   returned to the client and rewritten to that member (md's read-error correction).
//!   A member is failed only after more than [`EngineConfig::max_read_errors`] read
//!   errors, or when the rewrite fails too. Unreadable beyond the redundancy, the
//!   request fails with [`EngineError::Unreadable`] and the array stays up;
//! - a member's bad block log (md's; see `badblocks`) lists sectors that hold no good
//!   data: they are never returned (read as a read error, rebuilt and rewritten), and
//!   a RAID-1/10 copy that refuses a write another copy took gets the range listed
//!   instead of being failed.
//!
//! Background work — rebuilding members onto replacements, resync after an unclean
//! stop, scrubbing — runs in *sync units* (a stripe for RAID-4/5/6, a chunk for
//! RAID-10, a fixed window for RAID-1) under the same locks as client writes, paced
//! between [`EngineConfig::sync_min_bytes_per_sec`] and `..._max_...` (see `sync`).

mod badblocks;
pub mod buffers;
mod engine;
mod integrity;
mod intent;
mod latency;
mod mirror;
mod ppl;
mod rebuilt;
pub mod sim;
mod slab;
mod stripe;
mod sync;
mod unknown;

pub use buffers::{BufId, BufSlice, Buffers, IoBuf, IoBufPool, BUF_ALIGN};
pub use engine::Engine;
pub use integrity::{ChecksumTable, Verdict};
pub use intent::{WriteIntentSetup, INTENT_HEADER_BYTES};
pub use ppl::{log_entry_max_sectors, log_ring_sectors_needed, MARKER_RECORDS};
pub use sync::SyncError;
pub use xraid_format::BadBlocks;
pub use xraid_layout::{Geometry, Level, MemberIdx, SECTOR_BYTES};

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
    /// A flush that also makes the integrity checksum tables durable (integrity mode;
    /// otherwise the same as [`RequestKind::Flush`]): drivers use it before they
    /// record the array's state in its superblocks or stop. Clients' flushes need not
    /// write the tables: after a crash the checksums of every block a write may have
    /// torn are forgotten anyway (see `integrity`). Unlike every other request, it
    /// also runs on an array that has failed: the superblocks recording the failure
    /// must be durable.
    Checkpoint,
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
    /// A write that is durable when it completes (FUA): a write and a flush of it in
    /// one I/O. Sent only where [`EngineConfig::fua_writes`] says the driver takes it.
    WriteFua,
    Flush,
}

impl IoKind {
    /// A write of either kind.
    pub fn is_write(self) -> bool {
        matches!(self, IoKind::Write | IoKind::WriteFua)
    }
}

/// Which part of a member an I/O addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Area {
    /// The data area (md's data_offset on).
    #[default]
    Data,
    /// The member's partial-parity log ring, [`EngineConfig::log_sectors`] long, which the
    /// driver places where md ignores it (between the metadata and the data).
    Log,
    /// The member's write-intent bitmap area (md's internal bitmap: its superblock
    /// and bits), counted in sectors from the bitmap's start.
    Bitmap,
    /// The member's checksum table in integrity mode (xraid's integrity area after
    /// md's data area), counted in sectors from the table's first page.
    Checksums,
}

/// One I/O the driver must perform on a member. `sector` counts from the start of the
/// `area` (the member's data area, or its log ring); `buf` is the memory to read into
/// or write from (empty for flush).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberIo {
    pub id: IoId,
    pub member: MemberIdx,
    pub kind: IoKind,
    pub area: Area,
    pub sector: u64,
    pub buf: BufSlice,
}

/// Why a member I/O failed, as far as the engine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoFailed {
    /// The medium could not read or write this range (EIO and the like): a failed read
    /// is repaired from redundancy and rewritten; a failed write fails the member.
    Medium,
    /// The device is gone (ENODEV, ENXIO...): the member is failed at once.
    Gone,
}

impl IoFailed {
    /// Classifies an OS error number.
    pub fn from_errno(errno: Option<i32>) -> IoFailed {
        // ENXIO 6, ENODEV 19, ESHUTDOWN 108, ENOTCONN 107, EPIPE 32, ECONNRESET 104:
        // the device or the link to it is gone, not one bad range.
        match errno {
            Some(6 | 19 | 32 | 104 | 107 | 108) => IoFailed::Gone,
            _ => IoFailed::Medium,
        }
    }
}

/// A member's standing in the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Serving I/O.
    Active,
    /// Absent from the start, or failed while running: no I/O is sent to it.
    Failed,
    /// Being rebuilt by a [`SyncKind::Recover`]: it serves the sync units already
    /// rebuilt and takes writes there; elsewhere it is treated as missing.
    Rebuilding,
}

/// What a background sync does to each sync unit (md's `sync_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncKind {
    /// Rebuild every [`MemberState::Rebuilding`] member from the others.
    Recover,
    /// Make redundancy agree with the data after an unclean stop (parity recomputed,
    /// mirrors copied from the first copy), counting what disagreed.
    Resync,
    /// Read everything and count where redundancy disagrees with the data; change nothing.
    Check,
    /// Like check, and rewrite redundancy where it disagrees.
    Repair,
}

impl SyncKind {
    /// md's word for it, as in `/proc/mdstat` and `sync_action`.
    pub fn name(self) -> &'static str {
        match self {
            SyncKind::Recover => "recover",
            SyncKind::Resync => "resync",
            SyncKind::Check => "check",
            SyncKind::Repair => "repair",
        }
    }
}

/// Where a running sync stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncProgress {
    pub kind: SyncKind,
    /// Every unit below this one is done (the checkpoint to resume from).
    pub done_below: u64,
    /// Units the sync covers in all.
    pub total_units: u64,
    /// Member sectors in one unit.
    pub unit_sectors: u64,
    /// Units where redundancy disagreed with the data.
    pub mismatches: u64,
    /// Units that could not be read or rebuilt (more members missing than the level
    /// tolerates, or unreadable beyond redundancy).
    pub unrecoverable: u64,
}

/// Why the engine failed a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// A write or flush to it failed.
    WriteError,
    /// It returned more read errors than [`EngineConfig::max_read_errors`].
    ReadErrors(u32),
    /// The device reported itself gone.
    DeviceGone,
    /// An I/O to it has not completed within [`EngineConfig::stall_timeout`].
    Stalled,
    /// The driver or an operator asked ([`Engine::fail_member`]).
    Requested,
    /// It took a write that the last in-sync copy of the same data refused (it was
    /// being rebuilt, or was that copy's replacement): left out, so that the copies
    /// cannot disagree.
    Diverged,
    /// Its parity in stripes a crash may have torn, where a data member is missing
    /// and the stripe log's entries were lost, had to be listed as bad, and its bad
    /// block log had no room (see [`Event::TornParityListed`]).
    TornParity,
}

/// Something the driver should know (and record in superblocks or logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A member left the array.
    MemberFailed {
        member: MemberIdx,
        reason: FailReason,
    },
    /// A read error on `member` was repaired from redundancy and rewritten there.
    ReadErrorCorrected {
        member: MemberIdx,
        sector: u64,
        sectors: u64,
    },
    /// A member's service time stands far above its peers' (or came back down):
    /// RAID-1/10 reads avoid it while it is slow. `slow: false` with `mean` 0: its
    /// figures start afresh (a new device took its role, or its rebuild ended).
    SlowMember {
        member: MemberIdx,
        slow: bool,
        mean: Nanos,
        peers: Nanos,
    },
    /// The stripe log was read at start and `replayed` entries of writes cut off by a
    /// crash made parity agree with the data again; in `worked_out` of them a data
    /// member present for the write was gone, and its rows were worked out from the
    /// entry's partial parity (and P). `unknown` sectors of such members could not
    /// be worked out (the write changed another chunk of their rows too): they read
    /// as errors until written (see [`Engine::unknown_sectors`]).
    LogRecovered {
        replayed: u64,
        worked_out: u64,
        unknown: u64,
    },
    /// A sync ran to its end (`completed`) or was cancelled.
    SyncFinished {
        kind: SyncKind,
        completed: bool,
        mismatches: u64,
        unrecoverable: u64,
        /// Units it worked on, and units it skipped as clean in the write-intent
        /// bitmap (a resync after a crash, a member's catch-up), of `total`.
        visited: u64,
        skipped: u64,
        total: u64,
    },
    /// A replacement ([`Engine::start_replacement`]) holds all of its role now and took
    /// it over: the role's I/O goes to the replacement's slot from here on, and the
    /// device that held the role before (in `old_slot`) is out of the array (md marks
    /// it faulty).
    ReplacementDone {
        role: MemberIdx,
        old_slot: MemberIdx,
    },
    /// The member a replacement was being built for left the array (the
    /// [`Event::MemberFailed`] before this one says why): the replacement took the role
    /// over and goes on as an ordinary rebuild of it ([`MemberState::Rebuilding`]).
    ReplacementTookOver {
        role: MemberIdx,
        old_slot: MemberIdx,
    },
    /// A replacement failed and was dropped; the member it was to replace serves on.
    ReplacementFailed { role: MemberIdx, reason: FailReason },
    /// Integrity mode: blocks of `member` read back other than they were written
    /// (member sectors `sector..sector + sectors` hold the first and last of them).
    /// They are repaired as a read error is: rebuilt from redundancy and rewritten.
    ChecksumMismatch {
        member: MemberIdx,
        sector: u64,
        sectors: u64,
    },
    /// A mirror copy refused a write to its sectors `sector..sector + sectors`; the
    /// data stands on another copy, and the range went into the copy's bad block log
    /// instead of the copy being failed (recorded before any reply goes out).
    WriteRefusedRecorded {
        member: MemberIdx,
        sector: u64,
        sectors: u64,
    },
    /// A member being rebuilt could not be given its sectors `sector..sector +
    /// sectors`: no other member holds them (their copies, or rows parity needs, are
    /// listed in bad block logs). They went into its own log — reads of them fail —
    /// and the rebuild goes on around them.
    LostInRebuild {
        member: MemberIdx,
        sector: u64,
        sectors: u64,
    },
    /// A crash may have torn `member`'s parity rows `sector..sector + sectors` in a
    /// stripe where a data member is missing, and the stripe-log entries that would
    /// put them right were on rings that failed to read (md's write hole, a second
    /// fault there). They went into its bad block log: the missing member's rows
    /// there read (and rebuild) as errors, never as what that parity says.
    TornParityListed {
        member: MemberIdx,
        sector: u64,
        sectors: u64,
    },
    /// As [`Event::TornParityListed`], where `member` has no bad block log, or none
    /// with room: the rows are not listed, and `member` serves on. The missing
    /// member's rows there read as errors all the same, by rule, for as long as the
    /// resync the open owes has not completed (the stripe log's markers name the
    /// lost ring, so a restart keeps the doubt).
    TornParityUnlisted {
        member: MemberIdx,
        sector: u64,
        sectors: u64,
    },
}

/// Tunables of an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Read errors a member may return (each repaired) before it is failed; md's
    /// `max_read_errors`, 20 by default.
    pub max_read_errors: u32,
    /// Sync pace per member while client requests are in flight (md's
    /// `sync_speed_min`); a sync never goes slower than this.
    pub sync_min_bytes_per_sec: u64,
    /// Sync pace per member when clients are idle (md's `sync_speed_max`); 0 for no cap.
    pub sync_max_bytes_per_sec: u64,
    /// Sync units in flight at once.
    pub sync_window: usize,
    /// Sectors of each member's partial-parity log ring (RAID-4/5/6); 0 turns the log
    /// off, and with it the closing of the write hole (see `ppl`). A ring must hold its
    /// two 4 KiB marker slots and twice [`log_entry_max_sectors`] besides (the array
    /// sizes rings so); one no larger than the marker slots counts as none.
    pub log_sectors: u64,
    /// Names the array in every stripe-log entry, so that entries another array (or
    /// an earlier array on the same disks) left in a ring are never replayed here;
    /// drivers derive it from the array's UUID.
    pub log_tag: u64,
    /// A member with an I/O outstanding longer than this is failed, so that new work
    /// goes around it (what waits on that I/O still waits for it); 0: never.
    pub stall_timeout: Nanos,
    /// Whether a range a member could not read (or read back wrong, in integrity
    /// mode) is rewritten there once rebuilt from redundancy (md's read-error
    /// correction). Off for an array opened to read only: the rebuilt data is still
    /// returned, and the member keeps serving.
    pub repair_writes: bool,
    /// Whether the driver takes writes that are durable when they complete
    /// ([`IoKind::WriteFua`]); the stripe log's batches then go out as one such write
    /// each instead of a write and a flush.
    pub fua_writes: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_read_errors: 20,
            sync_min_bytes_per_sec: 1_000_000,
            sync_max_bytes_per_sec: 0,
            sync_window: 16,
            log_sectors: 0,
            log_tag: 0,
            stall_timeout: Nanos(30_000_000_000),
            repair_writes: true,
            fua_writes: false,
        }
    }
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
    /// Sectors could be read neither from their member nor rebuilt from redundancy.
    #[error("sectors {sector}..{end} are unreadable: a member returned read errors and the redundancy to rebuild them is gone")]
    Unreadable { sector: u64, end: u64 },
    /// Sectors a member would not take where it holds their only copy (any RAID-0
    /// member; the last copy of a degraded mirror's): the write failed, and the member
    /// serves on, as md's raid0, raid1 and raid10 keep it.
    #[error("sectors {sector}..{end} could not be written: a member returned a write error and the array has no redundancy to keep them elsewhere")]
    Unwritable { sector: u64, end: u64 },
    /// A write inside rows a member took with it when it died with the power (rows
    /// nobody knows: reads of them fail) that would split them into more bands than
    /// the stripe log's markers can name; naming them would take in rows clients
    /// wrote, which would read as lost after a restart. Refused instead; a write over
    /// all of those rows at once is taken.
    #[error("sectors {sector}..{end} were not written: they lie inside rows a member took with it when it died with the power, and the stripe log's markers have no room left to name what a write there would leave unknown; write all of those unknown rows at once")]
    UnknownRowsFull { sector: u64, end: u64 },
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
    /// Read errors repaired from redundancy and rewritten to their member.
    pub read_errors_corrected: u64,
    /// Sync units done (any kind).
    pub sync_units: u64,
    /// Resyncs that ran to their end.
    pub resyncs_completed: u64,
    /// Stripe-log entries the replay could not apply (a member gone or unreadable),
    /// a ring that could not be read counting as one: their stripes may still need a
    /// resync. A resync the rings say is still owed from an earlier open, or that an
    /// array whose rings hold no marker of it owes from its making, counts as one.
    pub log_entries_skipped: u64,
    /// Stripe-log entries the replay applied with data members gone since the write,
    /// their rows worked out from the entry's partial parity (and partial Q).
    pub log_partial_parity_replays: u64,
    /// RAID-6 entries that found no room on their second parity member's ring while
    /// the first held theirs: they gave that back and went to both again after a
    /// checkpoint.
    pub log_second_ring_retries: u64,
    /// Stripe-log ring writes of batches of entries (one per batch unless the ring
    /// wrapped), each durable (FUA) or followed by one flush of its member.
    pub log_writes: u64,
    /// Stripe-log entries those writes carried.
    pub log_entries: u64,
    /// Integrity mode: member reads that returned a block disagreeing with its
    /// checksum (each then repaired as a read error).
    pub checksum_mismatches: u64,
    /// Integrity mode: writes of P's rows whose checksums were worked out from the
    /// data rows' rather than hashed.
    pub parity_checksums_derived: u64,
}
