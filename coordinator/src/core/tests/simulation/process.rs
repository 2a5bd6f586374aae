//! The client processes: the client crate's own membership state machine, driven here
//! as its connection task drives it (stall detection, reconnection with backoff), and
//! the application around it (progress, the events it takes, releasing revoked
//! partitions, commits), plus what can happen to a process: network cuts and crashes.
//!
//! Each process holds one member on a connection of its own, so the connection task's
//! heartbeat rounds would send every beat as a lone Heartbeat anyway: the simulation
//! sends what the membership produces, one request per frame, and models no Heartbeats
//! frames.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use rand::Rng;
use rollcall_client::testing::{Backoff, BackoffConfig, Features, Membership, RequestId, Stage};
use rollcall_client::{Event, FatalError, LostReason, MemberConfig, Offset, TopicPartition};

use super::oracle::{Check, Crash, Tp};
use super::world::{CoreState, Ev, ToClient, World};
use crate::core::ConnId;

/// A request a process sent: which of its memberships issued it (a process that
/// rejoins with other timeouts starts a new one), and that membership's id for it.
pub(super) type ReqId = (u32, RequestId);

/// A process is never run twice at the same instant: a wake due sooner runs this long
/// after the last.
const WAKE_GAP: Duration = Duration::from_micros(100);

/// The client's default reconnection and rejoin backoff.
const BACKOFF: BackoffConfig = BackoffConfig {
    base: Duration::from_millis(50),
    max: Duration::from_secs(5),
};

/// How an application answers revocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AckPolicy {
    /// Within 30 ms.
    Prompt,
    /// After 0.3 to 1.5 rebalance timeouts.
    Late,
    /// Not until the faults stop.
    Never,
}

/// What the application knows from the events it took, as an application of the
/// client crate does.
#[derive(Debug, Default)]
pub(super) struct App {
    /// The partitions it holds: assigned, and neither lost nor released since.
    held: BTreeSet<Tp>,
    /// For each partition a `RevokeRequested` named and that it has not released or
    /// lost since, that event's generation (an acknowledgement answers it).
    announced: BTreeMap<Tp, u32>,
    /// Told to stop acting (`Suspended`), and neither resumed nor ended since.
    suspended: bool,
    /// While it acts on partitions: the lease the membership had when it last took
    /// events. It must be told to stop by then (check 9).
    acting_until: Option<Instant>,
    /// Its membership ended because a newer process took its instance id.
    fenced: bool,
}

/// One client process: a membership, its connection and its application.
#[derive(Debug)]
pub(super) struct Process {
    pub(super) group: usize,
    /// The configuration the application joined with.
    pub(super) config: MemberConfig,
    /// The client crate's membership state machine.
    pub(super) m: Membership,
    /// How many memberships the process started before this one.
    pub(super) incarnation: u32,
    /// For static members: how many processes used the instance id before this one.
    pub(super) epoch: u64,
    pub(super) alive: bool,
    pub(super) conn: Option<ConnId>,
    pub(super) connecting: Option<u64>,
    pub(super) attempts: u64,
    pub(super) reconnect_at: Option<Instant>,
    pub(super) conn_backoff: Backoff,
    /// Until when the process's network is cut.
    pub(super) cut_until: Instant,
    /// Whether the cut holds traffic until it heals (as TCP retransmits) rather than
    /// killing the connection's stream.
    pub(super) cut_hold: bool,
    pub(super) last_frame_at: Instant,
    /// Requests written and not answered, with when (the driver's stall detection).
    pub(super) pending: HashMap<ReqId, Instant>,
    /// Commits written and not answered: their answers go to the membership as commit
    /// answers.
    commits: HashSet<ReqId>,
    /// Leaves sent, and whether the application had released everything by then.
    pub(super) leave_released_all: HashMap<ReqId, bool>,
    pub(super) progress: u64,
    pub(super) stalled_until: Option<Instant>,
    pub(super) ack: AckPolicy,
    /// When the application releases each partition it was asked to.
    pub(super) acks_due: BTreeMap<Tp, Instant>,
    app: App,
    pub(super) next_commit: Instant,
    pub(super) offset: i64,
    pub(super) wake_at: Option<Instant>,
}

impl Process {
    pub(super) fn is_live(&self) -> bool {
        self.alive && self.m.stage() != Stage::Finished
    }

    /// A member (leaving or not).
    pub(super) fn is_active(&self) -> bool {
        matches!(self.m.stage(), Stage::Active | Stage::Leaving)
    }

    pub(super) fn is_leaving(&self) -> bool {
        self.m.stage() == Stage::Leaving
    }

    pub(super) fn phase_name(&self) -> &'static str {
        match self.m.stage() {
            Stage::Joining => "joining",
            Stage::Active => "active",
            Stage::Leaving => "leaving",
            Stage::AwaitingProgress => "awaiting progress",
            Stage::Finished if self.app.fenced => "fenced",
            Stage::Finished => "finished",
        }
    }
}

/// A membership for `config`, as the client creates one.
pub(super) fn membership(config: &MemberConfig, seed: u64, now: Instant) -> Membership {
    Membership::for_config(config, BACKOFF, seed, now)
        .expect("the simulation's member configurations are valid")
}

fn tp(p: &TopicPartition) -> Tp {
    (p.topic.clone(), p.partition)
}

fn partition(tp: &Tp) -> TopicPartition {
    TopicPartition::new(tp.0.clone(), tp.1)
}

impl World {
    pub(super) fn add_process(
        &mut self,
        group: usize,
        config: MemberConfig,
        m: Membership,
        epoch: u64,
        ack: AckPolicy,
    ) -> usize {
        let now = self.now;
        let p = self.procs.len();
        self.procs.push(Process {
            group,
            config,
            m,
            incarnation: 0,
            epoch,
            alive: true,
            conn: None,
            connecting: None,
            attempts: 0,
            reconnect_at: None,
            conn_backoff: Backoff::new(BACKOFF.base, BACKOFF.max),
            cut_until: now,
            cut_hold: false,
            last_frame_at: now,
            pending: HashMap::new(),
            commits: HashSet::new(),
            leave_released_all: HashMap::new(),
            progress: 0,
            stalled_until: None,
            ack,
            acks_due: BTreeMap::new(),
            app: App::default(),
            next_commit: now,
            offset: 0,
            wake_at: None,
        });
        self.process_wake(p);
        p
    }

    pub(super) fn deliver(&mut self, p: usize, conn: ConnId, msg: ToClient) {
        let now = self.now;
        let proc = &mut self.procs[p];
        if !proc.alive || proc.conn != Some(conn) || self.broken.contains(&conn) {
            return;
        }
        proc.last_frame_at = now;
        if self.oracle.verbose {
            let line = format!("process {p} receives {msg:?}");
            self.oracle.log(now, line);
        }
        let proc = &mut self.procs[p];
        match msg {
            ToClient::Response { id, response } => {
                proc.pending.remove(&id);
                let commit = proc.commits.remove(&id);
                // An answer to an earlier membership of the process has no one to go to.
                if id.0 == proc.incarnation {
                    if commit {
                        // The application learns the outcome; the membership has acted
                        // on it already (an expulsion or fencing ends the membership).
                        let _ = proc.m.handle_commit_response(id.1, response, now);
                    } else {
                        proc.m.handle_response(id.1, response, now);
                    }
                }
            }
            ToClient::Push(push) => {
                if proc.m.accepts_push(&push) || proc.m.accepts_early_push(&push) {
                    proc.m.handle_push(push, now);
                }
            }
        }
        self.process_wake(p);
    }

    pub(super) fn ack_delay(&mut self, p: usize) -> Duration {
        let proc = &self.procs[p];
        let policy = if self.quiet {
            AckPolicy::Prompt
        } else {
            proc.ack
        };
        match policy {
            AckPolicy::Prompt => self
                .rng
                .gen_range(Duration::ZERO..Duration::from_millis(30)),
            AckPolicy::Late => proc
                .config
                .rebalance_timeout
                .mul_f64(self.rng.gen_range(0.3..1.5)),
            AckPolicy::Never => Duration::from_secs(24 * 3600),
        }
    }

    /// Runs a process as the client's connection task runs a member: its application
    /// (progress, the events it takes, what it releases), its membership's timers, its
    /// connection, and whatever it has to send.
    pub(super) fn process_wake(&mut self, p: usize) {
        let now = self.now;
        if !self.procs[p].alive {
            return;
        }
        self.check_acting(p);
        // The application: progress, its events, and releasing what it is asked to.
        let proc = &mut self.procs[p];
        if proc.stalled_until.is_none_or(|t| now >= t) {
            proc.progress += 1;
            proc.m.set_progress(proc.progress, now);
        }
        let asked = self.take_events(p);
        // A stall waits to be aimed at the next revocation's deadline.
        if asked && self.aim_next_revocation && !self.quiet && self.aim_at_revocation(p) {
            self.aim_next_revocation = false;
        }
        self.release_due(p);
        self.procs[p].m.handle_timeout(now);
        self.take_events(p);
        // The connection: stall detection, reconnection.
        if self.procs[p].conn.is_some() && self.stall_deadline(p).is_some_and(|d| d <= now) {
            self.client_disconnect(p);
        }
        let proc = &self.procs[p];
        if proc.conn.is_none()
            && proc.connecting.is_none()
            && proc.reconnect_at.is_none_or(|t| t <= now)
        {
            self.start_connect(p);
        }
        // What the membership sends.
        while let Some((id, request)) = self.procs[p].m.poll_transmit(now) {
            let id = (self.procs[p].incarnation, id);
            self.send_request(p, id, request);
        }
        self.commit(p);
        self.take_events(p);
        self.note_acting(p);
        self.schedule_wake(p);
    }

    /// The application takes every event its membership has for it, as it would from
    /// `Member::next_event`, and asks for the next one at once (so that a `Lost` ending
    /// a membership the coordinator ended is confirmed: a Relinquish follows). Returns
    /// whether it was asked to release partitions it had not been asked to yet.
    fn take_events(&mut self, p: usize) -> bool {
        let now = self.now;
        let mut asked = Vec::new();
        while let Some((event, ticket)) = self.procs[p].m.poll_event() {
            self.vlog(|_| format!("process {p} takes {event:?}"));
            let proc = &mut self.procs[p];
            let app = &mut proc.app;
            match event {
                Event::Assigned { partitions, .. } => app.held.extend(partitions.iter().map(tp)),
                Event::RevokeRequested {
                    partitions,
                    generation,
                } => {
                    for tp in partitions.iter().map(tp) {
                        app.announced.insert(tp.clone(), generation);
                        if !proc.acks_due.contains_key(&tp) {
                            asked.push(tp);
                        }
                    }
                }
                Event::Lost { partitions, reason } => {
                    for tp in partitions.iter().map(tp) {
                        app.held.remove(&tp);
                        app.announced.remove(&tp);
                        proc.acks_due.remove(&tp);
                    }
                    if reason != LostReason::Reassigned {
                        app.suspended = false;
                    }
                }
                Event::Suspended { .. } => app.suspended = true,
                Event::Resumed { .. } => app.suspended = false,
                Event::Fatal(e) => app.fenced |= matches!(e, FatalError::Fenced { .. }),
                _ => {}
            }
            if let Some(ticket) = ticket {
                proc.m.handle_taken(ticket, now);
            }
        }
        let proc = &mut self.procs[p];
        if let Some(Err(FatalError::Fenced { .. })) = proc.m.take_join_result() {
            proc.app.fenced = true;
        }
        let _ = proc.m.take_leave_result();
        for tp in &asked {
            let d = self.ack_delay(p);
            self.procs[p].acks_due.insert(tp.clone(), now + d);
        }
        !asked.is_empty()
    }

    /// The application releases the partitions whose acknowledgement is due, each
    /// answering the latest `RevokeRequested` naming it that it took.
    fn release_due(&mut self, p: usize) {
        let now = self.now;
        let proc = &mut self.procs[p];
        let due: Vec<Tp> = proc
            .acks_due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(tp, _)| tp.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        let mut acks = Vec::new();
        for tp in &due {
            proc.acks_due.remove(tp);
            if let Some(generation) = proc.app.announced.remove(tp) {
                proc.app.held.remove(tp);
                acks.push((partition(tp), generation));
            }
        }
        proc.m.ack(acks, now);
    }

    /// In groups that commit, now and then a commit of one offset for a partition the
    /// application holds.
    fn commit(&mut self, p: usize) {
        let now = self.now;
        let proc = &self.procs[p];
        if !self.groups[proc.group].commits
            || !proc.is_active()
            || proc.conn.is_none()
            || proc.next_commit > now
        {
            return;
        }
        let held: Vec<Tp> = proc.app.held.iter().cloned().collect();
        let next = now
            + self
                .rng
                .gen_range(Duration::from_millis(500)..Duration::from_secs(3));
        let pick = (!held.is_empty()).then(|| self.rng.gen_range(0..held.len()));
        let proc = &mut self.procs[p];
        proc.next_commit = next;
        let Some(i) = pick else {
            return;
        };
        proc.offset += 1;
        let offsets = vec![Offset::new(partition(&held[i]), proc.offset)];
        // Refused locally (a leave already sent): nothing goes out.
        if let Ok((id, request)) = proc.m.commit(offsets, now) {
            let id = (proc.incarnation, id);
            proc.commits.insert(id);
            self.send_request(p, id, request);
        }
    }

    /// Check 9, as a process runs: an application that acted on partitions since it
    /// last took events was told to stop (`Suspended`) by the end of the lease its
    /// membership had then, at the latest when the membership's next timer ran.
    fn check_acting(&mut self, p: usize) {
        let now = self.now;
        let Some(until) = self.procs[p].app.acting_until else {
            return;
        };
        if now <= until + WAKE_GAP {
            return;
        }
        let msg = format!(
            "process {p} ({}) held {:?} and was not told to stop acting before its lease \
             ran out at t={} (now t={})",
            self.procs[p].m.member_id().unwrap_or("-"),
            self.procs[p].app.held,
            self.t(until),
            self.t(now)
        );
        self.oracle
            .report_violation(now, Check::ActsWithinLease, "acted past its lease", msg);
    }

    /// Check 9, once a process has run: the partitions its application holds by the
    /// events it took are those its membership holds, and if it acts on them (it was not
    /// told to stop), the membership's lease covers now.
    fn note_acting(&mut self, p: usize) {
        let now = self.now;
        let proc = &mut self.procs[p];
        let held: BTreeSet<Tp> = proc.m.assignment().partitions.iter().map(tp).collect();
        let disagree = (held != proc.app.held).then(|| {
            format!(
                "process {p} ({}): its application holds {:?} by the events it took, its \
                 membership holds {held:?}",
                proc.m.member_id().unwrap_or("-"),
                proc.app.held
            )
        });
        let acting = !proc.app.suspended && !proc.app.held.is_empty();
        let lease = proc.m.lease_deadline();
        proc.app.acting_until = None;
        let mut unleased = None;
        if acting {
            match lease {
                Some(lease) if lease > now => proc.app.acting_until = Some(lease),
                _ => {
                    unleased = Some(format!(
                        "process {p} ({}) acts on {:?}, not told to stop, with its lease {}",
                        proc.m.member_id().unwrap_or("-"),
                        proc.app.held,
                        lease.map_or_else(
                            || "gone".to_owned(),
                            |l| format!("at t={}", self.oracle.t(l))
                        )
                    ))
                }
            }
        }
        if let Some(msg) = disagree {
            self.oracle.report_violation(
                now,
                Check::ActsWithinLease,
                "events disagree with the membership",
                msg,
            );
        }
        if let Some(msg) = unleased {
            self.oracle
                .report_violation(now, Check::ActsWithinLease, "acts without a lease", msg);
        }
    }

    /// The application restarts its membership with new timeouts while keeping its
    /// member id (no client process does this on its own; another client could): it
    /// stops acting at once, as on a lease expiry, and a new membership rejoins naming
    /// the member id, with a new join token.
    pub(super) fn reconfigure(&mut self, p: usize, config: MemberConfig) -> bool {
        let now = self.now;
        let proc = &self.procs[p];
        if proc.m.stage() != Stage::Active {
            return false;
        }
        let Some(member) = proc.m.member_id().map(str::to_owned) else {
            return false;
        };
        let seed = self.rng.gen();
        let proc = &mut self.procs[p];
        proc.m = membership(&config, seed, now).rejoining_as(member);
        proc.config = config;
        proc.incarnation += 1;
        proc.app = App::default();
        proc.acks_due.clear();
        proc.commits.clear();
        if proc.conn.is_some() {
            proc.m.handle_connected(now, Features::ALL);
        }
        true
    }

    pub(super) fn stall_deadline(&self, p: usize) -> Option<Instant> {
        let proc = &self.procs[p];
        let oldest = proc
            .pending
            .values()
            .filter(|sent| **sent >= proc.last_frame_at)
            .min()?;
        Some(*oldest + proc.m.session_timeout())
    }

    pub(super) fn schedule_wake(&mut self, p: usize) {
        let now = self.now;
        let stall = self.stall_deadline(p);
        let proc = &self.procs[p];
        if !proc.alive {
            return;
        }
        let mut next = proc.m.poll_timeout();
        let mut add = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        add(proc.acks_due.values().min().copied());
        if proc.conn.is_none() && proc.connecting.is_none() {
            add(proc.reconnect_at);
        }
        add(stall);
        if self.groups[proc.group].commits && proc.is_active() && proc.conn.is_some() {
            add(Some(proc.next_commit));
        }
        if proc.m.wants_progress() {
            add(Some(
                proc.stalled_until
                    .filter(|t| *t > now)
                    .unwrap_or(now + Duration::from_millis(100)),
            ));
        }
        let Some(next) = next else {
            return;
        };
        // Nothing is due twice at the same instant.
        let next = next.max(now + WAKE_GAP);
        if proc.wake_at.is_none_or(|w| next < w) {
            self.procs[p].wake_at = Some(next);
            self.push(next, Ev::Wake(p));
        }
    }

    pub(super) fn start_connect(&mut self, p: usize) {
        let proc = &mut self.procs[p];
        proc.attempts += 1;
        let attempt = proc.attempts;
        proc.connecting = Some(attempt);
        let at = self.now
            + self
                .rng
                .gen_range(Duration::from_micros(500)..Duration::from_millis(10));
        self.push(at, Ev::Connected { proc: p, attempt });
    }

    pub(super) fn connected(&mut self, p: usize, attempt: u64) {
        let now = self.now;
        let proc = &self.procs[p];
        if !proc.alive || proc.connecting != Some(attempt) {
            return;
        }
        let ok = match self.state {
            CoreState::Down { .. } => false,
            CoreState::Paused { until, .. } => {
                // The handshake waits for the coordinator to run again.
                let at = until + self.rng.gen_range(Duration::ZERO..Duration::from_millis(5));
                self.push(at, Ev::Connected { proc: p, attempt });
                return;
            }
            CoreState::Running => proc.cut_until <= now,
        };
        let proc = &mut self.procs[p];
        proc.connecting = None;
        if !ok {
            proc.reconnect_at = Some(now + proc.conn_backoff.next_delay(&mut self.rng));
            self.process_wake(p);
            return;
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        self.vlog(|_| format!("process {p} connects on conn {conn}"));
        let proc = &mut self.procs[p];
        self.open_conns.insert(conn, p);
        proc.conn = Some(conn);
        proc.reconnect_at = None;
        proc.conn_backoff.reset();
        proc.last_frame_at = now;
        proc.pending.clear();
        proc.m.handle_connected(now, Features::ALL);
        self.process_wake(p);
    }

    /// The client closes its connection (stall detection). Over a cut network the close
    /// never reaches the coordinator, which keeps a half-open connection.
    pub(super) fn client_disconnect(&mut self, p: usize) {
        let now = self.now;
        let proc = &mut self.procs[p];
        let Some(conn) = proc.conn.take() else {
            return;
        };
        proc.m.handle_disconnected(now);
        proc.pending.clear();
        proc.commits.clear();
        proc.reconnect_at = Some(now + proc.conn_backoff.next_delay(&mut self.rng));
        self.vlog(|_| format!("process {p} closes conn {conn} (no answer)"));
        self.send_closed(p, conn);
    }

    /// The coordinator went away: the client sees its connection reset.
    pub(super) fn client_lost_conn(&mut self, p: usize) {
        let now = self.now;
        let proc = &mut self.procs[p];
        if proc.conn.take().is_none() {
            return;
        }
        proc.m.handle_disconnected(now);
        proc.pending.clear();
        proc.commits.clear();
        proc.reconnect_at = Some(now + proc.conn_backoff.next_delay(&mut self.rng));
    }

    /// The process's network is cut for `len`: its connection's stream dies silently,
    /// or (`hold`) its traffic waits until the cut heals. New connections fail meanwhile.
    pub(super) fn cut(&mut self, p: usize, len: Duration, hold: bool) {
        let now = self.now;
        let proc = &mut self.procs[p];
        proc.cut_until = proc.cut_until.max(now + len);
        proc.cut_hold = hold;
        if !hold {
            if let Some(conn) = proc.conn {
                self.broken.insert(conn);
                // The client notices through its stall detection, or at the latest when
                // the kernel gives up retransmitting (scaled down from minutes).
                let at = now
                    + self
                        .rng
                        .gen_range(Duration::from_secs(5)..Duration::from_secs(15));
                self.push(at, Ev::ConnError { proc: p, conn });
            }
        }
        self.log(format!(
            "process {p}: network cut for {len:?} ({})",
            if hold {
                "traffic held"
            } else {
                "connection dies silently"
            }
        ));
    }

    /// A process dies, closing its connection (the coordinator sees the close) or not
    /// (power loss: silence).
    pub(super) fn crash(&mut self, p: usize, close: bool) {
        let now = self.now;
        let proc = &mut self.procs[p];
        if !proc.alive {
            return;
        }
        proc.alive = false;
        let cut = proc.cut_until > now;
        let conn = proc.conn.filter(|c| close && !self.broken.contains(c));
        // Only a close the coordinator sees at once earns the tight bound of check 4.
        let closed_conn = conn.filter(|_| !cut);
        let member = proc.m.member_id().unwrap_or("-").to_owned();
        let close_arrives = conn.and_then(|conn| self.send_closed(p, conn));
        self.counts.crashes += 1;
        self.crashes.push(Crash {
            proc: p,
            at: now,
            closed_conn,
            close_arrives,
        });
        self.log(format!(
            "process {p} ({member}) crashes, {}",
            if closed_conn.is_some() {
                "connection closed"
            } else {
                "silently"
            }
        ));
    }
}
