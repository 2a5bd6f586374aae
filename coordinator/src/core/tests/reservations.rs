//! Departure delay: a static member that goes away without leaving keeps its
//! partitions reserved, unowned, for its instance to come back to; the others are not
//! rebalanced. Back in time, it gets the same partitions and nobody else's move; not
//! back, they move when the delay ends. Restores keep the reservation; Leave ends it.

use std::collections::BTreeSet;
use std::time::Duration;

use rollcall_protocol::{LeaveMode, LeaveRequest, Request, Response};

use super::*;
use crate::core::{GroupConfig, RebalanceCause, ReservationEnd, RestoredState};
use crate::store::{MemoryStore, Store};

const DELAY: Duration = Duration::from_secs(30);
const SECOND: Duration = Duration::from_secs(1);

fn join_static(t: &mut TestContext, conn: ConnId, instance: &str) -> M {
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.instance_id = Some(instance.to_owned());
    t.join_with(conn, req).expect("join accepted")
}

/// Each of `members` beats (acknowledging what it is asked) once a second for `d`.
fn run(t: &mut TestContext, members: &mut [&mut M], d: Duration) {
    let steps = (d.as_millis() / SECOND.as_millis()) as u32;
    for _ in 0..steps {
        t.advance(SECOND);
        for m in members.iter_mut() {
            let r = t.ack_all(m);
            assert!(matches!(r, Response::Heartbeat(_)), "{}: {r:?}", m.id);
        }
        t.assert_exclusive("g");
    }
}

fn owned(t: &TestContext, m: &M) -> BTreeSet<(String, u32)> {
    flatten(&t.owned(m)).into_iter().collect()
}

/// Every partition some member owns, as describe shows it.
fn owned_by_anyone(t: &mut TestContext) -> BTreeSet<(String, u32)> {
    let d = t.describe("g");
    d.members.iter().flat_map(|m| flatten(&m.owned)).collect()
}

/// Three static members a, b, c with two partitions each, in a group with a 30 s
/// departure delay; then c goes silent and is expelled. Returns a, b, c and what c
/// owned.
fn c_departs(t: &mut TestContext) -> (M, M, M, BTreeSet<(String, u32)>) {
    let mut a = join_static(t, 1, "a");
    let mut b = join_static(t, 2, "b");
    let mut c = join_static(t, 3, "c");
    run(t, &mut [&mut a, &mut b, &mut c], 2 * SECOND);
    for m in [&a, &b, &c] {
        assert_eq!(owned(t, m).len(), 2, "{} settled", m.id);
    }
    t.core.groups.get_mut("g").expect("group").config = GroupConfig {
        departure_delay_ms: DELAY.as_millis() as u32,
        ..GroupConfig::default()
    };
    let c_owned = owned(t, &c);
    let rebalances = t.rebalances_started();
    // c falls silent: its session (10 s) runs out.
    run(t, &mut [&mut a, &mut b], SESSION + SECOND);
    assert_eq!(
        t.expelled(&c),
        Some(rollcall_protocol::ExpelReason::SessionExpired)
    );
    assert!(
        t.events.iter().any(|e| matches!(
            e,
            Event::PartitionsReserved { instance_id, partitions: 2, .. } if instance_id == "c"
        )),
        "reservation started"
    );
    assert_eq!(t.rebalances_started(), rebalances, "nobody rebalanced");
    (a, b, c, c_owned)
}

#[test]
fn an_instance_back_within_the_delay_gets_its_partitions_and_nobody_else_moves() {
    let mut t = TestContext::new();
    let (mut a, mut b, _c, c_owned) = c_departs(&mut t);
    let (a_owned, b_owned) = (owned(&t, &a), owned(&t, &b));
    let rebalances = t.rebalances_started();
    // Within the delay, nobody is granted c's partitions.
    for _ in 0..10 {
        run(&mut t, &mut [&mut a, &mut b], 2 * SECOND);
        assert_eq!(owned(&t, &a), a_owned);
        assert_eq!(owned(&t, &b), b_owned);
        assert!(owned_by_anyone(&mut t).is_disjoint(&c_owned));
    }
    assert_eq!(t.core.groups["g"].partitions_reserved(), 2);
    // c's instance comes back (a new process, a new member id).
    let mut c2 = join_static(&mut t, 4, "c");
    run(&mut t, &mut [&mut a, &mut b, &mut c2], 2 * SECOND);
    assert_eq!(owned(&t, &c2), c_owned, "the same partitions");
    assert_eq!(owned(&t, &a), a_owned);
    assert_eq!(owned(&t, &b), b_owned);
    assert_eq!(t.rebalances_started(), rebalances, "nobody rebalanced");
    assert!(t.events.iter().any(|e| matches!(
        e,
        Event::ReservationReturned { instance_id, partitions: 2, .. } if instance_id == "c"
    )));
    assert_eq!(t.core.groups["g"].partitions_reserved(), 0);
    // Nothing else happens when the delay would have ended.
    run(&mut t, &mut [&mut a, &mut b, &mut c2], DELAY);
    assert_eq!(t.rebalances_started(), rebalances);
    assert_eq!(owned(&t, &c2), c_owned);
}

#[test]
fn when_the_delay_ends_the_reserved_partitions_move() {
    let mut t = TestContext::new();
    let (mut a, mut b, _c, c_owned) = c_departs(&mut t);
    let reserved_at = t.now;
    // Expelled about a second before c_departs returned: the delay ends 30 s after.
    run(&mut t, &mut [&mut a, &mut b], DELAY - 3 * SECOND);
    assert!(
        owned_by_anyone(&mut t).is_disjoint(&c_owned),
        "not before the delay ends"
    );
    run(&mut t, &mut [&mut a, &mut b], 5 * SECOND);
    assert!(t.events.iter().any(|e| matches!(
        e,
        Event::RebalanceStarted {
            cause: RebalanceCause::DepartureDelayEnded,
            ..
        }
    )));
    assert!(t.events.iter().any(|e| matches!(
        e,
        Event::ReservationEnded {
            reason: ReservationEnd::Expired,
            ..
        }
    )));
    assert!(t.now - reserved_at >= DELAY - 2 * SECOND);
    assert_eq!(owned(&t, &a).len() + owned(&t, &b).len(), 6, "all owned");
    assert_eq!(t.core.groups["g"].partitions_reserved(), 0);
}

/// Without a delay, the same departure rebalances at once (as before delays existed).
#[test]
fn without_a_delay_a_departure_rebalances() {
    let mut t = TestContext::new();
    let mut a = join_static(&mut t, 1, "a");
    let mut b = join_static(&mut t, 2, "b");
    let c = join_static(&mut t, 3, "c");
    run(&mut t, &mut [&mut a, &mut b], 2 * SECOND);
    let _ = c;
    run(&mut t, &mut [&mut a, &mut b], SESSION + 3 * SECOND);
    assert!(!t
        .events
        .iter()
        .any(|e| matches!(e, Event::PartitionsReserved { .. })));
    assert_eq!(owned(&t, &a).len() + owned(&t, &b).len(), 6);
}

#[test]
fn a_restore_in_the_middle_of_the_delay_keeps_the_reservation() {
    let mut t = TestContext::new();
    let (mut a, mut b, _c, c_owned) = c_departs(&mut t);
    run(&mut t, &mut [&mut a, &mut b], 10 * SECOND);
    let store = MemoryStore::new();
    store.write(&t.records).expect("memory store accepts");
    let state: RestoredState = store.load().expect("memory store loads");
    let mut config = t.core.config().clone();
    config.member_id_prefix = "r-".into();
    t.core = Coordinator::new(config);
    t.core.restore(t.now, state);
    t.drain();
    let g = &t.core.groups["g"];
    let reservation = g
        .held
        .iter()
        .find(|h| h.reserved_for.as_deref() == Some("c"))
        .expect("the reservation survived");
    // Counted from the last snapshot: checkpoints (an eighth of the delay apart) keep
    // it at most that stale.
    let left = reservation.until - t.now;
    assert!(
        left > DELAY - 12 * SECOND - DELAY / 8 && left <= DELAY - 10 * SECOND + DELAY / 8,
        "{left:?} left"
    );
    assert_eq!(g.partitions_reserved(), 2);
    let rebalances = t.rebalances_started();
    run(&mut t, &mut [&mut a, &mut b], 5 * SECOND);
    assert!(owned_by_anyone(&mut t).is_disjoint(&c_owned));
    let mut c2 = join_static(&mut t, 4, "c");
    run(&mut t, &mut [&mut a, &mut b, &mut c2], 2 * SECOND);
    assert_eq!(owned(&t, &c2), c_owned);
    assert_eq!(t.rebalances_started(), rebalances, "nobody rebalanced");
}

/// The departed member's process leaving ends the reservation: its partitions move.
#[test]
fn a_leave_ends_the_reservation() {
    let mut t = TestContext::new();
    let (mut a, mut b, c, c_owned) = c_departs(&mut t);
    let resp = t.request(
        c.conn,
        Request::Leave(LeaveRequest {
            group: "g".into(),
            member_id: c.id.clone(),
            mode: LeaveMode::Released,
        }),
    );
    assert!(matches!(resp, Response::Leave), "{resp:?}");
    assert!(t.events.iter().any(|e| matches!(
        e,
        Event::ReservationEnded {
            reason: ReservationEnd::Left,
            ..
        }
    )));
    run(&mut t, &mut [&mut a, &mut b], 3 * SECOND);
    assert!(c_owned.is_subset(&owned_by_anyone(&mut t)));
    assert_eq!(owned(&t, &a).len() + owned(&t, &b).len(), 6);
    // A leave of a member still in the group reserves nothing.
    t.leave(&b);
    run(&mut t, &mut [&mut a], 3 * SECOND);
    assert_eq!(owned(&t, &a).len(), 6);
    assert_eq!(t.core.groups["g"].partitions_reserved(), 0);
}

/// An instance back with a subscription the reservation does not cover joins as any
/// new member: the reservation ends and the group rebalances.
#[test]
fn an_instance_back_with_another_subscription_ends_the_reservation() {
    let mut t = TestContext::new();
    let (mut a, mut b, _c, _) = c_departs(&mut t);
    let rebalances = t.rebalances_started();
    let mut req = t.join_request("g", &[("payments", 3)]);
    req.instance_id = Some("c".to_owned());
    let mut c2 = t.join_with(4, req).expect("join accepted");
    run(&mut t, &mut [&mut a, &mut b, &mut c2], 3 * SECOND);
    assert!(t.rebalances_started() > rebalances);
    assert!(t.events.iter().any(|e| matches!(
        e,
        Event::ReservationEnded {
            reason: ReservationEnd::Rejoined,
            ..
        }
    )));
    assert_eq!(owned(&t, &a).len() + owned(&t, &b).len(), 6);
    assert_eq!(owned(&t, &c2).len(), 3);
}
