//! The operator's controls, with simulated time: drains by member and by label (only
//! the drained members' partitions move), undrains, a member's drain of itself, the
//! group's settings and their validation, loads from owners, placements, describe
//! version 4, and durability of all of it through a restart.

use std::time::Duration;

use rollcall_protocol::{
    AlterGroupConfigRequest, DescribeGroupRequest, DescribeGroupResponse, DrainRequest, ErrorCode,
    JoinPlacement, Page, PartitionLoad, Request, Response, TopicRacks,
};

use super::*;
use crate::core::{Authority, Balance, Event, GroupConfig, RestoredState};
use crate::store::{snapshot_json, MemoryStore, Store};

const SETTLE: Duration = Duration::from_millis(300);

fn error_code(r: &Response) -> Option<ErrorCode> {
    match r {
        Response::Error(e) => Some(e.code),
        _ => None,
    }
}

/// Lets the group's revocations run to the end: each member acknowledges what it is
/// asked to release and beats, a few rounds.
fn settle(t: &mut TestContext, members: &mut [&mut M]) {
    for _ in 0..4 {
        t.advance(SETTLE);
        for m in members.iter_mut() {
            t.ack_all(m);
        }
    }
    t.advance(SETTLE);
}

fn drain_req(member: &str, label: &str, drained: bool) -> Request {
    Request::Drain(DrainRequest {
        group: "g".into(),
        member_id: member.into(),
        label: label.into(),
        drained,
    })
}

fn drained(r: Response) -> Vec<String> {
    match r {
        Response::Drain(d) => d.members,
        other => panic!("drain refused: {other:?}"),
    }
}

fn describe_v4(t: &mut TestContext) -> DescribeGroupResponse {
    match t.request(
        0,
        Request::DescribeGroup(DescribeGroupRequest {
            group: "g".into(),
            detection: true,
            page: Some(Page {
                after: None,
                limit: 0,
            }),
            summary: true,
            operator: true,
        }),
    ) {
        Response::DescribeGroup(d) => d,
        other => panic!("describe refused: {other:?}"),
    }
}

fn join_labelled(t: &mut TestContext, conn: ConnId, label: &str) -> M {
    let mut req = t.join_request("g", &[("orders", 12)]);
    req.placement = Some(Box::new(JoinPlacement {
        label: label.into(),
        ..Default::default()
    }));
    t.join_with(conn, req).expect("join accepted")
}

fn partitions(owned: &[TopicPartitions]) -> Vec<u32> {
    owned.iter().flat_map(|t| t.partitions.clone()).collect()
}

#[test]
fn a_drain_moves_only_the_drained_members_partitions_and_an_undrain_gives_work_back() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 12)]);
    let mut b = t.join(2, "g", &[("orders", 12)]);
    let mut c = t.join(3, "g", &[("orders", 12)]);
    settle(&mut t, &mut [&mut a, &mut b, &mut c]);
    let (a0, b0, c0) = (
        partitions(&t.owned(&a)),
        partitions(&t.owned(&b)),
        partitions(&t.owned(&c)),
    );
    assert_eq!((a0.len(), b0.len(), c0.len()), (4, 4, 4));

    assert_eq!(
        drained(t.request(9, drain_req(&b.id, "", true))),
        [b.id.clone()]
    );
    assert!(t.events.iter().any(|e| matches!(e,
        Event::MembersDrained { members, drained: true, .. } if *members == [b.id.clone()])));
    t.advance(SETTLE);
    // Only b is asked to release anything.
    assert!(t.revoking(&a).is_empty() && t.revoking(&c).is_empty());
    assert_eq!(partitions(&t.revoking(&b)), b0);
    settle(&mut t, &mut [&mut a, &mut b, &mut c]);
    t.assert_exclusive("g");
    let (a1, b1, c1) = (
        partitions(&t.owned(&a)),
        partitions(&t.owned(&b)),
        partitions(&t.owned(&c)),
    );
    assert!(b1.is_empty(), "the drained member owns nothing");
    assert!(a0.iter().all(|p| a1.contains(p)), "a kept all it had");
    assert!(c0.iter().all(|p| c1.contains(p)), "c kept all it had");
    assert_eq!(a1.len() + c1.len(), 12);
    // It stays in the group and heartbeats.
    t.expect_beat_ok(&mut b);
    let d = describe_v4(&mut t);
    let described_b = d.members.iter().find(|m| m.member_id == b.id).expect("b");
    assert!(described_b.operator.as_ref().expect("v4").drained);
    assert!(d.members.iter().filter(|m| m.member_id != b.id).all(|m| !m
        .operator
        .as_ref()
        .expect("v4")
        .drained));
    // Draining it again changes nothing.
    assert!(drained(t.request(9, drain_req(&b.id, "", true))).is_empty());

    // Undrain: b is given work again.
    assert_eq!(
        drained(t.request(9, drain_req(&b.id, "", false))),
        [b.id.clone()]
    );
    settle(&mut t, &mut [&mut a, &mut b, &mut c]);
    t.assert_exclusive("g");
    assert_eq!(count(&t.owned(&b)), 4);
}

#[test]
fn a_label_drains_its_members_now_and_later() {
    let mut t = TestContext::new();
    let mut a = join_labelled(&mut t, 1, "host-1");
    let mut b = join_labelled(&mut t, 2, "host-2");
    settle(&mut t, &mut [&mut a, &mut b]);
    assert_eq!(
        drained(t.request(9, drain_req("", "host-1", true))),
        [a.id.clone()]
    );
    settle(&mut t, &mut [&mut a, &mut b]);
    assert_eq!((count(&t.owned(&a)), count(&t.owned(&b))), (0, 12));
    // A member joining later with the label is drained at once: it is given nothing.
    let mut c = join_labelled(&mut t, 3, "host-1");
    settle(&mut t, &mut [&mut a, &mut b, &mut c]);
    assert_eq!((count(&t.owned(&c)), count(&t.owned(&b))), (0, 12));
    let d = describe_v4(&mut t);
    assert_eq!(d.operator.expect("v4").drained_labels, ["host-1"]);
    assert_eq!(t.core.stats(t.now).members_drained, 2);
    // Undraining the label gives both work.
    let mut undrained = drained(t.request(9, drain_req("", "host-1", false)));
    undrained.sort();
    let mut both = vec![a.id.clone(), c.id.clone()];
    both.sort();
    assert_eq!(undrained, both);
    settle(&mut t, &mut [&mut a, &mut b, &mut c]);
    assert_eq!(
        (
            count(&t.owned(&a)),
            count(&t.owned(&b)),
            count(&t.owned(&c))
        ),
        (4, 4, 4)
    );
}

#[test]
fn a_member_may_drain_itself_on_its_own_connection_and_no_other() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    settle(&mut t, &mut [&mut a, &mut b]);
    let as_member = |t: &mut TestContext, conn: ConnId, req: Request| {
        let r = t
            .core
            .handle_request_as(t.now, conn, req, Authority::Member)
            .response;
        t.drain();
        r
    };
    // b's connection may not drain a, nor may a connection with no member.
    let r = as_member(&mut t, 2, drain_req(&a.id, "", true));
    assert_eq!(error_code(&r), Some(ErrorCode::NotAuthorized));
    let r = as_member(&mut t, 7, drain_req(&a.id, "", true));
    assert_eq!(error_code(&r), Some(ErrorCode::NotAuthorized));
    // Nor drain a label, nor change settings.
    let r = as_member(&mut t, 1, drain_req("", "host", true));
    assert_eq!(error_code(&r), Some(ErrorCode::NotAuthorized));
    let r = as_member(
        &mut t,
        1,
        Request::AlterGroupConfig(AlterGroupConfigRequest {
            group: "g".into(),
            max_revoking: Some(1),
            ..Default::default()
        }),
    );
    assert_eq!(error_code(&r), Some(ErrorCode::NotAuthorized));
    assert_eq!(count(&t.owned(&a)), 2);
    // a, on its own connection, may (a graceful scale-in).
    let r = as_member(&mut t, 1, drain_req(&a.id, "", true));
    assert_eq!(drained(r), [a.id.clone()]);
    settle(&mut t, &mut [&mut a, &mut b]);
    assert_eq!((count(&t.owned(&a)), count(&t.owned(&b))), (0, 4));
}

#[test]
fn a_drain_is_checked() {
    let mut t = TestContext::new();
    let a = t.join(1, "g", &[("orders", 4)]);
    let cases = [
        (drain_req(&a.id, "host", true), ErrorCode::InvalidRequest),
        (drain_req("", "", true), ErrorCode::InvalidRequest),
        (drain_req("m-none", "", false), ErrorCode::UnknownMember),
        (drain_req("m-none", "", true), ErrorCode::UnknownMember),
        (
            Request::Drain(DrainRequest {
                group: "nope".into(),
                member_id: a.id.clone(),
                label: String::new(),
                drained: true,
            }),
            ErrorCode::UnknownGroup,
        ),
    ];
    for (req, code) in cases {
        let r = t.request(9, req.clone());
        assert_eq!(error_code(&r), Some(code), "{req:?}");
    }
}

fn alter(t: &mut TestContext, r: AlterGroupConfigRequest) -> Response {
    t.request(9, Request::AlterGroupConfig(r))
}

#[test]
fn group_settings_are_validated_created_read_and_kept_across_a_restart() {
    let mut t = TestContext::new();
    let base = AlterGroupConfigRequest {
        group: "g".into(),
        ..Default::default()
    };
    // Reading a group that does not exist.
    assert_eq!(
        error_code(&alter(&mut t, base.clone())),
        Some(ErrorCode::UnknownGroup)
    );
    for bad in [
        AlterGroupConfigRequest {
            departure_delay_ms: Some(3_600_001),
            ..base.clone()
        },
        AlterGroupConfigRequest {
            balance: Some(2),
            ..base.clone()
        },
        AlterGroupConfigRequest {
            churn_budget_permille: Some(1001),
            ..base.clone()
        },
        AlterGroupConfigRequest {
            imbalance_permille: Some(1001),
            ..base.clone()
        },
    ] {
        let r = alter(&mut t, bad.clone());
        assert_eq!(error_code(&r), Some(ErrorCode::InvalidRequest), "{bad:?}");
    }
    assert!(
        t.core.groups.is_empty(),
        "a refused setting creates nothing"
    );
    // Setting something creates the group, empty, before anyone joins.
    let set = AlterGroupConfigRequest {
        departure_delay_ms: Some(3_600_000),
        max_revoking: Some(200),
        balance: Some(1),
        churn_budget_permille: Some(1000),
        ..base.clone()
    };
    let Response::AlterGroupConfig(r) = alter(&mut t, set) else {
        panic!("refused")
    };
    assert_eq!(
        (
            r.config.departure_delay_ms,
            r.config.max_revoking,
            r.config.balance
        ),
        (3_600_000, 200, 1)
    );
    assert_eq!(
        r.config.imbalance_permille, 100,
        "the rest keep their defaults"
    );
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let b = t.join(2, "g", &[("orders", 4)]);
    settle(&mut t, &mut [&mut a]);
    assert_eq!(
        drained(t.request(9, drain_req(&b.id, "", true))),
        [b.id.as_str()]
    );
    assert!(drained(t.request(9, drain_req("", "rack-9", true))).is_empty());
    t.advance(SETTLE);

    // Through the store's own encoding, then a restart.
    let state = durable_json(&t.records);
    let mut config = t.core.config().clone();
    config.member_id_prefix = "r-".into();
    t.core = Coordinator::new(config);
    t.core.restore(t.now, state);
    t.drain();
    let g = &t.core.groups["g"];
    assert_eq!(
        g.config,
        GroupConfig {
            departure_delay_ms: 3_600_000,
            max_revoking: 200,
            max_revoking_per_member: 0,
            balance: Balance::Load,
            churn_budget_permille: 1000,
            imbalance_permille: 100,
        }
    );
    assert!(g.drained_members.contains(b.id.as_str()));
    assert!(g.drained_labels.contains("rack-9"));
    let Response::AlterGroupConfig(read) = alter(&mut t, base.clone()) else {
        panic!("read refused")
    };
    assert_eq!(read.config.max_revoking, 200);
}

#[test]
fn a_configured_group_with_nothing_else_is_forgotten_once_set_back_to_the_default() {
    let mut t = TestContext::new();
    let base = AlterGroupConfigRequest {
        group: "g".into(),
        ..Default::default()
    };
    alter(
        &mut t,
        AlterGroupConfigRequest {
            max_revoking: Some(5),
            ..base.clone()
        },
    );
    assert!(t.core.groups.contains_key("g"));
    alter(
        &mut t,
        AlterGroupConfigRequest {
            max_revoking: Some(0),
            ..base.clone()
        },
    );
    assert!(!t.core.groups.contains_key("g"));
}

fn beat_loads(t: &mut TestContext, m: &mut M, loads: Vec<PartitionLoad>) -> Response {
    m.seq += 1;
    let generation = t.generation_of(m);
    t.request(
        m.conn,
        Request::Heartbeat(HeartbeatRequest {
            group: m.group.clone().into(),
            member_id: m.id.clone().into(),
            generation,
            sequence: m.seq,
            progress: m.progress,
            acked_revocations: Vec::new(),
            loads,
        }),
    )
}

fn load(p: u32, load: f64) -> PartitionLoad {
    PartitionLoad {
        topic: "orders".into(),
        partition: p,
        load,
    }
}

#[test]
fn loads_count_only_from_the_owner_and_must_be_finite() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 4)]);
    let mut b = t.join(2, "g", &[("orders", 4)]);
    settle(&mut t, &mut [&mut a, &mut b]);
    let mine = partitions(&t.owned(&a));
    let theirs = partitions(&t.owned(&b));
    let r = beat_loads(
        &mut t,
        &mut a,
        vec![
            load(mine[0], 10.0),
            load(mine[1], 2.5),
            load(theirs[0], 99.0),
        ],
    );
    assert!(matches!(r, Response::Heartbeat(_)), "{r:?}");
    // An unknown topic or partition is ignored too.
    let r = beat_loads(&mut t, &mut a, vec![load(77, 1.0)]);
    assert!(matches!(r, Response::Heartbeat(_)), "{r:?}");
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let r = beat_loads(&mut t, &mut a, vec![load(mine[0], bad)]);
        assert_eq!(error_code(&r), Some(ErrorCode::InvalidRequest), "{bad}");
    }
    let d = describe_v4(&mut t);
    let load_of = |id: &str| {
        d.members
            .iter()
            .find(|m| m.member_id == id)
            .and_then(|m| m.operator.as_ref())
            .map(|o| o.load)
    };
    assert_eq!(load_of(&a.id), Some(12.5));
    assert_eq!(
        load_of(&b.id),
        Some(0.0),
        "b's partition's load came from a"
    );
}

#[test]
fn describe_version_4_shows_placements_settings_and_reservations() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 2)]);
    req.placement = Some(Box::new(JoinPlacement {
        label: "host-1".into(),
        rack: "eu-1a".into(),
        capacity: 0,
        topic_racks: vec![TopicRacks {
            topic: "orders".into(),
            racks: vec!["eu-1a".into(), "eu-1b".into()],
        }],
    }));
    let a = t.join_with(1, req).expect("join");
    let mut b = t.join_request("g", &[("orders", 2)]);
    b.placement = Some(Box::new(JoinPlacement {
        capacity: 3,
        ..Default::default()
    }));
    let b = t.join_with(2, b).expect("join");
    t.advance(SETTLE);
    let d = describe_v4(&mut t);
    let op = |id: &str| {
        d.members
            .iter()
            .find(|m| m.member_id == id)
            .and_then(|m| m.operator.clone())
            .expect("v4 member")
    };
    let (oa, ob) = (op(&a.id), op(&b.id));
    assert_eq!(
        (oa.label.as_str(), oa.rack.as_str(), oa.capacity),
        ("host-1", "eu-1a", 1)
    );
    assert_eq!((ob.label.as_str(), ob.capacity), ("", 3));
    let g = d.operator.expect("v4 group");
    assert_eq!(g.config.churn_budget_permille, 100);
    assert!(g.reservations.is_empty());
    let racks = t.core.groups["g"].topics[0].preferred_racks.clone();
    assert_eq!(racks.as_deref().map(<[_]>::len), Some(2));
    // A version 3 answer has none of it.
    let v3 = match t.request(
        0,
        Request::DescribeGroup(DescribeGroupRequest {
            group: "g".into(),
            detection: true,
            page: Some(Page {
                after: None,
                limit: 0,
            }),
            summary: true,
            operator: false,
        }),
    ) {
        Response::DescribeGroup(d) => d,
        other => panic!("{other:?}"),
    };
    assert!(v3.operator.is_none() && v3.members.iter().all(|m| m.operator.is_none()));
    // A reservation (as a departure delay makes) is described.
    let now = t.now;
    let g = t.core.groups.get_mut("g").expect("g");
    g.held.push(crate::core::group::Held {
        until: now + Duration::from_secs(5),
        member: "host-2#1".into(),
        partitions: Vec::new(),
        reserved_for: Some("host-2".into()),
    });
    let d = describe_v4(&mut t);
    let res = &d.operator.expect("v4").reservations;
    assert_eq!(res.len(), 1);
    assert_eq!(
        (res[0].instance_id.as_str(), res[0].remaining_ms),
        ("host-2", 5_000)
    );
}

#[test]
fn a_placement_is_checked_against_the_subscription() {
    let mut t = TestContext::new();
    let cases = [
        // One rack short.
        vec![TopicRacks {
            topic: "orders".into(),
            racks: vec!["r".into()],
        }],
        // A topic the subscription does not name.
        vec![TopicRacks {
            topic: "other".into(),
            racks: vec!["r".into(), "r".into()],
        }],
        // Twice.
        vec![
            TopicRacks {
                topic: "orders".into(),
                racks: vec!["r".into(), "r".into()],
            },
            TopicRacks {
                topic: "orders".into(),
                racks: vec!["r".into(), "r".into()],
            },
        ],
    ];
    for topic_racks in cases {
        let mut req = t.join_request("g", &[("orders", 2)]);
        req.placement = Some(Box::new(JoinPlacement {
            topic_racks,
            ..Default::default()
        }));
        let r = t.join_with(1, req).expect_err("refused");
        assert_eq!(error_code(&r), Some(ErrorCode::InvalidRequest));
    }
    assert!(t.core.groups.is_empty());
}

/// What a store made durable returns, every group snapshot through the durable store's
/// JSON.
fn durable_json(records: &[Record]) -> RestoredState {
    let records: Vec<Record> = records
        .iter()
        .cloned()
        .map(|r| match r {
            Record::Group(g) => {
                let mut json = Vec::new();
                snapshot_json::encode(&g, &mut json).expect("encodes");
                Record::Group(snapshot_json::decode(&json).expect("decodes"))
            }
            other => other,
        })
        .collect();
    let store = MemoryStore::new();
    store.write(&records).expect("written");
    store.load().expect("loaded")
}

#[test]
fn a_drained_static_instance_stays_drained_in_its_next_incarnation() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.instance_id = Some("host-a".into());
    let mut a = t.join_with(1, req).expect("join");
    let mut b = t.join(2, "g", &[("orders", 4)]);
    settle(&mut t, &mut [&mut a, &mut b]);
    assert_eq!(
        drained(t.request(9, drain_req(&a.id, "", true))),
        [a.id.as_str()]
    );
    settle(&mut t, &mut [&mut a, &mut b]);
    assert_eq!(count(&t.owned(&a)), 0);
    // The process restarts: a new incarnation of the instance replaces the member.
    let mut req = t.join_request("g", &[("orders", 4)]);
    req.instance_id = Some("host-a".into());
    let mut a2 = t.join_with(3, req).expect("rejoin");
    assert_ne!(a2.id, a.id);
    settle(&mut t, &mut [&mut a2, &mut b]);
    assert_eq!((count(&t.owned(&a2)), count(&t.owned(&b))), (0, 4));
    let d = describe_v4(&mut t);
    let m = d.members.iter().find(|m| m.member_id == a2.id).expect("a2");
    assert!(m.operator.as_ref().expect("v4").drained);
    // Undraining the new incarnation undrains the instance.
    assert_eq!(
        drained(t.request(9, drain_req(&a2.id, "", false))),
        [a2.id.as_str()]
    );
    settle(&mut t, &mut [&mut a2, &mut b]);
    assert_eq!((count(&t.owned(&a2)), count(&t.owned(&b))), (2, 2));
}

#[test]
fn placements_and_preferred_racks_survive_a_restart_and_old_snapshots_have_none() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 2)]);
    req.placement = Some(Box::new(JoinPlacement {
        label: "host-1".into(),
        rack: "eu-1a".into(),
        capacity: 3,
        topic_racks: vec![TopicRacks {
            topic: "orders".into(),
            racks: vec!["eu-1a".into(), String::new()],
        }],
    }));
    let a = t.join_with(1, req).expect("join");
    t.advance(SETTLE);
    let state = durable_json(&t.records);
    t.core = Coordinator::new(t.core.config().clone());
    t.core.restore(t.now, state);
    t.drain();
    let g = &t.core.groups["g"];
    let p = g.members.get(&a.id).and_then(|m| m.about.placement.clone());
    let p = p.expect("placement restored");
    assert_eq!((&*p.label, &*p.rack, p.capacity), ("host-1", "eu-1a", 3));
    let racks = g.topics[0]
        .preferred_racks
        .as_deref()
        .expect("racks restored");
    assert_eq!(
        racks.iter().map(|r| &**r).collect::<Vec<_>>(),
        ["eu-1a", ""]
    );
    // A snapshot written before operators could has nothing of it.
    let old = br#"{"group":"g","generation":3,"topics":[["orders",2]],"members":[]}"#;
    let snapshot = snapshot_json::decode(old).expect("an old snapshot decodes");
    assert_eq!(snapshot.operator, None);
    // And a group nobody steered writes none.
    let mut json = Vec::new();
    snapshot_json::encode(&snapshot, &mut json).expect("encodes");
    assert!(!String::from_utf8(json).expect("utf-8").contains("operator"));
}

#[test]
fn a_rejoin_under_a_drained_label_drains_the_member() {
    let mut t = TestContext::new();
    let mut a = join_labelled(&mut t, 1, "host-1");
    let mut b = join_labelled(&mut t, 2, "host-2");
    settle(&mut t, &mut [&mut a, &mut b]);
    assert!(drained(t.request(9, drain_req("", "host-9", true))).is_empty());
    // a rejoins (its connection moved) declaring that it now runs on host-9.
    let mut req = t.join_request("g", &[("orders", 12)]);
    req.member_id = Some(a.id.clone());
    req.placement = Some(Box::new(JoinPlacement {
        label: "host-9".into(),
        ..Default::default()
    }));
    let again = t.join_with(3, req).expect("rejoin");
    assert_eq!(again.id, a.id);
    a.conn = 3;
    settle(&mut t, &mut [&mut a, &mut b]);
    assert_eq!((count(&t.owned(&a)), count(&t.owned(&b))), (0, 12));
}

#[test]
fn setting_the_defaults_on_a_group_that_does_not_exist_creates_nothing() {
    let mut t = TestContext::new();
    let r = alter(
        &mut t,
        AlterGroupConfigRequest {
            group: "g".into(),
            max_revoking: Some(0),
            ..Default::default()
        },
    );
    assert!(matches!(r, Response::AlterGroupConfig(_)), "{r:?}");
    assert!(t.core.groups.is_empty());
    assert!(t.records.is_empty(), "nothing written: {:?}", t.records);
}

/// A suspect member's new share goes to the members that take grants instead: never to
/// a drained member, which is given nothing (the suspect keeps it until it recovers).
#[test]
fn a_suspects_share_is_not_handed_to_a_drained_member() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 12)]);
    let mut b = t.join(2, "g", &[("orders", 12)]);
    settle(&mut t, &mut [&mut a, &mut b]);
    drained(t.request(9, drain_req(&a.id, "", true)));
    settle(&mut t, &mut [&mut a, &mut b]);
    assert_eq!((count(&t.owned(&a)), count(&t.owned(&b))), (0, 12));
    // c joins and falls silent past its suspicion threshold; a and b beat on.
    let c = t.join(3, "g", &[("orders", 12)]);
    let until = t.now + SESSION.mul_f64(0.7);
    while t.now < until {
        t.advance(Duration::from_millis(200));
        t.beat(&mut a);
        t.beat(&mut b);
    }
    // b leaves: its partitions are c's target, and c is suspect.
    t.leave(&b);
    for _ in 0..3 {
        t.advance(Duration::from_millis(100));
        t.beat(&mut a);
    }
    t.assert_exclusive("g");
    assert_eq!(
        count(&t.owned(&a)),
        0,
        "the drained member was given the suspect's share"
    );
    assert!(t.expelled(&c).is_none(), "c is still a member");
}

/// Offsets retention expires an empty group's offsets, but not its operator's settings
/// or drained labels: the group stays, without offsets, durably.
#[test]
fn offsets_retention_keeps_a_configured_group() {
    let mut t = TestContext::new();
    let a = t.join(1, "g", &[("orders", 4)]);
    t.commit(&a, "orders", 0, 7);
    let set = AlterGroupConfigRequest {
        group: "g".into(),
        max_revoking: Some(2),
        ..Default::default()
    };
    assert!(error_code(&t.request(9, Request::AlterGroupConfig(set))).is_none());
    drained(t.request(9, drain_req("", "host-1", true)));
    t.leave(&a);
    t.advance(SETTLE);
    let now = t.now;
    assert!(t.core.remove_offsets(now, "g", Duration::ZERO));
    t.drain();
    let d = describe_v4(&mut t);
    let op = d.operator.expect("v4");
    assert_eq!(op.config.max_revoking, 2);
    assert_eq!(op.drained_labels, ["host-1"]);
    // Durably: the records rebuild it, with no offsets.
    let store = MemoryStore::new();
    store.write(&t.records).expect("memory store");
    let state = store.load().expect("memory store");
    assert!(
        state.offsets.iter().all(|o| o.group != "g"),
        "offsets expired"
    );
    let g = state
        .groups
        .iter()
        .find(|g| g.group == "g")
        .expect("group kept");
    let op = g.operator.as_ref().expect("operator state recorded");
    assert_eq!(op.drained_labels, ["host-1"]);
}

/// A drain is one deliberate act: its rebalance starts at the next timer, not after the
/// coalescing window that joins and departures wait (with acknowledgements sent at once,
/// that window would be most of the drain's time).
#[test]
fn a_drain_rebalances_without_waiting_for_the_coalescing_window() {
    let mut t = TestContext::new();
    let mut a = t.join(1, "g", &[("orders", 12)]);
    let mut b = t.join(2, "g", &[("orders", 12)]);
    settle(&mut t, &mut [&mut a, &mut b]);
    let window = t.core.config().rebalance_coalesce;
    assert!(window > Duration::ZERO);
    let generation = |t: &TestContext| {
        t.events
            .iter()
            .filter_map(|e| match e {
                Event::RebalanceStarted { generation, .. } => Some(*generation),
                _ => None,
            })
            .max()
    };
    let before = generation(&t);
    drained(t.request(9, drain_req(&b.id, "", true)));
    t.advance(Duration::ZERO);
    assert!(generation(&t) > before, "the drain's rebalance waited");
    assert_eq!(partitions(&t.revoking(&b)).len(), 6);
}

/// A static instance's new process that declares a drained label is drained from its
/// join: it takes over what the old process owned, and nothing of the old process's
/// target that was still on its way (here, partitions a drained member releases later).
#[test]
fn a_replacement_under_a_drained_label_is_granted_nothing_new() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 12)]);
    req.instance_id = Some("host-a".into());
    let mut a = t.join_with(1, req).expect("join");
    let mut b = t.join(2, "g", &[("orders", 12)]);
    let mut c = t.join(3, "g", &[("orders", 12)]);
    settle(&mut t, &mut [&mut a, &mut b, &mut c]);
    let a0 = partitions(&t.owned(&a));
    assert_eq!(a0.len(), 4);
    assert!(drained(t.request(9, drain_req("", "h1", true))).is_empty());
    // c is drained: its partitions are a's and b's target, asked of c, not yet released.
    drained(t.request(9, drain_req(&c.id, "", true)));
    t.advance(SETTLE);
    assert_eq!(partitions(&t.revoking(&c)).len(), 4);
    // A new process of host-a, labelled h1, replaces a; then c releases.
    let mut req = t.join_request("g", &[("orders", 12)]);
    req.instance_id = Some("host-a".into());
    req.placement = Some(Box::new(JoinPlacement {
        label: "h1".into(),
        ..Default::default()
    }));
    let mut a2 = t.join_with(4, req).expect("replacement");
    assert_ne!(a2.id, a.id);
    t.ack_all(&mut c);
    t.advance(Duration::ZERO);
    t.assert_exclusive("g");
    let owned = partitions(&t.owned(&a2));
    assert!(
        owned.iter().all(|p| a0.contains(p)),
        "the drained replacement was granted {owned:?}, beyond the old process's {a0:?}"
    );
    // The old process's partitions are held for its lease (a session), then move on.
    for _ in 0..8 {
        settle(&mut t, &mut [&mut a2, &mut b, &mut c]);
    }
    t.assert_exclusive("g");
    assert_eq!(
        (
            count(&t.owned(&a2)),
            count(&t.owned(&b)),
            count(&t.owned(&c))
        ),
        (0, 12, 0)
    );
    let d = describe_v4(&mut t);
    let m = d.members.iter().find(|m| m.member_id == a2.id).expect("a2");
    assert!(m.operator.as_ref().expect("v4").drained);
}

/// A static instance whose process went away keeps its partitions reserved (departure
/// delay); a new process of it that declares a drained label takes none of them back:
/// the reservation ends and the others are given them.
#[test]
fn an_instance_back_under_a_drained_label_takes_no_reservation_back() {
    let mut t = TestContext::new();
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.instance_id = Some("host-a".into());
    let mut a = t.join_with(1, req).expect("join");
    let mut b = t.join(2, "g", &[("orders", 6)]);
    settle(&mut t, &mut [&mut a, &mut b]);
    assert_eq!(count(&t.owned(&a)), 3);
    t.core.groups.get_mut("g").expect("group").config = GroupConfig {
        departure_delay_ms: 60_000,
        ..GroupConfig::default()
    };
    assert!(drained(t.request(9, drain_req("", "h1", true))).is_empty());
    // a falls silent: its session runs out, and its partitions are reserved.
    let until = t.now + SESSION + Duration::from_secs(1);
    while t.now < until {
        t.advance(Duration::from_millis(500));
        t.ack_all(&mut b);
    }
    assert!(t.expelled(&a).is_some());
    assert_eq!(t.core.groups["g"].partitions_reserved(), 3);
    // A new process of host-a, labelled h1, comes back within the delay.
    let mut req = t.join_request("g", &[("orders", 6)]);
    req.instance_id = Some("host-a".into());
    req.placement = Some(Box::new(JoinPlacement {
        label: "h1".into(),
        ..Default::default()
    }));
    let mut a2 = t.join_with(3, req).expect("back");
    assert_eq!(
        count(&t.owned(&a2)),
        0,
        "the drained process took its reservation back"
    );
    settle(&mut t, &mut [&mut a2, &mut b]);
    t.assert_exclusive("g");
    assert_eq!(t.core.groups["g"].partitions_reserved(), 0);
    assert_eq!((count(&t.owned(&a2)), count(&t.owned(&b))), (0, 6));
}
