//! Tests of file and memory members against real files, locks and file systems.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{DirectMode, FileMember, Member, MemberError, MemoryMember, OpenOptions};

const MIB: u64 = 1 << 20;

fn options(write: bool, direct: DirectMode, lock: bool) -> OpenOptions {
    OpenOptions {
        write,
        direct,
        lock,
    }
}

/// A directory with a 1 MiB sparse member in it.
fn member_in(dir: &Path) -> PathBuf {
    let path = dir.join("m.img");
    FileMember::create_sparse(&path, MIB).expect("create member");
    path
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn round_trip_at_unaligned_offsets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = member_in(dir.path());
    let m = FileMember::open(&path, &options(true, DirectMode::Auto, true)).expect("open");
    assert_eq!(m.size_bytes(), MIB);
    assert_eq!(m.path(), path);
    assert_eq!(m.name(), path.display().to_string());
    for (offset, len, seed) in [(4097, 10_000, 1), (1, 3, 2), (MIB - 7, 7, 3), (0, 512, 4)] {
        let data = pattern(len, seed);
        m.write_at(&data, offset).expect("write");
        let mut back = vec![0; len];
        m.read_at(&mut back, offset).expect("read");
        assert_eq!(back, data, "at {offset}");
    }
    m.flush().expect("flush");
    let mut past = vec![0; 16];
    let err = m
        .read_at(&mut past, MIB - 8)
        .expect_err("read past the end");
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
}

#[test]
fn read_only_members_refuse_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = member_in(dir.path());
    let m = FileMember::open(&path, &options(false, DirectMode::Off, false)).expect("open");
    assert!(m.write_at(b"x", 0).is_err());
    let mut buf = [1u8; 8];
    m.read_at(&mut buf, 100).expect("read");
    assert_eq!(buf, [0; 8]);
}

#[test]
fn a_locked_member_is_in_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = member_in(dir.path());
    let first = FileMember::open(&path, &options(true, DirectMode::Auto, true)).expect("first");
    let err = FileMember::open(&path, &options(false, DirectMode::Off, true))
        .expect_err("second open while locked");
    assert!(matches!(err, MemberError::InUse { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("in use"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    drop(first);
    FileMember::open(&path, &options(true, DirectMode::Auto, true)).expect("after unlock");
}

#[test]
fn unlocked_opens_do_not_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = member_in(dir.path());
    let _a = FileMember::open(&path, &options(false, DirectMode::Off, false)).expect("a");
    let _b = FileMember::open(&path, &options(true, DirectMode::Auto, false)).expect("b");
    let _c = FileMember::open(&path, &options(true, DirectMode::Auto, true)).expect("c");
    let _d = FileMember::open(&path, &options(false, DirectMode::Off, false)).expect("d");
}

#[test]
fn a_lock_held_by_flock_1_conflicts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = member_in(dir.path());
    let spawned = Command::new("flock")
        .arg("--exclusive")
        .arg(&path)
        .args(["sh", "-c", "echo locked; exec sleep 30"])
        .stdout(Stdio::piped())
        .spawn();
    let Ok(mut holder) = spawned else {
        eprintln!("skipped: flock(1) is not installed");
        return;
    };
    let mut line = String::new();
    let stdout = holder.stdout.take().expect("piped stdout");
    BufReader::new(stdout).read_line(&mut line).expect("holder");
    let result = FileMember::open(&path, &options(false, DirectMode::Off, true));
    holder.kill().ok();
    holder.wait().ok();
    assert_eq!(line.trim(), "locked");
    assert!(
        matches!(result, Err(MemberError::InUse { .. })),
        "{result:?}"
    );
}

/// tmpfs refused O_DIRECT before Linux 6.6; where it still does, Auto falls back to
/// buffered I/O with a reason and On fails.
#[test]
fn tmpfs_falls_back_to_buffered_io() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let dir = tempfile::tempdir_in(shm).expect("tempdir in /dev/shm");
    let path = member_in(dir.path());
    let off = FileMember::open(&path, &options(true, DirectMode::Off, false)).expect("off");
    assert_eq!(off.direct_unavailable_reason(), None);
    let fds = off.direct_fd().expect("a file has descriptors");
    assert_eq!((fds.fd, fds.align), (fds.buffered_fd, 1));

    let auto = FileMember::open(&path, &options(true, DirectMode::Auto, false)).expect("auto");
    let Some(reason) = auto.direct_unavailable_reason() else {
        eprintln!("skipped: this kernel's tmpfs supports O_DIRECT (Linux 6.6 and later)");
        FileMember::open(&path, &options(true, DirectMode::On, false)).expect("on");
        return;
    };
    assert!(reason.contains("O_DIRECT"), "{reason}");
    let fds = auto.direct_fd().expect("a file has descriptors");
    assert_eq!((fds.fd, fds.align), (fds.buffered_fd, 1));
    let err = FileMember::open(&path, &options(true, DirectMode::On, false))
        .expect_err("O_DIRECT required on tmpfs");
    assert!(matches!(err, MemberError::DirectRequired { .. }), "{err:?}");
    assert!(err.to_string().contains("O_DIRECT"), "{err}");
}

/// Where the file system takes O_DIRECT (ext4, xfs, btrfs), the driver gets a second,
/// aligned descriptor that sees what the buffered one wrote.
#[test]
fn o_direct_descriptor_where_supported() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).expect("tempdir");
    let path = member_in(dir.path());
    let m = match FileMember::open(&path, &options(true, DirectMode::On, false)) {
        Ok(m) => m,
        Err(MemberError::DirectRequired { reason, .. }) => {
            eprintln!("skipped: no O_DIRECT in {}: {reason}", dir.path().display());
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(m.direct_unavailable_reason(), None);
    let fds = m.direct_fd().expect("descriptors");
    assert_ne!(fds.fd, fds.buffered_fd);
    assert_eq!(fds.align, 4096);
    let data = pattern(8192, 9);
    m.write_at(&data, 8192).expect("buffered write");
    let mut storage = vec![0u8; 8192 + 4096];
    let start = storage.as_ptr().align_offset(4096);
    let aligned = &mut storage[start..start + 8192];
    // Borrow the descriptor as a File without taking ownership of it.
    let direct = std::mem::ManuallyDrop::new(
        // SAFETY: the descriptor stays open while `m` lives, and ManuallyDrop keeps this
        // File from closing it.
        unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds.fd) },
    );
    direct.read_exact_at(aligned, 8192).expect("O_DIRECT read");
    assert!(aligned == &data[..]);
}

#[test]
fn create_sparse_makes_a_file_and_refuses_an_existing_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("new.img");
    FileMember::create_sparse(&path, 3 * MIB).expect("create");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 3 * MIB);
    let err = FileMember::create_sparse(&path, MIB).expect_err("exists");
    assert!(matches!(err, MemberError::Exists { .. }), "{err:?}");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 3 * MIB);
    let err = FileMember::create_sparse(&dir.path().join("no/such/dir.img"), MIB)
        .expect_err("missing directory");
    assert!(matches!(err, MemberError::Create { .. }), "{err:?}");
}

#[test]
fn missing_files_directories_and_char_devices_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = options(false, DirectMode::Auto, true);
    let err = FileMember::open(&dir.path().join("absent.img"), &opts).expect_err("absent");
    assert!(matches!(err, MemberError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("no such file"), "{err}");
    let err = FileMember::open(dir.path(), &opts).expect_err("a directory");
    assert!(matches!(err, MemberError::NotFileOrBlock { .. }), "{err:?}");
    let err = FileMember::open(Path::new("/dev/null"), &opts).expect_err("a char device");
    assert!(matches!(err, MemberError::NotFileOrBlock { .. }), "{err:?}");
}

#[test]
fn memory_member_round_trip() {
    let m = MemoryMember::new("mem0", 64 * 1024);
    assert_eq!(m.name(), "mem0");
    assert_eq!(m.size_bytes(), 64 * 1024);
    assert!(m.direct_fd().is_none());
    let data = pattern(1000, 5);
    m.write_at(&data, 12_345).expect("write");
    let mut back = vec![0; 1000];
    m.read_at(&mut back, 12_345).expect("read");
    assert_eq!(back, data);
    m.flush().expect("flush");
    let snap = m.snapshot();
    assert_eq!(snap.len(), 64 * 1024);
    assert_eq!(&snap[12_345..13_345], &data[..]);
    assert!(snap[..12_345].iter().all(|&b| b == 0));
}

#[test]
fn memory_member_refuses_out_of_range_io() {
    let m = MemoryMember::new("mem1", 4096);
    let mut buf = [0u8; 16];
    let err = m.read_at(&mut buf, 4090).expect_err("read past the end");
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    assert!(m.read_at(&mut buf, u64::MAX).is_err());
    assert!(m.write_at(&buf, 4081).is_err());
    assert!(m.write_at(&buf, u64::MAX - 4).is_err());
    m.write_at(&buf, 4080).expect("the last 16 bytes");
    assert!(m.snapshot().len() == 4096);
}

/// A host block device, only when one is named in
/// XRAID_TEST_BLOCK_DEVICE (tests must not touch the host's disks by default).
#[test]
fn block_device_named_in_the_environment() {
    let Some(dev) = std::env::var_os("XRAID_TEST_BLOCK_DEVICE") else {
        eprintln!("skipped: set XRAID_TEST_BLOCK_DEVICE to a block device to test one");
        return;
    };
    let path = PathBuf::from(dev);
    let m = FileMember::open(&path, &options(false, DirectMode::Auto, false)).expect("open");
    eprintln!(
        "{}: {} bytes, {:?}, {:?}",
        m.name(),
        m.size_bytes(),
        m.direct_fd(),
        m.direct_unavailable_reason()
    );
    assert!(m.size_bytes() > 0);
    let fds = m.direct_fd().expect("descriptors");
    assert!(fds.align == 1 || (fds.align >= 512 && fds.align.is_power_of_two()));
    let mut buf = [0u8; 100];
    m.read_at(&mut buf, 1).expect("unaligned read");
    // Block devices take O_DIRECT: the node's devtmpfs is not where their data lives.
    assert_eq!(m.direct_unavailable_reason(), None);
    // Held to write, the device is claimed: a second writer is refused (after the
    // grace a just-killed holder gets), a reader is not. Nothing is written.
    let writer = options(true, DirectMode::Auto, true);
    match FileMember::open(&path, &writer) {
        Ok(_held) => {
            let err = FileMember::open(&path, &writer).expect_err("a second writer");
            assert!(matches!(err, MemberError::Busy { .. }), "{err:?}");
            FileMember::open(&path, &options(false, DirectMode::Auto, false)).expect("a reader");
        }
        // A mounted disk (or one md holds) is refused: as it should be.
        Err(MemberError::Busy { .. } | MemberError::ReadOnly { .. }) => {
            eprintln!(
                "{}: held elsewhere or read-only: not opened to write",
                m.name()
            );
        }
        Err(e) => panic!("open to write: {e}"),
    }
}

/// The claim and O_DIRECT of a block device, on a loop device of this test's own
/// (where the kernel offers them: /dev/loop-control, and root to attach one), so that
/// the suite checks them without a host disk named in XRAID_TEST_BLOCK_DEVICE: a
/// second writer in the same process is refused (O_EXCL is per open file) with Busy,
/// unlocked writers and readers are not, a write-protected device is refused to
/// writers only, and 4096-byte sectors are the member's logical block size.
#[test]
fn a_loop_device_is_claimed_by_one_writer_and_takes_o_direct() {
    if !Path::new("/dev/loop-control").exists() {
        eprintln!("skipped: no loop devices here");
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let backing = member_in(dir.path());
    let out = Command::new("losetup")
        .args(["--sector-size", "4096", "-f", "--show"])
        .arg(&backing)
        .output();
    let Some(device) = out
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
    else {
        eprintln!("skipped: cannot attach a loop device (not root?)");
        return;
    };
    struct Detach(PathBuf);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("blockdev")
                .arg("--setrw")
                .arg(&self.0)
                .status();
            let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
        }
    }
    let _detach = Detach(device.clone());
    let writer = options(true, DirectMode::On, true);
    let held = FileMember::open(&device, &writer).expect("the first writer");
    assert_eq!(held.logical_block_bytes(), 4096);
    assert_eq!(held.direct_fd().expect("descriptors").align, 4096);
    let err = FileMember::open(&device, &writer).expect_err("a second writer");
    assert!(matches!(err, MemberError::Busy { .. }), "{err:?}");
    FileMember::open(&device, &options(true, DirectMode::Off, false)).expect("unlocked");
    drop(held);
    FileMember::open(&device, &writer).expect("a writer once the first is gone");
    assert!(Command::new("blockdev")
        .arg("--setro")
        .arg(&device)
        .status()
        .is_ok_and(|s| s.success()));
    let err = FileMember::open(&device, &writer).expect_err("write-protected");
    assert!(matches!(err, MemberError::ReadOnly { .. }), "{err:?}");
    FileMember::open(&device, &options(false, DirectMode::On, false)).expect("a reader");
}

/// A member a test keeps a handle on, to look under a wrapper (faults, an overlay).
#[derive(Debug)]
pub(crate) struct SharedMember(pub(crate) std::sync::Arc<MemoryMember>);

impl Member for SharedMember {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
    fn direct_fd(&self) -> Option<crate::DirectFd> {
        None
    }
}
