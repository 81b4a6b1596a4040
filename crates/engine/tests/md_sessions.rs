//! Random stories of an array handed between xraid (with the stripe log) and md,
//! which knows nothing of the rings. xraid writes (some flushed, some not, the last
//! ones cut off by the power with their entries on the rings); md then runs the
//! array from what the members hold: it resyncs it (parity from the data), writes
//! blocks of its own (each whole: data and parity), and stops cleanly or is cut off
//! after its writes; xraid opens it again, told that the superblocks are not its own
//! (`Engine::superblocks_unstamped`), and at one open in two a member has died
//! meanwhile. After each open every block must read back as md left it, none
//! refused (md left parity agreeing everywhere), also through parity for the dead
//! member; once that member is rebuilt, a check finds nothing.
//!
//! Before 2026-11-29 the open replayed xraid's old entries over md's writes, and the
//! dead member's rows read back wrong. `XRAID_SEEDS=<n> XRAID_SEEDS_FROM=<i>`, or
//! `XRAID_SEED=<seed>` to replay one.

mod common;
use common::{check_mismatches, rebuild_on_a_new_device, SECTOR};

use xraid_engine::sim::{SimArray, SimRng};
use xraid_engine::MemberIdx;
use xraid_layout::{Geometry, Layout, Level};

/// md's session over the members as the power cut left them: a resync, `writes`
/// whole-block writes of its own (data and parity, as a completed write leaves them),
/// and, with `dying`, that member dead at xraid's next open. Returns the array's
/// contents as md left them.
fn md_session(
    a: &mut SimArray,
    rng: &mut SimRng,
    writes: u64,
    dying: Option<MemberIdx>,
) -> Vec<u8> {
    a.engine.superblocks_unstamped();
    let geo = *a.engine.geometry();
    let chunk = usize::try_from(geo.chunk_sectors()).expect("small") * SECTOR;
    for stripe in 0..geo.stripes() {
        let map = geo.stripe_map(stripe);
        let at = usize::try_from(geo.member_sector(stripe, 0)).expect("small") * SECTOR;
        let mut p = vec![0u8; chunk];
        for d in 0..geo.data_disks() {
            let m = map.data_member(d).index();
            for (x, y) in p.iter_mut().zip(&a.members[m].data[at..at + chunk]) {
                *x ^= y;
            }
        }
        a.members[map.p().index()].data[at..at + chunk].copy_from_slice(&p);
    }
    for _ in 0..writes {
        let stripe = rng.below(geo.stripes());
        let map = geo.stripe_map(stripe);
        let d = u16::try_from(rng.below(u64::from(geo.data_disks()))).expect("small");
        let lo = rng.below(u64::from(geo.chunk_sectors()));
        let hi = lo + 1 + rng.below(u64::from(geo.chunk_sectors()) - lo);
        let from = usize::try_from(geo.member_sector(stripe, 0) + lo).expect("small") * SECTOR;
        let to = usize::try_from(geo.member_sector(stripe, 0) + hi).expect("small") * SECTOR;
        let mut new = vec![0u8; to - from];
        rng.fill(&mut new);
        let (m, p) = (map.data_member(d).index(), map.p().index());
        for (i, &byte) in new.iter().enumerate() {
            let old = a.members[m].data[from + i];
            a.members[p].data[from + i] ^= old ^ byte;
        }
        a.members[m].data[from..to].copy_from_slice(&new);
    }
    let contents = array_contents(a, &geo);
    if let Some(dying) = dying {
        a.kill_member(dying);
        a.engine.fail_member(dying);
    }
    contents
}

/// The array's contents as its data members hold them.
fn array_contents(a: &SimArray, geo: &Geometry) -> Vec<u8> {
    let chunk = u64::from(geo.chunk_sectors());
    let mut out = Vec::new();
    for stripe in 0..geo.stripes() {
        let map = geo.stripe_map(stripe);
        for d in 0..geo.data_disks() {
            let at = usize::try_from(geo.member_sector(stripe, 0)).expect("small") * SECTOR;
            let len = usize::try_from(chunk).expect("small") * SECTOR;
            out.extend_from_slice(&a.members[map.data_member(d).index()].data[at..at + len]);
        }
    }
    out
}

/// Reads the whole array a chunk at a time: the chunks that read back wrong, and
/// those refused.
fn compare(array: &mut SimArray, want: &[u8]) -> (Vec<u64>, Vec<u64>) {
    let chunk = u64::from(array.engine.geometry().chunk_sectors());
    let (mut wrong, mut refused) = (Vec::new(), Vec::new());
    for first in (0..array.engine.geometry().array_sectors()).step_by(chunk as usize) {
        let at = usize::try_from(first).expect("small") * SECTOR;
        match array.read(first, chunk) {
            Ok(got) if got[..] == want[at..at + got.len()] => {}
            Ok(_) => wrong.push(first),
            Err(_) => refused.push(first),
        }
    }
    (wrong, refused)
}

fn story(seed: u64) -> Result<(), String> {
    let mut rng = SimRng::new(seed);
    let level = if rng.below(4) == 0 {
        Level::Raid4
    } else {
        Level::Raid5
    };
    let disks = 3 + u16::try_from(rng.below(3)).expect("small");
    let geo = Geometry::new(level, Layout::default_for(level), disks, 16, 256).expect("geometry");
    let (mut array, _) = common::filled_array_on(geo, seed, 256);
    let sectors = geo.array_sectors();
    for round in 0..4 {
        // xraid's session: writes, the last of them not flushed when the power fails.
        for _ in 0..1 + rng.below(12) {
            let at = rng.below(sectors);
            let len = 1 + rng.below(40.min(sectors - at));
            let mut data = vec![0u8; usize::try_from(len).expect("small") * SECTOR];
            rng.fill(&mut data);
            array
                .write(at, &data)
                .map_err(|e| format!("round {round}: xraid write: {e}"))?;
            if rng.below(3) == 0 {
                array
                    .flush()
                    .map_err(|e| format!("round {round}: flush: {e}"))?;
            }
        }
        let writes = rng.below(8);
        let dying = (rng.below(2) == 0)
            .then(|| MemberIdx(u16::try_from(rng.below(u64::from(disks))).expect("small")));
        let clean = rng.below(2) == 0;
        let mut md_rng = SimRng::new(rng.next_u64());
        let mut want = Vec::new();
        let session = |a: &mut SimArray| want = md_session(a, &mut md_rng, writes, dying);
        if clean {
            array.power_cut_then_clean_open_with(session);
        } else {
            array.power_cut_with(session);
        }
        array.run();
        let what = format!(
            "round {round} ({level:?} of {disks}, md {} with {writes} writes, {})",
            if clean { "stopped cleanly" } else { "cut off" },
            dying.map_or("whole".to_string(), |m| format!(
                "member {} dead",
                m.index()
            ))
        );
        let (wrong, refused) = compare(&mut array, &want);
        if !wrong.is_empty() || !refused.is_empty() {
            return Err(format!(
                "{what}: chunks at sectors {wrong:?} read wrong, {refused:?} refused"
            ));
        }
        if let Some(dying) = dying {
            rebuild_on_a_new_device(&mut array, dying);
        }
        let mismatches = check_mismatches(&mut array);
        if mismatches > 0 {
            return Err(format!(
                "{what}: a check found {mismatches} mismatched units"
            ));
        }
        let (wrong, refused) = compare(&mut array, &want);
        if !wrong.is_empty() || !refused.is_empty() {
            return Err(format!(
                "{what}, after the rebuild and check: {wrong:?} wrong, {refused:?} refused"
            ));
        }
    }
    Ok(())
}

#[test]
fn arrays_handed_to_md_and_back_read_as_md_left_them() {
    let mut failed = Vec::new();
    for seed in common::story_seeds(200, common::spread(0x3d)) {
        if let Err(e) = story(seed) {
            failed.push((seed, e));
        }
    }
    assert!(
        failed.is_empty(),
        "{} stories failed, e.g. {:?} (replay: XRAID_SEED=<seed> cargo test -p \
         xraid-engine --test md_sessions)",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
}
