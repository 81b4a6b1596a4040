//! The stripe log's batches: stripe writes that become ready to log while a batch is
//! on its way to their parity member (or at the same moment) share one ring write and
//! one flush, and a power cut after that flush and before the stripe writes land has
//! every entry of the batch replayed.

mod common;
use common::{logged_array, SECTOR};

use xraid_engine::sim::{SimArray, SimMemberHealth};
use xraid_engine::{Area, Event, IoKind, MemberIdx, MemberState, Stats, SyncKind};
use xraid_layout::{Geometry, Level};

/// A 4-member RAID-5 of 16 stripes of 16-sector chunks (48 data sectors a stripe),
/// logging, filled with random data and flushed.
fn logged_raid5(seed: u64) -> (SimArray, Vec<u8>) {
    logged_raid5_of(4, seed)
}

/// [`logged_raid5`] with `disks` members.
fn logged_raid5_of(disks: u16, seed: u64) -> (SimArray, Vec<u8>) {
    logged_array(Level::Raid5, disks, seed)
}

/// Runs a check over the whole array and returns the units it found mismatched.
fn check_mismatches(array: &mut SimArray) -> u64 {
    array.take_events();
    array.engine.start_sync(SyncKind::Check, 0).expect("check");
    array.run_sync();
    array
        .take_events()
        .into_iter()
        .find_map(|e| match e {
            Event::SyncFinished {
                kind: SyncKind::Check,
                mismatches,
                ..
            } => Some(mismatches),
            _ => None,
        })
        .expect("the check ran")
}

/// [`logged_raid5`] with a write to chunk 1 of stripe 0 cut off by the power, and the
/// ring of stripe 0's parity member (returned), which holds the write's entry, failing
/// to read at the restart; the replay has not run yet.
fn cut_with_an_unreadable_ring(seed: u64) -> (SimArray, MemberIdx) {
    let (mut array, _) = logged_raid5(seed);
    let p = array.engine.geometry().stripe_map(0).p();
    array.write(16, &vec![0x6bu8; 16 * SECTOR]).expect("write");
    array.power_cut_with(|array| array.members[p.index()].ring_unreadable = true);
    (array, p)
}

fn delta(after: Stats, before: Stats) -> (u64, u64, u64) {
    (
        after.member_flushes - before.member_flushes,
        after.log_writes - before.log_writes,
        after.log_entries - before.log_entries,
    )
}

/// One request over all 16 stripes: 16 entries ready at once, 4 per parity member —
/// one ring write and one flush per member, not one per stripe (and no flush where the
/// ring write is a durable one).
#[test]
fn entries_ready_at_once_share_a_write_and_a_flush_per_member() {
    for seed in [0, 1] {
        let (mut array, _) = logged_raid5(seed);
        let fua = array.engine.config().fua_writes;
        let before = array.engine.stats();
        let mut new = vec![0u8; 16 * 48 * SECTOR];
        array.rng().fill(&mut new);
        array.write(0, &new).expect("write");
        let (flushes, writes, entries) = delta(array.engine.stats(), before);
        assert_eq!(entries, 16, "every stripe write logged");
        assert_eq!(writes, 4, "one ring write per parity member");
        assert_eq!(
            flushes,
            if fua { 0 } else { 4 },
            "one log flush per parity member, not one per stripe (fua: {fua})"
        );
        assert_eq!(array.read(0, 16 * 48).expect("read"), new);
    }
}

/// Writes to four stripes with the same parity member, arriving one by one: the first
/// goes alone, the three that arrive while its entry is on its way share the next
/// batch.
#[test]
fn entries_ready_while_a_batch_is_in_flight_share_the_next() {
    let (mut array, _) = logged_raid5(2);
    let geo = *array.engine.geometry();
    let parity = geo.stripe_map(0).p();
    let stripes: Vec<u64> = (0..16)
        .filter(|&s| geo.stripe_map(s).p() == parity)
        .collect();
    assert_eq!(stripes.len(), 4);
    let before = array.engine.stats();
    let mut writes = Vec::new();
    for &s in &stripes {
        let mut new = vec![0u8; 48 * SECTOR];
        array.rng().fill(&mut new);
        array.start_write(s * 48, &new);
        writes.push((s, new));
    }
    let replies = array.run();
    assert_eq!(replies.len(), 4);
    assert!(replies.iter().all(|r| r.result.is_ok()));
    let (flushes, ring_writes, entries) = delta(array.engine.stats(), before);
    assert_eq!(entries, 4);
    assert_eq!(
        ring_writes, 2,
        "the first alone, then the other three together"
    );
    assert_eq!(flushes, 2, "fewer log flushes than stripe writes");
    for (s, new) in writes {
        assert_eq!(array.read(s * 48, 48).expect("read"), new);
    }
}

/// A degraded RAID-5 takes a write over every stripe; power fails once every batch is
/// flushed, with some of the stripe writes landed and the rest lost. The replay finds
/// every entry (each batch carried several), and the missing member's chunks — which
/// only the log holds — read back as written, whatever landed elsewhere.
#[test]
fn a_power_cut_after_a_shared_log_flush_replays_every_entry_of_it() {
    for seed in 0..32 {
        let (mut array, old) = logged_raid5(100 + seed);
        let geo = *array.engine.geometry();
        let missing = MemberIdx(1);
        array.kill_member(missing);
        array.engine.fail_member(missing);
        let before = array.engine.stats();
        let mut new = vec![0u8; 16 * 48 * SECTOR];
        array.rng().fill(&mut new);
        array.start_write(0, &new);
        // Until every batch is written and flushed (stripe writes may land meanwhile).
        while array
            .in_flight()
            .any(|io| io.area == Area::Log || io.kind == IoKind::Flush)
        {
            assert!(array.step());
        }
        // Stripes whose P is the missing member have no parity to log for.
        let logged = (0..16)
            .filter(|&s| geo.stripe_map(s).p() != missing)
            .count() as u64;
        let (flushes, ring_writes, entries) = delta(array.engine.stats(), before);
        assert_eq!(entries, logged, "seed {seed}");
        assert_eq!(ring_writes, 3, "seed {seed}: one per present member");
        let fua = array.engine.config().fua_writes;
        assert_eq!(
            flushes,
            if fua { 0 } else { 3 },
            "seed {seed}: one per present member, none after durable writes"
        );
        let landing = array.rng().below(30);
        for _ in 0..landing {
            array.step();
        }
        array.power_cut_now();
        array.run();
        let replayed = array.take_events().into_iter().find_map(|e| match e {
            Event::LogRecovered { replayed, .. } => Some(replayed),
            _ => None,
        });
        assert_eq!(replayed, Some(logged), "seed {seed}: every entry replayed");
        let got = array.read(0, 16 * 48).expect("read");
        for stripe in 0..16u64 {
            let map = geo.stripe_map(stripe);
            for i in 0..map.data_disks() {
                let at = (stripe as usize * 48 + usize::from(i) * 16) * SECTOR;
                let chunk = &got[at..at + 16 * SECTOR];
                if map.data_member(i) == missing {
                    assert_eq!(
                        chunk,
                        &new[at..at + 16 * SECTOR],
                        "seed {seed}: stripe {stripe}: the missing member's chunk"
                    );
                } else {
                    assert!(
                        chunk == &new[at..at + 16 * SECTOR] || chunk == &old[at..at + 16 * SECTOR],
                        "seed {seed}: stripe {stripe} chunk {i}: old or new"
                    );
                }
            }
        }
    }
}

/// A stripe write whose read of the parity member fails (a bad range there) still logs
/// its entry, to that member's ring: it rewrites the parity rows all the same, and a
/// crash in the middle would otherwise tear the stripe with nothing to replay.
#[test]
fn a_write_whose_parity_read_fails_is_still_logged() {
    // Six members: a one-chunk write reads old data and parity (2 reads) rather than
    // the four other data chunks.
    let (mut array, _) = logged_raid5_of(6, 5);
    let geo = *array.engine.geometry();
    let parity = geo.stripe_map(0).p();
    // Rows 4..12 of stripe 0's parity chunk cannot be read.
    array.add_bad_range(parity, 4..12);
    let before = array.engine.stats();
    let mut new = vec![0u8; 8 * SECTOR];
    array.rng().fill(&mut new);
    // Rows 2..10 of stripe 0's first data chunk: a read-modify-write needing old parity.
    array.write(2, &new).expect("write");
    let (_, _, entries) = delta(array.engine.stats(), before);
    assert_eq!(entries, 1, "the write went to the members with a log entry");
    assert_eq!(array.read(2, 8).expect("read"), new);
}

/// A replacement takes its role over only once the stripe writes logged to the role's
/// ring are durable: the entries stay on the device they were written to, so a power
/// cut right after the takeover would otherwise find a torn stripe and nothing to
/// replay. Here a write to a stripe whose parity the replaced role holds starts as the
/// replacement's copy issues its last unit.
#[test]
fn a_replacement_takes_over_only_once_the_writes_logged_on_its_ring_are_durable() {
    let stripe_bytes = 16 * SECTOR;
    for seed in 0..32 {
        let (mut array, old) = logged_raid5(300 + seed);
        let geo = *array.engine.geometry();
        let role = geo.stripe_map(0).p();
        let old_slot = array.engine.device_slot(role);
        array.start_replacement(role).expect("replace");
        // Until the copy's last unit (a stripe) is under way.
        recover_until(&mut array, seed, geo.stripes() - 1);
        let mut new = vec![0u8; 48 * SECTOR];
        array.rng().fill(&mut new);
        array.start_write(0, &new);
        // Up to the takeover (the recover may wait for the write; it may also have
        // taken over before the write was logged).
        while array.engine.device_slot(role) == old_slot {
            assert!(array.step(), "seed {seed}: the replacement takes over");
        }
        // Nothing of stripe 0 is in flight or only cached on any device: the write was
        // logged to the old ring and made durable before the takeover, or it waited
        // and logs to the new ring after it (its member writes not yet sent).
        let stripe0_out = array
            .in_flight()
            .any(|io| io.area == Area::Data && io.kind == IoKind::Write && io.sector < 16)
            || (0..2 * geo.raid_disks()).any(|m| {
                array
                    .slot(MemberIdx(m))
                    .unflushed_in(Area::Data, 0..stripe_bytes)
            });
        assert!(
            !stripe0_out,
            "seed {seed}: stripe 0's write is not durable at the takeover"
        );
        array.power_cut_now();
        array.run();
        array.engine.start_sync(SyncKind::Check, 0).expect("check");
        array.run_sync();
        let mismatches = array.take_events().into_iter().find_map(|e| match e {
            Event::SyncFinished {
                kind: SyncKind::Check,
                mismatches,
                ..
            } => Some(mismatches),
            _ => None,
        });
        assert_eq!(
            mismatches,
            Some(0),
            "seed {seed}: parity agrees after the cut"
        );
        let got = array.read(0, 48).expect("read");
        for i in 0..3 {
            let at = i * stripe_bytes;
            let chunk = &got[at..at + stripe_bytes];
            assert!(
                chunk == &new[at..at + stripe_bytes] || chunk == &old[at..at + stripe_bytes],
                "seed {seed}: chunk {i} is old or new"
            );
        }
    }
}

/// [`logged_raid5`] with member 1 replaced by a blank one and its recover run (about a
/// stripe a millisecond) past stripe 12 of 16; the data as before.
fn rebuilding_past_stripe_12(seed: u64) -> (SimArray, Vec<u8>) {
    let (mut array, old) = logged_raid5(seed);
    let rebuilt = MemberIdx(1);
    array.kill_member(rebuilt);
    array.engine.fail_member(rebuilt);
    array.return_member(rebuilt, true).expect("a blank member");
    let mut config = array.engine.config();
    config.sync_min_bytes_per_sec = 8 * 1024 * 1000;
    config.sync_max_bytes_per_sec = 8 * 1024 * 1000;
    array.engine.set_config(config);
    recover_until(&mut array, seed, 12);
    (array, old)
}

/// Starts a recover and runs the array until it is done below unit `unit`.
fn recover_until(array: &mut SimArray, seed: u64, unit: u64) {
    array
        .engine
        .start_sync(SyncKind::Recover, 0)
        .expect("recover");
    assert!(
        array.run_sync_until(unit),
        "seed {seed}: the recover goes on"
    );
}

/// Writes `new` over stripes 0..8 and runs until every log batch is written and
/// flushed, then up to 20 steps more (some stripe writes land): where a power cut goes.
fn write_stripes_0_to_8_until_logged(array: &mut SimArray, new: &[u8]) {
    let before = array.engine.stats().log_entries;
    array.start_write(0, new);
    while array
        .in_flight()
        .any(|io| io.area == Area::Log || (io.kind == IoKind::Flush && io.area == Area::Data))
    {
        assert!(array.step());
    }
    assert!(
        array.engine.stats().log_entries > before,
        "the writes are logged"
    );
    let landing = array.rng().below(20);
    for _ in 0..landing {
        array.step();
    }
}

/// Every data chunk of the stripes `got` covers (from stripe 0) is as in `old` or as in
/// `new`, never torn.
fn chunks_old_or_new(seed: u64, geo: &Geometry, got: &[u8], old: &[u8], new: &[u8]) {
    for stripe in 0..(got.len() / (48 * SECTOR)) as u64 {
        let map = geo.stripe_map(stripe);
        for i in 0..map.data_disks() {
            let at = (stripe as usize * 48 + usize::from(i) * 16) * SECTOR;
            let chunk = &got[at..at + 16 * SECTOR];
            assert!(
                chunk == &new[at..at + 16 * SECTOR] || chunk == &old[at..at + 16 * SECTOR],
                "seed {seed}: stripe {stripe} chunk {i} (member {:?}) is neither old nor new",
                map.data_member(i)
            );
        }
    }
}

/// While a member is being rebuilt, a write over a stripe the recover has already
/// rebuilt keeps that member's rows in its entry until the driver says the superblocks
/// record the progress (`Engine::set_recovery_recorded`): after a crash the member
/// counts as rebuilt only up to the record, and the replay could not read its rows
/// from it. Here power fails once the entries are flushed, with some of the stripe
/// writes landed; the restart leaves the member out, and its chunks — rebuilt from
/// parity — must read back as written or as before, never torn.
#[test]
fn a_write_over_a_stripe_rebuilt_but_not_recorded_logs_the_rebuilt_members_rows() {
    for seed in 0..32 {
        let (mut array, old) = rebuilding_past_stripe_12(400 + seed);
        let geo = *array.engine.geometry();
        // Stripes 0..8, all rebuilt: every chunk written, member 1's too.
        let mut new = vec![0u8; 8 * 48 * SECTOR];
        array.rng().fill(&mut new);
        write_stripes_0_to_8_until_logged(&mut array, &new);
        array.power_cut_now();
        array.run();
        let got = array.read(0, 8 * 48).expect("read");
        chunks_old_or_new(seed, &geo, &got, &old, &new);
    }
}

/// After a crash, a member being rebuilt holds what the superblocks record it rebuilt:
/// the replay reads its rows there (entries written while it was in sync carry none),
/// rather than skipping those entries and leaving their stripes' parity torn. Here a
/// write over rebuilt and recorded stripes is cut by a power failure; once the recover
/// has gone on to its end another member fails, and what it held — rebuilt from
/// parity — must read back as written or as before.
#[test]
fn the_replay_reads_a_rebuilding_member_below_its_recorded_progress() {
    for seed in 0..32 {
        let (mut array, old) = rebuilding_past_stripe_12(500 + seed);
        let geo = *array.engine.geometry();
        // A checkpoint, as the server takes it: a flush, then the record.
        let done = array.engine.sync_progress().expect("recover").done_below;
        array.flush().expect("flush");
        array.engine.set_recovery_recorded(done);
        let mut new = vec![0u8; 8 * 48 * SECTOR];
        array.rng().fill(&mut new);
        write_stripes_0_to_8_until_logged(&mut array, &new);
        array.power_cut_now_resuming();
        array.run();
        // The recover goes on from the record and ends; stripes 0..8 keep the parity
        // the replay left. Then member 0 fails: its chunks come from that parity.
        array.run_sync();
        assert!(array.engine.is_whole(), "seed {seed}: rebuilt");
        array.engine.fail_member(MemberIdx(0));
        let got = array.read(0, 8 * 48).expect("read");
        chunks_old_or_new(seed, &geo, &got, &old, &new);
    }
}

/// Writes land everywhere but are not flushed; then a member dies, and the engine
/// learns of it from a read. The entries of those writes do not carry that member's
/// rows, so until they are durable a power cut could tear a stripe that the replay
/// cannot put right — and the member's chunks, never written, would be rebuilt wrong.
/// The engine makes them durable at once (`departures_durable`), not at the next
/// client flush: a power cut after that brings back every chunk of the dead member
/// as it was, whatever the cut kept of the other members' unflushed writes.
#[test]
fn writes_logged_before_a_member_died_are_made_durable_at_once() {
    for seed in 0..32 {
        let (mut array, old) = logged_raid5(700 + seed);
        let geo = *array.engine.geometry();
        let mut new = vec![0u8; 16 * 48 * SECTOR];
        array.rng().fill(&mut new);
        // Every stripe written in part: chunk 0 of each (the dead member's chunks, where
        // it holds data, are not written).
        let mut expected = old.clone();
        for stripe in 0..16u64 {
            let at = stripe * 48;
            let bytes = &new[at as usize * SECTOR..(at as usize + 16) * SECTOR];
            array.write(at, bytes).expect("write");
            expected[at as usize * SECTOR..(at as usize + 16) * SECTOR].copy_from_slice(bytes);
        }
        let dead = MemberIdx(1 + (seed % 3) as u16);
        array.kill_member(dead);
        // A read of everything trips over the dead member.
        array.read(0, geo.array_sectors()).expect("degraded read");
        array.run();
        assert!(
            array.engine.departures_durable(),
            "seed {seed}: the writes logged before it died are durable"
        );
        array.power_cut();
        let got = array
            .read(0, geo.array_sectors())
            .expect("read after the cut");
        chunks_old_or_new(seed, &geo, &got, &old, &expected);
    }
}

/// Sectors `from..to` of `got` are as in `want`.
fn same(seed: u64, what: &str, got: &[u8], want: &[u8], from: usize, to: usize) -> bool {
    let ok = got[from * SECTOR..to * SECTOR] == want[from * SECTOR..to * SECTOR];
    if !ok {
        eprintln!("seed {seed}: {what} (array sectors {from}..{to}) came back wrong");
    }
    ok
}

/// Writes `writes` (array sector, sectors) of random data to `array`, which holds
/// `old`, without a flush; cuts the power (each member keeps or loses its unflushed
/// writes at random) and takes the members `dead` with it. Returns the new data and
/// what the array reads after the replay.
fn write_and_cut(
    array: &mut SimArray,
    old: &[u8],
    writes: &[(u64, u64)],
    dead: &[MemberIdx],
) -> (Vec<u8>, Vec<u8>) {
    let mut new = old.to_vec();
    for &(at, sectors) in writes {
        let mut bytes = vec![0u8; sectors as usize * SECTOR];
        array.rng().fill(&mut bytes);
        array.write(at, &bytes).expect("write");
        new[at as usize * SECTOR..(at + sectors) as usize * SECTOR].copy_from_slice(&bytes);
    }
    array.power_cut_with(|a| {
        for &m in dead {
            a.kill_member(m);
            a.engine.fail_member(m);
        }
    });
    let sectors = array.engine.geometry().array_sectors();
    let got = array.read(0, sectors).expect("read with members gone");
    (new, got)
}

/// Writes `writes` (array sector, sectors) of new data to a logged RAID-5 without a
/// flush, cuts the power (each member keeps or loses its unflushed writes at random)
/// and takes member 1 with it: the restart finds it gone. Returns the old data, the
/// new, and what the array reads after the replay; the stats tell how the replay went.
fn cut_with_member_1_dying(seed: u64, writes: &[(u64, u64)]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let (mut array, old) = logged_raid5(seed);
    let (new, got) = write_and_cut(&mut array, &old, writes, &[MemberIdx(1)]);
    let stats = array.engine.stats();
    assert_eq!(
        stats.log_entries_skipped, 0,
        "seed {seed}: every entry replayed"
    );
    assert!(
        stats.log_partial_parity_replays > 0,
        "seed {seed}: the partial parity was used"
    );
    (old, new, got)
}

/// The write hole with a member that dies with the power (md's PPL case): a write to
/// chunk 0 of stripe 0 is cut off, and member 1, which holds chunk 1 and which nobody
/// wrote, does not come back. Its chunk is worked out from the entry's partial parity,
/// not from parity the cut may have torn (before 2026-11-24 the replay left such a
/// stripe as it was, and chunk 1 came back wrong in some seeds).
#[test]
fn a_member_that_dies_with_the_power_gets_its_untouched_rows_back_from_the_partial_parity() {
    let mut wrong = 0;
    for seed in 0..64 {
        // Stripe 0: chunk 0 (array sectors 0..16) on member 0, chunk 1 on member 1.
        let (old, new, got) = cut_with_member_1_dying(900 + seed, &[(0, 8)]);
        wrong += usize::from(!same(seed, "chunk 1", &got, &old, 16, 48));
        // The written rows: as before or as written, not torn.
        let chunk0 = &got[..8 * SECTOR];
        assert!(chunk0 == &old[..8 * SECTOR] || chunk0 == &new[..8 * SECTOR]);
        wrong += usize::from(!same(seed, "the rest", &got, &old, 48, old.len() / SECTOR));
    }
    assert_eq!(wrong, 0);
}

/// md's PPL flaw, closed: two writes to stripe 0 not yet durable, one to chunk 0 and
/// then one to chunk 2, over the same rows. The cut may lose the first on member 0 and
/// keep the second. The second's partial parity counts chunk 0 as the first left it,
/// so its entry carries chunk 0's rows too (and the replay writes them back); member 1
/// dies with the power, and its chunk 1 comes back as it was.
#[test]
fn an_earlier_write_lost_under_a_later_one_does_not_break_the_partial_parity() {
    let mut wrong = 0;
    for seed in 0..64 {
        // Chunk 0: array sectors 0..16; chunk 2: 32..48.
        let (old, new, got) = cut_with_member_1_dying(1000 + seed, &[(0, 8), (32, 8)]);
        wrong += usize::from(!same(seed, "chunk 1", &got, &old, 16, 32));
        for at in [0usize, 32] {
            let rows = &got[at * SECTOR..(at + 8) * SECTOR];
            let as_before = rows == &old[at * SECTOR..(at + 8) * SECTOR];
            let as_written = rows == &new[at * SECTOR..(at + 8) * SECTOR];
            wrong += usize::from(!as_before && !as_written);
        }
    }
    assert_eq!(wrong, 0);
}

/// A write that covers part of the member that dies with the power: its rows there are
/// unknown (the write may or may not have reached it) and parity is left as it is
/// there, but the rest of the member's chunk in the write's rows — which nobody wrote
/// — comes back as it was. The write covers chunk 0's rows 8..16 and chunk 1's rows
/// 0..8 (array sectors 8..24), so its rows are 0..16 and chunk 1's rows 8..16 are in
/// them untouched.
#[test]
fn the_untouched_rows_of_a_member_the_write_covered_in_part_come_back() {
    let mut wrong = 0;
    for seed in 0..64 {
        let (old, _, got) = cut_with_member_1_dying(1100 + seed, &[(8, 16)]);
        wrong += usize::from(!same(seed, "chunk 0's rows 0..8", &got, &old, 0, 8));
        wrong += usize::from(!same(seed, "chunk 1's rows 8..16", &got, &old, 24, 32));
        wrong += usize::from(!same(seed, "chunk 2", &got, &old, 32, 48));
    }
    assert_eq!(wrong, 0);
}

/// On a wide array, a write whose entry would carry too many earlier writes' rows (more
/// than the ring's bound for one entry) waits for those writes to be durable instead:
/// here an 8-member RAID-5 takes writes to five whole chunks of stripe 0, one after
/// another with no flush, then one to a sixth, and chunk 6's member dies with the
/// power. Its chunk comes back as it was. (Without the wait it does not.)
#[test]
fn a_wide_write_waits_for_earlier_writes_instead_of_carrying_them() {
    for seed in 0..32 {
        let (mut array, old) = logged_raid5_of(8, 1200 + seed);
        let geo = *array.engine.geometry();
        let mut new = old.clone();
        let before = array.engine.stats();
        for chunk in 0..6u64 {
            let mut bytes = vec![0u8; 16 * SECTOR];
            array.rng().fill(&mut bytes);
            let at = chunk * 16;
            array.write(at, &bytes).expect("write");
            new[at as usize * SECTOR..(at as usize + 16) * SECTOR].copy_from_slice(&bytes);
        }
        let flushes = array.engine.stats().member_flushes - before.member_flushes;
        let map = geo.stripe_map(0);
        let dying = map.data_member(6);
        array.power_cut_with(|a| {
            a.kill_member(dying);
            a.engine.fail_member(dying);
        });
        let got = array.read(0, geo.array_sectors()).expect("degraded read");
        assert!(
            flushes >= 6 + 8,
            "seed {seed}: a checkpoint (a flush of every member) made earlier writes durable ({flushes} flushes)"
        );
        let chunk6 = 6 * 16 * SECTOR..7 * 16 * SECTOR;
        assert!(
            got[chunk6.clone()] == old[chunk6],
            "seed {seed}: chunk 6, which nobody wrote, came back wrong"
        );
        chunks_old_or_new_in(seed, &geo, &got, &old, &new, 7);
    }
}

/// [`chunks_old_or_new`] for an array of `data_disks` data chunks a stripe.
fn chunks_old_or_new_in(
    seed: u64,
    geo: &Geometry,
    got: &[u8],
    old: &[u8],
    new: &[u8],
    data_disks: usize,
) {
    let per = data_disks * 16 * SECTOR;
    for (k, chunk) in got.chunks(16 * SECTOR).enumerate() {
        let at = k * 16 * SECTOR;
        assert!(
            chunk == &new[at..at + 16 * SECTOR] || chunk == &old[at..at + 16 * SECTOR],
            "seed {seed}: stripe {} chunk {} is neither old nor new ({:?})",
            at / per,
            k % data_disks,
            geo.level()
        );
    }
}

/// A RAID-6 missing a data member logs the member's rows for every write to a stripe
/// it is in, and the entry goes to both parity members' rings: here stripe 0's P
/// member dies with the power after a write to another chunk, and the missing member's
/// chunk — rebuilt from Q, which the cut may have torn, with the rows the entry on Q's
/// ring carries — comes back as it was. (With the entry on P's ring only, it did not.)
#[test]
fn a_raid6_missing_a_member_keeps_its_rows_when_p_dies_with_the_power() {
    let mut wrong = 0;
    for seed in 0..64 {
        let (mut array, old) = logged_array(Level::Raid6, 5, 1300 + seed);
        let geo = *array.engine.geometry();
        let map = geo.stripe_map(0);
        let (missing, p) = (map.data_member(1), map.p());
        array.kill_member(missing);
        array.engine.fail_member(missing);
        let mut new = vec![0u8; 8 * SECTOR];
        array.rng().fill(&mut new);
        array.write(0, &new).expect("degraded write");
        array.power_cut_with(|a| {
            a.kill_member(p);
            a.engine.fail_member(p);
        });
        // Stripe 0 holds array sectors 0..48: chunk 1 (the missing member's) is 16..32.
        let got = array.read(16, 16).expect("read the missing member's chunk");
        if got != old[16 * SECTOR..32 * SECTOR] {
            wrong += 1;
        }
    }
    assert_eq!(wrong, 0);
}

/// Writes `writes` (array sector, sectors) of new data to a logged 6-member RAID-6
/// (stripe 0: chunks 0..4 at array sectors 0..64) without a flush, cuts the power and
/// takes the members `dying` names in stripe 0 with it. Returns the old data, the new,
/// and what the array reads after the replay.
fn cut_raid6_with_two_dying(
    seed: u64,
    writes: &[(u64, u64)],
    dying: impl Fn(&xraid_layout::StripeMap) -> [MemberIdx; 2],
) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let (mut array, old) = logged_array(Level::Raid6, 6, seed);
    let dead = dying(&array.engine.geometry().stripe_map(0));
    let (new, got) = write_and_cut(&mut array, &old, writes, &dead);
    assert_eq!(
        array.engine.stats().log_entries_skipped,
        0,
        "seed {seed}: every entry replayed"
    );
    (old, new, got)
}

/// Two data members of a whole RAID-6 die with the power while a write to another
/// chunk of their stripe is cut off: both chunks come back as they were, from the
/// entry's partial parity and partial Q. (With the partial parity alone the replay
/// cannot work them out: 43 of 64 seeds brought them back wrong.)
#[test]
fn two_members_that_die_with_the_power_come_back_from_the_partial_p_and_q() {
    let mut wrong = 0;
    for seed in 0..64 {
        let (old, new, got) = cut_raid6_with_two_dying(1400 + seed, &[(0, 8)], |map| {
            [map.data_member(1), map.data_member(2)]
        });
        wrong += usize::from(!same(seed, "chunks 1 and 2", &got, &old, 16, 48));
        let chunk0 = &got[..8 * SECTOR];
        assert!(chunk0 == &old[..8 * SECTOR] || chunk0 == &new[..8 * SECTOR]);
        wrong += usize::from(!same(seed, "the rest", &got, &old, 48, old.len() / SECTOR));
    }
    assert_eq!(wrong, 0);
}

/// P's member and a data member die with the power: P's ring is gone with it, and the
/// entry on Q's ring brings the data member's chunk back. (With entries on P's ring
/// only, 30 of 64 seeds brought it back wrong.)
#[test]
fn a_member_that_dies_with_p_comes_back_from_the_entry_on_qs_ring() {
    let mut wrong = 0;
    for seed in 0..64 {
        let (old, _, got) =
            cut_raid6_with_two_dying(1500 + seed, &[(0, 8)], |map| [map.p(), map.data_member(3)]);
        wrong += usize::from(!same(seed, "chunk 3", &got, &old, 48, 64));
    }
    assert_eq!(wrong, 0);
}

/// The member the write covered dies with another: the other's chunk comes back
/// exactly (partial parity), and each written sector of the first is as before or as
/// written — what P says, with the rest of the stripe worked out.
#[test]
fn a_written_member_and_an_untouched_one_dying_together_leave_no_torn_sector() {
    let mut wrong = 0;
    for seed in 0..64 {
        let (old, new, got) = cut_raid6_with_two_dying(1600 + seed, &[(4, 8)], |map| {
            [map.data_member(0), map.data_member(1)]
        });
        wrong += usize::from(!same(seed, "chunk 0's untouched rows", &got, &old, 0, 4));
        wrong += usize::from(!same(seed, "chunk 0's untouched rows", &got, &old, 12, 16));
        wrong += usize::from(!same(seed, "chunk 1", &got, &old, 16, 32));
        for s in 4..12 {
            let sector = &got[s * SECTOR..(s + 1) * SECTOR];
            let either = sector == &old[s * SECTOR..(s + 1) * SECTOR]
                || sector == &new[s * SECTOR..(s + 1) * SECTOR];
            wrong += usize::from(!either);
        }
    }
    assert_eq!(wrong, 0);
}

/// A member vanishes while the stripe log's replay reads its rows after a power cut:
/// the entry is planned and read again without it, so the parity the replay writes
/// never counts on rows it did not read — a chunk no write touched reads back right
/// from the others (found by a review: parity was built from an unread scratch, and
/// the vanished member's untouched chunk came back wrong, silently).
#[test]
fn a_member_gone_during_the_replays_read_leaves_parity_right() {
    for seed in 0..8u64 {
        let (mut array, data) = logged_raid5(900 + seed);
        let x = array.engine.geometry().stripe_map(0).data_member(0);
        // Chunk 1 of stripe 0 written and cut off by the power; chunk 0 (on X) untouched.
        array.write(16, &vec![0xa7u8; 16 * SECTOR]).expect("write");
        array.power_cut();
        while !array
            .in_flight()
            .any(|io| io.member == x && io.area == Area::Data && io.kind == IoKind::Read)
        {
            assert!(array.step(), "seed {seed}: the replay reads X");
        }
        array.kill_member(x);
        array.run();
        assert_eq!(
            array.engine.member_states()[x.index()],
            xraid_engine::MemberState::Failed
        );
        let got = array.read(0, 16).expect("degraded read");
        assert!(
            got[..] == data[..16 * SECTOR],
            "seed {seed}: X's untouched chunk reads back right"
        );
    }
}

/// A member that fails during the stripe log's replay at open (here its parity write
/// finds it gone) is recorded as faulty before the rings say the replay is done:
/// back as current after a power cut in between, it would serve parity the replay
/// never wrote, with nothing left on the rings to replay — and a chunk rebuilt from
/// that parity when another member goes would come back wrong. Cut at every step of
/// the replay's end, with the member returning each time.
#[test]
fn a_member_failed_during_the_replay_is_recorded_before_the_rings_say_it_is_done() {
    let (mut recorded, mut back) = (0, 0);
    for seed in 0..8u64 {
        for after in 0.. {
            let (mut array, _) = logged_raid5(1100 + seed);
            let map = array.engine.geometry().stripe_map(0);
            let (p, y) = (map.p(), map.data_member(1));
            // Chunk 1 of stripe 0 written and cut off by the power (P's update too).
            array.write(16, &vec![0x5cu8; 16 * SECTOR]).expect("write");
            array.power_cut();
            while !array
                .in_flight()
                .any(|io| io.member == p && io.area == Area::Data && io.kind == IoKind::Write)
            {
                assert!(array.step(), "seed {seed}: the replay writes P");
            }
            array.kill_member(p);
            for _ in 0..after {
                if !array.engine.log_recovering() || !array.step() {
                    break;
                }
            }
            if !array.engine.log_recovering() {
                break;
            }
            array.role_device_mut(p).health = SimMemberHealth::Healthy;
            array.power_cut_now();
            array.run();
            if array.engine.member_states()[p.index()] == MemberState::Failed {
                // Recorded as faulty: it stays out.
                recorded += 1;
                continue;
            }
            // Cut before the record, and so before the rings said the replay was done:
            // replayed again with P.
            let whole = array.read(16, 16).expect("read");
            array.kill_member(y);
            let degraded = array.read(16, 16).expect("degraded read");
            assert!(
                whole == degraded,
                "seed {seed}, cut {after} steps after P went: chunk 1 rebuilt from P differs from what it read"
            );
            back += 1;
        }
    }
    assert!(
        recorded > 8 && back > 8,
        "cuts fall on both sides of the record"
    );
}

/// A replacement being built that the stripe log's replay at open loses (gone as the
/// replay writes its parity) is recorded before the rings say the replay is done, as a
/// failed member is: back after a power cut as a replacement copied that far, it would
/// hold parity the replay never wrote, and take the role over with it.
#[test]
fn a_replacement_lost_during_the_replay_is_recorded_before_the_rings_say_it_is_done() {
    for seed in 0..8u64 {
        let (mut array, _) = logged_raid5(1200 + seed);
        let p = array.engine.geometry().stripe_map(0).p();
        // Its copy is not started: the replacement takes the role's writes meanwhile.
        array.start_replacement(p).expect("replace P's member");
        array.write(16, &vec![0x3du8; 16 * SECTOR]).expect("write");
        array.power_cut_now_resuming();
        assert!(
            array.engine.is_replacing(p),
            "seed {seed}: back after the cut"
        );
        array.defer_records = true;
        let replacement = array.engine.replacement_slot(p);
        while !array
            .in_flight()
            .any(|io| io.member == replacement && io.area == Area::Data && io.kind == IoKind::Write)
        {
            assert!(
                array.step(),
                "seed {seed}: the replay writes the replacement"
            );
        }
        array.slot_mut(replacement).health = SimMemberHealth::Dead;
        while array.engine.log_recovering() && !array.engine.replay_awaits_record() {
            assert!(array.step(), "seed {seed}: the replay goes on");
        }
        assert!(!array.engine.is_replacing(p), "seed {seed}: dropped");
        assert!(
            array.engine.replay_awaits_record(),
            "seed {seed}: the replay waits for the record"
        );
        assert!(
            !array
                .in_flight()
                .any(|io| io.area == Area::Log && io.kind == IoKind::Write),
            "seed {seed}: no marker before the record"
        );
        array.record_now();
        array.run();
        assert!(
            !array.engine.log_recovering(),
            "seed {seed}: done once recorded"
        );
    }
}

/// A member whose stripe-log ring cannot be read at open (a medium error there) serves
/// on, but the entries its ring held are unknown — on RAID-5, those of every stripe
/// whose parity it holds: the replay cannot vouch for parity there, and the resync is
/// owed as for an entry the replay skipped (stripe writes do not trust old parity
/// until it completes, and the array stays dirty until it does). Before, the replay
/// counted nothing and a check found the torn stripe's parity wrong.
#[test]
fn an_unreadable_ring_leaves_the_resync_owed() {
    let mut torn = 0;
    for seed in 0..8u64 {
        let (mut array, p) = cut_with_an_unreadable_ring(1300 + seed);
        array.run();
        assert_eq!(
            array.engine.member_states()[p.index()],
            MemberState::Active,
            "seed {seed}: it serves on"
        );
        assert!(
            array.engine.stats().log_entries_skipped > 0,
            "seed {seed}: the replay does not vouch for its stripes"
        );
        torn += check_mismatches(&mut array);
    }
    assert!(
        torn > 0,
        "some cut tore a stripe whose entry was on the ring"
    );
}

/// The entries an unreadable ring held never come back: the replay zeroes that ring
/// before its final flush. Read at a later open (the bad sectors rewritten, or the
/// error gone), they would be replayed as new — their seqs are unknown, and writes
/// since may have taken the same ones (a fault story returned data never written
/// that way, RAID-4 seed 13928085275190110663).
#[test]
fn an_unreadable_rings_old_entries_never_come_back() {
    for seed in 0..8u64 {
        let (mut array, p) = cut_with_an_unreadable_ring(1400 + seed);
        array.run();
        array.take_events();
        // The ring reads again; the power fails again with nothing written since.
        array.members[p.index()].ring_unreadable = false;
        array.power_cut();
        array.run();
        let replayed = array.take_events().into_iter().find_map(|e| match e {
            Event::LogRecovered { replayed, .. } => Some(replayed),
            _ => None,
        });
        assert_eq!(replayed, Some(0), "seed {seed}: nothing old is replayed");
    }
}

/// The resync an unreadable ring leaves owed outlives another power cut, wherever in
/// the replay's end it falls: the rings' marker says it is owed (flagged) before the
/// ring's entries — its only other trace — are zeroed, and until then those entries
/// stay for a later replay. Before, the wipe went first and the flag did not exist: an
/// open after a second cut found nothing skipped and vouched for parity in stripes
/// the first cut tore (found by a review).
#[test]
fn an_unreadable_rings_owed_resync_survives_another_cut() {
    let mut vouched_but_torn = Vec::new();
    let mut cuts = 0;
    for seed in 0..8u64 {
        for after in 0.. {
            let (mut array, p) = cut_with_an_unreadable_ring(1300 + seed);
            for _ in 0..after {
                if !array.engine.log_recovering() || !array.step() {
                    break;
                }
            }
            let done = !array.engine.log_recovering();
            // The power fails again before the owed resync ran; the ring reads now.
            array.members[p.index()].ring_unreadable = false;
            array.power_cut_now();
            cuts += 1;
            array.run();
            let vouched = array.engine.stats().log_entries_skipped == 0;
            let mismatches = check_mismatches(&mut array);
            if vouched && mismatches > 0 {
                vouched_but_torn.push((seed, after));
            }
            if done {
                break;
            }
        }
    }
    assert!(cuts > 16, "cuts fall all along the replay");
    assert!(
        vouched_but_torn.is_empty(),
        "a second open vouched for parity an earlier unreadable ring left owed (seed, steps): {vouched_but_torn:?}"
    );
}

/// Once the owed resync has completed, the rings stop saying it is owed, even with
/// nothing written after it: the resync's end writes an unflagged marker of a newer
/// seq. Before (found by a review), the replay's flagged marker stayed the newest, and
/// every later open owed a resync again — its own replay flagging the marker anew.
#[test]
fn a_completed_resync_clears_the_rings_flag() {
    let mut stale = Vec::new();
    for seed in 0..8u64 {
        let (mut array, p) = cut_with_an_unreadable_ring(1300 + seed);
        array.run();
        assert!(array.engine.stats().log_entries_skipped > 0);
        array.members[p.index()].ring_unreadable = false;
        array
            .engine
            .start_sync(SyncKind::Resync, 0)
            .expect("resync");
        array.run_sync();
        assert!(
            !array.engine.resync_owed(),
            "seed {seed}: the resync completed"
        );
        // Another cut, nothing written since the resync: nothing can be torn.
        array.power_cut();
        array.run();
        if array.engine.stats().log_entries_skipped > 0 {
            stale.push(seed);
        }
    }
    assert!(
        stale.is_empty(),
        "a completed resync is owed again after a cut: {stale:?}"
    );
}

/// The unreadable ring's member vanishes at every step of the replay's end (during the
/// wipe, the second round's flush, its marker): the recovery still ends, and reads go
/// on.
#[test]
fn a_member_lost_during_the_wipe_does_not_hang_the_replay() {
    let mut unfinished = Vec::new();
    for seed in 0..4u64 {
        for after in 0..200 {
            let (mut array, p) = cut_with_an_unreadable_ring(1300 + seed);
            let mut done = false;
            for _ in 0..after {
                if !array.engine.log_recovering() || !array.step() {
                    done = true;
                    break;
                }
            }
            if done {
                break;
            }
            array.kill_member(p);
            array.run();
            for _ in 0..1000 {
                if !array.engine.log_recovering() || !array.step() {
                    break;
                }
            }
            if array.engine.log_recovering() {
                unfinished.push((seed, after));
            }
            // Reads go on.
            array.read(0, 48).expect("read after the replay");
        }
    }
    assert!(
        unfinished.is_empty(),
        "the replay never ended (seed, step): {unfinished:?}"
    );
}

/// A degraded [`logged_raid5`] (the member holding stripe 0's third data chunk gone
/// and failed), with bad block logs when `logs`, a write to stripe 0's second chunk
/// cut off by the power, and the ring of stripe 0's parity member, which holds the
/// write's entry, failing to read at the restart; the replay has run. Returns the
/// array, the data before the write, the parity member and the missing one.
fn degraded_cut_with_an_unreadable_ring(
    seed: u64,
    logs: bool,
) -> (SimArray, Vec<u8>, MemberIdx, MemberIdx) {
    let (mut array, data) = logged_raid5(seed);
    if logs {
        array.enable_bad_block_logs(64);
    }
    let map = array.engine.geometry().stripe_map(0);
    let (p, gone) = (map.p(), map.data_member(2));
    array.kill_member(gone);
    array.engine.fail_member(gone);
    array.write(16, &vec![0x6bu8; 16 * SECTOR]).expect("write");
    array.power_cut_with(|array| array.members[p.index()].ring_unreadable = true);
    array.run();
    (array, data, p, gone)
}

/// md's write hole with a second fault: a degraded RAID-5 whose stripe-log entry for
/// a torn write is lost with its ring. The missing member's rows in the stripes whose
/// entries that ring held would be rebuilt from parity the cut may have torn; they
/// read as errors instead, never as wrong data (the parity rows go into the parity
/// member's bad block log; without one the rule of parity in doubt refuses them), and
/// everything else reads back. Before 2026-11-26 they were rebuilt silently: on some
/// seeds, wrong. Until 2026-11-29 a parity member without a log was failed whole,
/// and the RAID-5 answered nothing.
#[test]
fn a_lost_ring_on_a_degraded_array_loses_the_missing_rows_loudly() {
    for logs in [true, false] {
        for seed in 0..8u64 {
            let (mut array, data, p, gone) =
                degraded_cut_with_an_unreadable_ring(1700 + seed, logs);
            // Stripe 0: the missing chunk is lost, loudly; the written one holds the
            // write or what was there; the untouched one reads back.
            match array.read(32, 16) {
                Err(
                    xraid_engine::EngineError::Unreadable { .. }
                    | xraid_engine::EngineError::DataLost { .. },
                ) => {}
                Err(e) => panic!("seed {seed}, logs {logs}: the missing rows read as {e}"),
                Ok(got) => panic!(
                    "seed {seed}, logs {logs}: the missing rows read back, {}",
                    if got == data[32 * SECTOR..48 * SECTOR] {
                        "right"
                    } else {
                        "WRONG"
                    }
                ),
            }
            let events = array.take_events();
            let listed = events.iter().any(|e| {
                matches!(e, Event::TornParityListed { member, sector: 0, sectors: 16 } if *member == p)
            });
            assert_eq!(
                listed, logs,
                "seed {seed}, logs {logs}: stripe 0's parity listed"
            );
            let said_unlisted = events.iter().any(|e| {
                matches!(e, Event::TornParityUnlisted { member, sector: 0, sectors: 16 } if *member == p)
            });
            assert_eq!(
                said_unlisted, !logs,
                "seed {seed}, logs {logs}: stripe 0's parity said to be in doubt, unlisted"
            );
            // Without a log to list them in, the parity member serves on (the rule of
            // parity in doubt loses the rows all the same): its data rows still count.
            assert_eq!(
                array.engine.member_states()[p.index()],
                MemberState::Active,
                "seed {seed}, logs {logs}: the parity member serves on"
            );
            let written = array.read(16, 16).expect("the written chunk reads");
            assert!(
                written == vec![0x6bu8; 16 * SECTOR] || written == data[16 * SECTOR..32 * SECTOR],
                "seed {seed}: the written chunk holds the write or the old data"
            );
            assert_eq!(
                array.read(0, 16).expect("read"),
                data[..16 * SECTOR],
                "seed {seed}: stripe 0's first chunk"
            );
            // A stripe whose parity (and entries) are elsewhere is whole.
            let geo = *array.engine.geometry();
            for stripe in 1..geo.stripes() {
                let map = geo.stripe_map(stripe);
                let Some(i) = (0..3).find(|&i| map.data_member(i) == gone) else {
                    continue;
                };
                let at = stripe * 48 + u64::from(i) * 16;
                let got = array.read(at, 16);
                let want = &data[at as usize * SECTOR..][..16 * SECTOR];
                if map.p() != p {
                    let got = got.expect("a stripe the lost ring held no entry of");
                    assert_eq!(got, want, "seed {seed}, stripe {stripe}");
                } else {
                    // Its parity is listed too (no bitmap says where writes were).
                    assert!(got.is_err(), "seed {seed}, stripe {stripe}: read {got:?}");
                }
            }
        }
    }
}

/// The same without bad block logs, as the owed resync goes by: it cannot put the
/// stripe right nor list what it cannot, so the resync stays owed, and the stripe in
/// doubt with it — also while the resync is still running past it. The missing rows
/// read as errors then too, never as what the parity the cut may have torn makes of
/// them (before 2026-11-29, a unit the running resync had failed counted as resynced).
#[test]
fn rows_a_resync_could_not_list_stay_lost_while_it_runs_on() {
    for seed in 0..8u64 {
        let (mut array, data, p, _) = degraded_cut_with_an_unreadable_ring(1750 + seed, false);
        // About a stripe a millisecond: the read comes while the resync runs.
        let mut config = array.engine.config();
        config.sync_min_bytes_per_sec = 8 * 1024 * 1000;
        config.sync_max_bytes_per_sec = 8 * 1024 * 1000;
        array.engine.set_config(config);
        array
            .engine
            .start_sync_where_dirty(SyncKind::Resync, 0)
            .expect("resync");
        while array.engine.stats().sync_units == 0 {
            assert!(array.step(), "seed {seed}: the resync stopped");
        }
        assert!(
            array.engine.sync_progress().is_some(),
            "seed {seed}: the resync runs on"
        );
        for when in ["while the resync runs", "after it"] {
            match array.read(32, 16) {
                Err(xraid_engine::EngineError::Unreadable { .. }) => {}
                Err(e) => panic!("seed {seed}, {when}: the missing rows read as {e}"),
                Ok(got) => panic!(
                    "seed {seed}, {when}: the missing rows read back, {}",
                    if got == data[32 * SECTOR..48 * SECTOR] {
                        "right"
                    } else {
                        "WRONG"
                    }
                ),
            }
            array.run_sync();
        }
        assert_eq!(array.engine.member_states()[p.index()], MemberState::Active);
    }
}

/// A whole [`logged_raid5`] with bad block logs, a write to stripe 0's second chunk
/// cut off by the power, and stripe 0's parity member's ring failing to read at the
/// restart; the replay has run. Returns the array, the parity member, the member
/// holding stripe 0's third chunk and that chunk's contents.
fn whole_cut_with_a_lost_ring(seed: u64) -> (SimArray, MemberIdx, MemberIdx, Vec<u8>) {
    let (mut array, _) = logged_raid5(seed);
    array.enable_bad_block_logs(64);
    let map = array.engine.geometry().stripe_map(0);
    let (p, gone) = (map.p(), map.data_member(2));
    let before = array.read(32, 16).expect("read");
    array.write(16, &vec![0x6bu8; 16 * SECTOR]).expect("write");
    array.power_cut_with(|array| array.members[p.index()].ring_unreadable = true);
    array.run();
    (array, p, gone, before)
}

/// The same second fault after the open: a whole array whose ring failed to read at
/// the restart owes a resync; a data member that leaves before the resync reaches a
/// stripe the lost ring held entries of leaves its rows there lost, loudly — and
/// once the resync has completed, rebuilt from parity it made right.
#[test]
fn a_member_lost_before_the_owed_resync_loses_its_rows_loudly() {
    for seed in 0..8u64 {
        let (mut array, p, gone, before) = whole_cut_with_a_lost_ring(1800 + seed);
        assert!(array.engine.stats().log_entries_skipped > 0);
        array.take_events();
        array.kill_member(gone);
        array.engine.fail_member(gone);
        array.run();
        match array.read(32, 16) {
            Err(xraid_engine::EngineError::Unreadable { .. }) => {}
            Ok(got) => panic!(
                "seed {seed}: the missing rows read back, {}",
                if got == before { "right" } else { "WRONG" }
            ),
            Err(e) => panic!("seed {seed}: {e}"),
        }
        let listed = array.take_events().iter().any(
            |e| matches!(e, Event::TornParityListed { member, sector: 0, .. } if *member == p),
        );
        assert!(
            listed,
            "seed {seed}: stripe 0's parity listed as the member leaves"
        );
    }

    // After the resync: nothing is listed, and the rows are rebuilt right.
    for seed in 0..4u64 {
        let (mut array, _, gone, before) = whole_cut_with_a_lost_ring(1900 + seed);
        array
            .engine
            .start_sync_where_dirty(SyncKind::Resync, 0)
            .expect("resync");
        array.run_sync();
        array.kill_member(gone);
        array.engine.fail_member(gone);
        array.run();
        assert!(
            !array
                .take_events()
                .iter()
                .any(|e| matches!(e, Event::TornParityListed { .. })),
            "seed {seed}: nothing listed after the resync"
        );
        assert_eq!(array.read(32, 16).expect("rebuilt"), before, "seed {seed}");
    }
}

/// Rows lost that way stay lost while the rings are counted lost — a whole-stripe
/// write over them fails, loudly (a later walk could not know it made them good) —
/// and can be written again once the missing member is replaced and the owed resync
/// has completed: a write over the whole stripe reads nothing, and the listed members
/// take it (which makes their rows good). Cut off by the power at any step, the
/// stripe reads as the write or as before it (the lost rows loudly), never as
/// anything else.
#[test]
fn rows_a_lost_ring_lost_can_be_written_again() {
    for seed in 0..64u64 {
        let (mut array, _, p, gone) = degraded_cut_with_an_unreadable_ring(2000 + seed, true);
        let mut new = vec![0u8; 48 * SECTOR];
        array.rng().fill(&mut new);
        assert!(
            array.write(0, &new).is_err(),
            "seed {seed}: no write over the lost rows while the rings are counted lost"
        );
        // The missing member replaced and rebuilt (around the lost rows), the owed
        // resync run: the array is whole and the rings are not counted lost any more.
        array.return_member(gone, true).expect("a new disk");
        array
            .engine
            .start_sync(SyncKind::Recover, 0)
            .expect("recover");
        array.run_sync();
        array
            .engine
            .start_sync_where_dirty(SyncKind::Resync, 0)
            .expect("resync");
        array.run_sync();
        assert!(
            !array.engine.resync_owed(),
            "seed {seed}: the resync completed"
        );
        // What the members hold now (chunk 2, the new disk's, is lost).
        let mut before = vec![0u8; 48 * SECTOR];
        for i in [0usize, 1] {
            let at = i * 16;
            before[at * SECTOR..][..16 * SECTOR]
                .copy_from_slice(&array.read(at as u64, 16).expect("a present chunk"));
        }
        // Seeds 0..8 let the write finish; the others cut the power some steps in.
        let steps = (seed >= 8).then(|| array.rng().below(24));
        array.start_write(0, &new);
        match steps {
            None => {
                array.run();
                array.flush().expect("flush");
                assert_eq!(array.read(0, 48).expect("read"), new, "seed {seed}");
                assert!(
                    !array.engine.bad_blocks(p).overlaps(0..16),
                    "seed {seed}: the parity rows are good again"
                );
                continue;
            }
            Some(steps) => {
                for _ in 0..steps {
                    if !array.step() {
                        break;
                    }
                }
                array.power_cut_now();
                array.run();
            }
        }
        for i in [0usize, 1, 2] {
            let at = i * 16;
            let got = array.read(at as u64, 16);
            let (old, wrote) = (
                &before[at * SECTOR..][..16 * SECTOR],
                &new[at * SECTOR..][..16 * SECTOR],
            );
            let map = array.engine.geometry().stripe_map(0);
            match got {
                Ok(got) => assert!(
                    got == wrote || (map.data_member(i as u16) != gone && got == old),
                    "seed {seed}: chunk {i} reads neither the write nor what was there"
                ),
                Err(e) => assert!(
                    map.data_member(i as u16) == gone
                        && matches!(e, xraid_engine::EngineError::Unreadable { .. }),
                    "seed {seed}: chunk {i}: {e}"
                ),
            }
        }
    }
}

/// After a ring was lost on a degraded array, a later restart (every ring reading)
/// lists nothing new: the rings' marker says which ring was lost and for which
/// missing member its stripes are listed already. Before, it counted every ring as
/// lost, and every stripe written while degraded lost the missing member's rows.
#[test]
fn a_later_restart_lists_only_what_the_lost_ring_held() {
    for seed in 0..8u64 {
        let (mut array, data, p, gone) = degraded_cut_with_an_unreadable_ring(2200 + seed, true);
        let listed = array.engine.bad_blocks(p).sectors();
        // Writes to stripes whose parity is elsewhere, flushed; a power cut.
        let geo = *array.engine.geometry();
        let others: Vec<u64> = (1..geo.stripes())
            .filter(|&s| geo.stripe_map(s).p() != p)
            .collect();
        let mut expect = data.clone();
        for &s in &others {
            let at = s as usize * 48;
            let chunk = vec![(s as u8) ^ 0x5a; 48 * SECTOR];
            array
                .write(at as u64, &chunk)
                .expect("a stripe the lost ring held nothing of");
            expect[at * SECTOR..][..48 * SECTOR].copy_from_slice(&chunk);
        }
        array.flush().expect("flush");
        array.power_cut_with(|array| array.kill_member(gone));
        array.run();
        assert_eq!(
            array.engine.bad_blocks(p).sectors(),
            listed,
            "seed {seed}: nothing more listed"
        );
        for &s in &others {
            let at = s * 48;
            assert_eq!(
                array.read(at, 48).expect("still whole"),
                expect[at as usize * SECTOR..][..48 * SECTOR],
                "seed {seed}, stripe {s}"
            );
        }
    }
}

/// How md's session over the array ends, in [`cut_then_md_runs_the_array`].
#[derive(Clone, Copy)]
enum MdStops {
    /// Superblocks that say the array is clean.
    Cleanly,
    /// Cut off after its writes completed: superblocks that say it runs.
    Dirty,
}

/// xraid writes 8 sectors of stripe `stripe`'s first chunk and is cut off, the
/// write's entry on the rings with no marker covering it; then md (which knows
/// nothing of the rings) runs the array: it resyncs it (parity from the data as it
/// stands), writes the stripe's second chunk whole, and stops (`stops`). Its
/// superblock writes are md's, which the open is told
/// (`Engine::superblocks_unstamped`). With `gone`, that member is missing
/// at the open that follows. Returns md's chunk.
fn cut_then_md_runs_the_array(
    array: &mut SimArray,
    stripe: u64,
    gone: Option<MemberIdx>,
    stops: MdStops,
) -> Vec<u8> {
    let geo = *array.engine.geometry();
    let map = geo.stripe_map(stripe);
    let mut new = vec![0u8; 8 * SECTOR];
    array.rng().fill(&mut new);
    array
        .write(stripe * geo.stripe_data_sectors(), &new)
        .expect("write");
    let chunk = u64::from(geo.chunk_sectors()) as usize * SECTOR;
    let at = stripe as usize * chunk;
    let other = map.data_member(1).index();
    let parity = map.p().index();
    let mut md_data = vec![0u8; chunk];
    array.rng().fill(&mut md_data);
    let md_runs = |a: &mut SimArray| {
        a.engine.superblocks_unstamped();
        let mut p = vec![0u8; chunk];
        for d in 0..usize::from(geo.data_disks()) {
            let m = map.data_member(d as u16).index();
            for (x, y) in p.iter_mut().zip(&a.members[m].data[at..at + chunk]) {
                *x ^= y;
            }
        }
        for (x, (old, new)) in p
            .iter_mut()
            .zip(a.members[other].data[at..at + chunk].iter().zip(&md_data))
        {
            *x ^= old ^ new;
        }
        a.members[other].data[at..at + chunk].copy_from_slice(&md_data);
        a.members[parity].data[at..at + chunk].copy_from_slice(&p);
        if let Some(gone) = gone {
            a.kill_member(gone);
            a.engine.fail_member(gone);
        }
    };
    match stops {
        MdStops::Cleanly => array.power_cut_then_clean_open_with(md_runs),
        MdStops::Dirty => array.power_cut_with(md_runs),
    }
    array.run();
    md_data
}

/// After [`cut_then_md_runs_the_array`], the open finds superblocks that say the
/// array is clean and replays nothing: parity agrees with what md wrote (a whole
/// array's replay made parity from the data as it stands, and did no harm; a
/// degraded one's, below, did).
#[test]
fn a_clean_open_after_md_ran_the_array_leaves_parity_agreeing_with_mds_writes() {
    let mut bad = Vec::new();
    for seed in 0..16u64 {
        let (mut array, _) = logged_array(Level::Raid5, 4, 4100 + seed);
        let geo = *array.engine.geometry();
        let stripe = 2;
        let md_data = cut_then_md_runs_the_array(&mut array, stripe, None, MdStops::Cleanly);
        let mismatches = common::check_mismatches(&mut array);
        let got = array
            .read(
                stripe * geo.stripe_data_sectors() + u64::from(geo.chunk_sectors()),
                u64::from(geo.chunk_sectors()),
            )
            .expect("read md's chunk");
        if mismatches > 0 || got != md_data {
            bad.push((seed, mismatches, got == md_data));
        }
    }
    assert!(
        bad.is_empty(),
        "(seed, mismatches, md's chunk reads back): {bad:?}"
    );
}

/// The same, opened degraded: the stripe's third data member is gone at the open
/// after md's clean stop, so its rows are read through parity. Until 2026-11-28 the
/// open replayed the old entry, making parity from partial parity of rows md had
/// written since, and the missing member's chunk read back wrong in 16 seeds of 16,
/// without an error (found by a review of md's field meanings).
#[test]
fn a_degraded_clean_open_after_md_ran_the_array_reads_the_missing_rows_right() {
    degraded_open_after_md_ran_the_array(MdStops::Cleanly);
}

/// The same where md was cut off too, after its writes completed: the superblocks
/// owe a resync, and before 2026-11-29 the open replayed the old entry as after
/// xraid's own cut (16 seeds of 16 wrong). Superblocks md wrote last say the rings
/// know nothing of its writes: their entries are older than them.
#[test]
fn a_degraded_open_after_md_left_the_array_dirty_reads_the_missing_rows_right() {
    degraded_open_after_md_ran_the_array(MdStops::Dirty);
}

fn degraded_open_after_md_ran_the_array(stops: MdStops) {
    let mut bad = Vec::new();
    for seed in 0..16u64 {
        let (mut array, data) = logged_array(Level::Raid5, 4, 4200 + seed);
        let geo = *array.engine.geometry();
        let stripe = 2;
        let gone = geo.stripe_map(stripe).data_member(2);
        cut_then_md_runs_the_array(&mut array, stripe, Some(gone), stops);
        let third = stripe * geo.stripe_data_sectors() + 2 * u64::from(geo.chunk_sectors());
        let chunk = u64::from(geo.chunk_sectors()) as usize * SECTOR;
        let want = &data[third as usize * SECTOR..third as usize * SECTOR + chunk];
        match array.read(third, u64::from(geo.chunk_sectors())) {
            Ok(got) if got == want => {}
            Ok(_) => bad.push((seed, "wrong")),
            Err(_) => bad.push((seed, "refused")),
        }
    }
    assert!(
        bad.is_empty(),
        "(seed, the missing member's chunk): {bad:?}"
    );
}

/// xraid's session ends with every write flushed: its rings' newest marker covers
/// every entry and owes nothing. md then runs the array and is cut off in the middle
/// of a write to stripe `stripe`, which reached its first data chunk and not its
/// parity (md's write hole): the superblocks, md's, owe a resync. Before the resync
/// reaches the stripe, its second data chunk fails to read. Rebuilt through the torn
/// parity it would be what was never written; before 2026-11-29 the open took the
/// old marker's word for parity and it was, 16 seeds of 16. The log vouches for
/// nothing md wrote: the read is refused, as without a log.
#[test]
fn a_marker_from_before_md_left_the_array_dirty_does_not_vouch_for_its_parity() {
    let mut wrong = Vec::new();
    let mut refused = 0;
    for seed in 0..16u64 {
        let (mut array, data) = logged_array(Level::Raid5, 4, 4300 + seed);
        let geo = *array.engine.geometry();
        let stripe = 2;
        let map = geo.stripe_map(stripe);
        let (first, second) = (map.data_member(0).index(), map.data_member(1).index());
        let rows = geo.member_sector(stripe, 0)..geo.member_sector(stripe, 8);
        let at = rows.start as usize * SECTOR..rows.end as usize * SECTOR;
        let mut torn = vec![0u8; at.len()];
        array.rng().fill(&mut torn);
        array.power_cut_with(|a| {
            a.engine.superblocks_unstamped();
            a.members[first].data[at].copy_from_slice(&torn);
        });
        array.run();
        assert!(array.engine.resync_owed(), "md left the array dirty");
        array.members[second].bad_ranges.push(rows);
        let sector = stripe * geo.stripe_data_sectors() + u64::from(geo.chunk_sectors());
        let want = &data[sector as usize * SECTOR..(sector as usize + 8) * SECTOR];
        match array.read(sector, 8) {
            Ok(got) if got != want => wrong.push(seed),
            Ok(_) => {}
            Err(_) => refused += 1,
        }
    }
    assert!(
        wrong.is_empty(),
        "rows rebuilt through parity md tore read back wrong (seeds {wrong:?})"
    );
    assert_eq!(refused, 16, "every read through the torn parity is refused");
}

/// The first open after an upgrade: a build before the stamp wrote the superblocks'
/// update time in whole seconds, so an array it left dirty is found unstamped, as
/// if md had run it, but its rings' records say nothing of stamping either, and they
/// are trusted as before. The case is md's PPL case, where xraid's log is what keeps
/// the data: a write to chunk 0 of stripe 0 is cut off, and member 1 (chunk 1, which
/// nobody wrote) dies with the power. Without the replay its rows are rebuilt from
/// parity the cut may have torn: 21 seeds of 32 wrong in the stamp's first version
/// (found by a review).
#[test]
fn an_array_an_older_build_left_dirty_is_replayed() {
    let mut wrong = Vec::new();
    for seed in 0..32u64 {
        let (mut array, old) = logged_raid5(900 + seed);
        let mut bytes = vec![0u8; 8 * SECTOR];
        array.rng().fill(&mut bytes);
        array.write(0, &bytes).expect("write");
        array.power_cut_with(|a| {
            // What the array layer does on superblocks an older xraid wrote.
            a.rings_from_an_older_build();
            a.engine.superblocks_unstamped();
            a.kill_member(MemberIdx(1));
            a.engine.fail_member(MemberIdx(1));
        });
        match array.read(16, 16) {
            Ok(got) if got[..] == old[16 * SECTOR..32 * SECTOR] => {}
            Ok(_) => wrong.push((seed, "wrong")),
            Err(_) => wrong.push((seed, "refused")),
        }
    }
    assert!(
        wrong.is_empty(),
        "member 1's chunk of stripe 0 after the upgrade's first open (seed, read): {wrong:?}"
    );
}

/// A client flush on a degraded RAID-5 whose stripe-log marker write (the last step
/// before the flush is answered) finds another member gone: the array is lost with
/// it, and the flush says so, as a flush whose own member flush fails does. Before,
/// it was answered OK on an array that could no longer return what it made durable.
#[test]
fn a_flush_whose_marker_write_loses_the_array_fails() {
    let mut markers = 0;
    for seed in 0..16 {
        let (mut array, _) = logged_raid5(300 + seed);
        array.kill_member(MemberIdx(1));
        array.engine.fail_member(MemberIdx(1));
        let mut new = vec![0u8; 48 * SECTOR];
        array.rng().fill(&mut new);
        array
            .write(48 * (seed % 16), &new)
            .expect("write on the degraded array");
        let flush = array.start_flush();
        // Some configurations (durable ring writes) owe no marker here.
        let victim = loop {
            if let Some(io) = array
                .in_flight()
                .find(|io| io.area == Area::Log && io.kind == IoKind::Write)
            {
                break Some(io.member);
            }
            if !array.step() {
                break None;
            }
        };
        let Some(victim) = victim else {
            continue;
        };
        markers += 1;
        array.kill_member(victim);
        let replies = array.run();
        let reply = replies
            .iter()
            .find(|r| r.id == flush)
            .expect("the flush is answered");
        assert!(array.engine.lost_error().is_some(), "seed {seed}: lost");
        assert!(
            reply.result.is_err(),
            "seed {seed}: a flush that lost the array is answered OK"
        );
    }
    assert!(markers >= 4, "only {markers} flushes wrote a marker");
}
