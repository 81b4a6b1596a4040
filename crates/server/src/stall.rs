//! Clients that stop taking their replies. A per-call send timeout cannot find them:
//! a TCP receiver that reads nothing still opens its window a little now and then
//! (it packs its queue tighter), so every send moves a few bytes and starts its clock
//! again. This watches each connection's socket instead, whatever path its replies
//! take (our buffers, the mapped file, splices, TLS), and says when one has had
//! replies waiting for [`STALL_LIMIT`] while its client took almost none of them.

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

/// What a socket says of the replies waiting in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backlog {
    /// TCP: whether bytes wait (unsent or unacknowledged), and how many the client
    /// has acknowledged since the connection began.
    Tcp { waiting: bool, acked: u64 },
    /// A Unix socket: bytes the client has not read yet.
    Unix { queued: u64 },
}

impl Backlog {
    fn waiting(self) -> bool {
        match self {
            Backlog::Tcp { waiting, .. } => waiting,
            Backlog::Unix { queued } => queued > 0,
        }
    }

    /// Whether the client took replies between `earlier` and now. A Unix client's
    /// queue is read by nobody else: any change means it read (a writer blocked on a
    /// full queue keeps it still).
    fn progressed_since(self, earlier: Backlog) -> bool {
        match (earlier, self) {
            (Backlog::Tcp { acked: then, .. }, Backlog::Tcp { acked: now, .. }) => {
                now.saturating_sub(then) >= MIN_PROGRESS_BYTES
            }
            (Backlog::Unix { queued: then }, Backlog::Unix { queued: now }) => now != then,
            _ => true,
        }
    }
}

/// Reads the backlog of a connected socket; `None` where the socket says nothing
/// (closed meanwhile, or neither TCP nor a Unix socket).
pub(crate) fn backlog(fd: RawFd, tcp: bool) -> Option<Backlog> {
    if tcp {
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
        let has_notsent = len >= std::mem::offset_of!(libc::tcp_info, tcpi_min_rtt);
        let notsent = if has_notsent {
            info.tcpi_notsent_bytes
        } else {
            0
        };
        Some(Backlog::Tcp {
            waiting: info.tcpi_unacked > 0 || notsent > 0,
            acked: info.tcpi_bytes_acked,
        })
    } else {
        let mut queued: libc::c_int = 0;
        // SAFETY: TIOCOUTQ writes one int to the pointer, a live local.
        let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &raw mut queued) };
        (rc == 0).then(|| Backlog::Unix {
            queued: u64::try_from(queued).unwrap_or(0),
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
        Backlog::Tcp { waiting, acked }
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

    #[test]
    fn a_unix_client_counts_as_reading_while_its_queue_moves() {
        let t0 = Instant::now();
        let mut w = Watch::default();
        assert!(!w.stalled(Backlog::Unix { queued: 100 }, t0));
        assert!(!w.stalled(Backlog::Unix { queued: 50 }, t0 + STALL_LIMIT));
        assert!(!w.stalled(Backlog::Unix { queued: 50 }, t0 + STALL_LIMIT * 3 / 2));
        assert!(w.stalled(Backlog::Unix { queued: 50 }, t0 + STALL_LIMIT * 2));
    }

    #[test]
    fn sockets_report_their_backlog() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let (mut a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        assert_eq!(
            backlog(a.as_raw_fd(), false),
            Some(Backlog::Unix { queued: 0 })
        );
        a.write_all(&[7u8; 1000]).expect("write");
        let Some(Backlog::Unix { queued }) = backlog(a.as_raw_fd(), false) else {
            panic!("a unix socket's backlog");
        };
        assert!(queued >= 1000, "{queued}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let Some(Backlog::Tcp { waiting, .. }) = backlog(client.as_raw_fd(), true) else {
            panic!("a tcp socket's backlog");
        };
        assert!(!waiting);
    }
}
