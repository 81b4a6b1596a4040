//! One simulated SSD, sans-I/O like [`crate::Disk`]: commands in with [`Ssd::submit`],
//! time in with [`Ssd::handle_timeout`], completions out with [`Ssd::poll_done`], the
//! next instant it needs with [`Ssd::poll_timeout`].
//!
//! Inside: the controller, which spends its command overhead on one command at a time;
//! the host interface, which carries one command's data at a time (a write's before
//! its pages start, a read's after its last page is in); the flash channels, each
//! carrying one page transfer at a time between the controller and its dies; and the
//! dies, each doing one operation at a time from its own queue, first come first
//! served. A command is split into pages; logical page `l` is on die `l % dies`
//! (see `ftl`), and die `d` on channel `d % channels`, so consecutive pages spread
//! over every channel first and then over the dies behind them.
//!
//! A page read holds its die for the read (tR) and then until its bytes have crossed
//! the channel; a page program holds its die while the page crosses the channel and
//! then for the program (tPROG). A write that does not cover a whole page reads the
//! page first. Garbage collection runs in the foreground, in the die that needs a
//! block, ahead of the program that needed it: each valid page it moves is a read and
//! a program inside the die (the flash's internal data move, no channel time), each
//! block it frees an erase (tBERS). A write completes when its pages are programmed
//! (there is no write cache); a flush completes after the command overhead, since
//! nothing acknowledged is still on its way to the flash.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use xraid_engine::Nanos;
use xraid_layout::SECTOR_BYTES;

use crate::disk::{Completion, DiskOp, DiskRequest, DiskStats};
use crate::ftl::Ftl;
use crate::ssd_params::SsdModel;

/// The flash side's counters and each part's busy time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SsdStats {
    /// Pages read from the flash: for reads, and for writes of part of a page.
    pub page_reads: u64,
    /// Pages programmed for the host's writes.
    pub page_programs: u64,
    /// Pages garbage collection moved (a read and a program each).
    pub gc_copies: u64,
    pub erases: u64,
    /// The controller's command processing.
    pub controller_busy: Nanos,
    /// The host interface's transfers (zero when the drive is on a string, whose
    /// time the string counts).
    pub link_busy: Nanos,
    /// The busiest channel's transfers.
    pub channel_busy_max: Nanos,
    /// The dies' busy time, averaged over the dies.
    pub die_busy_mean: Nanos,
}

impl SsdStats {
    /// Pages programmed per page the host wrote (garbage collection's copies
    /// included); 0 before any write.
    pub fn write_amplification(&self) -> f64 {
        if self.page_programs == 0 {
            return 0.0;
        }
        (self.page_programs + self.gc_copies) as f64 / self.page_programs as f64
    }

    /// The busiest part — "controller", "host link", "channel" (the busiest one) or
    /// "dies" (on average) — and its busy time; the first of equals in that order.
    pub fn busiest(&self) -> (&'static str, Nanos) {
        [
            ("controller", self.controller_busy),
            ("host link", self.link_busy),
            ("channel", self.channel_busy_max),
            ("dies", self.die_busy_mean),
        ]
        .into_iter()
        .fold(("controller", Nanos(0)), |best, p| {
            if p.1 > best.1 {
                p
            } else {
                best
            }
        })
    }
}

/// What a page operation does to its die.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Program,
    /// Garbage collection moving a page inside the die: a read and a program.
    Copy,
    Erase,
}

#[derive(Debug, Clone, Copy)]
struct PageOp {
    kind: Kind,
    /// Bytes that cross the channel (reads and programs).
    bytes: u64,
    /// The command it is part of (none: garbage collection, or a read for a merge).
    cmd: Option<u32>,
}

/// Where a die's current operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Reading its page into the register.
    Sensing,
    /// Waiting for its channel, then crossing it.
    Channel,
    Programming,
    /// A copy or an erase: no channel.
    Internal,
}

#[derive(Debug, Clone, Default)]
struct Die {
    queue: VecDeque<PageOp>,
    current: Option<(PageOp, Stage)>,
    started: Nanos,
    busy: Nanos,
}

#[derive(Debug, Clone, Default)]
struct Channel {
    /// The die whose page is crossing.
    carrying: Option<u32>,
    waiting: VecDeque<u32>,
    busy: Nanos,
}

#[derive(Debug, Clone, Copy)]
struct Cmd {
    tag: u64,
    op: DiskOp,
    lba: u64,
    sectors: u64,
    /// Pages not yet done.
    left: u32,
    /// When a write's data is in the drive (with an external link).
    data_at: Nanos,
}

/// Something the drive does at a time of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The controller is done with the command.
    Decoded(u32),
    /// A write's data is in the drive.
    DataIn(u32),
    /// A die's stage ends.
    Die(u32),
    /// A channel's transfer ends.
    Channel(u32),
    /// The command's reply goes out.
    Reply(u32),
}

/// A simulated SSD.
#[derive(Debug, Clone)]
pub struct Ssd {
    model: SsdModel,
    ftl: Ftl,
    controller_free: Nanos,
    link_free: Nanos,
    dies: Vec<Die>,
    channels: Vec<Channel>,
    /// Commands in the drive, by slot; free slots for reuse.
    cmds: Vec<Option<Cmd>>,
    free_slots: Vec<u32>,
    /// Events by time, then by the order they were decided.
    events: BinaryHeap<Reverse<(Nanos, u64, Ev)>>,
    seq: u64,
    done: VecDeque<Completion>,
    stats: DiskStats,
    flash: SsdStats,
    /// The drive's data crosses a string the driver models: no interface time here.
    external_link: bool,
}

impl Ssd {
    pub fn new(model: SsdModel) -> Ssd {
        let ftl = Ftl::new(&model);
        Ssd {
            dies: vec![Die::default(); model.dies as usize],
            channels: vec![Channel::default(); model.params.channels as usize],
            ftl,
            model,
            controller_free: Nanos(0),
            link_free: Nanos(0),
            cmds: Vec::new(),
            free_slots: Vec::new(),
            events: BinaryHeap::new(),
            seq: 0,
            done: VecDeque::new(),
            stats: DiskStats::default(),
            flash: SsdStats::default(),
            external_link: false,
        }
    }

    pub fn model(&self) -> &SsdModel {
        &self.model
    }

    /// The drive's counters; `busy` is its busiest part's, and `ssd` the flash side.
    pub fn stats(&self) -> DiskStats {
        let n = self.dies.len() as u64;
        let flash = SsdStats {
            channel_busy_max: self
                .channels
                .iter()
                .map(|c| c.busy)
                .max()
                .unwrap_or_default(),
            die_busy_mean: Nanos(self.dies.iter().map(|d| d.busy.0).sum::<u64>() / n),
            ..self.flash
        };
        DiskStats {
            busy: flash.busiest().1,
            ssd: Some(flash),
            ..self.stats
        }
    }

    /// Whether nothing is in the drive.
    pub fn is_idle(&self) -> bool {
        self.events.is_empty() && self.done.is_empty()
    }

    /// Hands the host interface to the caller (a string the driver times): a read
    /// completes when its pages are in, a write's data arrives when
    /// [`Ssd::submit_with_data`] says.
    pub fn set_external_link(&mut self, on: bool) {
        self.external_link = on;
    }

    /// Takes a command at `now`; the caller keeps at most the queue depth outstanding.
    pub fn submit(&mut self, req: DiskRequest, now: Nanos) {
        self.submit_with_data(req, now, now);
    }

    /// [`Ssd::submit`], a write's data reaching the drive at `data_at` (used with an
    /// external link only).
    pub fn submit_with_data(&mut self, req: DiskRequest, now: Nanos, data_at: Nanos) {
        assert!(
            req.op == DiskOp::Flush
                || (req.sectors > 0 && req.lba + req.sectors <= self.model.sectors()),
            "command beyond the drive"
        );
        match req.op {
            DiskOp::Read => {
                self.stats.reads += 1;
                self.stats.sectors_read += req.sectors;
            }
            DiskOp::Write => {
                self.stats.writes += 1;
                self.stats.sectors_written += req.sectors;
            }
            DiskOp::Flush => self.stats.flushes += 1,
        }
        let overhead = self.model.params.command_overhead;
        let start = now.max(self.controller_free);
        self.controller_free = Nanos(start.0 + overhead.0);
        self.flash.controller_busy = Nanos(self.flash.controller_busy.0 + overhead.0);
        let cmd = Cmd {
            tag: req.tag,
            op: req.op,
            lba: req.lba,
            sectors: req.sectors,
            left: 0,
            data_at,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.cmds[s as usize] = Some(cmd);
                s
            }
            None => {
                self.cmds.push(Some(cmd));
                (self.cmds.len() - 1) as u32
            }
        };
        let ev = if req.op == DiskOp::Flush {
            Ev::Reply(slot)
        } else {
            Ev::Decoded(slot)
        };
        self.schedule(self.controller_free, ev);
        self.handle_timeout(now);
    }

    /// The next instant the drive has something to do.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.events.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Lets the drive act up to `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        while let Some(&Reverse((at, _, ev))) = self.events.peek() {
            if at > now {
                break;
            }
            self.events.pop();
            match ev {
                Ev::Decoded(slot) => self.decoded(slot, at),
                Ev::DataIn(slot) => self.start_pages(slot, at),
                Ev::Die(d) => self.die_stage_done(d, at),
                Ev::Channel(c) => self.channel_done(c, at),
                Ev::Reply(slot) => self.complete(slot, at),
            }
        }
    }

    pub fn poll_done(&mut self) -> Option<Completion> {
        self.done.pop_front()
    }

    fn schedule(&mut self, at: Nanos, ev: Ev) {
        self.events.push(Reverse((at, self.seq, ev)));
        self.seq += 1;
    }

    fn cmd(&self, slot: u32) -> Cmd {
        let Some(c) = self.cmds[slot as usize] else {
            unreachable!("an event for a command no longer in the drive");
        };
        c
    }

    /// Occupies the host interface for `bytes` from `at`; returns when they are over.
    fn link(&mut self, at: Nanos, bytes: u64) -> Nanos {
        let dur = self.model.interface_time(bytes);
        let start = at.max(self.link_free);
        self.link_free = Nanos(start.0 + dur.0);
        self.flash.link_busy = Nanos(self.flash.link_busy.0 + dur.0);
        self.link_free
    }

    fn decoded(&mut self, slot: u32, at: Nanos) {
        let c = self.cmd(slot);
        if c.op == DiskOp::Read {
            self.start_pages(slot, at);
        } else if self.external_link {
            self.schedule(at.max(c.data_at), Ev::DataIn(slot));
        } else {
            let end = self.link(at, c.sectors * SECTOR_BYTES);
            self.schedule(end, Ev::DataIn(slot));
        }
    }

    /// Splits the command into page operations on the dies that hold its pages.
    fn start_pages(&mut self, slot: u32, at: Nanos) {
        let c = self.cmd(slot);
        let ps = self.model.page_sectors;
        let page_bytes = ps * SECTOR_BYTES;
        let (first, last) = (c.lba / ps, (c.lba + c.sectors - 1) / ps);
        for lpn in first..=last {
            let covered = (c.lba + c.sectors).min((lpn + 1) * ps) - c.lba.max(lpn * ps);
            let d = self.ftl.die_of(lpn);
            let op = |kind, bytes, cmd| PageOp { kind, bytes, cmd };
            if c.op == DiskOp::Read {
                self.flash.page_reads += 1;
                self.push(d, op(Kind::Read, covered * SECTOR_BYTES, Some(slot)));
            } else {
                if covered < ps {
                    // Part of a page: the rest of it comes from the flash.
                    self.flash.page_reads += 1;
                    self.push(d, op(Kind::Read, page_bytes, None));
                }
                let gc = self.ftl.write(lpn);
                self.flash.gc_copies += u64::from(gc.copies);
                self.flash.erases += u64::from(gc.erases);
                for _ in 0..gc.copies {
                    self.push(d, op(Kind::Copy, 0, None));
                }
                for _ in 0..gc.erases {
                    self.push(d, op(Kind::Erase, 0, None));
                }
                self.flash.page_programs += 1;
                self.push(d, op(Kind::Program, page_bytes, Some(slot)));
            }
            if let Some(cmd) = self.cmds[slot as usize].as_mut() {
                cmd.left += 1;
            }
            self.die_start(d as u32, at);
        }
    }

    fn push(&mut self, d: usize, op: PageOp) {
        self.dies[d].queue.push_back(op);
    }

    /// Starts the die's next operation if it is free.
    fn die_start(&mut self, d: u32, at: Nanos) {
        let die = &mut self.dies[d as usize];
        if die.current.is_some() {
            return;
        }
        let Some(op) = die.queue.pop_front() else {
            return;
        };
        die.started = at;
        let p = &self.model.params;
        let (stage, until) = match op.kind {
            Kind::Read => (Stage::Sensing, Some(p.page_read)),
            Kind::Program => (Stage::Channel, None),
            Kind::Copy => (
                Stage::Internal,
                Some(Nanos(p.page_read.0 + p.page_program.0)),
            ),
            Kind::Erase => (Stage::Internal, Some(p.block_erase)),
        };
        die.current = Some((op, stage));
        match until {
            Some(dur) => self.schedule(Nanos(at.0 + dur.0), Ev::Die(d)),
            None => self.want_channel(d, at),
        }
    }

    fn die_stage_done(&mut self, d: u32, at: Nanos) {
        let Some((op, stage)) = self.dies[d as usize].current else {
            unreachable!("a die event for an idle die");
        };
        match stage {
            Stage::Sensing => {
                self.dies[d as usize].current = Some((op, Stage::Channel));
                self.want_channel(d, at);
            }
            Stage::Programming | Stage::Internal => self.die_done(d, at),
            Stage::Channel => unreachable!("a channel stage ends with its channel"),
        }
    }

    fn want_channel(&mut self, d: u32, at: Nanos) {
        let c = (d % self.model.params.channels) as usize;
        if self.channels[c].carrying.is_none() {
            self.carry(c, d, at);
        } else {
            self.channels[c].waiting.push_back(d);
        }
    }

    fn carry(&mut self, c: usize, d: u32, at: Nanos) {
        let Some((op, _)) = self.dies[d as usize].current else {
            unreachable!("a die waits for its channel with an operation");
        };
        let dur = self.model.channel_time(op.bytes);
        let ch = &mut self.channels[c];
        ch.carrying = Some(d);
        ch.busy = Nanos(ch.busy.0 + dur.0);
        self.schedule(Nanos(at.0 + dur.0), Ev::Channel(c as u32));
    }

    fn channel_done(&mut self, c: u32, at: Nanos) {
        let Some(d) = self.channels[c as usize].carrying.take() else {
            unreachable!("a channel event with nothing crossing");
        };
        // The next waiting die's page goes first: the die just served may want the
        // channel again at once, and takes its turn behind those already waiting.
        if let Some(next) = self.channels[c as usize].waiting.pop_front() {
            self.carry(c as usize, next, at);
        }
        let Some((op, _)) = self.dies[d as usize].current else {
            unreachable!("a transfer for an idle die");
        };
        if op.kind == Kind::Program {
            self.dies[d as usize].current = Some((op, Stage::Programming));
            let dur = self.model.params.page_program;
            self.schedule(Nanos(at.0 + dur.0), Ev::Die(d));
        } else {
            self.die_done(d, at);
        }
    }

    /// The die's current operation is over: count it against its command, start the
    /// die's next one.
    fn die_done(&mut self, d: u32, at: Nanos) {
        let die = &mut self.dies[d as usize];
        die.busy = Nanos(die.busy.0 + (at.0 - die.started.0));
        let Some((op, _)) = die.current.take() else {
            unreachable!("a die finished nothing");
        };
        if let Some(slot) = op.cmd {
            let Some(cmd) = self.cmds[slot as usize].as_mut() else {
                unreachable!("a page of a command no longer in the drive");
            };
            cmd.left -= 1;
            if cmd.left == 0 {
                self.cmd_done(slot, at);
            }
        }
        self.die_start(d, at);
    }

    fn cmd_done(&mut self, slot: u32, at: Nanos) {
        let c = self.cmd(slot);
        if c.op == DiskOp::Read && !self.external_link {
            let end = self.link(at, c.sectors * SECTOR_BYTES);
            self.schedule(end, Ev::Reply(slot));
        } else {
            self.complete(slot, at);
        }
    }

    fn complete(&mut self, slot: u32, at: Nanos) {
        let c = self.cmd(slot);
        self.cmds[slot as usize] = None;
        self.free_slots.push(slot);
        self.done.push_back(Completion { tag: c.tag, at });
    }
}
