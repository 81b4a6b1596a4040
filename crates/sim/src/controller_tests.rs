//! The controllers' policies doing what they say, on the real driver: read-ahead
//! hits, the flush-on-write flaw, elevator sorting, a string's bandwidth shared by
//! its disks, and replay. Every figure compared is derived in a comment from the
//! policy's own mechanics, never fitted to a run.

use xraid_engine::Nanos;
use xraid_layout::{Layout, Level};

use crate::{
    ArraySpec, ControllerParams, DiskModel, Pattern, Presets, RunResult, SimArray, StringParams,
    Topology, Workload,
};

fn preset(name: &str) -> DiskModel {
    let presets = Presets::builtin().unwrap_or_else(|e| panic!("{e}"));
    let p = presets.disk(name).unwrap_or_else(|e| panic!("{e}"));
    p.model().unwrap_or_else(|e| panic!("{e}"))
}

fn workload(rw: Pattern, bs: u64, requests: u64, iodepth: usize, seed: u64) -> Workload {
    Workload {
        rw,
        bs,
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

/// A 1987-style caching controller (all policies on, no read-ahead limits) with one
/// string of `rate` bytes/s holding `disks` disks.
fn one_controller(disks: usize, rate: u64, c: ControllerParams) -> Topology {
    Topology {
        buses: Vec::new(),
        controllers: vec![c],
        strings: vec![StringParams {
            bytes_per_sec: rate,
            controller: 0,
        }],
        disk_string: vec![Some(0); disks],
    }
}

fn caching(read_ahead_sectors: u64) -> ControllerParams {
    ControllerParams {
        cache_sectors: 512, // 256 KiB
        search: true,
        save_reads: true,
        save_writes: true,
        read_ahead_sectors,
        read_ahead_across_head: true,
        read_ahead_across_cylinder: true,
        ..ControllerParams::default()
    }
}

/// The SMD disk (no buffer of its own, one command at a time) behind `c`.
fn smd(c: ControllerParams, w: &Workload) -> RunResult {
    let mut sim = SimArray::single(preset("fujitsu_m2344k"));
    sim.set_topology(one_controller(1, 2_400_000, c))
        .unwrap_or_else(|e| panic!("{e}"));
    sim.run(w).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_sequential_read_is_served_from_the_read_ahead_after_each_miss() {
    // 8 KiB reads (16 sectors) with 112 sectors of read-ahead: each miss fetches
    // 128 sectors, so the next 7 reads are in the cache. 64 reads: 8 misses, 56 hits.
    let w = workload(Pattern::Read, 8192, 64, 1, 1);
    let r = smd(caching(112), &w);
    let c = r.controllers[0];
    assert_eq!((c.reads, c.cache_hits), (64, 56));
    assert_eq!(r.disks[0].reads, 8, "only the misses reach the disk");
    assert_eq!(r.disks[0].sectors_read, 8 * 128);
    assert_eq!(c.read_ahead_sectors, 8 * 112);
    // Without searching the cache every read goes to the disk, read-ahead and all.
    let blind = smd(
        ControllerParams {
            search: false,
            ..caching(112)
        },
        &w,
    );
    assert_eq!(
        (blind.controllers[0].cache_hits, blind.disks[0].reads),
        (0, 64)
    );
    // A hit costs no disk time: the cached run ends sooner than one without a cache.
    let plain = smd(ControllerParams::default(), &w);
    assert_eq!(plain.disks[0].reads, 64);
    assert!(r.span < plain.span, "{:?} vs {:?}", r.span, plain.span);
}

#[test]
fn invalidating_the_read_cache_on_every_write_ruins_a_mixed_load() {
    // Sequential 4 KiB reads and writes, half each, with 31 blocks of read-ahead: a
    // miss fetches 32 blocks. Without the flaw a write replaces only its own block,
    // so about one read in 16 misses (one miss per 32 blocks, half of them reads).
    // With it every write empties the cache: a read hits only when the request
    // before it was a read too, so about half the reads miss, and each miss fetches
    // 32 blocks again.
    let w = workload(Pattern::Rw, 4096, 2000, 1, 5);
    let good = smd(caching(31 * 8), &w);
    let flawed = smd(
        ControllerParams {
            flush_on_write: true,
            ..caching(31 * 8)
        },
        &w,
    );
    assert_eq!(good.reads, flawed.reads, "same seed, same requests");
    assert_eq!(flawed.controllers[0].cache_flushes, flawed.writes);
    assert_eq!(good.controllers[0].cache_flushes, 0);
    let misses = |r: &RunResult| r.controllers[0].reads - r.controllers[0].cache_hits;
    assert!(misses(&good) < good.reads / 8, "{}", misses(&good));
    assert!(misses(&flawed) > flawed.reads / 4, "{}", misses(&flawed));
    // Each extra miss costs a disk read of 32 blocks where a hit cost none.
    assert!(
        flawed.read_latency.mean.0 > 2 * good.read_latency.mean.0,
        "{:?} vs {:?}",
        flawed.read_latency,
        good.read_latency
    );
    assert!(flawed.span > good.span);
}

#[test]
fn elevator_sorting_cuts_seek_time() {
    // 16 random reads queued at the controller for a disk that takes one at a time.
    // In arrival order the arm travels a third of the disk per read on average; an
    // elevator sweeping over 16 waiting reads moves about 1/17 of the disk between
    // them. Less than half the seek time is a loose bound on that.
    let w = workload(Pattern::RandRead, 4096, 2000, 16, 9);
    let fifo = smd(ControllerParams::default(), &w);
    let sorted = smd(
        ControllerParams {
            sort_reads: true,
            ..ControllerParams::default()
        },
        &w,
    );
    let (f, s) = (fifo.disks[0], sorted.disks[0]);
    assert_eq!((f.reads, s.reads), (2000, 2000));
    assert!(f.seeks > 0 && s.seeks > 0);
    assert!(
        2 * s.seek_time.0 < f.seek_time.0,
        "sorted {:?} vs fifo {:?}",
        s.seek_time,
        f.seek_time
    );
    assert!(sorted.span < fifo.span);
    // Sorting writes only leaves reads in arrival order: the same run as FIFO.
    let writes_only = smd(
        ControllerParams {
            sort_writes: true,
            ..ControllerParams::default()
        },
        &w,
    );
    assert_eq!(writes_only.disks[0].seek_time, f.seek_time);
}

/// Three Barracudas striped (64 KiB chunk) reading sequentially in 192 KiB requests,
/// on one 10 MB/s string or each on its own.
fn striped(shared: bool) -> RunResult {
    let spec = ArraySpec {
        level: Level::Raid0,
        layout: Layout::default_for(Level::Raid0),
        disks: 3,
        chunk_sectors: 128,
    };
    let mut sim =
        SimArray::new(spec, &preset("seagate_st118273")).unwrap_or_else(|e| panic!("{e}"));
    let string = |controller| StringParams {
        bytes_per_sec: 10_000_000,
        controller,
    };
    let topo = if shared {
        one_controller(3, 10_000_000, ControllerParams::default())
    } else {
        Topology {
            buses: Vec::new(),
            controllers: vec![ControllerParams::default(); 3],
            strings: vec![string(0), string(1), string(2)],
            disk_string: vec![Some(0), Some(1), Some(2)],
        }
    };
    sim.set_topology(topo).unwrap_or_else(|e| panic!("{e}"));
    sim.run(&workload(Pattern::Read, 192 * 1024, 200, 4, 1))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_string_shared_by_three_streaming_disks_limits_them_to_its_bandwidth() {
    let mb_s = |r: &RunResult| r.bytes as f64 / (r.span.0 as f64 / 1e9) / 1e6;
    let shared = striped(true);
    let apart = striped(false);
    // Every byte crosses the one string: no more than 10 MB/s can arrive, and the
    // string is the busy component.
    assert!(mb_s(&shared) <= 10.0, "{}", mb_s(&shared));
    let util = shared.strings[0].busy.0 as f64 / shared.span.0 as f64;
    assert!(util > 0.9, "string {util}");
    assert_eq!(shared.strings[0].bytes, shared.bytes);
    // Each disk alone streams faster than 10 MB/s (its media and its 20 MB/s link), so
    // three strings carry more than twice what one does.
    assert!(
        mb_s(&apart) > 2.0 * mb_s(&shared),
        "{} vs {}",
        mb_s(&apart),
        mb_s(&shared)
    );
    assert!(apart.strings.iter().all(|s| s.bytes == apart.bytes / 3));
}

#[test]
fn a_host_bus_carries_every_byte_of_its_controllers() {
    let mut topo = one_controller(1, 2_400_000, caching(112));
    topo.buses = vec![40_000_000];
    topo.controllers[0].bus = Some(0);
    topo.controllers[0].bytes_per_sec = Some(8_000_000);
    topo.controllers[0].overhead = Nanos(100_000);
    let mut sim = SimArray::single(preset("fujitsu_m2344k"));
    sim.set_topology(topo.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    let w = workload(Pattern::Rw, 8192, 300, 2, 3);
    let r = sim.run(&w).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.buses[0].bytes, r.bytes, "each request's data once");
    // The bus's busy time is its bytes at its rate (each transfer rounded up).
    let ideal = r.bytes * 1_000_000_000 / 40_000_000;
    assert!(r.buses[0].busy.0 >= ideal && r.buses[0].busy.0 <= ideal + r.requests);
    // The controller is busy for its overhead per request plus its bytes at 8 MB/s.
    let ctl = r.controllers[0].busy.0;
    assert!(ctl >= r.requests * 100_000 + r.bytes * 1_000_000_000 / 8_000_000);
    // The same topology and seed replay exactly; another seed differs.
    let mut again = SimArray::single(preset("fujitsu_m2344k"));
    again
        .set_topology(topo.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.run(&w).unwrap_or_else(|e| panic!("{e}")), r);
    let mut other = SimArray::single(preset("fujitsu_m2344k"));
    other.set_topology(topo).unwrap_or_else(|e| panic!("{e}"));
    let o = other
        .run(&Workload { seed: 4, ..w })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(o.digest, r.digest);
}

#[test]
fn a_topology_that_points_nowhere_is_refused() {
    let mut sim = SimArray::single(preset("fujitsu_m2344k"));
    let mut t = one_controller(1, 1, ControllerParams::default());
    t.strings[0].controller = 3;
    assert!(sim.set_topology(t).is_err());
    let t = one_controller(2, 1, ControllerParams::default());
    assert!(
        sim.set_topology(t).is_err(),
        "two disks placed, one present"
    );
    let t = one_controller(1, 0, ControllerParams::default());
    assert!(sim.set_topology(t).is_err(), "zero rate");
}
