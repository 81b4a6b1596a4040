//! Rows whose data nobody knows: a data member died with the power while a write
//! covered its rows, and the write also changed what parity counts there in another
//! way (another chunk of the same write, or an earlier write not yet durable). The
//! replay works such rows out from parity as the cut left it, and that may be neither
//! the old data nor the new: parity may hold one write and the surviving chunk the
//! other (see `ppl`'s replay). Parity defines a value for the rows, and the array keeps
//! it consistent (so the member's rows rebuild as that value and every other member's
//! rows stay rebuildable), but a client never gets it: reads fail (`Unreadable`) —
//! loss beyond the redundancy, reported as such — until a client write covers the
//! rows again.
//!
//! The rows are kept per stripe and role, in the log's state, and named on the rings'
//! markers (see `ppl`'s `FLAG_UNKNOWN_ROWS`), so that they outlive a restart.

use xraid_layout::MemberIdx;

use crate::Engine;

/// Bands of rows (sorted, apart) per (stripe, role).
pub(crate) type UnknownRows = std::collections::BTreeMap<(u64, u16), Vec<(u32, u32)>>;

fn rows(engine: &Engine) -> Option<&UnknownRows> {
    engine
        .log
        .as_ref()
        .map(|l| &l.unknown_rows)
        .filter(|r| !r.is_empty())
}

/// Rows lo..hi of role `member` in `stripe` hold what parity says, which may never
/// have been written.
pub(crate) fn add(engine: &mut Engine, stripe: u64, member: MemberIdx, lo: u32, hi: u32) {
    if let Some(log) = engine.log.as_mut() {
        let bands = log
            .unknown_rows
            .entry((stripe, member.index() as u16))
            .or_default();
        crate::ppl::add_band(bands, lo, hi);
    }
}

/// Rows lo..hi of role `member` in `stripe` are known again: a write covered them.
pub(crate) fn known_again(engine: &mut Engine, stripe: u64, member: MemberIdx, lo: u32, hi: u32) {
    let Some(log) = engine.log.as_mut() else {
        return;
    };
    let key = (stripe, member.index() as u16);
    if let Some(bands) = log.unknown_rows.get_mut(&key) {
        crate::ppl::remove_band(bands, lo, hi);
        if bands.is_empty() {
            log.unknown_rows.remove(&key);
        }
    }
}

/// Whether any of rows lo..hi of role `member` in `stripe` are unknown.
pub(crate) fn any_in(engine: &Engine, stripe: u64, member: MemberIdx, lo: u32, hi: u32) -> bool {
    rows(engine)
        .and_then(|r| r.get(&(stripe, member.index() as u16)))
        .is_some_and(|bands| bands.iter().any(|&(a, b)| a < hi && lo < b))
}

/// Every unknown band: (stripe, role, lo, hi), in stripe order.
pub(crate) fn all(engine: &Engine) -> Vec<(u64, u16, u32, u32)> {
    rows(engine)
        .map(|r| {
            r.iter()
                .flat_map(|(&(stripe, m), bands)| {
                    bands.iter().map(move |&(a, b)| (stripe, m, a, b))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EngineConfig, MemberState};
    use xraid_layout::{Geometry, Layout, Level};

    fn logged_engine() -> Engine {
        let geo = Geometry::new(Level::Raid5, Layout::default_for(Level::Raid5), 4, 16, 1024)
            .expect("geometry");
        let mut engine = Engine::new(geo, vec![MemberState::Active; 4]);
        engine.set_config(EngineConfig {
            log_sectors: 256,
            ..EngineConfig::default()
        });
        engine
    }

    #[test]
    fn bands_add_merge_and_clear_per_stripe_and_role() {
        let mut e = logged_engine();
        let m = MemberIdx(2);
        add(&mut e, 3, m, 0, 8);
        add(&mut e, 3, m, 8, 12);
        add(&mut e, 4, m, 0, 4);
        assert!(any_in(&e, 3, m, 11, 16));
        assert!(!any_in(&e, 3, m, 12, 16));
        assert!(!any_in(&e, 3, MemberIdx(1), 0, 16));
        assert_eq!(all(&e), vec![(3, 2, 0, 12), (4, 2, 0, 4)]);
        known_again(&mut e, 3, m, 2, 6);
        assert_eq!(all(&e), vec![(3, 2, 0, 2), (3, 2, 6, 12), (4, 2, 0, 4)]);
        known_again(&mut e, 4, m, 0, 16);
        known_again(&mut e, 3, m, 0, 16);
        assert!(all(&e).is_empty());
    }
}
