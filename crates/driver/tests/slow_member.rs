//! A member slowed on purpose (`--fault latency=`): its I/Os are held aside for the
//! latency, not slept through on the thread that drives the array, so the other
//! members' I/Os go on meanwhile and several I/Os to the slow member wait at once, as on
//! a device with a queue. Before, the driver performed them inline and the member slept
//! on the array's thread: every member waited, and N I/Os took N latencies.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xraid_driver::{ArrayDriver, BackendChoice, MemberSlot};
use xraid_engine::{RequestId, RequestKind};
use xraid_layout::{Geometry, Layout, Level};
use xraid_member::{DirectFd, FaultPlan, FaultyMember, Member, MemoryMember};

const DATA_OFFSET: u64 = 1 << 20;
const MEMBER_BYTES: u64 = DATA_OFFSET + (4 << 20);
/// The RAID-0's chunk: array chunk 0 is role 0's, chunks 1 and 3 are role 1's.
const CHUNK_SECTORS: u32 = 128;
const CHUNK_BYTES: u64 = CHUNK_SECTORS as u64 * 512;
/// Long beside an in-memory read, so that waiting on it would show in the order of
/// what happened, not only on the clock.
const LATENCY: Duration = Duration::from_secs(2);

/// What the driver asked of the slow member, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// Asked how long an I/O sent now would take (the I/O is being sent).
    HoldFor,
    /// Performed a read.
    Read,
}

/// The slow member, with a log of the driver's calls to it.
#[derive(Debug)]
struct Traced {
    inner: FaultyMember,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Traced {
    fn note(&self, call: Call) {
        self.calls
            .lock()
            .expect("no test thread panicked")
            .push(call);
    }
}

impl Member for Traced {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.note(Call::Read);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn direct_fd(&self) -> Option<DirectFd> {
        None
    }
    fn hold_for(&self) -> Option<Duration> {
        self.note(Call::HoldFor);
        self.inner.hold_for()
    }
}

/// A RAID-0 of two in-memory members, each's data area filled with `0x10 + role`,
/// role 1 slowed by [`LATENCY`]; and the log of the driver's calls to role 1.
fn raid0_with_role_1_slow() -> (ArrayDriver, Arc<Mutex<Vec<Call>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let members = (0..2u8)
        .map(|role| {
            let inner = MemoryMember::new(format!("mem{role}"), MEMBER_BYTES);
            let fill =
                vec![0x10 + role; usize::try_from(MEMBER_BYTES - DATA_OFFSET).expect("fits")];
            inner.write_at(&fill, DATA_OFFSET).expect("memory");
            let member: Box<dyn Member> = if role == 1 {
                let plan = FaultPlan {
                    latency: Some(LATENCY),
                    ..FaultPlan::default()
                };
                Box::new(Traced {
                    inner: FaultyMember::new(Box::new(inner), plan),
                    calls: calls.clone(),
                })
            } else {
                Box::new(inner)
            };
            Some(MemberSlot {
                member: member.into(),
                data_offset_bytes: DATA_OFFSET,
                log_offset_bytes: None,
                bitmap_offset_bytes: None,
                checksums_offset_bytes: None,
            })
        })
        .collect();
    let geo = Geometry::new(
        Level::Raid0,
        Layout::default_for(Level::Raid0),
        2,
        CHUNK_SECTORS,
        (MEMBER_BYTES - DATA_OFFSET) / 512,
    )
    .expect("valid geometry");
    let driver = ArrayDriver::new(geo, members, BackendChoice::Threads).expect("driver");
    (driver, calls)
}

/// Submits a read of array chunk `chunk`, into a buffer the reply hands back.
fn read_chunk(driver: &mut ArrayDriver, chunk: u64) -> (RequestId, xraid_engine::BufId) {
    let len = usize::try_from(CHUNK_BYTES).expect("fits");
    let buf = driver.engine_mut().buffers_mut().alloc(len);
    let sectors = CHUNK_BYTES / 512;
    let id = driver.submit(RequestKind::Read, chunk * sectors, sectors, Some(buf));
    (id, buf)
}

/// Pumps until one reply arrives; checks that it succeeded and read `fill` throughout.
fn next_reply(
    driver: &mut ArrayDriver,
    reads: &[(RequestId, xraid_engine::BufId, u8)],
) -> RequestId {
    loop {
        if let Some(reply) = driver.next_reply() {
            reply.result.expect("the read succeeds");
            let (_, buf, fill) = reads
                .iter()
                .find(|(id, _, _)| *id == reply.id)
                .expect("a reply to a read of ours");
            let data = driver.engine().buffers().get(*buf);
            assert!(
                data.iter().all(|b| b == fill),
                "the read returned its member's bytes"
            );
            return reply.id;
        }
        driver.pump(true).expect("pump");
    }
}

#[test]
fn a_read_of_a_fast_member_does_not_wait_for_a_slow_ones_latency() {
    let (mut driver, _calls) = raid0_with_role_1_slow();
    let start = Instant::now();
    // The slow member's read goes first: the fast one must overtake it.
    let (slow, slow_buf) = read_chunk(&mut driver, 1);
    let (fast, fast_buf) = read_chunk(&mut driver, 0);
    let reads = [(slow, slow_buf, 0x11), (fast, fast_buf, 0x10)];
    assert_eq!(
        next_reply(&mut driver, &reads),
        fast,
        "the fast member's read answers first, the slow one's still waiting"
    );
    assert_eq!(next_reply(&mut driver, &reads), slow);
    assert!(
        start.elapsed() >= LATENCY,
        "the slow member's read waited out its latency"
    );
    assert!(!driver.io_in_flight());
}

#[test]
fn reads_of_a_slow_member_wait_out_their_latency_together() {
    let (mut driver, calls) = raid0_with_role_1_slow();
    let start = Instant::now();
    let (a, a_buf) = read_chunk(&mut driver, 1);
    let (b, b_buf) = read_chunk(&mut driver, 3);
    let reads = [(a, a_buf, 0x11), (b, b_buf, 0x11)];
    let first = next_reply(&mut driver, &reads);
    let second = next_reply(&mut driver, &reads);
    assert_eq!([first, second], [a, b], "answered in order");
    assert!(
        start.elapsed() >= LATENCY,
        "the slow member's reads waited out its latency"
    );
    // Both reads were sent (and began their wait) before either was performed: the
    // second did not queue behind the first's latency.
    let calls = calls.lock().expect("no test thread panicked").clone();
    assert_eq!(
        calls,
        [Call::HoldFor, Call::HoldFor, Call::Read, Call::Read],
        "both were held at once, then performed"
    );
}
