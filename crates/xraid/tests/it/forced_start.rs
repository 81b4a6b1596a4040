//! A member failing past the redundancy is recorded, offline and served, so that the
//! array refuses to start rather than take it back unnoticed; `serve --force` then
//! takes back the member that failed last (mdadm's `--assemble --force`), and only
//! that one.

use std::path::Path;
use std::process::Command;

use crate::require_tool;
use crate::server::{raid5, Server};
use crate::util::{fails, ok, p, random_bytes, tempdir};

/// Each member's event count and array state line, from `mdadm --examine`.
fn examine(member: &Path) -> (u64, String) {
    let out = Command::new("mdadm")
        .args(["--examine", p(member)])
        .output()
        .expect("mdadm runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split_once(" : "))
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no {name} in: {text}"))
    };
    let events = field("Events").parse().expect("an event count");
    (events, field("Array State"))
}

/// A RAID-5 of four 8 MiB members (chunk 64K: a stripe holds 192 KiB) holding
/// `before` from byte 0, with role 0 failed and left out.
fn degraded_raid5_holding(dir: &Path, before: &[u8]) -> std::path::PathBuf {
    let disks = raid5(dir, "8M");
    let image = dir.join("before.raw");
    std::fs::write(&image, before).expect("image");
    ok(&["write", "-i", p(&image), p(&disks)]);
    ok(&["fail", p(&disks), p(&disks.join("d0"))]);
    disks
}

const STRIPE: usize = 192 << 10;

#[test]
fn a_member_failing_past_the_redundancy_is_recorded_and_forced_back_only_by_hand() {
    require_tool!("mdadm");
    let dir = tempdir();
    let before = random_bytes(6 << 20, 41);
    let disks = degraded_raid5_holding(dir.path(), &before);
    // Whole stripes written while role 1 fails part way through.
    let torn = 8 * STRIPE..24 * STRIPE;
    let cut = dir.path().join("cut.raw");
    std::fs::write(&cut, random_bytes(torn.len(), 42)).expect("image");
    let offset = torn.start.to_string();
    let err = fails(&[
        "write",
        "--fault",
        "role=1,fail-after=20",
        "--offset",
        &offset,
        "-i",
        p(&cut),
        p(&disks),
    ]);
    assert!(err.contains("the array has failed"), "{err}");
    // Recorded: one event behind the members left, and faulty in their role table.
    let (d1_events, _) = examine(&disks.join("d1"));
    let (d2_events, d2_state) = examine(&disks.join("d2"));
    assert_eq!(d2_events, d1_events + 1, "one update recorded the failure");
    assert!(d2_state.starts_with("..AA"), "{d2_state}");
    // So the array does not start with it unnoticed, and says how it would.
    let err = fails(&["read", p(&disks)]);
    assert!(err.contains("cannot start"), "{err}");
    assert!(err.contains("d1 failed last"), "{err}");
    assert!(err.contains("xraid serve --force"), "{err}");

    let server = Server::unix(dir.path(), &["--force", p(&disks)]);
    server.wait_for_log(0, &["d1 is taken back into role 1"]);
    let chunks = read_chunks(&server, before.len());
    let cut = std::fs::read(&cut).expect("image");
    let mut unknown = Vec::new();
    for (i, got) in chunks.iter().enumerate() {
        let at = i * CHUNK;
        let old = &before[at..at + CHUNK];
        match got {
            None => unknown.push(at),
            Some(got) if torn.contains(&at) => {
                let new = &cut[at - torn.start..at - torn.start + CHUNK];
                assert!(
                    got == old || got == new,
                    "chunk at {at}: neither old nor new"
                );
            }
            Some(got) => assert!(got == old, "acknowledged chunk at {at} reads back"),
        }
    }
    // What the failure tore reads as errors (d0's rows under the writes it cut off),
    // within the stripes written, and the server says how much.
    assert!(!unknown.is_empty(), "a write was cut off as role 1 failed");
    assert!(unknown.iter().all(|at| torn.contains(at)), "{unknown:?}");
    server.wait_for_log(0, &["sectors of missing members cannot be known"]);
    let stopped = server.stop();
    assert!(stopped.status.success(), "{}", stopped.stderr);
    // Recorded active: it starts without --force from now on (degraded).
    let (d1_events, d1_state) = examine(&disks.join("d1"));
    let (d2_events, _) = examine(&disks.join("d2"));
    assert_eq!(d1_events, d2_events);
    assert!(d1_state.starts_with(".AAA"), "{d1_state}");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let again = read_chunks(&server, before.len());
    let unknown_again: Vec<usize> = (0..again.len())
        .filter(|&i| again[i].is_none())
        .map(|i| i * CHUNK)
        .collect();
    assert_eq!(
        unknown_again, unknown,
        "the torn rows stay unknown across a restart"
    );
    server.stop();
    // Read offline, to read only: the same rows fail (the rings' recovery runs in
    // memory first), and `--keep-going` names them and gets the rest.
    let back = dir.path().join("back.raw");
    let out = crate::util::xraid()
        .args(["read", "--keep-going", "-o", p(&back), p(&disks)])
        .output()
        .expect("xraid runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("could not be read and are zeros"), "{err}");
    let got = std::fs::read(&back).expect("read back");
    for (i, chunk) in chunks.iter().enumerate() {
        let at = i * CHUNK;
        let offline = &got[at..at + CHUNK];
        match chunk {
            Some(served) => assert!(offline == served.as_slice(), "chunk at {at}"),
            None => assert!(offline.iter().all(|&b| b == 0), "unknown chunk at {at}"),
        }
    }
}

const CHUNK: usize = 64 << 10;

/// The array's first `len` bytes as served, chunk by chunk: `None` where a read fails.
fn read_chunks(server: &Server, len: usize) -> Vec<Option<Vec<u8>>> {
    let Some(mut nbdsh) = crate::nbd_clients::nbdsh() else {
        panic!("nbdsh cannot load its Python module");
    };
    let script = format!(
        "import sys\n\
         for at in range(0, {len}, {CHUNK}):\n\
         \x20   try:\n\
         \x20       sys.stdout.write(h.pread({CHUNK}, at).hex() + '\\n')\n\
         \x20   except nbd.Error:\n\
         \x20       sys.stdout.write('-\\n')"
    );
    let out = nbdsh
        .args(["-c", &format!("h.connect_uri('{}')", server.uri("xraid"))])
        .args(["-c", &script])
        .output()
        .expect("nbdsh runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| (line != "-").then(|| decode_hex(line)))
        .collect()
}

fn decode_hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn a_served_array_records_the_member_whose_failure_failed_it() {
    require_tool!("mdadm");
    require_tool!("nbdcopy");
    let dir = tempdir();
    let before = random_bytes(4 << 20, 43);
    let disks = degraded_raid5_holding(dir.path(), &before);
    let server = Server::unix(dir.path(), &["--fault", "role=1,fail-after=60", p(&disks)]);
    let image = dir.path().join("more.raw");
    std::fs::write(&image, random_bytes(8 << 20, 44)).expect("image");
    let status = Command::new("nbdcopy")
        .args([p(&image), &server.uri("xraid")])
        .stderr(std::process::Stdio::null())
        .status()
        .expect("nbdcopy runs");
    assert!(!status.success(), "the copy cannot get through");
    server.wait_for_log(0, &["the array has failed"]);
    let stopped = server.stop();
    // Recorded once, and truthfully: not "could not record", not "marked clean".
    assert!(
        !stopped.stderr.contains("could not record"),
        "{}",
        stopped.stderr
    );
    assert!(
        stopped
            .stdout
            .contains("not every array could be marked clean"),
        "{}",
        stopped.stdout
    );
    assert!(
        stopped.stderr.contains("has failed ("),
        "{}",
        stopped.stderr
    );
    let (d1_events, _) = examine(&disks.join("d1"));
    let (d2_events, d2_state) = examine(&disks.join("d2"));
    assert_eq!(d2_events, d1_events + 1, "{}", stopped.stderr);
    assert!(d2_state.starts_with("..AA"), "{d2_state}");
    let err = fails(&["read", p(&disks)]);
    assert!(err.contains("xraid serve --force"), "{err}");
}

/// A role the newest role table gives to a device that is not given may hold writes
/// the others missed: forcing another member back is refused, and nothing written.
#[test]
fn force_refuses_while_a_member_recorded_serving_is_absent() {
    require_tool!("mdadm");
    let dir = tempdir();
    let disks = degraded_raid5_holding(dir.path(), &random_bytes(1 << 20, 45));
    std::fs::rename(disks.join("d1"), dir.path().join("d1.away")).expect("take d1 away");
    let (events, _) = examine(&disks.join("d2"));
    let err = fails(&[
        "serve",
        "--force",
        "--socket",
        "/nonexistent/x.sock",
        p(&disks),
    ]);
    assert!(err.contains("cannot force"), "{err}");
    assert!(
        err.contains("role 1's member is not among the members given"),
        "{err}"
    );
    assert_eq!(examine(&disks.join("d2")).0, events, "nothing written");
    let out = crate::util::xraid()
        .args(["serve", "--force", "--read-only", p(&disks)])
        .output()
        .expect("xraid runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--read-only"),
        "{err}"
    );
}
