//! Progress bars for long work: shown with rate and ETA when standard error is a
//! terminal, and nothing otherwise (scripts and pipes stay quiet).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Moves `bar` to `done` of the bytes the server's running sync covers (its status'
/// `sync.total_bytes`), when both are known.
pub fn follow_sync(bar: &ProgressBar, status: &serde_json::Value, done: Option<u64>) {
    if let (Some(total), Some(done)) = (status["sync"]["total_bytes"].as_u64(), done) {
        set_total(bar, total);
        bar.set_position(done);
    }
}

/// A byte-counting progress bar, or a silent stand-in off a terminal. A `total` of 0
/// is not known yet: until [`set_total`] gives it, the bar is a spinner, since a bar
/// of 0 bytes would show as full ("0 B/0 B, ETA 0s") before any work is done.
pub fn bytes_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    shown_bar(total, what)
}

/// The bar [`bytes_bar`] shows on a terminal.
fn shown_bar(total: u64, what: &str) -> ProgressBar {
    let bar = if total == 0 {
        let bar = ProgressBar::no_length();
        let style = ProgressStyle::with_template("{spinner} {msg} {bytes} {binary_bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        bar
    } else {
        let bar = ProgressBar::new(total);
        bar.set_style(bar_style());
        bar
    };
    bar.set_message(what.to_owned());
    bar
}

/// Steps of a [`fraction_bar`]: a tenth of a percent each.
pub const FRACTION_STEPS: u64 = 1000;

/// A bar for work measured as a fraction done (a simulation: its end is simulated time
/// or requests, not bytes), moved with [`set_fraction`]; a silent stand-in off a
/// terminal.
pub fn fraction_bar(what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(FRACTION_STEPS);
    let style = ProgressStyle::with_template("{msg} [{bar:30}] {percent}% ETA {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_owned());
    bar
}

/// Moves a [`fraction_bar`] to `fraction` (0 to 1) of its work.
pub fn set_fraction(bar: &ProgressBar, fraction: f64) {
    bar.set_position((fraction.clamp(0.0, 1.0) * FRACTION_STEPS as f64) as u64);
}

/// Gives `bar` its total once it is known, turning a spinner into a bar.
pub fn set_total(bar: &ProgressBar, total: u64) {
    if total == 0 {
        return;
    }
    if bar.length().is_none() {
        bar.set_style(bar_style());
    }
    bar.set_length(total);
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_whose_total_is_not_known_yet_is_no_full_bar() {
        let bar = shown_bar(0, "scrub");
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        assert_eq!(bar.length(), None, "a spinner until the total is known");
        follow_sync(&bar, &serde_json::json!({ "sync": {} }), Some(0));
        assert_eq!(bar.length(), None, "no total in the status yet");
        set_total(&bar, 0);
        assert_eq!(bar.length(), None, "0 is no total");
        let status = serde_json::json!({ "sync": { "total_bytes": 4096 } });
        follow_sync(&bar, &status, Some(1024));
        assert_eq!((bar.length(), bar.position()), (Some(4096), 1024));
        let fraction = fraction_bar("simulating");
        fraction.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        set_fraction(&fraction, 0.25);
        assert_eq!(fraction.position(), FRACTION_STEPS / 4);
        set_fraction(&fraction, 7.0);
        assert_eq!(fraction.position(), FRACTION_STEPS, "never past the end");
        let known = shown_bar(10, "writing");
        known.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        assert_eq!(known.length(), Some(10));
    }
}
