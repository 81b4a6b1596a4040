//! Turning the paths a user gave into member candidates: folders are expanded to the
//! files and block devices in them, the same file given twice is refused, and each
//! candidate's superblock is read.

use std::ops::Range;
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
    let out = drop_folder_aliases(out);
    refuse_duplicates(&out)?;
    Ok(out)
}

/// The device and inode that tell one file from another (a block device by its device
/// number); none where it cannot be looked at.
fn identity(path: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some(if meta.file_type().is_block_device() {
        (meta.rdev(), 0)
    } else {
        (meta.dev(), meta.ino())
    })
}

/// One candidate per file: a folder holding a file under two names (a symbolic or hard
/// link beside it), or a file the user also named, gives it once — under the name the
/// user gave, else under a name that is not a symbolic link, else the first. Only names
/// the user gave twice are refused (`refuse_duplicates`).
fn drop_folder_aliases(paths: Vec<MemberPath>) -> Vec<MemberPath> {
    let ids: Vec<Option<(u64, u64)>> = paths.iter().map(|p| identity(&p.path)).collect();
    let is_link = |p: &MemberPath| {
        std::fs::symlink_metadata(&p.path).is_ok_and(|m| m.file_type().is_symlink())
    };
    // Preference: named by the user, then not a link, then first.
    let rank = |i: usize| (!paths[i].explicit, is_link(&paths[i]), i);
    let keep: Vec<bool> = (0..paths.len())
        .map(|i| {
            paths[i].explicit
                || ids[i].is_none()
                || (0..paths.len())
                    .filter(|&j| j != i && ids[j] == ids[i])
                    .all(|j| rank(i) < rank(j))
        })
        .collect();
    paths
        .into_iter()
        .zip(keep)
        .filter_map(|(p, keep)| keep.then_some(p))
        .collect()
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

/// A loop device among the members: its backing file's identity, the device, the file,
/// and the bytes of the file it covers.
type Backed<'a> = ((u64, u64), &'a Path, PathBuf, Range<u64>);

/// Refuses a file named twice, comparing device and inode so that two spellings of
/// one path (or a hard link) are caught too.
pub(crate) fn refuse_duplicates(paths: &[MemberPath]) -> Result<(), ArrayError> {
    let mut seen: Vec<((u64, u64), &MemberPath)> = Vec::new();
    // The files loop devices among them read and write, each with its device and
    // the bytes of the file it reads and writes.
    let mut backed: Vec<Backed> = Vec::new();
    // The whole disks of the partitions among them, each with its partition.
    let mut partitions: Vec<((u64, u64), &MemberPath)> = Vec::new();
    for p in paths {
        let Some(key) = identity(&p.path) else {
            continue;
        };
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            return Err(ArrayError::Duplicate {
                first: first.path.clone(),
                second: p.path.clone(),
            });
        }
        seen.push((key, p));
        if let Some(disk) = whole_disk_of_partition(&p.path) {
            partitions.push((disk, p));
        }
        if let Some((file, bytes)) = loop_backing_file(&p.path) {
            if let Some(file_key) = identity(&file) {
                backed.push((file_key, &p.path, file, bytes));
            }
        }
    }
    // A partition lies inside its disk: both members, each would write the other's.
    // Not where a folder holds both (links to a disk and to its partitions): at most
    // one of them can be a member (md's superblock sits 4 KiB into it), and a device
    // that is none is passed over there, as any other beside the members.
    for (disk, partition) in &partitions {
        let one_named = |whole: &MemberPath| whole.explicit || partition.explicit;
        if let Some((_, named)) = seen.iter().find(|(k, m)| k == disk && one_named(m)) {
            return Err(ArrayError::PartitionOfMember {
                partition: partition.path.clone(),
                disk: named.path.clone(),
            });
        }
    }
    // A loop device and its own file are one store under two names; so are two loop
    // devices over the same bytes of one file. Taken as two members, each write to one
    // would land on the other's data. Loop devices over parts of one file that do not
    // overlap (`losetup --offset --sizelimit`, as partitions of an image) are two.
    for (i, (key, device, file, bytes)) in backed.iter().enumerate() {
        if let Some((_, named)) = seen.iter().find(|(k, _)| k == key) {
            return Err(ArrayError::LoopOverMember {
                device: device.to_path_buf(),
                file: file.clone(),
                named: named.path.clone(),
            });
        }
        if let Some((_, other, _, _)) = backed[..i]
            .iter()
            .find(|(k, _, _, r)| k == key && r.start < bytes.end && bytes.start < r.end)
        {
            return Err(ArrayError::LoopsOverOneFile {
                device: other.to_path_buf(),
                other: device.to_path_buf(),
                file: file.clone(),
            });
        }
    }
    Ok(())
}

/// The identity (as [`identity`] gives it) of the disk `path` is a partition of, if it
/// is a partition (from sysfs: the partition's folder sits in its disk's).
fn whole_disk_of_partition(path: &Path) -> Option<(u64, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.file_type().is_block_device() {
        return None;
    }
    let rdev = meta.rdev();
    let sys = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        libc::major(rdev),
        libc::minor(rdev)
    ));
    if !sys.join("partition").exists() {
        return None;
    }
    let disk = std::fs::read_to_string(sys.join("../dev")).ok()?;
    let (major, minor) = disk.trim().split_once(':')?;
    let disk = libc::makedev(major.parse().ok()?, minor.parse().ok()?);
    Some((disk, 0))
}

/// The file a loop device reads and writes, and the bytes of it the device covers
/// (from its offset, up to its size limit or the file's end), if `path` is a bound
/// loop device (from sysfs, as `losetup` shows it).
fn loop_backing_file(path: &Path) -> Option<(PathBuf, Range<u64>)> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.file_type().is_block_device() {
        return None;
    }
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}/loop"));
    let file = std::fs::read_to_string(sys.join("backing_file")).ok()?;
    // Unreadable, a field counts as the whole file: such devices are taken to overlap.
    let number = |name: &str| -> Option<u64> {
        std::fs::read_to_string(sys.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let start = number("offset").unwrap_or(0);
    let end = match number("sizelimit") {
        Some(0) | None => u64::MAX,
        Some(limit) => start.saturating_add(limit),
    };
    Some((PathBuf::from(file.trim_end_matches('\n')), start..end))
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

/// Which md superblock of a version xraid does not use (0.90, 1.0, 1.1) `member`
/// holds, if any: they sit elsewhere than 1.2's 4 KiB (1.1 at the start, 1.0 within the
/// last 8 KiB, 0.90 in the last 64 KiB block), so only their magic number says so.
pub fn other_md_metadata(member: &dyn Member) -> Option<&'static str> {
    let size = member.size_bytes();
    let magic_at = |offset: u64, both_endians: bool| {
        let mut buf = [0u8; 4];
        if offset + 4 > size || member.read_at(&mut buf, offset).is_err() {
            return false;
        }
        u32::from_le_bytes(buf) == xraid_format::MD_SB_MAGIC
            || (both_endians && u32::from_be_bytes(buf) == xraid_format::MD_SB_MAGIC)
    };
    let sectors = size / 512;
    let end_1_0 = sectors.checked_sub(16).map(|s| (s & !7) * 512);
    // 0.90 is written in the host's byte order.
    let end_0_90 = (size >> 16).checked_sub(1).map(|b| b << 16);
    if magic_at(0, false) {
        Some("1.1")
    } else if end_1_0.is_some_and(|at| at >= 8192 && magic_at(at, false)) {
        Some("1.0")
    } else if end_0_90.is_some_and(|at| magic_at(at, true)) {
        Some("0.90")
    } else {
        None
    }
}

pub(crate) fn io_error(path: &Path, source: std::io::Error) -> ArrayError {
    ArrayError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(found: &[MemberPath]) -> Vec<String> {
        found
            .iter()
            .map(|m| {
                m.path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    #[test]
    fn a_folder_gives_each_file_once_whatever_links_sit_beside_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for name in ["d0", "d1"] {
            std::fs::write(d.join(name), b"member").expect("member");
        }
        // "a-link" sorts before its target, "d1-hard" after.
        std::os::unix::fs::symlink(d.join("d1"), d.join("a-link")).expect("symlink");
        std::fs::hard_link(d.join("d0"), d.join("d0-hard")).expect("hard link");
        let found = expand(&[d.to_path_buf()]).expect("expand");
        assert_eq!(names(&found), ["d0", "d1"]);
        // A file the user named wins over the folder's names of it.
        let found = expand(&[d.to_path_buf(), d.join("a-link")]).expect("expand");
        assert_eq!(names(&found), ["d0", "a-link"]);
        assert!(found[1].explicit);
        // The same file named twice by the user is still refused.
        let twice = expand(&[d.join("d1"), d.join("a-link")]);
        assert!(
            matches!(twice, Err(ArrayError::Duplicate { .. })),
            "{twice:?}"
        );
    }
}
