//! One stripe of a RAID-4/5/6 array: which member holds P, Q and each data chunk, and
//! each data chunk's slot in the Q syndrome — as md's `raid5_compute_sector`,
//! `raid6_d0` and `raid6_idx_to_slot` define them.

use crate::{Level, MemberIdx, ParityAlgorithm};

/// How data indexes map to members in one stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DataRule {
    /// Data index `i` sits on member `(start + i) % raid_disks` (the symmetric layouts).
    Rotate { start: u16 },
    /// Data index `i` sits on member `i`, or `i + by` from index `from` on (the
    /// asymmetric layouts, parity-first and parity-last, RAID-4).
    Skip { from: u16, by: u16 },
}

/// Where everything in one stripe lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeMap {
    raid_disks: u16,
    p: u16,
    q: Option<u16>,
    rule: DataRule,
}

/// What a member holds in a stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StripeRole {
    /// Data chunk with this data index.
    Data(u16),
    P,
    Q,
}

impl StripeMap {
    /// The map of stripe `stripe` (counted in chunk rows from the start of the members).
    pub(crate) fn new(
        level: Level,
        algorithm: ParityAlgorithm,
        raid_disks: u16,
        stripe: u64,
    ) -> StripeMap {
        use ParityAlgorithm::*;
        let n = raid_disks;
        let rotation = u16::try_from(stripe % u64::from(n)).expect("below raid_disks");
        let (p, q, rule) = match level {
            Level::Raid6 => {
                let data = n - 2;
                let (p, q, rule) = match algorithm {
                    LeftAsymmetric | RightAsymmetric => {
                        let p = if algorithm == LeftAsymmetric {
                            n - 1 - rotation
                        } else {
                            rotation
                        };
                        if p == n - 1 {
                            // Q D D D P: Q wraps to the first member.
                            (p, 0, DataRule::Skip { from: 0, by: 1 })
                        } else {
                            (p, p + 1, DataRule::Skip { from: p, by: 2 })
                        }
                    }
                    LeftSymmetric | RightSymmetric => {
                        let p = if algorithm == LeftSymmetric {
                            n - 1 - rotation
                        } else {
                            rotation
                        };
                        let start = (p + 2) % n;
                        (p, (p + 1) % n, DataRule::Rotate { start })
                    }
                    ParityFirst => (0, 1, DataRule::Skip { from: 0, by: 2 }),
                    ParityLast => (data, data + 1, DataRule::Skip { from: n, by: 0 }),
                };
                (p, Some(q), rule)
            }
            Level::Raid5 => {
                let data = n - 1;
                match algorithm {
                    LeftAsymmetric => (
                        data - rotation,
                        None,
                        DataRule::Skip {
                            from: data - rotation,
                            by: 1,
                        },
                    ),
                    RightAsymmetric => (
                        rotation,
                        None,
                        DataRule::Skip {
                            from: rotation,
                            by: 1,
                        },
                    ),
                    LeftSymmetric => {
                        let p = data - rotation;
                        (p, None, DataRule::Rotate { start: (p + 1) % n })
                    }
                    RightSymmetric => (
                        rotation,
                        None,
                        DataRule::Rotate {
                            start: (rotation + 1) % n,
                        },
                    ),
                    ParityFirst => (0, None, DataRule::Skip { from: 0, by: 1 }),
                    ParityLast => (data, None, DataRule::Skip { from: n, by: 0 }),
                }
            }
            // RAID-4: parity on the last member whatever the layout number says.
            _ => (n - 1, None, DataRule::Skip { from: n, by: 0 }),
        };
        StripeMap {
            raid_disks: n,
            p,
            q,
            rule,
        }
    }

    /// Data chunks per stripe.
    pub fn data_disks(&self) -> u16 {
        self.raid_disks - 1 - u16::from(self.q.is_some())
    }

    /// The member holding data chunk `data_index` of the stripe.
    pub fn data_member(&self, data_index: u16) -> MemberIdx {
        debug_assert!(data_index < self.data_disks());
        let m = match self.rule {
            DataRule::Rotate { start } => (start + data_index) % self.raid_disks,
            DataRule::Skip { from, by } if data_index >= from => data_index + by,
            DataRule::Skip { .. } => data_index,
        };
        MemberIdx(m)
    }

    /// The member holding P.
    pub fn p(&self) -> MemberIdx {
        MemberIdx(self.p)
    }

    /// The member holding Q (RAID-6 only).
    pub fn q(&self) -> Option<MemberIdx> {
        self.q.map(MemberIdx)
    }

    /// What `member` holds in this stripe.
    pub fn role_of(&self, member: MemberIdx) -> StripeRole {
        if member.0 == self.p {
            return StripeRole::P;
        }
        if Some(member.0) == self.q {
            return StripeRole::Q;
        }
        let n = self.raid_disks;
        let m = member.0;
        let index = match self.rule {
            DataRule::Rotate { start } => (m + n - start) % n,
            DataRule::Skip { from, by } if m >= from + by => m - by,
            DataRule::Skip { .. } => m,
        };
        StripeRole::Data(index)
    }

    /// The slot of data chunk `data_index` in the Q syndrome (its power of the
    /// generator). md walks the members from the one after Q (from the first member
    /// when Q is last) and numbers the data chunks in the order it meets them, so the
    /// slot differs from the data index in the asymmetric layouts. Without Q it is the
    /// data index.
    pub fn syndrome_slot(&self, data_index: u16) -> usize {
        let Some(q) = self.q else {
            return usize::from(data_index);
        };
        let n = self.raid_disks;
        let d0 = if q == n - 1 { 0 } else { q + 1 };
        let distance = |m: u16| (m + n - d0) % n;
        let m = distance(self.data_member(data_index).0);
        let parity_before = u16::from(distance(self.p) < m) + u16::from(distance(q) < m);
        usize::from(m - parity_before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ParityAlgorithm::*;

    fn row(level: Level, a: ParityAlgorithm, n: u16, stripe: u64) -> String {
        let map = StripeMap::new(level, a, n, stripe);
        (0..n)
            .map(|m| match map.role_of(MemberIdx(m)) {
                StripeRole::P => "P".to_owned(),
                StripeRole::Q => "Q".to_owned(),
                StripeRole::Data(i) => i.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The pictures in md(4) and mdadm's documentation of where parity rotates.
    #[test]
    fn raid5_rotation_matches_md() {
        let table = |a| {
            (0..4)
                .map(|s| row(Level::Raid5, a, 4, s))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            table(LeftSymmetric),
            ["0 1 2 P", "1 2 P 0", "2 P 0 1", "P 0 1 2"]
        );
        assert_eq!(
            table(LeftAsymmetric),
            ["0 1 2 P", "0 1 P 2", "0 P 1 2", "P 0 1 2"]
        );
        assert_eq!(
            table(RightSymmetric),
            ["P 0 1 2", "2 P 0 1", "1 2 P 0", "0 1 2 P"]
        );
        assert_eq!(
            table(RightAsymmetric),
            ["P 0 1 2", "0 P 1 2", "0 1 P 2", "0 1 2 P"]
        );
        assert_eq!(table(ParityFirst)[2], "P 0 1 2");
        assert_eq!(table(ParityLast)[1], "0 1 2 P");
    }

    #[test]
    fn raid6_rotation_matches_md() {
        let table = |a| {
            (0..5)
                .map(|s| row(Level::Raid6, a, 5, s))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            table(LeftSymmetric),
            [
                "Q 0 1 2 P",
                "0 1 2 P Q",
                "1 2 P Q 0",
                "2 P Q 0 1",
                "P Q 0 1 2"
            ]
        );
        assert_eq!(
            table(LeftAsymmetric),
            [
                "Q 0 1 2 P",
                "0 1 2 P Q",
                "0 1 P Q 2",
                "0 P Q 1 2",
                "P Q 0 1 2"
            ]
        );
        assert_eq!(table(ParityFirst)[3], "P Q 0 1 2");
        assert_eq!(table(ParityLast)[3], "0 1 2 P Q");
    }

    #[test]
    fn syndrome_slots_follow_md_walk() {
        // Left-asymmetric, stripe 2 of 5: "0 1 P Q 2"; md starts after Q, at member 4.
        let map = StripeMap::new(Level::Raid6, LeftAsymmetric, 5, 2);
        assert_eq!(map.syndrome_slot(2), 0);
        assert_eq!(map.syndrome_slot(0), 1);
        assert_eq!(map.syndrome_slot(1), 2);
        // Symmetric layouts keep slot == data index.
        for s in 0..5 {
            let map = StripeMap::new(Level::Raid6, LeftSymmetric, 5, s);
            for i in 0..3 {
                assert_eq!(map.syndrome_slot(i), usize::from(i));
            }
        }
    }
}
