//! `xraid status`: the array as /proc/mdstat and `mdadm --detail` would show it.

use anyhow::Result;
use serde::Serialize;
use xraid_array::{assemble, Assembled};
use xraid_format::Superblock;
use xraid_layout::{Layout, Level, SECTOR_BYTES};
use xraid_member::{DirectMode, OpenOptions};

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
    degraded: bool,
    events: u64,
    members: Vec<MemberStatus>,
    left_out: Vec<LeftOutStatus>,
}

#[derive(Debug, Serialize)]
struct MemberStatus {
    role: u16,
    /// "active" or "missing".
    state: &'static str,
    path: Option<String>,
    events: Option<u64>,
    device_uuid: Option<String>,
}

#[derive(Debug, Serialize)]
struct LeftOutStatus {
    path: String,
    role: Option<u16>,
    reason: String,
    events: u64,
}

pub fn run(args: StatusArgs) -> Result<()> {
    let options = OpenOptions {
        write: false,
        direct: DirectMode::Off,
        lock: false,
    };
    let assembled = assemble(&args.array, &options)?;
    let status = describe(&assembled);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print_text(&status);
    }
    Ok(())
}

fn describe(a: &Assembled) -> Status {
    let geo = a.geometry;
    let sb = &a.superblock;
    let members = a
        .roles
        .iter()
        .enumerate()
        .map(|(role, m)| MemberStatus {
            role: u16::try_from(role).unwrap_or(u16::MAX),
            state: if m.is_some() { "active" } else { "missing" },
            path: m.as_ref().map(|m| m.path.display().to_string()),
            events: m.as_ref().map(|m| m.superblock.events),
            device_uuid: m
                .as_ref()
                .map(|m| Superblock::uuid_string(&m.superblock.device_uuid)),
        })
        .collect();
    let left_out = a
        .left_out
        .iter()
        .map(|l| LeftOutStatus {
            path: l.path.display().to_string(),
            role: l.role,
            reason: l.reason.to_string(),
            events: l.superblock.events,
        })
        .collect();
    let has_chunk = geo.level() != Level::Raid1;
    Status {
        name: sb.name(),
        uuid: Superblock::uuid_string(&sb.set_uuid),
        level: geo.level().to_string(),
        layout: (geo.layout() != Layout::None).then(|| geo.layout().to_string()),
        chunk_bytes: has_chunk.then(|| u64::from(geo.chunk_sectors()) * SECTOR_BYTES),
        raid_disks: geo.raid_disks(),
        array_size_bytes: geo.array_sectors() * SECTOR_BYTES,
        member_data_bytes: geo.member_sectors() * SECTOR_BYTES,
        state: if sb.is_clean() { "clean" } else { "active" },
        degraded: a.is_degraded(),
        events: sb.events,
        members,
        left_out,
    }
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
    let degraded = if s.degraded { ", degraded" } else { "" };
    println!("         State : {}{degraded}", s.state);
    println!("        Events : {}", s.events);
    println!();
    println!("    Role  State    Events  Path");
    for m in &s.members {
        println!(
            "    {:>4}  {:<7}  {:>6}  {}",
            m.role,
            m.state,
            m.events.map_or_else(|| "-".to_owned(), |e| e.to_string()),
            m.path.as_deref().unwrap_or("-"),
        );
    }
    for l in &s.left_out {
        println!("    left out: {} ({})", l.path, l.reason);
    }
}
