//! Changing who belongs to an array that is not being served: adding a member to a
//! missing role, as `mdadm --add` does. The newcomer gets a superblock that md reads as
//! a member being recovered (the RECOVERY_OFFSET feature, offset 0) and every present
//! member records it in its role table; the rebuild itself runs when the array is next
//! opened to write (`Array::sync` with `SyncKind::Recover` follows it to the end).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use xraid_format::{MD_FEATURE_RECOVERY_OFFSET, ROLE_SPARE};
use xraid_layout::SECTOR_BYTES;
use xraid_member::{FileMember, Member};

use crate::assemble::member_options;
use crate::create::{random_uuid, write_superblock};
use crate::scan::read_superblock;
use crate::{assemble, ArrayError};

/// A member added to an array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    pub path: PathBuf,
    pub role: u16,
}

/// Adds `new` (a blank disk, a file, or a member of this array that was left out) to
/// the lowest missing role of the array named by `array`. A member of another md
/// array is refused unless `force`; a file that does not exist is made (sparse) of
/// `size` bytes when that is given.
pub fn add_member(
    array: &[PathBuf],
    new: &Path,
    size: Option<u64>,
    force: bool,
) -> Result<Added, ArrayError> {
    let options = member_options(true);
    let assembled = assemble(array, &options)?;
    let name = assembled.name();
    let new_real = std::fs::canonicalize(new).unwrap_or_else(|_| new.to_path_buf());
    for m in assembled.roles.iter().flatten() {
        let real = std::fs::canonicalize(&m.path).unwrap_or_else(|_| m.path.clone());
        if real == new_real {
            return Err(ArrayError::AlreadyActive {
                path: new.to_path_buf(),
                name,
            });
        }
    }
    let Some(&role) = assembled.missing_roles().first() else {
        return Err(ArrayError::NotDegraded { name });
    };
    let freshest = &assembled.superblock;
    let need = (freshest.data_offset + assembled.geometry.member_sectors()) * SECTOR_BYTES;
    if !new.exists() {
        let size = size.ok_or_else(|| ArrayError::MissingFile {
            path: new.to_path_buf(),
        })?;
        if size < need {
            return Err(ArrayError::TooSmall {
                path: new.to_path_buf(),
                size,
                need,
            });
        }
        std::fs::File::create_new(new)
            .and_then(|f| f.set_len(size))
            .map_err(|source| crate::scan::io_error(new, source))?;
    }
    let member = FileMember::open(new, &options)?;
    if let Some(sb) = read_superblock(&member, new)? {
        if sb.set_uuid != freshest.set_uuid && !force {
            return Err(ArrayError::AlreadyMember {
                path: new.to_path_buf(),
                name: sb.name(),
                uuid: xraid_format::Superblock::uuid_string(&sb.set_uuid),
            });
        }
    }
    if member.size_bytes() < need {
        return Err(ArrayError::TooSmall {
            path: new.to_path_buf(),
            size: member.size_bytes(),
            need,
        });
    }
    // A free entry of the role table: unused (spare) and not the slot of a member present.
    let taken: Vec<usize> = assembled
        .roles
        .iter()
        .flatten()
        .map(|m| m.superblock.dev_number as usize)
        .collect();
    let dev = (0..freshest.dev_roles.len())
        .find(|&d| freshest.dev_roles[d] == ROLE_SPARE && !taken.contains(&d))
        .ok_or_else(|| ArrayError::NoFreeSlot { name: name.clone() })?;
    let mut roles = freshest.dev_roles.clone();
    roles[dev] = role;
    let events = freshest.events + 1;
    let utime = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    let mut sb = freshest.clone();
    sb.dev_number = u32::try_from(dev).expect("role tables are small");
    sb.device_uuid = random_uuid();
    sb.feature_map |= MD_FEATURE_RECOVERY_OFFSET;
    sb.recovery_offset = 0;
    sb.data_size = member.size_bytes() / SECTOR_BYTES - sb.data_offset;
    sb.events = events;
    sb.utime = utime;
    sb.dev_roles = roles.clone();
    write_superblock(&member, &sb, new)?;
    member
        .flush()
        .map_err(|source| crate::scan::io_error(new, source))?;
    for m in assembled.roles.iter().flatten() {
        let mut present = m.superblock.clone();
        present.events = events;
        present.utime = utime;
        present.dev_roles = roles.clone();
        write_superblock(&m.member, &present, &m.path)?;
        m.member
            .flush()
            .map_err(|source| crate::scan::io_error(&m.path, source))?;
    }
    Ok(Added {
        path: new.to_path_buf(),
        role,
    })
}
