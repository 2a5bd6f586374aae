//! The isolation guard.

use super::*;
use crate::core::guards::isolation::{silent_before, Census};

#[test]
fn a_mass_silence_needs_enough_connected_members_and_a_share_of_them_overdue() {
    let t0 = Instant::now();
    let now = t0 + secs(10);
    let census = |members: &[(bool, u64)]| {
        let mut c = Census::default();
        for &(connected, heard) in members {
            c.count(now, connected, t0 + secs(heard), secs(10));
        }
        c
    };
    // Overdue: silent for more than half the threshold (heard before t0 + 5 s).
    let two = census(&[(true, 0), (true, 0)]);
    assert!(!two.mass_silence(3), "too few connected");
    let half = census(&[(true, 0), (true, 0), (true, 9), (true, 9)]);
    assert!(!half.mass_silence(3), "50% overdue");
    let most = census(&[(true, 0), (true, 0), (true, 0), (true, 9)]);
    assert!(most.mass_silence(3));
    assert!(!most.mass_silence(0), "the guard is off");
    let closed = census(&[(true, 0), (true, 0), (false, 0), (true, 9)]);
    assert_eq!((closed.connected, closed.overdue), (3, 2));
}

#[test]
fn a_member_already_overdue_when_the_silence_began_gets_nothing_back() {
    let t0 = Instant::now();
    assert!(silent_before(t0 + secs(6), t0, secs(10)));
    assert!(!silent_before(t0 + secs(5), t0, secs(10)));
}

/// What isolations give back to a wait is capped at one expel threshold over all of
/// them; the session, at two expel thresholds of real silence.
#[test]
fn what_is_given_back_is_capped_per_wait_and_by_real_silence() {
    let mut t = TestContext::new();
    let (m, heard) = joined(&mut t, 1);
    let progress = member(&t, &m).progress_deadline;
    for i in 1..=3 {
        member_mut(&mut t, &m).give_back(heard + secs(7 * i), secs(6), Duration::ZERO);
    }
    assert_eq!(member(&t, &m).progress_deadline, progress + secs(10));
    assert_eq!(member(&t, &m).session_deadline(), heard + secs(20));
    // A pause the guard measured is not silence: the cap moves by it.
    member_mut(&mut t, &m).give_back(heard + secs(30), secs(6), secs(4));
    assert_eq!(member(&t, &m).session_deadline(), heard + secs(24));
}
