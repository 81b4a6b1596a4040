//! Every way `Superblock::parse` refuses a buffer, and that each refusal says why.

use super::sample;
use crate::{FormatError, Superblock, MAX_DEVS};

fn image() -> Vec<u8> {
    sample(5, 2, 4, 1).to_bytes()
}

/// Rewrites the checksum after a deliberate change so that the later checks run.
fn reseal(buf: &mut [u8]) {
    let max_dev = u32::from_le_bytes([buf[220], buf[221], buf[222], buf[223]]);
    let len = (256 + 2 * max_dev as usize).min(buf.len());
    let csum = crate::sb_checksum(&buf[..len]);
    buf[216..220].copy_from_slice(&csum.to_le_bytes());
}

#[test]
fn a_flipped_name_byte_is_a_checksum_error() {
    let mut buf = image();
    buf[33] ^= 0x20;
    let err = Superblock::parse(&buf).unwrap_err();
    assert!(matches!(err, FormatError::BadChecksum { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("checksum"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
}

#[test]
fn a_flipped_role_byte_is_a_checksum_error() {
    let mut buf = image();
    buf[256 + 2 * 127] ^= 1;
    assert!(matches!(
        Superblock::parse(&buf),
        Err(FormatError::BadChecksum { .. })
    ));
}

#[test]
fn bytes_after_the_role_table_are_not_checksummed() {
    let mut buf = image();
    buf[1000] = 0xaa;
    assert!(Superblock::parse(&buf).is_ok());
}

#[test]
fn no_magic_is_not_md() {
    let zeros = vec![0u8; 4096];
    assert_eq!(
        Superblock::parse(&zeros),
        Err(FormatError::NotMd { found: 0 })
    );
    let mut buf = image();
    buf[0] ^= 1;
    let err = Superblock::parse(&buf).unwrap_err();
    assert_eq!(err, FormatError::NotMd { found: 0xa92b_4efd });
    assert_eq!(err.to_string(), "no md superblock (magic 0xa92b4efd)");
}

#[test]
fn truncated_buffers_are_too_short() {
    let buf = image();
    assert_eq!(
        Superblock::parse(&buf[..100]),
        Err(FormatError::TooShort {
            len: 100,
            needed: 256
        })
    );
    // 128 roles need 512 bytes.
    assert_eq!(
        Superblock::parse(&buf[..511]),
        Err(FormatError::TooShort {
            len: 511,
            needed: 512
        })
    );
    assert!(Superblock::parse(&buf[..512]).is_ok());
    assert!(Superblock::parse(&[]).is_err());
}

#[test]
fn other_major_versions_are_refused() {
    let mut buf = image();
    buf[4] = 0;
    reseal(&mut buf);
    let err = Superblock::parse(&buf).unwrap_err();
    assert_eq!(err, FormatError::UnsupportedVersion { found: 0 });
    assert!(err.to_string().contains("1.2"));
}

#[test]
fn a_role_table_beyond_4k_is_refused() {
    let mut buf = image();
    buf[220..224].copy_from_slice(&(MAX_DEVS + 1).to_le_bytes());
    assert_eq!(
        Superblock::parse(&buf),
        Err(FormatError::TooManyDevices {
            max_dev: MAX_DEVS + 1,
            limit: MAX_DEVS
        })
    );
    // The largest table that fits is fine.
    let mut sb = sample(5, 2, 4, 1);
    sb.max_dev = MAX_DEVS;
    sb.data_offset = 2048;
    let back = Superblock::parse(&sb.to_bytes()).unwrap();
    assert_eq!(back.dev_roles.len(), MAX_DEVS as usize);
    assert_eq!(back.dev_roles[4..], vec![0xffff; MAX_DEVS as usize - 4][..]);
}

fn parse_modified(change: impl FnOnce(&mut Superblock)) -> Result<Superblock, FormatError> {
    let mut sb = sample(5, 2, 4, 1);
    change(&mut sb);
    Superblock::parse(&sb.to_bytes())
}

#[test]
fn offsets_and_sizes_must_be_sane() {
    assert_eq!(
        parse_modified(|sb| sb.super_offset = 0),
        Err(FormatError::WrongSuperOffset { found: 0 })
    );
    assert_eq!(
        parse_modified(|sb| sb.data_offset = 8),
        Err(FormatError::DataOffsetOverlapsSuperblock {
            data_offset: 8,
            min: 9
        })
    );
    assert!(parse_modified(|sb| sb.data_offset = 9).is_ok());
    assert_eq!(
        parse_modified(|sb| {
            sb.data_size = 9;
            sb.size = 0;
        }),
        Err(FormatError::DataSizeTooSmall {
            data_size: 9,
            min: 10
        })
    );
    assert!(matches!(
        parse_modified(|sb| sb.data_size = u64::MAX - 1),
        Err(FormatError::DataAreaTooLarge { .. })
    ));
    assert_eq!(
        parse_modified(|sb| sb.size = sb.data_size + 1),
        Err(FormatError::UsedSizeTooLarge {
            size: 16385,
            data_size: 16384
        })
    );
    assert_eq!(
        parse_modified(|sb| sb.dev_number = 128),
        Err(FormatError::DevNumberOutOfRange {
            dev_number: 128,
            max_dev: 128
        })
    );
}

#[test]
fn every_message_is_one_line() {
    let errors = [
        FormatError::TooShort { len: 1, needed: 2 },
        FormatError::NotMd { found: 0 },
        FormatError::UnsupportedVersion { found: 0 },
        FormatError::TooManyDevices {
            max_dev: 5000,
            limit: MAX_DEVS,
        },
        FormatError::BadChecksum {
            stored: 1,
            computed: 2,
        },
        FormatError::WrongSuperOffset { found: 0 },
        FormatError::DataOffsetOverlapsSuperblock {
            data_offset: 0,
            min: 9,
        },
        FormatError::DataSizeTooSmall {
            data_size: 0,
            min: 10,
        },
        FormatError::DataAreaTooLarge {
            data_offset: 1,
            data_size: u64::MAX,
        },
        FormatError::UsedSizeTooLarge {
            size: 2,
            data_size: 1,
        },
        FormatError::DevNumberOutOfRange {
            dev_number: 200,
            max_dev: 128,
        },
    ];
    for e in errors {
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(msg.len() > 20, "{msg}");
    }
    assert_eq!(
        FormatError::BadChecksum {
            stored: 0xdad2_f12b,
            computed: 1
        }
        .to_string(),
        "superblock checksum is wrong (stored 0xdad2f12b, computed 0x00000001): the superblock is damaged; restore it or leave this member out"
    );
}
