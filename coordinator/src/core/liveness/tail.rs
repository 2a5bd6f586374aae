//! Bounds on how often and how long a group's long heartbeat gaps are: the statistics
//! behind the adaptive detector's expulsion threshold and the timeout advisor.
//!
//! Everything here is a small pure function of counts, so that what the detector
//! claims can be checked by hand:
//!
//! - [`binomial_upper`]: the Clopper–Pearson upper confidence bound on a rate, from `k`
//!   events in `n` trials (exact, one-sided).
//! - [`poisson_upper`]: the upper confidence bound on the mean of a Poisson count.
//! - [`pwm_fit`]: a generalised Pareto fit (shape ξ, scale σ) of the excesses over a
//!   threshold, by probability-weighted moments (Hosking & Wallis 1987), from a
//!   histogram; [`Gpd::upper`] its conservative bound, never lighter than exponential.
//! - [`loss_upper`]: Gilbert's two-state model of lost beats: how likely a run of lost
//!   beats is to last a given number of beats, at the upper bounds of its rates.

/// The standard normal quantile at 95 %, for one-sided bounds.
pub const Z95: f64 = 1.645;

/// Fewest excesses a tail is fitted from by default: below this, a fit of the shape is
/// a guess, and no fit is made.
pub const MIN_EXCEEDANCES: u64 = 30;

/// The Clopper–Pearson upper bound, at `confidence` (one-sided), on the chance of an
/// event seen `k` times in `n` trials: the largest `p` under which seeing at most `k`
/// events still has a chance of at least `1 − confidence`. 1 without trials.
///
/// For `k = 0` it is `1 − (1 − confidence)^(1/n)`, about `3/n` at 95 % (the rule of
/// three).
pub fn binomial_upper(k: u64, n: u64, confidence: f64) -> f64 {
    if n == 0 || k >= n {
        return 1.0;
    }
    let alpha = 1.0 - confidence.clamp(0.0, 1.0 - 1e-12);
    if k == 0 {
        return 1.0 - alpha.powf(1.0 / n as f64);
    }
    // P(X ≤ k) falls as p grows: the bound is where it reaches alpha.
    bisect(k as f64 / n as f64, 1.0, |p| binomial_cdf(k, n, p) > alpha)
}

/// The upper bound, at `confidence` (one-sided), on the mean of a Poisson count that
/// came out as `k`: the largest mean under which a count of at most `k` still has a
/// chance of at least `1 − confidence` (about 3.0 for `k = 0` at 95 %).
pub fn poisson_upper(k: u64, confidence: f64) -> f64 {
    let alpha = 1.0 - confidence.clamp(0.0, 1.0 - 1e-12);
    if k == 0 {
        return -alpha.ln();
    }
    let k_f = k as f64;
    let hi = k_f + 12.0 * k_f.sqrt() + 40.0;
    bisect(k_f, hi, |lambda| poisson_cdf(k, lambda) > alpha)
}

/// A generalised Pareto distribution of excesses over a threshold: the chance that an
/// excess passes `y` is `(1 + ξ·y/σ)^(−1/ξ)` (`exp(−y/σ)` for ξ = 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpd {
    /// The shape ξ: 0 is an exponential tail, above 0 a heavy (Pareto-like) one whose
    /// moments of order `1/ξ` and above are infinite.
    pub xi: f64,
    /// The scale σ, in the units of the excesses.
    pub sigma: f64,
}

impl Gpd {
    /// The chance that an excess is longer than `y` (≥ 0).
    pub fn survival(self, y: f64) -> f64 {
        let y = y.max(0.0);
        if self.sigma <= 0.0 {
            return if y > 0.0 { 0.0 } else { 1.0 };
        }
        if self.xi.abs() < 1e-9 {
            return (-y / self.sigma).exp();
        }
        let base = 1.0 + self.xi * y / self.sigma;
        if base <= 0.0 {
            // Past the finite endpoint of a fit with ξ < 0.
            return 0.0;
        }
        base.powf(-1.0 / self.xi)
    }

    /// The excess `y` the tail passes with chance `p` (0 < p ≤ 1): the inverse of
    /// [`Self::survival`].
    pub fn excess_at(self, p: f64) -> f64 {
        let p = p.clamp(f64::MIN_POSITIVE, 1.0);
        if self.xi.abs() < 1e-9 {
            return -self.sigma * p.ln();
        }
        self.sigma / self.xi * (p.powf(-self.xi) - 1.0)
    }

    /// The conservative bound of a fit from `m` excesses: the shape raised by 1.645
    /// standard errors, `ξ_U = max(0, ξ + 1.645·(1 + ξ)/√m)`, and the scale by 1.645 of
    /// its relative error `√(2(1 + ξ)/m)`. Never lighter than exponential, because a
    /// finite endpoint fitted from a sample is not to be trusted, and heavier in both
    /// shape and scale, so the chance of any excess only grows.
    pub fn upper(self, m: u64) -> Self {
        let m = (m.max(1)) as f64;
        let xi = self.xi.max(-0.5);
        Self {
            xi: (xi + Z95 * (1.0 + xi) / m.sqrt()).max(0.0),
            sigma: self.sigma * (1.0 + Z95 * (2.0 * (1.0 + xi) / m).sqrt()),
        }
    }
}

/// The generalised Pareto fit, by probability-weighted moments, of the excesses in
/// `bins`: `(excess, count)` pairs in ascending order of excess (a histogram's
/// representative values). `None` from fewer than `min` excesses.
///
/// With `a0` the mean excess and `a1 = E[Y·(1 − F(Y))]` estimated without bias from
/// the order statistics, `ξ = 2 − a0/(a0 − 2·a1)` and `σ = 2·a0·a1/(a0 − 2·a1)`. The
/// estimator needs a finite mean (ξ < 1) and is steady for ξ < ½; past that it
/// underestimates, which the detector's bound ([`Gpd::upper`]) and its floor of 0 for
/// the shape absorb. Excesses that are all equal give an exponential of their mean.
pub fn pwm_fit(bins: impl IntoIterator<Item = (f64, u64)>, min: u64) -> Option<Gpd> {
    let bins: Vec<(f64, u64)> = bins.into_iter().filter(|&(_, c)| c > 0).collect();
    let n: u64 = bins.iter().map(|&(_, c)| c).sum();
    if n < min.max(2) {
        return None;
    }
    let n_f = n as f64;
    let (mut sum, mut weighted, mut before) = (0.0, 0.0, 0u64);
    for &(y, c) in &bins {
        let (c_f, s) = (c as f64, before as f64);
        sum += y * c_f;
        // Ranks s+1..=s+c, each weighted by (n − rank)/(n − 1).
        weighted += y * (c_f * (n_f - s) - c_f * (c_f + 1.0) / 2.0);
        before += c;
    }
    let a0 = sum / n_f;
    let a1 = weighted / (n_f * (n_f - 1.0));
    let d = a0 - 2.0 * a1;
    if a0 <= 0.0 {
        return Some(Gpd {
            xi: 0.0,
            sigma: 0.0,
        });
    }
    if d <= 1e-12 * a0 {
        return Some(Gpd { xi: 0.0, sigma: a0 });
    }
    Some(Gpd {
        xi: 2.0 - a0 / d,
        sigma: 2.0 * a0 * a1 / d,
    })
}

/// Upper bounds, at `confidence`, on the two rates of Gilbert's model of lost beats,
/// from `runs` runs of lost beats holding `lost` beats in all, among `beats` beats sent
/// (arrived or lost): `(ρ_U, b_U)`, where `ρ` is the chance that a beat starts a run
/// and `b` the chance that a lost beat is followed by another lost one.
pub fn loss_bounds(runs: u64, lost: u64, beats: u64, confidence: f64) -> (f64, f64) {
    let rho = binomial_upper(runs, beats.max(runs), confidence);
    let lost = lost.max(runs);
    let b = if runs == 0 {
        // No run seen: nothing bounds how long one lasts.
        1.0
    } else {
        binomial_upper(lost - runs, lost, confidence)
    };
    (rho, b)
}

/// The chance, under Gilbert's model at rates `(rho, b)`, that a gap lasts `beats`
/// heartbeat intervals because of lost beats: a run of at least `⌈beats⌉ − 1` lost
/// beats, that is `ρ · b^(⌈beats⌉ − 2)`. 1 for a gap no longer than one interval.
pub fn loss_upper(rho: f64, b: f64, beats: f64) -> f64 {
    let needed = beats.ceil() - 1.0;
    if needed < 1.0 {
        return 1.0;
    }
    (rho * b.powf(needed - 1.0)).min(1.0)
}

/// The point of `[lo, hi]` where `below` turns false (it must be true at `lo` side and
/// false at the `hi` side).
fn bisect(mut lo: f64, mut hi: f64, below: impl Fn(f64) -> bool) -> f64 {
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi || hi - lo <= 1e-13 * hi {
            break;
        }
        if below(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// P(X ≤ k) for X binomial of `n` trials at `p`, summed down from the k-th term until
/// the terms no longer count.
fn binomial_cdf(k: u64, n: u64, p: f64) -> f64 {
    if p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return if k >= n { 1.0 } else { 0.0 };
    }
    let (kf, nf) = (k as f64, n as f64);
    let log_term = ln_factorial(n) - ln_factorial(k) - ln_factorial(n - k)
        + kf * p.ln()
        + (nf - kf) * (-p).ln_1p();
    let ratio = (1.0 - p) / p;
    sum_down(log_term, k, |j| j as f64 / (nf - j as f64 + 1.0) * ratio)
}

/// P(X ≤ k) for X Poisson with mean `lambda`.
fn poisson_cdf(k: u64, lambda: f64) -> f64 {
    if lambda <= 0.0 {
        return 1.0;
    }
    let log_term = k as f64 * lambda.ln() - lambda - ln_factorial(k);
    sum_down(log_term, k, |j| j as f64 / lambda)
}

/// Σ of the terms `t_k, t_{k−1}, …, t_0` where `t_k = exp(log_first)` and
/// `t_{j−1} = t_j · ratio(j)`, stopping once a term is negligible and falling.
fn sum_down(log_first: f64, k: u64, ratio: impl Fn(u64) -> f64) -> f64 {
    let mut term = log_first.exp();
    let mut sum = term;
    let mut j = k;
    while j > 0 {
        let r = ratio(j);
        term *= r;
        sum += term;
        j -= 1;
        if r < 1.0 && term <= sum * 1e-17 {
            break;
        }
    }
    sum.min(1.0)
}

/// ln(n!), exact below 32 and by Stirling's series above (to about 1e-12).
fn ln_factorial(n: u64) -> f64 {
    if n < 32 {
        return (2..=n).map(|i| (i as f64).ln()).sum();
    }
    let x = n as f64 + 1.0;
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    (x - 0.5) * x.ln() - x
        + 0.5 * (2.0 * std::f64::consts::PI).ln()
        + inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 / 1680.0)))
}

#[cfg(test)]
mod tests;
