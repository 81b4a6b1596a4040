//! Which parts of an array surely read as zeros: those whose every copy a read could
//! come from lies in a hole of its member (a sparse member never written there, or a
//! range a trim freed). NBD's `base:allocation` context answers from it.
//!
//! The answer errs towards data: a member that cannot tell holes, a member missing or
//! being rebuilt where a read would need it, count as data.

use xraid_engine::{MemberState, SECTOR_BYTES};
use xraid_layout::{Copies, Level};

use crate::ArrayDriver;

/// Array sectors looked at in one call at most (128 MiB): each chunk costs a few
/// `lseek`s per copy, and the caller (a block-status request) may ask again.
const MAX_LOOKUP_SECTORS: u64 = 128 << 11;

/// A run of array sectors that surely reads as zeros (`zero`), or may hold data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocationRun {
    pub sectors: u64,
    pub zero: bool,
}

impl ArrayDriver {
    /// Describes the array's sectors from `sector` on, up to `sectors` of them (and at
    /// most [`MAX_LOOKUP_SECTORS`] or `max_runs` runs, whichever ends first), as runs of
    /// sectors that surely read as zeros and runs that may hold data. The runs are
    /// contiguous from `sector` and cover at least one sector when `sectors > 0`.
    pub fn allocation(&self, sector: u64, sectors: u64, max_runs: usize) -> Vec<AllocationRun> {
        let geo = *self.engine.geometry();
        let end = sector
            .saturating_add(sectors.min(MAX_LOOKUP_SECTORS))
            .min(geo.array_sectors());
        let mut runs: Vec<AllocationRun> = Vec::new();
        let mut at = sector;
        while at < end {
            let copies = geo.copies(at);
            let n = copies.run_sectors.min(end - at);
            for run in self.piece_allocation(&copies, n) {
                let full = runs.len() == max_runs.max(1);
                match runs.last_mut() {
                    Some(last) if last.zero == run.zero => last.sectors += run.sectors,
                    _ if full => return runs,
                    _ => runs.push(run),
                }
            }
            at += n;
        }
        runs
    }

    /// Runs for `sectors` array sectors whose copies are `copies` (contiguous on each).
    fn piece_allocation(&self, copies: &Copies, sectors: u64) -> Vec<AllocationRun> {
        let mirrored = matches!(self.engine.geometry().level(), Level::Raid1 | Level::Raid10);
        let states = self.engine.member_states();
        let mut data: Vec<(u64, u64)> = Vec::new();
        let mut any_active = false;
        for place in copies.as_slice() {
            let state = states[place.member.index()];
            let slot = self.member(place.member);
            match (state, slot) {
                // A read never goes to a failed copy; one of the others must serve it.
                (MemberState::Failed, _) | (_, None) if mirrored => continue,
                (MemberState::Active, Some(slot)) => {
                    any_active = true;
                    let base = slot.data_offset_bytes + place.sector * SECTOR_BYTES;
                    let length = sectors * SECTOR_BYTES;
                    for r in slot.member.data_ranges(base, length) {
                        let start = r.start.saturating_sub(base) / SECTOR_BYTES;
                        let stop = (r.end.saturating_sub(base)).div_ceil(SECTOR_BYTES);
                        data.push((start.min(sectors), stop.min(sectors)));
                    }
                }
                // The only copy missing, or being rebuilt (reads of what is rebuilt
                // already may go to it, so it would have to be a hole too; its holes
                // say nothing where it is not rebuilt yet): counted as data.
                _ => data.push((0, sectors)),
            }
        }
        if !any_active {
            data.push((0, sectors));
        }
        complement_runs(data, sectors)
    }
}

/// Runs over `0..sectors`: data where any of `data` (ranges, unsorted, overlapping)
/// lies, zero elsewhere.
fn complement_runs(mut data: Vec<(u64, u64)>, sectors: u64) -> Vec<AllocationRun> {
    data.retain(|&(s, e)| s < e);
    data.sort_unstable();
    let mut runs = Vec::new();
    let mut at = 0;
    for (start, stop) in data {
        if start > at {
            runs.push(AllocationRun {
                sectors: start - at,
                zero: true,
            });
            at = start;
        }
        if stop > at {
            match runs.last_mut() {
                Some(last) if !last.zero => last.sectors += stop - at,
                _ => runs.push(AllocationRun {
                    sectors: stop - at,
                    zero: false,
                }),
            }
            at = stop;
        }
    }
    if at < sectors {
        runs.push(AllocationRun {
            sectors: sectors - at,
            zero: true,
        });
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(sectors: u64, zero: bool) -> AllocationRun {
        AllocationRun { sectors, zero }
    }

    #[test]
    fn the_complement_of_overlapping_data_ranges() {
        assert_eq!(complement_runs(vec![], 8), vec![run(8, true)]);
        assert_eq!(complement_runs(vec![(0, 8)], 8), vec![run(8, false)]);
        assert_eq!(
            complement_runs(vec![(5, 7), (2, 3), (2, 4)], 10),
            vec![
                run(2, true),
                run(2, false),
                run(1, true),
                run(2, false),
                run(3, true)
            ]
        );
        assert_eq!(
            complement_runs(vec![(0, 4), (3, 10)], 10),
            vec![run(10, false)]
        );
    }
}
