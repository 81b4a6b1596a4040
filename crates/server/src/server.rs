//! Listening, accepting, one thread per connection, and an orderly stop: stop
//! accepting, let every connection finish the requests it has read, then let each
//! array's worker flush and mark the array clean.

use std::collections::{HashMap, HashSet};
use std::net::{Shutdown, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::array_export::Closed;

use xraid_driver::BackendChoice;

use crate::export::{self, ExportKind};
use crate::handshake::{negotiate, HandshakeError};
use crate::stall::{self, Watch};
use crate::stream::Stream;
use crate::tls::{Conn, Tls};
use crate::transmission::{serve_array, serve_file, ConnEnd};
use crate::{log, Exports, Listen, ServeConfig, ServerError};

/// A client that takes longer than this to finish the handshake, or to take a reply
/// it asked for, is dropped (replies are watched by `stall` too).
const CLIENT_TIMEOUT: Duration = stall::STALL_LIMIT;

#[derive(Debug)]
enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

/// Stops a running server from another thread (or a signal handler thread).
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    stopping: AtomicBool,
    listener_fd: RawFd,
    /// Open connections, so a stop can end their reading.
    conns: Mutex<HashMap<u64, Stream>>,
    /// Connections the stall watch closed (and logged): their threads log nothing more.
    dropped: Mutex<HashSet<u64>>,
    active: AtomicUsize,
    next_conn: AtomicU64,
}

impl ShutdownHandle {
    /// Stops accepting and ends every connection once its requests are answered.
    pub fn stop(&self) {
        if self.inner.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // SAFETY: shutdown takes no pointers; the listener descriptor stays open until
        // the accept loop, which this wakes, has returned.
        unsafe { libc::shutdown(self.inner.listener_fd, libc::SHUT_RDWR) };
        let conns = self
            .inner
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for stream in conns.values() {
            // The reader sees the end of its stream after the requests it has read.
            stream.shutdown(Shutdown::Read);
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::SeqCst)
    }
}

/// A server with its exports open and its socket bound, ready to [`Server::run`].
#[derive(Debug)]
pub struct Server {
    listener: Listener,
    exports: Arc<Exports>,
    workers: Vec<JoinHandle<Closed>>,
    controls: Vec<crate::control::Control>,
    max_connections: usize,
    shared: Arc<Shared>,
    address: String,
    tls: Tls,
}

impl Server {
    /// Opens every export and binds the listening socket.
    pub fn start(config: &ServeConfig, backend: BackendChoice) -> Result<Server, ServerError> {
        config.check().map_err(ServerError::Invalid)?;
        let tls = Tls::load(config.tls_mode, config.tls_files.as_ref())?;
        let mut exports = Exports::default();
        let mut workers = Vec::new();
        let mut controls = Vec::new();
        for e in &config.exports {
            let opened = export::open(e, backend)?;
            exports.list.push(Arc::new(opened.export));
            workers.extend(opened.worker);
            controls.extend(opened.control);
        }
        let listen_error = |source| ServerError::Listen {
            listen: config.listen.to_string(),
            source,
        };
        let (listener, address, fd) = match &config.listen {
            Listen::Tcp(addr) => {
                let l = TcpListener::bind(addr).map_err(listen_error)?;
                let bound = l.local_addr().map_err(listen_error)?;
                let fd = l.as_raw_fd();
                (Listener::Tcp(l), bound.to_string(), fd)
            }
            Listen::Unix(path) => {
                remove_stale_socket(path);
                let l = UnixListener::bind(path).map_err(listen_error)?;
                let fd = l.as_raw_fd();
                (
                    Listener::Unix(l, path.clone()),
                    path.display().to_string(),
                    fd,
                )
            }
        };
        Ok(Server {
            listener,
            exports: Arc::new(exports),
            workers,
            controls,
            max_connections: config.max_connections,
            shared: Arc::new(Shared {
                stopping: AtomicBool::new(false),
                listener_fd: fd,
                conns: Mutex::new(HashMap::new()),
                dropped: Mutex::new(HashSet::new()),
                active: AtomicUsize::new(0),
                next_conn: AtomicU64::new(0),
            }),
            address,
            tls,
        })
    }

    /// Where clients reach the server: `ADDR:PORT` or the socket's path.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The exports, as `(name, size in bytes, description)`.
    pub fn exports(&self) -> Vec<(String, u64, String)> {
        self.exports
            .all()
            .iter()
            .map(|e| (e.name.clone(), e.size(), e.description.clone()))
            .collect()
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            inner: Arc::clone(&self.shared),
        }
    }

    /// Accepts clients until stopped, then waits for every connection and every array
    /// worker to finish (arrays are flushed, and marked clean unless a resync is left
    /// unfinished). Returns how it left the arrays: the least clean of them (one that
    /// failed, or could not be written, says why in the log).
    pub fn run(self) -> Result<Closed, ServerError> {
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        let watched = Arc::clone(&self.shared);
        // Not joined: it ends within one look of the stop's last connection, and
        // holds nothing that the stop waits for.
        std::thread::Builder::new()
            .name("xraid-stalls".to_owned())
            .spawn(move || watch_stalls(&watched))
            .map_err(|e| ServerError::Invalid(format!("cannot start the stall watch: {e}")))?;
        loop {
            let accepted = match &self.listener {
                Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
                Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
            };
            if self.shared.stopping.load(Ordering::SeqCst) {
                break;
            }
            let stream = match accepted {
                Ok(s) => s,
                Err(e) => {
                    log::error(&format!("accept failed: {e}"));
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            threads.retain(|t| !t.is_finished());
            if self.shared.active.load(Ordering::SeqCst) >= self.max_connections {
                log::error(&format!(
                    "refused {}: {} connections already (raise --max-connections)",
                    stream.peer(),
                    self.max_connections
                ));
                continue;
            }
            self.shared.active.fetch_add(1, Ordering::SeqCst);
            let exports = Arc::clone(&self.exports);
            let shared = Arc::clone(&self.shared);
            let tls = self.tls.clone();
            let spawned = std::thread::Builder::new()
                .name("xraid-conn".to_owned())
                .spawn(move || {
                    connection(stream, &exports, &tls, &shared);
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                });
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    self.shared.active.fetch_sub(1, Ordering::SeqCst);
                    log::error(&format!("cannot start a connection thread: {e}"));
                }
            }
        }
        for t in threads {
            let _ = t.join();
        }
        let Server {
            listener,
            exports,
            workers,
            controls,
            ..
        } = self;
        // The control sockets hold handles to the arrays too: close them first.
        for c in controls {
            c.stop();
        }
        if let Listener::Unix(_, path) = &listener {
            let _ = std::fs::remove_file(path);
        }
        // Dropping the exports drops the last handles to the array workers, which
        // then flush and mark their arrays clean.
        drop(exports);
        let mut worst = Closed::Clean;
        for w in workers {
            match w.join().unwrap_or(Closed::NotClean) {
                Closed::NotClean => worst = Closed::NotClean,
                Closed::ResyncUnfinished if worst == Closed::Clean => {
                    worst = Closed::ResyncUnfinished;
                }
                _ => {}
            }
        }
        Ok(worst)
    }
}

/// One client, from handshake to goodbye.
fn connection(stream: Stream, exports: &Exports, tls: &Tls, shared: &Shared) {
    let peer = stream.peer();
    let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
    stream.set_nodelay();
    let setup = stream
        .set_write_timeout(Some(CLIENT_TIMEOUT))
        .and_then(|()| stream.set_read_timeout(Some(CLIENT_TIMEOUT)))
        .and_then(|()| stream.try_clone());
    let registered = match setup {
        Ok(s) => s,
        Err(e) => {
            log::error(&format!("{peer}: {e}"));
            return;
        }
    };
    {
        let mut conns = shared.conns.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        conns.insert(id, registered);
    }
    let result = serve(stream, exports, tls);
    shared
        .conns
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&id);
    let dropped = shared
        .dropped
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&id);
    match result {
        // The watch said why already.
        _ if dropped => {}
        Ok(()) | Err(ConnEnd::Disconnect) => {}
        Err(e) => log::error(&format!("{peer}: {e}; connection closed")),
    }
}

/// Every few seconds, looks at each connection's socket and closes those whose
/// client has taken almost none of its replies for `stall::STALL_LIMIT`: both of its
/// threads then see the socket end, and the requests it had in flight finish
/// without it. It goes on through a stop until the last connection has ended, since
/// a stop waits for every connection's replies to go out.
fn watch_stalls(shared: &Shared) {
    let mut watches: HashMap<u64, Watch> = HashMap::new();
    loop {
        std::thread::sleep(stall::WATCH_EVERY);
        let now = Instant::now();
        let conns = shared.conns.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.stopping.load(Ordering::SeqCst) && conns.is_empty() {
            return;
        }
        watches.retain(|id, _| conns.contains_key(id));
        for (&id, stream) in conns.iter() {
            let Some(backlog) = stall::backlog(stream.as_raw_fd(), stream.is_tcp()) else {
                continue;
            };
            if watches.entry(id).or_default().stalled(backlog, now) {
                shared
                    .dropped
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(id);
                log::error(&format!(
                    "{}: took almost none of its replies for {} s; connection closed",
                    stream.peer(),
                    stall::STALL_LIMIT.as_secs()
                ));
                stream.shutdown(Shutdown::Both);
                watches.remove(&id);
            }
        }
    }
}

fn serve(stream: Stream, exports: &Exports, tls: &Tls) -> Result<(), ConnEnd> {
    // Idle clients are fine once connected; only the handshake and replies have a
    // deadline.
    let plain = stream.try_clone()?;
    let (negotiated, conn) = match negotiate(Conn::Plain(stream), exports, tls) {
        Ok(n) => n,
        Err(HandshakeError::Left) => return Ok(()),
        Err(HandshakeError::Io(e)) => return Err(ConnEnd::Io(e)),
        Err(HandshakeError::Protocol(p)) => {
            return Err(ConnEnd::Protocol(format!("handshake: {p}")))
        }
    };
    plain.set_read_timeout(None)?;
    let reader = conn.try_clone()?;
    let mut closer = conn.try_clone()?;
    let result = match &negotiated.export.kind {
        ExportKind::File(_) => serve_file(reader, conn, &negotiated),
        ExportKind::Array(_) => serve_array(reader, conn, &negotiated),
    };
    closer.close();
    result
}

/// Removes a Unix socket file no server answers on any more.
fn remove_stale_socket(path: &std::path::Path) {
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if is_socket && UnixStream::connect(path).is_err() {
        let _ = std::fs::remove_file(path);
    }
}

/// SIGINT and SIGTERM (and SIGUSR1 when it cuts the power), blocked in every thread so
/// that one thread can wait for them.
#[derive(Debug, Clone, Copy)]
pub struct StopSignals(libc::sigset_t);

/// Blocks SIGINT and SIGTERM in the calling thread, and SIGUSR1 with `power_cut`
/// (members faulted with `power-cut-on-signal`). Call it before any other thread starts
/// (threads inherit the mask), then hand the result to [`stop_on_signals`].
pub fn block_stop_signals(power_cut: bool) -> std::io::Result<StopSignals> {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use; the
    // pointers passed are to locals that outlive the calls.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if power_cut {
            libc::sigaddset(&mut set, libc::SIGUSR1);
        }
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(StopSignals(set))
    }
}

/// Exit status of a server whose power was cut (as a shell reports a SIGKILL).
pub const POWER_CUT_EXIT: i32 = 137;

/// Starts a thread that stops `handle` when SIGINT or SIGTERM arrives; another one,
/// once the stop has run [`STOP_HINT_AFTER`], ends the process at once, as the signal
/// would have, for a stop that cannot finish (a member that hangs and that the array
/// cannot do without holds its flush and its superblocks): its arrays, not marked
/// clean, are then resynced at their next start, as after a crash. One that comes
/// sooner is only logged: a stop sent twice (`kill` run twice, a unit whose ExecStop=
/// signals the server before systemd signals it again, Ctrl-C hit twice) must not cost
/// a healthy stop its clean shutdown. SIGUSR1, when blocked for it, cuts the power of
/// every member on the machine's power rail (their unflushed writes undone at one
/// instant) and ends the process there and then.
pub fn stop_on_signals(signals: StopSignals, handle: ShutdownHandle) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("xraid-signals".to_owned())
        .spawn(move || {
            let mut stopping_since: Option<Instant> = None;
            let mut hinted = false;
            loop {
                // Once stopping, wake when the stop has run long enough to say what
                // another signal does.
                let patience = stopping_since
                    .filter(|_| !hinted)
                    .map(|since| STOP_HINT_AFTER.saturating_sub(since.elapsed()));
                let Some(sig) = wait_for_signal(&signals, patience) else {
                    if let Some(since) = stopping_since
                        .filter(|since| !hinted && since.elapsed() >= STOP_HINT_AFTER)
                    {
                        hinted = true;
                        log::info(&format!(
                            "still stopping after {} s (a member that does not answer holds the last flush or the superblocks): a second SIGINT or SIGTERM ends the server now, and arrays not marked clean are resynced at their next start, as after a crash",
                            since.elapsed().as_secs()
                        ));
                    }
                    continue;
                };
                if sig == libc::SIGUSR1 {
                    // Held until the end: no member I/O after the cut.
                    let off = xraid_member::cut_machine_power();
                    log::error(&format!(
                        "signal {sig}: power cut (--fault power-cut-on-signal): {} members lost the writes they had not flushed; stopping dead",
                        off.members
                    ));
                    std::process::exit(POWER_CUT_EXIT);
                }
                if let Some(since) = stopping_since {
                    if since.elapsed() < STOP_HINT_AFTER {
                        log::info(&format!(
                            "signal {sig} again, {} ms into the stop: the stop goes on (one sent {} s or more into it ends the server at once)",
                            since.elapsed().as_millis(),
                            STOP_HINT_AFTER.as_secs()
                        ));
                        continue;
                    }
                    log::error(&format!(
                        "signal {sig} again: stopping now, without waiting for the stop to finish; arrays not marked clean are resynced at their next start, as after a crash"
                    ));
                    die_of(sig);
                }
                log::info(&format!(
                    "signal {sig}: finishing requests in flight, then stopping"
                ));
                handle.stop();
                stopping_since = Some(Instant::now());
            }
        })?;
    Ok(())
}

/// How long a stop runs before another stop signal ends it at once (the log says so
/// then).
const STOP_HINT_AFTER: Duration = Duration::from_secs(5);

/// The next of `signals` (blocked in every thread), or `None` after `patience`.
fn wait_for_signal(signals: &StopSignals, patience: Option<Duration>) -> Option<libc::c_int> {
    let Some(patience) = patience else {
        let mut sig: libc::c_int = 0;
        // SAFETY: the set is initialised and `sig` is a live local.
        let rc = unsafe { libc::sigwait(&signals.0, &mut sig) };
        return (rc == 0).then_some(sig);
    };
    let timeout = libc::timespec {
        tv_sec: libc::time_t::try_from(patience.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: patience.subsec_nanos().into(),
    };
    // SAFETY: the set and the timeout are initialised locals; no siginfo is asked for.
    let sig = unsafe { libc::sigtimedwait(&signals.0, std::ptr::null_mut(), &timeout) };
    (sig > 0).then_some(sig)
}

/// Ends the process by `sig`, as its default action would have (a supervisor sees
/// the signal, not an exit status).
fn die_of(sig: libc::c_int) -> ! {
    // SAFETY: plain calls on a local, initialised signal set; the default action of
    // SIGINT and SIGTERM ends the process, so raise() does not return.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig)
}
