//! Stories of rows listed past the redundancy (and within it), written by a review:
//! clients write whole stripes (and parts) over them, members refuse writes, rings
//! fail to read, and the power fails at random steps — in half of those rounds with
//! the driver's record of lists made good held back meanwhile, as the driver holds it
//! until a flush. Only silent wrong data is an error here: a loud error is always
//! accepted. It found the race of lists made good but not recorded (f5bf5af).
//!
//! `XRAID_SEEDS=<n> XRAID_SEEDS_FROM=<i>`, or `XRAID_SEED=<seed>` (with
//! `XRAID_TRACE=1`) to replay one, as the fault stories take them.

mod common;

use std::collections::HashSet;

use xraid_engine::sim::{SimArray, SimRng};
use xraid_engine::{EngineConfig, EngineError, MemberIdx, MemberState, SyncKind};
use xraid_format::BadBlocks;
use xraid_layout::{Geometry, Layout, Level, ParityAlgorithm};

const SECTOR: usize = 512;

fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn loud(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::DataLost { .. }
            | EngineError::Unreadable { .. }
            | EngineError::Unwritable { .. }
            | EngineError::UnknownRowsFull { .. }
    )
}

struct Model {
    /// Per sector: contents it may hold now (after a cut: any of them).
    ok: Vec<HashSet<u64>>,
    /// Per sector: the latest acknowledged contents.
    cur: Vec<u64>,
    /// Per sector: anything goes (a failed write, a member dying with the power).
    any: Vec<bool>,
}

fn tell(seed: u64, log: &mut Vec<String>) -> Result<(), String> {
    let mut rng = SimRng::new(seed);
    let raid6 = rng.below(2) == 0;
    let level = if raid6 { Level::Raid6 } else { Level::Raid5 };
    let algs = [
        ParityAlgorithm::LeftAsymmetric,
        ParityAlgorithm::RightAsymmetric,
        ParityAlgorithm::LeftSymmetric,
        ParityAlgorithm::RightSymmetric,
    ];
    let layout = Layout::Parity(algs[rng.below(4) as usize]);
    let disks = level.min_members() + rng.below(3) as u16;
    let chunk = 16u32;
    let geo = Geometry::new(level, layout, disks, chunk, 256).expect("geometry");
    let pc = usize::from(level.parity_count());
    let mut array = SimArray::new(geo, rng.next_u64());
    let entry = xraid_engine::log_entry_max_sectors(geo.data_disks(), chunk, level.parity_count());
    array.engine.set_config(EngineConfig {
        log_sectors: 2 * entry + rng.below(4 * entry),
        log_tag: seed,
        fua_writes: rng.below(2) == 0,
        repair_writes: true,
        sync_min_bytes_per_sec: 1_000_000,
        sync_max_bytes_per_sec: [0, 50_000_000][rng.below(2) as usize],
        sync_window: 1 + rng.below(3) as usize,
        ..EngineConfig::default()
    });
    array.run();
    let integrity = rng.below(3) == 0;
    if integrity {
        array.enable_integrity();
    }
    array.enable_bad_block_logs(512);
    let total = geo.array_sectors();
    let mut data = vec![0u8; total as usize * SECTOR];
    array.rng().fill(&mut data);
    array.write(0, &data).expect("fill");
    array.flush().expect("flush");
    let mut m = Model {
        ok: (0..total as usize)
            .map(|s| HashSet::from([hash(&data[s * SECTOR..(s + 1) * SECTOR])]))
            .collect(),
        cur: (0..total as usize)
            .map(|s| hash(&data[s * SECTOR..(s + 1) * SECTOR]))
            .collect(),
        any: vec![false; total as usize],
    };
    log.push(format!(
        "{level:?} {layout:?} {disks} disks, integrity {integrity}, log {}",
        array.engine.config().log_sectors
    ));
    let block: u32 = if integrity { 8 } else { 1 };
    let blk = u64::from(block);
    let roles = usize::from(disks);
    // Listings, scribbled on the member (what a listed row holds is garbage).
    let stripes = geo.stripes();
    let listed_stripes = 1 + rng.below(4);
    for _ in 0..listed_stripes {
        let stripe = rng.below(stripes);
        let count = 1 + rng.below(pc as u64 + 1) as usize;
        let mut members: Vec<usize> = (0..roles).collect();
        for _ in 0..count {
            let mi = members.remove(rng.below(members.len() as u64) as usize);
            let (a, b) = if rng.below(2) == 0 {
                (0, chunk)
            } else {
                let a = (rng.below(u64::from(chunk)) as u32) / block * block;
                let b = (a + 1 + rng.below(u64::from(chunk - a)) as u32)
                    .next_multiple_of(block)
                    .min(chunk);
                (a, b)
            };
            let rows = geo.member_sector(stripe, a)..geo.member_sector(stripe, b);
            log.push(format!("list member {mi} rows {rows:?} (stripe {stripe})"));
            let role = MemberIdx(mi as u16);
            let slot = array.engine.device_slot(role);
            let mut l = array.engine.bad_blocks(slot);
            l.add(rows.clone());
            array.engine.set_bad_block_log(slot, l, 512);
            let d = &mut array.members[mi].data;
            for byte in &mut d[rows.start as usize * SECTOR..rows.end as usize * SECTOR] {
                *byte = !*byte;
            }
        }
    }
    let _ = BadBlocks::new();
    // Degraded at the start, sometimes.
    if rng.below(3) == 0 {
        let gone = rng.below(roles as u64) as usize;
        log.push(format!("kill member {gone}"));
        array.kill_member(MemberIdx(gone as u16));
        array.engine.fail_member(MemberIdx(gone as u16));
        array.run();
    }
    // A member replaced while it serves, sometimes.
    if rng.below(3) == 0 && array.engine.member_states().contains(&MemberState::Active) {
        let states = array.engine.member_states().to_vec();
        let present: Vec<usize> = (0..roles)
            .filter(|&r| states[r] == MemberState::Active)
            .collect();
        let r = present[rng.below(present.len() as u64) as usize];
        log.push(format!("replace member {r}"));
        array
            .start_replacement(MemberIdx(r as u16))
            .expect("replace");
        if array.engine.sync_progress().is_none() {
            array
                .engine
                .start_sync(SyncKind::Recover, 0)
                .expect("recover");
        }
    }
    // Write errors on a member, sometimes.
    if rng.below(3) == 0 {
        let mi = rng.below(roles as u64) as usize;
        let start = rng.below(256);
        let len = 1 + rng.below(16);
        log.push(format!(
            "write errors {start}..{} on member {mi}",
            start + len
        ));
        array.members[mi]
            .write_error_ranges
            .push(start..(start + len).min(256));
    }
    let per_stripe = u64::from(chunk) * u64::from(geo.data_disks());
    let data_member_of = |s: u64| -> usize {
        let stripe = s / per_stripe;
        let idx = ((s % per_stripe) / u64::from(chunk)) as u16;
        geo.stripe_map(stripe).data_member(idx).index()
    };
    for round in 0..12 {
        if round == 6 {
            let states = array.engine.member_states().to_vec();
            if let Some(f) = (0..roles).find(|&r| states[r] == MemberState::Failed) {
                if array
                    .engine
                    .sync_progress()
                    .is_some_and(|p| p.kind != SyncKind::Recover)
                {
                    array.engine.cancel_sync();
                    array.run_sync();
                }
                let replace = rng.below(2) == 0;
                log.push(format!("return member {f} (replace {replace})"));
                if array.return_member(MemberIdx(f as u16), replace).is_ok()
                    && array.engine.sync_progress().is_none()
                {
                    let _ = array.engine.start_sync(SyncKind::Recover, 0);
                }
            }
        }
        let roll = rng.below(10);
        if roll == 0 {
            log.push("flush".into());
            match array.flush() {
                Ok(()) => {
                    for s in 0..total as usize {
                        m.ok[s] = HashSet::from([m.cur[s]]);
                    }
                }
                Err(e) if loud(&e) => {}
                Err(e) => return Err(format!("flush: {e}")),
            }
            continue;
        }
        // A batch of writes.
        let n = 1 + rng.below(3);
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let mut writes = Vec::new();
        for _ in 0..n {
            let (sector, sectors) = if rng.below(3) != 0 {
                let stripe = rng.below(stripes);
                let k = 1 + rng.below(2).min(stripes - stripe - 1);
                (stripe * per_stripe, k * per_stripe)
            } else {
                let len = 1 + rng.below(2 * per_stripe);
                let len = len.min(total);
                let at = rng.below(total - len + 1);
                let a = at / blk * blk;
                let b = (at + len).next_multiple_of(blk).min(total);
                (a, b - a)
            };
            if sectors == 0
                || taken
                    .iter()
                    .any(|&(s, l)| sector < s + l && s < sector + sectors)
            {
                continue;
            }
            taken.push((sector, sectors));
            let mut bytes = vec![0u8; sectors as usize * SECTOR];
            rng.fill(&mut bytes);
            log.push(format!("  write {sector}+{sectors}"));
            let (id, buf) = array.start_write(sector, &bytes);
            for (i, c) in bytes.chunks(SECTOR).enumerate() {
                m.ok[sector as usize + i].insert(hash(c));
            }
            writes.push((id, buf, sector, bytes));
        }
        let cut = rng.below(3) == 0;
        // The driver records lists made good only after a flush, while the engine
        // goes on: in cut rounds, half the time, none is recorded meanwhile.
        let defer = cut && rng.below(2) == 0;
        array.defer_records = defer;
        array.defer_only_clears = true;
        if !cut {
            let replies = array.run();
            for (id, buf, sector, bytes) in writes {
                let r = replies.iter().find(|r| r.id == id).expect("reply");
                match &r.result {
                    Ok(()) => {
                        for (i, c) in bytes.chunks(SECTOR).enumerate() {
                            m.cur[sector as usize + i] = hash(c);
                        }
                    }
                    Err(e) if loud(e) => {
                        log.push(format!("  write {sector} failed: {e}"));
                        for i in 0..bytes.len() / SECTOR {
                            m.any[sector as usize + i] = true;
                        }
                    }
                    Err(e) => return Err(format!("write {sector}: {e}")),
                }
                array.engine.buffers_mut().free(buf);
            }
            continue;
        }
        let steps = rng.below(40);
        for _ in 0..steps {
            if !array.step() {
                break;
            }
        }
        if std::env::var_os("XRAID_TRACE").is_some() {
            let ev = array.take_events();
            eprintln!(
                "before cut round {round}: states {:?} events {:?}",
                array.engine.member_states(),
                ev
            );
            for r in 0..roles {
                eprintln!(
                    "  member {r} bad {:?} durable {:?}",
                    array.engine.bad_blocks(MemberIdx(r as u16)),
                    array.engine.durable_bad_blocks(MemberIdx(r as u16))
                );
            }
        }
        // Which member dies with the power, and which ring fails to read.
        let states = array.engine.member_states().to_vec();
        let alive: Vec<usize> = (0..roles)
            .filter(|&r| states[r] != MemberState::Failed)
            .collect();
        let not_active = states.iter().filter(|s| **s != MemberState::Active).count();
        let dies = (rng.below(4) == 0 && alive.len() > 1 && not_active < pc)
            .then(|| alive[rng.below(alive.len() as u64) as usize]);
        let ring = (rng.below(3) == 0 && !alive.is_empty())
            .then(|| alive[rng.below(alive.len() as u64) as usize]);
        log.push(format!(
            "power cut after {steps} steps (dies {dies:?}, ring unreadable {ring:?}) round {round}"
        ));
        if let Some(d) = dies {
            for s in 0..total as usize {
                if m.ok[s].len() > 1 && data_member_of(s as u64) == d {
                    m.any[s] = true;
                }
            }
        }
        for mm in &mut array.members {
            mm.ring_unreadable = false;
        }
        let recovering = array
            .engine
            .sync_progress()
            .is_some_and(|p| p.kind == SyncKind::Recover);
        let resume = recovering && dies.is_none() && rng.below(2) == 0;
        if resume {
            log.push("  (resuming the recover)".into());
        }
        let restart = |a: &mut SimArray| {
            if let Some(r) = ring {
                a.members[r].ring_unreadable = true;
            }
            if let Some(d) = dies {
                a.kill_member(MemberIdx(d as u16));
                a.engine.fail_member(MemberIdx(d as u16));
            }
        };
        if resume {
            array.power_cut_now_resuming_with(restart);
        } else {
            array.power_cut_now_with(restart);
        }
        array.defer_records = false;
        array.run();
        if std::env::var_os("XRAID_TRACE").is_some() {
            let ev = array.take_events();
            eprintln!(
                "after cut round {round}: states {:?} events {:?}",
                array.engine.member_states(),
                ev
            );
            for r in 0..roles {
                eprintln!(
                    "  member {r} bad {:?}",
                    array.engine.bad_blocks(MemberIdx(r as u16))
                );
            }
        }
        if array.engine.is_whole() && array.engine.sync_progress().is_none() {
            let _ = array.engine.start_sync(SyncKind::Resync, 0);
            array.run_sync();
        }
        // Check every sector.
        for s in 0..total {
            match array.read(s, 1) {
                Ok(got) => {
                    let h = hash(&got);
                    if !m.any[s as usize] && !m.ok[s as usize].contains(&h) {
                        return Err(format!(
                            "after the cut, sector {s} (member {}) holds data never written there",
                            data_member_of(s)
                        ));
                    }
                    m.ok[s as usize] = HashSet::from([h]);
                    m.cur[s as usize] = h;
                    m.any[s as usize] = false;
                }
                Err(e) if loud(&e) => {}
                Err(e) => return Err(format!("read {s}: {e}")),
            }
        }
    }
    // Final: every readable sector.
    for s in 0..total {
        match array.read(s, 1) {
            Ok(got) => {
                let h = hash(&got);
                if !m.any[s as usize] && !m.ok[s as usize].contains(&h) && m.cur[s as usize] != h {
                    return Err(format!(
                        "at the end, sector {s} holds data never written there"
                    ));
                }
            }
            Err(e) if loud(&e) => {}
            Err(e) => return Err(format!("read {s}: {e}")),
        }
    }
    Ok(())
}

#[test]
fn stories_of_listings_past_the_redundancy_return_no_wrong_data() {
    let seeds = common::story_seeds(500, common::spread(0x77));
    let mut failed = Vec::new();
    for seed in seeds {
        let mut log = Vec::new();
        if let Err(e) = tell(seed, &mut log) {
            if std::env::var("XRAID_TRACE").is_ok() {
                eprintln!("seed {seed}: {e}\n  {}", log.join("\n  "));
            }
            failed.push((seed, e));
        }
    }
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
}

/// Seeds beyond the default 500 that once failed (each found a gap, since closed):
/// 17712323980426967013, a RAID-6 whose P ring was lost while Q's member was missing,
/// Q's member rebuilt since (right, from data) and a data member dying with the power:
/// the walk took the rebuilt Q for one that had replayed the entries, and member 0's
/// rows were rebuilt through the torn P.
#[test]
fn the_listing_seeds_that_found_gaps_pass() {
    const SEEDS: &[u64] = &[17_712_323_980_426_967_013];
    for &seed in SEEDS {
        let mut log = Vec::new();
        if let Err(e) = tell(seed, &mut log) {
            panic!("seed {seed}: {e}\n  {}", log.join("\n  "));
        }
    }
}
