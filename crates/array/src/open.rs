//! An assembled array opened for I/O, and the superblock bookkeeping md does around
//! writes: the array is marked active (dirty) with a new event count before its first
//! write, and clean again when it is closed, so that members left out meanwhile are
//! recognised as stale when they return.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use xraid_driver::{ArrayDriver, BackendChoice, MemberSlot};
use xraid_engine::MemberState;
use xraid_format::{Superblock, ROLE_FAULTY};
use xraid_layout::SECTOR_BYTES;
use xraid_member::{FaultyMember, Member, MemberFault};

use crate::assemble::role_idx;
use crate::create::write_superblock;
use crate::{ArrayError, Assembled, LeftOut};

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
}

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
        let mut slots = Vec::with_capacity(assembled.roles.len());
        let mut superblocks = Vec::with_capacity(assembled.roles.len());
        for role in assembled.roles {
            match role {
                Some(found) => {
                    let role = slots.len();
                    let mut member: Box<dyn Member> = Box::new(found.member);
                    if let Some(f) = faults.iter().find(|f| usize::from(f.role) == role) {
                        member = Box::new(FaultyMember::new(member, f.plan.clone()));
                    }
                    slots.push(Some(MemberSlot {
                        member,
                        data_offset_bytes: found.superblock.data_offset * SECTOR_BYTES,
                    }));
                    superblocks.push(Some((found.path, found.superblock)));
                }
                None => {
                    slots.push(None);
                    superblocks.push(None);
                }
            }
        }
        let driver = ArrayDriver::new(assembled.geometry, slots, backend)?;
        Ok(Array {
            driver,
            superblocks,
            freshest: assembled.superblock,
            left_out: assembled.left_out,
            mode,
            dirty: false,
        })
    }

    pub fn driver(&mut self) -> &mut ArrayDriver {
        &mut self.driver
    }

    pub fn name(&self) -> String {
        self.freshest.name()
    }

    /// Marks the array active before the first write: a new event count on every present
    /// member, missing members recorded as faulty. Called once; later calls do nothing.
    pub fn begin_writes(&mut self) -> Result<(), ArrayError> {
        debug_assert_eq!(self.mode, OpenMode::ReadWrite);
        if self.dirty {
            return Ok(());
        }
        self.dirty = true;
        self.update_superblocks(false)
    }

    /// Flushes and, if the array was written, marks it clean with a new event count.
    pub fn close(mut self) -> Result<(), ArrayError> {
        if !self.dirty {
            return Ok(());
        }
        self.driver.flush()?;
        self.update_superblocks(true)
    }

    fn update_superblocks(&mut self, clean: bool) -> Result<(), ArrayError> {
        let utime = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let events = self.freshest.events + 1;
        self.freshest.events = events;
        let states: Vec<MemberState> = self.driver.engine().member_states().to_vec();
        // Roles whose member is absent or failed are recorded as faulty, as md does.
        let mut roles = self.freshest.dev_roles.clone();
        for (role, state) in states.iter().enumerate() {
            let present_dev = self.superblocks[role]
                .as_ref()
                .filter(|_| *state == MemberState::Active)
                .map(|(_, sb)| sb.dev_number as usize);
            for (dev, r) in roles.iter_mut().enumerate() {
                if usize::from(*r) == role && Some(dev) != present_dev {
                    *r = ROLE_FAULTY;
                }
            }
        }
        self.freshest.dev_roles = roles.clone();
        for (role, state) in states.iter().enumerate() {
            if *state != MemberState::Active {
                continue;
            }
            let Some((path, sb)) = self.superblocks[role].as_mut() else {
                continue;
            };
            sb.events = events;
            sb.utime = utime;
            sb.resync_offset = if clean { u64::MAX } else { 0 };
            sb.dev_roles = roles.clone();
            let slot = self
                .driver
                .member(role_idx(role))
                .expect("active roles have members");
            write_superblock(slot.member.as_ref(), sb, path)?;
        }
        self.driver.flush()?;
        Ok(())
    }
}
