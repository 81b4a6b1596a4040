//! The transmission phase of a plain-file export.
//!
//! A plain file is served inline by the connection's thread: it reads every request the
//! socket has buffered, does each, and sends the replies of the batch in one write.
//! Reads and writes of 64 KiB and more go to the connection's second thread. On a
//! connection without TLS that thread sends long reads' data without a buffer of ours:
//! to a client on another machine from the file to the socket by reference (splice, or
//! sendfile(2)); to a client on this machine copied by send(2) straight from the file's
//! pages, mapped (a copy is cheaper for a local client to receive than pages by
//! reference). With TLS, or a file that cannot be mapped, the data is read into a
//! buffer first.
//! Without TLS, long writes' payloads go the other way by splice too, from the socket
//! into the file on the reading thread (only a FUA write's flush is left to the second
//! thread).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};

use xraid_nbd::consts::*;
use xraid_nbd::{
    block_status_chunk, offset_data_header, offset_hole_chunk, simple_reply, BlockDescriptor,
    Command, Request,
};

use crate::export::ExportKind;
use crate::file_export::{errno_of, Extent, FileExport};
use crate::handshake::{Negotiated, BASE_ALLOCATION_ID};
use crate::lane::Lane;
use crate::mapped::Mapping;
use crate::tls::Conn;
use crate::transmission::{
    check, next_request, push_error, push_ok, read_payload, skip_payload, ConnEnd,
    READ_BUFFER_BYTES,
};
use crate::zero_copy::{
    receive_into_file, send_all, send_header_and_file, Pipe, ReceiveError, Received, SendFileError,
};

/// Replies are sent once this much is batched, even with more requests waiting.
const WRITE_BATCH_BYTES: usize = 1 << 20;
/// Reads at least this long are checked for holes (shorter ones are sent as data:
/// looking costs more than sending a few zeros), and their data goes from the file to
/// the socket with sendfile(2) instead of through a buffer.
const HOLE_CHECK_BYTES: u32 = 64 * 1024;
/// Most extents in one block status reply.
const MAX_EXTENTS: usize = 1024;

/// Serves a plain-file export on this thread until the client leaves.
pub(crate) fn serve_file(reader: Conn, writer: Conn, n: &Negotiated) -> Result<(), ConnEnd> {
    let local = match &writer {
        Conn::Plain(s) => s.peer_is_local(),
        Conn::Tls { .. } => true,
    };
    serve_file_to(reader, writer, n, local)
}

/// [`serve_file`], told whether the client is on this machine (tests take the path of
/// a client on another machine over loopback too).
fn serve_file_to(reader: Conn, writer: Conn, n: &Negotiated, local: bool) -> Result<(), ConnEnd> {
    let ExportKind::File(file) = &n.export.kind else {
        return Err(ConnEnd::Protocol("not a file export".to_owned()));
    };
    // Without TLS, long reads to a client on another machine go from the file to the
    // socket by reference (splice, or sendfile). A client on this machine is sent a
    // copy instead: measured on loopback (PERFORMANCE.md), the pages sent by reference
    // cost the receiving client half again as much CPU as a copied buffer and the
    // stream ran ~10% slower. That copy is made by send(2) from the mapped file where
    // it can be, which saves the copy into a buffer of ours.
    let long_reads = match &writer {
        Conn::Plain(s) if !local => LongReads::ByReference(s.as_raw_fd()),
        Conn::Plain(s) => match file.mapping() {
            Some(m) => LongReads::Mapped(s.as_raw_fd(), m),
            None => LongReads::Buffered,
        },
        Conn::Tls { .. } => LongReads::Buffered,
    };
    let writer = Arc::new(Mutex::new(writer));
    let pool = BufferPool::default();
    let (bulk_tx, bulk_rx) = mpsc::sync_channel::<Bulk>(BULK_QUEUE);
    let result = std::thread::scope(|scope| {
        let (writer, pool) = (&writer, &pool);
        let out = BulkOut {
            writer,
            long_reads,
            structured: n.structured,
        };
        let bulk = scope.spawn(move || bulk_worker(file, &out, &bulk_rx, pool));
        let result = read_file_requests(reader, file, n, writer, &bulk_tx, pool, long_reads);
        drop(bulk_tx);
        let bulk_result = bulk
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("bulk thread panicked")));
        result.and(bulk_result.map_err(ConnEnd::Io))
    });
    result
}

/// How a connection sends long reads' data. The two ways without a buffer carry the
/// connection's socket (no TLS), which their replies are sent on directly, under the
/// writer's lock.
#[derive(Debug, Clone, Copy)]
enum LongReads<'a> {
    /// Read into a buffer, then sent (TLS, or a local file that cannot be mapped).
    Buffered,
    /// Spliced, or sent with sendfile(2), from the file (a client on another machine).
    ByReference(RawFd),
    /// Copied by send(2) from the file's mapping (a client on this machine).
    Mapped(RawFd, &'a Mapping),
}

/// Large requests of a plain-file connection, handed from the thread that reads
/// requests to a second thread: the file copy of one request then overlaps the socket
/// copy of the next, on two cores.
enum Bulk {
    /// A complete reply (a long read's header and data), to be sent as it is.
    Reply(Vec<u8>),
    /// A long read to be answered straight from the file or its mapping (connections
    /// without TLS); `populated`: its range of the mapping was faulted in already.
    Read { req: Request, populated: bool },
    /// A long write's payload, to be written to the file, then answered.
    Write {
        cookie: u64,
        offset: u64,
        fua: bool,
        data: Vec<u8>,
    },
    /// A long write with FUA whose payload is already in the file: made durable, then
    /// answered (the reading thread goes on meanwhile).
    Durable { cookie: u64 },
}

/// Long reads and writes in the bulk queue before the reading thread waits.
const BULK_QUEUE: usize = 4;

/// Recycled buffers of long requests, so that a megabyte is not mapped and faulted
/// in anew for every request.
#[derive(Default)]
struct BufferPool(Mutex<Vec<Vec<u8>>>);

impl BufferPool {
    /// An empty buffer with room for `len` bytes.
    fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = self.pop();
        buf.clear();
        buf.reserve(len);
        buf
    }

    /// A buffer of `len` bytes to be overwritten (a write's payload): what a recycled
    /// buffer held stays until it is overwritten, so only bytes it never had are
    /// zero-filled (`read_exact` needs initialised memory).
    fn take_filled(&self, len: usize) -> Vec<u8> {
        let mut buf = self.pop();
        if buf.len() >= len {
            buf.truncate(len);
        } else {
            buf.resize(len, 0);
        }
        buf
    }

    fn pop(&self) -> Vec<u8> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default()
    }

    fn give(&self, buf: Vec<u8>) {
        let mut pool = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < BULK_QUEUE + 2 {
            pool.push(buf);
        }
    }
}

fn send_locked(writer: &Mutex<Conn>, bytes: &[u8]) -> io::Result<()> {
    writer
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .write_all(bytes)
}

/// Where the bulk thread's replies go.
struct BulkOut<'a> {
    writer: &'a Mutex<Conn>,
    long_reads: LongReads<'a>,
    structured: bool,
}

/// The second thread of a plain-file connection: sends long reads' replies and does
/// long writes.
fn bulk_worker(
    file: &FileExport,
    out: &BulkOut<'_>,
    jobs: &mpsc::Receiver<Bulk>,
    pool: &BufferPool,
) -> io::Result<()> {
    let (writer, structured) = (out.writer, out.structured);
    // Without one (too many open files), long reads fall back to sendfile.
    let pipe = match out.long_reads {
        LongReads::ByReference(_) => Pipe::new().ok(),
        LongReads::Buffered | LongReads::Mapped(..) => None,
    };
    let mut lane = Lane::default();
    lane.note(crate::lane::BULK_BYTES);
    let mut failed = None;
    while let Ok(job) = jobs.recv() {
        if failed.is_some() {
            continue;
        }
        let sent = match job {
            Bulk::Reply(bytes) => {
                let sent = send_locked(writer, &bytes);
                pool.give(bytes);
                sent
            }
            Bulk::Read { req, populated } => send_read(file, &req, out, pipe.as_ref(), populated),
            Bulk::Write {
                cookie,
                offset,
                fua,
                data,
            } => {
                let done = file.write(&data, offset, fua);
                pool.give(data);
                send_locked(writer, &answer(done, structured, cookie, "write"))
            }
            Bulk::Durable { cookie } => {
                send_locked(writer, &answer(file.flush(), structured, cookie, "flush"))
            }
        };
        if let Err(e) = sent {
            failed = Some(e);
        }
    }
    failed.map_or(Ok(()), Err)
}

/// The reply to a write or flush: success, or `errno` with "`what` error on the export".
fn answer(done: Result<(), u32>, structured: bool, cookie: u64, what: &str) -> Vec<u8> {
    let mut reply = Vec::new();
    match done {
        Ok(()) => push_ok(&mut reply, structured, cookie),
        Err(errno) => push_error(
            &mut reply,
            structured,
            cookie,
            errno,
            &format!("{what} error on the export"),
        ),
    }
    reply
}

/// The first thread of a plain-file connection: reads requests, answers short ones
/// inline (replies batched into one write), and hands long ones to the bulk thread.
fn read_file_requests(
    reader: Conn,
    file: &FileExport,
    n: &Negotiated,
    writer: &Mutex<Conn>,
    bulk: &mpsc::SyncSender<Bulk>,
    pool: &BufferPool,
    long_reads: LongReads<'_>,
) -> Result<(), ConnEnd> {
    // Long writes' payloads go from the socket to the file through a pipe where the
    // connection has no TLS (zero_copy::receive_into_file).
    let sock = match &reader {
        Conn::Plain(s) => Some(s.as_raw_fd()),
        Conn::Tls { .. } => None,
    };
    let mut pipe = sock.and_then(|_| Pipe::new().ok());
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    let mut out: Vec<u8> = Vec::with_capacity(WRITE_BATCH_BYTES);
    let mut payload: Vec<u8> = Vec::new();
    let mut lane = Lane::default();
    let bulk_gone = || ConnEnd::Protocol("the connection's bulk thread stopped".to_owned());
    let result = loop {
        if !out.is_empty() && (reader.buffer().is_empty() || out.len() >= WRITE_BATCH_BYTES) {
            send_locked(writer, &out)?;
            out.clear();
        }
        let req = match next_request(&mut reader) {
            Ok(r) => r,
            Err(e) => break Err(e),
        };
        if req.command == Command::Disconnect {
            break Ok(());
        }
        lane.note(req.length);
        let checked = check(&req, n);
        if let Some((errno, msg)) = checked.error {
            if req.command == Command::Write {
                skip_payload(&mut reader, req.length)?;
            }
            push_error(&mut out, n.structured, req.cookie, errno, &msg);
            continue;
        }
        if checked.empty {
            push_ok(&mut out, n.structured, req.cookie);
            continue;
        }
        let long = req.length >= HOLE_CHECK_BYTES;
        if long && req.command == Command::Read && !matches!(long_reads, LongReads::Buffered) {
            // The pages of a file without holes are faulted in here, off the bulk
            // thread, which the stream's pace is set by.
            let mut populated = false;
            if let LongReads::Mapped(_, m) = long_reads {
                if !file.may_have_holes() {
                    if let Err(e) = m.populate(req.offset, req.length as usize) {
                        let msg = "read error on the export";
                        push_error(&mut out, n.structured, req.cookie, errno_of(&e), msg);
                        continue;
                    }
                    populated = true;
                }
            }
            let job = Bulk::Read { req, populated };
            bulk.send(job).map_err(|_| bulk_gone())?;
            continue;
        }
        if long && req.command == Command::Read {
            let mut reply = pool.take(req.length as usize + 64);
            file_read_long(file, &req, n.structured, &mut reply);
            bulk.send(Bulk::Reply(reply)).map_err(|_| bulk_gone())?;
            continue;
        }
        let spliced_write = long && req.command == Command::Write && pipe.is_some();
        if let Some(sock) = sock.filter(|_| spliced_write) {
            let fua = req.flags & CMD_FLAG_FUA != 0;
            match write_spliced(file, &req, &mut reader, sock, &mut pipe, pool)? {
                Ok(()) if fua => {
                    let job = Bulk::Durable { cookie: req.cookie };
                    bulk.send(job).map_err(|_| bulk_gone())?;
                }
                Ok(()) => push_ok(&mut out, n.structured, req.cookie),
                Err(errno) => push_error(
                    &mut out,
                    n.structured,
                    req.cookie,
                    errno,
                    "write error on the export",
                ),
            }
            continue;
        }
        if long && req.command == Command::Write {
            let mut data = pool.take_filled(req.length as usize);
            read_payload(&mut reader, &mut data)?;
            let job = Bulk::Write {
                cookie: req.cookie,
                offset: req.offset,
                fua: req.flags & CMD_FLAG_FUA != 0,
                data,
            };
            bulk.send(job).map_err(|_| bulk_gone())?;
            continue;
        }
        handle_file_request(file, n, &req, &mut reader, &mut out, &mut payload)?;
    };
    // Replies to requests that were done still go out.
    if !out.is_empty() {
        let _ = send_locked(writer, &out);
    }
    result
}

/// Writes a long write's payload to the file, not through a buffer of ours: what the
/// reader already holds of it is written from there, the rest goes from the socket to
/// the file through `pipe`. A socket that cannot be spliced from loses the pipe (for
/// good: this and later payloads are read the ordinary way). Returns the file's
/// verdict, once the whole payload is off the socket.
fn write_spliced(
    file: &FileExport,
    req: &Request,
    reader: &mut BufReader<Conn>,
    sock: RawFd,
    pipe: &mut Option<Pipe>,
    pool: &BufferPool,
) -> Result<Result<(), u32>, ConnEnd> {
    let len = req.length as usize;
    let have = reader.buffer().len().min(len);
    let head = file.write(&reader.buffer()[..have], req.offset, false);
    reader.consume(have);
    let (rest, at) = (len - have, req.offset + have as u64);
    if rest == 0 {
        return Ok(head);
    }
    if let Some(p) = pipe.as_ref() {
        let target = head.is_ok().then(|| file.raw_fd());
        match receive_into_file(sock, p, target, at, rest) {
            Ok(Received::Written) => return Ok(head),
            Ok(Received::FileFailed(e)) => return Ok(Err(errno_of(&e))),
            Err(ReceiveError::Socket(e)) => return Err(ConnEnd::Io(e)),
            Err(ReceiveError::Unspliceable) => *pipe = None,
        }
    }
    let mut data = pool.take_filled(rest);
    read_payload(reader, &mut data)?;
    let tail = head.and_then(|()| file.write(&data, at, false));
    pool.give(data);
    Ok(tail)
}

fn handle_file_request<R: Read>(
    file: &FileExport,
    n: &Negotiated,
    req: &Request,
    reader: &mut R,
    out: &mut Vec<u8>,
    payload: &mut Vec<u8>,
) -> Result<(), ConnEnd> {
    let structured = n.structured;
    let cookie = req.cookie;
    let fua = req.flags & CMD_FLAG_FUA != 0;
    let len = u64::from(req.length);
    let result = match req.command {
        Command::Read => {
            file_read(file, req, structured, out);
            return Ok(());
        }
        Command::Write => {
            payload.resize(req.length as usize, 0);
            read_payload(reader, payload)?;
            file.write(payload, req.offset, fua)
        }
        Command::Flush => file.flush(),
        Command::Trim => file.trim(req.offset, len, fua),
        Command::WriteZeroes => file.write_zeroes(
            req.offset,
            len,
            req.flags & CMD_FLAG_NO_HOLE == 0,
            req.flags & CMD_FLAG_FAST_ZERO != 0,
            fua,
        ),
        Command::Cache => file.cache(req.offset, len),
        Command::BlockStatus => {
            let max = if req.flags & CMD_FLAG_REQ_ONE != 0 {
                1
            } else {
                MAX_EXTENTS
            };
            let extents: Vec<BlockDescriptor> = file
                .extents(req.offset, len, max)
                .iter()
                .map(|e| BlockDescriptor {
                    length: u32::try_from(e.length).unwrap_or(u32::MAX),
                    flags: e.nbd_flags(),
                })
                .collect();
            out.extend_from_slice(&block_status_chunk(
                REPLY_FLAG_DONE,
                cookie,
                BASE_ALLOCATION_ID,
                &extents,
            ));
            return Ok(());
        }
        Command::Disconnect | Command::Unknown(_) => Ok(()),
    };
    match result {
        Ok(()) => push_ok(out, structured, cookie),
        Err(errno) => push_error(out, structured, cookie, errno, "I/O error on the export"),
    }
    Ok(())
}

/// A short file read, straight into the reply buffer.
fn file_read(file: &FileExport, req: &Request, structured: bool, out: &mut Vec<u8>) {
    let cookie = req.cookie;
    let start = out.len();
    if structured {
        out.extend_from_slice(&offset_data_header(
            REPLY_FLAG_DONE,
            cookie,
            req.offset,
            req.length,
        ));
    } else {
        out.extend_from_slice(&simple_reply(0, cookie));
    }
    if let Err(errno) = file.read_append(out, req.length as usize, req.offset) {
        out.truncate(start);
        push_error(out, structured, cookie, errno, "read error on the export");
    }
}

/// The pieces a long read's reply is made of: with structured replies, the data and
/// hole extents of a file that has holes (covering the request: a range all data is
/// one data extent, all hole one hole extent); otherwise none, and the reply is one
/// piece of data.
fn read_extents(file: &FileExport, req: &Request, structured: bool, holes: bool) -> Vec<Extent> {
    if !structured || req.flags & CMD_FLAG_DF != 0 || !holes {
        return Vec::new();
    }
    let mut extents = file.extents(req.offset, u64::from(req.length), MAX_EXTENTS);
    let covered: u64 = extents.iter().map(|e| e.length).sum();
    if covered != u64::from(req.length) {
        extents.clear();
    }
    extents
}

/// A chunk's header for one extent of a long read: a hole chunk (complete) or the
/// header of a data chunk whose data follows.
fn extent_header(e: &Extent, last: bool, cookie: u64) -> Vec<u8> {
    let flags = if last { REPLY_FLAG_DONE } else { 0 };
    // Extents lie within one request, so each fits in u32.
    let length = e.length as u32;
    if e.hole {
        offset_hole_chunk(flags, cookie, e.offset, length).to_vec()
    } else {
        offset_data_header(flags, cookie, e.offset, length).to_vec()
    }
}

/// A long file read into `out`: with structured replies, holes in a file that has
/// any go out as hole chunks, data as data chunks.
fn file_read_long(file: &FileExport, req: &Request, structured: bool, out: &mut Vec<u8>) {
    let cookie = req.cookie;
    let extents = read_extents(file, req, structured, file.may_have_holes());
    if extents.is_empty() {
        file_read(file, req, structured, out);
        return;
    }
    let last = extents.len() - 1;
    for (i, e) in extents.iter().enumerate() {
        out.extend_from_slice(&extent_header(e, i == last, cookie));
        if e.hole {
            continue;
        }
        if let Err(errno) = file.read_append(out, e.length as usize, e.offset) {
            out.clear();
            push_error(out, structured, cookie, errno, "read error on the export");
            return;
        }
    }
}

/// Answers a long read on a connection without TLS: the file's pages are copied to the
/// socket from their mapping, or go by reference (spliced through `pipe`, or with
/// sendfile when there is none) with each chunk's header sent before them with
/// `send(MSG_MORE)`; all under the writer's lock so no other reply comes between. A file error found before a chunk's header went out ends the reply
/// with an error (structured replies may, after complete chunks); one found after it
/// cannot be taken back, so the connection is closed.
fn send_read(
    file: &FileExport,
    req: &Request,
    out: &BulkOut<'_>,
    pipe: Option<&Pipe>,
    populated: bool,
) -> io::Result<()> {
    let (structured, cookie) = (out.structured, req.cookie);
    let (sock, mapping) = match out.long_reads {
        LongReads::ByReference(sock) => (sock, None),
        LongReads::Mapped(sock, m) => (sock, Some(m)),
        LongReads::Buffered => return Err(io::Error::other("zero-copy read on a TLS connection")),
    };
    let end = req.offset + u64::from(req.length);
    let read_error = |errno: u32| {
        let mut reply = Vec::new();
        push_error(
            &mut reply,
            structured,
            cookie,
            errno,
            "read error on the export",
        );
        reply
    };
    let holes = match file.now() {
        Ok((size, holes)) if size >= end => holes,
        // The file was cut short (or cannot even be looked at): an error reply, before
        // any of this reply went out.
        Ok(_) | Err(_) => return send_locked(out.writer, &read_error(EIO)),
    };
    let mut extents = read_extents(file, req, structured, holes);
    if mapping.is_some() && holes && extents.is_empty() {
        // Holes to be sent as data: through the mapping, tmpfs would fill them (a read
        // fault there allocates a page), so they are read, as zeros, into a buffer.
        let mut reply = Vec::with_capacity(req.length as usize + 64);
        file_read_long(file, req, structured, &mut reply);
        return send_locked(out.writer, &reply);
    }
    if extents.is_empty() {
        extents.push(Extent {
            offset: req.offset,
            length: u64::from(req.length),
            hole: false,
        });
    }
    let mut header = Vec::with_capacity(64);
    let _writer = out.writer.lock().unwrap_or_else(PoisonError::into_inner);
    let last = extents.len() - 1;
    for (i, e) in extents.iter().enumerate() {
        if structured {
            header.extend_from_slice(&extent_header(e, i == last, cookie));
        } else {
            header.extend_from_slice(&simple_reply(0, cookie));
        }
        if e.hole {
            continue;
        }
        let sent = match mapping {
            Some(m) => m.send(sock, &header, e.offset, e.length as usize, !populated),
            None => send_header_and_file(
                sock,
                pipe,
                &header,
                file.raw_fd(),
                e.offset,
                e.length as usize,
            ),
        };
        match sent {
            Ok(()) => header.clear(),
            Err(SendFileError::FileEarly(err)) => {
                // Complete chunks of this reply may be out (structured replies; a
                // simple one has sent nothing): an error ends it.
                header.clear();
                header.extend_from_slice(&read_error(errno_of(&err)));
                return send_all(sock, &header, false);
            }
            Err(SendFileError::FileLate(err)) => {
                // Part of a chunk is out: the client cannot be told of the error, so
                // it must not take what follows for the rest of it.
                // SAFETY: shutdown takes no pointers; `sock` is this connection's
                // socket, still open (the writer's lock is held).
                unsafe { libc::shutdown(sock, libc::SHUT_RDWR) };
                return Err(SendFileError::FileLate(err).into_io());
            }
            Err(err) => return Err(err.into_io()),
        }
    }
    if !header.is_empty() {
        send_all(sock, &header, false)?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "file_transmission_tests.rs"]
mod tests;
