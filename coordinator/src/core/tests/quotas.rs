//! The quotas that hold the core's memory: groups, members, partitions, offsets and
//! offset metadata over the coordinator and per group, and the slices in which due
//! timers run.

use std::sync::Arc;
use std::time::Duration;

use rollcall_protocol::{
    CommitOffsetsRequest, ErrorCode, LeaveMode, LeaveRequest, OffsetCommit, Request, Response,
};

use super::{TestContext, SESSION};
use crate::core::{Coordinator, CoreConfig, Event, Quota, Totals, TIMER_SLICE};

const SETTLE: Duration = Duration::from_millis(300);

fn code(r: &Response) -> ErrorCode {
    match r {
        Response::Error(e) => e.code,
        _ => ErrorCode::None,
    }
}

fn message(r: &Response) -> String {
    match r {
        Response::Error(e) => e.message.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn groups(t: &mut TestContext) -> Vec<String> {
    match t.request(0, Request::ListGroups(Default::default())) {
        Response::ListGroups(l) => l.groups.into_iter().map(|g| g.group).collect(),
        other => panic!("{other:?}"),
    }
}

fn refusals(t: &TestContext, quota: Quota) -> usize {
    t.events
        .iter()
        .filter(|e| matches!(e, Event::QuotaRefused { quota: q, .. } if *q == quota))
        .count()
}

fn offset(topic: &str, partition: u32, metadata: usize) -> OffsetCommit {
    OffsetCommit {
        topic: topic.into(),
        partition,
        offset: 7,
        metadata: "m".repeat(metadata),
    }
}

/// An administrative commit (no member id) of `offsets` to `group`.
fn admin_commit(t: &mut TestContext, group: &str, offsets: Vec<OffsetCommit>) -> Response {
    t.request(
        9,
        Request::CommitOffsets(CommitOffsetsRequest {
            group: group.into(),
            member_id: None,
            generation: 0,
            offsets,
        }),
    )
}

fn results(r: &Response) -> Vec<ErrorCode> {
    match r {
        Response::CommitOffsets(c) => c.results.iter().map(|p| p.error).collect(),
        other => panic!("expected commit results, got {other:?}"),
    }
}

#[test]
fn a_join_or_admin_commit_past_the_group_quota_is_refused_and_creates_nothing() {
    let mut t = TestContext::with_config(CoreConfig {
        max_groups: 3,
        ..CoreConfig::default()
    });
    t.join(1, "a", &[("t", 1)]);
    let b = t.join(1, "b", &[("t", 1)]);
    assert_eq!(
        results(&admin_commit(&mut t, "c", vec![offset("t", 0, 0)])),
        [ErrorCode::None]
    );

    let req = t.join_request("d", &[("t", 1)]);
    let refused = t.join_with(1, req).unwrap_err();
    assert_eq!(code(&refused), ErrorCode::TooManyGroups);
    assert!(
        message(&refused).contains("maximum of 3 groups"),
        "{refused:?}"
    );
    let refused = admin_commit(&mut t, "d", vec![offset("t", 0, 0)]);
    assert_eq!(code(&refused), ErrorCode::TooManyGroups);
    assert_eq!(groups(&mut t), ["a", "b", "c"]);
    assert_eq!(refusals(&t, Quota::Groups), 2);

    // Existing groups take members and offsets as before.
    t.join(2, "a", &[("t", 1)]);
    assert_eq!(
        results(&admin_commit(&mut t, "c", vec![offset("t", 1, 0)])),
        [ErrorCode::None]
    );

    // A group that goes away (empty, no offsets) makes room.
    assert!(matches!(t.leave(&b), Response::Leave));
    t.advance(SETTLE);
    assert_eq!(groups(&mut t), ["a", "c"]);
    t.join(1, "d", &[("t", 1)]);
}

#[test]
fn a_refused_join_of_a_new_group_leaves_no_group_behind() {
    let mut t = TestContext::with_config(CoreConfig {
        max_partitions_per_group: 10,
        max_groups: 1,
        ..CoreConfig::default()
    });
    for i in 0..5 {
        let req = t.join_request(&format!("g{i}"), &[("t", 11)]);
        assert_eq!(
            code(&t.join_with(1, req).unwrap_err()),
            ErrorCode::TooManyPartitions
        );
        let refused = admin_commit(&mut t, &format!("h{i}"), vec![offset("t", 0, 5000)]);
        assert_eq!(results(&refused), [ErrorCode::MetadataTooLarge]);
    }
    assert!(groups(&mut t).is_empty());
    assert_eq!(t.core.totals().groups(), 0);
    // So the one group the quota allows can still be created.
    t.join(1, "g", &[("t", 10)]);
    assert!(
        t.records.iter().all(|r| r.group() == "g"),
        "{:?}",
        t.records
    );
}

#[test]
fn members_past_the_coordinators_quota_are_refused_in_any_group() {
    let mut t = TestContext::with_config(CoreConfig {
        max_members: 3,
        ..CoreConfig::default()
    });
    let a = t.join(1, "a", &[("t", 1)]);
    t.join(1, "a", &[("t", 1)]);
    t.join(1, "b", &[("t", 1)]);
    let req = t.join_request("c", &[("t", 1)]);
    let refused = t.join_with(1, req).unwrap_err();
    assert_eq!(code(&refused), ErrorCode::TooManyMembers);
    assert!(
        message(&refused).contains("maximum of 3 members"),
        "{refused:?}"
    );
    assert!(!groups(&mut t).contains(&"c".to_owned()));
    assert_eq!(refusals(&t, Quota::Members), 1);
    // A rejoin of a current member adds nobody.
    let mut rejoin = t.join_request("a", &[("t", 1)]);
    rejoin.member_id = Some(a.id.clone());
    t.join_with(1, rejoin)
        .expect("a rejoin is not a new member");
    // A member that leaves makes room.
    assert!(matches!(t.leave(&a), Response::Leave));
    t.join(1, "c", &[("t", 1)]);
}

#[test]
fn static_instances_a_group_remembers_count_as_members() {
    let mut t = TestContext::with_config(CoreConfig {
        max_members: 2,
        ..CoreConfig::default()
    });
    for instance in ["i-1", "i-2"] {
        let mut req = t.join_request("g", &[("t", 1)]);
        req.instance_id = Some(instance.into());
        let m = t.join_with(1, req).unwrap();
        assert!(matches!(t.leave(&m), Response::Leave));
    }
    // The group has no member but remembers two instances (to fence them).
    assert_eq!(t.core.totals().members(), 2);
    let mut req = t.join_request("g", &[("t", 1)]);
    req.instance_id = Some("i-3".into());
    assert_eq!(
        code(&t.join_with(1, req).unwrap_err()),
        ErrorCode::TooManyMembers
    );
    // A new incarnation of a remembered instance adds nothing.
    let mut req = t.join_request("g", &[("t", 1)]);
    req.instance_id = Some("i-1".into());
    t.join_with(1, req)
        .expect("a remembered instance comes back");
}

#[test]
fn partitions_past_the_coordinators_quota_are_refused_and_freed_when_subscribers_go() {
    let mut t = TestContext::with_config(CoreConfig {
        max_partitions: 100,
        ..CoreConfig::default()
    });
    let a = t.join(1, "a", &[("big", 60)]);
    t.join(1, "b", &[("t", 40)]);
    let req = t.join_request("c", &[("t", 1)]);
    let refused = t.join_with(1, req).unwrap_err();
    assert_eq!(code(&refused), ErrorCode::TooManyPartitions);
    assert!(
        message(&refused).contains("maximum of 100 partitions over all groups"),
        "{refused:?}"
    );
    assert_eq!(refusals(&t, Quota::Partitions), 1);
    // Joining topics a group already has adds none.
    t.join(2, "a", &[("big", 60)]);
    assert_eq!(t.core.totals().partitions(), 100);
    // The group keeps its topic table: the topic nobody subscribes to counts as one.
    assert!(matches!(t.leave(&a), Response::Leave));
    let b = t.describe("a").members.remove(0);
    assert!(matches!(
        t.request(
            2,
            Request::Leave(LeaveRequest {
                group: "a".into(),
                member_id: b.member_id,
                mode: LeaveMode::Released,
            })
        ),
        Response::Leave
    ));
    t.advance(SETTLE);
    assert!(
        t.core.totals().partitions() <= 41,
        "{}",
        t.core.totals().partitions()
    );
    t.join(1, "c", &[("t", 50)]);
}

#[test]
fn a_group_that_churns_through_topic_names_reaches_its_partition_limit() {
    let mut t = TestContext::with_config(CoreConfig {
        max_partitions_per_group: 20,
        ..CoreConfig::default()
    });
    let m = t.join(1, "g", &[("t0", 5)]);
    let mut refused = None;
    for i in 1..40 {
        let mut req = t.join_request("g", &[(&format!("t{i}"), 5)]);
        req.member_id = Some(m.id.clone());
        if let Err(r) = t.join_with(1, req) {
            refused = Some((i, r));
            break;
        }
        t.advance(SETTLE);
    }
    // Each abandoned topic stays in the table as one partition: 5 + 15 abandoned.
    let (i, r) = refused.expect("the topic table is bounded");
    assert_eq!(i, 16, "{r:?}");
    assert_eq!(code(&r), ErrorCode::TooManyPartitions);
    assert!(message(&r).contains("counts as one"), "{r:?}");
    assert_eq!(refusals(&t, Quota::GroupPartitions), 1);
}

#[test]
fn commits_past_a_groups_offset_or_metadata_quota_are_refused_per_partition() {
    let mut t = TestContext::with_config(CoreConfig {
        max_offsets_per_group: 3,
        max_metadata_bytes: 100,
        max_metadata_bytes_per_group: 150,
        ..CoreConfig::default()
    });
    let r = admin_commit(&mut t, "g", (0..5).map(|p| offset("t", p, 10)).collect());
    assert_eq!(
        results(&r),
        [
            ErrorCode::None,
            ErrorCode::None,
            ErrorCode::None,
            ErrorCode::TooManyOffsets,
            ErrorCode::TooManyOffsets
        ]
    );
    // Updating a kept offset is always allowed, within the metadata quota.
    let r = admin_commit(&mut t, "g", vec![offset("t", 0, 100), offset("t", 1, 100)]);
    assert_eq!(results(&r), [ErrorCode::None, ErrorCode::TooManyOffsets]);
    // Shrinking metadata is always allowed.
    let r = admin_commit(&mut t, "g", vec![offset("t", 0, 0), offset("t", 1, 100)]);
    assert_eq!(results(&r), [ErrorCode::None, ErrorCode::None]);
    assert_eq!(refusals(&t, Quota::GroupOffsets), 2);
    assert_eq!(refusals(&t, Quota::GroupOffsetMetadata), 1);
    assert_eq!(t.core.totals().offsets(), 3);
    assert_eq!(t.core.totals().metadata_bytes(), 110);
    // A member's commits are held to the same quotas, after ownership.
    let g2 = t.join(1, "g2", &[("t", 5)]);
    t.advance(SETTLE);
    let r = t.request(
        1,
        Request::CommitOffsets(CommitOffsetsRequest {
            group: "g2".into(),
            member_id: Some(g2.id.clone()),
            generation: t.generation_of(&g2),
            offsets: vec![
                offset("t", 0, 0),
                offset("t", 1, 0),
                offset("t", 2, 0),
                offset("nope", 0, 0),
                offset("t", 3, 0),
            ],
        }),
    );
    assert_eq!(
        results(&r),
        [
            ErrorCode::None,
            ErrorCode::None,
            ErrorCode::None,
            ErrorCode::NotOwner,
            ErrorCode::TooManyOffsets
        ]
    );
}

#[test]
fn commits_past_the_coordinators_offset_or_metadata_quota_are_refused() {
    let mut t = TestContext::with_config(CoreConfig {
        max_offsets: 4,
        max_metadata_bytes_total: 50,
        ..CoreConfig::default()
    });
    let r = admin_commit(&mut t, "a", vec![offset("t", 0, 20), offset("t", 1, 20)]);
    assert_eq!(results(&r), [ErrorCode::None, ErrorCode::None]);
    let r = admin_commit(
        &mut t,
        "b",
        vec![offset("t", 0, 20), offset("t", 1, 0), offset("t", 2, 0)],
    );
    assert_eq!(
        results(&r),
        [ErrorCode::TooManyOffsets, ErrorCode::None, ErrorCode::None]
    );
    let r = admin_commit(&mut t, "b", vec![offset("t", 3, 0)]);
    assert_eq!(results(&r), [ErrorCode::TooManyOffsets]);
    assert_eq!(refusals(&t, Quota::OffsetMetadata), 1);
    assert_eq!(refusals(&t, Quota::Offsets), 1);
    // A group deleted by retention gives its offsets back.
    assert!(t.core.remove_offsets(t.now, "a", Duration::ZERO));
    let r = admin_commit(&mut t, "b", vec![offset("t", 3, 20)]);
    assert_eq!(results(&r), [ErrorCode::None]);
}

#[test]
fn commits_naming_a_topic_longer_than_a_name_are_refused_whole() {
    let mut t = TestContext::new();
    for topic in ["x".repeat(256), String::new()] {
        let r = admin_commit(&mut t, "g", vec![offset("t", 0, 0), offset(&topic, 0, 0)]);
        assert_eq!(code(&r), ErrorCode::InvalidRequest);
        assert!(
            message(&r).contains("topic names must be 1 to 255 bytes"),
            "{r:?}"
        );
    }
    assert!(groups(&mut t).is_empty());
    let r = admin_commit(&mut t, "g", vec![offset(&"x".repeat(255), 0, 0)]);
    assert_eq!(results(&r), [ErrorCode::None]);
}

#[test]
fn cores_sharing_totals_share_their_quotas() {
    let config = CoreConfig {
        max_groups: 2,
        ..CoreConfig::default()
    };
    let totals = Arc::new(Totals::default());
    let mut a = TestContext::with_config(config.clone());
    a.core = Coordinator::with_totals(config.clone(), totals.clone());
    let mut b = TestContext::with_config(config.clone());
    b.core = Coordinator::with_totals(config, totals.clone());
    a.join(1, "g1", &[("t", 1)]);
    b.join(1, "g2", &[("t", 1)]);
    let req = a.join_request("g3", &[("t", 1)]);
    assert_eq!(
        code(&a.join_with(1, req).unwrap_err()),
        ErrorCode::TooManyGroups
    );
    assert_eq!(totals.groups(), 2);
    assert_eq!(totals.members(), 2);
    assert_eq!(totals.partitions(), 2);
}

#[test]
fn a_restore_keeps_what_was_durable_and_counts_it() {
    let mut t = TestContext::with_config(CoreConfig::default());
    t.join(1, "g", &[("t", 8)]);
    admin_commit(&mut t, "h", vec![offset("t", 0, 3)]);
    t.advance(SETTLE);
    let mut state = crate::core::RestoredState::default();
    for r in std::mem::take(&mut t.records) {
        match r {
            crate::core::Record::Group(g) => {
                state
                    .groups
                    .retain(|s: &crate::core::GroupSnapshot| s.group != g.group);
                state.groups.push(g);
            }
            crate::core::Record::Offset(o) => state.offsets.push(o),
            crate::core::Record::GroupDeleted { .. } => {}
        }
    }
    // Restored under a smaller quota: nothing is dropped, nothing more is taken.
    let mut restored = TestContext::with_config(CoreConfig {
        max_groups: 1,
        ..CoreConfig::default()
    });
    restored.core.restore(restored.now, state);
    let totals = restored.core.totals().clone();
    assert_eq!(
        (totals.groups(), totals.members(), totals.partitions()),
        (2, 1, 8)
    );
    assert_eq!((totals.offsets(), totals.metadata_bytes()), (1, 3));
    let req = restored.join_request("new", &[("t", 1)]);
    assert_eq!(
        code(&restored.join_with(1, req).unwrap_err()),
        ErrorCode::TooManyGroups
    );
}

/// Due rebalances of large groups run a slice at a time: one call handles at most one
/// of them, and says there is more.
#[test]
fn due_timers_run_in_slices_of_about_one_large_rebalance() {
    let large = u32::try_from(TIMER_SLICE).unwrap();
    let mut t = TestContext::with_config(CoreConfig {
        max_partitions_per_group: large,
        max_partitions: 4 * TIMER_SLICE,
        ..CoreConfig::default()
    });
    for g in ["a", "b", "c"] {
        t.join(1, g, &[("t", large)]);
    }
    let due = t.core.poll_timeout().expect("rebalances are due");
    t.now = due + SESSION / 100;
    let rebalances = |t: &TestContext| {
        t.events
            .iter()
            .filter(|e| matches!(e, Event::RebalanceStarted { .. }))
            .count()
    };
    for expected in 1..=3 {
        t.core.handle_timeout(t.now);
        t.drain();
        assert_eq!(rebalances(&t), expected);
        let more = t.core.poll_timeout().is_some_and(|d| d <= t.now);
        assert_eq!(more, expected < 3, "after {expected} rebalances");
    }
}

/// The removals a coordinator remembers (to answer a removed member with the reason)
/// are bounded over all groups by its member quota: past it, the group that removes
/// another member forgets its own oldest removal.
#[test]
fn remembered_removals_are_bounded_over_all_groups() {
    let mut t = TestContext::with_config(CoreConfig {
        max_members: 4,
        ..CoreConfig::default()
    });
    for group in ["a", "a", "a", "b", "b", "b"] {
        let m = t.join(1, group, &[("t", 1)]);
        assert!(matches!(t.leave(&m), Response::Leave));
        assert!(
            t.core.totals().removals() <= 4,
            "{}",
            t.core.totals().removals()
        );
    }
    assert_eq!(t.core.totals().removals(), 4);
    assert_eq!(t.core.totals().members(), 0);
}
