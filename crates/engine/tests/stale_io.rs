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

/// Eight reads of `len` sectors each, one after the other from the start, in flight
/// when a spare steps in for `member`: the ones that fail or answer other than `data`.
fn reads_in_flight_as_a_spare_steps_in(
    array: &mut SimArray,
    data: &[u8],
    len: u64,
    member: MemberIdx,
) -> Vec<usize> {
    let reads: Vec<_> = (0..8u64).map(|i| array.start_read(i * len, len)).collect();
    spare_steps_in(array, member);
    let replies = array.run();
    let bytes = len as usize * SECTOR;
    reads
        .into_iter()
        .enumerate()
        .filter(|&(i, (id, buf))| {
            let ok = replies.iter().any(|r| r.id == id && r.result.is_ok());
            !ok || array.engine.buffers().get(buf) != &data[i * bytes..(i + 1) * bytes]
        })
        .map(|(i, _)| i)
        .collect()
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
        let member = MemberIdx(u16::try_from(seed % 2).expect("0 or 1"));
        for i in reads_in_flight_as_a_spare_steps_in(&mut array, &data, 32, member) {
            wrong.push((seed, i));
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
        for i in reads_in_flight_as_a_spare_steps_in(&mut array, &data, 48, MemberIdx(1)) {
            wrong.push((seed, i));
        }
    }
    assert!(
        wrong.is_empty(),
        "reads answered wrong (seed, read): {wrong:?}"
    );
}

/// Random stories: client reads and writes in flight (and a resync or a recover) when
/// a spare steps in for a member, at a random point, over and over; every read must
/// return what was last written, and the array must scrub clean at the end. Each
/// seed picks a level (1, 5, 6, 10), a width and a chunk (`XRAID_SEEDS=<n>` runs
/// more or fewer than 300).
#[test]
fn spares_stepping_in_under_random_load_lose_and_corrupt_nothing() {
    let mut bad = Vec::new();
    let seeds: u64 = std::env::var("XRAID_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    for seed in 0..seeds {
        if let Err(e) = spare_story(seed) {
            bad.push((seed, e));
        }
    }
    assert!(bad.is_empty(), "(seed, what): {bad:?}");
}

fn spare_story(seed: u64) -> Result<(), String> {
    let mut rng = xraid_engine::sim::SimRng::new(seed ^ 0x5ba7e);
    let level = [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10][rng.below(4) as usize];
    let disks = level.min_members().max(2) + rng.below(3) as u16;
    let chunk = 8u32 << rng.below(2);
    let geo = Geometry::new(
        level,
        Layout::default_for(level),
        disks,
        chunk,
        u64::from(chunk) * 8,
    )
    .map_err(|e| e.to_string())?;
    let mut array = SimArray::new(geo, seed);
    array.engine.set_config(xraid_engine::EngineConfig {
        log_sectors: if level.has_parity() { 256 } else { 0 },
        ..xraid_engine::EngineConfig::default()
    });
    array.stale_io_to_newcomer = true;
    array.run();
    let sectors = geo.array_sectors();
    let mut data = vec![0u8; sectors as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).map_err(|e| e.to_string())?;
    array.flush().map_err(|e| e.to_string())?;
    for round in 0..12 {
        if rng.below(3) == 0 && array.engine.sync_progress().is_none() {
            array
                .engine
                .start_sync(SyncKind::Repair, 0)
                .map_err(|e| e.to_string())?;
        }
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        let mut taken: Vec<(u64, u64)> = Vec::new();
        for _ in 0..1 + rng.below(6) {
            let len = 1 + rng.below(24);
            let at = rng.below(sectors - len);
            if taken.iter().any(|&(s, n)| at < s + n && s < at + len) {
                continue;
            }
            taken.push((at, len));
            if rng.below(2) == 0 {
                reads.push((array.start_read(at, len), at));
            } else {
                let mut new = vec![0u8; len as usize * SECTOR];
                array.rng().fill(&mut new);
                writes.push((array.start_write(at, &new), at, new));
            }
        }
        // Some I/O out, then the spare steps in, when the array is whole.
        for _ in 0..rng.below(12) {
            array.step();
        }
        if array.engine.is_whole() {
            let m = MemberIdx(rng.below(u64::from(disks)) as u16);
            spare_steps_in(&mut array, m);
        }
        let replies = array.run();
        let result = |id| {
            replies
                .iter()
                .find(|r| r.id == id)
                .map(|r| r.result.clone())
                .ok_or(format!("round {round}: no reply"))
        };
        for ((id, buf), at, new) in writes {
            result(id)?.map_err(|e| format!("round {round}: write at {at}: {e}"))?;
            array.engine.buffers_mut().free(buf);
            let from = at as usize * SECTOR;
            data[from..from + new.len()].copy_from_slice(&new);
        }
        for ((id, buf), at) in reads {
            result(id)?.map_err(|e| format!("round {round}: read at {at}: {e}"))?;
            let got = array.engine.buffers().get(buf).to_vec();
            array.engine.buffers_mut().free(buf);
            let from = at as usize * SECTOR;
            if got != data[from..from + got.len()] {
                return Err(format!("round {round}: read at {at} answered wrong"));
            }
        }
        if array.engine.sync_progress().is_none() && !array.engine.is_whole() {
            array
                .engine
                .start_sync(SyncKind::Recover, 0)
                .map_err(|e| e.to_string())?;
        }
    }
    while array.engine.sync_progress().is_some() {
        array.run_sync();
    }
    if !array.engine.is_whole() {
        array
            .engine
            .start_sync(SyncKind::Recover, 0)
            .map_err(|e| e.to_string())?;
        array.run_sync();
    }
    let got = array.read(0, sectors).map_err(|e| e.to_string())?;
    if got != data {
        return Err("the array reads back wrong at the end".into());
    }
    array.take_events();
    array
        .engine
        .start_sync(SyncKind::Check, 0)
        .map_err(|e| e.to_string())?;
    array.run_sync();
    match mismatches_of(array.take_events(), SyncKind::Check) {
        Some(0) => Ok(()),
        other => Err(format!("the final check found {other:?} mismatched units")),
    }
}
