//! Talking to a server that serves the array: its control socket beside the members
//! (see the server's `control` module). The commands that act on an array (`status`,
//! `scrub`, `fail`, `add`, `remove`) ask here first; when no server answers, they work
//! on the members themselves.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use xraid_array::assemble;
use xraid_member::{DirectMode, OpenOptions};

/// The control socket of the array named by `paths`, if a server answers there.
pub fn served(paths: &[PathBuf]) -> Option<PathBuf> {
    let options = OpenOptions {
        write: false,
        direct: DirectMode::Off,
        lock: false,
    };
    let socket = assemble(paths, &options).ok()?.control_socket()?;
    UnixStream::connect(&socket).ok().map(|_| socket)
}

/// Sends one request and returns the server's answer (an error if it says no).
pub fn ask(socket: &Path, request: &serde_json::Value) -> Result<serde_json::Value> {
    let mut stream = UnixStream::connect(socket)
        .with_context(|| format!("{}: the server does not answer", socket.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(15)))?;
    stream.write_all(format!("{request}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let answer: serde_json::Value = serde_json::from_str(&line)
        .with_context(|| format!("{}: the server's answer is not JSON", socket.display()))?;
    if answer["ok"] != true {
        bail!(
            "the server says: {}",
            answer["error"].as_str().unwrap_or("no reason given")
        );
    }
    Ok(answer)
}

/// `path` as a server should be given it: absolute, since its working folder is not
/// ours, and canonical where it exists, as the server compares members by canonical
/// path.
pub fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf())
}
