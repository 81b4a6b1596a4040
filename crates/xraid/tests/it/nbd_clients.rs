//! `xraid serve` with real NBD clients: qemu-img, libnbd's nbdinfo, nbdcopy and nbdsh,
//! and fio's nbd engine. Each writes or reads through the server, and what it sees is
//! checked against the array read back without the server.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::require_tool;
use crate::server::{raid5, Server};
use crate::util::{hashes, ok, p, random_bytes, sha256_file, sha256_of_read, tempdir};

/// A RAID-5 of four 16 MiB members, chunk 64K.
const ARRAY_BYTES: u64 = 45 << 20;

/// `program`, killed if it runs for more than a minute: a server that never answers
/// fails the test instead of hanging it.
fn tool(program: &str) -> Command {
    let mut c = Command::new("timeout");
    c.args(["--signal=KILL", "60", program]);
    c
}

/// Runs `program ARGS`; panics with its output unless it succeeds; returns stdout.
pub(crate) fn run(program: &str, args: &[&str]) -> String {
    let out = tool(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    checked(program, args, &out)
}

fn checked(program: &str, args: &[&str], out: &Output) -> String {
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}; 137: killed after a minute):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `nbdinfo --json ARGS URI`, parsed.
pub(crate) fn nbdinfo_json(args: &[&str], uri: &str) -> serde_json::Value {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    full.push(uri);
    serde_json::from_str(&run("nbdinfo", &full)).expect("nbdinfo prints JSON")
}

/// `xraid status --json`'s "state" ("clean" or "active") and event count.
fn state(disks: &Path) -> (String, u64) {
    let status: serde_json::Value =
        serde_json::from_str(&ok(&["status", "--json", p(disks)])).expect("status JSON");
    (
        status["state"].as_str().expect("state").to_owned(),
        status["events"].as_u64().expect("events"),
    )
}

/// Writes `data` to a file in `dir` and returns its path.
fn file_with(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, data).expect("write a test file");
    path
}

/// nbdsh, when its Python module can be loaded. nbdsh runs `python3 -m nbd`, and the
/// module is installed for the system Python, which a python3 earlier on PATH (pyenv,
/// a virtualenv) hides: put the system's first.
pub(crate) fn nbdsh() -> Option<Command> {
    let path = format!(
        "/usr/bin:/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    let works = tool("nbdsh")
        .env("PATH", &path)
        .args(["-c", "pass"])
        .output()
        .is_ok_and(|o| o.status.success());
    works.then(|| {
        let mut c = tool("nbdsh");
        c.env("PATH", path);
        c
    })
}

/// qemu-img writes the raw `image` into the export at `uri`, then finds them identical.
fn convert_and_compare(image: &Path, uri: &str) {
    run(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", p(image), uri],
    );
    let same = run(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", p(image), uri],
    );
    assert!(same.contains("identical"), "{uri}: {same}");
}

#[test]
fn qemu_img_writes_an_image_and_compares_it() {
    require_tool!("qemu-img");
    require_tool!("nbdinfo");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let uri = server.uri("xraid");
    let size: u64 = run("nbdinfo", &["--size", &uri])
        .trim()
        .parse()
        .expect("a size");
    assert_eq!(size, ARRAY_BYTES);
    let image = file_with(dir.path(), "image.raw", &random_bytes(size as usize, 7));
    convert_and_compare(&image, &uri);
    // compare does notice a difference (one byte, late in the image).
    let mut changed = std::fs::read(&image).expect("image");
    changed[40 << 20] ^= 1;
    let other = file_with(dir.path(), "changed.raw", &changed);
    let out = tool("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw", p(&other), &uri])
        .output()
        .expect("qemu-img runs");
    assert_eq!(out.status.code(), Some(1), "compare finds the changed byte");
    server.stop();
    assert_eq!(sha256_of_read(&[p(&disks)]), sha256_file(&image));
}

/// A plain-file export takes qemu-img's writes — long ones go from the socket into the
/// file by splice — over TCP and a Unix socket, and holds exactly the image.
#[test]
fn qemu_img_writes_a_plain_file_export_over_tcp_and_unix_sockets() {
    require_tool!("qemu-img");
    for tcp in [true, false] {
        let dir = tempdir();
        let target = file_with(dir.path(), "target.img", &vec![0u8; 24 << 20]);
        let server = if tcp {
            Server::tcp(dir.path(), &[p(&target)])
        } else {
            Server::unix(dir.path(), &[p(&target)])
        };
        let uri = server.uri("xraid");
        let image = file_with(dir.path(), "image.raw", &random_bytes(24 << 20, 9));
        convert_and_compare(&image, &uri);
        server.stop();
        assert_eq!(sha256_file(&target), sha256_file(&image), "tcp {tcp}");
    }
}

#[test]
fn nbdcopy_copies_the_whole_export_out() {
    require_tool!("nbdcopy");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let data = random_bytes(5 << 20, 8);
    let input = file_with(dir.path(), "in.bin", &data);
    ok(&["write", "--offset", "3M", "-i", p(&input), p(&disks)]);
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let out = dir.path().join("out.img");
    run("nbdcopy", &[&server.uri("xraid"), p(&out)]);
    server.stop();
    let copied = std::fs::read(&out).expect("the copy");
    assert_eq!(copied.len() as u64, ARRAY_BYTES);
    assert!(
        copied[3 << 20..8 << 20] == data[..],
        "what xraid write wrote"
    );
    assert!(copied[..3 << 20].iter().all(|&b| b == 0), "zeros before it");
    assert_eq!(sha256_file(&out), sha256_of_read(&[p(&disks)]));
}

#[test]
fn nbdinfo_shows_extents_flags_and_block_sizes() {
    require_tool!("nbdinfo");
    let dir = tempdir();
    // A sparse 64 MiB file with data at 10M..12M.
    let sparse = dir.path().join("sparse.img");
    let f = std::fs::File::create(&sparse).expect("sparse file");
    f.set_len(64 << 20).expect("size");
    std::os::unix::fs::FileExt::write_all_at(&f, &random_bytes(2 << 20, 4), 10 << 20)
        .expect("data");
    drop(f);
    let file_dir = dir.path().join("file");
    std::fs::create_dir(&file_dir).expect("dir");
    let server = Server::unix(&file_dir, &[p(&sparse)]);
    let uri = server.uri("xraid");
    // Type 3 is hole and zero, 0 is data.
    assert_eq!(
        map_of(&uri),
        [
            (0, 10 << 20, 3),
            (10 << 20, 2 << 20, 0),
            (12 << 20, 52 << 20, 3)
        ]
    );
    let file = nbdinfo_json(&[], &uri);
    let file = &file["exports"][0];
    assert_eq!(file["block_size_minimum"], 1, "{file}");
    assert_eq!(file["export-size"], 64 << 20);
    server.stop();

    let disks = raid5(dir.path(), "16M");
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let info = nbdinfo_json(&[], &server.uri("xraid"));
    let array = &info["exports"][0];
    assert_eq!(array["block_size_minimum"], 512, "{array}");
    assert_eq!(array["export-size"], ARRAY_BYTES);
    server.stop();
    for export in [file, array] {
        for flag in [
            "can_flush",
            "can_fua",
            "can_trim",
            "can_zero",
            "can_multi_conn",
        ] {
            assert_eq!(export[flag], true, "{flag}: {export}");
        }
        assert_eq!(export["is_read_only"], false, "{export}");
    }
}

/// `nbdinfo --map URI` as (offset, length, type) triples; type 3 is hole and zero,
/// 0 is data.
fn map_of(uri: &str) -> Vec<(u64, u64, u64)> {
    let map = nbdinfo_json(&["--map"], uri);
    map.as_array()
        .expect("a list of extents")
        .iter()
        .map(|e| {
            let n = |k: &str| e[k].as_u64().expect("a number");
            (n("offset"), n("length"), n("type"))
        })
        .collect()
}

#[test]
fn nbdinfo_maps_the_holes_of_an_array() {
    require_tool!("nbdinfo");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    // 2 MiB of data at 10M, in the middle of stripes; parity is written too but is
    // not the array's data.
    let input = file_with(dir.path(), "in.bin", &random_bytes(2 << 20, 9));
    ok(&["write", "--offset", "10M", "-i", p(&input), p(&disks)]);
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let uri = server.uri("xraid");
    let expected = [
        (0, 10 << 20, 3),
        (10 << 20, 2 << 20, 0),
        (12 << 20, ARRAY_BYTES - (12 << 20), 3),
    ];
    assert_eq!(map_of(&uri), expected);
    server.stop();

    // Degraded: the chunks the missing member held count as data (a read rebuilds
    // them from the others); the holes elsewhere stay holes.
    let m0 = disks.join("d0");
    let members: Vec<String> = (1..4)
        .map(|i| disks.join(format!("d{i}")).display().to_string())
        .collect();
    assert!(m0.exists());
    let args: Vec<&str> = members.iter().map(String::as_str).collect();
    let server = Server::unix(dir.path(), &args);
    let map = map_of(&server.uri("xraid"));
    let data: u64 = map.iter().filter(|e| e.2 == 0).map(|e| e.1).sum();
    let holes: u64 = map.iter().filter(|e| e.2 == 3).map(|e| e.1).sum();
    assert_eq!(data + holes, ARRAY_BYTES, "{map:?}");
    // Member 0 holds a quarter of the data chunks (three stripes in four); the
    // written 2 MiB add at most their own length.
    assert!(
        (ARRAY_BYTES / 4..=ARRAY_BYTES / 4 + (2 << 20)).contains(&data),
        "{map:?}"
    );
    server.stop();
}

#[test]
fn trims_and_zeroes_free_member_space_on_an_array() {
    require_tool!("nbdinfo");
    require_tool!("nbdcopy");
    let Some(mut nbdsh) = nbdsh() else {
        eprintln!("skipped: nbdsh cannot load its Python module");
        return;
    };
    const K: u64 = 1024;
    const M: u64 = 1 << 20;
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let mut expected = random_bytes(6 << 20, 11);
    let input = file_with(dir.path(), "in.bin", &expected);
    ok(&["write", "-i", p(&input), p(&disks)]);
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let uri = server.uri("xraid");
    // A trim of 1M..3M frees the whole stripes (192 KiB of data each) inside it:
    // 1152K..3M. Write-zeroes of 4M..5M may punch (any alignment: data rows are
    // freed, parity is computed as usual); of 5M..5.5M with NO_HOLE must not.
    let out = nbdsh
        .args(["-c", &format!("h.connect_uri('{uri}')")])
        .args(["-c", &format!("h.trim({}, {})", 2 * M, M)])
        .args(["-c", &format!("h.zero({}, {})", M, 4 * M)])
        .args([
            "-c",
            &format!("h.zero({}, {}, nbd.CMD_FLAG_NO_HOLE)", 512 * K, 5 * M),
        ])
        .output()
        .expect("nbdsh runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (start, end) in [(1152 * K, 3 * M), (4 * M, 5 * M), (5 * M, 5 * M + 512 * K)] {
        expected[start as usize..end as usize].fill(0);
    }
    assert_eq!(
        map_of(&uri),
        [
            (0, 1152 * K, 0),
            (1152 * K, 3 * M - 1152 * K, 3),
            (3 * M, M, 0),
            (4 * M, M, 3),
            (5 * M, M, 0),
            (6 * M, ARRAY_BYTES - 6 * M, 3),
        ]
    );
    let out = dir.path().join("out.img");
    run("nbdcopy", &[&uri, p(&out)]);
    let copied = std::fs::read(&out).expect("the copy");
    assert!(
        copied[..6 << 20] == expected[..],
        "trimmed and zeroed ranges read back"
    );
    server.stop();
    // Parity agrees with the freed ranges.
    let check: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("JSON");
    assert_eq!(check["mismatched_units"], 0, "{check}");
}

#[test]
fn a_trim_of_the_whole_array_frees_it_all() {
    require_tool!("nbdinfo");
    require_tool!("nbdcopy");
    let Some(mut nbdsh) = nbdsh() else {
        eprintln!("skipped: nbdsh cannot load its Python module");
        return;
    };
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let input = file_with(
        dir.path(),
        "in.bin",
        &random_bytes(ARRAY_BYTES as usize, 12),
    );
    ok(&["write", "-i", p(&input), p(&disks)]);
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let uri = server.uri("xraid");
    // 45 MiB in one request: several windows of pieces through the engine.
    let out = nbdsh
        .args(["-c", &format!("h.connect_uri('{uri}')")])
        .args(["-c", &format!("h.trim({ARRAY_BYTES}, 0)")])
        .output()
        .expect("nbdsh runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(map_of(&uri), [(0, ARRAY_BYTES, 3)]);
    let copy = dir.path().join("out.img");
    run("nbdcopy", &[&uri, p(&copy)]);
    let copied = std::fs::read(&copy).expect("the copy");
    assert!(
        copied.iter().all(|&b| b == 0),
        "a trimmed array reads as zeros"
    );
    server.stop();
    let check: serde_json::Value =
        serde_json::from_str(&ok(&["scrub", "check", "--json", p(&disks)])).expect("JSON");
    assert_eq!(check["mismatched_units"], 0, "{check}");
}

#[test]
fn fio_verifies_random_writes_over_four_connections() {
    require_tool!("fio");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let (_, events_before) = state(&disks);
    let fio = |uri: &str, extra: &[&str]| {
        let uri = format!("--uri={uri}");
        let mut args = vec![
            "--name=v",
            "--ioengine=nbd",
            &uri,
            "--rw=randwrite",
            "--bs=4k",
            "--size=8M",
            "--offset_increment=8M",
            "--numjobs=4",
            "--iodepth=16",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--group_reporting",
            "--output-format=json",
        ];
        args.extend_from_slice(extra);
        let out = tool("fio")
            .args(&args)
            .current_dir(dir.path())
            .output()
            .expect("fio runs");
        let stdout = checked("fio", &args, &out);
        // The nbd engine says "fio: connected to NBD server" before the JSON.
        let json = &stdout[stdout.find('{').expect("fio's JSON")..];
        let report: serde_json::Value = serde_json::from_str(json).expect("fio JSON");
        let job = report["jobs"][0].clone();
        assert_eq!(job["error"], 0, "{job}");
        job
    };
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let job = fio(&server.uri("xraid"), &[]);
    assert_eq!(job["write"]["io_bytes"], 32 << 20, "written");
    assert_eq!(job["read"]["io_bytes"], 32 << 20, "read back and verified");
    server.stop();
    let (state_after, events_after) = state(&disks);
    assert_eq!(state_after, "clean");
    assert!(events_after > events_before, "the writes were recorded");
    // Served again, every block still verifies.
    let server = Server::unix(dir.path(), &[p(&disks)]);
    let job = fio(&server.uri("xraid"), &["--verify_only"]);
    assert_eq!(
        job["read"]["io_bytes"],
        32 << 20,
        "verified after a restart"
    );
    server.stop();
}

#[test]
fn a_read_only_export_refuses_writes() {
    require_tool!("nbdinfo");
    let dir = tempdir();
    let disks = raid5(dir.path(), "4M");
    let data = random_bytes(1 << 20, 6);
    let input = file_with(dir.path(), "in.bin", &data);
    ok(&["write", "-i", p(&input), p(&disks)]);
    let members: Vec<PathBuf> = (0..4).map(|i| disks.join(format!("d{i}"))).collect();
    let before = hashes(&members);
    let server = Server::unix(dir.path(), &["--read-only", p(&disks)]);
    let uri = server.uri("xraid");
    let info = nbdinfo_json(&[], &uri);
    assert_eq!(info["exports"][0]["is_read_only"], true, "{info}");
    if let Some(mut nbdsh) = nbdsh() {
        // Strict mode off: libnbd sends the write instead of refusing it itself.
        let out = nbdsh
            .args(["-c", "h.set_strict_mode(0)"])
            .args(["-c", &format!("h.connect_uri('{uri}')")])
            .args(["-c", "h.pwrite(b'x' * 512, 0)"])
            .output()
            .expect("nbdsh runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "the write succeeded");
        assert!(
            stderr.contains("command failed: Operation not permitted"),
            "the server's EPERM: {stderr}"
        );
    } else if crate::util::has_tool("qemu-io") {
        let out = tool("qemu-io")
            .args(["-f", "raw", &uri, "-c", "write 0 512"])
            .output()
            .expect("qemu-io runs");
        assert!(!out.status.success(), "qemu-io wrote to a read-only export");
    }
    // Reading works.
    if crate::util::has_tool("nbdcopy") {
        let out = dir.path().join("out.img");
        run("nbdcopy", &[&uri, p(&out)]);
        let copied = std::fs::read(&out).expect("copy");
        assert!(copied[..data.len()] == data[..], "read through the export");
    }
    server.stop();
    assert_eq!(hashes(&members), before, "members unchanged");
}

#[test]
fn data_survives_stop_and_restart_and_a_kill() {
    require_tool!("qemu-img");
    require_tool!("nbdcopy");
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let image = file_with(dir.path(), "image.raw", &random_bytes(8 << 20, 12));
    let convert = |uri: &str, image: &Path| {
        run(
            "qemu-img",
            &["convert", "-n", "-f", "raw", "-O", "raw", p(image), uri],
        );
    };
    let server = Server::unix(dir.path(), &[p(&disks)]);
    convert(&server.uri("xraid"), &image);
    let stopped = server.stop();
    assert!(
        stopped.stdout.contains("marked clean"),
        "{}",
        stopped.stdout
    );
    assert_eq!(state(&disks).0, "clean");
    let len = (8 << 20).to_string();
    let prefix = |disks: &Path| sha256_of_read(&["--length", &len, p(disks)]);
    assert_eq!(prefix(&disks), sha256_file(&image));
    let whole = sha256_of_read(&[p(&disks)]);

    let server = Server::unix(dir.path(), &[p(&disks)]);
    let out = dir.path().join("out.img");
    run("nbdcopy", &[&server.uri("xraid"), p(&out)]);
    assert_eq!(sha256_file(&out), whole, "served again, the same array");

    // Killed without a chance to close, the array stays "active" (so "clean" above
    // means something), and the flushed writes are there.
    let second = file_with(dir.path(), "second.raw", &random_bytes(8 << 20, 13));
    convert(&server.uri("xraid"), &second);
    server.kill();
    assert_eq!(state(&disks).0, "active");
    assert_eq!(prefix(&disks), sha256_file(&second));
}

#[test]
fn a_config_file_serves_two_exports_by_name() {
    require_tool!("nbdinfo");
    require_tool!("nbdcopy");
    let dir = tempdir();
    let disks = raid5(dir.path(), "4M");
    let a = random_bytes(1 << 20, 21);
    let input = file_with(dir.path(), "a.bin", &a);
    ok(&["write", "-i", p(&input), p(&disks)]);
    let b = random_bytes(3 << 20, 22);
    let plain = file_with(dir.path(), "b.img", &b);
    let socket = dir.path().join("nbd.sock");
    let config = format!(
        "socket = \"{}\"\n\n[[export]]\nname = \"a\"\npaths = [\"{}\"]\n\n\
         [[export]]\nname = \"b\"\npaths = [\"{}\"]\n",
        p(&socket),
        p(&disks),
        p(&plain)
    );
    let config_path = file_with(dir.path(), "serve.toml", config.as_bytes());
    let server = Server::spawn(dir.path(), &["serve", "--config", p(&config_path)]);
    let list = nbdinfo_json(&["--list"], &server.uri(""));
    let mut names: Vec<&str> = list["exports"]
        .as_array()
        .expect("exports")
        .iter()
        .map(|e| e["export-name"].as_str().expect("a name"))
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b"], "{list}");
    let out_a = dir.path().join("a.out");
    run("nbdcopy", &[&server.uri("a"), p(&out_a)]);
    let copied = std::fs::read(&out_a).expect("copy of a");
    assert!(copied[..a.len()] == a[..], "export a is the array");
    let out_b = dir.path().join("b.out");
    run("nbdcopy", &[&server.uri("b"), p(&out_b)]);
    assert_eq!(
        sha256_file(&out_b),
        sha256_file(&plain),
        "export b is the file"
    );
    let unknown = tool("nbdinfo")
        .arg(server.uri("c"))
        .output()
        .expect("nbdinfo runs");
    assert!(!unknown.status.success(), "no export c");
    server.stop();
}
