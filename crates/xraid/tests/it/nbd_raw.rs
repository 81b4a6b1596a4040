//! A hand-written NBD client over TCP, for sending the server what real clients never
//! send: every step of the handshake and of transmission is its own method, so a test
//! can stop anywhere or send anything. Numbers come from `xraid_nbd::consts`, named
//! as in the NBD protocol (proto.md).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use xraid_nbd::consts::*;
use xraid_nbd::{Command, Request};

/// How long a reply may take before the test fails instead of hanging.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    next_cookie: u64,
    /// Whether structured replies were negotiated.
    pub structured: bool,
    /// From NBD_OPT_GO: the export's size and transmission flags.
    pub size: u64,
    pub flags: u16,
}

/// One option reply.
#[derive(Debug)]
pub struct OptionReply {
    pub option: u32,
    pub kind: u32,
    pub data: Vec<u8>,
}

/// A transmission reply, all its chunks gathered.
#[derive(Debug, Default)]
pub struct Reply {
    pub error: u32,
    pub message: String,
    /// A read's data.
    pub data: Vec<u8>,
    /// A block status reply's extents: (length, flags).
    pub extents: Vec<(u32, u32)>,
    /// A structured reply's chunks: (type, payload length).
    pub chunks: Vec<(u16, u32)>,
}

impl Client {
    /// Connects without reading or sending anything.
    pub fn connect_raw(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).expect("connect to the server");
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(REPLY_TIMEOUT))
            .expect("write timeout");
        Client {
            stream,
            next_cookie: 1,
            structured: false,
            size: 0,
            flags: 0,
        }
    }

    /// Connects and reads the server's fixed newstyle greeting; `None` if the server
    /// closes the connection instead.
    pub fn try_connect(addr: &str) -> Option<Client> {
        let mut c = Client::connect_raw(addr);
        let mut greeting = [0u8; 18];
        c.stream.read_exact(&mut greeting).ok()?;
        assert_eq!(greeting[..8], NBDMAGIC.to_be_bytes(), "NBDMAGIC");
        assert_eq!(greeting[8..16], IHAVEOPT.to_be_bytes(), "IHAVEOPT");
        let flags = u16::from_be_bytes([greeting[16], greeting[17]]);
        assert!(flags & FLAG_FIXED_NEWSTYLE != 0, "fixed newstyle offered");
        Some(c)
    }

    pub fn connect(addr: &str) -> Client {
        Client::try_connect(addr).expect("the server greets a new client")
    }

    /// A complete handshake: fixed newstyle, structured replies if asked, NBD_OPT_GO.
    pub fn open(addr: &str, name: &str, structured: bool) -> Client {
        let mut c = Client::connect(addr);
        c.handshake(name, structured);
        c
    }

    /// The rest of a handshake after the greeting.
    pub fn handshake(&mut self, name: &str, structured: bool) {
        self.send_client_flags(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        if structured {
            self.send_option(OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(self.option_reply().kind, REP_ACK, "structured replies");
            self.structured = true;
        }
        if let Err(kind) = self.go(name) {
            panic!("NBD_OPT_GO '{name}' refused with {kind:#x}");
        }
    }

    /// Our end's address, as the server's log names us.
    pub fn local_addr(&self) -> String {
        self.stream.local_addr().expect("local address").to_string()
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send to the server");
    }

    /// Half-closes: the server sees the end of the stream.
    pub fn shutdown_write(&self) {
        self.stream.shutdown(Shutdown::Write).expect("shutdown");
    }

    pub fn send_client_flags(&mut self, flags: u32) {
        self.send(&flags.to_be_bytes());
    }

    pub fn option_header(option: u32, length: u32) -> Vec<u8> {
        let mut out = IHAVEOPT.to_be_bytes().to_vec();
        out.extend_from_slice(&option.to_be_bytes());
        out.extend_from_slice(&length.to_be_bytes());
        out
    }

    pub fn send_option(&mut self, option: u32, data: &[u8]) {
        let mut out = Client::option_header(option, data.len() as u32);
        out.extend_from_slice(data);
        self.send(&out);
    }

    pub fn option_reply(&mut self) -> OptionReply {
        let mut h = [0u8; 20];
        self.stream.read_exact(&mut h).expect("option reply header");
        assert_eq!(h[..8], REPLY_MAGIC.to_be_bytes(), "option reply magic");
        let word = |i: usize| u32::from_be_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let mut data = vec![0u8; word(16) as usize];
        self.stream
            .read_exact(&mut data)
            .expect("option reply data");
        OptionReply {
            option: word(8),
            kind: word(12),
            data,
        }
    }

    /// NBD_OPT_GO for `name`: `Err(reply type)` when the server refuses (the
    /// connection stays in the handshake), else the export's size and flags.
    pub fn go(&mut self, name: &str) -> Result<(u64, u16), u32> {
        let mut data = (name.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(name.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        self.send_option(OPT_GO, &data);
        loop {
            let r = self.option_reply();
            assert_eq!(r.option, OPT_GO, "reply to NBD_OPT_GO");
            match r.kind {
                REP_ACK => return Ok((self.size, self.flags)),
                REP_INFO => {
                    let info = u16::from_be_bytes([r.data[0], r.data[1]]);
                    if info == INFO_EXPORT {
                        self.size = u64::from_be_bytes(r.data[2..10].try_into().expect("8"));
                        self.flags = u16::from_be_bytes([r.data[10], r.data[11]]);
                    }
                }
                error => return Err(error),
            }
        }
    }

    /// NBD_OPT_SET_META_CONTEXT for base:allocation (after structured replies).
    pub fn set_base_allocation(&mut self, name: &str) {
        let mut data = (name.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(name.as_bytes());
        data.extend_from_slice(&1u32.to_be_bytes());
        data.extend_from_slice(&(BASE_ALLOCATION.len() as u32).to_be_bytes());
        data.extend_from_slice(BASE_ALLOCATION.as_bytes());
        self.send_option(OPT_SET_META_CONTEXT, &data);
        let r = self.option_reply();
        assert_eq!(r.kind, REP_META_CONTEXT, "base:allocation selected");
        assert_eq!(self.option_reply().kind, REP_ACK);
    }

    /// Sends a request header (and `payload`, for writes); returns its cookie.
    pub fn request(&mut self, command: Command, offset: u64, length: u32, payload: &[u8]) -> u64 {
        self.request_with(0, command, offset, length, payload)
    }

    /// [`Client::request`] with command flags.
    pub fn request_with(
        &mut self,
        flags: u16,
        command: Command,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> u64 {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let header = Request {
            flags,
            command,
            cookie,
            offset,
            length,
        }
        .encode();
        let mut out = header.to_vec();
        out.extend_from_slice(payload);
        self.send(&out);
        cookie
    }

    /// Reads the reply to the request `cookie` for `len` bytes at `offset`; a read's
    /// data lands in `Reply::data` (holes as zeros).
    pub fn reply(&mut self, cookie: u64, offset: u64, len: usize) -> Reply {
        let mut magic = [0u8; 4];
        self.stream.read_exact(&mut magic).expect("reply magic");
        if magic == SIMPLE_REPLY_MAGIC.to_be_bytes() {
            let mut rest = [0u8; 12];
            self.stream.read_exact(&mut rest).expect("simple reply");
            let error = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes"));
            assert_eq!(rest[4..], cookie.to_be_bytes(), "reply cookie");
            let mut data = Vec::new();
            if error == 0 {
                data.resize(len, 0);
                self.stream.read_exact(&mut data).expect("read data");
            }
            return Reply {
                error,
                data,
                ..Reply::default()
            };
        }
        assert_eq!(magic, STRUCTURED_REPLY_MAGIC.to_be_bytes(), "reply magic");
        assert!(self.structured, "a structured reply without negotiating it");
        let mut reply = Reply {
            data: vec![0u8; len],
            ..Reply::default()
        };
        loop {
            let mut h = [0u8; 16];
            self.stream.read_exact(&mut h).expect("chunk header");
            let flags = u16::from_be_bytes([h[0], h[1]]);
            let kind = u16::from_be_bytes([h[2], h[3]]);
            assert_eq!(h[4..12], cookie.to_be_bytes(), "chunk cookie");
            let length = u32::from_be_bytes(h[12..].try_into().expect("4 bytes"));
            let mut payload = vec![0u8; length as usize];
            self.stream.read_exact(&mut payload).expect("chunk payload");
            reply.chunks.push((kind, length));
            take_chunk(kind, &payload, offset, &mut reply);
            if flags & REPLY_FLAG_DONE != 0 {
                return reply;
            }
            self.stream.read_exact(&mut magic).expect("chunk magic");
            assert_eq!(magic, STRUCTURED_REPLY_MAGIC.to_be_bytes(), "chunk magic");
        }
    }

    /// NBD_CMD_READ: the data, or the error number.
    pub fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        let cookie = self.request(Command::Read, offset, len, &[]);
        let r = self.reply(cookie, offset, len as usize);
        if r.error == 0 {
            Ok(r.data)
        } else {
            Err(r.error)
        }
    }

    /// NBD_CMD_WRITE: the reply's error number (0: done).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> u32 {
        let cookie = self.request(Command::Write, offset, data.len() as u32, data);
        self.reply(cookie, offset, 0).error
    }

    /// NBD_CMD_FLUSH: the reply's error number.
    pub fn flush(&mut self) -> u32 {
        let cookie = self.request(Command::Flush, 0, 0, &[]);
        self.reply(cookie, 0, 0).error
    }

    /// Any command without payload or data: the whole reply.
    pub fn command(&mut self, command: Command, offset: u64, length: u32) -> Reply {
        self.command_with(0, command, offset, length)
    }

    /// [`Client::command`] with command flags.
    pub fn command_with(
        &mut self,
        flags: u16,
        command: Command,
        offset: u64,
        length: u32,
    ) -> Reply {
        let cookie = self.request_with(flags, command, offset, length, &[]);
        self.reply(cookie, offset, 0)
    }

    /// NBD_CMD_DISC, then closes.
    pub fn disconnect(mut self) {
        self.request(Command::Disconnect, 0, 0, &[]);
    }

    /// Asserts that the server closes the connection (soon): reads, dropping whatever
    /// arrives, until the end of the stream or a reset.
    pub fn expect_closed(&mut self, what: &str) {
        let start = Instant::now();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("{what}: the server kept the connection open ({e})"),
            }
            assert!(
                start.elapsed() < REPLY_TIMEOUT,
                "{what}: the server kept the connection open"
            );
        }
    }
}

/// Adds one structured reply chunk to `reply` (for a request starting at `offset`).
fn take_chunk(kind: u16, payload: &[u8], offset: u64, reply: &mut Reply) {
    let u32_at = |i: usize| u32::from_be_bytes(payload[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_be_bytes(payload[i..i + 8].try_into().expect("8 bytes"));
    match kind {
        REPLY_TYPE_NONE => {}
        REPLY_TYPE_OFFSET_DATA => {
            let at = (u64_at(0) - offset) as usize;
            reply.data[at..at + payload.len() - 8].copy_from_slice(&payload[8..]);
        }
        REPLY_TYPE_OFFSET_HOLE => {
            let at = (u64_at(0) - offset) as usize;
            reply.data[at..at + u32_at(8) as usize].fill(0);
        }
        REPLY_TYPE_BLOCK_STATUS => {
            for d in payload[4..].chunks_exact(8) {
                let word = |i: usize| u32::from_be_bytes(d[i..i + 4].try_into().expect("4"));
                reply.extents.push((word(0), word(4)));
            }
        }
        k if k & (1 << 15) != 0 => {
            reply.error = u32_at(0);
            let len = usize::from(u16::from_be_bytes([payload[4], payload[5]]));
            reply.message = String::from_utf8_lossy(&payload[6..6 + len]).into_owned();
        }
        other => panic!("unexpected reply chunk type {other}"),
    }
}
