//! The timeout advisor: the session timeout that keeps false expulsions under a stated
//! rate, from the gaps a group's members have shown.
//!
//! A member is expelled for silence only when one gap between its heartbeats exceeds
//! the timeout, so the false-expulsion rate is bounded by how often a gap exceeds it:
//! for a target of `r` false expulsions per year across `n` members beating every `m`
//! (the median gap), the tail probability allowed per gap is
//! `q = r / (n × seconds per year / m)`. The timeout is the gap quantile at `1 − q`:
//! read from the observed p50, p99 and p99.9 while `q` is within them (log-linear in
//! `q` between them), and beyond p99.9 extrapolated as an exponential tail (each tenfold
//! rarer adds `p99.9 − p99`), never below the longest gap seen once `q` is rarer than
//! one in the gaps observed. The assumptions (independent gaps, a representative
//! window) make it a floor: correlated stalls (a pause hitting many beats at once) make
//! the real rate higher.

/// Seconds in a year (365.25 days).
const YEAR_SECS: f64 = 365.25 * 24.0 * 3600.0;

/// Fewer gaps than this and there is nothing to advise from.
pub const MIN_GAPS: u32 = 100;

/// A member's observed gaps between heartbeats, as DescribeGroup reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapSummary {
    /// Gaps observed.
    pub gaps: u32,
    /// Median gap, ms.
    pub p50_ms: u32,
    /// 99th percentile, ms.
    pub p99_ms: u32,
    /// 99.9th percentile, ms.
    pub p999_ms: u32,
    /// Longest, ms.
    pub max_ms: u32,
}

impl GapSummary {
    /// The summary of `arrivals`, as DescribeGroup reports it.
    pub fn of(arrivals: &super::Arrivals) -> Self {
        let ms = |d: std::time::Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        Self {
            gaps: arrivals.learned(),
            p50_ms: ms(arrivals.quantile(0.5)),
            p99_ms: ms(arrivals.quantile(0.99)),
            p999_ms: ms(arrivals.quantile(0.999)),
            max_ms: ms(arrivals.longest()),
        }
    }
}

/// Where an advised timeout comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdviceBasis {
    /// Within the observed percentiles.
    Observed,
    /// Beyond p99.9: the exponential tail extrapolated from p99 and p99.9.
    Extrapolated,
    /// The longest gap seen: the target is rarer than one in the gaps observed, and
    /// the tail's extrapolation fell below what did happen.
    LongestSeen,
}

impl AdviceBasis {
    /// Snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Observed => "observed",
            Self::Extrapolated => "extrapolated",
            Self::LongestSeen => "longest_seen",
        }
    }
}

/// The advised timeout for one member's gaps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Advice {
    /// The session timeout, ms, rounded up to 100 ms.
    pub timeout_ms: u64,
    /// The tail probability per gap that the target allows.
    pub tail_probability: f64,
    /// Where the figure comes from.
    pub basis: AdviceBasis,
}

/// The session timeout that keeps false expulsions among `members` members under
/// `per_year`, judged from `gaps` (one member's; use the worst member's advice for a
/// group). `None` with fewer than [`MIN_GAPS`] gaps or nonsensical inputs.
pub fn advise(gaps: &GapSummary, members: usize, per_year: f64) -> Option<Advice> {
    let sensible = per_year.is_finite() && per_year > 0.0;
    if gaps.gaps < MIN_GAPS || gaps.p50_ms == 0 || members == 0 || !sensible {
        return None;
    }
    let beats_per_year = members as f64 * YEAR_SECS * 1000.0 / f64::from(gaps.p50_ms);
    let q = (per_year / beats_per_year).min(0.5);
    let (p50, p99, p999) = (
        f64::from(gaps.p50_ms),
        f64::from(gaps.p99_ms.max(gaps.p50_ms)),
        f64::from(gaps.p999_ms.max(gaps.p99_ms).max(gaps.p50_ms)),
    );
    // Log-linear in q between two known points (q1, t1) and (q2, t2), q1 > q2.
    let between = |q1: f64, t1: f64, q2: f64, t2: f64| {
        t1 + (t2 - t1) * (q1.log10() - q.log10()) / (q1.log10() - q2.log10())
    };
    let (mut timeout, mut basis) = if q >= 0.01 {
        (between(0.5, p50, 0.01, p99), AdviceBasis::Observed)
    } else if q >= 0.001 {
        (between(0.01, p99, 0.001, p999), AdviceBasis::Observed)
    } else {
        let decade = (p999 - p99).max(0.0);
        (
            p999 + decade * (0.001 / q).log10(),
            AdviceBasis::Extrapolated,
        )
    };
    let max = f64::from(gaps.max_ms);
    if q < 1.0 / f64::from(gaps.gaps) && timeout < max {
        timeout = max;
        basis = AdviceBasis::LongestSeen;
    }
    let timeout_ms = ((timeout / 100.0).ceil() * 100.0) as u64;
    Some(Advice {
        timeout_ms,
        tail_probability: q,
        basis,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(p50: u32, p99: u32, p999: u32, max: u32, n: u32) -> GapSummary {
        GapSummary {
            gaps: n,
            p50_ms: p50,
            p99_ms: p99,
            p999_ms: p999,
            max_ms: max,
        }
    }

    #[test]
    fn a_rare_target_extrapolates_the_tail_by_decades() {
        // 1,000 members beating every second: 3.16e10 beats a year; one false
        // expulsion a year allows q = 3.17e-11, 7.5 decades below p99.9.
        let g = gaps(1_000, 1_200, 1_400, 1_500, 100_000);
        let a = advise(&g, 1_000, 1.0).unwrap();
        assert_eq!(a.basis, AdviceBasis::Extrapolated);
        let q = 1.0 / (1_000.0 * YEAR_SECS);
        assert!((a.tail_probability - q).abs() / q < 1e-9);
        // 1,400 + 200 × log10(0.001 / q) = 1,400 + 200 × 7.499 = 2,899.8 → 2,900.
        assert_eq!(a.timeout_ms, 2_900);
    }

    #[test]
    fn a_lax_target_reads_the_observed_percentiles() {
        // Two members, a heartbeat every 10 s: 6.3e6 beats a year; 100,000 false
        // expulsions a year is q ≈ 0.0158, between p50 and p99.
        let g = gaps(10_000, 12_000, 13_000, 13_500, 1_000);
        let a = advise(&g, 2, 100_000.0).unwrap();
        assert_eq!(a.basis, AdviceBasis::Observed);
        assert!(a.timeout_ms > 11_000 && a.timeout_ms <= 12_000, "{a:?}");
    }

    #[test]
    fn never_below_a_gap_that_did_happen_when_the_target_is_rarer() {
        // A pause of 9 s among 200 gaps: the exponential fit from p99/p99.9 knows
        // nothing of it.
        let g = gaps(1_000, 1_100, 1_150, 9_000, 200);
        let a = advise(&g, 10, 1.0).unwrap();
        assert_eq!(a.basis, AdviceBasis::LongestSeen);
        assert_eq!(a.timeout_ms, 9_000);
    }

    #[test]
    fn too_little_to_go_on_gives_no_advice() {
        assert!(advise(&gaps(1_000, 1_100, 1_200, 1_300, 99), 10, 1.0).is_none());
        assert!(advise(&gaps(0, 0, 0, 0, 1_000), 10, 1.0).is_none());
        assert!(advise(&gaps(1_000, 1_100, 1_200, 1_300, 1_000), 0, 1.0).is_none());
        assert!(advise(&gaps(1_000, 1_100, 1_200, 1_300, 1_000), 10, 0.0).is_none());
        assert!(advise(&gaps(1_000, 1_100, 1_200, 1_300, 1_000), 10, f64::NAN).is_none());
    }

    #[test]
    fn a_stricter_target_never_advises_less() {
        let g = gaps(1_000, 1_300, 1_700, 2_500, 50_000);
        let mut last = 0;
        for per_year in [1e6, 1e4, 100.0, 1.0, 0.01] {
            let a = advise(&g, 100, per_year).unwrap();
            assert!(a.timeout_ms >= last, "{per_year}: {a:?}");
            last = a.timeout_ms;
        }
    }
}
