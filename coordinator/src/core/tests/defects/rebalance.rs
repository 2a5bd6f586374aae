//! Defects of revocations, timeouts changed by a rejoin, generations, and suspects
//! taking their share.

use super::*;

// ------------------------------------------------------------------------------------
// 6. A rejoin with a longer session timeout breaks the lease.
// ------------------------------------------------------------------------------------

/// A changed progress timeout is applied too.
#[test]
fn defect_6_a_rejoin_with_a_shorter_progress_timeout_applies_it() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut rejoin = t.join_request("g", &[("orders", 4)]);
    rejoin.member_id = Some(a.id.clone());
    rejoin.progress_timeout_ms = 5_000;
    assert!(matches!(
        t.request(a.conn, Request::Join(rejoin)),
        Response::Join(_)
    ));
    for _ in 0..7 {
        t.advance(Duration::from_secs(1));
        if t.expelled(&a).is_none() {
            t.beat_stalled(&mut a);
        }
    }
    assert_eq!(t.expelled(&a), Some(ExpelReason::ProgressExpired));
}

// ------------------------------------------------------------------------------------
// 7. Generations go backwards.
// ------------------------------------------------------------------------------------

/// An empty group with no offsets is forgotten; joined again, it continues above its
/// old generation (it once started again at 1).
#[test]
fn defect_7_a_forgotten_group_joined_again_never_repeats_a_generation() {
    let mut t = TestContext::new();
    let a = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.leave(&a);
    t.advance(SETTLE);
    let last = t
        .events
        .iter()
        .filter_map(|e| match e {
            Event::RebalanceStarted { generation, .. } => Some(*generation),
            _ => None,
        })
        .max()
        .unwrap();
    let b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    assert!(
        t.generation_of(&b) > last,
        "{} after {last}",
        t.generation_of(&b)
    );
    // Also after retention deleted it and the coordinator restarted.
    let last = t.generation_of(&b);
    t.leave(&b);
    t.advance(SETTLE);
    assert!(
        t.core.remove_offsets(t.now, "g", Duration::ZERO),
        "an empty group is removed"
    );
    t.drain();
    restart(&mut t);
    let c = t.join(3, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    assert!(
        t.generation_of(&c) > last,
        "{} after {last}",
        t.generation_of(&c)
    );
}

// ------------------------------------------------------------------------------------
// 10. A revocation inherits the deadline of an earlier one, or of an old timeout.
// ------------------------------------------------------------------------------------

/// `a` owns 6 partitions. `b` joins and `a` is asked to release 3 (its revocation
/// deadline is set: now + 30 s). `a` takes its time, within the rebalance timeout. At
/// about 27 s `c` joins and `a` is asked to release one more partition. At about 28 s
/// `a` acknowledges the first revocation. At 30 s `a` is expelled for
/// `RebalanceTimeout`, although the partition it still holds was asked of it less than
/// 3 s earlier and it keeps heartbeating and progressing.
///
/// Promise broken: the rebalance timeout bounds how long one revocation may go
/// unacknowledged; it must not expel a live member that answers each revocation within
/// its timeout. Cause: `Group::reconcile` (rebalance.rs) sets `revoke_deadline` only
/// when it is `None`, so a revocation added while another is pending inherits the older
/// deadline, and `acknowledge_and_grant` keeps that deadline while anything is still
/// revoking.
#[test]
fn defect_10_a_later_revocation_gets_its_own_rebalance_timeout() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 6)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    assert_eq!(count(&t.owned(&a)), 6);
    let mut b = t.join(2, "g", &[("orders", 6)]);
    t.advance(SETTLE);
    let first = flatten(&t.revoking(&a));
    assert_eq!(first.len(), 3);
    for _ in 0..27 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
        t.expect_beat_ok(&mut b);
    }
    // ~27 s after the first revocation: `c` joins and `a` must release one more.
    let mut c = t.join(3, "g", &[("orders", 6)]);
    t.advance(SETTLE);
    let now_revoking = flatten(&t.revoking(&a));
    let later = minus(&now_revoking, &first);
    assert!(
        !later.is_empty(),
        "a is asked to release a further partition"
    );
    // `a` answers the first revocation, inside its 30 s.
    let old = both(&now_revoking, &first);
    t.advance(Duration::from_millis(400));
    t.beat_acking(&mut a, unflatten(&old));
    t.expect_beat_ok(&mut b);
    t.expect_beat_ok(&mut c);
    // `a` keeps working and beating for five more seconds without answering the
    // revocation made about 3 s ago.
    for _ in 0..5 {
        t.advance(Duration::from_secs(1));
        if t.expelled(&a).is_some() {
            break;
        }
        t.expect_beat_ok(&mut a);
        t.expect_beat_ok(&mut b);
        t.expect_beat_ok(&mut c);
    }
    assert_eq!(
        t.expelled(&a),
        None,
        "expelled {:?} after {:?}, {:?} after the revocation of {later:?}",
        t.expelled(&a),
        t.elapsed(),
        REBALANCE
    );
}

/// `a` joined with a 5 s rebalance timeout and is asked to release partitions to `b`.
/// It rejoins (same member id, same subscription) asking for 60 s, then keeps beating
/// while its application drains for 8 s. It is expelled for `RebalanceTimeout` at 5 s:
/// the deadline computed from the old timeout stands.
///
/// Promise broken: changed timeouts apply to the member (as `defect_6` establishes for
/// session and progress timeouts); a live member within the rebalance timeout it asked
/// for is not expelled. Cause: `Member::set_timeouts` (group/mod.rs) recomputes the
/// session and progress deadlines but leaves `revoke_deadline` as it was.
#[test]
fn defect_10_a_rejoin_with_a_longer_rebalance_timeout_applies_it_to_a_pending_revocation() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.rebalance_timeout_ms = 5_000;
    let mut a = t.join_with(1, req.clone()).unwrap();
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    assert_eq!(count(&t.revoking(&a)), 2);
    let mut rejoin = req.clone();
    rejoin.member_id = Some(a.id.clone());
    rejoin.rebalance_timeout_ms = 60_000;
    assert!(matches!(
        t.request(a.conn, Request::Join(rejoin)),
        Response::Join(_)
    ));
    for _ in 0..8 {
        t.advance(Duration::from_secs(1));
        if t.expelled(&a).is_some() {
            break;
        }
        t.expect_beat_ok(&mut a);
        t.expect_beat_ok(&mut b);
    }
    assert_eq!(
        t.expelled(&a),
        None,
        "expelled after {:?} with a 60 s rebalance timeout",
        t.elapsed()
    );
}

// ------------------------------------------------------------------------------------
// 15. A member that steadily beats late stays suspect, and short of its share, for good.
// ------------------------------------------------------------------------------------

/// `b` beats every 6 s with a 10 s session: every beat comes after half its session, so
/// the fixed rule suspects it before each one. Suspect, it takes nothing new, and when
/// `a` leaves, `a`'s partitions wait for it. It never beat "on time", so it never
/// recovered: the partitions waited, worked by nobody, for as long as it lived. Its
/// rhythm now bounds its suspicion, and after enough steady beats it takes them.
#[test]
fn defect_15_a_member_that_steadily_beats_late_recovers_and_takes_its_share() {
    const BEAT_B: Duration = Duration::from_secs(6);
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = t.join(2, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    t.ack_all(&mut a);
    t.expect_beat_ok(&mut b);
    assert_eq!([&a, &b].map(|m| count(&t.owned(m))), [4, 4]);
    let mut left = false;
    for round in 0..30 {
        for _ in 0..6 {
            t.advance(BEAT_B / 6);
            if !left {
                t.expect_beat_ok(&mut a);
            }
        }
        t.ack_all(&mut b);
        if round == 3 {
            assert_eq!(
                t.describe("g").members[1].liveness,
                rollcall_protocol::Liveness::Suspect,
                "late beats make it suspect"
            );
            t.leave(&a);
            left = true;
            t.advance(SETTLE);
            assert_eq!(count(&t.owned(&b)), 4, "suspect: it takes nothing new");
        }
    }
    assert!(
        recovered(&t) > 0,
        "its steady rhythm brings it back from suspicion"
    );
    assert_eq!(
        count(&t.owned(&b)),
        8,
        "and it takes the partitions left to it"
    );
}
