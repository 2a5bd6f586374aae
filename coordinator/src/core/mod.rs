//! The coordinator's deterministic core.
//!
//! A sans-IO state machine: every input carries `now`, outputs are drained with
//! [`Coordinator::poll_output`] and [`Coordinator::take_records`], and the next wake-up
//! is asked for with [`Coordinator::poll_timeout`]. The core never reads a clock, never
//! does I/O and never spawns; `tests/architecture.rs` enforces that.

pub mod assignor;
mod config;
mod effects;
mod events;
mod group;
pub mod guards;
mod inspect;
pub mod liveness;
mod membership;
mod offsets;
mod operate;
pub mod records;
pub mod replay;
#[cfg(test)]
mod tests;
mod timers;
mod totals;
mod trace;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use rollcall_protocol::{ApiKey, ErrorCode, Request, Response};

use group::{Ctx, Group, Usage};
use guards::Guards;
use timers::{TimerKey, Timers};

pub use assignor::{Assignor, AssignorKind, TopicPartition};
pub use config::{CoreConfig, UnknownName, MAX_MEMBER_ID_BYTES, MAX_NAME_BYTES};
pub use effects::{is_member_traffic, Effects};
pub use events::{CoreStats, Event, Output, Quota, RebalanceCause, ReservationEnd, ShadowVerdict};
pub use group::{Balance, GroupConfig};
pub use guards::Guard;
pub use liveness::{Detector, DetectorKind, DetectorSettings, FixedTimeout};
pub use operate::{Authority, MAX_DEPARTURE_DELAY_MS};
pub use records::{
    GroupSnapshot, HeldSnapshot, InstanceSnapshot, MemberSnapshot, OffsetRecord, OperatorSnapshot,
    Record, RestoredState, WaitSnapshot,
};
pub use totals::Totals;

/// The work [`Coordinator::handle_timeout`] does at most per call, in partitions and
/// members rebalanced (and [`MEMBER_TIMER_WORK`] per member timer), past the timer that
/// reaches it: a fifth of the largest group a server allows by default, so one call
/// runs at most one rebalance of a group that large, or the rebalances of many small
/// groups that add up to a fifth of it.
pub const TIMER_SLICE: u64 = 20_000;

/// The work a member's timer counts for in a slice (an expiry removes the member, holds
/// its partitions and pushes).
const MEMBER_TIMER_WORK: u64 = 10;

/// Identifies a client connection to the core. Chosen by the shell; never reused while
/// the connection is open.
pub type ConnId = u64;

/// The coordinator's core: every group of one shard.
///
/// Every method that changes the core is an input, which carries `now` (or the instant
/// it reports), or a poll. A shell calls them in this order:
///
/// 1. [`Self::restore`], before anything else: what the store loaded.
/// 2. Then, as they come, the inputs:
///    - [`Self::handle_request`]: a request from a connection. It returns its
///      [`Effects`]: the response, whether it wrote records (the response stands only
///      once they are durable), and the member a Join admitted.
///    - [`Self::handle_disconnect`]: a connection closed.
///    - [`Self::observe_traffic`] then [`Self::observe_lag`], before each run of the
///      timers: the whole server's latest member frame ([`is_member_traffic`]), and how
///      late the shell is (the isolation and backlog guards' evidence).
///    - [`Self::handle_timeout`]: when [`Self::poll_timeout`] is due (again at once if
///      it still is: one call runs one slice of work).
///    - [`Self::remove_offsets`]: offsets retention found the group empty long enough.
///    - [`Self::answers_released`]: the answers to Joins left, after their records were
///      durable (their sessions count from then).
///    - [`Self::restore`] again, to adopt a shard's groups at runtime, and
///      [`Self::release`], to hand a shard's groups back (its last snapshots are in the
///      next take).
/// 3. After every input, or batch of inputs, the polls, in this order:
///    [`Self::poll_output`] until `None` (pushes and events, in the order produced);
///    [`Self::take_records`], whenever the shell starts a durable write (what must be
///    durable before any response or push of the inputs since the last take is sent;
///    [`Self::has_records`] says whether there is anything to take); and
///    [`Self::poll_timeout`] (when to call [`Self::handle_timeout`] next).
///
/// [`Self::is_unflushed`] tells the shell whether what concerns a group may be sent
/// before the next take is durable. Inspection changes nothing: [`Self::stats`],
/// [`Self::groups_below_advice`], [`Self::config`], [`Self::totals`],
/// [`Self::timer_entries`].
///
/// The handlers live beside the state they serve: `membership.rs` (Join, Heartbeat,
/// Leave, connections), `offsets.rs` (commits, fetches, retention), `inspect.rs`
/// (ListGroups, DescribeGroup, stats), `guards/` (what holds an expulsion), and
/// `group/` (one group: clocks, assignment, reconciliation, snapshots).
#[derive(Debug)]
pub struct Coordinator {
    config: CoreConfig,
    assignor: Box<dyn Assignor>,
    /// Hashed with foldhash, seeded per map: every heartbeat looks its group up, and
    /// SipHash was 2 % of the coordinator's CPU under Heartbeats frames.
    groups: HashMap<Arc<str>, Group, foldhash::fast::RandomState>,
    timers: Timers,
    outputs: VecDeque<Output>,
    records: Vec<Record>,
    next_member: u64,
    /// A floor under every group: the largest generation of every group this core
    /// forgot itself (one number, however many groups come and go), and the floor an
    /// earlier store kept for all groups ([`RestoredState::generation_floor`]). A new
    /// group starts above it and above its own floor ([`Self::floor_of`]), so a group id
    /// never sees a generation twice.
    generation_floor: u32,
    /// Per group the store deleted, the largest generation it reached, as restored
    /// ([`RestoredState::floors`]); dropped with the group's shard when it is released.
    floors: HashMap<String, u32>,
    /// The latest `now` seen, to express deadlines as durations in snapshots.
    now: Option<Instant>,
    /// The latest instant before `now` at which the core ran: a pause can only have
    /// begun after it.
    ran_before: Option<Instant>,
    guards: Guards,
    /// Groups whose state changed since the last [`Coordinator::take_records`], so that
    /// call snapshots only them instead of scanning every group.
    dirty: Vec<Arc<str>>,
    /// Set when [`Self::note_dirty`] finds a group changed: the input being handled
    /// changed durable state (see [`Effects::wrote`]).
    changed: bool,
    /// Groups with records not yet taken, beyond the dirty ones: those of
    /// `records[..records_seen]` (see [`Coordinator::is_unflushed`]).
    unflushed: HashSet<String>,
    records_seen: usize,
    /// The groups traced, and the last trace epoch handed out (see `trace.rs`).
    tracing: trace::Tracing,
    /// Members bound to each connection (group, member), so a disconnect touches only
    /// them. Entries may be stale (the member moved on or left); they are checked.
    bound: HashMap<ConnId, Vec<MemberRef>>,
    /// Where in its group's roster each beat of a connection's last Heartbeats request
    /// found its member, by the beat's place in the request: where the next request's
    /// beats look first, and what they load before any is handled. Only a hint (the
    /// member's id is compared); 4 bytes a beat, dropped with the connection.
    beat_slots: HashMap<ConnId, Vec<u32>>,
    /// What every group holds, as the quotas count it: the sum of the groups'
    /// [`Group::accounted`], brought up to date whenever a group changes, over every
    /// core that shares it.
    totals: Arc<Totals>,
}

/// A member by (group, member id).
type MemberRef = (Arc<str>, Arc<str>);

fn refuse(key: ApiKey, code: ErrorCode, message: impl Into<String>) -> Response {
    Response::error(key as u16, code, message)
}

impl Coordinator {
    /// An empty coordinator, whose quotas count its own groups.
    pub fn new(config: CoreConfig) -> Self {
        Self::with_totals(config, Arc::default())
    }

    /// An empty coordinator whose quotas count its groups into `totals`, with those of
    /// every other core given the same totals (the server's shards).
    pub fn with_totals(config: CoreConfig, totals: Arc<Totals>) -> Self {
        let assignor = config.assignor.build();
        Self {
            config,
            assignor,
            groups: HashMap::default(),
            timers: Timers::default(),
            outputs: VecDeque::new(),
            records: Vec::new(),
            next_member: 0,
            generation_floor: 0,
            floors: HashMap::new(),
            now: None,
            ran_before: None,
            guards: Guards::default(),
            dirty: Vec::new(),
            changed: false,
            unflushed: HashSet::new(),
            records_seen: 0,
            tracing: trace::Tracing::default(),
            bound: HashMap::new(),
            beat_slots: HashMap::new(),
            totals,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// Notes the latest `now` an input carried.
    /// Time moves to `now`; returns whether it moved.
    fn tick(&mut self, now: Instant) -> bool {
        if self.now.is_none_or(|n| now > n) {
            self.ran_before = self.now;
            self.now = Some(now);
            return true;
        }
        false
    }

    /// Splits `self` into the group table and the context group methods need.
    fn parts(
        &mut self,
        now: Instant,
    ) -> (
        &mut HashMap<Arc<str>, Group, foldhash::fast::RandomState>,
        Ctx<'_>,
    ) {
        let Self {
            config,
            assignor,
            groups,
            timers,
            outputs,
            records,
            ..
        } = self;
        (
            groups,
            Ctx {
                now,
                config,
                assignor: &**assignor,
                timers,
                outputs,
                records,
            },
        )
    }

    /// The generation a new group `name` starts above: its own floor, or the one under
    /// every group, whichever is higher.
    fn floor_of(&self, name: &str) -> u32 {
        let own = self.floors.get(name).copied().unwrap_or(0);
        self.generation_floor.max(own)
    }

    /// Restores groups and offsets loaded from the store: at start, every group the
    /// shard owns; at runtime, the groups of a shard this core adopts (loaded with
    /// `Store::load_groups`), which follow the same rules as a restart. Every member
    /// gets a fresh session counted from `now` (a restart, or a move, is no one's
    /// fault), takes no new grants until it is heard from, and every hold is counted
    /// again from `now`. Its waits for progress and for each revocation resume with
    /// what they had counted when their snapshot was taken (they are judged once the
    /// member is heard), so restarts and takeovers never start them over; a group that
    /// carried such a wait over is snapshotted again at once, with the restore counted.
    ///
    /// A group this core already holds is kept as it is: its snapshot and offsets in
    /// `state` are older than what the core knows.
    pub fn restore(&mut self, now: Instant, state: RestoredState) {
        let first = self.now.is_none();
        if self.tick(now) {
            self.detect_pause(now);
        }
        if first {
            // A restart is not a silence of the server's.
            self.guards.heard(now);
        }
        self.generation_floor = self.generation_floor.max(state.generation_floor);
        for (group, floor) in state.floors {
            let own = self.floors.entry(group).or_default();
            *own = (*own).max(floor);
        }
        let held: HashSet<String> = state
            .groups
            .iter()
            .map(|g| &g.group)
            .chain(state.offsets.iter().map(|o| &o.group))
            .filter(|name| self.groups.contains_key(name.as_str()))
            .cloned()
            .collect();
        let floors = std::mem::take(&mut self.floors);
        let everyone = self.generation_floor;
        let floor_of = |name: &str| everyone.max(floors.get(name).copied().unwrap_or(0));
        let mut restored: Vec<Arc<str>> = Vec::new();
        let (groups, mut ctx) = self.parts(now);
        let config = ctx.config;
        for snapshot in state.groups {
            if held.contains(&snapshot.group) {
                continue;
            }
            let (mut group, carried) = Group::restore(&mut ctx, snapshot);
            // The waits it carried over are written again with this restore counted.
            group.snapshot_dirty |= carried;
            restored.push(group.name.clone());
            groups.insert(group.name.clone(), group);
        }
        for o in state.offsets {
            if held.contains(&o.group) {
                continue;
            }
            let group = groups
                .entry(Arc::from(o.group.as_str()))
                .or_insert_with_key(|name| {
                    restored.push(name.clone());
                    Group::new(name.clone(), floor_of(name), config)
                });
            group.put_offset(o.topic, o.partition, o.offset, o.metadata);
        }
        self.floors = floors;
        // What was durable is kept whatever the quotas say now; they only refuse more.
        for name in restored {
            self.note_dirty(&name);
        }
    }

    /// Hands back every group `release` accepts (a shard that moves to another owner):
    /// each one that changed since the last [`Self::take_records`] is snapshotted first,
    /// so the next take carries its last state to the store, then it is forgotten, with
    /// its floor. Its members get nothing further from this core: their timers find no
    /// group, and a request about the group finds none. Returns the released groups, in
    /// name order.
    ///
    /// The shell makes the next take durable before the new owner loads the groups
    /// (`Store::load_groups`), and routes their members' requests there from then on.
    pub fn release(&mut self, now: Instant, release: impl Fn(&str) -> bool) -> Vec<Arc<str>> {
        if self.tick(now) {
            self.detect_pause(now);
        }
        let mut names: Vec<Arc<str>> = self
            .groups
            .keys()
            .filter(|name| release(name))
            .cloned()
            .collect();
        names.sort();
        for name in &names {
            if let Some(g) = self.groups.get_mut(name) {
                if g.listed || g.snapshot_dirty {
                    g.listed = false;
                    g.snapshot_dirty = false;
                    let snapshot = g.snapshot(now);
                    self.records.push(Record::Group(snapshot));
                }
            }
            self.remove_group(name);
        }
        self.floors.retain(|name, _| !release(name));
        names
    }

    /// Drops every group `abandon` accepts without writing anything: the shell lost the
    /// right to act for them (a cluster coordinator that could not renew its ownership
    /// in time) and another owner will load them from the store. Nothing is lost: what
    /// the core revealed about a group was durable first, and what was not revealed
    /// may be forgotten. Their members get nothing further from this core. Returns the
    /// dropped groups, in name order.
    pub fn abandon(&mut self, now: Instant, abandon: impl Fn(&str) -> bool) -> Vec<Arc<str>> {
        if self.tick(now) {
            self.detect_pause(now);
        }
        let mut names: Vec<Arc<str>> = self
            .groups
            .keys()
            .filter(|name| abandon(name))
            .cloned()
            .collect();
        names.sort();
        for name in &names {
            self.remove_group(name);
        }
        self.records.retain(|record| !abandon(record.group()));
        self.floors.retain(|name, _| !abandon(name));
        names
    }

    /// Handles one request from connection `conn`: returns its response and what else it
    /// did ([`Effects`]).
    ///
    /// `ApiVersions` and `Authenticate` are the connection's business and are refused
    /// here.
    pub fn handle_request(&mut self, now: Instant, conn: ConnId, request: Request) -> Effects {
        self.handle_request_as(now, conn, request, Authority::Operator)
    }

    /// As [`Self::handle_request`], for a connection whose identity has `authority`
    /// over the operator's requests (Drain, AlterGroupConfig) of the request's group:
    /// the shell's access rules decide it; every other request is the same.
    pub fn handle_request_as(
        &mut self,
        now: Instant,
        conn: ConnId,
        request: Request,
        authority: Authority,
    ) -> Effects {
        // A pause must be seen before the frames read on waking are judged (their
        // silence was the coordinator's), whether or not the timers ran first.
        if self.tick(now) {
            self.detect_pause(now);
        }
        if is_member_traffic(&request) {
            self.member_heard(now);
        }
        self.changed = false;
        let records = self.records.len();
        let mut joined = None;
        let response = match request {
            Request::ApiVersions(_) => refuse(
                ApiKey::ApiVersions,
                ErrorCode::InvalidRequest,
                "ApiVersions is answered by the connection, not a group",
            ),
            Request::Authenticate(_) => refuse(
                ApiKey::Authenticate,
                ErrorCode::InvalidRequest,
                "Authenticate is answered by the connection, not a group",
            ),
            Request::FindCoordinator(_) => refuse(
                ApiKey::FindCoordinator,
                ErrorCode::InvalidRequest,
                "FindCoordinator is answered by the connection, not a group",
            ),
            Request::ListCoordinators(_) => refuse(
                ApiKey::ListCoordinators,
                ErrorCode::InvalidRequest,
                "ListCoordinators is answered by the connection, not a group",
            ),
            Request::Join(r) => {
                let group = r.group.clone();
                let existed = self.groups.contains_key(group.as_str());
                let response = self.join(now, conn, r);
                if let Response::Join(j) = &response {
                    self.bind(conn, &group, &j.member_id);
                    joined = Some((group.clone(), j.member_id.clone()));
                } else if !existed {
                    self.forget_unused(&group);
                }
                self.note_dirty(&group);
                response
            }
            Request::Heartbeat(r) => self.heartbeat(now, conn, r),
            Request::Heartbeats(r) => self.heartbeats(now, conn, r),
            Request::TraceGroup(r) => self.trace(now, r),
            Request::Leave(r) => {
                let group = r.group.clone();
                let response = self.leave(now, conn, r);
                self.note_dirty(&group);
                response
            }
            Request::CommitOffsets(r) => {
                // A commit can bring back a member that stood down, or rebind it.
                let group = r.group.clone();
                let existed = self.groups.contains_key(group.as_str());
                let response = self.commit(now, conn, r);
                if !existed {
                    self.forget_unused(&group);
                }
                self.note_dirty(&group);
                response
            }
            Request::FetchOffsets(r) => self.fetch(r),
            Request::ListGroups(r) => self.list_groups(r.page.as_ref()),
            Request::DescribeGroup(r) => self.describe(
                now,
                &r.group,
                r.detection,
                r.page.as_ref(),
                r.summary,
                r.operator,
            ),
            Request::Relinquish(r) => {
                let group = r.group.clone();
                let response = self.relinquish(now, r);
                self.note_dirty(&group);
                response
            }
            Request::Drain(r) => self.drain(now, conn, r, authority),
            Request::AlterGroupConfig(r) => self.alter_group_config(now, r, authority),
        };
        Effects {
            response,
            wrote: self.changed || self.records.len() > records,
            joined,
        }
    }

    /// Runs the timers due at or before `now`, in order, until they are all run or a
    /// slice of work is done (about [`TIMER_SLICE`] partitions' and members' worth, or
    /// one rebalance of a larger group): [`Self::poll_timeout`] then still returns an
    /// instant at or before `now`, and the shell calls again, taking requests in
    /// between. So one call never holds a shard for much longer than the largest
    /// group's rebalance, however many rebalances are due at once.
    ///
    /// If `now` is far past the earliest deadline the core asked to be woken for (more
    /// than a quarter of the shortest session timeout, capped at
    /// [`CoreConfig::pause_guard`]), the coordinator itself was not running: every
    /// member's deadlines are shifted by the delay first, and nobody is expelled for
    /// silence for one more `pause_guard`, so that frames queued during the pause are
    /// read before anyone is judged (see [`guards`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        // Once per instant: a request at this instant already looked for a pause.
        if self.tick(now) {
            self.detect_pause(now);
        }
        let mut disposable = Vec::new();
        let mut work: u64 = 0;
        while work < TIMER_SLICE {
            let Some((at, key)) = self.timers.pop_due(now) else {
                break;
            };
            match key {
                TimerKey::Member { group, member } => {
                    work += MEMBER_TIMER_WORK;
                    let hold = self.expiry_hold(now, &group, &member);
                    let (groups, mut ctx) = self.parts(now);
                    if let Some(g) = groups.get_mut(&group) {
                        g.on_member_timer(&mut ctx, &member, at, hold);
                        if g.is_disposable() {
                            disposable.push(group.clone());
                        }
                    }
                    self.note_dirty(&group);
                }
                TimerKey::Group(group) => {
                    let (groups, mut ctx) = self.parts(now);
                    if let Some(g) = groups.get_mut(&group) {
                        // A rebalance and a reconciliation cost about one step per
                        // partition and per member.
                        work += 1 + g.footprint + g.members.len() as u64;
                        g.on_group_timer(&mut ctx, at);
                        if g.is_disposable() {
                            disposable.push(group.clone());
                        }
                    }
                    self.note_dirty(&group);
                }
            }
        }
        for name in disposable {
            self.dispose_if_unused(now, &name);
        }
    }

    /// Forgets a group that has no members, offsets or held partitions, after writing
    /// its final (empty) snapshot.
    fn dispose_if_unused(&mut self, now: Instant, name: &str) {
        if let Some(g) = self.groups.get(name) {
            if g.is_disposable() {
                let snapshot = g.snapshot(now);
                self.generation_floor = self.generation_floor.max(g.generation);
                self.records.push(Record::Group(snapshot));
                self.remove_group(name);
            }
        }
    }

    /// Forgets a group that the request now handled created and then refused: it holds
    /// nothing and was never recorded, so nothing is written either.
    fn forget_unused(&mut self, name: &str) {
        if self.groups.get(name).is_some_and(Group::is_disposable) {
            self.remove_group(name);
        }
    }

    /// Takes a group out of the table and its usage out of the totals.
    fn remove_group(&mut self, name: &str) -> Option<Group> {
        let group = self.groups.remove(name)?;
        self.totals.replace(group.accounted, Usage::default());
        Some(group)
    }

    /// Brings the totals up to date with what `name` holds now. Past the coordinator's
    /// removal memory (as many removals as `max_members`), the group forgets its oldest
    /// removals first.
    fn account(&mut self, name: &str) {
        if let Some(g) = self.groups.get_mut(name) {
            let now = g.usage();
            if now == g.accounted {
                return;
            }
            let others = self.totals.removals().saturating_sub(g.accounted.removals);
            let excess = (others + now.removals).saturating_sub(self.config.max_members);
            if excess > 0 && now.removals > g.accounted.removals {
                g.forget_oldest_removals(excess);
            }
            let now = g.usage();
            self.totals.replace(g.accounted, now);
            g.accounted = now;
        }
    }

    /// What every group but `name` holds, as the quotas count it.
    fn usage_besides(&self, name: &str) -> Usage {
        let mut usage = self.totals.get();
        if let Some(g) = self.groups.get(name) {
            usage.sub(g.accounted);
        }
        usage
    }

    /// The totals this core counts its groups into.
    pub fn totals(&self) -> &Arc<Totals> {
        &self.totals
    }

    /// When the core next needs [`Self::handle_timeout`], if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek()
    }

    /// The next output, if any.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Takes every record produced since the last call. The shell must make them
    /// durable before it sends the responses and pushes of the same inputs.
    ///
    /// Each changed group is snapshotted once per call however many inputs changed it,
    /// so a shell that calls this once per batch of inputs writes each group once.
    #[must_use]
    pub fn take_records(&mut self) -> Vec<Record> {
        let mut names = std::mem::take(&mut self.dirty);
        names.sort();
        for name in names {
            let Some(now) = self.now else { break };
            if let Some(g) = self.groups.get_mut(&name) {
                if g.listed {
                    g.listed = false;
                    // Changed again since it was listed, without being noted: this
                    // snapshot holds that too.
                    g.snapshot_dirty = false;
                    let snapshot = g.take_snapshot(now);
                    self.records.push(Record::Group(snapshot));
                }
            }
        }
        self.unflushed.clear();
        self.records_seen = 0;
        std::mem::take(&mut self.records)
    }

    /// Whether [`Self::take_records`] has anything to return: the shell's writer has
    /// something to make durable.
    pub fn has_records(&self) -> bool {
        !self.records.is_empty() || !self.dirty.is_empty()
    }

    /// Whether `group` changed in a way not yet handed out by [`Self::take_records`]:
    /// an answer about it, or a push to one of its members, would reveal state that is
    /// not durable yet. A shell may send what a request on a group that is not unflushed
    /// produced at once, without waiting for durability (nothing about it is pending).
    pub fn is_unflushed(&mut self, group: &str) -> bool {
        for record in &self.records[self.records_seen..] {
            if !self.unflushed.contains(record.group()) {
                self.unflushed.insert(record.group().to_owned());
            }
        }
        self.records_seen = self.records.len();
        (!self.unflushed.is_empty() && self.unflushed.contains(group))
            || (!self.dirty.is_empty() && self.groups.get(group).is_some_and(|g| g.listed))
    }

    /// Puts `group` on the list of groups to snapshot if its state changed, and brings
    /// the quotas' totals up to date with it.
    ///
    /// The change is taken into the list (the group's flag is cleared, and it stays
    /// listed until the next take), so a flag found set here was set by the input being
    /// handled: that is how [`Effects::wrote`] knows.
    fn note_dirty(&mut self, group: &str) {
        self.account(group);
        if let Some(g) = self.groups.get_mut(group) {
            if g.snapshot_dirty {
                g.snapshot_dirty = false;
                self.changed = true;
                if !g.listed {
                    g.listed = true;
                    self.dirty.push(g.name.clone());
                }
            }
        }
    }
}
