//! Ctrl-C (SIGINT) and SIGTERM during a long offline command (`xraid add`, `replace`,
//! `scrub`): the first asks the command to stop where it is — a rebuild's or a copy's
//! progress is then recorded in the superblocks, as a server records it at a stop, so
//! the next open goes on from there instead of from the start; a second ends the
//! process at once, as the signal would have.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn asked_to_stop(signal: libc::c_int) {
    REQUESTED.store(true, Ordering::SeqCst);
    // SAFETY: signal() is async-signal-safe; the default action for the next one.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
    }
}

/// Catches SIGINT and SIGTERM from now on.
pub fn catch() {
    let handler = asked_to_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic and calls signal(), both
    // async-signal-safe, and takes no pointers.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Whether a stop was asked for since [`catch`].
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
