//! One group: its members, their two clocks, the target assignment and its reconciliation.
//!
//! This file holds the group's state; `member.rs` one member and its clocks,
//! `members.rs` adds, removes and replaces members and runs their timers, `topics.rs`
//! the topic table, `instances.rs` the static instances and their fencing,
//! `rebalance.rs` computes targets and reconciles ownership toward them, `steering.rs`
//! gives the assignor the racks and loads and weighs load reports, `throttle.rs` caps
//! revocations, `persist.rs` describes and snapshots the group.

mod config;
mod instances;
mod member;
mod members;
mod partition_set;
mod persist;
mod rebalance;
mod roster;
mod steering;
mod throttle;
mod topics;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::{ExpelReason, GroupState, Push};

use super::assignor::TopicPartition;
use super::liveness::{Detector, DetectorKind, Fleet};
use super::timers::Timers;
use super::{Assignor, ConnId, CoreConfig, Event, Output, Quota, RebalanceCause};
use roster::Roster;

pub(crate) use self::config::Placement;
pub use self::config::{Balance, GroupConfig};
pub(crate) use self::instances::Instance;
#[cfg(test)]
pub(crate) use self::member::RENEWAL_LINES;
pub(crate) use self::member::{Expiry, Member, Timeouts};
pub(crate) use self::partition_set::PartitionSet;
pub(crate) use self::topics::Topic;

/// What a group method needs from the coordinator around it.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Instant,
    pub(crate) config: &'a CoreConfig,
    pub(crate) assignor: &'a dyn Assignor,
    pub(crate) timers: &'a mut Timers,
    pub(crate) outputs: &'a mut VecDeque<Output>,
    pub(crate) records: &'a mut Vec<super::Record>,
}

impl Ctx<'_> {
    fn push(&mut self, conn: Option<ConnId>, push: Push) {
        if let Some(conn) = conn {
            self.outputs.push_back(Output::Push { conn, push });
        }
    }

    pub(crate) fn event(&mut self, event: Event) {
        self.outputs.push_back(Output::Event(event));
    }
}

/// Partitions of a removed (or replaced) member, held until its lease has run out or
/// its process confirms that it stopped acting on them (Relinquish).
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) until: Instant,
    /// The member they were taken from.
    pub(crate) member: Arc<str>,
    pub(crate) partitions: Vec<TopicPartition>,
    /// A reservation (a departure delay): the partitions of a static member that went
    /// away without leaving, kept for its instance, named here, to come back to. They
    /// are granted to nobody until it does or `until` passes; a hold of a member's lease
    /// has none.
    pub(crate) reserved_for: Option<Box<str>>,
}

/// Why a join was refused, before anything changed.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) code: rollcall_protocol::ErrorCode,
    pub(crate) message: String,
    /// The quota the join would have taken past its limit, if that is why.
    pub(crate) quota: Option<Quota>,
}

/// What a group holds that the core's quotas count (see [`CoreConfig`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// One for a group.
    pub(crate) groups: usize,
    /// Its members, or the static instances it remembers if those are more.
    pub(crate) members: usize,
    /// Its partitions, counted as the partition limits count them: every partition of a
    /// topic some member subscribes to, and one for each topic no member subscribes to
    /// any more (the topic table keeps it).
    pub(crate) partitions: u64,
    /// Committed offsets.
    pub(crate) offsets: usize,
    /// Bytes of commit metadata.
    pub(crate) metadata_bytes: usize,
    /// Removed members it remembers (to answer them with the reason).
    pub(crate) removals: usize,
}

impl Usage {
    pub(crate) fn sub(&mut self, other: Self) {
        self.groups = self.groups.saturating_sub(other.groups);
        self.members = self.members.saturating_sub(other.members);
        self.partitions = self.partitions.saturating_sub(other.partitions);
        self.offsets = self.offsets.saturating_sub(other.offsets);
        self.metadata_bytes = self.metadata_bytes.saturating_sub(other.metadata_bytes);
        self.removals = self.removals.saturating_sub(other.removals);
    }
}

#[derive(Debug)]
struct PendingRebalance {
    pub(crate) first: Instant,
    pub(crate) due: Instant,
    pub(crate) cause: RebalanceCause,
}

#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) name: Arc<str>,
    /// Judges the members' silence.
    pub(crate) detector: Box<dyn Detector>,
    /// Judges it too, in shadow: counted and reported, never acted on.
    pub(crate) shadow: Option<Box<dyn Detector>>,
    /// What its members have shown together of their long gaps (in memory only: a
    /// restart starts it over).
    pub(crate) fleet: Fleet,
    pub(crate) generation: u32,
    /// What the operator set (AlterGroupConfig); the default for a group nobody
    /// configured.
    pub(crate) config: GroupConfig,
    /// Drained member ids, and the instance ids of drained static members (a new
    /// incarnation of the instance is drained too). Durable.
    pub(crate) drained_members: BTreeSet<Box<str>>,
    /// Drained labels: a member with one is drained, however late it joins. Durable.
    pub(crate) drained_labels: BTreeSet<Box<str>>,
    /// The last load each partition's owner reported (not durable; a partition keeps
    /// its load when it moves).
    pub(crate) loads: HashMap<TopicPartition, f64>,
    pub(crate) topics: Vec<Topic>,
    pub(crate) topic_index: HashMap<String, u32>,
    pub(crate) members: Roster,
    /// Its heartbeat arrivals while a client reads them (never in snapshots).
    pub(crate) trace: Option<Box<super::trace::Trace>>,
    /// Every static instance that ever joined, with its latest incarnation.
    pub(crate) instances: HashMap<String, Instance>,
    pub(crate) tokens: HashMap<u64, Arc<str>>,
    /// Every granted partition, with the member generation in which its owner was
    /// granted it (0: owned since before a restart or a takeover, when no frame about
    /// an earlier ownership can still arrive). A member can own a partition, release
    /// it and get it back; an acknowledgement or a commit that carries an earlier
    /// generation than the grant was sent during the earlier ownership (delayed on a
    /// connection the member has since left) and must not act on this one.
    pub(crate) owners: HashMap<TopicPartition, u32>,
    /// Which member the current target assigns each partition to, so a released
    /// partition is granted onward without scanning every member.
    target_owner: HashMap<TopicPartition, Arc<str>>,
    /// Partitions of removed (or replaced) members, held until the member's lease has
    /// run out, so that it stood down before anyone else gets them.
    pub(crate) held: Vec<Held>,
    /// Revocations in progress and waiting, when the config caps them.
    throttle: Option<Box<throttle::Throttle>>,
    /// When a load report may next be weighed against the balance (made when load
    /// balance first weighs one).
    load_check: Option<Box<steering::LoadCheck>>,
    /// While partitions are reserved, when the group is next snapshotted so that a
    /// restart (which counts a reservation's remaining time from the last snapshot)
    /// extends it by at most this interval.
    reservation_checkpoint: Option<Instant>,
    /// Recently removed members and why, oldest first.
    pub(crate) removed: HashMap<Arc<str>, ExpelReason>,
    removed_order: VecDeque<Arc<str>>,
    /// Removed members expelled for silence that have beaten since (proven false
    /// expulsions), so that each is counted once.
    disproved: HashSet<Arc<str>>,
    /// Committed offsets by (topic name, partition).
    pub(crate) offsets: BTreeMap<(String, u32), (i64, String)>,
    /// Bytes of metadata in `offsets`.
    pub(crate) metadata_bytes: usize,
    /// The partitions the group's topic table counts (see [`Usage::partitions`]), kept
    /// as subscriptions change.
    pub(crate) footprint: u64,
    /// The usage last added to the coordinator's totals.
    pub(crate) accounted: Usage,
    pending: Option<PendingRebalance>,
    /// Since when, and for which generation, the group has been reconciling.
    reconciling: Option<(Instant, u32)>,
    pub(crate) timer_at: Option<Instant>,
    /// State changed since the last snapshot record.
    pub(crate) snapshot_dirty: bool,
    /// When this coordinator last accepted a commit for the group (none since a
    /// restore): offsets retention, judged by the store from what is durable, may have
    /// decided the group expired just before it.
    pub(crate) committed_at: Option<Instant>,
    /// The group is on the coordinator's list of groups to snapshot.
    pub(crate) listed: bool,
}

impl Group {
    /// Loads the fields a heartbeat reads (see `Coordinator::touch_members`).
    pub(crate) fn touch(&self) {
        std::hint::black_box((
            self.generation,
            self.members.len(),
            self.trace.is_some(),
            self.shadow.is_some(),
            &*self.detector as *const dyn Detector,
        ));
    }

    /// A new group whose first generation will be above `generation_floor`, judging its
    /// members with the detectors `config` names.
    pub(crate) fn new(name: Arc<str>, generation_floor: u32, config: &CoreConfig) -> Self {
        let settings = &config.detector_settings;
        Self {
            name,
            detector: config.detector.build(settings),
            shadow: config
                .shadow_detector
                .filter(|s| *s != config.detector)
                .map(|s| s.build(settings)),
            fleet: Fleet::default(),
            generation: generation_floor,
            config: GroupConfig::default(),
            drained_members: BTreeSet::new(),
            drained_labels: BTreeSet::new(),
            loads: HashMap::new(),
            topics: Vec::new(),
            topic_index: HashMap::new(),
            members: Roster::default(),
            trace: None,
            instances: HashMap::new(),
            tokens: HashMap::new(),
            owners: HashMap::new(),
            target_owner: HashMap::new(),
            held: Vec::new(),
            throttle: None,
            load_check: None,
            reservation_checkpoint: None,
            removed: HashMap::new(),
            removed_order: VecDeque::new(),
            disproved: HashSet::new(),
            offsets: BTreeMap::new(),
            metadata_bytes: 0,
            footprint: 0,
            accounted: Usage::default(),
            pending: None,
            reconciling: None,
            timer_at: None,
            snapshot_dirty: false,
            committed_at: None,
            listed: false,
        }
    }

    /// Judges the members' silence with `kind` from now on (the shadow, if the
    /// coordinator runs one, stays unless it is the same kind).
    pub(crate) fn set_detector(&mut self, kind: DetectorKind, config: &CoreConfig) {
        if self.detector.kind() == kind {
            return;
        }
        self.detector = kind.build(&config.detector_settings);
        self.shadow = config
            .shadow_detector
            .filter(|s| *s != kind)
            .map(|s| s.build(&config.detector_settings));
        self.snapshot_dirty = true;
    }

    pub(crate) fn state(&self) -> GroupState {
        if self.members.is_empty() {
            GroupState::Empty
        } else if self.pending.is_some() || self.reconciling.is_some() {
            GroupState::Reconciling
        } else {
            GroupState::Stable
        }
    }

    /// A group with no members, no offsets, nothing held and no static instances to
    /// fence can be forgotten (its generation lives on in the coordinator's floor).
    pub(crate) fn is_disposable(&self) -> bool {
        // Drained member ids of members that are gone mean nothing (and a drained
        // static instance is among `instances`).
        self.members.is_empty()
            && self.config.is_default()
            && self.drained_labels.is_empty()
            && self.offsets.is_empty()
            && self.held.is_empty()
            && self.instances.is_empty()
            && self.pending.is_none()
    }

    /// What the group holds, as the quotas count it.
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            groups: 1,
            members: self.members.len().max(self.instances.len()),
            partitions: self.footprint,
            offsets: self.offsets.len(),
            metadata_bytes: self.metadata_bytes,
            removals: self.removed.len(),
        }
    }

    /// Forgets up to `n` of the oldest removals the group remembers.
    pub(crate) fn forget_oldest_removals(&mut self, n: usize) {
        for _ in 0..n {
            match self.removed_order.pop_front() {
                Some(old) => {
                    self.removed.remove(&old);
                    self.disproved.remove(&old);
                }
                None => return,
            }
        }
    }

    /// Keeps `(offset, metadata)` for `(topic, partition)`, counting its metadata.
    pub(crate) fn put_offset(
        &mut self,
        topic: String,
        partition: u32,
        offset: i64,
        metadata: String,
    ) {
        self.metadata_bytes += metadata.len();
        if let Some((_, old)) = self.offsets.insert((topic, partition), (offset, metadata)) {
            self.metadata_bytes -= old.len();
        }
    }

    /// Whether a frame carrying member generation `generation` is about the current
    /// ownership of `tp`: the partition is owned, and was granted no later than that
    /// generation (see `owners`). Acknowledgements and commits both ask.
    pub(crate) fn granted_by(&self, tp: &TopicPartition, generation: u32) -> bool {
        self.owners
            .get(tp)
            .is_some_and(|&since| since <= generation)
    }
}

pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
