//! A member that fails on purpose: every I/O after the first N, I/Os touching chosen
//! byte ranges, or every I/O slowed by a fixed latency. Tests and demonstrations
//! (`xraid serve --fault`) put it around a real member to show the array surviving.

use std::io;
use std::ops::Range;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{DirectFd, Member};

/// What a [`FaultyMember`] does wrong.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// I/Os that succeed before every later one fails (`Some(0)`: fail at once).
    pub fail_after: Option<u64>,
    /// Member byte ranges whose reads and writes fail.
    pub error_ranges: Vec<Range<u64>>,
    /// Added to every I/O.
    pub latency: Option<Duration>,
}

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
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let bad = |what: &str| format!("fault '{spec}': {key}={value} is not {what}");
            match key {
                "role" => role = Some(value.parse::<u16>().map_err(|_| bad("a member role"))?),
                "fail-now" => plan.fail_after = Some(0),
                "fail-after" => {
                    plan.fail_after = Some(value.parse().map_err(|_| bad("a count of I/Os"))?)
                }
                "errors" => {
                    let (a, b) = value.split_once("..").ok_or_else(|| bad("a range START..END"))?;
                    let start = parse_bytes(a).ok_or_else(|| bad("a byte range"))?;
                    let end = parse_bytes(b).ok_or_else(|| bad("a byte range"))?;
                    if start >= end {
                        return Err(bad("a non-empty range"));
                    }
                    plan.error_ranges.push(start..end);
                }
                "latency" => {
                    let ms = value
                        .strip_suffix("ms")
                        .and_then(|v| v.parse::<u64>().ok())
                        .ok_or_else(|| bad("a latency like 20ms"))?;
                    plan.latency = Some(Duration::from_millis(ms));
                }
                _ => {
                    return Err(format!(
                        "fault '{spec}': unknown '{key}' (use role=N with fail-now, fail-after=N, errors=START..END, latency=Nms)"
                    ))
                }
            }
        }
        let role = role.ok_or_else(|| format!("fault '{spec}': say which member with role=N"))?;
        Ok(MemberFault { role, plan })
    }
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

/// A member wrapped in a [`FaultPlan`]. Its I/O always runs inline (no kernel
/// descriptor is handed out), so every I/O passes through the plan.
#[derive(Debug)]
pub struct FaultyMember {
    inner: Box<dyn Member>,
    plan: FaultPlan,
    ios: AtomicU64,
}

impl FaultyMember {
    pub fn new(inner: Box<dyn Member>, plan: FaultPlan) -> FaultyMember {
        FaultyMember {
            inner,
            plan,
            ios: AtomicU64::new(0),
        }
    }

    fn check(&self, range: Option<Range<u64>>) -> io::Result<()> {
        if let Some(latency) = self.plan.latency {
            std::thread::sleep(latency);
        }
        let n = self.ios.fetch_add(1, Ordering::Relaxed);
        if self.plan.fail_after.is_some_and(|after| n >= after) {
            // A dead device answers as a vanished one does, so it is failed at once.
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        if let Some(r) = range {
            if self
                .plan
                .error_ranges
                .iter()
                .any(|e| e.start < r.end && r.start < e.end)
            {
                return Err(io::Error::other("injected I/O error in a bad range"));
            }
        }
        Ok(())
    }
}

impl Member for FaultyMember {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(Some(offset..offset + buf.len() as u64))?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check(Some(offset..offset + buf.len() as u64))?;
        self.inner.write_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.check(None)?;
        self.inner.flush()
    }

    fn direct_fd(&self) -> Option<DirectFd> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            latency: None,
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
}
