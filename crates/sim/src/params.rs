//! A disk's parameters as a spec sheet and format give them, their checks, and the
//! model built from them.
//!
//! Everything a preset or a configuration says about a disk ends up in
//! [`DiskParams`]; [`DiskParams::build`] checks it once and derives what the sheet
//! leaves implicit (the seek curve's constants, skews from switch times), so that the
//! disk itself never meets a bad value.

use xraid_engine::Nanos;

use crate::geometry::{Format, Zone, ZoneInfo};
use crate::mechanics::{Mechanics, SeekTable};
use crate::seek::{SeekCurve, SeekFitError};

/// Fastest spindle the model takes; with [`MAX_SLOTS`] it keeps the rotation
/// arithmetic inside u64 (real disks stop near 15,000 rpm).
const MAX_RPM: u64 = 999_999;
/// Most slots per track the model takes (real tracks hold a few thousand).
const MAX_SLOTS: u64 = 9_999_999;

/// Which queued command the drive serves next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    /// In arrival order.
    Fifo,
    /// Shortest positioning time first: the command whose first sector the head can
    /// reach soonest (seek plus rotation), among the tagged queue.
    Sptf,
}

/// Everything that describes one mechanical disk.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskParams {
    pub rpm: u32,
    pub heads: u32,
    /// Recording zones, outermost first.
    pub zones: Vec<Zone>,
    /// Slots per track that hold no data (spares, runts): they cost rotation time.
    pub spare_sectors_per_track: u32,
    pub seek_track_to_track: Nanos,
    pub seek_average: Nanos,
    pub seek_full_stroke: Nanos,
    /// Added to every write seek and cylinder switch: a write head must settle more
    /// precisely than a read head (sheets give it as higher write seek figures).
    pub write_settle_extra: Nanos,
    pub head_switch: Nanos,
    /// A one-cylinder move during a transfer; the track-to-track seek when not given.
    pub cylinder_switch: Option<Nanos>,
    /// Track skew in sectors; when not given, the fewest sectors that (with the track's
    /// spares) cover the head switch: what a formatter picks.
    pub head_skew_sectors: Option<u32>,
    /// Cylinder skew in sectors; when not given, the fewest that cover the switch.
    pub cylinder_skew_sectors: Option<u32>,
    /// Drive processing per command (decode, start, status).
    pub command_overhead: Nanos,
    /// Interface (bus) rate of the drive's link, bytes per second.
    pub interface_bytes_per_sec: u64,
    /// The drive's buffer (0 for a drive without one, as SMD drives, whose
    /// controller holds the data).
    pub buffer_bytes: u64,
    /// The buffer is split into this many segments, each caching one stream.
    pub cache_segments: u32,
    /// How far the drive reads on past a read into its buffer (0: no read-ahead).
    pub read_ahead_sectors: u64,
    /// Writes complete once in the buffer and reach the media later.
    pub write_back: bool,
    /// Commands the drive holds in its tagged queue (1: no queueing).
    pub queue_depth: u32,
    pub scheduler: Scheduler,
    /// Reads begin with the first sector to come under the head (read-on-arrival).
    pub zero_latency: bool,
}

/// Why disk parameters were refused. Each message names the value and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    /// A count that must be positive is zero.
    #[error("{what} must be at least 1")]
    Zero { what: &'static str },
    /// A value beyond what the model's integer time arithmetic holds.
    #[error("{what} of {value} is beyond the model's limit of {max}")]
    TooLarge {
        what: &'static str,
        value: u64,
        max: u64,
    },
    /// The disk has no zones.
    #[error("the disk needs at least one zone (cylinders and sectors_per_track)")]
    NoZones,
    /// A skew must be shorter than a track.
    #[error(
        "{what} of {skew} sectors is not shorter than the {slots} slots of zone {zone}'s tracks"
    )]
    SkewTooLong {
        what: &'static str,
        skew: u32,
        slots: u32,
        zone: usize,
    },
    /// The seek figures cannot be fitted.
    #[error(transparent)]
    Seek(#[from] SeekFitError),
    /// Read-ahead larger than a buffer segment cannot be held.
    #[error("read-ahead of {read_ahead_bytes} bytes does not fit a buffer segment of {segment_bytes} bytes (buffer / cache_segments)")]
    ReadAheadTooLarge {
        read_ahead_bytes: u64,
        segment_bytes: u64,
    },
}

/// A checked disk model: the mechanics plus the drive's electronics.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskModel {
    pub mech: Mechanics,
    pub command_overhead: Nanos,
    pub interface_bytes_per_sec: u64,
    pub segment_sectors: u64,
    pub cache_segments: u32,
    pub read_ahead_sectors: u64,
    pub write_back: bool,
    /// Bytes of writes the buffer may hold before the media takes them.
    pub write_buffer_bytes: u64,
    pub queue_depth: u32,
    pub scheduler: Scheduler,
}

impl DiskModel {
    /// Time to move `bytes` over the drive's interface.
    pub fn bus_time(&self, bytes: u64) -> Nanos {
        let ns = u128::from(bytes) * 1_000_000_000;
        Nanos(ns.div_ceil(u128::from(self.interface_bytes_per_sec)) as u64)
    }

    /// Data sectors of the disk.
    pub fn sectors(&self) -> u64 {
        self.mech.format.sectors()
    }
}

fn positive(v: u64, what: &'static str) -> Result<(), ParamError> {
    if v == 0 {
        return Err(ParamError::Zero { what });
    }
    Ok(())
}

impl DiskParams {
    /// Checks the parameters and builds the model.
    pub fn build(&self) -> Result<DiskModel, ParamError> {
        positive(self.rpm.into(), "rpm")?;
        positive(self.heads.into(), "heads")?;
        positive(self.interface_bytes_per_sec, "interface rate")?;
        positive(self.cache_segments.into(), "cache_segments")?;
        positive(self.queue_depth.into(), "queue_depth")?;
        if self.zones.is_empty() {
            return Err(ParamError::NoZones);
        }
        let too_large = |what, value: u64, max| {
            if value > max {
                return Err(ParamError::TooLarge { what, value, max });
            }
            Ok(())
        };
        // Rotation is computed in u64 units of ns·rpm·slots (see `mechanics`).
        too_large("rpm", self.rpm.into(), MAX_RPM)?;
        for z in &self.zones {
            positive(z.cylinders.into(), "a zone's cylinders")?;
            positive(z.sectors_per_track.into(), "a zone's sectors_per_track")?;
        }
        let cylinders: u32 = self.zones.iter().map(|z| z.cylinders).sum();
        let seek = SeekCurve::fit(
            cylinders,
            self.seek_track_to_track,
            self.seek_average,
            self.seek_full_stroke,
        )?;
        let cylinder_switch = self.cylinder_switch.unwrap_or(self.seek_track_to_track);
        let mut zones = Vec::with_capacity(self.zones.len());
        for (i, z) in self.zones.iter().enumerate() {
            let slots = z
                .sectors_per_track
                .saturating_add(self.spare_sectors_per_track);
            too_large("slots per track", slots.into(), MAX_SLOTS)?;
            let skew = |given: Option<u32>, switch: Nanos, what| {
                // The fewest whole slots that, with the spares passing meanwhile, last
                // at least the switch: what a formatter picks.
                let slot_units = 60_000_000_000u128;
                let per_ns = u128::from(self.rpm) * u128::from(slots);
                let derived = (u128::from(switch.0) * per_ns)
                    .div_ceil(slot_units)
                    .saturating_sub(u128::from(self.spare_sectors_per_track));
                let skew = given.map_or(derived, u128::from);
                if skew >= u128::from(slots) {
                    return Err(ParamError::SkewTooLong {
                        what,
                        skew: u32::try_from(skew).unwrap_or(u32::MAX),
                        slots,
                        zone: i,
                    });
                }
                Ok(skew as u32)
            };
            zones.push(ZoneInfo {
                first_cylinder: 0,
                cylinders: z.cylinders,
                sectors_per_track: z.sectors_per_track,
                slots,
                first_lba: 0,
                head_skew: skew(self.head_skew_sectors, self.head_switch, "head skew")?,
                cylinder_skew: skew(self.cylinder_skew_sectors, cylinder_switch, "cylinder skew")?,
            });
        }
        let segment_bytes = self.buffer_bytes / u64::from(self.cache_segments);
        let read_ahead_bytes = self.read_ahead_sectors * 512;
        if read_ahead_bytes > segment_bytes {
            return Err(ParamError::ReadAheadTooLarge {
                read_ahead_bytes,
                segment_bytes,
            });
        }
        Ok(DiskModel {
            mech: Mechanics {
                format: Format::new(self.heads, zones),
                rpm: self.rpm,
                seek_table: SeekTable::new(&seek, cylinders),
                seek,
                head_switch: self.head_switch,
                cylinder_switch,
                write_settle_extra: self.write_settle_extra,
                zero_latency: self.zero_latency,
            },
            command_overhead: self.command_overhead,
            interface_bytes_per_sec: self.interface_bytes_per_sec,
            segment_sectors: segment_bytes / 512,
            cache_segments: self.cache_segments,
            read_ahead_sectors: self.read_ahead_sectors,
            write_back: self.write_back,
            // Half the buffer for writes waiting for the media, half for reads.
            write_buffer_bytes: self.buffer_bytes / 2,
            queue_depth: self.queue_depth,
            scheduler: self.scheduler,
        })
    }
}
