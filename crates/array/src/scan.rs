//! Turning the paths a user gave into member candidates: folders are expanded to the
//! files and block devices in them, the same file given twice is refused, and each
//! candidate's superblock is read.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use xraid_format::{FormatError, Superblock, SUPERBLOCK_OFFSET_BYTES};
use xraid_member::Member;

use crate::ArrayError;

/// Bytes read to find a superblock: the largest md writes (256 + 2 * max_dev roles).
const SUPERBLOCK_READ_BYTES: usize = 4096;

/// A path that may hold a member, and whether the user named it (rather than a folder).
#[derive(Debug, Clone)]
pub struct MemberPath {
    pub path: PathBuf,
    pub explicit: bool,
}

/// Expands folders and refuses duplicates (the same file under two names too).
pub(crate) fn expand(paths: &[PathBuf]) -> Result<Vec<MemberPath>, ArrayError> {
    if paths.is_empty() {
        return Err(ArrayError::NoMembers);
    }
    let mut out: Vec<MemberPath> = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| io_error(path, source))?;
        if meta.is_dir() {
            let mut found = folder_members(path)?;
            if found.is_empty() {
                return Err(ArrayError::EmptyFolder { path: path.clone() });
            }
            out.append(&mut found);
        } else {
            out.push(MemberPath {
                path: path.clone(),
                explicit: true,
            });
        }
    }
    refuse_duplicates(&out)?;
    Ok(out)
}

fn folder_members(dir: &Path) -> Result<Vec<MemberPath>, ArrayError> {
    let entries = std::fs::read_dir(dir).map_err(|source| io_error(dir, source))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| io_error(dir, source))?;
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_file() || meta.file_type().is_block_device() {
            found.push(MemberPath {
                path,
                explicit: false,
            });
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// Refuses a file named twice, comparing device and inode so that two spellings of
/// one path (or a hard link) are caught too.
pub(crate) fn refuse_duplicates(paths: &[MemberPath]) -> Result<(), ArrayError> {
    let mut seen: Vec<((u64, u64), &Path)> = Vec::new();
    for p in paths {
        let Ok(meta) = std::fs::metadata(&p.path) else {
            continue;
        };
        let key = if meta.file_type().is_block_device() {
            (meta.rdev(), 0)
        } else {
            (meta.dev(), meta.ino())
        };
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            return Err(ArrayError::Duplicate {
                first: first.to_path_buf(),
                second: p.path.clone(),
            });
        }
        seen.push((key, &p.path));
    }
    Ok(())
}

/// The md superblock of a member, if it has one: `Ok(None)` when there is no md magic.
pub fn read_superblock(member: &dyn Member, path: &Path) -> Result<Option<Superblock>, ArrayError> {
    let mut buf = vec![0u8; SUPERBLOCK_READ_BYTES];
    if member.size_bytes() < SUPERBLOCK_OFFSET_BYTES + SUPERBLOCK_READ_BYTES as u64 {
        return Ok(None);
    }
    member
        .read_at(&mut buf, SUPERBLOCK_OFFSET_BYTES)
        .map_err(|source| io_error(path, source))?;
    match Superblock::parse(&buf) {
        Ok(sb) => Ok(Some(sb)),
        Err(FormatError::NotMd { .. }) => Ok(None),
        Err(source) => Err(ArrayError::Superblock {
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub(crate) fn io_error(path: &Path, source: std::io::Error) -> ArrayError {
    ArrayError::Io {
        path: path.to_path_buf(),
        source,
    }
}
