//! Partition assignment strategies.
//!
//! The coordinator computes every assignment itself, through the [`Assignor`] trait.
//! Assignors are pure functions of their input: the same input gives the same output,
//! so a run can be replayed.
//!
//! - [`Sticky`] (the default) balances the load to within one partition per member when
//!   every member subscribes to the same topics, and as evenly as the subscriptions
//!   allow otherwise, while moving as few partitions as possible away from their current
//!   owners. It also honours what members and operators declare:
//!   - **capacity**: each member's share is in proportion to its capacity (quotas by
//!     largest remainder, each within one partition of the exact share; see
//!     `capacity.rs`). Equal capacities give exactly the assignment without them.
//!   - **racks**: when members declare racks, a partition goes to a member in its
//!     preferred rack whenever the quotas leave room there, and partitions without a
//!     place in their rack are spread over racks in proportion to capacity, topic by
//!     topic (see `racks.rs`).
//!   - **load** ([`Balance::Load`] with reported loads): load per unit of capacity is
//!     balanced instead of counts, moving at most the churn budget beyond the
//!     partitions that must move (see `load.rs`); [`imbalance`] tells how far the
//!     current ownership is from balanced.
//!
//!   With none of these declared (capacities all equal, no member rack, count balance
//!   or no load reported), the output is the one the sticky assignor always gave.
//! - [`Range`] splits each topic into contiguous ranges, one per subscriber.
//! - [`RoundRobin`] deals every partition in turn to the members subscribing to its
//!   topic.
//!
//! Range and round-robin ignore capacities, racks and loads. Every assignor honours
//! [`AssignorMember::excluded`]: an excluded member gets nothing, and what it owned
//! moves to the others.
//!
//! None of them iterates a hash map, draws a random number or reads a clock.

mod capacity;
mod load;
mod racks;
mod sticky;
#[cfg(test)]
mod tests;

pub use load::imbalance;

use std::fmt::{self, Debug};
use std::str::FromStr;

use super::config::UnknownName;
use super::group::Balance;

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
    /// The member takes nothing (it is drained): it is assigned nothing, and everything
    /// it owns moves to the others.
    pub excluded: bool,
    /// Its weight against the other members' (at least 1): balance is of partitions (or
    /// load) per unit of capacity.
    pub capacity: u32,
    /// Its rack, numbered as in [`AssignmentInput::preferred_racks`]; [`NO_RACK`] for
    /// none.
    pub rack: u32,
}

impl<'a> AssignorMember<'a> {
    /// A member that declared nothing beyond its subscription: not excluded, capacity 1,
    /// no rack.
    pub fn new(id: &'a str, subscription: &'a [u32], owned: &'a [TopicPartition]) -> Self {
        Self {
            id,
            subscription,
            owned,
            excluded: false,
            capacity: 1,
            rack: NO_RACK,
        }
    }
}

/// In [`AssignorMember::rack`] and [`AssignmentInput::preferred_racks`]: no rack.
pub const NO_RACK: u32 = u32::MAX;

/// How an assignor weighs its choices beyond the partition counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Policy {
    /// What is balanced: partition counts or reported load (per unit of capacity).
    pub balance: Balance,
    /// Load balance only: at most this share of the partitions (per mille) may move
    /// beyond those that must (whose owner left, or that nobody owns).
    pub churn_budget_permille: u16,
}

/// Everything an assignor needs.
#[derive(Debug, Clone, Copy)]
pub struct AssignmentInput<'a> {
    /// Partition count of each topic, by topic index. A topic no member subscribes to
    /// any more has count 0 and must receive no assignment.
    pub topics: &'a [u32],
    /// The members, sorted by id.
    pub members: &'a [AssignorMember<'a>],
    /// By topic index, each partition's preferred rack ([`NO_RACK`]: none). A topic
    /// without preferences has an empty slice, and topics past the end have none.
    pub preferred_racks: &'a [&'a [u32]],
    /// By topic index, each partition's reported load. A topic without reports has an
    /// empty slice, and topics past the end have none; an unreported partition counts
    /// as the mean of the reported ones (1 when none is).
    pub loads: &'a [&'a [f64]],
    /// What is balanced, and how much may move for it.
    pub policy: Policy,
}

impl<'a> AssignmentInput<'a> {
    /// An input with no racks, no loads, and count balance.
    pub fn new(topics: &'a [u32], members: &'a [AssignorMember<'a>]) -> Self {
        Self {
            topics,
            members,
            preferred_racks: &[],
            loads: &[],
            policy: Policy::default(),
        }
    }
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
    /// Balanced to within one partition per member (of its capacity share), moving as
    /// few partitions as possible; honours racks and, by policy, balances load.
    #[default]
    Sticky,
    /// Each topic's partitions split into contiguous ranges, in member order.
    Range,
    /// Partitions dealt to members in turn.
    RoundRobin,
}

impl AssignorKind {
    /// Every assignor.
    pub const ALL: [Self; 3] = [Self::Sticky, Self::Range, Self::RoundRobin];

    /// The assignor's name, as configuration and output spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sticky => "sticky",
            Self::Range => "range",
            Self::RoundRobin => "round-robin",
        }
    }

    /// The assignor named `name` by [`Self::as_str`] (`roundrobin` is accepted too).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "roundrobin" => Some(Self::RoundRobin),
            _ => Self::ALL.into_iter().find(|k| k.as_str() == name),
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

impl fmt::Display for AssignorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AssignorKind {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Self::parse(s.trim()).ok_or_else(|| UnknownName::new("assignor", s, Self::ALL))
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
        AssignorKind::Sticky.as_str()
    }

    fn assign(&self, input: &AssignmentInput<'_>) -> Vec<Vec<TopicPartition>> {
        if let Some(out) = assign_excluding(self, input) {
            return out;
        }
        let Some(first) = input.members.first() else {
            return Vec::new();
        };
        let with_racks = input.members.iter().any(|m| m.rack != NO_RACK);
        if input.policy.balance == Balance::Load && !input.loads.is_empty() {
            let subscriptions = Subscriptions::new(input);
            if let Some(out) =
                load::assign_by_load(input, &subscriptions, &subscriptions.by_topic())
            {
                return out;
            }
        }
        if with_racks {
            let subscriptions = Subscriptions::new(input);
            return racks::assign_with_racks(input, &subscriptions, &subscriptions.by_topic());
        }
        // Identical subscriptions are the common case; spare indexing them.
        if input
            .members
            .iter()
            .all(|m| m.subscription == first.subscription)
        {
            let mut topics = Vec::new();
            clean_into(input.topics, first.subscription, &mut topics);
            return sticky::assign_uniform(input, &topics);
        }
        let subscriptions = Subscriptions::new(input);
        if subscriptions.is_uniform() {
            sticky::assign_uniform(input, subscriptions.of(0))
        } else if input
            .members
            .iter()
            .any(|m| capacity::capacity(m.capacity) != capacity::capacity(first.capacity))
        {
            // Chains balance counts, not weights: capacities with different
            // subscriptions take the greedy placement, here with a single rack.
            racks::assign_with_racks(input, &subscriptions, &subscriptions.by_topic())
        } else {
            sticky::assign_mixed(input, &subscriptions, &subscriptions.by_topic())
        }
    }
}

impl Assignor for Range {
    fn name(&self) -> &'static str {
        AssignorKind::Range.as_str()
    }

    fn assign(&self, input: &AssignmentInput<'_>) -> Vec<Vec<TopicPartition>> {
        if let Some(out) = assign_excluding(self, input) {
            return out;
        }
        let subscriptions = Subscriptions::new(input);
        let subscribers = subscriptions.by_topic();
        let mut out = subscriptions.empty_output(input);
        for (topic, &count) in input.topics.iter().enumerate() {
            let members = subscribers.members(topic);
            if members.is_empty() {
                continue;
            }
            let n = members.len() as u32;
            let (per_member, extra) = (count / n, count % n);
            let mut next = 0;
            for (i, &member) in (0..).zip(members) {
                let len = per_member + u32::from(i < extra);
                out[member as usize].extend((next..next + len).map(|partition| TopicPartition {
                    topic: topic as u32,
                    partition,
                }));
                next += len;
            }
        }
        out
    }
}

impl Assignor for RoundRobin {
    fn name(&self) -> &'static str {
        AssignorKind::RoundRobin.as_str()
    }

    fn assign(&self, input: &AssignmentInput<'_>) -> Vec<Vec<TopicPartition>> {
        if let Some(out) = assign_excluding(self, input) {
            return out;
        }
        let subscriptions = Subscriptions::new(input);
        let subscribers = subscriptions.by_topic();
        let mut out = subscriptions.empty_output(input);
        // The member the next partition is dealt to, or the first subscriber after it.
        let mut turn = 0;
        for (topic, &count) in input.topics.iter().enumerate() {
            let members = subscribers.members(topic);
            if members.is_empty() {
                continue;
            }
            let mut i = members.partition_point(|&m| m < turn);
            for partition in 0..count {
                if i == members.len() {
                    i = 0;
                }
                out[members[i] as usize].push(TopicPartition {
                    topic: topic as u32,
                    partition,
                });
                turn = members[i] + 1;
                i += 1;
            }
        }
        out
    }
}

/// If some members are excluded, the assignment `assignor` makes when they subscribe to
/// nothing and own nothing (so they get nothing and what they owned moves); `None`
/// when no member is excluded.
fn assign_excluding(
    assignor: &dyn Assignor,
    input: &AssignmentInput<'_>,
) -> Option<Vec<Vec<TopicPartition>>> {
    if !input.members.iter().any(|m| m.excluded) {
        return None;
    }
    let members: Vec<AssignorMember<'_>> = input
        .members
        .iter()
        .map(|m| {
            if m.excluded {
                AssignorMember {
                    subscription: &[],
                    owned: &[],
                    excluded: false,
                    ..*m
                }
            } else {
                *m
            }
        })
        .collect();
    Some(assignor.assign(&AssignmentInput {
        members: &members,
        ..*input
    }))
}

/// Marks "no member" or "no entry" in the index arrays below.
const NONE: u32 = u32::MAX;

/// Appends to `out` the topics of `subscription` that exist and have partitions,
/// ascending and without duplicates.
fn clean_into(counts: &[u32], subscription: &[u32], out: &mut Vec<u32>) {
    let first = out.len();
    out.extend(
        subscription
            .iter()
            .copied()
            .filter(|&topic| counts.get(topic as usize).is_some_and(|&count| count > 0)),
    );
    let mine = &mut out[first..];
    if !mine.windows(2).all(|w| w[0] < w[1]) {
        mine.sort_unstable();
        let mut len = 0;
        for i in 0..mine.len() {
            if len == 0 || mine[i] != mine[len - 1] {
                mine[len] = mine[i];
                len += 1;
            }
        }
        out.truncate(first + len);
    }
}

/// The members' subscriptions, cleaned: only topics that exist and have partitions,
/// ascending, without duplicates.
#[derive(Debug)]
struct Subscriptions {
    /// Member `m`'s topics are `topics[start[m]..start[m + 1]]`.
    start: Vec<usize>,
    topics: Vec<u32>,
}

impl Subscriptions {
    fn new(input: &AssignmentInput<'_>) -> Self {
        let mut start = Vec::with_capacity(input.members.len() + 1);
        let mut topics = Vec::new();
        start.push(0);
        for member in input.members {
            clean_into(input.topics, member.subscription, &mut topics);
            start.push(topics.len());
        }
        Self { start, topics }
    }

    fn members(&self) -> usize {
        self.start.len() - 1
    }

    /// Member `member`'s topics.
    fn of(&self, member: usize) -> &[u32] {
        &self.topics[self.start[member]..self.start[member + 1]]
    }

    /// Whether every member subscribes to the same topics.
    fn is_uniform(&self) -> bool {
        (1..self.members()).all(|m| self.of(m) == self.of(0))
    }

    /// One empty list per member, each with room for an even share.
    fn empty_output(&self, input: &AssignmentInput<'_>) -> Vec<Vec<TopicPartition>> {
        let n = self.members();
        let total: u64 = input.topics.iter().map(|&c| u64::from(c)).sum();
        let share = if n == 0 {
            0
        } else {
            usize::try_from(total / n as u64 + 1).unwrap_or(0)
        };
        (0..n).map(|_| Vec::with_capacity(share)).collect()
    }

    /// The same relation indexed by topic.
    fn by_topic(&self) -> Subscribers {
        let topic_count = self
            .topics
            .iter()
            .map(|&t| t as usize + 1)
            .max()
            .unwrap_or(0);
        let mut start = vec![0; topic_count + 1];
        for &topic in &self.topics {
            start[topic as usize + 1] += 1;
        }
        for t in 0..topic_count {
            start[t + 1] += start[t];
        }
        let mut fill = start.clone();
        let mut members = vec![NONE; self.topics.len()];
        let mut slot = vec![0; self.topics.len()];
        for m in 0..self.members() {
            let entries = self.start[m]..self.start[m + 1];
            for (slot, &topic) in slot[entries.clone()].iter_mut().zip(&self.topics[entries]) {
                let topic = topic as usize;
                members[fill[topic]] = m as u32;
                *slot = fill[topic];
                fill[topic] += 1;
            }
        }
        Subscribers {
            start,
            members,
            slot,
        }
    }
}

/// The subscribers of each topic, ascending. Each (topic, member) pair has a _slot_: its
/// position in `members`, by which per-pair counters are indexed.
#[derive(Debug)]
struct Subscribers {
    /// Topic `t`'s subscribers are `members[start[t]..start[t + 1]]`.
    start: Vec<usize>,
    members: Vec<u32>,
    /// The slot of each entry of [`Subscriptions::topics`].
    slot: Vec<usize>,
}

impl Subscribers {
    /// Slots of topic `topic` (empty if nobody subscribes to it).
    fn slots(&self, topic: usize) -> std::ops::Range<usize> {
        match self.start.get(topic + 1) {
            Some(&end) => self.start[topic]..end,
            None => 0..0,
        }
    }

    /// Subscribers of topic `topic`, ascending.
    fn members(&self, topic: usize) -> &[u32] {
        &self.members[self.slots(topic)]
    }
}
