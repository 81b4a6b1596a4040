//! The disk simulator: mechanical disks and SSDs in simulated time, built from
//! spec-sheet presets, and a discrete-event driver that runs the real array engine on
//! them.
//!
//! **Architecture invariant:** nothing here reads a clock, touches a file descriptor
//! other than a preset file being loaded, or draws randomness from anywhere but a
//! seeded [`Rng`]: the same configuration and seed give bit-identical results. Time is
//! integer nanoseconds ([`Nanos`]) throughout; floating point appears only where
//! parameters are turned into the model (the seek curve's constants), never in the
//! clock.
//!
//! Modules, bottom to top:
//! - `rng`: the seeded generator;
//! - `geometry`: zones, heads, sectors, spares, skews — block address to platter place;
//! - `seek`: the seek curve fitted to the spec sheet's three figures;
//! - `mechanics`: rotation as a function of time, seeks, switches, media transfers;
//! - `params`: a disk's parameters, their checks, the model built from them;
//! - `buffer`: the drive's buffer segments and read-ahead;
//! - `disk`: one drive, sans-I/O — queue, scheduler, processor, buffer, link;
//! - `ssd_params`: an SSD's parameters, their checks, the model built from them;
//! - `ftl`: an SSD's page map, over-provisioning and greedy garbage collection;
//! - `ssd`: one SSD, sans-I/O — controller, host link, channels, dies;
//! - `drive`: a disk or an SSD behind the one shape the driver runs;
//! - `controller`: host buses, caching controllers and their policies, strings;
//! - `preset`, `preset_ssd`: spec sheets as data, each value with its source,
//!   checked on load;
//! - `workload`: fio-like workloads and their seeded generators;
//! - `driver`: the discrete-event loop running the array engine on simulated disks;
//! - `config`, `config_ssd`: what `xraid sim` runs: disks and SSDs from presets with
//!   overrides, one drive or an array.

mod buffer;
mod config;
mod config_ssd;
mod controller;
mod disk;
mod drive;
mod driver;
mod ftl;
mod geometry;
mod mechanics;
mod params;
mod preset;
mod preset_ssd;
mod rng;
mod seek;
mod ssd;
mod ssd_params;
mod workload;

#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod driver_tests;
#[cfg(test)]
mod physics_tests;
#[cfg(test)]
mod preset_tests;
#[cfg(test)]
mod ssd_tests;

pub use config::{ConfigError, NamedDisk, SimConfig, Target};
pub use controller::{
    read_ahead_end, ControllerParams, ControllerStats, LinkStats, StringParams, Topology,
    TopologyError,
};
pub use disk::{Completion, Disk, DiskOp, DiskRequest, DiskStats};
pub use drive::{Drive, DriveModel};
pub use driver::{
    ArraySpec, Latency, RebuildResult, RunError, RunResult, SimArray, DATA_OFFSET_SECTORS,
    MAX_RUN_REQUESTS,
};
pub use geometry::{Format, Loc, Zone, ZoneInfo};
pub use mechanics::{Dir, HeadPos, Mechanics};
pub use params::{DiskModel, DiskParams, ParamError, Scheduler};
pub use preset::{BusPreset, DiskPreset, PresetError, Presets, SsdPreset, BUILTIN};
pub use rng::Rng;
pub use seek::{SeekCurve, SeekFitError};
pub use ssd::{Ssd, SsdStats};
pub use ssd_params::{SsdModel, SsdParamError, SsdParams};
pub use workload::{
    Pattern, Workload, WorkloadError, MAX_BS, MAX_IODEPTH, MAX_NUMJOBS, MAX_RUNTIME,
};
pub use xraid_engine::Nanos;
