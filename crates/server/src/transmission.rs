//! The transmission phase: requests in, replies out, for the two kinds of export.
//!
//! A plain file is served by `file_transmission`. An array export splits the
//! connection in two: this thread reads requests and hands them to the array's worker;
//! a writer thread sends replies in the order they finish (NBD lets replies overtake
//! each other), so a slow request never holds back others. The checks and reply
//! helpers here are shared by both.

use std::io::{self, BufReader, IoSlice, Read, Write};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use xraid_engine::IoBufPool;
use xraid_nbd::consts::*;
use xraid_nbd::{error_chunk, offset_data_header, simple_reply, Command, Request, REQUEST_BYTES};

use crate::array_export::{ArrayHandle, Done, Job, JobOp, ReadData};
use crate::export::{ExportKind, MAX_REQUEST_BYTES};
use crate::handshake::Negotiated;
use crate::lane::Lane;
use crate::tls::Conn;

pub(crate) use crate::file_transmission::serve_file;

/// Bytes of requests read from the socket at once: many small requests, but little
/// of a large write's payload (what the buffer holds of it is copied once more).
pub(crate) const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Most extents in one block status reply of an array.
const MAX_ARRAY_EXTENTS: usize = 1024;
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
    #[error(
        "the client left in the middle of a write's {0}-byte payload; that write was not done"
    )]
    LeftMidPayload(usize),
}

/// What a request is checked against before it is done.
pub(crate) struct Checked {
    pub(crate) error: Option<(u32, String)>,
    /// A read, write, trim, zeroing or cache of no bytes: answered with success at
    /// once, touching nothing (the protocol leaves them unspecified but asks the server
    /// not to disconnect; a zero-length structured read has no valid data chunk).
    pub(crate) empty: bool,
}

/// The generic checks: known flags, range inside the export, alignment, size limit,
/// writes to a read-only export.
pub(crate) fn check(req: &Request, n: &Negotiated) -> Checked {
    let export = &n.export;
    let size = export.size();
    let fail = |errno: u32, msg: String| Checked {
        error: Some((errno, msg)),
        empty: false,
    };
    let known =
        CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_DF | CMD_FLAG_REQ_ONE | CMD_FLAG_FAST_ZERO;
    if req.flags & !known != 0 {
        return fail(EINVAL, format!("unknown command flags {:#x}", req.flags));
    }
    if req.flags & !flags_valid_for(req.command) != 0 {
        return fail(
            EINVAL,
            format!(
                "command flags {:#x} are not valid for this command",
                req.flags & !flags_valid_for(req.command)
            ),
        );
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
            // The protocol asks for ENOSPC where a write would pass the end.
            let writes_data = matches!(req.command, Command::Write | Command::WriteZeroes);
            return fail(
                if writes_data { ENOSPC } else { EINVAL },
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
        // EOVERFLOW only where the client asked not to have the read fragmented.
        let errno = if n.structured && req.flags & CMD_FLAG_DF != 0 {
            EOVERFLOW
        } else {
            EINVAL
        };
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
    let empty = req.length == 0
        && matches!(
            req.command,
            Command::Read | Command::Write | Command::Trim | Command::WriteZeroes | Command::Cache
        );
    Checked { error: None, empty }
}

/// The command flags a command may carry: FUA on any (the protocol has the server
/// accept it everywhere, even by ignoring it), the others only where they mean
/// something.
fn flags_valid_for(command: Command) -> u16 {
    CMD_FLAG_FUA
        | match command {
            Command::Read => CMD_FLAG_DF,
            Command::WriteZeroes => CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
            Command::BlockStatus => CMD_FLAG_REQ_ONE,
            _ => 0,
        }
}

/// Appends an error reply in the negotiated style.
pub(crate) fn push_error(out: &mut Vec<u8>, structured: bool, cookie: u64, errno: u32, msg: &str) {
    if structured {
        out.extend_from_slice(&error_chunk(REPLY_FLAG_DONE, cookie, errno, msg));
    } else {
        out.extend_from_slice(&simple_reply(errno, cookie));
    }
}

/// Appends a success reply without data.
pub(crate) fn push_ok(out: &mut Vec<u8>, structured: bool, cookie: u64) {
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
pub(crate) fn next_request<R: Read>(reader: &mut R) -> Result<Request, ConnEnd> {
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

/// Reads a write's payload into `buf`; a client gone before the end of it is said
/// so in words (the bare error is "failed to fill whole buffer").
pub(crate) fn read_payload<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<(), ConnEnd> {
    reader.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ConnEnd::LeftMidPayload(buf.len())
        } else {
            ConnEnd::Io(e)
        }
    })
}

/// Reads and drops a write's payload that will not be used.
pub(crate) fn skip_payload<R: Read>(reader: &mut R, length: u32) -> Result<(), ConnEnd> {
    if length > MAX_REQUEST_BYTES {
        // Reading gigabytes only to throw them away is what a flood wants: close.
        return Err(ConnEnd::Protocol(format!(
            "write of {length} bytes is over the {MAX_REQUEST_BYTES}-byte limit"
        )));
    }
    io::copy(&mut reader.take(u64::from(length)), &mut io::sink())?;
    Ok(())
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
    let pool = array.pool.clone();
    let breaker = writer.try_clone()?;
    let writer_thread = std::thread::Builder::new()
        .name("xraid-conn-w".to_owned())
        .spawn(move || {
            let written = write_replies(writer, &done_rx, structured, &writer_flight, &pool);
            if written.is_err() {
                // Replies can no longer reach the client: stop reading its requests
                // too, rather than do their I/O for nobody.
                breaker.abort();
            }
            written
        })?;
    let result = read_array_requests(reader, n, array, &done_tx, &in_flight);
    drop(done_tx);
    // The writer ends once every job holding a sender has replied.
    let written = writer_thread
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("reply writer panicked")));
    match (result, written) {
        // The client went away: what the reader saw says how (a clean end, or in the
        // middle of a payload), as before the writer's abort.
        (result, Err(e)) if client_gone(&e) => result,
        // Otherwise the writer's failure (a client that takes no replies) is the
        // cause, unless the reader met a broken request first.
        (Err(ConnEnd::Protocol(p)), _) => Err(ConnEnd::Protocol(p)),
        (_, Err(e)) => Err(ConnEnd::Io(e)),
        (result, Ok(())) => result,
    }
}

/// Whether a failed send says only that the client has gone.
fn client_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    )
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
        if checked.empty {
            let mut out = Vec::new();
            push_ok(&mut out, structured, req.cookie);
            raw(out);
            continue;
        }
        let fua = req.flags & CMD_FLAG_FUA != 0;
        let len = req.length as usize;
        let op = match req.command {
            // A small read with nothing else from this client waiting: done here, from
            // the members, when they are active (the latency path: no hop through the
            // array's thread). With requests queued, the array's thread keeps them in
            // flight together.
            Command::Read if req.length < crate::lane::BULK_BYTES && reader.buffer().is_empty() => {
                let mut buf = array.pool.take(len);
                if array
                    .bypass
                    .read(&mut buf.as_mut_slice()[..len], req.offset)
                {
                    in_flight.acquire(len);
                    let _ = done.send(Done::Job {
                        cookie: req.cookie,
                        result: Ok(Some(ReadData {
                            offset: req.offset,
                            buf,
                            len,
                        })),
                        flight_bytes: len,
                    });
                    continue;
                }
                array.pool.put(buf);
                JobOp::Read {
                    offset: req.offset,
                    len,
                }
            }
            Command::Read => JobOp::Read {
                offset: req.offset,
                len,
            },
            Command::Write => {
                let mut buf = array.pool.take(len);
                read_payload(&mut reader, &mut buf.as_mut_slice()[..len])?;
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
                punch: req.flags & CMD_FLAG_NO_HOLE == 0,
            },
            // A trim frees the whole trim units inside its range (they read as zeros
            // after); what is left over is a hint the array ignores. With FUA, what
            // was written must still be durable.
            Command::Trim => {
                let unit = array.trim_unit;
                let start = req.offset.next_multiple_of(unit);
                let end = (req.offset + u64::from(req.length)) / unit * unit;
                if start < end {
                    JobOp::WriteZeroes {
                        offset: start,
                        len: end - start,
                        fua,
                        punch: true,
                    }
                } else if fua {
                    JobOp::Flush
                } else {
                    let mut out = Vec::new();
                    push_ok(&mut out, structured, req.cookie);
                    raw(out);
                    continue;
                }
            }
            Command::Cache => {
                let mut out = Vec::new();
                push_ok(&mut out, structured, req.cookie);
                raw(out);
                continue;
            }
            Command::BlockStatus => JobOp::BlockStatus {
                offset: req.offset,
                len: (array.size - req.offset).min(u64::from(req.length)),
                max_extents: if req.flags & CMD_FLAG_REQ_ONE != 0 {
                    1
                } else {
                    MAX_ARRAY_EXTENTS
                },
            },
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
            JobOp::WriteZeroes { .. }
            | JobOp::Flush
            | JobOp::BlockStatus { .. }
            | JobOp::Control { .. } => 0,
        }
    }
}

/// The writer thread: sends each finished job's reply, batching what is ready.
fn write_replies<S: Write>(
    mut stream: S,
    done: &Receiver<Done>,
    structured: bool,
    in_flight: &InFlight,
    pool: &IoBufPool,
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
        // Read data sent: its buffers are reused.
        for d in batch {
            if let Done::Job {
                result: Ok(Some(r)),
                ..
            } = d
            {
                pool.put(r.buf);
            }
        }
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
