//! The bitmap superblock refuses each bad field with its own error and otherwise
//! round-trips byte for byte; the bit array keeps md's bit order, counts and finds
//! runs like a plain reference; new members get the bitmap mdadm would give them.

use proptest::prelude::*;

use super::sample;
use crate::{
    bitmap_bytes, bitmap_image, bitmap_room_sectors, bitmap_start_sector, examine_bitmap_text,
    new_member_bitmap, new_member_bitmap_all_dirty, parse_bitmap, BitmapBits, BitmapChoice,
    BitmapSuper, FormatError, NewArray, Superblock, BITMAP_CLEARED, BITMAP_DAEMON_BUSY,
    BITMAP_FIRST_USE, BITMAP_MAGIC, BITMAP_STALE, BITMAP_SUPER_BYTES, BITMAP_WRITE_ERROR,
    MD_FEATURE_BITMAP_OFFSET, MD_FEATURE_PPL,
};

/// A new raid1 array of two members using `member_sectors`, with a bitmap of
/// `chunk` bytes (mdadm's default when `None`).
fn new_array(member_sectors: u64, chunk: Option<u32>) -> (NewArray, BitmapChoice) {
    let mut new = NewArray {
        set_uuid: [0x11; 16],
        name: "bm".to_owned(),
        level: 1,
        layout: 0,
        chunk_sectors: 0,
        raid_disks: 2,
        ctime: 1_795_349_027,
        data_offset_sectors: 2048,
        bitmap: None,
    };
    let choice = BitmapChoice::internal(&new, member_sectors, chunk).unwrap();
    new.bitmap = Some(choice.clone());
    (new, choice)
}

/// Member 1 of that array, used size set and events bumped as a creator would.
fn member(member_sectors: u64, chunk: Option<u32>) -> (Superblock, BitmapChoice) {
    let (new, choice) = new_array(member_sectors, chunk);
    let mut sb = Superblock::new_member(&new, 1, [0x22; 16], member_sectors);
    sb.size = member_sectors;
    sb.events = 3;
    sb.sb_csum = sb.compute_checksum();
    (sb, choice)
}

/// The bytes of a valid bitmap superblock: 32768 sectors in 4 KiB chunks (4096 bits,
/// 512 bytes of them, so 768 bytes in two sectors).
fn valid() -> [u8; BITMAP_SUPER_BYTES] {
    let (sb, _) = member(16384, Some(4096));
    let choice = BitmapChoice {
        chunk_bytes: 4096,
        sync_sectors: 32768,
        daemon_sleep: 5,
        write_behind: 0,
    };
    BitmapSuper::for_member(&sb, &choice).to_bytes()
}

fn with(offset: usize, bytes: &[u8]) -> Result<BitmapSuper, FormatError> {
    let mut buf = valid();
    buf[offset..offset + bytes.len()].copy_from_slice(bytes);
    BitmapSuper::parse(&buf)
}

#[test]
fn the_layout_is_mds() {
    let buf = valid();
    assert_eq!(&buf[0..4], b"bitm");
    assert_eq!(&buf[4..8], &4u32.to_le_bytes());
    assert_eq!(&buf[8..24], &[0x11; 16]);
    assert_eq!(&buf[24..32], &3u64.to_le_bytes());
    assert_eq!(&buf[32..40], &3u64.to_le_bytes());
    assert_eq!(&buf[40..48], &32768u64.to_le_bytes());
    assert_eq!(&buf[48..52], &[0; 4]);
    assert_eq!(&buf[52..56], &4096u32.to_le_bytes());
    assert_eq!(&buf[56..60], &5u32.to_le_bytes());
    assert!(buf[60..].iter().all(|&b| b == 0));
    let bsb = BitmapSuper::parse(&buf).unwrap();
    assert_eq!(bsb.chunks(), 4096);
    assert_eq!(bsb.on_disk_bytes(), 1024);
    assert_eq!(bsb.reserved_bytes(), 4096);
    assert_eq!(bsb.to_bytes(), buf);
}

#[test]
fn each_bad_field_has_its_error() {
    assert_eq!(
        BitmapSuper::parse(&valid()[..255]),
        Err(FormatError::BitmapTooShort {
            len: 255,
            needed: 256
        })
    );
    assert_eq!(
        with(0, b"bitM"),
        Err(FormatError::NotBitmap {
            found: u32::from_le_bytes(*b"bitM")
        })
    );
    for version in [0u32, 3, 5, 6] {
        assert_eq!(
            with(4, &version.to_le_bytes()),
            Err(FormatError::UnsupportedBitmapVersion { found: version })
        );
    }
    for chunksize in [0u32, 256, 6144, 4097] {
        assert_eq!(
            with(52, &chunksize.to_le_bytes()),
            Err(FormatError::BadBitmapChunkSize { chunksize })
        );
    }
    // 512-byte chunks: 32768 bits, fine when no reserved size says otherwise.
    assert!(with(52, &512u32.to_le_bytes()).is_ok());
    assert_eq!(
        with(56, &0u32.to_le_bytes()),
        Err(FormatError::BitmapDaemonSleepZero)
    );
    assert!(with(56, &1u32.to_le_bytes()).is_ok());
    assert_eq!(
        with(60, &16384u32.to_le_bytes()),
        Err(FormatError::BitmapWriteBehindTooLarge {
            write_behind: 16384,
            max: 16383
        })
    );
    assert!(with(60, &16383u32.to_le_bytes()).is_ok());
    for state in [1u32, 1 << 6, 1 << 15, u32::MAX] {
        assert_eq!(
            with(48, &state.to_le_bytes()),
            Err(FormatError::UnknownBitmapState { state })
        );
    }
    for state in [
        BITMAP_STALE,
        BITMAP_WRITE_ERROR,
        BITMAP_FIRST_USE,
        BITMAP_CLEARED,
        BITMAP_DAEMON_BUSY,
        0x3e,
    ] {
        assert!(with(48, &state.to_le_bytes()).is_ok(), "{state:#x}");
    }
    assert_eq!(
        with(68, &2u32.to_le_bytes()),
        Err(FormatError::ClusteredBitmap { nodes: 2 })
    );
    let too_big = u64::MAX / 512 + 1;
    assert_eq!(
        with(40, &too_big.to_le_bytes()),
        Err(FormatError::BitmapSyncSizeTooLarge { sync_size: too_big })
    );
    assert!(with(40, &(u64::MAX / 512).to_le_bytes()).is_ok());
    // 4096 bits need two sectors with the superblock.
    assert_eq!(
        with(64, &1u32.to_le_bytes()),
        Err(FormatError::BitmapReservedTooSmall {
            sectors_reserved: 1,
            needed: 2
        })
    );
    assert!(with(64, &2u32.to_le_bytes()).is_ok());
    // Cluster name and padding are md's to fill; they are kept, not judged.
    let odd = with(72, b"name").unwrap();
    assert_eq!(&odd.cluster_name[..4], b"name");
    let padded = with(200, &[0xee; 56]).unwrap();
    assert_eq!(padded.to_bytes()[200..], [0xee; 56]);
}

#[test]
fn uuid_placement_and_events_are_judged_against_the_superblock() {
    let (sb, choice) = member(16001, Some(4096));
    let bsb = BitmapSuper::for_member(&sb, &choice);
    assert_eq!(bsb.check_member(&sb), Ok(()));
    assert!(!bsb.is_stale_for(&sb));

    let mut other = bsb.clone();
    other.uuid[0] ^= 0x80;
    assert_eq!(
        other.check_member(&sb),
        Err(FormatError::BitmapUuidMismatch {
            bitmap: other.uuid,
            array: sb.set_uuid
        })
    );

    let mut plain = sb.clone();
    plain.feature_map = 0;
    assert_eq!(bsb.check_member(&plain), Err(FormatError::NoInternalBitmap));

    // On the superblock or before it.
    for offset in [0, -8, -1] {
        let mut moved = sb.clone();
        moved.bitmap_offset = offset;
        assert!(
            matches!(
                bsb.check_member(&moved),
                Err(FormatError::BitmapOutsideGap { .. })
            ),
            "{offset}"
        );
    }
    let mut late = sb.clone();
    late.bblog_size = 0;
    late.bblog_offset = 0;
    // On a 4 KiB boundary the bitmap takes 4 KiB (8 sectors), which must end by the
    // data; elsewhere it takes whole sectors (one, here).
    late.bitmap_offset = 2032;
    assert_eq!(bsb.check_member(&late), Ok(()));
    late.bitmap_offset = 2039;
    assert_eq!(bsb.check_member(&late), Ok(()));
    late.bitmap_offset = 2040;
    assert_eq!(
        bsb.check_member(&late),
        Err(FormatError::BitmapOutsideGap {
            start: 2048,
            end: 2056,
            superblock_end: 9,
            data_offset: 2048
        })
    );

    // The bad-block log sits right after the bitmap's 8 sectors; one sector less of
    // room and they overlap.
    assert_eq!((sb.bblog_size, sb.bblog_offset), (8, 16));
    let mut tight = sb.clone();
    tight.bblog_offset = 15;
    assert_eq!(
        bsb.check_member(&tight),
        Err(FormatError::BitmapOverlapsBadBlockLog {
            start: 16,
            end: 24,
            bblog_start: 23,
            bblog_end: 31
        })
    );

    let mut old = bsb.clone();
    old.events = sb.events - 1;
    assert!(old.is_stale_for(&sb));
    let mut newer = bsb.clone();
    newer.events = sb.events + 1;
    assert!(!newer.is_stale_for(&sb));
    let mut marked = bsb;
    marked.state = BITMAP_STALE;
    assert!(marked.is_stale_for(&sb));
}

#[test]
fn placement_of_a_12_bitmap() {
    let (sb, _) = member(16001, Some(4096));
    assert_eq!(bitmap_start_sector(&sb), Some(16));
    // Up to the bad-block log 16 sectors after the superblock.
    assert_eq!(bitmap_room_sectors(&sb), Some(8));
    let mut no_log = sb.clone();
    no_log.bblog_size = 0;
    assert_eq!(bitmap_room_sectors(&no_log), Some(2032));
    // A PPL shares the field; without the bitmap feature there is no bitmap.
    let mut ppl = sample(5, 2, 4, 0);
    ppl.feature_map = MD_FEATURE_PPL;
    ppl.bitmap_offset = 8 | (2040 << 16);
    assert_eq!(bitmap_start_sector(&ppl), None);
    assert_eq!(bitmap_room_sectors(&ppl), None);
}

#[test]
fn new_members_get_mdadms_bitmap() {
    let (sb, choice) = member(16001, Some(4096));
    assert_eq!(sb.feature_map, MD_FEATURE_BITMAP_OFFSET);
    assert_eq!(sb.bitmap_offset, 8);
    assert_eq!((sb.bblog_size, sb.bblog_offset), (8, 16));
    assert_eq!(Superblock::parse(&sb.to_bytes()), Ok(sb.clone()));

    let image = new_member_bitmap(&sb, &choice);
    assert_eq!(image.len(), 4096);
    assert!(image[256..].iter().all(|&b| b == 0));
    let (bsb, bits) = parse_bitmap(&image).unwrap();
    assert_eq!(bsb.magic, BITMAP_MAGIC);
    assert_eq!(bsb.version, 4);
    assert_eq!(bsb.uuid, sb.set_uuid);
    assert_eq!((bsb.events, bsb.events_cleared), (3, 3));
    assert_eq!((bsb.sync_size, bsb.chunksize), (16001, 4096));
    assert_eq!((bsb.state, bsb.daemon_sleep, bsb.write_behind), (0, 5, 0));
    assert_eq!((bsb.sectors_reserved, bsb.nodes), (0, 0));
    assert_eq!(bits.chunks(), 2001);
    assert_eq!(bits.count(), 0);
    assert_eq!(bsb.check_member(&sb), Ok(()));

    // 10 GiB members in 32 KiB chunks: 327680 bits, 44 KiB reserved, so the bad-block
    // log goes 96 sectors after the superblock.
    let ten_gib = 10 * 1024 * 1024 * 2;
    let (sb, choice) = member(ten_gib, Some(32 << 10));
    assert_eq!(choice.reserved_sectors(), 88);
    assert_eq!((sb.bblog_size, sb.bblog_offset), (8, 96));
    assert_eq!(new_member_bitmap(&sb, &choice).len(), 88 * 512);
    let (_, default) = member(ten_gib, None);
    assert_eq!(default.chunk_bytes, 64 << 20);
    assert_eq!(default.chunks(), 160);
}

#[test]
fn bitmap_choices_refuse_what_mdadm_refuses() {
    let mut new = new_array(16384, None).0;
    new.bitmap = None;
    new.level = 0;
    assert_eq!(
        BitmapChoice::internal(&new, 16384, None),
        Err(FormatError::BitmapUnsupportedArray {
            level: 0,
            layout: 0
        })
    );
    new.level = 1;
    assert_eq!(
        BitmapChoice::internal(&new, 100, None),
        Err(FormatError::NoRoomForBitmap { used_sectors: 100 })
    );
    // 64 KiB of bitmap cannot end before data at sector 100.
    new.data_offset_sectors = 100;
    assert_eq!(
        BitmapChoice::internal(&new, 10 * 1024 * 1024 * 2, Some(32 << 10)),
        Err(FormatError::BitmapOutsideGap {
            start: 16,
            end: 16 + 88,
            superblock_end: 16,
            data_offset: 100
        })
    );
    assert!(BitmapChoice::internal(&new, 10 * 1024 * 1024 * 2, None).is_ok());
}

#[test]
fn examine_bitmap_text_edge_cases() {
    let (sb, choice) = member(16001, Some(4096));
    let mut bsb = BitmapSuper::for_member(&sb, &choice);
    let bits = BitmapBits::new(bsb.chunks());
    let text = |bsb: &BitmapSuper| examine_bitmap_text(bsb, &bits, "/dev/x");

    // mdadm's human_chunksize truncates to whole units.
    for (chunksize, shown) in [
        (512, "512 B"),
        (1536, "1 KB"),
        (1 << 30, "1 GB"),
        (u32::MAX, "3 GB"),
    ] {
        bsb.chunksize = chunksize;
        assert!(
            text(&bsb).contains(&format!("       Chunksize : {shown}\n")),
            "{}",
            text(&bsb)
        );
    }
    bsb.chunksize = 4096;

    // No bits counted without a size.
    bsb.sync_size = 0;
    assert!(text(&bsb).ends_with("          Bitmap : 0 bits (chunks), 0 dirty (0.0%)\n"));
    bsb.sync_size = 16001;

    // Fewer bits at hand than described: whole bytes of them are counted.
    let short = BitmapBits::new(10);
    assert!(
        examine_bitmap_text(&bsb, &short, "x").ends_with(" : 16 bits (chunks), 0 dirty (0.0%)\n")
    );

    // An unknown version stops the listing.
    bsb.version = 9;
    assert_eq!(
        text(&bsb),
        "        Filename : /dev/x\n           Magic : 6d746962\n         Version : 9\n"
    );
    bsb.version = 4;

    // Clustered: no events or state, the cluster lines instead of the bit count.
    bsb.nodes = 2;
    bsb.cluster_name[..3].copy_from_slice(b"abc");
    let t = text(&bsb);
    assert!(!t.contains("Events"));
    assert!(t.ends_with(&format!(
        "   Cluster nodes : 2\n    Cluster name : abc{}\n",
        " ".repeat(61)
    )));
}

#[test]
fn parse_bitmap_needs_all_the_bits() {
    let (sb, choice) = member(16001, Some(4096));
    let image = new_member_bitmap(&sb, &choice);
    assert_eq!(
        parse_bitmap(&image[..256 + 250]),
        Err(FormatError::BitmapTooShort {
            len: 506,
            needed: 507
        })
    );
    assert!(parse_bitmap(&image[..507]).is_ok());
}

#[test]
fn every_bitmap_message_is_one_line() {
    let errors = [
        FormatError::BitmapTooShort { len: 1, needed: 2 },
        FormatError::NotBitmap { found: 0 },
        FormatError::UnsupportedBitmapVersion { found: 3 },
        FormatError::BadBitmapChunkSize { chunksize: 3 },
        FormatError::BitmapDaemonSleepZero,
        FormatError::BitmapWriteBehindTooLarge {
            write_behind: 1 << 20,
            max: 16383,
        },
        FormatError::UnknownBitmapState { state: 1 },
        FormatError::ClusteredBitmap { nodes: 2 },
        FormatError::BitmapSyncSizeTooLarge {
            sync_size: u64::MAX,
        },
        FormatError::BitmapReservedTooSmall {
            sectors_reserved: 1,
            needed: 2,
        },
        FormatError::NoInternalBitmap,
        FormatError::BitmapUuidMismatch {
            bitmap: [1; 16],
            array: [2; 16],
        },
        FormatError::BitmapOutsideGap {
            start: 1,
            end: 2,
            superblock_end: 3,
            data_offset: 4,
        },
        FormatError::BitmapOverlapsBadBlockLog {
            start: 1,
            end: 2,
            bblog_start: 1,
            bblog_end: 2,
        },
        FormatError::BitmapUnsupportedArray {
            level: 0,
            layout: 0,
        },
        FormatError::NoRoomForBitmap { used_sectors: 1 },
        FormatError::BitmapChunkTooSmall {
            chunksize: 4096,
            min: 8192,
        },
        FormatError::BitmapChunkTooLarge {
            sync_sectors: u64::MAX,
            chunk: u64::MAX,
        },
    ];
    for e in errors {
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(msg.len() > 20, "{msg}");
    }
    assert_eq!(
        FormatError::BitmapUuidMismatch {
            bitmap: [1; 16],
            array: [2; 16]
        }
        .to_string(),
        "bitmap UUID 01010101:01010101:01010101:01010101 is not the array's 02020202:02020202:02020202:02020202: the bitmap belongs to another array; re-create the bitmap"
    );
}

/// Bit `i` as md stores it: bit `i % 8` of byte `i / 8`, written out plainly.
fn reference_bit(bytes: &[u8], i: u64) -> bool {
    (bytes[(i / 8) as usize] >> (i % 8)) & 1 == 1
}

/// Chunks and a buffer holding at least their bits.
fn chunks_and_bytes() -> impl Strategy<Value = (u64, Vec<u8>)> {
    (0u64..3000).prop_flat_map(|chunks| {
        let len = chunks.div_ceil(8) as usize;
        (
            Just(chunks),
            proptest::collection::vec(any::<u8>(), len..len + 9),
        )
    })
}

fn arb_super() -> impl Strategy<Value = BitmapSuper> {
    (
        any::<[u8; 16]>(),
        any::<u64>(),
        any::<u64>(),
        0..=u64::MAX / 512,
        prop::sample::select(vec![
            0u32,
            BITMAP_STALE,
            BITMAP_CLEARED | BITMAP_DAEMON_BUSY,
            0x3e,
        ]),
        9u32..32,
        1u32..,
        0u32..=16383,
        any::<[u8; 64]>(),
        proptest::collection::vec(any::<u8>(), 120),
    )
        .prop_map(
            |(uuid, events, events_cleared, sync_size, state, shift, sleep, behind, name, pad)| {
                BitmapSuper {
                    magic: BITMAP_MAGIC,
                    version: 4,
                    uuid,
                    events,
                    events_cleared,
                    sync_size,
                    state,
                    chunksize: 1 << shift,
                    daemon_sleep: sleep,
                    write_behind: behind,
                    sectors_reserved: 0,
                    nodes: 0,
                    cluster_name: name,
                    pad: pad.try_into().unwrap_or([0; 120]),
                }
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    Set(u64),
    Clear(u64),
    SetRange(u64, u64),
    ClearAll,
}

fn ops(chunks: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        (0..chunks).prop_map(Op::Set),
        (0..chunks).prop_map(Op::Clear),
        (0..chunks + 20, 0..chunks + 20).prop_map(|(a, b)| Op::SetRange(a.min(b), a.max(b))),
        Just(Op::ClearAll),
    ];
    proptest::collection::vec(op, 0..60)
}

proptest! {
    #[test]
    fn any_valid_bitmap_super_round_trips(bsb in arb_super()) {
        let bytes = bsb.to_bytes();
        let back = BitmapSuper::parse(&bytes).unwrap();
        prop_assert_eq!(&back, &bsb);
        prop_assert_eq!(back.to_bytes(), bytes);
    }

    #[test]
    fn bitmap_super_parse_never_panics(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..300),
        fix in any::<bool>(),
    ) {
        if fix && bytes.len() >= 8 {
            bytes[..4].copy_from_slice(&BITMAP_MAGIC.to_le_bytes());
            bytes[4..8].copy_from_slice(&4u32.to_le_bytes());
        }
        if let Ok(bsb) = BitmapSuper::parse(&bytes) {
            prop_assert_eq!(&bsb.to_bytes()[..], &bytes[..256]);
            let _ = examine_bitmap_text(&bsb, &BitmapBits::new(0), "x");
        }
        let _ = parse_bitmap(&bytes);
    }

    #[test]
    fn bits_read_count_and_write_like_the_reference((chunks, bytes) in chunks_and_bytes()) {
        let bits = BitmapBits::parse(&bytes, chunks).unwrap();
        let len = chunks.div_ceil(8) as usize;
        prop_assert_eq!(bits.as_bytes(), &bytes[..len]);
        let set: Vec<u64> = (0..chunks).filter(|&i| reference_bit(&bytes, i)).collect();
        for i in 0..chunks {
            prop_assert_eq!(bits.test(i), reference_bit(&bytes, i));
        }
        prop_assert_eq!(bits.count(), set.len() as u64);
        let ranges: Vec<_> = bits.dirty_ranges().collect();
        let flat: Vec<u64> = ranges.iter().flat_map(|r| r.clone()).collect();
        prop_assert_eq!(&flat, &set);
        for pair in ranges.windows(2) {
            // Maximal runs: a clean chunk between any two.
            prop_assert!(pair[0].end < pair[1].start);
        }
        prop_assert!(ranges.iter().all(|r| r.start < r.end && r.end <= chunks));
    }

    #[test]
    fn bits_follow_a_model((chunks, ops) in (1u64..600).prop_flat_map(|c| (Just(c), ops(c)))) {
        let mut bits = BitmapBits::new(chunks);
        let mut model = vec![false; chunks as usize];
        for op in ops {
            match op {
                Op::Set(i) => { bits.set(i); model[i as usize] = true; }
                Op::Clear(i) => { bits.clear(i); model[i as usize] = false; }
                Op::SetRange(a, b) => {
                    bits.set_range(a..b);
                    for m in model.iter_mut().take(b as usize).skip(a as usize) { *m = true; }
                }
                Op::ClearAll => { bits.clear_all(); model.fill(false); }
            }
        }
        let mut expect = vec![0u8; chunks.div_ceil(8) as usize];
        for (i, &m) in model.iter().enumerate() {
            if m { expect[i / 8] |= 1 << (i % 8); }
        }
        prop_assert_eq!(bits.as_bytes(), &expect[..]);
        prop_assert_eq!(bits.count(), model.iter().filter(|&&m| m).count() as u64);
    }

    #[test]
    fn images_parse_back((chunks, bytes) in chunks_and_bytes(), bsb in arb_super()) {
        let bsb = BitmapSuper { sync_size: chunks * 8, chunksize: 4096, ..bsb };
        let bits = BitmapBits::parse(&bytes, bsb.chunks()).unwrap();
        let image = bitmap_image(&bsb, &bits);
        prop_assert_eq!(image.len() as u64, bitmap_bytes(bsb.chunks()));
        prop_assert_eq!(image.len() % 512, 0);
        let (back, back_bits) = parse_bitmap(&image).unwrap();
        prop_assert_eq!(back, bsb);
        prop_assert_eq!(back_bits, bits);
    }
}

#[test]
fn an_all_dirty_bitmap_has_every_chunk_set_and_nothing_past_the_last() {
    // 16001 sectors in 4 KiB chunks: 2001 chunks, one bit in the last byte.
    let (sb, choice) = member(16001, Some(4096));
    let (bsb, bits) = parse_bitmap(&new_member_bitmap_all_dirty(&sb, &choice)).unwrap();
    assert_eq!(bits.chunks(), bsb.chunks());
    assert_eq!(bits.chunks(), 2001);
    assert_eq!(bits.count(), bits.chunks());
    assert_eq!(bits.as_bytes().last(), Some(&0b1));
    let (_, clean) = parse_bitmap(&new_member_bitmap(&sb, &choice)).unwrap();
    assert_eq!(clean.count(), 0);
    for chunks in [1u64, 7, 8, 9, 64, 65] {
        let bits = BitmapBits::all_dirty(chunks);
        assert_eq!(bits.count(), chunks, "{chunks} chunks");
    }
}
