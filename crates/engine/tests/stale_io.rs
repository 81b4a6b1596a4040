//! I/O sent to a member's device before a newcomer took its slot (a hot spare
//! stepping into a failed role) and answered after. The driver sends what it has not
//! yet submitted to the kernel to whichever device is in the slot then, so such a
//! read may return the newcomer's blocks, which hold nothing of the array yet. Found
//! by `xraid serve`: a resync running when a spare stepped in read the spare's zeros
//! as the failed member's data, "repaired" 16 stripes' parity to them, and the
//! recover then rebuilt the member's data from that parity, wrong, without an error.

mod common;
use common::{logged_array, SECTOR};

use xraid_engine::sim::SimArray;
use xraid_engine::{Event, MemberIdx, SyncKind};
use xraid_layout::{Geometry, Layout, Level};

/// Fails `member` and puts a new device full of garbage in its slot, with I/O in
/// flight to the old one going to the new one.
fn spare_steps_in(array: &mut SimArray, member: MemberIdx) {
    array.stale_io_to_newcomer = true;
    array.engine.fail_member(member);
    array.return_member(member, true).expect("a new device");
}

fn mismatches_of(events: Vec<Event>, kind: SyncKind) -> Option<u64> {
    events.into_iter().find_map(|e| match e {
        Event::SyncFinished {
            kind: k,
            mismatches,
            ..
        } if k == kind => Some(mismatches),
        _ => None,
    })
}

#[test]
fn a_resync_does_not_read_a_newcomer_for_the_member_it_replaced() {
    let mut bad = Vec::new();
    for seed in 0..16u64 {
        let (mut array, data) = logged_array(Level::Raid5, 4, 3500 + seed);
        array.power_cut();
        array.run();
        array
            .engine
            .start_sync(SyncKind::Resync, 0)
            .expect("resync");
        assert!(array.run_sync_until(2));
        spare_steps_in(&mut array, MemberIdx(2));
        array.run_sync();
        let resync = mismatches_of(array.take_events(), SyncKind::Resync);
        array
            .engine
            .start_sync(SyncKind::Recover, 0)
            .expect("recover");
        array.run_sync();
        let got = array
            .read(0, data.len() as u64 / SECTOR as u64)
            .map(|got| got == data);
        if resync != Some(0) || got != Ok(true) {
            bad.push((seed, resync, got.map_err(|e| e.to_string())));
        }
    }
    assert!(
        bad.is_empty(),
        "(seed, resync mismatches, read back right): {bad:?}"
    );
}

/// Client reads of a mirror in flight when the copy they went to is replaced: they
/// are answered from the copy that holds the data, not from the newcomer.
#[test]
fn client_reads_in_flight_are_not_answered_from_a_newcomer() {
    let mut wrong = Vec::new();
    for seed in 0..16u64 {
        let geo = Geometry::new(Level::Raid1, Layout::default_for(Level::Raid1), 2, 16, 256)
            .expect("geometry");
        let mut array = SimArray::new(geo, 3700 + seed);
        array.run();
        let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
        array.rng().fill(&mut data);
        array.write(0, &data).expect("fill");
        array.flush().expect("flush");
        let reads: Vec<_> = (0..8u64).map(|i| array.start_read(i * 32, 32)).collect();
        spare_steps_in(
            &mut array,
            MemberIdx(u16::try_from(seed % 2).expect("0 or 1")),
        );
        let replies = array.run();
        for (i, (id, buf)) in reads.into_iter().enumerate() {
            let ok = replies.iter().any(|r| r.id == id && r.result.is_ok());
            let at = i * 32 * SECTOR;
            let got = array.engine.buffers().get(buf);
            if !ok || got != &data[at..at + 32 * SECTOR] {
                wrong.push((seed, i));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "reads answered wrong (seed, read): {wrong:?}"
    );
}

/// The same for a RAID-5 client read that has to read the member replaced.
#[test]
fn stripe_reads_in_flight_are_not_answered_from_a_newcomer() {
    let mut wrong = Vec::new();
    for seed in 0..16u64 {
        let (mut array, data) = logged_array(Level::Raid5, 4, 3800 + seed);
        let reads: Vec<_> = (0..8u64).map(|i| array.start_read(i * 48, 48)).collect();
        spare_steps_in(&mut array, MemberIdx(1));
        let replies = array.run();
        for (i, (id, buf)) in reads.into_iter().enumerate() {
            let ok = replies.iter().any(|r| r.id == id && r.result.is_ok());
            let at = i * 48 * SECTOR;
            let got = array.engine.buffers().get(buf);
            if !ok || got != &data[at..at + 48 * SECTOR] {
                wrong.push((seed, i));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "reads answered wrong (seed, read): {wrong:?}"
    );
}
