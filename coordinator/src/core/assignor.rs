//! Partition assignment strategies.
//!
//! The coordinator computes every assignment itself, through the [`Assignor`] trait.
//! Assignors are pure functions of their input: the same input gives the same output,
//! so a run can be replayed.

use std::fmt::Debug;

/// A partition of one of the group's topics. `topic` indexes the group's topic table,
/// whose entries never move, so a `TopicPartition` stays valid for the group's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Index into [`AssignmentInput::topics`].
    pub topic: u32,
    /// Partition number within the topic.
    pub partition: u32,
}

/// One member as the assignor sees it.
#[derive(Debug, Clone, Copy)]
pub struct AssignorMember<'a> {
    /// Member id; members arrive sorted by it.
    pub id: &'a str,
    /// Topics the member subscribes to (indexes into [`AssignmentInput::topics`]),
    /// ascending.
    pub subscription: &'a [u32],
    /// Partitions the member owns now, ascending. Sticky assignors keep as many of these
    /// as balance allows.
    pub owned: &'a [TopicPartition],
}

/// Everything an assignor needs.
#[derive(Debug, Clone, Copy)]
pub struct AssignmentInput<'a> {
    /// Partition count of each topic, by topic index. A topic no member subscribes to
    /// any more has count 0 and must receive no assignment.
    pub topics: &'a [u32],
    /// The members, sorted by id.
    pub members: &'a [AssignorMember<'a>],
}

/// Computes a target assignment.
pub trait Assignor: Debug + Send + Sync {
    /// The name shown by describe (`sticky`, `range`, `round-robin`).
    fn name(&self) -> &'static str;

    /// Returns one partition list per member, in the order of `input.members`, each
    /// ascending. Every partition of every subscribed topic goes to exactly one member
    /// that subscribes to its topic; no partition goes to two members.
    fn assign(&self, input: &AssignmentInput<'_>) -> Vec<Vec<TopicPartition>>;
}

/// The built-in assignors, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AssignorKind {
    /// Balanced to within one partition per member, moving as few partitions as possible.
    #[default]
    Sticky,
    /// Each topic's partitions split into contiguous ranges, in member order.
    Range,
    /// Partitions dealt to members in turn.
    RoundRobin,
}

impl AssignorKind {
    /// Parses `sticky`, `range` or `round-robin`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "sticky" => Some(Self::Sticky),
            "range" => Some(Self::Range),
            "round-robin" | "roundrobin" => Some(Self::RoundRobin),
            _ => None,
        }
    }

    /// The assignor itself.
    pub fn build(self) -> Box<dyn Assignor> {
        match self {
            Self::Sticky => Box::new(Sticky),
            Self::Range => Box::new(Range),
            Self::RoundRobin => Box::new(RoundRobin),
        }
    }
}

/// See [`AssignorKind::Sticky`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Sticky;

/// See [`AssignorKind::Range`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Range;

/// See [`AssignorKind::RoundRobin`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundRobin;

impl Assignor for Sticky {
    fn name(&self) -> &'static str {
        "sticky"
    }

    fn assign(&self, input: &AssignmentInput<'_>) -> Vec<Vec<TopicPartition>> {
        todo_assign(input)
    }
}

impl Assignor for Range {
    fn name(&self) -> &'static str {
        "range"
    }

    fn assign(&self, input: &AssignmentInput<'_>) -> Vec<Vec<TopicPartition>> {
        todo_assign(input)
    }
}

impl Assignor for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn assign(&self, input: &AssignmentInput<'_>) -> Vec<Vec<TopicPartition>> {
        todo_assign(input)
    }
}

/// Placeholder: deals partitions round-robin among subscribers. Replaced by the real
/// strategies.
fn todo_assign(input: &AssignmentInput<'_>) -> Vec<Vec<TopicPartition>> {
    let mut out = vec![Vec::new(); input.members.len()];
    for (topic, &count) in input.topics.iter().enumerate() {
        let topic = topic as u32;
        let subs: Vec<usize> = (0..input.members.len())
            .filter(|&i| input.members[i].subscription.binary_search(&topic).is_ok())
            .collect();
        if subs.is_empty() {
            continue;
        }
        for partition in 0..count {
            out[subs[partition as usize % subs.len()]].push(TopicPartition { topic, partition });
        }
    }
    out
}
