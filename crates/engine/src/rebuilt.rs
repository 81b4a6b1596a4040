//! Rows a recover has recomputed since the open, per member.
//!
//! A recover rebuilding a member computes its rows from the stripe's others, read or
//! rebuilt through parity the recover trusted (`stripe::through_parity_in_doubt`
//! refuses the rest). Where the member holds parity, whatever a power cut left there
//! before now agrees with the data: its parity is no longer in doubt
//! (`sync::parity_in_doubt`), nor torn when a member leaves
//! (`ppl::list_torn_beyond_redundancy`). The other parity of a RAID-6 stripe keeps its
//! doubts — the recover may have rebuilt *through* it, never rewriting it. A member
//! recomputed over every stripe has its stripe-log ring's loss forgotten for good
//! (`ppl::ring_rebuilt`), so the exemption outlives the open.
//!
//! What counts is rows recomputed, not rows written: a member being rebuilt that
//! already held a unit (below its checkpoint) is read and written back as it was,
//! doubts and all. A member that leaves, or comes back holding what the array cannot
//! trust, loses what was recorded for it.
//!
//! Recovers walk whole stripes in order, and every stripe of a member being rebuilt is
//! recorded (data rows too), so each member's record is a few runs of whole stripes;
//! the rare operation cut into bands of rows records its band alone.

use std::collections::HashMap;

use crate::MemberIdx;

/// What recovers have recomputed, per member.
#[derive(Debug, Default)]
pub(crate) struct Recomputed {
    /// Per member (by role), runs of stripes whose rows were all recomputed, sorted and
    /// apart (end exclusive).
    whole: Vec<Vec<(u64, u64)>>,
    /// Per stripe and member, bands of rows recomputed outside those runs.
    bands: HashMap<(u64, MemberIdx), Vec<(u32, u32)>>,
}

impl Recomputed {
    /// Records `member`'s rows lo..hi of `stripe` as recomputed; `whole` when they are
    /// every row of the stripe.
    pub(crate) fn add(
        &mut self,
        member: MemberIdx,
        stripe: u64,
        (lo, hi): (u32, u32),
        whole: bool,
    ) {
        if !whole {
            crate::ppl::add_band(self.bands.entry((stripe, member)).or_default(), lo, hi);
            return;
        }
        if self.whole.len() <= member.index() {
            self.whole.resize_with(member.index() + 1, Vec::new);
        }
        add_run(&mut self.whole[member.index()], stripe);
        self.bands.remove(&(stripe, member));
    }

    /// Whether `member`'s rows lo..hi of `stripe` were all recomputed.
    pub(crate) fn covers(&self, member: MemberIdx, stripe: u64, (lo, hi): (u32, u32)) -> bool {
        let in_run = self
            .whole
            .get(member.index())
            .is_some_and(|runs| run_of(runs, stripe).is_some());
        in_run
            || self
                .bands
                .get(&(stripe, member))
                .is_some_and(|bands| bands.iter().any(|&(a, b)| a <= lo && hi <= b))
    }

    /// Whether every row of `member` in stripes 0..`stripes` was recomputed.
    pub(crate) fn covers_every_stripe(&self, member: MemberIdx, stripes: u64) -> bool {
        self.whole
            .get(member.index())
            .is_some_and(|runs| runs.first() == Some(&(0, stripes)))
    }

    /// Edges of the bands recorded for `stripe`, among `members`.
    pub(crate) fn band_edges(
        &self,
        stripe: u64,
        members: impl Iterator<Item = MemberIdx>,
    ) -> Vec<u32> {
        if self.bands.is_empty() {
            return Vec::new();
        }
        members
            .filter_map(|m| self.bands.get(&(stripe, m)))
            .flatten()
            .flat_map(|&(a, b)| [a, b])
            .collect()
    }

    /// `member` left, or holds what the array cannot trust: nothing recorded for it
    /// counts any more.
    pub(crate) fn forget(&mut self, member: MemberIdx) {
        if let Some(runs) = self.whole.get_mut(member.index()) {
            runs.clear();
        }
        if !self.bands.is_empty() {
            self.bands.retain(|&(_, m), _| m != member);
        }
    }
}

/// The run of `runs` holding `stripe`, by index.
fn run_of(runs: &[(u64, u64)], stripe: u64) -> Option<usize> {
    let after = runs.partition_point(|&(start, _)| start <= stripe);
    after.checked_sub(1).filter(|&i| stripe < runs[i].1)
}

/// Adds `stripe` to `runs`, joining the runs it touches.
fn add_run(runs: &mut Vec<(u64, u64)>, stripe: u64) {
    if run_of(runs, stripe).is_some() {
        return;
    }
    let at = runs.partition_point(|&(start, _)| start <= stripe);
    let joins_before = at > 0 && runs[at - 1].1 == stripe;
    let joins_after = at < runs.len() && runs[at].0 == stripe + 1;
    match (joins_before, joins_after) {
        (true, true) => {
            runs[at - 1].1 = runs[at].1;
            runs.remove(at);
        }
        (true, false) => runs[at - 1].1 = stripe + 1,
        (false, true) => runs[at].0 = stripe,
        (false, false) => runs.insert(at, (stripe, stripe + 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Runs built stripe by stripe, in any order, hold exactly the stripes added,
        /// sorted and apart.
        #[test]
        fn runs_hold_exactly_the_stripes_added(stripes in proptest::collection::vec(0u64..64, 0..80)) {
            let mut runs = Vec::new();
            for &s in &stripes {
                add_run(&mut runs, s);
            }
            let added: BTreeSet<u64> = stripes.iter().copied().collect();
            for s in 0..70 {
                prop_assert_eq!(run_of(&runs, s).is_some(), added.contains(&s));
            }
            for pair in runs.windows(2) {
                prop_assert!(pair[0].1 < pair[1].0, "runs {:?} touch", runs);
            }
            prop_assert!(runs.iter().all(|&(a, b)| a < b));
        }
    }

    #[test]
    fn bands_cover_only_their_rows_and_members() {
        let mut r = Recomputed::default();
        let (p, q) = (MemberIdx(1), MemberIdx(2));
        r.add(p, 7, (0, 16), false);
        r.add(p, 7, (16, 24), false);
        assert!(r.covers(p, 7, (4, 24)));
        assert!(!r.covers(p, 7, (4, 25)));
        assert!(!r.covers(q, 7, (0, 8)));
        assert!(!r.covers(p, 8, (0, 8)));
        assert_eq!(r.band_edges(7, [p, q].into_iter()), vec![0, 24]);
        r.add(q, 8, (0, 32), true);
        assert!(r.covers(q, 8, (0, 32)));
        assert!(!r.covers(p, 8, (0, 32)));
        r.forget(p);
        assert!(!r.covers(p, 7, (0, 8)));
        assert!(r.covers(q, 8, (3, 4)));
        r.forget(q);
        assert!(!r.covers(q, 8, (3, 4)));
    }

    #[test]
    fn every_stripe_only_when_the_runs_join_from_zero() {
        let mut r = Recomputed::default();
        let m = MemberIdx(0);
        for stripe in [2, 0, 3] {
            r.add(m, stripe, (0, 32), true);
        }
        assert!(!r.covers_every_stripe(m, 4));
        r.add(m, 1, (0, 32), false);
        assert!(!r.covers_every_stripe(m, 4), "a band is not the stripe");
        r.add(m, 1, (0, 32), true);
        assert!(r.covers_every_stripe(m, 4));
        assert!(!r.covers_every_stripe(m, 5));
        assert!(!r.covers_every_stripe(MemberIdx(1), 4));
    }
}
