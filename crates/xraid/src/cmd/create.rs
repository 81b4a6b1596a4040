//! `xraid create`: a new array on the given members.

use anyhow::{bail, Result};
use xraid_array::{create, CreateOptions};
use xraid_driver::BackendChoice;
use xraid_layout::{Layout, Level};

use crate::cli::CreateArgs;
use crate::progress::{bytes_bar, set_total};
use crate::size::human;

pub fn run(args: CreateArgs, backend: BackendChoice) -> Result<()> {
    let level: Level = args.level.parse()?;
    let layout = args
        .layout
        .as_deref()
        .map(|name| Layout::parse(level, name))
        .transpose()?;
    let mut members = args.members;
    if level == Level::Raid0 && args.spares > 0 {
        bail!("--spares: raid0 has no redundancy, so a hot spare could never step in");
    }
    if args.spares >= members.len() {
        bail!(
            "--spares {} leaves no member for the array: name the array's members first, then the spares",
            args.spares
        );
    }
    let spares = members.split_off(members.len() - args.spares);
    if args.spares > 0 && members.len() < usize::from(level.min_members()) {
        bail!(
            "--spares {} leaves {} member(s) for the array, and {level} needs at least {}: name more members",
            args.spares,
            members.len(),
            level.min_members()
        );
    }
    let redundant = level != Level::Raid0;
    let bitmap = match args.bitmap.as_deref() {
        None => redundant,
        Some("internal") if redundant => true,
        Some("internal") => {
            bail!("--bitmap internal: {level} has no redundancy to resync; leave --bitmap out")
        }
        Some("none") => false,
        Some(other) => bail!("--bitmap {other}: say internal or none"),
    };
    let bitmap_chunk_bytes = match args.bitmap_chunk {
        None => None,
        Some(_) if !bitmap => bail!("--bitmap-chunk needs a bitmap (--bitmap internal)"),
        Some(bytes) => Some(
            u32::try_from(bytes)
                .map_err(|_| anyhow::anyhow!("--bitmap-chunk {bytes}: at most 2G per bit"))?,
        ),
    };
    let bitmap_delay_secs = match args.bitmap_delay {
        None => None,
        Some(_) if !bitmap => bail!("--bitmap-delay needs a bitmap (--bitmap internal)"),
        Some(secs @ 1..=3600) => Some(secs),
        Some(secs) => bail!("--bitmap-delay {secs}: say 1 to 3600 seconds"),
    };
    let opts = CreateOptions {
        level,
        layout,
        chunk_bytes: args.chunk,
        name: args.name,
        size_bytes: args.size,
        members,
        force: args.force,
        backend,
        bitmap,
        bitmap_chunk_bytes,
        bitmap_delay_secs,
        integrity: args.integrity,
        assume_clean: args.assume_clean,
        sync_now: args.sync_now,
        spares,
    };
    let bar = bytes_bar(0, "initialising parity");
    let created = create(&opts, &mut |done, total| {
        set_total(&bar, total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    let geo = created.geometry;
    // RAID-1 has neither a layout nor a chunk.
    let shape = if geo.level() == Level::Raid1 {
        String::new()
    } else {
        format!(
            ", layout {}, chunk {}",
            geo.layout(),
            human(u64::from(geo.chunk_sectors()) * 512)
        )
    };
    // Roles left `missing` count among the array's members, as md counts them.
    let members = match created.missing.len() {
        0 => format!("{} members", geo.raid_disks()),
        n => format!("{} members ({n} missing)", geo.raid_disks()),
    };
    println!(
        "created {} array '{}' ({}) on {members}: {} ({} bytes){shape}",
        geo.level(),
        created.name,
        created.uuid,
        human(geo.array_sectors() * 512),
        geo.array_sectors() * 512,
    );
    if created.synced {
        let what = if geo.level().has_parity() {
            "parity initialised"
        } else {
            "mirror copies made the same"
        };
        println!("{what} from the members' existing contents");
    }
    if created.resync_owed {
        let what = if geo.level().has_parity() {
            "parity"
        } else {
            "the mirror copies"
        };
        println!(
            "the members hold old contents: a resync makes {what} agree with them in the background when the array is next opened to write (`xraid serve` serves clients meanwhile; `xraid status` follows it); --sync-now does it here"
        );
    }
    if args.assume_clean {
        println!(
            "no initial sync (--assume-clean): the members' redundancy is taken to agree; `xraid scrub check` tells"
        );
    }
    if !created.missing.is_empty() {
        let roles: Vec<String> = created.missing.iter().map(usize::to_string).collect();
        let filled_by = if created.spares.is_empty() {
            "`xraid add ARRAY NEW` fills it"
        } else {
            "a hot spare takes it when the array is next opened to write (`xraid serve`, or a command that writes)"
        };
        eprintln!(
            "xraid: warning: the array is degraded: role {} left missing; {filled_by}",
            roles.join(", ")
        );
    }
    if let Some(u) = &created.uneven {
        eprintln!(
            "xraid: warning: {} ({}) exceeds the smallest member, {} ({}), by more than 1%: the array uses only as much of each member as {} holds",
            u.largest.display(),
            human(u.largest_bytes),
            u.smallest.display(),
            human(u.smallest_bytes),
            u.smallest.display()
        );
    }
    if args.integrity {
        println!("integrity mode: every 4 KiB block is checked against its CRC-32C on read");
    }
    for spare in &created.spares {
        println!("{}: hot spare", spare.display());
    }
    Ok(())
}
