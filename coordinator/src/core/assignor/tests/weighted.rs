//! Capacities, racks and loads: the targets of each mode by example, and the invariants
//! (each partition once, only to subscribers, excluded members get nothing, determinism,
//! the churn budget, and the old output when nothing is declared) by proptest.

use proptest::prelude::*;

use super::super::*;
use super::{arb_case, legacy, tp, Case};

/// A group with everything the assignors can be told, with owned storage.
#[derive(Debug, Clone)]
struct Fleet {
    topics: Vec<u32>,
    subs: Vec<Vec<u32>>,
    owned: Vec<Vec<TopicPartition>>,
    caps: Vec<u32>,
    racks: Vec<u32>,
    excluded: Vec<bool>,
    prefs: Vec<Vec<u32>>,
    loads: Vec<Vec<f64>>,
    policy: Policy,
}

impl Fleet {
    /// `n` members subscribing to every topic, owning nothing, declaring nothing.
    fn uniform(topics: &[u32], n: usize) -> Self {
        Self::from_case(&Case::uniform(topics, n))
    }

    fn from_case(case: &Case) -> Self {
        let n = case.members.len();
        Self {
            topics: case.topics.clone(),
            subs: case
                .members
                .iter()
                .map(|m| m.subscription.clone())
                .collect(),
            owned: case.members.iter().map(|m| m.owned.clone()).collect(),
            caps: vec![1; n],
            racks: vec![NO_RACK; n],
            excluded: vec![false; n],
            prefs: Vec::new(),
            loads: Vec::new(),
            policy: Policy::default(),
        }
    }

    fn with_input<R>(&self, f: impl FnOnce(&AssignmentInput<'_>) -> R) -> R {
        let ids: Vec<String> = (0..self.subs.len()).map(|i| format!("m{i:06}")).collect();
        let members: Vec<AssignorMember<'_>> = (0..self.subs.len())
            .map(|m| AssignorMember {
                excluded: self.excluded[m],
                capacity: self.caps[m],
                rack: self.racks[m],
                ..AssignorMember::new(&ids[m], &self.subs[m], &self.owned[m])
            })
            .collect();
        let prefs: Vec<&[u32]> = self.prefs.iter().map(Vec::as_slice).collect();
        let loads: Vec<&[f64]> = self.loads.iter().map(Vec::as_slice).collect();
        f(&AssignmentInput {
            preferred_racks: &prefs,
            loads: &loads,
            policy: self.policy,
            ..AssignmentInput::new(&self.topics, &members)
        })
    }

    fn run(&self, assignor: &dyn Assignor) -> Vec<Vec<TopicPartition>> {
        self.with_input(|input| assignor.assign(input))
    }

    fn imbalance(&self) -> f64 {
        self.with_input(imbalance)
    }

    fn adopt(&self, out: &[Vec<TopicPartition>]) -> Self {
        Self {
            owned: out.to_vec(),
            ..self.clone()
        }
    }

    fn remove(mut self, members: std::ops::Range<usize>) -> Self {
        self.subs.drain(members.clone());
        self.owned.drain(members.clone());
        self.caps.drain(members.clone());
        self.racks.drain(members.clone());
        self.excluded.drain(members);
        self
    }

    /// The group as the plain tests see it, an excluded member subscribing to nothing
    /// and owning nothing.
    fn as_case(&self) -> Case {
        (0..self.subs.len()).fold(Case::new(&self.topics), |c, m| {
            if self.excluded[m] {
                c.member(&[], &[])
            } else {
                c.member(&self.subs[m], &self.owned[m])
            }
        })
    }

    /// Valid, and excluded members get nothing.
    fn check(&self, out: &[Vec<TopicPartition>]) {
        self.as_case().check(out);
        for (m, got) in out.iter().enumerate() {
            assert!(
                !self.excluded[m] || got.is_empty(),
                "excluded {m} got {got:?}"
            );
        }
    }

    /// Partitions validly owned by a member that is not excluded and given to another.
    fn moves(&self, out: &[Vec<TopicPartition>]) -> usize {
        let case = self.as_case();
        case.valid_owned()
            .iter()
            .zip(out)
            .enumerate()
            .filter(|(m, _)| !self.excluded[*m])
            .map(|(_, (owned, got))| {
                owned
                    .iter()
                    .filter(|p| got.binary_search(p).is_err())
                    .count()
            })
            .sum()
    }

    fn weight(&self, p: TopicPartition) -> f64 {
        self.loads
            .get(p.topic as usize)
            .and_then(|l| l.get(p.partition as usize))
            .copied()
            .unwrap_or(1.0)
    }

    /// Each member's load per unit of capacity.
    fn per_capacity(&self, out: &[Vec<TopicPartition>]) -> Vec<f64> {
        out.iter()
            .zip(&self.caps)
            .map(|(got, &c)| got.iter().map(|&p| self.weight(p)).sum::<f64>() / f64::from(c))
            .collect()
    }

    fn in_rack(&self, out: &[Vec<TopicPartition>]) -> usize {
        out.iter()
            .enumerate()
            .map(|(m, got)| {
                got.iter()
                    .filter(|p| self.prefs[p.topic as usize][p.partition as usize] == self.racks[m])
                    .count()
            })
            .sum()
    }
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// A deterministic stream of numbers in [0, 1).
fn lcg(seed: u64) -> impl FnMut() -> f64 {
    let mut x = seed;
    move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 11) as f64 / (1_u64 << 53) as f64
    }
}

// ---- racks ----

/// 3 racks of 4 members, `topics` topics whose partitions prefer the racks in turn.
fn three_racks(topics: &[u32]) -> Fleet {
    let mut fleet = Fleet::uniform(topics, 12);
    fleet.racks = (0..12).map(|m| m / 4).collect();
    fleet.prefs = topics
        .iter()
        .map(|&c| (0..c).map(|p| p % 3).collect())
        .collect();
    fleet
}

#[test]
fn racks_three_by_four_place_in_rack_and_even() {
    for topics in [&[120][..], &[30, 30, 30, 30], &[7, 50, 63]] {
        let fleet = three_racks(topics);
        let out = fleet.run(&Sticky);
        fleet.check(&out);
        let in_rack = fleet.in_rack(&out);
        assert!(
            in_rack * 100 >= 120 * 95,
            "{topics:?}: {in_rack} of 120 in rack"
        );
        assert!(
            super::spread(&out) <= 1,
            "{topics:?}: {:?}",
            super::loads(&out)
        );
        // Stable: nothing moves on a rerun.
        assert_eq!(fleet.adopt(&out).run(&Sticky), out, "{topics:?}");
    }
}

#[test]
fn losing_a_rack_moves_only_its_partitions_and_they_come_home() {
    let fleet = three_racks(&[120]);
    let settled = fleet.adopt(&fleet.run(&Sticky));
    let lost = settled.clone().remove(4..8);
    let out = lost.run(&Sticky);
    lost.check(&out);
    assert_eq!(lost.moves(&out), 0, "only the lost rack's partitions move");
    assert_eq!(super::loads(&out), vec![15; 8]);
    // Each remaining member took a share of the lost rack's 40.
    for (m, got) in out.iter().enumerate() {
        assert_eq!(
            got.iter().filter(|p| p.partition % 3 == 1).count(),
            5,
            "{m}"
        );
    }
    // The rack returns: its partitions go back to it, nothing else moves.
    let back = {
        let mut back = settled.clone();
        for m in 0..12 {
            let from = if m < 4 {
                m
            } else if m >= 8 {
                m - 4
            } else {
                usize::MAX
            };
            back.owned[m] = if from == usize::MAX {
                Vec::new()
            } else {
                out[from].clone()
            };
        }
        back
    };
    let home = back.run(&Sticky);
    back.check(&home);
    assert_eq!(back.in_rack(&home), 120);
    assert_eq!(back.moves(&home), 40);
}

#[test]
fn declaring_racks_brings_partitions_home() {
    let plain = Fleet::uniform(&[120], 12);
    let settled = plain.adopt(&plain.run(&Sticky));
    let fleet = Fleet {
        owned: settled.owned,
        ..three_racks(&[120])
    };
    let out = fleet.run(&Sticky);
    fleet.check(&out);
    assert_eq!(fleet.in_rack(&out), 120);
    assert!(super::spread(&out) <= 1);
}

#[test]
fn racks_overflow_spreads_over_the_others_by_capacity() {
    // Every partition prefers rack 0, which has room for a quarter of them: the rest
    // spread over racks 1 and 2 in proportion to their capacity (1 : 2).
    let mut fleet = Fleet::uniform(&[120], 4);
    fleet.racks = vec![0, 1, 2, 2];
    fleet.prefs = vec![vec![0; 120]];
    let out = fleet.run(&Sticky);
    fleet.check(&out);
    assert_eq!(super::loads(&out), vec![30; 4]);
    assert_eq!(fleet.in_rack(&out), 30);
}

#[test]
fn racks_without_preferences_spread_each_topic_over_racks() {
    let mut fleet = Fleet::uniform(&[30, 30], 6);
    fleet.racks = vec![0, 0, 1, 1, 2, 2];
    let out = fleet.run(&Sticky);
    fleet.check(&out);
    for topic in 0..2 {
        for rack in 0..3 {
            let held: usize = (0..6)
                .filter(|&m| fleet.racks[m] == rack)
                .map(|m| out[m].iter().filter(|p| p.topic == topic).count())
                .sum();
            assert_eq!(held, 10, "topic {topic} rack {rack}: {out:?}");
        }
    }
}

// ---- capacity ----

#[test]
fn capacities_one_two_four_by_count() {
    for (partitions, n) in [(700_u32, 3_usize), (1_000, 6), (97, 9)] {
        let mut fleet = Fleet::uniform(&[partitions], n);
        fleet.caps = (0..n).map(|m| [1, 2, 4][m % 3]).collect();
        let out = fleet.run(&Sticky);
        fleet.check(&out);
        let sum: u32 = fleet.caps.iter().sum();
        for (m, got) in out.iter().enumerate() {
            let exact = f64::from(partitions) * f64::from(fleet.caps[m]) / f64::from(sum);
            assert!(
                (got.len() as f64 - exact).abs() < 1.0,
                "{m}: {} vs {exact}",
                got.len()
            );
            if exact >= 20.0 {
                assert!((got.len() as f64 / exact - 1.0).abs() <= 0.05);
            }
        }
        // Also with racks and with different subscriptions (the greedy placement).
        let mut racked = fleet.clone();
        racked.racks = (0..n as u32).map(|m| m % 2).collect();
        let out = racked.run(&Sticky);
        racked.check(&out);
        for (m, got) in out.iter().enumerate() {
            let exact = f64::from(partitions) * f64::from(fleet.caps[m]) / f64::from(sum);
            assert!((got.len() as f64 - exact).abs() < 1.0, "racked {m}");
        }
    }
}

#[test]
fn capacities_one_two_four_by_load() {
    let mut next = lcg(7);
    let mut fleet = Fleet::uniform(&[1_000], 9);
    fleet.caps = (0..9).map(|m| [1, 2, 4][m % 3]).collect();
    fleet.loads = vec![(0..1_000).map(|_| 0.5 + next()).collect()];
    fleet.policy.balance = Balance::Load;
    let out = fleet.run(&Sticky);
    fleet.check(&out);
    let per = fleet.per_capacity(&out);
    let mean = per
        .iter()
        .zip(&fleet.caps)
        .map(|(l, &c)| l * f64::from(c))
        .sum::<f64>()
        / f64::from(fleet.caps.iter().sum::<u32>());
    for (m, l) in per.iter().enumerate() {
        assert!(
            (l / mean - 1.0).abs() <= 0.05,
            "{m}: {l} per capacity, mean {mean}"
        );
    }
    assert!(fleet.adopt(&out).imbalance() <= 0.05);
}

// ---- load ----

/// 1,000 partitions of Zipf loads (s = 1.1), shuffled over the partition numbers.
fn zipf(members: usize) -> Fleet {
    let mut loads: Vec<f64> = (1..=1_000).map(|k| 1.0 / f64::from(k).powf(1.1)).collect();
    let mut next = lcg(11);
    for i in (1..loads.len()).rev() {
        loads.swap(i, (next() * (i + 1) as f64) as usize);
    }
    let mut fleet = Fleet::uniform(&[1_000], members);
    fleet.loads = vec![loads];
    fleet.policy.churn_budget_permille = 100;
    fleet
}

#[test]
fn zipf_load_is_balanced_against_the_heaviest_partition() {
    let mut fleet = zipf(20);
    let counted = fleet.run(&Sticky);
    let count_max = max(&fleet.per_capacity(&counted));
    fleet.policy.balance = Balance::Load;
    let out = fleet.run(&Sticky);
    fleet.check(&out);
    let total: f64 = fleet.loads[0].iter().sum();
    let mean = total / 20.0;
    let heaviest = max(&fleet.loads[0]);
    let load_max = max(&fleet.per_capacity(&out));
    let bound = 1.10 * mean.max(heaviest);
    let figures = format!(
        "mean {mean:.4}, heaviest partition {heaviest:.4}, most loaded by load {load_max:.4} \
         ({:.2} x mean), by count {count_max:.4} ({:.2} x mean)",
        load_max / mean,
        count_max / mean
    );
    assert!(load_max <= bound, "{figures}");
    assert!(load_max <= count_max, "{figures}");
    assert!(fleet.adopt(&out).imbalance() <= 0.10, "{figures}");
    assert!(fleet.adopt(&counted).imbalance() > 0.10, "{figures}");
    // With 4 members the heaviest partition is below the mean: within 10 % of it.
    let mut few = zipf(4);
    few.policy.balance = Balance::Load;
    let out = few.run(&Sticky);
    let per = few.per_capacity(&out);
    assert!(
        max(&per) <= 1.10 * total / 4.0,
        "{per:?} against mean {}",
        total / 4.0
    );
    // From the count-balanced start, the budget's 100 moves improve it.
    let started = fleet.adopt(&counted);
    let improved = started.run(&Sticky);
    started.check(&improved);
    assert!(
        started.moves(&improved) <= 100,
        "{}",
        started.moves(&improved)
    );
    let improved_max = max(&started.per_capacity(&improved));
    assert!(improved_max < count_max, "{improved_max} from {figures}");
}

#[test]
fn a_load_change_moves_at_most_the_churn_budget() {
    let mut next = lcg(3);
    let mut fleet = Fleet::uniform(&[1_000], 20);
    fleet.loads = vec![(0..1_000).map(|_| 0.5 + next()).collect()];
    fleet.policy = Policy {
        balance: Balance::Load,
        churn_budget_permille: 50,
    };
    let settled = fleet.adopt(&fleet.run(&Sticky));
    assert_eq!(settled.run(&Sticky), settled.owned, "a settled group stays");
    // One member's partitions get three times heavier: moving enough of them to even
    // the load out would take more than the budget.
    let mut changed = settled.clone();
    for p in &settled.owned[7] {
        changed.loads[0][p.partition as usize] *= 3.0;
    }
    let before = changed.imbalance();
    let out = changed.run(&Sticky);
    changed.check(&out);
    let moved = changed.moves(&out);
    assert!(moved <= 50, "{moved} moved");
    assert!(moved > 0);
    let after = changed.adopt(&out).imbalance();
    let (max_before, max_after) = (
        max(&changed.per_capacity(&changed.owned)),
        max(&changed.per_capacity(&out)),
    );
    assert!(
        after < before && max_after < max_before,
        "imbalance {before} -> {after}, most loaded {max_before} -> {max_after}"
    );
    changed.policy.churn_budget_permille = 0;
    assert_eq!(
        changed.run(&Sticky),
        changed.owned,
        "a zero budget moves nothing"
    );
}

#[test]
fn load_balance_places_must_move_partitions_beyond_the_budget() {
    // A member leaves: its partitions move whatever the budget.
    let mut fleet = zipf(10);
    fleet.policy = Policy {
        balance: Balance::Load,
        churn_budget_permille: 0,
    };
    let settled = fleet.adopt(&fleet.run(&Sticky));
    let left = settled.remove(3..4);
    let out = left.run(&Sticky);
    left.check(&out);
    assert_eq!(left.moves(&out), 0);
    // Excluding one: its partitions move, nobody else's.
    let mut drained = fleet.adopt(&fleet.run(&Sticky));
    drained.excluded[2] = true;
    let out = drained.run(&Sticky);
    drained.check(&out);
    assert_eq!(drained.moves(&out), 0);
}

#[test]
fn imbalance_measures_against_what_is_achievable() {
    let mut fleet = Fleet::uniform(&[4], 2);
    fleet.loads = vec![vec![1.0, 1.0, 1.0, 1.0]];
    fleet.owned = vec![vec![tp(0, 0), tp(0, 1)], vec![tp(0, 2), tp(0, 3)]];
    assert_eq!(fleet.imbalance(), 0.0);
    fleet.owned = vec![vec![tp(0, 0), tp(0, 1), tp(0, 2)], vec![tp(0, 3)]];
    assert!((fleet.imbalance() - 0.5).abs() < 1e-12);
    // One partition carries 10 of 13: nothing does better than it alone.
    fleet.loads = vec![vec![10.0, 1.0, 1.0, 1.0]];
    fleet.owned = vec![vec![tp(0, 0)], vec![tp(0, 1), tp(0, 2), tp(0, 3)]];
    assert_eq!(fleet.imbalance(), 0.0);
    // Capacity 1 : 3, with counts as loads (no load reported).
    fleet.loads.clear();
    fleet.caps = vec![1, 3];
    assert_eq!(fleet.imbalance(), 0.0);
    fleet.owned = vec![vec![tp(0, 0), tp(0, 1)], vec![tp(0, 2), tp(0, 3)]];
    assert!((fleet.imbalance() - 1.0).abs() < 1e-12);
    assert_eq!(Fleet::uniform(&[4], 0).imbalance(), 0.0);
}

// ---- nothing declared: the old output ----

proptest! {
    #[test]
    fn equal_capacities_and_undeclared_modes_give_the_old_output(
        case in arb_case(false),
        capacity in 1_u32..6,
        load_policy in any::<bool>(),
    ) {
        let old = case.run(&Sticky);
        let mut fleet = Fleet::from_case(&case);
        fleet.caps.fill(capacity);
        // Preferred racks matter only once members have racks.
        fleet.prefs = case.topics.iter().map(|&c| vec![0; c as usize]).collect();
        if load_policy {
            fleet.policy.balance = Balance::Load;
            fleet.loads = vec![Vec::new(); case.topics.len()];
        }
        prop_assert_eq!(fleet.run(&Sticky), old.clone());
        // The uniform path against the code it replaced.
        let subscriptions = case.with_input(Subscriptions::new);
        if subscriptions.members() > 0 && subscriptions.is_uniform() {
            let legacy = case.with_input(|input| {
                legacy::assign_uniform(input, Subscriptions::new(input).of(0))
            });
            prop_assert_eq!(old, legacy);
        }
    }

    #[test]
    fn uniform_old_path_matches_on_uniform_groups(case in arb_case(true)) {
        let legacy = case.with_input(|input| {
            let subscriptions = Subscriptions::new(input);
            if subscriptions.members() == 0 {
                Vec::new()
            } else {
                legacy::assign_uniform(input, subscriptions.of(0))
            }
        });
        prop_assert_eq!(case.run(&Sticky), legacy);
    }
}

// ---- invariants with everything declared ----

/// Random groups with capacities, racks, preferences, loads (some unusable), excluded
/// members and either balance.
fn arb_fleet(uniform: bool) -> impl Strategy<Value = Fleet> {
    (arb_case(uniform), any::<u64>(), 0_u16..=1000, any::<bool>()).prop_map(
        |(case, seed, budget, load)| {
            let mut next = lcg(seed);
            let mut fleet = Fleet::from_case(&case);
            let n = fleet.subs.len();
            let pick = |next: &mut dyn FnMut() -> f64, k: u32| (next() * f64::from(k)) as u32;
            fleet.caps = (0..n).map(|_| 1 + pick(&mut next, 4)).collect();
            fleet.racks = (0..n)
                .map(|_| match pick(&mut next, 4) {
                    3 => NO_RACK,
                    r => r,
                })
                .collect();
            fleet.excluded = (0..n).map(|_| pick(&mut next, 5) == 0).collect();
            fleet.prefs = fleet
                .topics
                .iter()
                .map(|&c| {
                    (0..c + pick(&mut next, 2))
                        .map(|_| match pick(&mut next, 5) {
                            4 => NO_RACK,
                            r => r,
                        })
                        .collect()
                })
                .collect();
            fleet.loads = fleet
                .topics
                .iter()
                .map(|&c| {
                    (0..pick(&mut next, c + 1))
                        .map(|_| match pick(&mut next, 10) {
                            0 => f64::NAN,
                            1 => -1.0,
                            2 => 0.0,
                            _ => next() * 100.0,
                        })
                        .collect()
                })
                .collect();
            fleet.policy = Policy {
                balance: if load { Balance::Load } else { Balance::Count },
                churn_budget_permille: budget,
            };
            fleet
        },
    )
}

proptest! {
    #[test]
    fn every_mode_assigns_each_partition_once_deterministically(fleet in arb_fleet(false)) {
        for kind in AssignorKind::ALL {
            let assignor = kind.build();
            let out = fleet.run(&*assignor);
            fleet.check(&out);
            prop_assert_eq!(&out, &fleet.run(&*assignor));
        }
    }

    #[test]
    fn load_balance_respects_the_churn_budget(fleet in arb_fleet(false)) {
        let mut fleet = fleet;
        fleet.policy.balance = Balance::Load;
        let out = fleet.run(&Sticky);
        fleet.check(&out);
        let partitions: u32 = (0..fleet.topics.len() as u32)
            .filter(|&t| (0..fleet.subs.len()).any(|m| !fleet.excluded[m] && fleet.subs[m].contains(&t)))
            .map(|t| fleet.topics[t as usize])
            .sum();
        let budget = usize::from(fleet.policy.churn_budget_permille) * partitions as usize / 1000;
        // Without a usable report on a topic someone takes, load balance is count balance.
        let reported = fleet.loads.iter().enumerate().any(|(t, loads)| {
            let taken = (0..fleet.subs.len())
                .any(|m| !fleet.excluded[m] && fleet.subs[m].contains(&(t as u32)));
            taken && loads.iter().take(fleet.topics[t] as usize).any(|l| l.is_finite() && *l >= 0.0)
        });
        prop_assume!(reported);
        prop_assert!(fleet.moves(&out) <= budget, "{} > {}", fleet.moves(&out), budget);
    }

    #[test]
    fn uniform_counts_follow_capacity_within_one(fleet in arb_fleet(true)) {
        let mut fleet = fleet;
        fleet.policy.balance = Balance::Count;
        fleet.excluded.fill(false);
        let out = fleet.run(&Sticky);
        fleet.check(&out);
        let total: usize = out.iter().map(Vec::len).sum();
        let sum: u32 = fleet.caps.iter().sum();
        for (m, got) in out.iter().enumerate() {
            let exact = total as f64 * f64::from(fleet.caps[m]) / f64::from(sum);
            prop_assert!((got.len() as f64 - exact).abs() < 1.0, "{}: {} vs {}", m, got.len(), exact);
        }
        // Stable under its own output.
        prop_assert_eq!(fleet.adopt(&out).run(&Sticky), out);
    }
}
