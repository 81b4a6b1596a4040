//! `xraid add`: a member into a degraded array's missing role, rebuilt with a progress
//! bar (or, with `--no-rebuild`, left for the next open to rebuild in the background);
//! into a whole array (or with `--spare`), a hot spare.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use xraid_array::{add_member, OpenMode};
use xraid_driver::BackendChoice;
use xraid_engine::SyncKind;
use xraid_layout::SECTOR_BYTES;

use crate::cli::AddArgs;
use crate::progress::bytes_bar;

pub fn run(args: AddArgs, backend: BackendChoice) -> Result<()> {
    let paths = vec![args.array.clone()];
    if super::live::served(&paths).is_some() {
        bail!(
            "the array is served by a running xraid serve: adding members to a running server is not supported yet (hot spares already there step in by themselves); stop the server first"
        );
    }
    let added = add_member(&paths, &args.member, args.size, args.spare, args.force)?;
    let Some(role) = added.role else {
        println!(
            "{}: added as a hot spare; it takes the place of the next member to fail",
            added.path.display()
        );
        return Ok(());
    };
    println!(
        "{}: added as role {role} of the array; it is rebuilt from the others",
        added.path.display(),
    );
    if args.no_rebuild {
        return Ok(());
    }
    let mut array = super::open_array(
        &with_member(&args.array, &args.member),
        OpenMode::ReadWrite,
        backend,
    )?;
    let bar = bytes_bar(0, "rebuild");
    let report = array.sync(SyncKind::Recover, |p| {
        let unit_bytes = p.unit_sectors * SECTOR_BYTES;
        bar.set_length(p.total_units * unit_bytes);
        bar.set_position(p.done_below * unit_bytes);
    })?;
    bar.finish_and_clear();
    array.close()?;
    if report.unrecoverable > 0 {
        bail!(
            "rebuild of {} met {} units it could not read or rebuild: it stays out of sync there",
            added.path.display(),
            report.unrecoverable
        );
    }
    println!(
        "{}: rebuilt ({} read errors corrected on the way)",
        added.path.display(),
        report.read_errors_corrected
    );
    Ok(())
}

/// The paths that name the array with its new member: the folder alone when the
/// member lies in it (assembly finds it there), else both.
fn with_member(array: &Path, member: &Path) -> Vec<PathBuf> {
    let inside = array.is_dir()
        && match (
            std::fs::canonicalize(array),
            member.parent().map(std::fs::canonicalize),
        ) {
            (Ok(a), Some(Ok(parent))) => a == parent,
            _ => false,
        };
    if inside {
        vec![array.to_path_buf()]
    } else {
        vec![array.to_path_buf(), member.to_path_buf()]
    }
}
