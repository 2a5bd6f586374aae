//! Regression tests for ways ownership or liveness once broke: one test per defect,
//! each written to fail on the code that had it, named after the defect's number (the
//! simulation's list of what it found refers to them), and grouped by topic. The
//! guards' defects are in `pause.rs`, `isolation.rs` and `backlog.rs`; the rest in
//! `restore.rs`, `fencing.rs`, `leases.rs` and `rebalance.rs`. Two defects were once
//! both numbered 4: `4a` (restore dropped a pending rebalance after a join or a leave)
//! and `4b` (a recovery rebalance was not made durable). The helpers are all here.

mod backlog;
mod fencing;
mod isolation;
mod leases;
mod pause;
mod rebalance;
mod restore;

use std::time::{Duration, Instant};

use rollcall_protocol::{ErrorCode, ExpelReason, LeaveMode, LeaveRequest, Request, Response};

use super::*;
use crate::core::{Coordinator, DetectorKind, Event, RebalanceCause, RestoredState};
use crate::store::{MemoryStore, Store};

const MS: Duration = Duration::from_millis(1);
const SETTLE: Duration = Duration::from_millis(300);

fn error_code(r: &Response) -> Option<ErrorCode> {
    match r {
        Response::Error(e) => Some(e.code),
        _ => None,
    }
}

/// What a store holds after applying `records` in order.
fn durable(records: &[Record]) -> RestoredState {
    let store = MemoryStore::new();
    store
        .write(records)
        .expect("the memory store accepts every record");
    store.load().expect("the memory store loads")
}

/// Restarts the coordinator from exactly what was made durable: a new core with the
/// same configuration (and a new member id prefix, as every start of the server has),
/// restored at the current instant. Every connection is gone.
fn restart(t: &mut TestContext) {
    let state = durable(&t.records);
    let mut config = t.core.config().clone();
    config.member_id_prefix = format!("r{}-", t.records.len());
    t.core = Coordinator::new(config);
    t.core.restore(t.now, state);
    t.drain();
}

/// Joins group "g" (`partitions` of "orders") on `conn`, with `change` made to the
/// usual join request first.
fn join_as(
    t: &mut TestContext,
    conn: ConnId,
    partitions: u32,
    change: impl FnOnce(&mut JoinRequest),
) -> M {
    let mut req = t.join_request("g", &[("orders", partitions)]);
    change(&mut req);
    t.join_with(conn, req).expect("join accepted")
}

fn join_with_session(t: &mut TestContext, conn: ConnId, session: Duration) -> M {
    join_as(t, conn, 6, |r| {
        r.session_timeout_ms = session.as_millis() as u32
    })
}

fn leave_with(t: &mut TestContext, m: &M, mode: LeaveMode) -> Response {
    t.request(
        m.conn,
        Request::Leave(LeaveRequest {
            group: m.group.clone(),
            member_id: m.id.clone(),
            mode,
        }),
    )
}

/// Why `m` was removed, from the core's events (an expelled member whose connection is
/// closed gets no push).
fn removed(t: &TestContext, m: &M) -> Option<ExpelReason> {
    t.events.iter().find_map(|e| match e {
        Event::MemberRemoved {
            member_id, reason, ..
        } if *member_id == m.id => Some(*reason),
        _ => None,
    })
}

/// When a partition of `from` was first pushed to another member, if ever.
fn first_grant_elsewhere(
    t: &TestContext,
    from: &M,
    partitions: &[(String, u32)],
) -> Option<Duration> {
    t.pushes.iter().find_map(|(at, _, p)| match p {
        rollcall_protocol::Push::Assignment(a)
            if a.member_id != from.id
                && flatten(&a.partitions)
                    .iter()
                    .any(|tp| partitions.contains(tp)) =>
        {
            Some(*at - t.start)
        }
        _ => None,
    })
}

fn minus(a: &[(String, u32)], b: &[(String, u32)]) -> Vec<(String, u32)> {
    a.iter().filter(|tp| !b.contains(tp)).cloned().collect()
}

fn both(a: &[(String, u32)], b: &[(String, u32)]) -> Vec<(String, u32)> {
    a.iter().filter(|tp| b.contains(tp)).cloned().collect()
}

fn recovered(t: &TestContext) -> usize {
    t.events
        .iter()
        .filter(|e| matches!(e, Event::MemberRecovered { .. }))
        .count()
}

/// `a` (rebalance timeout `rebalance`) owns all 6 partitions of `orders`; `b` and `c`
/// join and `a` is asked to release 4. Returns the three members and when `a` was
/// asked, after one heartbeat from each (none from `a` acknowledges).
fn a_asked_to_release(t: &mut TestContext, rebalance: Duration) -> (M, M, M, Instant) {
    let mut a = join_as(t, 1, 6, |r| {
        r.rebalance_timeout_ms = rebalance.as_millis() as u32
    });
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    assert_eq!(count(&t.owned(&a)), 6);
    let mut b = t.join(2, "g", &[("orders", 6)]);
    let mut c = t.join(3, "g", &[("orders", 6)]);
    t.advance(SETTLE);
    assert_eq!(count(&t.revoking(&a)), 4);
    let asked = t
        .pushes
        .iter()
        .rev()
        .find_map(|(at, _, p)| match p {
            rollcall_protocol::Push::Revoke(r) if r.member_id == a.id => Some(*at),
            _ => None,
        })
        .expect("a revocation pushed to a");
    for m in [&mut a, &mut b, &mut c] {
        t.expect_beat_ok(m);
    }
    (a, b, c, asked)
}

/// When the Expelled push to `m` went out, if it did.
fn expelled_at(t: &TestContext, m: &M) -> Option<Instant> {
    t.pushes.iter().find_map(|(at, _, p)| match p {
        rollcall_protocol::Push::Expelled(e) if e.member_id == m.id => Some(*at),
        _ => None,
    })
}

/// Whether a guard reported holding `m` as long as it may.
fn hold_expired(t: &TestContext, m: &M, guard: crate::core::Guard) -> bool {
    t.events.iter().any(|e| {
        matches!(e, Event::HoldExpired { guard: g, member_id, .. }
            if *g == guard && *member_id == m.id)
    })
}

/// Isolations, again and again: everyone is silent for 9 s, then one round of
/// heartbeats is read, then silence again (a coordinator whose network is down most of
/// the time), with `stuck` beating by `beat`. Checks that `stuck` is expelled for
/// `reason` by `bound` (its wait began at `from`), and the others stay.
fn isolated_again_and_again(
    t: &mut TestContext,
    stuck: &mut M,
    others: [&mut M; 2],
    beat: fn(&mut TestContext, &mut M) -> Response,
    reason: ExpelReason,
    from: Instant,
    bound: Instant,
) {
    let [b, c] = others;
    while t.now < bound + Duration::from_secs(60) && t.expelled(stuck).is_none() {
        t.advance(Duration::from_secs(9));
        if t.expelled(stuck).is_none() {
            assert!(matches!(beat(t, stuck), Response::Heartbeat(_)));
        }
        t.expect_beat_ok(b);
        t.expect_beat_ok(c);
    }
    let isolations = t
        .events
        .iter()
        .filter(|e| matches!(e, Event::IsolationEnded { .. }))
        .count();
    assert!(isolations >= 2, "{isolations} isolations");
    assert_eq!(t.expelled(stuck), Some(reason));
    let at = expelled_at(t, stuck).unwrap();
    assert!(
        at <= bound,
        "expelled {:?} after its wait began, {:?} past the bound",
        at - from,
        at - bound
    );
    assert!([&*b, &*c].iter().all(|m| removed(t, m).is_none()));
}
