//! The server's log: one line per event on standard error, so a service manager's
//! journal shows what happened to whom. A log nobody reads any more (a closed pipe)
//! must not stop the server: failed writes are dropped.

use std::io::Write;

pub(crate) fn info(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "xraid serve: {message}");
}

pub(crate) fn error(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "xraid serve: error: {message}");
}
