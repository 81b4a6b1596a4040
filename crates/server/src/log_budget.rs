//! How many lines a member's recurring faults get in the log. A disk that is going
//! bad refuses writes, fails reads or returns corrupt blocks by the thousand, each an
//! event; one line each would bury everything else in the log. The first few of each
//! kind per member are logged in full, then one line at each power of ten says how
//! many there have been (`xraid status` counts them all).

use std::collections::HashMap;

/// Faults of one kind on one member logged in full before they are only counted.
pub(crate) const LOGGED_IN_FULL: u64 = 20;

/// The kinds of fault counted apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Fault {
    ReadErrorCorrected,
    ChecksumMismatch,
    WriteRefused,
    LostInRebuild,
}

impl Fault {
    fn plural(self) -> &'static str {
        match self {
            Fault::ReadErrorCorrected => "read errors corrected",
            Fault::ChecksumMismatch => "blocks that disagreed with their checksums",
            Fault::WriteRefused => "refused writes listed in its bad block log",
            Fault::LostInRebuild => "ranges it could not be rebuilt at",
        }
    }
}

/// What to log for one more fault.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Say {
    /// The fault itself, in full.
    InFull,
    /// The fault in full, and that the next ones will only be counted.
    InFullLast(String),
    /// Only how many there have been (at each power of ten).
    Count(String),
    Nothing,
}

#[derive(Debug, Default)]
pub(crate) struct LogBudget {
    /// Per kind, role and the device in that role (by name): a device that takes the
    /// role later (a spare, a replacement, a new disk) starts with a budget of its own,
    /// as the engine's slow-member figures start afresh.
    seen: HashMap<(Fault, u16, String), u64>,
}

impl LogBudget {
    /// One more `fault` on member `member` (named `name`).
    pub(crate) fn one_more(&mut self, fault: Fault, member: u16, name: &str) -> Say {
        let n = self
            .seen
            .entry((fault, member, name.to_owned()))
            .or_insert(0);
        *n += 1;
        let n = *n;
        if n < LOGGED_IN_FULL {
            Say::InFull
        } else if n == LOGGED_IN_FULL {
            Say::InFullLast(format!(
                "member {name}: {n} {} so far; the next are counted, not logged one by one (xraid status shows the counts)",
                fault.plural()
            ))
        } else if n >= 100 && is_power_of_ten(n) {
            Say::Count(format!("member {name}: {n} {} so far", fault.plural()))
        } else {
            Say::Nothing
        }
    }
}

fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n.is_multiple_of(10) {
        n /= 10;
    }
    n == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_faults_are_logged_in_full_then_counted_at_powers_of_ten() {
        let mut budget = LogBudget::default();
        let says: Vec<Say> = (0..12_000)
            .map(|_| budget.one_more(Fault::WriteRefused, 2, "d2"))
            .collect();
        let full = says.iter().filter(|s| **s == Say::InFull).count() as u64;
        assert_eq!(full, LOGGED_IN_FULL - 1);
        assert!(
            matches!(&says[LOGGED_IN_FULL as usize - 1], Say::InFullLast(m) if m.contains("20 refused writes"))
        );
        let counts: Vec<&String> = says
            .iter()
            .filter_map(|s| match s {
                Say::Count(m) => Some(m),
                _ => None,
            })
            .collect();
        assert_eq!(counts.len(), 3, "100, 1000 and 10000: {counts:?}");
        assert!(counts[2].contains("10000 refused writes"), "{counts:?}");
        // Another member, or another kind, has a budget of its own.
        assert_eq!(budget.one_more(Fault::WriteRefused, 3, "d3"), Say::InFull);
        assert_eq!(
            budget.one_more(Fault::ReadErrorCorrected, 2, "d2"),
            Say::InFull
        );
    }

    /// A role's budget spent by a dying disk does not silence the disk that takes the
    /// role after it (a hot spare, a replacement): its first faults are logged in full.
    #[test]
    fn a_new_device_in_the_role_has_a_budget_of_its_own() {
        let mut budget = LogBudget::default();
        for _ in 0..1000 {
            budget.one_more(Fault::ReadErrorCorrected, 2, "disks/d2");
        }
        assert_eq!(
            budget.one_more(Fault::ReadErrorCorrected, 2, "disks/s0"),
            Say::InFull
        );
    }
}
