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
    for (k, n) in [(3, 50), (40, 36_000), (500, 1_000_000)] {
        let p = upper_bound(k, n);
        assert!(p > k as f64 / n as f64 && p < 2.0 * (k + 3) as f64 / n as f64);
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
    // 20 members at 1 s beat 6.3e8 times a year: 5,000 a year allows 7.9e-6 a gap,
    // below what 200,000 gaps bound alone (1.5e-5), within a decade of it.
    let t = timeout(advise(&tailed(200_000, 29, -300), &target(5_000.0, 20)));
    assert_eq!(t.basis, Basis::PauseFloor);
    let t = timeout(advise(&tailed(200_000, 400, -300), &target(5_000.0, 20)));
    assert_eq!(t.basis, Basis::Tail, "{t:?}");
    // A fitted finite endpoint (ξ < 0) is not trusted: ξ is bounded at 0 from below.
    assert!(t.shape_upper.unwrap() >= 0.0);
    assert!(t.promise_per_year <= 5_000.0 * (1.0 + 1e-9), "{t:?}");
}

#[test]
fn the_tail_claims_at_most_a_decade_beyond_the_gaps_counted() {
    // One a year is 1.6e-9 a gap: seven decades below what 200,000 gaps bound.
    let s = tailed(200_000, 400, -300);
    let t = timeout(advise(&s, &target(1.0, 20)));
    assert_eq!(t.basis, Basis::PauseFloor, "{t:?}");
    let least = upper_bound(0, 200_000) / MAX_EXTRAPOLATION;
    assert!(t.bound >= least * (1.0 - 1e-9), "{t:?}");
    assert!(t.promise_per_year > 1.0);
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
fn the_poisson_quantile_is_the_upper_one() {
    assert_eq!(poisson_quantile(0.0), 0);
    // Mean 1: P(X ≤ 2) = 0.920, P(X ≤ 3) = 0.981.
    assert_eq!(poisson_quantile(1.0), 3);
    // Mean 10: P(X ≤ 15) = 0.951.
    assert_eq!(poisson_quantile(10.0), 15);
    assert!(poisson_quantile(1e6) > 1_001_000);
}

/// A group of `members` members beating every `beat`, fed to a fleet for `secs`
/// seconds; every `pause_every`-th gap of a member (0: never) is `pause` long instead.
fn fleet_of(
    members: usize,
    beat: Duration,
    secs: u64,
    pause_every: u64,
    pause: impl Fn(u64) -> Duration,
) -> (Fleet, Vec<Arrivals>, Instant) {
    let start = crate::core::tests::start_instant();
    let mut fleet = Fleet::default();
    let mut arrivals = vec![Arrivals::default(); members];
    let mut at = vec![start; members];
    let mut sequence = vec![0u64; members];
    let end = start + Duration::from_secs(secs);
    let mut i = 0u64;
    let floor = Duration::from_secs(1);
    loop {
        let mut progressed = false;
        for (m, a) in arrivals.iter_mut().enumerate() {
            i += 1;
            // A multiplicative hash spreads the pauses over members and time.
            let spread = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
            let gap = if pause_every > 0 && spread.is_multiple_of(pause_every) {
                pause(i)
            } else {
                beat
            };
            if at[m] + gap > end {
                continue;
            }
            progressed = true;
            let mean = a.mean();
            at[m] += gap;
            sequence[m] += 1;
            if let Some(gap) = a.beat(at[m], sequence[m]).gap.filter(|_| sequence[m] > 2) {
                fleet.learn(at[m], gap, mean, floor, members);
            }
        }
        if !progressed {
            break;
        }
    }
    (fleet, arrivals, end)
}

#[test]
fn the_summary_of_a_fleet_is_what_the_advisor_needs() {
    // The loopback group for 18 s: not yet.
    let (fleet, arrivals, now) =
        fleet_of(20, Duration::from_millis(100), 18, 0, |_| Duration::ZERO);
    let s = summarise(&fleet, arrivals.iter(), Duration::from_secs(1), now);
    assert_eq!(s.gap_median_ms, 100);
    assert!(s.pooled_gaps >= 3_500 && s.span_ms < 18_000, "{s:?}");
    assert!(matches!(
        advise(&s, &target(1.0, 20)),
        Advice::NotYet { .. }
    ));
    // For ten minutes: the pause floor, the median gap + 3 s, and no claim of a tail.
    let (fleet, arrivals, now) =
        fleet_of(20, Duration::from_millis(100), 620, 0, |_| Duration::ZERO);
    let s = summarise(&fleet, arrivals.iter(), Duration::from_secs(1), now);
    let t = timeout(advise(&s, &target(1.0, 20)));
    assert_eq!((t.basis, t.timeout_ms), (Basis::PauseFloor, 3_100), "{s:?}");
    assert!(t.promise_per_year > 1e5);
    // Every length of the ladder counts at least the gaps longer than it.
    assert!(s.tail.iter().all(|c| c.gaps <= s.tail_gaps));
    assert!(s
        .tail
        .windows(2)
        .all(|w| w[0].over_centi < w[1].over_centi && w[0].gaps >= w[1].gaps));
}

#[test]
fn a_fleet_with_heavy_pauses_gets_the_tail_fit_and_no_promise_it_cannot_keep() {
    // 1 s beats; one gap in 50 a pause of 1.5 to 30 s, Pareto-like (shape about 0.7).
    let (fleet, arrivals, now) = fleet_of(20, Duration::from_secs(1), 3_600, 50, |i| {
        let u = (((i.wrapping_mul(2_654_435_761) >> 7) % 1_000) as f64 + 0.5) / 1_000.0;
        Duration::from_secs_f64((1.5 * u.powf(-0.7)).min(30.0))
    });
    let s = summarise(&fleet, arrivals.iter(), Duration::from_secs(1), now);
    assert!(s.exceedances >= 30 && s.scale_centi > 0, "{s:?}");
    let t = timeout(advise(&s, &target(1.0, 20)));
    assert!(
        matches!(t.basis, Basis::Unreachable | Basis::PauseFloor),
        "{t:?}"
    );
    assert!(t.shape_upper.unwrap() > 0.3, "{t:?}");
    assert!(t.promise_per_year > 1e3, "{t:?}");
    // The floor is above every gap seen, with headroom.
    assert!(
        t.timeout_ms as f64 >= 1.15 * t.longest_ms as f64 - 100.0,
        "{t:?}"
    );
}

#[test]
fn runs_of_lost_beats_count_against_the_promise() {
    // Loss gaps are not among the gaps counted: the runs of lost beats are bounded on
    // their own (Gilbert's model) and added.
    let quiet = summary(200_000, 7_200, 1_000, 2_000, &[(150, 100)]);
    let lossy = DetectionSummary {
        loss_runs: 2_000,
        lost_beats: 6_000,
        ..quiet.clone()
    };
    let a = timeout(advise(&quiet, &target(1e5, 20)));
    let b = timeout(advise(&lossy, &target(1e5, 20)));
    assert!(b.promise_per_year > a.promise_per_year, "{a:?} {b:?}");
    assert!(b.timeout_ms >= a.timeout_ms, "{a:?} {b:?}");
}
