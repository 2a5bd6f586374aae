use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

fn close(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() <= rel * want.abs()
}

#[test]
fn clopper_pearson_matches_the_tables() {
    // k = 0: 1 − 0.05^(1/n), the rule of three.
    let b = binomial_upper(0, 1000, 0.95);
    assert!(close(b, 2.991e-3, 1e-3), "{b}");
    // One-sided 95 % upper limits (exact binomial sums, computed independently).
    for (k, n, want) in [
        (1, 10, 0.3942),
        (5, 20, 0.4556),
        (10, 100, 0.16372),
        (50, 1000, 0.06286),
        (3, 3, 1.0),
    ] {
        let got = binomial_upper(k, n, 0.95);
        assert!(close(got, want, 2e-3), "k={k} n={n}: {got} against {want}");
    }
    // Wider with fewer trials, for the same rate.
    assert!(binomial_upper(1, 100, 0.95) > binomial_upper(10, 1000, 0.95));
    assert!(binomial_upper(10, 1000, 0.95) > binomial_upper(100, 10_000, 0.95));
    assert_eq!(binomial_upper(0, 0, 0.95), 1.0);
}

#[test]
fn clopper_pearson_is_quick_and_finite_for_large_counts() {
    let b = binomial_upper(20_000, 10_000_000, 0.95);
    assert!(b > 2e-3 && b < 2.03e-3, "{b}");
    let b = binomial_upper(3, 40_000_000, 0.95);
    assert!(close(b, 7.754 / 40e6, 1e-3), "{b}");
}

#[test]
fn poisson_upper_matches_the_tables() {
    for (k, want) in [
        (0, 2.996),
        (1, 4.744),
        (5, 10.513),
        (10, 16.962),
        (100, 118.08),
    ] {
        let got = poisson_upper(k, 0.95);
        assert!(close(got, want, 3e-3), "k={k}: {got} against {want}");
    }
}

fn pareto(rng: &mut SmallRng, alpha: f64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| (1.0 - rng.gen::<f64>()).powf(-1.0 / alpha))
        .collect()
}

fn fit_samples(mut excesses: Vec<f64>, min: u64) -> Option<Gpd> {
    excesses.sort_by(f64::total_cmp);
    pwm_fit(excesses.into_iter().map(|y| (y, 1)), min)
}

#[test]
fn pwm_recovers_the_shape_of_pareto_draws() {
    for seed in 0..10 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let draws = pareto(&mut rng, 1.5, 2000);
        let fit = fit_samples(draws.iter().map(|x| x - 1.0).collect(), 30).unwrap();
        assert!((fit.xi - 1.0 / 1.5).abs() <= 0.15, "seed {seed}: {fit:?}");
    }
    // A lighter tail, where the estimator is steady: tight on the scale too.
    let mut rng = SmallRng::seed_from_u64(7);
    let draws = pareto(&mut rng, 4.0, 2000);
    let fit = fit_samples(draws.iter().map(|x| x - 1.0).collect(), 30).unwrap();
    assert!((fit.xi - 0.25).abs() <= 0.1, "{fit:?}");
    assert!(close(fit.sigma, 0.25, 0.15), "{fit:?}");
}

#[test]
fn pwm_finds_an_exponential_tail_exponential() {
    let mut rng = SmallRng::seed_from_u64(3);
    let draws: Vec<f64> = (0..2000)
        .map(|_| -2.0 * (1.0 - rng.gen::<f64>()).ln())
        .collect();
    let fit = fit_samples(draws, 30).unwrap();
    assert!(fit.xi.abs() <= 0.1, "{fit:?}");
    assert!(close(fit.sigma, 2.0, 0.1), "{fit:?}");
    // The bound is heavier, and never lighter than exponential.
    let up = fit.upper(2000);
    assert!(
        up.xi >= 0.0 && up.xi >= fit.xi && up.sigma > fit.sigma,
        "{up:?}"
    );
}

#[test]
fn no_fit_below_the_minimum_and_the_bound_is_never_below_zero() {
    let few: Vec<f64> = (1..30).map(f64::from).collect();
    assert_eq!(fit_samples(few.clone(), MIN_EXCEEDANCES), None);
    assert!(fit_samples(few, 10).is_some());
    // A light (bounded) tail: ξ̂ < 0, but its bound is exponential at the lightest.
    let uniform: Vec<f64> = (0..1000).map(|i| f64::from(i) / 1000.0).collect();
    let fit = fit_samples(uniform, 30).unwrap();
    assert!(fit.xi < -0.5, "{fit:?}");
    assert_eq!(fit.upper(1000).xi, 0.0);
    // All equal: an exponential of their mean.
    let fit = pwm_fit([(2.0, 100)], 30).unwrap();
    assert_eq!(
        fit,
        Gpd {
            xi: 0.0,
            sigma: 2.0
        }
    );
}

#[test]
fn gpd_survival_and_excess_invert() {
    for gpd in [
        Gpd {
            xi: 0.0,
            sigma: 1.5,
        },
        Gpd {
            xi: 0.7,
            sigma: 0.3,
        },
        Gpd {
            xi: 0.2,
            sigma: 2.0,
        },
    ] {
        for p in [0.5, 1e-3, 1e-6] {
            let y = gpd.excess_at(p);
            assert!(close(gpd.survival(y), p, 1e-9), "{gpd:?} at {p}");
        }
        assert_eq!(gpd.survival(0.0), 1.0);
    }
}

#[test]
fn gilbert_runs_bound_long_losses() {
    // 100 runs of 300 lost beats in 10,000 beats: b ≈ 2/3.
    let (rho, b) = loss_bounds(100, 300, 10_000, 0.95);
    assert!(rho > 0.01 && rho < 0.013, "{rho}");
    assert!(b > 2.0 / 3.0 && b < 0.72, "{b}");
    // One lost beat makes a gap of two intervals: the run's start alone.
    assert_eq!(loss_upper(rho, b, 2.0), rho);
    assert_eq!(loss_upper(rho, b, 1.0), 1.0);
    // Each further interval needs one more lost beat.
    assert!(close(loss_upper(rho, b, 5.0), rho * b.powi(3), 1e-12));
    // No run seen: the start is bounded by the rule of three, the length by nothing.
    let (rho, b) = loss_bounds(0, 0, 1000, 0.95);
    assert!(close(rho, 2.991e-3, 1e-3));
    assert_eq!(b, 1.0);
}
