//! Exports: what a name served over NBD stands for, its size, the transmission flags
//! that are true of it, and its block size constraints.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use xraid_array::{assemble_with_spares, read_superblock, Array, Consistency, OpenMode};
use xraid_driver::BackendChoice;
use xraid_member::{DirectMode, FileMember, OpenOptions};
use xraid_nbd::consts::*;

use crate::array_export::{self, ArrayHandle};
use crate::file_export::FileExport;
use crate::{ExportConfig, ServerError};

/// The largest request payload (and read) the server accepts: 32 MiB, as the protocol
/// suggests and clients assume.
pub(crate) const MAX_REQUEST_BYTES: u32 = 32 << 20;

#[derive(Debug)]
pub(crate) enum ExportKind {
    File(FileExport),
    Array(ArrayHandle),
}

#[derive(Debug)]
pub(crate) struct Export {
    pub name: String,
    pub description: String,
    pub read_only: bool,
    pub kind: ExportKind,
}

impl Export {
    pub(crate) fn size(&self) -> u64 {
        match &self.kind {
            ExportKind::File(f) => f.size(),
            ExportKind::Array(a) => a.size,
        }
    }

    /// Transmission flags: only what the export really does.
    pub(crate) fn flags(&self, structured: bool) -> u16 {
        let mut flags = FLAG_HAS_FLAGS
            | FLAG_SEND_FLUSH
            | FLAG_SEND_FUA
            | FLAG_SEND_CACHE
            // A flush goes to every member (or the file), so it covers every
            // connection's completed writes.
            | FLAG_CAN_MULTI_CONN;
        if self.read_only {
            flags |= FLAG_READ_ONLY;
        } else {
            flags |= FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
        }
        if structured {
            flags |= FLAG_SEND_DF;
        }
        flags
    }

    /// Minimum, preferred and maximum block sizes, as advertised. Arrays work in
    /// 512-byte sectors (4 KiB blocks in integrity mode) and advertise their members'
    /// logical block size where it is larger; their preferred size is the largest
    /// power of two within a full stripe.
    pub(crate) fn block_sizes(&self) -> (u32, u32, u32) {
        match &self.kind {
            ExportKind::File(_) => (1, 4096, MAX_REQUEST_BYTES),
            ExportKind::Array(a) => {
                let stripe = a.stripe_bytes.clamp(4096, u64::from(MAX_REQUEST_BYTES));
                let preferred =
                    (1u64 << (63 - stripe.leading_zeros())).max(u64::from(a.advertised_block));
                let preferred = u32::try_from(preferred).unwrap_or(MAX_REQUEST_BYTES);
                (a.advertised_block, preferred, MAX_REQUEST_BYTES)
            }
        }
    }

    /// The smallest request taken (offsets and lengths are multiples of it): the
    /// advertised minimum, but for an array on 4Kn members, whose 512-byte requests
    /// are still taken.
    pub(crate) fn min_block(&self) -> u32 {
        match &self.kind {
            ExportKind::File(_) => 1,
            ExportKind::Array(a) => a.min_block,
        }
    }
}

/// Opens an export: a single path without an md superblock is a plain file; anything
/// else is assembled as an array and gets a worker thread.
/// An opened export, with the threads that serve it.
pub(crate) struct Opened {
    pub export: Export,
    /// The array's worker, for arrays.
    pub worker: Option<JoinHandle<crate::array_export::Closed>>,
    /// The array's control socket, for arrays.
    pub control: Option<crate::control::Control>,
}

pub(crate) fn open(config: &ExportConfig, backend: BackendChoice) -> Result<Opened, ServerError> {
    let name = config.name.clone();
    if let [path] = config.paths.as_slice() {
        if is_plain_file(path)? {
            if !config.faults.is_empty() {
                return Err(ServerError::Export {
                    name,
                    detail: "--fault applies to array members, and this is a plain file".to_owned(),
                });
            }
            let file =
                FileExport::open(path, config.read_only).map_err(|source| ServerError::Export {
                    name: name.clone(),
                    detail: format!("{}: {source}", path.display()),
                })?;
            let export = Export {
                description: format!("plain file {}", path.display()),
                name,
                read_only: config.read_only,
                kind: ExportKind::File(file),
            };
            return Ok(Opened {
                export,
                worker: None,
                control: None,
            });
        }
    }
    let options = OpenOptions {
        write: !config.read_only,
        direct: DirectMode::Auto,
        lock: true,
    };
    let export_error = |detail: String| ServerError::Export {
        name: name.clone(),
        detail,
    };
    // Checked before anything is written (spares promoted) to the members.
    let consistency = match config.consistency.as_deref() {
        None | Some("log") => Consistency::Log,
        Some("resync") => Consistency::Resync,
        Some(other) => {
            return Err(export_error(format!(
                "consistency '{other}' is not known: use log or resync"
            )))
        }
    };
    let (assembled, promoted) =
        assemble_with_spares(&config.paths, &options).map_err(|e| export_error(e.to_string()))?;
    for spare in &promoted {
        crate::log::info(&format!(
            "export '{name}': spare {} takes role {} and is rebuilt",
            spare.path.display(),
            spare.role.unwrap_or_default()
        ));
    }
    for l in assembled.unused() {
        let line = if l.reason == xraid_array::LeftOutReason::Spare {
            // Waiting as it should: not left out of anything.
            format!("export '{name}': {} waits as a hot spare", l.path.display())
        } else {
            format!(
                "export '{name}': {} left out: {}",
                l.path.display(),
                l.reason
            )
        };
        crate::log::info(&line);
    }
    for (path, damage) in &assembled.damaged {
        crate::log::error(&format!(
            "export '{name}': {} left out: its md superblock is damaged ({damage})",
            path.display()
        ));
    }
    if assembled.is_degraded() {
        crate::log::info(&format!(
            "export '{name}': array '{}' is degraded",
            assembled.name()
        ));
    }
    let description = format!(
        "{} array '{}' of {} members",
        assembled.geometry.level(),
        assembled.name(),
        assembled.geometry.raid_disks()
    );
    let mode = if config.read_only {
        OpenMode::ReadOnly
    } else {
        OpenMode::ReadWrite
    };
    crate::config::check_rebuild_pace(config.rebuild_min, config.rebuild_max)
        .map_err(export_error)?;
    if let Some(f) = config
        .faults
        .iter()
        .find(|f| usize::from(f.role) >= usize::from(assembled.geometry.raid_disks()))
    {
        return Err(export_error(format!(
            "--fault names role {}, but the array has roles 0 to {}",
            f.role,
            assembled.geometry.raid_disks() - 1
        )));
    }
    for f in &config.faults {
        assembled.check_fault_fits(f).map_err(export_error)?;
        crate::log::info(&format!(
            "export '{name}': injecting faults into role {}: {}",
            f.role, f.plan
        ));
    }
    let control_path = assembled.control_socket();
    let mut array = Array::open_with(assembled, mode, backend, &config.faults, consistency)
        .map_err(|e| export_error(e.to_string()))?;
    let unknown = array.unknown_left_to_parity();
    if unknown > 0 {
        crate::log::error(&format!(
            "export '{name}': the array's stripe log names {unknown} sectors unknown (a crash took a member, or the array failed, under a write there); with --consistency resync the log is not read and they read as whatever parity gives: serve it with the log (the default) to have them fail instead"
        ));
    }
    let engine = array.driver().engine_mut();
    let mut pace = engine.config();
    if let Some(min) = config.rebuild_min {
        pace.sync_min_bytes_per_sec = min.saturating_mul(1_000_000);
    }
    if let Some(max) = config.rebuild_max {
        pace.sync_max_bytes_per_sec = max.saturating_mul(1_000_000);
    }
    engine.set_config(pace);
    let (handle, thread) = array_export::spawn(array, name.clone(), config.read_only)
        .map_err(|e| export_error(e.to_string()))?;
    let control = control_path.and_then(|path| {
        match crate::control::Control::start(path.clone(), handle.clone(), name.clone()) {
            Ok(c) => Some(c),
            Err(e) => {
                crate::log::error(&format!(
                    "export '{name}': no control socket at {}: {e}; xraid status/fail/scrub will not reach this server",
                    path.display()
                ));
                None
            }
        }
    });
    let export = Export {
        name,
        description,
        read_only: config.read_only,
        kind: ExportKind::Array(handle),
    };
    Ok(Opened {
        export,
        worker: Some(thread),
        control,
    })
}

/// Whether `path` is one file or block device that holds no md superblock.
fn is_plain_file(path: &Path) -> Result<bool, ServerError> {
    let meta = std::fs::metadata(path).map_err(|source| ServerError::Io {
        path: PathBuf::from(path),
        source,
    })?;
    if meta.is_dir() {
        return Ok(false);
    }
    let options = OpenOptions {
        write: false,
        direct: DirectMode::Off,
        lock: false,
    };
    let member = FileMember::open(path, &options).map_err(|e| ServerError::Export {
        name: path.display().to_string(),
        detail: e.to_string(),
    })?;
    // A damaged superblock still means "md member": assembly reports it properly.
    Ok(matches!(read_superblock(&member, path), Ok(None)))
}
