//! `xraid demo`: the main job on an embedded default. Creates a RAID-5 of four file
//! members in a folder (or reuses the one there), fills it with a fresh pattern through
//! the array, reads it back, then reads it again with one member left out, so parity
//! reconstruction is shown doing its work; then serves it over NBD until Ctrl-C.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use xraid_array::{create, CreateOptions, OpenMode};
use xraid_driver::BackendChoice;
use xraid_layout::{Layout, Level, SECTOR_BYTES};
use xraid_server::{ExportConfig, ServeConfig, DEFAULT_MAX_CONNECTIONS};

use super::{open_array, shell_word};
use crate::cli::DemoArgs;
use crate::size::human;

/// Members of the demo array: the smallest RAID-5 that shows rotating parity well.
const DEMO_MEMBERS: usize = 4;
/// Chunk of the demo array: md's usual 64 KiB for small arrays.
const DEMO_CHUNK_BYTES: u64 = 64 * 1024;
/// Bytes per write or read request of the demo.
const DEMO_IO_BYTES: usize = 1 << 20;

pub fn run(args: DemoArgs, backend: BackendChoice) -> Result<()> {
    std::fs::create_dir_all(&args.dir)?;
    let members: Vec<PathBuf> = (0..DEMO_MEMBERS)
        .map(|i| args.dir.join(format!("member{i}.img")))
        .collect();
    if members.iter().all(|m| m.exists()) {
        println!("reusing the demo array in {}", args.dir.display());
    } else if members.iter().any(|m| m.exists()) {
        bail!(
            "{} holds only some demo members: remove the folder or restore them",
            args.dir.display()
        );
    } else {
        let opts = CreateOptions {
            layout: Some(Layout::default_for(Level::Raid5)),
            chunk_bytes: DEMO_CHUNK_BYTES,
            size_bytes: Some(args.member_size),
            backend,
            ..CreateOptions::new(Level::Raid5, "demo", members.clone())
        };
        let created = create(&opts, &mut |_, _| {})?;
        println!(
            "created RAID-5 '{}' ({}) of {} x {} members in {}",
            created.name,
            created.uuid,
            DEMO_MEMBERS,
            human(args.member_size),
            args.dir.display()
        );
    }
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);

    let mut array = open_array(
        std::slice::from_ref(&args.dir),
        OpenMode::ReadWrite,
        backend,
    )?;
    let size = array.driver().engine().array_sectors() * SECTOR_BYTES;
    array.begin_writes()?;
    let started = Instant::now();
    let mut buf = vec![0u8; DEMO_IO_BYTES];
    let mut at = 0u64;
    while at < size {
        let len = (size - at).min(DEMO_IO_BYTES as u64) as usize;
        pattern(seed, at, &mut buf[..len]);
        array.driver().write_at(&buf[..len], at)?;
        at += len as u64;
    }
    array.driver().flush()?;
    let wrote = started.elapsed();
    let kind = array.driver().backend_kind();
    array.close()?;
    println!(
        "wrote {} through the array in {:.2} s ({:?} backend)",
        human(size),
        wrote.as_secs_f64(),
        kind
    );

    verify(
        std::slice::from_ref(&args.dir),
        seed,
        size,
        backend,
        "all members",
    )?;
    let without_one: Vec<PathBuf> = members.iter().skip(1).cloned().collect();
    verify(
        &without_one,
        seed,
        size,
        backend,
        "member0 left out (rebuilt from parity)",
    )?;
    println!();
    for line in look_at_it(&args.dir, &members[0], !args.no_serve) {
        println!("{line}");
    }
    if args.no_serve {
        return Ok(());
    }
    println!();
    let config = ServeConfig {
        listen: super::serve::listen_of(args.listen.as_deref(), None)?,
        exports: vec![ExportConfig {
            name: "demo".to_owned(),
            paths: vec![args.dir.clone()],
            read_only: false,
            faults: Vec::new(),
            rebuild_min: None,
            rebuild_max: None,
            consistency: None,
        }],
        max_connections: DEFAULT_MAX_CONNECTIONS,
        tls_mode: xraid_server::TlsMode::Off,
        tls_files: None,
    };
    super::serve::serve(&config, backend)
}

/// Commands that show the demo array, each true when printed: while the array is
/// served the server holds its members (locked), so reading them whole waits for
/// Ctrl-C; status and examine work meanwhile (status asks the server).
fn look_at_it(dir: &Path, member: &Path, served: bool) -> Vec<String> {
    let word = |path: &Path| shell_word(&path.to_string_lossy());
    let read = format!("  xraid read {} | sha256sum", word(dir));
    vec![
        "look at it:".to_owned(),
        format!("  xraid status {}", word(dir)),
        format!("  xraid examine {}", word(member)),
        if served {
            format!("{read}   # after Ctrl-C: until then the server holds the members")
        } else {
            read
        },
    ]
}

fn verify(
    paths: &[PathBuf],
    seed: u64,
    size: u64,
    backend: BackendChoice,
    what: &str,
) -> Result<()> {
    let mut array = open_array(paths, OpenMode::ReadOnly, backend)?;
    let started = Instant::now();
    let mut got = vec![0u8; DEMO_IO_BYTES];
    let mut want = vec![0u8; DEMO_IO_BYTES];
    let mut at = 0u64;
    while at < size {
        let len = (size - at).min(DEMO_IO_BYTES as u64) as usize;
        array.driver().read_at(&mut got[..len], at)?;
        pattern(seed, at, &mut want[..len]);
        if got[..len] != want[..len] {
            bail!("verification failed at byte {at} ({what}): the array returned other data");
        }
        at += len as u64;
    }
    println!(
        "verified {} read back with {what} in {:.2} s",
        human(size),
        started.elapsed().as_secs_f64()
    );
    array.close()?;
    Ok(())
}

/// Bytes that depend on the seed and on their own offset, so a misplaced or stale
/// block cannot pass for the right one.
fn pattern(seed: u64, offset: u64, out: &mut [u8]) {
    for (i, word) in out.chunks_mut(8).enumerate() {
        let mut x = seed ^ (offset + 8 * i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 32;
        word.copy_from_slice(&x.to_le_bytes()[..word.len()]);
    }
}
