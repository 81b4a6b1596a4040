//! TLS (NBD_OPT_STARTTLS): a certificate made by a test CA, clients that verify it,
//! `--tls require` refusing clients that stay in the clear, and bad key files.

use std::path::Path;
use std::process::Command;

use crate::require_tool;
use crate::server::{raid5, Server};
use crate::util::{p, random_bytes, tempdir, xraid};

/// A CA (its certificate in `dir/pki/ca-cert.pem`, where libnbd looks) and a server
/// certificate for 127.0.0.1 signed by it.
fn make_pki(dir: &Path) {
    std::fs::create_dir(dir.join("pki")).expect("pki folder");
    let sh = |script: &str| {
        let out = Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .output()
            .expect("sh runs");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out pki/ca-cert.pem -days 2 -subj '/CN=xraid test CA'");
    sh("openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj '/CN=localhost'");
    sh("printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext.cnf && openssl x509 -req -in server.csr -CA pki/ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out server-cert.pem -days 2 -extfile ext.cnf");
}

fn tool(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .output()
        .expect("tool runs")
}

#[test]
fn required_tls_serves_verified_clients_and_refuses_plain_ones() {
    require_tool!("openssl");
    require_tool!("nbdcopy");
    require_tool!("nbdinfo");
    let dir = tempdir();
    make_pki(dir.path());
    let disks = raid5(dir.path(), "8M");
    let cert = dir.path().join("server-cert.pem");
    let key = dir.path().join("server-key.pem");
    let server = Server::tcp(
        dir.path(),
        &[
            "--tls",
            "require",
            "--tls-cert",
            p(&cert),
            "--tls-key",
            p(&key),
            p(&disks),
        ],
    );
    let addr = server.tcp_addr().to_owned();
    let pki = dir.path().join("pki");
    let tls_uri = format!("nbds://{addr}/xraid?tls-certificates={}", p(&pki));
    let info = tool("nbdinfo", &[&tls_uri]);
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.status.success(),
        "{}",
        String::from_utf8_lossy(&info.stderr)
    );
    assert!(text.contains("with TLS"), "{text}");
    // Data crosses TLS both ways, on several connections, intact.
    let data = dir.path().join("data.bin");
    std::fs::write(&data, random_bytes(4 << 20, 31)).expect("data");
    let out = tool("nbdcopy", &[p(&data), &tls_uri]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back = dir.path().join("back.bin");
    let out = tool("nbdcopy", &[&tls_uri, p(&back)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&back).expect("copy");
    assert_eq!(&bytes[..4 << 20], &std::fs::read(&data).expect("data")[..]);
    // A client that does not start TLS gets nothing.
    let plain = tool("nbdinfo", &[&format!("nbd://{addr}/xraid")]);
    assert!(!plain.status.success(), "a plain client was served");
    // A client that does not trust the certificate's CA is refused by its own side.
    let other = tempdir();
    make_pki(other.path());
    let wrong = format!(
        "nbds://{addr}/xraid?tls-certificates={}",
        p(&other.path().join("pki"))
    );
    assert!(
        !tool("nbdinfo", &[&wrong]).status.success(),
        "an unverified server was accepted"
    );
    let log = server.stop().stderr;
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn allowed_tls_serves_both_kinds_of_client() {
    require_tool!("openssl");
    require_tool!("nbdinfo");
    let dir = tempdir();
    make_pki(dir.path());
    let file = dir.path().join("plain.img");
    std::fs::write(&file, vec![7u8; 1 << 20]).expect("file");
    let cert = dir.path().join("server-cert.pem");
    let key = dir.path().join("server-key.pem");
    let server = Server::tcp(
        dir.path(),
        &["--tls-cert", p(&cert), "--tls-key", p(&key), p(&file)],
    );
    let addr = server.tcp_addr().to_owned();
    let pki = dir.path().join("pki");
    let tls = tool(
        "nbdinfo",
        &[&format!("nbds://{addr}/xraid?tls-certificates={}", p(&pki))],
    );
    assert!(String::from_utf8_lossy(&tls.stdout).contains("with TLS"));
    let plain = tool("nbdinfo", &[&format!("nbd://{addr}/xraid")]);
    assert!(String::from_utf8_lossy(&plain.stdout).contains("without TLS"));
    server.stop();
}

#[test]
fn bad_tls_settings_are_refused_in_one_line() {
    let dir = tempdir();
    let file = dir.path().join("plain.img");
    std::fs::write(&file, vec![0u8; 1 << 20]).expect("file");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").expect("junk");
    for (args, needle) in [
        (vec!["--tls", "require"], "certificate"),
        (
            vec!["--tls-cert", p(&junk), "--tls-key", p(&junk)],
            "junk.pem",
        ),
        (vec!["--tls", "sometimes"], "tls"),
    ] {
        let mut full = vec!["serve", "--listen", "127.0.0.1:0"];
        full.extend(args.iter().copied());
        full.push(p(&file));
        let out = xraid().args(&full).output().expect("xraid runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{full:?} was accepted");
        assert!(err.contains(needle), "{full:?}: {err}");
    }
}
