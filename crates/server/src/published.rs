//! What the control socket can say of an array whose thread is busy: the status the
//! thread last published, and how long ago its loop last came round. A superblock
//! update that meets a stalled member holds the thread for up to the stall timeout (a
//! round per stalled member); `xraid status` is what an operator reaches for then, so
//! it answers from here instead of waiting with everything else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the array's thread publishes its status while its loop runs.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(crate) struct Published {
    base: Instant,
    /// Nanoseconds from `base` to the start of the thread's last round.
    beat_ns: AtomicU64,
    /// The last status published, and when.
    status: Mutex<Option<(Instant, serde_json::Value)>>,
}

impl Published {
    pub(crate) fn new() -> Published {
        Published {
            base: Instant::now(),
            beat_ns: AtomicU64::new(0),
            status: Mutex::new(None),
        }
    }

    /// The thread's loop comes round.
    pub(crate) fn beat(&self) {
        let ns = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.beat_ns.store(ns, Ordering::Relaxed);
    }

    /// How long since the loop last came round.
    pub(crate) fn busy_for(&self) -> Duration {
        let beat = Duration::from_nanos(self.beat_ns.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(beat)
    }

    pub(crate) fn publish(&self, status: serde_json::Value) {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((Instant::now(), status));
    }

    /// The last status published, marked as such: how old it is and how long the
    /// thread has been busy (`answered_from`, `snapshot_age_ms`, `busy_ms`).
    pub(crate) fn last(&self) -> Option<serde_json::Value> {
        let (at, mut status) = self
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        status["answered_from"] = "snapshot".into();
        status["snapshot_age_ms"] = millis(at.elapsed()).into();
        status["busy_ms"] = millis(self.busy_for()).into();
        Some(status)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_status_comes_back_marked_with_its_age_and_the_threads_busy_time() {
        let p = Published::new();
        assert!(p.last().is_none(), "nothing published yet");
        p.beat();
        p.publish(serde_json::json!({ "ok": true, "health": "clean" }));
        std::thread::sleep(Duration::from_millis(30));
        let last = p.last().expect("published");
        assert_eq!(last["health"], "clean");
        assert_eq!(last["answered_from"], "snapshot");
        assert!(
            last["snapshot_age_ms"].as_u64().is_some_and(|ms| ms >= 30),
            "{last}"
        );
        assert!(
            last["busy_ms"].as_u64().is_some_and(|ms| ms >= 30),
            "{last}"
        );
        p.beat();
        assert!(p.busy_for() < Duration::from_millis(30));
    }
}
