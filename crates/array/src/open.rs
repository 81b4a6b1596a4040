//! An assembled array opened for I/O, and the superblock bookkeeping md does around
//! writes: the array is marked active (dirty) with a new event count before its first
//! write, and clean again when it is closed, so that members left out meanwhile are
//! recognised as stale when they return.

use std::path::PathBuf;

use xraid_driver::{ArrayDriver, BackendChoice, MemberSlot};
use xraid_engine::{FailReason, MemberState, SyncKind};
use xraid_format::{
    Superblock, MD_FEATURE_RECOVERY_BITMAP, MD_FEATURE_RECOVERY_OFFSET, MD_FEATURE_REPLACEMENT,
    ROLE_FAULTY,
};
use xraid_layout::SECTOR_BYTES;
use xraid_member::{FaultyMember, FileMember, Member, MemberFault, OverlayMember};

use crate::assemble::{member_options, role_idx};
use crate::create::write_superblock;
use crate::routed::Routed;
use crate::{ArrayError, Assembled, LeftOut, LeftOutReason};

/// How a parity level keeps parity right across a crash in the middle of a write
/// (md's consistency policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Consistency {
    /// The stripe log (closes the write hole; one small extra write and flush per
    /// stripe write).
    #[default]
    Log,
    /// Resync after an unclean stop only, as md without PPL or journal: a crash with a
    /// member missing can lose data that member held.
    Resync,
}

/// Whether an array is opened to read only or to read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    ReadOnly,
    ReadWrite,
}

/// An array ready for I/O through its [`ArrayDriver`].
#[derive(Debug)]
pub struct Array {
    pub(crate) driver: ArrayDriver,
    /// The superblock each present role carries, with its path.
    superblocks: Vec<Option<(PathBuf, Superblock)>>,
    /// The freshest superblock at assembly.
    freshest: Superblock,
    pub left_out: Vec<LeftOut>,
    mode: OpenMode,
    dirty: bool,
    /// md's `resync_offset` at open when the array had not been stopped cleanly: where
    /// a resync must (go on to) start. Cleared when a resync completes.
    resync_from: Option<u64>,
    /// The array was made over old contents and nothing has written its superblocks
    /// since (their event count is still create's 0): the resync it owes is the
    /// initial one (md's too, after `mdadm --create`). An offline command that
    /// writes them first (fail, add, write) makes it look like any other.
    made_unsynced: bool,
    /// Per role, the recovery offset of a member being rebuilt (md's `recovery_offset`
    /// with the RECOVERY_OFFSET feature), as found at open.
    recovering: Vec<Option<u64>>,
    /// Hot spares found at open and not used yet.
    spares: Vec<(PathBuf, Superblock)>,
    /// The spares' devices, held open (and locked) while they wait, as md holds its
    /// spares: no other process can take one over meanwhile. A spare that could not
    /// be opened is not here; it is opened (or passed over) when it steps in.
    held_spares: Vec<(PathBuf, FileMember)>,
    /// A recover waits for another sync (cancelled to make way) to end.
    recover_pending: bool,
    /// The internal write-intent bitmap, when the array has one and is open to write.
    bitmap: Option<crate::bitmap::KeptBitmap>,
    /// The members found being recovered all returned after a short absence and
    /// catch up on the bitmap's dirty chunks only (md's RECOVERY_BITMAP).
    recover_from_bitmap: bool,
    /// A member added back live for the failed role it left: its path, the role, and
    /// whether it may catch up from the bitmap, with in integrity mode the checksum
    /// table its own area held (read before its superblock was rewritten) — consumed
    /// by the next [`Array::use_spares`].
    homecoming: Option<Homecoming>,
    /// The resync that follows a recover on an array opened dirty has been started
    /// (once: one that cannot finish is not begun again and again).
    resync_followed: bool,
    /// Per role, the replacement being built for its member (md's want_replacement):
    /// its path and superblock, whose recovery offset is the checkpoint of the copy.
    replacements: Vec<Option<(PathBuf, Superblock)>>,
    /// Integrity mode: members keep a checksum per block (see `integrity`).
    integrity: bool,
    /// By member path, the ranges its bad block log holds outside the data area
    /// (the engine keeps those inside).
    bad_outside: std::collections::HashMap<PathBuf, xraid_format::BadBlocks>,
    /// Engine events already followed (their bookkeeping done) that
    /// [`Array::take_events`] has yet to hand out: a superblock round follows them
    /// itself when the engine changed under it.
    followed: Vec<xraid_engine::Event>,
    /// Followed events changed what the superblocks must say, and no round has
    /// written them since (one that failed leaves it for the next
    /// [`Array::take_events`]).
    record_pending: bool,
    /// How often an offline sync records its progress ([`Array::sync`]).
    pub(crate) sync_checkpoint_pace: crate::CheckpointPace,
    /// Opened to read only with the stripe log's recovery in memory (see
    /// [`Array::open_with`]): the members as assembly opened them, whose locks keep
    /// other writers out while this array reads through its own descriptors.
    _held_locks: Vec<FileMember>,
    /// Opened without the stripe log (`Consistency::Resync`): the sectors its rings
    /// name unknown, which now read as whatever parity gives.
    unknown_left_to_parity: u64,
}

/// How one round of superblock writes ended.
enum Round {
    /// Every serving device took its superblock.
    Written,
    /// A role's member did not take its superblock (or integrity header), and why.
    MemberRefused(usize, ArrayError),
    /// The replacement being built for a role did not take its superblock, and why.
    ReplacementRefused(usize, ArrayError),
    /// The engine changed meanwhile (the driver's waits run it): a member failed, or
    /// a replacement took its role over, finished or failed. What was written is as
    /// of before; the round is done again once the events are followed, or a crash
    /// could find a replacement carrying the superblock of the member it replaced.
    Stale,
}

/// Superblock rounds that may find the engine changed under them before one is
/// given up (each one follows the changes first; more in a row means the array's
/// members keep failing or changing).
const STALE_ROUNDS: usize = 8;

impl Array {
    /// Opens an assembled array for I/O.
    pub fn open(
        assembled: Assembled,
        mode: OpenMode,
        backend: BackendChoice,
    ) -> Result<Array, ArrayError> {
        Array::open_with_faults(assembled, mode, backend, &[])
    }

    /// Opens an assembled array with some members wrapped in a [`FaultyMember`]
    /// (tests and demonstrations of the array surviving member failures).
    pub fn open_with_faults(
        assembled: Assembled,
        mode: OpenMode,
        backend: BackendChoice,
        faults: &[MemberFault],
    ) -> Result<Array, ArrayError> {
        Array::open_with(assembled, mode, backend, faults, Consistency::Log)
    }

    /// Opens an assembled array: faults as [`Array::open_with_faults`], and how a crash
    /// in the middle of a parity-level write is made good.
    ///
    /// Opened to read only with the stripe log, a parity array has its rings read and
    /// what a crash left replayed first, in memory (see [`OverlayMember`]): a read of
    /// an array left dirty, or of rows the rings name unknown, must not see parity the
    /// log would have put right, or data nobody knows. Where that finds nothing to
    /// know, the array is opened again without it, reading the devices directly.
    pub fn open_with(
        assembled: Assembled,
        mode: OpenMode,
        backend: BackendChoice,
        faults: &[MemberFault],
        consistency: Consistency,
    ) -> Result<Array, ArrayError> {
        let parity = assembled.geometry.level().has_parity();
        if mode == OpenMode::ReadWrite && consistency == Consistency::Resync && parity {
            // Without the log its rings are not read: what they name unknown would
            // read as whatever parity gives. Looked at in memory first, to say so.
            let unknown = Array::open_in_memory(&assembled, backend, &[])
                .map_or(0, |look| look.driver.engine().unknown_sectors());
            let mut array =
                Array::open_inner(assembled, mode, backend, faults, consistency, false)?;
            array.unknown_left_to_parity = unknown;
            return Ok(array);
        }
        let probe = mode == OpenMode::ReadOnly && consistency == Consistency::Log && parity;
        if !probe {
            return Array::open_inner(assembled, mode, backend, faults, consistency, false);
        }
        let mut in_memory = Array::open_in_memory(&assembled, backend, faults)?;
        if in_memory.read_needs_its_log() {
            // The descriptors it reads through hold no lock: assembly's keep theirs.
            in_memory._held_locks = assembled
                .roles
                .into_iter()
                .flatten()
                .map(|m| m.member)
                .collect();
            return Ok(in_memory);
        }
        drop(in_memory);
        Array::open_inner(assembled, mode, backend, faults, Consistency::Resync, false)
    }

    /// `assembled` opened again to read only, with its stripe log's recovery run in
    /// memory (every member's writes kept there: nothing reaches a device).
    fn open_in_memory(
        assembled: &Assembled,
        backend: BackendChoice,
        faults: &[MemberFault],
    ) -> Result<Array, ArrayError> {
        let overlaid = assembled.reopened_to_read()?;
        let read_only = OpenMode::ReadOnly;
        Array::open_inner(overlaid, read_only, backend, faults, Consistency::Log, true)
    }

    /// Opened without the stripe log: how many sectors its rings name unknown (rows no
    /// one knows since a crash took a member, or the array failed under a write),
    /// which read as whatever parity gives without it.
    pub fn unknown_left_to_parity(&self) -> u64 {
        self.unknown_left_to_parity
    }

    /// Whether what the stripe log's recovery found changes what a read returns: the
    /// array was left dirty (the replay put parity right, or the rings doubt it), or
    /// rows are unknown.
    fn read_needs_its_log(&self) -> bool {
        self.was_dirty() || self.driver.engine().unknown_sectors() > 0
    }

    /// [`Array::open_with`]; `overlaid`: read only, every member's writes kept in
    /// memory, and the stripe log run all the same.
    fn open_inner(
        mut assembled: Assembled,
        mode: OpenMode,
        backend: BackendChoice,
        faults: &[MemberFault],
        consistency: Consistency,
        overlaid: bool,
    ) -> Result<Array, ArrayError> {
        let spares = assembled
            .left_out
            .iter()
            .filter(|l| l.reason == LeftOutReason::Spare)
            .map(|l| (l.path.clone(), l.superblock.clone()))
            .collect();
        let geo = assembled.geometry;
        let assembled_uuid = assembled.superblock.set_uuid;
        // The stripe log closes the write hole of the parity levels; it needs a ring of
        // room on every member and is replayed (writing parity) at open, so only for
        // arrays opened to write.
        let mut ring = (geo.level().has_parity()
            && (mode == OpenMode::ReadWrite || overlaid)
            && consistency == Consistency::Log)
            .then(|| {
                let rings = assembled
                    .roles
                    .iter()
                    .flatten()
                    .map(|m| log_ring(&m.superblock).map(|(_, n)| n));
                rings.min().flatten()
            })
            .flatten()
            .filter(|&n| {
                let entry = xraid_engine::log_entry_max_sectors(
                    geo.data_disks(),
                    geo.chunk_sectors(),
                    geo.level().parity_count(),
                );
                // What rings were sized for before the 4 KiB markers (one sector each):
                // beside the larger slots the largest entry still fits, and the log
                // then waits for room more often; arrays made since get
                // `log_ring_sectors_needed`.
                n >= 2 * entry + 8
            });
        let mut slots = Vec::with_capacity(assembled.roles.len());
        let mut superblocks = Vec::with_capacity(assembled.roles.len());
        let integrity = crate::integrity::array_keeps_checksums(&assembled)?;
        // Per role, the member's checksum table (integrity mode).
        let mut tables = Vec::with_capacity(assembled.roles.len());
        // The write-intent bitmap, read from the first member as fresh as the array.
        let mut bitmap = None;
        // Some member being recovered needs all of it (not only the bitmap's chunks).
        let mut whole_recovery = false;
        let mut recovering = Vec::with_capacity(assembled.roles.len());
        // Per role, its member's bad block log.
        let mut bad_blocks = Vec::with_capacity(assembled.roles.len());
        for role in assembled.roles {
            let sb = role.as_ref().map(|found| &found.superblock);
            recovering.push(
                sb.filter(|sb| sb.feature_map & MD_FEATURE_RECOVERY_OFFSET != 0)
                    .map(|sb| sb.recovery_offset),
            );
            if sb.is_some_and(|sb| {
                sb.feature_map & MD_FEATURE_RECOVERY_OFFSET != 0
                    && sb.feature_map & MD_FEATURE_RECOVERY_BITMAP == 0
            }) {
                whole_recovery = true;
            }
            match role {
                Some(found) => {
                    let role = slots.len();
                    let mut member: Box<dyn Member> = Box::new(found.member);
                    bad_blocks.push(Some(crate::badblocks::load(
                        member.as_ref(),
                        &found.superblock,
                        geo.member_sectors(),
                        &found.path,
                    )?));
                    if let Some(f) = faults.iter().find(|f| usize::from(f.role) == role) {
                        member = Box::new(FaultyMember::new(member, f.plan.clone()));
                    }
                    if overlaid {
                        member = Box::new(OverlayMember::new(member));
                    }
                    let log_offset_bytes = ring
                        .and_then(|_| log_ring(&found.superblock))
                        .map(|(start, _)| start * SECTOR_BYTES);
                    // Not from a member being recovered: it missed bits while away.
                    if bitmap.is_none()
                        && mode == OpenMode::ReadWrite
                        && found.superblock.events == assembled.superblock.events
                        && found.superblock.feature_map & MD_FEATURE_RECOVERY_OFFSET == 0
                    {
                        bitmap =
                            crate::bitmap::load(member.as_ref(), &found.superblock, &found.path)?;
                    }
                    let bitmap_offset_bytes = (mode == OpenMode::ReadWrite)
                        .then(|| crate::bitmap::offset_bytes(&found.superblock))
                        .flatten();
                    let sums = integrity
                        && crate::integrity::has_room(
                            member.size_bytes(),
                            &found.superblock,
                            geo.member_sectors(),
                        );
                    tables.push(if sums {
                        Some(crate::integrity::load(
                            member.as_ref(),
                            &found.superblock,
                            geo.member_sectors(),
                            &found.path,
                        )?)
                    } else {
                        None
                    });
                    slots.push(Some(MemberSlot {
                        member: member.into(),
                        data_offset_bytes: found.superblock.data_offset * SECTOR_BYTES,
                        log_offset_bytes,
                        bitmap_offset_bytes,
                        checksums_offset_bytes: sums
                            .then(|| crate::integrity::table_offset_bytes(&found.superblock)),
                    }));
                    superblocks.push(Some((found.path, found.superblock)));
                }
                None => {
                    slots.push(None);
                    superblocks.push(None);
                    tables.push(None);
                    bad_blocks.push(None);
                }
            }
        }
        // mdadm may have given a bitmap more room than xraid's ring leaves it (a
        // bitmap added later with a small chunk): the log then stays off rather than
        // share the bitmap's sectors.
        if let (Some((_, setup)), Some(_)) = (&bitmap, ring) {
            let overlaps = slots.iter().flatten().any(|slot: &MemberSlot| {
                match (slot.bitmap_offset_bytes, slot.log_offset_bytes) {
                    (Some(b), Some(l)) => l < b + setup.image.len() as u64 && b < l,
                    _ => false,
                }
            });
            if overlaps {
                ring = None;
                for slot in slots.iter_mut().flatten() {
                    slot.log_offset_bytes = None;
                }
            }
        }
        let mut driver = ArrayDriver::new(assembled.geometry, slots, backend)?;
        if mode == OpenMode::ReadOnly {
            // Members are opened read-only: rebuilt ranges are returned, not rewritten.
            // Nor is a member failed for its read errors: nothing would record it, and
            // it would take its copy of everything else out of reach — `read
            // --keep-going` rereads a bad range sector by sector, ten errors a block.
            let mut config = driver.engine().config();
            config.repair_writes = false;
            config.max_read_errors = u32::MAX;
            driver.engine_mut().set_config(config);
        }
        let clean = assembled.superblock.resync_offset == u64::MAX;
        let bitmap = bitmap.map(|(kept, setup)| {
            driver.engine_mut().enable_write_intent(setup);
            if clean {
                driver.engine_mut().release_write_intent_pins();
            }
            kept
        });
        if integrity {
            // Checked and learned in memory only when opened to read: nothing written.
            let engine = driver.engine_mut();
            engine.enable_integrity(Vec::new(), mode == OpenMode::ReadWrite);
            for (role, loaded) in tables.into_iter().enumerate() {
                if let Some(loaded) = loaded {
                    engine.set_checksum_table(role_idx(role), Some(loaded.table), loaded.write_all);
                }
            }
            if !clean {
                // Writes cut off by the crash left checksums that may not match.
                engine.forget_checksums_where_dirty();
            }
            // A member back after an absence (md's RECOVERY_BITMAP) missed the writes
            // of the bitmap's dirty chunks, and its table with them.
            for (role, found) in superblocks.iter().enumerate() {
                if found.as_ref().is_some_and(|(_, sb)| {
                    sb.feature_map & xraid_format::MD_FEATURE_RECOVERY_BITMAP != 0
                }) {
                    engine.forget_checksums_where_dirty_on(role_idx(role));
                }
            }
        }
        for (role, recovery) in recovering.iter().enumerate() {
            if let Some(offset) = *recovery {
                let engine = driver.engine_mut();
                engine
                    .mark_rebuilding(role_idx(role))
                    .map_err(|source| ArrayError::Sync {
                        kind: "recover",
                        source,
                    })?;
                // What its superblock says it holds: it serves that (the stripe log's
                // replay, below, may read it there), and the recover resumes above.
                let unit = engine.member_sector_to_unit(offset);
                engine.resume_rebuilding(role_idx(role), unit);
            }
        }
        // Replacements recorded in the superblocks go on from their checkpoints; set up
        // before the stripe log's replay, which must put parity right on them too.
        let mut left_out = assembled.left_out;
        let mut replacements = open_replacements(
            &mut driver,
            &mut left_out,
            mode,
            ring,
            bitmap.is_some(),
            integrity,
        )?;
        // Before the stripe log's replay, which reads members.
        let mut bad_outside = std::collections::HashMap::new();
        for (role, bad) in bad_blocks.into_iter().enumerate() {
            let (Some(bad), Some((path, _))) = (bad, &superblocks[role]) else {
                continue;
            };
            let engine = driver.engine_mut();
            let slot = engine.device_slot(role_idx(role));
            engine.set_bad_block_log(slot, bad.data, bad.capacity);
            if !bad.outside.is_empty() {
                bad_outside.insert(path.clone(), bad.outside);
            }
        }
        // Made over old contents, and nothing has written it since (the first open to
        // write gives the superblocks a new event count): the resync owed is its
        // initial one.
        let made_unsynced =
            assembled.superblock.resync_offset == 0 && assembled.superblock.events == 0;
        match assembled.superblock.resync_offset {
            u64::MAX => {}
            // Until its resync completes (it may wait for a recover), mirrors read the
            // copy it will keep and parity is not trusted where the log did not fix it.
            // Said before the stripe log's replay: its marker says whether a resync is
            // owed, and a flag an earlier replay left counts only then. The superblocks
            // say 0 while the array runs: anything else is where a clean stop left
            // the resync.
            0 if made_unsynced => driver.engine_mut().owe_initial_resync(),
            0 => driver.engine_mut().owe_resync(),
            from => driver.engine_mut().owe_resync_after_a_clean_stop(from),
        }
        if let Some(sectors) = ring {
            if !assembled.superblock.utime_has_microseconds() {
                // Not stamped by a session that kept the log (see `Array::utime`): md,
                // mdadm or an xraid session without the log may have written since.
                driver.engine_mut().superblocks_unstamped();
            }
            // Reads every ring and replays what a crash cut off before anything else.
            let mut config = driver.engine().config();
            config.log_sectors = sectors;
            let mut tag = [0u8; 8];
            tag.copy_from_slice(&assembled_uuid[..8]);
            config.log_tag = u64::from_le_bytes(tag);
            driver.engine_mut().set_config(config);
            while driver.engine().log_recovering() {
                if driver.engine().replay_awaits_record() {
                    let found = Found {
                        superblocks: &mut superblocks,
                        freshest: &mut assembled.superblock,
                        replacements: &mut replacements,
                        recovering: &mut recovering,
                        left_out: &mut left_out,
                    };
                    record_for_replay(&mut driver, found, &bad_outside)?;
                    continue;
                }
                driver.pump(true)?;
            }
            // A take-over after the record (a member lost during the rings' marker,
            // having taken every write of the replay): the superblocks written next go
            // to the device that serves the role.
            take_overs(
                &driver,
                Found {
                    superblocks: &mut superblocks,
                    freshest: &mut assembled.superblock,
                    replacements: &mut replacements,
                    recovering: &mut recovering,
                    left_out: &mut left_out,
                },
            );
        }
        // A role taken over at open is rebuilt whole, not from the bitmap.
        let roles = recovering.len();
        if (0..roles).any(|r| driver.engine().device_slot(role_idx(r)) != role_idx(r)) {
            whole_recovery = true;
        }
        let resync_from = match assembled.superblock.resync_offset {
            u64::MAX => None,
            sector => Some(sector),
        };
        let mut array = Array {
            driver,
            superblocks,
            freshest: assembled.superblock,
            left_out,
            mode,
            dirty: false,
            resync_from,
            made_unsynced,
            recovering,
            spares,
            held_spares: Vec::new(),
            recover_pending: false,
            recover_from_bitmap: bitmap.is_some() && !whole_recovery,
            homecoming: None,
            resync_followed: false,
            bitmap,
            replacements,
            integrity,
            bad_outside,
            followed: Vec::new(),
            record_pending: false,
            sync_checkpoint_pace: crate::CheckpointPace::default(),
            _held_locks: Vec::new(),
            unknown_left_to_parity: 0,
        };
        if array.mode == OpenMode::ReadWrite && array.was_dirty() && !array.resync_pending() {
            // The log's replay made parity right, or there is nothing to resync (RAID-0):
            // the close marks the array clean.
            array.begin_writes()?;
        }
        if !array.start_recovery_if_needed()? {
            array.start_resync_if_needed()?;
        }
        if array.mode == OpenMode::ReadWrite {
            let paths = array.spare_paths();
            for path in paths {
                array.hold_spare(&path, None);
            }
        }
        Ok(array)
    }

    /// Keeps spare `path`'s device open and locked while it waits (`open`: already
    /// opened, by whoever wrote its superblock). One that cannot be opened now is
    /// opened, or passed over, when it steps in.
    fn hold_spare(&mut self, path: &std::path::Path, open: Option<FileMember>) {
        let member = match open {
            Some(member) => member,
            None => match FileMember::open(path, &member_options(true)) {
                Ok(member) => member,
                Err(_) => return,
            },
        };
        self.held_spares.push((path.to_path_buf(), member));
    }

    /// The device of spare `path`, stepping in: the one held open since it became a
    /// spare, or opened now.
    fn take_spare_device(&mut self, path: &std::path::Path) -> Result<FileMember, ArrayError> {
        let held = self
            .held_spares
            .iter()
            .position(|(p, _)| p == path)
            .map(|i| self.held_spares.remove(i).1);
        match held {
            Some(member) if member.still_at_path() => Ok(member),
            // Gone (or another file now) while held: as if the disk had vanished.
            Some(_) => Err(ArrayError::SpareGone {
                path: path.to_path_buf(),
            }),
            None => Ok(FileMember::open(path, &member_options(true))?),
        }
    }

    /// Closes spare `path`'s device (removed from the array).
    fn release_spare(&mut self, path: &std::path::Path) {
        self.held_spares.retain(|(p, _)| p != path);
    }

    /// Members recorded as being recovered are rebuilt in the background, from the
    /// lowest checkpoint among them, when the array is opened to write (md recovers
    /// before it resyncs). Returns whether a recover started.
    fn start_recovery_if_needed(&mut self) -> Result<bool, ArrayError> {
        let replacing = self
            .replacements
            .iter()
            .flatten()
            .map(|(_, sb)| sb.recovery_offset);
        let Some(from) = self
            .recovering
            .iter()
            .flatten()
            .copied()
            .chain(replacing)
            .min()
        else {
            return Ok(false);
        };
        if self.mode != OpenMode::ReadWrite {
            return Ok(false);
        }
        let unit = self.driver.engine().member_sector_to_unit(from);
        self.begin_writes()?;
        let replacing = self.replacements.iter().any(Option::is_some);
        let unclean = self.was_dirty();
        let engine = self.driver.engine_mut();
        let started = if replacing && unclean {
            // A write not flushed before the stop may have reached a member and not its
            // replacement: their dirty chunks are copied again below the checkpoint.
            engine.start_recover_after_unclean_stop(unit)
        } else if self.recover_from_bitmap {
            engine.start_sync_where_dirty(SyncKind::Recover, unit)
        } else {
            engine.start_sync(SyncKind::Recover, unit)
        };
        started.map_err(|source| ArrayError::Sync {
            kind: "recover",
            source,
        })?;
        Ok(true)
    }

    /// Puts hot spares into the roles of members that failed while the array runs, as
    /// md recovers onto a spare: the spare is opened into the role, the superblocks say
    /// so (RECOVERY_OFFSET 0, the failed member's entry faulty), and a recover starts
    /// (a running recover restarts; another sync is cancelled and the recover follows
    /// through [`Array::maintain`]). Returns the spares used, with their roles. A spare
    /// that cannot be opened is dropped from the list and the next one tried; the error
    /// is returned only when no spare could be used.
    pub fn use_spares(&mut self) -> Result<Vec<(PathBuf, u16)>, ArrayError> {
        if self.mode != OpenMode::ReadWrite || self.spares.is_empty() {
            return Ok(Vec::new());
        }
        let mut failed: Vec<usize> = (0..self.superblocks.len())
            .filter(|&r| self.driver.engine().member_states()[r] == MemberState::Failed)
            .collect();
        let mut homecoming = self.homecoming.take();
        // A member back for the role it left goes there, not into the lowest failed
        // role: first in line, with that role first.
        if let Some(home) = &homecoming {
            let spare = self.spares.iter().position(|(p, _)| *p == home.path);
            let role = failed.iter().position(|&r| r == home.role);
            if let (Some(spare), Some(role)) = (spare, role) {
                let member = self.spares.remove(spare);
                self.spares.insert(0, member);
                failed.remove(role);
                failed.insert(0, home.role);
            }
        }
        let rebuilding_before = self
            .driver
            .engine()
            .member_states()
            .contains(&MemberState::Rebuilding);
        let mut used = Vec::new();
        let mut unusable: Option<ArrayError> = None;
        for role in failed {
            if self.spares.is_empty() {
                break;
            }
            let (path, spare) = self.spares.remove(0);
            let member = match self.take_spare_device(&path) {
                Ok(member) => member,
                Err(e) => {
                    // A spare that cannot be opened (gone, unreadable) is passed over
                    // for the next; the failed role still gets a spare if one works.
                    unusable.get_or_insert(e);
                    continue;
                }
            };
            // Still this array's spare? (Not held open, something else may have
            // written it since.) Anything else is passed over, not overwritten.
            match crate::scan::read_superblock(&member, &path) {
                Ok(Some(now))
                    if now.set_uuid == spare.set_uuid && now.device_uuid == spare.device_uuid => {}
                Ok(_) => {
                    unusable.get_or_insert(ArrayError::SpareChanged { path: path.clone() });
                    continue;
                }
                Err(e) => {
                    unusable.get_or_insert(e);
                    continue;
                }
            }
            let mut sb = self.freshest.clone();
            crate::badblocks::fresh_superblock(&mut sb);
            // A returning member in its own role catches up from the bitmap, when it
            // is the only one to rebuild; anything else is rebuilt whole.
            let catching_up = homecoming
                .as_ref()
                .is_some_and(|h| h.catch_up && h.path == path && h.role == role);
            if catching_up {
                sb.feature_map |= MD_FEATURE_RECOVERY_BITMAP;
            } else {
                sb.feature_map &= !MD_FEATURE_RECOVERY_BITMAP;
            }
            self.recover_from_bitmap = catching_up && !rebuilding_before && used.is_empty();
            sb.dev_number = spare.dev_number;
            sb.device_uuid = spare.device_uuid;
            sb.data_offset = spare.data_offset;
            sb.data_size = spare.data_size;
            let dev = spare.dev_number as usize;
            let role16 = u16::try_from(role).expect("roles fit u16");
            if let Some(entry) = self.freshest.dev_roles.get_mut(dev) {
                *entry = role16;
            }
            let data_offset_bytes = sb.data_offset * SECTOR_BYTES;
            let log_offset_bytes = self
                .stripe_log_sectors()
                .and_then(|need| log_ring(&sb).filter(|&(_, n)| n >= need))
                .map(|(start, _)| start * SECTOR_BYTES);
            if self.stripe_log_sectors().is_some() && log_offset_bytes.is_none() {
                // A spare without room for the log cannot serve this array's writes.
                self.spares.push((path.clone(), spare));
                self.hold_spare(&path, Some(member));
                continue;
            }
            let checksums_offset_bytes = self.newcomer_checksums(&member, &sb);
            // A member back in its own role to catch up from the bitmap keeps the
            // checksums its own area held for what it was not written meanwhile.
            let own_table = match (self.recover_from_bitmap, checksums_offset_bytes) {
                (true, Some(_)) => homecoming.as_mut().and_then(|h| h.table.take()),
                _ => None,
            };
            self.driver.replace_member(
                role_idx(role),
                MemberSlot {
                    member: std::sync::Arc::new(member),
                    data_offset_bytes,
                    log_offset_bytes,
                    bitmap_offset_bytes: self
                        .bitmap
                        .as_ref()
                        .and_then(|_| crate::bitmap::offset_bytes(&sb)),
                    checksums_offset_bytes,
                },
            );
            let slot = self.driver.engine().device_slot(role_idx(role));
            match own_table {
                Some(loaded) => {
                    let engine = self.driver.engine_mut();
                    // Written whole at the next barrier: its new superblock may place the
                    // area elsewhere than the old one did.
                    engine.set_checksum_table(slot, Some(loaded.table), true);
                    // Where the bitmap is dirty it may have missed writes (and its
                    // table the checksums of its own last ones): learned again there.
                    engine.forget_checksums_where_dirty_on(slot);
                }
                None => self.set_newcomer_table(slot, checksums_offset_bytes.is_some()),
            }
            // The failed member the spare takes the place of is out of the array now
            // (status lists it as left out, for `xraid remove`) — unless it is the
            // spare itself, back in the role it left.
            if let Some((old_path, old_sb)) = self.superblocks[role].take() {
                if crate::members::canonical(&old_path) != crate::members::canonical(&path) {
                    self.let_go(old_path, Some(role16), old_sb);
                }
            }
            let room = crate::badblocks::capacity(&sb);
            self.superblocks[role] = Some((path.clone(), sb));
            self.recovering[role] = Some(0);
            let engine = self.driver.engine_mut();
            engine
                .replace_member(role_idx(role))
                .map_err(|source| ArrayError::Sync {
                    kind: "recover",
                    source,
                })?;
            engine.set_bad_block_log(slot, xraid_format::BadBlocks::new(), room);
            self.bad_outside.remove(&path);
            used.push((path, role16));
        }
        if used.is_empty() {
            return unusable.map_or(Ok(used), Err);
        }
        self.dirty = true;
        self.update_superblocks(0, None)?;
        match self.driver.engine().sync_progress().map(|p| p.kind) {
            Some(SyncKind::Recover) => {}
            // A resync protects what it has not reached yet (writes there do not trust
            // parity): the recover waits for it to end.
            Some(SyncKind::Resync) => self.recover_pending = true,
            Some(_) => {
                self.driver.engine_mut().cancel_sync();
                self.recover_pending = true;
            }
            None => {
                self.recover_pending = true;
                self.maintain()?;
            }
        }
        Ok(used)
    }

    /// Records how far a running recover or resync has got in the superblocks (md's
    /// recovery_offset / resync_offset), so that a crash does not send it back to the
    /// start. Cheap enough to call every few seconds; does nothing when nothing runs.
    /// Says whether it wrote the superblocks (a resync's checkpoint is kept in memory,
    /// for the stop's record).
    pub fn checkpoint_sync(&mut self) -> Result<bool, ArrayError> {
        let Some(progress) = self.driver.engine().sync_progress() else {
            return Ok(false);
        };
        if self.mode != OpenMode::ReadWrite || progress.done_below == 0 {
            return Ok(false);
        }
        let engine = self.driver.engine();
        let sector = engine.unit_to_resync_offset(progress.done_below);
        match progress.kind {
            SyncKind::Recover => {
                // The recover launches nothing while its checkpoint is recorded: the
                // flush and each superblock write wait for the sync's reads in the
                // kernel, once instead of once a member.
                self.driver.engine_mut().hold_sync(true);
                let recorded = self.record_recover_checkpoint(progress.done_below);
                self.driver.engine_mut().hold_sync(false);
                // The units let go are sent now: a caller that finds nothing in flight
                // would otherwise sleep until the engine's next timer.
                self.driver.send_queued();
                recorded.map(|()| true)
            }
            SyncKind::Resync if self.resync_pending() => {
                self.resync_from = Some(sector);
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// Records a running recover's checkpoint: its targets rebuilt below `unit`.
    fn record_recover_checkpoint(&mut self, unit: u64) -> Result<(), ArrayError> {
        // What was rebuilt below the checkpoint must be durable before a superblock
        // says so. Superblocks say the array is active (0) while it runs; the members
        // being rebuilt carry how far.
        self.driver.flush()?;
        self.dirty = true;
        self.update_superblocks(0, Some(unit))?;
        // Writes past it still keep the rebuilt members' rows in the log.
        self.driver.engine_mut().set_recovery_recorded(unit);
        Ok(())
    }

    /// Starts the recover [`Array::use_spares`] left waiting for another sync to end.
    /// Cheap; call it now and then.
    pub fn maintain(&mut self) -> Result<(), ArrayError> {
        let engine = self.driver.engine();
        if engine.sync_progress().is_none()
            && !self.recover_pending
            && !self.resync_followed
            && self.resync_pending()
            && engine.is_whole()
        {
            // Opened dirty but not whole, so left unsynced; whole now (a recover
            // finished): the resync follows, as md's does after its recovery.
            self.resync_followed = true;
            return self.start_resync_if_needed();
        }
        if !self.recover_pending || engine.sync_progress().is_some() {
            return Ok(());
        }
        self.recover_pending = false;
        if engine.can_start_sync(SyncKind::Recover).is_err() {
            return Ok(());
        }
        let engine = self.driver.engine_mut();
        let started = if self.recover_from_bitmap {
            engine.start_sync_where_dirty(SyncKind::Recover, 0)
        } else {
            engine.start_sync(SyncKind::Recover, 0)
        };
        started.map_err(|source| ArrayError::Sync {
            kind: "recover",
            source,
        })
    }

    /// The sectors of the stripe-log ring on each member, when the array keeps one (a
    /// parity level opened to write, with room between its metadata and its data).
    pub fn stripe_log_sectors(&self) -> Option<u64> {
        Some(self.driver.engine().config().log_sectors).filter(|&n| n > 0)
    }

    /// Where role `role`'s data area starts on its device, in sectors (md's
    /// `data_offset`): engine sectors count from there, md's tools from the device's
    /// start.
    pub fn data_offset_sectors(&self, role: usize) -> Option<u64> {
        self.superblocks
            .get(role)?
            .as_ref()
            .map(|(_, sb)| sb.data_offset)
    }

    /// The path of the member in `role`, if one is there.
    pub fn role_path(&self, role: usize) -> Option<&std::path::Path> {
        self.superblocks
            .get(role)?
            .as_ref()
            .map(|(path, _)| path.as_path())
    }

    /// The role of the member at `path` (compared as canonical paths), if it serves one.
    pub fn role_of_path(&self, path: &std::path::Path) -> Option<usize> {
        let wanted = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        (0..self.superblocks.len()).find(|&r| {
            self.role_path(r).is_some_and(|p| {
                std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()) == wanted
            })
        })
    }

    /// The role whose replacement is being built on `path`, if one is: by name, or
    /// as the same file under another name (a hard link).
    pub fn replacement_role_of_path(&self, path: &std::path::Path) -> Option<usize> {
        use std::os::unix::fs::MetadataExt;
        let wanted = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let file = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
        let wanted_file = file(path);
        self.replacements.iter().position(|r| {
            r.as_ref().is_some_and(|(p, _)| {
                std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()) == wanted
                    || (wanted_file.is_some() && file(p) == wanted_file)
            })
        })
    }

    /// Hot spares waiting to be used.
    pub fn spare_paths(&self) -> Vec<PathBuf> {
        self.spares.iter().map(|(p, _)| p.clone()).collect()
    }

    /// Writes the members' states to the superblocks now (a member failed by request
    /// shows as faulty at once, as md does).
    pub fn record_members(&mut self) -> Result<(), ArrayError> {
        self.dirty = true;
        self.update_superblocks(0, None)
    }

    /// Per role: `Some(percent)` for a member being rebuilt.
    pub fn rebuilding(&self) -> Vec<Option<u8>> {
        let engine = self.driver.engine();
        let progress = engine.sync_progress();
        engine
            .member_states()
            .iter()
            .map(|s| {
                (*s == MemberState::Rebuilding).then(|| match progress {
                    Some(p) if p.kind == SyncKind::Recover && p.total_units > 0 => {
                        u8::try_from(p.done_below * 100 / p.total_units).unwrap_or(100)
                    }
                    _ => 0,
                })
            })
            .collect()
    }

    /// An array that was not stopped cleanly may have parity (or mirror copies) that
    /// disagree with its data where writes were cut off: opened to write, it resyncs in
    /// the background from where an earlier resync stopped, as md does. A degraded
    /// mirror resyncs the copies it has (md's raid1 and raid10 do too), so that reads
    /// need not keep to one copy until the missing member is back. Degraded parity
    /// has nothing to resync against (md's write hole): it is left dirty, and the
    /// resync follows the recover that makes it whole ([`Array::maintain`]).
    fn start_resync_if_needed(&mut self) -> Result<(), ArrayError> {
        let Some(from) = self.resync_from else {
            return Ok(());
        };
        let engine = self.driver.engine();
        let parity_short = !engine.is_whole() && engine.geometry().level().has_parity();
        if self.mode != OpenMode::ReadWrite
            || parity_short
            || engine.can_start_sync(SyncKind::Resync).is_err()
        {
            return Ok(());
        }
        let unit = engine.resync_offset_to_unit(from);
        self.begin_writes()?;
        // With a bitmap only chunks whose bits are set can disagree.
        self.driver
            .engine_mut()
            .start_sync_where_dirty(SyncKind::Resync, unit)
            .map_err(|source| ArrayError::Sync {
                kind: "resync",
                source,
            })
    }

    /// Whether the array was not stopped cleanly and its resync has not completed yet.
    /// With the stripe log, the replay at open already made parity agree with the data
    /// wherever a write was cut off, so nothing is pending (a resync of a whole array
    /// still runs, to check). A RAID-0 has nothing to resync: never.
    pub fn resync_pending(&self) -> bool {
        let stats = self.driver.engine().stats();
        self.resync_from.is_some()
            && self.driver.engine().geometry().level() != xraid_layout::Level::Raid0
            && stats.resyncs_completed == 0
            && (self.stripe_log_sectors().is_none() || stats.log_entries_skipped > 0)
    }

    /// Whether the array was not stopped cleanly (found so at open).
    pub fn was_dirty(&self) -> bool {
        self.resync_from.is_some()
    }

    /// Whether the array was stopped cleanly with a resync part done (md's
    /// `resync_offset` past 0): the resync goes on from there.
    pub fn stopped_mid_resync(&self) -> bool {
        self.resync_from.is_some_and(|sector| sector > 0)
    }

    /// Whether the array was made over old contents and its superblocks have not been
    /// written since (found so at open; see the field): the resync it owes is its
    /// initial one.
    pub fn made_unsynced(&self) -> bool {
        self.made_unsynced
    }

    pub fn driver(&mut self) -> &mut ArrayDriver {
        &mut self.driver
    }

    /// The driver, to look at (its engine's state).
    pub fn driver_ref(&self) -> &ArrayDriver {
        &self.driver
    }

    /// The array's logical block size, as md's block device of it would have it: the
    /// largest of its devices' (members, replacements, and hot spares held open: md
    /// stacks every device it has at assembly), 512 for files.
    pub fn logical_block_bytes(&self) -> u32 {
        let raid_disks = self.driver.engine().geometry().raid_disks();
        (0..2 * raid_disks)
            .filter_map(|i| self.driver.slot(xraid_layout::MemberIdx(i)))
            .map(|s| s.member.logical_block_bytes())
            .chain(
                self.held_spares
                    .iter()
                    .map(|(_, m)| m.logical_block_bytes()),
            )
            .max()
            .unwrap_or(512)
    }

    pub fn name(&self) -> String {
        self.freshest.name()
    }

    /// The array's UUID, as mdadm prints it.
    pub fn uuid(&self) -> String {
        Superblock::uuid_string(&self.freshest.set_uuid)
    }

    /// The event count of the superblocks last written.
    pub fn events(&self) -> u64 {
        self.freshest.events
    }

    /// The update time of the superblocks this array writes: stamped (to the
    /// microsecond, [`crate::members::now_utime`]) where the stripe log runs — its
    /// rings then know of every write before the superblocks, and the open's
    /// recovery has put on them its doubt about any write md made since xraid last
    /// did — and whole seconds, as md writes, where it does not: such a session's
    /// writes are unknown to the rings as md's are, and a later open with the log
    /// must not take their word for them (`Engine::superblocks_unstamped`).
    fn utime(&self) -> u64 {
        if self.stripe_log_sectors().is_some() {
            crate::members::now_utime()
        } else {
            Superblock::encode_time(crate::members::now_secs())
        }
    }

    /// Marks the array active before the first write: a new event count on every present
    /// member, missing members recorded as faulty. Called once; later calls do nothing.
    pub fn begin_writes(&mut self) -> Result<(), ArrayError> {
        debug_assert_eq!(self.mode, OpenMode::ReadWrite);
        if self.dirty {
            return Ok(());
        }
        self.dirty = true;
        self.update_superblocks(0, None)
    }

    /// Stops a running sync (a resync records where it got to), flushes and, if the
    /// array was written, marks it clean with a new event count.
    pub fn close(mut self) -> Result<(), ArrayError> {
        // Read before anything close does: a loss in its sync's end, its flush (with
        // the stripe log's marker write after it, which the flush's answer does not
        // wait on) or its update is close's to report.
        let lost_at_start = self.driver.engine().lost_error().is_some();
        let stopped = self.stop_sync()?;
        if !self.dirty {
            return Ok(());
        }
        if let Err(error) = self.driver.flush() {
            // A member that failed on the flush is recorded all the same (md fails a
            // device whose flush fails): it must not come back as current holding
            // writes it may not have kept.
            if self.failure_unrecorded() {
                self.update_superblocks(0, None)?;
            }
            return Err(self
                .failed_while_closing(lost_at_start)
                .unwrap_or(error.into()));
        }
        if self.driver.engine().lost_error().is_some() && self.recorded_as_failed() {
            // Nothing more to write, and one event more would make the members that
            // failed with it look as if the array had gone on without them (see
            // `force_start`).
            return self.failed_while_closing(lost_at_start).map_or(Ok(()), Err);
        }
        let whole = self.driver.engine().is_whole();
        if let Some(bitmap) = self.bitmap.as_mut() {
            // A clean stop leaves no quiet bit set (md's bitmap flush); on a degraded
            // array the bits stay, for the member that returns. A member rebuilt while
            // the array ran makes it whole again: events_cleared goes up first.
            let header = bitmap.header(self.freshest.events, whole);
            self.write_bitmap_header(&header, whole)?;
            self.driver.engine_mut().clear_write_intent_now();
            self.wait_for_bitmap(|e| e.write_intent_settled())?;
        }
        let resynced_to = stopped
            .filter(|(k, _)| *k == SyncKind::Resync)
            .map(|(_, unit)| self.driver.engine().unit_to_resync_offset(unit));
        // A failed array is never marked clean: writes its last failure cut off may
        // have left parity (or copies) disagreeing where no redundancy can tell.
        let lost = self.driver.engine().lost_error().is_some();
        let resync_offset = if lost {
            0
        } else if self.resync_pending() {
            resynced_to.or(self.resync_from).unwrap_or(0)
        } else {
            u64::MAX
        };
        let recovered_to = stopped
            .filter(|(k, _)| *k == SyncKind::Recover)
            .map(|(_, unit)| unit);
        self.update_superblocks(resync_offset, recovered_to)?;
        self.failed_while_closing(lost_at_start).map_or(Ok(()), Err)
    }

    /// Whether the superblock of a role whose member is in service (`states`: not
    /// failed) is one that `matches`.
    fn serving_superblock(
        &self,
        states: &[MemberState],
        matches: impl Fn(&Superblock) -> bool,
    ) -> bool {
        self.superblocks.iter().zip(states).any(|(s, state)| {
            *state != MemberState::Failed && s.as_ref().is_some_and(|(_, sb)| matches(sb))
        })
    }

    /// Refuses a newcomer whose superblock (`ours`: this array's) is a serving member's
    /// own: a second name (a hard link) for that member.
    fn refuse_a_serving_members_other_name(
        &self,
        ours: Option<&Superblock>,
        states: &[MemberState],
        new: &std::path::Path,
        name: &str,
    ) -> Result<(), ArrayError> {
        let Some(sb) = ours else {
            return Ok(());
        };
        if self.serving_superblock(states, |m| m.device_uuid == sb.device_uuid) {
            return Err(ArrayError::AlreadyActive {
                path: new.to_path_buf(),
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    /// The error for an array that failed while it was closed (it had not when close
    /// began): the failure is recorded by then, and the caller must hear of it.
    fn failed_while_closing(&self, lost_at_start: bool) -> Option<ArrayError> {
        let lost = self
            .driver
            .engine()
            .lost_error()
            .filter(|_| !lost_at_start)?;
        Some(ArrayError::FailedWhileClosing {
            lost: lost.to_string(),
        })
    }

    /// Writes the bitmap superblock to every member and waits for it; bits may be
    /// cleared from then on if it was written on a whole array (its `events_cleared`
    /// is then current, md's condition for clearing).
    fn write_bitmap_header(
        &mut self,
        header: &[u8; xraid_engine::INTENT_HEADER_BYTES],
        whole: bool,
    ) -> Result<(), ArrayError> {
        self.driver.engine_mut().set_write_intent_header(header);
        self.wait_for_bitmap(|e| !e.write_intent_header_pending())?;
        self.driver.engine_mut().allow_write_intent_clears(whole);
        Ok(())
    }

    /// Runs the driver until `done` holds for the engine's bitmap.
    fn wait_for_bitmap(
        &mut self,
        done: impl Fn(&xraid_engine::Engine) -> bool,
    ) -> Result<(), ArrayError> {
        while !done(self.driver.engine()) {
            self.driver.step()?;
            if !self.driver.io_in_flight() {
                self.driver.tick();
            }
        }
        Ok(())
    }

    /// Cancels a running sync and waits for its units in flight; returns its kind and
    /// the unit below which it was done.
    fn stop_sync(&mut self) -> Result<Option<(SyncKind, u64)>, ArrayError> {
        let Some(progress) = self.driver.engine().sync_progress() else {
            return Ok(None);
        };
        self.driver.engine_mut().cancel_sync();
        while self.driver.engine().sync_progress().is_some() {
            self.driver.step()?;
            if !self.driver.io_in_flight() {
                self.driver.tick();
            }
        }
        Ok(Some((progress.kind, progress.done_below)))
    }

    /// Writes every present member's superblock: a new event count, failed roles marked
    /// faulty, md's `resync_offset` (0 while the array is active, `u64::MAX` when
    /// clean, a checkpoint when a resync was interrupted), and for members being
    /// rebuilt the RECOVERY_OFFSET feature with how far (`recovered_to`, the running
    /// recover's new checkpoint in units, else what the engine says is recorded for
    /// each); a member whose rebuild completed loses both.
    ///
    /// A member that cannot take its superblock is failed, and the others then record
    /// it as faulty (md's answer: its superblock write's completion fails the device).
    /// The error says so when that leaves the array beyond its redundancy.
    fn update_superblocks(
        &mut self,
        resync_offset: u64,
        recovered_to: Option<u64>,
    ) -> Result<(), ArrayError> {
        let mut stale = 0;
        let mut lost_on: Option<String> = None;
        loop {
            // A failed array is never recorded clean, also when it fails during this
            // update: writes its failure cut off may have left parity disagreeing.
            let lost = self.driver.engine().lost_error();
            let resync_offset = if lost.is_some() { 0 } else { resync_offset };
            let (role, error) = match self.write_superblocks(resync_offset, recovered_to)? {
                Round::Written => {
                    if let (Some(error), Some(lost)) = (lost_on, lost) {
                        let states = self.driver.engine().member_states();
                        if states.iter().all(|s| *s == MemberState::Failed) {
                            // No device is left to carry the record.
                            return Err(ArrayError::StateUnrecorded {
                                error,
                                lost: lost.to_string(),
                            });
                        }
                    }
                    self.record_pending = false;
                    return Ok(());
                }
                Round::Stale if stale < STALE_ROUNDS => {
                    stale += 1;
                    self.follow_events();
                    continue;
                }
                Round::Stale => {
                    return Err(ArrayError::MembersChanging {
                        rounds: STALE_ROUNDS + 1,
                    })
                }
                Round::ReplacementRefused(role, error) => {
                    // A replacement is never the only copy of anything: dropped, as
                    // one that fails, and the role's member serves on.
                    let io = std::io::Error::other(error.to_string());
                    self.driver.fail_replacement_on_error(role_idx(role), &io);
                    self.follow_events();
                    continue;
                }
                Round::MemberRefused(role, error) => (role, error),
            };
            // A member being replaced hands its role to the replacement: the next
            // round follows that first, and writes the replacement's superblock as
            // the role's member's (before 2026-11-28 the update gave up instead, and
            // every later one met the same refusal).
            let replaced = self.driver.engine().is_replacing(role_idx(role));
            let io = std::io::Error::other(error.to_string());
            self.driver
                .fail_member_on_error(role_idx(role), FailReason::WriteError, &io);
            if replaced {
                self.follow_events();
            }
            if self.driver.engine().lost_error().is_some() {
                // The members left still record the failure, owing a resync, so that
                // none that failed comes back as current (before 2026-11-29 the round
                // stopped here, some members written and some not). Each refusal
                // fails a member, so this ends.
                lost_on.get_or_insert_with(|| error.to_string());
            }
        }
    }

    /// Whether the engine changed since a round began with `states`: a member's state,
    /// or which replacements are being built (a take-over, a copy finished, a
    /// replacement failed: the array's records of them follow the events).
    fn changed_since(&self, states: &[MemberState]) -> bool {
        let engine = self.driver.engine();
        engine.member_states() != states
            || self
                .replacements
                .iter()
                .enumerate()
                .any(|(r, kept)| kept.is_some() != engine.is_replacing(role_idx(r)))
    }

    /// One round of [`Array::update_superblocks`]: how it ended (the first device
    /// whose superblock or integrity header write failed, and why); errors that are
    /// not one device's are returned as such.
    fn write_superblocks(
        &mut self,
        resync_offset: u64,
        recovered_to: Option<u64>,
    ) -> Result<Round, ArrayError> {
        let utime = self.utime();
        let events = self.freshest.events + 1;
        self.freshest.events = events;
        let states: Vec<MemberState> = self.driver.engine().member_states().to_vec();
        if self.changed_since(&states) {
            // Events not followed yet (a take-over the last pump brought).
            return Ok(Round::Stale);
        }
        // Roles whose member is absent or failed are recorded as faulty, as md does.
        let mut roles = self.freshest.dev_roles.clone();
        for (role, state) in states.iter().enumerate() {
            let present_dev = self.superblocks[role]
                .as_ref()
                .filter(|_| *state != MemberState::Failed)
                .map(|(_, sb)| sb.dev_number as usize);
            // A replacement holds the role's number too, as md records it.
            let replacement_dev = self.replacements[role]
                .as_ref()
                .map(|(_, sb)| sb.dev_number as usize);
            for (dev, r) in roles.iter_mut().enumerate() {
                if usize::from(*r) == role
                    && Some(dev) != present_dev
                    && Some(dev) != replacement_dev
                {
                    *r = ROLE_FAULTY;
                }
            }
        }
        self.freshest.dev_roles = roles.clone();
        // The bad block lists as they stand before the flush below: ranges made good
        // go into the logs only once the writes that made them good are durable, and
        // a write completing while the flush is out is not covered by it. What
        // changes meanwhile stays to be recorded.
        let engine = self.driver.engine();
        let bad_blocks = engine
            .bad_blocks_to_record()
            .then(|| engine.bad_blocks_snapshot());
        // Integrity headers say their tables are as new as these superblocks: true
        // once a barrier flush has written every changed table page.
        let headers = self.integrity && self.driver.flush().is_ok();
        if bad_blocks.is_some() && !headers {
            if let Err(error) = self.driver.flush() {
                // A member that failed on it is recorded by the next round.
                if self.changed_since(&states) {
                    return Ok(Round::Stale);
                }
                return Err(error.into());
            }
        }
        let member_sectors = self.driver.engine().geometry().member_sectors();
        if let Some(bitmap) = self.bitmap.as_mut() {
            // The bitmap's event count goes first: a bitmap behind its superblocks is
            // stale (everything resyncs), one ahead is fine.
            let whole = states.iter().all(|s| *s == MemberState::Active);
            let header = bitmap.header(events, whole);
            self.write_bitmap_header(&header, whole)?;
        }
        for (role, state) in states.iter().enumerate() {
            if *state == MemberState::Failed {
                continue;
            }
            if self.changed_since(&states) {
                return Ok(Round::Stale);
            }
            let Some((path, sb)) = self.superblocks[role].as_mut() else {
                continue;
            };
            sb.events = events;
            sb.utime = utime;
            sb.resync_offset = resync_offset;
            sb.dev_roles = roles.clone();
            // A replacement that took its role is a member like any other.
            sb.feature_map &= !MD_FEATURE_REPLACEMENT;
            if *state == MemberState::Rebuilding {
                sb.feature_map |= MD_FEATURE_RECOVERY_OFFSET;
                // What the engine says is recorded for it (the running walk's last
                // checkpoint, or what it had before the walk started over for a
                // newcomer), or the new checkpoint being recorded now.
                let engine = self.driver.engine();
                let recorded = engine.recovery_recorded(role_idx(role));
                let walk = recovered_to.map_or(recorded, |unit| unit.max(recorded));
                sb.recovery_offset = engine.unit_to_member_sector(walk);
            } else {
                sb.feature_map &= !(MD_FEATURE_RECOVERY_OFFSET | MD_FEATURE_RECOVERY_BITMAP);
                sb.recovery_offset = 0;
            }
            let at = self.driver.engine().device_slot(role_idx(role));
            let checksums = self
                .driver
                .slot(at)
                .expect("active roles have members")
                .checksums_offset_bytes
                .is_some();
            let data = bad_blocks
                .as_ref()
                .map(|(_, lists)| lists.get(at.index()).cloned().unwrap_or_default());
            // Through the driver: a member that stalls fails this at the stall timeout
            // instead of hanging the array's thread.
            let device = Routed::new(&mut self.driver, at);
            if let Some(data) = data {
                let outside = self.bad_outside.get(path).cloned().unwrap_or_default();
                if let Err(error) = crate::badblocks::store(&device, sb, &data, &outside, path) {
                    if self.changed_since(&states) {
                        return Ok(Round::Stale);
                    }
                    return Ok(Round::MemberRefused(role, error));
                }
            }
            let header = headers && checksums;
            if let Err(error) =
                write_header_and_superblock(&device, sb, header, member_sectors, path)
            {
                if self.changed_since(&states) {
                    // The device may have left the role meanwhile (a take-over).
                    return Ok(Round::Stale);
                }
                return Ok(Round::MemberRefused(role, error));
            }
        }
        // Replacements: md's REPLACEMENT and RECOVERY_OFFSET features with how far the
        // copy got, so that `mdadm --examine` says "Replacement device N".
        for role in 0..self.replacements.len() {
            if self.changed_since(&states) {
                return Ok(Round::Stale);
            }
            let Some((path, sb)) = self.replacements[role].as_mut() else {
                continue;
            };
            sb.events = events;
            sb.utime = utime;
            sb.resync_offset = resync_offset;
            sb.dev_roles = roles.clone();
            sb.feature_map |= MD_FEATURE_REPLACEMENT | MD_FEATURE_RECOVERY_OFFSET;
            sb.feature_map &= !MD_FEATURE_RECOVERY_BITMAP;
            crate::badblocks::fresh_superblock(sb);
            // The running walk's record (it starts over, and so does this, when a
            // newcomer joins), or the new checkpoint being recorded now.
            let engine = self.driver.engine();
            let walk = recovered_to.unwrap_or_else(|| engine.recovery_recorded(role_idx(role)));
            sb.recovery_offset = engine.unit_to_member_sector(walk);
            let Some(slot) = self.driver.replacement(role_idx(role)) else {
                continue;
            };
            let checksums = slot.checksums_offset_bytes.is_some();
            let at = self.driver.engine().replacement_slot(role_idx(role));
            let device = Routed::new(&mut self.driver, at);
            let header = headers && checksums;
            if let Err(error) =
                write_header_and_superblock(&device, sb, header, member_sectors, path)
            {
                if self.changed_since(&states) {
                    // The device may have left the role meanwhile (a take-over).
                    return Ok(Round::Stale);
                }
                return Ok(Round::ReplacementRefused(role, error));
            }
        }
        let flushed = self.driver.flush();
        if self.changed_since(&states) {
            // A member failed (on this flush, or while the superblocks were written):
            // what was written shows it serving, so the next round records it.
            return Ok(Round::Stale);
        }
        flushed?;
        if let Some((generation, lists)) = bad_blocks {
            self.driver
                .engine_mut()
                .bad_blocks_recorded(generation, lists);
        }
        Ok(Round::Written)
    }
}

/// Writes a device's superblock, after its integrity header when `header` (the
/// header says its table is as new as the superblock).
fn write_header_and_superblock(
    device: &dyn Member,
    sb: &Superblock,
    header: bool,
    member_sectors: u64,
    path: &std::path::Path,
) -> Result<(), ArrayError> {
    if header {
        crate::integrity::write_header(device, sb, member_sectors, path)?;
    }
    write_superblock(device, sb, path)
}

/// Records what the stripe log's replay at open changed, while it waits for that
/// ([`xraid_engine::Engine::replay_awaits_record`]), before the rings may say its
/// entries are done with: the bad block lists (rows a member refused), and devices
/// that stopped serving since the log's recovery began (a member failed — its ring
/// unreadable, gone, a refusal its log could not take —, a replacement dropped, or a
/// member whose replacement took its role over, [`take_overs`]) as faulty in every
/// other superblock, with a new event count (`found.freshest` follows). Each serving
/// device's log and superblock (otherwise as found: the array stays dirty, a
/// replacement stays one), then a flush of each; the replay flushed every member just
/// before, so the lists speak for what it wrote. A member that cannot take them is
/// failed, as one whose superblock write fails always is, and the others record that
/// in turn; the error says so when that leaves the array beyond its redundancy (a
/// replacement being built that cannot take its superblock fails the open, as at any
/// superblock update). Integrity headers follow the superblocks as at any superblock
/// write: the array stays dirty, and a reopen forgets checksums where writes may have
/// been cut off.
fn record_for_replay(
    driver: &mut ArrayDriver,
    mut found: Found<'_>,
    outside: &std::collections::HashMap<PathBuf, xraid_format::BadBlocks>,
) -> Result<(), ArrayError> {
    let roles = found.superblocks.len();
    loop {
        take_overs(driver, found.reborrow());
        let Found {
            superblocks,
            freshest,
            replacements,
            ..
        } = found.reborrow();
        let engine = driver.engine();
        let serving = engine.serving_devices();
        let (generation, lists) = engine.bad_blocks_snapshot();
        let failures = engine.replay_failures_to_record();
        // Each device found at open with the driver slot it is in now.
        let slots: Vec<usize> = (0..roles)
            .map(|r| engine.device_slot(role_idx(r)).index())
            .chain((0..roles).map(|r| engine.replacement_slot(role_idx(r)).index()))
            .collect();
        let devices: Vec<(usize, &mut (PathBuf, Superblock))> = superblocks
            .iter_mut()
            .chain(replacements.iter_mut())
            .zip(slots)
            .filter_map(|(found, slot)| found.as_mut().map(|d| (slot, d)))
            .collect();
        if failures {
            freshest.events += 1;
            for (slot, (_, sb)) in &devices {
                if !serving[*slot] {
                    if let Some(r) = freshest.dev_roles.get_mut(sb.dev_number as usize) {
                        *r = ROLE_FAULTY;
                    }
                }
            }
        }
        // Until the rings' marker at the replay's end says what an md write since
        // xraid's last one leaves in doubt, these writes must not hide it.
        let utime = crate::members::utime_after(freshest);
        let mut written = Vec::new();
        let mut failed = Vec::new();
        for (slot, (path, sb)) in devices {
            let at = xraid_layout::MemberIdx(slot as u16);
            if !serving[slot] || driver.slot(at).is_none() {
                continue;
            }
            let data = lists.get(slot).cloned().unwrap_or_default();
            let kept = outside.get(path.as_path()).cloned().unwrap_or_default();
            let states_from = failures.then_some((&*freshest, utime));
            // Through the driver, as at any superblock update: a member that stalls
            // fails this at the stall timeout.
            let device = Routed::new(driver, at);
            match record_member(&device, sb, states_from, (&data, &kept), path) {
                Ok(()) => written.push((slot, path.clone())),
                Err(error) => failed.push((slot, error)),
            }
        }
        for (slot, path) in written {
            let device = Routed::new(driver, xraid_layout::MemberIdx(slot as u16));
            if let Err(error) = device.flush() {
                failed.push((slot, crate::scan::io_error(&path, error)));
            }
        }
        if failed.is_empty() {
            let engine = driver.engine_mut();
            engine.replay_failures_recorded(&serving);
            engine.bad_blocks_recorded(generation, lists);
            return Ok(());
        }
        for (slot, error) in failed {
            let role = role_idx(slot % roles);
            if driver.engine().device_slot(role).index() != slot {
                // A replacement being built: as at any superblock update, the error
                // stands (the engine drops a replacement only on its own I/O errors).
                return Err(error);
            }
            let io = std::io::Error::other(error.to_string());
            driver.fail_member_on_error(role, FailReason::WriteError, &io);
            if let Some(lost) = driver.engine().lost_error() {
                return Err(ArrayError::StateUnrecorded {
                    error: error.to_string(),
                    lost: lost.to_string(),
                });
            }
        }
        // The superblocks just written count on devices that failed since: again.
    }
}

/// What the open found and keeps track of as the stripe log's replay changes it:
/// the role members' superblocks, the freshest one (the role table and event count to
/// record), the replacements being built, members being rebuilt and their
/// checkpoints, and devices left out.
struct Found<'a> {
    superblocks: &'a mut [Option<(PathBuf, Superblock)>],
    freshest: &'a mut Superblock,
    replacements: &'a mut [Option<(PathBuf, Superblock)>],
    recovering: &'a mut [Option<u64>],
    left_out: &'a mut Vec<LeftOut>,
}

impl Found<'_> {
    fn reborrow(&mut self) -> Found<'_> {
        Found {
            superblocks: self.superblocks,
            freshest: self.freshest,
            replacements: self.replacements,
            recovering: self.recovering,
            left_out: self.left_out,
        }
    }
}

/// Roles a replacement took over during the open (its member failed while it was
/// built: [`xraid_engine::Event::ReplacementTookOver`]), taken in as
/// [`Array::take_events`] takes them: the replacement holds the role, and the member
/// it replaced is faulty in the role table and left out. It is rebuilt whole: the
/// engine trusts none of it (the take-over forgets its copy's progress), and after
/// the unclean stop the replay follows, its copy's checkpoint does not cover writes
/// that reached the member and not it. Replacements the replay dropped
/// ([`xraid_engine::Event::ReplacementFailed`]) are faulty and left out too.
fn take_overs(driver: &ArrayDriver, found: Found<'_>) {
    let engine = driver.engine();
    for role in 0..found.replacements.len() {
        if engine.device_slot(role_idx(role)) == role_idx(role) {
            if !engine.is_replacing(role_idx(role)) {
                if let Some((path, sb)) = found.replacements[role].take() {
                    if let Some(r) = found.freshest.dev_roles.get_mut(sb.dev_number as usize) {
                        *r = ROLE_FAULTY;
                    }
                    found.left_out.push(LeftOut {
                        path,
                        role: u16::try_from(role).ok(),
                        reason: LeftOutReason::Faulty,
                        superblock: sb,
                    });
                }
            }
            continue;
        }
        let Some((new_path, mut new_sb)) = found.replacements[role].take() else {
            continue;
        };
        new_sb.feature_map &= !(MD_FEATURE_REPLACEMENT | MD_FEATURE_RECOVERY_BITMAP);
        new_sb.feature_map |= MD_FEATURE_RECOVERY_OFFSET;
        new_sb.recovery_offset = 0;
        found.recovering[role] = Some(0);
        if let Some((old_path, old_sb)) = found.superblocks[role].replace((new_path, new_sb)) {
            if let Some(r) = found.freshest.dev_roles.get_mut(old_sb.dev_number as usize) {
                *r = ROLE_FAULTY;
            }
            found.left_out.push(LeftOut {
                path: old_path,
                role: u16::try_from(role).ok(),
                reason: LeftOutReason::Faulty,
                superblock: old_sb,
            });
        }
    }
}

/// One member's part of [`record_for_replay`]: with `states_from` (members' states
/// to record, and the time), its superblock takes the freshest's new event count and
/// role table (its bitmap's event count first, as md moves it: one behind its
/// superblock reads as stale); its bad block log (inside the data area, and outside
/// it as found); then the superblock.
fn record_member(
    member: &dyn Member,
    sb: &mut Superblock,
    states_from: Option<(&Superblock, u64)>,
    (data, outside): (&xraid_format::BadBlocks, &xraid_format::BadBlocks),
    path: &std::path::Path,
) -> Result<(), ArrayError> {
    if let Some((freshest, utime)) = states_from {
        crate::bitmap::follow_events(member, sb, freshest.events, path)?;
        sb.events = freshest.events;
        sb.utime = utime;
        sb.dev_roles = freshest.dev_roles.clone();
    }
    crate::badblocks::store(member, sb, data, outside, path)?;
    write_superblock(member, sb, path)
}

/// Zeroes the stripe-log ring of a device joining the array (an added or returning
/// member, a spare, a replacement). Whatever its ring held is from another life — a
/// device that served this array before keeps entries with its tag, and after a
/// restart that did not see them their seqs may be taken again — and a replay must
/// never find such an entry on it.
pub(crate) fn wipe_log_ring(
    member: &dyn Member,
    sb: &Superblock,
    path: &std::path::Path,
) -> Result<(), ArrayError> {
    let Some((start, sectors)) = log_ring(sb) else {
        return Ok(());
    };
    const PIECE_BYTES: u64 = 1 << 20;
    let zeros = vec![0u8; PIECE_BYTES as usize];
    let (mut at, end) = (start * SECTOR_BYTES, (start + sectors) * SECTOR_BYTES);
    while at < end {
        let len = (end - at).min(PIECE_BYTES) as usize;
        member
            .write_at(&zeros[..len], at)
            .map_err(|source| ArrayError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        at += len as u64;
    }
    Ok(())
}

/// Where a member's stripe-log ring lies: from past its metadata (superblock, bad-block
/// log, aligned to 4 KiB) up to its data, in sectors from the member's start.
pub(crate) fn log_ring(sb: &Superblock) -> Option<(u64, u64)> {
    let bblog_end = if sb.bblog_size > 0 {
        u64::from(sb.bblog_offset) + u64::from(sb.bblog_size)
    } else {
        0
    };
    // An internal bitmap takes the room mdadm keeps for it after the superblock.
    let bitmap_end = match xraid_format::bitmap_start_sector(sb) {
        Some(start) => {
            (start + xraid_format::bitmap_space(sb.size)).saturating_sub(sb.super_offset)
        }
        None => 0,
    };
    let metadata_end = sb.super_offset + bblog_end.max(8).max(bitmap_end);
    let start = metadata_end.next_multiple_of(8);
    let sectors = sb.data_offset.checked_sub(start)?;
    (start > sb.super_offset && sectors > 0).then_some((start, sectors))
}

/// Membership changes while the array is open and served (`xraid add` and `xraid
/// remove` through a server's control socket): the checks and superblock bookkeeping of
/// the offline [`crate::add_member`] and [`crate::remove_member`], done on the open array
/// so that clients go on being served. A newcomer always enters as a hot spare; one
/// meant for a failed role is then put there by [`Array::use_spares`], exactly as a
/// spare steps in when a member fails, so the recover runs in the background through
/// the same machinery.
impl Array {
    /// Adds `new` to the open array: into the lowest failed (or missing) role, where it
    /// is rebuilt in the background, or as a hot spare when no role needs it or `spare`
    /// is asked. Refuses, changing nothing, what [`crate::add_member`] refuses (a member
    /// too small, one of another array without `force`, a missing file without `size`),
    /// a member already active or already a spare, and a member that failed while the
    /// array runs (this process still holds it).
    pub fn add_member_live(
        &mut self,
        new: &std::path::Path,
        size: Option<u64>,
        spare: bool,
        force: bool,
    ) -> Result<crate::Added, ArrayError> {
        use crate::members::{canonical, free_slot, open_newcomer};
        let name = self.name();
        if self.mode != OpenMode::ReadWrite {
            return Err(ArrayError::ReadOnly { name });
        }
        if self.driver.engine().geometry().level() == xraid_layout::Level::Raid0 {
            return Err(ArrayError::SpareRaid0 { name });
        }
        let wanted = canonical(new);
        let states = self.driver.engine().member_states().to_vec();
        // A member that failed while served, coming back: its device is closed first
        // (refused while I/O to it is still in the kernel).
        let returning = self
            .role_of_path(new)
            .filter(|&role| states[role] == MemberState::Failed);
        if let Some(role) = self.role_of_path(new) {
            if let Some(Some(percent)) = self.rebuilding().get(role) {
                return Err(ArrayError::AlreadyRebuilding {
                    path: new.to_path_buf(),
                    name,
                    role,
                    percent: u64::from(*percent),
                    how: "the server rebuilds it in the background",
                });
            }
            if returning.is_none() {
                return Err(ArrayError::AlreadyActive {
                    path: new.to_path_buf(),
                    name,
                });
            }
            if !self.driver.let_go_of_failed(role_idx(role)) {
                return Err(ArrayError::HeldByServer {
                    path: new.to_path_buf(),
                });
            }
        }
        if self.spares.iter().any(|(p, _)| canonical(p) == wanted) {
            return Err(ArrayError::AlreadySpare {
                path: new.to_path_buf(),
                name,
            });
        }
        // Entries of the role table in use: present members (failed ones too, until
        // removed) and spares.
        let taken: Vec<usize> = self
            .superblocks
            .iter()
            .enumerate()
            // A returning member may take its own entry back.
            .filter(|(role, _)| Some(*role) != returning)
            .filter_map(|(_, s)| s.as_ref())
            .map(|(_, sb)| sb.dev_number as usize)
            .chain(self.spares.iter().map(|(_, sb)| sb.dev_number as usize))
            .collect();
        // Before a file is made: nothing to do without a free entry.
        if free_slot(&self.freshest.dev_roles, &taken, None).is_none() {
            return Err(ArrayError::NoFreeSlot { name });
        }
        let geo = *self.driver.engine().geometry();
        let need = crate::integrity::newcomer_need_bytes(
            self.freshest.data_offset,
            geo.member_sectors(),
            self.integrity,
        );
        let block = self.logical_block_bytes();
        let (member, existing) =
            open_newcomer(new, size, need, &self.freshest.set_uuid, force, block)?;
        let ours = existing
            .as_ref()
            .filter(|sb| sb.set_uuid == self.freshest.set_uuid);
        self.refuse_a_serving_members_other_name(ours, &states, new, &name)?;
        let own = ours.map(|sb| sb.dev_number as usize);
        let dev = free_slot(&self.freshest.dev_roles, &taken, own)
            .ok_or_else(|| ArrayError::NoFreeSlot { name: name.clone() })?;
        let mut sb = self.freshest.clone();
        crate::badblocks::fresh_superblock(&mut sb);
        sb.device_uuid = crate::create::random_uuid();
        sb.data_size = crate::integrity::newcomer_data_size(
            member.size_bytes(),
            sb.data_offset,
            self.integrity,
        );
        sb.dev_number = u32::try_from(dev).map_err(|_| ArrayError::NoFreeSlot { name })?;
        // A newcomer holds nothing yet: not being recovered, nor catching up by bitmap.
        sb.feature_map &= !(MD_FEATURE_RECOVERY_OFFSET | xraid_format::MD_FEATURE_RECOVERY_BITMAP);
        sb.recovery_offset = 0;
        sb.events = self.freshest.events + 1;
        sb.utime = self.utime();
        // A member of this array coming back may keep its checksums (see
        // `Homecoming`): read while its area's header still matches its superblock.
        let own_table = match ours {
            Some(old) if self.integrity => {
                crate::integrity::load(&member, old, geo.member_sectors(), new).ok()
            }
            _ => None,
        };
        self.write_newcomer(&member, &sb, new)?;
        // Held open and locked while it waits as a spare (or steps in at once).
        self.hold_spare(new, Some(member));
        self.left_out.retain(|l| canonical(&l.path) != wanted);
        let path = new.to_path_buf();
        if !spare && states.contains(&MemberState::Failed) {
            // A member of this array back for the role it left, while that role is
            // failed, takes it (any other newcomer the lowest failed role); no earlier
            // than the bitmap's last clearing, it catches up on the dirty chunks only
            // (md's re-add).
            let home = ours.and_then(|old| {
                let role = usize::from(old.role()?);
                (states.get(role) == Some(&MemberState::Failed)).then_some((old, role))
            });
            if let Some((old, role)) = home {
                // Not one left mid-rebuild: it holds only part of its role (md then
                // recovers it whole too).
                // Nor one whose log lists bad ranges: its new superblock forgets them,
                // and only a whole rebuild rewrites them.
                let catch_up = old.feature_map & MD_FEATURE_RECOVERY_OFFSET == 0
                    && !crate::badblocks::lists_ranges(old)
                    && old.data_offset == self.freshest.data_offset
                    && self
                        .bitmap
                        .as_ref()
                        .is_some_and(|b| b.bsb.events_cleared <= old.events);
                self.homecoming = Some(Homecoming {
                    path: path.clone(),
                    role,
                    catch_up,
                    table: own_table.filter(|_| catch_up),
                });
            }
            // First in line, so that it takes the lowest failed role (or its own).
            self.spares.insert(0, (path.clone(), sb));
            let used = self.use_spares()?;
            if let Some((_, role)) = used.iter().find(|(p, _)| *p == path) {
                return Ok(crate::Added {
                    path,
                    role: Some(*role),
                });
            }
        } else {
            self.spares.push((path.clone(), sb));
        }
        self.record_role_table()?;
        Ok(crate::Added { path, role: None })
    }

    /// Takes `path` out of the open array for good, as [`crate::remove_member`] does
    /// offline: a member that failed (while served or before), a hot spare, or a member
    /// left out at assembly. Its role-table entry is freed on the present members and
    /// its md superblock erased (unless its file is gone: a dead disk's entry is freed
    /// all the same). An active or rebuilding member is refused (fail it first), as is
    /// a file that is not a member of this array; both change nothing.
    pub fn remove_member_live(&mut self, path: &std::path::Path) -> Result<(), ArrayError> {
        use crate::members::{canonical, erase_superblock, open_unlocked};
        let name = self.name();
        if self.mode != OpenMode::ReadWrite {
            return Err(ArrayError::ReadOnly { name });
        }
        let wanted = canonical(path);
        // Its copy goes on while it is open in the engine: erasing its superblock
        // under it would leave the role to a device no superblock names.
        if let Some(role) = self.replacement_role_of_path(path) {
            return Err(ArrayError::StillReplacing {
                path: path.to_path_buf(),
                role,
            });
        }
        let states = self.driver.engine().member_states().to_vec();
        let role = self.role_of_path(path);
        if role.is_some_and(|r| states[r] != MemberState::Failed) {
            return Err(ArrayError::StillActive {
                path: path.to_path_buf(),
            });
        }
        let spare = self.spares.iter().position(|(p, _)| canonical(p) == wanted);
        let known = role
            .and_then(|r| self.superblocks[r].as_ref())
            .or_else(|| spare.map(|i| &self.spares[i]))
            .map(|(_, sb)| sb.dev_number as usize);
        let not_in_array = || ArrayError::NotInArray {
            path: path.to_path_buf(),
            name: name.clone(),
        };
        // Opened before anything changes: a path that cannot be opened changes nothing,
        // but a failed member or spare whose file is gone still has its entry freed.
        let member = match open_unlocked(path) {
            Ok(member) => Some(member),
            Err(_) if !path.exists() && known.is_some() => None,
            Err(_) if !path.exists() => return Err(not_in_array()),
            Err(e) => return Err(e),
        };
        let dev = match (known, &member) {
            (Some(dev), _) => dev,
            // Not known to the open array: a member left out at assembly, or one that
            // failed and whose role a spare took. Its own superblock names its entry.
            (None, Some(member)) => {
                let sb = crate::scan::read_superblock(member, path)?
                    .filter(|sb| sb.set_uuid == self.freshest.set_uuid)
                    .ok_or_else(not_in_array)?;
                // A second name (a hard link) of a member in service is not removable.
                let states = self.driver.engine().member_states();
                if self.serving_superblock(states, |m| m.device_uuid == sb.device_uuid) {
                    return Err(ArrayError::StillActive {
                        path: path.to_path_buf(),
                    });
                }
                sb.dev_number as usize
            }
            (None, None) => return Err(not_in_array()),
        };
        if let Some(r) = role {
            self.superblocks[r] = None;
            // Out for good: the server need not keep it open for a re-add.
            self.driver.let_go_of_failed(role_idx(r));
        }
        if let Some(i) = spare {
            let (spare_path, _) = self.spares.remove(i);
            self.release_spare(&spare_path);
        }
        self.left_out.retain(|l| canonical(&l.path) != wanted);
        let taken_by_present = self.serving_superblock(&states, |sb| sb.dev_number as usize == dev);
        if let Some(entry) = self.freshest.dev_roles.get_mut(dev) {
            if !taken_by_present {
                *entry = xraid_format::ROLE_SPARE;
            }
        }
        self.record_role_table()?;
        match member {
            Some(member) => erase_superblock(&member, path),
            None => Ok(()),
        }
    }

    /// Whether the superblocks already say what a failed array's close would: every
    /// failed role recorded faulty (a resync is owed: this open wrote them dirty).
    fn recorded_as_failed(&self) -> bool {
        self.dirty && !self.record_pending && !self.failure_unrecorded()
    }

    /// Whether a role's member failed since the superblocks were last written: the
    /// newest role table still gives it the role.
    fn failure_unrecorded(&self) -> bool {
        let states = self.driver.engine().member_states();
        states.iter().enumerate().any(|(role, state)| {
            *state == MemberState::Failed
                && self
                    .freshest
                    .dev_roles
                    .iter()
                    .any(|&r| usize::from(r) == role)
        })
    }

    /// Records a member's failure the superblocks do not show yet, on an array this
    /// open writes to. Offline runs call it between their requests (a server records
    /// its own way, before any reply, spares first), so that each failure is on record
    /// before a later one can go unseen: the member whose failure failed the array then
    /// carries the earlier failures in its own superblock, which is how a forced start
    /// tells it from a member that failed before and missed writes (`force`).
    pub(crate) fn record_new_failures(&mut self) -> Result<(), ArrayError> {
        if self.mode != OpenMode::ReadWrite || !self.dirty || !self.failure_unrecorded() {
            return Ok(());
        }
        self.update_superblocks(0, None)
    }

    /// Writes everything `input` yields into the array from byte `offset` on, as
    /// [`xraid_driver::write_stream`] does, recording each member failure in the
    /// superblocks as soon as a request completes after it.
    pub fn write_stream(
        &mut self,
        offset: u64,
        input: &mut dyn std::io::Read,
        progress: &mut dyn xraid_driver::StreamProgress,
    ) -> Result<u64, ArrayError> {
        xraid_driver::write_stream(self, offset, input, progress)
    }

    /// Writes the role table (with a new event count) to every present member after a
    /// membership change, as md does. The array's state is kept: active (0) once it has
    /// been written, else what its superblocks said at open, so a change to an idle
    /// array leaves it clean (and one not stopped cleanly, still to be resynced).
    fn record_role_table(&mut self) -> Result<(), ArrayError> {
        let resync_offset = if self.dirty {
            0
        } else {
            self.freshest.resync_offset
        };
        self.update_superblocks(resync_offset, None)
    }
}

impl xraid_driver::StreamRunner for Array {
    type Error = ArrayError;
    fn driver(&mut self) -> &mut ArrayDriver {
        &mut self.driver
    }
    fn between_requests(&mut self) -> Result<(), ArrayError> {
        self.record_new_failures()
    }
}

/// Replacing a member while it serves (md's want_replacement): the replacement is
/// opened beside the member, every write goes to both, a recover copies the member
/// onto it, and at the end it takes the role and the member leaves (its entry of the
/// role table turns faulty, as md marks it). The superblocks follow each step.
impl Array {
    /// The engine's events since the last call, with the superblocks brought up to
    /// date for those that change who holds a role (a replacement done, taking over
    /// from a member that failed, or failing itself). Use this rather than the
    /// driver's own `take_events` while replacements may run.
    pub fn take_events(&mut self) -> Result<Vec<xraid_engine::Event>, ArrayError> {
        self.follow_events();
        if self.record_pending && self.mode == OpenMode::ReadWrite {
            self.dirty = true;
            self.update_superblocks(0, None)?;
        }
        Ok(std::mem::take(&mut self.followed))
    }

    /// Takes the engine's new events and keeps the array's records in step with them
    /// (a replacement that took its role over or finished is the role's member now;
    /// one that failed is let go); the events wait for [`Array::take_events`]. Where
    /// the superblocks must say something new, `record_pending` says so.
    fn follow_events(&mut self) {
        use xraid_engine::Event;
        let events = self.driver.take_events();
        let mut changed = false;
        for event in &events {
            match *event {
                Event::ReplacementDone { role, .. } => {
                    let r = role.index();
                    let Some((new_path, mut new_sb)) = self.replacements[r].take() else {
                        continue;
                    };
                    new_sb.feature_map &= !(MD_FEATURE_REPLACEMENT
                        | MD_FEATURE_RECOVERY_OFFSET
                        | MD_FEATURE_RECOVERY_BITMAP);
                    new_sb.recovery_offset = 0;
                    if let Some((old_path, old_sb)) =
                        self.superblocks[r].replace((new_path, new_sb))
                    {
                        self.let_go(old_path, Some(role.0), old_sb);
                    }
                    self.recovering[r] = None;
                    changed = true;
                }
                Event::ReplacementTookOver { role, .. } => {
                    let r = role.index();
                    let Some((new_path, mut new_sb)) = self.replacements[r].take() else {
                        continue;
                    };
                    new_sb.feature_map &= !MD_FEATURE_REPLACEMENT;
                    self.recovering[r] = Some(new_sb.recovery_offset);
                    if let Some((old_path, old_sb)) =
                        self.superblocks[r].replace((new_path, new_sb))
                    {
                        self.let_go(old_path, Some(role.0), old_sb);
                    }
                    // The engine trusts none of it (its copy's progress is forgotten):
                    // a recover that starts for it rebuilds it whole, not from the
                    // bitmap (one already running goes on over every unit).
                    self.recover_from_bitmap = false;
                    if self.driver.engine().sync_progress().is_none() {
                        self.recover_pending = true;
                    }
                    changed = true;
                }
                Event::ReplacementFailed { role, .. } => {
                    if let Some((path, sb)) = self.replacements[role.index()].take() {
                        self.let_go(path, Some(role.0), sb);
                        changed = true;
                    }
                }
                // Members a recover rebuilt are active now: the superblocks say so at
                // once (as md updates them when recovery completes). Until they do, a
                // crash would bring the members back as rebuilding from their last
                // checkpoint, and the stripe log's entries written since — which trust
                // those members' rows — could not be replayed over them.
                Event::SyncFinished {
                    kind: SyncKind::Recover,
                    completed: true,
                    ..
                } => {
                    let states = self.driver.engine().member_states();
                    for (at, state) in self.recovering.iter_mut().zip(states) {
                        if at.is_some() && *state == MemberState::Active {
                            *at = None;
                            changed = true;
                        }
                    }
                }
                _ => {}
            }
        }
        self.followed.extend(events);
        self.record_pending |= changed;
    }

    /// Records a device the array no longer uses (the driver closes it once the kernel
    /// is done with the I/O it was sent).
    fn let_go(&mut self, path: PathBuf, role: Option<u16>, superblock: Superblock) {
        self.left_out.push(LeftOut {
            path,
            role,
            reason: LeftOutReason::Faulty,
            superblock,
        });
    }

    /// Whether the device at `path` is open in the array's driver: a present member
    /// (failed ones too, until let go of), a replacement being built, or one that left
    /// its role while I/O to it is still in the kernel (closed when that completes).
    pub fn holds(&self, path: &std::path::Path) -> bool {
        self.driver.holds(path)
    }

    /// Per role, the replacement being built: its path and how far the copy is, in
    /// percent.
    pub fn replacing(&self) -> Vec<Option<(PathBuf, u8)>> {
        let engine = self.driver.engine();
        let progress = engine.sync_progress();
        self.replacements
            .iter()
            .map(|r| {
                r.as_ref().map(|(path, _)| {
                    let percent = match progress {
                        Some(p) if p.kind == SyncKind::Recover && p.total_units > 0 => {
                            u8::try_from(p.done_below * 100 / p.total_units).unwrap_or(100)
                        }
                        _ => 0,
                    };
                    (path.clone(), percent)
                })
            })
            .collect()
    }

    /// Starts replacing `old`, an active member of the open array, with `new` (md's
    /// want_replacement), while clients go on: the same checks and superblock as the
    /// offline [`crate::replace_member`], then the copy runs in the background (a
    /// running recover restarts to include it; a scrub is cancelled; a resync goes
    /// first). Refused with nothing changed: a read-only array, RAID-0, `old` not active
    /// or being rebuilt, a role already being replaced, `new` active here or a member of
    /// another array (unless `force`), too small, or held by this process.
    pub fn replace_member_live(
        &mut self,
        old: &std::path::Path,
        new: &std::path::Path,
        size: Option<u64>,
        force: bool,
    ) -> Result<crate::Replacing, ArrayError> {
        use crate::members::{canonical, free_slot, open_newcomer};
        let name = self.name();
        if self.mode != OpenMode::ReadWrite {
            return Err(ArrayError::ReadOnly { name });
        }
        let geo = *self.driver.engine().geometry();
        if geo.level() == xraid_layout::Level::Raid0 {
            return Err(ArrayError::ReplaceRaid0 { name });
        }
        let states = self.driver.engine().member_states().to_vec();
        let role = self
            .role_of_path(old)
            .filter(|&r| states[r] != MemberState::Failed)
            .ok_or_else(|| ArrayError::NotActive {
                path: old.to_path_buf(),
                name: name.clone(),
            })?;
        let role16 = u16::try_from(role).map_err(|_| ArrayError::NotActive {
            path: old.to_path_buf(),
            name: name.clone(),
        })?;
        if states[role] != MemberState::Active {
            return Err(ArrayError::ReplaceRebuilding {
                path: old.to_path_buf(),
            });
        }
        if let Some((by, _)) = &self.replacements[role] {
            return Err(ArrayError::AlreadyReplacing {
                role: role16,
                name,
                by: by.clone(),
            });
        }
        let wanted = canonical(new);
        if self.role_of_path(new).is_some() {
            return Err(ArrayError::AlreadyActive {
                path: new.to_path_buf(),
                name,
            });
        }
        if self
            .replacements
            .iter()
            .flatten()
            .any(|(p, _)| canonical(p) == wanted)
        {
            return Err(ArrayError::AlreadyReplacement {
                path: new.to_path_buf(),
                name,
            });
        }
        if self.driver.holds(new) {
            return Err(ArrayError::HeldByServer {
                path: new.to_path_buf(),
            });
        }
        let spare = self.spares.iter().position(|(p, _)| canonical(p) == wanted);
        let taken: Vec<usize> = self
            .superblocks
            .iter()
            .chain(self.replacements.iter())
            .flatten()
            .map(|(_, sb)| sb.dev_number as usize)
            .chain(
                self.spares
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| Some(*i) != spare)
                    .map(|(_, (_, sb))| sb.dev_number as usize),
            )
            .collect();
        let own = spare.map(|i| self.spares[i].1.dev_number as usize);
        let dev = free_slot(&self.freshest.dev_roles, &taken, own)
            .ok_or_else(|| ArrayError::NoFreeSlot { name: name.clone() })?;
        let need = crate::integrity::newcomer_need_bytes(
            self.freshest.data_offset,
            geo.member_sectors(),
            self.integrity,
        );
        // A spare's device is held open and locked: let go of it to open it as the
        // replacement (and hold it again if that fails).
        let spare_path = spare.map(|i| self.spares[i].0.clone());
        if let Some(p) = &spare_path {
            self.release_spare(p);
        }
        let block = self.logical_block_bytes();
        let opened = open_newcomer(new, size, need, &self.freshest.set_uuid, force, block);
        let (member, existing) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                if let Some(p) = &spare_path {
                    self.hold_spare(p, None);
                }
                return Err(e);
            }
        };
        let ours = existing
            .as_ref()
            .filter(|sb| sb.set_uuid == self.freshest.set_uuid);
        self.refuse_a_serving_members_other_name(ours, &states, new, &name)?;
        let mut sb = self.freshest.clone();
        crate::badblocks::fresh_superblock(&mut sb);
        sb.device_uuid = match spare {
            Some(i) => self.spares[i].1.device_uuid,
            None => crate::create::random_uuid(),
        };
        sb.data_size = crate::integrity::newcomer_data_size(
            member.size_bytes(),
            sb.data_offset,
            self.integrity,
        );
        sb.dev_number = u32::try_from(dev).map_err(|_| ArrayError::NoFreeSlot { name })?;
        sb.feature_map &= !MD_FEATURE_RECOVERY_BITMAP;
        sb.feature_map |= MD_FEATURE_REPLACEMENT | MD_FEATURE_RECOVERY_OFFSET;
        sb.recovery_offset = 0;
        sb.events = self.freshest.events + 1;
        sb.utime = self.utime();
        self.write_newcomer(&member, &sb, new)?;
        let slot = slot_for(
            Box::new(member),
            &sb,
            self.stripe_log_sectors(),
            self.bitmap.is_some(),
            self.integrity,
        )
        .ok_or_else(|| ArrayError::TooSmall {
            path: new.to_path_buf(),
            size: 0,
            need: sb.data_offset * SECTOR_BYTES,
        })?;
        let sums = slot.checksums_offset_bytes.is_some();
        self.driver
            .start_replacement(role_idx(role), slot)
            .map_err(|source| ArrayError::Sync {
                kind: "recover",
                source,
            })?;
        let at = self.driver.engine().replacement_slot(role_idx(role));
        self.set_newcomer_table(at, sums);
        // Its log, empty, serves it once it takes the role.
        let room = crate::badblocks::capacity(&sb);
        self.driver
            .engine_mut()
            .set_bad_block_log(at, xraid_format::BadBlocks::new(), room);
        if let Some(i) = spare {
            self.spares.remove(i);
        }
        self.left_out.retain(|l| canonical(&l.path) != wanted);
        if let Some(entry) = self.freshest.dev_roles.get_mut(dev) {
            *entry = role16;
        }
        self.replacements[role] = Some((new.to_path_buf(), sb));
        self.dirty = true;
        self.update_superblocks(0, None)?;
        self.schedule_recover()?;
        Ok(crate::Replacing {
            old: old.to_path_buf(),
            new: new.to_path_buf(),
            role: role16,
        })
    }

    /// Gets a recover going for a newcomer: a running one has restarted to include
    /// it, a resync goes first, a scrub makes way.
    fn schedule_recover(&mut self) -> Result<(), ArrayError> {
        match self.driver.engine().sync_progress().map(|p| p.kind) {
            Some(SyncKind::Recover) => Ok(()),
            Some(SyncKind::Resync) => {
                self.recover_pending = true;
                Ok(())
            }
            Some(_) => {
                self.driver.engine_mut().cancel_sync();
                self.recover_pending = true;
                Ok(())
            }
            None => {
                self.recover_pending = true;
                self.maintain()
            }
        }
    }
}

/// Opens the replacements recorded in the superblocks (found at assembly) and has the
/// engine build them from their checkpoints, when the array is opened to write and
/// their members are active; returns them per role.
fn open_replacements(
    driver: &mut ArrayDriver,
    left_out: &mut Vec<LeftOut>,
    mode: OpenMode,
    log_sectors: Option<u64>,
    bitmap: bool,
    integrity: bool,
) -> Result<Vec<Option<(PathBuf, Superblock)>>, ArrayError> {
    let raid_disks = usize::from(driver.engine().geometry().raid_disks());
    let mut replacements: Vec<Option<(PathBuf, Superblock)>> =
        (0..raid_disks).map(|_| None).collect();
    if mode != OpenMode::ReadWrite {
        return Ok(replacements);
    }
    let found: Vec<(usize, PathBuf, Superblock)> = left_out
        .iter()
        .filter(|l| l.reason == LeftOutReason::Replacement)
        .filter_map(|l| Some((usize::from(l.role?), l.path.clone(), l.superblock.clone())))
        .collect();
    for (role, path, sb) in found {
        if driver.engine().member_states().get(role) != Some(&MemberState::Active) {
            continue;
        }
        let member = FileMember::open(&path, &member_options(true))?;
        let Some(slot) = slot_for(Box::new(member), &sb, log_sectors, bitmap, integrity) else {
            continue;
        };
        let sums = slot.checksums_offset_bytes.is_some();
        driver
            .start_replacement(role_idx(role), slot)
            .map_err(|source| ArrayError::Sync {
                kind: "recover",
                source,
            })?;
        // Its log serves it once it takes the role. A replacement records nothing
        // while it is built (a write it refuses drops it), and its superblocks say
        // its list is empty: the copy rewrites everything.
        let at = driver.engine().replacement_slot(role_idx(role));
        let room = crate::badblocks::capacity(&sb);
        driver
            .engine_mut()
            .set_bad_block_log(at, xraid_format::BadBlocks::new(), room);
        if sums {
            // Copied from its checkpoint on: what it holds below is learned on reads.
            let at = driver.engine().replacement_slot(role_idx(role));
            let blocks = xraid_format::blocks_for(driver.engine().geometry().member_sectors());
            driver.engine_mut().set_checksum_table(
                at,
                Some(std::sync::Arc::new(xraid_engine::ChecksumTable::unknown(
                    blocks,
                ))),
                true,
            );
        }
        left_out.retain(|l| l.path != path);
        replacements[role] = Some((path, sb));
    }
    Ok(replacements)
}

/// A member added back for the failed role it left.
#[derive(Debug)]
struct Homecoming {
    path: PathBuf,
    role: usize,
    /// It may catch up from the bitmap (it left whole, no earlier than the bitmap's
    /// last clearing), keeping `table`, its own checksums.
    catch_up: bool,
    table: Option<crate::integrity::LoadedTable>,
}

/// The driver slot for a device with superblock `sb` joining an array that keeps a
/// stripe log of `log_sectors` (and a bitmap), or none when it has no room for the log.
fn slot_for(
    member: Box<dyn Member>,
    sb: &Superblock,
    log_sectors: Option<u64>,
    bitmap: bool,
    integrity: bool,
) -> Option<MemberSlot> {
    let log_offset_bytes = log_sectors
        .and_then(|need| log_ring(sb).filter(|&(_, n)| n >= need))
        .map(|(start, _)| start * SECTOR_BYTES);
    if log_sectors.is_some() && log_offset_bytes.is_none() {
        return None;
    }
    let checksums_offset_bytes = (integrity
        && crate::integrity::has_room(member.size_bytes(), sb, sb.size))
    .then(|| crate::integrity::table_offset_bytes(sb));
    Some(MemberSlot {
        member: member.into(),
        data_offset_bytes: sb.data_offset * SECTOR_BYTES,
        log_offset_bytes,
        bitmap_offset_bytes: bitmap.then(|| crate::bitmap::offset_bytes(sb)).flatten(),
        checksums_offset_bytes,
    })
}

impl Array {
    /// Where a newcomer's checksum table goes, in integrity mode and if it has room.
    fn newcomer_checksums(&self, member: &dyn Member, sb: &Superblock) -> Option<u64> {
        let member_sectors = self.driver.engine().geometry().member_sectors();
        (self.integrity && crate::integrity::has_room(member.size_bytes(), sb, member_sectors))
            .then(|| crate::integrity::table_offset_bytes(sb))
    }

    /// Gives the device just put in driver slot `slot` an unknown checksum table
    /// (the recover writes every block it holds and so records them), or none.
    fn set_newcomer_table(&mut self, slot: xraid_layout::MemberIdx, sums: bool) {
        if !self.integrity {
            return;
        }
        let blocks = xraid_format::blocks_for(self.driver.engine().geometry().member_sectors());
        let table = sums.then(|| std::sync::Arc::new(xraid_engine::ChecksumTable::unknown(blocks)));
        self.driver
            .engine_mut()
            .set_checksum_table(slot, table, sums);
    }

    /// Writes a newcomer's superblock (a spare, an added member, a replacement), with
    /// the array's write-intent bitmap before it where the array keeps one (md's tools
    /// drop the feature from a member without a bitmap), and makes both durable.
    fn write_newcomer(
        &self,
        member: &dyn Member,
        sb: &Superblock,
        path: &std::path::Path,
    ) -> Result<(), ArrayError> {
        if let Some(image) = self.driver.engine().write_intent_image() {
            let image = image.to_vec();
            crate::bitmap::write_copy(member, sb, &image, path)?;
        }
        wipe_log_ring(member, sb, path)?;
        write_superblock(member, sb, path)?;
        member.flush().map_err(|source| ArrayError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}
