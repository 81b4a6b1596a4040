//! The shipped presets load, and every way a presets file can be wrong is refused
//! with its own error.

use crate::preset::{PresetError, Presets};
use crate::Scheduler;

#[test]
fn builtin_presets_load_and_build() {
    let presets = Presets::builtin().unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = presets.disks.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "fujitsu_m2344k",
            "fujitsu_m2351a_eagle",
            "fujitsu_map3367nc",
            "ibm_0661_467",
            "seagate_st118273"
        ]
    );
    for p in presets.disks.values() {
        let model = p.model().unwrap_or_else(|e| panic!("{e}"));
        assert!(model.sectors() > 0);
        // Every value has a source, and every assumed one says so.
        for key in &p.assumed {
            let source = &p.sources[key];
            assert!(source.starts_with("assumed"), "{}: {key}: {source}", p.key);
        }
    }
    let ibm = presets
        .disk("ibm_0661_467")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ibm.params.rpm, 4316);
    assert_eq!(ibm.params.buffer_bytes, 128 * 1024);
    let st = presets
        .disk("seagate_st118273")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(st.params.scheduler, Scheduler::Sptf);
    assert!(st.params.write_back);
    assert_eq!(presets.buses["scsi2_fast_wide"].bytes_per_sec, 20_000_000);
}

/// A small valid preset; tests change one thing at a time.
const GOOD: &str = r#"
[disk.d]
name = "test disk"
rpm = 5400
heads = 4
cylinders = 1000
sectors_per_track = 100
seek_track_to_track_ms = 2.0
seek_average_ms = 10.0
seek_full_stroke_ms = 20.0
head_switch_ms = 1.0
command_overhead_ms = 0.5
interface_mb_s = 10.0
buffer_kib = 256
assumed = ["head_switch_ms"]
[disk.d.source]
rpm = "sheet"
heads = "sheet"
cylinders = "sheet"
sectors_per_track = "sheet"
seek_track_to_track_ms = "sheet"
seek_average_ms = "sheet"
seek_full_stroke_ms = "sheet"
head_switch_ms = "assumed: typical"
command_overhead_ms = "sheet"
interface_mb_s = "sheet"
buffer_kib = "sheet"
"#;

fn with(from: &str, to: &str) -> Result<Presets, PresetError> {
    assert!(GOOD.contains(from), "test edits a line GOOD has: {from}");
    Presets::parse(&GOOD.replacen(from, to, 1))
}

fn err(from: &str, to: &str) -> PresetError {
    match with(from, to) {
        Ok(_) => panic!("accepted after replacing {from:?} with {to:?}"),
        Err(e) => e,
    }
}

#[test]
fn the_good_preset_is_good() {
    let p = Presets::parse(GOOD).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.disk("d").map(|d| d.params.heads).ok(), Some(4));
}

#[test]
fn malformed_toml_and_unknown_keys_are_refused() {
    assert!(matches!(err("rpm = 5400", "rpm = "), PresetError::Parse(_)));
    let e = err("rpm = 5400", "rpm = 5400\nrmp = 1");
    assert!(
        matches!(&e, PresetError::Parse(m) if m.contains("rmp")),
        "{e}"
    );
}

/// GOOD without `key`'s value and source lines.
fn without(key: &str) -> Result<Presets, PresetError> {
    let prefix = format!("{key} = ");
    let text: String = GOOD
        .lines()
        .filter(|l| !l.starts_with(&prefix))
        .map(|l| format!("{l}\n"))
        .collect();
    Presets::parse(&text)
}

#[test]
fn a_missing_value_is_named() {
    let e = without("rpm").err();
    assert!(
        matches!(e, Some(PresetError::Missing { key: "rpm", .. })),
        "{e:?}"
    );
    let e = without("sectors_per_track").err();
    assert!(
        matches!(
            e,
            Some(PresetError::Missing {
                key: "sectors_per_track",
                ..
            })
        ),
        "{e:?}"
    );
}

#[test]
fn every_value_needs_a_source() {
    let e = err("rpm = \"sheet\"\n", "");
    assert!(
        matches!(&e, PresetError::NoSource { key, .. } if key == "rpm"),
        "{e}"
    );
    let e = err("rpm = \"sheet\"\n", "rpm = \"sheet\"\nzones = \"sheet\"\n");
    assert!(
        matches!(&e, PresetError::StraySource { key, .. } if key == "zones"),
        "{e}"
    );
    let e = err(
        "assumed = [\"head_switch_ms\"]",
        "assumed = [\"cylinder_switch_ms\"]",
    );
    assert!(
        matches!(&e, PresetError::AssumedAbsent { key, .. } if key == "cylinder_switch_ms"),
        "{e}"
    );
}

#[test]
fn values_out_of_their_domain_are_refused() {
    let e = err("head_switch_ms = 1.0", "head_switch_ms = -1.0");
    assert!(
        matches!(
            e,
            PresetError::BadValue {
                key: "head_switch_ms",
                ..
            }
        ),
        "{e}"
    );
    let e = err("head_switch_ms = 1.0", "head_switch_ms = nan");
    assert!(
        matches!(
            e,
            PresetError::BadValue {
                key: "head_switch_ms",
                ..
            }
        ),
        "{e}"
    );
    let e = err("interface_mb_s = 10.0", "interface_mb_s = 0.0");
    assert!(
        matches!(
            e,
            PresetError::BadValue {
                key: "interface_mb_s",
                ..
            }
        ),
        "{e}"
    );
    let e = with_figure("scheduler = \"elevator\"").err();
    assert!(
        matches!(
            e,
            Some(PresetError::BadValue {
                key: "scheduler",
                ..
            })
        ),
        "{e:?}"
    );
    assert!(with_figure("scheduler = \"sptf\"").is_ok());
}

#[test]
fn two_formats_at_once_are_refused() {
    let e = with_figure("zones = [{ cylinders = 10, sectors_per_track = 10 }]").err();
    assert!(matches!(e, Some(PresetError::TwoFormats { .. })), "{e:?}");
}

#[test]
fn the_model_refuses_what_it_cannot_build() {
    let e = err("seek_average_ms = 10.0", "seek_average_ms = 30.0");
    assert!(matches!(e, PresetError::Model { .. }), "{e}");
    let e = err("heads = 4", "heads = 0");
    assert!(matches!(e, PresetError::Model { .. }), "{e}");
}

/// GOOD with one more value line, and its source line.
/// A sheet figure the loader checks: its line and its source line.
fn with_figure(line: &str) -> Result<Presets, PresetError> {
    let key = line.split(' ').next().unwrap_or_default();
    let text = GOOD
        .replacen(
            "buffer_kib = 256\n",
            &format!("buffer_kib = 256\n{line}\n"),
            1,
        )
        .replacen(
            "buffer_kib = \"sheet\"\n",
            &format!("buffer_kib = \"sheet\"\n{key} = \"sheet\"\n"),
            1,
        );
    Presets::parse(&text)
}

#[test]
fn a_sheet_that_contradicts_its_format_is_refused() {
    // 1000 x 4 x 100 sectors.
    assert!(with_figure("sectors_total = 400000").is_ok());
    let e = with_figure("sectors_total = 400001").err();
    assert!(matches!(e, Some(PresetError::Inconsistent { .. })), "{e:?}");
    // 100 sectors at 5400 rpm move 4.608 MB/s.
    assert!(with_figure("media_rate_mb_s = 5.0").is_ok());
    let e = with_figure("media_rate_mb_s = 4.0").err();
    assert!(matches!(e, Some(PresetError::Inconsistent { .. })), "{e:?}");
    // A sector passes in 11.11 ms / 100 = 111.1 us; half a turn is 5.556 ms.
    assert!(with_figure("sector_time_us = 111.1").is_ok());
    let e = with_figure("sector_time_us = 120.0").err();
    assert!(matches!(e, Some(PresetError::Inconsistent { .. })), "{e:?}");
    assert!(with_figure("average_rotational_latency_ms = 5.56").is_ok());
    let e = with_figure("average_rotational_latency_ms = 4.17").err();
    assert!(matches!(e, Some(PresetError::Inconsistent { .. })), "{e:?}");
}

#[test]
fn unknown_presets_and_unreadable_files_are_named() {
    let p = Presets::parse(GOOD).unwrap_or_else(|e| panic!("{e}"));
    let e = p.disk("nope").err();
    assert!(
        matches!(&e, Some(PresetError::Unknown { known, .. }) if known == "d"),
        "{e:?}"
    );
    let e = Presets::load(std::path::Path::new("/nonexistent/disks.toml")).err();
    assert!(matches!(e, Some(PresetError::Read { .. })), "{e:?}");
    let e = Presets::parse("[bus.b]\nrate_mb_s = 0.0\nsource = \"x\"\n").err();
    assert!(matches!(e, Some(PresetError::BadBus { .. })), "{e:?}");
}

#[test]
fn the_ssd_preset_loads_with_a_source_for_every_value() {
    let presets = Presets::builtin().unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = presets.ssds.keys().map(String::as_str).collect();
    assert_eq!(names, ["intel_x25m_80gb"]);
    let x25 = presets
        .ssd("intel_x25m_80gb")
        .unwrap_or_else(|e| panic!("{e}"));
    let model = x25.model().unwrap_or_else(|e| panic!("{e}"));
    // 40 dies of 4096 blocks of 128 pages of 4 KiB: 80 GiB of flash, of which the
    // host sees at least the sheet's 80 GB.
    assert_eq!(model.physical_pages() * 4096, 80 << 30);
    assert!(model.sectors() >= 156_301_488);
    for key in &x25.assumed {
        let source = &x25.sources[key];
        assert!(source.starts_with("assumed"), "{key}: {source}");
    }
    assert!(presets.known().contains("intel_x25m_80gb"));
}

/// A small valid SSD preset; tests change one thing at a time.
const GOOD_SSD: &str = r#"
[ssd.s]
name = "test ssd"
channels = 2
dies_per_channel = 2
page_bytes = 4096
pages_per_block = 64
blocks_per_die = 128
over_provisioning_percent = 7.0
page_read_us = 50.0
page_program_us = 900.0
block_erase_ms = 3.5
channel_mb_s = 40.0
command_overhead_ms = 0.01
interface_mb_s = 300.0
sectors_total = 244992
assumed = ["command_overhead_ms"]
[ssd.s.source]
channels = "sheet"
dies_per_channel = "sheet"
page_bytes = "sheet"
pages_per_block = "sheet"
blocks_per_die = "sheet"
over_provisioning_percent = "sheet"
page_read_us = "sheet"
page_program_us = "sheet"
block_erase_ms = "sheet"
channel_mb_s = "sheet"
command_overhead_ms = "assumed: typical"
interface_mb_s = "sheet"
sectors_total = "sheet"
"#;

fn ssd_err(from: &str, to: &str) -> PresetError {
    assert!(
        GOOD_SSD.contains(from),
        "test edits a line GOOD_SSD has: {from}"
    );
    match Presets::parse(&GOOD_SSD.replacen(from, to, 1)) {
        Ok(_) => panic!("accepted after replacing {from:?} with {to:?}"),
        Err(e) => e,
    }
}

#[test]
fn bad_ssd_presets_are_refused() {
    let p = Presets::parse(GOOD_SSD).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.ssd("s").map(|s| s.params.queue_depth).ok(), Some(1));
    let text: String = GOOD_SSD
        .lines()
        .filter(|l| !l.starts_with("channels = "))
        .map(|l| format!("{l}\n"))
        .collect();
    let e = Presets::parse(&text).err();
    assert!(
        matches!(
            &e,
            Some(PresetError::Missing {
                key: "channels",
                ..
            })
        ),
        "{e:?}"
    );
    let e = ssd_err("page_read_us = \"sheet\"\n", "");
    assert!(
        matches!(&e, PresetError::NoSource { key, .. } if key == "page_read_us"),
        "{e}"
    );
    let e = ssd_err(
        "over_provisioning_percent = 7.0",
        "over_provisioning_percent = -3.0",
    );
    assert!(
        matches!(
            &e,
            PresetError::BadValue {
                key: "over_provisioning_percent",
                ..
            }
        ),
        "{e}"
    );
    let e = ssd_err(
        "over_provisioning_percent = 7.0",
        "over_provisioning_percent = 1.0",
    );
    assert!(matches!(&e, PresetError::SsdModel { .. }), "{e}");
    let e = ssd_err("page_bytes = 4096", "page_bytes = 4000");
    assert!(matches!(&e, PresetError::SsdModel { .. }), "{e}");
    let e = ssd_err("channel_mb_s = 40.0", "channel_mb_s = 0.0");
    assert!(
        matches!(
            &e,
            PresetError::BadValue {
                key: "channel_mb_s",
                ..
            }
        ),
        "{e}"
    );
    // 4 dies x 128 blocks x 64 pages / 1.07 = 30,624 pages = 244,992 sectors.
    let e = ssd_err("sectors_total = 244992", "sectors_total = 244993");
    assert!(matches!(&e, PresetError::Inconsistent { .. }), "{e}");
    let e = ssd_err("name = \"test ssd\"", "name = \"test ssd\"\nrpm = 7200");
    assert!(
        matches!(&e, PresetError::Parse(m) if m.contains("rpm")),
        "{e}"
    );
    let clash = format!("{GOOD}\n{}", GOOD_SSD.replace("ssd.s", "ssd.d"));
    let e = Presets::parse(&clash).err();
    assert!(
        matches!(&e, Some(PresetError::Clash { name }) if name == "d"),
        "{e:?}"
    );
}
