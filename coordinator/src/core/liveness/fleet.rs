//! What a group's members have shown together of their long heartbeat gaps: the
//! evidence the adaptive detector needs before it expels a member sooner than its
//! session timeout, and the data the timeout advisor reads.
//!
//! One [`Fleet`] per group, pooled over its members and kept in memory only (a restart
//! starts it over). Gaps are pooled *normalised*, divided by the moving mean gap of the
//! member that showed them, so that members of different rhythms pool.
//!
//! - **Surprises.** A gap that ended with a beat and was longer than the member's
//!   threshold `u = max(floor, 1.5 · mean)` (an *exceedance*), a run of lost beats
//!   (a jump in the sequence numbers), or a proven false expulsion (a member expelled for
//!   its silence beat again). Each is evidence that a live member can be silent for
//!   long. [`Fleet::clean`] counts the pooled gaps since the last one: the detector's
//!   gate. A crash never ends its gap, so it is never a surprise.
//! - **The tail.** The excesses of the exceedances over `u`, normalised, in a
//!   histogram, and the runs of lost beats; every [`WINDOW`](super::arrivals::WINDOW)
//!   gaps per member their counts are halved, so they cover the last one to two such
//!   windows of the group, the older half at half weight. [`Fit`] is the generalised
//!   Pareto fit of the excesses with its conservative bounds, refreshed at most once
//!   a second of the core's clock ([`Fleet::refresh`]), and only when the counts moved.

use std::time::{Duration, Instant};

use super::arrivals::WINDOW;
use super::tail::{self, Gpd};

/// The shortest time between two fits of the tail ([`Fleet::refresh`]).
pub const FIT_EVERY: Duration = Duration::from_secs(1);

/// Sub-buckets per doubling of a normalised value (edges 12.5 % to 25 % apart).
const SUB_BUCKETS: i32 = 4;
/// Octave of the first bucket after bucket 0: values from 2^-6 of the mean gap.
const LOW_OCTAVE: i32 = -6;
/// Octaves told apart: up to 2^14 times the mean gap.
const OCTAVES: i32 = 20;
/// Buckets of the normalised histograms: bucket 0 holds everything below 2^-6, the
/// last everything from 2^14 up.
pub const NORM_BUCKETS: usize = (1 + SUB_BUCKETS * OCTAVES) as usize;

/// A group's pooled heartbeat gaps and surprises; see the module documentation.
#[derive(Debug, Clone)]
pub struct Fleet {
    /// Gaps learned from all members, ever.
    pooled: u64,
    /// Pooled gaps since the last surprise.
    clean: u64,
    /// When the first gap was pooled.
    since: Option<Instant>,
    /// Surprises, ever.
    surprises: u64,
    /// Proven false expulsions, ever.
    false_expulsions: u64,
    /// Gaps in the windowed counts (halved with them).
    gaps: u64,
    /// Gaps pooled since the counts were last halved.
    since_halving: u64,
    /// Exceedances in the windowed counts (the sum of `excess`).
    exceedances: u64,
    /// Runs of lost beats, and the beats they held, in the windowed counts.
    runs: u64,
    lost: u64,
    /// The longest normalised gap of this window and of the one before.
    longest: [f32; 2],
    /// Every pooled gap over its member's mean gap.
    normalised: Box<[u32; NORM_BUCKETS]>,
    /// Every exceedance's excess over `u`, over its member's mean gap.
    excess: Box<[u32; NORM_BUCKETS]>,
    /// The cached fit, and when it was made.
    fit: Fit,
    fitted_at: Option<Instant>,
    /// Whether the counts moved since the fit.
    stale: bool,
    /// Changes with every new fit: what a member cached from the fit is stale once it
    /// differs.
    epoch: u32,
}

impl Default for Fleet {
    fn default() -> Self {
        Self {
            pooled: 0,
            clean: 0,
            since: None,
            surprises: 0,
            false_expulsions: 0,
            gaps: 0,
            since_halving: 0,
            exceedances: 0,
            runs: 0,
            lost: 0,
            longest: [0.0; 2],
            normalised: Box::new([0; NORM_BUCKETS]),
            excess: Box::new([0; NORM_BUCKETS]),
            fit: Fit::default(),
            fitted_at: None,
            stale: false,
            epoch: 0,
        }
    }
}

/// What a pooled gap was ([`Fleet::learn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooled {
    /// Within its member's threshold `u`.
    Body,
    /// Longer than `u`: a surprise.
    Exceedance,
}

impl Fleet {
    /// A member whose moving mean gap was `mean` (before this gap) showed a gap of `gap`
    /// that ended with a heartbeat at `now`; `floor` is the detector's floor and
    /// `members` the group's size (the windows cover [`WINDOW`] gaps per member).
    /// A gap longer than `u = max(floor, 1.5 · mean)` is an exceedance and a surprise.
    pub fn learn(
        &mut self,
        now: Instant,
        gap: Duration,
        mean: Duration,
        floor: Duration,
        members: usize,
    ) -> Pooled {
        let (gap, mean) = (gap.as_secs_f64(), mean.as_secs_f64());
        self.learn_secs(now, gap, mean, floor.as_secs_f64(), members)
    }

    /// [`Self::learn`], in seconds.
    pub(super) fn learn_secs(
        &mut self,
        now: Instant,
        secs: f64,
        mean: f64,
        floor: f64,
        members: usize,
    ) -> Pooled {
        if self.since.is_none() {
            self.since = Some(now);
        }
        self.pooled += 1;
        self.clean += 1;
        self.gaps += 1;
        let mean = mean.max(1e-3);
        let x = secs / mean;
        add(&mut self.normalised, x);
        self.longest[0] = self.longest[0].max(x as f32);
        let u = floor.max(1.5 * mean);
        let pooled = if secs > u {
            add(&mut self.excess, (secs - u) / mean);
            self.exceedances += 1;
            self.surprise();
            Pooled::Exceedance
        } else {
            Pooled::Body
        };
        self.tick(members);
        pooled
    }

    /// A heartbeat arrived after `run` lost ones (its sequence number jumped): a
    /// surprise, and one more run for Gilbert's model. The gap it ended is learned by
    /// [`Self::learn`] only when sequence numbers are not known.
    pub fn lost(&mut self, now: Instant, run: u64) {
        self.since.get_or_insert(now);
        self.runs += 1;
        self.lost += run;
        self.surprise();
    }

    /// A member expelled for its silence beat again: the expulsion was a mistake, and a
    /// surprise.
    pub fn false_expulsion(&mut self) {
        self.false_expulsions += 1;
        self.surprise();
    }

    fn surprise(&mut self) {
        self.clean = 0;
        self.surprises += 1;
        self.stale = true;
    }

    /// Halves the windowed counts once the group pooled [`WINDOW`] gaps per member
    /// since the last halving.
    fn tick(&mut self, members: usize) {
        self.since_halving += 1;
        if self.since_halving < u64::from(WINDOW) * members.max(1) as u64 {
            return;
        }
        self.since_halving = 0;
        self.gaps /= 2;
        self.runs /= 2;
        self.lost /= 2;
        for c in self.normalised.iter_mut() {
            *c >>= 1;
        }
        let mut exceedances = 0;
        for c in self.excess.iter_mut() {
            *c >>= 1;
            exceedances += u64::from(*c);
        }
        self.exceedances = exceedances;
        self.longest = [0.0, self.longest[0]];
        self.stale = true;
    }

    /// Fits the tail again at `now` if the counts moved since the last fit and that was
    /// at least [`FIT_EVERY`] ago: `min_exceedances` is the fewest excesses a shape is
    /// fitted from, `confidence` that of every bound. Returns whether the fit changed.
    pub fn refresh(&mut self, now: Instant, min_exceedances: u64, confidence: f64) -> bool {
        if !self.stale
            || self
                .fitted_at
                .is_some_and(|at| now.saturating_duration_since(at) < FIT_EVERY)
        {
            return false;
        }
        self.fit = self.fit_now(min_exceedances, confidence);
        self.fitted_at = Some(now);
        self.stale = false;
        self.epoch = self.epoch.wrapping_add(1);
        true
    }

    /// The fit of the counts as they are, uncached.
    pub fn fit_now(&self, min_exceedances: u64, confidence: f64) -> Fit {
        let n = self.gaps.max(self.exceedances);
        let m = self.exceedances;
        let bins = self
            .excess
            .iter()
            .enumerate()
            .map(|(i, &c)| (midpoint(i), u64::from(c)));
        let estimate = tail::pwm_fit(bins, min_exceedances);
        let (runs_per_beat, continuation) =
            tail::loss_bounds(self.runs, self.lost, n + self.lost, confidence);
        Fit {
            gaps: n,
            exceedances: m,
            rate_upper: tail::binomial_upper(m, n, confidence),
            estimate,
            bound: estimate.map(|g| g.upper(m)),
            runs: self.runs,
            lost: self.lost,
            runs_per_beat,
            continuation,
        }
    }

    /// The cached fit ([`Self::refresh`]).
    pub fn fit(&self) -> &Fit {
        &self.fit
    }

    /// Changes with every new fit.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Pooled gaps since the last surprise (all of them if none came yet).
    pub fn clean(&self) -> u64 {
        self.clean
    }

    /// Gaps pooled from all members, ever (n of the whole span).
    pub fn pooled(&self) -> u64 {
        self.pooled
    }

    /// How long the group has been pooling gaps, at `now`.
    pub fn span(&self, now: Instant) -> Duration {
        self.since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }

    /// Surprises, ever.
    pub fn surprises(&self) -> u64 {
        self.surprises
    }

    /// Proven false expulsions, ever.
    pub fn false_expulsions(&self) -> u64 {
        self.false_expulsions
    }

    /// Gaps in the windowed counts (n of [`Self::exceedances`] and of
    /// [`Self::normalised_gaps`]).
    pub fn window_gaps(&self) -> u64 {
        self.gaps
    }

    /// Exceedances in the windowed counts (m).
    pub fn exceedances(&self) -> u64 {
        self.exceedances
    }

    /// Runs of lost beats, and the beats they held, in the windowed counts.
    pub fn loss_runs(&self) -> (u64, u64) {
        (self.runs, self.lost)
    }

    /// The longest gap of the last one to two windows, over its member's mean gap.
    pub fn longest(&self) -> f64 {
        f64::from(self.longest[0].max(self.longest[1]))
    }

    /// The windowed histogram of every pooled gap over its member's mean gap:
    /// `(lower, upper, count)` per bucket holding a count, ascending (the last bucket's
    /// upper edge is infinite).
    pub fn normalised_gaps(&self) -> impl Iterator<Item = (f64, f64, u32)> + '_ {
        buckets(&self.normalised)
    }

    /// The windowed histogram of the exceedances' excesses over `u`, over their
    /// member's mean gap, as [`Self::normalised_gaps`].
    pub fn excesses(&self) -> impl Iterator<Item = (f64, f64, u32)> + '_ {
        buckets(&self.excess)
    }
}

/// The threshold above which a gap is an exceedance, in seconds, for a member whose
/// mean gap is `mean` seconds: `max(floor, 1.5 · mean)`.
pub fn threshold(mean: f64, floor: Duration) -> f64 {
    floor.as_secs_f64().max(1.5 * mean)
}

/// The group's tail, fitted from its windowed counts ([`Fleet::refresh`]), and the
/// chance, at its bounds, that a member's gap is longer than a given silence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fit {
    /// Gaps the fit saw (n).
    pub gaps: u64,
    /// Exceedances among them (m).
    pub exceedances: u64,
    /// `r_U`: the upper bound on the chance that a gap is an exceedance.
    pub rate_upper: f64,
    /// The estimate (ξ̂, σ̂) of the excesses over `u`, σ in mean gaps; `None` below the
    /// fewest exceedances a shape is fitted from.
    pub estimate: Option<Gpd>,
    /// Its conservative bound (ξ_U ≥ 0, σ_U), as [`Gpd::upper`].
    pub bound: Option<Gpd>,
    /// Runs of lost beats, and the beats they held.
    pub runs: u64,
    pub lost: u64,
    /// `ρ_U`: the upper bound on the chance that a beat starts a run of lost ones.
    pub runs_per_beat: f64,
    /// `b_U`: the upper bound on the chance that a lost beat is followed by another.
    pub continuation: f64,
}

impl Fit {
    /// The upper bound on the chance that a gap of a member whose mean gap is `mean`
    /// (with threshold `u`, both seconds) is longer than `t` seconds: stalls,
    /// `r_U · GPD_U((t − u)/mean)`, plus runs of lost beats, `ρ_U · b_U^(⌈t/mean⌉ − 2)`.
    /// Without a fitted shape it is at least `r_U`, whatever `t`. While no run of lost
    /// beats was seen, runs are bounded with the stalls: one would be one more
    /// exceedance, which `r_U` already allows for.
    pub fn exceed_upper(&self, t: f64, mean: f64, u: f64) -> f64 {
        let mean = mean.max(1e-3);
        let stall = match self.bound {
            Some(g) if t > u => self.rate_upper * g.survival((t - u) / mean),
            _ if t > u => self.rate_upper,
            _ => 1.0,
        };
        let loss = if self.runs == 0 {
            0.0
        } else {
            tail::loss_upper(self.runs_per_beat, self.continuation, t / mean)
        };
        (stall + loss).min(1.0)
    }

    /// The shortest silence in `[lo, session]` (seconds) whose chance under
    /// [`Self::exceed_upper`] is at most `epsilon`, to within a millisecond; `session`
    /// if none is, or if no shape was fitted.
    pub fn expel_after(&self, mean: f64, u: f64, lo: f64, session: f64, epsilon: f64) -> f64 {
        if self.bound.is_none() || lo >= session {
            return session;
        }
        if self.exceed_upper(lo, mean, u) <= epsilon {
            return lo;
        }
        if self.exceed_upper(session, mean, u) > epsilon {
            return session;
        }
        let (mut above, mut within) = (lo, session);
        while within - above > 1e-3 {
            let mid = 0.5 * (above + within);
            if self.exceed_upper(mid, mean, u) <= epsilon {
                within = mid;
            } else {
                above = mid;
            }
        }
        within
    }
}

/// Counts one normalised value `x` in its bucket.
fn add(counts: &mut [u32; NORM_BUCKETS], x: f64) {
    let i = bucket(x);
    counts[i] = counts[i].saturating_add(1);
}

/// The bucket of a normalised value, from the bits of its `f32`: the exponent picks the
/// octave, the two leading bits of the mantissa its quarter.
fn bucket(x: f64) -> usize {
    let x = x as f32;
    if x.is_nan() || x < f32::powi(2.0, LOW_OCTAVE) {
        return 0;
    }
    let bits = x.to_bits();
    let octave = ((bits >> 23) & 0xff) as i32 - 127;
    let sub = ((bits >> 21) & 3) as i32;
    let i = (octave - LOW_OCTAVE) * SUB_BUCKETS + sub + 1;
    (i.max(1) as usize).min(NORM_BUCKETS - 1)
}

/// The smallest value of bucket `i` (0 for bucket 0).
fn lower(i: usize) -> f64 {
    if i == 0 {
        return 0.0;
    }
    let k = i as i32 - 1;
    let octave = LOW_OCTAVE + k / SUB_BUCKETS;
    let sub = k % SUB_BUCKETS;
    2f64.powi(octave) * (1.0 + f64::from(sub) / f64::from(SUB_BUCKETS))
}

/// The upper edge of bucket `i` (infinite for the last).
fn upper(i: usize) -> f64 {
    if i + 1 >= NORM_BUCKETS {
        f64::INFINITY
    } else {
        lower(i + 1)
    }
}

/// The value a bucket's counts stand for in a fit: the middle of its edges (half the
/// first edge for bucket 0, the lower edge for the last).
fn midpoint(i: usize) -> f64 {
    match i {
        0 => lower(1) / 2.0,
        i if i + 1 >= NORM_BUCKETS => lower(i),
        i => 0.5 * (lower(i) + upper(i)),
    }
}

fn buckets(counts: &[u32; NORM_BUCKETS]) -> impl Iterator<Item = (f64, f64, u32)> + '_ {
    counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| (lower(i), upper(i), c))
}

#[cfg(test)]
mod tests;
