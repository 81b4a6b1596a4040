//! The CPU side of the two lanes: a connection thread busy with large requests runs at
//! a lower scheduling priority (nice 10) than one serving small ones, so on a machine
//! with few cores a stream of megabyte writes cannot push a 4 KiB read's latency up by
//! keeping the cores busy. The engine side of the lanes is in `array_export`.

/// Requests of at least this many bytes are bulk work.
pub(crate) const BULK_BYTES: u32 = 128 * 1024;
const BULK_NICE: libc::c_int = 10;

/// Tracks which lane the calling thread is in and moves it when the work changes.
#[derive(Debug, Default)]
pub(crate) struct Lane {
    bulk: bool,
}

impl Lane {
    /// Notes the size of the request this thread is about to serve.
    pub(crate) fn note(&mut self, bytes: u32) {
        let bulk = bytes >= BULK_BYTES;
        if bulk != self.bulk {
            self.bulk = bulk;
            set_nice(if bulk { BULK_NICE } else { 0 });
        }
    }
}

/// Sets the calling thread's nice value. Going back to 0 needs CAP_SYS_NICE (or a
/// raised RLIMIT_NICE) when not root; without it the thread simply stays in the bulk
/// lane, which costs it only priority.
fn set_nice(nice: libc::c_int) {
    // SAFETY: gettid and setpriority take no pointers; they act on this thread only.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}

/// Moves the kernel's io_uring workers of this process (threads named `iou-wrk-*`)
/// into the bulk lane. They do the transfers sent to them asynchronously — large ones
/// (see xraid-uring) — and, left at normal priority, would take the cores from the
/// threads answering small requests.
pub(crate) fn renice_io_workers() {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for task in tasks.flatten() {
        let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) else {
            continue;
        };
        if !comm.starts_with("iou-wrk") {
            continue;
        }
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<libc::id_t>().ok())
        else {
            continue;
        };
        // SAFETY: setpriority takes no pointers; it acts on one of this process's
        // threads, or fails harmlessly if the thread has just exited.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, BULK_NICE) };
    }
}
