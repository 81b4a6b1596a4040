//! A member that keeps its writes in memory over a device it only reads: what an array
//! opened to read only needs to run its stripe log's recovery — replaying parity,
//! writing markers, recording bad blocks — without changing a byte on disk. Reads see
//! those writes, sector by sector; nothing reaches the device, and a flush has nothing
//! to do.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::{DirectFd, Member};

const SECTOR: u64 = 512;

/// A member whose writes stay in memory, over `inner`, which is only read.
#[derive(Debug)]
pub struct OverlayMember {
    inner: Box<dyn Member>,
    /// Sectors written, by number.
    written: Mutex<BTreeMap<u64, [u8; SECTOR as usize]>>,
}

impl OverlayMember {
    pub fn new(inner: Box<dyn Member>) -> OverlayMember {
        OverlayMember {
            inner,
            written: Mutex::new(BTreeMap::new()),
        }
    }

    /// How many bytes were written (and are held in memory).
    pub fn written_bytes(&self) -> u64 {
        self.written().len() as u64 * SECTOR
    }

    /// A panic in another thread cannot leave the map invalid (at worst part of a
    /// write, which a real disk can produce too), so poisoning is ignored.
    fn written(&self) -> MutexGuard<'_, BTreeMap<u64, [u8; SECTOR as usize]>> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check_range(&self, offset: u64, len: usize) -> io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size_bytes() => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: past the end of the member", self.name()),
            )),
        }
    }
}

impl Member for OverlayMember {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_range(offset, buf.len())?;
        let end = offset + buf.len() as u64;
        let first = offset / SECTOR;
        let last = end.div_ceil(SECTOR);
        let written = self.written();
        // Most reads touch nothing written: straight from the device.
        if written.range(first..last).next().is_none() {
            drop(written);
            return self.inner.read_at(buf, offset);
        }
        // Whole sectors around the request, then what was written laid over them.
        let mut whole = vec![0u8; usize::try_from((last - first) * SECTOR).unwrap_or(0)];
        let base = first * SECTOR;
        let device_end = (last * SECTOR).min(self.size_bytes());
        let from_device = usize::try_from(device_end - base).unwrap_or(0);
        drop(written);
        self.inner.read_at(&mut whole[..from_device], base)?;
        for (&sector, data) in self.written().range(first..last) {
            let at = usize::try_from((sector - first) * SECTOR).unwrap_or(0);
            whole[at..at + SECTOR as usize].copy_from_slice(data);
        }
        let skip = usize::try_from(offset - base).unwrap_or(0);
        buf.copy_from_slice(&whole[skip..skip + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_range(offset, buf.len())?;
        let end = offset + buf.len() as u64;
        let first = offset / SECTOR;
        let last = end.div_ceil(SECTOR);
        for sector in first..last {
            let start = sector * SECTOR;
            let mut data = [0u8; SECTOR as usize];
            // A sector the write covers only in part keeps the rest as it reads now.
            if start < offset || start + SECTOR > end {
                self.read_at(&mut data, start)?;
            }
            let lo = offset.max(start);
            let hi = end.min(start + SECTOR);
            let (from, to) = ((lo - offset) as usize, (hi - offset) as usize);
            let into = (lo - start) as usize;
            data[into..into + (to - from)].copy_from_slice(&buf[from..to]);
            self.written().insert(sector, data);
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    /// None: writes must stay in memory, and a reader from another thread (the
    /// server's bypass) would not see them.
    fn direct_fd(&self) -> Option<DirectFd> {
        None
    }

    /// The device's, where none of the range was written here: most reads then go to
    /// the kernel as a plain member's do — in parallel across members, and under the
    /// driver's stall timeout — rather than one at a time on the array's thread.
    fn read_fd_for(&self, offset: u64, length: u64) -> Option<DirectFd> {
        let first = offset / SECTOR;
        let last = offset.saturating_add(length).div_ceil(SECTOR);
        if self.written().range(first..last).next().is_some() {
            return None;
        }
        self.inner.direct_fd()
    }

    fn logical_block_bytes(&self) -> u32 {
        self.inner.logical_block_bytes()
    }

    fn hold_for(&self) -> Option<std::time::Duration> {
        self.inner.hold_for()
    }

    /// The device's data, and every sector written here.
    fn data_ranges(&self, offset: u64, length: u64) -> Vec<std::ops::Range<u64>> {
        let end = offset.saturating_add(length);
        let mut ranges = self.inner.data_ranges(offset, length);
        let first = offset / SECTOR;
        let last = end.div_ceil(SECTOR);
        for &sector in self.written().range(first..last).map(|(s, _)| s) {
            let lo = (sector * SECTOR).max(offset);
            let hi = ((sector + 1) * SECTOR).min(end);
            ranges.push(lo..hi);
        }
        ranges.sort_by_key(|r| r.start);
        let mut merged: Vec<std::ops::Range<u64>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::SharedMember;
    use crate::MemoryMember;

    fn overlay_over(bytes: &[u8]) -> (OverlayMember, std::sync::Arc<MemoryMember>) {
        let inner = std::sync::Arc::new(MemoryMember::new("m", bytes.len() as u64));
        inner.write_at(bytes, 0).expect("fill");
        let shared = SharedMember(inner.clone());
        (OverlayMember::new(Box::new(shared)), inner)
    }

    #[test]
    fn writes_are_read_back_and_never_reach_the_device() {
        let original: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        let (overlay, device) = overlay_over(&original);
        // Unaligned, across a sector boundary.
        overlay.write_at(&[0xAB; 700], 300).expect("write");
        let mut got = vec![0u8; 8192];
        overlay.read_at(&mut got, 0).expect("read");
        let mut want = original.clone();
        want[300..1000].fill(0xAB);
        assert_eq!(got, want);
        // A read inside the written range, and one that misses it.
        let mut part = [0u8; 10];
        overlay.read_at(&mut part, 995).expect("read");
        assert_eq!(&part[..5], &[0xAB; 5]);
        assert_eq!(&part[5..], &original[1000..1005]);
        overlay.read_at(&mut part, 4000).expect("read");
        assert_eq!(&part[..], &original[4000..4010]);
        assert_eq!(device.snapshot(), original, "the device is untouched");
        assert_eq!(overlay.written_bytes(), 1024);
        overlay.flush().expect("flush");
    }

    #[test]
    fn written_sectors_count_as_data() {
        let (overlay, _) = overlay_over(&[0u8; 4096]);
        overlay.write_at(&[1; 100], 1100).expect("write");
        // The device reports all of it as data; the written sectors merge into it.
        assert_eq!(overlay.data_ranges(0, 4096), vec![0..4096]);
        assert_eq!(overlay.data_ranges(1000, 200), vec![1000..1200]);
    }

    /// Reads that touch nothing written here may go to the device's descriptors in
    /// the kernel; a read touching a written sector (even one byte of it) may not.
    #[test]
    fn reads_go_to_the_kernel_only_where_nothing_was_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m");
        crate::FileMember::create_sparse(&path, 1 << 20).expect("file");
        let options = crate::OpenOptions {
            write: false,
            direct: crate::DirectMode::Off,
            lock: false,
        };
        let file = crate::FileMember::open(&path, &options).expect("open");
        let overlay = OverlayMember::new(Box::new(file));
        assert!(overlay.direct_fd().is_none(), "writes stay inline");
        assert!(
            overlay.read_fd_for(0, 1 << 20).is_some(),
            "nothing written yet"
        );
        overlay.write_at(&[7; 512], 8192).expect("write");
        assert!(
            overlay.read_fd_for(0, 8192).is_some(),
            "ends where the write starts"
        );
        assert!(
            overlay.read_fd_for(8192 + 512, 4096).is_some(),
            "starts past it"
        );
        assert!(overlay.read_fd_for(8191, 1).is_some(), "the sector before");
        assert!(
            overlay.read_fd_for(8192 + 511, 1).is_none(),
            "its last byte"
        );
        assert!(overlay.read_fd_for(4096, 8192).is_none(), "across it");
    }

    #[test]
    fn io_past_the_end_fails() {
        let (overlay, _) = overlay_over(&[0u8; 1024]);
        assert!(overlay.write_at(&[1; 10], 1020).is_err());
        let mut buf = [0u8; 10];
        assert!(overlay.read_at(&mut buf, 1020).is_err());
    }
}
