//! Two clocks: the session timeout decides membership, the lease timeout decides how
//! long a member may act and so when its partitions move. Expulsion on connection
//! close, holds bounded by the lease, and Relinquish.

use std::time::Duration;

use rollcall_protocol::{ErrorCode, ExpelReason, Push, RelinquishRequest, Request, Response};

use super::*;
use crate::core::{Coordinator, Event, RestoredState};
use crate::store::{MemoryStore, Store};

const SETTLE: Duration = Duration::from_millis(300);
const LEASE: Duration = Duration::from_secs(1);

fn error_code(r: &Response) -> Option<ErrorCode> {
    match r {
        Response::Error(e) => Some(e.code),
        _ => None,
    }
}

/// A member of group `g` (topic `orders`, 6 partitions) on `conn`, with a 10 s session
/// and the given lease timeout.
fn join_leased(t: &mut TestContext, conn: ConnId, lease: Duration) -> M {
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.lease_timeout_ms = lease.as_millis() as u32;
    t.join_with(conn, req).expect("join accepted")
}

/// Two settled members, `a` and `b`, each owning three partitions.
fn pair(t: &mut TestContext, lease: Duration) -> (M, M) {
    let mut a = join_leased(t, 1, lease);
    let mut b = join_leased(t, 2, lease);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    t.advance(SETTLE);
    assert_eq!(count(&t.owned(&a)), 3);
    assert_eq!(count(&t.owned(&b)), 3);
    (a, b)
}

/// Runs `d` in steps of 100 ms, `b` beating every 500 ms.
fn run_beating(t: &mut TestContext, b: &mut M, d: Duration) {
    let steps = (d.as_millis() / 100) as u32;
    for i in 1..=steps {
        t.advance(Duration::from_millis(100));
        if i % 5 == 0 {
            t.expect_beat_ok(b);
        }
    }
}

fn removed_at(t: &TestContext, m: &M) -> Option<ExpelReason> {
    t.events.iter().find_map(|e| match e {
        Event::MemberRemoved {
            member_id, reason, ..
        } if *member_id == m.id => Some(*reason),
        _ => None,
    })
}

fn relinquish(t: &mut TestContext, conn: ConnId, member_id: &str) -> Response {
    t.request(
        conn,
        Request::Relinquish(RelinquishRequest {
            group: "g".into(),
            member_id: member_id.into(),
        }),
    )
}

fn restart(t: &mut TestContext) {
    let store = MemoryStore::new();
    store.write(&t.records).expect("memory store accepts");
    let state: RestoredState = store.load().expect("memory store loads");
    let mut config = t.core.config().clone();
    config.member_id_prefix = format!("r{}-", t.records.len());
    t.core = Coordinator::new(config);
    t.core.restore(t.now, state);
    t.drain();
}

#[test]
fn the_lease_timeout_is_bounded_by_the_session_and_the_server_minimum() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.lease_timeout_ms = SESSION.as_millis() as u32 + 1;
    let e = t.join_with(1, req).unwrap_err();
    assert_eq!(
        error_code(&e),
        Some(ErrorCode::InvalidSessionTimeout),
        "{e:?}"
    );
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.lease_timeout_ms = 1;
    let e = t.join_with(1, req).unwrap_err();
    assert_eq!(
        error_code(&e),
        Some(ErrorCode::InvalidSessionTimeout),
        "{e:?}"
    );
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.lease_timeout_ms = SESSION.as_millis() as u32;
    assert!(t.join_with(1, req).is_ok());
}

/// A crashed process closes its sockets: its partitions move a lease after its last
/// frame, not a session.
#[test]
fn a_closed_connection_expels_its_member_when_the_lease_runs_out() {
    let mut t = TestContext::new();
    let (mut a, mut b) = pair(&mut t, LEASE);
    t.expect_beat_ok(&mut a);
    let last_frame = t.now;
    t.core.handle_disconnect(t.now, a.conn);
    run_beating(&mut t, &mut b, LEASE - Duration::from_millis(100));
    assert_eq!(
        removed_at(&t, &a),
        None,
        "expelled before its lease ran out"
    );
    run_beating(&mut t, &mut b, Duration::from_millis(300));
    assert_eq!(removed_at(&t, &a), Some(ExpelReason::SessionExpired));
    run_beating(&mut t, &mut b, SETTLE);
    assert_eq!(count(&t.owned(&b)), 6, "the survivor owns everything");
    let granted = t
        .pushes
        .iter()
        .filter(|(_, _, p)| matches!(p, Push::Assignment(x) if x.member_id == b.id && count(&x.partitions) == 6))
        .map(|(at, _, _)| *at)
        .next()
        .expect("the survivor was pushed all six");
    assert!(granted >= last_frame + LEASE, "granted inside the lease");
    assert!(
        granted - last_frame < LEASE + Duration::from_millis(500),
        "{:?} after the last frame",
        granted - last_frame
    );
    t.assert_exclusive("g");
}

#[test]
fn a_member_that_resumes_on_another_connection_within_its_lease_stays() {
    let mut t = TestContext::new();
    let (mut a, mut b) = pair(&mut t, LEASE);
    t.core.handle_disconnect(t.now, a.conn);
    run_beating(&mut t, &mut b, Duration::from_millis(500));
    a.conn = 7;
    t.expect_beat_ok(&mut a);
    for _ in 0..20 {
        run_beating(&mut t, &mut b, Duration::from_millis(500));
        t.expect_beat_ok(&mut a);
    }
    assert_eq!(removed_at(&t, &a), None);
    assert_eq!(count(&t.owned(&a)), 3);
}

/// A host gone with its connection open says nothing: the session decides.
#[test]
fn a_silent_member_on_an_open_connection_waits_for_its_session() {
    let mut t = TestContext::new();
    let (a, mut b) = pair(&mut t, LEASE);
    run_beating(&mut t, &mut b, SESSION - Duration::from_secs(1));
    assert_eq!(
        removed_at(&t, &a),
        None,
        "expelled before its session ran out"
    );
    run_beating(&mut t, &mut b, Duration::from_secs(2));
    assert_eq!(removed_at(&t, &a), Some(ExpelReason::SessionExpired));
}

/// A live member expelled for a stuck application: its partitions wait for its lease
/// (it is still heartbeating, so its lease is fresh), not for a session timeout.
#[test]
fn the_partitions_of_a_member_expelled_alive_wait_for_its_lease_only() {
    let mut t = TestContext::new();
    let lease = Duration::from_secs(2);
    let mut a = {
        let mut req = t.join_request("g", &[("orders", 6)]);
        req.lease_timeout_ms = lease.as_millis() as u32;
        req.progress_timeout_ms = 3_000;
        t.join_with(1, req).unwrap()
    };
    let mut b = join_leased(&mut t, 2, lease);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    let mut last_frame = t.now;
    // `a` keeps beating without progress until it is expelled.
    for i in 1..=60 {
        t.advance(Duration::from_millis(100));
        if i % 5 == 0 {
            t.expect_beat_ok(&mut b);
            if removed_at(&t, &a).is_none() {
                t.beat_stalled(&mut a);
                last_frame = t.now;
            }
        }
        if removed_at(&t, &a).is_some() {
            break;
        }
    }
    assert_eq!(removed_at(&t, &a), Some(ExpelReason::ProgressExpired));
    run_beating(&mut t, &mut b, lease + SETTLE);
    assert_eq!(count(&t.owned(&b)), 6);
    let granted = t
        .pushes
        .iter()
        .filter(|(_, _, p)| matches!(p, Push::Assignment(x) if x.member_id == b.id && count(&x.partitions) == 6))
        .map(|(at, _, _)| *at)
        .next()
        .unwrap();
    assert!(granted >= last_frame + lease, "granted inside the lease");
    assert!(
        granted < last_frame + lease + SETTLE,
        "waited past the lease"
    );
}

/// Relinquish is for removed members: a current one leaves instead, an unknown id
/// holds nothing, and a removed one is answered however often it asks.
#[test]
fn relinquish_answers_removed_members_and_refuses_others() {
    let mut t = TestContext::new();
    let (a, mut b) = pair(&mut t, LEASE);
    assert_eq!(
        error_code(&relinquish(&mut t, a.conn, &a.id)),
        Some(ErrorCode::InvalidRequest),
        "a current member leaves instead"
    );
    t.core.handle_disconnect(t.now, a.conn);
    run_beating(&mut t, &mut b, LEASE + SETTLE);
    assert_eq!(removed_at(&t, &a), Some(ExpelReason::SessionExpired));
    assert_eq!(
        error_code(&relinquish(&mut t, 9, "nobody")),
        Some(ErrorCode::UnknownMember)
    );
    assert_eq!(relinquish(&mut t, 9, &a.id), Response::Relinquish);
    assert_eq!(
        relinquish(&mut t, 9, &a.id),
        Response::Relinquish,
        "idempotent"
    );
}

/// The member is expelled while still acting (revocation never acknowledged); its
/// process confirms it stopped, and the partitions move without waiting for the lease.
#[test]
fn relinquish_after_an_expulsion_moves_the_partitions_before_the_lease_ends() {
    let mut t = TestContext::new();
    let lease = Duration::from_secs(8);
    let mut a = {
        let mut req = t.join_request("g", &[("orders", 6)]);
        req.lease_timeout_ms = lease.as_millis() as u32;
        req.rebalance_timeout_ms = 1_000;
        t.join_with(1, req).unwrap()
    };
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    assert_eq!(count(&t.owned(&a)), 6);
    let mut b = join_leased(&mut t, 2, lease);
    // `a` keeps beating but never acknowledges the revocation the join causes.
    for i in 1..=30 {
        t.advance(Duration::from_millis(100));
        if i % 5 == 0 {
            t.expect_beat_ok(&mut b);
            if removed_at(&t, &a).is_none() {
                t.beat(&mut a);
            }
        }
    }
    assert_eq!(removed_at(&t, &a), Some(ExpelReason::RebalanceTimeout));
    assert!(count(&t.owned(&b)) < 6, "held for the lease");
    let before = t.now;
    assert_eq!(relinquish(&mut t, 1, &a.id), Response::Relinquish);
    t.advance(Duration::from_millis(1));
    assert_eq!(count(&t.owned(&b)), 6, "moved at once");
    assert!(t.now - before < Duration::from_millis(10));
    t.assert_exclusive("g");
}

/// Holds name their member and members keep their lease timeouts across a restart.
#[test]
fn a_restart_keeps_lease_timeouts_and_whose_partitions_are_held() {
    let mut t = TestContext::new();
    let lease = Duration::from_secs(8);
    let mut a = {
        let mut req = t.join_request("g", &[("orders", 6)]);
        req.lease_timeout_ms = lease.as_millis() as u32;
        req.rebalance_timeout_ms = 1_000;
        t.join_with(1, req).unwrap()
    };
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = join_leased(&mut t, 2, lease);
    for i in 1..=30 {
        t.advance(Duration::from_millis(100));
        if i % 5 == 0 {
            t.expect_beat_ok(&mut b);
            if removed_at(&t, &a).is_none() {
                t.beat(&mut a);
            }
        }
    }
    assert_eq!(removed_at(&t, &a), Some(ExpelReason::RebalanceTimeout));
    restart(&mut t);
    b.conn = 3;
    t.expect_beat_ok(&mut b);
    t.advance(SETTLE);
    assert!(count(&t.owned(&b)) < 6, "still held after the restart");
    assert_eq!(relinquish(&mut t, 3, &a.id), Response::Relinquish);
    t.advance(Duration::from_millis(1));
    assert_eq!(count(&t.owned(&b)), 6, "the restored hold knew its member");
    // `b` kept its lease timeout: a closed connection expels it a lease after its last
    // frame, well before its session.
    t.expect_beat_ok(&mut b);
    let last = t.now;
    t.core.handle_disconnect(t.now, b.conn);
    t.advance(lease + Duration::from_millis(100));
    assert_eq!(removed_at(&t, &b), Some(ExpelReason::SessionExpired));
    assert!(t.now - last < SESSION);
}

/// A commit on a new connection is the member heard there: its closed connection no
/// longer counts, so only its session can expel it.
#[test]
fn a_commit_on_a_new_connection_clears_the_closed_mark() {
    let mut t = TestContext::new();
    let (mut a, mut b) = pair(&mut t, LEASE);
    t.core.handle_disconnect(t.now, a.conn);
    a.conn = 8;
    let owned = flatten(&t.owned(&a));
    let (topic, partition) = owned[0].clone();
    assert!(matches!(
        t.commit(&a, &topic, partition, 7),
        Response::CommitOffsets(_)
    ));
    run_beating(&mut t, &mut b, LEASE * 3);
    assert_eq!(removed_at(&t, &a), None, "expelled by a closed connection");
    run_beating(&mut t, &mut b, SESSION);
    assert_eq!(removed_at(&t, &a), Some(ExpelReason::SessionExpired));
}

/// A static member that stood down stays until its session runs out, even when its
/// old connection closed before it stood down.
#[test]
fn a_stood_down_member_keeps_its_session_after_its_connection_closed() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.lease_timeout_ms = LEASE.as_millis() as u32;
    req.instance_id = Some("worker-1".into());
    let mut a = t.join_with(1, req).unwrap();
    let mut b = join_leased(&mut t, 2, LEASE);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    t.core.handle_disconnect(t.now, a.conn);
    a.conn = 9;
    let left = t.request(
        a.conn,
        Request::Leave(rollcall_protocol::LeaveRequest {
            group: "g".into(),
            member_id: a.id.clone(),
            mode: rollcall_protocol::LeaveMode::StandDown,
        }),
    );
    assert_eq!(left, Response::Leave);
    run_beating(&mut t, &mut b, LEASE * 3);
    assert_eq!(removed_at(&t, &a), None, "a stand-down is not a crash");
}

#[test]
fn relinquish_refuses_an_empty_member_id() {
    let mut t = TestContext::new();
    let _ = pair(&mut t, LEASE);
    assert_eq!(
        error_code(&relinquish(&mut t, 9, "")),
        Some(ErrorCode::InvalidRequest)
    );
}

/// A member whose connection closed is most likely gone: a rebalance meanwhile gives it
/// targets but no partitions (they would wait out its lease), until it is heard again.
#[test]
fn a_member_whose_connection_closed_is_granted_nothing_until_it_resumes() {
    let mut t = TestContext::new();
    let lease = Duration::from_secs(5);
    let (mut a, mut b) = pair(&mut t, lease);
    t.core.handle_disconnect(t.now, a.conn);
    // `b` leaves: its partitions are free, and `a`'s target takes them all.
    t.expect_beat_ok(&mut b);
    assert_eq!(
        t.ack_all(&mut b),
        Response::Heartbeat(t.expect_beat_ok(&mut b))
    );
    assert_eq!(
        t.request(
            b.conn,
            Request::Leave(rollcall_protocol::LeaveRequest {
                group: "g".into(),
                member_id: b.id.clone(),
                mode: rollcall_protocol::LeaveMode::Released,
            }),
        ),
        Response::Leave
    );
    t.advance(SETTLE);
    let id = a.id.clone();
    let owned_by_a = |t: &mut TestContext| {
        let d = t.describe("g");
        let m = d
            .members
            .iter()
            .find(|m| m.member_id == id)
            .expect("a is a member");
        count(&m.owned)
    };
    assert_eq!(owned_by_a(&mut t), 3, "granted to a closed connection");
    a.conn = 4;
    t.expect_beat_ok(&mut a);
    t.advance(Duration::from_millis(1));
    assert_eq!(owned_by_a(&mut t), 6, "granted once it resumed");
    assert_eq!(count(&t.owned(&a)), 6, "and pushed");
}

/// A static member heard again after it stood down is no longer stood down, and the
/// snapshot says so: a restart must not hand its partitions to a replacement at once.
#[test]
fn a_member_heard_after_standing_down_is_snapshotted_as_back() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.instance_id = Some("worker-1".into());
    let mut a = t.join_with(1, req).unwrap();
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let left = t.request(
        a.conn,
        Request::Leave(rollcall_protocol::LeaveRequest {
            group: "g".into(),
            member_id: a.id.clone(),
            mode: rollcall_protocol::LeaveMode::StandDown,
        }),
    );
    assert_eq!(left, Response::Leave);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.advance(SETTLE);
    let stood_down = t.records.iter().rev().find_map(|r| match r {
        crate::core::Record::Group(g) => g
            .members
            .iter()
            .find(|m| m.member_id == a.id)
            .map(|m| m.stood_down),
        _ => None,
    });
    assert_eq!(
        stood_down,
        Some(false),
        "the last snapshot still says it stood down"
    );
}

/// After a restart, a member not heard since is granted nothing new (it may have died
/// around the restart); the first frame from it brings its grants.
#[test]
fn a_member_not_heard_since_a_restart_is_granted_nothing_until_it_is() {
    let mut t = TestContext::new();
    let (mut a, mut b) = pair(&mut t, LEASE);
    let mut c = join_leased(&mut t, 3, LEASE);
    t.advance(SETTLE);
    restart(&mut t);
    let owned_by = |t: &mut TestContext, id: &str| {
        let d = t.describe("g");
        d.members
            .iter()
            .find(|m| m.member_id == id)
            .map_or(0, |m| count(&m.owned))
    };
    // `a` and `b` come back and release what moves to `c`; `c` stays silent.
    a.conn = 4;
    b.conn = 5;
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    t.advance(SETTLE);
    t.ack_all(&mut a);
    t.ack_all(&mut b);
    t.advance(SETTLE);
    assert_eq!(owned_by(&mut t, &a.id) + owned_by(&mut t, &b.id), 4);
    assert_eq!(
        owned_by(&mut t, &c.id),
        0,
        "granted to a member nobody heard"
    );
    c.conn = 6;
    t.expect_beat_ok(&mut c);
    t.advance(Duration::from_millis(1));
    assert_eq!(owned_by(&mut t, &c.id), 2, "granted once heard");
    t.assert_exclusive("g");
}
