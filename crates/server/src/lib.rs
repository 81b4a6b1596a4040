//! xraid's NBD server: serves arrays (and plain files, for comparison and for images
//! that are not md members) to any NBD client.
//!
//! One thread per connection (bounded by `max_connections`), blocking I/O, and for each
//! array one worker thread that owns its engine; see [`transmission`] for how requests
//! flow. The protocol's bytes live in `xraid-nbd`; this crate decides what to answer.

mod array_export;
mod config;
mod control;
mod export;
mod file_export;
mod file_transmission;
mod handshake;
mod lane;
mod log;
mod log_budget;
mod mapped;
mod published;
mod server;
mod stall;
mod stream;
mod tls;
mod transmission;
mod zero_copy;

use std::path::PathBuf;

pub use array_export::Closed;
pub use config::{
    check_rebuild_pace, parse_listen, ExportConfig, Listen, ServeConfig, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_PORT,
};
pub use server::{block_stop_signals, stop_on_signals, Server, ShutdownHandle, StopSignals};
pub use tls::{TlsFiles, TlsMode};

/// Why the server could not start (or stopped).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{path}: {detail}")]
    Config { path: PathBuf, detail: String },
    #[error("export '{name}': {detail}")]
    Export { name: String, detail: String },
    #[error("cannot listen on {listen}: {source}")]
    Listen {
        listen: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

/// The exports a server offers, by name; the first also answers the default name "".
#[derive(Debug, Default)]
pub(crate) struct Exports {
    list: Vec<std::sync::Arc<export::Export>>,
}

impl Exports {
    pub(crate) fn find(&self, name: &str) -> Option<std::sync::Arc<export::Export>> {
        self.list
            .iter()
            .find(|e| e.name == name)
            .or_else(|| self.list.first().filter(|_| name.is_empty()))
            .cloned()
    }

    pub(crate) fn all(&self) -> &[std::sync::Arc<export::Export>] {
        &self.list
    }
}
