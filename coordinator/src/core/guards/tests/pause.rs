//! The pause guard.

use super::*;
use crate::core::guards::pause::quarter_of;
use crate::core::guards::PAUSE_FLOOR;
use crate::core::Event;

#[test]
fn the_threshold_and_grace_are_a_quarter_clamped() {
    assert_eq!(quarter_of(secs(1), secs(2)), 250 * MS);
    assert_eq!(quarter_of(100 * MS, secs(2)), PAUSE_FLOOR);
    assert_eq!(quarter_of(secs(60), secs(2)), secs(2));
    assert_eq!(
        quarter_of(secs(60), 10 * MS),
        PAUSE_FLOOR,
        "never below the floor"
    );
}

fn paused(t: &TestContext) -> bool {
    t.events
        .iter()
        .any(|e| matches!(e, Event::PauseDetected { .. }))
}

/// A wake-up late by less than a quarter of the shortest expel threshold is not a
/// pause; later than that, it is.
#[test]
fn a_wake_up_is_a_pause_only_past_the_threshold() {
    for (late, pause) in [(200 * MS, false), (300 * MS, true)] {
        let mut t = TestContext::new();
        let mut req = t.join_request("g", &[("orders", 4)]);
        req.session_timeout_ms = 1_000;
        t.join_with(1, req).expect("join accepted");
        let due = t.core.poll_timeout().expect("a timer");
        t.now = due + late;
        t.core.handle_timeout(t.now);
        t.drain();
        assert_eq!(paused(&t), pause, "late by {late:?}");
    }
}

/// A pause moves the session by the part of the member's silence it overlapped, the
/// progress deadline by the part of its wait, and each revocation by all of it.
#[test]
fn a_pause_moves_each_clock_by_what_it_overlapped() {
    let mut t = TestContext::new();
    let (m, heard) = joined(&mut t, 1);
    let session = member(&t, &m).session_deadline();
    let progress = member(&t, &m).progress_deadline;
    // Woken 3 s after the last frame, from a pause of 5 s: 3 s of it were silence.
    member_mut(&mut t, &m).pause_passed(heard + secs(3), secs(5));
    assert_eq!(member(&t, &m).session_deadline(), session + secs(3));
    assert_eq!(member(&t, &m).progress_deadline, progress + secs(3));
    // Heard at the wake: nothing is the pause's.
    let mut t = TestContext::new();
    let (m, heard) = joined(&mut t, 1);
    let session = member(&t, &m).session_deadline();
    member_mut(&mut t, &m).pause_passed(heard, secs(5));
    assert_eq!(member(&t, &m).session_deadline(), session);
}

/// The grace holds a member whose silence the pause overlapped, not one heard since
/// the wake (defect 24 has the case that found it).
#[test]
fn the_grace_holds_only_members_heard_no_later_than_the_wake() {
    let mut t = TestContext::new();
    let (before, _) = joined(&mut t, 1);
    t.advance(300 * MS);
    t.freeze_for(secs(15));
    assert!(paused(&t));
    let woken = t.now;
    t.advance(100 * MS);
    let (after, _) = joined(&mut t, 2);
    let at = t.now + MS;
    let subject = |t: &TestContext, m: &M| {
        let mut s =
            crate::core::guards::bound::Subject::of(member(t, m), at, &t.core.guards.pauses);
        s.expiring = true;
        s
    };
    assert!(member(&t, &before).heard_at <= woken);
    assert!(t.core.pause_hold(&subject(&t, &before), at).is_some());
    assert_eq!(t.core.pause_hold(&subject(&t, &after), at), None);
}
