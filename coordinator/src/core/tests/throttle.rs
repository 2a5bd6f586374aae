//! Throttled moves: a group's caps on the partitions in revocation at once. The rest
//! wait with their owners and are asked as earlier ones are released; the waves always
//! move on, and a revocation's rebalance timeout runs from when it is asked.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rollcall_protocol::{HeartbeatRequest, Push, Request, Response};

use super::*;
use crate::core::GroupConfig;

const STEP: Duration = Duration::from_millis(100);

type Tp = (String, u32);

/// What the members were told, as their clients know it: the latest assignment and
/// revoke set pushed to each.
#[derive(Default)]
struct View {
    owned: BTreeMap<String, BTreeSet<Tp>>,
    generation: BTreeMap<String, u32>,
    revoke: BTreeMap<String, BTreeSet<Tp>>,
    /// Every partition ever named in a revoke push, by member.
    ever_revoked: BTreeMap<String, BTreeSet<Tp>>,
}

impl View {
    /// Reads (and forgets) what the core pushed since the last call.
    fn absorb(&mut self, t: &mut TestContext) {
        for (_, _, push) in t.pushes.drain(..) {
            match push {
                Push::Assignment(a) => {
                    self.owned.insert(
                        a.member_id.clone(),
                        flatten(&a.partitions).into_iter().collect(),
                    );
                    self.generation.insert(a.member_id, a.generation);
                }
                Push::Revoke(r) => {
                    let set: BTreeSet<Tp> = flatten(&r.partitions).into_iter().collect();
                    self.ever_revoked
                        .entry(r.member_id.clone())
                        .or_default()
                        .extend(set.iter().cloned());
                    self.revoke.insert(r.member_id, set);
                }
                _ => {}
            }
        }
    }

    /// What member `id` is asked to release and still owns.
    fn asked(&self, id: &str) -> Vec<Tp> {
        let (Some(revoke), Some(owned)) = (self.revoke.get(id), self.owned.get(id)) else {
            return Vec::new();
        };
        revoke.intersection(owned).cloned().collect()
    }

    /// Partitions in revocation, over the group, as the clients see it.
    fn in_revocation(&self) -> usize {
        self.revoke.keys().map(|id| self.asked(id).len()).sum()
    }
}

/// A heartbeat of `m` acknowledging `acks`, with the generation `view` knows.
fn beat(t: &mut TestContext, view: &mut View, m: &mut M, acks: &[Tp]) -> Response {
    m.seq += 1;
    m.progress += 1;
    let generation = view.generation.get(&m.id).copied().unwrap_or(0);
    let resp = t.request(
        m.conn,
        Request::Heartbeat(HeartbeatRequest {
            group: m.group.clone().into(),
            member_id: m.id.clone().into(),
            generation,
            sequence: m.seq,
            progress: m.progress,
            acked_revocations: unflatten(acks),
            loads: Vec::new(),
        }),
    );
    view.absorb(t);
    resp
}

/// Partitions in revocation in the core (asked and not yet released), over group `g`.
fn core_in_revocation(t: &TestContext, group: &str) -> (usize, usize) {
    let g = &t.core.groups[group];
    let total = g.members.values().map(|m| m.revoking_since.len()).sum();
    let most = g
        .members
        .values()
        .map(|m| m.revoking_since.len())
        .max()
        .unwrap_or(0);
    (total, most)
}

fn settled(t: &TestContext, group: &str) -> bool {
    let g = &t.core.groups[group];
    g.state() == rollcall_protocol::GroupState::Stable
        && g.members.values().all(|m| m.owned == m.target)
}

fn set_config(t: &mut TestContext, group: &str, config: GroupConfig) {
    t.core
        .groups
        .get_mut(group)
        .expect("the group exists")
        .config = config;
}

/// Joins `n` members to `group` subscribing to `spec`, on connections from `first_conn`.
fn join_many(t: &mut TestContext, first_conn: u64, n: usize, spec: &[(&str, u32)]) -> Vec<M> {
    (0..n)
        .map(|i| t.join(first_conn + i as u64, "g", spec))
        .collect()
}

/// Every member beats once per step, acknowledging what it is asked (those `slow`
/// holds on to are acknowledged only when `ack` says so), until the group settles or
/// `limit` passes. Returns the most partitions seen in revocation at once (core and
/// clients agree), the most for one member, and the time it took.
fn run_until_settled(
    t: &mut TestContext,
    view: &mut View,
    members: &mut [M],
    limit: Duration,
) -> (usize, usize, Duration) {
    let start = t.now;
    let (mut most, mut most_one) = (0, 0);
    loop {
        t.advance(STEP);
        view.absorb(t);
        for m in members.iter_mut() {
            let acks = view.asked(&m.id);
            let resp = beat(t, view, m, &acks);
            assert!(
                matches!(resp, Response::Heartbeat(_)),
                "{} refused: {resp:?}",
                m.id
            );
            let (total, one) = core_in_revocation(t, "g");
            most = most.max(total);
            most_one = most_one.max(one);
        }
        most = most.max(view.in_revocation());
        t.assert_exclusive("g");
        if settled(t, "g") {
            return (most, most_one, t.now - start);
        }
        assert!(t.now - start < limit, "not settled within {limit:?}");
    }
}

/// 50 members joining a 50-member group of 10,000 partitions with a cap of 200: never
/// more than 200 in revocation at once, and the group reaches its final assignment.
/// Without the cap, the same burst revokes thousands at once.
#[test]
fn a_join_burst_moves_in_waves_under_the_group_cap() {
    for cap in [200u32, 0] {
        let mut t = TestContext::new();
        let mut view = View::default();
        let spec = [("events", 10_000)];
        let mut members = join_many(&mut t, 1, 50, &spec);
        view.absorb(&mut t);
        run_until_settled(&mut t, &mut view, &mut members, Duration::from_secs(30));
        set_config(
            &mut t,
            "g",
            GroupConfig {
                max_revoking: cap,
                ..GroupConfig::default()
            },
        );
        members.extend(join_many(&mut t, 51, 50, &spec));
        view.absorb(&mut t);
        let (most, _, took) =
            run_until_settled(&mut t, &mut view, &mut members, Duration::from_secs(120));
        for m in &members {
            assert_eq!(view.owned[&m.id].len(), 100, "{} owns its share", m.id);
        }
        if cap > 0 {
            assert!(most <= cap as usize, "{most} in revocation at once");
            assert_eq!(most, cap as usize, "the cap is used");
            assert_eq!(t.core.groups["g"].revocations_waiting(), 0);
        } else {
            assert!(most > 1_000, "uncapped, {most} in revocation at once");
        }
        assert!(took < Duration::from_secs(60), "{took:?}");
    }
}

/// The per-member cap: no member is asked more than that many at once.
#[test]
fn the_per_member_cap_holds_for_every_member() {
    let mut t = TestContext::new();
    let mut view = View::default();
    let spec = [("events", 120)];
    let mut members = join_many(&mut t, 1, 4, &spec);
    view.absorb(&mut t);
    run_until_settled(&mut t, &mut view, &mut members, Duration::from_secs(30));
    set_config(
        &mut t,
        "g",
        GroupConfig {
            max_revoking_per_member: 3,
            ..GroupConfig::default()
        },
    );
    members.extend(join_many(&mut t, 11, 4, &spec));
    view.absorb(&mut t);
    let (_, most_one, _) =
        run_until_settled(&mut t, &mut view, &mut members, Duration::from_secs(60));
    assert_eq!(most_one, 3, "at most 3 per member, and the cap is used");
    for m in &members {
        assert_eq!(view.owned[&m.id].len(), 15);
    }
}

/// A member that must give everything up (its subscription moved away: as a drained
/// member does) under tight caps, and an owner expelled while it has revocations asked
/// and waiting: the group still reaches its target, every partition owned once.
#[test]
fn caps_still_converge_when_an_owner_gives_everything_up_or_is_expelled() {
    let mut t = TestContext::new();
    let mut view = View::default();
    let spec = [("a", 40), ("b", 4)];
    let mut members = join_many(&mut t, 1, 4, &spec);
    view.absorb(&mut t);
    run_until_settled(&mut t, &mut view, &mut members, Duration::from_secs(30));
    set_config(
        &mut t,
        "g",
        GroupConfig {
            max_revoking: 3,
            max_revoking_per_member: 2,
            ..GroupConfig::default()
        },
    );
    // Member 0 now wants only topic b: its share of a moves, two at a time at most.
    let mut req = t.join_request("g", &[("b", 4)]);
    req.member_id = Some(members[0].id.clone());
    t.join_with(members[0].conn, req).expect("rejoin accepted");
    // Two members join, and member 3 goes silent: expelled with revocations waiting.
    members.extend(join_many(&mut t, 11, 2, &spec));
    view.absorb(&mut t);
    let silent = members.remove(3);
    let start = t.now;
    let mut most = 0;
    loop {
        t.advance(STEP);
        view.absorb(&mut t);
        for m in members.iter_mut() {
            let acks = view.asked(&m.id);
            beat(&mut t, &mut view, m, &acks);
        }
        most = most.max(core_in_revocation(&t, "g").0);
        t.assert_exclusive("g");
        let gone = t.events.iter().any(
            |e| matches!(e, Event::MemberRemoved { member_id, .. } if *member_id == silent.id),
        );
        if settled(&t, "g") && gone {
            break;
        }
        assert!(
            t.now - start < Duration::from_secs(120),
            "not settled: waiting {}",
            t.core.groups["g"].revocations_waiting()
        );
    }
    assert!(most <= 3, "{most}");
    let owned: usize = members.iter().map(|m| view.owned[&m.id].len()).sum();
    assert_eq!(owned, 44, "every partition owned by a live member");
    assert!(view.owned[&members[0].id]
        .iter()
        .all(|(topic, _)| topic == "b"));
}

/// A revocation that waited for room is given its whole rebalance timeout from when it
/// is asked: a member releasing one partition at a time, each within the timeout, is
/// not expelled however long the whole takes.
#[test]
fn a_waiting_revocation_times_out_from_when_it_is_asked() {
    let mut t = TestContext::new();
    let mut view = View::default();
    let spec = [("events", 8)];
    let mut a = t.join(1, "g", &spec);
    view.absorb(&mut t);
    let mut members = vec![a.clone()];
    run_until_settled(&mut t, &mut view, &mut members, Duration::from_secs(30));
    set_config(
        &mut t,
        "g",
        GroupConfig {
            max_revoking: 1,
            ..GroupConfig::default()
        },
    );
    let mut b = t.join(2, "g", &spec);
    view.absorb(&mut t);
    // Four partitions move from a to b, one at a time, a taking 20 s over each (the
    // rebalance timeout is 30 s): 80 s in all.
    let mut released = 0;
    let mut asked_at = t.now;
    let mut last: Vec<Tp> = Vec::new();
    let start = t.now;
    while released < 4 {
        t.advance(Duration::from_secs(1));
        view.absorb(&mut t);
        let asked = view.asked(&a.id);
        assert!(asked.len() <= 1, "{asked:?}");
        if asked != last {
            asked_at = t.now;
            last = asked.clone();
        }
        let acks = if !asked.is_empty() && t.now - asked_at >= Duration::from_secs(20) {
            released += 1;
            asked
        } else {
            Vec::new()
        };
        beat(&mut t, &mut view, &mut a, &acks);
        beat(&mut t, &mut view, &mut b, &[]);
        let expelled = t
            .events
            .iter()
            .any(|e| matches!(e, Event::MemberRemoved { member_id, .. } if *member_id == a.id));
        assert!(!expelled, "a expelled after {:?}", t.now - start);
        assert!(t.now - start < Duration::from_secs(200));
    }
    assert!(t.now - start > REBALANCE * 2);
    members = vec![a, b];
    run_until_settled(&mut t, &mut view, &mut members, Duration::from_secs(30));
    assert_eq!(view.owned[&members[1].id].len(), 4);
}

/// A newer target that gives a waiting partition back cancels its revocation without
/// a word: the member was never asked for it.
#[test]
fn a_waiting_revocation_a_newer_target_gives_back_is_never_asked() {
    let mut t = TestContext::new();
    let mut view = View::default();
    let spec = [("events", 20)];
    let mut members = join_many(&mut t, 1, 2, &spec);
    view.absorb(&mut t);
    run_until_settled(&mut t, &mut view, &mut members, Duration::from_secs(30));
    set_config(
        &mut t,
        "g",
        GroupConfig {
            max_revoking: 1,
            ..GroupConfig::default()
        },
    );
    let c = t.join(3, "g", &spec);
    // The rebalance runs, one revocation is asked, the others wait; then c leaves
    // before anything was acknowledged.
    t.advance(Duration::from_secs(1));
    view.absorb(&mut t);
    assert_eq!(view.in_revocation(), 1);
    let waiting = t.core.groups["g"].revocations_waiting();
    assert!(waiting >= 4, "{waiting} waiting");
    t.leave(&c);
    run_until_settled(&mut t, &mut view, &mut members, Duration::from_secs(30));
    let ever: usize = view.ever_revoked.values().map(BTreeSet::len).sum();
    assert_eq!(
        ever, 1,
        "only the one asked was ever named: {:?}",
        view.ever_revoked
    );
    assert_eq!(t.core.groups["g"].revocations_waiting(), 0);
    for m in &members {
        assert_eq!(view.owned[&m.id].len(), 10);
    }
}
