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
//! The rows are kept per stripe and role in the log's state, and named on the rings'
//! markers (see `ppl`'s `FLAG_UNKNOWN_ROWS`), so that they outlive a restart. A write
//! over them makes them known to reads at once, and to the markers only once a flush
//! that began after it has completed: until then a cut may undo it. Where the markers
//! have no room left, the rows they cannot name are kept as a *span*, every row of a
//! role in a range of stripes (see `ppl`'s `FLAG_UNKNOWN_SPAN`): more than was lost,
//! but never less.

use std::collections::BTreeMap;

use xraid_layout::{Geometry, MemberIdx, StripeRole};

use crate::Engine;

/// The unknown rows of an array.
#[derive(Debug, Default, Clone)]
pub(crate) struct Unknown {
    /// Bands of rows (sorted, apart) per (stripe, role).
    bands: BTreeMap<(u64, u16), Vec<(u32, u32)>>,
    /// Whole rows of a role over a range of stripes: (role, first stripe) to the last.
    spans: BTreeMap<(u16, u64), u64>,
    /// Rows a client write made known, which the markers still name until a flush
    /// that began after the write (a round above the first field) has completed.
    written: Vec<(u64, u64, u16, u32, u32)>,
}

impl Unknown {
    fn is_empty(&self) -> bool {
        self.bands.is_empty() && self.spans.is_empty() && self.written.is_empty()
    }

    /// The span of `role` holding `stripe`, if any: its first stripe.
    fn span_at(&self, role: u16, stripe: u64) -> Option<u64> {
        self.spans
            .range(..=(role, stripe))
            .next_back()
            .filter(|(&(r, _), &last)| r == role && stripe <= last)
            .map(|(&(_, first), _)| first)
    }

    /// Takes `stripe` out of the span of `role` that holds it, as a whole-rows band.
    fn break_span(&mut self, role: u16, stripe: u64, chunk: u32) {
        let Some(first) = self.span_at(role, stripe) else {
            return;
        };
        let last = self.spans.remove(&(role, first)).unwrap_or(first);
        if first < stripe {
            self.spans.insert((role, first), stripe - 1);
        }
        if stripe < last {
            self.spans.insert((role, stripe + 1), last);
        }
        crate::ppl::add_band(self.bands.entry((stripe, role)).or_default(), 0, chunk);
    }

    fn remove(&mut self, stripe: u64, role: u16, lo: u32, hi: u32) {
        if let Some(bands) = self.bands.get_mut(&(stripe, role)) {
            crate::ppl::remove_band(bands, lo, hi);
            if bands.is_empty() {
                self.bands.remove(&(stripe, role));
            }
        }
    }
}

/// Whether `role` holds a data chunk (not parity) in `stripe`.
fn holds_data(geo: &Geometry, role: u16, stripe: u64) -> bool {
    matches!(
        geo.stripe_map(stripe).role_of(MemberIdx(role)),
        StripeRole::Data(_)
    )
}

fn state(engine: &Engine) -> Option<&Unknown> {
    engine
        .log
        .as_ref()
        .map(|l| &l.unknown)
        .filter(|u| !u.is_empty())
}

/// Whether any rows are unknown (or were, to the markers).
pub(crate) fn any(engine: &Engine) -> bool {
    state(engine).is_some()
}

/// Rows lo..hi of role `member` in `stripe` hold what parity says, which may never
/// have been written.
pub(crate) fn add(engine: &mut Engine, stripe: u64, member: MemberIdx, lo: u32, hi: u32) {
    if let Some(log) = engine.log.as_mut() {
        let role = member.index() as u16;
        crate::ppl::add_band(log.unknown.bands.entry((stripe, role)).or_default(), lo, hi);
    }
}

/// Every row of `role` in stripes first..=last is unknown (a marker's span).
pub(crate) fn add_span(engine: &mut Engine, role: u16, first: u64, last: u64) {
    if let Some(log) = engine.log.as_mut() {
        let span = log.unknown.spans.entry((role, first)).or_insert(last);
        *span = (*span).max(last);
    }
}

/// Rows lo..hi of role `member` in `stripe` are known again, durably: the replay
/// wrote what an entry carried there.
pub(crate) fn known_again(engine: &mut Engine, stripe: u64, member: MemberIdx, lo: u32, hi: u32) {
    let chunk = engine.geo.chunk_sectors();
    if let Some(log) = engine.log.as_mut() {
        let role = member.index() as u16;
        log.unknown.break_span(role, stripe, chunk);
        log.unknown.remove(stripe, role, lo, hi);
    }
}

/// A client write covered rows lo..hi of role `member` in `stripe`: reads get them
/// now; the markers name them until a flush that began after it has completed
/// (`flush_round` is the number of the last flush round begun).
pub(crate) fn written_over(
    engine: &mut Engine,
    stripe: u64,
    member: MemberIdx,
    lo: u32,
    hi: u32,
    flush_round: u64,
) {
    let chunk = engine.geo.chunk_sectors();
    let role = member.index() as u16;
    let Some(u) = engine.log.as_mut().map(|l| &mut l.unknown) else {
        return;
    };
    u.break_span(role, stripe, chunk);
    let Some(bands) = u.bands.get(&(stripe, role)) else {
        return;
    };
    let covered: Vec<(u32, u32)> = bands
        .iter()
        .map(|&(a, b)| (a.max(lo), b.min(hi)))
        .filter(|&(a, b)| a < b)
        .collect();
    for &(a, b) in &covered {
        u.written.push((flush_round, stripe, role, a, b));
    }
    u.remove(stripe, role, lo, hi);
}

/// Flush round `round` completed: writes made before it began are durable, and the
/// markers may stop naming their rows. Returns whether any were.
pub(crate) fn flush_round_done(unknown: &mut Unknown, round: u64) -> bool {
    let before = unknown.written.len();
    unknown.written.retain(|&(after, ..)| after >= round);
    unknown.written.len() != before
}

/// Whether any of rows lo..hi of role `member` in `stripe` are unknown.
pub(crate) fn any_in(engine: &Engine, stripe: u64, member: MemberIdx, lo: u32, hi: u32) -> bool {
    let Some(u) = state(engine) else {
        return false;
    };
    let role = member.index() as u16;
    u.span_at(role, stripe).is_some()
        || u.bands
            .get(&(stripe, role))
            .is_some_and(|bands| bands.iter().any(|&(a, b)| a < hi && lo < b))
}

/// Every unknown band the markers name: (stripe, role, lo, hi), in stripe order —
/// those reads see and those written over since the last flush.
pub(crate) fn named(engine: &Engine) -> Vec<(u64, u16, u32, u32)> {
    state(engine).map_or_else(Vec::new, named_in)
}

/// [`named`] of the rows `u` holds.
fn named_in(u: &Unknown) -> Vec<(u64, u16, u32, u32)> {
    let mut bands: BTreeMap<(u64, u16), Vec<(u32, u32)>> = u.bands.clone();
    for &(_, stripe, role, lo, hi) in &u.written {
        crate::ppl::add_band(bands.entry((stripe, role)).or_default(), lo, hi);
    }
    bands
        .into_iter()
        .flat_map(|((stripe, role), bands)| {
            bands.into_iter().map(move |(a, b)| (stripe, role, a, b))
        })
        .collect()
}

/// One of the markers' records of unknown rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    /// Rows lo..hi of `role` in `stripe`.
    Band {
        stripe: u64,
        role: u16,
        lo: u32,
        hi: u32,
    },
    /// Every row of `role` in stripes first..=last.
    Span { role: u16, first: u64, last: u64 },
}

impl Named {
    fn role(&self) -> u16 {
        match *self {
            Named::Band { role, .. } | Named::Span { role, .. } => role,
        }
    }

    fn stripes(&self) -> (u64, u64) {
        match *self {
            Named::Band { stripe, .. } => (stripe, stripe),
            Named::Span { first, last, .. } => (first, last),
        }
    }
}

/// The markers' records of the unknown rows, at most `room` of them where they fit
/// at all (one per role always does): bands and spans as held, and past the room,
/// neighbours of one role merged into spans, those that take in the fewest rows
/// known first — none where the rows between are another band's or parity's. More
/// than was lost, never less: with the sectors known rows the merges took in.
pub(crate) fn records(engine: &Engine, room: usize) -> (Vec<Named>, u64) {
    match state(engine) {
        Some(u) => records_of(u, &engine.geo, room),
        None => (Vec::new(), 0),
    }
}

/// [`records`] of the rows `u` holds, on geometry `geo`.
fn records_of(u: &Unknown, geo: &Geometry, room: usize) -> (Vec<Named>, u64) {
    let geo = *geo;
    let chunk = u64::from(geo.chunk_sectors());
    let mut items: Vec<Named> = named_in(u)
        .into_iter()
        .map(|(stripe, role, lo, hi)| Named::Band {
            stripe,
            role,
            lo,
            hi,
        })
        .filter(|b| u.span_at(b.role(), b.stripes().0).is_none())
        .chain(
            u.spans
                .iter()
                .map(|(&(role, first), &last)| Named::Span { role, first, last }),
        )
        .collect();
    items.sort_by_key(|n| (n.role(), n.stripes()));
    // Rows of `role` a span from `a` to `b` would take in that neither holds.
    let cost = |a: &Named, b: &Named| -> u64 {
        let data_stripes = |from: u64, to: u64| -> u64 {
            // A long gap costs what it spans; its parity stripes are not worth a walk.
            if to.saturating_sub(from) > 4096 {
                return (to - from) * chunk;
            }
            (from..to)
                .filter(|&s| holds_data(&geo, a.role(), s))
                .count() as u64
                * chunk
        };
        let partial = |n: &Named| match *n {
            Named::Band { lo, hi, .. } => chunk - u64::from(hi - lo),
            Named::Span { .. } => 0,
        };
        let gap = data_stripes(a.stripes().1 + 1, b.stripes().0);
        gap + partial(a) + partial(b)
    };
    let mut taken_in = 0;
    while items.len() > room {
        let best = items
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[0].role() == w[1].role())
            .map(|(k, w)| (cost(&w[0], &w[1]), k))
            .min();
        let Some((c, k)) = best else {
            break;
        };
        taken_in += c;
        let (first, last) = (items[k].stripes().0, items[k + 1].stripes().1);
        items[k] = Named::Span {
            role: items[k].role(),
            first,
            last,
        };
        items.remove(k + 1);
    }
    (items, taken_in)
}

/// Whether a client write over `rows` (role, lo, hi) of `stripe` would, once durable,
/// leave the unknown rows in more bands than the markers' `room` names without
/// taking in rows known — rows clients wrote, which would then read as lost after a
/// restart: a write strictly inside a band splits it in two, one inside a span
/// splits the span. Such a write is refused instead (`UnknownRowsFull`), so that no
/// acknowledged write is lost to the markers; a write over whole bands is taken.
pub(crate) fn write_outgrows_markers(
    engine: &Engine,
    stripe: u64,
    rows: &[(MemberIdx, u32, u32)],
    room: usize,
) -> bool {
    let Some(u) = state(engine) else {
        return false;
    };
    if !rows
        .iter()
        .any(|&(m, lo, hi)| any_in(engine, stripe, m, lo, hi))
    {
        return false;
    }
    let chunk = engine.geo.chunk_sectors();
    // As the markers will stand once the writes made since the last flush are
    // durable: without them, and then without this write's rows too.
    let mut before = u.clone();
    before.written.clear();
    let mut after = before.clone();
    for &(m, lo, hi) in rows {
        let role = m.index() as u16;
        after.break_span(role, stripe, chunk);
        after.remove(stripe, role, lo, hi);
    }
    let (_, taken_before) = records_of(&before, &engine.geo, room);
    let (_, taken_after) = records_of(&after, &engine.geo, room);
    taken_after > taken_before
}

/// Sectors of data reads cannot get (see [`Engine::unknown_sectors`]).
pub(crate) fn sectors(engine: &Engine) -> u64 {
    let Some(u) = state(engine) else {
        return 0;
    };
    let chunk = u64::from(engine.geo.chunk_sectors());
    let bands: u64 = u
        .bands
        .iter()
        .filter(|(&(stripe, role), _)| u.span_at(role, stripe).is_none())
        .flat_map(|(_, bands)| bands)
        .map(|&(a, b)| u64::from(b - a))
        .sum();
    // A span's stripes where its role holds parity hold no data to lose.
    let spans: u64 = u
        .spans
        .iter()
        .map(|(&(role, first), &last)| {
            (first..=last)
                .filter(|&s| holds_data(&engine.geo, role, s))
                .count() as u64
                * chunk
        })
        .sum();
    bands + spans
}

/// Forgets every unknown row (a scan about to restore them from the markers).
pub(crate) fn clear(unknown: &mut Unknown) {
    *unknown = Unknown::default();
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
        assert_eq!(named(&e), vec![(3, 2, 0, 12), (4, 2, 0, 4)]);
        known_again(&mut e, 3, m, 2, 6);
        assert_eq!(named(&e), vec![(3, 2, 0, 2), (3, 2, 6, 12), (4, 2, 0, 4)]);
        known_again(&mut e, 4, m, 0, 16);
        known_again(&mut e, 3, m, 0, 16);
        assert!(named(&e).is_empty());
        assert_eq!(sectors(&e), 0);
    }

    #[test]
    fn rows_written_over_stay_named_until_a_later_flush_round_completes() {
        let mut e = logged_engine();
        let m = MemberIdx(1);
        add(&mut e, 5, m, 0, 16);
        written_over(&mut e, 5, m, 4, 8, 7);
        assert!(
            !any_in(&e, 5, m, 4, 8),
            "reads get the written rows at once"
        );
        assert_eq!(
            named(&e),
            vec![(5, 1, 0, 16)],
            "the markers still name them"
        );
        let u = &mut e.log.as_mut().expect("log").unknown;
        assert!(!flush_round_done(u, 7), "a round begun before the write");
        assert!(flush_round_done(u, 8));
        assert_eq!(named(&e), vec![(5, 1, 0, 4), (5, 1, 8, 16)]);
    }

    #[test]
    fn a_span_breaks_where_rows_are_written() {
        let mut e = logged_engine();
        let m = MemberIdx(3);
        add_span(&mut e, 3, 10, 20);
        assert!(any_in(&e, 10, m, 0, 1) && any_in(&e, 20, m, 15, 16));
        assert!(!any_in(&e, 21, m, 0, 16) && !any_in(&e, 9, m, 0, 16));
        // Role 3 holds P in one stripe of four (4 members): 8 of the 11 hold data.
        let data_stripes = (10..=20u64)
            .filter(|&s| e.geometry().stripe_map(s).p() != m)
            .count() as u64;
        assert_eq!(sectors(&e), data_stripes * 16);
        written_over(&mut e, 15, m, 0, 16, 0);
        assert!(!any_in(&e, 15, m, 0, 16));
        assert!(any_in(&e, 14, m, 0, 16) && any_in(&e, 16, m, 0, 16));
        assert_eq!(
            records(&e, 26).0,
            vec![
                Named::Span {
                    role: 3,
                    first: 10,
                    last: 14
                },
                Named::Band {
                    stripe: 15,
                    role: 3,
                    lo: 0,
                    hi: 16
                },
                Named::Span {
                    role: 3,
                    first: 16,
                    last: 20
                },
            ],
            "written over, the band stays named until a flush"
        );
    }

    #[test]
    fn past_the_room_neighbours_merge_where_they_take_in_least() {
        let mut e = logged_engine();
        // Role 1 holds data in every stripe but one in four (4 members, RAID-5).
        let m = MemberIdx(1);
        let data: Vec<u64> = (0..40u64)
            .filter(|&s| e.geometry().stripe_map(s).p() != m)
            .collect();
        for &s in &data[..6] {
            add(&mut e, s, m, 0, 16);
        }
        add(&mut e, data[20], m, 4, 8);
        assert_eq!(records(&e, 26), (records(&e, 26).0, 0));
        assert_eq!(records(&e, 26).0.len(), 7, "room for all");
        let (three, taken_in) = records(&e, 3);
        assert_eq!(taken_in, 0, "only parity between the six");
        assert_eq!(three.len(), 3);
        // The six whole-chunk bands in a row merge first (only parity between them),
        // the partial band far off stays a band.
        assert!(three.contains(&Named::Band {
            stripe: data[20],
            role: 1,
            lo: 4,
            hi: 8
        }));
        let (one, taken_in) = records(&e, 1);
        assert!(taken_in > 0);
        assert_eq!(
            one,
            vec![Named::Span {
                role: 1,
                first: data[0],
                last: data[20]
            }]
        );
        // One role, one record at least, whatever the room.
        assert_eq!(records(&e, 0).0.len(), 1);
    }
}
