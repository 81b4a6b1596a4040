//! SSD presets: the `[ssd.NAME]` tables of the presets file, each value with its
//! source as for disks (see `preset`), turned into checked [`SsdParams`].
//!
//! An SSD's sheet rarely gives its flash's organisation or timing; those come from the
//! flash's own data sheet, and what neither gives is listed in `assumed`. The one
//! sheet figure checked against the model is `sectors_total`: the capacity the
//! flash and the over-provisioning leave must hold it.

use std::collections::BTreeMap;

use serde::Deserialize;
use xraid_engine::Nanos;

use crate::preset::{check_sources_of, mb_s_to_bytes, ms_to_nanos, required, PresetError};
use crate::ssd_params::{percent_to_ppm, SsdModel, SsdParams};

/// One `[ssd.NAME]` table as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SsdEntry {
    name: String,
    channels: Option<u32>,
    dies_per_channel: Option<u32>,
    page_bytes: Option<u32>,
    pages_per_block: Option<u32>,
    blocks_per_die: Option<u32>,
    over_provisioning_percent: Option<f64>,
    page_read_us: Option<f64>,
    page_program_us: Option<f64>,
    block_erase_ms: Option<f64>,
    channel_mb_s: Option<f64>,
    command_overhead_ms: Option<f64>,
    interface_mb_s: Option<f64>,
    queue_depth: Option<u32>,
    /// The sheet's user capacity, checked against the model's.
    sectors_total: Option<u64>,
    #[serde(default)]
    assumed: Vec<String>,
    #[serde(default)]
    source: BTreeMap<String, String>,
    #[serde(default)]
    notes: Vec<String>,
}

/// A checked SSD preset.
#[derive(Debug, Clone, PartialEq)]
pub struct SsdPreset {
    pub key: String,
    pub name: String,
    pub params: SsdParams,
    pub assumed: Vec<String>,
    pub sources: BTreeMap<String, String>,
    pub notes: Vec<String>,
}

impl SsdPreset {
    /// The checked model of this preset.
    pub fn model(&self) -> Result<SsdModel, PresetError> {
        self.params.build().map_err(|source| PresetError::SsdModel {
            disk: self.key.clone(),
            source,
        })
    }
}

fn given_keys(e: &SsdEntry) -> Vec<&'static str> {
    [
        (e.channels.is_some(), "channels"),
        (e.dies_per_channel.is_some(), "dies_per_channel"),
        (e.page_bytes.is_some(), "page_bytes"),
        (e.pages_per_block.is_some(), "pages_per_block"),
        (e.blocks_per_die.is_some(), "blocks_per_die"),
        (
            e.over_provisioning_percent.is_some(),
            "over_provisioning_percent",
        ),
        (e.page_read_us.is_some(), "page_read_us"),
        (e.page_program_us.is_some(), "page_program_us"),
        (e.block_erase_ms.is_some(), "block_erase_ms"),
        (e.channel_mb_s.is_some(), "channel_mb_s"),
        (e.command_overhead_ms.is_some(), "command_overhead_ms"),
        (e.interface_mb_s.is_some(), "interface_mb_s"),
        (e.queue_depth.is_some(), "queue_depth"),
        (e.sectors_total.is_some(), "sectors_total"),
    ]
    .into_iter()
    .filter_map(|(given, key)| given.then_some(key))
    .collect()
}

/// Microseconds to nanoseconds, refused as milliseconds would be.
fn us_to_nanos(ssd: &str, key: &'static str, us: f64) -> Result<Nanos, PresetError> {
    ms_to_nanos(ssd, key, us / 1000.0)
}

pub(crate) fn ssd_preset(key: &str, e: SsdEntry) -> Result<SsdPreset, PresetError> {
    check_sources_of(key, &given_keys(&e), &e.source, &e.assumed)?;
    let percent = required(
        key,
        "over_provisioning_percent",
        e.over_provisioning_percent,
    )?;
    let Some(ppm) = percent_to_ppm(percent) else {
        return Err(PresetError::BadValue {
            disk: key.to_string(),
            key: "over_provisioning_percent",
            value: percent.to_string(),
            why: "a percentage of the user capacity from 0 to 10000",
        });
    };
    let us = |k, v| required(key, k, v).and_then(|v| us_to_nanos(key, k, v));
    let ms = |k, v| required(key, k, v).and_then(|v| ms_to_nanos(key, k, v));
    let rate = |k, v| required(key, k, v).and_then(|v| mb_s_to_bytes(key, k, v));
    let params = SsdParams {
        channels: required(key, "channels", e.channels)?,
        dies_per_channel: required(key, "dies_per_channel", e.dies_per_channel)?,
        page_bytes: required(key, "page_bytes", e.page_bytes)?,
        pages_per_block: required(key, "pages_per_block", e.pages_per_block)?,
        blocks_per_die: required(key, "blocks_per_die", e.blocks_per_die)?,
        over_provisioning_ppm: ppm,
        page_read: us("page_read_us", e.page_read_us)?,
        page_program: us("page_program_us", e.page_program_us)?,
        block_erase: ms("block_erase_ms", e.block_erase_ms)?,
        channel_bytes_per_sec: rate("channel_mb_s", e.channel_mb_s)?,
        command_overhead: ms("command_overhead_ms", e.command_overhead_ms)?,
        interface_bytes_per_sec: rate("interface_mb_s", e.interface_mb_s)?,
        queue_depth: e.queue_depth.unwrap_or(1),
    };
    let model = params.build().map_err(|source| PresetError::SsdModel {
        disk: key.to_string(),
        source,
    })?;
    if let Some(total) = e.sectors_total {
        if model.sectors() < total {
            return Err(PresetError::Inconsistent {
                disk: key.to_string(),
                what: format!(
                    "the flash less its over-provisioning holds {} sectors, fewer than sectors_total = {total}; lower over_provisioning_percent",
                    model.sectors()
                ),
            });
        }
    }
    Ok(SsdPreset {
        key: key.to_string(),
        name: e.name,
        params,
        assumed: e.assumed,
        sources: e.source,
        notes: e.notes,
    })
}
