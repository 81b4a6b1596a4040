//! A device of the open array as its metadata helpers see it: a [`Member`] whose
//! reads, writes and flushes go through the array's driver
//! ([`ArrayDriver::device_io`]) rather than straight to the device, so that a device
//! that does not answer fails with an error at the engine's stall timeout instead of
//! hanging the array's thread. The helpers that write superblocks, bad block logs and
//! integrity headers take any member; offline (no array open) they get the device
//! itself.

use std::io;
use std::sync::{Mutex, PoisonError};

use xraid_driver::{ArrayDriver, DeviceIo};
use xraid_layout::MemberIdx;
use xraid_member::{DirectFd, Member};

/// The device in one driver slot, its I/O through the driver.
pub(crate) struct Routed<'a> {
    /// A lock only to be a `Member` (shared, thread-safe I/O); one thread uses it.
    driver: Mutex<&'a mut ArrayDriver>,
    slot: MemberIdx,
    name: String,
    size: u64,
}

impl<'a> Routed<'a> {
    /// The device in driver slot `slot` (a role's member or a replacement).
    pub(crate) fn new(driver: &'a mut ArrayDriver, slot: MemberIdx) -> Routed<'a> {
        let (name, size) = driver.slot(slot).map_or_else(
            || (format!("slot {}", slot.0), 0),
            |s| (s.member.name().to_owned(), s.member.size_bytes()),
        );
        Routed {
            driver: Mutex::new(driver),
            slot,
            name,
            size,
        }
    }

    fn io(&self, io: DeviceIo<'_>, offset: u64) -> io::Result<()> {
        let mut driver = self.driver.lock().unwrap_or_else(PoisonError::into_inner);
        driver.device_io(self.slot, io, offset)
    }
}

impl std::fmt::Debug for Routed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routed")
            .field("slot", &self.slot)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Member for Routed<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.io(DeviceIo::Read(buf), offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.io(DeviceIo::Write(buf), offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.io(DeviceIo::Flush, 0)
    }

    /// None: its I/O is the driver's to send.
    fn direct_fd(&self) -> Option<DirectFd> {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    use xraid_driver::BackendChoice;
    use xraid_engine::{EngineConfig, MemberState, Nanos};
    use xraid_format::ROLE_FAULTY;
    use xraid_layout::{Level, MemberIdx};
    use xraid_member::{FaultPlan, MemberFault};

    use crate::assemble::member_options;
    use crate::{assemble, create, Array, CreateOptions, OpenMode};

    const MIB: u64 = 1 << 20;
    const CHUNK_BYTES: u64 = 64 << 10;
    /// Far longer than the test may take: an update that waits the stall out fails it.
    const STALL: Duration = Duration::from_secs(600);
    const STALL_TIMEOUT: Duration = Duration::from_millis(300);

    /// An array of `level` over `disks` files in `dir` (16 MiB each), with or without a
    /// write-intent bitmap.
    fn create_on(dir: &Path, level: Level, disks: usize, bitmap: bool) -> Vec<PathBuf> {
        let members: Vec<PathBuf> = (0..disks).map(|i| dir.join(format!("d{i}"))).collect();
        let opts = CreateOptions {
            chunk_bytes: CHUNK_BYTES,
            size_bytes: Some(16 * MIB),
            backend: BackendChoice::Threads,
            bitmap,
            ..CreateOptions::new(level, "stall", members.clone())
        };
        create(&opts, &mut |_, _| {}).expect("create");
        members
    }

    /// A RAID-5 of three files in `dir`, with or without a write-intent bitmap.
    fn raid5(dir: &Path, bitmap: bool) -> Vec<PathBuf> {
        create_on(dir, Level::Raid5, 3, bitmap)
    }

    /// A fault: `role` stalls for `stall_for` after its first `after` I/Os.
    fn stall(role: u16, after: u64, stall_for: Duration) -> MemberFault {
        MemberFault {
            role,
            plan: FaultPlan {
                stall_after: Some(after),
                stall_for,
                ..FaultPlan::default()
            },
        }
    }

    /// Opens the array of `members` with `role` stalling for `stall_for` after its
    /// first `after` I/Os, the engine's stall timeout cut to [`STALL_TIMEOUT`].
    fn open_stalling(members: &[PathBuf], role: u16, after: u64, stall_for: Duration) -> Array {
        open_with(members, &[stall(role, after, stall_for)])
    }

    /// Opens the array of `members` with `faults`, the engine's stall timeout cut to
    /// [`STALL_TIMEOUT`].
    fn open_with(members: &[PathBuf], faults: &[MemberFault]) -> Array {
        let assembled = assemble(members, &member_options(true)).expect("assemble");
        let mut array = Array::open_with_faults(
            assembled,
            OpenMode::ReadWrite,
            BackendChoice::Threads,
            faults,
        )
        .expect("open");
        let engine = array.driver().engine_mut();
        let config = engine.config();
        engine.set_config(EngineConfig {
            stall_timeout: Nanos(u64::try_from(STALL_TIMEOUT.as_nanos()).expect("fits")),
            ..config
        });
        array
    }

    /// The first array sector of a chunk whose data role 2 holds.
    fn first_chunk_on_role_2(array: &Array) -> u64 {
        let geo = array.driver_ref().engine().geometry();
        let chunk_sectors = u64::from(geo.chunk_sectors());
        (0..geo.array_sectors() / chunk_sectors)
            .map(|c| c * chunk_sectors)
            .find(|&sector| {
                let pos = geo.stripe_pos(sector);
                geo.stripe_map(pos.stripe).data_member(pos.data_index) == MemberIdx(2)
            })
            .expect("role 2 holds data")
    }

    /// Opens the array with role 2 stalling (for [`STALL`]) after its first 200 I/Os,
    /// the engine's stall timeout cut to [`STALL_TIMEOUT`], then reads from role 2
    /// alone until its next I/O would stall: stalled, and not yet failed.
    fn open_with_role_2_about_to_stall(members: &[PathBuf]) -> Array {
        let mut array = open_stalling(members, 2, 200, STALL);
        // A chunk whose data is on role 2: each read of it is one I/O there.
        let on_role_2 = first_chunk_on_role_2(&array);
        let role_2 = |array: &Array| {
            array
                .driver_ref()
                .member(MemberIdx(2))
                .expect("role 2 is there")
                .member
                .clone()
        };
        let mut buf = vec![0u8; 4096];
        while role_2(&array).hold_for().is_none() {
            array
                .driver()
                .read_at(&mut buf, on_role_2 * 512)
                .expect("role 2 answers until its stall");
        }
        assert_eq!(
            array.driver_ref().engine().member_states()[2],
            MemberState::Active,
            "stalled, not failed yet"
        );
        array
    }

    /// A superblock update (here the first, before the first write) with a member
    /// stalled and not yet failed returns at the stall timeout, not at the stall's
    /// end: the stalled member is failed, the others record it as faulty, and the
    /// array serves on. Before, the update wrote each superblock straight to its
    /// device on the array's thread and hung there for the whole stall (and for good
    /// on a device that never answers), the engine's clock stopped with it.
    fn a_superblock_update_fails_a_stalled_member_at_the_stall_timeout(bitmap: bool) {
        let dir = tempfile::tempdir().expect("tempdir");
        let members = raid5(dir.path(), bitmap);
        let mut array = open_with_role_2_about_to_stall(&members);
        let start = Instant::now();
        array
            .begin_writes()
            .expect("the update goes on without the member");
        assert!(
            start.elapsed() < STALL / 4,
            "took {:?}: the update waited the stall out",
            start.elapsed()
        );
        assert_eq!(
            array.driver_ref().engine().member_states()[2],
            MemberState::Failed,
            "the stalled member is failed"
        );
        let failures = array.driver().take_failures();
        assert_eq!(failures.len(), 1, "only the stalled member: {failures:?}");
        assert_eq!(failures[0].member, MemberIdx(2));

        // The array serves on, degraded.
        let data: Vec<u8> = (0..256 << 10).map(|i: u32| (i * 7 + 3) as u8).collect();
        array.driver().write_at(&data, 0).expect("write");
        let mut back = vec![0u8; data.len()];
        array.driver().read_at(&mut back, 0).expect("read");
        assert!(back == data, "what was written reads back");
        array.close().expect("close");

        // The others' superblocks record it as faulty.
        let after = assemble(&members[..2], &member_options(false)).expect("assemble");
        let stalled = crate::read_superblock(
            &xraid_member::FileMember::open(&members[2], &member_options(false)).expect("open d2"),
            &members[2],
        )
        .expect("read d2")
        .expect("d2 keeps its superblock");
        assert_eq!(
            after.superblock.dev_roles[stalled.dev_number as usize], ROLE_FAULTY,
            "recorded as faulty in the others"
        );
        assert!(after.roles[2].is_none(), "role 2 is missing");
    }

    #[test]
    fn a_superblock_write_to_a_stalled_member_fails_it_at_the_stall_timeout() {
        a_superblock_update_fails_a_stalled_member_at_the_stall_timeout(false);
    }

    #[test]
    fn a_bitmap_header_write_to_a_stalled_member_fails_it_at_the_stall_timeout() {
        a_superblock_update_fails_a_stalled_member_at_the_stall_timeout(true);
    }

    /// A RAID-0 member that is slow (a 2 s stall, past the 300 ms stall timeout) is one
    /// the engine waits for (it cannot do without it): a superblock update must wait for
    /// it too, not fail it and lose the array.
    #[test]
    fn a_slow_member_the_array_cannot_do_without_is_waited_for_by_an_update() {
        let dir = tempfile::tempdir().expect("tempdir");
        let members = create_on(dir.path(), Level::Raid0, 2, false);
        let mut array = open_stalling(&members, 1, 0, Duration::from_secs(2));
        // The engine's own I/O to it: waited for (excused), not failed.
        let mut buf = vec![0u8; 2 * CHUNK_BYTES as usize];
        array
            .driver()
            .read_at(&mut buf, 0)
            .expect("the engine waits out the slow member");
        assert_eq!(
            array.driver_ref().engine().member_states()[1],
            MemberState::Active
        );
        // A superblock update to it: the same slowness.
        let result = array.begin_writes();
        assert_eq!(
            array.driver_ref().engine().member_states()[1],
            MemberState::Active,
            "a slow RAID-0 member was failed by the superblock update: {result:?}"
        );
        result.expect("the update waits for the member the array cannot do without");
    }

    /// `replace_member_live` of stalled role 2 by a blank `n2` while a read of role 2
    /// waits on it, with the stall timeout passed first (`late`: found by a tick
    /// inside the update's first device I/O) or not (found while role 2's own
    /// superblock write waits). The engine fails role 2 and hands its role to the
    /// replacement in the middle of the update: n2 must hold role 2 afterwards, as a
    /// member being built, with its own superblock as current as the others'.
    fn take_over_during_an_update(late: bool) {
        let dir = tempfile::tempdir().expect("tempdir");
        let members = raid5(dir.path(), false);
        let n2 = dir.path().join("n2");
        let len = std::fs::metadata(&members[2]).expect("d2").len();
        std::fs::File::create(&n2)
            .and_then(|f| f.set_len(len))
            .expect("n2");
        let read_sb = |p: &Path| {
            let options = xraid_member::OpenOptions {
                write: false,
                direct: xraid_member::DirectMode::Auto,
                lock: false,
            };
            let member = xraid_member::FileMember::open(p, &options).expect("open");
            crate::read_superblock(&member, p)
                .expect("read")
                .expect("superblock")
        };
        let d2 = read_sb(&members[2]);
        let mut array = open_with_role_2_about_to_stall(&members);
        let on_role_2 = first_chunk_on_role_2(&array);
        let buf = array.driver().engine_mut().buffers_mut().alloc(4096);
        array
            .driver()
            .submit(xraid_engine::RequestKind::Read, on_role_2, 8, Some(buf));
        array.driver().pump(false).expect("pump");
        if late {
            std::thread::sleep(STALL_TIMEOUT + Duration::from_millis(100));
        }
        array
            .replace_member_live(&members[2], &n2, None, true)
            .expect("the replacement is taken");
        let states = array.driver_ref().engine().member_states().to_vec();
        assert_eq!(
            states,
            [
                MemberState::Active,
                MemberState::Active,
                MemberState::Rebuilding
            ],
            "the replacement took role 2 over and is being built"
        );
        assert_eq!(array.role_path(2), Some(n2.as_path()), "n2 holds role 2");
        let on_n2 = read_sb(&n2);
        assert_ne!(
            on_n2.device_uuid, d2.device_uuid,
            "the replacement's device carries the old member's superblock (events {}, feature_map {:#x})",
            on_n2.events, on_n2.feature_map
        );
        assert_ne!(
            on_n2.feature_map & xraid_format::MD_FEATURE_RECOVERY_OFFSET,
            0,
            "n2 says how far it is built"
        );
        let d0 = read_sb(&members[0]);
        assert_eq!(d0.events, on_n2.events, "n2 is as current as role 0");
    }

    /// Before (a review of 80bff24), the update wrote d2's superblock onto n2: after
    /// a crash the empty copy would pass for the member.
    #[test]
    fn a_take_over_during_an_update_does_not_write_the_old_superblock_on_the_replacement() {
        take_over_during_an_update(true);
    }

    /// Before (a review of 12d6f40), the update blamed role 2's refused write on the
    /// device holding role 2 by then, and failed the replacement.
    #[test]
    fn a_take_over_during_the_old_members_own_write_keeps_the_replacement() {
        take_over_during_an_update(false);
    }

    /// RAID-5 of three: role 1 slow (2 s per I/O, past the stall timeout) and role 2
    /// stalled with a read waiting on it. Role 1's superblock write waits; meanwhile
    /// the engine fails role 2, which makes role 1 the member the array cannot do
    /// without: its write is then waited for, not timed out (a review of 12d6f40
    /// found it failed, and the array lost).
    #[test]
    fn a_member_that_becomes_indispensable_during_its_write_is_waited_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let members = raid5(dir.path(), false);
        let faults = [stall(1, 0, Duration::from_secs(2)), stall(2, 200, STALL)];
        let mut array = open_with(&members, &faults);
        let on_role_2 = first_chunk_on_role_2(&array);
        let mut read = vec![0u8; 4096];
        let role_2 = |array: &Array| {
            array
                .driver_ref()
                .member(MemberIdx(2))
                .expect("role 2")
                .member
                .hold_for()
        };
        while role_2(&array).is_none() {
            array
                .driver()
                .read_at(&mut read, on_role_2 * 512)
                .expect("role 2 answers until its stall");
        }
        let buf = array.driver().engine_mut().buffers_mut().alloc(4096);
        array
            .driver()
            .submit(xraid_engine::RequestKind::Read, on_role_2, 8, Some(buf));
        array.driver().pump(false).expect("pump");
        let result = array.begin_writes();
        let states = array.driver_ref().engine().member_states().to_vec();
        assert_eq!(states[1], MemberState::Active, "role 1 failed: {result:?}");
        assert_eq!(states[2], MemberState::Failed, "role 2 failed at its stall");
        result.expect("recorded");
    }

    /// Reads the superblock of the file at `path` (opened without a lock).
    fn superblock_of(path: &Path) -> xraid_format::Superblock {
        let options = xraid_member::OpenOptions {
            write: false,
            direct: xraid_member::DirectMode::Auto,
            lock: false,
        };
        let member = xraid_member::FileMember::open(path, &options).expect("open");
        crate::read_superblock(&member, path)
            .expect("read")
            .expect("superblock")
    }

    /// A RAID-1 of eleven files in `dir`, opened with roles 1 to 9 set to stall after
    /// their first `100 + role - 1` I/Os (for [`STALL`]), the engine's stall timeout
    /// [`STALL_TIMEOUT`]; `n10`, a blank file, replaces role 10 and is dropped at once
    /// (a change the superblocks must record, followed by the next `take_events`).
    /// Then nine writes are sent, the first to stall on role 1, the next on role 2,
    /// and so on: the engine sends each once the one before it is done, which is when
    /// the role it stalled on is failed. So once the pump runs, roles 1 to 9 fail one
    /// at a time, a stall timeout apart, and each round of a superblock update (which
    /// writes the roles in order) meets the next one failing before it reaches role
    /// 10. Returns the array, the members and n10.
    fn raid1_with_staggered_stalls(dir: &Path) -> (Array, Vec<PathBuf>, PathBuf) {
        const HEALTHY: u64 = 100;
        let members = create_on(dir, Level::Raid1, 11, false);
        let n10 = dir.join("n10");
        let len = std::fs::metadata(&members[10]).expect("d10").len();
        std::fs::File::create(&n10)
            .and_then(|f| f.set_len(len))
            .expect("n10");
        let faults: Vec<MemberFault> = (1..10u16)
            .map(|role| stall(role, HEALTHY + u64::from(role) - 1, STALL))
            .collect();
        let mut array = open_with(&members, &faults);
        array
            .replace_member_live(&members[10], &n10, None, true)
            .expect("the replacement is taken");
        assert!(
            array.driver().engine_mut().fail_replacement(MemberIdx(10)),
            "n10 is dropped"
        );
        let stalls_next = |array: &Array, role: u16| {
            array
                .driver_ref()
                .member(MemberIdx(role))
                .expect("a member")
                .member
                .hold_for()
                .is_some()
        };
        // Every write goes to each copy: all count alike, until role 1 is at its stall.
        let block = vec![7u8; 4096];
        let mut writes = 0;
        while !stalls_next(&array, 1) {
            array.driver().write_at(&block, 0).expect("write");
            writes += 1;
            assert!(writes <= HEALTHY, "role 1 never reached its stall");
        }
        for role in 2..10 {
            assert!(!stalls_next(&array, role), "role {role} stalls too early");
        }
        for role in 1..10u64 {
            let buf = array.driver().engine_mut().buffers_mut().alloc(4096);
            array.driver().submit(
                xraid_engine::RequestKind::Write,
                role * CHUNK_BYTES / 512,
                8,
                Some(buf),
            );
            array.driver().pump(false).expect("pump");
        }
        assert!(
            array
                .driver_ref()
                .engine()
                .member_states()
                .iter()
                .all(|s| *s == MemberState::Active),
            "none failed yet"
        );
        (array, members, n10)
    }

    /// A change the superblocks must record (here a dropped replacement), followed by
    /// an update that gives up (its rounds meet a member failing, one after another,
    /// more often than it tries: `MembersChanging`), stays to be recorded: the next
    /// `take_events` writes it. Before (a review of 12d6f40) the update followed the
    /// change and forgot it when it failed: role 10's superblock went on naming n10
    /// as its replacement.
    #[test]
    fn a_change_an_update_gave_up_on_is_recorded_by_the_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut array, members, n10) = raid1_with_staggered_stalls(dir.path());
        let dev_n10 = superblock_of(&n10).dev_number as usize;
        let role_of_n10 = || superblock_of(&members[10]).dev_roles[dev_n10];
        assert_eq!(
            role_of_n10(),
            10,
            "n10 is recorded as role 10's replacement"
        );
        let given_up = array.take_events();
        assert!(
            matches!(given_up, Err(crate::ArrayError::MembersChanging { .. })),
            "the update gives up: {given_up:?}"
        );
        let states = array.driver_ref().engine().member_states().to_vec();
        assert_eq!(states[10], MemberState::Active, "{states:?}");
        assert_eq!(role_of_n10(), 10, "not recorded yet");
        array.take_events().expect("the next update writes it");
        assert_eq!(
            role_of_n10(),
            ROLE_FAULTY,
            "the dropped replacement is recorded"
        );
    }
}
