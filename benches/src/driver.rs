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
//! Revocations are acknowledged at once by a heartbeat, as a prompt application would.
//! Scenarios steer single members (kill, stall, pause, restart) through commands, and
//! may ask for every push and join outcome as an [`Obs`]ervation.

use std::collections::{BinaryHeap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{FutureExt, SinkExt, StreamExt};
use rollcall_protocol::{
    supported_versions, ApiVersionsRequest, Body, Codec, CommitOffsetsRequest, ErrorCode,
    ExpelReason, Frame, HeartbeatRequest, JoinRequest, OffsetCommit, Push, Request, Response,
    TopicPartitions, TopicSubscription,
};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use crate::stats::SharedHistogram;

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
    /// Stop at once: close the connection if the member is alone on it, else go silent.
    /// Answers the send time of the member's last heartbeat.
    Kill {
        member: usize,
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
    pub(crate) hb_sent: AtomicU64,
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
}

impl Shared {
    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    fn in_window(&self, t: Instant) -> bool {
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
    pub(crate) fn start(addr: SocketAddr, plan: Plan) -> Self {
        let per_conn = plan.per_conn.max(1);
        let (obs_tx, obs_rx) = if plan.observe {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let join_go = CancellationToken::new();
        if plan.auto_join {
            join_go.cancel();
        }
        let shards = 64;
        let shared = Arc::new(Shared {
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
            observations: obs_tx,
            load: plan.load,
            members: plan.members.len(),
        });
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
                addr,
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
    Ack,
    Commit {
        local: usize,
        sent: Instant,
    },
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
    addr: SocketAddr,
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
}

type Transport = Framed<TcpStream, Codec>;

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

async fn connect(addr: SocketAddr) -> Result<Transport, String> {
    let attempt = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut framed = Framed::new(stream, Codec::default());
        let hello = Request::ApiVersions(ApiVersionsRequest {
            client_software: concat!("rollcall-bench/", env!("CARGO_PKG_VERSION")).to_owned(),
            versions: supported_versions(),
        });
        framed
            .send(Frame::request(0, hello))
            .await
            .map_err(|e| format!("handshake send: {e}"))?;
        loop {
            match framed.next().await {
                None => return Err("closed during the handshake".to_owned()),
                Some(Err(e)) => return Err(format!("handshake: {e}")),
                Some(Ok(Frame {
                    correlation_id: 0,
                    body: Body::Response(r),
                })) => {
                    return match r {
                        Response::ApiVersions(_) => Ok(framed),
                        Response::Error(e) => Err(format!("handshake refused: {}", e.code)),
                        other => Err(format!("unexpected handshake answer {other:?}")),
                    }
                }
                Some(Ok(_)) => {}
            }
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| Err("connect timed out".to_owned()))
}

impl ConnTask {
    async fn run(mut self) {
        let mut restart_down = None;
        loop {
            if let Some(down) = restart_down.take() {
                tokio::select! {
                    () = self.shared.stop.cancelled() => break,
                    () = tokio::time::sleep(down) => {}
                }
            }
            let Some(framed) = self.open().await else {
                break;
            };
            match self.serve(framed).await {
                Exit::Stop | Exit::Closed => break,
                Exit::Restart(down) => restart_down = Some(down),
            }
        }
        self.flush_samples();
    }

    /// Connects and handshakes, retrying a few times.
    async fn open(&mut self) -> Option<Transport> {
        let permits = self.shared.connect_permits.clone();
        let _permit = tokio::select! {
            () = self.shared.stop.cancelled() => return None,
            p = permits.acquire_owned() => p.ok()?,
        };
        let mut last_error = String::new();
        for attempt in 0..CONNECT_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
            if self.shared.stop.is_cancelled() {
                return None;
            }
            match connect(self.addr).await {
                Ok(framed) => {
                    inc(&self.shared.counters.conns_ready);
                    return Some(framed);
                }
                Err(e) => last_error = e,
            }
        }
        if self
            .shared
            .counters
            .conns_failed
            .fetch_add(1, Ordering::Relaxed)
            < 5
        {
            eprintln!(
                "connection {} to {} failed: {last_error}",
                self.key, self.addr
            );
        }
        None
    }

    async fn serve(&mut self, mut framed: Transport) -> Exit {
        self.pending.clear();
        self.timers.clear();
        self.joins_waiting = self
            .members
            .iter()
            .filter(|m| m.phase == Phase::Unjoined)
            .count();
        let sleep = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(sleep);
        let mut armed_for: Option<Instant> = None;
        loop {
            let next_timer = self.timers.peek().map(|t| t.0 .0);
            if next_timer != armed_for {
                if let Some(at) = next_timer {
                    sleep.as_mut().reset(tokio::time::Instant::from_std(at));
                }
                armed_for = next_timer;
            }
            let may_join = self.joins_waiting > 0 && self.shared.join_go.is_cancelled();
            let permits = self.shared.join_permits.clone();
            // Biased so that a flood of answers (closed loop) cannot starve the joins
            // still to send; timers fire after every wake whichever branch woke it.
            tokio::select! {
                biased;
                () = self.shared.stop.cancelled() => return Exit::Stop,
                cmd = self.commands.recv() => {
                    if let Some(cmd) = cmd {
                        if let Some(exit) = self.on_command(cmd) {
                            return exit;
                        }
                    }
                }
                () = self.shared.join_go.cancelled(), if self.joins_waiting > 0 && !may_join => {}
                permit = permits.acquire_owned(), if may_join => {
                    if let Ok(permit) = permit {
                        self.send_join(permit);
                    }
                }
                frame = framed.next() => {
                    match frame {
                        Some(Ok(frame)) => self.on_frame(frame),
                        Some(Err(_)) | None => {
                            inc(&self.shared.counters.conns_lost);
                            return Exit::Closed;
                        }
                    }
                    // Take every frame already buffered before writing anything.
                    for _ in 0..1024 {
                        match framed.next().now_or_never() {
                            Some(Some(Ok(frame))) => self.on_frame(frame),
                            Some(Some(Err(_)) | None) => {
                                inc(&self.shared.counters.conns_lost);
                                return Exit::Closed;
                            }
                            None => break,
                        }
                    }
                }
                () = &mut sleep, if armed_for.is_some() => {
                    armed_for = None;
                }
            }
            self.fire_timers(Instant::now());
            if !self.outbox.is_empty() {
                let mut failed = false;
                for frame in self.outbox.drain(..) {
                    if framed.feed(frame).await.is_err() {
                        failed = true;
                        break;
                    }
                }
                if failed || SinkExt::<Frame>::flush(&mut framed).await.is_err() {
                    inc(&self.shared.counters.conns_lost);
                    return Exit::Closed;
                }
            }
        }
    }
}

impl ConnTask {
    fn local(&self, member: usize) -> Option<usize> {
        let first = self.members.first()?.index;
        let local = member.checked_sub(first)?;
        (local < self.members.len()).then_some(local)
    }

    fn correlation(&mut self) -> u32 {
        let id = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1).max(1);
        id
    }

    fn schedule(&mut self, local: usize, at: Instant) {
        let m = &mut self.members[local];
        m.timer_stamp += 1;
        self.timers
            .push(TimerEntry(std::cmp::Reverse(at), local, m.timer_stamp));
    }

    /// The first slot of the member's place on the global timeline at or after `t`.
    fn next_slot(&self, local: usize, period: Duration, t: Instant) -> Instant {
        let index = self.members[local].index as u128;
        let members = self.shared.members.max(1) as u128;
        let period_ns = period.as_nanos().max(1);
        let phase = Duration::from_nanos(u64::try_from(period_ns * index / members).unwrap_or(0));
        let origin = self.shared.start + phase;
        if t <= origin {
            return origin;
        }
        let since = (t - origin).as_nanos();
        let k = since.div_ceil(period_ns);
        origin + Duration::from_nanos(u64::try_from(k * period_ns).unwrap_or(u64::MAX / 2))
    }

    fn on_command(&mut self, cmd: Cmd) -> Option<Exit> {
        let now = Instant::now();
        match cmd {
            Cmd::Kill { member, reply } => {
                let local = self.local(member)?;
                let m = &mut self.members[local];
                let _ = reply.send(m.last_sent);
                m.phase = Phase::Dead;
                m.timer_stamp += 1;
                if self.members.iter().all(|m| m.phase == Phase::Dead) {
                    return Some(Exit::Closed);
                }
            }
            Cmd::Stall { member, reply } => {
                let local = self.local(member)?;
                let m = &mut self.members[local];
                m.progress_frozen = true;
                let _ = reply.send(m.last_progress_sent);
            }
            Cmd::Pause {
                member,
                silence,
                reply,
            } => {
                let local = self.local(member)?;
                let m = &mut self.members[local];
                let last = m.last_sent;
                let _ = reply.send(last);
                let resume = last.unwrap_or(now) + silence;
                m.paused_until = Some(resume);
                self.schedule(local, resume);
            }
            Cmd::Restart {
                member,
                down,
                reply,
            } => {
                let local = self.local(member)?;
                let _ = reply.send(self.members[local].last_sent);
                for m in &mut self.members {
                    if m.phase == Phase::Dead {
                        continue;
                    }
                    m.phase = Phase::Unjoined;
                    m.member_id = None;
                    m.owned.clear();
                    m.generation = 0;
                    m.commits_inflight = 0;
                    m.paused_until = None;
                    m.timer_stamp += 1;
                    self.shared.observe(Obs::Restarting { member: m.index });
                }
                self.by_id.clear();
                return Some(Exit::Restart(down));
            }
        }
        None
    }

    fn send_join(&mut self, permit: OwnedSemaphorePermit) {
        let Some(local) = self.members.iter().position(|m| m.phase == Phase::Unjoined) else {
            self.joins_waiting = 0;
            return;
        };
        self.joins_waiting = self.joins_waiting.saturating_sub(1);
        let m = &mut self.members[local];
        m.phase = Phase::Joining;
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        let request = Request::Join(JoinRequest {
            group: m.spec.group.clone(),
            member_id: None,
            instance_id: m.spec.instance_id.clone(),
            client_id: "rollcall-bench".to_owned(),
            join_token: rand::random::<u64>() | 1,
            subscription: vec![TopicSubscription {
                topic: TOPIC.to_owned(),
                partitions: m.spec.partitions,
            }],
            session_timeout_ms: ms(m.spec.session_timeout),
            progress_timeout_ms: ms(m.spec.progress_timeout),
            rebalance_timeout_ms: ms(m.spec.rebalance_timeout),
        });
        let id = self.correlation();
        self.pending.insert(
            id,
            Pending::Join {
                local,
                sent: Instant::now(),
                _permit: permit,
            },
        );
        inc(&self.shared.counters.joins_sent);
        self.outbox.push(Frame::request(id, request));
    }

    fn fire_timers(&mut self, now: Instant) {
        let period = match self.shared.load {
            Load::Periodic { period } | Load::Commits { period, .. } => period,
            Load::ClosedLoop => return,
        };
        while let Some(top) = self.timers.peek() {
            let at = top.0 .0;
            if at > now {
                break;
            }
            let TimerEntry(_, local, stamp) = self.timers.pop().expect("peeked");
            let m = &mut self.members[local];
            if stamp != m.timer_stamp || m.phase != Phase::Active {
                continue;
            }
            let resumed = m.paused_until.take().is_some();
            self.send_heartbeat(local, at, now);
            let next = if resumed {
                self.next_slot(local, period, now + Duration::from_nanos(1))
            } else {
                at + period
            };
            self.schedule(local, next);
        }
    }

    fn send_heartbeat(&mut self, local: usize, intended: Instant, now: Instant) {
        let m = &mut self.members[local];
        let Some(member_id) = m.member_id.clone() else {
            return;
        };
        m.sequence += 1;
        if !m.progress_frozen {
            m.progress += 1;
            m.last_progress_sent = Some(now);
        }
        m.last_sent = Some(now);
        let request = Request::Heartbeat(HeartbeatRequest {
            group: m.spec.group.clone(),
            member_id,
            generation: m.generation,
            sequence: m.sequence,
            progress: m.progress,
            acked_revocations: Vec::new(),
        });
        let id = self.correlation();
        self.pending.insert(
            id,
            Pending::Heartbeat {
                local,
                intended,
                sent: now,
            },
        );
        let c = &self.shared.counters;
        inc(&c.hb_sent);
        if self.shared.in_window(intended) {
            inc(&c.hb_window_sent);
            if now.saturating_duration_since(intended) > Duration::from_millis(2) {
                inc(&c.hb_window_late);
            }
        }
        self.outbox.push(Frame::request(id, request));
    }

    fn send_ack(&mut self, local: usize, partitions: Vec<TopicPartitions>) {
        let now = Instant::now();
        let m = &mut self.members[local];
        let Some(member_id) = m.member_id.clone() else {
            return;
        };
        m.sequence += 1;
        if !m.progress_frozen {
            m.progress += 1;
            m.last_progress_sent = Some(now);
        }
        m.last_sent = Some(now);
        let request = Request::Heartbeat(HeartbeatRequest {
            group: m.spec.group.clone(),
            member_id,
            generation: m.generation,
            sequence: m.sequence,
            progress: m.progress,
            acked_revocations: partitions,
        });
        let id = self.correlation();
        self.pending.insert(id, Pending::Ack);
        inc(&self.shared.counters.acks_sent);
        self.outbox.push(Frame::request(id, request));
    }

    fn pump_commits(&mut self, local: usize) {
        let Load::Commits {
            inflight, offsets, ..
        } = self.shared.load
        else {
            return;
        };
        loop {
            let m = &mut self.members[local];
            if m.phase != Phase::Active || m.owned.is_empty() || m.commits_inflight >= inflight {
                return;
            }
            let Some(member_id) = m.member_id.clone() else {
                return;
            };
            let mut batch = Vec::with_capacity(offsets);
            for _ in 0..offsets.min(m.owned.len()).max(1) {
                let partition = m.owned[m.commit_cursor % m.owned.len()];
                m.commit_cursor = m.commit_cursor.wrapping_add(1);
                batch.push(OffsetCommit {
                    topic: TOPIC.to_owned(),
                    partition,
                    offset: m.next_offset,
                    metadata: String::new(),
                });
            }
            m.next_offset += 1;
            m.commits_inflight += 1;
            let request = Request::CommitOffsets(CommitOffsetsRequest {
                group: m.spec.group.clone(),
                member_id: Some(member_id),
                generation: m.generation,
                offsets: batch,
            });
            let id = self.correlation();
            self.pending.insert(
                id,
                Pending::Commit {
                    local,
                    sent: Instant::now(),
                },
            );
            inc(&self.shared.counters.commit_requests);
            self.outbox.push(Frame::request(id, request));
        }
    }

    fn on_frame(&mut self, frame: Frame) {
        let now = Instant::now();
        match frame.body {
            Body::Response(response) => {
                if let Some(pending) = self.pending.remove(&frame.correlation_id) {
                    self.on_response(pending, response, now);
                }
            }
            Body::Push(push) => self.on_push(push, now),
            Body::Request(_) | Body::Unsupported(_) => {
                inc(&self.shared.counters.protocol_errors);
            }
        }
    }

    fn on_response(&mut self, pending: Pending, response: Response, now: Instant) {
        let c = &self.shared.counters;
        match pending {
            Pending::Join { local, sent, .. } => {
                self.local_join.push(micros(now - sent));
                let m = &mut self.members[local];
                match response {
                    Response::Join(r) => {
                        inc(&c.joins_ok);
                        m.phase = Phase::Active;
                        m.generation = r.generation;
                        m.member_id = Some(r.member_id.clone());
                        self.by_id.insert(r.member_id.clone(), local);
                        self.shared.observe(Obs::Joined {
                            member: m.index,
                            at: now,
                        });
                        match self.shared.load {
                            Load::ClosedLoop => self.send_heartbeat(local, now, now),
                            Load::Periodic { period } | Load::Commits { period, .. } => {
                                let at = self.next_slot(local, period, now);
                                self.schedule(local, at);
                            }
                        }
                    }
                    other => {
                        m.phase = Phase::Dead;
                        let (code, message) = match other {
                            Response::Error(e) => (e.code, e.message),
                            other => (ErrorCode::Internal, format!("unexpected {other:?}")),
                        };
                        if c.joins_err.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("join refused: {code}: {message}");
                        }
                        self.shared.observe(Obs::JoinFailed {
                            member: m.index,
                            code,
                            message,
                        });
                    }
                }
            }
            Pending::Heartbeat {
                local,
                intended,
                sent,
            } => {
                if self.shared.in_window(intended) {
                    inc(&c.hb_window_answered);
                    self.local_intended.push(micros(now - intended));
                    self.local_service.push(micros(now - sent));
                }
                match response {
                    Response::Heartbeat(_) => inc(&c.hb_ok),
                    Response::Error(e) => {
                        inc(&c.hb_err);
                        let m = &mut self.members[local];
                        self.shared.observe(Obs::HeartbeatError {
                            member: m.index,
                            at: now,
                            code: e.code,
                        });
                        if matches!(
                            e.code,
                            ErrorCode::MemberExpelled
                                | ErrorCode::UnknownMember
                                | ErrorCode::FencedInstance
                        ) {
                            m.phase = Phase::Dead;
                        }
                    }
                    _ => inc(&c.protocol_errors),
                }
                if matches!(self.shared.load, Load::ClosedLoop)
                    && self.members[local].phase == Phase::Active
                {
                    self.send_heartbeat(local, now, now);
                }
            }
            Pending::Ack => {}
            Pending::Commit { local, sent } => {
                inc(&c.commit_answers);
                let window = self.shared.in_window(sent);
                if window {
                    inc(&c.commit_window_answers);
                    self.local_commit.push(micros(now - sent));
                }
                match response {
                    Response::CommitOffsets(r) => {
                        let ok = r
                            .results
                            .iter()
                            .filter(|p| p.error == ErrorCode::None)
                            .count() as u64;
                        let err = r.results.len() as u64 - ok;
                        c.commit_offsets_ok.fetch_add(ok, Ordering::Relaxed);
                        c.commit_offsets_err.fetch_add(err, Ordering::Relaxed);
                        if window {
                            c.commit_window_ok.fetch_add(ok, Ordering::Relaxed);
                            c.commit_window_err.fetch_add(err, Ordering::Relaxed);
                        }
                    }
                    _ => {
                        inc(&c.commit_offsets_err);
                        if window {
                            inc(&c.commit_window_err);
                        }
                    }
                }
                let m = &mut self.members[local];
                m.commits_inflight = m.commits_inflight.saturating_sub(1);
                self.pump_commits(local);
            }
        }
        if self.local_intended.len() >= LOCAL_SAMPLES
            || self.local_commit.len() >= LOCAL_SAMPLES
            || self.local_join.len() >= LOCAL_SAMPLES
        {
            self.flush_samples();
        }
    }

    fn on_push(&mut self, push: Push, now: Instant) {
        let c = &self.shared.counters;
        let flatten = |tps: &[TopicPartitions]| -> Vec<u32> {
            let mut out: Vec<u32> = tps
                .iter()
                .filter(|tp| tp.topic == TOPIC)
                .flat_map(|tp| tp.partitions.iter().copied())
                .collect();
            out.sort_unstable();
            out
        };
        match push {
            Push::Assignment(p) => {
                inc(&c.pushes_assignment);
                let Some(&local) = self.by_id.get(&p.member_id) else {
                    return;
                };
                let m = &mut self.members[local];
                if m.phase != Phase::Active {
                    return;
                }
                m.generation = p.generation;
                m.owned = flatten(&p.partitions);
                if self.shared.observations.is_some() {
                    self.shared.observe(Obs::Assigned {
                        member: m.index,
                        at: now,
                        generation: p.generation,
                        partitions: m.owned.clone(),
                    });
                }
                self.pump_commits(local);
            }
            Push::Revoke(p) => {
                inc(&c.pushes_revoke);
                let Some(&local) = self.by_id.get(&p.member_id) else {
                    return;
                };
                let m = &mut self.members[local];
                if m.phase != Phase::Active || m.paused_until.is_some() {
                    return;
                }
                m.generation = m.generation.max(p.generation);
                let revoked = flatten(&p.partitions);
                m.owned.retain(|x| revoked.binary_search(x).is_err());
                self.shared.observe(Obs::Revoked {
                    member: m.index,
                    at: now,
                    generation: p.generation,
                    partitions: revoked,
                });
                self.send_ack(local, p.partitions);
            }
            Push::Expelled(p) => {
                let counter = match p.reason {
                    ExpelReason::SessionExpired => &c.expelled_session,
                    ExpelReason::ProgressExpired => &c.expelled_progress,
                    ExpelReason::RebalanceTimeout => &c.expelled_rebalance,
                    ExpelReason::Fenced | ExpelReason::Left => &c.expelled_fenced,
                };
                inc(counter);
                let Some(local) = self.by_id.remove(&p.member_id) else {
                    return;
                };
                let m = &mut self.members[local];
                m.phase = Phase::Dead;
                self.shared.observe(Obs::Expelled {
                    member: m.index,
                    at: now,
                    reason: p.reason,
                });
            }
            Push::Shutdown(_) => inc(&c.shutdown_pushes),
        }
    }

    fn flush_samples(&mut self) {
        let s = &self.shared;
        s.hb_intended.record_micros(self.key, &self.local_intended);
        s.hb_service.record_micros(self.key, &self.local_service);
        s.commit_latency.record_micros(self.key, &self.local_commit);
        s.join_latency.record_micros(self.key, &self.local_join);
        self.local_intended.clear();
        self.local_service.clear();
        self.local_commit.clear();
        self.local_join.clear();
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
    fn members_per_connection_defaults() {
        assert_eq!(default_members_per_conn(100, 15_000), 1);
        assert_eq!(default_members_per_conn(5_000, 15_000), 1);
        assert_eq!(default_members_per_conn(10_000, 15_000), 1);
        assert_eq!(default_members_per_conn(100_000, 15_000), 7);
        assert_eq!(default_members_per_conn(100_000, 9_000), 12);
    }
}
