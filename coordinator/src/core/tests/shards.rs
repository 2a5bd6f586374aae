//! A shard's groups adopted and released at runtime: what a core hands back, what it
//! takes on, and each group's own generation floor.

use std::time::Duration;

use rollcall_protocol::{Push, Request, Response};

use super::{TestContext, SESSION};
use crate::core::{Coordinator, Record, RestoredState};
use crate::store::{MemoryStore, Store};

/// What the store holds after `records`, for the groups `keep` accepts.
fn durable(records: &[Record], keep: &dyn Fn(&str) -> bool) -> RestoredState {
    let store = MemoryStore::new();
    store
        .write(records)
        .expect("the memory store accepts every record");
    store.load_groups(keep).expect("the memory store loads")
}

/// A released group's members get nothing further from the core: no push, no
/// expulsion, no record, and a request about the group finds none. The group it keeps
/// runs on.
#[test]
fn a_released_group_sends_its_members_nothing_further() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "a", &[("orders", 4)]);
    let b = t.join(2, "b", &[("orders", 4)]);
    t.advance(Duration::from_secs(1));
    t.expect_beat_ok(&mut a);
    // A change not yet taken (a second member joins): the release snapshots it, so
    // the next owner has it.
    let before = t.records.len();
    let join = t.join_request("a", &[("orders", 4)]);
    let joined = t.core.handle_request(t.now, 3, Request::Join(join));
    assert!(joined.wrote && joined.joined.is_some());
    let released = t.core.release(t.now, |g| g == "a");
    assert_eq!(released, [std::sync::Arc::from("a")]);
    t.drain();
    let (pushes, records) = (t.pushes.len(), t.records.len());
    let last = t.records[before..].iter().rev().find_map(|r| match r {
        Record::Group(g) if g.group == "a" => Some(g.members.len()),
        _ => None,
    });
    assert_eq!(last, Some(2), "the release lost a change not yet taken");
    // Long past every deadline: b is expelled, a's member hears nothing.
    t.advance(SESSION * 3);
    assert!(
        t.pushes[pushes..]
            .iter()
            .all(|(_, conn, _)| *conn != a.conn),
        "a released group's member was pushed to: {:?}",
        &t.pushes[pushes..]
    );
    assert!(
        t.pushes[pushes..]
            .iter()
            .any(|(_, _, p)| matches!(p, Push::Expelled(e) if e.member_id == b.id))
            || t.records[records..]
                .iter()
                .any(|r| matches!(r, Record::Group(g) if g.group == "b")),
        "time did not run for the group kept"
    );
    assert!(
        t.records[records..].iter().all(|r| r.group() != "a"),
        "a record about a released group"
    );
    assert!(!matches!(t.beat(&mut a), Response::Heartbeat(_)));
}

/// A group released and adopted again is restored by the same rules as a restart:
/// the core that takes it back describes it exactly as a core started from the same
/// durable state at the same instant, and its member goes on.
#[test]
fn a_readopted_group_restores_as_a_restart_would() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "a", &[("orders", 4)]);
    let mut other = t.join(2, "a", &[("orders", 4)]);
    t.join(3, "kept", &[("orders", 2)]);
    t.advance(Duration::from_secs(1));
    t.ack_all(&mut a);
    t.ack_all(&mut other);
    t.advance(Duration::from_secs(1));
    t.expect_beat_ok(&mut a);
    assert_eq!(t.core.release(t.now, |g| g == "a").len(), 1);
    t.drain();
    t.advance(Duration::from_secs(2));
    let state = durable(&t.records, &|g| g == "a");
    assert_eq!(state.groups.len(), 1, "{state:?}");

    let mut restarted = TestContext::with_config(t.core.config().clone());
    restarted.now = t.now;
    restarted.core.restore(t.now, state.clone());
    restarted.drain();
    t.core.restore(t.now, state);
    t.drain();
    assert_eq!(t.describe("a"), restarted.describe("a"));
    // The group it kept is untouched, and the adopted member goes on.
    assert_eq!(t.describe("kept").members.len(), 1);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut other);
}

/// Adopting a group the core already holds keeps what the core knows.
#[test]
fn restoring_a_group_already_held_keeps_it() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "a", &[("orders", 4)]);
    t.advance(Duration::from_secs(1));
    let stale = durable(&t.records, &|_| true);
    t.join(2, "a", &[("orders", 4)]);
    t.advance(Duration::from_secs(1));
    t.core.restore(t.now, stale);
    t.drain();
    assert_eq!(t.describe("a").members.len(), 2);
    t.expect_beat_ok(&mut a);
}

/// Each group starts above its own floor, and above the floor an earlier store kept
/// under every group; a group the store never deleted does not inherit another's.
#[test]
fn a_group_starts_above_its_own_floor() {
    let generation = |state: RestoredState, group: &str| {
        let mut t = TestContext::new();
        t.core.restore(t.now, state);
        let m = t.join(1, group, &[("orders", 2)]);
        t.advance(Duration::from_secs(1));
        t.generation_of(&m)
    };
    let own = || RestoredState {
        floors: vec![("g".to_owned(), 7)],
        ..RestoredState::default()
    };
    assert_eq!(generation(own(), "g"), 8);
    assert_eq!(generation(own(), "h"), 1);
    let everyone = RestoredState {
        generation_floor: 7,
        ..RestoredState::default()
    };
    assert_eq!(generation(everyone.clone(), "h"), 8);
    // Released with its shard, a group's floor goes too.
    let mut core = Coordinator::new(crate::core::CoreConfig::default());
    core.restore(std::time::Instant::now(), own());
    assert!(core
        .release(std::time::Instant::now(), |g| g == "g")
        .is_empty());
    assert!(core.floors.is_empty());
}

/// An abandoned group is dropped without a record: the change not yet taken is
/// forgotten (it was never revealed as durable), its member hears nothing further, and
/// a core that loads the store gets the group as it last was durably.
#[test]
fn an_abandoned_group_leaves_only_what_was_durable() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "a", &[("orders", 4)]);
    t.join(3, "kept", &[("orders", 2)]);
    t.advance(Duration::from_secs(1));
    t.expect_beat_ok(&mut a);
    t.drain();
    let durable_before = durable(&t.records, &|g| g == "a");
    // A second member's join writes a record that is not taken yet.
    let join = t.join_request("a", &[("orders", 4)]);
    assert!(t.core.handle_request(t.now, 2, Request::Join(join)).wrote);
    let (pushes, records) = (t.pushes.len(), t.records.len());
    assert_eq!(
        t.core.abandon(t.now, |g| g == "a"),
        [std::sync::Arc::from("a")]
    );
    t.drain();
    t.advance(SESSION * 3);
    assert!(
        t.records[records..].iter().all(|r| r.group() != "a"),
        "an abandoned group was written"
    );
    assert!(t.pushes[pushes..]
        .iter()
        .all(|(_, conn, _)| *conn != a.conn));
    assert!(!matches!(t.beat(&mut a), Response::Heartbeat(_)));
    assert!(t.records[records..].iter().any(|r| r.group() == "kept"));
    assert_eq!(durable(&t.records, &|g| g == "a"), durable_before);
}
