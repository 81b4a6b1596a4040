//! A drive of either kind — a mechanical [`Disk`] or an [`Ssd`] — behind the one
//! sans-I/O shape the driver runs: submit, handle the time, poll completions and the
//! next instant. The driver, the strings and the controllers see only this.

use xraid_engine::Nanos;

use crate::disk::{Completion, Disk, DiskRequest, DiskStats};
use crate::params::DiskModel;
use crate::ssd::Ssd;
use crate::ssd_params::SsdModel;

/// What a drive is built from.
#[derive(Debug, Clone, PartialEq)]
pub enum DriveModel {
    Disk(DiskModel),
    Ssd(SsdModel),
}

impl DriveModel {
    /// Sectors the host can address.
    pub fn sectors(&self) -> u64 {
        match self {
            DriveModel::Disk(m) => m.sectors(),
            DriveModel::Ssd(m) => m.sectors(),
        }
    }

    /// The drive's host interface, bytes per second.
    pub fn interface_bytes_per_sec(&self) -> u64 {
        match self {
            DriveModel::Disk(m) => m.interface_bytes_per_sec,
            DriveModel::Ssd(m) => m.params.interface_bytes_per_sec,
        }
    }

    /// Commands the drive holds at once.
    pub fn queue_depth(&self) -> u32 {
        match self {
            DriveModel::Disk(m) => m.queue_depth,
            DriveModel::Ssd(m) => m.params.queue_depth,
        }
    }

    /// "disk" or "ssd".
    pub fn kind(&self) -> &'static str {
        match self {
            DriveModel::Disk(_) => "disk",
            DriveModel::Ssd(_) => "ssd",
        }
    }
}

impl From<DiskModel> for DriveModel {
    fn from(m: DiskModel) -> DriveModel {
        DriveModel::Disk(m)
    }
}

impl From<SsdModel> for DriveModel {
    fn from(m: SsdModel) -> DriveModel {
        DriveModel::Ssd(m)
    }
}

/// A simulated drive.
#[derive(Debug, Clone)]
pub enum Drive {
    Disk(Disk),
    Ssd(Ssd),
}

impl Drive {
    pub fn new(model: DriveModel) -> Drive {
        match model {
            DriveModel::Disk(m) => Drive::Disk(Disk::new(m)),
            DriveModel::Ssd(m) => Drive::Ssd(Ssd::new(m)),
        }
    }

    pub fn sectors(&self) -> u64 {
        match self {
            Drive::Disk(d) => d.model().sectors(),
            Drive::Ssd(s) => s.model().sectors(),
        }
    }

    pub fn interface_bytes_per_sec(&self) -> u64 {
        match self {
            Drive::Disk(d) => d.model().interface_bytes_per_sec,
            Drive::Ssd(s) => s.model().params.interface_bytes_per_sec,
        }
    }

    /// The disk, if this drive is one.
    pub fn as_disk(&self) -> Option<&Disk> {
        match self {
            Drive::Disk(d) => Some(d),
            Drive::Ssd(_) => None,
        }
    }

    pub fn stats(&self) -> DiskStats {
        match self {
            Drive::Disk(d) => d.stats(),
            Drive::Ssd(s) => s.stats(),
        }
    }

    pub fn set_external_link(&mut self, on: bool) {
        match self {
            Drive::Disk(d) => d.set_external_link(on),
            Drive::Ssd(s) => s.set_external_link(on),
        }
    }

    pub fn submit(&mut self, req: DiskRequest, now: Nanos) {
        match self {
            Drive::Disk(d) => d.submit(req, now),
            Drive::Ssd(s) => s.submit(req, now),
        }
    }

    pub fn submit_with_data(&mut self, req: DiskRequest, now: Nanos, data_at: Nanos) {
        match self {
            Drive::Disk(d) => d.submit_with_data(req, now, data_at),
            Drive::Ssd(s) => s.submit_with_data(req, now, data_at),
        }
    }

    pub fn poll_timeout(&self) -> Option<Nanos> {
        match self {
            Drive::Disk(d) => d.poll_timeout(),
            Drive::Ssd(s) => s.poll_timeout(),
        }
    }

    pub fn handle_timeout(&mut self, now: Nanos) {
        match self {
            Drive::Disk(d) => d.handle_timeout(now),
            Drive::Ssd(s) => s.handle_timeout(now),
        }
    }

    pub fn poll_done(&mut self) -> Option<Completion> {
        match self {
            Drive::Disk(d) => d.poll_done(),
            Drive::Ssd(s) => s.poll_done(),
        }
    }

    /// Where a controller's read of `lba..lba + n` that missed should stop, with `ra`
    /// sectors of read-ahead: on a disk as [`crate::read_ahead_end`] says; an SSD has
    /// no tracks, so only its end stops it.
    pub fn read_ahead_end(
        &self,
        lba: u64,
        n: u64,
        ra: u64,
        across_head: bool,
        across_cylinder: bool,
    ) -> u64 {
        match self {
            Drive::Disk(d) => crate::controller::read_ahead_end(
                &d.model().mech.format,
                lba,
                n,
                ra,
                across_head,
                across_cylinder,
            ),
            Drive::Ssd(s) => (lba + n).saturating_add(ra).min(s.model().sectors()),
        }
    }
}
