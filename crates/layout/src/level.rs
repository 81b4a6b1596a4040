//! RAID levels, with md's level numbers and mdadm's names.

use std::fmt;
use std::str::FromStr;

use crate::{LayoutError, MAX_MEMBERS};

/// A RAID level xraid can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    Raid0,
    Raid1,
    Raid4,
    Raid5,
    Raid6,
    Raid10,
}

impl Level {
    pub const ALL: [Level; 6] = [
        Level::Raid0,
        Level::Raid1,
        Level::Raid4,
        Level::Raid5,
        Level::Raid6,
        Level::Raid10,
    ];

    /// md's number for the level (superblock `level`).
    pub fn md_level(self) -> i32 {
        match self {
            Level::Raid0 => 0,
            Level::Raid1 => 1,
            Level::Raid4 => 4,
            Level::Raid5 => 5,
            Level::Raid6 => 6,
            Level::Raid10 => 10,
        }
    }

    /// The level md's number names.
    pub fn from_md(level: i32) -> Result<Level, LayoutError> {
        Level::ALL
            .into_iter()
            .find(|l| l.md_level() == level)
            .ok_or(LayoutError::UnsupportedMdLevel(level))
    }

    /// Fewest members an array of this level can have. RAID-4/5 need three so that
    /// parity is not a mirror, RAID-6 four so that it keeps two data blocks per stripe.
    pub fn min_members(self) -> u16 {
        match self {
            Level::Raid0 | Level::Raid1 | Level::Raid10 => 2,
            Level::Raid4 | Level::Raid5 => 3,
            Level::Raid6 => 4,
        }
    }

    /// Most members an array of this level can have.
    pub fn max_members(self) -> u16 {
        MAX_MEMBERS
    }

    /// Parity blocks per stripe: 1 for RAID-4/5, 2 for RAID-6, 0 otherwise.
    pub fn parity_count(self) -> u8 {
        match self {
            Level::Raid4 | Level::Raid5 => 1,
            Level::Raid6 => 2,
            _ => 0,
        }
    }

    /// Whether stripes of this level carry parity.
    pub fn has_parity(self) -> bool {
        self.parity_count() > 0
    }

    /// Whether the level stripes data in chunks (all but RAID-1).
    pub fn has_chunk(self) -> bool {
        self != Level::Raid1
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raid{}", self.md_level())
    }
}

impl FromStr for Level {
    type Err = LayoutError;

    /// mdadm's spellings: `raid5`, `5`, `r5`; `stripe` for RAID-0, `mirror` for RAID-1.
    fn from_str(s: &str) -> Result<Level, LayoutError> {
        let lower = s.trim().to_ascii_lowercase();
        let number = lower
            .strip_prefix("raid")
            .or_else(|| lower.strip_prefix('r'))
            .unwrap_or(&lower);
        let level = match number {
            "0" | "stripe" => Level::Raid0,
            "1" | "mirror" => Level::Raid1,
            "4" => Level::Raid4,
            "5" => Level::Raid5,
            "6" => Level::Raid6,
            "10" => Level::Raid10,
            _ => return Err(LayoutError::UnknownLevel(s.to_owned())),
        };
        Ok(level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for level in Level::ALL {
            assert_eq!(level.to_string().parse::<Level>(), Ok(level));
            assert_eq!(level.md_level().to_string().parse::<Level>(), Ok(level));
            assert_eq!(Level::from_md(level.md_level()), Ok(level));
        }
        assert_eq!("mirror".parse::<Level>(), Ok(Level::Raid1));
        assert!("raid7".parse::<Level>().is_err());
        assert!(Level::from_md(-1).is_err());
    }
}
