//! An md array served over NBD: one worker thread owns the array's engine and driver;
//! connection threads hand it jobs and it hands back replies.
//!
//! Two lanes: small requests are admitted to the engine as soon as they arrive, while
//! large ones (a stream of 1 MiB writes, say) are admitted only while the large
//! requests already in the engine stay under a byte budget. A 4 KiB read therefore
//! never queues behind a deep pile of megabyte writes, in the engine or in the
//! kernel's queues beneath it, which is what RAID-II's second network was for.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use xraid_array::Array;
use xraid_driver::{DriverError, ReadBypass, Waker};
use xraid_engine::{
    BufId, EngineError, Event, IoBuf, IoBufPool, MemberIdx, MemberState, RequestId, RequestKind,
    SyncKind, SECTOR_BYTES,
};
use xraid_nbd::consts::{EINVAL, EIO, REPLY_FLAG_DONE, STATE_HOLE, STATE_ZERO};
use xraid_nbd::{block_status_chunk, BlockDescriptor};

use crate::handshake::BASE_ALLOCATION_ID;
use crate::log;
use crate::log_budget::{Fault, LogBudget, Say};
use crate::published::{millis, Published, PUBLISH_EVERY};

/// Requests of at least this many bytes take the large lane.
const LARGE_REQUEST_BYTES: usize = crate::lane::BULK_BYTES as usize;
/// Bytes of large requests the engine works on at once.
const LARGE_LANE_BUDGET: usize = 4 << 20;
/// Pieces a WRITE_ZEROES is split into.
const ZERO_PIECE_BYTES: usize = 1 << 20;
/// Bytes of one WRITE_ZEROES (or trim) in the engine at once.
const ZERO_WINDOW_BYTES: usize = 8 << 20;

/// What a connection asks the array to do.
#[derive(Debug)]
pub(crate) enum JobOp {
    Read {
        offset: u64,
        len: usize,
    },
    Write {
        offset: u64,
        buf: IoBuf,
        len: usize,
        fua: bool,
    },
    /// Zeros over `len` bytes from `offset`; with `punch`, members may store them by
    /// freeing the range (a trim, or a write of zeros that allows holes).
    WriteZeroes {
        offset: u64,
        len: u64,
        fua: bool,
        punch: bool,
    },
    Flush,
    /// Which of `len` bytes from `offset` surely read as zeros (NBD's
    /// `base:allocation`), in at most `max_extents` extents; answered at once.
    BlockStatus {
        offset: u64,
        len: u64,
        max_extents: usize,
    },
    /// A control request from the control socket (see `control`), answered at once —
    /// unless it reaches the worker after `deadline`, when its client has stopped
    /// waiting: it is then dropped, not carried out behind the client's back.
    Control {
        request: serde_json::Value,
        reply: Sender<serde_json::Value>,
        deadline: std::time::Instant,
    },
}

impl JobOp {
    fn bytes(&self) -> usize {
        match self {
            JobOp::Read { len, .. } | JobOp::Write { len, .. } => *len,
            JobOp::WriteZeroes { len, .. } => usize::try_from(*len).unwrap_or(usize::MAX),
            JobOp::Flush | JobOp::BlockStatus { .. } | JobOp::Control { .. } => 0,
        }
    }

    fn writes(&self) -> bool {
        matches!(self, JobOp::Write { .. } | JobOp::WriteZeroes { .. })
    }
}

/// One client request for the worker.
#[derive(Debug)]
pub(crate) struct Job {
    pub op: JobOp,
    pub cookie: u64,
    pub done: Sender<Done>,
    /// Bytes the connection counts against its in-flight budget, handed back with the
    /// reply.
    pub flight_bytes: usize,
}

/// A finished job (or a reply the connection made itself), for the connection's writer.
#[derive(Debug)]
pub(crate) enum Done {
    /// `Ok(Some(..))` carries a read's data.
    Job {
        cookie: u64,
        result: Result<Option<ReadData>, u32>,
        flight_bytes: usize,
    },
    /// A reply already encoded, and how many in-flight units it releases.
    Raw { bytes: Vec<u8>, releases: usize },
}

#[derive(Debug)]
pub(crate) struct ReadData {
    pub offset: u64,
    pub buf: IoBuf,
    pub len: usize,
}

/// How connections reach an array's worker.
#[derive(Debug, Clone)]
pub(crate) struct ArrayHandle {
    tx: Sender<Job>,
    waker: Waker,
    sleeping: Arc<AtomicBool>,
    pub size: u64,
    /// Bytes of one full stripe of data, the preferred request size.
    pub stripe_bytes: u64,
    /// Small reads the connection thread may do itself (see `xraid_driver::ReadBypass`).
    pub bypass: ReadBypass,
    /// What a trim frees at least: a full stripe of data on RAID-4/5/6, where parity
    /// stays right only when whole stripes become zeros together; a 4 KiB file-system
    /// block on the other levels.
    pub trim_unit: u64,
    /// The smallest request the export takes: 512 bytes, or in integrity mode 4 KiB
    /// (a write of part of a checksummed block would leave that block unchecked).
    pub min_block: u32,
    /// The minimum block size advertised to clients: `min_block`, or the members'
    /// largest logical block size where that is larger (4096 on 4Kn disks), as md's
    /// block device would have it, so that a file system made through the export
    /// still mounts on md. Smaller requests are still taken (read around).
    pub advertised_block: u32,
    /// Payload buffers, reused between connections, the worker and reply writers.
    pub pool: IoBufPool,
    /// The worker's last status and heartbeat, for a control socket it cannot answer.
    pub published: Arc<Published>,
}

impl ArrayHandle {
    /// Hands a job to the worker; gives it back if the worker is gone.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        self.tx.send(job).map_err(|mpsc::SendError(job)| job)?;
        // The worker sets `sleeping` before it blocks on member I/O and looks at its
        // queue once more after; a job sent after that look finds the flag set.
        if self.sleeping.swap(false, Ordering::SeqCst) {
            self.waker.wake();
        }
        Ok(())
    }
}

/// Splits `len` bytes of zeros from `offset` into requests of about
/// [`ZERO_PIECE_BYTES`] that start and end on stripe boundaries where they can, so the
/// engine writes whole stripes (nothing to read, parity from the zeros alone).
fn zero_pieces(offset: u64, len: u64, stripe: u64) -> Vec<(u64, usize)> {
    let stripe = stripe.max(SECTOR_BYTES);
    let piece = (ZERO_PIECE_BYTES as u64 / stripe).max(1) * stripe;
    let end = offset + len;
    let mut pieces = Vec::new();
    let mut at = offset;
    while at < end {
        // To the next stripe boundary first, then whole pieces.
        let next = if at.is_multiple_of(stripe) {
            at + piece
        } else {
            at.next_multiple_of(stripe)
        };
        let stop = next.min(end);
        pieces.push((at, (stop - at) as usize));
        at = stop;
    }
    pieces
}

/// How often the worker looks at the clock when nothing else wakes it, idle or waiting
/// on member I/O: the engine's timers (an I/O past the stall timeout, a paced sync's
/// next unit) and the rebuild checkpoints must not wait for the next client request.
const WAKE_EVERY: Duration = Duration::from_millis(100);

/// Starts the thread that wakes the worker out of its wait on member I/O every
/// [`WAKE_EVERY`], by calling `wake`. Neither I/O backend's wait takes a deadline, and
/// without this a member whose I/O never completes would never be found stalled while
/// no request arrives. It wakes only a worker that says it sleeps (`sleeping`, cleared
/// here as a submitter would) and ends once the worker is gone.
fn spawn_alarm(
    sleeping: Weak<AtomicBool>,
    wake: impl Fn() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("xraid-alarm".to_owned())
        .spawn(move || loop {
            std::thread::sleep(WAKE_EVERY);
            let Some(flag) = sleeping.upgrade() else {
                return;
            };
            if flag.swap(false, Ordering::SeqCst) {
                wake();
            }
        })
}

/// Starts the worker for `array`; it runs until every handle is dropped, then flushes
/// and marks the array clean.
pub(crate) fn spawn(
    mut array: Array,
    name: String,
    read_only: bool,
) -> Result<(ArrayHandle, JoinHandle<Closed>), DriverError> {
    let (tx, rx) = mpsc::channel();
    let sleeping = Arc::new(AtomicBool::new(false));
    let waker = array.driver().waker()?;
    let geo = *array.driver().engine().geometry();
    let alarm = waker.clone();
    spawn_alarm(Arc::downgrade(&sleeping), move || alarm.wake())
        .map_err(|e| DriverError::Backend(format!("cannot start the array's alarm thread: {e}")))?;
    // The stripe log's replay, if any, started at open: no bypassed read before it ends.
    array.driver().publish_bypass();
    let min_block = if array.driver().engine().integrity_on() {
        xraid_format::BLOCK_BYTES as u32
    } else {
        512
    };
    // Hot spares too, as md stacks them; a device with larger blocks is refused later.
    let members_block = array.logical_block_bytes();
    let handle = ArrayHandle {
        tx,
        waker,
        sleeping: Arc::clone(&sleeping),
        size: geo.array_sectors() * SECTOR_BYTES,
        stripe_bytes: geo.stripe_data_sectors() * SECTOR_BYTES,
        bypass: array.driver().read_bypass(),
        trim_unit: if geo.level().has_parity() {
            geo.stripe_data_sectors() * SECTOR_BYTES
        } else {
            4096
        },
        min_block,
        advertised_block: min_block.max(members_block),

        pool: IoBufPool::new(),
        published: Arc::new(Published::new(Some(array.driver().device_io_watch()))),
    };
    let engine = array.driver_ref().engine();
    // The stripe log found nothing of the array on its rings while a resync is owed.
    let knew_nothing = engine.log_knew_nothing();
    let whole = engine.is_whole();
    if let Some(p) = engine.sync_progress() {
        let why = match p.kind {
            xraid_engine::SyncKind::Recover => "has members being rebuilt: recover".to_owned(),
            _ if array.made_unsynced() => {
                "was made over old contents (parity or copies are made to agree with them): initial resync".to_owned()
            }
            kind if knew_nothing => format!(
                "owes a resync its stripe log knows nothing of (not resynced since it was made, or left dirty by md or by a server without the log): {}",
                kind.name()
            ),
            kind if array.stopped_mid_resync() => {
                format!("was stopped with its resync part done: {}", kind.name())
            }
            kind => format!("was not stopped cleanly: {}", kind.name()),
        };
        let bitmap = match (engine.write_intent_dirty(), engine.write_intent_chunks()) {
            (Some(dirty), Some(chunks)) if p.kind == xraid_engine::SyncKind::Resync => format!(
                " (only the {dirty} chunks of {chunks} the write-intent bitmap marks dirty)"
            ),
            _ => String::new(),
        };
        log::info(&format!(
            "array '{name}' {why} running in the background from unit {} of {}{bitmap}",
            p.done_below, p.total_units
        ));
    } else if !array.was_dirty() {
    } else if read_only {
        log::info(&format!(
            "array '{name}' owes a resync (not stopped cleanly, or not resynced since it was made); served read-only, it waits for a server that writes"
        ));
    } else if whole {
        // Nothing to resync with (RAID-0).
    } else if array.made_unsynced() {
        log::error(&format!(
            "array '{name}' was made over old contents and is degraded before its initial resync: a missing member's rows nobody wrote since are rebuilt from parity that never agreed with them; the resync follows once a member takes the missing one's place and is rebuilt"
        ));
    } else if knew_nothing {
        log::error(&format!(
            "array '{name}' owes a resync its stripe log knows nothing of (not resynced since it was made, or left dirty by md or by a server without the log) and is degraded: a missing member's rows in a stripe a cut-off write tore are rebuilt wrong from its parity (md's write hole); the resync follows once a member takes the missing one's place and is rebuilt"
        ));
    } else if array.stripe_log_sectors().is_some() {
        if engine.stats().log_entries_skipped == 0 {
            log::info(&format!(
                "array '{name}' was not stopped cleanly and is degraded: the stripe log put parity right where writes were cut off"
            ));
        } else {
            log::error(&format!(
                "array '{name}' was not stopped cleanly and is degraded, and the stripe log could not replay all it held (a ring or rows failed to read): where that leaves a missing member's data unknown, it is listed as lost and reads as an error"
            ));
        }
    } else if array.resync_pending() {
        log::error(&format!(
            "array '{name}' was not stopped cleanly and is degraded: parity cannot be checked against the missing member (md's write hole); the resync follows once a member takes the missing one's place and is rebuilt"
        ));
    }
    let worker = Worker {
        pool: handle.pool.clone(),
        published: Arc::clone(&handle.published),
        published_at: None,
        array,
        name,
        read_only,
        rx,
        sleeping,
        small: VecDeque::new(),
        large: VecDeque::new(),
        large_bytes: 0,
        parts: HashMap::new(),
        running: HashMap::new(),
        next_job: 0,
        began_writes: false,
        reniced_at: None,
        checkpoints: xraid_array::SyncCheckpoints::new(
            xraid_array::CheckpointPace::default(),
            std::time::Instant::now(),
        ),
        last_sync: None,
        scrub_start: None,
        losses: 0,
        log_budget: LogBudget::default(),
        ticked_at: std::time::Instant::now(),
        unrecorded: false,
    };
    let thread = std::thread::Builder::new()
        .name("xraid-array".to_owned())
        .spawn(move || worker.run())
        .map_err(|e| DriverError::Backend(format!("cannot start the array thread: {e}")))?;
    Ok((handle, thread))
}

/// A job the engine is working on.
#[derive(Debug)]
struct Running {
    cookie: u64,
    flight_bytes: usize,
    done: Sender<Done>,
    /// Engine requests still out for it.
    remaining: usize,
    error: Option<u32>,
    read: Option<(u64, BufId, usize)>,
    large_bytes: usize,
    fua: bool,
    flushing: bool,
    /// Pieces of zeros still to hand the engine (a long write-zeroes or trim goes in
    /// a window of [`ZERO_WINDOW_BYTES`]), and whether members may free them.
    zeros_left: VecDeque<(u64, usize)>,
    punch: bool,
}

/// One engine request and the job it belongs to.
#[derive(Debug)]
struct Part {
    job: u64,
    /// A buffer to take back from the engine when the request is done (writes).
    release: Option<BufId>,
}

struct Worker {
    /// Where read buffers come from and write payloads go back to.
    pool: IoBufPool,
    /// Where the loop beats and the status goes now and then, for the control socket.
    published: Arc<Published>,
    /// When the status was last published.
    published_at: Option<std::time::Instant>,
    array: Array,
    name: String,
    read_only: bool,
    rx: Receiver<Job>,
    sleeping: Arc<AtomicBool>,
    small: VecDeque<Job>,
    large: VecDeque<Job>,
    large_bytes: usize,
    parts: HashMap<RequestId, Part>,
    running: HashMap<u64, Running>,
    next_job: u64,
    began_writes: bool,
    reniced_at: Option<std::time::Instant>,
    /// When a running rebuild's progress next goes to the superblocks.
    checkpoints: xraid_array::SyncCheckpoints,
    /// How the last sync ended, for the control socket's status.
    last_sync: Option<serde_json::Value>,
    /// The scrub started through the control socket: the engine's counts of read errors
    /// corrected and checksum mismatches when it began, and its unit, so that its
    /// report says what it found as the offline scrub's does.
    scrub_start: Option<ScrubStart>,
    ticked_at: std::time::Instant,
    /// A member failure the superblocks do not say yet (their writes failed): until
    /// they do, no write is acknowledged, since after a crash the failed member would
    /// come back as current and lose what those writes changed.
    unrecorded: bool,
    /// How many of each member's recurring faults were logged (see `log_budget`).
    log_budget: LogBudget,
    /// Requests that failed for data the array has lost (unreadable, unwritable), and
    /// how many of them were logged (the first `MAX_LOSSES_LOGGED`).
    losses: u64,
}

/// What a scrub's report is worked out from when it ends (see `Worker::scrub_start`).
#[derive(Debug, Clone, Copy)]
struct ScrubStart {
    kind: SyncKind,
    /// Sectors the bad block logs listed.
    listed_sectors: u64,
    read_errors_corrected: u64,
    checksum_mismatches: u64,
    unit_sectors: u64,
}

/// Lost ranges the log names one by one; past that they are counted (status shows the
/// count), so that a client retrying a bad block cannot flood the log.
const MAX_LOSSES_LOGGED: u64 = 100;

/// How an array's worker left its array at the stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Flushed and marked clean.
    Clean,
    /// Flushed; its resync is still owed and goes on at the next start, so md reads
    /// it as active until then.
    ResyncUnfinished,
    /// Not marked clean (the log says why): the next start resyncs it.
    NotClean,
}

impl Worker {
    /// Serves until every handle is gone, then closes the array; how it left it.
    fn run(mut self) -> Closed {
        if let Err(e) = self.serve() {
            log::error(&format!("array '{}' stopped: {e}", self.name));
            self.fail_everything();
            return Closed::NotClean;
        }
        // Closed with a resync still owed, the array is flushed but not marked clean:
        // its superblocks record where the resync got to.
        let resync_left = self.array.resync_pending();
        let lost = self.array.driver_ref().engine().lost_error();
        match self.array.close() {
            Ok(()) => {
                if let Some(lost) = lost {
                    log::error(&format!(
                        "array '{}' has failed ({lost}): left dirty, with the members that failed recorded faulty; it does not start until enough are back (`xraid serve --force` takes back those that failed last)",
                        self.name
                    ));
                    Closed::NotClean
                } else if resync_left {
                    log::info(&format!(
                        "array '{}': flushed, with its resync unfinished (md reads the array as active until it is done): the next start that writes goes on with it",
                        self.name
                    ));
                    Closed::ResyncUnfinished
                } else {
                    Closed::Clean
                }
            }
            Err(e) => {
                log::error(&format!(
                    "array '{}': could not mark it clean: {e}",
                    self.name
                ));
                Closed::NotClean
            }
        }
    }

    fn serve(&mut self) -> Result<(), DriverError> {
        // What happened at open (the stripe log's replay, a member failed or a range
        // listed there) is logged, and recorded, before anything else.
        self.collect();
        loop {
            self.beat();
            let idle = self.small.is_empty() && self.large.is_empty() && !self.busy();
            if idle {
                match self.rx.recv_timeout(WAKE_EVERY) {
                    Ok(job) => self.enqueue(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
                }
            }
            while let Ok(job) = self.rx.try_recv() {
                self.enqueue(job);
            }
            self.admit();
            self.array.driver().pump(false)?;
            if self.ticked_at.elapsed() >= WAKE_EVERY {
                // The engine's clock: stalled members are found by it.
                self.ticked_at = std::time::Instant::now();
                self.array.driver().tick();
            }
            self.collect();
            if !self.busy() {
                continue;
            }
            if !self.array.driver().io_in_flight() && self.running.is_empty() {
                // Only a paced sync is left: wait for its timer or a client.
                let wait = self
                    .array
                    .driver()
                    .until_timer()
                    .unwrap_or(Duration::from_millis(10))
                    .min(WAKE_EVERY);
                match self.rx.recv_timeout(wait) {
                    Ok(job) => self.enqueue(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
                }
                self.array.driver().tick();
                continue;
            }
            self.sleeping.store(true, Ordering::SeqCst);
            if let Ok(job) = self.rx.try_recv() {
                self.sleeping.store(false, Ordering::SeqCst);
                self.enqueue(job);
                continue;
            }
            // Ends with a completion, a new job, or the alarm (`spawn_alarm`).
            self.array.driver().pump(true)?;
            self.sleeping.store(false, Ordering::SeqCst);
            self.collect();
        }
    }

    /// The loop comes round: said where the control socket sees it, with the status
    /// now and then (see `published`).
    fn beat(&mut self) {
        self.published.beat();
        let due = self
            .published_at
            .is_none_or(|at| at.elapsed() >= PUBLISH_EVERY);
        if due {
            self.publish_now();
        }
    }

    /// Publishes the status now (the loop's round is due, or the engine changed and
    /// the thread may be held next).
    fn publish_now(&mut self) {
        let status = self.status();
        self.published.publish(status);
        self.published_at = Some(std::time::Instant::now());
    }

    /// Answers a control request (see `control`).
    fn control(&mut self, request: &serde_json::Value) -> serde_json::Value {
        match request["op"].as_str() {
            Some("status") => self.status(),
            Some("fail") => {
                let Some(path) = request["member"].as_str() else {
                    return crate::control::error_reply("fail needs \"member\": the member's path");
                };
                self.fail(std::path::Path::new(path))
            }
            Some("add") => {
                let Some(path) = request["member"].as_str() else {
                    return crate::control::error_reply(
                        "add needs \"member\": the new member's path",
                    );
                };
                let size = request["size"].as_u64();
                let spare = request["spare"].as_bool().unwrap_or(false);
                let force = request["force"].as_bool().unwrap_or(false);
                self.add(std::path::Path::new(path), size, spare, force)
            }
            Some("replace") => {
                let (Some(old), Some(new)) = (request["member"].as_str(), request["new"].as_str())
                else {
                    return crate::control::error_reply(
                        "replace needs \"member\" (the member to replace) and \"new\" (its replacement)",
                    );
                };
                let size = request["size"].as_u64();
                let force = request["force"].as_bool().unwrap_or(false);
                self.replace(
                    std::path::Path::new(old),
                    std::path::Path::new(new),
                    size,
                    force,
                )
            }
            Some("remove") => {
                let Some(path) = request["member"].as_str() else {
                    return crate::control::error_reply(
                        "remove needs \"member\": the member's path",
                    );
                };
                self.remove(std::path::Path::new(path))
            }
            Some("scrub") => {
                let kind = match request["action"].as_str() {
                    Some("check") => SyncKind::Check,
                    Some("repair") => SyncKind::Repair,
                    _ => {
                        return crate::control::error_reply(
                            "scrub needs \"action\": check or repair",
                        )
                    }
                };
                self.scrub(kind)
            }
            _ => crate::control::error_reply(
                "unknown op: use status, fail, scrub, add, replace or remove",
            ),
        }
    }

    fn status(&mut self) -> serde_json::Value {
        let engine = self.array.driver_ref().engine();
        let geo = *engine.geometry();
        let states = engine.member_states().to_vec();
        let progress = engine.sync_progress();
        let lost = engine.lost_error().is_some();
        let replacing = self.array.replacing();
        let percent = |p: &xraid_engine::SyncProgress| {
            (p.done_below * 100)
                .checked_div(p.total_units)
                .unwrap_or(100)
        };
        // Bytes a sync has covered, and in all: of each member's data area, or for
        // RAID-10, whose syncs walk the array's chunks, of the array.
        let unit_bytes = progress.map_or(0, |p| p.unit_sectors * SECTOR_BYTES);
        let members: Vec<serde_json::Value> = states
            .iter()
            .enumerate()
            .map(|(role, state)| {
                let member = MemberIdx(u16::try_from(role).unwrap_or(u16::MAX));
                // How far it is rebuilt: the running walk, or further where it kept
                // what a walk did for it before starting over for a newcomer.
                let rebuilt_below = match (state, progress) {
                    (MemberState::Rebuilding, Some(p)) if p.kind == SyncKind::Recover => {
                        Some(engine.rebuilt_below(member))
                    }
                    (MemberState::Rebuilding, _) => Some(0),
                    _ => None,
                };
                let rebuilt = rebuilt_below.map(|done_below| match progress {
                    Some(p) => percent(&xraid_engine::SyncProgress { done_below, ..p }),
                    None => 0,
                });
                // A replacement being built for this role (md's want_replacement).
                let replacement = replacing
                    .get(role)
                    .cloned()
                    .flatten()
                    .map(|(path, copied)| {
                        serde_json::json!({
                            "path": path.display().to_string(),
                            "copied_percent": copied,
                        })
                    });
                let path = self.array.role_path(role).map(|p| p.display().to_string());
                serde_json::json!({
                    "role": role,
                    "state": match state {
                        MemberState::Active => "active",
                        // Removed (`xraid remove`): no device holds the role, as the
                        // status of an array not served says (md: "removed").
                        MemberState::Failed if path.is_none() => "missing",
                        MemberState::Failed => "faulty",
                        MemberState::Rebuilding => "rebuilding",
                    },
                    "rebuilt_percent": rebuilt,
                    "rebuilt_bytes": rebuilt_below.map(|units| units * unit_bytes),
                    "replacement": replacement,
                    "path": path,
                    "latency_ms": engine.member_latency(member).map(|n| n.0 as f64 / 1e6),
                    "slow": engine.is_slow(member),
                    "read_errors": engine.read_errors(member),
                    "checksum_mismatches": engine.checksum_mismatches(member),
                    "bad_block_sectors": engine.bad_block_sectors(member),
                })
            })
            .collect();
        let health = if lost {
            "failed"
        } else if states.contains(&MemberState::Rebuilding) {
            "recovering"
        } else if states.contains(&MemberState::Failed) {
            "degraded"
        } else if replacing.iter().any(Option::is_some) {
            "replacing"
        } else {
            match progress.map(|p| p.kind) {
                Some(SyncKind::Resync) => "resyncing",
                Some(SyncKind::Check) => "checking",
                Some(SyncKind::Repair) => "repairing",
                _ => "clean",
            }
        };
        serde_json::json!({
            "ok": true,
            "served": true,
            "name": self.name,
            "uuid": self.array.uuid(),
            "level": geo.level().to_string(),
            // RAID-0 and RAID-1 have no layout; RAID-1 no chunk (as offline status).
            "layout": (!matches!(geo.level(), xraid_engine::Level::Raid0 | xraid_engine::Level::Raid1))
                .then(|| geo.layout().to_string()),
            "chunk_bytes": (geo.level() != xraid_engine::Level::Raid1)
                .then(|| u64::from(geo.chunk_sectors()) * SECTOR_BYTES),
            "events": self.array.events(),
            "raid_disks": geo.raid_disks(),
            "array_size_bytes": geo.array_sectors() * SECTOR_BYTES,
            "member_data_bytes": geo.member_sectors() * SECTOR_BYTES,
            "health": health,
            // As offline: some role has no active member (failed, or being rebuilt).
            "degraded": states.iter().any(|s| *s != MemberState::Active),
            "members": members,
            "spares": self.array.spare_paths().iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            // Devices of the array it does not use (stale, faulty, replaced): for
            // `xraid remove` or `xraid add`.
            "left_out": self
                .array
                .left_out
                .iter()
                .filter(|l| l.reason != xraid_array::LeftOutReason::Spare)
                .map(|l| serde_json::json!({
                    "path": l.path.display().to_string(),
                    "role": l.role,
                    "reason": l.reason.to_string(),
                }))
                .collect::<Vec<_>>(),
            "sync": progress.map(|p| serde_json::json!({
                "kind": p.kind.name(),
                "done_percent": percent(&p),
                "done_bytes": p.done_below * unit_bytes,
                "total_bytes": p.total_units * unit_bytes,
                "mismatched_units": p.mismatches,
                // A recover's: how often its progress goes to the superblocks
                // (stretched where a checkpoint is slow), and how long the last one
                // held the clients. Other syncs record none while they run.
                "checkpoint_every_ms": (p.kind == SyncKind::Recover)
                    .then(|| millis(self.checkpoints.wait())),
                "last_checkpoint_ms": self.checkpoints.last_took()
                    .filter(|_| p.kind == SyncKind::Recover)
                    .map(millis),
            })),
            "last_sync": self.last_sync,
            "stripe_log": self.array.stripe_log_sectors().is_some(),
            "integrity": engine.integrity_on(),
            "checksum_mismatches": engine.stats().checksum_mismatches,
            "lost_requests": self.losses,
            // Rows a member that died with the power under a write left unknowable.
            "unknown_sectors": engine.unknown_sectors(),
            "io": io_counters(&engine.stats()),
        })
    }

    fn fail(&mut self, path: &std::path::Path) -> serde_json::Value {
        if self.read_only {
            return crate::control::error_reply("the export is read-only");
        }
        if let Some(role) = self.array.replacement_role_of_path(path) {
            // A replacement that fails is dropped; the member it was to replace
            // serves on, so this never costs the array anything.
            let member = MemberIdx(u16::try_from(role).unwrap_or(u16::MAX));
            self.array.driver().engine_mut().fail_replacement(member);
            self.publish_now();
            self.collect();
            if let Err(e) = self.array.record_members() {
                return crate::control::error_reply(&format!(
                    "the replacement was dropped, but the superblocks could not be written: {e}"
                ));
            }
            return serde_json::json!({ "ok": true, "role": role, "replacement": true });
        }
        let Some(role) = self.array.role_of_path(path) else {
            return crate::control::error_reply(&format!(
                "{} is not an active member of array '{}'",
                path.display(),
                self.name
            ));
        };
        let member = MemberIdx(u16::try_from(role).unwrap_or(u16::MAX));
        let engine = self.array.driver().engine();
        if engine.member_states()[role] == MemberState::Failed {
            return crate::control::error_reply(&format!(
                "{} has failed already: remove it (xraid remove)",
                path.display()
            ));
        }
        if let Some(why) =
            xraid_array::fail_refusal(*engine.geometry(), engine.member_states(), role)
        {
            return crate::control::error_reply(&format!(
                "failing {} is refused: the array would not survive it ({why})",
                path.display()
            ));
        }
        self.array.driver().engine_mut().fail_member(member);
        // What a status answered from the snapshot says while the superblocks are
        // written (a stalled member can hold that up for the stall timeout).
        self.publish_now();
        // Log it, put a spare in, and write the superblocks now, as md does.
        self.collect();
        if let Err(e) = self.array.record_members() {
            return crate::control::error_reply(&format!(
                "failed, but the superblocks could not be written: {e}"
            ));
        }
        serde_json::json!({ "ok": true, "role": role })
    }

    /// Adds a member while clients go on being served (`xraid add` on a served array):
    /// into a failed role, recovered in the background, or as a hot spare; see
    /// `Array::add_member_live`. Refusals change nothing and come back as one line.
    fn add(
        &mut self,
        path: &std::path::Path,
        size: Option<u64>,
        spare: bool,
        force: bool,
    ) -> serde_json::Value {
        if self.read_only {
            return crate::control::error_reply("the export is read-only");
        }
        // A member that failed while served and still sits in its role is closed and
        // may come back (add_member_live does it); one a spare or a replacement took
        // the place of is closed once the kernel is done with the I/O it was sent.
        let in_its_role = self.array.role_of_path(path).is_some();
        if !in_its_role && self.array.holds(path) {
            // Its flock is still ours: opening it again would wait, then say "in use".
            let held = xraid_array::ArrayError::HeldByServer {
                path: path.to_path_buf(),
            };
            return crate::control::error_reply(&held.to_string());
        }
        match self.array.add_member_live(path, size, spare, force) {
            Ok(added) => {
                match added.role {
                    Some(role) => log::info(&format!(
                        "array '{}': {} added into role {role}; recover running in the background",
                        self.name,
                        path.display()
                    )),
                    None => log::info(&format!(
                        "array '{}': {} added as a hot spare",
                        self.name,
                        path.display()
                    )),
                }
                serde_json::json!({ "ok": true, "role": added.role })
            }
            Err(e) => crate::control::error_reply(&e.to_string()),
        }
    }

    /// Starts replacing an active member while clients go on being served (`xraid
    /// replace` on a served array): see `Array::replace_member_live`. The copy runs in
    /// the background; refusals change nothing and come back as one line.
    fn replace(
        &mut self,
        old: &std::path::Path,
        new: &std::path::Path,
        size: Option<u64>,
        force: bool,
    ) -> serde_json::Value {
        if self.read_only {
            return crate::control::error_reply(
                "the export is read-only: members cannot be replaced",
            );
        }
        if self.array.role_of_path(new).is_none() && self.array.holds(new) {
            let held = xraid_array::ArrayError::HeldByServer {
                path: new.to_path_buf(),
            };
            return crate::control::error_reply(&held.to_string());
        }
        match self.array.replace_member_live(old, new, size, force) {
            Ok(replacing) => {
                self.began_writes = true;
                log::info(&format!(
                    "array '{}': {} replaces {} in role {}; copy running in the background",
                    self.name,
                    new.display(),
                    old.display(),
                    replacing.role
                ));
                serde_json::json!({ "ok": true, "role": replacing.role })
            }
            Err(e) => crate::control::error_reply(&e.to_string()),
        }
    }

    /// Takes a failed member, a spare or a left-out member out of the array for good
    /// (`xraid remove` on a served array); see `Array::remove_member_live`.
    fn remove(&mut self, path: &std::path::Path) -> serde_json::Value {
        if self.read_only {
            return crate::control::error_reply("the export is read-only");
        }
        match self.array.remove_member_live(path) {
            Ok(()) => {
                log::info(&format!(
                    "array '{}': {} removed from the array; its md superblock is erased",
                    self.name,
                    path.display()
                ));
                serde_json::json!({ "ok": true })
            }
            Err(e) => crate::control::error_reply(&e.to_string()),
        }
    }

    fn scrub(&mut self, kind: SyncKind) -> serde_json::Value {
        if self.read_only {
            return crate::control::error_reply("the export is read-only");
        }
        if let Err(e) = self.array.driver().engine().can_start_sync(kind) {
            return crate::control::error_reply(&format!(
                "cannot start a {}: {e}; try again once it has ended (xraid status shows its progress)",
                kind.name()
            ));
        }
        if let Err(e) = self.array.begin_writes() {
            return crate::control::error_reply(&e.to_string());
        }
        self.began_writes = true;
        match self.array.driver().engine_mut().start_sync(kind, 0) {
            Ok(()) => {
                let engine = self.array.driver_ref().engine();
                let stats = engine.stats();
                self.scrub_start = Some(ScrubStart {
                    kind,
                    listed_sectors: engine.listed_sectors(),
                    read_errors_corrected: stats.read_errors_corrected,
                    checksum_mismatches: stats.checksum_mismatches,
                    unit_sectors: engine.sync_progress().map_or(0, |p| p.unit_sectors),
                });
                serde_json::json!({ "ok": true })
            }
            Err(e) => crate::control::error_reply(&format!("cannot start a {}: {e}", kind.name())),
        }
    }

    /// The block status reply for `len` bytes from `offset`: extents of sectors that
    /// surely read as zeros (holes of the members) and of data. Completed writes are
    /// on the members already, so the answer includes every acknowledged write.
    fn block_status(&mut self, cookie: u64, offset: u64, len: u64, max_extents: usize) -> Vec<u8> {
        let first = offset / SECTOR_BYTES;
        let end = offset + len;
        let runs =
            self.array
                .driver()
                .allocation(first, end.div_ceil(SECTOR_BYTES) - first, max_extents);
        let mut at = offset;
        let mut extents = Vec::with_capacity(runs.len());
        let mut run_start = first * SECTOR_BYTES;
        for run in runs {
            let run_end = (run_start + run.sectors * SECTOR_BYTES).min(end);
            let length = run_end - at;
            if length > 0 {
                extents.push(BlockDescriptor {
                    // The request's length is a u32, and so is every part of it.
                    length: u32::try_from(length).unwrap_or(u32::MAX),
                    flags: if run.zero { STATE_HOLE | STATE_ZERO } else { 0 },
                });
            }
            at = run_end;
            run_start = run_end;
        }
        block_status_chunk(REPLY_FLAG_DONE, cookie, BASE_ALLOCATION_ID, &extents)
    }

    fn busy(&mut self) -> bool {
        self.array.driver().busy() || !self.running.is_empty()
    }

    fn enqueue(&mut self, job: Job) {
        if let JobOp::Control {
            request,
            reply,
            deadline,
        } = job.op
        {
            if std::time::Instant::now() > deadline {
                if request["op"] == "status" {
                    // Answered from the snapshot meanwhile: nothing to say.
                    return;
                }
                log::info(&format!(
                    "array '{}': a control request ({}) came after its client had stopped waiting: not carried out",
                    self.name,
                    request["op"].as_str().unwrap_or("?")
                ));
                return;
            }
            // A status answered from the snapshot while this request's superblock
            // update holds the thread says what is being done; the one published
            // after it shows the array changed, before whatever holds the thread next.
            let changes = request["op"] != "status";
            if changes {
                self.published.carrying_out(Some(request.clone()));
            }
            let answer = self.control(&request);
            if changes {
                self.published.carrying_out(None);
                self.publish_now();
            }
            let _ = reply.send(answer);
            return;
        }
        if let JobOp::BlockStatus {
            offset,
            len,
            max_extents,
        } = job.op
        {
            let bytes = self.block_status(job.cookie, offset, len, max_extents);
            // One in-flight unit of no bytes, as the connection counted it.
            let _ = job.done.send(Done::Raw { bytes, releases: 1 });
            return;
        }
        if job.op.bytes() >= LARGE_REQUEST_BYTES {
            self.large.push_back(job);
        } else {
            self.small.push_back(job);
        }
    }

    /// Small jobs go in at once; one large job per round while the large lane has
    /// budget (always at least one, so a lone large job is never stuck). One per round
    /// sends the thread back to its queue between large jobs, so a small request that
    /// arrives meanwhile waits for at most one large job's planning.
    fn admit(&mut self) {
        while let Some(job) = self.small.pop_front() {
            self.start(job, 0);
        }
        if self.large_bytes < LARGE_LANE_BUDGET {
            if let Some(job) = self.large.pop_front() {
                let bytes = job.op.bytes().min(LARGE_LANE_BUDGET);
                self.large_bytes += bytes;
                self.start(job, bytes);
                self.renice_workers_now_and_then();
            }
        }
    }

    /// The kernel starts io_uring workers as it needs them; put new ones in the bulk
    /// lane, looking at most every 100 ms.
    fn renice_workers_now_and_then(&mut self) {
        let now = std::time::Instant::now();
        if self
            .reniced_at
            .is_none_or(|at| now.duration_since(at) >= std::time::Duration::from_millis(100))
        {
            self.reniced_at = Some(now);
            crate::lane::renice_io_workers();
        }
    }

    fn start(&mut self, job: Job, large_bytes: usize) {
        let id = self.next_job;
        self.next_job += 1;
        if job.op.writes() && !self.read_only && !self.began_writes {
            self.began_writes = true;
            if let Err(e) = self.array.begin_writes() {
                log::error(&format!(
                    "array '{}': cannot mark it active: {e}",
                    self.name
                ));
                let _ = job.done.send(Done::Job {
                    cookie: job.cookie,
                    result: Err(EIO),
                    flight_bytes: job.flight_bytes,
                });
                self.large_bytes -= large_bytes;
                return;
            }
        }
        let mut running = Running {
            cookie: job.cookie,
            flight_bytes: job.flight_bytes,
            done: job.done,
            remaining: 0,
            error: None,
            read: None,
            large_bytes,
            fua: false,
            flushing: false,
            zeros_left: VecDeque::new(),
            punch: false,
        };
        match job.op {
            JobOp::Control { .. } | JobOp::BlockStatus { .. } => {
                unreachable!("control and block status requests are answered in enqueue")
            }
            JobOp::Read { offset, len } => {
                let mem = self.pool.take(len);
                let buf = self
                    .array
                    .driver()
                    .engine_mut()
                    .buffers_mut()
                    .adopt(mem, len);
                self.submit_part(id, RequestKind::Read, offset, len, Some(buf), false);
                running.read = Some((offset, buf, len));
                running.remaining = 1;
            }
            JobOp::Write {
                offset,
                buf,
                len,
                fua,
            } => {
                self.submit_write(id, offset, buf, len);
                running.remaining = 1;
                running.fua = fua;
            }
            JobOp::WriteZeroes {
                offset,
                len,
                fua,
                punch,
            } => {
                let geo = *self.array.driver().engine().geometry();
                let stripe = geo.stripe_data_sectors() * SECTOR_BYTES;
                running.zeros_left = zero_pieces(offset, len, stripe).into();
                running.punch = punch;
                // A window of pieces at a time: a trim of gigabytes must not put
                // gigabytes of stripe work (and scratch memory) into the engine at once.
                let mut window = 0;
                while window < ZERO_WINDOW_BYTES {
                    let Some((at, piece)) = running.zeros_left.pop_front() else {
                        break;
                    };
                    self.submit_zeros(id, at, piece, punch);
                    running.remaining += 1;
                    window += piece;
                }
                running.fua = fua;
            }
            JobOp::Flush => {
                self.submit_part(id, RequestKind::Flush, 0, 0, None, false);
                running.remaining = 1;
            }
        }
        self.running.insert(id, running);
    }

    /// Hands the engine `len` bytes of zeros at `offset` for job `job`, from a buffer the
    /// members may store by freeing the range when `punch`.
    fn submit_zeros(&mut self, job: u64, offset: u64, len: usize, punch: bool) {
        if punch {
            let engine = self.array.driver().engine_mut();
            let buf = engine.buffers_mut().alloc_discard(len);
            self.submit_part(job, RequestKind::Write, offset, len, Some(buf), true);
        } else {
            self.submit_write(job, offset, IoBuf::new(len), len);
        }
    }

    /// Lends `buf` to the engine and writes its first `len` bytes at `offset`, for job
    /// `job`; the buffer is taken back when the write is done.
    fn submit_write(&mut self, job: u64, offset: u64, buf: IoBuf, len: usize) {
        let buf = self
            .array
            .driver()
            .engine_mut()
            .buffers_mut()
            .adopt(buf, len);
        self.submit_part(job, RequestKind::Write, offset, len, Some(buf), true);
    }

    /// Hands the engine one request of job `job`: `len` bytes at byte `offset` (none
    /// for a flush). With `release`, `buf` is taken back from the engine when it is done.
    fn submit_part(
        &mut self,
        job: u64,
        kind: RequestKind,
        offset: u64,
        len: usize,
        buf: Option<BufId>,
        release: bool,
    ) {
        let rid =
            self.array
                .driver()
                .submit(kind, offset / SECTOR_BYTES, len as u64 / SECTOR_BYTES, buf);
        let release = buf.filter(|_| release);
        self.parts.insert(rid, Part { job, release });
    }

    /// One line per member for the parity rows found possibly torn (see
    /// [`Event::TornParityListed`], [`Event::TornParityUnlisted`]): how many stripes,
    /// the sectors they span, and whether its bad block log lists them.
    fn log_torn_parity(&self, events: &[Event]) {
        let mut per_member: std::collections::BTreeMap<(u16, bool), (u64, u64, u64)> =
            std::collections::BTreeMap::new();
        for event in events {
            let (member, sector, sectors, listed) = match *event {
                Event::TornParityListed {
                    member,
                    sector,
                    sectors,
                } => (member, sector, sectors, true),
                Event::TornParityUnlisted {
                    member,
                    sector,
                    sectors,
                } => (member, sector, sectors, false),
                _ => continue,
            };
            let e = per_member
                .entry((member.0, listed))
                .or_insert((0, u64::MAX, 0));
            *e = (e.0 + 1, e.1.min(sector), e.2.max(sector + sectors));
        }
        for ((member, listed), (stripes, first, end)) in per_member {
            let at = self.on_device(MemberIdx(member), first, end - first);
            let what = if listed {
                "those rows go into its bad block log"
            } else {
                "its bad block log has no room for those rows (or it has none), so they are held in doubt until the owed resync completes, also across restarts"
            };
            log::error(&format!(
                "array '{}': {at} holds parity that a crash may have torn where another member is missing, in {stripes} stripe(s) within those sectors, and the stripe log's entries for them could not be read; {what}, so that the missing member's data there reads as an error (lost), never as wrong data",
                self.name
            ));
        }
    }

    /// Takes the engine's replies and finishes the jobs they complete.
    fn collect(&mut self) {
        // Before any reply goes out: a read sent after a write's ack must not reach
        // a member that failed before it.
        self.array.driver().publish_bypass();
        let failures = self.array.driver().take_failures();
        let any_failed = !failures.is_empty();
        if any_failed {
            // What a status answered from the snapshot says while the failure is
            // recorded below (a stalled peer can hold that up for the stall timeout),
            // as `fail` publishes before it records an operator's fail.
            self.publish_now();
        }
        // Past the level's redundancy the array has failed: it does not run degraded.
        let outcome = match self.array.driver_ref().engine().lost_error() {
            Some(lost) => format!("it is left out, and the array has failed ({lost})"),
            None => "it is left out and the array runs degraded".to_owned(),
        };
        for failure in failures {
            log::error(&format!(
                "array '{}': member {} failed ({}): {outcome}",
                self.name,
                failure.name,
                failure.why()
            ));
        }
        let events = match self.array.take_events() {
            Ok(events) => events,
            Err(e) => {
                if !self.unrecorded {
                    log::error(&format!(
                        "array '{}': could not record a change of its members in the superblocks: {e}; writes fail until it is recorded",
                        self.name
                    ));
                }
                // A take-over or a failure the superblocks do not say yet: no write
                // is acknowledged that a crash could undo (see `unrecorded`).
                self.unrecorded = true;
                Vec::new()
            }
        };
        self.log_torn_parity(&events);
        for event in events {
            match event {
                Event::ReplacementDone { role, .. } => log::info(&format!(
                    "array '{}': replacement done: {} holds role {} now; the member it replaced is marked faulty and closed (xraid remove takes it out)",
                    self.name,
                    self.array
                        .role_path(role.index())
                        .map_or_else(|| "?".to_owned(), |p| p.display().to_string()),
                    role.0
                )),
                Event::ReplacementTookOver { role, .. } => log::info(&format!(
                    "array '{}': the member being replaced in role {} failed; its replacement {} takes the role and is rebuilt in the background",
                    self.name,
                    role.0,
                    self.array
                        .role_path(role.index())
                        .map_or_else(|| "?".to_owned(), |p| p.display().to_string()),
                )),
                Event::ReplacementFailed { role, reason } => log::error(&format!(
                    "array '{}': the replacement of role {} failed ({}) and is dropped; the member serves on",
                    self.name,
                    role.0,
                    xraid_driver::fail_reason_words(reason, None)
                )),
                Event::ReadErrorCorrected {
                    member,
                    sector,
                    sectors,
                } => {
                    let at = self.on_device(member, sector, sectors);
                    self.log_fault(Fault::ReadErrorCorrected, member, false, |name| {
                        format!("array '{name}': read error on {at} corrected from redundancy")
                    })
                }
                Event::SyncFinished {
                    kind,
                    completed,
                    mismatches,
                    unrecoverable,
                    visited,
                    skipped,
                    total,
                } => {
                    let mut last = serde_json::json!({
                        "kind": kind.name(),
                        "completed": completed,
                        "mismatched_units": mismatches,
                        "unrecoverable_units": unrecoverable,
                        "visited_units": visited,
                        "skipped_units": skipped,
                        "total_units": total,
                    });
                    if let Some(start) = self.scrub_start.take_if(|s| s.kind == kind) {
                        // What the scrub found and repaired besides mismatches, as the
                        // offline scrub reports it. Clients' reads corrected while it
                        // ran count too: the engine keeps one count for both.
                        let stats = self.array.driver_ref().engine().stats();
                        last["read_errors_corrected"] = stats
                            .read_errors_corrected
                            .saturating_sub(start.read_errors_corrected)
                            .into();
                        last["checksum_mismatches"] = stats
                            .checksum_mismatches
                            .saturating_sub(start.checksum_mismatches)
                            .into();
                        last["unit_bytes"] = (start.unit_sectors * SECTOR_BYTES).into();
                        // Listed sectors a write made good meanwhile (the scrub's, or
                        // a client's), and those still listed.
                        let listed = self.array.driver_ref().engine().listed_sectors();
                        last["listed_sectors_rewritten"] =
                            start.listed_sectors.saturating_sub(listed).into();
                        last["listed_sectors_left"] = listed.into();
                    }
                    self.last_sync = Some(last);
                    self.checkpoints.sync_ended();
                    let skipped = if skipped > 0 {
                        format!("; visited {visited} units of {total}, skipped {skipped} clean in the write-intent bitmap")
                    } else {
                        String::new()
                    };
                    log::info(&format!(
                        "array '{}': {} {} ({mismatches} mismatched units, {unrecoverable} unrecoverable{skipped})",
                        self.name,
                        kind.name(),
                        if completed { "done" } else { "stopped" }
                    ))
                }
                Event::LogRecovered {
                    replayed: 0,
                    worked_out: 0,
                    unknown: 0,
                } => log::info(&format!(
                    "array '{}': stripe log read; nothing to replay",
                    self.name
                )),
                Event::LogRecovered {
                    replayed,
                    worked_out,
                    unknown,
                } => log::info(&format!(
                    "array '{}': stripe log read; {replayed} writes cut off by a crash replayed{}{}",
                    self.name,
                    if worked_out > 0 {
                        format!(
                            "; in {worked_out} a member gone since was worked out from the partial parity"
                        )
                    } else {
                        String::new()
                    },
                    if unknown > 0 {
                        format!(
                            "; {unknown} sectors of missing members cannot be known (a write cut off by a crash or by the array's failure tore their stripes) and read as errors until written"
                        )
                    } else {
                        String::new()
                    }
                )),
                Event::SlowMember {
                    member,
                    slow,
                    mean,
                    peers,
                } => {
                    let name = self
                        .array
                        .driver()
                        .member(member)
                        .map_or_else(|| format!("role {}", member.0), |s| s.member.name().to_owned());
                    if slow {
                        let mirrored = matches!(
                            self.array.driver_ref().engine().geometry().level(),
                            xraid_engine::Level::Raid1 | xraid_engine::Level::Raid10
                        );
                        log::info(&format!(
                            "array '{}': member {name} is slow: {:.1} ms per I/O against {:.1} ms for its peers{}",
                            self.name,
                            mean.0 as f64 / 1e6,
                            peers.0 as f64 / 1e6,
                            if mirrored { "; reads avoid it" } else { "" }
                        ));
                    } else if mean.0 == 0 {
                        log::info(&format!(
                            "array '{}': member {name} is no longer counted slow: its service times are measured afresh (a new device in its role, or its rebuild ended)",
                            self.name
                        ));
                    } else {
                        log::info(&format!(
                            "array '{}': member {name} is no longer slow: {:.1} ms per I/O against {:.1} ms for its peers",
                            self.name,
                            mean.0 as f64 / 1e6,
                            peers.0 as f64 / 1e6
                        ));
                    }
                }
                Event::ChecksumMismatch {
                    member,
                    sector,
                    sectors,
                } => {
                    let at = self.on_device(member, sector, sectors);
                    self.log_fault(Fault::ChecksumMismatch, member, true, |name| {
                        format!(
                            "array '{name}': {at} returned data that disagrees with its checksums (silent corruption); repaired from redundancy"
                        )
                    })
                }
                Event::WriteRefusedRecorded {
                    member,
                    sector,
                    sectors,
                } => {
                    let at = self.on_device(member, sector, sectors);
                    self.log_fault(Fault::WriteRefused, member, true, |name| {
                        format!(
                            "array '{name}': {at} refused a write; the range goes into its bad block log (the data stands on another copy) and the member serves on"
                        )
                    })
                }
                Event::LostInRebuild {
                    member,
                    sector,
                    sectors,
                } => {
                    let at = self.on_device(member, sector, sectors);
                    self.log_fault(Fault::LostInRebuild, member, true, |name| {
                        format!(
                            "array '{name}': {at} could not be rebuilt: no other member holds those sectors (bad block logs list them); they go into its own log, reads of them fail, and the rebuild goes on"
                        )
                    })
                }
                // Said once per member below: one stripe each, and they come many at a time.
                Event::TornParityListed { .. }
                | Event::TornParityUnlisted { .. }
                | Event::MemberFailed { .. } => {}
            }
        }
        // A write a copy refused is acknowledged on the strength of its bad block log:
        // recorded, as a failure is, before any reply.
        let refusals = self.array.driver_ref().engine().bad_blocks_to_record();
        if (any_failed || refusals || self.unrecorded) && !self.read_only {
            // The failure goes into the superblocks (and the bitmap's events) before any
            // reply, as md records it, so that a crash cannot bring the failed member
            // back as current: with the spare that takes its role, or alone.
            let spared = match self.array.use_spares() {
                Ok(used) => {
                    for (path, role) in &used {
                        log::info(&format!(
                            "array '{}': spare {} takes role {role}; recover running in the background",
                            self.name,
                            path.display()
                        ));
                    }
                    !used.is_empty()
                }
                Err(e) => {
                    log::error(&format!(
                        "array '{}': could not put a spare in the failed member's place: {e}",
                        self.name
                    ));
                    false
                }
            };
            let mut recorded = spared || self.record_failure();
            // Bad block ranges that changed while those were written (the flushes let
            // other writes complete) are recorded too, before any reply.
            for _ in 0..8 {
                if !recorded || !self.array.driver_ref().engine().bad_blocks_to_record() {
                    break;
                }
                recorded = self.record_failure();
            }
            recorded &= !self.array.driver_ref().engine().bad_blocks_to_record();
            if self.unrecorded && recorded {
                log::info(&format!(
                    "array '{}': the failure is recorded in the superblocks now; writes are acknowledged again",
                    self.name
                ));
            }
            self.unrecorded = !recorded;
        }
        if let Some(Err(e)) = self
            .checkpoints
            .take_if_due(|| self.array.checkpoint_sync())
        {
            log::error(&format!(
                "array '{}': could not record the rebuild's progress: {e}",
                self.name
            ));
            // Its update may have met a member failing: recorded before any reply, as
            // every failure is.
            self.unrecorded = !self.record_failure();
        }
        if let Err(e) = self.array.maintain() {
            log::error(&format!(
                "array '{}': could not start the recover: {e}",
                self.name
            ));
        }
        // The updates above ran the engine: a member may have failed meanwhile.
        self.array.driver().publish_bypass();
        while let Some(reply) = self.array.driver().next_reply() {
            let Some(part) = self.parts.remove(&reply.id) else {
                continue;
            };
            if let Some(buf) = part.release {
                // The client's payload is no longer needed: reused.
                let mem = self.array.driver().engine_mut().buffers_mut().release(buf);
                self.pool.put(mem);
            }
            let Some(running) = self.running.get_mut(&part.job) else {
                continue;
            };
            running.remaining -= 1;
            if let Err(e) = &reply.result {
                // Once per client request, however many parts it was done in.
                let first = running.error.is_none();
                running.error.get_or_insert(engine_errno(e));
                if first
                    && matches!(
                        e,
                        EngineError::Unreadable { .. }
                            | EngineError::Unwritable { .. }
                            | EngineError::UnknownRowsFull { .. }
                            | EngineError::DataLost { .. }
                    )
                {
                    self.losses += 1;
                    if self.losses <= MAX_LOSSES_LOGGED {
                        log::error(&format!(
                            "array '{}': {e}; the client was answered EIO{}",
                            self.name,
                            if self.losses == MAX_LOSSES_LOGGED {
                                " (further such failures are counted in status, not logged)"
                            } else {
                                ""
                            }
                        ));
                    }
                }
            }
            let next = match running.error {
                None => running.zeros_left.pop_front(),
                // Failed: what is left is not started.
                Some(_) => None,
            };
            if let Some((at, piece)) = next {
                running.remaining += 1;
                let punch = running.punch;
                self.submit_zeros(part.job, at, piece, punch);
                continue;
            }
            if running.remaining > 0 {
                continue;
            }
            if running.fua && !running.flushing && running.error.is_none() {
                // Forced unit access: the write is acknowledged once it is durable.
                running.flushing = true;
                running.remaining = 1;
                self.submit_part(part.job, RequestKind::Flush, 0, 0, None, false);
                continue;
            }
            let Some(done) = self.running.remove(&part.job) else {
                continue;
            };
            self.finish(done);
        }
    }

    /// Member `member` and its `sectors` sectors from data-area sector `sector` as md's
    /// tools number them (`mdadm --examine-badblocks`, the kernel's log): device
    /// sectors, counted from the device's start.
    fn on_device(&self, member: MemberIdx, sector: u64, sectors: u64) -> String {
        let role = member.index();
        let (Some(path), Some(offset)) = (
            self.array.role_path(role),
            self.array.data_offset_sectors(role),
        ) else {
            // Not a role's member (a replacement's slot): its data area's numbering.
            return format!(
                "member {} at data sectors {sector}..{}",
                member.0,
                sector + sectors
            );
        };
        let at = sector + offset;
        format!(
            "member {} ({}) at device sectors {at}..{}",
            member.0,
            path.display(),
            at + sectors
        )
    }

    /// Logs one more `fault` of `member` (`line` given the array's name) within the
    /// member's budget for that kind (see `log_budget`): in full at first, then only
    /// counted.
    fn log_fault(
        &mut self,
        fault: Fault,
        member: MemberIdx,
        error: bool,
        line: impl FnOnce(&str) -> String,
    ) {
        let emit = |text: &str| {
            if error {
                log::error(text);
            } else {
                log::info(text);
            }
        };
        let path = self
            .array
            .role_path(member.index())
            .map_or_else(|| member.0.to_string(), |p| p.display().to_string());
        match self.log_budget.one_more(fault, member.0, &path) {
            Say::InFull => emit(&line(&self.name)),
            Say::InFullLast(more) => {
                emit(&line(&self.name));
                log::info(&format!("array '{}': {more}", self.name));
            }
            Say::Count(count) => emit(&format!("array '{}': {count}", self.name)),
            Say::Nothing => {}
        }
    }

    /// Writes the members' states to the superblocks after a failure; false (logged
    /// once) when that fails.
    fn record_failure(&mut self) -> bool {
        if self.unrecorded && self.array.driver().engine().lost_error().is_some() {
            // Every member that could not take it is failed by now: nothing is left
            // to write it to, and the array answers errors by itself.
            return false;
        }
        match self.array.record_members() {
            Ok(()) => true,
            Err(e) => {
                if !self.unrecorded {
                    log::error(&format!(
                        "array '{}': could not record the failed member (or a bad block) in the superblocks: {e}; writes fail until it is recorded",
                        self.name
                    ));
                }
                false
            }
        }
    }

    fn finish(&mut self, job: Running) {
        self.large_bytes -= job.large_bytes;
        // Not acknowledged while a failure is unrecorded (see `unrecorded`).
        let error = match job.error {
            None if self.unrecorded && job.read.is_none() => Some(EIO),
            error => error,
        };
        let result = match (error, job.read) {
            (Some(e), read) => {
                if let Some((_, buf, _)) = read {
                    let mem = self.array.driver().engine_mut().buffers_mut().release(buf);
                    self.pool.put(mem);
                }
                Err(e)
            }
            (None, Some((offset, buf, len))) => {
                let buf = self.array.driver().engine_mut().buffers_mut().release(buf);
                Ok(Some(ReadData { offset, buf, len }))
            }
            (None, None) => Ok(None),
        };
        // A connection that went away no longer wants its replies.
        let _ = job.done.send(Done::Job {
            cookie: job.cookie,
            result,
            flight_bytes: job.flight_bytes,
        });
    }

    /// After a fatal driver error: every job, running or queued, fails with EIO.
    fn fail_everything(&mut self) {
        let fail = |done: &Sender<Done>, cookie: u64, flight_bytes: usize| {
            let _ = done.send(Done::Job {
                cookie,
                result: Err(EIO),
                flight_bytes,
            });
        };
        for (_, r) in self.running.drain() {
            fail(&r.done, r.cookie, r.flight_bytes);
        }
        for job in self.small.drain(..).chain(self.large.drain(..)) {
            fail(&job.done, job.cookie, job.flight_bytes);
        }
        while let Ok(job) = self.rx.recv() {
            fail(&job.done, job.cookie, job.flight_bytes);
        }
    }
}

fn engine_errno(e: &EngineError) -> u32 {
    match e {
        EngineError::OutOfRange { .. } | EngineError::BufferSize { .. } => EINVAL,
        EngineError::DataLost { .. }
        | EngineError::Unreadable { .. }
        | EngineError::Unwritable { .. }
        | EngineError::UnknownRowsFull { .. } => EIO,
    }
}

/// The engine's counters since the server opened the array, as `xraid status --json`
/// shows them: how stripe writes were done, and what the stripe log did.
fn io_counters(s: &xraid_engine::Stats) -> serde_json::Value {
    serde_json::json!({
        "member_reads": s.member_reads,
        "member_writes": s.member_writes,
        "member_flushes": s.member_flushes,
        "read_bytes": s.read_bytes,
        "write_bytes": s.write_bytes,
        "stripe_writes": {
            "read_modify_write": s.rmw,
            "reconstruct_write": s.rcw,
            "full_stripe": s.full_stripe,
        },
        "reconstructed": s.reconstruct,
        "io_errors": s.io_errors,
        "read_errors_corrected": s.read_errors_corrected,
        "sync_units": s.sync_units,
        "stripe_log": {
            "ring_writes": s.log_writes,
            "entries": s.log_entries,
            "second_ring_retries": s.log_second_ring_retries,
            "replayed_with_members_worked_out": s.log_partial_parity_replays,
            "replay_skipped": s.log_entries_skipped,
        },
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_are_split_on_stripe_boundaries() {
        let k = 1024u64;
        let stripe = 192 * k;
        // Unaligned start: up to the first boundary, then whole-stripe pieces of
        // at most 1 MiB (5 stripes), then the tail.
        let pieces = zero_pieces(100 * k, 2048 * k, stripe);
        let expect: Vec<(u64, usize)> = vec![
            (100 * k, (92 * k) as usize),
            (192 * k, (960 * k) as usize),
            (1152 * k, (960 * k) as usize),
            (2112 * k, (36 * k) as usize),
        ];
        assert_eq!(pieces, expect);
        let total: usize = pieces.iter().map(|p| p.1).sum();
        assert_eq!(total as u64, 2048 * k);
        // A stripe larger than a piece is one piece.
        assert_eq!(
            zero_pieces(0, 8 << 20, 4 << 20),
            vec![(0, 4 << 20), (4 << 20, 4 << 20)]
        );
    }

    #[test]
    fn the_alarm_wakes_only_a_sleeping_worker_and_ends_with_it() {
        let sleeping = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let alarm = spawn_alarm(Arc::downgrade(&sleeping), move || {
            let _ = tx.send(());
        })
        .expect("alarm thread");
        // Awake: left alone.
        assert!(rx.recv_timeout(WAKE_EVERY * 3).is_err());
        // Asleep: woken within a period, and the flag says so.
        sleeping.store(true, Ordering::SeqCst);
        assert!(rx.recv_timeout(WAKE_EVERY * 3).is_ok());
        assert!(!sleeping.load(Ordering::SeqCst));
        // The worker gone, the alarm ends.
        drop(sleeping);
        alarm.join().expect("the alarm ends");
    }

    /// The tests whose members stall run one at a time: each times a sequence of
    /// stalls on the wall clock (300 ms to 5 s apart), which another such test's
    /// threads beside it can throw off.
    fn stall_tests_one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        ONE.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A worker for `array` as `spawn` makes one, without its thread: the test runs
    /// its steps itself.
    fn worker(array: Array) -> Worker {
        let (_tx, rx) = mpsc::channel();
        Worker {
            pool: IoBufPool::new(),
            published: Arc::new(Published::new(None)),
            published_at: None,
            array,
            name: "test".to_owned(),
            read_only: false,
            rx,
            sleeping: Arc::new(AtomicBool::new(false)),
            small: VecDeque::new(),
            large: VecDeque::new(),
            large_bytes: 0,
            parts: HashMap::new(),
            running: HashMap::new(),
            next_job: 0,
            began_writes: true,
            reniced_at: None,
            checkpoints: xraid_array::SyncCheckpoints::new(
                xraid_array::CheckpointPace::default(),
                std::time::Instant::now(),
            ),
            last_sync: None,
            scrub_start: None,
            losses: 0,
            log_budget: LogBudget::default(),
            ticked_at: std::time::Instant::now(),
            unrecorded: false,
        }
    }

    /// Creates a RAID-1 of plain files `members` (no bitmap, no integrity).
    fn create_raid1(members: &[std::path::PathBuf], chunk_bytes: u64, size_bytes: u64, name: &str) {
        let opts = xraid_array::CreateOptions {
            chunk_bytes,
            size_bytes: Some(size_bytes),
            backend: xraid_driver::BackendChoice::Threads,
            bitmap: false,
            ..xraid_array::CreateOptions::new(xraid_engine::Level::Raid1, name, members.to_vec())
        };
        xraid_array::create(&opts, &mut |_, _| {}).expect("create");
    }

    /// Assembles `members` to be opened for writing.
    fn assemble_to_write(members: &[std::path::PathBuf]) -> xraid_array::Assembled {
        let options = xraid_member::OpenOptions {
            write: true,
            direct: xraid_member::DirectMode::Auto,
            lock: true,
        };
        xraid_array::assemble(members, &options).expect("assemble")
    }

    fn superblock_of(path: &std::path::Path) -> xraid_format::Superblock {
        let options = xraid_member::OpenOptions {
            write: false,
            direct: xraid_member::DirectMode::Auto,
            lock: false,
        };
        let member = xraid_member::FileMember::open(path, &options).expect("open");
        xraid_array::read_superblock(&member, path)
            .expect("read")
            .expect("superblock")
    }

    /// A RAID-1 in `dir` (as xraid-array's `raid1_with_staggered_stalls`) whose
    /// next superblock update gives up (`MembersChanging`): roles 1 to `stalled`
    /// stall one after the other, and each round of the update meets the next one
    /// failing before it reaches the last role. Role `stalled + 1`, the last, is
    /// replaced by a blank `n`; with `checkpoint`, its copy runs (paced) and has done
    /// a unit, so that the next checkpoint is an update; without, it is dropped at
    /// once, a change the superblocks must record. The engine's stall timeout is
    /// 300 ms. Returns the array, the members and n.
    ///
    /// The stalls: role r stalls after its first `100 + r - 1` I/Os (one more for
    /// r >= 2 with `checkpoint`: the checkpoint's flush reaches them before their
    /// stall, and waits for role 1, where it stalls). Writes go to every copy, so
    /// all count alike until role 1 is at its stall; then `stalled` writes are sent,
    /// the first to stall on role 1, the next on role 2, and so on. The engine sends
    /// each once the one before it is done, which is when the role it stalled on is
    /// failed: roles 1 to `stalled` fail one at a time, a stall timeout apart.
    fn raid1_with_staggered_stalls(
        dir: &std::path::Path,
        checkpoint: bool,
    ) -> (Array, Vec<std::path::PathBuf>, std::path::PathBuf) {
        const HEALTHY: u64 = 100;
        const CHUNK_BYTES: u64 = 64 << 10;
        const MEMBER_BYTES: u64 = 16 << 20;
        let stalled: u16 = if checkpoint { 10 } else { 9 };
        let last = usize::from(stalled) + 1;
        let members: Vec<std::path::PathBuf> =
            (0..=last).map(|i| dir.join(format!("d{i}"))).collect();
        create_raid1(&members, CHUNK_BYTES, MEMBER_BYTES, "stall");
        let new = dir.join(format!("n{last}"));
        std::fs::File::create(&new)
            .and_then(|f| f.set_len(std::fs::metadata(&members[last])?.len()))
            .expect("the replacement's file");
        let faults: Vec<xraid_member::MemberFault> = (1..=stalled)
            .map(|role| xraid_member::MemberFault {
                role,
                plan: xraid_member::FaultPlan {
                    stall_after: Some(
                        HEALTHY + u64::from(role) - 1 + u64::from(checkpoint && role >= 2),
                    ),
                    stall_for: Duration::from_secs(600),
                    ..xraid_member::FaultPlan::default()
                },
            })
            .collect();
        let assembled = assemble_to_write(&members);
        let mut array = Array::open_with_faults(
            assembled,
            xraid_array::OpenMode::ReadWrite,
            xraid_driver::BackendChoice::Threads,
            &faults,
        )
        .expect("open");
        let engine = array.driver().engine_mut();
        let config = engine.config();
        engine.set_config(xraid_engine::EngineConfig {
            stall_timeout: xraid_engine::Nanos(300_000_000),
            sync_min_bytes_per_sec: 1 << 20,
            sync_max_bytes_per_sec: 4 << 20,
            ..config
        });
        let role = MemberIdx(stalled + 1);
        array
            .replace_member_live(&members[last], &new, None, true)
            .expect("the replacement is taken");
        if !checkpoint {
            assert!(array.driver().engine_mut().fail_replacement(role));
        }
        let stalls_next = |array: &Array, role: u16| {
            array
                .driver_ref()
                .member(MemberIdx(role))
                .expect("a member")
                .member
                .hold_for()
                .is_some()
        };
        let block = vec![7u8; 4096];
        let mut writes = 0;
        while !stalls_next(&array, 1) {
            array.driver().write_at(&block, 0).expect("write");
            writes += 1;
            assert!(writes <= HEALTHY, "role 1 never reached its stall");
        }
        if checkpoint {
            let done = |array: &Array| {
                let engine = array.driver_ref().engine();
                engine.sync_progress().map_or(0, |p| p.done_below)
            };
            while done(&array) == 0 {
                array.driver().pump(true).expect("pump");
                array.driver().tick();
            }
        }
        for role in 2..=stalled {
            assert!(!stalls_next(&array, role), "role {role} stalls too early");
        }
        // In the last copy unit, which the paced copy is far from.
        let first = array.driver_ref().engine().array_sectors() - 4096;
        for role in 1..=u64::from(stalled) {
            let buf = array.driver().engine_mut().buffers_mut().alloc(4096);
            let sector = first + role * CHUNK_BYTES / 512;
            array
                .driver()
                .submit(RequestKind::Write, sector, 8, Some(buf));
            array.driver().pump(false).expect("pump");
        }
        let states = array.driver_ref().engine().member_states();
        assert!(
            states.iter().all(|s| *s == MemberState::Active),
            "{states:?}"
        );
        (array, members, new)
    }

    /// The superblock update that records a change of the members (here a dropped
    /// replacement, followed by `take_events`) gives up (`MembersChanging`): the
    /// worker tries the record again before it sends any reply, and until one is
    /// written no write is acknowledged. Before (a review of 12d6f40) it only logged
    /// the error: replies went out with role 10's superblock still naming n10 as its
    /// replacement, which a crash would then resume building from its checkpoint,
    /// without the writes acknowledged since.
    #[test]
    fn a_change_an_update_could_not_record_is_recorded_before_any_reply() {
        let _one_at_a_time = stall_tests_one_at_a_time();
        let dir = tempfile::tempdir().expect("tempdir");
        let (array, members, n10) = raid1_with_staggered_stalls(dir.path(), false);
        let dev_n10 = superblock_of(&n10).dev_number as usize;
        let role_of_n10 = || superblock_of(&members[10]).dev_roles[dev_n10];
        assert_eq!(
            role_of_n10(),
            10,
            "n10 is recorded as role 10's replacement"
        );
        let mut worker = worker(array);
        worker.collect();
        assert_eq!(
            role_of_n10(),
            xraid_format::ROLE_FAULTY,
            "the replies went out with the dropped replacement unrecorded"
        );
        assert!(
            !worker.unrecorded,
            "recorded: writes are acknowledged again"
        );
    }

    /// RAID-1 of two files; role 0, the copy the read bypass reads, holds every I/O
    /// (a device that stopped answering), its kernel descriptors handed out so that
    /// the bypass reads it as it reads a real device. A write of 4 KiB at 0 waits on
    /// it. The worker has a record to retry (`unrecorded`, as after a failed update):
    /// the superblock update waits on role 0, the engine fails role 0 at the stall
    /// timeout, and the write completes on role 1 alone, its reply among those the
    /// worker then sends. A read of those bytes through the bypass must not come from
    /// role 0, which never got them. Before (a review of 12d6f40) the bypass was
    /// published only before the update, with role 0 active: such a read returned
    /// what role 0 held before the acknowledged write.
    #[test]
    fn a_read_through_the_bypass_after_an_update_does_not_see_a_member_it_failed() {
        let _one_at_a_time = stall_tests_one_at_a_time();
        let dir = tempfile::tempdir().expect("tempdir");
        let members: Vec<std::path::PathBuf> =
            (0..2).map(|i| dir.path().join(format!("d{i}"))).collect();
        create_raid1(&members, 64 << 10, 16 << 20, "bypass");
        let assembled = assemble_to_write(&members);
        let stalled = xraid_member::MemberFault {
            role: 0,
            plan: xraid_member::FaultPlan {
                stall_after: Some(0),
                stall_for: Duration::from_secs(600),
                direct_fd_for_bypass: true,
                ..xraid_member::FaultPlan::default()
            },
        };
        let mut array = Array::open_with_faults(
            assembled,
            xraid_array::OpenMode::ReadWrite,
            xraid_driver::BackendChoice::Threads,
            &[stalled],
        )
        .expect("open");
        let engine = array.driver().engine_mut();
        let config = engine.config();
        engine.set_config(xraid_engine::EngineConfig {
            stall_timeout: xraid_engine::Nanos(300_000_000),
            ..config
        });
        let bypass = array.driver().read_bypass();
        let data = vec![0xabu8; 4096];
        let buf = array.driver().engine_mut().buffers_mut().alloc(4096);
        array
            .driver()
            .engine_mut()
            .buffers_mut()
            .get_mut(buf)
            .copy_from_slice(&data);
        let write = array.driver().submit(RequestKind::Write, 0, 8, Some(buf));
        array.driver().pump(false).expect("pump");
        let mut worker = worker(array);
        // The write as a client's job, whose reply the worker sends.
        let (done, replies) = mpsc::channel();
        worker.parts.insert(
            write,
            Part {
                job: 0,
                release: None,
            },
        );
        worker.running.insert(
            0,
            Running {
                cookie: 7,
                flight_bytes: 4096,
                done,
                remaining: 1,
                error: None,
                read: None,
                large_bytes: 0,
                fua: false,
                flushing: false,
                zeros_left: VecDeque::new(),
                punch: false,
            },
        );
        worker.unrecorded = true;
        worker.collect();
        let engine = worker.array.driver_ref().engine();
        assert_eq!(engine.member_states()[0], MemberState::Failed);
        assert!(!worker.unrecorded, "recorded");
        match replies.try_recv() {
            Ok(Done::Job {
                cookie: 7,
                result: Ok(None),
                ..
            }) => {}
            other => panic!("the write is acknowledged: {other:?}"),
        }
        let mut read = vec![0u8; 4096];
        assert!(
            !bypass.read(&mut read, 0) || read == data,
            "the bypass read what role 0 held before the acknowledged write"
        );
    }

    /// A rebuild's checkpoint whose superblock update gives up (`MembersChanging`;
    /// roles 1 to 10 failed during it) is followed by a record of the members
    /// before any reply. Before (a review of 12d6f40) the worker only logged it: the
    /// replies went out with role 11's superblock calling roles 1 to 10 active.
    #[test]
    fn a_failed_checkpoint_is_followed_by_a_record_before_any_reply() {
        let _one_at_a_time = stall_tests_one_at_a_time();
        let dir = tempfile::tempdir().expect("tempdir");
        let (array, members, n11) = raid1_with_staggered_stalls(dir.path(), true);
        let dev_10 = superblock_of(&members[10]).dev_number as usize;
        assert_eq!(superblock_of(&members[11]).dev_roles[dev_10], 10);
        let mut worker = worker(array);
        let pace = xraid_array::CheckpointPace::default();
        let long_ago = std::time::Instant::now().checked_sub(pace.every);
        worker.checkpoints = xraid_array::SyncCheckpoints::new(pace, long_ago.expect("uptime"));
        worker.collect();
        assert_eq!(
            superblock_of(&n11).recovery_offset,
            0,
            "the checkpoint gave up: its progress is not what was recorded"
        );
        let states = worker.array.driver_ref().engine().member_states();
        assert_eq!(states[10], MemberState::Failed, "{states:?}");
        assert_eq!(
            superblock_of(&members[11]).dev_roles[dev_10],
            xraid_format::ROLE_FAULTY,
            "the replies went out with role 10's failure unrecorded"
        );
        assert!(
            !worker.unrecorded,
            "recorded: writes are acknowledged again"
        );
    }

    /// A four-way mirror in `dir` whose role 1 stalls (for ten minutes) from its next
    /// I/O on: the next superblock update waits on it for the stall timeout, 5 s.
    /// Returns the array, open to write, and its members.
    fn four_way_mirror_whose_role_1_stalls_next(
        dir: &std::path::Path,
    ) -> (Array, Vec<std::path::PathBuf>) {
        const HEALTHY: u64 = 100;
        let members: Vec<std::path::PathBuf> = (0..4).map(|i| dir.join(format!("d{i}"))).collect();
        create_raid1(&members, 64 << 10, 16 << 20, "busy");
        let faults = [xraid_member::MemberFault {
            role: 1,
            plan: xraid_member::FaultPlan {
                stall_after: Some(HEALTHY),
                stall_for: Duration::from_secs(600),
                ..xraid_member::FaultPlan::default()
            },
        }];
        let mut array = Array::open_with_faults(
            assemble_to_write(&members),
            xraid_array::OpenMode::ReadWrite,
            xraid_driver::BackendChoice::Threads,
            &faults,
        )
        .expect("open");
        let engine = array.driver().engine_mut();
        let config = engine.config();
        engine.set_config(xraid_engine::EngineConfig {
            stall_timeout: xraid_engine::Nanos(5_000_000_000),
            ..config
        });
        let stalls_next = |array: &Array| {
            array
                .driver_ref()
                .member(MemberIdx(1))
                .expect("a member")
                .member
                .hold_for()
                .is_some()
        };
        let block = vec![3u8; 4096];
        let mut writes = 0;
        while !stalls_next(&array) {
            array.driver().write_at(&block, 0).expect("write");
            writes += 1;
            assert!(writes <= HEALTHY, "role 1 never reached its stall");
        }
        (array, members)
    }

    /// While the array's thread waits on a stalled member (a superblock update, here
    /// the one recording an operator's `fail`), a status is answered from what the
    /// thread last published, saying so; a request the thread reaches only after its
    /// client stopped waiting is dropped, not carried out. Before, the control socket
    /// answered one request at a time, a status waited up to 10 s behind the update
    /// and then said only "did not answer in time", and a `fail` given up on was still
    /// carried out whenever the thread got to it.
    #[test]
    fn a_status_is_answered_while_the_array_thread_waits_on_a_stalled_member() {
        let _one_at_a_time = stall_tests_one_at_a_time();
        let dir = tempfile::tempdir().expect("tempdir");
        let (array, members) = four_way_mirror_whose_role_1_stalls_next(dir.path());
        let (handle, thread) = spawn(array, "busy".to_owned(), false).expect("spawn");
        let socket = dir.path().join("control.sock");
        let control = crate::control::Control::start(socket.clone(), handle.clone(), "busy".into())
            .expect("the control socket");
        // One request through the control socket, as the CLI sends it.
        let ask = move |request: serde_json::Value| -> serde_json::Value {
            use std::io::{BufRead, Write};
            let mut stream = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
            writeln!(stream, "{request}").expect("send");
            let mut line = String::new();
            std::io::BufReader::new(&stream)
                .read_line(&mut line)
                .expect("answer");
            serde_json::from_str(&line).expect("JSON")
        };
        let path = |m: &std::path::Path| m.display().to_string();
        let fail_d2 = {
            let ask = ask.clone();
            let request = serde_json::json!({ "op": "fail", "member": path(&members[2]) });
            std::thread::spawn(move || ask(request))
        };
        // The thread takes the fail and waits in its update on role 1; a status sent
        // meanwhile is not queued behind the fail's connection either.
        std::thread::sleep(Duration::from_millis(500));
        let asked = std::time::Instant::now();
        let status = ask(serde_json::json!({ "op": "status" }));
        assert!(
            asked.elapsed() < Duration::from_millis(2500),
            "the status waited {:?}",
            asked.elapsed()
        );
        assert_eq!(status["ok"], true, "{status}");
        assert_eq!(status["answered_from"], "snapshot", "{status}");
        assert!(
            status["busy_ms"].as_u64().is_some_and(|ms| ms >= 2000),
            "{status}"
        );
        assert_eq!(status["members"][0]["state"], "active", "{status}");
        // What it is doing: the fail of role 2, whose superblock update waits.
        assert_eq!(status["carrying_out"]["op"], "fail", "{status}");
        assert_eq!(
            status["carrying_out"]["member"],
            path(&members[2]),
            "{status}"
        );
        // What it waits on: role 1's superblock write.
        assert_eq!(status["waiting_on"]["slot"], 1, "{status}");
        assert_eq!(status["waiting_on"]["path"], path(&members[1]), "{status}");
        assert!(
            status["waiting_on"]["for_ms"]
                .as_u64()
                .is_some_and(|ms| ms >= 1000),
            "{status}"
        );
        // A fail given up on before the thread gets to it.
        let late = crate::control::ask_worker_within(
            &handle,
            serde_json::json!({ "op": "fail", "member": path(&members[3]) }),
            Duration::from_millis(200),
        );
        assert_eq!(late["ok"], false, "{late}");
        assert!(
            late["error"]
                .as_str()
                .is_some_and(|e| e.contains("did not answer within")),
            "{late}"
        );
        let failed = fail_d2.join().expect("the fail's thread");
        assert_eq!(failed["ok"], true, "{failed}");
        let now = crate::control::ask_worker_within(
            &handle,
            serde_json::json!({ "op": "status" }),
            Duration::from_secs(10),
        );
        assert!(now.get("answered_from").is_none(), "{now}");
        let after = handle.published.last().expect("published");
        assert!(
            after.get("carrying_out").is_none(),
            "the fail is done, and published as done: {after}"
        );
        assert_eq!(after["members"][2]["state"], "faulty", "{after}");
        let states: Vec<&str> = (0..4)
            .map(|r| now["members"][r]["state"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(
            states,
            ["active", "faulty", "faulty", "active"],
            "role 1 failed at its stall, role 2 by the operator, and the late fail of role 3 dropped: {now}"
        );
        control.stop();
        drop(handle);
        thread.join().expect("the array's thread");
    }

    /// The array's thread stopped on an error (`serve` returned one): `fail_everything`
    /// takes every job until the handles are gone, a control request's included, and
    /// drops its reply. The control socket then took the dropped reply for a thread
    /// that is merely busy: a status came back at once as the last snapshot, `ok` and
    /// healthy, and any other request was told the thread "did not answer within 10 s"
    /// and had been busy waiting on a member, at once. Before 4b7775b it said the array
    /// did not answer.
    #[test]
    fn a_status_of_an_array_whose_thread_stopped_is_not_its_last_healthy_snapshot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let members: Vec<std::path::PathBuf> =
            (0..2).map(|i| dir.path().join(format!("d{i}"))).collect();
        create_raid1(&members, 64 << 10, 4 << 20, "stopped");
        let mut array = Array::open_with_faults(
            assemble_to_write(&members),
            xraid_array::OpenMode::ReadWrite,
            xraid_driver::BackendChoice::Threads,
            &[],
        )
        .expect("open");
        let waker = array.driver().waker().expect("waker");
        let bypass = array.driver().read_bypass();
        let mut w = worker(array);
        let (tx, rx) = mpsc::channel();
        w.rx = rx;
        let handle = ArrayHandle {
            tx,
            waker,
            sleeping: Arc::clone(&w.sleeping),
            size: 4 << 20,
            stripe_bytes: 4096,
            bypass,
            trim_unit: 4096,
            min_block: 512,
            advertised_block: 512,
            pool: w.pool.clone(),
            published: Arc::clone(&w.published),
        };
        // The loop came round once (a healthy status published), then the array
        // stopped on an error.
        w.beat();
        let stopped = std::thread::spawn(move || {
            w.fail_everything();
            w
        });
        let asked = std::time::Instant::now();
        let status = crate::control::ask_worker_within(
            &handle,
            serde_json::json!({ "op": "status" }),
            Duration::from_secs(2),
        );
        let fail = crate::control::ask_worker_within(
            &handle,
            serde_json::json!({ "op": "fail", "member": "/nowhere" }),
            Duration::from_secs(10),
        );
        let took = asked.elapsed();
        drop(handle);
        let _ = stopped.join().expect("the stopped thread");
        assert_ne!(
            status["ok"], true,
            "the stopped array's status is its last snapshot: {status}"
        );
        assert!(
            !fail["error"]
                .as_str()
                .is_some_and(|e| e.contains("did not answer within 10 s")),
            "answered after {took:?}, yet it says it waited 10 s: {fail}"
        );
    }

    /// Eight connections that have sent nothing (yet) take every control thread: a
    /// status is refused ("too many control requests at once") for as long as they
    /// trickle — the request is read with a 10 s timeout per read, not per request —
    /// and `Control::stop` waits for them. SERVE.md says a status is never queued
    /// behind another request.
    #[test]
    fn a_status_is_answered_beside_eight_connections_that_send_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let members: Vec<std::path::PathBuf> =
            (0..2).map(|i| dir.path().join(format!("d{i}"))).collect();
        create_raid1(&members, 64 << 10, 4 << 20, "quiet");
        let array = Array::open_with_faults(
            assemble_to_write(&members),
            xraid_array::OpenMode::ReadWrite,
            xraid_driver::BackendChoice::Threads,
            &[],
        )
        .expect("open");
        let (handle, thread) = spawn(array, "quiet".to_owned(), false).expect("spawn");
        let socket = dir.path().join("control.sock");
        let control =
            crate::control::Control::start(socket.clone(), handle.clone(), "quiet".into())
                .expect("the control socket");
        let quiet: Vec<std::os::unix::net::UnixStream> = (0..8)
            .map(|_| std::os::unix::net::UnixStream::connect(&socket).expect("connect"))
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let status = {
            use std::io::{BufRead, Write};
            let mut stream = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
            writeln!(stream, "{}", serde_json::json!({ "op": "status" })).expect("send");
            let mut line = String::new();
            std::io::BufReader::new(&stream)
                .read_line(&mut line)
                .expect("answer");
            serde_json::from_str::<serde_json::Value>(&line).expect("JSON")
        };
        drop(quiet);
        control.stop();
        drop(handle);
        thread.join().expect("the array's thread");
        assert_eq!(status["ok"], true, "{status}");
    }

    /// A `fail` the thread has carried out in the engine while its superblock update
    /// waits on a stalled member: a status meanwhile comes from the snapshot, which was
    /// taken before the fail and calls the member active. The client of a request the
    /// thread had begun but not finished in time is told to "check with xraid status",
    /// which then says the member was not failed.
    #[test]
    fn a_status_snapshot_taken_while_a_fail_is_recorded_shows_the_member_failed() {
        let _one_at_a_time = stall_tests_one_at_a_time();
        let dir = tempfile::tempdir().expect("tempdir");
        let (array, members) = four_way_mirror_whose_role_1_stalls_next(dir.path());
        let (handle, thread) = spawn(array, "busy".to_owned(), false).expect("spawn");
        let path = members[2].display().to_string();
        let fail_d2 = {
            let handle = handle.clone();
            std::thread::spawn(move || {
                crate::control::ask_worker_within(
                    &handle,
                    serde_json::json!({ "op": "fail", "member": path }),
                    Duration::from_secs(10),
                )
            })
        };
        std::thread::sleep(Duration::from_millis(500));
        let status = crate::control::ask_worker_within(
            &handle,
            serde_json::json!({ "op": "status" }),
            Duration::from_secs(2),
        );
        let failed = fail_d2.join().expect("the fail's thread");
        drop(handle);
        thread.join().expect("the array's thread");
        assert_eq!(failed["ok"], true, "{failed}");
        assert_eq!(status["answered_from"], "snapshot", "{status}");
        assert_eq!(
            status["members"][2]["state"], "faulty",
            "role 2 is failed in the engine, its superblocks being written: {status}"
        );
    }
}
