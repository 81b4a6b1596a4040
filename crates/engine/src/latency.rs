//! Per-member service times, to find the slow disk ("find the slow disk" of the lab's
//! seeds): an exponentially weighted mean of each member's I/O latency, and which
//! members stand far above their peers. RAID-1/10 reads avoid such members.
//!
//! Reads are judged against reads and writes against writes: a member being rebuilt
//! takes only writes while its peers take only reads, and a write (into a sparse file,
//! say) may well take longer than a read from the same kind of disk without the disk
//! being any slower.

use crate::{IoKind, MemberIdx, Nanos};

/// Weight of a new sample: 1/16.
const SHIFT: u32 = 4;
/// Samples before a member's mean counts.
const MIN_SAMPLES: u64 = 32;
/// A member becomes slow when its mean stands this many times above its peers'
/// median...
const RATIO: u64 = 4;
/// ...and stays slow until it falls to this many times (or below the floor): a member
/// whose mean hovers near the bound, on a disk that others share, say, does not flip
/// back and forth with every burst.
const CLEAR_RATIO: u64 = 2;
/// ...and above this, so that jitter among fast members flags nothing.
const FLOOR: Nanos = Nanos(1_000_000);

/// Which mean an I/O's service time goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    Read = 0,
    Write = 1,
}

/// Each member's mean service time of one sort of I/O (or of all).
#[derive(Debug, Clone)]
struct Means {
    mean: Vec<u64>,
    samples: Vec<u64>,
}

impl Means {
    fn new(members: usize) -> Means {
        Means {
            mean: vec![0; members],
            samples: vec![0; members],
        }
    }

    fn add(&mut self, m: usize, sample: u64) {
        self.mean[m] = if self.samples[m] == 0 {
            sample
        } else {
            self.mean[m] - (self.mean[m] >> SHIFT) + (sample >> SHIFT)
        };
        self.samples[m] += 1;
    }

    fn counts(&self, m: usize) -> bool {
        self.samples[m] >= MIN_SAMPLES
    }

    /// Whether member `m` stands more than `ratio` times above its peers here (not
    /// counting those `gone`).
    fn slow(&self, m: usize, ratio: u64, gone: &[bool]) -> bool {
        if !self.counts(m) || self.mean[m] < FLOOR.0 {
            return false;
        }
        // Slow when the peers' median (the upper one, `sorted[len / 2]`) times `ratio`
        // is below this member's mean, i.e. when more than half the peers have a mean
        // of at most (mean - 1) / ratio. Counting instead of sorting keeps this, which
        // runs on every completion, free of allocation.
        let most = (self.mean[m] - 1) / ratio;
        let (mut peers, mut below) = (0usize, 0usize);
        for (p, &gone) in gone.iter().enumerate().take(self.mean.len()) {
            if p != m && self.counts(p) && !gone {
                peers += 1;
                below += usize::from(self.mean[p] <= most);
            }
        }
        peers > 0 && below > peers / 2
    }

    fn mean(&self, m: usize) -> Option<Nanos> {
        self.counts(m).then_some(Nanos(self.mean[m]))
    }

    /// The median of the other members' means (not counting those `gone`).
    fn peers(&self, m: usize, gone: &[bool]) -> Option<Nanos> {
        let mut peers: Vec<u64> = (0..self.mean.len())
            .filter(|&p| p != m && self.counts(p) && !gone[p])
            .map(|p| self.mean[p])
            .collect();
        peers.sort_unstable();
        peers.get(peers.len() / 2).map(|&n| Nanos(n))
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Latency {
    /// Issue time of each I/O in flight, by its slab key.
    issued: Vec<Nanos>,
    /// Which mean each I/O in flight counts toward: reads and writes do; flushes do
    /// not (they last as long as the data the device still holds, which says nothing
    /// of the device's speed, and only some members get them — the stripe log's go to
    /// parity members).
    measured: Vec<Option<Sort>>,
    /// Reads' and writes' means, which judge slowness.
    by_sort: [Means; 2],
    /// Every measured I/O's, which status shows.
    all: Means,
    slow: Vec<bool>,
    /// Members that left the array (failed): their figures stay for status to show,
    /// but judge no peer (a survivor is not slow against a member that stalled, nor
    /// against one no longer there to share the load).
    gone: Vec<bool>,
}

impl Latency {
    pub(crate) fn new(members: usize) -> Latency {
        Latency {
            issued: Vec::new(),
            measured: Vec::new(),
            by_sort: [Means::new(members), Means::new(members)],
            all: Means::new(members),
            slow: vec![false; members],
            gone: vec![false; members],
        }
    }

    /// `member` left the array: see [`Latency::gone`]. Its slowness stays as it was.
    pub(crate) fn left(&mut self, member: MemberIdx) {
        if let Some(gone) = self.gone.get_mut(member.index()) {
            *gone = true;
        }
    }

    /// I/O `key` of `kind` was issued at `now`.
    pub(crate) fn issued(&mut self, key: usize, now: Nanos, kind: IoKind) {
        if self.issued.len() <= key {
            self.issued.resize(key + 1, Nanos(0));
            self.measured.resize(key + 1, None);
        }
        self.issued[key] = now;
        self.measured[key] = match kind {
            IoKind::Read => Some(Sort::Read),
            IoKind::Write => Some(Sort::Write),
            // A durable write takes a flush's time too, and only parity members take
            // them (the stripe log's): measured with the others, they would make a
            // RAID-4's parity member look slow.
            IoKind::WriteFua | IoKind::Flush => None,
        };
    }

    /// When I/O `key` was issued.
    pub(crate) fn issued_at(&self, key: usize) -> Nanos {
        self.issued.get(key).copied().unwrap_or_default()
    }

    /// Records I/O `key` of `member` completing at `now`; returns the member's new
    /// slowness when it changed.
    pub(crate) fn completed(&mut self, key: usize, member: MemberIdx, now: Nanos) -> Option<bool> {
        let sort = self.measured.get(key).copied().flatten()?;
        let m = member.index();
        let sample = now
            .0
            .saturating_sub(self.issued.get(key).map_or(now.0, |t| t.0));
        self.by_sort[sort as usize].add(m, sample);
        self.all.add(m, sample);
        let ratio = if self.slow[m] { CLEAR_RATIO } else { RATIO };
        if self.gone[m] {
            // A late answer of a member that left: it judges nothing any more.
            return None;
        }
        let slow = self
            .by_sort
            .iter()
            .any(|means| means.slow(m, ratio, &self.gone));
        (slow != self.slow[m]).then(|| {
            self.slow[m] = slow;
            slow
        })
    }

    /// Starts `member`'s figures afresh: a new device took its role, or its rebuild
    /// ended (a rebuild's large writes, with its peers only reading, say nothing of
    /// how the member serves clients). Returns whether it was slow.
    pub(crate) fn forget(&mut self, member: MemberIdx) -> bool {
        let m = member.index();
        for means in self
            .by_sort
            .iter_mut()
            .chain(std::iter::once(&mut self.all))
        {
            means.mean[m] = 0;
            means.samples[m] = 0;
        }
        self.gone[m] = false;
        std::mem::take(&mut self.slow[m])
    }

    pub(crate) fn is_slow(&self, member: MemberIdx) -> bool {
        self.slow[member.index()]
    }

    /// The member's mean service time, once it has enough samples.
    pub(crate) fn mean(&self, member: MemberIdx) -> Option<Nanos> {
        self.all.mean(member.index())
    }

    /// What makes the member slow (or not): its mean and the median of its peers'
    /// means, of reads or writes — the sort that stands out, else all its I/O.
    pub(crate) fn against_peers(&self, member: MemberIdx) -> (Option<Nanos>, Option<Nanos>) {
        let m = member.index();
        let ratio = if self.slow[m] { CLEAR_RATIO } else { RATIO };
        let means = self
            .by_sort
            .iter()
            .find(|means| means.slow(m, ratio, &self.gone))
            .unwrap_or(&self.all);
        (means.mean(m), means.peers(m, &self.gone))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const fn ms(n: u64) -> Nanos {
        Nanos(n * 1_000_000)
    }

    /// Runs `rounds` rounds in which each listed member does one I/O of `kind` that
    /// takes the given time.
    fn run(l: &mut Latency, rounds: u64, ios: &[(usize, IoKind, Nanos)]) {
        for i in 0..rounds {
            let t = ms(100 * i);
            for (key, &(m, kind, took)) in ios.iter().enumerate() {
                l.issued(key, t, kind);
                l.completed(key, MemberIdx(m as u16), Nanos(t.0 + took.0));
            }
        }
    }

    #[test]
    fn a_member_that_left_judges_no_survivor() {
        // A mirror: member 1 answered in 0.07 ms, then failed; member 0, alone now,
        // answers in 1.2 ms. It is not slow against figures of a member gone (an
        // audit saw the survivor flagged so), and the gone member keeps its own.
        let mut l = Latency::new(2);
        run(&mut l, 2 * MIN_SAMPLES, &[(1, IoKind::Read, Nanos(70_000))]);
        l.left(MemberIdx(1));
        run(
            &mut l,
            2 * MIN_SAMPLES,
            &[(0, IoKind::Read, Nanos(1_200_000))],
        );
        assert!(!l.is_slow(MemberIdx(0)));
        assert_eq!(l.mean(MemberIdx(1)), Some(Nanos(70_000)));
        // A new device in its place is a peer again once it has figures.
        l.forget(MemberIdx(1));
        run(&mut l, 2 * MIN_SAMPLES, &[(1, IoKind::Read, Nanos(70_000))]);
        run(
            &mut l,
            2 * MIN_SAMPLES,
            &[(0, IoKind::Read, Nanos(1_200_000))],
        );
        assert!(l.is_slow(MemberIdx(0)));
    }

    #[test]
    fn flushes_do_not_count_toward_a_members_mean() {
        let mut l = Latency::new(2);
        // Member 0: fast reads and slow flushes; member 1: the same reads, no flush.
        let fast = Nanos(100_000);
        let ios = [
            (0, IoKind::Read, fast),
            (0, IoKind::Flush, ms(50)),
            (1, IoKind::Read, fast),
        ];
        run(&mut l, 2 * MIN_SAMPLES, &ios);
        assert_eq!(l.mean(MemberIdx(0)), Some(fast));
        assert!(!l.is_slow(MemberIdx(0)));
    }

    #[test]
    fn a_member_that_only_writes_is_not_judged_against_members_that_only_read() {
        // A rebuild: three members read in 0.2 ms, the new one writes in 5 ms.
        let mut l = Latency::new(4);
        let mut ios = vec![(3, IoKind::Write, ms(5))];
        ios.extend((0..3).map(|m| (m, IoKind::Read, Nanos(200_000))));
        run(&mut l, 2 * MIN_SAMPLES, &ios);
        assert!(!l.is_slow(MemberIdx(3)));
        assert_eq!(
            l.mean(MemberIdx(3)),
            Some(ms(5)),
            "status still shows its mean"
        );
    }

    #[test]
    fn reads_or_writes_far_slower_than_the_peers_own_make_a_member_slow() {
        for kind in [IoKind::Read, IoKind::Write] {
            let mut l = Latency::new(4);
            // Every member reads and writes in 0.2 ms, but member 1 takes 5 ms for one
            // sort; the event explains it with that sort's means.
            let mut ios: Vec<(usize, IoKind, Nanos)> = Vec::new();
            for m in 0..4 {
                for k in [IoKind::Read, IoKind::Write] {
                    let took = if m == 1 && k == kind {
                        ms(5)
                    } else {
                        Nanos(200_000)
                    };
                    ios.push((m, k, took));
                }
            }
            run(&mut l, 2 * MIN_SAMPLES, &ios);
            assert!(l.is_slow(MemberIdx(1)), "{kind:?}");
            assert!(!l.is_slow(MemberIdx(0)), "{kind:?}");
            assert_eq!(
                l.against_peers(MemberIdx(1)),
                (Some(ms(5)), Some(Nanos(200_000)))
            );
        }
    }

    #[test]
    fn a_forgotten_member_starts_afresh() {
        let mut l = Latency::new(3);
        run(
            &mut l,
            64,
            &[
                (0, IoKind::Write, ms(1)),
                (1, IoKind::Write, ms(1)),
                (2, IoKind::Write, ms(20)),
            ],
        );
        assert!(l.is_slow(MemberIdx(2)));
        assert!(l.forget(MemberIdx(2)), "it was slow");
        assert!(!l.is_slow(MemberIdx(2)));
        assert_eq!(
            l.mean(MemberIdx(2)),
            None,
            "no figures until it has enough samples"
        );
        assert!(!l.forget(MemberIdx(2)));
        assert_eq!(l.mean(MemberIdx(0)), Some(ms(1)), "its peers keep theirs");
    }

    #[test]
    fn a_slow_member_stays_slow_until_it_is_well_back_among_its_peers() {
        let mut l = Latency::new(4);
        let peers = |took: Nanos| -> Vec<(usize, IoKind, Nanos)> {
            let mut ios = vec![(0, IoKind::Read, took)];
            ios.extend((1..4).map(|m| (m, IoKind::Read, ms(1))));
            ios
        };
        run(&mut l, 2 * MIN_SAMPLES, &peers(ms(5)));
        assert!(l.is_slow(MemberIdx(0)), "5x its peers");
        // 3x its peers: below the bound that made it slow, still above the one that
        // clears it.
        run(&mut l, 4 * MIN_SAMPLES, &peers(ms(3)));
        assert!(l.is_slow(MemberIdx(0)), "3x its peers: no flip back");
        run(&mut l, 4 * MIN_SAMPLES, &peers(Nanos(1_500_000)));
        assert!(!l.is_slow(MemberIdx(0)), "1.5x its peers: back among them");
        // And from there, 3x does not make it slow again.
        run(&mut l, 4 * MIN_SAMPLES, &peers(ms(3)));
        assert!(!l.is_slow(MemberIdx(0)), "3x its peers: not slow yet");
    }

    proptest! {
        /// The count in `Means::slow` is the median rule: slow when the mean stands
        /// above RATIO times the sorted peers' upper median.
        #[test]
        fn slow_is_the_median_rule(
            means in proptest::collection::vec(0u64..8_000_000, 1..12),
            few in proptest::collection::vec(any::<bool>(), 12),
            gone in proptest::collection::vec(any::<bool>(), 12),
        ) {
            let n = means.len();
            let l = Means {
                mean: means.clone(),
                samples: (0..n).map(|p| if few[p] { 3 } else { MIN_SAMPLES }).collect(),
            };
            for m in 0..n {
                let mut peers: Vec<u64> = (0..n)
                    .filter(|&p| p != m && l.samples[p] >= MIN_SAMPLES && !gone[p])
                    .map(|p| means[p])
                    .collect();
                peers.sort_unstable();
                let expect = l.samples[m] >= MIN_SAMPLES
                    && means[m] >= FLOOR.0
                    && !peers.is_empty()
                    && means[m] > peers[peers.len() / 2].saturating_mul(RATIO);
                prop_assert_eq!(l.slow(m, RATIO, &gone[..n]), expect);
            }
        }
    }
}
