//! The fixed newstyle handshake: the server's greeting, option headers, the payloads of
//! NBD_OPT_INFO/GO and NBD_OPT_{LIST,SET}_META_CONTEXT, and option replies.

use crate::consts::{FLAG_FIXED_NEWSTYLE, FLAG_NO_ZEROES, IHAVEOPT, NBDMAGIC, REPLY_MAGIC};
use crate::WireError;

/// Bytes of an option header: magic, option, length.
pub const OPTION_HEADER_BYTES: usize = 16;

/// The greeting a fixed newstyle server sends first.
pub fn server_greeting() -> [u8; 18] {
    let mut out = [0u8; 18];
    out[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    out[16..].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    out
}

/// One option the client sent (its payload follows on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length: u32,
}

impl OptionHeader {
    pub fn parse(bytes: &[u8; OPTION_HEADER_BYTES]) -> Result<OptionHeader, WireError> {
        let magic = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
        if magic != IHAVEOPT {
            return Err(WireError::BadMagic {
                found: magic,
                expected: IHAVEOPT,
            });
        }
        Ok(OptionHeader {
            option: u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")),
            length: u32::from_be_bytes(bytes[12..16].try_into().expect("4 bytes")),
        })
    }
}

/// An option reply: header and `data`.
pub fn option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let len = u32::try_from(data.len()).expect("option replies are small");
    let mut out = Vec::with_capacity(20 + data.len());
    out.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// The longest string the protocol lets a message carry: proto.md says strings, error
/// messages included, "MUST be no longer than 4096 bytes".
pub const MAX_STRING_BYTES: usize = 4096;

/// An option error reply (`reply` one of the `REP_ERR_*`) whose message is cut to
/// [`MAX_STRING_BYTES`], at a character boundary so that it stays UTF-8: a message that
/// quotes what the client sent must not grow past what the client may accept.
pub fn option_error_reply(option: u32, reply: u32, message: &str) -> Vec<u8> {
    option_reply(
        option,
        reply,
        utf8_prefix(message, MAX_STRING_BYTES).as_bytes(),
    )
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character.
fn utf8_prefix(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The old-style answer to NBD_OPT_EXPORT_NAME: size and flags (no zero padding, as
/// the server always offers NBD_FLAG_NO_ZEROES; the padding is added when the client
/// did not accept it).
pub fn export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + 124);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        out.resize(out.len() + 124, 0);
    }
    out
}

/// Reader over an option payload that turns short data into an error.
struct Cursor<'a> {
    data: &'a [u8],
    what: &'static str,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.data.len() < n {
            return Err(WireError::Malformed {
                what: self.what,
                detail: format!(
                    "payload ends early ({} bytes left, {n} needed)",
                    self.data.len()
                ),
            });
        }
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn string(&mut self, len: u32) -> Result<String, WireError> {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::Malformed {
            what: self.what,
            detail: "a name is not UTF-8".to_owned(),
        })
    }

    fn finish(&self) -> Result<(), WireError> {
        if self.data.is_empty() {
            Ok(())
        } else {
            Err(WireError::Malformed {
                what: self.what,
                detail: format!("{} bytes after the end", self.data.len()),
            })
        }
    }
}

/// NBD_OPT_INFO / NBD_OPT_GO payload: the export name and the info types asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: String,
    pub infos: Vec<u16>,
}

pub fn parse_info_request(data: &[u8]) -> Result<InfoRequest, WireError> {
    let mut c = Cursor {
        data,
        what: "NBD_OPT_GO/INFO",
    };
    let len = c.u32()?;
    let name = c.string(len)?;
    let count = c.u16()?;
    let infos = (0..count).map(|_| c.u16()).collect::<Result<_, _>>()?;
    c.finish()?;
    Ok(InfoRequest { name, infos })
}

/// NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextRequest {
    pub export: String,
    pub queries: Vec<String>,
}

pub fn parse_meta_context_request(data: &[u8]) -> Result<MetaContextRequest, WireError> {
    let mut c = Cursor {
        data,
        what: "NBD_OPT_*_META_CONTEXT",
    };
    let len = c.u32()?;
    let export = c.string(len)?;
    let count = c.u32()?;
    let mut queries = Vec::new();
    for _ in 0..count {
        let len = c.u32()?;
        queries.push(c.string(len)?);
    }
    c.finish()?;
    Ok(MetaContextRequest { export, queries })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn info_bytes(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut v = (name.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            v.extend_from_slice(&i.to_be_bytes());
        }
        v
    }

    #[test]
    fn info_request_round_trip_and_truncation() {
        let bytes = info_bytes("disk", &[3, 1]);
        assert_eq!(
            parse_info_request(&bytes),
            Ok(InfoRequest {
                name: "disk".to_owned(),
                infos: vec![3, 1]
            })
        );
        for cut in 0..bytes.len() {
            assert!(parse_info_request(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(parse_info_request(&long).is_err());
        // A name length far beyond the payload is refused, not allocated.
        let mut huge = u32::MAX.to_be_bytes().to_vec();
        huge.extend_from_slice(&[0; 4]);
        assert!(parse_info_request(&huge).is_err());
    }

    #[test]
    fn error_replies_are_cut_to_the_protocol_limit() {
        let long = "é".repeat(3000); // 6000 bytes, two per character
        let r = option_error_reply(7, 0x8000_0006, &long);
        let len = u32::from_be_bytes(r[16..20].try_into().expect("4 bytes")) as usize;
        assert_eq!(len, r.len() - 20);
        assert_eq!(len, MAX_STRING_BYTES);
        assert!(
            std::str::from_utf8(&r[20..]).is_ok(),
            "cut inside a character"
        );
        let short = option_error_reply(7, 0x8000_0006, "no export named 'x'");
        assert_eq!(&short[20..], b"no export named 'x'");
        // An odd limit inside a two-byte character backs off to the character's start.
        assert_eq!(utf8_prefix("aé", 2), "a");
    }

    #[test]
    fn meta_context_request_parses() {
        let mut v = 0u32.to_be_bytes().to_vec();
        v.extend_from_slice(&1u32.to_be_bytes());
        v.extend_from_slice(&15u32.to_be_bytes());
        v.extend_from_slice(b"base:allocation");
        let r = parse_meta_context_request(&v).expect("parses");
        assert_eq!(r.export, "");
        assert_eq!(r.queries, ["base:allocation"]);
    }

    #[test]
    fn option_header_checks_magic() {
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        h[8..12].copy_from_slice(&7u32.to_be_bytes());
        h[12..].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(
            OptionHeader::parse(&h),
            Ok(OptionHeader {
                option: 7,
                length: 9
            })
        );
        h[0] ^= 1;
        assert!(matches!(
            OptionHeader::parse(&h),
            Err(WireError::BadMagic { .. })
        ));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_info_request(&data);
            let _ = parse_meta_context_request(&data);
        }
    }
}
