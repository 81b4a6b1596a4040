//! The configuration `xraid sim` runs: disks (presets, with any of their parameters
//! overridden) and either one plain disk or an array on them, read from TOML and
//! checked once, so that a bad file gets one line naming the key and the fix.
//!
//! ```toml
//! [disks.fast]                 # a drive type: a disk or SSD preset with overrides
//! preset = "seagate_st118273"
//! queue_depth = 1              # any key of presets/disks.toml for its kind
//!
//! [array]                      # or, for one disk: disk = "fast"
//! level = "raid5"
//! chunk_kib = 64
//! layout = "left-symmetric"
//! members = ["fast", "fast", "fast", "seagate_st118273"]
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use xraid_engine::Nanos;
use xraid_layout::{Layout, LayoutError, Level, SECTOR_BYTES};

use crate::config_ssd::{kind_mismatch, ssd_keys_given, ssd_model};
use crate::controller::{ControllerParams, StringParams, Topology};
use crate::drive::DriveModel;
use crate::driver::{ArraySpec, RunError, SimArray};
use crate::geometry::Zone;
use crate::params::{DiskParams, ParamError, Scheduler};
use crate::preset::Presets;
use crate::ssd_params::SsdParamError;

/// md's default chunk (mdadm's 512K), used when `chunk_kib` is not given.
const DEFAULT_CHUNK_KIB: u64 = 512;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    disks: BTreeMap<String, DiskEntry>,
    disk: Option<String>,
    /// The string of the one disk.
    string: Option<String>,
    array: Option<ArrayEntry>,
    #[serde(default)]
    buses: BTreeMap<String, LinkEntry>,
    #[serde(default)]
    controllers: BTreeMap<String, ControllerEntry>,
    #[serde(default)]
    strings: BTreeMap<String, StringEntry>,
}

/// A `[buses.NAME]` table: a host bus's rate, from a bus preset or given.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkEntry {
    preset: Option<String>,
    rate_mb_s: Option<f64>,
}

/// A `[strings.NAME]` table: its controller and its rate.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StringEntry {
    controller: String,
    preset: Option<String>,
    rate_mb_s: Option<f64>,
}

/// A `[controllers.NAME]` table: its bus, data path, overhead, cache and policies.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ControllerEntry {
    bus: Option<String>,
    rate_mb_s: Option<f64>,
    overhead_ms: Option<f64>,
    cache_kib: Option<u64>,
    search: Option<bool>,
    save_reads: Option<bool>,
    save_writes: Option<bool>,
    read_ahead_kib: Option<u64>,
    read_ahead_across_head: Option<bool>,
    read_ahead_across_cylinder: Option<bool>,
    sort_reads: Option<bool>,
    sort_writes: Option<bool>,
    flush_on_write: Option<bool>,
}

/// One `[disks.NAME]` table: a preset (a disk's or an SSD's) and the values that
/// differ from it, with the presets file's key names and units.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiskEntry {
    pub(crate) preset: String,
    rpm: Option<u32>,
    heads: Option<u32>,
    cylinders: Option<u32>,
    sectors_per_track: Option<u32>,
    zones: Option<Vec<ZoneEntry>>,
    spare_sectors_per_track: Option<u32>,
    head_skew_sectors: Option<u32>,
    cylinder_skew_sectors: Option<u32>,
    seek_track_to_track_ms: Option<f64>,
    seek_average_ms: Option<f64>,
    seek_full_stroke_ms: Option<f64>,
    write_settle_extra_ms: Option<f64>,
    head_switch_ms: Option<f64>,
    cylinder_switch_ms: Option<f64>,
    pub(crate) command_overhead_ms: Option<f64>,
    pub(crate) interface_mb_s: Option<f64>,
    buffer_kib: Option<u64>,
    cache_segments: Option<u32>,
    read_ahead_kib: Option<u64>,
    write_back: Option<bool>,
    pub(crate) queue_depth: Option<u32>,
    scheduler: Option<String>,
    zero_latency: Option<bool>,
    // An SSD's keys (refused on a disk preset).
    pub(crate) channels: Option<u32>,
    pub(crate) dies_per_channel: Option<u32>,
    pub(crate) page_bytes: Option<u32>,
    pub(crate) pages_per_block: Option<u32>,
    pub(crate) blocks_per_die: Option<u32>,
    pub(crate) over_provisioning_percent: Option<f64>,
    pub(crate) page_read_us: Option<f64>,
    pub(crate) page_program_us: Option<f64>,
    pub(crate) block_erase_ms: Option<f64>,
    pub(crate) channel_mb_s: Option<f64>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct ZoneEntry {
    cylinders: u32,
    sectors_per_track: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArrayEntry {
    level: String,
    chunk_kib: Option<u64>,
    layout: Option<String>,
    members: Vec<String>,
    /// The string of each member, in member order.
    strings: Option<Vec<String>>,
}

/// A drive of the configuration: the name it was given, its preset, its model.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedDisk {
    /// The `[disks.NAME]` name, or the preset's when the preset is named directly.
    pub name: String,
    pub preset: String,
    pub model: DriveModel,
}

/// What the configuration runs on.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// One plain disk: requests reach it as they are.
    Disk(NamedDisk),
    /// An array run by the engine; members in role order.
    Array {
        spec: ArraySpec,
        members: Vec<NamedDisk>,
    },
}

/// A checked configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub target: Target,
    /// Strings, controllers and host buses (None: each disk on its own link).
    pub topology: Option<Topology>,
    /// Their names (and the bus preset of strings and buses given by one), by index.
    pub string_names: Vec<(String, Option<String>)>,
    pub controller_names: Vec<String>,
    pub bus_names: Vec<(String, Option<String>)>,
}

/// Why a configuration was refused; each message names the key and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// Not TOML, an unknown key, or a value of the wrong type.
    #[error("line {line}: {message}")]
    Parse { line: usize, message: String },
    /// Neither a disk nor an array.
    #[error("nothing to simulate: give `disk = \"NAME\"` for one disk or an [array] table")]
    NoTarget,
    /// Both a disk and an array.
    #[error("both `disk` and [array] are given: keep one")]
    TwoTargets,
    /// A name that is neither a `[disks]` table nor a preset.
    #[error("unknown disk `{name}`: name a [disks.NAME] table of the configuration or a preset ({known})")]
    UnknownDisk { name: String, known: String },
    /// A `[disks]` table names no preset.
    #[error("[disks.{disk}]: unknown preset `{preset}`; known: {known}")]
    UnknownPreset {
        disk: String,
        preset: String,
        known: String,
    },
    /// A value out of its domain.
    #[error("[disks.{disk}]: `{key}` = {value} is not valid: {why}")]
    BadValue {
        disk: String,
        key: &'static str,
        value: String,
        why: &'static str,
    },
    /// Single-zone keys on a zoned preset.
    #[error("[disks.{disk}]: preset `{preset}` has {zones} zones: override `zones`, not `cylinders` or `sectors_per_track`")]
    Zoned {
        disk: String,
        preset: String,
        zones: usize,
    },
    /// Both a zone list and single-zone keys.
    #[error(
        "[disks.{disk}]: both `zones` and `cylinders`/`sectors_per_track` are given: keep one"
    )]
    TwoFormats { disk: String },
    /// The disk model refuses the parameters.
    #[error("[disks.{disk}]: {source}")]
    Model { disk: String, source: ParamError },
    /// The SSD model refuses the parameters.
    #[error("[disks.{disk}]: {source}")]
    SsdModel { disk: String, source: SsdParamError },
    /// A key of the other kind of drive.
    #[error(
        "[disks.{disk}]: `{key}` does not apply to preset `{preset}`, {kind}; its keys are: {keys}"
    )]
    WrongKind {
        disk: String,
        key: &'static str,
        preset: String,
        kind: &'static str,
        keys: String,
    },
    /// The RAID level or layout.
    #[error("[array] {0}")]
    Level(LayoutError),
    /// The chunk size.
    #[error("[array] chunk_kib = {0} is not a power of two from 4 to 16384: use e.g. 64 or 512")]
    Chunk(u64),
    /// The array cannot be built on those disks.
    #[error("[array]: {0}")]
    Array(RunError),
    /// A string, controller or host bus, or a disk's place on them.
    #[error("{0}")]
    Topology(String),
}

impl SimConfig {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path, presets: &Presets) -> Result<SimConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        SimConfig::parse(&text, presets)
    }

    /// Checks the text of a configuration.
    pub fn parse(text: &str, presets: &Presets) -> Result<SimConfig, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| parse_error(text, &e))?;
        let mut models = BTreeMap::new();
        for (name, entry) in &file.disks {
            models.insert(name.clone(), disk_model(name, entry, presets)?);
        }
        let resolve = |name: &str| -> Result<NamedDisk, ConfigError> {
            if let Some((preset, model)) = models.get(name) {
                return Ok(NamedDisk {
                    name: name.to_string(),
                    preset: preset.clone(),
                    model: model.clone(),
                });
            }
            let model = if let Some(p) = presets.disks.get(name) {
                DriveModel::Disk(p.params.build().map_err(|source| ConfigError::Model {
                    disk: name.to_string(),
                    source,
                })?)
            } else if let Some(p) = presets.ssds.get(name) {
                DriveModel::Ssd(p.params.build().map_err(|source| ConfigError::SsdModel {
                    disk: name.to_string(),
                    source,
                })?)
            } else {
                return Err(ConfigError::UnknownDisk {
                    name: name.to_string(),
                    known: known(presets),
                });
            };
            Ok(NamedDisk {
                name: name.to_string(),
                preset: name.to_string(),
                model,
            })
        };
        let (topology, names) = topology(&file, presets)?;
        let target = match (&file.disk, &file.array) {
            (None, None) => return Err(ConfigError::NoTarget),
            (Some(_), Some(_)) => return Err(ConfigError::TwoTargets),
            (Some(d), None) => Target::Disk(resolve(d)?),
            (None, Some(a)) => {
                let level: Level = a.level.parse().map_err(ConfigError::Level)?;
                let layout = match &a.layout {
                    None => Layout::default_for(level),
                    Some(l) => Layout::parse(level, l).map_err(ConfigError::Level)?,
                };
                let kib = a.chunk_kib.unwrap_or(DEFAULT_CHUNK_KIB);
                if !kib.is_power_of_two() || !(4..=16384).contains(&kib) {
                    return Err(ConfigError::Chunk(kib));
                }
                let members = a
                    .members
                    .iter()
                    .map(|m| resolve(m))
                    .collect::<Result<Vec<_>, _>>()?;
                let spec = ArraySpec {
                    level,
                    layout,
                    disks: u16::try_from(members.len()).unwrap_or(u16::MAX),
                    chunk_sectors: (kib * 1024 / SECTOR_BYTES) as u32,
                };
                let config = SimConfig {
                    target: Target::Array { spec, members },
                    topology,
                    string_names: names.0,
                    controller_names: names.1,
                    bus_names: names.2,
                };
                // Building the array checks member count, level and size now, so a
                // bad file is refused before any workload is looked at.
                config.build()?;
                return Ok(config);
            }
        };
        let config = SimConfig {
            target,
            topology,
            string_names: names.0,
            controller_names: names.1,
            bus_names: names.2,
        };
        config.build()?;
        Ok(config)
    }

    /// The simulated disks (and the array on them) ready to run.
    pub fn build(&self) -> Result<SimArray, ConfigError> {
        let mut sim = match &self.target {
            Target::Disk(d) => SimArray::single_drive(d.model.clone()),
            Target::Array { spec, members } => {
                let models = members.iter().map(|m| m.model.clone()).collect();
                SimArray::with_drives(*spec, models).map_err(|e| match e {
                    RunError::Layout(l) => ConfigError::Level(l),
                    other => ConfigError::Array(other),
                })?
            }
        };
        if let Some(t) = &self.topology {
            sim.set_topology(t.clone())
                .map_err(|e| ConfigError::Topology(e.to_string()))?;
        }
        Ok(sim)
    }

    /// The disks in target order.
    pub fn disks(&self) -> Vec<&NamedDisk> {
        match &self.target {
            Target::Disk(d) => vec![d],
            Target::Array { members, .. } => members.iter().collect(),
        }
    }
}

fn known(presets: &Presets) -> String {
    presets.known()
}

/// toml's message on one line, with the line it points at.
fn parse_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let line = e.span().map_or(1, |s| {
        text[..s.start.min(text.len())].matches('\n').count() + 1
    });
    let message = e
        .message()
        .lines()
        .next()
        .unwrap_or("malformed")
        .to_string();
    ConfigError::Parse { line, message }
}

/// The preset named by `entry` with its overrides applied, and its model.
fn disk_model(
    name: &str,
    e: &DiskEntry,
    presets: &Presets,
) -> Result<(String, DriveModel), ConfigError> {
    let Some(preset) = presets.disks.get(&e.preset) else {
        if let Some(ssd) = presets.ssds.get(&e.preset) {
            return Ok((e.preset.clone(), DriveModel::Ssd(ssd_model(name, e, ssd)?)));
        }
        return Err(ConfigError::UnknownPreset {
            disk: name.to_string(),
            preset: e.preset.clone(),
            known: known(presets),
        });
    };
    if let Some(key) = ssd_keys_given(e).first() {
        return Err(kind_mismatch(name, key, &e.preset, "a disk", &disk_keys()));
    }
    let mut p: DiskParams = preset.params.clone();
    let bad = |key: &'static str, value: String, why: &'static str| ConfigError::BadValue {
        disk: name.to_string(),
        key,
        value,
        why,
    };
    let ms = |key: &'static str, v: Option<f64>| -> Result<Option<Nanos>, ConfigError> {
        match v {
            None => Ok(None),
            Some(ms) if ms.is_finite() && (0.0..3_600_000.0).contains(&ms) => {
                Ok(Some(Nanos((ms * 1e6).round() as u64)))
            }
            Some(ms) => Err(bad(
                key,
                ms.to_string(),
                "milliseconds from 0 up to an hour",
            )),
        }
    };
    apply_format(name, &e.preset, e, &mut p)?;
    set(&mut p.rpm, e.rpm);
    set(&mut p.heads, e.heads);
    set(&mut p.spare_sectors_per_track, e.spare_sectors_per_track);
    if e.head_skew_sectors.is_some() {
        p.head_skew_sectors = e.head_skew_sectors;
    }
    if e.cylinder_skew_sectors.is_some() {
        p.cylinder_skew_sectors = e.cylinder_skew_sectors;
    }
    set(
        &mut p.seek_track_to_track,
        ms("seek_track_to_track_ms", e.seek_track_to_track_ms)?,
    );
    set(
        &mut p.seek_average,
        ms("seek_average_ms", e.seek_average_ms)?,
    );
    set(
        &mut p.seek_full_stroke,
        ms("seek_full_stroke_ms", e.seek_full_stroke_ms)?,
    );
    set(
        &mut p.write_settle_extra,
        ms("write_settle_extra_ms", e.write_settle_extra_ms)?,
    );
    set(&mut p.head_switch, ms("head_switch_ms", e.head_switch_ms)?);
    if let Some(c) = ms("cylinder_switch_ms", e.cylinder_switch_ms)? {
        p.cylinder_switch = Some(c);
    }
    set(
        &mut p.command_overhead,
        ms("command_overhead_ms", e.command_overhead_ms)?,
    );
    if let Some(rate) = e.interface_mb_s {
        if !(rate.is_finite() && rate > 0.0 && rate < 1e9) {
            return Err(bad(
                "interface_mb_s",
                rate.to_string(),
                "a positive number of MB/s",
            ));
        }
        p.interface_bytes_per_sec = (rate * 1e6).round() as u64;
    }
    set(
        &mut p.buffer_bytes,
        e.buffer_kib.map(|k| k.saturating_mul(1024)),
    );
    set(&mut p.cache_segments, e.cache_segments);
    set(
        &mut p.read_ahead_sectors,
        e.read_ahead_kib.map(|k| k.saturating_mul(2)),
    );
    set(&mut p.write_back, e.write_back);
    set(&mut p.queue_depth, e.queue_depth);
    set(&mut p.zero_latency, e.zero_latency);
    p.scheduler = match e.scheduler.as_deref() {
        None => p.scheduler,
        Some("fifo") => Scheduler::Fifo,
        Some("sptf") => Scheduler::Sptf,
        Some(other) => {
            return Err(bad(
                "scheduler",
                format!("\"{other}\""),
                "use \"fifo\" or \"sptf\"",
            ))
        }
    };
    let model = p.build().map_err(|source| ConfigError::Model {
        disk: name.to_string(),
        source,
    })?;
    Ok((e.preset.clone(), DriveModel::Disk(model)))
}

/// The disk keys `e` gives, in the presets file's order.
pub(crate) fn disk_keys_given(e: &DiskEntry) -> Vec<&'static str> {
    [
        (e.rpm.is_some(), "rpm"),
        (e.heads.is_some(), "heads"),
        (e.cylinders.is_some(), "cylinders"),
        (e.sectors_per_track.is_some(), "sectors_per_track"),
        (e.zones.is_some(), "zones"),
        (
            e.spare_sectors_per_track.is_some(),
            "spare_sectors_per_track",
        ),
        (e.head_skew_sectors.is_some(), "head_skew_sectors"),
        (e.cylinder_skew_sectors.is_some(), "cylinder_skew_sectors"),
        (e.seek_track_to_track_ms.is_some(), "seek_track_to_track_ms"),
        (e.seek_average_ms.is_some(), "seek_average_ms"),
        (e.seek_full_stroke_ms.is_some(), "seek_full_stroke_ms"),
        (e.write_settle_extra_ms.is_some(), "write_settle_extra_ms"),
        (e.head_switch_ms.is_some(), "head_switch_ms"),
        (e.cylinder_switch_ms.is_some(), "cylinder_switch_ms"),
        (e.buffer_kib.is_some(), "buffer_kib"),
        (e.cache_segments.is_some(), "cache_segments"),
        (e.read_ahead_kib.is_some(), "read_ahead_kib"),
        (e.write_back.is_some(), "write_back"),
        (e.scheduler.is_some(), "scheduler"),
        (e.zero_latency.is_some(), "zero_latency"),
    ]
    .into_iter()
    .filter_map(|(given, key)| given.then_some(key))
    .collect()
}

/// A disk's override keys, for the message that refuses an SSD key on one.
fn disk_keys() -> String {
    "rpm, heads, cylinders, sectors_per_track, zones, spare_sectors_per_track, head_skew_sectors, cylinder_skew_sectors, seek_track_to_track_ms, seek_average_ms, seek_full_stroke_ms, write_settle_extra_ms, head_switch_ms, cylinder_switch_ms, command_overhead_ms, interface_mb_s, buffer_kib, cache_segments, read_ahead_kib, write_back, queue_depth, scheduler, zero_latency".to_string()
}

fn set<T>(field: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *field = v;
    }
}

/// Applies `zones`, or `cylinders` and `sectors_per_track` to a single-zone preset.
fn apply_format(
    name: &str,
    preset: &str,
    e: &DiskEntry,
    p: &mut DiskParams,
) -> Result<(), ConfigError> {
    let single = e.cylinders.is_some() || e.sectors_per_track.is_some();
    if let Some(z) = &e.zones {
        if single {
            return Err(ConfigError::TwoFormats {
                disk: name.to_string(),
            });
        }
        p.zones = z
            .iter()
            .map(|z| Zone {
                cylinders: z.cylinders,
                sectors_per_track: z.sectors_per_track,
            })
            .collect();
    } else if single {
        if p.zones.len() != 1 {
            return Err(ConfigError::Zoned {
                disk: name.to_string(),
                preset: preset.to_string(),
                zones: p.zones.len(),
            });
        }
        set(&mut p.zones[0].cylinders, e.cylinders);
        set(&mut p.zones[0].sectors_per_track, e.sectors_per_track);
    }
    Ok(())
}

type Names = (
    Vec<(String, Option<String>)>,
    Vec<String>,
    Vec<(String, Option<String>)>,
);

/// A rate in MB/s from `preset` (a bus preset) or `rate_mb_s`, exactly one given.
fn link_rate(
    table: &str,
    preset: Option<&str>,
    rate: Option<f64>,
    presets: &Presets,
) -> Result<u64, ConfigError> {
    let known = || presets.buses.keys().cloned().collect::<Vec<_>>().join(", ");
    match (preset, rate) {
        (Some(p), None) => match presets.buses.get(p) {
            Some(b) => Ok(b.bytes_per_sec),
            None => Err(ConfigError::Topology(format!(
                "{table}: unknown bus preset `{p}`; known: {}",
                known()
            ))),
        },
        (None, Some(r)) => mb_s(table, "rate_mb_s", r),
        _ => Err(ConfigError::Topology(format!(
            "{table}: give either `preset` (one of {}) or `rate_mb_s`",
            known()
        ))),
    }
}

fn mb_s(table: &str, key: &str, r: f64) -> Result<u64, ConfigError> {
    if r.is_finite() && r > 0.0 && r < 1e9 {
        Ok((r * 1e6).round().max(1.0) as u64)
    } else {
        Err(ConfigError::Topology(format!(
            "{table}: `{key}` = {r} is not valid: a positive number of MB/s"
        )))
    }
}

/// The strings, controllers and buses of the file and each disk's string; None when
/// the file has no strings (each disk then keeps its own link to the host).
fn topology(file: &File, presets: &Presets) -> Result<(Option<Topology>, Names), ConfigError> {
    let err = |m: String| Err(ConfigError::Topology(m));
    let index = |names: Vec<&String>, name: &str| names.iter().position(|n| *n == name);
    let list = |names: Vec<&String>| {
        if names.is_empty() {
            "none".to_string()
        } else {
            names
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut buses = Vec::new();
    for (name, b) in &file.buses {
        let table = format!("[buses.{name}]");
        buses.push(link_rate(
            &table,
            b.preset.as_deref(),
            b.rate_mb_s,
            presets,
        )?);
    }
    let mut controllers = Vec::new();
    for (name, c) in &file.controllers {
        let table = format!("[controllers.{name}]");
        let bus = match &c.bus {
            None => None,
            Some(b) => match index(file.buses.keys().collect(), b) {
                Some(i) => Some(i),
                None => {
                    return err(format!(
                        "{table}: unknown bus `{b}`; the [buses] are: {}",
                        list(file.buses.keys().collect())
                    ))
                }
            },
        };
        let overhead = match c.overhead_ms {
            None => Nanos(0),
            Some(ms) if ms.is_finite() && (0.0..3_600_000.0).contains(&ms) => {
                Nanos((ms * 1e6).round() as u64)
            }
            Some(ms) => {
                return err(format!(
                    "{table}: `overhead_ms` = {ms} is not valid: milliseconds from 0 up to an hour"
                ))
            }
        };
        let cache_kib = c.cache_kib.unwrap_or(0);
        if cache_kib > 16 << 20 {
            return err(format!(
                "{table}: `cache_kib` = {cache_kib} is not valid: at most 16777216 (16 GiB)"
            ));
        }
        let ra = c.read_ahead_kib.unwrap_or(0);
        if ra > 0 && ra > cache_kib {
            return err(format!(
                "{table}: `read_ahead_kib` = {ra} needs a cache at least as large: set `cache_kib` to {ra} or more"
            ));
        }
        let rate = match c.rate_mb_s {
            None => None,
            Some(r) => Some(mb_s(&table, "rate_mb_s", r)?),
        };
        controllers.push(ControllerParams {
            overhead,
            bytes_per_sec: rate,
            cache_sectors: cache_kib * 2,
            search: c.search.unwrap_or(false),
            save_reads: c.save_reads.unwrap_or(false),
            save_writes: c.save_writes.unwrap_or(false),
            read_ahead_sectors: ra * 2,
            read_ahead_across_head: c.read_ahead_across_head.unwrap_or(false),
            read_ahead_across_cylinder: c.read_ahead_across_cylinder.unwrap_or(false),
            sort_reads: c.sort_reads.unwrap_or(false),
            sort_writes: c.sort_writes.unwrap_or(false),
            flush_on_write: c.flush_on_write.unwrap_or(false),
            bus,
        });
    }
    let mut strings = Vec::new();
    for (name, s) in &file.strings {
        let table = format!("[strings.{name}]");
        let Some(controller) = index(file.controllers.keys().collect(), &s.controller) else {
            return err(format!(
                "{table}: unknown controller `{}`; the [controllers] are: {}",
                s.controller,
                list(file.controllers.keys().collect())
            ));
        };
        strings.push(StringParams {
            bytes_per_sec: link_rate(&table, s.preset.as_deref(), s.rate_mb_s, presets)?,
            controller,
        });
    }
    let names: Names = (
        file.strings
            .iter()
            .map(|(n, s)| (n.clone(), s.preset.clone()))
            .collect(),
        file.controllers.keys().cloned().collect(),
        file.buses
            .iter()
            .map(|(n, b)| (n.clone(), b.preset.clone()))
            .collect(),
    );
    let placed: Vec<&String> = match (&file.string, file.array.as_ref().and_then(|a| a.strings.as_ref())) {
        (Some(_), Some(_)) => {
            return err("both `string` and [array] `strings` are given: `string` is for one disk, `strings` for an array's members".to_string())
        }
        (Some(s), None) => {
            if file.array.is_some() {
                return err("`string` places one disk: for an array give `strings = [...]` in [array], one per member".to_string());
            }
            vec![s]
        }
        (None, Some(list)) => {
            let members = file.array.as_ref().map_or(0, |a| a.members.len());
            if list.len() != members {
                return err(format!(
                    "[array] `strings` has {} entries for {members} members: give one string per member",
                    list.len()
                ));
            }
            list.iter().collect()
        }
        (None, None) => Vec::new(),
    };
    if file.strings.is_empty() {
        if placed.is_empty() {
            return Ok((None, names));
        }
        return err(format!(
            "disk placed on string `{}` but there are no [strings.NAME] tables",
            placed[0]
        ));
    }
    if placed.is_empty() {
        let fix = if file.array.is_some() {
            "add `strings = [...]` to [array], one per member"
        } else {
            "add `string = \"NAME\"` beside `disk`"
        };
        return err(format!("[strings] are given but no disk is on one: {fix}"));
    }
    let mut disk_string = Vec::with_capacity(placed.len());
    for s in placed {
        match index(file.strings.keys().collect(), s) {
            Some(i) => disk_string.push(Some(i)),
            None => {
                return err(format!(
                    "unknown string `{s}`; the [strings] are: {}",
                    list(file.strings.keys().collect())
                ))
            }
        }
    }
    Ok((
        Some(Topology {
            buses,
            controllers,
            strings,
            disk_string,
        }),
        names,
    ))
}
