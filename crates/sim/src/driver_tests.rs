//! The real engine on simulated disks: member I/O counts match the engine's plans, and
//! a run is a pure function of its configuration and seed.

use xraid_layout::{Layout, Level};

use crate::{ArraySpec, DiskModel, Pattern, Presets, RunResult, SimArray, Workload};

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
