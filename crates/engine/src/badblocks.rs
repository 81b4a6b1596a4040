//! Known bad ranges: the sectors of each device that hold no good data, as its bad
//! block log records them (md's, read by the driver at open). A read that touches
//! one is answered as a read error without trusting what the device returns — so
//! the range is rebuilt from redundancy, returned, and rewritten (md's read-error
//! correction), and is not counted against the member's read-error limit — and a
//! write that lands on one makes those sectors good again.
//!
//! Lists are per driver slot (a replacement is a device of its own), in sectors of
//! the data area; the driver keeps them on disk with the superblocks.

use std::collections::HashMap;
use std::ops::Range;

use xraid_format::BadBlocks;
use xraid_layout::MemberIdx;

use crate::engine::Engine;
use crate::{IoFailed, IoKind};

/// An I/O in flight that touches a known bad range of its device.
#[derive(Debug, Clone)]
pub(crate) struct Touch {
    slot: MemberIdx,
    sectors: Range<u64>,
    write: bool,
}

#[derive(Debug, Default)]
pub(crate) struct KnownBad {
    /// Per driver slot.
    lists: Vec<BadBlocks>,
    /// By I/O key.
    touching: HashMap<usize, Touch>,
    /// Per driver slot: the list changed since the driver last took it.
    changed: Vec<bool>,
}

impl KnownBad {
    pub(crate) fn new(slots: usize) -> KnownBad {
        KnownBad {
            lists: vec![BadBlocks::new(); slots],
            touching: HashMap::new(),
            changed: vec![false; slots],
        }
    }

    fn list(&self, slot: MemberIdx) -> Option<&BadBlocks> {
        self.lists.get(slot.index())
    }
}

/// Notes member I/O `key` to device `slot` if it touches a known bad range there.
pub(crate) fn note_io(
    engine: &mut Engine,
    key: usize,
    slot: MemberIdx,
    kind: IoKind,
    at: Range<u64>,
) {
    let write = match kind {
        IoKind::Read => false,
        IoKind::Write | IoKind::WriteFua => true,
        IoKind::Flush => return,
    };
    let known = &mut engine.known_bad;
    if known.list(slot).is_some_and(|l| l.overlaps(at.clone())) {
        known.touching.insert(
            key,
            Touch {
                slot,
                sectors: at,
                write,
            },
        );
    }
}

/// Member I/O `key` completed with `result`: a read that touched a known bad range
/// failed, whatever the device returned; a write that did made its sectors good.
/// Returns the result to act on, and whether it is a known bad range's read error
/// (not counted against the member). `current` is false for an I/O whose device has
/// left its slot since.
pub(crate) fn on_completion(
    engine: &mut Engine,
    key: usize,
    current: bool,
    result: Result<(), IoFailed>,
) -> (Result<(), IoFailed>, bool) {
    let Some(touch) = engine.known_bad.touching.remove(&key) else {
        return (result, false);
    };
    if !current {
        return (result, false);
    }
    let known = &mut engine.known_bad;
    match (touch.write, result) {
        (false, Ok(())) => (Err(IoFailed::Medium), true),
        (false, Err(failure)) => (Err(failure), failure == IoFailed::Medium),
        (true, Ok(())) => {
            if known.lists[touch.slot.index()].clear(touch.sectors) {
                known.changed[touch.slot.index()] = true;
            }
            (result, false)
        }
        (true, Err(_)) => (result, false),
    }
}

/// A new device takes driver slot `slot`: it has no known bad ranges yet.
pub(crate) fn device_changed(engine: &mut Engine, slot: MemberIdx) {
    let known = &mut engine.known_bad;
    if let Some(list) = known.lists.get_mut(slot.index()) {
        if !list.is_empty() {
            *list = BadBlocks::new();
            known.changed[slot.index()] = true;
        }
    }
}

impl Engine {
    /// The known bad ranges of the device in driver slot `slot` (data-area sectors),
    /// read from its bad block log at open. Replaces what was known for that slot.
    pub fn set_bad_blocks(&mut self, slot: MemberIdx, bad: BadBlocks) {
        let known = &mut self.known_bad;
        if let Some(list) = known.lists.get_mut(slot.index()) {
            *list = bad;
            known.changed[slot.index()] = false;
        }
    }

    /// The known bad ranges of the device in driver slot `slot`, in data-area sectors.
    pub fn bad_blocks(&self, slot: MemberIdx) -> BadBlocks {
        self.known_bad.list(slot).cloned().unwrap_or_default()
    }

    /// Whether any slot's known bad ranges changed (rewritten good) since the last
    /// [`Engine::bad_blocks_recorded`]: the driver writes them to the logs then.
    pub fn bad_blocks_changed(&self) -> bool {
        self.known_bad.changed.iter().any(|&c| c)
    }

    /// The driver wrote every slot's list to its log.
    pub fn bad_blocks_recorded(&mut self) {
        self.known_bad.changed.fill(false);
    }
}
