//! `create`: checks everything first, then makes member files, initialises parity where
//! members held old data, and writes md superblocks — so bad input changes nothing.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use xraid_driver::{ArrayDriver, BackendChoice, MemberSlot};
use xraid_engine::{Event, SyncKind};
use xraid_format::{BitmapChoice, NewArray, Superblock};
use xraid_layout::{Geometry, Layout, Level, MemberIdx, SECTOR_BYTES};
use xraid_member::{FileMember, Member};

use crate::assemble::member_options;
use crate::scan::{io_error, read_superblock, refuse_duplicates, MemberPath};
use crate::ArrayError;

/// Where member data starts: 1 MiB, as mdadm chooses for small members; leaves room
/// for the superblock at 4 KiB, a bad-block log and a write-intent bitmap.
pub const DATA_OFFSET_SECTORS: u64 = 2048;

/// Where the data starts on each member of a new array: mdadm's 1 MiB, or for parity
/// levels whose stripe-log ring would not fit there (large chunks), the next MiB
/// boundary that leaves room for the ring (two 4 KiB marker slots and twice the
/// largest log entry) after the metadata (at most 288 sectors: superblock, bitmap
/// room, bad-block log).
fn data_offset_for(level: Level, raid_disks: u16, chunk_sectors: u32) -> u64 {
    if !level.has_parity() {
        return DATA_OFFSET_SECTORS;
    }
    let parity = level.parity_count();
    let ring = xraid_engine::log_ring_sectors_needed(
        raid_disks - u16::from(parity),
        chunk_sectors,
        parity,
    );
    // Metadata, then the ring from the next 4 KiB boundary.
    let need = 288 + 8 + ring;
    need.next_multiple_of(DATA_OFFSET_SECTORS)
        .max(DATA_OFFSET_SECTORS)
}

/// Bytes of array data rewritten per request when initialising parity.
const SYNC_REQUEST_BYTES: u64 = 1 << 20;

/// What `xraid create` was asked for.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub level: Level,
    pub layout: Option<Layout>,
    pub chunk_bytes: u64,
    pub name: String,
    /// Size of member files to create where they do not exist; existing members
    /// smaller than it are refused.
    pub size_bytes: Option<u64>,
    pub members: Vec<PathBuf>,
    /// Overwrite members that already belong to an md array.
    pub force: bool,
    pub backend: BackendChoice,
    /// Keep md's internal write-intent bitmap (levels with redundancy only).
    pub bitmap: bool,
    /// Bytes of data per bitmap bit; `None` for mdadm's choice (64 MiB, or more when
    /// the bits would not fit the room after the superblock).
    pub bitmap_chunk_bytes: Option<u32>,
    /// Seconds a bitmap chunk stays quiet before its bit is cleared (md's
    /// `daemon_sleep`, mdadm's `--delay`); `None` for mdadm's 5.
    pub bitmap_delay_secs: Option<u32>,
    /// Integrity mode: a checksum per 4 KiB block of every member, kept after md's
    /// data area, checked on every read (see `integrity`).
    pub integrity: bool,
    /// mdadm's `--assume-clean`: no initial sync, the members' redundancy is taken to
    /// agree already (new disks that read as zeros; an array made again over its own
    /// members, with its old shape, to get past lost superblocks).
    pub assume_clean: bool,
    /// Run the initial sync here, before `create` returns. Without it, an array made
    /// over old contents owes a resync (md's `resync_offset` 0, every bitmap bit set)
    /// that runs in the background when it is next opened to write, as md starts
    /// one at once; a parity array made degraded, and an integrity-mode one with no
    /// redundancy (a RAID-0), sync here either way (see [`create`]).
    pub sync_now: bool,
    /// Hot spares, added once the array is made; checked with the members, before
    /// anything is written, so that a spare that cannot be one refuses the whole create.
    pub spares: Vec<PathBuf>,
}

impl CreateOptions {
    /// `xraid create`'s defaults for an array of `level` named `name` over `members`:
    /// md's default layout, 512 KiB chunks, members as large as they are (none
    /// created), an internal bitmap where the level has redundancy, no integrity
    /// mode, the initial sync (where one is owed) left to the background, no spares.
    pub fn new(level: Level, name: &str, members: Vec<PathBuf>) -> CreateOptions {
        CreateOptions {
            level,
            layout: None,
            chunk_bytes: 512 << 10,
            name: name.to_owned(),
            size_bytes: None,
            members,
            force: false,
            backend: BackendChoice::default(),
            bitmap: level != Level::Raid0,
            bitmap_chunk_bytes: None,
            bitmap_delay_secs: None,
            integrity: false,
            assume_clean: false,
            sync_now: false,
            spares: Vec::new(),
        }
    }
}

/// The member name that leaves its role empty (mdadm's keyword): the array is made
/// degraded, and `add` fills the role later.
pub const MISSING: &str = "missing";

/// Whether `path` is the word [`MISSING`] rather than a member (in any case, as
/// mdadm takes it; `./missing` names a file).
pub fn is_missing(path: &Path) -> bool {
    path.to_str()
        .is_some_and(|p| p.eq_ignore_ascii_case(MISSING))
}

/// What was created.
#[derive(Debug, Clone)]
pub struct Created {
    pub geometry: Geometry,
    pub uuid: String,
    pub name: String,
    /// The members made, in role order; roles given as [`MISSING`] are not among them.
    pub members: Vec<PathBuf>,
    /// Whether old member contents were read to initialise parity (or mirrors).
    pub synced: bool,
    /// Whether that is left to a resync in the background, when the array is next
    /// opened to write.
    pub resync_owed: bool,
    /// The roles left empty ([`MISSING`]): the array starts degraded.
    pub missing: Vec<usize>,
    /// The hot spares added.
    pub spares: Vec<PathBuf>,
    /// The largest member, when it exceeds the smallest by more than 1% (mdadm's
    /// threshold for its warning): what the array leaves unused on it.
    pub uneven: Option<Uneven>,
}

/// Members of rather different sizes: the array uses only as much of each as the
/// smallest holds.
#[derive(Debug, Clone)]
pub struct Uneven {
    pub largest: PathBuf,
    pub largest_bytes: u64,
    pub smallest: PathBuf,
    pub smallest_bytes: u64,
}

/// The members' sizes, if the largest exceeds the smallest by more than 1%.
fn uneven(sizes: &[(PathBuf, u64)]) -> Option<Uneven> {
    let (smallest, smallest_bytes) = sizes.iter().min_by_key(|(_, size)| *size)?;
    let (largest, largest_bytes) = sizes.iter().max_by_key(|(_, size)| *size)?;
    (largest_bytes - smallest_bytes > smallest_bytes / 100).then(|| Uneven {
        largest: largest.clone(),
        largest_bytes: *largest_bytes,
        smallest: smallest.clone(),
        smallest_bytes: *smallest_bytes,
    })
}

/// Creates an array. `progress(done, total)` is told about the initial sync, if any.
pub fn create(
    opts: &CreateOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Created, ArrayError> {
    let level = opts.level;
    let n = opts.members.len();
    if n < usize::from(level.min_members()) || n > usize::from(level.max_members()) {
        return Err(ArrayError::MemberCount {
            level,
            given: n,
            min: level.min_members(),
            max: level.max_members(),
        });
    }
    let raid_disks = u16::try_from(n).expect("checked against max_members");
    // md keeps 32 bytes of name; a longer one would be cut short without a word.
    if opts.name.len() > 32 {
        return Err(ArrayError::NameTooLong {
            name: opts.name.clone(),
        });
    }
    let layout = opts.layout.unwrap_or_else(|| Layout::default_for(level));
    let chunk_sectors = chunk_sectors(level, opts.chunk_bytes)?;
    // Validate level, layout and chunk before touching any file.
    let shape = Geometry::new(level, layout, raid_disks, chunk_sectors, 1 << 32)?;
    let missing: Vec<usize> = (0..n).filter(|&r| is_missing(&opts.members[r])).collect();
    refuse_missing(shape, &missing)?;
    if opts.assume_clean && opts.integrity {
        // Checksums of what the members hold can only come from reading it all.
        if let Some(path) = opts.members.iter().find(|p| !is_missing(p) && p.exists()) {
            return Err(ArrayError::AssumeCleanIntegrity { path: path.clone() });
        }
    }
    if opts.spares.iter().any(|p| is_missing(p)) {
        return Err(ArrayError::MissingSpare);
    }
    let given: Vec<PathBuf> = opts
        .members
        .iter()
        .filter(|p| !is_missing(p))
        .cloned()
        .collect();
    let every: Vec<PathBuf> = given.iter().chain(&opts.spares).cloned().collect();
    let paths: Vec<MemberPath> = every
        .iter()
        .map(|p| MemberPath {
            path: p.clone(),
            explicit: true,
        })
        .collect();
    refuse_duplicates(&paths)?;
    refuse_same_new_path(&every)?;
    let unit = u64::from(chunk_sectors.max(8));
    let data_offset = data_offset_for(level, raid_disks, chunk_sectors);
    let area = if opts.integrity {
        xraid_format::area_sectors(unit)
    } else {
        0
    };
    let need = (data_offset + unit + area) * SECTOR_BYTES;
    let mut existing: Vec<Given> = Vec::with_capacity(n);
    let mut member_bytes = u64::MAX;
    let mut sizes: Vec<(PathBuf, u64)> = Vec::with_capacity(n);
    for path in &opts.members {
        if is_missing(path) {
            existing.push(Given::Missing);
            continue;
        }
        if !path.exists() {
            let size = size_to_make(path, opts.size_bytes, need)?;
            member_bytes = member_bytes.min(size);
            sizes.push((path.clone(), size));
            existing.push(Given::New);
            continue;
        }
        let member = FileMember::open(path, &member_options(true))?;
        let size = member.size_bytes();
        if size < need {
            return Err(ArrayError::TooSmall {
                path: path.clone(),
                size,
                need,
            });
        }
        // As mdadm refuses a device smaller than its --size: the member files made
        // for the others would otherwise be sized for an array this one cuts short,
        // and the array would come out smaller than asked without a word.
        if let Some(asked) = opts.size_bytes.filter(|&asked| size < asked) {
            return Err(ArrayError::SmallerThanSize {
                path: path.clone(),
                size,
                asked,
            });
        }
        if !opts.force {
            refuse_what_it_holds(&member, path)?;
        }
        member_bytes = member_bytes.min(size);
        sizes.push((path.clone(), size));
        existing.push(Given::Existing(member));
    }
    let data_sectors = if opts.integrity {
        crate::integrity::data_sectors(member_bytes, data_offset, unit).unwrap_or(unit)
    } else {
        (member_bytes / SECTOR_BYTES - data_offset) / unit * unit
    };
    let geometry = Geometry::new(level, layout, raid_disks, chunk_sectors, data_sectors)?;
    let spare_need = crate::integrity::newcomer_need_bytes(
        data_offset,
        geometry.member_sectors(),
        opts.integrity,
    );
    for spare in &opts.spares {
        check_spare(opts, spare, spare_need)?;
    }
    let mut new = NewArray {
        set_uuid: [0; 16],
        name: opts.name.clone(),
        level: level.md_level(),
        layout: layout.md_value(),
        chunk_sectors,
        raid_disks: u32::from(raid_disks),
        ctime: 0,
        data_offset_sectors: data_offset,
        bitmap: None,
    };
    let bitmap = bitmap_choice(opts, &new, geometry.member_sectors())?;
    let old_contents = existing.iter().any(|g| matches!(g, Given::Existing(_)));
    // Each member's md data area: all it has after the data offset, or with integrity
    // mode what leaves room for the integrity area after it.
    let data_size = |bytes: u64| {
        if opts.integrity {
            crate::integrity::data_sectors(bytes, data_offset, unit).unwrap_or(data_sectors)
        } else {
            bytes / SECTOR_BYTES - data_offset
        }
    };
    let mut members: Vec<Option<Box<dyn Member>>> = Vec::with_capacity(n);
    // Per member, whether it is a new sparse file (all zeros, as its checksums say).
    let mut blank = Vec::with_capacity(n);
    // Files this create makes: taken away again if a later one cannot be made, so
    // that a failed create leaves nothing behind for a retry to pick up.
    let mut made: Vec<&Path> = Vec::new();
    let opened = (|| -> Result<(), ArrayError> {
        for (path, member) in opts.members.iter().zip(existing) {
            blank.push(matches!(member, Given::New));
            let member = match member {
                Given::Missing => {
                    members.push(None);
                    continue;
                }
                Given::Existing(member) => member,
                Given::New => {
                    let size = opts.size_bytes.expect("checked above");
                    FileMember::create_sparse(path, size)?;
                    made.push(path);
                    FileMember::open(path, &member_options(true))?
                }
            };
            members.push(Some(Box::new(member)));
        }
        // Spare files too, so that one that cannot be made refuses the create here.
        for spare in opts.spares.iter().filter(|p| !p.exists()) {
            let size = opts.size_bytes.expect("checked in check_spare");
            FileMember::create_sparse(spare, size)?;
            made.push(spare);
        }
        Ok(())
    })();
    if let Err(e) = opened {
        for path in made {
            let _ = std::fs::remove_file(path);
        }
        return Err(e);
    }
    let slots = members
        .into_iter()
        .map(|member| {
            let member = member?;
            let table_at = (data_offset + data_size(member.size_bytes())).next_multiple_of(8)
                + xraid_format::HEADER_SECTORS;
            Some(MemberSlot {
                member: member.into(),
                data_offset_bytes: data_offset * SECTOR_BYTES,
                log_offset_bytes: None,
                bitmap_offset_bytes: None,
                checksums_offset_bytes: opts.integrity.then_some(table_at * SECTOR_BYTES),
            })
        })
        .collect();
    let mut driver = ArrayDriver::new(geometry, slots, opts.backend)?;
    if opts.integrity {
        let blocks = xraid_format::blocks_for(geometry.member_sectors());
        driver.engine_mut().enable_integrity(Vec::new(), true);
        for (role, &blank) in blank.iter().enumerate() {
            if missing.contains(&role) {
                continue;
            }
            // A new sparse file holds zeros, which is what its sparse area says; an
            // old file's checksums are learned by the initial sync and all written.
            let table = if blank {
                xraid_engine::ChecksumTable::zeros(blocks)
            } else {
                xraid_engine::ChecksumTable::unknown(blocks)
            };
            driver.engine_mut().set_checksum_table(
                MemberIdx(u16::try_from(role).expect("fits")),
                Some(std::sync::Arc::new(table)),
                !blank,
            );
        }
    }
    // Nothing to make agree where the members left have no redundancy between them
    // (RAID-5 missing one, RAID-6 two), as md does no initial resync then; integrity
    // mode still reads everything to record its checksums.
    let agreement_to_make = driver.engine().can_start_sync(SyncKind::Repair).is_ok();
    let to_sync = old_contents && !opts.assume_clean && (agreement_to_make || opts.integrity);
    // As md, in the background once the array runs, unless asked for now — or unless
    // there is no resync to run it (integrity mode's checksums of a RAID-0, or of a
    // level left without redundancy, are learned here), or parity is short a member
    // (a degraded parity array resyncs only once it is whole again, and until then
    // would keep a RAID-6's P and Q disagreeing). In integrity mode the checksums of
    // what the members hold are unknown until then: nothing is checked there, and
    // reads and the resync learn them (as dm-integrity recalculates in the
    // background).
    let degraded_parity = level.has_parity() && !missing.is_empty();
    let background = !(opts.sync_now || !agreement_to_make || degraded_parity);
    let synced = to_sync && !background;
    let resync_owed = to_sync && background;
    if synced {
        initial_sync(&mut driver, progress, opts.integrity)?;
    }
    let set_uuid = random_uuid();
    let ctime = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    new.set_uuid = set_uuid;
    new.ctime = ctime;
    new.bitmap = bitmap.clone();
    for role in (0..n).filter(|r| !missing.contains(r)) {
        let slot = driver
            .member(MemberIdx(u16::try_from(role).expect("fits")))
            .expect("every member not missing is present at create");
        let avail = data_size(slot.member.size_bytes());
        let mut sb = Superblock::new_member(
            &new,
            u32::try_from(role).expect("fits"),
            random_uuid(),
            avail,
        );
        sb.size = geometry.member_sectors();
        sb.utime = crate::members::now_utime();
        if resync_owed {
            // md's "resync from the start": the resync the next open to write runs.
            sb.resync_offset = 0;
        }
        // No device holds a missing role: its entry is free, as mdadm leaves it, for
        // the member `add` puts there.
        for &role in &missing {
            sb.dev_roles[role] = xraid_format::ROLE_SPARE;
        }
        if opts.integrity {
            crate::integrity::write_header(
                slot.member.as_ref(),
                &sb,
                geometry.member_sectors(),
                &opts.members[role],
            )?;
        }
        write_superblock(slot.member.as_ref(), &sb, &opts.members[role])?;
        if let (Some(choice), Some(start)) = (&bitmap, xraid_format::bitmap_start_sector(&sb)) {
            // The owed resync visits only chunks whose bits are set: all of them.
            let image = if resync_owed {
                xraid_format::new_member_bitmap_all_dirty(&sb, choice)
            } else {
                xraid_format::new_member_bitmap(&sb, choice)
            };
            slot.member
                .write_at(&image, start * SECTOR_BYTES)
                .map_err(|source| io_error(&opts.members[role], source))?;
        }
    }
    driver.flush()?;
    drop(driver);
    // Each spare is added to the array with the spares before it, so that it gets an
    // entry of the role table of its own (two spares in one entry are one device to md).
    let mut named = given.clone();
    for spare in &opts.spares {
        crate::members::add_spare_at_create(&named, spare, opts.size_bytes, opts.force)?;
        named.push(spare.clone());
    }
    Ok(Created {
        geometry,
        uuid: Superblock::uuid_string(&set_uuid),
        name: opts.name.clone(),
        members: given,
        synced,
        resync_owed,
        missing,
        spares: opts.spares.clone(),
        uneven: uneven(&sizes),
    })
}

/// What `add` would refuse of `spare` once the array is made, checked before anything
/// is written: a file to be made without `--size`, a size below `need` bytes, or (unless
/// `--force`) contents create or add would write over.
fn check_spare(opts: &CreateOptions, spare: &Path, need: u64) -> Result<(), ArrayError> {
    if !spare.exists() {
        return size_to_make(spare, opts.size_bytes, need).map(drop);
    }
    let member = FileMember::open(spare, &member_options(true))?;
    let size = member.size_bytes();
    if size < need {
        return Err(ArrayError::TooSmall {
            path: spare.to_path_buf(),
            size,
            need,
        });
    }
    if opts.force {
        return Ok(());
    }
    refuse_what_it_holds(&member, spare)
}

/// The size of the member file `path`, yet to be made, is `size` (`--size`): refused
/// without one, or below the `need` bytes a member takes.
pub(crate) fn size_to_make(path: &Path, size: Option<u64>, need: u64) -> Result<u64, ArrayError> {
    let size = size.ok_or_else(|| ArrayError::MissingFile {
        path: path.to_path_buf(),
    })?;
    if size < need {
        return Err(ArrayError::TooSmall {
            path: path.to_path_buf(),
            size,
            need,
        });
    }
    Ok(size)
}

/// Refuses a member (or spare) at `path` that holds what create would write over: an
/// md superblock (1.2, or another version), or a partition table, file system or other
/// header (`foreign`). `--force` passes over all of them, as mdadm's does.
fn refuse_what_it_holds(member: &FileMember, path: &Path) -> Result<(), ArrayError> {
    if let Some(sb) = read_superblock(member, path)? {
        return Err(ArrayError::AlreadyMember {
            path: path.to_path_buf(),
            name: sb.name(),
            uuid: Superblock::uuid_string(&sb.set_uuid),
        });
    }
    if let Some(version) = crate::scan::other_md_metadata(member) {
        return Err(ArrayError::OtherMdMetadata {
            path: path.to_path_buf(),
            version,
        });
    }
    if let Some(what) = crate::foreign::foreign_content(member) {
        return Err(ArrayError::ForeignContent {
            path: path.to_path_buf(),
            what,
        });
    }
    Ok(())
}

/// A member given for a role at create.
enum Given {
    /// The role is left empty ([`MISSING`]).
    Missing,
    /// A file to be made (sparse: zeros).
    New,
    /// A file or device that exists, with whatever it holds.
    Existing(FileMember),
}

/// Refuses roles left [`MISSING`] that leave the array without its data: all of
/// them, any for RAID-0, more than RAID-5 or RAID-6 survives, every copy of a
/// RAID-10 chunk.
fn refuse_missing(shape: Geometry, missing: &[usize]) -> Result<(), ArrayError> {
    if missing.is_empty() {
        return Ok(());
    }
    let states: Vec<xraid_engine::MemberState> = (0..usize::from(shape.raid_disks()))
        .map(|r| {
            if missing.contains(&r) {
                xraid_engine::MemberState::Failed
            } else {
                xraid_engine::MemberState::Active
            }
        })
        .collect();
    match xraid_engine::Engine::lost_with(shape, states) {
        None => Ok(()),
        Some(lost) => Err(ArrayError::MissingAtCreate {
            level: shape.level(),
            missing: missing.to_vec(),
            why: lost.to_string(),
        }),
    }
}

/// The internal bitmap a new array gets, as `mdadm --create --bitmap=internal`
/// would make it; refused (before any file is touched) for a level without
/// redundancy or a chunk that does not fit.
fn bitmap_choice(
    opts: &CreateOptions,
    new: &NewArray,
    member_sectors: u64,
) -> Result<Option<BitmapChoice>, ArrayError> {
    if !opts.bitmap {
        return Ok(None);
    }
    let path = opts
        .members
        .iter()
        .find(|p| !is_missing(p))
        .cloned()
        .unwrap_or_default();
    let mut choice = BitmapChoice::internal(new, member_sectors, opts.bitmap_chunk_bytes)
        .map_err(|source| ArrayError::Superblock { path, source })?;
    if let Some(secs) = opts.bitmap_delay_secs {
        choice.daemon_sleep = secs;
    }
    Ok(Some(choice))
}

fn chunk_sectors(level: Level, chunk_bytes: u64) -> Result<u32, ArrayError> {
    if level == Level::Raid1 {
        return Ok(0);
    }
    // Geometry::new explains what is wrong with a chunk that is not a power of two.
    let sectors = chunk_bytes / SECTOR_BYTES;
    let sectors = if !chunk_bytes.is_multiple_of(SECTOR_BYTES) {
        sectors | 1
    } else {
        sectors
    };
    Ok(u32::try_from(sectors).unwrap_or(u32::MAX))
}

/// Two spellings of one file that does not exist yet would both be created as one.
fn refuse_same_new_path(paths: &[PathBuf]) -> Result<(), ArrayError> {
    let canonical: Vec<PathBuf> = paths.iter().map(|p| canonical_new(p)).collect();
    for (i, a) in canonical.iter().enumerate() {
        if let Some(j) = canonical[..i].iter().position(|b| b == a) {
            return Err(ArrayError::Duplicate {
                first: paths[j].clone(),
                second: paths[i].clone(),
            });
        }
    }
    Ok(())
}

fn canonical_new(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    let parent = parent.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let parent = parent.canonicalize().unwrap_or(parent);
    match path.file_name() {
        Some(name) => parent.join(name),
        None => parent,
    }
}

/// Makes parity (or mirror copies) agree with the data already on the members, as
/// md's initial resync does: every unit is read, and only redundancy that disagrees
/// with the data is written (the engine's repair) — the data is never rewritten, and
/// members that hold zeros get nothing written at all (before 2026-11-28 the whole
/// array was rewritten: every byte of every member, a full write of each disk). In
/// integrity mode every block is rewritten instead, so that its checksum is recorded.
fn initial_sync(
    driver: &mut ArrayDriver,
    progress: &mut dyn FnMut(u64, u64),
    integrity: bool,
) -> Result<(), ArrayError> {
    if integrity {
        return rewrite_whole(driver, progress);
    }
    let total = driver.engine().geometry().array_sectors() * SECTOR_BYTES;
    driver
        .engine_mut()
        .start_sync(SyncKind::Repair, 0)
        .map_err(|source| ArrayError::Sync {
            kind: "initial resync",
            source,
        })?;
    loop {
        driver.step()?;
        for event in driver.take_events() {
            if let Event::SyncFinished { unrecoverable, .. } = event {
                if unrecoverable > 0 {
                    return Err(ArrayError::InitialSyncUnreadable {
                        units: unrecoverable,
                    });
                }
                progress(total, total);
                return Ok(());
            }
        }
        if let Some(p) = driver.engine().sync_progress() {
            let done =
                u128::from(p.done_below) * u128::from(total) / u128::from(p.total_units.max(1));
            progress(u64::try_from(done).unwrap_or(total), total);
        }
        if !driver.io_in_flight() {
            // Nothing in flight: the sync waits for its pace (none is set here).
            if let Some(wait) = driver.until_timer() {
                std::thread::sleep(wait);
            }
            driver.tick();
        }
    }
}

/// The initial sync of an integrity-mode array: the array rewritten in whole stripes,
/// which records every block's checksum.
fn rewrite_whole(
    driver: &mut ArrayDriver,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), ArrayError> {
    let geo = *driver.engine().geometry();
    let total = geo.array_sectors() * SECTOR_BYTES;
    let unit = match geo.level() {
        Level::Raid4 | Level::Raid5 | Level::Raid6 => geo.stripe_data_sectors() * SECTOR_BYTES,
        _ => SECTOR_BYTES * 8,
    };
    let step = (SYNC_REQUEST_BYTES / unit).max(1) * unit;
    let mut buf = vec![0u8; usize::try_from(step).expect("1 MiB-ish")];
    let mut at = 0;
    while at < total {
        let len = usize::try_from(step.min(total - at)).expect("fits");
        driver.read_at(&mut buf[..len], at)?;
        driver.write_at(&buf[..len], at)?;
        at += len as u64;
        progress(at, total);
    }
    Ok(())
}

/// Writes a superblock at 4 KiB (an integrity header that was current is kept so
/// first: see `integrity::keep_header_current`).
pub(crate) fn write_superblock(
    member: &dyn Member,
    sb: &Superblock,
    path: &Path,
) -> Result<(), ArrayError> {
    crate::integrity::keep_header_current(member, sb, path)?;
    member
        .write_at(&sb.to_bytes(), xraid_format::SUPERBLOCK_OFFSET_BYTES)
        .map_err(|source| io_error(path, source))
}

/// A random UUID from the kernel's generator (or, where getrandom is refused, from
/// the clock and the process id, which is unique enough for naming an array).
pub(crate) fn random_uuid() -> [u8; 16] {
    let mut uuid = [0u8; 16];
    // SAFETY: the pointer and length describe `uuid`, which outlives the call.
    let got = unsafe { libc::getrandom(uuid.as_mut_ptr().cast(), uuid.len(), 0) };
    if usize::try_from(got).ok() != Some(uuid.len()) {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mixed = nanos ^ (u128::from(std::process::id()) << 64);
        uuid = mixed.to_le_bytes();
    }
    uuid
}
