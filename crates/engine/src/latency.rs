//! Per-member service times, to find the slow disk ("find the slow disk" of the lab's
//! seeds): an exponentially weighted mean of each member's I/O latency, and which
//! members stand far above their peers. RAID-1/10 reads avoid such members.

use crate::{MemberIdx, Nanos};

/// Weight of a new sample: 1/16.
const SHIFT: u32 = 4;
/// Samples before a member's mean counts.
const MIN_SAMPLES: u64 = 32;
/// A member is slow when its mean stands this many times above its peers' median...
const RATIO: u64 = 4;
/// ...and above this, so that jitter among fast members flags nothing.
const FLOOR: Nanos = Nanos(1_000_000);

#[derive(Debug, Clone)]
pub(crate) struct Latency {
    /// Issue time of each I/O in flight, by its slab key.
    issued: Vec<Nanos>,
    mean: Vec<u64>,
    samples: Vec<u64>,
    slow: Vec<bool>,
}

impl Latency {
    pub(crate) fn new(members: usize) -> Latency {
        Latency {
            issued: Vec::new(),
            mean: vec![0; members],
            samples: vec![0; members],
            slow: vec![false; members],
        }
    }

    pub(crate) fn issued(&mut self, key: usize, now: Nanos) {
        if self.issued.len() <= key {
            self.issued.resize(key + 1, Nanos(0));
        }
        self.issued[key] = now;
    }

    /// When I/O `key` was issued.
    pub(crate) fn issued_at(&self, key: usize) -> Nanos {
        self.issued.get(key).copied().unwrap_or_default()
    }

    /// Records I/O `key` of `member` completing at `now`; returns the member's new
    /// slowness when it changed.
    pub(crate) fn completed(&mut self, key: usize, member: MemberIdx, now: Nanos) -> Option<bool> {
        let m = member.index();
        let sample = now
            .0
            .saturating_sub(self.issued.get(key).map_or(now.0, |t| t.0));
        self.mean[m] = if self.samples[m] == 0 {
            sample
        } else {
            self.mean[m] - (self.mean[m] >> SHIFT) + (sample >> SHIFT)
        };
        self.samples[m] += 1;
        let slow = self.judge(m);
        (slow != self.slow[m]).then(|| {
            self.slow[m] = slow;
            slow
        })
    }

    fn judge(&self, m: usize) -> bool {
        if self.samples[m] < MIN_SAMPLES || self.mean[m] < FLOOR.0 {
            return false;
        }
        let mut peers: Vec<u64> = (0..self.mean.len())
            .filter(|&p| p != m && self.samples[p] >= MIN_SAMPLES)
            .map(|p| self.mean[p])
            .collect();
        if peers.is_empty() {
            return false;
        }
        peers.sort_unstable();
        let median = peers[peers.len() / 2];
        self.mean[m] > median.saturating_mul(RATIO)
    }

    pub(crate) fn is_slow(&self, member: MemberIdx) -> bool {
        self.slow[member.index()]
    }

    /// The member's mean service time, once it has enough samples.
    pub(crate) fn mean(&self, member: MemberIdx) -> Option<Nanos> {
        let m = member.index();
        (self.samples[m] >= MIN_SAMPLES).then_some(Nanos(self.mean[m]))
    }

    /// The median of the other members' means.
    pub(crate) fn peers(&self, member: MemberIdx) -> Option<Nanos> {
        let mut peers: Vec<u64> = (0..self.mean.len())
            .filter(|&p| p != member.index() && self.samples[p] >= MIN_SAMPLES)
            .map(|p| self.mean[p])
            .collect();
        peers.sort_unstable();
        peers.get(peers.len() / 2).map(|&n| Nanos(n))
    }
}
