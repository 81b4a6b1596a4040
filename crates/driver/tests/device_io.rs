//! I/O the driver makes to a device itself (an array's metadata): it goes through the
//! kernel for a device with descriptors, and a device that does not answer costs the
//! caller a `TimedOut` error at the engine's stall timeout, its buffer kept until the
//! kernel is done with it, instead of the array's thread.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use xraid_driver::{ArrayDriver, BackendChoice, DeviceIo, MemberSlot};
use xraid_engine::{EngineConfig, Nanos};
use xraid_layout::{Geometry, Layout, Level, MemberIdx};
use xraid_member::{DirectFd, DirectMode, FileMember, Member, MemoryMember, OpenOptions};

const DATA_OFFSET: u64 = 1 << 20;
const MEMBER_BYTES: u64 = DATA_OFFSET + (4 << 20);

fn slot(member: Box<dyn Member>) -> Option<MemberSlot> {
    Some(MemberSlot {
        member: member.into(),
        data_offset_bytes: DATA_OFFSET,
        log_offset_bytes: None,
        bitmap_offset_bytes: None,
        checksums_offset_bytes: None,
    })
}

/// A RAID-1 of an in-memory member and `second`, on `backend`, with the engine's stall
/// timeout at 200 ms.
fn raid1(second: Box<dyn Member>, backend: BackendChoice) -> Option<ArrayDriver> {
    let members = vec![
        slot(Box::new(MemoryMember::new("mem0", MEMBER_BYTES))),
        slot(second),
    ];
    let geo = Geometry::new(
        Level::Raid1,
        Layout::default_for(Level::Raid1),
        2,
        128,
        (MEMBER_BYTES - DATA_OFFSET) / 512,
    )
    .expect("valid geometry");
    let mut driver = ArrayDriver::new(geo, members, backend).ok()?;
    let engine = driver.engine_mut();
    let config = engine.config();
    engine.set_config(EngineConfig {
        stall_timeout: Nanos(200_000_000),
        ..config
    });
    Some(driver)
}

#[test]
fn a_device_io_to_a_member_with_descriptors_goes_through_the_kernel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m1");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(MEMBER_BYTES))
        .expect("member file");
    let opts = OpenOptions {
        write: true,
        direct: DirectMode::Auto,
        lock: false,
    };
    let member = FileMember::open(&path, &opts).expect("open member");
    let mut driver = raid1(Box::new(member), BackendChoice::Auto).expect("driver");
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 1) as u8).collect();
    // Unaligned, as a superblock's 4 KiB at offset 4 KiB need not be.
    driver
        .device_io(MemberIdx(1), DeviceIo::Write(&data), 4096 + 512)
        .expect("write");
    driver
        .device_io(MemberIdx(1), DeviceIo::Flush, 0)
        .expect("flush");
    let mut back = vec![0u8; data.len()];
    driver
        .device_io(MemberIdx(1), DeviceIo::Read(&mut back), 4096 + 512)
        .expect("read");
    assert!(back == data, "read back what was written");
    let mut on_disk = vec![0u8; data.len()];
    std::os::unix::fs::FileExt::read_exact_at(
        &std::fs::File::open(&path).expect("open"),
        &mut on_disk,
        4096 + 512,
    )
    .expect("read the file");
    assert!(on_disk == data, "it is on the device");
    assert!(!driver.io_in_flight());
}

/// A "device" whose descriptor is the read end of a pipe: a read from it does not
/// complete until something is written to the pipe, as on a device that hangs.
#[derive(Debug)]
struct Hung {
    read_end: OwnedFd,
}

impl Member for Hung {
    fn name(&self) -> &str {
        "hung"
    }
    fn size_bytes(&self) -> u64 {
        MEMBER_BYTES
    }
    fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<()> {
        Err(io::Error::other("only through the kernel"))
    }
    fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(io::Error::other("only through the kernel"))
    }
    fn flush(&self) -> io::Result<()> {
        Err(io::Error::other("only through the kernel"))
    }
    fn direct_fd(&self) -> Option<DirectFd> {
        let fd = self.read_end.as_raw_fd();
        Some(DirectFd {
            fd,
            buffered_fd: fd,
            align: 1,
        })
    }
}

#[test]
fn a_device_io_that_does_not_complete_times_out_and_its_buffer_waits_for_the_kernel() {
    let (read_end, write_end) = std::io::pipe().expect("pipe");
    let read_end = OwnedFd::from(read_end);
    // io_uring only: the thread pool's pread of a pipe fails at once.
    let Some(mut driver) = raid1(Box::new(Hung { read_end }), BackendChoice::Uring) else {
        eprintln!("skipped: io_uring is not available");
        return;
    };
    let mut buf = vec![0u8; 4];
    let err = driver
        .device_io(MemberIdx(1), DeviceIo::Read(&mut buf), 0)
        .expect_err("the device never answered");
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    assert!(driver.io_in_flight(), "the kernel still has the read");
    // The device answers late: the kernel writes into the buffer the driver kept.
    io::Write::write_all(&mut &write_end, b"late").expect("write to the pipe");
    for _ in 0..1000 {
        if !driver.io_in_flight() {
            break;
        }
        driver.pump(true).expect("pump");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!driver.io_in_flight(), "the late answer was collected");
    assert_eq!(
        buf, [0u8; 4],
        "given up on, the caller's buffer is left alone"
    );
}
