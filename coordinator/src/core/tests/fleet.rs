//! A group's fleet through the core: which heartbeats are surprises, and how a surprise
//! ends a clean spell for every member of the group at once.

use std::time::Duration;

use rollcall_protocol::{ErrorCode, ExpelReason, Response};

use super::*;
use crate::core::liveness::{DetectorKind, DetectorSettings, Thresholds};

const BEAT: Duration = Duration::from_secs(1);

/// An adaptive group whose gate opens after 50 pooled calm gaps.
fn clean_after_50() -> CoreConfig {
    CoreConfig {
        detector: DetectorKind::Adaptive,
        detector_settings: DetectorSettings {
            clean_gaps: 50,
            ..DetectorSettings::default()
        },
        ..CoreConfig::default()
    }
}

fn thresholds(t: &TestContext, m: &M) -> Thresholds {
    let g = t.core.groups.get(m.group.as_str()).expect("group");
    g.members.get(&m.id).expect("member").liveness.thresholds()
}

fn clean(t: &TestContext, group: &str) -> u64 {
    t.core.groups.get(group).expect("group").fleet.clean()
}

fn false_expulsions(t: &TestContext) -> usize {
    t.events
        .iter()
        .filter(|e| matches!(e, Event::FalseExpulsion { .. }))
        .count()
}

fn beat_all(t: &mut TestContext, ms: &mut [&mut M], n: u32) {
    for _ in 0..n {
        t.advance(BEAT);
        for m in ms.iter_mut() {
            t.expect_beat_ok(m);
        }
    }
}

/// A member convicted early in a clean group beats again: its refused heartbeat proves
/// the expulsion false. It is reported once, and every member of the group, silent or
/// not, is judged again at once, at its session timeout.
#[test]
fn a_refused_heartbeat_after_an_expulsion_for_silence_closes_the_gate_for_all() {
    let mut t = TestContext::with_config(clean_after_50());
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    let mut c = t.join(3, "g", &[("orders", 4)]);
    beat_all(&mut t, &mut [&mut a, &mut b, &mut c], 70);
    assert!(clean(&t, "g") >= 50);
    assert!(thresholds(&t, &a).expel_after < Duration::from_secs(2));
    // c pauses for 4 s: convicted within 2 s, in the clean regime.
    beat_all(&mut t, &mut [&mut a, &mut b], 4);
    assert_eq!(t.expelled(&c), Some(ExpelReason::SessionExpired));
    assert_eq!(false_expulsions(&t), 0);
    // Its next heartbeat is refused, and proves it was alive.
    let Response::Error(e) = t.beat(&mut c) else {
        panic!("an expelled member's heartbeat was accepted")
    };
    assert_eq!(e.code, ErrorCode::MemberExpelled);
    assert_eq!(false_expulsions(&t), 1);
    assert_eq!(clean(&t, "g"), 0);
    // Every member is judged again at once, before its next heartbeat.
    assert_eq!(thresholds(&t, &a).expel_after, SESSION);
    assert_eq!(thresholds(&t, &b).expel_after, SESSION);
    // Counted once per expulsion.
    let _ = t.beat(&mut c);
    assert_eq!(false_expulsions(&t), 1);
    // a falls silent for 4 s now: it is not convicted (the gate is closed).
    beat_all(&mut t, &mut [&mut b], 4);
    assert_eq!(t.expelled(&a), None);
}

/// A jump in the sequence numbers is a run of lost beats: a surprise, and the gap it
/// ended stays out of the member's mean.
#[test]
fn lost_beats_are_a_surprise_and_stay_out_of_the_rhythm() {
    let mut t = TestContext::with_config(clean_after_50());
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    beat_all(&mut t, &mut [&mut a, &mut b], 70);
    let calm = thresholds(&t, &a);
    assert!(calm.expel_after < Duration::from_secs(2));
    let id = a.id.clone();
    let mean = |t: &TestContext| {
        let g = t.core.groups.get("g").unwrap();
        g.members.get(&id).unwrap().liveness.arrivals().mean()
    };
    let before = mean(&t);
    // Three beats lost (sent faster than before, say): the sequence number jumps by
    // four, over a gap still within the member's threshold.
    t.advance(Duration::from_millis(1300));
    t.expect_beat_ok(&mut b);
    a.seq += 3;
    t.expect_beat_ok(&mut a);
    assert_eq!(mean(&t), before);
    let g = t.core.groups.get("g").unwrap();
    assert_eq!(g.fleet.loss_runs(), (1, 3));
    assert_eq!(g.fleet.clean(), 0);
    assert_eq!(thresholds(&t, &b).expel_after, SESSION);
    assert_eq!(false_expulsions(&t), 0);
}
