use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

const FLOOR: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn buckets_cover_the_values_in_order() {
    let mut last = 0;
    let mut x = 1.0 / 128.0;
    while x < 40_000.0 {
        let b = bucket(x);
        assert!(b >= last, "order broken at {x}");
        assert!(lower(b) <= x && x < upper(b), "{x} not in bucket {b}");
        assert!(lower(b) <= midpoint(b) && midpoint(b) <= upper(b));
        last = b;
        x *= 1.01;
    }
    assert_eq!(bucket(0.0), 0);
    assert_eq!(bucket(f64::NAN), 0);
    assert_eq!(bucket(1e12), NORM_BUCKETS - 1);
}

#[test]
fn only_gaps_past_the_threshold_ended_gaps_jumps_and_false_expulsions_surprise() {
    let t0 = crate::core::tests::start_instant();
    let mut fleet = Fleet::default();
    // 1 s beats: u = max(1 s, 1.5 s) = 1.5 s.
    for i in 0..100 {
        assert_eq!(
            fleet.learn(t0 + ms(1000 * i), ms(1000 + i % 7), ms(1000), FLOOR, 3),
            Pooled::Body
        );
    }
    assert_eq!(fleet.clean(), 100);
    assert_eq!(fleet.surprises(), 0);
    assert_eq!(fleet.learn(t0, ms(1500), ms(1000), FLOOR, 3), Pooled::Body);
    assert_eq!(
        fleet.learn(t0, ms(1501), ms(1000), FLOOR, 3),
        Pooled::Exceedance
    );
    assert_eq!(
        (fleet.clean(), fleet.surprises(), fleet.exceedances()),
        (0, 1, 1)
    );
    // Fast beats: the floor is the threshold.
    assert_eq!(fleet.learn(t0, ms(900), ms(100), FLOOR, 3), Pooled::Body);
    assert_eq!(fleet.clean(), 1);
    fleet.lost(t0, 3);
    assert_eq!(
        (fleet.clean(), fleet.surprises(), fleet.loss_runs()),
        (0, 2, (1, 3))
    );
    fleet.learn(t0, ms(1000), ms(1000), FLOOR, 3);
    fleet.false_expulsion();
    assert_eq!(
        (fleet.clean(), fleet.surprises(), fleet.false_expulsions()),
        (0, 3, 1)
    );
    assert_eq!(fleet.pooled(), 104);
}

#[test]
fn the_gate_opens_at_exactly_the_clean_count_and_a_false_expulsion_closes_it() {
    let clean_gaps = 20_000;
    let t0 = crate::core::tests::start_instant();
    let mut fleet = Fleet::default();
    fleet.learn(t0, ms(5000), ms(1000), FLOOR, 20);
    for _ in 0..clean_gaps - 1 {
        fleet.learn(t0, ms(1000), ms(1000), FLOOR, 20);
    }
    assert!(fleet.clean() < clean_gaps);
    fleet.learn(t0, ms(1000), ms(1000), FLOOR, 20);
    assert_eq!(fleet.clean(), clean_gaps);
    fleet.false_expulsion();
    assert_eq!(fleet.clean(), 0);
}

#[test]
fn span_and_pooled_history_for_the_advisor() {
    let t0 = crate::core::tests::start_instant();
    let mut fleet = Fleet::default();
    assert_eq!(fleet.span(t0), Duration::ZERO);
    for i in 0..50 {
        fleet.learn(t0 + ms(100 * i), ms(100), ms(100), FLOOR, 1);
    }
    fleet.learn(t0 + ms(5000), ms(2500), ms(100), FLOOR, 1);
    assert_eq!(fleet.span(t0 + ms(10_000)), ms(10_000));
    assert!((fleet.longest() - 25.0).abs() < 1e-3, "{}", fleet.longest());
    let hist: Vec<_> = fleet.normalised_gaps().collect();
    assert_eq!(hist.iter().map(|&(_, _, c)| c).sum::<u32>(), 51);
    assert!(hist
        .iter()
        .any(|&(lo, hi, c)| lo <= 1.0 && 1.0 < hi && c == 50));
    // The excess over u = 1 s is 1.5 s, 15 mean gaps.
    let ex: Vec<_> = fleet.excesses().collect();
    assert!(
        matches!(ex[..], [(lo, hi, 1)] if lo <= 15.0 && 15.0 < hi),
        "{ex:?}"
    );
}

#[test]
fn the_windows_forget_and_the_fit_is_refreshed_at_most_once_a_second() {
    let t0 = crate::core::tests::start_instant();
    let mut fleet = Fleet::default();
    for i in 0..40 {
        fleet.learn(t0, ms(3000 + 100 * i), ms(1000), FLOOR, 1);
    }
    assert!(fleet.refresh(t0, 30, 0.95));
    let epoch = fleet.epoch();
    assert_eq!(fleet.fit().exceedances, 40);
    assert!(fleet.fit().estimate.is_some());
    // Nothing moved: no new fit. Moved, but within a second: none either.
    assert!(!fleet.refresh(t0 + ms(2000), 30, 0.95));
    fleet.learn(t0, ms(9000), ms(1000), FLOOR, 1);
    assert!(!fleet.refresh(t0 + ms(900), 30, 0.95));
    assert!(fleet.refresh(t0 + ms(1000), 30, 0.95));
    assert_ne!(fleet.epoch(), epoch);
    assert_eq!(fleet.fit().exceedances, 41);
    // A window of calm halves the counts, two forget the longest gap.
    for _ in 0..2 * WINDOW {
        fleet.learn(t0, ms(1000), ms(1000), FLOOR, 1);
    }
    // 41, then 20 and 10 at most (each bucket's count is halved, rounding down).
    assert!(
        (5..=10).contains(&fleet.exceedances()),
        "{}",
        fleet.exceedances()
    );
    assert!(fleet.longest() < 1.01);
    assert!(fleet.refresh(t0 + ms(5000), 30, 0.95));
    assert_eq!(fleet.fit().estimate, None, "below 30 exceedances no shape");
}

#[test]
fn the_histogram_fit_recovers_a_pareto_tail_and_its_bound_is_heavier() {
    let mut rng = SmallRng::seed_from_u64(11);
    let t0 = crate::core::tests::start_instant();
    let mut fleet = Fleet::default();
    // 1 s beats, u = 1.5 s; excesses over u Pareto(1.5)-distributed, in mean gaps
    // (GPD ξ = 2/3, σ = 2/3).
    for _ in 0..2000 {
        let excess = (1.0 - rng.gen::<f64>()).powf(-1.0 / 1.5) - 1.0;
        let gap = Duration::from_secs_f64(1.5 + excess + 1e-4);
        fleet.learn(t0, gap, ms(1000), FLOOR, 1000);
    }
    let fit = fleet.fit_now(30, 0.95);
    let est = fit.estimate.unwrap();
    assert!((est.xi - 2.0 / 3.0).abs() <= 0.15, "{est:?}");
    let bound = fit.bound.unwrap();
    assert!(bound.xi > est.xi && bound.sigma > est.sigma, "{bound:?}");
    // Every gap was an exceedance: the rate bound is 1, and nothing under a minute is
    // allowed at 1e-6.
    assert_eq!(fit.rate_upper, 1.0);
    assert_eq!(fit.expel_after(1.0, 1.5, 1.15, 60.0, 1e-6), 60.0);
}

#[test]
fn a_calm_fleet_with_an_exponential_tail_allows_an_early_expulsion() {
    let mut rng = SmallRng::seed_from_u64(5);
    let t0 = crate::core::tests::start_instant();
    let mut fleet = Fleet::default();
    // 1 s beats; one gap in 200 is longer than 1.5 s, by an exponential excess of
    // 0.1 s on average.
    for _ in 0..20_000 {
        let gap = if rng.gen_range(0..200) == 0 {
            1.5 + 1e-4 - 0.1 * (1.0 - rng.gen::<f64>()).ln()
        } else {
            1.0
        };
        fleet.learn(t0, Duration::from_secs_f64(gap), ms(1000), FLOOR, 20);
    }
    let fit = fleet.fit_now(30, 0.95);
    assert!(fit.exceedances >= 30, "{fit:?}");
    let bound = fit.bound.unwrap();
    assert!(bound.xi >= 0.0 && bound.xi < 0.5, "{bound:?}");
    let e = fit.expel_after(1.0, 1.5, 1.15, 10.0, 1e-6);
    assert!(e > 1.5 && e < 10.0, "{e} from {fit:?}");
    // It is where the bound reaches 1e-6, to a millisecond.
    assert!(fit.exceed_upper(e, 1.0, 1.5) <= 1e-6);
    assert!(fit.exceed_upper(e - 2e-3, 1.0, 1.5) > 1e-6);
    // Long runs of lost beats push it later.
    let mut lossy = fit.clone();
    (lossy.runs, lossy.lost) = (50, 400);
    (lossy.runs_per_beat, lossy.continuation) = tail::loss_bounds(50, 400, 20_000, 0.95);
    let later = lossy.expel_after(1.0, 1.5, 1.15, 600.0, 1e-6);
    assert!(later > e + 10.0, "{later} against {e}");
    // Without a fitted shape: the session.
    assert_eq!(Fit::default().expel_after(1.0, 1.5, 1.15, 10.0, 1e-6), 10.0);
}
