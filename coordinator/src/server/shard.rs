//! A shard: one [`Coordinator`] (the single writer of its groups) behind a lock, the
//! requests handled on the connections' own tasks, and two tasks of its own: the timer
//! task and the sender stage, which makes records durable and only then releases what
//! they reveal.
//!
//! A connection handles a request by locking its group's shard, feeding the core and
//! taking what it produced. What reveals nothing that is not durable yet (a heartbeat,
//! usually) is answered at once, on the connection's task: no task hop, no wake-up. What
//! wrote records, or concerns a group that still has records or outputs on their way, is
//! added to the shard's *open batch*. The sender stage takes the open batch whenever
//! fewer than two batches are on their way to the store (so every batch shares one
//! snapshot per changed group and one durable transaction, however many requests it
//! holds, and the committer never waits for the stage), waits until its records are
//! durable, and sends its responses and pushes in order. A group is *pending* from
//! the moment the core has unflushed state for it until the batch carrying it has been
//! sent, and everything about a pending group goes through the stage, so nothing
//! overtakes what came before it about the same group.
//!
//! Timers run on the shard's timer task, woken at the core's next deadline (or earlier
//! when a request moved that deadline earlier).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rollcall_protocol::{
    ApiKey, ErrorCode, Frame, HeartbeatResult, HeartbeatsResponse, ListGroupsRequest, Request,
    Response,
};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

use super::events::log_event;
use super::metrics::Metrics;
use super::registry::{ConnHandle, Registry};
use crate::core::{ConnId, Coordinator, CoreStats, Effects, Output};
use crate::store::group_commit::CommitResult;
use crate::store::{GroupCommitter, StoreError};

/// How often the timer task asks the core which groups run below the advised timeout
/// (it reads every member's gap histogram).
const ADVICE_EVERY: Duration = Duration::from_secs(10);

/// The false-expulsion rate the exported advice is computed for: one a year per group.
const ADVICE_PER_YEAR: f64 = 1.0;

/// How long the timer task leaves the shard to the connections between two slices of
/// due timers (see [`Coordinator::handle_timeout`]).
const SLICE_BREATHER: Duration = Duration::from_millis(1);

/// Outputs the open batch may hold before connections wait to hand it more.
const MAX_OPEN: usize = 65_536;

/// The stable shard of a group: FNV-1a of its id, so a group lands on the same shard in
/// every process and every run.
pub fn shard_of(group: &str, shards: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in group.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % shards.max(1) as u64) as usize
}

/// Where the answer to a request goes.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A frame to a connection.
    Frame {
        to: ConnHandle,
        correlation_id: u32,
        api: ApiKey,
        received: Instant,
    },
    /// This shard's beats of a Heartbeats request whose beats span shards: `indices`
    /// are their places in the request.
    Part {
        joiner: Arc<Joiner>,
        indices: Vec<usize>,
    },
}

impl Reply {
    /// Sends `response`. `quiet`: the sender is the connection's own task, which
    /// writes its queue next anyway, so it need not be woken.
    pub(crate) fn deliver(self, response: Response, metrics: &Metrics, quiet: bool) {
        match self {
            Self::Frame {
                to,
                correlation_id,
                api,
                received,
            } => {
                to.send(Frame::response(correlation_id, response), quiet);
                metrics
                    .duration(api)
                    .record(received.elapsed().as_secs_f64());
            }
            Self::Part { joiner, indices } => joiner.fill(&indices, response, metrics, quiet),
        }
    }
}

/// Gathers the answers of the shards a Heartbeats request's beats went to, and sends
/// the one response once every shard has answered.
///
/// The pushes a shard sends to the requesting connection after it handled its part
/// (those the part caused, and those any later input of that shard causes: a timer,
/// another member's request) follow that response, as every other request's follow
/// its own: each shard keeps the joiner of the last split request it handled a part
/// of, per connection, and queues its pushes to that connection through it until the
/// last part is in. A client that sees, say, an Assignment listing a partition it has
/// just acknowledged can then tell that the assignment is newer than the
/// acknowledgement.
///
/// A connection may have several split requests outstanding. Each joiner knows the
/// one the connection sent before it, while that one is still open, and a push
/// released by a newer joiner goes on through the older one: it follows every
/// response of a part its shard had handled before it.
#[derive(Debug)]
pub(crate) struct Joiner {
    to: ConnHandle,
    correlation_id: u32,
    received: Instant,
    parts: Mutex<Parts>,
}

#[derive(Debug)]
struct Parts {
    /// One slot per beat.
    results: Vec<Option<HeartbeatResult>>,
    /// Shards still to answer.
    waiting: usize,
    /// Pushes to the requesting connection, held until the response is sent.
    held: Vec<Frame>,
    /// The connection's split request before this one, while it is open. Locks are
    /// only ever taken from a newer joiner to an older one.
    before: Option<Arc<Joiner>>,
}

impl Joiner {
    /// A joiner for a request of `beats` beats split over `shards` shards (and
    /// answers for denied beats), sent after `before`, the connection's previous split
    /// request, if any.
    pub(crate) fn new(
        to: ConnHandle,
        correlation_id: u32,
        received: Instant,
        beats: usize,
        shards: usize,
        before: Option<Arc<Self>>,
    ) -> Arc<Self> {
        let before = before.filter(|b| b.is_open());
        Arc::new(Self {
            to,
            correlation_id,
            received,
            parts: Mutex::new(Parts {
                results: vec![None; beats],
                waiting: shards,
                held: Vec::new(),
                before,
            }),
        })
    }

    /// Whether pushes to the connection must still wait: for this response or for an
    /// earlier split request's. Drops the link to an earlier request that is no longer
    /// open, so that a connection's chain of joiners holds only open ones.
    pub(crate) fn is_open(&self) -> bool {
        let mut parts = self.parts.lock();
        if parts.before.as_ref().is_some_and(|b| !b.is_open()) {
            parts.before = None;
        }
        parts.waiting > 0 || parts.before.is_some()
    }

    /// Queues `frame`, a push to the requesting connection, behind this response (and
    /// the earlier ones still open): held until they are sent, sent at once if they
    /// are.
    fn push(&self, frame: Frame) {
        // Queued under the lock the response is sent under: a push seen after the
        // last part is in follows the response that part sent.
        let mut parts = self.parts.lock();
        if parts.waiting > 0 {
            parts.held.push(frame);
        } else if let Some(before) = &parts.before {
            before.push(frame);
        } else {
            self.to.send(frame, false);
        }
    }

    fn fill(&self, indices: &[usize], response: Response, metrics: &Metrics, quiet: bool) {
        let results: Vec<HeartbeatResult> = match response {
            Response::Heartbeats(h) => h.results,
            // An answer for the whole part (an error) is each of its beats'.
            other => vec![HeartbeatResult::from_response(other); indices.len()],
        };
        let mut parts = self.parts.lock();
        for (i, result) in indices.iter().zip(results) {
            if let Some(slot) = parts.results.get_mut(*i) {
                *slot = Some(result);
            }
        }
        parts.waiting -= 1;
        if parts.waiting > 0 {
            return;
        }
        let results = std::mem::take(&mut parts.results)
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    HeartbeatResult::error(ErrorCode::Internal, "no shard answered this beat")
                })
            })
            .collect();
        let response = Response::Heartbeats(HeartbeatsResponse { results });
        // The response and the pushes held for it are queued under the lock, so that a
        // push another shard queues next comes after them.
        self.to
            .send(Frame::response(self.correlation_id, response), quiet);
        let held = std::mem::take(&mut parts.held);
        match &parts.before {
            Some(before) => held.into_iter().for_each(|push| before.push(push)),
            None => held.into_iter().for_each(|push| {
                self.to.send(push, quiet);
            }),
        }
        drop(parts);
        metrics
            .duration(ApiKey::Heartbeats)
            .record(self.received.elapsed().as_secs_f64());
    }
}

/// What became of a request handed to [`Shard::request`].
#[derive(Debug)]
pub(crate) enum Handled {
    /// Answered at once (the frame is queued on the requesting connection, quietly):
    /// nothing it reveals was waiting to be made durable.
    Answered,
    /// In the open batch: the sender stage answers once it is durable.
    Staged,
    /// The shard cannot take requests (the server is failing); the reply is returned.
    Unavailable(Reply),
}

/// One output of a batch, in the order the core produced it.
#[derive(Debug)]
enum Outgoing {
    Response {
        reply: Reply,
        response: Response,
        /// The request produced records: its answer stands only if they are durable.
        wrote: bool,
    },
    Push {
        conn: ConnId,
        frame: Frame,
        /// The joiner of the connection's split Heartbeats request whose part this
        /// shard had handled when the push was made: sent through it.
        after: Option<Arc<Joiner>>,
    },
}

/// What the requests and timers since the last batch produced that waits for
/// durability.
#[derive(Debug, Default)]
struct OpenBatch {
    outgoing: Vec<Outgoing>,
    /// The members whose Join this batch answers (group, member id): once the answers
    /// have left, the core is told, and their sessions count from then.
    joined: Vec<(String, String)>,
    /// Groups with outputs in this batch (besides those of its records).
    groups: HashSet<String>,
}

/// A batch the sender stage submitted and has not sent yet.
#[derive(Debug)]
struct InFlight {
    seq: u64,
    durable: Option<oneshot::Receiver<CommitResult>>,
    batch: OpenBatch,
}

/// What [`Shard::take_open`] found.
#[derive(Debug)]
enum Taken {
    Batch(InFlight),
    Nothing,
    /// Nothing, and the shard is closing.
    Closed,
}

/// Batches a shard's sender stage keeps submitted at once.
const STAGE_DEPTH: usize = 2;

/// A shard's state, behind its lock.
#[derive(Debug)]
struct ShardState {
    core: Coordinator,
    open: OpenBatch,
    /// The number of the last batch the stage took.
    taken: u64,
    /// Groups with outputs in a batch the stage took and has not finished sending, with
    /// the last such batch.
    in_flight: HashMap<String, u64>,
    /// When the timer task will wake next.
    timer_at: Instant,
    /// Set when the server stops: the stage ends once everything is sent.
    closing: bool,
    /// Per connection, the last split Heartbeats request this shard handled a part of:
    /// pushes to the connection go through it while it is open (see [`Joiner`]).
    joiners: HashMap<ConnId, Arc<Joiner>>,
}

/// Whether, and until when, what concerns a group must wait ([`ShardState::pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// Nothing about the group waits: what concerns it may be sent at once.
    No,
    /// Until the next batch the stage takes is sent: the core has unflushed state for
    /// the group (its records go in that batch), or the open batch holds it.
    NextBatch,
    /// Only until a batch the stage already took is sent. What is staged about the
    /// group now goes in a later batch, so staging it must hold the group pending
    /// until that one is sent ([`ShardState::hold`]).
    TakenBatch,
}

impl ShardState {
    /// Whether what concerns `group` must wait for what is pending about it. A group is
    /// *pending* from the moment the core has unflushed state for it, or something about
    /// it is staged, until the batch carrying that has been sent.
    fn pending(&mut self, group: &str) -> Pending {
        if self.core.is_unflushed(group)
            || (!self.open.groups.is_empty() && self.open.groups.contains(group))
        {
            Pending::NextBatch
        } else if !self.in_flight.is_empty() && self.in_flight.contains_key(group) {
            Pending::TakenBatch
        } else {
            Pending::No
        }
    }

    /// Something about `group`, found `pending`, is staged in the open batch: keeps the
    /// group pending until that batch is sent, where nothing else would.
    fn hold(&mut self, group: &str, pending: Pending) {
        if pending == Pending::TakenBatch {
            self.open.groups.insert(group.to_owned());
        }
    }

    /// The joiner a push to `conn` must go through: that of the last split Heartbeats
    /// request of `conn` this shard handled a part of, while it is open.
    fn joiner_for(&mut self, conn: ConnId) -> Option<Arc<Joiner>> {
        if self.joiners.is_empty() {
            return None;
        }
        let joiner = self.joiners.get(&conn)?;
        if joiner.is_open() {
            return Some(joiner.clone());
        }
        self.joiners.remove(&conn);
        None
    }

    /// Takes what the core produced besides responses: pushes to send at once (or
    /// stage, if their group is pending or `stage_all`) and events to log. A push to
    /// a connection with a split Heartbeats request open follows that request's
    /// response.
    fn drain_outputs(&mut self, index: usize, ctx: &ShardContext, stage_all: bool) {
        while let Some(output) = self.core.poll_output() {
            match output {
                Output::Push { conn, push } => {
                    let pending = match push.group() {
                        Some(group) => {
                            let pending = self.pending(group);
                            self.hold(group, pending);
                            pending
                        }
                        None => Pending::No,
                    };
                    let stage = stage_all || pending != Pending::No;
                    let frame = Frame::push(push);
                    let after = self.joiner_for(conn);
                    if stage {
                        self.open
                            .outgoing
                            .push(Outgoing::Push { conn, frame, after });
                    } else {
                        send_push(&ctx.registry, conn, frame, after.as_deref());
                    }
                }
                Output::Event(event) => log_event(index, &ctx.metrics, event),
            }
        }
    }
}

/// What a shard uses besides its core.
#[derive(Debug)]
pub(crate) struct ShardContext {
    pub(crate) committer: Arc<GroupCommitter>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) stats_interval: Duration,
    /// Cancelled to stop the server when a shard cannot go on (a failed durable write,
    /// a panic in the core).
    pub(crate) fatal: CancellationToken,
    /// Set with `fatal` by the shards, for requests to check cheaply.
    pub(crate) failed: AtomicBool,
}

impl ShardContext {
    /// A shard cannot go on: the server stops, and requests are refused meanwhile.
    fn fail(&self) {
        self.failed.store(true, Ordering::Release);
        self.fatal.cancel();
    }
}

/// One shard, shared by every connection and its own two tasks.
#[derive(Debug)]
pub(crate) struct Shard {
    index: usize,
    state: Mutex<ShardState>,
    ctx: Arc<ShardContext>,
    /// Wakes the timer task when a request moved the next deadline earlier.
    timer: Notify,
    /// Wakes the sender stage when the open batch or the core's records gained something.
    stage: Notify,
    /// Wakes connections waiting for room in the open batch.
    room: Notify,
    /// Outputs in the open batch.
    open_len: AtomicUsize,
}

/// Cancels the server's fatal token if a panic unwinds through a shard's lock: the
/// core's state can no longer be trusted.
struct PanicGuard<'a>(&'a ShardContext);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            error!("a shard's core panicked; stopping the server");
            self.0.fail();
        }
    }
}

impl Shard {
    pub(crate) fn new(index: usize, core: Coordinator, ctx: Arc<ShardContext>) -> Arc<Self> {
        Arc::new(Self {
            index,
            state: Mutex::new(ShardState {
                core,
                open: OpenBatch::default(),
                taken: 0,
                in_flight: HashMap::new(),
                timer_at: Instant::now(),
                closing: false,
                joiners: HashMap::new(),
            }),
            ctx,
            timer: Notify::new(),
            stage: Notify::new(),
            room: Notify::new(),
            open_len: AtomicUsize::new(0),
        })
    }

    /// Whether the open batch is full: connections stop reading until it is not.
    pub(crate) fn is_full(&self) -> bool {
        self.open_len.load(Ordering::Acquire) >= MAX_OPEN
    }

    /// Waits while the open batch is full (its records are slow to become durable);
    /// returns how long, if it had to.
    pub(crate) async fn wait_for_room(&self) -> Option<Duration> {
        if self.open_len.load(Ordering::Acquire) < MAX_OPEN {
            return None;
        }
        let waiting = Instant::now();
        while self.open_len.load(Ordering::Acquire) >= MAX_OPEN {
            let room = self.room.notified();
            if self.open_len.load(Ordering::Acquire) < MAX_OPEN {
                break;
            }
            room.await;
        }
        Some(waiting.elapsed())
    }

    /// Handles a request from `conn` (called on that connection's task): answered
    /// through `reply` at once if nothing it reveals is pending, otherwise staged and
    /// answered by the sender stage once durable.
    pub(crate) fn request(&self, conn: ConnId, request: Request, reply: Reply) -> Handled {
        if self.ctx.failed.load(Ordering::Acquire) {
            return Handled::Unavailable(reply);
        }
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
        let now = Instant::now();
        // The groups this request concerns, and whether any is pending (those pending
        // only through a batch already taken are held if the answer is staged).
        let mut pending = false;
        let mut taken = Vec::new();
        for group in request_groups(&request) {
            match st.pending(group) {
                Pending::No => {}
                Pending::NextBatch => pending = true,
                Pending::TakenBatch => {
                    pending = true;
                    taken.push(group.to_owned());
                }
            }
        }
        if let Reply::Part { joiner, .. } = &reply {
            // From now on this shard's pushes to the connection follow the response.
            st.joiners.insert(conn, joiner.clone());
        }
        let Effects {
            response,
            wrote,
            joined,
        } = st.core.handle_request(now.into_std(), conn, request);
        // The answer first, then the pushes it caused.
        let handled = if pending || wrote {
            st.open.outgoing.push(Outgoing::Response {
                reply,
                response,
                wrote,
            });
            for group in taken {
                st.hold(&group, Pending::TakenBatch);
            }
            st.drain_outputs(self.index, &self.ctx, true);
            st.open.joined.extend(joined);
            self.open_len
                .store(st.open.outgoing.len(), Ordering::Release);
            self.stage.notify_one();
            Handled::Staged
        } else {
            reply.deliver(response, &self.ctx.metrics, true);
            st.drain_outputs(self.index, &self.ctx, false);
            if let Some(joined) = joined {
                st.core.answers_released(now.into_std(), &[joined]);
            }
            if st.core.has_records() {
                self.stage.notify_one();
            }
            Handled::Answered
        };
        self.check_timer(&mut st);
        handled
    }

    /// A connection that sent requests to this shard closed.
    pub(crate) fn disconnect(&self, conn: ConnId) {
        self.state.lock().joiners.remove(&conn);
        self.input(|core, now| core.handle_disconnect(now, conn));
    }

    /// The store found `group` empty for longer than the offsets `retention`; the core
    /// decides whether to delete it.
    pub(crate) fn remove_offsets(&self, group: &str, retention: Duration) {
        let deleted = self.input(|core, now| core.remove_offsets(now, group, retention));
        let shard = self.index;
        if deleted {
            info!(shard, group, "offsets retention expired; group deleted");
        } else {
            debug!(shard, group, "offsets retention: group in use, kept");
        }
    }

    /// This shard's groups (or a page of them), for a ListGroups answer.
    pub(crate) fn list_groups(&self, conn: ConnId, request: ListGroupsRequest) -> Response {
        self.input(|core, now| {
            core.handle_request(now, conn, Request::ListGroups(request))
                .response
        })
    }

    /// Feeds the core an input other than a request, and stages or sends its outputs.
    fn input<R>(&self, f: impl FnOnce(&mut Coordinator, std::time::Instant) -> R) -> R {
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
        let result = f(&mut st.core, Instant::now().into_std());
        self.after_input(&mut st);
        result
    }

    fn after_input(&self, st: &mut ShardState) {
        st.drain_outputs(self.index, &self.ctx, false);
        if st.core.has_records() || !st.open.outgoing.is_empty() {
            self.open_len
                .store(st.open.outgoing.len(), Ordering::Release);
            self.stage.notify_one();
        }
        self.check_timer(st);
    }

    /// Wakes the timer task if the core's next deadline moved before its wake-up.
    fn check_timer(&self, st: &mut ShardState) {
        if let Some(deadline) = st.core.poll_timeout() {
            let deadline = Instant::from_std(deadline);
            if deadline < st.timer_at {
                st.timer_at = deadline;
                self.timer.notify_one();
            }
        }
    }

    /// The timer task: runs the core's timers when due and refreshes the gauges, until
    /// `stop`.
    pub(crate) async fn run_timers(self: Arc<Self>, stop: CancellationToken) {
        let mut stats = CoreStats::default();
        let mut next_stats = Instant::now();
        let mut below_advice = 0usize;
        let mut next_advice = Instant::now() + ADVICE_EVERY;
        loop {
            let wake = {
                let mut st = self.state.lock();
                let wake = st
                    .core
                    .poll_timeout()
                    .map_or(next_stats, |d| Instant::from_std(d).min(next_stats));
                st.timer_at = wake;
                wake
            };
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = self.timer.notified() => continue,
                () = tokio::time::sleep_until(wake) => {}
            }
            let more = {
                let mut st = self.state.lock();
                let _guard = PanicGuard(&self.ctx);
                // Read under the lock, as every input's: the core's clock never goes back.
                let now = Instant::now();
                // Running late is the coordinator's own backlog, as is the runtime's lateness
                // in running ready tasks (the connections with frames to read).
                let late = now.saturating_duration_since(wake);
                let std_now = now.into_std();
                if let Some(last) = self.ctx.registry.traffic.last() {
                    st.core.observe_traffic(last.into_std().min(std_now));
                }
                st.core
                    .observe_lag(std_now, late.max(self.ctx.registry.lag.recent()));
                if st.core.poll_timeout().is_some_and(|d| d <= std_now) {
                    st.core.handle_timeout(std_now);
                }
                self.after_input(&mut st);
                // The core runs due timers a slice of work at a time: let the connections
                // have the shard between slices.
                let more = st.core.poll_timeout().is_some_and(|d| d <= std_now);
                if now >= next_advice {
                    let fresh = st.core.groups_below_advice(ADVICE_PER_YEAR);
                    self.ctx
                        .metrics
                        .groups_below_advice
                        .increment(fresh as f64 - below_advice as f64);
                    below_advice = fresh;
                    next_advice = now + ADVICE_EVERY;
                }
                if now >= next_stats {
                    let fresh = st.core.stats(std_now);
                    drop(st);
                    refresh_gauges(&self.ctx.metrics, fresh, stats);
                    stats = fresh;
                    next_stats = now + self.ctx.stats_interval;
                }
                more
            };
            if more {
                // A breather: the runtime polls its sockets and runs the connections
                // that have frames for this shard before the next slice.
                tokio::time::sleep(SLICE_BREATHER).await;
            }
        }
        // Take this shard's members out of the gauges it contributed to.
        refresh_gauges(&self.ctx.metrics, CoreStats::default(), stats);
        self.ctx
            .metrics
            .groups_below_advice
            .decrement(below_advice as f64);
    }

    /// Asks the sender stage to finish: it sends what it has and ends.
    pub(crate) fn close(&self) {
        self.state.lock().closing = true;
        self.stage.notify_one();
    }

    /// The sender stage: takes the open batch whenever fewer than [`STAGE_DEPTH`]
    /// batches are submitted, makes its records durable, and sends its outputs in
    /// order. Ends after
    /// [`Shard::close`] once nothing is left, or at a failed durable write (false).
    ///
    /// A failed durable write is fatal (fail-stop, as databases do after a failed
    /// fsync): the store's state can no longer be trusted to match the core's, and a
    /// store like redb refuses every later write anyway. The batch's requests that wrote
    /// are answered `storage_failure`, its pushes (which announce state that is not
    /// durable) are dropped, and the server stops. A restart restores every group from
    /// what is durable, and members resume without a rebalance.
    pub(crate) async fn run_stage(self: Arc<Self>) -> bool {
        // Batches submitted and not yet sent, oldest first. The committer makes them
        // durable in order; a second one waits in its queue while the first is being
        // written, so the next transaction starts as soon as the last one ends.
        let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(STAGE_DEPTH);
        loop {
            let wake = self.stage.notified();
            if in_flight.len() < STAGE_DEPTH {
                match self.take_open() {
                    Taken::Batch(batch) => {
                        in_flight.push_back(batch);
                        continue;
                    }
                    Taken::Closed if in_flight.is_empty() => return true,
                    Taken::Nothing | Taken::Closed => {}
                }
            }
            let room = in_flight.len() < STAGE_DEPTH;
            let front = in_flight.front_mut();
            let waiting = front.is_some();
            let oldest = async move {
                match front.map(|b| b.durable.as_mut()) {
                    Some(Some(answer)) => answer.await.unwrap_or(Err(StoreError::Closed)),
                    Some(None) => Ok(()),
                    None => std::future::pending().await,
                }
            };
            let durable = tokio::select! {
                biased;
                durable = oldest, if waiting => durable,
                () = wake, if room => continue,
            };
            let Some(batch) = in_flight.pop_front() else {
                continue;
            };
            if !self.finish(batch, durable) {
                return false;
            }
        }
    }

    /// Takes the open batch (and the core's records) and submits its records, if
    /// there is anything to take.
    fn take_open(&self) -> Taken {
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
        let records = st.core.take_records();
        if records.is_empty() && st.open.outgoing.is_empty() {
            return if st.closing {
                Taken::Closed
            } else {
                Taken::Nothing
            };
        }
        st.taken += 1;
        let seq = st.taken;
        let batch = std::mem::take(&mut st.open);
        for group in records
            .iter()
            .map(crate::core::Record::group)
            .chain(batch.groups.iter().map(String::as_str))
        {
            match st.in_flight.get_mut(group) {
                Some(s) => *s = seq,
                None => {
                    st.in_flight.insert(group.to_owned(), seq);
                }
            }
        }
        self.open_len.store(0, Ordering::Release);
        drop(st);
        self.room.notify_waiters();
        let durable = (!records.is_empty()).then(|| self.ctx.committer.submit(records));
        Taken::Batch(InFlight {
            seq,
            durable,
            batch,
        })
    }

    /// Sends a batch whose records are durable (or failed: false, the server stops).
    fn finish(&self, batch: InFlight, durable: Result<(), StoreError>) -> bool {
        if let Err(e) = &durable {
            error!(shard = self.index, error = %e, "records could not be made durable; answering storage_failure and stopping");
            self.ctx.fail();
        }
        let InFlight {
            seq,
            batch: OpenBatch {
                outgoing, joined, ..
            },
            ..
        } = batch;
        self.send(outgoing, &durable);
        if durable.is_err() {
            return false;
        }
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
        st.in_flight.retain(|_, s| *s > seq);
        if !joined.is_empty() {
            st.core.answers_released(Instant::now().into_std(), &joined);
            self.after_input(&mut st);
        }
        true
    }

    fn send(&self, outgoing: Vec<Outgoing>, durable: &Result<(), StoreError>) {
        for item in outgoing {
            match item {
                Outgoing::Response {
                    reply,
                    response,
                    wrote,
                } => {
                    let response = match durable {
                        Err(e) if wrote => Response::error(
                            response.api_key(),
                            ErrorCode::StorageFailure,
                            format!("the change could not be made durable: {e}"),
                        ),
                        _ => response,
                    };
                    // A full queue closes the connection; the connection logs it.
                    reply.deliver(response, &self.ctx.metrics, false);
                }
                Outgoing::Push { conn, frame, after } => {
                    if durable.is_ok() {
                        send_push(&self.ctx.registry, conn, frame, after.as_deref());
                    }
                }
            }
        }
    }
}

/// Sends a push to `conn`; through `after`, the joiner of the connection's open split
/// Heartbeats request, so that it follows that request's response.
fn send_push(registry: &Registry, conn: ConnId, frame: Frame, after: Option<&Joiner>) {
    match after {
        Some(joiner) => joiner.push(frame),
        None => {
            registry.send(conn, frame);
        }
    }
}

/// The groups a request concerns.
fn request_groups(request: &Request) -> impl Iterator<Item = &str> {
    let beats = match request {
        Request::Heartbeats(h) => h.beats.as_slice(),
        _ => &[],
    };
    request
        .group()
        .into_iter()
        .chain(beats.iter().map(|b| &*b.group))
}

/// The gauges are sums over shards: each shard adds what changed since its last
/// refresh.
fn refresh_gauges(m: &Metrics, stats: CoreStats, before: CoreStats) {
    let delta = |now: usize, then: usize| now as f64 - then as f64;
    m.groups.increment(delta(stats.groups, before.groups));
    m.members_alive
        .increment(delta(stats.members_alive, before.members_alive));
    m.members_suspect
        .increment(delta(stats.members_suspect, before.members_suspect));
    m.groups_with_suspects.increment(delta(
        stats.groups_with_suspects,
        before.groups_with_suspects,
    ));
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use bytes::BytesMut;
    use metrics::Counter;
    use rollcall_protocol::{
        Body, Codec, ErrorCode, Frame, HeartbeatResponse, HeartbeatResult, HeartbeatsResponse,
        Push, Response, ShutdownPush,
    };
    use tokio::time::Instant;
    use tokio_util::codec::Decoder;

    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use rollcall_protocol::{
        HeartbeatRequest, HeartbeatsRequest, JoinRequest, LeaveMode, LeaveRequest, Request,
        TopicPartitions, TopicSubscription,
    };
    use tokio_util::sync::CancellationToken;

    use super::{shard_of, Joiner, Reply, Shard, ShardContext, Taken};
    use crate::core::{ConnId, Coordinator, CoreConfig};
    use crate::server::metrics::Metrics;
    use crate::server::registry::{BufferBudget, ConnHandle, ConnState, Registry, SendLimits};
    use crate::store::memory::MemoryStore;
    use crate::store::{GroupCommitter, Store};

    fn push(message: &str) -> Frame {
        Frame::push(Push::Shutdown(ShutdownPush {
            message: message.into(),
        }))
    }

    /// Room for every frame a test queues on a connection.
    fn limits() -> Arc<SendLimits> {
        Arc::new(SendLimits {
            frames: 1000,
            bytes: 1 << 22,
            max_frame_size: 1 << 20,
            too_large: Counter::noop(),
            budget: Arc::new(BufferBudget::new(usize::MAX)),
        })
    }

    /// The frames queued on `state`, decoded, in order.
    fn queued(state: &ConnState) -> Vec<Frame> {
        let mut out = VecDeque::new();
        state.take(&mut out);
        out.into_iter()
            .map(|bytes| {
                Codec::default()
                    .decode(&mut BytesMut::from(&bytes[..]))
                    .expect("decodes")
                    .expect("whole")
            })
            .collect()
    }

    /// A shard that answers its part of a split Heartbeats request early holds its
    /// pushes to the requesting connection until the last part is in and the response
    /// is sent.
    #[test]
    fn pushes_a_split_heartbeats_request_caused_follow_its_response() {
        let (mine, my_state) = ConnHandle::new(limits());
        let metrics = Metrics::new();
        let ok = |generation| {
            Response::Heartbeats(HeartbeatsResponse {
                results: vec![HeartbeatResult::from_response(Response::Heartbeat(
                    HeartbeatResponse {
                        generation,
                        session_timeout_ms: 1000,
                    },
                ))],
            })
        };
        let joiner = Joiner::new(mine, 77, Instant::now(), 2, 2, None);
        // The first shard answers beat 1 and pushes.
        joiner.fill(&[1], ok(5), &metrics, false);
        joiner.push(push("mine"));
        assert!(
            queued(&my_state).is_empty(),
            "a push went before the response"
        );
        // The second shard answers beat 0: the response, then the push held for it.
        joiner.fill(&[0], ok(6), &metrics, false);
        joiner.push(push("later"));
        let frames = queued(&my_state);
        let kinds: Vec<String> = frames
            .iter()
            .map(|f| match &f.body {
                Body::Response(Response::Heartbeats(h)) => {
                    assert_eq!(f.correlation_id, 77);
                    let generations: Vec<u32> = h.results.iter().map(|r| r.generation).collect();
                    assert_eq!(generations, [6, 5]);
                    assert!(h.results.iter().all(|r| r.code == ErrorCode::None));
                    "response".to_owned()
                }
                Body::Push(Push::Shutdown(s)) => s.message.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["response", "mine", "later"]);
    }

    /// A connection's earlier split request still open holds the pushes a later one
    /// releases: each push follows every response of a part its shard had handled.
    #[test]
    fn pushes_released_by_a_later_split_request_wait_for_an_earlier_one() {
        let (mine, my_state) = ConnHandle::new(limits());
        let metrics = Metrics::new();
        let ok = || {
            Response::Heartbeats(HeartbeatsResponse {
                results: vec![HeartbeatResult::from_response(Response::Heartbeat(
                    HeartbeatResponse {
                        generation: 1,
                        session_timeout_ms: 1000,
                    },
                ))],
            })
        };
        let first = Joiner::new(mine.clone(), 1, Instant::now(), 2, 2, None);
        let second = Joiner::new(mine.clone(), 2, Instant::now(), 2, 2, Some(first.clone()));
        // Shard 0 answers both requests' parts, then pushes: it goes through the second.
        first.fill(&[0], ok(), &metrics, false);
        second.fill(&[0], ok(), &metrics, false);
        second.push(push("a"));
        // Shard 1 answers the second request first: its response goes, the push waits
        // for the first's.
        second.fill(&[1], ok(), &metrics, false);
        second.push(push("b"));
        let kinds = |frames: Vec<Frame>| -> Vec<String> {
            frames
                .iter()
                .map(|f| match &f.body {
                    Body::Response(_) => format!("response {}", f.correlation_id),
                    Body::Push(Push::Shutdown(s)) => s.message.clone(),
                    other => panic!("unexpected {other:?}"),
                })
                .collect()
        };
        assert_eq!(kinds(queued(&my_state)), ["response 2"]);
        assert!(second.is_open(), "an earlier request is still open");
        first.fill(&[1], ok(), &metrics, false);
        second.push(push("c"));
        assert_eq!(kinds(queued(&my_state)), ["response 1", "a", "b", "c"]);
        // Both closed: a third request does not keep the chain.
        assert!(!second.is_open());
        let third = Joiner::new(mine, 3, Instant::now(), 1, 1, Some(second));
        assert!(third.parts.lock().before.is_none());
    }

    /// The shards of a two-shard server, over a memory store, and a connection to
    /// watch.
    struct TwoShards {
        shards: [Arc<Shard>; 2],
        registry: Arc<Registry>,
        limits: Arc<SendLimits>,
    }

    impl TwoShards {
        fn new() -> Self {
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
            let registry = Arc::new(Registry::default());
            let ctx = Arc::new(ShardContext {
                committer: Arc::new(GroupCommitter::new(store).expect("committer")),
                registry: registry.clone(),
                metrics: Arc::new(Metrics::new()),
                stats_interval: Duration::from_secs(60),
                fatal: CancellationToken::new(),
                failed: AtomicBool::new(false),
            });
            // Rebalances at once: no timer to wait for.
            let config = CoreConfig {
                rebalance_coalesce: Duration::ZERO,
                rebalance_coalesce_max: Duration::ZERO,
                ..CoreConfig::default()
            };
            let shard = |i| Shard::new(i, Coordinator::new(config.clone()), ctx.clone());
            Self {
                shards: [shard(0), shard(1)],
                registry,
                limits: limits(),
            }
        }

        fn connect(&self, conn: ConnId) -> (ConnHandle, Arc<ConnState>) {
            let (handle, state) = ConnHandle::new(self.limits.clone());
            self.registry.insert(conn, handle.clone());
            (handle, state)
        }

        /// Runs the shard's due timers, then makes durable and sends what it staged, as
        /// its timer task and sender stage do.
        async fn flush(&self, shard: usize) {
            self.shards[shard].input(|core, now| {
                if core.poll_timeout().is_some_and(|d| d <= now) {
                    core.handle_timeout(now);
                }
            });
            loop {
                match self.shards[shard].take_open() {
                    Taken::Batch(mut batch) => {
                        let durable = match batch.durable.take() {
                            Some(answer) => answer.await.expect("answered"),
                            None => Ok(()),
                        };
                        assert!(self.shards[shard].finish(batch, durable));
                    }
                    Taken::Nothing | Taken::Closed => return,
                }
            }
        }

        /// Sends `request` from `conn` to `shard` as a whole request, and flushes.
        async fn request(&self, shard: usize, conn: (ConnId, &ConnHandle), request: Request) {
            let (conn, to) = conn;
            let reply = Reply::Frame {
                to: to.clone(),
                correlation_id: 0,
                api: request.api_key(),
                received: Instant::now(),
            };
            self.shards[shard].request(conn, request, reply);
            self.flush(shard).await;
        }
    }

    fn join(group: &str, token: u64) -> Request {
        Request::Join(JoinRequest {
            group: group.to_owned(),
            member_id: None,
            instance_id: None,
            client_id: "test".to_owned(),
            join_token: token,
            subscription: vec![TopicSubscription {
                topic: "t".to_owned(),
                partitions: 2,
            }],
            session_timeout_ms: 10_000,
            progress_timeout_ms: 60_000,
            rebalance_timeout_ms: 30_000,
            lease_timeout_ms: 0,
            detector: String::new(),
        })
    }

    fn beat(
        group: &str,
        member: &str,
        generation: u32,
        acks: Vec<TopicPartitions>,
    ) -> HeartbeatRequest {
        HeartbeatRequest {
            group: group.into(),
            member_id: member.into(),
            generation,
            sequence: 1,
            progress: 1,
            acked_revocations: acks,
        }
    }

    /// The member ids the join responses among `frames` gave, in order.
    fn joined(frames: &[Frame]) -> Vec<String> {
        frames
            .iter()
            .filter_map(|f| match &f.body {
                Body::Response(Response::Join(j)) => Some(j.member_id.clone()),
                _ => None,
            })
            .collect()
    }

    /// A push that another input of a shard causes (here another member's leave) after
    /// the shard answered its part of a split Heartbeats request follows that
    /// request's response on the requesting connection. Before, it overtook the
    /// response: the client dropped the partition the response confirmed released
    /// after it had seen the Assignment that gave the partition back, and the
    /// partition stayed with a member that did not know it had it.
    #[tokio::test]
    async fn pushes_a_shard_makes_after_its_part_of_a_split_request_follow_the_response() {
        let server = TwoShards::new();
        let name = |shard| {
            (0..)
                .map(|i| format!("g{i}"))
                .find(|g| shard_of(g, 2) == shard)
                .expect("a group on each shard")
        };
        let (ga, gb) = (name(0), name(1));
        let (one, mine) = server.connect(1);
        let (two, theirs) = server.connect(2);
        // On connection 1, member m of ga (shard 0) and member x of gb (shard 1).
        server.request(0, (1, &one), join(&ga, 1)).await;
        server.request(1, (1, &one), join(&gb, 2)).await;
        let frames = queued(&mine);
        let ids = joined(&frames);
        let (m, x) = (ids[0].clone(), ids[1].clone());
        // n joins ga on connection 2: m is asked to release a partition.
        server.request(0, (2, &two), join(&ga, 3)).await;
        let frames = queued(&mine);
        let (generation, revoked) = frames
            .iter()
            .find_map(|f| match &f.body {
                Body::Push(Push::Revoke(r)) if r.member_id == m => {
                    Some((r.generation, r.partitions.clone()))
                }
                _ => None,
            })
            .expect("m is asked to release a partition");
        let n = joined(&queued(&theirs))[0].clone();
        // One Heartbeats request from connection 1: m acknowledges (shard 0), x beats
        // (shard 1).
        let joiner = Joiner::new(one.clone(), 99, Instant::now(), 2, 2, None);
        let part = |beat, i| {
            (
                Request::Heartbeats(HeartbeatsRequest { beats: vec![beat] }),
                Reply::Part {
                    joiner: joiner.clone(),
                    indices: vec![i],
                },
            )
        };
        let (request, reply) = part(beat(&ga, &m, generation, revoked.clone()), 0);
        server.shards[0].request(1, request, reply);
        server.flush(0).await;
        // Before shard 1 takes its part, n leaves: the partition goes back to m.
        server
            .request(
                0,
                (2, &two),
                Request::Leave(LeaveRequest {
                    group: ga.clone(),
                    member_id: n,
                    mode: LeaveMode::Released,
                }),
            )
            .await;
        let (request, reply) = part(beat(&gb, &x, 1, Vec::new()), 1);
        server.shards[1].request(1, request, reply);
        server.flush(1).await;
        let frames = queued(&mine);
        let response = frames
            .iter()
            .position(|f| f.correlation_id == 99 && matches!(f.body, Body::Response(_)))
            .expect("the Heartbeats response");
        let regrant = frames
            .iter()
            .position(|f| match &f.body {
                Body::Push(Push::Assignment(a)) => {
                    a.member_id == m
                        && a.partitions.iter().any(|t| {
                            revoked.iter().any(|r| {
                                r.topic == t.topic
                                    && t.partitions.iter().any(|p| r.partitions.contains(p))
                            })
                        })
                }
                _ => false,
            })
            .expect("the partition goes back to m");
        assert!(
            response < regrant,
            "the Assignment giving the partition back overtook the response confirming its release: {frames:?}"
        );
    }

    #[test]
    fn shard_of_is_stable_and_in_range() {
        // Fixed values: a group must map to the same shard in every build and run.
        assert_eq!(shard_of("", 7), (0xcbf2_9ce4_8422_2325u64 % 7) as usize);
        assert_eq!(shard_of("orders", 1), 0);
        let a = shard_of("orders", 16);
        assert_eq!(a, shard_of("orders", 16));
        assert!(a < 16);
        let spread: std::collections::HashSet<usize> =
            (0..200).map(|i| shard_of(&format!("g{i}"), 8)).collect();
        assert_eq!(spread.len(), 8);
    }
}
