//! The membership state machine under simulated time: no sockets, no sleeps.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rollcall_protocol::{
    AssignmentPush, CommitOffsetsResponse, ErrorCode, ExpelReason, ExpelledPush, HeartbeatResponse,
    JoinResponse, LeaveMode, PartitionResult, Push, Request, Response, RevokePush,
};

use super::{BackoffConfig, Features, Membership, RequestId, Ticket};
use crate::config::MemberConfig;
use crate::error::{CommitError, FatalError, LeaveError};
use crate::types::{to_wire, Event, LostReason, Offset, PartitionSet, TopicPartition};

const SESSION: Duration = Duration::from_millis(1000);
const INTERVAL: Duration = Duration::from_millis(200);
const LEASE: Duration = Duration::from_millis(600);
const MARGIN: Duration = Duration::from_millis(50);
const MS: Duration = Duration::from_millis(1);

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn set(ps: &[u32]) -> PartitionSet {
    ps.iter().map(|p| tp(*p)).collect()
}

fn config() -> MemberConfig {
    MemberConfig::new("g", [("t", 8)])
        .with_session_timeout(SESSION)
        .with_heartbeat_interval(INTERVAL)
        .with_lease_timeout(LEASE)
        .with_lease_margin(MARGIN)
        .with_rebalance_timeout(Duration::from_secs(5))
}

/// A membership with a simulated clock and a log of what it sent.
struct Harness {
    m: Membership,
    now: Instant,
    /// Requests sent and not answered yet, with their send instants.
    outbox: VecDeque<(RequestId, Request, Instant)>,
    /// Answer every heartbeat as soon as it is sent (and log it in `beats`).
    auto_ack: bool,
    beats: Vec<(rollcall_protocol::HeartbeatRequest, Instant)>,
    /// Tickets of the events drained by [`Harness::events`], in order.
    tickets: Vec<Ticket>,
    /// The generation of the latest `RevokeRequested` drained for each partition, as the
    /// member handle keeps it for [`Harness::ack`].
    announced: BTreeMap<TopicPartition, u32>,
}

impl Harness {
    fn new() -> Self {
        Self::with_config(config(), 1)
    }

    fn with_config(config: MemberConfig, seed: u64) -> Self {
        let now = Instant::now();
        let backoff = BackoffConfig {
            base: Duration::from_millis(10),
            max: Duration::from_millis(100),
        };
        Self {
            m: Membership::new(config.resolve().unwrap(), backoff, seed, now),
            now,
            outbox: VecDeque::new(),
            auto_ack: false,
            beats: Vec::new(),
            tickets: Vec::new(),
            announced: BTreeMap::new(),
        }
    }

    /// Fires the timers due now and collects everything the membership wants to send
    /// now, as the connection task does after every input.
    fn flush(&mut self) {
        self.m.handle_timeout(self.now);
        while let Some((id, req)) = self.m.poll_transmit(self.now) {
            match req {
                Request::Heartbeat(b) if self.auto_ack => {
                    self.beats.push((b, self.now));
                    self.ack_heartbeat(id);
                }
                req => self.outbox.push_back((id, req, self.now)),
            }
        }
    }

    /// Advances the clock to `now + d`, firing every timer on the way and collecting
    /// what is sent when.
    fn advance(&mut self, d: Duration) {
        let target = self.now + d;
        while let Some(wake) = self.m.poll_timeout() {
            if wake > target {
                break;
            }
            self.now = self.now.max(wake);
            self.m.handle_timeout(self.now);
            self.flush();
            if self.m.poll_timeout() == Some(wake) && wake <= self.now {
                // Nothing consumed the wake-up: avoid spinning.
                break;
            }
        }
        self.now = target;
        self.m.handle_timeout(self.now);
        self.flush();
    }

    fn connect(&mut self) {
        self.connect_to(Features::ALL);
    }

    fn connect_to(&mut self, features: Features) {
        self.m.handle_connected(self.now, features);
        self.flush();
    }

    fn disconnect(&mut self) {
        self.m.handle_disconnected(self.now);
        self.outbox.clear();
    }

    fn pop(&mut self) -> (RequestId, Request, Instant) {
        self.outbox.pop_front().expect("a request was sent")
    }

    fn pop_join(&mut self) -> (RequestId, rollcall_protocol::JoinRequest) {
        match self.pop() {
            (id, Request::Join(j), _) => (id, j),
            other => panic!("expected a join, got {other:?}"),
        }
    }

    fn pop_heartbeat(&mut self) -> (RequestId, rollcall_protocol::HeartbeatRequest, Instant) {
        match self.pop() {
            (id, Request::Heartbeat(h), at) => (id, h, at),
            other => panic!("expected a heartbeat, got {other:?}"),
        }
    }

    fn heartbeats(&mut self) -> Vec<(RequestId, rollcall_protocol::HeartbeatRequest, Instant)> {
        let mut out = Vec::new();
        while let Some((id, req, at)) = self.outbox.pop_front() {
            match req {
                Request::Heartbeat(h) => out.push((id, h, at)),
                other => panic!("expected only heartbeats, got {other:?}"),
            }
        }
        out
    }

    fn respond(&mut self, id: RequestId, response: Response) {
        self.m.handle_response(id, response, self.now);
        self.flush();
    }

    fn ack_heartbeat(&mut self, id: RequestId) {
        self.respond(
            id,
            Response::Heartbeat(HeartbeatResponse {
                generation: 1,
                session_timeout_ms: 1000,
            }),
        );
    }

    fn push(&mut self, push: Push) {
        assert!(self.m.accepts_push(&push) || self.m.accepts_early_push(&push));
        self.m.handle_push(push, self.now);
        self.flush();
    }

    fn assign(&mut self, member: &str, generation: u32, ps: &[u32]) {
        self.push(Push::Assignment(AssignmentPush {
            group: "g".into(),
            member_id: member.into(),
            generation,
            partitions: to_wire(&set(ps)),
        }));
    }

    fn revoke(&mut self, member: &str, generation: u32, ps: &[u32]) {
        self.push(Push::Revoke(RevokePush {
            group: "g".into(),
            member_id: member.into(),
            generation,
            partitions: to_wire(&set(ps)),
        }));
    }

    fn expel(&mut self, member: &str, reason: ExpelReason) {
        self.push(Push::Expelled(ExpelledPush {
            group: "g".into(),
            member_id: member.into(),
            reason,
            message: "test".into(),
        }));
    }

    /// Drains the events, keeping their tickets in `tickets`.
    fn events(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some((event, ticket)) = self.m.poll_event() {
            self.tickets.extend(ticket);
            match &event {
                Event::RevokeRequested {
                    partitions,
                    generation,
                } => {
                    for tp in partitions {
                        self.announced.insert(tp.clone(), *generation);
                    }
                }
                Event::Lost { partitions, .. } => {
                    for tp in partitions {
                        self.announced.remove(tp);
                    }
                }
                _ => {}
            }
            out.push(event);
        }
        out
    }

    /// The application acknowledges `partitions`, as the member handle does: each
    /// answers the latest `RevokeRequested` drained that named it; others are left out.
    fn ack(&mut self, partitions: impl IntoIterator<Item = TopicPartition>) {
        let acked: Vec<(TopicPartition, u32)> = partitions
            .into_iter()
            .filter_map(|tp| self.announced.remove(&tp).map(|g| (tp, g)))
            .collect();
        self.m.ack(acked, self.now);
    }

    /// The application takes every event drained so far that carried a ticket.
    fn take_events(&mut self) {
        for ticket in std::mem::take(&mut self.tickets) {
            self.m.handle_taken(ticket, self.now);
        }
        self.flush();
    }

    /// Removes the relinquishes sent and returns them with their request ids.
    fn relinquishes(&mut self) -> Vec<(RequestId, rollcall_protocol::RelinquishRequest)> {
        let mut out = Vec::new();
        self.outbox.retain(|(id, r, _)| match r {
            Request::Relinquish(r) => {
                out.push((*id, r.clone()));
                false
            }
            _ => true,
        });
        out
    }

    /// Connects, joins as `member` and receives `ps` at generation 1.
    fn joined(member: &str, ps: &[u32]) -> Self {
        let mut h = Self::new();
        h.connect();
        let (id, _) = h.pop_join();
        h.respond(id, join_ok(member));
        assert_eq!(h.m.take_join_result(), Some(Ok(())));
        h.assign(member, 1, ps);
        let expected = if ps.is_empty() {
            vec![]
        } else {
            vec![Event::Assigned {
                partitions: set(ps),
                generation: 1,
            }]
        };
        assert_eq!(h.events(), expected);
        h
    }
}

fn join_ok(member: &str) -> Response {
    Response::Join(JoinResponse {
        member_id: member.into(),
        generation: 1,
        heartbeat_interval_ms: 0,
    })
}

fn error(code: ErrorCode) -> Response {
    Response::error(0, code, "test")
}

#[test]
fn nothing_is_sent_before_connecting() {
    let mut h = Harness::new();
    h.advance(Duration::from_secs(5));
    assert!(h.outbox.is_empty());
    assert_eq!(h.m.poll_timeout(), None);
}

#[test]
fn join_carries_the_configuration_and_a_nonzero_token() {
    let mut h = Harness::with_config(config().with_instance_id("i-1").with_client_id("c"), 3);
    h.connect();
    let (_, j) = h.pop_join();
    assert_eq!(j.group, "g");
    assert_eq!(j.member_id, None);
    assert_eq!(j.instance_id.as_deref(), Some("i-1"));
    assert_eq!(j.client_id, "c");
    assert_ne!(j.join_token, 0);
    assert_eq!(j.subscription.len(), 1);
    assert_eq!(j.session_timeout_ms, 1000);
    assert_eq!(j.rebalance_timeout_ms, 5000);
    // Only one join in flight.
    h.advance(Duration::from_secs(1));
    assert!(h.outbox.is_empty());
}

#[test]
fn heartbeats_follow_a_jittered_schedule_never_longer_than_the_interval() {
    let mut h = Harness::joined("m1", &[0, 1]);
    h.auto_ack = true;
    h.advance(Duration::from_secs(10));
    assert!(h.events().is_empty());
    let beats = std::mem::take(&mut h.beats);
    assert!(beats.len() >= 50, "{} beats in 10 s", beats.len());
    let gaps: Vec<Duration> = beats.windows(2).map(|w| w[1].1 - w[0].1).collect();
    assert!(gaps
        .iter()
        .all(|g| *g <= INTERVAL && *g >= INTERVAL * 8 / 10));
    assert!(gaps.iter().max().unwrap() > gaps.iter().min().unwrap());
    for (i, (b, _)) in beats.iter().enumerate() {
        assert_eq!(b.member_id, "m1");
        assert_eq!(b.generation, 1);
        assert_eq!(b.sequence, i as u64 + 1);
    }
}

#[test]
fn members_started_together_do_not_beat_in_lockstep() {
    let mut a = Harness::with_config(config(), 1);
    let mut b = Harness::with_config(config(), 2);
    a.now = b.now;
    for h in [&mut a, &mut b] {
        h.auto_ack = true;
        h.connect();
        let (id, _) = h.pop_join();
        h.respond(id, join_ok("m"));
        h.advance(Duration::from_secs(2));
    }
    let ta: Vec<_> = a.beats.iter().map(|x| x.1).collect();
    let tb: Vec<_> = b.beats.iter().map(|x| x.1).collect();
    assert!(ta.len() > 5);
    assert_ne!(ta, tb);
}

#[test]
fn the_coordinator_may_shorten_the_interval() {
    let mut h = Harness::new();
    h.auto_ack = true;
    h.connect();
    let (id, _) = h.pop_join();
    h.respond(
        id,
        Response::Join(JoinResponse {
            member_id: "m".into(),
            generation: 1,
            heartbeat_interval_ms: 50,
        }),
    );
    h.advance(Duration::from_secs(1));
    assert!(h.beats.len() >= 20);
}

/// For a round of heartbeats, the connection task brings a member's next heartbeat
/// forward when it would be due within half the interval; never from further ahead,
/// never later, and never for a member that cannot heartbeat.
#[test]
fn a_heartbeat_is_pulled_forward_only_from_within_half_its_interval() {
    let mut h = Harness::joined("m1", &[0]);
    let due = h.m.poll_timeout().expect("a heartbeat is scheduled");
    assert!(due >= h.now + INTERVAL * 8 / 10 && due <= h.now + INTERVAL);
    assert!(!h.m.pull_beat(due - INTERVAL / 2 - MS), "too far ahead");
    assert_eq!(h.m.poll_timeout(), Some(due));

    h.now = due - INTERVAL / 2;
    assert!(h.m.pull_beat(h.now));
    assert_eq!(h.m.poll_timeout(), Some(h.now));
    h.flush();
    let (id, beat, at) = h.pop_heartbeat();
    assert_eq!((beat.sequence, at), (1, h.now));
    // The schedule restarts from the beat sent: nothing to pull right after it.
    assert!(!h.m.pull_beat(h.now));
    let next = h.m.poll_timeout().unwrap();
    assert!(next >= h.now + INTERVAL * 8 / 10);
    h.ack_heartbeat(id);
    assert_eq!(h.m.lease_deadline(), Some(at + LEASE - MARGIN));

    // A beat already due is not pulled (it goes out anyway).
    assert!(!h.m.pull_beat(next));
    // Nor is anything while disconnected or joining.
    h.disconnect();
    assert!(!h.m.pull_beat(next - MS));
    let mut joining = Harness::new();
    joining.connect();
    assert!(!joining.m.pull_beat(joining.now));
}

#[test]
fn a_push_that_overtakes_the_join_response_is_kept() {
    let mut h = Harness::new();
    h.connect();
    let (id, _) = h.pop_join();
    h.assign("m1", 1, &[2, 3]);
    // A push for another member of the group, also early: dropped once the id is known.
    h.assign("other", 1, &[4]);
    assert!(h.events().is_empty());
    h.respond(id, join_ok("m1"));
    assert_eq!(
        h.events(),
        vec![Event::Assigned {
            partitions: set(&[2, 3]),
            generation: 1
        }]
    );
    assert_eq!(h.m.assignment().partitions, set(&[2, 3]));
}

#[test]
fn assignments_are_full_sets_and_only_additions_are_announced() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.assign("m", 2, &[0, 1, 2]);
    assert_eq!(
        h.events(),
        vec![Event::Assigned {
            partitions: set(&[2]),
            generation: 2
        }]
    );
    // The same assignment again (a re-push) changes nothing.
    h.assign("m", 2, &[0, 1, 2]);
    assert!(h.events().is_empty());
    assert_eq!(h.m.assignment().generation, 2);
}

#[test]
fn revocation_is_held_until_acknowledged_and_commits_before_the_ack_are_sent() {
    let mut h = Harness::joined("m", &[0, 1, 2]);
    h.advance(Duration::from_millis(1));
    h.outbox.clear();
    h.revoke("m", 2, &[1, 2]);
    assert_eq!(
        h.events(),
        vec![Event::RevokeRequested {
            partitions: set(&[1, 2]),
            generation: 2
        }]
    );
    let a = h.m.assignment();
    assert_eq!(a.partitions, set(&[0, 1, 2]));
    assert_eq!(a.revoking, set(&[1, 2]));

    // Heartbeats before the ack carry no acknowledgement.
    h.advance(INTERVAL);
    assert!(h
        .heartbeats()
        .iter()
        .all(|(_, b, _)| b.acked_revocations.is_empty()));

    // A commit on a partition being revoked goes out.
    let (cid, req) = h.m.commit(vec![Offset::new(tp(1), 42)], h.now).unwrap();
    match req {
        Request::CommitOffsets(c) => {
            assert_eq!(c.member_id.as_deref(), Some("m"));
            assert_eq!(c.offsets[0].offset, 42);
        }
        other => panic!("{other:?}"),
    }
    let ok = Response::CommitOffsets(CommitOffsetsResponse {
        results: vec![PartitionResult {
            topic: "t".into(),
            partition: 1,
            error: ErrorCode::None,
        }],
    });
    assert_eq!(h.m.handle_commit_response(cid, ok, h.now), Ok(()));

    // The ack goes out at once, in a heartbeat.
    h.ack([tp(1)]);
    h.flush();
    let (hb, beat, _) = h.pop_heartbeat();
    assert_eq!(beat.acked_revocations, to_wire(&set(&[1])));
    // Released partitions are no longer held: commits on them fail locally.
    assert_eq!(h.m.assignment().partitions, set(&[0, 2]));
    assert_eq!(
        h.m.commit(vec![Offset::new(tp(1), 43)], h.now).unwrap_err(),
        CommitError::PartitionRevoked {
            partitions: vec![tp(1)]
        }
    );
    h.ack_heartbeat(hb);
    // The coordinator then drops it from the assignment: no loss is reported.
    h.assign("m", 2, &[0, 2]);
    assert!(h.events().is_empty());
    assert_eq!(
        h.m.commit(vec![Offset::new(tp(1), 43)], h.now).unwrap_err(),
        CommitError::NotOwner {
            partitions: vec![tp(1)]
        }
    );
}

#[test]
fn an_unanswered_ack_is_sent_again_after_a_reconnect() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.revoke("m", 2, &[1]);
    h.events();
    h.ack([tp(1)]);
    h.flush();
    let (_, beat, _) = h.pop_heartbeat();
    assert_eq!(beat.acked_revocations, to_wire(&set(&[1])));
    h.disconnect();
    h.advance(10 * MS);
    h.connect();
    let (_, probe, _) = h.pop_heartbeat();
    assert_eq!(probe.member_id, "m");
    assert_eq!(probe.acked_revocations, to_wire(&set(&[1])));
}

#[test]
fn the_lease_runs_from_the_send_instant_of_the_acknowledged_heartbeat() {
    let mut h = Harness::joined("m", &[0]);
    let joined_at = h.now;
    assert_eq!(h.m.lease_deadline(), Some(joined_at + LEASE - MARGIN));
    h.advance(INTERVAL);
    let (id, _, sent) = h.heartbeats().remove(0);
    // The answer is slow: it arrives 300 ms after the beat was written.
    h.now = sent + 300 * MS;
    h.ack_heartbeat(id);
    assert_eq!(h.m.lease_deadline(), Some(sent + LEASE - MARGIN));
}

#[test]
fn slow_acknowledgements_within_the_lease_keep_the_partitions() {
    let mut h = Harness::joined("m", &[0, 1]);
    // Every beat is acknowledged 300 ms late: with the next beat at most 200 ms later,
    // each renewal comes within the 550 ms the previous one granted.
    let mut pending: VecDeque<(RequestId, Instant)> = VecDeque::new();
    for _ in 0..500 {
        h.advance(10 * MS);
        for (id, _, at) in h.heartbeats() {
            pending.push_back((id, at));
        }
        while pending
            .front()
            .is_some_and(|(_, at)| h.now >= *at + 300 * MS)
        {
            let (id, _) = pending.pop_front().unwrap();
            h.ack_heartbeat(id);
        }
        assert!(h.events().is_empty(), "stood down at {:?}", h.now);
    }
    assert_eq!(h.m.assignment().partitions, set(&[0, 1]));
    assert!(h.m.lease_deadline().unwrap() > h.now);
    assert!(!h.m.is_suspended());
}

#[test]
fn the_lease_suspends_and_a_later_acknowledgement_resumes() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.advance(INTERVAL);
    let (id, _, sent) = h.heartbeats().remove(0);
    h.ack_heartbeat(id);
    let deadline = sent + LEASE - MARGIN;
    assert_eq!(h.m.lease_deadline(), Some(deadline));
    // Nothing is acknowledged any more (the beats vanish, or their answers do).
    h.advance(deadline - h.now - MS);
    assert!(h.events().is_empty());
    assert!(!h.m.is_suspended());
    let before = h.heartbeats();
    assert!(!before.is_empty());
    h.advance(MS);
    assert_eq!(h.now, deadline);
    assert_eq!(
        h.events(),
        vec![Event::Suspended {
            partitions: set(&[0, 1])
        }]
    );
    assert!(h.m.is_suspended());
    // Still a member, holding its partitions, with its lease in the past.
    assert_eq!(h.m.member_id(), Some("m"));
    assert_eq!(h.m.assignment().partitions, set(&[0, 1]));
    assert_eq!(h.m.lease_deadline(), Some(deadline));
    // It keeps heartbeating (short of the session bound at 950 ms); a suspension is
    // reported once.
    h.advance(350 * MS);
    let beats = h.heartbeats();
    assert!(!beats.is_empty(), "no beat while suspended");
    assert!(h.events().is_empty());
    // Commits still go out: the coordinator fences them.
    assert!(h.m.commit(vec![Offset::new(tp(0), 1)], h.now).is_ok());
    // An acknowledgement that renews the lease only into the past does not resume.
    let (old, _, old_sent) = before[0];
    assert!(old_sent + LEASE - MARGIN <= h.now);
    h.ack_heartbeat(old);
    assert!(h.events().is_empty());
    assert!(h.m.is_suspended());
    // The latest beat's acknowledgement does: same partitions, same generation.
    let (last, _, last_sent) = *beats.last().unwrap();
    h.ack_heartbeat(last);
    assert_eq!(
        h.events(),
        vec![Event::Resumed {
            partitions: set(&[0, 1])
        }]
    );
    assert!(!h.m.is_suspended());
    assert_eq!(h.m.lease_deadline(), Some(last_sent + LEASE - MARGIN));
    assert_eq!(h.m.assignment().generation, 1);
    assert!(h
        .outbox
        .iter()
        .all(|(_, r, _)| !matches!(r, Request::Join(_))));
}

#[test]
fn the_session_bound_reports_the_partitions_lost_and_rejoins() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.advance(INTERVAL);
    let beats = h.heartbeats();
    let (id, _, sent) = beats[0];
    h.ack_heartbeat(id);
    let bound = sent + SESSION - MARGIN;
    h.advance(bound - h.now - MS);
    assert_eq!(
        h.events(),
        vec![Event::Suspended {
            partitions: set(&[0, 1])
        }]
    );
    h.advance(MS);
    assert_eq!(h.now, bound);
    assert_eq!(
        h.events(),
        vec![Event::Lost {
            partitions: set(&[0, 1]),
            reason: LostReason::LeaseExpired
        }]
    );
    assert!(!h.m.is_suspended());
    assert!(h.m.assignment().partitions.is_empty());
    assert_eq!(h.m.lease_deadline(), None);
    assert_eq!(
        h.m.commit(vec![Offset::new(tp(0), 1)], h.now).unwrap_err(),
        CommitError::LeaseExpired
    );
    // A late acknowledgement changes nothing.
    for (id, _, _) in beats.into_iter().skip(1) {
        h.ack_heartbeat(id);
    }
    assert!(h.events().is_empty());
    h.outbox
        .retain(|(_, r, _)| !matches!(r, Request::Heartbeat(_)));
    // No Relinquish: the member ended the membership itself.
    h.take_events();
    assert!(h.relinquishes().is_empty());
    // It rejoins as the same member, with a fresh token.
    let (jid, j) = h.pop_join();
    assert_eq!(j.member_id.as_deref(), Some("m"));
    h.respond(jid, join_ok("m"));
    h.assign("m", 1, &[0, 1]);
    assert_eq!(
        h.events(),
        vec![Event::Assigned {
            partitions: set(&[0, 1]),
            generation: 1
        }]
    );
    assert!(h.relinquishes().is_empty());
}

#[test]
fn with_the_lease_as_long_as_the_session_the_loss_is_reported_alone() {
    let mut h = Harness::with_config(config().with_lease_timeout(SESSION), 1);
    h.connect();
    let (id, j) = h.pop_join();
    // L = T goes out as "the session timeout", at version 0.
    assert_eq!(j.lease_timeout_ms, 0);
    h.respond(id, join_ok("m"));
    h.assign("m", 1, &[0]);
    h.events();
    h.advance(SESSION);
    assert_eq!(
        h.events(),
        vec![Event::Lost {
            partitions: set(&[0]),
            reason: LostReason::LeaseExpired
        }]
    );
}

#[test]
fn the_join_carries_the_lease_timeout_unless_the_coordinator_is_too_old_for_it() {
    let mut h = Harness::new();
    h.connect();
    let (_, j) = h.pop_join();
    assert_eq!(j.lease_timeout_ms, 600);

    // A coordinator without join version 1: no lease timeout, and the lease is the
    // session timeout's.
    let mut h = Harness::new();
    h.connect_to(Features {
        lease_timeout: false,
        relinquish: false,
        join_detector: false,
        heartbeats: false,
        paged_fetch: false,
        join_placement: false,
        loads: false,
    });
    let (id, j) = h.pop_join();
    assert_eq!(j.lease_timeout_ms, 0);
    let sent = h.now;
    h.respond(id, join_ok("m"));
    assert_eq!(h.m.lease_deadline(), Some(sent + SESSION - MARGIN));
}

#[test]
fn the_session_bound_passes_while_disconnected_and_the_member_rejoins_on_reconnect() {
    let mut h = Harness::joined("m", &[3]);
    h.disconnect();
    assert_eq!(
        h.events(),
        vec![Event::Suspended {
            partitions: set(&[3])
        }]
    );
    h.advance(SESSION);
    assert_eq!(
        h.events(),
        vec![Event::Lost {
            partitions: set(&[3]),
            reason: LostReason::LeaseExpired
        }]
    );
    assert!(h.outbox.is_empty());
    h.connect();
    let (jid, j) = h.pop_join();
    assert_eq!(j.member_id.as_deref(), Some("m"));
    // The coordinator forgot it: it joins afresh.
    h.respond(jid, error(ErrorCode::UnknownMember));
    let (_, j) = h.pop_join();
    assert_eq!(j.member_id, None);
}

#[test]
fn a_lost_connection_suspends_at_once_and_the_first_acknowledgement_resumes() {
    let mut h = Harness::joined("m", &[0, 1, 2]);
    let lease = h.m.lease_deadline().unwrap();
    h.disconnect();
    // Suspended at once, well before the lease runs out (which still bounds writes).
    assert_eq!(
        h.events(),
        vec![Event::Suspended {
            partitions: set(&[0, 1, 2])
        }]
    );
    assert!(h.m.is_suspended());
    assert_eq!(h.m.lease_deadline(), Some(lease));
    assert!(lease > h.now);
    h.advance(300 * MS);
    assert!(h.events().is_empty());
    h.connect();
    assert!(h.m.is_suspended());
    // The probe carries the same member id and generation.
    let (id, probe, _) = h.pop_heartbeat();
    assert_eq!((&*probe.member_id, probe.generation), ("m", 1));
    h.ack_heartbeat(id);
    assert_eq!(
        h.events(),
        vec![Event::Resumed {
            partitions: set(&[0, 1, 2])
        }]
    );
    assert!(!h.m.is_suspended());
    // The coordinator re-pushes: 0 and 1 continue, 2 moved meanwhile, 5 is new.
    h.assign("m", 2, &[0, 1, 5]);
    assert_eq!(
        h.events(),
        vec![
            Event::Lost {
                partitions: set(&[2]),
                reason: LostReason::Reassigned
            },
            Event::Assigned {
                partitions: set(&[5]),
                generation: 2
            },
        ]
    );
    assert_eq!(h.m.assignment().partitions, set(&[0, 1, 5]));
}

#[test]
fn reconnecting_to_a_coordinator_that_forgot_the_member_loses_everything_and_rejoins() {
    for code in [ErrorCode::UnknownMember, ErrorCode::MemberExpelled] {
        let mut h = Harness::joined("m", &[0, 1]);
        let (_, first) = {
            h.disconnect();
            h.connect();
            let (id, probe, _) = h.pop_heartbeat();
            (id, probe)
        };
        assert_eq!(first.member_id, "m");
        let id = h.m.in_flight.keys().copied().next().unwrap();
        h.respond(id, error(code));
        // Lost, not resumed.
        assert_eq!(
            h.events(),
            vec![
                Event::Suspended {
                    partitions: set(&[0, 1])
                },
                Event::Lost {
                    partitions: set(&[0, 1]),
                    reason: LostReason::MembershipGone
                }
            ]
        );
        assert!(!h.m.is_suspended());
        let (_, j) = h.pop_join();
        assert_eq!(j.member_id, None);
        assert!(h.m.assignment().partitions.is_empty());
        // An expulsion calls for a Relinquish once the loss is taken, and so does an
        // unknown member (a restarted coordinator forgot the removal, not the hold).
        h.take_events();
        let sent: Vec<_> = h.relinquishes().into_iter().map(|(_, r)| r).collect();
        let expected = match code {
            ErrorCode::MemberExpelled | ErrorCode::UnknownMember => {
                vec![rollcall_protocol::RelinquishRequest {
                    group: "g".into(),
                    member_id: "m".into(),
                }]
            }
            _ => vec![],
        };
        assert_eq!(sent, expected, "{code:?}");
    }
}

#[test]
fn a_join_retried_after_a_lost_connection_keeps_its_token() {
    let mut h = Harness::new();
    h.connect();
    let (_, first) = h.pop_join();
    h.disconnect();
    h.connect();
    let (_, again) = h.pop_join();
    assert_eq!(first.join_token, again.join_token);
}

#[test]
fn a_transient_join_error_is_retried_after_a_backoff_with_the_same_token() {
    let mut h = Harness::new();
    h.connect();
    let (id, first) = h.pop_join();
    h.respond(id, error(ErrorCode::StorageFailure));
    assert!(h.outbox.is_empty() || h.now >= h.m.poll_timeout().unwrap());
    h.advance(200 * MS);
    let (_, again) = h.pop_join();
    assert_eq!(first.join_token, again.join_token);
}

#[test]
fn a_refused_configuration_fails_the_join() {
    for code in [
        ErrorCode::InconsistentSubscription,
        ErrorCode::InvalidSessionTimeout,
        ErrorCode::InvalidRequest,
        ErrorCode::GroupFull,
        ErrorCode::TooManyPartitions,
    ] {
        let mut h = Harness::new();
        h.connect();
        let (id, _) = h.pop_join();
        h.respond(id, error(code));
        assert_eq!(
            h.m.take_join_result(),
            Some(Err(FatalError::Refused {
                code,
                message: "test".into()
            }))
        );
        assert!(h.m.is_finished());
        h.advance(Duration::from_secs(1));
        assert!(h.outbox.is_empty());
    }
}

#[test]
fn a_refused_rejoin_is_a_fatal_event() {
    let mut h = Harness::joined("m", &[0]);
    h.expel("m", ExpelReason::SessionExpired);
    let (id, _) = h.pop_join();
    h.respond(id, error(ErrorCode::InconsistentSubscription));
    let events = h.events();
    assert!(matches!(
        events.as_slice(),
        [
            Event::Lost {
                reason: LostReason::Expelled(ExpelReason::SessionExpired),
                ..
            },
            Event::Fatal(FatalError::Refused {
                code: ErrorCode::InconsistentSubscription,
                ..
            })
        ]
    ));
    // Finished once the Relinquish for the expelled id is done with.
    assert!(!h.m.is_finished());
    h.take_events();
    let sent = h.relinquishes();
    assert_eq!(sent.len(), 1);
    h.respond(sent[0].0, Response::Relinquish);
    assert!(h.m.is_finished());
}

#[test]
fn fencing_is_fatal() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.expel("m", ExpelReason::Fenced);
    let events = h.events();
    assert_eq!(
        events[0],
        Event::Lost {
            partitions: set(&[0, 1]),
            reason: LostReason::Fenced
        }
    );
    assert!(matches!(events[1], Event::Fatal(FatalError::Fenced { .. })));
    h.advance(Duration::from_secs(2));
    assert!(h.outbox.is_empty());
    assert_eq!(
        h.m.commit(vec![Offset::new(tp(0), 1)], h.now).unwrap_err(),
        CommitError::Fenced
    );

    // The same from a heartbeat's answer.
    let mut h = Harness::joined("m", &[0]);
    h.advance(INTERVAL);
    let (id, _, _) = h.heartbeats().remove(0);
    h.respond(id, error(ErrorCode::FencedInstance));
    assert!(matches!(
        h.events().as_slice(),
        [Event::Lost { .. }, Event::Fatal(FatalError::Fenced { .. })]
    ));
}

#[test]
fn a_member_expelled_for_progress_rejoins_only_when_the_application_progresses() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.m.set_progress(5, h.now);
    h.expel("m", ExpelReason::ProgressExpired);
    assert_eq!(
        h.events(),
        vec![Event::Lost {
            partitions: set(&[0, 1]),
            reason: LostReason::Expelled(ExpelReason::ProgressExpired)
        }]
    );
    assert!(h.m.wants_progress());
    h.advance(Duration::from_secs(3));
    assert!(h.outbox.is_empty(), "rejoined without progress");
    assert_eq!(
        h.m.commit(vec![Offset::new(tp(0), 1)], h.now).unwrap_err(),
        CommitError::Expelled
    );
    h.m.set_progress(5, h.now);
    h.flush();
    assert!(h.outbox.is_empty());
    h.m.set_progress(6, h.now);
    h.flush();
    let (_, j) = h.pop_join();
    assert_eq!(j.member_id, None);
    assert!(!h.m.wants_progress());
}

#[test]
fn heartbeats_report_progress() {
    let mut h = Harness::joined("m", &[0]);
    h.m.set_progress(41, h.now);
    h.advance(INTERVAL);
    let (_, b, _) = h.heartbeats().remove(0);
    assert_eq!(b.progress, 41);
}

#[test]
fn session_expiry_rejoins_at_once() {
    let mut h = Harness::joined("m", &[0]);
    h.expel("m", ExpelReason::SessionExpired);
    assert_eq!(
        h.events(),
        vec![Event::Lost {
            partitions: set(&[0]),
            reason: LostReason::Expelled(ExpelReason::SessionExpired)
        }]
    );
    let (_, j) = h.pop_join();
    assert_eq!(j.member_id, None);
}

#[test]
fn commits_after_expulsion_are_refused_with_a_typed_error() {
    let mut h = Harness::joined("m", &[0]);
    let (id, _) = h.m.commit(vec![Offset::new(tp(0), 7)], h.now).unwrap();
    assert_eq!(
        h.m.handle_commit_response(id, error(ErrorCode::MemberExpelled), h.now),
        Err(CommitError::Expelled)
    );
    assert_eq!(
        h.events(),
        vec![Event::Lost {
            partitions: set(&[0]),
            reason: LostReason::MembershipGone
        }]
    );
}

#[test]
fn commit_results_map_to_typed_errors() {
    let mut h = Harness::joined("m", &[0, 1]);
    let result = |ps: &[(u32, ErrorCode)]| {
        Response::CommitOffsets(CommitOffsetsResponse {
            results: ps
                .iter()
                .map(|(p, e)| PartitionResult {
                    topic: "t".into(),
                    partition: *p,
                    error: *e,
                })
                .collect(),
        })
    };
    let commit = |h: &mut Harness, r: Response| {
        let (id, _) =
            h.m.commit(vec![Offset::new(tp(0), 1), Offset::new(tp(1), 1)], h.now)
                .unwrap();
        h.m.handle_commit_response(id, r, h.now)
    };
    assert_eq!(
        commit(
            &mut h,
            result(&[(0, ErrorCode::None), (1, ErrorCode::NotOwner)])
        ),
        Err(CommitError::NotOwner {
            partitions: vec![tp(1)]
        })
    );
    assert_eq!(
        commit(
            &mut h,
            result(&[
                (0, ErrorCode::PartitionRevoked),
                (1, ErrorCode::PartitionRevoked)
            ])
        ),
        Err(CommitError::PartitionRevoked {
            partitions: vec![tp(0), tp(1)]
        })
    );
    assert_eq!(
        commit(
            &mut h,
            result(&[(0, ErrorCode::MetadataTooLarge), (1, ErrorCode::NotOwner)])
        ),
        Err(CommitError::Refused {
            refused: vec![
                (tp(0), ErrorCode::MetadataTooLarge),
                (tp(1), ErrorCode::NotOwner)
            ]
        })
    );
    assert!(matches!(
        commit(&mut h, error(ErrorCode::StorageFailure)),
        Err(CommitError::Unavailable { .. })
    ));
    assert_eq!(
        commit(&mut h, error(ErrorCode::UnknownGroup)),
        Err(CommitError::UnknownGroup)
    );
    // Committing a partition never owned fails locally.
    assert_eq!(
        h.m.commit(vec![Offset::new(tp(7), 1)], h.now).unwrap_err(),
        CommitError::NotOwner {
            partitions: vec![tp(7)]
        }
    );
    // Disconnected: unavailable.
    h.disconnect();
    assert!(matches!(
        h.m.commit(vec![Offset::new(tp(0), 1)], h.now),
        Err(CommitError::Unavailable { .. })
    ));
}

#[test]
fn graceful_leave_revokes_locally_waits_for_the_ack_then_leaves() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.revoke("m", 2, &[1]);
    h.events();
    h.m.leave(Duration::from_secs(1), h.now);
    // Only the partition not already being revoked is announced again.
    assert_eq!(
        h.events(),
        vec![Event::RevokeRequested {
            partitions: set(&[0]),
            generation: 1
        }]
    );
    h.advance(300 * MS);
    // Heartbeats continue, no leave yet.
    assert!(!h.heartbeats().is_empty());
    // Commit before acknowledging is still possible.
    assert!(h.m.commit(vec![Offset::new(tp(0), 9)], h.now).is_ok());
    h.ack([tp(0), tp(1)]);
    h.flush();
    // The coordinator-requested revocation is acknowledged; the leave follows.
    let requests: Vec<Request> = h.outbox.drain(..).map(|x| x.1).collect();
    let leave_id = match requests.as_slice() {
        [Request::Leave(l)] => {
            assert_eq!(l.member_id, "m");
            h.m.in_flight
                .iter()
                .find(|(_, f)| matches!(f, super::InFlight::Leave { .. }))
                .map(|(id, _)| *id)
                .unwrap()
        }
        other => panic!("{other:?}"),
    };
    h.respond(leave_id, Response::Leave);
    assert_eq!(h.m.take_leave_result(), Some(Ok(())));
    assert!(h.events().is_empty());
    assert!(h.m.is_finished());
    h.advance(Duration::from_secs(2));
    assert!(h.outbox.is_empty());
}

#[test]
fn leave_goes_ahead_at_its_deadline_without_the_ack() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.m.leave(Duration::from_millis(500), h.now);
    h.events();
    h.advance(499 * MS);
    assert!(h
        .outbox
        .iter()
        .all(|(_, r, _)| matches!(r, Request::Heartbeat(_))));
    h.outbox.clear();
    h.advance(MS);
    let (id, req, _) = h.pop();
    // The application hears that the partitions are lost as the leave goes out, not
    // after the coordinator confirms it; the leave says the release is unconfirmed, so
    // the coordinator holds them until this member's lease has run out.
    assert_eq!(
        h.events(),
        vec![Event::Lost {
            partitions: set(&[0, 1]),
            reason: LostReason::Left
        }]
    );
    assert!(matches!(req, Request::Leave(l) if l.mode == LeaveMode::Unconfirmed));
    h.respond(id, Response::Leave);
    assert!(h.events().is_empty());
    assert_eq!(h.m.take_leave_result(), Some(Ok(())));
}

#[test]
fn a_static_member_stands_down_on_a_graceful_leave() {
    let mut h = Harness::with_config(config().with_instance_id("worker-1"), 1);
    h.connect();
    let (id, _) = h.pop_join();
    h.respond(id, join_ok("worker-1#m1"));
    assert_eq!(h.m.take_join_result(), Some(Ok(())));
    h.assign("worker-1#m1", 1, &[0]);
    h.events();
    h.m.leave(Duration::from_secs(1), h.now);
    h.events();
    h.ack([tp(0)]);
    h.flush();
    let leave = h
        .outbox
        .iter()
        .find_map(|(_, r, _)| match r {
            Request::Leave(l) => Some(l.clone()),
            _ => None,
        })
        .expect("a leave is sent");
    assert_eq!(leave.mode, LeaveMode::StandDown);
    assert!(h.events().is_empty(), "released partitions are not lost");
}

#[test]
fn an_unanswered_leave_is_unconfirmed() {
    let mut h = Harness::joined("m", &[]);
    h.m.leave(Duration::from_millis(500), h.now);
    h.flush();
    let (_, req, _) = h.pop();
    assert!(matches!(req, Request::Leave(_)));
    h.advance(SESSION);
    assert_eq!(h.m.take_leave_result(), Some(Err(LeaveError::Unconfirmed)));
}

/// Drives a membership with random inputs and checks, against the event stream, that a
/// partition is never reported lost while held nor held after reported lost, and that
/// the application's view (from events and its own acks) always equals the machine's.
#[test]
fn random_inputs_never_report_a_partition_both_owned_and_lost() {
    for seed in 0..300 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut h = Harness::with_config(config(), seed);
        h.connect();
        let mut app: PartitionSet = PartitionSet::new();
        let mut app_revoking: PartitionSet = PartitionSet::new();
        let mut app_suspended = false;
        let mut generation = 1;
        for step in 0..200 {
            let member = h.m.member_id().map(str::to_owned);
            match rng.gen_range(0..14) {
                0 | 1 => h.advance(Duration::from_millis(rng.gen_range(1..400))),
                2 => {
                    // Answer the oldest request, usually favourably.
                    if let Some((id, req, _)) = h.outbox.pop_front() {
                        let ok = rng.gen_bool(0.85);
                        let response = match (&req, ok) {
                            (Request::Join(_), true) => {
                                join_ok(&format!("m{}", rng.gen_range(0..3)))
                            }
                            (Request::Heartbeat(_), true) => {
                                Response::Heartbeat(HeartbeatResponse {
                                    generation,
                                    session_timeout_ms: 1000,
                                })
                            }
                            (Request::Leave(_), true) => Response::Leave,
                            (_, _) => error(
                                [
                                    ErrorCode::UnknownMember,
                                    ErrorCode::StorageFailure,
                                    ErrorCode::MemberExpelled,
                                ][rng.gen_range(0..3)],
                            ),
                        };
                        h.respond(id, response);
                    }
                }
                3..=5 => {
                    if let Some(m) = member {
                        generation += u32::from(rng.gen_bool(0.5));
                        let ps: Vec<u32> = (0..8).filter(|_| rng.gen_bool(0.4)).collect();
                        h.assign(&m, generation, &ps);
                    }
                }
                6 | 7 => {
                    if let Some(m) = member {
                        let held: Vec<u32> =
                            h.m.assignment()
                                .partitions
                                .iter()
                                .map(|tp| tp.partition)
                                .filter(|_| rng.gen_bool(0.5))
                                .collect();
                        h.revoke(&m, generation + 1, &held);
                    }
                }
                8 => {
                    if let Some(m) = member {
                        let reasons = [
                            ExpelReason::SessionExpired,
                            ExpelReason::ProgressExpired,
                            ExpelReason::RebalanceTimeout,
                        ];
                        h.expel(&m, reasons[rng.gen_range(0..3)]);
                    }
                }
                9 => {
                    // The application acknowledges some of what it was asked to release.
                    let acked: Vec<TopicPartition> = app_revoking
                        .iter()
                        .filter(|_| rng.gen_bool(0.6))
                        .cloned()
                        .collect();
                    for tp in &acked {
                        app_revoking.remove(tp);
                        app.remove(tp);
                    }
                    h.ack(acked);
                    h.flush();
                }
                10 => {
                    h.disconnect();
                    if rng.gen_bool(0.7) {
                        h.advance(Duration::from_millis(rng.gen_range(1..1500)));
                        h.connect();
                    }
                }
                11 => {
                    let p = h.m.progress() + rng.gen_range(0..2);
                    h.m.set_progress(p, h.now);
                    h.flush();
                }
                12 => {
                    if let Some(tp) = app.iter().next().cloned() {
                        let r = h.m.commit(vec![Offset::new(tp.clone(), 1)], h.now);
                        if let Err(e) = r {
                            assert!(
                                matches!(e, CommitError::Unavailable { .. }),
                                "seed {seed} step {step}: commit on held {tp} failed: {e:?}"
                            );
                        }
                    }
                }
                _ => {
                    if !h.m.is_finished() {
                        h.connect();
                    }
                }
            }
            for event in h.events() {
                match event {
                    Event::Assigned { partitions, .. } => {
                        for tp in partitions {
                            assert!(app.insert(tp), "seed {seed} step {step}: assigned twice");
                        }
                    }
                    Event::RevokeRequested { partitions, .. } => {
                        for tp in partitions {
                            assert!(app.contains(&tp), "seed {seed}: revoking unheld {tp}");
                            assert!(app_revoking.insert(tp));
                        }
                    }
                    Event::Lost { partitions, reason } => {
                        for tp in partitions {
                            assert!(app.remove(&tp), "seed {seed} step {step}: lost unheld {tp}");
                            app_revoking.remove(&tp);
                        }
                        // Every loss but a reassignment ends the membership, and any
                        // suspension with it.
                        if reason != LostReason::Reassigned {
                            app_suspended = false;
                        }
                    }
                    Event::Suspended { partitions } => {
                        assert!(!app_suspended, "seed {seed} step {step}: suspended twice");
                        assert_eq!(partitions, app, "seed {seed} step {step}");
                        app_suspended = true;
                    }
                    Event::Resumed { partitions } => {
                        assert!(
                            app_suspended,
                            "seed {seed} step {step}: resumed unsuspended"
                        );
                        assert_eq!(partitions, app, "seed {seed} step {step}");
                        app_suspended = false;
                    }
                    Event::Fatal(_) => {}
                }
            }
            assert_eq!(h.m.is_suspended(), app_suspended, "seed {seed} step {step}");
            if let Some(lease) = h.m.lease_deadline() {
                // Not suspended means the lease runs.
                assert!(
                    h.m.is_suspended() || lease > h.now,
                    "seed {seed} step {step}"
                );
            }
            let a = h.m.assignment();
            assert_eq!(a.partitions, app, "seed {seed} step {step}");
            assert_eq!(a.revoking, app_revoking, "seed {seed} step {step}");
        }
    }
}

#[test]
fn an_ack_for_a_withdrawn_revocation_keeps_the_partition() {
    let mut h = Harness::joined("m", &[0, 1, 2]);
    h.revoke("m", 2, &[1, 2]);
    h.events();
    // A later rebalance withdraws the revocation of 2.
    h.assign("m", 3, &[0, 1, 2]);
    h.revoke("m", 3, &[1]);
    assert!(h.events().is_empty());
    h.ack([tp(1), tp(2)]);
    h.flush();
    assert_eq!(
        h.events(),
        vec![Event::Assigned {
            partitions: set(&[2]),
            generation: 3
        }]
    );
    let (_, beat, _) = h.pop_heartbeat();
    assert_eq!(beat.acked_revocations, to_wire(&set(&[1])));
    assert_eq!(h.m.assignment().partitions, set(&[0, 2]));
}

#[test]
fn a_relinquish_follows_an_expulsion_once_the_loss_is_taken_and_only_once() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.expel("m", ExpelReason::RebalanceTimeout);
    assert_eq!(
        h.events(),
        vec![Event::Lost {
            partitions: set(&[0, 1]),
            reason: LostReason::Expelled(ExpelReason::RebalanceTimeout)
        }]
    );
    // Not before the application has taken the event, however long that takes.
    h.advance(300 * MS);
    assert!(h.relinquishes().is_empty());
    h.take_events();
    let sent = h.relinquishes();
    assert_eq!(
        sent.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
        vec![rollcall_protocol::RelinquishRequest {
            group: "g".into(),
            member_id: "m".into(),
        }]
    );
    // Its answer changes nothing, and nothing is sent again.
    h.respond(sent[0].0, error(ErrorCode::UnknownMember));
    assert!(h.events().is_empty());
    h.advance(SESSION * 2);
    assert!(h.relinquishes().is_empty());
}

#[test]
fn a_relinquish_taken_while_disconnected_goes_out_after_reconnecting() {
    let mut h = Harness::joined("m", &[0]);
    h.m.set_progress(1, h.now);
    h.expel("m", ExpelReason::ProgressExpired);
    h.events();
    h.disconnect();
    h.take_events();
    assert!(h.relinquishes().is_empty());
    h.advance(100 * MS);
    h.connect();
    let sent = h.relinquishes();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].1.member_id, "m");
    // Lost with its answer: sent again on the next connection.
    h.disconnect();
    h.connect();
    let again = h.relinquishes();
    assert_eq!(again.len(), 1);
    h.respond(again[0].0, Response::Relinquish);
    h.disconnect();
    h.connect();
    assert!(h.relinquishes().is_empty());
}

#[test]
fn a_relinquish_is_given_up_after_a_session_timeout() {
    let mut h = Harness::joined("m", &[0]);
    h.expel("m", ExpelReason::SessionExpired);
    h.events();
    h.advance(SESSION);
    h.take_events();
    assert!(h.relinquishes().is_empty());
}

#[test]
fn a_coordinator_without_relinquish_is_not_sent_one() {
    let mut h = Harness::new();
    h.connect_to(Features {
        lease_timeout: true,
        relinquish: false,
        join_detector: true,
        heartbeats: true,
        paged_fetch: true,
        join_placement: true,
        loads: true,
    });
    let (id, _) = h.pop_join();
    h.respond(id, join_ok("m"));
    h.assign("m", 1, &[0]);
    h.expel("m", ExpelReason::SessionExpired);
    h.events();
    h.take_events();
    assert!(h.relinquishes().is_empty());
}

#[test]
fn a_fenced_member_relinquishes_before_it_is_finished() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.advance(INTERVAL);
    let (id, _, _) = h.heartbeats().remove(0);
    h.respond(id, error(ErrorCode::FencedInstance));
    assert!(matches!(
        h.events().as_slice(),
        [Event::Lost { .. }, Event::Fatal(FatalError::Fenced { .. })]
    ));
    // Finished, but not before the Relinquish is done with.
    assert!(!h.m.is_finished());
    h.take_events();
    let sent = h.relinquishes();
    assert_eq!(sent.len(), 1);
    assert!(!h.m.is_finished());
    h.respond(sent[0].0, Response::Relinquish);
    assert!(h.m.is_finished());

    // Never taken: given up after a session timeout.
    let mut h = Harness::joined("m", &[0]);
    h.expel("m", ExpelReason::Fenced);
    h.events();
    assert!(!h.m.is_finished());
    h.advance(SESSION);
    assert!(h.m.is_finished());
    assert!(h.relinquishes().is_empty());
}

#[test]
fn partitions_assigned_while_suspended_are_resumed_with_the_rest() {
    let mut h = Harness::joined("m", &[0]);
    h.disconnect();
    h.connect();
    h.assign("m", 2, &[0, 1]);
    let (id, _, _) = h.pop_heartbeat();
    h.ack_heartbeat(id);
    assert_eq!(
        h.events(),
        vec![
            Event::Suspended {
                partitions: set(&[0])
            },
            Event::Assigned {
                partitions: set(&[1]),
                generation: 2
            },
            Event::Resumed {
                partitions: set(&[0, 1])
            },
        ]
    );
}

#[test]
fn a_dropped_dynamic_member_leaves_unconfirmed_and_a_static_one_sends_nothing() {
    let h = Harness::joined("m-1", &[0, 1]);
    match h.m.abandon() {
        Some(Request::Leave(l)) => {
            assert_eq!(l.member_id, "m-1");
            assert_eq!(l.mode, LeaveMode::Unconfirmed);
        }
        other => panic!("expected an unconfirmed leave, got {other:?}"),
    }
    let mut h = Harness::with_config(config().with_instance_id("worker-1"), 1);
    h.connect();
    let (id, _) = h.pop_join();
    h.respond(id, join_ok("worker-1#m-1"));
    assert_eq!(
        h.m.abandon(),
        None,
        "a static member's next process takes over"
    );
    // Not a member yet: nothing to leave.
    let h = Harness::new();
    assert_eq!(h.m.abandon(), None);
}

#[test]
fn the_detector_asked_for_is_sent_to_a_coordinator_that_knows_join_version_2() {
    let asking = || config().with_detector("adaptive");
    let mut h = Harness::with_config(asking(), 1);
    h.connect_to(Features::ALL);
    let (_, j) = h.pop_join();
    assert_eq!(j.detector, "adaptive");

    // An older coordinator: the group gets its default, the join still goes out.
    let mut h = Harness::with_config(asking(), 1);
    h.connect_to(Features {
        lease_timeout: true,
        relinquish: true,
        join_detector: false,
        heartbeats: false,
        paged_fetch: false,
        join_placement: false,
        loads: false,
    });
    let (_, j) = h.pop_join();
    assert_eq!(j.detector, "");
}

/// The application answers a revocation late: by the time its acknowledgement reaches
/// the machine, the member was expelled, joined again, was given the partition again
/// and asked to release it again, and the events saying so have not reached the
/// application. The late acknowledgement answers the first request: it must not
/// release the partition the application is about to be told it owns.
#[test]
fn a_late_acknowledgement_does_not_answer_a_later_revocation() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.revoke("m", 2, &[1]);
    assert_eq!(
        h.events(),
        vec![Event::RevokeRequested {
            partitions: set(&[1]),
            generation: 2
        }]
    );
    // Expelled before the application answers; the events from here on stay queued.
    h.expel("m", ExpelReason::RebalanceTimeout);
    let (id, _) = h.pop_join();
    h.respond(id, join_ok("m2"));
    assert_eq!(h.m.take_join_result(), None);
    h.assign("m2", 5, &[1]);
    h.revoke("m2", 6, &[1]);
    h.outbox.clear();
    h.ack([tp(1)]);
    h.flush();
    assert!(
        h.outbox.iter().all(|(_, req, _)| match req {
            Request::Heartbeat(b) => b.acked_revocations.is_empty(),
            _ => true,
        }),
        "the late acknowledgement released the partition: {:?}",
        h.outbox
    );
    assert_eq!(h.m.assignment().revoking, set(&[1]));
    // The application takes the events, then answers the request it was given.
    let events = h.events();
    assert!(matches!(
        events.as_slice(),
        [
            Event::Lost { .. },
            Event::Assigned { .. },
            Event::RevokeRequested { generation: 6, .. }
        ]
    ));
    h.ack([tp(1)]);
    h.flush();
    let (_, beat, _) = h.pop_heartbeat();
    assert_eq!(beat.acked_revocations, to_wire(&set(&[1])));
}

// -----------------------------------------------------------------------------------
// Groups served by another coordinator
// -----------------------------------------------------------------------------------

#[test]
fn not_coordinator_on_a_heartbeat_relocates_without_suspending_or_rejoining() {
    let mut h = Harness::joined("m1", &[0, 1]);
    h.advance(INTERVAL);
    let (id, beat, _) = h.pop_heartbeat();
    assert!(!h.m.take_relocate());
    h.respond(id, error(ErrorCode::NotCoordinator));
    assert!(
        h.m.take_relocate(),
        "the connection task is asked to move it"
    );
    assert!(!h.m.take_relocate(), "once");
    // Detached: nothing goes out until it is connected at the group's coordinator,
    // and the application is told nothing while its lease holds.
    h.advance(INTERVAL);
    assert!(h.outbox.is_empty());
    assert_eq!(h.events(), vec![]);
    assert!(!h.m.is_suspended());
    assert_eq!(h.m.member_id(), Some("m1"));
    // Connected there: it heartbeats at once as the same member, same generation.
    h.connect();
    let (id, moved, _) = h.pop_heartbeat();
    assert_eq!(moved.member_id, beat.member_id);
    assert_eq!(moved.generation, beat.generation);
    assert_eq!(moved.sequence, beat.sequence + 1);
    h.ack_heartbeat(id);
    assert_eq!(h.events(), vec![]);
    assert_eq!(h.m.assignment().partitions, set(&[0, 1]));
}

#[test]
fn a_move_longer_than_the_lease_suspends_then_resumes_never_loses() {
    let mut h = Harness::joined("m1", &[0, 1]);
    h.advance(INTERVAL);
    let (id, _, _) = h.pop_heartbeat();
    h.respond(id, error(ErrorCode::NotCoordinator));
    assert!(h.m.take_relocate());
    // Past the lease, within the session.
    h.advance(LEASE);
    assert_eq!(
        h.events(),
        vec![Event::Suspended {
            partitions: set(&[0, 1])
        }]
    );
    h.connect();
    let (id, _, _) = h.pop_heartbeat();
    h.ack_heartbeat(id);
    assert_eq!(
        h.events(),
        vec![Event::Resumed {
            partitions: set(&[0, 1])
        }]
    );
    assert_eq!(h.m.member_id(), Some("m1"));
}

#[test]
fn coordinator_loading_on_a_heartbeat_is_retried_in_place() {
    let mut h = Harness::joined("m1", &[0]);
    h.advance(INTERVAL);
    let (id, _, _) = h.pop_heartbeat();
    h.respond(id, error(ErrorCode::CoordinatorLoading));
    assert!(!h.m.take_relocate());
    assert_eq!(h.events(), vec![]);
    // The next heartbeat goes to the same connection, after a short backoff (the
    // harness's base is 10 ms), not a whole interval later.
    h.advance(Duration::from_millis(10));
    let (id, beat, _) = h.pop_heartbeat();
    assert_eq!(beat.member_id, "m1");
    // Loading again: the bound doubles.
    h.respond(id, error(ErrorCode::CoordinatorLoading));
    h.advance(Duration::from_millis(20));
    let (id, _, _) = h.pop_heartbeat();
    h.ack_heartbeat(id);
    assert_eq!(h.events(), vec![]);
    // Acknowledged: back on the interval's schedule, and the backoff starts over.
    h.advance(INTERVAL * 4 / 5 - MS);
    assert!(h.outbox.is_empty(), "{:?}", h.outbox);
    h.advance(INTERVAL / 5 + MS);
    let (id, _, _) = h.pop_heartbeat();
    h.respond(id, error(ErrorCode::CoordinatorLoading));
    h.advance(Duration::from_millis(10));
    let (id, _, _) = h.pop_heartbeat();
    h.ack_heartbeat(id);
}

#[test]
fn not_coordinator_on_a_join_sends_the_same_join_at_the_new_coordinator() {
    let mut h = Harness::new();
    h.connect();
    let (id, first) = h.pop_join();
    h.respond(id, error(ErrorCode::NotCoordinator));
    assert!(h.m.take_relocate());
    h.advance(Duration::from_secs(1));
    assert!(h.outbox.is_empty(), "nothing until connected there");
    assert_eq!(h.m.take_join_result(), None, "the join is still under way");
    h.connect();
    let (id, again) = h.pop_join();
    assert_eq!(again.join_token, first.join_token);
    assert_eq!(again.member_id, first.member_id);
    h.respond(id, join_ok("m1"));
    assert_eq!(h.m.take_join_result(), Some(Ok(())));
}

#[test]
fn a_commit_answered_not_coordinator_is_unavailable() {
    let mut h = Harness::joined("m1", &[0]);
    let (id, _) =
        h.m.commit(vec![Offset::new(tp(0), 5)], h.now)
            .expect("a commit goes out");
    let result =
        h.m.handle_commit_response(id, error(ErrorCode::NotCoordinator), h.now);
    assert!(
        matches!(result, Err(CommitError::Unavailable { .. })),
        "{result:?}"
    );
    assert_eq!(h.m.member_id(), Some("m1"));
}

#[test]
fn a_lost_connection_still_suspends_at_once() {
    let mut h = Harness::joined("m1", &[0]);
    h.disconnect();
    assert!(!h.m.take_relocate());
    assert_eq!(
        h.events(),
        vec![Event::Suspended {
            partitions: set(&[0])
        }]
    );
}

#[test]
fn placement_goes_out_at_join_only_to_a_coordinator_that_knows_join_version_3() {
    let placed = || {
        config()
            .with_label("host-1")
            .with_rack("a")
            .with_capacity(2)
            .with_topic_racks("t", ["a", "b", "", "a", "b", "", "a", "b"])
    };
    let mut h = Harness::with_config(placed(), 1);
    h.connect_to(Features::ALL);
    let (_, j) = h.pop_join();
    let p = j.placement.expect("the placement is declared");
    assert_eq!(
        (p.label.as_str(), p.rack.as_str(), p.capacity),
        ("host-1", "a", 2)
    );
    assert_eq!(p.topic_racks[0].racks.len(), 8);

    // An older coordinator gets a plain join, which it accepts.
    let mut h = Harness::with_config(placed(), 1);
    h.connect_to(Features {
        join_placement: false,
        ..Features::ALL
    });
    assert_eq!(h.pop_join().1.placement, None);

    // Nothing declared: nothing sent, at whatever version.
    let mut h = Harness::new();
    h.connect_to(Features::ALL);
    assert_eq!(h.pop_join().1.placement, None);
}

#[test]
fn a_placement_that_does_not_fit_the_subscription_is_refused() {
    use crate::error::ConfigError;
    let e = config().with_capacity(0).validate().unwrap_err();
    assert!(matches!(e, ConfigError::ZeroCapacity), "{e:?}");
    let e = config()
        .with_topic_racks("u", ["a"])
        .validate()
        .unwrap_err();
    assert!(
        matches!(e, ConfigError::RacksForUnsubscribedTopic { .. }),
        "{e:?}"
    );
    let e = config()
        .with_topic_racks("t", ["a"])
        .validate()
        .unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::RacksCount {
                racks: 1,
                partitions: 8,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_load_report_rides_on_the_next_heartbeat_once() {
    let mut h = Harness::joined("m", &[0, 1]);
    h.m.report_load([(tp(0), 1.5), (tp(1), 2.0)]);
    h.m.report_load([(tp(0), 3.0)]);
    h.advance(INTERVAL);
    let (id, beat, _) = h.pop_heartbeat();
    let loads: Vec<(u32, f64)> = beat.loads.iter().map(|l| (l.partition, l.load)).collect();
    assert_eq!(loads, vec![(0, 3.0), (1, 2.0)]);
    h.ack_heartbeat(id);
    h.advance(INTERVAL);
    let (_, beat, _) = h.pop_heartbeat();
    assert!(beat.loads.is_empty(), "sent once: {beat:?}");

    // A coordinator without Heartbeat version 1 gets none.
    let mut h = Harness::new();
    h.connect_to(Features {
        loads: false,
        ..Features::ALL
    });
    let (id, _) = h.pop_join();
    h.respond(id, join_ok("m"));
    h.assign("m", 1, &[0]);
    h.m.report_load([(tp(0), 1.0)]);
    h.advance(INTERVAL);
    assert!(h.pop_heartbeat().1.loads.is_empty());
}

#[test]
fn a_self_drain_names_the_member_itself_and_needs_a_membership() {
    let mut h = Harness::new();
    h.connect();
    assert!(h.m.drain_request(true).is_err());
    let (id, _) = h.pop_join();
    h.respond(id, join_ok("m"));
    match h.m.drain_request(true).unwrap() {
        Request::Drain(d) => {
            assert_eq!(
                (d.group.as_str(), d.member_id.as_str(), d.label.as_str()),
                ("g", "m", "")
            );
            assert!(d.drained);
        }
        other => panic!("expected a drain, got {other:?}"),
    }
}
