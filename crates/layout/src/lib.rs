//! Linux md's address arithmetic for RAID 0, 1, 4, 5, 6 and 10: which member and which
//! member sector hold each array sector, where P and Q sit in each stripe, and in which
//! order md feeds data blocks to the Q syndrome.
//!
//! Everything here is a pure function of a [`Geometry`]: no I/O, no state, no
//! allocation. The mapping is md's, bit for bit (`raid0.c` `map_sector`, `raid5.c`
//! `raid5_compute_sector` and `raid6_d0`/`raid6_idx_to_slot`, `raid10.c`
//! `__raid10_find_phys` and `calc_sectors`), so arrays move freely between xraid and
//! the kernel.
//!
//! RAID-0 is supported with one zone only (members of equal size, as md's layout for
//! equal members); md's multi-zone layout for unequal members is refused by the caller.

mod error;
mod geometry;
mod layout;
mod level;
mod raid10;
mod stripe;

pub use error::LayoutError;
pub use geometry::{Copies, Geometry, Place, StripePos, MAX_COPIES};
pub use layout::{Layout, ParityAlgorithm, Raid10Layout};
pub use level::Level;
pub use stripe::{StripeMap, StripeRole};

/// Bytes in a sector, md's unit of address.
pub const SECTOR_BYTES: u64 = 512;

/// Smallest chunk xraid accepts, in sectors (4 KiB).
pub const MIN_CHUNK_SECTORS: u32 = 8;

/// Largest chunk xraid accepts, in sectors (16 MiB).
pub const MAX_CHUNK_SECTORS: u32 = 32768;

/// Most members of one array (any level).
pub const MAX_MEMBERS: u16 = 64;

/// A member's role in the array: its index in md's role table (0 = "Active device 0").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MemberIdx(pub u16);

impl MemberIdx {
    /// The role as an index into per-member tables.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl std::fmt::Display for MemberIdx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "role {}", self.0)
    }
}
