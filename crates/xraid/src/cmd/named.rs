//! What one ARRAY argument names (`xraid fail`, `remove`, `add`, `replace`): a folder
//! names the members in it; one member's path names its whole array — the other
//! members are looked for where a member's siblings are: the files of its folder, or,
//! for a disk, the machine's block devices (as `mdadm --examine --scan` finds them).
//! Before, one member's path named an array of that member alone, which cannot start.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use xraid_member::{DirectMode, FileMember, OpenOptions};

/// The paths to assemble for `array`: the folder itself, or the members of the array
/// the one member `array` belongs to (itself first). Anything else (not a member, a
/// superblock that cannot be read) is given back as it is, for assembly to say why.
pub fn array_paths(array: &Path) -> Vec<PathBuf> {
    let as_given = vec![array.to_path_buf()];
    let Ok(meta) = std::fs::metadata(array) else {
        return as_given;
    };
    if meta.is_dir() {
        return as_given;
    }
    let Some(uuid) = set_uuid(array) else {
        return as_given;
    };
    let siblings = if meta.file_type().is_block_device() {
        block_devices()
    } else {
        xraid_array::member_candidates(&[folder_of(array).to_path_buf()]).unwrap_or_default()
    };
    let me = std::fs::canonicalize(array).ok();
    let mut paths = as_given;
    for path in siblings {
        if std::fs::canonicalize(&path).ok() == me {
            continue;
        }
        if set_uuid(&path) == Some(uuid) {
            paths.push(path);
        }
    }
    paths
}

/// The folder a member file's siblings are looked for in ("." for a bare name).
pub fn folder_of(member: &Path) -> &Path {
    member
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The array UUID in `path`'s md superblock, if it has one.
fn set_uuid(path: &Path) -> Option<[u8; 16]> {
    let options = OpenOptions {
        write: false,
        direct: DirectMode::Off,
        lock: false,
    };
    let member = FileMember::open(path, &options).ok()?;
    let sb = xraid_array::read_superblock(&member, path).ok()??;
    Some(sb.set_uuid)
}

/// The machine's block devices, as the kernel lists them (/sys/class/block), by their
/// /dev names.
fn block_devices() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/sys/class/block") else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| Path::new("/dev").join(e.file_name()))
        .filter(|dev| std::fs::metadata(dev).is_ok_and(|m| m.file_type().is_block_device()))
        .collect();
    found.sort();
    found
}
