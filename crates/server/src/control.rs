//! The control socket of a served array: a Unix socket beside its members through
//! which the CLI asks the running server what the array is doing (`xraid status`) and
//! has it act (`xraid fail`, `xraid scrub`, `xraid add`, `xraid replace`, `xraid remove`).
//! One request per connection: a line of JSON in (`{"op":"status"}`,
//! `{"op":"fail","member":"PATH"}`, `{"op":"scrub","action":"check"|"repair"}`,
//! `{"op":"add","member":"PATH","spare":B,"force":B,"size":N|null}`,
//! `{"op":"replace","member":"OLD","new":"NEW","force":B,"size":N|null}`,
//! `{"op":"remove","member":"PATH"}`), a line of JSON out. The array's worker
//! answers, between client requests, so everything it says is the engine's own state.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::array_export::{ArrayHandle, Job, JobOp};
use crate::log;

/// How long one control client may take to send its request, and a reply may take.
const PATIENCE: Duration = Duration::from_secs(10);

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

fn serve(listener: &UnixListener, handle: &ArrayHandle, stop: &AtomicBool, name: &str) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(stream, handle) {
                    log::info(&format!("array '{name}': a control request failed: {e}"));
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
}

/// Reads one request, has the worker answer it, writes the answer.
fn answer(stream: UnixStream, handle: &ArrayHandle) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(PATIENCE))?;
    stream.set_write_timeout(Some(PATIENCE))?;
    let mut line = String::new();
    BufReader::new(std::io::Read::take(&stream, 64 * 1024)).read_line(&mut line)?;
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

fn ask_worker(handle: &ArrayHandle, request: serde_json::Value) -> serde_json::Value {
    let (tx, rx) = mpsc::channel();
    let (done, _) = mpsc::channel();
    let job = Job {
        op: JobOp::Control { request, reply: tx },
        cookie: 0,
        done,
        flight_bytes: 0,
    };
    if handle.submit(job).is_err() {
        return error_reply("the array is stopping");
    }
    rx.recv_timeout(PATIENCE)
        .unwrap_or_else(|_| error_reply("the array did not answer in time"))
}

pub(crate) fn error_reply(message: &str) -> serde_json::Value {
    serde_json::json!({ "ok": false, "error": message })
}
