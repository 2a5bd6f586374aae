//! What the core asks the shell to make durable, and what it is restored from.
//!
//! The core describes every durable change as a [`Record`]. The shell writes the records
//! of a batch of inputs in one durable transaction (group commit) before it sends any of
//! that batch's responses or pushes, so nothing is acknowledged before it is durable.

use serde::{Deserialize, Serialize};

/// A durable change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// An accepted offset commit.
    Offset(OffsetRecord),
    /// A group's resumable state, written at every generation boundary and membership
    /// change. Replaces the group's previous snapshot.
    Group(GroupSnapshot),
    /// The group had no members and its offsets retention expired: the store removes
    /// its offsets, snapshot and metadata. Records after it in the same stream apply
    /// to the group afresh.
    GroupDeleted {
        /// Group id.
        group: String,
    },
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRecord {
    /// Group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// Offset.
    pub offset: i64,
    /// Metadata.
    pub metadata: String,
}

/// What is needed to resume a group after a restart without a rebalance. Heartbeat
/// times are deliberately absent: a restored member gets fresh deadlines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSnapshot {
    /// Group id.
    pub group: String,
    /// Generation.
    pub generation: u32,
    /// Topic table, in index order: name and partition count.
    pub topics: Vec<(String, u32)>,
    /// Members, by id.
    pub members: Vec<MemberSnapshot>,
}

/// One member of a [`GroupSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberSnapshot {
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Join token of the join that created it.
    pub join_token: u64,
    /// Session timeout, ms.
    pub session_timeout_ms: u32,
    /// Progress timeout, ms.
    pub progress_timeout_ms: u32,
    /// Rebalance timeout, ms.
    pub rebalance_timeout_ms: u32,
    /// Subscribed topic indexes.
    pub subscription: Vec<u32>,
    /// Generation of the member's assignment.
    pub generation: u32,
    /// Owned partitions, as (topic index, partition).
    pub owned: Vec<(u32, u32)>,
    /// Target partitions, as (topic index, partition).
    pub target: Vec<(u32, u32)>,
}

/// Everything the core is restored from at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoredState {
    /// The last snapshot of every group.
    pub groups: Vec<GroupSnapshot>,
    /// Every committed offset.
    pub offsets: Vec<OffsetRecord>,
}
