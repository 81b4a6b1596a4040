//! A parity member whose stripe-log ring was lost at a power cut, on members without
//! bad block logs: nothing can list its doubted parity rows, so the member serves on
//! and the rule of parity in doubt keeps the rows that would be rebuilt through it
//! lost, loudly, for as long as the resync stays owed. What that rule must get right
//! where a list would have: writes over those rows, and what a resync that could not
//! complete had put right. (A review of 521d117 found both; its set-up is this one.)

mod common;
use common::{logged_array, SECTOR};

use xraid_engine::sim::SimArray;
use xraid_engine::{EngineError, MemberIdx, SyncKind};
use xraid_layout::Level;

/// The levels and widths told.
const LEVELS: [(Level, u16); 4] = [
    (Level::Raid4, 4),
    (Level::Raid5, 4),
    (Level::Raid5, 5),
    (Level::Raid6, 5),
];

/// An array whose P ring was lost at a cut (see [`torn`]).
struct Torn {
    array: SimArray,
    /// The data before the cut-off write.
    old: Vec<u8>,
    /// Stripe 0's last data member: missing since before the cut when degraded.
    gone: MemberIdx,
    /// The array sector where `gone`'s chunk of stripe 0 starts (16 sectors).
    gone_at: u64,
}

impl Torn {
    /// What `gone`'s chunk of stripe 0 held before the cut (the cut-off write did not
    /// touch it).
    fn gone_rows_before(&self) -> Vec<u8> {
        let at = self.gone_at as usize * SECTOR;
        self.old[at..at + 16 * SECTOR].to_vec()
    }

    fn read_gone_rows(&mut self) -> Result<Vec<u8>, EngineError> {
        self.array.read(self.gone_at, 16)
    }
}

/// `level` with `disks` members (16-sector chunks) and no bad block logs, filled;
/// stripe 0's last data member gone first when `degraded`; a write to stripe 0's
/// first chunk cut off by the power, and stripe 0's P member's ring unreadable at the
/// restart (readable again after it); the replay has run.
fn torn(level: Level, disks: u16, seed: u64, degraded: bool) -> Torn {
    let (mut array, old) = logged_array(level, disks, seed);
    let map = array.engine.geometry().stripe_map(0);
    let data_disks = map.data_disks();
    let (p, gone) = (map.p(), map.data_member(data_disks - 1));
    if degraded {
        array.kill_member(gone);
        array.engine.fail_member(gone);
        array.run();
    }
    let mut new = vec![0u8; 16 * SECTOR];
    array.rng().fill(&mut new);
    array.write(0, &new).expect("write");
    array.power_cut_with(|array| array.members[p.index()].ring_unreadable = true);
    array.run();
    array.members[p.index()].ring_unreadable = false;
    Torn {
        array,
        old,
        gone,
        gone_at: u64::from(data_disks - 1) * 16,
    }
}

fn is_loud(result: &Result<Vec<u8>, EngineError>) -> bool {
    matches!(
        result,
        Err(EngineError::Unreadable { .. } | EngineError::DataLost { .. })
    )
}

/// A write over the missing member's rows where only the lost ring's parity would
/// hold them after it: parity made fresh by the write is remembered in memory only,
/// and the next open doubts the stripe again. So the write is refused, as where that
/// parity is listed (with a bad block log) — never acknowledged and then lost. A
/// RAID-6 keeps Q, trusted, and takes the write, which reads back after a cut.
/// Before 2026-11-29 the RAID-4/5 write was acknowledged, read back, and read as an
/// error after the next cut.
#[test]
fn a_write_over_rows_only_doubted_parity_would_hold_is_refused_or_kept() {
    for (level, disks) in LEVELS {
        for seed in 0..8u64 {
            let mut t = torn(level, disks, 9300 + seed, true);
            let mut new = vec![0u8; 16 * SECTOR];
            t.array.rng().fill(&mut new);
            let at = t.gone_at;
            let written = t.array.write(at, &new);
            let case = format!("{level:?} of {disks}, seed {seed}");
            if level == Level::Raid6 {
                if let Err(e) = &written {
                    panic!("{case}: the write failed: {e}");
                }
            } else {
                assert!(
                    matches!(written, Err(EngineError::Unreadable { .. })),
                    "{case}: the write was answered {written:?}"
                );
            }
            t.array.flush().expect("flush");
            t.array.power_cut();
            t.array.run();
            let got = t.read_gone_rows();
            if written.is_ok() {
                assert_eq!(got.ok(), Some(new), "{case}: the write after a cut");
            } else {
                let before = t.gone_rows_before();
                assert!(
                    is_loud(&got) || got.as_ref().ok() == Some(&before),
                    "{case}: the rows after a cut read {}",
                    if got.is_ok() {
                        "wrong"
                    } else {
                        "as another error"
                    }
                );
            }
        }
    }
}

/// Whole at the open: a resync passes stripe 0 (its parity now computed from the
/// data), then stripe 0's last data member leaves. The stripes after it cannot be
/// put right nor listed, so the resync ends without completing — but stripe 0's rows
/// of the member gone read back (rebuilt from parity the resync made), while it runs
/// and after it ends. Before 2026-11-29 they read as errors once it ended.
#[test]
fn rows_a_resync_put_right_read_back_after_it_ends_incomplete() {
    for (level, disks) in LEVELS {
        for seed in 0..8u64 {
            let mut t = torn(level, disks, 10_200 + seed, false);
            let before = t.gone_rows_before();
            // About a stripe a millisecond: the member leaves while the resync runs.
            let mut config = t.array.engine.config();
            config.sync_min_bytes_per_sec = 8 * 1024 * 1000;
            config.sync_max_bytes_per_sec = 8 * 1024 * 1000;
            t.array.engine.set_config(config);
            t.array
                .engine
                .start_sync(SyncKind::Resync, 0)
                .expect("resync");
            assert!(t.array.run_sync_until(2));
            let gone = t.gone;
            t.array.kill_member(gone);
            t.array.engine.fail_member(gone);
            let case = format!("{level:?} of {disks}, seed {seed}");
            let got = t.read_gone_rows();
            assert_eq!(got.ok(), Some(before.clone()), "{case}: while it runs");
            t.array.run_sync();
            let got = t.read_gone_rows();
            assert_eq!(got.ok(), Some(before), "{case}: after it ended");
        }
    }
}
