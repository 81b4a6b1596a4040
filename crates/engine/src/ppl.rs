//! The stripe log: closes the RAID-4/5/6 write hole — md's problem that its PPL
//! (kernel Documentation/driver-api/md/raid5-ppl.rst) and raid5-cache journal answer;
//! this is xraid's own answer, in xraid's own format, where md ignores it.
//!
//! The hole: a crash in the middle of a stripe update can leave parity disagreeing with
//! the data; with a member missing (then, later before parity is put right, or gone
//! with the power itself), that member's data — which nobody was writing — is rebuilt
//! wrong.
//!
//! Before a stripe write goes to the members, an *entry* is written and flushed to the
//! log ring of the stripe's parity member (Q's if P is missing): the stripe, its rows
//! lo..hi, the rows each data chunk the write covers, and the rows lo..hi of every data
//! chunk whose member cannot take the write (missing, or not rebuilt there yet) — or
//! takes it but would not be trusted there after a crash (rebuilt there since the last
//! recorded checkpoint) — as they are after it: new data where written, rebuilt data
//! elsewhere. Where the write leaves chunks alone that the entry does not carry, it
//! also carries their *partial parity* (md's PPL): row by row, the XOR of those chunks
//! — and on a whole RAID-6 their *partial Q* too, their Q syndrome. Every RAID-6 entry
//! goes to both parity members' rings (Q's follows once P's has given it room), since
//! either may die with the power.
//!
//! When the engine starts, the entries not known durable are replayed in order: parity
//! of the rows is recomputed from the data members as they are now and the logged
//! rows, which also go back to their members that are present. Parity then agrees with
//! whatever of each write landed, a missing member's data is what the log last said it
//! was, and a member missing since needs no resync to be rebuilt right. A data member
//! that was present for the write and is gone at the replay (it died with the power) is
//! worked out: where the write left it alone, its rows are the partial parity XOR the
//! other chunks the write left alone (two such chunks: the partial parity and partial
//! Q solved as a two-member degraded read is); where the write covered it (its rows
//! unknown: the write may or may not have reached it), they are what parity says. Each
//! entry writes only the rows no later entry of its stripe covers, so that a later one
//! finds the rows its partial syndromes count on, and parity, as the cut left them.
//!
//! md's PPL breaks when an earlier, unflushed write to the same stripe is lost and a
//! later one is not: the later partial parity counts the earlier write's data. Here a
//! write whose partial parity would count rows that an earlier write, not yet durable,
//! covered carries those chunks' rows (read for it: reconstruct-write) while the entry
//! stays within the ring's bound for one entry, and otherwise waits for those writes to
//! be durable (a checkpoint) before its entry goes out.
//!
//! Entries go out in *batches*, one per member at a time (as the write-intent bitmap's
//! rounds do): entries that become ready while a member's batch is being written and
//! flushed — or during the same engine call — wait and form its next batch, which
//! takes its seqs and ring room then and goes to the ring back to back in one write
//! (two if the ring wraps), followed by one flush — or as durable (FUA) writes and no
//! flush, where the driver takes them ([`crate::EngineConfig::fua_writes`]). Only when
//! the batch is durable do its stripe writes go to the members; so under load many
//! stripe writes share one log write and flush instead of paying one each.
//!
//! Entries are known durable once a flush that began after their write finished has
//! completed; the rings then say so with a *marker* (two slots at the start of each
//! ring, written in turn) before the flush is acknowledged, and every entry carries the
//! newest durable seq known when it was written. Recovery replays only entries above
//! the largest durable seq it finds, so a replay never undoes a later durable write.
//!
//! A ring belongs to the device, not the role: a replacement's ring never gets the
//! entries written before it takes the role over, so the takeover waits until the
//! writes logged on the role's ring are finished and flushed ([`ready_for_takeover`]).
//!
//! Layout (little-endian, whole sectors): header — magic, seq, durable, stripe, lo, hi,
//! record count, flags (bit 1: marker), header sectors, total sectors, checksum
//! (CRC-32C of the bytes before the field and of those after it; FNV-1a 64 in the
//! first format), tag, then per record its data index u16, kind u16 (1: a chunk's rows
//! lo..hi, carried; 2: the rows from..to the write covers of a chunk, not carried; 3:
//! the partial parity of rows lo..hi, carried; 4: the partial Q of rows lo..hi,
//! carried), from u32, to u32 — then the carried rows, in record order. A ring holds
//! its two marker slots of [`MARKER_SECTORS`] first and entries from [`RING_START`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use xraid_layout::{MemberIdx, SECTOR_BYTES};

use crate::buffers::{BufId, BufSlice};
use crate::engine::{member_idx, sectors_to_bytes, Engine, IoTarget};
use crate::{Area, Event, FailReason, IoFailed, IoKind, MemberState, Nanos, Request};

/// Entries and markers as written now: checksummed with CRC-32C.
const MAGIC: u64 = 0x326c_7064_6961_7278; // "xraidpl2"
/// Entries and markers of the first format (before 2026-11-24), still replayed: their
/// checksum is FNV-1a, and every segment record carries rows.
const MAGIC_FNV: u64 = 0x6c70_7064_6961_7278; // "xraidppl"
const HEADER_FIXED: usize = 72;
const SEG_BYTES: usize = 12;
/// A marker: no write, only "every seq up to `durable` is durable".
const FLAG_MARKER: u32 = 2;
/// On a marker: the replay (or one before it) could not vouch for parity everywhere,
/// and no resync has completed since: a later open owes the resync too.
const FLAG_RESYNC_OWED: u32 = 4;
/// On a flagged marker: which members' rings were lost (a mask at byte 72) and which
/// members were missing when the stripes those rings held were last listed (a mask
/// at byte 80). Without it (older markers, or more than 64 members) every ring counts
/// as lost and no member as listed for.
const FLAG_MASKS: u32 = 8;
/// On a flagged marker with masks: entries were skipped besides the lost rings'
/// (rows that failed to read), in stripes the marker does not name: until the owed
/// resync completes no stripe's parity is vouched for (see [`vouches_for`]). A
/// flagged marker without masks counts so too.
const FLAG_SKIPPED: u32 = 16;
/// On a flagged marker: the stripes (and rows) whose entries were skipped, a count at
/// [`SKIPS_AT`] and then as many records of stripe (u64), lo and hi (u32) as the
/// marker has room for ([`marker_room`]):
/// their parity stays in doubt at the next open (see [`vouches_for`]). More than fit
/// set [`FLAG_SKIPPED`] instead.
const FLAG_SKIP_LIST: u32 = 32;
/// On any marker: rows of data members whose contents nobody knows (see
/// [`crate::unknown`]), as records in the room the skipped bands leave (one per role
/// at least, first), their stripe field tagged with [`UNKNOWN_RECORD`] (and
/// [`UNKNOWN_SPAN`]) and the role in bits 48..62. A marker's seq field numbers it: of
/// the newest markers, the one numbered highest names them.
const FLAG_UNKNOWN_ROWS: u32 = 64;
/// On every entry and marker since 2026-11-29: its writer stamps the superblocks it
/// writes while it keeps the log, so a newest superblock without the stamp says
/// something else wrote the array after it (see `Engine::superblocks_unstamped`).
const FLAG_STAMPED: u32 = 128;
const UNKNOWN_RECORD: u64 = 1 << 63;
/// An unknown-rows record that is a *span*: every row of its role from its stripe to
/// the stripe its lo (low half) and hi (high half) fields say.
const UNKNOWN_SPAN: u64 = 1 << 62;
/// The largest stripe an unknown-rows record names (bits 0..48).
const UNKNOWN_STRIPE_MAX: u64 = (1 << 48) - 1;
const SKIPS_AT: usize = MASKS_AT + 16;
const SKIP_BYTES: usize = 16;
const MASKS_AT: usize = HEADER_FIXED;
/// A flagged marker's masks: lost rings, and members their stripes are listed for.
type RingMasks = (u64, u64);
/// Sectors of one marker; every ring starts with two marker slots, written in turn so
/// that a torn marker write leaves the other slot whole. 4 KiB: room for 250 records
/// (skipped bands and unknown rows), and one whole block of a 4 KiB-sector device.
const MARKER_SECTORS: u64 = 8;
/// Sectors of a marker written before 2026-11-28 (26 records). A ring whose newest
/// marker is one keeps them while its entries still need a replay (see
/// [`LogState::marker_sectors`]): slot 0 of the 4 KiB layout covers both old slots and
/// the first entries, which a cut while it is written would take away.
const LEGACY_MARKER_SECTORS: u64 = 1;
/// Where entries start: past both slots of the larger layout, so that a ring written
/// with either keeps its markers apart from its entries.
pub(crate) const RING_START: u64 = 2 * MARKER_SECTORS;

/// The records a marker of `sectors` holds.
const fn marker_room(sectors: u64) -> usize {
    (sectors as usize * 512 - SKIPS_AT - 8) / SKIP_BYTES
}

/// The records (skipped bands and unknown rows) a marker names: past them, unknown
/// rows spill into bad block logs or merge into spans, and skipped stripes count as
/// skipped elsewhere.
pub const MARKER_RECORDS: usize = marker_room(MARKER_SECTORS);

/// What one of an entry's segment records says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SegKind {
    /// Rows lo..hi of a data chunk, carried in the payload (its member could not take
    /// the write, or must not be trusted for it).
    Rows = 1,
    /// The rows `lo..hi` (the record's own) of a data chunk that the write covers; no
    /// payload.
    Written = 2,
    /// The partial parity of rows lo..hi, carried in the payload: the XOR of the data
    /// chunks the write leaves alone there and whose rows the entry does not carry.
    PartialParity = 3,
    /// The partial Q of rows lo..hi (RAID-6), carried in the payload: the same chunks'
    /// Q syndrome, each times its coefficient.
    PartialQ = 4,
}

impl SegKind {
    /// A record of the stripe's syndromes rather than of one data chunk.
    fn is_syndrome(self) -> bool {
        matches!(self, SegKind::PartialParity | SegKind::PartialQ)
    }
}

/// One segment record of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogSeg {
    data_index: u16,
    kind: SegKind,
    lo: u32,
    hi: u32,
}

impl LogSeg {
    fn has_payload(&self) -> bool {
        self.kind != SegKind::Written
    }
}

/// The most sectors one entry takes for a stripe of `data_disks` data chunks of
/// `chunk_sectors`, with `parity_count` parity chunks: what a log ring must hold twice.
pub fn log_entry_max_sectors(data_disks: u16, chunk_sectors: u32, parity_count: u8) -> u64 {
    let header = (HEADER_FIXED + SEG_BYTES * usize::from(data_disks)).div_ceil(512) as u64;
    // At most one logged chunk per missing member (a generous bound: twice that).
    header + 2 * u64::from(parity_count) * u64::from(chunk_sectors)
}

/// The sectors a log ring needs for a stripe as [`log_entry_max_sectors`] takes it:
/// the two marker slots, and room for two of the largest entries.
pub fn log_ring_sectors_needed(data_disks: u16, chunk_sectors: u32, parity_count: u8) -> u64 {
    RING_START + 2 * log_entry_max_sectors(data_disks, chunk_sectors, parity_count)
}

fn header_sectors(segs: usize) -> u64 {
    (HEADER_FIXED + SEG_BYTES * segs).div_ceil(512) as u64
}

/// The checksum of an entry or marker: CRC-32C of what comes before the checksum
/// field, and CRC-32C of what follows it. (FNV-1a, byte by byte, cost a 4 KiB write's
/// entry more than its partial parity did.)
fn checksum(bytes: &[u8]) -> u64 {
    let head = xraid_format::crc32c(&bytes[..56]);
    let rest = xraid_format::crc32c(&bytes[64..]);
    (u64::from(head) << 32) | u64::from(rest)
}

/// The first format's checksum: FNV-1a 64 over `bytes`, the checksum field read as
/// zero.
fn checksum_fnv(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (i, &b) in bytes.iter().enumerate() {
        let b = if (56..64).contains(&i) { 0 } else { b };
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// An entry read back from a ring.
#[derive(Debug, Clone)]
struct Found {
    /// The array the entry belongs to ([`crate::EngineConfig::log_tag`]).
    tag: u64,
    marker: bool,
    /// A marker with [`FLAG_RESYNC_OWED`].
    resync_owed: bool,
    /// A flagged marker's masks ([`FLAG_MASKS`]): lost rings, members listed for.
    masks: Option<(u64, u64)>,
    /// A flagged marker says entries were skipped in stripes it does not name
    /// ([`FLAG_SKIPPED`], or no masks at all).
    skipped_elsewhere: bool,
    /// A flagged marker's skipped stripes and rows ([`FLAG_SKIP_LIST`]).
    skips: Vec<(u64, u32, u32)>,
    /// A marker's unknown rows ([`FLAG_UNKNOWN_ROWS`]).
    unknown: Vec<crate::unknown::Named>,
    /// Written by a build that stamps the superblocks ([`FLAG_STAMPED`]).
    stamped: bool,
    seq: u64,
    durable: u64,
    stripe: u64,
    lo: u32,
    hi: u32,
    segs: Vec<LogSeg>,
    /// Payload: the logged chunks' rows, in header order.
    payload: Vec<u8>,
    /// The rows of lo..hi that no later entry of the replay covers (set when the
    /// replay collects its entries): only these does the replay write.
    last_for: Vec<(u32, u32)>,
    /// The rows earlier entries of the replay in the same stripe wrote: (data index,
    /// from, to). Parity may or may not hold those writes.
    earlier: Vec<(u16, u32, u32)>,
}

impl Found {
    /// Bytes of one row range lo..hi.
    fn row_bytes(&self) -> usize {
        sectors_to_bytes(u64::from(self.hi - self.lo))
    }

    /// The records that carry rows, each with its rows from the payload.
    fn carried(&self) -> impl Iterator<Item = (LogSeg, &[u8])> {
        let rows = self.row_bytes();
        self.segs
            .iter()
            .filter(|s| s.has_payload())
            .enumerate()
            .map(move |(k, s)| (*s, &self.payload[k * rows..(k + 1) * rows]))
    }

    /// Data chunks whose rows the entry carries, with those rows.
    fn logged(&self) -> impl Iterator<Item = (u16, &[u8])> {
        self.carried()
            .filter(|(s, _)| s.kind == SegKind::Rows)
            .map(|(s, rows)| (s.data_index, rows))
    }

    fn logs(&self, data_index: u16) -> bool {
        self.logged().any(|(i, _)| i == data_index)
    }

    /// The partial parity of rows lo..hi, where the entry has one.
    fn partial_parity(&self) -> Option<&[u8]> {
        self.syndrome(SegKind::PartialParity)
    }

    /// The partial Q of rows lo..hi, where the entry has one (RAID-6).
    fn partial_q(&self) -> Option<&[u8]> {
        self.syndrome(SegKind::PartialQ)
    }

    fn syndrome(&self, kind: SegKind) -> Option<&[u8]> {
        self.carried()
            .find(|(s, _)| s.kind == kind)
            .map(|(_, rows)| rows)
    }

    /// The rows of from..to the entry decides ([`Found::last_for`]).
    fn last_for_within(&self, from: u32, to: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.last_for
            .iter()
            .map(move |&(a, b)| (a.max(from), b.min(to)))
            .filter(|(a, b)| a < b)
    }

    /// Whether the write covers rows from..to of data chunk `data_index` (all of them).
    fn writes(&self, data_index: u16, from: u32, to: u32) -> bool {
        let (a, b) = self.written(data_index);
        a <= from && to <= b
    }

    /// The rows of data chunk `data_index` the write covers (empty: none).
    fn written(&self, data_index: u16) -> (u32, u32) {
        self.segs
            .iter()
            .find(|s| s.kind == SegKind::Written && s.data_index == data_index)
            .map_or((0, 0), |s| (s.lo, s.hi))
    }
}

/// The fixed header fields of an entry (or marker, with no rows) of the given magic,
/// written into `b`; seq, durable, flags and the checksum are set apart.
struct Header {
    magic: u64,
    stripe: u64,
    lo: u32,
    hi: u32,
    records: usize,
    head: u64,
    total: u64,
    tag: u64,
}

impl Header {
    fn put(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.magic.to_le_bytes());
        b[24..32].copy_from_slice(&self.stripe.to_le_bytes());
        b[32..36].copy_from_slice(&self.lo.to_le_bytes());
        b[36..40].copy_from_slice(&self.hi.to_le_bytes());
        b[40..44].copy_from_slice(&(self.records as u32).to_le_bytes());
        b[48..52].copy_from_slice(&(self.head as u32).to_le_bytes());
        b[52..56].copy_from_slice(&(self.total as u32).to_le_bytes());
        b[64..72].copy_from_slice(&self.tag.to_le_bytes());
    }
}

/// Writes a segment record at record slot `k` of a header.
fn put_record(b: &mut [u8], k: usize, seg: &LogSeg) {
    let at = HEADER_FIXED + k * SEG_BYTES;
    b[at..at + 2].copy_from_slice(&seg.data_index.to_le_bytes());
    b[at + 2..at + 4].copy_from_slice(&(seg.kind as u16).to_le_bytes());
    b[at + 4..at + 8].copy_from_slice(&seg.lo.to_le_bytes());
    b[at + 8..at + 12].copy_from_slice(&seg.hi.to_le_bytes());
}

/// Takes [`FLAG_STAMPED`] off every entry and marker of `ring`, as a build before the
/// stamp wrote them (the simulator's older build).
pub(crate) fn unstamp_ring(ring: &mut [u8]) {
    let mut pos = 0;
    while pos + 512 <= ring.len() {
        let Some((_, sectors)) = parse(&ring[pos..]) else {
            pos += 512;
            continue;
        };
        let b = &mut ring[pos..pos + sectors_to_bytes(sectors)];
        let flags = u32_at(b, 44) & !FLAG_STAMPED;
        b[44..48].copy_from_slice(&flags.to_le_bytes());
        let sum = if u64_at(b, 0) == MAGIC {
            checksum(b)
        } else {
            checksum_fnv(b)
        };
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        pos += b.len();
    }
}

/// Parses the entry at the start of `b`, if one is there whole; returns it and its
/// length in sectors.
fn parse(b: &[u8]) -> Option<(Found, u64)> {
    if b.len() < 512 || ![MAGIC, MAGIC_FNV].contains(&u64_at(b, 0)) {
        return None;
    }
    let lo = u32_at(b, 32);
    let hi = u32_at(b, 36);
    let nseg = u32_at(b, 40) as usize;
    let flags = u32_at(b, 44);
    let head = u64::from(u32_at(b, 48));
    let total = u64::from(u32_at(b, 52));
    let marker = flags & FLAG_MARKER != 0;
    if (hi <= lo && !marker) || head != header_sectors(nseg) || total < head {
        return None;
    }
    let bytes = usize::try_from(total * SECTOR_BYTES).ok()?;
    let sum = if u64_at(b, 0) == MAGIC {
        checksum
    } else {
        checksum_fnv
    };
    if bytes > b.len() || sum(&b[..bytes]) != u64_at(b, 56) {
        return None;
    }
    let segs = (0..nseg)
        .map(|i| {
            let at = HEADER_FIXED + i * SEG_BYTES;
            let kind = match u16::from_le_bytes([b[at + 2], b[at + 3]]) {
                1 => SegKind::Rows,
                2 => SegKind::Written,
                3 => SegKind::PartialParity,
                4 => SegKind::PartialQ,
                _ => return None,
            };
            Some(LogSeg {
                data_index: u16::from_le_bytes([b[at], b[at + 1]]),
                kind,
                lo: u32_at(b, at + 4),
                hi: u32_at(b, at + 8),
            })
        })
        .collect::<Option<Vec<LogSeg>>>()?;
    let found = Found {
        tag: u64_at(b, 64),
        marker,
        resync_owed: marker && flags & FLAG_RESYNC_OWED != 0,
        masks: (marker && flags & FLAG_MASKS != 0)
            .then(|| (u64_at(b, MASKS_AT), u64_at(b, MASKS_AT + 8))),
        skipped_elsewhere: marker
            && flags & FLAG_RESYNC_OWED != 0
            && (flags & FLAG_MASKS == 0 || flags & FLAG_SKIPPED != 0),
        skips: if marker && flags & FLAG_RESYNC_OWED != 0 && flags & FLAG_SKIP_LIST != 0 {
            marker_records(b)
                .filter(|&(stripe, ..)| stripe & UNKNOWN_RECORD == 0)
                .collect()
        } else {
            Vec::new()
        },
        unknown: if marker && flags & FLAG_UNKNOWN_ROWS != 0 {
            marker_records(b)
                .filter(|&(stripe, ..)| stripe & UNKNOWN_RECORD != 0)
                .map(decode_unknown)
                .collect()
        } else {
            Vec::new()
        },
        stamped: flags & FLAG_STAMPED != 0,
        seq: u64_at(b, 8),
        durable: u64_at(b, 16),
        stripe: u64_at(b, 24),
        lo,
        hi,
        segs,
        payload: b[sectors_to_bytes(head)..bytes].to_vec(),
        last_for: Vec::new(),
        earlier: Vec::new(),
    };
    Some((found, total))
}

/// A marker's rank among others: its durable seq, then its number.
type MarkerKey = (u64, u64);
/// Where a marker lies on its ring: its slot and its sectors.
type MarkerPlace = (u64, u64);

/// The markers this open writes, after a scan: their sectors, and per ring the slot
/// the first goes to. `newest` is the newest marker across the rings (its sectors),
/// `per_ring` each ring's own newest (slot and sectors; rings not read count as
/// none), `old_entries` whether an entry lay where the old layout keeps them (below
/// [`RING_START`]), and `replaying` whether entries wait to be replayed.
///
/// Rings of the old layout (1-sector markers in sectors 0 and 1, entries from sector
/// 2) keep it while entries are replayed — the newest marker is an old one, or there
/// is none and entries lie below sector 16: either 4 KiB slot would cover entries a
/// second cut must still find. Otherwise the rings take 4 KiB markers, each ring in
/// the slot other than its own newest 4 KiB one, and a ring whose newest is an old
/// marker (or that has none) in slot 1, sectors 8..16, which leaves both old markers
/// whole should that write be torn. Each ring's own: a marker a cut stopped short
/// reaches some rings only, and a slot chosen from another ring's newest could tear
/// this ring's only one.
fn next_markers(
    newest: Option<u64>,
    per_ring: &[Option<MarkerPlace>],
    old_entries: bool,
    replaying: bool,
) -> (u64, Vec<u64>) {
    let old_layout = replaying
        && match newest {
            Some(sectors) => sectors == LEGACY_MARKER_SECTORS,
            None => old_entries,
        };
    let sectors = if old_layout {
        LEGACY_MARKER_SECTORS
    } else {
        MARKER_SECTORS
    };
    let slots = per_ring
        .iter()
        .map(|ring| match *ring {
            Some((slot, n)) if n == sectors => slot ^ 1,
            // Only while replaying an old ring: no 4 KiB marker is on any ring then
            // (each is newer than every old one).
            _ if old_layout => 0,
            _ => 1,
        })
        .collect();
    (sectors, slots)
}

/// A flagged marker's records ([`FLAG_SKIP_LIST`], [`FLAG_UNKNOWN_ROWS`]): stripe,
/// lo, hi.
fn marker_records(b: &[u8]) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
    let total = u64::from(u32_at(b, 52)).min(MARKER_SECTORS);
    let count = (u32_at(b, SKIPS_AT) as usize).min(marker_room(total));
    (0..count).map(move |i| {
        let at = SKIPS_AT + 8 + i * SKIP_BYTES;
        (u64_at(b, at), u32_at(b, at + 8), u32_at(b, at + 12))
    })
}

/// A replay in progress.
#[derive(Debug)]
struct Replay {
    entries: VecDeque<Found>,
    /// The entry whose data rows are being read, the scratch they land in (one row
    /// range lo..hi per data index, then P's and Q's), and how its gone chunks are
    /// worked out (none: they cannot be).
    current: Option<(Found, BufId, Option<Box<WorkOut>>)>,
    /// The entry whose parity is being written, and its scratch.
    writing: Option<BufId>,
    pending: u32,
    replayed: u64,
    /// Entries whose gone data chunk was worked out.
    worked_out: u64,
    max_seq: u64,
    /// A read of the current entry failed: its parity is left as it is.
    unreadable: bool,
    /// A member whose rows the current entry was reading vanished meanwhile: the
    /// entry is planned and read again without it (its rows in the scratch were
    /// never read).
    replan: bool,
    /// The final flush, with its empty buffer.
    flushing: Option<BufId>,
    /// The stripe whose parity (and logged rows) are being written.
    writing_stripe: u64,
    /// Those writes: role, first member sector, and the bytes.
    writing_rows: Vec<(MemberIdx, u64, BufSlice)>,
    /// Roles that refused one of them, whose writes are tried again block by block.
    retried: Vec<MemberIdx>,
    /// The replay is done and flushed, and waits for the driver to record the bad
    /// block lists it changed (see [`lists_recorded`]).
    awaiting_record: bool,
    /// Members that refused a write of this replay that their bad block logs could
    /// not take, and the stripe: failed when the replay ends, not at once. Until then later entries of other stripes read their
    /// rows as those of members that hold their data (worked out from parity instead,
    /// as for a member gone with the power, the rows of a write the cut tore would come
    /// from parity the cut left stale); in the stripe it refused, it is gone already.
    refused: Vec<(MemberIdx, u64)>,
    /// Members whose ring failed to read: zeroed whole once the rings' marker says
    /// the replay is done (and, flagged, that the resync it leaves owed is: the ring's
    /// entries were the only other trace of that), then flushed with a second round
    /// before client requests go on. The entries it held are unknown, their seqs too,
    /// and new entries may take those seqs; read at a later open (the bad sectors
    /// rewritten since, or a passing error), the old ones would be replayed as new.
    /// Until new entries are written they are what they were: a cut before the wipe
    /// leaves them to a later replay. A member whose ring cannot be written either is
    /// failed when the second round ends.
    to_wipe: Vec<MemberIdx>,
    /// The wipe's writes in flight, with their zeroed buffer.
    wiping: Option<BufId>,
}

#[derive(Debug)]
enum Recovery {
    /// Reading every present member's ring.
    Scanning {
        bufs: Vec<Option<BufId>>,
        pending: u32,
        /// Members whose ring failed to read.
        unreadable: Vec<MemberIdx>,
    },
    Replaying(Box<Replay>),
}

/// The log's state in the engine.
#[derive(Debug)]
pub(crate) struct LogState {
    ring: u64,
    heads: Vec<u64>,
    /// Per member, entries that may still be needed: (seq, start, sectors).
    live: Vec<VecDeque<(u64, u64, u64)>>,
    next_seq: u64,
    durable: u64,
    /// Entries whose stripe writes have not finished.
    unfinished: BTreeSet<u64>,
    /// Stripe operations waiting for ring space.
    pub(crate) waiters: VecDeque<usize>,
    /// A checkpoint flush in flight: the seqs it covers (below), flushes pending, and
    /// the empty buffer they carry.
    checkpoint: Option<(u64, u32, BufId, u64)>,
    recovery: Option<Recovery>,
    /// Client requests that arrived during recovery.
    held: VecDeque<(Request, Nanos)>,
    /// The durable seq the newest marker on the rings says.
    persisted: u64,
    /// Per member, the marker slot its ring's next marker goes to (0 or 1).
    marker_slots: Vec<u64>,
    /// Sectors of the markers this open writes: [`MARKER_SECTORS`], or
    /// [`LEGACY_MARKER_SECTORS`] while the ring's newest marker is of the old layout
    /// and its entries were replayed (chosen at the scan; see [`scanned`]).
    marker_sectors: u64,
    marker_job: Option<MarkerJob>,
    /// Who waits for the marker after the one being written.
    marker_next: Vec<Waiter>,
    /// Per member, stripe operations whose entries wait for the member's next batch.
    queued: Vec<Vec<usize>>,
    /// Per member, the batch of entries being written and flushed.
    batches: Vec<Option<Batch>>,
    /// Engine entry points under way: while one runs, operations ready to log are
    /// gathered, and batches start when the outermost ends.
    gathering: u32,
    /// Per role, whether its ring takes no new batch: a replacement is about to take
    /// the role over (see [`ready_for_takeover`]).
    takeover_hold: Vec<bool>,
    /// Entries up to this seq are to be made durable as soon as their writes finish:
    /// they were written while a member that has left since was present (see
    /// [`member_left`]).
    durable_wanted: u64,
    /// Stripe writes whose entries were built before a member left and that have not
    /// finished yet.
    departure_writes: u32,
    /// Per stripe, the rows of data chunks that logged writes not known durable
    /// covered: (seq, data index, from, to). A later entry's partial parity cannot
    /// count on them (see `stripe::carries_earlier_write`).
    recent: HashMap<u64, Vec<(u64, u16, u32, u32)>>,
    /// Per driver slot, whether its device served (a role's member, not failed, or a
    /// replacement being built) when the superblocks were last recorded (set as the
    /// recovery starts, from the array as opened): a device that stops serving
    /// during the recovery must be recorded before the rings say its entries are done
    /// with (see [`failures_to_record`]).
    serving_as_recorded: Vec<bool>,
    /// A marker must be written even with nothing new durable: it carries
    /// [`FLAG_RESYNC_OWED`].
    marker_owed: bool,
    /// Members whose rings' entries the recovery lost: those that failed to read at
    /// an unclean open, and those a flagged marker says an earlier replay lost (every
    /// member, for a marker without [`FLAG_MASKS`]). Where they held a stripe's only entries and
    /// a data member is missing there, parity may be torn past what the replay can
    /// put right (see [`list_torn_beyond_redundancy`]); kept until the resync owed
    /// completes, since a data member leaving meanwhile makes the stripes it has not
    /// reached yet the same second fault.
    lost_rings: Vec<MemberIdx>,
    /// The first stripe they may have left torn: 0, or where the resync a clean stop
    /// left owed had got to (see [`Engine::owe_resync_after_a_clean_stop`]).
    lost_from: u64,
    /// Members missing (not active) when the stripes the lost rings held were last
    /// listed: their stripes are listed already (or were made good since by the
    /// resync), so a later walk lists only for members that went missing after.
    /// Persisted on flagged markers ([`FLAG_MASKS`]).
    listed_for: u64,
    /// The walks the open owes, each with the rings it counts lost and the members it
    /// counts listed for: this open's unreadable rings (all missing members count),
    /// and what a flagged marker says an earlier replay lost.
    open_walks: Vec<(Vec<MemberIdx>, u64)>,
    /// Stripes whose entries the replay skipped (rows it could not read, or more
    /// gone than an entry answers for), with the rows they spanned (sorted bands,
    /// apart): their parity is what the cut left there, until the owed resync reaches
    /// them (see [`vouches_for`]) — unless a later entry over those rows is replayed
    /// from the data alone, or a client write computes their parity afresh, either of
    /// which makes parity agree with the data there.
    skipped_stripes: BTreeMap<u64, Vec<(u32, u32)>>,
    /// An earlier replay skipped entries (a flagged marker says so) and which stripes
    /// they were in went with it: no stripe's parity is vouched for until the owed
    /// resync completes.
    vouches_nowhere: bool,
    /// The open found no marker or entry of the array on its rings while owing a
    /// resync (see `scanned`).
    knew_nothing: bool,
    /// Rows of data members whose contents the replay could not work out (see
    /// [`crate::unknown`]); named on every marker ([`FLAG_UNKNOWN_ROWS`]).
    pub(crate) unknown: crate::unknown::Unknown,
    /// Flush rounds begun (client flushes and checkpoints): a write over unknown rows
    /// is durable once a round begun after it completes.
    pub(crate) flush_round: u64,
    /// The last marker's number: of two markers of one durable seq, the higher
    /// number says the unknown rows as they are now.
    marker_number: u64,
}

/// Entries of several stripe writes on their way to one member's ring: written with as
/// few writes as the ring allows (one unless it wraps), then flushed once, and only
/// then do those stripe writes go to the members.
#[derive(Debug)]
struct Batch {
    /// The entries back to back, as they go to the ring.
    buf: BufId,
    ops: Vec<usize>,
    /// Writes (then the flush) still out.
    pending: u32,
    /// A write failed: the member is failed, and no flush follows.
    failed: bool,
    /// The flush is out — or none follows: the writes were durable ones (FUA).
    flushing: bool,
}

/// Who waits for a marker to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A client flush, which replies when the marker is durable.
    Client(usize),
    /// A checkpoint, after which waiting writes try the ring again.
    Checkpoint,
    /// The end of recovery.
    Recovery,
    /// Nothing waits: a marker that only clears [`FLAG_RESYNC_OWED`].
    Nothing,
}

#[derive(Debug)]
struct MarkerJob {
    buf: BufId,
    durable: u64,
    /// Member writes and flushes still out.
    pending: u32,
    waiters: Vec<Waiter>,
}

impl LogState {
    pub(crate) fn new(ring: u64, members: usize) -> LogState {
        LogState {
            ring,
            heads: vec![0; members],
            live: vec![VecDeque::new(); members],
            next_seq: 1,
            durable: 0,
            unfinished: BTreeSet::new(),
            waiters: VecDeque::new(),
            checkpoint: None,
            recovery: None,
            held: VecDeque::new(),
            persisted: 0,
            marker_slots: vec![0; members],
            marker_sectors: MARKER_SECTORS,
            marker_job: None,
            marker_next: Vec::new(),
            queued: vec![Vec::new(); members],
            batches: (0..members).map(|_| None).collect(),
            gathering: 0,
            takeover_hold: vec![false; members],
            durable_wanted: 0,
            departure_writes: 0,
            recent: HashMap::new(),
            serving_as_recorded: vec![false; 2 * members],
            marker_owed: false,
            lost_rings: Vec::new(),
            lost_from: 0,
            listed_for: 0,
            open_walks: Vec::new(),
            skipped_stripes: BTreeMap::new(),
            vouches_nowhere: false,
            knew_nothing: false,
            unknown: crate::unknown::Unknown::default(),
            flush_round: 0,
            marker_number: 0,
        }
    }

    /// The records the markers this open writes hold (skipped bands, unknown rows).
    fn marker_room(&self) -> usize {
        marker_room(self.marker_sectors)
    }

    /// Whether the rings do not yet say all that is known durable.
    pub(crate) fn needs_marker(&self) -> bool {
        self.durable > self.persisted || self.marker_owed
    }

    /// What a flush issued now makes durable once it completes: every seq below this.
    pub(crate) fn flush_covers(&self) -> u64 {
        self.unfinished.first().copied().unwrap_or(self.next_seq)
    }

    /// A flush that began when `covers` was current has completed.
    pub(crate) fn flushed(&mut self, covers: u64) {
        self.durable = self.durable.max(covers.saturating_sub(1));
        let durable = self.durable;
        self.recent.retain(|_, writes| {
            writes.retain(|&(seq, ..)| seq > durable);
            !writes.is_empty()
        });
    }

    /// Flush round `round`, begun when `covers` was current, has completed: what it
    /// made durable, and the unknown rows writes before it made known (a marker owed
    /// that no longer names them).
    pub(crate) fn flushed_round(&mut self, covers: u64, round: u64) {
        self.flushed(covers);
        if crate::unknown::flush_round_done(&mut self.unknown, round) {
            self.marker_owed = true;
        }
    }

    /// Begins a flush round: its number.
    pub(crate) fn begin_flush_round(&mut self) -> u64 {
        self.flush_round += 1;
        self.flush_round
    }

    pub(crate) fn recovering(&self) -> bool {
        self.recovery.is_some()
    }

    pub(crate) fn hold(&mut self, req: Request, now: Nanos) {
        self.held.push_back((req, now));
    }
}

/// Whether an entry carrying `carried` row ranges lo..hi, with `records` segment
/// records in all, fits the ring at all (an engine configured with a ring smaller than
/// twice the largest entry would otherwise wait for room forever).
pub(crate) fn fits(engine: &Engine, carried: usize, records: usize, lo: u32, hi: u32) -> bool {
    let ring = engine.log.as_ref().map_or(0, |l| l.ring);
    RING_START + entry_sectors(carried, records, lo, hi) <= ring
}

/// Sectors of an entry carrying `carried` row ranges lo..hi, with `records` segment
/// records in all.
pub(crate) fn entry_sectors(carried: usize, records: usize, lo: u32, hi: u32) -> u64 {
    header_sectors(records) + u64::from(hi - lo) * carried as u64
}

/// What an entry for a stripe write of rows lo..hi says besides its stripe.
pub(crate) struct EntryParts<'a> {
    /// Data chunks whose rows the entry carries, each with its rows lo..hi as they are
    /// after the write (new data where written, rebuilt data elsewhere): their members
    /// cannot take the write, or must not be trusted for it.
    pub(crate) rows: &'a [(u16, BufSlice)],
    /// The rows each data chunk the write covers: (data index, from, to).
    pub(crate) written: &'a [(u16, u32, u32)],
    /// The XOR of rows lo..hi of the data chunks the write leaves alone and `rows`
    /// does not carry (row by row), where there are such chunks.
    pub(crate) partial_parity: Option<BufSlice>,
    /// The same chunks' Q syndrome (RAID-6 with both parity members in sync).
    pub(crate) partial_q: Option<BufSlice>,
}

/// Builds an entry for a stripe write of rows lo..hi. Returns the entry's buffer (the
/// caller frees it) and sectors; [`reserve`] gives it its seq when it is written.
pub(crate) fn build(
    engine: &mut Engine,
    stripe: u64,
    lo: u32,
    hi: u32,
    parts: &EntryParts,
) -> (BufId, u64) {
    let tag = engine.config.log_tag;
    let rows = sectors_to_bytes(u64::from(hi - lo));
    let mut records: Vec<(LogSeg, Option<BufSlice>)> = Vec::new();
    for &(data_index, src) in parts.rows {
        let seg = LogSeg {
            data_index,
            kind: SegKind::Rows,
            lo,
            hi,
        };
        records.push((seg, Some(src)));
    }
    let syndromes = [
        (SegKind::PartialParity, parts.partial_parity),
        (SegKind::PartialQ, parts.partial_q),
    ];
    for (kind, src) in syndromes {
        if let Some(src) = src {
            let seg = LogSeg {
                data_index: u16::MAX,
                kind,
                lo,
                hi,
            };
            records.push((seg, Some(src)));
        }
    }
    for &(data_index, from, to) in parts.written {
        let seg = LogSeg {
            data_index,
            kind: SegKind::Written,
            lo: from,
            hi: to,
        };
        records.push((seg, None));
    }
    let carried = records.iter().filter(|(_, src)| src.is_some()).count();
    let head = header_sectors(records.len());
    let total = head + u64::from(hi - lo) * carried as u64;
    let buf = engine.bufs.alloc(sectors_to_bytes(total));
    let head_bytes = sectors_to_bytes(head);
    let sources = records.iter().filter_map(|(_, src)| *src);
    for (k, src) in sources.enumerate() {
        let dst = BufSlice {
            buf,
            offset: head_bytes + k * rows,
            len: rows,
        };
        copy(engine, dst, src);
    }
    let b = engine.bufs.get_mut(buf);
    b[..head_bytes].fill(0);
    let header = Header {
        magic: MAGIC,
        stripe,
        lo,
        hi,
        records: records.len(),
        head,
        total,
        tag,
    };
    header.put(b);
    b[44..48].copy_from_slice(&FLAG_STAMPED.to_le_bytes());
    for (k, (seg, _)) in records.iter().enumerate() {
        put_record(b, k, seg);
    }
    (buf, total)
}

/// The write of entry `seq` to `stripe` covers these rows of its data chunks:
/// (data index, from, to).
pub(crate) fn note_written(
    engine: &mut Engine,
    stripe: u64,
    seq: u64,
    written: &[(u16, u32, u32)],
) {
    let Some(log) = engine.log.as_mut() else {
        return;
    };
    let writes = log.recent.entry(stripe).or_default();
    writes.extend(written.iter().map(|&(i, from, to)| (seq, i, from, to)));
}

/// Whether a logged write not known durable covered rows of `stripe`'s data chunk
/// `data_index` within lo..hi.
pub(crate) fn written_since_durable(
    engine: &Engine,
    stripe: u64,
    data_index: u16,
    lo: u32,
    hi: u32,
) -> bool {
    latest_write_since_durable(engine, stripe, data_index, lo, hi) > 0
}

/// The newest logged write not known durable that covered rows of `stripe`'s data
/// chunk `data_index` within lo..hi (0: none).
pub(crate) fn latest_write_since_durable(
    engine: &Engine,
    stripe: u64,
    data_index: u16,
    lo: u32,
    hi: u32,
) -> u64 {
    let Some(log) = engine.log.as_ref() else {
        return 0;
    };
    log.recent.get(&stripe).map_or(0, |writes| {
        writes
            .iter()
            .filter(|&&(seq, i, from, to)| {
                seq > log.durable && i == data_index && from < hi && lo < to
            })
            .map(|&(seq, ..)| seq)
            .max()
            .unwrap_or(0)
    })
}

/// Whether every seq up to `seq` is known durable.
pub(crate) fn durable_up_to(engine: &Engine, seq: u64) -> bool {
    engine.log.as_ref().is_none_or(|l| l.durable >= seq)
}

/// A marker record of unknown rows (see [`FLAG_UNKNOWN_ROWS`]); none for a stripe or
/// role past what a record holds (not met: 2^48 stripes, 2^14 roles).
fn encode_unknown(named: crate::unknown::Named) -> Option<(u64, u32, u32)> {
    use crate::unknown::Named;
    let tag = |role: u16, stripe: u64, span: bool| {
        (role < 1 << 14 && stripe <= UNKNOWN_STRIPE_MAX).then(|| {
            UNKNOWN_RECORD | if span { UNKNOWN_SPAN } else { 0 } | u64::from(role) << 48 | stripe
        })
    };
    match named {
        Named::Band {
            stripe,
            role,
            lo,
            hi,
        } => Some((tag(role, stripe, false)?, lo, hi)),
        Named::Span { role, first, last } => {
            let last = last.min(UNKNOWN_STRIPE_MAX);
            Some((tag(role, first, true)?, last as u32, (last >> 32) as u32))
        }
    }
}

/// The record [`encode_unknown`] made.
fn decode_unknown((field, lo, hi): (u64, u32, u32)) -> crate::unknown::Named {
    let role = (field >> 48 & 0x3fff) as u16;
    let stripe = field & UNKNOWN_STRIPE_MAX;
    if field & UNKNOWN_SPAN != 0 {
        crate::unknown::Named::Span {
            role,
            first: stripe,
            last: u64::from(lo) | u64::from(hi) << 32,
        }
    } else {
        crate::unknown::Named::Band {
            stripe,
            role,
            lo,
            hi,
        }
    }
}

/// The skipped bands a marker names, where a resync is `owed`: (stripe, lo, hi).
fn skip_records(engine: &Engine, owed: bool) -> Vec<(u64, u32, u32)> {
    engine
        .log
        .as_ref()
        .filter(|_| owed)
        .map(|l| {
            l.skipped_stripes
                .iter()
                .flat_map(|(&stripe, bands)| bands.iter().map(move |&(lo, hi)| (stripe, lo, hi)))
                .collect()
        })
        .unwrap_or_default()
}

/// The markers' records left for unknown rows: the room the skipped bands leave.
pub(crate) fn unknown_rows_room(engine: &Engine) -> usize {
    let most = engine.log.as_ref().map_or(0, LogState::marker_room);
    most - skip_records(engine, resync_owed_now(engine))
        .len()
        .min(most)
}

/// Whether a marker written now says a resync is owed.
fn resync_owed_now(engine: &Engine) -> bool {
    engine.stats.log_entries_skipped > 0 && engine.resync_owed
}

/// A marker saying every seq up to `durable` is durable.
fn marker(engine: &mut Engine, durable: u64) -> BufId {
    let tag = engine.config.log_tag;
    // The driver says the resync is owed (the array was not stopped cleanly) before
    // the replay: a clean array owes none, whatever a stale flag said.
    let owed = resync_owed_now(engine);
    let masks = engine
        .log
        .as_ref()
        .and_then(|l| Some((mask_of(&l.lost_rings)?, l.listed_for)))
        .filter(|_| owed && engine.member_states().len() <= 64);
    // Skipped bands first (past the room they count as unknown, above); unknown rows
    // take the room left — one record per role at least, before any skipped band —
    // merged into spans past it (the replay makes that rare: `spill_unknown_rows`).
    let skips = skip_records(engine, owed);
    let (sectors, most) = {
        let log = engine.log.as_ref().expect("logging is on");
        (log.marker_sectors, log.marker_room())
    };
    let room = most - skips.len().min(most);
    let unknown: Vec<(u64, u32, u32)> = crate::unknown::records(engine, room)
        .0
        .into_iter()
        .filter_map(encode_unknown)
        .take(most)
        .collect();
    let skipped = skipped_elsewhere(engine) || skips.len() + unknown.len() > most;
    let skips = &skips[..skips.len().min(most - unknown.len())];
    let number = {
        let log = engine.log.as_mut().expect("logging is on");
        log.marker_number += 1;
        log.marker_number
    };
    let buf = engine.bufs.alloc(sectors_to_bytes(sectors));
    let b = engine.bufs.get_mut(buf);
    b.fill(0);
    let header = Header {
        magic: MAGIC,
        stripe: 0,
        lo: 0,
        hi: 0,
        records: 0,
        head: header_sectors(0),
        total: sectors,
        tag,
    };
    header.put(b);
    b[8..16].copy_from_slice(&number.to_le_bytes());
    b[16..24].copy_from_slice(&durable.to_le_bytes());
    let mut flags = if owed {
        FLAG_MARKER | FLAG_STAMPED | FLAG_RESYNC_OWED
    } else {
        FLAG_MARKER | FLAG_STAMPED
    };
    if owed && skipped {
        flags |= FLAG_SKIPPED;
    }
    if !skips.is_empty() {
        flags |= FLAG_SKIP_LIST;
    }
    if !unknown.is_empty() {
        flags |= FLAG_UNKNOWN_ROWS;
    }
    let records = skips.iter().chain(&unknown).copied();
    let mut count = 0u32;
    for (i, (stripe, lo, hi)) in records.enumerate() {
        let at = SKIPS_AT + 8 + i * SKIP_BYTES;
        b[at..at + 8].copy_from_slice(&stripe.to_le_bytes());
        b[at + 8..at + 12].copy_from_slice(&lo.to_le_bytes());
        b[at + 12..at + 16].copy_from_slice(&hi.to_le_bytes());
        count += 1;
    }
    b[SKIPS_AT..SKIPS_AT + 4].copy_from_slice(&count.to_le_bytes());
    if let Some((lost, listed_for)) = masks {
        flags |= FLAG_MASKS;
        b[MASKS_AT..MASKS_AT + 8].copy_from_slice(&lost.to_le_bytes());
        b[MASKS_AT + 8..MASKS_AT + 16].copy_from_slice(&listed_for.to_le_bytes());
    }
    b[44..48].copy_from_slice(&flags.to_le_bytes());
    let sum = checksum(b);
    b[56..64].copy_from_slice(&sum.to_le_bytes());
    buf
}

/// Copies `src` into `dst` (two slices of the engine's buffers, of one length).
pub(crate) fn copy(engine: &mut Engine, dst: BufSlice, src: BufSlice) {
    let (d, s) = engine.bufs.pair_mut(dst, src);
    d.copy_from_slice(s);
}

/// Finds room in `member`'s ring for the entry in `buf` (`sectors` long) and gives it
/// its seq — only now, so that a seq is never below what a flush declares durable
/// while its write still waits — and the durable seq known now. Returns the seq and
/// the ring sector to write it at; `None` while the room is held by entries not yet
/// durable (the caller waits for a checkpoint).
pub(crate) fn reserve(
    engine: &mut Engine,
    member: MemberIdx,
    buf: BufId,
    sectors: u64,
) -> Option<(u64, u64)> {
    let log = engine.log.as_mut().expect("logging is on");
    if RING_START + sectors > log.ring {
        return None;
    }
    let m = member.index();
    let durable = log.durable;
    log.live[m].retain(|&(s, _, _)| s > durable);
    let mut start = log.heads[m].max(RING_START);
    if start + sectors > log.ring {
        start = RING_START;
    }
    let overlaps = log.live[m]
        .iter()
        .any(|&(_, s, n)| s < start + sectors && start < s + n);
    if overlaps {
        return None;
    }
    let seq = log.next_seq;
    log.next_seq += 1;
    let durable = log.durable;
    log.heads[m] = start + sectors;
    log.live[m].push_back((seq, start, sectors));
    log.unfinished.insert(seq);
    let b = &mut engine.bufs.get_mut(buf)[..sectors_to_bytes(sectors)];
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..24].copy_from_slice(&durable.to_le_bytes());
    let sum = checksum(b);
    b[56..64].copy_from_slice(&sum.to_le_bytes());
    Some((seq, start))
}

/// The stripe write of entry `seq` has finished (its in-place writes are done), or was
/// given up.
pub(crate) fn finished(engine: &mut Engine, seq: u64) {
    let Some(log) = engine.log.as_mut() else {
        return;
    };
    log.unfinished.remove(&seq);
    let wanted = log.durable_wanted > log.durable;
    if (!log.waiters.is_empty() || wanted) && log.checkpoint.is_none() {
        start_checkpoint(engine);
    }
}

/// A member left the array. The entries written while it was present do not carry its
/// rows (it took the writes), so a replay after a power cut could not recompute parity
/// without it: until they are durable, a torn stripe would rebuild its chunk wrong.
/// So every entry written or built by now is made durable as soon as its write
/// finishes (the writes under way when it left, too), not at the next client flush —
/// which may be long in coming.
pub(crate) fn member_left(engine: &mut Engine) {
    if engine.log.as_ref().is_none_or(LogState::recovering) {
        return;
    }
    torn_by_a_departure(engine);
    let marked = crate::stripe::mark_writes_durable_soon(engine);
    let log = engine.log.as_mut().expect("logging is on");
    log.departure_writes += marked;
    log.durable_wanted = log.durable_wanted.max(log.next_seq.saturating_sub(1));
    start_checkpoint(engine);
}

/// A write marked by [`member_left`] finished: its entry (`seq`, 0 if it never got
/// one) joins what the next checkpoint makes durable.
pub(crate) fn departure_write_done(engine: &mut Engine, seq: u64) {
    let Some(log) = engine.log.as_mut() else {
        return;
    };
    log.departure_writes = log.departure_writes.saturating_sub(1);
    log.durable_wanted = log.durable_wanted.max(seq);
    if log.checkpoint.is_none() {
        start_checkpoint(engine);
    }
}

/// Whether every entry written while a member that has left since was present is
/// durable (see [`member_left`]).
pub(crate) fn departures_durable(engine: &Engine) -> bool {
    engine
        .log
        .as_ref()
        .is_none_or(|l| l.departure_writes == 0 && l.durable >= l.durable_wanted)
}

// ----- batches --------------------------------------------------------------------

/// An engine entry point begins: operations that become ready to log during it wait
/// for its end, so that those ready at the same moment share a batch.
pub(crate) fn gather(engine: &mut Engine) {
    if let Some(log) = engine.log.as_mut() {
        log.gathering += 1;
    }
}

/// The entry point ends: every member with entries waiting and no batch in flight
/// starts one; entries waiting for a member that failed go on without it.
pub(crate) fn release(engine: &mut Engine) {
    let Some(log) = engine.log.as_mut() else {
        return;
    };
    if log.gathering > 1 {
        log.gathering -= 1;
        return;
    }
    // Still gathering while batches start: an operation that one lets go of can hand
    // its stripe to the next in line, which may queue an entry; the loop takes it.
    loop {
        let log = engine.log.as_ref().expect("logging is on");
        let due: Vec<MemberIdx> = (0..log.queued.len())
            .map(member_idx)
            .filter(|&m| {
                !log.queued[m.index()].is_empty()
                    && (!engine.is_present(m)
                        || (log.batches[m.index()].is_none() && !log.takeover_hold[m.index()]))
            })
            .collect();
        if due.is_empty() {
            break;
        }
        for m in due {
            start_batch(engine, m);
        }
    }
    let log = engine.log.as_mut().expect("logging is on");
    log.gathering = log.gathering.saturating_sub(1);
}

/// Stripe operation `op`'s entry is built: it goes to `member`'s ring in the next
/// batch — at once when no batch is in flight there and no entry point is under way.
pub(crate) fn enqueue(engine: &mut Engine, member: MemberIdx, op: usize) {
    let log = engine.log.as_mut().expect("logging is on");
    let m = member.index();
    log.queued[m].push(op);
    if log.gathering == 0 && log.batches[m].is_none() && !log.takeover_hold[m] {
        start_batch(engine, member);
    }
}

/// Gives every entry waiting for `member` its room and seq (as [`reserve`] would one
/// by one), and writes them to the ring back to back in one write (two where the ring
/// wraps), to be flushed once. Entries with no room wait for a checkpoint.
fn start_batch(engine: &mut Engine, member: MemberIdx) {
    let m = member.index();
    let log = engine.log.as_mut().expect("logging is on");
    let ops = std::mem::take(&mut log.queued[m]);
    if ops.is_empty() {
        return;
    }
    if !engine.is_present(member) {
        // Its ring went with it, and with it the parity the entries would guard.
        for op in ops {
            crate::stripe::log_done(engine, op);
        }
        return;
    }
    debug_assert!(
        engine.log.as_ref().is_some_and(|l| l.batches[m].is_none()),
        "one batch per member at a time"
    );
    // (op, ring sector, entry buffer, sectors)
    let mut entries: Vec<(usize, u64, BufId, u64)> = Vec::new();
    let mut room_wanted = false;
    for op in ops {
        let (buf, sectors) = crate::stripe::log_entry(engine, op);
        match reserve(engine, member, buf, sectors) {
            Some((seq, start)) => {
                crate::stripe::log_reserved(engine, op, seq);
                entries.push((op, start, buf, sectors));
            }
            None => {
                crate::stripe::log_wait(engine, op, Some(member));
                room_wanted = true;
            }
        }
    }
    if !entries.is_empty() {
        let total: u64 = entries.iter().map(|e| e.3).sum();
        let buf = engine.bufs.alloc(sectors_to_bytes(total));
        // Runs of entries that lie back to back on the ring: (ring sector, offset in
        // the buffer, sectors). Reservations follow the ring's head, so one run unless
        // the ring wrapped.
        let mut runs: Vec<(u64, usize, u64)> = Vec::new();
        let mut at = 0usize;
        for &(_, start, ebuf, sectors) in &entries {
            let len = sectors_to_bytes(sectors);
            let dst = BufSlice {
                buf,
                offset: at,
                len,
            };
            let src = BufSlice {
                buf: ebuf,
                offset: 0,
                len,
            };
            copy(engine, dst, src);
            match runs.last_mut() {
                Some(run) if run.0 + run.2 == start => run.2 += sectors,
                _ => runs.push((start, at, sectors)),
            }
            at += len;
        }
        engine.stats.log_writes += runs.len() as u64;
        engine.stats.log_entries += entries.len() as u64;
        // Where the driver takes durable writes, they make the batch durable as they
        // complete, and no flush follows them.
        let fua = engine.config.fua_writes;
        let log = engine.log.as_mut().expect("logging is on");
        log.batches[m] = Some(Batch {
            buf,
            ops: entries.iter().map(|e| e.0).collect(),
            pending: u32::try_from(runs.len()).expect("two runs at most"),
            failed: false,
            flushing: fua,
        });
        for (start, offset, sectors) in runs {
            let slice = BufSlice {
                buf,
                offset,
                len: sectors_to_bytes(sectors),
            };
            engine.emit_to(
                member,
                engine.durable_write_kind(),
                Area::Log,
                start,
                slice,
                IoTarget::LogBatch { member },
            );
        }
        // Entries with room here that go to a second ring go there now.
        for &(op, ..) in &entries {
            crate::stripe::log_second_ring(engine, op);
        }
    }
    if room_wanted {
        start_checkpoint(engine);
    }
}

/// A write or the flush of `member`'s batch completed.
pub(crate) fn on_batch_io(engine: &mut Engine, member: MemberIdx, result: Result<(), IoFailed>) {
    if let Err(failure) = result {
        engine.write_failed(member, failure);
    }
    let m = member.index();
    let present = engine.is_present(member);
    let log = engine.log.as_mut().expect("logging is on");
    let Some(batch) = log.batches[m].as_mut() else {
        return;
    };
    batch.failed |= result.is_err();
    batch.pending -= 1;
    if batch.pending > 0 {
        return;
    }
    if !batch.flushing && !batch.failed && present {
        // Every entry is written: one flush makes them all durable.
        batch.flushing = true;
        batch.pending = 1;
        let slice = BufSlice {
            buf: batch.buf,
            offset: 0,
            len: 0,
        };
        engine.emit(
            member,
            IoKind::Flush,
            0,
            slice,
            IoTarget::LogBatch { member },
        );
        return;
    }
    let batch = log.batches[m].take().expect("a batch");
    engine.bufs.free(batch.buf);
    // The entries are durable — or their member failed, and the parity they guard with
    // it: the stripe writes go out.
    for op in batch.ops {
        crate::stripe::log_done(engine, op);
    }
    // Entries that arrived meanwhile are the next batch (at the end of the entry point
    // when one is under way, so that more can join).
    let log = engine.log.as_ref().expect("logging is on");
    if log.gathering == 0
        && log.batches[m].is_none()
        && !log.takeover_hold[m]
        && !log.queued[m].is_empty()
    {
        start_batch(engine, member);
    }
}

// ----- a replacement's takeover -----------------------------------------------------

/// Whether the replacements a recover has built may take their roles over once the
/// recover's final flush is done; called when nothing else of the recover is left.
///
/// Entries on a role's ring stay on the device that held the role when they were
/// written: the replacement's ring never gets them. So before the final flush (which
/// then makes every write they cover durable, and them no longer needed) the rings of
/// the roles being taken over take no new batch — stripe writes that would log there
/// wait, to go to the replacement's ring after the takeover — and the writes already
/// logged there finish. False while those writes are still out; the completion that
/// ends the last of them pumps the sync again. With `takeover` false (the recover was
/// cancelled, or leaves units undone, so nobody takes a role over) every hold is let
/// go and the answer is true.
pub(crate) fn ready_for_takeover(engine: &mut Engine, takeover: bool) -> bool {
    let roles = usize::from(engine.geo.raid_disks());
    let hold: Vec<bool> = (0..roles)
        .map(|r| takeover && engine.is_replacing(member_idx(r)))
        .collect();
    let Some(log) = engine.log.as_mut() else {
        return true;
    };
    if !hold.contains(&true) {
        release_takeover_holds(engine);
        return true;
    }
    log.takeover_hold.clone_from(&hold);
    (0..roles).filter(|&r| hold[r]).all(|r| {
        log.batches[r].is_none()
            && log.live[r]
                .iter()
                .all(|(seq, _, _)| !log.unfinished.contains(seq))
    })
}

/// The rings held for a takeover take batches again: after the takeover they are the
/// replacements' rings (or, with none taking over, the same devices' as before).
pub(crate) fn release_takeover_holds(engine: &mut Engine) {
    let Some(log) = engine.log.as_mut() else {
        return;
    };
    let held: Vec<usize> = (0..log.takeover_hold.len())
        .filter(|&r| std::mem::take(&mut log.takeover_hold[r]))
        .collect();
    for r in held {
        let log = engine.log.as_ref().expect("logging is on");
        if log.gathering == 0 && log.batches[r].is_none() && !log.queued[r].is_empty() {
            start_batch(engine, member_idx(r));
        }
    }
}

/// Flushes every present member, and every replacement being built, so that entries
/// become durable and their room free. The replacements too: a write's copy on a
/// replacement is as much the write as the member's, and once it takes the role over
/// it is all there is (until 2026-11-24 they were left out, and a power cut after
/// the takeover could tear a stripe whose entry the log held for durable).
pub(crate) fn start_checkpoint(engine: &mut Engine) {
    let members = engine.flush_targets();
    // Nothing to do while one runs, or when a flush now would make nothing durable
    // (the room is held by writes still unfinished: the next to finish starts one).
    if engine
        .log
        .as_ref()
        .is_none_or(|l| l.checkpoint.is_some() || l.flush_covers() <= l.durable + 1)
    {
        return;
    }
    let buf = engine.bufs.alloc(0);
    let log = engine.log.as_mut().expect("logging is on");
    let covers = log.flush_covers();
    let round = log.begin_flush_round();
    log.checkpoint = Some((
        covers,
        u32::try_from(members.len()).expect("few members"),
        buf,
        round,
    ));
    if members.is_empty() {
        checkpoint_done(engine);
        return;
    }
    engine.emit_flushes(&members, buf, |member| IoTarget::LogCheckpoint { member });
}

/// One checkpoint flush completed.
pub(crate) fn on_checkpoint_flush(
    engine: &mut Engine,
    member: MemberIdx,
    result: Result<(), IoFailed>,
) {
    if result.is_err() {
        engine.fail(member, FailReason::WriteError);
    }
    let log = engine.log.as_mut().expect("logging is on");
    let Some((_, pending, _, _)) = &mut log.checkpoint else {
        return;
    };
    *pending -= 1;
    if *pending == 0 {
        checkpoint_done(engine);
    }
}

fn checkpoint_done(engine: &mut Engine) {
    let log = engine.log.as_mut().expect("logging is on");
    if let Some((covers, _, buf, round)) = log.checkpoint.take() {
        log.flushed_round(covers, round);
        engine.bufs.free(buf);
    }
    persist(engine, Waiter::Checkpoint);
}

/// The checkpoint's marker is durable: writes waiting for room try again.
fn after_checkpoint(engine: &mut Engine) {
    let log = engine.log.as_mut().expect("logging is on");
    let waiters: Vec<usize> = log.waiters.drain(..).collect();
    for op in waiters {
        crate::stripe::retry_log(engine, op);
    }
    let log = engine.log.as_mut().expect("logging is on");
    // Still no room with nothing unfinished to wait for: flush again now; otherwise
    // the next finished write starts the next checkpoint. The same for entries a
    // departed member leaves to be made durable.
    let wanted = log.durable_wanted > log.durable;
    if (!log.waiters.is_empty() || wanted) && log.unfinished.is_empty() {
        start_checkpoint(engine);
    }
}

/// Makes the rings say what is durable now (a marker written and flushed on every
/// present member), then lets `waiter` go on. At once when they already say it.
pub(crate) fn persist(engine: &mut Engine, waiter: Waiter) {
    let log = engine.log.as_mut().expect("logging is on");
    if log.marker_job.is_some() {
        log.marker_next.push(waiter);
        return;
    }
    if !log.needs_marker() {
        waiter_done(engine, waiter);
        return;
    }
    let durable = log.durable;
    let slots = log.marker_slots.clone();
    let sectors = log.marker_sectors;
    for slot in &mut log.marker_slots {
        *slot ^= 1;
    }
    log.marker_owed = false;
    let members = engine.present_members();
    let buf = marker(engine, durable);
    engine.log.as_mut().expect("logging is on").marker_job = Some(MarkerJob {
        buf,
        durable,
        pending: u32::try_from(members.len()).expect("few members"),
        waiters: vec![waiter],
    });
    if members.is_empty() {
        marker_done(engine);
        return;
    }
    // A durable write needs no flush after it.
    let fua = engine.config.fua_writes;
    for m in members {
        let slice = BufSlice {
            buf,
            offset: 0,
            len: sectors_to_bytes(sectors),
        };
        engine.emit_to(
            m,
            engine.durable_write_kind(),
            Area::Log,
            slots.get(m.index()).copied().unwrap_or(0) * sectors,
            slice,
            IoTarget::LogMarker {
                member: m,
                flushed: fua,
            },
        );
    }
}

/// A marker write (`flushed` false) or the flush after it — or a durable marker write
/// (`flushed` true) — completed.
pub(crate) fn on_marker_io(
    engine: &mut Engine,
    member: MemberIdx,
    flushed: bool,
    result: Result<(), IoFailed>,
) {
    if result.is_err() {
        engine.fail(member, FailReason::WriteError);
    }
    // A member failed since (by another of its I/Os) gets no flush: its ring no
    // longer counts, and nothing may be sent to it.
    let present = engine.is_present(member);
    let Some(job) = engine.log.as_mut().and_then(|l| l.marker_job.as_mut()) else {
        return;
    };
    if !flushed && result.is_ok() && present {
        let slice = BufSlice {
            buf: job.buf,
            offset: 0,
            len: 0,
        };
        engine.emit_to(
            member,
            IoKind::Flush,
            Area::Data,
            0,
            slice,
            IoTarget::LogMarker {
                member,
                flushed: true,
            },
        );
        return;
    }
    job.pending -= 1;
    if job.pending == 0 {
        marker_done(engine);
    }
}

fn marker_done(engine: &mut Engine) {
    let log = engine.log.as_mut().expect("logging is on");
    let Some(job) = log.marker_job.take() else {
        return;
    };
    log.persisted = log.persisted.max(job.durable);
    let next = std::mem::take(&mut log.marker_next);
    engine.bufs.free(job.buf);
    for w in job.waiters {
        waiter_done(engine, w);
    }
    for w in next {
        persist(engine, w);
    }
}

fn waiter_done(engine: &mut Engine, waiter: Waiter) {
    match waiter {
        // A marker write that failed a member may have lost the array: the flush then
        // made nothing durable the array can return, as when its own flush fails.
        Waiter::Client(req) => {
            let error = engine.lost_error();
            engine.request_step_done(req, error);
        }
        Waiter::Checkpoint => after_checkpoint(engine),
        Waiter::Recovery if !replay(engine).to_wipe.is_empty() => wipe_unreadable_rings(engine),
        Waiter::Recovery => finish_recovery(engine),
        Waiter::Nothing => {}
    }
}

/// The owed resync completed (flushed): the rings must stop saying it is owed, even
/// if nothing is written after it, or a later open owes it again.
pub(crate) fn resync_completed(engine: &mut Engine) {
    if engine.log.as_ref().is_none_or(LogState::recovering) {
        return;
    }
    clear_doubts(engine);
    if engine.stats.log_entries_skipped > 0 {
        newer_marker(engine);
    }
}

/// A resync went over the whole array of one that is not whole, where it stays owed:
/// parity is in doubt nowhere any more — it agrees with the data, or what it could
/// not make agree is listed (see `stripe::through_parity_in_doubt`). The rings'
/// markers stop naming lost rings and skipped entries, or a later open would doubt
/// (and list) them again.
pub(crate) fn resync_passed(engine: &mut Engine) {
    if engine.log.as_ref().is_none_or(LogState::recovering) {
        return;
    }
    if clear_doubts(engine) {
        newer_marker(engine);
    }
}

/// A recover recomputed every row of `member` from the others (see `rebuilt`): the
/// parity it holds agrees with the data wherever its ring's entries were lost, so
/// the loss is forgotten, and the rings' next marker stops naming it — or the next
/// open would doubt that parity again, and list it torn when a member leaves.
pub(crate) fn ring_rebuilt(engine: &mut Engine, member: MemberIdx) {
    let Some(log) = engine.log.as_mut().filter(|l| !l.recovering()) else {
        return;
    };
    if !log.lost_rings.contains(&member) {
        return;
    }
    log.lost_rings.retain(|&m| m != member);
    if log.lost_rings.is_empty() {
        log.listed_for = 0;
    }
    newer_marker(engine);
}

/// Forgets what the replay could not vouch for; returns whether there was any.
fn clear_doubts(engine: &mut Engine) -> bool {
    let Some(log) = engine.log.as_mut() else {
        return false;
    };
    let doubted =
        !log.lost_rings.is_empty() || !log.skipped_stripes.is_empty() || log.vouches_nowhere;
    log.lost_rings.clear();
    log.listed_for = 0;
    log.skipped_stripes.clear();
    log.vouches_nowhere = false;
    doubted
}

/// Gets a marker saying what the log knows now onto the rings. One of the same
/// durable seq cannot take a flag back (the scan ORs the flags of equal markers, the
/// old one stays in the other slot): it says a newer seq, one no entry takes. With
/// writes not yet durable, the marker their flush brings does it.
fn newer_marker(engine: &mut Engine) {
    let Some(log) = engine.log.as_mut() else {
        return;
    };
    if !log.unfinished.is_empty() || log.durable + 1 != log.next_seq {
        // Not at the next client flush, which may be long in coming: a cut before it
        // would leave the flag, and a later open would count every ring as lost.
        log.durable_wanted = log.durable_wanted.max(log.next_seq.saturating_sub(1));
        start_checkpoint(engine);
        return;
    }
    log.next_seq += 1;
    log.durable = log.next_seq - 1;
    persist(engine, Waiter::Nothing);
}

// ----- recovery -------------------------------------------------------------------

/// Reads every active member's ring; client requests wait until the replay is done.
pub(crate) fn start_recovery(engine: &mut Engine) {
    let n = engine.member_states().len();
    let serving = engine.serving_devices();
    engine
        .log
        .as_mut()
        .expect("logging is on")
        .serving_as_recorded = serving;
    let ring = engine.log.as_ref().expect("logging is on").ring;
    let mut bufs = vec![None; n];
    let mut reads = Vec::new();
    for (m, slot) in bufs.iter_mut().enumerate() {
        // A member being rebuilt keeps entries of writes to the part it already holds.
        if engine.member_states()[m] != MemberState::Failed {
            let buf = engine.bufs.alloc(sectors_to_bytes(ring));
            *slot = Some(buf);
            reads.push((member_idx(m), buf));
        }
    }
    let pending = u32::try_from(reads.len()).expect("few members");
    engine.log.as_mut().expect("logging is on").recovery = Some(Recovery::Scanning {
        bufs,
        pending,
        unreadable: Vec::new(),
    });
    if reads.is_empty() {
        scanned(engine);
        return;
    }
    for (m, buf) in reads {
        let slice = BufSlice {
            buf,
            offset: 0,
            len: sectors_to_bytes(ring),
        };
        engine.emit_to(
            m,
            IoKind::Read,
            Area::Log,
            0,
            slice,
            IoTarget::LogRecovery { member: m },
        );
    }
}

/// A recovery I/O completed.
pub(crate) fn on_recovery_io(engine: &mut Engine, member: MemberIdx, result: Result<(), IoFailed>) {
    if let Err(failure) = result {
        let scanning = matches!(
            engine.log.as_ref().and_then(|l| l.recovery.as_ref()),
            Some(Recovery::Scanning { .. })
        );
        let reading = matches!(
            engine.log.as_ref().and_then(|l| l.recovery.as_ref()),
            Some(Recovery::Replaying(r)) if r.current.is_some()
        );
        if failure == IoFailed::Gone {
            engine.fail(member, FailReason::DeviceGone);
            if reading {
                replay(engine).replan = true;
            }
        } else if scanning {
            // An unreadable ring is left out below. Whatever entries it held are
            // unknown: the replay cannot vouch for parity where they were, and a
            // resync is owed as for an entry it skipped.
            engine.note_read_error(member);
            engine.stats.log_entries_skipped += 1;
        } else if reading {
            engine.note_read_error(member);
            replay(engine).unreadable = true;
        } else if matches!(
            engine.log.as_ref().and_then(|l| l.recovery.as_ref()),
            Some(Recovery::Replaying(_))
        ) {
            refused_in_replay(engine, member, failure);
        } else {
            engine.fail(member, FailReason::WriteError);
        }
    }
    let log = engine.log.as_mut().expect("logging is on");
    let (unusable, done) = match &mut log.recovery {
        Some(Recovery::Scanning {
            bufs,
            pending,
            unreadable,
        }) => {
            // An unreadable ring holds nothing we can use.
            let unusable = if result.is_err() {
                if result != Err(IoFailed::Gone) {
                    unreadable.push(member);
                }
                bufs[member.index()].take()
            } else {
                None
            };
            *pending -= 1;
            (unusable, (*pending == 0).then_some(true))
        }
        Some(Recovery::Replaying(r)) => {
            r.pending -= 1;
            (None, (r.pending == 0).then_some(false))
        }
        None => (None, None),
    };
    if let Some(buf) = unusable {
        engine.bufs.free(buf);
    }
    match done {
        Some(true) => scanned(engine),
        Some(false) => replay_step(engine),
        None => {}
    }
}

/// `member` refused a write of the replay (a medium error). Where its bad block log
/// takes the rows the replay wrote to it — tried again block by block first, so that
/// only the blocks refused again go there (the rows it was rewriting because the log
/// lists them already are taken at once) — it serves on, and what parity now says
/// of those rows is what reads rebuild; later entries treat them as gone. Else it is
/// failed when the replay ends (see [`Replay::refused`]).
fn refused_in_replay(engine: &mut Engine, member: MemberIdx, failure: IoFailed) {
    if replay(engine).retried.contains(&member) {
        // Another of its writes refused too: all are being tried again already.
        return;
    }
    let writes: Vec<(u64, BufSlice)> = replay(engine)
        .writing_rows
        .iter()
        .filter(|w| w.0 == member)
        .map(|&(_, at, buf)| (at, buf))
        .collect();
    let loggable = failure == IoFailed::Medium
        && !writes.is_empty()
        && engine.pseudo_role(member).is_none()
        && engine.is_present(member)
        && engine.bad_block_log_capacity(engine.slot_of(member)) > 0;
    if loggable {
        if let Some(blocks) = crate::badblocks::retry_blocks(writes.iter().copied()) {
            let r = replay(engine);
            r.retried.push(member);
            r.pending += u32::try_from(blocks.len()).expect("a stripe's rows in blocks");
            crate::badblocks::send_retries(engine, member, blocks, |sector, sectors| {
                IoTarget::LogReplayRetry {
                    member,
                    sector,
                    sectors,
                }
            });
            return;
        }
    }
    let listed = loggable
        && writes.iter().all(|&(at, buf)| {
            let sectors = buf.len as u64 / SECTOR_BYTES;
            crate::badblocks::record_refusal(engine, member, at..at + sectors)
        });
    if !listed {
        refused_until_the_end(engine, member);
    }
}

/// `member` refused a write of the replay its log cannot take: it is failed when the
/// replay ends.
fn refused_until_the_end(engine: &mut Engine, member: MemberIdx) {
    let r = replay(engine);
    let refusal = (member, r.writing_stripe);
    if !r.refused.contains(&refusal) {
        r.refused.push(refusal);
    }
}

/// A block of a refused replay write, tried again (see `refused_in_replay`),
/// answered: refused again, it goes into the member's log.
pub(crate) fn on_replay_retry(
    engine: &mut Engine,
    member: MemberIdx,
    sector: u64,
    sectors: u64,
    result: Result<(), IoFailed>,
) {
    match result {
        Ok(()) => {}
        Err(IoFailed::Gone) => engine.fail(member, FailReason::DeviceGone),
        Err(IoFailed::Medium)
            if crate::badblocks::record_refusal(engine, member, sector..sector + sectors) => {}
        Err(_) => refused_until_the_end(engine, member),
    }
    let r = replay(engine);
    r.pending -= 1;
    if r.pending == 0 {
        replay_step(engine);
    }
}

/// Every ring is in: collect the entries to replay, oldest first.
fn scanned(engine: &mut Engine) {
    let log = engine.log.as_mut().expect("logging is on");
    let Some(Recovery::Scanning {
        bufs, unreadable, ..
    }) = log.recovery.take()
    else {
        return;
    };
    let mut found: Vec<Found> = Vec::new();
    // The newest marker (by durable seq, then number) across the rings, and on each
    // ring its own (slot and sectors), so that each ring's next marker goes to the
    // other slot and a torn write cannot take its newest away.
    let mut newest_marker: Option<(MarkerKey, u64)> = None;
    let mut per_ring: Vec<Option<(MarkerKey, MarkerPlace)>> = vec![None; bufs.len()];
    // Whether an entry lay where the old layout keeps them (see `next_markers`).
    let mut old_entries = false;
    // Whether a marker of the newest durable seq says a resync is still owed.
    let mut owed: Option<(u64, bool, Option<RingMasks>)> = None;
    let mut skipped_before = (0, false);
    let mut skips_before: Vec<(u64, u32, u32)> = Vec::new();
    let mut unknown_before: Option<((u64, u64), Vec<crate::unknown::Named>)> = None;
    let mut marker_number = 0;
    let tag = engine.config.log_tag;
    // Per ring read, the newest marker on it (durable seq, number): a marker a cut
    // stopped short reaches some rings only.
    let mut ring_newest: Vec<(u64, u64)> = Vec::new();
    for (m, buf) in bufs.into_iter().enumerate() {
        let Some(buf) = buf else {
            continue;
        };
        let bytes = engine.bufs.get(buf);
        ring_newest.push((0, 0));
        let mut pos = 0usize;
        while pos + 512 <= bytes.len() {
            match parse(&bytes[pos..]) {
                Some((entry, sectors)) => {
                    // Either layout's slots: a marker's own length says which.
                    let slot_bytes = sectors_to_bytes(sectors);
                    let slot = (pos / slot_bytes) as u64;
                    let key = (entry.durable, entry.seq);
                    if entry.marker
                        && entry.tag == tag
                        && pos.is_multiple_of(slot_bytes)
                        && slot < 2
                        && [MARKER_SECTORS, LEGACY_MARKER_SECTORS].contains(&sectors)
                    {
                        if newest_marker.is_none_or(|(k, _)| key > k) {
                            newest_marker = Some((key, sectors));
                        }
                        if per_ring[m].is_none_or(|(k, _)| key > k) {
                            per_ring[m] = Some((key, (slot, sectors)));
                        }
                    }
                    if !entry.marker && entry.tag == tag && pos < sectors_to_bytes(RING_START) {
                        old_entries = true;
                    }
                    if entry.marker && entry.tag == tag && entry.durable >= skipped_before.0 {
                        // The newest markers' say (OR'd over equal ones, as below).
                        if entry.durable > skipped_before.0 {
                            skipped_before = (entry.durable, entry.skipped_elsewhere);
                            skips_before.clone_from(&entry.skips);
                        } else {
                            skipped_before.1 |= entry.skipped_elsewhere;
                            skips_before.extend(entry.skips.iter().copied());
                        }
                    }
                    if entry.marker && entry.tag == tag {
                        // The unknown rows of the newest marker, by durable seq and
                        // then number (every ring got the same one: all of them).
                        let key = (entry.durable, entry.seq);
                        if let Some(newest) = ring_newest.last_mut() {
                            *newest = (*newest).max(key);
                        }
                        match unknown_before.as_mut() {
                            Some((k, named)) if *k == key => {
                                named.extend(entry.unknown.iter().copied());
                            }
                            Some((k, _)) if *k > key => {}
                            _ => unknown_before = Some((key, entry.unknown.clone())),
                        }
                        marker_number = marker_number.max(entry.seq);
                    }
                    if entry.marker && entry.tag == tag {
                        // Flagged markers' masks: a flagged one without them knows
                        // nothing of which ring (every ring counts lost).
                        let masks = |e: &Found| {
                            if e.resync_owed {
                                e.masks
                            } else {
                                Some((0, u64::MAX))
                            }
                        };
                        owed = match owed {
                            Some((d, o, m)) if d > entry.durable => Some((d, o, m)),
                            Some((d, o, m)) if d == entry.durable => Some((
                                d,
                                o || entry.resync_owed,
                                m.zip(masks(&entry))
                                    .map(|((l1, f1), (l2, f2))| (l1 | l2, f1 & f2)),
                            )),
                            _ => Some((entry.durable, entry.resync_owed, masks(&entry))),
                        };
                    }
                    found.push(entry);
                    pos += sectors_to_bytes(sectors);
                }
                None => pos += 512,
            }
        }
        engine.bufs.free(buf);
    }
    // Only this array's entries, and only ones that fit its geometry: a ring may hold
    // what another array (or an earlier life of these disks) left there.
    let geo = engine.geo;
    found.retain(|e| {
        let rows = u64::from(e.hi.saturating_sub(e.lo));
        e.tag == tag
            && (e.marker
                || (e.stripe < geo.stripes()
                    && e.lo < e.hi
                    && e.hi <= geo.chunk_sectors()
                    && e.segs.iter().all(|s| {
                        (s.data_index < geo.data_disks() || s.kind.is_syndrome())
                            && (s.kind != SegKind::Written
                                || (e.lo <= s.lo && s.lo < s.hi && s.hi <= e.hi))
                    })
                    && e.payload.len() as u64
                        == e.segs.iter().filter(|s| s.has_payload()).count() as u64
                            * rows
                            * SECTOR_BYTES))
    });
    // Whether the rings hold an entry of this array: a marker may not have followed it
    // yet (an open that owes no resync writes its first at its first flush).
    let entries_found = found.iter().any(|e| !e.marker);
    // Something wrote the array after the log last did (see
    // `Engine::superblocks_unstamped`): the rings' newest record — the newest
    // marker, or an entry it does not cover — comes from a build that stamps.
    let newest_entry = found.iter().filter(|e| !e.marker).max_by_key(|e| e.seq);
    let newest_record = found
        .iter()
        .filter(|e| e.marker)
        .max_by_key(|e| (e.durable, e.seq))
        .filter(|m| newest_entry.is_none_or(|e| e.seq <= m.durable))
        .or(newest_entry);
    let elsewhere = engine.superblocks_unstamped && newest_record.is_some_and(|r| r.stamped);
    let durable = found.iter().map(|e| e.durable).max().unwrap_or(0);
    let max_seq = found
        .iter()
        .filter(|e| !e.marker)
        .map(|e| e.seq)
        .max()
        .unwrap_or(0)
        .max(durable);
    let mut entries: Vec<Found> = found
        .into_iter()
        .filter(|e| e.seq > durable && !e.marker)
        .collect();
    entries.sort_by_key(|e| e.seq);
    entries.dedup_by_key(|e| e.seq);
    if elsewhere || !engine.resync_owed || engine.resync_after_clean_stop.is_some() {
        // The superblocks say the array was last stopped cleanly: every write was
        // durable and parity agreed with the data then. Entries no marker covers are
        // older than that stop — from before md (which knows nothing of the rings)
        // ran the array, say — and replaying them would make parity from partial
        // parity of rows written since, wrong wherever a member is missing. So are
        // they where another program wrote the superblocks since, clean or not.
        entries.clear();
    }
    mark_last_for(&mut entries);
    let rings: Vec<Option<MarkerPlace>> = per_ring.iter().map(|r| r.map(|(_, at)| at)).collect();
    let (sectors, slots) = next_markers(
        newest_marker.map(|(_, n)| n),
        &rings,
        old_entries,
        !entries.is_empty(),
    );
    let log = engine.log.as_mut().expect("logging is on");
    log.marker_sectors = sectors;
    // One per role, as the rings read: `bufs` has a place for every role.
    log.marker_slots = slots;

    // A clean stop left nothing to replay: a ring that fails to read now lost nothing.
    let unclean = engine.resync_owed && engine.resync_after_clean_stop.is_none() && !elsewhere;
    let lost_now = if unclean {
        unreadable.clone()
    } else {
        Vec::new()
    };
    let members = engine.member_states().len();
    let mut open_walks = vec![(lost_now.clone(), 0)];
    let mut listed_for = 0;
    let mut vouches_nowhere = false;
    // The rule below for rings that know nothing of the array fired.
    let mut knew_nothing = false;
    let mut skipped_earlier: Vec<(u64, u32, u32)> = Vec::new();
    let mut stamp_rings = false;
    if let Some((_, true, masks)) = owed.filter(|_| engine.resync_owed) {
        // A replay before this one could not vouch for parity, and no resync has
        // completed since (the marker says so): it is still owed. The marker says
        // which rings it lost (went with the wipe) and for which missing members their
        // stripes are listed; one that does not counts every ring lost.
        engine.stats.log_entries_skipped += 1;
        vouches_nowhere = skipped_before.1;
        skipped_earlier = std::mem::take(&mut skips_before);
        let (lost, listed) = masks.unwrap_or((u64::MAX, 0));
        let earlier: Vec<MemberIdx> = (0..members)
            .filter(|&m| m >= 64 || lost & (1 << m) != 0)
            .map(member_idx)
            .collect();
        listed_for = listed;
        open_walks.push((earlier, listed));
        if elsewhere {
            // The doubts the marker pins to stripes stand; what was written after
            // it, the log knows nothing of (see the rule below).
            vouches_nowhere = true;
            knew_nothing = true;
        }
    } else if engine.resync_owed
        && (elsewhere || (newest_marker.is_none() && !entries_found && !ring_newest.is_empty()))
    {
        // Rings read, and none holds a marker or an entry of this array, which owes a
        // resync: the log knows nothing of how its parity came to disagree — an array
        // made over old contents whose initial resync is still to run (an open that
        // owes a resync writes a marker before any client write), one md made and
        // never resynced, or one left dirty by md or by a server without the log.
        // Nothing says parity ever agreed with the data, or where a cut-off write
        // tore it: the log vouches for it nowhere (as after a replay that skipped
        // entries it could not pin), the resync stays owed — writes ahead of it make
        // parity from all the stripe's data, never from the old parity — and the
        // marker at the replay's end carries that to a later open. Where the driver
        // knows the resync is the initial one of an array nothing has written (see
        // `Engine::owe_initial_resync`), no write was ever cut off: parity a client
        // write makes from now on is trusted to rebuild a row, as md trusts it. The
        // same where another program wrote the superblocks since xraid did, whatever
        // the rings hold: their markers speak of parity as it was before its writes
        // (`Engine::superblocks_unstamped`).
        engine.stats.log_entries_skipped += 1;
        vouches_nowhere = !engine.initial_resync;
        knew_nothing = true;
    } else if !engine.resync_owed && newest_marker.is_none() && !entries_found {
        // Rings that hold nothing of this array, on an open that owes no resync (a
        // new array's first): a marker goes on them at the replay's end, before any
        // write, so that a crash between the superblocks going dirty and the first
        // entry finds the array known with nothing cut off — not one whose parity
        // nothing vouches for (the rule above), which a degraded array stays, dirty,
        // until it is whole again (a crash loop's first kill found that window).
        stamp_rings = true;
    }
    let mut lost_rings: Vec<MemberIdx> = Vec::new();
    for (lost, _) in &open_walks {
        for &m in lost {
            if !lost_rings.contains(&m) {
                lost_rings.push(m);
            }
        }
    }
    open_walks.retain(|(lost, _)| !lost.is_empty());
    let log = engine.log.as_mut().expect("logging is on");
    log.lost_rings = lost_rings;
    log.listed_for = listed_for;
    log.open_walks = open_walks;
    log.vouches_nowhere = vouches_nowhere;
    log.knew_nothing = knew_nothing;
    log.skipped_stripes.clear();
    for (stripe, lo, hi) in skipped_earlier {
        add_band(log.skipped_stripes.entry(stripe).or_default(), lo, hi);
    }
    // Unknown rows stay so until a write covers them, resync or none.
    log.marker_number = marker_number;
    crate::unknown::clear(&mut log.unknown);
    for named in unknown_before.map(|(_, named)| named).unwrap_or_default() {
        match named {
            crate::unknown::Named::Band {
                stripe,
                role,
                lo,
                hi,
            } => {
                let hi = hi.min(geo.chunk_sectors());
                if stripe < geo.stripes() && usize::from(role) < members && lo < hi {
                    crate::unknown::add(engine, stripe, member_idx(usize::from(role)), lo, hi);
                }
            }
            crate::unknown::Named::Span { role, first, last } => {
                let last = last.min(geo.stripes().saturating_sub(1));
                if usize::from(role) < members && first <= last {
                    crate::unknown::add_span(engine, role, first, last);
                }
            }
        }
    }
    let log = engine.log.as_mut().expect("logging is on");
    log.lost_from = engine.resync_after_clean_stop.unwrap_or(0);
    log.persisted = durable;
    // The newest marker reached only some rings (a cut stopped its writes): what it
    // says goes on every ring at the replay's end, or a later open that cannot read
    // those rings would go by an older one (its unknown rows, its skipped bands).
    let newest = ring_newest.iter().copied().max().unwrap_or_default();
    if stamp_rings || ring_newest.iter().any(|&k| k != newest) {
        log.marker_owed = true;
    }
    log.recovery = Some(Recovery::Replaying(Box::new(Replay {
        entries: entries.into(),
        current: None,
        writing: None,
        pending: 0,
        replayed: 0,
        worked_out: 0,
        max_seq,
        unreadable: false,
        replan: false,
        flushing: None,
        writing_stripe: 0,
        writing_rows: Vec::new(),
        retried: Vec::new(),
        awaiting_record: false,
        refused: Vec::new(),
        to_wipe: unreadable,
        wiping: None,
    })));
    replay_step(engine);
}

/// Gives each entry (oldest first) the rows where no later entry of its stripe
/// follows: there it decides what parity says, and a later entry elsewhere. A later
/// entry's partial parity counts on rows as it found them (earlier writes' data it
/// carried or that was durable), and a gone chunk it works out from P needs P as the
/// cut left it, so an earlier entry's replay must not rewrite those rows.
fn mark_last_for(entries: &mut [Found]) {
    let mut covered: HashMap<u64, Vec<(u32, u32)>> = HashMap::new();
    for e in entries.iter_mut().rev() {
        let later = covered.entry(e.stripe).or_default();
        e.last_for = rows_outside(later, e.lo, e.hi);
        later.push((e.lo, e.hi));
    }
    let mut written: HashMap<u64, Vec<(u16, u32, u32)>> = HashMap::new();
    for e in entries.iter_mut() {
        let before = written.entry(e.stripe).or_default();
        e.earlier.clone_from(before);
        before.extend(
            e.segs
                .iter()
                .filter(|s| s.kind == SegKind::Written)
                .map(|s| (s.data_index, s.lo, s.hi)),
        );
    }
}

/// Rows of the gone chunks `plan` works out from parity that nobody can know (see
/// [`crate::unknown`]): where the write covered a gone chunk and parity may also hold,
/// or lack, another change in those rows — another chunk the same write covered, or
/// one an earlier entry of the replay wrote. With only the one chunk changed, parity
/// as the cut left it gives its old rows or its new ones (sector by sector) and both
/// are right. Only the rows the entry decides ([`Found::last_for`]), and only of
/// members gone since the write: rows a present member's log lists it refused, and
/// drivers make every completed write durable before they record a listing (a cut
/// before that finds the rows unlisted, holding the old data).
fn unknowable(engine: &Engine, entry: &Found, plan: &WorkOut) -> Vec<(u16, u32, u32)> {
    let map = engine.geo.stripe_map(entry.stripe);
    let data_disks = map.data_disks();
    let mut out = Vec::new();
    for piece in plan.pieces.iter().filter(|p| !p.covered.is_empty()) {
        let (from, to) = (piece.from, piece.to);
        let gone = |g: u16| !holds_for_replay(engine, map.data_member(g), entry.stripe);
        for &g in piece.covered.iter().filter(|&&g| gone(g)) {
            let changed_too = |i: u16| i != g && entry.writes(i, from, to);
            let unsure = piece.covered.len() > 1
                || (0..data_disks).any(changed_too)
                || entry
                    .earlier
                    .iter()
                    .any(|&(i, a, b)| i != g && a < to && from < b);
            if !unsure {
                continue;
            }
            out.extend(entry.last_for_within(from, to).map(|(a, b)| (g, a, b)));
        }
    }
    out
}

/// The parts of lo..hi outside every range of `ranges` (an empty range leaves it whole).
pub(crate) fn rows_outside(ranges: &[(u32, u32)], lo: u32, hi: u32) -> Vec<(u32, u32)> {
    let mut free = vec![(lo, hi)];
    for &(a, b) in ranges {
        free = free
            .into_iter()
            .flat_map(|(from, to)| [(from, to.min(a)), (from.max(b), to)])
            .filter(|(from, to)| from < to)
            .collect();
    }
    free
}

fn replay(engine: &mut Engine) -> &mut Replay {
    match &mut engine.log.as_mut().expect("logging is on").recovery {
        Some(Recovery::Replaying(r)) => r,
        _ => unreachable!("replaying"),
    }
}

/// Moves the replay on, one entry at a time: read the changed chunks' current rows,
/// write the parity they and the partial parity make, and end with a flush.
fn replay_step(engine: &mut Engine) {
    loop {
        if let Some(buf) = replay(engine).writing.take() {
            engine.bufs.free(buf);
            replay(engine).writing_rows.clear();
            replay(engine).retried.clear();
        }
        if let Some(buf) = replay(engine).flushing.take() {
            // The replayed parity is durable: say so on the rings before clients go on.
            engine.bufs.free(buf);
            for (member, _) in std::mem::take(&mut replay(engine).refused) {
                engine.fail(member, FailReason::WriteError);
            }
            spill_unknown_rows(engine);
            // Run again after the wipe's round: a member may have left since.
            walks_at_open(engine);
            if engine.bad_blocks_to_record() || failures_to_record(engine) {
                // Rows the replay's parity counts on as held elsewhere (refused, and
                // listed) must be listed on disk before the rings say the entries are
                // done with: a restart in between would find them unlisted, holding
                // what the member had, and nothing left to replay. So must a device
                // that stopped serving meanwhile (a member gone, or refusing a write
                // its log cannot list; a replacement dropped or taking over): back as
                // current, it would serve rows the replay never wrote.
                replay(engine).awaiting_record = true;
                return;
            }
            replayed_and_recorded(engine);
            return;
        }
        if let Some((entry, scratch, plan)) = replay(engine).current.take() {
            let r = replay(engine);
            if std::mem::take(&mut r.replan) {
                // Planned with a member that has vanished since: again without it.
                r.unreadable = false;
                r.entries.push_front(entry);
                engine.bufs.free(scratch);
                continue;
            }
            if std::mem::take(&mut r.unreadable) {
                // The changed rows cannot be read: what parity says is all there is.
                engine.bufs.free(scratch);
                skipped(engine, &entry);
                continue;
            }
            r.replayed += 1;
            if write_parity(engine, &entry, scratch, plan) {
                return;
            }
            continue;
        }
        if let Some(buf) = replay(engine).wiping.take() {
            engine.bufs.free(buf);
        }
        let Some(entry) = replay(engine).entries.pop_front() else {
            // Replacements took the replayed parity too.
            let members = engine.flush_targets();
            let buf = engine.bufs.alloc(0);
            let r = replay(engine);
            r.flushing = Some(buf);
            r.pending = u32::try_from(members.len()).expect("few members");
            if members.is_empty() {
                continue;
            }
            engine.emit_flushes(&members, buf, |member| IoTarget::LogRecovery { member });
            return;
        };
        if read_segments(engine, entry) {
            return;
        }
    }
}

/// A crash may have torn the parity of any stripe a write was under way in (its
/// write-intent bit set, or anywhere without a bitmap). Where every present parity
/// member's ring is among `lost` (their entries are gone: nothing replayed there)
/// and a data member is missing or not rebuilt there, that member's rows would be
/// rebuilt from that parity: right or wrong, nobody can tell — md's write hole, a
/// second fault in the stripe. Such parity rows go into their members' bad block
/// logs, so that rebuilding the missing rows fails loudly instead (a write over them
/// too, as over any stripe listed past its redundancy). Recorded before the rings'
/// marker, as every list the replay changes. A member whose log has no room (or that
/// has none) serves on: the rule of [`crate::sync::parity_in_doubt`] doubts the same
/// rows while the resync stays owed (the marker names the lost ring), so the missing
/// rows read as errors all the same, while its other rows — data, and parity where no
/// data is missing — still count. Failing it whole, as before, lost rows it held: a
/// member dying during the replay then had them worked out from parity, unknown.
fn list_torn_beyond_redundancy(
    engine: &mut Engine,
    lost: &[MemberIdx],
    from: u64,
    listed_for: u64,
) {
    let whole = engine
        .member_states()
        .iter()
        .all(|&s| s == MemberState::Active);
    if whole && !crate::badblocks::any(engine) {
        return;
    }
    let geo = engine.geo;
    let total = geo.stripes();
    let mut no_room: Vec<MemberIdx> = Vec::new();
    let mut drop: Vec<MemberIdx> = Vec::new();
    let mut stripe = crate::intent::next_dirty_unit(engine, from, total);
    while stripe < total {
        let map = geo.stripe_map(stripe);
        // Most stripes keep their entries on a ring that read: the cheap test first
        // (the walk may visit every stripe of a large array).
        if !lost.contains(&map.p()) && map.q().is_none_or(|q| !lost.contains(&q)) {
            stripe = crate::intent::next_dirty_unit(engine, stripe + 1, total);
            continue;
        }
        let rows = geo.member_sector(stripe, 0)..geo.member_sector(stripe + 1, 0);
        // A member holds its rows here unless it is out of sync or lists some of them.
        let holds = |m: MemberIdx| {
            engine.in_sync(m, stripe) && !crate::badblocks::is_known_bad(engine, m, rows.clone())
        };
        // A parity member that lists a few rows here still serves the others: it
        // counts (and is listed whole) unless its log lists all of them already.
        let parity: Vec<MemberIdx> = [Some(map.p()), map.q()]
            .into_iter()
            .flatten()
            .filter(|&p| {
                engine.in_sync(p, stripe)
                    && !crate::badblocks::is_all_known_bad(engine, p, rows.clone())
            })
            .collect();
        // A member missing when these rings' stripes were last listed had them listed
        // then: only one that went missing since, or lists rows, makes it new.
        let listed_then = |m: MemberIdx| {
            m.index() < 64
                && listed_for & (1 << m.index()) != 0
                && engine.member_states()[m.index()] != MemberState::Active
                && !crate::badblocks::is_known_bad(engine, m, rows.clone())
        };
        let data_missing = (0..map.data_disks())
            .map(|i| map.data_member(i))
            .any(|m| !holds(m) && !listed_then(m));
        // Any present parity member whose ring is lost may be torn: another parity
        // member vouches for the stripe only if it was there to replay the entries,
        // and one rebuilt since (from data, so right itself) did not put the torn one
        // right — a RAID-6 read rebuilding through P would still get it wrong. Only the
        // lost ones are listed: the stripe reads through the others.
        // Not one a recover has recomputed here since the open (see `rebuilt`).
        let chunk = geo.chunk_sectors();
        let torn: Vec<MemberIdx> = parity
            .into_iter()
            .filter(|p| lost.contains(p) && !engine.recomputed.covers(*p, stripe, (0, chunk)))
            .collect();
        if data_missing && !torn.is_empty() {
            for p in torn {
                if no_room.contains(&p)
                    || !crate::badblocks::record_torn_parity(engine, p, rows.clone())
                {
                    if !no_room.contains(&p) {
                        no_room.push(p);
                    }
                    engine.push_event(Event::TornParityUnlisted {
                        member: p,
                        sector: rows.start,
                        sectors: rows.end - rows.start,
                    });
                }
                // A replacement being built may hold a copy of those rows already.
                if let Some(r) = engine.replacement_of(p) {
                    if !drop.contains(&r)
                        && !crate::badblocks::record_torn_parity_on_replacement(
                            engine,
                            p,
                            rows.clone(),
                        )
                    {
                        drop.push(r);
                    }
                }
            }
        }
        stripe = crate::intent::next_dirty_unit(engine, stripe + 1, total);
    }
    for replacement in drop {
        engine.fail(replacement, FailReason::TornParity);
    }
}

/// Parity member `p`'s rows `rows` may be torn (see [`crate::sync::parity_in_doubt`])
/// and a data member's rows there cannot be read: they go into `p`'s log (and its
/// replacement's, which may have copied them), as [`list_torn_beyond_redundancy`]
/// lists them at open. Returns whether `p`'s log took them: one without room keeps
/// serving (a doubt is no reason to lose a member; the caller fails what needed the
/// rows instead), while a replacement whose log has none is dropped, as it would
/// serve the rows unlisted once it took the role.
pub(crate) fn list_parity_in_doubt(
    engine: &mut Engine,
    p: MemberIdx,
    rows: std::ops::Range<u64>,
) -> bool {
    if !crate::badblocks::record_torn_parity(engine, p, rows.clone()) {
        return false;
    }
    if engine.replacement_of(p).is_some()
        && !crate::badblocks::record_torn_parity_on_replacement(engine, p, rows)
    {
        if let Some(r) = engine.replacement_of(p) {
            engine.fail(r, FailReason::TornParity);
        }
    }
    true
}

/// A member left while a resync the replay left owed has stripes still to do (see
/// [`LogState::lost_rings`]): those past it are listed as at open.
fn torn_by_a_departure(engine: &mut Engine) {
    let (lost, from, listed_for) = match engine.log.as_ref() {
        Some(log) if !log.lost_rings.is_empty() && !log.recovering() => {
            (log.lost_rings.clone(), log.lost_from, log.listed_for)
        }
        _ => return,
    };
    let from = engine
        .sync_progress()
        .filter(|p| p.kind == crate::SyncKind::Resync)
        .map_or(from, |p| p.done_below.max(from));
    let missing = missing_mask(engine);
    list_torn_beyond_redundancy(engine, &lost, from, listed_for);
    engine.log.as_mut().expect("logging is on").listed_for = missing;
}

/// The walks the open owes (see [`LogState::open_walks`]); run at each of the
/// replay's ends and when it is over, for members that leave meanwhile. Each run
/// counts every member missing as it starts as listed for.
fn walks_at_open(engine: &mut Engine) {
    let (walks, from) = match engine.log.as_ref() {
        Some(log) => (log.open_walks.clone(), log.lost_from),
        None => return,
    };
    // Every member missing as the walks start is listed for once they are done (on
    // the new rings' stripes too): what the next marker says. Not one the walks fail
    // (no log room): its stripes as a data member were not walked.
    let missing = missing_mask(engine);
    for (lost, listed_for) in walks {
        list_torn_beyond_redundancy(engine, &lost, from, listed_for);
    }
    if let Some(log) = engine.log.as_mut() {
        if !log.lost_rings.is_empty() {
            log.listed_for = missing;
        }
    }
}

/// Unknown rows were added outside the replay (see `stripe::torn_by_the_loss`): the
/// rings' next marker names them, written now.
pub(crate) fn say_unknown_rows(engine: &mut Engine) {
    let Some(log) = engine.log.as_mut() else {
        return;
    };
    log.marker_owed = true;
    if !log.recovering() {
        persist(engine, Waiter::Nothing);
    }
}

/// Members not active now, as a mask ([`FLAG_MASKS`]; all bits past 64 members).
fn missing_mask(engine: &Engine) -> u64 {
    let states = engine.member_states();
    if states.len() > 64 {
        return u64::MAX;
    }
    (0..states.len())
        .filter(|&m| states[m] != MemberState::Active)
        .fold(0, |mask, m| mask | 1 << m)
}

/// `members` as a mask, if every one fits in 64 bits.
fn mask_of(members: &[MemberIdx]) -> Option<u64> {
    members.iter().try_fold(0u64, |mask, m| {
        (m.index() < 64).then(|| mask | 1 << m.index())
    })
}

/// More unknown rows than a marker names (the room the skipped bands leave of
/// [`marker_room`] records): the rest (and, where their role was rebuilt since, the
/// rows on its own device) go into
/// their stripes' parity members' bad block logs, as a lost ring's stripes do, which
/// outlive any restart — the rows then read as lost past the redundancy (a write over
/// the whole band makes them good), and a rebuild lists them on the member it builds.
/// Rows no log has room for are merged into spans on the markers (see
/// [`crate::unknown::records`]), taking a skipped band's place where they must. Not
/// where spans over neighbours fit the room without taking in rows known. Recorded before the rings' marker, as every list the
/// replay changes.
fn spill_unknown_rows(engine: &mut Engine) {
    let room = unknown_rows_room(engine);
    let (records, taken_in) = crate::unknown::records(engine, room);
    if taken_in == 0 && records.len() <= room {
        // Spans over neighbours take in nothing known: the records hold them all.
        return;
    }
    let named = crate::unknown::named(engine);
    for &(stripe, role, lo, hi) in named.iter().skip(room) {
        let geo = engine.geo;
        let map = geo.stripe_map(stripe);
        let rows = geo.member_sector(stripe, lo)..geo.member_sector(stripe, hi);
        let parity: Vec<MemberIdx> = [Some(map.p()), map.q()]
            .into_iter()
            .flatten()
            .filter(|&p| engine.is_present(p))
            .collect();
        // A role rebuilt since holds what parity made of its rows and is read
        // directly: its own log lists them too, so that a read goes to parity and
        // finds that listed as well.
        let member = member_idx(usize::from(role));
        let own = !engine.in_sync(member, stripe)
            || crate::badblocks::record_lost(engine, member, rows.clone());
        let listed = own
            && !parity.is_empty()
            && parity
                .into_iter()
                .all(|p| list_parity_in_doubt(engine, p, rows.clone()));
        if listed {
            crate::unknown::known_again(engine, stripe, member_idx(usize::from(role)), lo, hi);
        }
    }
}

/// The replay skipped an entry of `stripe`: a resync is owed, and until it reaches
/// the stripe its parity is what the cut left.
fn skipped(engine: &mut Engine, entry: &Found) {
    engine.stats.log_entries_skipped += 1;
    if let Some(log) = engine.log.as_mut() {
        add_band(
            log.skipped_stripes.entry(entry.stripe).or_default(),
            entry.lo,
            entry.hi,
        );
    }
}

/// Parity of rows lo..hi of `stripe` agrees with the data again: the replay wrote it
/// from the data alone (a later entry, none of whose rows it worked out from parity
/// in doubt), or a client write computed it afresh (see `sync::parity_made_fresh`).
pub(crate) fn parity_agrees_again(engine: &mut Engine, stripe: u64, lo: u32, hi: u32) {
    if let Some(log) = engine.log.as_mut() {
        if let Some(bands) = log.skipped_stripes.get_mut(&stripe) {
            remove_band(bands, lo, hi);
            if bands.is_empty() {
                log.skipped_stripes.remove(&stripe);
            }
        }
    }
}

/// Adds rows lo..hi to `bands` (sorted, apart), merging what touches.
pub(crate) fn add_band(bands: &mut Vec<(u32, u32)>, lo: u32, hi: u32) {
    bands.push((lo, hi));
    bands.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(bands.len());
    for &(a, b) in bands.iter() {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    *bands = merged;
}

/// Takes rows lo..hi out of `bands`.
pub(crate) fn remove_band(bands: &mut Vec<(u32, u32)>, lo: u32, hi: u32) {
    *bands = bands
        .iter()
        .flat_map(|&(a, b)| [(a, b.min(lo)), (a.max(hi), b)])
        .filter(|&(a, b)| a < b)
        .collect();
}

/// Whether entries were skipped in stripes a marker could not name: this replay's
/// (see [`LogState::skipped_stripes`]) or an earlier one's.
fn skipped_elsewhere(engine: &Engine) -> bool {
    engine.log.as_ref().is_some_and(|l| {
        l.vouches_nowhere
            || l.skipped_stripes.values().map(Vec::len).sum::<usize>() > l.marker_room()
    })
}

/// Whether the replay vouches for parity member `parity`'s rows lo..hi of `stripe`:
/// every entry that may have been cut off there was replayed (or there was none). Not
/// over rows of an entry it skipped in the stripe, nor where `parity`'s ring was lost
/// (it held the stripe's only entries there; see [`LogState::lost_rings`]) — doubts
/// it pins to the stripe — nor, with `unpinned`, anywhere while an earlier replay's
/// skipped entries are unknown (a flagged marker says so), nor anywhere without the
/// log. Meaningful while the resync the replay leaves owed has not reached the stripe.
pub(crate) fn vouches_for(
    engine: &Engine,
    stripe: u64,
    (lo, hi): (u32, u32),
    parity: MemberIdx,
    unpinned: bool,
) -> bool {
    let Some(l) = engine.log.as_ref() else {
        return !unpinned;
    };
    let skipped = l
        .skipped_stripes
        .get(&stripe)
        .is_some_and(|bands| bands.iter().any(|&(a, b)| a < hi && lo < b));
    let in_doubt = l.recovering()
        || skipped
        || l.lost_rings.contains(&parity)
        || (unpinned && l.vouches_nowhere);
    !in_doubt
}

/// Whether the open found no marker or entry of the array on its rings while owing a
/// resync (see [`LogState::knew_nothing`]).
pub(crate) fn knew_nothing(engine: &Engine) -> bool {
    engine.log.as_ref().is_some_and(|l| l.knew_nothing)
}

/// A device joined the array (a member back or new, a replacement taking its role):
/// its ring was wiped when it came, and the next marker is far off (a flush's). What
/// the rings say (unknown rows, skipped bands, what is durable) goes onto it now, or
/// a later open that can read no other ring would go by none.
pub(crate) fn device_joined(engine: &mut Engine) {
    let Some(log) = engine.log.as_mut() else {
        return;
    };
    log.marker_owed = true;
    if !log.recovering() {
        persist(engine, Waiter::Nothing);
    }
}

/// Whether the walk at a later unclean open may list parity member `p`'s rows where
/// a data member lists rows (see [`list_torn_beyond_redundancy`]): `p`'s ring is
/// counted lost (until the owed resync completes). In any stripe: that open owes the
/// resync from the start and walks every stripe, knowing nothing of how far this one
/// got.
pub(crate) fn listed_at_a_later_open(engine: &Engine, p: MemberIdx) -> bool {
    engine
        .log
        .as_ref()
        .is_some_and(|l| l.lost_rings.contains(&p))
}

/// The rings counted lost (see [`LogState::lost_rings`]).
pub(crate) fn lost_rings(engine: &Engine) -> Vec<MemberIdx> {
    engine
        .log
        .as_ref()
        .map_or_else(Vec::new, |l| l.lost_rings.clone())
}

/// Whether rings are counted lost (see [`LogState::lost_rings`]).
pub(crate) fn rings_lost(engine: &Engine) -> bool {
    engine
        .log
        .as_ref()
        .is_some_and(|l| !l.lost_rings.is_empty())
}

/// Zeroes the rings that failed to read (see [`Replay::to_wipe`]); the replay's
/// steps then run again (nothing left to replay: a flush, which makes the wipe
/// durable, and the records and marker if anything changed).
fn wipe_unreadable_rings(engine: &mut Engine) {
    let ring = engine.log.as_ref().expect("logging is on").ring;
    let members: Vec<MemberIdx> = std::mem::take(&mut replay(engine).to_wipe)
        .into_iter()
        .filter(|&m| engine.member_states()[m.index()] != MemberState::Failed)
        .collect();
    let len = sectors_to_bytes(ring);
    let buf = engine.bufs.alloc(len);
    engine.bufs.get_mut(buf).fill(0);
    let r = replay(engine);
    r.wiping = Some(buf);
    r.pending = u32::try_from(members.len()).expect("few members");
    if members.is_empty() {
        replay_step(engine);
        return;
    }
    for m in members {
        let slice = BufSlice {
            buf,
            offset: 0,
            len,
        };
        engine.emit_to(
            m,
            IoKind::Write,
            Area::Log,
            0,
            slice,
            IoTarget::LogRecovery { member: m },
        );
    }
}

/// The replay is flushed and the lists it changed are recorded: the rings say so.
fn replayed_and_recorded(engine: &mut Engine) {
    let max_seq = replay(engine).max_seq;
    let log = engine.log.as_mut().expect("logging is on");
    log.next_seq = max_seq + 1;
    log.durable = max_seq;
    // What this replay could not vouch for goes on the rings before the entries (or
    // the ring it could not read) that say so are gone; so does a newest marker that
    // reached some rings only (see `scanned`).
    log.marker_owed |= engine.stats.log_entries_skipped > 0;
    persist(engine, Waiter::Recovery);
}

/// Whether the replay waits for the driver to record the bad block lists.
pub(crate) fn awaits_record(engine: &Engine) -> bool {
    matches!(
        engine.log.as_ref().and_then(|l| l.recovery.as_ref()),
        Some(Recovery::Replaying(r)) if r.awaiting_record
    )
}

/// Whether a device stopped serving since the superblocks last recorded which did
/// (during the stripe log's recovery; see [`LogState::serving_as_recorded`]): a
/// member failed, a replacement dropped, or a member whose replacement took its role
/// over.
pub(crate) fn failures_to_record(engine: &Engine) -> bool {
    let Some(log) = engine.log.as_ref() else {
        return false;
    };
    engine
        .serving_devices()
        .iter()
        .zip(&log.serving_as_recorded)
        .any(|(now, recorded)| *recorded && !now)
}

/// The driver recorded which devices serve as `serving` says (per driver slot, from
/// [`Engine::serving_devices`] before the superblocks were written); a replay
/// waiting for that goes on, once the lists are recorded too.
pub(crate) fn failures_recorded(engine: &mut Engine, serving: &[bool]) {
    if let Some(log) = engine.log.as_mut() {
        if serving.len() == log.serving_as_recorded.len() {
            log.serving_as_recorded = serving.to_vec();
        }
    }
    lists_recorded(engine);
}

/// The driver recorded the bad block lists: a replay waiting for that goes on, once
/// the members' failures are recorded too.
pub(crate) fn lists_recorded(engine: &mut Engine) {
    if awaits_record(engine) && !engine.bad_blocks_to_record() && !failures_to_record(engine) {
        replay(engine).awaiting_record = false;
        replayed_and_recorded(engine);
    }
}

/// Whether the replay may read `member`'s rows of `stripe`: active, or being rebuilt
/// and rebuilt there by what the superblocks record (the recover resumes above it).
fn holds_for_replay(engine: &Engine, member: MemberIdx, stripe: u64) -> bool {
    let refused = matches!(
        engine.log.as_ref().and_then(|l| l.recovery.as_ref()),
        Some(Recovery::Replaying(r)) if r.refused.contains(&(member, stripe))
    );
    match engine.member_states()[member.index()] {
        _ if refused => false,
        MemberState::Active => true,
        MemberState::Rebuilding => stripe < engine.recovery_recorded(member),
        MemberState::Failed => false,
    }
}

/// [`holds_for_replay`], for the entry's rows: a member whose bad block log lists any
/// of them holds nothing there to count on, as if it had gone with the power (its
/// rows are worked out from the partial parity, not read).
fn holds_rows_for_replay(engine: &Engine, member: MemberIdx, entry: &Found) -> bool {
    let rows = engine.geo.member_sector(entry.stripe, entry.lo)
        ..engine.geo.member_sector(entry.stripe, entry.hi);
    holds_for_replay(engine, member, entry.stripe)
        && !crate::badblocks::is_known_bad(engine, member, rows)
}

/// The data chunks of the entry's stripe that the entry does not carry and that
/// cannot be read now: their members left since the write (or list its rows as bad).
fn gone_chunks(engine: &Engine, entry: &Found) -> Vec<u16> {
    let map = engine.geo.stripe_map(entry.stripe);
    (0..map.data_disks())
        .filter(|&i| !entry.logs(i) && !holds_rows_for_replay(engine, map.data_member(i), entry))
        .collect()
}

/// How the replay works out the data chunks gone since an entry's write (none gone:
/// nothing to work out).
#[derive(Debug)]
struct WorkOut {
    gone: Vec<u16>,
    /// Whether P and Q are gone now, or cannot be read.
    parity_gone: [bool; 2],
    /// The entry's partial Q counts (RAID-6 only).
    with_q: bool,
    /// Rows of a gone chunk the write covered, which only parity can give: the
    /// replay reads the parity members' rows as well.
    read_parity: bool,
    pieces: Vec<Piece>,
}

/// Rows from..to of an entry inside which no chunk's written rows start or end, with
/// the gone chunks the write left alone there (worked out from the partial syndromes)
/// and those it covered (from parity).
#[derive(Debug)]
struct Piece {
    from: u32,
    to: u32,
    alone: Vec<u16>,
    covered: Vec<u16>,
}

/// The entry's rows cut into [`Piece`]s for the chunks in `gone`.
fn pieces(entry: &Found, gone: &[u16]) -> Vec<Piece> {
    let mut cuts: Vec<u32> = vec![entry.lo, entry.hi];
    for s in entry.segs.iter().filter(|s| s.kind == SegKind::Written) {
        cuts.extend(
            [s.lo, s.hi]
                .into_iter()
                .filter(|&c| entry.lo < c && c < entry.hi),
        );
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .map(|w| {
            let (from, to) = (w[0], w[1]);
            let (covered, alone) = gone.iter().partition(|&&g| entry.writes(g, from, to));
            Piece {
                from,
                to,
                alone,
                covered,
            }
        })
        .collect()
}

/// Whether the replay can work out every chunk gone since the entry's write, and
/// how. Rows the write left alone need a partial syndrome each (the partial parity,
/// and the partial Q for a second chunk); rows it covered are what parity says, as a
/// degraded read would have them, and need a parity member each (P, or Q) that is
/// there now. More gone than that: none.
fn work_out(engine: &Engine, entry: &Found) -> Option<WorkOut> {
    let map = engine.geo.stripe_map(entry.stripe);
    let parity_gone = [Some(map.p()), map.q()]
        .map(|m| m.is_some_and(|m| !holds_rows_for_replay(engine, m, entry)));
    let with_q = map.q().is_some() && entry.partial_q().is_some();
    let gone = gone_chunks(engine, entry);
    let pieces = pieces(entry, &gone);
    let syndromes = usize::from(entry.partial_parity().is_some()) + usize::from(with_q);
    let parity_left =
        1 + usize::from(map.q().is_some()) - parity_gone.iter().filter(|&&g| g).count();
    if pieces
        .iter()
        .any(|p| p.alone.len() > syndromes || p.covered.len() > parity_left)
    {
        return None;
    }
    Some(WorkOut {
        read_parity: pieces.iter().any(|p| !p.covered.is_empty()),
        gone,
        parity_gone,
        with_q,
        pieces,
    })
}

/// Works out rows lo..hi of the gone data chunks of `plan` in `data` (one row range
/// per data index, then P's and Q's rows where `plan.read_parity`), piece by piece:
/// where the write left a chunk alone, from the entry's partial syndromes and the
/// other chunks they count; where it covered it, from parity and every other chunk.
/// Returns false if the syndromes do not give an answer (not expected: the plan
/// counted them).
fn work_out_rows(
    map: &xraid_layout::StripeMap,
    entry: &Found,
    plan: &WorkOut,
    data: &mut [u8],
) -> bool {
    let (lo, rows) = (entry.lo, entry.row_bytes());
    let data_disks = usize::from(map.data_disks());
    let slot = |i: u16| map.syndrome_slot(i);
    for &Piece {
        from,
        to,
        ref alone,
        ref covered,
    } in &plan.pieces
    {
        let start = sectors_to_bytes(u64::from(from - lo));
        let r = start..start + sectors_to_bytes(u64::from(to - from));
        let at = |i: usize| i * rows + r.start..i * rows + r.end;
        if !alone.is_empty() {
            // The stripe of the chunks the syndromes count, the others zero.
            let counted = |i: u16| !entry.logs(i) && !entry.writes(i, from, to);
            let mut blocks = vec![vec![0u8; r.len()]; data_disks + 1 + usize::from(plan.with_q)];
            for i in (0..map.data_disks()).filter(|&i| counted(i) && !alone.contains(&i)) {
                blocks[slot(i)].copy_from_slice(&data[at(usize::from(i))]);
            }
            let mut missing: Vec<usize> = alone.iter().map(|&i| slot(i)).collect();
            match entry.partial_parity() {
                Some(pp) => blocks[data_disks].copy_from_slice(&pp[r.clone()]),
                None => missing.push(data_disks),
            }
            if plan.with_q {
                let pq = entry.partial_q().expect("the plan saw it");
                blocks[data_disks + 1].copy_from_slice(&pq[r.clone()]);
            }
            if !recover_into(&mut blocks, data_disks, plan.with_q, &missing) {
                return false;
            }
            for &i in alone {
                data[at(usize::from(i))].copy_from_slice(&blocks[slot(i)]);
            }
        }
        if !covered.is_empty() {
            // The stripe as it is now, P and Q as the cut left them.
            let has_q = map.q().is_some();
            let mut blocks = vec![vec![0u8; r.len()]; data_disks + 1 + usize::from(has_q)];
            for i in 0..map.data_disks() {
                blocks[slot(i)].copy_from_slice(&data[at(usize::from(i))]);
            }
            let mut missing: Vec<usize> = covered.iter().map(|&i| slot(i)).collect();
            for (k, gone) in plan
                .parity_gone
                .iter()
                .enumerate()
                .take(1 + usize::from(has_q))
            {
                if *gone {
                    missing.push(data_disks + k);
                } else {
                    blocks[data_disks + k].copy_from_slice(&data[at(data_disks + k)]);
                }
            }
            if !recover_into(&mut blocks, data_disks, has_q, &missing) {
                return false;
            }
            for &i in covered {
                data[at(usize::from(i))].copy_from_slice(&blocks[slot(i)]);
            }
        }
    }
    true
}

/// Rebuilds `missing` blocks of a stripe (data slots, then P, then Q with `has_q`).
fn recover_into(blocks: &mut [Vec<u8>], data_count: usize, has_q: bool, missing: &[usize]) -> bool {
    let mut refs: Vec<&mut [u8]> = blocks.iter_mut().map(Vec::as_mut_slice).collect();
    xraid_parity::recover(&mut refs, data_count, has_q, missing).is_ok()
}

/// Reads rows lo..hi of every active data member not in the entry into a scratch of
/// one row range per data index. Returns whether reads are in flight.
fn read_segments(engine: &mut Engine, entry: Found) -> bool {
    let map = engine.geo.stripe_map(entry.stripe);
    let rows = sectors_to_bytes(u64::from(entry.hi - entry.lo));
    // One row range per data index, then P's and Q's rows where they are needed.
    let scratch = engine
        .bufs
        .alloc(rows * (usize::from(map.data_disks()) + 2));
    let plan = work_out(engine, &entry).map(Box::new);
    let mut reads = Vec::new();
    for i in 0..map.data_disks() {
        let m = map.data_member(i);
        if entry.logs(i) || !holds_rows_for_replay(engine, m, &entry) {
            continue;
        }
        let buf = BufSlice {
            buf: scratch,
            offset: usize::from(i) * rows,
            len: rows,
        };
        reads.push((m, engine.geo.member_sector(entry.stripe, entry.lo), buf));
    }
    if let Some(plan) = plan.as_ref().filter(|p| p.read_parity) {
        let parity = [Some(map.p()), map.q()];
        for (k, m) in parity.into_iter().enumerate() {
            let Some(m) = m.filter(|_| !plan.parity_gone[k]) else {
                continue;
            };
            let buf = BufSlice {
                buf: scratch,
                offset: (usize::from(map.data_disks()) + k) * rows,
                len: rows,
            };
            reads.push((m, engine.geo.member_sector(entry.stripe, entry.lo), buf));
        }
    }
    let r = replay(engine);
    r.pending = u32::try_from(reads.len()).expect("few members");
    r.current = Some((entry, scratch, plan));
    if reads.is_empty() {
        return false;
    }
    for (m, sector, buf) in reads {
        engine.emit_to(
            m,
            IoKind::Read,
            Area::Data,
            sector,
            buf,
            IoTarget::LogRecovery { member: m },
        );
    }
    true
}

/// Computes the parity of rows lo..hi from the data members as they are now and the
/// rows the entry logged for the members that could not take the write, and writes it
/// to the parity members that are present, and the logged rows to their members that
/// are. Data chunks gone since the write (not logged, and not readable now) are worked
/// out as `plan` says ([`work_out`]): where the write left them alone, exactly, from
/// the entry's partial syndromes; where it covered them their rows are unknown (the
/// write may or may not have reached them), and they are taken to be what parity
/// says, as a degraded read would have them, and the parity written agrees. Returns
/// whether writes are in flight.
fn write_parity(
    engine: &mut Engine,
    entry: &Found,
    scratch: BufId,
    plan: Option<Box<WorkOut>>,
) -> bool {
    let map = engine.geo.stripe_map(entry.stripe);
    let (lo, rows) = (entry.lo, entry.row_bytes());
    let at = |i: u16| usize::from(i) * rows;
    let in_rows = |from: u32, to: u32| {
        let start = sectors_to_bytes(u64::from(from - lo));
        start..start + sectors_to_bytes(u64::from(to - from))
    };
    // Rows worked out from parity (a gone chunk the write covered) are what parity
    // says: where parity is in doubt, they are too.
    let from_parity = plan.as_ref().is_some_and(|p| p.read_parity);
    let unknown = plan
        .as_ref()
        .map(|p| unknowable(engine, entry, p))
        .unwrap_or_default();
    let worked_out = {
        let data = engine.bufs.get_mut(scratch);
        for (i, logged) in entry.logged() {
            data[at(i)..at(i) + rows].copy_from_slice(logged);
        }
        plan.filter(|p| work_out_rows(&map, entry, p, data))
            .map(|p| !p.gone.is_empty())
    };
    let Some(worked_out) = worked_out else {
        // More gone than the entry and parity answer for: the rows are unknown and
        // parity cannot be recomputed; leave it as it is.
        engine.bufs.free(scratch);
        skipped(engine, entry);
        return false;
    };
    if !from_parity {
        parity_agrees_again(engine, entry.stripe, entry.lo, entry.hi);
    }
    for &(g, a, b) in &unknown {
        crate::unknown::add(engine, entry.stripe, map.data_member(g), a, b);
    }
    // Rows an entry carries are what they were after its write: where an earlier
    // replay left them unknown, its write made them known again.
    for (i, _) in entry.logged() {
        let (from, to) = entry.written(i);
        for (a, b) in entry.last_for_within(from, to) {
            crate::unknown::known_again(engine, entry.stripe, map.data_member(i), a, b);
        }
    }
    engine.stats.log_partial_parity_replays += u64::from(worked_out);
    replay(engine).worked_out += u64::from(worked_out);
    let data_disks = map.data_disks();
    let has_q = map.q().is_some();
    let parities = 1 + usize::from(has_q);
    // Logged rows of members present now go back to them as well: the write may not
    // have reached them (a member that took it in place while being rebuilt), and the
    // parity written here says they hold these rows.
    let present_logged: Vec<(u16, MemberIdx)> = entry
        .logged()
        .map(|(i, _)| (i, map.data_member(i)))
        .filter(|&(_, m)| engine.is_present(m))
        .collect();
    let out = engine.bufs.alloc(rows * (parities + present_logged.len()));
    for (n, &(i, _)) in present_logged.iter().enumerate() {
        let to = (parities + n) * rows;
        let (o, d) = engine.bufs.pair_mut(
            BufSlice {
                buf: out,
                offset: to,
                len: rows,
            },
            BufSlice {
                buf: scratch,
                offset: at(i),
                len: rows,
            },
        );
        o.copy_from_slice(d);
    }
    {
        let (o, d) = engine.bufs.pair_mut(
            BufSlice {
                buf: out,
                offset: 0,
                len: rows * parities,
            },
            BufSlice {
                buf: scratch,
                offset: 0,
                len: rows * usize::from(data_disks),
            },
        );
        let mut order: Vec<&[u8]> = vec![&[]; usize::from(data_disks)];
        for i in 0..data_disks {
            order[map.syndrome_slot(i)] = &d[at(i)..at(i) + rows];
        }
        let (p, q) = o.split_at_mut(rows);
        if has_q {
            xraid_parity::pq_gen(&order, p, q);
        } else {
            xraid_parity::xor_gen(&order, p);
        }
    }
    engine.bufs.free(scratch);
    // Parity goes to members being rebuilt too: the part they already hold must agree,
    // and what they do not hold yet the rebuild overwrites. Only over the rows where
    // no later entry follows (see `mark_last_for`).
    let mut targets = Vec::new();
    if engine.is_present(map.p()) {
        targets.push((map.p(), 0));
    }
    if let Some(q) = map.q().filter(|q| engine.is_present(*q)) {
        targets.push((q, 1));
    }
    for (n, &(_, m)) in present_logged.iter().enumerate() {
        targets.push((m, parities + n));
    }
    let writes: Vec<(MemberIdx, usize, u32, u32)> = entry
        .last_for
        .iter()
        .flat_map(|&(from, to)| targets.iter().map(move |&(m, k)| (m, k, from, to)))
        .collect();
    let writing_rows = writes
        .iter()
        .map(|&(m, k, from, to)| {
            let range = in_rows(from, to);
            let buf = BufSlice {
                buf: out,
                offset: k * rows + range.start,
                len: range.len(),
            };
            (m, engine.geo.member_sector(entry.stripe, from), buf)
        })
        .collect();
    let r = replay(engine);
    r.writing = Some(out);
    r.writing_stripe = entry.stripe;
    r.writing_rows = writing_rows;
    r.pending = u32::try_from(writes.len()).expect("a stripe's members at most, twice");
    if writes.is_empty() {
        return false;
    }
    for (m, k, from, to) in writes {
        let range = in_rows(from, to);
        let buf = BufSlice {
            buf: out,
            offset: k * rows + range.start,
            len: range.len(),
        };
        let sector = engine.geo.member_sector(entry.stripe, from);
        engine.emit_to(
            m,
            IoKind::Write,
            Area::Data,
            sector,
            buf,
            IoTarget::LogRecovery { member: m },
        );
    }
    true
}

/// One more write of the replay in flight: its copy to a replacement.
pub(crate) fn replay_write_added(engine: &mut Engine) {
    replay(engine).pending += 1;
}

/// The replay is done and flushed: new entries follow the newest found, and the
/// requests held meanwhile go in.
fn finish_recovery(engine: &mut Engine) {
    let log = engine.log.as_mut().expect("logging is on");
    let Some(Recovery::Replaying(r)) = log.recovery.take() else {
        return;
    };
    for h in &mut log.heads {
        *h = RING_START;
    }
    for l in &mut log.live {
        l.clear();
    }
    log.recent.clear();
    let held: Vec<(Request, Nanos)> = log.held.drain(..).collect();
    // A member that left as the rings' marker went out; from now on, members missing
    // now are listed for.
    walks_at_open(engine);
    if let Some(log) = engine.log.as_mut() {
        log.open_walks.clear();
    }
    let unknown = engine.unknown_sectors();
    engine.push_event(Event::LogRecovered {
        replayed: r.replayed,
        worked_out: r.worked_out,
        unknown,
    });
    for (req, now) in held {
        engine.handle_request(req, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry of the first format (FNV-1a checksum, every record carrying rows), as
    /// a ring written before 2026-11-24 holds it.
    fn first_format_entry(seq: u64, stripe: u64, lo: u32, hi: u32, rows: &[(u16, u8)]) -> Vec<u8> {
        let head = header_sectors(rows.len());
        let row_bytes = sectors_to_bytes(u64::from(hi - lo));
        let total = head + u64::from(hi - lo) * rows.len() as u64;
        let mut b = vec![0u8; sectors_to_bytes(total)];
        let header = Header {
            magic: MAGIC_FNV,
            stripe,
            lo,
            hi,
            records: rows.len(),
            head,
            total,
            tag: 7,
        };
        header.put(&mut b);
        b[8..16].copy_from_slice(&seq.to_le_bytes());
        for (k, &(data_index, fill)) in rows.iter().enumerate() {
            let seg = LogSeg {
                data_index,
                kind: SegKind::Rows,
                lo,
                hi,
            };
            put_record(&mut b, k, &seg);
            let from = sectors_to_bytes(head) + k * row_bytes;
            b[from..from + row_bytes].fill(fill);
        }
        let sum = checksum_fnv(&b);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// A RAID-5 of `disks` simulated members of `member_sectors` (16-sector chunks), its
    /// stripe log on rings of `log_sectors` (tag 7); with `fill`, filled with random
    /// data and flushed. The array, and what it holds (zeros without `fill`).
    fn sim_raid5(
        disks: u16,
        member_sectors: u64,
        log_sectors: u64,
        seed: u64,
        fill: bool,
    ) -> (crate::sim::SimArray, Vec<u8>) {
        use xraid_layout::{Geometry, Layout, Level};
        let geo = Geometry::new(
            Level::Raid5,
            Layout::default_for(Level::Raid5),
            disks,
            16,
            member_sectors,
        )
        .expect("geometry");
        let mut array = crate::sim::SimArray::new(geo, seed);
        array.engine.set_config(crate::EngineConfig {
            log_sectors,
            log_tag: 7,
            ..crate::EngineConfig::default()
        });
        array.run();
        let mut data = vec![0u8; geo.array_sectors() as usize * 512];
        if fill {
            array.rng().fill(&mut data);
            array.write(0, &data).expect("fill");
            array.flush().expect("flush");
        }
        (array, data)
    }

    /// Turns a ring of the 4 KiB-marker layout into what a build before 2026-11-28
    /// wrote: its markers as 1-sector ones in sectors 0 and 1, its entries from
    /// sector 2.
    fn as_one_sector_marker_ring(ring: &mut [u8]) {
        let slot_bytes = sectors_to_bytes(MARKER_SECTORS);
        let mut markers = vec![0u8; 1024];
        for slot in 0..2 {
            let at = slot * slot_bytes;
            if ring.len() >= at + slot_bytes && parse(&ring[at..]).is_some() {
                let m = &mut markers[slot * 512..(slot + 1) * 512];
                m.copy_from_slice(&ring[at..at + 512]);
                m[52..56].copy_from_slice(&1u32.to_le_bytes());
                let sum = checksum(m);
                m[56..64].copy_from_slice(&sum.to_le_bytes());
            }
        }
        let (start, old_start) = (sectors_to_bytes(RING_START), sectors_to_bytes(2));
        if ring.len() <= start {
            return;
        }
        ring.copy_within(start.., old_start);
        let len = ring.len();
        ring[len - (start - old_start)..].fill(0);
        ring[..1024].copy_from_slice(&markers);
    }

    /// The marker in sector `at` of `ring`, if one is there whole: its durable seq and
    /// sectors.
    fn marker_at(ring: &[u8], at: u64) -> Option<(u64, u64)> {
        let (found, sectors) = parse(ring.get(sectors_to_bytes(at)..)?)?;
        found.marker.then_some((found.durable, sectors))
    }

    /// A ring of the 1-sector-marker layout (a build before 2026-11-28) with entries to
    /// replay: the replay finds them, and the markers of that open stay 1-sector ones
    /// in sectors 0 and 1 (slot 1 of the 4 KiB layout would cover entries a second cut
    /// must still find). Once an open finds nothing to replay, the ring turns to 4 KiB
    /// markers, slot 1 first, which leaves both old markers whole until slot 1 holds a
    /// newer one. The write hole stays closed throughout: a member missing at each cut
    /// reads back what it held.
    #[test]
    fn a_ring_of_one_sector_markers_is_replayed_then_turns_to_4k_markers() {
        let mut wrong = 0;
        for seed in 0..32u64 {
            let (mut array, data) = sim_raid5(4, 256, 256, seed, true);
            // Stripe 0: chunk 0 on member 0, chunk 1 on member 1 (missing, so only the
            // log can say what it held once parity is torn).
            let missing = MemberIdx(1);
            array.kill_member(missing);
            array.engine.fail_member(missing);
            let mut new = vec![0u8; 8 * 512];
            array.rng().fill(&mut new);
            array.write(0, &new).expect("degraded write");
            array.power_cut_with(|a| {
                for m in &mut a.members {
                    as_one_sector_marker_ring(&mut m.log);
                }
            });
            array.run();
            let chunk1 = array.read(16, 16).expect("the missing member's chunk");
            if chunk1 != data[16 * 512..32 * 512] {
                wrong += 1;
            }
            let got = array.read(0, 8).expect("the write's rows");
            assert!(got == new || got == data[..8 * 512], "seed {seed}: neither");
            // Entries were replayed: this open keeps 1-sector markers, none in 8..16.
            let ring = &array.members[0].log;
            let old = [marker_at(ring, 0), marker_at(ring, 1)];
            assert!(
                old.iter()
                    .flatten()
                    .all(|&(_, n)| n == LEGACY_MARKER_SECTORS),
                "seed {seed}: {old:?}"
            );
            assert_eq!(marker_at(ring, MARKER_SECTORS), None, "seed {seed}");
            // A clean restart: nothing to replay, the ring turns to the new layout.
            array.flush().expect("flush");
            array.power_cut();
            array.run();
            array.write(0, &data[..8 * 512]).expect("write");
            array.flush().expect("flush");
            let ring = &array.members[0].log;
            let slot1 = marker_at(ring, MARKER_SECTORS).expect("a 4 KiB marker in slot 1");
            assert_eq!(slot1.1, MARKER_SECTORS, "seed {seed}");
            let old = marker_at(ring, 0).expect("the old markers left whole");
            assert!(
                old.0 < slot1.0 && old.1 == LEGACY_MARKER_SECTORS,
                "seed {seed}"
            );
            array.write(8, &data[8 * 512..16 * 512]).expect("write");
            array.flush().expect("flush");
            let ring = &array.members[0].log;
            let slot0 = marker_at(ring, 0).expect("a 4 KiB marker in slot 0");
            assert!(
                slot0.1 == MARKER_SECTORS && slot0.0 > slot1.0,
                "seed {seed}"
            );
            // And the hole stays closed in the new layout.
            array.write(0, &new).expect("degraded write");
            array.power_cut();
            array.run();
            let chunk1 = array.read(16, 16).expect("the missing member's chunk");
            if chunk1 != data[16 * 512..32 * 512] {
                wrong += 1;
            }
        }
        assert_eq!(wrong, 0, "the missing member read wrong in {wrong} cuts");
    }

    /// A ring of the old layout with entries and no marker yet (an array an old build
    /// made, cut before its first flush). Found by a review: the scan found no marker,
    /// so the open wrote 4 KiB markers from slot 0 (sectors 0..8) — over the old
    /// entries in sectors 2..8. A cut that tore that first marker (all but its first
    /// sector land) took the entries and left no marker: the next open found nothing,
    /// and the unknown rows the first replay found (named only on that marker) read
    /// silently (9 seeds of 16). Entries below sector 16 keep the old layout now.
    /// `legacy == false` is the same story on a ring of the new layout.
    fn torn_first_marker_after_replay(legacy: bool, seed: u64) -> Result<(), String> {
        use crate::{Area, EngineError, IoKind};
        let (mut array, _) = sim_raid5(4, 256, 256, seed, false);
        let geo = *array.engine.geometry();
        // A fresh array (zeroes): chunks 0 and 1 of stripe 0 written together, never
        // flushed; chunk 0's member dies with the power.
        let old = vec![0u8; 32 * 512];
        let mut new = vec![0u8; 32 * 512];
        array.rng().fill(&mut new);
        array.write(0, &new).expect("write");
        // Writes of later stripes fill the rings past sector 8, where slot 1 lies.
        for stripe in 1..6u64 {
            let mut more = vec![0u8; 8 * 512];
            array.rng().fill(&mut more);
            array.write(stripe * 48, &more).expect("a later write");
        }
        let dying = geo.stripe_map(0).data_member(0);
        array.power_cut_with(|a| {
            a.kill_member(dying);
            a.engine.fail_member(dying);
            if legacy {
                for m in &mut a.members {
                    as_one_sector_marker_ring(&mut m.log);
                }
            }
        });
        // The replay runs until its marker goes out; a cut tears it: all its sectors
        // but the first land on every ring (a 1-sector one is lost whole).
        let mut torn = false;
        while array.step() {
            let ios: Vec<_> = array
                .in_flight()
                .filter(|io| {
                    io.area == Area::Log
                        && matches!(io.kind, IoKind::Write | IoKind::WriteFua)
                        && io.sector < RING_START
                })
                .cloned()
                .collect();
            if ios.is_empty() {
                continue;
            }
            for io in ios {
                let bytes = array.engine.buffers().slice(io.buf)[512..].to_vec();
                let at = sectors_to_bytes(io.sector) + 512;
                let ring = &mut array.members[io.member.index()].log;
                ring[at..at + bytes.len()].copy_from_slice(&bytes);
            }
            torn = true;
            break;
        }
        assert!(torn, "a marker in a marker slot");
        array.power_cut_now();
        array.run();
        match array.read(0, 16) {
            Err(EngineError::Unreadable { .. }) => Ok(()),
            Ok(got) if got == old[..16 * 512] || got == new[..16 * 512] => Ok(()),
            Ok(_) => Err(format!(
                "seed {seed}: chunk 0 reads neither old nor new, silently"
            )),
            Err(e) => Err(format!("seed {seed}: {e}")),
        }
    }

    #[test]
    fn a_torn_first_marker_on_an_old_ring_without_markers_loses_no_entry() {
        let bad: Vec<String> = (0..16)
            .filter_map(|s| torn_first_marker_after_replay(true, s).err())
            .collect();
        assert!(bad.is_empty(), "{} of 16: {bad:#?}", bad.len());
    }

    #[test]
    fn a_torn_first_marker_on_a_new_ring_without_markers_loses_no_entry() {
        let bad: Vec<String> = (0..16)
            .filter_map(|s| torn_first_marker_after_replay(false, s).err())
            .collect();
        assert!(bad.is_empty(), "{} of 16: {bad:#?}", bad.len());
    }

    /// The 26-record boundary of the markers an open of an old ring keeps writing:
    /// more unknown bands than 26 from a replay of an old-layout ring (no bad block
    /// logs), then two more cuts (the ring turns to 4 KiB markers at the second).
    #[test]
    fn more_than_26_unknown_bands_from_an_old_ring_outlive_two_cuts() {
        let mut failures = Vec::new();
        for seed in 0..4u64 {
            let (mut array, _) = sim_raid5(5, 1024, 512, seed, true);
            let geo = *array.engine.geometry();
            let per_stripe = geo.stripe_data_sectors();
            let dying = MemberIdx(4);
            for s in 0..40u64 {
                let mut new = vec![0u8; per_stripe as usize * 512];
                array.rng().fill(&mut new);
                array.write(s * per_stripe, &new).expect("write");
            }
            array.power_cut_with(|a| {
                a.kill_member(dying);
                a.engine.fail_member(dying);
                for m in &mut a.members {
                    as_one_sector_marker_ring(&mut m.log);
                }
            });
            array.run();
            let held: Vec<u64> = (0..40u64)
                .filter_map(|s| {
                    let map = geo.stripe_map(s);
                    (0..map.data_disks())
                        .find(|&i| map.data_member(i) == dying)
                        .map(|i| s * per_stripe + u64::from(i) * 16)
                })
                .collect();
            assert!(held.len() > 26);
            let ring = &array.members[0].log;
            assert!(
                [marker_at(ring, 0), marker_at(ring, 1)]
                    .iter()
                    .flatten()
                    .any(|&(_, n)| n == LEGACY_MARKER_SECTORS),
                "seed {seed}: 1-sector markers this open"
            );
            for when in ["after the cut", "after a second cut", "after a third cut"] {
                for &at in &held {
                    if array.read(at, 16).is_ok() {
                        failures.push(format!("seed {seed}: sector {at} readable {when}"));
                    }
                }
                array.flush().expect("flush");
                array.power_cut();
                array.run();
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// Found by a review: the slot was chosen once for every ring, from the newest
    /// marker across them. A marker a cut stopped short reaches some rings only; the
    /// next went to the other slot on every ring — on a ring the short one missed,
    /// the slot of its own newest, which a torn write then took away. Each ring goes
    /// by its own newest now.
    #[test]
    fn each_ring_writes_its_next_marker_beside_its_own_newest() {
        let new = MARKER_SECTORS;
        let old = LEGACY_MARKER_SECTORS;
        // Ring 0 got the first 4 KiB marker (slot 1); ring 1 still has old ones only
        // (newest in sector 1); ring 2 has none; ring 3 was not read.
        let rings = [Some((1, new)), Some((1, old)), None, None];
        assert_eq!(
            next_markers(Some(new), &rings, true, false),
            (new, vec![0, 1, 1, 1])
        );
        assert_eq!(
            next_markers(Some(new), &rings, true, true),
            (new, vec![0, 1, 1, 1])
        );
        // Old rings only: replaying keeps the old layout, each ring beside its newest.
        let rings = [Some((0, old)), Some((1, old)), None];
        assert_eq!(
            next_markers(Some(old), &rings, true, true),
            (old, vec![1, 0, 0])
        );
        // Nothing to replay: 4 KiB markers, slot 1 first everywhere.
        assert_eq!(
            next_markers(Some(old), &rings, true, false),
            (new, vec![1, 1, 1])
        );
        // No marker at all: old entries being replayed keep the old layout.
        assert_eq!(
            next_markers(None, &[None, None], true, true),
            (old, vec![0, 0])
        );
        assert_eq!(
            next_markers(None, &[None, None], false, true),
            (new, vec![1, 1])
        );
    }

    #[test]
    fn entries_of_the_first_format_are_still_read() {
        let b = first_format_entry(5, 3, 2, 6, &[(1, 0xab)]);
        let (found, sectors) = parse(&b).expect("a whole first-format entry");
        assert_eq!(sectors, b.len() as u64 / 512);
        assert_eq!(
            (found.seq, found.stripe, found.lo, found.hi, found.tag),
            (5, 3, 2, 6, 7)
        );
        let logged: Vec<(u16, Vec<u8>)> = found.logged().map(|(i, r)| (i, r.to_vec())).collect();
        assert_eq!(logged, vec![(1, vec![0xab; 4 * 512])]);
        assert_eq!(found.partial_parity(), None);
        assert_eq!(found.written(1), (0, 0));
        // A flipped byte anywhere (payload too) is caught, by either checksum.
        let mut torn = b.clone();
        torn[b.len() - 1] ^= 1;
        assert!(parse(&torn).is_none());
    }

    #[test]
    fn an_entrys_partial_parity_and_partial_q_are_read_back_apart() {
        let (lo, hi) = (0u32, 2u32);
        let records = [
            (SegKind::PartialParity, Some(0x11u8)),
            (SegKind::PartialQ, Some(0x22)),
            (SegKind::Written, None),
        ];
        let head = header_sectors(records.len());
        let rows = sectors_to_bytes(u64::from(hi - lo));
        let total = head + 2 * u64::from(hi - lo);
        let mut b = vec![0u8; sectors_to_bytes(total)];
        let header = Header {
            magic: MAGIC,
            stripe: 4,
            lo,
            hi,
            records: records.len(),
            head,
            total,
            tag: 1,
        };
        header.put(&mut b);
        for (k, &(kind, fill)) in records.iter().enumerate() {
            let data_index = if kind == SegKind::Written {
                2
            } else {
                u16::MAX
            };
            let to = if kind == SegKind::Written { 1 } else { hi };
            put_record(
                &mut b,
                k,
                &LogSeg {
                    data_index,
                    kind,
                    lo,
                    hi: to,
                },
            );
            if let Some(fill) = fill {
                let from = sectors_to_bytes(head) + k * rows;
                b[from..from + rows].fill(fill);
            }
        }
        let sum = checksum(&b);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        let (found, _) = parse(&b).expect("a whole entry");
        assert_eq!(found.partial_parity(), Some(&vec![0x11; rows][..]));
        assert_eq!(found.partial_q(), Some(&vec![0x22; rows][..]));
        assert_eq!(found.logged().count(), 0);
        assert!(found.writes(2, 0, 1) && !found.writes(2, 0, 2) && !found.writes(1, 0, 1));
    }

    #[test]
    fn a_flipped_byte_anywhere_in_an_entry_is_caught() {
        let mut b = first_format_entry(9, 1, 0, 8, &[(0, 1), (2, 2)]);
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        let sum = checksum(&b);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        assert!(parse(&b).is_some());
        for at in [0, 8, 40, 60, 72, 600, b.len() - 1] {
            let mut torn = b.clone();
            torn[at] ^= 0x10;
            assert!(parse(&torn).is_none(), "byte {at}");
        }
    }

    /// A marker names the unknown rows whatever the resync owes, in the room the
    /// skipped bands leave but one record per role at least; and a newer marker of the
    /// same durable seq says them afresh.
    #[test]
    fn a_marker_names_unknown_rows_in_the_room_skipped_bands_leave() {
        let geo = xraid_layout::Geometry::new(
            xraid_layout::Level::Raid5,
            xraid_layout::Layout::default_for(xraid_layout::Level::Raid5),
            4,
            16,
            4096,
        )
        .expect("geometry");
        let mut engine = Engine::new(geo, vec![MemberState::Active; 4]);
        engine.set_config(crate::EngineConfig {
            log_sectors: 256,
            ..crate::EngineConfig::default()
        });
        crate::unknown::add(&mut engine, 7, MemberIdx(2), 0, 8);
        crate::unknown::add(&mut engine, 200, MemberIdx(3), 4, 16);
        // Without a resync owed, skipped bands are not named; unknown rows are.
        let buf = marker(&mut engine, 9);
        let (first, _) = parse(engine.bufs.get(buf)).expect("a marker");
        engine.bufs.free(buf);
        let band = |stripe, role, lo, hi| crate::unknown::Named::Band {
            stripe,
            role,
            lo,
            hi,
        };
        assert_eq!(first.unknown, vec![band(7, 2, 0, 8), band(200, 3, 4, 16)]);
        assert!(first.skips.is_empty() && !first.resync_owed);
        // Owed, with skipped bands leaving room for one record: each role's rows
        // keep one (before a skipped band), the skipped bands past the room count as
        // unknown elsewhere.
        engine.resync_owed = true;
        engine.stats.log_entries_skipped = 1;
        for stripe in 0..marker_room(MARKER_SECTORS) as u64 - 1 {
            let log = engine.log.as_mut().expect("logging");
            add_band(log.skipped_stripes.entry(stripe).or_default(), 0, 4);
        }
        let buf = marker(&mut engine, 9);
        let (second, _) = parse(engine.bufs.get(buf)).expect("a marker");
        engine.bufs.free(buf);
        assert_eq!(second.unknown, first.unknown);
        assert_eq!(second.skips.len(), marker_room(MARKER_SECTORS) - 2);
        assert!(second.skipped_elsewhere);
        // A span round-trips.
        let span = crate::unknown::Named::Span {
            role: 3,
            first: 5,
            last: (1 << 40) + 7,
        };
        let record = encode_unknown(span).expect("fits a record");
        assert_eq!(decode_unknown(record), span);
        assert!(
            second.seq > first.seq,
            "numbered: the newer one says the rows"
        );
    }
}
