//! The plain-file data path over real sockets: long reads sent from the file — copied
//! from its mapping (a client on this machine) and spliced (as to a client on another
//! machine) — with and without holes, over Unix sockets and TCP; long writes (spliced
//! from the socket into the file), with and without FUA; a file cut short under the
//! server; a client that leaves in the middle of replies or of a payload.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use xraid_nbd::consts::*;

use super::{serve_file, serve_file_to};
use crate::export::{Export, ExportKind};
use crate::file_export::FileExport;
use crate::handshake::Negotiated;
use crate::stream::Stream;
use crate::tls::Conn;
use crate::transmission::ConnEnd;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
        .collect()
}

fn export(path: &Path, structured: bool) -> Negotiated {
    Negotiated {
        export: Arc::new(Export {
            name: "t".to_owned(),
            description: String::new(),
            read_only: false,
            kind: ExportKind::File(FileExport::open(path, false).expect("open the export")),
        }),
        structured,
        base_allocation: false,
    }
}

/// Serves `n` on the server end of a connection, as server.rs does after the handshake.
fn serve(server: Stream, n: Negotiated) -> JoinHandle<Result<(), ConnEnd>> {
    server
        .set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    std::thread::spawn(move || {
        let reader = Conn::Plain(server.try_clone().expect("clone"));
        serve_file(reader, Conn::Plain(server), &n)
    })
}

/// As [`serve`], but as if the client were on another machine: long reads go from the
/// file to the socket by reference (spliced), not copied from the mapped file.
fn serve_as_remote(server: Stream, n: Negotiated) -> JoinHandle<Result<(), ConnEnd>> {
    server
        .set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    std::thread::spawn(move || {
        let reader = Conn::Plain(server.try_clone().expect("clone"));
        serve_file_to(reader, Conn::Plain(server), &n, false)
    })
}

/// How a test serves its connection: to a client on this machine, or as to one on
/// another.
type Serve = fn(Stream, Negotiated) -> JoinHandle<Result<(), ConnEnd>>;
const BOTH_PATHS: [Serve; 2] = [serve, serve_as_remote];

fn unix_pair() -> (Box<dyn ReadWrite>, Stream) {
    let (a, b) = UnixStream::pair().expect("socketpair");
    a.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    (Box::new(a), Stream::Unix(b))
}

fn tcp_pair() -> (Box<dyn ReadWrite>, Stream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let server = Stream::Tcp(server);
    server.set_nodelay();
    (Box::new(client), server)
}

trait ReadWrite: Read + Write + Send {
    fn close(&self);
}
impl ReadWrite for UnixStream {
    fn close(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}
impl ReadWrite for TcpStream {
    fn close(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

fn request(c: &mut dyn ReadWrite, command: u16, cookie: u64, offset: u64, length: u32) {
    request_with(c, 0, command, cookie, offset, length);
}

fn request_with(
    c: &mut dyn ReadWrite,
    flags: u16,
    command: u16,
    cookie: u64,
    offset: u64,
    length: u32,
) {
    let mut r = Vec::with_capacity(28);
    r.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    r.extend_from_slice(&flags.to_be_bytes());
    r.extend_from_slice(&command.to_be_bytes());
    r.extend_from_slice(&cookie.to_be_bytes());
    r.extend_from_slice(&offset.to_be_bytes());
    r.extend_from_slice(&length.to_be_bytes());
    c.write_all(&r).expect("send a request");
}

fn take<const N: usize>(c: &mut dyn ReadWrite) -> [u8; N] {
    let mut b = [0u8; N];
    c.read_exact(&mut b).expect("a reply");
    b
}

/// A read's reply: its error and, without one, its `length` bytes (holes as zeros),
/// with the number of hole chunks it held.
fn read_reply(
    c: &mut dyn ReadWrite,
    structured: bool,
    cookie: u64,
    offset: u64,
    length: u32,
) -> (u32, Vec<u8>, usize) {
    let (got, error, data, holes) = any_reply(c, structured, &|_| (offset, length));
    assert_eq!(got, cookie);
    (error, data, holes)
}

/// The next reply, whichever request it answers (NBD lets replies overtake each
/// other): its cookie, error, data and hole chunks; `req` gives a cookie's read range.
fn any_reply(
    c: &mut dyn ReadWrite,
    structured: bool,
    req: &dyn Fn(u64) -> (u64, u32),
) -> (u64, u32, Vec<u8>, usize) {
    if !structured {
        let h: [u8; 16] = take(c);
        assert_eq!(h[..4], SIMPLE_REPLY_MAGIC.to_be_bytes());
        let cookie = u64::from_be_bytes(h[8..].try_into().expect("8 bytes"));
        let (_, length) = req(cookie);
        let mut data = vec![0xAAu8; length as usize];
        let error = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        if error == 0 {
            c.read_exact(&mut data).expect("data");
        }
        return (cookie, error, data, 0);
    }
    let mut holes = 0;
    let mut error = 0;
    let mut reply: Option<(u64, u64, Vec<u8>)> = None;
    loop {
        let h: [u8; 20] = take(c);
        assert_eq!(h[..4], STRUCTURED_REPLY_MAGIC.to_be_bytes());
        let flags = u16::from_be_bytes([h[4], h[5]]);
        let kind = u16::from_be_bytes([h[6], h[7]]);
        let cookie = u64::from_be_bytes(h[8..16].try_into().expect("8 bytes"));
        // This server never interleaves the chunks of two replies.
        let (first, offset, data) = reply.get_or_insert_with(|| {
            let (offset, length) = req(cookie);
            (cookie, offset, vec![0xAAu8; length as usize])
        });
        assert_eq!(*first, cookie, "chunks of one reply");
        let offset = *offset;
        let len = u32::from_be_bytes([h[16], h[17], h[18], h[19]]) as usize;
        let mut payload = vec![0u8; len];
        c.read_exact(&mut payload).expect("chunk payload");
        let at = |p: &[u8]| u64::from_be_bytes(p[..8].try_into().expect("8 bytes")) - offset;
        match kind {
            REPLY_TYPE_OFFSET_DATA => {
                let o = at(&payload) as usize;
                data[o..o + len - 8].copy_from_slice(&payload[8..]);
            }
            REPLY_TYPE_OFFSET_HOLE => {
                let o = at(&payload) as usize;
                let n = u32::from_be_bytes(payload[8..12].try_into().expect("4 bytes")) as usize;
                data[o..o + n].fill(0);
                holes += 1;
            }
            REPLY_TYPE_NONE => {}
            _ => error = u32::from_be_bytes(payload[..4].try_into().expect("4 bytes")),
        }
        if flags & REPLY_FLAG_DONE != 0 {
            return (cookie, error, std::mem::take(data), holes);
        }
    }
}

/// The next reply without data: its cookie and error.
fn plain_reply(c: &mut dyn ReadWrite, structured: bool) -> (u64, u32) {
    let (cookie, error, _, _) = any_reply(c, structured, &|_| (0, 0));
    (cookie, error)
}

fn disconnect(mut c: Box<dyn ReadWrite>, server: JoinHandle<Result<(), ConnEnd>>) {
    request(&mut *c, 2, 0, 0, 0);
    server
        .join()
        .expect("no panic")
        .expect("a clean end after NBD_CMD_DISC");
}

/// Long reads (aligned, unaligned, longer than the splice pipe), each checked byte
/// for byte, mixed with short ones, on one connection.
fn long_reads(pair: fn() -> (Box<dyn ReadWrite>, Stream), structured: bool, serve: Serve) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f.img");
    let bytes = pattern(8 << 20, 3);
    std::fs::write(&path, &bytes).expect("write the file");
    let (mut c, server) = pair();
    let served = serve(server, export(&path, structured));
    let reads: [(u64, u32); 5] = [
        (0, 1 << 20),
        (12_345, 1 << 20),
        (1 << 20, 3 << 20),
        (4097, 4096),
        ((8 << 20) - (64 << 10), 64 << 10),
    ];
    // All requests first, so the replies of long and short reads queue up together;
    // NBD lets them come back in any order (short ones overtake long ones here).
    for (i, &(offset, length)) in reads.iter().enumerate() {
        request(&mut *c, 0, i as u64 + 1, offset, length);
    }
    let range = |cookie: u64| reads[cookie as usize - 1];
    let mut seen = Vec::new();
    for _ in 0..reads.len() {
        let (cookie, error, data, holes) = any_reply(&mut *c, structured, &range);
        seen.push(cookie);
        let i = cookie as usize - 1;
        let (offset, length) = reads[i];
        assert_eq!(error, 0, "read {i}");
        assert_eq!(holes, 0);
        let want = &bytes[offset as usize..offset as usize + length as usize];
        assert!(
            data == want,
            "read {i} ({length} bytes at {offset}) differs"
        );
    }
    seen.sort_unstable();
    assert_eq!(seen, [1, 2, 3, 4, 5]);
    disconnect(c, served);
}

#[test]
fn long_reads_over_a_unix_socket_arrive_intact() {
    for serve in BOTH_PATHS {
        long_reads(unix_pair, false, serve);
        long_reads(unix_pair, true, serve);
    }
}

#[test]
fn long_reads_over_tcp_arrive_intact() {
    for serve in BOTH_PATHS {
        long_reads(tcp_pair, false, serve);
        long_reads(tcp_pair, true, serve);
    }
}

/// A sparse file: a long structured read comes back as data and hole chunks whose
/// bytes are the file's; a simple reply carries the zeros.
#[test]
fn long_reads_of_a_sparse_file_send_holes_as_hole_chunks() {
    for pair in [unix_pair as fn() -> _, tcp_pair] {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let path = dir.path().join("sparse.img");
        let f = std::fs::File::create(&path).expect("create");
        f.set_len(4 << 20).expect("size");
        let island = pattern(256 << 10, 9);
        f.write_all_at(&island, 1 << 20).expect("data");
        drop(f);
        let mut want = vec![0u8; 4 << 20];
        want[1 << 20..(1 << 20) + island.len()].copy_from_slice(&island);
        for (structured, serve) in [true, false]
            .into_iter()
            .flat_map(|s| BOTH_PATHS.map(|serve| (s, serve)))
        {
            let (mut c, server) = pair();
            let served = serve(server, export(&path, structured));
            request(&mut *c, 0, 7, 512 << 10, 2 << 20);
            let (error, data, holes) = read_reply(&mut *c, structured, 7, 512 << 10, 2 << 20);
            assert_eq!(error, 0);
            assert!(
                data == want[512 << 10..(512 << 10) + (2 << 20)],
                "bytes differ"
            );
            if structured {
                // tmpfs and ext4 both report these holes; a file system that cannot
                // would send one data chunk, which this test would then catch.
                assert_eq!(holes, 2, "the holes before and after the data");
            }
            // A range all hole, and one all data.
            for (cookie, offset, length, hole_chunks) in
                [(8, 2 << 20, 2 << 20, 1), (9, 1 << 20, 128 << 10, 0)]
            {
                request(&mut *c, 0, cookie, offset, length);
                let (error, data, holes) = read_reply(&mut *c, structured, cookie, offset, length);
                assert_eq!(error, 0);
                let at = offset as usize;
                assert!(data == want[at..at + length as usize], "bytes differ");
                if structured {
                    assert_eq!(holes, hole_chunks, "{length} bytes at {offset}");
                }
            }
            disconnect(c, served);
        }
    }
}

/// Reads of a sparse file on tmpfs, structured and not, leave its holes as they were:
/// a hole read through the file's mapping would be filled (tmpfs allocates a page on a
/// read fault), so long reads never fault a hole in.
#[test]
fn long_reads_of_a_sparse_tmpfs_file_leave_its_holes_alone() {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        return; // no tmpfs here: nothing to show
    };
    let path = dir.path().join("sparse.img");
    let f = std::fs::File::create(&path).expect("create");
    f.set_len(8 << 20).expect("size");
    let island = pattern(256 << 10, 4);
    f.write_all_at(&island, 3 << 20).expect("data");
    drop(f);
    let mut want = vec![0u8; 8 << 20];
    want[3 << 20..(3 << 20) + island.len()].copy_from_slice(&island);
    let blocks = || std::fs::metadata(&path).expect("stat").blocks();
    let before = blocks();
    for structured in [true, false] {
        let (mut c, server) = tcp_pair();
        let served = serve(server, export(&path, structured));
        for (cookie, offset) in [(1, 0), (2, 2 << 20), (3, 6 << 20)] {
            request(&mut *c, 0, cookie, offset, 2 << 20);
            let (error, data, _) = read_reply(&mut *c, structured, cookie, offset, 2 << 20);
            assert_eq!(error, 0);
            let offset = offset as usize;
            assert!(data == want[offset..offset + (2 << 20)], "bytes differ");
        }
        disconnect(c, served);
    }
    assert_eq!(blocks(), before, "reads allocated blocks in the holes");
}

/// Long writes (and short ones) read back through the server and from the file.
#[test]
fn long_writes_read_back() {
    for pair in [unix_pair as fn() -> _, tcp_pair] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.img");
        std::fs::write(&path, vec![0u8; 4 << 20]).expect("file");
        let (mut c, server) = pair();
        let served = serve(server, export(&path, true));
        let writes: [(u64, usize, u8); 3] =
            [(0, 1 << 20, 1), (777, 2 << 20, 2), (3 << 20, 4096, 3)];
        let mut want = vec![0u8; 4 << 20];
        for (i, &(offset, len, seed)) in writes.iter().enumerate() {
            let data = pattern(len, seed);
            request(&mut *c, 1, i as u64 + 1, offset, len as u32);
            c.write_all(&data).expect("payload");
            want[offset as usize..offset as usize + len].copy_from_slice(&data);
        }
        let mut seen: Vec<u64> = (0..writes.len())
            .map(|_| {
                let (cookie, error) = plain_reply(&mut *c, true);
                assert_eq!(error, 0, "write {cookie}");
                cookie
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, [1, 2, 3]);
        request(&mut *c, 0, 9, 0, 4 << 20);
        let (error, data, _) = read_reply(&mut *c, true, 9, 0, 4 << 20);
        assert_eq!(error, 0);
        assert!(data == want, "read back through the server");
        disconnect(c, served);
        assert!(
            std::fs::read(&path).expect("file") == want,
            "the file itself"
        );
    }
}

/// Long writes with FUA (their flush done by the connection's second thread) and
/// without, interleaved with short reads on the same connection: every reply comes,
/// and the file holds what was written.
#[test]
fn long_writes_with_fua_are_answered_and_land() {
    for pair in [unix_pair as fn() -> _, tcp_pair] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f.img");
        std::fs::write(&path, vec![0u8; 8 << 20]).expect("file");
        let (mut c, server) = pair();
        let served = serve(server, export(&path, false));
        let mut want = vec![0u8; 8 << 20];
        let mut cookies = Vec::new();
        for i in 0..8u64 {
            let (offset, len) = (i << 20, (1 << 20) - 512 * i as usize);
            let data = pattern(len, i as u8 + 11);
            let flags = if i % 2 == 0 { CMD_FLAG_FUA } else { 0 };
            request_with(&mut *c, flags, 1, 100 + i, offset, len as u32);
            c.write_all(&data).expect("payload");
            want[offset as usize..offset as usize + len].copy_from_slice(&data);
            request(&mut *c, 0, 200 + i, offset, 4096);
            cookies.extend([100 + i, 200 + i]);
        }
        let mut seen: Vec<u64> = Vec::new();
        for _ in 0..cookies.len() {
            // Writes' replies carry no data; the reads' are 4 KiB.
            let (cookie, error, data, _) = any_reply(&mut *c, false, &|cookie| {
                if cookie >= 200 {
                    ((cookie - 200) << 20, 4096)
                } else {
                    (0, 0)
                }
            });
            assert_eq!(error, 0, "request {cookie}");
            if cookie >= 200 {
                // The read raced the write before it, as NBD allows: old or new data.
                assert_eq!(data.len(), 4096);
            }
            seen.push(cookie);
        }
        seen.sort_unstable();
        cookies.sort_unstable();
        assert_eq!(seen, cookies);
        disconnect(c, served);
        assert!(std::fs::read(&path).expect("file") == want);
    }
}

/// A client that leaves in the middle of a long write's payload: its connection ends,
/// the writes it completed before are in the file, and a new connection is served.
#[test]
fn a_client_that_leaves_mid_payload_ends_only_its_connection() {
    for pair in [unix_pair as fn() -> _, tcp_pair] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.img");
        std::fs::write(&path, vec![0u8; 4 << 20]).expect("file");
        let n = export(&path, false);
        let (mut c, server) = pair();
        let served = serve(
            server,
            Negotiated {
                export: Arc::clone(&n.export),
                structured: false,
                base_allocation: false,
            },
        );
        let first = pattern(1 << 20, 21);
        request(&mut *c, 1, 1, 0, 1 << 20);
        c.write_all(&first).expect("payload");
        assert_eq!(plain_reply(&mut *c, false), (1, 0));
        request(&mut *c, 1, 2, 2 << 20, 1 << 20);
        c.write_all(&pattern(300_000, 22))
            .expect("part of a payload");
        c.close();
        drop(c);
        let ended = served.join().expect("no panic");
        assert!(
            !matches!(ended, Ok(())),
            "a payload cut short is not a clean end"
        );
        let (mut c, server) = pair();
        let served = serve(server, n);
        request(&mut *c, 0, 3, 0, 1 << 20);
        let (error, data, _) = read_reply(&mut *c, false, 3, 0, 1 << 20);
        assert_eq!(error, 0);
        assert!(data == first, "the completed write is in the file");
        disconnect(c, served);
    }
}

/// A file cut short under the server: a long read past its new end gets an error
/// reply (found before any of the reply went out) and the connection goes on.
#[test]
fn a_file_cut_short_gets_an_error_reply_and_the_connection_goes_on() {
    for (structured, serve) in [false, true]
        .into_iter()
        .flat_map(|s| BOTH_PATHS.map(|serve| (s, serve)))
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.img");
        let bytes = pattern(4 << 20, 5);
        std::fs::write(&path, &bytes).expect("file");
        let (mut c, server) = unix_pair();
        let served = serve(server, export(&path, structured));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open")
            .set_len(2 << 20)
            .expect("truncate");
        request(&mut *c, 0, 1, 3 << 20, 1 << 20);
        let (error, _, _) = read_reply(&mut *c, structured, 1, 3 << 20, 1 << 20);
        assert_eq!(error, EIO);
        request(&mut *c, 0, 2, 0, 1 << 20);
        let (error, data, _) = read_reply(&mut *c, structured, 2, 0, 1 << 20);
        assert_eq!(error, 0);
        assert!(data == bytes[..1 << 20]);
        disconnect(c, served);
    }
}

/// A client that asks for many megabytes and leaves without reading them: its
/// connection ends (no hang, no panic), and a new one to the same file is served.
#[test]
fn a_client_that_leaves_mid_reply_ends_only_its_connection() {
    let pairs = [unix_pair as fn() -> _, tcp_pair];
    for (pair, serve) in pairs
        .into_iter()
        .flat_map(|p| BOTH_PATHS.map(|serve| (p, serve)))
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("l.img");
        let bytes = pattern(8 << 20, 7);
        std::fs::write(&path, &bytes).expect("file");
        let n = export(&path, true);
        let (mut c, server) = pair();
        let served = serve(
            server,
            Negotiated {
                export: Arc::clone(&n.export),
                structured: true,
                base_allocation: false,
            },
        );
        for i in 0..16 {
            request(&mut *c, 0, i, (i % 8) << 20, 1 << 20);
        }
        // Some of the first reply, then gone.
        let _: [u8; 4096] = take(&mut *c);
        c.close();
        drop(c);
        let ended = served.join().expect("no panic");
        assert!(
            !matches!(ended, Ok(())),
            "a client gone mid-reply is not a clean end"
        );
        let (mut c, server) = pair();
        let served = serve(server, n);
        request(&mut *c, 0, 1, 5 << 20, 1 << 20);
        let (error, data, _) = read_reply(&mut *c, true, 1, 5 << 20, 1 << 20);
        assert_eq!(error, 0);
        assert!(data == bytes[5 << 20..6 << 20]);
        disconnect(c, served);
    }
}
