//! The transmission phase: requests in, replies out, for the two kinds of export.
//!
//! A plain file is served inline by the connection's thread: it reads every request the
//! socket has buffered, does each, and sends the replies of the batch in one write.
//! An array export splits the connection in two: this thread reads requests and hands
//! them to the array's worker; a writer thread sends replies in the order they finish
//! (NBD lets replies overtake each other), so a slow request never holds back others.

use std::io::{self, BufReader, IoSlice, Read, Write};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use xraid_engine::IoBuf;
use xraid_nbd::consts::*;
use xraid_nbd::{
    block_status_chunk, error_chunk, offset_data_header, offset_hole_chunk, simple_reply,
    BlockDescriptor, Command, Request, REQUEST_BYTES,
};

use crate::array_export::{ArrayHandle, Done, Job, JobOp, ReadData};
use crate::export::{ExportKind, MAX_REQUEST_BYTES};
use crate::file_export::FileExport;
use crate::handshake::{Negotiated, BASE_ALLOCATION_ID};
use crate::lane::Lane;
use crate::tls::Conn;

/// Bytes of requests read from the socket at once.
const READ_BUFFER_BYTES: usize = 256 * 1024;
/// Replies are sent once this much is batched, even with more requests waiting.
const WRITE_BATCH_BYTES: usize = 1 << 20;
/// Reads at least this long are checked for holes (shorter ones are sent as data:
/// looking costs more than sending a few zeros), and their data goes from the file to
/// the socket with sendfile(2) instead of through a buffer.
const HOLE_CHECK_BYTES: u32 = 64 * 1024;
/// Most extents in one block status reply.
const MAX_EXTENTS: usize = 1024;
/// Requests one array connection may have in flight, and their bytes: beyond that
/// the connection stops reading until replies have gone out.
const MAX_IN_FLIGHT: usize = 256;
const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnEnd {
    #[error("client disconnected")]
    Disconnect,
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Protocol(String),
}

/// What a request is checked against before it is done.
struct Checked {
    error: Option<(u32, String)>,
}

/// The generic checks: known flags, range inside the export, alignment, size limit,
/// writes to a read-only export.
fn check(req: &Request, n: &Negotiated) -> Checked {
    let export = &n.export;
    let size = export.size();
    let fail = |errno: u32, msg: String| Checked {
        error: Some((errno, msg)),
    };
    let known =
        CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_DF | CMD_FLAG_REQ_ONE | CMD_FLAG_FAST_ZERO;
    if req.flags & !known != 0 {
        return fail(EINVAL, format!("unknown command flags {:#x}", req.flags));
    }
    let ranged = matches!(
        req.command,
        Command::Read
            | Command::Write
            | Command::Trim
            | Command::Cache
            | Command::WriteZeroes
            | Command::BlockStatus
    );
    if ranged {
        let end = req.offset.checked_add(u64::from(req.length));
        if end.is_none_or(|end| end > size) {
            return fail(
                EINVAL,
                format!(
                    "request for {} bytes at {} reaches past the export's end ({size} bytes)",
                    req.length, req.offset
                ),
            );
        }
        let min = u64::from(export.min_block());
        let aligned = req.offset.is_multiple_of(min) && u64::from(req.length) % min == 0;
        if !aligned && req.command != Command::BlockStatus {
            return fail(
                EINVAL,
                format!("offset and length must be multiples of {min} bytes"),
            );
        }
        if req.length == 0 && req.command == Command::BlockStatus {
            return fail(EINVAL, "block status of 0 bytes".to_owned());
        }
    }
    if matches!(req.command, Command::Read | Command::Write) && req.length > MAX_REQUEST_BYTES {
        let errno = if n.structured { EOVERFLOW } else { EINVAL };
        return fail(
            errno,
            format!("requests are limited to {MAX_REQUEST_BYTES} bytes"),
        );
    }
    let writes = matches!(
        req.command,
        Command::Write | Command::Trim | Command::WriteZeroes
    );
    if writes && export.read_only {
        return fail(EPERM, "the export is read-only".to_owned());
    }
    if req.command == Command::BlockStatus && !n.base_allocation {
        return fail(EINVAL, "no metadata context was negotiated".to_owned());
    }
    if let Command::Unknown(c) = req.command {
        return fail(EINVAL, format!("unknown command {c}"));
    }
    Checked { error: None }
}

/// Appends an error reply in the negotiated style.
fn push_error(out: &mut Vec<u8>, structured: bool, cookie: u64, errno: u32, msg: &str) {
    if structured {
        out.extend_from_slice(&error_chunk(REPLY_FLAG_DONE, cookie, errno, msg));
    } else {
        out.extend_from_slice(&simple_reply(errno, cookie));
    }
}

/// Appends a success reply without data.
fn push_ok(out: &mut Vec<u8>, structured: bool, cookie: u64) {
    if structured {
        out.extend_from_slice(&xraid_nbd::structured_header(
            REPLY_FLAG_DONE,
            REPLY_TYPE_NONE,
            cookie,
            0,
        ));
    } else {
        out.extend_from_slice(&simple_reply(0, cookie));
    }
}

/// Reads the next request header; a clean end of stream between requests is a
/// disconnect.
fn next_request<R: Read>(reader: &mut R) -> Result<Request, ConnEnd> {
    let mut header = [0u8; REQUEST_BYTES];
    if let Err(e) = reader.read_exact(&mut header) {
        return Err(if e.kind() == io::ErrorKind::UnexpectedEof {
            ConnEnd::Disconnect
        } else {
            ConnEnd::Io(e)
        });
    }
    Request::parse(&header).map_err(|e| ConnEnd::Protocol(format!("request: {e}")))
}

/// Reads and drops a write's payload that will not be used.
fn skip_payload<R: Read>(reader: &mut R, length: u32) -> Result<(), ConnEnd> {
    if length > MAX_REQUEST_BYTES {
        // Reading gigabytes only to throw them away is what a flood wants: close.
        return Err(ConnEnd::Protocol(format!(
            "write of {length} bytes is over the {MAX_REQUEST_BYTES}-byte limit"
        )));
    }
    io::copy(&mut reader.take(u64::from(length)), &mut io::sink())?;
    Ok(())
}

/// Serves a plain-file export on this thread until the client leaves.
pub(crate) fn serve_file(reader: Conn, writer: Conn, n: &Negotiated) -> Result<(), ConnEnd> {
    let ExportKind::File(file) = &n.export.kind else {
        return Err(ConnEnd::Protocol("not a file export".to_owned()));
    };
    let writer = Arc::new(Mutex::new(writer));
    let pool = BufferPool::default();
    let (bulk_tx, bulk_rx) = mpsc::sync_channel::<Bulk>(BULK_QUEUE);
    let result = std::thread::scope(|scope| {
        let (writer, pool) = (&writer, &pool);
        let bulk = scope.spawn(move || bulk_worker(file, n.structured, writer, &bulk_rx, pool));
        let result = read_file_requests(reader, file, n, writer, &bulk_tx, pool);
        drop(bulk_tx);
        let bulk_result = bulk
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("bulk thread panicked")));
        result.and(bulk_result.map_err(ConnEnd::Io))
    });
    result
}

/// Large requests of a plain-file connection, handed from the thread that reads
/// requests to a second thread: the file copy of one request then overlaps the socket
/// copy of the next, on two cores.
enum Bulk {
    /// A complete reply (a long read's header and data), to be sent as it is.
    Reply(Vec<u8>),
    /// A long write's payload, to be written to the file, then answered.
    Write {
        cookie: u64,
        offset: u64,
        fua: bool,
        data: Vec<u8>,
    },
}

/// Long reads and writes in the bulk queue before the reading thread waits.
const BULK_QUEUE: usize = 4;

/// Recycled buffers of long requests, so that a megabyte is not mapped and faulted
/// in anew for every request.
#[derive(Default)]
struct BufferPool(Mutex<Vec<Vec<u8>>>);

impl BufferPool {
    fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        buf.clear();
        buf.reserve(len);
        buf
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

/// The second thread of a plain-file connection: sends long reads' replies and does
/// long writes.
fn bulk_worker(
    file: &FileExport,
    structured: bool,
    writer: &Mutex<Conn>,
    jobs: &mpsc::Receiver<Bulk>,
    pool: &BufferPool,
) -> io::Result<()> {
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
            Bulk::Write {
                cookie,
                offset,
                fua,
                data,
            } => {
                let mut reply = Vec::new();
                match file.write(&data, offset, fua) {
                    Ok(()) => push_ok(&mut reply, structured, cookie),
                    Err(errno) => push_error(
                        &mut reply,
                        structured,
                        cookie,
                        errno,
                        "write error on the export",
                    ),
                }
                pool.give(data);
                send_locked(writer, &reply)
            }
        };
        if let Err(e) = sent {
            failed = Some(e);
        }
    }
    failed.map_or(Ok(()), Err)
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
) -> Result<(), ConnEnd> {
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
        let long = req.length >= HOLE_CHECK_BYTES;
        if long && req.command == Command::Read {
            let mut reply = pool.take(req.length as usize + 64);
            file_read_long(file, &req, n.structured, &mut reply);
            bulk.send(Bulk::Reply(reply)).map_err(|_| bulk_gone())?;
            continue;
        }
        if long && req.command == Command::Write {
            let mut data = pool.take(req.length as usize);
            data.resize(req.length as usize, 0);
            reader.read_exact(&mut data)?;
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
            reader.read_exact(payload)?;
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
    let at = out.len();
    out.resize(at + req.length as usize, 0);
    if let Err(errno) = file.read(&mut out[at..], req.offset) {
        out.truncate(start);
        push_error(out, structured, cookie, errno, "read error on the export");
    }
}

/// A long file read into `out`: with structured replies, holes in a file that has
/// any go out as hole chunks, data as data chunks.
fn file_read_long(file: &FileExport, req: &Request, structured: bool, out: &mut Vec<u8>) {
    let cookie = req.cookie;
    let mut extents = if structured && req.flags & CMD_FLAG_DF == 0 && file.may_have_holes() {
        file.extents(req.offset, u64::from(req.length), MAX_EXTENTS)
    } else {
        Vec::new()
    };
    let covered: u64 = extents.iter().map(|e| e.length).sum();
    if covered != u64::from(req.length) || extents.len() <= 1 {
        extents.clear();
    }
    if extents.is_empty() {
        file_read(file, req, structured, out);
        return;
    }
    let last = extents.len() - 1;
    for (i, e) in extents.iter().enumerate() {
        let flags = if i == last { REPLY_FLAG_DONE } else { 0 };
        // Extents lie within one request, so each fits in u32.
        let length = e.length as u32;
        if e.hole {
            out.extend_from_slice(&offset_hole_chunk(flags, cookie, e.offset, length));
            continue;
        }
        out.extend_from_slice(&offset_data_header(flags, cookie, e.offset, length));
        let at = out.len();
        out.resize(at + length as usize, 0);
        if let Err(errno) = file.read(&mut out[at..], e.offset) {
            out.clear();
            push_error(out, structured, cookie, errno, "read error on the export");
            return;
        }
    }
}

/// Limits one connection's requests in flight (count and bytes).
#[derive(Debug, Default)]
struct InFlight {
    state: Mutex<(usize, usize)>,
    freed: Condvar,
}

impl InFlight {
    fn acquire(&self, bytes: usize) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while s.0 > 0 && (s.0 >= MAX_IN_FLIGHT || s.1 + bytes > MAX_IN_FLIGHT_BYTES) {
            s = self.freed.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        s.0 += 1;
        s.1 += bytes;
    }

    fn release(&self, count: usize, bytes: usize) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.0 -= count;
        s.1 -= bytes;
        self.freed.notify_all();
    }
}

/// Serves an array export: this thread reads requests, a writer thread sends replies.
pub(crate) fn serve_array(reader: Conn, writer: Conn, n: &Negotiated) -> Result<(), ConnEnd> {
    let ExportKind::Array(array) = &n.export.kind else {
        return Err(ConnEnd::Protocol("not an array export".to_owned()));
    };
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    let in_flight = Arc::new(InFlight::default());
    let structured = n.structured;
    let writer_flight = Arc::clone(&in_flight);
    let writer_thread = std::thread::Builder::new()
        .name("xraid-conn-w".to_owned())
        .spawn(move || write_replies(writer, &done_rx, structured, &writer_flight))?;
    let result = read_array_requests(reader, n, array, &done_tx, &in_flight);
    drop(done_tx);
    // The writer ends once every job holding a sender has replied.
    let written = writer_thread
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("reply writer panicked")));
    result?;
    written.map_err(ConnEnd::Io)
}

fn read_array_requests<S: Read>(
    reader: S,
    n: &Negotiated,
    array: &ArrayHandle,
    done: &Sender<Done>,
    in_flight: &InFlight,
) -> Result<(), ConnEnd> {
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    let structured = n.structured;
    let raw = |bytes: Vec<u8>| {
        in_flight.acquire(0);
        // The writer is gone only if the socket failed; the read loop ends then too.
        let _ = done.send(Done::Raw { bytes, releases: 1 });
    };
    let mut lane = Lane::default();
    loop {
        let req = next_request(&mut reader)?;
        if req.command == Command::Disconnect {
            return Ok(());
        }
        lane.note(req.length);
        let checked = check(&req, n);
        if let Some((errno, msg)) = checked.error {
            if req.command == Command::Write {
                skip_payload(&mut reader, req.length)?;
            }
            let mut out = Vec::new();
            push_error(&mut out, structured, req.cookie, errno, &msg);
            raw(out);
            continue;
        }
        let fua = req.flags & CMD_FLAG_FUA != 0;
        let len = req.length as usize;
        let op = match req.command {
            Command::Read => JobOp::Read {
                offset: req.offset,
                len,
            },
            Command::Write => {
                let mut buf = IoBuf::new(len);
                reader.read_exact(&mut buf.as_mut_slice()[..len])?;
                JobOp::Write {
                    offset: req.offset,
                    buf,
                    len,
                    fua,
                }
            }
            Command::Flush => JobOp::Flush,
            Command::WriteZeroes if req.flags & CMD_FLAG_FAST_ZERO != 0 => {
                // Zeroing an array means writing every member: never fast.
                let mut out = Vec::new();
                push_error(
                    &mut out,
                    structured,
                    req.cookie,
                    ENOTSUP,
                    "zeroing an array is not fast",
                );
                raw(out);
                continue;
            }
            Command::WriteZeroes => JobOp::WriteZeroes {
                offset: req.offset,
                len: u64::from(req.length),
                fua,
            },
            // A trim is a hint: the array keeps the data. With FUA, what was written
            // must still be durable.
            Command::Trim if fua => JobOp::Flush,
            Command::Trim | Command::Cache => {
                let mut out = Vec::new();
                push_ok(&mut out, structured, req.cookie);
                raw(out);
                continue;
            }
            Command::BlockStatus => {
                let length = u32::try_from((array.size - req.offset).min(u64::from(req.length)))
                    .unwrap_or(u32::MAX);
                raw(block_status_chunk(
                    REPLY_FLAG_DONE,
                    req.cookie,
                    BASE_ALLOCATION_ID,
                    &[BlockDescriptor { length, flags: 0 }],
                ));
                continue;
            }
            Command::Disconnect | Command::Unknown(_) => continue,
        };
        let bytes = op.bytes_in_flight();
        in_flight.acquire(bytes);
        let job = Job {
            op,
            cookie: req.cookie,
            done: done.clone(),
            flight_bytes: bytes,
        };
        if let Err(job) = array.submit(job) {
            let mut out = Vec::new();
            push_error(
                &mut out,
                structured,
                job.cookie,
                ESHUTDOWN,
                "the array is stopping",
            );
            in_flight.release(1, bytes);
            raw(out);
        }
    }
}

impl JobOp {
    fn bytes_in_flight(&self) -> usize {
        match self {
            JobOp::Read { len, .. } | JobOp::Write { len, .. } => *len,
            JobOp::WriteZeroes { .. } | JobOp::Flush | JobOp::Control { .. } => 0,
        }
    }
}

/// The writer thread: sends each finished job's reply, batching what is ready.
fn write_replies<S: Write>(
    mut stream: S,
    done: &Receiver<Done>,
    structured: bool,
    in_flight: &InFlight,
) -> io::Result<()> {
    let mut failed: Option<io::Error> = None;
    while let Ok(first) = done.recv() {
        let mut batch = vec![first];
        while batch.len() < 64 {
            match done.try_recv() {
                Ok(d) => batch.push(d),
                Err(_) => break,
            }
        }
        let mut count = 0;
        let mut bytes = 0;
        let mut headers: Vec<Vec<u8>> = Vec::with_capacity(batch.len());
        for d in &batch {
            match d {
                Done::Raw { releases, .. } => count += releases,
                Done::Job { flight_bytes, .. } => {
                    count += 1;
                    bytes += flight_bytes;
                }
            }
            headers.push(reply_header(d, structured));
        }
        if failed.is_none() {
            if let Err(e) = send_batch(&mut stream, &batch, &headers) {
                failed = Some(e);
            }
        }
        in_flight.release(count, bytes);
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The bytes before a reply's data (or the whole reply when it has none).
fn reply_header(d: &Done, structured: bool) -> Vec<u8> {
    match d {
        Done::Raw { bytes, .. } => bytes.clone(),
        Done::Job { cookie, result, .. } => {
            let mut out = Vec::new();
            match result {
                Ok(Some(ReadData { offset, len, .. })) => {
                    if structured {
                        out.extend_from_slice(&offset_data_header(
                            REPLY_FLAG_DONE,
                            *cookie,
                            *offset,
                            *len as u32,
                        ));
                    } else {
                        out.extend_from_slice(&simple_reply(0, *cookie));
                    }
                }
                Ok(None) => push_ok(&mut out, structured, *cookie),
                Err(errno) => push_error(&mut out, structured, *cookie, *errno, "array I/O failed"),
            }
            out
        }
    }
}

fn send_batch<S: Write>(stream: &mut S, batch: &[Done], headers: &[Vec<u8>]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(batch.len() * 2);
    for (d, h) in batch.iter().zip(headers) {
        slices.push(IoSlice::new(h));
        if let Done::Job {
            result: Ok(Some(r)),
            ..
        } = d
        {
            slices.push(IoSlice::new(&r.buf.as_slice()[..r.len]));
        }
    }
    write_all_vectored(stream, &mut slices)
}

fn write_all_vectored<S: Write>(stream: &mut S, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !slices.is_empty() {
        match stream.write_vectored(slices) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "socket closed")),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
