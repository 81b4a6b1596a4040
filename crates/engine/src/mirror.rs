//! Plans for the levels without parity (RAID-0, RAID-1, RAID-10): every piece of a
//! request goes straight between the client's buffer and member copies.

use xraid_layout::{Level, Place};

use crate::buffers::BufSlice;
use crate::engine::{sectors_to_bytes, Engine, IoTarget, Segment};
use crate::{EngineError, IoKind};

/// Splits a segment at copy boundaries: reads go to one live copy (rotating among
/// copies to spread load), writes to all live copies.
pub(crate) fn submit(engine: &mut Engine, req: usize, seg: Segment) {
    let client = engine.request_buf(req);
    let end = seg.sector + seg.sectors;
    let mut sector = seg.sector;
    let mut buf_off = seg.buf_off;
    while sector < end {
        let copies = engine.geo.copies(sector);
        let sectors = copies.run_sectors.min(end - sector);
        let piece = Segment {
            sector,
            sectors,
            buf_off,
            write: seg.write,
        };
        let buf = BufSlice {
            buf: client,
            offset: buf_off,
            len: sectors_to_bytes(sectors),
        };
        let live: Vec<Place> = copies
            .as_slice()
            .iter()
            .copied()
            .filter(|p| engine.is_live(p.member))
            .collect();
        if live.is_empty() {
            let error = lost(engine);
            engine.fail_request(req, error);
            return;
        }
        if seg.write {
            for place in live {
                let target = IoTarget::Direct {
                    req,
                    member: place.member,
                    seg: piece,
                };
                engine.emit(place.member, IoKind::Write, place.sector, buf, target);
            }
        } else {
            let place = live[engine.read_rotor % live.len()];
            engine.read_rotor = engine.read_rotor.wrapping_add(1);
            let target = IoTarget::Direct {
                req,
                member: place.member,
                seg: piece,
            };
            engine.emit(place.member, IoKind::Read, place.sector, buf, target);
        }
        sector += sectors;
        buf_off += buf.len;
    }
}

fn lost(engine: &Engine) -> EngineError {
    let tolerated = match engine.geo.level() {
        Level::Raid1 => engine.member_states().len() - 1,
        Level::Raid10 => usize::from(engine.geo.copies_count()) - 1,
        _ => 0,
    };
    engine.data_lost(tolerated)
}

/// The error for a segment none of whose copies is live any more.
pub(crate) fn segment_lost(engine: &Engine, seg: Segment) -> Option<EngineError> {
    let end = seg.sector + seg.sectors;
    let mut sector = seg.sector;
    while sector < end {
        let copies = engine.geo.copies(sector);
        if !copies.as_slice().iter().any(|p| engine.is_live(p.member)) {
            return Some(lost(engine));
        }
        sector += copies.run_sectors.min(end - sector);
    }
    None
}

/// Whether some chunk of a RAID-10 array has no live copy. Copy placement repeats
/// every `raid_disks * copies` chunks, so checking that many covers every pattern.
pub(crate) fn raid10_lost(engine: &Engine) -> bool {
    if engine.failed_count() == 0 {
        return false;
    }
    let chunk = u64::from(engine.geo.chunk_sectors());
    let period = u64::from(engine.geo.raid_disks()) * u64::from(engine.geo.copies_count());
    let chunks = (engine.geo.array_sectors() / chunk.max(1)).min(period);
    (0..chunks).any(|c| {
        let copies = engine.geo.copies(c * chunk);
        !copies.as_slice().iter().any(|p| engine.is_live(p.member))
    })
}
