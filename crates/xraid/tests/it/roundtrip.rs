//! Arrays created by xraid hold what is written to them, on every level, through both
//! I/O backends, healthy and degraded.

use std::path::PathBuf;

use crate::util::{ok, p, random_bytes, tempdir};

fn create(dir: &std::path::Path, level: &str, layout: Option<&str>, n: usize) -> Vec<PathBuf> {
    let members: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("m{i}.img"))).collect();
    let mut args = vec!["create", "--level", level, "--chunk", "16K", "--size", "6M"];
    if let Some(layout) = layout {
        args.extend_from_slice(&["--layout", layout]);
    }
    args.extend(members.iter().map(|m| p(m)));
    ok(&args);
    members
}

#[test]
fn write_then_read_back_on_every_level() {
    for (level, layout, n) in [
        ("raid0", None, 3),
        ("raid1", None, 2),
        ("raid4", None, 4),
        ("raid5", Some("la"), 4),
        ("raid5", Some("rs"), 5),
        ("raid6", None, 6),
        ("raid10", Some("n2"), 4),
        ("raid10", Some("f2"), 3),
        ("raid10", Some("o2"), 4),
    ] {
        for backend in ["uring", "threads"] {
            let dir = tempdir();
            create(dir.path(), level, layout, n);
            let data = random_bytes(3 * 1024 * 1024 + 512 * 3, n as u64);
            let input = dir.path().join("in.bin");
            std::fs::write(&input, &data).expect("input");
            ok(&[
                "--io-backend",
                backend,
                "write",
                "--offset",
                "8K",
                "-i",
                p(&input),
                p(dir.path()),
            ]);
            let out = dir.path().join("out.bin");
            let len = data.len().to_string();
            ok(&[
                "--io-backend",
                backend,
                "read",
                "--offset",
                "8K",
                "--length",
                &len,
                "-o",
                p(&out),
                p(dir.path()),
            ]);
            assert!(
                std::fs::read(&out).expect("out") == data,
                "{level} {layout:?} {backend}"
            );
        }
    }
}

#[test]
fn data_written_while_degraded_reads_back() {
    for (level, n, leave_out) in [
        ("raid5", 4, vec![2]),
        ("raid6", 5, vec![0, 3]),
        ("raid1", 3, vec![1]),
    ] {
        let dir = tempdir();
        let members = create(dir.path(), level, None, n);
        let present: Vec<&str> = members
            .iter()
            .enumerate()
            .filter(|(i, _)| !leave_out.contains(i))
            .map(|(_, m)| p(m))
            .collect();
        let data = random_bytes(1024 * 1024 + 4096, 99);
        let input = dir.path().join("in.bin");
        std::fs::write(&input, &data).expect("input");
        let mut args = vec!["write", "--offset", "4K", "-i", p(&input)];
        args.extend_from_slice(&present);
        ok(&args);
        let out = dir.path().join("out.bin");
        let len = data.len().to_string();
        let mut args = vec!["read", "--offset", "4K", "--length", &len, "-o", p(&out)];
        args.extend_from_slice(&present);
        ok(&args);
        assert!(
            std::fs::read(&out).expect("out") == data,
            "{level} degraded"
        );
    }
}

#[test]
fn stdin_and_stdout_pipe_through() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempdir();
    create(dir.path(), "raid5", None, 3);
    // An odd length: the tail shorter than a sector keeps the bytes after it.
    let data = random_bytes(100_001, 5);
    let mut child = crate::util::xraid()
        .args(["write", p(dir.path())])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&data)
        .expect("pipe");
    assert!(child.wait().expect("wait").success());
    let out = crate::util::xraid()
        .args(["read", "--length", "100352", p(dir.path())])
        .output()
        .expect("read");
    assert!(out.status.success());
    assert_eq!(out.stdout.len(), 100_352);
    assert!(out.stdout[..data.len()] == data[..]);
    assert!(out.stdout[data.len()..].iter().all(|&b| b == 0));
}

#[test]
fn demo_runs_and_verifies() {
    let dir = tempdir();
    let demo = dir.path().join("demo");
    let out = ok(&[
        "demo",
        "--no-serve",
        "--dir",
        p(&demo),
        "--member-size",
        "8M",
    ]);
    assert!(out.contains("verified"), "{out}");
    assert!(out.contains("left out"), "{out}");
    // A second run reuses the array.
    let out = ok(&[
        "demo",
        "--no-serve",
        "--dir",
        p(&demo),
        "--member-size",
        "8M",
    ]);
    assert!(out.contains("reusing"), "{out}");
}

#[test]
fn demo_serves_the_array_it_verified() {
    crate::require_tool!("nbdinfo");
    let dir = tempdir();
    let demo = dir.path().join("demo");
    let server = crate::server::Server::spawn(
        dir.path(),
        &[
            "demo",
            "--dir",
            p(&demo),
            "--member-size",
            "8M",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    let uri = server.uri("demo");
    let info = std::process::Command::new("nbdinfo")
        .args(["--size", &uri])
        .output()
        .expect("nbdinfo runs");
    assert!(
        info.status.success(),
        "{}",
        String::from_utf8_lossy(&info.stderr)
    );
    let stopped = server.stop();
    assert!(stopped.stdout.contains("verified"), "{}", stopped.stdout);
    assert!(
        stopped.stdout.contains("nbdcopy nbd://"),
        "it says how to reach it: {}",
        stopped.stdout
    );
}
