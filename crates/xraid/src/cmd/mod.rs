//! One module per command; each turns parsed arguments into calls on the library crates
//! and prints the result.

mod add;
mod create;
mod demo;
mod examine;
mod io;
mod live;
mod membership;
mod named;
mod output;
mod replace;
mod scrub;
mod serve;
mod sim;
mod status;

use std::path::PathBuf;

use anyhow::{bail, Result};
use xraid_array::{assemble_with_spares, Array, Assembled, OpenMode};
use xraid_driver::BackendChoice;
use xraid_member::{DirectMode, MemberFault, OpenOptions};

use crate::cli::{Backend, Cli, Command};

pub fn run(cli: Cli) -> Result<()> {
    let backend = match cli.io_backend {
        Backend::Auto => BackendChoice::Auto,
        Backend::Uring => BackendChoice::Uring,
        Backend::Threads => BackendChoice::Threads,
    };
    match cli.command {
        Command::Create(args) => create::run(args, backend),
        Command::Examine(args) => examine::run(args),
        Command::Status(args) => status::run(args),
        Command::Read(args) => io::read(args, backend),
        Command::Write(args) => io::write(args, backend),
        Command::Serve(args) => serve::run(args, backend),
        Command::Add(args) => add::run(args, backend),
        Command::Replace(args) => replace::run(args, backend),
        Command::Fail(args) => membership::fail(args),
        Command::Remove(args) => membership::remove(args),
        Command::Scrub(args) => scrub::run(args, backend),
        Command::Demo(args) => demo::run(args, backend),
        Command::Sim(args) => sim::run(args),
    }
}

/// Assembles the array named by `paths` and opens it for I/O, warning (one line each)
/// about members left out and members that cannot use O_DIRECT.
pub(crate) fn open_array(
    paths: &[PathBuf],
    mode: OpenMode,
    backend: BackendChoice,
) -> Result<Array> {
    open_array_with_faults(paths, mode, backend, &[])
}

/// Opens an array with some members wrapped in injected faults (`--fault`).
pub(crate) fn open_array_with_faults(
    paths: &[PathBuf],
    mode: OpenMode,
    backend: BackendChoice,
    faults: &[MemberFault],
) -> Result<Array> {
    let options = OpenOptions {
        write: mode == OpenMode::ReadWrite,
        direct: DirectMode::Auto,
        lock: true,
    };
    let (assembled, promoted) = assemble_with_spares(paths, &options)?;
    for spare in &promoted {
        eprintln!(
            "xraid: spare {} takes role {}: it is rebuilt while the array is open to write, going on from where it stopped each time (`xraid serve` runs it in the background; `xraid status` shows how far it is)",
            spare.path.display(),
            spare.role.unwrap_or_default()
        );
    }
    warn_about(&assembled);
    let roles = assembled.geometry.raid_disks();
    for f in faults {
        if usize::from(f.role) >= usize::from(roles) {
            bail!(
                "--fault names role {}, but the array has roles 0 to {}",
                f.role,
                roles - 1
            );
        }
        if let Err(e) = assembled.check_fault_fits(f) {
            bail!("{e}");
        }
        if f.plan.on_machine_power {
            bail!(
                "--fault power-cut-on-signal is for `xraid serve` (a running server's crash test)"
            );
        }
        eprintln!("xraid: injecting faults into role {}: {}", f.role, f.plan);
    }
    Ok(Array::open_with_faults(assembled, mode, backend, faults)?)
}

fn warn_about(assembled: &Assembled) {
    for m in assembled.roles.iter().flatten() {
        if let Some(reason) = m.member.direct_unavailable_reason() {
            eprintln!(
                "xraid: warning: {}: buffered I/O ({reason})",
                m.path.display()
            );
        }
    }
    // Hot spares waiting are as they should be: no warning.
    for l in assembled
        .unused()
        .filter(|l| l.reason != xraid_array::LeftOutReason::Spare)
    {
        eprintln!(
            "xraid: warning: {} left out: {}",
            l.path.display(),
            l.reason
        );
    }
    for (path, damage) in &assembled.damaged {
        eprintln!(
            "xraid: warning: {} left out: its md superblock is damaged ({damage})",
            path.display()
        );
    }
    if assembled.is_degraded() {
        let missing: Vec<String> = assembled
            .missing_roles()
            .iter()
            .map(u16::to_string)
            .collect();
        eprintln!(
            "xraid: warning: array '{}' is degraded: role(s) {} missing",
            assembled.name(),
            missing.join(", ")
        );
    }
}

/// `text` as one shell word: quoted when it holds anything a shell would act on.
pub(crate) fn shell_word(text: &str) -> String {
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/:._-+=@%,".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// `done` of `total` in whole percent (0 of 0 is 0).
pub(crate) fn percent(done: u64, total: u64) -> u64 {
    (done * 100).checked_div(total).unwrap_or(0)
}

/// Runs a `kind` sync on an array opened offline, with a progress bar named `label`;
/// Ctrl-C (or SIGTERM) ends it early, not `completed`, for the caller's `close` to
/// record where it got to (see `crate::interrupt`). A sync that fails closes the
/// array all the same (what it can still record is recorded: a member failure, the
/// progress), and its error is the one returned.
pub(crate) fn sync_with_bar(
    mut array: Array,
    kind: xraid_engine::SyncKind,
    label: &str,
) -> Result<(Array, xraid_array::SyncReport)> {
    match sync_with_bar_open(&mut array, kind, label) {
        Ok(report) => Ok((array, report)),
        Err(error) => {
            // The sync's error says what went wrong; close's (often the same loss
            // again) would only repeat it.
            let _ = array.close();
            Err(error)
        }
    }
}

fn sync_with_bar_open(
    array: &mut Array,
    kind: xraid_engine::SyncKind,
    label: &str,
) -> Result<xraid_array::SyncReport> {
    let bar = crate::progress::bytes_bar(0, label);
    let report = array.sync_until(
        kind,
        |p| {
            let unit_bytes = p.unit_sectors * xraid_layout::SECTOR_BYTES;
            crate::progress::set_total(&bar, p.total_units * unit_bytes);
            bar.set_position(p.done_below * unit_bytes);
        },
        crate::interrupt::requested,
    );
    // Also before an error, which is said on a line of its own.
    bar.finish_and_clear();
    Ok(report?)
}
