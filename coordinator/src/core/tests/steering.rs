//! What members declare and report steering the assignment through the whole core, with
//! simulated time: racks and preferred racks from Join version 3, capacities, loads from
//! Heartbeat version 1 weighed against the imbalance threshold, the settings changed by
//! AlterGroupConfig, drains among racks, and suspects' partitions sent by capacity.

use std::collections::BTreeMap;
use std::time::Duration;

use rollcall_protocol::{
    AlterGroupConfigRequest, DrainRequest, JoinPlacement, PartitionLoad, Push, Request, Response,
    TopicRacks,
};

use super::*;
use crate::core::RebalanceCause;

const STEP: Duration = Duration::from_millis(100);
const TOPIC: &str = "t";

type Owners = BTreeMap<u32, String>;

/// Joins a member on `conn` to `g`, subscribing to `partitions` of [`TOPIC`], in `rack`
/// with `capacity`, declaring `preferred` racks for the partitions (if any).
fn join_placed(
    t: &mut TestContext,
    conn: ConnId,
    partitions: u32,
    rack: &str,
    capacity: u32,
    preferred: Option<&[String]>,
) -> M {
    let mut req = t.join_request("g", &[(TOPIC, partitions)]);
    req.placement = Some(Box::new(JoinPlacement {
        label: String::new(),
        rack: rack.into(),
        capacity,
        topic_racks: preferred
            .map(|racks| {
                vec![TopicRacks {
                    topic: TOPIC.into(),
                    racks: racks.to_vec(),
                }]
            })
            .unwrap_or_default(),
    }));
    t.join_with(conn, req).expect("join accepted")
}

/// Whether every member owns exactly its target and no rebalance is pending.
fn settled(t: &TestContext) -> bool {
    let g = &t.core.groups["g"];
    g.state() == rollcall_protocol::GroupState::Stable
        && g.members.values().all(|m| m.owned == m.target)
}

/// Every member beats once a step, acknowledging what it is asked to release, until
/// the group settles (within a minute of simulated time).
fn settle(t: &mut TestContext, members: &mut [M]) {
    let start = t.now;
    loop {
        t.advance(STEP);
        for m in members.iter_mut() {
            let r = t.ack_all(m);
            assert!(matches!(r, Response::Heartbeat(_)), "{}: {r:?}", m.id);
        }
        t.assert_exclusive("g");
        if settled(t) {
            return;
        }
        assert!(t.now - start < Duration::from_secs(60), "not settled");
    }
}

/// Each partition of [`TOPIC`] with its owner, as the members were told.
fn owners(t: &TestContext, members: &[M]) -> Owners {
    let mut out = Owners::new();
    for m in members {
        for (_, p) in flatten(&t.owned(m)) {
            assert!(out.insert(p, m.id.clone()).is_none(), "{p} owned twice");
        }
    }
    out
}

fn rebalances(t: &TestContext, cause: RebalanceCause) -> Vec<usize> {
    t.events
        .iter()
        .filter_map(|e| match e {
            Event::RebalanceStarted {
                cause: c,
                partitions_moved,
                ..
            } if *c == cause => Some(*partitions_moved),
            _ => None,
        })
        .collect()
}

fn alter(t: &mut TestContext, r: AlterGroupConfigRequest) {
    let r = t.request(
        9,
        Request::AlterGroupConfig(AlterGroupConfigRequest {
            group: "g".into(),
            ..r
        }),
    );
    assert!(matches!(r, Response::AlterGroupConfig(_)), "{r:?}");
}

/// A heartbeat of `m` reporting `loads` (partition, load) of [`TOPIC`].
fn beat_loads(t: &mut TestContext, m: &mut M, loads: &[(u32, f64)]) {
    m.seq += 1;
    m.progress += 1;
    let generation = t.generation_of(m);
    let r = t.request(
        m.conn,
        Request::Heartbeat(HeartbeatRequest {
            group: m.group.clone().into(),
            member_id: m.id.clone().into(),
            generation,
            sequence: m.seq,
            progress: m.progress,
            acked_revocations: Vec::new(),
            loads: loads
                .iter()
                .map(|&(partition, load)| PartitionLoad {
                    topic: TOPIC.into(),
                    partition,
                    load,
                })
                .collect(),
        }),
    );
    assert!(matches!(r, Response::Heartbeat(_)), "{r:?}");
}

/// For `secs` seconds, every member reports once a second the load `load(p)` of each
/// partition it owns.
fn report_for(t: &mut TestContext, members: &mut [M], secs: u32, load: impl Fn(u32) -> f64) {
    for _ in 0..secs {
        t.advance(Duration::from_secs(1));
        for m in members.iter_mut() {
            let mine: Vec<(u32, f64)> = flatten(&t.owned(m))
                .into_iter()
                .map(|(_, p)| (p, load(p)))
                .collect();
            beat_loads(t, m, &mine);
        }
    }
}

fn rack_name(r: usize) -> String {
    format!("zone-{r}")
}

/// 3 racks × 4 members and 120 partitions whose preferred racks are spread evenly:
/// at least 95 % of the partitions are owned in their rack, every member has its 10;
/// killing one rack's members moves only their partitions.
#[test]
fn racks_keep_partitions_home_and_losing_a_rack_moves_only_its_share() {
    let mut t = TestContext::new();
    let preferred: Vec<String> = (0..120).map(|p| rack_name(p % 3)).collect();
    let mut members: Vec<M> = (0..12)
        .map(|i| {
            join_placed(
                &mut t,
                i as u64 + 1,
                120,
                &rack_name(i % 3),
                0,
                Some(&preferred),
            )
        })
        .collect();
    settle(&mut t, &mut members);
    let rack_of: BTreeMap<String, usize> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id.clone(), i % 3))
        .collect();
    let before = owners(&t, &members);
    assert_eq!(before.len(), 120);
    let home = before
        .iter()
        .filter(|(p, id)| rack_of[*id] == **p as usize % 3)
        .count();
    assert!(home >= 114, "only {home} of 120 in their rack");
    for m in &members {
        assert_eq!(count(&t.owned(m)), 10, "{} is off balance", m.id);
    }

    // Rack 0's members fall silent and are expelled; the others beat on.
    let mut alive: Vec<M> = members
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, m)| m)
        .collect();
    let events = t.events.len();
    for _ in 0..30 {
        t.advance(Duration::from_secs(1));
        for m in alive.iter_mut() {
            t.expect_beat_ok(m);
        }
    }
    let expelled = t.events[events..]
        .iter()
        .filter(|e| matches!(e, Event::MemberRemoved { .. }))
        .count();
    assert_eq!(expelled, 4, "rack 0's members are expelled");
    settle(&mut t, &mut alive);
    let after = owners(&t, &alive);
    assert_eq!(after.len(), 120, "every partition owned again");
    for (p, id) in &before {
        if rack_of[id] != 0 {
            assert_eq!(&after[p], id, "partition {p} moved off a live rack");
        }
    }
    for m in &alive {
        assert_eq!(count(&t.owned(m)), 15, "{} is off balance", m.id);
    }
}

/// Capacities 1 : 2 : 4 declared at join give 10, 20 and 40 of 70 partitions.
#[test]
fn capacities_declared_at_join_weigh_the_shares() {
    let mut t = TestContext::new();
    let mut members: Vec<M> = [1, 2, 4]
        .iter()
        .enumerate()
        .map(|(i, &c)| join_placed(&mut t, i as u64 + 1, 70, "", c, None))
        .collect();
    settle(&mut t, &mut members);
    let shares: Vec<usize> = members.iter().map(|m| count(&t.owned(m))).collect();
    assert_eq!(shares, [10, 20, 40]);
}

/// With load balance, reports that keep the group within its threshold start nothing;
/// a skew past it starts one rebalance, which moves at most the churn budget and takes
/// load off the heavy member. With count balance the same skew starts nothing.
#[test]
fn a_load_skew_rebalances_once_past_the_threshold_within_the_churn_budget() {
    for balance in [0_u8, 1] {
        let mut t = TestContext::new();
        let mut members: Vec<M> = (0..4)
            .map(|i| join_placed(&mut t, i + 1, 40, "", 0, None))
            .collect();
        settle(&mut t, &mut members);
        alter(
            &mut t,
            AlterGroupConfigRequest {
                balance: Some(balance),
                ..Default::default()
            },
        );
        settle(&mut t, &mut members);
        let before = owners(&t, &members);
        let heavy: Vec<u32> = flatten(&t.owned(&members[0]))
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        let base = t.events.len();

        // Even, then 5 % heavier on one member: within the 10 % threshold.
        report_for(&mut t, &mut members, 12, |_| 1.0);
        report_for(&mut t, &mut members, 12, |p| {
            if heavy.contains(&p) {
                1.05
            } else {
                1.0
            }
        });
        assert!(
            !t.events[base..]
                .iter()
                .any(|e| matches!(e, Event::RebalanceStarted { .. })),
            "a rebalance within the threshold"
        );
        assert_eq!(owners(&t, &members), before);

        // Three times as heavy: one rebalance (load balance only).
        report_for(&mut t, &mut members, 6, |p| {
            if heavy.contains(&p) {
                3.0
            } else {
                1.0
            }
        });
        let started = rebalances(&t, RebalanceCause::LoadImbalance);
        if balance == 0 {
            assert!(started.is_empty(), "count balance weighs no load");
            assert_eq!(owners(&t, &members), before);
            continue;
        }
        assert_eq!(started.len(), 1, "one rebalance: {started:?}");
        // The default budget: a tenth of the 40 partitions.
        assert!(started[0] > 0 && started[0] <= 4, "moved {}", started[0]);
        settle(&mut t, &mut members);
        let after = owners(&t, &members);
        let moved = before.iter().filter(|(p, id)| after[*p] != **id).count();
        assert!(moved > 0 && moved <= 4, "moved {moved}");
        let kept = count(&t.owned(&members[0]));
        assert!(kept < 10, "the heavy member still owns {kept}");
        assert!(
            before
                .iter()
                .filter(|(p, id)| after[*p] != **id)
                .all(|(_, id)| *id == members[0].id),
            "only the heavy member gave partitions away"
        );
    }
}

/// Load reports are weighed at most once per check interval and never while a
/// rebalance is under way: a steady skew brings waves a few seconds apart, each within
/// the churn budget, until the group is within its threshold.
#[test]
fn load_checks_are_rate_limited_and_waves_end_within_the_threshold() {
    let mut t = TestContext::new();
    alter(
        &mut t,
        AlterGroupConfigRequest {
            balance: Some(1),
            churn_budget_permille: Some(50),
            ..Default::default()
        },
    );
    let mut members: Vec<M> = (0..4)
        .map(|i| join_placed(&mut t, i + 1, 40, "", 0, None))
        .collect();
    settle(&mut t, &mut members);
    let heavy: Vec<u32> = flatten(&t.owned(&members[0]))
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    let load = |p: u32| if heavy.contains(&p) { 4.0 } else { 1.0 };
    let mut waves = Vec::new();
    for _ in 0..60 {
        let seen = rebalances(&t, RebalanceCause::LoadImbalance).len();
        report_for(&mut t, &mut members, 1, load);
        if rebalances(&t, RebalanceCause::LoadImbalance).len() > seen {
            waves.push(t.now);
        }
        // Members acknowledge what they are asked at once.
        for m in members.iter_mut() {
            t.ack_all(m);
        }
    }
    let moved = rebalances(&t, RebalanceCause::LoadImbalance);
    assert!(moved.len() >= 2, "several waves: {moved:?}");
    assert!(
        moved.iter().all(|&n| n <= 2),
        "each within 5 % of 40: {moved:?}"
    );
    for w in waves.windows(2) {
        assert!(
            w[1] - w[0] >= Duration::from_secs(5),
            "waves {:?} apart",
            w[1] - w[0]
        );
    }
    // In balance at the end: the heavy member kept about a quarter of the load.
    let own = count(&t.owned(&members[0]));
    assert!(own <= 4, "the heavy member still owns {own}");
    let total = moved.len();
    report_for(&mut t, &mut members, 30, load);
    assert_eq!(
        rebalances(&t, RebalanceCause::LoadImbalance).len(),
        total,
        "no more rebalances once in balance"
    );
}

/// Turning load balance on rebalances by the loads already reported; lifting a cap on
/// revocations asks those that waited at once.
#[test]
fn changing_the_balance_rebalances_and_changing_the_caps_reconciles() {
    let mut t = TestContext::new();
    let mut members: Vec<M> = (0..2)
        .map(|i| join_placed(&mut t, i + 1, 20, "", 0, None))
        .collect();
    settle(&mut t, &mut members);
    let heavy: Vec<u32> = flatten(&t.owned(&members[0]))
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    report_for(&mut t, &mut members, 2, |p| {
        if heavy.contains(&p) {
            3.0
        } else {
            1.0
        }
    });
    assert!(rebalances(&t, RebalanceCause::LoadImbalance).is_empty());
    alter(
        &mut t,
        AlterGroupConfigRequest {
            balance: Some(1),
            churn_budget_permille: Some(1000),
            ..Default::default()
        },
    );
    settle(&mut t, &mut members);
    assert_eq!(rebalances(&t, RebalanceCause::Operator).len(), 1);
    // 10 × 3 against 10 × 1: the heavy member hands heavy partitions over until both
    // are within the threshold of the mean (20).
    let own = count(&t.owned(&members[0])) as f64;
    let (a, b) = (own * 3.0, (10.0 - own) * 3.0 + 10.0);
    assert!(own < 10.0 && a.max(b) <= 22.0, "loads {a} and {b}");

    // Caps: a third member joins under a cap of one revocation; it waits.
    alter(
        &mut t,
        AlterGroupConfigRequest {
            balance: Some(0),
            max_revoking: Some(1),
            ..Default::default()
        },
    );
    settle(&mut t, &mut members);
    let c = join_placed(&mut t, 3, 20, "", 0, None);
    t.advance(Duration::from_secs(1));
    let asked: usize = members.iter().map(|m| count(&t.revoking(m))).sum();
    assert_eq!(asked, 1, "one revocation at a time");
    assert!(t.core.groups["g"].revocations_waiting() > 0);
    // Lifting the cap asks every waiting revocation in the same request.
    let mark = t.pushes.len();
    alter(
        &mut t,
        AlterGroupConfigRequest {
            max_revoking: Some(0),
            ..Default::default()
        },
    );
    assert!(
        t.pushes[mark..]
            .iter()
            .any(|(_, _, p)| matches!(p, Push::Revoke(_))),
        "the waiting revocations are asked at once"
    );
    assert_eq!(t.core.groups["g"].revocations_waiting(), 0);
    members.push(c);
    settle(&mut t, &mut members);
    let shares: Vec<usize> = members.iter().map(|m| count(&t.owned(m))).collect();
    assert_eq!(shares.iter().sum::<usize>(), 20);
    assert!(shares.iter().all(|&s| (6..=7).contains(&s)), "{shares:?}");
}

/// A drained member among racks gets nothing; the others keep what they had and the
/// drained member's partitions go home where their rack has room.
#[test]
fn a_drained_member_among_racks_gets_nothing() {
    let mut t = TestContext::new();
    let preferred: Vec<String> = (0..24).map(|p| rack_name(p % 2)).collect();
    let mut members: Vec<M> = (0..4)
        .map(|i| {
            join_placed(
                &mut t,
                i as u64 + 1,
                24,
                &rack_name(i % 2),
                0,
                Some(&preferred),
            )
        })
        .collect();
    settle(&mut t, &mut members);
    let before = owners(&t, &members);
    let r = t.request(
        9,
        Request::Drain(DrainRequest {
            group: "g".into(),
            member_id: members[0].id.clone(),
            label: String::new(),
            drained: true,
        }),
    );
    assert!(matches!(r, Response::Drain(_)), "{r:?}");
    settle(&mut t, &mut members);
    let after = owners(&t, &members);
    assert_eq!(after.len(), 24);
    assert_eq!(
        count(&t.owned(&members[0])),
        0,
        "the drained member owns nothing"
    );
    for (p, id) in &before {
        if *id != members[0].id {
            assert_eq!(
                &after[p], id,
                "partition {p} moved off a member not drained"
            );
        }
    }
    // The drained member's rack-0 partitions went to its rack-mate (member 2) as far
    // as the quotas allow (8 per member now): it owns 8 of rack 0's 12.
    let home = after
        .iter()
        .filter(|(p, id)| **p % 2 == 0 && **id == members[2].id)
        .count();
    assert!(
        home >= 8,
        "rack 0's member owns {home} of its rack's partitions"
    );
}

/// A suspect member is given nothing new; what the assignor gave it goes to the member
/// with the fewest partitions per unit of capacity (here the big one), not simply the
/// one with the fewest partitions.
#[test]
fn a_suspects_share_goes_by_capacity() {
    let mut t = TestContext::new();
    // a: 1, b: 3, c: 1 (falls silent), x: 1 (leaves); 60 partitions: 10, 30, 10, 10.
    let mut members: Vec<M> = [1, 3, 1, 1]
        .iter()
        .enumerate()
        .map(|(i, &c)| join_placed(&mut t, i as u64 + 1, 60, "", c, None))
        .collect();
    settle(&mut t, &mut members);
    let shares: Vec<usize> = members.iter().map(|m| count(&t.owned(m))).collect();
    assert_eq!(shares, [10, 30, 10, 10]);
    let x = members.pop().expect("x");
    let c = members.pop().expect("c");
    // c is silent long enough to be suspect, not expelled.
    for _ in 0..6 {
        t.advance(Duration::from_secs(1));
        for m in members.iter_mut() {
            t.expect_beat_ok(m);
        }
    }
    assert!(t
        .events
        .iter()
        .any(|e| matches!(e, Event::MemberSuspected { member_id, .. } if *member_id == c.id)));
    t.leave(&x);
    for _ in 0..3 {
        t.advance(Duration::from_millis(500));
        for m in members.iter_mut() {
            t.expect_beat_ok(m);
        }
    }
    // The quotas were 12, 36, 12: c's 2 more went to b (37/3 and 38/3 per capacity
    // against a's 13/1).
    assert_eq!(count(&t.owned(&c)), 10, "the suspect keeps what it had");
    let shares: Vec<usize> = members.iter().map(|m| count(&t.owned(m))).collect();
    assert_eq!(shares, [12, 38]);
    t.assert_exclusive("g");
}

/// What the assignor gave a suspect member never goes to a drained one, though the
/// drained member has the fewest partitions of all.
#[test]
fn a_suspects_share_never_goes_to_a_drained_member() {
    let mut t = TestContext::new();
    // a, c (falls silent), d (drained), x (leaves); 24 partitions.
    let mut members: Vec<M> = (0..4)
        .map(|i| join_placed(&mut t, i + 1, 24, "", 0, None))
        .collect();
    settle(&mut t, &mut members);
    let r = t.request(
        9,
        Request::Drain(DrainRequest {
            group: "g".into(),
            member_id: members[2].id.clone(),
            label: String::new(),
            drained: true,
        }),
    );
    assert!(matches!(r, Response::Drain(_)), "{r:?}");
    settle(&mut t, &mut members);
    assert_eq!(count(&t.owned(&members[2])), 0);
    let x = members.pop().expect("x");
    let d = members.pop().expect("d");
    let c = members.remove(1);
    let c_owned = count(&t.owned(&c));
    let mut beating = [members.pop().expect("a"), d];
    for _ in 0..6 {
        t.advance(Duration::from_secs(1));
        for m in beating.iter_mut() {
            t.expect_beat_ok(m);
        }
    }
    t.leave(&x);
    for _ in 0..3 {
        t.advance(Duration::from_millis(500));
        for m in beating.iter_mut() {
            t.expect_beat_ok(m);
        }
    }
    assert_eq!(
        count(&t.owned(&beating[1])),
        0,
        "the drained member was given work"
    );
    assert_eq!(
        count(&t.owned(&c)),
        c_owned,
        "the suspect keeps what it had"
    );
    assert_eq!(count(&t.owned(&beating[0])) + c_owned, 24);
    t.assert_exclusive("g");
}
