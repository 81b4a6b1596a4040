//! Helpers shared by the integration tests: running xraid, temp folders, hashing,
//! decompressing md fixtures, and skipping tests whose tools are missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub fn xraid() -> Command {
    Command::new(env!("CARGO_BIN_EXE_xraid"))
}

/// Runs xraid with `args`; panics with its stderr if it fails.
pub fn ok(args: &[&str]) -> String {
    let out = xraid().args(args).output().expect("xraid runs");
    assert!(
        out.status.success(),
        "xraid {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs xraid with `args` and returns its standard output as bytes; panics with its
/// stderr if it fails.
pub fn ok_bytes(args: &[&str]) -> Vec<u8> {
    let out = xraid().args(args).output().expect("xraid runs");
    assert!(
        out.status.success(),
        "xraid {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs xraid with `args` (an `add` of a device that left a served array), again
/// while the server says I/O it sent the device is still in the kernel (it closes
/// the device when that completes); panics with any other failure.
pub fn ok_once_let_go(args: &[&str]) -> String {
    for _ in 0..100 {
        let out = xraid().args(args).output().expect("xraid runs");
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("still in the kernel"),
            "xraid {args:?} failed: {stderr}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("xraid {args:?}: the server never let go of the device");
}

/// Runs xraid with `args`, expects failure, and returns its (one-line) error.
pub fn fails(args: &[&str]) -> String {
    let out: Output = xraid().args(args).output().expect("xraid runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "xraid {args:?} should have failed; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("xraid: "))
        .collect();
    assert!(
        errors.iter().any(|l| !l.starts_with("xraid: warning")),
        "no error line in: {stderr}"
    );
    stderr
}

pub fn has_tool(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Skips the calling test (returning early) when a tool is missing, saying so.
#[macro_export]
macro_rules! require_tool {
    ($name:expr) => {
        if !$crate::util::has_tool($name) {
            eprintln!("skipped: {} is not installed", $name);
            return;
        }
    };
}

pub fn tempdir() -> tempfile::TempDir {
    // /var/tmp, not tmpfs: members should get O_DIRECT as they would in real use.
    tempfile::Builder::new()
        .prefix("xraid-it-")
        .tempdir_in("/var/tmp")
        .expect("temp dir")
}

pub fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp paths")
}

pub fn sha256_file(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// sha256 of what `xraid read ARGS` prints.
pub fn sha256_of_read(args: &[&str]) -> String {
    let dir = tempdir();
    let out = dir.path().join("array.bin");
    let mut full: Vec<&str> = vec!["read", "-o", p(&out)];
    full.extend_from_slice(args);
    ok(&full);
    sha256_file(&out)
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/md")
}

/// Decompresses the members of fixture `name` into `into`, returning their paths in
/// role order (as the manifest lists them).
pub fn unpack_fixture(name: &str, into: &Path) -> Vec<PathBuf> {
    let dir = fixtures_dir().join(name);
    let manifest = manifest(name);
    let mut paths = Vec::new();
    for m in manifest["members"].as_array().expect("members") {
        let file = m["file"].as_str().expect("file");
        let target = into.join(file.trim_end_matches(".xz"));
        let out = std::fs::File::create(&target).expect("create member");
        let status = Command::new("xz")
            .arg("-dc")
            .arg(dir.join(file))
            .stdout(out)
            .status()
            .expect("xz runs");
        assert!(status.success(), "xz failed on {file}");
        paths.push(target);
    }
    paths
}

pub fn manifest(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures_dir().join(name).join("manifest.json"))
        .expect("manifest.json");
    serde_json::from_str(&text).expect("manifest parses")
}

/// sha256 of every file in `paths` (to show a failed command changed nothing).
pub fn hashes(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| sha256_file(p)).collect()
}

/// `len` bytes from a seeded xorshift generator: reproducible, and never all zeros.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    // xorshift needs a non-zero state; spread the seed first so that every seed gives
    // its own bytes (`seed | 1` alone made 30 and 31 the same).
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `xraid scrub ACTION --json` on `disks`, its report as JSON.
pub fn scrub(action: &str, disks: impl AsRef<Path>) -> serde_json::Value {
    let out = ok(&["scrub", action, "--json", p(disks.as_ref())]);
    serde_json::from_str(&out).expect("scrub prints JSON")
}
