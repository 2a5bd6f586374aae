//! The client crate's membership state machine (`client/src/membership.rs`), ported rule
//! for rule so that the simulated members behave as real ones do.
//!
//! What matters for the checks is kept exactly: the lease is the send time of the last
//! acknowledged heartbeat (or join) plus the lease timeout, less the margin, and a
//! member whose lease ran out (or whose connection closed) is suspended: it stops acting
//! but stays a member until an acknowledgement resumes it; an `Expelled` push or a
//! `MemberExpelled`/`UnknownMember` error ends the membership at once, and when the
//! coordinator ended it (expelled, fenced) a `Relinquish` follows, the application having
//! stopped at once; `FencedInstance` ends it for good; no acknowledgement for the session
//! timeout (less the margin) makes the member rejoin naming its member id; a leave is sent
//! once the application released
//! everything or at the leave deadline, whichever comes first (`unconfirmed` then, the
//! unreleased partitions dropped at once; a static member stands down). Application events are
//! not modelled: the simulation reads the partition states directly.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::mem;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rollcall_protocol::{
    ClientAction, CommitOffsetsRequest, ErrorCode, ExpelReason, HeartbeatRequest, JoinRequest,
    LeaveMode, LeaveRequest, OffsetCommit, Push, RelinquishRequest, Request, Response,
    TopicPartitions, TopicSubscription,
};

/// A partition: (topic, index).
pub(super) type Tp = (String, u32);
/// A request issued by one membership.
pub(super) type ReqId = u64;

pub(super) fn from_wire(tps: &[TopicPartitions]) -> BTreeSet<Tp> {
    tps.iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
        .collect()
}

pub(super) fn to_wire(set: &BTreeSet<Tp>) -> Vec<TopicPartitions> {
    let mut out: Vec<TopicPartitions> = Vec::new();
    for (topic, p) in set {
        match out.last_mut() {
            Some(last) if &last.topic == topic => last.partitions.push(*p),
            _ => out.push(TopicPartitions {
                topic: topic.clone(),
                partitions: vec![*p],
            }),
        }
    }
    out
}

/// Exponential backoff with full jitter (`client/src/backoff.rs`).
#[derive(Debug, Clone)]
pub(super) struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub(super) fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max: max.max(base),
            attempt: 0,
        }
    }

    pub(super) fn next_delay(&mut self, rng: &mut impl Rng) -> Duration {
        let factor = 1u32 << self.attempt.min(20);
        let bound = self.base.saturating_mul(factor).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.gen_range(0..=nanos))
    }

    pub(super) fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Uniform in `[0.8 * interval, interval]`, as the client crate beats.
fn heartbeat_delay(interval: Duration, rng: &mut impl Rng) -> Duration {
    interval.mul_f64(rng.gen_range(0.8..=1.0))
}

fn new_token(rng: &mut impl Rng) -> u64 {
    rng.gen_range(1..=u64::MAX)
}

fn ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// A validated member configuration (the client crate's `Settings`).
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) group: String,
    pub(super) subscription: Vec<TopicSubscription>,
    pub(super) instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) session_timeout: Duration,
    pub(super) heartbeat_interval: Duration,
    pub(super) progress_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    /// At most `session_timeout`; equal to it means "no lease timeout" (a version 0 join).
    pub(super) lease_timeout: Duration,
    pub(super) lease_margin: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Owned,
    Revoking,
    Released,
}

#[derive(Debug)]
struct Joining {
    member_id: Option<String>,
    token: u64,
    in_flight: Option<ReqId>,
    not_before: Instant,
    early_pushes: Vec<Push>,
}

#[derive(Debug)]
enum Phase {
    Joining(Joining),
    Active,
    AwaitingProgress { since: u64 },
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
        acks: BTreeSet<Tp>,
    },
    Leave {
        incarnation: u64,
    },
    Commit {
        incarnation: u64,
    },
    Relinquish,
}

/// One member's client-side state.
#[derive(Debug)]
pub(super) struct Membership {
    pub(super) settings: Settings,
    rng: SmallRng,
    backoff: Backoff,
    phase: Phase,
    connected: bool,
    member_id: Option<String>,
    incarnation: u64,
    generation: u32,
    holdings: BTreeMap<Tp, Hold>,
    revoke_requested: BTreeSet<Tp>,
    acks_unsent: BTreeSet<Tp>,
    progress: u64,
    sequence: u64,
    interval: Duration,
    session_timeout: Duration,
    /// Until when the member may act on its partitions; past it, it is suspended.
    lease: Option<Instant>,
    /// Until when, without an acknowledgement, the member still counts itself a member.
    session_bound: Option<Instant>,
    /// The member id of a membership the coordinator ended, to relinquish.
    relinquish: Option<String>,
    next_beat: Option<Instant>,
    leaving: Option<Leaving>,
    next_request: ReqId,
    in_flight: HashMap<ReqId, InFlight>,
    /// The membership ended for good because a newer process took the instance id.
    pub(super) fenced: bool,
}

impl Membership {
    pub(super) fn new(settings: Settings, seed: u64, now: Instant) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let token = new_token(&mut rng);
        Self {
            interval: settings.heartbeat_interval,
            session_timeout: settings.session_timeout,
            settings,
            rng,
            backoff: Backoff::new(Duration::from_millis(50), Duration::from_secs(5)),
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
            revoke_requested: BTreeSet::new(),
            acks_unsent: BTreeSet::new(),
            progress: 0,
            sequence: 0,
            lease: None,
            session_bound: None,
            relinquish: None,
            next_beat: None,
            leaving: None,
            next_request: 1,
            in_flight: HashMap::new(),
            fenced: false,
        }
    }

    // -----------------------------------------------------------------------------------
    // What the simulation reads
    // -----------------------------------------------------------------------------------

    pub(super) fn member_id(&self) -> Option<&str> {
        self.member_id.as_deref()
    }

    /// Until when no other member may own this member's partitions: the process acts on
    /// them until then, and is suspended after.
    pub(super) fn lease(&self) -> Option<Instant> {
        self.lease
    }

    pub(super) fn is_active(&self) -> bool {
        matches!(self.phase, Phase::Active)
    }

    pub(super) fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished)
    }

    pub(super) fn wants_progress(&self) -> bool {
        matches!(self.phase, Phase::AwaitingProgress { .. })
    }

    pub(super) fn is_leaving(&self) -> bool {
        self.leaving.is_some()
    }

    pub(super) fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::Joining(_) => "joining",
            Phase::Active if self.leaving.is_some() => "leaving",
            Phase::Active => "active",
            Phase::AwaitingProgress { .. } => "awaiting progress",
            Phase::Finished if self.fenced => "fenced",
            Phase::Finished => "finished",
        }
    }

    /// Partitions the application is asked to release.
    pub(super) fn revoking(&self) -> Vec<Tp> {
        self.holdings
            .iter()
            .filter(|(_, h)| **h == Hold::Revoking)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Partitions the application holds (owned or being revoked).
    pub(super) fn held(&self) -> Vec<Tp> {
        self.holdings
            .iter()
            .filter(|(_, h)| **h != Hold::Released)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    // -----------------------------------------------------------------------------------
    // Outputs
    // -----------------------------------------------------------------------------------

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Joining(j) => (self.connected && j.in_flight.is_none()).then_some(j.not_before),
            Phase::Active => {
                let mut t = self.session_bound;
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

    pub(super) fn poll_transmit(&mut self, now: Instant) -> Option<(ReqId, Request)> {
        if !self.connected {
            return None;
        }
        if let Some(member_id) = self.relinquish.take() {
            let id = self.request_id();
            self.in_flight.insert(id, InFlight::Relinquish);
            let request = Request::Relinquish(RelinquishRequest {
                group: self.settings.group.clone(),
                member_id,
            });
            return Some((id, request));
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
                    session_timeout_ms: ms(s.session_timeout),
                    progress_timeout_ms: ms(s.progress_timeout),
                    rebalance_timeout_ms: ms(s.rebalance_timeout),
                    lease_timeout_ms: if s.lease_timeout < s.session_timeout {
                        ms(s.lease_timeout)
                    } else {
                        0
                    },
                    detector: String::new(),
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
                            // The application is told the rest is lost as the leave goes
                            // out; the coordinator holds it for this member's lease.
                            self.holdings.retain(|_, h| *h == Hold::Released);
                            LeaveMode::Unconfirmed
                        } else if self.settings.instance_id.is_some() {
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
                    group: self.settings.group.clone().into(),
                    member_id: member_id.into(),
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

    fn request_id(&mut self) -> ReqId {
        let id = self.next_request;
        self.next_request += 1;
        id
    }

    // -----------------------------------------------------------------------------------
    // Inputs: connection
    // -----------------------------------------------------------------------------------

    pub(super) fn handle_connected(&mut self, now: Instant) {
        self.connected = true;
        if matches!(self.phase, Phase::Active) {
            self.next_beat = Some(now);
        }
    }

    /// The connection closed: the member is suspended at once (it stops acting until an
    /// acknowledgement on a new connection resumes it).
    pub(super) fn handle_disconnected(&mut self, now: Instant) {
        self.connected = false;
        if let Some(lease) = &mut self.lease {
            *lease = (*lease).min(now);
        }
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
            j.in_flight = None;
            j.early_pushes.clear();
        }
        if self.leaving.as_ref().is_some_and(|l| l.sent.is_some()) {
            self.finish_leave();
        }
    }

    fn requeue_acks(&mut self, acks: BTreeSet<Tp>) {
        for tp in acks {
            if self.holdings.get(&tp) == Some(&Hold::Released) {
                self.acks_unsent.insert(tp);
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Inputs: responses
    // -----------------------------------------------------------------------------------

    pub(super) fn handle_response(&mut self, id: ReqId, response: Response, now: Instant) {
        match self.in_flight.remove(&id) {
            Some(InFlight::Join { sent }) => self.on_join_response(id, sent, response, now),
            Some(InFlight::Heartbeat {
                sent,
                incarnation,
                acks,
            }) => self.on_heartbeat_response(sent, incarnation, acks, response, now),
            Some(InFlight::Leave { incarnation })
                if incarnation == self.incarnation && self.leaving.is_some() =>
            {
                self.finish_leave();
            }
            Some(InFlight::Commit { incarnation }) => {
                self.on_commit_response(incarnation, response, now);
            }
            Some(InFlight::Leave { .. } | InFlight::Relinquish) | None => {}
        }
    }

    fn on_join_response(&mut self, id: ReqId, sent: Instant, response: Response, now: Instant) {
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
                self.session_bound = Some(sent + self.session_span());
                self.next_beat = Some(now + heartbeat_delay(self.interval, &mut self.rng));
                self.backoff.reset();
                for push in early {
                    if self.accepts_push(&push) {
                        self.handle_push(push, now);
                    }
                }
            }
            Response::Error(e) => match e.code {
                ErrorCode::FencedInstance => self.fail(true),
                code => match code.action() {
                    ClientAction::Retry => {
                        j.not_before = now + self.backoff.next_delay(&mut self.rng);
                    }
                    ClientAction::Rejoin if j.member_id.is_some() => {
                        j.member_id = None;
                        j.token = new_token(&mut self.rng);
                        j.not_before = now;
                    }
                    ClientAction::Rejoin => {
                        j.token = new_token(&mut self.rng);
                        j.not_before = now + self.backoff.next_delay(&mut self.rng);
                    }
                    ClientAction::GiveUp | ClientAction::Proceed => self.fail(false),
                },
            },
            _ => j.not_before = now + self.backoff.next_delay(&mut self.rng),
        }
    }

    fn on_heartbeat_response(
        &mut self,
        sent: Instant,
        incarnation: u64,
        acks: BTreeSet<Tp>,
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
                // Resumes a suspended member: acting again until the new lease ends.
                let renewed = sent + self.lease_span();
                self.lease = Some(self.lease.map_or(renewed, |l| l.max(renewed)));
                let bound = sent + self.session_span();
                self.session_bound = Some(self.session_bound.map_or(bound, |b| b.max(bound)));
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
                        self.relinquish = self.end_membership();
                        self.fail(true);
                    }
                    ErrorCode::MemberExpelled => {
                        let id = self.member_id.clone();
                        self.membership_gone(now);
                        self.relinquish = id;
                    }
                    ErrorCode::UnknownMember
                    | ErrorCode::IllegalGeneration
                    | ErrorCode::InconsistentMember => self.membership_gone(now),
                    _ => {}
                }
            }
            _ => self.requeue_acks(acks),
        }
    }

    fn on_commit_response(&mut self, incarnation: u64, response: Response, now: Instant) {
        let current = incarnation == self.incarnation && matches!(self.phase, Phase::Active);
        if let Response::Error(e) = response {
            match e.code {
                ErrorCode::UnknownMember | ErrorCode::MemberExpelled if current => {
                    self.membership_gone(now);
                }
                ErrorCode::FencedInstance if current => {
                    self.end_membership();
                    self.fail(true);
                }
                _ => {}
            }
        }
    }

    /// The lease timeout (never more than the session timeout in force), less the margin.
    fn lease_span(&self) -> Duration {
        self.settings
            .lease_timeout
            .min(self.session_timeout)
            .saturating_sub(self.settings.lease_margin)
    }

    fn session_span(&self) -> Duration {
        self.session_timeout
            .saturating_sub(self.settings.lease_margin)
    }

    // -----------------------------------------------------------------------------------
    // Inputs: pushes
    // -----------------------------------------------------------------------------------

    pub(super) fn accepts_push(&self, push: &Push) -> bool {
        match push_target(push) {
            Some((group, member)) => {
                group == self.settings.group && self.member_id.as_deref() == Some(member)
            }
            None => false,
        }
    }

    pub(super) fn accepts_early_push(&self, push: &Push) -> bool {
        match (&self.phase, push_target(push)) {
            (Phase::Joining(j), Some((group, _))) => {
                j.in_flight.is_some() && group == self.settings.group
            }
            _ => false,
        }
    }

    pub(super) fn handle_push(&mut self, push: Push, now: Instant) {
        if let Phase::Joining(j) = &mut self.phase {
            if j.in_flight.is_some() && j.early_pushes.len() < 64 {
                j.early_pushes.push(push);
            }
            return;
        }
        if !self.accepts_push(&push) {
            return;
        }
        match push {
            Push::Assignment(p) => self.on_assignment(p.generation, from_wire(&p.partitions)),
            Push::Revoke(p) => self.on_revoke(from_wire(&p.partitions)),
            Push::Expelled(p) => self.on_expelled(p.reason, now),
            Push::Shutdown(_) => {}
        }
    }

    fn on_assignment(&mut self, generation: u32, full: BTreeSet<Tp>) {
        self.generation = generation;
        let leaving = self.leaving.is_some();
        for tp in &full {
            if !leaving && !self.holdings.contains_key(tp) {
                self.holdings.insert(tp.clone(), Hold::Owned);
            }
        }
        self.holdings.retain(|tp, _| full.contains(tp));
        let holdings = &self.holdings;
        self.acks_unsent.retain(|tp| holdings.contains_key(tp));
        self.revoke_requested.retain(|tp| holdings.contains_key(tp));
    }

    fn on_revoke(&mut self, full: BTreeSet<Tp>) {
        self.revoke_requested.clear();
        for tp in full {
            if let Some(h) = self.holdings.get_mut(&tp) {
                if *h == Hold::Owned {
                    *h = Hold::Revoking;
                }
                self.revoke_requested.insert(tp);
            }
        }
    }

    /// The coordinator ended the membership. The application stops at once (it takes
    /// the `Lost` event), and then the member relinquishes what may be held for it.
    fn on_expelled(&mut self, reason: ExpelReason, now: Instant) {
        let relinquish = match reason {
            ExpelReason::Fenced => {
                let id = self.end_membership();
                self.fail(true);
                id
            }
            _ if self.leaving.is_some() => {
                let id = if reason != ExpelReason::Left {
                    self.end_membership()
                } else {
                    None
                };
                self.finish_leave();
                id
            }
            ExpelReason::ProgressExpired => {
                let id = self.end_membership();
                self.phase = Phase::AwaitingProgress {
                    since: self.progress,
                };
                id
            }
            _ => {
                let id = self.end_membership();
                self.rejoin(None, now);
                id
            }
        };
        if relinquish.is_some() {
            self.relinquish = relinquish;
        }
    }

    // -----------------------------------------------------------------------------------
    // Inputs: time and the application
    // -----------------------------------------------------------------------------------

    pub(super) fn handle_timeout(&mut self, now: Instant) {
        if !matches!(self.phase, Phase::Active) {
            return;
        }
        if self.session_bound.is_some_and(|l| now >= l) {
            let old = self.end_membership();
            if self.leaving.is_some() {
                self.finish_leave();
            } else {
                self.rejoin(old, now);
            }
            return;
        }
        let leave_expired = self.leaving.as_ref().is_some_and(|l| match l.sent {
            Some(sent) => now >= sent + self.session_timeout,
            None => !self.connected && now >= l.deadline,
        });
        if leave_expired {
            self.finish_leave();
        }
    }

    pub(super) fn set_progress(&mut self, progress: u64, now: Instant) {
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

    pub(super) fn ack(&mut self, partitions: impl IntoIterator<Item = Tp>, now: Instant) {
        let mut send = false;
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
                *h = Hold::Released;
            } else {
                *h = Hold::Owned;
            }
        }
        if send && matches!(self.phase, Phase::Active) && self.connected {
            self.next_beat = Some(now);
        }
    }

    pub(super) fn leave(&mut self, timeout: Duration, now: Instant) {
        match self.phase {
            Phase::Active if self.leaving.is_none() => {
                for h in self.holdings.values_mut() {
                    if *h == Hold::Owned {
                        *h = Hold::Revoking;
                    }
                }
                self.leaving = Some(Leaving {
                    deadline: now + timeout,
                    sent: None,
                });
            }
            Phase::Active => {}
            Phase::Joining(_) | Phase::AwaitingProgress { .. } | Phase::Finished => {
                self.phase = Phase::Finished;
            }
        }
    }

    /// A commit of one offset for a partition the application holds.
    pub(super) fn commit(&mut self, tp: &Tp, offset: i64) -> Option<(ReqId, Request)> {
        let member_id = match (&self.phase, &self.member_id) {
            (Phase::Active, Some(id)) if self.leaving.as_ref().is_none_or(|l| l.sent.is_none()) => {
                id.clone()
            }
            _ => return None,
        };
        if !self.connected || !matches!(self.holdings.get(tp), Some(Hold::Owned | Hold::Revoking)) {
            return None;
        }
        let request = Request::CommitOffsets(CommitOffsetsRequest {
            group: self.settings.group.clone(),
            member_id: Some(member_id),
            generation: self.generation,
            offsets: vec![OffsetCommit {
                topic: tp.0.clone(),
                partition: tp.1,
                offset,
                metadata: String::new(),
            }],
        });
        let id = self.request_id();
        self.in_flight.insert(
            id,
            InFlight::Commit {
                incarnation: self.incarnation,
            },
        );
        Some((id, request))
    }

    /// Not in the client crate: the application restarts its membership with new
    /// timeouts while keeping its member id. It stops acting at once, as on a lease
    /// expiry, and rejoins naming its member id with a new join token.
    pub(super) fn reconfigure(&mut self, settings: Settings, now: Instant) -> bool {
        if !matches!(self.phase, Phase::Active) || self.leaving.is_some() {
            return false;
        }
        let old = self.end_membership();
        self.settings = settings;
        self.session_timeout = self.settings.session_timeout;
        self.interval = self.settings.heartbeat_interval;
        self.rejoin(old, now);
        true
    }

    // -----------------------------------------------------------------------------------
    // Transitions
    // -----------------------------------------------------------------------------------

    fn membership_gone(&mut self, now: Instant) {
        if self.leaving.is_some() {
            self.finish_leave();
        } else {
            self.end_membership();
            self.rejoin(None, now);
        }
    }

    fn end_membership(&mut self) -> Option<String> {
        self.holdings.clear();
        self.revoke_requested.clear();
        self.acks_unsent.clear();
        self.lease = None;
        self.session_bound = None;
        self.next_beat = None;
        self.incarnation += 1;
        self.in_flight
            .retain(|_, f| matches!(f, InFlight::Join { .. } | InFlight::Commit { .. }));
        self.member_id.take()
    }

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

    fn finish_leave(&mut self) {
        self.holdings.clear();
        self.revoke_requested.clear();
        self.acks_unsent.clear();
        self.lease = None;
        self.session_bound = None;
        self.next_beat = None;
        self.member_id = None;
        self.incarnation += 1;
        self.leaving = None;
        self.phase = Phase::Finished;
    }

    fn fail(&mut self, fenced: bool) {
        self.holdings.clear();
        self.lease = None;
        self.session_bound = None;
        self.next_beat = None;
        self.member_id = None;
        self.incarnation += 1;
        self.phase = Phase::Finished;
        self.leaving = None;
        self.fenced |= fenced;
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
