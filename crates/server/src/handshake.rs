//! The option haggling of the fixed newstyle handshake, up to the moment the client
//! picks an export (NBD_OPT_GO or NBD_OPT_EXPORT_NAME) or leaves.

use std::io::{self, Read, Write};
use std::sync::Arc;

use xraid_nbd::consts::*;
use xraid_nbd::{
    export_name_reply, option_reply, parse_info_request, parse_meta_context_request,
    server_greeting, OptionHeader, OPTION_HEADER_BYTES,
};

use crate::export::Export;
use crate::tls::{Conn, Tls, TlsMode};
use crate::Exports;

/// Option payloads larger than this are refused (and the connection closed): no option
/// xraid knows carries more than a name or a few queries.
const MAX_OPTION_BYTES: u32 = 64 * 1024;
/// The metadata context id of base:allocation.
pub(crate) const BASE_ALLOCATION_ID: u32 = 1;

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

/// Runs the handshake on `conn`, which may turn into a TLS connection on the way;
/// returns what was agreed and the connection to go on with.
pub(crate) fn negotiate(
    mut conn: Conn,
    exports: &Exports,
    tls: &Tls,
) -> Result<(Negotiated, Conn), HandshakeError> {
    conn.write_all(&server_greeting())?;
    let mut flags = [0u8; 4];
    read_or_left(&mut conn, &mut flags)?;
    let client_flags = u32::from_be_bytes(flags);
    if client_flags & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(protocol("client does not speak fixed newstyle negotiation"));
    }
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(protocol(format!("unknown client flags {client_flags:#x}")));
    }
    let no_zeroes = client_flags & FLAG_C_NO_ZEROES != 0;
    let mut structured = false;
    let mut base_allocation = false;
    loop {
        let stream = &mut conn;
        let mut header = [0u8; OPTION_HEADER_BYTES];
        read_or_left(stream, &mut header)?;
        let h = OptionHeader::parse(&header).map_err(|e| protocol(format!("option: {e}")))?;
        if h.length > MAX_OPTION_BYTES {
            return Err(protocol(format!(
                "option {} carries {} bytes, more than any option needs",
                h.option, h.length
            )));
        }
        let mut data = vec![0u8; h.length as usize];
        read_or_left(stream, &mut data)?;
        let reply = |stream: &mut Conn, kind: u32, payload: &[u8]| -> io::Result<()> {
            stream.write_all(&option_reply(h.option, kind, payload))
        };
        let tls_missing = tls.mode == TlsMode::Require && !stream.is_tls();
        if tls_missing && !matches!(h.option, OPT_STARTTLS | OPT_ABORT) {
            if h.option == OPT_EXPORT_NAME {
                return Err(protocol(
                    "client asked for an export before starting TLS, which this server requires",
                ));
            }
            reply(
                stream,
                REP_ERR_TLS_REQD,
                b"this server requires TLS: send NBD_OPT_STARTTLS first",
            )?;
            continue;
        }
        match h.option {
            OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(&data);
                let Some(export) = exports.find(&name) else {
                    // This option has no way to say "no": closing is the answer.
                    return Err(protocol(format!("unknown export '{name}'")));
                };
                stream.write_all(&export_name_reply(
                    export.size(),
                    export.flags(structured),
                    no_zeroes,
                ))?;
                let negotiated = Negotiated {
                    export,
                    structured,
                    base_allocation,
                };
                return Ok((negotiated, conn));
            }
            OPT_ABORT => {
                let _ = reply(stream, REP_ACK, &[]);
                return Err(HandshakeError::Left);
            }
            OPT_LIST => {
                if !data.is_empty() {
                    reply(stream, REP_ERR_INVALID, b"NBD_OPT_LIST takes no data")?;
                    continue;
                }
                for e in exports.all() {
                    let mut payload = (e.name.len() as u32).to_be_bytes().to_vec();
                    payload.extend_from_slice(e.name.as_bytes());
                    payload.extend_from_slice(e.description.as_bytes());
                    reply(stream, REP_SERVER, &payload)?;
                }
                reply(stream, REP_ACK, &[])?;
            }
            OPT_STARTTLS => {
                let Some(config) = tls.config.clone() else {
                    reply(
                        stream,
                        REP_ERR_UNSUP,
                        b"TLS is not configured on this server",
                    )?;
                    continue;
                };
                if stream.is_tls() || !data.is_empty() {
                    reply(
                        stream,
                        REP_ERR_INVALID,
                        b"TLS is already on, or the option carried data",
                    )?;
                    continue;
                }
                reply(stream, REP_ACK, &[])?;
                conn = conn.start_tls(config)?;
                // What was negotiated in the clear does not carry over into TLS.
                structured = false;
                base_allocation = false;
            }
            OPT_INFO | OPT_GO => {
                let request = match parse_info_request(&data) {
                    Ok(r) => r,
                    Err(e) => {
                        reply(stream, REP_ERR_INVALID, e.to_string().as_bytes())?;
                        continue;
                    }
                };
                let Some(export) = exports.find(&request.name) else {
                    let msg = format!("no export named '{}'", request.name);
                    reply(stream, REP_ERR_UNKNOWN, msg.as_bytes())?;
                    continue;
                };
                let mut info = INFO_EXPORT.to_be_bytes().to_vec();
                info.extend_from_slice(&export.size().to_be_bytes());
                info.extend_from_slice(&export.flags(structured).to_be_bytes());
                reply(stream, REP_INFO, &info)?;
                let (min, preferred, max) = export.block_sizes();
                let mut sizes = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                for v in [min, preferred, max] {
                    sizes.extend_from_slice(&v.to_be_bytes());
                }
                reply(stream, REP_INFO, &sizes)?;
                if request.infos.contains(&INFO_NAME) {
                    let mut name = INFO_NAME.to_be_bytes().to_vec();
                    name.extend_from_slice(export.name.as_bytes());
                    reply(stream, REP_INFO, &name)?;
                }
                if request.infos.contains(&INFO_DESCRIPTION) {
                    let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
                    d.extend_from_slice(export.description.as_bytes());
                    reply(stream, REP_INFO, &d)?;
                }
                reply(stream, REP_ACK, &[])?;
                if h.option == OPT_GO {
                    let negotiated = Negotiated {
                        export,
                        structured,
                        base_allocation,
                    };
                    return Ok((negotiated, conn));
                }
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    reply(
                        stream,
                        REP_ERR_INVALID,
                        b"NBD_OPT_STRUCTURED_REPLY takes no data",
                    )?;
                    continue;
                }
                structured = true;
                reply(stream, REP_ACK, &[])?;
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                let set = h.option == OPT_SET_META_CONTEXT;
                if set && !structured {
                    reply(
                        stream,
                        REP_ERR_INVALID,
                        b"negotiate structured replies before metadata contexts",
                    )?;
                    continue;
                }
                let request = match parse_meta_context_request(&data) {
                    Ok(r) => r,
                    Err(e) => {
                        reply(stream, REP_ERR_INVALID, e.to_string().as_bytes())?;
                        continue;
                    }
                };
                if exports.find(&request.export).is_none() {
                    let msg = format!("no export named '{}'", request.export);
                    reply(stream, REP_ERR_UNKNOWN, msg.as_bytes())?;
                    continue;
                }
                let matches =
                    |q: &str| q == BASE_ALLOCATION || (!set && (q == "base:" || q.is_empty()));
                let selected = (!set && request.queries.is_empty())
                    || request.queries.iter().any(|q| matches(q));
                if set {
                    base_allocation = selected;
                }
                if selected {
                    let mut payload = BASE_ALLOCATION_ID.to_be_bytes().to_vec();
                    payload.extend_from_slice(BASE_ALLOCATION.as_bytes());
                    reply(stream, REP_META_CONTEXT, &payload)?;
                }
                reply(stream, REP_ACK, &[])?;
            }
            other => {
                let msg = format!("option {other} is not supported");
                reply(stream, REP_ERR_UNSUP, msg.as_bytes())?;
            }
        }
    }
}

/// Reads exactly `buf`, calling an orderly close before anything arrives "left".
fn read_or_left<S: Read>(stream: &mut S, buf: &mut [u8]) -> Result<(), HandshakeError> {
    match stream.read_exact(buf) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(HandshakeError::Left),
        Err(e) => Err(e.into()),
    }
}
