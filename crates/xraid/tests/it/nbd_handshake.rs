//! The handshake against what a client may send it: a refused
//! NBD_OPT_SET_META_CONTEXT still forgets the contexts selected before it, and export
//! names the server repeats (in its log, in error replies) are escaped and cut short.

use xraid_nbd::consts::*;
use xraid_nbd::{Command, MAX_STRING_BYTES};

use crate::nbd_raw::Client;
use crate::server::{raid5, Server};
use crate::util::{p, tempdir};

const NAME: &str = "xraid";

/// The payload of NBD_OPT_{LIST,SET}_META_CONTEXT asking `export` for base:allocation.
fn meta_payload(export: &str) -> Vec<u8> {
    let mut v = (export.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(export.as_bytes());
    v.extend_from_slice(&1u32.to_be_bytes());
    v.extend_from_slice(&(BASE_ALLOCATION.len() as u32).to_be_bytes());
    v.extend_from_slice(BASE_ALLOCATION.as_bytes());
    v
}

/// The payload of NBD_OPT_GO / NBD_OPT_INFO for `name`, asking for nothing more.
fn go_payload(name: &str) -> Vec<u8> {
    let mut v = (name.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&0u16.to_be_bytes());
    v
}

/// A client past the greeting and the client flags.
fn greeted(addr: &str) -> Client {
    let mut c = Client::connect(addr);
    c.send_client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    c
}

#[test]
fn a_refused_set_meta_context_leaves_no_context_selected() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "8M");
    let server = Server::tcp(dir.path(), &[p(&disks)]);
    // proto.md: SET "replaces all previously-set metadata contexts (including when
    // this command fails)".
    for (refused, kind) in [
        (meta_payload("nope"), REP_ERR_UNKNOWN),
        (vec![0, 0, 0], REP_ERR_INVALID),
    ] {
        let mut c = greeted(server.tcp_addr());
        c.send_option(OPT_STRUCTURED_REPLY, &[]);
        assert_eq!(c.option_reply().kind, REP_ACK);
        c.structured = true;
        c.set_base_allocation(NAME);
        c.send_option(OPT_SET_META_CONTEXT, &refused);
        assert_eq!(c.option_reply().kind, kind, "the second SET is refused");
        c.go(NAME).expect("NBD_OPT_GO");
        let r = c.command(Command::BlockStatus, 0, 4096);
        assert_eq!(r.error, EINVAL, "block status after a refused SET: {r:?}");
        c.disconnect();
    }
    // The connection that keeps its selection still gets block status.
    let mut c = greeted(server.tcp_addr());
    c.send_option(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply().kind, REP_ACK);
    c.structured = true;
    c.set_base_allocation(NAME);
    c.go(NAME).expect("NBD_OPT_GO");
    assert_eq!(c.command(Command::BlockStatus, 0, 4096).error, 0);
    c.disconnect();
    server.stop();
}

#[test]
fn export_names_cannot_forge_log_lines_or_outgrow_replies() {
    let dir = tempdir();
    let file = dir.path().join("plain.img");
    std::fs::write(&file, vec![0u8; 1 << 20]).expect("file");
    let server = Server::tcp(dir.path(), &[p(&file)]);
    let addr = server.tcp_addr().to_owned();
    let since = server.log_lines().len();
    let forged = "x'; connection closed\nxraid serve: error: 10.0.0.1:1: forged";
    let mut c = greeted(&addr);
    c.send_option(OPT_EXPORT_NAME, forged.as_bytes());
    c.expect_closed("an unknown export in NBD_OPT_EXPORT_NAME");
    let line = server.wait_for_log(since, &["unknown export"]);
    assert!(
        line.contains(r"x\'; connection closed\nxraid serve"),
        "{line}"
    );
    let lines = server.log_lines();
    assert_eq!(
        lines[since..]
            .iter()
            .filter(|l| l.contains("forged"))
            .count(),
        1,
        "a name made its own log line: {lines:?}"
    );
    // A 60,000-byte name: the reply and the log line repeat 256 characters of it.
    let long = "n".repeat(60_000);
    let mut c = greeted(&addr);
    for option in [OPT_GO, OPT_INFO] {
        c.send_option(option, &go_payload(&long));
        let r = c.option_reply();
        assert_eq!(r.kind, REP_ERR_UNKNOWN);
        assert!(r.data.len() <= MAX_STRING_BYTES, "{} bytes", r.data.len());
        let message = String::from_utf8_lossy(&r.data);
        assert!(message.contains("(60000 bytes in all)"), "{message}");
    }
    c.send_option(OPT_EXPORT_NAME, long.as_bytes());
    c.expect_closed("a long unknown export name");
    let line = server.wait_for_log(since, &["unknown export", "60000 bytes"]);
    assert!(line.len() < 500, "a {}-byte log line", line.len());
    server.stop();
}
