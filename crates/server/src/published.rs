//! What the control socket can say of an array whose thread is busy: the status the
//! thread last published, how long ago its loop last came round, and the device I/O it
//! waits on, if any. A superblock update that meets a stalled member holds the thread
//! for up to the stall timeout (a round per stalled member); `xraid status` is what an
//! operator reaches for then, so it answers from here instead of waiting with
//! everything else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use xraid_driver::DeviceWaitWatch;

/// How often the array's thread publishes its status while its loop runs.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(crate) struct Published {
    base: Instant,
    /// Nanoseconds from `base` to the start of the thread's last round.
    beat_ns: AtomicU64,
    /// The last status published.
    status: Mutex<Option<Snapshot>>,
    /// The device I/O the thread waits on, if any (the driver's own view).
    device_wait: Option<DeviceWaitWatch>,
    /// The control request the thread is carrying out, if any (`add`, `remove`...):
    /// its superblock update is what holds the thread, and the snapshot is of the
    /// array before it.
    carrying_out: Mutex<Option<serde_json::Value>>,
}

#[derive(Debug, Clone)]
struct Snapshot {
    at: Instant,
    status: serde_json::Value,
}

impl Published {
    /// Published state for an array whose driver shows the device I/O it waits on in
    /// `device_wait`.
    pub(crate) fn new(device_wait: Option<DeviceWaitWatch>) -> Published {
        Published {
            base: Instant::now(),
            beat_ns: AtomicU64::new(0),
            status: Mutex::new(None),
            device_wait,
            carrying_out: Mutex::new(None),
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
        let snapshot = Snapshot {
            at: Instant::now(),
            status,
        };
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) = Some(snapshot);
    }

    /// The thread begins (`Some(request)`) or ends (`None`) carrying out a control
    /// request.
    pub(crate) fn carrying_out(&self, request: Option<serde_json::Value>) {
        *self
            .carrying_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = request;
    }

    /// The last status published, marked as such: how old it is and how long the
    /// thread has been busy (`answered_from`, `snapshot_age_ms`, `busy_ms`), and the
    /// device I/O it waits on, if it waits on one (`waiting_on`: the driver `slot`,
    /// the device's `path`, `for_ms`), and the control request it is carrying out,
    /// if any (`carrying_out`).
    pub(crate) fn last(&self) -> Option<serde_json::Value> {
        let snapshot = self
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        let mut status = snapshot.status;
        status["answered_from"] = "snapshot".into();
        status["snapshot_age_ms"] = millis(snapshot.at.elapsed()).into();
        status["busy_ms"] = millis(self.busy_for()).into();
        let wait = self
            .device_wait
            .as_ref()
            .and_then(|w| w.lock().unwrap_or_else(PoisonError::into_inner).clone());
        if let Some(wait) = wait {
            let slot = usize::from(wait.slot.0);
            // The device named when the wait began (none for an empty slot, whose
            // I/O fails at once): the snapshot can be older than the device now in
            // the slot (a spare that stepped in).
            let path = Some(wait.name).filter(|n| !n.is_empty());
            status["waiting_on"] = serde_json::json!({
                "slot": slot,
                "path": path,
                "for_ms": millis(wait.since.elapsed()),
            });
        }
        let request = self
            .carrying_out
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(request) = request {
            status["carrying_out"] = request;
        }
        Some(status)
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_status_comes_back_marked_with_its_age_the_threads_busy_time_and_its_wait() {
        let watch = DeviceWaitWatch::default();
        let p = Published::new(Some(std::sync::Arc::clone(&watch)));
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
        assert!(
            last.get("waiting_on").is_none(),
            "no device I/O waited on: {last}"
        );
        *watch.lock().expect("lock") = Some(xraid_driver::DeviceWait {
            slot: xraid_engine::MemberIdx(2),
            name: "/dev/c".to_owned(),
            since: Instant::now() - Duration::from_millis(50),
        });
        let last = p.last().expect("published");
        assert_eq!(last["waiting_on"]["slot"], 2, "{last}");
        assert_eq!(last["waiting_on"]["path"], "/dev/c", "{last}");
        // A spare stepped into slot 2 since the snapshot and is the one written: it
        // is named, not the failed device the snapshot had there.
        *watch.lock().expect("lock") = Some(xraid_driver::DeviceWait {
            slot: xraid_engine::MemberIdx(2),
            name: "/dev/spare".to_owned(),
            since: Instant::now() - Duration::from_millis(50),
        });
        let last = p.last().expect("published");
        assert_eq!(last["waiting_on"]["path"], "/dev/spare", "{last}");
        assert!(
            last["waiting_on"]["for_ms"]
                .as_u64()
                .is_some_and(|ms| ms >= 50),
            "{last}"
        );
        assert!(last.get("carrying_out").is_none(), "{last}");
        let add = serde_json::json!({ "op": "add", "member": "/dev/new" });
        p.carrying_out(Some(add.clone()));
        assert_eq!(p.last().expect("published")["carrying_out"], add);
        p.carrying_out(None);
        assert!(p.last().expect("published").get("carrying_out").is_none());
        p.beat();
        assert!(p.busy_for() < Duration::from_millis(30));
    }
}
