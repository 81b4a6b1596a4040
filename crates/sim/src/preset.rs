//! Disk presets: spec sheets as data (`presets/disks.toml`), each value with its source,
//! turned into checked [`DiskParams`].
//!
//! A preset is a spec sheet, not a fit: every value names where it came from in the
//! disk's `source` table, and a value the sheets lack is listed in `assumed` and its
//! source says why the chosen value is typical of the drive's class and era. The
//! loader refuses a value without a source, an `assumed` entry that is not a value, a
//! sheet that contradicts itself (a format faster than the drive's own media rate, a
//! sector time or capacity other than the format gives), and anything the model itself
//! refuses — each with one line naming the preset, the key and the fix.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use xraid_engine::Nanos;

use crate::geometry::Zone;
use crate::params::{DiskModel, DiskParams, ParamError, Scheduler};
pub use crate::preset_ssd::SsdPreset;
use crate::preset_ssd::{ssd_preset, SsdEntry};
use crate::ssd_params::SsdParamError;

/// The presets shipped with xraid.
pub const BUILTIN: &str = include_str!("../presets/disks.toml");

/// Relative slack allowed between a sheet's stated figure and the figure the format
/// implies: sheets round to 3 significant digits, so 1% covers rounding, not errors.
const SHEET_ROUNDING: f64 = 0.01;

/// One `[disk.NAME]` table as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiskEntry {
    name: String,
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
    command_overhead_ms: Option<f64>,
    interface_mb_s: Option<f64>,
    buffer_kib: Option<u64>,
    cache_segments: Option<u32>,
    read_ahead_kib: Option<u64>,
    write_back: Option<bool>,
    queue_depth: Option<u32>,
    scheduler: Option<String>,
    zero_latency: Option<bool>,
    // Figures of the sheet the model does not take but the loader checks against.
    sectors_total: Option<u64>,
    sector_time_us: Option<f64>,
    media_rate_mb_s: Option<f64>,
    average_rotational_latency_ms: Option<f64>,
    #[serde(default)]
    assumed: Vec<String>,
    #[serde(default)]
    source: BTreeMap<String, String>,
    /// Free text: what the preset describes, facts of the sheet kept for readers.
    #[serde(default)]
    notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct ZoneEntry {
    cylinders: u32,
    sectors_per_track: u32,
}

/// One `[bus.NAME]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct BusEntry {
    rate_mb_s: f64,
    source: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    disk: BTreeMap<String, DiskEntry>,
    #[serde(default)]
    ssd: BTreeMap<String, SsdEntry>,
    #[serde(default)]
    bus: BTreeMap<String, BusEntry>,
    /// Systems described in papers (inputs of their experiments), kept for item 2.
    #[serde(default)]
    system: BTreeMap<String, toml::Table>,
}

/// A checked disk preset.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskPreset {
    pub key: String,
    pub name: String,
    pub params: DiskParams,
    /// Keys whose values no sheet gave.
    pub assumed: Vec<String>,
    /// Each given key's source.
    pub sources: BTreeMap<String, String>,
    /// Facts of the sheet kept for readers.
    pub notes: Vec<String>,
}

/// A bus or link with its rate.
#[derive(Debug, Clone, PartialEq)]
pub struct BusPreset {
    pub bytes_per_sec: u64,
    pub source: String,
}

/// Every preset of one file.
#[derive(Debug, Clone, PartialEq)]
pub struct Presets {
    pub disks: BTreeMap<String, DiskPreset>,
    pub ssds: BTreeMap<String, SsdPreset>,
    pub buses: BTreeMap<String, BusPreset>,
}

/// Why a presets file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PresetError {
    /// The file could not be read.
    #[error("cannot read presets file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// The file is not valid TOML or has keys the loader does not know.
    #[error("presets file is malformed: {0}")]
    Parse(String),
    /// A value the model needs is absent.
    #[error("preset `{disk}` lacks `{key}`: give the sheet's value with its source, or a typical one listed in `assumed`")]
    Missing { disk: String, key: &'static str },
    /// A value has no entry in the preset's `source` table.
    #[error("preset `{disk}`: `{key}` has no source; add `{key} = \"...\"` to its source table")]
    NoSource { disk: String, key: String },
    /// A source entry names no value of the preset.
    #[error("preset `{disk}`: [source] names `{key}`, which the preset does not give")]
    StraySource { disk: String, key: String },
    /// `assumed` lists a key that has no value.
    #[error("preset `{disk}`: `assumed` lists `{key}`, which the preset does not give")]
    AssumedAbsent { disk: String, key: String },
    /// A value is out of its domain.
    #[error("preset `{disk}`: `{key}` = {value} is not a valid value ({why})")]
    BadValue {
        disk: String,
        key: &'static str,
        value: String,
        why: &'static str,
    },
    /// Both a single-zone format and a zone list are given.
    #[error(
        "disk preset `{disk}` gives both `zones` and `cylinders`/`sectors_per_track`; keep one"
    )]
    TwoFormats { disk: String },
    /// The sheet contradicts the format.
    #[error("preset `{disk}`: {what}")]
    Inconsistent { disk: String, what: String },
    /// The model refuses the parameters.
    #[error("preset `{disk}`: {source}")]
    Model { disk: String, source: ParamError },
    /// The SSD model refuses the parameters.
    #[error("preset `{disk}`: {source}")]
    SsdModel { disk: String, source: SsdParamError },
    /// A name used by a disk and an SSD preset both.
    #[error("preset `{name}` is both a [disk] and an [ssd] table: rename one")]
    Clash { name: String },
    /// A bus rate is not positive.
    #[error("bus preset `{bus}`: rate_mb_s = {rate} must be a positive number")]
    BadBus { bus: String, rate: f64 },
    /// No preset of that name.
    #[error("no preset `{name}`; known: {known}")]
    Unknown { name: String, known: String },
}

/// Milliseconds from a sheet to nanoseconds; refuses what is not a finite,
/// non-negative number of a sane size (under an hour).
pub(crate) fn ms_to_nanos(disk: &str, key: &'static str, ms: f64) -> Result<Nanos, PresetError> {
    if !(ms.is_finite() && (0.0..3_600_000.0).contains(&ms)) {
        return Err(PresetError::BadValue {
            disk: disk.to_string(),
            key,
            value: ms.to_string(),
            why: "milliseconds must be a finite number from 0 up to an hour",
        });
    }
    Ok(Nanos((ms * 1e6).round() as u64))
}

pub(crate) fn mb_s_to_bytes(disk: &str, key: &'static str, mb_s: f64) -> Result<u64, PresetError> {
    if !(mb_s.is_finite() && mb_s > 0.0 && mb_s < 1e9) {
        return Err(PresetError::BadValue {
            disk: disk.to_string(),
            key,
            value: mb_s.to_string(),
            why: "MB/s must be a positive finite number",
        });
    }
    Ok((mb_s * 1e6).round() as u64)
}

impl Presets {
    /// The presets shipped with xraid.
    pub fn builtin() -> Result<Presets, PresetError> {
        Presets::parse(BUILTIN)
    }

    /// Reads and checks a presets file.
    pub fn load(path: &Path) -> Result<Presets, PresetError> {
        let text = std::fs::read_to_string(path).map_err(|source| PresetError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Presets::parse(&text)
    }

    /// Checks the text of a presets file.
    pub fn parse(text: &str) -> Result<Presets, PresetError> {
        let file: File = toml::from_str(text).map_err(|e| PresetError::Parse(e.to_string()))?;
        let _ = file.system;
        let mut disks = BTreeMap::new();
        for (key, entry) in file.disk {
            let preset = disk_preset(&key, entry)?;
            disks.insert(key, preset);
        }
        let mut ssds = BTreeMap::new();
        for (key, entry) in file.ssd {
            if disks.contains_key(&key) {
                return Err(PresetError::Clash { name: key });
            }
            let preset = ssd_preset(&key, entry)?;
            ssds.insert(key, preset);
        }
        let mut buses = BTreeMap::new();
        for (key, b) in file.bus {
            if !(b.rate_mb_s.is_finite() && b.rate_mb_s > 0.0) {
                return Err(PresetError::BadBus {
                    bus: key,
                    rate: b.rate_mb_s,
                });
            }
            let bytes_per_sec = (b.rate_mb_s * 1e6).round() as u64;
            buses.insert(
                key,
                BusPreset {
                    bytes_per_sec,
                    source: b.source,
                },
            );
        }
        Ok(Presets { disks, ssds, buses })
    }

    /// The disk preset called `name`.
    pub fn disk(&self, name: &str) -> Result<&DiskPreset, PresetError> {
        self.disks.get(name).ok_or_else(|| PresetError::Unknown {
            name: name.to_string(),
            known: self.known(),
        })
    }

    /// The SSD preset called `name`.
    pub fn ssd(&self, name: &str) -> Result<&SsdPreset, PresetError> {
        self.ssds.get(name).ok_or_else(|| PresetError::Unknown {
            name: name.to_string(),
            known: self.known(),
        })
    }

    /// Every disk and SSD preset's name, in order.
    pub fn known(&self) -> String {
        let mut names: Vec<&String> = self.disks.keys().chain(self.ssds.keys()).collect();
        names.sort();
        names
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl DiskPreset {
    /// The checked model of this preset.
    pub fn model(&self) -> Result<DiskModel, PresetError> {
        self.params.build().map_err(|source| PresetError::Model {
            disk: self.key.clone(),
            source,
        })
    }
}

/// The keys an entry gives a value for, in file order of the struct.
fn given_keys(e: &DiskEntry) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let mut add = |present: bool, key: &'static str| {
        if present {
            keys.push(key);
        }
    };
    add(e.rpm.is_some(), "rpm");
    add(e.heads.is_some(), "heads");
    add(e.cylinders.is_some(), "cylinders");
    add(e.sectors_per_track.is_some(), "sectors_per_track");
    add(e.zones.is_some(), "zones");
    add(
        e.spare_sectors_per_track.is_some(),
        "spare_sectors_per_track",
    );
    add(e.head_skew_sectors.is_some(), "head_skew_sectors");
    add(e.cylinder_skew_sectors.is_some(), "cylinder_skew_sectors");
    add(e.seek_track_to_track_ms.is_some(), "seek_track_to_track_ms");
    add(e.seek_average_ms.is_some(), "seek_average_ms");
    add(e.seek_full_stroke_ms.is_some(), "seek_full_stroke_ms");
    add(e.write_settle_extra_ms.is_some(), "write_settle_extra_ms");
    add(e.head_switch_ms.is_some(), "head_switch_ms");
    add(e.cylinder_switch_ms.is_some(), "cylinder_switch_ms");
    add(e.command_overhead_ms.is_some(), "command_overhead_ms");
    add(e.interface_mb_s.is_some(), "interface_mb_s");
    add(e.buffer_kib.is_some(), "buffer_kib");
    add(e.cache_segments.is_some(), "cache_segments");
    add(e.read_ahead_kib.is_some(), "read_ahead_kib");
    add(e.write_back.is_some(), "write_back");
    add(e.queue_depth.is_some(), "queue_depth");
    add(e.scheduler.is_some(), "scheduler");
    add(e.zero_latency.is_some(), "zero_latency");
    add(e.sectors_total.is_some(), "sectors_total");
    add(e.sector_time_us.is_some(), "sector_time_us");
    add(e.media_rate_mb_s.is_some(), "media_rate_mb_s");
    add(
        e.average_rotational_latency_ms.is_some(),
        "average_rotational_latency_ms",
    );
    keys
}

fn check_sources(disk: &str, e: &DiskEntry) -> Result<(), PresetError> {
    check_sources_of(disk, &given_keys(e), &e.source, &e.assumed)
}

/// Every given key has a source, every source and `assumed` entry a given key.
pub(crate) fn check_sources_of(
    disk: &str,
    given: &[&'static str],
    source: &BTreeMap<String, String>,
    assumed: &[String],
) -> Result<(), PresetError> {
    for key in given {
        if !source.contains_key(*key) {
            return Err(PresetError::NoSource {
                disk: disk.to_string(),
                key: (*key).to_string(),
            });
        }
    }
    if let Some(stray) = source.keys().find(|k| !given.contains(&k.as_str())) {
        return Err(PresetError::StraySource {
            disk: disk.to_string(),
            key: stray.clone(),
        });
    }
    if let Some(absent) = assumed.iter().find(|k| !given.contains(&k.as_str())) {
        return Err(PresetError::AssumedAbsent {
            disk: disk.to_string(),
            key: absent.clone(),
        });
    }
    Ok(())
}

pub(crate) fn required<T: Copy>(
    disk: &str,
    key: &'static str,
    v: Option<T>,
) -> Result<T, PresetError> {
    v.ok_or_else(|| PresetError::Missing {
        disk: disk.to_string(),
        key,
    })
}

fn zones(disk: &str, e: &DiskEntry) -> Result<Vec<Zone>, PresetError> {
    match (&e.zones, e.cylinders, e.sectors_per_track) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(PresetError::TwoFormats {
            disk: disk.to_string(),
        }),
        (Some(z), None, None) => Ok(z
            .iter()
            .map(|z| Zone {
                cylinders: z.cylinders,
                sectors_per_track: z.sectors_per_track,
            })
            .collect()),
        (None, c, s) => Ok(vec![Zone {
            cylinders: required(disk, "cylinders", c)?,
            sectors_per_track: required(disk, "sectors_per_track", s)?,
        }]),
    }
}

fn disk_preset(key: &str, e: DiskEntry) -> Result<DiskPreset, PresetError> {
    check_sources(key, &e)?;
    let ms = |k: &'static str, v: Option<f64>| -> Result<Option<Nanos>, PresetError> {
        v.map(|v| ms_to_nanos(key, k, v)).transpose()
    };
    let scheduler = match e.scheduler.as_deref() {
        None | Some("fifo") => Scheduler::Fifo,
        Some("sptf") => Scheduler::Sptf,
        Some(other) => {
            return Err(PresetError::BadValue {
                disk: key.to_string(),
                key: "scheduler",
                value: other.to_string(),
                why: "use \"fifo\" or \"sptf\"",
            })
        }
    };
    let params = DiskParams {
        rpm: required(key, "rpm", e.rpm)?,
        heads: required(key, "heads", e.heads)?,
        zones: zones(key, &e)?,
        spare_sectors_per_track: e.spare_sectors_per_track.unwrap_or(0),
        seek_track_to_track: required(
            key,
            "seek_track_to_track_ms",
            ms("seek_track_to_track_ms", e.seek_track_to_track_ms)?,
        )?,
        seek_average: required(
            key,
            "seek_average_ms",
            ms("seek_average_ms", e.seek_average_ms)?,
        )?,
        seek_full_stroke: required(
            key,
            "seek_full_stroke_ms",
            ms("seek_full_stroke_ms", e.seek_full_stroke_ms)?,
        )?,
        write_settle_extra: ms("write_settle_extra_ms", e.write_settle_extra_ms)?
            .unwrap_or(Nanos(0)),
        head_switch: required(
            key,
            "head_switch_ms",
            ms("head_switch_ms", e.head_switch_ms)?,
        )?,
        cylinder_switch: ms("cylinder_switch_ms", e.cylinder_switch_ms)?,
        head_skew_sectors: e.head_skew_sectors,
        cylinder_skew_sectors: e.cylinder_skew_sectors,
        command_overhead: required(
            key,
            "command_overhead_ms",
            ms("command_overhead_ms", e.command_overhead_ms)?,
        )?,
        interface_bytes_per_sec: mb_s_to_bytes(
            key,
            "interface_mb_s",
            required(key, "interface_mb_s", e.interface_mb_s)?,
        )?,
        buffer_bytes: required(key, "buffer_kib", e.buffer_kib)?.saturating_mul(1024),
        cache_segments: e.cache_segments.unwrap_or(1),
        read_ahead_sectors: e.read_ahead_kib.unwrap_or(0).saturating_mul(2),
        write_back: e.write_back.unwrap_or(false),
        queue_depth: e.queue_depth.unwrap_or(1),
        scheduler,
        zero_latency: e.zero_latency.unwrap_or(false),
    };
    let model = params.build().map_err(|source| PresetError::Model {
        disk: key.to_string(),
        source,
    })?;
    check_sheet(key, &e, &params, &model)?;
    Ok(DiskPreset {
        key: key.to_string(),
        name: e.name,
        params,
        assumed: e.assumed,
        sources: e.source,
        notes: e.notes,
    })
}

/// Checks the sheet's own figures against what the format implies.
fn check_sheet(
    disk: &str,
    e: &DiskEntry,
    p: &DiskParams,
    model: &DiskModel,
) -> Result<(), PresetError> {
    let bad = |what: String| {
        Err(PresetError::Inconsistent {
            disk: disk.to_string(),
            what,
        })
    };
    let rpm = f64::from(p.rpm);
    let rev_ms = 60_000.0 / rpm;
    if let Some(total) = e.sectors_total {
        if model.sectors() < total {
            return bad(format!(
                "the format holds {} sectors, fewer than sectors_total = {total}; add cylinders or sectors per track",
                model.sectors()
            ));
        }
    }
    if let Some(rate) = e.media_rate_mb_s {
        let outer = f64::from(p.zones[0].sectors_per_track) * 512.0 * rpm / 60.0 / 1e6;
        if outer > rate * (1.0 + SHEET_ROUNDING) {
            return bad(format!(
                "the outer zone's format moves {outer:.3} MB/s, more than media_rate_mb_s = {rate}; fewer sectors per track"
            ));
        }
    }
    if let Some(us) = e.sector_time_us {
        let z = &model.mech.format.zones()[0];
        let implied = rev_ms * 1000.0 / f64::from(z.slots);
        if (implied - us).abs() > us * SHEET_ROUNDING {
            return bad(format!(
                "rpm and slots per track give a sector time of {implied:.1} us, not sector_time_us = {us}"
            ));
        }
    }
    if let Some(lat) = e.average_rotational_latency_ms {
        let implied = rev_ms / 2.0;
        if (implied - lat).abs() > lat * SHEET_ROUNDING {
            return bad(format!(
                "rpm gives an average rotational latency of {implied:.3} ms, not {lat} ms"
            ));
        }
    }
    Ok(())
}
