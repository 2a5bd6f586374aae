use super::*;

/// A group's summary: `pooled` gaps over `span_s` seconds, median `median_ms`,
/// longest `longest_ms`, every gap counted by the ladder `tail` (normalised length in
/// hundredths, gaps longer).
fn summary(
    pooled: u64,
    span_s: u64,
    median_ms: u32,
    longest_ms: u32,
    tail: &[(u32, u64)],
) -> DetectionSummary {
    DetectionSummary {
        pooled_gaps: pooled,
        span_ms: span_s * 1000,
        gap_median_ms: median_ms,
        gap_longest_ms: longest_ms,
        longest_centi: longest_ms * 100 / median_ms,
        tail_gaps: pooled,
        tail: tail
            .iter()
            .map(|&(over_centi, gaps)| TailCount { over_centi, gaps })
            .collect(),
        ..DetectionSummary::default()
    }
}

fn target(per_year: f64, members: usize) -> Target {
    Target {
        per_year,
        members,
        pause_floor: DEFAULT_PAUSE_FLOOR,
    }
}

fn timeout(advice: Advice) -> Timeout {
    match advice {
        Advice::Timeout(t) => t,
        Advice::NotYet { .. } => panic!("no advice: {advice:?}"),
    }
}

#[test]
fn the_clopper_pearson_bound_matches_the_tables() {
    // No gap of 1,000 over: 1 − 0.05^(1/1000) = 2.99e-3, the rule of three.
    assert!((upper_bound(0, 1_000) - 2.991e-3).abs() < 1e-6);
    // One in ten: 0.394 (one-sided 95 %).
    assert!(
        (upper_bound(1, 10) - 0.3942).abs() < 1e-3,
        "{}",
        upper_bound(1, 10)
    );
    // At the bound, seeing k or fewer has chance 5 %.
    for (k, n) in [(3, 50), (40, 36_000), (500, 1_000_000)] {
        let p = upper_bound(k, n);
        assert!(p > k as f64 / n as f64);
        assert!((binomial_cdf(k, n, p) - 0.05).abs() < 1e-6, "{k}/{n}: {p}");
    }
    assert_eq!(upper_bound(5, 5), 1.0);
    assert_eq!(upper_bound(0, 0), 1.0);
}

#[test]
fn the_bound_widens_monotonically_as_the_gaps_shrink() {
    // The same proportion (1 in 1,000 long) and none at all, from many gaps to few.
    let mut last = (0.0, 0.0, 0);
    for n in [10_000_000, 1_000_000, 100_000, 30_000, 10_000, 3_000] {
        let none = upper_bound(0, n);
        let some = upper_bound(n / 1_000, n);
        assert!(none > last.0 && some > last.1, "{n}: {none} {some}");
        // The advice says so: the same group with fewer gaps promises less.
        let s = summary(n, 3_600, 1_000, 2_000, &[(150, n / 1_000)]);
        let t = timeout(advise(&s, &target(1.0, 20)));
        assert!(
            t.promise_per_year as u64 >= last.2,
            "{n}: {t:?} after {}",
            last.2
        );
        last = (none, some, t.promise_per_year as u64);
    }
}

#[test]
fn no_advice_below_the_minimum_of_history() {
    let enough = summary(3_000, 600, 1_000, 1_200, &[]);
    assert!(matches!(
        advise(&enough, &target(1.0, 5)),
        Advice::Timeout(_)
    ));
    let few = summary(2_999, 3_600, 1_000, 1_200, &[]);
    assert_eq!(
        advise(&few, &target(1.0, 5)),
        Advice::NotYet {
            gaps: 2_999,
            span: Duration::from_secs(3_600)
        }
    );
    let short = DetectionSummary {
        span_ms: 599_999,
        ..summary(1_000_000, 0, 1_000, 1_200, &[])
    };
    assert!(matches!(
        advise(&short, &target(1.0, 5)),
        Advice::NotYet {
            gaps: 1_000_000,
            ..
        }
    ));
    // Nonsense asks give nothing either.
    assert!(matches!(
        advise(&enough, &target(0.0, 5)),
        Advice::NotYet { .. }
    ));
    assert!(matches!(
        advise(&enough, &target(1.0, 0)),
        Advice::NotYet { .. }
    ));
}

#[test]
fn twenty_members_beating_every_100ms_for_18s_get_no_advice() {
    // 20 × 18 s / 100 ms = 3,600 beats, 3,580 gaps: over the gap minimum, under the span.
    let s = summary(3_580, 18, 100, 130, &[]);
    assert_eq!(
        advise(&s, &target(1.0, 20)),
        Advice::NotYet {
            gaps: 3_580,
            span: Duration::from_secs(18)
        }
    );
}

#[test]
fn after_ten_quiet_minutes_the_loopback_group_gets_the_pause_floor_and_no_tail_claim() {
    // 120,000 gaps, none longer than 130 ms: the data bounds a gap over 3.1 s at
    // 1 − 0.05^(1/120,000) = 2.5e-5, so 1.6e5 false expulsions a year across 20 members
    // beating 10 times a second. It cannot promise 1 a year.
    let s = summary(120_000, 600, 100, 130, &[(120, 2_000)]);
    let t = timeout(advise(&s, &target(1.0, 20)));
    assert_eq!(t.basis, Basis::PauseFloor);
    assert_eq!(t.timeout_ms, 3_100);
    assert!((t.bound - 2.496e-5).abs() < 1e-7, "{t:?}");
    assert!((t.promise_per_year - 1.575e5).abs() < 1e3, "{t:?}");
    assert!(t.floored);
    assert_eq!(t.shape_upper, None);
}

#[test]
fn a_lax_target_is_read_from_the_gaps_counted() {
    // A million gaps, 1 in 1,000 over twice the median, none over 3 times: 10 members at
    // 1 s beat 3.2e8 times a year; 1e5 a year allows 3.2e-4 a gap.
    let s = summary(
        1_000_000,
        36_000,
        1_000,
        3_000,
        &[(150, 10_000), (200, 1_000)],
    );
    let t = timeout(advise(&s, &target(1e5, 10)));
    assert_eq!(t.basis, Basis::Observed);
    assert!(t.promise_per_year <= 1e5, "{t:?}");
    // The pause floor still stands: 1 s + 3 s.
    assert_eq!(t.timeout_ms, 4_000);
    // Without the floor, the gaps alone would allow less than the longest.
    let t = timeout(advise(
        &s,
        &Target {
            pause_floor: Duration::ZERO,
            ..target(1e5, 10)
        },
    ));
    assert_eq!(t.timeout_ms, 3_500, "{t:?}"); // 1.15 × the longest, 3 s
}

/// A group whose gaps above 1.5 times the median follow a generalised Pareto tail of
/// shape `xi` and scale 0.5, with `m` of `n` above the threshold.
fn tailed(n: u64, m: u64, xi_milli: i32) -> DetectionSummary {
    DetectionSummary {
        threshold_centi: 150,
        exceedances: m,
        shape_milli: xi_milli,
        scale_centi: 50,
        ..summary(n, 7_200, 1_000, 4_000, &[(150, m)])
    }
}

#[test]
fn the_tail_basis_needs_thirty_exceedances_and_is_never_lighter_than_exponential() {
    let t = timeout(advise(&tailed(200_000, 29, -300), &target(1.0, 20)));
    assert_eq!(t.basis, Basis::PauseFloor);
    let t = timeout(advise(&tailed(200_000, 400, -300), &target(1.0, 20)));
    assert_eq!(t.basis, Basis::Tail, "{t:?}");
    // A fitted finite endpoint (ξ < 0) is not trusted: ξ is bounded at 0 from below.
    assert!(t.shape_upper.unwrap() >= 0.0);
    assert!(t.promise_per_year <= 1.0 + 1e-9, "{t:?}");
}

#[test]
fn a_heavy_tail_gets_a_plain_no_under_the_cap() {
    let t = timeout(advise(&tailed(200_000, 2_000, 700), &target(1.0, 20)));
    assert_eq!(t.basis, Basis::Unreachable, "{t:?}");
    assert!(t.timeout_ms <= CAP.as_millis() as u64);
    assert!(t.promise_per_year > 1.0);
    assert!(t.shape_upper.unwrap() > 0.7);
}

#[test]
fn the_promise_falls_with_the_allowed_rate() {
    let s = tailed(200_000, 400, 100);
    let mut last = (f64::INFINITY, 0);
    for per_year in [1e6, 1e4, 100.0, 1.0, 0.01] {
        let t = timeout(advise(&s, &target(per_year, 20)));
        assert!(t.promise_per_year <= last.0, "{per_year}: {t:?}");
        assert!(t.timeout_ms >= last.1, "{per_year}: {t:?}");
        if t.basis == Basis::Tail || t.basis == Basis::Observed {
            assert!(t.promise_per_year <= per_year * (1.0 + 1e-9), "{t:?}");
        }
        last = (t.promise_per_year, t.timeout_ms);
    }
    assert!(last.0 < 1e6);
}

#[test]
fn the_poisson_bound_is_the_upper_quantile() {
    assert_eq!(poisson_upper(0.0), 0);
    // Mean 1: P(X ≤ 2) = 0.920, P(X ≤ 3) = 0.981.
    assert_eq!(poisson_upper(1.0), 3);
    // Mean 10: P(X ≤ 15) = 0.951.
    assert_eq!(poisson_upper(10.0), 15);
    assert!(poisson_upper(1e6) > 1_001_000);
}
