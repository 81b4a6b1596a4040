//! Transmission requests: the 28-byte header every command starts with.

use crate::consts::REQUEST_MAGIC;
use crate::WireError;

/// Bytes of a request header.
pub const REQUEST_BYTES: usize = 28;

/// The commands, as the protocol numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read,
    Write,
    Disconnect,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
    /// A command number xraid does not know; answered with EINVAL.
    Unknown(u16),
}

impl Command {
    fn from_wire(value: u16) -> Command {
        match value {
            0 => Command::Read,
            1 => Command::Write,
            2 => Command::Disconnect,
            3 => Command::Flush,
            4 => Command::Trim,
            5 => Command::Cache,
            6 => Command::WriteZeroes,
            7 => Command::BlockStatus,
            other => Command::Unknown(other),
        }
    }

    pub fn to_wire(self) -> u16 {
        match self {
            Command::Read => 0,
            Command::Write => 1,
            Command::Disconnect => 2,
            Command::Flush => 3,
            Command::Trim => 4,
            Command::Cache => 5,
            Command::WriteZeroes => 6,
            Command::BlockStatus => 7,
            Command::Unknown(v) => v,
        }
    }
}

/// One request header (a write's payload follows it on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub command: Command,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
    pub fn parse(bytes: &[u8; REQUEST_BYTES]) -> Result<Request, WireError> {
        let magic = u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"));
        if magic != REQUEST_MAGIC {
            return Err(WireError::BadMagic {
                found: u64::from(magic),
                expected: u64::from(REQUEST_MAGIC),
            });
        }
        Ok(Request {
            flags: u16::from_be_bytes(bytes[4..6].try_into().expect("2 bytes")),
            command: Command::from_wire(u16::from_be_bytes(
                bytes[6..8].try_into().expect("2 bytes"),
            )),
            cookie: u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes")),
            offset: u64::from_be_bytes(bytes[16..24].try_into().expect("8 bytes")),
            length: u32::from_be_bytes(bytes[24..28].try_into().expect("4 bytes")),
        })
    }

    /// The header as a client would send it (for tests and tools).
    pub fn encode(&self) -> [u8; REQUEST_BYTES] {
        let mut out = [0u8; REQUEST_BYTES];
        out[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.command.to_wire().to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.length.to_be_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(flags: u16, cmd in 0u16..12, cookie: u64, offset: u64, length: u32) {
            let r = Request { flags, command: Command::from_wire(cmd), cookie, offset, length };
            prop_assert_eq!(Request::parse(&r.encode()), Ok(r));
        }

        #[test]
        fn bad_magic_is_refused(bytes in proptest::array::uniform28(any::<u8>())) {
            let ok = bytes[..4] == REQUEST_MAGIC.to_be_bytes();
            prop_assert_eq!(Request::parse(&bytes).is_ok(), ok);
        }
    }
}
