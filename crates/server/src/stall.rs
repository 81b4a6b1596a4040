//! Clients that stop taking their replies. A per-call send timeout cannot find them:
//! a TCP receiver that reads nothing still opens its window a little now and then
//! (it packs its queue tighter), so every send moves a few bytes and starts its clock
//! again. This watches each connection's socket instead, whatever path its replies
//! take (our buffers, the mapped file, splices, TLS), and says when one has had
//! replies waiting unsent (its window closed) for [`STALL_LIMIT`] while its client
//! took almost none of them.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// How long replies may wait with the client taking almost nothing.
pub(crate) const STALL_LIMIT: Duration = Duration::from_secs(30);
/// How often the sockets are looked at.
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(5);
/// What a TCP client must take within [`STALL_LIMIT`] to count as reading: more than
/// the trickle a receiver that reads nothing lets through, less than any client that
/// reads at all (2 KiB/s).
const MIN_PROGRESS_BYTES: u64 = 64 * 1024;
/// Replies that wait unsent (the client's window closed) before a connection is
/// watched at all. More than the replies of every request a connection may have in
/// flight that carry no data (256 of 20 bytes or so), so a client that mostly writes,
/// whose small replies wait only for their acknowledgement, is never watched however
/// long its round trips.
const MIN_BACKLOG_BYTES: u64 = 64 * 1024;

/// What a TCP socket says of the replies waiting in it: bytes queued that the client
/// has not opened its window to (unsent), and how many it has acknowledged since the
/// connection began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backlog {
    pub(crate) unsent: u64,
    pub(crate) acked: u64,
}

impl Backlog {
    fn waiting(self) -> bool {
        self.unsent >= MIN_BACKLOG_BYTES
    }

    /// Whether the client took replies between `earlier` and now.
    fn progressed_since(self, earlier: Backlog) -> bool {
        self.acked.saturating_sub(earlier.acked) >= MIN_PROGRESS_BYTES
    }
}

/// Reads the backlog of a TCP socket; `None` where it says nothing (closed
/// meanwhile, a kernel before 4.6, or a Unix socket: a sender there blocks whole
/// once the client's queue is full, so the send timeout finds such a client).
pub(crate) fn backlog(fd: RawFd, tcp: bool) -> Option<Backlog> {
    if !tcp {
        return None;
    }
    {
        // SAFETY: tcp_info is plain data that the kernel fills (up to `len`, which
        // it lowers to what it wrote); the pointers are to locals that outlive the call.
        let (info, len) = unsafe {
            let mut info: libc::tcp_info = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
            let rc = libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&raw mut info).cast(),
                &mut len,
            );
            if rc != 0 {
                return None;
            }
            (info, len as usize)
        };
        // Kernels before 4.6 end the structure before tcpi_notsent_bytes.
        if len < std::mem::offset_of!(libc::tcp_info, tcpi_min_rtt) {
            return None;
        }
        Some(Backlog {
            unsent: u64::from(info.tcpi_notsent_bytes),
            acked: info.tcpi_bytes_acked,
        })
    }
}

/// One connection's watch: since when replies have waited without the client taking
/// them, and the backlog then.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    waiting_since: Option<(Instant, Backlog)>,
}

impl Watch {
    /// Takes a look at `now`; true when the client has stalled for [`STALL_LIMIT`].
    pub(crate) fn stalled(&mut self, backlog: Backlog, now: Instant) -> bool {
        if !backlog.waiting() {
            self.waiting_since = None;
            return false;
        }
        match self.waiting_since {
            Some((since, mark)) if !backlog.progressed_since(mark) => {
                now.duration_since(since) >= STALL_LIMIT
            }
            _ => {
                self.waiting_since = Some((now, backlog));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(waiting: bool, acked: u64) -> Backlog {
        Backlog {
            unsent: if waiting { 4 << 20 } else { 0 },
            acked,
        }
    }

    #[test]
    fn a_client_taking_nothing_stalls_after_the_limit() {
        let t0 = Instant::now();
        let mut w = Watch::default();
        assert!(!w.stalled(tcp(true, 1000), t0));
        assert!(!w.stalled(tcp(true, 1000 + 4096), t0 + STALL_LIMIT / 2));
        // A trickle under the threshold is no progress.
        assert!(w.stalled(tcp(true, 1000 + 8192), t0 + STALL_LIMIT));
    }

    #[test]
    fn a_reading_client_or_an_idle_one_never_stalls() {
        let t0 = Instant::now();
        let mut w = Watch::default();
        let mut acked = 0;
        for i in 0..20u32 {
            acked += MIN_PROGRESS_BYTES;
            assert!(!w.stalled(tcp(true, acked), t0 + WATCH_EVERY * i));
        }
        let mut idle = Watch::default();
        for i in 0..20u32 {
            assert!(!idle.stalled(tcp(false, 5), t0 + WATCH_EVERY * i));
        }
        // Replies that wait again after a pause start a new clock.
        assert!(!idle.stalled(tcp(true, 5), t0 + WATCH_EVERY * 30));
        assert!(!idle.stalled(tcp(true, 5), t0 + WATCH_EVERY * 31));
    }

    /// Small replies waiting for their acknowledgement over a long round trip (a
    /// client that mostly writes) are no backlog, however few bytes it acknowledges.
    #[test]
    fn small_replies_in_flight_are_never_watched() {
        let t0 = Instant::now();
        let mut w = Watch::default();
        for i in 0..40u32 {
            let b = Backlog {
                unsent: 256 * 20,
                acked: u64::from(i) * 100,
            };
            assert!(!w.stalled(b, t0 + WATCH_EVERY * i));
        }
    }

    #[test]
    fn a_tcp_socket_reports_what_its_client_has_not_opened_its_window_to() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (_server, _) = listener.accept().expect("accept");
        let fd = client.as_raw_fd();
        assert_eq!(backlog(fd, true).map(|b| b.unsent), Some(0));
        // The peer reads nothing: what does not fit its window stays unsent.
        client.set_nonblocking(true).expect("nonblocking");
        let chunk = [7u8; 64 * 1024];
        let mut written = 0usize;
        while written < (64 << 20) {
            match client.write(&chunk) {
                Ok(n) => written += n,
                Err(_) => break,
            }
        }
        let b = backlog(fd, true).expect("a tcp socket's backlog");
        assert!(b.waiting(), "{b:?} after {written} bytes");
        let (unix, _peer) = std::os::unix::net::UnixStream::pair().expect("pair");
        assert_eq!(backlog(unix.as_raw_fd(), false), None);
    }
}
