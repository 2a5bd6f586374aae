//! The replay through the coordinator: the one-member adapter the lab used to be
//! ([`Replay`]), by hand; the group replay's connections, lease and guards; and the
//! group replay against the adapter on the tests' traces.

use std::time::{Duration, Instant};

use super::*;
use crate::core::liveness::Thresholds;
use crate::core::liveness::{Replay, Verdicts};

fn at(start: Instant, secs: f64) -> Instant {
    start + Duration::from_secs_f64(secs)
}

/// A fixed 4 s timeout (suspect after 2 s), beats every second, by hand: a 3 s gap
/// is a suspicion that three on-time beats end; a 5 s gap an expulsion and a
/// rejoin; a beat at the very deadline is in time.
#[test]
fn a_fixed_timeout_replayed_by_hand() {
    let start = crate::core::tests::start_instant();
    let mut r = Replay::new(
        DetectorKind::Fixed,
        &DetectorSettings::default(),
        Duration::from_secs(4),
    );
    assert_eq!(r.kind(), DetectorKind::Fixed);
    assert_eq!(r.pending().expel_at, None, "not heard yet");
    for s in 0..=10 {
        assert_eq!(r.arrive(at(start, f64::from(s))), Verdicts::default());
    }
    // 3 s of silence: suspect at 12, not expelled.
    let v = r.arrive(at(start, 13.0));
    assert_eq!(v.suspected, Some(at(start, 12.0)));
    assert_eq!(v.expelled, None);
    assert!(r.is_suspect());
    assert_eq!(r.pending().suspect_at, None, "already suspect");
    // Three on-time beats: alive again at the third.
    assert_eq!(r.arrive(at(start, 14.0)), Verdicts::default());
    assert_eq!(r.arrive(at(start, 15.0)), Verdicts::default());
    assert_eq!(r.arrive(at(start, 16.0)).alive_again, Some(at(start, 16.0)));
    assert!(!r.is_suspect());
    // A beat exactly at the deadline (after a suspicion) is in time.
    let v = r.arrive(at(start, 20.0));
    assert_eq!(v.suspected, Some(at(start, 18.0)));
    assert_eq!(v.expelled, None);
    // Still suspect (a late beat does not count towards recovery); 5 s of silence:
    // expelled at 24, rejoined at 25.
    let v = r.arrive(at(start, 25.0));
    assert_eq!(
        v,
        Verdicts {
            suspected: None,
            expelled: Some(at(start, 24.0)),
            alive_again: Some(at(start, 25.0)),
        }
    );
    assert!(!r.is_expelled() && !r.is_suspect(), "a new member");
    // Silence from here: pending verdicts, then the timers fire.
    assert_eq!(
        r.pending(),
        Pending {
            suspect_at: Some(at(start, 27.0)),
            expel_at: Some(at(start, 29.0)),
        }
    );
    assert_eq!(
        r.advance(at(start, 27.0)),
        Verdicts::default(),
        "not before"
    );
    let v = r.advance(at(start, 40.0));
    assert_eq!(v.suspected, Some(at(start, 27.0)));
    assert_eq!(v.expelled, Some(at(start, 29.0)));
    assert!(r.is_expelled());
    assert_eq!(r.thresholds(), None);
}

/// The adaptive detector, replayed: a young member is judged by the session
/// timeout, a calm one (in a group, of itself alone, that has shown enough calm)
/// by its own gaps, always within the session.
#[test]
fn adaptive_follows_the_members_gaps_within_its_session() {
    let start = crate::core::tests::start_instant();
    let session = Duration::from_secs(10);
    let settings = DetectorSettings {
        clean_gaps: 100,
        ..DetectorSettings::default()
    };
    let mut r = Replay::new(DetectorKind::Adaptive, &settings, session);
    r.arrive(start);
    assert_eq!(r.thresholds(), Some(Thresholds::fixed(session)));
    for s in 1..=200 {
        let v = r.arrive(at(start, f64::from(s)));
        assert_eq!(v, Verdicts::default(), "a calm member at {s} s");
    }
    let t = r.thresholds().expect("heard");
    assert!(t.expel_after < Duration::from_secs(2), "{t:?}");
    assert!(t.expel_after >= DetectorSettings::default().floor);
    // Replays are deterministic: the same arrivals, the same verdicts.
    let mut again = Replay::new(DetectorKind::Adaptive, &settings, session);
    for s in 0..=200 {
        again.arrive(at(start, f64::from(s)));
    }
    assert_eq!(again.pending(), r.pending());
}

// ----------------------------------------------------------------------------------
// A group: every member judged by the one coordinator.
// ----------------------------------------------------------------------------------

use crate::core::tests::detection::{noisy_then_calm_trace, replay, seed_002_trace};

/// Replays `traces` (member by index, arrival times in seconds) merged in time order,
/// each member numbering its beats 1, 2, 3…; returns each member's false expulsions
/// (before `death`) and the expulsion that follows its last arrival.
fn replay_group(
    group: &mut GroupReplay,
    start: Instant,
    traces: &[Vec<f64>],
    death: f64,
) -> Vec<(u32, Option<Instant>)> {
    let mut inputs: Vec<(f64, usize, u64)> = traces
        .iter()
        .enumerate()
        .flat_map(|(m, t)| {
            t.iter()
                .enumerate()
                .map(move |(i, &a)| (a, m, i as u64 + 1))
        })
        .collect();
    inputs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out = vec![(0u32, None); traces.len()];
    let take = |group: &mut GroupReplay, out: &mut Vec<(u32, Option<Instant>)>| {
        while let Some(j) = group.poll_verdict() {
            if let Verdict::Expelled(_) = j.verdict {
                if j.at < at(start, death) {
                    out[j.member].0 += 1;
                }
            }
        }
    };
    for (a, m, seq) in inputs {
        group.beat(at(start, a), m, seq);
        take(group, &mut out);
    }
    for (m, o) in out.iter_mut().enumerate() {
        o.1 = group.pending(m).expel_at;
    }
    out
}

/// Members that share a coordinator are judged each by its own arrivals: with the
/// fixed rule, each member of a group of five finds exactly the false expulsions and
/// detection time the tests' own replay finds for its trace alone (seed 002's trace,
/// whose pause every member has at once, and noisy then calm).
#[test]
fn a_group_judges_each_member_as_the_fixed_rule_alone() {
    let settings = DetectorSettings::default();
    type Trace = fn(u64) -> (Vec<f64>, f64);
    let cases: [(Trace, u64); 2] = [(seed_002_trace, 7919), (noisy_then_calm_trace, 104_729)];
    for (trace, mult) in cases {
        for ms in [2000u64, 4000] {
            let session = Duration::from_millis(ms);
            let start = crate::core::tests::start_instant();
            let runs: Vec<(Vec<f64>, f64)> = (1..=5).map(|s| trace(s * mult)).collect();
            let death = runs[0].1;
            let traces: Vec<Vec<f64>> = runs.iter().map(|r| r.0.clone()).collect();
            let mut group =
                GroupReplay::new(ReplayConfig::new(DetectorKind::Fixed, &settings, session));
            let got = replay_group(&mut group, start, &traces, death);
            for (m, (arrivals, d)) in runs.iter().enumerate() {
                let (want_expelled, want_detection) =
                    replay(&crate::core::FixedTimeout, &settings, arrivals, *d, session);
                let detection = got[m]
                    .1
                    .map(|e| (e.duration_since(start).as_secs_f64() - d).max(0.0));
                assert_eq!(got[m].0, want_expelled, "member {m}, {ms} ms");
                let detection = detection.expect("a member");
                assert!(
                    (detection - want_detection).abs() < 1e-6,
                    "member {m}, {ms} ms: {detection} vs {want_detection}"
                );
            }
        }
    }
}

/// A member whose process dies closes its connection: it is expelled when its lease
/// runs out, counted from its last frame, not at its session timeout.
#[test]
fn a_closed_connection_is_expelled_at_its_lease() {
    let start = crate::core::tests::start_instant();
    let session = Duration::from_secs(10);
    let lease = Duration::from_millis(3250);
    for close in [true, false] {
        let mut group = GroupReplay::new(
            ReplayConfig::new(DetectorKind::Fixed, &DetectorSettings::default(), session)
                .with_lease(lease),
        );
        for s in 0..=100u32 {
            for m in 0..3 {
                group.beat(
                    at(start, f64::from(s) + 0.01 * m as f64),
                    m,
                    u64::from(s) + 1,
                );
            }
        }
        if close {
            group.closed(at(start, 100.001), 0);
            assert_eq!(group.pending(0).expel_at, Some(at(start, 103.25)));
        }
        // The others keep beating.
        for s in 101..=115u32 {
            for m in 1..3 {
                group.beat(
                    at(start, f64::from(s) + 0.01 * m as f64),
                    m,
                    u64::from(s) + 1,
                );
            }
        }
        let expelled: Vec<Judged> = std::iter::from_fn(|| group.poll_verdict())
            .filter(|j| matches!(j.verdict, Verdict::Expelled(_)))
            .collect();
        assert_eq!(expelled.len(), 1, "{expelled:?}");
        assert_eq!(expelled[0].member, 0);
        let want = if close { 103.25 } else { 110.0 };
        assert_eq!(expelled[0].at, at(start, want), "closed: {close}");
        assert!(group.is_expelled(0));
    }
}

/// Three members beating every second under a fixed 2 s session; the coordinator is
/// paused from 10.5 s to 14.5 s and reads their queued beats at its wake. Recorded, the
/// pause is held by the pause guard: nobody is expelled. Without the record, the same
/// arrivals are three silences of 4.5 s, and three expulsions.
#[test]
fn a_recorded_pause_is_held_by_the_pause_guard() {
    let start = crate::core::tests::start_instant();
    for recorded in [true, false] {
        let mut group = GroupReplay::new(ReplayConfig::new(
            DetectorKind::Fixed,
            &DetectorSettings::default(),
            Duration::from_secs(2),
        ));
        let mut seq = 0;
        for s in (0..=10).chain(15..=30) {
            seq += 1;
            if s == 15 {
                if recorded {
                    group.paused(at(start, 14.5), Duration::from_secs(4));
                }
                for m in 0..3 {
                    group.beat(at(start, 14.5), m, seq);
                }
                seq += 1;
            }
            for m in 0..3 {
                group.beat(at(start, f64::from(s)), m, seq);
            }
        }
        let expelled = std::iter::from_fn(|| group.poll_verdict())
            .filter(|j| matches!(j.verdict, Verdict::Expelled(_)))
            .count();
        assert_eq!(
            expelled,
            if recorded { 0 } else { 3 },
            "recorded: {recorded}"
        );
    }
}

/// Five members fall silent together for 3 s under a fixed 2 s session. When the trace
/// recorded that the whole server heard nothing then, the isolation guard holds them;
/// when the server heard frames throughout (it serves other groups), their silence is
/// their own, and all five are expelled.
#[test]
fn a_recorded_silence_of_the_server_is_held_by_the_isolation_guard() {
    let start = crate::core::tests::start_instant();
    for recorded in [true, false] {
        let mut group = GroupReplay::new(ReplayConfig::new(
            DetectorKind::Fixed,
            &DetectorSettings::default(),
            Duration::from_secs(2),
        ));
        for s in (0..=10).chain(13..=20) {
            if s == 13 && recorded {
                group.silent(at(start, 13.0), Duration::from_secs(3));
            }
            for m in 0..5 {
                group.beat(at(start, f64::from(s)), m, s as u64 + 1);
            }
        }
        let expelled = std::iter::from_fn(|| group.poll_verdict())
            .filter(|j| matches!(j.verdict, Verdict::Expelled(_)))
            .count();
        assert_eq!(
            expelled,
            if recorded { 0 } else { 5 },
            "recorded: {recorded}"
        );
    }
}

/// The replay's sequence numbers reach the coordinator: a jump counts lost beats.
#[test]
fn sequence_numbers_reach_the_coordinator() {
    let start = crate::core::tests::start_instant();
    let mut group = GroupReplay::new(ReplayConfig::new(
        DetectorKind::Fixed,
        &DetectorSettings::default(),
        Duration::from_secs(10),
    ));
    for (s, seq) in [(0.0, 1), (1.0, 2), (2.0, 3), (5.0, 6), (6.0, 7)] {
        group.beat(at(start, s), 0, seq);
    }
    let m = group.member(0).expect("a member");
    assert_eq!(m.liveness.arrivals().lost(), 2);
    let _: Option<Thresholds> = group.thresholds(0);
}
