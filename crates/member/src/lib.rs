//! Member devices: regular files and block devices (O_DIRECT where the file system
//! allows it, an exclusive flock so that two xraid processes never drive one member),
//! in-memory members for tests and the simulator, and a wrapper that injects faults.
//!
//! **Architecture invariant:** this crate knows nothing about arrays. A member is a
//! flat range of bytes with positional, thread-safe reads and writes; the driver may
//! also ask for its kernel descriptors to submit I/O itself.

mod device;
mod direct;
mod error;
mod fault;
mod file;
mod lock;
mod memory;
mod options;
mod overlay;
mod power;
mod sparse;

pub use error::MemberError;
pub use fault::{with_hold_waited, FaultPlan, FaultyMember, MemberFault};
pub use file::FileMember;
pub use memory::MemoryMember;
pub use options::{DirectFd, DirectMode, OpenOptions};
pub use overlay::OverlayMember;
pub use power::{cut_machine_power, PowerOff};
pub use sparse::{data_ranges, zero_without_writing};

/// A member device. Positional I/O at byte offsets; thread-safe reads/writes (&self).
pub trait Member: std::fmt::Debug + Send + Sync {
    /// A name for messages (the path).
    fn name(&self) -> &str;

    /// The member's size in bytes, as found when it was opened.
    fn size_bytes(&self) -> u64;

    /// Reads exactly `buf.len()` bytes at `offset`, whatever the alignment. A read that
    /// runs past the end fails with [`std::io::ErrorKind::UnexpectedEof`].
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;

    /// Writes all of `buf` at `offset`, whatever the alignment.
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;

    /// Makes completed writes durable (fdatasync).
    fn flush(&self) -> std::io::Result<()>;

    /// Writes all of `buf` at `offset`, durable when this returns (a FUA write); other
    /// writes need not be. By default a write and a flush.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.write_at(buf, offset)?;
        self.flush()
    }

    /// Kernel descriptors for the io_uring/threads driver, or `None` for members that
    /// are not kernel files (in-memory): the driver then calls
    /// [`Member::read_at`]/[`Member::write_at`]/[`Member::flush`] inline.
    fn direct_fd(&self) -> Option<DirectFd>;

    /// Descriptors the driver may read through in the kernel, for a member whose
    /// other I/O is done inline: an overlay's device, whose reads the driver then
    /// passes to [`Member::lay_over_read`]. By default [`Member::direct_fd`].
    fn read_fd(&self) -> Option<DirectFd> {
        self.direct_fd()
    }

    /// Whether a read done in the kernel through [`Member::read_fd`] must be handed to
    /// [`Member::lay_over_read`] before anyone sees it.
    fn lays_over_reads(&self) -> bool {
        false
    }

    /// Lays what the member holds beyond its device (an overlay's writes kept in
    /// memory) over `buf`, just read from the device at `offset` in the kernel.
    fn lay_over_read(&self, buf: &mut [u8], offset: u64) {
        let _ = (buf, offset);
    }

    /// The device's logical block size: the smallest write it takes without reading
    /// around it first (512 for a file; 4096 for a 4Kn disk). An array advertises the
    /// largest of its members' to clients, as md does for its own block device.
    fn logical_block_bytes(&self) -> u32 {
        512
    }

    /// How long an I/O sent to the member now would go unanswered, for a member that
    /// is slow or stalls on purpose (a fault-injecting one with a `latency=`, or past
    /// its `stall-after`); `None` (any real device): it answers as it can. The driver
    /// then holds the I/O aside and performs it once that time is up (or completes it
    /// as gone once the member is failed), within [`with_hold_waited`], so that it does
    /// not sleep again: the thread that drives the whole array must not wait on one
    /// member, or every other member's I/O waits too, several I/Os to the slow member
    /// take their latencies one after another instead of at once, and the engine's
    /// clock stops, so the other members' I/Os look stalled.
    fn hold_for(&self) -> Option<std::time::Duration> {
        None
    }

    /// The parts of `offset..offset + length` that may hold data; the rest surely reads
    /// as zeros (the holes of a sparse file). A member that cannot tell reports the
    /// whole range as data.
    fn data_ranges(&self, offset: u64, length: u64) -> Vec<std::ops::Range<u64>> {
        std::iter::once(offset..offset.saturating_add(length)).collect()
    }

    /// Makes `offset..offset + length` read as zeros: by freeing the range where the
    /// device can (a punched hole), else by writing zeros.
    fn zero_range(&self, offset: u64, length: u64) -> std::io::Result<()> {
        sparse::write_zeros(|buf, at| self.write_at(buf, at), offset, length)
    }
}

#[cfg(test)]
mod tests;
