//! A member that fails on purpose: every I/O after the first N, I/Os touching chosen
//! byte ranges, every I/O slowed by a fixed latency, a stall (I/Os hang for a long
//! time after the first N), silent corruption (writes that land with a bit flipped,
//! writes acknowledged but never stored), and a power cut (after N I/Os the writes
//! not yet flushed are undone and the device is gone). Tests and demonstrations
//! (`xraid serve --fault`) put it around a real member to show the array surviving.

use std::cell::Cell;
use std::io;
use std::ops::Range;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{DirectFd, Member};

/// What a [`FaultyMember`] does wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// I/Os that succeed before every later one fails (`Some(0)`: fail at once).
    pub fail_after: Option<u64>,
    /// Member byte ranges whose reads and writes fail.
    pub error_ranges: Vec<Range<u64>>,
    /// Member byte ranges whose writes fail (reads work): a region that stopped
    /// taking writes, such as a metadata area on a dying disk.
    pub write_error_ranges: Vec<Range<u64>>,
    /// Member byte ranges whose reads fail (writes work): a disk's pending sectors,
    /// unreadable until rewritten, here for as long as the plan holds.
    pub read_error_ranges: Vec<Range<u64>>,
    /// I/Os that succeed before the error ranges (both kinds) begin to fail.
    pub errors_after: Option<u64>,
    /// Added to every I/O.
    pub latency: Option<Duration>,
    /// After this many I/Os, every I/O first hangs for `stall_for` (a device that
    /// stops answering, then answers late).
    pub stall_after: Option<u64>,
    pub stall_for: Duration,
    /// Member byte ranges where every write lands with one bit flipped, silently.
    pub flip_ranges: Vec<Range<u64>>,
    /// Member byte ranges where writes are acknowledged but not stored.
    pub lost_ranges: Vec<Range<u64>>,
    /// At this I/O the power fails: writes since the last flush are undone, and the
    /// device is gone from then on.
    pub power_cut_after: Option<u64>,
    /// On the machine's power rail ([`crate::cut_machine_power`]): one cut undoes the
    /// unflushed writes of every member on it at the same instant.
    pub on_machine_power: bool,
    /// Tests only (no `--fault` word): the device's kernel descriptors are handed
    /// out (`direct_fd`), so that the array's read bypass reads it as it reads a real
    /// device. Only a plan whose every I/O is held (`stall_after: Some(0)`) keeps the
    /// driver's own I/O to it in the plan; the driver sends the rest to the kernel.
    pub direct_fd_for_bypass: bool,
}

/// How long a stalled I/O hangs unless told: longer than the engine's stall timeout.
const DEFAULT_STALL: Duration = Duration::from_secs(60);

/// A fault for one member of an array: `role=N` and what goes wrong, e.g.
/// `role=1,fail-after=1000`, `role=0,errors=1M..2M`, `role=2,latency=20ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberFault {
    pub role: u16,
    pub plan: FaultPlan,
}

impl FromStr for MemberFault {
    type Err = String;

    fn from_str(spec: &str) -> Result<MemberFault, String> {
        let mut role = None;
        let mut plan = FaultPlan::default();
        let mut stall = None;
        // Keys that take one value: given twice, one would be dropped unsaid. Ranges
        // add up.
        let mut single: Vec<&str> = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let bad = |what: &str| format!("fault '{spec}': {key}={value} is not {what}");
            let ranges = ["errors", "write-errors", "read-errors", "flips", "lose"];
            if !ranges.contains(&key) {
                if single.contains(&key) {
                    return Err(format!(
                        "fault '{spec}': {key} is given twice (one value each; only ranges add up)"
                    ));
                }
                single.push(key);
            }
            match key {
                "role" => role = Some(value.parse::<u16>().map_err(|_| bad("a member role"))?),
                "fail-now" => plan.fail_after = Some(0),
                "fail-after" => {
                    plan.fail_after = Some(value.parse().map_err(|_| bad("a count of I/Os"))?)
                }
                "errors" => plan.error_ranges.push(parse_range(value).map_err(bad)?),
                "write-errors" => plan
                    .write_error_ranges
                    .push(parse_range(value).map_err(bad)?),
                "read-errors" => plan
                    .read_error_ranges
                    .push(parse_range(value).map_err(bad)?),
                "errors-after" => {
                    plan.errors_after = Some(value.parse().map_err(|_| bad("a count of I/Os"))?)
                }
                "latency" => {
                    // A zero latency would be a fault that injects nothing.
                    let ms = value
                        .strip_suffix("ms")
                        .and_then(|v| v.parse::<u64>().ok())
                        .filter(|&ms| ms > 0)
                        .ok_or_else(|| bad("a latency above zero, like 20ms"))?;
                    plan.latency = Some(Duration::from_millis(ms));
                }
                "stall-after" => {
                    plan.stall_after = Some(value.parse().map_err(|_| bad("a count of I/Os"))?)
                }
                "stall" => {
                    // Zero is refused, not taken as the default: it says no stall.
                    let time = parse_duration(value)
                        .filter(|t| !t.is_zero())
                        .ok_or_else(|| bad("a time above zero, like 40s or 500ms"))?;
                    stall = Some(time);
                }
                "flips" => plan.flip_ranges.push(parse_range(value).map_err(bad)?),
                "lose" => plan.lost_ranges.push(parse_range(value).map_err(bad)?),
                "power-cut-after" => {
                    plan.power_cut_after =
                        Some(value.parse().map_err(|_| bad("a count of I/Os"))?)
                }
                "power-cut-on-signal" => plan.on_machine_power = true,
                _ => {
                    return Err(format!(
                        "fault '{spec}': unknown '{key}' (use role=N with fail-now, fail-after=N, errors=START..END, write-errors=START..END, read-errors=START..END, errors-after=N, latency=Nms, stall-after=N, stall=Ns, flips=START..END, lose=START..END, power-cut-after=N, power-cut-on-signal)"
                    ))
                }
            }
        }
        let role = role.ok_or_else(|| format!("fault '{spec}': say which member with role=N"))?;
        // Parts that do nothing alone are refused rather than dropped, so that a spec
        // never injects less than it reads as injecting.
        if stall.is_some() && plan.stall_after.is_none() {
            return Err(format!(
                "fault '{spec}': stall= needs stall-after=IOS (how many I/Os answer before the stall)"
            ));
        }
        plan.stall_for = stall.unwrap_or(DEFAULT_STALL);
        let ranges =
            plan.error_ranges.len() + plan.write_error_ranges.len() + plan.read_error_ranges.len();
        if plan.errors_after.is_some() && ranges == 0 {
            return Err(format!(
                "fault '{spec}': errors-after= needs errors=, write-errors= or read-errors= (the ranges that fail after that many I/Os)"
            ));
        }
        if plan.injects_nothing() {
            return Err(format!(
                "fault '{spec}': injects nothing (add fail-now, fail-after=N, errors=START..END, write-errors=START..END, read-errors=START..END, latency=Nms, stall-after=N, flips=START..END, lose=START..END, power-cut-after=N or power-cut-on-signal)"
            ));
        }
        Ok(MemberFault { role, plan })
    }
}

impl MemberFault {
    /// Refuses a fault with a byte range that starts at or past the end of the member it
    /// wraps (`name`, `size` bytes): no I/O reaches it, so it would silently inject
    /// nothing. The member's size is known only once it is open; the line says so.
    pub fn check_fits(&self, name: &str, size: u64) -> Result<(), String> {
        let plan = &self.plan;
        let kinds: [(&str, &[Range<u64>]); 5] = [
            ("errors", &plan.error_ranges),
            ("write-errors", &plan.write_error_ranges),
            ("read-errors", &plan.read_error_ranges),
            ("flips", &plan.flip_ranges),
            ("lose", &plan.lost_ranges),
        ];
        for (key, ranges) in kinds {
            if let Some(r) = ranges.iter().find(|r| r.start >= size) {
                return Err(format!(
                    "fault on role {}: {key}={}..{} starts past the end of {name} ({} bytes; ranges are byte offsets on the member)",
                    self.role,
                    show_bytes(r.start),
                    show_bytes(r.end),
                    size
                ));
            }
        }
        Ok(())
    }
}

impl FaultPlan {
    /// Whether the plan changes nothing about the member's I/O.
    pub fn injects_nothing(&self) -> bool {
        let FaultPlan {
            fail_after,
            error_ranges,
            write_error_ranges,
            read_error_ranges,
            errors_after: _,
            latency,
            stall_after,
            stall_for: _,
            flip_ranges,
            lost_ranges,
            power_cut_after,
            on_machine_power,
            direct_fd_for_bypass: _,
        } = self;
        fail_after.is_none()
            && error_ranges.is_empty()
            && write_error_ranges.is_empty()
            && read_error_ranges.is_empty()
            && latency.is_none_or(|l| l.is_zero())
            && stall_after.is_none()
            && flip_ranges.is_empty()
            && lost_ranges.is_empty()
            && power_cut_after.is_none()
            && !on_machine_power
    }
}

/// Bytes in the largest K/M/G unit that holds them whole, as `--fault` takes them.
fn show_bytes(bytes: u64) -> String {
    for (suffix, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// The plan in `--fault`'s words (`fail-after=5000,latency=20ms`), for log lines.
impl std::fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        let ranges = |key: &str, ranges: &[Range<u64>]| {
            ranges
                .iter()
                .map(|r| format!("{key}={}..{}", r.start, r.end))
                .collect::<Vec<_>>()
        };
        match self.fail_after {
            Some(0) => parts.push("fail-now".to_owned()),
            Some(n) => parts.push(format!("fail-after={n}")),
            None => {}
        }
        parts.extend(ranges("errors", &self.error_ranges));
        parts.extend(ranges("write-errors", &self.write_error_ranges));
        parts.extend(ranges("read-errors", &self.read_error_ranges));
        if let Some(n) = self.errors_after {
            parts.push(format!("errors-after={n}"));
        }
        if let Some(l) = self.latency {
            parts.push(format!("latency={}ms", l.as_millis()));
        }
        if let Some(n) = self.stall_after {
            parts.push(format!(
                "stall-after={n},stall={}ms",
                self.stall_for.as_millis()
            ));
        }
        parts.extend(ranges("flips", &self.flip_ranges));
        parts.extend(ranges("lose", &self.lost_ranges));
        if let Some(n) = self.power_cut_after {
            parts.push(format!("power-cut-after={n}"));
        }
        if self.on_machine_power {
            parts.push("power-cut-on-signal".to_owned());
        }
        if parts.is_empty() {
            parts.push("nothing".to_owned());
        }
        f.write_str(&parts.join(","))
    }
}

/// How to write a byte range, for the errors that refuse one.
const RANGE_FORM: &str = "a byte range START..END (bytes with K/M/G suffixes, like 2M..2112K)";

/// `START..END` in bytes (K/M/G suffixes), not empty; the error names what was wanted.
fn parse_range(value: &str) -> Result<Range<u64>, &'static str> {
    let (a, b) = value.split_once("..").ok_or(RANGE_FORM)?;
    let start = parse_bytes(a).ok_or(RANGE_FORM)?;
    let end = parse_bytes(b).ok_or(RANGE_FORM)?;
    if start >= end {
        return Err("a non-empty byte range (START below END, like 2M..2112K)");
    }
    Ok(start..end)
}

/// `40s` or `500ms`.
fn parse_duration(value: &str) -> Option<Duration> {
    if let Some(ms) = value.strip_suffix("ms") {
        return ms.parse().ok().map(Duration::from_millis);
    }
    value
        .strip_suffix('s')?
        .parse()
        .ok()
        .map(Duration::from_secs)
}

/// The part of `r` inside `range`, if any.
fn overlap(r: &Range<u64>, range: &Range<u64>) -> Option<Range<u64>> {
    let start = r.start.max(range.start);
    let end = r.end.min(range.end);
    (start < end).then_some(start..end)
}

/// Bytes with an optional K/M/G suffix (powers of 1024).
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = match text.chars().last()? {
        'K' | 'k' => (&text[..text.len() - 1], 10),
        'M' | 'm' => (&text[..text.len() - 1], 20),
        'G' | 'g' => (&text[..text.len() - 1], 30),
        _ => (text, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

thread_local! {
    /// Set while this thread performs I/Os the driver already held aside for as long as
    /// their member said they would take (see [`Member::hold_for`]): their latency and
    /// stall were waited out there, and must not be slept through a second time.
    static HOLD_WAITED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, whose member I/Os were held aside for as long as their members said they
/// would take ([`Member::hold_for`]): a slow or stalled member performs them at once
/// instead of sleeping through its latency or stall again. Other I/Os (made outside
/// `f`, or on other threads) still sleep, as on the slow device itself.
pub fn with_hold_waited<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the flag back even if `f` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            HOLD_WAITED.set(self.0);
        }
    }
    let _restore = Restore(HOLD_WAITED.replace(true));
    f()
}

/// A member wrapped in a [`FaultPlan`]. Its I/O always runs inline (no kernel
/// descriptor is handed out, unless the plan says `direct_fd_for_bypass`), so every
/// I/O passes through the plan.
#[derive(Debug)]
pub struct FaultyMember {
    /// The member and what its volatile cache would lose, shared with the machine's
    /// power rail when the member is on it.
    pub(crate) cache: Arc<Cache>,
    plan: FaultPlan,
    ios: AtomicU64,
    /// Writes that landed with a flipped bit, and writes dropped.
    flipped: AtomicU64,
    lost: AtomicU64,
}

/// A member with what a power cut would take from it.
#[derive(Debug)]
pub(crate) struct Cache {
    pub(crate) inner: Box<dyn Member>,
    /// Writes since the last flush, with the bytes they replaced (kept only when a
    /// power cut is planned), newest last.
    unflushed: Mutex<Vec<(u64, Vec<u8>)>>,
    powered_off: AtomicBool,
}

impl Cache {
    /// Undoes every write since the last flush, newest first: what a drive's volatile
    /// cache loses when the power fails.
    pub(crate) fn cut_power(&self) {
        self.powered_off.store(true, Ordering::Relaxed);
        let mut journal = self.unflushed.lock().unwrap_or_else(|e| e.into_inner());
        for (offset, old) in journal.drain(..).rev() {
            // The device is gone either way; what could not be undone stays written.
            let _ = self.inner.write_at(&old, offset);
        }
    }
}

impl FaultyMember {
    pub fn new(inner: Box<dyn Member>, plan: FaultPlan) -> FaultyMember {
        let cache = Arc::new(Cache {
            inner,
            unflushed: Mutex::new(Vec::new()),
            powered_off: AtomicBool::new(false),
        });
        if plan.on_machine_power {
            crate::power::attach(&cache);
        }
        FaultyMember {
            cache,
            plan,
            ios: AtomicU64::new(0),
            flipped: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// Writes stored with a flipped bit so far.
    pub fn flipped_writes(&self) -> u64 {
        self.flipped.load(Ordering::Relaxed)
    }

    /// Writes acknowledged and dropped so far.
    pub fn lost_writes(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Whether a power cut may undo writes: the journal of unflushed writes is kept.
    fn journaled(&self) -> bool {
        self.plan.power_cut_after.is_some() || self.plan.on_machine_power
    }

    /// Whether the I/O counted `n` (from 0) is past `stall-after`, and so stalls.
    fn stalling(&self, n: u64) -> bool {
        self.plan.stall_after.is_some_and(|after| n >= after)
    }

    /// Held across each I/O of a member on the machine's power rail, so that a cut
    /// finds none half done.
    fn powered(&self) -> Option<crate::power::Powered> {
        self.plan.on_machine_power.then(crate::power::powered)
    }

    /// Applies the plan to one I/O touching `range` (none for a flush); `write` for a
    /// write.
    fn check(&self, range: Option<Range<u64>>, write: bool) -> io::Result<()> {
        let n = self.ios.fetch_add(1, Ordering::Relaxed);
        // Whoever calls without holding the I/O aside (`Member::hold_for`) sleeps, as
        // on a slow device, or hangs, as on one that stopped answering.
        if !HOLD_WAITED.get() {
            if let Some(latency) = self.plan.latency {
                std::thread::sleep(latency);
            }
            if self.stalling(n) {
                std::thread::sleep(self.plan.stall_for);
            }
        }
        if self.plan.power_cut_after.is_some_and(|at| n >= at)
            && !self.cache.powered_off.load(Ordering::Relaxed)
        {
            self.cache.cut_power();
        }
        if self.cache.powered_off.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        if self.plan.fail_after.is_some_and(|after| n >= after) {
            // A dead device answers as a vanished one does, so it is failed at once.
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        let errors_on = self.plan.errors_after.is_none_or(|after| n >= after);
        if let (Some(r), true) = (range, errors_on) {
            let hits = |e: &Range<u64>| e.start < r.end && r.start < e.end;
            if self.plan.error_ranges.iter().any(hits)
                || (write && self.plan.write_error_ranges.iter().any(hits))
                || (!write && self.plan.read_error_ranges.iter().any(hits))
            {
                return Err(io::Error::other("injected I/O error in a bad range"));
            }
        }
        Ok(())
    }
}

impl FaultyMember {
    fn write_unpowered(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let inner = &self.cache.inner;
        let range = offset..offset + buf.len() as u64;
        self.check(Some(range.clone()), true)?;
        if self.journaled() {
            let mut old = vec![0u8; buf.len()];
            inner.read_at(&mut old, offset)?;
            self.cache
                .unflushed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((offset, old));
        }
        let mut data = std::borrow::Cow::Borrowed(buf);
        for f in &self.plan.flip_ranges {
            if let Some(o) = overlap(&range, f) {
                let at = usize::try_from(o.start - offset).unwrap_or(0);
                let n = self.flipped.fetch_add(1, Ordering::Relaxed);
                data.to_mut()[at] ^= 1 << (n % 8);
            }
        }
        let lost: Vec<Range<u64>> = self
            .plan
            .lost_ranges
            .iter()
            .filter_map(|l| overlap(&range, l))
            .collect();
        if lost.is_empty() {
            return inner.write_at(&data, offset);
        }
        self.lost.fetch_add(1, Ordering::Relaxed);
        // Store only what lies outside the lost ranges.
        let mut at = offset;
        let mut cuts = lost;
        cuts.sort_by_key(|r| r.start);
        for cut in cuts.iter().chain(std::iter::once(&(range.end..range.end))) {
            if cut.start > at {
                let (a, b) = ((at - offset) as usize, (cut.start - offset) as usize);
                inner.write_at(&data[a..b], at)?;
            }
            at = at.max(cut.end);
        }
        Ok(())
    }
}

impl Member for FaultyMember {
    fn name(&self) -> &str {
        self.cache.inner.name()
    }

    fn size_bytes(&self) -> u64 {
        self.cache.inner.size_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let _power = self.powered();
        self.check(Some(offset..offset + buf.len() as u64), false)?;
        self.cache.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let _power = self.powered();
        self.write_unpowered(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        let _power = self.powered();
        self.check(None, false)?;
        self.cache.inner.flush()?;
        self.cache
            .unflushed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }

    /// Durable as it returns, and only this write: a power cut still undoes earlier
    /// writes not flushed, but leaves this one's bytes where they overlap it.
    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let _power = self.powered();
        let inner = &self.cache.inner;
        self.write_unpowered(buf, offset)?;
        inner.flush()?;
        if !self.journaled() {
            return Ok(());
        }
        // What landed (flips and lost ranges applied), as a power cut must keep it.
        let mut stored = vec![0u8; buf.len()];
        inner.read_at(&mut stored, offset)?;
        let end = offset + buf.len() as u64;
        let mut unflushed = self
            .cache
            .unflushed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(at) = unflushed
            .iter()
            .rposition(|(o, old)| *o == offset && old.len() == buf.len())
        {
            unflushed.remove(at);
        }
        for (o, old) in unflushed.iter_mut() {
            let (from, to) = ((*o).max(offset), (*o + old.len() as u64).min(end));
            if from < to {
                let (a, b) = ((from - *o) as usize, (to - *o) as usize);
                let (c, d) = ((from - offset) as usize, (to - offset) as usize);
                old[a..b].copy_from_slice(&stored[c..d]);
            }
        }
        Ok(())
    }

    fn logical_block_bytes(&self) -> u32 {
        self.cache.inner.logical_block_bytes()
    }

    fn direct_fd(&self) -> Option<DirectFd> {
        if self.plan.direct_fd_for_bypass {
            return self.cache.inner.direct_fd();
        }
        None
    }

    /// The latency, if any, and past `stall-after` the stall too: what the next I/O
    /// counted would sleep through unheld. I/Os are counted as they are performed, so
    /// with a latency as well, those held for the latency alone when the stall begins
    /// answer after their latency, not after the stall.
    fn hold_for(&self) -> Option<Duration> {
        let latency = self.plan.latency.unwrap_or_default();
        let stall = if self.stalling(self.ios.load(Ordering::Relaxed)) {
            self.plan.stall_for
        } else {
            Duration::ZERO
        };
        Some(latency.saturating_add(stall)).filter(|hold| !hold.is_zero())
    }

    // Zeroing keeps the trait's default, zeros written through `write_at`, so every
    // injected fault applies to it as to any write.
    fn data_ranges(&self, offset: u64, length: u64) -> Vec<Range<u64>> {
        self.cache.inner.data_ranges(offset, length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::SharedMember;
    use crate::MemoryMember;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let f: MemberFault = "role=1,fail-after=10,errors=1M..2M,latency=5ms"
            .parse()
            .expect("valid");
        assert_eq!(f.role, 1);
        assert_eq!(f.plan.fail_after, Some(10));
        assert_eq!(f.plan.error_ranges.len(), 1);
        assert_eq!(f.plan.error_ranges[0], 1 << 20..2 << 20);
        assert_eq!(f.plan.latency, Some(Duration::from_millis(5)));
        for bad in [
            "fail-now",
            "role=x",
            "role=1,errors=5..1",
            "role=1,boom",
            "role=1,latency=5",
        ] {
            let err = bad.parse::<MemberFault>().expect_err(bad);
            assert!(err.contains("fault"), "{err}");
        }
    }

    #[test]
    fn fails_after_n_ios_and_in_bad_ranges() {
        let plan = FaultPlan {
            fail_after: Some(3),
            error_ranges: std::iter::once(4096..8192).collect(),
            ..FaultPlan::default()
        };
        let m = FaultyMember::new(Box::new(MemoryMember::new("m", 1 << 16)), plan);
        let mut buf = [0u8; 512];
        assert!(m.direct_fd().is_none(), "faults need the inline path");
        m.write_at(&buf, 0).expect("first I/O works");
        assert!(m.read_at(&mut buf, 4096 + 512).is_err(), "bad range fails");
        m.read_at(&mut buf, 0).expect("third I/O works");
        assert!(m.read_at(&mut buf, 0).is_err(), "fourth and later fail");
        assert!(m.flush().is_err());
    }

    #[test]
    fn read_errors_fail_reads_only() {
        let f: MemberFault = "role=1,read-errors=4K..8K".parse().expect("valid");
        assert_eq!(f.plan.read_error_ranges, vec![4096..8192]);
        let m = member(f.plan);
        let mut buf = [0u8; 512];
        m.write_at(&buf, 4096).expect("writes of the range work");
        assert!(m.read_at(&mut buf, 4096 + 512).is_err(), "reads fail there");
        m.read_at(&mut buf, 8192).expect("reads elsewhere work");
    }

    #[test]
    fn write_errors_fail_writes_only_and_from_the_io_errors_after_says() {
        let f: MemberFault = "role=2,write-errors=4K..8K,errors-after=2"
            .parse()
            .expect("valid");
        assert_eq!(f.plan.write_error_ranges, vec![4096..8192]);
        assert_eq!(f.plan.errors_after, Some(2));
        let m = member(f.plan);
        let mut buf = [0u8; 512];
        m.write_at(&buf, 4096).expect("I/O 0: before errors-after");
        m.read_at(&mut buf, 4096)
            .expect("I/O 1: before errors-after");
        m.read_at(&mut buf, 4096).expect("reads of the range work");
        assert!(m.write_at(&buf, 4096 + 512).is_err(), "writes fail there");
        m.write_at(&buf, 8192).expect("writes elsewhere work");
        m.flush().expect("flushes work");
        let e = "role=1,errors-after=x"
            .parse::<MemberFault>()
            .expect_err("bad count");
        assert!(e.contains("a count of I/Os"), "{e}");
    }

    fn member(plan: FaultPlan) -> FaultyMember {
        FaultyMember::new(Box::new(MemoryMember::new("m", 1 << 16)), plan)
    }

    #[test]
    fn a_plan_prints_as_the_spec_that_makes_it() {
        let spec = "role=3,fail-after=7,errors=4096..8192,write-errors=0..512,read-errors=512..1024,errors-after=2,latency=5ms,stall-after=9,stall=2000ms,flips=0..4096,lose=8192..12288,power-cut-after=11,power-cut-on-signal";
        let f: MemberFault = spec.parse().expect("valid");
        assert_eq!(format!("role=3,{}", f.plan), spec);
        let again: MemberFault = format!("role=3,{}", f.plan).parse().expect("valid");
        assert_eq!(again, f);
        assert_eq!(FaultPlan::default().to_string(), "nothing");
    }

    #[test]
    fn new_fault_specs_parse() {
        let f: MemberFault =
            "role=0,stall-after=5,stall=2s,flips=1M..2M,lose=0..4K,power-cut-after=9"
                .parse()
                .expect("valid");
        assert_eq!(f.plan.stall_after, Some(5));
        assert_eq!(f.plan.stall_for, Duration::from_secs(2));
        assert_eq!(f.plan.flip_ranges.first(), Some(&(1 << 20..2 << 20)));
        assert_eq!(f.plan.lost_ranges.first(), Some(&(0..4096)));
        assert_eq!(f.plan.power_cut_after, Some(9));
        let f: MemberFault = "role=0,stall-after=1".parse().expect("valid");
        assert_eq!(
            f.plan.stall_for, DEFAULT_STALL,
            "a stall outlasts the timeout"
        );
        for bad in [
            "role=0,stall=5",
            "role=0,flips=9..1",
            "role=0,power-cut-after=x",
        ] {
            let err = bad.parse::<MemberFault>().expect_err(bad);
            assert!(err.contains("fault"), "{err}");
        }
    }

    #[test]
    fn flipped_writes_land_with_one_bit_changed_silently() {
        let m = member(FaultPlan {
            flip_ranges: std::iter::once(4096..8192).collect(),
            ..FaultPlan::default()
        });
        let data = [0xa5u8; 1024];
        m.write_at(&data, 3584).expect("acknowledged");
        let mut back = [0u8; 1024];
        m.read_at(&mut back, 3584).expect("read");
        let differing: Vec<usize> = (0..1024).filter(|&i| back[i] != data[i]).collect();
        assert_eq!(differing, vec![512], "the first byte inside the range");
        assert_eq!((back[512] ^ data[512]).count_ones(), 1);
        assert_eq!(m.flipped_writes(), 1);
    }

    #[test]
    fn lost_writes_are_acknowledged_and_dropped_inside_the_range_only() {
        let m = member(FaultPlan {
            lost_ranges: std::iter::once(1024..2048).collect(),
            ..FaultPlan::default()
        });
        m.write_at(&[7u8; 4096], 0).expect("acknowledged");
        let mut back = [9u8; 4096];
        m.read_at(&mut back, 0).expect("read");
        assert!(back[..1024].iter().all(|&b| b == 7));
        assert!(back[1024..2048].iter().all(|&b| b == 0), "dropped");
        assert!(back[2048..].iter().all(|&b| b == 7));
        assert_eq!(m.lost_writes(), 1);
    }

    #[test]
    fn a_power_cut_undoes_unflushed_writes_and_the_device_is_gone() {
        let inner = std::sync::Arc::new(MemoryMember::new("m", 1 << 16));
        let m = FaultyMember::new(
            Box::new(SharedMember(inner.clone())),
            FaultPlan {
                power_cut_after: Some(4),
                ..FaultPlan::default()
            },
        );
        m.write_at(&[1u8; 512], 0).expect("I/O 0");
        m.flush().expect("I/O 1: durable");
        m.write_at(&[2u8; 512], 0).expect("I/O 2");
        m.write_at(&[3u8; 512], 512).expect("I/O 3");
        assert!(m.flush().is_err(), "I/O 4: the power is gone");
        assert!(m.read_at(&mut [0u8; 512], 0).is_err());
        let mut back = [0u8; 1024];
        inner.read_at(&mut back, 0).expect("the disk after the cut");
        assert!(
            back[..512].iter().all(|&b| b == 1),
            "the flushed write stays"
        );
        assert!(
            back[512..].iter().all(|&b| b == 0),
            "the unflushed one is gone"
        );
    }

    #[test]
    fn a_durable_write_outlives_a_power_cut_that_undoes_the_write_under_it() {
        let inner = std::sync::Arc::new(MemoryMember::new("m", 1 << 16));
        let m = FaultyMember::new(
            Box::new(SharedMember(inner.clone())),
            FaultPlan {
                power_cut_after: Some(3),
                ..FaultPlan::default()
            },
        );
        m.write_at(&[2u8; 1024], 0).expect("I/O 0, not flushed");
        m.write_durable_at(&[5u8; 512], 512)
            .expect("I/O 1, durable");
        m.write_at(&[7u8; 512], 1024).expect("I/O 2, not flushed");
        assert!(m.flush().is_err(), "I/O 3: the power is gone");
        let mut back = [0u8; 1536];
        inner.read_at(&mut back, 0).expect("the disk after the cut");
        assert!(back[..512].iter().all(|&b| b == 0), "undone");
        assert!(
            back[512..1024].iter().all(|&b| b == 5),
            "the durable write stays"
        );
        assert!(back[1024..].iter().all(|&b| b == 0), "undone");
    }

    #[test]
    fn a_stall_holds_every_io_after_the_first_n() {
        let m = member(FaultPlan {
            stall_after: Some(1),
            stall_for: Duration::from_millis(50),
            ..FaultPlan::default()
        });
        let start = std::time::Instant::now();
        m.read_at(&mut [0u8; 512], 0).expect("first");
        assert!(start.elapsed() < Duration::from_millis(50));
        m.read_at(&mut [0u8; 512], 0).expect("second, late");
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn specs_that_inject_nothing_or_half_a_fault_are_refused_saying_why() {
        for (spec, needle) in [
            ("role=1", "injects nothing"),
            ("role=1,stall=5s", "stall= needs stall-after="),
            ("role=1,stall-after=3,stall=0s", "above zero"),
            ("role=1,stall-after=3,stall=0ms", "above zero"),
            ("role=1,latency=0ms", "above zero"),
            ("role=1,errors-after=3", "errors-after= needs"),
            ("role=1,latency=10ms,latency=20ms", "latency is given twice"),
            ("role=1,role=2,fail-now", "role is given twice"),
        ] {
            let err = spec.parse::<MemberFault>().expect_err(spec);
            assert!(err.contains(needle), "{spec}: {err}");
            assert!(err.starts_with(&format!("fault '{spec}'")), "{err}");
        }
        let f: MemberFault = "role=1,stall-after=3,stall=500ms".parse().expect("valid");
        assert_eq!(f.plan.stall_for, Duration::from_millis(500));
        // Ranges add up.
        let f: MemberFault = "role=1,errors=1M..2M,errors=3M..4M".parse().expect("valid");
        assert_eq!(f.plan.error_ranges.len(), 2);
    }

    #[test]
    fn a_bad_range_says_how_to_write_one() {
        for spec in [
            "role=1,errors=2M..2M+64K",
            "role=1,flips=2M",
            "role=1,lose=2M..1M",
        ] {
            let err = spec.parse::<MemberFault>().expect_err(spec);
            assert!(err.contains("like 2M..2112K"), "{spec}: {err}");
        }
        let f: MemberFault = "role=1,errors=2M..2112K"
            .parse()
            .expect("the example works");
        assert_eq!(f.plan.error_ranges, vec![2 << 20..(2 << 20) + (64 << 10)]);
    }

    #[test]
    fn a_range_that_starts_past_the_members_end_is_refused_naming_the_member() {
        let size = 16 << 20;
        let fits: MemberFault = "role=1,errors=0..64M,flips=15M..17M"
            .parse()
            .expect("valid");
        fits.check_fits("d/m1", size)
            .expect("a range reaching past the end still hits the member");
        for spec in ["role=1,flips=16M..100G", "role=1,errors=1M..2M,lose=1G..2G"] {
            let f: MemberFault = spec.parse().expect("valid");
            let err = f.check_fits("d/m1", size).expect_err(spec);
            assert!(
                err.contains("d/m1") && err.contains("past the end") && err.contains("16777216"),
                "{spec}: {err}"
            );
        }
        assert_eq!(show_bytes(2112 << 10), "2112K");
        assert_eq!(show_bytes(1 << 30), "1G");
        assert_eq!(show_bytes(1000), "1000");
    }

    #[test]
    fn a_stall_is_told_ahead_and_an_io_held_for_it_does_not_hang_again() {
        let m = member(FaultPlan {
            stall_after: Some(1),
            stall_for: Duration::from_secs(30),
            ..FaultPlan::default()
        });
        assert_eq!(m.hold_for(), None, "the first I/O answers at once");
        m.write_at(&[5u8; 512], 0).expect("first");
        assert_eq!(
            m.hold_for(),
            Some(Duration::from_secs(30)),
            "the next one would hang"
        );
        let start = std::time::Instant::now();
        let mut back = [0u8; 512];
        with_hold_waited(|| m.read_at(&mut back, 0)).expect("held, then performed");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "it did not hang again"
        );
        assert_eq!(back, [5u8; 512]);
        assert_eq!(
            MemoryMember::new("m", 512).hold_for(),
            None,
            "real devices never stall"
        );
    }

    #[test]
    fn a_latency_is_told_ahead_and_slept_only_by_callers_that_did_not_hold_the_io() {
        let slow = Duration::from_millis(50);
        let m = member(FaultPlan {
            latency: Some(slow),
            ..FaultPlan::default()
        });
        assert_eq!(m.hold_for(), Some(slow), "every I/O, the first too");
        let start = std::time::Instant::now();
        m.write_at(&[6u8; 512], 0).expect("unheld");
        assert!(
            start.elapsed() >= slow,
            "a caller outside the driver still sees the latency"
        );
        // Long enough that sleeping through it would show.
        let m = member(FaultPlan {
            latency: Some(Duration::from_secs(30)),
            stall_after: Some(0),
            stall_for: Duration::from_secs(30),
            ..FaultPlan::default()
        });
        assert_eq!(
            m.hold_for(),
            Some(Duration::from_secs(60)),
            "a stall comes on top of the latency"
        );
        let start = std::time::Instant::now();
        with_hold_waited(|| m.write_at(&[7u8; 512], 0)).expect("held, then performed");
        let mut back = [0u8; 512];
        with_hold_waited(|| m.read_at(&mut back, 0)).expect("held, then performed");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "neither slept again"
        );
        assert_eq!(back, [7u8; 512]);
    }
}
