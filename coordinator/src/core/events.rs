//! What the core tells the shell besides responses: pushes for connections and events
//! for logs and metrics.

use std::time::{Duration, Instant};

use rollcall_protocol::{ExpelReason, Push};

use super::{ConnId, DetectorKind, Guard};

/// Why a rebalance started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RebalanceCause {
    /// A member joined.
    Join,
    /// A member left.
    Leave,
    /// A member was expelled.
    Expulsion,
    /// A member changed its subscription.
    Subscription,
    /// A suspect member, which was given nothing new, is alive again.
    Recovery,
    /// The partitions reserved for a departed static member's instance (a departure
    /// delay) were not claimed in time.
    DepartureDelayEnded,
    /// An operator drained or undrained members, or changed the group's settings.
    Operator,
    /// With load balance, the reported loads put a member further above the balanced
    /// load than the group's imbalance threshold.
    LoadImbalance,
}

impl RebalanceCause {
    /// Every cause.
    pub const ALL: [Self; 8] = [
        Self::Join,
        Self::Leave,
        Self::Expulsion,
        Self::Subscription,
        Self::Recovery,
        Self::DepartureDelayEnded,
        Self::Operator,
        Self::LoadImbalance,
    ];

    /// Snake-case name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Join => "join",
            Self::Leave => "leave",
            Self::Expulsion => "expulsion",
            Self::Subscription => "subscription",
            Self::Recovery => "recovery",
            Self::DepartureDelayEnded => "departure_delay_ended",
            Self::Operator => "operator",
            Self::LoadImbalance => "load_imbalance",
        }
    }

    /// The cause named `name` by [`Self::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// Something that happened, for logs and metrics. Never needed for correctness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Members were drained (their partitions move to others while they stay) or
    /// undrained.
    MembersDrained {
        /// Group.
        group: String,
        /// The members whose state changed.
        members: Vec<String>,
        /// Drained (`true`) or undrained.
        drained: bool,
    },
    /// An operator changed a group's settings.
    GroupConfigChanged {
        /// Group.
        group: String,
    },
    /// A member joined (a fresh member id).
    MemberJoined {
        /// Group.
        group: String,
        /// New member.
        member_id: String,
        /// Static instance id.
        instance_id: Option<String>,
    },
    /// A static member's new process took over an old member id.
    MemberReplaced {
        /// Group.
        group: String,
        /// The fenced member id.
        old_member_id: String,
        /// The new member id.
        new_member_id: String,
        /// The instance id they share.
        instance_id: String,
    },
    /// A member left the group: expelled, fenced or by its own leave.
    MemberRemoved {
        /// Group.
        group: String,
        /// Member.
        member_id: String,
        /// Why.
        reason: ExpelReason,
    },
    /// A rebalance computed a new target assignment.
    RebalanceStarted {
        /// Group.
        group: String,
        /// The new generation.
        generation: u32,
        /// The first trigger.
        cause: RebalanceCause,
        /// Partitions whose owner changes.
        partitions_moved: usize,
    },
    /// Every member holds its target assignment.
    RebalanceCompleted {
        /// Group.
        group: String,
        /// Generation.
        generation: u32,
        /// From the first trigger until the last grant.
        duration: Duration,
    },
    /// Offsets committed.
    CommitsAccepted {
        /// Group.
        group: String,
        /// Number of offsets.
        count: usize,
    },
    /// An offset commit refused.
    CommitRejected {
        /// Group.
        group: String,
        /// Why.
        reason: rollcall_protocol::ErrorCode,
    },
    /// Every member went silent at once: the coordinator suspects its own network and
    /// holds expulsions (for silence, progress and revocations).
    IsolationSuspected {
        /// How long no member has been heard.
        silent_for: Duration,
        /// Members in the shard.
        members: usize,
    },
    /// Members are heard again after a suspected isolation; every member that was not
    /// already overdue when the silence began got the silence back.
    IsolationEnded {
        /// How long no member was heard.
        silent_for: Duration,
    },
    /// A guard held a member for as long as it may (one more expel threshold past its
    /// deadline, never past two of real silence) and lets it be expelled.
    HoldExpired {
        /// The guard that held it.
        guard: Guard,
        /// Group.
        group: String,
        /// Member.
        member_id: String,
        /// How long past its deadline it was held.
        held_for: Duration,
    },
    /// The core was woken much later than it asked: it extended every deadline and
    /// holds expulsions until `until`.
    PauseDetected {
        /// How late it was woken.
        late_by: Duration,
        /// End of the grace in which queued frames are read before anyone is judged.
        until: Instant,
    },
    /// The grace after a pause is over; expulsions proceed.
    PauseGraceEnded {
        /// How long after the grace's end the core noticed.
        late_by: Duration,
    },
    /// The shell reported the coordinator behind its members' frames: expiries of
    /// connected members are held (see `guards`).
    BacklogDetected {
        /// The lateness reported.
        lag: Duration,
    },
    /// The coordinator has not been reported behind for a while: expiries are judged
    /// as usual again.
    BacklogEnded {
        /// How long it was behind.
        lasted: Duration,
        /// The worst lateness reported.
        worst: Duration,
    },
    /// An expiry for silence waits for the expulsion rate limit (`max_expulsion_rate`).
    ExpulsionRateLimited,
    /// A member went silent past its suspicion threshold: it keeps what it owns and is
    /// given nothing new.
    MemberSuspected {
        /// Group id.
        group: String,
        /// Member id.
        member_id: String,
        /// How long it had been silent.
        silence: Duration,
        /// The silence that would expel it.
        expel_after: Duration,
    },
    /// A suspect member is alive again after enough on-time heartbeats.
    MemberRecovered {
        /// Group id.
        group: String,
        /// Member id.
        member_id: String,
        /// How long it was suspect.
        suspect_for: Duration,
    },
    /// What the group's shadow detector would have done, had it been acting.
    ShadowVerdict {
        /// Group id.
        group: String,
        /// Member id.
        member_id: String,
        /// The shadow detector.
        detector: DetectorKind,
        /// What it would have done.
        verdict: ShadowVerdict,
        /// The silence it judged.
        silence: Duration,
    },
    /// A member expelled for silence beat again: it was alive, and the expulsion was a
    /// mistake (reported once per expulsion).
    FalseExpulsion {
        /// Group id.
        group: String,
        /// Member id.
        member_id: String,
        /// The detector that expelled it.
        detector: DetectorKind,
    },
    /// A static member went away without leaving (its session, or its lease after its
    /// connection closed, ran out) in a group with a departure delay: its partitions
    /// are reserved for its instance, granted to nobody, and the others keep theirs.
    PartitionsReserved {
        /// Group id.
        group: String,
        /// The instance they are kept for.
        instance_id: String,
        /// The member that went away.
        member_id: String,
        /// How many partitions.
        partitions: usize,
        /// How long they are kept at most.
        delay: Duration,
    },
    /// The instance came back within its departure delay and got its reserved
    /// partitions again, no other member's partitions moving.
    ReservationReturned {
        /// Group id.
        group: String,
        /// The instance.
        instance_id: String,
        /// Its new member id.
        member_id: String,
        /// How many partitions it got back.
        partitions: usize,
    },
    /// A reservation ended without its instance taking it back: its partitions move to
    /// the other members with a rebalance.
    ReservationEnded {
        /// Group id.
        group: String,
        /// The instance they were kept for.
        instance_id: String,
        /// How many partitions.
        partitions: usize,
        /// Why it ended.
        reason: ReservationEnd,
    },
    /// A request was refused, wholly or for some of its offsets, because it would have
    /// taken a quota past its limit.
    QuotaRefused {
        /// Group id.
        group: String,
        /// The quota.
        quota: Quota,
    },
}

/// A limit on what the core keeps: the coordinator's (shared out among its shards) or
/// one group's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quota {
    /// Groups (`max_groups`): `too_many_groups`.
    Groups,
    /// Members over all groups (`max_members`): `too_many_members`.
    Members,
    /// Partitions over all groups (`max_partitions`): `too_many_partitions`.
    Partitions,
    /// Committed offsets over all groups (`max_offsets`): `too_many_offsets`.
    Offsets,
    /// Commit metadata bytes over all groups (`max_metadata_bytes_total`):
    /// `too_many_offsets`.
    OffsetMetadata,
    /// Members of one group (`max_members_per_group`): `group_full`.
    GroupMembers,
    /// Partitions of one group (`max_partitions_per_group`): `too_many_partitions`.
    GroupPartitions,
    /// Committed offsets of one group (`max_offsets_per_group`): `too_many_offsets`.
    GroupOffsets,
    /// Commit metadata bytes of one group (`max_metadata_bytes_per_group`):
    /// `too_many_offsets`.
    GroupOffsetMetadata,
}

impl Quota {
    /// Every quota.
    pub const ALL: [Self; 9] = [
        Self::Groups,
        Self::Members,
        Self::Partitions,
        Self::Offsets,
        Self::OffsetMetadata,
        Self::GroupMembers,
        Self::GroupPartitions,
        Self::GroupOffsets,
        Self::GroupOffsetMetadata,
    ];

    /// Snake-case name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Groups => "groups",
            Self::Members => "members",
            Self::Partitions => "partitions",
            Self::Offsets => "offsets",
            Self::OffsetMetadata => "offset_metadata",
            Self::GroupMembers => "group_members",
            Self::GroupPartitions => "group_partitions",
            Self::GroupOffsets => "group_offsets",
            Self::GroupOffsetMetadata => "group_offset_metadata",
        }
    }
}

/// Why a reservation ended without its instance taking it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReservationEnd {
    /// The departure delay passed.
    Expired,
    /// The departed member's process left (a Leave naming it).
    Left,
    /// The instance joined again with a subscription the reservation does not cover: it
    /// joins as a new member, with a rebalance.
    Rejoined,
}

impl ReservationEnd {
    /// Every reason.
    pub const ALL: [Self; 3] = [Self::Expired, Self::Left, Self::Rejoined];

    /// The reason's name, as logs and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Left => "left",
            Self::Rejoined => "rejoined",
        }
    }
}

/// What a shadow detector would have done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShadowVerdict {
    /// Suspected a member that then spoke again.
    Suspect,
    /// Expelled a member that then spoke again: a false expulsion it would have made.
    Expel,
    /// Still waited on a member the acting detector expelled for silence.
    Spare,
}

impl ShadowVerdict {
    /// Every verdict.
    pub const ALL: [Self; 3] = [Self::Suspect, Self::Expel, Self::Spare];

    /// The verdict's name, as logs and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Suspect => "suspect",
            Self::Expel => "expel",
            Self::Spare => "spare",
        }
    }
}

/// An output of the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send `push` on connection `conn`.
    Push {
        /// Connection.
        conn: ConnId,
        /// What to send.
        push: Push,
    },
    /// Something happened.
    Event(Event),
}

/// Counts for gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// Groups known.
    pub groups: usize,
    /// Members judged alive.
    pub members_alive: usize,
    /// Members judged suspect.
    pub members_suspect: usize,
    /// Groups with at least one suspect member.
    pub groups_with_suspects: usize,
    /// Partitions reserved for departed static members' instances (departure delays):
    /// owned by nobody until the instance returns or the delay ends.
    pub partitions_reserved: usize,
    /// Revocations waiting for room under their group's caps (throttled moves).
    pub revocations_waiting: usize,
    /// Members drained (by id, instance or label).
    pub members_drained: usize,
}
