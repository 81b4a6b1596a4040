//! The SSD model's physics (issue 5 item 3), each against a figure worked out from the
//! parameters by hand: an idle read's parts, parallel dies, garbage collection's
//! write amplification and what over-provisioning does to it, and replays.

use xraid_layout::{Layout, Level};

use crate::{
    ArraySpec, DiskOp, DiskRequest, DriveModel, Nanos, Pattern, RunResult, SimArray, Ssd,
    SsdParams, Workload,
};

/// A small drive: 2 channels x 2 dies, 64 blocks of 32 pages a die (32 MiB of flash),
/// 10% over-provisioned; MLC-like latencies.
fn small() -> SsdParams {
    SsdParams {
        channels: 2,
        dies_per_channel: 2,
        page_bytes: 4096,
        pages_per_block: 32,
        blocks_per_die: 64,
        over_provisioning_ppm: 100_000,
        page_read: Nanos(50_000),
        page_program: Nanos(500_000),
        block_erase: Nanos(2_000_000),
        channel_bytes_per_sec: 100_000_000,
        command_overhead: Nanos(10_000),
        interface_bytes_per_sec: 300_000_000,
        queue_depth: 32,
    }
}

/// A drive whose dies are its limit: 4 channels x 4 dies, fast links.
fn die_bound() -> SsdParams {
    SsdParams {
        channels: 4,
        dies_per_channel: 4,
        page_read: Nanos(100_000),
        channel_bytes_per_sec: 1_000_000_000,
        command_overhead: Nanos(1_000),
        interface_bytes_per_sec: 4_000_000_000,
        // Deep enough that a deep workload's requests all reach the dies (NVMe-like).
        queue_depth: 256,
        ..small()
    }
}

fn ssd(p: &SsdParams) -> Ssd {
    Ssd::new(p.build().unwrap_or_else(|e| panic!("{e}")))
}

/// `bytes` at `rate` bytes per second, rounded up to a nanosecond.
fn at_rate(bytes: u64, rate: u64) -> u64 {
    (bytes * 1_000_000_000).div_ceil(rate)
}

/// Runs one command on an idle drive at `t`; returns its service time.
fn one(drive: &mut Ssd, op: DiskOp, lba: u64, sectors: u64, t: Nanos) -> u64 {
    drive.submit(
        DiskRequest {
            tag: 7,
            op,
            lba,
            sectors,
        },
        t,
    );
    loop {
        if let Some(c) = drive.poll_done() {
            assert_eq!(c.tag, 7);
            return c.at.0 - t.0;
        }
        let Some(next) = drive.poll_timeout() else {
            panic!("drive stalled with a command in it");
        };
        drive.handle_timeout(next);
    }
}

fn workload(rw: Pattern, bs: u64, iodepth: usize, requests: u64, seed: u64) -> Workload {
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

fn run_on(p: &SsdParams, w: &Workload) -> RunResult {
    let model = DriveModel::Ssd(p.build().unwrap_or_else(|e| panic!("{e}")));
    let mut sim = SimArray::single_drive(model);
    sim.run(w).unwrap_or_else(|e| panic!("{e}"))
}

fn iops(r: &RunResult) -> f64 {
    r.requests as f64 / (r.span.0 as f64 / 1e9)
}

#[test]
fn an_idle_4k_read_costs_overhead_page_read_and_transfers() {
    let p = small();
    let mut drive = ssd(&p);
    let took = one(&mut drive, DiskOp::Read, 80, 8, Nanos(0));
    let expect = p.command_overhead.0
        + p.page_read.0
        + at_rate(4096, p.channel_bytes_per_sec)
        + at_rate(4096, p.interface_bytes_per_sec);
    assert_eq!(took, expect);
    // The same 4 KiB straddling two pages: two dies on two channels read half a page
    // each at once, so only the channel time halves.
    let took = one(&mut drive, DiskOp::Read, 4, 8, Nanos(1_000_000));
    let expect = p.command_overhead.0
        + p.page_read.0
        + at_rate(2048, p.channel_bytes_per_sec)
        + at_rate(4096, p.interface_bytes_per_sec);
    assert_eq!(took, expect);
}

#[test]
fn a_write_programs_its_page_and_part_of_a_page_is_read_first() {
    let p = small();
    let mut drive = ssd(&p);
    let page = at_rate(4096, p.channel_bytes_per_sec);
    let took = one(&mut drive, DiskOp::Write, 0, 8, Nanos(0));
    let expect =
        p.command_overhead.0 + at_rate(4096, p.interface_bytes_per_sec) + page + p.page_program.0;
    assert_eq!(took, expect);
    // 1 KiB of a page: the page is read, then the whole merged page goes back.
    let took = one(&mut drive, DiskOp::Write, 8, 2, Nanos(10_000_000));
    let expect = p.command_overhead.0
        + at_rate(1024, p.interface_bytes_per_sec)
        + p.page_read.0
        + page
        + page
        + p.page_program.0;
    assert_eq!(took, expect);
    let took = one(&mut drive, DiskOp::Flush, 0, 0, Nanos(20_000_000));
    assert_eq!(took, p.command_overhead.0, "nothing is waiting in a cache");
    let s = drive.stats();
    let f = s.ssd.unwrap_or_default();
    assert_eq!(
        (s.writes, s.flushes, f.page_programs, f.page_reads),
        (2, 1, 2, 1)
    );
}

#[test]
fn reads_spread_over_the_dies_so_iops_scale_with_depth_up_to_their_count() {
    let p = die_bound();
    let dies = u64::from(p.channels * p.dies_per_channel);
    let page = at_rate(4096, p.channel_bytes_per_sec);
    let idle =
        (p.command_overhead.0 + p.page_read.0 + page + at_rate(4096, p.interface_bytes_per_sec))
            as f64;
    // Sequential 4 KiB reads: consecutive pages are on consecutive dies, so up to
    // `dies` requests in flight never share a die and IOPS grow with the depth.
    let one_deep = iops(&run_on(&p, &workload(Pattern::Read, 4096, 1, 2000, 1)));
    assert!((one_deep * idle / 1e9 - 1.0).abs() < 0.01, "{one_deep}");
    for depth in [2, 4, 8, 16] {
        let r = iops(&run_on(&p, &workload(Pattern::Read, 4096, depth, 4000, 1)));
        assert!(
            r > 0.9 * depth as f64 * one_deep,
            "depth {depth}: {r} IOPS against {one_deep} at depth 1"
        );
    }
    // Past the die count they saturate: each die is held for its read and the
    // page's trip over the channel, so at most dies / (tR + transfer) per second.
    let ceiling = dies as f64 * 1e9 / (p.page_read.0 + page) as f64;
    let deep = iops(&run_on(&p, &workload(Pattern::Read, 4096, 64, 8000, 1)));
    assert!(
        deep <= ceiling * 1.001 && deep > 0.95 * ceiling,
        "{deep} vs {ceiling}"
    );
    // Random reads collide on dies now and then, but climb to the same ceiling.
    let random = |depth| {
        iops(&run_on(
            &p,
            &workload(Pattern::RandRead, 4096, depth, 8000, 3),
        ))
    };
    let (r1, r4, r128) = (random(1), random(4), random(128));
    assert!(r4 > 2.5 * r1, "{r4} vs {r1}");
    assert!(
        r128 <= ceiling * 1.001 && r128 > 0.9 * ceiling,
        "{r128} vs {ceiling}"
    );
}

#[test]
fn sustained_random_writes_collect_garbage_and_amplify() {
    let p = small();
    let model = p.build().unwrap_or_else(|e| panic!("{e}"));
    let spare = model.physical_pages() - model.logical_pages;
    let mut sim = SimArray::single_drive(DriveModel::Ssd(model.clone()));
    // Half the spare pages: every write finds a free page, nothing is collected.
    let fresh = sim
        .run(&workload(Pattern::RandWrite, 4096, 8, spare / 2, 5))
        .unwrap_or_else(|e| panic!("{e}"));
    let f0 = fresh.disks[0].ssd.unwrap_or_default();
    assert_eq!((f0.gc_copies, f0.erases), (0, 0));
    assert_eq!(f0.write_amplification(), 1.0);
    // Five drives' worth more: the spare is spent, every new block needs a victim.
    let worn = sim
        .run(&workload(
            Pattern::RandWrite,
            4096,
            8,
            5 * model.logical_pages,
            6,
        ))
        .unwrap_or_else(|e| panic!("{e}"));
    let f1 = worn.disks[0].ssd.unwrap_or_default();
    let copies = f1.gc_copies - f0.gc_copies;
    let programs = f1.page_programs - f0.page_programs;
    let wa = (programs + copies) as f64 / programs as f64;
    assert!(f1.erases > 0 && wa > 2.0, "write amplification {wa}");
    // Each copy is a read and a program inside the die, each erase an erase: the
    // writes wait behind them, so their mean latency rises with the amplification.
    assert!(
        worn.write_latency.mean.0 > 2 * fresh.write_latency.mean.0,
        "{:?} vs {:?}",
        worn.write_latency.mean,
        fresh.write_latency.mean
    );
}

#[test]
fn more_over_provisioning_less_write_amplification() {
    let wa = |ppm| {
        let p = SsdParams {
            over_provisioning_ppm: ppm,
            ..small()
        };
        let logical = p.build().map(|m| m.logical_pages).unwrap_or(0);
        let r = run_on(&p, &workload(Pattern::RandWrite, 4096, 8, 6 * logical, 11));
        r.disks[0].ssd.unwrap_or_default().write_amplification()
    };
    let (low, mid, high) = (wa(70_000), wa(150_000), wa(400_000));
    assert!(low > mid && mid > high && high > 1.0, "{low} {mid} {high}");
}

#[test]
fn an_ssd_array_runs_the_engine_and_replays() {
    let model = DriveModel::Ssd(small().build().unwrap_or_else(|e| panic!("{e}")));
    let spec = ArraySpec {
        level: Level::Raid5,
        layout: Layout::default_for(Level::Raid5),
        disks: 4,
        chunk_sectors: 128,
    };
    let run = |seed| {
        let mut a =
            SimArray::with_drives(spec, vec![model.clone(); 4]).unwrap_or_else(|e| panic!("{e}"));
        a.run(&workload(Pattern::RandRw, 4096, 8, 1500, seed))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let (a, b, c) = (run(1), run(1), run(2));
    assert_eq!(a, b);
    assert_ne!(a.digest, c.digest);
    // A small random write on RAID-5 is 2 reads and 2 writes on SSDs too.
    assert_eq!(a.engine.member_writes, 2 * a.writes);
    assert_eq!(a.engine.member_reads, a.reads + 2 * a.writes);
    let disk_writes: u64 = a.disks.iter().map(|d| d.writes).sum();
    assert_eq!(disk_writes, a.engine.member_writes);
}
