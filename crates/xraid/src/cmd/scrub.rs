//! `xraid scrub check|repair`: md's sync_action check and repair, run here on an array
//! that is not being served or by the server that serves it, with a progress bar and a
//! report of what disagreed.

use anyhow::{bail, Result};
use serde::Serialize;
use xraid_array::OpenMode;
use xraid_driver::BackendChoice;
use xraid_engine::SyncKind;
use xraid_layout::SECTOR_BYTES;

use crate::cli::{ScrubAction, ScrubArgs};
use crate::progress::{bytes_bar, follow_sync};

/// What a scrub found: the same fields and words whether the server that serves the
/// array ran it or this command did.
#[derive(Debug, Serialize)]
struct Report {
    array: String,
    action: &'static str,
    /// The server that serves the array ran it.
    served: bool,
    completed: bool,
    /// Sync units (stripes; chunks for RAID-10; 512 KiB for RAID-1) where redundancy
    /// disagreed with the data.
    mismatched_units: u64,
    /// The same in member sectors, the unit md's mismatch_cnt counts in.
    mismatch_sectors: u64,
    unrecoverable_units: u64,
    read_errors_corrected: u64,
    /// Integrity mode: reads whose blocks disagreed with their checksums (each
    /// repaired from redundancy as a read error is).
    checksum_mismatches: u64,
    /// Sectors the members' bad block logs listed that were rebuilt and rewritten
    /// (taken off the logs), and those still listed after it.
    listed_sectors_rewritten: u64,
    listed_sectors_left: u64,
    units: u64,
    unit_bytes: u64,
}

pub fn run(args: ScrubArgs, backend: BackendChoice) -> Result<()> {
    let kind = match args.action {
        ScrubAction::Check => SyncKind::Check,
        ScrubAction::Repair => SyncKind::Repair,
    };
    if let Some(socket) = super::live::served(&args.array) {
        let out = live(&socket, kind)?;
        return print_report(&out, kind, args.json);
    }
    let array = super::open_array(&args.array, OpenMode::ReadWrite, backend)?;
    let name = array.name();
    crate::interrupt::catch();
    say_what_runs_first(&array, kind);
    let listed_before = array.driver_ref().engine().listed_sectors();
    let (array, report) = super::sync_with_bar(array, kind, kind.name())?;
    let listed_after = array.driver_ref().engine().listed_sectors();
    array.close()?;
    if !report.completed && crate::interrupt::requested() {
        eprintln!(
            "xraid: interrupted after {}% of the array: what follows covers that part only",
            super::percent(report.visited, report.units)
        );
    }
    let out = Report {
        array: name,
        action: kind.name(),
        served: false,
        completed: report.completed,
        mismatched_units: report.mismatches,
        mismatch_sectors: report.mismatches * report.unit_sectors,
        unrecoverable_units: report.unrecoverable,
        read_errors_corrected: report.read_errors_corrected,
        checksum_mismatches: report.checksum_mismatches,
        listed_sectors_rewritten: listed_before.saturating_sub(listed_after),
        listed_sectors_left: listed_after,
        units: report.units,
        unit_bytes: report.unit_sectors * SECTOR_BYTES,
    };
    print_report(&out, kind, args.json)
}

/// Says what an offline scrub waits for first: a sync the open started (the rebuild
/// of a member left part way, or the resync an unclean stop owes) runs to its end
/// before the scrub begins (see `Array::sync_until`).
fn say_what_runs_first(array: &xraid_array::Array, kind: SyncKind) {
    let Some(running) = array.driver_ref().engine().sync_progress() else {
        return;
    };
    if running.kind == kind {
        return;
    }
    let what = match running.kind {
        SyncKind::Recover => {
            let roles: Vec<String> = array
                .rebuilding()
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_some())
                .map(|(role, _)| role.to_string())
                .collect();
            format!(
                "the rebuild of role {} left part way ({}% done)",
                roles.join(", "),
                super::percent(running.done_below, running.total_units)
            )
        }
        SyncKind::Resync => "the resync the array owes (it was not stopped cleanly)".to_owned(),
        other => format!("the {} left part way", other.name()),
    };
    eprintln!("xraid: {what} runs first; the {} follows it", kind.name());
}

/// Prints the report (text or JSON); an error when the scrub met data the array lost.
fn print_report(out: &Report, kind: SyncKind, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(out)?);
    } else {
        let by = if out.served {
            " (by the server that serves it)"
        } else {
            ""
        };
        let fixed = if kind == SyncKind::Repair && out.mismatched_units > 0 {
            " (rewritten)"
        } else {
            ""
        };
        let sums = if out.checksum_mismatches > 0 {
            format!(
                " ({} of them blocks that failed their checksums)",
                out.checksum_mismatches
            )
        } else {
            String::new()
        };
        let mut listed = String::new();
        if out.listed_sectors_rewritten > 0 {
            listed = format!(
                ", {} sectors the bad block logs listed rebuilt and rewritten",
                out.listed_sectors_rewritten
            );
        }
        if out.listed_sectors_left > 0 {
            listed.push_str(&format!(
                ", {} still listed (no redundancy to rebuild them: `xraid examine` names them)",
                out.listed_sectors_left
            ));
        }
        println!(
            "{} of array '{}'{by}: {} of {} units mismatched{fixed}, {} read errors corrected{sums}{listed}",
            out.action, out.array, out.mismatched_units, out.units, out.read_errors_corrected
        );
    }
    if out.unrecoverable_units > 0 {
        bail!(
            "{} units could not be read or rebuilt: the array has lost data there",
            out.unrecoverable_units
        );
    }
    Ok(())
}

/// Has the server that serves the array run the scrub, following its progress, and
/// returns what it found (its status' `last_sync`).
fn live(socket: &std::path::Path, kind: SyncKind) -> Result<Report> {
    use super::live::ask;
    ask(
        socket,
        &serde_json::json!({ "op": "scrub", "action": kind.name() }),
    )?;
    let bar = bytes_bar(0, kind.name());
    let status = loop {
        let status = ask(socket, &serde_json::json!({ "op": "status" }))?;
        match status["sync"].as_object() {
            Some(sync) if sync["kind"] == kind.name() => {
                follow_sync(&bar, &status, sync["done_bytes"].as_u64());
            }
            Some(sync) => {
                // Another sync took over (a spare's recover cancels a scrub).
                bar.finish_and_clear();
                bail!(
                    "the {} was stopped: the server runs a {} now; scrub again when it is done",
                    kind.name(),
                    sync["kind"].as_str().unwrap_or("sync")
                );
            }
            None if status["last_sync"]["kind"] == kind.name() => break status,
            None => {}
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    bar.finish_and_clear();
    let last = &status["last_sync"];
    let count = |field: &str| last[field].as_u64().unwrap_or(0);
    let unit_bytes = count("unit_bytes");
    Ok(Report {
        array: status["name"].as_str().unwrap_or("?").to_owned(),
        action: kind.name(),
        served: true,
        completed: last["completed"] == true,
        mismatched_units: count("mismatched_units"),
        mismatch_sectors: count("mismatched_units") * (unit_bytes / SECTOR_BYTES),
        unrecoverable_units: count("unrecoverable_units"),
        read_errors_corrected: count("read_errors_corrected"),
        checksum_mismatches: count("checksum_mismatches"),
        listed_sectors_rewritten: count("listed_sectors_rewritten"),
        listed_sectors_left: count("listed_sectors_left"),
        units: count("total_units"),
        unit_bytes,
    })
}
