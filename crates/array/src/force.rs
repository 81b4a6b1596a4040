//! Starting an array that failed, as `mdadm --assemble --force` does, without its
//! guesswork: the members whose failure stopped the array are taken back into their
//! roles when nothing can have been written without them since.
//!
//! When a member fails past the level's redundancy, the engine refuses every request
//! from then on, and the superblocks of the members left record it faulty. Such a
//! member holds every write acknowledged before it failed: only the writes its
//! failure cut off are torn. Which members failed that way is read from their own
//! superblocks: the failures each had seen recorded, with its own, leave the level
//! past its redundancy. One whose own record leaves the array able to go on may have
//! missed writes taken after it failed (two members failing before either is
//! recorded look alike so: neither is taken). Every member that failed with the array is taken
//! back, and the others left failed must have failed before it, or the rows the
//! failure tore on them were never named. A role the newest role table still gives
//! to an absent device was lost while that device served on: refused too.
//!
//! What the failure tore, the engine named as it happened (with the stripe log):
//! a write cut off with the failing member's part unwritten leaves parity that may
//! hold it, so the rows of a member missing before are unknown there — named on the
//! rings' markers, read as errors until a write covers them (see the engine's
//! `stripe::torn_by_the_loss`). The member taken back holds its own rows, old or new.
//! Without the log that is md's write hole, and the start says so.
//!
//! The superblocks written here owe a resync (the array was written when it failed)
//! and carry the stripe log's stamp where the array's newest did.

use std::path::{Path, PathBuf};

use xraid_format::{Superblock, MD_FEATURE_RECOVERY_OFFSET, MD_FEATURE_REPLACEMENT, ROLE_FAULTY};
use xraid_member::{FileMember, Member};

use crate::assemble::{assemble_anyway, cannot_start, member_options};
use crate::create::write_superblock;
use crate::scan::io_error;
use crate::{ArrayError, Assembled, LeftOutReason};

/// A member taken back into its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forced {
    pub path: PathBuf,
    pub role: u16,
    /// The event count its own superblock last recorded (before it failed).
    pub events: u64,
}

/// Takes back into their roles the members of the array named by `array` (member
/// paths or a folder) that failed with it (see [`failed_with_the_array`]), every one,
/// and records them active. Returns them (none when the array starts as it is).
/// Refused, writing nothing, where no such member would do.
pub fn force_start(array: &[PathBuf]) -> Result<Vec<Forced>, ArrayError> {
    let assembled = assemble_anyway(array, &member_options(true))?;
    if cannot_start(&assembled).is_none() {
        return Ok(Vec::new());
    }
    let chosen = plan(&assembled)?;
    let forced: Vec<Forced> = chosen
        .iter()
        .map(|&i| {
            let l = &assembled.left_out[i];
            Forced {
                path: l.path.clone(),
                role: l.role.unwrap_or_default(),
                events: l.superblock.events,
            }
        })
        .collect();
    record(&assembled, &chosen)?;
    Ok(forced)
}

/// The members [`force_start`] would take back into an array that cannot start, by
/// path, or why it would not.
pub fn forcible(assembled: &Assembled) -> Result<Vec<PathBuf>, ArrayError> {
    Ok(plan(assembled)?
        .into_iter()
        .map(|i| assembled.left_out[i].path.clone())
        .collect())
}

/// The roles a member's own superblock records as held by no working device (failed
/// or missing) when it was last written.
fn failed_in_own_table(a: &Assembled, sb: &Superblock) -> Vec<usize> {
    (0..a.roles.len())
        .filter(|&role| {
            !sb.dev_roles
                .iter()
                .any(|&r| usize::from(r) == role && r != ROLE_FAULTY)
        })
        .collect()
}

/// Whether left-out member `l` failed with the array, after every write it took: the
/// newest role table records it faulty, it holds all of its role (not part way
/// through a rebuild, nor a replacement being built) in a role nothing else holds,
/// and the failures its own superblock had seen, with its own, leave the level past
/// its redundancy — so its failure came when (or after) the array failed, and the
/// engine took no write after that.
fn failed_with_the_array(a: &Assembled, l: &crate::LeftOut) -> Option<usize> {
    let whole =
        l.superblock.feature_map & (MD_FEATURE_RECOVERY_OFFSET | MD_FEATURE_REPLACEMENT) == 0;
    let role = usize::from(l.role?);
    if !(recorded_faulty(l) && whole && a.roles.get(role).is_some_and(Option::is_none)) {
        return None;
    }
    let mut states = vec![xraid_engine::MemberState::Active; a.roles.len()];
    for failed in failed_in_own_table(a, &l.superblock) {
        states[failed] = xraid_engine::MemberState::Failed;
    }
    // A device its table gives a role to that is still being rebuilt there (a spare
    // that stepped in, a member added back) held only part of the role then too.
    for (held, &r) in l.superblock.dev_roles.iter().enumerate() {
        let rebuilding = a.roles.iter().flatten().any(|m| {
            m.superblock.dev_number as usize == held
                && m.superblock.role() == Some(r)
                && m.superblock.feature_map & MD_FEATURE_RECOVERY_OFFSET != 0
        });
        if rebuilding {
            if let Some(state) = states.get_mut(usize::from(r)) {
                *state = xraid_engine::MemberState::Rebuilding;
            }
        }
    }
    states[role] = xraid_engine::MemberState::Failed;
    xraid_engine::Engine::lost_with(a.geometry, states)
        .is_some()
        .then_some(role)
}

/// Indexes into `a.left_out` of the members to take back: every member that failed
/// with the array (see [`failed_with_the_array`]). All of them, not just enough: the
/// engine named unknown the rows a cut-off write tore only on members missing before
/// the loss, so one that failed with it must be back for its rows to read right.
fn plan(a: &Assembled) -> Result<Vec<usize>, ArrayError> {
    let name = a.name();
    let freshest = &a.superblock;
    let mut candidates: Vec<(usize, u64, usize)> = a
        .left_out
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            failed_with_the_array(a, l).map(|role| (role, u64::MAX - l.superblock.events, i))
        })
        .collect();
    // One device per role: the freshest.
    candidates.sort_unstable();
    candidates.dedup_by_key(|(role, _, _)| *role);
    let chosen: Vec<usize> = candidates.iter().map(|&(_, _, i)| i).collect();
    // A role the newest table still gives to a device that is not here: that device
    // served after everything recorded, the members that failed with the array included.
    for role in a.missing_roles() {
        let held = freshest
            .dev_roles
            .iter()
            .any(|&r| r == role && r != ROLE_FAULTY);
        if held {
            return Err(ArrayError::NotForcible {
                name,
                why: format!("role {role}'s member is not among the members given, and the array's last record has it serving, so it may hold writes the others missed: give it too"),
            });
        }
    }
    if chosen.is_empty() {
        let passed: Vec<String> = a
            .left_out
            .iter()
            .filter(|l| l.reason != LeftOutReason::Spare)
            .map(|l| format!("{} ({})", l.path.display(), why_not(a, l)))
            .collect();
        let why = if passed.is_empty() {
            "no member that left it is here to take back".to_owned()
        } else {
            format!(
                "no member here failed with the array (each missed writes the array took after it failed, or cannot tell); passed over: {}",
                passed.join(", ")
            )
        };
        return Err(ArrayError::NotForcible { name, why });
    }
    // Every role left failed must have failed before the array did — recorded so on
    // each member taken back — or the rows a cut-off write tore there were never
    // named, and would be rebuilt from parity that may hold the write.
    let taken: Vec<usize> = candidates.iter().map(|&(role, _, _)| role).collect();
    for role in a.missing_roles() {
        let role = usize::from(role);
        if taken.contains(&role) {
            continue;
        }
        let before = chosen
            .iter()
            .all(|&i| failed_in_own_table(a, &a.left_out[i].superblock).contains(&role));
        if !before {
            return Err(ArrayError::NotForcible {
                name,
                why: format!("role {role} failed with the array (after the last record on {}), and its device is not here to take back: the rows of the writes the failure cut off there cannot be told; give it too", a.left_out[chosen[0]].path.display()),
            });
        }
    }
    let mut states = a.member_states();
    for &role in &taken {
        states[role] = xraid_engine::MemberState::Active;
    }
    if let Some(lost) = xraid_engine::Engine::lost_with(a.geometry, states) {
        return Err(ArrayError::NotForcible {
            name,
            why: format!(
                "with every member that failed with it taken back, it still cannot start ({lost})"
            ),
        });
    }
    Ok(chosen)
}

/// Whether the newest role table records left-out member `l` faulty.
fn recorded_faulty(l: &crate::LeftOut) -> bool {
    matches!(
        l.reason,
        LeftOutReason::Stale { faulty: true, .. } | LeftOutReason::Faulty
    )
}

/// Why left-out member `l` is not taken back.
fn why_not(a: &Assembled, l: &crate::LeftOut) -> String {
    if l.superblock.feature_map & MD_FEATURE_RECOVERY_OFFSET != 0 {
        return "it was part way through a rebuild".to_owned();
    }
    if l.superblock.feature_map & MD_FEATURE_REPLACEMENT != 0 {
        return "a replacement being built".to_owned();
    }
    if recorded_faulty(l) && l.role.is_some_and(|r| usize::from(r) < a.roles.len()) {
        return "its own superblock does not show the array failing with it: it may have failed while the array could still go on, and missed writes (or its record of an earlier failure was cut off; nothing tells)".to_owned();
    }
    l.reason.to_string()
}

/// Writes the superblocks of a forced start: the members taken back (`chosen`) first,
/// each with the array's bitmap, then the role table on the others. A crash between
/// leaves the members taken back newest, naming themselves active, and the others one
/// event behind in their own roles, which assembly accepts (md's margin of one).
fn record(a: &Assembled, chosen: &[usize]) -> Result<(), ArrayError> {
    let freshest = &a.superblock;
    let mut roles = freshest.dev_roles.clone();
    for &i in chosen {
        let l = &a.left_out[i];
        if let (Some(slot), Some(role)) = (roles.get_mut(l.superblock.dev_number as usize), l.role)
        {
            *slot = role;
        }
    }
    let events = freshest.events + 1;
    let utime = crate::members::utime_after(freshest);
    let stamp = |sb: &mut Superblock| {
        sb.events = events;
        sb.utime = utime;
        sb.dev_roles = roles.clone();
        sb.resync_offset = 0;
    };
    let holder = a
        .roles
        .iter()
        .flatten()
        .find(|m| m.superblock.events == freshest.events);
    let image = match holder {
        Some(h) => crate::bitmap::read_image(&h.member, &h.superblock, &h.path)?,
        None => None,
    };
    for &i in chosen {
        let l = &a.left_out[i];
        let member = FileMember::open(&l.path, &member_options(true))?;
        let mut sb = l.superblock.clone();
        stamp(&mut sb);
        if let Some(image) = &image {
            crate::bitmap::write_copy(&member, &sb, image, &l.path)?;
        }
        write_durably(&member, &sb, &l.path)?;
    }
    for m in a.roles.iter().flatten() {
        let mut sb = m.superblock.clone();
        crate::bitmap::follow_events(&m.member, &sb, events, &m.path)?;
        stamp(&mut sb);
        write_durably(&m.member, &sb, &m.path)?;
    }
    Ok(())
}

fn write_durably(member: &dyn Member, sb: &Superblock, path: &Path) -> Result<(), ArrayError> {
    write_superblock(member, sb, path)?;
    member.flush().map_err(|source| io_error(path, source))
}
