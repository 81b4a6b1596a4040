//! Reads that skip the array's thread: a read whose every piece falls on a member the
//! engine counts as active goes straight from the calling thread to that member, as
//! md's RAID-5 sends chunk-aligned reads past its stripe cache (`chunk_aligned_read`).
//!
//! The engine still owns everything else. Any doubt sends the read back to it: a
//! member missing, failed or being rebuilt where the read falls, the stripe log being
//! replayed, rows the engine knows to be unknown anywhere in the array (a member
//! rebuilt over them holds what parity gave: only the engine's reads refuse them), a
//! member without kernel descriptors (in-memory or fault-injecting), an
//! I/O error (which the engine then repairs from redundancy, as for its own reads), or
//! in integrity mode a block that disagrees with its checksum (the engine reads it
//! again, finds the same, and repairs it).
//!
//! Why it is safe: reads of active members never need a stripe's lock (they cannot
//! see half-updated parity), and the array's thread publishes which members are
//! active before it acknowledges any write, so a read sent after a write's ack never
//! goes to a member that failed before that write.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use xraid_engine::{ChecksumTable, MemberState, Verdict, SECTOR_BYTES};
use xraid_layout::Geometry;
use xraid_member::Member;

use crate::ArrayDriver;

/// A handle other threads read an array through; cheap to clone.
#[derive(Debug, Clone)]
pub struct ReadBypass {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    geo: Geometry,
    /// Off while the engine must see every read (stripe log replay, data lost).
    enabled: AtomicBool,
    roles: Vec<RoleView>,
}

#[derive(Debug, Default)]
struct RoleView {
    /// The member in the role, where its data area starts, and its checksums
    /// (integrity mode), while it is active.
    member: RwLock<Option<DeviceView>>,
    active: AtomicBool,
}

#[derive(Debug)]
struct DeviceView {
    member: Arc<dyn Member>,
    data_offset: u64,
    checksums: Option<Arc<ChecksumTable>>,
}

impl ReadBypass {
    /// Reads `buf.len()` bytes at array byte `offset` straight from the members.
    /// `false` when the read must go through the engine instead (nothing about the
    /// array changed; `buf` may hold part of the data).
    pub fn read(&self, buf: &mut [u8], offset: u64) -> bool {
        let s = &*self.shared;
        let len = buf.len() as u64;
        if !s.enabled.load(Ordering::Acquire)
            || !offset.is_multiple_of(SECTOR_BYTES)
            || !len.is_multiple_of(SECTOR_BYTES)
            || offset
                .checked_add(len)
                .is_none_or(|end| end > s.geo.array_sectors() * SECTOR_BYTES)
        {
            return false;
        }
        let mut sector = offset / SECTOR_BYTES;
        let mut done = 0usize;
        while done < buf.len() {
            let copies = s.geo.copies(sector);
            // RAID-1/10: the first copy, the one the engine reads while a unit may
            // still await its resync; the others only through the engine.
            let Some(place) = copies.as_slice().first() else {
                return false;
            };
            let remaining = (buf.len() - done) as u64 / SECTOR_BYTES;
            let sectors = copies.run_sectors.min(remaining);
            let bytes = (sectors * SECTOR_BYTES) as usize;
            let role = &s.roles[place.member.index()];
            let guard = role.member.read().unwrap_or_else(PoisonError::into_inner);
            let Some(device) = guard.as_ref() else {
                return false;
            };
            if !role.active.load(Ordering::Acquire) {
                return false;
            }
            // In integrity mode a piece that starts or ends inside a 4 KiB block is
            // left to the engine, which reads whole blocks to check them.
            let block = xraid_format::BLOCK_SECTORS;
            if device.checksums.is_some()
                && (!place.sector.is_multiple_of(block) || !sectors.is_multiple_of(block))
            {
                return false;
            }
            let at = device.data_offset + place.sector * SECTOR_BYTES;
            let piece = &mut buf[done..done + bytes];
            if read_member(device.member.as_ref(), piece, at).is_err() {
                return false;
            }
            if let Some(table) = &device.checksums {
                if table.verify(place.sector, piece) != Verdict::Good {
                    return false;
                }
            }
            done += bytes;
            sector += sectors;
        }
        true
    }
}

/// Reads from the member's O_DIRECT descriptor where the buffer, length and offset
/// suit it (as the driver does, so the page cache is not mixed in), else from its
/// page-cache descriptor.
fn read_member(member: &dyn Member, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let Some(fds) = member.direct_fd() else {
        return Err(io::ErrorKind::Unsupported.into());
    };
    let aligned = |v: usize| v.is_multiple_of(fds.align);
    let direct = aligned(buf.as_ptr() as usize)
        && aligned(buf.len())
        && u64::try_from(fds.align).is_ok_and(|a| offset.is_multiple_of(a));
    pread_exact(if direct { fds.fd } else { fds.buffered_fd }, buf, offset)
}

fn pread_exact(fd: RawFd, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        let at = libc::off_t::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the whole call,
        // and `fd` stays open: the caller holds the member (an Arc) that owns it.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), at) };
        match n {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            n => {
                let n = n as usize;
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

impl ArrayDriver {
    /// The handle other threads read this array through.
    pub fn read_bypass(&self) -> ReadBypass {
        self.bypass.clone()
    }

    /// Tells the bypass which device serves each role and whether it is active now.
    /// Call it after the engine has run and before acknowledging writes, so that no
    /// read after an ack goes to a member that failed (or was replaced) before it.
    pub fn publish_bypass(&self) {
        let s = &*self.bypass.shared;
        let engine = &self.engine;
        for (role, view) in s.roles.iter().enumerate() {
            let role_idx = xraid_layout::MemberIdx(role as u16);
            // The device now serving the role (a replacement that took it over, a spare
            // that stepped in), if it can be read from another thread.
            let device = self
                .member(role_idx)
                .filter(|slot| slot.member.direct_fd().is_some());
            let checksums = engine.checksum_table(engine.device_slot(role_idx));
            let same = {
                let current = view.member.read().unwrap_or_else(PoisonError::into_inner);
                match (current.as_ref(), device) {
                    (Some(d), Some(slot)) => {
                        Arc::ptr_eq(&d.member, &slot.member)
                            && match (&d.checksums, checksums) {
                                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                                (None, None) => true,
                                _ => false,
                            }
                    }
                    (None, None) => true,
                    _ => false,
                }
            };
            if !same {
                // Inactive first, so no reader pairs the new device with the old state.
                view.active.store(false, Ordering::Release);
                *view.member.write().unwrap_or_else(PoisonError::into_inner) =
                    device.map(|slot| DeviceView {
                        member: Arc::clone(&slot.member),
                        data_offset: slot.data_offset_bytes,
                        checksums: checksums.cloned(),
                    });
            }
            let active = engine.member_states()[role] == MemberState::Active;
            if view.active.load(Ordering::Relaxed) != active {
                view.active.store(active, Ordering::Release);
            }
        }
        // Unknown rows are checked by the engine's reads only: a member rebuilt over
        // them holds what parity gave, which a read straight from it would return.
        let whole_enough =
            engine.lost_error().is_none() && !engine.log_recovering() && !engine.has_unknown_rows();
        s.enabled.store(whole_enough, Ordering::Release);
    }
}

/// A bypass for `geo` with no member yet.
pub(crate) fn new_bypass(geo: Geometry) -> ReadBypass {
    ReadBypass {
        shared: Arc::new(Shared {
            geo,
            enabled: AtomicBool::new(false),
            roles: (0..geo.raid_disks()).map(|_| RoleView::default()).collect(),
        }),
    }
}
