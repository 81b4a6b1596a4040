//! Helpers shared by the engine's integration tests.

use xraid_engine::sim::SimArray;
use xraid_engine::{EngineConfig, MemberIdx};
use xraid_layout::{Geometry, Layout, Level};

pub const SECTOR: usize = 512;

/// An array of `level` and `disks` members, 16-sector chunks and 256 member
/// sectors, logging (a 256-sector ring), filled with random data and flushed;
/// on odd seeds its log batches go out as durable (FUA) writes.
#[allow(dead_code)]
pub fn logged_array(level: Level, disks: u16, seed: u64) -> (SimArray, Vec<u8>) {
    filled_array(level, disks, seed, 256)
}

/// [`logged_array`] with a ring of `log_sectors` (0: no stripe log).
#[allow(dead_code)]
pub fn filled_array(level: Level, disks: u16, seed: u64, log_sectors: u64) -> (SimArray, Vec<u8>) {
    let geo = Geometry::new(level, Layout::default_for(level), disks, 16, 256).expect("geometry");
    filled_array_on(geo, seed, log_sectors)
}

/// [`filled_array`] of geometry `geo`.
#[allow(dead_code)]
pub fn filled_array_on(geo: Geometry, seed: u64, log_sectors: u64) -> (SimArray, Vec<u8>) {
    let mut array = blank_array_on(geo, seed, log_sectors);
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    array.flush().expect("flush");
    // The (empty) replay at the start is not the one a test looks for.
    array.take_events();
    (array, data)
}

/// An array of geometry `geo` on zero-filled members, opened with a ring of
/// `log_sectors` (0: no stripe log); on odd seeds its log batches go out as durable
/// (FUA) writes.
#[allow(dead_code)]
pub fn blank_array_on(geo: Geometry, seed: u64, log_sectors: u64) -> SimArray {
    let mut array = SimArray::new(geo, seed);
    array.engine.set_config(EngineConfig {
        log_sectors,
        // Batches as a write and a flush, or (odd seeds) as one durable write each.
        fua_writes: seed % 2 == 1,
        ..EngineConfig::default()
    });
    array.run();
    array
}

/// Fills every member with random bytes and wipes its stripe-log ring: an array
/// made over old contents, as a restart finds it (call it in a power cut's restart).
#[allow(dead_code)]
pub fn old_contents(array: &mut SimArray) {
    for m in 0..array.members.len() {
        let mut old = std::mem::take(&mut array.members[m].data);
        array.rng().fill(&mut old);
        array.members[m].data = old;
        array.members[m].log.fill(0);
    }
}

/// A power cut after which `member`'s sectors `rows` fail to read while the stripe
/// log replays (an entry that needs them is skipped), and read again afterwards.
#[allow(dead_code)]
pub fn cut_with_rows_unreadable_at_the_replay(
    array: &mut SimArray,
    member: MemberIdx,
    rows: std::ops::Range<u64>,
) {
    let bad = rows.clone();
    array.power_cut_with(move |a| a.members[member.index()].bad_ranges.push(bad));
    array.run();
    array.members[member.index()]
        .bad_ranges
        .retain(|r| *r != rows);
}

/// Whether `got` is neither `old` nor `new`, sector by sector.
#[allow(dead_code)]
pub fn neither(got: &[u8], old: &[u8], new: &[u8]) -> bool {
    got.chunks(SECTOR)
        .zip(old.chunks(SECTOR).zip(new.chunks(SECTOR)))
        .any(|(g, (o, n))| g != o && g != n)
}

/// Power fails with `dying` dying with it (the restart does not find it), and the
/// replay runs.
#[allow(dead_code)]
pub fn cut_taking(array: &mut SimArray, dying: MemberIdx) {
    array.power_cut_with(|a| {
        a.kill_member(dying);
        a.engine.fail_member(dying);
    });
    array.run();
}

/// A RAID-5 of 4 members (16-sector chunks), filled, with chunks 0 and 1 of stripe 0
/// written together (not flushed) and chunk 0's member dying with the power. Returns
/// the array, the data before, the write, and the dead member.
#[allow(dead_code)]
pub fn two_chunk_write_cut(seed: u64) -> (SimArray, Vec<u8>, Vec<u8>, MemberIdx) {
    let (mut array, old) = logged_array(Level::Raid5, 4, seed);
    let dying = array.engine.geometry().stripe_map(0).data_member(0);
    let mut new = vec![0u8; 32 * SECTOR];
    array.rng().fill(&mut new);
    array.write(0, &new).expect("write");
    cut_taking(&mut array, dying);
    (array, old, new, dying)
}

/// Writes the first `stripes` stripes whole (not flushed) with random data and cuts
/// the power, `dying` dying with it. Returns the data written.
#[allow(dead_code)]
pub fn full_stripes_cut(array: &mut SimArray, stripes: u64, dying: MemberIdx) -> Vec<u8> {
    let per_stripe = array.engine.geometry().stripe_data_sectors();
    let len = per_stripe as usize * SECTOR;
    let mut new = vec![0u8; stripes as usize * len];
    array.rng().fill(&mut new);
    for s in 0..stripes {
        let at = s as usize * len;
        array
            .write(s * per_stripe, &new[at..at + len])
            .expect("write");
    }
    cut_taking(array, dying);
    new
}

/// Puts a new device in `member`'s place and rebuilds it.
#[allow(dead_code)]
pub fn rebuild_on_a_new_device(array: &mut SimArray, member: MemberIdx) {
    array.return_member(member, true).expect("a new device");
    array
        .engine
        .start_sync(xraid_engine::SyncKind::Recover, 0)
        .expect("recover");
    array.run_sync();
    assert!(
        array
            .engine
            .member_states()
            .iter()
            .all(|s| *s == xraid_engine::MemberState::Active),
        "rebuilt"
    );
}

/// Runs a check over the whole array and returns the mismatched units it found.
#[allow(dead_code)]
pub fn check_mismatches(array: &mut SimArray) -> u64 {
    array
        .engine
        .start_sync(xraid_engine::SyncKind::Check, 0)
        .expect("check");
    array.run_sync();
    array
        .take_events()
        .iter()
        .filter_map(|e| match e {
            xraid_engine::Event::SyncFinished {
                kind: xraid_engine::SyncKind::Check,
                mismatches,
                ..
            } => Some(*mismatches),
            _ => None,
        })
        .sum()
}

/// The seeds a story test tells: `XRAID_SEED=<seed>` alone (to replay one), else
/// `XRAID_SEEDS=<n>` of them (`count` by default) from index `XRAID_SEEDS_FROM=<i>`
/// (0 by default), each index made a seed by `seed_of` (each test its own, so that
/// two tests' stories differ).
#[allow(dead_code)]
pub fn story_seeds(count: u64, seed_of: impl Fn(u64) -> u64) -> Vec<u64> {
    let var = |name: &str| std::env::var(name).ok();
    if let Some(seed) = var("XRAID_SEED") {
        return vec![seed.parse().expect("XRAID_SEED is a number")];
    }
    let number = |name: &str, default: u64| {
        var(name).map_or(default, |n| {
            n.parse()
                .unwrap_or_else(|_| panic!("{name} is a number, not {n:?}"))
        })
    };
    let from = number("XRAID_SEEDS_FROM", 0);
    (from..from + number("XRAID_SEEDS", count))
        .map(seed_of)
        .collect()
}

/// The usual `seed_of` for [`story_seeds`]: index `i` spread over the seeds by the
/// golden ratio, then `salt` mixed in.
#[allow(dead_code)]
pub fn spread(salt: u64) -> impl Fn(u64) -> u64 {
    move |i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt
}
