//! A `[disks.NAME]` table whose preset is an SSD: its overrides, with the presets
//! file's SSD keys and units, applied and checked; a disk's key on it is refused with
//! its name, as an SSD's key on a disk is.

use xraid_engine::Nanos;

use crate::config::{disk_keys_given, ConfigError, DiskEntry};
use crate::preset_ssd::SsdPreset;
use crate::ssd_params::{percent_to_ppm, SsdModel};

/// An SSD's override keys, for the message that refuses a disk key on one.
const SSD_KEYS: &str = "channels, dies_per_channel, page_bytes, pages_per_block, blocks_per_die, over_provisioning_percent, page_read_us, page_program_us, block_erase_ms, channel_mb_s, command_overhead_ms, interface_mb_s, queue_depth";

/// The SSD keys `e` gives, in the presets file's order.
pub(crate) fn ssd_keys_given(e: &DiskEntry) -> Vec<&'static str> {
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
    ]
    .into_iter()
    .filter_map(|(given, key)| given.then_some(key))
    .collect()
}

/// The error for `key`, which belongs to the other kind of drive than `preset`.
pub(crate) fn kind_mismatch(
    disk: &str,
    key: &'static str,
    preset: &str,
    kind: &'static str,
    keys: &str,
) -> ConfigError {
    ConfigError::WrongKind {
        disk: disk.to_string(),
        key,
        preset: preset.to_string(),
        kind,
        keys: keys.to_string(),
    }
}

/// The SSD preset with `e`'s overrides applied, and its model.
pub(crate) fn ssd_model(
    name: &str,
    e: &DiskEntry,
    preset: &SsdPreset,
) -> Result<SsdModel, ConfigError> {
    if let Some(key) = disk_keys_given(e).first() {
        return Err(kind_mismatch(name, key, &e.preset, "an SSD", SSD_KEYS));
    }
    let bad = |key: &'static str, value: String, why: &'static str| ConfigError::BadValue {
        disk: name.to_string(),
        key,
        value,
        why,
    };
    // Milliseconds (or microseconds, `scale` of them to a millisecond) to time.
    let time = |key: &'static str, v: f64, scale: f64| {
        let ms = v / scale;
        if ms.is_finite() && (0.0..3_600_000.0).contains(&ms) {
            Ok(Nanos((ms * 1e6).round() as u64))
        } else {
            Err(bad(key, v.to_string(), "a time from 0 up to an hour"))
        }
    };
    let rate = |key: &'static str, v: f64| {
        if v.is_finite() && v > 0.0 && v < 1e9 {
            Ok((v * 1e6).round() as u64)
        } else {
            Err(bad(key, v.to_string(), "a positive number of MB/s"))
        }
    };
    let mut p = preset.params.clone();
    set(&mut p.channels, e.channels);
    set(&mut p.dies_per_channel, e.dies_per_channel);
    set(&mut p.page_bytes, e.page_bytes);
    set(&mut p.pages_per_block, e.pages_per_block);
    set(&mut p.blocks_per_die, e.blocks_per_die);
    set(&mut p.queue_depth, e.queue_depth);
    if let Some(v) = e.over_provisioning_percent {
        p.over_provisioning_ppm = percent_to_ppm(v).ok_or_else(|| {
            bad(
                "over_provisioning_percent",
                v.to_string(),
                "a percentage of the user capacity from 0 to 10000",
            )
        })?;
    }
    if let Some(v) = e.page_read_us {
        p.page_read = time("page_read_us", v, 1000.0)?;
    }
    if let Some(v) = e.page_program_us {
        p.page_program = time("page_program_us", v, 1000.0)?;
    }
    if let Some(v) = e.block_erase_ms {
        p.block_erase = time("block_erase_ms", v, 1.0)?;
    }
    if let Some(v) = e.command_overhead_ms {
        p.command_overhead = time("command_overhead_ms", v, 1.0)?;
    }
    if let Some(v) = e.channel_mb_s {
        p.channel_bytes_per_sec = rate("channel_mb_s", v)?;
    }
    if let Some(v) = e.interface_mb_s {
        p.interface_bytes_per_sec = rate("interface_mb_s", v)?;
    }
    p.build().map_err(|source| ConfigError::SsdModel {
        disk: name.to_string(),
        source,
    })
}

fn set<T>(field: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *field = v;
    }
}
