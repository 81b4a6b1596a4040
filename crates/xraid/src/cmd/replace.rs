//! `xraid replace`: rebuild a new member from an active one while it goes on serving
//! (md's want_replacement), with a progress bar (or, with `--no-rebuild`, left for the
//! next open to run in the background). On an array `xraid serve` serves, the server
//! does it while its clients go on, and this follows it.

use std::path::Path;

use anyhow::{bail, Result};
use xraid_array::{replace_member, OpenMode};
use xraid_driver::BackendChoice;
use xraid_engine::SyncKind;

use crate::cli::ReplaceArgs;
use crate::progress::{bytes_bar, follow_sync};

pub fn run(args: ReplaceArgs, backend: BackendChoice) -> Result<()> {
    let paths = super::named::array_paths(&args.array);
    if let Some(socket) = super::live::served(&paths) {
        return live(&socket, &args);
    }
    let replacing = replace_member(&paths, &args.old, &args.new, args.size, args.force)?;
    let (old, new) = (args.old.display(), args.new.display());
    if args.no_rebuild {
        // Only the superblocks say so: the copy runs once the array is opened to write.
        println!(
            "{new}: replaces {old} in role {}, not copied yet: `xraid serve` copies it from {old} in the background while {old} serves",
            replacing.role
        );
        return Ok(());
    }
    // From here a Ctrl-C keeps what the copy has done.
    crate::interrupt::catch();
    println!(
        "{new}: replaces {old} in role {}; it is rebuilt from {old} while {old} serves",
        replacing.role
    );
    let array = super::open_array(
        &super::add::with_member(&paths, &args.new),
        OpenMode::ReadWrite,
        backend,
    )?;
    let (array, report) = super::sync_with_bar(array, SyncKind::Recover, "replace")?;
    let role = usize::from(replacing.role);
    let took = array
        .role_path(role)
        .is_some_and(|p| same_file(p, &args.new));
    array.close()?;
    if !report.completed && crate::interrupt::requested() {
        bail!(
            "interrupted: {new} is copied {}% and stays {old}'s replacement; the copy goes on from there when the array is next opened to write (xraid serve)",
            super::percent(report.visited, report.units)
        );
    }
    if !report.completed || report.unrecoverable > 0 {
        bail!(
            "replacement of {old} by {new} met {} units it could not read or rebuild: {new} stays a replacement (see xraid status)",
            report.unrecoverable
        );
    }
    if !took {
        bail!("{new} did not take role {role}: see xraid status");
    }
    println!(
        "{new}: holds role {role} now ({} read errors corrected on the way); {old} is marked faulty: take it out with xraid remove",
        report.read_errors_corrected
    );
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    real(a) == real(b)
}

/// Has the server that serves the array start the replacement (the same checks as
/// offline); unless `--no-rebuild`, follows the copy to its end with a progress bar.
/// Interrupting it leaves the copy running.
fn live(socket: &Path, args: &ReplaceArgs) -> Result<()> {
    use super::live::{absolute, ask};
    let old = absolute(&args.old).display().to_string();
    let new = absolute(&args.new).display().to_string();
    let answer = ask(
        socket,
        &serde_json::json!({
            "op": "replace",
            "member": old,
            "new": new,
            "force": args.force,
            "size": args.size,
        }),
    )?;
    let role = answer["role"].as_u64().unwrap_or_default();
    println!(
        "{new}: replaces {old} in role {role}, by the server that serves the array; it is rebuilt in the background while clients are served"
    );
    if args.no_rebuild {
        return Ok(());
    }
    let bar = bytes_bar(0, "replace");
    let r = usize::try_from(role).unwrap_or(usize::MAX);
    loop {
        let status = ask(socket, &serde_json::json!({ "op": "status" }))?;
        let member = &status["members"][r];
        let path = member["path"].as_str();
        if path == Some(new.as_str()) {
            // It holds the role: done, or rebuilding it after OLD failed.
            match member["state"].as_str() {
                Some("active") => break,
                Some("rebuilding") => {
                    follow_sync(&bar, &status, member["rebuilt_bytes"].as_u64());
                }
                _ => {
                    bar.finish_and_clear();
                    bail!("{new} failed after taking role {role}: see the server's log");
                }
            }
        } else if member["replacement"]["path"].as_str() == Some(new.as_str()) {
            // The copy is the running recover's walk.
            follow_sync(&bar, &status, status["sync"]["done_bytes"].as_u64());
        } else {
            bar.finish_and_clear();
            bail!("{new} is no longer replacing {old}: it failed, see xraid status and the server's log");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    bar.finish_and_clear();
    println!("{new}: holds role {role} now; {old} is marked faulty: xraid remove takes it out (xraid add --spare makes it a hot spare)");
    Ok(())
}
