//! Liveness against real processes: members that crash are expelled on time, a coordinator
//! that is itself frozen expels no member that kept heartbeating, and a coordinator
//! restarted in the middle of a rebalance still finishes it.
//!
//! Every test runs `rollcall serve` as a process on 127.0.0.1 and drives it with members
//! that speak the raw protocol, each client process (one or more members sharing a
//! connection) on its own task: members heartbeat on a fixed schedule whether or not
//! earlier heartbeats were answered (a frozen coordinator leaves them queued in the
//! kernel), read every frame as it comes, acknowledge every revocation at once, and log
//! what they saw with the time since the test began, for failure messages.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use rollcall_protocol::{
    Body, DescribeGroupRequest, DescribeGroupResponse, ErrorCode, ErrorResponse, ExpelledPush,
    Frame, GroupState, HeartbeatRequest, JoinRequest, Push, Request, Response, TopicPartitions,
};
use rollcall_tests::{bounded, join, RawClient, ServeProcess, TempDir};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

const BIN: &str = env!("CARGO_BIN_EXE_rollcall-e2e");
const TOPIC: &str = "t";

/// The coordinator's log lines worth showing when a test fails.
const LOG_PATTERNS: &[&str] = &[
    "member joined",
    "member removed",
    "rebalance",
    "paused",
    "silent",
    "heard again",
    "restored",
    "serving",
    "shutting down",
    "WARN",
    "ERROR",
];

/// A time as an offset from the start of the test, for messages.
#[derive(Debug, Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn at(self, t: Instant) -> String {
        format!("+{:.3}s", t.saturating_duration_since(self.0).as_secs_f64())
    }

    fn now(self) -> String {
        self.at(Instant::now())
    }
}

// ---------------------------------------------------------------------------------------------
// Who owns what
// ---------------------------------------------------------------------------------------------

/// What each member of one group believes it owns, checked on every change: no partition
/// may be held by two members at once.
#[derive(Debug, Default)]
struct Owners {
    held: BTreeMap<String, BTreeSet<u32>>,
    violations: Vec<String>,
}

impl Owners {
    fn shared() -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Self::default()))
    }

    fn set(&mut self, who: &str, owned: &BTreeSet<u32>, when: String) {
        for (other, theirs) in &self.held {
            if other == who {
                continue;
            }
            let both: Vec<u32> = owned.intersection(theirs).copied().collect();
            if !both.is_empty() {
                self.violations.push(format!(
                    "{when}: partitions {both:?} held by both {who} and {other}"
                ));
            }
        }
        self.held.insert(who.to_owned(), owned.clone());
    }
}

// ---------------------------------------------------------------------------------------------
// Members on their own tasks
// ---------------------------------------------------------------------------------------------

/// What a member's task saw.
#[derive(Debug, Default)]
struct Seen {
    id: String,
    generation: u32,
    owned: BTreeSet<u32>,
    /// Partitions released by acknowledging a Revoke, with that Revoke's generation: an
    /// Assignment of that generation or older that still lists them was sent before the
    /// acknowledgement arrived.
    released: BTreeMap<u32, u32>,
    revokes: usize,
    expelled: Vec<(Instant, ExpelledPush)>,
    errors: Vec<(Instant, ErrorResponse)>,
    disconnects: Vec<Instant>,
    last_sent: Option<Instant>,
    last_answered: Option<Instant>,
    journal: Vec<String>,
}

impl Seen {
    fn note(&mut self, clock: Clock, what: String) {
        const KEPT: usize = 400;
        if self.journal.len() == KEPT {
            self.journal.remove(0);
        }
        self.journal.push(format!("{} {what}", clock.now()));
    }
}

/// How a client process behaves. Its members share its one connection.
#[derive(Debug, Clone, Copy)]
struct Plan {
    addr: SocketAddr,
    /// Time between heartbeats.
    period: Duration,
    /// Heartbeat on the schedule `anchor + k * period`; `None`: from the join on (and at
    /// once after a reconnect).
    anchor: Option<Instant>,
    /// Reconnect (and carry on with the same member ids) when the connection is lost.
    reconnect: bool,
}

/// A client process's task, ended when the last of its members is dropped.
#[derive(Debug)]
struct Task(Mutex<Option<JoinHandle<()>>>);

impl Drop for Task {
    fn drop(&mut self) {
        if let Some(task) = self.0.lock().take() {
            task.abort();
        }
    }
}

/// A member, heartbeating on its process's task (alone, or with the other members of its
/// process) until dropped.
#[derive(Debug)]
struct Beater {
    /// Name in messages, e.g. `frozen-3/m1`.
    name: String,
    seen: Arc<Mutex<Seen>>,
    owners: Arc<Mutex<Owners>>,
    task: Arc<Task>,
}

type Conn = rollcall_client::raw::Transport;

/// Connects and handshakes.
async fn connect(addr: SocketAddr) -> Result<Conn, String> {
    match rollcall_client::raw::connect(addr, "rollcall-liveness", Duration::from_secs(2)).await {
        Ok((conn, _)) => Ok(conn),
        Err(e) => Err(e.to_string()),
    }
}

impl Beater {
    /// A process with one member: connects, joins with `request`, starts heartbeating.
    async fn join(
        name: &str,
        plan: Plan,
        request: JoinRequest,
        owners: Arc<Mutex<Owners>>,
        clock: Clock,
    ) -> Self {
        let mut members =
            Self::join_together(plan, vec![(name.to_owned(), request, owners)], clock).await;
        members.pop().expect("one member")
    }

    /// A process whose members share one connection and heartbeat together, in one write:
    /// connects, joins each in turn, starts heartbeating.
    async fn join_together(
        plan: Plan,
        joins: Vec<(String, JoinRequest, Arc<Mutex<Owners>>)>,
        clock: Clock,
    ) -> Vec<Self> {
        let mut conn = bounded("process connects", connect(plan.addr))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", joins[0].0));
        let mut next_id = 2;
        let mut early = Vec::new();
        let mut slots = Vec::new();
        for (name, request, owners) in joins {
            let group = request.group.clone();
            let id = next_id;
            next_id += 1;
            conn.send(Frame::request(id, Request::Join(request)))
                .await
                .expect("join sent");
            let joined = bounded("join answered", async {
                loop {
                    let frame = conn
                        .next()
                        .await
                        .expect("connection open")
                        .expect("good frame");
                    match frame.body {
                        Body::Push(push) => early.push(push),
                        Body::Response(r) if frame.correlation_id == id => return r,
                        _ => {}
                    }
                }
            })
            .await;
            let Response::Join(joined) = joined else {
                panic!("{name}: join refused: {joined:?}");
            };
            let mut seen = Seen {
                id: joined.member_id.clone(),
                generation: joined.generation,
                ..Seen::default()
            };
            seen.note(
                clock,
                format!(
                    "joined as {} at generation {}",
                    joined.member_id, joined.generation
                ),
            );
            slots.push(Slot {
                name,
                group,
                seen: Arc::new(Mutex::new(seen)),
                owners,
                ack: Vec::new(),
                sequence: 0,
            });
        }
        let mut worker = Worker {
            plan,
            clock,
            slots,
            next_id,
            in_flight: HashMap::new(),
        };
        // Pushes that came with the joins, in order.
        for push in early {
            worker.on_push(push);
        }
        let members = worker
            .slots
            .iter()
            .map(|s| (s.name.clone(), s.seen.clone(), s.owners.clone()))
            .collect::<Vec<_>>();
        let task = Arc::new(Task(Mutex::new(Some(tokio::spawn(worker.run(conn))))));
        members
            .into_iter()
            .map(|(name, seen, owners)| Self {
                name,
                seen,
                owners,
                task: task.clone(),
            })
            .collect()
    }

    fn id(&self) -> String {
        self.seen.lock().id.clone()
    }

    fn owned(&self) -> BTreeSet<u32> {
        self.seen.lock().owned.clone()
    }

    /// Stops the members' processes the way a crash does, all at once: their tasks end
    /// and their sockets close.
    async fn crash_all(members: Vec<Self>) {
        let tasks: Vec<JoinHandle<()>> = members
            .iter()
            .filter_map(|m| m.task.0.lock().take())
            .collect();
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            let _ = task.await;
        }
    }

    /// Everything it saw, for failure messages.
    fn report(&self) -> String {
        let s = self.seen.lock();
        let mut out = format!(
            "  {} ({}): owns {:?} at generation {}, {} expelled, {} errors, {} disconnects; journal:\n",
            self.name,
            s.id,
            s.owned,
            s.generation,
            s.expelled.len(),
            s.errors.len(),
            s.disconnects.len()
        );
        let skip = s.journal.len().saturating_sub(40);
        for line in &s.journal[skip..] {
            let _ = writeln!(out, "    {line}");
        }
        out
    }
}

/// One member of a process's task.
#[derive(Debug)]
struct Slot {
    name: String,
    group: String,
    seen: Arc<Mutex<Seen>>,
    owners: Arc<Mutex<Owners>>,
    sequence: u64,
    /// Revoked partitions not yet acknowledged.
    ack: Vec<u32>,
}

/// A process's task: heartbeats its members on schedule, reads every frame.
#[derive(Debug)]
struct Worker {
    plan: Plan,
    clock: Clock,
    slots: Vec<Slot>,
    next_id: u32,
    /// Heartbeats not answered yet on this connection: correlation id to slot.
    in_flight: HashMap<u32, usize>,
}

impl Worker {
    async fn run(mut self, conn: Conn) {
        let mut conn = Some(conn);
        let everyone: Vec<usize> = (0..self.slots.len()).collect();
        loop {
            let mut c = match conn.take() {
                Some(c) => c,
                None => match connect(self.plan.addr).await {
                    Ok(c) => {
                        self.note_all("reconnected");
                        self.in_flight.clear();
                        c
                    }
                    Err(e) => {
                        self.note_all(&format!("reconnect failed: {e}"));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let now = Instant::now();
            let first = self.plan.anchor.map_or(now, |anchor| {
                let period = self.plan.period.as_nanos();
                let behind = now.saturating_duration_since(anchor).as_nanos();
                let slots = u32::try_from(behind.div_ceil(period)).expect("few periods");
                anchor + self.plan.period * slots
            });
            let mut tick = tokio::time::interval_at(first.into(), self.plan.period);
            tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
            let lost = loop {
                tokio::select! {
                    _ = tick.tick() => {
                        if let Err(e) = self.heartbeat(&mut c, &everyone).await {
                            break e;
                        }
                    }
                    frame = c.next() => match frame {
                        Some(Ok(frame)) => {
                            // A revocation is acknowledged at once.
                            if let Some(slot) = self.receive(frame) {
                                if let Err(e) = self.heartbeat(&mut c, &[slot]).await {
                                    break e;
                                }
                            }
                        }
                        Some(Err(e)) => break format!("bad frame: {e}"),
                        None => break "closed by the coordinator".to_owned(),
                    }
                }
            };
            let now = Instant::now();
            for slot in &self.slots {
                let mut s = slot.seen.lock();
                s.disconnects.push(now);
                s.note(self.clock, format!("connection lost: {lost}"));
            }
            if !self.plan.reconnect {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn note_all(&self, what: &str) {
        for slot in &self.slots {
            slot.seen.lock().note(self.clock, what.to_owned());
        }
    }

    /// Sends a heartbeat for each of `which` (acknowledging what each was asked to
    /// revoke) in one write; does not wait for the answers.
    async fn heartbeat(&mut self, conn: &mut Conn, which: &[usize]) -> Result<(), String> {
        // Stamped before the write: the coordinator cannot read them any earlier.
        let sending = Instant::now();
        let mut acked_by = Vec::new();
        for &i in which {
            let slot = &mut self.slots[i];
            slot.sequence += 1;
            let acked = std::mem::take(&mut slot.ack);
            let (id, generation) = {
                let s = slot.seen.lock();
                (s.id.clone(), s.generation)
            };
            let acked_revocations = if acked.is_empty() {
                Vec::new()
            } else {
                vec![TopicPartitions {
                    topic: TOPIC.into(),
                    partitions: acked.clone(),
                }]
            };
            let request = Request::Heartbeat(HeartbeatRequest {
                loads: Vec::new(),
                group: slot.group.clone().into(),
                member_id: id.into(),
                generation,
                sequence: slot.sequence,
                progress: slot.sequence,
                acked_revocations,
            });
            let correlation_id = self.next_id;
            self.next_id += 1;
            self.in_flight.insert(correlation_id, i);
            conn.feed(Frame::request(correlation_id, request))
                .await
                .map_err(|e| format!("send heartbeat: {e}"))?;
            acked_by.push((i, acked));
        }
        SinkExt::<Frame>::flush(conn)
            .await
            .map_err(|e| format!("send heartbeats: {e}"))?;
        for (i, acked) in acked_by {
            let mut s = self.slots[i].seen.lock();
            s.last_sent = Some(sending);
            if !acked.is_empty() {
                s.note(self.clock, format!("acknowledged revocation of {acked:?}"));
            }
        }
        Ok(())
    }

    /// Takes in one frame; the slot whose revocation should be acknowledged at once.
    fn receive(&mut self, frame: Frame) -> Option<usize> {
        let correlation_id = frame.correlation_id;
        let response = match frame.body {
            Body::Push(push) => return self.on_push(push),
            Body::Response(response) => response,
            other => {
                self.note_all(&format!("unexpected frame: {other:?}"));
                return None;
            }
        };
        let Some(i) = self.in_flight.remove(&correlation_id) else {
            self.note_all(&format!(
                "answer {correlation_id} to no request in flight: {response:?}"
            ));
            return None;
        };
        let mut s = self.slots[i].seen.lock();
        let now = Instant::now();
        match response {
            Response::Heartbeat(_) => {
                if let Some(gap) = s.last_answered.map(|t| now - t) {
                    if gap > self.plan.period * 2 {
                        s.note(
                            self.clock,
                            format!("heartbeats answered again, after {gap:?} without"),
                        );
                    }
                }
                s.last_answered = Some(now);
            }
            Response::Error(e) => {
                // A run of the same answer is journaled once.
                if s.errors.last().is_none_or(|(_, last)| last.code != e.code) {
                    s.note(
                        self.clock,
                        format!(
                            "error answer to request {correlation_id} (and maybe more after it): {:?} {}",
                            e.code, e.message
                        ),
                    );
                }
                s.errors.push((now, e));
            }
            other => s.note(self.clock, format!("unexpected answer: {other:?}")),
        }
        None
    }

    /// Follows one push; the slot whose revocation should be acknowledged at once.
    fn on_push(&mut self, push: Push) -> Option<usize> {
        let member_id = match &push {
            Push::Assignment(a) => &a.member_id,
            Push::Revoke(r) => &r.member_id,
            Push::Expelled(e) => &e.member_id,
            Push::Shutdown(sd) => {
                self.note_all(&format!("shutdown push: {}", sd.message));
                return None;
            }
        };
        let Some(i) = self
            .slots
            .iter()
            .position(|s| s.seen.lock().id == *member_id)
        else {
            self.note_all(&format!("push for someone else: {push:?}"));
            return None;
        };
        let slot = &mut self.slots[i];
        let ack = apply(&slot.name, &slot.seen, &slot.owners, self.clock, push);
        if ack.is_empty() {
            return None;
        }
        slot.ack.extend(ack);
        slot.ack.sort_unstable();
        slot.ack.dedup();
        Some(i)
    }
}

fn partitions_of(tps: &[TopicPartitions]) -> BTreeSet<u32> {
    tps.iter()
        .filter(|tp| tp.topic == TOPIC)
        .flat_map(|tp| tp.partitions.iter().copied())
        .collect()
}

/// Follows one push; returns the partitions to acknowledge now.
fn apply(
    name: &str,
    seen: &Mutex<Seen>,
    owners: &Mutex<Owners>,
    clock: Clock,
    push: Push,
) -> Vec<u32> {
    let mut s = seen.lock();
    match push {
        Push::Assignment(a) if a.member_id == s.id => {
            let listed = partitions_of(&a.partitions);
            let owned: BTreeSet<u32> = listed
                .iter()
                .copied()
                .filter(|p| s.released.get(p).is_none_or(|&g| g < a.generation))
                .collect();
            s.note(
                clock,
                format!("assignment at generation {}: {listed:?}", a.generation),
            );
            s.generation = a.generation;
            s.owned = owned;
            owners.lock().set(name, &s.owned, clock.now());
            Vec::new()
        }
        Push::Revoke(r) if r.member_id == s.id => {
            let revoked = partitions_of(&r.partitions);
            s.note(
                clock,
                format!("revoke at generation {}: {revoked:?}", r.generation),
            );
            s.revokes += 1;
            s.generation = s.generation.max(r.generation);
            for p in &revoked {
                s.owned.remove(p);
                s.released.insert(*p, r.generation);
            }
            // Released before the acknowledgement leaves: the new owner can only be
            // granted them after the coordinator reads it.
            owners.lock().set(name, &s.owned, clock.now());
            revoked.into_iter().collect()
        }
        Push::Expelled(e) if e.member_id == s.id => {
            s.note(clock, format!("expelled: {:?} {}", e.reason, e.message));
            s.owned.clear();
            owners.lock().set(name, &s.owned, clock.now());
            s.expelled.push((Instant::now(), e));
            Vec::new()
        }
        other => {
            s.note(clock, format!("push for someone else: {other:?}"));
            Vec::new()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Observing the coordinator
// ---------------------------------------------------------------------------------------------

/// Describes `group`; `None` if the coordinator does not know it.
async fn describe(admin: &mut RawClient, group: &str) -> Option<DescribeGroupResponse> {
    let answer = admin
        .request(Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: group.into(),
            detection: true,
            page: None,
            summary: false,
        }))
        .await;
    match answer {
        Response::DescribeGroup(d) => Some(d),
        Response::Error(e) if e.code == ErrorCode::UnknownGroup => None,
        other => panic!("describe {group} failed: {other:?}"),
    }
}

fn member_ids(d: &Option<DescribeGroupResponse>) -> BTreeSet<String> {
    d.iter()
        .flat_map(|d| d.members.iter().map(|m| m.member_id.clone()))
        .collect()
}

fn summary(d: &Option<DescribeGroupResponse>) -> String {
    let Some(d) = d else {
        return "unknown group".to_owned();
    };
    let members: Vec<String> = d
        .members
        .iter()
        .map(|m| {
            format!(
                "{} owns {:?} (revoking {:?}, awaiting {:?})",
                m.member_id,
                partitions_of(&m.owned),
                partitions_of(&m.pending_revoke),
                partitions_of(&m.pending_grant)
            )
        })
        .collect();
    format!(
        "{} {:?} generation {}: [{}]",
        d.group,
        d.state,
        d.generation,
        members.join("; ")
    )
}

/// The coordinator's log, filtered to what matters here.
fn log_of(server: &ServeProcess) -> String {
    let lines = server.log_lines(LOG_PATTERNS);
    let skip = lines.len().saturating_sub(80);
    let mut out = String::from("coordinator log:\n");
    for line in &lines[skip..] {
        let _ = writeln!(out, "    {line}");
    }
    out
}

/// Waits until every group is stable with every member owning `each` partitions.
async fn until_balanced(
    server: &ServeProcess,
    groups: &[(String, Vec<Beater>)],
    each: usize,
    within: Duration,
) -> Result<(), String> {
    let mut admin = RawClient::connected(server.addr()).await;
    let deadline = Instant::now() + within;
    loop {
        let mut waiting = Vec::new();
        for (group, members) in groups {
            let d = describe(&mut admin, group).await;
            let stable = d.as_ref().is_some_and(|d| d.state == GroupState::Stable);
            if !stable || members.iter().any(|m| m.owned().len() != each) {
                waiting.push(summary(&d));
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "groups not balanced ({each} partitions each) within {within:?}: {}",
                waiting.join(" | ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Crashed members are expelled on time
// ---------------------------------------------------------------------------------------------

/// Three members of one group heartbeat together, then all crash at once. From another
/// connection, each must be seen gone within the session timeout + 500 ms of the crash
/// (and not before its session could have run out).
///
/// `alone`: nothing else on the coordinator; otherwise a watcher member of another group
/// on the same (only) shard heartbeats throughout. `one_connection`: the three are one
/// client process multiplexing them over one connection, their heartbeats in one write;
/// otherwise three connections heartbeating on the same schedule.
async fn killed_at_once(alone: bool, one_connection: bool) -> Result<String, String> {
    const SESSION: Duration = Duration::from_millis(1_500);
    const SLACK: Duration = Duration::from_millis(500);
    let what = format!(
        "{}, {}",
        if one_connection {
            "three members on one connection"
        } else {
            "three members on three connections"
        },
        if alone {
            "alone on the coordinator"
        } else {
            "with a watcher in another group on the same shard"
        }
    );
    let dir = TempDir::new("kill-all");
    let shards = if alone { "2" } else { "1" };
    let server = ServeProcess::start(BIN, dir.path(), &["--shards", shards]).await;
    let addr = server.addr();
    let clock = Clock(Instant::now());
    let session_ms = SESSION.as_millis() as u32;

    let watcher = if alone {
        None
    } else {
        let plan = Plan {
            addr,
            period: SESSION / 5,
            anchor: None,
            reconnect: false,
        };
        let request = join("watchers", TOPIC, 1, session_ms);
        Some(Beater::join("watcher", plan, request, Owners::shared(), clock).await)
    };

    // The three heartbeat together, as members of one client process do, and that
    // process crashes.
    let plan = Plan {
        addr,
        period: SESSION / 3,
        anchor: Some(Instant::now()),
        reconnect: false,
    };
    let owners = Owners::shared();
    let joins: Vec<_> = (0..3)
        .map(|i| {
            (
                format!("doomed/m{i}"),
                join("doomed", TOPIC, 6, session_ms),
                owners.clone(),
            )
        })
        .collect();
    let doomed = if one_connection {
        Beater::join_together(plan, joins, clock).await
    } else {
        let mut doomed = Vec::new();
        for (name, request, owners) in joins {
            doomed.push(Beater::join(&name, plan, request, owners, clock).await);
        }
        doomed
    };
    let groups = vec![("doomed".to_owned(), doomed)];
    if let Err(e) = until_balanced(&server, &groups, 2, Duration::from_secs(5)).await {
        return Err(format!("[{what}] setup: {e}\n{}", log_of(&server)));
    }
    let doomed = groups.into_iter().next().expect("one group").1;
    // A few heartbeats in the steady state.
    tokio::time::sleep(SESSION / 2).await;

    let mut observer = RawClient::connected(addr).await;
    let before = describe(&mut observer, "doomed").await;
    let ids: Vec<(String, String)> = doomed.iter().map(|m| (m.name.clone(), m.id())).collect();
    assert_eq!(
        member_ids(&before),
        ids.iter().map(|(_, id)| id.clone()).collect(),
        "[{what}] before the crash: {}",
        summary(&before)
    );
    let reports: Vec<String> = doomed.iter().map(Beater::report).collect();

    // All three crash at once: their tasks end and their sockets close.
    let seen: Vec<Arc<Mutex<Seen>>> = doomed.iter().map(|m| m.seen.clone()).collect();
    let killed = Instant::now();
    Beater::crash_all(doomed).await;
    let last_sent: Vec<Instant> = seen
        .iter()
        .map(|s| s.lock().last_sent.expect("heartbeat sent"))
        .collect();

    // Watch until all are gone, or for a while past the promise, to say what happened.
    let horizon = killed + SESSION + SLACK + Duration::from_secs(2);
    let mut gone: BTreeMap<String, Instant> = BTreeMap::new();
    let mut timeline = Vec::new();
    let mut last = String::new();
    while gone.len() < ids.len() && Instant::now() < horizon {
        let d = describe(&mut observer, "doomed").await;
        let seen_at = Instant::now();
        let listed = member_ids(&d);
        for (_, id) in &ids {
            if !listed.contains(id) {
                gone.entry(id.clone()).or_insert(seen_at);
            }
        }
        let now = summary(&d);
        if now != last {
            timeline.push(format!("{} {now}", clock.at(seen_at)));
            last = now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut problems = Vec::new();
    let mut fine = Vec::new();
    for ((name, id), sent) in ids.iter().zip(&last_sent) {
        match gone.get(id) {
            None => problems.push(format!(
                "{name} ({id}) still listed {:?} after the crash (promise: {:?})",
                horizon - killed,
                SESSION + SLACK
            )),
            Some(at) if *at - killed > SESSION + SLACK => problems.push(format!(
                "{name} ({id}) gone only {:?} after the crash (promise: {:?})",
                *at - killed,
                SESSION + SLACK
            )),
            Some(at) if *at < *sent + SESSION => problems.push(format!(
                "{name} ({id}) gone {:?} after its last heartbeat, before its session of {SESSION:?} could expire",
                *at - *sent
            )),
            Some(at) => fine.push(format!("{name} gone after {:?}", *at - killed)),
        }
    }
    if let Some(w) = &watcher {
        let s = w.seen.lock();
        if !s.expelled.is_empty() || !s.errors.is_empty() || !s.disconnects.is_empty() {
            drop(s);
            problems.push(format!("the watcher was disturbed:\n{}", w.report()));
        }
    }
    if problems.is_empty() {
        return Ok(format!("[{what}] {}", fine.join(", ")));
    }
    Err(format!(
        "[{what}] crashed at {}:\n  {}\nwhat DescribeGroup showed:\n    {}\nmembers before the crash:\n{}{}",
        clock.at(killed),
        problems.join("\n  "),
        timeline.join("\n    "),
        reports.concat(),
        log_of(&server)
    ))
}

/// Runs both connection layouts, one after the other, and fails with every failure.
async fn killed_at_once_both_ways(alone: bool) {
    let mut failures = Vec::new();
    for one_connection in [false, true] {
        match killed_at_once(alone, one_connection).await {
            Ok(summary) => println!("ok {summary}"),
            Err(failure) => failures.push(failure),
        }
    }
    assert!(
        failures.is_empty(),
        "crashed members were not expelled as promised:\n\n{}",
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_of_a_group_killed_at_once_is_expelled_within_session_plus_500ms() {
    killed_at_once_both_ways(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_of_a_group_killed_at_once_is_expelled_within_session_plus_500ms_when_alone_on_the_coordinator(
) {
    killed_at_once_both_ways(true).await;
}

// ---------------------------------------------------------------------------------------------
// 2. A frozen coordinator expels no live member
// ---------------------------------------------------------------------------------------------

/// A shard layout and the groups on it.
#[derive(Debug, Clone, Copy)]
struct Layout {
    name: &'static str,
    args: &'static [&'static str],
    groups: usize,
    members: usize,
    partitions_each: usize,
}

const STOP_SESSION: Duration = Duration::from_millis(1_000);
const STOP_ROUNDS: usize = 4;
/// How long after SIGCONT nothing bad may happen.
const AFTER_RESUME: Duration = Duration::from_secs(2);

/// Runs `STOP_ROUNDS` rounds of: freeze the coordinator for three session timeouts while
/// its members keep heartbeating, thaw it, and check for `AFTER_RESUME` that nobody was
/// expelled or refused. Returns what failed first.
async fn frozen_rounds(layout: Layout, clock: Clock) -> Result<String, String> {
    let dir = TempDir::new("sigstop");
    let server = ServeProcess::start(BIN, dir.path(), layout.args).await;
    let addr = server.addr();
    let session_ms = STOP_SESSION.as_millis() as u32;
    let partitions = (layout.members * layout.partitions_each) as u32;
    let mut view: Vec<(String, Vec<Beater>)> = Vec::new();
    for g in 0..layout.groups {
        let group = format!("frozen-{g}");
        let owners = Owners::shared();
        let mut members = Vec::new();
        for m in 0..layout.members {
            let plan = Plan {
                addr,
                period: STOP_SESSION / 3,
                anchor: None,
                reconnect: false,
            };
            let request = join(&group, TOPIC, partitions, session_ms);
            let name = format!("{group}/m{m}");
            members.push(Beater::join(&name, plan, request, owners.clone(), clock).await);
        }
        view.push((group, members));
    }
    let fail = |round: &str, problems: Vec<String>, view: &[(String, Vec<Beater>)]| {
        // Only the members that saw something wrong, if any did.
        let all: Vec<&Beater> = view.iter().flat_map(|(_, ms)| ms).collect();
        let troubled: Vec<&Beater> = all
            .iter()
            .copied()
            .filter(|m| {
                let s = m.seen.lock();
                !(s.expelled.is_empty() && s.errors.is_empty() && s.disconnects.is_empty())
            })
            .collect();
        let shown = if troubled.is_empty() { &all } else { &troubled };
        let reports: String = shown.iter().map(|m| m.report()).collect();
        format!(
            "[{}] {round}:\n  {}\nmembers ({} of {} shown):\n{reports}{}",
            layout.name,
            problems.join("\n  "),
            shown.len(),
            all.len(),
            log_of(&server)
        )
    };
    until_balanced(
        &server,
        &view,
        layout.partitions_each,
        Duration::from_secs(8),
    )
    .await
    .map_err(|e| fail("setup", vec![e], &view))?;

    let mut admin = RawClient::connected(addr).await;
    let mut done = Vec::new();
    for round in 0..STOP_ROUNDS {
        // Every member has been answered recently before the freeze.
        tokio::time::sleep(STOP_SESSION / 2).await;
        let paused = Instant::now();
        server.pause();
        tokio::time::sleep(STOP_SESSION * 3).await;
        server.resume();
        let resumed = Instant::now();
        let what = format!(
            "round {round}: frozen at {} for {:?}, thawed at {}",
            clock.at(paused),
            resumed - paused,
            clock.at(resumed)
        );
        // Watch for a while after the thaw; stop at the first sign of trouble.
        let until = resumed + AFTER_RESUME;
        let mut problems = Vec::new();
        while Instant::now() < until && problems.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            problems = trouble(&view, clock);
        }
        if problems.is_empty() {
            for (group, members) in &view {
                let d = describe(&mut admin, group).await;
                let listed = member_ids(&d);
                for m in members {
                    if !listed.contains(&m.id()) {
                        problems.push(format!(
                            "{} ({}) is not listed by DescribeGroup: {}",
                            m.name,
                            m.id(),
                            summary(&d)
                        ));
                    }
                    let answered = m.seen.lock().last_answered;
                    if answered.is_none_or(|a| a < resumed) {
                        problems.push(format!(
                            "{} had no heartbeat answered in the {AFTER_RESUME:?} after the thaw",
                            m.name
                        ));
                    }
                }
            }
        }
        if !problems.is_empty() {
            return Err(fail(&what, problems, &view));
        }
        done.push(what);
    }
    Ok(format!("[{}] {}", layout.name, done.join("; ")))
}

/// Anything a live member should never see.
fn trouble(view: &[(String, Vec<Beater>)], clock: Clock) -> Vec<String> {
    let mut problems = Vec::new();
    for (_, members) in view {
        for m in members {
            let s = m.seen.lock();
            for (at, e) in &s.expelled {
                problems.push(format!(
                    "{} ({}) was expelled at {}: {:?} {}",
                    m.name,
                    s.id,
                    clock.at(*at),
                    e.reason,
                    e.message
                ));
            }
            // Consecutive answers with the same code are told once.
            let mut i = 0;
            while i < s.errors.len() {
                let (first, e) = &s.errors[i];
                let run = s.errors[i..]
                    .iter()
                    .take_while(|(_, other)| other.code == e.code)
                    .count();
                let last = s.errors[i + run - 1].0;
                problems.push(format!(
                    "{} ({}) was answered {:?} {run} time(s) from {} to {}: {}",
                    m.name,
                    s.id,
                    e.code,
                    clock.at(*first),
                    clock.at(last),
                    e.message
                ));
                i += run;
            }
            for at in &s.disconnects {
                problems.push(format!(
                    "{} ({}) lost its connection at {}",
                    m.name,
                    s.id,
                    clock.at(*at)
                ));
            }
        }
        if let Some(m) = members.first() {
            for v in &m.owners.lock().violations {
                problems.push(v.clone());
            }
        }
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_stopped_for_three_session_timeouts_expels_no_live_member() {
    let layouts = [
        Layout {
            name: "--shards 1, one 3-member group",
            args: &["--shards", "1"],
            groups: 1,
            members: 3,
            partitions_each: 2,
        },
        Layout {
            name: "--shards 64, 20 one-member groups",
            args: &["--shards", "64"],
            groups: 20,
            members: 1,
            partitions_each: 2,
        },
        Layout {
            name: "default shards, one 2-member group",
            args: &[],
            groups: 1,
            members: 2,
            partitions_each: 2,
        },
    ];
    let clock = Clock(Instant::now());
    // The layouts run side by side, each on its own coordinator process.
    let results = futures_util::future::join_all(
        layouts
            .iter()
            .map(|&layout| tokio::spawn(frozen_rounds(layout, clock))),
    )
    .await;
    let mut failures = Vec::new();
    for result in results {
        match result.expect("layout task") {
            Ok(summary) => println!("ok {summary}"),
            Err(failure) => failures.push(failure),
        }
    }
    println!("took {}", clock.now());
    assert!(
        failures.is_empty(),
        "{} of {} layouts expelled or refused a live member:\n\n{}",
        failures.len(),
        layouts.len(),
        failures.join("\n\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 3. A restart inside the coalescing window loses no rebalance
// ---------------------------------------------------------------------------------------------

/// How the coordinator goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Kill,
    Terminate,
}

async fn restarted_in_coalescing_window(tag: &str, stop: Stop) {
    const COALESCE: Duration = Duration::from_secs(2);
    const SESSION: Duration = Duration::from_secs(3);
    const PARTITIONS: u32 = 8;
    /// From the restart: one coalescing window, a revocation round trip, and slack.
    const SETTLE: Duration = Duration::from_secs(6);
    let dir = TempDir::new(tag);
    let mut server = ServeProcess::start(
        BIN,
        dir.path(),
        &[
            "--shards",
            "2",
            "--rebalance-coalesce",
            "2s",
            "--rebalance-coalesce-max",
            "2s",
        ],
    )
    .await;
    let addr = server.addr();
    let clock = Clock(Instant::now());
    let session_ms = SESSION.as_millis() as u32;
    let owners = Owners::shared();
    let plan = Plan {
        addr,
        period: Duration::from_millis(500),
        anchor: None,
        reconnect: true,
    };

    let first = Beater::join(
        "first",
        plan,
        join("window", TOPIC, PARTITIONS, session_ms),
        owners.clone(),
        clock,
    )
    .await;
    let mut admin = RawClient::connected(addr).await;
    let deadline = Instant::now() + COALESCE + Duration::from_secs(5);
    loop {
        let d = describe(&mut admin, "window").await;
        let stable = d.as_ref().is_some_and(|d| d.state == GroupState::Stable);
        if stable && first.owned().len() == PARTITIONS as usize {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "setup: the first member never owned all {PARTITIONS}: {}\n{}{}",
            summary(&d),
            first.report(),
            log_of(&server)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let second = Beater::join(
        "second",
        plan,
        join("window", TOPIC, PARTITIONS, session_ms),
        owners.clone(),
        clock,
    )
    .await;
    let joined = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = describe(&mut admin, "window").await;
    assert!(
        first.seen.lock().revokes == 0 && second.owned().is_empty(),
        "the rebalance started before the coordinator could be stopped inside the window: {}\n{}{}",
        summary(&before),
        first.report(),
        second.report()
    );
    let status = match stop {
        Stop::Kill => server.kill().await,
        Stop::Terminate => server.terminate().await,
    };
    let stopped = Instant::now();
    assert!(
        stopped - joined < COALESCE,
        "stopping took too long to land inside the coalescing window: {:?}",
        stopped - joined
    );
    println!(
        "second joined at {}; coordinator stopped ({stop:?}, {status}) at {}; group was {}",
        clock.at(joined),
        clock.at(stopped),
        summary(&before)
    );
    server.restart().await;
    let restarted = Instant::now();
    println!("restarted at {}", clock.at(restarted));

    // Both members reconnect by themselves. Watch the coordinator's view too: no
    // partition may be owned by both at any point.
    let mut admin = RawClient::connected(addr).await;
    let mut timeline = Vec::new();
    let mut last = String::new();
    let mut coordinator_overlaps = Vec::new();
    let settled = loop {
        let d = describe(&mut admin, "window").await;
        let now = summary(&d);
        if now != last {
            timeline.push(format!("{} {now}", clock.now()));
            last = now;
        }
        if let Some(d) = &d {
            let mut holder: BTreeMap<u32, &str> = BTreeMap::new();
            for m in &d.members {
                for p in partitions_of(&m.owned) {
                    if let Some(other) = holder.insert(p, &m.member_id) {
                        coordinator_overlaps.push(format!(
                            "{}: partition {p} owned by both {other} and {}",
                            clock.now(),
                            m.member_id
                        ));
                    }
                }
            }
        }
        let (a, b) = (first.owned(), second.owned());
        let all: BTreeSet<u32> = a.union(&b).copied().collect();
        if a.len() == 4 && b.len() == 4 && all.len() == PARTITIONS as usize {
            break Some(Instant::now());
        }
        if restarted.elapsed() > SETTLE {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let violations = owners.lock().violations.clone();
    let problems: Vec<String> = [
        settled.is_none().then(|| {
            format!(
                "within {SETTLE:?} of the restart, first owns {:?} and second owns {:?} (wanted 4 each)",
                first.owned(),
                second.owned()
            )
        }),
        (!violations.is_empty())
            .then(|| format!("members held a partition at once: {violations:?}")),
        (!coordinator_overlaps.is_empty())
            .then(|| format!("the coordinator assigned a partition twice: {coordinator_overlaps:?}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(
        problems.is_empty(),
        "coordinator stopped ({stop:?}) {:?} after the second member joined, restarted at {}:\n  {}\nwhat DescribeGroup showed after the restart:\n    {}\nmembers:\n{}{}{}",
        stopped - joined,
        clock.at(restarted),
        problems.join("\n  "),
        timeline.join("\n    "),
        first.report(),
        second.report(),
        log_of(&server)
    );
    println!(
        "balanced {:?} after the restart",
        settled.expect("settled") - restarted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_restarted_within_the_coalescing_window_after_a_join_gives_the_new_member_its_share(
) {
    restarted_in_coalescing_window("window-kill", Stop::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_terminated_gracefully_within_the_coalescing_window_after_a_join_gives_the_new_member_its_share(
) {
    restarted_in_coalescing_window("window-term", Stop::Terminate).await;
}
