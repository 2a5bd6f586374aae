//! What the load generator is asked to do: each member's spec, its load, the plan of a
//! run, the commands that steer single members and what they observe.

use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};

use rollcall_protocol::{ErrorCode, ExpelReason, JoinPlacement};
use tokio::sync::oneshot;

/// What each member does once joined.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Load {
    /// A heartbeat every `period`, on the global timeline.
    Periodic { period: Duration },
    /// One heartbeat outstanding per member, the next sent when the last is answered.
    ClosedLoop,
    /// `inflight` commits outstanding per member (each of `offsets` owned partitions),
    /// and a heartbeat every `period`.
    Commits {
        inflight: usize,
        offsets: usize,
        period: Duration,
    },
}

/// One member to speak for.
#[derive(Debug, Clone)]
pub(crate) struct MemberSpec {
    pub(crate) group: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) partitions: u32,
    pub(crate) session_timeout: Duration,
    pub(crate) progress_timeout: Duration,
    pub(crate) rebalance_timeout: Duration,
    /// The lease timeout the member asks for; `None`: the session timeout (the Join is
    /// then sent at version 0).
    pub(crate) lease_timeout: Option<Duration>,
    /// The failure detector the member asks its group to use; `None`: the
    /// coordinator's.
    pub(crate) detector: Option<String>,
    /// Where the member runs and what it can take (Join version 3); `None`: nothing
    /// declared.
    pub(crate) placement: Option<Box<JoinPlacement>>,
    /// The member joins only when [`Driver::release_late_joins`] says so (a second
    /// wave). Every member of a connection must agree.
    pub(crate) late: bool,
}

/// The load of every partition of the topic, which members report with their
/// heartbeats (Heartbeat version 1) for the partitions they own. A scenario may change
/// it while the members run.
#[derive(Debug)]
pub(crate) struct PartitionLoads {
    values: Vec<AtomicU64>,
}

impl PartitionLoads {
    pub(crate) fn new(loads: &[f64]) -> Self {
        Self {
            values: loads.iter().map(|l| AtomicU64::new(l.to_bits())).collect(),
        }
    }

    pub(crate) fn get(&self, partition: u32) -> Option<f64> {
        self.values
            .get(partition as usize)
            .map(|v| f64::from_bits(v.load(Ordering::Relaxed)))
    }

    /// Replaces every load (as many as given).
    pub(crate) fn set_all(&self, loads: &[f64]) {
        for (v, l) in self.values.iter().zip(loads) {
            v.store(l.to_bits(), Ordering::Relaxed);
        }
    }
}

/// Everything the driver needs to start.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) members: Vec<MemberSpec>,
    pub(crate) per_conn: usize,
    pub(crate) load: Load,
    /// Connections being opened at once.
    pub(crate) connect_concurrency: usize,
    /// Joins outstanding at once (over all connections).
    pub(crate) join_concurrency: usize,
    /// Join as soon as connected; otherwise wait for [`Driver::release_joins`].
    pub(crate) auto_join: bool,
    /// Deliver [`Obs`]ervations.
    pub(crate) observe: bool,
    /// Confirm every expulsion of a live member with a Relinquish at once.
    pub(crate) relinquish: bool,
    /// One Heartbeats request per connection per round instead of one Heartbeat per
    /// member (see the module documentation).
    pub(crate) batch_heartbeats: bool,
    /// How long a member takes to acknowledge a revocation (an application finishing
    /// its work on the partitions); zero: at once.
    pub(crate) ack_delay: Duration,
    /// Loads the members report with their heartbeats; `None`: none.
    pub(crate) loads: Option<std::sync::Arc<PartitionLoads>>,
}

/// Something a member saw, for scenarios that follow semantics.
#[derive(Debug)]
pub(crate) enum Obs {
    Joined {
        member: usize,
        at: Instant,
        /// The member id the coordinator gave it.
        member_id: String,
    },
    JoinFailed {
        member: usize,
        code: ErrorCode,
        message: String,
    },
    Assigned {
        member: usize,
        at: Instant,
        generation: u32,
        partitions: Vec<u32>,
    },
    Revoked {
        member: usize,
        at: Instant,
        generation: u32,
        partitions: Vec<u32>,
    },
    Expelled {
        member: usize,
        at: Instant,
        reason: ExpelReason,
        /// The send time of the member's last heartbeat answered as a member (the
        /// coordinator counted it: the lease it promised runs from no earlier).
        last_answered: Option<Instant>,
    },
    /// A revocation's acknowledgement was answered: the revoke push it answers (which
    /// lists every partition the member is asked for at the time) arrived `pushed`,
    /// the acknowledgement of `partitions` went out `sent` and its answer came `at`.
    Acked {
        member: usize,
        pushed: Instant,
        sent: Instant,
        at: Instant,
        partitions: Vec<u32>,
    },
    /// The member confirmed its stand-down: a Relinquish for it was sent `at`.
    Relinquished { member: usize, at: Instant },
    HeartbeatError {
        member: usize,
        at: Instant,
        code: ErrorCode,
    },
    /// The member's connection closed and its membership is being rejoined.
    Restarting { member: usize },
}

/// A command to one member.
#[derive(Debug)]
pub(crate) enum Cmd {
    /// Stop at once and send nothing more. With `close`, the connection closes once
    /// every member on it is stopped (at once when the member is alone on it); without,
    /// it stays open (a hung process) and still takes pushes. Answers the send time of
    /// the member's last heartbeat.
    Kill {
        member: usize,
        close: bool,
        reply: oneshot::Sender<Option<Instant>>,
    },
    /// Keep heartbeating but stop advancing the progress counter. Answers the send time
    /// of the last heartbeat that advanced it.
    Stall {
        member: usize,
        reply: oneshot::Sender<Option<Instant>>,
    },
    /// Send nothing for `silence` counted from the last heartbeat, then carry on.
    /// Answers the send time of that last heartbeat.
    Pause {
        member: usize,
        silence: Duration,
        reply: oneshot::Sender<Option<Instant>>,
    },
    /// Close the connection (the member must be alone on it), wait `down`, reconnect
    /// and join again with the same instance id. Answers when the connection is closed.
    Restart {
        member: usize,
        down: Duration,
        reply: oneshot::Sender<Option<Instant>>,
    },
}

/// The default number of members per connection: one up to 5,000 members, otherwise
/// enough to stay under `max_connections`.
pub(crate) fn default_members_per_conn(members: usize, max_connections: usize) -> usize {
    if members <= 5_000 {
        1
    } else {
        members.div_ceil(max_connections.max(1)).max(1)
    }
}
