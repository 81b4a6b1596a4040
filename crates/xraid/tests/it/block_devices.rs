//! Members that are block devices, as a user with real disks has them: loop devices
//! over sparse files (512-byte and 4096-byte logical sectors, with and without the
//! loop driver's direct I/O), driven through the real `xraid` and real NBD clients.
//! Where the kernel offers no loop devices (no /dev/loop-control) each test says it is
//! skipped; anywhere else a failure is a failure.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use xraid_nbd::Command as Nbd;

use crate::members::md_agrees;
use crate::nbd_clients::{nbdinfo_json, nbdsh, run as tool};
use crate::nbd_raw::Client;
use crate::server::Server;
use crate::util::{fails, ok, ok_once_let_go, p, random_bytes, tempdir, xraid};

/// How the loop devices present their backing files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sectors {
    /// The defaults: 512-byte logical sectors, I/O through the backing file's page cache.
    Default,
    /// 512-byte sectors, the loop driver's direct I/O to its backing file.
    DirectIo,
    /// 4096-byte logical sectors (an "advanced format" 4Kn drive), direct I/O.
    FourK,
}

/// Loop devices attached for one test, each over a sparse file in a temporary folder;
/// detached when dropped, so that a failing test leaves none behind.
struct Loops {
    devices: Vec<PathBuf>,
    /// Holds the backing files; dropped after the devices are detached.
    backing_dir: tempfile::TempDir,
}

impl Loops {
    /// One loop device per entry of `sizes_mib`, of that many MiB; `None` (after saying
    /// the test is skipped) where the kernel has no loop devices.
    fn attach(sizes_mib: &[u64], sectors: Sectors) -> Option<Loops> {
        if !Path::new("/dev/loop-control").exists() {
            eprintln!("skipped: no loop devices here (/dev/loop-control is missing)");
            return None;
        }
        let mut loops = Loops {
            devices: Vec::new(),
            backing_dir: tempdir(),
        };
        for (i, mib) in sizes_mib.iter().enumerate() {
            let file = loops.backing(i);
            std::fs::File::create(&file)
                .and_then(|f| f.set_len(mib << 20))
                .expect("a sparse backing file");
            let device = losetup_find_and_attach(&file, sectors);
            loops.devices.push(device);
            // One a crashed test left write-protected is writable again.
            let _ = Command::new("blockdev")
                .arg("--setrw")
                .arg(&loops.devices[i])
                .status();
        }
        Some(loops)
    }

    /// The file behind device `i`.
    fn backing(&self, i: usize) -> PathBuf {
        self.backing_dir.path().join(format!("backing{i}"))
    }

    fn paths(&self) -> Vec<&str> {
        self.devices.iter().map(|d| p(d)).collect()
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        for device in &self.devices {
            // A read-only flag (`blockdev --setro`) outlives the attachment: the next
            // test to get this device would find it write-protected.
            let _ = Command::new("blockdev").arg("--setrw").arg(device).status();
            let _ = Command::new("losetup").arg("-d").arg(device).status();
        }
    }
}

/// `losetup -f --show FILE`: the first free loop device, never a fixed one, as tests
/// run in parallel. Two tests may race for the same free device (losetup then fails
/// with "device or resource busy"): another try takes the next one.
fn losetup_find_and_attach(file: &Path, sectors: Sectors) -> PathBuf {
    let options: &[&str] = match sectors {
        Sectors::Default => &[],
        Sectors::DirectIo => &["--direct-io=on"],
        Sectors::FourK => &["--sector-size", "4096", "--direct-io=on"],
    };
    losetup_attach_with(file, options)
}

/// [`losetup_find_and_attach`] with losetup's `options` (`--offset`, `--sizelimit`...).
fn losetup_attach_with(file: &Path, options: &[&str]) -> PathBuf {
    let mut args: Vec<&str> = options.to_vec();
    args.extend_from_slice(&["-f", "--show", p(file)]);
    let mut last = String::new();
    for _ in 0..10 {
        let out = Command::new("losetup")
            .args(&args)
            .output()
            .expect("losetup runs");
        if out.status.success() {
            let device = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            return PathBuf::from(device);
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("losetup {args:?} failed ten times: {last}");
}

/// Runs `xraid ARGS`, panicking with its stderr if it fails; returns (stdout, stderr).
fn run(args: &[&str]) -> (String, String) {
    let out = xraid().args(args).output().expect("xraid runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "xraid {args:?} failed: {stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// As [`run`], and the command printed no warning: block devices take O_DIRECT.
fn run_quiet(args: &[&str]) -> String {
    let (stdout, stderr) = run(args);
    assert!(
        !stderr.contains("warning"),
        "xraid {args:?} warned: {stderr}"
    );
    stdout
}

/// `args` then `members`.
fn with<'a>(args: &[&'a str], members: &[&'a str]) -> Vec<&'a str> {
    args.iter().chain(members).copied().collect()
}

/// Writes `data` at `offset` with `xraid write` and reads it back with `xraid read`,
/// both through the I/O `backend`.
fn write_and_read_back(dir: &Path, members: &[&str], backend: &str, offset: u64, data: &[u8]) {
    let input = dir.join("in.bin");
    std::fs::write(&input, data).expect("input");
    let at = offset.to_string();
    let write = [
        "--io-backend",
        backend,
        "write",
        "--offset",
        &at,
        "-i",
        p(&input),
    ];
    run_quiet(&with(&write, members));
    let output = dir.join("out.bin");
    let len = data.len().to_string();
    let read = [
        "--io-backend",
        backend,
        "read",
        "--offset",
        &at,
        "--length",
        &len,
        "-o",
        p(&output),
    ];
    run_quiet(&with(&read, members));
    assert!(
        std::fs::read(&output).expect("output") == data,
        "{members:?}: what was written at {offset} reads back"
    );
}

/// `mdadm --examine` and `xraid examine` agree on every one of `members` (role by
/// role, in order) of a `level` array: its shape, state, events and role. (Made over
/// devices, which hold whatever they held, an array owes its initial resync: active
/// until a server or a command that writes has run it.)
fn md_examines(members: &[&str], level: &str) {
    if !crate::util::has_tool("mdadm") {
        return;
    }
    for (role, member) in members.iter().enumerate() {
        let md = md_agrees(Path::new(member));
        let ours = ok(&["examine", member]);
        for key in [
            "Raid Level",
            "Raid Devices",
            "Array Size",
            "Data Offset",
            "State",
        ] {
            let line = format!("{key} : {}", md[key]);
            assert!(
                ours.contains(&line),
                "{member}: xraid examine lacks {line}:\n{ours}"
            );
        }
        assert_eq!(md["Raid Level"], level, "{member}: {md:?}");
        assert_eq!(
            md["Raid Devices"],
            members.len().to_string(),
            "{member}: {md:?}"
        );
        assert!(
            ["clean", "active"].contains(&md["State"].as_str()),
            "{member}: {md:?}"
        );
        assert_eq!(
            md["Device Role"],
            format!("Active device {role}"),
            "{member}: {md:?}"
        );
    }
}

/// A RAID-5 on four loop devices and a RAID-1 on two, created on the whole devices,
/// hold what is written, read it back through O_DIRECT (both I/O backends), and md
/// reads their superblocks as xraid wrote them: on 512-byte and 4096-byte sectors,
/// with and without the loop driver's direct I/O, and on a mix of both sector sizes
/// (whose array md gives 4096-byte blocks).
#[test]
fn raid5_and_raid1_on_loop_devices_hold_what_is_written() {
    for sectors in [Sectors::Default, Sectors::DirectIo, Sectors::FourK] {
        for (level, n, array_mib) in [("raid5", 4, 93), ("raid1", 2, 31)] {
            let Some(loops) = Loops::attach(&vec![32; n], sectors) else {
                return;
            };
            holds_what_is_written(&loops.paths(), level, array_mib);
        }
    }
    let (Some(small), Some(large)) = (
        Loops::attach(&[32, 32], Sectors::Default),
        Loops::attach(&[32, 32], Sectors::FourK),
    ) else {
        return;
    };
    let mixed = [small.paths(), large.paths()].concat();
    holds_what_is_written(&mixed, "raid5", 93);
}

/// Creates a `level` array of `array_mib` MiB on `members`, writes it (at its start and
/// its end) and reads it back with each I/O backend.
fn holds_what_is_written(members: &[&str], level: &str, array_mib: u64) {
    let dir = tempdir();
    let (out, _) = run(&with(&["create", "-l", level, "-c", "64K"], members));
    // The whole device, less md's 1 MiB data offset.
    let bytes = (array_mib << 20).to_string();
    assert!(out.contains(&format!("({bytes} bytes)")), "{out}");
    md_examines(members, level);
    for (backend, seed) in [("uring", 1), ("threads", 3)] {
        let data = random_bytes(8 << 20, seed);
        write_and_read_back(dir.path(), members, backend, 64 << 10, &data);
        // The array's last bytes: the devices' ends are reached.
        let end = (array_mib << 20) - (1 << 20);
        let data = random_bytes(1 << 20, seed + 1);
        write_and_read_back(dir.path(), members, backend, end, &data);
    }
    md_examines(members, level);
}

/// A folder of symbolic links to the devices, as /dev/disk/by-id gives them: the way to
/// name an array of block devices to the commands that take one ARRAY (fail, add,
/// replace, remove), and where its control socket goes.
fn linked(dir: &Path, names: &[(&str, &Path)]) -> PathBuf {
    let disks = dir.join("disks");
    std::fs::create_dir_all(&disks).expect("disks folder");
    for (name, device) in names {
        std::os::unix::fs::symlink(device, disks.join(name)).expect("a link to the device");
    }
    disks
}

/// A RAID-5 of the four 16 MiB `devices` (chunk 64K, a 45 MiB array), named by a
/// folder of links d0..d3, holding `seed`'s bytes; returns the folder and those bytes.
fn filled_raid5(dir: &Path, devices: &[PathBuf], seed: u64) -> (PathBuf, Vec<u8>) {
    let names: Vec<String> = (0..devices.len()).map(|i| format!("d{i}")).collect();
    let links: Vec<(&str, &Path)> = names
        .iter()
        .zip(devices)
        .map(|(n, d)| (n.as_str(), d.as_path()))
        .collect();
    let disks = linked(dir, &links);
    let members: Vec<PathBuf> = names.iter().map(|n| disks.join(n)).collect();
    let members: Vec<&str> = members.iter().map(|m| p(m)).collect();
    // Devices hold whatever they held: the initial resync is owed, and runs under the
    // tests' writes and failures.
    run_quiet(&with(&["create", "-l", "5", "-c", "64K"], &members));
    let data = random_bytes(ARRAY_BYTES, seed);
    let image = dir.join("image.raw");
    std::fs::write(&image, &data).expect("image");
    run_quiet(&["write", "-i", p(&image), p(&disks)]);
    (disks, data)
}

/// What a trim of `at..at + len` frees on such a RAID-5 (and so reads as zeros): the
/// whole stripes (192 KiB of data each) inside it.
fn trimmed(at: usize, len: usize) -> std::ops::Range<usize> {
    const STRIPE: usize = 192 << 10;
    at.next_multiple_of(STRIPE)..(at + len) / STRIPE * STRIPE
}

/// A RAID-5 of four 16 MiB members, chunk 64K.
const ARRAY_BYTES: usize = 45 << 20;

/// The array read back with `xraid read` (offline) equals `expected`; a degraded one
/// may say so, with no other warning.
fn reads_back(members: &[&str], expected: &[u8]) {
    let dir = tempdir();
    let out = dir.path().join("array.bin");
    let (_, stderr) = run(&with(&["read", "-o", p(&out)], members));
    assert!(
        stderr.lines().all(|l| l.contains("is degraded: role(s)")),
        "{stderr}"
    );
    let got = std::fs::read(&out).expect("read back");
    assert_eq!(got.len(), expected.len(), "{members:?}");
    if let Some(at) = (0..got.len()).find(|&i| got[i] != expected[i]) {
        panic!("{members:?}: the array differs from what was written at byte {at}");
    }
}

fn scrub_finds_nothing(array: &[&str]) {
    let out = run_quiet(&with(&["scrub", "check", "--json"], array));
    let report: serde_json::Value = serde_json::from_str(&out).expect("scrub JSON");
    assert_eq!(report["mismatched_units"], 0, "{report}");
    assert_eq!(report["completed"], true, "{report}");
}

/// Served from its devices, named as a user names disks (`xraid serve /dev/sdb ...`),
/// a RAID-5 takes qemu-img's writes, gives nbdcopy the same back, frees what nbdsh
/// trims and zeroes, and reads the same offline afterwards with parity right.
#[test]
fn a_raid5_of_loop_devices_serves_nbd_clients() {
    crate::require_tool!("qemu-img");
    crate::require_tool!("nbdcopy");
    let Some(loops) = Loops::attach(&[16; 4], Sectors::Default) else {
        return;
    };
    let dir = tempdir();
    let members = loops.paths();
    run_quiet(&with(&["create", "-l", "5", "-c", "64K"], &members));
    let server = Server::unix(dir.path(), &members);
    assert!(
        !server.stderr().contains("warning"),
        "served with O_DIRECT: {}",
        server.stderr()
    );
    let uri = server.uri("xraid");
    let mut expected = random_bytes(ARRAY_BYTES, 3);
    let image = dir.path().join("image.raw");
    std::fs::write(&image, &expected).expect("image");
    tool(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", p(&image), &uri],
    );
    // The live status reaches the server through its control socket, beside the first
    // device.
    let live = ok(&with(&["status", "--json"], &members));
    let live: serde_json::Value = serde_json::from_str(&live).expect("status JSON");
    assert_eq!(live["served"], true, "{live}");
    assert_eq!(live["health"], "clean", "{live}");
    if let Some(mut nbdsh) = nbdsh() {
        const M: usize = 1 << 20;
        let out = nbdsh
            .args(["-c", &format!("h.connect_uri('{uri}')")])
            .args(["-c", &format!("h.trim({}, {})", 3 * M, 20 * M + 512)])
            .args(["-c", &format!("h.zero({}, {})", 8 * M + 4096, M + 512)])
            .output()
            .expect("nbdsh runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // nbdsh takes the length first.
        expected[trimmed(20 * M + 512, 3 * M)].fill(0);
        expected[M + 512..9 * M + 4096 + 512].fill(0);
    }
    let copy = dir.path().join("copy.raw");
    tool("nbdcopy", &[&uri, p(&copy)]);
    std::fs::write(&image, &expected).expect("expected image");
    let got = std::fs::read(&copy).expect("copy");
    if let Some(at) = (0..got.len()).find(|&i| got[i] != expected[i]) {
        let end = (at..got.len())
            .find(|&i| got[i] == expected[i])
            .unwrap_or(got.len());
        panic!(
            "nbdcopy reads back other bytes at {at}..{end}: {:?} for {:?}",
            &got[at..at + 16],
            &expected[at..at + 16]
        );
    }
    // Killed, the server lets go of its devices (held with O_EXCL as well as flock)
    // and a new one serves them at once.
    server.kill();
    let server = Server::unix(dir.path(), &members);
    tool("nbdcopy", &[&server.uri("xraid"), p(&copy)]);
    assert!(
        std::fs::read(&copy).expect("copy") == expected,
        "after a kill"
    );
    server.stop();
    reads_back(&members, &expected);
    scrub_finds_nothing(&members);
    md_examines(&members, "raid5");
}

/// 4Kn devices: an array whose members take only 4096-byte I/O still serves a client
/// that writes, trims and zeroes 512-byte sectors anywhere (md would advertise 4096;
/// xraid reads, modifies and writes the rest of the device's block), a member lost
/// while served is rebuilt onto another 4Kn device, and everything reads back.
#[test]
fn four_k_sector_devices_take_512_byte_requests_and_rebuild() {
    let Some(loops) = Loops::attach(&[16; 6], Sectors::FourK) else {
        return;
    };
    let dir = tempdir();
    let (disks, mut expected) = filled_raid5(dir.path(), &loops.devices[..4], 4);
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    // Advertised as md's block device would be (so that a file system made through
    // it mounts on md too); 512-byte requests are taken all the same (below).
    let info = nbdinfo_json(&[], &format!("nbd://{}/xraid", server.tcp_addr()));
    assert_eq!(info["exports"][0]["block_size_minimum"], 4096, "{info}");
    let mut client = Client::open(server.tcp_addr(), "xraid", false);
    let writes = |client: &mut Client, expected: &mut Vec<u8>, seed: u64| {
        // Single sectors, runs that straddle a device block, a chunk and a stripe.
        for (i, (at, len)) in [
            (512, 512),
            (3 * 512, 1024),
            (4096 - 512, 1536),
            ((64 << 10) - 1024, 2048),
            ((192 << 10) - 512, 8192 + 512),
            ((7 << 20) + 512 * 9, 512 * 77),
        ]
        .into_iter()
        .enumerate()
        {
            let data = random_bytes(len, seed + i as u64);
            assert_eq!(client.write(at as u64, &data), 0, "write of {len} at {at}");
            expected[at..at + len].copy_from_slice(&data);
            // Read back as written: 512-byte reads of a 4096-byte-sector device too.
            let got = client.read(at as u64, len as u32).expect("read");
            assert!(got == data, "read of {len} at {at}");
        }
        for (command, at, len) in [
            (Nbd::Trim, (1 << 20) + 512, 700 << 10),
            (Nbd::WriteZeroes, (3 << 20) + 1536, 4096 + 1024),
        ] {
            let reply = client.command(command, at as u64, len as u32);
            assert_eq!(reply.error, 0, "{command:?} of {len} at {at}");
            if command == Nbd::WriteZeroes {
                expected[at..at + len].fill(0);
            } else {
                expected[trimmed(at, len)].fill(0);
            }
        }
        assert_eq!(client.flush(), 0);
    };
    writes(&mut client, &mut expected, 100);
    for (at, len) in [(0, 1 << 20), (7 << 20, 1 << 20)] {
        let got = client.read(at as u64, len as u32).expect("read");
        assert!(got == expected[at..at + len], "read at {at}");
    }

    // d2 fails; the clients go on, and its place is taken by a fresh 4Kn device.
    ok(&["fail", p(&disks), p(&disks.join("d2"))]);
    writes(&mut client, &mut expected, 200);
    std::os::unix::fs::symlink(&loops.devices[4], disks.join("n2")).expect("n2");
    let out = ok_once_let_go(&["add", p(&disks), p(&disks.join("n2"))]);
    assert!(out.contains("rebuilt by the server"), "{out}");
    // d1 is swapped for another without losing redundancy on the way.
    std::os::unix::fs::symlink(&loops.devices[5], disks.join("n1")).expect("n1");
    let out = ok(&[
        "replace",
        p(&disks),
        p(&disks.join("d1")),
        p(&disks.join("n1")),
    ]);
    assert!(out.contains("holds role 1 now"), "{out}");
    // The replaced device, closed by the server, is opened again (exclusively) as a
    // hot spare; the failed one is taken out for good.
    let out = ok_once_let_go(&["add", "--spare", p(&disks), p(&disks.join("d1"))]);
    assert!(out.contains("added as a hot spare by the server"), "{out}");
    let out = ok(&["remove", p(&disks), p(&disks.join("d2"))]);
    assert!(
        out.contains("removed from the array by the server"),
        "{out}"
    );
    writes(&mut client, &mut expected, 300);
    let got = client.read(0, 4 << 20).expect("read");
    assert!(got == expected[..4 << 20], "read after the rebuild");
    client.disconnect();
    scrub_finds_nothing(&[p(&disks)]);
    server.stop();

    let s: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status JSON");
    assert_eq!(s["health"], "clean", "{s}");
    assert_eq!(s["spares"].as_array().map(Vec::len), Some(1), "{s}");
    assert_eq!(s["left_out"].as_array().map(Vec::len), Some(0), "{s}");
    for gone in ["d1", "d2"] {
        std::fs::remove_file(disks.join(gone)).expect("the replaced links");
    }
    reads_back(&[p(&disks)], &expected);
    scrub_finds_nothing(&[p(&disks)]);
    // The new members carry the array: without d0 and d3 in turn, all is there.
    let (n1, n2) = (disks.join("n1"), disks.join("n2"));
    reads_back(&[p(&n1), p(&n2), p(&disks.join("d3"))], &expected);
    reads_back(&[p(&disks.join("d0")), p(&n1), p(&n2)], &expected);
    let members: Vec<PathBuf> = ["d0", "n1", "n2", "d3"]
        .iter()
        .map(|n| disks.join(n))
        .collect();
    md_examines(&members.iter().map(|m| p(m)).collect::<Vec<_>>(), "raid5");
}

/// An array of two new sparse files and two loop devices works like any other; a
/// device smaller than the array needs is refused by create, add and replace with one
/// line, and nothing is written.
#[test]
fn files_and_devices_mix_and_a_smaller_device_is_refused() {
    let Some(loops) = Loops::attach(&[16, 16, 8], Sectors::Default) else {
        return;
    };
    let dir = tempdir();
    let (f0, f1) = (dir.path().join("f0"), dir.path().join("f1"));
    let (l0, l1, small) = (&loops.devices[0], &loops.devices[1], &loops.devices[2]);
    let untouched = || {
        let mut head = vec![0u8; 64 << 10];
        let f = std::fs::File::open(small).expect("the small device");
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0).expect("read it");
        assert!(head.iter().all(|&b| b == 0), "nothing written to {small:?}");
    };
    // Asked for 16M members, the 8M device cannot be one.
    let err = fails(&[
        "create",
        "-l",
        "5",
        "-c",
        "64K",
        "--size",
        "16M",
        p(&f0),
        p(l0),
        p(small),
    ]);
    assert!(err.contains(p(small)), "names the device: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!f0.exists(), "no file left behind");
    untouched();

    let members = [p(&f0), p(l0), p(&f1), p(l1)];
    run_quiet(&with(
        &["create", "-l", "5", "-c", "64K", "--size", "16M"],
        &members,
    ));
    md_examines(&members, "raid5");
    write_and_read_back(
        dir.path(),
        &members,
        "auto",
        0,
        &random_bytes(ARRAY_BYTES, 5),
    );
    scrub_finds_nothing(&members);

    let links = [
        ("f0", f0.as_path()),
        ("l0", l0.as_path()),
        ("f1", f1.as_path()),
        ("l1", l1.as_path()),
    ];
    let disks = linked(dir.path(), &links);
    ok(&["fail", p(&disks), p(&disks.join("l1"))]);
    for args in [
        vec!["add", p(&disks), p(small)],
        vec!["replace", p(&disks), p(&disks.join("f0")), p(small)],
    ] {
        let err = fails(&args);
        assert!(
            err.contains("but a member needs at least"),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        untouched();
    }
    // Without --size, the smallest member sizes the array, as with mdadm, which warns
    // when the largest exceeds it by more than 1%: so does create.
    let (_, stderr) = run(&["create", "-l", "1", "--force", p(l0), p(small)]);
    let warning = format!(
        "xraid: warning: {} (16.00 MiB) exceeds the smallest member, {} (8.00 MiB), by more \
         than 1%: the array uses only as much of each member as {} holds",
        p(l0),
        p(small),
        p(small)
    );
    assert!(stderr.contains(&warning), "{stderr}");
}

/// A device the kernel holds — here a mounted file system — is refused by create
/// (as mdadm refuses it: "Device or resource busy") and left as it was; before, the
/// mirror copy was written over the mounted file system.
#[test]
fn a_mounted_device_is_refused_and_left_alone() {
    crate::require_tool!("mkfs.ext4");
    let Some(loops) = Loops::attach(&[16, 16], Sectors::Default) else {
        return;
    };
    let (fs, other) = (&loops.devices[0], &loops.devices[1]);
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F", p(fs)])
        .output()
        .expect("mkfs.ext4 runs");
    assert!(mkfs.status.success(), "{mkfs:?}");
    let dir = tempdir();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mount point");
    let mounted = Command::new("mount")
        .args([p(fs), p(&mnt)])
        .output()
        .expect("mount runs");
    if !mounted.status.success() {
        // Containers may forbid mounting; a held device is still checked below.
        eprintln!(
            "mount not allowed here ({}): checking an O_EXCL holder only",
            String::from_utf8_lossy(&mounted.stderr).trim()
        );
    }
    let _unmount = Unmount(mounted.status.success().then(|| mnt.clone()));
    // Another program holding the device exclusively, as md, LVM and mount do.
    let holder = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(other)
        .expect("an exclusive open of the other device");
    for (members, held) in [([p(fs), p(other)], p(fs)), ([p(other), p(fs)], p(other))] {
        if held == p(fs) && !mounted.status.success() {
            continue;
        }
        let err = fails(&with(&["create", "-l", "1", "--force"], &members));
        assert!(err.contains(held) && err.contains("is in use"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // Reading harms nothing: examine still looks at a held device (and finds no
    // superblock there).
    let err = fails(&["examine", p(other)]);
    assert!(err.contains("not an md member"), "{err}");
    drop(holder);
    if mounted.status.success() {
        drop(_unmount);
        let fsck = Command::new("e2fsck")
            .args(["-fn", p(fs)])
            .output()
            .expect("e2fsck runs");
        assert!(
            fsck.status.success(),
            "the file system was written over: {}",
            String::from_utf8_lossy(&fsck.stdout)
        );
    }
}

/// Unmounts its folder when dropped.
struct Unmount(Option<PathBuf>);

impl Drop for Unmount {
    fn drop(&mut self) {
        if let Some(mnt) = self.0.take() {
            let _ = Command::new("umount").arg(&mnt).status();
        }
    }
}

/// A write-protected device (`blockdev --setro`, a disk's write-protect switch, a
/// read-only image) is refused by whatever would write the array, with one line and
/// nothing written; the array still reads and serves read-only. Before, `xraid write`
/// opened it, its writes failed (EPERM) and it was marked faulty: the array went
/// degraded over a write-protect flag.
#[test]
fn a_write_protected_device_is_refused_and_the_array_still_reads() {
    let Some(loops) = Loops::attach(&[16; 4], Sectors::Default) else {
        return;
    };
    let dir = tempdir();
    let (disks, expected) = filled_raid5(dir.path(), &loops.devices, 6);
    let protected = &loops.devices[3];
    let setro = |flag: &str| {
        let out = Command::new("blockdev")
            .args([flag, p(protected)])
            .output()
            .expect("blockdev runs");
        assert!(out.status.success(), "blockdev {flag}: {out:?}");
    };
    setro("--setro");
    let events = |disks: &Path| {
        let s: serde_json::Value =
            serde_json::from_str(&ok(&["status", "--json", p(disks)])).expect("status JSON");
        (s["events"].clone(), s["degraded"].clone())
    };
    let before = events(&disks);
    let image = dir.path().join("image.raw");
    for args in [
        vec!["write", "-i", p(&image), p(&disks)],
        vec!["scrub", "repair", p(&disks)],
    ] {
        let err = fails(&args);
        assert!(
            err.contains("disks/d3 is read-only (write-protected)"),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert_eq!(events(&disks), before, "{args:?} changed the superblocks");
    }
    reads_back(&[p(&disks)], &expected);
    if crate::util::has_tool("nbdcopy") {
        let server = Server::unix(dir.path(), &["--read-only", p(&disks)]);
        let copy = dir.path().join("copy.raw");
        tool("nbdcopy", &[&server.uri("xraid"), p(&copy)]);
        assert!(std::fs::read(&copy).expect("copy") == expected, "served");
        server.stop();
    }
    setro("--setrw");
    run_quiet(&["write", "-i", p(&image), p(&disks)]);
    scrub_finds_nothing(&[p(&disks)]);
}

/// A disk that goes bad under the server — here a loop device whose backing file is cut
/// to 2 MiB and re-read (`losetup -c`), so that the kernel fails every I/O past that —
/// has its reads rebuilt from parity and rewritten, is failed once they keep failing
/// (md's read-error limit), and every client read and write meanwhile is answered
/// right; a fresh device added in its place is rebuilt, and the array scrubs clean and
/// reads back whole.
#[test]
fn a_device_that_goes_bad_while_served_is_failed_and_replaced() {
    crate::require_tool!("nbdcopy");
    let Some(loops) = Loops::attach(&[16; 5], Sectors::Default) else {
        return;
    };
    let dir = tempdir();
    let (disks, written) = filled_raid5(dir.path(), &loops.devices[..4], 7);
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let uri = server.uri("xraid");
    // The initial resync first: between the cut of d2's backing file and `losetup
    // -c`, the loop driver reads zeros past the file's new end without an error (a
    // disk returning wrong data silently, which only integrity mode catches), and a
    // resync reading d2 then made parity from those zeros: about one run in ten read
    // d2's chunks back as zeros through that parity.
    crate::control::wait_for_health(&disks, "clean");
    std::fs::File::options()
        .write(true)
        .open(loops.backing(2))
        .and_then(|f| f.set_len(2 << 20))
        .expect("cut d2's backing file");
    let out = Command::new("losetup")
        .args(["-c", p(&loops.devices[2])])
        .output()
        .expect("losetup runs");
    assert!(out.status.success(), "losetup -c: {out:?}");
    let copy = dir.path().join("copy.raw");
    tool("nbdcopy", &[&uri, p(&copy)]);
    assert!(std::fs::read(&copy).expect("copy") == written, "read right");
    server.wait_for_log(0, &["disks/d2 failed"]);
    let live: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status JSON");
    assert_eq!(live["health"], "degraded", "{live}");
    let expected = random_bytes(ARRAY_BYTES, 8);
    let image = dir.path().join("image.raw");
    std::fs::write(&image, &expected).expect("image");
    tool("nbdcopy", &[p(&image), &uri]);
    tool("nbdcopy", &[&uri, p(&copy)]);
    assert!(
        std::fs::read(&copy).expect("copy") == expected,
        "written right"
    );

    std::os::unix::fs::symlink(&loops.devices[4], disks.join("n2")).expect("n2");
    let out = ok_once_let_go(&["add", p(&disks), p(&disks.join("n2"))]);
    assert!(out.contains("rebuilt by the server"), "{out}");
    scrub_finds_nothing(&[p(&disks)]);
    server.stop();
    std::fs::remove_file(disks.join("d2")).expect("the bad disk's link");
    reads_back(&[p(&disks)], &expected);
    let d = |n: &str| disks.join(n);
    reads_back(&[p(&d("d0")), p(&d("d1")), p(&d("n2"))], &expected);
}

/// On 4Kn devices the export advertises 4096 bytes as its minimum block (as md's
/// device has it): fio's nbd engine (libnbd, which holds clients to the minimum)
/// verifies 4 KiB random writes from four connections. Clients that send 512-byte
/// requests anyway are served too: four connections write the sectors of one region
/// in turn (sector i belongs to connection i mod 4), so that neighbouring sectors of
/// a device block are written side by side, each a read-modify-write of the block;
/// none is lost, and parity stays right.
#[test]
fn random_writes_from_four_connections_hold_on_4k_sector_devices() {
    crate::require_tool!("fio");
    let Some(loops) = Loops::attach(&[16; 4], Sectors::FourK) else {
        return;
    };
    let dir = tempdir();
    let members = loops.paths();
    run_quiet(&with(&["create", "-l", "5", "-c", "64K"], &members));
    let server = Server::tcp(dir.path(), &members);
    let uri = format!("--uri=nbd://{}/xraid", server.tcp_addr());
    let args = [
        "--name=v",
        "--ioengine=nbd",
        &uri,
        "--rw=randwrite",
        "--bs=4k",
        "--size=2M",
        "--offset_increment=2M",
        "--numjobs=4",
        "--iodepth=16",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        // No verify state files left in the working folder.
        "--verify_state_save=0",
        "--group_reporting",
        "--output-format=json",
    ];
    let stdout = tool("fio", &args);
    // The nbd engine says "fio: connected to NBD server" before the JSON.
    let json = &stdout[stdout.find('{').expect("fio's JSON")..];
    let report: serde_json::Value = serde_json::from_str(json).expect("fio JSON");
    let job = &report["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    assert_eq!(job["read"]["io_bytes"], 8 << 20, "read back and verified");

    const CONNECTIONS: u64 = 4;
    const REGION: u64 = 8 << 20;
    const SECTORS: u64 = 512; // 256 KiB: four chunks, many writes to each block
    let addr = server.tcp_addr().to_owned();
    let writers: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut client = Client::open(&addr, "xraid", false);
                let mut last = std::collections::HashMap::new();
                for i in 0..1500u64 {
                    let sector = (random_bytes(8, c * 1_000_003 + i)
                        .iter()
                        .fold(0u64, |a, &b| a << 8 | u64::from(b))
                        % (SECTORS / CONNECTIONS))
                        * CONNECTIONS
                        + c;
                    let data = random_bytes(512, (c << 32) + i);
                    let at = REGION + sector * 512;
                    assert_eq!(client.write(at, &data), 0, "write of sector {sector}");
                    last.insert(sector, data);
                }
                assert_eq!(client.flush(), 0);
                last
            })
        })
        .collect();
    let mut expected: Vec<Option<Vec<u8>>> = vec![None; SECTORS as usize];
    for writer in writers {
        for (sector, data) in writer.join().expect("a writer") {
            expected[sector as usize] = Some(data);
        }
    }
    let mut client = Client::open(&addr, "xraid", false);
    let got = client
        .read(REGION, (SECTORS * 512) as u32)
        .expect("read the region");
    for (sector, want) in expected.iter().enumerate() {
        if let Some(want) = want {
            assert!(
                got[sector * 512..(sector + 1) * 512] == want[..],
                "sector {sector} lost its last write"
            );
        }
    }
    drop(client);
    server.stop();
    scrub_finds_nothing(&members);
}

/// One disk's path names its whole array for the commands that take one ARRAY: the
/// other members are found among the machine's block devices.
#[test]
fn one_disks_path_names_its_whole_array() {
    let Some(loops) = Loops::attach(&[16; 4], Sectors::Default) else {
        return;
    };
    let members = loops.paths();
    run_quiet(&with(&["create", "-l", "5", "-c", "64K"], &members));
    let out = ok(&["fail", members[0], members[2]]);
    assert!(out.contains("marked faulty (role 2)"), "{out}");
    let out = ok(&["add", members[0], members[2]]);
    assert!(out.contains("added as role 2"), "{out}");
    let status: serde_json::Value =
        serde_json::from_str(&ok(&with(&["status", "--json"], &members))).expect("status JSON");
    assert_eq!(status["degraded"], false, "{status}");
    scrub_finds_nothing(&members);
}

/// A device with larger logical blocks than the array's (a 4Kn disk joining an array
/// of 512-byte disks) is refused as md refuses it ("incompatible logical_block_size,
/// can not add"): md's block device of these disks would change to 4096-byte blocks
/// under a file system made with 512-byte sectors, which then no longer mounts.
/// Refused offline and by the server, as spare, replacement and into a failed role,
/// with nothing written to it.
#[test]
fn a_4kn_device_is_refused_by_an_array_of_512_byte_devices() {
    let Some(small) = Loops::attach(&[16; 4], Sectors::Default) else {
        return;
    };
    let Some(big) = Loops::attach(&[16], Sectors::FourK) else {
        return;
    };
    let dir = tempdir();
    let (disks, _) = filled_raid5(dir.path(), &small.devices, 7);
    let s0 = disks.join("s0");
    std::os::unix::fs::symlink(&big.devices[0], &s0).expect("s0");
    let refused = |stderr: &str| {
        assert!(stderr.contains("4096"), "{stderr}");
    };
    refused(&fails(&["add", "--spare", p(&disks), p(&s0)]));
    refused(&fails(&[
        "replace",
        p(&disks),
        p(&disks.join("d1")),
        p(&s0),
    ]));
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    refused(&fails(&["add", "--spare", p(&disks), p(&s0)]));
    refused(&fails(&[
        "replace",
        p(&disks),
        p(&disks.join("d1")),
        p(&s0),
    ]));
    ok(&["fail", p(&disks), p(&disks.join("d2"))]);
    refused(&fails(&["add", p(&disks), p(&s0)]));
    let info = nbdinfo_json(&[], &format!("nbd://{}/xraid", server.tcp_addr()));
    assert_eq!(info["exports"][0]["block_size_minimum"], 512, "{info}");
    server.stop();
    // Nothing was written to it.
    let out = Command::new("mdadm")
        .arg("--examine")
        .arg(&big.devices[0])
        .output()
        .expect("mdadm runs");
    assert!(!out.status.success(), "s0 got a superblock");
}

/// md counts every device of the array, hot spares too, when it sets its block
/// device's logical block size at assembly: an array of 512-byte disks with a 4Kn
/// spare is a 4096-byte-block device under md, and is advertised so.
#[test]
fn an_array_with_a_4kn_spare_advertises_4096_byte_blocks() {
    let Some(small) = Loops::attach(&[16; 4], Sectors::Default) else {
        return;
    };
    let Some(big) = Loops::attach(&[16, 16], Sectors::FourK) else {
        return;
    };
    let dir = tempdir();
    let mut names: Vec<(String, &Path)> = small
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| (format!("d{i}"), d.as_path()))
        .collect();
    names.push(("s0".to_owned(), big.devices[0].as_path()));
    let links: Vec<(&str, &Path)> = names.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let disks = linked(dir.path(), &links);
    let members: Vec<PathBuf> = names.iter().map(|(n, _)| disks.join(n)).collect();
    let members: Vec<&str> = members.iter().map(|m| p(m)).collect();
    run_quiet(&with(
        &["create", "-l", "5", "-c", "64K", "--spares", "1"],
        &members,
    ));
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    let info = nbdinfo_json(&[], &format!("nbd://{}/xraid", server.tcp_addr()));
    assert_eq!(info["exports"][0]["block_size_minimum"], 4096, "{info}");
    server.stop();
    // Such an array takes another 4Kn device (md's would: its blocks are 4096 bytes).
    let s1 = disks.join("s1");
    std::os::unix::fs::symlink(&big.devices[1], &s1).expect("s1");
    ok(&["add", "--spare", p(&disks), p(&s1)]);
}

/// Every way the array opens a device it may already hold, on block devices (claimed
/// with O_EXCL, which the kernel grants once per open file, even within one process):
/// a spare promoted at assembly, a spare stepping in while served, the failed device
/// added back into its own role while served, an offline add of a stale member named
/// in the array's folder, and an offline replace onto a spare in that folder.
#[test]
fn devices_the_array_holds_are_opened_again_where_files_are() {
    let Some(loops) = Loops::attach(&[16; 6], Sectors::Default) else {
        return;
    };
    let dir = tempdir();
    let (disks, expected) = filled_raid5(dir.path(), &loops.devices[..4], 11);
    let (s0, s1) = (disks.join("s0"), disks.join("s1"));
    std::os::unix::fs::symlink(&loops.devices[4], &s0).expect("s0");
    std::os::unix::fs::symlink(&loops.devices[5], &s1).expect("s1");
    // Offline: d3 failed, a spare added, then serve: the spare is promoted at open.
    ok(&["fail", p(&disks), p(&disks.join("d3"))]);
    ok(&["add", "--spare", p(&disks), p(&s0)]);
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    // Waits until the array is whole: a member being rebuilt is done (failing another
    // before would lose the array, and is refused).
    let wait_whole = |rebuilt: &str| {
        let start = std::time::Instant::now();
        loop {
            let s: serde_json::Value =
                serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status JSON");
            if s["degraded"] == false {
                break;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(120),
                "{rebuilt} was not rebuilt in two minutes: {s}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    // While served: s1 a spare; once s0 is rebuilt, d2 fails and s1 steps in.
    let out = ok_once_let_go(&["add", "--spare", p(&disks), p(&s1)]);
    assert!(out.contains("hot spare"), "{out}");
    wait_whole("s0");
    ok(&["fail", p(&disks), p(&disks.join("d2"))]);
    // d3 (stale, left out at assembly) comes back as a spare; d2 too.
    ok_once_let_go(&["add", "--spare", p(&disks), p(&disks.join("d3"))]);
    ok_once_let_go(&["add", "--spare", p(&disks), p(&disks.join("d2"))]);
    // Once s1 is rebuilt: fail d1; d3 (a spare now) takes it; d1 comes back into
    // nothing: a spare.
    wait_whole("s1");
    ok(&["fail", p(&disks), p(&disks.join("d1"))]);
    ok_once_let_go(&["add", p(&disks), p(&disks.join("d1"))]);
    // Replace d0 onto the spare d2.
    let out = ok(&[
        "replace",
        p(&disks),
        p(&disks.join("d0")),
        p(&disks.join("d2")),
    ]);
    assert!(out.contains("holds role 0 now"), "{out}");
    server.stop();
    let s: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(&disks)])).expect("status JSON");
    assert_eq!(s["health"], "clean", "{s}");
    // Offline: replace a member onto a spare named in the folder.
    let spare = s["spares"][0].as_str().expect("a spare").to_owned();
    let active = s["members"][1]["path"].as_str().expect("role 1").to_owned();
    ok(&["replace", p(&disks), &active, &spare]);
    // The replaced members are left out (stale) with a warning; the array is whole.
    let out = dir.path().join("array.bin");
    ok(&["read", "-o", p(&out), p(&disks)]);
    assert!(std::fs::read(&out).expect("read back") == expected);
    let report: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("scrub");
    assert_eq!(report["mismatched_units"], 0, "{report}");
}

/// A block device without an md superblock is served as it is (`xraid serve
/// /dev/sdX`): to write, it is claimed as a member is, so that one the kernel or
/// another program holds (mounted, an md or LVM member) is refused, not served to
/// clients who would write over it.
#[test]
fn a_held_device_is_not_served_as_a_plain_device_to_write() {
    let Some(loops) = Loops::attach(&[16], Sectors::Default) else {
        return;
    };
    let device = &loops.devices[0];
    let holder = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(device)
        .expect("an exclusive open of the device");
    let mut child = xraid()
        .args(["serve", "--listen", "127.0.0.1:0", p(device)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("xraid serve runs");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if start.elapsed() > std::time::Duration::from_secs(5) {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    drop(holder);
    let status = status.expect("xraid serve served a device another program holds, to write");
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(stderr.contains("in use"), "{stderr}");
}

/// A folder of links to the members may also link to a disk that is not one of them,
/// and that another program holds (mounted, md, LVM): the array's commands pass over
/// it, as over any non-member, where since the O_EXCL claim they failed with "in use".
/// A member of the array held elsewhere is still refused, not left out.
#[test]
fn a_busy_disk_beside_the_members_is_passed_over_but_a_busy_member_is_refused() {
    let Some(loops) = Loops::attach(&[16; 5], Sectors::Default) else {
        return;
    };
    let dir = tempdir();
    let (disks, expected) = filled_raid5(dir.path(), &loops.devices[..4], 21);
    std::os::unix::fs::symlink(&loops.devices[4], disks.join("other")).expect("link");
    let hold = |device: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(device)
            .expect("an exclusive open of the device")
    };
    let held = hold(&loops.devices[4]);
    let report: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "repair", "--json", p(&disks)])).expect("scrub");
    assert_eq!(report["mismatched_units"], 0, "{report}");
    let out = dir.path().join("array.bin");
    ok(&["read", "-o", p(&out), p(&disks)]);
    assert!(std::fs::read(&out).expect("read back") == expected);
    drop(held);
    let held = hold(&loops.devices[3]);
    let err = fails(&["scrub", "repair", p(&disks)]);
    assert!(err.contains("in use"), "{err}");
    drop(held);
}

/// A loop device and the file behind it are one store under two names, and so are two
/// loop devices over one file: `create` refuses them, naming both, and writes nothing.
/// Before, they were taken as two members: a mirror of a disk and itself.
#[test]
fn a_loop_device_and_its_own_backing_file_are_refused_as_one_member_twice() {
    let Some(loops) = Loops::attach(&[16, 16], Sectors::Default) else {
        return;
    };
    let device = &loops.devices[0];
    let file = loops.backing(0);
    let second = losetup_find_and_attach(&file, Sectors::Default);
    let _detach = Detach(second.clone());
    for members in [
        [p(device), p(&file)],
        [p(&file), p(device)],
        [p(device), p(&second)],
    ] {
        let err = fails(&with(&["create", "-l", "1"], &members));
        assert!(
            err.contains("one store named twice")
                && err.contains(members[0])
                && err.contains(members[1]),
            "{members:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        let head = std::fs::read(&file).expect("backing file");
        assert!(head[..8192].iter().all(|&b| b == 0), "nothing written");
    }
    // A loop device over an active member's file is that member: `add` refuses it
    // (it took the missing role, and its superblock overwrote the member's).
    let dir = tempdir();
    let member = dir.path().join("f0");
    run(&["create", "-l", "1", "--size", "16M", p(&member), "missing"]);
    let before = std::fs::read(&member).expect("member");
    let alias = losetup_find_and_attach(&member, Sectors::Default);
    let _detach_alias = Detach(alias.clone());
    let err = fails(&["add", p(&member), p(&alias)]);
    assert!(
        err.contains("holds the superblock of") && err.contains("an active member"),
        "{err}"
    );
    assert!(
        std::fs::read(&member).expect("member") == before,
        "the member was written through its alias"
    );
    // The other device, over its own file, is a member with this one.
    run_quiet(&with(
        &["create", "-l", "1"],
        &[p(device), p(&loops.devices[1])],
    ));
}

/// Loop devices over parts of one file that do not overlap (`losetup --offset
/// --sizelimit`, as an image's partitions) are two stores: they make a mirror. Over
/// parts that overlap they are one store twice, refused. Before, any two loop devices
/// over one file were refused, and nothing (not `--force`) got past it.
#[test]
fn loop_devices_over_parts_of_one_file_that_do_not_overlap_are_two_members() {
    let Some(loops) = Loops::attach(&[1], Sectors::Default) else {
        return;
    };
    let file = loops.backing_dir.path().join("image");
    std::fs::File::create(&file)
        .and_then(|f| f.set_len(64 << 20))
        .expect("a sparse image");
    let part = |offset: &str, size: &str| {
        let device = losetup_attach_with(&file, &["--offset", offset, "--sizelimit", size]);
        Detach(device)
    };
    let first = part("0", "32M");
    let second = part("32M", "32M");
    let across = part("16M", "32M");
    let err = fails(&["create", "-l", "1", p(&first.0), p(&across.0)]);
    assert!(err.contains("one store named twice"), "{err}");
    let out = run_quiet(&["create", "-l", "1", p(&first.0), p(&second.0)]);
    assert!(out.contains("created raid1"), "{out}");
    md_examines(&[p(&first.0), p(&second.0)], "raid1");
}

/// Detaches a loop device attached outside [`Loops`] when dropped.
struct Detach(PathBuf);

impl Drop for Detach {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

/// Partitions are members as whole disks are: a mirror of two partitions of one disk
/// (an MBR written by hand, the partitions added with `partx`) is created, read by md,
/// and failed, removed and added again by one partition's path. A disk whose partition
/// table create would write over is refused without `--force`, and so is a partition
/// named with its own disk.
#[test]
fn partitions_are_members_and_a_partitioned_disk_is_not_written_over() {
    crate::require_tool!("partx");
    let Some(loops) = Loops::attach(&[64, 64], Sectors::Default) else {
        return;
    };
    // Two partitions of 30 MiB from 1 MiB, type 0xfd (Linux raid autodetect).
    let mut mbr = vec![0u8; 512];
    for (i, start) in [2048u32, 2048 + 61440].into_iter().enumerate() {
        let entry = &mut mbr[446 + 16 * i..446 + 16 * (i + 1)];
        entry[4] = 0xfd;
        entry[8..12].copy_from_slice(&start.to_le_bytes());
        entry[12..16].copy_from_slice(&61440u32.to_le_bytes());
    }
    mbr[510..].copy_from_slice(&[0x55, 0xaa]);
    let disk = &loops.devices[0];
    let device = std::fs::OpenOptions::new()
        .write(true)
        .open(disk)
        .expect("the disk");
    std::os::unix::fs::FileExt::write_all_at(&device, &mbr, 0).expect("the MBR");
    device.sync_all().expect("the MBR written");
    drop(device);
    let status = Command::new("partx")
        .args(["-a", p(disk)])
        .status()
        .expect("partx runs");
    assert!(status.success(), "partx -a {disk:?}");
    let _partitions = Partitions(disk.clone());
    let (p1, p2) = (format!("{}p1", p(disk)), format!("{}p2", p(disk)));

    let members = [p1.as_str(), p2.as_str()];
    run_quiet(&with(&["create", "-l", "1"], &members));
    md_examines(&members, "raid1");
    // A folder of links to the disk and to its partitions names the array the
    // partitions hold: the disk, no member, is passed over (it was refused as a
    // partition's own disk given beside it).
    let links = tempdir();
    let folder = linked(
        links.path(),
        &[
            ("disk", disk.as_path()),
            ("part1", Path::new(&p1)),
            ("part2", Path::new(&p2)),
        ],
    );
    let status = ok(&["status", p(&folder)]);
    // Active: the initial resync of the partitions' old contents is owed.
    assert!(status.contains("active raid1 [2/2]"), "{status}");
    // The whole array: 30 MiB partitions less md's 1 MiB before the data.
    let data = random_bytes(29 << 20, 17);
    let dir = tempdir();
    write_and_read_back(dir.path(), &members, "auto", 0, &data);
    ok(&["fail", &p2, &p2]);
    ok(&["remove", &p2, &p2]);
    let out = ok(&["add", &p1, &p2]);
    assert!(out.contains("added as role 1"), "{out}");
    reads_back(&members, &data);
    scrub_finds_nothing(&members);

    let head = || {
        let mut head = vec![0u8; 8192];
        let f = std::fs::File::open(disk).expect("the disk");
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0).expect("read it");
        head
    };
    let before = head();
    for args in [
        vec!["create", "-l", "1", p(disk), p(&loops.devices[1])],
        vec!["create", "-l", "1", "--force", p(disk), &p1],
    ] {
        let err = fails(&args);
        assert!(
            err.contains("partition table") || err.contains("is a partition of"),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(head() == before, "{args:?} wrote to the disk");
    }
}

/// Takes the partitions `partx -a` added off their disk when dropped: detaching a
/// loop device leaves them.
struct Partitions(PathBuf);

impl Drop for Partitions {
    fn drop(&mut self) {
        let _ = Command::new("partx").arg("-d").arg(&self.0).status();
    }
}
