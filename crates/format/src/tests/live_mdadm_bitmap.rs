//! Internal bitmaps written by this crate, read by a live mdadm 4.2.
//!
//! `mdadm --examine` of a member reads the bitmap superblock where the superblock says
//! it is and drops the bitmap feature from what it shows (and so reports a wrong
//! checksum) unless it finds the bitmap magic and the array's UUID there: a member that
//! examines with "Feature Map : 0x1" and a correct checksum has its bitmap in the right
//! place. `mdadm --examine-bitmap` (`-X`) then reads the bitmap itself; mdadm 4.2 looks
//! for an internal bitmap only on block devices and reads a regular file as a bitmap
//! file from its start, so the test hands it the bytes found at the offset mdadm's
//! `--examine` printed. Its output must match the numbers the test expects and
//! [`examine_bitmap_text`] line for line.
//!
//! Runs only when mdadm 4.2 is installed.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use super::comparable;
use super::live_mdadm::{mdadm_42, mdadm_examine, Scratch};
use crate::{
    bitmap_image, bitmap_start_sector, examine_bitmap_text, examine_text, examine_text_with_bitmap,
    new_member_bitmap, parse_bitmap, BitmapBits, BitmapChoice, BitmapSuper, FormatError, NewArray,
    Superblock, BITMAP_CLEARED, BITMAP_STALE, SUPERBLOCK_OFFSET_BYTES,
};

const UUID: [u8; 16] = [
    0x77, 0x5e, 0xdc, 0xeb, 0xcd, 0xf4, 0x49, 0xa1, 0xa0, 0xa1, 0x4e, 0x2f, 0xa9, 0xce, 0x53, 0xa0,
];

/// Role 0 of a new array with an internal bitmap, `member_sectors` used on each
/// member (which are that big after the data offset), as xraid would create it.
fn member(
    level: i32,
    layout: u32,
    raid_disks: u32,
    member_sectors: u64,
    chunk: Option<u32>,
) -> (Superblock, BitmapChoice) {
    let mut new = NewArray {
        set_uuid: UUID,
        name: "bitmap".to_owned(),
        level,
        layout,
        chunk_sectors: if level == 1 { 0 } else { 128 },
        raid_disks,
        ctime: 1_795_349_027,
        data_offset_sectors: 2048,
        bitmap: None,
    };
    let choice = BitmapChoice::internal(&new, member_sectors, chunk).unwrap();
    new.bitmap = Some(choice.clone());
    let mut sb = Superblock::new_member(&new, 0, [0x5a; 16], member_sectors);
    sb.size = member_sectors;
    sb.events = 7;
    sb.sb_csum = sb.compute_checksum();
    (sb, choice)
}

/// A sparse member file: `image` at the superblock's place, `bitmap` where the
/// superblock says the bitmap is, ending after the data area.
fn write_member(path: &Path, sb: &Superblock, image: &[u8], bitmap: &[u8]) {
    let file = std::fs::File::create(path).unwrap();
    file.set_len((sb.data_offset + sb.data_size) * 512).unwrap();
    file.write_all_at(image, SUPERBLOCK_OFFSET_BYTES).unwrap();
    let start = bitmap_start_sector(sb).unwrap();
    file.write_all_at(bitmap, start * 512).unwrap();
}

/// The value after "label : " in mdadm's output.
fn field<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(label)?.strip_prefix(" : "))
}

/// What `mdadm --examine-bitmap` prints for the bitmap of the member at `path`, by
/// way of a file holding the bytes from where `--examine` says the bitmap starts to
/// the data offset it prints.
fn mdadm_examine_bitmap(dir: &Scratch, path: &Path, examine: &str) -> (String, Vec<u8>) {
    let sectors: u64 = field(examine, "Internal Bitmap")
        .and_then(|v| v.strip_suffix(" sectors from superblock"))
        .expect("mdadm shows an internal bitmap")
        .parse()
        .unwrap();
    let data_offset: u64 = field(examine, "Data Offset")
        .and_then(|v| v.strip_suffix(" sectors"))
        .unwrap()
        .parse()
        .unwrap();
    let start = SUPERBLOCK_OFFSET_BYTES + sectors * 512;
    let mut bytes = vec![0u8; (data_offset * 512 - start) as usize];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut bytes, start)
        .unwrap();
    let bm = dir.0.join(format!(
        "{}.bitmap",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&bm, &bytes).unwrap();
    let out = Command::new("mdadm")
        .arg("--examine-bitmap")
        .arg(&bm)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mdadm -X failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (text, bytes)
}

/// Writes the member, checks mdadm's `--examine` takes the bitmap, and returns what
/// `mdadm -X` printed after checking that `examine_bitmap_text` prints the same.
fn agree(dir: &Scratch, what: &str, sb: &Superblock, bsb: &BitmapSuper, bitmap: &[u8]) -> String {
    let path = dir.0.join(format!("{what}.img"));
    write_member(&path, sb, &sb.to_bytes(), bitmap);

    let examine = mdadm_examine(&path);
    assert_eq!(
        field(&examine, "Feature Map"),
        Some("0x1"),
        "{what}\n{examine}"
    );
    assert!(
        field(&examine, "Checksum").is_some_and(|c| c.ends_with(" - correct")),
        "{what}\n{examine}"
    );
    let ours = examine_text_with_bitmap(sb, bsb, &path.display().to_string());
    assert_eq!(
        comparable(&ours),
        comparable(&examine),
        "{what}\nmdadm:\n{examine}\nours:\n{ours}"
    );
    bsb.check_member(sb).unwrap();

    let (theirs, bytes) = mdadm_examine_bitmap(dir, &path, &examine);
    let (read_bsb, read_bits) = parse_bitmap(&bytes).unwrap();
    assert_eq!(&read_bsb, bsb, "{what}");
    let bm = dir.0.join(format!("{what}.img.bitmap"));
    let ours = examine_bitmap_text(&read_bsb, &read_bits, &bm.display().to_string());
    assert_eq!(ours, theirs, "{what}");
    theirs
}

#[test]
fn mdadm_reads_our_bitmaps() {
    if !mdadm_42() {
        return;
    }
    let dir = Scratch::new("bitmaps");

    // raid1 with 4 KiB chunks over an odd size: 2001 bits, the last one alone in the
    // low bit of its byte, where mdadm counts it only if the bit order is md's.
    let (sb, choice) = member(1, 0, 2, 16001, Some(4096));
    assert_eq!(choice.chunks(), 2001);
    let (bsb, mut bits) = parse_bitmap(&new_member_bitmap(&sb, &choice)).unwrap();
    assert_eq!(bits.count(), 0);
    for chunk in [0, 1, 7, 8, 2000] {
        bits.set(chunk);
    }
    bits.set_range(100..165);
    let text = agree(&dir, "raid1", &sb, &bsb, &bitmap_image(&bsb, &bits));
    let expected = [
        ("Magic", "6d746962"),
        ("Version", "4"),
        ("UUID", "775edceb:cdf449a1:a0a14e2f:a9ce53a0"),
        ("Events", "7"),
        ("Events Cleared", "7"),
        ("State", "OK"),
        ("Chunksize", "4 KB"),
        ("Daemon", "5s flush period"),
        ("Write Mode", "Normal"),
        ("Sync Size", "8000 (7.81 MiB 8.19 MB)"),
        ("Bitmap", "2001 bits (chunks), 70 dirty (3.5%)"),
    ];
    for (label, value) in expected {
        assert_eq!(field(&text, label), Some(value), "{label}\n{text}");
    }

    // The same bitmap with the last chunk clean and the seven meaningless bits after it
    // set: neither mdadm nor we count them.
    let mut image = bitmap_image(&bsb, &bits);
    image[256 + 250] = 0xfe;
    let (_, garbage) = parse_bitmap(&image).unwrap();
    assert_eq!(garbage.count(), 69);
    let text = agree(&dir, "raid1-tail", &sb, &bsb, &image);
    assert_eq!(
        field(&text, "Bitmap"),
        Some("2001 bits (chunks), 69 dirty (3.4%)")
    );

    // raid5 with mdadm's default chunk: 64 MiB, one bit for 8 MiB; marked stale.
    let (sb, choice) = member(5, 2, 4, 16384, None);
    assert_eq!(choice.chunk_bytes, 64 << 20);
    let mut bsb = BitmapSuper::for_member(&sb, &choice);
    bsb.state = BITMAP_STALE;
    let mut bits = BitmapBits::new(bsb.chunks());
    bits.set(0);
    let text = agree(&dir, "raid5", &sb, &bsb, &bitmap_image(&bsb, &bits));
    assert_eq!(field(&text, "State"), Some("Out of date"));
    assert_eq!(field(&text, "Chunksize"), Some("64 MB"));
    assert_eq!(
        field(&text, "Bitmap"),
        Some("1 bits (chunks), 1 dirty (100.0%)")
    );

    // raid10 near=2 over 4: the bitmap covers the array, twice a member.
    let (sb, choice) = member(10, 0x102, 4, 16384, Some(8192));
    let mut bsb = BitmapSuper::for_member(&sb, &choice);
    bsb.state = BITMAP_CLEARED;
    bsb.write_behind = 256;
    bsb.daemon_sleep = 10;
    bsb.events_cleared = 3;
    let mut bits = BitmapBits::new(bsb.chunks());
    bits.set_range(0..10);
    bits.set(2047);
    let text = agree(&dir, "raid10", &sb, &bsb, &bitmap_image(&bsb, &bits));
    for (label, value) in [
        ("Events Cleared", "3"),
        ("State", "Unknown"),
        ("Chunksize", "8 KB"),
        ("Daemon", "10s flush period"),
        ("Write Mode", "Allow write behind, max 256"),
        ("Sync Size", "16384 (16.00 MiB 16.78 MB)"),
        ("Bitmap", "2048 bits (chunks), 11 dirty (0.5%)"),
    ] {
        assert_eq!(field(&text, label), Some(value), "{label}\n{text}");
    }

    // raid6 over 300 GiB members with 512 KiB chunks: 614400 bits in 76 KiB, and no
    // bad-block log, so the bitmap's size sets the unused space before the data.
    let gib = 1024 * 1024 * 2;
    let (mut sb, choice) = member(6, 2, 5, 300 * gib, Some(512 << 10));
    assert_eq!(choice.reserved_sectors(), 152);
    assert_eq!((sb.bblog_size, sb.bblog_offset), (8, 160));
    sb.bblog_size = 0;
    sb.bblog_offset = 0;
    sb.sb_csum = sb.compute_checksum();
    let bsb = BitmapSuper::for_member(&sb, &choice);
    let mut bits = BitmapBits::new(bsb.chunks());
    for chunk in (0..614_400).step_by(1000) {
        bits.set(chunk);
    }
    let path = dir.0.join("raid6.img");
    let image = bitmap_image(&bsb, &bits);
    let text = agree(&dir, "raid6", &sb, &bsb, &image);
    assert_eq!(
        field(&text, "Sync Size"),
        Some("314572800 (300.00 GiB 322.12 GB)")
    );
    assert_eq!(
        field(&text, "Bitmap"),
        Some("614400 bits (chunks), 615 dirty (0.1%)")
    );
    let examine = mdadm_examine(&path);
    assert_eq!(
        field(&examine, "Unused Space"),
        Some("before=1888 sectors, after=0 sectors")
    );
    // Without the bitmap superblock the smallest bitmap is assumed, which is not it.
    assert_ne!(
        comparable(&examine_text(&sb, &path.display().to_string())),
        comparable(&examine)
    );
}

#[test]
fn mdadm_ignores_a_bitmap_of_another_array() {
    if !mdadm_42() {
        return;
    }
    let dir = Scratch::new("foreign-bitmap");
    let (sb, choice) = member(1, 0, 2, 16001, Some(4096));
    let mut bsb = BitmapSuper::for_member(&sb, &choice);
    bsb.uuid[15] ^= 1;
    let path = dir.0.join("foreign.img");
    let bits = BitmapBits::new(bsb.chunks());
    write_member(&path, &sb, &sb.to_bytes(), &bitmap_image(&bsb, &bits));

    let examine = mdadm_examine(&path);
    assert_eq!(field(&examine, "Feature Map"), Some("0x0"), "{examine}");
    assert!(field(&examine, "Internal Bitmap").is_none(), "{examine}");
    let ours = examine_text_with_bitmap(&sb, &bsb, &path.display().to_string());
    assert_eq!(comparable(&ours), comparable(&examine), "ours:\n{ours}");
    assert!(matches!(
        bsb.check_member(&sb),
        Err(FormatError::BitmapUuidMismatch { .. })
    ));
}
