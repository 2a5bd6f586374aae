//! Failure detection: the suspect state and its consequences, the adaptive detector
//! through the core, shadow verdicts, lost and late beats, and the adaptive detector
//! against the best fixed timeout on replayed traces.

use std::time::{Duration, Instant};

use super::*;
use crate::core::liveness::fleet::Pooled;
use crate::core::liveness::{Arrivals, Detector, DetectorKind, DetectorSettings, Fleet};
use crate::core::{RebalanceCause, ShadowVerdict};

const BEAT: Duration = Duration::from_secs(1);

/// Pooled gaps without a surprise after which a test group is clean: the groups here
/// have a member or two, and show a few dozen calm gaps before they are judged.
const CLEAN_GAPS: u64 = 50;

fn config(detector: DetectorKind, shadow: Option<DetectorKind>) -> CoreConfig {
    CoreConfig {
        detector,
        shadow_detector: shadow,
        detector_settings: DetectorSettings {
            clean_gaps: CLEAN_GAPS,
            ..DetectorSettings::default()
        },
        ..CoreConfig::default()
    }
}

/// Advances `n` heartbeat intervals, every member of `beating` beating once in each.
fn beat_for(t: &mut TestContext, beating: &mut [&mut M], n: u32, every: Duration) {
    for _ in 0..n {
        t.advance(every);
        for m in beating.iter_mut() {
            t.expect_beat_ok(m);
        }
    }
}

fn suspected(t: &TestContext, m: &M) -> usize {
    t.events
        .iter()
        .filter(|e| matches!(e, Event::MemberSuspected { member_id, .. } if *member_id == m.id))
        .count()
}

fn recovered(t: &TestContext, m: &M) -> usize {
    t.events
        .iter()
        .filter(|e| matches!(e, Event::MemberRecovered { member_id, .. } if *member_id == m.id))
        .count()
}

fn expelled_at(t: &TestContext, m: &M) -> bool {
    t.events
        .iter()
        .any(|e| matches!(e, Event::MemberRemoved { member_id, .. } if *member_id == m.id))
}

/// A suspect member keeps what it owns, is given nothing new by a rebalance computed
/// while it is suspect, becomes alive only after several on-time heartbeats, and then
/// gets its share back.
#[test]
fn a_suspect_member_keeps_its_partitions_and_gets_nothing_new_until_it_recovers() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 9)]);
    let mut b = t.join(2, "g", &[("orders", 9)]);
    let mut c = t.join(3, "g", &[("orders", 9)]);
    for _ in 0..3 {
        beat_for(&mut t, &mut [&mut a, &mut b, &mut c], 1, BEAT);
        t.ack_all(&mut a);
        t.ack_all(&mut b);
        t.ack_all(&mut c);
    }
    beat_for(&mut t, &mut [&mut a, &mut b, &mut c], 1, BEAT);
    assert_eq!([&a, &b, &c].map(|m| count(&t.owned(m))), [3, 3, 3]);

    // `b` falls silent past half its session: suspect, with an event.
    beat_for(&mut t, &mut [&mut a, &mut c], 6, BEAT);
    assert_eq!(suspected(&t, &b), 1, "suspected once");
    let d = t.describe("g");
    let db = d.members.iter().find(|m| m.member_id == b.id).unwrap();
    assert_eq!(db.liveness, rollcall_protocol::Liveness::Suspect);

    // `a` leaves while `b` is suspect: `b` keeps its 3 and is given none of `a`'s.
    t.leave(&a);
    beat_for(&mut t, &mut [&mut c], 1, Duration::from_millis(500));
    assert_eq!(count(&t.owned(&b)), 3, "suspect b was given partitions");
    assert_eq!(count(&t.owned(&c)), 6, "c took a's partitions");
    t.assert_exclusive("g");

    // One on-time heartbeat is not enough to be alive again.
    t.expect_beat_ok(&mut b);
    assert_eq!(recovered(&t, &b), 0);
    // Three on-time heartbeats are, and its target is whole again.
    beat_for(&mut t, &mut [&mut b, &mut c], 3, BEAT);
    assert_eq!(recovered(&t, &b), 1, "recovered after three on-time beats");
    for _ in 0..3 {
        t.ack_all(&mut b);
        t.ack_all(&mut c);
        beat_for(&mut t, &mut [&mut b, &mut c], 1, BEAT);
    }
    assert!(t.events.iter().any(|e| matches!(
        e,
        Event::RebalanceStarted {
            cause: RebalanceCause::Recovery,
            ..
        }
    )));
    let shares = [&b, &c].map(|m| count(&t.owned(m)));
    assert_eq!(shares.iter().sum::<usize>(), 9);
    assert!(shares.iter().all(|&s| s >= 4), "balanced again: {shares:?}");
    t.assert_exclusive("g");
}

/// A late heartbeat resets the streak: a member that keeps beating late stays suspect.
#[test]
fn late_heartbeats_keep_a_member_suspect_and_are_counted() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 2)]);
    beat_for(&mut t, &mut [&mut a], 2, BEAT);
    for _ in 0..4 {
        t.advance(Duration::from_secs(6));
        t.expect_beat_ok(&mut a);
    }
    assert!(!expelled_at(&t, &a));
    assert_eq!(recovered(&t, &a), 0, "never on time, never recovered");
    assert!(suspected(&t, &a) >= 1);
    let d = t.describe("g");
    assert_eq!(d.members[0].liveness, rollcall_protocol::Liveness::Suspect);
}

/// The adaptive detector expels a member with a calm history after a short silence,
/// well inside its session timeout; a young member is judged by the session timeout.
#[test]
fn adaptive_expels_a_calm_member_soon_and_a_young_one_at_its_session() {
    let mut t = TestContext::with_config(config(DetectorKind::Adaptive, None));
    let mut old = t.join(1, "g", &[("orders", 4)]);
    beat_for(&mut t, &mut [&mut old], 100, BEAT);
    let mut young = t.join(2, "g", &[("orders", 4)]);
    beat_for(&mut t, &mut [&mut old, &mut young], 5, BEAT);
    // Both fall silent.
    let silent_at = t.now;
    t.advance(Duration::from_secs(3));
    assert!(
        expelled_at(&t, &old),
        "a calm member is expelled within 3 s"
    );
    assert!(
        !expelled_at(&t, &young),
        "a young member waits for its session"
    );
    t.advance(SESSION);
    assert!(expelled_at(&t, &young));
    assert!(t.now - silent_at <= SESSION + Duration::from_secs(3));
}

/// A shadow detector reports what it would have done and changes nothing.
#[test]
fn a_shadow_detector_reports_would_be_expulsions_without_acting() {
    let mut t = TestContext::with_config(config(DetectorKind::Fixed, Some(DetectorKind::Adaptive)));
    let mut a = t.join(1, "g", &[("orders", 2)]);
    beat_for(&mut t, &mut [&mut a], 100, BEAT);
    // Four seconds of silence: the fixed 10 s session keeps the member; the adaptive
    // shadow, which has seen only 1 s gaps, would have expelled it.
    t.advance(Duration::from_secs(4));
    t.expect_beat_ok(&mut a);
    assert!(!expelled_at(&t, &a));
    let verdicts: Vec<ShadowVerdict> = t
        .events
        .iter()
        .filter_map(|e| match e {
            Event::ShadowVerdict {
                verdict, detector, ..
            } => {
                assert_eq!(*detector, DetectorKind::Adaptive);
                Some(*verdict)
            }
            _ => None,
        })
        .collect();
    assert_eq!(verdicts, vec![ShadowVerdict::Expel]);
}

/// Sequence gaps count as lost beats.
#[test]
fn sequence_gaps_are_lost_beats() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 2)]);
    beat_for(&mut t, &mut [&mut a], 3, BEAT);
    a.seq += 2; // two beats the client sent never arrived
    beat_for(&mut t, &mut [&mut a], 1, BEAT);
    let core = &t.core;
    let g = core.groups.get("g").unwrap();
    let m = g.members.values().next().unwrap();
    assert_eq!(m.liveness.arrivals().lost(), 2);
}

// ----------------------------------------------------------------------------------
// Replayed traces: the detector code the core runs, fed arrival times.
// ----------------------------------------------------------------------------------

/// A small deterministic generator (xorshift), so traces are the same on every run.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Seed 002's trace: a heartbeat every second with up to ±100 ms of jitter, a 3.5 s
/// stop-the-world pause at 40 s, death at 100 s. Arrival times in seconds.
pub(in crate::core) fn seed_002_trace(seed: u64) -> (Vec<f64>, f64) {
    let mut rng = Rng(seed);
    let mut arrivals = Vec::new();
    let mut t = 1.0;
    while t < 100.0 {
        let mut at = t + (rng.unit() - 0.5) * 0.2;
        if (40.0..43.5).contains(&at) {
            at = 43.5 + rng.unit() * 0.05;
        }
        if arrivals.last().is_none_or(|&last| at > last) {
            arrivals.push(at);
        }
        t += 1.0;
    }
    (arrivals, 100.0)
}

/// A heartbeat sent every second over a network that is noisy for ten minutes (each
/// beat delayed by up to 2.5 s, delivered in order) and then calm for twenty (up to
/// 50 ms), then death.
pub(in crate::core) fn noisy_then_calm_trace(seed: u64) -> (Vec<f64>, f64) {
    let mut rng = Rng(seed);
    let mut arrivals: Vec<f64> = Vec::new();
    let mut sent = 0.0;
    while sent < 1800.0 {
        sent += 1.0;
        let delay = if sent < 600.0 { 2.5 } else { 0.05 } * rng.unit();
        let at = arrivals
            .last()
            .map_or(sent + delay, |&l| (sent + delay).max(l + 0.001));
        arrivals.push(at);
    }
    (arrivals, sent + 0.5)
}

/// Replays `arrivals` through `detector` with a session timeout of `session`: whether
/// any silence before the death was convicted, and how long after the death the
/// silence after the last arrival is convicted.
///
/// The member is a group of its own: its gaps are all its fleet has seen, pooled as
/// the core pools them (a gap past `max(floor, 1.5 · mean)` is a surprise).
pub(in crate::core) fn replay(
    detector: &dyn Detector,
    settings: &DetectorSettings,
    arrivals: &[f64],
    death: f64,
    session: Duration,
) -> (u32, f64) {
    let start = Instant::now();
    let at = |s: f64| start + Duration::from_secs_f64(s);
    let mut a = Arrivals::default();
    let mut fleet = Fleet::default();
    let mut beat = |a: &mut Arrivals, now: Instant, sequence: u64| {
        let (mean, rhythm) = (a.mean(), a.learned() > 0);
        if let Some(gap) = a.beat(now, sequence).gap.filter(|_| rhythm) {
            if fleet.learn(now, gap, mean, settings.floor, 1) == Pooled::Exceedance {
                a.surprise();
            }
        }
        fleet.refresh(now, settings.tail_min_exceedances, settings.confidence);
        detector
            .thresholds(a, &fleet, session)
            .expel_after
            .as_secs_f64()
    };
    let mut false_expulsions = 0;
    let mut sequence = 0;
    for w in arrivals.windows(2) {
        sequence += 1;
        let expel = beat(&mut a, at(w[0]), sequence);
        if w[1] - w[0] > expel {
            false_expulsions += 1;
        }
    }
    let last = *arrivals.last().unwrap();
    let expel = beat(&mut a, at(last), sequence + 1);
    (false_expulsions, (last + expel - death).max(0.0))
}

/// The best fixed timeout on a trace: the shortest with no false expulsion (just over
/// the longest gap), and its detection time.
fn best_fixed(arrivals: &[f64], death: f64) -> f64 {
    let longest = arrivals.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    let last = *arrivals.last().unwrap();
    (last + longest + 0.001 - death).max(0.0)
}

/// A member that has paused once has shown that it can be silent for long, and one
/// pause says nothing of how long the next one is: after its pause the adaptive
/// detector expels it at its session timeout, as the fixed rule does, and never
/// sooner. (Detecting its crash sooner is the connection's and the lease's work, which
/// a trace of arrivals alone does not show; the detector lab replays it.)
#[test]
fn adaptive_waits_its_session_after_a_pause_on_seed_002s_trace() {
    let settings = DetectorSettings::default();
    let adaptive = DetectorKind::Adaptive.build(&settings);
    let session = Duration::from_secs(10);
    for seed in 1..=20 {
        let (arrivals, death) = seed_002_trace(seed * 7919);
        let (false_expulsions, detection) =
            replay(&*adaptive, &settings, &arrivals, death, session);
        let (_, fixed) = replay(
            &crate::core::FixedTimeout,
            &settings,
            &arrivals,
            death,
            session,
        );
        assert_eq!(
            false_expulsions, 0,
            "seed {seed}: adaptive mourned the pause"
        );
        assert!(
            (detection - fixed).abs() < 1e-6,
            "seed {seed}: adaptive detects in {detection:.2} s, the session timeout in {fixed:.2} s"
        );
    }
}

/// Once the noise is long past and the group has shown enough calm (here a group of
/// one member: a twentieth of the default's pooled gaps, what each of twenty members
/// would show), the member's own calm gaps judge it.
#[test]
fn adaptive_detects_a_crash_in_calm_far_sooner_than_the_best_fixed_timeout() {
    let settings = DetectorSettings {
        clean_gaps: DetectorSettings::default().clean_gaps / 20,
        ..DetectorSettings::default()
    };
    let adaptive = DetectorKind::Adaptive.build(&settings);
    for seed in 1..=20 {
        let (arrivals, death) = noisy_then_calm_trace(seed * 104_729);
        let (false_expulsions, detection) = replay(
            &*adaptive,
            &settings,
            &arrivals,
            death,
            Duration::from_secs(30),
        );
        let fixed = best_fixed(&arrivals, death);
        assert_eq!(
            false_expulsions, 0,
            "seed {seed}: adaptive convicted a live member"
        );
        assert!(
            detection <= 0.4 * fixed,
            "seed {seed}: adaptive detects in {detection:.2} s, best fixed in {fixed:.2} s"
        );
    }
}

/// [`Replay`](crate::core::liveness::Replay), the public replay the detector lab uses,
/// finds the same false expulsions and detection times as the replay above, for fixed
/// timeouts and for the adaptive detector (which, with no false expulsion, never has
/// to rejoin).
#[test]
fn the_public_replay_agrees_with_the_tests_replay() {
    use crate::core::liveness::Replay;
    let settings = DetectorSettings::default();
    type Trace = fn(u64) -> (Vec<f64>, f64);
    let cases: [(Trace, u64, Duration); 2] = [
        (seed_002_trace, 7919, Duration::from_secs(10)),
        (noisy_then_calm_trace, 104_729, Duration::from_secs(30)),
    ];
    for (trace, mult, session) in cases {
        for seed in 1..=3 {
            let (arrivals, death) = trace(seed * mult);
            let setups = [1500u64, 3000, 4500, 6000]
                .map(|ms| (DetectorKind::Fixed, Duration::from_millis(ms)))
                .into_iter()
                .chain([(DetectorKind::Adaptive, session)]);
            for (kind, session) in setups {
                let start = Instant::now();
                let at = |s: f64| start + Duration::from_secs_f64(s);
                let mut r = Replay::new(kind, &settings, session);
                let mut expelled = 0;
                for &a in &arrivals {
                    expelled += u32::from(r.arrive(at(a)).expelled.is_some());
                }
                let detection = r
                    .pending()
                    .expel_at
                    .map(|e| (e.duration_since(start).as_secs_f64() - death).max(0.0));
                let (want_expelled, want_detection) = replay(
                    &*kind.build(&settings),
                    &settings,
                    &arrivals,
                    death,
                    session,
                );
                assert_eq!(expelled, want_expelled, "{kind} {session:?} seed {seed}");
                let detection = detection.expect("heard last");
                assert!(
                    (detection - want_detection).abs() < 1e-6,
                    "{kind} {session:?} seed {seed}: {detection} vs {want_detection}"
                );
            }
        }
    }
}

// ----------------------------------------------------------------------------------
// The group's detector, chosen at join.
// ----------------------------------------------------------------------------------

fn join_asking(t: &mut TestContext, conn: ConnId, detector: &str) -> Result<M, Response> {
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.detector = detector.to_owned();
    t.join_with(conn, req)
}

fn detector_of(t: &mut TestContext) -> String {
    t.describe("g").detection.expect("described").detector
}

#[test]
fn the_first_join_chooses_the_groups_detector_and_later_joins_must_agree() {
    let mut t = TestContext::new();
    let a = join_asking(&mut t, 1, "adaptive").expect("accepted");
    assert_eq!(detector_of(&mut t), "adaptive");
    // Agreeing, or leaving it to the group: accepted.
    join_asking(&mut t, 2, "adaptive").expect("same detector");
    join_asking(&mut t, 3, "").expect("no preference");
    // Another detector while the group has members: refused, and nothing changes.
    let refused = join_asking(&mut t, 4, "fixed").unwrap_err();
    let Response::Error(e) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(e.code, ErrorCode::InvalidRequest);
    assert!(e.message.contains("adaptive"), "{}", e.message);
    assert_eq!(detector_of(&mut t), "adaptive");
    assert_eq!(t.describe("g").members.len(), 3);
    // An unknown name: refused before anything is created.
    let mut req = t.join_request("other", &[("orders", 4)]);
    req.detector = "psychic".into();
    let Err(Response::Error(e)) = t.join_with(5, req) else {
        panic!("an unknown detector was accepted")
    };
    assert_eq!(e.code, ErrorCode::InvalidRequest);
    assert!(
        e.message.contains("unknown detector 'psychic'"),
        "{}",
        e.message
    );
    let _ = a;
}

#[test]
fn a_groups_detector_survives_a_restart() {
    use crate::core::RestoredState;
    use crate::store::{MemoryStore, Store};

    let mut t = TestContext::new();
    let mut a = join_asking(&mut t, 1, "adaptive").expect("accepted");
    beat_for(&mut t, &mut [&mut a], 1, BEAT);
    let store = MemoryStore::new();
    store.write(&t.records).expect("memory store accepts");
    let state: RestoredState = store.load().expect("loads");
    // A coordinator whose default is fixed restores the group's own choice.
    let mut restarted = TestContext::new();
    restarted.core.restore(restarted.now, state);
    assert_eq!(detector_of(&mut restarted), "adaptive");
}

// ----------------------------------------------------------------------------------
// The backlog guard.
// ----------------------------------------------------------------------------------

/// Advances `d` in 100 ms steps, the shell reporting `lag` before each.
fn advance_lagging(t: &mut TestContext, d: Duration, lag: Duration) {
    let steps = (d.as_millis() / 100) as u32;
    for _ in 0..steps {
        let next = t.now + Duration::from_millis(100);
        t.core.observe_lag(next, lag);
        t.advance(Duration::from_millis(100));
    }
}

/// While the coordinator reports itself behind, a silent member is not expelled at its
/// deadline (its heartbeats may be waiting unread); a heartbeat that then arrives
/// keeps it. A member that really died is expelled once the bound is reached: one more
/// session timeout past its deadline.
#[test]
fn a_coordinator_behind_its_frames_holds_expiries_within_a_bound() {
    let mut t = TestContext::new();
    let mut late = t.join(1, "g", &[("orders", 4)]);
    let dead = t.join(2, "g", &[("orders", 4)]);
    beat_for(&mut t, &mut [&mut late], 1, BEAT);
    let lag = Duration::from_millis(500);
    // Both silent past their deadlines while the shell reports a backlog.
    advance_lagging(&mut t, SESSION + Duration::from_secs(2), lag);
    assert!(
        !expelled_at(&t, &late),
        "expelled while the coordinator was behind"
    );
    assert!(
        !expelled_at(&t, &dead),
        "expelled while the coordinator was behind"
    );
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e, Event::BacklogDetected { .. })));
    // The late member's heartbeat comes out of the backlog: it stays.
    t.expect_beat_ok(&mut late);
    // The dead one is expelled at the bound, still behind.
    advance_lagging(&mut t, SESSION, lag);
    assert!(expelled_at(&t, &dead), "held past the bound");
    assert!(t.events.iter().any(|e| matches!(
        e,
        Event::HoldExpired {
            guard: crate::core::Guard::Backlog,
            ..
        }
    )));
    assert!(!expelled_at(&t, &late));
}

/// Without a report of lateness, nothing is held: the guard needs evidence.
#[test]
fn without_a_backlog_expiries_are_on_time() {
    let mut t = TestContext::new();
    let dead = t.join(1, "g", &[("orders", 4)]);
    advance_lagging(
        &mut t,
        SESSION + Duration::from_millis(200),
        Duration::from_millis(20),
    );
    assert!(expelled_at(&t, &dead));
    assert!(!t
        .events
        .iter()
        .any(|e| matches!(e, Event::BacklogDetected { .. })));
}

// ----------------------------------------------------------------------------------
// The expulsion rate limit.
// ----------------------------------------------------------------------------------

/// Six members die at once under a limit of two expulsions per second: two go at
/// their deadline, the rest one every half second; none waits past the bound.
#[test]
fn expulsions_for_silence_are_rate_limited_within_the_bound() {
    let mut t = TestContext::with_config(CoreConfig {
        max_expulsion_rate: 2.0,
        isolation_min_members: 0,
        ..CoreConfig::default()
    });
    let dead: Vec<M> = (1..=6).map(|c| t.join(c, "g", &[("orders", 12)])).collect();
    t.advance(SESSION + Duration::from_millis(1));
    let gone = |t: &TestContext| dead.iter().filter(|m| expelled_at(t, m)).count();
    assert_eq!(gone(&t), 2, "a burst of a second's worth");
    t.advance(Duration::from_millis(500));
    assert_eq!(gone(&t), 3);
    t.advance(Duration::from_millis(1500));
    assert_eq!(gone(&t), 6, "one every half second");
    // Each waiting member reserved its slot once: no recheck storm.
    let held = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::ExpulsionRateLimited))
        .count();
    assert_eq!(held, 4, "four members waited, each once");

    // At a rate so low that the queue cannot drain, the bound still expels them all
    // within one more session timeout.
    let mut t = TestContext::with_config(CoreConfig {
        max_expulsion_rate: 0.01,
        isolation_min_members: 0,
        ..CoreConfig::default()
    });
    let dead: Vec<M> = (1..=4).map(|c| t.join(c, "g", &[("orders", 12)])).collect();
    t.advance(2 * SESSION + Duration::from_millis(1));
    assert!(
        dead.iter().all(|m| expelled_at(&t, m)),
        "held past the bound"
    );
}

/// Prints, when `ROLLCALL_PRINT_REPLAYS` is set, each trace's medians over its 20
/// seeds: detection time and false expulsions of the adaptive detector and of fixed
/// timeouts from 1.5 s to 6 s, and the best fixed timeout (the figures in
/// docs/DETECTION.md).
#[test]
fn print_replays_on_request() {
    if std::env::var_os("ROLLCALL_PRINT_REPLAYS").is_none() {
        return;
    }
    let settings = DetectorSettings::default();
    type Trace = fn(u64) -> (Vec<f64>, f64);
    let traces: [(&str, Trace, u64, Duration); 2] = [
        ("seed 002", seed_002_trace, 7919, Duration::from_secs(10)),
        (
            "noisy then calm",
            noisy_then_calm_trace,
            104_729,
            Duration::from_secs(30),
        ),
    ];
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (name, trace, mult, session) in traces {
        let runs: Vec<(Vec<f64>, f64)> = (1..=20).map(|s| trace(s * mult)).collect();
        println!("{name} (20 seeds, session {session:?}): median detection time, false expulsions in all runs");
        for ms in [1500u64, 2000, 2500, 3000, 3500, 4000, 4500, 5000, 6000] {
            let fixed = crate::core::FixedTimeout;
            let timeout = Duration::from_millis(ms);
            let (det, fe): (Vec<f64>, Vec<u32>) = runs
                .iter()
                .map(|(a, d)| {
                    let (f, t) = replay(&fixed, &settings, a, *d, timeout);
                    (t, f)
                })
                .unzip();
            println!(
                "  fixed {:>5} ms: detection {:.2} s, false expulsions {}",
                ms,
                median(det),
                fe.iter().sum::<u32>()
            );
        }
        let best: Vec<f64> = runs.iter().map(|(a, d)| best_fixed(a, *d)).collect();
        println!(
            "  best fixed (just over the longest gap): detection {:.2} s",
            median(best)
        );
        // A trace is one member: alone, and as one of twenty (the gate at a twentieth
        // of the pooled gaps, what each of twenty members would show).
        let one_of_twenty = DetectorSettings {
            clean_gaps: settings.clean_gaps / 20,
            ..settings.clone()
        };
        for (label, settings) in [("alone", &settings), ("one of 20", &one_of_twenty)] {
            let adaptive = DetectorKind::Adaptive.build(settings);
            let (det, fe): (Vec<f64>, Vec<u32>) = runs
                .iter()
                .map(|(a, d)| {
                    let (f, t) = replay(&*adaptive, settings, a, *d, session);
                    (t, f)
                })
                .unzip();
            println!(
                "  adaptive ({label}): detection {:.2} s, false expulsions {}",
                median(det),
                fe.iter().sum::<u32>()
            );
        }
    }
}

/// When the adaptive detector's thresholds shrink (the member has shown enough calm
/// gaps), its timer moves earlier with them: a member that dies then is expelled after
/// the short threshold, not at a timer set under the fixed rule.
#[test]
fn shrinking_thresholds_bring_the_members_timer_earlier() {
    let mut t = TestContext::with_config(config(DetectorKind::Adaptive, None));
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.session_timeout_ms = 30_000;
    let mut m = t.join_with(1, req).expect("joined");
    // The thresholds shrink at the 60th gap; under the fixed rule the timer was last
    // set for 15 s after a beat near the 57th second.
    beat_for(&mut t, &mut [&mut m], 62, BEAT);
    let died = t.now;
    t.advance(Duration::from_millis(2500));
    assert!(
        expelled_at(&t, &m),
        "still a member {:?} after its last beat",
        t.now - died
    );
}

/// A Join's answer waits for its records to be durable; the member cannot speak before
/// it arrives. Its session counts from the answer's release, so a slow store does not
/// expel the members it has just let in; a member that never speaks after its answer
/// is expelled a session later.
#[test]
fn a_new_members_session_counts_from_the_release_of_its_join_answer() {
    let mut t = TestContext::with_config(CoreConfig {
        isolation_min_members: 0,
        ..CoreConfig::default()
    });
    let m = t.join(1, "g", &[("orders", 4)]);
    // The answer leaves 8 s after the join (the store was slow).
    t.advance(Duration::from_secs(8));
    let at = t.now;
    t.core
        .answers_released(at, &[("g".to_owned(), m.id.clone())]);
    t.advance(SESSION - Duration::from_secs(1));
    assert!(
        !expelled_at(&t, &m),
        "expelled before a session after its answer"
    );
    t.advance(Duration::from_secs(2));
    assert!(expelled_at(&t, &m), "silent for a session after its answer");
}

/// The exported advice: a group whose members' gaps call for more than their session
/// timeout is counted; one with calm members is not; one too young is not judged.
#[test]
fn groups_below_the_advised_timeout_are_counted() {
    let mut t = TestContext::new();
    let mut calm = t.join(1, "calm", &[("t", 2)]);
    let mut rough = t.join(2, "rough", &[("t", 2)]);
    assert_eq!(t.core.groups_below_advice(1.0), 0, "nobody has history yet");
    // 3,100 gaps of the rough member (the advisor needs 3,000 of its group's, over 10
    // minutes), and twice as many of the calm one: the calm member's all 0.5 s; the
    // rough one's 1 s, but every 50th 4 s (2 %) and every 400th 9 s (0.25 %): no
    // timeout under 1.15 times its longest gap, past the session timeout, is advised.
    for i in 1..=3_100u32 {
        t.advance(Duration::from_millis(500));
        t.beat(&mut calm);
        let gap = if i % 400 == 0 {
            9_000
        } else if i % 50 == 0 {
            4_000
        } else {
            1_000
        };
        // Keep the calm member beating through the rough one's long gaps.
        let mut waited = 500;
        while waited + 500 <= gap {
            t.advance(Duration::from_millis(500));
            t.beat(&mut calm);
            waited += 500;
        }
        t.advance(Duration::from_millis((gap - waited) as u64));
        t.beat(&mut rough);
    }
    assert!(t.expelled(&rough).is_none() && t.expelled(&calm).is_none());
    assert!(SESSION < Duration::from_secs(20), "{SESSION:?}");
    assert_eq!(t.core.groups_below_advice(1.0), 1);
    // However lax the target, the advice stays above the longest gap seen.
    assert_eq!(t.core.groups_below_advice(1e9), 1);
}
