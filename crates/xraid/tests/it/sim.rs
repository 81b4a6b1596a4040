//! `xraid sim`: workloads on simulated disks and SSDs through the real binary — output
//! that a seed replays byte for byte, fio's options, and one clear line for each bad
//! input.

use std::path::{Path, PathBuf};

use serde_json::Value;

use xraid_sim::Presets;

use crate::util::{fails, ok, p, tempdir, xraid};

fn config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path
}

const RAID5: &str = r#"
[disks.st]
preset = "seagate_st118273"

[array]
level = "raid5"
chunk_kib = 64
members = ["st", "st", "st", "st"]
"#;

const ONE_DISK: &str = r#"disk = "seagate_st118273""#;

/// Three Barracudas striped; `strings = [...]` may follow in [array].
const RAID0_3: &str = r#"
[disks.st]
preset = "seagate_st118273"

[array]
level = "raid0"
chunk_kib = 64
members = ["st", "st", "st"]"#;

/// One string on one caching controller on one bus.
const TOPO: &str = r#"
[strings.s0]
controller = "c0"
preset = "scsi1"

[controllers.c0]
bus = "b0"
overhead_ms = 0.5
cache_kib = 64
read_ahead_kib = 16
search = true

[buses.b0]
rate_mb_s = 40.0
"#;

fn json(args: &[&str]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn same_configuration_workload_and_seed_print_the_same_bytes() {
    let dir = tempdir();
    let c = config(dir.path(), "r5.toml", RAID5);
    let args = [
        "sim",
        p(&c),
        "--rw",
        "randrw",
        "--iodepth",
        "8",
        "--numjobs",
        "2",
        "--runtime",
        "0.5",
        "--seed",
        "7",
    ];
    let a = ok(&args);
    assert_eq!(a, ok(&args), "text replays");
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let j = ok(&with_json);
    assert_eq!(j, ok(&with_json), "JSON replays");
    let mut other = args.to_vec();
    let last = other.len() - 1;
    other[last] = "8";
    assert_ne!(a, ok(&other), "another seed, another run");
    assert!(
        a.contains("IOPS=") && a.contains("p99=") && a.contains("limit:"),
        "{a}"
    );
}

#[test]
fn raid5_random_writes_cost_two_reads_and_two_writes_each() {
    let dir = tempdir();
    let c = config(dir.path(), "r5.toml", RAID5);
    let r = json(&[
        "sim",
        p(&c),
        "--rw",
        "randwrite",
        "--bs",
        "4K",
        "--iodepth",
        "4",
        "--size",
        "1M",
        "--json",
    ]);
    let n = (1 << 20) / 4096;
    assert_eq!(u(&r["write"]["requests"]), n);
    assert_eq!(u(&r["read"]["requests"]), 0);
    assert_eq!(u(&r["engine"]["member_reads"]), 2 * n);
    assert_eq!(u(&r["engine"]["member_writes"]), 2 * n);
    let comps = r["components"].as_array().expect("components");
    assert_eq!(comps.len(), 4);
    let disk_writes: u64 = comps.iter().map(|c| u(&c["writes"])).sum();
    assert_eq!(disk_writes, 2 * n, "the disks did what the engine planned");
    let l = &r["write"]["lat_ns"];
    assert!(u(&l["min"]) <= u(&l["p50"]) && u(&l["p50"]) <= u(&l["p99"]));
    assert!(u(&l["p99"]) <= u(&l["max"]) && u(&l["min"]) <= u(&l["mean"]));
    // Bandwidth is bytes over the simulated span.
    let span = u(&r["span_ns"]) as f64 / 1e9;
    let mb_s = r["write"]["mb_s"].as_f64().expect("mb_s");
    assert!(
        (mb_s - (n * 4096) as f64 / span / 1e6).abs() < 0.01,
        "{mb_s}"
    );
}

#[test]
fn a_saturated_disk_is_named_and_a_shallow_queue_is_blamed_otherwise() {
    let dir = tempdir();
    let c = config(dir.path(), "one.toml", ONE_DISK);
    // Deep random reads keep the one disk busy all the time.
    let deep = json(&[
        "sim",
        p(&c),
        "--rw",
        "randread",
        "--iodepth",
        "16",
        "--size",
        "2M",
        "--json",
    ]);
    assert_eq!(deep["limit"]["busiest"], "disk0");
    assert_eq!(deep["limit"]["saturated"], true);
    assert_eq!(deep["target"]["kind"], "disk");
    // Four disks behind one request at a time: each is idle most of the time.
    let r5 = config(dir.path(), "r5.toml", RAID5);
    let shallow = json(&[
        "sim",
        p(&r5),
        "--rw",
        "randread",
        "--iodepth",
        "1",
        "--size",
        "1M",
        "--json",
    ]);
    assert_eq!(shallow["limit"]["saturated"], false);
    let verdict = shallow["limit"]["verdict"].as_str().expect("verdict");
    assert!(verdict.contains("in flight"), "{verdict}");
}

#[test]
fn numjobs_multiplies_the_requests_and_runtime_ends_the_run() {
    let dir = tempdir();
    let c = config(dir.path(), "one.toml", ONE_DISK);
    let r = json(&[
        "sim",
        p(&c),
        "--rw",
        "read",
        "--bs",
        "64K",
        "--numjobs",
        "3",
        "--size",
        "1M",
        "--json",
    ]);
    assert_eq!(u(&r["read"]["requests"]), 3 * 16);
    let t = json(&[
        "sim",
        p(&c),
        "--rw",
        "randread",
        "--runtime",
        "0.25",
        "--json",
    ]);
    let span = u(&t["span_ns"]);
    // Requests stop being issued at 0.25 s; the last one in flight ends soon after.
    assert!((250_000_000..300_000_000).contains(&span), "{span}");
}

#[test]
fn the_fsck_pattern_is_seek_bound() {
    let dir = tempdir();
    let c = config(dir.path(), "one.toml", ONE_DISK);
    let seq = json(&["sim", p(&c), "--rw", "read", "--size", "4M", "--json"]);
    let fsck = json(&["sim", p(&c), "--rw", "fsck", "--runtime", "1", "--json"]);
    assert_eq!(u(&fsck["write"]["requests"]), 0);
    let mean = |r: &Value| u(&r["read"]["lat_ns"]["mean"]);
    // Half its reads land anywhere on the disk: a seek and a rotation each, where a
    // sequential read mostly finds its block read ahead.
    assert!(
        mean(&fsck) > 10 * mean(&seq),
        "{} vs {}",
        mean(&fsck),
        mean(&seq)
    );
    let help = ok(&["sim", "--help"]);
    assert!(
        help.contains("fsck") && help.contains("inode table"),
        "{help}"
    );
}

/// Each bad configuration or workload gets one line naming the thing.
#[test]
fn bad_input_gets_one_line_naming_the_thing() {
    let dir = tempdir();
    let d = dir.path();
    let good = config(d, "good.toml", ONE_DISK);
    let cases: Vec<(String, Vec<&str>, &str)> = vec![
        ("[disks.x]\npreset = \"nope\"\n[array]\nlevel = \"raid0\"\nmembers = [\"x\", \"x\"]".into(), vec![], "unknown preset `nope`"),
        ("disk = \"seagate_st118273\"\ncolour = 3".into(), vec![], "line 2: unknown field `colour`"),
        ("[disks.x]\npreset = \"seagate_st118273\"\nrpms = 3".into(), vec![], "unknown field `rpms`"),
        ("[array]\nlevel = \"raid7\"\nmembers = [\"seagate_st118273\", \"seagate_st118273\"]".into(), vec![], "unknown RAID level 'raid7'"),
        ("[array]\nlevel = \"raid0\"\nchunk_kib = 48\nmembers = [\"seagate_st118273\", \"seagate_st118273\"]".into(), vec![], "chunk_kib = 48"),
        ("[array]\nlevel = \"raid5\"\nlayout = \"zigzag\"\nmembers = [\"seagate_st118273\", \"seagate_st118273\", \"seagate_st118273\"]".into(), vec![], "layout 'zigzag'"),
        ("[array]\nlevel = \"raid5\"\nmembers = [\"seagate_st118273\", \"seagate_st118273\"]".into(), vec![], "needs 3 to"),
        ("[array]\nlevel = \"raid0\"\nmembers = [\"ghost\", \"ghost\"]".into(), vec![], "unknown disk `ghost`"),
        ("".into(), vec![], "nothing to simulate"),
        ("disk = \"fujitsu_m2344k\"\n[array]\nlevel = \"raid0\"\nmembers = [\"fujitsu_m2344k\", \"fujitsu_m2344k\"]".into(), vec![], "keep one"),
        ("[disks.tiny]\npreset = \"fujitsu_m2344k\"\ncylinders = 10\nheads = 1\n[array]\nlevel = \"raid0\"\nmembers = [\"tiny\", \"tiny\"]".into(), vec![], "no room for data"),
        ("disk = \"x\"\n[disks.x]\npreset = \"seagate_st118273\"\ncylinders = 100".into(), vec![], "override `zones`"),
        ("[disks.x]\npreset = \"seagate_st118273\"\nscheduler = \"elevator\"\n[array]\nlevel = \"raid0\"\nmembers = [\"x\", \"x\"]".into(), vec![], "`scheduler`"),
        ("[disks.x]\npreset = \"seagate_st118273\"\nseek_average_ms = -1.0\n[array]\nlevel = \"raid0\"\nmembers = [\"x\", \"x\"]".into(), vec![], "`seek_average_ms`"),
        ("[disks.x]\npreset = \"seagate_st118273\"\nrpm = 0\n[array]\nlevel = \"raid0\"\nmembers = [\"x\", \"x\"]".into(), vec![], "rpm must be at least 1"),
        ("disk = [1, 2".into(), vec![], "line 1"),
        (format!("{ONE_DISK}\nstring = \"s9\"\n{TOPO}"), vec![], "unknown string `s9`"),
        (format!("{ONE_DISK}\nstring = \"s0\""), vec![], "no [strings.NAME] tables"),
        (format!("{ONE_DISK}\n{TOPO}"), vec![], "add `string = \"NAME\"`"),
        (format!("{ONE_DISK}\nstring = \"s0\"\n{}", TOPO.replace("controller = \"c0\"", "controller = \"c7\"")), vec![], "unknown controller `c7`"),
        (format!("{ONE_DISK}\nstring = \"s0\"\n{}", TOPO.replace("bus = \"b0\"", "bus = \"b5\"")), vec![], "unknown bus `b5`"),
        (format!("{ONE_DISK}\nstring = \"s0\"\n{}", TOPO.replace("preset = \"scsi1\"", "preset = \"scsi9\"")), vec![], "unknown bus preset `scsi9`"),
        (format!("{ONE_DISK}\nstring = \"s0\"\n{}", TOPO.replace("preset = \"scsi1\"", "preset = \"scsi1\"\nrate_mb_s = 5.0")), vec![], "either `preset`"),
        (format!("{ONE_DISK}\nstring = \"s0\"\n{}", TOPO.replace("rate_mb_s = 40.0", "rate_mb_s = 0.0")), vec![], "`rate_mb_s` = 0"),
        (format!("{ONE_DISK}\nstring = \"s0\"\n{}", TOPO.replace("cache_kib = 64", "cache_kib = 8")), vec![], "`read_ahead_kib` = 16 needs a cache"),
        (format!("{ONE_DISK}\nstring = \"s0\"\n{}", TOPO.replace("overhead_ms = 0.5", "overhead_ms = -2.0")), vec![], "`overhead_ms` = -2"),
        (format!("{ONE_DISK}\nstring = \"s0\"\n{}", TOPO.replace("search = true", "serch = true")), vec![], "unknown field `serch`"),
        (format!("{RAID0_3}\nstrings = [\"s0\"]\n{TOPO}"), vec![], "`strings` has 1 entries for 3 members"),
        (format!("string = \"s0\"\n{RAID0_3}\n{TOPO}"), vec![], "for an array give `strings"),
    ];
    for (i, (text, extra, want)) in cases.iter().enumerate() {
        let c = config(d, &format!("bad{i}.toml"), text);
        let mut args = vec!["sim", p(&c), "--size", "1M"];
        args.extend(extra);
        let err = fails(&args);
        assert!(err.contains(want), "case {i}: want {want:?} in {err}");
        assert_eq!(err.lines().count(), 1, "case {i}: one line: {err}");
    }
    let workloads: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--size", "1M", "--bs", "1000"], "--bs 1000"),
        (vec!["--size", "1M", "--bs", "1G"], "--bs"),
        (vec!["--size", "1M", "--iodepth", "0"], "--iodepth 0"),
        (vec!["--size", "1M", "--numjobs", "0"], "--numjobs 0"),
        (
            vec!["--size", "1M", "--rwmixread", "101"],
            "--rwmixread 101",
        ),
        (vec!["--runtime", "0"], "--runtime"),
        (vec!["--runtime", "1e9"], "--runtime"),
        (vec![], "give --size"),
        (vec!["--size", "1T"], "does not fit"),
        (vec!["--size", "1M", "--offset", "1000"], "multiple of --bs"),
        (vec!["--size", "1K", "--bs", "4K"], "does not fit"),
        (vec!["--size", "0"], "--size 0 moves nothing"),
        (
            vec!["--size", "0", "--runtime", "1"],
            "--size 0 moves nothing",
        ),
    ];
    for (extra, want) in workloads {
        let mut args = vec!["sim", p(&good)];
        args.extend(&extra);
        let err = fails(&args);
        assert!(err.contains(want), "{extra:?}: want {want:?} in {err}");
    }
    // clap refuses an unknown pattern and lists the known ones.
    let out = xraid()
        .args(["sim", p(&good), "--size", "1M", "--rw", "sideways"])
        .output()
        .expect("xraid runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("sideways") && err.contains("fsck"),
        "{err}"
    );
    let err = fails(&["sim", p(&d.join("absent.toml")), "--size", "1M"]);
    assert!(err.contains("absent.toml"), "{err}");
}

/// Every configuration under examples/sim/ loads and runs a short workload.
#[test]
fn every_example_configuration_runs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sim");
    let mut examples: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/sim")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    examples.sort();
    let names: Vec<String> = examples
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert_eq!(
        names,
        [
            "raid2-24disk-raid5.toml",
            "scsi-raid0.toml",
            "smd-1987.toml",
            "ssd-raid5.toml"
        ],
        "the examples the issue asks for, and an SSD array"
    );
    // Disks, SSDs, strings, controllers, buses.
    for (path, kinds) in examples.iter().zip([
        [24, 0, 8, 4, 4],
        [2, 0, 2, 2, 0],
        [1, 0, 1, 1, 1],
        [0, 4, 4, 1, 1],
    ]) {
        let r = json(&[
            "sim",
            p(path),
            "--rw",
            "randrw",
            "--iodepth",
            "4",
            "--size",
            "1M",
            "--json",
        ]);
        assert_eq!(u(&r["total"]["requests"]), 256, "{}", path.display());
        let count = |kind: &str| {
            r["components"]
                .as_array()
                .map_or(0, |c| c.iter().filter(|c| c["kind"] == kind).count())
        };
        let got = ["disk", "ssd", "string", "controller", "bus"].map(count);
        assert_eq!(got, kinds, "{}", path.display());
        assert_eq!(u(&r["errors"]), 0);
    }
}

/// Three disks streaming through one 10 MB/s string: the string is named as the
/// limit, every kind of component reports, and the run replays byte for byte.
#[test]
fn a_shared_string_is_named_as_the_limit_and_the_tree_replays() {
    let dir = tempdir();
    let text = format!(
        "{RAID0_3}\nstrings = [\"s0\", \"s0\", \"s0\"]\n{}",
        TOPO.replace("preset = \"scsi1\"", "preset = \"scsi2_fast\"")
    );
    let c = config(dir.path(), "tree.toml", &text);
    let args = [
        "sim",
        p(&c),
        "--rw",
        "read",
        "--bs",
        "192K",
        "--iodepth",
        "4",
        "--size",
        "32M",
        "--seed",
        "3",
    ];
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let r = json(&with_json);
    assert_eq!(r["limit"]["busiest"], "string0", "{}", r["limit"]);
    assert_eq!(r["limit"]["saturated"], true);
    assert!(
        r["total"]["mb_s"].as_f64().is_some_and(|v| v <= 10.0),
        "{}",
        r["total"]
    );
    let c = &r["components"];
    assert_eq!(
        (c[3]["kind"].as_str(), c[3]["id"].as_str()),
        (Some("string"), Some("string0"))
    );
    assert_eq!(c[4]["kind"], "controller");
    assert_eq!(c[5]["kind"], "bus");
    assert_eq!(
        c[5]["bytes"], r["total"]["bytes"],
        "every byte crosses the bus"
    );
    let text = ok(&args);
    assert!(
        text.contains("string0 s0 (scsi2_fast)") && text.contains("limit: string0"),
        "{text}"
    );
    assert_eq!(text, ok(&args), "text replays");
    assert_eq!(ok(&with_json), ok(&with_json), "JSON replays");
}

/// The 1987 review's finding through the binary: the SMD example's mixed load with
/// the controller's flaw switched on reads far slower than without it.
#[test]
fn the_flush_on_write_flaw_slows_the_smd_examples_mixed_load() {
    let dir = tempdir();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sim/smd-1987.toml");
    let text = std::fs::read_to_string(example).expect("example");
    assert!(text.contains("flush_on_write = false"));
    let good = config(dir.path(), "good.toml", &text);
    let flawed = config(
        dir.path(),
        "flawed.toml",
        &text.replace("flush_on_write = false", "flush_on_write = true"),
    );
    let run = |c: &PathBuf| {
        json(&[
            "sim",
            p(c),
            "--rw",
            "rw",
            "--bs",
            "4K",
            "--size",
            "2M",
            "--json",
        ])
    };
    let (g, f) = (run(&good), run(&flawed));
    assert_eq!(
        g["read"]["requests"], f["read"]["requests"],
        "same seed, same requests"
    );
    let ctl = |r: &Value| r["components"][2].clone();
    assert_eq!(ctl(&f)["kind"], "controller");
    assert_eq!(ctl(&f)["cache_flushes"], f["write"]["requests"]);
    assert_eq!(u(&ctl(&g)["cache_flushes"]), 0);
    assert!(u(&ctl(&f)["cache_hits"]) < u(&ctl(&g)["cache_hits"]));
    let rd = |r: &Value| r["read"]["mb_s"].as_f64().unwrap_or(0.0);
    assert!(rd(&f) < rd(&g), "{} vs {}", rd(&f), rd(&g));
}

/// Random 4 KiB reads, one at a time, on the SSD preset and on a disk preset: the SSD
/// answers in its overhead, a page read and the page's trips over its channel and its
/// host link; the disk in its overhead, a seek, half a turn, the sectors' passing and
/// its bus time. The ratio of the two means is worked out from the presets' values.
#[test]
fn an_ssd_reads_4k_at_random_far_faster_than_a_disk() {
    let dir = tempdir();
    let presets = Presets::builtin().expect("presets");
    let ssd = presets.ssd("intel_x25m_80gb").expect("ssd preset");
    // A single-zone disk: a uniformly random block is on a uniformly random cylinder,
    // so its mean seek is the sheet's average (defined over such pairs of
    // cylinders), less the 1/C chance of staying put.
    let disk = presets.disk("ibm_0661_467").expect("disk preset");
    let (sp, dp) = (&ssd.params, &disk.params);
    let ns = |bytes: f64, rate: u64| bytes * 1e9 / rate as f64;
    let ssd_ns = (sp.command_overhead.0 + sp.page_read.0) as f64
        + ns(4096.0, sp.channel_bytes_per_sec)
        + ns(4096.0, sp.interface_bytes_per_sec);
    let cylinders = f64::from(dp.zones[0].cylinders);
    let rev = 60e9 / f64::from(dp.rpm);
    let slots = f64::from(dp.zones[0].sectors_per_track + dp.spare_sectors_per_track);
    let disk_ns = dp.command_overhead.0 as f64
        + dp.seek_average.0 as f64 * (1.0 - 1.0 / cylinders)
        + rev / 2.0
        + 8.0 * rev / slots
        + ns(4096.0, dp.interface_bytes_per_sec);
    let expect = disk_ns / ssd_ns;
    // Over the whole drive (no --size), for as long as some 2000 requests take.
    let mean = |preset: &str, seconds: &str| {
        let c = config(
            dir.path(),
            &format!("{preset}.toml"),
            &format!("disk = \"{preset}\""),
        );
        let r = json(&[
            "sim",
            p(&c),
            "--rw",
            "randread",
            "--iodepth",
            "1",
            "--runtime",
            seconds,
            "--json",
        ]);
        assert!(u(&r["read"]["requests"]) > 1500, "{}", r["read"]);
        u(&r["read"]["lat_ns"]["mean"]) as f64
    };
    let ssd_mean = mean("intel_x25m_80gb", "0.35");
    let disk_mean = mean("ibm_0661_467", "45");
    assert!((ssd_mean - ssd_ns).abs() < 1.0, "{ssd_mean} vs {ssd_ns}");
    let ratio = disk_mean / ssd_mean;
    assert!(
        (ratio / expect - 1.0).abs() < 0.05,
        "disk {disk_mean} ns / SSD {ssd_mean} ns = {ratio:.1}, expected {expect:.1}"
    );
    assert!(ratio > 50.0, "{ratio}");
}

/// A small SSD (an X25-M cut to 2 channels of 2 dies of 32 blocks) written at random:
/// half its spare flash costs no collection; four times its capacity brings garbage
/// collection, whose copies show as write amplification in the JSON, and the run
/// replays byte for byte.
#[test]
fn random_writes_past_the_spare_flash_show_write_amplification() {
    let dir = tempdir();
    let c = config(
        dir.path(),
        "small-ssd.toml",
        r#"
disk = "small"

[disks.small]
preset = "intel_x25m_80gb"
channels = 2
dies_per_channel = 2
pages_per_block = 32
blocks_per_die = 32
over_provisioning_percent = 25.0
"#,
    );
    let run = |extra: &[&str]| {
        let mut args = vec![
            "sim",
            p(&c),
            "--rw",
            "randwrite",
            "--iodepth",
            "8",
            "--json",
        ];
        args.extend(extra);
        let out = ok(&args);
        assert_eq!(out, ok(&args), "replays");
        serde_json::from_str::<Value>(&out).expect("json")
    };
    // 4096 pages of flash; 4096 / 1.25 = 3276 for the host, 820 spare. 400 writes
    // spend half of it.
    let fresh = run(&["--size", "1600K"]);
    let f = &fresh["components"][0];
    assert_eq!(f["kind"], "ssd");
    assert_eq!(f["ssd"]["erases"], 0);
    assert_eq!(f["ssd"]["write_amplification"], 1.0);
    // 20 simulated seconds over 12 MiB: the drive is written over many times.
    let worn = run(&["--size", "12M", "--runtime", "20"]);
    let w = &worn["components"][0];
    let wa = w["ssd"]["write_amplification"].as_f64().expect("wa");
    assert!(u(&w["ssd"]["erases"]) > 0 && wa > 1.5, "{w}");
    assert_eq!(
        u(&w["ssd"]["page_programs"]),
        u(&worn["write"]["requests"]),
        "one program a page written"
    );
    assert!(
        u(&worn["write"]["requests"]) > 4 * 3276,
        "{}",
        worn["write"]
    );
    let lat = |r: &Value| u(&r["write"]["lat_ns"]["mean"]);
    assert!(lat(&worn) > lat(&fresh), "collection makes writes wait");
}

/// Each bad SSD configuration gets one line naming the key.
#[test]
fn bad_ssd_configurations_get_one_line_naming_the_key() {
    let dir = tempdir();
    let ssd =
        |extra: &str| format!("disk = \"s\"\n[disks.s]\npreset = \"intel_x25m_80gb\"\n{extra}");
    let cases = [
        (
            ssd("rpm = 7200"),
            "`rpm` does not apply to preset `intel_x25m_80gb`, an SSD",
        ),
        (
            "disk = \"d\"\n[disks.d]\npreset = \"seagate_st118273\"\nchannels = 4".to_string(),
            "`channels` does not apply to preset `seagate_st118273`, a disk",
        ),
        (ssd("chanels = 4"), "line 4: unknown field `chanels`"),
        (ssd("channels = 0"), "channels must be at least 1"),
        (ssd("queue_depth = 0"), "queue_depth must be at least 1"),
        (ssd("page_bytes = 1000"), "a page of 1000 bytes"),
        (
            ssd("over_provisioning_percent = -1.0"),
            "`over_provisioning_percent` = -1",
        ),
        (
            ssd("over_provisioning_percent = 0.01"),
            "raise over_provisioning_percent",
        ),
        (ssd("page_read_us = -5.0"), "`page_read_us` = -5"),
        (ssd("block_erase_ms = nan"), "`block_erase_ms` = NaN"),
        (ssd("channel_mb_s = 0.0"), "`channel_mb_s` = 0"),
        (
            ssd("blocks_per_die = 4294967295"),
            "beyond the model's limit",
        ),
        (
            "disk = \"intel_x25m_8Ogb\"".to_string(),
            "unknown disk `intel_x25m_8Ogb`",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let c = config(dir.path(), &format!("bad{i}.toml"), text);
        let err = fails(&["sim", p(&c), "--size", "1M"]);
        assert!(err.contains(want), "case {i}: want {want:?} in {err}");
        assert_eq!(err.lines().count(), 1, "case {i}: one line: {err}");
    }
    let help = ok(&["sim", "--help"]);
    assert!(
        help.contains("SSD") && help.contains("over-provisioning"),
        "{help}"
    );
}

/// A 4-member RAID-5 of the small IBM 0661, fast to rebuild whole.
const SMALL_RAID5: &str = r#"
[array]
level = "raid5"
chunk_kib = 512
members = ["ibm_0661_467", "ibm_0661_467", "ibm_0661_467", "ibm_0661_467"]
"#;

#[test]
fn a_simulated_rebuild_reports_its_rate_against_one_members_drive() {
    let dir = tempdir();
    let c = config(dir.path(), "r5.toml", SMALL_RAID5);
    // Alone: no workload, the rebuild's end ends the run.
    let v = json(&["sim", p(&c), "--rebuild", "2", "--json"]);
    assert!(v["workload"].is_null(), "{v}");
    let rb = &v["rebuild"];
    assert_eq!(u(&rb["role"]), 2);
    let member = u(&rb["member_bytes"]);
    assert!(member > 300_000_000, "{rb}");
    let (rate, read, write) = (
        rb["mb_s"].as_f64().unwrap_or(0.0),
        rb["member_read_mb_s"].as_f64().unwrap_or(0.0),
        rb["member_write_mb_s"].as_f64().unwrap_or(0.0),
    );
    // The rebuild writes the whole member and reads the three others whole.
    let disk = |i: usize| &v["components"][i];
    assert_eq!(u(&disk(2)["reads"]), 0, "{v}");
    assert!(u(&disk(2)["writes"]) > 0 && u(&disk(0)["reads"]) > 0, "{v}");
    assert!(rate > 0.0 && rate <= 1.05 * read.min(write), "{rb}");
    assert_eq!(
        rb["vs_member_slower"].as_f64(),
        Some(((rate / read.min(write)) * 1000.0).round() / 1000.0),
        "{rb}"
    );
    assert_eq!(u(&rb["unrecoverable_units"]), 0);
    assert!(rb["done_with_workload_bytes"].is_null(), "{rb}");
    assert!(rb["max_mb_s"].is_null(), "{rb}");
    // 0 is no cap, as on serve.
    let text = ok(&["sim", p(&c), "--rebuild", "1", "--rebuild-max", "0"]);
    assert!(text.contains("no workload; no pace cap"), "{text}");
    // Beside a workload, capped: the writes all succeed, the rebuild goes on after.
    let args = [
        "sim",
        p(&c),
        "--rebuild",
        "0",
        "--rebuild-min",
        "1",
        "--rebuild-max",
        "1",
        "--rw",
        "randwrite",
        "--iodepth",
        "4",
        "--runtime",
        "2",
    ];
    let text = ok(&args);
    assert!(text.contains("rebuild of member 0:"), "{text}");
    assert!(
        text.contains("rebuilt by the workload's end; pace 1 to 1 MB/s"),
        "{text}"
    );
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let v = json(&with_json);
    assert_eq!(u(&v["errors"]), 0, "{v}");
    let rb = &v["rebuild"];
    let done = u(&rb["done_with_workload_bytes"]);
    assert!(
        (1_500_000..3_000_000).contains(&done),
        "1 MB/s for 2 s: {rb}"
    );
    // Capped at 1 MB/s throughout: the whole member takes member_bytes / 1 MB/s.
    let secs = u(&rb["duration_ns"]) as f64 / 1e9;
    let expect = member as f64 / 1e6;
    assert!(
        (secs - expect).abs() < 0.05 * expect,
        "{secs} s for {expect} s: {rb}"
    );
    // And the same run prints the same bytes.
    assert_eq!(json(&with_json), v);
}

#[test]
fn a_rebuild_that_cannot_be_simulated_gets_one_line() {
    let dir = tempdir();
    let d = dir.path();
    let r5 = config(d, "r5.toml", SMALL_RAID5);
    let one = config(d, "one.toml", ONE_DISK);
    let r0 = config(d, "r0.toml", RAID0_3);
    for (c, role, want) in [
        (&r5, "4", "the array has members 0 to 3, not 4"),
        (&one, "0", "a plain disk has no array"),
        (&r0, "0", "RAID-0 has no redundancy to rebuild"),
    ] {
        let err = fails(&["sim", p(c), "--rebuild", role]);
        assert!(err.contains(want), "want {want:?} in {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    let err = fails(&[
        "sim",
        p(&r5),
        "--rebuild",
        "1",
        "--rebuild-min",
        "5",
        "--rebuild-max",
        "2",
    ]);
    assert!(
        err.contains("--rebuild-min 5 is above --rebuild-max 2") && err.lines().count() == 1,
        "{err}"
    );
    let out = xraid()
        .args(["sim", p(&r5), "--size", "1M", "--rebuild-min", "5"])
        .output()
        .expect("xraid runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--rebuild"), "{err}");
}
