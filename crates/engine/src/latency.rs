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
    /// Whether each I/O in flight counts toward its member's mean: reads and writes do;
    /// flushes do not (they last as long as the data the device still holds, which says
    /// nothing of the device's speed, and only some members get them — the stripe
    /// log's go to parity members).
    measured: Vec<bool>,
    mean: Vec<u64>,
    samples: Vec<u64>,
    slow: Vec<bool>,
}

impl Latency {
    pub(crate) fn new(members: usize) -> Latency {
        Latency {
            issued: Vec::new(),
            measured: Vec::new(),
            mean: vec![0; members],
            samples: vec![0; members],
            slow: vec![false; members],
        }
    }

    /// I/O `key` was issued at `now`; `measured` when its service time counts.
    pub(crate) fn issued(&mut self, key: usize, now: Nanos, measured: bool) {
        if self.issued.len() <= key {
            self.issued.resize(key + 1, Nanos(0));
            self.measured.resize(key + 1, false);
        }
        self.issued[key] = now;
        self.measured[key] = measured;
    }

    /// When I/O `key` was issued.
    pub(crate) fn issued_at(&self, key: usize) -> Nanos {
        self.issued.get(key).copied().unwrap_or_default()
    }

    /// Records I/O `key` of `member` completing at `now`; returns the member's new
    /// slowness when it changed.
    pub(crate) fn completed(&mut self, key: usize, member: MemberIdx, now: Nanos) -> Option<bool> {
        if !self.measured.get(key).copied().unwrap_or(false) {
            return None;
        }
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
        // Slow when the peers' median (the upper one, `sorted[len / 2]`) times RATIO
        // is below this member's mean, i.e. when more than half the peers have a mean
        // of at most (mean - 1) / RATIO. Counting instead of sorting keeps this, which
        // runs on every completion, free of allocation.
        let most = (self.mean[m] - 1) / RATIO;
        let (mut peers, mut below) = (0usize, 0usize);
        for p in 0..self.mean.len() {
            if p != m && self.samples[p] >= MIN_SAMPLES {
                peers += 1;
                below += usize::from(self.mean[p] <= most);
            }
        }
        peers > 0 && below > peers / 2
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn flushes_do_not_count_toward_a_members_mean() {
        let mut l = Latency::new(2);
        let ms = |n: u64| Nanos(n * 1_000_000);
        for i in 0..2 * MIN_SAMPLES {
            let t = ms(100 * i);
            // Member 0: fast reads and writes, and slow flushes.
            l.issued(0, t, true);
            l.completed(0, MemberIdx(0), Nanos(t.0 + 100_000));
            l.issued(1, t, false);
            assert_eq!(l.completed(1, MemberIdx(0), Nanos(t.0 + ms(50).0)), None);
            // Member 1: the same reads and writes, no flush.
            l.issued(2, t, true);
            l.completed(2, MemberIdx(1), Nanos(t.0 + 100_000));
        }
        assert_eq!(l.mean(MemberIdx(0)), Some(Nanos(100_000)));
        assert!(!l.is_slow(MemberIdx(0)));
    }

    proptest! {
        /// The count in `judge` is the median rule: slow when the mean stands above
        /// RATIO times the sorted peers' upper median.
        #[test]
        fn judge_is_the_median_rule(
            means in proptest::collection::vec(0u64..8_000_000, 1..12),
            few in proptest::collection::vec(any::<bool>(), 12),
        ) {
            let n = means.len();
            let l = Latency {
                issued: Vec::new(),
                measured: Vec::new(),
                mean: means.clone(),
                samples: (0..n).map(|p| if few[p] { 3 } else { MIN_SAMPLES }).collect(),
                slow: vec![false; n],
            };
            for m in 0..n {
                let mut peers: Vec<u64> = (0..n)
                    .filter(|&p| p != m && l.samples[p] >= MIN_SAMPLES)
                    .map(|p| means[p])
                    .collect();
                peers.sort_unstable();
                let expect = l.samples[m] >= MIN_SAMPLES
                    && means[m] >= FLOOR.0
                    && !peers.is_empty()
                    && means[m] > peers[peers.len() / 2].saturating_mul(RATIO);
                prop_assert_eq!(l.judge(m), expect);
            }
        }
    }
}
