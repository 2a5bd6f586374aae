//! The coordinator's deterministic core.
//!
//! A sans-IO state machine: every input carries `now`, outputs are drained with
//! [`Coordinator::poll_output`] and [`Coordinator::take_records`], and the next wake-up
//! is asked for with [`Coordinator::poll_timeout`]. The core never reads a clock, never
//! does I/O and never spawns; `tests/architecture.rs` enforces that.

pub mod assignor;
pub mod liveness;
pub mod records;

use std::time::{Duration, Instant};

use rollcall_protocol::{ExpelReason, Push, Request, Response};

pub use assignor::{Assignor, AssignorKind, TopicPartition};
pub use liveness::{FixedTimeout, LivenessPolicy};
pub use records::{GroupSnapshot, MemberSnapshot, OffsetRecord, Record, RestoredState};

/// Identifies a client connection to the core. Chosen by the shell; never reused while
/// the connection is open.
pub type ConnId = u64;

/// Limits and tunables of the core.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Smallest session timeout a member may ask for.
    pub min_session_timeout: Duration,
    /// Largest session timeout a member may ask for.
    pub max_session_timeout: Duration,
    /// Largest progress timeout a member may ask for.
    pub max_progress_timeout: Duration,
    /// Largest rebalance timeout a member may ask for.
    pub max_rebalance_timeout: Duration,
    /// Maximum members in one group.
    pub max_members_per_group: usize,
    /// Maximum partitions (over all topics) in one group.
    pub max_partitions_per_group: u32,
    /// Maximum commit metadata size, bytes.
    pub max_metadata_bytes: usize,
    /// Rebalance triggers closer together than this share one generation.
    pub rebalance_coalesce: Duration,
    /// A rebalance is never delayed by coalescing more than this after its first trigger.
    pub rebalance_coalesce_max: Duration,
    /// The assignor.
    pub assignor: AssignorKind,
    /// How many expelled member ids each group remembers, to answer them with the reason
    /// rather than "unknown member".
    pub expelled_memory: usize,
    /// If the core is woken this much later than the deadline it asked for, it assumes
    /// that the coordinator itself was paused and gives every member fresh time instead
    /// of expelling them.
    pub pause_guard: Duration,
    /// Prefix of generated member ids; the shell makes it unique per process start, so
    /// ids never repeat across restarts.
    pub member_id_prefix: String,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            min_session_timeout: Duration::from_millis(100),
            max_session_timeout: Duration::from_secs(30 * 60),
            max_progress_timeout: Duration::from_secs(24 * 60 * 60),
            max_rebalance_timeout: Duration::from_secs(30 * 60),
            max_members_per_group: 10_000,
            max_partitions_per_group: 1_000_000,
            max_metadata_bytes: 4096,
            rebalance_coalesce: Duration::from_millis(20),
            rebalance_coalesce_max: Duration::from_millis(250),
            assignor: AssignorKind::Sticky,
            expelled_memory: 1024,
            pause_guard: Duration::from_secs(2),
            member_id_prefix: "m".to_owned(),
        }
    }
}

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
}

impl RebalanceCause {
    /// Snake-case name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Join => "join",
            Self::Leave => "leave",
            Self::Expulsion => "expulsion",
            Self::Subscription => "subscription",
        }
    }
}

/// Something that happened, for logs and metrics. Never needed for correctness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
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
    /// The core was woken much later than it asked and extended every deadline.
    PauseDetected {
        /// How late it was woken.
        late_by: Duration,
    },
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
}

/// The coordinator's core: every group of one shard.
#[derive(Debug)]
pub struct Coordinator {
    config: CoreConfig,
}

impl Coordinator {
    /// An empty coordinator.
    pub fn new(config: CoreConfig) -> Self {
        Self { config }
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Restores groups and offsets loaded from the store. Every member gets fresh
    /// session and progress deadlines counted from `now`.
    pub fn restore(&mut self, now: Instant, state: RestoredState) {
        let _ = (now, state);
        todo!()
    }

    /// Handles one request from connection `conn` and returns its response.
    ///
    /// `ApiVersions` is the shell's business and is answered with an error here.
    pub fn handle_request(&mut self, now: Instant, conn: ConnId, request: Request) -> Response {
        let _ = (now, conn, request);
        todo!()
    }

    /// Connection `conn` closed. Its members keep their sessions and may resume on
    /// another connection.
    pub fn handle_disconnect(&mut self, now: Instant, conn: ConnId) {
        let _ = (now, conn);
        todo!()
    }

    /// Runs every timer due at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
        todo!()
    }

    /// When the core next needs [`Self::handle_timeout`], if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        todo!()
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        todo!()
    }

    /// Takes every record produced since the last call. The shell must make them
    /// durable before it sends the responses and pushes of the same inputs.
    pub fn take_records(&mut self) -> Vec<Record> {
        todo!()
    }

    /// Forgets the committed offsets of `group` if it has no members (retention).
    pub fn remove_offsets(&mut self, group: &str) {
        let _ = group;
        todo!()
    }

    /// Counts for gauges at `now`.
    pub fn stats(&self, now: Instant) -> CoreStats {
        let _ = now;
        todo!()
    }
}
