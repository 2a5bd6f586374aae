//! Values the application sees: partitions, offsets, assignments and events.

use std::collections::BTreeSet;
use std::fmt;

use rollcall_protocol::{ExpelReason, TopicPartitions};

use crate::error::FatalError;

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: u32,
}

impl TopicPartition {
    /// Partition `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: u32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A subscribed topic with the partition count the member declares for it. Every member
/// of a group must declare the same count for a topic; the coordinator refuses a join
/// that disagrees.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicSubscription {
    /// Topic name.
    pub topic: String,
    /// The topic's partition count.
    pub partitions: u32,
}

impl TopicSubscription {
    /// `topic` with `partitions` partitions.
    pub fn new(topic: impl Into<String>, partitions: u32) -> Self {
        Self {
            topic: topic.into(),
            partitions,
        }
    }
}

impl<S: Into<String>> From<(S, u32)> for TopicSubscription {
    fn from((topic, partitions): (S, u32)) -> Self {
        Self::new(topic, partitions)
    }
}

/// A set of partitions, ordered by topic then partition.
pub type PartitionSet = BTreeSet<TopicPartition>;

/// Flattens the wire's grouped form into a set.
pub(crate) fn from_wire(tps: &[TopicPartitions]) -> PartitionSet {
    tps.iter()
        .flat_map(|tp| {
            tp.partitions
                .iter()
                .map(|p| TopicPartition::new(tp.topic.clone(), *p))
        })
        .collect()
}

/// Groups a set into the wire's form: one entry per topic, partitions ascending.
pub(crate) fn to_wire<'a>(
    set: impl IntoIterator<Item = &'a TopicPartition>,
) -> Vec<TopicPartitions> {
    let mut out: Vec<TopicPartitions> = Vec::new();
    for tp in set {
        match out.last_mut() {
            Some(last) if last.topic == tp.topic => last.partitions.push(tp.partition),
            _ => out.push(TopicPartitions {
                topic: tp.topic.clone(),
                partitions: vec![tp.partition],
            }),
        }
    }
    out
}

/// An offset to commit for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offset {
    /// The partition.
    pub partition: TopicPartition,
    /// The offset: by convention the next record to process.
    pub offset: i64,
    /// Free-form metadata stored with it (bounded by the coordinator's limit).
    pub metadata: String,
}

impl Offset {
    /// `offset` for `partition`, without metadata.
    pub fn new(partition: TopicPartition, offset: i64) -> Self {
        Self {
            partition,
            offset,
            metadata: String::new(),
        }
    }
}

impl From<(TopicPartition, i64)> for Offset {
    fn from((partition, offset): (TopicPartition, i64)) -> Self {
        Self::new(partition, offset)
    }
}

/// An offset as committed, with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The offset.
    pub offset: i64,
    /// The metadata committed with it.
    pub metadata: String,
}

/// A member's assignment as its connection task knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// The generation of the member's latest assignment (0 before the first).
    pub generation: u32,
    /// Every partition the member holds, including those it has been asked to release
    /// but has not acknowledged yet.
    pub partitions: PartitionSet,
    /// The subset of `partitions` the member has been asked to release.
    pub revoking: PartitionSet,
}

/// Why partitions were lost: taken away without the application releasing them. Every
/// reason but [`LostReason::Reassigned`] also means the membership ended (the member
/// rejoins afresh, or is finished), which ends any suspension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The coordinator expelled the member.
    Expelled(ExpelReason),
    /// Another process joined with the same static instance id.
    Fenced,
    /// No heartbeat was acknowledged within the session timeout (less the lease safety
    /// margin) after it was sent: the coordinator may already have expelled the member
    /// and handed the partitions to another.
    LeaseExpired,
    /// The coordinator no longer knows the member (typically learnt after a reconnect).
    MembershipGone,
    /// The coordinator's assignment no longer lists them although the member never
    /// released them (typically learnt after a reconnect).
    Reassigned,
    /// The member left before the application acknowledged their revocation.
    Left,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expelled(r) => write!(f, "expelled ({})", r.as_str()),
            Self::Fenced => f.write_str("fenced by another instance"),
            Self::LeaseExpired => f.write_str("lease expired"),
            Self::MembershipGone => f.write_str("membership gone"),
            Self::Reassigned => f.write_str("reassigned"),
            Self::Left => f.write_str("left"),
        }
    }
}

/// Something the application must act on, in the order it happened.
///
/// A partition is announced by [`Event::Assigned`] and stops being the member's by
/// exactly one of: the application acknowledging an [`Event::RevokeRequested`], or an
/// [`Event::Lost`]. No partition is ever reported lost while it is still held, nor held
/// after it was reported lost.
///
/// [`Event::Suspended`] and [`Event::Resumed`] change nothing the member holds: they say
/// when the application must stop acting on the member's partitions and when it may act
/// again. They come in pairs, unless the membership ends in between (an
/// [`Event::Lost`] then follows the suspension instead of a resumption).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The member now owns these partitions in addition to those it already had.
    Assigned {
        /// The newly owned partitions.
        partitions: PartitionSet,
        /// The generation of the assignment that grants them.
        generation: u32,
    },
    /// The coordinator asks the member to release these partitions. The member still owns
    /// them (commits on them are accepted) until the application passes them to
    /// [`Member::ack_revocation`](crate::Member::ack_revocation), which it must do within
    /// the rebalance timeout.
    RevokeRequested {
        /// The partitions to release.
        partitions: PartitionSet,
        /// The generation that moves them.
        generation: u32,
    },
    /// These partitions are no longer the member's; stop working on them at once. Sent
    /// (possibly with no partitions) whenever the membership itself ends.
    Lost {
        /// The lost partitions.
        partitions: PartitionSet,
        /// Why.
        reason: LostReason,
    },
    /// The member's lease ran out, or its connection to the coordinator was lost: it may
    /// no longer be the owner of its partitions for all it can tell. Stop acting on every
    /// partition it holds (processing, writes outside the coordinator) until
    /// [`Event::Resumed`], or an [`Event::Lost`] that ends the membership (for any reason
    /// but [`LostReason::Reassigned`], which only takes some partitions away). The member
    /// stays a member, keeps its partitions and keeps heartbeating; partitions assigned
    /// while it is suspended are suspended too. Commits are still sent (the coordinator refuses those of a member
    /// that no longer owns the partitions), but work must not go on.
    Suspended {
        /// Every partition the member holds (possibly none).
        partitions: PartitionSet,
    },
    /// A heartbeat was acknowledged after a suspension and the member still holds these
    /// partitions: act on them again. Partitions the coordinator moved meanwhile were
    /// reported [`Event::Lost`] before.
    Resumed {
        /// Every partition the member holds (possibly none).
        partitions: PartitionSet,
    },
    /// The member cannot continue; no further events follow.
    Fatal(FatalError),
}
