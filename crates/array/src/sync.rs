//! Running a background sync (check, repair, resync, recover) on an open array from
//! start to end, for the command line and for arrays that are not being served.

use std::time::{Duration, Instant};

use xraid_engine::{Event, SyncKind, SyncProgress};

use crate::{Array, ArrayError};

/// When a running sync's progress is next recorded ([`Array::checkpoint_sync`]):
/// every [`SyncCheckpoints::EVERY`], so that a crash, a kill or the array's failure
/// costs a rebuild at most that much of its work.
#[derive(Debug, Clone, Copy)]
pub struct SyncCheckpoints {
    every: Duration,
    at: Instant,
}

impl SyncCheckpoints {
    pub const EVERY: Duration = Duration::from_secs(2);

    /// Checkpoints every `every`, the first one `every` after `at` (now, but for tests).
    pub fn new(every: Duration, at: Instant) -> SyncCheckpoints {
        SyncCheckpoints { every, at }
    }

    /// Whether a checkpoint is due; if so, counts it as taken.
    pub fn take_due(&mut self) -> bool {
        let now = Instant::now();
        let due = now.duration_since(self.at) >= self.every;
        if due {
            self.at = now;
        }
        due
    }
}

/// What a sync found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncReport {
    pub kind: SyncKind,
    /// It walked every unit (not cancelled).
    pub completed: bool,
    /// Units whose redundancy disagreed with the data.
    pub mismatches: u64,
    /// Units that could not be read or rebuilt.
    pub unrecoverable: u64,
    /// Units in the array, and member sectors per unit.
    pub units: u64,
    /// Units the sync visited: fewer than `units` where the write-intent bitmap let
    /// it skip chunks no write touched (a resync after a crash, a member's catch-up).
    pub visited: u64,
    /// Units skipped as clean in the write-intent bitmap.
    pub skipped: u64,
    pub unit_sectors: u64,
    /// Read errors met and repaired on the way.
    pub read_errors_corrected: u64,
    /// Of those, reads that returned blocks disagreeing with their checksums
    /// (integrity mode: silent corruption found and repaired).
    pub checksum_mismatches: u64,
}

impl Array {
    /// Runs a `kind` sync over the whole array (or follows the one of that kind the
    /// array started at open, such as the recover of a member being rebuilt), calling
    /// `progress` as it goes. The array is marked active first: a repair rewrites
    /// parity, and any sync rewrites ranges that failed to read.
    pub fn sync(
        &mut self,
        kind: SyncKind,
        progress: impl FnMut(&SyncProgress),
    ) -> Result<SyncReport, ArrayError> {
        self.sync_until(kind, progress, || false)
    }

    /// [`Array::sync`], returning early (not `completed`) once `stop` says so, the
    /// sync still running: [`Array::close`] then records where it got to, as a
    /// server's stop does, and the next open to write goes on from there.
    pub fn sync_until(
        &mut self,
        kind: SyncKind,
        mut progress: impl FnMut(&SyncProgress),
        stop: impl Fn() -> bool,
    ) -> Result<SyncReport, ArrayError> {
        let refuse = |source| ArrayError::Sync {
            kind: kind.name(),
            source,
        };
        let running = self.driver.engine().sync_progress().map(|p| p.kind);
        // Refused before the superblocks are touched: a sync that cannot run changes nothing.
        if running.is_none() {
            self.driver.engine().can_start_sync(kind).map_err(refuse)?;
        }
        self.begin_writes()?;
        let stats = self.driver.engine().stats();
        let before = stats.read_errors_corrected;
        let sums_before = stats.checksum_mismatches;
        let mut checkpoints = SyncCheckpoints::new(self.sync_checkpoint_every, Instant::now());
        if running != Some(kind) {
            // A sync started at open (a resync after an unclean stop) goes first.
            while self.driver.engine().sync_progress().is_some() {
                self.driver.step()?;
                self.record_new_failures()?;
                self.checkpoint_if_due(&mut checkpoints)?;
                if !self.driver.io_in_flight() {
                    self.driver.tick();
                }
            }
            self.take_events()?;
            self.driver
                .engine_mut()
                .start_sync(kind, 0)
                .map_err(refuse)?;
        }
        let first = self
            .driver
            .engine()
            .sync_progress()
            .map_or((0, 0), |p| (p.total_units, p.unit_sectors));
        loop {
            self.driver.step()?;
            // A member failing is recorded as it fails, and the sync's progress every
            // so often, as a server records them.
            self.record_new_failures()?;
            self.checkpoint_if_due(&mut checkpoints)?;
            for event in self.take_events()? {
                if let Event::SyncFinished {
                    kind,
                    completed,
                    mismatches,
                    unrecoverable,
                    visited,
                    skipped,
                    ..
                } = event
                {
                    let stats = self.driver.engine().stats();
                    let after = stats.read_errors_corrected;
                    return Ok(SyncReport {
                        kind,
                        completed,
                        mismatches,
                        unrecoverable,
                        units: first.0,
                        unit_sectors: first.1,
                        visited,
                        skipped,
                        read_errors_corrected: after - before,
                        checksum_mismatches: stats.checksum_mismatches - sums_before,
                    });
                }
            }
            if let Some(p) = self.driver.engine().sync_progress() {
                progress(&p);
                if stop() {
                    let stats = self.driver.engine().stats();
                    return Ok(SyncReport {
                        kind,
                        completed: false,
                        mismatches: p.mismatches,
                        unrecoverable: p.unrecoverable,
                        units: first.0,
                        unit_sectors: first.1,
                        visited: p.done_below,
                        skipped: 0,
                        read_errors_corrected: stats.read_errors_corrected - before,
                        checksum_mismatches: stats.checksum_mismatches - sums_before,
                    });
                }
            }
            if !self.driver.io_in_flight() {
                // Nothing in flight: the sync waits for its pace.
                if let Some(wait) = self.driver.until_timer() {
                    std::thread::sleep(wait);
                }
                self.driver.tick();
            }
        }
    }

    /// Records the running sync's progress when `checkpoints` says it is due (not on
    /// an array already failed: its record is the failure's, see `close`).
    fn checkpoint_if_due(&mut self, checkpoints: &mut SyncCheckpoints) -> Result<(), ArrayError> {
        if self.driver.engine().lost_error().is_some() || !checkpoints.take_due() {
            return Ok(());
        }
        match self.checkpoint_sync() {
            // The array failed under the checkpoint's flush: that failure is recorded
            // now, as any other, and the loss is the sync's to report as it goes on
            // (an error here would leave the command without its close).
            Err(_) if self.driver.engine().lost_error().is_some() => self.record_new_failures(),
            other => other,
        }
    }
}
