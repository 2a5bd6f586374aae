//! Micro-benchmarks of the coordinator core.
//!
//! Each area has its own `criterion_group!`, all listed in `criterion_main!` at the end;
//! run one area with `cargo bench -p rollcall-coordinator --bench core -- <name filter>`.
//!
//! - `assignors`: computing a group's assignment at scale.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rollcall_coordinator::core::assignor::{
    AssignmentInput, Assignor, AssignorMember, Range, RoundRobin, Sticky, TopicPartition,
};

/// A group as the assignors see it, with owned storage.
struct Group {
    topics: Vec<u32>,
    ids: Vec<String>,
    subscriptions: Vec<Vec<u32>>,
    owned: Vec<Vec<TopicPartition>>,
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
        }
    }

    fn run<R>(&self, f: impl FnOnce(&AssignmentInput<'_>) -> R) -> R {
        let members: Vec<AssignorMember<'_>> = self
            .ids
            .iter()
            .zip(&self.subscriptions)
            .zip(&self.owned)
            .map(|((id, subscription), owned)| AssignorMember::new(id, subscription, owned))
            .collect();
        f(&AssignmentInput::new(&self.topics, &members))
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
        self
    }

    fn insert(mut self, index: usize, id: String) -> Self {
        self.ids.insert(index, id);
        self.subscriptions
            .insert(index, (0..self.topics.len() as u32).collect());
        self.owned.insert(index, Vec::new());
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

criterion_group!(assignors, assignor_benches);
criterion_main!(assignors);
