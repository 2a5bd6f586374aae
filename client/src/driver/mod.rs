//! The connection task: owns the connections and drives every membership on them.
//!
//! One task per [`Client`](crate::Client). Its memberships live on *links*, one per
//! coordinator (`link.rs`): a new membership starts on the bootstrap link (the
//! addresses the client was given); one whose coordinator says it does not serve the
//! group, or whose link to a coordinator found that way is lost, finds its group's
//! coordinator (`finding.rs`; where each question goes: `asking.rs`) and moves to the
//! link to it, as the same member; a fetch of offsets follows its group the same way
//! (`fetching.rs`). The task
//! hands the frames each link's reader reports to the memberships, writes what they
//! produce (through each link's writer task, so a slow socket never stalls heartbeats'
//! bookkeeping), fires their timers, reconnects with backoff when a link is lost, and
//! talks to the application through channels. Where a coordinator supports it, the
//! heartbeats of the memberships on its link go out in rounds, one Heartbeats frame
//! each ([`round`]).

mod asking;
mod commands;
mod connection;
mod fetching;
mod finding;
mod inbound;
mod link;
mod round;

use asking::Seeker;
use connection::*;
pub(crate) use connection::{open, Opened};
use fetching::Parked;
use finding::{LinkId, Search};
use link::{Link, BOOTSTRAP};
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
    ApiKey, Body, ClientAction, ErrorCode, FetchOffsetsRequest, FindCoordinatorRequest, Frame,
    FrameError, OffsetCursor, Page, Push, PushKey, Request, Response, CURRENT_VERSION,
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
    /// The link it lives on; `None` while it looks for its coordinator.
    link: Option<LinkId>,
    search: Search,
    shared: Arc<MemberShared>,
    events: mpsc::UnboundedSender<Delivery>,
    join_reply: Option<oneshot::Sender<Result<(), FatalError>>>,
    leave_replies: Vec<oneshot::Sender<Result<(), LeaveError>>>,
    commits: HashMap<RequestId, oneshot::Sender<Result<(), CommitError>>>,
}

impl Slot {
    /// Fails the commits awaiting an answer: it will not come.
    fn fail_commits(&mut self, reason: &str) {
        for (_, reply) in self.commits.drain() {
            let _ = reply.send(Err(CommitError::Unavailable {
                reason: reason.to_owned(),
            }));
        }
    }
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
    /// A request whose answer goes back as it is (a drain, a group's settings).
    Ask(oneshot::Sender<Result<Response, RequestError>>),
    /// A Heartbeats request: these memberships' heartbeats, in order.
    Beats(Vec<Beat>),
    /// A FindCoordinator for this membership's or fetch's group.
    Find(Seeker),
    /// The `unconfirmed` leave of a member the application dropped: nobody waits for it.
    Abandoned,
}

/// The connection task.
pub(crate) struct Driver {
    config: ClientConfig,
    commands: mpsc::UnboundedReceiver<Command>,
    wake: Arc<Notify>,
    slots: HashMap<u64, Slot>,
    links: BTreeMap<LinkId, Link>,
    next_link: LinkId,
    /// Fetches of offsets looking for their group's coordinator (`fetching.rs`).
    fetches: HashMap<u64, Parked>,
    next_fetch: u64,
    /// What the links' tasks report (frames, losses, connection attempts).
    inbound: mpsc::UnboundedReceiver<Inbound>,
    inbound_tx: mpsc::UnboundedSender<Inbound>,
    rng: SmallRng,
    /// Whether the fallback to session-long leases was logged (once per client).
    lease_fallback_logged: bool,
}

impl Driver {
    /// A task for the client given `bootstrap` addresses, connected to
    /// `bootstrap[at]` already.
    pub(crate) fn new(
        bootstrap: Vec<String>,
        at: usize,
        config: ClientConfig,
        opened: Opened,
        commands: mpsc::UnboundedReceiver<Command>,
        wake: Arc<Notify>,
    ) -> Self {
        let now = Instant::now();
        let (inbound_tx, inbound) = mpsc::unbounded_channel();
        let mut link = Link::new(bootstrap, &config, now);
        link.connected_at(at);
        link.epoch = 1;
        let conn = Connection::start(opened, &inbound_tx, BOOTSTRAP, link.epoch);
        let features = conn.features;
        link.conn = Some(conn);
        let mut driver = Self {
            config,
            commands,
            wake,
            slots: HashMap::new(),
            links: BTreeMap::from([(BOOTSTRAP, link)]),
            next_link: BOOTSTRAP + 1,
            fetches: HashMap::new(),
            next_fetch: 0,
            inbound,
            inbound_tx,
            rng: SmallRng::from_entropy(),
            lease_fallback_logged: false,
        };
        driver.note_features(BOOTSTRAP, features);
        driver
    }

    /// Logs, once per client, a coordinator that does not know lease timeouts: members
    /// fall back to leases of their session timeout on its connections.
    fn note_features(&mut self, link: LinkId, features: Features) {
        if !features.lease_timeout && !self.lease_fallback_logged {
            self.lease_fallback_logged = true;
            let addr = self.links.get(&link).map(Link::addr).unwrap_or_default();
            info!(
                addr = %addr,
                "the coordinator does not support lease timeouts (join version 1): \
                 members use their session timeout as their lease on its connections"
            );
        }
    }

    /// Runs until every handle (client and members) is dropped.
    pub(crate) async fn run(mut self) {
        loop {
            let now = Instant::now();
            self.drive(now);
            self.check_stalls(now);
            for (id, link) in &mut self.links {
                if link.wants_attempt(now) {
                    link.attempt(*id, &self.config, &self.inbound_tx);
                }
            }
            let wake_at = self.next_wake().unwrap_or(now + Duration::from_secs(3600));
            tokio::select! {
                command = self.commands.recv() => match command {
                    Some(command) => self.on_command(command, Instant::now()),
                    None => break,
                },
                Some(inbound) = self.inbound.recv() => self.on_inbound(inbound, Instant::now()),
                () = tokio::time::sleep_until(wake_at) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    /// The shortest session timeout of the memberships on `link`.
    fn stall_timeout(&self, link: LinkId) -> Duration {
        self.slots
            .values()
            .filter(|s| s.link == Some(link))
            .map(|s| s.m.session_timeout())
            .min()
            .unwrap_or(DEFAULT_STALL_TIMEOUT)
    }

    fn check_stalls(&mut self, now: Instant) {
        let stalled: Vec<LinkId> = self
            .links
            .iter()
            .filter(|(id, link)| {
                link.stall_deadline(self.stall_timeout(**id))
                    .is_some_and(|d| d <= now)
            })
            .map(|(id, _)| *id)
            .collect();
        for link in stalled {
            self.disconnect(link, "no answer from the coordinator", now);
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        let mut add = |t: Option<Instant>| {
            if let Some(t) = t {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        for (id, link) in &self.links {
            add(link.reconnect_at);
            add(link.stall_deadline(self.stall_timeout(*id)));
        }
        for slot in self.slots.values() {
            add(slot.m.poll_timeout().map(Instant::from_std));
            add(slot.search.wake().map(Instant::from_std));
        }
        for parked in self.fetches.values() {
            add(parked.pages.search.wake().map(Instant::from_std));
        }
        add(self.fetch_deadline());
        wake
    }

    /// Feeds progress and timers to every membership, moves those whose coordinator
    /// changed, sends what they produce, delivers their events and answers, publishes
    /// their state, and drops finished memberships and idle links.
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
            if slot.m.take_relocate() {
                slot.link = None;
                slot.fail_commits("the group moved to another coordinator");
                slot.search.start(std_now, &mut self.rng);
            }
        }
        self.expire_fetches(now);
        self.ask_coordinators(now);
        let ids: Vec<LinkId> = self.links.keys().copied().collect();
        for link in ids {
            self.drive_link(link, std_now);
        }
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
        self.drop_idle_links();
    }

    /// Sends what the memberships on `link` have to send.
    fn drive_link(&mut self, link: LinkId, now: std::time::Instant) {
        let Some(batching) = self.links.get(&link).map(Link::batching) else {
            return;
        };
        let pass = round::gather(
            self.slots
                .iter_mut()
                .filter(|(_, s)| s.link == Some(link))
                .map(|(key, slot)| (*key, &mut slot.m)),
            now,
            batching,
        );
        for (key, id, request) in pass.requests {
            self.send(link, Pending::Member { key, id }, request);
        }
        self.send_beats(link, pass.beats);
    }

    /// Puts membership `key` on the link to `addr` (made if there is none), connecting
    /// it at once if that link is up.
    fn place(&mut self, key: u64, addr: String, now: Instant) {
        let link = self
            .link_to(&addr)
            .unwrap_or_else(|| self.new_link(addr, now));
        let features = self
            .links
            .get(&link)
            .and_then(|l| l.conn.as_ref())
            .map(|c| c.features);
        if let Some(slot) = self.slots.get_mut(&key) {
            slot.link = Some(link);
            if let Some(features) = features {
                slot.m.handle_connected(now.into_std(), features);
            }
        }
    }

    /// Drops the links to other coordinators that no membership lives on, no request
    /// awaits an answer on, no fetch waits for and no question is about to go to.
    fn drop_idle_links(&mut self) {
        let mut used: Vec<LinkId> = self.slots.values().filter_map(|s| s.link).collect();
        used.extend(self.fetch_links());
        let targets = self.ask_targets();
        self.links.retain(|id, link| {
            *id == BOOTSTRAP
                || used.contains(id)
                || !link.pending.is_empty()
                || targets.iter().any(|t| t == link.addr())
        });
    }

    /// Sends a round of heartbeats on `link`: one Heartbeats request (or as few as fit
    /// the frame size), or a lone Heartbeat for a round of one.
    fn send_beats(&mut self, link: LinkId, beats: Vec<Beat>) {
        if beats.is_empty() {
            return;
        }
        let max = self
            .links
            .get(&link)
            .map_or(usize::MAX, Link::max_frame_size);
        for outgoing in round::frames(beats, max) {
            match outgoing {
                Outgoing::Lone(b) => {
                    let pending = Pending::Member {
                        key: b.key,
                        id: b.id,
                    };
                    self.send(link, pending, Request::Heartbeat(b.beat));
                }
                Outgoing::Batch(beats) => {
                    let request = round::request(&beats);
                    self.send(link, Pending::Beats(beats), request);
                }
            }
        }
    }

    /// Hands each result of a Heartbeats answer to its membership as the answer to its
    /// lone Heartbeat. An answer that cannot be dispatched so (a coordinator that lists
    /// the request but refuses it, or answers something else) makes every membership on
    /// this link heartbeat alone, and these beats are sent again alone at once.
    fn on_beats_answer(
        &mut self,
        link: LinkId,
        beats: Vec<Beat>,
        response: Response,
        now: std::time::Instant,
    ) {
        match round::answers(beats.len(), response) {
            Ok(answers) => {
                for (b, answer) in beats.into_iter().zip(answers) {
                    if let Some(slot) = self.slots.get_mut(&b.key) {
                        slot.m.handle_response(b.id, answer, now);
                    }
                }
            }
            Err(reason) => {
                if let Some(l) = self.links.get_mut(&link) {
                    if !l.beats_refused {
                        l.beats_refused = true;
                        warn!(
                            addr = %l.addr(),
                            %reason,
                            "a Heartbeats request was not answered as it should be: one \
                             Heartbeat per member on this connection"
                        );
                    }
                }
                for b in beats {
                    if self.slots.contains_key(&b.key) {
                        let pending = Pending::Member {
                            key: b.key,
                            id: b.id,
                        };
                        self.send(link, pending, Request::Heartbeat(b.beat));
                    }
                }
            }
        }
    }

    /// Writes `request` on `link`; its correlation id, or `None` if not connected.
    fn send(&mut self, link: LinkId, pending: Pending, request: Request) -> Option<u32> {
        self.links.get_mut(&link)?.send(pending, request)
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
