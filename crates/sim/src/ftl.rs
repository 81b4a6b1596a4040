//! The flash translation layer of a simulated SSD: which flash page holds each logical
//! page, which blocks are free, and the garbage collection that reclaims blocks once
//! the free ones run out — the cost of over-provisioning, made visible as write
//! amplification.
//!
//! The map is page-mapped and striped: logical page `l` always lives on die `l % dies`
//! (as `l / dies`, its index on that die), so consecutive pages spread over the
//! channels and dies, and each die is its own small FTL with its own share of the
//! spare blocks. A write invalidates the page's old copy and takes the next page of
//! the die's open block. When the open block is full and only one free block is left,
//! that block is opened and garbage collection copies into it the valid pages of the
//! victim, the closed block with the fewest valid pages (greedy), then erases the
//! victim, which becomes the free block kept for next time.
//!
//! The drive starts in the state a sequential fill leaves: every logical page written
//! once, in order, each die's blocks full from its first one, the rest erased. A
//! random writer therefore reaches garbage collection once it has written the spare
//! share, as on a drive in use. Nothing here is timed: the drive (`ssd`) turns the
//! copies and erases into die time. Only what a run changes is stored (map chunks and
//! block owners are made on first write), so a large drive costs memory only as far
//! as a run writes.

use crate::ssd_params::SsdModel;

/// Map entries made at a time, on a chunk's first write: 4 KiB of map.
const CHUNK: usize = 1024;

/// What one block is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Open,
    Closed,
}

/// The FTL of one die.
#[derive(Debug, Clone)]
struct DieFtl {
    /// Logical pages this die holds (its index `k` runs below this).
    pages: u64,
    /// Where each logical page is, by chunk of `CHUNK`; an absent chunk is still where
    /// the fill put it (page index `k`).
    map: Vec<Option<Box<[u32]>>>,
    state: Vec<State>,
    valid: Vec<u32>,
    /// A bit per page: whether it holds the current copy of its logical page.
    bits: Vec<u64>,
    /// For blocks written in the run, the logical page of each page; other blocks
    /// hold what the fill put there (page `p` holds logical `p`).
    owner: Vec<Option<Box<[u32]>>>,
    /// Erased blocks, oldest erase first.
    free: std::collections::VecDeque<u32>,
    open: u32,
    /// Next page of the open block.
    next: u32,
}

/// Flash work a write brought on, besides its own program: pages garbage collection
/// copied (a read and a program each, inside the die) and blocks it erased.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GcWork {
    pub copies: u32,
    pub erases: u32,
}

/// The FTL of a whole drive.
#[derive(Debug, Clone)]
pub(crate) struct Ftl {
    dies: u64,
    ppb: u32,
    words: usize,
    die: Vec<DieFtl>,
}

impl Ftl {
    /// The state a sequential fill of every logical page leaves.
    pub(crate) fn new(model: &SsdModel) -> Ftl {
        let dies = u64::from(model.dies);
        let ppb = model.params.pages_per_block;
        let blocks = model.params.blocks_per_die;
        let words = (ppb as usize).div_ceil(64);
        let die = (0..dies)
            .map(|d| {
                // Die d holds the logical pages d, d + dies, d + 2·dies, ...
                let pages = (model.logical_pages + dies - 1 - d) / dies;
                DieFtl::filled(pages, blocks, ppb, words)
            })
            .collect();
        Ftl {
            dies,
            ppb,
            words,
            die,
        }
    }

    /// The die that holds logical page `lpn`.
    pub(crate) fn die_of(&self, lpn: u64) -> usize {
        (lpn % self.dies) as usize
    }

    /// Writes logical page `lpn` anew: its old copy becomes invalid and the next page
    /// of its die's open block takes it, after garbage collection if the die needed a
    /// block. Returns the work collection did.
    pub(crate) fn write(&mut self, lpn: u64) -> GcWork {
        let d = self.die_of(lpn);
        let k = lpn / self.dies;
        let (ppb, words) = (self.ppb, self.words);
        let die = &mut self.die[d];
        assert!(k < die.pages, "logical page {lpn} beyond the drive");
        let old = die.lookup(k);
        die.clear(old, ppb, words);
        let mut work = GcWork::default();
        if die.next == ppb {
            work = die.open_next(ppb, words);
        }
        die.place(k, ppb, words);
        work
    }

    /// Checks every invariant (tests): each logical page's map entry points at a valid
    /// page that names it, valid counts match the bits, free blocks hold nothing, and
    /// the die holds exactly its logical pages.
    #[cfg(test)]
    pub(crate) fn self_check(&self) {
        for die in &self.die {
            let mut total = 0u64;
            for b in 0..die.state.len() {
                let count: u32 = (0..self.ppb)
                    .map(|i| u32::from(die.is_valid(b as u32 * self.ppb + i, self.words, self.ppb)))
                    .sum();
                assert_eq!(count, die.valid[b], "block {b}'s valid count");
                if die.state[b] == State::Free {
                    assert_eq!(count, 0, "free block {b} holds data");
                }
                total += u64::from(count);
            }
            assert_eq!(total, die.pages, "valid pages against logical pages");
            for k in 0..die.pages {
                let p = die.lookup(k);
                assert!(die.is_valid(p, self.words, self.ppb), "page of {k} invalid");
                assert_eq!(die.owner_of(p, self.ppb), k, "owner of {k}");
            }
        }
    }
}

impl DieFtl {
    fn filled(pages: u64, blocks: u32, ppb: u32, words: usize) -> DieFtl {
        let full = (pages / u64::from(ppb)) as u32;
        let rest = (pages % u64::from(ppb)) as u32;
        let mut die = DieFtl {
            pages,
            map: vec![None; (pages as usize).div_ceil(CHUNK)],
            state: vec![State::Free; blocks as usize],
            valid: vec![0; blocks as usize],
            bits: vec![0; blocks as usize * words],
            owner: vec![None; blocks as usize],
            free: std::collections::VecDeque::new(),
            open: 0,
            next: 0,
        };
        // A full block's bits: every word all ones but the last one's unused high bits.
        let mut full_bits = vec![u64::MAX; words];
        if !ppb.is_multiple_of(64) {
            full_bits[words - 1] = (1u64 << (ppb % 64)) - 1;
        }
        for b in 0..full as usize {
            die.state[b] = State::Closed;
            die.valid[b] = ppb;
            die.bits[b * words..(b + 1) * words].copy_from_slice(&full_bits);
        }
        // The fill stopped inside block `full` when the pages do not fill whole
        // blocks: it is the open block; otherwise the first erased one is.
        die.free = (full..blocks).collect();
        die.open = full;
        let _ = die.free.pop_front();
        die.state[full as usize] = State::Open;
        die.owner[full as usize] = Some((0..ppb).map(|i| full * ppb + i).collect());
        for i in 0..rest {
            die.set(full * ppb + i, words, ppb);
        }
        die.valid[full as usize] = rest;
        die.next = rest;
        die
    }

    fn lookup(&self, k: u64) -> u32 {
        let (c, i) = (k as usize / CHUNK, k as usize % CHUNK);
        match &self.map[c] {
            Some(chunk) => chunk[i],
            None => k as u32,
        }
    }

    fn remap(&mut self, k: u64, p: u32) {
        let (c, i) = (k as usize / CHUNK, k as usize % CHUNK);
        let chunk = self.map[c].get_or_insert_with(|| {
            let first = (c * CHUNK) as u32;
            (first..first + CHUNK as u32).collect()
        });
        chunk[i] = p;
    }

    fn bit(p: u32, words: usize, ppb: u32) -> (usize, u64) {
        let (b, i) = ((p / ppb) as usize, p % ppb);
        (b * words + i as usize / 64, 1u64 << (i % 64))
    }

    fn is_valid(&self, p: u32, words: usize, ppb: u32) -> bool {
        let (w, m) = Self::bit(p, words, ppb);
        self.bits[w] & m != 0
    }

    fn set(&mut self, p: u32, words: usize, ppb: u32) {
        let (w, m) = Self::bit(p, words, ppb);
        self.bits[w] |= m;
    }

    /// Invalidates page `p`.
    fn clear(&mut self, p: u32, ppb: u32, words: usize) {
        let (w, m) = Self::bit(p, words, ppb);
        assert!(self.bits[w] & m != 0, "page {p} overwritten while invalid");
        self.bits[w] &= !m;
        self.valid[(p / ppb) as usize] -= 1;
    }

    /// The logical page (die index) page `p` was written for.
    fn owner_of(&self, p: u32, ppb: u32) -> u64 {
        match &self.owner[(p / ppb) as usize] {
            Some(o) => u64::from(o[(p % ppb) as usize]),
            None => u64::from(p),
        }
    }

    /// Puts logical page `k` in the open block's next page.
    fn place(&mut self, k: u64, ppb: u32, words: usize) {
        let b = self.open;
        let p = b * ppb + self.next;
        let Some(owner) = self.owner[b as usize].as_mut() else {
            unreachable!("an open block has its owners");
        };
        owner[self.next as usize] = k as u32;
        self.set(p, words, ppb);
        self.valid[b as usize] += 1;
        self.remap(k, p);
        self.next += 1;
    }

    /// Closes the full open block and opens the next free one; with only that one
    /// left, collects the greediest victim into it first.
    fn open_next(&mut self, ppb: u32, words: usize) -> GcWork {
        self.state[self.open as usize] = State::Closed;
        let Some(b) = self.free.pop_front() else {
            unreachable!("a die always keeps a free block for collection");
        };
        self.state[b as usize] = State::Open;
        self.open = b;
        self.next = 0;
        let owner = self.owner[b as usize].get_or_insert_with(|| vec![0; ppb as usize].into());
        owner.fill(0);
        if !self.free.is_empty() {
            return GcWork::default();
        }
        let victim = self.victim(ppb);
        let mut work = GcWork {
            copies: 0,
            erases: 1,
        };
        for i in 0..ppb {
            let p = victim * ppb + i;
            if self.is_valid(p, words, ppb) {
                let k = self.owner_of(p, ppb);
                self.clear(p, ppb, words);
                self.place(k, ppb, words);
                work.copies += 1;
            }
        }
        self.state[victim as usize] = State::Free;
        self.free.push_back(victim);
        work
    }

    /// The closed block with the fewest valid pages (the lowest-numbered of equals).
    fn victim(&self, ppb: u32) -> u32 {
        let mut best: Option<(u32, u32)> = None;
        for (b, (&s, &v)) in self.state.iter().zip(&self.valid).enumerate() {
            if s == State::Closed && best.is_none_or(|(_, bv)| v < bv) {
                best = Some((b as u32, v));
            }
        }
        let Some((b, v)) = best else {
            unreachable!("the spare blocks leave a closed block to collect");
        };
        // The spare blocks (checked when the model was built) keep some page of the
        // closed blocks invalid, so the copies leave room in the open block.
        assert!(v < ppb, "victim block {b} is full of valid pages");
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::ssd_params::SsdParams;
    use xraid_engine::Nanos;

    fn model(op_ppm: u64) -> SsdModel {
        SsdParams {
            channels: 2,
            dies_per_channel: 2,
            page_bytes: 4096,
            pages_per_block: 16,
            blocks_per_die: 40,
            over_provisioning_ppm: op_ppm,
            page_read: Nanos(50_000),
            page_program: Nanos(500_000),
            block_erase: Nanos(2_000_000),
            channel_bytes_per_sec: 100_000_000,
            command_overhead: Nanos(10_000),
            interface_bytes_per_sec: 300_000_000,
            queue_depth: 32,
        }
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_fresh_drive_holds_every_page_once_and_stays_consistent() {
        let m = model(150_000);
        let mut ftl = Ftl::new(&m);
        ftl.self_check();
        let mut rng = Rng::new(3);
        for step in 0..20_000 {
            let lpn = rng.below(m.logical_pages);
            ftl.write(lpn);
            if step % 997 == 0 {
                ftl.self_check();
            }
        }
        ftl.self_check();
    }

    #[test]
    fn collection_starts_when_the_spare_share_is_written() {
        let m = model(150_000);
        let mut ftl = Ftl::new(&m);
        let spare = m.physical_pages() - m.logical_pages;
        // Each die spends its free pages before it collects; the last free block of
        // each die is kept for collection, so the first collection comes a little
        // before every spare page is written.
        let reserve = u64::from(m.dies) * 16;
        let mut rng = Rng::new(9);
        let mut written = 0u64;
        let first = loop {
            let w = ftl.write(rng.below(m.logical_pages));
            written += 1;
            if w.erases > 0 {
                break written;
            }
        };
        assert!(first <= spare - reserve + u64::from(m.dies), "{first}");
        assert!(first > (spare - reserve) / 2, "{first}");
    }

    #[test]
    fn sequential_rewrites_need_no_copies() {
        // Rewriting the drive in order invalidates whole blocks before they are
        // collected: greedy collection finds empty victims and copies nothing.
        let m = model(150_000);
        let mut ftl = Ftl::new(&m);
        let mut copies = 0;
        for _ in 0..3 {
            for lpn in 0..m.logical_pages {
                copies += ftl.write(lpn).copies;
            }
        }
        ftl.self_check();
        assert_eq!(copies, 0);
    }
}
