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
        self.inner.read_at(buf, offset)?;
        self.lay_over_read(buf, offset);
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

    /// The device's: reads go to the kernel as a plain member's do — in parallel
    /// across members, and under the driver's stall timeout, so a device that hangs
    /// fails rather than blocks the array's thread — and what was written here is laid
    /// over them when they complete ([`Member::lay_over_read`]).
    fn read_fd(&self) -> Option<DirectFd> {
        self.inner.direct_fd()
    }

    fn lays_over_reads(&self) -> bool {
        true
    }

    fn lay_over_read(&self, buf: &mut [u8], offset: u64) {
        let end = offset.saturating_add(buf.len() as u64);
        for (&sector, data) in self.written().range(offset / SECTOR..end.div_ceil(SECTOR)) {
            let lo = (sector * SECTOR).max(offset);
            let hi = ((sector + 1) * SECTOR).min(end);
            let (from, to) = (
                (lo - sector * SECTOR) as usize,
                (hi - sector * SECTOR) as usize,
            );
            let at = (lo - offset) as usize;
            buf[at..at + (to - from)].copy_from_slice(&data[from..to]);
        }
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

    /// Reads go to the device's descriptors in the kernel, and what was written here
    /// is laid over them after: the same bytes as a read done inline, for reads that
    /// miss the written sectors, end or start at them, or cover part of them.
    #[test]
    fn a_read_in_the_kernel_with_the_writes_laid_over_it_reads_as_inline() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m");
        let original: Vec<u8> = (0..65536u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &original).expect("file");
        let options = crate::OpenOptions {
            write: false,
            direct: crate::DirectMode::Off,
            lock: false,
        };
        let file = crate::FileMember::open(&path, &options).expect("open");
        let overlay = OverlayMember::new(Box::new(file));
        assert!(overlay.direct_fd().is_none(), "writes stay inline");
        assert!(overlay.lays_over_reads());
        assert!(overlay.read_fd().is_some(), "reads go to the kernel");
        // What the kernel reads through those descriptors: the file's bytes.
        let device = std::fs::File::open(&path).expect("open");
        overlay.write_at(&[7; 512], 8192).expect("write");
        overlay.write_at(&[9; 1000], 20_000).expect("write");
        for (offset, len) in [
            (0, 65536),
            (0, 8192),
            (8192 + 512, 4096),
            (8191, 1),
            (8192 + 511, 1),
            (4096, 8192),
            (19_999, 1002),
            (20_500, 3),
        ] {
            let mut inline = vec![0u8; len];
            overlay.read_at(&mut inline, offset).expect("read inline");
            let mut kernel = vec![0u8; len];
            device.read_exact_at(&mut kernel, offset).expect("pread");
            overlay.lay_over_read(&mut kernel, offset);
            assert_eq!(kernel, inline, "{len} bytes at {offset}");
        }
        let mut all = vec![0u8; 65536];
        overlay.read_at(&mut all, 0).expect("read");
        let mut want = original.clone();
        want[8192..8704].fill(7);
        want[20_000..21_000].fill(9);
        assert_eq!(all, want);
    }

    #[test]
    fn io_past_the_end_fails() {
        let (overlay, _) = overlay_over(&[0u8; 1024]);
        assert!(overlay.write_at(&[1; 10], 1020).is_err());
        let mut buf = [0u8; 10];
        assert!(overlay.read_at(&mut buf, 1020).is_err());
    }
}
