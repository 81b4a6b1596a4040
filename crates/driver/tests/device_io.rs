//! I/O the driver makes to a device itself (an array's metadata): it goes through the
//! kernel for a device with descriptors, and a device that does not answer costs the
//! caller a `TimedOut` error at the engine's stall timeout, its buffer kept until the
//! kernel is done with it, instead of the array's thread.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use xraid_driver::{ArrayDriver, BackendChoice, DeviceIo, MemberSlot};
use xraid_engine::{EngineConfig, MemberState, Nanos};
use xraid_layout::{Geometry, Layout, Level, MemberIdx};
use xraid_member::{
    DirectFd, DirectMode, FaultPlan, FaultyMember, FileMember, Member, MemoryMember, OpenOptions,
};

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

/// A "device" whose descriptor is one end of a pipe, reached only through the kernel.
/// On the read end a read does not complete until something is written to the pipe,
/// as on a device that hangs; on the write end what the kernel writes arrives in order
/// on the read end the test holds, and with the pipe full a write does not complete
/// until the test reads some out.
#[derive(Debug)]
struct PipeEnd {
    name: &'static str,
    fd: OwnedFd,
}

impl Member for PipeEnd {
    fn name(&self) -> &str {
        self.name
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
        let fd = self.fd.as_raw_fd();
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
    let Some(mut driver) = raid1(
        Box::new(PipeEnd {
            name: "hung",
            fd: read_end,
        }),
        BackendChoice::Uring,
    ) else {
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

/// Fills the pipe behind `write_end` to the last byte (the descriptor is left
/// blocking, as the kernel's writes to it must wait, not fail); returns how much.
fn fill_pipe(write_end: &OwnedFd) -> usize {
    let fd = write_end.as_raw_fd();
    // SAFETY: fcntl on a descriptor this test owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    assert!(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } >= 0);
    let mut filled = 0;
    for chunk in [4096, 1] {
        let bytes = vec![0xeeu8; chunk];
        // SAFETY: `bytes` is valid for `chunk` bytes for the call.
        while unsafe { libc::write(fd, bytes.as_ptr().cast(), chunk) } > 0 {
            filled += chunk;
        }
    }
    // SAFETY: as above.
    assert!(unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } >= 0);
    filled
}

/// A RAID-1 on io_uring whose role 1 writes into a pipe filled to the last byte (its
/// writes stay in the kernel until the test drains the pipe), with the pipe's read
/// end and how much fills it; `None`, said, where io_uring is not available (the
/// thread pool's pwrite to a pipe fails at once).
fn raid1_writing_into_a_full_pipe() -> Option<(ArrayDriver, io::PipeReader, usize)> {
    let (read_end, write_end) = std::io::pipe().expect("pipe");
    let write_end = OwnedFd::from(write_end);
    let filled = fill_pipe(&write_end);
    let Some(driver) = raid1(
        Box::new(PipeEnd {
            name: "piped",
            fd: write_end,
        }),
        BackendChoice::Uring,
    ) else {
        eprintln!("skipped: io_uring is not available");
        return None;
    };
    Some((driver, read_end, filled))
}

/// Reads the `filled` bytes that fill the pipe behind `read_end`, so that what waits
/// to be written lands.
fn drain(read_end: &io::PipeReader, filled: usize) {
    let mut fill = vec![0u8; filled];
    io::Read::read_exact(&mut &*read_end, &mut fill).expect("read the fill");
}

/// Pumps `driver` until the kernel has given back every I/O it had.
fn collect_all(driver: &mut ArrayDriver) {
    for _ in 0..1000 {
        if !driver.io_in_flight() {
            break;
        }
        driver.pump(true).expect("pump");
    }
}

/// A superblock write that timed out but is still in the kernel keeps the next write
/// to that device from going out until it has left the kernel: sent at once, the newer
/// write could land first and the older one after it, leaving the older superblock on
/// the device. Here the device is a full pipe: the first write waits in the kernel
/// past the stall timeout; the second is refused without reaching the device; once
/// the first has landed, the second, asked again, lands after it. Before (80bff24 to
/// 12d6f40) the second went to the kernel beside the first, and the pipe received it
/// before the first: the older superblock landed last.
#[test]
fn a_write_after_one_that_timed_out_waits_until_the_first_has_left_the_kernel() {
    let Some((mut driver, read_end, filled)) = raid1_writing_into_a_full_pipe() else {
        return;
    };
    let (older, newer) = (
        b"superblock events 7".as_slice(),
        b"superblock events 8".as_slice(),
    );
    let err = driver
        .device_io(MemberIdx(1), DeviceIo::Write(older), 4096)
        .expect_err("the pipe is full: the write stays in the kernel");
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    let err = driver
        .device_io(MemberIdx(1), DeviceIo::Write(newer), 4096)
        .expect_err("the older write is still in the kernel");
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    // The device drains: the older write lands, and leaves the kernel.
    drain(&read_end, filled);
    collect_all(&mut driver);
    assert!(!driver.io_in_flight(), "the older write was collected");
    driver
        .device_io(MemberIdx(1), DeviceIo::Write(newer), 4096)
        .expect("nothing of the device's is in the kernel now");
    drop(driver);
    let mut landed = Vec::new();
    io::Read::read_to_end(&mut &read_end, &mut landed).expect("read what landed");
    assert_eq!(
        String::from_utf8_lossy(&landed),
        String::from_utf8_lossy(&[older, newer].concat()),
        "what reached the device, in order: the refused write must not be there"
    );
}

/// While the stripe log recovers (reads its rings and replays them at open), the engine
/// runs no timers: the open waits for a slow member there rather than fail it at the
/// stall timeout in the middle of the replay. A device I/O made meanwhile (the
/// replay's record of the superblocks) waits with the engine pumped, not ticked.
/// Here role 2 is slow (every I/O held for [`SLOW`], past the 100 ms stall timeout)
/// with its ring's read out; a superblock write to it waits for that read and times
/// out itself, but role 2 is not failed, and the recovery ends with every member in.
/// Before (80bff24 to 12d6f40) the wait ticked the engine, whose stall timer failed
/// role 2 in the middle of the recovery.
#[test]
fn a_device_io_while_the_stripe_log_recovers_runs_no_engine_timer() {
    const SLOW: Duration = Duration::from_millis(600);
    const LOG_OFFSET: u64 = 512 << 10;
    let members = (0..3)
        .map(|role| {
            let memory = MemoryMember::new(format!("mem{role}"), MEMBER_BYTES);
            let member: Box<dyn Member> = if role == 2 {
                let plan = FaultPlan {
                    latency: Some(SLOW),
                    ..FaultPlan::default()
                };
                Box::new(FaultyMember::new(Box::new(memory), plan))
            } else {
                Box::new(memory)
            };
            Some(MemberSlot {
                member: member.into(),
                data_offset_bytes: DATA_OFFSET,
                log_offset_bytes: Some(LOG_OFFSET),
                bitmap_offset_bytes: None,
                checksums_offset_bytes: None,
            })
        })
        .collect();
    let geo = Geometry::new(
        Level::Raid5,
        Layout::default_for(Level::Raid5),
        3,
        128,
        (MEMBER_BYTES - DATA_OFFSET) / 512,
    )
    .expect("valid geometry");
    let mut driver = ArrayDriver::new(geo, members, BackendChoice::Threads).expect("driver");
    let engine = driver.engine_mut();
    let config = engine.config();
    engine.set_config(EngineConfig {
        stall_timeout: Nanos(100_000_000),
        // The rings (zeroed: nothing to replay) are read first.
        log_sectors: 256,
        ..config
    });
    driver.pump(false).expect("pump");
    assert!(
        driver.engine().log_recovering(),
        "role 2's ring read is held"
    );
    let written = driver.device_io(MemberIdx(2), DeviceIo::Write(&[0x5a; 4096]), 4096);
    let role_2 = driver.engine().member_states()[2];
    assert_eq!(
        role_2,
        MemberState::Active,
        "role 2 was failed by the engine's stall timer during the recovery ({:?}; the write: {written:?})",
        driver.take_failures()
    );
    // The caller (the replay's record) decides what a write that timed out costs.
    let err = written.expect_err("role 2's ring read is not done within the stall timeout");
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    for _ in 0..100_000 {
        if !driver.engine().log_recovering() {
            break;
        }
        driver.pump(true).expect("pump");
    }
    assert!(!driver.engine().log_recovering(), "the recovery ended");
    assert_eq!(
        driver.engine().member_states(),
        [MemberState::Active; 3],
        "every member is in"
    );
    assert!(driver.take_failures().is_empty());
}

/// A wait for member I/O with an I/O held aside (a slow member's, see
/// `Member::hold_for`) ends when that I/O falls due, even with another I/O in the
/// kernel that does not complete: nothing else would wake it. Here a RAID-0 reads
/// chunk 1 from a member that never answers (a pipe nobody writes to) and chunk 0 from
/// a member whose I/O is held for 50 ms; `pump(true)` must come back for the held read,
/// which is answered while the other read is still in the kernel. Before (80bff24 to
/// 12d6f40) the wait had no bound but the caller's: it slept until the hung read
/// completed (here when the test gives up and answers it, after 10 s; on a hung device,
/// never).
#[test]
fn a_wait_with_an_io_held_aside_ends_when_it_falls_due() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};

    let (read_end, write_end) = std::io::pipe().expect("pipe");
    let slow = FaultPlan {
        latency: Some(Duration::from_millis(50)),
        ..FaultPlan::default()
    };
    let slots = vec![
        slot(Box::new(FaultyMember::new(
            Box::new(MemoryMember::new("slow", MEMBER_BYTES)),
            slow,
        ))),
        // Chunk 1 at byte 0 of the pipe (its data area from byte 0).
        Some(MemberSlot {
            member: std::sync::Arc::new(PipeEnd {
                name: "hung",
                fd: OwnedFd::from(read_end),
            }),
            data_offset_bytes: 0,
            log_offset_bytes: None,
            bitmap_offset_bytes: None,
            checksums_offset_bytes: None,
        }),
    ];
    let geo = Geometry::new(
        Level::Raid0,
        Layout::default_for(Level::Raid0),
        2,
        128,
        (MEMBER_BYTES - DATA_OFFSET) / 512,
    )
    .expect("valid geometry");
    // io_uring only: the thread pool's pread of a pipe fails at once.
    let Ok(mut driver) = ArrayDriver::new(geo, slots, BackendChoice::Uring) else {
        eprintln!("skipped: io_uring is not available");
        return;
    };
    // Should the wait not end, the hung read is answered after a while, so that the
    // test fails rather than hangs.
    let write_end = Arc::new(write_end);
    let answered = Arc::new(AtomicBool::new(false));
    let (done, rescue) = mpsc::channel::<()>();
    let rescuer = {
        let (write_end, answered) = (write_end.clone(), answered.clone());
        std::thread::spawn(move || {
            if rescue.recv_timeout(Duration::from_secs(10)).is_err() {
                answered.store(true, Ordering::SeqCst);
                io::Write::write_all(&mut &*write_end, &[0u8; 4096]).expect("write to the pipe");
            }
        })
    };
    let mut read = |sector: u64| {
        let buf = driver.engine_mut().buffers_mut().alloc(4096);
        driver.submit(xraid_engine::RequestKind::Read, sector, 8, Some(buf))
    };
    let _hung = read(128);
    let held = read(0);
    // The waiting pump itself sends them, one read to the kernel and one held aside:
    // the held one bounds that very wait.
    let mut waits = 0;
    let reply = loop {
        if let Some(reply) = driver.next_reply() {
            break reply;
        }
        assert!(waits < 1000, "no reply after {waits} waits");
        driver.pump(true).expect("pump");
        waits += 1;
    };
    let answered_first = answered.load(Ordering::SeqCst);
    let _ = done.send(());
    rescuer.join().expect("the rescuer");
    assert!(
        !answered_first,
        "the wait did not end until the hung read was answered (reply {:?} after {waits} waits)",
        reply.id
    );
    assert_eq!(reply.id, held, "the held read answers first");
    reply.result.expect("the held read succeeds");
    assert!(
        driver.io_in_flight(),
        "the hung read is still in the kernel"
    );
    // Answered at last (all 4 KiB: a short read is read on), the hung read leaves
    // the kernel.
    io::Write::write_all(&mut &*write_end, &[0u8; 4096]).expect("write to the pipe");
    for _ in 0..1000 {
        if !driver.io_in_flight() {
            break;
        }
        driver.pump(true).expect("pump");
    }
    assert!(!driver.io_in_flight());
}

/// A device I/O that waits for the engine's own I/O to its device, stuck in the
/// kernel, must not go out once the engine has failed the device meanwhile: the held
/// path says "the device was failed while this I/O waited on it", but the kernel path
/// leaves its wait (the loop's `serving` condition, or since 148fff1 the `break` after
/// the tick at the deadline) and sends the write to the failed device anyway, where a
/// superblock written for the array as it was lands whenever the device drains.
#[test]
fn a_device_write_does_not_go_to_a_device_the_engine_failed_while_it_waited() {
    let Some((mut driver, read_end, filled)) = raid1_writing_into_a_full_pipe() else {
        return;
    };
    // The engine's write to the piped device stays in the kernel (the pipe is full).
    let buf = driver.engine_mut().buffers_mut().alloc(4096);
    driver
        .engine_mut()
        .buffers_mut()
        .get_mut(buf)
        .copy_from_slice(&[0x11; 4096]);
    let _id = driver.submit(xraid_engine::RequestKind::Write, 0, 8, Some(buf));
    driver.pump(false).expect("pump");
    let stale = b"superblock of the array as it was".as_slice();
    let err = driver
        .device_io(MemberIdx(1), DeviceIo::Write(stale), 4096)
        .expect_err("the device does not answer");
    assert_eq!(
        driver.engine().member_states()[1],
        MemberState::Failed,
        "the engine failed the device for its stalled write"
    );
    // The device drains.
    drain(&read_end, filled);
    collect_all(&mut driver);
    drop(driver);
    let mut landed = Vec::new();
    io::Read::read_to_end(&mut &read_end, &mut landed).expect("read what landed");
    assert!(
        !landed.windows(stale.len()).any(|w| w == stale),
        "the write reached a device the engine had failed before it was sent ({err})"
    );
}
