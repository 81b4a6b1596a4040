//! `xraid status`: the array as /proc/mdstat and `mdadm --detail` would show it.

use anyhow::Result;
use serde::Serialize;
use xraid_array::{assemble_anyway, cannot_start, Assembled, LeftOutReason};
use xraid_format::Superblock;
use xraid_layout::{Layout, Level, SECTOR_BYTES};
use xraid_member::{DirectMode, FileMember, OpenOptions};

use crate::cli::StatusArgs;
use crate::size::human;

#[derive(Debug, Serialize)]
struct Status {
    name: String,
    uuid: String,
    level: String,
    layout: Option<String>,
    chunk_bytes: Option<u64>,
    raid_disks: u16,
    array_size_bytes: u64,
    member_data_bytes: u64,
    /// "clean" or "active" (written and not closed cleanly).
    state: &'static str,
    /// What the array needs, md's words: "clean", "degraded", "recovering" (members
    /// being rebuilt), "resync" (not stopped cleanly: parity is checked when it is next
    /// opened to write).
    health: &'static str,
    /// Why the array cannot start ("failed"): the members it misses.
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_because: Option<String>,
    degraded: bool,
    events: u64,
    /// Integrity mode: members keep a checksum per 4 KiB block.
    integrity: bool,
    members: Vec<MemberStatus>,
    /// Hot spares waiting to step in.
    spares: Vec<String>,
    left_out: Vec<LeftOutStatus>,
}

#[derive(Debug, Serialize)]
struct MemberStatus {
    role: u16,
    /// "active", "rebuilding" (md's recovery offset is set) or "missing".
    state: &'static str,
    /// How far a rebuilding member has been rebuilt, in percent of its data area.
    #[serde(skip_serializing_if = "Option::is_none")]
    rebuilt_percent: Option<u8>,
    path: Option<String>,
    events: Option<u64>,
    device_uuid: Option<String>,
    /// A replacement being built for this member (md's want_replacement).
    #[serde(skip_serializing_if = "Option::is_none")]
    replacement: Option<ReplacementStatus>,
    /// Sectors of its data area its bad block log lists (never returned; rebuilt
    /// from redundancy when read, made good when written).
    bad_block_sectors: u64,
}

#[derive(Debug, Serialize)]
struct ReplacementStatus {
    path: String,
    /// How far the copy is, in percent of the member's data area (md's recovery
    /// offset on the replacement).
    copied_percent: u8,
}

#[derive(Debug, Serialize)]
struct LeftOutStatus {
    path: String,
    role: Option<u16>,
    reason: String,
    events: u64,
}

pub fn run(args: StatusArgs) -> Result<()> {
    if let Some(socket) = super::live::served(&args.array) {
        let mut live = super::live::ask(&socket, &serde_json::json!({ "op": "status" }))?;
        if live["answered_from"] == "snapshot" {
            // The array's thread is held (a superblock update waiting on a stalled
            // member, most likely): what it said last, and how long ago.
            let seconds = |v: &serde_json::Value| v.as_u64().unwrap_or(0) as f64 / 1e3;
            let waiting = match live["waiting_on"].as_object() {
                Some(w) => format!(
                    "waiting {:.1} s on {} (a metadata write or read it has not answered)",
                    seconds(&w["for_ms"]),
                    w["path"].as_str().unwrap_or("a member")
                ),
                None => "waiting on a member, most likely: see the server's log".to_owned(),
            };
            // The control request whose superblock update holds it, if one does: the
            // status below is of the array before it.
            let doing = match live["carrying_out"]["op"].as_str() {
                Some(op) => match live["carrying_out"]["member"].as_str() {
                    Some(member) => format!(", carrying out `{op} {member}`"),
                    None => format!(", carrying out `{op}`"),
                },
                None => String::new(),
            };
            eprintln!(
                "xraid: warning: array '{}': the server's array thread has been busy for {:.1} s ({waiting}{doing}); this is its status as of {:.1} s ago",
                live["name"].as_str().unwrap_or("?"),
                seconds(&live["busy_ms"]),
                seconds(&live["snapshot_age_ms"]),
            );
        }
        add_superblock_fields(&mut live);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&live)?);
        } else {
            print_live(&live);
        }
        return Ok(());
    }
    let options = OpenOptions {
        write: false,
        direct: DirectMode::Off,
        lock: false,
    };
    // An array that cannot start is shown all the same: what is there, and why.
    let assembled = assemble_anyway(&args.array, &options)?;
    let status = describe(&assembled)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print_text(&status);
    }
    Ok(())
}

/// Adds to a server's status what only the members' superblocks say, so that the JSON
/// has the offline one's fields: each member's `events` and `device_uuid` (and each
/// left-out device's `events`), and the array's `state` (clean, or active: written and not closed cleanly) as the freshest
/// of them records it. Null where a superblock cannot be read (a member gone, or its
/// path relative to the server's working folder).
fn add_superblock_fields(live: &mut serde_json::Value) {
    let options = OpenOptions {
        write: false,
        direct: DirectMode::Off,
        lock: false,
    };
    let array_uuid = live["uuid"].as_str().map(str::to_owned);
    // A file at a served path may have been replaced since: only this array's counts.
    let superblock = |path: Option<&str>| {
        let path = std::path::Path::new(path?);
        let member = FileMember::open(path, &options).ok()?;
        xraid_array::read_superblock(&member, path)
            .ok()
            .flatten()
            .filter(|sb| array_uuid.as_deref() == Some(&*Superblock::uuid_string(&sb.set_uuid)))
    };
    for l in live["left_out"].as_array_mut().into_iter().flatten() {
        l["events"] = superblock(l["path"].as_str()).map(|sb| sb.events).into();
    }
    let mut freshest: Option<Superblock> = None;
    for m in live["members"].as_array_mut().into_iter().flatten() {
        let sb = superblock(m["path"].as_str());
        m["events"] = sb.as_ref().map(|sb| sb.events).into();
        m["device_uuid"] = sb
            .as_ref()
            .map(|sb| Superblock::uuid_string(&sb.device_uuid))
            .into();
        if let Some(sb) = sb {
            if freshest.as_ref().is_none_or(|f| sb.events > f.events) {
                freshest = Some(sb);
            }
        }
    }
    live["state"] = freshest
        .map(|sb| if sb.is_clean() { "clean" } else { "active" })
        .into();
}

fn describe(a: &Assembled) -> Result<Status> {
    let geo = a.geometry;
    let sb = &a.superblock;
    let failed_because = cannot_start(a).map(|e| e.to_string());
    let members = a
        .roles
        .iter()
        .enumerate()
        .map(|(role, m)| {
            let bad_block_sectors = match m {
                // A damaged log does not hide the rest: the array is shown, and
                // opening it says what is wrong.
                Some(m) => xraid_array::listed_bad_sectors(
                    &m.member,
                    &m.superblock,
                    geo.member_sectors(),
                    &m.path,
                )
                .unwrap_or_else(|e| {
                    eprintln!("xraid: warning: {e}");
                    0
                }),
                None => 0,
            };
            Ok(MemberStatus {
                role: u16::try_from(role).unwrap_or(u16::MAX),
                state: match m {
                    Some(_) if rebuilt_percent(m, &geo).is_some() => "rebuilding",
                    Some(_) => "active",
                    None => "missing",
                },
                rebuilt_percent: rebuilt_percent(m, &geo),
                path: m.as_ref().map(|m| m.path.display().to_string()),
                events: m.as_ref().map(|m| m.superblock.events),
                device_uuid: m
                    .as_ref()
                    .map(|m| Superblock::uuid_string(&m.superblock.device_uuid)),
                replacement: a
                    .left_out
                    .iter()
                    .find(|l| {
                        l.reason == LeftOutReason::Replacement
                            && l.role.map(usize::from) == Some(role)
                    })
                    .map(|l| ReplacementStatus {
                        path: l.path.display().to_string(),
                        copied_percent: percent_of(l.superblock.recovery_offset, &geo),
                    }),
                bad_block_sectors,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let replacing = a
        .left_out
        .iter()
        .any(|l| l.reason == LeftOutReason::Replacement);
    // Hot spares waiting are listed apart, as the server lists them.
    let spares = a
        .left_out
        .iter()
        .filter(|l| l.reason == LeftOutReason::Spare)
        .map(|l| l.path.display().to_string())
        .collect();
    let left_out = a
        .left_out
        .iter()
        .filter(|l| !matches!(l.reason, LeftOutReason::Replacement | LeftOutReason::Spare))
        .map(|l| LeftOutStatus {
            path: l.path.display().to_string(),
            role: l.role,
            reason: l.reason.to_string(),
            events: l.superblock.events,
        })
        .chain(a.damaged.iter().map(|(path, damage)| LeftOutStatus {
            path: path.display().to_string(),
            role: None,
            reason: format!("damaged md superblock ({damage})"),
            events: 0,
        }))
        .collect();
    let has_chunk = geo.level() != Level::Raid1;
    Ok(Status {
        name: sb.name(),
        uuid: Superblock::uuid_string(&sb.set_uuid),
        level: geo.level().to_string(),
        layout: (geo.layout() != Layout::None).then(|| geo.layout().to_string()),
        chunk_bytes: has_chunk.then(|| u64::from(geo.chunk_sectors()) * SECTOR_BYTES),
        raid_disks: geo.raid_disks(),
        array_size_bytes: geo.array_sectors() * SECTOR_BYTES,
        member_data_bytes: geo.member_sectors() * SECTOR_BYTES,
        state: if sb.is_clean() { "clean" } else { "active" },
        health: if failed_because.is_some() {
            "failed"
        } else if a.roles.iter().any(|m| rebuilt_percent(m, &geo).is_some()) {
            "recovering"
        } else if a.is_degraded() {
            "degraded"
        } else if replacing {
            "replacing"
        } else if !sb.is_clean() {
            "resync"
        } else {
            "clean"
        },
        failed_because,
        degraded: a.is_degraded() || a.roles.iter().any(|m| rebuilt_percent(m, &geo).is_some()),
        events: sb.events,
        integrity: xraid_array::keeps_checksums(a)?,
        members,
        spares,
        left_out,
    })
}

/// For a member being recovered, how far, in percent.
fn rebuilt_percent(
    m: &Option<xraid_array::FoundMember>,
    geo: &xraid_layout::Geometry,
) -> Option<u8> {
    let sb = &m.as_ref()?.superblock;
    if sb.feature_map & xraid_format::MD_FEATURE_RECOVERY_OFFSET == 0 {
        return None;
    }
    Some(percent_of(sb.recovery_offset, geo))
}

/// A recovery offset in percent of a member's data area.
fn percent_of(recovery_offset: u64, geo: &xraid_layout::Geometry) -> u8 {
    let percent = recovery_offset.saturating_mul(100) / geo.member_sectors().max(1);
    u8::try_from(percent.min(100)).unwrap_or(100)
}

fn print_text(s: &Status) {
    let map: String = s
        .members
        .iter()
        .map(|m| if m.state == "active" { 'U' } else { '_' })
        .collect();
    let up = s.members.iter().filter(|m| m.state == "active").count();
    println!(
        "{} : {} {} [{}/{}] [{}]",
        s.name, s.state, s.level, s.raid_disks, up, map
    );
    println!("          UUID : {}", s.uuid);
    println!("    Raid Level : {}", s.level);
    println!(
        "    Array Size : {} ({} bytes)",
        human(s.array_size_bytes),
        s.array_size_bytes
    );
    println!("  Raid Devices : {}", s.raid_disks);
    if let Some(layout) = &s.layout {
        println!("        Layout : {layout}");
    }
    if let Some(chunk) = s.chunk_bytes {
        println!("    Chunk Size : {}K", chunk / 1024);
    }
    // md's way: "clean", "active", "clean, degraded", "active, degraded, recovering".
    if s.health == "clean" {
        println!("         State : {}", s.state);
    } else {
        println!("         State : {}, {}", s.state, s.health);
    }
    if let Some(why) = &s.failed_because {
        println!("        Failed : {why}");
    }
    println!("        Events : {}", s.events);
    if s.integrity {
        println!("     Integrity : on (CRC-32C per 4 KiB block, checked on every read)");
    }
    println!();
    println!("    Role  State                       Events  Path");
    for m in &s.members {
        println!(
            "    {:>4}  {:<26}  {:>6}  {}",
            m.role,
            match (m.rebuilt_percent, &m.replacement) {
                (Some(p), _) => format!("rebuilding {p}%"),
                (None, Some(r)) => format!("active, being replaced {}%", r.copied_percent),
                (None, None) if m.bad_block_sectors > 0 =>
                    format!("{} ({} bad sectors listed)", m.state, m.bad_block_sectors),
                (None, None) => m.state.to_owned(),
            },
            m.events.map_or_else(|| "-".to_owned(), |e| e.to_string()),
            m.path.as_deref().unwrap_or("-"),
        );
        if let Some(r) = &m.replacement {
            println!(
                "    {:>4}  {:<26}  {:>6}  {}",
                m.role,
                format!("replacement {}%", r.copied_percent),
                "-",
                r.path
            );
        }
    }
    for spare in &s.spares {
        println!("    spare: {spare}");
    }
    for l in &s.left_out {
        println!("    left out: {}: {}", l.path, l.reason);
    }
}

/// The status a running server gave.
/// A served member's state as the text view says it (from `status --json`'s entry).
fn member_state_text(m: &serde_json::Value) -> String {
    let replacement = m["replacement"].as_object();
    let copied = replacement.map(|r| r["copied_percent"].as_u64().unwrap_or(0));
    match (m["rebuilt_percent"].as_u64(), copied) {
        (Some(p), _) => format!("rebuilding {p}%"),
        (None, Some(p)) => format!("active, being replaced {p}%"),
        // A member failed for being slow (or for stalling) was slow too: it says
        // both, and never "active" (before 2026-11-29 it did).
        (None, None) if m["slow"] == true => {
            format!("{}, slow", m["state"].as_str().unwrap_or("?"))
        }
        (None, None) => m["state"].as_str().unwrap_or("?").to_owned(),
    }
}

fn print_live(s: &serde_json::Value) {
    println!(
        "{} : served, {} {} [{} members]",
        s["name"].as_str().unwrap_or("?"),
        s["health"].as_str().unwrap_or("?"),
        s["level"].as_str().unwrap_or("?"),
        s["raid_disks"]
    );
    if let Some(sync) = s["sync"].as_object() {
        // The progress record's clock, once a checkpoint has been timed.
        let checkpoints = match (
            sync.get("checkpoint_every_ms").and_then(|v| v.as_f64()),
            sync.get("last_checkpoint_ms").and_then(|v| v.as_f64()),
        ) {
            (Some(every), Some(last)) => format!(
                " (progress recorded every {} s, the last record took {last:.0} ms)",
                every / 1000.0
            ),
            _ => String::new(),
        };
        println!(
            "          Sync : {} {}%{checkpoints}",
            sync["kind"].as_str().unwrap_or("?"),
            sync["done_percent"]
        );
    }
    if s["integrity"] == true {
        println!(
            "     Integrity : on ({} reads caught with blocks failing their checksums, repaired where redundancy allowed)",
            s["checksum_mismatches"].as_u64().unwrap_or(0)
        );
    }
    let lost = s["lost_requests"].as_u64().unwrap_or(0);
    if lost > 0 {
        println!(
            "          Lost : {lost} requests answered EIO for data the array could not read or keep (the server's log names them)"
        );
    }
    let unknown = s["unknown_sectors"].as_u64().unwrap_or(0);
    if unknown > 0 {
        println!(
            "       Unknown : {unknown} sectors a member took with it when it died with the power under a write; they read as errors until written (docs/RELIABILITY.md)"
        );
    }
    println!();
    // Room for latencies up to 9999.99 ms.
    println!("    Role  State                          Latency  Path");
    for m in s["members"].as_array().into_iter().flatten() {
        let state = member_state_text(m);
        let replacement = m["replacement"].as_object();
        let copied = replacement.map(|r| r["copied_percent"].as_u64().unwrap_or(0));
        let errors = [
            (m["read_errors"].as_u64().unwrap_or(0), "read errors"),
            (m["checksum_mismatches"].as_u64().unwrap_or(0), "bad blocks"),
            (
                m["bad_block_sectors"].as_u64().unwrap_or(0),
                "bad sectors listed",
            ),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect::<Vec<_>>();
        let state = if errors.is_empty() {
            state
        } else {
            format!("{state} ({})", errors.join(", "))
        };
        let latency = m["latency_ms"]
            .as_f64()
            .map_or_else(|| "-".to_owned(), |l| format!("{l:.2} ms"));
        // A JSON value prints without padding: the role as a number.
        let role = m["role"]
            .as_u64()
            .map_or_else(|| "?".to_owned(), |r| r.to_string());
        println!(
            "    {:>4}  {:<26}  {:>10}  {}",
            role,
            state,
            latency,
            m["path"].as_str().unwrap_or("-")
        );
        if let (Some(r), Some(p)) = (replacement, copied) {
            println!(
                "    {:>4}  {:<26}  {:>10}  {}",
                role,
                format!("replacement {p}%"),
                "-",
                r["path"].as_str().unwrap_or("-")
            );
        }
    }
    for spare in s["spares"].as_array().into_iter().flatten() {
        println!("    spare: {}", spare.as_str().unwrap_or("?"));
    }
    for l in s["left_out"].as_array().into_iter().flatten() {
        println!(
            "    left out: {}: {}",
            l["path"].as_str().unwrap_or("?"),
            l["reason"].as_str().unwrap_or("?")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::member_state_text;
    use serde_json::json;

    #[test]
    fn a_slow_member_that_failed_reads_as_faulty() {
        let failed = json!({"state": "faulty", "slow": true, "rebuilt_percent": null});
        assert_eq!(member_state_text(&failed), "faulty, slow");
        let slow = json!({"state": "active", "slow": true});
        assert_eq!(member_state_text(&slow), "active, slow");
        let rebuilding = json!({"state": "rebuilding", "slow": true, "rebuilt_percent": 40});
        assert_eq!(member_state_text(&rebuilding), "rebuilding 40%");
        let replaced = json!({"state": "active", "replacement": {"copied_percent": 7}});
        assert_eq!(member_state_text(&replaced), "active, being replaced 7%");
    }
}
