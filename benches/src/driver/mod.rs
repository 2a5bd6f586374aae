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
mod plan;
mod shared;
mod task;
#[cfg(test)]
mod tests;

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{FutureExt, SinkExt, StreamExt};
use rollcall_client::raw::Transport;
use rollcall_protocol::{
    ApiKey, Body, CommitOffsetsRequest, ErrorCode, ExpelReason, Frame, HeartbeatRequest,
    HeartbeatResult, HeartbeatsRequest, JoinRequest, OffsetCommit, PartitionLoad, Push,
    RelinquishRequest, Request, Response, TopicPartitions, TopicSubscription, CURRENT_VERSION,
    DEFAULT_MAX_FRAME_SIZE,
};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::task::JoinHandle;

use crate::target::Endpoint;

/// The one topic every member subscribes to.
pub(crate) const TOPIC: &str = "t0";

/// Latency samples a connection buffers before adding them to the shared histograms.
const LOCAL_SAMPLES: usize = 128;

/// Time allowed for a TCP connect plus the handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Connect attempts per connection before giving up.
const CONNECT_ATTEMPTS: u32 = 5;

pub(crate) use self::plan::{
    default_members_per_conn, Cmd, Load, MemberSpec, Obs, PartitionLoads, Plan,
};
use self::shared::inc;
pub(crate) use self::shared::{Counters, Shared};

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
                delayed_acks: VecDeque::new(),
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

    /// Lets the late members (those whose spec says `late`) join.
    pub(crate) fn release_late_joins(&self) {
        self.shared.late_go.cancel();
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
        /// When the revoke push it answers arrived.
        pushed: Instant,
        /// The partitions acknowledged, when observed (sorted).
        partitions: Vec<u32>,
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
    /// Revocations to acknowledge once the plan's acknowledgement delay has passed:
    /// (due, member, partitions, when the revoke push arrived), in order of due time.
    delayed_acks: VecDeque<(Instant, usize, Vec<TopicPartitions>, Instant)>,
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
