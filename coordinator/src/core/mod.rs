//! The coordinator's deterministic core.
//!
//! A sans-IO state machine: every input carries `now`, outputs are drained with
//! [`Coordinator::poll_output`] and [`Coordinator::take_records`], and the next wake-up
//! is asked for with [`Coordinator::poll_timeout`]. The core never reads a clock, never
//! does I/O and never spawns; `tests/architecture.rs` enforces that.

pub mod assignor;
mod group;
pub mod guards;
pub mod liveness;
pub mod records;
#[cfg(test)]
mod tests;
mod timers;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::{
    ApiKey, CommitOffsetsRequest, CommitOffsetsResponse, CommittedOffset, DescribeGroupResponse,
    ErrorCode, ExpelReason, FetchOffsetsRequest, FetchOffsetsResponse, GroupListing,
    HeartbeatRequest, HeartbeatResponse, JoinRequest, JoinResponse, LeaveMode, LeaveRequest,
    ListGroupsResponse, PartitionResult, Push, Request, Response,
};

use group::{duration_ms, Ctx, Group};
use guards::{Census, Guards, Hold};
use timers::{TimerKey, Timers};

pub use assignor::{Assignor, AssignorKind, TopicPartition};
pub use liveness::{FixedTimeout, LivenessPolicy};
pub use records::{
    GroupSnapshot, HeldSnapshot, InstanceSnapshot, MemberSnapshot, OffsetRecord, Record,
    RestoredState,
};

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
    /// The most lateness a wake-up needs to be taken for a pause of the coordinator
    /// itself (a quarter of the shortest session timeout suffices), and the grace after
    /// a pause in which nobody is expelled for silence (see [`guards`]).
    pub pause_guard: Duration,
    /// Fewest members with open connections a shard needs before the isolation guard
    /// may blame the coordinator's own connectivity for a mass silence (see
    /// [`guards`]). `0` disables the guard.
    pub isolation_min_members: usize,
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
            isolation_min_members: 3,
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
    /// Every cause.
    pub const ALL: [Self; 4] = [Self::Join, Self::Leave, Self::Expulsion, Self::Subscription];

    /// Snake-case name, for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Join => "join",
            Self::Leave => "leave",
            Self::Expulsion => "expulsion",
            Self::Subscription => "subscription",
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
    /// holds expulsions for silence.
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
    /// The isolation guard held a member for as long as it may (one more session
    /// timeout past its deadline) and lets it be expelled.
    IsolationHoldExpired {
        /// Group.
        group: String,
        /// Member.
        member_id: String,
        /// How long past its deadline it was held.
        held_for: Duration,
    },
    /// The core was woken much later than it asked: it extended every deadline and
    /// holds expulsions for silence until `until`.
    PauseDetected {
        /// How late it was woken.
        late_by: Duration,
        /// End of the grace in which queued frames are read before anyone is judged.
        until: Instant,
    },
    /// The grace after a pause is over; expulsions for silence proceed.
    PauseGraceEnded {
        /// How long after the grace's end the core noticed.
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
    assignor: Box<dyn Assignor>,
    groups: HashMap<Arc<str>, Group>,
    timers: Timers,
    outputs: VecDeque<Output>,
    records: Vec<Record>,
    next_member: u64,
    /// Every generation this core ever handed out for a group it has since forgotten
    /// is at most this; a new group starts above it, so a group id never sees a
    /// generation twice. Made durable through the store (see [`RestoredState`]).
    generation_floor: u32,
    /// The latest `now` seen, to express deadlines as durations in snapshots.
    now: Option<Instant>,
    guards: Guards,
    /// Groups whose state changed since the last [`Coordinator::take_records`], so that
    /// call snapshots only them instead of scanning every group.
    dirty: Vec<Arc<str>>,
    /// Members bound to each connection (group, member), so a disconnect touches only
    /// them. Entries may be stale (the member moved on or left); they are checked.
    bound: HashMap<ConnId, Vec<MemberRef>>,
}

/// A member by (group, member id).
type MemberRef = (Arc<str>, Arc<str>);

/// Longest group, topic, member, instance and client id accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// Longest member id the coordinator hands out, in bytes: a static member's id is its
/// instance id, `#`, and a suffix.
pub const MAX_MEMBER_ID_BYTES: usize = 2 * MAX_NAME_BYTES;

fn refuse(key: ApiKey, code: ErrorCode, message: impl Into<String>) -> Response {
    Response::error(key as u16, code, message)
}

impl Coordinator {
    /// An empty coordinator.
    pub fn new(config: CoreConfig) -> Self {
        let assignor = config.assignor.build();
        Self {
            config,
            assignor,
            groups: HashMap::new(),
            timers: Timers::default(),
            outputs: VecDeque::new(),
            records: Vec::new(),
            next_member: 0,
            generation_floor: 0,
            now: None,
            guards: Guards::default(),
            dirty: Vec::new(),
            bound: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Notes the latest `now` an input carried.
    fn tick(&mut self, now: Instant) {
        if self.now.map_or(true, |n| now > n) {
            self.now = Some(now);
        }
    }

    /// Splits `self` into the group table and the context group methods need.
    fn parts(&mut self, now: Instant) -> (&mut HashMap<Arc<str>, Group>, Ctx<'_>) {
        let Self {
            config,
            assignor,
            groups,
            timers,
            outputs,
            records,
            ..
        } = self;
        (
            groups,
            Ctx {
                now,
                config,
                assignor: &**assignor,
                timers,
                outputs,
                records,
            },
        )
    }

    /// Restores groups and offsets loaded from the store. Every member gets fresh
    /// session and progress deadlines counted from `now`: a restart is no one's fault.
    pub fn restore(&mut self, now: Instant, state: RestoredState) {
        self.tick(now);
        self.guards.heard(now);
        self.generation_floor = self.generation_floor.max(state.generation_floor);
        let floor = self.generation_floor;
        let (groups, mut ctx) = self.parts(now);
        for snapshot in state.groups {
            let group = Group::restore(&mut ctx, snapshot);
            groups.insert(group.name.clone(), group);
        }
        for o in state.offsets {
            let group = groups
                .entry(Arc::from(o.group.as_str()))
                .or_insert_with_key(|name| Group::new(name.clone(), floor));
            group
                .offsets
                .insert((o.topic, o.partition), (o.offset, o.metadata));
        }
    }

    /// Handles one request from connection `conn` and returns its response.
    ///
    /// `ApiVersions` is the connection's business and is refused here.
    pub fn handle_request(&mut self, now: Instant, conn: ConnId, request: Request) -> Response {
        self.tick(now);
        if matches!(
            request,
            Request::Join(_)
                | Request::Heartbeat(_)
                | Request::Leave(_)
                | Request::CommitOffsets(CommitOffsetsRequest {
                    member_id: Some(_),
                    ..
                })
        ) {
            self.member_heard(now);
        }
        match request {
            Request::ApiVersions(_) => refuse(
                ApiKey::ApiVersions,
                ErrorCode::InvalidRequest,
                "ApiVersions is answered by the connection, not a group",
            ),
            Request::Join(r) => {
                let group = r.group.clone();
                let response = self.join(now, conn, r);
                if let Response::Join(j) = &response {
                    self.bind(conn, &group, &j.member_id);
                }
                self.note_dirty(&group);
                response
            }
            Request::Heartbeat(r) => self.heartbeat(now, conn, r),
            Request::Leave(r) => {
                let group = r.group.clone();
                let response = self.leave(now, conn, r);
                self.note_dirty(&group);
                response
            }
            Request::CommitOffsets(r) => self.commit(now, conn, r),
            Request::FetchOffsets(r) => self.fetch(r),
            Request::ListGroups => self.list_groups(),
            Request::DescribeGroup(r) => self.describe(now, &r.group),
        }
    }

    fn validate_join(&self, r: &JoinRequest) -> Result<(Duration, Duration, Duration), Response> {
        let bad = |code, msg: String| Err(refuse(ApiKey::Join, code, msg));
        let c = &self.config;
        if r.group.is_empty() || r.group.len() > MAX_NAME_BYTES {
            return bad(
                ErrorCode::InvalidRequest,
                format!("group id must be 1 to {MAX_NAME_BYTES} bytes"),
            );
        }
        if r.join_token == 0 {
            return bad(
                ErrorCode::InvalidRequest,
                "join token must be nonzero".into(),
            );
        }
        let too_long = |s: &Option<String>| s.as_ref().is_some_and(|s| s.len() > MAX_NAME_BYTES);
        if r.client_id.len() > MAX_NAME_BYTES || too_long(&r.instance_id) {
            return bad(
                ErrorCode::InvalidRequest,
                format!("client and instance ids are at most {MAX_NAME_BYTES} bytes"),
            );
        }
        if r.member_id.as_ref().is_some_and(|id| id.len() > MAX_MEMBER_ID_BYTES) {
            return bad(
                ErrorCode::InvalidRequest,
                format!("member ids are at most {MAX_MEMBER_ID_BYTES} bytes"),
            );
        }
        if r.instance_id.as_deref() == Some("") {
            return bad(
                ErrorCode::InvalidRequest,
                "instance id must not be empty".into(),
            );
        }
        if r.subscription.is_empty() {
            return bad(
                ErrorCode::InvalidRequest,
                "subscription must name at least one topic".into(),
            );
        }
        let mut names: Vec<&str> = Vec::with_capacity(r.subscription.len());
        for t in &r.subscription {
            if t.topic.is_empty() || t.topic.len() > MAX_NAME_BYTES {
                return bad(
                    ErrorCode::InvalidRequest,
                    format!("topic names must be 1 to {MAX_NAME_BYTES} bytes"),
                );
            }
            if t.partitions == 0 {
                return bad(
                    ErrorCode::InvalidRequest,
                    format!("topic {:?} must have at least one partition", t.topic),
                );
            }
            names.push(&t.topic);
        }
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return bad(
                ErrorCode::InvalidRequest,
                "subscription names a topic twice".into(),
            );
        }
        let session = Duration::from_millis(u64::from(r.session_timeout_ms));
        if session < c.min_session_timeout || session > c.max_session_timeout {
            return bad(
                ErrorCode::InvalidSessionTimeout,
                format!(
                    "session timeout {session:?} is outside the coordinator's bounds {:?}..={:?}",
                    c.min_session_timeout, c.max_session_timeout
                ),
            );
        }
        let progress = Duration::from_millis(u64::from(r.progress_timeout_ms));
        if progress.is_zero() || progress > c.max_progress_timeout {
            return bad(
                ErrorCode::InvalidRequest,
                format!(
                    "progress timeout {progress:?} must be above zero and at most {:?}",
                    c.max_progress_timeout
                ),
            );
        }
        let rebalance = Duration::from_millis(u64::from(r.rebalance_timeout_ms));
        if rebalance.is_zero() || rebalance > c.max_rebalance_timeout {
            return bad(
                ErrorCode::InvalidRequest,
                format!(
                    "rebalance timeout {rebalance:?} must be above zero and at most {:?}",
                    c.max_rebalance_timeout
                ),
            );
        }
        Ok((session, progress, rebalance))
    }

    fn join(&mut self, now: Instant, conn: ConnId, r: JoinRequest) -> Response {
        let timeouts = match self.validate_join(&r) {
            Ok(t) => t,
            Err(resp) => return resp,
        };
        let subscription: Vec<(String, u32)> = r
            .subscription
            .iter()
            .map(|t| (t.topic.clone(), t.partitions))
            .collect();
        // Static member ids name their instance, so a request from any older
        // incarnation can be fenced from the id alone (see `Group::gone_reason`).
        let member_id = Arc::<str>::from(match &r.instance_id {
            Some(instance) => format!(
                "{instance}#{}{}",
                self.config.member_id_prefix, self.next_member
            ),
            None => format!("{}{}", self.config.member_id_prefix, self.next_member),
        });
        let max_members = self.config.max_members_per_group;
        // A rejoin naming a member that is gone is told so (a stale incarnation of a
        // static instance is fenced): the member's partitions are lost, and it joins
        // again afresh, or gives up if fenced.
        if let Some(old) = &r.member_id {
            let group = self.groups.get(r.group.as_str());
            let known = group.is_some_and(|g| g.members.contains_key(old.as_str()));
            if !known {
                return Self::member_gone(group, ApiKey::Join, old);
            }
        }
        let floor = self.generation_floor;
        let (groups, mut ctx) = self.parts(now);
        let group = groups
            .entry(Arc::from(r.group.as_str()))
            .or_insert_with_key(|name| Group::new(name.clone(), floor));

        // A rejoin naming a live member, or a retried join (same token, and the same
        // instance, client and subscription: a token that merely collides with another
        // member's is not that member): same member.
        let existing = match &r.member_id {
            Some(id) => group
                .members
                .get_key_value(id.as_str())
                .filter(|(_, m)| r.instance_id.is_none() || m.instance_id == r.instance_id)
                .map(|(k, _)| k.clone()),
            None => group
                .tokens
                .get(&r.join_token)
                .filter(|id| {
                    group.members.get(*id).is_some_and(|m| {
                        m.instance_id == r.instance_id
                            && m.client_id == r.client_id
                            && group.subscription_is(m, &subscription)
                    })
                })
                .cloned(),
        };
        if let Some(id) = existing {
            let resp = Self::rejoin(group, &mut ctx, conn, &id, &subscription, timeouts);
            return resp;
        }

        let replacing = r
            .instance_id
            .as_ref()
            .and_then(|i| group.instance_member(i));
        let replaced = replacing.as_ref().and_then(|id| group.members.get(id));
        if let Err(refusal) = group.check_subscription(&subscription, ctx.config, replaced) {
            return refuse(ApiKey::Join, refusal.code, refusal.message);
        }
        if replacing.is_none() && group.members.len() >= max_members {
            return refuse(
                ApiKey::Join,
                ErrorCode::GroupFull,
                format!(
                    "group {:?} has its maximum of {max_members} members",
                    r.group
                ),
            );
        }
        self.next_member += 1;
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return refuse(ApiKey::Join, ErrorCode::Internal, "group vanished");
        };
        let old_subscription = replacing
            .as_ref()
            .map(|old| group.unsubscribe_for_replacement(old));
        let topics = group.subscribe(&subscription);
        let subscription_changed = old_subscription.is_some_and(|old| old != topics);
        if let Some(instance) = &r.instance_id {
            group.register_instance(instance, member_id.clone());
        }
        let member = group.new_member(
            now,
            member_id.clone(),
            r.instance_id.clone(),
            r.client_id.clone(),
            r.join_token,
            Some(conn),
            timeouts,
            topics,
        );
        match replacing {
            Some(old) => {
                group.replace_member(&mut ctx, &old, member, subscription_changed);
            }
            None => {
                group.insert_member(&mut ctx, member);
                ctx.outputs.push_back(Output::Event(Event::MemberJoined {
                    group: r.group.clone(),
                    member_id: member_id.to_string(),
                    instance_id: r.instance_id.clone(),
                }));
                group.trigger_rebalance(&mut ctx, RebalanceCause::Join);
            }
        }
        Response::Join(JoinResponse {
            member_id: member_id.to_string(),
            generation: group.generation,
            heartbeat_interval_ms: heartbeat_interval_ms(timeouts.0),
        })
    }

    /// A join for a member that is still in the group: rebinds it, applies a changed
    /// subscription or timeouts, and pushes its state again.
    fn rejoin(
        group: &mut Group,
        ctx: &mut Ctx<'_>,
        conn: ConnId,
        id: &Arc<str>,
        subscription: &[(String, u32)],
        timeouts: (Duration, Duration, Duration),
    ) -> Response {
        let now = ctx.now;
        if !group.subscription_is(&group.members[id], subscription) {
            if let Err(refusal) =
                group.check_subscription(subscription, ctx.config, group.members.get(id))
            {
                return refuse(ApiKey::Join, refusal.code, refusal.message);
            }
            group.unsubscribe_for_replacement(id);
            let topics = group.subscribe(subscription);
            if let Some(m) = group.members.get_mut(id) {
                m.subscription = topics;
            }
            group.snapshot_dirty = true;
            group.trigger_rebalance(ctx, RebalanceCause::Subscription);
        }
        let Some(m) = group.members.get_mut(id) else {
            return refuse(ApiKey::Join, ErrorCode::Internal, "member vanished");
        };
        m.set_timeouts(timeouts);
        m.heard(now);
        m.conn = Some(conn);
        // A shorter timeout can bring a deadline forward.
        group.schedule_member(ctx, id);
        let generation = group.generation;
        group.push_state(ctx, id);
        Response::Join(JoinResponse {
            member_id: id.to_string(),
            generation,
            heartbeat_interval_ms: heartbeat_interval_ms(timeouts.0),
        })
    }

    /// The error for a request naming a member that is not in the group.
    fn member_gone(group: Option<&Group>, key: ApiKey, member_id: &str) -> Response {
        match group.and_then(|g| g.gone_reason(member_id)) {
            Some(ExpelReason::Fenced) => refuse(
                key,
                ErrorCode::FencedInstance,
                format!("member {member_id:?} was fenced: a newer process took its instance id"),
            ),
            Some(ExpelReason::Left) | None => refuse(
                key,
                ErrorCode::UnknownMember,
                format!("member {member_id:?} is not in the group"),
            ),
            Some(reason) => refuse(
                key,
                ErrorCode::MemberExpelled,
                format!("member {member_id:?} was expelled: {}", reason.as_str()),
            ),
        }
    }

    fn heartbeat(&mut self, now: Instant, conn: ConnId, r: HeartbeatRequest) -> Response {
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return Self::member_gone(None, ApiKey::Heartbeat, &r.member_id);
        };
        let group_generation = group.generation;
        let Some(m) = group.members.get_mut(r.member_id.as_str()) else {
            return Self::member_gone(Some(group), ApiKey::Heartbeat, &r.member_id);
        };
        if r.generation > group_generation {
            return refuse(
                ApiKey::Heartbeat,
                ErrorCode::IllegalGeneration,
                format!(
                    "generation {} is newer than the group's {group_generation}",
                    r.generation
                ),
            );
        }
        m.heard(now);
        m.record_sequence(r.sequence);
        m.report_progress(now, r.progress);
        let rebound = m.conn != Some(conn);
        m.conn = Some(conn);
        let stale = r.generation != m.generation;
        let session_timeout_ms = duration_ms(m.session_timeout) as u32;
        // The common case ends here: no acknowledgement, same connection, same generation.
        if r.acked_revocations.is_empty() && !rebound && !stale {
            return Response::Heartbeat(HeartbeatResponse {
                generation: m.generation,
                session_timeout_ms,
            });
        }
        let id = m.id.clone();
        let acked: Vec<TopicPartition> = r
            .acked_revocations
            .iter()
            .flat_map(|tps| {
                tps.partitions
                    .iter()
                    .filter_map(|&p| group.resolve(&tps.topic, p))
            })
            .collect();
        if rebound || stale {
            group.push_state(&mut ctx, &id);
        }
        group.acknowledge_and_grant(&mut ctx, &id, &acked);
        let generation = group.members[&id].generation;
        if rebound {
            self.bind(conn, &r.group, &r.member_id);
        }
        self.note_dirty(&r.group);
        Response::Heartbeat(HeartbeatResponse {
            generation,
            session_timeout_ms,
        })
    }

    fn leave(&mut self, now: Instant, _conn: ConnId, r: LeaveRequest) -> Response {
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return Self::member_gone(None, ApiKey::Leave, &r.member_id);
        };
        let Some(id) = group
            .members
            .get_key_value(r.member_id.as_str())
            .map(|(k, _)| k.clone())
        else {
            return Self::member_gone(Some(group), ApiKey::Leave, &r.member_id);
        };
        let Some(m) = group.members.get_mut(&id) else {
            return refuse(ApiKey::Leave, ErrorCode::Internal, "member vanished");
        };
        match r.mode {
            // The member stopped acting on everything before it asked: its lease ends
            // now, and its partitions move at once.
            LeaveMode::Released => m.lease_until = now,
            // The application may still be acting: the partitions wait for the lease.
            LeaveMode::Unconfirmed => {}
            // A static member's process stopped acting and goes away; the member stays
            // (no rebalance) until its next process takes over, at once, or its session
            // expires. A dynamic member can never be taken over: it simply leaves.
            LeaveMode::StandDown => {
                m.lease_until = now;
                if m.instance_id.is_some() {
                    m.conn = None;
                    group.snapshot_dirty = true;
                    return Response::Leave;
                }
            }
        }
        group.remove_member(&mut ctx, &id, ExpelReason::Left, "left".to_owned());
        group.reconcile(&mut ctx);
        Response::Leave
    }

    fn commit(&mut self, now: Instant, conn: ConnId, r: CommitOffsetsRequest) -> Response {
        let max_metadata = self.config.max_metadata_bytes;
        let floor = self.generation_floor;
        let (groups, mut ctx) = self.parts(now);
        let group_name = r.group.clone();
        let reject = |ctx: &mut Ctx<'_>, reason: ErrorCode| {
            ctx.outputs.push_back(Output::Event(Event::CommitRejected {
                group: group_name.clone(),
                reason,
            }));
        };
        if r.group.is_empty() || r.group.len() > MAX_NAME_BYTES {
            return refuse(
                ApiKey::CommitOffsets,
                ErrorCode::InvalidRequest,
                format!("group id must be 1 to {MAX_NAME_BYTES} bytes"),
            );
        }
        let member = match &r.member_id {
            None => {
                let group = groups
                    .entry(Arc::from(r.group.as_str()))
                    .or_insert_with_key(|name| Group::new(name.clone(), floor));
                if !group.members.is_empty() {
                    reject(&mut ctx, ErrorCode::InvalidRequest);
                    return refuse(
                        ApiKey::CommitOffsets,
                        ErrorCode::InvalidRequest,
                        "commits without a member id are accepted only while the group has no members",
                    );
                }
                None
            }
            Some(member_id) => {
                let found = groups.get_mut(r.group.as_str()).and_then(|g| {
                    g.members
                        .get_key_value(member_id.as_str())
                        .map(|(k, _)| k.clone())
                });
                let Some(id) = found else {
                    let resp = Self::member_gone(
                        groups.get(r.group.as_str()),
                        ApiKey::CommitOffsets,
                        member_id,
                    );
                    if let Response::Error(e) = &resp {
                        reject(&mut ctx, e.code);
                    }
                    return resp;
                };
                Some(id)
            }
        };
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return refuse(ApiKey::CommitOffsets, ErrorCode::Internal, "group vanished");
        };
        let mut rebound = false;
        if r.generation > group.generation && member.is_some() {
            reject(&mut ctx, ErrorCode::IllegalGeneration);
            return refuse(
                ApiKey::CommitOffsets,
                ErrorCode::IllegalGeneration,
                format!(
                    "generation {} is newer than the group's {}",
                    r.generation, group.generation
                ),
            );
        }
        if let Some(id) = &member {
            let m = group.members.get_mut(id).expect("member exists");
            m.heard(now);
            if m.conn != Some(conn) {
                m.conn = Some(conn);
                group.push_state(&mut ctx, id);
                rebound = true;
            }
        }
        let mut results = Vec::with_capacity(r.offsets.len());
        let mut accepted = 0;
        for o in r.offsets {
            let error = if o.metadata.len() > max_metadata {
                ErrorCode::MetadataTooLarge
            } else if let Some(id) = &member {
                let m = &group.members[id];
                match group.resolve(&o.topic, o.partition) {
                    Some(tp) if m.owned.contains(&tp) => ErrorCode::None,
                    Some(tp) if m.released.contains(&tp) => ErrorCode::PartitionRevoked,
                    _ => ErrorCode::NotOwner,
                }
            } else {
                ErrorCode::None
            };
            if error == ErrorCode::None {
                accepted += 1;
                ctx.records.push(Record::Offset(OffsetRecord {
                    group: r.group.clone(),
                    topic: o.topic.clone(),
                    partition: o.partition,
                    offset: o.offset,
                    metadata: o.metadata.clone(),
                }));
                group
                    .offsets
                    .insert((o.topic.clone(), o.partition), (o.offset, o.metadata));
            } else {
                reject(&mut ctx, error);
            }
            results.push(PartitionResult {
                topic: o.topic,
                partition: o.partition,
                error,
            });
        }
        if accepted > 0 {
            ctx.outputs.push_back(Output::Event(Event::CommitsAccepted {
                group: r.group.clone(),
                count: accepted,
            }));
        }
        if let (true, Some(id)) = (rebound, &member) {
            self.bind(conn, &r.group, id);
        }
        Response::CommitOffsets(CommitOffsetsResponse { results })
    }

    fn fetch(&self, r: FetchOffsetsRequest) -> Response {
        let Some(group) = self.groups.get(r.group.as_str()) else {
            return Response::FetchOffsets(FetchOffsetsResponse::default());
        };
        let offsets = group
            .offsets
            .iter()
            .filter(|((topic, _), _)| r.topics.is_empty() || r.topics.iter().any(|t| t == topic))
            .map(|((topic, partition), (offset, metadata))| CommittedOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: *offset,
                metadata: metadata.clone(),
            })
            .collect();
        Response::FetchOffsets(FetchOffsetsResponse { offsets })
    }

    fn list_groups(&self) -> Response {
        let mut groups: Vec<GroupListing> = self
            .groups
            .values()
            .map(|g| GroupListing {
                group: g.name.to_string(),
                state: g.state(),
                generation: g.generation,
                members: g.members.len() as u32,
            })
            .collect();
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        Response::ListGroups(ListGroupsResponse { groups })
    }

    fn describe(&self, now: Instant, group: &str) -> Response {
        let Some(g) = self.groups.get(group) else {
            return refuse(
                ApiKey::DescribeGroup,
                ErrorCode::UnknownGroup,
                format!("no group {group:?}"),
            );
        };
        Response::DescribeGroup(DescribeGroupResponse {
            group: g.name.to_string(),
            state: g.state(),
            generation: g.generation,
            assignor: self.assignor.name().to_owned(),
            members: g
                .members
                .values()
                .map(|m| g.describe_member(m, now))
                .collect(),
        })
    }

    /// A frame from a member of this shard arrived at `now`.
    fn member_heard(&mut self, now: Instant) {
        self.observe_traffic(now);
    }

    /// The server read a member frame at `at`, on any connection of any shard. The
    /// shell reports the whole server's latest before each batch, so the isolation
    /// guard judges silence across the server, not within one shard. Ends a held
    /// isolation: members that were not already overdue when the silence began get the
    /// silent time back; members silent since before it get nothing.
    pub fn observe_traffic(&mut self, at: Instant) {
        self.guards.heard(at);
        let Some(since) = self.guards.isolated_since else {
            return;
        };
        if at <= since {
            return;
        }
        self.guards.isolated_since = None;
        let silent_for = at.saturating_duration_since(since);
        for group in self.groups.values_mut() {
            for m in group.members.values_mut() {
                if !guards::silent_before(since, m.liveness.last_heard(), m.session_timeout) {
                    m.extend(silent_for);
                }
            }
        }
        self.outputs
            .push_back(Output::Event(Event::IsolationEnded { silent_for }));
    }

    /// How late a wake-up must be to count as a pause of the coordinator: a quarter of
    /// the shortest session timeout in the shard (a stall that ate that much of a
    /// member's session is the coordinator's, not the member's), at least
    /// [`guards::PAUSE_FLOOR`] and at most [`CoreConfig::pause_guard`]. Scans the
    /// members; asked only when a wake-up is later than the floor.
    fn pause_threshold(&self) -> Duration {
        let shortest = self
            .groups
            .values()
            .flat_map(|g| g.members.values())
            .map(|m| m.session_timeout)
            .min()
            .unwrap_or(self.config.pause_guard);
        (shortest / 4).clamp(
            guards::PAUSE_FLOOR,
            self.config.pause_guard.max(guards::PAUSE_FLOOR),
        )
    }

    /// Whether a guard holds the expiry of `member`, whose session expired at `now`.
    fn silence_hold(&mut self, now: Instant, group: &str, member: &str) -> Option<Hold> {
        let m = self.groups.get(group)?.members.get(member)?;
        let deadline = m.session_deadline();
        if deadline > now {
            return None;
        }
        if let Some(until) = self.guards.pause_grace_until.filter(|u| now < *u) {
            return Some(Hold::Pause { until });
        }
        let session = m.session_timeout;
        let min = self.config.isolation_min_members;
        if min == 0 || m.conn.is_none() || self.guards.server_silence(now) < session / 2 {
            return None;
        }
        let census = match self.guards.census {
            Some((at, census)) if at == now => census,
            _ => {
                let mut census = Census::default();
                for g in self.groups.values() {
                    for m in g.members.values() {
                        census.count(
                            now,
                            m.conn.is_some(),
                            m.liveness.last_heard(),
                            m.session_timeout,
                        );
                    }
                }
                self.guards.census = Some((now, census));
                census
            }
        };
        if !census.mass_silence(min) {
            return None;
        }
        let bound = deadline + session;
        if now >= bound {
            self.outputs
                .push_back(Output::Event(Event::IsolationHoldExpired {
                    group: group.to_owned(),
                    member_id: member.to_owned(),
                    held_for: now.saturating_duration_since(deadline),
                }));
            return None;
        }
        if self.guards.isolated_since.is_none() {
            let since = self.guards.last_frame_at.unwrap_or(now);
            self.guards.isolated_since = Some(since);
            self.outputs
                .push_back(Output::Event(Event::IsolationSuspected {
                    silent_for: now.saturating_duration_since(since),
                    members: census.connected,
                }));
        }
        Some(Hold::Isolation {
            recheck: bound.min(now + session / 4),
        })
    }

    /// Connection `conn` closed. Its members keep their sessions and may resume on
    /// another connection.
    ///
    /// Costs O(members that were bound to `conn`), not O(members).
    pub fn handle_disconnect(&mut self, now: Instant, conn: ConnId) {
        self.tick(now);
        for (group, member) in self.bound.remove(&conn).unwrap_or_default() {
            let m = self
                .groups
                .get_mut(&group)
                .and_then(|g| g.members.get_mut(&member));
            if let Some(m) = m {
                if m.conn == Some(conn) {
                    m.conn = None;
                }
            }
        }
    }

    /// Records that `member` of `group` now talks over `conn`.
    fn bind(&mut self, conn: ConnId, group: &str, member: &str) {
        let Some(g) = self.groups.get(group) else {
            return;
        };
        let Some((id, _)) = g.members.get_key_value(member) else {
            return;
        };
        let entry = (g.name.clone(), id.clone());
        let list = self.bound.entry(conn).or_default();
        list.push(entry);
        // A long-lived connection whose members come and go would pile up stale
        // entries; drop them whenever the list doubles.
        if list.len() >= 64 && list.len().is_power_of_two() {
            let groups = &self.groups;
            list.retain(|(group, member)| {
                groups
                    .get(group)
                    .and_then(|g| g.members.get(member))
                    .is_some_and(|m| m.conn == Some(conn))
            });
        }
    }

    /// Runs every timer due at or before `now`.
    ///
    /// If `now` is far past the earliest deadline the core asked to be woken for (more
    /// than a quarter of the shortest session timeout, capped at
    /// [`CoreConfig::pause_guard`]), the coordinator itself was not running: every
    /// member's deadlines are shifted by the delay first, and nobody is expelled for
    /// silence for one more `pause_guard`, so that frames queued during the pause are
    /// read before anyone is judged (see [`guards`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        if let Some(expected) = self.timers.peek() {
            let late_by = now.saturating_duration_since(expected);
            if late_by > guards::PAUSE_FLOOR && late_by > self.pause_threshold() {
                for group in self.groups.values_mut() {
                    for m in group.members.values_mut() {
                        m.extend(late_by);
                    }
                    for (until, _) in &mut group.held {
                        *until += late_by;
                    }
                }
                let until = now + self.config.pause_guard;
                self.guards.pause_grace_until = Some(until);
                self.outputs
                    .push_back(Output::Event(Event::PauseDetected { late_by, until }));
            }
        }
        if let Some(until) = self.guards.pause_grace_until.filter(|u| now >= *u) {
            self.guards.pause_grace_until = None;
            self.outputs
                .push_back(Output::Event(Event::PauseGraceEnded {
                    late_by: now.saturating_duration_since(until),
                }));
        }
        let mut disposable = Vec::new();
        while let Some((at, key)) = self.timers.pop_due(now) {
            match key {
                TimerKey::Member { group, member } => {
                    let hold = self.silence_hold(now, &group, &member);
                    let (groups, mut ctx) = self.parts(now);
                    if let Some(g) = groups.get_mut(&group) {
                        g.on_member_timer(&mut ctx, &member, at, hold);
                        if g.is_disposable() {
                            disposable.push(group.clone());
                        }
                    }
                    self.note_dirty(&group);
                }
                TimerKey::Group(group) => {
                    let (groups, mut ctx) = self.parts(now);
                    if let Some(g) = groups.get_mut(&group) {
                        g.on_group_timer(&mut ctx, at);
                        if g.is_disposable() {
                            disposable.push(group.clone());
                        }
                    }
                    self.note_dirty(&group);
                }
            }
        }
        for name in disposable {
            self.dispose_if_unused(now, &name);
        }
    }

    /// Forgets a group that has no members, offsets or held partitions, after writing
    /// its final (empty) snapshot.
    fn dispose_if_unused(&mut self, now: Instant, name: &str) {
        if let Some(g) = self.groups.get(name) {
            if g.is_disposable() {
                let snapshot = g.snapshot(now);
                self.generation_floor = self.generation_floor.max(g.generation);
                self.records.push(Record::Group(snapshot));
                self.groups.remove(name);
            }
        }
    }

    /// When the core next needs [`Self::handle_timeout`], if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek()
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Takes every record produced since the last call. The shell must make them
    /// durable before it sends the responses and pushes of the same inputs.
    ///
    /// Each changed group is snapshotted once per call however many inputs changed it,
    /// so a shell that calls this once per batch of inputs writes each group once.
    pub fn take_records(&mut self) -> Vec<Record> {
        let mut names = std::mem::take(&mut self.dirty);
        names.sort();
        for name in names {
            let Some(now) = self.now else { break };
            if let Some(g) = self.groups.get_mut(&name) {
                g.listed = false;
                if g.snapshot_dirty {
                    g.snapshot_dirty = false;
                    let snapshot = g.snapshot(now);
                    self.records.push(Record::Group(snapshot));
                }
            }
        }
        std::mem::take(&mut self.records)
    }

    /// How many records [`Self::take_records`] would return at least: a shell compares
    /// it before and after an input to learn whether that input changed durable state.
    pub fn records_pending(&self) -> usize {
        self.records.len() + self.dirty.len()
    }

    /// Puts `group` on the list of groups to snapshot if its state changed.
    fn note_dirty(&mut self, group: &str) {
        if let Some(g) = self.groups.get_mut(group) {
            if g.snapshot_dirty && !g.listed {
                g.listed = true;
                self.dirty.push(g.name.clone());
            }
        }
    }

    /// The store found `group` empty for longer than the offsets retention; the core,
    /// which is ahead of the store, decides. Returns whether the group was deleted.
    ///
    /// A group with members (one may have joined while its snapshot was still on its way
    /// to the store), or with partitions held for an expelled member, is kept and
    /// nothing is recorded; the store still finds it expired on a later pass if it stays
    /// empty. Otherwise the group is forgotten, offsets and all, and a
    /// [`Record::GroupDeleted`] asks the store to do the same, in order with every other
    /// record. A group the core does not know is deleted too: the store may hold
    /// something the core does not.
    pub fn remove_offsets(&mut self, group: &str) -> bool {
        if let Some(g) = self.groups.get(group) {
            if !g.members.is_empty() || !g.held.is_empty() {
                return false;
            }
            self.generation_floor = self.generation_floor.max(g.generation);
            // Out of the table, so no dirty snapshot of it follows the deletion. Its
            // timer entries are dropped when they fire (or re-check a new group of the
            // same name, as any early entry does).
            self.groups.remove(group);
        }
        self.records.push(Record::GroupDeleted {
            group: group.to_owned(),
        });
        true
    }

    /// Counts for gauges at `now`.
    pub fn stats(&self, now: Instant) -> CoreStats {
        let mut stats = CoreStats {
            groups: self.groups.len(),
            ..CoreStats::default()
        };
        for g in self.groups.values() {
            for m in g.members.values() {
                match m.liveness.liveness(now) {
                    rollcall_protocol::Liveness::Alive => stats.members_alive += 1,
                    rollcall_protocol::Liveness::Suspect => stats.members_suspect += 1,
                }
            }
        }
        stats
    }

    /// Number of timer entries (for tests and memory accounting).
    pub fn timer_entries(&self) -> usize {
        self.timers.len()
    }
}

/// The heartbeat interval suggested for a session timeout: a third of it, so a session
/// survives two lost beats.
fn heartbeat_interval_ms(session: Duration) -> u32 {
    u32::try_from(session.as_millis() / 3)
        .unwrap_or(u32::MAX)
        .max(1)
}
