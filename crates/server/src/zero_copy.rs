//! Moving file data between a socket and a file without copying it through user
//! space. Sending: a reply's header with `send(MSG_MORE)`, then the data spliced through
//! a pipe (or with sendfile(2)), which on TCP and Unix sockets hands the page cache's
//! (or tmpfs's) pages to the socket by reference. Receiving: a write's payload spliced
//! from the socket into a pipe (the socket buffer's pages, by reference) and from the
//! pipe into the file, so the only copy is the one into the file.
//!
//! Only for plain (non-TLS) connections: TLS must encrypt the bytes in user space.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Sends all of `bytes` on the socket. With `more`, the kernel is told more data
/// follows at once (MSG_MORE), so a small header and the data after it leave in the same
/// segments even with TCP_NODELAY.
pub(crate) fn send_all(sock: RawFd, mut bytes: &[u8], more: bool) -> io::Result<()> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    while !bytes.is_empty() {
        // SAFETY: the kernel reads at most `bytes.len()` bytes from the pointer, which
        // addresses that many initialised bytes; `sock` is a socket this connection owns.
        let n = unsafe { libc::send(sock, bytes.as_ptr().cast(), bytes.len(), flags) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "socket closed"));
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Why sending a piece of a file stopped short.
#[derive(Debug)]
pub(crate) enum SendFileError {
    /// The socket failed (the client left, or stopped reading past the write timeout).
    Socket(io::Error),
    /// The file could not be read before anything of this piece (its header included)
    /// went out: the reply can still end with an error.
    FileEarly(io::Error),
    /// The file could not be read (an I/O error, or it was cut short under us) after
    /// the piece's header went out: the reply cannot be taken back.
    FileLate(io::Error),
}

impl SendFileError {
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            SendFileError::Socket(e) => e,
            SendFileError::FileEarly(e) | SendFileError::FileLate(e) => io::Error::new(
                e.kind(),
                format!("reading the export for a reply already under way: {e}"),
            ),
        }
    }
}

/// A pipe of about a megabyte that file pages are spliced into (by reference, no copy)
/// before a reply's header goes out, and then spliced on to the socket: a read error is
/// then found while the reply can still say so, and the socket gets a megabyte in one
/// call (sendfile moves 64 KiB at a time, each pushed and delivered on its own).
#[derive(Debug)]
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes the pipe holds at most, a whole number of pages.
    capacity: usize,
    page: usize,
}

/// The pipe size asked for.
const PIPE_BYTES: libc::c_int = 1 << 20;

impl Pipe {
    /// A new pipe, as large as the system allows up to a megabyte.
    pub(crate) fn new() -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given, which has
        // room for exactly two.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl with F_SETPIPE_SZ / F_GETPIPE_SZ takes an integer, no pointers;
        // the descriptor is the pipe just made. F_SETPIPE_SZ may fail (a lower
        // pipe-max-size): the pipe then keeps the size F_GETPIPE_SZ tells.
        let size = unsafe {
            libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES);
            libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ)
        };
        // SAFETY: sysconf takes no pointers.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let capacity = usize::try_from(size).map_err(|_| io::Error::last_os_error())?;
        if capacity < 2 * page {
            return Err(io::Error::other("pipe too small"));
        }
        Ok(Pipe {
            read,
            write,
            capacity,
            page,
        })
    }
}

/// Sends `header`, then `len` bytes of `file` from `offset`, to the socket. With a
/// pipe, each megabyte is spliced from the file into the pipe first, the header goes out
/// only once the first one is in, and the pipe is then spliced to the socket; without
/// one, the data goes with sendfile(2) after the header.
pub(crate) fn send_header_and_file(
    sock: RawFd,
    pipe: Option<&Pipe>,
    header: &[u8],
    file: RawFd,
    offset: u64,
    len: usize,
) -> Result<(), SendFileError> {
    let Some(pipe) = pipe else {
        send_all(sock, header, true).map_err(SendFileError::Socket)?;
        return send_file(sock, file, offset, len).map_err(|e| match e {
            SendFileError::FileEarly(e) => SendFileError::FileLate(e),
            other => other,
        });
    };
    let (mut at, mut left, mut header_sent) = (offset, len, false);
    while left > 0 {
        // The pipe is empty here; a piece spans at most capacity / page pages, one pipe
        // slot each, so filling it never waits for room.
        let misalign = (at % pipe.page as u64) as usize;
        let piece = left.min(pipe.capacity - misalign);
        if let Err(e) = fill(pipe, file, at, piece) {
            return Err(if header_sent {
                SendFileError::FileLate(e)
            } else {
                SendFileError::FileEarly(e)
            });
        }
        if !header_sent {
            send_all(sock, header, true).map_err(SendFileError::Socket)?;
            header_sent = true;
        }
        drain(pipe, sock, piece, left > piece).map_err(SendFileError::Socket)?;
        at += piece as u64;
        left -= piece;
    }
    if !header_sent {
        send_all(sock, header, true).map_err(SendFileError::Socket)?;
    }
    Ok(())
}

/// One splice(2) call from `from` to `to`, retried when a signal interrupts it: the
/// bytes moved (0: the input has ended). An offset is given for a file (and advanced
/// by what moved); pipes and sockets take none.
fn splice(
    from: RawFd,
    from_offset: Option<&mut libc::loff_t>,
    to: RawFd,
    to_offset: Option<&mut libc::loff_t>,
    len: usize,
    flags: libc::c_uint,
) -> io::Result<usize> {
    let from_offset = from_offset.map_or(std::ptr::null_mut(), std::ptr::from_mut);
    let to_offset = to_offset.map_or(std::ptr::null_mut(), std::ptr::from_mut);
    loop {
        // SAFETY: the offsets are null or point to loff_t values the caller lends for
        // the call, which splice reads and updates; no other pointers are passed; both
        // descriptors are open for the call (the caller holds them).
        let n = unsafe { libc::splice(from, from_offset, to, to_offset, len, flags) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Splices `len` bytes of the file at `offset` into the (empty, large enough) pipe.
fn fill(pipe: &Pipe, file: RawFd, offset: u64, len: usize) -> io::Result<()> {
    let Ok(mut off) = libc::loff_t::try_from(offset) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let mut left = len;
    while left > 0 {
        let write = pipe.write.as_raw_fd();
        match splice(file, Some(&mut off), write, None, left, libc::SPLICE_F_MOVE)? {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file ends before the range read",
                ))
            }
            n => left -= n,
        }
    }
    Ok(())
}

/// Splices `len` bytes from the pipe to the socket. `more`: the reply goes on after
/// them.
fn drain(pipe: &Pipe, sock: RawFd, len: usize, more: bool) -> io::Result<()> {
    let flags = libc::SPLICE_F_MOVE | if more { libc::SPLICE_F_MORE } else { 0 };
    let mut left = len;
    while left > 0 {
        match splice(pipe.read.as_raw_fd(), None, sock, None, left, flags)? {
            0 => return Err(io::Error::new(io::ErrorKind::WriteZero, "socket closed")),
            n => left -= n,
        }
    }
    Ok(())
}

/// Sends `len` bytes of `file` from `offset` to the socket with sendfile(2), looping
/// over partial sends. The data goes out as it is when it is sent; NBD allows that for
/// a read that overlaps a write still in flight.
fn send_file(sock: RawFd, file: RawFd, offset: u64, len: usize) -> Result<(), SendFileError> {
    let Ok(mut off) = libc::off_t::try_from(offset) else {
        return Err(SendFileError::FileLate(io::Error::from_raw_os_error(
            libc::EINVAL,
        )));
    };
    let mut left = len;
    while left > 0 {
        // SAFETY: sendfile reads and updates the one off_t it is given, a live local;
        // both descriptors are open for the duration of the call (the file export and
        // this connection's socket outlive it).
        let n = unsafe { libc::sendfile(sock, file, &mut off, left) };
        if n > 0 {
            left -= n as usize;
            continue;
        }
        if n == 0 {
            // End of file before `len`: the file shrank since it was opened.
            return Err(SendFileError::FileLate(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file ends before the range read",
            )));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            // Errors of the socket side; everything else comes from reading the file.
            Some(
                libc::EPIPE
                | libc::ECONNRESET
                | libc::EAGAIN
                | libc::ENOTCONN
                | libc::ESHUTDOWN
                | libc::ETIMEDOUT,
            ) => return Err(SendFileError::Socket(e)),
            _ => return Err(SendFileError::FileLate(e)),
        }
    }
    Ok(())
}

/// How receiving a write's payload into the file ended, when the payload was taken
/// off the socket whole (the connection can go on).
#[derive(Debug)]
pub(crate) enum Received {
    /// Every byte is in the file.
    Written,
    /// The file refused a piece (an I/O error, no space); the rest of the payload was
    /// read and thrown away.
    FileFailed(io::Error),
}

/// Why a payload could not be taken off the socket whole.
#[derive(Debug)]
pub(crate) enum ReceiveError {
    /// This socket cannot be spliced from; nothing of the payload was consumed, so it
    /// can still be read the ordinary way.
    Unspliceable,
    /// The socket failed or the client left mid-payload: the connection is over.
    Socket(io::Error),
}

/// Receives a write's `len` payload bytes from the socket into `file` at `offset`:
/// spliced from the socket into the (empty) pipe, which takes the socket buffer's
/// pages by reference, then from the pipe into the file, the one copy — against two
/// (socket to buffer, buffer to file) when the payload passes through our memory.
/// Without a file the payload is only taken off the socket (a write already failed).
pub(crate) fn receive_into_file(
    sock: RawFd,
    pipe: &Pipe,
    file: Option<RawFd>,
    offset: u64,
    len: usize,
) -> Result<Received, ReceiveError> {
    let Ok(mut off) = libc::loff_t::try_from(offset) else {
        return Err(ReceiveError::Socket(io::Error::from_raw_os_error(
            libc::EINVAL,
        )));
    };
    let (mut left, mut consumed_any) = (len, false);
    let mut file_error: Option<io::Error> = None;
    let mut target = file;
    // Where the payload goes once the file has refused it (opened then).
    let mut discard: Option<std::fs::File> = None;
    while left > 0 {
        let step = left.min(pipe.capacity);
        let write = pipe.write.as_raw_fd();
        let mut in_pipe = match splice(sock, None, write, None, step, libc::SPLICE_F_MOVE) {
            Ok(0) => {
                return Err(ReceiveError::Socket(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the client left in the middle of a write's payload",
                )))
            }
            Ok(n) => n,
            Err(e) => {
                let unsupported = matches!(
                    e.raw_os_error(),
                    Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
                );
                return Err(if unsupported && !consumed_any {
                    ReceiveError::Unspliceable
                } else {
                    ReceiveError::Socket(e)
                });
            }
        };
        consumed_any = true;
        left -= in_pipe;
        while in_pipe > 0 {
            if let Some(file) = target {
                match splice_to_file(pipe, file, &mut off, in_pipe) {
                    Ok(moved) => in_pipe -= moved,
                    Err(e) => {
                        file_error = Some(e);
                        target = None;
                    }
                }
                continue;
            }
            // After a file error the payload still has to come off the socket.
            let sink = match &discard {
                Some(sink) => sink,
                None => discard.insert(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open("/dev/null")
                        .map_err(ReceiveError::Socket)?,
                ),
            };
            let read = pipe.read.as_raw_fd();
            match splice(read, None, sink.as_raw_fd(), None, in_pipe, 0) {
                Ok(n) if n > 0 => in_pipe -= n,
                Ok(_) => return Err(ReceiveError::Socket(io::ErrorKind::WriteZero.into())),
                Err(e) => return Err(ReceiveError::Socket(e)),
            }
        }
    }
    Ok(file_error.map_or(Received::Written, Received::FileFailed))
}

/// Splices up to `len` bytes from the pipe into the file at `*off` (advanced by what
/// moved); returns how many moved.
fn splice_to_file(
    pipe: &Pipe,
    file: RawFd,
    off: &mut libc::loff_t,
    len: usize,
) -> io::Result<usize> {
    match splice(
        pipe.read.as_raw_fd(),
        None,
        file,
        Some(off),
        len,
        libc::SPLICE_F_MOVE,
    )? {
        // A file that takes nothing (and says no more) is as good as full.
        0 => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use super::{receive_into_file, Pipe, ReceiveError, Received};

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4099) as u8).collect()
    }

    /// A connected pair: the sending end and the receiving end's descriptor owner.
    fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    /// Sends `payload` and then `after` from another thread (the payload may be larger
    /// than the socket buffers).
    fn send_later(mut to: impl Write + Send + 'static, payload: Vec<u8>, after: &'static [u8]) {
        std::thread::spawn(move || {
            to.write_all(&payload).expect("send the payload");
            to.write_all(after).expect("send what follows");
        });
    }

    #[test]
    fn a_payload_larger_than_the_pipe_lands_in_the_file_at_its_offset() {
        let pipe = Pipe::new().expect("pipe");
        let payload = pattern(3 * pipe.capacity + 12_345);
        let (client, mut server) = tcp_pair();
        send_later(client, payload.clone(), b"NEXT");
        let file = tempfile::tempfile().expect("file");
        let got = receive_into_file(
            server.as_raw_fd(),
            &pipe,
            Some(file.as_raw_fd()),
            777,
            payload.len(),
        );
        assert!(matches!(got, Ok(Received::Written)), "{got:?}");
        let mut back = vec![0u8; payload.len()];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, 777).expect("read back");
        assert!(back == payload);
        let mut next = [0u8; 4];
        server.read_exact(&mut next).expect("what follows");
        assert_eq!(&next, b"NEXT", "exactly the payload was consumed");
    }

    #[test]
    fn a_file_that_refuses_the_data_still_gets_the_payload_taken_off_the_socket() {
        let pipe = Pipe::new().expect("pipe");
        let payload = pattern(2 * pipe.capacity + 100);
        let (client, mut server) = UnixStream::pair().expect("socketpair");
        send_later(client, payload.clone(), b"NEXT");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ro");
        std::fs::write(&path, b"").expect("file");
        let read_only = std::fs::File::open(&path).expect("open read-only");
        let got = receive_into_file(
            server.as_raw_fd(),
            &pipe,
            Some(read_only.as_raw_fd()),
            0,
            payload.len(),
        );
        assert!(matches!(got, Ok(Received::FileFailed(_))), "{got:?}");
        let mut next = [0u8; 4];
        server.read_exact(&mut next).expect("what follows");
        assert_eq!(&next, b"NEXT");
        // Without a file, the payload is only consumed.
        let (client, mut server) = UnixStream::pair().expect("socketpair");
        send_later(client, payload.clone(), b"MORE");
        let got = receive_into_file(server.as_raw_fd(), &pipe, None, 0, payload.len());
        assert!(matches!(got, Ok(Received::Written)), "{got:?}");
        server.read_exact(&mut next).expect("what follows");
        assert_eq!(&next, b"MORE");
    }

    #[test]
    fn a_client_gone_mid_payload_is_a_socket_error() {
        let pipe = Pipe::new().expect("pipe");
        let (mut client, server) = tcp_pair();
        client
            .write_all(&pattern(5000))
            .expect("part of the payload");
        drop(client);
        let file = tempfile::tempfile().expect("file");
        let got = receive_into_file(
            server.as_raw_fd(),
            &pipe,
            Some(file.as_raw_fd()),
            0,
            1 << 20,
        );
        assert!(matches!(got, Err(ReceiveError::Socket(_))), "{got:?}");
    }
}
