//! Members that are block devices, as a user with real disks has them: loop devices
//! over sparse files (512-byte and 4096-byte logical sectors, with and without the
//! loop driver's direct I/O), driven through the real `xraid` and real NBD clients.
//! Where the kernel offers no loop devices (no /dev/loop-control) each test says it is
//! skipped; anywhere else a failure is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::members::md_agrees;
use crate::util::{p, random_bytes, tempdir, xraid};

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
    _backing: tempfile::TempDir,
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
            _backing: tempdir(),
        };
        for (i, mib) in sizes_mib.iter().enumerate() {
            let file = loops._backing.path().join(format!("backing{i}"));
            std::fs::File::create(&file)
                .and_then(|f| f.set_len(mib << 20))
                .expect("a sparse backing file");
            let device = losetup_find_and_attach(&file, sectors);
            loops.devices.push(device);
        }
        Some(loops)
    }

    fn paths(&self) -> Vec<&str> {
        self.devices.iter().map(|d| p(d)).collect()
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        for device in &self.devices {
            let _ = Command::new("losetup").arg("-d").arg(device).status();
        }
    }
}

/// `losetup -f --show FILE`: the first free loop device, never a fixed one, as tests
/// run in parallel. Two tests may race for the same free device (losetup then fails
/// with "device or resource busy"): another try takes the next one.
fn losetup_find_and_attach(file: &Path, sectors: Sectors) -> PathBuf {
    let mut args: Vec<&str> = match sectors {
        Sectors::Default => vec![],
        Sectors::DirectIo => vec!["--direct-io=on"],
        Sectors::FourK => vec!["--sector-size", "4096", "--direct-io=on"],
    };
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

/// Writes `data` at `offset` with `xraid write` and reads it back with `xraid read`.
fn write_and_read_back(dir: &Path, members: &[&str], offset: u64, data: &[u8]) {
    let input = dir.join("in.bin");
    std::fs::write(&input, data).expect("input");
    let at = offset.to_string();
    run_quiet(&with(&["write", "--offset", &at, "-i", p(&input)], members));
    let output = dir.join("out.bin");
    let len = data.len().to_string();
    let read = ["read", "--offset", &at, "--length", &len, "-o", p(&output)];
    run_quiet(&with(&read, members));
    assert!(
        std::fs::read(&output).expect("output") == data,
        "{members:?}: what was written at {offset} reads back"
    );
}

/// `mdadm --examine` and `xraid examine` agree on every device, which holds `role` of
/// a `level` array of `devices` members.
fn md_examines(members: &[&str], level: &str) {
    if !crate::util::has_tool("mdadm") {
        return;
    }
    for (role, member) in members.iter().enumerate() {
        let md = md_agrees(Path::new(member));
        assert_eq!(md["Raid Level"], level, "{member}: {md:?}");
        assert_eq!(
            md["Raid Devices"],
            members.len().to_string(),
            "{member}: {md:?}"
        );
        assert_eq!(md["State"], "clean", "{member}: {md:?}");
        assert_eq!(
            md["Device Role"],
            format!("Active device {role}"),
            "{member}: {md:?}"
        );
    }
}

/// A RAID-5 on four loop devices and a RAID-1 on two, created on the whole devices,
/// hold what is written, read it back through O_DIRECT, and md reads their superblocks
/// as xraid wrote them.
#[test]
fn raid5_and_raid1_on_loop_devices_hold_what_is_written() {
    for (level, n, array_mib) in [("raid5", 4, 93), ("raid1", 2, 31)] {
        let Some(loops) = Loops::attach(&vec![32; n], Sectors::Default) else {
            return;
        };
        let dir = tempdir();
        let members = loops.paths();
        let (out, _) = run(&with(&["create", "-l", level, "-c", "64K"], &members));
        // The whole device, less md's 1 MiB data offset.
        let bytes = (array_mib << 20).to_string();
        assert!(out.contains(&format!("({bytes} bytes)")), "{out}");
        md_examines(&members, level);
        write_and_read_back(dir.path(), &members, 64 << 10, &random_bytes(8 << 20, 1));
        // The array's last bytes: the devices' ends are reached.
        write_and_read_back(
            dir.path(),
            &members,
            (array_mib << 20) - (1 << 20),
            &random_bytes(1 << 20, 2),
        );
        md_examines(&members, level);
    }
}
