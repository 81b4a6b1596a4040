//! Integrity mode: a checksum per 4 KiB block of every member's data area, so that a
//! block that reads back other than it was written (a flipped bit, a lost or misdirected
//! write) is caught and repaired from redundancy — something md cannot do, since with
//! two disagreeing copies it cannot tell which one is right.
//!
//! The engine keeps one [`ChecksumTable`] per device (driver slot) and:
//! - records the checksum of every whole block a data write carries, as the write is
//!   emitted (a block written in part becomes unknown);
//! - checks every data read as it completes: a block that disagrees with its entry is
//!   handled as a read error of that I/O — rebuilt from redundancy, returned, and
//!   rewritten (md's read-error correction), and counted as a checksum mismatch. A
//!   block whose entry is unknown is learned from what was read;
//! - writes the table pages changed since the last time before a *barrier* flush goes
//!   to that device (the flush before the bitmap clears bits, the end of a sync, a
//!   driver's checkpoint before it records state or stops — not clients' flushes): the
//!   flush is held until the pages are written.
//!
//! Why the pages need not be written with every data write: after a crash, the
//! entries on disk can disagree with the data only for blocks written since their page
//! was last written, and a bitmap bit is cleared only by a round whose (barrier) flush
//! comes after those writes completed — so such blocks all lie in chunks whose bits are
//! set. The driver therefore forgets the entries of dirty chunks after a crash
//! ([`Engine::forget_checksums_where_dirty`], everything without a bitmap) and the
//! resync learns them again.
//!
//! Entries are atomics so that threads reading members directly (the driver's read
//! bypass) can check their reads against the same table while the engine updates it.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use xraid_format::{
    block_entries, encode_page, BLOCK_BYTES, ENTRIES_PER_PAGE, PAGE_BYTES, PAGE_SECTORS, UNKNOWN,
};
use xraid_layout::{Level, MemberIdx};

use crate::buffers::{BufId, BufSlice};
use crate::engine::{Engine, IoTarget};
use crate::{Area, Event, FailReason, IoFailed, IoKind, MemberIo};

/// Sectors one entry covers.
const BLOCK_SECTORS: u64 = xraid_format::BLOCK_SECTORS;
/// Table pages written by one I/O at most (1 MiB).
const PAGES_PER_WRITE: u64 = 256;

/// One device's checksums: an entry per 4 KiB block of its data area
/// ([`xraid_format::block_entry`], or [`xraid_format::UNKNOWN`]).
#[derive(Debug)]
pub struct ChecksumTable {
    entries: Box<[AtomicU32]>,
}

/// What checking a read against a table found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every block checked agreed (or was unknown).
    Good,
    /// The blocks of member sectors `sectors` disagree with their entries (the first
    /// and last bad block, and what lies between).
    Bad { sectors: (u64, u64) },
}

impl ChecksumTable {
    /// A table holding `entries` (as read from a member's integrity area).
    pub fn new(entries: Vec<u32>) -> ChecksumTable {
        ChecksumTable {
            entries: entries.into_iter().map(AtomicU32::new).collect(),
        }
    }

    /// A table of `blocks` unknown entries (a device whose checksums are not known).
    pub fn unknown(blocks: u64) -> ChecksumTable {
        let n = usize::try_from(blocks).expect("a table fits memory");
        ChecksumTable {
            entries: (0..n).map(|_| AtomicU32::new(UNKNOWN)).collect(),
        }
    }

    /// A table of `blocks` blocks of zeros (a new sparse member).
    pub fn zeros(blocks: u64) -> ChecksumTable {
        ChecksumTable::new(vec![
            0;
            usize::try_from(blocks).expect("a table fits memory")
        ])
    }

    /// Entries in the table.
    pub fn blocks(&self) -> u64 {
        self.entries.len() as u64
    }

    /// The entry of block `block` (unknown past the table's end).
    pub fn get(&self, block: u64) -> u32 {
        usize::try_from(block)
            .ok()
            .and_then(|b| self.entries.get(b))
            .map_or(UNKNOWN, |e| e.load(Ordering::Relaxed))
    }

    fn set(&self, block: u64, value: u32) {
        if let Some(e) = usize::try_from(block)
            .ok()
            .and_then(|b| self.entries.get(b))
        {
            e.store(value, Ordering::Relaxed);
        }
    }

    /// Checks `data`, read from member sector `sector` on, against the table. Only
    /// whole blocks are checked; unknown entries pass.
    pub fn verify(&self, sector: u64, data: &[u8]) -> Verdict {
        let mut bad: Option<(u64, u64)> = None;
        whole_block_entries(sector, data, |block, got| {
            let want = self.get(block);
            if want != UNKNOWN && want != got {
                let at = block * BLOCK_SECTORS;
                bad = Some(match bad {
                    Some((first, _)) => (first, at + BLOCK_SECTORS),
                    None => (at, at + BLOCK_SECTORS),
                });
            }
        });
        match bad {
            Some(sectors) => Verdict::Bad { sectors },
            None => Verdict::Good,
        }
    }

    /// The bytes of table page `page`, as they go to the member.
    pub fn page_bytes(&self, page: u64) -> [u8; PAGE_BYTES] {
        let first = page * ENTRIES_PER_PAGE;
        let end = (first + ENTRIES_PER_PAGE).min(self.blocks());
        let entries: Vec<u32> = (first..end).map(|b| self.get(b)).collect();
        encode_page(&entries, page)
    }

    /// Table pages in all.
    pub fn pages(&self) -> u64 {
        xraid_format::pages_for(self.blocks())
    }
}

/// Calls `each(block, entry)` for the whole blocks of `data` read or written at
/// member sector `sector`, in order: their block numbers and table entries
/// (computed several at a time, see [`block_entries`]).
fn whole_block_entries(sector: u64, data: &[u8], mut each: impl FnMut(u64, u32)) {
    let skip_sectors = (BLOCK_SECTORS - sector % BLOCK_SECTORS) % BLOCK_SECTORS;
    let skip = usize::try_from(skip_sectors).expect("small") * 512;
    let first = sector.div_ceil(BLOCK_SECTORS);
    block_entries(data.get(skip..).unwrap_or_default(), |i, entry| {
        each(first + i as u64, entry);
    });
}

/// The engine's integrity state, when integrity mode is on.
#[derive(Debug)]
pub(crate) struct Integrity {
    /// Per driver slot, the table of the device in it.
    tables: Vec<Option<Arc<ChecksumTable>>>,
    /// Per slot, table pages changed since they were last written.
    dirty: Vec<DirtyPages>,
    /// Per slot, page writes in flight.
    writing: Vec<u32>,
    /// Per slot, barrier flushes waiting for those page writes.
    held: Vec<Vec<MemberIo>>,
    /// Per slot, bumped when a new device comes into it: page writes to the one
    /// before no longer count.
    generation: Vec<u32>,
    /// Per I/O key, the data read in flight to check when it completes.
    reads: Vec<Option<PendingRead>>,
    /// Per role, blocks found disagreeing with their checksums.
    mismatches: Vec<u64>,
    /// Whether table pages are written (not on an array opened to read only).
    persist: bool,
    /// P's entries worked out for the stripe write being emitted (see
    /// [`ParityFromData`]), for its write of P's rows to record.
    derived: Option<DerivedParity>,
}

/// Entries for the blocks of a write of `buf` at member sector `sector`.
#[derive(Debug)]
struct DerivedParity {
    buf: BufSlice,
    sector: u64,
    entries: Vec<u32>,
}

/// How a stripe write computed P's rows, for [`ParityFromData`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParityPlan {
    /// P xor the change of each data chunk written: P's old rows and the written
    /// chunks' old rows were read and checked.
    ReadModifyWrite,
    /// P from every data chunk's rows: written, or read and checked.
    ReconstructWrite,
}

/// P's entries for a RAID-4/5/6 stripe write, worked out from entries the tables hold
/// rather than hashed: an entry is a block's CRC-32C xor a zero block's, so it is
/// linear over xor, and P's block is the xor of its data blocks (or of its old self
/// and each written chunk's change). Begun before the data rows' writes are recorded
/// (their old entries), ended after (their new ones), before P's write is emitted.
/// Any entry unknown, or a row range that does not cover whole blocks, and P's rows
/// are hashed as any others are.
#[derive(Debug)]
pub(crate) struct ParityFromData {
    /// The member sectors P's write covers, whole blocks.
    sector: u64,
    blocks: usize,
    /// Per data role, the member sectors its write covers (RMW: the roles written).
    data: Vec<(MemberIdx, u64, u64)>,
    /// So far: RMW, P's old entries xor the written blocks' old entries; RCW, zero.
    acc: Vec<u32>,
}

impl ParityFromData {
    /// Begins the entries of P (role `p`) over member sectors `sector..end`, for a
    /// stripe write planned as `plan` whose data roles write `data` (member sectors;
    /// for a reconstruct-write every data role, an empty range where it writes none).
    pub(crate) fn begin(
        engine: &Engine,
        plan: ParityPlan,
        p: MemberIdx,
        (sector, end): (u64, u64),
        data: Vec<(MemberIdx, u64, u64)>,
    ) -> Option<ParityFromData> {
        let whole =
            |a: u64, b: u64| a.is_multiple_of(BLOCK_SECTORS) && b.is_multiple_of(BLOCK_SECTORS);
        if !whole(sector, end) || data.iter().any(|&(_, a, b)| !whole(a, b)) {
            return None;
        }
        let first = sector / BLOCK_SECTORS;
        let blocks = usize::try_from((end - sector) / BLOCK_SECTORS).ok()?;
        let mut acc = vec![0u32; blocks];
        if plan == ParityPlan::ReadModifyWrite {
            let p_table = table_of(engine, engine.slot_of(p))?;
            for (i, a) in acc.iter_mut().enumerate() {
                *a = known(p_table.get(first + i as u64))?;
            }
            xor_entries(engine, &data, first, &mut acc)?;
        }
        Some(ParityFromData {
            sector,
            blocks,
            data,
            acc,
        })
    }

    /// Ends the entries, the data rows' writes recorded, for P's write of `buf`
    /// (which the stripe's emit records next; [`forget_parity_entries`] after).
    pub(crate) fn end(self, engine: &mut Engine, buf: BufSlice) {
        if buf.len != self.blocks * BLOCK_BYTES {
            return;
        }
        let mut acc = self.acc;
        let first = self.sector / BLOCK_SECTORS;
        if xor_entries(engine, &self.data, first, &mut acc).is_none() {
            return;
        }
        engine.integrity_mut().derived = Some(DerivedParity {
            buf,
            sector: self.sector,
            entries: acc,
        });
    }
}

/// `entry`, if known.
fn known(entry: u32) -> Option<u32> {
    (entry != UNKNOWN).then_some(entry)
}

/// Xors into `acc` (blocks from `first` on) each data role's entries over the
/// blocks it covers; `None` where one is unknown.
fn xor_entries(
    engine: &Engine,
    data: &[(MemberIdx, u64, u64)],
    first: u64,
    acc: &mut [u32],
) -> Option<()> {
    for &(role, a, b) in data {
        let table = table_of(engine, engine.slot_of(role))?;
        for block in a / BLOCK_SECTORS..b / BLOCK_SECTORS {
            let i = usize::try_from(block.checked_sub(first)?).ok()?;
            *acc.get_mut(i)? ^= known(table.get(block))?;
        }
    }
    Some(())
}

/// The stripe write's emit is over: entries worked out for it no longer apply.
pub(crate) fn forget_parity_entries(engine: &mut Engine) {
    if let Some(i) = engine.integrity.as_mut() {
        i.derived = None;
    }
}

/// A set of page numbers, with the order they were added in.
#[derive(Debug, Default)]
struct DirtyPages {
    bits: Vec<u64>,
    list: Vec<u64>,
}

impl DirtyPages {
    fn insert(&mut self, page: u64) {
        let (word, bit) = ((page / 64) as usize, page % 64);
        if self.bits.len() <= word {
            self.bits.resize(word + 1, 0);
        }
        if self.bits[word] & (1 << bit) == 0 {
            self.bits[word] |= 1 << bit;
            self.list.push(page);
        }
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn take_sorted(&mut self) -> Vec<u64> {
        let mut pages = std::mem::take(&mut self.list);
        for &p in &pages {
            self.bits[(p / 64) as usize] &= !(1 << (p % 64));
        }
        pages.sort_unstable();
        pages
    }
}

impl Engine {
    /// Turns integrity mode on with a table per driver slot (`2 * raid_disks` of them;
    /// `None` where no device is, or where it keeps no checksums). Each table must
    /// describe what its device's integrity area holds; see
    /// [`Engine::set_checksum_table`] for a device whose area is out of date. Without
    /// `persist` (an array opened to read only) tables are checked and learned in
    /// memory but never written.
    pub fn enable_integrity(&mut self, tables: Vec<Option<Arc<ChecksumTable>>>, persist: bool) {
        let slots = 2 * self.member_states().len();
        let mut tables = tables;
        tables.resize_with(slots, || None);
        self.integrity = Some(Integrity {
            tables,
            dirty: (0..slots).map(|_| DirtyPages::default()).collect(),
            writing: vec![0; slots],
            held: (0..slots).map(|_| Vec::new()).collect(),
            generation: vec![0; slots],
            reads: Vec::new(),
            derived: None,
            mismatches: vec![0; slots / 2],
            persist,
        });
    }

    /// Whether integrity mode is on.
    pub fn integrity_on(&self) -> bool {
        self.integrity.is_some()
    }

    /// Puts `table` for the device now in driver slot `slot` (a spare, an added member,
    /// a replacement). With `write_all`, every page of it is written at the next
    /// barrier (its integrity area on disk says something else).
    pub fn set_checksum_table(
        &mut self,
        slot: MemberIdx,
        table: Option<Arc<ChecksumTable>>,
        write_all: bool,
    ) {
        let Some(integrity) = self.integrity.as_mut() else {
            return;
        };
        let s = slot.index();
        integrity.generation[s] = integrity.generation[s].wrapping_add(1);
        integrity.writing[s] = 0;
        integrity.dirty[s] = DirtyPages::default();
        // Flushes held for the device that left go out as they are.
        let held = std::mem::take(&mut integrity.held[s]);
        if write_all {
            if let Some(t) = &table {
                for page in 0..t.pages() {
                    integrity.dirty[s].insert(page);
                }
            }
        }
        integrity.tables[s] = table;
        for io in held {
            self.push_io(io);
        }
    }

    /// The checksum table of the device in driver slot `slot`, if integrity is on.
    pub fn checksum_table(&self, slot: MemberIdx) -> Option<&Arc<ChecksumTable>> {
        self.integrity.as_ref()?.tables.get(slot.index())?.as_ref()
    }

    /// Blocks of `role` found disagreeing with their checksums so far.
    pub fn checksum_mismatches(&self, role: MemberIdx) -> u64 {
        self.integrity
            .as_ref()
            .and_then(|i| i.mismatches.get(role.index()).copied())
            .unwrap_or(0)
    }

    /// Table pages changed and not written yet, over all devices.
    pub fn checksum_pages_dirty(&self) -> usize {
        self.integrity
            .as_ref()
            .map_or(0, |i| i.dirty.iter().map(|d| d.list.len()).sum())
    }

    /// After a crash: forgets the checksums of every block a write may have been cut
    /// off in — the chunks whose write-intent bits are set, or, without a bitmap,
    /// everything — so that nothing there is taken for corruption; reads (the resync's
    /// first) learn them again. Call it once the bitmap is loaded, before any I/O.
    pub fn forget_checksums_where_dirty(&mut self) {
        self.forget_where_dirty(None);
    }

    /// [`Engine::forget_checksums_where_dirty`] for the device in driver slot `slot`
    /// only: a member back after an absence, whose own table was loaded, and which
    /// catches up on the bitmap's dirty chunks.
    pub fn forget_checksums_where_dirty_on(&mut self, slot: MemberIdx) {
        self.forget_where_dirty(Some(slot));
    }

    fn forget_where_dirty(&mut self, only: Option<MemberIdx>) {
        let Some(integrity) = self.integrity.as_ref() else {
            return;
        };
        let tables: Vec<(usize, Arc<ChecksumTable>)> = integrity
            .tables
            .iter()
            .enumerate()
            .filter(|(s, _)| only.is_none_or(|o| o.index() == *s))
            .filter_map(|(s, t)| t.clone().map(|t| (s, t)))
            .collect();
        let member_ranges: Vec<(Option<MemberIdx>, Range<u64>)> = match self.intent.as_ref() {
            None => vec![(None, 0..u64::MAX)],
            Some(_) => {
                let ranges = crate::intent::set_ranges(self);
                if self.geo.level() == Level::Raid10 {
                    // The bitmap counts array sectors: find their copies.
                    let mut out = Vec::new();
                    for r in ranges {
                        let mut sector = r.start;
                        let end = r.end.min(self.geo.array_sectors());
                        while sector < end {
                            let copies = self.geo.copies(sector);
                            let run = copies.run_sectors.min(end - sector);
                            for place in copies.as_slice() {
                                out.push((Some(place.member), place.sector..place.sector + run));
                            }
                            sector += run;
                        }
                    }
                    out
                } else {
                    ranges.into_iter().map(|r| (None, r)).collect()
                }
            }
        };
        let roles = self.member_states().len();
        for (slot, table) in tables {
            let role = MemberIdx(u16::try_from(slot % roles).expect("few members"));
            for (member, range) in &member_ranges {
                if member.is_some_and(|m| m != role) {
                    continue;
                }
                let first = range.start / BLOCK_SECTORS;
                let end = range.end.div_ceil(BLOCK_SECTORS).min(table.blocks());
                for block in first..end {
                    if table.get(block) != UNKNOWN {
                        table.set(block, UNKNOWN);
                        self.integrity_mut().dirty[slot].insert(block / ENTRIES_PER_PAGE);
                    }
                }
            }
        }
    }

    fn integrity_mut(&mut self) -> &mut Integrity {
        self.integrity.as_mut().expect("integrity is on")
    }
}

/// A new device took `role`: the blocks its predecessor failed are not counted
/// against it.
pub(crate) fn device_changed(engine: &mut Engine, role: usize) {
    if let Some(count) = engine
        .integrity
        .as_mut()
        .and_then(|i| i.mismatches.get_mut(role))
    {
        *count = 0;
    }
}

/// The checksum table of the device in `slot`, in integrity mode.
fn table_of(engine: &Engine, slot: MemberIdx) -> Option<Arc<ChecksumTable>> {
    engine
        .integrity
        .as_ref()
        .and_then(|i| i.tables.get(slot.index()))
        .and_then(Clone::clone)
}

/// A data write to `slot` is being emitted: its whole blocks' checksums go in the
/// table, a block written in part becomes unknown.
pub(crate) fn record_write(engine: &mut Engine, slot: MemberIdx, sector: u64, buf: BufSlice) {
    let Some(table) = table_of(engine, slot) else {
        return;
    };
    let discard = engine.bufs.is_discard(buf.buf);
    let data = engine.bufs.slice(buf);
    let end = sector + data.len() as u64 / 512;
    let first_block = sector / BLOCK_SECTORS;
    let end_block = end.div_ceil(BLOCK_SECTORS);
    let whole_first = sector.div_ceil(BLOCK_SECTORS);
    let whole_end = end / BLOCK_SECTORS;
    let mut pages = Vec::new();
    let mut last_page = u64::MAX;
    let mut touch = |block: u64, pages: &mut Vec<u64>| {
        let page = block / ENTRIES_PER_PAGE;
        if page != last_page {
            pages.push(page);
            last_page = page;
        }
    };
    for block in first_block..end_block {
        if block < whole_first || block >= whole_end {
            table.set(block, UNKNOWN);
        }
        touch(block, &mut pages);
    }
    let derived = engine
        .integrity
        .as_ref()
        .and_then(|i| i.derived.as_ref())
        .filter(|d| d.buf == buf && d.sector == sector);
    if discard {
        // A discard buffer holds zeros (the range may become a hole, which reads so).
        for block in whole_first..whole_end {
            table.set(block, 0);
        }
    } else if let Some(d) = derived {
        // P's rows, their entries worked out from the data's (`ParityFromData`).
        debug_assert!(
            {
                let mut hashed = Vec::new();
                whole_block_entries(sector, data, |_, entry| hashed.push(entry));
                hashed == d.entries
            },
            "P's entries worked out from the data's differ from its blocks' at sector {sector}"
        );
        for (i, &entry) in d.entries.iter().enumerate() {
            table.set(whole_first + i as u64, entry);
        }
        engine.stats.parity_checksums_derived += 1;
    } else {
        whole_block_entries(sector, data, |block, entry| table.set(block, entry));
    }
    let dirty = &mut engine.integrity_mut().dirty[slot.index()];
    for page in pages {
        dirty.insert(page);
    }
}

/// A write to `slot` of member sectors `sector..sector + sectors` was refused (a medium
/// error) and the member serves on: the checksums `record_write` took for those blocks
/// describe data it never held. They become unknown, so the next read learns what it
/// does hold instead of calling it corrupt.
pub(crate) fn forget_refused(engine: &mut Engine, slot: MemberIdx, sector: u64, sectors: u64) {
    let Some(table) = table_of(engine, slot) else {
        return;
    };
    let blocks = sector / BLOCK_SECTORS..(sector + sectors).div_ceil(BLOCK_SECTORS);
    let mut pages = Vec::new();
    for block in blocks {
        table.set(block, UNKNOWN);
        let page = block / ENTRIES_PER_PAGE;
        if pages.last() != Some(&page) {
            pages.push(page);
        }
    }
    let dirty = &mut engine.integrity_mut().dirty[slot.index()];
    for page in pages {
        dirty.insert(page);
    }
}

/// A data read in flight, to check when it completes.
#[derive(Debug, Clone)]
pub(crate) struct PendingRead {
    slot: MemberIdx,
    /// The table of the device the read went to: if that device leaves the slot
    /// before the read is back, the slot's table may be a newcomer's by then.
    table: Arc<ChecksumTable>,
    /// Where the read starts and what it reads into.
    sector: u64,
    buf: BufSlice,
    /// For a read widened to whole blocks: the slice the engine asked for, and where
    /// its bytes start in `buf` (a scratch buffer freed at completion).
    wanted: Option<(BufSlice, usize)>,
}

/// A data read of `buf` at member `sector` is being emitted as I/O `key` to `slot`:
/// remembered, to check when it completes. A read that starts or ends inside a block
/// is widened to whole blocks (into a scratch buffer) so that those blocks can be
/// checked too; returns the sector and buffer to read.
pub(crate) fn note_read(
    engine: &mut Engine,
    key: usize,
    slot: MemberIdx,
    sector: u64,
    buf: BufSlice,
) -> (u64, BufSlice) {
    let Some(integrity) = engine.integrity.as_ref() else {
        return (sector, buf);
    };
    let Some(table) = integrity.tables.get(slot.index()).and_then(Clone::clone) else {
        return (sector, buf);
    };
    let end = sector + buf.len as u64 / 512;
    let wide_start = sector / BLOCK_SECTORS * BLOCK_SECTORS;
    // Not past the data area, which may end inside a block (that block is never
    // checked).
    let wide_end = match end.next_multiple_of(BLOCK_SECTORS) {
        e if e > engine.geo.member_sectors() => end,
        e => e,
    };
    let (read_sector, read_buf, wanted) = if wide_start == sector && wide_end == end {
        (sector, buf, None)
    } else {
        let len = usize::try_from(wide_end - wide_start).expect("small") * 512;
        let scratch = engine.bufs.alloc(len);
        let at = usize::try_from(sector - wide_start).expect("small") * 512;
        let slice = BufSlice {
            buf: scratch,
            offset: 0,
            len,
        };
        (wide_start, slice, Some((buf, at)))
    };
    let integrity = engine.integrity_mut();
    if integrity.reads.len() <= key {
        integrity.reads.resize(key + 1, None);
    }
    integrity.reads[key] = Some(PendingRead {
        slot,
        table,
        sector: read_sector,
        buf: read_buf,
        wanted,
    });
    (read_sector, read_buf)
}

/// I/O `key` completed with `result`. A data read whose blocks disagree with their
/// checksums becomes a read error (the engine repairs it from redundancy); unknown
/// entries are learned. `role` is the role (or replacement) it was read for; `stale`
/// when it came from a device that has left the role since (checked all the same, as
/// its data may still serve, but nothing is learned or counted, and a mismatch fails
/// it as gone).
pub(crate) fn check_read(
    engine: &mut Engine,
    key: usize,
    role: Option<MemberIdx>,
    stale: bool,
    result: Result<(), IoFailed>,
) -> Result<(), IoFailed> {
    let Some(integrity) = engine.integrity.as_mut() else {
        return result;
    };
    let Some(read) = integrity.reads.get_mut(key).and_then(Option::take) else {
        return result;
    };
    let result = check_data(engine, &read, role, stale, result);
    if let Some((wanted, at)) = read.wanted {
        // A widened read: the part asked for goes where the engine wants it.
        let (dst, src) = engine.bufs.pair_mut(
            wanted,
            BufSlice {
                buf: read.buf.buf,
                offset: at,
                len: wanted.len,
            },
        );
        dst.copy_from_slice(src);
        engine.bufs.free(read.buf.buf);
    }
    result
}

fn check_data(
    engine: &mut Engine,
    read: &PendingRead,
    role: Option<MemberIdx>,
    stale: bool,
    result: Result<(), IoFailed>,
) -> Result<(), IoFailed> {
    let PendingRead {
        slot,
        ref table,
        sector,
        buf,
        ..
    } = *read;
    result?;
    let data = engine.bufs.slice(buf);
    let mut bad: Option<(u64, u64)> = None;
    let mut learned = Vec::new();
    whole_block_entries(sector, data, |block, got| {
        let want = table.get(block);
        if want == UNKNOWN {
            if got != UNKNOWN && !stale {
                table.set(block, got);
                learned.push(block / ENTRIES_PER_PAGE);
            }
        } else if want != got {
            let at = block * BLOCK_SECTORS;
            bad = Some(bad.map_or((at, at + BLOCK_SECTORS), |(first, _)| {
                (first, at + BLOCK_SECTORS)
            }));
        }
    });
    let integrity = engine.integrity_mut();
    for page in learned {
        integrity.dirty[slot.index()].insert(page);
    }
    let Some((first, end)) = bad else {
        return result;
    };
    if stale {
        // The device left its role while the read was out: perhaps failed by this
        // very mismatch, found in another read of it. Not the role's fault now; the
        // operation plans again without it.
        return Err(IoFailed::Gone);
    }
    let Some(role) = role else {
        return result;
    };
    let roles = integrity.mismatches.len();
    let counted = MemberIdx(u16::try_from(role.index() % roles).expect("few members"));
    integrity.mismatches[counted.index()] += (end - first) / BLOCK_SECTORS;
    engine.stats.checksum_mismatches += 1;
    engine.push_event(Event::ChecksumMismatch {
        member: counted,
        sector: first,
        sectors: end - first,
    });
    Err(IoFailed::Medium)
}

/// Whether a flush of `target` must wait for the table pages: the flush before the
/// bitmap clears bits (so that no block whose entry on disk is stale lies outside a
/// dirty chunk), the flushes ending a sync, and checkpoints (the driver records state
/// or stops). Clients' flushes do not: see the module's documentation.
pub(crate) fn is_barrier(engine: &Engine, target: &IoTarget) -> bool {
    match target {
        IoTarget::Flush { req, .. } => engine.reqs.get(*req).checkpoint,
        IoTarget::SyncFlush { .. } => true,
        IoTarget::Intent { .. } => crate::intent::clearing(engine),
        _ => false,
    }
}

/// A barrier flush `io` for `member` (role or replacement) is about to go out: if
/// its device has table pages to write (or page writes in flight), they go first and
/// the flush waits for them. Returns the flush when it may go now.
pub(crate) fn hold_flush(engine: &mut Engine, member: MemberIdx, io: MemberIo) -> Option<MemberIo> {
    let slot = io.member.index();
    let Some(integrity) = engine.integrity.as_mut().filter(|i| i.persist) else {
        return Some(io);
    };
    if integrity.tables.get(slot).and_then(Clone::clone).is_none() {
        return Some(io);
    }
    if integrity.writing[slot] > 0 {
        // Pages are on their way: the flush waits for them, and pages dirtied since go
        // after them, never beside them (two writes of one page in flight may land in
        // either order, the older last).
        integrity.held[slot].push(io);
        return None;
    }
    if integrity.dirty[slot].is_empty() {
        return Some(io);
    }
    let io_slot = io.member;
    integrity.held[slot].push(io);
    write_pages(engine, member, io_slot);
    None
}

/// Writes the table pages dirtied on the device in `slot` (runs of neighbouring pages
/// as one write) through `member`.
fn write_pages(engine: &mut Engine, member: MemberIdx, io_slot: MemberIdx) {
    let slot = io_slot.index();
    let integrity = engine.integrity_mut();
    let Some(table) = integrity.tables.get(slot).and_then(Clone::clone) else {
        return;
    };
    let pages = integrity.dirty[slot].take_sorted();
    let generation = integrity.generation[slot];
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for page in pages {
        match runs.last_mut() {
            Some((start, n)) if *start + *n == page && *n < PAGES_PER_WRITE => *n += 1,
            _ => runs.push((page, 1)),
        }
    }
    for (start, n) in runs {
        let len = usize::try_from(n).expect("few pages") * PAGE_BYTES;
        let buf = engine.bufs.alloc(len);
        let bytes = engine.bufs.get_mut(buf);
        for i in 0..n {
            let at = usize::try_from(i).expect("few pages") * PAGE_BYTES;
            bytes[at..at + PAGE_BYTES].copy_from_slice(&table.page_bytes(start + i));
        }
        engine.integrity_mut().writing[slot] += 1;
        engine.emit_to(
            member,
            IoKind::Write,
            Area::Checksums,
            start * PAGE_SECTORS,
            BufSlice {
                buf,
                offset: 0,
                len,
            },
            IoTarget::ChecksumPages {
                member,
                slot: io_slot,
                buf,
                generation,
            },
        );
    }
}

/// A table page write completed: once a device has none left in flight, its held
/// flushes go out. A device that cannot take its table is failed, as for any write.
pub(crate) fn on_pages_written(
    engine: &mut Engine,
    member: MemberIdx,
    slot: MemberIdx,
    buf: BufId,
    generation: u32,
    result: Result<(), IoFailed>,
    stale: bool,
) {
    engine.bufs.free(buf);
    let Some(integrity) = engine.integrity.as_mut() else {
        return;
    };
    let s = slot.index();
    if integrity.generation[s] != generation {
        return;
    }
    if let (Err(failure), false) = (result, stale) {
        let reason = match failure {
            IoFailed::Gone => FailReason::DeviceGone,
            IoFailed::Medium => FailReason::WriteError,
        };
        engine.fail(member, reason);
    }
    let integrity = engine.integrity_mut();
    integrity.writing[s] = integrity.writing[s].saturating_sub(1);
    if integrity.writing[s] > 0 || integrity.held[s].is_empty() {
        return;
    }
    if !integrity.dirty[s].is_empty() && engine.is_present(member) {
        // Pages dirtied while these were on their way go before the held flushes too.
        write_pages(engine, member, slot);
        if engine.integrity_mut().writing[s] > 0 {
            return;
        }
    }
    let integrity = engine.integrity_mut();
    for io in std::mem::take(&mut integrity.held[s]) {
        engine.push_io(io);
    }
}
