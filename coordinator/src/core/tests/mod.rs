//! Scenario tests of the core with simulated time.
//!
//! [`TestContext`] owns the clock: nothing sleeps, and an hour-long scenario runs in
//! microseconds. Time only moves through [`TestContext::advance`], which wakes the
//! core at every deadline it asked for on the way, exactly as the shell does.

mod defects;
pub(super) mod detection;
mod effects;
mod fleet;
mod leases;
mod operator;
mod pages;
mod quotas;
mod reservations;
mod scenarios;
mod shards;
mod simulation;
mod steering;
mod stops;
mod throttle;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rollcall_protocol::{
    CommitOffsetsRequest, DescribeGroupResponse, ErrorCode, ExpelReason, HeartbeatRequest,
    HeartbeatResponse, JoinRequest, LeaveRequest, OffsetCommit, Push, Request, Response,
    TopicPartitions, TopicSubscription,
};

use super::{ConnId, Coordinator, CoreConfig, Event, Output, Record};

pub(super) const SESSION: Duration = Duration::from_secs(10);
pub(super) const PROGRESS: Duration = Duration::from_secs(60);
pub(super) const REBALANCE: Duration = Duration::from_secs(30);

/// Owns a core and its simulated clock, and collects what the core outputs.
pub(super) struct TestContext {
    pub(super) core: Coordinator,
    pub(super) now: Instant,
    pub(super) start: Instant,
    pub(super) pushes: Vec<(Instant, ConnId, Push)>,
    pub(super) events: Vec<Event>,
    pub(super) records: Vec<Record>,
    next_token: u64,
}

/// A joined member as a test sees it.
#[derive(Debug, Clone)]
pub(super) struct M {
    pub(super) id: String,
    pub(super) conn: ConnId,
    pub(super) group: String,
    pub(super) seq: u64,
    pub(super) progress: u64,
}

pub(super) fn topics(spec: &[(&str, u32)]) -> Vec<TopicSubscription> {
    spec.iter()
        .map(|(t, n)| TopicSubscription {
            topic: (*t).to_owned(),
            partitions: *n,
        })
        .collect()
}

pub(super) fn tps(topic: &str, partitions: &[u32]) -> Vec<TopicPartitions> {
    vec![TopicPartitions {
        topic: topic.to_owned(),
        partitions: partitions.to_vec(),
    }]
}

pub(super) fn count(tps: &[TopicPartitions]) -> usize {
    tps.iter().map(|t| t.partitions.len()).sum()
}

/// An instant to start a test's simulated time from (the core itself never reads a
/// clock; tests outside this directory take their start from here).
pub(super) fn start_instant() -> Instant {
    Instant::now()
}

impl TestContext {
    pub(super) fn new() -> Self {
        Self::with_config(CoreConfig::default())
    }

    pub(super) fn with_config(config: CoreConfig) -> Self {
        let now = Instant::now();
        Self {
            core: Coordinator::new(config),
            now,
            start: now,
            pushes: Vec::new(),
            events: Vec::new(),
            records: Vec::new(),
            next_token: 0,
        }
    }

    /// Time since the test started.
    pub(super) fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    pub(super) fn drain(&mut self) {
        while let Some(out) = self.core.poll_output() {
            match out {
                Output::Push { conn, push } => self.pushes.push((self.now, conn, push)),
                Output::Event(e) => self.events.push(e),
            }
        }
        self.records.extend(self.core.take_records());
    }

    /// Moves time forward by `d`, waking the core at every deadline on the way.
    pub(super) fn advance(&mut self, d: Duration) {
        let target = self.now + d;
        while let Some(next) = self.core.poll_timeout() {
            if next > target {
                break;
            }
            self.now = self.now.max(next);
            self.core.handle_timeout(self.now);
            self.drain();
        }
        self.now = target;
        self.core.handle_timeout(self.now);
        self.drain();
    }

    /// Jumps to `d` later without waking the core on the way (a paused coordinator).
    pub(super) fn freeze_for(&mut self, d: Duration) {
        self.now += d;
        self.core.handle_timeout(self.now);
        self.drain();
    }

    pub(super) fn request(&mut self, conn: ConnId, request: Request) -> Response {
        let resp = self.core.handle_request(self.now, conn, request).response;
        self.drain();
        resp
    }

    pub(super) fn join_request(&mut self, group: &str, spec: &[(&str, u32)]) -> JoinRequest {
        self.next_token += 1;
        JoinRequest {
            placement: None,
            group: group.to_owned(),
            member_id: None,
            instance_id: None,
            client_id: "test".to_owned(),
            join_token: self.next_token,
            subscription: topics(spec),
            session_timeout_ms: SESSION.as_millis() as u32,
            progress_timeout_ms: PROGRESS.as_millis() as u32,
            rebalance_timeout_ms: REBALANCE.as_millis() as u32,
            lease_timeout_ms: 0,
            detector: String::new(),
        }
    }

    pub(super) fn join_with(&mut self, conn: ConnId, req: JoinRequest) -> Result<M, Response> {
        let group = req.group.clone();
        match self.request(conn, Request::Join(req)) {
            Response::Join(j) => Ok(M {
                id: j.member_id,
                conn,
                group,
                seq: 0,
                progress: 0,
            }),
            other => Err(other),
        }
    }

    pub(super) fn join(&mut self, conn: ConnId, group: &str, spec: &[(&str, u32)]) -> M {
        let req = self.join_request(group, spec);
        self.join_with(conn, req).expect("join accepted")
    }

    /// A heartbeat that also reports progress, acknowledging `acks`.
    pub(super) fn beat_acking(&mut self, m: &mut M, acks: Vec<TopicPartitions>) -> Response {
        m.seq += 1;
        m.progress += 1;
        let generation = self.generation_of(m);
        self.request(
            m.conn,
            Request::Heartbeat(HeartbeatRequest {
                loads: Vec::new(),
                group: m.group.clone().into(),
                member_id: m.id.clone().into(),
                generation,
                sequence: m.seq,
                progress: m.progress,
                acked_revocations: acks,
            }),
        )
    }

    pub(super) fn beat(&mut self, m: &mut M) -> Response {
        self.beat_acking(m, Vec::new())
    }

    /// A heartbeat whose progress counter does not move.
    pub(super) fn beat_stalled(&mut self, m: &mut M) -> Response {
        m.seq += 1;
        let generation = self.generation_of(m);
        self.request(
            m.conn,
            Request::Heartbeat(HeartbeatRequest {
                loads: Vec::new(),
                group: m.group.clone().into(),
                member_id: m.id.clone().into(),
                generation,
                sequence: m.seq,
                progress: m.progress,
                acked_revocations: Vec::new(),
            }),
        )
    }

    pub(super) fn expect_beat_ok(&mut self, m: &mut M) -> HeartbeatResponse {
        match self.beat(m) {
            Response::Heartbeat(h) => h,
            other => panic!("heartbeat of {} refused: {other:?}", m.id),
        }
    }

    /// Acknowledges every revocation pushed to `m` that it still owns.
    pub(super) fn ack_all(&mut self, m: &mut M) -> Response {
        let revoking = self.revoking(m);
        self.beat_acking(m, revoking)
    }

    pub(super) fn commit(&mut self, m: &M, topic: &str, partition: u32, offset: i64) -> Response {
        let generation = self.generation_of(m);
        self.request(
            m.conn,
            Request::CommitOffsets(CommitOffsetsRequest {
                group: m.group.clone(),
                member_id: Some(m.id.clone()),
                generation,
                offsets: vec![OffsetCommit {
                    topic: topic.to_owned(),
                    partition,
                    offset,
                    metadata: String::new(),
                }],
            }),
        )
    }

    /// The single partition result of a one-offset commit, or the member-level error.
    pub(super) fn commit_result(
        &mut self,
        m: &M,
        topic: &str,
        partition: u32,
        offset: i64,
    ) -> ErrorCode {
        match self.commit(m, topic, partition, offset) {
            Response::CommitOffsets(c) => c.results[0].error,
            Response::Error(e) => e.code,
            other => panic!("unexpected {other:?}"),
        }
    }

    pub(super) fn leave(&mut self, m: &M) -> Response {
        self.request(
            m.conn,
            Request::Leave(LeaveRequest {
                group: m.group.clone(),
                member_id: m.id.clone(),
                mode: rollcall_protocol::LeaveMode::Released,
            }),
        )
    }

    pub(super) fn describe(&mut self, group: &str) -> DescribeGroupResponse {
        match self.request(
            0,
            Request::DescribeGroup(rollcall_protocol::DescribeGroupRequest {
                operator: false,
                group: group.to_owned(),
                detection: true,
                page: None,
                summary: false,
            }),
        ) {
            Response::DescribeGroup(d) => d,
            other => panic!("describe refused: {other:?}"),
        }
    }

    /// The latest assignment pushed to `m` (partitions, generation).
    pub(super) fn assignment(&self, m: &M) -> Option<(Vec<TopicPartitions>, u32)> {
        self.pushes.iter().rev().find_map(|(_, _, p)| match p {
            Push::Assignment(a) if a.member_id == m.id => {
                Some((a.partitions.clone(), a.generation))
            }
            _ => None,
        })
    }

    pub(super) fn owned(&self, m: &M) -> Vec<TopicPartitions> {
        self.assignment(m).map(|a| a.0).unwrap_or_default()
    }

    pub(super) fn generation_of(&self, m: &M) -> u32 {
        self.assignment(m).map(|a| a.1).unwrap_or(0)
    }

    /// The latest revoke set pushed to `m` that is still owned according to the latest
    /// assignment pushed after it.
    pub(super) fn revoking(&self, m: &M) -> Vec<TopicPartitions> {
        let mut revoke: Option<Vec<TopicPartitions>> = None;
        for (_, _, p) in &self.pushes {
            if let Push::Revoke(r) = p {
                if r.member_id == m.id {
                    revoke = Some(r.partitions.clone());
                }
            }
        }
        let owned = self.owned(m);
        let owned: Vec<(String, u32)> = flatten(&owned);
        let revoke: Vec<(String, u32)> = flatten(&revoke.unwrap_or_default());
        let still: Vec<(String, u32)> =
            revoke.into_iter().filter(|tp| owned.contains(tp)).collect();
        unflatten(&still)
    }

    pub(super) fn expelled(&self, m: &M) -> Option<ExpelReason> {
        self.pushes.iter().find_map(|(_, _, p)| match p {
            Push::Expelled(e) if e.member_id == m.id => Some(e.reason),
            _ => None,
        })
    }

    pub(super) fn rebalances_started(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, Event::RebalanceStarted { .. }))
            .count()
    }

    /// Checks the core's central invariant: no partition is owned by two members.
    pub(super) fn assert_exclusive(&mut self, group: &str) {
        let request = Request::DescribeGroup(rollcall_protocol::DescribeGroupRequest {
            operator: false,
            group: group.to_owned(),
            detection: true,
            page: None,
            summary: false,
        });
        let Response::DescribeGroup(d) = self.request(0, request) else {
            return; // no group, nothing owned
        };
        let mut owners: BTreeMap<(String, u32), String> = BTreeMap::new();
        for m in &d.members {
            for tp in flatten(&m.owned) {
                if let Some(other) = owners.insert(tp.clone(), m.member_id.clone()) {
                    panic!("{tp:?} owned by both {other} and {}", m.member_id);
                }
            }
        }
    }
}

pub(super) fn flatten(tps: &[TopicPartitions]) -> Vec<(String, u32)> {
    tps.iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
        .collect()
}

pub(super) fn unflatten(tps: &[(String, u32)]) -> Vec<TopicPartitions> {
    let mut out: Vec<TopicPartitions> = Vec::new();
    for (topic, p) in tps {
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
