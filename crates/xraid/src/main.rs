//! The `xraid` command: parses the command line, runs one command, and reports any
//! failure as one line on standard error with a non-zero exit code.

mod cli;
mod cmd;
mod interrupt;
mod progress;
mod size;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let serves = matches!(cli.command, cli::Command::Serve(_) | cli::Command::Demo(_));
    if !serves {
        // SAFETY: called before any other thread exists. The default action of SIGPIPE
        // makes `xraid status | head` end quietly, as a Unix tool does, instead of
        // panicking on a closed standard output. A server keeps ignoring it: a client
        // that vanishes must cost only its own connection (EPIPE), never the process.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match cmd::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xraid: {}", one_line(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each cause once: many of our messages already
/// quote their cause, and anyhow's chain would repeat it.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}
