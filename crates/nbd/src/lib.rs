//! The NBD protocol's wire format (NetworkBlockDevice/nbd `doc/proto.md`): the numbers
//! the protocol defines, and encoders and parsers for the fixed newstyle handshake,
//! transmission requests, and simple and structured replies.
//!
//! Sans-I/O: everything here works on byte slices. The server owns sockets and decides
//! what to answer; this crate only knows how each message looks on the wire and refuses
//! malformed ones with a typed error.

pub mod consts;
mod handshake;
mod reply;
mod request;

pub use handshake::{
    export_name_reply, option_error_reply, option_reply, parse_info_request,
    parse_meta_context_request, server_greeting, InfoRequest, MetaContextRequest, OptionHeader,
    MAX_STRING_BYTES, OPTION_HEADER_BYTES,
};
pub use reply::{
    block_status_chunk, error_chunk, offset_data_header, offset_hole_chunk, simple_reply,
    structured_header, BlockDescriptor, SIMPLE_REPLY_BYTES, STRUCTURED_HEADER_BYTES,
};
pub use request::{Command, Request, REQUEST_BYTES};

/// A message the peer sent that does not follow the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("bad magic {found:#x} (expected {expected:#x})")]
    BadMagic { found: u64, expected: u64 },
    #[error("{what} is {len} bytes, expected {expected}")]
    Length {
        what: &'static str,
        len: usize,
        expected: usize,
    },
    #[error("{what}: {detail}")]
    Malformed { what: &'static str, detail: String },
}
