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
/// timeout, a calm one by its own gaps, always within the session.
#[test]
fn adaptive_follows_the_members_gaps_within_its_session() {
    let start = crate::core::tests::start_instant();
    let session = Duration::from_secs(10);
    let mut r = Replay::new(
        DetectorKind::Adaptive,
        &DetectorSettings::default(),
        session,
    );
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
    let mut again = Replay::new(
        DetectorKind::Adaptive,
        &DetectorSettings::default(),
        session,
    );
    for s in 0..=200 {
        again.arrive(at(start, f64::from(s)));
    }
    assert_eq!(again.pending(), r.pending());
}
