//! The seek-time curve: short seeks `a + b·√d`, long seeks `c + e·d` (d in cylinders),
//! fitted to a spec sheet's track-to-track, average and full-stroke figures.
//!
//! How the fit works (and why): three figures cannot fix four constants and a
//! boundary, so one more rule is needed. For every boundary `d0` (short seeks are
//! `d <= d0`), four linear conditions fix `a, b, c, e`:
//! 1. `f(1)` = track-to-track;
//! 2. `f(D)` = full stroke, `D` = cylinders − 1;
//! 3. the two pieces meet at `d0` (no jump);
//! 4. the mean of `f` over all seeks between two uniformly chosen distinct cylinders
//!    (distance `d` has weight `C − d`) = average — the definition spec sheets use.
//!
//! Of the boundaries whose curve rises and is concave (`b > 0`, `e ≥ 0`, the long
//! piece no steeper than the short one where they meet: an arm that accelerates and
//! then coasts never spends more time per extra cylinder on a longer seek), the fit
//! keeps the one where the two slopes differ least. Where the figures allow a smooth
//! curve this finds it; where they are more concave than any smooth one, it finds the
//! mildest corner. Figures no rising concave curve of this form can meet (an average
//! too close to the track-to-track figure) are refused.
//!
//! The figures include settling, as spec sheets quote them; writes add
//! `write_settle_extra` on top (see [`crate::DiskParams`]).

use xraid_engine::Nanos;

/// Constants of a fitted curve, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeekCurve {
    pub a: f64,
    pub b: f64,
    pub c: f64,
    pub e: f64,
    /// Longest distance served by the square-root piece.
    pub boundary: u32,
}

/// Why figures cannot be fitted.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum SeekFitError {
    /// The figures must rise: track-to-track < average < full stroke.
    #[error("seek figures must rise: track-to-track {t1_ms} ms < average {avg_ms} ms < full stroke {full_ms} ms")]
    NotRising {
        t1_ms: f64,
        avg_ms: f64,
        full_ms: f64,
    },
    /// A curve needs at least three distances.
    #[error("a seek curve needs at least 4 cylinders, the format has {cylinders}")]
    TooFewCylinders { cylinders: u32 },
    /// No rising curve of the form meets the figures.
    #[error("no seek curve a+b*sqrt(d) / c+e*d rises from {t1_ms} ms to {full_ms} ms with a mean of {avg_ms} ms over {cylinders} cylinders; check the average seek figure")]
    NoFit {
        t1_ms: f64,
        avg_ms: f64,
        full_ms: f64,
        cylinders: u32,
    },
}

fn ms(n: Nanos) -> f64 {
    n.0 as f64 / 1e6
}

impl SeekCurve {
    /// Fits the curve to the three figures for a disk of `cylinders` cylinders.
    pub fn fit(
        cylinders: u32,
        t1: Nanos,
        avg: Nanos,
        full: Nanos,
    ) -> Result<SeekCurve, SeekFitError> {
        let (t1f, avgf, fullf) = (t1.0 as f64, avg.0 as f64, full.0 as f64);
        if !(t1f < avgf && avgf < fullf) {
            return Err(SeekFitError::NotRising {
                t1_ms: ms(t1),
                avg_ms: ms(avg),
                full_ms: ms(full),
            });
        }
        if cylinders < 4 {
            return Err(SeekFitError::TooFewCylinders { cylinders });
        }
        let c_cyl = f64::from(cylinders);
        let dmax = cylinders - 1;
        // Prefix sums over d = 1..=k of the weight w, w·√d and w·d.
        let n = dmax as usize;
        let (mut w, mut s, mut l) = (vec![0.0; n + 1], vec![0.0; n + 1], vec![0.0; n + 1]);
        for d in 1..=n {
            let df = d as f64;
            let wd = c_cyl - df;
            w[d] = w[d - 1] + wd;
            s[d] = s[d - 1] + wd * df.sqrt();
            l[d] = l[d - 1] + wd * df;
        }
        let (wt, lt, df_max) = (w[n], l[n], f64::from(dmax));
        let mut best: Option<(f64, SeekCurve)> = None;
        for d0 in 1..dmax {
            let k = d0 as usize;
            let r0 = f64::from(d0).sqrt();
            // With a = t1 - b and c = full - e·D, conditions 3 and 4 are linear in b, e:
            //   b(√d0 − 1) + e(D − d0) = full − t1
            //   b(S0 − W0) + e((Lt − L0) − D(Wt − W0)) = avg·Wt − t1·W0 − full·(Wt − W0)
            let (p1, q1, r1) = (r0 - 1.0, df_max - f64::from(d0), fullf - t1f);
            let (p2, q2) = (s[k] - w[k], (lt - l[k]) - df_max * (wt - w[k]));
            let r2 = avgf * wt - t1f * w[k] - fullf * (wt - w[k]);
            let det = p1 * q2 - p2 * q1;
            if det.abs() < 1e-12 {
                continue;
            }
            let b = (r1 * q2 - r2 * q1) / det;
            let e = (p1 * r2 - p2 * r1) / det;
            // Concave: the long piece may not climb faster than the short one ends.
            let kink = b / (2.0 * r0) - e;
            if !(b > 0.0 && e >= 0.0 && kink >= -1e-9 * e) {
                continue;
            }
            if best.is_none_or(|(k0, _)| kink < k0) {
                let curve = SeekCurve {
                    a: t1f - b,
                    b,
                    c: fullf - e * df_max,
                    e,
                    boundary: d0,
                };
                best = Some((kink, curve));
            }
        }
        best.map(|(_, c)| c).ok_or(SeekFitError::NoFit {
            t1_ms: ms(t1),
            avg_ms: ms(avg),
            full_ms: ms(full),
            cylinders,
        })
    }

    /// Time to seek `d` cylinders (0 for none).
    pub fn time(&self, d: u32) -> Nanos {
        if d == 0 {
            return Nanos(0);
        }
        let t = if d <= self.boundary {
            self.a + self.b * f64::from(d).sqrt()
        } else {
            self.c + self.e * f64::from(d)
        };
        // The fit keeps every value positive (it rises from the track-to-track time).
        Nanos(t.round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_over_random_seeks(curve: &SeekCurve, cylinders: u32) -> f64 {
        let (mut sum, mut weight) = (0.0, 0.0);
        for d in 1..cylinders {
            let w = f64::from(cylinders - d);
            sum += w * curve.time(d).0 as f64;
            weight += w;
        }
        sum / weight
    }

    fn check(cylinders: u32, t1: u64, avg: u64, full: u64) {
        let curve = SeekCurve::fit(cylinders, Nanos(t1), Nanos(avg), Nanos(full))
            .unwrap_or_else(|e| panic!("{e}"));
        // Within rounding of the figures.
        assert!(curve.time(1).0.abs_diff(t1) <= 1);
        assert!(curve.time(cylinders - 1).0.abs_diff(full) <= 1);
        let mean = mean_over_random_seeks(&curve, cylinders);
        assert!((mean - avg as f64).abs() < 2.0, "mean {mean} vs {avg}");
        // Rising everywhere.
        let mut last = 0;
        for d in 1..cylinders {
            let t = curve.time(d).0;
            assert!(t >= last, "falls at {d}");
            last = t;
        }
    }

    #[test]
    fn fits_figures_of_several_eras() {
        // IBM 0661-467 read figures (1, 11, 20 ms) on 1199 cylinders: very concave.
        check(1199, 1_000_000, 11_000_000, 20_000_000);
        // A late-1990s 7200 rpm drive: 1, 8, 17 ms on 10,000 cylinders.
        check(10_000, 1_000_000, 8_000_000, 17_000_000);
        // An almost linear arm.
        check(600, 4_000_000, 15_000_000, 35_000_000);
    }

    #[test]
    fn smooth_when_the_figures_allow() {
        let curve = SeekCurve::fit(
            10_000,
            Nanos(1_000_000),
            Nanos(8_000_000),
            Nanos(17_000_000),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let slope_short = curve.b / (2.0 * f64::from(curve.boundary).sqrt());
        assert!((slope_short - curve.e).abs() / curve.e < 0.05);
    }

    #[test]
    fn refuses_figures_that_do_not_rise_or_cannot_fit() {
        let r = SeekCurve::fit(1000, Nanos(5), Nanos(4), Nanos(10));
        assert!(matches!(r, Err(SeekFitError::NotRising { .. })));
        let r = SeekCurve::fit(3, Nanos(1), Nanos(2), Nanos(3));
        assert!(matches!(r, Err(SeekFitError::TooFewCylinders { .. })));
        // An average right next to track-to-track needs a convex curve.
        let r = SeekCurve::fit(1000, Nanos(1_000_000), Nanos(1_100_000), Nanos(20_000_000));
        assert!(matches!(r, Err(SeekFitError::NoFit { .. })));
        // One just above a straight line's mean (t1 + (full - t1) / 3) fits.
        assert!(
            SeekCurve::fit(1000, Nanos(1_000_000), Nanos(7_500_000), Nanos(20_000_000)).is_ok()
        );
    }
}
