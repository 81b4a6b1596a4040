//! md's layouts: where parity rotates in RAID-4/5/6, how RAID-10 places its copies;
//! their md numbers (superblock `layout`) and mdadm's names.

use std::fmt;

use crate::{LayoutError, Level};

/// md's parity placement algorithms for RAID-5 and RAID-6 (`ALGORITHM_*` in raid5.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParityAlgorithm {
    LeftAsymmetric,
    RightAsymmetric,
    LeftSymmetric,
    RightSymmetric,
    /// Parity on the first member(s) of every stripe (`ALGORITHM_PARITY_0`).
    ParityFirst,
    /// Parity on the last member(s) of every stripe (`ALGORITHM_PARITY_N`); RAID-4.
    ParityLast,
}

impl ParityAlgorithm {
    pub const ALL: [ParityAlgorithm; 6] = [
        ParityAlgorithm::LeftAsymmetric,
        ParityAlgorithm::RightAsymmetric,
        ParityAlgorithm::LeftSymmetric,
        ParityAlgorithm::RightSymmetric,
        ParityAlgorithm::ParityFirst,
        ParityAlgorithm::ParityLast,
    ];

    /// md's number, in the order of raid5.h.
    pub fn md_value(self) -> u32 {
        match self {
            ParityAlgorithm::LeftAsymmetric => 0,
            ParityAlgorithm::RightAsymmetric => 1,
            ParityAlgorithm::LeftSymmetric => 2,
            ParityAlgorithm::RightSymmetric => 3,
            ParityAlgorithm::ParityFirst => 4,
            ParityAlgorithm::ParityLast => 5,
        }
    }

    /// mdadm's long name.
    pub fn name(self) -> &'static str {
        match self {
            ParityAlgorithm::LeftAsymmetric => "left-asymmetric",
            ParityAlgorithm::RightAsymmetric => "right-asymmetric",
            ParityAlgorithm::LeftSymmetric => "left-symmetric",
            ParityAlgorithm::RightSymmetric => "right-symmetric",
            ParityAlgorithm::ParityFirst => "parity-first",
            ParityAlgorithm::ParityLast => "parity-last",
        }
    }

    /// mdadm's short name, where it has one.
    fn short_name(self) -> Option<&'static str> {
        match self {
            ParityAlgorithm::LeftAsymmetric => Some("la"),
            ParityAlgorithm::RightAsymmetric => Some("ra"),
            ParityAlgorithm::LeftSymmetric => Some("ls"),
            ParityAlgorithm::RightSymmetric => Some("rs"),
            ParityAlgorithm::ParityFirst | ParityAlgorithm::ParityLast => None,
        }
    }
}

/// md's RAID-10 layout: `near_copies` copies of each chunk on neighbouring members,
/// each repeated `far_copies` times further along the members (`offset`: in the next
/// chunk row rather than in a far half of the member).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Raid10Layout {
    pub near_copies: u8,
    pub far_copies: u8,
    pub offset: bool,
}

impl Raid10Layout {
    /// Copies of every chunk.
    pub fn copies(self) -> u16 {
        u16::from(self.near_copies) * u16::from(self.far_copies)
    }

    /// md's number: near in bits 0-7, far in 8-15, offset in bit 16. Bits 17 and up
    /// (md's "far sets") stay 0: the original layout, which every mdadm writes.
    pub fn md_value(self) -> u32 {
        u32::from(self.near_copies)
            | (u32::from(self.far_copies) << 8)
            | (u32::from(self.offset) << 16)
    }

    fn from_md(value: u32) -> Option<Raid10Layout> {
        if value >> 17 != 0 {
            return None;
        }
        let near = u8::try_from(value & 0xff).ok()?;
        let far = u8::try_from((value >> 8) & 0xff).ok()?;
        (near > 0 && far > 0).then_some(Raid10Layout {
            near_copies: near,
            far_copies: far,
            offset: value & (1 << 16) != 0,
        })
    }

    /// mdadm's short names: `n2`, `f2`, `o2` (a near count above 1 combined with far
    /// copies has no short name and is written `n2f2`).
    pub(crate) fn short_name_owned(self) -> String {
        self.short_name()
    }

    fn short_name(self) -> String {
        let far = if self.offset { 'o' } else { 'f' };
        match (self.near_copies, self.far_copies) {
            (n, 1) => format!("n{n}"),
            (1, f) => format!("{far}{f}"),
            (n, f) => format!("n{n}{far}{f}"),
        }
    }

    fn parse(name: &str) -> Option<Raid10Layout> {
        let mut near = 1u8;
        let mut far = 1u8;
        let mut offset = false;
        let mut rest = name;
        let mut seen = false;
        while !rest.is_empty() {
            let kind = rest.chars().next()?;
            let digits: String = rest[1..].chars().take_while(char::is_ascii_digit).collect();
            let count: u8 = digits.parse().ok()?;
            match kind {
                'n' => near = count,
                'f' => far = count,
                'o' => {
                    far = count;
                    offset = true;
                }
                _ => return None,
            }
            rest = &rest[1 + digits.len()..];
            seen = true;
        }
        (seen && near > 0 && far > 0).then_some(Raid10Layout {
            near_copies: near,
            far_copies: far,
            offset,
        })
    }
}

/// The layout of an array: parity rotation for RAID-4/5/6, copy placement for RAID-10,
/// nothing for RAID-0 and RAID-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    None,
    Parity(ParityAlgorithm),
    Raid10(Raid10Layout),
}

const PARITY_CHOICES: &str = "left-symmetric/ls, left-asymmetric/la, right-symmetric/rs, right-asymmetric/ra, parity-first or parity-last";
const RAID10_CHOICES: &str = "n2, f2 or o2 (near, far or offset copies)";

impl Layout {
    /// mdadm's default for the level: left-symmetric, parity-last for RAID-4, n2.
    pub fn default_for(level: Level) -> Layout {
        match level {
            Level::Raid0 | Level::Raid1 => Layout::None,
            Level::Raid4 => Layout::Parity(ParityAlgorithm::ParityLast),
            Level::Raid5 | Level::Raid6 => Layout::Parity(ParityAlgorithm::LeftSymmetric),
            Level::Raid10 => Layout::Raid10(Raid10Layout {
                near_copies: 2,
                far_copies: 1,
                offset: false,
            }),
        }
    }

    /// md's number for the superblock's `layout` field.
    pub fn md_value(self) -> u32 {
        match self {
            Layout::None => 0,
            Layout::Parity(a) => a.md_value(),
            Layout::Raid10(r) => r.md_value(),
        }
    }

    /// The layout md's number names for `level`. md ignores the number for RAID-4
    /// (parity is always last), and so does xraid.
    pub fn from_md(level: Level, value: u32) -> Result<Layout, LayoutError> {
        let unsupported = LayoutError::UnsupportedMdLayout { level, value };
        match level {
            Level::Raid0 | Level::Raid1 => Ok(Layout::None),
            Level::Raid4 => Ok(Layout::Parity(ParityAlgorithm::ParityLast)),
            Level::Raid5 | Level::Raid6 => ParityAlgorithm::ALL
                .into_iter()
                .find(|a| a.md_value() == value)
                .map(Layout::Parity)
                .ok_or(unsupported),
            Level::Raid10 => Raid10Layout::from_md(value)
                .map(Layout::Raid10)
                .ok_or(unsupported),
        }
    }

    /// Parses mdadm's layout names for `level`.
    pub fn parse(level: Level, name: &str) -> Result<Layout, LayoutError> {
        let lower = name.trim().to_ascii_lowercase();
        let unknown = |choices| LayoutError::UnknownLayout {
            level,
            name: name.to_owned(),
            choices,
        };
        match level {
            Level::Raid0 | Level::Raid1 => Err(unknown("no --layout (the level has none)")),
            Level::Raid4 => match lower.as_str() {
                "parity-last" | "default" => Ok(Layout::default_for(level)),
                _ => Err(unknown(
                    "parity-last (RAID-4 keeps parity on the last member)",
                )),
            },
            Level::Raid5 | Level::Raid6 => {
                if lower == "default" {
                    return Ok(Layout::default_for(level));
                }
                ParityAlgorithm::ALL
                    .into_iter()
                    .find(|a| a.name() == lower || a.short_name() == Some(lower.as_str()))
                    .map(Layout::Parity)
                    .ok_or_else(|| unknown(PARITY_CHOICES))
            }
            Level::Raid10 => {
                if lower == "default" {
                    return Ok(Layout::default_for(level));
                }
                Raid10Layout::parse(&lower)
                    .map(Layout::Raid10)
                    .ok_or_else(|| unknown(RAID10_CHOICES))
            }
        }
    }

    /// The short name mdadm's `--layout` takes (`ls`, `n2`, ...).
    pub fn short_name(self) -> String {
        match self {
            Layout::None => "none".to_owned(),
            Layout::Parity(a) => a.short_name().unwrap_or(a.name()).to_owned(),
            Layout::Raid10(r) => r.short_name(),
        }
    }
}

impl fmt::Display for Layout {
    /// mdadm --detail's words: `left-symmetric`, `near=2`, `far=2`, `offset=2`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::None => f.write_str("none"),
            Layout::Parity(a) => f.write_str(a.name()),
            Layout::Raid10(r) => {
                let mut parts = Vec::new();
                if r.near_copies > 1 {
                    parts.push(format!("near={}", r.near_copies));
                }
                if r.far_copies > 1 {
                    let kind = if r.offset { "offset" } else { "far" };
                    parts.push(format!("{kind}={}", r.far_copies));
                }
                if parts.is_empty() {
                    parts.push("near=1".to_owned());
                }
                f.write_str(&parts.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mdadm_names_parse() {
        let ls = Layout::Parity(ParityAlgorithm::LeftSymmetric);
        assert_eq!(Layout::parse(Level::Raid5, "ls"), Ok(ls));
        assert_eq!(Layout::parse(Level::Raid6, "left-symmetric"), Ok(ls));
        assert_eq!(
            Layout::parse(Level::Raid5, "ra"),
            Ok(Layout::Parity(ParityAlgorithm::RightAsymmetric))
        );
        let f2 = Layout::parse(Level::Raid10, "f2").expect("f2");
        assert_eq!(f2.md_value(), 0x201);
        assert_eq!(
            Layout::parse(Level::Raid10, "n2").expect("n2").md_value(),
            0x102
        );
        assert_eq!(
            Layout::parse(Level::Raid10, "o2").expect("o2").md_value(),
            0x10201
        );
        assert_eq!(f2.to_string(), "far=2");
        let err = Layout::parse(Level::Raid5, "f2").expect_err("not a raid5 layout");
        assert!(err.to_string().contains("layout"), "{err}");
        assert!(Layout::parse(Level::Raid10, "x2").is_err());
        assert!(Layout::parse(Level::Raid10, "n").is_err());
    }

    #[test]
    fn md_values_round_trip() {
        for level in [Level::Raid5, Level::Raid6] {
            for a in ParityAlgorithm::ALL {
                let l = Layout::Parity(a);
                assert_eq!(Layout::from_md(level, l.md_value()), Ok(l));
                assert_eq!(Layout::parse(level, &l.short_name()), Ok(l));
            }
        }
        for v in [0x102, 0x201, 0x10201, 0x103, 0x202] {
            let l = Layout::from_md(Level::Raid10, v).expect("valid");
            assert_eq!(l.md_value(), v);
            assert_eq!(Layout::parse(Level::Raid10, &l.short_name()), Ok(l));
        }
        // md's "far sets" layouts are refused rather than misread.
        assert!(Layout::from_md(Level::Raid10, 0x20102).is_err());
        assert!(Layout::from_md(Level::Raid5, 8).is_err());
    }
}
