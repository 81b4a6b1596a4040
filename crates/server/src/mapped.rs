//! A plain-file export's pages mapped into the server's address space, so that a long
//! read to a client on this machine costs the server one copy (the page cache's pages
//! into the socket) instead of two (file into a buffer, buffer into the socket).
//!
//! Our own code never reads the mapping: only the kernel does, inside send(2). That is
//! what makes the mapping safe to keep while someone else may truncate the file or the
//! medium may fail: a page the kernel cannot have while copying from user memory makes
//! that system call fail with EFAULT (or stop short), where a load of ours would raise
//! SIGBUS and take the whole server down. Before a reply's header goes out its range is
//! faulted in with MADV_POPULATE_READ, so such an error is usually found while the reply
//! can still say so.

use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::zero_copy::SendFileError;

/// A read-only shared mapping of a whole file (or block device), unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    addr: NonNull<libc::c_void>,
    len: usize,
    page: usize,
    /// Cleared once the kernel says it has no MADV_POPULATE_READ (before Linux 5.14):
    /// the pages are then faulted in by send(2) itself.
    populate: AtomicBool,
    /// Whether mincore(2) tells the truth about this file's pages: since Linux 5.2 it
    /// does only for a file the process owns or may write, and calls every page
    /// cached otherwise. Where it cannot be trusted every range is faulted in.
    mincore_tells: bool,
}

/// Exports larger than this are not mapped. The page tables of a mapping grow by
/// about 2 MiB per GiB read (4 KiB pages), and stay as long as the export: a
/// multi-terabyte device read end to end would pin gigabytes of them.
const MAX_MAPPED_BYTES: u64 = 64 << 30;

// SAFETY: the mapping is an address range, not data we read: it is only ever handed
// to the kernel (madvise, sendmsg, munmap), which may do so from any thread at once.
unsafe impl Send for Mapping {}
// SAFETY: as for Send; no method takes `&mut self` or reads through the pointer.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of the open file `fd` from its start. `None` where the file
    /// cannot be mapped (empty, a file system without mmap, no address space left):
    /// its reads are then copied as before.
    /// `writable`: the file was opened for writing (so the process may write it).
    pub(crate) fn new(fd: RawFd, len: u64, writable: bool) -> Option<Mapping> {
        if len > MAX_MAPPED_BYTES {
            return None;
        }
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        // SAFETY: a new mapping chosen by the kernel (null hint, no MAP_FIXED), so no
        // existing memory is touched; the descriptor is open; the result is checked.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: sysconf takes no pointers.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        Some(Mapping {
            addr: NonNull::new(addr)?,
            len,
            page,
            populate: AtomicBool::new(true),
            mincore_tells: writable || owned(fd),
        })
    }

    /// The address of `offset..offset + len` in the mapping, or `None` where that
    /// range is not all inside it.
    fn range(&self, offset: u64, len: usize) -> Option<*const u8> {
        let start = usize::try_from(offset).ok()?;
        if start.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: `start` is within the mapping (checked above), so the pointer stays
        // inside the one allocation the mapping is.
        Some(unsafe { self.addr.as_ptr().cast::<u8>().add(start) }.cast_const())
    }

    /// Makes sure the pages of a range can be had before a reply's header goes out: an
    /// error here (EFAULT: beyond the file's end now, or the medium failed) is the
    /// file's, and the reply can still say so. Pages all in the page cache cannot fail
    /// (the file's end is checked by the caller), so only a range with some not there
    /// is faulted in, which reads them. Only for ranges known to hold data: on tmpfs,
    /// faulting a hole in fills it.
    pub(crate) fn populate(&self, offset: u64, len: usize) -> io::Result<()> {
        if !self.populate.load(Ordering::Relaxed) || len == 0 {
            return Ok(());
        }
        let misalign = (offset % self.page as u64) as usize;
        let (offset, len) = (offset - misalign as u64, len + misalign);
        let Some(start) = self.range(offset, len) else {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        };
        if self.mincore_tells && self.resident(start, len) {
            return Ok(());
        }
        // SAFETY: madvise only looks at the page tables of the range, which lies inside
        // our mapping (range() checked it) and starts on a page boundary.
        let r = unsafe { libc::madvise(start.cast_mut().cast(), len, libc::MADV_POPULATE_READ) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EINVAL) {
            self.populate.store(false, Ordering::Relaxed);
            return Ok(());
        }
        Err(e)
    }

    /// Whether every page of the page-aligned range at `start` is in the page cache
    /// (mincore(2): a look at the page tables and the cache, much cheaper than
    /// faulting pages that are there already). False where it cannot be told.
    fn resident(&self, start: *const u8, len: usize) -> bool {
        const PAGES_AT_ONCE: usize = 512;
        let mut flags = [0u8; PAGES_AT_ONCE];
        let mut done = 0;
        while done < len {
            let piece = (len - done).min(PAGES_AT_ONCE * self.page);
            let pages = piece.div_ceil(self.page);
            // SAFETY: the range (inside our mapping: the caller took `start` and `len`
            // from range()) starts on a page boundary; the kernel writes one byte per
            // page of it, `pages` ≤ PAGES_AT_ONCE, into `flags`.
            let r = unsafe {
                libc::mincore(
                    start.add(done).cast_mut().cast(),
                    piece,
                    flags.as_mut_ptr().cast(),
                )
            };
            if r != 0 || flags[..pages].iter().any(|f| f & 1 == 0) {
                return false;
            }
            done += piece;
        }
        true
    }

    /// Sends `header`, then `len` bytes of the file from `offset`, on the socket, the
    /// data copied by the kernel straight from the page cache; with `populate`, the
    /// range is faulted in first (left out where the caller just did). An error of the
    /// file's found before any of it (the header included) went out is `FileEarly`;
    /// after, `FileLate`.
    pub(crate) fn send(
        &self,
        sock: RawFd,
        header: &[u8],
        offset: u64,
        len: usize,
        populate: bool,
    ) -> Result<(), SendFileError> {
        let Some(data) = self.range(offset, len) else {
            return Err(SendFileError::FileEarly(io::Error::from_raw_os_error(
                libc::EFAULT,
            )));
        };
        if populate {
            self.populate(offset, len)
                .map_err(SendFileError::FileEarly)?;
        }
        let mut head = header;
        let mut done = 0usize;
        while !head.is_empty() || done < len {
            let iov = [
                libc::iovec {
                    iov_base: head.as_ptr().cast_mut().cast(),
                    iov_len: head.len(),
                },
                libc::iovec {
                    // SAFETY: `done` ≤ `len`, so this stays inside the range checked
                    // by range() above.
                    iov_base: unsafe { data.add(done) }.cast_mut().cast(),
                    iov_len: len - done,
                },
            ];
            let skip = usize::from(head.is_empty());
            // SAFETY: msghdr is plain data; zeroed is its empty value.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov[skip..].as_ptr().cast_mut();
            msg.msg_iovlen = 2 - skip;
            // SAFETY: the kernel only reads the iovecs (which live until the call
            // returns) and the memory they address: `head` is a live slice, and the
            // data range is inside our mapping, which outlives the call; a page of it
            // that cannot be had fails the call with EFAULT (the kernel's copy from
            // user memory is fixed up), it raises no signal. `sock` is this
            // connection's socket.
            let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
            if n < 0 {
                let e = io::Error::last_os_error();
                let sent_any = head.len() < header.len() || done > 0;
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EFAULT) if sent_any => return Err(SendFileError::FileLate(e)),
                    Some(libc::EFAULT) => return Err(SendFileError::FileEarly(e)),
                    _ => return Err(SendFileError::Socket(e)),
                }
            }
            let mut n = n as usize;
            if n == 0 {
                return Err(SendFileError::Socket(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "socket closed",
                )));
            }
            let from_head = n.min(head.len());
            head = &head[from_head..];
            n -= from_head;
            done += n;
        }
        Ok(())
    }
}

/// Whether the process owns the open file `fd` (or is root, which counts as owning
/// every file for mincore's purposes).
fn owned(fd: RawFd) -> bool {
    // SAFETY: fstat writes one stat into the zeroed local it is given; geteuid takes
    // no pointers.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let euid = libc::geteuid();
        libc::fstat(fd, &mut st) == 0 && (euid == 0 || st.st_uid == euid)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range is exactly the mapping made in new(), and nothing can use it
        // any more (drop has the only reference).
        unsafe { libc::munmap(self.addr.as_ptr(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    use std::os::unix::net::UnixStream;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
    }

    fn file_with(data: &[u8]) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let path = dir.path().join("f.img");
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .expect("create");
        f.write_all_at(data, 0).expect("fill");
        (dir, f)
    }

    /// Sends on a TCP connection over loopback (or a Unix socket pair) while a thread
    /// reads the other end: what arrived, and how the send ended.
    fn sent_on(
        unix: bool,
        map: &Mapping,
        header: &[u8],
        offset: u64,
        len: usize,
    ) -> (Vec<u8>, Result<(), String>) {
        let (a, mut b): (Box<dyn AsRawFd>, Box<dyn Read + Send>) = if unix {
            let (a, b) = UnixStream::pair().expect("pair");
            (Box::new(a), Box::new(b))
        } else {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let b = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
            let (a, _) = listener.accept().expect("accept");
            (Box::new(a), Box::new(b))
        };
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).expect("read");
            got
        });
        let result = map
            .send(a.as_raw_fd(), header, offset, len, true)
            .map_err(|e| format!("{e:?}"));
        drop(a);
        (reader.join().expect("reader"), result)
    }

    fn sent(
        map: &Mapping,
        header: &[u8],
        offset: u64,
        len: usize,
    ) -> (Vec<u8>, Result<(), String>) {
        sent_on(false, map, header, offset, len)
    }

    #[test]
    fn a_range_goes_out_after_its_header_byte_for_byte() {
        let data = pattern(3 << 20);
        let (_dir, f) = file_with(&data);
        let map = Mapping::new(f.as_raw_fd(), data.len() as u64, true).expect("map");
        // Larger than a socket buffer, from an offset off any page boundary.
        let (got, result) = sent(&map, b"HEADER", 12_345, 2 << 20);
        result.expect("sent");
        assert_eq!(&got[..6], b"HEADER");
        assert!(got[6..] == data[12_345..12_345 + (2 << 20)]);
        let (got, result) = sent_on(true, &map, b"", 0, 4096);
        result.expect("sent");
        assert!(got == data[..4096]);
        let (got, result) = sent_on(true, &map, b"HEADER", 4095, 1 << 20);
        result.expect("sent");
        assert!(got[6..] == data[4095..4095 + (1 << 20)]);
    }

    #[test]
    fn a_file_cut_short_under_the_mapping_is_an_error_not_a_signal() {
        let data = pattern(1 << 20);
        let (_dir, f) = file_with(&data);
        let map = Mapping::new(f.as_raw_fd(), data.len() as u64, true).expect("map");
        f.set_len(64 * 1024).expect("truncate");
        // Found before anything went out: the reply can still be an error.
        let (got, result) = sent(&map, b"HEADER", 512 * 1024, 4096);
        assert!(result.is_err_and(|e| e.contains("FileEarly")), "{got:?}");
        assert!(got.is_empty());
        // Without the pages faulted in first, send(2) meets the end of the file itself
        // and stops short (TCP sends what it copied before): still an error, and the
        // process lives on.
        map.populate.store(false, Ordering::Relaxed);
        let (got, result) = sent(&map, b"HEADER", 32 * 1024, 256 * 1024);
        assert!(
            result.is_err_and(|e| e.contains("FileLate")),
            "{}",
            got.len()
        );
        assert!(got.len() >= 6 && got.len() < 6 + 256 * 1024);
        assert!(got[6..] == data[32 * 1024..32 * 1024 + got.len() - 6]);
    }

    #[test]
    fn data_sent_before_the_file_fails_makes_the_error_late_even_without_a_header() {
        let data = pattern(1 << 20);
        let (_dir, f) = file_with(&data);
        let map = Mapping::new(f.as_raw_fd(), data.len() as u64, true).expect("map");
        f.set_len(64 * 1024).expect("truncate");
        map.populate.store(false, Ordering::Relaxed);
        let (got, result) = sent(&map, b"", 0, 256 * 1024);
        assert!(!got.is_empty(), "what the file still has went out");
        assert!(
            result.is_err_and(|e| e.contains("FileLate")),
            "{}",
            got.len()
        );
    }

    #[test]
    fn a_range_outside_the_mapping_is_refused() {
        let data = pattern(8192);
        let (_dir, f) = file_with(&data);
        let map = Mapping::new(f.as_raw_fd(), data.len() as u64, true).expect("map");
        let (got, result) = sent(&map, b"H", 4096, 8192);
        assert!(result.is_err_and(|e| e.contains("FileEarly")));
        assert!(got.is_empty());
        assert!(Mapping::new(f.as_raw_fd(), 0, true).is_none());
        assert!(Mapping::new(f.as_raw_fd(), MAX_MAPPED_BYTES + 1, true).is_none());
    }
}
