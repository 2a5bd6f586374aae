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
//!
//! # Lease, suspension, session bound
//!
//! Each acknowledged join or heartbeat, sent at `sent`, renews two deadlines: the lease
//! `sent + L - M` and the session bound `sent + T - M`. When the lease passes (or the
//! connection is lost) an active member *suspends*: [`Event::Suspended`] with everything
//! it holds. The next acknowledgement that renews the lease past `now` resumes it
//! ([`Event::Resumed`]). When the session bound passes, the membership ends with
//! [`LostReason::LeaseExpired`] and the member rejoins as before.
//!
//! # Relinquish
//!
//! When the coordinator ends the membership (an expulsion push, a `member_expelled` or
//! `fenced_instance` answer), the [`Event::Lost`] it produces carries a [`Ticket`]. Once
//! the application has moved past that event (asked for the next one:
//! [`Membership::handle_taken`]), the member sends
//! `Relinquish` for the id it was expelled with, so that what the coordinator holds for
//! it moves at once instead of at the end of its lease.

mod app;
mod pushes;
mod responses;
#[cfg(feature = "testing")]
mod testing;
mod transmit;

#[cfg(feature = "testing")]
pub use testing::Stage;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::mem;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rollcall_protocol::{
    ClientAction, CommitOffsetsRequest, DrainRequest, ErrorCode, ExpelReason, HeartbeatRequest,
    JoinRequest, LeaveMode, LeaveRequest, OffsetCommit, PartitionLoad, Push, RelinquishRequest,
    Request, Response,
};
use tracing::debug;

use crate::backoff::{heartbeat_delay, Backoff};
use crate::config::Settings;
use crate::error::{CommitError, FatalError, LeaveError, RequestError};
use crate::types::{
    from_wire, to_wire, Assignment, Event, LostReason, Offset, PartitionSet, TopicPartition,
};

/// Identifies a request issued by one membership; the connection maps correlation ids to
/// it.
pub type RequestId = u64;

/// Identifies an event whose taking by the application the membership waits for.
pub type Ticket = u64;

/// Most pushes kept while a join's response is outstanding.
const MAX_EARLY_PUSHES: usize = 64;

/// What the coordinator of the current connection supports beyond version 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// Join version 1: the lease timeout.
    pub lease_timeout: bool,
    /// The Relinquish request.
    pub relinquish: bool,
    /// Join version 2: the group's failure detector.
    pub join_detector: bool,
    /// The Heartbeats request: the connection task may renew several members in one
    /// frame (the membership itself always produces lone heartbeats).
    pub heartbeats: bool,
    /// FetchOffsets version 1: offsets read a page at a time, so any number of them
    /// can be fetched.
    pub paged_fetch: bool,
    /// Join version 3: the member's label, rack, capacity and preferred racks.
    pub join_placement: bool,
    /// Heartbeat (and Heartbeats) version 1: partition loads ride on heartbeats.
    pub loads: bool,
}

impl Features {
    /// Everything this client knows of.
    #[cfg(any(test, feature = "testing"))]
    pub const ALL: Self = Self {
        lease_timeout: true,
        relinquish: true,
        join_detector: true,
        heartbeats: true,
        paged_fetch: true,
        join_placement: true,
        loads: true,
    };
}

/// A Relinquish to send once the application has taken the `Lost` event that ended the
/// membership.
#[derive(Debug)]
struct Relinquish {
    ticket: Ticket,
    /// The id the member had when the coordinator ended the membership.
    member_id: String,
    /// After this, nothing is held for the member any more: the request is dropped.
    give_up_at: Instant,
    state: RelinquishState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RelinquishState {
    /// The application has not taken the `Lost` event yet.
    Untaken,
    /// To be sent as soon as connected.
    Due,
    /// Sent on the current connection, not answered yet.
    Sent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Owned,
    /// Asked back by the [`Event::RevokeRequested`] of generation `announced`: only an
    /// acknowledgement from an application that was given that event (or a later one
    /// naming the partition) releases it.
    Revoking {
        announced: u32,
    },
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
    Relinquish {
        ticket: Ticket,
    },
}

/// Reconnection and rejoin backoff bounds.
#[derive(Debug, Clone, Copy)]
pub struct BackoffConfig {
    /// The first delay bound.
    pub base: Duration,
    /// The largest delay bound.
    pub max: Duration,
}

/// One member's state. See the module documentation.
#[derive(Debug)]
pub struct Membership {
    settings: Settings,
    rng: SmallRng,
    /// Spaces the retries of a join, and of a heartbeat answered `coordinator_loading`;
    /// reset by an acknowledged join or heartbeat.
    backoff: Backoff,
    phase: Phase,
    connected: bool,
    /// What the current connection's coordinator supports.
    features: Features,
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
    /// Loads the application reported since the last heartbeat: sent with the next
    /// one, once.
    loads_unsent: BTreeMap<TopicPartition, f64>,
    progress: u64,
    sequence: u64,
    interval: Duration,
    session_timeout: Duration,
    /// `sent + L - M` for the latest acknowledged join or heartbeat, while active.
    lease: Option<Instant>,
    /// `sent + T - M` for the same, while active.
    session_bound: Option<Instant>,
    /// Whether the member is suspended (and the application was told).
    suspended: bool,
    /// The coordinator said it does not serve the group: the connection task is to
    /// find the group's coordinator and connect the membership there
    /// ([`Membership::take_relocate`]).
    relocate: bool,
    next_beat: Option<Instant>,
    leaving: Option<Leaving>,
    last_loss: Option<LostReason>,
    next_request: RequestId,
    in_flight: HashMap<RequestId, InFlight>,
    events: VecDeque<(Event, Option<Ticket>)>,
    relinquishes: Vec<Relinquish>,
    next_ticket: Ticket,
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
            features: Features {
                lease_timeout: false,
                relinquish: false,
                join_detector: false,
                heartbeats: false,
                paged_fetch: false,
                join_placement: false,
                loads: false,
            },
            member_id: None,
            incarnation: 0,
            generation: 0,
            holdings: BTreeMap::new(),
            revoke_requested: PartitionSet::new(),
            acks_unsent: PartitionSet::new(),
            loads_unsent: BTreeMap::new(),
            progress: 0,
            sequence: 0,
            lease: None,
            session_bound: None,
            suspended: false,
            relocate: false,
            next_beat: None,
            leaving: None,
            last_loss: None,
            next_request: 1,
            in_flight: HashMap::new(),
            events: VecDeque::new(),
            relinquishes: Vec::new(),
            next_ticket: 1,
            join_reported: false,
            join_result: None,
            leave_result: None,
        }
    }

    // -----------------------------------------------------------------------------------
    // Accessors
    // -----------------------------------------------------------------------------------

    /// The group.
    pub fn group(&self) -> &str {
        &self.settings.group
    }

    /// The member id, while a member.
    pub fn member_id(&self) -> Option<&str> {
        self.member_id.as_deref()
    }

    /// The partitions held and the generation.
    pub fn assignment(&self) -> Assignment {
        let mut a = Assignment {
            generation: self.generation,
            ..Assignment::default()
        };
        for (tp, h) in &self.holdings {
            match h {
                Hold::Owned => {
                    a.partitions.insert(tp.clone());
                }
                Hold::Revoking { .. } => {
                    a.partitions.insert(tp.clone());
                    a.revoking.insert(tp.clone());
                }
                Hold::Released => {}
            }
        }
        a
    }

    /// The session timeout the member asked for.
    pub fn session_timeout(&self) -> Duration {
        self.settings.session_timeout
    }

    /// Until when no other member can own this member's partitions, if it is a member.
    /// In the past once the lease has run out (the member is then suspended).
    pub fn lease_deadline(&self) -> Option<Instant> {
        self.lease
    }

    /// Whether the member is suspended: its lease ran out or its connection was lost, and
    /// no acknowledgement has renewed it since.
    pub fn is_suspended(&self) -> bool {
        self.suspended
    }

    /// The lease timeout in force on the current connection: `L`, or the session timeout
    /// against a coordinator that does not know lease timeouts.
    fn lease_timeout(&self) -> Duration {
        if self.features.lease_timeout {
            self.settings.lease_timeout.min(self.session_timeout)
        } else {
            self.session_timeout
        }
    }

    /// The progress counter as last reported.
    #[cfg(test)]
    pub(crate) fn progress(&self) -> u64 {
        self.progress
    }

    /// Whether the membership waits for the application to make progress.
    pub fn wants_progress(&self) -> bool {
        matches!(self.phase, Phase::AwaitingProgress { .. })
    }

    /// Whether the membership is over, every event has been drained and no Relinquish
    /// is pending.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished)
            && self.events.is_empty()
            && self.relinquishes.is_empty()
    }

    // -----------------------------------------------------------------------------------
    // Inputs: connection
    // -----------------------------------------------------------------------------------

    /// A connection is up and its handshake done, to a coordinator supporting
    /// `features`. An active member probes it at once with a heartbeat carrying its
    /// member id and generation.
    pub fn handle_connected(&mut self, now: Instant, features: Features) {
        self.connected = true;
        self.features = features;
        if matches!(self.phase, Phase::Active) {
            self.next_beat = Some(now);
        }
    }

    /// The connection is gone, and every request in flight with it. An active member
    /// suspends at once: nothing can renew its lease until it reconnects.
    pub fn handle_disconnected(&mut self, now: Instant) {
        self.detach(now);
        self.suspend();
    }

    /// Whether the coordinator said it does not serve the group since the last call:
    /// the connection task then finds the group's coordinator and calls
    /// [`Membership::handle_connected`] once connected there. Until then the membership
    /// is detached (as if disconnected) but not suspended: its lease still holds, and
    /// the coordinator that serves the group honours it; it suspends when the lease
    /// runs out, as ever.
    pub fn take_relocate(&mut self) -> bool {
        mem::take(&mut self.relocate)
    }

    /// The coordinator does not serve the group (`not_coordinator`): detached from the
    /// connection, same member id and generation, to be connected to the group's
    /// coordinator.
    fn relocate(&mut self, now: Instant) {
        debug!(group = %self.settings.group, "the group is served by another coordinator");
        self.detach(now);
        self.relocate = true;
    }

    /// No longer connected: what was in flight is lost (acknowledgements to send again,
    /// relinquishes due again, a join retried with its token), a sent leave is
    /// unconfirmed.
    fn detach(&mut self, _now: Instant) {
        self.connected = false;
        self.next_beat = None;
        for (_, f) in mem::take(&mut self.in_flight) {
            match f {
                InFlight::Heartbeat {
                    incarnation, acks, ..
                } if incarnation == self.incarnation => self.requeue_acks(acks),
                InFlight::Relinquish { ticket } => {
                    // Unanswered: sent again on the next connection.
                    for r in &mut self.relinquishes {
                        if r.ticket == ticket {
                            r.state = RelinquishState::Due;
                        }
                    }
                }
                _ => {}
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

    /// Suspends an active member, telling the application (once). Not once its leave
    /// is sent: the membership is ending and nothing is left to act on.
    fn suspend(&mut self) {
        let left = self.leaving.as_ref().is_some_and(|l| l.sent.is_some());
        if !matches!(self.phase, Phase::Active) || self.suspended || left {
            return;
        }
        self.suspended = true;
        let partitions = self.held();
        self.emit(Event::Suspended { partitions });
    }

    /// Resumes a suspended member whose lease an acknowledgement renewed past `now`.
    fn resume_if_renewed(&mut self, now: Instant) {
        if !self.suspended || !matches!(self.phase, Phase::Active) {
            return;
        }
        if self.lease.is_some_and(|l| l > now) {
            self.suspended = false;
            let partitions = self.held();
            self.emit(Event::Resumed { partitions });
        }
    }

    /// The partitions the member holds (owned or being revoked).
    fn held(&self) -> PartitionSet {
        self.holdings
            .iter()
            .filter(|(_, h)| **h != Hold::Released)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Renews the lease and the session bound from an acknowledged request sent at
    /// `sent`; they never move back.
    fn renew(&mut self, sent: Instant) {
        let margin = self.settings.lease_margin;
        let lease = sent + self.lease_timeout().saturating_sub(margin);
        let bound = sent + self.session_timeout.saturating_sub(margin);
        self.lease = Some(self.lease.map_or(lease, |l| l.max(lease)));
        self.session_bound = Some(self.session_bound.map_or(bound, |b| b.max(bound)));
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

    /// The coordinator no longer knows the member; `expelled` if it said it expelled it
    /// (rather than not knowing it at all).
    fn membership_gone(&mut self, now: Instant, expelled: bool) {
        if self.leaving.is_some() {
            self.finish_leave(Ok(()));
        } else {
            let old = self.end_membership(LostReason::MembershipGone);
            if expelled {
                self.relinquish_after_lost(old, now);
            }
            self.rejoin(None, now);
        }
    }

    /// The coordinator ended the membership of `member_id`, and the `Lost` event just
    /// emitted says so: once the application has taken it, a Relinquish goes out.
    fn relinquish_after_lost(&mut self, member_id: Option<String>, now: Instant) {
        let Some(member_id) = member_id else {
            return;
        };
        let Some((Event::Lost { .. }, ticket @ None)) = self.events.back_mut() else {
            return;
        };
        let id = self.next_ticket;
        self.next_ticket += 1;
        *ticket = Some(id);
        self.relinquishes.push(Relinquish {
            ticket: id,
            member_id,
            // Whatever the coordinator holds for the member is released by then anyway.
            give_up_at: now + self.session_timeout,
            state: RelinquishState::Untaken,
        });
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
        self.clear_lease();
        self.next_beat = None;
        self.incarnation += 1;
        self.last_loss = Some(reason);
        self.in_flight.retain(|_, f| {
            matches!(
                f,
                InFlight::Join { .. } | InFlight::Commit { .. } | InFlight::Relinquish { .. }
            )
        });
        self.emit(Event::Lost {
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
        // Like every loss but a reassignment, this one ends the suspension.
        self.suspended = false;
        self.emit(Event::Lost {
            partitions: lost,
            reason: LostReason::Left,
        });
    }

    /// Not a member any more: no lease, no suspension.
    fn clear_lease(&mut self) {
        self.lease = None;
        self.session_bound = None;
        self.suspended = false;
    }

    fn finish_leave(&mut self, result: Result<(), LeaveError>) {
        let remaining: PartitionSet = mem::take(&mut self.holdings)
            .into_iter()
            .filter(|(_, h)| *h != Hold::Released)
            .map(|(tp, _)| tp)
            .collect();
        if !remaining.is_empty() {
            self.emit(Event::Lost {
                partitions: remaining,
                reason: LostReason::Left,
            });
        }
        self.revoke_requested.clear();
        self.acks_unsent.clear();
        self.clear_lease();
        self.next_beat = None;
        self.member_id = None;
        self.incarnation += 1;
        self.leaving = None;
        self.phase = Phase::Finished;
        self.leave_result = Some(result);
    }

    fn fail(&mut self, error: FatalError) {
        if self.join_reported {
            self.emit(Event::Fatal(error));
        } else {
            self.join_reported = true;
            self.join_result = Some(Err(error));
        }
        self.holdings.clear();
        self.clear_lease();
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
