//! The server's log: one line per event on standard error, so a service manager's
//! journal shows what happened to whom.

pub(crate) fn info(message: &str) {
    eprintln!("xraid serve: {message}");
}

pub(crate) fn error(message: &str) {
    eprintln!("xraid serve: error: {message}");
}
