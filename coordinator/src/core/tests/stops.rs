//! What PROTOCOL.md §10.2 promises about a coordinator that was stopped (a stopped
//! process, a stalled runtime): how much of a stop counts against a member.
//!
//! The core cannot see a stop begin: with no input it has nothing to do, and it learns
//! that it was stopped only when it wakes late for a deadline it had set. So a stop is
//! measured from the earliest deadline the core had pending (or its last input, if
//! later) to its waking; the part of the stop before that deadline counts as the
//! members' silence.

use std::time::Duration;

use rollcall_protocol::ExpelReason;

use super::*;

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A member with a 1.5 s session (fixed detector: suspect after 750 ms) beats every
/// 400 ms and is last heard at `h`. The core's earliest deadline is a timer entry at or
/// before the member's suspicion (`h` + 750 ms; here the entry left by the beat before,
/// `h` + 350 ms, since an entry is only moved when it fires). The coordinator stops at
/// `h` + 100 ms, which nothing tells the core, and wakes 4.5 s later. The pause is
/// measured from that entry: the 250 ms of the stop before it count against the
/// member, and with no frame after the wake it is expelled its session after its last
/// frame plus the measured pause, 1.15 s after the wake (not 1.4 s after it, as it
/// would be had the whole stop been left out). What counts is at most the time from the
/// member's last frame to its earliest deadline, its suspicion threshold.
#[test]
fn a_stop_counts_against_a_member_only_up_to_the_first_deadline_the_core_had_set() {
    let mut t = TestContext::new();
    let mut join = t.join_request("g", &[("orders", 4)]);
    join.session_timeout_ms = 1_500;
    let mut m = t.join_with(1, join).expect("join accepted");
    for _ in 0..4 {
        t.advance(ms(400));
        t.expect_beat_ok(&mut m);
    }
    let heard = t.now;
    let first = t.core.poll_timeout().expect("a deadline is set");
    assert!(
        first <= heard + ms(750),
        "no later than the member's suspicion"
    );
    assert_eq!(first, heard + ms(350), "the entry the beat before left");

    // Stopped at `heard` + 100 ms, woken 4.5 s later: no input in between.
    let stopped = heard + ms(100);
    t.now = stopped;
    t.freeze_for(ms(4_500));
    let woke = t.now;
    let measured = t.events.iter().find_map(|e| match e {
        Event::PauseDetected { late_by, .. } => Some(*late_by),
        _ => None,
    });
    assert_eq!(
        measured,
        Some(woke - first),
        "measured from the first deadline"
    );
    let counted = (woke - stopped) - (woke - first);
    assert_eq!(counted, ms(250));

    let expelled_at = heard + ms(1_500) + (woke - first);
    assert_eq!(expelled_at, woke + ms(1_150));
    t.advance(expelled_at - t.now - MS);
    assert_eq!(t.expelled(&m), None, "expelled before its shifted deadline");
    t.advance(ms(2));
    assert_eq!(t.expelled(&m), Some(ExpelReason::SessionExpired));
}
