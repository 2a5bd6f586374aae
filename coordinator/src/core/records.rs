//! What the core asks the shell to make durable, and what it is restored from.
//!
//! The core describes every durable change as a [`Record`]. The shell writes the records
//! of a batch of inputs in one durable transaction (group commit) before it sends any of
//! that batch's responses or pushes, so nothing is acknowledged before it is durable.

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
    /// to the group afresh. The store keeps the deleted group's generation as that
    /// group's floor ([`RestoredState::floors`]), so a group created again under the
    /// same id never repeats a generation.
    GroupDeleted {
        /// Group id.
        group: String,
    },
}

impl Record {
    /// The group the record is about.
    pub fn group(&self) -> &str {
        match self {
            Self::Offset(o) => &o.group,
            Self::Group(g) => &g.group,
            Self::GroupDeleted { group } => group,
        }
    }
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// What is needed to resume a group after a restart without a rebalance, and to make
/// the same ownership, fencing and liveness decisions the running coordinator would
/// have made. Heartbeat times are deliberately absent: a restored member gets a fresh
/// session. Remaining durations (holds, leases) are counted from the moment the
/// snapshot was taken; a restore counts them again from its own start, which can only
/// make holds longer. The waits that can expel a member (for progress, for each
/// revocation) are recorded as how long they had run, and a restore resumes them from
/// there: restarts and takeovers do not start them over.
///
/// How a store encodes it is the store's business (the durable store's JSON form, with
/// defaults for fields added later, is in `store/snapshot_json.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSnapshot {
    /// Group id.
    pub group: String,
    /// Generation.
    pub generation: u32,
    /// Topic table, in index order: name and partition count.
    pub topics: Vec<(String, u32)>,
    /// Members, by id.
    pub members: Vec<MemberSnapshot>,
    /// Partitions held for removed or replaced members until their leases run out.
    pub held: Vec<HeldSnapshot>,
    /// The cause of a rebalance that was asked for and has not run yet.
    pub rebalance_pending: Option<String>,
    /// Every static instance that joined the group, with its latest incarnation.
    pub instances: Vec<InstanceSnapshot>,
    /// The group's failure detector (`fixed`, `adaptive`); empty or unknown: the
    /// coordinator's default.
    pub detector: String,
    /// What the operator set and drained, and where the members run (`None` in a group
    /// nobody steered, and in snapshots written before operators could). Boxed: most
    /// groups have none.
    pub operator: Option<Box<OperatorSnapshot>>,
}

/// The operator's durable state of a group: its settings, its drains, the members'
/// placements and the topics' preferred racks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorSnapshot {
    /// The group's settings; `None`: the default.
    pub config: Option<super::GroupConfig>,
    /// Drained member ids (and static instance ids, which stay drained across
    /// incarnations), sorted.
    pub drained_members: Vec<String>,
    /// Drained labels, sorted.
    pub drained_labels: Vec<String>,
    /// Members that declared a placement: (member id, label, rack, capacity).
    pub placements: Vec<(String, String, String, u32)>,
    /// Topics with preferred racks: (topic index, preferred rack of each partition).
    pub preferred_racks: Vec<(u32, Vec<String>)>,
}

impl OperatorSnapshot {
    /// Whether there is nothing in it.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Partitions held for a member that may still be acting on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldSnapshot {
    /// How long the hold still had to run when the snapshot was taken, ms.
    pub remaining_ms: u64,
    /// The member the partitions were taken from (empty in snapshots written before
    /// holds named their member: such a hold cannot be relinquished).
    pub member_id: String,
    /// The partitions, as (topic index, partition).
    pub partitions: Vec<(u32, u32)>,
    /// For a reservation (a departure delay), the static instance the partitions are
    /// kept for; `None` for a hold of a member's lease (and in snapshots written before
    /// reservations).
    pub reserved_for: Option<String>,
}

/// The latest incarnation of a static instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSnapshot {
    /// Instance id.
    pub instance_id: String,
    /// Number of incarnations so far.
    pub epoch: u64,
    /// The latest incarnation's member id; any other id of the instance is fenced.
    pub member_id: String,
    /// The latest incarnation's join token.
    pub join_token: u64,
    /// Join tokens of the most recent superseded incarnations (at most 16): a join
    /// retried with one of them is fenced.
    pub fenced_tokens: Vec<u64>,
}

/// One member of a [`GroupSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Lease timeout, ms (0 in snapshots written before lease timeouts: the session
    /// timeout).
    pub lease_timeout_ms: u32,
    /// Subscribed topic indexes.
    pub subscription: Vec<u32>,
    /// Generation of the member's assignment.
    pub generation: u32,
    /// Owned partitions, as (topic index, partition).
    pub owned: Vec<(u32, u32)>,
    /// Target partitions, as (topic index, partition).
    pub target: Vec<(u32, u32)>,
    /// How long the lease the coordinator had promised the member still had to run
    /// when the snapshot was taken, ms. Heartbeats renew leases without a snapshot, so
    /// a restore assumes at least a whole session timeout from the restore; this only
    /// matters when it is longer (a rejoin shortened the session timeout).
    pub lease_remaining_ms: Option<u64>,
    /// The member's process stood down (a static member's `stand_down` leave): its
    /// lease is over and a replacement takes over at once.
    pub stood_down: bool,
    /// Partitions the member released, as (topic index, partition): a late commit for
    /// one is told `partition_revoked`, not `not_owner`, after a restart too.
    pub released: Vec<(u32, u32)>,
    /// The member was suspect and the last target cut its share: it is restored suspect,
    /// and its recovery brings the rebalance that gives it its share back.
    pub restricted: bool,
    /// Its wait for progress, if recorded (absent in snapshots written before waits
    /// were kept: it then starts afresh at the restore).
    pub progress: Option<WaitSnapshot>,
    /// The partitions it is asked to release, each with its wait, as (topic index,
    /// partition) (empty in snapshots written before waits were kept: each revocation
    /// then starts afresh at the restore).
    pub revoking: Vec<((u32, u32), WaitSnapshot)>,
}

/// A wait that can expel a member (for progress, or one revocation), as a snapshot
/// records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitSnapshot {
    /// For progress: the counter the wait is for (progress past it ends the wait).
    /// Unused for a revocation.
    pub counter: u64,
    /// How long the wait had counted against the member when the snapshot was taken,
    /// ms (the coordinator's pauses, and what isolations gave back, not counted).
    pub waited_ms: u64,
    /// What isolations had given back to it, ms (at most one expel threshold in all).
    pub credit_ms: u64,
    /// How many restores it has been carried through.
    pub restores: u32,
}

/// What the core is restored from: everything the store holds at start, or the groups
/// of one shard adopted at runtime ([`crate::core::Coordinator::restore`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoredState {
    /// The last snapshot of every group.
    pub groups: Vec<GroupSnapshot>,
    /// Every committed offset.
    pub offsets: Vec<OffsetRecord>,
    /// Per group the store deleted (and that has no snapshot since), the largest
    /// generation it reached: that group id starts above it if it is created again.
    pub floors: Vec<(String, u32)>,
    /// A floor under every group: the largest generation of any group deleted by a
    /// store written before floors were kept per group (0 in a store that never had
    /// one). Kept so that old data restores with the promise it was written under.
    pub generation_floor: u32,
}

impl RestoredState {
    /// Keeps only what concerns the groups `keep` accepts (one shard's), and the floor
    /// under every group.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.groups.retain(|g| keep(&g.group));
        self.offsets.retain(|o| keep(&o.group));
        self.floors.retain(|(group, _)| keep(group));
    }
}
