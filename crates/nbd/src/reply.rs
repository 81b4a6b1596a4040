//! Replies in transmission: simple replies, and structured reply chunks (data, holes,
//! block status, errors).

use crate::consts::{
    REPLY_TYPE_BLOCK_STATUS, REPLY_TYPE_ERROR, REPLY_TYPE_OFFSET_DATA, REPLY_TYPE_OFFSET_HOLE,
    SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_MAGIC,
};

/// Bytes of a simple reply header.
pub const SIMPLE_REPLY_BYTES: usize = 16;
/// Bytes of a structured reply chunk header.
pub const STRUCTURED_HEADER_BYTES: usize = 20;

/// A simple reply header (a read's data follows it).
pub fn simple_reply(error: u32, cookie: u64) -> [u8; SIMPLE_REPLY_BYTES] {
    let mut out = [0u8; SIMPLE_REPLY_BYTES];
    out[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out[4..8].copy_from_slice(&error.to_be_bytes());
    out[8..].copy_from_slice(&cookie.to_be_bytes());
    out
}

/// A structured reply chunk header for a payload of `length` bytes.
pub fn structured_header(
    flags: u16,
    kind: u16,
    cookie: u64,
    length: u32,
) -> [u8; STRUCTURED_HEADER_BYTES] {
    let mut out = [0u8; STRUCTURED_HEADER_BYTES];
    out[..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&flags.to_be_bytes());
    out[6..8].copy_from_slice(&kind.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out[16..].copy_from_slice(&length.to_be_bytes());
    out
}

/// Header and offset of an NBD_REPLY_TYPE_OFFSET_DATA chunk carrying `data_len` bytes
/// (the data follows).
pub fn offset_data_header(flags: u16, cookie: u64, offset: u64, data_len: u32) -> [u8; 28] {
    let mut out = [0u8; 28];
    out[..20].copy_from_slice(&structured_header(
        flags,
        REPLY_TYPE_OFFSET_DATA,
        cookie,
        data_len + 8,
    ));
    out[20..].copy_from_slice(&offset.to_be_bytes());
    out
}

/// An NBD_REPLY_TYPE_OFFSET_HOLE chunk.
pub fn offset_hole_chunk(flags: u16, cookie: u64, offset: u64, hole_len: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..20].copy_from_slice(&structured_header(
        flags,
        REPLY_TYPE_OFFSET_HOLE,
        cookie,
        12,
    ));
    out[20..28].copy_from_slice(&offset.to_be_bytes());
    out[28..].copy_from_slice(&hole_len.to_be_bytes());
    out
}

/// One extent of a block status reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDescriptor {
    pub length: u32,
    pub flags: u32,
}

/// An NBD_REPLY_TYPE_BLOCK_STATUS chunk for metadata context `context`.
pub fn block_status_chunk(
    flags: u16,
    cookie: u64,
    context: u32,
    extents: &[BlockDescriptor],
) -> Vec<u8> {
    let len = u32::try_from(4 + 8 * extents.len()).expect("block status replies are bounded");
    let mut out = Vec::with_capacity(20 + 4 + 8 * extents.len());
    out.extend_from_slice(&structured_header(
        flags,
        REPLY_TYPE_BLOCK_STATUS,
        cookie,
        len,
    ));
    out.extend_from_slice(&context.to_be_bytes());
    for e in extents {
        out.extend_from_slice(&e.length.to_be_bytes());
        out.extend_from_slice(&e.flags.to_be_bytes());
    }
    out
}

/// An NBD_REPLY_TYPE_ERROR chunk with a human-readable message.
pub fn error_chunk(flags: u16, cookie: u64, error: u32, message: &str) -> Vec<u8> {
    let msg = &message.as_bytes()[..message.len().min(4096)];
    let msg_len = u16::try_from(msg.len()).expect("clamped to 4096");
    let mut out = Vec::with_capacity(20 + 6 + msg.len());
    out.extend_from_slice(&structured_header(
        flags,
        REPLY_TYPE_ERROR,
        cookie,
        6 + u32::from(msg_len),
    ));
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&msg_len.to_be_bytes());
    out.extend_from_slice(msg);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_lengths_match_payloads() {
        let h = offset_data_header(1, 7, 4096, 512);
        assert_eq!(u32::from_be_bytes(h[16..20].try_into().unwrap()), 520);
        let b = block_status_chunk(
            1,
            7,
            1,
            &[BlockDescriptor {
                length: 4096,
                flags: 3,
            }],
        );
        assert_eq!(b.len(), 20 + 12);
        assert_eq!(
            u32::from_be_bytes(b[16..20].try_into().unwrap()) as usize,
            b.len() - 20
        );
        let e = error_chunk(1, 7, 22, "bad");
        assert_eq!(
            u32::from_be_bytes(e[16..20].try_into().unwrap()) as usize,
            e.len() - 20
        );
    }
}
