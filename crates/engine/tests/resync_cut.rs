//! A resync cut off by power failures, again and again (a server killed during the
//! initial resync of an array made over old contents, or during the resync after a
//! crash). The resync releases the write-intent bits behind it as it goes, and a
//! clear round clears them on every member; after each cut only the bits still set
//! are resynced. Random stories over RAID-1/5/6/10 (near, far and offset layouts),
//! bitmap chunks smaller and larger than the sync units, quiet times from none to
//! 5 ms, stripe logs and integrity mode on some, with client writes between the
//! cuts (flushed, left unflushed, or still in flight at the cut, so that some cuts
//! fall inside a clear round), clean stops resumed from the checkpoint, in-process
//! restarts, and a mirror member dying mid-resync and coming back. Each checks that
//! nothing acknowledged is lost, that no block fails its checksum falsely, and at
//! the end that a check finds parity (or the copies) agreeing everywhere: a bit
//! cleared too early would leave a region the next resync skips, disagreeing.
//! (Many of these stories come from a review of the bit releases.)
//!
//! `XRAID_SEEDS=<n>` tells more or fewer stories (300 by default), `XRAID_SEED=<s>`
//! replays one.

mod common;
use common::SECTOR;

use std::sync::atomic::{AtomicU64, Ordering};

use xraid_engine::sim::{SimArray, SimRng};
use xraid_engine::{
    EngineConfig, Event, MemberIdx, MemberState, Nanos, SyncKind, WriteIntentSetup,
    INTENT_HEADER_BYTES,
};
use xraid_layout::{Geometry, Layout, Level, Raid10Layout};

/// Cuts that came after the resync had cleared bits.
static CUTS_AFTER_CLEARS: AtomicU64 = AtomicU64::new(0);

struct Story {
    array: SimArray,
    rng: SimRng,
    oracle: Vec<u8>,
    /// Writes not known durable: (sector, old, new).
    uncertain: Vec<(u64, Vec<u8>, Vec<u8>)>,
    bitmap: (u64, Nanos),
    unit_time: u64,
    /// Members that may die without losing the copy the resync keeps.
    killable: Vec<u16>,
    dead: Option<u16>,
    log: Vec<String>,
}

fn random_geometry(rng: &mut SimRng) -> Geometry {
    let level = [Level::Raid1, Level::Raid5, Level::Raid6, Level::Raid10][rng.below(4) as usize];
    let (layout, disks) = match level {
        Level::Raid1 => (Layout::None, 2 + rng.below(2) as u16),
        Level::Raid10 => {
            let near =
                [(2, 1, false), (1, 2, false), (1, 2, true), (2, 1, false)][rng.below(4) as usize];
            let disks = if near.0 == 2 {
                4
            } else {
                3 + rng.below(2) as u16
            };
            let layout = Layout::Raid10(Raid10Layout {
                near_copies: near.0,
                far_copies: near.1,
                offset: near.2,
            });
            (layout, disks)
        }
        _ => (
            Layout::default_for(level),
            level.min_members() + rng.below(3) as u16,
        ),
    };
    let (chunk, member_sectors) = if level == Level::Raid1 {
        (
            0,
            4096 * (3 + rng.below(3)) + [0, 8, 1000][rng.below(3) as usize],
        )
    } else {
        let chunk = [8, 16, 32][rng.below(3) as usize];
        (chunk, 256 * (1 + rng.below(4)))
    };
    Geometry::new(level, layout, disks, chunk, member_sectors).expect("geometry")
}

fn bitmap_setup(
    geo: &Geometry,
    (chunk_sectors, quiet): (u64, Nanos),
    image: Option<Vec<u8>>,
) -> WriteIntentSetup {
    let range = if geo.level() == Level::Raid10 {
        geo.array_sectors()
    } else {
        geo.member_sectors()
    };
    let chunks = range.div_ceil(chunk_sectors);
    let bytes = (INTENT_HEADER_BYTES as u64 + chunks.div_ceil(8)).next_multiple_of(512) as usize;
    let image = image.unwrap_or_else(|| {
        let mut all = vec![0u8; bytes];
        for c in 0..chunks {
            all[INTENT_HEADER_BYTES + (c / 8) as usize] |= 1 << (c % 8);
        }
        all
    });
    WriteIntentSetup {
        image,
        chunks,
        chunk_sectors,
        block_bytes: 512,
        clear_after: quiet,
        rewrite: false,
    }
}

impl Story {
    fn new(seed: u64) -> Story {
        let mut rng = SimRng::new(seed);
        let geo = random_geometry(&mut rng);
        let log_sectors = if geo.level().has_parity() && rng.below(2) == 0 {
            256
        } else {
            0
        };
        let mut array = common::blank_array_on(geo, seed, log_sectors);
        let integrity = rng.below(2) == 0;
        if integrity {
            array.enable_integrity();
        }
        let chunk = if geo.level() == Level::Raid1 {
            [64, 1024, 4096, 8192][rng.below(4) as usize]
        } else {
            [8, 16, 32, 64, 128][rng.below(5) as usize]
        };
        let bitmap = (
            chunk,
            Nanos([0, 100_000, 300_000, 1_000_000, 5_000_000][rng.below(5) as usize]),
        );
        let unit_bytes = if geo.level() == Level::Raid1 {
            4096 * 512
        } else {
            u64::from(geo.chunk_sectors()) * 512
        };
        let unit_time = 200_000 + rng.below(1_800_000);
        let rate = unit_bytes * 1_000_000_000 / unit_time;
        array.engine.set_config(EngineConfig {
            sync_min_bytes_per_sec: rate,
            sync_max_bytes_per_sec: rate,
            ..array.engine.config()
        });
        // Made over old contents: every member holds random bytes, the rings nothing
        // of the array, every bit set, and the initial resync owed.
        array.power_cut_with(|a| {
            common::old_contents(a);
            a.engine
                .enable_write_intent(bitmap_setup(&geo, bitmap, None));
            a.engine.allow_write_intent_clears(true);
            a.engine.owe_initial_resync();
        });
        array.run();
        array.take_events();
        let oracle = array
            .read(0, geo.array_sectors())
            .expect("the old contents read");
        // Mirrors keep the first copy: a member holding no first copy may die.
        let killable: Vec<u16> = match (geo.level(), geo.layout()) {
            (Level::Raid1, _) => (1..geo.raid_disks()).collect(),
            (Level::Raid10, Layout::Raid10(r)) if r.near_copies == 2 && r.far_copies == 1 => {
                vec![1, 3]
            }
            _ => Vec::new(),
        };
        let log = vec![format!(
            "{:?} {:?} {} disks, chunk {}, {} member sectors, log ring {log_sectors}, integrity {integrity}, bitmap {bitmap:?}, resync at {rate} B/s",
            geo.level(),
            geo.layout(),
            geo.raid_disks(),
            geo.chunk_sectors(),
            geo.member_sectors(),
        )];
        Story {
            array,
            rng,
            oracle,
            uncertain: Vec::new(),
            bitmap,
            unit_time,
            killable,
            dead: None,
            log,
        }
    }

    fn start_resync(&mut self, from: u64) -> Result<(), String> {
        self.log.push(format!("start resync from unit {from}"));
        self.array
            .engine
            .start_sync_where_dirty(SyncKind::Resync, from)
            .map_err(|e| format!("start resync: {e}"))
    }

    fn random_write(&mut self) -> (u64, Vec<u8>) {
        let total = self.array.engine.geometry().array_sectors();
        let sectors = 1 + self.rng.below(48.min(total));
        let at = self.rng.below(total - sectors + 1);
        let mut data = vec![0u8; sectors as usize * SECTOR];
        self.rng.fill(&mut data);
        (at, data)
    }

    fn writes(&mut self, flush: bool) -> Result<(), String> {
        for _ in 0..1 + self.rng.below(3) {
            let (at, data) = self.random_write();
            self.log
                .push(format!("write {at}+{} flush {flush}", data.len() / SECTOR));
            self.array
                .write(at, &data)
                .map_err(|e| format!("write {at}: {e}"))?;
            let from = at as usize * SECTOR;
            if !flush {
                let old = self.oracle[from..from + data.len()].to_vec();
                self.uncertain.push((at, old, data.clone()));
            }
            self.oracle[from..from + data.len()].copy_from_slice(&data);
        }
        if flush {
            self.array.flush().map_err(|e| format!("flush: {e}"))?;
            self.uncertain.clear();
        }
        Ok(())
    }

    /// After a cut: each sector written but not made durable holds old or new.
    fn settle_uncertain(&mut self) -> Result<(), String> {
        let pending = std::mem::take(&mut self.uncertain);
        // Latest last: the oracle holds the newest writes; resolve sector by sector
        // against all values written there since the last flush.
        let total = self.array.engine.geometry().array_sectors();
        let got = self
            .array
            .read(0, total)
            .map_err(|e| format!("read after cut: {e}"))?;
        let mut allowed: std::collections::HashMap<u64, Vec<Vec<u8>>> = Default::default();
        for (at, old, new) in &pending {
            for i in 0..old.len() / SECTOR {
                let s = at + i as u64;
                let e = allowed.entry(s).or_default();
                e.push(old[i * SECTOR..(i + 1) * SECTOR].to_vec());
                e.push(new[i * SECTOR..(i + 1) * SECTOR].to_vec());
            }
        }
        for (s, values) in allowed {
            let g = &got[s as usize * SECTOR..(s as usize + 1) * SECTOR];
            if !values.iter().any(|v| v == g) {
                return Err(format!(
                    "sector {s} holds neither old nor new after the cut"
                ));
            }
            self.oracle[s as usize * SECTOR..(s as usize + 1) * SECTOR].copy_from_slice(g);
        }
        Ok(())
    }

    fn read_back(&mut self, when: &str) -> Result<(), String> {
        let total = self.array.engine.geometry().array_sectors();
        let got = self
            .array
            .read(0, total)
            .map_err(|e| format!("read {when}: {e}"))?;
        if let Some(s) = (0..total as usize).find(|&s| {
            got[s * SECTOR..(s + 1) * SECTOR] != self.oracle[s * SECTOR..(s + 1) * SECTOR]
        }) {
            let geo = *self.array.engine.geometry();
            let mut copies = String::new();
            if !geo.level().has_parity() {
                // Which copy holds what: the one written, or another.
                for place in geo.copies(s as u64).as_slice() {
                    let at = place.sector as usize * SECTOR;
                    let bytes = &self.array.members[place.member.index()].data[at..at + SECTOR];
                    let same = bytes == &self.oracle[s * SECTOR..(s + 1) * SECTOR];
                    copies += &format!(
                        " member {} sector {}: {same};",
                        place.member.index(),
                        place.sector
                    );
                }
            }
            return Err(format!(
                "{when}: sector {s} reads back other than written (copies right:{copies})"
            ));
        }
        for m in 0..self.array.members.len() {
            let found = self.array.engine.checksum_mismatches(MemberIdx(m as u16));
            if found > 0 {
                return Err(format!("{when}: member {m} failed {found} checksums"));
            }
        }
        Ok(())
    }

    fn reload(&mut self, clean_from: Option<u64>) {
        let geo = *self.array.engine.geometry();
        let bitmap = self.bitmap;
        let source = self
            .array
            .engine
            .member_states()
            .iter()
            .position(|s| *s == MemberState::Active)
            .unwrap_or(0);
        self.array.power_cut_now_with(|a| {
            let found = a.members[source].bitmap.clone();
            a.engine
                .enable_write_intent(bitmap_setup(&geo, bitmap, Some(found)));
            if let Some(sector) = clean_from {
                a.engine.owe_resync_after_a_clean_stop(sector);
            }
            if a.engine.is_whole() {
                a.engine.allow_write_intent_clears(true);
            }
        });
        self.array.run();
    }

    fn cut(&mut self, in_flight: bool) -> Result<(), String> {
        if in_flight {
            for _ in 0..1 + self.rng.below(3) {
                let (at, data) = self.random_write();
                self.log.push(format!(
                    "write {at}+{} in flight at the cut",
                    data.len() / SECTOR
                ));
                let (_, buf) = self.array.start_write(at, &data);
                let _ = buf;
                let from = at as usize * SECTOR;
                let old = self.oracle[from..from + data.len()].to_vec();
                self.uncertain.push((at, old, data.clone()));
                self.oracle[from..from + data.len()].copy_from_slice(&data);
            }
            // Let a few I/Os go.
            for _ in 0..self.rng.below(6) {
                self.array.step();
            }
        }
        // Sometimes in the middle of whatever runs now (a clear round's flush or
        // its bit writes, a resync unit).
        for _ in 0..self.rng.below(20) {
            self.array.step();
        }
        let chunks = self.array.engine.write_intent_chunks().unwrap_or(0);
        let dirty = self.array.engine.write_intent_dirty().unwrap_or(chunks);
        if dirty < chunks {
            CUTS_AFTER_CLEARS.fetch_add(1, Ordering::Relaxed);
        }
        self.log.push(format!(
            "power cut at {:?}, {dirty} of {chunks} bits set",
            self.array.engine.sync_progress().map(|p| p.done_below)
        ));
        self.reload(None);
        self.settle_uncertain()?;
        self.read_back("after the cut")?;
        self.start_resync(0)
    }

    /// A clean stop with the resync unfinished, and an open that resumes it from
    /// the checkpoint (as `Array::close` and `start_resync_if_needed` do).
    fn clean_stop(&mut self) -> Result<(), String> {
        let stopped = self.array.engine.sync_progress().map(|p| p.done_below);
        self.array.engine.cancel_sync();
        self.array.run_sync();
        self.array.flush().map_err(|e| format!("flush: {e}"))?;
        self.uncertain.clear();
        self.array.engine.clear_write_intent_now();
        self.array.run();
        let unit = stopped.unwrap_or(0);
        let sector = self.array.engine.unit_to_resync_offset(unit);
        self.log.push(format!(
            "clean stop at unit {unit} (sector {sector}), {:?} bits set",
            self.array.engine.write_intent_dirty()
        ));
        self.reload(Some(sector));
        self.read_back("after the clean stop")?;
        let from = self.array.engine.resync_offset_to_unit(sector);
        self.start_resync(from)
    }

    /// Cancelled and started again from its checkpoint in the same process.
    fn restart_in_process(&mut self) -> Result<(), String> {
        let stopped = self.array.engine.sync_progress().map(|p| p.done_below);
        self.array.engine.cancel_sync();
        self.array.run_sync();
        let from = stopped.unwrap_or(0);
        self.log.push(format!("cancel and restart from {from}"));
        self.start_resync(from)
    }

    fn kill(&mut self) {
        if self.dead.is_some() || self.killable.is_empty() {
            return;
        }
        let m = self.killable[self.rng.below(self.killable.len() as u64) as usize];
        self.log.push(format!("kill member {m}"));
        self.array.kill_member(MemberIdx(m));
        self.dead = Some(m);
    }

    fn bring_back(&mut self) -> Result<(), String> {
        let Some(m) = self.dead.take() else {
            return Ok(());
        };
        self.array.run_sync();
        self.log.push(format!("member {m} comes back"));
        self.array
            .return_member(MemberIdx(m), false)
            .map_err(|e| format!("return: {e}"))?;
        self.array
            .engine
            .start_sync_where_dirty(SyncKind::Recover, 0)
            .map_err(|e| format!("recover: {e}"))?;
        self.array.run_sync();
        self.array.engine.allow_write_intent_clears(true);
        if !self.array.engine.is_whole() {
            return Err("not whole after the recover".into());
        }
        Ok(())
    }

    fn tell(&mut self) -> Result<(), String> {
        self.start_resync(0)?;
        for _ in 0..10 {
            match self.rng.below(4) {
                0 => self.writes(true)?,
                1 => self.writes(false)?,
                _ => {}
            }
            let span = Nanos(self.rng.below(12 * self.unit_time));
            self.array.pass_time(span);
            if self.array.engine.sync_progress().is_none() {
                break;
            }
            match self.rng.below(8) {
                0 | 1 => self.cut(false)?,
                2 | 3 => self.cut(true)?,
                4 => self.clean_stop()?,
                5 => self.restart_in_process()?,
                6 => self.kill(),
                _ => {}
            }
        }
        self.array.run_sync();
        self.bring_back()?;
        if self.array.engine.resync_owed() {
            self.start_resync(0)?;
            self.array.run_sync();
        }
        self.read_back("after the resync")?;
        self.array
            .engine
            .start_sync(SyncKind::Check, 0)
            .map_err(|e| format!("start check: {e}"))?;
        self.array.run_sync();
        let mut mismatches = 0;
        for event in self.array.take_events() {
            if let Event::SyncFinished {
                kind: SyncKind::Check,
                mismatches: found,
                ..
            } = event
            {
                mismatches += found;
            }
        }
        if mismatches > 0 {
            return Err(format!("the check found {mismatches} mismatches"));
        }
        self.read_back("after the check")?;
        Ok(())
    }
}

#[test]
fn resyncs_cut_off_stopped_and_degraded_leave_parity_agreeing_and_lose_nothing() {
    let seeds = common::story_seeds(300, common::spread(0x5eed));
    let stories = seeds.len() as u64;
    let mut failures = Vec::new();
    for seed in seeds {
        let mut story = Story::new(seed);
        if let Err(error) = story.tell() {
            eprintln!(
                "seed {seed} failed: {error}\nstory:\n  {}",
                story.log.join("\n  ")
            );
            failures.push(seed);
            if failures.len() > 5 {
                break;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failed seeds {failures:?} (replay one: XRAID_SEED=<seed> cargo test -p xraid-engine --test resync_cut)"
    );
    let cleared = CUTS_AFTER_CLEARS.load(Ordering::Relaxed);
    eprintln!("{stories} stories, {cleared} power cuts after the resync had cleared bits");
    // The stories are about cuts that find bits cleared: many tell one.
    assert!(
        stories < 20 || cleared >= stories / 4,
        "only {cleared} cuts in {stories} stories came after a clear"
    );
}
