//! The hold bound and the pause memory.

use super::*;
use crate::core::guards::bound::{hold_bound, Pauses};
use crate::core::guards::PAUSE_MEMORY;

#[test]
fn pauses_count_only_the_part_within_the_span() {
    let t0 = Instant::now();
    let mut pauses = Pauses::default();
    pauses.push(t0 + secs(1), t0 + secs(3));
    pauses.push(t0 + secs(5), t0 + secs(6));
    assert_eq!(pauses.between(t0, t0 + secs(10)), secs(3));
    assert_eq!(
        pauses.between(t0 + secs(2), t0 + secs(5) + 500 * MS),
        1500 * MS
    );
    assert_eq!(pauses.between(t0 + secs(3), t0 + secs(5)), Duration::ZERO);
}

#[test]
fn the_pause_memory_forgets_the_oldest_pause() {
    let t0 = Instant::now();
    let mut pauses = Pauses::default();
    for i in 0..=PAUSE_MEMORY as u64 {
        pauses.push(t0 + secs(2 * i), t0 + secs(2 * i + 1));
    }
    let all = t0 + secs(2 * PAUSE_MEMORY as u64 + 2);
    assert_eq!(pauses.between(t0, all), secs(PAUSE_MEMORY as u64));
    assert_eq!(
        pauses.between(t0, t0 + secs(2)),
        Duration::ZERO,
        "the first"
    );
}

#[test]
fn nothing_is_held_before_a_deadline_passes() {
    let mut t = TestContext::new();
    let (m, heard) = joined(&mut t, 1);
    let at = heard + secs(10) - MS;
    assert_eq!(hold_bound(member(&t, &m), at, Duration::ZERO), None);
}

/// A session is held one expel threshold past its deadline, and never past two of
/// real silence; looked at again by the bound, or by a deadline still to come.
#[test]
fn a_session_is_held_one_expel_threshold_at_most_and_two_of_real_silence() {
    let mut t = TestContext::new();
    let (m, heard) = joined(&mut t, 1);
    let deadline = heard + secs(10);
    let (d, bound, look_by) = hold_bound(member(&t, &m), deadline, Duration::ZERO).unwrap();
    assert_eq!(
        (d, bound, look_by),
        (deadline, heard + secs(20), heard + secs(20))
    );
    // A pause of 4 s moved the deadline; the bound moves with it, not being silence.
    member_mut(&mut t, &m).pause_passed(heard + secs(5), secs(4));
    let deadline = heard + secs(14);
    let (d, bound, _) = hold_bound(member(&t, &m), deadline, secs(4)).unwrap();
    assert_eq!((d, bound), (deadline, heard + secs(24)));
    // Counted as silence, the pause shortens the hold to two thresholds of wall time.
    let (_, bound, _) = hold_bound(member(&t, &m), deadline, Duration::ZERO).unwrap();
    assert_eq!(bound, heard + secs(20));
}

/// Of the deadlines that passed, the one whose bound comes first decides; a deadline
/// still to come is when to look again, if sooner.
#[test]
fn the_first_bound_decides_and_the_next_deadline_is_looked_at() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.progress_timeout_ms = 12_000;
    let m = t.join_with(1, req).expect("join accepted");
    let heard = member(&t, &m).heard_at;
    let progress = member(&t, &m).progress_deadline;
    assert!(progress > heard + secs(10));
    let (d, bound, look_by) = hold_bound(member(&t, &m), heard + secs(10), Duration::ZERO).unwrap();
    assert_eq!(
        (d, bound, look_by),
        (heard + secs(10), heard + secs(20), progress)
    );
    let (d, bound, _) = hold_bound(member(&t, &m), progress, Duration::ZERO).unwrap();
    assert_eq!((d, bound), (heard + secs(10), heard + secs(20)));
}
