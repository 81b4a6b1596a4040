//! The bad block log: md's entry encoding, ranges merged and split, a damaged log
//! refused, and the list as a live `mdadm --examine-badblocks` reads it.

use std::process::Command;

use proptest::prelude::*;

use super::live_mdadm::{mdadm_42, Scratch};
use super::sample;
use crate::{bad_block_log_sectors, BadBlocks, FormatError, MD_FEATURE_BAD_BLOCKS};

const LOG_BYTES: usize = 4096;

fn list(ranges: &[(u64, u64)]) -> BadBlocks {
    let mut bad = BadBlocks::new();
    for &(start, end) in ranges {
        bad.add(start..end);
    }
    bad
}

#[test]
fn an_entry_holds_the_first_block_above_ten_bits_of_length() {
    let log = list(&[(2048 + 100, 2048 + 108)])
        .encode(0, LOG_BYTES)
        .unwrap();
    let first = u64::from_le_bytes(log[..8].try_into().unwrap());
    assert_eq!(first, ((2048 + 100) << 10) | 8);
    assert!(
        log[8..].iter().all(|&b| b == 0xff),
        "the rest ends the list"
    );
}

#[test]
fn a_range_longer_than_512_blocks_takes_several_entries() {
    let bad = list(&[(4096, 4096 + 1300)]);
    assert_eq!(bad.entries_needed(0), 3);
    let back = BadBlocks::parse(&bad.encode(0, LOG_BYTES).unwrap(), 0).unwrap();
    assert_eq!(back, bad);
    // With 8-sector blocks the same range fits one entry.
    assert_eq!(bad.entries_needed(3), 1);
}

#[test]
fn a_shift_widens_a_range_to_whole_blocks() {
    let bad = list(&[(4099, 4101)]);
    let back = BadBlocks::parse(&bad.encode(3, LOG_BYTES).unwrap(), 3).unwrap();
    assert_eq!(back.ranges().len(), 1);
    assert_eq!(back.ranges()[0], 4096..4104);
}

#[test]
fn touching_ranges_merge_and_a_clear_splits_one() {
    let mut bad = list(&[(100, 108), (108, 116), (200, 208)]);
    assert_eq!(bad.ranges(), &[100..116, 200..208]);
    assert!(!bad.add(104..110), "already bad");
    assert!(bad.clear(104..106));
    assert_eq!(bad.ranges(), &[100..104, 106..116, 200..208]);
    assert_eq!(bad.sectors(), 4 + 10 + 8);
    assert!(bad.clear(0..300));
    assert!(bad.is_empty());
    assert!(!bad.clear(0..300));
}

#[test]
fn overlaps_and_covers_look_at_every_sector() {
    let bad = list(&[(100, 108)]);
    assert!(bad.overlaps(107..200));
    assert!(!bad.overlaps(108..200));
    assert!(!bad.overlaps(50..100));
    assert!(!bad.overlaps(104..104), "an empty range holds nothing");
    assert!(bad.covers(101..108));
    assert!(!bad.covers(99..108));
}

#[test]
fn a_zero_length_entry_is_a_damaged_log() {
    let mut log = vec![0xff; LOG_BYTES];
    log[..8].copy_from_slice(&(4096u64 << 10).to_le_bytes());
    assert_eq!(
        BadBlocks::parse(&log, 0),
        Err(FormatError::BadBlockEntry {
            index: 0,
            entry: 4096 << 10
        })
    );
}

#[test]
fn an_entry_past_the_end_of_any_device_is_a_damaged_log() {
    let mut log = vec![0xff; LOG_BYTES];
    let entry = ((u64::MAX >> 10) << 10) | 8;
    log[..8].copy_from_slice(&entry.to_le_bytes());
    assert!(matches!(
        BadBlocks::parse(&log, 12),
        Err(FormatError::BadBlockEntry { index: 0, .. })
    ));
}

#[test]
fn blocks_too_large_for_any_device_are_a_damaged_superblock() {
    let log = vec![0xff; LOG_BYTES];
    assert_eq!(
        BadBlocks::parse(&log, 54),
        Err(FormatError::BadBlockShift { shift: 54 })
    );
    assert!(BadBlocks::new().encode(200, LOG_BYTES).is_err());
}

#[test]
fn more_ranges_than_the_log_holds_are_refused() {
    let ranges: Vec<(u64, u64)> = (0..513).map(|i| (i * 16, i * 16 + 8)).collect();
    let err = list(&ranges).encode(0, LOG_BYTES).unwrap_err();
    assert_eq!(
        err,
        FormatError::BadBlockLogFull {
            needed: 513,
            capacity: 512
        }
    );
}

proptest! {
    #[test]
    fn a_list_reads_back_as_written(
        ranges in proptest::collection::vec((0u64..1 << 40, 1u64..2000), 0..40),
    ) {
        let ranges: Vec<(u64, u64)> = ranges.iter().map(|&(s, l)| (s, s + l)).collect();
        let bad = list(&ranges);
        let back = BadBlocks::parse(&bad.encode(0, 64 * 1024).unwrap(), 0).unwrap();
        prop_assert_eq!(back, bad.clone());
        for (start, end) in ranges {
            prop_assert!(bad.covers(start..end));
        }
    }

    #[test]
    fn clearing_leaves_exactly_the_sectors_not_cleared(
        ranges in proptest::collection::vec((0u64..4000, 1u64..300), 0..12),
        cleared in proptest::collection::vec((0u64..4000, 1u64..300), 0..6),
    ) {
        let mut bad = list(&ranges.iter().map(|&(s, l)| (s, s + l)).collect::<Vec<_>>());
        let mut model = [false; 4400];
        for &(s, l) in &ranges {
            model[s as usize..(s + l) as usize].fill(true);
        }
        for &(s, l) in &cleared {
            bad.clear(s..s + l);
            model[s as usize..(s + l) as usize].fill(false);
        }
        for (sector, &is_bad) in model.iter().enumerate() {
            let sector = sector as u64;
            prop_assert_eq!(bad.covers(sector..sector + 1), is_bad, "sector {}", sector);
        }
        prop_assert!(bad.ranges().windows(2).all(|w| w[0].end < w[1].start));
    }
}

/// mdadm reads our log as we wrote it: the same entries, in its own words.
#[test]
fn mdadm_examine_badblocks_lists_what_we_wrote() {
    use std::os::unix::fs::FileExt;
    if !mdadm_42() {
        return;
    }
    let dir = Scratch::new("badblocks");
    let mut sb = sample(5, 2, 4, 1);
    let log_at = bad_block_log_sectors(&sb).expect("xraid reserves a log");
    let bad = list(&[(2048 + 64, 2048 + 72), (2048 + 5000, 2048 + 6300)]);
    sb.feature_map |= MD_FEATURE_BAD_BLOCKS;
    sb.sb_csum = sb.compute_checksum();
    let path = dir.0.join("m1");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len((sb.data_offset + sb.data_size) * 512).unwrap();
    file.write_all_at(&sb.to_bytes(), crate::SUPERBLOCK_OFFSET_BYTES)
        .unwrap();
    let log = bad
        .encode(sb.bblog_shift, usize::from(sb.bblog_size) * 512)
        .unwrap();
    file.write_all_at(&log, log_at.start * 512).unwrap();
    drop(file);

    let out = Command::new("mdadm")
        .arg("--examine-badblocks")
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let got: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(got, bad.examine_lines(sb.bblog_shift), "{text}");
    assert_eq!(got.len(), 4, "one short range and one split in three");
}
