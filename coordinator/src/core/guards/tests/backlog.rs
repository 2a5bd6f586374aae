//! The backlog guard and the breather.

use super::*;
use crate::core::guards::bound::{Span, Subject};
use crate::core::guards::{Hold, BACKLOG_FLOOR, BACKLOG_MEMORY, BREATHER};
use crate::core::Event;

fn backlog_events(t: &TestContext) -> (usize, Vec<(Duration, Duration)>) {
    let detected = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::BacklogDetected { .. }))
        .count();
    let ended = t
        .events
        .iter()
        .filter_map(|e| match e {
            Event::BacklogEnded { lasted, worst } => Some((*lasted, *worst)),
            _ => None,
        })
        .collect();
    (detected, ended)
}

/// Lateness below the floor opens nothing; a backlog lasts while reported, and ends
/// once no report came for the backlog memory, with how long it lasted and its worst.
#[test]
fn a_backlog_opens_at_the_floor_and_ends_after_its_memory() {
    let mut t = TestContext::new();
    let t0 = t.now;
    t.core.observe_lag(t0, BACKLOG_FLOOR - MS);
    assert!(t.core.guards.behind.is_none());
    t.core.observe_lag(t0, BACKLOG_FLOOR);
    t.core.observe_lag(t0 + 500 * MS, 3 * BACKLOG_FLOOR);
    t.core
        .observe_lag(t0 + 500 * MS + BACKLOG_MEMORY, Duration::ZERO);
    assert!(t.core.guards.behind.is_some(), "not over yet");
    t.core
        .observe_lag(t0 + 500 * MS + BACKLOG_MEMORY + MS, Duration::ZERO);
    t.drain();
    assert!(t.core.guards.behind.is_none());
    assert_eq!(backlog_events(&t), (1, vec![(500 * MS, 3 * BACKLOG_FLOOR)]));
}

/// Held while behind, until the backlog has had time to drain, never past the bound.
#[test]
fn a_backlog_holds_a_member_whose_frames_may_wait_until_its_bound() {
    let mut t = TestContext::new();
    let (m, heard) = joined(&mut t, 1);
    let deadline = heard + secs(10);
    let now = deadline + MS;
    t.core.observe_lag(now, 200 * MS);
    let subject = Subject::of(member(&t, &m), now, &t.core.guards.pauses);
    let span = subject.span.expect("its session passed");
    assert!(subject.may_wait);
    let verdict = t.core.backlog_hold(&subject, &span, now, "g", &m.id);
    assert!(matches!(
        verdict,
        crate::core::guards::Verdict::Hold(Hold::Backlog { recheck }) if recheck == now + 200 * MS
    ));
    let late = span.bound;
    t.core.observe_lag(late, 200 * MS);
    let verdict = t.core.backlog_hold(&subject, &span, late, "g", &m.id);
    assert!(matches!(verdict, crate::core::guards::Verdict::Expired));
}

/// The first run after a deadline, when late, waits one breather; a run since the
/// deadline does not.
#[test]
fn the_breather_holds_once_at_the_first_late_run() {
    let mut t = TestContext::new();
    let (m, _) = joined(&mut t, 1);
    let deadline = t.now + secs(1);
    let span = Span {
        deadline,
        bound: deadline + secs(10),
        look_by: deadline + secs(10),
    };
    let subject = Subject::of(member(&t, &m), deadline, &t.core.guards.pauses);
    t.core.ran_before = Some(deadline - MS);
    let now = deadline + 5 * MS;
    assert_eq!(
        t.core.breather(&subject, &span, now),
        Some(Hold::Backlog {
            recheck: now + BREATHER
        })
    );
    t.core.ran_before = Some(deadline + MS);
    assert_eq!(t.core.breather(&subject, &span, now), None);
}
