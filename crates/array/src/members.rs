//! Changing who belongs to an array that is not being served, as `mdadm --add` does:
//! a member into a missing role, or, when the array is whole, a hot spare; and a spare
//! into a missing role when the array is opened. A member put into a role gets a
//! superblock that md reads as a member being recovered (the RECOVERY_OFFSET feature,
//! offset 0) and every present member records it in its role table; the rebuild runs
//! when the array is opened to write (`Array::sync` with `SyncKind::Recover` follows it
//! to the end).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use xraid_format::{
    Superblock, MD_FEATURE_RECOVERY_BITMAP, MD_FEATURE_RECOVERY_OFFSET, MD_FEATURE_REPLACEMENT,
    ROLE_SPARE,
};
use xraid_member::{FileMember, Member, OpenOptions};

use crate::assemble::member_options;
use crate::create::{random_uuid, write_superblock};
use crate::scan::{io_error, read_superblock};
use crate::{assemble, ArrayError, Assembled, LeftOutReason};

/// A member added to an array: into `role`, or as a spare (`None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    pub path: PathBuf,
    pub role: Option<u16>,
}

/// Adds `new` (a blank disk, a file, or a member of this array that was left out) to
/// the lowest missing role of the array named by `array`, or as a hot spare when the
/// array is whole or `spare` is asked. A member of another md array is refused unless
/// `force`; a file that does not exist is made (sparse) of `size` bytes when given.
pub fn add_member(
    array: &[PathBuf],
    new: &Path,
    size: Option<u64>,
    spare: bool,
    force: bool,
) -> Result<Added, ArrayError> {
    add_member_within(array, new, size, spare, force, None)
}

/// [`add_member`] for the hot spares `create --spares` names, which belong to the new
/// array as its members do: md stacks every device it is created with, so a spare's
/// larger logical blocks are the array's, not a reason to refuse it.
pub fn add_spare_at_create(
    array: &[PathBuf],
    new: &Path,
    size: Option<u64>,
    force: bool,
) -> Result<Added, ArrayError> {
    add_member_within(array, new, size, true, force, Some(u32::MAX))
}

/// [`add_member`], refusing a device with logical blocks larger than `block` (by
/// default the array's).
fn add_member_within(
    array: &[PathBuf],
    new: &Path,
    size: Option<u64>,
    spare: bool,
    force: bool,
    block: Option<u32>,
) -> Result<Added, ArrayError> {
    let options = member_options(true);
    let assembled = assemble(array, &options)?;
    let name = assembled.name();
    let new_real = std::fs::canonicalize(new).unwrap_or_else(|_| new.to_path_buf());
    for (role, m) in assembled.roles.iter().enumerate() {
        let Some(m) = m else { continue };
        let real = std::fs::canonicalize(&m.path).unwrap_or_else(|_| m.path.clone());
        if real == new_real {
            let sb = &m.superblock;
            if sb.feature_map & MD_FEATURE_RECOVERY_OFFSET != 0 {
                let member_sectors = assembled.geometry.member_sectors().max(1);
                return Err(ArrayError::AlreadyRebuilding {
                    path: new.to_path_buf(),
                    name,
                    role,
                    percent: sb.recovery_offset.min(member_sectors) * 100 / member_sectors,
                    how: "the next open to write (`xraid serve`, or a command that writes) goes on with it",
                });
            }
            return Err(ArrayError::AlreadyActive {
                path: new.to_path_buf(),
                name,
            });
        }
    }
    if assembled.geometry.level() == xraid_layout::Level::Raid0 {
        return Err(ArrayError::SpareRaid0 { name });
    }
    let missing = assembled.missing_roles();
    // A spare of this array added as a spare again (no role to take) would change
    // nothing (the server says the same).
    if (spare || missing.is_empty()) && assembled.has_spare(new) {
        return Err(ArrayError::AlreadySpare {
            path: new.to_path_buf(),
            name,
        });
    }
    let freshest = &assembled.superblock;
    let block = block.unwrap_or_else(|| assembled.logical_block_bytes());
    let (member, existing, integrity) = open_newcomer_for(&assembled, new, size, force, block)?;
    // A member of this array back for a role that is still missing takes that role;
    // any other newcomer the lowest missing one.
    let own_role = existing
        .as_ref()
        .filter(|old| old.set_uuid == freshest.set_uuid)
        .and_then(Superblock::role)
        .filter(|role| missing.contains(role));
    let role = if spare {
        None
    } else {
        own_role.or_else(|| missing.first().copied())
    };
    let mut sb = freshest.clone();
    crate::badblocks::fresh_superblock(&mut sb);
    sb.device_uuid = random_uuid();
    sb.data_size =
        crate::integrity::newcomer_data_size(member.size_bytes(), sb.data_offset, integrity);
    sb.feature_map &= !MD_FEATURE_RECOVERY_BITMAP;
    if let (Some(role), Some(old)) = (role, &existing) {
        // A member of this array back in its own role after a short absence catches
        // up on the chunks the bitmap marks (md's re-add), not the whole array.
        // Not one left mid-rebuild: it holds only part of its role.
        // Nor one whose log lists bad ranges: its new superblock forgets them, and
        // only a whole rebuild rewrites them.
        let same_role = old.set_uuid == freshest.set_uuid
            && old.feature_map & MD_FEATURE_RECOVERY_OFFSET == 0
            && !crate::badblocks::lists_ranges(old)
            && old.role() == Some(role)
            && old.data_offset == freshest.data_offset;
        let holder = assembled
            .roles
            .iter()
            .flatten()
            .find(|m| m.superblock.events == freshest.events);
        if same_role
            && holder.is_some_and(|h| {
                crate::bitmap::covers_member_since(&h.member, &h.superblock, old.events, &h.path)
            })
        {
            sb.feature_map |= MD_FEATURE_RECOVERY_BITMAP;
            // The same device, as md's re-add keeps it (its identity and its layout):
            // in integrity mode its table, current when it left, then stays trusted
            // outside the chunks it catches up on (forgotten there at open).
            sb.device_uuid = old.device_uuid;
            sb.data_size = old.data_size;
        }
    }
    assign(&assembled, &member, new, sb, role)?;
    Ok(Added {
        path: new.to_path_buf(),
        role,
    })
}

/// A replacement recorded for a member: `new` is being built to take `role` from
/// `old`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacing {
    pub old: PathBuf,
    pub new: PathBuf,
    pub role: u16,
}

/// Records `new` as the replacement of `old`, an active member of the array named by
/// `array` (md's want_replacement): `new` gets a superblock with md's REPLACEMENT
/// and RECOVERY_OFFSET features (offset 0) in `old`'s role, and every present member
/// records it in its role table (that role then has two entries, as md writes it).
/// The copy runs when the array is next opened to write (`Array::sync` with
/// `SyncKind::Recover` follows it), while `old` goes on serving. `new` is a blank disk
/// or file (made, sparse, of `size` bytes when it does not exist) or a hot spare of
/// this array. Refused with nothing changed: RAID-0, `old` not active (or still being
/// rebuilt), a replacement already recorded for the role, `new` active here or a
/// member of another array (unless `force`), or too small.
pub fn replace_member(
    array: &[PathBuf],
    old: &Path,
    new: &Path,
    size: Option<u64>,
    force: bool,
) -> Result<Replacing, ArrayError> {
    let options = member_options(true);
    let assembled = assemble(array, &options)?;
    let role = check_replacement(&assembled, old, new)?;
    let freshest = &assembled.superblock;
    let block = assembled.logical_block_bytes();
    let (member, existing, integrity) = open_newcomer_for(&assembled, new, size, force, block)?;
    let mut sb = freshest.clone();
    crate::badblocks::fresh_superblock(&mut sb);
    sb.device_uuid = random_uuid();
    if let Some(old_sb) = existing
        .as_ref()
        .filter(|e| e.set_uuid == freshest.set_uuid)
    {
        if assembled.has_spare(new) {
            // A hot spare keeps its identity and its entry of the role table.
            sb.device_uuid = old_sb.device_uuid;
            sb.dev_number = old_sb.dev_number;
        }
    }
    sb.data_size =
        crate::integrity::newcomer_data_size(member.size_bytes(), sb.data_offset, integrity);
    sb.feature_map &= !MD_FEATURE_RECOVERY_BITMAP;
    sb.feature_map |= MD_FEATURE_REPLACEMENT;
    assign(&assembled, &member, new, sb, Some(role))?;
    Ok(Replacing {
        old: old.to_path_buf(),
        new: new.to_path_buf(),
        role,
    })
}

/// The role of `old` when `new` may replace it: refuses RAID-0, an `old` that is not
/// an active member (or is being rebuilt), a role that already has a replacement,
/// and a `new` that is an active member or a replacement of this array.
fn check_replacement(assembled: &Assembled, old: &Path, new: &Path) -> Result<u16, ArrayError> {
    let name = assembled.name();
    if assembled.geometry.level() == xraid_layout::Level::Raid0 {
        return Err(ArrayError::ReplaceRaid0 { name });
    }
    let wanted = canonical(old);
    let role = assembled
        .roles
        .iter()
        .position(|m| m.as_ref().is_some_and(|m| canonical(&m.path) == wanted))
        .ok_or_else(|| ArrayError::NotActive {
            path: old.to_path_buf(),
            name: name.clone(),
        })?;
    let role16 = u16::try_from(role).map_err(|_| ArrayError::NotActive {
        path: old.to_path_buf(),
        name: name.clone(),
    })?;
    if assembled.member_states()[role] != xraid_engine::MemberState::Active {
        return Err(ArrayError::ReplaceRebuilding {
            path: old.to_path_buf(),
        });
    }
    let new_real = canonical(new);
    if assembled
        .roles
        .iter()
        .flatten()
        .any(|m| canonical(&m.path) == new_real)
    {
        return Err(ArrayError::AlreadyActive {
            path: new.to_path_buf(),
            name,
        });
    }
    if let Some(l) = assembled
        .left_out
        .iter()
        .find(|l| l.reason == LeftOutReason::Replacement && canonical(&l.path) == new_real)
    {
        return Err(ArrayError::AlreadyReplacement {
            path: l.path.clone(),
            name,
        });
    }
    if let Some(l) = assembled
        .left_out
        .iter()
        .find(|l| l.reason == LeftOutReason::Replacement && l.role == Some(role16))
    {
        return Err(ArrayError::AlreadyReplacing {
            role: role16,
            name,
            by: l.path.clone(),
        });
    }
    Ok(role16)
}

/// Opens `new` to join the array `assembled` offline ([`open_newcomer`], with room for
/// the array's data and, if it keeps them, its checksums), refusing a present member
/// under another name or a copy of one. Also says whether the array keeps checksums.
fn open_newcomer_for(
    assembled: &Assembled,
    new: &Path,
    size: Option<u64>,
    force: bool,
    block: u32,
) -> Result<(FileMember, Option<Superblock>, bool), ArrayError> {
    let freshest = &assembled.superblock;
    let integrity = crate::integrity::array_keeps_checksums(assembled)?;
    let need = crate::integrity::newcomer_need_bytes(
        freshest.data_offset,
        assembled.geometry.member_sectors(),
        integrity,
    );
    let (member, existing) = open_newcomer(new, size, need, &freshest.set_uuid, force, block)?;
    refuse_alias_of_present(assembled, existing.as_ref(), new)?;
    Ok((member, existing, integrity))
}

/// Refuses a newcomer whose superblock (`existing`) is that of a present member: the
/// member under another name the paths do not show (a loop device over its file),
/// whose superblock and data the newcomer's would overwrite, or a copy of it (as
/// mdadm refuses one: md cannot hold two devices with one identity).
fn refuse_alias_of_present(
    assembled: &Assembled,
    existing: Option<&Superblock>,
    new: &Path,
) -> Result<(), ArrayError> {
    let Some(sb) = existing.filter(|sb| sb.set_uuid == assembled.superblock.set_uuid) else {
        return Ok(());
    };
    let present = assembled
        .roles
        .iter()
        .flatten()
        .find(|m| m.superblock.device_uuid == sb.device_uuid);
    match present {
        Some(member) => Err(ArrayError::SameDeviceAs {
            path: new.to_path_buf(),
            member: member.path.clone(),
            name: assembled.name(),
        }),
        None => Ok(()),
    }
}

/// Opens `new` to join the array whose UUID is `uuid` and whose members need `need`
/// bytes, with `mdadm --add`'s checks, before anything is written: a file that does not
/// exist is made (sparse) of `size` bytes when given and large enough, a member of
/// another md array is refused unless `force`, and a member too small is refused.
/// Returns the member and the md superblock it already held, if any. Shared by
/// [`add_member`] and the server's live add, so both refuse the same things alike.
/// A device whose logical blocks are larger than `array_block` (the array's: its
/// devices' largest) is refused, as md refuses it at hot-add.
pub(crate) fn open_newcomer(
    new: &Path,
    size: Option<u64>,
    need: u64,
    uuid: &[u8; 16],
    force: bool,
    array_block: u32,
) -> Result<(FileMember, Option<Superblock>), ArrayError> {
    if !new.exists() {
        let size = crate::create::size_to_make(new, size, need)?;
        std::fs::File::create_new(new)
            .and_then(|f| f.set_len(size))
            .map_err(|source| io_error(new, source))?;
    }
    let member = FileMember::open(new, &member_options(true))?;
    if member.logical_block_bytes() > array_block {
        return Err(ArrayError::LargerBlocks {
            path: new.to_path_buf(),
            device: member.logical_block_bytes(),
            array: array_block,
        });
    }
    let existing = read_superblock(&member, new)?;
    if let Some(sb) = &existing {
        if sb.set_uuid != *uuid && !force {
            return Err(ArrayError::AlreadyMember {
                path: new.to_path_buf(),
                name: sb.name(),
                uuid: Superblock::uuid_string(&sb.set_uuid),
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
    Ok((member, existing))
}

/// The role-table entry a newcomer takes: `own` (the entry a returning member of this
/// array had) when it is free, else the first free one. Free means marked spare in
/// `roles` and not in `taken` (the entries of present members and of spares, which
/// md also marks spare).
pub(crate) fn free_slot(roles: &[u16], taken: &[usize], own: Option<usize>) -> Option<usize> {
    let free = |d: usize| roles.get(d) == Some(&ROLE_SPARE) && !taken.contains(&d);
    own.filter(|&d| free(d))
        .or_else(|| (0..roles.len()).find(|&d| free(d)))
}

/// Erases the md superblock of `member` (zeros where md looks for one) and makes that
/// durable, as `mdadm --zero-superblock` does, so that nothing takes it for a member
/// again.
pub(crate) fn erase_superblock(member: &dyn Member, path: &Path) -> Result<(), ArrayError> {
    member
        .write_at(
            &[0u8; xraid_format::SUPERBLOCK_BYTES],
            xraid_format::SUPERBLOCK_OFFSET_BYTES,
        )
        .and_then(|()| member.flush())
        .map_err(|source| io_error(path, source))
}

/// Writes `sb` (the newcomer's superblock, based on the array's) to `member` as the
/// holder of `role` being recovered, or as a spare, and records it in the role table of
/// every present member, all with a new event count.
fn assign(
    assembled: &Assembled,
    member: &dyn Member,
    path: &Path,
    mut sb: Superblock,
    role: Option<u16>,
) -> Result<(), ArrayError> {
    let freshest = &assembled.superblock;
    // A free entry of the role table: unused, and not the slot of a member or spare.
    let taken: Vec<usize> = assembled
        .roles
        .iter()
        .flatten()
        .map(|m| m.superblock.dev_number as usize)
        .chain(
            assembled
                .left_out
                .iter()
                .filter(|l| l.reason == LeftOutReason::Spare && l.path != path)
                .map(|l| l.superblock.dev_number as usize),
        )
        .collect();
    let own = (sb.set_uuid == freshest.set_uuid).then_some(sb.dev_number as usize);
    let dev =
        free_slot(&freshest.dev_roles, &taken, own).ok_or_else(|| ArrayError::NoFreeSlot {
            name: assembled.name(),
        })?;
    let mut roles = freshest.dev_roles.clone();
    roles[dev] = role.unwrap_or(ROLE_SPARE);
    let events = freshest.events + 1;
    let utime = utime_after(freshest);

    sb.dev_number = u32::try_from(dev).expect("role tables are small");
    if role.is_some() {
        sb.feature_map |= MD_FEATURE_RECOVERY_OFFSET;
    } else {
        sb.feature_map &= !MD_FEATURE_RECOVERY_OFFSET;
    }
    sb.recovery_offset = 0;
    sb.events = events;
    sb.utime = utime;
    sb.dev_roles = roles.clone();
    // The newcomer gets the array's bitmap (md's tools drop the feature without one).
    let holder = assembled
        .roles
        .iter()
        .flatten()
        .find(|m| m.superblock.events == freshest.events);
    if let Some(h) = holder {
        if let Some(image) = crate::bitmap::read_image(&h.member, &h.superblock, &h.path)? {
            crate::bitmap::write_copy(member, &sb, &image, path)?;
        }
    }
    crate::open::wipe_log_ring(member, &sb, path)?;
    write_superblock(member, &sb, path)?;
    member.flush().map_err(|source| io_error(path, source))?;
    write_role_table(assembled, &roles, None)
}

/// Writes `roles` into every present member's superblock (but `skip`'s) with a new
/// event count, and makes each durable.
fn write_role_table(
    assembled: &Assembled,
    roles: &[u16],
    skip: Option<usize>,
) -> Result<(), ArrayError> {
    let events = assembled.superblock.events + 1;
    let utime = utime_after(&assembled.superblock);
    for (r, m) in assembled.roles.iter().enumerate() {
        let Some(m) = m.as_ref().filter(|_| Some(r) != skip) else {
            continue;
        };
        let mut sb = m.superblock.clone();
        crate::bitmap::follow_events(&m.member, &sb, events, &m.path)?;
        sb.events = events;
        sb.utime = utime;
        sb.dev_roles = roles.to_vec();
        write_superblock(&m.member, &sb, &m.path)?;
        m.member
            .flush()
            .map_err(|source| io_error(&m.path, source))?;
    }
    Ok(())
}

/// `path` with symbolic links and relative parts resolved, where it exists: two
/// spellings of one member compare equal.
pub(crate) fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Opens a member to erase its superblock while the array is served. Without the lock:
/// the server itself may hold it (a member that failed stays open while I/O to it may
/// still be in the kernel), and no other xraid can be driving it, since the server
/// holds the locks of the array's present members.
pub(crate) fn open_unlocked(path: &Path) -> Result<FileMember, ArrayError> {
    let options = OpenOptions {
        write: true,
        direct: xraid_member::DirectMode::Off,
        lock: false,
    };
    Ok(FileMember::open(path, &options)?)
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The update time xraid writes into superblocks where its stripe log knows of every
/// write before them: to the microsecond, which md and mdadm never write (see
/// [`Superblock::encode_time_precise`]). A superblock whose time carries none was
/// written by them, or by an xraid session without the log: the rings know nothing
/// of what it wrote (`Engine::superblocks_unstamped`).
pub(crate) fn now_utime() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1 << 40, Superblock::encode_time_precise)
}

/// The update time of a superblock write that changes nothing the stripe log must
/// know of (the role table, a member's record): xraid's own ([`now_utime`]) only
/// where `freshest`, the array's newest superblock, was xraid's too, so that a
/// write by md stays told from xraid's until an open has put the log's doubt on its
/// rings.
pub(crate) fn utime_after(freshest: &Superblock) -> u64 {
    if freshest.utime_has_microseconds() {
        now_utime()
    } else {
        Superblock::encode_time(now_secs())
    }
}

/// Assembles the array and, where roles are missing and hot spares are at hand, puts
/// the spares into those roles (to be rebuilt when the array is opened to write), as md
/// does when it assembles a degraded array with spares. Returns the assembly and the
/// spares it promoted, by path and role.
pub fn assemble_with_spares(
    paths: &[PathBuf],
    options: &OpenOptions,
) -> Result<(Assembled, Vec<Added>), ArrayError> {
    let assembled = assemble(paths, options)?;
    let spares: Vec<(PathBuf, Superblock)> = assembled
        .left_out
        .iter()
        .filter(|l| l.reason == LeftOutReason::Spare)
        .map(|l| (l.path.clone(), l.superblock.clone()))
        .collect();
    let missing = assembled.missing_roles();
    if !options.write || missing.is_empty() || spares.is_empty() {
        return Ok((assembled, Vec::new()));
    }
    let mut promoted = Vec::new();
    let mut current = assembled;
    for (role, (path, spare_sb)) in missing.into_iter().zip(spares) {
        let member = FileMember::open(&path, options)?;
        let mut sb = current.superblock.clone();
        // The freshest superblock may be a member's catching up from the bitmap (or a
        // replacement's): a spare holds nothing, and is rebuilt whole.
        sb.feature_map &= !(MD_FEATURE_RECOVERY_BITMAP | MD_FEATURE_REPLACEMENT);
        sb.device_uuid = spare_sb.device_uuid;
        sb.dev_number = spare_sb.dev_number;
        sb.data_offset = spare_sb.data_offset;
        sb.data_size = spare_sb.data_size;
        // The spare keeps its own table slot.
        assign(&current, &member, &path, sb, Some(role))?;
        drop(member);
        promoted.push(Added {
            path,
            role: Some(role),
        });
        // Members are locked while open: let go before assembling again.
        drop(current);
        current = assemble(paths, options)?;
    }
    Ok((current, promoted))
}

/// Marks `member` (an active member of the array named by `array`) faulty in every
/// other member's role table, as `mdadm --fail` does: it is left out from then on, and
/// a hot spare takes its role when the array is next opened to write. Refused when the
/// array could not survive without it.
pub fn fail_member(array: &[PathBuf], member: &Path) -> Result<u16, ArrayError> {
    let options = member_options(true);
    let assembled = assemble(array, &options)?;
    let wanted = std::fs::canonicalize(member).unwrap_or_else(|_| member.to_path_buf());
    let role = assembled
        .roles
        .iter()
        .position(|m| {
            m.as_ref().is_some_and(|m| {
                std::fs::canonicalize(&m.path).unwrap_or_else(|_| m.path.clone()) == wanted
            })
        })
        .ok_or_else(|| ArrayError::NotActive {
            path: member.to_path_buf(),
            name: assembled.name(),
        })?;
    if let Some(detail) = fail_refusal(assembled.geometry, &assembled.member_states(), role) {
        return Err(ArrayError::WouldLoseData {
            path: member.to_path_buf(),
            detail,
        });
    }
    let failed = assembled.roles[role]
        .as_ref()
        .expect("the role was found present")
        .superblock
        .dev_number as usize;
    let mut roles = assembled.superblock.dev_roles.clone();
    roles[failed] = xraid_format::ROLE_FAULTY;
    write_role_table(&assembled, &roles, Some(role))?;
    Ok(u16::try_from(role).expect("roles fit u16"))
}

/// Why failing the member in `role` would lose data, when it would: `None` when the
/// array (in `states`) survives without it. Shared with the server, so that `xraid
/// fail` says the same served or not.
pub fn fail_refusal(
    geometry: xraid_layout::Geometry,
    states: &[xraid_engine::MemberState],
    role: usize,
) -> Option<String> {
    use xraid_engine::MemberState;
    let mut after = states.to_vec();
    *after.get_mut(role)? = MemberState::Failed;
    let lost = xraid_engine::Engine::lost_with(geometry, after)?;
    // A mirror loses data when a chunk loses its last copy, however many members have
    // failed elsewhere: the count the engine's message gives is not the reason then.
    if geometry.copies_count() > 1 {
        if let Some(others) = last_copy_partners(geometry, states, role) {
            let failed = others.iter().all(|&r| states[r] == MemberState::Failed);
            let rebuilding = others.iter().all(|&r| states[r] == MemberState::Rebuilding);
            let roles = others
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" and ");
            let (copy, role_word, verb) = if others.len() == 1 {
                (
                    "copy",
                    "role",
                    if failed {
                        "has failed"
                    } else {
                        "is still being rebuilt"
                    },
                )
            } else {
                let verb = if failed {
                    "have failed"
                } else if rebuilding {
                    "are still being rebuilt"
                } else {
                    "have failed or are still being rebuilt"
                };
                ("copies", "roles", verb)
            };
            return Some(format!(
                "it holds the last copy of some data, whose other {copy}, on {role_word} {roles}, {verb}: {} would lose that data",
                geometry.level()
            ));
        }
    }
    Some(lost.to_string())
}

/// For a mirrored array, the other roles holding copies of a chunk that only `role`
/// holds an active copy of, if there is one. Copy placement repeats every
/// `raid_disks * copies` chunks, so that many cover every pattern.
fn last_copy_partners(
    geometry: xraid_layout::Geometry,
    states: &[xraid_engine::MemberState],
    role: usize,
) -> Option<Vec<usize>> {
    let active = |r: usize| states.get(r) == Some(&xraid_engine::MemberState::Active);
    let chunk = u64::from(geometry.chunk_sectors()).max(1);
    let period = u64::from(geometry.raid_disks()) * u64::from(geometry.copies_count());
    let chunks = (geometry.array_sectors() / chunk).min(period);
    (0..chunks).find_map(|c| {
        let holders: Vec<usize> = geometry
            .copies(c * chunk)
            .as_slice()
            .iter()
            .map(|p| p.member.index())
            .collect();
        let only_here = holders.contains(&role) && holders.iter().all(|&r| r == role || !active(r));
        only_here.then(|| holders.into_iter().filter(|&r| r != role).collect())
    })
}

/// Takes `member` — one the array leaves out (failed, stale or a spare) — out of the
/// array for good, as `mdadm --remove` followed by `--zero-superblock` does: its entry
/// in the role table is freed and its md superblock erased, so neither xraid nor md
/// takes it for a member again. An active member must be failed first.
pub fn remove_member(array: &[PathBuf], member: &Path) -> Result<(), ArrayError> {
    let options = member_options(true);
    let assembled = assemble(array, &options)?;
    let wanted = std::fs::canonicalize(member).unwrap_or_else(|_| member.to_path_buf());
    let same = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()) == wanted;
    if assembled.roles.iter().flatten().any(|m| same(&m.path)) {
        return Err(ArrayError::StillActive {
            path: member.to_path_buf(),
        });
    }
    let left = assembled
        .left_out
        .iter()
        .find(|l| same(&l.path))
        .ok_or_else(|| ArrayError::NotInArray {
            path: member.to_path_buf(),
            name: assembled.name(),
        })?;
    let dev = left.superblock.dev_number as usize;
    let mut roles = assembled.superblock.dev_roles.clone();
    let taken_by_present = assembled
        .roles
        .iter()
        .flatten()
        .any(|m| m.superblock.dev_number as usize == dev);
    if dev < roles.len() && !taken_by_present {
        roles[dev] = ROLE_SPARE;
    }
    write_role_table(&assembled, &roles, None)?;
    let removed = FileMember::open(member, &options)?;
    erase_superblock(&removed, member)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{create, CreateOptions};
    use xraid_member::{FaultPlan, FaultyMember};

    const MIB: u64 = 1 << 20;

    fn raid5(dir: &Path) -> Vec<PathBuf> {
        let members: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("d{i}"))).collect();
        let opts = CreateOptions {
            chunk_bytes: 64 << 10,
            size_bytes: Some(16 * MIB),
            ..CreateOptions::new(xraid_layout::Level::Raid5, "wipe", members.clone())
        };
        create(&opts, &mut |_, _| {}).expect("create");
        members
    }

    /// A device that cannot take the zeroes over its stripe-log ring is refused before
    /// it gets a superblock: the error names it, the members' superblocks (event count,
    /// role table) are as they were, and it is no member or spare afterwards.
    #[test]
    fn a_newcomer_whose_log_ring_cannot_be_wiped_joins_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let members = raid5(dir.path());
        let before = assemble(&members, &member_options(false)).expect("assemble");
        let (events, roles) = (
            before.superblock.events,
            before.superblock.dev_roles.clone(),
        );
        drop(before);

        let new = dir.path().join("new");
        let assembled = assemble(&members, &member_options(true)).expect("assemble");
        let sb = assembled.superblock.clone();
        let (start, sectors) = crate::open::log_ring(&sb).expect("the array logs stripes");
        let (member, _) =
            open_newcomer(&new, Some(16 * MIB), 16 * MIB, &sb.set_uuid, false, 512).expect("open");
        // Writes to the ring's last sector fail, as on a disk that stopped taking writes
        // there; the superblock's sector would still take one.
        let last = (start + sectors - 1) * 512;
        let plan = FaultPlan {
            write_error_ranges: std::iter::once(last..last + 512).collect(),
            ..FaultPlan::default()
        };
        let faulty = FaultyMember::new(Box::new(member), plan);
        let err = assign(&assembled, &faulty, &new, sb, None).expect_err("the wipe fails");
        assert!(
            matches!(&err, ArrayError::Io { path, .. } if path == &new),
            "the error names the device: {err}"
        );
        drop(assembled);

        let on_new = read_superblock(&faulty, &new).expect("read");
        assert!(on_new.is_none(), "the device got no superblock");
        let after = assemble(&members, &member_options(false)).expect("assemble");
        assert_eq!(after.superblock.events, events, "no new event count");
        assert_eq!(
            after.superblock.dev_roles, roles,
            "the role table is as it was"
        );
        assert!(after.left_out.is_empty(), "no spare was recorded");
    }
}
