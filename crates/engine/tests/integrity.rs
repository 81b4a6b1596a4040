//! Integrity mode in the simulator, case by case: what a flipped bit or a lost write
//! does to a read, where the table pages go and when, what a partial write and a
//! crash leave unchecked. (The random fault stories in `faults.rs` mix all of it.)

use xraid_engine::sim::SimArray;
use xraid_engine::{EngineError, Event, MemberIdx, Nanos, WriteIntentSetup, INTENT_HEADER_BYTES};
use xraid_format::{decode_page, BLOCK_BYTES, ENTRIES_PER_PAGE, PAGE_BYTES, UNKNOWN};
use xraid_layout::{Geometry, Layout, Level, ParityAlgorithm};

const SECTOR: usize = 512;

fn geometry(level: Level, disks: u16) -> Geometry {
    let layout = match level {
        Level::Raid5 | Level::Raid6 => Layout::Parity(ParityAlgorithm::LeftSymmetric),
        _ => Layout::default_for(level),
    };
    let chunk = if level == Level::Raid1 { 0 } else { 16 };
    Geometry::new(level, layout, disks, chunk, 1024).expect("geometry")
}

/// An array in integrity mode filled with seeded data; returns it and the data.
fn filled(level: Level, disks: u16) -> (SimArray, Vec<u8>) {
    let geo = geometry(level, disks);
    let mut array = SimArray::new(geo, 7);
    array.enable_integrity();
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    array.flush().expect("flush");
    (array, data)
}

fn mismatches(events: &[Event]) -> Vec<(MemberIdx, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ChecksumMismatch { member, sector, .. } => Some((*member, *sector)),
            _ => None,
        })
        .collect()
}

/// Runs a check scrub over the whole array; the checksum mismatches it (and anything
/// since the last events were taken) found.
fn check_mismatches(array: &mut SimArray) -> Vec<(MemberIdx, u64)> {
    array
        .engine
        .start_sync(xraid_engine::SyncKind::Check, 0)
        .expect("check");
    array.run_sync();
    mismatches(&array.take_events())
}

#[test]
fn a_flipped_bit_is_caught_returned_right_and_rewritten() {
    for level in [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10] {
        let (mut array, data) = filled(level, 4);
        // Member 1's first data block: read by an ordinary read of the whole array.
        let copy = array.members[1].data[..BLOCK_BYTES].to_vec();
        array.flip_bit(MemberIdx(1), 1000, 5);
        let total = array.engine.array_sectors();
        let got = array.read(0, total).expect("read");
        assert!(got == data, "{level:?}: the read is right");
        // Mirrors may have read another copy: a check reads them all.
        let found = check_mismatches(&mut array);
        assert_eq!(found, vec![(MemberIdx(1), 0)], "{level:?}");
        assert_eq!(got.len(), data.len());
        assert_eq!(
            array.members[1].data[..BLOCK_BYTES],
            copy[..],
            "{level:?}: the bad block was rewritten"
        );
        assert_eq!(array.engine.stats().checksum_mismatches, 1);
        assert_eq!(array.engine.checksum_mismatches(MemberIdx(1)), 1);
        // A new disk in the role does not carry the old one's count.
        array.kill_member(MemberIdx(1));
        array.return_member(MemberIdx(1), true).expect("a new disk");
        assert_eq!(
            array.engine.checksum_mismatches(MemberIdx(1)),
            0,
            "{level:?}"
        );
        assert_eq!(
            array.engine.stats().checksum_mismatches,
            1,
            "the array's count stays"
        );
    }
}

#[test]
fn a_read_of_part_of_a_block_checks_the_whole_block() {
    let (mut array, data) = filled(Level::Raid5, 4);
    // One sector, in the middle of member 0's block 1, whose flipped bit lies in
    // another sector of the same block.
    array.flip_bit(MemberIdx(0), BLOCK_BYTES + 100, 0);
    let got = array.read(11, 1).expect("read");
    assert_eq!(got, data[11 * SECTOR..12 * SECTOR]);
    assert_eq!(mismatches(&array.take_events()), vec![(MemberIdx(0), 8)]);
    // Repaired whole: the next read of the whole block is clean.
    let got = array.read(8, 8).expect("read");
    assert_eq!(got, data[8 * SECTOR..16 * SECTOR]);
    assert!(mismatches(&array.take_events()).is_empty());
}

#[test]
fn a_lost_write_is_caught_and_rebuilt_from_parity() {
    let (mut array, mut data) = filled(Level::Raid5, 4);
    // The member acknowledges the write and keeps its old bytes.
    let old = array.members[2].data.clone();
    let new = vec![0x5a; 8 * SECTOR];
    // Array sectors 32..40: stripe 0, data chunk 2 on member 2.
    array.write(32, &new).expect("write");
    let lost_range = 0..8 * SECTOR;
    array.members[2].data[lost_range.clone()].copy_from_slice(&old[lost_range]);
    data[32 * SECTOR..40 * SECTOR].copy_from_slice(&new);
    assert_eq!(array.read(32, 8).expect("read"), new);
    assert_eq!(mismatches(&array.take_events()), vec![(MemberIdx(2), 0)]);
}

#[test]
fn raid0_refuses_a_bad_block_instead_of_returning_it() {
    let (mut array, _) = filled(Level::Raid0, 3);
    array.flip_bit(MemberIdx(2), 7, 1);
    let err = array.read(32, 16).expect_err("no redundancy");
    assert!(matches!(err, EngineError::Unreadable { .. }), "{err:?}");
}

#[test]
fn tables_reach_the_members_at_checkpoints_not_at_clients_flushes() {
    let (mut array, _) = filled(Level::Raid5, 4);
    let stored = |array: &SimArray, m: usize| -> Vec<u32> {
        let area = &array.members[m].checksums;
        let blocks = array.engine.geometry().member_sectors() as usize / 8;
        let mut out = Vec::new();
        for page in 0..blocks.div_ceil(ENTRIES_PER_PAGE as usize) {
            let mut bytes = [0u8; PAGE_BYTES];
            if let Some(s) = area.get(page * PAGE_BYTES..) {
                let n = s.len().min(PAGE_BYTES);
                bytes[..n].copy_from_slice(&s[..n]);
            }
            out.extend(decode_page(&bytes, page as u64).expect("valid page"));
        }
        out.truncate(blocks);
        out
    };
    let table = |array: &SimArray, m: usize| -> Vec<u32> {
        let t = array
            .engine
            .checksum_table(MemberIdx(m as u16))
            .expect("table");
        (0..t.blocks()).map(|b| t.get(b)).collect()
    };
    // The fill's flush was a client's: nothing written yet (the area reads as zeros).
    assert!(array.members[0].checksums.is_empty());
    assert!(array.engine.checksum_pages_dirty() > 0);
    array.checkpoint().expect("checkpoint");
    assert_eq!(array.engine.checksum_pages_dirty(), 0);
    for m in 0..4 {
        assert_eq!(stored(&array, m), table(&array, m), "member {m}");
    }
}

/// A checksum-table page is never written twice at once on a member: two writes of it
/// in flight may land in either order, and the older landing last leaves the member's
/// table stale, so that after a crash its good blocks fail their checksums (found by
/// the fault stories, seed 2274648606167995363). Writes and checkpoints in quick
/// succession, stepping one member I/O at a time, never have two.
#[test]
fn a_table_page_is_never_written_twice_at_once() {
    let mut both_out = 0;
    for seed in 0..16 {
        let geo = geometry(Level::Raid5, 4);
        let mut array = SimArray::new(geo, 100 + seed);
        array.enable_integrity();
        let sectors = geo.array_sectors();
        let mut checkpoints_out = 0;
        for round in 0..200 {
            let at = array.rng().below(sectors / 8) * 8;
            let mut data = vec![0u8; 8 * SECTOR];
            array.rng().fill(&mut data);
            array.start_write(at, &data);
            if round % 4 == 0 {
                array.start_checkpoint();
                checkpoints_out += 1;
            }
            let steps = array.rng().below(8);
            for _ in 0..steps {
                array.step();
                let pages: Vec<(MemberIdx, u64, u64)> = array
                    .in_flight()
                    .filter(|io| io.area == xraid_engine::Area::Checksums)
                    .map(|io| (io.member, io.sector, io.sector + io.buf.len as u64 / 512))
                    .collect();
                both_out += usize::from(pages.len() > 1);
                for (i, a) in pages.iter().enumerate() {
                    for b in &pages[i + 1..] {
                        assert!(
                            a.0 != b.0 || a.2 <= b.1 || b.2 <= a.1,
                            "seed {seed}: table writes {a:?} and {b:?} in flight at once"
                        );
                    }
                }
            }
        }
        assert!(checkpoints_out > 0);
        array.run();
    }
    // The check saw table writes in flight side by side (of other pages or members).
    assert!(both_out > 0);
}

#[test]
fn a_partial_write_leaves_its_blocks_unknown_until_read() {
    let (mut array, _) = filled(Level::Raid1, 2);
    let table = array
        .engine
        .checksum_table(MemberIdx(0))
        .expect("table")
        .clone();
    assert_ne!(table.get(2), UNKNOWN);
    // Sectors 17..19: inside block 2.
    array.write(17, &[1u8; 2 * SECTOR]).expect("write");
    assert_eq!(table.get(2), UNKNOWN);
    array.read(16, 8).expect("read");
    assert_ne!(table.get(2), UNKNOWN, "learned from what was read");
}

#[test]
fn after_a_crash_only_dirty_chunks_are_forgotten() {
    let geo = geometry(Level::Raid5, 4);
    let mut array = SimArray::new(geo, 9);
    array.enable_integrity();
    let chunks = geo.member_sectors().div_ceil(64);
    let bytes = (INTENT_HEADER_BYTES as u64 + chunks.div_ceil(8)).next_multiple_of(512) as usize;
    let setup = |image: Vec<u8>, rewrite: bool| WriteIntentSetup {
        image,
        chunks,
        chunk_sectors: 64,
        block_bytes: 512,
        clear_after: Nanos(1_000_000_000),
        rewrite,
    };
    array
        .engine
        .enable_write_intent(setup(vec![0; bytes], true));
    array.engine.allow_write_intent_clears(true);
    let mut data = vec![0u8; geo.array_sectors() as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    array.flush().expect("flush");
    array.pass_time(Nanos(2_000_000_000));
    // One more write: stripe 1 (member sectors 16..32, bitmap chunk 0) is dirty.
    array.write(48, &[3u8; 8 * SECTOR]).expect("write");
    array.power_cut_with(|a| {
        let image = a.members[0].bitmap.clone();
        a.engine.enable_write_intent(setup(image, false));
    });
    let t = array
        .engine
        .checksum_table(MemberIdx(1))
        .expect("table")
        .clone();
    // Chunk 0 (member sectors 0..64, blocks 0..8) forgotten; the rest known.
    assert!((0..8).all(|b| t.get(b) == UNKNOWN));
    assert!((8..t.blocks()).all(|b| t.get(b) != UNKNOWN));
}

/// A RAID-6 with a member being rebuilt (not readable yet) reads that member's chunk
/// from the others; a flipped bit on one of those is a second fault in the stripe,
/// which Q answers for.
#[test]
fn a_flipped_bit_beside_a_member_being_rebuilt_is_worked_around() {
    for flipped in [0u16, 2, 5, 6] {
        let (mut array, data) = filled(Level::Raid6, 7);
        array.kill_member(MemberIdx(3));
        array.engine.fail_member(MemberIdx(3));
        array.return_member(MemberIdx(3), false).expect("return");
        array
            .engine
            .start_sync(xraid_engine::SyncKind::Recover, 0)
            .expect("recover");
        // Member 3 is rebuilding from unit 0: nothing of it is trusted yet.
        array.flip_bit(MemberIdx(flipped), 16 * 512 + 700, 3);
        let total = array.engine.array_sectors();
        let got = array.read(0, total).expect("read");
        assert!(
            got == data,
            "flipped on member {flipped}: the read is right"
        );
    }
}

/// Every known entry of every member's table equals the hash of the block the member
/// holds, but for `skip` (member, block) pairs; returns the entries compared.
fn tables_agree_with_the_blocks(array: &SimArray, skip: &[(usize, usize)], what: &str) -> usize {
    let mut compared = 0;
    for (m, member) in array.members.iter().enumerate() {
        let table = array
            .engine
            .checksum_table(MemberIdx(m as u16))
            .expect("a table per member");
        for (b, block) in member.data.chunks_exact(BLOCK_BYTES).enumerate() {
            let entry = table.get(b as u64);
            if entry == UNKNOWN || skip.contains(&(m, b)) {
                continue;
            }
            assert_eq!(
                entry,
                xraid_format::block_entry(block),
                "{what}: member {m} block {b}"
            );
            compared += 1;
        }
    }
    compared
}

/// P's checksums on RAID-4/5/6 writes are worked out from the data blocks' (linear
/// over xor) rather than hashed: for full stripes, reconstruct-writes and
/// read-modify-writes they must equal the hash of the block P's member then holds —
/// also where a data block the write did not read has a flipped bit (P is computed
/// from its old self there, not from that block) — and writes of part of a block
/// leave P's blocks to be hashed (or unknown).
#[test]
fn parity_checksums_worked_out_from_the_data_match_the_blocks_written() {
    // Members enough that a write of one block reads less by read-modify-write.
    for (level, disks) in [(Level::Raid4, 6), (Level::Raid5, 6), (Level::Raid6, 7)] {
        let (mut array, _) = filled(level, disks);
        let what = format!("{level:?}");
        let rmw_before = array.engine.stats().rmw;
        let after_fill = array.engine.stats().parity_checksums_derived;
        assert!(after_fill > 0, "{what}: the fill's full stripes");
        tables_agree_with_the_blocks(&array, &[], &what);
        let geo = *array.engine.geometry();
        let per_stripe = geo.stripe_data_sectors();
        // A data block of stripe 3 that no write below reads: its second chunk's.
        let map = geo.stripe_map(3);
        let flipped = map.data_member(1);
        let flipped_block = (3 * 16 / 8) as usize;
        array.flip_bit(flipped, 3 * 16 * SECTOR + 100, 2);
        let mut rng = xraid_engine::sim::SimRng::new(99);
        let mut writes = 0;
        for (sector, sectors) in [
            (3 * per_stripe, 8),              // one block: read-modify-write
            (3 * per_stripe + 16, 8),         // over the flipped chunk's block
            (5 * per_stripe, per_stripe - 8), // most of a stripe: reconstruct-write
            (6 * per_stripe, per_stripe),     // a full stripe
            (7 * per_stripe + 3, 2),          // part of a block
            (8 * per_stripe + 8, 3 * 8),      // blocks across two chunks
        ] {
            if sector + sectors > geo.array_sectors() {
                continue;
            }
            let mut data = vec![0u8; sectors as usize * SECTOR];
            rng.fill(&mut data);
            let _ = array.write(sector, &data);
            writes += 1;
            let skip = [(flipped.index(), flipped_block)];
            tables_agree_with_the_blocks(&array, &skip, &format!("{what}, write at {sector}"));
        }
        assert!(writes >= 5, "{what}");
        assert!(
            array.engine.stats().rmw > rmw_before,
            "{what}: a read-modify-write"
        );
        assert!(
            array.engine.stats().parity_checksums_derived > after_fill,
            "{what}: the writes after the fill"
        );
        // Everything reads back through the checks, and a check scrub finds P right.
        let total = geo.array_sectors();
        array.read(0, total).expect("read");
        let found = check_mismatches(&mut array);
        assert!(
            found.iter().all(|&(m, _)| m == flipped),
            "{what}: checksum mismatches only on the flipped member: {found:?}"
        );
    }
}
