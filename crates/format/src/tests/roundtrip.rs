//! New superblocks and arbitrary ones survive `to_bytes` → `parse` unchanged, and
//! `parse` never panics on garbage.

use proptest::prelude::*;

use super::sample;
use crate::{
    examine_text, NewArray, Superblock, MAX_DEVS, MD_SB_MAGIC, ROLE_SPARE, SUPERBLOCK_BYTES,
};

#[test]
fn new_members_parse_back_with_a_correct_checksum() {
    for (level, layout, disks) in [
        (0, 0, 3),
        (1, 0, 2),
        (4, 5, 4),
        (5, 2, 4),
        (6, 2, 5),
        (10, 0x102, 4),
    ] {
        for role in 0..disks {
            let sb = sample(level, layout, disks, role);
            let bytes = sb.to_bytes();
            assert_eq!(bytes.len(), SUPERBLOCK_BYTES);
            assert!(bytes[512..].iter().all(|&b| b == 0));
            let back = Superblock::parse(&bytes).unwrap();
            assert_eq!(back, sb);
            assert_eq!(back.role(), Some(role as u16));
            assert_eq!(back.compute_checksum(), back.sb_csum);
            assert!(examine_text(&back, "x").contains(" - correct\n"));
        }
    }
}

#[test]
fn new_member_fields_are_mdadms() {
    let new = NewArray {
        set_uuid: [7; 16],
        name: "exam".into(),
        level: 6,
        layout: 2,
        chunk_sectors: 128,
        raid_disks: 5,
        ctime: 1_795_349_027,
        data_offset_sectors: 2048,
        bitmap: None,
    };
    let sb = Superblock::new_member(&new, 3, [9; 16], 30720);
    assert_eq!(sb.magic, MD_SB_MAGIC);
    assert_eq!(sb.major_version, 1);
    assert_eq!(sb.feature_map, 0);
    assert_eq!(sb.name(), "exam");
    assert_eq!(sb.ctime, 1_795_349_027);
    assert_eq!(sb.utime, sb.ctime);
    assert_eq!(
        (sb.level, sb.layout, sb.chunksize, sb.raid_disks),
        (6, 2, 128, 5)
    );
    assert_eq!(
        (sb.data_offset, sb.data_size, sb.super_offset),
        (2048, 30720, 8)
    );
    assert_eq!(sb.size, 0);
    assert_eq!(sb.dev_number, 3);
    assert_eq!(sb.device_uuid, [9; 16]);
    assert_eq!(sb.events, 0);
    assert!(sb.is_clean());
    assert_eq!(sb.max_dev, 128);
    assert_eq!(sb.dev_roles[..5], [0, 1, 2, 3, 4]);
    assert!(sb.dev_roles[5..].iter().all(|&r| r == ROLE_SPARE));
    assert_eq!((sb.bblog_shift, sb.bblog_size, sb.bblog_offset), (0, 8, 16));
    assert_eq!(sb.role(), Some(3));
    assert_eq!(sb.sb_csum, sb.compute_checksum());
    // Seconds beyond md's 40 bits cannot be stored.
    let late = NewArray {
        ctime: 1 << 41 | 5,
        ..new
    };
    assert_eq!(Superblock::new_member(&late, 0, [0; 16], 30720).ctime, 5);
}

#[test]
fn role_table_shorter_or_longer_than_max_dev() {
    let mut sb = sample(1, 0, 2, 0);
    sb.dev_roles.truncate(2);
    let back = Superblock::parse(&sb.to_bytes()).unwrap();
    assert_eq!(back.dev_roles.len(), 128);
    assert!(back.dev_roles[2..].iter().all(|&r| r == ROLE_SPARE));
    assert_eq!(sb.compute_checksum(), back.sb_csum);
    sb.dev_roles.resize(300, 1);
    let back = Superblock::parse(&sb.to_bytes()).unwrap();
    assert_eq!(back.dev_roles.len(), 128);
}

#[test]
fn role_is_none_beyond_the_table() {
    let mut sb = sample(1, 0, 2, 0);
    sb.dev_number = 128;
    assert_eq!(sb.role(), None);
    sb.dev_number = 1;
    sb.dev_roles.truncate(1);
    assert_eq!(sb.role(), None);
}

#[test]
fn uuid_text_is_mdadms() {
    let uuid = [
        0x77, 0x5e, 0xdc, 0xeb, 0xcd, 0xf4, 0x49, 0xa1, 0xa0, 0xa1, 0x4e, 0x2f, 0xa9, 0xce, 0x53,
        0xa0,
    ];
    assert_eq!(
        Superblock::uuid_string(&uuid),
        "775edceb:cdf449a1:a0a14e2f:a9ce53a0"
    );
}

#[test]
fn names_stop_at_the_first_nul_and_may_fill_32_bytes() {
    let mut sb = sample(1, 0, 2, 0);
    sb.set_name = [b'x'; 32];
    assert_eq!(sb.name(), "x".repeat(32));
    sb.set_name[3] = 0;
    sb.set_name[5] = b'y';
    assert_eq!(sb.name(), "xxx");
    sb.set_name[0] = 0xff;
    assert_eq!(sb.name(), "\u{fffd}xx");
}

fn arb_superblock() -> impl Strategy<Value = Superblock> {
    let array = (
        any::<u32>(),
        any::<[u8; 16]>(),
        any::<[u8; 32]>(),
        any::<u64>(),
        any::<i32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<i32>(),
        any::<i32>(),
        any::<u64>(),
        any::<i32>(),
    );
    let more = (any::<u32>(), any::<u32>(), any::<u32>(), any::<u64>());
    let member = (
        9u64..1 << 40,
        10u64..1 << 40,
        any::<u64>(),
        any::<u32>(),
        any::<[u8; 16]>(),
        any::<u8>(),
        any::<u8>(),
        any::<u16>(),
        any::<u32>(),
    );
    let state = (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        1u32..=MAX_DEVS,
        any::<[u8; 32]>(),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(any::<u16>(), MAX_DEVS as usize),
    );
    (array, more, member, state).prop_map(|(a, m, d, s)| {
        let (
            feature_map,
            set_uuid,
            set_name,
            ctime,
            level,
            layout,
            chunksize,
            raid_disks,
            bitmap_offset,
            new_level,
            reshape_position,
            delta_disks,
        ) = a;
        let (new_layout, new_chunk, new_offset, size) = m;
        let (
            data_offset,
            data_size,
            recovery_offset,
            dev_number,
            device_uuid,
            devflags,
            bblog_shift,
            bblog_size,
            bblog_offset,
        ) = d;
        let (utime, events, resync_offset, max_dev, pad3, pad0, cnt_corrected_read, mut dev_roles) =
            s;
        dev_roles.truncate(max_dev as usize);
        let mut sb = Superblock {
            magic: MD_SB_MAGIC,
            major_version: 1,
            feature_map,
            pad0,
            set_uuid,
            set_name,
            ctime,
            level,
            layout,
            size: size % (data_size + 1),
            chunksize,
            raid_disks,
            bitmap_offset,
            new_level,
            reshape_position,
            delta_disks,
            new_layout,
            new_chunk,
            new_offset,
            data_offset: data_offset + 16,
            data_size,
            super_offset: 8,
            recovery_offset,
            dev_number: dev_number % max_dev,
            cnt_corrected_read,
            device_uuid,
            devflags,
            bblog_shift,
            bblog_size,
            bblog_offset,
            utime,
            events,
            resync_offset,
            sb_csum: 0,
            max_dev,
            pad3,
            dev_roles,
        };
        sb.sb_csum = sb.compute_checksum();
        sb
    })
}

proptest! {
    #[test]
    fn any_valid_superblock_round_trips(sb in arb_superblock()) {
        let bytes = sb.to_bytes();
        prop_assert_eq!(bytes.len(), SUPERBLOCK_BYTES);
        let back = Superblock::parse(&bytes).unwrap();
        prop_assert_eq!(&back, &sb);
        prop_assert_eq!(back.to_bytes(), bytes);
        // Rendering never panics, whatever the fields hold.
        let text = examine_text(&back, "/dev/x");
        prop_assert!(text.contains(" - correct\n"));
    }

    #[test]
    fn checksum_matches_a_plain_reference(sb in arb_superblock()) {
        let bytes = sb.to_bytes();
        let len = 256 + 2 * sb.max_dev as usize;
        let mut sum: u64 = 0;
        let mut i = 0;
        while i + 4 <= len {
            if i != 216 {
                sum += u64::from(u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]));
            }
            i += 4;
        }
        if len - i == 2 {
            sum += u64::from(u16::from_le_bytes([bytes[i], bytes[i + 1]]));
        }
        let expect = ((sum & 0xffff_ffff) + (sum >> 32)) as u32;
        prop_assert_eq!(u32::from_le_bytes([bytes[216], bytes[217], bytes[218], bytes[219]]), expect);
    }

    #[test]
    fn parse_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..4200), magic in any::<bool>(), fix in any::<bool>()) {
        if magic && bytes.len() >= 8 {
            bytes[..4].copy_from_slice(&MD_SB_MAGIC.to_le_bytes());
            bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
        }
        if fix && bytes.len() >= 256 {
            let max_dev = u32::from_le_bytes([bytes[220], bytes[221], bytes[222], bytes[223]]) % 200;
            bytes[220..224].copy_from_slice(&max_dev.to_le_bytes());
            let len = (256 + 2 * max_dev as usize).min(bytes.len());
            let csum = crate::sb_checksum(&bytes[..len]);
            bytes[216..220].copy_from_slice(&csum.to_le_bytes());
        }
        if let Ok(sb) = Superblock::parse(&bytes) {
            let _ = examine_text(&sb, "x");
            prop_assert_eq!(&sb.to_bytes()[..256], &bytes[..256]);
        }
    }
}

/// xraid's update times carry microseconds (never 0) above the 40 bits of seconds;
/// md's whole seconds do not, and the seconds read back the same either way.
#[test]
fn precise_update_times_are_told_from_whole_seconds() {
    use std::time::Duration;
    let new = NewArray {
        name: "t".into(),
        set_uuid: [1; 16],
        level: 5,
        layout: 2,
        chunk_sectors: 128,
        raid_disks: 3,
        ctime: 1_795_349_027,
        data_offset_sectors: 2048,
        bitmap: None,
    };
    let mut sb = Superblock::new_member(&new, 0, [2; 16], 30720);
    assert!(!sb.utime_has_microseconds(), "whole seconds, as md writes");
    for (micros, stored) in [(0u32, 1u64), (1, 1), (999_999, 999_999)] {
        let at = Duration::new(1_795_349_100, micros * 1000);
        sb.utime = Superblock::encode_time_precise(at);
        let back = Superblock::parse(&sb.to_bytes()).expect("parse");
        assert!(back.utime_has_microseconds(), "{micros} µs");
        assert_eq!(back.utime_secs(), 1_795_349_100);
        assert_eq!(back.utime >> 40, stored);
    }
}
