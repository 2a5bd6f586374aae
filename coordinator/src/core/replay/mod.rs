//! A group's recorded inputs replayed through a real [`Coordinator`], as the server
//! would have fed them: for studying failure detection offline (the `rollcall-bench
//! detector` lab, the detection tests). Whatever the coordinator does with heartbeats
//! (its detector, the guards, the lease of a closed connection, the expulsion rate
//! limit, what the group learns from all its members) happens here because it is the
//! coordinator that does it: nothing of it is copied.
//!
//! Deterministic and sans-IO like the rest of the core: time arrives as `now`.
//!
//! [`GroupReplay`] is a minimal shell around one coordinator holding one group, and a
//! minimal client for each of its members. Per input, exactly what the server's shell
//! does (`server/shard`):
//!
//! - Before each input, the core's timers run at every deadline it asks for
//!   ([`Coordinator::poll_timeout`]) that falls *before* the input's instant, each run
//!   preceded, as the server's timer task does, by the server's latest member frame
//!   ([`Coordinator::observe_traffic`]) and how late the run is
//!   ([`Coordinator::observe_lag`]). A heartbeat at the very instant of a deadline is
//!   read before the timers run: it is in time.
//! - A member's first arrival is its Join (session, lease, one topic), whose answer
//!   is released at once ([`Coordinator::answers_released`]), and its first heartbeat.
//! - Every arrival is a Heartbeat with the member's sequence number, its generation,
//!   progress, and the acknowledgement of every revocation pushed to it since its last
//!   heartbeat (the client acknowledges as soon as it is asked).
//! - A heartbeat refused (the member was expelled) is followed at once by a new Join,
//!   as the client does: the member is judged from that arrival as a new member.
//! - A closed connection is [`Coordinator::handle_disconnect`]; the member's next frame
//!   comes on a new connection.
//! - The server's own trouble, when a trace recorded it: a pause of the coordinator
//!   (its timers did not run; the core finds it late at its wake and the pause guard
//!   acts), a backlog report (`observe_lag`), and a silence of the whole server
//!   (`observe_traffic` stays at its start, so the isolation guard may act). Outside a
//!   recorded silence the server is taken to hear frames all the time (it serves other
//!   groups too): a group's members falling silent together is their own trouble.
//!
//! Verdicts come from the coordinator's events, each at the instant of the input that
//! produced it.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use rollcall_protocol::{
    ExpelReason, HeartbeatRequest, JoinRequest, Push, Request, Response, TopicPartitions,
    TopicSubscription,
};

use super::liveness::Thresholds;
use super::{ConnId, Coordinator, CoreConfig, DetectorKind, DetectorSettings, Event, Output};

/// The replayed group's name.
const GROUP: &str = "replay";
/// The topic its members subscribe to.
const TOPIC: &str = "replay";
/// The most timer runs one input may trigger: far more than any trace needs (every
/// run moves time or does a slice of work), a bound against a core that asks again and
/// again for the same instant.
const MAX_RUNS_PER_INPUT: u32 = 1_000_000;
/// The members' progress timeout.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(3600);

/// How the replayed group's members join.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    /// The group's detector.
    pub detector: DetectorKind,
    /// The detectors' settings.
    pub detector_settings: DetectorSettings,
    /// Each member's session timeout: the fixed timeout itself, or the bound of the
    /// adaptive detector's thresholds.
    pub session: Duration,
    /// Each member's lease timeout: how long after its last frame a member whose
    /// connection closed is expelled. At most the session timeout.
    pub lease: Duration,
    /// Partitions of the one topic the members subscribe to.
    pub partitions: u32,
}

impl ReplayConfig {
    /// Members judged by `detector` with `settings` and session timeout `session`, the
    /// lease as long as the session.
    pub fn new(detector: DetectorKind, settings: &DetectorSettings, session: Duration) -> Self {
        Self {
            detector,
            detector_settings: settings.clone(),
            session,
            lease: session,
            partitions: 16,
        }
    }

    /// The same with a lease of `lease` (capped at the session timeout).
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.min(self.session);
        self
    }

    /// The coordinator's configuration: its defaults with this detector.
    pub fn core_config(&self) -> CoreConfig {
        CoreConfig {
            detector: self.detector,
            detector_settings: self.detector_settings.clone(),
            ..CoreConfig::default()
        }
    }
}

/// What the coordinator decided about a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It became suspect.
    Suspected,
    /// It was alive again after being suspect.
    Recovered,
    /// It was expelled, for this reason (a closed connection whose lease ran out is
    /// `SessionExpired` too).
    Expelled(ExpelReason),
    /// Its heartbeat was refused (it had been expelled) and it joined again.
    Rejoined,
}

/// A verdict on member `member` at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judged {
    /// When: the instant of the input that produced it.
    pub at: Instant,
    /// The member, by the index the inputs gave it.
    pub member: usize,
    /// What.
    pub verdict: Verdict,
}

/// When a member would be suspected and expelled if nothing more were heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// When it becomes suspect; `None` when it already is, or is not a member.
    pub suspect_at: Option<Instant>,
    /// When it is expelled (its session, or its lease once its connection closed),
    /// guards aside; `None` when it is not a member.
    pub expel_at: Option<Instant>,
}

/// One member's client, as much of it as the coordinator sees.
#[derive(Debug, Clone, Default)]
struct Client {
    /// Its member id; `None` before it first joined.
    id: Option<String>,
    /// Its connection, and whether it is open.
    conn: ConnId,
    open: bool,
    /// The generation of its latest assignment.
    generation: u32,
    /// Its application's progress counter (it moves with every heartbeat).
    progress: u64,
    /// Revocations pushed to it and not acknowledged yet.
    acks: Vec<TopicPartitions>,
    /// Its last frame.
    last: Option<Instant>,
}

/// A group's inputs replayed through a coordinator; see the module documentation.
#[derive(Debug)]
pub struct GroupReplay {
    core: Coordinator,
    config: ReplayConfig,
    members: Vec<Client>,
    /// Member ids (current and past) to their members.
    ids: HashMap<String, usize>,
    next_conn: ConnId,
    next_token: u64,
    verdicts: VecDeque<Judged>,
    /// The start of a recorded silence of the whole server, while its timers run.
    silent_since: Option<Instant>,
    /// The latest instant replayed.
    now: Option<Instant>,
}

impl GroupReplay {
    /// A coordinator with an empty group whose members join with `config`.
    pub fn new(config: ReplayConfig) -> Self {
        Self {
            core: Coordinator::new(config.core_config()),
            config,
            members: Vec::new(),
            ids: HashMap::new(),
            next_conn: 1,
            next_token: 0,
            verdicts: VecDeque::new(),
            silent_since: None,
            now: None,
        }
    }

    /// How the members join.
    pub fn config(&self) -> &ReplayConfig {
        &self.config
    }

    /// The coordinator, for inspection.
    pub fn coordinator(&self) -> &Coordinator {
        &self.core
    }

    /// Runs the core's timers due before `now` (not at it), as the server would have by
    /// then with nothing heard.
    pub fn advance(&mut self, now: Instant) {
        self.run_timers_before(now);
    }

    /// A heartbeat of `member` with `sequence` arrived at `now`. A member not heard
    /// before joins first; one whose heartbeat is refused joins again.
    pub fn beat(&mut self, now: Instant, member: usize, sequence: u64) {
        let now = self.clamp(now);
        self.run_timers_before(now);
        self.at(now);
        if self.members.len() <= member {
            self.members.resize_with(member + 1, Client::default);
        }
        if !self.members[member].open {
            let conn = self.new_conn();
            let c = &mut self.members[member];
            c.conn = conn;
            c.open = true;
        }
        self.members[member].last = Some(now);
        if self.members[member].id.is_none() {
            self.join(now, member);
            self.heartbeat(now, member, sequence);
            return;
        }
        if !self.heartbeat(now, member, sequence) {
            // Refused: the client joins again at once, and beats.
            self.verdicts.push_back(Judged {
                at: now,
                member,
                verdict: Verdict::Rejoined,
            });
            self.join(now, member);
            self.heartbeat(now, member, sequence);
        }
    }

    /// `member`'s connection closed at `now`.
    pub fn closed(&mut self, now: Instant, member: usize) {
        let now = self.clamp(now);
        self.run_timers_before(now);
        self.at(now);
        let Some(c) = self.members.get_mut(member) else {
            return;
        };
        if !c.open {
            return;
        }
        c.open = false;
        let conn = c.conn;
        self.core.handle_disconnect(now, conn);
        self.drain(now);
    }

    /// `member` opened a new connection at `now`: its next frames come on it.
    pub fn opened(&mut self, now: Instant, member: usize) {
        let now = self.clamp(now);
        self.run_timers_before(now);
        self.at(now);
        if self.members.len() <= member {
            self.members.resize_with(member + 1, Client::default);
        }
        let conn = self.new_conn();
        let c = &mut self.members[member];
        if c.open {
            // The old one is given up; the core hears of it when it closes, if ever.
            let old = c.conn;
            c.conn = conn;
            self.core.handle_disconnect(now, old);
            self.drain(now);
        } else {
            c.conn = conn;
            c.open = true;
        }
    }

    /// The coordinator was paused for `len` up to `now` (measured at its wake): its
    /// timers did not run in the pause, and run late at `now`.
    pub fn paused(&mut self, now: Instant, len: Duration) {
        let now = self.clamp(now);
        let from = now.checked_sub(len).unwrap_or(now);
        self.run_timers_before(from);
        self.at(now);
        if self.core.poll_timeout().is_some_and(|d| d <= now) {
            self.timer_run(now);
        }
    }

    /// The server reported at `now` that it is `lag` behind its frames.
    pub fn lagged(&mut self, now: Instant, lag: Duration) {
        let now = self.clamp(now);
        self.run_timers_before(now);
        self.at(now);
        self.core.observe_lag(now, lag);
        self.drain(now);
    }

    /// The whole server heard no member frame for `len` up to `now`: the timers that
    /// ran in that time saw the server silent since its start.
    pub fn silent(&mut self, now: Instant, len: Duration) {
        let now = self.clamp(now);
        let from = now.checked_sub(len).unwrap_or(now);
        self.run_timers_before(from);
        self.silent_since = Some(from);
        self.run_timers_before(now);
        self.silent_since = None;
    }

    /// The next verdict, in the order they were reached.
    pub fn poll_verdict(&mut self) -> Option<Judged> {
        self.verdicts.pop_front()
    }

    /// Members replayed so far (the highest index given, plus one).
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// `member`'s last arrival.
    pub fn last_heard(&self, member: usize) -> Option<Instant> {
        self.members.get(member).and_then(|c| c.last)
    }

    /// When `member` would be suspected and expelled if nothing more were heard.
    pub fn pending(&self, member: usize) -> Pending {
        let none = Pending {
            suspect_at: None,
            expel_at: None,
        };
        let Some(m) = self.member(member) else {
            return none;
        };
        let session = m.session_deadline();
        Pending {
            suspect_at: m.liveness.suspect_at(),
            expel_at: Some(if m.conn_closed {
                session.min(m.lease_until)
            } else {
                session
            }),
        }
    }

    /// `member`'s thresholds in force; `None` while it is not a member.
    pub fn thresholds(&self, member: usize) -> Option<Thresholds> {
        self.member(member).map(|m| m.liveness.thresholds())
    }

    /// Whether `member` is a member and suspect.
    pub fn is_suspect(&self, member: usize) -> bool {
        self.member(member)
            .is_some_and(|m| m.liveness.suspect_at().is_none())
    }

    /// Whether `member` has joined and is not a member of the group now (it was
    /// expelled and has not been heard since).
    pub fn is_expelled(&self, member: usize) -> bool {
        self.members.get(member).is_some_and(|c| c.id.is_some()) && self.member(member).is_none()
    }

    /// The coordinator's record of `member`, while it is a member.
    fn member(&self, member: usize) -> Option<&super::group::Member> {
        let id = self.members.get(member)?.id.as_deref()?;
        self.core.groups.get(GROUP)?.members.get(id)
    }

    fn at(&mut self, now: Instant) {
        self.now = Some(self.now.map_or(now, |n| n.max(now)));
    }

    /// An input's instant, never before the latest replayed (an input out of order
    /// counts as simultaneous with the one before).
    fn clamp(&self, now: Instant) -> Instant {
        self.now.map_or(now, |n| n.max(now))
    }

    fn new_conn(&mut self) -> ConnId {
        let conn = self.next_conn;
        self.next_conn += 1;
        conn
    }

    /// Runs the timers due before `until`, each at its deadline.
    fn run_timers_before(&mut self, until: Instant) {
        for _ in 0..MAX_RUNS_PER_INPUT {
            match self.core.poll_timeout() {
                Some(due) if due < until => {
                    // Never back in time: a deadline the core set in the past runs now.
                    let at = self.now.map_or(due, |n| n.max(due));
                    self.timer_run(at);
                }
                _ => return,
            }
        }
    }

    /// One run of the timers at `at`, as the server's timer task does it: the server's
    /// latest member frame and its lateness first.
    fn timer_run(&mut self, at: Instant) {
        self.at(at);
        self.core.observe_traffic(self.silent_since.unwrap_or(at));
        let late = self
            .core
            .poll_timeout()
            .map_or(Duration::ZERO, |due| at.saturating_duration_since(due));
        self.core.observe_lag(at, late);
        self.core.handle_timeout(at);
        self.drain(at);
    }

    /// Joins `member` (again) at `now`, and releases the answer.
    fn join(&mut self, now: Instant, member: usize) {
        self.next_token += 1;
        let c = &self.members[member];
        let request = JoinRequest {
            placement: None,
            group: GROUP.to_owned(),
            member_id: None,
            instance_id: None,
            client_id: "replay".to_owned(),
            join_token: self.next_token,
            subscription: vec![TopicSubscription {
                topic: TOPIC.to_owned(),
                partitions: self.config.partitions.max(1),
            }],
            session_timeout_ms: millis(self.config.session),
            // Longer than any silence the session allows: a member is expelled for its
            // silence, never for the progress or the acknowledgements it could not send.
            progress_timeout_ms: millis(PROGRESS_TIMEOUT),
            rebalance_timeout_ms: millis(
                (self.config.session * 3)
                    .clamp(Duration::from_secs(30), Duration::from_secs(30 * 60)),
            ),
            lease_timeout_ms: millis(self.config.lease.min(self.config.session)),
            detector: String::new(),
        };
        let conn = c.conn;
        let response = self
            .core
            .handle_request(now, conn, Request::Join(request))
            .response;
        let Response::Join(j) = response else {
            // Refused (no replayed group is refused a join): the member stays out, and
            // tries again at its next arrival.
            self.members[member].id = None;
            self.drain(now);
            return;
        };
        self.ids.insert(j.member_id.clone(), member);
        let c = &mut self.members[member];
        c.generation = j.generation;
        c.acks.clear();
        c.id = Some(j.member_id.clone());
        self.drain(now);
        self.core
            .answers_released(now, &[(GROUP.to_owned(), j.member_id)]);
        self.drain(now);
    }

    /// `member`'s heartbeat at `now`; returns whether it was accepted.
    fn heartbeat(&mut self, now: Instant, member: usize, sequence: u64) -> bool {
        let c = &mut self.members[member];
        let Some(id) = c.id.clone() else {
            return false;
        };
        c.progress += 1;
        let request = HeartbeatRequest {
            loads: Vec::new(),
            group: GROUP.into(),
            member_id: id.into(),
            generation: c.generation,
            sequence,
            progress: c.progress,
            acked_revocations: std::mem::take(&mut c.acks),
        };
        let conn = c.conn;
        let response = self
            .core
            .handle_request(now, conn, Request::Heartbeat(request))
            .response;
        let accepted = match response {
            Response::Heartbeat(h) => {
                // A newer generation is pushed with it; nothing else to take from here.
                let _ = h;
                true
            }
            _ => false,
        };
        self.drain(now);
        accepted
    }

    /// Takes the core's outputs after an input at `now`: pushes reach the members'
    /// clients, events become verdicts, records are taken (and dropped: durability is
    /// the store's business, not the detector's).
    fn drain(&mut self, now: Instant) {
        while let Some(out) = self.core.poll_output() {
            match out {
                Output::Push { conn, push } => self.deliver(conn, push),
                Output::Event(e) => self.judge(now, e),
            }
        }
        if self.core.has_records() {
            drop(self.core.take_records());
        }
    }

    /// A push reaches a member's client if it still listens on that connection.
    fn deliver(&mut self, conn: ConnId, push: Push) {
        let (member_id, generation) = match &push {
            Push::Assignment(p) => (&p.member_id, p.generation),
            Push::Revoke(p) => (&p.member_id, p.generation),
            Push::Expelled(_) | Push::Shutdown(_) => return,
        };
        let Some(&i) = self.ids.get(member_id.as_str()) else {
            return;
        };
        let c = &mut self.members[i];
        if !c.open || c.conn != conn || c.id.as_deref() != Some(member_id.as_str()) {
            return;
        }
        match push {
            Push::Assignment(_) => c.generation = generation,
            Push::Revoke(p) => c.acks = p.partitions,
            Push::Expelled(_) | Push::Shutdown(_) => {}
        }
    }

    fn judge(&mut self, now: Instant, e: Event) {
        let (member_id, verdict) = match e {
            Event::MemberSuspected { member_id, .. } => (member_id, Verdict::Suspected),
            Event::MemberRecovered { member_id, .. } => (member_id, Verdict::Recovered),
            Event::MemberRemoved {
                member_id, reason, ..
            } => (member_id, Verdict::Expelled(reason)),
            _ => return,
        };
        if let Some(&member) = self.ids.get(&member_id) {
            self.verdicts.push_back(Judged {
                at: now,
                member,
                verdict,
            });
        }
    }
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}
