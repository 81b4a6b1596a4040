//! The real engine on simulated disks: member I/O counts match the engine's plans, and
//! a run is a pure function of its configuration and seed.

use xraid_layout::{Layout, Level};

use crate::{ArraySpec, DiskModel, Nanos, Pattern, Presets, RunResult, SimArray, Workload};

fn model() -> DiskModel {
    let presets = Presets::builtin().unwrap_or_else(|e| panic!("{e}"));
    let preset = presets
        .disk("seagate_st118273")
        .unwrap_or_else(|e| panic!("{e}"));
    preset.model().unwrap_or_else(|e| panic!("{e}"))
}

fn workload(rw: Pattern, requests: u64, iodepth: usize, seed: u64) -> Workload {
    Workload {
        rw,
        bs: 4096,
        iodepth,
        numjobs: 1,
        rwmixread: 50,
        offset: 0,
        size: 0,
        requests,
        runtime: None,
        seed,
    }
}

fn run(level: Level, disks: u16, w: &Workload) -> RunResult {
    let spec = ArraySpec {
        level,
        layout: Layout::default_for(level),
        disks,
        chunk_sectors: 128,
    };
    let mut array = SimArray::new(spec, &model()).unwrap_or_else(|e| panic!("{e}"));
    let r = array.run(w).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        array.engine().map_or(0, |e| e.buffers().live()),
        0,
        "every buffer returned"
    );
    r
}

fn disk_totals(r: &RunResult) -> (u64, u64) {
    let reads = r.disks.iter().map(|d| d.reads).sum();
    let writes = r.disks.iter().map(|d| d.writes).sum();
    (reads, writes)
}

#[test]
fn raid5_small_random_write_costs_two_reads_and_two_writes() {
    let n = 300;
    for disks in [4, 6] {
        let r = run(Level::Raid5, disks, &workload(Pattern::RandWrite, n, 4, 1));
        assert_eq!((r.requests, r.writes, r.errors), (n, n, 0));
        // On 4 disks reading the old data and parity (read-modify-write) and reading
        // the two other data chunks (reconstruct-write) both cost 2 reads; on 6 only
        // read-modify-write does.
        assert_eq!(r.engine.rmw + r.engine.rcw, n);
        if disks == 6 {
            assert_eq!(r.engine.rmw, n);
        }
        assert_eq!(
            (r.engine.member_reads, r.engine.member_writes),
            (2 * n, 2 * n)
        );
        // What the engine planned is what the disks did.
        assert_eq!(disk_totals(&r), (2 * n, 2 * n));
        // Each write waits for reads then writes on spinning disks: milliseconds.
        assert!(r.latency.mean.0 > 5_000_000, "{:?}", r.latency.mean);
    }
}

#[test]
fn raid5_and_raid0_random_reads_cost_one_member_read_each() {
    let n = 300;
    for (level, disks) in [(Level::Raid5, 4), (Level::Raid0, 2)] {
        let r = run(level, disks, &workload(Pattern::RandRead, n, 8, 2));
        assert_eq!((r.requests, r.reads, r.errors), (n, n, 0));
        assert_eq!((r.engine.member_reads, r.engine.member_writes), (n, 0));
        assert_eq!(disk_totals(&r), (n, 0));
        // The reads spread over every member.
        assert!(r.disks.iter().all(|d| d.reads > n / u64::from(disks) / 2));
    }
}

#[test]
fn raid0_writes_go_to_one_member_each() {
    let n = 200;
    let r = run(Level::Raid0, 2, &workload(Pattern::RandWrite, n, 2, 3));
    assert_eq!((r.engine.member_reads, r.engine.member_writes), (0, n));
    assert_eq!(disk_totals(&r), (0, n));
}

#[test]
fn same_configuration_and_seed_give_identical_results() {
    let w = workload(Pattern::RandRw, 400, 8, 42);
    let a = run(Level::Raid5, 4, &w);
    let b = run(Level::Raid5, 4, &w);
    assert_eq!(a, b);
    let c = run(Level::Raid5, 4, &Workload { seed: 43, ..w });
    assert_ne!(a.digest, c.digest);
    assert_ne!(a.span, c.span);
}

#[test]
fn striping_spreads_a_deep_random_load() {
    // One disk's worth of random reads against four: with 16 in flight the four-disk
    // RAID-0 finishes well over twice as fast.
    let w = workload(Pattern::RandRead, 800, 16, 5);
    let one = run(Level::Raid0, 2, &Workload { iodepth: 1, ..w });
    let four = run(Level::Raid0, 4, &w);
    assert!(
        four.span.0 * 2 < one.span.0,
        "{:?} vs {:?}",
        four.span,
        one.span
    );
}

#[test]
fn bad_workloads_are_refused() {
    let spec = ArraySpec {
        level: Level::Raid0,
        layout: Layout::default_for(Level::Raid0),
        disks: 2,
        chunk_sectors: 128,
    };
    let mut array = SimArray::new(spec, &model()).unwrap_or_else(|e| panic!("{e}"));
    let w = workload(Pattern::Read, 1, 1, 0);
    assert!(array.run(&Workload { bs: 1000, ..w }).is_err());
    assert!(array.run(&Workload { iodepth: 0, ..w }).is_err());
    assert!(array
        .run(&Workload {
            offset: 4096,
            size: 1,
            ..w
        })
        .is_err());
    let bad = ArraySpec { disks: 1, ..spec };
    assert!(SimArray::new(bad, &model()).is_err());
}

/// The small IBM 0661 (400 MB): fast to rebuild whole.
fn ibm_model() -> DiskModel {
    let presets = Presets::builtin().unwrap_or_else(|e| panic!("{e}"));
    presets
        .disk("ibm_0661_467")
        .and_then(|p| p.model())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A 4-member array of IBM 0661s.
fn small_array(level: Level, chunk_sectors: u32) -> SimArray {
    let model = ibm_model();
    let spec = ArraySpec {
        level,
        layout: Layout::default_for(level),
        disks: 4,
        chunk_sectors,
    };
    SimArray::new(spec, &model).unwrap_or_else(|e| panic!("{e}"))
}

/// What one member's drive does alone: bytes per simulated second reading (or
/// writing) `bytes` of its data area end to end, 1 MiB at a time, 4 in flight.
fn member_alone(rw: Pattern, bytes: u64) -> f64 {
    let model = ibm_model();
    let bs = 1 << 20;
    let w = Workload {
        bs,
        offset: crate::DATA_OFFSET_SECTORS * 512,
        size: bytes / bs * bs,
        requests: bytes / bs,
        ..workload(rw, 0, 4, 1)
    };
    let r = SimArray::single(model)
        .run(&w)
        .unwrap_or_else(|e| panic!("{e}"));
    r.bytes as f64 * 1e9 / r.span.0 as f64
}

#[test]
fn a_rebuild_on_an_idle_array_reads_every_survivor_and_writes_the_new_member_whole() {
    for (level, chunk) in [
        (Level::Raid5, 1024),
        (Level::Raid6, 1024),
        (Level::Raid1, 128),
        (Level::Raid10, 1024),
    ] {
        let mut array = small_array(level, chunk);
        array
            .start_rebuild(1, 1_000_000, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        let r = array
            .run(&workload(Pattern::Read, 0, 1, 1))
            .unwrap_or_else(|e| panic!("{e}"));
        let Some(rb) = r.rebuild else {
            panic!("{level:?}: no rebuild reported")
        };
        assert_eq!(
            (r.requests, r.span),
            (0, Nanos(0)),
            "{level:?}: no workload"
        );
        assert_eq!(rb.role, 1);
        assert_eq!(rb.unrecoverable, 0);
        assert_eq!(rb.done_with_workload, 0);
        assert_eq!(
            rb.duration, r.elapsed,
            "{level:?}: the run ends with the rebuild"
        );
        let member_sectors = rb.member_bytes / 512;
        assert_eq!(
            r.disks[1].sectors_written, member_sectors,
            "{level:?}: the new member is written whole, once"
        );
        assert_eq!(
            r.disks[1].sectors_read, 0,
            "{level:?}: nothing is read from it"
        );
        let read: u64 = r.disks.iter().map(|d| d.sectors_read).sum();
        let needed = match level {
            // Every other member is read: parity levels need all of a stripe's rest.
            Level::Raid5 | Level::Raid6 => 3 * member_sectors,
            // One copy of every block is enough.
            _ => member_sectors,
        };
        assert_eq!(read, needed, "{level:?}: survivors read once");
        // It is an engine as the array would run it: the member is active again.
        let states = array.engine().map(|e| e.member_states().to_vec());
        assert_eq!(
            states,
            Some(vec![xraid_engine::MemberState::Active; 4]),
            "{level:?}"
        );
        // No rebuild outruns one member's drive (its larger units may save a little of
        // the per-command time the 1 MiB reference pays); these keep it streaming.
        let alone = member_alone(Pattern::Read, rb.member_bytes)
            .min(member_alone(Pattern::Write, rb.member_bytes));
        let ratio = rb.bytes_per_sec() / alone;
        assert!(
            (0.8..=1.05).contains(&ratio),
            "{level:?}: rebuild at {ratio:.3} of one member's rate"
        );
    }
}

#[test]
fn a_rebuild_beside_a_workload_keeps_its_minimum_pace_and_then_runs_flat_out() {
    let mut array = small_array(Level::Raid5, 128);
    let min = 200_000;
    array
        .start_rebuild(2, min, 0)
        .unwrap_or_else(|e| panic!("{e}"));
    let w = Workload {
        runtime: Some(Nanos(20_000_000_000)),
        requests: u64::MAX,
        ..workload(Pattern::RandWrite, 0, 4, 3)
    };
    let r = array.run(&w).unwrap_or_else(|e| panic!("{e}"));
    let Some(rb) = r.rebuild else {
        panic!("no rebuild reported")
    };
    assert_eq!(
        r.errors, 0,
        "every write of the degraded, rebuilding array is done"
    );
    assert!(r.writes > 100, "{} writes", r.writes);
    // While the writes ran the rebuild kept (about) its minimum pace; then it ran on
    // alone past the workload's end.
    let during = rb.done_with_workload as f64 * 1e9 / r.span.0 as f64;
    assert!(
        (0.9 * min as f64..=1.5 * min as f64).contains(&during),
        "{during:.0} B/s beside the writes"
    );
    assert!(rb.done_with_workload < rb.member_bytes);
    assert!(r.elapsed > r.span && rb.duration == r.elapsed);
    assert!(r.disks[2].sectors_written * 512 >= rb.member_bytes);
}

#[test]
fn a_rebuild_starts_at_its_minimum_pace_beside_the_workloads_first_requests() {
    // Begun before the workload's first requests, the recover found the clients idle
    // and queued a whole window of 2 MiB mirror units (32 MiB, half a minute of these
    // disks) ahead of them. At a sixth of the disks' rate the writes go on beside it.
    let run = |rebuild: bool| {
        let mut array = small_array(Level::Raid1, 128);
        if rebuild {
            array
                .start_rebuild(0, 200_000, 0)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let w = Workload {
            runtime: Some(Nanos(5_000_000_000)),
            requests: u64::MAX,
            ..workload(Pattern::RandWrite, 0, 4, 5)
        };
        array.run(&w).unwrap_or_else(|e| panic!("{e}"))
    };
    let (alone, beside) = (run(false), run(true));
    assert!(
        beside.requests * 3 > alone.requests,
        "{} writes beside the rebuild, {} alone",
        beside.requests,
        alone.requests
    );
    assert!(
        beside.latency.p50.0 < 10 * alone.latency.p50.0,
        "p50 {:?} beside the rebuild, {:?} alone",
        beside.latency.p50,
        alone.latency.p50
    );
}

#[test]
fn a_rebuild_replays_exactly_from_its_seed() {
    let go = || {
        let mut array = small_array(Level::Raid6, 256);
        array
            .start_rebuild(0, 500_000, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        let w = Workload {
            runtime: Some(Nanos(5_000_000_000)),
            requests: u64::MAX,
            ..workload(Pattern::RandRw, 0, 8, 9)
        };
        array.run(&w).unwrap_or_else(|e| panic!("{e}"))
    };
    let (a, b) = (go(), go());
    assert!(a.rebuild.is_some());
    assert_eq!(a, b);
}

#[test]
fn a_rebuild_that_cannot_be_done_is_refused() {
    let model = ibm_model();
    let refused = |mut a: SimArray, role: u16| match a.start_rebuild(role, 0, 0) {
        Err(crate::RunError::Rebuild(why)) => why,
        other => panic!("role {role}: {other:?}"),
    };
    assert!(refused(SimArray::single(model), 0).contains("plain disk"));
    assert!(refused(small_array(Level::Raid5, 128), 4).contains("members 0 to 3"));
    assert!(refused(small_array(Level::Raid0, 128), 0).contains("RAID-0"));
    let mut twice = small_array(Level::Raid1, 128);
    twice
        .start_rebuild(0, 0, 0)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(refused(twice, 1).contains("once"));
}

/// Checks what a run told its progress: fractions within 0..=1 that never go back,
/// some before the end, and 1 last.
fn assert_progress(reports: &[f64], what: &str) {
    assert!(
        reports.len() >= 3,
        "{what}: {} reports: {reports:?}",
        reports.len()
    );
    assert!(
        reports.windows(2).all(|p| p[0] <= p[1]),
        "{what}: went back: {reports:?}"
    );
    assert!(
        reports.iter().all(|f| (0.0..=1.0).contains(f)),
        "{what}: {reports:?}"
    );
    assert!(
        reports[..reports.len() - 1]
            .iter()
            .any(|&f| f > 0.0 && f < 1.0),
        "{what}: nothing between start and end: {reports:?}"
    );
    assert_eq!(reports.last(), Some(&1.0), "{what}");
}

#[test]
fn a_long_run_reports_its_progress_and_runs_the_same_with_or_without() {
    type Case = fn() -> (SimArray, Workload);
    let runs: [(&str, Case); 3] = [
        (
            "a rebuild beside timed writes",
            (|| {
                let mut array = small_array(Level::Raid5, 128);
                array
                    .start_rebuild(2, 200_000, 0)
                    .unwrap_or_else(|e| panic!("{e}"));
                let w = Workload {
                    runtime: Some(Nanos(20_000_000_000)),
                    requests: u64::MAX,
                    ..workload(Pattern::RandWrite, 0, 4, 3)
                };
                (array, w)
            }) as Case,
        ),
        (
            "a rebuild alone",
            (|| {
                // Larger drives than the IBM's: enough steps to report between.
                let spec = ArraySpec {
                    level: Level::Raid1,
                    layout: Layout::default_for(Level::Raid1),
                    disks: 2,
                    chunk_sectors: 128,
                };
                let mut array = SimArray::new(spec, &model()).unwrap_or_else(|e| panic!("{e}"));
                array
                    .start_rebuild(1, 0, 0)
                    .unwrap_or_else(|e| panic!("{e}"));
                (array, workload(Pattern::Read, 0, 1, 1))
            }) as Case,
        ),
        (
            "a counted workload",
            (|| {
                let array = small_array(Level::Raid0, 128);
                (array, workload(Pattern::RandRead, 50_000, 8, 4))
            }) as Case,
        ),
    ];
    for (what, make) in runs {
        let (mut quiet, w) = make();
        let without = quiet.run(&w).unwrap_or_else(|e| panic!("{e}"));
        let (mut told, w) = make();
        let mut reports = Vec::new();
        let with = told
            .run_with_progress(&w, &mut |f| reports.push(f))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(with, without, "{what}: the run changed");
        assert_progress(&reports, what);
    }
}
