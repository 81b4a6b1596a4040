//! `xraid add`: a member into a degraded array's missing role, rebuilt with a progress
//! bar (or, with `--no-rebuild`, left for the next open to rebuild in the background);
//! into a whole array (or with `--spare`), a hot spare. On an array `xraid serve`
//! serves, the server does it while its clients go on, and rebuilds in the background.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use xraid_array::{add_member, OpenMode};
use xraid_driver::BackendChoice;
use xraid_engine::SyncKind;

use crate::cli::AddArgs;
use crate::progress::{bytes_bar, follow_sync};

pub fn run(args: AddArgs, backend: BackendChoice) -> Result<()> {
    let paths = super::named::array_paths(&args.array);
    if let Some(socket) = super::live::served(&paths) {
        live(&socket, &args)?;
        warn_if_outside_the_folder(&args.array, &args.member);
        return Ok(());
    }
    let result = add_offline(&args, &paths, backend);
    if result.is_ok() {
        warn_if_outside_the_folder(&args.array, &args.member);
    }
    result
}

/// The folder whose files an ARRAY argument names (itself, or a member file's folder;
/// none for a block device, whose siblings are the machine's block devices).
fn members_folder(array: &Path) -> Option<PathBuf> {
    let meta = std::fs::metadata(array).ok()?;
    if meta.is_dir() {
        return std::fs::canonicalize(array).ok();
    }
    if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
        return None;
    }
    std::fs::canonicalize(super::named::folder_of(array)).ok()
}

/// A member file added from outside the folder that names the array is not found by
/// the next command that names the array so (`status`, `serve` of the folder): a hot
/// spare would be forgotten without a word at the next start (an audit found it so),
/// a role's member left out as missing. Said once, after the add.
fn warn_if_outside_the_folder(array: &Path, member: &Path) {
    let Some(folder) = members_folder(array) else {
        return;
    };
    let Ok(meta) = std::fs::metadata(member) else {
        return;
    };
    if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
        return;
    }
    let Ok(real) = std::fs::canonicalize(member) else {
        return;
    };
    if real.parent() != Some(folder.as_path()) {
        eprintln!(
            "xraid: warning: {} is not in {}, which names the array: commands that name the array by that folder (or by a member in it) will not find it, and the next start leaves it out; name it with the other members' paths, or keep every member in that folder",
            member.display(),
            folder.display()
        );
    }
}

fn add_offline(args: &AddArgs, paths: &[PathBuf], backend: BackendChoice) -> Result<()> {
    let added = add_member(paths, &args.member, args.size, args.spare, args.force)?;
    let Some(role) = added.role else {
        println!(
            "{}: added as a hot spare; it takes the place of the next member to fail",
            added.path.display()
        );
        return Ok(());
    };
    if args.no_rebuild {
        // Only the superblocks say so: nothing is rebuilt until the array is opened to
        // write, which `xraid serve` does.
        println!(
            "{}: added as role {role} of the array, not rebuilt yet: `xraid serve` rebuilds it from the others in the background (until then the array stays degraded)",
            added.path.display(),
        );
        return Ok(());
    }
    // From here a Ctrl-C keeps what the rebuild has done.
    crate::interrupt::catch();
    println!(
        "{}: added as role {role} of the array; it is rebuilt from the others",
        added.path.display(),
    );
    let array = super::open_array(
        &with_member(paths, &args.member),
        OpenMode::ReadWrite,
        backend,
    )?;
    let (array, report) = super::sync_with_bar(array, SyncKind::Recover, "rebuild")?;
    array.close()?;
    if !report.completed && crate::interrupt::requested() {
        bail!(
            "interrupted: {} is rebuilt {}% and stays being rebuilt; the rebuild goes on from there when the array is next opened to write (xraid serve)",
            added.path.display(),
            super::percent(report.visited, report.units)
        );
    }
    if report.unrecoverable > 0 {
        bail!(
            "rebuild of {} met {} units it could not read or rebuild: it stays out of sync there",
            added.path.display(),
            report.unrecoverable
        );
    }
    let caught_up = if report.skipped > 0 {
        format!(
            "; caught up on {} of {} units, the ones the write-intent bitmap marks as written while it was away",
            report.visited, report.units
        )
    } else {
        String::new()
    };
    println!(
        "{}: rebuilt ({} read errors corrected on the way{caught_up})",
        added.path.display(),
        report.read_errors_corrected
    );
    Ok(())
}

/// Has the server that serves the array add the member (the same checks as offline,
/// `--size` and `--force` included). A member put into a role is rebuilt by the server
/// in the background; unless `--no-rebuild`, this follows the rebuild to its end with a
/// progress bar, as the offline add does. Interrupting it leaves the rebuild running.
fn live(socket: &Path, args: &AddArgs) -> Result<()> {
    use super::live::{absolute, ask};
    let path = absolute(&args.member);
    let shown = path.display().to_string();
    let answer = ask(
        socket,
        &serde_json::json!({
            "op": "add",
            "member": shown,
            "spare": args.spare,
            "force": args.force,
            "size": args.size,
        }),
    )?;
    let Some(role) = answer["role"].as_u64() else {
        println!(
            "{shown}: added as a hot spare by the server that serves the array; it takes the place of the next member to fail"
        );
        return Ok(());
    };
    println!(
        "{shown}: added as role {role} by the server that serves the array; it is rebuilt in the background while clients are served"
    );
    if args.no_rebuild {
        return Ok(());
    }
    let bar = bytes_bar(0, "rebuild");
    let status = loop {
        let status = ask(socket, &serde_json::json!({ "op": "status" }))?;
        let member = usize::try_from(role)
            .ok()
            .map_or(&serde_json::Value::Null, |r| &status["members"][r]);
        if member["path"].as_str() != Some(shown.as_str()) {
            bar.finish_and_clear();
            bail!("{shown} no longer holds role {role}: see xraid status and the server's log");
        }
        match member["state"].as_str() {
            Some("active") => break status,
            Some("rebuilding") => follow_sync(&bar, &status, member["rebuilt_bytes"].as_u64()),
            _ => {
                bar.finish_and_clear();
                bail!("{shown} failed while being rebuilt: see the server's log");
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    bar.finish_and_clear();
    let last = &status["last_sync"];
    let unrecoverable = last["unrecoverable_units"].as_u64().unwrap_or(0);
    if last["kind"] == "recover" && unrecoverable > 0 {
        bail!(
            "rebuild of {shown} met {unrecoverable} units it could not read or rebuild: it stays out of sync there"
        );
    }
    println!("{shown}: rebuilt by the server");
    Ok(())
}

/// The paths that name the array with its new member: `paths` alone when they name
/// the member already or a folder it lies in (assembly finds it there), else with it.
pub(crate) fn with_member(paths: &[PathBuf], member: &Path) -> Vec<PathBuf> {
    let real = |p: &Path| std::fs::canonicalize(p).ok();
    let member_real = real(member);
    let named = paths.iter().any(|p| {
        // Named already, or inside a folder named (a bare file name has an empty
        // parent: real paths are compared).
        real(p) == member_real
            || (p.is_dir()
                && member_real
                    .as_ref()
                    .is_some_and(|m| m.parent() == real(p).as_deref()))
    });
    let mut out = paths.to_vec();
    if !named || member_real.is_none() {
        out.push(member.to_path_buf());
    }
    out
}
