//! Starting an array that failed, as `mdadm --assemble --force` does, without its
//! guesswork: the members whose failure stopped the array are taken back into their
//! roles when nothing can have been written without them since.
//!
//! When a member fails past the level's redundancy, the engine refuses every request
//! from then on, and the superblocks of the members left record it faulty with one
//! more event. Such a member is one event behind the array, recorded faulty, and
//! holds every write acknowledged before it failed: only the writes its failure cut
//! off are torn. A member further behind missed the writes of the sessions after it
//! left; one whose role the newest role table still gives to an absent device was
//! lost while that device served on. Neither is taken back.
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
    /// Its event count when it failed (the array's was one more).
    pub events: u64,
}

/// Takes back into their roles the members of the array named by `array` (member
/// paths or a folder) whose failure left it unable to start, as few as it needs,
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

/// Whether left-out member `l` failed last, after every write the array took: one
/// event behind, recorded faulty, holding all of its role (not part way through a
/// rebuild, nor a replacement being built), in a role nothing else holds.
fn failed_last(a: &Assembled, l: &crate::LeftOut) -> Option<usize> {
    let one_behind = matches!(l.reason,
        LeftOutReason::Stale { events, freshest, faulty: true } if events + 1 == freshest);
    let whole =
        l.superblock.feature_map & (MD_FEATURE_RECOVERY_OFFSET | MD_FEATURE_REPLACEMENT) == 0;
    let role = usize::from(l.role?);
    (one_behind && whole && a.roles.get(role).is_some_and(Option::is_none)).then_some(role)
}

/// Indexes into `a.left_out` of the members to take back, in role order, fewest
/// first: just enough for the array to start.
fn plan(a: &Assembled) -> Result<Vec<usize>, ArrayError> {
    let name = a.name();
    let freshest = &a.superblock;
    let mut candidates: Vec<(usize, usize)> = a
        .left_out
        .iter()
        .enumerate()
        .filter_map(|(i, l)| failed_last(a, l).map(|role| (role, i)))
        .collect();
    candidates.sort_unstable();
    candidates.dedup_by_key(|(role, _)| *role);
    // A role the newest table still gives to a device that is not here: that device
    // served after everything recorded, the members failed last included.
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
    let mut states = a.member_states();
    let mut chosen = Vec::new();
    for (role, i) in candidates {
        if xraid_engine::Engine::lost_with(a.geometry, states.clone()).is_none() {
            break;
        }
        states[role] = xraid_engine::MemberState::Active;
        chosen.push(i);
    }
    if chosen.is_empty() || xraid_engine::Engine::lost_with(a.geometry, states).is_some() {
        let passed: Vec<String> = a
            .left_out
            .iter()
            .filter(|l| !chosen.iter().any(|&i| a.left_out[i].path == l.path))
            .filter(|l| l.reason != LeftOutReason::Spare)
            .map(|l| format!("{} ({})", l.path.display(), why_not(l)))
            .collect();
        let why = if passed.is_empty() {
            "no member that left it is here to take back".to_owned()
        } else {
            format!(
                "no member that failed last is enough to start it; passed over: {}",
                passed.join(", ")
            )
        };
        return Err(ArrayError::NotForcible { name, why });
    }
    Ok(chosen)
}

/// Why left-out member `l` is not taken back.
fn why_not(l: &crate::LeftOut) -> String {
    match l.reason {
        LeftOutReason::Stale {
            events, freshest, ..
        } if events + 1 < freshest => format!(
            "{} events behind: the array went on without it",
            freshest - events
        ),
        _ if l.superblock.feature_map & MD_FEATURE_RECOVERY_OFFSET != 0 => {
            "it was part way through a rebuild".to_owned()
        }
        _ if l.superblock.feature_map & MD_FEATURE_REPLACEMENT != 0 => {
            "a replacement being built".to_owned()
        }
        reason => reason.to_string(),
    }
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
