//! Readable scenarios, one behaviour each.

use std::time::Duration;

use rollcall_protocol::{ErrorCode, ExpelReason, GroupState, Push, Request, Response};

use super::*;
use crate::core::{Event, RebalanceCause};
use crate::store::{MemoryStore, Store};

const MS: Duration = Duration::from_millis(1);
const SETTLE: Duration = Duration::from_millis(300);

fn error_code(r: &Response) -> Option<ErrorCode> {
    match r {
        Response::Error(e) => Some(e.code),
        _ => None,
    }
}

/// 1. One member joins an empty group: it owns every partition, generation 1, stable.
#[test]
fn first_member_owns_everything_in_generation_one() {
    let mut t = TestContext::new();
    let a = t.join(1, "g", &[("orders", 8)]);
    assert_eq!(t.describe("g").state, GroupState::Reconciling);
    t.advance(SETTLE);
    let (owned, generation) = t.assignment(&a).expect("assignment pushed");
    assert_eq!(owned, tps("orders", &[0, 1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(generation, 1);
    let d = t.describe("g");
    assert_eq!((d.state, d.generation), (GroupState::Stable, 1));
    assert_eq!(d.assignor, "sticky");
}

/// 2. A second member joins: generation 2; the first is asked to revoke about half; the
///    second receives those only after the first acknowledges; the first keeps, and
///    commits on, the rest throughout.
#[test]
fn second_member_gets_partitions_only_after_the_first_releases_them() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 10)]);
    t.advance(SETTLE);
    let mut b = t.join(2, "g", &[("orders", 10)]);
    t.advance(SETTLE);
    t.assert_exclusive("g");

    let revoking = t.revoking(&a);
    assert_eq!(count(&revoking), 5, "a is asked to give up half");
    let (b_owned, b_gen) = t.assignment(&b).expect("b told of generation 2");
    assert_eq!(
        (count(&b_owned), b_gen),
        (0, 2),
        "b gets nothing before a releases"
    );
    assert_eq!(t.generation_of(&a), 2);
    assert_eq!(
        count(&t.owned(&a)),
        10,
        "a keeps working on everything meanwhile"
    );

    // a keeps committing on every partition it still owns, including those being revoked.
    let kept: Vec<u32> = (0..10)
        .filter(|p| !revoking[0].partitions.contains(p))
        .collect();
    assert_eq!(t.commit_result(&a, "orders", kept[0], 100), ErrorCode::None);
    let moving = revoking[0].partitions[0];
    assert_eq!(t.commit_result(&a, "orders", moving, 7), ErrorCode::None);
    t.expect_beat_ok(&mut b);

    // a acknowledges; b receives exactly those partitions, by push, at once.
    let before = t.pushes.len();
    assert!(matches!(t.ack_all(&mut a), Response::Heartbeat(_)));
    assert_eq!(t.owned(&b), revoking);
    assert!(t.pushes[before..]
        .iter()
        .any(|(_, conn, p)| *conn == 2 && matches!(p, Push::Assignment(x) if x.member_id == b.id)));
    assert_eq!(count(&t.owned(&a)), 5);
    assert_eq!(t.commit_result(&a, "orders", kept[0], 101), ErrorCode::None);
    assert_eq!(
        t.commit_result(&a, "orders", moving, 8),
        ErrorCode::PartitionRevoked
    );
    assert_eq!(t.commit_result(&b, "orders", moving, 8), ErrorCode::None);
    t.assert_exclusive("g");
    let d = t.describe("g");
    assert_eq!((d.state, d.generation), (GroupState::Stable, 2));
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e, Event::RebalanceCompleted { generation: 2, .. })));
}

/// 3. A silent member is expelled at its session deadline and not one tick before; its
///    partitions move to the others in a new generation.
#[test]
fn silent_member_is_expelled_exactly_at_its_session_deadline() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 6)]);
    let mut b = t.join(2, "g", &[("orders", 6)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    let last_heard = t.now;
    let generation = t.generation_of(&a);

    // a keeps beating every second; b goes silent.
    while t.now + Duration::from_secs(1) < last_heard + SESSION {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
    }
    let remaining = (last_heard + SESSION) - t.now;
    t.advance(remaining - MS);
    assert_eq!(t.expelled(&b), None, "not one tick before the deadline");
    t.advance(MS);
    assert_eq!(t.expelled(&b), Some(ExpelReason::SessionExpired));
    assert_eq!(t.now, last_heard + SESSION);

    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    assert_eq!(count(&t.owned(&a)), 6);
    assert_eq!(t.generation_of(&a), generation + 1);
    assert_eq!(error_code(&t.beat(&mut b)), Some(ErrorCode::MemberExpelled));
}

/// 4. A member that heartbeats but makes no progress is expelled at its progress
///    deadline with that reason, and told so by push.
#[test]
fn heartbeating_member_without_progress_is_expelled_for_progress() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    let progress_at = t.now;
    loop {
        t.advance(Duration::from_secs(2));
        if t.expelled(&b).is_some() {
            break;
        }
        assert!(matches!(t.beat_stalled(&mut b), Response::Heartbeat(_)));
        t.expect_beat_ok(&mut a);
        assert!(t.elapsed() < Duration::from_secs(600), "never expelled");
    }
    assert_eq!(t.expelled(&b), Some(ExpelReason::ProgressExpired));
    assert!(t.now >= progress_at + PROGRESS);
    assert!(t.now < progress_at + PROGRESS + Duration::from_secs(2));
    assert!(t.pushes.iter().any(|(_, conn, p)| *conn == 2
        && matches!(p, Push::Expelled(e) if e.reason == ExpelReason::ProgressExpired)));
    assert_eq!(t.expelled(&a), None);
}

/// 5. A member that never acknowledges a revocation is expelled after its rebalance
///    timeout; its partitions are granted onward, but only after its session deadline
///    (its lease) has passed.
#[test]
fn member_that_never_acknowledges_is_expelled_and_its_partitions_move_after_its_lease() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let asked_at = t.now - SETTLE;
    assert_eq!(count(&t.revoking(&a)), 2);
    // Both keep beating; a never acknowledges.
    while t.expelled(&a).is_none() {
        t.advance(Duration::from_secs(1));
        if t.expelled(&a).is_none() {
            t.expect_beat_ok(&mut a);
        }
        t.expect_beat_ok(&mut b);
        assert!(t.elapsed() < Duration::from_secs(600));
    }
    assert_eq!(t.expelled(&a), Some(ExpelReason::RebalanceTimeout));
    let expelled_at = t.now;
    assert!(expelled_at >= asked_at + REBALANCE);
    // a's last heartbeat was at most a second ago: its partitions stay held until then.
    t.advance(SETTLE);
    t.expect_beat_ok(&mut b);
    assert_eq!(count(&t.owned(&b)), 0, "held while a's lease may still run");
    let mut granted_at = None;
    for _ in 0..20 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut b);
        if count(&t.owned(&b)) == 4 {
            granted_at = Some(t.now);
            break;
        }
    }
    let granted_at = granted_at.expect("partitions granted onward");
    assert!(granted_at >= expelled_at - Duration::from_secs(1) + SESSION);
    t.assert_exclusive("g");
}

/// 6a. Requests from unknown or expelled members get distinct errors.
#[test]
fn unknown_expelled_and_not_owner_errors_are_distinct() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 2)]);
    let mut b = t.join(2, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    let mut ghost = M {
        id: "nobody".into(),
        conn: 3,
        group: "g".into(),
        seq: 0,
        progress: 0,
    };
    assert_eq!(
        error_code(&t.beat(&mut ghost)),
        Some(ErrorCode::UnknownMember)
    );
    let a_owns = t.owned(&a)[0].partitions[0];
    let b_owns = t.owned(&b)[0].partitions[0];
    assert_eq!(t.commit_result(&a, "orders", a_owns, 1), ErrorCode::None);
    assert_eq!(
        t.commit_result(&a, "orders", b_owns, 1),
        ErrorCode::NotOwner
    );
    assert_eq!(t.commit_result(&a, "nope", 0, 1), ErrorCode::NotOwner);
    // b goes silent and is expelled; its requests now say so.
    for _ in 0..12 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
    }
    assert_eq!(t.expelled(&b), Some(ExpelReason::SessionExpired));
    assert_eq!(error_code(&t.beat(&mut b)), Some(ErrorCode::MemberExpelled));
    assert_eq!(
        t.commit_result(&b, "orders", b_owns, 2),
        ErrorCode::MemberExpelled
    );
    // A member that left is simply unknown.
    assert!(matches!(t.leave(&a), Response::Leave));
    assert_eq!(error_code(&t.beat(&mut a)), Some(ErrorCode::UnknownMember));
}

/// 6b. A join retried after a lost response does not create a second member.
#[test]
fn retried_join_returns_the_same_member() {
    let mut t = TestContext::new();
    let req = t.join_request("g", &[("orders", 4)]);
    let first = t.join_with(1, req.clone()).unwrap();
    let again = t.join_with(1, req).unwrap();
    assert_eq!(first.id, again.id);
    assert_eq!(t.describe("g").members.len(), 1);
}

/// 6c. A group at its size limit refuses the next join and is otherwise unaffected.
#[test]
fn full_group_refuses_the_next_join_and_is_unaffected() {
    let mut t = TestContext::with_config(CoreConfig {
        max_members_per_group: 2,
        ..CoreConfig::default()
    });
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let before = t.describe("g");
    let req = t.join_request("g", &[("orders", 4)]);
    let refused = t.join_with(3, req).unwrap_err();
    assert_eq!(error_code(&refused), Some(ErrorCode::GroupFull));
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    let after = t.describe("g");
    assert_eq!(before.generation, after.generation);
    assert_eq!(before.members.len(), after.members.len());
    assert_eq!(after.state, GroupState::Stable);
}

/// 6d. Static replacement keeps the generation and fences the old member.
#[test]
fn static_member_replacement_keeps_generation_and_fences_the_old_id() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.instance_id = Some("worker-1".into());
    let mut old = t.join_with(1, req.clone()).unwrap();
    let mut other = t.join(2, "g", &[("orders", 6)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut old);
    t.expect_beat_ok(&mut other);
    let generation = t.describe("g").generation;
    let old_owned = t.owned(&old);
    let rebalances = t.rebalances_started();

    // The process restarts: same instance id, new join token, new connection. The old
    // process may still be acting until its lease runs out, so the new one gets its
    // partitions then.
    req.join_token = 999;
    let mut new = t.join_with(3, req).unwrap();
    assert_ne!(new.id, old.id);
    t.advance(SETTLE);
    assert!(t.owned(&new).is_empty(), "waits for the old lease");
    for _ in 0..10 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut new);
        t.expect_beat_ok(&mut other);
    }
    assert_eq!(t.owned(&new), old_owned, "takes over the old partitions");
    assert_eq!(t.generation_of(&new), generation);
    assert_eq!(t.describe("g").generation, generation, "no rebalance");
    assert_eq!(t.rebalances_started(), rebalances);
    assert_eq!(t.expelled(&old), Some(ExpelReason::Fenced));
    assert_eq!(
        error_code(&t.beat(&mut old)),
        Some(ErrorCode::FencedInstance)
    );
    let p = old_owned[0].partitions[0];
    assert_eq!(
        t.commit_result(&old, "orders", p, 5),
        ErrorCode::FencedInstance
    );
    assert_eq!(t.commit_result(&new, "orders", p, 5), ErrorCode::None);
    t.expect_beat_ok(&mut new);
    t.assert_exclusive("g");
}

#[test]
fn inconsistent_partition_count_is_refused_and_the_group_is_unaffected() {
    let mut t = TestContext::new();
    let _a = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let req = t.join_request("g", &[("orders", 5)]);
    let refused = t.join_with(2, req).unwrap_err();
    assert_eq!(
        error_code(&refused),
        Some(ErrorCode::InconsistentSubscription)
    );
    let d = t.describe("g");
    assert_eq!((d.members.len(), d.generation), (1, 1));
}

#[test]
fn join_limits_are_enforced_with_clear_errors() {
    let mut t = TestContext::with_config(CoreConfig {
        max_partitions_per_group: 100,
        ..CoreConfig::default()
    });
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.session_timeout_ms = 1;
    assert_eq!(
        error_code(&t.join_with(1, req).unwrap_err()),
        Some(ErrorCode::InvalidSessionTimeout)
    );
    let req = t.join_request("g", &[("orders", 101)]);
    assert_eq!(
        error_code(&t.join_with(1, req).unwrap_err()),
        Some(ErrorCode::TooManyPartitions)
    );
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.join_token = 0;
    assert_eq!(
        error_code(&t.join_with(1, req).unwrap_err()),
        Some(ErrorCode::InvalidRequest)
    );
    let req = t.join_request("", &[("orders", 4)]);
    assert_eq!(
        error_code(&t.join_with(1, req).unwrap_err()),
        Some(ErrorCode::InvalidRequest)
    );
    let req = t.join_request("g", &[("orders", 0)]);
    assert_eq!(
        error_code(&t.join_with(1, req).unwrap_err()),
        Some(ErrorCode::InvalidRequest)
    );
}

#[test]
fn oversized_commit_metadata_is_refused_per_partition() {
    let mut t = TestContext::with_config(CoreConfig {
        max_metadata_bytes: 8,
        ..CoreConfig::default()
    });
    let a = t.join(1, "g", &[("orders", 1)]);
    t.advance(SETTLE);
    let resp = t.request(
        1,
        Request::CommitOffsets(rollcall_protocol::CommitOffsetsRequest {
            group: "g".into(),
            member_id: Some(a.id.clone()),
            generation: 1,
            offsets: vec![rollcall_protocol::OffsetCommit {
                topic: "orders".into(),
                partition: 0,
                offset: 3,
                metadata: "123456789".into(),
            }],
        }),
    );
    match resp {
        Response::CommitOffsets(c) => assert_eq!(c.results[0].error, ErrorCode::MetadataTooLarge),
        other => panic!("{other:?}"),
    }
}

#[test]
fn joins_within_the_coalescing_window_share_one_generation() {
    let mut t = TestContext::new();
    let mut members = Vec::new();
    for i in 0..1000 {
        members.push(t.join(i, "g", &[("orders", 2000)]));
        if i % 100 == 0 {
            t.advance(MS);
        }
    }
    t.advance(SETTLE);
    let generation = t.describe("g").generation;
    assert!(generation <= 2, "1,000 joins took {generation} generations");
    // Every member holds 2 partitions once revocations are acknowledged.
    for _ in 0..3 {
        for m in &mut members {
            t.ack_all(m);
        }
        t.advance(SETTLE);
    }
    let d = t.describe("g");
    assert_eq!(d.state, GroupState::Stable);
    assert!(d.members.iter().all(|m| count(&m.owned) == 2));
}

#[test]
fn committed_offsets_can_be_fetched_and_admin_commits_need_an_empty_group() {
    let mut t = TestContext::new();
    let admin = |member: Option<String>| {
        Request::CommitOffsets(rollcall_protocol::CommitOffsetsRequest {
            group: "g".into(),
            member_id: member,
            generation: 0,
            offsets: vec![rollcall_protocol::OffsetCommit {
                topic: "orders".into(),
                partition: 0,
                offset: 42,
                metadata: "seed".into(),
            }],
        })
    };
    assert!(matches!(
        t.request(9, admin(None)),
        Response::CommitOffsets(_)
    ));
    let a = t.join(1, "g", &[("orders", 1)]);
    t.advance(SETTLE);
    assert_eq!(
        error_code(&t.request(9, admin(None))),
        Some(ErrorCode::InvalidRequest)
    );
    assert_eq!(t.commit_result(&a, "orders", 0, 43), ErrorCode::None);
    let fetched = t.request(
        9,
        Request::FetchOffsets(rollcall_protocol::FetchOffsetsRequest {
            group: "g".into(),
            topics: vec![],
            page: None,
        }),
    );
    match fetched {
        Response::FetchOffsets(f) => {
            assert_eq!(f.offsets.len(), 1);
            assert_eq!(f.offsets[0].offset, 43);
        }
        other => panic!("{other:?}"),
    }
    assert!(t
        .records
        .iter()
        .any(|r| matches!(r, Record::Offset(o) if o.offset == 43)));
}

#[test]
fn members_keep_sessions_across_reconnects_and_are_rebound() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 3)]);
    t.advance(SETTLE);
    t.core.handle_disconnect(t.now, 1);
    t.advance(Duration::from_secs(5));
    a.conn = 7;
    let before = t.pushes.len();
    t.expect_beat_ok(&mut a);
    assert!(
        t.pushes[before..]
            .iter()
            .any(|(_, conn, p)| *conn == 7 && matches!(p, Push::Assignment(_))),
        "state pushed again on the new connection"
    );
    assert_eq!(count(&t.owned(&a)), 3);
}

#[test]
fn a_paused_coordinator_expels_nobody() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 3)]);
    let mut b = t.join(2, "g", &[("orders", 3)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    // The whole coordinator stops for a minute (longer than every session).
    t.freeze_for(Duration::from_secs(60));
    assert_eq!(t.expelled(&a), None);
    assert_eq!(t.expelled(&b), None);
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e, Event::PauseDetected { .. })));
    // Members that beat again carry on; one that stays silent expires normally.
    t.expect_beat_ok(&mut a);
    for _ in 0..11 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
    }
    assert_eq!(t.expelled(&a), None);
    assert_eq!(t.expelled(&b), Some(ExpelReason::SessionExpired));
}

#[test]
fn leave_releases_partitions_at_once() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    assert!(matches!(t.leave(&b), Response::Leave));
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    assert_eq!(count(&t.owned(&a)), 4);
    assert!(t.events.iter().any(|e| matches!(
        e,
        Event::RebalanceStarted {
            cause: RebalanceCause::Leave,
            ..
        }
    )));
    assert_eq!(
        t.expelled(&b),
        None,
        "a member that leaves is not told it was expelled"
    );
}

#[test]
fn stale_generation_in_a_heartbeat_gets_the_assignment_pushed_again() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    let before = t.pushes.len();
    a.seq += 1;
    a.progress += 1;
    let resp = t.request(
        1,
        Request::Heartbeat(rollcall_protocol::HeartbeatRequest {
            loads: Vec::new(),
            group: "g".into(),
            member_id: a.id.clone().into(),
            generation: 0,
            sequence: a.seq,
            progress: a.progress,
            acked_revocations: vec![],
        }),
    );
    assert!(matches!(resp, Response::Heartbeat(h) if h.generation == 1));
    assert!(t.pushes[before..]
        .iter()
        .any(|(_, _, p)| matches!(p, Push::Assignment(_))));
    // A generation from the future is refused.
    let resp = t.request(
        1,
        Request::Heartbeat(rollcall_protocol::HeartbeatRequest {
            loads: Vec::new(),
            group: "g".into(),
            member_id: a.id.clone().into(),
            generation: 99,
            sequence: a.seq + 1,
            progress: a.progress,
            acked_revocations: vec![],
        }),
    );
    assert_eq!(error_code(&resp), Some(ErrorCode::IllegalGeneration));
}

#[test]
fn restart_restores_groups_without_a_rebalance() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.ack_all(&mut a);
    t.ack_all(&mut b);
    t.advance(SETTLE);
    assert_eq!(
        t.commit_result(&a, "orders", t.owned(&a)[0].partitions[0], 9),
        ErrorCode::None
    );
    let generation = t.describe("g").generation;
    let a_owned = t.owned(&a);
    let store = MemoryStore::new();
    store
        .write(&std::mem::take(&mut t.records))
        .expect("stored");
    let state = store.load().expect("loaded");

    // A new core, much later by the clock, restored from the records.
    let mut t2 = TestContext::new();
    t2.now = t.now + Duration::from_secs(3600);
    t2.core.restore(t2.now, state);
    t2.pushes = t.pushes.clone();
    a.conn = 11;
    b.conn = 12;
    t2.expect_beat_ok(&mut a);
    t2.expect_beat_ok(&mut b);
    t2.advance(SETTLE);
    t2.expect_beat_ok(&mut a);
    let d = t2.describe("g");
    assert_eq!(d.generation, generation);
    assert_eq!(d.state, GroupState::Stable);
    assert_eq!(t2.owned(&a), a_owned);
    assert_eq!(t2.rebalances_started(), 0);
    assert_eq!(t2.expelled(&a), None);
    // Members that don't come back expire normally.
    for _ in 0..11 {
        t2.advance(Duration::from_secs(1));
        t2.expect_beat_ok(&mut a);
    }
    assert_eq!(t2.expelled(&b), Some(ExpelReason::SessionExpired));
}

#[test]
fn empty_groups_without_offsets_are_forgotten() {
    let mut t = TestContext::new();
    let a = t.join(1, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    t.leave(&a);
    t.advance(SETTLE);
    match t.request(0, Request::ListGroups(Default::default())) {
        Response::ListGroups(l) => assert!(l.groups.is_empty(), "{l:?}"),
        other => panic!("{other:?}"),
    }
}

/// The coordinator loses its network: every member goes silent at once. Nobody is
/// expelled; when members are heard again they all get the silence back, and one that
/// really died expires later.
#[test]
fn an_isolated_coordinator_does_not_mass_expel() {
    let mut t = TestContext::new();
    let mut ms: Vec<M> = (0..4).map(|i| t.join(i, "g", &[("orders", 8)])).collect();
    t.advance(SETTLE);
    for m in &mut ms {
        t.expect_beat_ok(m);
    }
    // Fifteen seconds of silence from everyone (longer than the session, shorter than
    // the guard's bound of one more session), with the coordinator's timers running.
    t.advance(Duration::from_secs(15));
    assert!(
        ms.iter().all(|m| t.expelled(m).is_none()),
        "nobody expelled"
    );
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e, Event::IsolationSuspected { members: 4, .. })));
    // The network returns; three members beat again, the fourth is dead.
    for m in ms.iter_mut().take(3) {
        t.expect_beat_ok(m);
    }
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e, Event::IsolationEnded { .. })));
    for _ in 0..12 {
        t.advance(Duration::from_secs(1));
        for m in ms.iter_mut().take(3) {
            t.expect_beat_ok(m);
        }
    }
    assert_eq!(t.expelled(&ms[3]), Some(ExpelReason::SessionExpired));
    assert!(ms.iter().take(3).all(|m| t.expelled(m).is_none()));
}

/// One member's silence is that member's fault: the guard does not hold it.
#[test]
fn one_silent_member_among_talking_ones_still_expires() {
    let mut t = TestContext::new();
    let mut ms: Vec<M> = (0..4).map(|i| t.join(i, "g", &[("orders", 8)])).collect();
    t.advance(SETTLE);
    for _ in 0..12 {
        t.advance(Duration::from_secs(1));
        for m in ms.iter_mut().take(3) {
            t.expect_beat_ok(m);
        }
    }
    assert_eq!(t.expelled(&ms[3]), Some(ExpelReason::SessionExpired));
}

/// A rebalance that gives a member back the partitions it was being asked to release
/// says so with an empty revoke push, so the member does not drop them.
#[test]
fn a_cancelled_revocation_is_pushed_as_an_empty_revoke_set() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    assert_eq!(count(&t.revoking(&a)), 2);
    // b leaves before a acknowledges: a keeps everything.
    t.leave(&b);
    t.advance(SETTLE);
    let last_revoke = t.pushes.iter().rev().find_map(|(_, _, p)| match p {
        Push::Revoke(r) if r.member_id == a.id => Some(r.partitions.clone()),
        _ => None,
    });
    assert_eq!(last_revoke, Some(vec![]));
    t.expect_beat_ok(&mut a);
    assert_eq!(t.describe("g").state, GroupState::Stable);
    assert_eq!(count(&t.owned(&a)), 4);
}

/// A rejoin naming a member that is gone is told why, instead of silently becoming
/// someone else.
#[test]
fn a_rejoin_naming_a_gone_member_is_refused_with_the_reason() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 2)]);
    let b = t.join(2, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    for _ in 0..12 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
    }
    assert_eq!(t.expelled(&b), Some(ExpelReason::SessionExpired));
    let mut req = t.join_request("g", &[("orders", 2)]);
    req.member_id = Some(b.id.clone());
    let refused = t.join_with(2, req).unwrap_err();
    assert_eq!(error_code(&refused), Some(ErrorCode::MemberExpelled));
    let mut req = t.join_request("g", &[("orders", 2)]);
    req.member_id = Some("never-was".into());
    let refused = t.join_with(2, req).unwrap_err();
    assert_eq!(error_code(&refused), Some(ErrorCode::UnknownMember));
    // Rejoining a live member with its id rebinds it.
    let mut req = t.join_request("g", &[("orders", 2)]);
    req.member_id = Some(a.id.clone());
    let again = t.join_with(5, req).unwrap();
    assert_eq!(again.id, a.id);
}

fn fetch_offsets(t: &mut TestContext, group: &str) -> Vec<(String, u32, i64)> {
    let request = Request::FetchOffsets(rollcall_protocol::FetchOffsetsRequest {
        group: group.into(),
        topics: vec![],
        page: None,
    });
    match t.request(0, request) {
        Response::FetchOffsets(f) => f
            .offsets
            .into_iter()
            .map(|o| (o.topic, o.partition, o.offset))
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn deleted(group: &str) -> Record {
    Record::GroupDeleted {
        group: group.to_owned(),
    }
}

/// Retention: an empty group with offsets is deleted, offsets and all, and the store is
/// told so by a record.
#[test]
fn retention_deletes_an_empty_group_with_its_offsets() {
    let mut t = TestContext::new();
    let a = t.join(1, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    assert_eq!(t.commit_result(&a, "orders", 0, 42), ErrorCode::None);
    t.leave(&a);
    t.advance(SETTLE);
    assert_eq!(fetch_offsets(&mut t, "g"), [("orders".to_owned(), 0, 42)]);
    t.records.clear();

    let before = t.describe("g").generation;
    assert!(t.core.remove_offsets(t.now, "g", Duration::ZERO));
    t.advance(SETTLE);
    assert_eq!(t.records, [deleted("g")]);
    assert_eq!(fetch_offsets(&mut t, "g"), []);
    match t.request(0, Request::ListGroups(Default::default())) {
        Response::ListGroups(l) => assert!(l.groups.is_empty(), "{l:?}"),
        other => panic!("{other:?}"),
    }

    // The name is free for a new group, whose records follow the deletion.
    let b = t.join(2, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    assert_eq!(t.generation_of(&b), before + 1, "generations never repeat");
    assert!(matches!(&t.records[1..], [Record::Group(s), ..] if s.members.len() == 1));
}

/// Retention: a group that has a member (it may have joined while the store still saw
/// the group empty) is kept, offsets and all, and nothing is recorded.
#[test]
fn retention_keeps_a_group_that_has_a_member() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    assert_eq!(t.commit_result(&a, "orders", 1, 7), ErrorCode::None);
    t.records.clear();

    assert!(!t.core.remove_offsets(t.now, "g", Duration::ZERO));
    t.advance(SETTLE);
    assert_eq!(t.records, []);
    assert_eq!(fetch_offsets(&mut t, "g"), [("orders".to_owned(), 1, 7)]);
    t.expect_beat_ok(&mut a);
    assert_eq!(t.describe("g").state, GroupState::Stable);
}

/// Retention: the last member leaves and the group is deleted before the batch's
/// records are taken. The deletion is the group's last record: no empty snapshot after
/// it recreates the group in the store.
#[test]
fn retention_deletion_is_the_last_record_of_its_batch() {
    let mut t = TestContext::new();
    let a = t.join(1, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    assert_eq!(t.commit_result(&a, "orders", 0, 5), ErrorCode::None);
    t.records.clear();

    let leave = Request::Leave(rollcall_protocol::LeaveRequest {
        group: "g".into(),
        member_id: a.id.clone(),
        mode: rollcall_protocol::LeaveMode::Released,
    });
    assert!(matches!(
        t.core.handle_request(t.now, 1, leave).response,
        Response::Leave
    ));
    assert!(t.core.remove_offsets(t.now, "g", Duration::ZERO));
    t.core.handle_timeout(t.now);
    let records = t.core.take_records();
    assert_eq!(records.last(), Some(&deleted("g")), "{records:?}");
    t.advance(Duration::from_secs(60));
    assert!(
        t.records.iter().all(|r| !matches!(r, Record::Group(_))),
        "{:?}",
        t.records
    );
    assert_eq!(fetch_offsets(&mut t, "g"), []);
}

/// Retention: a group the core does not know is still deleted from the store.
#[test]
fn retention_deletes_a_group_unknown_to_the_core_from_the_store() {
    let mut t = TestContext::new();
    assert!(t.core.remove_offsets(t.now, "ghost", Duration::ZERO));
    t.advance(SETTLE);
    assert_eq!(t.records, [deleted("ghost")]);
}

/// Retention: partitions held for an expelled member keep the group until the hold
/// ends, so a newcomer cannot be granted them while the expelled member's lease runs.
#[test]
fn retention_waits_for_partitions_held_for_an_expelled_member() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    assert_eq!(t.commit_result(&a, "orders", 0, 3), ErrorCode::None);
    while t.expelled(&a).is_none() {
        t.advance(Duration::from_secs(2));
        if t.expelled(&a).is_none() {
            assert!(matches!(t.beat_stalled(&mut a), Response::Heartbeat(_)));
        }
        assert!(t.elapsed() < Duration::from_secs(600), "never expelled");
    }
    assert_eq!(t.expelled(&a), Some(ExpelReason::ProgressExpired));
    t.records.clear();

    assert!(!t.core.remove_offsets(t.now, "g", Duration::ZERO));
    assert_eq!(t.core.take_records(), []);
    assert_eq!(fetch_offsets(&mut t, "g"), [("orders".to_owned(), 0, 3)]);

    t.advance(SESSION);
    assert!(t.core.remove_offsets(t.now, "g", Duration::ZERO));
    t.advance(SETTLE);
    assert_eq!(t.records.last(), Some(&deleted("g")));
    assert_eq!(fetch_offsets(&mut t, "g"), []);
}

/// However many inputs change a group between two takes, its snapshot is written once,
/// and a take with nothing changed writes nothing.
#[test]
fn a_group_is_snapshotted_once_per_take_however_many_changes() {
    let mut core = crate::core::Coordinator::new(CoreConfig::default());
    let now = std::time::Instant::now();
    let mut t = TestContext::new();
    for conn in 0..10 {
        let req = t.join_request("g", &[("orders", 8)]);
        let effects = core.handle_request(now, conn, Request::Join(req));
        assert!(matches!(effects.response, Response::Join(_)));
        // Every join changes the group, the first that listed it and every later one.
        assert!(effects.wrote, "join {conn} did not say it wrote");
    }
    let records = core.take_records();
    let snapshots = records
        .iter()
        .filter(|r| matches!(r, Record::Group(g) if g.group == "g"))
        .count();
    assert_eq!(snapshots, 1, "{records:?}");
    assert!(core.take_records().is_empty());
}

/// A closed connection unbinds exactly its own members: nothing more is pushed to it,
/// while members on other connections keep being told of changes.
#[test]
fn a_disconnect_unbinds_only_the_members_of_that_connection() {
    let mut t = TestContext::new();
    let _a = t.join(1, "g", &[("orders", 4)]);
    let _b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.core.handle_disconnect(t.now, 1);
    let before = t.pushes.len();
    let _c = t.join(3, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let after = &t.pushes[before..];
    assert!(after.iter().all(|(_, conn, _)| *conn != 1), "{after:?}");
    assert!(after.iter().any(|(_, conn, _)| *conn == 2));
}

/// A static member's id carries its instance id, so even the longest instance id
/// leaves a member id that a rejoin may name.
#[test]
fn a_static_member_with_the_longest_instance_id_can_rejoin_by_its_id() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 2)]);
    req.instance_id = Some("i".repeat(crate::core::MAX_NAME_BYTES));
    let m = t.join_with(1, req.clone()).unwrap();
    assert!(m.id.len() > crate::core::MAX_NAME_BYTES);
    req.member_id = Some(m.id.clone());
    let again = t.join_with(2, req).unwrap();
    assert_eq!(again.id, m.id);
}

/// The beat a member's next heartbeat would carry (advancing its sequence and progress).
fn next_beat(t: &TestContext, m: &mut M) -> rollcall_protocol::HeartbeatRequest {
    m.seq += 1;
    m.progress += 1;
    rollcall_protocol::HeartbeatRequest {
        loads: Vec::new(),
        group: m.group.clone().into(),
        member_id: m.id.clone().into(),
        generation: t.generation_of(m),
        sequence: m.seq,
        progress: m.progress,
        acked_revocations: Vec::new(),
    }
}

fn heartbeats(beats: Vec<rollcall_protocol::HeartbeatRequest>) -> Request {
    Request::Heartbeats(rollcall_protocol::HeartbeatsRequest { beats })
}

/// A Heartbeats request answers each beat in its place, as that beat alone would have
/// been answered, whatever the groups; a good beat renews its member's session as a
/// Heartbeat does; and a request without beats (or with too many) is refused whole.
#[test]
fn heartbeats_answer_each_beat_in_order_and_renew_sessions() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 2)]);
    let mut b = t.join(1, "h", &[("payments", 2)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    let b_last_alone = t.now;
    let mut ghost = M {
        id: "nobody".into(),
        conn: 1,
        group: "h".into(),
        seq: 0,
        progress: 0,
    };

    t.advance(SESSION / 2);
    let beats = vec![
        next_beat(&t, &mut a),
        next_beat(&t, &mut ghost),
        next_beat(&t, &mut b),
    ];
    let Response::Heartbeats(answer) = t.request(1, heartbeats(beats)) else {
        panic!("a Heartbeats request is answered by a Heartbeats response");
    };
    let codes: Vec<ErrorCode> = answer.results.iter().map(|r| r.code).collect();
    assert_eq!(
        codes,
        [ErrorCode::None, ErrorCode::UnknownMember, ErrorCode::None]
    );
    let session_ms = SESSION.as_millis() as u32;
    for (result, m) in [(&answer.results[0], &a), (&answer.results[2], &b)] {
        assert_eq!(result.generation, t.generation_of(m));
        assert_eq!(result.session_timeout_ms, session_ms);
        assert!(result.message.is_empty());
    }
    let unknown = &answer.results[1];
    assert_eq!((unknown.generation, unknown.session_timeout_ms), (0, 0));
    assert!(unknown.message.contains("nobody"), "{unknown:?}");
    let renewed_at = t.now;

    // From here b is silent, while a keeps beating alone (so the coordinator is not
    // isolated). b outlives the deadline of its last lone heartbeat: the beat in the
    // Heartbeats request renewed it, and it expires exactly a session after that beat.
    while t.now + Duration::from_secs(1) < renewed_at + SESSION {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
    }
    assert!(t.now > b_last_alone + SESSION);
    t.advance(renewed_at + SESSION - MS - t.now);
    assert_eq!(
        t.expelled(&b),
        None,
        "renewed by its beat in the Heartbeats"
    );
    t.advance(MS);
    assert_eq!(t.expelled(&b), Some(ExpelReason::SessionExpired));
    assert_eq!(t.expelled(&a), None);

    // A Heartbeats request carries 1 to MAX_BEATS beats; otherwise it is refused whole.
    let too_many = vec![next_beat(&t, &mut a); rollcall_protocol::MAX_BEATS + 1];
    for request in [heartbeats(Vec::new()), heartbeats(too_many)] {
        match t.request(1, request) {
            Response::Error(e) => {
                assert_eq!(e.code, ErrorCode::InvalidRequest);
                assert_eq!(e.api_key, rollcall_protocol::ApiKey::Heartbeats as u16);
            }
            other => panic!("refused as invalid, not {other:?}"),
        }
    }
}

/// The core remembers where each beat of a connection's Heartbeats found its member, to
/// find it there next time; a remembered place is only a hint. Members that join or
/// leave shift the others, and beats change places in the request: every beat still
/// renews its own member and no other.
#[test]
fn heartbeats_renew_their_own_members_as_the_roster_and_the_request_change() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let b = t.join(2, "g", &[("orders", 4)]);
    let mut c = t.join(3, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let since_heartbeat = |t: &mut TestContext, m: &M| {
        let d = t.describe("g");
        let member = d.members.iter().find(|x| x.member_id == m.id);
        member.map(|x| x.since_heartbeat_ms)
    };
    let beat_on_conn_1 = |t: &mut TestContext, ms: Vec<&mut M>| {
        let ids: Vec<String> = ms.iter().map(|m| m.id.clone()).collect();
        let beats = ms.into_iter().map(|m| next_beat(t, m)).collect();
        let Response::Heartbeats(answer) = t.request(1, heartbeats(beats)) else {
            panic!("a Heartbeats request is answered by a Heartbeats response");
        };
        for (id, result) in ids.iter().zip(&answer.results) {
            assert_eq!(result.code, ErrorCode::None, "beat of {id}: {result:?}");
        }
    };
    beat_on_conn_1(&mut t, vec![&mut c, &mut a]);
    t.advance(Duration::from_secs(1));
    // `b` leaves: `c` moves up a place in the roster.
    t.leave(&b);
    beat_on_conn_1(&mut t, vec![&mut c, &mut a]);
    assert_eq!(since_heartbeat(&mut t, &c), Some(0));
    assert_eq!(since_heartbeat(&mut t, &a), Some(0));
    t.advance(Duration::from_secs(1));
    // A new member joins, and the beats swap places.
    let mut d = t.join(4, "g", &[("orders", 4)]);
    t.advance(Duration::from_secs(1));
    beat_on_conn_1(&mut t, vec![&mut a, &mut c]);
    assert_eq!(since_heartbeat(&mut t, &a), Some(0));
    assert_eq!(since_heartbeat(&mut t, &c), Some(0));
    assert_eq!(
        since_heartbeat(&mut t, &d),
        Some(1_000),
        "not renewed by another's beat"
    );
    t.advance(Duration::from_secs(1));
    // Fewer beats, in a place another member held.
    beat_on_conn_1(&mut t, vec![&mut d]);
    assert_eq!(since_heartbeat(&mut t, &d), Some(0));
    assert_eq!(since_heartbeat(&mut t, &a), Some(1_000));
    assert_eq!(since_heartbeat(&mut t, &c), Some(1_000));
    assert_eq!(since_heartbeat(&mut t, &b), None, "b left");
}
