//! The timeout advisor: the session timeout that keeps false expulsions under a stated
//! rate, and only as far as the group's gaps support it.
//!
//! A member is expelled for silence when one gap between its heartbeats exceeds the
//! timeout, so the false-expulsion rate is the rate of such gaps: for a target of `r`
//! a year across `n` members beating every `m` (the group's median gap), a gap may
//! exceed the timeout with probability `q = r / (n × year / m)`. What the advisor claims
//! about `q` rests on the group's pooled gaps ([`DetectionSummary`], DescribeGroup
//! version 3), never on one member's percentiles:
//!
//! - **No advice below a minimum of history**: [`MIN_POOLED_GAPS`] pooled gaps over
//!   [`MIN_SPAN`]. Twenty members beating every 100 ms for 18 s give 3,580 gaps of one
//!   quiet moment; they say nothing of the pauses of an hour.
//! - **Observed**: the shortest length `t` whose Clopper–Pearson upper bound (95 %) on
//!   the chance that a gap exceeds it, `k(t)` of `n` gaps, is at most `q`. It is
//!   distribution-free (the order-statistic bound, Hahn & Meeker) and exists only where
//!   `q` is at least `1 − 0.05^(1/n)`, about `3/n`: fewer gaps, a wider bound.
//! - **Tail**: past that, a generalised Pareto fit of the gaps above the long-gap
//!   threshold, only with [`MIN_EXCEEDANCES`] of them, with the upper bounds of its rate
//!   and shape (ξ never below 0: never lighter than exponential), only past the longest
//!   gap seen, never more than [`MAX_EXTRAPOLATION`] below the bound of no gap at all,
//!   and not at all once ξ̂ ≥ ½. Capped at [`CAP`], above which the advisor says plainly
//!   that no timeout keeps the rate.
//! - **Lost beats**, which the gaps counted leave out, are bounded with Gilbert's model
//!   and added to every bound.
//! - **Pause floor**: otherwise no promise below `3/n`, and always a timeout of at
//!   least `max(h × longest, median + pause floor)`: a pause the group has not shown is
//!   not in its data, so the floor stands for it (3 s by default, Akka's
//!   `acceptable-heartbeat-pause`).
//!
//! The promise is the bound at the advised timeout times the beats a year: what the
//! data supports, stated with its gaps, span, confidence, basis and assumptions
//! (independent gaps, members of one rhythm, a representative record; pauses that hit
//! many members at once make the rate of expulsions per pause higher).

use std::time::{Duration, Instant};

use rollcall_protocol::{DetectionSummary, TailCount};

use super::fleet::{self, Fleet};
use super::tail::{self, Gpd};
use super::Arrivals;

/// Milliseconds in a year (365.25 days).
const YEAR_MS: f64 = 365.25 * 24.0 * 3600.0 * 1000.0;

/// Pooled gaps the advisor needs before it advises.
pub const MIN_POOLED_GAPS: u64 = 3_000;

/// The span of history the advisor needs before it advises.
pub const MIN_SPAN: Duration = Duration::from_secs(600);

/// Gaps above the long-gap threshold the tail fit needs.
pub const MIN_EXCEEDANCES: u64 = tail::MIN_EXCEEDANCES;

/// The longest timeout the advisor gives.
pub const CAP: Duration = Duration::from_secs(600);

/// The confidence of every bound the advisor states.
pub const CONFIDENCE: f64 = 0.95;

/// The headroom over the longest gap seen.
pub const HEADROOM: f64 = 1.15;

/// How far below the distribution-free bound of no gap at all (about `3/n`) the tail
/// fit may claim: one decade. A fit of a few dozen long gaps says something of the
/// next decade of rarity, not of seven.
pub const MAX_EXTRAPOLATION: f64 = 10.0;

/// The default pause floor: pauses the group has not shown.
pub const DEFAULT_PAUSE_FLOOR: Duration = Duration::from_secs(3);

/// The most lengths in a summary's ladder of tail counts ([`summarise`]): the
/// longest of those the fleet's histogram holds a count at, from its mean gap up (four
/// an octave), so that a member's description stays small in a frame.
pub const MAX_TAIL_COUNTS: usize = 16;

/// The most bytes the summary of a group's gaps takes in a DescribeGroup answer.
pub const MAX_SUMMARY_BYTES: usize = DetectionSummary::encoded_len_of(MAX_TAIL_COUNTS);

/// What the advice is asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    /// False expulsions a year across the group.
    pub per_year: f64,
    /// Members in the group.
    pub members: usize,
    /// The least the timeout exceeds the median gap by, for pauses the group has not
    /// shown.
    pub pause_floor: Duration,
}

/// The advisor's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Advice {
    /// Too little history to advise from.
    NotYet {
        /// Pooled gaps so far.
        gaps: u64,
        /// Over this long.
        span: Duration,
    },
    /// A timeout, and what the data supports about it.
    Timeout(Timeout),
}

/// What a timeout rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The gaps counted: the distribution-free bound reaches the target.
    Observed,
    /// The tail fit reaches the target.
    Tail,
    /// Nothing reaches the target (the target is rarer than the gaps, or the tail fit
    /// within a decade of them, can bound): the pause floor, with no promise below
    /// about `3/n` (a tenth of it with a fit).
    PauseFloor,
    /// The tail fit reaches the target only past [`CAP`], or its shape has no finite
    /// bound: the pause floor, with what the data supports there.
    Unreachable,
}

impl Basis {
    /// Snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Observed => "observed",
            Self::Tail => "tail",
            Self::PauseFloor => "pause_floor",
            Self::Unreachable => "unreachable",
        }
    }
}

/// An advised timeout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeout {
    /// The session timeout, ms, rounded up to 100 ms.
    pub timeout_ms: u64,
    /// What it rests on.
    pub basis: Basis,
    /// The chance per gap the target allows.
    pub allowed: f64,
    /// The upper bound ([`CONFIDENCE`]) on the chance that a gap exceeds the timeout.
    pub bound: f64,
    /// False expulsions a year across the group that the bound supports: `bound` times
    /// the beats a year. At most the target for `Observed` and `Tail`.
    pub promise_per_year: f64,
    /// The gaps the bound counts among.
    pub gaps: u64,
    /// Pooled gaps.
    pub pooled: u64,
    /// Over this long.
    pub span: Duration,
    /// The longest gap seen, ms.
    pub longest_ms: u64,
    /// The floor for pauses the group has not shown, ms: `median + pause floor`.
    pub pause_floor_ms: u64,
    /// Whether the pause floor set the timeout (above what the basis needs).
    pub floored: bool,
    /// The upper bound on the tail's shape ξ, with a fit (infinite when ξ̂ ≥ ½: no
    /// finite bound).
    pub shape_upper: Option<f64>,
}

/// The session timeout for `target` from the group's pooled gaps `s`.
pub fn advise(s: &DetectionSummary, target: &Target) -> Advice {
    let span = Duration::from_millis(s.span_ms);
    let sensible = target.per_year.is_finite() && target.per_year > 0.0 && target.members > 0;
    if s.pooled_gaps < MIN_POOLED_GAPS || span < MIN_SPAN || s.gap_median_ms == 0 || !sensible {
        return Advice::NotYet {
            gaps: s.pooled_gaps,
            span,
        };
    }
    let unit = f64::from(s.gap_median_ms);
    let beats_per_year = target.members as f64 * YEAR_MS / unit;
    let q = target.per_year / beats_per_year;
    let n = if s.tail_gaps > 0 {
        s.tail_gaps
    } else {
        s.pooled_gaps
    };
    // Normalised lengths (multiples of the median gap) from here to the timeout.
    let longest = (f64::from(s.longest_centi) / 100.0).max(f64::from(s.gap_longest_ms) / unit);
    let fit = Fit::of(s, n);
    let bounds = Bounds {
        s,
        n,
        longest,
        fit,
        loss: (s.loss_runs > 0)
            .then(|| tail::loss_bounds(s.loss_runs, s.lost_beats, n + s.lost_beats, CONFIDENCE)),
    };
    let cap = CAP.as_millis() as f64 / unit;
    let (basis, needed) = match bounds.shortest_within(q, cap) {
        Some(t) if t > longest && fit.is_some_and(|f| f.exceeds(t) < bounds.empirical(t)) => {
            (Basis::Tail, t)
        }
        Some(t) => (Basis::Observed, t),
        None => match fit {
            // The fit would reach the target, but only past the cap, or its shape has
            // no bound.
            Some(f) if f.bound.is_none() || f.length_for(q).is_some() => (Basis::Unreachable, 0.0),
            _ => (Basis::PauseFloor, 0.0),
        },
    };
    let pause_floor_ms = u64::from(s.gap_median_ms) + target.pause_floor.as_millis() as u64;
    let floor = (HEADROOM * longest).max(pause_floor_ms as f64 / unit);
    let timeout_ms = round_up(needed.max(floor) * unit).min(CAP.as_millis() as u64);
    let bound = bounds.over(timeout_ms as f64 / unit);
    Advice::Timeout(Timeout {
        timeout_ms,
        basis,
        allowed: q,
        bound,
        promise_per_year: bound * beats_per_year,
        gaps: n,
        pooled: s.pooled_gaps,
        span,
        longest_ms: (longest * unit).round() as u64,
        pause_floor_ms,
        floored: floor > needed,
        shape_upper: fit.map(|f| f.bound.map_or(f64::INFINITY, |g| g.xi)),
    })
}

/// What the summary bounds about a gap's length.
struct Bounds<'a> {
    s: &'a DetectionSummary,
    /// The gaps the tail counts are out of.
    n: u64,
    /// The longest gap seen, normalised.
    longest: f64,
    fit: Option<Fit>,
    /// Gilbert's rates of lost-beat runs at their upper bounds, once a run was seen.
    loss: Option<(f64, f64)>,
}

impl Bounds<'_> {
    /// The distribution-free upper bound on the chance that a gap exceeds the
    /// normalised length `t`, from the gaps counted.
    fn empirical(&self, t: f64) -> f64 {
        upper_bound(
            exceeding(&self.s.tail, self.longest, t).unwrap_or(self.n),
            self.n,
        )
    }

    /// The upper bound on the chance that a gap exceeds the normalised length `t`: the
    /// gaps counted, and past the longest of them the tail fit where it says less;
    /// plus runs of lost beats that long (a loss gap is not counted among the gaps).
    fn over(&self, t: f64) -> f64 {
        let empirical = self.empirical(t);
        let stall = match &self.fit {
            // The model speaks only where the gaps are silent.
            Some(f) if t >= self.longest => empirical.min(f.exceeds(t)),
            _ => empirical,
        };
        let loss = self
            .loss
            .map_or(0.0, |(rho, b)| tail::loss_upper(rho, b, t));
        (stall + loss).min(1.0)
    }

    /// The shortest normalised length up to `cap` whose bound is at most `q` (the
    /// bound only falls as the length grows), to within a thousandth.
    fn shortest_within(&self, q: f64, cap: f64) -> Option<f64> {
        if self.over(cap) > q {
            return None;
        }
        let (mut above, mut within) = (0.0, cap);
        while within - above > 1e-3 {
            let mid = 0.5 * (above + within);
            if self.over(mid) <= q {
                within = mid;
            } else {
                above = mid;
            }
        }
        Some(within)
    }
}

/// `ms` rounded up to 100 ms.
fn round_up(ms: f64) -> u64 {
    ((ms / 100.0).ceil() * 100.0) as u64
}

/// How many of the gaps were longer than the normalised length `t`, as far as the
/// counts tell: the count at the longest length of the ladder at or below `t` (an
/// upper bound), none past the longest gap, `None` below the ladder.
fn exceeding(tail: &[TailCount], longest: f64, t: f64) -> Option<u64> {
    if t >= longest {
        return Some(0);
    }
    tail.iter()
        .filter(|c| f64::from(c.over_centi) / 100.0 <= t)
        .map(|c| c.gaps)
        .min()
}

/// The tail fit, at its upper bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Fit {
    /// The long-gap threshold, normalised.
    threshold: f64,
    /// The upper bound on the rate of gaps above it.
    rate: f64,
    /// The excesses over it, normalised, at the bounds of shape (never below 0) and
    /// scale; `None` when the shape has no finite bound (ξ̂ ≥ ½).
    bound: Option<Gpd>,
    /// The least chance a gap may be claimed to exceed anything: the distribution-free
    /// bound of no gap at all, over [`MAX_EXTRAPOLATION`].
    least: f64,
}

impl Fit {
    /// The fit in `s`, if it has [`MIN_EXCEEDANCES`] exceedances among `n` gaps.
    ///
    /// The shape's bound is the larger of the detector's ([`Gpd::upper`]) and
    /// `ξ̂ + 1.645 sd`, with the asymptotic variance of the probability-weighted
    /// moments estimator (Hosking & Wallis 1987), `(1−ξ)(2−ξ)²(1−ξ+2ξ²) /
    /// ((1−2ξ)(3−2ξ) m)`, which grows without bound as ξ nears ½: past it the
    /// estimator's spread is not finite, and the advisor claims nothing of the tail.
    fn of(s: &DetectionSummary, n: u64) -> Option<Self> {
        let m = s.exceedances;
        if m < MIN_EXCEEDANCES || s.scale_centi == 0 || m > n {
            return None;
        }
        let estimate = Gpd {
            xi: f64::from(s.shape_milli) / 1000.0,
            sigma: f64::from(s.scale_centi) / 100.0,
        };
        let xi = estimate.xi.max(-0.5);
        let bound = (xi < 0.5).then(|| {
            let variance = (1.0 - xi) * (2.0 - xi).powi(2) * (1.0 - xi + 2.0 * xi * xi)
                / ((1.0 - 2.0 * xi) * (3.0 - 2.0 * xi) * m as f64);
            let detector = estimate.upper(m);
            Gpd {
                xi: detector.xi.max(xi + 1.645 * variance.sqrt()),
                sigma: detector.sigma,
            }
        });
        Some(Self {
            threshold: f64::from(s.threshold_centi) / 100.0,
            rate: upper_bound(m, n),
            bound,
            least: upper_bound(0, n) / MAX_EXTRAPOLATION,
        })
    }

    /// The upper bound on the chance that a gap exceeds the normalised length `t`.
    fn exceeds(&self, t: f64) -> f64 {
        if t <= self.threshold {
            return 1.0;
        }
        match self.bound {
            Some(g) => (self.rate * g.survival(t - self.threshold)).clamp(self.least, 1.0),
            None => self.rate,
        }
    }

    /// The normalised length whose chance of being exceeded is `q`, if the fit reaches
    /// it: never for a `q` below [`Self::least`], nor without a bounded shape.
    fn length_for(&self, q: f64) -> Option<f64> {
        if q.is_nan() || q < self.least {
            return None;
        }
        if q >= self.rate {
            return Some(self.threshold);
        }
        let t = self.threshold + self.bound?.excess_at(q / self.rate);
        t.is_finite().then_some(t)
    }
}

/// The Clopper–Pearson upper bound ([`CONFIDENCE`], one-sided) on a proportion of
/// which `k` of `n` were seen. For `k = 0` it is `1 − 0.05^(1/n)`, about `3/n`.
pub fn upper_bound(k: u64, n: u64) -> f64 {
    tail::binomial_upper(k, n, CONFIDENCE)
}

/// The upper `CONFIDENCE` quantile of a Poisson count of mean `mean`: the smallest
/// count that a count of this mean stays at or under with chance `CONFIDENCE`. A
/// promise of `mean` false expulsions is broken, at that confidence, by more.
pub fn poisson_quantile(mean: f64) -> u64 {
    let alpha = 1.0 - CONFIDENCE;
    if mean.is_nan() || mean <= 0.0 {
        return 0;
    }
    let mut term = (-mean).exp();
    let mut cdf = term;
    let mut k = 0u64;
    // For very large means, where e^-mean underflows, the normal approximation.
    if term == 0.0 {
        return (mean + 1.645 * mean.sqrt()).ceil() as u64;
    }
    while cdf < 1.0 - alpha {
        k += 1;
        term *= mean / k as f64;
        cdf += term;
    }
    k
}

/// The summary of a group's pooled gaps at `now`, as DescribeGroup version 3 reports
/// it and [`advise`] reads it: from its `fleet`, the `arrivals` of its members (their
/// median and longest gaps), and the detector's `floor` (a part of the long-gap
/// threshold).
pub fn summarise<'a>(
    fleet: &Fleet,
    arrivals: impl Iterator<Item = &'a Arrivals>,
    floor: Duration,
    now: Instant,
) -> DetectionSummary {
    let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
    let centi = |x: f64| (x * 100.0).ceil().clamp(0.0, f64::from(u32::MAX)) as u32;
    let mut medians = Vec::new();
    let mut longest = 0;
    for a in arrivals.filter(|a| a.learned() > 0) {
        medians.push(a.quantile(0.5));
        longest = longest.max(ms(a.longest()));
    }
    medians.sort_unstable();
    let median = medians.get(medians.len() / 2).copied().unwrap_or_default();
    let fit = fleet.fit_now(MIN_EXCEEDANCES, CONFIDENCE);
    let estimate = fit.estimate.filter(|g| g.sigma > 0.0);
    let median_secs = median.as_secs_f64();
    let threshold = if median_secs > 0.0 {
        fleet::threshold(median_secs, floor) / median_secs
    } else {
        0.0
    };
    // Gaps longer than a bucket's lower edge are at most those in it and above; the
    // edge is rounded up so that the count stays an upper bound. From the mean gap up:
    // the body says nothing of the tail.
    let buckets: Vec<(f64, u32)> = fleet
        .normalised_gaps()
        .map(|(lower, _, count)| (lower, count))
        .collect();
    let mut tail = Vec::new();
    let mut above: u64 = 0;
    for &(lower, count) in buckets.iter().rev() {
        above += u64::from(count);
        if lower >= 1.0 {
            tail.push(TailCount {
                over_centi: centi(lower),
                gaps: above,
            });
        }
    }
    tail.reverse();
    // The shortest lengths go first: the longest are those the advice needs.
    let excess = tail.len().saturating_sub(MAX_TAIL_COUNTS);
    tail.drain(..excess);
    let (loss_runs, lost_beats) = fleet.loss_runs();
    DetectionSummary {
        pooled_gaps: fleet.pooled(),
        span_ms: u64::try_from(fleet.span(now).as_millis()).unwrap_or(u64::MAX),
        clean_gaps: fleet.clean(),
        gap_median_ms: ms(median),
        gap_longest_ms: longest,
        longest_centi: centi(fleet.longest()),
        tail_gaps: fleet.window_gaps(),
        threshold_centi: centi(threshold),
        exceedances: fit.exceedances,
        shape_milli: estimate.map_or(0, |g| (g.xi * 1000.0).round().clamp(-1e6, 1e6) as i32),
        scale_centi: estimate.map_or(0, |g| centi(g.sigma)),
        loss_runs,
        lost_beats,
        tail,
    }
}

#[cfg(test)]
mod tests;
