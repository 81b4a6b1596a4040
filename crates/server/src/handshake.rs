//! The option haggling of the fixed newstyle handshake, up to the moment the client
//! picks an export (NBD_OPT_GO or NBD_OPT_EXPORT_NAME) or leaves.

use std::io::{self, Read, Write};
use std::sync::Arc;

use xraid_nbd::consts::*;
use xraid_nbd::{
    export_name_reply, option_error_reply, option_reply, parse_info_request,
    parse_meta_context_request, server_greeting, OptionHeader, OPTION_HEADER_BYTES,
};

use crate::export::Export;
use crate::tls::{Conn, Tls, TlsMode};
use crate::Exports;

/// Option payloads larger than this are refused (and the connection closed): no option
/// xraid knows carries more than a name or a few queries.
const MAX_OPTION_BYTES: u32 = 64 * 1024;
/// The metadata context id of base:allocation.
pub(crate) const BASE_ALLOCATION_ID: u32 = 1;
/// Characters of a client's string that a log line or an error reply repeats: enough to
/// recognise a name, too few to flood a log.
const SHOWN_CHARS: usize = 256;

/// What the client and server agreed on.
#[derive(Debug)]
pub(crate) struct Negotiated {
    pub export: Arc<Export>,
    pub structured: bool,
    /// Whether base:allocation was selected (block status allowed).
    pub base_allocation: bool,
}

/// Why a handshake ended without an export.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Protocol(String),
    /// The client said goodbye (NBD_OPT_ABORT or closed the connection).
    #[error("client left during the handshake")]
    Left,
}

fn protocol(detail: impl Into<String>) -> HandshakeError {
    HandshakeError::Protocol(detail.into())
}

/// A string the client sent, as a log line or an error reply may repeat it: control
/// characters and quotes escaped, so that a name cannot forge log lines or end the
/// quotes around it, and cut to [`SHOWN_CHARS`] characters with a marker, so that it
/// cannot flood the log.
pub(crate) fn shown(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(SHOWN_CHARS)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().nth(SHOWN_CHARS).is_some() {
        out.push_str(&format!("… ({} bytes in all)", text.len()));
    }
    out
}

/// What the options so far have settled.
#[derive(Debug, Default, Clone, Copy)]
struct Agreed {
    structured: bool,
    base_allocation: bool,
}

/// Runs the handshake on `conn`, which may turn into a TLS connection on the way;
/// returns what was agreed and the connection to go on with.
pub(crate) fn negotiate(
    mut conn: Conn,
    exports: &Exports,
    tls: &Tls,
) -> Result<(Negotiated, Conn), HandshakeError> {
    conn.write_all(&server_greeting())?;
    let no_zeroes = read_client_flags(&mut conn)?;
    let mut agreed = Agreed::default();
    loop {
        let (h, data) = read_option(&mut conn)?;
        if h.option == OPT_SET_META_CONTEXT {
            // proto.md: it "replaces all previously-set metadata contexts (including
            // when this command fails)", so the old selection goes whatever the answer.
            agreed.base_allocation = false;
        }
        let tls_missing = tls.mode == TlsMode::Require && !conn.is_tls();
        if tls_missing && !matches!(h.option, OPT_STARTTLS | OPT_ABORT) {
            refuse_in_the_clear(&mut conn, h.option)?;
            continue;
        }
        match h.option {
            OPT_EXPORT_NAME => {
                let export = export_name(&mut conn, exports, &data, agreed, no_zeroes)?;
                return Ok((negotiated(export, agreed), conn));
            }
            OPT_ABORT => {
                let _ = send(&mut conn, h.option, REP_ACK, &[]);
                return Err(HandshakeError::Left);
            }
            OPT_LIST => list(&mut conn, exports, &data)?,
            OPT_STARTTLS => {
                if let Some(config) = starttls_allowed(&mut conn, tls, &data)? {
                    conn = conn.start_tls(config)?;
                    // What was negotiated in the clear does not carry over into TLS.
                    agreed = Agreed::default();
                }
            }
            OPT_INFO | OPT_GO => {
                let export = info(&mut conn, h.option, &data, exports, agreed.structured)?;
                if let (Some(export), OPT_GO) = (export, h.option) {
                    return Ok((negotiated(export, agreed), conn));
                }
            }
            OPT_STRUCTURED_REPLY => {
                if data.is_empty() {
                    agreed.structured = true;
                    send(&mut conn, h.option, REP_ACK, &[])?;
                } else {
                    let msg = "NBD_OPT_STRUCTURED_REPLY takes no data";
                    refuse(&mut conn, h.option, REP_ERR_INVALID, msg)?;
                }
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                let selected = meta_context(&mut conn, h.option, &data, exports, agreed)?;
                if selected && h.option == OPT_SET_META_CONTEXT {
                    agreed.base_allocation = true;
                }
            }
            other => {
                let msg = format!("option {other} is not supported");
                refuse(&mut conn, other, REP_ERR_UNSUP, &msg)?;
            }
        }
    }
}

fn negotiated(export: Arc<Export>, agreed: Agreed) -> Negotiated {
    Negotiated {
        export,
        structured: agreed.structured,
        base_allocation: agreed.base_allocation,
    }
}

/// Reads the client's flags; returns whether it takes replies without zero padding.
fn read_client_flags(conn: &mut Conn) -> Result<bool, HandshakeError> {
    let mut flags = [0u8; 4];
    read_or_left(conn, &mut flags)?;
    let client_flags = u32::from_be_bytes(flags);
    if client_flags & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(protocol("client does not speak fixed newstyle negotiation"));
    }
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(protocol(format!("unknown client flags {client_flags:#x}")));
    }
    Ok(client_flags & FLAG_C_NO_ZEROES != 0)
}

/// Reads one option: its header and its payload.
fn read_option(conn: &mut Conn) -> Result<(OptionHeader, Vec<u8>), HandshakeError> {
    let mut header = [0u8; OPTION_HEADER_BYTES];
    read_or_left(conn, &mut header)?;
    let h = OptionHeader::parse(&header).map_err(|e| protocol(format!("option: {e}")))?;
    if h.length > MAX_OPTION_BYTES {
        return Err(protocol(format!(
            "option {} carries {} bytes, more than any option needs",
            h.option, h.length
        )));
    }
    let mut data = vec![0u8; h.length as usize];
    read_or_left(conn, &mut data)?;
    Ok((h, data))
}

fn send(conn: &mut Conn, option: u32, kind: u32, payload: &[u8]) -> io::Result<()> {
    conn.write_all(&option_reply(option, kind, payload))
}

/// An error reply; its message is cut to what the protocol allows.
fn refuse(conn: &mut Conn, option: u32, kind: u32, message: &str) -> io::Result<()> {
    conn.write_all(&option_error_reply(option, kind, message))
}

/// The answer to any option but STARTTLS and ABORT while `--tls require` waits for TLS.
fn refuse_in_the_clear(conn: &mut Conn, option: u32) -> Result<(), HandshakeError> {
    if option == OPT_EXPORT_NAME {
        return Err(protocol(
            "client asked for an export before starting TLS, which this server requires",
        ));
    }
    let msg = "this server requires TLS: send NBD_OPT_STARTTLS first";
    Ok(refuse(conn, option, REP_ERR_TLS_REQD, msg)?)
}

/// NBD_OPT_EXPORT_NAME: the export and its old-style answer, or the end of the
/// connection, as this option has no way to say "no".
fn export_name(
    conn: &mut Conn,
    exports: &Exports,
    data: &[u8],
    agreed: Agreed,
    no_zeroes: bool,
) -> Result<Arc<Export>, HandshakeError> {
    let name = String::from_utf8_lossy(data);
    let Some(export) = exports.find(&name) else {
        return Err(protocol(format!("unknown export '{}'", shown(&name))));
    };
    conn.write_all(&export_name_reply(
        export.size(),
        export.flags(agreed.structured),
        no_zeroes,
    ))?;
    Ok(export)
}

fn list(conn: &mut Conn, exports: &Exports, data: &[u8]) -> io::Result<()> {
    if !data.is_empty() {
        return refuse(
            conn,
            OPT_LIST,
            REP_ERR_INVALID,
            "NBD_OPT_LIST takes no data",
        );
    }
    for e in exports.all() {
        let mut payload = (e.name.len() as u32).to_be_bytes().to_vec();
        payload.extend_from_slice(e.name.as_bytes());
        payload.extend_from_slice(e.description.as_bytes());
        send(conn, OPT_LIST, REP_SERVER, &payload)?;
    }
    send(conn, OPT_LIST, REP_ACK, &[])
}

/// NBD_OPT_STARTTLS: acknowledged (the TLS configuration to start) or refused (none).
fn starttls_allowed(
    conn: &mut Conn,
    tls: &Tls,
    data: &[u8],
) -> io::Result<Option<Arc<rustls::ServerConfig>>> {
    let Some(config) = tls.config.clone() else {
        let msg = "TLS is not configured on this server";
        refuse(conn, OPT_STARTTLS, REP_ERR_UNSUP, msg)?;
        return Ok(None);
    };
    if conn.is_tls() || !data.is_empty() {
        let msg = "TLS is already on, or the option carried data";
        refuse(conn, OPT_STARTTLS, REP_ERR_INVALID, msg)?;
        return Ok(None);
    }
    send(conn, OPT_STARTTLS, REP_ACK, &[])?;
    Ok(Some(config))
}

/// NBD_OPT_INFO / NBD_OPT_GO: the export's information, then the export (`None` when
/// the request was refused; the handshake goes on).
fn info(
    conn: &mut Conn,
    option: u32,
    data: &[u8],
    exports: &Exports,
    structured: bool,
) -> io::Result<Option<Arc<Export>>> {
    let request = match parse_info_request(data) {
        Ok(r) => r,
        Err(e) => {
            refuse(conn, option, REP_ERR_INVALID, &e.to_string())?;
            return Ok(None);
        }
    };
    let Some(export) = exports.find(&request.name) else {
        let msg = format!("no export named '{}'", shown(&request.name));
        refuse(conn, option, REP_ERR_UNKNOWN, &msg)?;
        return Ok(None);
    };
    let mut info = INFO_EXPORT.to_be_bytes().to_vec();
    info.extend_from_slice(&export.size().to_be_bytes());
    info.extend_from_slice(&export.flags(structured).to_be_bytes());
    send(conn, option, REP_INFO, &info)?;
    let (min, preferred, max) = export.block_sizes();
    let mut sizes = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    for v in [min, preferred, max] {
        sizes.extend_from_slice(&v.to_be_bytes());
    }
    send(conn, option, REP_INFO, &sizes)?;
    if request.infos.contains(&INFO_NAME) {
        let mut name = INFO_NAME.to_be_bytes().to_vec();
        name.extend_from_slice(export.name.as_bytes());
        send(conn, option, REP_INFO, &name)?;
    }
    if request.infos.contains(&INFO_DESCRIPTION) {
        let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
        d.extend_from_slice(export.description.as_bytes());
        send(conn, option, REP_INFO, &d)?;
    }
    send(conn, option, REP_ACK, &[])?;
    Ok(Some(export))
}

/// NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT: answers the queries; returns
/// whether base:allocation matched (a refused request matches nothing).
fn meta_context(
    conn: &mut Conn,
    option: u32,
    data: &[u8],
    exports: &Exports,
    agreed: Agreed,
) -> io::Result<bool> {
    let set = option == OPT_SET_META_CONTEXT;
    if set && !agreed.structured {
        let msg = "negotiate structured replies before metadata contexts";
        refuse(conn, option, REP_ERR_INVALID, msg)?;
        return Ok(false);
    }
    let request = match parse_meta_context_request(data) {
        Ok(r) => r,
        Err(e) => {
            refuse(conn, option, REP_ERR_INVALID, &e.to_string())?;
            return Ok(false);
        }
    };
    if exports.find(&request.export).is_none() {
        let msg = format!("no export named '{}'", shown(&request.export));
        refuse(conn, option, REP_ERR_UNKNOWN, &msg)?;
        return Ok(false);
    }
    let matches = |q: &str| q == BASE_ALLOCATION || (!set && (q == "base:" || q.is_empty()));
    let selected =
        (!set && request.queries.is_empty()) || request.queries.iter().any(|q| matches(q));
    if selected {
        let mut payload = BASE_ALLOCATION_ID.to_be_bytes().to_vec();
        payload.extend_from_slice(BASE_ALLOCATION.as_bytes());
        send(conn, option, REP_META_CONTEXT, &payload)?;
    }
    send(conn, option, REP_ACK, &[])?;
    Ok(selected)
}

/// Reads exactly `buf`, calling an orderly close before anything arrives "left".
fn read_or_left<S: Read>(stream: &mut S, buf: &mut [u8]) -> Result<(), HandshakeError> {
    match stream.read_exact(buf) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(HandshakeError::Left),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;
    use crate::export::ExportKind;
    use crate::file_export::FileExport;
    use crate::stream::Stream;

    const NAME: &str = "disk";

    /// One plain-file export named [`NAME`] (the file lives as long as `dir`).
    fn exports(dir: &tempfile::TempDir) -> Exports {
        let path = dir.path().join("f.img");
        std::fs::write(&path, vec![0u8; 1 << 20]).expect("file");
        let file = FileExport::open(&path, false).expect("open");
        let export = Export {
            name: NAME.to_owned(),
            description: "test file".to_owned(),
            read_only: false,
            kind: ExportKind::File(file),
        };
        Exports {
            list: vec![Arc::new(export)],
        }
    }

    /// The payload of a META_CONTEXT option asking `export` for base:allocation.
    fn meta(export: &str) -> Vec<u8> {
        let mut v = (export.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(export.as_bytes());
        v.extend_from_slice(&1u32.to_be_bytes());
        v.extend_from_slice(&(BASE_ALLOCATION.len() as u32).to_be_bytes());
        v.extend_from_slice(BASE_ALLOCATION.as_bytes());
        v
    }

    /// The payload of GO/INFO for `name`, asking for no extra information.
    fn go(name: &str) -> Vec<u8> {
        let mut v = (name.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(&0u16.to_be_bytes());
        v
    }

    /// An option reply as the client sees it: option, reply type, data.
    type OptionReply = (u32, u32, Vec<u8>);

    /// Runs the server's side of a handshake against `options` (sent at once, after
    /// the client flags); returns what it agreed and every option reply, as (option,
    /// type, data).
    fn run(options: &[(u32, Vec<u8>)]) -> (Result<Negotiated, String>, Vec<OptionReply>) {
        let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let exports = exports(&dir);
        let (server, mut client) = UnixStream::pair().expect("socket pair");
        let mut bytes = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
            .to_be_bytes()
            .to_vec();
        for (option, data) in options {
            bytes.extend_from_slice(&IHAVEOPT.to_be_bytes());
            bytes.extend_from_slice(&option.to_be_bytes());
            bytes.extend_from_slice(&(data.len() as u32).to_be_bytes());
            bytes.extend_from_slice(data);
        }
        client.write_all(&bytes).expect("send options");
        client
            .shutdown(std::net::Shutdown::Write)
            .expect("shutdown");
        let tls = Tls {
            mode: TlsMode::Off,
            config: None,
        };
        let result = negotiate(Conn::Plain(Stream::Unix(server)), &exports, &tls)
            .map(|(n, _conn)| n)
            .map_err(|e| e.to_string());
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).expect("replies");
        (result, parse_replies(&answer[18..]))
    }

    fn parse_replies(mut bytes: &[u8]) -> Vec<OptionReply> {
        let mut out = Vec::new();
        while bytes.len() >= 20 {
            let word = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().expect("4"));
            let (option, kind, len) = (word(8), word(12), word(16) as usize);
            out.push((option, kind, bytes[20..20 + len].to_vec()));
            bytes = &bytes[20 + len..];
        }
        out
    }

    fn kinds(replies: &[OptionReply], option: u32) -> Vec<u32> {
        replies
            .iter()
            .filter(|r| r.0 == option)
            .map(|r| r.1)
            .collect()
    }

    #[test]
    fn a_failed_set_meta_context_clears_the_earlier_selection() {
        // Refused for an unknown export or a malformed payload, each must drop
        // base:allocation. (A refusal for lack of structured replies cannot follow a
        // selection: only STARTTLS turns them off, and it forgets the selection too.)
        let refusals: [(Vec<u8>, u32); 2] = [
            (meta("nope"), REP_ERR_UNKNOWN),
            (vec![0, 0, 0], REP_ERR_INVALID),
        ];
        for (bad, kind) in refusals {
            let (result, replies) = run(&[
                (OPT_STRUCTURED_REPLY, Vec::new()),
                (OPT_SET_META_CONTEXT, meta(NAME)),
                (OPT_SET_META_CONTEXT, bad),
                (OPT_GO, go(NAME)),
            ]);
            assert_eq!(
                kinds(&replies, OPT_SET_META_CONTEXT),
                [REP_META_CONTEXT, REP_ACK, kind]
            );
            let n = result.expect("GO succeeds");
            assert!(n.structured);
            assert!(!n.base_allocation, "a refused SET kept base:allocation");
        }
        // A SET that succeeds and selects nothing also clears it.
        let (result, _) = run(&[
            (OPT_STRUCTURED_REPLY, Vec::new()),
            (OPT_SET_META_CONTEXT, meta(NAME)),
            (OPT_SET_META_CONTEXT, meta(NAME).split_at(8).0.to_vec()),
            (OPT_GO, go(NAME)),
        ]);
        assert!(!result.expect("GO").base_allocation);
        // And a successful one still selects it.
        let (result, _) = run(&[
            (OPT_STRUCTURED_REPLY, Vec::new()),
            (OPT_SET_META_CONTEXT, meta(NAME)),
            (OPT_GO, go(NAME)),
        ]);
        assert!(result.expect("GO").base_allocation);
    }

    #[test]
    fn client_names_are_escaped_and_cut_in_replies_and_logs() {
        let forged = "x'\nxraid serve: error: forged\r\u{1b}[2J";
        let long = "n".repeat(60_000);
        let (result, replies) = run(&[
            (OPT_GO, go(forged)),
            (OPT_INFO, go(&long)),
            (OPT_STRUCTURED_REPLY, Vec::new()),
            (OPT_SET_META_CONTEXT, meta(&long)),
            (OPT_EXPORT_NAME, forged.as_bytes().to_vec()),
        ]);
        let messages: Vec<String> = replies
            .iter()
            .filter(|r| r.1 == REP_ERR_UNKNOWN)
            .map(|r| String::from_utf8(r.2.clone()).expect("UTF-8 message"))
            .collect();
        assert_eq!(messages.len(), 3, "{replies:?}");
        assert!(
            messages[0].contains(r"x\'\nxraid serve: error: forged\r\u{1b}[2J"),
            "{}",
            messages[0]
        );
        for m in &messages[1..] {
            assert!(m.len() < 400, "a {}-byte message", m.len());
            assert!(m.contains("… (60000 bytes in all)"), "{m}");
        }
        let logged = result.expect_err("unknown export closes the connection");
        assert!(!logged.contains(['\n', '\r', '\u{1b}']), "{logged:?}");
        assert!(logged.contains(r"x\'\nxraid serve"), "{logged}");
    }

    #[test]
    fn shown_strings_keep_printable_text_and_mark_cuts() {
        assert_eq!(shown("media"), "media");
        assert_eq!(shown("my disk#1 é"), "my disk#1 é");
        assert_eq!(shown("a\tb\0"), r"a\tb\0");
        let cut = shown(&"é".repeat(300));
        assert!(cut.starts_with(&"é".repeat(256)), "{cut}");
        assert!(cut.ends_with("é… (600 bytes in all)"), "{cut}");
        assert_eq!(shown(&"x".repeat(256)), "x".repeat(256));
    }
}
