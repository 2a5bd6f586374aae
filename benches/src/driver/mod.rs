//! The load generator: members spoken for on the raw protocol, many per connection.
//!
//! Each connection is one task owning a `Framed<TcpStream, Codec>`. It connects,
//! handshakes, joins its members (bounded by a global join semaphore, or all at once
//! when a barrier is released), and then drives them:
//!
//! - **periodic** heartbeats on a global timeline: member `i` of `n` beats at
//!   `start + (i / n) * period + k * period`. Latency is measured from that intended
//!   send time, so a generator or coordinator that falls behind shows up in the figures
//!   instead of silently lowering the offered rate (no coordinated omission);
//! - **closed-loop** heartbeats: each member keeps one heartbeat outstanding;
//! - **commits**: each member keeps commits of its owned partitions outstanding, with
//!   periodic heartbeats beside them.
//!
//! With [`Plan::batch_heartbeats`], a connection renews its members with one Heartbeats
//! request per round instead of one Heartbeat each: its members share the place on the
//! timeline of its first member, and the beats due when its timers fire go in one frame
//! (closed loop: one such frame outstanding per connection, carrying every active
//! member). Each result is handled as the answer to that member's lone Heartbeat, and
//! latency is recorded per member from its intended send time as without batching.
//!
//! Revocations are acknowledged at once by a heartbeat, as a prompt application would.
//! With [`Plan::relinquish`], a member told it was expelled (an Expelled push, or a
//! `member_expelled` answer) confirms its stand-down at once with a Relinquish, as an
//! application that takes the `Lost` event instantly would (a paused member, once its
//! pause is over). Scenarios steer single members (kill, stall, pause, restart) through commands, and
//! may ask for every push and join outcome as an [`Obs`]ervation.

mod events;
mod task;

use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{FutureExt, SinkExt, StreamExt};
use rollcall_client::raw::Transport;
use rollcall_protocol::{
    ApiKey, Body, CommitOffsetsRequest, ErrorCode, ExpelReason, Frame, HeartbeatRequest,
    HeartbeatResult, HeartbeatsRequest, JoinRequest, OffsetCommit, Push, RelinquishRequest,
    Request, Response, TopicPartitions, TopicSubscription, CURRENT_VERSION, DEFAULT_MAX_FRAME_SIZE,
};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::stats::SharedHistogram;
use crate::target::Endpoint;

/// The one topic every member subscribes to.
pub(crate) const TOPIC: &str = "t0";

/// Latency samples a connection buffers before adding them to the shared histograms.
const LOCAL_SAMPLES: usize = 128;

/// Time allowed for a TCP connect plus the handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Connect attempts per connection before giving up.
const CONNECT_ATTEMPTS: u32 = 5;

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
}

/// Something a member saw, for scenarios that follow semantics.
#[derive(Debug)]
pub(crate) enum Obs {
    Joined {
        member: usize,
        at: Instant,
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
    /// The member confirmed its stand-down: a Relinquish for it was sent `at`.
    Relinquished {
        member: usize,
        at: Instant,
    },
    HeartbeatError {
        member: usize,
        at: Instant,
        code: ErrorCode,
    },
    /// The member's connection closed and its membership is being rejoined.
    Restarting {
        member: usize,
    },
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

/// Counters shared by every connection.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) conns_ready: AtomicU64,
    pub(crate) conns_failed: AtomicU64,
    pub(crate) conns_lost: AtomicU64,
    pub(crate) joins_sent: AtomicU64,
    pub(crate) joins_ok: AtomicU64,
    pub(crate) joins_err: AtomicU64,
    /// Heartbeats sent: renewals, each member's beat counted once, batched or not.
    pub(crate) hb_sent: AtomicU64,
    /// Frames that carried the periodic or closed-loop heartbeats (a Heartbeat, or a
    /// Heartbeats request with many beats); revocation acknowledgements not included.
    pub(crate) hb_frames_sent: AtomicU64,
    /// Of those, frames whose (first) beat was intended in the measured window.
    pub(crate) hb_window_frames: AtomicU64,
    pub(crate) hb_ok: AtomicU64,
    pub(crate) hb_err: AtomicU64,
    pub(crate) hb_window_sent: AtomicU64,
    pub(crate) hb_window_answered: AtomicU64,
    pub(crate) hb_window_late: AtomicU64,
    pub(crate) acks_sent: AtomicU64,
    pub(crate) commit_requests: AtomicU64,
    pub(crate) commit_answers: AtomicU64,
    pub(crate) commit_offsets_ok: AtomicU64,
    pub(crate) commit_offsets_err: AtomicU64,
    pub(crate) commit_window_ok: AtomicU64,
    pub(crate) commit_window_answers: AtomicU64,
    pub(crate) commit_window_err: AtomicU64,
    pub(crate) pushes_assignment: AtomicU64,
    pub(crate) pushes_revoke: AtomicU64,
    pub(crate) expelled_session: AtomicU64,
    pub(crate) expelled_progress: AtomicU64,
    pub(crate) expelled_rebalance: AtomicU64,
    pub(crate) expelled_fenced: AtomicU64,
    pub(crate) shutdown_pushes: AtomicU64,
    pub(crate) relinquish_sent: AtomicU64,
    pub(crate) relinquish_ok: AtomicU64,
    pub(crate) relinquish_err: AtomicU64,
    pub(crate) protocol_errors: AtomicU64,
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    pub(crate) fn expelled(&self) -> u64 {
        Self::get(&self.expelled_session)
            + Self::get(&self.expelled_progress)
            + Self::get(&self.expelled_rebalance)
            + Self::get(&self.expelled_fenced)
    }
}

/// What every connection task shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The time base of the heartbeat timeline and of the measurement window.
    pub(crate) start: Instant,
    pub(crate) counters: Counters,
    /// Heartbeat latency from the intended send time.
    pub(crate) hb_intended: SharedHistogram,
    /// Heartbeat latency from the actual send time.
    pub(crate) hb_service: SharedHistogram,
    pub(crate) commit_latency: SharedHistogram,
    pub(crate) join_latency: SharedHistogram,
    window_from: AtomicU64,
    window_until: AtomicU64,
    pub(crate) stop: CancellationToken,
    join_go: CancellationToken,
    connect_permits: Arc<Semaphore>,
    join_permits: Arc<Semaphore>,
    observations: Option<mpsc::UnboundedSender<Obs>>,
    load: Load,
    members: usize,
    relinquish: bool,
    batch: bool,
}

impl Shared {
    fn new(plan: &Plan, observations: Option<mpsc::UnboundedSender<Obs>>) -> Self {
        let join_go = CancellationToken::new();
        if plan.auto_join {
            join_go.cancel();
        }
        let shards = 64;
        Self {
            start: Instant::now(),
            counters: Counters::default(),
            hb_intended: SharedHistogram::new(shards),
            hb_service: SharedHistogram::new(shards),
            commit_latency: SharedHistogram::new(shards),
            join_latency: SharedHistogram::new(shards),
            window_from: AtomicU64::new(u64::MAX),
            window_until: AtomicU64::new(u64::MAX),
            stop: CancellationToken::new(),
            join_go,
            connect_permits: Arc::new(Semaphore::new(plan.connect_concurrency.max(1))),
            join_permits: Arc::new(Semaphore::new(plan.join_concurrency.max(1))),
            observations,
            load: plan.load,
            members: plan.members.len(),
            relinquish: plan.relinquish,
            batch: plan.batch_heartbeats,
        }
    }

    /// What the connections of a generator of heartbeats alone share (`floor`'s, which
    /// joins no member): the counters, latency histograms, measurement window and stop
    /// that the driver's connections share, counted and read the same way.
    pub(crate) fn heartbeats_only(load: Load, batch_heartbeats: bool) -> Self {
        let plan = Plan {
            members: Vec::new(),
            per_conn: 1,
            load,
            connect_concurrency: 1,
            join_concurrency: 1,
            auto_join: true,
            observe: false,
            relinquish: false,
            batch_heartbeats,
        };
        Self::new(&plan, None)
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether a heartbeat intended at `t` is measured (see [`Shared::set_window`]).
    pub(crate) fn in_window(&self, t: Instant) -> bool {
        let n = self.nanos(t);
        n >= self.window_from.load(Ordering::Relaxed)
            && n < self.window_until.load(Ordering::Relaxed)
    }

    /// Measure heartbeats intended (and commits sent) in `[from, until)`.
    pub(crate) fn set_window(&self, from: Instant, until: Instant) {
        self.window_until
            .store(self.nanos(until), Ordering::Relaxed);
        self.window_from.store(self.nanos(from), Ordering::Relaxed);
    }

    /// The first heartbeat slot of `member` on the global timeline at or after `t`:
    /// member `i` of `n` beats at `start + (i / n) * period + k * period`.
    pub(crate) fn slot_at_or_after(&self, member: usize, period: Duration, t: Instant) -> Instant {
        let index = member as u128;
        let members = self.members.max(1) as u128;
        let period_ns = period.as_nanos().max(1);
        let phase = Duration::from_nanos(u64::try_from(period_ns * index / members).unwrap_or(0));
        let origin = self.start + phase;
        if t <= origin {
            return origin;
        }
        let since = (t - origin).as_nanos();
        let k = since.div_ceil(period_ns);
        origin + Duration::from_nanos(u64::try_from(k * period_ns).unwrap_or(u64::MAX / 2))
    }

    fn observe(&self, obs: Obs) {
        if let Some(tx) = &self.observations {
            let _ = tx.send(obs);
        }
    }
}

/// A running load generator.
#[derive(Debug)]
pub(crate) struct Driver {
    pub(crate) shared: Arc<Shared>,
    conns: Vec<mpsc::UnboundedSender<Cmd>>,
    per_conn: usize,
    tasks: Vec<JoinHandle<()>>,
    pub(crate) observations: Option<mpsc::UnboundedReceiver<Obs>>,
    pub(crate) connections: usize,
}

impl Driver {
    /// Spawns every connection task on the current runtime; returns at once.
    pub(crate) fn start(endpoint: Endpoint, plan: Plan) -> Self {
        let per_conn = plan.per_conn.max(1);
        let (obs_tx, obs_rx) = if plan.observe {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let shared = Arc::new(Shared::new(&plan, obs_tx));
        let mut conns = Vec::new();
        let mut tasks = Vec::new();
        for (conn_index, chunk) in plan.members.chunks(per_conn).enumerate() {
            let members: Vec<MemberState> = chunk
                .iter()
                .enumerate()
                .map(|(j, spec)| MemberState::new(conn_index * per_conn + j, spec.clone()))
                .collect();
            let (tx, rx) = mpsc::unbounded_channel();
            conns.push(tx);
            let task = ConnTask {
                shared: shared.clone(),
                key: conn_index,
                endpoint: endpoint.clone(),
                members,
                by_id: HashMap::new(),
                commands: rx,
                pending: HashMap::new(),
                next_correlation: 1,
                timers: BinaryHeap::new(),
                local_intended: Vec::with_capacity(LOCAL_SAMPLES),
                local_service: Vec::with_capacity(LOCAL_SAMPLES),
                local_commit: Vec::with_capacity(LOCAL_SAMPLES),
                local_join: Vec::with_capacity(LOCAL_SAMPLES),
                outbox: Vec::new(),
                joins_waiting: 0,
                max_frame_size: DEFAULT_MAX_FRAME_SIZE,
                rounds_outstanding: 0,
            };
            tasks.push(tokio::spawn(task.run()));
        }
        let connections = conns.len();
        Self {
            shared,
            conns,
            per_conn,
            tasks,
            observations: obs_rx,
            connections,
        }
    }

    /// Lets every connection send its joins (when the plan did not join at once).
    pub(crate) fn release_joins(&self) {
        self.shared.join_go.cancel();
    }

    /// Sends a command to the member's connection.
    pub(crate) fn command(&self, cmd: Cmd) {
        let member = match &cmd {
            Cmd::Kill { member, .. }
            | Cmd::Stall { member, .. }
            | Cmd::Pause { member, .. }
            | Cmd::Restart { member, .. } => *member,
        };
        if let Some(tx) = self.conns.get(member / self.per_conn) {
            let _ = tx.send(cmd);
        }
    }

    /// Waits until every connection is ready or failed, or `limit` passes.
    pub(crate) async fn wait_connected(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let c = &self.shared.counters;
        while Instant::now() < deadline {
            let done = Counters::get(&c.conns_ready) + Counters::get(&c.conns_failed);
            if done >= self.connections as u64 {
                return Counters::get(&c.conns_failed) == 0;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// Waits until every member's join was answered, or `limit` passes, or a
    /// connection is lost (the coordinator closed it).
    pub(crate) async fn wait_joined(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let c = &self.shared.counters;
        let members = self.shared.members as u64;
        while Instant::now() < deadline {
            let lost = Counters::get(&c.conns_lost);
            if lost > 0 {
                eprintln!("{lost} connection(s) closed by the coordinator while joining");
                return false;
            }
            let answered = Counters::get(&c.joins_ok) + Counters::get(&c.joins_err);
            let failed_conns = Counters::get(&c.conns_failed);
            if answered + failed_conns * self.per_conn as u64 >= members {
                return Counters::get(&c.joins_err) == 0 && failed_conns == 0;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// Stops every connection (closing them) and waits for the tasks, at most `limit`.
    pub(crate) async fn stop(self, limit: Duration) {
        self.shared.stop.cancel();
        let deadline = tokio::time::Instant::now() + limit;
        for task in self.tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// A timer entry: when, which member, and the member's timer stamp when scheduled
/// (an entry whose stamp is stale is skipped).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct TimerEntry(std::cmp::Reverse<Instant>, usize, u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not joined yet (or rejoining after a restart).
    Unjoined,
    /// Join sent, not answered.
    Joining,
    Active,
    /// Killed, expelled or refused: sends nothing more.
    Dead,
}

#[derive(Debug)]
struct MemberState {
    index: usize,
    spec: MemberSpec,
    phase: Phase,
    member_id: Option<String>,
    generation: u32,
    sequence: u64,
    progress: u64,
    progress_frozen: bool,
    last_progress_sent: Option<Instant>,
    last_sent: Option<Instant>,
    /// Send time of the last heartbeat answered as a member.
    last_answered: Option<Instant>,
    /// Expelled while paused: confirm the stand-down when the pause is over.
    relinquish_at: Option<Instant>,
    relinquished: bool,
    timer_stamp: u64,
    /// Resume after a pause, at this time.
    paused_until: Option<Instant>,
    owned: Vec<u32>,
    commit_cursor: usize,
    commits_inflight: usize,
    next_offset: i64,
}

impl MemberState {
    fn new(index: usize, spec: MemberSpec) -> Self {
        Self {
            index,
            spec,
            phase: Phase::Unjoined,
            member_id: None,
            generation: 0,
            sequence: 0,
            progress: 0,
            progress_frozen: false,
            last_progress_sent: None,
            last_sent: None,
            last_answered: None,
            relinquish_at: None,
            relinquished: false,
            timer_stamp: 0,
            paused_until: None,
            owned: Vec::new(),
            commit_cursor: 0,
            commits_inflight: 0,
            next_offset: 1,
        }
    }
}

#[derive(Debug)]
enum Pending {
    Join {
        local: usize,
        sent: Instant,
        _permit: OwnedSemaphorePermit,
    },
    Heartbeat {
        local: usize,
        intended: Instant,
        sent: Instant,
    },
    Ack {
        local: usize,
        sent: Instant,
    },
    Commit {
        local: usize,
        sent: Instant,
    },
    /// A Heartbeats request: these members' beats (member, intended send time), in
    /// order, all sent at `sent`.
    Beats {
        beats: Vec<(usize, Instant)>,
        sent: Instant,
    },
    Relinquish,
}

/// Why a connection's session ended.
enum Exit {
    Stop,
    Closed,
    Restart(Duration),
}

struct ConnTask {
    shared: Arc<Shared>,
    key: usize,
    endpoint: Endpoint,
    members: Vec<MemberState>,
    by_id: HashMap<String, usize>,
    commands: mpsc::UnboundedReceiver<Cmd>,
    pending: HashMap<u32, Pending>,
    next_correlation: u32,
    timers: BinaryHeap<TimerEntry>,
    local_intended: Vec<u64>,
    local_service: Vec<u64>,
    local_commit: Vec<u64>,
    local_join: Vec<u64>,
    outbox: Vec<Frame>,
    joins_waiting: usize,
    /// The coordinator's maximum frame size, from the handshake.
    max_frame_size: usize,
    /// Closed loop with batching: Heartbeats frames of the current round not answered
    /// yet; the next round goes out when none is.
    rounds_outstanding: usize,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Connects and handshakes; returns the coordinator's maximum frame size too. With
/// `batch`, a coordinator that does not list the Heartbeats request is refused.
async fn connect(endpoint: &Endpoint, batch: bool) -> Result<(Transport, usize), String> {
    let software = concat!("rollcall-bench/", env!("CARGO_PKG_VERSION"));
    let (transport, versions) = endpoint
        .connect(software, CONNECT_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let heartbeats = versions.versions.iter().any(|r| {
        r.api_key == ApiKey::Heartbeats as u16
            && (r.min_version..=r.max_version).contains(&CURRENT_VERSION)
    });
    if batch && !heartbeats {
        return Err(
            "the coordinator does not list Heartbeats (API key 9), which --batch-heartbeats needs"
                .to_owned(),
        );
    }
    let max_frame_size = match usize::try_from(versions.max_frame_size) {
        Ok(0) | Err(_) => DEFAULT_MAX_FRAME_SIZE,
        Ok(n) => n,
    };
    Ok((transport, max_frame_size))
}

/// The answer to each of `count` beats, in order, as a lone Heartbeat would have had it:
/// a Heartbeats answer is split into Heartbeat answers and errors; any other answer (an
/// error of the whole request, or one of another kind or length) is every beat's.
fn split_answer(count: usize, response: Response) -> Vec<Response> {
    match response {
        Response::Heartbeats(r) if r.results.len() == count => r
            .results
            .into_iter()
            .map(HeartbeatResult::into_response)
            .collect(),
        other => vec![other; count],
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeats_answer_is_split_into_lone_answers() {
        use rollcall_protocol::{HeartbeatResponse, HeartbeatsResponse};
        let results = vec![
            HeartbeatResult {
                code: ErrorCode::None,
                generation: 3,
                session_timeout_ms: 10_000,
                message: String::new(),
            },
            HeartbeatResult {
                code: ErrorCode::MemberExpelled,
                generation: 0,
                session_timeout_ms: 0,
                message: "gone".into(),
            },
        ];
        let answer = Response::Heartbeats(HeartbeatsResponse { results });
        assert_eq!(
            split_answer(2, answer.clone()),
            [
                Response::Heartbeat(HeartbeatResponse {
                    generation: 3,
                    session_timeout_ms: 10_000,
                }),
                Response::error(ApiKey::Heartbeat as u16, ErrorCode::MemberExpelled, "gone"),
            ]
        );
        // Another length, or an answer to the whole request, is every beat's answer.
        assert_eq!(split_answer(3, answer.clone()), vec![answer; 3]);
        let refused = Response::error(ApiKey::Heartbeats as u16, ErrorCode::InvalidRequest, "x");
        assert_eq!(split_answer(2, refused.clone()), vec![refused; 2]);
    }

    #[test]
    fn members_per_connection_defaults() {
        assert_eq!(default_members_per_conn(100, 15_000), 1);
        assert_eq!(default_members_per_conn(5_000, 15_000), 1);
        assert_eq!(default_members_per_conn(10_000, 15_000), 1);
        assert_eq!(default_members_per_conn(100_000, 15_000), 7);
        assert_eq!(default_members_per_conn(100_000, 9_000), 12);
    }
}
