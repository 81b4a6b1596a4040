//! The `xraid` command: parses the command line, runs one command, and reports any
//! failure as one line on standard error with a non-zero exit code.

mod cli;
mod cmd;
mod progress;
mod size;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match cmd::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xraid: {error:#}");
            ExitCode::FAILURE
        }
    }
}
