//! Arrays as users name them: creating an md array on member paths, finding and
//! assembling the members of an existing one, and opening it for I/O.
//!
//! An array is named by its members — paths, or a folder holding them — and
//! recognised by the md superblocks on them. Assembly follows md: members are grouped by
//! array UUID, a member whose event counter is behind the freshest is stale and left
//! out, and the array runs degraded while its level's redundancy allows.

mod assemble;
mod badblocks;
mod bitmap;
mod create;
mod error;
mod force;
mod foreign;
#[cfg(test)]
mod handoff_tests;
mod integrity;
mod members;
mod open;
mod routed;
mod scan;
mod sync;

pub use assemble::{
    assemble, assemble_anyway, cannot_start, control_socket_in, member_candidates, Assembled,
    FoundMember, LeftOut, LeftOutReason,
};
pub use badblocks::listed_bad_sectors;
pub use create::{
    create, is_missing, CreateOptions, Created, Uneven, DATA_OFFSET_SECTORS, MISSING,
};
pub use error::ArrayError;
pub use force::{force_start, forcible, Forced};
pub use integrity::array_keeps_checksums as keeps_checksums;
pub use members::{
    add_member, add_spare_at_create, assemble_with_spares, fail_member, fail_refusal,
    remove_member, replace_member, Added, Replacing,
};
pub use open::{Array, Consistency, OpenMode};
pub use scan::{read_superblock, MemberPath};
pub use sync::{CheckpointPace, SyncCheckpoints, SyncReport};
#[cfg(test)]
mod offline_failure_tests;
