//! The assignors' properties (every partition to exactly one subscriber, balance,
//! stickiness, determinism) checked by examples and by proptest over random groups.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

mod legacy;
mod weighted;

fn tp(topic: u32, partition: u32) -> TopicPartition {
    TopicPartition { topic, partition }
}

/// The given partitions of `topic`.
fn range_of(topic: u32, partitions: std::ops::Range<u32>) -> Vec<TopicPartition> {
    partitions.map(|p| tp(topic, p)).collect()
}

#[derive(Debug, Clone)]
struct Member {
    subscription: Vec<u32>,
    owned: Vec<TopicPartition>,
}

/// An assignor input with owned storage. Member ids are derived from positions, so
/// members stay sorted by id whatever is inserted or removed.
#[derive(Debug, Clone)]
struct Case {
    topics: Vec<u32>,
    members: Vec<Member>,
}

impl Case {
    fn new(topics: &[u32]) -> Self {
        Self {
            topics: topics.to_vec(),
            members: Vec::new(),
        }
    }

    fn member(mut self, subscription: &[u32], owned: &[TopicPartition]) -> Self {
        self.members.push(Member {
            subscription: subscription.to_vec(),
            owned: owned.to_vec(),
        });
        self
    }

    /// `n` members subscribing to every topic, owning nothing.
    fn uniform(topics: &[u32], n: usize) -> Self {
        let all: Vec<u32> = (0..topics.len() as u32).collect();
        (0..n).fold(Self::new(topics), |case, _| case.member(&all, &[]))
    }

    fn run(&self, assignor: &dyn Assignor) -> Vec<Vec<TopicPartition>> {
        self.with_input(|input| assignor.assign(input))
    }

    fn with_input<R>(&self, f: impl FnOnce(&AssignmentInput<'_>) -> R) -> R {
        let ids: Vec<String> = (0..self.members.len())
            .map(|i| format!("m{i:06}"))
            .collect();
        let members: Vec<AssignorMember<'_>> = self
            .members
            .iter()
            .zip(&ids)
            .map(|(m, id)| AssignorMember::new(id, &m.subscription, &m.owned))
            .collect();
        f(&AssignmentInput::new(&self.topics, &members))
    }

    /// The same group after `out` was adopted.
    fn adopt(&self, out: &[Vec<TopicPartition>]) -> Self {
        let mut next = self.clone();
        for (member, assigned) in next.members.iter_mut().zip(out) {
            member.owned.clone_from(assigned);
        }
        next
    }

    fn without(mut self, index: usize) -> Self {
        self.members.remove(index);
        self
    }

    fn with_newcomer(mut self, index: usize, subscription: &[u32]) -> Self {
        self.members.insert(
            index,
            Member {
                subscription: subscription.to_vec(),
                owned: Vec::new(),
            },
        );
        self
    }

    fn subscribes(&self, member: usize, topic: u32) -> bool {
        self.members[member].subscription.contains(&topic)
    }

    /// Each member's valid owned partitions: existing, subscribed, and not owned by an
    /// earlier member.
    fn valid_owned(&self) -> Vec<Vec<TopicPartition>> {
        let mut claimed = BTreeMap::new();
        let mut valid = vec![Vec::new(); self.members.len()];
        for (m, member) in self.members.iter().enumerate() {
            for &p in &member.owned {
                let exists = self
                    .topics
                    .get(p.topic as usize)
                    .is_some_and(|&count| p.partition < count);
                if exists && self.subscribes(m, p.topic) && !claimed.contains_key(&p) {
                    claimed.insert(p, m);
                    valid[m].push(p);
                }
            }
        }
        valid
    }

    /// Valid owned partitions that `out` gives to another member.
    fn moves(&self, out: &[Vec<TopicPartition>]) -> usize {
        self.valid_owned()
            .iter()
            .zip(out)
            .map(|(owned, got)| {
                owned
                    .iter()
                    .filter(|p| got.binary_search(p).is_err())
                    .count()
            })
            .sum()
    }

    /// With uniform subscriptions: the fewest moves any balanced assignment needs.
    fn fewest_moves(&self) -> usize {
        let n = self.members.len();
        if n == 0 {
            return 0;
        }
        let total: usize = self.members[0]
            .subscription
            .iter()
            .map(|&t| self.topics.get(t as usize).copied().unwrap_or(0) as usize)
            .sum();
        let mut owned: Vec<usize> = self.valid_owned().iter().map(Vec::len).collect();
        owned.sort_unstable_by(|a, b| b.cmp(a));
        owned
            .iter()
            .enumerate()
            .map(|(i, &c)| c.saturating_sub(total / n + usize::from(i < total % n)))
            .sum()
    }

    /// Asserts that `out` is a valid assignment: one ascending list per member, every
    /// partition of every subscribed topic exactly once, only to subscribers.
    fn check(&self, out: &[Vec<TopicPartition>]) {
        assert_eq!(out.len(), self.members.len());
        let mut seen = BTreeMap::new();
        for (m, list) in out.iter().enumerate() {
            assert!(
                list.windows(2).all(|w| w[0] < w[1]),
                "member {m}'s list is not ascending: {list:?}"
            );
            for &p in list {
                assert!(
                    self.subscribes(m, p.topic),
                    "{p:?} went to non-subscriber {m}"
                );
                assert!(
                    p.partition < self.topics[p.topic as usize],
                    "{p:?} does not exist"
                );
                if let Some(other) = seen.insert(p, m) {
                    panic!("{p:?} went to both {other} and {m}");
                }
            }
        }
        for (topic, &count) in (0..).zip(&self.topics) {
            if (0..self.members.len()).any(|m| self.subscribes(m, topic)) {
                for partition in 0..count {
                    assert!(
                        seen.contains_key(&tp(topic, partition)),
                        "{topic}/{partition} unassigned"
                    );
                }
            }
        }
    }

    /// Whether some member could pass a partition, directly or along a chain of members
    /// (each handing one of its partitions to a subscriber of that partition's topic),
    /// to a member with at least two fewer: then `out` is not as balanced as the
    /// subscriptions allow.
    fn can_rebalance(&self, out: &[Vec<TopicPartition>]) -> bool {
        let n = self.members.len();
        for start in 0..n {
            let mut reached = vec![false; n];
            reached[start] = true;
            let mut queue = vec![start];
            while let Some(a) = queue.pop() {
                if out[a].len() + 2 <= out[start].len() {
                    return true;
                }
                for p in &out[a] {
                    for (b, reached) in reached.iter_mut().enumerate() {
                        if !*reached && self.subscribes(b, p.topic) {
                            *reached = true;
                            queue.push(b);
                        }
                    }
                }
            }
        }
        false
    }
}

fn loads(out: &[Vec<TopicPartition>]) -> Vec<usize> {
    out.iter().map(Vec::len).collect()
}

fn spread(out: &[Vec<TopicPartition>]) -> usize {
    let loads = loads(out);
    loads.iter().max().unwrap_or(&0) - loads.iter().min().unwrap_or(&0)
}

/// Runs the general sticky algorithm whatever the subscriptions.
fn sticky_mixed(case: &Case) -> Vec<Vec<TopicPartition>> {
    case.with_input(|input| {
        let subscriptions = Subscriptions::new(input);
        sticky::assign_mixed(input, &subscriptions, &subscriptions.by_topic())
    })
}

// ---- the strategies' basics ----

#[test]
fn names_and_parse() {
    for kind in [
        AssignorKind::Sticky,
        AssignorKind::Range,
        AssignorKind::RoundRobin,
    ] {
        assert_eq!(AssignorKind::parse(kind.build().name()), Some(kind));
    }
    assert_eq!(
        AssignorKind::parse("roundrobin"),
        Some(AssignorKind::RoundRobin)
    );
    assert_eq!(AssignorKind::parse("cooperative"), None);
    assert_eq!(AssignorKind::default(), AssignorKind::Sticky);
}

#[test]
fn empty_group_gets_nothing() {
    for kind in [
        AssignorKind::Sticky,
        AssignorKind::Range,
        AssignorKind::RoundRobin,
    ] {
        assert!(Case::new(&[3, 4]).run(&*kind.build()).is_empty());
    }
}

#[test]
fn range_splits_each_topic_in_member_order() {
    let case = Case::new(&[7, 2])
        .member(&[0, 1], &[])
        .member(&[0], &[])
        .member(&[0, 1], &[]);
    let out = case.run(&Range);
    case.check(&out);
    assert_eq!(
        out,
        vec![
            vec![tp(0, 0), tp(0, 1), tp(0, 2), tp(1, 0)],
            vec![tp(0, 3), tp(0, 4)],
            vec![tp(0, 5), tp(0, 6), tp(1, 1)],
        ]
    );
}

#[test]
fn range_gives_empty_ranges_when_members_outnumber_partitions() {
    let case = Case::uniform(&[2], 4);
    assert_eq!(
        case.run(&Range),
        vec![vec![tp(0, 0)], vec![tp(0, 1)], vec![], vec![]]
    );
}

#[test]
fn round_robin_deals_in_turn_skipping_non_subscribers() {
    let case = Case::new(&[5, 3])
        .member(&[0, 1], &[])
        .member(&[0], &[])
        .member(&[1], &[]);
    let out = case.run(&RoundRobin);
    case.check(&out);
    assert_eq!(
        out,
        vec![
            vec![tp(0, 0), tp(0, 2), tp(0, 4), tp(1, 1)],
            vec![tp(0, 1), tp(0, 3)],
            vec![tp(1, 0), tp(1, 2)],
        ]
    );
}

#[test]
fn round_robin_balances_uniform_subscriptions_across_topics() {
    let case = Case::uniform(&[3, 3, 1], 4);
    let out = case.run(&RoundRobin);
    case.check(&out);
    assert_eq!(loads(&out), vec![2, 2, 2, 1]);
    assert_eq!(out[0], vec![tp(0, 0), tp(1, 1)]);
    assert_eq!(out[3], vec![tp(1, 0)]);
}

#[test]
fn every_strategy_skips_topics_without_partitions_or_subscribers() {
    let case = Case::new(&[0, 4, 6])
        .member(&[0, 1], &[])
        .member(&[0, 1, 7], &[]);
    for kind in [
        AssignorKind::Sticky,
        AssignorKind::Range,
        AssignorKind::RoundRobin,
    ] {
        let out = case.run(&*kind.build());
        case.check(&out);
        assert!(
            out.iter().flatten().all(|p| p.topic == 1),
            "{kind:?}: {out:?}"
        );
        assert_eq!(loads(&out), vec![2, 2], "{kind:?}");
    }
}

#[test]
fn unsorted_or_repeated_subscriptions_are_tolerated() {
    let tidy = Case::uniform(&[3, 2], 2);
    let messy = Case::new(&[3, 2])
        .member(&[1, 0, 1], &[])
        .member(&[0, 1], &[]);
    for kind in [
        AssignorKind::Sticky,
        AssignorKind::Range,
        AssignorKind::RoundRobin,
    ] {
        assert_eq!(
            tidy.run(&*kind.build()),
            messy.run(&*kind.build()),
            "{kind:?}"
        );
    }
}

// ---- sticky ----

#[test]
fn sticky_fresh_assignment_is_balanced() {
    let case = Case::uniform(&[4, 3], 3);
    let out = case.run(&Sticky);
    case.check(&out);
    assert_eq!(loads(&out), vec![3, 2, 2]);
}

#[test]
fn sticky_without_membership_change_moves_nothing() {
    let case = Case::uniform(&[10, 7, 3], 6);
    let first = case.run(&Sticky);
    let next = case.adopt(&first);
    assert_eq!(next.run(&Sticky), first);
}

#[test]
fn sticky_keeps_a_balanced_assignment_it_did_not_make() {
    let case = Case::new(&[6])
        .member(&[0], &[tp(0, 1), tp(0, 4)])
        .member(&[0], &[tp(0, 0), tp(0, 5)])
        .member(&[0], &[tp(0, 2), tp(0, 3)]);
    let out = case.run(&Sticky);
    assert_eq!(out, case.valid_owned());
}

#[test]
fn sticky_member_leaving_moves_only_its_partitions() {
    let case = Case::uniform(&[10, 10, 10], 10);
    let before = case.adopt(&case.run(&Sticky));
    let after = before.clone().without(3);
    let out = after.run(&Sticky);
    after.check(&out);
    assert_eq!(after.moves(&out), 0);
    for (member, got) in after.members.iter().zip(&out) {
        assert!(member.owned.iter().all(|p| got.contains(p)));
    }
    assert!(spread(&out) <= 1);
    // The leaver's three partitions went to three different members.
    let grown = out
        .iter()
        .zip(&after.members)
        .filter(|(got, m)| got.len() > m.owned.len())
        .count();
    assert_eq!(grown, 3);
}

#[test]
fn sticky_newcomer_takes_only_from_the_most_loaded() {
    let case = Case::uniform(&[10, 10, 10], 10).without(9).without(8);
    // 8 members: six with 4 partitions, two with 3.
    let before = case.adopt(&case.run(&Sticky));
    assert_eq!(loads(&before.run(&Sticky)), vec![4, 4, 4, 4, 4, 4, 3, 3]);
    let after = before.with_newcomer(4, &[0, 1, 2]);
    let out = after.run(&Sticky);
    after.check(&out);
    // 30 over 9: three members keep 4, six have 3; the newcomer gets 3, one from each of
    // three members that had 4.
    assert_eq!(out[4].len(), 3);
    assert!(spread(&out) <= 1);
    assert_eq!(after.moves(&out), 3);
    for (m, (member, got)) in after.members.iter().zip(&out).enumerate() {
        if m == 4 {
            continue;
        }
        let lost = member.owned.iter().filter(|p| !got.contains(p)).count();
        assert!(
            got.iter().all(|p| member.owned.contains(p)),
            "member {m} gained"
        );
        if member.owned.len() == 3 {
            assert_eq!(lost, 0, "member {m} was not among the most loaded");
        } else {
            assert!(lost <= 1);
        }
    }
}

#[test]
fn sticky_drops_invalid_owned_partitions() {
    // Topic 1 exists but nobody subscribes to it; topic 2 has no partitions any more.
    let case = Case::new(&[4, 3, 0])
        .member(&[0, 2], &[tp(0, 0), tp(0, 9), tp(1, 0), tp(2, 0), tp(5, 0)])
        .member(&[0, 2], &[tp(0, 0), tp(0, 1), tp(0, 2), tp(0, 3)]);
    let out = case.run(&Sticky);
    case.check(&out);
    // 0/0 stays with the first member that owns it; the second keeps two of its other
    // three, and its third one moves.
    assert_eq!(
        out,
        vec![vec![tp(0, 0), tp(0, 3)], vec![tp(0, 1), tp(0, 2)]]
    );
    assert!(out.iter().flatten().all(|p| p.topic == 0));
}

#[test]
fn sticky_drops_partitions_of_unsubscribed_topics_with_mixed_subscriptions() {
    let case = Case::new(&[2, 2])
        .member(&[0], &[tp(0, 0), tp(1, 0), tp(1, 1)])
        .member(&[1], &[tp(0, 0), tp(0, 1)]);
    let out = case.run(&Sticky);
    case.check(&out);
    assert_eq!(out, vec![range_of(0, 0..2), range_of(1, 0..2)]);
}

#[test]
fn sticky_balances_mixed_subscriptions_as_far_as_they_allow() {
    // Member 0 can only take topic 0, member 2 only topic 1.
    let case = Case::new(&[4, 2])
        .member(&[0], &[])
        .member(&[0, 1], &[])
        .member(&[1], &[]);
    let out = case.run(&Sticky);
    case.check(&out);
    assert_eq!(loads(&out), vec![2, 2, 2]);
    assert_eq!(out[2], range_of(1, 0..2));

    // Topic 1 has a single subscriber, which cannot share it.
    let case = Case::new(&[2, 9]).member(&[0], &[]).member(&[0, 1], &[]);
    let out = case.run(&Sticky);
    case.check(&out);
    assert_eq!(loads(&out), vec![2, 9]);
}

#[test]
fn sticky_moves_partitions_along_a_chain() {
    // Member 0 owns all of topic 0 and member 1 all of topic 1. Balance needs member 1
    // to hand topic 1 to member 2 and take half of topic 0 from member 0.
    let case = Case::new(&[6, 3])
        .member(&[0], &range_of(0, 0..6))
        .member(&[0, 1], &range_of(1, 0..3))
        .member(&[1], &[]);
    let out = case.run(&Sticky);
    case.check(&out);
    assert_eq!(
        out,
        vec![range_of(0, 0..3), range_of(0, 3..6), range_of(1, 0..3)]
    );
    assert_eq!(case.adopt(&out).run(&Sticky), out);
}

#[test]
fn sticky_mixed_subscriptions_move_few_partitions() {
    // Member 0 must shed three; member 2 can only take topics 0 and 2, which members 0
    // and 1 own, so member 1 gives one up and takes one of topic 1 instead: four moves
    // at least.
    let case = Case::new(&[2, 4, 3])
        .member(
            &[1, 2],
            &[tp(1, 0), tp(1, 1), tp(1, 2), tp(1, 3), tp(2, 0), tp(2, 1)],
        )
        .member(&[0, 1, 2], &[tp(0, 0), tp(0, 1), tp(2, 2)])
        .member(&[0, 2], &[]);
    let out = case.run(&Sticky);
    case.check(&out);
    assert_eq!(loads(&out), vec![3, 3, 3]);
    assert!(!case.can_rebalance(&out));
    assert_eq!(case.moves(&out), 4);
}

#[test]
fn sticky_members_without_subscriptions_get_nothing() {
    let case = Case::new(&[5]).member(&[], &[tp(0, 0)]).member(&[0], &[]);
    let out = case.run(&Sticky);
    case.check(&out);
    assert_eq!(out, vec![vec![], range_of(0, 0..5)]);
}

#[test]
fn sticky_large_group_leave_and_join() {
    let case = Case::uniform(&[1000; 10], 1000);
    let first = case.run(&Sticky);
    case.check(&first);
    assert_eq!(loads(&first), vec![10; 1000]);

    let left = case.adopt(&first).without(500);
    let out = left.run(&Sticky);
    left.check(&out);
    assert_eq!(left.moves(&out), 0);
    assert!(spread(&out) <= 1);

    let joined = case
        .adopt(&first)
        .with_newcomer(0, &(0..10).collect::<Vec<_>>());
    let out = joined.run(&Sticky);
    joined.check(&out);
    assert_eq!(out[0].len(), 9);
    assert_eq!(joined.moves(&out), 9);
}

#[test]
fn sticky_mixed_from_one_owner_sheds_its_surplus() {
    // Large and uneven enough for the cap: one member owns all 1,000 partitions, 199
    // others own nothing, and one of them skips a topic.
    let mut case = Case::uniform(&[100; 10], 200);
    case.members[7].subscription.pop();
    case.members[0].owned = (0..10).flat_map(|t| range_of(t, 0..100)).collect();
    let out = case.run(&Sticky);
    case.check(&out);
    assert!(spread(&out) <= 1);
    assert_eq!(out[0].len(), 5);
    assert!(out[0].iter().all(|p| case.members[0].owned.contains(p)));
    assert_eq!(case.moves(&out), 995);
    assert_eq!(case.adopt(&out).run(&Sticky), out);
}

#[test]
fn assignors_are_deterministic() {
    let case = Case::new(&[5, 7, 3])
        .member(&[0, 1], &[tp(0, 1), tp(1, 3)])
        .member(&[1, 2], &[tp(1, 3), tp(2, 0)])
        .member(&[0, 2], &[])
        .member(&[0, 1, 2], &[tp(0, 4), tp(1, 0), tp(1, 1), tp(1, 2)]);
    for kind in [
        AssignorKind::Sticky,
        AssignorKind::Range,
        AssignorKind::RoundRobin,
    ] {
        let assignor = kind.build();
        assert_eq!(case.run(&*assignor), case.run(&*assignor), "{kind:?}");
    }
}

/// The best any assignment of `case` can do, by trying them all: the smallest sum of
/// squared loads (the most balanced) and, among those, the fewest moves.
fn exhaustive_best(case: &Case) -> (usize, usize) {
    let n = case.members.len();
    let partitions: Vec<TopicPartition> = (0..)
        .zip(&case.topics)
        .flat_map(|(topic, &count)| (0..count).map(move |p| tp(topic, p)))
        .filter(|p| (0..n).any(|m| case.subscribes(m, p.topic)))
        .collect();
    let mut best = (usize::MAX, usize::MAX);
    let mut choice = vec![0; partitions.len()];
    loop {
        if partitions
            .iter()
            .zip(&choice)
            .all(|(p, &m)| case.subscribes(m, p.topic))
        {
            let mut out = vec![Vec::new(); n];
            for (&p, &m) in partitions.iter().zip(&choice) {
                out[m].push(p);
            }
            best = best.min((squares(&out), case.moves(&out)));
        }
        // Next choice, as a number in base n.
        let Some(i) = choice.iter().position(|&m| m + 1 < n) else {
            return best;
        };
        choice[i] += 1;
        choice[..i].fill(0);
    }
}

fn squares(out: &[Vec<TopicPartition>]) -> usize {
    out.iter().map(|l| l.len() * l.len()).sum()
}

#[test]
fn sticky_matches_exhaustive_search_on_small_mixed_groups() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    // Up to 3 topics of up to 3 partitions, 1 to 4 members; a fixed seed, so the test
    // always checks the same groups.
    let strategy =
        (prop::collection::vec(0_u32..4, 1..4), 1_usize..5).prop_flat_map(|(topics, n)| {
            let t = topics.len() as u32;
            let member = (
                prop::collection::btree_set(0..t, 0..=t as usize),
                prop::collection::btree_set((0..t, 0_u32..4), 0..5),
            );
            (Just(topics), prop::collection::vec(member, n))
        });
    let mut runner = TestRunner::deterministic();
    let mut checked = 0;
    while checked < 1000 {
        let (topics, members) = strategy.new_tree(&mut runner).unwrap().current();
        let case = members
            .into_iter()
            .fold(Case::new(&topics), |case, (subscription, owned)| {
                let subscription: Vec<u32> = subscription.into_iter().collect();
                let owned: Vec<_> = owned.into_iter().map(|(t, p)| tp(t, p)).collect();
                case.member(&subscription, &owned)
            });
        if case.topics.iter().sum::<u32>() > 8 {
            continue;
        }
        checked += 1;
        let out = case.run(&Sticky);
        case.check(&out);
        assert_eq!(
            (squares(&out), case.moves(&out)),
            exhaustive_best(&case),
            "{case:?} gave {out:?}"
        );
    }
}

// ---- properties ----

/// Random groups: up to 5 topics of up to 8 partitions, up to 7 members with random
/// subscriptions (the same for all if `uniform`) and random owned partitions, some of
/// them invalid.
fn arb_case(uniform: bool) -> impl Strategy<Value = Case> {
    (prop::collection::vec(0_u32..9, 1..6), 0_usize..8).prop_flat_map(move |(topics, n)| {
        let t = topics.len() as u32;
        let subscription = || prop::collection::btree_set(0..t + 1, 0..=t as usize + 1);
        let owned = prop::collection::btree_set((0..t + 1, 0_u32..10), 0..10);
        let shared = subscription();
        (
            Just(topics),
            shared,
            prop::collection::vec((subscription(), owned), n),
        )
            .prop_map(move |(topics, shared, members)| Case {
                topics,
                members: members
                    .into_iter()
                    .map(|(own, owned)| Member {
                        subscription: if uniform { &shared } else { &own }
                            .iter()
                            .copied()
                            .collect(),
                        owned: owned.into_iter().map(|(t, p)| tp(t, p)).collect(),
                    })
                    .collect(),
            })
    })
}

/// A uniform group with a stable sticky assignment, and a member index.
fn arb_settled() -> impl Strategy<Value = (Case, usize)> {
    (arb_case(true), any::<prop::sample::Index>()).prop_map(|(case, index)| {
        let settled = case.adopt(&case.run(&Sticky));
        let at = index.index(settled.members.len() + 1);
        (settled, at)
    })
}

proptest! {
    #[test]
    fn every_strategy_assigns_each_partition_once(case in arb_case(false)) {
        for kind in [AssignorKind::Sticky, AssignorKind::Range, AssignorKind::RoundRobin] {
            let assignor = kind.build();
            let out = case.run(&*assignor);
            case.check(&out);
            prop_assert_eq!(&out, &case.run(&*assignor));
        }
    }

    #[test]
    fn uniform_subscriptions_are_balanced(case in arb_case(true)) {
        prop_assert!(spread(&case.run(&Sticky)) <= 1);
        prop_assert!(spread(&case.run(&RoundRobin)) <= 1);
        let range = case.run(&Range);
        for topic in 0..case.topics.len() as u32 {
            let per_topic: Vec<Vec<_>> = range
                .iter()
                .map(|l| l.iter().filter(|p| p.topic == topic).copied().collect())
                .collect();
            prop_assert!(spread(&per_topic) <= 1);
        }
    }

    #[test]
    fn sticky_uniform_moves_the_fewest_partitions(case in arb_case(true)) {
        let out = case.run(&Sticky);
        prop_assert_eq!(case.moves(&out), case.fewest_moves());
        // A member owning no more than the smaller quota keeps everything it owns.
        let total: usize = out.iter().map(Vec::len).sum();
        let base = total / case.members.len().max(1);
        for (owned, got) in case.valid_owned().iter().zip(&out) {
            if owned.len() <= base {
                prop_assert!(owned.iter().all(|p| got.binary_search(p).is_ok()));
            }
        }
    }

    #[test]
    fn sticky_general_algorithm_is_optimal_on_uniform_groups(case in arb_case(true)) {
        let out = sticky_mixed(&case);
        case.check(&out);
        prop_assert!(spread(&out) <= 1);
        prop_assert_eq!(case.moves(&out), case.fewest_moves());
    }

    #[test]
    fn sticky_is_as_balanced_as_subscriptions_allow(case in arb_case(false)) {
        let out = case.run(&Sticky);
        prop_assert!(!case.can_rebalance(&out), "{:?}", out);
    }

    #[test]
    fn sticky_is_stable(case in arb_case(false)) {
        let out = case.run(&Sticky);
        prop_assert_eq!(case.adopt(&out).run(&Sticky), out);
    }

    #[test]
    fn sticky_leave_moves_nothing_else((settled, at) in arb_settled()) {
        if settled.members.is_empty() {
            return Ok(());
        }
        let at = at % settled.members.len();
        let after = settled.without(at);
        let out = after.run(&Sticky);
        after.check(&out);
        prop_assert_eq!(after.moves(&out), 0);
        prop_assert!(spread(&out) <= 1);
    }

    #[test]
    fn sticky_join_takes_from_the_most_loaded_only((settled, at) in arb_settled()) {
        let subscription = settled
            .members
            .first()
            .map(|m| m.subscription.clone())
            .unwrap_or_default();
        let after = settled.with_newcomer(at, &subscription);
        let out = after.run(&Sticky);
        after.check(&out);
        prop_assert!(spread(&out) <= 1);
        prop_assert_eq!(after.moves(&out), out[at].len());
        // Nobody but the newcomer gains, and whoever loses owned at least as many as
        // anyone who does not.
        let mut kept_all = 0;
        let mut losers = usize::MAX;
        for (m, (member, got)) in after.members.iter().zip(&out).enumerate() {
            if m != at {
                prop_assert!(got.iter().all(|p| member.owned.contains(p)), "member {} gained", m);
            }
            if member.owned.iter().all(|p| got.binary_search(p).is_ok()) {
                kept_all = kept_all.max(member.owned.len());
            } else {
                losers = losers.min(member.owned.len());
            }
        }
        prop_assert!(losers == usize::MAX || losers >= kept_all);
    }
}

/// An excluded (drained) member gets nothing, whatever it owned, from every assignor;
/// under the sticky assignor only its partitions move.
#[test]
fn excluded_members_get_nothing_and_sticky_moves_only_theirs() {
    let topics = [12u32];
    let sub = [0u32];
    let ids = ["a", "b", "c"];
    let owned: Vec<Vec<TopicPartition>> = (0..3u32)
        .map(|m| {
            (0..4u32)
                .map(|i| TopicPartition {
                    topic: 0,
                    partition: m * 4 + i,
                })
                .collect()
        })
        .collect();
    for kind in AssignorKind::ALL {
        let members: Vec<AssignorMember<'_>> = (0..3)
            .map(|m| AssignorMember {
                excluded: m == 1,
                ..AssignorMember::new(ids[m], &sub, &owned[m])
            })
            .collect();
        let out = kind
            .build()
            .assign(&AssignmentInput::new(&topics, &members));
        assert!(
            out[1].is_empty(),
            "{kind}: the excluded member got {:?}",
            out[1]
        );
        assert_eq!(out[0].len() + out[2].len(), 12, "{kind}");
        if kind == AssignorKind::Sticky {
            for m in [0, 2] {
                assert!(
                    owned[m].iter().all(|tp| out[m].contains(tp)),
                    "{kind}: member {m} lost a partition it owned: {:?}",
                    out[m]
                );
            }
        }
    }
}
