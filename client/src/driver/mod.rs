//! The connection task: owns the socket and drives every membership on it.
//!
//! One task per [`Client`](crate::Client). It reads frames, hands responses and pushes
//! to the memberships, writes what they produce (through a writer task, so a slow socket
//! never stalls heartbeats' bookkeeping), fires their timers, reconnects with backoff
//! when the connection is lost, and talks to the application through channels. Where
//! the coordinator supports it, the heartbeats of its memberships go out in rounds, one
//! Heartbeats frame each ([`round`]).

mod commands;
mod connection;
mod inbound;
mod round;

use connection::*;
pub(crate) use connection::{open, Connection};
use round::{Beat, Outgoing};

pub(crate) use commands::Command;
use commands::{fetch_result, FetchPages};

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rollcall_protocol::{
    ApiKey, Body, ClientAction, ErrorCode, FetchOffsetsRequest, Frame, FrameError, OffsetCursor,
    Page, Push, PushKey, Request, Response, CURRENT_VERSION,
};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::config::{ClientConfig, Settings};
use crate::error::{CommitError, ConnectError, FatalError, LeaveError, RequestError};
use crate::membership::{BackoffConfig, Features, Membership, RequestId, Ticket};
use crate::raw::Transport;
use crate::types::{Assignment, Committed, Event, Offset, TopicPartition};

/// The correlation id of the version handshake (in [`crate::raw::open`]); the
/// driver's requests use those after it.
const HANDSHAKE_CORRELATION: u32 = crate::raw::HANDSHAKE_CORRELATION_ID;

/// How long requests may go unanswered, with nothing at all received meanwhile, before
/// a connection without members is presumed dead.
const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What a member handle shares with the connection task.
#[derive(Debug, Default)]
pub(crate) struct MemberShared {
    /// The application's progress counter.
    pub(crate) progress: AtomicU64,
    /// How many `next_event` calls are waiting: waiting for work is progress.
    pub(crate) waiting: AtomicUsize,
    /// Set while the membership waits for progress to rejoin: progress then wakes the
    /// task.
    pub(crate) wake_on_progress: AtomicBool,
    /// The task of an [`Events`](crate::Events) stream whose last poll found no event.
    /// Taken and woken at every pass of the task: a stream that is still awaited polls
    /// again, which counts as progress, and registers anew; one that is no longer
    /// polled (its application busy elsewhere) does not.
    pub(crate) stream_waker: Mutex<Option<std::task::Waker>>,
    pub(crate) view: Mutex<View>,
}

/// The membership as last published by the task.
#[derive(Debug, Default, Clone)]
pub(crate) struct View {
    pub(crate) assignment: Assignment,
    pub(crate) lease: Option<std::time::Instant>,
    pub(crate) suspended: bool,
    pub(crate) member_id: Option<String>,
}

/// An event on its way to the application, with the ticket the member handle returns
/// ([`Command::Taken`]) once the application has moved past it (asked for the next
/// event), if the membership waits for that.
pub(crate) type Delivery = (Event, Option<Ticket>);

struct Slot {
    m: Membership,
    shared: Arc<MemberShared>,
    events: mpsc::UnboundedSender<Delivery>,
    join_reply: Option<oneshot::Sender<Result<(), FatalError>>>,
    leave_replies: Vec<oneshot::Sender<Result<(), LeaveError>>>,
    commits: HashMap<RequestId, oneshot::Sender<Result<(), CommitError>>>,
}

enum Pending {
    Member {
        key: u64,
        id: RequestId,
    },
    Commit {
        key: u64,
        id: RequestId,
    },
    Fetch(Box<FetchPages>),
    /// A Heartbeats request: these memberships' heartbeats, in order.
    Beats(Vec<Beat>),
    /// The `unconfirmed` leave of a member the application dropped: nobody waits for it.
    Abandoned,
}

/// The connection task.
pub(crate) struct Driver {
    addr: String,
    config: ClientConfig,
    commands: mpsc::UnboundedReceiver<Command>,
    wake: Arc<Notify>,
    slots: HashMap<u64, Slot>,
    conn: Option<Connection>,
    reconnect_at: Option<Instant>,
    backoff: Backoff,
    rng: SmallRng,
    /// Requests awaiting an answer, with when they were written.
    pending: HashMap<u32, (Pending, Instant)>,
    next_correlation: u32,
    /// When the connection last delivered a frame.
    last_frame_at: Instant,
    /// Whether the fallback to session-long leases was logged (once per client).
    lease_fallback_logged: bool,
    /// The coordinator of this connection did not answer a Heartbeats request as it
    /// should: each membership heartbeats alone until the next connection.
    beats_refused: bool,
}

impl Driver {
    pub(crate) fn new(
        addr: String,
        config: ClientConfig,
        conn: Connection,
        commands: mpsc::UnboundedReceiver<Command>,
        wake: Arc<Notify>,
    ) -> Self {
        let backoff = Backoff::new(config.reconnect_base, config.reconnect_max);
        Self {
            addr,
            config,
            commands,
            wake,
            slots: HashMap::new(),
            conn: Some(conn),
            reconnect_at: None,
            backoff,
            rng: SmallRng::from_entropy(),
            pending: HashMap::new(),
            next_correlation: HANDSHAKE_CORRELATION + 1,
            last_frame_at: Instant::now(),
            lease_fallback_logged: false,
            beats_refused: false,
        }
        .noting_features()
    }

    fn noting_features(mut self) -> Self {
        if let Some(features) = self.conn.as_ref().map(|c| c.features) {
            self.note_features(features);
        }
        self
    }

    /// Logs, once per client, a coordinator that does not know lease timeouts: members
    /// fall back to leases of their session timeout on its connections.
    fn note_features(&mut self, features: Features) {
        if !features.lease_timeout && !self.lease_fallback_logged {
            self.lease_fallback_logged = true;
            info!(
                addr = %self.addr,
                "the coordinator does not support lease timeouts (join version 1): \
                 members use their session timeout as their lease on its connections"
            );
        }
    }

    /// Runs until every handle (client and members) is dropped.
    pub(crate) async fn run(mut self) {
        let mut connecting: Option<JoinHandle<Result<Connection, ConnectError>>> = None;
        loop {
            let now = Instant::now();
            self.drive(now);
            if self.stall_deadline().is_some_and(|d| d <= now) {
                self.disconnect("no answer from the coordinator", now);
            }
            if self.conn.is_none()
                && connecting.is_none()
                && self.reconnect_at.is_none_or_before(now)
            {
                self.reconnect_at = None;
                let addr = self.addr.clone();
                let config = self.config.clone();
                connecting = Some(tokio::spawn(async move { open(&addr, &config).await }));
            }
            let wake_at = self.next_wake().unwrap_or(now + Duration::from_secs(3600));
            tokio::select! {
                command = self.commands.recv() => match command {
                    Some(command) => self.on_command(command, Instant::now()),
                    None => break,
                },
                event = conn_event(&mut self.conn) => {
                    let now = Instant::now();
                    match event {
                        ConnEvent::Frame(frame) => self.on_frame(frame, now),
                        ConnEvent::Lost(reason) => self.disconnect(&reason, now),
                    }
                }
                result = join_connect(&mut connecting) => {
                    connecting = None;
                    let now = Instant::now();
                    match result {
                        Ok(Ok(conn)) => self.on_connected(conn, now),
                        Ok(Err(e)) => self.connect_failed(&e, now),
                        Err(e) => self.schedule_reconnect(&format!("connect task failed: {e}"), now),
                    }
                }
                () = tokio::time::sleep_until(wake_at) => {}
                () = self.wake.notified() => {}
            }
        }
        if let Some(task) = connecting {
            task.abort();
        }
    }

    /// When the connection is to be presumed dead: requests written since the last frame
    /// arrived have gone unanswered for the shortest session timeout of its members. A
    /// half-open connection (a peer gone without a reset) is found this way; by then
    /// every lease on it has run out anyway.
    fn stall_deadline(&self) -> Option<Instant> {
        self.conn.as_ref()?;
        let oldest = self
            .pending
            .values()
            .map(|(_, sent)| *sent)
            .filter(|sent| *sent >= self.last_frame_at)
            .min()?;
        let timeout = self
            .slots
            .values()
            .map(|s| s.m.session_timeout())
            .min()
            .unwrap_or(DEFAULT_STALL_TIMEOUT);
        Some(oldest + timeout)
    }

    fn next_wake(&self) -> Option<Instant> {
        let mut wake = self.reconnect_at;
        if let Some(t) = self.stall_deadline() {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        for slot in self.slots.values() {
            if let Some(t) = slot.m.poll_timeout() {
                let t = Instant::from_std(t);
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        }
        wake
    }

    /// Feeds progress and timers to every membership, sends what they produce, delivers
    /// their events and answers, publishes their state, and drops finished ones.
    fn drive(&mut self, now: Instant) {
        let std_now = now.into_std();
        for slot in self.slots.values_mut() {
            if slot.shared.waiting.load(Ordering::Acquire) > 0 {
                // The application is waiting for work: that counts as progress.
                slot.shared.progress.fetch_add(1, Ordering::AcqRel);
            }
            if let Some(stream) = slot.shared.stream_waker.lock().take() {
                // Its next poll is progress if the application still awaits events.
                stream.wake();
            }
            slot.m
                .set_progress(slot.shared.progress.load(Ordering::Acquire), std_now);
            slot.m.handle_timeout(std_now);
        }
        let batching = self.batching();
        let pass = round::gather(
            self.slots.iter_mut().map(|(key, slot)| (*key, &mut slot.m)),
            std_now,
            batching,
        );
        for (key, id, request) in pass.requests {
            self.send(Pending::Member { key, id }, request);
        }
        self.send_beats(pass.beats);
        let keys: Vec<u64> = self.slots.keys().copied().collect();
        for key in keys {
            let Some(slot) = self.slots.get_mut(&key) else {
                continue;
            };
            // Published before the events, so that an application reacting to an event
            // sees at least the state that produced it.
            {
                let mut view = slot.shared.view.lock();
                view.assignment = slot.m.assignment();
                view.lease = slot.m.lease_deadline();
                view.suspended = slot.m.is_suspended();
                view.member_id = slot.m.member_id().map(str::to_owned);
            }
            while let Some(delivery) = slot.m.poll_event() {
                log_event(slot.m.group(), &delivery.0);
                let _ = slot.events.send(delivery);
            }
            if let Some(result) = slot.m.take_join_result() {
                if let Some(reply) = slot.join_reply.take() {
                    let _ = reply.send(result);
                }
            }
            if let Some(result) = slot.m.take_leave_result() {
                for reply in slot.leave_replies.drain(..) {
                    let _ = reply.send(result.clone());
                }
            }
            slot.shared
                .wake_on_progress
                .store(slot.m.wants_progress(), Ordering::Release);
            if slot.m.is_finished() {
                debug!(group = slot.m.group(), "membership finished");
                self.slots.remove(&key);
            }
        }
    }

    /// Whether heartbeats go out in rounds on the current connection.
    fn batching(&self) -> bool {
        !self.beats_refused && self.conn.as_ref().is_some_and(|c| c.features.heartbeats)
    }

    /// Sends a round of heartbeats: one Heartbeats request (or as few as fit the frame
    /// size), or a lone Heartbeat for a round of one.
    fn send_beats(&mut self, beats: Vec<Beat>) {
        if beats.is_empty() {
            return;
        }
        let max = self.conn.as_ref().map_or(usize::MAX, |c| c.max_frame_size);
        for outgoing in round::frames(beats, max) {
            match outgoing {
                Outgoing::Lone(b) => self.send(
                    Pending::Member {
                        key: b.key,
                        id: b.id,
                    },
                    Request::Heartbeat(b.beat),
                ),
                Outgoing::Batch(beats) => {
                    let request = round::request(&beats);
                    self.send(Pending::Beats(beats), request);
                }
            }
        }
    }

    /// Hands each result of a Heartbeats answer to its membership as the answer to its
    /// lone Heartbeat. An answer that cannot be dispatched so (a coordinator that lists
    /// the request but refuses it, or answers something else) makes every membership on
    /// this connection heartbeat alone, and these beats are sent again alone at once.
    fn on_beats_answer(&mut self, beats: Vec<Beat>, response: Response, now: std::time::Instant) {
        match round::answers(beats.len(), response) {
            Ok(answers) => {
                for (b, answer) in beats.into_iter().zip(answers) {
                    if let Some(slot) = self.slots.get_mut(&b.key) {
                        slot.m.handle_response(b.id, answer, now);
                    }
                }
            }
            Err(reason) => {
                if !self.beats_refused {
                    self.beats_refused = true;
                    warn!(
                        addr = %self.addr,
                        %reason,
                        "a Heartbeats request was not answered as it should be: one \
                         Heartbeat per member on this connection"
                    );
                }
                for b in beats {
                    if self.slots.contains_key(&b.key) {
                        let pending = Pending::Member {
                            key: b.key,
                            id: b.id,
                        };
                        self.send(pending, Request::Heartbeat(b.beat));
                    }
                }
            }
        }
    }

    fn send(&mut self, pending: Pending, request: Request) {
        let Some(conn) = &self.conn else {
            return;
        };
        let correlation = self.next_correlation;
        self.next_correlation = match self.next_correlation.wrapping_add(1) {
            0 | HANDSHAKE_CORRELATION => HANDSHAKE_CORRELATION + 1,
            n => n,
        };
        if conn
            .writer
            .send(Frame::request(correlation, request))
            .is_ok()
        {
            self.pending.insert(correlation, (pending, Instant::now()));
        }
    }
}

trait BeforeOrNone {
    fn is_none_or_before(&self, now: Instant) -> bool;
}

impl BeforeOrNone for Option<Instant> {
    fn is_none_or_before(&self, now: Instant) -> bool {
        match self {
            None => true,
            Some(t) => *t <= now,
        }
    }
}

fn log_event(group: &str, event: &Event) {
    match event {
        Event::Assigned {
            partitions,
            generation,
        } => debug!(
            group,
            generation,
            count = partitions.len(),
            "partitions assigned"
        ),
        Event::RevokeRequested {
            partitions,
            generation,
        } => debug!(
            group,
            generation,
            count = partitions.len(),
            "revocation requested"
        ),
        Event::Lost { partitions, reason } => {
            warn!(group, %reason, count = partitions.len(), "partitions lost");
        }
        Event::Suspended { partitions } => {
            warn!(group, count = partitions.len(), "member suspended");
        }
        Event::Resumed { partitions } => {
            info!(group, count = partitions.len(), "member resumed");
        }
        Event::Fatal(e) => warn!(group, error = %e, "member failed"),
    }
}
