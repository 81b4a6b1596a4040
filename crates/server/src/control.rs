//! The control socket of a served array: a Unix socket beside its members through
//! which the CLI asks the running server what the array is doing (`xraid status`) and
//! has it act (`xraid fail`, `xraid scrub`, `xraid add`, `xraid replace`, `xraid remove`).
//! One request per connection: a line of JSON in (`{"op":"status"}`,
//! `{"op":"fail","member":"PATH"}`, `{"op":"scrub","action":"check"|"repair"}`,
//! `{"op":"add","member":"PATH","spare":B,"force":B,"size":N|null}`,
//! `{"op":"replace","member":"OLD","new":"NEW","force":B,"size":N|null}`,
//! `{"op":"remove","member":"PATH"}`), a line of JSON out. The array's worker
//! answers, between client requests, so everything it says is the engine's own state.

use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::array_export::{ArrayHandle, Job, JobOp};
use crate::log;

/// How long one control client may take to send its request, and a reply may take.
const PATIENCE: Duration = Duration::from_secs(10);

/// How long a status request waits for the array's thread before it is answered
/// with the status the thread last published (see `published`).
const STATUS_PATIENCE: Duration = Duration::from_secs(2);

/// A running control socket; [`Control::stop`] ends it (and lets go of the array).
#[derive(Debug)]
pub(crate) struct Control {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl Control {
    /// Listens on `path` for control requests to the array behind `handle`.
    pub(crate) fn start(
        path: PathBuf,
        handle: ArrayHandle,
        name: String,
    ) -> std::io::Result<Control> {
        if UnixStream::connect(&path).is_err() {
            // Nobody answers there: a socket left by a server that died.
            let _ = std::fs::remove_file(&path);
        }
        let listener = UnixListener::bind(&path)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("xraid-control".to_owned())
            .spawn(move || serve(&listener, &handle, &flag, &name))?;
        Ok(Control {
            stop,
            thread: Some(thread),
            path,
        })
    }

    /// Stops listening, waits for the thread (which drops its handle to the array), and
    /// removes the socket.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Control requests answered at once, at most: each has a thread, so that a status
/// is not queued behind a request the array's thread is slow to answer. A connection
/// holds its thread at most [`REQUEST_WITHIN`] before its request is in, and
/// [`PATIENCE`] after.
const MAX_AT_ONCE: usize = 64;

/// How long a connection may take to send its whole request.
const REQUEST_WITHIN: Duration = Duration::from_secs(2);

/// The longest request read.
const MAX_REQUEST_BYTES: usize = 64 * 1024;

fn serve(listener: &UnixListener, handle: &ArrayHandle, stop: &AtomicBool, name: &str) {
    let mut answering: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        answering.retain(|t| !t.is_finished());
        match listener.accept() {
            Ok((stream, _)) if answering.len() >= MAX_AT_ONCE => {
                let _ = refuse(&stream, "too many control requests at once: try again");
            }
            Ok((stream, _)) => {
                let handle = handle.clone();
                let array = name.to_owned();
                let spawned = std::thread::Builder::new()
                    .name("xraid-control-req".to_owned())
                    .spawn(move || {
                        if let Err(e) = answer(stream, &handle) {
                            log::info(&format!("array '{array}': a control request failed: {e}"));
                        }
                    });
                match spawned {
                    Ok(t) => answering.push(t),
                    Err(e) => log::error(&format!(
                        "array '{name}': cannot start a thread for a control request: {e}"
                    )),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                log::error(&format!("array '{name}': control socket: {e}"));
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    // Their handles to the array go with them: the array stops once all are gone.
    for t in answering {
        let _ = t.join();
    }
}

/// Answers a connection with `message` as an error, without reading its request.
fn refuse(stream: &UnixStream, message: &str) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(PATIENCE))?;
    let mut out = stream;
    out.write_all(error_reply(message).to_string().as_bytes())?;
    out.write_all(b"\n")
}

/// Reads one request, has the worker answer it, writes the answer.
fn answer(stream: UnixStream, handle: &ArrayHandle) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(PATIENCE))?;
    let line = read_request(&stream)?;
    if line.is_empty() {
        // Closed without a request: a command checking whether a server answers here.
        return Ok(());
    }
    let reply = match serde_json::from_str::<serde_json::Value>(&line) {
        Ok(request) => ask_worker(handle, request),
        Err(e) => error_reply(&format!("not a JSON request: {e}")),
    };
    let mut out = &stream;
    out.write_all(reply.to_string().as_bytes())?;
    out.write_all(b"\n")
}

/// Reads a request line (up to its newline, or the end), within [`REQUEST_WITHIN`] in
/// all: a connection that sends nothing, or trickles, holds its thread no longer.
fn read_request(stream: &UnixStream) -> std::io::Result<String> {
    let deadline = Instant::now() + REQUEST_WITHIN;
    let mut line = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the request did not arrive in time",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        let n = std::io::Read::read(&mut &*stream, &mut chunk)?;
        if n == 0 {
            break;
        }
        line.extend_from_slice(&chunk[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            line.truncate(end + 1);
            break;
        }
        if line.len() > MAX_REQUEST_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a request longer than 64 KiB",
            ));
        }
    }
    String::from_utf8(line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn ask_worker(handle: &ArrayHandle, request: serde_json::Value) -> serde_json::Value {
    let patience = if request["op"] == "status" {
        STATUS_PATIENCE
    } else {
        PATIENCE
    };
    ask_worker_within(handle, request, patience)
}

/// Has the array's thread answer `request`, waiting up to `patience`. A status the
/// thread does not give in time comes from what it last published; any other request
/// is dropped by the thread if it has not begun it by then (see `JobOp::Control`).
pub(crate) fn ask_worker_within(
    handle: &ArrayHandle,
    request: serde_json::Value,
    patience: Duration,
) -> serde_json::Value {
    let status = request["op"] == "status";
    let (tx, rx) = mpsc::channel();
    let (done, _) = mpsc::channel();
    let deadline = Instant::now() + patience;
    let job = Job {
        op: JobOp::Control {
            request,
            reply: tx,
            deadline,
        },
        cookie: 0,
        done,
        flight_bytes: 0,
    };
    if handle.submit(job).is_err() {
        return error_reply("the array is stopping");
    }
    match rx.recv_timeout(patience) {
        Ok(answer) => return answer,
        // The thread let go of the request without an answer before its deadline: it
        // is not busy but stopped (`fail_everything` takes every job after an error),
        // and its last snapshot is no longer the array's status.
        Err(mpsc::RecvTimeoutError::Disconnected) if Instant::now() <= deadline => {
            return error_reply(
                "the array's thread has stopped (see the server's log): the request was not carried out",
            );
        }
        Err(_) => {}
    }
    if let Some(last) = status.then(|| handle.published.last()).flatten() {
        return last;
    }
    error_reply(&format!(
        "the array's thread did not answer within {} s: it has been busy for {} s (a superblock update waiting on a stalled member holds it for up to the stall timeout; see the server's log); the request was dropped unless it had begun, so check with xraid status",
        patience.as_secs_f64(),
        handle.published.busy_for().as_secs()
    ))
}

pub(crate) fn error_reply(message: &str) -> serde_json::Value {
    serde_json::json!({ "ok": false, "error": message })
}
