//! Defects of restore: what a restart must carry over from the store (held partitions,
//! pending rebalances, what members released, offsets retention).

use super::*;

// ------------------------------------------------------------------------------------
// 3. Restore forgets partitions held for an expelled member.
// ------------------------------------------------------------------------------------

/// A member expelled for progress is still inside its lease, so its partitions are
/// held. A restart keeps holding them until that lease has run out.
#[test]
fn defect_3_a_restart_keeps_partitions_held_for_an_expelled_member() {
    let mut t = TestContext::new();
    let mut stuck = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut stuck);
    let owned = flatten(&t.owned(&stuck));
    let mut other = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    // `stuck` beats without progress until the progress timeout expels it; its lease
    // runs a session from its last beat.
    let mut last_beat = t.now;
    while t.expelled(&stuck).is_none() {
        t.advance(Duration::from_secs(1));
        if t.expelled(&stuck).is_none() {
            t.beat_stalled(&mut stuck);
            last_beat = t.now;
        }
        t.expect_beat_ok(&mut other);
    }
    // Expelled for not releasing what `other` is to get, or for progress: either way
    // while its lease still runs.
    assert!(matches!(
        t.expelled(&stuck),
        Some(ExpelReason::RebalanceTimeout | ExpelReason::ProgressExpired)
    ));
    restart(&mut t);
    other.conn = 12;
    for _ in 0..20 {
        t.advance(Duration::from_millis(500));
        t.expect_beat_ok(&mut other);
        t.ack_all(&mut other);
    }
    let granted = first_grant_elsewhere(&t, &stuck, &owned).expect("granted in the end");
    let lease_end = last_beat - t.start + SESSION;
    assert!(
        granted >= lease_end,
        "granted at {granted:?}, lease to {lease_end:?}"
    );
}

// ------------------------------------------------------------------------------------
// 4a. Restore drops a pending rebalance.
// ------------------------------------------------------------------------------------

/// A restart inside the coalescing window after a join: the new member still gets
/// its share (it once got nothing, with the group reporting Stable).
#[test]
fn defect_4a_a_restart_inside_the_coalescing_window_after_a_join_still_rebalances() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = t.join(2, "g", &[("orders", 8)]);
    restart(&mut t);
    a.conn = 11;
    b.conn = 12;
    for _ in 0..10 {
        t.advance(Duration::from_millis(100));
        t.ack_all(&mut a);
        t.expect_beat_ok(&mut b);
    }
    assert_eq!(count(&t.owned(&a)), 4);
    assert_eq!(count(&t.owned(&b)), 4);
    t.assert_exclusive("g");
}

/// The same after a leave: the leaver's partitions do not stay owned by nobody.
#[test]
fn defect_4a_a_restart_inside_the_coalescing_window_after_a_leave_still_rebalances() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 8)]);
    let mut b = t.join(2, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    t.ack_all(&mut a);
    t.ack_all(&mut b);
    t.advance(SETTLE);
    assert_eq!(count(&t.owned(&a)), 4);
    t.leave(&b);
    restart(&mut t);
    a.conn = 11;
    for _ in 0..5 {
        t.advance(Duration::from_millis(100));
        t.expect_beat_ok(&mut a);
    }
    assert_eq!(count(&t.owned(&a)), 8);
}

// ------------------------------------------------------------------------------------
// 4b. A recovery rebalance is not made durable.
// ------------------------------------------------------------------------------------

/// `b` is suspect when `a` leaves, so `c` takes all of `a`'s partitions and `b`'s
/// target is cut (it is marked for a rebalance when it recovers). `b` recovers after
/// three on-time beats, which asks for a `Recovery` rebalance; the coordinator restarts
/// inside the coalescing window. The snapshot written for that batch does not say a
/// rebalance is pending (`trigger_rebalance` does not mark the group dirty, and the
/// recovery path marks nothing else), and the restored members are not suspect, so the
/// rebalance never comes: `b` stays at 3 partitions and `c` at 6, for good.
///
/// Promise broken: a snapshot carries a pending rebalance, so restore makes the
/// decisions the running coordinator would have made (cf. `defect_4a` for joins and
/// leaves). Cause: `Group::after_beat` (members.rs) calls `trigger_rebalance` for
/// `Recovery` without setting `snapshot_dirty`; `trigger_rebalance` (rebalance.rs)
/// never sets it itself.
#[test]
fn defect_4b_a_restart_inside_the_coalescing_window_after_a_recovery_still_rebalances() {
    const BEAT: Duration = Duration::from_secs(1);
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 9)]);
    let mut b = t.join(2, "g", &[("orders", 9)]);
    let mut c = t.join(3, "g", &[("orders", 9)]);
    for _ in 0..4 {
        t.advance(BEAT);
        t.ack_all(&mut a);
        t.ack_all(&mut b);
        t.ack_all(&mut c);
    }
    assert_eq!([&a, &b, &c].map(|m| count(&t.owned(m))), [3, 3, 3]);
    // `b` falls silent past half its session: suspect.
    for _ in 0..6 {
        t.advance(BEAT);
        t.expect_beat_ok(&mut a);
        t.expect_beat_ok(&mut c);
    }
    t.leave(&a);
    t.advance(Duration::from_millis(500));
    t.expect_beat_ok(&mut c);
    t.ack_all(&mut c);
    assert_eq!(count(&t.owned(&b)), 3);
    assert_eq!(count(&t.owned(&c)), 6);
    // Three on-time beats: `b` recovers and a rebalance is asked for.
    t.expect_beat_ok(&mut b);
    for _ in 0..3 {
        t.advance(BEAT);
        t.expect_beat_ok(&mut b);
        t.expect_beat_ok(&mut c);
    }
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e, Event::MemberRecovered { .. })));
    // The coordinator restarts inside the coalescing window.
    restart(&mut t);
    b.conn = 12;
    c.conn = 13;
    for _ in 0..5 {
        t.advance(BEAT);
        t.ack_all(&mut b);
        t.ack_all(&mut c);
    }
    assert!(
        t.events.iter().any(|e| matches!(
            e,
            Event::RebalanceStarted {
                cause: RebalanceCause::Recovery,
                ..
            }
        )),
        "the recovery rebalance was lost in the restart"
    );
    let shares = [&b, &c].map(|m| count(&t.owned(m)));
    assert!(shares.iter().all(|&s| s >= 4), "not rebalanced: {shares:?}");
    t.assert_exclusive("g");
}

// ------------------------------------------------------------------------------------
// 13. Offsets retention deletes an offset it has just acknowledged.
// ------------------------------------------------------------------------------------

/// The store finds a group empty past the offsets retention (it reads what is
/// durable), and before the core is asked to delete the group an admin commit to it
/// is accepted. The group is kept, with the offset the commit was told was accepted;
/// once the retention has passed since that commit, it can go. It was deleted with the
/// offset just acknowledged.
#[test]
fn defect_13_offsets_retention_keeps_an_offset_committed_since_the_store_looked() {
    const RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
    let mut t = TestContext::new();
    let commit = Request::CommitOffsets(rollcall_protocol::CommitOffsetsRequest {
        group: "g".into(),
        member_id: None,
        generation: 0,
        offsets: vec![rollcall_protocol::OffsetCommit {
            topic: "orders".into(),
            partition: 0,
            offset: 42,
            metadata: String::new(),
        }],
    });
    match t.request(9, commit) {
        Response::CommitOffsets(c) => assert_eq!(c.results[0].error, ErrorCode::None),
        other => panic!("{other:?}"),
    }
    t.advance(SETTLE);
    assert!(
        !t.core.remove_offsets(t.now, "g", RETENTION),
        "deleted with an offset committed {SETTLE:?} ago"
    );
    let fetch = Request::FetchOffsets(rollcall_protocol::FetchOffsetsRequest {
        group: "g".into(),
        topics: vec![],
        page: None,
    });
    match t.request(9, fetch) {
        Response::FetchOffsets(f) => assert_eq!(f.offsets[0].offset, 42),
        other => panic!("{other:?}"),
    }
    t.advance(RETENTION);
    assert!(t.core.remove_offsets(t.now, "g", RETENTION));
}

// ------------------------------------------------------------------------------------
// 14. A restore forgets what a member released and that its share was cut.
// ------------------------------------------------------------------------------------

/// `b` is suspect when `a` leaves, so the rebalance gives `a`'s partitions to `c` only
/// (6 against `b`'s 3) and marks `b` for a rebalance when it recovers. The coordinator
/// restarts before `b` recovers. `b` must still earn its recovery and its rebalance:
/// the restore once brought it back alive and unmarked, so its first beat only
/// reconciled, and the 3/6 split stayed for good.
#[test]
fn defect_14_a_member_whose_share_was_cut_still_gets_its_rebalance_after_a_restart() {
    const BEAT: Duration = Duration::from_secs(1);
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 9)]);
    let mut b = t.join(2, "g", &[("orders", 9)]);
    let mut c = t.join(3, "g", &[("orders", 9)]);
    for _ in 0..4 {
        t.advance(BEAT);
        t.ack_all(&mut a);
        t.ack_all(&mut b);
        t.ack_all(&mut c);
    }
    assert_eq!([&a, &b, &c].map(|m| count(&t.owned(m))), [3, 3, 3]);
    // `b` falls silent past half its session: suspect.
    for _ in 0..6 {
        t.advance(BEAT);
        t.expect_beat_ok(&mut a);
        t.expect_beat_ok(&mut c);
    }
    t.leave(&a);
    t.advance(Duration::from_millis(500));
    t.expect_beat_ok(&mut c);
    t.ack_all(&mut c);
    assert_eq!([&b, &c].map(|m| count(&t.owned(m))), [3, 6]);
    restart(&mut t);
    b.conn = 12;
    c.conn = 13;
    let recovered_before = recovered(&t);
    // The restore starts every silence over, so these beats are on time.
    for _ in 0..6 {
        t.advance(BEAT);
        t.ack_all(&mut b);
        t.ack_all(&mut c);
    }
    assert!(
        recovered(&t) > recovered_before,
        "restored suspect, it recovers"
    );
    assert!(
        t.events.iter().any(|e| matches!(
            e,
            Event::RebalanceStarted {
                cause: RebalanceCause::Recovery,
                ..
            }
        )),
        "the recovery rebalance was forgotten in the restart"
    );
    let shares = [&b, &c].map(|m| count(&t.owned(m)));
    assert!(shares.iter().all(|&s| s >= 4), "not rebalanced: {shares:?}");
    t.assert_exclusive("g");
}

/// A member releases a partition; a commit for it that arrives late is told
/// `partition_revoked` (its ownership ended), after a restart as before it (the restore
/// once forgot what members released, and answered `not_owner`).
#[test]
fn defect_14_a_late_commit_for_a_released_partition_is_revoked_after_a_restart() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    let asked = flatten(&t.revoking(&a));
    assert_eq!(asked.len(), 2);
    t.ack_all(&mut a);
    t.expect_beat_ok(&mut b);
    let moved = asked[0].1;
    assert_eq!(
        t.commit_result(&a, "orders", moved, 5),
        ErrorCode::PartitionRevoked
    );
    restart(&mut t);
    a.conn = 11;
    b.conn = 12;
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    assert_eq!(
        t.commit_result(&a, "orders", moved, 5),
        ErrorCode::PartitionRevoked
    );
}

// ------------------------------------------------------------------------------------
// 25. A restore starts the waits that expel a member over.
// ------------------------------------------------------------------------------------

/// Restarts the coordinator (a takeover restores the same way) and moves every member
/// to a connection of its own to the new one.
fn take_over(t: &mut TestContext, members: &mut [&mut M]) {
    restart(t);
    for m in members.iter_mut() {
        m.conn += 100;
    }
}

/// `a` is asked to release half its partitions to `b` and never acknowledges, though it
/// beats on time. Its coordinator is taken over every 10 s, a third of the rebalance
/// timeout. Each restore once started the revocation's wait over, so `a` kept the
/// partitions for as long as the takeovers came: `b` never got them.
///
/// Promise: a takeover (like a restart) does not start a wait over. The snapshot keeps
/// how long each revocation has waited, and a restore resumes it; what the store cannot
/// account for (the running time after the last checkpoint) is at most a quarter of the
/// rebalance timeout over any number of restores. So `a` is expelled within
/// asked + rebalance timeout + a quarter of it (plus its heartbeat interval), in
/// coordinator running time.
#[test]
fn defect_25_takeovers_faster_than_the_rebalance_timeout_still_expel_a_member_that_withholds_its_acknowledgement(
) {
    withheld_through_takeovers(Duration::from_secs(10));
}

/// The same with takeovers every second, faster than a checkpoint interval (an eighth
/// of the rebalance timeout, 3.75 s, halved by the first restore): each restore writes
/// the wait it carried over with the restore counted, so the next one halves its
/// checkpoint interval again, until runs are long enough to record the wait.
#[test]
fn defect_25_takeovers_faster_than_a_checkpoint_interval_still_expel_a_member_that_withholds_its_acknowledgement(
) {
    withheld_through_takeovers(Duration::from_secs(1));
}

fn withheld_through_takeovers(every: Duration) {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = t.join(2, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    assert_eq!(count(&t.revoking(&a)), 4, "a is asked to release half");
    let asked = t.now;
    let mut takeovers = 0;
    while removed(&t, &a).is_none() {
        assert!(
            t.now - asked < REBALANCE * 3,
            "still a member {:?} after it was asked, through {takeovers} takeovers",
            t.now - asked
        );
        let run = t.now;
        while t.now - run < every && removed(&t, &a).is_none() {
            t.advance(Duration::from_millis(500));
            if removed(&t, &a).is_none() {
                t.expect_beat_ok(&mut a);
                t.expect_beat_ok(&mut b);
            }
        }
        if removed(&t, &a).is_none() {
            take_over(&mut t, &mut [&mut a, &mut b]);
            takeovers += 1;
        }
    }
    assert_eq!(removed(&t, &a), Some(ExpelReason::RebalanceTimeout));
    assert!(
        takeovers as u128 >= REBALANCE.as_millis() / every.as_millis(),
        "{takeovers} takeovers"
    );
    let within = REBALANCE + REBALANCE / 4 + Duration::from_secs(1);
    assert!(
        t.now - asked <= within,
        "expelled {:?} after it was asked, past {within:?}",
        t.now - asked
    );
}

/// The same for the progress clock: a member whose progress counter is stuck while it
/// beats on time, with its coordinator taken over every 20 s, a third of its progress
/// timeout. A restore once restored no counter at all, so the first beat after it
/// counted as progress and the member was never expelled.
#[test]
fn defect_25_takeovers_faster_than_the_progress_timeout_still_expel_a_stuck_member() {
    let mut t = TestContext::new();
    let mut stuck = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut stuck);
    let progressed = t.now;
    let mut takeovers = 0;
    while removed(&t, &stuck).is_none() {
        assert!(
            t.now - progressed < PROGRESS * 3,
            "still a member {:?} after its last progress, through {takeovers} takeovers",
            t.now - progressed
        );
        for _ in 0..20 {
            t.advance(Duration::from_secs(1));
            if removed(&t, &stuck).is_some() {
                break;
            }
            t.beat_stalled(&mut stuck);
        }
        if removed(&t, &stuck).is_none() {
            take_over(&mut t, &mut [&mut stuck]);
            takeovers += 1;
        }
    }
    assert_eq!(removed(&t, &stuck), Some(ExpelReason::ProgressExpired));
    assert!(takeovers >= 3, "{takeovers} takeovers");
    let within = PROGRESS + PROGRESS / 4 + Duration::from_secs(1);
    assert!(
        t.now - progressed <= within,
        "expelled {:?} after its last progress, past {within:?}",
        t.now - progressed
    );
}

/// A wait resumed by a restore is judged only once the member's first heartbeat since
/// is read: that heartbeat carries what the member did before the restart, which the
/// store may not have seen. Here the member, stuck for most of its progress timeout
/// (recorded by a checkpoint), progresses just before the restart; no snapshot follows.
/// The deadline the restore resumes passes before its first beat, which then renews it.
#[test]
fn defect_25_a_restored_wait_is_judged_by_the_first_heartbeat_since() {
    let mut t = TestContext::new();
    let mut m = t.join(1, "g", &[("orders", 4)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut m);
    for _ in 0..57 {
        t.advance(Duration::from_secs(1));
        t.beat_stalled(&mut m);
    }
    // Progress, then the restart before anything is written.
    t.expect_beat_ok(&mut m);
    take_over(&mut t, &mut [&mut m]);
    // The last checkpoint recorded 52.5 s of the wait (every 7.5 s): its resumed
    // deadline passes 7.5 s after the restore; its session does not.
    t.advance(Duration::from_secs(8));
    assert_eq!(removed(&t, &m), None, "judged before it was heard");
    t.expect_beat_ok(&mut m);
    t.advance(Duration::from_secs(1));
    t.expect_beat_ok(&mut m);
    assert_eq!(
        removed(&t, &m),
        None,
        "its progress before the restart counts"
    );
}

/// A snapshot written before waits were kept (no `progress`, no `revoking`) restores
/// them as restores always did: afresh, with a whole timeout from the restore.
#[test]
fn defect_25_a_snapshot_without_waits_starts_them_afresh() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = t.join(2, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    assert_eq!(count(&t.revoking(&a)), 4);
    for _ in 0..20 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
        t.expect_beat_ok(&mut b);
    }
    let mut state = durable(&t.records);
    for g in &mut state.groups {
        for m in &mut g.members {
            assert!(m.progress.is_some(), "today's snapshots keep the waits");
            m.progress = None;
            m.revoking.clear();
        }
    }
    let mut config = t.core.config().clone();
    config.member_id_prefix = "old-".to_owned();
    t.core = Coordinator::new(config);
    t.core.restore(t.now, state);
    t.drain();
    a.conn += 100;
    b.conn += 100;
    let restored = t.now;
    while t.now - restored < REBALANCE - Duration::from_secs(1) {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
        t.expect_beat_ok(&mut b);
    }
    assert_eq!(
        removed(&t, &a),
        None,
        "a fresh rebalance timeout from the restore"
    );
    for _ in 0..3 {
        t.advance(Duration::from_secs(1));
        t.beat(&mut a);
    }
    assert_eq!(removed(&t, &a), Some(ExpelReason::RebalanceTimeout));
}

// ------------------------------------------------------------------------------------
// 26. A rejoin puts off a restored wait.
// ------------------------------------------------------------------------------------

/// `a`'s join request again, naming its member id, on its current connection.
fn rejoin(t: &mut TestContext, a: &M, partitions: u32) {
    let mut req = t.join_request("g", &[("orders", partitions)]);
    req.member_id = Some(a.id.clone());
    assert!(matches!(
        t.request(a.conn, Request::Join(req)),
        Response::Join(_)
    ));
}

/// `a` is asked to release half its partitions to `b` and never acknowledges. After a
/// takeover, with 25 s of its 30 s rebalance timeout waited, its heartbeats no longer
/// get through, but its rejoins do, every 5 s (half its session). A restored wait is
/// judged only once a heartbeat is read (it may carry an acknowledgement the store
/// never saw), and each rejoin renewed the session: `a` kept the partitions for as long
/// as it kept rejoining.
///
/// Promise: a rejoin without an acknowledgement does not start a revocation's wait
/// over, after a restore as before one. The restore defers judging the wait until the
/// member's first heartbeat, but no longer than the session the restore gave it: `a` is
/// expelled for the revocation by then, and `b` gets the partitions.
#[test]
fn defect_26_rejoins_after_a_takeover_do_not_keep_a_withheld_revocation() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = t.join(2, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    let revoking = flatten(&t.revoking(&a));
    assert_eq!(revoking.len(), 4, "a is asked to release half");
    let asked = t.now;
    while t.now - asked < Duration::from_secs(25) {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
        t.expect_beat_ok(&mut b);
    }
    take_over(&mut t, &mut [&mut a, &mut b]);
    let restored = t.now;
    rejoin(&mut t, &a, 8);
    while removed(&t, &a).is_none() && t.now - restored < Duration::from_secs(120) {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut b);
        let since = t.now - restored;
        if removed(&t, &a).is_none() && since.as_secs().is_multiple_of(5) {
            rejoin(&mut t, &a, 8);
        }
    }
    assert_eq!(
        removed(&t, &a),
        Some(ExpelReason::RebalanceTimeout),
        "still a member {:?} after the takeover",
        t.now - restored
    );
    let at = expelled_at(&t, &a).unwrap_or(t.now);
    assert!(
        at <= restored + SESSION,
        "expelled {:?} after the takeover, past its session",
        at - restored
    );
    // Once the lease its last rejoin was promised has run out.
    for _ in 0..SESSION.as_secs() + 1 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut b);
    }
    assert_eq!(count(&t.owned(&b)), 8, "b gets a's partitions");
}

/// The deferral still does what it is for: a member that rejoins at once after a
/// takeover, its carried wait already past, and acknowledges in its first heartbeat a
/// few seconds later (within its session) is not expelled at the rejoin.
#[test]
fn defect_26_a_rejoin_after_a_takeover_leaves_the_acknowledgement_to_the_first_heartbeat() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = t.join(2, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    assert_eq!(count(&t.revoking(&a)), 4);
    let asked = t.now;
    while t.now - asked < REBALANCE - Duration::from_secs(1) {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut a);
        t.expect_beat_ok(&mut b);
    }
    take_over(&mut t, &mut [&mut a, &mut b]);
    rejoin(&mut t, &a, 8);
    for _ in 0..4 {
        t.advance(Duration::from_secs(1));
        t.expect_beat_ok(&mut b);
    }
    assert_eq!(removed(&t, &a), None, "judged before its first heartbeat");
    assert!(matches!(t.ack_all(&mut a), Response::Heartbeat(_)));
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    t.expect_beat_ok(&mut b);
    assert_eq!(removed(&t, &a), None);
    assert_eq!([&a, &b].map(|m| count(&t.owned(m))), [4, 4]);
}

/// Without a restore: a member that rejoins without acknowledging keeps the time its
/// revocation has waited, and is expelled a rebalance timeout after it was asked.
#[test]
fn defect_26_a_rejoin_without_an_acknowledgement_keeps_the_revocation_deadline() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    t.expect_beat_ok(&mut a);
    let mut b = t.join(2, "g", &[("orders", 8)]);
    t.advance(SETTLE);
    assert_eq!(count(&t.revoking(&a)), 4);
    let asked = t.now;
    while removed(&t, &a).is_none() && t.now - asked < REBALANCE * 3 {
        t.advance(Duration::from_secs(1));
        if removed(&t, &a).is_none() {
            if (t.now - asked).as_secs().is_multiple_of(7) {
                rejoin(&mut t, &a, 8);
            }
            t.expect_beat_ok(&mut a);
        }
        t.expect_beat_ok(&mut b);
    }
    assert_eq!(removed(&t, &a), Some(ExpelReason::RebalanceTimeout));
    let at = expelled_at(&t, &a).unwrap();
    assert!(
        at <= asked + REBALANCE + Duration::from_secs(1),
        "expelled {:?} after it was asked",
        at - asked
    );
}
