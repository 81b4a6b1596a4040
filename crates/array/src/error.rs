//! Everything that can stop creating, assembling or opening an array, each message one
//! line that names the thing and the fix.

use std::path::PathBuf;

use xraid_layout::Level;

#[derive(Debug, thiserror::Error)]
pub enum ArrayError {
    #[error("no members given: name the member files, or a folder that holds them")]
    NoMembers,
    #[error("{path}: no md members in this folder")]
    EmptyFolder { path: PathBuf },
    #[error(transparent)]
    Member(#[from] xraid_member::MemberError),
    #[error("the array's state could not be recorded: no superblock write worked on enough members ({error}); {lost}")]
    StateUnrecorded { error: String, lost: String },
    #[error("the array failed as it was closed ({lost}): the members left record the members that failed as faulty, and it does not start until enough are back (`xraid serve --force` takes back those that failed with it)")]
    FailedWhileClosing { lost: String },
    #[error("the array's state could not be recorded: its members changed during each of {rounds} superblock updates in a row (failing, or replacements taking over); the next update tries again")]
    MembersChanging { rounds: usize },
    #[error("{path}: {source}")]
    Superblock {
        path: PathBuf,
        source: xraid_format::FormatError,
    },
    #[error("{path}: not an md member (no md superblock at 4 KiB): check the path, or make an array with `xraid create`")]
    NotMember { path: PathBuf },
    #[error("{first} and {second} are the same file: give each member once")]
    Duplicate { first: PathBuf, second: PathBuf },
    #[error("{partition} is a partition of {disk}, also given: they overlap, and each would write over the other; give the disk or its partitions")]
    PartitionOfMember { partition: PathBuf, disk: PathBuf },
    #[error("{device} is a loop device over {file}, which is also given as {named}: one store named twice; give each member once")]
    LoopOverMember {
        device: PathBuf,
        file: PathBuf,
        named: PathBuf,
    },
    #[error("{device} and {other} are loop devices over one file, {file}: one store named twice; give each member once")]
    LoopsOverOneFile {
        device: PathBuf,
        other: PathBuf,
        file: PathBuf,
    },
    #[error("{path} and {other} are members of one array but disagree on its {field} ({this} and {that}): md refuses such a set too (\"superblock doesn't match others\"); which one is right cannot be told, so nothing is read or written")]
    ShapeMismatch {
        path: PathBuf,
        other: PathBuf,
        field: &'static str,
        this: String,
        that: String,
    },
    #[error("members of two different arrays: {first} belongs to {first_array} but {second} to {second_array}; name the members of one array")]
    MixedArrays {
        first: PathBuf,
        /// The array's name and UUID, as `'name' (uuid)`.
        first_array: String,
        second: PathBuf,
        second_array: String,
    },
    #[error("{level} needs {min} to {max} members, {given} given")]
    MemberCount {
        level: Level,
        given: usize,
        min: u16,
        max: u16,
    },
    // A disk's size is what it is: --size only helps a member file yet to be made.
    #[error("{path} holds {size} bytes but a member needs at least {need}: give a larger member (or, for a file to be made, a larger --size)")]
    TooSmall { path: PathBuf, size: u64, need: u64 },
    #[error("{path} holds {size} bytes, less than the {asked} --size asks of every member: give a larger member, or leave out --size to size the array by its smallest member")]
    SmallerThanSize {
        path: PathBuf,
        size: u64,
        asked: u64,
    },
    #[error("{path} has {device}-byte logical blocks, larger than the array's {array}: md refuses such a device (\"incompatible logical_block_size\"), since a file system made on {array}-byte blocks would no longer mount; use a device with {array}-byte sectors")]
    LargerBlocks {
        path: PathBuf,
        device: u32,
        array: u32,
    },
    #[error("{path} is truncated: it holds {size} bytes but its superblock says the array uses {need}; restore the full file")]
    Truncated { path: PathBuf, size: u64, need: u64 },
    #[error("roles {missing:?} given as `missing` leave the {level} array without its data ({why}): name a member for more of them")]
    MissingAtCreate {
        level: Level,
        missing: Vec<usize>,
        why: String,
    },
    #[error("`missing` is among the spares: it stands for an empty role, so name it among the array's members")]
    MissingSpare,
    #[error("--assume-clean with --integrity: {path} holds data, and its checksums can only be recorded by reading it all; leave --assume-clean out")]
    AssumeCleanIntegrity { path: PathBuf },
    #[error("{path} does not exist: give --size to create member files")]
    MissingFile { path: PathBuf },
    #[error("{path} holds {what}, which create would write over (md's superblock goes at 4 KiB, the array's data after it); pass --force to use it anyway")]
    ForeignContent { path: PathBuf, what: &'static str },
    #[error("{path} holds an md superblock of version {version}, which xraid does not use (it reads and writes 1.2): it may be a member of an md array; pass --force to overwrite it")]
    OtherMdMetadata {
        path: PathBuf,
        version: &'static str,
    },
    #[error("{path} holds an md superblock of version {version}; xraid reads only 1.2 (mdadm's default), so it cannot use this member")]
    UnsupportedMetadata {
        path: PathBuf,
        version: &'static str,
    },
    #[error("{path} already belongs to array '{name}' ({uuid}): pass --force to overwrite it")]
    AlreadyMember {
        path: PathBuf,
        name: String,
        uuid: String,
    },
    #[error("{path} and {other} both claim role {role} of the array: leave one of them out")]
    RoleConflict {
        path: PathBuf,
        other: PathBuf,
        role: u16,
    },
    #[error("cannot start '{name}': {present} of {raid_disks} members present and {level} needs more ({missing}){hint}")]
    TooManyMissing {
        name: String,
        present: usize,
        raid_disks: u16,
        level: Level,
        missing: String,
        /// What would start it, when a forced start would (begins with "; ").
        hint: String,
    },
    #[error("cannot force '{name}' to start: {why}")]
    NotForcible { name: String, why: String },
    #[error("invalid geometry: {0}")]
    Layout(#[from] xraid_layout::LayoutError),
    #[error("{path}: the superblock describes {what}, which xraid does not support yet")]
    Unsupported { path: PathBuf, what: String },
    #[error(transparent)]
    Driver(#[from] xraid_driver::DriverError),
    #[error("{path} holds the superblock of {member}, an active member of array '{name}': it is that device under another name, or a copy of it; to reuse a copy, erase its md superblock first (mdadm --zero-superblock)")]
    SameDeviceAs {
        path: PathBuf,
        member: PathBuf,
        name: String,
    },
    #[error("{path} is already an active member of array '{name}'")]
    AlreadyActive { path: PathBuf, name: String },
    #[error("{path} is already a member of array '{name}', being rebuilt into role {role} ({percent}% done): {how}; `xraid status` follows it")]
    AlreadyRebuilding {
        path: PathBuf,
        name: String,
        role: usize,
        percent: u64,
        /// What carries the rebuild on.
        how: &'static str,
    },
    #[error("{path} is not an active member of array '{name}': name one of its members (see xraid status)")]
    NotActive { path: PathBuf, name: String },
    #[error("failing {path} is refused: the array would not survive it ({detail})")]
    WouldLoseData { path: PathBuf, detail: String },
    #[error("{path} is an active member: fail it first (xraid fail), then remove it")]
    StillActive { path: PathBuf },
    #[error("{path} is being built as the replacement of role {role}: fail it first (xraid fail drops it; the member it replaces serves on), then remove it")]
    StillReplacing { path: PathBuf, role: usize },
    #[error("{path} is not a member of array '{name}' (neither active nor left out)")]
    NotInArray { path: PathBuf, name: String },
    #[error("{path} is already a hot spare of array '{name}'")]
    AlreadySpare { path: PathBuf, name: String },
    #[error("hot spare {path} no longer holds this array's spare superblock (written by something else since): passed over, not overwritten")]
    SpareChanged { path: PathBuf },
    #[error("hot spare {path} is gone (deleted or replaced while it waited)")]
    SpareGone { path: PathBuf },
    #[error("{path} left the array while it is served, and I/O the server sent it is still in the kernel: try again shortly (a device that stalls keeps it so: add another disk)")]
    HeldByServer { path: PathBuf },
    #[error("array '{name}' is RAID-0: it has no redundancy to fall back on while a member is replaced (copy the array to a new one instead)")]
    ReplaceRaid0 { name: String },
    #[error("array '{name}' is RAID-0: it has no redundancy, so a hot spare could never step in and no role can be rebuilt")]
    SpareRaid0 { name: String },
    #[error("array name '{name}' is longer than the 32 bytes md's superblock keeps")]
    NameTooLong { name: String },
    #[error("{path} is being rebuilt: wait for its rebuild to end before replacing it")]
    ReplaceRebuilding { path: PathBuf },
    #[error("role {role} of array '{name}' is already being replaced (by {by}): wait for it to end, or fail the replacement")]
    AlreadyReplacing {
        role: u16,
        name: String,
        by: PathBuf,
    },
    #[error("{path} is already a replacement being built in array '{name}'")]
    AlreadyReplacement { path: PathBuf, name: String },
    #[error("array '{name}' is open read-only: members cannot be added or removed")]
    ReadOnly { name: String },
    #[error("array '{name}' has no free slot left in its role table")]
    NoFreeSlot { name: String },
    #[error("the members could not be read at {units} stripes (read errors on more members than the level survives): replace the failing device and create again")]
    InitialSyncUnreadable { units: u64 },
    #[error("cannot start a {kind}: {source}")]
    Sync {
        kind: &'static str,
        source: xraid_engine::SyncError,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}
