//! A paced sync yields to client requests (it runs at its minimum rate while one is
//! out), and only to them: the array's own checkpoints — the flushes before a
//! sync's progress goes to the superblocks — leave it at its idle rate.

mod common;
use common::filled_array;

use xraid_engine::{MemberIdx, Nanos, SyncKind};
use xraid_layout::Level;

/// A filled RAID-5 whose member 1 is replaced by a blank device and being recovered,
/// its engine configured by `configure`; and when the recover started.
fn recovering(
    seed: u64,
    configure: impl FnOnce(&mut xraid_engine::EngineConfig),
) -> (xraid_engine::sim::SimArray, Nanos) {
    let (mut array, _) = filled_array(Level::Raid5, 4, seed, 0);
    let mut config = array.engine.config();
    configure(&mut config);
    array.engine.set_config(config);
    array.kill_member(MemberIdx(1));
    array
        .return_member(MemberIdx(1), true)
        .expect("a new device");
    let began = array.now();
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    (array, began)
}

/// How a recover on a RAID-5 runs, in simulated time: a minimum rate of one unit a
/// second while clients are busy, no limit while they are idle, and after every 8th
/// step one request (while none of its kind is out) of the kind `start` sends.
fn recover_time(seed: u64, start: Option<fn(&mut xraid_engine::sim::SimArray)>) -> Nanos {
    let unit_bytes = 16 * 512;
    let (mut array, began) = recovering(seed, |config| {
        config.sync_min_bytes_per_sec = unit_bytes;
        config.sync_max_bytes_per_sec = 0;
        config.sync_window = 1;
    });
    let mut steps = 0u64;
    while array.engine.sync_progress().is_some() {
        steps += 1;
        if let Some(start) =
            start.filter(|_| steps.is_multiple_of(8) && array.engine.clients_idle())
        {
            start(&mut array);
        }
        assert!(array.step(), "seed {seed}: the recover goes on");
    }
    array.run();
    Nanos(array.now().0 - began.0)
}

#[test]
fn the_arrays_own_checkpoints_do_not_make_a_sync_yield() {
    for seed in 0..4 {
        let alone = recover_time(seed, None);
        let checkpoints = recover_time(
            seed,
            Some(|a| {
                a.start_checkpoint();
            }),
        );
        let flushes = recover_time(
            seed,
            Some(|a| {
                a.start_flush();
            }),
        );
        let second = 1_000_000_000;
        assert!(
            alone.0 < second,
            "seed {seed}: the recover runs unpaced alone ({alone:?})"
        );
        assert!(
            checkpoints.0 < 2 * alone.0.max(second / 10),
            "seed {seed}: checkpoints made it yield ({checkpoints:?} against {alone:?})"
        );
        assert!(
            flushes.0 > second,
            "seed {seed}: client flushes made it yield ({flushes:?})"
        );
    }
}

/// A held sync (the driver records its checkpoint) launches no unit, while those in
/// flight complete; let go, it runs on to its end and rebuilds every unit.
#[test]
fn a_held_sync_launches_nothing_until_let_go() {
    for seed in 0..4 {
        let (mut array, _) = recovering(seed, |config| config.sync_window = 2);
        for _ in 0..3 {
            assert!(array.step(), "seed {seed}: the recover goes on");
        }
        array.engine.hold_sync(true);
        while array.step() {}
        let held = array.engine.sync_progress().expect("still running");
        let launched = array.engine.stats().sync_units;
        assert!(
            held.done_below > 0 && held.done_below < held.total_units,
            "seed {seed}: the units out completed, no more ({held:?})"
        );
        assert!(!array.step(), "seed {seed}: nothing launched while held");
        assert_eq!(array.engine.stats().sync_units, launched);
        array.engine.hold_sync(false);
        while array.engine.sync_progress().is_some() {
            assert!(array.step(), "seed {seed}: let go, the recover goes on");
        }
        let finished = array.take_events().into_iter().any(|e| {
            matches!(
                e,
                xraid_engine::Event::SyncFinished {
                    completed: true,
                    unrecoverable: 0,
                    ..
                }
            )
        });
        assert!(finished, "seed {seed}: the recover completed");
        assert_eq!(
            array.engine.member_states()[1],
            xraid_engine::MemberState::Active,
            "seed {seed}"
        );
    }
}
