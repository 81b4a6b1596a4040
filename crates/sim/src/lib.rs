//! The disk simulator: mechanical disks in simulated time, built from spec-sheet
//! presets, and a discrete-event driver that runs the real array engine on them.
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
//! - `controller`: host buses, caching controllers and their policies, strings;
//! - `preset`: spec sheets as data, each value with its source, checked on load;
//! - `workload`: fio-like workloads and their seeded generators;
//! - `driver`: the discrete-event loop running the array engine on simulated disks;
//! - `config`: what `xraid sim` runs: disks from presets with overrides, one disk or
//!   an array.

mod buffer;
mod config;
mod controller;
mod disk;
mod driver;
mod geometry;
mod mechanics;
mod params;
mod preset;
mod rng;
mod seek;
mod workload;

#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod driver_tests;
#[cfg(test)]
mod physics_tests;
#[cfg(test)]
mod preset_tests;

pub use config::{ConfigError, NamedDisk, SimConfig, Target};
pub use controller::{
    read_ahead_end, ControllerParams, ControllerStats, LinkStats, StringParams, Topology,
    TopologyError,
};
pub use disk::{Completion, Disk, DiskOp, DiskRequest, DiskStats};
pub use driver::{
    ArraySpec, Latency, RunError, RunResult, SimArray, DATA_OFFSET_SECTORS, MAX_RUN_REQUESTS,
};
pub use geometry::{Format, Loc, Zone, ZoneInfo};
pub use mechanics::{Dir, HeadPos, Mechanics};
pub use params::{DiskModel, DiskParams, ParamError, Scheduler};
pub use preset::{BusPreset, DiskPreset, PresetError, Presets, BUILTIN};
pub use rng::Rng;
pub use seek::{SeekCurve, SeekFitError};
pub use workload::{
    Pattern, Workload, WorkloadError, MAX_BS, MAX_IODEPTH, MAX_NUMJOBS, MAX_RUNTIME,
};
pub use xraid_engine::Nanos;
