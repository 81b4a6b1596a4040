//! Progress bars for long work: shown with rate and ETA when standard error is a
//! terminal, and nothing otherwise (scripts and pipes stay quiet).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Moves `bar` to `done` of the bytes the server's running sync covers (its status'
/// `sync.total_bytes`), when both are known.
pub fn follow_sync(bar: &ProgressBar, status: &serde_json::Value, done: Option<u64>) {
    if let (Some(total), Some(done)) = (status["sync"]["total_bytes"].as_u64(), done) {
        bar.set_length(total);
        bar.set_position(done);
    }
}

/// A byte-counting progress bar, or a silent stand-in off a terminal.
pub fn bytes_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_owned());
    bar
}
