//! A member that stops answering (`--fault stall-after=`): its I/Os are held aside, not
//! waited out on the thread that drives the array, so the engine's clock runs on, the
//! stalled member (and no other) is failed at the stall timeout, and what waited on it
//! goes on around it. Before, the driver slept through each stalled I/O: the array's
//! thread hung for the whole stall, once per I/O.

use std::time::{Duration, Instant};

use xraid_driver::{ArrayDriver, BackendChoice, MemberSlot};
use xraid_engine::{FailReason, MemberState, Nanos, RequestKind};
use xraid_layout::{Geometry, Layout, Level, MemberIdx};
use xraid_member::{FaultPlan, FaultyMember, Member, MemoryMember};

const DATA_OFFSET: u64 = 1 << 20;
const MEMBER_BYTES: u64 = DATA_OFFSET + (4 << 20);
/// Far longer than the test may take: a driver that waits a stall out fails the test.
const LONG_STALL: Duration = Duration::from_secs(20);

fn slot(member: Box<dyn Member>) -> Option<MemberSlot> {
    Some(MemberSlot {
        member: member.into(),
        data_offset_bytes: DATA_OFFSET,
        log_offset_bytes: None,
        bitmap_offset_bytes: None,
        checksums_offset_bytes: None,
    })
}

/// A RAID-5 of four in-memory members whose role 2 stalls for `stall` after its first
/// `after` I/Os, driven with the engine's stall timeout at `timeout`.
fn raid5_with_role_2_stalling(after: u64, stall: Duration, timeout: Duration) -> ArrayDriver {
    let members = (0..4)
        .map(|i| {
            let inner = Box::new(MemoryMember::new(format!("mem{i}"), MEMBER_BYTES));
            if i != 2 {
                return slot(inner);
            }
            let plan = FaultPlan {
                stall_after: Some(after),
                stall_for: stall,
                ..FaultPlan::default()
            };
            slot(Box::new(FaultyMember::new(inner, plan)))
        })
        .collect();
    let geo = Geometry::new(
        Level::Raid5,
        Layout::default_for(Level::Raid5),
        4,
        128,
        (MEMBER_BYTES - DATA_OFFSET) / 512,
    )
    .expect("valid geometry");
    let mut driver = ArrayDriver::new(geo, members, BackendChoice::Threads).expect("driver");
    let engine = driver.engine_mut();
    let config = engine.config();
    engine.set_config(xraid_engine::EngineConfig {
        stall_timeout: Nanos(u64::try_from(timeout.as_nanos()).expect("fits")),
        ..config
    });
    driver
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

/// Runs `kind` requests of `piece` bytes over the first `pieces.len()` pieces of the
/// array at once (writes from `pieces`, reads into them), as a server's loop does:
/// pumping and handing the engine the time until every one has replied (within
/// `limit`).
fn run_all(driver: &mut ArrayDriver, kind: RequestKind, pieces: &mut [Vec<u8>], limit: Duration) {
    let mut out = Vec::new();
    for (i, data) in pieces.iter().enumerate() {
        let buf = driver.engine_mut().buffers_mut().alloc(data.len());
        if kind == RequestKind::Write {
            driver
                .engine_mut()
                .buffers_mut()
                .get_mut(buf)
                .copy_from_slice(data);
        }
        let sectors = data.len() as u64 / 512;
        let id = driver.submit(kind, i as u64 * sectors, sectors, Some(buf));
        out.push((id, buf, i));
    }
    let start = Instant::now();
    while !out.is_empty() {
        assert!(
            start.elapsed() < limit,
            "requests still waiting after {:?}: the stall was waited out",
            start.elapsed()
        );
        driver.pump(true).expect("pump");
        driver.tick();
        while let Some(reply) = driver.next_reply() {
            let at = out
                .iter()
                .position(|(id, _, _)| *id == reply.id)
                .expect("a reply to a request of ours");
            let (_, buf, i) = out.swap_remove(at);
            reply.result.expect("the request succeeds around the stall");
            if kind == RequestKind::Read {
                pieces[i].copy_from_slice(driver.engine().buffers().get(buf));
            }
            driver.engine_mut().buffers_mut().free(buf);
        }
    }
}

#[test]
fn a_stalled_member_is_failed_by_the_clock_and_nothing_waits_out_its_stall() {
    let timeout = Duration::from_millis(300);
    let mut driver = raid5_with_role_2_stalling(8, LONG_STALL, timeout);
    let start = Instant::now();
    let want: Vec<Vec<u8>> = (0..24u8).map(|i| pattern(64 << 10, i)).collect();
    let mut pieces = want.clone();
    run_all(&mut driver, RequestKind::Write, &mut pieces, LONG_STALL / 2);
    run_all(&mut driver, RequestKind::Read, &mut pieces, LONG_STALL / 2);
    assert!(pieces == want, "what was written reads back");
    assert!(
        start.elapsed() < timeout * 10,
        "took {:?}: the stall held the array's thread",
        start.elapsed()
    );
    assert_eq!(
        driver.engine().member_states()[2],
        MemberState::Failed,
        "the stalled member is failed"
    );
    let failures = driver.take_failures();
    assert_eq!(
        failures.len(),
        1,
        "only the stalled member fails: {failures:?}"
    );
    assert_eq!(failures[0].member, MemberIdx(2));
    assert_eq!(failures[0].reason, FailReason::Stalled);
    assert!(
        !driver.io_in_flight(),
        "nothing stays held once it is failed"
    );
}

#[test]
fn a_short_stall_answers_late_and_fails_nobody() {
    // A stall of 200 ms against a timeout of 20 s: slow, not failed.
    let stall = Duration::from_millis(200);
    let mut driver = raid5_with_role_2_stalling(2, stall, Duration::from_secs(20));
    let start = Instant::now();
    let want: Vec<Vec<u8>> = (0..6u8).map(|i| pattern(64 << 10, i + 40)).collect();
    let mut pieces = want.clone();
    run_all(
        &mut driver,
        RequestKind::Write,
        &mut pieces,
        Duration::from_secs(10),
    );
    run_all(
        &mut driver,
        RequestKind::Read,
        &mut pieces,
        Duration::from_secs(10),
    );
    assert!(pieces == want, "what was written reads back");
    assert!(start.elapsed() >= stall, "the stalled I/Os answered late");
    assert!(
        driver.take_failures().is_empty(),
        "a late answer fails nobody"
    );
    assert!(
        driver
            .engine()
            .member_states()
            .iter()
            .all(|s| *s == MemberState::Active),
        "every member serves on"
    );
}
