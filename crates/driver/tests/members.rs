//! The real driver over in-memory members (the inline path) and over a member that
//! starts failing mid-run: data stays right, the failure is reported once.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use xraid_driver::{ArrayDriver, BackendChoice, MemberSlot};
use xraid_engine::MemberState;
use xraid_layout::{Geometry, Layout, Level, MemberIdx};
use xraid_member::{DirectFd, Member, MemoryMember};

const DATA_OFFSET: u64 = 1 << 20;
const MEMBER_BYTES: u64 = DATA_OFFSET + (4 << 20);

/// A member that works for its first `healthy_ios` I/Os and fails every one after.
#[derive(Debug)]
struct FailingMember {
    inner: MemoryMember,
    healthy_ios: u64,
    done: AtomicU64,
}

impl FailingMember {
    fn check(&self) -> io::Result<()> {
        if self.done.fetch_add(1, Ordering::Relaxed) >= self.healthy_ios {
            return Err(io::Error::other("injected member failure"));
        }
        Ok(())
    }
}

impl Member for FailingMember {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check()?;
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check()?;
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.check()?;
        self.inner.flush()
    }
    fn direct_fd(&self) -> Option<DirectFd> {
        None
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn slot(member: Box<dyn Member>) -> Option<MemberSlot> {
    Some(MemberSlot {
        member: member.into(),
        data_offset_bytes: DATA_OFFSET,
        log_offset_bytes: None,
        bitmap_offset_bytes: None,
        checksums_offset_bytes: None,
    })
}

fn raid5(members: Vec<Option<MemberSlot>>) -> ArrayDriver {
    let geo = Geometry::new(
        Level::Raid5,
        Layout::default_for(Level::Raid5),
        4,
        128,
        (MEMBER_BYTES - DATA_OFFSET) / 512,
    )
    .expect("valid geometry");
    ArrayDriver::new(geo, members, BackendChoice::Threads).expect("driver")
}

#[test]
fn in_memory_members_round_trip_and_read_degraded() {
    let members = (0..4)
        .map(|i| slot(Box::new(MemoryMember::new(format!("mem{i}"), MEMBER_BYTES))))
        .collect();
    let mut driver = raid5(members);
    let size = usize::try_from(driver.engine().array_sectors() * 512).expect("fits");
    let data = pattern(size, 3);
    // Unaligned-to-chunk pieces exercise read-modify-write and reconstruct-write.
    for (at, len) in [(0, size), (4096, 70_000 / 512 * 512), (1 << 20, 512)] {
        driver
            .write_at(&data[at..at + len], at as u64)
            .expect("write");
    }
    let mut back = vec![0u8; size];
    driver.read_at(&mut back, 0).expect("read");
    assert!(back == data, "read back what was written");
    driver.flush().expect("flush");
}

#[test]
fn a_member_failing_mid_run_goes_missing_and_data_stays_right() {
    let mut members: Vec<Option<MemberSlot>> = (0..3)
        .map(|i| slot(Box::new(MemoryMember::new(format!("mem{i}"), MEMBER_BYTES))))
        .collect();
    members.insert(
        2,
        slot(Box::new(FailingMember {
            inner: MemoryMember::new("flaky", MEMBER_BYTES),
            healthy_ios: 40,
            done: AtomicU64::new(0),
        })),
    );
    let mut driver = raid5(members);
    let size = usize::try_from(driver.engine().array_sectors() * 512).expect("fits");
    let mut want = pattern(size, 9);
    driver.write_at(&want, 0).expect("first write");
    // Keep writing and reading: the flaky member dies somewhere in here.
    for round in 0..8u8 {
        let at = usize::from(round) * 300 * 1024;
        let piece = pattern(200 * 1024, round);
        want[at..at + piece.len()].copy_from_slice(&piece);
        driver
            .write_at(&piece, at as u64)
            .expect("write survives the failure");
        let mut got = vec![0u8; size];
        driver
            .read_at(&mut got, 0)
            .expect("read survives the failure");
        assert!(got == want, "round {round}: array contents differ");
    }
    assert_eq!(
        driver.engine().member_states()[2],
        MemberState::Failed,
        "the flaky member is marked failed"
    );
    let failures = driver.take_failures();
    assert_eq!(failures.len(), 1, "one member failed, reported once");
    assert_eq!(failures[0].member, MemberIdx(2));
    assert_eq!(failures[0].name, "flaky");
}

#[test]
fn a_missing_member_from_the_start_is_tolerated() {
    let mut members: Vec<Option<MemberSlot>> = (0..4)
        .map(|i| slot(Box::new(MemoryMember::new(format!("mem{i}"), MEMBER_BYTES))))
        .collect();
    members[1] = None;
    let mut driver = raid5(members);
    let data = pattern(1 << 20, 5);
    driver.write_at(&data, 123 * 512).expect("degraded write");
    let mut back = vec![0u8; data.len()];
    driver.read_at(&mut back, 123 * 512).expect("degraded read");
    assert!(back == data);
}

/// A member that counts the I/Os that reach it.
#[derive(Debug)]
struct CountingMember {
    inner: MemoryMember,
    ios: AtomicU64,
}

impl Member for CountingMember {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.ios.fetch_add(1, Ordering::Relaxed);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.ios.fetch_add(1, Ordering::Relaxed);
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.ios.fetch_add(1, Ordering::Relaxed);
        self.inner.flush()
    }
    fn direct_fd(&self) -> Option<DirectFd> {
        None
    }
}

/// I/O the engine queued for a member before a spare took its slot goes to that
/// member, not to the spare, which holds nothing of the array yet (the engine throws
/// away what such a read returns, but bitmap or ring writes meant for the old device
/// could land on the spare after its own).
#[test]
fn io_queued_for_a_member_does_not_reach_the_spare_that_takes_its_slot() {
    let members = (0..4)
        .map(|i| slot(Box::new(MemoryMember::new(format!("mem{i}"), MEMBER_BYTES))))
        .collect();
    let mut driver = raid5(members);
    let size = usize::try_from(driver.engine().array_sectors() * 512).expect("fits");
    let data = pattern(size, 5);
    driver.write_at(&data, 0).expect("fill");
    // A read of role 0's chunk of stripe 0, queued in the engine and not yet sent
    // when role 0 fails and a spare steps in.
    let buf = driver.engine_mut().buffers_mut().alloc(16 * 1024);
    let id = driver.submit(xraid_engine::RequestKind::Read, 0, 32, Some(buf));
    let role = MemberIdx(0);
    driver.engine_mut().fail_member(role);
    let spare = std::sync::Arc::new(CountingMember {
        inner: MemoryMember::new("spare", MEMBER_BYTES),
        ios: AtomicU64::new(0),
    });
    driver.replace_member(
        role,
        MemberSlot {
            member: spare.clone(),
            data_offset_bytes: DATA_OFFSET,
            log_offset_bytes: None,
            bitmap_offset_bytes: None,
            checksums_offset_bytes: None,
        },
    );
    driver
        .engine_mut()
        .replace_member(role)
        .expect("the spare takes the role");
    driver.wait_for(id).expect("the read completes");
    let read = driver.engine().buffers().get(buf).to_vec();
    driver.engine_mut().buffers_mut().free(buf);
    assert!(
        read == data[..read.len()],
        "the read answers what was written"
    );
    assert_eq!(
        spare.ios.load(Ordering::Relaxed),
        0,
        "I/O meant for the failed member reached the spare"
    );
    // Rebuilt, the spare serves what was written.
    driver
        .engine_mut()
        .start_sync(xraid_engine::SyncKind::Recover, 0)
        .expect("recover");
    while driver.engine().sync_progress().is_some() {
        driver.step().expect("recover runs");
    }
    let mut back = vec![0u8; size];
    driver.read_at(&mut back, 0).expect("read");
    assert!(back == data, "the array reads back what was written");
    assert_eq!(driver.engine().member_states()[0], MemberState::Active);
}
