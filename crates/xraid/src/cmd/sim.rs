//! `xraid sim`: runs a workload in fio's terms on simulated drives — disks, SSDs, one
//! drive or an array run by the real engine — and prints what fio would — bandwidth,
//! IOPS, latency percentiles — plus each component's utilisation and which one limits
//! throughput. The same configuration, workload and seed print the same bytes.

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use xraid_layout::{Layout, SECTOR_BYTES};
use xraid_sim::{
    Latency, Nanos, Pattern, Presets, RebuildResult, RunResult, SimArray, SimConfig, SsdStats,
    Target, Workload, DATA_OFFSET_SECTORS, MAX_RUNTIME,
};

use crate::cli::{SimArgs, SimRw};
use crate::progress;
use crate::size::human;

/// A component at least this busy is called saturated: above it, queueing delay grows
/// without bound as load rises, so more concurrency buys no throughput; below it the
/// workload's own concurrency (iodepth x numjobs) is what limits.
const SATURATED_PERCENT: f64 = 90.0;

/// The JSON document (`--json`); its fields are documented in docs/SIMULATOR.md.
#[derive(Debug, Serialize)]
struct Report {
    target: TargetReport,
    /// Null for a rebuild alone (`--rebuild` without --size or --runtime).
    workload: Option<WorkloadReport>,
    /// Simulated time from the first request to the last reply.
    span_ns: u64,
    errors: u64,
    /// The run stopped at the simulator's request limit, not at its own end.
    capped: bool,
    read: DirReport,
    write: DirReport,
    total: DirReport,
    /// Member I/O the engine planned (zero for a plain disk).
    engine: EngineReport,
    components: Vec<ComponentReport>,
    limit: LimitReport,
    /// A digest of every reply's id and time, in hex: equal digests, equal runs.
    digest: String,
    /// The member rebuilt (`--rebuild`), or null.
    rebuild: Option<RebuildReport>,
}

/// A member rebuilt beside the workload, and what bounds its rate.
#[derive(Debug, Serialize)]
struct RebuildReport {
    role: u16,
    /// The member's data area, all of which the rebuild writes.
    member_bytes: u64,
    /// Simulated time from the member's failure to the rebuild's end.
    duration_ns: u64,
    /// member_bytes per simulated second, in 10^6 bytes.
    mb_s: f64,
    /// The rebuilt member's drive alone, reading and then writing its data area end
    /// to end (1 MiB requests, 4 in flight): what one member can do.
    member_read_mb_s: f64,
    member_write_mb_s: f64,
    /// mb_s / member_read_mb_s, and mb_s over the slower of the drive's two rates (a
    /// rebuild reads the other members and writes this one).
    vs_member_read: f64,
    vs_member_slower: f64,
    /// Bytes rebuilt by the workload's last reply (all when the rebuild ended first);
    /// null without a workload.
    done_with_workload_bytes: Option<u64>,
    /// Sync units that could not be rebuilt.
    unrecoverable_units: u64,
    /// The pace asked, in MB/s per member (null max: no cap).
    min_mb_s: u64,
    max_mb_s: Option<u64>,
}

/// Bytes of each request, and requests in flight, of the runs that measure what one
/// member's drive does alone.
const MEMBER_RUN_BS: u64 = 1 << 20;
const MEMBER_RUN_IODEPTH: usize = 4;

#[derive(Debug, Serialize)]
struct TargetReport {
    /// "disk" or "array".
    kind: &'static str,
    level: Option<String>,
    layout: Option<String>,
    chunk_bytes: Option<u64>,
    disks: usize,
    /// Bytes a workload can address.
    capacity_bytes: u64,
}

#[derive(Debug, Serialize)]
struct WorkloadReport {
    rw: &'static str,
    bs: u64,
    iodepth: usize,
    numjobs: u32,
    rwmixread: u8,
    offset: u64,
    /// The region's bytes (all of the target from `offset` when --size is not given).
    size: u64,
    runtime_ns: Option<u64>,
    seed: u64,
}

#[derive(Debug, Serialize)]
struct DirReport {
    requests: u64,
    bytes: u64,
    iops: f64,
    /// 10^6 bytes per second of simulated time.
    mb_s: f64,
    lat_ns: LatReport,
}

#[derive(Debug, Serialize)]
struct LatReport {
    min: u64,
    mean: u64,
    p50: u64,
    p99: u64,
    max: u64,
}

#[derive(Debug, Serialize)]
struct EngineReport {
    member_reads: u64,
    member_writes: u64,
    rmw: u64,
    rcw: u64,
    full_stripe: u64,
}

#[derive(Debug, Default, Serialize)]
struct ComponentReport {
    /// "disk", "ssd", "string", "controller" or "bus".
    kind: &'static str,
    /// "disk0", "disk1", ... in the target's member order; "string0", "controller0",
    /// "bus0", ... in the order of their names.
    id: String,
    /// The configuration's name for it.
    name: String,
    /// A disk's preset, or the bus preset a string or bus was given by.
    preset: Option<String>,
    busy_ns: u64,
    /// busy_ns / span_ns, in percent (at most 100).
    util_percent: f64,
    /// Commands (disks, controllers).
    reads: u64,
    writes: u64,
    /// A disk's buffer.
    buffer_hits: u64,
    stream_hits: u64,
    /// A disk's seeks and their time.
    seeks: u64,
    seek_ns: u64,
    /// Bytes carried (strings, controllers, buses).
    bytes: u64,
    /// A controller's cache: reads it served, bytes it read ahead, times the
    /// flush-on-write flaw emptied it.
    cache_hits: u64,
    read_ahead_bytes: u64,
    cache_flushes: u64,
    /// An SSD's flash side (null for every other component).
    ssd: Option<SsdReport>,
}

/// An SSD's flash counters and each of its parts' utilisation.
#[derive(Debug, Serialize)]
struct SsdReport {
    /// Flash page reads (for reads, and for writes of part of a page).
    page_reads: u64,
    /// Pages programmed for the host's writes.
    page_programs: u64,
    /// Pages garbage collection moved, and blocks it erased.
    gc_copies: u64,
    erases: u64,
    /// (page_programs + gc_copies) / page_programs; 0 without writes.
    write_amplification: f64,
    /// "controller", "host link", "channel" or "dies": the busiest part, whose
    /// utilisation is the drive's.
    busiest_part: &'static str,
    controller_util_percent: f64,
    link_util_percent: f64,
    /// The busiest channel's.
    channel_util_percent: f64,
    /// The dies' on average.
    die_util_percent: f64,
}

#[derive(Debug, Serialize)]
struct LimitReport {
    /// The busiest component's id.
    busiest: Option<String>,
    util_percent: f64,
    /// Whether it is saturated (at least 90% busy): it limits throughput; otherwise
    /// the workload's concurrency does.
    saturated: bool,
    /// One sentence saying which.
    verdict: String,
}

pub fn run(args: SimArgs) -> Result<()> {
    let presets = Presets::builtin().context("the built-in disk presets")?;
    let config = SimConfig::load(&args.config, &presets)
        .with_context(|| format!("{}", args.config.display()))?;
    let mut sim = config.build()?;
    let capacity_bytes = sim.target_sectors() * SECTOR_BYTES;
    let runtime = runtime(args.runtime)?;
    if args.size == Some(0) {
        // The workload reads a size of 0 as the whole target; here it would move
        // nothing and report an empty run as a result.
        bail!("--size 0 moves nothing: give the bytes each job moves (at least --bs), or leave it out");
    }
    let requests = match (args.size, runtime) {
        (_, Some(_)) => u64::MAX,
        (Some(size), None) => size / args.bs.max(1),
        // A rebuild alone: its end ends the run.
        (None, None) if args.rebuild.is_some() => 0,
        (None, None) => bail!(
            "give --size (bytes each job moves) or --runtime (simulated seconds) to end the run"
        ),
    };
    let w = Workload {
        rw: pattern(args.rw),
        bs: args.bs,
        iodepth: args.iodepth,
        numjobs: args.numjobs,
        rwmixread: args.rwmixread,
        offset: args.offset,
        size: args.size.unwrap_or(0),
        requests,
        runtime,
        seed: args.seed,
    };
    let (_, blocks) = w.check(sim.target_sectors())?;
    // 0 is no cap, as on serve.
    let pace = (
        args.rebuild_min.unwrap_or(1),
        args.rebuild_max.filter(|&m| m > 0),
    );
    xraid_server::check_rebuild_pace(args.rebuild_min, args.rebuild_max).map_err(|e| anyhow!(e))?;
    if let Some(role) = args.rebuild {
        let mb = |v: u64| v.saturating_mul(1_000_000);
        sim.start_rebuild(role, mb(pace.0), pace.1.map_or(0, mb))?;
    }
    let r = run_showing_progress(&mut sim, &w, "simulating")?;
    let mut report = report(&config, &w, blocks * w.bs, capacity_bytes, &r);
    if let Some(rb) = &r.rebuild {
        report.rebuild = Some(rebuild_report(&config, rb, w.requests > 0, pace)?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(())
}

/// The rebuild's figures beside what the rebuilt member's drive does alone.
fn rebuild_report(
    config: &SimConfig,
    rb: &RebuildResult,
    workload: bool,
    (min_mb_s, max_mb_s): (u64, Option<u64>),
) -> Result<RebuildReport> {
    let Some(drive) = config
        .disks()
        .get(usize::from(rb.role))
        .map(|d| d.model.clone())
    else {
        bail!("the rebuilt member {} is not in the configuration", rb.role);
    };
    let alone = |rw: Pattern| -> Result<f64> {
        let mut sim = SimArray::single_drive(drive.clone());
        let size = rb.member_bytes / MEMBER_RUN_BS * MEMBER_RUN_BS;
        let w = Workload {
            rw,
            bs: MEMBER_RUN_BS,
            iodepth: MEMBER_RUN_IODEPTH,
            numjobs: 1,
            rwmixread: 0,
            offset: DATA_OFFSET_SECTORS * SECTOR_BYTES,
            size,
            requests: size / MEMBER_RUN_BS,
            runtime: None,
            seed: 1,
        };
        let what = match rw {
            Pattern::Read => "the member's drive alone, reading",
            _ => "the member's drive alone, writing",
        };
        let r = run_showing_progress(&mut sim, &w, what)?;
        Ok(r.bytes as f64 * 1e3 / r.span.0.max(1) as f64)
    };
    let (read, write) = (alone(Pattern::Read)?, alone(Pattern::Write)?);
    let mb_s = rb.bytes_per_sec() / 1e6;
    let ratio = |of: f64| if of > 0.0 { round3(mb_s / of) } else { 0.0 };
    Ok(RebuildReport {
        role: rb.role,
        member_bytes: rb.member_bytes,
        duration_ns: rb.duration.0,
        mb_s: round3(mb_s),
        member_read_mb_s: round3(read),
        member_write_mb_s: round3(write),
        vs_member_read: ratio(read),
        vs_member_slower: ratio(read.min(write)),
        done_with_workload_bytes: workload.then_some(rb.done_with_workload),
        unrecoverable_units: rb.unrecoverable,
        min_mb_s,
        max_mb_s,
    })
}

/// Runs `w`, with a progress bar on a terminal: a large drive takes minutes of host
/// time.
fn run_showing_progress(sim: &mut SimArray, w: &Workload, what: &str) -> Result<RunResult> {
    let bar = progress::fraction_bar(what);
    let r = sim.run_with_progress(w, &mut |f| progress::set_fraction(&bar, f));
    bar.finish_and_clear();
    Ok(r?)
}

fn runtime(seconds: Option<f64>) -> Result<Option<Nanos>> {
    let Some(s) = seconds else { return Ok(None) };
    let max = MAX_RUNTIME.0 / 1_000_000_000;
    if !(s.is_finite() && s > 0.0 && s <= max as f64) {
        bail!("--runtime {s} must be more than 0 and at most {max} simulated seconds");
    }
    Ok(Some(Nanos((s * 1e9).round() as u64)))
}

fn pattern(rw: SimRw) -> Pattern {
    match rw {
        SimRw::Read => Pattern::Read,
        SimRw::Write => Pattern::Write,
        SimRw::Randread => Pattern::RandRead,
        SimRw::Randwrite => Pattern::RandWrite,
        SimRw::Rw => Pattern::Rw,
        SimRw::Randrw => Pattern::RandRw,
        SimRw::Fsck => Pattern::Fsck,
    }
}

fn lat(l: &Latency) -> LatReport {
    LatReport {
        min: l.min.0,
        mean: l.mean.0,
        p50: l.p50.0,
        p99: l.p99.0,
        max: l.max.0,
    }
}

fn dir(requests: u64, bytes: u64, l: &Latency, span: Nanos) -> DirReport {
    let secs = span.0 as f64 / 1e9;
    let per_sec = |v: u64| if secs > 0.0 { v as f64 / secs } else { 0.0 };
    DirReport {
        requests,
        bytes,
        iops: round3(per_sec(requests)),
        mb_s: round3(per_sec(bytes) / 1e6),
        lat_ns: lat(l),
    }
}

/// Three decimals: enough for any reading, and the JSON stays short.
fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn report(
    config: &SimConfig,
    w: &Workload,
    size: u64,
    capacity_bytes: u64,
    r: &RunResult,
) -> Report {
    let target = match &config.target {
        Target::Disk(_) => TargetReport {
            kind: "disk",
            level: None,
            layout: None,
            chunk_bytes: None,
            disks: 1,
            capacity_bytes,
        },
        Target::Array { spec, members } => TargetReport {
            kind: "array",
            level: Some(spec.level.to_string()),
            layout: (spec.layout != Layout::None).then(|| spec.layout.to_string()),
            chunk_bytes: spec
                .level
                .has_chunk()
                .then(|| u64::from(spec.chunk_sectors) * SECTOR_BYTES),
            disks: members.len(),
            capacity_bytes,
        },
    };
    let span = r.span;
    // Components work until the run's end, a rebuild's included.
    let elapsed = r.elapsed;
    let util = |busy: Nanos| {
        if elapsed.0 == 0 {
            0.0
        } else {
            round3((busy.0 as f64 * 100.0 / elapsed.0 as f64).min(100.0))
        }
    };
    let mut components: Vec<ComponentReport> = config
        .disks()
        .iter()
        .zip(&r.disks)
        .enumerate()
        .map(|(i, (d, s))| ComponentReport {
            kind: d.model.kind(),
            id: format!("disk{i}"),
            name: d.name.clone(),
            preset: Some(d.preset.clone()),
            busy_ns: s.busy.0,
            util_percent: util(s.busy),
            reads: s.reads,
            writes: s.writes,
            buffer_hits: s.buffer_hits,
            stream_hits: s.stream_hits,
            seeks: s.seeks,
            seek_ns: s.seek_time.0,
            ssd: s.ssd.map(|f| ssd_report(&f, util)),
            ..ComponentReport::default()
        })
        .collect();
    for (i, ((name, preset), s)) in config.string_names.iter().zip(&r.strings).enumerate() {
        components.push(ComponentReport {
            kind: "string",
            id: format!("string{i}"),
            name: name.clone(),
            preset: preset.clone(),
            busy_ns: s.busy.0,
            util_percent: util(s.busy),
            bytes: s.bytes,
            ..ComponentReport::default()
        });
    }
    for (i, (name, c)) in config
        .controller_names
        .iter()
        .zip(&r.controllers)
        .enumerate()
    {
        components.push(ComponentReport {
            kind: "controller",
            id: format!("controller{i}"),
            name: name.clone(),
            busy_ns: c.busy.0,
            util_percent: util(c.busy),
            reads: c.reads,
            writes: c.writes,
            cache_hits: c.cache_hits,
            read_ahead_bytes: c.read_ahead_sectors * SECTOR_BYTES,
            cache_flushes: c.cache_flushes,
            bytes: c.bytes,
            ..ComponentReport::default()
        });
    }
    for (i, ((name, preset), s)) in config.bus_names.iter().zip(&r.buses).enumerate() {
        components.push(ComponentReport {
            kind: "bus",
            id: format!("bus{i}"),
            name: name.clone(),
            preset: preset.clone(),
            busy_ns: s.busy.0,
            util_percent: util(s.busy),
            bytes: s.bytes,
            ..ComponentReport::default()
        });
    }
    Report {
        target,
        workload: (w.requests > 0).then(|| WorkloadReport {
            rw: w.rw.name(),
            bs: w.bs,
            iodepth: w.iodepth,
            numjobs: w.numjobs,
            rwmixread: w.rwmixread,
            offset: w.offset,
            size,
            runtime_ns: w.runtime.map(|n| n.0),
            seed: w.seed,
        }),
        span_ns: span.0,
        errors: r.errors,
        capped: r.capped,
        read: dir(r.reads, r.read_bytes, &r.read_latency, span),
        write: dir(r.writes, r.write_bytes, &r.write_latency, span),
        total: dir(r.requests, r.bytes, &r.latency, span),
        engine: EngineReport {
            member_reads: r.engine.member_reads,
            member_writes: r.engine.member_writes,
            rmw: r.engine.rmw,
            rcw: r.engine.rcw,
            full_stripe: r.engine.full_stripe,
        },
        limit: limit(&components, w, r.rebuild.is_some()),
        components,
        digest: format!("{:016x}", r.digest),
        rebuild: None,
    }
}

fn ssd_report(f: &SsdStats, util: impl Fn(Nanos) -> f64) -> SsdReport {
    SsdReport {
        page_reads: f.page_reads,
        page_programs: f.page_programs,
        gc_copies: f.gc_copies,
        erases: f.erases,
        write_amplification: round3(f.write_amplification()),
        busiest_part: f.busiest().0,
        controller_util_percent: util(f.controller_busy),
        link_util_percent: util(f.link_busy),
        channel_util_percent: util(f.channel_busy_max),
        die_util_percent: util(f.die_busy_mean),
    }
}

/// The busiest component, and whether it or the workload limits throughput. Ties go
/// to the first in member order, so the verdict is as deterministic as the run.
fn limit(components: &[ComponentReport], w: &Workload, rebuild: bool) -> LimitReport {
    let busiest = components
        .iter()
        .fold(None::<&ComponentReport>, |best, c| match best {
            Some(b) if b.util_percent >= c.util_percent => Some(b),
            _ => Some(c),
        });
    let Some(b) = busiest else {
        return LimitReport {
            busiest: None,
            util_percent: 0.0,
            saturated: false,
            verdict: "nothing ran".to_string(),
        };
    };
    let saturated = b.util_percent >= SATURATED_PERCENT;
    let part = match &b.ssd {
        Some(f) => format!(" (its {})", f.busiest_part),
        None => String::new(),
    };
    let verdict = if saturated {
        format!(
            "{} ({} {}) limits throughput: {:.1}% busy{part}",
            b.id, b.kind, b.name, b.util_percent
        )
    } else if rebuild && w.requests == 0 {
        format!(
            "no component is saturated (busiest: {}, {:.1}% busy{part}): the rebuild's pace or its sync units in flight limit it",
            b.id, b.util_percent,
        )
    } else if rebuild {
        format!(
            "no component is saturated (busiest: {}, {:.1}% busy{part}): the rebuild's pace or its sync units in flight, and the workload's {} request(s) in flight, limit throughput",
            b.id,
            b.util_percent,
            w.iodepth * w.numjobs as usize,
        )
    } else {
        format!(
            "no component is saturated (busiest: {}, {:.1}% busy{part}): the workload's {} request(s) in flight (iodepth {} x numjobs {}) limit throughput",
            b.id,
            b.util_percent,
            w.iodepth * w.numjobs as usize,
            w.iodepth,
            w.numjobs
        )
    };
    LimitReport {
        busiest: Some(b.id.clone()),
        util_percent: b.util_percent,
        saturated,
        verdict,
    }
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

fn print_dir(label: &str, d: &DirReport, span_ns: u64) {
    if d.requests == 0 {
        return;
    }
    println!(
        "  {label}: IOPS={:.1}, BW={:.3} MB/s ({}/s), {} requests, {} in {:.6} s",
        d.iops,
        d.mb_s,
        human((d.mb_s * 1e6) as u64),
        d.requests,
        human(d.bytes),
        span_ns as f64 / 1e9
    );
    let l = &d.lat_ns;
    println!(
        "    lat (usec): min={}, mean={}, p50={}, p99={}, max={}",
        us(l.min),
        us(l.mean),
        us(l.p50),
        us(l.p99),
        us(l.max)
    );
}

fn print_text(r: &Report) {
    let t = &r.target;
    let ssds = r.components.iter().filter(|c| c.kind == "ssd").count();
    let drives = match ssds {
        0 => "disks",
        n if n == t.disks => "SSDs",
        _ => "drives",
    };
    let what = match (&t.level, &t.layout, t.chunk_bytes) {
        (Some(level), layout, chunk) => {
            let mut s = format!("{level} of {} {drives}", t.disks);
            if let Some(l) = layout {
                s.push_str(&format!(", {l}"));
            }
            if let Some(c) = chunk {
                s.push_str(&format!(", chunk {}", human(c)));
            }
            s
        }
        _ if ssds == 1 => "one SSD".to_string(),
        _ => "one disk".to_string(),
    };
    println!("target: {what}, {}", human(t.capacity_bytes));
    match &r.workload {
        Some(w) => print_job(w),
        None => println!("job: none, the rebuild alone"),
    }
    print_dir("read", &r.read, r.span_ns);
    print_dir("write", &r.write, r.span_ns);
    if r.read.requests > 0 && r.write.requests > 0 {
        print_dir("total", &r.total, r.span_ns);
    }
    if r.errors > 0 {
        println!("  errors: {}", r.errors);
    }
    if r.capped {
        println!(
            "  (stopped at the simulator's limit of {} requests)",
            xraid_sim::MAX_RUN_REQUESTS
        );
    }
    if t.kind == "array" {
        let e = &r.engine;
        println!(
            "  engine: {} member reads, {} member writes ({} read-modify-write, {} reconstruct-write, {} full-stripe)",
            e.member_reads, e.member_writes, e.rmw, e.rcw, e.full_stripe
        );
    }
    println!("  utilisation:");
    for c in &r.components {
        let what = match c.kind {
            "ssd" => {
                let f = c.ssd.as_ref();
                format!(
                    "{} reads, {} writes; flash: {} page reads, {} programs, {} moved by garbage collection (write amplification {:.3}), {} erases; busiest part: {}",
                    c.reads,
                    c.writes,
                    f.map_or(0, |f| f.page_reads),
                    f.map_or(0, |f| f.page_programs),
                    f.map_or(0, |f| f.gc_copies),
                    f.map_or(0.0, |f| f.write_amplification),
                    f.map_or(0, |f| f.erases),
                    f.map_or("", |f| f.busiest_part),
                )
            }
            "disk" => format!(
                "{} reads ({} from the buffer), {} writes, {} seeks",
                c.reads,
                c.buffer_hits + c.stream_hits,
                c.writes,
                c.seeks
            ),
            "controller" => {
                let mut s = format!(
                    "{} reads ({} from the cache, {} read ahead), {} writes, {} moved",
                    c.reads,
                    c.cache_hits,
                    human(c.read_ahead_bytes),
                    c.writes,
                    human(c.bytes)
                );
                if c.cache_flushes > 0 {
                    s.push_str(&format!(", cache thrown away {} times", c.cache_flushes));
                }
                s
            }
            _ => format!("{} moved", human(c.bytes)),
        };
        let name = match &c.preset {
            Some(p) => format!("{} ({p})", c.name),
            None => c.name.clone(),
        };
        println!("    {} {name}: {:.1}% busy, {what}", c.id, c.util_percent);
    }
    if let Some(rb) = &r.rebuild {
        print_rebuild(rb, r.workload.is_some());
    }
    println!("  limit: {}", r.limit.verdict);
}

fn print_job(w: &WorkloadReport) {
    let mut job = format!(
        "job: rw={} bs={} iodepth={} numjobs={}",
        w.rw, w.bs, w.iodepth, w.numjobs
    );
    if matches!(w.rw, "rw" | "randrw") {
        job.push_str(&format!(" rwmixread={}", w.rwmixread));
    }
    job.push_str(&format!(" offset={} size={}", w.offset, human(w.size)));
    if let Some(rt) = w.runtime_ns {
        job.push_str(&format!(" runtime={}s", rt as f64 / 1e9));
    }
    println!("{job} seed={}", w.seed);
}

fn print_rebuild(rb: &RebuildReport, workload: bool) {
    let secs = rb.duration_ns as f64 / 1e9;
    println!(
        "  rebuild of member {}: {} in {secs:.3} s ({:.3} MB/s); the member's drive alone reads at {:.3} MB/s and writes at {:.3} MB/s: {:.3}x its read rate, {:.3}x the slower",
        rb.role,
        human(rb.member_bytes),
        rb.mb_s,
        rb.member_read_mb_s,
        rb.member_write_mb_s,
        rb.vs_member_read,
        rb.vs_member_slower
    );
    let pace = match (rb.min_mb_s, rb.max_mb_s) {
        (0, Some(max)) => format!("no cap beside the workload, {max} MB/s without it"),
        (0, None) => "no cap".to_string(),
        (min, Some(max)) => format!("{min} to {max} MB/s"),
        (min, None) => format!("at least {min} MB/s, no cap"),
    };
    if let (true, Some(done)) = (workload, rb.done_with_workload_bytes) {
        let done = done as f64 * 100.0 / rb.member_bytes.max(1) as f64;
        println!("    {done:.1}% rebuilt by the workload's end; pace {pace}");
    } else {
        match rb.max_mb_s {
            Some(max) => println!("    no workload; pace capped at {max} MB/s"),
            None => println!("    no workload; no pace cap"),
        }
    }
    if rb.unrecoverable_units > 0 {
        println!(
            "    {} sync units could not be rebuilt",
            rb.unrecoverable_units
        );
    }
}
