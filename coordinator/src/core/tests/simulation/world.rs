//! The simulated world and its event loop: the coordinator with its durable store, its
//! pauses and restarts; the network between it and the clients; the client processes and
//! their applications.
//!
//! Time only moves from one scheduled event to the next, so a run covering minutes of
//! simulated time costs what its events cost. Everything random comes from one seeded
//! generator and events at the same instant run in the order they were scheduled, so a
//! seed always replays the same run.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rollcall_protocol::{
    DescribeGroupRequest, JoinPlacement, LeaveMode, Page, Push, Request, Response,
};

use super::oracle::{from_wire, Check, Crash, Oracle, Tp, Violation};
use super::process::{AckPolicy, Process, ReqId};
use crate::core::{Authority, ConnId, Coordinator, CoreConfig, DetectorKind, Output, Record};
use crate::store::{MemoryStore, Store};

/// Hard bound on the events of one run.
const MAX_EVENTS: u64 = 5_000_000;
/// How often the quiet tail checks whether everything settled.
const TAIL_CHECK: Duration = Duration::from_millis(250);

/// Something due at an instant.
#[derive(Debug)]
pub(super) enum Ev {
    /// The core asked to be woken now.
    CoreWake,
    /// A frame reaches the coordinator's end of a connection.
    Arrive { conn: ConnId, msg: ToCore },
    /// A frame reaches a client's end of a connection.
    Deliver {
        proc: usize,
        conn: ConnId,
        msg: ToClient,
    },
    /// A process's timers (client, application, connection).
    Wake(usize),
    /// A connection attempt completes.
    Connected { proc: usize, attempt: u64 },
    /// The kernel gives up on a connection whose stream died (retransmission timeout).
    ConnError { proc: usize, conn: ConnId },
    /// The fault generator's next step.
    NextFault,
    /// A scheduled action.
    Do(Action),
    /// Faults stop; the quiet tail begins.
    Quiet,
    /// The quiet tail checks whether everything settled.
    TailCheck,
}

#[derive(Debug)]
pub(super) enum ToCore {
    Request {
        proc: usize,
        id: ReqId,
        request: Box<Request>,
        /// When the client sent it.
        sent: Instant,
    },
    /// The client closed the connection.
    Closed,
}

#[derive(Debug)]
pub(super) enum ToClient {
    Response { id: ReqId, response: Response },
    Push(Push),
}

#[derive(Debug)]
pub(super) enum Action {
    Restart {
        downtime: Duration,
        why: &'static str,
    },
    RestartEnd(u64),
    PauseEnd(u64),
    Spawn {
        group: usize,
        instance: Option<String>,
    },
    Retention(String),
    Pause(Duration),
    Isolate(u32, Option<Duration>),
}

struct Scheduled {
    at: Instant,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    /// Reversed: the heap pops the earliest, then the first scheduled.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A group and the topics its members subscribe to (each a subset of them).
#[derive(Debug)]
pub(super) struct GroupSpec {
    pub(super) name: String,
    pub(super) topics: Vec<(String, u32)>,
    /// Whether members commit offsets (a group without offsets is forgotten when empty).
    pub(super) commits: bool,
}

#[derive(Debug)]
pub(super) enum CoreState {
    Running,
    Paused {
        since: Instant,
        until: Instant,
        epoch: u64,
        backlog: Vec<(ConnId, ToCore)>,
    },
    Down {
        since: Instant,
        epoch: u64,
    },
}

/// Counts for the run summary.
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) events: u64,
    pub(super) restarts: u32,
    pub(super) pauses: u32,
    pub(super) crashes: u32,
    pub(super) replacements: u32,
    pub(super) reconfigurations: u32,
    pub(super) leaves: u32,
}

/// What one seed produced.
#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) violations: Vec<Violation>,
    pub(super) trace: String,
    pub(super) summary: String,
}

/// The whole simulation of one seed.
pub(super) struct World {
    pub(super) seed: u64,
    pub(super) rng: SmallRng,
    pub(super) start: Instant,
    pub(super) now: Instant,
    queue: BinaryHeap<Scheduled>,
    seq: u64,
    pub(super) config: CoreConfig,
    core: Coordinator,
    starts: u64,
    pub(super) state: CoreState,
    core_wake: Option<Instant>,
    /// When the coordinator last read a member's frame (a join, heartbeat, leave or
    /// commit) on any connection, as the server's connections record it for the timer
    /// task to report (`observe_traffic`). A restart starts it afresh.
    last_frame_at: Option<Instant>,
    /// Exactly what the core made durable, applied as the server's stores apply it.
    store: MemoryStore,
    pub(super) open_conns: HashMap<ConnId, usize>,
    /// Connections whose stream a cut killed: nothing gets through any more, and neither
    /// end is told.
    pub(super) broken: HashSet<ConnId>,
    /// Connections whose traffic is held, both ways, until the instant given, while the
    /// process's new connections get through (one flow stuck in the network).
    pub(super) stuck: HashMap<ConnId, Instant>,
    fifo: HashMap<(ConnId, bool), Instant>,
    pub(super) next_conn: ConnId,
    next_epoch: u64,
    pub(super) groups: Vec<GroupSpec>,
    pub(super) procs: Vec<Process>,
    pub(super) instances: HashMap<String, u64>,
    pub(super) next_instance: usize,
    pub(super) oracle: Oracle,
    pub(super) crashes: Vec<Crash>,
    pub(super) quiet: bool,
    pub(super) fault_end: Instant,
    tail_cap: Option<Instant>,
    pub(super) pending_spawns: usize,
    pub(super) max_restarts: u32,
    pub(super) long_sessions: bool,
    /// Clients with long sessions (10 s or more) beat far more often than they need (a
    /// tenth to a fortieth of the session), as Kafka's defaults do (3 s against 45 s):
    /// the adaptive detector learns thresholds far below the session timeouts, so the
    /// guards must measure members by what expels them, not by their sessions. Chosen
    /// from the seed, not the random stream, so other seeds run as before.
    pub(super) fast_beats: bool,
    pub(super) counts: Counts,
    /// A stall is to be aimed at the next revocation an application is asked.
    pub(super) aim_next_revocation: bool,
    /// While isolations aimed at a revocation recur: no other fault until then, so
    /// that nothing else (a rejoin, a restart, a prompt application) ends the wait.
    pub(super) calm_until: Option<Instant>,
    /// What each process declares at join (label, rack, capacity, topic racks), sent
    /// in its Join requests as a client of Join version 3 would.
    pub(super) placements: HashMap<usize, Box<JoinPlacement>>,
    /// Processes whose heartbeats report the load of what they own.
    pub(super) reports_load: HashSet<usize>,
    /// The longest departure delay any group had: the tail waits for it.
    pub(super) longest_delay: Duration,
}

impl World {
    pub(super) fn new(seed: u64) -> Self {
        let now = Instant::now();
        // Odd seeds judge silence with the adaptive detector, even ones with the fixed.
        let detector = if seed % 2 == 1 {
            DetectorKind::Adaptive
        } else {
            DetectorKind::Fixed
        };
        let config = CoreConfig {
            member_id_prefix: "s0-".to_owned(),
            detector,
            ..CoreConfig::default()
        };
        let mut oracle = Oracle::new(now);
        if detector == DetectorKind::Adaptive {
            oracle.adaptive_floor = Some(config.detector_settings.floor);
        }
        Self {
            seed,
            rng: SmallRng::seed_from_u64(seed),
            start: now,
            now,
            queue: BinaryHeap::new(),
            seq: 0,
            core: Coordinator::new(config.clone()),
            config,
            starts: 0,
            state: CoreState::Running,
            core_wake: None,
            last_frame_at: None,
            store: MemoryStore::new(),
            open_conns: HashMap::new(),
            broken: HashSet::new(),
            stuck: HashMap::new(),
            fifo: HashMap::new(),
            next_conn: 1,
            next_epoch: 0,
            groups: Vec::new(),
            procs: Vec::new(),
            instances: HashMap::new(),
            next_instance: 0,
            oracle,
            crashes: Vec::new(),
            quiet: false,
            fault_end: now,
            tail_cap: None,
            pending_spawns: 0,
            max_restarts: 0,
            long_sessions: false,
            fast_beats: (seed / 2) % 4 == 1,
            counts: Counts::default(),
            aim_next_revocation: false,
            calm_until: None,
            placements: HashMap::new(),
            reports_load: HashSet::new(),
            longest_delay: Duration::ZERO,
        }
    }

    pub(super) fn t(&self, at: Instant) -> String {
        self.oracle.t(at)
    }

    pub(super) fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at: at.max(self.now),
            seq: self.seq,
            ev,
        });
    }

    pub(super) fn log(&mut self, line: impl std::fmt::Display) {
        let now = self.now;
        self.oracle.log(now, line);
    }

    /// A trace line only worth its cost when tracing (`ROLLCALL_SIM_TRACE`).
    pub(super) fn vlog(&mut self, line: impl FnOnce(&Self) -> String) {
        if self.oracle.verbose {
            let line = line(self);
            self.log(line);
        }
    }

    pub(super) fn running(&self) -> bool {
        matches!(self.state, CoreState::Running)
    }

    /// Runs the seed: setup, faults, quiet tail, final checks.
    pub(super) fn run(mut self, keep_going: bool) -> Outcome {
        self.setup();
        let mut stopped = false;
        for _ in 0..MAX_EVENTS {
            let Some(s) = self.queue.pop() else {
                break;
            };
            self.now = s.at;
            self.counts.events += 1;
            if let Ev::TailCheck = s.ev {
                if self.tail_done() {
                    stopped = true;
                    break;
                }
                self.push(self.now + TAIL_CHECK, Ev::TailCheck);
                continue;
            }
            self.handle(s.ev);
            if !keep_going && !self.oracle.violations.is_empty() {
                return self.outcome();
            }
        }
        assert!(
            stopped,
            "seed {}: the run did not finish within {MAX_EVENTS} events",
            self.seed
        );
        self.final_checks();
        self.outcome()
    }

    fn outcome(self) -> Outcome {
        let summary = format!(
            "{:.1} s simulated, {} events, {} groups, {} processes, {} crashes, {} restarts, \
             {} pauses, {} static replacements, {} reconfigurations, {} leaves",
            (self.now - self.start).as_secs_f64(),
            self.counts.events,
            self.groups.len(),
            self.procs.len(),
            self.counts.crashes,
            self.counts.restarts,
            self.counts.pauses,
            self.counts.replacements,
            self.counts.reconfigurations,
            self.counts.leaves,
        );
        Outcome {
            trace: self.oracle.trace(),
            violations: self.oracle.violations,
            summary,
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::CoreWake => {
                if self.core_wake == Some(self.now) {
                    self.core_wake = None;
                }
                if self.running() && self.core.poll_timeout().is_some_and(|t| t <= self.now) {
                    self.core_timeout();
                }
                // Another input may have run the timers already: ask again.
                self.schedule_core_wake();
            }
            Ev::Arrive { conn, msg } => self.arrive(conn, msg),
            Ev::Deliver { proc, conn, msg } => self.deliver(proc, conn, msg),
            Ev::Wake(p) => {
                if self.procs[p].wake_at == Some(self.now) {
                    self.procs[p].wake_at = None;
                }
                self.process_wake(p);
            }
            Ev::Connected { proc, attempt } => self.connected(proc, attempt),
            Ev::ConnError { proc, conn } => {
                if self.procs[proc].alive && self.procs[proc].conn == Some(conn) {
                    self.vlog(|_| format!("process {proc}: conn {conn} reported dead"));
                    self.client_disconnect(proc);
                    self.process_wake(proc);
                }
            }
            Ev::NextFault => self.next_fault(),
            Ev::Do(action) => self.act(action),
            Ev::Quiet => self.go_quiet(),
            Ev::TailCheck => {}
        }
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Restart { downtime, why } => self.restart_begin(downtime, why),
            Action::RestartEnd(epoch) => self.restart_end(epoch),
            Action::PauseEnd(epoch) => self.pause_end(epoch),
            Action::Spawn { group, instance } => {
                self.pending_spawns -= 1;
                self.spawn(group, instance);
            }
            Action::Pause(len) => self.pause_begin(len),
            Action::Isolate(times, session) => self.isolate(times, session),
            Action::Retention(group) => {
                if !self.quiet && self.running() {
                    let deleted = self.core.remove_offsets(self.now, &group, Duration::ZERO);
                    self.log(format!("retention: remove_offsets({group}) = {deleted}"));
                    if deleted {
                        // A configured group (settings or drained labels) loses only
                        // its offsets: the core keeps it, static instances included.
                        let kept = self.core.groups.contains_key(group.as_str());
                        self.oracle.group_deleted(&group, kept);
                    }
                    self.after_core(BTreeSet::from([group]));
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------
    // The coordinator
    // ----------------------------------------------------------------------------------

    /// Runs the core's due timers as the server's timer task does: first it reports the
    /// last frame read anywhere and how late it woke against the deadline it was due
    /// (the earliest the core asked for: inputs never move it later), which are the
    /// isolation and backlog guards' evidence.
    fn core_timeout(&mut self) {
        let now = self.now;
        if let Some(at) = self.last_frame_at {
            self.core.observe_traffic(at);
        }
        let late = self
            .core
            .poll_timeout()
            .map_or(Duration::ZERO, |due| now.saturating_duration_since(due));
        self.core.observe_lag(now, late);
        self.core.handle_timeout(now);
        self.after_core(BTreeSet::new());
    }

    /// An operator's request (`Authority::Operator`, on a connection of its own), or a
    /// member's own drain on its connection (`Authority::Member`), handled now. Nothing
    /// happens while the coordinator is down or paused (the operator tries again later,
    /// which is another fault).
    pub(super) fn operate(
        &mut self,
        conn: ConnId,
        authority: Authority,
        request: Request,
    ) -> Option<Response> {
        if !self.running() {
            self.log(format!(
                "operator: coordinator not running, {request:?} not sent"
            ));
            return None;
        }
        let now = self.now;
        let response = self
            .core
            .handle_request_as(now, conn, request.clone(), authority)
            .response;
        self.log(format!(
            "operator ({authority:?}): {request:?} -> {response:?}"
        ));
        self.oracle
            .on_operated(now, &request, &response, &self.procs);
        if let Response::AlterGroupConfig(a) = &response {
            self.longest_delay = self.longest_delay.max(Duration::from_millis(u64::from(
                a.config.departure_delay_ms,
            )));
        }
        let group = request.group().map(str::to_owned);
        self.after_core(group.into_iter().collect());
        Some(response)
    }

    fn core_in(&mut self, conn: ConnId, msg: ToCore) {
        match msg {
            ToCore::Request {
                proc,
                id,
                request,
                sent,
            } => {
                let now = self.now;
                // As the server reports its traffic.
                if crate::core::is_member_traffic(&request) {
                    self.last_frame_at = Some(now);
                }
                let response = self
                    .core
                    .handle_request(now, conn, (*request).clone())
                    .response;
                self.vlog(|_| format!("process {proc} conn {conn}: {request:?} -> {response:?}"));
                let released_all = self.procs[proc]
                    .leave_released_all
                    .remove(&id)
                    .unwrap_or(false);
                self.oracle.on_response(
                    (now, sent),
                    (proc, conn),
                    &request,
                    &response,
                    released_all,
                    &self.procs,
                );
                let label = self.placements.get(&proc).map(|pl| pl.label.as_str());
                self.oracle.on_join_answered(&request, &response, label);
                self.send_to_client(proc, conn, ToClient::Response { id, response });
                self.after_core(BTreeSet::new());
            }
            ToCore::Closed => {
                self.open_conns.remove(&conn);
                self.core.handle_disconnect(self.now, conn);
                self.oracle.on_closed(self.now, conn);
                self.after_core(BTreeSet::new());
            }
        }
    }

    /// Drains the core after an input: routes pushes, feeds events to the oracle, makes
    /// records durable, and shows the oracle every group whose state changed.
    fn after_core(&mut self, mut touched: BTreeSet<String>) {
        let now = self.now;
        while let Some(out) = self.core.poll_output() {
            match out {
                Output::Push { conn, push } => {
                    if let Some(group) = push.group() {
                        touched.insert(group.to_owned());
                    }
                    if self.oracle.verbose {
                        self.log(format!("push on conn {conn}: {push:?}"));
                    }
                    self.oracle.on_push(&push);
                    if let Some(&p) = self.open_conns.get(&conn) {
                        self.send_to_client(p, conn, ToClient::Push(push));
                    }
                }
                Output::Event(e) => {
                    self.oracle.on_event(now, &e, &self.procs);
                    self.react(&e);
                }
            }
        }
        let records = self.core.take_records();
        self.store
            .write(&records)
            .expect("the memory store accepts every record");
        for r in &records {
            let group = match r {
                Record::Offset(o) => &o.group,
                Record::Group(g) => {
                    if g.members.is_empty()
                        && !self.quiet
                        && self
                            .store
                            .load()
                            .expect("the memory store loads")
                            .offsets
                            .iter()
                            .any(|o| o.group == g.group)
                        && self.rng.gen_bool(0.3)
                    {
                        let at = now + self.rng.gen_range(Duration::ZERO..Duration::from_secs(3));
                        self.push(at, Ev::Do(Action::Retention(g.group.clone())));
                    }
                    &g.group
                }
                Record::GroupDeleted { group } => group,
            };
            touched.insert(group.clone());
        }
        for group in touched {
            // Version 4 (a page, as large as fits): the operator's view too.
            let request = Request::DescribeGroup(DescribeGroupRequest {
                operator: true,
                group: group.clone(),
                detection: true,
                page: Some(Page::default()),
                summary: false,
            });
            let described = match self.core.handle_request(now, 0, request).response {
                Response::DescribeGroup(d) => Some(d),
                _ => None,
            };
            self.oracle
                .on_describe(now, &group, described.as_ref(), &self.procs);
        }
        if self.running() {
            self.oracle.check_obligations(now);
            self.oracle.check_holds(now, &self.procs);
        }
        self.schedule_core_wake();
    }

    fn schedule_core_wake(&mut self) {
        if !self.running() {
            return;
        }
        if let Some(t) = self.core.poll_timeout() {
            let t = t.max(self.now);
            if self.core_wake.is_none_or(|w| t < w) {
                self.core_wake = Some(t);
                self.push(t, Ev::CoreWake);
            }
        }
    }

    /// A frame reaches the coordinator.
    fn arrive(&mut self, conn: ConnId, msg: ToCore) {
        if !self.open_conns.contains_key(&conn) || self.broken.contains(&conn) {
            return;
        }
        if let ToCore::Request {
            proc,
            id,
            request,
            sent,
        } = &msg
        {
            if !matches!(self.state, CoreState::Down { .. }) {
                let released_all = self.procs[*proc]
                    .leave_released_all
                    .get(id)
                    .copied()
                    .unwrap_or(false);
                self.oracle
                    .on_arrival((self.now, *sent), conn, request, released_all);
            }
        }
        match &mut self.state {
            CoreState::Down { .. } => {}
            CoreState::Paused { backlog, .. } => backlog.push((conn, msg)),
            CoreState::Running => self.core_in(conn, msg),
        }
    }

    /// The coordinator process stops for `len`: nothing is processed, frames queue up.
    pub(super) fn pause_begin(&mut self, len: Duration) {
        if self.quiet || !self.running() {
            return;
        }
        self.next_epoch += 1;
        let epoch = self.next_epoch;
        self.counts.pauses += 1;
        self.state = CoreState::Paused {
            since: self.now,
            until: self.now + len,
            epoch,
            backlog: Vec::new(),
        };
        self.log(format!("coordinator paused for {len:?}"));
        self.push(self.now + len, Ev::Do(Action::PauseEnd(epoch)));
    }

    fn pause_end(&mut self, epoch: u64) {
        let CoreState::Paused {
            since, epoch: e, ..
        } = &self.state
        else {
            return;
        };
        if *e != epoch {
            return;
        }
        let since = *since;
        let CoreState::Paused { backlog, .. } =
            std::mem::replace(&mut self.state, CoreState::Running)
        else {
            unreachable!()
        };
        self.core_wake = None;
        let now = self.now;
        self.oracle.add_downtime(since, now, false);
        // Woken late, the server's connection tasks read their queued frames and its timer
        // task runs its missed deadlines, in whatever order the runtime picks: every frame
        // first, the timers first (more likely the later they run), or the timers between
        // two connections' reads, each connection's frames read together. The core must
        // survive each: members whose frames come after the timers are judged before
        // their beats are read.
        let late = self
            .core
            .poll_timeout()
            .map(|t| now.saturating_duration_since(t));
        let mut conns: Vec<ConnId> = Vec::new();
        for (conn, _) in &backlog {
            if !conns.contains(conn) {
                conns.push(*conn);
            }
        }
        let read_first = if !conns.is_empty() && self.rng.gen_bool(0.5) {
            conns.shuffle(&mut self.rng);
            self.rng.gen_range(0..=conns.len())
        } else if late.is_some_and(|l| l > self.config.pause_guard) && self.rng.gen_bool(0.75) {
            0
        } else {
            conns.len()
        };
        conns.truncate(read_first);
        let (first, rest): (Vec<_>, Vec<_>) = backlog
            .into_iter()
            .partition(|(conn, _)| conns.contains(conn));
        self.log(format!(
            "coordinator resumes ({} queued frames; timers after {} of them, from {} \
             connections)",
            first.len() + rest.len(),
            first.len(),
            read_first
        ));
        self.read_backlog(first);
        if self.running() {
            self.core_timeout();
        }
        self.read_backlog(rest);
    }

    /// Hands the core frames that queued up while it was paused, in order.
    fn read_backlog(&mut self, frames: Vec<(ConnId, ToCore)>) {
        for (conn, msg) in frames {
            if self.running() && self.open_conns.contains_key(&conn) {
                self.core_in(conn, msg);
            }
        }
    }

    /// The coordinator process dies; a new one starts after `downtime` from the store.
    pub(super) fn restart_begin(&mut self, downtime: Duration, why: &'static str) {
        if self.quiet
            || matches!(self.state, CoreState::Down { .. })
            || self.counts.restarts >= self.max_restarts
        {
            return;
        }
        self.counts.restarts += 1;
        let now = self.now;
        if let CoreState::Paused { since, .. } = self.state {
            self.oracle.add_downtime(since, now, false);
        }
        self.next_epoch += 1;
        let epoch = self.next_epoch;
        self.state = CoreState::Down { since: now, epoch };
        self.open_conns.clear();
        self.core_wake = None;
        self.log(format!(
            "coordinator restarts ({why}), down for {downtime:?}"
        ));
        for p in 0..self.procs.len() {
            if self.procs[p].alive && self.procs[p].conn.is_some() {
                self.client_lost_conn(p);
                self.process_wake(p);
            }
        }
        self.push(now + downtime, Ev::Do(Action::RestartEnd(epoch)));
    }

    fn restart_end(&mut self, epoch: u64) {
        let CoreState::Down { since, epoch: e } = self.state else {
            return;
        };
        if e != epoch {
            return;
        }
        let now = self.now;
        self.oracle.add_downtime(since, now, true);
        self.starts += 1;
        let config = CoreConfig {
            member_id_prefix: format!("s{}-", self.starts),
            ..self.config.clone()
        };
        self.core = Coordinator::new(config);
        let state = self.store.load().expect("the memory store loads");
        let restored: Vec<String> = state
            .groups
            .iter()
            .flat_map(|g| g.members.iter().map(|m| m.member_id.clone()))
            .collect();
        self.core.restore(now, state);
        self.state = CoreState::Running;
        self.core_wake = None;
        self.last_frame_at = None;
        self.log(format!(
            "coordinator restored with {} members",
            restored.len()
        ));
        self.oracle.on_restored(now, &restored);
        let all: BTreeSet<String> = self.groups.iter().map(|g| g.name.clone()).collect();
        self.after_core(all);
    }

    // ----------------------------------------------------------------------------------
    // The network
    // ----------------------------------------------------------------------------------

    pub(super) fn delay(&mut self) -> Duration {
        if !self.quiet && self.rng.gen_bool(0.02) {
            self.rng
                .gen_range(Duration::from_millis(100)..Duration::from_millis(1200))
        } else {
            self.rng
                .gen_range(Duration::from_micros(200)..Duration::from_millis(25))
        }
    }

    /// When a frame sent now on `conn` arrives: after `delay`, and never before an
    /// earlier frame of the same direction (a connection is a stream).
    pub(super) fn arrival(&mut self, conn: ConnId, to_core: bool, sent: Instant) -> Instant {
        let at = sent + self.delay();
        let last = self.fifo.entry((conn, to_core)).or_insert(at);
        *last = (*last).max(at);
        *last
    }

    pub(super) fn send_request(&mut self, p: usize, id: ReqId, mut request: Request) {
        let now = self.now;
        match &mut request {
            Request::Join(join) => join.placement = self.placements.get(&p).cloned(),
            Request::Heartbeat(beat) if self.reports_load.contains(&p) => {
                let elapsed = now - self.start;
                beat.loads = self.procs[p]
                    .m
                    .assignment()
                    .partitions
                    .iter()
                    .map(|tp| super::operator::load(&tp.topic, tp.partition, elapsed))
                    .collect();
            }
            _ => {}
        }
        let proc = &mut self.procs[p];
        let Some(conn) = proc.conn else {
            return;
        };
        proc.pending.insert(id, now);
        if let Request::Leave(leave) = &request {
            // An unconfirmed leave goes out at the leave deadline with revocations still
            // pending: the client drops them from its holdings as it sends it, so they
            // are not what the application released.
            let released_all =
                leave.mode != LeaveMode::Unconfirmed && proc.m.assignment().partitions.is_empty();
            proc.leave_released_all.insert(id, released_all);
        }
        let dropped = self.broken.contains(&conn);
        let sent = if proc.cut_until > now {
            proc.cut_until
        } else {
            now
        };
        let sent = self.stuck.get(&conn).map_or(sent, |&until| until.max(sent));
        self.vlog(|_| {
            format!(
                "process {p} sends request {id:?} on conn {conn}{}",
                if dropped {
                    " (lost: connection cut)"
                } else {
                    ""
                }
            )
        });
        if dropped {
            return;
        }
        let at = self.arrival(conn, true, sent);
        self.push(
            at,
            Ev::Arrive {
                conn,
                msg: ToCore::Request {
                    proc: p,
                    id,
                    request: Box::new(request),
                    sent,
                },
            },
        );
    }

    pub(super) fn send_to_client(&mut self, p: usize, conn: ConnId, msg: ToClient) {
        if !self.open_conns.contains_key(&conn) {
            return;
        }
        let proc = &self.procs[p];
        if !proc.alive || proc.conn != Some(conn) || self.broken.contains(&conn) {
            return;
        }
        let sent = proc.cut_until.max(self.now);
        let sent = self.stuck.get(&conn).map_or(sent, |&until| until.max(sent));
        let at = self.arrival(conn, false, sent);
        self.push(at, Ev::Deliver { proc: p, conn, msg });
    }

    /// Sends the close of `conn` to the coordinator; returns when it arrives, if it can.
    pub(super) fn send_closed(&mut self, p: usize, conn: ConnId) -> Option<Instant> {
        if self.broken.contains(&conn) {
            return None;
        }
        let sent = self.procs[p].cut_until.max(self.now);
        let sent = self.stuck.get(&conn).map_or(sent, |&until| until.max(sent));
        let at = self.arrival(conn, true, sent);
        self.push(
            at,
            Ev::Arrive {
                conn,
                msg: ToCore::Closed,
            },
        );
        Some(at)
    }

    // ----------------------------------------------------------------------------------
    // The quiet tail and the end of the run
    // ----------------------------------------------------------------------------------

    /// Faults stop: the network heals, applications behave. The coordinator's current
    /// pause or restart still ends as scheduled.
    fn go_quiet(&mut self) {
        self.quiet = true;
        let now = self.now;
        self.log("faults stop: quiet tail");
        if self.rng.gen_bool(0.5) {
            self.undrain_all();
        }
        for p in 0..self.procs.len() {
            if !self.procs[p].alive {
                continue;
            }
            let prompt: Vec<Duration> = (0..self.procs[p].acks_due.len())
                .map(|_| {
                    self.rng
                        .gen_range(Duration::ZERO..Duration::from_millis(30))
                })
                .collect();
            let proc = &mut self.procs[p];
            proc.cut_until = now;
            proc.stalled_until = None;
            proc.ack = AckPolicy::Prompt;
            for (due, d) in proc.acks_due.values_mut().zip(prompt) {
                *due = (*due).min(now + d);
            }
            self.process_wake(p);
        }
        let max_session = self
            .procs
            .iter()
            .map(|p| p.config.session_timeout)
            .max()
            .unwrap_or_default();
        let max_rebalance = self
            .procs
            .iter()
            .map(|p| p.config.rebalance_timeout)
            .max()
            .unwrap_or_default();
        self.tail_cap = Some(
            now + max_session * 4
                + max_rebalance * 2
                + Duration::from_secs(30)
                + self.longest_delay,
        );
        self.push(now + TAIL_CHECK, Ev::TailCheck);
    }

    /// How long membership must stay unchanged before ownership is checked (check 5).
    /// Every process counts, live or not: a member whose process went away (a leave
    /// that never arrived, say) stays in the group until its session expires, counted
    /// afresh from the coordinator's last restart. A live member that is suspect takes
    /// no grants until it recovers, after three on-time heartbeats (a session at the
    /// client's interval of a third of it), so that is allowed for too.
    fn settle_time(&self) -> Duration {
        let (mut session, mut rebalance) = (Duration::ZERO, Duration::ZERO);
        for p in &self.procs {
            session = session.max(p.config.session_timeout);
            rebalance = rebalance.max(p.config.rebalance_timeout);
        }
        2 * session + rebalance + Duration::from_secs(1)
    }

    fn tail_done(&self) -> bool {
        let now = self.now;
        if self.tail_cap.is_some_and(|cap| now >= cap) {
            return true;
        }
        self.running()
            && self.pending_spawns == 0
            && now >= self.oracle.last_change + self.settle_time()
            && now >= self.oracle.last_hold_end() + self.settle_time()
            && now >= self.oracle.last_downtime_end() + self.settle_time()
            && now >= self.oracle.lingering_end(&self.procs) + self.settle_time()
            && self.oracle.crashed_resolved(now, &self.crashes)
            && !self.oracle.op.reserving()
            && !self.oracle.op.revoking()
            && self
                .oracle
                .op
                .last_reservation
                .is_none_or(|t| now >= t + self.settle_time())
            && self
                .procs
                .iter()
                .filter(|p| p.is_live())
                .all(|p| p.is_active() && !p.is_leaving() && p.conn.is_some())
    }

    /// Checks 4 and 5 once the quiet tail settled.
    fn final_checks(&mut self) {
        let now = self.now;
        self.oracle.check_crashed(now, &self.crashes, &self.procs);
        let settled_at = self
            .oracle
            .last_change
            .max(self.oracle.last_hold_end())
            .max(self.oracle.lingering_end(&self.procs))
            .max(self.oracle.last_downtime_end())
            + self.settle_time();
        let settled = if settled_at <= now {
            format!(
                "membership last changed at t={} and settled by t={}",
                self.t(self.oracle.last_change),
                self.t(settled_at)
            )
        } else {
            format!(
                "membership still changing at the end of the tail (last change at t={})",
                self.t(self.oracle.last_change)
            )
        };
        let mut problems: Vec<(&'static str, String)> = Vec::new();
        for g in 0..self.groups.len() {
            let name = self.groups[g].name.clone();
            let live: Vec<usize> = (0..self.procs.len())
                .filter(|&p| self.procs[p].group == g && self.procs[p].is_live())
                .collect();
            if live.is_empty() {
                continue;
            }
            let request = Request::DescribeGroup(DescribeGroupRequest {
                operator: false,
                group: name.clone(),
                detection: true,
                page: None,
                summary: false,
            });
            let described = match self.core.handle_request(now, 0, request).response {
                Response::DescribeGroup(d) => Some(d),
                _ => None,
            };
            let members: BTreeSet<String> = described
                .iter()
                .flat_map(|d| d.members.iter().map(|m| m.member_id.clone()))
                .collect();
            // Check 13: every move finished (a revocation waiting for room under the
            // caps, or one asked and never answered, is not settled).
            for m in described.iter().flat_map(|d| d.members.iter()) {
                let leaving = from_wire(&m.pending_revoke);
                if !leaving.is_empty() {
                    problems.push((
                        "moves never finished",
                        format!(
                            "{} of {name} still owns {leaving:?}, which its target no longer \
                             has",
                            self.oracle.who(&m.member_id, &self.procs)
                        ),
                    ));
                }
            }
            let mut owner: BTreeMap<Tp, String> = BTreeMap::new();
            for m in described.iter().flat_map(|d| d.members.iter()) {
                for tp in from_wire(&m.owned) {
                    owner.insert(tp, m.member_id.clone());
                }
            }
            let mut live_members: BTreeSet<String> = BTreeSet::new();
            let mut topics: BTreeSet<(String, u32)> = BTreeSet::new();
            // Check 13: a topic only drained members subscribe to is owned by nobody
            // (drained members are given nothing); every other is owned by live
            // undrained members.
            for &p in &live {
                let proc = &self.procs[p];
                let drained = proc
                    .m
                    .member_id()
                    .is_some_and(|id| self.oracle.op.is_drained(&name, id));
                if !drained {
                    for t in &proc.config.topics {
                        topics.insert((t.topic.clone(), t.partitions));
                    }
                }
                match proc.m.member_id() {
                    Some(id) if proc.is_active() && members.contains(id) => {
                        if !drained {
                            live_members.insert(id.to_owned());
                        }
                    }
                    Some(id) if proc.is_active() => problems.push((
                        "process not a member",
                        format!(
                            "process {p} believes it is member {id} of {name}, which the \
                             coordinator does not know"
                        ),
                    )),
                    _ => problems.push((
                        "process not a member",
                        format!(
                            "process {p} of group {name} is alive but {} at the end",
                            proc.phase_name()
                        ),
                    )),
                }
            }
            for (topic, count) in topics {
                for partition in 0..count {
                    match owner.get(&(topic.clone(), partition)) {
                        Some(m) if live_members.contains(m) => {}
                        Some(m) if self.oracle.op.is_drained(&name, m) => problems.push((
                            "partition owned by a drained member",
                            format!(
                                "partition {topic}/{partition} of {name} is owned by drained {}",
                                self.oracle.who(m, &self.procs)
                            ),
                        )),
                        Some(m) => problems.push((
                            "partition owned by a dead member",
                            format!(
                                "partition {topic}/{partition} of {name} is owned by {}, which \
                                 is not a live member",
                                self.oracle.who(m, &self.procs)
                            ),
                        )),
                        None => problems.push((
                            "partition owned by nobody",
                            format!(
                                "partition {topic}/{partition} of {name} is owned by nobody \
                                 (members: {:?})",
                                live_members
                            ),
                        )),
                    }
                }
            }
        }
        let count = problems.len();
        for (kind, problem) in problems {
            let msg = format!(
                "{problem} ({count} problems in all; {settled}; checked at t={})",
                self.t(now)
            );
            self.oracle
                .report_violation(now, Check::Ownership, kind, msg);
        }
    }
}
