//! Micro-benchmarks of the coordinator core.
//!
//! Each area has its own `criterion_group!`, all listed in `criterion_main!` at the end;
//! run one area with `cargo bench -p rollcall-coordinator --bench core -- <name filter>`.
//!
//! - `assignors`: computing a group's assignment at scale, counts (the default) and the
//!   sticky assignor's capacity, rack and load modes.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rollcall_coordinator::core::assignor::{
    AssignmentInput, Assignor, AssignorMember, Policy, Range, RoundRobin, Sticky, TopicPartition,
};
use rollcall_coordinator::core::Balance;

/// A group as the assignors see it, with owned storage.
struct Group {
    topics: Vec<u32>,
    ids: Vec<String>,
    subscriptions: Vec<Vec<u32>>,
    owned: Vec<Vec<TopicPartition>>,
    capacities: Vec<u32>,
    racks: Vec<u32>,
    /// By topic: each partition's preferred rack (empty: none).
    preferred_racks: Vec<Vec<u32>>,
    /// By topic: each partition's load (empty: none reported).
    loads: Vec<Vec<f64>>,
    policy: Policy,
}

impl Group {
    /// `members` members subscribing to every one of `topics` topics of `partitions`
    /// partitions each, owning nothing yet.
    fn new(topics: u32, partitions: u32, members: usize) -> Self {
        Self {
            topics: vec![partitions; topics as usize],
            ids: (0..members).map(|i| format!("member-{i:06}")).collect(),
            subscriptions: vec![(0..topics).collect(); members],
            owned: vec![Vec::new(); members],
            capacities: vec![1; members],
            racks: vec![u32::MAX; members],
            preferred_racks: Vec::new(),
            loads: Vec::new(),
            policy: Policy::default(),
        }
    }

    /// Members in `racks` racks (by position), each partition preferring one in turn.
    fn with_racks(mut self, racks: u32) -> Self {
        self.racks = (0..self.ids.len() as u32).map(|m| m % racks).collect();
        self.preferred_racks = self
            .topics
            .iter()
            .map(|&count| (0..count).map(|p| p % racks).collect())
            .collect();
        self
    }

    /// Capacities 1, 2 and 4 in turn.
    fn with_capacities(mut self) -> Self {
        self.capacities = (0..self.ids.len()).map(|m| [1, 2, 4][m % 3]).collect();
        self
    }

    /// Zipf-distributed loads (s = 1.1) over each topic's partitions, load balance with
    /// a budget of a tenth of the partitions.
    fn with_zipf_loads(mut self) -> Self {
        self.loads = self
            .topics
            .iter()
            .map(|&count| (1..=count).map(|k| 1.0 / f64::from(k).powf(1.1)).collect())
            .collect();
        self.policy = Policy {
            balance: Balance::Load,
            churn_budget_permille: 100,
        };
        self
    }

    fn run<R>(&self, f: impl FnOnce(&AssignmentInput<'_>) -> R) -> R {
        let members: Vec<AssignorMember<'_>> = self
            .ids
            .iter()
            .zip(&self.subscriptions)
            .zip(&self.owned)
            .zip(self.capacities.iter().zip(&self.racks))
            .map(
                |(((id, subscription), owned), (&capacity, &rack))| AssignorMember {
                    capacity,
                    rack,
                    ..AssignorMember::new(id, subscription, owned)
                },
            )
            .collect();
        let preferred_racks: Vec<&[u32]> = self.preferred_racks.iter().map(Vec::as_slice).collect();
        let loads: Vec<&[f64]> = self.loads.iter().map(Vec::as_slice).collect();
        f(&AssignmentInput {
            preferred_racks: &preferred_racks,
            loads: &loads,
            policy: self.policy,
            ..AssignmentInput::new(&self.topics, &members)
        })
    }

    /// Every member takes what `assignor` gives it.
    fn settle(mut self, assignor: &dyn Assignor) -> Self {
        self.owned = self.run(|input| assignor.assign(input));
        self
    }

    fn remove(mut self, index: usize) -> Self {
        self.ids.remove(index);
        self.subscriptions.remove(index);
        self.owned.remove(index);
        self.capacities.remove(index);
        self.racks.remove(index);
        self
    }

    fn insert(mut self, index: usize, id: String) -> Self {
        self.ids.insert(index, id);
        self.subscriptions
            .insert(index, (0..self.topics.len() as u32).collect());
        self.owned.insert(index, Vec::new());
        self.capacities.insert(index, 1);
        self.racks.insert(index, u32::MAX);
        self
    }
}

fn bench_assign(c: &mut Criterion, name: &str, group: &Group, assignor: &dyn Assignor) {
    group.run(|input| {
        c.bench_function(name, |b| b.iter(|| assignor.assign(black_box(input))));
    });
}

fn assignor_benches(c: &mut Criterion) {
    // 10 topics of 1,000 partitions over 1,000 members, 10 each; then one member leaves.
    let settled = Group::new(10, 1_000, 1_000).settle(&Sticky);
    let after_leave = settled.remove(500);
    bench_assign(
        c,
        "sticky_1000_members_10000_partitions_after_leave",
        &after_leave,
        &Sticky,
    );

    // One member joins instead: it takes 9 partitions from 9 members.
    let after_join = Group::new(10, 1_000, 1_000)
        .settle(&Sticky)
        .insert(500, "member-000499-b".to_owned());
    bench_assign(
        c,
        "sticky_1000_members_10000_partitions_after_join",
        &after_join,
        &Sticky,
    );

    // The same leave with one member subscribing to 9 topics only, which takes the
    // algorithm for mixed subscriptions.
    let mut mixed = Group::new(10, 1_000, 1_000);
    mixed.subscriptions[0].pop();
    let mixed_after_leave = mixed.settle(&Sticky).remove(500);
    bench_assign(
        c,
        "sticky_mixed_1000_members_10000_partitions_after_leave",
        &mixed_after_leave,
        &Sticky,
    );

    // The worst start for that algorithm: one member owns everything.
    let mut from_one_owner = mixed_after_leave;
    let all: Vec<TopicPartition> = from_one_owner.owned.concat();
    from_one_owner.owned.iter_mut().for_each(Vec::clear);
    from_one_owner.owned[1] = all;
    from_one_owner.owned[1].sort_unstable();
    bench_assign(
        c,
        "sticky_mixed_1000_members_10000_partitions_from_one_owner",
        &from_one_owner,
        &Sticky,
    );

    bench_assign(
        c,
        "range_1000_members_10000_partitions",
        &after_leave,
        &Range,
    );
    bench_assign(
        c,
        "round_robin_1000_members_10000_partitions",
        &after_leave,
        &RoundRobin,
    );
}

/// The sticky assignor's modes beyond counts: capacities, racks, load.
fn assignor_mode_benches(c: &mut Criterion) {
    // Capacities 1 : 2 : 4, one member leaving a settled group.
    let capacities = Group::new(10, 1_000, 1_000)
        .with_capacities()
        .settle(&Sticky)
        .remove(500);
    bench_assign(
        c,
        "sticky_capacities_1000_members_10000_partitions_after_leave",
        &capacities,
        &Sticky,
    );

    // Three racks with preferred racks, one member leaving.
    let racks = Group::new(10, 1_000, 1_000)
        .with_racks(3)
        .settle(&Sticky)
        .remove(500);
    bench_assign(
        c,
        "sticky_racks_1000_members_10000_partitions_after_leave",
        &racks,
        &Sticky,
    );

    // Load balance of Zipf loads: from nothing (every partition must move), and after
    // a leave from a settled group (its partitions move, then improvements within the
    // budget).
    let fresh = Group::new(10, 1_000, 1_000).with_zipf_loads();
    bench_assign(
        c,
        "sticky_load_1000_members_10000_partitions_fresh",
        &fresh,
        &Sticky,
    );
    let load = fresh.settle(&Sticky).remove(500);
    bench_assign(
        c,
        "sticky_load_1000_members_10000_partitions_after_leave",
        &load,
        &Sticky,
    );
}

criterion_group!(assignors, assignor_benches, assignor_mode_benches);
criterion_main!(assignors);
