//! In-memory members, for tests and the simulator.

use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{DirectFd, Member};

/// A member held in memory: a fixed-size byte vector behind a mutex.
#[derive(Debug)]
pub struct MemoryMember {
    name: String,
    size: u64,
    data: Mutex<Vec<u8>>,
}

impl MemoryMember {
    /// A zero-filled member of `size_bytes` bytes.
    ///
    /// # Panics
    /// If `size_bytes` does not fit in memory's address space.
    pub fn new(name: impl Into<String>, size_bytes: u64) -> MemoryMember {
        let len = usize::try_from(size_bytes).expect("a memory member fits in memory");
        MemoryMember {
            name: name.into(),
            size: size_bytes,
            data: Mutex::new(vec![0; len]),
        }
    }

    /// A copy of the member's contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data().clone()
    }

    /// A panic in another thread cannot leave the bytes invalid (at worst a torn write,
    /// which a real disk can produce too), so poisoning is ignored.
    fn data(&self) -> MutexGuard<'_, Vec<u8>> {
        self.data.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The index range `offset..offset + len`, if it lies inside the member.
    fn range(&self, offset: u64, len: usize) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        (end as u64 <= self.size).then_some(start..end)
    }
}

impl Member for MemoryMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn size_bytes(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let range = self.range(offset, buf.len()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: read past the end of the member", self.name),
            )
        })?;
        buf.copy_from_slice(&self.data()[range]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let range = self.range(offset, buf.len()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: write past the end of the member", self.name),
            )
        })?;
        self.data()[range].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn direct_fd(&self) -> Option<DirectFd> {
        None
    }
}
