//! The checks, and what the simulation tracks to make them: which member the core gave
//! each partition to, which leases cover which partitions, who fenced whom, the largest
//! generation seen per group, and when each member was last heard.
//!
//! The oracle learns only from the core's public outputs (responses, pushes, events,
//! `DescribeGroup`) and from the simulated clients; it keeps everything across
//! coordinator restarts, which is the point: the core forgets, the oracle does not.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use rollcall_protocol::{
    DescribeGroupResponse, ErrorCode, ExpelReason, LeaveMode, Push, Request, Response,
    TopicPartitions,
};

use super::operator::Operated;
use super::process::Process;
use crate::core::{ConnId, Event};

/// Slack for comparisons of instants computed along different paths.
const EPS: Duration = Duration::from_millis(1);
/// A rebalance must start this long (coordinator running time) after the membership
/// change that calls for it; the coalescing window is at most 250 ms.
const REBALANCE_WITHIN: Duration = Duration::from_secs(1);
/// Extra time a crashed member may stay a member beyond its bound.
pub(super) const CRASH_SLACK: Duration = Duration::from_millis(500);
/// How many trace lines a failure report shows.
const TRACE_LINES: usize = 60;

/// A partition: (topic, index).
pub(super) type Tp = (String, u32);

/// The partitions a protocol message lists.
pub(super) fn from_wire(tps: &[TopicPartitions]) -> BTreeSet<Tp> {
    tps.iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
        .collect()
}

/// The properties checked. The numbers are those of the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Check {
    Exclusive,
    Lease,
    Fencing,
    CrashedExpelled,
    Ownership,
    RebalanceFollows,
    Generations,
    DeservedExpulsion,
    BoundedHold,
    ActsWithinLease,
    RevocationCap,
    Reserved,
    Drained,
}

impl Check {
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Exclusive => "check 1 (exclusive ownership)",
            Self::Lease => "check 2 (leases)",
            Self::Fencing => "check 3 (fencing)",
            Self::CrashedExpelled => "check 4 (crashed members are expelled)",
            Self::Ownership => "check 5 (every partition owned once membership settles)",
            Self::RebalanceFollows => "check 5b (a rebalance follows every membership change)",
            Self::Generations => "check 6 (generations increase)",
            Self::DeservedExpulsion => "check 7 (no member expelled before its deadline)",
            Self::BoundedHold => "check 8 (no wait held past its bound)",
            Self::ActsWithinLease => "check 9 (the client acts only within its lease)",
            Self::RevocationCap => "check 10 (revocations within the caps)",
            Self::Reserved => "check 11 (reserved partitions stay unowned)",
            Self::Drained => "check 12 (drained members are granted nothing)",
        }
    }
}

/// A broken property.
#[derive(Debug, Clone)]
pub(super) struct Violation {
    pub(super) check: Check,
    /// What kind of case within the check, to classify failures.
    pub(super) kind: &'static str,
    pub(super) at: Duration,
    pub(super) message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{}] violated at t={:.3}s: {}",
            self.check.label(),
            self.kind,
            self.at.as_secs_f64(),
            self.message
        )
    }
}

/// A stretch of time the coordinator was not running: paused, or restarting.
#[derive(Debug, Clone, Copy)]
pub(super) struct Downtime {
    pub(super) from: Instant,
    pub(super) to: Instant,
    pub(super) restart: bool,
}

/// A crashed process.
#[derive(Debug, Clone)]
pub(super) struct Crash {
    pub(super) proc: usize,
    pub(super) at: Instant,
    /// The connection the crash closed (the coordinator sees the close), if any.
    pub(super) closed_conn: Option<ConnId>,
    /// When the close reaches the coordinator (a delay spike can hold it back).
    pub(super) close_arrives: Option<Instant>,
}

/// What the oracle knows of one member id.
#[derive(Debug)]
pub(super) struct MemberInfo {
    pub(super) proc: usize,
    pub(super) group: String,
    pub(super) joined_at: Instant,
    /// Session timeout of the latest accepted join naming this member.
    pub(super) session: Duration,
    /// Lease timeout of the latest accepted join naming this member.
    lease: Duration,
    /// Smallest lease timeout since the member joined.
    lease_min: Duration,
    /// The latest end of a lease the coordinator may have promised the member: a frame's
    /// arrival plus the lease timeout then in force, the latest over every frame.
    promised: Instant,
    rebalance: Duration,
    /// Smallest rebalance timeout in effect since the current revocation began.
    rebalance_min: Duration,
    progress: Duration,
    /// Smallest progress timeout in effect since progress last advanced.
    progress_min: Duration,
    /// When a frame naming the member last reached the coordinator (a frame waiting in
    /// a paused coordinator's backlog counts from its arrival), or the restore.
    pub(super) last_arrival: Instant,
    last_arrival_conn: Option<ConnId>,
    /// The connection of the last frame naming the member the core read: the one it
    /// talks over in the core's eyes (a frame read late from a connection it had left,
    /// after newer ones, binds it there again).
    last_read_conn: Option<ConnId>,
    /// When the coordinator saw `last_arrival_conn` or `last_read_conn` close, if it
    /// did (since the last restore).
    conn_closed_at: Option<Instant>,
    /// Its last frame was a static member's `stand_down` leave: it stays a member until
    /// its session expires, whatever happens to its connection.
    stood_down: bool,
    max_progress: u64,
    progress_since: Instant,
    /// The progress credited before a heartbeat that advanced it arrived and has not
    /// been read yet (`max_progress`, `progress_since`, `progress_min`): restored if a
    /// restart loses that frame unread.
    progress_unread: Option<(u64, Instant, Duration)>,
    /// Since when the core has had partitions to take from it (from `DescribeGroup`).
    revoking_since: Option<Instant>,
    /// Each partition the core is asking it to release, since when (from
    /// `DescribeGroup`; a revocation withdrawn and asked again starts over, as in the
    /// core).
    revoking: BTreeMap<Tp, Instant>,
    /// The part of `revoking` seen pushed to it, since when: under caps on
    /// revocations, a partition waiting for room is owned and not kept by the target
    /// but not asked yet (its wait starts when asked). A revocation asked while the
    /// member had no connection is not seen; check 8 judges only the others, check 7
    /// counts every revocation from when it showed (the earlier start).
    asked: BTreeMap<Tp, Instant>,
    /// For partitions in `revoking`: when an acknowledgement of that revocation (sent
    /// while it was being asked, in a heartbeat of this holding's generation or later,
    /// or in a leave after releasing everything) first reached the coordinator, read at
    /// once or queued at a paused coordinator.
    acked_arrival: BTreeMap<Tp, Instant>,
    /// For each partition the member was last told it owns, the generation of the first
    /// assignment push that told it so in this holding: an acknowledgement carrying an
    /// older generation is about an earlier holding (the core ignores it).
    granted_in: BTreeMap<Tp, u32>,
    pub(super) removed: Option<(Instant, ExpelReason)>,
    replaced_by: Option<String>,
    /// Timeouts (session, progress, rebalance) before a rejoin changed them, and until
    /// when.
    history: Vec<(Instant, [Duration; 3])>,
    /// Left with a leave sent while its application still held partitions.
    left_holding: bool,
    /// Took over a static instance from another member.
    replacement: bool,
}

impl MemberInfo {
    /// The longest session timeout the member has had: the one in force, or one before
    /// a rejoin shortened it. Leases are never longer than the session they were
    /// promised under.
    fn longest_session(&self) -> Duration {
        self.history
            .iter()
            .map(|(_, [session, ..])| *session)
            .fold(self.session, Duration::max)
    }

    /// "; its timeouts were session 1s, progress 5s, rebalance 2s until a rejoin at t=5s".
    fn history(&self, oracle: &Oracle) -> String {
        self.history
            .iter()
            .map(|(until, [s, p, r])| {
                format!(
                    "; its timeouts were session {s:?}, progress {p:?}, rebalance {r:?} until \
                     a rejoin at t={}",
                    oracle.t(*until)
                )
            })
            .collect()
    }

    /// The earliest the core may expel the member for an unanswered revocation: the
    /// oldest revocation whose acknowledgement has not reached the coordinator, plus the
    /// smallest rebalance timeout since; with the partitions not answered.
    pub(super) fn revocation_deadline(&self) -> Option<(Instant, Vec<Tp>)> {
        let unanswered: Vec<(&Tp, &Instant)> = self
            .revoking
            .iter()
            .filter(|(tp, _)| !self.acked_arrival.contains_key(*tp))
            .collect();
        let oldest = unanswered.iter().map(|(_, since)| **since).min()?;
        let tps = unanswered.into_iter().map(|(tp, _)| tp.clone()).collect();
        Some((oldest + self.rebalance_min, tps))
    }

    /// The earliest the core may expel the member for lack of progress.
    pub(super) fn progress_deadline(&self) -> Instant {
        self.progress_since + self.progress_min
    }

    fn session_changed(&self) -> bool {
        self.history.iter().any(|(_, [s, _, _])| *s != self.session)
    }
}

#[derive(Debug)]
struct Holder {
    member: String,
    since: Instant,
    released: bool,
}

#[derive(Debug)]
struct Obligation {
    group: String,
    after_generation: u32,
    since: Instant,
    what: String,
    /// The member that joined or was removed.
    member: String,
}

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Oracle {
    start: Instant,
    /// With an adaptive detector, the floor: the shortest silence that may expel a
    /// member whose connection is open (the detector may learn any threshold between
    /// it and the session timeout).
    pub(super) adaptive_floor: Option<Duration>,
    pub(super) members: HashMap<String, MemberInfo>,
    tokens: HashMap<u64, String>,
    /// Owners per group as the last `DescribeGroup` showed them.
    pub(super) owners: HashMap<String, BTreeMap<Tp, String>>,
    /// The member each partition was last granted to, and whether it released it.
    holders: HashMap<String, BTreeMap<Tp, Holder>>,
    max_generation: HashMap<String, u32>,
    obligations: Vec<Obligation>,
    /// Processes whose member was replaced by a newer process: (member, by, when).
    fenced_procs: HashMap<usize, (String, String, Instant)>,
    /// Periods the core suspected its own isolation (held expulsions), and the open one.
    isolation: Vec<(Instant, Instant)>,
    isolated_since: Option<Instant>,
    /// When the core last forgot each group (`DescribeGroup` found none).
    forgotten: HashMap<String, Instant>,
    pub(super) downtime: Vec<Downtime>,
    pub(super) last_change: Instant,
    pub(super) violations: Vec<Violation>,
    seen: HashSet<(Check, &'static str)>,
    trace: VecDeque<String>,
    /// Print every trace line as it happens (`ROLLCALL_SIM_TRACE`).
    pub(super) verbose: bool,
    /// The operator's controls: drains, settings, reservations (checks 10 to 12).
    pub(super) op: Operated,
}

impl Oracle {
    pub(super) fn new(start: Instant) -> Self {
        Self {
            start,
            adaptive_floor: None,
            members: HashMap::new(),
            tokens: HashMap::new(),
            owners: HashMap::new(),
            holders: HashMap::new(),
            max_generation: HashMap::new(),
            obligations: Vec::new(),
            fenced_procs: HashMap::new(),
            forgotten: HashMap::new(),
            isolation: Vec::new(),
            isolated_since: None,
            downtime: Vec::new(),
            last_change: start,
            violations: Vec::new(),
            seen: HashSet::new(),
            trace: VecDeque::new(),
            verbose: std::env::var_os("ROLLCALL_SIM_TRACE").is_some(),
            op: Operated::default(),
        }
    }

    pub(super) fn t(&self, at: Instant) -> String {
        format!(
            "{:.3}s",
            at.saturating_duration_since(self.start).as_secs_f64()
        )
    }

    /// Adds a line to the trace shown with a failure.
    pub(super) fn log(&mut self, at: Instant, line: impl fmt::Display) {
        if self.trace.len() == TRACE_LINES {
            self.trace.pop_front();
        }
        let line = format!("  t={} {line}", self.t(at));
        if self.verbose {
            println!("{line}");
        }
        self.trace.push_back(line);
    }

    pub(super) fn trace(&self) -> String {
        self.trace.iter().map(|l| format!("{l}\n")).collect()
    }

    fn violate(&mut self, at: Instant, check: Check, kind: &'static str, message: String) {
        // One report per kind of case and seed is enough to classify a run.
        if !self.seen.insert((check, kind)) {
            return;
        }
        self.log(at, format!("VIOLATION {} [{kind}]", check.label()));
        self.violations.push(Violation {
            check,
            kind,
            at: at.saturating_duration_since(self.start),
            message,
        });
    }

    /// "s1-m4 (process 7, static i3 #1, session 1s)".
    pub(super) fn who(&self, member: &str, procs: &[Process]) -> String {
        match self.members.get(member) {
            Some(info) => {
                let p = &procs[info.proc];
                let kind = match &p.config.instance_id {
                    Some(i) => format!("static {i} #{}", p.epoch),
                    None => "dynamic".to_owned(),
                };
                format!(
                    "{member} (process {}, {kind}, session {:?})",
                    info.proc, info.session
                )
            }
            None => format!("{member} (unknown to the simulation)"),
        }
    }

    fn status(&self, member: &str) -> String {
        let Some(info) = self.members.get(member) else {
            return "unknown".to_owned();
        };
        let mut out = match info.removed {
            Some((at, reason)) => format!("removed at t={} ({})", self.t(at), reason.as_str()),
            None => "still a member".to_owned(),
        };
        if info.left_holding {
            out.push_str(
                ", by a leave sent at the leave deadline while its application still held \
                 partitions",
            );
        }
        out.push_str(&info.history(self));
        out
    }

    /// The coordinator's downtime around `at`, for context in reports.
    fn downtime_context(&self, since: Instant) -> String {
        let mut out = String::new();
        for d in self.downtime.iter().filter(|d| d.to >= since) {
            out.push_str(&format!(
                "; coordinator {} from t={} to t={}",
                if d.restart { "restarting" } else { "paused" },
                self.t(d.from),
                self.t(d.to)
            ));
        }
        out
    }

    /// The lease `member`'s process holds for it now, if any: its membership's lease
    /// deadline, until when the client promises that no other member can own its
    /// partitions (suspended or not). A crashed process keeps the lease it had: the
    /// coordinator cannot tell a crash from a partition.
    fn lease_of(&self, member: &str, procs: &[Process]) -> Option<Instant> {
        let info = self.members.get(member)?;
        let p = &procs[info.proc];
        if p.m.member_id() == Some(member) {
            p.m.lease_deadline()
        } else {
            None
        }
    }

    /// Whether `b` took over `a`'s instance, directly or through a chain of replacements.
    fn replaced_chain(&self, a: &str, b: &str) -> bool {
        let mut cur = a;
        for _ in 0..64 {
            match self.members.get(cur).and_then(|i| i.replaced_by.as_deref()) {
                Some(next) if next == b => return true,
                Some(next) => cur = next,
                None => return false,
            }
        }
        false
    }

    fn group_has_members(&self, group: &str) -> bool {
        self.members
            .values()
            .any(|i| i.group == group && i.removed.is_none())
    }

    /// The end of a span of `len` of coordinator running time from `start`: downtime
    /// that overlaps it restarts the count from its end. Also says whether a restart
    /// was among it.
    pub(super) fn deadline_after(&self, start: Instant, len: Duration) -> (Instant, bool) {
        let mut s = start;
        let mut restarted = false;
        for d in &self.downtime {
            if d.from <= s + len && d.to >= s {
                s = s.max(d.to);
                restarted |= d.restart;
            }
        }
        (s + len, restarted)
    }

    pub(super) fn add_downtime(&mut self, from: Instant, to: Instant, restart: bool) {
        self.downtime.push(Downtime { from, to, restart });
    }

    fn named_member(&self, request: &Request) -> Option<String> {
        match request {
            Request::Heartbeat(h) => Some(h.member_id.to_string()),
            Request::Leave(l) => Some(l.member_id.clone()),
            Request::CommitOffsets(c) => c.member_id.clone(),
            Request::Join(j) => j
                .member_id
                .clone()
                .or_else(|| self.tokens.get(&j.join_token).cloned()),
            _ => None,
        }
    }

    // ----------------------------------------------------------------------------------
    // Inputs
    // ----------------------------------------------------------------------------------

    /// A request reached the coordinator (processed now, or queued while it is paused).
    /// The client sent it at `sent`; a leave's application had released everything if
    /// `leave_released_all`.
    pub(super) fn on_arrival(
        &mut self,
        (now, sent): (Instant, Instant),
        conn: ConnId,
        request: &Request,
        leave_released_all: bool,
    ) {
        let Some(id) = self.named_member(request) else {
            return;
        };
        let Some(info) = self.members.get_mut(&id) else {
            return;
        };
        if info.removed.is_some() {
            return;
        }
        // Acknowledgements of the revocations now asked: sent while they were asked
        // (one sent before, read late, answered an earlier revocation). A leave that
        // ends the membership after the application released everything answers them
        // all; a static member's stand-down keeps it a member with its revocations.
        let acked: Vec<Tp> = match request {
            Request::Heartbeat(h) => from_wire(&h.acked_revocations)
                .into_iter()
                .filter(|tp| info.granted_in.get(tp).is_some_and(|g| h.generation >= *g))
                .collect(),
            Request::Leave(l) if leave_released_all && l.mode != LeaveMode::StandDown => {
                info.revoking.keys().cloned().collect()
            }
            _ => Vec::new(),
        };
        for tp in acked {
            if info.revoking.get(&tp).is_some_and(|since| sent >= *since) {
                info.acked_arrival.entry(tp).or_insert(now);
            }
        }
        info.last_arrival = now;
        info.last_arrival_conn = Some(conn);
        info.conn_closed_at = None;
        info.stood_down = false;
        info.promised = info.promised.max(now + info.lease);
        if let Request::Heartbeat(h) = request {
            if h.progress > info.max_progress {
                if info.progress_unread.is_none() {
                    info.progress_unread =
                        Some((info.max_progress, info.progress_since, info.progress_min));
                }
                info.max_progress = h.progress;
                info.progress_since = now;
                info.progress_min = info.progress;
            }
        }
    }

    /// The core answered `request` from process `proc`, which the client sent at
    /// `sent`, at `now`.
    pub(super) fn on_response(
        &mut self,
        (now, sent): (Instant, Instant),
        (proc, conn): (usize, ConnId),
        request: &Request,
        response: &Response,
        leave_released_all: bool,
        procs: &[Process],
    ) {
        // The core extends the lease it promises from when it handles a frame, which is
        // later than the arrival for a frame that waited in a paused core's backlog.
        if let Some(info) = self
            .named_member(request)
            .and_then(|id| self.members.get_mut(&id))
        {
            info.promised = info.promised.max(now + info.lease);
            info.last_read_conn = Some(conn);
            if matches!(request, Request::Heartbeat(_)) {
                info.progress_unread = None;
            }
        }
        // Check 3: a replaced member is told it was fenced, whatever it sends.
        let named = match request {
            Request::Heartbeat(h) => Some(("heartbeat", &*h.member_id)),
            Request::Leave(l) => Some(("leave", l.member_id.as_str())),
            Request::CommitOffsets(c) => c.member_id.as_deref().map(|m| ("commit", m)),
            Request::Join(j) => j.member_id.as_deref().map(|m| ("join", m)),
            _ => None,
        };
        if let Some((kind, member)) = named {
            let replaced = self
                .members
                .get(member)
                .and_then(|i| i.replaced_by.clone().map(|by| (by, i.removed)));
            if let Some((by, removed)) = replaced {
                let fenced =
                    matches!(response, Response::Error(e) if e.code == ErrorCode::FencedInstance);
                if !fenced {
                    let answer = match response {
                        Response::Error(e) => format!("{:?} ({})", e.code, e.message),
                        other => format!("accepted ({other:?})"),
                    };
                    let when = removed.map_or_else(String::new, |(t, _)| self.t(t));
                    let msg = format!(
                        "{} was replaced by the newer process of {} at t={when}, but its {kind} \
                         was answered {answer} instead of FencedInstance{}",
                        self.who(member, procs),
                        self.who(&by, procs),
                        self.downtime_context(removed.map_or(now, |r| r.0)),
                    );
                    let restarted = self
                        .downtime
                        .iter()
                        .any(|d| d.restart && removed.is_some_and(|(t, _)| d.from >= t));
                    let kind = if restarted {
                        "replaced member not told it is fenced after a restart"
                    } else {
                        "replaced member not told it is fenced"
                    };
                    self.violate(now, Check::Fencing, kind, msg);
                }
            }
        }
        match (request, response) {
            (Request::Join(req), Response::Join(r)) => {
                if let Some((old, by, at)) = self.fenced_procs.get(&proc).cloned() {
                    let msg = format!(
                        "process {proc}, whose member {old} was replaced by {} at t={}, had a \
                         join accepted as {}: the old process takes the instance back",
                        self.who(&by, procs),
                        self.t(at),
                        r.member_id
                    );
                    self.violate(
                        now,
                        Check::Fencing,
                        "fenced process took the instance back",
                        msg,
                    );
                }
                self.tokens.insert(req.join_token, r.member_id.clone());
                self.note_generation(&req.group, r.generation);
                let session = Duration::from_millis(req.session_timeout_ms.into());
                let progress = Duration::from_millis(req.progress_timeout_ms.into());
                let rebalance = Duration::from_millis(req.rebalance_timeout_ms.into());
                let lease = match req.lease_timeout_ms {
                    0 => session,
                    ms => Duration::from_millis(ms.into()),
                };
                match self.members.get_mut(&r.member_id) {
                    Some(info) => {
                        info.lease = lease;
                        info.lease_min = info.lease_min.min(lease);
                        info.promised = info.promised.max(now + lease);
                        let old = [info.session, info.progress, info.rebalance];
                        if old != [session, progress, rebalance] {
                            info.history.push((now, old));
                        }
                        info.session = session;
                        info.progress = progress;
                        info.progress_min = info.progress_min.min(progress);
                        info.rebalance = rebalance;
                        info.rebalance_min = info.rebalance_min.min(rebalance);
                        info.last_arrival = now;
                    }
                    None => {
                        self.members.insert(
                            r.member_id.clone(),
                            MemberInfo {
                                proc,
                                group: req.group.clone(),
                                joined_at: now,
                                session,
                                lease,
                                lease_min: lease,
                                promised: now + lease,
                                rebalance,
                                rebalance_min: rebalance,
                                progress,
                                progress_min: progress,
                                last_arrival: now,
                                last_arrival_conn: Some(conn),
                                last_read_conn: Some(conn),
                                conn_closed_at: None,
                                stood_down: false,
                                max_progress: 0,
                                progress_since: now,
                                progress_unread: None,
                                revoking_since: None,
                                revoking: BTreeMap::new(),
                                asked: BTreeMap::new(),
                                acked_arrival: BTreeMap::new(),
                                granted_in: BTreeMap::new(),
                                removed: None,
                                replaced_by: None,
                                history: Vec::new(),
                                left_holding: false,
                                replacement: false,
                            },
                        );
                        self.last_change = now;
                    }
                }
            }
            (Request::Heartbeat(h), Response::Heartbeat(_)) => {
                // Acknowledged revocations: the application released them, if it sent
                // the acknowledgement during this holding. One sent before it (read
                // late, from a connection the member left) released an earlier
                // holding of the same partition, not this one.
                if let Some(holders) = self.holders.get_mut(&*h.group) {
                    for tp in from_wire(&h.acked_revocations) {
                        if let Some(holder) = holders.get_mut(&tp) {
                            if holder.member == *h.member_id && sent >= holder.since {
                                holder.released = true;
                            }
                        }
                    }
                }
            }
            (Request::Leave(l), Response::Leave) if l.mode == LeaveMode::StandDown => {
                if let Some(info) = self.members.get_mut(&l.member_id) {
                    info.stood_down = true;
                    info.left_holding |= !leave_released_all;
                }
                if leave_released_all {
                    if let Some(holders) = self.holders.get_mut(&l.group) {
                        for holder in holders.values_mut() {
                            if holder.member == l.member_id {
                                holder.released = true;
                            }
                        }
                    }
                }
            }
            (Request::Leave(l), Response::Leave) if leave_released_all => {
                if let Some(holders) = self.holders.get_mut(&l.group) {
                    for holder in holders.values_mut() {
                        if holder.member == l.member_id {
                            holder.released = true;
                        }
                    }
                }
            }
            (Request::Leave(l), Response::Leave) => {
                if let Some(info) = self.members.get_mut(&l.member_id) {
                    info.left_holding = true;
                }
            }
            _ => {}
        }
    }

    fn note_generation(&mut self, group: &str, generation: u32) {
        let g = self.max_generation.entry(group.to_owned()).or_insert(0);
        *g = (*g).max(generation);
    }

    pub(super) fn on_push(&mut self, push: &Push) {
        self.on_push_operated(push);
        if let Push::Assignment(a) = push {
            self.note_generation(&a.group, a.generation);
            if let Some(info) = self.members.get_mut(&a.member_id) {
                let owned = from_wire(&a.partitions);
                info.granted_in.retain(|tp, _| owned.contains(tp));
                for tp in owned {
                    info.granted_in.entry(tp).or_insert(a.generation);
                }
            }
        }
    }

    pub(super) fn on_event(&mut self, now: Instant, event: &Event, procs: &[Process]) {
        self.on_operated_event(now, event, procs);
        match event {
            // A static member removed with a departure delay leaves its partitions
            // reserved, and one that returns to them takes them back: neither
            // rebalances the others (check 11 watches the reservation instead).
            Event::PartitionsReserved { member_id, .. }
            | Event::ReservationReturned { member_id, .. } => {
                self.obligations.retain(|o| o.member != *member_id);
            }
            Event::MemberJoined {
                group, member_id, ..
            } => {
                self.last_change = now;
                self.log(now, format!("joined {}", self.who(member_id, procs)));
                if self.op.returned.remove(member_id) {
                    return;
                }
                let after_generation = self.max_generation.get(group).copied().unwrap_or(0);
                self.obligations.push(Obligation {
                    group: group.clone(),
                    after_generation,
                    since: now,
                    what: format!("{} joined", self.who(member_id, procs)),
                    member: member_id.clone(),
                });
            }
            Event::MemberReplaced {
                old_member_id,
                new_member_id,
                instance_id,
                ..
            } => {
                self.last_change = now;
                self.log(
                    now,
                    format!(
                        "{} replaced {} (instance {instance_id})",
                        self.who(new_member_id, procs),
                        self.who(old_member_id, procs)
                    ),
                );
                let old_proc = self.members.get(old_member_id).map(|i| i.proc);
                let new_proc = self.members.get(new_member_id).map(|i| i.proc);
                if let (Some(op), Some(np)) = (old_proc, new_proc) {
                    if op != np {
                        self.fenced_procs.entry(op).or_insert((
                            old_member_id.clone(),
                            new_member_id.clone(),
                            now,
                        ));
                    }
                }
                if let Some(info) = self.members.get_mut(old_member_id) {
                    info.removed = Some((now, ExpelReason::Fenced));
                    info.replaced_by = Some(new_member_id.clone());
                }
                if let Some(info) = self.members.get_mut(new_member_id) {
                    info.replacement = true;
                }
            }
            Event::MemberRemoved {
                group,
                member_id,
                reason,
            } => {
                self.last_change = now;
                self.log(
                    now,
                    format!(
                        "removed {} ({})",
                        self.who(member_id, procs),
                        reason.as_str()
                    ),
                );
                self.check_deserved(now, member_id, *reason, procs);
                if let Some(info) = self.members.get_mut(member_id) {
                    info.removed = Some((now, *reason));
                }
                if self.op.returned.remove(member_id) {
                    // Its partitions are reserved for its instance: no rebalance.
                } else if self.group_has_members(group) {
                    let after_generation = self.max_generation.get(group).copied().unwrap_or(0);
                    self.obligations.push(Obligation {
                        group: group.clone(),
                        after_generation,
                        since: now,
                        what: format!(
                            "{} was removed ({})",
                            self.who(member_id, procs),
                            reason.as_str()
                        ),
                        member: member_id.clone(),
                    });
                } else {
                    // A group left without members owes no rebalance: the removals
                    // before this one at the same instant (one timer run expelling
                    // several) answered to nobody, and a later join is an obligation of
                    // its own. Kept, they were judged by the members of whatever joined
                    // after.
                    self.obligations.retain(|o| o.group != *group);
                }
            }
            Event::RebalanceStarted {
                group, generation, ..
            } => {
                self.log(
                    now,
                    format!("rebalance of {group}: generation {generation}"),
                );
                let max = self.max_generation.get(group).copied().unwrap_or(0);
                if *generation <= max {
                    let forgotten = self.forgotten.get(group).map_or_else(String::new, |t| {
                        format!("; the core forgot the group at t={}", self.t(*t))
                    });
                    let msg = format!(
                        "group {group} started a rebalance with generation {generation}, but \
                         generation {max} was already seen for it{forgotten}{}",
                        self.downtime_context(self.start)
                    );
                    let kind = if self.forgotten.contains_key(group) {
                        "group forgotten and created again"
                    } else {
                        "generation reused"
                    };
                    self.violate(now, Check::Generations, kind, msg);
                }
                self.note_generation(group, *generation);
                // Any rebalance answers the changes before it; whether its generation is
                // larger is check 6's business.
                self.obligations.retain(|o| o.group != *group);
            }
            Event::IsolationSuspected {
                silent_for,
                members,
            } => {
                self.isolated_since.get_or_insert(now);
                self.log(
                    now,
                    format!("isolation suspected: {members} members silent for {silent_for:?}"),
                );
            }
            Event::IsolationEnded { silent_for } => {
                if let Some(since) = self.isolated_since.take() {
                    self.isolation.push((since, now));
                }
                self.log(now, format!("isolation ended after {silent_for:?}"));
            }
            Event::PauseDetected { late_by, .. } => {
                self.log(now, format!("pause detected, late by {late_by:?}"));
            }
            Event::BacklogDetected { lag } => {
                self.log(now, format!("backlog detected, {lag:?} behind"));
            }
            Event::BacklogEnded { lasted, worst } => {
                self.log(
                    now,
                    format!("backlog ended after {lasted:?}, at worst {worst:?} behind"),
                );
            }
            Event::MemberSuspected {
                member_id,
                silence,
                expel_after,
                ..
            } => {
                self.log(
                    now,
                    format!(
                        "{member_id} suspect after {silence:?} (expelled after {expel_after:?})"
                    ),
                );
            }
            Event::MemberRecovered {
                member_id,
                suspect_for,
                ..
            } => {
                self.log(
                    now,
                    format!("{member_id} alive again after {suspect_for:?}"),
                );
            }
            _ => {}
        }
    }

    /// Check 7: an expulsion for a deadline happens only once the deadline has passed.
    fn check_deserved(
        &mut self,
        now: Instant,
        member: &str,
        reason: ExpelReason,
        procs: &[Process],
    ) {
        let Some(info) = self.members.get(member) else {
            return;
        };
        let rejoined = !info.history.is_empty();
        let mut kind = match reason {
            ExpelReason::SessionExpired if rejoined => {
                "session expiry, timeouts changed by a rejoin"
            }
            ExpelReason::SessionExpired => "session expiry",
            ExpelReason::ProgressExpired if rejoined => {
                "progress expiry, timeouts changed by a rejoin"
            }
            ExpelReason::ProgressExpired => "progress expiry",
            _ if rejoined => "rebalance timeout, timeouts changed by a rejoin",
            _ if info.replacement => "rebalance timeout of a static replacement",
            _ => "rebalance timeout",
        };
        let queued = if reason == ExpelReason::RebalanceTimeout {
            self.acknowledged_in_time(now, member, procs)
        } else {
            None
        };
        let msg = match reason {
            ExpelReason::SessionExpired => {
                let silent = now.saturating_duration_since(info.last_arrival);
                // A member whose connection closed is expelled when its lease runs out.
                let bound = if info.conn_closed_at.is_some() {
                    info.lease_min
                } else {
                    info.session
                };
                let bound = self.adaptive_floor.map_or(bound, |floor| bound.min(floor));
                (silent + EPS < bound).then(|| {
                    format!(
                        "{} was expelled for session expiry although a frame from it reached \
                         the coordinator at t={}, only {silent:?} earlier; its session timeout \
                         is {:?}{}{}",
                        self.who(member, procs),
                        self.t(info.last_arrival),
                        info.session,
                        info.history(self),
                        self.downtime_context(info.last_arrival)
                    )
                })
            }
            ExpelReason::ProgressExpired => {
                let stuck = now.saturating_duration_since(info.progress_since);
                (stuck + EPS < info.progress_min).then(|| {
                    format!(
                        "{} was expelled for lack of progress although its progress advanced \
                         at t={}, only {stuck:?} earlier; its progress timeout is {:?}{}{}",
                        self.who(member, procs),
                        self.t(info.progress_since),
                        info.progress_min,
                        info.history(self),
                        self.downtime_context(info.progress_since)
                    )
                })
            }
            ExpelReason::RebalanceTimeout => match info.revoking_since {
                Some(_) if queued.is_some() => {
                    kind = "rebalance timeout with the acknowledgement queued";
                    queued
                }
                Some(since) => {
                    let waited = now.saturating_duration_since(since);
                    (waited + EPS < info.rebalance_min).then(|| {
                        format!(
                            "{} was expelled for not acknowledging a revocation, but it has had \
                             partitions to release only since t={} ({waited:?}); its rebalance \
                             timeout is {:?} (it joined at t={}){}{}",
                            self.who(member, procs),
                            self.t(since),
                            info.rebalance_min,
                            self.t(info.joined_at),
                            info.history(self),
                            self.downtime_context(since)
                        )
                    })
                }
                None => Some(format!(
                    "{} was expelled for not acknowledging a revocation, but it had no \
                     partitions to release",
                    self.who(member, procs)
                )),
            },
            _ => None,
        };
        if let Some(msg) = msg {
            self.violate(now, Check::DeservedExpulsion, kind, msg);
        }
    }

    /// Check 7 for a `RebalanceTimeout` expulsion at `now`: whether every revocation
    /// whose deadline has passed had its acknowledgement reach the coordinator before
    /// that deadline (read late: queued behind a pause, or read after the timers ran).
    /// The deadline is the earliest the core may set: when the oracle saw the partition
    /// asked, plus the smallest rebalance timeout since (the core only ever moves it
    /// later, for its own pauses and silences). Returns the explanation if so.
    fn acknowledged_in_time(
        &self,
        now: Instant,
        member: &str,
        procs: &[Process],
    ) -> Option<String> {
        let info = self.members.get(member)?;
        let mut overdue = info
            .revoking
            .iter()
            .map(|(tp, since)| (tp, *since + info.rebalance_min))
            .filter(|(_, deadline)| *deadline <= now + EPS)
            .peekable();
        overdue.peek()?;
        let mut answered = Vec::new();
        for (tp, deadline) in overdue {
            let arrived = *info.acked_arrival.get(tp)?;
            if arrived > deadline {
                return None;
            }
            answered.push(format!(
                "{}/{} (asked at t={}, due by t={}, acknowledged at t={})",
                tp.0,
                tp.1,
                self.t(info.revoking[tp]),
                self.t(deadline),
                self.t(arrived)
            ));
        }
        let first = info.revoking.values().min().copied().unwrap_or(now);
        Some(format!(
            "{} was expelled for not acknowledging a revocation, but the acknowledgement of \
             every revocation past its deadline had reached the coordinator before that \
             deadline: {}; its rebalance timeout is {:?} (it joined at t={}){}{}",
            self.who(member, procs),
            answered.join(", "),
            info.rebalance_min,
            self.t(info.joined_at),
            info.history(self),
            self.downtime_context(first)
        ))
    }

    /// The core's view of `group` after an input changed it: checks exclusivity (1),
    /// that every grant respects the previous holder's lease (2), and notes revocations.
    pub(super) fn on_describe(
        &mut self,
        now: Instant,
        group: &str,
        described: Option<&DescribeGroupResponse>,
        procs: &[Process],
    ) {
        let mut owners: BTreeMap<Tp, String> = BTreeMap::new();
        let mut revoking: Vec<(String, BTreeSet<Tp>, BTreeSet<Tp>)> = Vec::new();
        if described.is_none() {
            self.forgotten.insert(group.to_owned(), now);
        }
        if let Some(d) = described {
            for m in &d.members {
                for tp in from_wire(&m.owned) {
                    if let Some(other) = owners.insert(tp.clone(), m.member_id.clone()) {
                        let msg = format!(
                            "partition {}/{} of group {group} is owned by both {} and {}",
                            tp.0,
                            tp.1,
                            self.who(&other, procs),
                            self.who(&m.member_id, procs)
                        );
                        self.violate(now, Check::Exclusive, "two owners", msg);
                    }
                }
                // Under caps, a revocation waiting for room is not asked yet: its wait
                // starts when it is pushed.
                let leaving = from_wire(&m.pending_revoke);
                let mut asked = leaving.clone();
                if let Some(pushed) = self.op.pushed_if_capped(group, &m.member_id) {
                    asked.retain(|tp| pushed.contains(tp));
                }
                revoking.push((m.member_id.clone(), leaving, asked));
            }
        }
        let prev = self.owners.remove(group).unwrap_or_default();
        let mut conflicts = Vec::new();
        if let Some(holders) = self.holders.get(group) {
            for (tp, to) in &owners {
                if prev.get(tp) == Some(to) {
                    continue;
                }
                let Some(h) = holders.get(tp) else { continue };
                if h.member == *to || h.released || self.replaced_chain(&h.member, to) {
                    continue;
                }
                if let Some(lease) = self.lease_of(&h.member, procs) {
                    if lease > now {
                        conflicts.push((tp.clone(), to.clone(), h.member.clone(), h.since, lease));
                    }
                }
            }
        }
        for (tp, to, from, since, lease) in conflicts {
            let info = &self.members[&from];
            let kind = if info.left_holding {
                "holder left while holding"
            } else if info.session_changed() {
                "holder rejoined with another session timeout"
            } else if self.downtime.iter().any(|d| d.restart && d.from >= since) {
                "coordinator restarted since the grant"
            } else {
                "other"
            };
            let msg = format!(
                "partition {}/{} of group {group} was granted to {} while {} still held a lease \
                 covering it until t={} ({:?} more). The holder was granted it at t={} and never \
                 released it (no acknowledged revocation, no leave after releasing everything); \
                 the holder is {} and its process is {}{}",
                tp.0,
                tp.1,
                self.who(&to, procs),
                self.who(&from, procs),
                self.t(lease),
                lease - now,
                self.t(since),
                self.status(&from),
                self.proc_state(&from, procs),
                self.downtime_context(since)
            );
            self.violate(now, Check::Lease, kind, msg);
        }
        let holders = self.holders.entry(group.to_owned()).or_default();
        for (tp, to) in &owners {
            if prev.get(tp) != Some(to) {
                // A restart hides ownership for a while; the same member owning the
                // partition again after it is the same holding, released or not.
                let same_holding = holders.get(tp).is_some_and(|h| {
                    h.member == *to && self.downtime.iter().any(|d| d.restart && d.from >= h.since)
                });
                if same_holding {
                    continue;
                }
                holders.insert(
                    tp.clone(),
                    Holder {
                        member: to.clone(),
                        since: now,
                        released: false,
                    },
                );
            }
        }
        self.owners.insert(group.to_owned(), owners);
        for (id, asked, pushed) in revoking {
            let Some(info) = self.members.get_mut(&id) else {
                continue;
            };
            info.asked.retain(|tp, _| pushed.contains(tp));
            for tp in pushed {
                info.asked.entry(tp).or_insert(now);
            }
            let pending = !asked.is_empty();
            info.revoking.retain(|tp, _| asked.contains(tp));
            info.acked_arrival.retain(|tp, _| asked.contains(tp));
            for tp in asked {
                info.revoking.entry(tp).or_insert(now);
            }
            let before = info.revoking_since.is_some();
            if !pending {
                info.revoking_since = None;
            } else if info.revoking_since.is_none() {
                info.revoking_since = Some(now);
                info.rebalance_min = info.rebalance;
            }
            if self.verbose && before != pending {
                let line = if pending {
                    "has partitions to release"
                } else {
                    "has nothing to release"
                };
                self.log(now, format!("{id} {line}"));
            }
        }
        self.on_describe_operated(now, group, described, procs);
    }

    fn proc_state(&self, member: &str, procs: &[Process]) -> String {
        match self.members.get(member) {
            Some(info) => {
                let p = &procs[info.proc];
                if p.alive {
                    format!("{} (cut until t={})", p.phase_name(), self.t(p.cut_until))
                } else {
                    "crashed".to_owned()
                }
            }
            None => "unknown".to_owned(),
        }
    }

    /// The coordinator saw connection `conn` close.
    pub(super) fn on_closed(&mut self, now: Instant, conn: ConnId) {
        for info in self.members.values_mut() {
            let talks_over =
                info.last_arrival_conn == Some(conn) || info.last_read_conn == Some(conn);
            if talks_over && info.conn_closed_at.is_none() {
                info.conn_closed_at = Some(now);
            }
        }
    }

    /// A new coordinator was restored at `now`: every restored member has fresh
    /// deadlines from now, as the core promises (no connection of the old one counts).
    pub(super) fn on_restored(&mut self, now: Instant, restored: &[String]) {
        for info in self.members.values_mut() {
            info.last_arrival_conn = None;
            info.last_read_conn = None;
            info.conn_closed_at = None;
            // Frames queued at the old process were lost with it.
            info.acked_arrival.clear();
            // So was the progress they carried. (Once credited from the arrival alone:
            // a heartbeat queued at a paused coordinator that then restarted was held
            // to have moved the member's progress, which the core never read, and its
            // progress expiry was judged early: check 7 [progress expiry].)
            if let Some((max, since, min)) = info.progress_unread.take() {
                info.max_progress = max;
                info.progress_since = since;
                info.progress_min = min;
            }
        }
        for id in restored {
            if let Some(info) = self.members.get_mut(id) {
                info.last_arrival = now;
                // A restore counts what was left of a lease again from now, and at least a
                // lease: at most the longest session the member has had from now (a lease
                // promised before a rejoin shortened the timeout may outlast the session
                // now in force, and the snapshot carries what was left of it).
                info.promised = info.promised.max(now + info.longest_session());
                // The waits for progress and for revocations keep their starts: the core
                // resumes them with what they had counted (check 7 holds it to no more
                // than the real time since, check 8 to the running time).
            }
        }
    }

    /// Check 5b: rebalances called for by membership changes happen. Call only while the
    /// coordinator is running (downtime is recorded when it ends).
    pub(super) fn check_obligations(&mut self, now: Instant) {
        let mut overdue = Vec::new();
        for (i, o) in self.obligations.iter().enumerate() {
            let (deadline, _) = self.deadline_after(o.since, REBALANCE_WITHIN);
            if now > deadline {
                overdue.push(i);
            }
        }
        for i in overdue.into_iter().rev() {
            let o = self.obligations.remove(i);
            if !self.group_has_members(&o.group) {
                continue;
            }
            let msg = format!(
                "{} at t={}, but group {} (at generation {}) started no rebalance within {:?} \
                 of coordinator running time{}",
                o.what,
                self.t(o.since),
                o.group,
                o.after_generation,
                REBALANCE_WITHIN,
                self.downtime_context(o.since)
            );
            let restarted = self
                .downtime
                .iter()
                .any(|d| d.restart && d.from >= o.since && d.from <= now);
            let kind = match (o.what.ends_with("joined"), restarted) {
                (true, true) => "restart after a join",
                (false, true) => "restart after a removal",
                (true, false) => "after a join, no restart",
                (false, false) => "after a removal, no restart",
            };
            self.violate(now, Check::RebalanceFollows, kind, msg);
        }
    }

    /// Check 8: the guards hold a wait only so long. Every revocation ends (released,
    /// or its member expelled) within the member's rebalance timeout plus two expel
    /// thresholds of its asking, and a member whose progress does not move is expelled
    /// within its progress timeout plus two expel thresholds of its last progress,
    /// however often the coordinator was isolated. Time the coordinator was down does
    /// not count (a pause shifts the waits, a restart starts them over), and after a
    /// pause the grace before anyone is judged is added. Call only while the
    /// coordinator is running (downtime is recorded when it ends).
    pub(super) fn check_holds(&mut self, now: Instant, procs: &[Process]) {
        let mut found = Vec::new();
        for (id, info) in &self.members {
            if info.removed.is_some() {
                continue;
            }
            // The expel threshold is at most the session timeout; a rejoin may have
            // changed any of the three, so the longest each has been counts.
            let threshold = info.longest_session();
            let longest = |now: Duration, i: usize| {
                info.history
                    .iter()
                    .map(|(_, t)| t[i])
                    .fold(now, Duration::max)
            };
            let rebalance = longest(info.rebalance, 2);
            let progress = longest(info.progress, 1);
            if let Some((tp, since)) = info.asked.iter().min_by_key(|(_, since)| **since) {
                let due = self.wait_bound(*since, rebalance, threshold);
                if now > due {
                    let kind = if info.acked_arrival.contains_key(tp) {
                        "revocation acknowledged and still pending"
                    } else {
                        "revocation neither acknowledged nor ended"
                    };
                    found.push((
                        kind,
                        format!(
                            "{} has been asked to release {}/{} since t={}, so the revocation \
                             should have ended, or the member been expelled, by t={} (rebalance \
                             timeout {rebalance:?} plus two expel thresholds of at most \
                             {threshold:?}), but at t={} it is still a member with the \
                             revocation pending; its process is {}{}{}",
                            self.who(id, procs),
                            tp.0,
                            tp.1,
                            self.t(*since),
                            self.t(due),
                            self.t(now),
                            self.proc_state(id, procs),
                            info.history(self),
                            self.downtime_context(*since)
                        ),
                    ));
                }
            }
            let due = self.wait_bound(info.progress_since, progress, threshold);
            if now > due {
                found.push((
                    "no progress, not expelled",
                    format!(
                        "{} last made progress at t={}, so it should have been expelled by \
                         t={} (progress timeout {progress:?} plus two expel thresholds of at \
                         most {threshold:?}), but at t={} it is still a member; its process \
                         is {}{}{}",
                        self.who(id, procs),
                        self.t(info.progress_since),
                        self.t(due),
                        self.t(now),
                        self.proc_state(id, procs),
                        info.history(self),
                        self.downtime_context(info.progress_since)
                    ),
                ));
            }
        }
        for (kind, msg) in found {
            self.violate(now, Check::BoundedHold, kind, msg);
        }
    }

    /// When a wait for progress or a revocation of `timeout` from `start` must have ended
    /// (check 8): its timeout plus two expel thresholds (at most `threshold`) of running
    /// time, as [`Self::hold_bound`] counts it, except that a restart does not start the
    /// count over: the core carries the waits over, and counts again only what its
    /// checkpoints did not record, an eighth of the timeout before the first restart and
    /// half as much before each later one (a quarter in all). After the last restart
    /// the member is judged once its first heartbeat is read: one that is not heard is
    /// expelled for its silence, within two expel thresholds of the restart.
    fn wait_bound(&self, start: Instant, timeout: Duration, threshold: Duration) -> Instant {
        let mut len = timeout + 2 * threshold;
        let restarts: Vec<Downtime> = self
            .downtime
            .iter()
            .filter(|d| d.restart && d.to >= start)
            .copied()
            .collect();
        if restarts.is_empty() {
            return self.hold_bound(start, len, threshold);
        }
        len += timeout / 4;
        let paused = self.downtime.iter().any(|d| !d.restart && d.to >= start);
        let grace = if paused {
            (threshold / 4).clamp(Duration::from_millis(50), Duration::from_secs(2))
        } else {
            Duration::ZERO
        };
        // Running time: a pause starts the count over (as `deadline_after`), a restart
        // only stops the clock while the coordinator is down.
        let full = len + grace + CRASH_SLACK;
        let (mut at, mut left) = (start, full);
        let mut downtime: Vec<&Downtime> = self.downtime.iter().collect();
        downtime.sort_by_key(|d| d.from);
        for d in downtime {
            if d.to <= at {
                continue;
            }
            if d.from >= at + left {
                break;
            }
            if d.restart {
                left -= d.from.saturating_duration_since(at);
            } else {
                left = full;
            }
            at = d.to;
        }
        // A member silent since the last restart is expelled for its silence within two
        // expel thresholds of it, counted as the guards count silence: a pause since
        // starts that count over.
        let last = restarts.iter().map(|d| d.to).max().unwrap_or(start);
        let silent = self.deadline_after(last, 2 * threshold + CRASH_SLACK).0;
        (at + left).max(silent)
    }

    /// When a wait of `len` from `start` must have ended (check 8): a pause adds its
    /// grace (a quarter of `threshold`, 50 ms to 2 s), there is slack for instants
    /// computed along different paths, and coordinator downtime does not count.
    fn hold_bound(&self, start: Instant, len: Duration, threshold: Duration) -> Instant {
        let paused = self.downtime.iter().any(|d| !d.restart && d.to >= start);
        let grace = if paused {
            (threshold / 4).clamp(Duration::from_millis(50), Duration::from_secs(2))
        } else {
            Duration::ZERO
        };
        self.deadline_after(start, len + grace + CRASH_SLACK).0
    }

    /// The bound for a crashed member (check 4): its lease timeout after its last frame
    /// (or the close, if that reaches the coordinator later) when the connection was seen
    /// to close, twice its session timeout otherwise, plus slack; time the coordinator
    /// was down does not count.
    pub(super) fn crash_deadline(&self, info: &MemberInfo, crash: &Crash) -> Instant {
        // The tight bound holds when the coordinator learns of the close before the
        // member's session runs out; a close held back longer is no evidence in time.
        let close = crash
            .close_arrives
            .filter(|at| *at <= info.last_arrival + info.session);
        let tight = crash.closed_conn.is_some()
            && info.last_arrival_conn == crash.closed_conn
            && !info.stood_down;
        let loose = info.session * 2 + CRASH_SLACK;
        if let (true, Some(close)) = (tight, close) {
            // Expelled when the promised lease has run out (or the close arrives, if
            // later), and never after the session deadline: the session now in force,
            // or a longer one the member had before a rejoin if a restore carried a
            // lease promised under it over.
            let wait = info
                .promised
                .max(close)
                .saturating_duration_since(info.last_arrival)
                .min(info.longest_session());
            // After a pause the core reads its backlog before judging anyone: a grace of
            // a quarter of the session (50 ms to 2 s).
            let paused = self
                .downtime
                .iter()
                .any(|d| !d.restart && d.to >= info.last_arrival);
            let grace = if paused {
                (info.session / 4).clamp(Duration::from_millis(50), Duration::from_secs(2))
            } else {
                Duration::ZERO
            };
            let (d, restarted) = self.deadline_after(info.last_arrival, wait + grace + CRASH_SLACK);
            if !restarted {
                return d;
            }
        }
        self.deadline_after(info.last_arrival, loose).0
    }

    /// Check 4, at the end of the run.
    pub(super) fn check_crashed(&mut self, now: Instant, crashes: &[Crash], procs: &[Process]) {
        let mut found = Vec::new();
        for crash in crashes {
            for (id, info) in &self.members {
                if info.proc != crash.proc || info.removed.is_some_and(|(t, _)| t <= crash.at) {
                    continue;
                }
                let deadline = self.crash_deadline(info, crash);
                let kind = if crash.closed_conn.is_some() {
                    "its connection closed"
                } else {
                    "silently, its connection left open"
                };
                let until = info.removed.map_or(now, |(t, _)| t);
                let guard = self
                    .isolation
                    .iter()
                    .copied()
                    .chain(self.isolated_since.map(|s| (s, now)))
                    .any(|(a, b)| a <= until && b >= info.last_arrival);
                // A pause extends deadlines by up to its length once it ends, which may
                // reach past frames heard after it.
                let paused = self.downtime.iter().any(|d| {
                    !d.restart && d.from <= until && d.to + (d.to - d.from) >= info.last_arrival
                });
                let class = match (info.history.is_empty(), guard, paused) {
                    (false, _, _) => "timeouts changed by a rejoin",
                    (true, true, _) => "held by the isolation guard",
                    (true, false, true) => "kept past a coordinator pause",
                    (true, false, false) => "other",
                };
                match info.removed {
                    Some((t, _)) if t <= deadline + EPS => {}
                    Some((t, reason)) => found.push((
                        class,
                        format!(
                            "{} crashed at t={} ({kind}); its last frame reached the coordinator \
                         at t={}, so it should have been expelled by t={}, but it was removed \
                         only at t={} ({}){}{}",
                            self.who(id, procs),
                            self.t(crash.at),
                            self.t(info.last_arrival),
                            self.t(deadline),
                            self.t(t),
                            reason.as_str(),
                            info.history(self),
                            self.downtime_context(info.last_arrival)
                        ),
                    )),
                    None if now > deadline => found.push((
                        class,
                        format!(
                            "{} crashed at t={} ({kind}); its last frame reached the coordinator \
                         at t={}, so it should have been expelled by t={}, but it is still a \
                         member at the end of the run (t={}){}{}",
                            self.who(id, procs),
                            self.t(crash.at),
                            self.t(info.last_arrival),
                            self.t(deadline),
                            self.t(now),
                            info.history(self),
                            self.downtime_context(info.last_arrival)
                        ),
                    )),
                    None => {}
                }
            }
        }
        found.sort();
        for (class, msg) in found {
            self.violate(now, Check::CrashedExpelled, class, msg);
        }
    }

    /// Whether every crashed member is gone or past its bound (the tail may end).
    pub(super) fn crashed_resolved(&self, now: Instant, crashes: &[Crash]) -> bool {
        crashes.iter().all(|crash| {
            self.members.values().all(|info| {
                info.proc != crash.proc
                    || info.removed.is_some()
                    || now > self.crash_deadline(info, crash) + Duration::from_secs(1)
            })
        })
    }

    /// When the partitions of the last expelled member may be held until at the latest:
    /// its removal plus its session timeout.
    /// Offsets retention deleted `group`, and with it what its static instances were:
    /// fencing is promised for as long as the group exists (documented), so replaced
    /// members of it are no longer checked.
    ///
    /// A drained static instance is one of them: the drain names the instance, and the
    /// core keeps it with the instance. The oracle used to keep it past the deletion
    /// and then held a later process of the instance, joining a group created afresh,
    /// to a drain the deleted group took with it: check 12 \[drain forgotten\].
    /// Unless the core `kept` the group (one with settings or drained
    /// labels loses only its offsets), the drained instances go with it; drained
    /// labels are the group's own settings and kept in the core either way.
    pub(super) fn group_deleted(&mut self, group: &str, kept: bool) {
        if !kept {
            self.op.forget_drained_instances(group);
        }
        for info in self.members.values_mut() {
            if info.group == group {
                info.replaced_by = None;
            }
        }
        let members = &self.members;
        self.fenced_procs
            .retain(|_, (old, _, _)| members.get(old).is_none_or(|i| i.group != group));
    }

    /// When the coordinator may last expel a member whose process is gone (crashed or
    /// done) but which it still lists: frames held back by a cut can renew such a member
    /// long after its process stopped.
    pub(super) fn lingering_end(&self, procs: &[Process]) -> Instant {
        self.members
            .values()
            .filter(|i| i.removed.is_none() && !procs[i.proc].is_live())
            .map(|i| {
                let longest = i.longest_session();
                // Coordinator downtime is not counted: a pause shifts deadlines.
                self.deadline_after(i.last_arrival, 2 * longest).0
            })
            .max()
            .unwrap_or(self.start)
    }

    /// When the coordinator last came back from a pause or a restart (the start if
    /// never): its members reconnect, resume or rejoin, and their group settles only
    /// after that.
    pub(super) fn last_downtime_end(&self) -> Instant {
        self.downtime
            .iter()
            .map(|d| d.to)
            .max()
            .unwrap_or(self.start)
    }

    /// When the last hold the coordinator may keep for a removed member ends: its
    /// removal plus the longest session timeout it was ever promised. Fenced members
    /// (replaced static instances) and leavers that did not confirm their release are
    /// held too.
    pub(super) fn last_hold_end(&self) -> Instant {
        self.members
            .values()
            .filter_map(|i| {
                let (at, reason) = i.removed?;
                if reason == ExpelReason::Left && !i.left_holding {
                    return None;
                }
                let longest = i.longest_session();
                Some(at + longest)
            })
            .max()
            .unwrap_or(self.start)
    }

    pub(super) fn report_violation(
        &mut self,
        now: Instant,
        check: Check,
        kind: &'static str,
        message: String,
    ) {
        self.violate(now, check, kind, message);
    }
}
