//! What `xraid serve` and `xraid demo` tell their user: the client command lines they
//! print work as printed (against the live server, with export names a URI must
//! encode, over TCP and Unix sockets, with and without TLS), and a config file's
//! mistakes are named in one line.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::require_tool;
use crate::server::Server;
use crate::util::{fails, p, tempdir};

/// An export name that a URI must percent-encode and qemu's options must escape.
const AWKWARD_NAME: &str = "my disk#1,?%";

/// The tools the printed lines run.
const CLIENTS: [&str; 3] = ["qemu-img", "nbdinfo", "nbdcopy"];

/// Runs `line` with bash (pipefail: a failed command before a `| sha256sum` counts)
/// in `cwd`, with this build's xraid first on PATH; returns its standard output and
/// panics with its error output if it fails.
fn run_line(line: &str, cwd: &Path) -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_xraid"))
        .parent()
        .expect("the binary's folder");
    let path = format!("{}:{}", p(bin), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .args(["-o", "pipefail", "-c", line])
        .current_dir(cwd)
        .env("PATH", path)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "`{line}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The indented client command lines in a server's output, with `DIR` (the folder of
/// CA certificates, for TLS) replaced by `ca_dir`.
fn client_lines(stdout: &str, ca_dir: Option<&Path>) -> Vec<String> {
    let lines: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| CLIENTS.iter().any(|c| l.starts_with(&format!("{c} "))))
        .map(|l| match ca_dir {
            Some(dir) => l.replace("=DIR", &format!("={}", p(dir))),
            None => l.to_owned(),
        })
        .collect();
    for client in CLIENTS {
        assert!(
            lines.iter().any(|l| l.starts_with(client)),
            "no {client} line in: {stdout}"
        );
    }
    lines
}

/// Serves a 1 MiB file as [`AWKWARD_NAME`] with `args`, on a Unix socket or TCP, and
/// runs every client line it prints.
fn printed_lines_work(unix: bool, args: &[&str], ca_dir: Option<&Path>) {
    let dir = tempdir();
    let file = dir.path().join("plain.img");
    std::fs::write(&file, vec![7u8; 1 << 20]).expect("file");
    let mut full = vec!["--name", AWKWARD_NAME];
    full.extend_from_slice(args);
    full.push(p(&file));
    let server = if unix {
        Server::unix(dir.path(), &full)
    } else {
        Server::tcp(dir.path(), &full)
    };
    let stdout = std::fs::read_to_string(dir.path().join("serve.out")).expect("serve.out");
    for line in client_lines(&stdout, ca_dir) {
        let out = run_line(&line, dir.path());
        if line.starts_with("nbdcopy") {
            let copy = std::fs::read(dir.path().join("copy.img")).expect("copy.img");
            assert_eq!(copy, vec![7u8; 1 << 20], "{line} copied other bytes");
            std::fs::remove_file(dir.path().join("copy.img")).expect("remove the copy");
        } else {
            assert!(out.contains("1048576"), "`{line}` printed no size: {out}");
        }
    }
    let log = server.stop().stderr;
    assert!(!log.contains("error"), "{log}");
}

#[test]
fn printed_client_lines_reach_awkwardly_named_exports() {
    for tool in CLIENTS {
        require_tool!(tool);
    }
    printed_lines_work(false, &[], None);
    printed_lines_work(true, &[], None);
}

/// A CA (its certificate in `dir/pki/ca-cert.pem`) and a certificate for 127.0.0.1 and
/// localhost signed by it, in `dir/server-cert.pem` and `dir/server-key.pem`.
fn make_pki(dir: &Path) -> PathBuf {
    std::fs::create_dir(dir.join("pki")).expect("pki folder");
    for script in [
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out pki/ca-cert.pem -days 2 -subj '/CN=xraid test CA'",
        "openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj '/CN=localhost'",
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext.cnf && openssl x509 -req -in server.csr -CA pki/ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out server-cert.pem -days 2 -extfile ext.cnf",
    ] {
        run_line(script, dir);
    }
    dir.join("pki")
}

#[test]
fn printed_client_lines_work_when_tls_is_required() {
    require_tool!("openssl");
    for tool in CLIENTS {
        require_tool!(tool);
    }
    let pki_dir = tempdir();
    let pki = make_pki(pki_dir.path());
    let cert = pki_dir.path().join("server-cert.pem");
    let key = pki_dir.path().join("server-key.pem");
    let args = [
        "--tls",
        "require",
        "--tls-cert",
        p(&cert),
        "--tls-key",
        p(&key),
    ];
    printed_lines_work(false, &args, Some(&pki));
    printed_lines_work(true, &args, Some(&pki));
}

#[test]
fn demo_prints_only_what_works_while_it_serves() {
    require_tool!("nbdcopy");
    let dir = tempdir();
    let demo = dir.path().join("demo dir");
    let server = Server::spawn(
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
    let stdout = std::fs::read_to_string(dir.path().join("serve.out")).expect("serve.out");
    let xraid_lines: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("  xraid "))
        .collect();
    let (now, later): (Vec<&str>, Vec<&str>) = xraid_lines
        .iter()
        .partition(|l| !l.contains("after Ctrl-C"));
    assert_eq!(now.len(), 2, "{stdout}");
    assert_eq!(later.len(), 1, "{stdout}");
    for line in &now {
        run_line(&format!("xraid {line}"), dir.path());
    }
    let uri = server.uri("demo");
    let served = run_line(&format!("nbdcopy {uri} - | sha256sum"), dir.path());
    let stopped = server.stop();
    assert!(
        stopped.stdout.contains("nbdcopy nbd://"),
        "{}",
        stopped.stdout
    );
    // The read waits for the server to let go of the members, as the line says.
    let read = run_line(&format!("xraid {}", later[0]), dir.path());
    assert_eq!(read, served, "xraid read and the served array differ");
    assert_ne!(
        read.split_whitespace().next(),
        Some("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        "the read printed nothing"
    );
}

#[test]
fn config_file_mistakes_are_named_with_their_place() {
    let dir = tempdir();
    let file = dir.path().join("a.img");
    std::fs::write(&file, vec![0u8; 1 << 20]).expect("file");
    let export = format!("[[export]]\nname = \"a\"\npaths = [\"{}\"]\n", p(&file));
    for (text, wanted) in [
        (
            format!("{export}colour = 1\n"),
            "line 4, column 1: unknown field `colour`",
        ),
        (
            "[[export]]\nname = \"a\"\n".to_owned(),
            "line 1, column 1: missing field `paths`",
        ),
        (
            format!("[[export]]\npaths = [\"{}\"]\n", p(&file)),
            "line 1, column 1: missing field `name`",
        ),
        (
            format!("max_connections = \"many\"\n{export}"),
            "line 1, column 19: invalid type: string \"many\", expected usize",
        ),
    ] {
        let config = dir.path().join("serve.toml");
        std::fs::write(&config, &text).expect("config");
        let err = fails(&["serve", "--config", p(&config)]);
        assert!(err.contains(wanted), "{text:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}
