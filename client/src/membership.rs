//! The sans-IO membership state machine.
//!
//! One [`Membership`] per member. It performs no I/O and reads no clock: every input
//! carries `now`. The connection task feeds it connection changes, responses, pushes,
//! application commands and timer expiries, and drains what it produces: requests to
//! send ([`Membership::poll_transmit`]), events for the application
//! ([`Membership::poll_event`]) and its next wake-up ([`Membership::poll_timeout`]).
//!
//! # Partition states
//!
//! Every partition the member knows of is in one of three states:
//!
//! - *owned*: announced to the application by [`Event::Assigned`];
//! - *revoking*: still owned, but the application was asked (by
//!   [`Event::RevokeRequested`]) to release it;
//! - *released*: the application acknowledged the revocation; the acknowledgement is
//!   queued or in flight and the coordinator has not confirmed it yet.
//!
//! A partition enters the map only with an `Assigned` event and leaves the owned and
//! revoking states only through the application's acknowledgement or a [`Event::Lost`]
//! event, so the application is never told a partition is both held and lost.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::mem;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rollcall_protocol::{
    ClientAction, CommitOffsetsRequest, ErrorCode, ExpelReason, HeartbeatRequest, JoinRequest,
    LeaveMode, LeaveRequest, OffsetCommit, Push, Request, Response,
};

use crate::backoff::{heartbeat_delay, Backoff};
use crate::config::Settings;
use crate::error::{CommitError, FatalError, LeaveError};
use crate::types::{
    from_wire, to_wire, Assignment, Event, LostReason, Offset, PartitionSet, TopicPartition,
};

/// Identifies a request issued by one membership; the connection maps correlation ids to
/// it.
pub(crate) type RequestId = u64;

/// Most pushes kept while a join's response is outstanding.
const MAX_EARLY_PUSHES: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Owned,
    Revoking,
    Released,
}

#[derive(Debug)]
struct Joining {
    /// The member id to rejoin as (after a lease expiry), if any.
    member_id: Option<String>,
    /// The join token; kept across retries of the same join.
    token: u64,
    in_flight: Option<RequestId>,
    not_before: Instant,
    /// Pushes for this group that arrived before the join response named the member.
    early_pushes: Vec<Push>,
}

#[derive(Debug)]
enum Phase {
    /// Joining (or rejoining) the group.
    Joining(Joining),
    /// A member: heartbeating, holding partitions.
    Active,
    /// Expelled for lack of progress; rejoins once the application makes progress.
    AwaitingProgress { since: u64 },
    /// Left, or failed fatally.
    Finished,
}

#[derive(Debug)]
struct Leaving {
    deadline: Instant,
    sent: Option<Instant>,
}

#[derive(Debug)]
enum InFlight {
    Join {
        sent: Instant,
    },
    Heartbeat {
        sent: Instant,
        incarnation: u64,
        acks: PartitionSet,
    },
    Leave {
        incarnation: u64,
    },
    Commit {
        incarnation: u64,
    },
}

/// Reconnection and rejoin backoff bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BackoffConfig {
    pub(crate) base: Duration,
    pub(crate) max: Duration,
}

/// One member's state. See the module documentation.
#[derive(Debug)]
pub(crate) struct Membership {
    settings: Settings,
    rng: SmallRng,
    backoff: Backoff,
    phase: Phase,
    connected: bool,
    /// Set while active.
    member_id: Option<String>,
    /// Changes whenever the membership identity does; responses to requests of an older
    /// incarnation have no effect on the state.
    incarnation: u64,
    generation: u32,
    holdings: BTreeMap<TopicPartition, Hold>,
    /// The coordinator's latest revoke set.
    revoke_requested: PartitionSet,
    acks_unsent: PartitionSet,
    progress: u64,
    sequence: u64,
    interval: Duration,
    session_timeout: Duration,
    lease: Option<Instant>,
    next_beat: Option<Instant>,
    leaving: Option<Leaving>,
    last_loss: Option<LostReason>,
    next_request: RequestId,
    in_flight: HashMap<RequestId, InFlight>,
    events: VecDeque<Event>,
    join_reported: bool,
    join_result: Option<Result<(), FatalError>>,
    leave_result: Option<Result<(), LeaveError>>,
}

impl Membership {
    /// A member about to join, with its randomness seeded by `seed`.
    pub(crate) fn new(settings: Settings, backoff: BackoffConfig, seed: u64, now: Instant) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let token = new_token(&mut rng);
        Self {
            interval: settings.heartbeat_interval,
            session_timeout: settings.session_timeout,
            settings,
            rng,
            backoff: Backoff::new(backoff.base, backoff.max),
            phase: Phase::Joining(Joining {
                member_id: None,
                token,
                in_flight: None,
                not_before: now,
                early_pushes: Vec::new(),
            }),
            connected: false,
            member_id: None,
            incarnation: 0,
            generation: 0,
            holdings: BTreeMap::new(),
            revoke_requested: PartitionSet::new(),
            acks_unsent: PartitionSet::new(),
            progress: 0,
            sequence: 0,
            lease: None,
            next_beat: None,
            leaving: None,
            last_loss: None,
            next_request: 1,
            in_flight: HashMap::new(),
            events: VecDeque::new(),
            join_reported: false,
            join_result: None,
            leave_result: None,
        }
    }

    // -----------------------------------------------------------------------------------
    // Accessors
    // -----------------------------------------------------------------------------------

    /// The group.
    pub(crate) fn group(&self) -> &str {
        &self.settings.group
    }

    /// The member id, while a member.
    pub(crate) fn member_id(&self) -> Option<&str> {
        self.member_id.as_deref()
    }

    /// The partitions held and the generation.
    pub(crate) fn assignment(&self) -> Assignment {
        let mut a = Assignment {
            generation: self.generation,
            ..Assignment::default()
        };
        for (tp, h) in &self.holdings {
            match h {
                Hold::Owned => {
                    a.partitions.insert(tp.clone());
                }
                Hold::Revoking => {
                    a.partitions.insert(tp.clone());
                    a.revoking.insert(tp.clone());
                }
                Hold::Released => {}
            }
        }
        a
    }

    /// The session timeout the member asked for.
    pub(crate) fn session_timeout(&self) -> Duration {
        self.settings.session_timeout
    }

    /// Until when no other member can own this member's partitions, if it is a member.
    pub(crate) fn lease_deadline(&self) -> Option<Instant> {
        self.lease
    }

    /// The progress counter as last reported.
    #[cfg(test)]
    pub(crate) fn progress(&self) -> u64 {
        self.progress
    }

    /// Whether the membership waits for the application to make progress.
    pub(crate) fn wants_progress(&self) -> bool {
        matches!(self.phase, Phase::AwaitingProgress { .. })
    }

    /// Whether the membership is over and every event has been drained.
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished) && self.events.is_empty()
    }

    // -----------------------------------------------------------------------------------
    // Outputs
    // -----------------------------------------------------------------------------------

    /// The next event for the application.
    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The outcome of the first join, once known.
    pub(crate) fn take_join_result(&mut self) -> Option<Result<(), FatalError>> {
        self.join_result.take()
    }

    /// The outcome of a leave, once known.
    pub(crate) fn take_leave_result(&mut self) -> Option<Result<(), LeaveError>> {
        self.leave_result.take()
    }

    /// When [`Membership::handle_timeout`] (and then `poll_transmit`) should next run.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Joining(j) => (self.connected && j.in_flight.is_none()).then_some(j.not_before),
            Phase::Active => {
                let mut t = self.lease;
                let mut add = |x: Option<Instant>| {
                    if let Some(x) = x {
                        t = Some(t.map_or(x, |t| t.min(x)));
                    }
                };
                match &self.leaving {
                    Some(Leaving {
                        sent: Some(sent), ..
                    }) => add(Some(*sent + self.session_timeout)),
                    Some(Leaving {
                        deadline,
                        sent: None,
                    }) => {
                        add(Some(*deadline));
                        add(self.next_beat.filter(|_| self.connected));
                    }
                    None => add(self.next_beat.filter(|_| self.connected)),
                }
                t
            }
            Phase::AwaitingProgress { .. } | Phase::Finished => None,
        }
    }

    /// The next request to send, if any is due at `now`. The caller writes it at once:
    /// `now` is recorded as its send instant, which the lease is measured from.
    pub(crate) fn poll_transmit(&mut self, now: Instant) -> Option<(RequestId, Request)> {
        if !self.connected {
            return None;
        }
        match &mut self.phase {
            Phase::Joining(j) => {
                if j.in_flight.is_some() || now < j.not_before {
                    return None;
                }
                let id = self.next_request;
                self.next_request += 1;
                j.in_flight = Some(id);
                let s = &self.settings;
                let request = Request::Join(JoinRequest {
                    group: s.group.clone(),
                    member_id: j.member_id.clone(),
                    instance_id: s.instance_id.clone(),
                    client_id: s.client_id.clone(),
                    join_token: j.token,
                    subscription: s.subscription.clone(),
                    session_timeout_ms: s.session_timeout_ms,
                    progress_timeout_ms: s.progress_timeout_ms,
                    rebalance_timeout_ms: s.rebalance_timeout_ms,
                });
                self.in_flight.insert(id, InFlight::Join { sent: now });
                Some((id, request))
            }
            Phase::Active => {
                let member_id = self.member_id.clone()?;
                if let Some(leaving) = &mut self.leaving {
                    if leaving.sent.is_some() {
                        return None;
                    }
                    let all_acked = !self.holdings.values().any(|h| *h == Hold::Revoking);
                    if all_acked || now >= leaving.deadline {
                        leaving.sent = Some(now);
                        let mode = if !all_acked {
                            // The application did not release everything in time: it is
                            // told now that the rest is lost, and the coordinator holds
                            // those partitions until this member's lease has run out.
                            self.report_unreleased_lost();
                            LeaveMode::Unconfirmed
                        } else if self.settings.instance_id.is_some() {
                            // A static member's process stops (for a restart, usually):
                            // it stays a member, and its next process takes over at once.
                            LeaveMode::StandDown
                        } else {
                            LeaveMode::Released
                        };
                        let id = self.request_id();
                        self.in_flight.insert(
                            id,
                            InFlight::Leave {
                                incarnation: self.incarnation,
                            },
                        );
                        let request = Request::Leave(LeaveRequest {
                            group: self.settings.group.clone(),
                            member_id,
                            mode,
                        });
                        return Some((id, request));
                    }
                }
                if !matches!(self.next_beat, Some(t) if now >= t) {
                    return None;
                }
                let acks = mem::take(&mut self.acks_unsent);
                self.sequence += 1;
                let request = Request::Heartbeat(HeartbeatRequest {
                    group: self.settings.group.clone(),
                    member_id,
                    generation: self.generation,
                    sequence: self.sequence,
                    progress: self.progress,
                    acked_revocations: to_wire(&acks),
                });
                let id = self.request_id();
                self.in_flight.insert(
                    id,
                    InFlight::Heartbeat {
                        sent: now,
                        incarnation: self.incarnation,
                        acks,
                    },
                );
                self.next_beat = Some(now + heartbeat_delay(self.interval, &mut self.rng));
                Some((id, request))
            }
            Phase::AwaitingProgress { .. } | Phase::Finished => None,
        }
    }

    fn request_id(&mut self) -> RequestId {
        let id = self.next_request;
        self.next_request += 1;
        id
    }

    // -----------------------------------------------------------------------------------
    // Inputs: connection
    // -----------------------------------------------------------------------------------

    /// A connection is up and its handshake done. An active member probes it at once
    /// with a heartbeat carrying its member id and generation.
    pub(crate) fn handle_connected(&mut self, now: Instant) {
        self.connected = true;
        if matches!(self.phase, Phase::Active) {
            self.next_beat = Some(now);
        }
    }

    /// The connection is gone, and every request in flight with it.
    pub(crate) fn handle_disconnected(&mut self, _now: Instant) {
        self.connected = false;
        self.next_beat = None;
        for (_, f) in mem::take(&mut self.in_flight) {
            if let InFlight::Heartbeat {
                incarnation, acks, ..
            } = f
            {
                if incarnation == self.incarnation {
                    self.requeue_acks(acks);
                }
            }
        }
        if let Phase::Joining(j) = &mut self.phase {
            // Retried with the same token on the next connection.
            j.in_flight = None;
            j.early_pushes.clear();
        }
        if self.leaving.as_ref().is_some_and(|l| l.sent.is_some()) {
            self.finish_leave(Err(LeaveError::Unconfirmed));
        }
    }

    fn requeue_acks(&mut self, acks: PartitionSet) {
        for tp in acks {
            if self.holdings.get(&tp) == Some(&Hold::Released) {
                self.acks_unsent.insert(tp);
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Inputs: responses
    // -----------------------------------------------------------------------------------

    /// The response to a join, heartbeat or leave this membership issued.
    pub(crate) fn handle_response(&mut self, id: RequestId, response: Response, now: Instant) {
        match self.in_flight.remove(&id) {
            Some(InFlight::Join { sent }) => self.on_join_response(id, sent, response, now),
            Some(InFlight::Heartbeat {
                sent,
                incarnation,
                acks,
            }) => self.on_heartbeat_response(sent, incarnation, acks, response, now),
            Some(InFlight::Leave { incarnation }) => {
                if incarnation == self.incarnation && self.leaving.is_some() {
                    self.finish_leave(Ok(()));
                }
            }
            Some(InFlight::Commit { .. }) | None => {}
        }
    }

    fn on_join_response(&mut self, id: RequestId, sent: Instant, response: Response, now: Instant) {
        let Phase::Joining(j) = &mut self.phase else {
            return;
        };
        if j.in_flight != Some(id) {
            return;
        }
        j.in_flight = None;
        match response {
            Response::Join(r) => {
                let early = mem::take(&mut j.early_pushes);
                self.phase = Phase::Active;
                self.incarnation += 1;
                self.member_id = Some(r.member_id);
                self.generation = r.generation;
                self.session_timeout = self.settings.session_timeout;
                self.interval = match r.heartbeat_interval_ms {
                    0 => self.settings.heartbeat_interval,
                    ms => Duration::from_millis(ms.into()).min(self.settings.heartbeat_interval),
                };
                self.lease = Some(sent + self.lease_span());
                self.next_beat = Some(now + heartbeat_delay(self.interval, &mut self.rng));
                self.backoff.reset();
                if !self.join_reported {
                    self.join_reported = true;
                    self.join_result = Some(Ok(()));
                }
                for push in early {
                    if self.accepts_push(&push) {
                        self.handle_push(push, now);
                    }
                }
            }
            Response::Error(e) => match e.code {
                ErrorCode::FencedInstance => self.fail(FatalError::Fenced { message: e.message }),
                code => match code.action() {
                    ClientAction::Retry => {
                        j.not_before = now + self.backoff.next_delay(&mut self.rng)
                    }
                    ClientAction::Rejoin if j.member_id.is_some() => {
                        // The member to rejoin as is gone: join afresh.
                        j.member_id = None;
                        j.token = new_token(&mut self.rng);
                        j.not_before = now;
                    }
                    ClientAction::Rejoin => {
                        j.token = new_token(&mut self.rng);
                        j.not_before = now + self.backoff.next_delay(&mut self.rng);
                    }
                    ClientAction::GiveUp | ClientAction::Proceed => {
                        self.fail(FatalError::Refused {
                            code,
                            message: e.message,
                        })
                    }
                },
            },
            _ => j.not_before = now + self.backoff.next_delay(&mut self.rng),
        }
    }

    fn on_heartbeat_response(
        &mut self,
        sent: Instant,
        incarnation: u64,
        acks: PartitionSet,
        response: Response,
        now: Instant,
    ) {
        if incarnation != self.incarnation || !matches!(self.phase, Phase::Active) {
            return;
        }
        match response {
            Response::Heartbeat(r) => {
                if r.session_timeout_ms > 0 {
                    self.session_timeout = Duration::from_millis(r.session_timeout_ms.into());
                }
                let renewed = sent + self.lease_span();
                self.lease = Some(self.lease.map_or(renewed, |l| l.max(renewed)));
                for tp in acks {
                    if self.holdings.get(&tp) == Some(&Hold::Released) {
                        self.holdings.remove(&tp);
                        self.revoke_requested.remove(&tp);
                    }
                }
            }
            Response::Error(e) => {
                self.requeue_acks(acks);
                match e.code {
                    ErrorCode::FencedInstance => {
                        self.end_membership(LostReason::Fenced);
                        self.fail(FatalError::Fenced { message: e.message });
                    }
                    ErrorCode::UnknownMember
                    | ErrorCode::MemberExpelled
                    | ErrorCode::IllegalGeneration
                    | ErrorCode::InconsistentMember => self.membership_gone(now),
                    // Transient or unexpected: the next beat tries again.
                    _ => {}
                }
            }
            _ => self.requeue_acks(acks),
        }
    }

    fn lease_span(&self) -> Duration {
        self.session_timeout
            .saturating_sub(self.settings.lease_margin)
    }

    // -----------------------------------------------------------------------------------
    // Inputs: pushes
    // -----------------------------------------------------------------------------------

    /// Whether `push` addresses this member.
    pub(crate) fn accepts_push(&self, push: &Push) -> bool {
        match push_target(push) {
            Some((group, member)) => {
                group == self.settings.group && self.member_id.as_deref() == Some(member)
            }
            None => false,
        }
    }

    /// Whether `push` may address this member once its pending join is answered.
    pub(crate) fn accepts_early_push(&self, push: &Push) -> bool {
        match (&self.phase, push_target(push)) {
            (Phase::Joining(j), Some((group, _))) => {
                j.in_flight.is_some() && group == self.settings.group
            }
            _ => false,
        }
    }

    /// A push accepted by [`Membership::accepts_push`] or
    /// [`Membership::accepts_early_push`].
    pub(crate) fn handle_push(&mut self, push: Push, now: Instant) {
        if let Phase::Joining(j) = &mut self.phase {
            if j.in_flight.is_some() && j.early_pushes.len() < MAX_EARLY_PUSHES {
                j.early_pushes.push(push);
            }
            return;
        }
        if !self.accepts_push(&push) {
            return;
        }
        match push {
            Push::Assignment(p) => self.on_assignment(p.generation, from_wire(&p.partitions)),
            Push::Revoke(p) => self.on_revoke(p.generation, from_wire(&p.partitions)),
            Push::Expelled(p) => self.on_expelled(p.reason, p.message, now),
            Push::Shutdown(_) => {}
        }
    }

    fn on_assignment(&mut self, generation: u32, full: PartitionSet) {
        self.generation = generation;
        let leaving = self.leaving.is_some();
        let mut added = PartitionSet::new();
        for tp in &full {
            // While leaving, new partitions are not taken up: the leave releases them.
            if !leaving && !self.holdings.contains_key(tp) {
                self.holdings.insert(tp.clone(), Hold::Owned);
                added.insert(tp.clone());
            }
        }
        let mut lost = PartitionSet::new();
        self.holdings.retain(|tp, h| {
            if full.contains(tp) {
                return true;
            }
            if *h != Hold::Released {
                lost.insert(tp.clone());
            }
            false
        });
        let holdings = &self.holdings;
        self.acks_unsent.retain(|tp| holdings.contains_key(tp));
        self.revoke_requested.retain(|tp| holdings.contains_key(tp));
        if !lost.is_empty() {
            self.events.push_back(Event::Lost {
                partitions: lost,
                reason: LostReason::Reassigned,
            });
        }
        if !added.is_empty() {
            self.events.push_back(Event::Assigned {
                partitions: added,
                generation,
            });
        }
    }

    fn on_revoke(&mut self, generation: u32, full: PartitionSet) {
        let mut newly = PartitionSet::new();
        self.revoke_requested.clear();
        for tp in full {
            if let Some(h) = self.holdings.get_mut(&tp) {
                if *h == Hold::Owned {
                    *h = Hold::Revoking;
                    newly.insert(tp.clone());
                }
                self.revoke_requested.insert(tp);
            }
        }
        if !newly.is_empty() {
            self.events.push_back(Event::RevokeRequested {
                partitions: newly,
                generation,
            });
        }
    }

    fn on_expelled(&mut self, reason: ExpelReason, message: String, now: Instant) {
        match reason {
            ExpelReason::Fenced => {
                self.end_membership(LostReason::Fenced);
                self.fail(FatalError::Fenced { message });
            }
            _ if self.leaving.is_some() => {
                if reason != ExpelReason::Left {
                    self.end_membership(LostReason::Expelled(reason));
                }
                self.finish_leave(Ok(()));
            }
            ExpelReason::ProgressExpired => {
                self.end_membership(LostReason::Expelled(reason));
                self.phase = Phase::AwaitingProgress {
                    since: self.progress,
                };
            }
            _ => {
                self.end_membership(LostReason::Expelled(reason));
                self.rejoin(None, now);
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Inputs: time and the application
    // -----------------------------------------------------------------------------------

    /// Timers due at `now`: lease expiry and leave bounds. Heartbeats and joins due are
    /// produced by [`Membership::poll_transmit`].
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if !matches!(self.phase, Phase::Active) {
            return;
        }
        if self.lease.is_some_and(|l| now >= l) {
            let old = self.end_membership(LostReason::LeaseExpired);
            if self.leaving.is_some() {
                self.finish_leave(Err(LeaveError::Unconfirmed));
            } else {
                // The coordinator may still know the member: rejoin as it.
                self.rejoin(old, now);
            }
            return;
        }
        let leave_expired = self.leaving.as_ref().is_some_and(|l| match l.sent {
            Some(sent) => now >= sent + self.session_timeout,
            None => !self.connected && now >= l.deadline,
        });
        if leave_expired {
            self.finish_leave(Err(LeaveError::Unconfirmed));
        }
    }

    /// The application's progress counter. Once expelled for lack of progress, the
    /// member rejoins when it advances.
    pub(crate) fn set_progress(&mut self, progress: u64, now: Instant) {
        if progress <= self.progress {
            return;
        }
        self.progress = progress;
        if let Phase::AwaitingProgress { since } = self.phase {
            if progress > since {
                self.rejoin(None, now);
            }
        }
    }

    /// The application releases `partitions` (answering revocation requests); a heartbeat
    /// carrying the acknowledgement goes out at once. Partitions not being revoked are
    /// ignored. A partition whose revocation the coordinator has withdrawn since (its
    /// latest revoke set no longer lists it) stays the member's and is announced again.
    pub(crate) fn ack(
        &mut self,
        partitions: impl IntoIterator<Item = TopicPartition>,
        now: Instant,
    ) {
        let mut send = false;
        let mut kept = PartitionSet::new();
        for tp in partitions {
            let Some(h) = self.holdings.get_mut(&tp) else {
                continue;
            };
            if *h != Hold::Revoking {
                continue;
            }
            if self.revoke_requested.contains(&tp) {
                *h = Hold::Released;
                self.acks_unsent.insert(tp);
                send = true;
            } else if self.leaving.is_some() {
                // A local leave's revocations need no acknowledgement: the leave
                // releases everything.
                *h = Hold::Released;
            } else {
                *h = Hold::Owned;
                kept.insert(tp);
            }
        }
        if !kept.is_empty() {
            self.events.push_back(Event::Assigned {
                partitions: kept,
                generation: self.generation,
            });
        }
        if send && matches!(self.phase, Phase::Active) && self.connected {
            self.next_beat = Some(now);
        }
    }

    /// Starts a graceful leave: every owned partition is revoked locally (the application
    /// gets a [`Event::RevokeRequested`]); the leave is sent once all are acknowledged or
    /// at `now + timeout`, whichever is first.
    pub(crate) fn leave(&mut self, timeout: Duration, now: Instant) {
        match self.phase {
            Phase::Active if self.leaving.is_none() => {
                let mut newly = PartitionSet::new();
                for (tp, h) in &mut self.holdings {
                    if *h == Hold::Owned {
                        *h = Hold::Revoking;
                        newly.insert(tp.clone());
                    }
                }
                if !newly.is_empty() {
                    self.events.push_back(Event::RevokeRequested {
                        partitions: newly,
                        generation: self.generation,
                    });
                }
                self.leaving = Some(Leaving {
                    deadline: now + timeout,
                    sent: None,
                });
            }
            Phase::Active => {}
            Phase::Joining(_) | Phase::AwaitingProgress { .. } | Phase::Finished => {
                self.phase = Phase::Finished;
                self.leave_result = Some(Ok(()));
            }
        }
    }

    /// A commit from the application: checked against what the member holds, then turned
    /// into a request for the caller to send.
    pub(crate) fn commit(
        &mut self,
        offsets: Vec<Offset>,
        _now: Instant,
    ) -> Result<(RequestId, Request), CommitError> {
        let member_id = match (&self.phase, &self.member_id) {
            (Phase::Active, Some(id))
                if !self.leaving.as_ref().is_some_and(|l| l.sent.is_some()) =>
            {
                id.clone()
            }
            _ => return Err(self.inactive_error()),
        };
        if !self.connected {
            return Err(CommitError::Unavailable {
                reason: "not connected to the coordinator".to_owned(),
            });
        }
        let mut not_owned = Vec::new();
        let mut released = Vec::new();
        for o in &offsets {
            match self.holdings.get(&o.partition) {
                Some(Hold::Owned | Hold::Revoking) => {}
                Some(Hold::Released) => released.push(o.partition.clone()),
                None => not_owned.push(o.partition.clone()),
            }
        }
        if !not_owned.is_empty() {
            return Err(CommitError::NotOwner {
                partitions: not_owned,
            });
        }
        if !released.is_empty() {
            return Err(CommitError::PartitionRevoked {
                partitions: released,
            });
        }
        let request = Request::CommitOffsets(CommitOffsetsRequest {
            group: self.settings.group.clone(),
            member_id: Some(member_id),
            generation: self.generation,
            offsets: offsets
                .into_iter()
                .map(|o| OffsetCommit {
                    topic: o.partition.topic,
                    partition: o.partition.partition,
                    offset: o.offset,
                    metadata: o.metadata,
                })
                .collect(),
        });
        let id = self.request_id();
        self.in_flight.insert(
            id,
            InFlight::Commit {
                incarnation: self.incarnation,
            },
        );
        Ok((id, request))
    }

    /// Forgets a request that will not be sent after all.
    pub(crate) fn forget(&mut self, id: RequestId) {
        self.in_flight.remove(&id);
    }

    /// The response to a commit issued by [`Membership::commit`].
    pub(crate) fn handle_commit_response(
        &mut self,
        id: RequestId,
        response: Response,
        now: Instant,
    ) -> Result<(), CommitError> {
        let current = matches!(
            self.in_flight.remove(&id),
            Some(InFlight::Commit { incarnation }) if incarnation == self.incarnation
        ) && matches!(self.phase, Phase::Active);
        match response {
            Response::CommitOffsets(r) => {
                let refused: Vec<(TopicPartition, ErrorCode)> = r
                    .results
                    .into_iter()
                    .filter(|p| p.error != ErrorCode::None)
                    .map(|p| (TopicPartition::new(p.topic, p.partition), p.error))
                    .collect();
                let Some((_, first)) = refused.first() else {
                    return Ok(());
                };
                let first = *first;
                if refused.iter().any(|(_, c)| *c != first) {
                    return Err(CommitError::Refused { refused });
                }
                let partitions = refused.into_iter().map(|(tp, _)| tp).collect();
                Err(match first {
                    ErrorCode::NotOwner => CommitError::NotOwner { partitions },
                    ErrorCode::PartitionRevoked => CommitError::PartitionRevoked { partitions },
                    ErrorCode::MetadataTooLarge => CommitError::MetadataTooLarge { partitions },
                    code => CommitError::Refused {
                        refused: partitions.into_iter().map(|tp| (tp, code)).collect(),
                    },
                })
            }
            Response::Error(e) => Err(match e.code {
                ErrorCode::UnknownMember => {
                    if current {
                        self.membership_gone(now);
                    }
                    CommitError::UnknownMember
                }
                ErrorCode::MemberExpelled => {
                    if current {
                        self.membership_gone(now);
                    }
                    CommitError::Expelled
                }
                ErrorCode::FencedInstance => {
                    if current {
                        self.end_membership(LostReason::Fenced);
                        self.fail(FatalError::Fenced {
                            message: e.message.clone(),
                        });
                    }
                    CommitError::Fenced
                }
                ErrorCode::UnknownGroup => CommitError::UnknownGroup,
                code if code.action() == ClientAction::Retry => CommitError::Unavailable {
                    reason: format!("{code}: {}", e.message),
                },
                code => CommitError::Rejected {
                    code,
                    message: e.message,
                },
            }),
            other => Err(CommitError::Unavailable {
                reason: format!(
                    "unexpected response to a commit (api key {})",
                    other.api_key()
                ),
            }),
        }
    }

    // -----------------------------------------------------------------------------------
    // Transitions
    // -----------------------------------------------------------------------------------

    fn inactive_error(&self) -> CommitError {
        match self.last_loss {
            Some(LostReason::Expelled(_)) => CommitError::Expelled,
            Some(LostReason::Fenced) => CommitError::Fenced,
            Some(LostReason::LeaseExpired) => CommitError::LeaseExpired,
            Some(LostReason::MembershipGone) => CommitError::UnknownMember,
            _ => CommitError::NotMember,
        }
    }

    /// The coordinator no longer knows the member.
    fn membership_gone(&mut self, now: Instant) {
        if self.leaving.is_some() {
            self.finish_leave(Ok(()));
        } else {
            self.end_membership(LostReason::MembershipGone);
            self.rejoin(None, now);
        }
    }

    /// Ends the current membership: every held partition is reported lost (the event is
    /// sent even when there are none, so the application learns the membership ended).
    /// Returns the old member id.
    fn end_membership(&mut self, reason: LostReason) -> Option<String> {
        let lost: PartitionSet = mem::take(&mut self.holdings)
            .into_iter()
            .filter(|(_, h)| *h != Hold::Released)
            .map(|(tp, _)| tp)
            .collect();
        self.revoke_requested.clear();
        self.acks_unsent.clear();
        self.lease = None;
        self.next_beat = None;
        self.incarnation += 1;
        self.last_loss = Some(reason);
        self.in_flight
            .retain(|_, f| matches!(f, InFlight::Join { .. } | InFlight::Commit { .. }));
        self.events.push_back(Event::Lost {
            partitions: lost,
            reason,
        });
        self.member_id.take()
    }

    /// Starts a new join, at once (or as soon as connected): as `member_id` if given,
    /// otherwise afresh, with a new join token either way.
    fn rejoin(&mut self, member_id: Option<String>, now: Instant) {
        let token = new_token(&mut self.rng);
        self.phase = Phase::Joining(Joining {
            member_id,
            token,
            in_flight: None,
            not_before: now,
            early_pushes: Vec::new(),
        });
    }

    /// Reports every partition the application has not released as lost (reason
    /// `Left`), before a leave that does not wait for them any longer.
    fn report_unreleased_lost(&mut self) {
        let lost: PartitionSet = self
            .holdings
            .iter()
            .filter(|(_, h)| **h != Hold::Released)
            .map(|(tp, _)| tp.clone())
            .collect();
        if lost.is_empty() {
            return;
        }
        for tp in &lost {
            self.holdings.remove(tp);
        }
        self.events.push_back(Event::Lost {
            partitions: lost,
            reason: LostReason::Left,
        });
    }

    fn finish_leave(&mut self, result: Result<(), LeaveError>) {
        let remaining: PartitionSet = mem::take(&mut self.holdings)
            .into_iter()
            .filter(|(_, h)| *h != Hold::Released)
            .map(|(tp, _)| tp)
            .collect();
        if !remaining.is_empty() {
            self.events.push_back(Event::Lost {
                partitions: remaining,
                reason: LostReason::Left,
            });
        }
        self.revoke_requested.clear();
        self.acks_unsent.clear();
        self.lease = None;
        self.next_beat = None;
        self.member_id = None;
        self.incarnation += 1;
        self.leaving = None;
        self.phase = Phase::Finished;
        self.leave_result = Some(result);
    }

    fn fail(&mut self, error: FatalError) {
        if self.join_reported {
            self.events.push_back(Event::Fatal(error));
        } else {
            self.join_reported = true;
            self.join_result = Some(Err(error));
        }
        self.holdings.clear();
        self.lease = None;
        self.next_beat = None;
        self.member_id = None;
        self.incarnation += 1;
        self.phase = Phase::Finished;
        if self.leaving.take().is_some() {
            self.leave_result = Some(Ok(()));
        }
    }
}

fn push_target(push: &Push) -> Option<(&str, &str)> {
    match push {
        Push::Assignment(p) => Some((&p.group, &p.member_id)),
        Push::Revoke(p) => Some((&p.group, &p.member_id)),
        Push::Expelled(p) => Some((&p.group, &p.member_id)),
        Push::Shutdown(_) => None,
    }
}

fn new_token(rng: &mut impl Rng) -> u64 {
    rng.gen_range(1..=u64::MAX)
}

#[cfg(test)]
mod tests;
