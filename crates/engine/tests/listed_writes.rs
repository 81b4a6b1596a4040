//! Writes over rows bad block logs list, found by a review (each failed then):
//! listings a write made good but the driver has not recorded yet (a power cut brings
//! them back, and a later write's log entry must carry those rows), a whole-band write
//! whose entry would not fit the ring, and banding around listings not aligned to the
//! checksum blocks.

mod common;
use common::{logged_array, SECTOR};

use xraid_engine::sim::SimArray;
use xraid_engine::{EngineConfig, EngineError, Event, MemberIdx, SyncKind};
use xraid_format::BadBlocks;
use xraid_layout::{Geometry, Layout, Level};

fn list_rows_of_stripe0(array: &mut SimArray, role: MemberIdx) {
    let geo = *array.engine.geometry();
    let rows = geo.member_sector(0, 0)..geo.member_sector(0, 16);
    let mut l = BadBlocks::new();
    l.add(rows);
    let slot = array.engine.device_slot(role);
    array.engine.set_bad_block_log(slot, l, 512);
}

/// Checks every sector of stripe 0 (data chunks `chunks`, 16 sectors each) against
/// the contents it may hold: one of `allowed`, or a loud error.
fn check(array: &mut SimArray, chunks: usize, allowed: &[&[u8]]) -> Result<(), String> {
    for s in 0..(chunks * 16) {
        match array.read(s as u64, 1) {
            Ok(got) => {
                if !allowed
                    .iter()
                    .any(|a| a[s * SECTOR..(s + 1) * SECTOR] == got[..])
                {
                    return Err(format!("sector {s} holds data never written there"));
                }
            }
            Err(EngineError::Unreadable { .. } | EngineError::DataLost { .. }) => {}
            Err(e) => return Err(format!("sector {s}: {e}")),
        }
    }
    Ok(())
}

/// RAID-6 of 6 (4 data chunks a stripe). Stripe 0's data chunks 1 and 3 and its P are
/// listed (past the redundancy). W1, a write over the whole stripe, takes them (ec164f1)
/// and makes them good in memory; the driver has not recorded that yet (its record
/// waits for a flush, and the engine goes on meanwhile: `defer_records`). W1 is made
/// durable (the record's own flush). W2, a write over data chunks 0 and 1, runs and
/// is cut off by the power before the record. The restart finds chunk 1 and P listed
/// again; W2's entry does not carry chunk 1 (it was unlisted when W2 was planned), so
/// the replay works chunk 1 out "from parity as the cut left it" (Q) — with chunk 0 and
/// Q from different writes, that is data never written, which the replay then writes
/// into P and Q, and which reads of chunk 1 return.
#[test]
fn unrecorded_clear_then_a_covering_write_and_a_cut() {
    let mut wrong = Vec::new();
    let mut runs = 0;
    for seed in 0..200u64 {
        let (mut array, old) = logged_array(Level::Raid6, 6, 5000 + seed);
        array.enable_bad_block_logs(512);
        let map = array.engine.geometry().stripe_map(0);
        for role in [map.data_member(1), map.data_member(3), map.p()] {
            list_rows_of_stripe0(&mut array, role);
        }
        array.defer_records = true;
        let mut w1 = old.clone();
        array.rng().fill(&mut w1[..64 * SECTOR]);
        array
            .write(0, &w1[..64 * SECTOR])
            .expect("a write over the whole band goes through (ec164f1)");
        array.flush().expect("flush");
        assert!(array.engine.bad_blocks(map.p()).is_empty());
        assert!(!array.engine.durable_bad_blocks(map.p()).is_empty());
        let mut w2 = w1.clone();
        array.rng().fill(&mut w2[..32 * SECTOR]);
        let steps = array.rng().below(30);
        array.start_write(0, &w2[..32 * SECTOR]);
        for _ in 0..steps {
            if !array.step() {
                break;
            }
        }
        array.power_cut_now();
        array.defer_records = false;
        array.run();
        runs += 1;
        if let Err(e) = check(&mut array, 4, &[&old, &w1, &w2]) {
            wrong.push((seed, steps, e));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {runs} cuts: (seed, steps, what) {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(8)]
    );
}

/// The same race without ec164f1: RAID-5 of 4, stripe 0's data chunk 1 listed (within
/// the redundancy). W1, a write to chunk 2, rebuilds chunk 1's rows and writes them
/// (read-error correction): the listing is made good in memory, not recorded. W2 over
/// chunks 0 and 1 is cut off by the power before the record.
#[test]
fn unrecorded_repair_then_a_covering_write_and_a_cut() {
    let mut wrong = Vec::new();
    let mut runs = 0;
    for seed in 0..200u64 {
        let (mut array, old) = logged_array(Level::Raid5, 4, 7000 + seed);
        array.enable_bad_block_logs(512);
        let map = array.engine.geometry().stripe_map(0);
        list_rows_of_stripe0(&mut array, map.data_member(1));
        array.defer_records = true;
        let mut w1 = old.clone();
        array.rng().fill(&mut w1[32 * SECTOR..48 * SECTOR]);
        array
            .write(32, &w1[32 * SECTOR..48 * SECTOR])
            .expect("write chunk 2");
        array.flush().expect("flush");
        assert!(array.engine.bad_blocks(map.data_member(1)).is_empty());
        assert!(!array
            .engine
            .durable_bad_blocks(map.data_member(1))
            .is_empty());
        let mut w2 = w1.clone();
        array.rng().fill(&mut w2[..32 * SECTOR]);
        let steps = array.rng().below(30);
        array.start_write(0, &w2[..32 * SECTOR]);
        for _ in 0..steps {
            if !array.step() {
                break;
            }
        }
        array.power_cut_now();
        array.defer_records = false;
        array.run();
        runs += 1;
        if let Err(e) = check(&mut array, 3, &[&old, &w1, &w2]) {
            wrong.push((seed, steps, e));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {runs} cuts: (seed, steps, what) {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(8)]
    );
}

/// A whole-band write whose log entry cannot fit the ring: RAID-5 of 6 (5 data
/// chunks), the ring at the driver's minimum (twice the largest entry, plus 8), stripe
/// 0's data chunks 0..4 listed (refusals, say) and chunk 4's member missing. The entry
/// would carry 5 chunks of rows (4 listed + 1 missing) — more than the bound
/// `log_entry_max_sectors` assumes (2 per parity member) — so `build_log_entry` gives
/// up and the write goes out unlogged. Cut off by the power once the listed members
/// took it (their lists recorded as made good) and before P did, the missing chunk
/// is rebuilt from the old P and the new data: data never written.
#[test]
fn a_whole_band_write_too_big_to_log_never_goes_unlogged() {
    let mut wrong = Vec::new();
    let mut runs = 0;
    for seed in 0..300u64 {
        let level = Level::Raid5;
        let geo = Geometry::new(level, Layout::default_for(level), 6, 16, 256).expect("geometry");
        let entry = xraid_engine::log_entry_max_sectors(geo.data_disks(), 16, 1);
        let mut array = SimArray::new(geo, 9300 + seed);
        array.engine.set_config(EngineConfig {
            log_sectors: 2 * entry + 8,
            ..EngineConfig::default()
        });
        array.run();
        let mut old = vec![0u8; geo.array_sectors() as usize * SECTOR];
        array.rng().fill(&mut old);
        array.write(0, &old).expect("fill");
        array.flush().expect("flush");
        array.enable_bad_block_logs(512);
        let map = geo.stripe_map(0);
        for i in 0..4 {
            list_rows_of_stripe0(&mut array, map.data_member(i));
        }
        let gone = map.data_member(4);
        array.kill_member(gone);
        array.engine.fail_member(gone);
        array.run();
        let mut new = old.clone();
        array.rng().fill(&mut new[..80 * SECTOR]);
        let steps = array.rng().below(12);
        array.start_write(0, &new[..80 * SECTOR]);
        for _ in 0..steps {
            if !array.step() {
                break;
            }
        }
        array.power_cut_now();
        array.run();
        runs += 1;
        if let Err(e) = check(&mut array, 5, &[&old, &new]) {
            wrong.push((seed, steps, e));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {runs} cuts: (seed, steps, what) {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(6)]
    );
}

/// 373c2a4, integrity mode (no stripe log: `consistency = resync`): stripe 0's P and
/// its data chunk 0 each list member rows 3..5 (md's log keeps 512-byte ranges: say a
/// log that came with the disks). A crash leaves P torn in rows 8..16, blocks where
/// nothing is listed. `listing_cuts` rounds a listing's end *down* to its block (5 ->
/// 0), so no cut falls at 8: the resync's unit is one band 0..16, past the redundancy
/// "only because of listings" — a recorded loss, not a new one — and since 373c2a4
/// the resync completes over it (resync_owed cleared, bitmap bits cleared), leaving
/// rows 8..16 torn though nothing lists them. Data chunk 1's member then fails: its
/// rows 8..16 are rebuilt from the torn P, silently wrong.
#[test]
fn an_unaligned_listing_does_not_hide_torn_rows_from_the_resync() {
    let level = Level::Raid5;
    let geo = Geometry::new(level, Layout::default_for(level), 4, 16, 256).expect("geometry");
    let mut array = SimArray::new(geo, 42);
    array.enable_integrity();
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    array.flush().expect("flush");
    array.enable_bad_block_logs(512);
    let map = geo.stripe_map(0);
    let (p, d0, d1) = (map.p(), map.data_member(0), map.data_member(1));
    for m in [p, d0] {
        let mut l = BadBlocks::new();
        l.add(3..5);
        array.engine.set_bad_block_log(m, l, 512);
    }
    // P's rows 8..16 torn by the crash.
    for b in &mut array.members[p.index()].data[8 * SECTOR..16 * SECTOR] {
        *b = !*b;
    }
    array.power_cut();
    array.take_events();
    array
        .engine
        .start_sync(SyncKind::Resync, 0)
        .expect("resync");
    array.run_sync();
    let finished = array
        .take_events()
        .into_iter()
        .find_map(|e| match e {
            Event::SyncFinished {
                completed,
                unrecoverable,
                ..
            } => Some((completed, unrecoverable)),
            _ => None,
        })
        .expect("the resync ended");
    let owed = array.engine.resync_owed();
    array.kill_member(d1);
    array.engine.fail_member(d1);
    array.run();
    // Data chunk 1 of stripe 0, rows 8..16: array sectors 24..32.
    let got = array.read(24, 8);
    assert!(
        got.as_ref()
            .map_or(true, |got| got[..] == data[24 * SECTOR..32 * SECTOR]),
        "resync (completed, unrecoverable) = {finished:?}, still owed {owed}: rows 8..16 of \
         data chunk 1 rebuilt from torn parity the resync skipped"
    );
}
