//! Defects of fencing: static instances, their replacements and superseded processes,
//! and join tokens.

use super::*;

// ------------------------------------------------------------------------------------
// 5. Restore forgets fencing.
// ------------------------------------------------------------------------------------

/// After a restart, a replaced static member's stale process is still fenced: its
/// heartbeat and its rejoin under the instance id are refused, and the new process
/// keeps the instance (the stale one once took it back).
#[test]
fn defect_5_fencing_of_a_replaced_static_member_survives_a_restart() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.instance_id = Some("worker-1".into());
    let mut old = t.join_with(1, req.clone()).unwrap();
    t.advance(SETTLE);
    req.join_token = 777;
    let mut new = t.join_with(2, req.clone()).unwrap();
    t.advance(SETTLE);
    restart(&mut t);
    old.conn = 11;
    new.conn = 12;
    assert_eq!(
        error_code(&t.beat(&mut old)),
        Some(ErrorCode::FencedInstance)
    );
    let mut rejoin = req.clone();
    rejoin.member_id = Some(old.id.clone());
    rejoin.join_token = 778;
    let resp = t.request(old.conn, Request::Join(rejoin));
    assert_eq!(error_code(&resp), Some(ErrorCode::FencedInstance));
    t.expect_beat_ok(&mut new);
}

/// Fencing does not depend on a bounded memory of removed members.
#[test]
fn defect_5_fencing_outlives_the_memory_of_removed_members() {
    let mut t = TestContext::with_config(CoreConfig {
        expelled_memory: 1,
        ..CoreConfig::default()
    });
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.instance_id = Some("worker-1".into());
    let mut first = t.join_with(1, req.clone()).unwrap();
    for token in 100..105 {
        req.join_token = token;
        t.join_with(token, req.clone()).unwrap();
        // Unrelated removals push the first incarnation out of the memory.
        let other = t.join(token + 1000, "g", &[("orders", 4)]);
        t.leave(&other);
    }
    assert_eq!(
        error_code(&t.beat(&mut first)),
        Some(ErrorCode::FencedInstance)
    );
}

// ------------------------------------------------------------------------------------
// 8. Smaller: leaves at the deadline, colliding tokens, inherited revocations.
// ------------------------------------------------------------------------------------

/// A join whose token collides with another member's (a different instance and
/// client) is a new member, not that one.
#[test]
fn defect_8_a_colliding_join_token_does_not_adopt_another_member() {
    let mut t = TestContext::new();
    let s = join_as(&mut t, 1, 4, |r| {
        r.instance_id = Some("worker-1".into());
        r.join_token = 42;
    });
    let o = join_as(&mut t, 2, 4, |r| {
        r.join_token = 42;
        r.client_id = "someone-else".into();
    });
    assert_ne!(o.id, s.id);
    assert_eq!(t.describe("g").members.len(), 2);
}

/// A static replacement does not inherit the old member's revocation deadline.
#[test]
fn defect_8_a_static_replacement_gets_its_own_rebalance_timeout() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.instance_id = Some("worker-1".into());
    let mut old = t.join_with(1, req.clone()).unwrap();
    t.advance(SETTLE);
    t.expect_beat_ok(&mut old);
    // Another member joins: `old` is asked to revoke and never acknowledges.
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    // Its process stands down and a new one takes over just before the deadline.
    for _ in 0..29 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut old);
        t.expect_beat_ok(&mut b);
    }
    assert!(matches!(
        leave_with(&mut t, &old, LeaveMode::StandDown),
        Response::Leave
    ));
    req.join_token = 99;
    let mut new = t.join_with(3, req).unwrap();
    for _ in 0..5 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut new);
        t.expect_beat_ok(&mut b);
    }
    assert_eq!(t.expelled(&new), None);
}

/// A static member whose process stood down is replaced at once, without a
/// rebalance: planned restarts stay instant.
#[test]
fn a_static_member_that_stood_down_is_taken_over_at_once() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.instance_id = Some("worker-1".into());
    let mut old = t.join_with(1, req.clone()).unwrap();
    t.advance(SETTLE);
    t.expect_beat_ok(&mut old);
    let owned = t.owned(&old);
    let rebalances = t.rebalances_started();
    assert!(matches!(
        leave_with(&mut t, &old, LeaveMode::StandDown),
        Response::Leave
    ));
    req.join_token = 5;
    let new = t.join_with(2, req).unwrap();
    assert_eq!(t.owned(&new), owned);
    assert_eq!(t.rebalances_started(), rebalances);
}

/// Found by the simulation: a static process whose join response was lost retries the
/// same join after newer processes took its instance. The retry must not take the
/// instance back.
#[test]
fn a_join_retried_by_a_superseded_static_process_is_fenced() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.instance_id = Some("worker-1".into());
    req.join_token = 1;
    let lost = req.clone();
    t.join_with(1, req.clone()).unwrap(); // its response never arrives
    req.join_token = 2;
    let mut newer = t.join_with(2, req).unwrap();
    restart(&mut t);
    newer.conn = 12;
    let resp = t.request(11, Request::Join(lost));
    assert_eq!(error_code(&resp), Some(ErrorCode::FencedInstance));
    t.expect_beat_ok(&mut newer);
}

// ------------------------------------------------------------------------------------
// 11. A rejoin naming a live member with another instance id joined anew.
// ------------------------------------------------------------------------------------

/// A join that names a live member's id but another instance id than that member's
/// (none, for a dynamic member) is refused `inconsistent_member`. It once created
/// another member (or replaced that instance's member) and left the named one in the
/// group, holding its partitions until its session ran out, while the process that
/// sent the join went on as the new member.
#[test]
fn defect_11_a_rejoin_naming_a_live_member_with_another_instance_is_refused() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.instance_id = Some("worker-1".into());
    let mut s = t.join_with(2, req.clone()).unwrap();
    t.advance(SETTLE);
    t.ack_all(&mut a);
    t.ack_all(&mut s);
    let members = |t: &mut TestContext| t.describe("g").members.len();
    assert_eq!(members(&mut t), 2);
    // The dynamic member's id with an instance id; the static member's id with
    // another instance id.
    for (named, conn) in [(&a, a.conn), (&s, s.conn)] {
        let mut rejoin = req.clone();
        rejoin.member_id = Some(named.id.clone());
        rejoin.instance_id = Some("worker-2".into());
        let resp = t.request(conn, Request::Join(rejoin));
        assert_eq!(
            error_code(&resp),
            Some(ErrorCode::InconsistentMember),
            "{resp:?}"
        );
        assert_eq!(members(&mut t), 2);
    }
    // Its own instance id, or none, is a rejoin of the same member.
    let mut rejoin = req.clone();
    rejoin.member_id = Some(s.id.clone());
    match t.request(s.conn, Request::Join(rejoin.clone())) {
        Response::Join(j) => assert_eq!(j.member_id, s.id),
        other => panic!("{other:?}"),
    }
    rejoin.instance_id = None;
    match t.request(s.conn, Request::Join(rejoin)) {
        Response::Join(j) => assert_eq!(j.member_id, s.id),
        other => panic!("{other:?}"),
    }
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut s);
    assert_eq!(members(&mut t), 2);
}
