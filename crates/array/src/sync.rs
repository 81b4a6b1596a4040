//! Running a background sync (check, repair, resync, recover) on an open array from
//! start to end, for the command line and for arrays that are not being served.

use std::time::{Duration, Instant};

use xraid_engine::{Event, SyncKind, SyncProgress};

use crate::{Array, ArrayError};

/// How often a running sync records its progress ([`Array::checkpoint_sync`]).
///
/// A checkpoint holds the array's thread (clients and the sync wait) for a flush and
/// the superblock update: a few milliseconds on memory or a healthy disk, but 150 ms
/// and more on members that answer like slow disks (measured 2026-11-29, 20 ms an
/// I/O), which every 2 s held clients back about 8% of the time. So the clock
/// stretches: the next checkpoint waits at least `spacing` times as long as the last
/// one took, capping the share of time checkpoints take at 1/`spacing`, though never
/// longer than [`CheckpointPace::LONGEST`] (md records its progress every sixteenth
/// of the device or every 5 minutes, `UPDATE_FREQUENCY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPace {
    /// The shortest time between two checkpoints.
    pub every: Duration,
    /// The next checkpoint waits at least this many times as long as the last took
    /// (0: the plain `every` clock).
    pub spacing: u32,
}

impl CheckpointPace {
    /// A crash, a kill or the array's failure costs a rebuild at most this much of
    /// its work, where checkpoints are quick.
    pub const EVERY: Duration = Duration::from_secs(2);
    /// Checkpoints take at most a hundredth of a sync's time.
    pub const SPACING: u32 = 100;
    /// The longest a slow checkpoint stretches the clock to.
    pub const LONGEST: Duration = Duration::from_secs(60);

    /// The wait after a checkpoint that took `took`.
    fn wait_after(self, took: Duration) -> Duration {
        let spaced = took.saturating_mul(self.spacing).min(Self::LONGEST);
        self.every.max(spaced)
    }
}

impl Default for CheckpointPace {
    fn default() -> CheckpointPace {
        CheckpointPace {
            every: CheckpointPace::EVERY,
            spacing: CheckpointPace::SPACING,
        }
    }
}

/// When a running sync's progress is next recorded, by a [`CheckpointPace`].
#[derive(Debug, Clone, Copy)]
pub struct SyncCheckpoints {
    pace: CheckpointPace,
    /// When the last checkpoint ended (or the clock started).
    at: Instant,
    /// How long after `at` the next one is due.
    wait: Duration,
    /// How long the last one took.
    last_took: Option<Duration>,
}

impl SyncCheckpoints {
    /// Checkpoints at `pace`, the first one `pace.every` after `at` (now, but for
    /// tests).
    pub fn new(pace: CheckpointPace, at: Instant) -> SyncCheckpoints {
        SyncCheckpoints {
            pace,
            at,
            wait: pace.every,
            last_took: None,
        }
    }

    /// Runs `checkpoint` if one is due, timing it to space the next one; returns what
    /// it returned (whether it wrote anything, as [`Array::checkpoint_sync`] says), or
    /// `None` when none was due.
    pub fn take_if_due<E>(
        &mut self,
        checkpoint: impl FnOnce() -> Result<bool, E>,
    ) -> Option<Result<bool, E>> {
        let began = Instant::now();
        if began.duration_since(self.at) < self.wait {
            return None;
        }
        let result = checkpoint();
        self.at = Instant::now();
        let took = self.at.duration_since(began);
        self.wait = match result {
            Ok(true) => self.pace.wait_after(took),
            // Nothing written, nothing to space out; or nothing recorded (a member may
            // have stalled it out): the next try comes on the plain clock, so that the
            // work a crash would cost stays within a quick checkpoint's interval.
            Ok(false) | Err(_) => self.pace.every,
        };
        if !matches!(result, Ok(false)) {
            self.last_took = Some(took);
        }
        Some(result)
    }

    /// The sync ended: the next one's checkpoints are timed afresh.
    pub fn sync_ended(&mut self) {
        self.wait = self.pace.every;
        self.last_took = None;
    }

    /// How long after the last checkpoint the next one is due.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// How long the last checkpoint that wrote something (or failed) took: the
    /// clients waited through it.
    pub fn last_took(&self) -> Option<Duration> {
        self.last_took
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
        let mut checkpoints = SyncCheckpoints::new(self.sync_checkpoint_pace, Instant::now());
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
            // I/O the engine queued outside the driver's pump (a call made on it
            // directly) goes out first: left queued, it would wait for the engine's
            // next timer, which could count it stalled.
            self.driver.send_queued();
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
        if self.driver.engine().lost_error().is_some() {
            return Ok(());
        }
        match checkpoints.take_if_due(|| self.checkpoint_sync()) {
            None => Ok(()),
            // The array failed under the checkpoint's flush: that failure is recorded
            // now, as any other, and the loss is the sync's to report as it goes on
            // (an error here would leave the command without its close).
            Some(Err(_)) if self.driver.engine().lost_error().is_some() => {
                self.record_new_failures()
            }
            Some(other) => other.map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn quick_checkpoints_keep_the_plain_clock() {
        let pace = CheckpointPace::default();
        assert_eq!(pace.wait_after(Duration::ZERO), CheckpointPace::EVERY);
        assert_eq!(pace.wait_after(20 * MS), CheckpointPace::EVERY);
    }

    #[test]
    fn slow_checkpoints_stretch_the_clock_to_their_share() {
        let pace = CheckpointPace::default();
        assert_eq!(pace.wait_after(150 * MS), 15_000 * MS);
        assert_eq!(
            pace.wait_after(Duration::from_secs(5)),
            CheckpointPace::LONGEST
        );
        let plain = CheckpointPace {
            every: 20 * MS,
            spacing: 0,
        };
        assert_eq!(plain.wait_after(Duration::from_secs(5)), 20 * MS);
    }

    #[test]
    fn a_checkpoint_runs_when_due_and_spaces_the_next() {
        let pace = CheckpointPace {
            every: Duration::ZERO,
            spacing: 1_000,
        };
        let mut checkpoints = SyncCheckpoints::new(pace, Instant::now());
        let nothing = checkpoints.take_if_due(|| Ok::<_, ()>(false));
        assert_eq!(nothing, Some(Ok(false)), "due at once");
        assert_eq!(checkpoints.last_took(), None, "nothing was recorded");
        let took = checkpoints.take_if_due(|| {
            std::thread::sleep(2 * MS);
            Ok::<_, ()>(true)
        });
        assert_eq!(took, Some(Ok(true)), "due again: the last one took no time");
        assert!(checkpoints.wait() >= 2_000 * MS, "{:?}", checkpoints.wait());
        assert!(checkpoints.last_took().is_some_and(|t| t >= 2 * MS));
        assert_eq!(
            checkpoints.take_if_due(|| Ok::<_, ()>(true)),
            None,
            "spaced out"
        );
        checkpoints.sync_ended();
        assert_eq!(
            checkpoints.last_took(),
            None,
            "a new sync's are timed afresh"
        );
        assert_eq!(checkpoints.wait(), Duration::ZERO);
    }

    #[test]
    fn a_failed_checkpoint_keeps_the_plain_clock() {
        let pace = CheckpointPace {
            every: 5 * MS,
            spacing: 1_000,
        };
        let mut checkpoints = SyncCheckpoints::new(pace, Instant::now() - 10 * MS);
        let failed = checkpoints.take_if_due(|| {
            std::thread::sleep(2 * MS);
            Err::<bool, _>("stalled")
        });
        assert_eq!(failed, Some(Err("stalled")));
        assert_eq!(checkpoints.wait(), 5 * MS, "not stretched");
        assert!(checkpoints.last_took().is_some_and(|t| t >= 2 * MS));
    }
}
