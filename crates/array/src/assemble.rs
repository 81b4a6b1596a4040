//! Assembly as md does it: group members by array UUID, trust the freshest event
//! counter, leave stale and faulty members out, and check that what remains is enough.

use std::path::PathBuf;

use xraid_format::{
    Superblock, MD_FEATURE_RECOVERY_OFFSET, MD_FEATURE_REPLACEMENT, ROLE_FAULTY, ROLE_JOURNAL,
    ROLE_SPARE,
};
use xraid_layout::{Geometry, Layout, Level, MemberIdx, SECTOR_BYTES};
use xraid_member::{DirectMode, FileMember, Member, OpenOptions};

use crate::scan::{expand, read_superblock};
use crate::ArrayError;

/// A member that takes part in the array.
#[derive(Debug)]
pub struct FoundMember {
    pub path: PathBuf,
    pub member: FileMember,
    pub superblock: Superblock,
}

/// Why a member with this array's UUID was left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftOutReason {
    /// Its event counter is behind the freshest member's: it missed writes. `faulty`:
    /// the freshest role table also records it faulty (failed with `xraid fail`, by
    /// the server, or written without while it was away: md records all of these so).
    Stale {
        events: u64,
        freshest: u64,
        faulty: bool,
    },
    /// The freshest superblock records it as faulty.
    Faulty,
    /// A hot spare: holds no data yet.
    Spare,
    /// A journal device (md's RAID-5 journal), which xraid does not use.
    Journal,
    /// A replacement being built for its role's member (md's want_replacement, the
    /// REPLACEMENT feature): it takes the role when the copy ends.
    Replacement,
}

impl std::fmt::Display for LeftOutReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeftOutReason::Stale {
                events,
                freshest,
                faulty,
            } => {
                write!(f, "stale (events {events}, array at {freshest})")?;
                if *faulty {
                    f.write_str(", marked faulty")?;
                }
                Ok(())
            }
            LeftOutReason::Faulty => f.write_str("faulty"),
            LeftOutReason::Spare => f.write_str("spare"),
            LeftOutReason::Journal => f.write_str("journal"),
            LeftOutReason::Replacement => f.write_str("replacement"),
        }
    }
}

/// A member with the array's UUID that is not used for data.
#[derive(Debug, Clone)]
pub struct LeftOut {
    pub path: PathBuf,
    pub role: Option<u16>,
    pub reason: LeftOutReason,
    pub superblock: Superblock,
}

/// The result of assembly: the geometry and, per role, the member serving it.
#[derive(Debug)]
pub struct Assembled {
    pub geometry: Geometry,
    /// The freshest superblock: the array's identity and state.
    pub superblock: Superblock,
    /// One entry per role; `None` where the member is missing.
    pub roles: Vec<Option<FoundMember>>,
    pub left_out: Vec<LeftOut>,
    /// Files in a named folder that hold no md superblock (ignored).
    pub ignored: Vec<PathBuf>,
    /// Files whose md superblock is there but damaged (a bad checksum, impossible
    /// fields), with what is wrong: left out, as mdadm leaves out a device whose
    /// superblock it cannot trust, so that the array still starts from the others.
    pub damaged: Vec<(PathBuf, xraid_format::FormatError)>,
}

impl Assembled {
    /// Refuses `fault` where its ranges start past the end of the member it names
    /// (whose size is known only now that the member is open), or where the role has
    /// no member (missing): it would inject nothing. A power cut
    /// on a signal alone is the machine's, not the member's: every role may name it.
    pub fn check_fault_fits(&self, fault: &xraid_member::MemberFault) -> Result<(), String> {
        let machine_only = {
            let mut rest = fault.plan.clone();
            rest.on_machine_power = false;
            fault.plan.on_machine_power && rest.injects_nothing()
        };
        match self.roles.get(usize::from(fault.role)) {
            Some(Some(found)) => {
                fault.check_fits(&found.path.display().to_string(), found.member.size_bytes())
            }
            Some(None) if machine_only => Ok(()),
            Some(None) => Err(format!(
                "--fault names role {}, which has no member here (it is missing): it would inject nothing (faults go to a role's member as the array opens, not to a spare that takes the role later)",
                fault.role
            )),
            None => Ok(()),
        }
    }

    pub fn name(&self) -> String {
        self.superblock.name()
    }

    /// The same assembly with every present member opened again, to read only and
    /// without a lock (this one holds it): for a look at the array that writes
    /// nothing (see `Array::open_with`).
    pub(crate) fn reopened_to_read(&self) -> Result<Assembled, ArrayError> {
        let look = OpenOptions {
            write: false,
            direct: DirectMode::Off,
            lock: false,
        };
        let roles = self
            .roles
            .iter()
            .map(|role| {
                role.as_ref()
                    .map(|m| -> Result<FoundMember, ArrayError> {
                        Ok(FoundMember {
                            path: m.path.clone(),
                            member: FileMember::open(&m.path, &look)?,
                            superblock: m.superblock.clone(),
                        })
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Assembled {
            geometry: self.geometry,
            superblock: self.superblock.clone(),
            roles,
            left_out: self.left_out.clone(),
            ignored: self.ignored.clone(),
            damaged: Vec::new(),
        })
    }

    /// The array's logical block size, as md's block device of it would have it: the
    /// largest of its present members' and hot spares' (md stacks every device it
    /// assembles); 512 for files.
    pub fn logical_block_bytes(&self) -> u32 {
        let look = OpenOptions {
            write: false,
            direct: DirectMode::Off,
            lock: false,
        };
        let spares = self
            .left_out
            .iter()
            .filter(|l| l.reason == LeftOutReason::Spare)
            .filter_map(|l| FileMember::open(&l.path, &look).ok())
            .map(|m| m.logical_block_bytes());
        self.roles
            .iter()
            .flatten()
            .map(|m| m.member.logical_block_bytes())
            .chain(spares)
            .max()
            .unwrap_or(512)
    }

    /// Where a server that serves this array listens for control requests: a Unix
    /// socket beside its first member, named by the array's UUID (so that two arrays
    /// in one folder do not meet).
    pub fn control_socket(&self) -> Option<PathBuf> {
        let first = self.roles.iter().flatten().next()?;
        Some(control_socket_in(
            first.path.parent()?,
            &self.superblock.set_uuid,
        ))
    }

    /// Each role's state as the engine would start it: missing roles failed, members
    /// recorded as being recovered (md's RECOVERY_OFFSET) rebuilding.
    pub fn member_states(&self) -> Vec<xraid_engine::MemberState> {
        self.roles
            .iter()
            .map(|r| match r {
                None => xraid_engine::MemberState::Failed,
                Some(m)
                    if m.superblock.feature_map & xraid_format::MD_FEATURE_RECOVERY_OFFSET != 0 =>
                {
                    xraid_engine::MemberState::Rebuilding
                }
                Some(_) => xraid_engine::MemberState::Active,
            })
            .collect()
    }

    /// The devices left out that the array does not open at all: not a replacement
    /// being built, which is opened beside its member.
    pub fn unused(&self) -> impl Iterator<Item = &LeftOut> {
        self.left_out
            .iter()
            .filter(|l| l.reason != LeftOutReason::Replacement)
    }

    /// Whether `path` names one of the array's hot spares (any spelling of it).
    pub(crate) fn has_spare(&self, path: &std::path::Path) -> bool {
        let wanted = crate::members::canonical(path);
        self.left_out.iter().any(|l| {
            l.reason == LeftOutReason::Spare && crate::members::canonical(&l.path) == wanted
        })
    }

    pub fn missing_roles(&self) -> Vec<u16> {
        (0..self.roles.len())
            .filter(|&r| self.roles[r].is_none())
            .map(|r| u16::try_from(r).expect("roles fit u16"))
            .collect()
    }

    pub fn is_degraded(&self) -> bool {
        self.roles.iter().any(Option::is_none)
    }
}

/// The control socket a server of the array `set_uuid` keeps in `dir` (see
/// [`Assembled::control_socket`]).
pub fn control_socket_in(dir: &std::path::Path, set_uuid: &[u8; 16]) -> PathBuf {
    let uuid = Superblock::uuid_string(set_uuid);
    let short: String = uuid.chars().filter(|c| *c != ':').take(8).collect();
    dir.join(format!(".xraid-{short}.ctl"))
}

/// The files assembly would look at for `paths` (folders expanded, a file under two
/// names once), without opening them.
pub fn member_candidates(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ArrayError> {
    Ok(expand(paths)?.into_iter().map(|m| m.path).collect())
}

/// Finds the members among `paths` (files, block devices or folders), opens them with
/// `options` and assembles the array they form.
pub fn assemble(paths: &[PathBuf], options: &OpenOptions) -> Result<Assembled, ArrayError> {
    let assembled = assemble_anyway(paths, options)?;
    check_enough(&assembled)?;
    Ok(assembled)
}

/// As [`assemble`], but an array that misses more members than its level survives is
/// returned too (for `xraid status` to show what is there), with why it cannot start.
pub fn assemble_anyway(paths: &[PathBuf], options: &OpenOptions) -> Result<Assembled, ArrayError> {
    let candidates = expand(paths)?;
    let mut found: Vec<FoundMember> = Vec::new();
    let mut ignored = Vec::new();
    let mut damaged = Vec::new();
    // Devices in a folder that another program holds (mounted, md, LVM): claimed to
    // write, they are refused with O_EXCL. Read without a claim, they are passed over
    // unless they turn out to be this array's (found below): an unrelated busy disk
    // beside the members must not stop the array, a member held elsewhere must.
    let mut busy: Vec<(PathBuf, Option<[u8; 16]>, xraid_member::MemberError)> = Vec::new();
    for candidate in candidates {
        let member = match FileMember::open(&candidate.path, options) {
            Ok(member) => member,
            Err(e @ xraid_member::MemberError::Busy { .. }) if !candidate.explicit => {
                let unclaimed = OpenOptions {
                    write: false,
                    direct: DirectMode::Off,
                    lock: false,
                };
                let uuid = FileMember::open(&candidate.path, &unclaimed)
                    .ok()
                    .and_then(|m| read_superblock(&m, &candidate.path).ok().flatten())
                    .map(|sb| sb.set_uuid);
                busy.push((candidate.path, uuid, e));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match read_superblock(&member, &candidate.path) {
            Ok(Some(superblock)) => found.push(FoundMember {
                path: candidate.path,
                member,
                superblock,
            }),
            Ok(None) if candidate.explicit => {
                return Err(match crate::scan::other_md_metadata(&member) {
                    Some(version) => ArrayError::UnsupportedMetadata {
                        path: candidate.path,
                        version,
                    },
                    None => ArrayError::NotMember {
                        path: candidate.path,
                    },
                })
            }
            Ok(None) => ignored.push(candidate.path),
            Err(ArrayError::Superblock { path, source }) => damaged.push((path, source)),
            Err(e) => return Err(e),
        }
    }
    let Some(first) = found.first() else {
        // Nothing but damaged superblocks: say what is wrong with the first.
        if !damaged.is_empty() {
            let (path, source) = damaged.swap_remove(0);
            return Err(ArrayError::Superblock { path, source });
        }
        let path = paths.first().cloned().unwrap_or_default();
        return Err(ArrayError::EmptyFolder { path });
    };
    if let Some(at) = busy
        .iter()
        .position(|(_, uuid, _)| *uuid == Some(first.superblock.set_uuid))
    {
        return Err(busy.swap_remove(at).2.into());
    }
    ignored.extend(busy.into_iter().map(|(path, _, _)| path));
    if let Some(other) = found
        .iter()
        .find(|m| m.superblock.set_uuid != first.superblock.set_uuid)
    {
        return Err(ArrayError::MixedArrays {
            first: first.path.clone(),
            first_array: array_label(&first.superblock),
            second: other.path.clone(),
            second_array: array_label(&other.superblock),
        });
    }
    for m in &found[1..] {
        check_same_shape(first, m)?;
    }
    let freshest = found
        .iter()
        .max_by_key(|m| m.superblock.events)
        .expect("at least one member")
        .superblock
        .clone();
    // Every member's features are md's to check, named by its own path: checking
    // the freshest alone named another member, and let a member the order of
    // naming put second pass with features xraid cannot honour.
    for m in &found {
        geometry_of(&m.superblock, &m.path)?;
    }
    let geometry = geometry_of(&freshest, &found[0].path)?;
    let raid_disks = usize::from(geometry.raid_disks());
    let mut roles: Vec<Option<FoundMember>> = (0..raid_disks).map(|_| None).collect();
    let mut left_out = Vec::new();
    // Replacements being built (md's REPLACEMENT feature), placed once every role's
    // member is known.
    let mut replacements: Vec<(u16, FoundMember)> = Vec::new();
    for m in found {
        let role = m.superblock.role();
        let recorded = freshest
            .dev_roles
            .get(m.superblock.dev_number as usize)
            .copied();
        // A spare holds no data: its event count does not matter (md's own spares are
        // not rewritten by every event either).
        let spare = role == Some(ROLE_SPARE) && recorded != Some(ROLE_FAULTY);
        // md's margin of one event: a member one behind missed only the last
        // superblock update, which a crash cut off part way (its write reached some
        // members and not others; the kernel's super_1_validate and mdadm's
        // event_margin both allow it). It counts if the freshest role table still
        // gives it its own role: a member that update failed, or that was away for
        // it, is recorded faulty there.
        let cut_off_update = m.superblock.events + 1 == freshest.events
            && role.is_some_and(|r| usize::from(r) < raid_disks)
            && recorded == role;
        let reason = if spare {
            Some(LeftOutReason::Spare)
        } else if m.superblock.events < freshest.events && !cut_off_update {
            Some(LeftOutReason::Stale {
                events: m.superblock.events,
                freshest: freshest.events,
                faulty: recorded == Some(ROLE_FAULTY),
            })
        } else if recorded == Some(ROLE_FAULTY) || role == Some(ROLE_FAULTY) {
            Some(LeftOutReason::Faulty)
        } else if role == Some(ROLE_SPARE) {
            Some(LeftOutReason::Spare)
        } else if role == Some(ROLE_JOURNAL) {
            Some(LeftOutReason::Journal)
        } else {
            None
        };
        if let Some(reason) = reason {
            left_out.push(LeftOut {
                path: m.path,
                role,
                reason,
                superblock: m.superblock,
            });
            continue;
        }
        let Some(role) = role.filter(|&r| usize::from(r) < raid_disks) else {
            left_out.push(LeftOut {
                path: m.path,
                role,
                reason: LeftOutReason::Faulty,
                superblock: m.superblock,
            });
            continue;
        };
        check_length(&m, &geometry)?;
        check_raid0_zone(&m, &geometry)?;
        if m.superblock.feature_map & MD_FEATURE_REPLACEMENT != 0 {
            replacements.push((role, m));
            continue;
        }
        let slot = &mut roles[usize::from(role)];
        if let Some(other) = slot {
            return Err(ArrayError::RoleConflict {
                path: m.path,
                other: other.path.clone(),
                role,
            });
        }
        *slot = Some(m);
    }
    for (role, m) in replacements {
        let slot = &mut roles[usize::from(role)];
        if slot.is_none() {
            // The member it was replacing is gone: the replacement holds the role,
            // rebuilt from its recovery offset on (md does the same).
            *slot = Some(m);
        } else if left_out
            .iter()
            .any(|l: &LeftOut| l.reason == LeftOutReason::Replacement && l.role == Some(role))
        {
            return Err(ArrayError::RoleConflict {
                path: m.path,
                other: left_out
                    .iter()
                    .find(|l| l.reason == LeftOutReason::Replacement && l.role == Some(role))
                    .map(|l| l.path.clone())
                    .unwrap_or_default(),
                role,
            });
        } else {
            left_out.push(LeftOut {
                path: m.path,
                role: Some(role),
                reason: LeftOutReason::Replacement,
                superblock: m.superblock,
            });
        }
    }
    let assembled = Assembled {
        geometry,
        superblock: freshest,
        roles,
        left_out,
        ignored,
        damaged,
    };
    Ok(assembled)
}

/// What every member of one array must agree on, as mdadm's compare_super for 1.x
/// superblocks has it: a member that says otherwise (a superblock rewritten by hand,
/// or by a tool that got it wrong) would have the array read and written with
/// whichever shape came first, and parity written for the wrong one.
fn check_same_shape(first: &FoundMember, other: &FoundMember) -> Result<(), ArrayError> {
    let (a, b) = (&first.superblock, &other.superblock);
    let fields: [(&'static str, String, String); 6] = [
        ("creation time", a.ctime.to_string(), b.ctime.to_string()),
        ("level", a.level.to_string(), b.level.to_string()),
        ("layout", a.layout.to_string(), b.layout.to_string()),
        (
            "used size per member",
            format!("{} sectors", a.size),
            format!("{} sectors", b.size),
        ),
        (
            "chunk size",
            format!("{}K", a.chunksize / 2),
            format!("{}K", b.chunksize / 2),
        ),
        (
            "member count",
            a.raid_disks.to_string(),
            b.raid_disks.to_string(),
        ),
    ];
    match fields.into_iter().find(|(_, x, y)| x != y) {
        None => Ok(()),
        Some((field, this, that)) => Err(ArrayError::ShapeMismatch {
            path: first.path.clone(),
            other: other.path.clone(),
            field,
            this,
            that,
        }),
    }
}

/// Why the array cannot start, if it cannot: more members missing (or only part
/// rebuilt) than its level survives.
pub fn cannot_start(a: &Assembled) -> Option<ArrayError> {
    check_enough(a).err()
}

/// An array as messages name it: `'name' (uuid)`.
fn array_label(sb: &Superblock) -> String {
    format!(
        "'{}' ({})",
        sb.name(),
        Superblock::uuid_string(&sb.set_uuid)
    )
}

/// The array's geometry from its superblock.
fn geometry_of(sb: &Superblock, path: &std::path::Path) -> Result<Geometry, ArrayError> {
    let unsupported = |what: String| ArrayError::Unsupported {
        path: path.to_path_buf(),
        what,
    };
    // A member being recovered (md's per-device recovery offset, and whether the
    // recovery follows the bitmap) is served: it is rebuilt from its checkpoint when
    // the array is opened to write.
    // A member's bad block log is read at open: what it lists is never returned.
    let supported = xraid_format::SUPPORTED_FEATURES
        | xraid_format::MD_FEATURE_BAD_BLOCKS
        | xraid_format::MD_FEATURE_RECOVERY_OFFSET
        | xraid_format::MD_FEATURE_RECOVERY_BITMAP
        | MD_FEATURE_REPLACEMENT;
    if sb.feature_map & !supported != 0 {
        return Err(unsupported(format!("feature map {:#x}", sb.feature_map)));
    }
    let level = Level::from_md(sb.level)?;
    let layout = match level {
        Level::Raid0 | Level::Raid1 => Layout::None,
        _ => Layout::from_md(level, sb.layout)?,
    };
    let raid_disks = u16::try_from(sb.raid_disks)
        .map_err(|_| unsupported(format!("{} raid disks", sb.raid_disks)))?;
    let chunk = if level == Level::Raid1 {
        0
    } else {
        sb.chunksize
    };
    let member_sectors = if sb.size > 0 && level != Level::Raid0 {
        sb.size
    } else {
        sb.data_size
    };
    Ok(Geometry::new(
        level,
        layout,
        raid_disks,
        chunk,
        member_sectors,
    )?)
}

/// Refuses a member file shorter than the array says it is.
fn check_length(m: &FoundMember, geometry: &Geometry) -> Result<(), ArrayError> {
    let need = (m.superblock.data_offset + geometry.member_sectors()) * SECTOR_BYTES;
    let size = m.member.size_bytes();
    if size < need {
        return Err(ArrayError::Truncated {
            path: m.path.clone(),
            size,
            need,
        });
    }
    Ok(())
}

/// Refuses a RAID-0 member whose data area differs in size from the others': md
/// would have laid such an array out in several zones, which xraid does not map.
fn check_raid0_zone(m: &FoundMember, geometry: &Geometry) -> Result<(), ArrayError> {
    if geometry.level() != Level::Raid0 {
        return Ok(());
    }
    let chunk = u64::from(geometry.chunk_sectors());
    if m.superblock.data_size / chunk * chunk != geometry.member_sectors() {
        return Err(ArrayError::Unsupported {
            path: m.path.clone(),
            what: "a raid0 of members with unequal sizes (md's multi-zone layout)".to_owned(),
        });
    }
    Ok(())
}

/// Refuses to start an array that misses more members than its level survives.
fn check_enough(a: &Assembled) -> Result<(), ArrayError> {
    if xraid_engine::Engine::lost_with(a.geometry, a.member_states()).is_none() {
        return Ok(());
    }
    let present = a.roles.iter().filter(|r| r.is_some()).count();
    let missing = a
        .missing_roles()
        .iter()
        .map(|r| format!("role {r}"))
        .collect::<Vec<_>>()
        .join(", ");
    // Present but part way through a rebuild: they count only where rebuilt.
    let partial: Vec<String> = a
        .roles
        .iter()
        .enumerate()
        .filter_map(|(role, m)| {
            let sb = &m.as_ref()?.superblock;
            let percent = sb.recovery_offset * 100 / a.geometry.member_sectors().max(1);
            (sb.feature_map & MD_FEATURE_RECOVERY_OFFSET != 0)
                .then(|| format!("role {role} only {percent}% rebuilt"))
        })
        .collect();
    let mut why = format!("missing {missing}");
    if !partial.is_empty() {
        why = format!("{why}; {}", partial.join(", "));
    }
    let hint = match crate::force::forcible(a) {
        Ok(paths) if !paths.is_empty() => {
            let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            let (hold, it) = if names.len() == 1 {
                ("holds", "it")
            } else {
                ("hold", "them")
            };
            format!(
                "; {} failed with the array and {hold} every write it took: `xraid serve --force` takes {it} back",
                names.join(" and ")
            )
        }
        _ => String::new(),
    };
    Err(ArrayError::TooManyMissing {
        name: a.name(),
        present,
        raid_disks: a.geometry.raid_disks(),
        level: a.geometry.level(),
        missing: why,
        hint,
    })
}

/// Options for opening members of an array to read or to write.
pub(crate) fn member_options(write: bool) -> OpenOptions {
    OpenOptions {
        write,
        direct: DirectMode::Auto,
        lock: true,
    }
}

/// Role of a member as a [`MemberIdx`].
pub(crate) fn role_idx(role: usize) -> MemberIdx {
    MemberIdx(u16::try_from(role).expect("roles fit u16"))
}
