//! The NBD server against clients that break the protocol, vanish mid-request, never
//! read their replies, or come in floods: each loses its own connection (with one log
//! line naming it) or gets an error reply, everyone else is served as before, and
//! nothing an acknowledged request wrote is lost.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use xraid_nbd::consts::*;
use xraid_nbd::{Command, Request};

use crate::nbd_raw::Client;
use crate::server::{raid5, Server};
use crate::util::{hashes, ok, p, random_bytes, tempdir};

const NAME: &str = "xraid";
/// What a well-behaved client answers the greeting with.
const CLIENT_FLAGS: [u8; 4] = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes();
/// A RAID-5 of four 16 MiB members.
const ARRAY_BYTES: u64 = 45 << 20;

/// A served 45 MiB RAID-5 (large enough for 33 MiB requests to be in range) with
/// `known` written at offset 0 through a well-behaved client and flushed.
struct Setup {
    // Dropped first: the server stops before its folder goes.
    server: Server,
    known: Vec<u8>,
    disks: PathBuf,
    dir: TempDir,
}

fn setup(extra: &[&str]) -> Setup {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let mut args = extra.to_vec();
    args.push(p(&disks));
    let server = Server::tcp(dir.path(), &args);
    let known = random_bytes(64 << 10, 1);
    let mut c = Client::open(server.tcp_addr(), NAME, false);
    assert_eq!(c.size, ARRAY_BYTES, "export size");
    write_acknowledged(&mut c, 0, &known);
    c.disconnect();
    Setup {
        server,
        known,
        disks,
        dir,
    }
}

fn write_acknowledged(c: &mut Client, offset: u64, data: &[u8]) {
    assert_eq!(c.write(offset, data), 0, "write acknowledged");
    assert_eq!(c.flush(), 0, "flush acknowledged");
}

/// A fresh client completes the handshake and reads `expected` at `offset`.
fn assert_serving(server: &Server, offset: u64, expected: &[u8], after: &str) {
    let mut c = Client::open(server.tcp_addr(), NAME, false);
    let got = c
        .read(offset, expected.len() as u32)
        .unwrap_or_else(|e| panic!("after {after}: a read failed with error {e}"));
    assert!(got == expected, "after {after}: the data read back differs");
    c.disconnect();
}

/// After the server stopped, `xraid read` finds `expected` at `offset`.
fn assert_on_disk(dir: &Path, disks: &Path, offset: u64, expected: &[u8]) {
    let out = dir.join("check.bin");
    ok(&[
        "read",
        "--offset",
        &offset.to_string(),
        "--length",
        &expected.len().to_string(),
        "-o",
        p(&out),
        p(disks),
    ]);
    assert!(
        std::fs::read(&out).expect("read back") == expected,
        "xraid read after the server stopped: data at {offset} differs"
    );
}

/// `client` did something the server must not accept: the server closes that
/// connection, logs exactly one line naming the client (containing `needle`, if
/// given), and goes on serving others.
fn assert_dropped(s: &Setup, since: usize, mut client: Client, what: &str, needle: Option<&str>) {
    let peer = client.local_addr();
    client.expect_closed(what);
    drop(client);
    assert_serving(&s.server, 0, &s.known, what);
    if let Some(needle) = needle {
        let line = s.server.wait_for_log(since, &[&peer, needle]);
        let new = s.server.log_lines().len() - since;
        assert_eq!(
            new,
            1,
            "{what}: one log line, got {new}:\n{}",
            s.server.stderr()
        );
        assert!(line.contains("error"), "{what}: {line}");
    }
}

/// What goes wrong, what the log line says (if the server logs one), and how to do it
/// on a connection that just got the greeting.
type HandshakeCase = (&'static str, Option<&'static str>, fn(&mut Client));

#[test]
fn handshake_faults_close_only_that_connection() {
    let s = setup(&[]);
    let cases: [HandshakeCase; 6] = [
        (
            "client flags without FIXED_NEWSTYLE",
            Some("fixed newstyle"),
            |c| c.send_client_flags(FLAG_C_NO_ZEROES),
        ),
        (
            "unknown client flag bits",
            Some("unknown client flags 0x83"),
            |c| c.send_client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES | 0x80),
        ),
        ("garbage instead of IHAVEOPT", Some("bad magic"), |c| {
            c.send(&[CLIENT_FLAGS.as_slice(), b"GET / HTTP/1.1\r\n\r\n"].concat())
        }),
        (
            "a connection closed halfway through an option header",
            None,
            |c| {
                let header = Client::option_header(OPT_GO, 20);
                c.send(&[CLIENT_FLAGS.as_slice(), &header[..10]].concat());
                c.shutdown_write();
            },
        ),
        ("an option of 100 MB", Some("100000000 bytes"), |c| {
            let header = Client::option_header(OPT_GO, 100_000_000);
            c.send(&[CLIENT_FLAGS.as_slice(), &header, &[0u8; 4096]].concat());
        }),
        (
            "NBD_OPT_EXPORT_NAME for an unknown export",
            Some("unknown export 'nope'"),
            |c| {
                let header = Client::option_header(OPT_EXPORT_NAME, 4);
                c.send(&[CLIENT_FLAGS.as_slice(), &header, b"nope"].concat());
            },
        ),
    ];
    for (what, needle, case) in cases {
        let since = s.server.log_lines().len();
        let mut c = Client::connect(s.server.tcp_addr());
        case(&mut c);
        assert_dropped(&s, since, c, what, needle);
    }
}

#[test]
fn refused_options_leave_the_handshake_usable() {
    let s = setup(&[]);
    let mut c = Client::connect(s.server.tcp_addr());
    c.send_client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    c.send_option(99, b"what is this");
    let r = c.option_reply();
    assert_eq!((r.option, r.kind), (99, REP_ERR_UNSUP), "unknown option");
    assert_eq!(
        c.go("nope"),
        Err(REP_ERR_UNKNOWN),
        "GO for an unknown export"
    );
    // A name length that runs past the option's data.
    let mut go = 1000u32.to_be_bytes().to_vec();
    go.extend_from_slice(b"xraid\0\0");
    c.send_option(OPT_GO, &go);
    let r = c.option_reply();
    assert_eq!((r.option, r.kind), (OPT_GO, REP_ERR_INVALID), "a short GO");
    c.send_option(OPT_LIST, &[]);
    let r = c.option_reply();
    assert_eq!(r.kind, REP_SERVER, "NBD_OPT_LIST still answered");
    assert_eq!(&r.data[4..4 + NAME.len()], NAME.as_bytes());
    assert_eq!(c.option_reply().kind, REP_ACK);
    let (size, flags) = c.go(NAME).expect("NBD_OPT_GO after the refusals");
    assert_eq!(size, ARRAY_BYTES);
    assert!(flags & FLAG_READ_ONLY == 0);
    assert_eq!(c.read(0, 4096).expect("read"), s.known[..4096]);
    c.disconnect();
}

#[test]
fn bad_requests_get_error_replies_and_the_connection_goes_on() {
    let s = setup(&[]);
    let addr = s.server.tcp_addr();
    let known_len = s.known.len() as u32;
    for structured in [false, true] {
        let mut c = Client::open(addr, NAME, structured);
        let cases = [
            ("unknown command 42", Command::Unknown(42), 0, 4096, EINVAL),
            (
                "a read past the end",
                Command::Read,
                ARRAY_BYTES - 512,
                1024,
                EINVAL,
            ),
            (
                "a read whose end overflows 64 bits",
                Command::Read,
                u64::MAX - 511,
                1024,
                EINVAL,
            ),
            (
                "a read at an unaligned offset",
                Command::Read,
                100,
                512,
                EINVAL,
            ),
            (
                "a read of an unaligned length",
                Command::Read,
                0,
                100,
                EINVAL,
            ),
            ("a read of 33 MiB", Command::Read, 0, 33 << 20, EINVAL),
            (
                "block status without a metadata context",
                Command::BlockStatus,
                0,
                4096,
                EINVAL,
            ),
        ];
        for (what, command, offset, length, errno) in cases {
            let r = c.command(command, offset, length);
            assert_eq!(r.error, errno, "{what} (structured: {structured})");
            if structured {
                assert!(!r.message.is_empty(), "{what}: an error message");
            }
            let again = c.read(0, known_len);
            assert!(again.as_deref() == Ok(&s.known[..]), "after {what}");
        }
        // EOVERFLOW only where the client asked for the read whole (DF), and only
        // flags a command takes.
        if structured {
            let r = c.command_with(CMD_FLAG_DF, Command::Read, 0, 33 << 20);
            assert_eq!(r.error, EOVERFLOW, "a read of 33 MiB, not to be fragmented");
        }
        let wrong_flags = [
            ("NO_HOLE on a read", CMD_FLAG_NO_HOLE, Command::Read),
            ("REQ_ONE on a trim", CMD_FLAG_REQ_ONE, Command::Trim),
            ("FAST_ZERO on a cache", CMD_FLAG_FAST_ZERO, Command::Cache),
            ("DF on a flush", CMD_FLAG_DF, Command::Flush),
        ];
        for (what, flags, command) in wrong_flags {
            let r = c.command_with(flags, command, 0, 4096);
            assert_eq!(r.error, EINVAL, "{what} (structured: {structured})");
        }
        let r = c.command_with(CMD_FLAG_FUA, Command::Cache, 0, 4096);
        assert_eq!(r.error, 0, "FUA is accepted on any command");
        // Writes past the end: ENOSPC, as the protocol asks.
        let past = ARRAY_BYTES - 512;
        let cookie = c.request(Command::Write, past, 1024, &[0xEE; 1024]);
        assert_eq!(
            c.reply(cookie, past, 0).error,
            ENOSPC,
            "a write past the end"
        );
        let r = c.command(Command::WriteZeroes, past, 1024);
        assert_eq!(r.error, ENOSPC, "zeroes past the end");
        // A refused write's payload is skipped, not taken for the next request.
        let cookie = c.request(Command::Write, 100, 512, &[0xEE; 512]);
        assert_eq!(c.reply(cookie, 100, 0).error, EINVAL, "an unaligned write");
        assert!(
            c.read(0, known_len).as_deref() == Ok(&s.known[..]),
            "after the write"
        );
        c.disconnect();
    }
    // With base:allocation negotiated, block status works (so EINVAL above was about
    // the context).
    let mut c = Client::connect(addr);
    c.send_client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
    c.send_option(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply().kind, REP_ACK);
    c.structured = true;
    c.set_base_allocation(NAME);
    c.go(NAME).expect("GO");
    let r = c.command(Command::BlockStatus, 0, 4096);
    assert_eq!(r.error, 0, "block status: {}", r.message);
    assert!(!r.extents.is_empty(), "block status extents");
    c.disconnect();
}

#[test]
fn fatal_requests_close_only_that_connection() {
    let s = setup(&[]);
    let addr = s.server.tcp_addr();
    let mut bystander = Client::open(addr, NAME, true);

    let since = s.server.log_lines().len();
    let mut c = Client::open(addr, NAME, false);
    c.send(&[0x55; 28]);
    assert_dropped(
        &s,
        since,
        c,
        "a request with a bad magic",
        Some("bad magic"),
    );

    let since = s.server.log_lines().len();
    let mut c = Client::open(addr, NAME, false);
    let header = Request {
        flags: 0,
        command: Command::Write,
        cookie: 7,
        offset: 0,
        length: 33 << 20,
    }
    .encode();
    c.send(&[header.as_slice(), &[0xEE; 4096]].concat());
    assert_dropped(
        &s,
        since,
        c,
        "a write of 33 MiB",
        Some("33554432-byte limit"),
    );

    let got = bystander.read(0, s.known.len() as u32);
    assert!(got.as_deref() == Ok(&s.known[..]), "the bystander reads on");
    bystander.disconnect();
    s.server.stop();
    assert_on_disk(s.dir.path(), &s.disks, 0, &s.known);
}

#[test]
fn writes_to_a_read_only_export_are_refused_with_eperm() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "4M");
    let known = random_bytes(64 << 10, 3);
    let input = dir.path().join("known.bin");
    std::fs::write(&input, &known).expect("known data");
    ok(&["write", "-i", p(&input), p(&disks)]);
    let members: Vec<PathBuf> = (0..4).map(|i| disks.join(format!("d{i}"))).collect();
    let before = hashes(&members);
    let server = Server::tcp(dir.path(), &["--read-only", p(&disks)]);
    for structured in [false, true] {
        let mut c = Client::open(server.tcp_addr(), NAME, structured);
        assert!(c.flags & FLAG_READ_ONLY != 0, "read-only flag");
        assert_eq!(c.write(0, &[0xEE; 4096]), EPERM, "write");
        // The payload was skipped: the next request is read as a request.
        let got = c.read(0, known.len() as u32);
        assert!(
            got.as_deref() == Ok(&known[..]),
            "read after the refused write"
        );
        assert_eq!(c.command(Command::Trim, 0, 4096).error, EPERM, "trim");
        let zero = c.command(Command::WriteZeroes, 0, 4096);
        assert_eq!(zero.error, EPERM, "write zeroes");
        c.disconnect();
    }
    server.stop();
    assert_eq!(hashes(&members), before, "members unchanged");
}

#[test]
fn clients_that_vanish_mid_request_lose_nothing_acknowledged() {
    let s = setup(&[]);
    let addr = s.server.tcp_addr();
    let data = random_bytes(1 << 20, 11);
    let mut good = Client::open(addr, NAME, false);
    write_acknowledged(&mut good, 1 << 20, &data);

    // A write over the same range whose payload stops halfway.
    let since = s.server.log_lines().len();
    let mut bad = Client::open(addr, NAME, false);
    let peer = bad.local_addr();
    let header = Request {
        flags: 0,
        command: Command::Write,
        cookie: 1,
        offset: 1 << 20,
        length: 1 << 20,
    }
    .encode();
    bad.send(&[header.as_slice(), &[0xAA; 512 << 10]].concat());
    drop(bad);
    s.server.wait_for_log(
        since,
        &[&peer, "in the middle of a write", "connection closed"],
    );

    // A write followed at once by NBD_CMD_DISC: the server must still do it.
    let last_words = random_bytes(1 << 20, 12);
    let mut leaving = Client::open(addr, NAME, false);
    leaving.request(Command::Write, 6 << 20, 1 << 20, &last_words);
    leaving.disconnect();

    // Reads asked for, the client gone before their replies.
    let mut gone = Client::open(addr, NAME, false);
    let gone_peer = gone.local_addr();
    for i in 0..8u64 {
        gone.request(Command::Read, i << 20, 1 << 20, &[]);
    }
    drop(gone);

    let got = good.read(1 << 20, 1 << 20);
    assert!(got.as_deref() == Ok(&data[..]), "the good client's data");
    good.disconnect();
    assert_serving(&s.server, 1 << 20, &data, "the vanished clients");
    let mentions = |log: &str, peer: &str| log.lines().filter(|l| l.contains(peer)).count();
    assert_eq!(
        mentions(&s.server.stderr(), &peer),
        1,
        "{}",
        s.server.stderr()
    );
    // A client that leaves between requests is no error, replies owed or not.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        mentions(&s.server.stderr(), &gone_peer),
        0,
        "{}",
        s.server.stderr()
    );
    s.server.stop();
    assert_on_disk(s.dir.path(), &s.disks, 1 << 20, &data);
    assert_on_disk(s.dir.path(), &s.disks, 0, &s.known);
    assert_on_disk(s.dir.path(), &s.disks, 6 << 20, &last_words);
}

#[test]
fn a_client_that_never_reads_replies_does_not_stall_others() {
    let s = setup(&[]);
    let addr = s.server.tcp_addr();
    let mut hog = Client::open(addr, NAME, false);
    let mut requests = Vec::new();
    for i in 0..200u64 {
        let header = Request {
            flags: 0,
            command: Command::Read,
            cookie: i,
            offset: (i % 40) << 20,
            length: 1 << 20,
        };
        requests.extend_from_slice(&header.encode());
    }
    hog.send(&requests);
    // Let the server fill the hog's socket and its own in-flight budget.
    std::thread::sleep(Duration::from_millis(300));

    let start = Instant::now();
    let mut other = Client::open(addr, NAME, false);
    for _ in 0..20 {
        let got = other.read(0, s.known.len() as u32);
        assert!(
            got.as_deref() == Ok(&s.known[..]),
            "the other client's read"
        );
    }
    let data = random_bytes(1 << 20, 5);
    write_acknowledged(&mut other, 2 << 20, &data);
    assert!(other.read(2 << 20, 1 << 20).as_deref() == Ok(&data[..]));
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the other client took {took:?}"
    );
    other.disconnect();

    drop(hog);
    let stopping = Instant::now();
    s.server.stop();
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "stop took {:?}",
        stopping.elapsed()
    );
    assert_on_disk(s.dir.path(), &s.disks, 2 << 20, &data);
}

#[test]
fn connections_beyond_the_limit_are_refused() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let server = Server::tcp(dir.path(), &["--max-connections", "4", p(&disks)]);
    let addr = server.tcp_addr().to_owned();
    let known = random_bytes(256 << 10, 9);
    let mut idle = vec![Client::open(&addr, NAME, false)];
    write_acknowledged(&mut idle[0], 4 << 20, &known);
    for _ in 1..4 {
        idle.push(Client::open(&addr, NAME, false));
    }

    let since = server.log_lines().len();
    let mut fifth = Client::connect_raw(&addr);
    let peer = fifth.local_addr();
    fifth.expect_closed("a fifth connection");
    server.wait_for_log(since, &["refused", &peer]);
    for c in &mut idle {
        let got = c.read(4 << 20, known.len() as u32);
        assert!(got.as_deref() == Ok(&known[..]), "the four are served");
    }

    idle.pop().expect("four clients").disconnect();
    // Once the server has noticed the close (it may refuse a few more meanwhile), a
    // new connection is served.
    let start = Instant::now();
    let mut c = loop {
        if let Some(c) = Client::try_connect(&addr) {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no connection accepted after one of four closed:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    c.handshake(NAME, false);
    assert!(c.read(4 << 20, known.len() as u32).as_deref() == Ok(&known[..]));
    c.disconnect();
    drop(idle);
    server.stop();
    assert_on_disk(dir.path(), &disks, 4 << 20, &known);
}

/// Reads, writes, trims, zeroings and caches of no bytes: the protocol leaves them
/// unspecified but asks the server to stay connected. Each gets success at once and
/// touches nothing (a structured read: one NONE chunk, as an OFFSET_DATA chunk must
/// carry data); before, a zeroing of no bytes on an array was never answered, spun the
/// array's thread and kept the server from stopping.
#[test]
fn requests_of_no_bytes_succeed_at_once_on_both_kinds_of_export() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let file = dir.path().join("plain.img");
    std::fs::write(&file, random_bytes(1 << 20, 21)).expect("plain file");
    let config = dir.path().join("exports.toml");
    let toml = format!(
        "[[export]]\nname = \"{NAME}\"\npaths = [\"{}\"]\n\n[[export]]\nname = \"plain\"\npaths = [\"{}\"]\n",
        p(&disks),
        p(&file)
    );
    std::fs::write(&config, toml).expect("config");
    let server = Server::tcp(dir.path(), &["--config", p(&config)]);
    let known = random_bytes(64 << 10, 22);
    for export in [NAME, "plain"] {
        for structured in [false, true] {
            let mut c = Client::open(server.tcp_addr(), export, structured);
            write_acknowledged(&mut c, 0, &known);
            let cases = [
                ("a read", 0, Command::Read),
                ("a write", CMD_FLAG_FUA, Command::Write),
                ("a trim", 0, Command::Trim),
                ("zeroes", 0, Command::WriteZeroes),
                (
                    "zeroes, no hole",
                    CMD_FLAG_NO_HOLE | CMD_FLAG_FUA,
                    Command::WriteZeroes,
                ),
                ("zeroes, fast", CMD_FLAG_FAST_ZERO, Command::WriteZeroes),
                ("a cache", 0, Command::Cache),
            ];
            for (what, flags, command) in cases {
                for offset in [0, 4096] {
                    let r = c.command_with(flags, command, offset, 0);
                    let case = format!(
                        "{what} of 0 bytes at {offset} ({export}, structured: {structured})"
                    );
                    assert_eq!(r.error, 0, "{case}: {}", r.message);
                    if structured {
                        assert_eq!(r.chunks, [(REPLY_TYPE_NONE, 0)], "{case}");
                    }
                }
            }
            let got = c.read(0, known.len() as u32);
            assert!(got.as_deref() == Ok(&known[..]), "{export}: data unchanged");
            c.disconnect();
        }
    }
    let stopped = server.stop();
    let said = format!("{}{}", stopped.stdout, stopped.stderr);
    assert!(
        said.contains("marked clean"),
        "the server stops and marks the array clean: {said}"
    );
    assert_on_disk(dir.path(), &disks, 0, &known);
}

/// A client that asks for replies and never reads them is dropped once its replies
/// have waited `STALL_LIMIT` (30 s) with almost none taken, with one log line, on both
/// kinds of export (a TCP receiver that reads nothing still lets a trickle through,
/// which kept a per-send timeout from ever firing; Unix sockets: `stall.rs`'s tests).
#[test]
fn a_client_that_stops_reading_its_replies_is_dropped_after_30_s() {
    let dir = tempdir();
    let disks = raid5(dir.path(), "16M");
    let file = dir.path().join("plain.img");
    std::fs::write(&file, random_bytes(48 << 20, 23)).expect("plain file");
    let array = Server::tcp(dir.path(), &[p(&disks)]);
    let plain_dir = dir.path().join("plain");
    std::fs::create_dir(&plain_dir).expect("folder");
    let plain = Server::tcp(&plain_dir, &[p(&file)]);
    let stuck = |addr: &str| {
        let mut hog = Client::open(addr, NAME, false);
        let requests: Vec<u8> = (0..200u64)
            .flat_map(|i| {
                Request {
                    flags: 0,
                    command: Command::Read,
                    cookie: i,
                    offset: (i % 40) << 20,
                    length: 1 << 20,
                }
                .encode()
            })
            .collect();
        hog.send(&requests);
        hog
    };
    let array_hog = stuck(array.tcp_addr());
    let array_peer = array_hog.local_addr();
    let plain_hog = stuck(plain.tcp_addr());
    let plain_peer = plain_hog.local_addr();
    let start = Instant::now();
    let dropped = |server: &Server, needle: &str| loop {
        if server
            .log_lines()
            .iter()
            .any(|l| l.contains("took almost none of its replies") && l.contains(needle))
        {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(50),
            "the stuck client is still served: {}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = dropped(&array, &array_peer);
    assert!(
        took >= Duration::from_secs(25),
        "dropped too soon: {took:?}"
    );
    dropped(&plain, &plain_peer);
    // One line each: the connection's own end says nothing more.
    std::thread::sleep(Duration::from_millis(500));
    let mentions = array
        .stderr()
        .lines()
        .filter(|l| l.contains(&array_peer))
        .count();
    assert_eq!(mentions, 1, "{}", array.stderr());
    drop((array_hog, plain_hog));
    let known = random_bytes(64 << 10, 24);
    let mut c = Client::open(array.tcp_addr(), NAME, false);
    write_acknowledged(&mut c, 0, &known);
    c.disconnect();
    array.stop();
    plain.stop();
    assert_on_disk(dir.path(), &disks, 0, &known);
}
