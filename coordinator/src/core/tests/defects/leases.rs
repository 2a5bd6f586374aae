//! Defects of leases: partitions handed on only once their holder's lease ran out or it
//! released them.

use super::*;

// ------------------------------------------------------------------------------------
// 6. A rejoin with a longer session timeout breaks the lease.
// ------------------------------------------------------------------------------------

/// A member rejoins with a longer session timeout, then goes silent: the coordinator
/// judges it by the new timeout and holds its partitions for the longer lease (it once
/// expired and granted them on the old, shorter one).
#[test]
fn defect_6_a_rejoin_with_a_longer_session_timeout_applies_it_to_expiry_and_hold() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let owned = flatten(&t.owned(&a));
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let mut rejoin = t.join_request("g", &[("orders", 4)]);
    rejoin.member_id = Some(a.id.clone());
    rejoin.session_timeout_ms = 30_000;
    assert!(matches!(
        t.request(a.conn, Request::Join(rejoin)),
        Response::Join(_)
    ));
    let promised = t.now - t.start + Duration::from_secs(30);
    // `a` goes silent; `b` keeps beating.
    for _ in 0..40 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut b);
    }
    assert!(removed(&t, &a).is_some());
    let granted = first_grant_elsewhere(&t, &a, &owned).expect("granted");
    assert!(
        granted >= promised,
        "granted at {granted:?}, lease to {promised:?}"
    );
}

// ------------------------------------------------------------------------------------
// 8. Smaller: leaves at the deadline, colliding tokens, inherited revocations.
// ------------------------------------------------------------------------------------

/// A leave whose application did not release everything (the client's leave deadline
/// passed) removes the member at once but holds its partitions for its lease.
#[test]
fn defect_8_an_unconfirmed_leave_holds_the_partitions_for_the_lease() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let owned = flatten(&t.owned(&a));
    let beat_at = t.now - t.start;
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    assert!(matches!(
        leave_with(&mut t, &a, LeaveMode::Unconfirmed),
        Response::Leave
    ));
    for _ in 0..12 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut b);
    }
    let granted = first_grant_elsewhere(&t, &a, &owned).expect("granted");
    assert!(granted >= beat_at + SESSION, "granted at {granted:?}");
    assert_eq!(count(&t.owned(&b)), 4);
}

/// A static member that stood down and is never replaced expires after its session
/// timeout, and its partitions move at once (its lease ended when it stood down).
#[test]
fn a_stood_down_member_that_is_not_replaced_expires_and_its_partitions_move_at_once() {
    let mut t = TestContext::new();
    let mut old = join_as(&mut t, 1, 4, |r| r.instance_id = Some("worker-1".into()));
    t.advance(SETTLE);
    t.expect_beat_ok(&mut old);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.ack_all(&mut old);
    t.advance(SETTLE);
    assert!(matches!(
        leave_with(&mut t, &old, LeaveMode::StandDown),
        Response::Leave
    ));
    for _ in 0..11 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut b);
    }
    assert_eq!(removed(&t, &old), Some(ExpelReason::SessionExpired));
    t.advance(SETTLE);
    t.expect_beat_ok(&mut b);
    assert_eq!(count(&t.owned(&b)), 4);
}

/// A member releases a partition, gets it back, and is asked to release it again. A
/// frame it sent during its first ownership (an acknowledgement requeued and sent
/// again on a new connection, with the first copy still unread on the old one) is
/// read only now. Its acknowledgement must not release the partition the member is
/// working on again, and its commit must not move that partition's offset.
#[test]
fn an_acknowledgement_or_commit_from_an_earlier_ownership_does_not_act_on_the_next() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    assert_eq!(count(&t.owned(&a)), 2);
    // `b` joins: `a` releases one partition to it.
    let b = t.join(2, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    let first = t.revoking(&a);
    assert_eq!(count(&first), 1, "a releases one partition to b");
    let earlier_generation = t.generation_of(&a);
    // The frame of the first ownership, kept to be read late.
    a.seq += 1;
    let late_ack = Request::Heartbeat(HeartbeatRequest {
        loads: Vec::new(),
        group: "g".into(),
        member_id: a.id.clone().into(),
        generation: earlier_generation,
        sequence: a.seq,
        progress: a.progress,
        acked_revocations: first.clone(),
    });
    let late_commit = Request::CommitOffsets(CommitOffsetsRequest {
        group: "g".to_owned(),
        member_id: Some(a.id.clone()),
        generation: earlier_generation,
        offsets: vec![OffsetCommit {
            topic: first[0].topic.clone(),
            partition: first[0].partitions[0],
            offset: 10,
            metadata: String::new(),
        }],
    });
    // Its copy sent again on the new connection is read first.
    t.beat_acking(&mut a, first.clone());
    t.advance(SETTLE);
    assert!(flatten(&t.owned(&b)).contains(&flatten(&first)[0]));
    // `b` leaves: the partition comes back to `a`.
    assert!(matches!(t.leave(&b), Response::Leave));
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    assert_eq!(count(&t.owned(&a)), 2, "a owns both partitions again");
    // `c` joins and `a` is asked to release the same partition again.
    let c = t.join(3, "g", &[("orders", 2)]);
    t.advance(SETTLE);
    let second = t.revoking(&a);
    assert_eq!(
        second, first,
        "the sticky assignor moves the same partition"
    );
    assert!(t.generation_of(&a) > earlier_generation);

    // The late frames arrive: neither acts on the current ownership.
    t.request(a.conn, late_ack);
    t.advance(SETTLE);
    assert_eq!(
        t.revoking(&a),
        second,
        "a still owns the partition it works on"
    );
    assert!(!flatten(&t.owned(&c)).contains(&flatten(&first)[0]));
    match t.request(a.conn, late_commit) {
        Response::CommitOffsets(r) => assert_eq!(r.results[0].error, ErrorCode::PartitionRevoked),
        other => panic!("unexpected {other:?}"),
    }
    // The member's own frames of this ownership still do.
    assert_eq!(
        t.commit_result(&a, &first[0].topic, first[0].partitions[0], 20),
        ErrorCode::None
    );
    t.ack_all(&mut a);
    t.advance(SETTLE);
    assert!(flatten(&t.owned(&c)).contains(&flatten(&first)[0]));
    t.assert_exclusive("g");
}

// ------------------------------------------------------------------------------------
// 12. An acknowledgement of a withdrawn revocation strands the partition.
// ------------------------------------------------------------------------------------

/// A member is asked to release partitions; before its acknowledgement is read, the
/// member that was to take them leaves and a new rebalance gives them back. The
/// acknowledgement then arrives at the member's current generation (as when it is sent
/// again after an error answer). The coordinator rightly keeps the partitions the
/// member's, but the client, which stopped working on them, drops them once the
/// acknowledgement is answered. The coordinator now pushes the member's assignment
/// again after the answer, so the client takes them back; nothing was pushed before,
/// and they were the member's by the coordinator's account and worked by nobody.
#[test]
fn defect_12_an_acknowledgement_of_a_withdrawn_revocation_is_answered_with_the_assignment() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let asked = t.revoking(&a);
    assert_eq!(count(&asked), 2);
    t.leave(&b);
    t.advance(SETTLE);
    assert_eq!(count(&t.revoking(&a)), 0, "the revocation is withdrawn");
    assert_eq!(count(&t.owned(&a)), 4);
    let before = t.pushes.len();
    assert!(matches!(
        t.beat_acking(&mut a, asked.clone()),
        Response::Heartbeat(_)
    ));
    let pushed = t.pushes[before..]
        .iter()
        .rev()
        .find_map(|(_, _, p)| match p {
            Push::Assignment(x) if x.member_id == a.id => Some(flatten(&x.partitions)),
            _ => None,
        });
    let pushed = pushed.expect("the assignment is pushed again");
    assert!(
        flatten(&asked).iter().all(|tp| pushed.contains(tp)),
        "{pushed:?} lists {asked:?}"
    );
    assert_eq!(count(&t.owned(&a)), 4);
}
