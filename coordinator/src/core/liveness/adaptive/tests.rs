use std::time::Instant;

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

const SESSION: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn learned(gaps: impl IntoIterator<Item = u64>) -> Arrivals {
    let mut a = Arrivals::default();
    for g in gaps {
        a.learn(ms(g));
    }
    a
}

fn t0() -> Instant {
    crate::core::tests::start_instant()
}

/// A group of `members` that pooled `gaps` calm 1 s gaps (no surprise).
fn calm_fleet(gaps: u64, members: usize) -> Fleet {
    let (now, mut fleet) = (t0(), Fleet::default());
    for _ in 0..gaps {
        fleet.learn(now, ms(1000), ms(1000), Duration::from_secs(1), members);
    }
    fleet
}

/// A group of 20 members beating every second, whose gaps are long, Pareto-tailed
/// pauses one time in `every` (scale 0.5 s, shape `alpha`).
fn paused_fleet(seed: u64, gaps: u64, every: u32, alpha: f64) -> Fleet {
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut now, mut fleet) = (t0(), Fleet::default());
    let settings = DetectorSettings::default();
    for _ in 0..gaps {
        let gap = if rng.gen_range(0..every) == 0 {
            1.0 + 0.5 * (1.0 - rng.gen::<f64>()).powf(-1.0 / alpha)
        } else {
            1.0
        };
        now += ms(50);
        fleet.learn(
            now,
            Duration::from_secs_f64(gap),
            ms(1000),
            settings.floor,
            20,
        );
        fleet.refresh(now, settings.tail_min_exceedances, settings.confidence);
    }
    fleet
}

#[test]
fn a_young_member_is_judged_by_the_fixed_rule() {
    let d = Adaptive::new(&DetectorSettings::default());
    let mut a = learned([1000; 10]);
    let fleet = calm_fleet(30_000, 20);
    assert_eq!(
        d.thresholds(&mut a, &fleet, SESSION),
        Thresholds::fixed(SESSION)
    );
    assert_eq!(d.basis(&a, &fleet, SESSION), ExpelBasis::Young);
}

#[test]
fn calm_beats_in_a_clean_group_give_short_thresholds_within_the_bounds() {
    let d = Adaptive::new(&DetectorSettings::default());
    let fleet = calm_fleet(20_000, 20);
    let mut a = learned((0..200).map(|i| 980 + (i % 5) * 10));
    let t = d.thresholds(&mut a, &fleet, SESSION);
    assert!(t.expel_after < ms(1800), "{t:?}");
    assert!(t.expel_after > ms(1000), "{t:?}");
    assert!(t.suspect_after <= t.expel_after);
    assert!(t.suspect_after > ms(1000), "{t:?}");
    assert_eq!(d.basis(&a, &fleet, SESSION), ExpelBasis::Clean);
    // It is the body fit: mean + z·sd, the spread at least a tenth of the mean.
    let mean = a.mean().as_secs_f64();
    let sd = a.std_dev().as_secs_f64().max(mean / 10.0);
    let want = mean + sigmas_for_phi(8.0) * sd;
    assert!(
        (t.expel_after.as_secs_f64() - want).abs() < 1e-3,
        "{t:?} against {want}"
    );
    // Fast beats never push below the floor; slow ones never past the session.
    let fast = d.thresholds(&mut learned([10; 200]), &fleet, SESSION);
    assert_eq!(fast.expel_after, DetectorSettings::default().floor);
    let slow = d.thresholds(&mut learned([9000; 200]), &fleet, SESSION);
    assert_eq!(slow.expel_after, SESSION);
}

#[test]
fn the_same_calm_member_waits_its_session_until_the_group_has_shown_enough_calm() {
    let d = Adaptive::new(&DetectorSettings::default());
    let mut a = learned((0..200).map(|i| 980 + (i % 5) * 10));
    let young_group = calm_fleet(19_999, 20);
    let t = d.thresholds(&mut a, &young_group, SESSION);
    assert_eq!(t.expel_after, SESSION);
    assert_eq!(d.basis(&a, &young_group, SESSION), ExpelBasis::Session);
    // Suspicion stays quick.
    assert!(t.suspect_after < ms(1800), "{t:?}");
    let clean = calm_fleet(20_000, 20);
    assert!(d.thresholds(&mut a, &clean, SESSION).expel_after < ms(1800));
}

#[test]
fn a_member_that_surprised_recently_is_judged_by_the_tail_in_a_clean_group() {
    let d = Adaptive::new(&DetectorSettings::default());
    let fleet = calm_fleet(20_000, 20);
    let mut a = learned([1000; 200]);
    a.surprise();
    for _ in 0..OWN_CLEAN_GAPS - 1 {
        a.learn(ms(1000));
    }
    assert_eq!(d.thresholds(&mut a, &fleet, SESSION).expel_after, SESSION);
    a.learn(ms(1000));
    assert!(d.thresholds(&mut a, &fleet, SESSION).expel_after < ms(1800));
}

#[test]
fn a_pause_is_remembered_long_after_the_mean_forgot_it() {
    let d = Adaptive::new(&DetectorSettings::default());
    let session = Duration::from_secs(30);
    let fleet = calm_fleet(20_000, 20);
    let gaps = (0..100)
        .map(|_| 1000)
        .chain([4000])
        .chain((0..300).map(|_| 1000));
    let t = d.thresholds(&mut learned(gaps), &fleet, session);
    let headroom = DetectorSettings::default().tail_headroom;
    assert!(
        t.expel_after >= Duration::from_secs_f64(4.0 * headroom - 0.01),
        "{t:?}"
    );
    assert!(
        t.expel_after <= Duration::from_secs_f64(4.0 * headroom + 0.1),
        "{t:?}"
    );
}

#[test]
fn a_heavy_tailed_group_gives_the_session_timeout() {
    let d = Adaptive::new(&DetectorSettings::default());
    // A pause in 200 gaps, Pareto shape 1.5 (the `heavy-tail` preset's kind).
    let fleet = paused_fleet(1, 40_000, 200, 1.5);
    assert!(fleet.fit().estimate.is_some(), "{:?}", fleet.fit());
    let mut a = learned([1000; 2000]);
    assert_eq!(d.thresholds(&mut a, &fleet, SESSION).expel_after, SESSION);
    // Even a member that never paused itself.
    assert_eq!(d.basis(&a, &fleet, SESSION), ExpelBasis::Session);
}

#[test]
fn a_light_tailed_group_may_convict_before_the_session_timeout() {
    let d = Adaptive::new(&DetectorSettings::default());
    // Pauses one gap in 200, exponential tails of a tenth of a second past 1.5 s.
    let mut rng = SmallRng::seed_from_u64(2);
    let (mut now, mut fleet) = (t0(), Fleet::default());
    for _ in 0..20_000 {
        let gap = if rng.gen_range(0..200) == 0 {
            1.5 + 1e-3 - 0.1 * (1.0 - rng.gen::<f64>()).ln()
        } else {
            1.0
        };
        now += ms(50);
        fleet.learn(
            now,
            Duration::from_secs_f64(gap),
            ms(1000),
            Duration::from_secs(1),
            20,
        );
        fleet.refresh(now, 30, 0.95);
    }
    let mut a = learned([1000; 2000]);
    let session = Duration::from_secs(30);
    let t = d.thresholds(&mut a, &fleet, session);
    assert!(t.expel_after < session && t.expel_after > ms(1500), "{t:?}");
    assert_eq!(d.basis(&a, &fleet, session), ExpelBasis::Tail);
    // Cached: the same until the fit or the member's rhythm moves.
    assert_eq!(d.thresholds(&mut a, &fleet, session), t);
}

#[test]
fn a_false_expulsion_closes_the_gate_and_thresholds_only_grow() {
    let d = Adaptive::new(&DetectorSettings::default());
    let mut fleet = calm_fleet(20_000, 20);
    let mut a = learned([1000; 200]);
    let before = d.thresholds(&mut a, &fleet, SESSION);
    fleet.false_expulsion();
    let after = d.thresholds(&mut a, &fleet, SESSION);
    assert!(
        after.expel_after > before.expel_after,
        "{before:?} {after:?}"
    );
    assert_eq!(after.expel_after, SESSION);
    assert_eq!(
        after.suspect_after, before.suspect_after,
        "suspicion unchanged"
    );
}

fn history() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(
        prop_oneof![
            8 => 900..1100u64,
            1 => 1..20_000u64,
            1 => 50..200u64,
        ],
        0..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever the member and its group have shown, the expulsion threshold stays
    /// within the floor and the session timeout, suspicion within it, and a surprise
    /// never makes it shorter.
    #[test]
    fn thresholds_stay_within_the_floor_and_the_session(
        gaps in history(),
        pooled in history(),
        clean in prop_oneof![Just(0u64), Just(50), Just(20_000)],
        session_ms in 1..60_000u64,
        floor_ms in 1..5_000u64,
        lost in prop::collection::vec(1..20u64, 0..5),
    ) {
        let settings = DetectorSettings {
            floor: ms(floor_ms),
            clean_gaps: clean,
            tail_min_exceedances: 5,
            ..DetectorSettings::default()
        };
        let d = Adaptive::new(&settings);
        let session = ms(session_ms);
        let (mut now, mut fleet) = (t0(), Fleet::default());
        let mut a = Arrivals::default();
        for &g in &pooled {
            now += ms(g);
            let pooled_mean = a.mean();
            fleet.learn(now, ms(g), pooled_mean.max(ms(1)), settings.floor, 3);
            a.learn(ms(g));
        }
        for &run in &lost {
            fleet.lost(now, run);
        }
        now += Duration::from_secs(2);
        fleet.refresh(now, settings.tail_min_exceedances, settings.confidence);
        let mut a = learned(gaps);
        let t = d.thresholds(&mut a, &fleet, session);
        prop_assert!(t.expel_after <= session, "{t:?}");
        prop_assert!(t.expel_after >= settings.floor.min(session), "{t:?}");
        prop_assert!(t.suspect_after <= t.expel_after, "{t:?}");
        fleet.false_expulsion();
        let after = d.thresholds(&mut a, &fleet, session);
        prop_assert!(after.expel_after >= t.expel_after, "{t:?} then {after:?}");
    }
}
