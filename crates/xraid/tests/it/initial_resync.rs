//! `create` over members that hold old contents leaves making parity agree with them
//! to a resync in the background, as md does after `mdadm --create`: the superblocks
//! say a resync is owed from the start (md's `resync_offset` 0, every bitmap bit set),
//! and the next open to write — `xraid serve`, which serves clients meanwhile — runs
//! it. `--sync-now` does it before create returns, as create did before.

use std::path::{Path, PathBuf};

use crate::nbd_raw::Client;
use crate::server::Server;
use crate::util::{has_tool, ok, p, random_bytes, scrub, tempdir};

const MIB: usize = 1 << 20;

/// `n` members of 16 MiB random bytes each in `dir`.
fn old_members(dir: &Path, n: u64, seed: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let m = dir.join(format!("d{i}"));
            std::fs::write(&m, random_bytes(16 * MIB, seed + i)).expect("member");
            m
        })
        .collect()
}

/// `xraid create ARGS` over `n` members of old contents (see [`old_members`]) in a
/// `disks` directory of `dir`: the directory, the members, and what create said.
fn create_over_old_contents(
    dir: &Path,
    n: u64,
    seed: u64,
    args: &[&str],
) -> (PathBuf, Vec<PathBuf>, String) {
    let disks = dir.join("disks");
    std::fs::create_dir(&disks).expect("disks");
    let members = old_members(&disks, n, seed);
    let names: Vec<&str> = members.iter().map(|m| p(m)).collect();
    let out = ok(&[&["create"][..], args, &names].concat());
    (disks, members, out)
}

fn status(disks: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(&["status", "--json", p(disks)])).expect("status JSON")
}

/// The "State" md reads in a member's superblock.
fn md_state(member: &Path) -> String {
    let out = std::process::Command::new("mdadm")
        .args(["--examine", p(member)])
        .output()
        .expect("mdadm runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("State : ").map(str::to_owned))
        .unwrap_or_default()
}

/// The whole story: create returns at once; md reads the members as an array whose
/// resync is to run; a server resyncs it while a client writes past where the
/// resync has got to; a clean stop part way records the checkpoint, and the next
/// server goes on from it to the end. The array then scrubs clean, holds what the
/// client wrote, and md reads it as clean.
#[test]
fn an_array_made_over_old_contents_resyncs_in_the_background_while_served() {
    let dir = tempdir();
    let make = ["-l", "5", "-c", "64K", "--bitmap-chunk", "1M"];
    let (disks, members, out) = create_over_old_contents(dir.path(), 4, 1500, &make);
    assert!(out.contains("in the background"), "{out}");
    assert!(!out.contains("parity initialised"), "{out}");
    if has_tool("mdadm") {
        for m in &members {
            assert_eq!(md_state(m), "active", "{}", m.display());
        }
        let (_, _, bits) = crate::bitmap::bitmaps_agree(&members[0], dir.path());
        assert!(bits.ends_with("15 dirty (100.0%)"), "{bits}");
    }
    assert_eq!(status(&disks)["health"], "resync");

    // Paced at 1 MB/s a member, the resync takes about 15 s: the write lands ahead of it.
    let server = Server::tcp(dir.path(), &["--rebuild-max", "1", p(&disks)]);
    server.wait_for_log(0, &["made over old contents", "initial resync"]);
    let fresh = random_bytes(4 * MIB, 77);
    let at = 40 * MIB as u64;
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    assert_eq!(client.write(at, &fresh), 0);
    assert_eq!(client.flush(), 0);
    client.disconnect();
    let live = status(&disks);
    assert_eq!(live["sync"]["kind"], "resync", "{live}");
    assert!(live["sync"]["done_percent"].as_u64() < Some(80), "{live}");
    let stopped = server.stop();
    assert!(
        stopped.stderr.contains("with its resync unfinished"),
        "{}",
        stopped.stderr
    );
    assert!(
        stopped.stdout.contains("where a resync is left unfinished")
            && !stopped.stdout.contains("arrays flushed and marked clean"),
        "{}",
        stopped.stdout
    );

    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let resumed = server.wait_for_log(0, &["resync part done", "from unit"]);
    assert!(!resumed.contains("from unit 0 "), "{resumed}");
    server.wait_for_log(0, &["resync done"]);
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    let back = client.read(at, u32::try_from(fresh.len()).expect("4 MiB"));
    client.disconnect();
    assert!(
        back.as_deref() == Ok(&fresh[..]),
        "the client's write reads back"
    );
    server.stop();

    assert_eq!(status(&disks)["health"], "clean");
    assert_eq!(scrub("check", &disks)["mismatched_units"], 0);
    if has_tool("mdadm") {
        for m in &members {
            assert_eq!(md_state(m), "clean", "{}", m.display());
        }
    }
}

/// A server killed during the initial resync: the resync had cleared the bitmap's
/// bits behind it as it went (md's resync does the same), so md reads fewer than all
/// of them set, and the next server resyncs only the chunks still set — not the
/// whole array again. The client's write survives, and the array scrubs clean.
#[test]
fn a_server_killed_during_the_initial_resync_leaves_only_the_rest_to_resync() {
    let dir = tempdir();
    let make = [
        "-l",
        "5",
        "-c",
        "64K",
        "--bitmap-chunk",
        "1M",
        "--bitmap-delay",
        "1",
    ];
    let (disks, members, _) = create_over_old_contents(dir.path(), 4, 1800, &make);

    // At 1 MB/s a member the resync takes about 15 s; the bits behind it are cleared
    // every bitmap quiet time (md's daemon_sleep: 1 s here, 5 s by default).
    let server = Server::tcp(dir.path(), &["--rebuild-max", "1", p(&disks)]);
    server.wait_for_log(0, &["initial resync"]);
    let fresh = random_bytes(2 * MIB, 78);
    let at = 20 * MIB as u64;
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    assert_eq!(client.write(at, &fresh), 0);
    assert_eq!(client.flush(), 0);
    client.disconnect();
    let start = std::time::Instant::now();
    loop {
        let dirty = ok(&["examine", "--bitmap", p(&members[0])]);
        if !dirty.contains("15 dirty") {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "no bit cleared behind the resync: {dirty}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let live = status(&disks);
    assert_eq!(live["sync"]["kind"], "resync", "{live}");
    server.kill();
    let bits = if has_tool("mdadm") {
        crate::bitmap::bitmaps_agree(&members[0], dir.path()).2
    } else {
        ok(&["examine", "--bitmap", p(&members[0])])
    };
    // "15 bits (chunks), N dirty": some cleared, the rest still to resync.
    let dirty: u32 = bits
        .split(", ")
        .nth(1)
        .and_then(|d| d.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no dirty count in {bits}"));
    assert!((1..15).contains(&dirty), "{bits}");

    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let done = server.wait_for_log(0, &["resync done"]);
    let line = done
        .lines()
        .find(|l| l.contains("resync done"))
        .unwrap_or_default()
        .to_owned();
    assert!(line.contains("skipped"), "{line}");
    assert!(!line.contains("visited 0 units"), "{line}");
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    let back = client.read(at, u32::try_from(fresh.len()).expect("2 MiB"));
    client.disconnect();
    assert!(
        back.as_deref() == Ok(&fresh[..]),
        "the client's write reads back"
    );
    server.stop();
    assert_eq!(status(&disks)["health"], "clean");
    assert_eq!(scrub("check", &disks)["mismatched_units"], 0);
}

/// A RAID-10 stopped part way through its resync records md's `resync_offset` in
/// array sectors — md's raid10 resyncs over the array's addresses (and recovers
/// over the members') — so every array chunk below it has copies that agree and
/// the next ones not yet. Until 2026-11-28 xraid wrote and read it as a member
/// row: half the truth on a near-2 array of four, and an offset md wrote read as
/// twice as far, skipping chunks never resynced.
#[test]
fn a_raid10_stopped_mid_resync_records_how_far_in_array_sectors() {
    use std::os::unix::fs::FileExt;
    use xraid_layout::{Geometry, Layout, Level, Raid10Layout};
    let dir = tempdir();
    let make = ["-l", "10", "-p", "n2", "-c", "64K"];
    let (disks, members, _) = create_over_old_contents(dir.path(), 4, 1900, &make);
    // 64 KiB units at 1 MB/s: a few seconds in, a third or so is done.
    let server = Server::tcp(dir.path(), &["--rebuild-max", "1", p(&disks)]);
    server.wait_for_log(0, &["initial resync"]);
    std::thread::sleep(std::time::Duration::from_secs(3));
    server.stop();

    let sb = |member: &Path| {
        let mut bytes = vec![0u8; xraid_format::SUPERBLOCK_BYTES];
        std::fs::File::open(member)
            .expect("member")
            .read_exact_at(&mut bytes, xraid_format::SUPERBLOCK_OFFSET_BYTES)
            .expect("superblock");
        xraid_format::Superblock::parse(&bytes).expect("md superblock")
    };
    let first = sb(&members[0]);
    let offset = first.resync_offset;
    let layout = Layout::Raid10(Raid10Layout {
        near_copies: 2,
        far_copies: 1,
        offset: false,
    });
    let geo = Geometry::new(Level::Raid10, layout, 4, 128, first.data_size).expect("geometry");
    assert!(
        offset > 0 && offset < geo.array_sectors(),
        "resync_offset {offset} of {} array sectors",
        geo.array_sectors()
    );
    let files: Vec<std::fs::File> = members
        .iter()
        .map(|m| std::fs::File::open(m).expect("member"))
        .collect();
    let copies_agree = |chunk: u64| {
        let places = geo.copies(chunk * 128);
        let read = |i: usize| {
            let place = places.as_slice()[i];
            let mut bytes = vec![0u8; 64 * 1024];
            files[place.member.index()]
                .read_exact_at(&mut bytes, (first.data_offset + place.sector) * 512)
                .expect("read a copy");
            bytes
        };
        read(0) == read(1)
    };
    let below = offset / 128;
    assert!(
        (0..below).all(copies_agree),
        "a chunk below resync_offset {offset} has copies that disagree"
    );
    // Units in flight at the stop completed too: the first chunk not yet resynced
    // lies just past the offset.
    let next = (below..geo.array_sectors() / 128).find(|&c| !copies_agree(c));
    assert!(
        next.is_some_and(|c| c < below + 16),
        "the chunks past resync_offset {offset} were resynced up to {next:?}"
    );

    // The next server goes on from there, and the array scrubs clean.
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    server.wait_for_log(0, &["resync done"]);
    server.stop();
    assert_eq!(scrub("check", &disks)["mismatched_units"], 0);
}

/// A mirror too: its copies are made the same in the background.
#[test]
fn a_mirror_made_over_old_contents_copies_in_the_background() {
    let dir = tempdir();
    let members = old_members(dir.path(), 2, 1600);
    let names: Vec<&str> = members.iter().map(|m| p(m)).collect();
    let out = ok(&[&["create", "-l", "1"][..], &names].concat());
    assert!(out.contains("the mirror copies agree"), "{out}");
    // Any open to write runs the owed resync: a scrub runs it first, then checks.
    assert_eq!(status(dir.path())["health"], "resync");
    assert_eq!(scrub("check", dir.path())["mismatched_units"], 0);
    assert_eq!(status(dir.path())["health"], "clean");
}

/// `--sync-now` makes parity agree before create returns (nothing owed after), and
/// is refused with `--assume-clean`, which says nothing is to be made to agree.
#[test]
fn sync_now_makes_parity_agree_before_create_returns() {
    let dir = tempdir();
    let members = old_members(dir.path(), 4, 1700);
    let names: Vec<&str> = members.iter().map(|m| p(m)).collect();
    let both = [
        &["create", "-l", "5", "--sync-now", "--assume-clean"][..],
        &names,
    ]
    .concat();
    let before = std::fs::read(&members[0]).expect("member");
    let refused = crate::util::xraid()
        .args(&both)
        .output()
        .expect("xraid runs");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("cannot be used with '--assume-clean'"),
        "{said}"
    );
    assert!(
        std::fs::read(&members[0]).expect("member") == before,
        "nothing written"
    );
    let out = ok(&[&["create", "-l", "5", "--sync-now"][..], &names].concat());
    assert!(out.contains("parity initialised"), "{out}");
    assert_eq!(status(dir.path())["health"], "clean");
    if has_tool("mdadm") {
        assert_eq!(md_state(&members[0]), "clean");
    }
}

/// Integrity mode too: the old contents' checksums are learned by the background
/// resync (and kept: a bit flipped afterwards is caught and repaired), as
/// dm-integrity recalculates in the background.
#[test]
fn integrity_mode_learns_the_old_contents_checksums_in_the_background() {
    let dir = tempdir();
    let disks = dir.path().join("disks");
    std::fs::create_dir(&disks).expect("disks");
    let members = old_members(&disks, 4, 1800);
    let names: Vec<&str> = members.iter().map(|m| p(m)).collect();
    let out = ok(&[
        &["create", "-l", "5", "-c", "64K", "--integrity"][..],
        &names,
    ]
    .concat());
    assert!(out.contains("in the background"), "{out}");
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    server.wait_for_log(0, &["resync done"]);
    server.stop();
    let first = scrub("check", &disks);
    assert_eq!(first["mismatched_units"], 0, "{first}");
    assert_eq!(first["checksum_mismatches"], 0, "{first}");
    // One bit of member 1's data area (md's data offset: 1 MiB).
    let mut bytes = std::fs::read(&members[1]).expect("member");
    bytes[(1 << 20) + 100_000] ^= 1;
    std::fs::write(&members[1], &bytes).expect("member");
    let found = scrub("check", &disks);
    assert_eq!(found["checksum_mismatches"], 1, "{found}");
    assert_eq!(scrub("check", &disks)["checksum_mismatches"], 0);
}
