//! The drive's own buffer: segments of cached blocks, and the read-ahead that keeps the
//! media streaming into the newest segment after a read until another command needs
//! the arm.
//!
//! Only block addresses are kept, never data (the simulator times I/O, it does not
//! store it). Writes leave cached ranges valid: the drive updates them in place, as
//! DESIGN.md's rule for caches asks. A segment holds at most `segment_sectors`; a
//! stream that runs past that drops its oldest blocks, as a ring buffer does.

use xraid_engine::Nanos;

use crate::mechanics::{HeadPos, Mechanics, ReadCursor};

/// The media reading on into a segment in the background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stream {
    /// First block not yet read when the stream started at `t0`.
    next: u64,
    t0: Nanos,
    /// Where the arm was at `t0` (on the track of `next - 1`).
    head: HeadPos,
    /// The stream stops here (read-ahead size, end of disk).
    limit: u64,
    /// The whole tracks it has read by the last time it was asked about, so a long
    /// stream (a sequential reader keeps pushing `limit` on) is walked once.
    cursor: ReadCursor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    start: u64,
    /// Blocks `start..end` are in the buffer (a stream adds to them as it goes).
    end: u64,
    stream: Option<Stream>,
    last_use: u64,
}

/// What the buffer can do for a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Every block is in the buffer already.
    Hit,
    /// The read-ahead stream will have every block at this time.
    Streaming(Nanos),
    /// The media must be read.
    Miss,
}

/// The segments of one drive's buffer.
#[derive(Debug, Clone)]
pub struct DriveBuffer {
    segs: Vec<Segment>,
    max_segments: usize,
    segment_sectors: u64,
    clock: u64,
}

impl DriveBuffer {
    pub fn new(segments: u32, segment_sectors: u64) -> DriveBuffer {
        DriveBuffer {
            segs: Vec::with_capacity(segments as usize),
            max_segments: segments as usize,
            segment_sectors,
            clock: 0,
        }
    }

    /// How many blocks a stream has read by `t`, and where the arm is then; the
    /// stream's cursor moves on to `t`.
    fn progress(mech: &Mechanics, s: &mut Stream, t: Nanos) -> (u64, HeadPos) {
        if t < s.cursor.passed() {
            // Asked about a time before what the cursor has passed: walk afresh.
            return mech.read_progress(s.head, s.next, s.limit - s.next, s.t0, t);
        }
        mech.read_progress_from(&mut s.cursor, s.limit - s.next, t)
    }

    /// What the buffer holds of `lba..lba + n` at `t`. A read served by the stream
    /// pushes the stream's limit on by `read_ahead` past it (a sequential reader keeps
    /// the media busy ahead of it).
    pub fn lookup(
        &mut self,
        mech: &Mechanics,
        lba: u64,
        n: u64,
        t: Nanos,
        read_ahead: u64,
    ) -> Lookup {
        self.clock += 1;
        let end = lba + n;
        for seg in &mut self.segs {
            if lba < seg.start {
                continue;
            }
            if end <= seg.end {
                seg.last_use = self.clock;
                return Lookup::Hit;
            }
            let Some(s) = seg.stream.as_mut() else {
                continue;
            };
            if end > s.limit {
                continue;
            }
            seg.last_use = self.clock;
            let (done, _) = Self::progress(mech, s, t);
            let disk_end = mech.format.sectors();
            s.limit = s.limit.max((end + read_ahead).min(disk_end));
            seg.start = seg
                .start
                .max(s.limit.saturating_sub(self.segment_sectors))
                .min(lba);
            if end <= s.next + done {
                return Lookup::Hit;
            }
            // The cursor has passed only blocks read by `t` unless `t` came before
            // what it had passed (then `progress` walked afresh, and so does this).
            let from = if t < s.cursor.passed() {
                mech.read_cursor(s.head, s.next, s.t0)
            } else {
                s.cursor
            };
            return Lookup::Streaming(mech.read_end_from(&from, end - s.next));
        }
        Lookup::Miss
    }

    /// Stops the running read-ahead at `t` (the arm is needed); returns where the arm
    /// is then, if a stream was running.
    pub fn stop_stream(&mut self, mech: &Mechanics, t: Nanos) -> Option<HeadPos> {
        for seg in &mut self.segs {
            if let Some(mut s) = seg.stream.take() {
                let (done, head) = Self::progress(mech, &mut s, t);
                seg.end = s.next + done;
                return Some(head);
            }
        }
        None
    }

    /// Where the arm would be at `t` if the running stream went on until then.
    pub fn arm_at(&mut self, mech: &Mechanics, t: Nanos) -> Option<HeadPos> {
        self.segs
            .iter_mut()
            .find_map(|seg| seg.stream.as_mut())
            .map(|s| Self::progress(mech, s, t).1)
    }

    /// Caches `start..end`, just read, and with `read_ahead` > 0 starts the media
    /// streaming on from `end` at `t0` with the arm at `head`. Any running stream must
    /// have been stopped. Takes the least recently used segment, or one the new range
    /// overlaps (so a block sits in one segment only).
    pub fn insert(
        &mut self,
        mech: &Mechanics,
        start: u64,
        end: u64,
        t0: Nanos,
        head: HeadPos,
        read_ahead: u64,
    ) {
        self.clock += 1;
        let limit = (end + read_ahead).min(mech.format.sectors());
        let stream = (limit > end).then(|| Stream {
            next: end,
            t0,
            head,
            limit,
            cursor: mech.read_cursor(head, end, t0),
        });
        let seg = Segment {
            start: start.max(end.saturating_sub(self.segment_sectors)),
            end,
            stream,
            last_use: self.clock,
        };
        let overlap = self
            .segs
            .iter()
            .position(|s| s.start < limit && start < s.end.max(s.stream.map_or(0, |x| x.limit)));
        let slot = overlap.or_else(|| {
            (self.segs.len() >= self.max_segments).then(|| {
                let mut lru = 0;
                for (i, s) in self.segs.iter().enumerate() {
                    if s.last_use < self.segs[lru].last_use {
                        lru = i;
                    }
                }
                lru
            })
        });
        match slot {
            Some(i) => self.segs[i] = seg,
            None => self.segs.push(seg),
        }
    }
}
