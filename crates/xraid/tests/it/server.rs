//! A running `xraid serve` for a test: started on a Unix socket or an ephemeral TCP
//! port, its output captured to files, stopped with SIGTERM (SIGKILL after 10 s) when
//! the guard is dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::util::{p, xraid};

/// How long a server may take to start, or to stop after SIGTERM.
const PATIENCE: Duration = Duration::from_secs(10);

/// Where a test server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Unix(PathBuf),
    /// `127.0.0.1:PORT`.
    Tcp(String),
}

#[derive(Debug)]
pub struct Server {
    child: Option<Child>,
    pub addr: Addr,
    stdout: PathBuf,
    stderr: PathBuf,
}

/// What a stopped server left behind.
#[derive(Debug)]
pub struct Stopped {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Server {
    /// `xraid serve --socket DIR/nbd.sock ARGS`.
    pub fn unix(dir: &Path, args: &[&str]) -> Server {
        let socket = dir.join("nbd.sock");
        let mut full = vec!["serve", "--socket", p(&socket)];
        full.extend_from_slice(args);
        Server::spawn(dir, &full)
    }

    /// `xraid serve --listen 127.0.0.1:0 ARGS` (the kernel picks a free port).
    pub fn tcp(dir: &Path, args: &[&str]) -> Server {
        let mut full = vec!["serve", "--listen", "127.0.0.1:0"];
        full.extend_from_slice(args);
        Server::spawn(dir, &full)
    }

    /// Runs `xraid ARGS` (a serve command; with `--config`, the file says where to
    /// listen) and waits until it says where it listens.
    pub fn spawn(dir: &Path, args: &[&str]) -> Server {
        let stdout = dir.join("serve.out");
        let stderr = dir.join("serve.err");
        let child = xraid()
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("serve.out"))
            .stderr(std::fs::File::create(&stderr).expect("serve.err"))
            .spawn()
            .expect("xraid serve starts");
        let mut server = Server {
            child: Some(child),
            addr: Addr::Tcp(String::new()),
            stdout,
            stderr,
        };
        server.addr = server.wait_until_listening(args);
        server
    }

    /// Polls standard output for "listening on ADDR;" (printed once the socket is
    /// bound), failing with the server's stderr if it exits first.
    fn wait_until_listening(&mut self, args: &[&str]) -> Addr {
        let start = Instant::now();
        loop {
            let out = std::fs::read_to_string(&self.stdout).unwrap_or_default();
            if let Some(line) = out.lines().find(|l| l.starts_with("listening on ")) {
                let addr = line["listening on ".len()..]
                    .split(';')
                    .next()
                    .expect("an address");
                return if addr.starts_with('/') {
                    Addr::Unix(PathBuf::from(addr))
                } else {
                    Addr::Tcp(addr.to_owned())
                };
            }
            let child = self.child.as_mut().expect("running");
            if let Some(status) = child.try_wait().expect("try_wait") {
                panic!(
                    "xraid {args:?} exited ({status}) before listening: {}",
                    self.stderr()
                );
            }
            assert!(
                start.elapsed() < PATIENCE,
                "xraid {args:?} did not start listening: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The NBD URI of export `name`, for libnbd and qemu.
    pub fn uri(&self, name: &str) -> String {
        match &self.addr {
            Addr::Unix(path) => format!("nbd+unix:///{name}?socket={}", p(path)),
            Addr::Tcp(addr) => format!("nbd://{addr}/{name}"),
        }
    }

    /// The TCP address (panics for a Unix-socket server).
    pub fn tcp_addr(&self) -> &str {
        match &self.addr {
            Addr::Tcp(addr) => addr,
            Addr::Unix(_) => panic!("not a TCP server"),
        }
    }

    /// Everything the server has logged so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn log_lines(&self) -> Vec<String> {
        self.stderr().lines().map(str::to_owned).collect()
    }

    /// Waits (up to 5 s) for a log line after the first `since` lines that contains
    /// every one of `needles`, and returns it.
    pub fn wait_for_log(&self, since: usize, needles: &[&str]) -> String {
        self.wait_for_log_within(since, needles, Duration::from_secs(5))
    }

    /// [`Server::wait_for_log`], waiting up to `patience`.
    pub fn wait_for_log_within(
        &self,
        since: usize,
        needles: &[&str],
        patience: Duration,
    ) -> String {
        let start = Instant::now();
        loop {
            let lines = self.log_lines();
            let found = lines
                .iter()
                .skip(since)
                .find(|l| needles.iter().all(|n| l.contains(n)));
            if let Some(line) = found {
                return line.clone();
            }
            assert!(
                start.elapsed() < patience,
                "no log line with {needles:?} after line {since}; the log:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for the server to finish (it flushes and marks its arrays
    /// clean); panics if it takes longer than 10 s.
    pub fn stop(mut self) -> Stopped {
        let status = self.terminate();
        let stopped = Stopped {
            status: status.unwrap_or_else(|| {
                panic!("xraid serve ignored SIGTERM for 10 s: {}", self.stderr())
            }),
            stdout: std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: self.stderr(),
        };
        assert!(
            stopped.status.success(),
            "xraid serve stopped with {}: {}",
            stopped.status,
            stopped.stderr
        );
        stopped
    }

    /// SIGKILL: the server gets no chance to flush or to mark its arrays clean.
    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the server");
            child.wait().expect("wait for the server");
        }
    }

    /// SIGUSR1 to a server whose members are all faulted with `power-cut-on-signal`:
    /// what they had not flushed is undone at once and the server dies. Returns its
    /// exit status (137) once it has.
    pub fn cut_power(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("a running server");
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
        // SAFETY: kill takes no pointers; the pid is our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGUSR1) };
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the server outlived its power cut by 10 s: {}",
            self.stderr()
        );
    }

    /// Sends `signal` to the server, which goes on running as far as the test knows.
    pub fn signal(&self, signal: libc::c_int) {
        let child = self.child.as_ref().expect("a running server");
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
        // SAFETY: kill takes no pointers; the pid is our own child, not yet reaped.
        unsafe { libc::kill(pid, signal) };
    }

    /// The server's exit status, if it exits within `limit`.
    pub fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut().expect("a running server");
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then up to 10 s for the process to exit (SIGKILL after that, and
    /// `None`).
    fn terminate(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
        // SAFETY: kill takes no pointers; the pid is our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.terminate();
    }
}

/// A RAID-5 of four members of `member_size` each (chunk 64K) in `dir`/disks; returns
/// the folder, which names the array. 16M members make a 45 MiB array.
pub fn raid5(dir: &Path, member_size: &str) -> PathBuf {
    create_array(dir, "5", 4, member_size, &[])
}

/// An array of `level` (md's number) in `dir`/disks: `members` members d0, d1, … of
/// `member_size`, chunk 64K, made with `extra` options of `xraid create`.
pub fn create_array(
    dir: &Path,
    level: &str,
    members: usize,
    member_size: &str,
    extra: &[&str],
) -> PathBuf {
    let disks = dir.join("disks");
    std::fs::create_dir(&disks).expect("disks folder");
    let paths: Vec<PathBuf> = (0..members).map(|i| disks.join(format!("d{i}"))).collect();
    let mut args = vec!["create", "-l", level, "-c", "64K", "--size", member_size];
    args.extend_from_slice(extra);
    args.extend(paths.iter().map(|m| p(m)));
    crate::util::ok(&args);
    disks
}
