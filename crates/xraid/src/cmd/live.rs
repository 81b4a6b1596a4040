//! Talking to a server that serves the array: its control socket beside the members
//! (see the server's `control` module). The commands that act on an array (`status`,
//! `scrub`, `fail`, `add`, `remove`) ask here first; when no server answers, they work
//! on the members themselves.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use xraid_member::{DirectMode, FileMember, OpenOptions};

/// The control socket of the array named by `paths`, if a server answers there.
///
/// Found from the members' superblocks alone, not by assembling the array: a served
/// array that has failed (or whose members the server changed since) does not
/// assemble offline, yet its server still answers and knows better than the disks.
pub fn served(paths: &[PathBuf]) -> Option<PathBuf> {
    sockets(paths)
        .into_iter()
        .find(|socket| UnixStream::connect(socket).is_ok())
}

/// Where a server of the array named by `paths` would listen: beside its first member
/// (see `Assembled::control_socket`), which is beside any of them when they share a
/// folder; one place per folder the members are in. None when the paths hold members
/// of more than one array: assembly says what is wrong then.
fn sockets(paths: &[PathBuf]) -> Vec<PathBuf> {
    let options = OpenOptions {
        write: false,
        direct: DirectMode::Off,
        lock: false,
    };
    let mut uuid = None;
    let mut folders: Vec<PathBuf> = Vec::new();
    // Each path on its own: one that is gone (a dead member's file) hides no other.
    let candidates = paths
        .iter()
        .flat_map(|p| xraid_array::member_candidates(std::slice::from_ref(p)).unwrap_or_default());
    for path in candidates {
        // A file that cannot be read or holds no (sound) superblock is no member.
        let Ok(member) = FileMember::open(&path, &options) else {
            continue;
        };
        let Ok(Some(sb)) = xraid_array::read_superblock(&member, &path) else {
            continue;
        };
        match uuid {
            Some(u) if u != sb.set_uuid => return Vec::new(),
            _ => uuid = Some(sb.set_uuid),
        }
        let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
        if !folders.contains(&folder) {
            folders.push(folder);
        }
    }
    let Some(uuid) = uuid else {
        return Vec::new();
    };
    folders
        .iter()
        .map(|folder| xraid_array::control_socket_in(folder, &uuid))
        .collect()
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
