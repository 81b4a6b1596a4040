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
    let mut array = SimArray::new(geo, seed);
    array.engine.set_config(EngineConfig {
        log_sectors,
        // Batches as a write and a flush, or (odd seeds) as one durable write each.
        fua_writes: seed % 2 == 1,
        ..EngineConfig::default()
    });
    array.run();
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    array.flush().expect("flush");
    // The (empty) replay at the start is not the one a test looks for.
    array.take_events();
    (array, data)
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
