//! One group: its members, their two clocks, the target assignment and its reconciliation.
//!
//! This file holds the state and the topic table; `members.rs` adds, removes and
//! replaces members and runs their timers, `rebalance.rs` computes targets and
//! reconciles ownership toward them, `persist.rs` describes and snapshots the group.

mod members;
mod partition_set;
mod persist;
mod rebalance;
mod roster;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::{ExpelReason, GroupState, Push, TopicPartitions};

use super::assignor::TopicPartition;
use super::liveness::{Detector, DetectorKind, Watch};
use super::timers::Timers;
use super::{Assignor, ConnId, CoreConfig, Event, Output, Quota, RebalanceCause};
use roster::Roster;

pub(crate) use self::partition_set::PartitionSet;

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

    fn event(&mut self, event: Event) {
        self.outputs.push_back(Output::Event(event));
    }
}

#[derive(Debug)]
pub(crate) struct Topic {
    pub(crate) name: String,
    pub(crate) partitions: u32,
    /// Members subscribing to it; a topic with none is no longer part of the work.
    pub(crate) subscribers: u32,
}

/// The timeouts a member asked for at join (and may change by rejoining), in whole
/// milliseconds as the join gives them: 16 bytes where four `Duration`s take 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// Silence longer than this expels the member.
    pub(crate) session_ms: u32,
    /// A progress counter stuck this long expels the member.
    pub(crate) progress_ms: u32,
    /// A revocation unacknowledged this long expels the member.
    pub(crate) rebalance_ms: u32,
    /// How long after a frame from the member it may still be acting on its partitions
    /// (at most `session`): the partitions of a member expelled, or whose connection
    /// closed, are granted that long after its last frame.
    pub(crate) lease_ms: u32,
}

impl Timeouts {
    pub(crate) fn session(self) -> Duration {
        Duration::from_millis(u64::from(self.session_ms))
    }

    pub(crate) fn progress(self) -> Duration {
        Duration::from_millis(u64::from(self.progress_ms))
    }

    pub(crate) fn rebalance(self) -> Duration {
        Duration::from_millis(u64::from(self.rebalance_ms))
    }

    pub(crate) fn lease(self) -> Duration {
        Duration::from_millis(u64::from(self.lease_ms))
    }
}

/// One member of a group.
///
/// Laid out for the renewal, the coordinator's most frequent work: a member's lines
/// are rarely in cache when its heartbeat arrives (every member of the shard is
/// touched once per heartbeat interval), so a renewal costs about one wait for memory
/// per line it touches. The fields a renewal reads or writes come first, `liveness`
/// last among them with its own hot fields first, so that they fill the first
/// five cache lines (`RENEWAL_LINES`) of a 64-byte-aligned member, and the rest (ids,
/// partition sets, what only a rebalance or a timer reads) follow. Rust lays out a
/// struct as it likes, which spread a renewal over 7 of the 8 lines of a member, hence
/// `repr(C)`; `renewal_fields_fill_the_first_lines` checks the layout.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Member {
    // What a renewal touches.
    pub(crate) conn: Option<ConnId>,
    pub(crate) timeouts: Timeouts,
    pub(crate) progress: u64,
    /// Generation of the member's current assignment.
    pub(crate) generation: u32,
    /// The member's process stood down and has not been heard since.
    pub(crate) stood_down: bool,
    /// The member's connection closed (its process most likely crashed: a crashed
    /// process closes its sockets) and it has not been heard on another since: it is
    /// expelled when its lease runs out instead of at its session deadline.
    pub(crate) conn_closed: bool,
    /// Restored from a snapshot and not heard from since: it may have died around the
    /// restart, so it is granted nothing new until it is heard (it keeps its session).
    pub(crate) unheard: bool,
    /// The last target computed while the member was suspect left out partitions it
    /// would otherwise have been given: it gets a rebalance when it recovers.
    pub(crate) restricted: bool,
    /// The latest instant the member's own lease can run to: every answer the
    /// coordinator sends promises the member its lease timeout from the moment the
    /// member sent the request, which is never later than the moment it was received.
    /// Only ever moves later, except when the member stands down (it then ends now).
    /// Partitions of a removed member are held until then.
    pub(crate) lease_until: Instant,
    /// When a frame from the member last arrived. Unlike the liveness policy's view,
    /// never shifted by a guard: the guards judge real silence by it.
    pub(crate) heard_at: Instant,
    /// The slot the expulsion rate limit reserved for the member's expiry.
    pub(crate) expel_slot: Option<Instant>,
    pub(crate) timer_at: Option<Instant>,
    pub(crate) progress_deadline: Instant,
    pub(crate) last_progress_at: Instant,
    /// The partitions the member is asked to release, in order, each with when it was
    /// first asked (shifted by the coordinator's own pauses and by what isolations gave
    /// back); empty when it releases nothing. Each revocation has its own rebalance
    /// timeout: the oldest one still unanswered decides when the member is expelled
    /// ([`Self::revoke_deadline`]).
    pub(crate) revoking_since: Box<[Revocation]>,
    /// Its hot fields first, its cold ones last (see [`Watch`]).
    pub(crate) liveness: Watch,
    // What a renewal does not touch.
    pub(crate) id: Arc<str>,
    pub(crate) instance_id: Option<Box<str>>,
    pub(crate) client_id: Box<str>,
    pub(crate) join_token: u64,
    /// Topic indexes, ascending.
    pub(crate) subscription: Box<[u32]>,
    /// Partitions granted to the member and not yet released.
    pub(crate) owned: PartitionSet,
    /// What the last rebalance wants the member to own.
    pub(crate) target: PartitionSet,
    /// The revoke set last pushed, to push again only when it changes.
    pub(crate) revoke_pushed: Box<[TopicPartition]>,
    /// Partitions the member released, to tell a late commit "revoked" from "not owner".
    pub(crate) released: PartitionSet,
    /// The assignment changed since it was last pushed.
    pub(crate) assignment_dirty: bool,
    /// What isolations have given back to the current wait for progress, in all: at
    /// most one expel threshold (whole milliseconds, rounded up, so that the field
    /// takes padding and a member still fits 512 bytes).
    pub(crate) progress_credit_ms: u32,
    /// The progress counter the wait `progress_credit_ms` belongs to began at: progress
    /// that moves the counter starts a new wait with nothing given back, without a write
    /// on the heartbeat path.
    pub(crate) progress_credit_at: u64,
}

/// Cache lines of a [`Member`] that a renewal touches (see its layout).
#[cfg(test)]
pub(crate) const RENEWAL_LINES: usize = 5;

impl Member {
    pub(crate) fn session_timeout(&self) -> Duration {
        self.timeouts.session()
    }

    pub(crate) fn progress_timeout(&self) -> Duration {
        self.timeouts.progress()
    }

    pub(crate) fn rebalance_timeout(&self) -> Duration {
        self.timeouts.rebalance()
    }

    pub(crate) fn lease_timeout(&self) -> Duration {
        self.timeouts.lease()
    }

    /// The silence that expels the member: its session timeout under the fixed rule,
    /// what the adaptive detector learned (at most the session timeout) under the
    /// other. The guards scale by it: a pause, an isolation and how long they hold a
    /// member are measured against what would expel it, not against a session timeout
    /// its detector may never let it reach.
    pub(crate) fn expel_after(&self) -> Duration {
        self.liveness.thresholds().expel_after
    }

    /// Loads a field from each of the five cache lines a renewal touches,
    /// ahead of the renewal (see `Coordinator::touch_members`).
    pub(crate) fn touch(&self) {
        std::hint::black_box((self.conn, self.heard_at, self.liveness.touch()));
    }

    pub(crate) fn session_deadline(&self) -> Instant {
        self.liveness.deadline()
    }

    /// Whether a deadline that expels the member has passed at `now`: its session
    /// (silence), its progress, or its oldest unanswered revocation.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.session_deadline() <= now
            || self.progress_deadline <= now
            || self.revoke_deadline().is_some_and(|r| r <= now)
    }

    /// Of the member's deadlines that have passed at `now` (silence, its lease after its
    /// connection closed, progress, its oldest unanswered revocation), the one that
    /// passed first, and when; at the same instant in that order. A guard may hold a
    /// member past one deadline until another passes too: the expulsion names the one
    /// the member failed first, not whichever is looked at first.
    pub(crate) fn expiry(&self, now: Instant) -> Option<(Expiry, Instant)> {
        [
            (Expiry::Silence, Some(self.session_deadline())),
            (Expiry::Closed, self.conn_closed.then_some(self.lease_until)),
            (Expiry::Progress, Some(self.progress_deadline)),
            (Expiry::Revocation, self.revoke_deadline()),
        ]
        .into_iter()
        .filter_map(|(expiry, deadline)| Some((expiry, deadline.filter(|&d| d <= now)?)))
        .min_by_key(|&(_, deadline)| deadline)
    }

    pub(crate) fn next_deadline(&self) -> Instant {
        let mut next = self.session_deadline().min(self.progress_deadline);
        if let Some(s) = self.liveness.suspect_at() {
            next = next.min(s);
        }
        if let Some(r) = self.revoke_deadline() {
            next = next.min(r);
        }
        if self.conn_closed {
            next = next.min(self.lease_until);
        }
        next
    }

    /// Any frame from the member renews its session (and, with the answer, its lease).
    /// Returns whether it had stood down: the snapshot must say it no longer has.
    #[must_use]
    pub(crate) fn heard(&mut self, now: Instant) -> bool {
        self.renew_session(now);
        self.lease_until = self.lease_until.max(now + self.lease_timeout());
        std::mem::take(&mut self.stood_down)
    }

    /// The member's session runs from `now` (its lease is another matter: see
    /// [`Self::heard`]).
    pub(crate) fn renew_session(&mut self, now: Instant) {
        self.liveness.heard(now);
        self.heard_at = self.heard_at.max(now);
        self.expel_slot = None;
    }

    /// The member now talks over `conn` (a join, or a request on a new connection).
    /// Returns whether it was waiting to be heard (its connection had closed, or it was
    /// not heard since a restore): it takes grants again, so the caller reconciles.
    #[must_use]
    pub(crate) fn bind(&mut self, conn: ConnId) -> bool {
        self.conn = Some(conn);
        let closed = std::mem::take(&mut self.conn_closed);
        let unheard = std::mem::take(&mut self.unheard);
        closed || unheard
    }

    /// Whether new partitions may be granted to the member at `now`: not while its
    /// process stood down (it is gone until its replacement arrives), its connection is
    /// closed (it is most likely gone, and expelled when its lease runs out), it has not
    /// been heard since a restore, or it is suspect (it keeps what it owns).
    pub(crate) fn takes_grants(&self, now: Instant) -> bool {
        !self.stood_down && !self.conn_closed && !self.unheard && !self.liveness.is_suspect(now)
    }

    /// Applies the timeouts of a rejoin. The session deadline follows the new session
    /// timeout at once; the lease already promised is kept (it only grows), so a shorter
    /// timeout never frees partitions before the member's longer lease ran out. New
    /// session or lease timeouts (so a new heartbeat rhythm) start the member's arrivals
    /// over. Returns whether anything changed.
    pub(crate) fn set_timeouts(
        &mut self,
        timeouts: Timeouts,
        detector: &dyn Detector,
        shadow: Option<&dyn Detector>,
    ) -> bool {
        let old = self.timeouts;
        let changed = timeouts != old;
        self.timeouts = timeouts;
        if (timeouts.session_ms, timeouts.lease_ms) != (old.session_ms, old.lease_ms) {
            self.liveness.reset(timeouts.session(), detector, shadow);
        }
        if timeouts.progress_ms != old.progress_ms {
            // What the guards added (a pause or an isolation the wait overlapped) is the
            // coordinator's, not the member's: it stays with the new timeout.
            let shifted = self
                .progress_deadline
                .saturating_duration_since(self.last_progress_at + old.progress());
            self.progress_deadline = self.last_progress_at + timeouts.progress() + shifted;
        }
        changed
    }

    /// The progress clock renews only when the counter advances.
    pub(crate) fn report_progress(&mut self, now: Instant, progress: u64) {
        if progress > self.progress {
            self.progress = progress;
            self.progress_deadline = now + self.progress_timeout();
            self.last_progress_at = now;
        }
    }

    pub(crate) fn revoking(&self) -> Vec<TopicPartition> {
        self.owned.difference(&self.target).copied().collect()
    }

    /// When the member is expelled for not releasing a partition: a rebalance timeout
    /// (the one it asked for last) after the oldest revocation it has not answered.
    pub(crate) fn revoke_deadline(&self) -> Option<Instant> {
        let oldest = self.revoking_since.iter().map(|r| r.since).min()?;
        Some(oldest + self.rebalance_timeout())
    }

    /// Brings [`Self::revoking_since`] up to what the member is asked to release now: a
    /// partition newly asked is waited for from `now`, one still asked keeps its start
    /// (and what isolations gave it), one released or no longer asked is dropped.
    pub(crate) fn note_revocations(&mut self, now: Instant) {
        let old = &self.revoking_since;
        let kept = |tp: &TopicPartition| match old.binary_search_by(|r| r.tp.cmp(tp)) {
            Ok(i) => old[i],
            Err(_) => Revocation {
                tp: *tp,
                since: now,
                credit: Duration::ZERO,
            },
        };
        let revoking: Box<[Revocation]> = self.owned.difference(&self.target).map(kept).collect();
        self.revoking_since = revoking;
    }

    /// Gives back a silence of `silent_for`, ended by frames at `at`, that the isolation
    /// guard blamed on the coordinator. The session gets up to all of it, but never past
    /// two expel thresholds of real silence (`paused`: the part of the time since the
    /// member's last frame the coordinator was paused, which is not its silence): a
    /// member that died as the silence began is still expelled within that bound. The
    /// progress counter and the acknowledgements travel on the same frames, so the
    /// progress and revocation clocks get back the part of their wait the silence
    /// overlapped (a revocation asked during it waited less),
    /// at most one expel threshold *over all the isolations of the wait*: no more than
    /// the guards may hold them past their deadlines, and a bound in wall time. Given
    /// per isolation, a member that beats but never acknowledges (or never progresses)
    /// kept its partitions for as long as isolations kept coming, whatever its rebalance
    /// (or progress) timeout. The session needs no such cap: its bound is already counted
    /// from the member's last frame.
    pub(crate) fn give_back(&mut self, at: Instant, silent_for: Duration, paused: Duration) {
        let expel_after = self.expel_after();
        let cap = self.heard_at + paused + 2 * expel_after;
        let room = cap.saturating_duration_since(self.session_deadline());
        self.liveness.extend(silent_for.min(room));
        let most = silent_for.min(expel_after);
        let given = if self.progress_credit_at == self.progress {
            Duration::from_millis(u64::from(self.progress_credit_ms))
        } else {
            Duration::ZERO
        };
        let stuck = at.saturating_duration_since(self.last_progress_at);
        let more = most.min(stuck).min(expel_after.saturating_sub(given));
        self.progress_deadline += more;
        let total_ms = (given + more).as_nanos().div_ceil(1_000_000);
        self.progress_credit_ms = u32::try_from(total_ms).unwrap_or(u32::MAX);
        self.progress_credit_at = self.progress;
        for r in &mut self.revoking_since {
            let waited = at.saturating_duration_since(r.since);
            let more = most.min(waited).min(expel_after.saturating_sub(r.credit));
            r.since += more;
            r.credit += more;
        }
    }

    /// The coordinator was paused for `paused` up to `now`: only the part of the
    /// member's silence (and of its wait for progress) that the pause overlaps is not
    /// counted. A member heard in the queued frames read on waking gets nothing.
    ///
    /// Unlike what an isolation gives back, this is not capped: a pause is the
    /// coordinator's own downtime, measured, not inferred, and nothing runs in it (no
    /// expulsion, no grant, no answer a member's work may wait for), so every deadline
    /// and bound of the core counts the time it runs, and moves by the pause. Capped, a
    /// single long pause would expel a member whose revocation push, or the commit answer
    /// its progress waited for, the pause kept from it.
    pub(crate) fn pause_passed(&mut self, now: Instant, paused: Duration) {
        let silent = now.saturating_duration_since(self.heard_at);
        self.liveness.pause_passed(paused.min(silent));
        let stuck = now.saturating_duration_since(self.last_progress_at);
        self.progress_deadline += paused.min(stuck);
        for r in &mut self.revoking_since {
            r.since += paused;
        }
    }
}

/// Which of a member's deadlines expels it ([`Member::expiry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Its session: silence.
    Silence,
    /// Its connection closed and its lease ran out.
    Closed,
    /// Its progress counter did not move for its progress timeout.
    Progress,
    /// It did not acknowledge a revocation within its rebalance timeout.
    Revocation,
}

/// A partition a member is asked to release.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Revocation {
    pub(crate) tp: TopicPartition,
    /// When it was first asked, moved later by the coordinator's pauses and by what
    /// isolations gave back to its wait.
    pub(crate) since: Instant,
    /// What isolations gave back to its wait, in all: at most one expel threshold.
    pub(crate) credit: Duration,
}

/// Partitions of a removed (or replaced) member, held until its lease has run out or
/// its process confirms that it stopped acting on them (Relinquish).
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) until: Instant,
    /// The member they were taken from.
    pub(crate) member: Arc<str>,
    pub(crate) partitions: Vec<TopicPartition>,
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

/// The latest incarnation of a static instance. Kept (and made durable) after that
/// member leaves or is expelled, so that a request naming any older incarnation is
/// fenced, across restarts and however many replacements there were.
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    /// Incarnations of the instance so far; the latest is number `epoch`.
    pub(crate) epoch: u64,
    /// The latest incarnation's member id.
    pub(crate) member_id: Arc<str>,
    /// The latest incarnation's join token.
    pub(crate) token: u64,
    /// Join tokens of the most recent older incarnations, newest last: a join retried
    /// with one of them (its response was lost, and newer processes have joined since)
    /// comes from a superseded process and is fenced.
    pub(crate) fenced_tokens: Vec<u64>,
}

/// How many superseded join tokens each static instance remembers.
pub(crate) const FENCED_TOKENS: usize = 16;

/// The instance id a static member id names: static member ids are
/// `<instance id>#<unique suffix>`, and suffixes never contain `#`.
pub(crate) fn instance_of(member_id: &str) -> Option<&str> {
    member_id.rfind('#').map(|i| &member_id[..i])
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
    pub(crate) generation: u32,
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
    /// Recently removed members and why, oldest first.
    pub(crate) removed: HashMap<Arc<str>, ExpelReason>,
    removed_order: VecDeque<Arc<str>>,
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
            generation: generation_floor,
            topics: Vec::new(),
            topic_index: HashMap::new(),
            members: Roster::default(),
            trace: None,
            instances: HashMap::new(),
            tokens: HashMap::new(),
            owners: HashMap::new(),
            target_owner: HashMap::new(),
            held: Vec::new(),
            removed: HashMap::new(),
            removed_order: VecDeque::new(),
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
        self.members.is_empty()
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

    /// The member that is the current incarnation of `instance`, if it is in the group.
    pub(crate) fn instance_member(&self, instance: &str) -> Option<Arc<str>> {
        self.instances
            .get(instance)
            .filter(|i| self.members.contains_key(&i.member_id))
            .map(|i| i.member_id.clone())
    }

    /// Records a new incarnation of `instance` and returns its epoch.
    pub(crate) fn register_instance(
        &mut self,
        instance: &str,
        member_id: Arc<str>,
        token: u64,
    ) -> u64 {
        let (epoch, mut fenced_tokens) = match self.instances.remove(instance) {
            Some(old) => {
                let mut fenced = old.fenced_tokens;
                fenced.push(old.token);
                let excess = fenced.len().saturating_sub(FENCED_TOKENS);
                fenced.drain(..excess);
                (old.epoch + 1, fenced)
            }
            None => (1, Vec::new()),
        };
        fenced_tokens.retain(|t| *t != token);
        self.instances.insert(
            instance.to_owned(),
            Instance {
                epoch,
                member_id,
                token,
                fenced_tokens,
            },
        );
        self.snapshot_dirty = true;
        epoch
    }

    /// Whether a join for `instance` with `token` retries the join of a superseded
    /// incarnation.
    pub(crate) fn token_fenced(&self, instance: &str, token: u64) -> bool {
        self.instances
            .get(instance)
            .is_some_and(|i| i.fenced_tokens.contains(&token))
    }

    /// Why a member id that is not in the group is gone, if known: a static member id
    /// older than its instance's latest incarnation is fenced, whatever else is known.
    pub(crate) fn gone_reason(&self, member_id: &str) -> Option<ExpelReason> {
        if let Some(latest) = instance_of(member_id).and_then(|i| self.instances.get(i)) {
            if &*latest.member_id != member_id {
                return Some(ExpelReason::Fenced);
            }
        }
        self.removed.get(member_id).copied()
    }

    // ----------------------------------------------------------------------------------
    // Topics
    // ----------------------------------------------------------------------------------

    /// Checks a subscription against the topic table without changing anything: the
    /// partition counts must agree with the topics' other subscribers, and the group's
    /// partitions (see [`Usage::partitions`]) may grow to at most
    /// `max_partitions_per_group`, and to at most `room` (what the coordinator's
    /// partition quota leaves it). `replacing` is the member whose subscription this one
    /// replaces (a rejoin, or a static member's replacement). Returns the group's
    /// partitions once subscribed.
    pub(crate) fn check_subscription(
        &self,
        subscription: &[(String, u32)],
        config: &CoreConfig,
        replacing: Option<&Member>,
        room: u64,
    ) -> Result<u64, Refusal> {
        let mine = |idx: u32| replacing.is_some_and(|m| m.subscription.binary_search(&idx).is_ok());
        let mut after = self.footprint;
        for (name, count) in subscription {
            let count = u64::from(*count);
            match self.topic_index.get(name) {
                Some(&idx) => {
                    let topic = &self.topics[idx as usize];
                    let others = topic.subscribers.saturating_sub(u32::from(mine(idx)));
                    if others > 0 && u64::from(topic.partitions) != count {
                        return Err(Refusal {
                            code: rollcall_protocol::ErrorCode::InconsistentSubscription,
                            message: format!(
                                "topic {name:?} has {} partitions in group {:?}, the join declares {count}",
                                topic.partitions, &*self.name
                            ),
                            quota: None,
                        });
                    }
                    if others == 0 {
                        // Counted now as one (no subscriber) or as its partitions (only
                        // the replaced member's); counted as `count` once subscribed.
                        after = after - Self::charge(topic) + count;
                    }
                }
                None => after += count,
            }
        }
        // Topics only the replaced member subscribes to, and this subscription does not
        // name, fall to one each.
        if let Some(m) = replacing {
            for &idx in &m.subscription {
                let topic = &self.topics[idx as usize];
                if topic.subscribers == 1 && !subscription.iter().any(|(n, _)| *n == topic.name) {
                    after = after - Self::charge(topic) + 1;
                }
            }
        }
        if after > self.footprint {
            let max = u64::from(config.max_partitions_per_group);
            if after > max {
                return Err(Refusal {
                    code: rollcall_protocol::ErrorCode::TooManyPartitions,
                    message: format!(
                        "group {:?} would have {after} partitions, more than the maximum of {max}{}",
                        &*self.name,
                        if self.topics.iter().any(|t| t.subscribers == 0) {
                            " (a topic no member subscribes to any more counts as one)"
                        } else {
                            ""
                        }
                    ),
                    quota: Some(Quota::GroupPartitions),
                });
            }
            if after > room {
                return Err(Refusal {
                    code: rollcall_protocol::ErrorCode::TooManyPartitions,
                    message: format!(
                        "the coordinator has its maximum of {} partitions over all groups; group {:?} would need {} more",
                        config.max_partitions,
                        &*self.name,
                        after - self.footprint
                    ),
                    quota: Some(Quota::Partitions),
                });
            }
        }
        Ok(after)
    }

    /// What a topic adds to the group's partitions: its partitions while a member
    /// subscribes to it, one otherwise.
    fn charge(topic: &Topic) -> u64 {
        if topic.subscribers > 0 {
            u64::from(topic.partitions)
        } else {
            1
        }
    }

    /// Counts the group's partitions from its topic table (after a restore).
    pub(crate) fn recount_footprint(&mut self) {
        self.footprint = self.topics.iter().map(Self::charge).sum();
    }

    /// Interns a subscription's topics (after `check_subscription`) and counts the new
    /// subscriber. Returns the ascending topic indexes.
    pub(crate) fn subscribe(&mut self, subscription: &[(String, u32)]) -> Vec<u32> {
        let mut out = Vec::with_capacity(subscription.len());
        for (name, count) in subscription {
            let (idx, before) = match self.topic_index.get(name) {
                Some(&idx) => (idx, Self::charge(&self.topics[idx as usize])),
                None => {
                    let idx = self.topics.len() as u32;
                    self.topics.push(Topic {
                        name: name.clone(),
                        partitions: *count,
                        subscribers: 0,
                    });
                    self.topic_index.insert(name.clone(), idx);
                    (idx, 0)
                }
            };
            let topic = &mut self.topics[idx as usize];
            if topic.subscribers == 0 {
                topic.partitions = *count;
            }
            topic.subscribers += 1;
            self.footprint = self.footprint - before + Self::charge(topic);
            out.push(idx);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Drops a member's subscription from the topic counts (before it is replaced by a
    /// new one) and returns it.
    pub(crate) fn unsubscribe_for_replacement(&mut self, id: &Arc<str>) -> Vec<u32> {
        let Some(m) = self.members.get_mut(id) else {
            return Vec::new();
        };
        let subscription = std::mem::take(&mut m.subscription);
        self.unsubscribe(&subscription);
        subscription.into_vec()
    }

    pub(crate) fn unsubscribe(&mut self, subscription: &[u32]) {
        for &idx in subscription {
            let t = &mut self.topics[idx as usize];
            let before = Self::charge(t);
            t.subscribers = t.subscribers.saturating_sub(1);
            self.footprint = self.footprint - before + Self::charge(t);
        }
    }

    /// Whether `m` subscribes to exactly `subscription` (names and partition counts, in
    /// any order).
    pub(crate) fn subscription_is(&self, m: &Member, subscription: &[(String, u32)]) -> bool {
        let mut have: Vec<(&str, u32)> = m
            .subscription
            .iter()
            .map(|&t| {
                let topic = &self.topics[t as usize];
                (topic.name.as_str(), topic.partitions)
            })
            .collect();
        let mut wanted: Vec<(&str, u32)> =
            subscription.iter().map(|(n, c)| (n.as_str(), *c)).collect();
        have.sort_unstable();
        wanted.sort_unstable();
        have == wanted
    }

    /// Whether a frame carrying member generation `generation` is about the current
    /// ownership of `tp`: the partition is owned, and was granted no later than that
    /// generation (see `owners`). Acknowledgements and commits both ask.
    pub(crate) fn granted_by(&self, tp: &TopicPartition, generation: u32) -> bool {
        self.owners
            .get(tp)
            .is_some_and(|&since| since <= generation)
    }

    pub(crate) fn resolve(&self, topic: &str, partition: u32) -> Option<TopicPartition> {
        let idx = *self.topic_index.get(topic)?;
        Some(TopicPartition {
            topic: idx,
            partition,
        })
    }

    /// Converts partitions to the wire form, grouped by topic name.
    pub(crate) fn to_wire<'a>(
        &self,
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
    ) -> Vec<TopicPartitions> {
        let mut out: Vec<TopicPartitions> = Vec::new();
        let mut current: Option<u32> = None;
        for tp in partitions {
            if current != Some(tp.topic) {
                current = Some(tp.topic);
                out.push(TopicPartitions {
                    topic: self.topics[tp.topic as usize].name.clone(),
                    partitions: Vec::new(),
                });
            }
            if let Some(last) = out.last_mut() {
                last.partitions.push(tp.partition);
            }
        }
        out
    }
}

pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    /// Every member is one allocation of this size (boxed in its group's map). Up to 512
    /// bytes it takes the allocator's 512-byte size class; past that, the next class is
    /// 640 bytes: a quarter more per member. A new field that most members leave empty
    /// belongs in a box; raise this only knowing that.
    #[test]
    fn a_member_fits_a_512_byte_allocation() {
        let size = std::mem::size_of::<super::Member>();
        assert!(size <= 512, "a Member is {size} bytes");
    }

    /// A renewal's fields fill the first [`RENEWAL_LINES`] lines of a member, which
    /// starts a line: a field added among them, or a hot field of the watch moved
    /// behind its cold ones, shows here instead of as a slower renewal.
    #[test]
    fn renewal_fields_fill_the_first_lines() {
        use std::mem::{align_of, offset_of};

        use super::super::liveness::Watch;
        use super::{Member, RENEWAL_LINES};

        assert_eq!(align_of::<Member>(), 64);
        let hot_end = offset_of!(Member, liveness) + Watch::RENEWAL_BYTES;
        assert!(
            hot_end <= RENEWAL_LINES * 64,
            "a renewal touches {hot_end} bytes of a member"
        );
        assert!(
            hot_end > (RENEWAL_LINES - 1) * 64,
            "RENEWAL_LINES is too high"
        );
        assert!(offset_of!(Member, id) >= hot_end);
    }
}
