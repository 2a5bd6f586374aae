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

mod app;
mod pushes;
mod responses;

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
                    lease_timeout_ms: 0,
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
