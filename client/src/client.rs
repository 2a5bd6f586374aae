//! The application's handles: [`Client`] (one connection) and [`Member`] (one membership).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::stream::{FusedStream, Stream};
use tokio::sync::{mpsc, oneshot, Notify};

use crate::config::{ClientConfig, MemberConfig};
use crate::driver::{open, Command, Delivery, Driver, MemberShared};
use crate::error::{CommitError, ConnectError, JoinError, LeaveError, RequestError};
use crate::handed::Handed;
use crate::membership::Ticket;
use crate::types::{Assignment, Committed, Event, Offset, TopicPartition};
use rollcall_protocol::{
    AlterGroupConfigRequest, DrainRequest, ErrorCode, GroupSettings, Request, Response,
};

struct Shared {
    commands: mpsc::UnboundedSender<Command>,
    wake: Arc<Notify>,
    next_key: AtomicU64,
}

/// A connection to a coordinator, shared by any number of [`Member`]s.
///
/// A background task owns the connection: it heartbeats for every member on its own
/// schedule (never waiting on the application), and when the connection is lost it
/// reconnects with exponential backoff and full jitter, redoes the handshake, and
/// resumes each membership. Cloning a `Client` is cheap and shares the connection. The
/// task stops once the client and all its members are dropped.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the coordinator at `addr` (`host:port`) and performs the version
    /// handshake: to `addr`, or if that fails to the other addresses of
    /// [`ClientConfig::bootstrap`] in turn. Fails if every first attempt does; later
    /// losses are handled in the background. Must be called within a tokio runtime.
    ///
    /// Where coordinators share their groups, each member is moved to its group's
    /// coordinator as it learns where that is (see [`ClientConfig::bootstrap`]).
    pub async fn connect(
        addr: impl fmt::Display,
        config: ClientConfig,
    ) -> Result<Self, ConnectError> {
        let mut bootstrap = vec![addr.to_string()];
        for more in &config.bootstrap {
            if !bootstrap.contains(more) {
                bootstrap.push(more.clone());
            }
        }
        let mut failure = None;
        let mut opened = None;
        for (at, addr) in bootstrap.iter().enumerate() {
            match open(addr, &config).await {
                Ok(conn) => {
                    opened = Some((at, conn));
                    break;
                }
                Err(e) => failure = Some(e),
            }
        }
        let Some((at, conn)) = opened else {
            return Err(failure.unwrap_or(ConnectError::Timeout));
        };
        let (commands, rx) = mpsc::unbounded_channel();
        let wake = Arc::new(Notify::new());
        let driver = Driver::new(bootstrap, at, config, conn, rx, wake.clone());
        tokio::spawn(driver.run());
        Ok(Self {
            shared: Arc::new(Shared {
                commands,
                wake,
                next_key: AtomicU64::new(1),
            }),
        })
    }

    /// Joins a group. Returns once the coordinator has accepted the member (its
    /// partitions then arrive as [`Event::Assigned`]). Transient failures (connection
    /// loss, coordinator restarting) are retried until then: bound the call with a
    /// timeout if needed. Several members may be joined on one client.
    pub async fn join(&self, config: MemberConfig) -> Result<Member, JoinError> {
        let settings = config.resolve()?;
        let key = self.shared.next_key.fetch_add(1, Ordering::Relaxed);
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (reply, result) = oneshot::channel();
        let shared = Arc::new(MemberShared::default());
        self.shared
            .commands
            .send(Command::Join {
                key,
                settings: Box::new(settings),
                shared: shared.clone(),
                events: events_tx,
                reply,
            })
            .map_err(|_| JoinError::Closed)?;
        // Built before waiting, so that abandoning the join drops the membership.
        let member = Member {
            key,
            group: config.group,
            commands: self.shared.commands.clone(),
            wake: self.shared.wake.clone(),
            shared,
            events: tokio::sync::Mutex::new(events_rx),
            unconfirmed: parking_lot::Mutex::new(None),
            handed: parking_lot::Mutex::new(Handed::default()),
        };
        match result.await {
            Ok(Ok(())) => Ok(member),
            Ok(Err(fatal)) => Err(JoinError::Fatal(fatal)),
            Err(_) => Err(JoinError::Closed),
        }
    }

    /// Drains `member_id` in `group`: it stays a member and keeps heartbeating, is
    /// given nothing new, and its partitions move to the others (revoke, acknowledge,
    /// grant). Durable until undrained. Returns the members whose state changed. Needs
    /// an identity allowed to administer the group; refusals come as
    /// [`RequestError::Refused`] (`unknown_member_id`, `group_authorization_failed`,
    /// ...).
    pub async fn drain(
        &self,
        group: impl Into<String>,
        member_id: impl Into<String>,
    ) -> Result<Vec<String>, RequestError> {
        self.drain_request(group.into(), member_id.into(), String::new(), true)
            .await
    }

    /// Undoes [`Client::drain`].
    pub async fn undrain(
        &self,
        group: impl Into<String>,
        member_id: impl Into<String>,
    ) -> Result<Vec<String>, RequestError> {
        self.drain_request(group.into(), member_id.into(), String::new(), false)
            .await
    }

    /// Drains every member of `group` that declared `label` at join
    /// ([`MemberConfig::label`]), now and later (a member joining with it is drained at
    /// once), until [`Client::undrain_label`].
    pub async fn drain_label(
        &self,
        group: impl Into<String>,
        label: impl Into<String>,
    ) -> Result<Vec<String>, RequestError> {
        self.drain_request(group.into(), String::new(), label.into(), true)
            .await
    }

    /// Undoes [`Client::drain_label`].
    pub async fn undrain_label(
        &self,
        group: impl Into<String>,
        label: impl Into<String>,
    ) -> Result<Vec<String>, RequestError> {
        self.drain_request(group.into(), String::new(), label.into(), false)
            .await
    }

    async fn drain_request(
        &self,
        group: String,
        member_id: String,
        label: String,
        drained: bool,
    ) -> Result<Vec<String>, RequestError> {
        let request = Request::Drain(DrainRequest {
            group: group.clone(),
            member_id,
            label,
            drained,
        });
        drained_members(self.admin(group, request).await?)
    }

    /// `group`'s operator settings (departure delay, revocation caps, balance, churn
    /// budget, imbalance threshold).
    pub async fn group_config(
        &self,
        group: impl Into<String>,
    ) -> Result<GroupSettings, RequestError> {
        self.alter_group_config(AlterGroupConfigRequest {
            group: group.into(),
            ..AlterGroupConfigRequest::default()
        })
        .await
    }

    /// Changes the settings of `change.group` that `change` sets (the others stay as
    /// they are) and returns them all. The coordinator checks them (per mille at most
    /// 1000, a departure delay of at most an hour, a known balance) and refuses others
    /// with `invalid_request`. Configuring a group that does not exist yet creates it.
    pub async fn alter_group_config(
        &self,
        change: AlterGroupConfigRequest,
    ) -> Result<GroupSettings, RequestError> {
        let group = change.group.clone();
        match self.admin(group, Request::AlterGroupConfig(change)).await? {
            Response::AlterGroupConfig(r) => Ok(r.config),
            other => Err(unexpected(other)),
        }
    }

    /// Sends an operator's request about `group` and returns its answer: on the
    /// connection of a member of the group, if this client has one, else to the first
    /// coordinator (in a cluster, one that does not serve the group refuses it with
    /// `not_coordinator`).
    async fn admin(&self, group: String, request: Request) -> Result<Response, RequestError> {
        let (reply, result) = oneshot::channel();
        self.shared
            .commands
            .send(Command::Admin {
                group,
                request,
                reply,
            })
            .map_err(|_| RequestError::Closed)?;
        refused(result.await.map_err(|_| RequestError::Closed)??)
    }

    /// The offsets committed in `group` for `topics` (every topic if empty).
    ///
    /// Where coordinators share the groups, the fetch follows its group: a coordinator
    /// that does not serve it (or is still loading it) makes the client find the one
    /// that does and ask there, as a member would, for up to 10 s and 8 moves; then it
    /// fails with [`RequestError::Unavailable`], saying why.
    pub async fn fetch_offsets(
        &self,
        group: impl Into<String>,
        topics: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<BTreeMap<TopicPartition, Committed>, RequestError> {
        fetch_offsets(
            &self.shared.commands,
            group.into(),
            topics.into_iter().map(Into::into).collect(),
        )
        .await
    }
}

/// An error answer as [`RequestError::Refused`].
fn refused(response: Response) -> Result<Response, RequestError> {
    match response {
        Response::Error(e) => Err(RequestError::Refused {
            code: e.code,
            message: e.message,
        }),
        other => Ok(other),
    }
}

fn unexpected(response: Response) -> RequestError {
    RequestError::Unavailable {
        reason: format!(
            "unexpected answer from the coordinator (api key {})",
            response.api_key()
        ),
    }
}

/// The members a Drain answer names.
fn drained_members(response: Response) -> Result<Vec<String>, RequestError> {
    match response {
        Response::Drain(r) => Ok(r.members),
        other => Err(unexpected(other)),
    }
}

/// Asks the connection task for the offsets committed in `group`.
async fn fetch_offsets(
    commands: &mpsc::UnboundedSender<Command>,
    group: String,
    topics: Vec<String>,
) -> Result<BTreeMap<TopicPartition, Committed>, RequestError> {
    let (reply, result) = oneshot::channel();
    commands
        .send(Command::Fetch {
            group,
            topics,
            reply,
        })
        .map_err(|_| RequestError::Closed)?;
    result.await.map_err(|_| RequestError::Closed)?
}

/// One membership in one group.
///
/// The application loops on [`Member::next_event`] (or on the [`Member::events`] stream)
/// and acts on each event: start work on assigned partitions, commit and acknowledge
/// revoked ones, stop at once on lost ones. Every call to `next_event` counts as
/// progress, as does the time spent waiting inside it (the stream's polls and waits
/// count the same way); an application that stops asking (stuck in its own work) for
/// longer than the progress timeout is expelled, and learns it from the next event.
///
/// Dropping a `Member` without [`Member::leave`] is an abrupt exit: the task stops
/// heartbeating for it and tells the coordinator it left without confirming that its
/// partitions were released (an `unconfirmed` leave), so they move to others once the
/// member's lease timeout has run out. A static member sends nothing: its next process
/// takes over, or its session times out. A process that ends (or drops its last
/// [`Client`] handle) closes its connection: the coordinator then expels its members
/// once their lease timeout has run out without them reconnecting.
pub struct Member {
    key: u64,
    group: String,
    commands: mpsc::UnboundedSender<Command>,
    wake: Arc<Notify>,
    shared: Arc<MemberShared>,
    events: tokio::sync::Mutex<mpsc::UnboundedReceiver<Delivery>>,
    /// The ticket of a `Lost` the application was given: confirmed (the coordinator is
    /// sent a Relinquish) when it asks for the next event, which it does only once it
    /// stopped acting on those partitions.
    unconfirmed: parking_lot::Mutex<Option<Ticket>>,
    /// The revocations given to the application and the partitions it released since:
    /// what an acknowledgement answers, and what events handed out no longer list.
    handed: parking_lot::Mutex<Handed>,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("group", &self.group)
            .field("member_id", &self.member_id())
            .finish_non_exhaustive()
    }
}

/// Counts a waiting `next_event` call while it lasts.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Member {
    /// The next event, waiting for one if needed; `None` once the membership is over
    /// (left, failed fatally, or its client's task stopped) and every event was taken.
    /// Asking counts as progress. Cancel-safe.
    ///
    /// Asking for the next event after an [`Event::Lost`] of a membership the coordinator
    /// ended (an expulsion, or fencing) is the application's confirmation that it
    /// stopped acting on those partitions: the client then tells the coordinator (a
    /// `Relinquish`), which hands them over at once instead of at the end of the
    /// member's lease. So stop every piece of work on lost partitions (worker tasks
    /// included) before asking for the next event. Dropping the member confirms nothing.
    pub async fn next_event(&self) -> Option<Event> {
        self.mark_progress();
        let _waiting = Waiting::new(&self.shared.waiting);
        self.receive().await
    }

    /// The events as a [`Stream`]: the same events as [`Member::next_event`], for
    /// `StreamExt` combinators and `while let Some(event) = events.next().await`. The
    /// stream ends when `next_event` would return `None`.
    ///
    /// Polling the stream counts as progress, and so does waiting for an event while the
    /// application still awaits it: the connection task wakes a waiting stream whenever
    /// it runs (at least once per heartbeat), and the poll that follows counts. A stream
    /// the application has stopped polling, say in a `select!` whose other branch is
    /// stuck in its own work, does not count, just as a dropped `next_event` future does
    /// not.
    ///
    /// The stream borrows the member, so [`Member::commit`], [`Member::ack_revocation`]
    /// and [`Member::leave`] remain available beside it. While it waits for an event it
    /// holds the member's event queue: a `next_event` call meanwhile waits its turn.
    ///
    /// ```no_run
    /// use futures_util::StreamExt;
    /// use rollcall_client::{Event, Member, RequestError};
    ///
    /// # async fn run(member: Member) -> Result<(), RequestError> {
    /// let mut events = member.events();
    /// while let Some(event) = events.next().await {
    ///     if let Event::RevokeRequested { partitions, .. } = event {
    ///         member.ack_revocation(partitions)?;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn events(&self) -> Events<'_> {
        Events {
            member: self,
            next: None,
            done: false,
        }
    }

    /// The next event. Asking for it confirms the `Lost` returned before, if that one
    /// needs confirming (the connection task then sends a Relinquish); a `Lost` returned
    /// now is confirmed by the next call. Cancel-safe: the confirmation is sent before
    /// waiting, and a ticket is kept the moment its event is handed out.
    async fn receive(&self) -> Option<Event> {
        if let Some(ticket) = self.unconfirmed.lock().take() {
            let _ = self.commands.send(Command::Taken {
                key: self.key,
                ticket,
            });
        }
        let (mut event, ticket) = self.events.lock().await.recv().await?;
        *self.unconfirmed.lock() = ticket;
        self.handed.lock().hand_out(&mut event);
        Some(event)
    }

    /// Records progress without asking for an event: for applications that spend long
    /// stretches processing between events.
    pub fn mark_progress(&self) {
        self.shared.progress.fetch_add(1, Ordering::AcqRel);
        if self.shared.wake_on_progress.load(Ordering::Acquire) {
            self.wake.notify_one();
        }
    }

    /// Commits offsets. Resolves once the coordinator has made them durable. Fenced by
    /// ownership: partitions the member does not hold fail locally, and the coordinator
    /// refuses commits from a member it expelled. Partitions being revoked can be
    /// committed until they are acknowledged, so commit before
    /// [`Member::ack_revocation`]. Commits are sent while the member is suspended too
    /// (the coordinator's ownership check fences them), but the work behind them must
    /// not go on meanwhile.
    pub async fn commit<O: Into<Offset>>(
        &self,
        offsets: impl IntoIterator<Item = O>,
    ) -> Result<(), CommitError> {
        let (reply, result) = oneshot::channel();
        self.commands
            .send(Command::Commit {
                key: self.key,
                offsets: offsets.into_iter().map(Into::into).collect(),
                reply,
            })
            .map_err(|_| CommitError::Closed)?;
        result.await.map_err(|_| CommitError::Closed)?
    }

    /// The offsets committed in the member's group for `topics` (every topic if empty):
    /// [`Client::fetch_offsets`] for [`Member::group`]. Use it to resume newly assigned
    /// partitions where their previous owner left off. The offsets are the group's, so
    /// partitions the member does not hold are included.
    pub async fn committed(
        &self,
        topics: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<BTreeMap<TopicPartition, Committed>, RequestError> {
        fetch_offsets(
            &self.commands,
            self.group.clone(),
            topics.into_iter().map(Into::into).collect(),
        )
        .await
    }

    /// Releases partitions the coordinator asked back ([`Event::RevokeRequested`]). A
    /// heartbeat carrying the acknowledgement is sent at once; the partitions are then
    /// handed to their new owner. Commit their offsets first: commits on released
    /// partitions are refused.
    ///
    /// Fails with [`RequestError::Closed`] when the client's connection task is gone: the
    /// acknowledgement then never reaches the coordinator, which expels the member once
    /// its session times out and only then hands the partitions over. Partitions that
    /// are not being revoked (or no longer, after an [`Event::Lost`]) are ignored.
    ///
    /// The acknowledgement answers the `RevokeRequested` events this member handle has
    /// given out: a partition no event given out asked back is ignored, and so is one
    /// that was lost, assigned again and asked back again by events the application has
    /// not taken yet. It answers those once it has taken them, so an acknowledgement
    /// made late, for an earlier request, never releases a partition the application is
    /// about to be told it owns again.
    pub fn ack_revocation(
        &self,
        partitions: impl IntoIterator<Item = TopicPartition>,
    ) -> Result<(), RequestError> {
        let partitions = self.handed.lock().acknowledge(partitions);
        self.commands
            .send(Command::Ack {
                key: self.key,
                partitions,
            })
            .map_err(|_| RequestError::Closed)
    }

    /// The partitions the member holds and the generation, as the connection task knows
    /// them. This can run ahead of the events not yet taken from [`Member::next_event`].
    pub fn assignment(&self) -> Assignment {
        self.shared.view.lock().assignment.clone()
    }

    /// Until when no other member can own this member's partitions: the last
    /// acknowledged heartbeat's send time plus the lease timeout, less the safety margin.
    /// `None` while not a member. Use it to bound an external write: a write that
    /// completes before the deadline cannot overlap another owner's. Once the lease has
    /// run out the member is suspended and this is the (past) deadline until an
    /// acknowledgement renews it.
    pub fn lease_deadline(&self) -> Option<Instant> {
        self.shared.view.lock().lease
    }

    /// Whether the member is suspended: its lease ran out, or its connection was lost,
    /// and no heartbeat has been acknowledged since. The application must not act on its
    /// partitions meanwhile (see [`Event::Suspended`]); commits are still sent and the
    /// coordinator refuses those of a member that no longer owns the partitions. Like
    /// [`Member::assignment`], this can run ahead of the events not yet taken.
    pub fn is_suspended(&self) -> bool {
        self.shared.view.lock().suspended
    }

    /// The member id the coordinator gave, while a member.
    pub fn member_id(&self) -> Option<String> {
        self.shared.view.lock().member_id.clone()
    }

    /// The group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Reports the load of a partition the member owns (an opaque number the group's
    /// load-balanced assignment weighs: messages a second, CPU). Sent with the next
    /// heartbeat, once (report again when it changes); a later report for the same
    /// partition before then replaces this one. The coordinator ignores reports for
    /// partitions the member does not own, and a coordinator too old to take loads
    /// gets none. A load that is negative or not finite is refused here.
    pub fn report_load(&self, partition: TopicPartition, load: f64) -> Result<(), RequestError> {
        self.report_loads([(partition, load)])
    }

    /// [`Member::report_load`] for several partitions at once.
    pub fn report_loads(
        &self,
        loads: impl IntoIterator<Item = (TopicPartition, f64)>,
    ) -> Result<(), RequestError> {
        let loads: Vec<(TopicPartition, f64)> = loads.into_iter().collect();
        if let Some((tp, load)) = loads.iter().find(|(_, l)| !l.is_finite() || *l < 0.0) {
            return Err(RequestError::Refused {
                code: ErrorCode::InvalidRequest,
                message: format!("the load of {tp} must be finite and not negative, not {load}"),
            });
        }
        self.commands
            .send(Command::Load {
                key: self.key,
                loads,
            })
            .map_err(|_| RequestError::Closed)
    }

    /// Drains this member (a graceful scale-in): it stays in the group and keeps
    /// heartbeating, is given nothing new, and its partitions are revoked
    /// ([`Event::RevokeRequested`]) and move to the others as the application
    /// acknowledges them. Sent on the member's own connection, with its own member id,
    /// which the coordinator allows without admin rights. Resolves once the coordinator
    /// has recorded it. Fails with [`RequestError::Unavailable`] while not a member or
    /// not connected.
    pub async fn drain_self(&self) -> Result<(), RequestError> {
        self.drain_as(true).await
    }

    /// Undoes [`Member::drain_self`]: the member may be given partitions again.
    pub async fn undrain_self(&self) -> Result<(), RequestError> {
        self.drain_as(false).await
    }

    async fn drain_as(&self, drained: bool) -> Result<(), RequestError> {
        let (reply, result) = oneshot::channel();
        self.commands
            .send(Command::DrainSelf {
                key: self.key,
                drained,
                reply,
            })
            .map_err(|_| RequestError::Closed)?;
        drained_members(refused(result.await.map_err(|_| RequestError::Closed)??)?).map(drop)
    }

    /// Leaves the group gracefully. Every partition still owned is revoked locally: an
    /// [`Event::RevokeRequested`] is delivered so the application can commit and
    /// [`Member::ack_revocation`]; the leave is sent once everything is acknowledged or
    /// `timeout` has passed, whichever is first (partitions still unacknowledged then
    /// are reported [`Event::Lost`] with reason `Left` as the leave is sent, and the
    /// coordinator holds them until this member's lease has run out). A static member
    /// stands down instead: it stays in the group, and the next process with the same
    /// instance id takes its partitions over at once without a rebalance. Keep taking
    /// events while this runs, for instance in a `select!` with `next_event` or the
    /// [`Member::events`] stream. Resolves once the coordinator confirms, or with
    /// [`LeaveError::Unconfirmed`] if it could not.
    pub async fn leave(&self, timeout: Duration) -> Result<(), LeaveError> {
        let (reply, result) = oneshot::channel();
        self.commands
            .send(Command::Leave {
                key: self.key,
                timeout,
                reply,
            })
            .map_err(|_| LeaveError::Closed)?;
        result.await.map_err(|_| LeaveError::Closed)?
    }
}

/// A [`Member`]'s events as a [`Stream`], from [`Member::events`].
#[must_use = "streams do nothing unless polled"]
pub struct Events<'a> {
    member: &'a Member,
    /// The pending wait for the next event, kept across polls.
    next: Option<Pin<Box<dyn Future<Output = Option<Event>> + Send + 'a>>>,
    done: bool,
}

impl fmt::Debug for Events<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Events")
            .field("member", self.member)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Stream for Events<'_> {
    type Item = Event;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let member = this.member;
        member.mark_progress();
        let next = this.next.get_or_insert_with(|| Box::pin(member.receive()));
        match next.as_mut().poll(cx) {
            Poll::Ready(event) => {
                this.next = None;
                this.done = event.is_none();
                Poll::Ready(event)
            }
            Poll::Pending => {
                *member.shared.stream_waker.lock() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl FusedStream for Events<'_> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Drop { key: self.key });
    }
}
