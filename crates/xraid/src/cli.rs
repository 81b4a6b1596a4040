//! The command line: every command and flag with its help, as clap definitions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use xraid_member::MemberFault;
use xraid_server::TlsMode;

use crate::size::parse_size;

/// xraid: user-space RAID in Linux md's on-disk format.
///
/// An ARRAY is named by its members: the member files or block devices, or a folder
/// that holds them. xraid recognises members by their md superblocks; a member left
/// out or missing makes the array degraded, as md would.
#[derive(Debug, Parser)]
#[command(name = "xraid", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// How member I/O reaches the kernel: io_uring, a thread pool, or auto (io_uring
    /// where the kernel allows it).
    #[arg(long, global = true, value_enum, default_value_t = Backend::Auto)]
    pub io_backend: Backend,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    Auto,
    Uring,
    Threads,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create an array on the given members (like `mdadm --create`).
    Create(CreateArgs),
    /// Show a member's md superblock (like `mdadm --examine`).
    Examine(ExamineArgs),
    /// Show an array: level, layout, size, health, each member's role and state. On an
    /// array `xraid serve` serves, the server's live view (rebuild progress, slow
    /// members), through its control socket.
    Status(StatusArgs),
    /// Copy the array's contents (or a part) to a file or standard output.
    Read(ReadArgs),
    /// Copy a file or standard input into the array.
    Write(WriteArgs),
    /// Serve arrays (or plain files) to NBD clients: qemu, nbdcopy, nbdfuse, fio, the
    /// Linux nbd driver. SIGINT or SIGTERM stops it cleanly: requests in flight are
    /// finished, arrays flushed and marked clean. One more, once the stop has run 5 s,
    /// ends it at once, as a crash would (for a stop held up by a member that hangs);
    /// arrays not marked clean are resynced at their next start.
    Serve(ServeArgs),
    /// Add a member to a degraded array's missing role and rebuild it (like
    /// `mdadm --add`): a blank disk or file, or a member that was left out as stale. To a
    /// whole array (or with --spare) it is added as a hot spare, which takes the place
    /// of a member that fails. On a served array, the server adds it while its clients
    /// go on, into a failed or missing role (rebuilt in the background; followed here
    /// to the end) or as a spare. The rebuild's progress is recorded every 2 s (up to
    /// a minute on slow members, each checkpoint taking at most a hundredth of the
    /// time): stopped (Ctrl-C), killed or cut off by the power, it goes on from there at
    /// the next open to write.
    Add(AddArgs),
    /// Replace a member while it goes on serving (md's want_replacement): NEW (a blank
    /// disk or file, or a hot spare of the array) is rebuilt from OLD — read directly,
    /// rebuilt from the others only where OLD fails to read — while every write goes to
    /// both; at the end NEW takes OLD's role and OLD is marked faulty (remove it with
    /// `xraid remove`). If OLD fails meanwhile, the copy goes on as an ordinary rebuild;
    /// if NEW fails, it is dropped and OLD serves on. Unlike fail + add, the array keeps
    /// its redundancy throughout. Not for RAID-0 (no redundancy to fall back on). On a
    /// served array, the server does it in the background while its clients go on.
    Replace(ReplaceArgs),
    /// Mark a member faulty (like `mdadm --fail`): it is left out from then on and a
    /// hot spare, if any, takes its role when the array is next opened to write.
    /// Refused when the array could not survive without it. On a served array, the
    /// server does it (and a spare steps in at once).
    Fail(MemberArgs),
    /// Take a left-out member (failed, stale or spare) out of the array for good: its
    /// role-table entry is freed and its md superblock erased (like `mdadm --remove`
    /// then `--zero-superblock`). An active member is refused: fail it first. On a
    /// served array, the server does it while its clients go on.
    Remove(MemberArgs),
    /// Scrub an array (md's sync_action check/repair): read everything, count where
    /// parity or mirror copies disagree with the data, and with `repair` rewrite them.
    /// Ranges that fail to read are rebuilt from redundancy and rewritten either way, as
    /// are blocks that fail their checksums in integrity mode (counted apart) and the
    /// sectors a member's bad block log lists (which leave the log then). On a served
    /// array, the server runs it.
    Scrub(ScrubArgs),
    /// Create (or reuse) a demo RAID-5 of file members, write data, verify it, and
    /// serve it over NBD.
    Demo(DemoArgs),
    /// Simulate a workload on simulated disks and SSDs, in simulated time: one drive,
    /// or an array run by the real engine. CONFIG (TOML) names the drives — disk or
    /// SSD presets from spec sheets, any parameter overridden (an SSD's channels, dies,
    /// flash latencies, over-provisioning, ...) — the array, and optionally the strings
    /// (SCSI buses shared by disks), the controllers (cache policies: search, save
    /// reads/writes, read-ahead, sorted reads/writes, the flush-on-write flaw) and the
    /// host buses they hang on (see docs/SIMULATOR.md and examples/sim/). Prints
    /// bandwidth, IOPS and latency percentiles as fio would, the utilisation of every
    /// drive, string, controller and bus (an SSD's busiest part, its garbage
    /// collection and write amplification), and which one limits throughput. With
    /// --rebuild ROLE, a member fails and a blank drive is rebuilt in its place beside
    /// the workload (or alone): how long it takes, at what rate against the member
    /// drive's own, and what it costs the workload. The same configuration, workload
    /// and seed print the same bytes.
    Sim(SimArgs),
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// RAID level, with mdadm's names: raid0/0/stripe, raid1/1/mirror, raid4/4,
    /// raid5/5, raid6/6, raid10/10.
    #[arg(long, short = 'l')]
    pub level: String,
    /// Chunk size (power of two, 4K to 16M); K/M suffixes. Ignored by raid1.
    #[arg(long, short = 'c', default_value = "512K", value_parser = parse_size)]
    pub chunk: u64,
    /// Layout, with mdadm's names: left-symmetric/ls (default), left-asymmetric/la,
    /// right-symmetric/rs, right-asymmetric/ra, parity-first, parity-last for raid5/6;
    /// n2, f2, o2 (near, far, offset copies) for raid10.
    #[arg(long, short = 'p')]
    pub layout: Option<String>,
    /// Array name stored in the superblocks.
    #[arg(long, short = 'N', default_value = "xraid")]
    pub name: String,
    /// Size of member files to create where they do not exist yet (sparse); existing
    /// members (files, block devices) smaller than it are refused, as mdadm does.
    /// K/M/G/T.
    #[arg(long, short = 'z', value_parser = parse_size)]
    pub size: Option<u64>,
    /// Use members that belong to an md array already, or that hold a partition table,
    /// a file system, a ZFS pool, an LVM, LUKS, bcache or VDO header or a swap area
    /// (blkid's signatures): create would write over them, so without --force it
    /// refuses them, naming what it found.
    #[arg(long)]
    pub force: bool,
    /// The last N members named are hot spares: each takes the place of a member that
    /// fails (or is missing when the array is next opened to write) and is rebuilt.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub spares: usize,
    /// Write-intent bitmap: `internal` (md's, on every member; the default for levels
    /// with redundancy) or `none`. After a crash only chunks marked dirty resync, and a
    /// member that returns catches up on only what changed while it was away.
    #[arg(long, value_name = "internal|none")]
    pub bitmap: Option<String>,
    /// Data per bitmap bit (power of two); K/M/G suffixes. Default: mdadm's choice,
    /// 64M (or more when the bits would not fit). Smaller chunks resync less after a
    /// crash but set bits more often.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub bitmap_chunk: Option<u64>,
    /// Seconds a bitmap chunk must stay quiet before its bit is cleared, and how often
    /// a running resync clears the bits behind it (mdadm's --delay, md's
    /// daemon_sleep; 1 to 3600). Default: 5. Shorter resyncs less after a crash; longer
    /// writes the bitmap less often.
    #[arg(long, value_name = "SECONDS")]
    pub bitmap_delay: Option<u32>,
    /// Integrity mode: keep a CRC-32C of every 4 KiB block of each member (after md's
    /// data area, 1 MiB per GiB of member; as much RAM while served), check every read
    /// against it, and repair a block that reads back wrong (a flipped bit, a lost
    /// write) from redundancy. Scrubs then know which copy is bad.
    #[arg(long)]
    pub integrity: bool,
    /// Skip the initial sync (mdadm's --assume-clean): the members' parity or copies
    /// are taken to agree already — new disks that read as zeros, or an array made
    /// again over its own members, with its old level, layout, chunk and member order,
    /// after its superblocks were lost. Where they do not agree, a scrub finds it, and
    /// a member lost before it was repaired is rebuilt wrong.
    #[arg(long)]
    pub assume_clean: bool,
    /// Over members that hold old contents, make parity (or mirror copies) agree with
    /// them here, before create returns. Without it that is left to a resync in the
    /// background, as md starts one: it runs when the array is next opened to write
    /// (`xraid serve`, which serves clients meanwhile; `xraid status` follows it), and
    /// until it has passed a stripe, writes there make its parity from all of its data.
    /// In integrity mode the old contents' checksums are learned by it (and by reads)
    /// meanwhile, unchecked until then. A parity array made with a role missing, and
    /// an integrity-mode RAID-0, sync here either way.
    #[arg(long, conflicts_with = "assume_clean")]
    pub sync_now: bool,
    /// Member files or block devices, in role order (then the spares). The word
    /// `missing` leaves a role empty, as with mdadm: the array starts degraded, and
    /// `xraid add` fills the role (a spare named too steps in when the array is next
    /// opened to write).
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExamineArgs {
    /// Show each member's write-intent bitmap instead, in `mdadm --examine-bitmap`'s
    /// words (its event counts and how many chunks are dirty).
    #[arg(long, short = 'X')]
    pub bitmap: bool,
    /// Show each member's bad block log instead (the sectors md and xraid record as
    /// holding no good data: never returned, rebuilt from redundancy when read), in
    /// `mdadm --examine-badblocks`' words.
    #[arg(long, conflicts_with = "bitmap")]
    pub badblocks: bool,
    /// Member files or block devices.
    #[arg(required = true)]
    pub members: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print a JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// The array: member paths, or a folder that holds them.
    #[arg(required = true)]
    pub array: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Only record the new member (md sees it as being recovered from sector 0); the
    /// rebuild then runs the next time the array is opened to write (`xraid serve`
    /// runs it in the background). On a served array: return at once, leaving the
    /// server's background rebuild running (`xraid status` shows how far it is).
    #[arg(long)]
    pub no_rebuild: bool,
    /// Add it as a hot spare even if a role is missing (on a served array it steps in
    /// when a member next fails, or at the next start).
    #[arg(long)]
    pub spare: bool,
    /// Size of the new member file to create if it does not exist (sparse); K/M/G/T.
    #[arg(long, short = 'z', value_parser = parse_size)]
    pub size: Option<u64>,
    /// Take a member that belongs to another md array.
    #[arg(long)]
    pub force: bool,
    /// The array: a folder that holds its members, or one member's path (the other
    /// members are found beside it: the files of its folder, or the block devices).
    pub array: PathBuf,
    /// The member to add.
    pub member: PathBuf,
}

#[derive(Debug, Args)]
pub struct ReplaceArgs {
    /// Only record NEW as OLD's replacement (md sees "Replacement device N", recovery
    /// offset 0); the copy then runs the next time the array is opened to write
    /// (`xraid serve` runs it in the background). On a served array: return at once,
    /// leaving the server's copy running (`xraid status` shows how far it is).
    #[arg(long)]
    pub no_rebuild: bool,
    /// Size of the new member file to create if it does not exist (sparse); K/M/G/T.
    #[arg(long, short = 'z', value_parser = parse_size)]
    pub size: Option<u64>,
    /// Take a NEW that belongs to another md array.
    #[arg(long)]
    pub force: bool,
    /// The array: a folder that holds its members, or one member's path (the other
    /// members are found beside it: the files of its folder, or the block devices).
    pub array: PathBuf,
    /// The active member to replace.
    pub old: PathBuf,
    /// The member that takes its place.
    pub new: PathBuf,
}

#[derive(Debug, Args)]
pub struct MemberArgs {
    /// The array: a folder that holds its members, or one member's path (the other
    /// members are found beside it: the files of its folder, or the block devices).
    pub array: PathBuf,
    /// The member.
    pub member: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScrubAction {
    /// Count mismatches; change nothing but ranges that fail to read (or, in integrity
    /// mode, blocks that fail their checksums).
    Check,
    /// Count mismatches and rewrite parity (mirrors: copy the first copy) where they
    /// disagree with the data.
    Repair,
}

#[derive(Debug, Args)]
pub struct ScrubArgs {
    /// check or repair.
    #[arg(value_enum)]
    pub action: ScrubAction,
    /// Print a JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// The array: member paths, or a folder that holds them.
    #[arg(required = true)]
    pub array: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReadArgs {
    /// Where to start, in bytes (a multiple of 512); K/M/G/T.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub offset: u64,
    /// How much to read (a multiple of 512); default: to the end of the array.
    #[arg(long, value_parser = parse_size)]
    pub length: Option<u64>,
    /// Write to this file instead of standard output. A file there that is yours and
    /// has no other name is replaced only once the whole read succeeded (a read that
    /// fails leaves it as it was); others are written in place.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Go on past ranges the array cannot read (read errors or bad blocks where no
    /// redundancy is left), writing zeros in their place to the sector, and list them
    /// at the end (the exit status still says the read was not whole). For getting
    /// what can be got off a damaged array.
    #[arg(long)]
    pub keep_going: bool,
    /// Inject faults into a member, as `xraid serve --fault` does (see there), to see
    /// what this command makes of a failing member, e.g. `--fault
    /// role=1,errors=1M..1028K`. Repeatable.
    #[arg(long, value_name = "FAULT")]
    pub fault: Vec<MemberFault>,
    /// The array: member paths, or a folder that holds them.
    #[arg(required = true)]
    pub array: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct WriteArgs {
    /// Where to start, in bytes (a multiple of 512); K/M/G/T.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub offset: u64,
    /// Read from this file instead of standard input.
    #[arg(long, short = 'i')]
    pub input: Option<PathBuf>,
    /// Inject faults into a member, as `xraid serve --fault` does (see there), to see
    /// what this command makes of a failing member, e.g. `--fault
    /// role=1,errors=1M..1028K`. Repeatable.
    #[arg(long, value_name = "FAULT")]
    pub fault: Vec<MemberFault>,
    /// The array: member paths, or a folder that holds them.
    #[arg(required = true)]
    pub array: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TCP address to listen on: ADDR:PORT, ADDR or :PORT [default: 127.0.0.1:10809].
    /// Other addresses than loopback only when given here.
    #[arg(long, conflicts_with = "socket")]
    pub listen: Option<String>,
    /// Listen on this Unix socket instead of TCP.
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Export name clients ask for (the export also answers the default name "").
    #[arg(long, short = 'N', default_value = "xraid")]
    pub name: String,
    /// Refuse writes.
    #[arg(long)]
    pub read_only: bool,
    /// Connections served at once; more are refused with a log line.
    #[arg(long, default_value_t = xraid_server::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Serve the exports a TOML file lists (see docs/SERVE.md) instead of ARRAY.
    #[arg(long, conflicts_with_all = ["array", "name", "read_only", "fault", "tls", "tls_cert", "rebuild_min", "rebuild_max", "consistency"])]
    pub config: Option<PathBuf>,
    /// TLS (NBD_OPT_STARTTLS): off, allow, or require [default: allow with
    /// --tls-cert/--tls-key, else off].
    #[arg(long)]
    pub tls: Option<TlsMode>,
    /// The server's certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The server's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Inject faults into a member, for demonstrations and tests: `role=N` with
    /// `fail-now`, `fail-after=IOS`, `errors=START..END` (member bytes, K/M/G),
    /// `write-errors=START..END` (writes there fail), `read-errors=START..END` (reads
    /// there fail), `errors-after=IOS` (the error
    /// ranges begin to fail only after that many I/Os), `latency=MSms`, `stall-after=IOS` [`stall=Ns`], `flips=START..END` (silent bit
    /// flips), `lose=START..END` (writes dropped silently), `power-cut-after=IOS`
    /// (unflushed writes undone, then gone) or `power-cut-on-signal` (SIGUSR1 cuts the
    /// power of every member with it at one instant, undoing what each had not
    /// flushed, and the server dies there: a crash test that `kill -9` cannot be, as
    /// the kernel keeps what a killed process wrote), e.g.
    /// `--fault role=1,fail-after=5000`. Repeatable.
    #[arg(long)]
    pub fault: Vec<MemberFault>,
    /// Pace of a background rebuild or resync while clients are busy, in MB/s per
    /// member (md's sync_speed_min; default 1): clients come first, but it always moves.
    #[arg(long, value_name = "MB/s")]
    pub rebuild_min: Option<u64>,
    /// Pace of a background rebuild or resync when clients are idle, in MB/s per member
    /// (md's sync_speed_max; default, and 0: no cap). Not below --rebuild-min.
    #[arg(long, value_name = "MB/s")]
    pub rebuild_max: Option<u64>,
    /// How RAID-4/5/6 parity stays right across a crash mid-write: "log" (default: a
    /// stripe log with md's partial parity closes the write hole, also for a member
    /// that dies with the power — two on a RAID-6, whose entries also carry a partial
    /// Q and go to both parity members — at one extra durable write per batch of
    /// stripe writes) or "resync" (md without PPL: resync after an unclean stop only).
    #[arg(long, value_name = "log|resync")]
    pub consistency: Option<String>,
    /// Start an array that a member's failure past its redundancy stopped (mdadm's
    /// `--assemble --force`): the members that failed with the array — recorded
    /// faulty, after every write it took, as their own superblocks tell — are taken
    /// back into their roles and recorded active. Unlike md's, the rows of a member
    /// still missing that the failure tore (under a write it cut off) read as errors
    /// until written again, never as data (with the stripe log; see
    /// docs/RELIABILITY.md). A member that may have missed writes, or a role whose
    /// device is absent but recorded serving (or that failed with the array), is
    /// refused: nothing is written then.
    #[arg(long, conflicts_with_all = ["config", "read_only"])]
    pub force: bool,
    /// The array (member paths or a folder holding them), or one plain file, which is
    /// served as it is.
    #[arg(required_unless_present = "config")]
    pub array: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Folder for the demo members (created if missing).
    #[arg(long, default_value = "xraid-demo")]
    pub dir: PathBuf,
    /// Size of each demo member file.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub member_size: u64,
    /// Where to serve the demo array afterwards [default: 127.0.0.1:10809].
    #[arg(long)]
    pub listen: Option<String>,
    /// Stop after verifying instead of serving.
    #[arg(long)]
    pub no_serve: bool,
}

/// fio's `--rw` patterns, plus `fsck`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimRw {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    Randread,
    /// Random writes.
    Randwrite,
    /// Sequential reads and writes mixed by --rwmixread.
    Rw,
    /// Random reads and writes mixed by --rwmixread.
    Randrw,
    /// Seek-heavy reads shaped like a file-system check (e2fsck's first pass): the
    /// region is cut into 128 MiB block groups, each group's inode table (its first
    /// 1/64) is read in order, and after every inode-table block one block anywhere in
    /// the region is read, as an inode's extent or indirect block would be. Every
    /// other request seeks; fsck time was long the classic seek-bound benchmark of
    /// disks and controllers.
    Fsck,
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// The configuration file (TOML).
    pub config: PathBuf,
    /// Access pattern, with fio's names; `fsck` is a seek-heavy read pattern shaped
    /// like a file-system check.
    #[arg(long, value_enum, default_value_t = SimRw::Read)]
    pub rw: SimRw,
    /// Block size of each request (a multiple of 512); K/M suffixes.
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    pub bs: u64,
    /// Requests each job keeps in flight.
    #[arg(long, default_value_t = 1)]
    pub iodepth: usize,
    /// Independent jobs, each with its own stream of requests over the same region.
    #[arg(long, default_value_t = 1)]
    pub numjobs: u32,
    /// Percent of reads in `rw` and `randrw`.
    #[arg(long, default_value_t = 50)]
    pub rwmixread: u8,
    /// Region to use, from --offset (default: to the end of the target); without
    /// --runtime, also how much each job moves before it ends (as fio's --size). K/M/G/T.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Simulated seconds to run (decimals allowed); the region is gone over again as
    /// often as it takes, as fio's --time_based.
    #[arg(long, value_name = "SECONDS")]
    pub runtime: Option<f64>,
    /// Where the region starts (a multiple of --bs); K/M/G/T.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub offset: u64,
    /// Seed of the random choices: the same seed replays the same run exactly.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fail member ROLE (0, 1, ...) of the array and rebuild a blank drive of the same
    /// model in its place, from redundancy, while the workload runs (no workload
    /// without --size or --runtime). The run goes on until the rebuild has ended, and
    /// reports its time and rate against one member's drive reading and writing its
    /// data area alone.
    #[arg(long, value_name = "ROLE")]
    pub rebuild: Option<u16>,
    /// Rebuild pace per member while the workload has requests in flight, in MB/s
    /// (serve's --rebuild-min; default 1, 0 for no cap).
    #[arg(long, value_name = "MB/s", requires = "rebuild")]
    pub rebuild_min: Option<u64>,
    /// Rebuild pace per member while the workload has none in flight, in MB/s
    /// (serve's --rebuild-max; default: no cap).
    #[arg(long, value_name = "MB/s", requires = "rebuild")]
    pub rebuild_max: Option<u64>,
    /// Print a JSON document instead of text (fields in docs/SIMULATOR.md).
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn create_takes_mdadm_style_flags() {
        let cli = Cli::try_parse_from([
            "xraid", "create", "-l", "5", "-c", "64K", "--size", "16M", "a", "b", "c",
        ])
        .expect("parses");
        let Command::Create(args) = cli.command else {
            panic!("create expected")
        };
        assert_eq!(args.chunk, 65536);
        assert_eq!(args.size, Some(16 << 20));
        assert_eq!(args.members.len(), 3);
    }
}
