//! One group: its members, their two clocks, the target assignment and its reconciliation.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::{
    AssignmentPush, ExpelReason, ExpelledPush, GroupState, MemberDescription, Push, RevokePush,
    TopicPartitions,
};

use super::assignor::{AssignmentInput, AssignorMember, TopicPartition};
use super::guards::Hold;
use super::liveness::{FixedTimeout, LivenessPolicy};
use super::records::{GroupSnapshot, HeldSnapshot, InstanceSnapshot, MemberSnapshot};
use super::timers::{TimerKey, Timers};
use super::{Assignor, ConnId, CoreConfig, Event, Output, RebalanceCause};

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

#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) id: Arc<str>,
    pub(crate) instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) join_token: u64,
    pub(crate) conn: Option<ConnId>,
    pub(crate) session_timeout: Duration,
    pub(crate) progress_timeout: Duration,
    pub(crate) rebalance_timeout: Duration,
    /// Topic indexes, ascending.
    pub(crate) subscription: Vec<u32>,
    pub(crate) liveness: Box<dyn LivenessPolicy>,
    pub(crate) progress: u64,
    pub(crate) progress_deadline: Instant,
    pub(crate) last_progress_at: Instant,
    pub(crate) last_sequence: u64,
    /// Heartbeats the member sent that never arrived, judged from sequence gaps.
    pub(crate) beats_lost: u64,
    /// Generation of the member's current assignment.
    pub(crate) generation: u32,
    /// Partitions granted to the member and not yet released.
    pub(crate) owned: BTreeSet<TopicPartition>,
    /// What the last rebalance wants the member to own.
    pub(crate) target: BTreeSet<TopicPartition>,
    /// Set while the member has partitions to release.
    pub(crate) revoke_deadline: Option<Instant>,
    /// The revoke set last pushed, to push again only when it changes.
    pub(crate) revoke_pushed: Vec<TopicPartition>,
    /// Partitions the member released, to tell a late commit "revoked" from "not owner".
    pub(crate) released: BTreeSet<TopicPartition>,
    /// The assignment changed since it was last pushed.
    pub(crate) assignment_dirty: bool,
    /// The latest instant the member's own lease can run to: every answer the
    /// coordinator sends promises the member its session timeout from the moment the
    /// member sent the request, which is never later than the moment it was received.
    /// Only ever moves later, except when the member stands down (it then ends now).
    /// Partitions of a removed member are held until then.
    pub(crate) lease_until: Instant,
    pub(crate) timer_at: Option<Instant>,
}

impl Member {
    pub(crate) fn session_deadline(&self) -> Instant {
        self.liveness.deadline()
    }

    fn next_deadline(&self) -> Instant {
        let mut next = self.session_deadline().min(self.progress_deadline);
        if let Some(r) = self.revoke_deadline {
            next = next.min(r);
        }
        next
    }

    /// Any frame from the member renews its session (and, with the answer, its lease).
    pub(crate) fn heard(&mut self, now: Instant) {
        self.liveness.heard(now);
        self.lease_until = self.lease_until.max(now + self.session_timeout);
    }

    /// Applies the timeouts of a rejoin. The session deadline follows the new session
    /// timeout at once; the lease already promised is kept (it only grows), so a shorter
    /// timeout never frees partitions before the member's longer lease ran out.
    pub(crate) fn set_timeouts(&mut self, timeouts: (Duration, Duration, Duration)) {
        let (session, progress, rebalance) = timeouts;
        self.session_timeout = session;
        self.liveness.set_timeout(session);
        if progress != self.progress_timeout {
            self.progress_timeout = progress;
            self.progress_deadline = self.last_progress_at + progress;
        }
        self.rebalance_timeout = rebalance;
    }

    /// The progress clock renews only when the counter advances.
    pub(crate) fn report_progress(&mut self, now: Instant, progress: u64) {
        if progress > self.progress {
            self.progress = progress;
            self.progress_deadline = now + self.progress_timeout;
            self.last_progress_at = now;
        }
    }

    pub(crate) fn record_sequence(&mut self, sequence: u64) {
        if sequence > self.last_sequence {
            if self.last_sequence != 0 {
                self.beats_lost += sequence - self.last_sequence - 1;
            }
            self.last_sequence = sequence;
        }
    }

    fn revoking(&self) -> Vec<TopicPartition> {
        self.owned.difference(&self.target).copied().collect()
    }

    /// Shifts every deadline by `by`: the coordinator was paused, not the member.
    pub(crate) fn extend(&mut self, by: Duration) {
        self.liveness.extend(by);
        self.progress_deadline += by;
        if let Some(r) = &mut self.revoke_deadline {
            *r += by;
        }
    }
}

/// Why a join was refused, before anything changed.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) code: rollcall_protocol::ErrorCode,
    pub(crate) message: String,
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
}

/// The instance id a static member id names: static member ids are
/// `<instance id>#<unique suffix>`, and suffixes never contain `#`.
pub(crate) fn instance_of(member_id: &str) -> Option<&str> {
    member_id.rfind('#').map(|i| &member_id[..i])
}

#[derive(Debug)]
struct PendingRebalance {
    first: Instant,
    due: Instant,
    cause: RebalanceCause,
}

#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) name: Arc<str>,
    pub(crate) generation: u32,
    pub(crate) topics: Vec<Topic>,
    pub(crate) topic_index: HashMap<String, u32>,
    pub(crate) members: BTreeMap<Arc<str>, Member>,
    /// Every static instance that ever joined, with its latest incarnation.
    pub(crate) instances: HashMap<String, Instance>,
    pub(crate) tokens: HashMap<u64, Arc<str>>,
    /// Current owner of every granted partition.
    pub(crate) owners: HashMap<TopicPartition, Arc<str>>,
    /// Which member the current target assigns each partition to, so a released
    /// partition is granted onward without scanning every member.
    target_owner: HashMap<TopicPartition, Arc<str>>,
    /// Partitions of removed (or replaced) members, held until the member's lease has
    /// run out, so that it stood down before anyone else gets them.
    pub(crate) held: Vec<(Instant, Vec<TopicPartition>)>,
    /// Recently removed members and why, oldest first.
    pub(crate) removed: HashMap<Arc<str>, ExpelReason>,
    removed_order: VecDeque<Arc<str>>,
    /// Committed offsets by (topic name, partition).
    pub(crate) offsets: BTreeMap<(String, u32), (i64, String)>,
    pending: Option<PendingRebalance>,
    /// Since when, and for which generation, the group has been reconciling.
    reconciling: Option<(Instant, u32)>,
    pub(crate) timer_at: Option<Instant>,
    /// State changed since the last snapshot record.
    pub(crate) snapshot_dirty: bool,
    /// The group is on the coordinator's list of groups to snapshot.
    pub(crate) listed: bool,
}

impl Group {
    /// A new group whose first generation will be above `generation_floor`.
    pub(crate) fn new(name: Arc<str>, generation_floor: u32) -> Self {
        Self {
            name,
            generation: generation_floor,
            topics: Vec::new(),
            topic_index: HashMap::new(),
            members: BTreeMap::new(),
            instances: HashMap::new(),
            tokens: HashMap::new(),
            owners: HashMap::new(),
            target_owner: HashMap::new(),
            held: Vec::new(),
            removed: HashMap::new(),
            removed_order: VecDeque::new(),
            offsets: BTreeMap::new(),
            pending: None,
            reconciling: None,
            timer_at: None,
            snapshot_dirty: false,
            listed: false,
        }
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

    /// The member that is the current incarnation of `instance`, if it is in the group.
    pub(crate) fn instance_member(&self, instance: &str) -> Option<Arc<str>> {
        self.instances
            .get(instance)
            .filter(|i| self.members.contains_key(&i.member_id))
            .map(|i| i.member_id.clone())
    }

    /// Records a new incarnation of `instance` and returns its epoch.
    pub(crate) fn register_instance(&mut self, instance: &str, member_id: Arc<str>) -> u64 {
        let epoch = self.instances.get(instance).map_or(1, |i| i.epoch + 1);
        self.instances
            .insert(instance.to_owned(), Instance { epoch, member_id });
        self.snapshot_dirty = true;
        epoch
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

    /// Checks a subscription against the topic table without changing anything.
    pub(crate) fn check_subscription(
        &self,
        subscription: &[(String, u32)],
        config: &CoreConfig,
        replacing: Option<&Member>,
    ) -> Result<(), Refusal> {
        let mut added: u64 = 0;
        for (name, count) in subscription {
            match self.topic_index.get(name) {
                Some(&idx) => {
                    let topic = &self.topics[idx as usize];
                    let only_subscriber_is_replaced = replacing.is_some_and(|m| {
                        topic.subscribers == 1 && m.subscription.binary_search(&idx).is_ok()
                    });
                    let active = topic.subscribers > 0 && !only_subscriber_is_replaced;
                    if active && topic.partitions != *count {
                        return Err(Refusal {
                            code: rollcall_protocol::ErrorCode::InconsistentSubscription,
                            message: format!(
                                "topic {name:?} has {} partitions in group {:?}, the join declares {count}",
                                topic.partitions, &*self.name
                            ),
                        });
                    }
                    if !active {
                        added += u64::from(*count);
                    }
                }
                None => added += u64::from(*count),
            }
        }
        let current: u64 = self
            .topics
            .iter()
            .filter(|t| t.subscribers > 0)
            .map(|t| u64::from(t.partitions))
            .sum();
        if current + added > u64::from(config.max_partitions_per_group) {
            return Err(Refusal {
                code: rollcall_protocol::ErrorCode::TooManyPartitions,
                message: format!(
                    "group {:?} would have {} partitions, more than the maximum of {}",
                    &*self.name,
                    current + added,
                    config.max_partitions_per_group
                ),
            });
        }
        Ok(())
    }

    /// Interns a subscription's topics (after `check_subscription`) and counts the new
    /// subscriber. Returns the ascending topic indexes.
    pub(crate) fn subscribe(&mut self, subscription: &[(String, u32)]) -> Vec<u32> {
        let mut out = Vec::with_capacity(subscription.len());
        for (name, count) in subscription {
            let idx = match self.topic_index.get(name) {
                Some(&idx) => idx,
                None => {
                    let idx = self.topics.len() as u32;
                    self.topics.push(Topic {
                        name: name.clone(),
                        partitions: *count,
                        subscribers: 0,
                    });
                    self.topic_index.insert(name.clone(), idx);
                    idx
                }
            };
            let topic = &mut self.topics[idx as usize];
            if topic.subscribers == 0 {
                topic.partitions = *count;
            }
            topic.subscribers += 1;
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
        subscription
    }

    fn unsubscribe(&mut self, subscription: &[u32]) {
        for &idx in subscription {
            let t = &mut self.topics[idx as usize];
            t.subscribers = t.subscribers.saturating_sub(1);
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

    // ----------------------------------------------------------------------------------
    // Membership
    // ----------------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_member(
        &self,
        now: Instant,
        id: Arc<str>,
        instance_id: Option<String>,
        client_id: String,
        join_token: u64,
        conn: Option<ConnId>,
        timeouts: (Duration, Duration, Duration),
        subscription: Vec<u32>,
    ) -> Member {
        let (session_timeout, progress_timeout, rebalance_timeout) = timeouts;
        Member {
            id,
            instance_id,
            client_id,
            join_token,
            conn,
            session_timeout,
            progress_timeout,
            rebalance_timeout,
            subscription,
            liveness: Box::new(FixedTimeout::new(now, session_timeout)),
            progress: 0,
            progress_deadline: now + progress_timeout,
            last_progress_at: now,
            last_sequence: 0,
            beats_lost: 0,
            generation: self.generation,
            owned: BTreeSet::new(),
            target: BTreeSet::new(),
            revoke_deadline: None,
            revoke_pushed: Vec::new(),
            released: BTreeSet::new(),
            assignment_dirty: true,
            lease_until: now + session_timeout,
            timer_at: None,
        }
    }

    /// Adds a member and schedules its deadlines.
    pub(crate) fn insert_member(&mut self, ctx: &mut Ctx<'_>, mut member: Member) {
        self.tokens.insert(member.join_token, member.id.clone());
        for tp in &member.owned {
            self.owners.insert(*tp, member.id.clone());
        }
        let key = TimerKey::Member {
            group: self.name.clone(),
            member: member.id.clone(),
        };
        let next = member.next_deadline();
        ctx.timers.schedule(&mut member.timer_at, next, key);
        self.members.insert(member.id.clone(), member);
        self.snapshot_dirty = true;
    }

    fn forget(&mut self, id: &Arc<str>, reason: ExpelReason, memory: usize) {
        self.removed.insert(id.clone(), reason);
        self.removed_order.push_back(id.clone());
        while self.removed_order.len() > memory {
            if let Some(old) = self.removed_order.pop_front() {
                self.removed.remove(&old);
            }
        }
    }

    /// Makes sure the member's timer fires by its earliest deadline.
    pub(crate) fn schedule_member(&mut self, ctx: &mut Ctx<'_>, id: &Arc<str>) {
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        let key = TimerKey::Member {
            group: self.name.clone(),
            member: id.clone(),
        };
        let next = m.next_deadline();
        ctx.timers.schedule(&mut m.timer_at, next, key);
    }

    /// Removes a member. Its partitions are held until its lease has run out
    /// ([`Member::lease_until`]); a member that left after releasing everything ended
    /// its lease itself, so its partitions move at once.
    pub(crate) fn remove_member(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: &Arc<str>,
        reason: ExpelReason,
        message: String,
    ) {
        let Some(member) = self.members.remove(id) else {
            return;
        };
        if self.tokens.get(&member.join_token) == Some(id) {
            self.tokens.remove(&member.join_token);
        }
        self.unsubscribe(&member.subscription);
        let owned: Vec<TopicPartition> = member.owned.iter().copied().collect();
        for tp in &owned {
            self.owners.remove(tp);
        }
        let hold_until = member.lease_until;
        if hold_until > ctx.now && !owned.is_empty() {
            self.held.push((hold_until, owned));
            let key = TimerKey::Group(self.name.clone());
            ctx.timers.schedule(&mut self.timer_at, hold_until, key);
        }
        self.forget(id, reason, ctx.config.expelled_memory);
        if reason != ExpelReason::Left {
            ctx.push(
                member.conn,
                Push::Expelled(ExpelledPush {
                    group: self.name.to_string(),
                    member_id: id.to_string(),
                    reason,
                    message,
                }),
            );
        }
        ctx.event(Event::MemberRemoved {
            group: self.name.to_string(),
            member_id: id.to_string(),
            reason,
        });
        self.snapshot_dirty = true;
        let cause = if reason == ExpelReason::Left {
            RebalanceCause::Leave
        } else {
            RebalanceCause::Expulsion
        };
        self.trigger_rebalance(ctx, cause);
    }

    /// Replaces a static member by a new process under a new member id: it takes over
    /// the old member's target and generation without a rebalance; the old id is fenced.
    ///
    /// The old process may still be acting on its partitions (a replacement does not
    /// prove the old process is dead), so they are held until its lease has run out and
    /// granted to the replacement then. An old process that stood down (or whose lease
    /// is over) hands them over at once, which keeps planned restarts instant.
    pub(crate) fn replace_member(
        &mut self,
        ctx: &mut Ctx<'_>,
        old_id: &Arc<str>,
        mut new: Member,
        subscription_changed: bool,
    ) -> bool {
        let Some(old) = self.members.remove(old_id) else {
            return false;
        };
        self.unsubscribe(&old.subscription);
        if self.tokens.get(&old.join_token) == Some(old_id) {
            self.tokens.remove(&old.join_token);
        }
        for tp in &old.target {
            self.target_owner.insert(*tp, new.id.clone());
        }
        for tp in &old.owned {
            self.owners.remove(tp);
        }
        if old.lease_until > ctx.now && !old.owned.is_empty() {
            let held: Vec<TopicPartition> = old.owned.iter().copied().collect();
            self.held.push((old.lease_until, held));
            let key = TimerKey::Group(self.name.clone());
            ctx.timers
                .schedule(&mut self.timer_at, old.lease_until, key);
        } else {
            new.owned = old.owned;
        }
        new.target = old.target;
        new.generation = old.generation;
        // The replacement gets its own rebalance timeout for anything it must release.
        new.revoke_deadline = None;
        new.assignment_dirty = true;
        self.forget(old_id, ExpelReason::Fenced, ctx.config.expelled_memory);
        ctx.push(
            old.conn,
            Push::Expelled(ExpelledPush {
                group: self.name.to_string(),
                member_id: old_id.to_string(),
                reason: ExpelReason::Fenced,
                message: "a newer process joined with the same instance id".to_owned(),
            }),
        );
        ctx.event(Event::MemberReplaced {
            group: self.name.to_string(),
            old_member_id: old_id.to_string(),
            new_member_id: new.id.to_string(),
            instance_id: new.instance_id.clone().unwrap_or_default(),
        });
        self.insert_member(ctx, new);
        if subscription_changed {
            self.trigger_rebalance(ctx, RebalanceCause::Subscription);
        }
        self.reconcile(ctx);
        true
    }

    /// Pushes the member's full state again (after a rebind or a generation mismatch).
    pub(crate) fn push_state(&mut self, ctx: &mut Ctx<'_>, id: &Arc<str>) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        let assignment = Push::Assignment(AssignmentPush {
            group: self.name.to_string(),
            member_id: id.to_string(),
            generation: m.generation,
            partitions: self.to_wire(&m.owned),
        });
        let revoking = m.revoking();
        let revoke = (!revoking.is_empty()).then(|| {
            Push::Revoke(RevokePush {
                group: self.name.to_string(),
                member_id: id.to_string(),
                generation: m.generation,
                partitions: self.to_wire(&revoking),
            })
        });
        let conn = m.conn;
        ctx.push(conn, assignment);
        if let Some(revoke) = revoke {
            ctx.push(conn, revoke);
        }
    }

    // ----------------------------------------------------------------------------------
    // Timers
    // ----------------------------------------------------------------------------------

    /// A member's timer fired: expel it if a deadline passed, otherwise sleep again.
    /// `hold` is a guard's decision to hold an expiry for silence (the coordinator asks
    /// the guards before it calls this, for a member whose session has expired).
    pub(crate) fn on_member_timer(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: &Arc<str>,
        fired_at: Instant,
        hold: Option<Hold>,
    ) {
        let now = ctx.now;
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        if m.timer_at == Some(fired_at) {
            m.timer_at = None;
        }
        let session_expired = m.session_deadline() <= now;
        if let (true, Some(hold)) = (session_expired, hold) {
            let key = TimerKey::Member {
                group: self.name.clone(),
                member: id.clone(),
            };
            ctx.timers.schedule(&mut m.timer_at, hold.recheck_at(), key);
            return;
        }
        let expired = if session_expired {
            Some((
                ExpelReason::SessionExpired,
                format!(
                    "no heartbeat within the session timeout of {:?}",
                    m.session_timeout
                ),
            ))
        } else if m.progress_deadline <= now {
            Some((
                ExpelReason::ProgressExpired,
                format!(
                    "progress counter stuck at {} for the progress timeout of {:?}",
                    m.progress, m.progress_timeout
                ),
            ))
        } else if m.revoke_deadline.is_some_and(|r| r <= now) {
            Some((
                ExpelReason::RebalanceTimeout,
                format!(
                    "revocation not acknowledged within the rebalance timeout of {:?}",
                    m.rebalance_timeout
                ),
            ))
        } else {
            None
        };
        match expired {
            Some((reason, message)) => {
                let id = id.clone();
                self.remove_member(ctx, &id, reason, message);
                self.reconcile(ctx);
            }
            None => {
                let key = TimerKey::Member {
                    group: self.name.clone(),
                    member: id.clone(),
                };
                let next = m.next_deadline();
                ctx.timers.schedule(&mut m.timer_at, next, key);
            }
        }
    }

    /// The group's timer fired: run a due rebalance, release held partitions.
    pub(crate) fn on_group_timer(&mut self, ctx: &mut Ctx<'_>, fired_at: Instant) {
        if self.timer_at == Some(fired_at) {
            self.timer_at = None;
        }
        if self.pending.as_ref().is_some_and(|p| p.due <= ctx.now) {
            self.rebalance(ctx);
        }
        self.reconcile(ctx);
    }

    fn schedule_group_timer(&mut self, ctx: &mut Ctx<'_>) {
        let mut next = self.pending.as_ref().map(|p| p.due);
        for (until, _) in &self.held {
            next = Some(next.map_or(*until, |n| n.min(*until)));
        }
        if let Some(next) = next {
            let key = TimerKey::Group(self.name.clone());
            ctx.timers.schedule(&mut self.timer_at, next, key);
        }
    }

    // ----------------------------------------------------------------------------------
    // Rebalancing
    // ----------------------------------------------------------------------------------

    /// Asks for a rebalance. Triggers within the coalescing window share one generation.
    pub(crate) fn trigger_rebalance(&mut self, ctx: &mut Ctx<'_>, cause: RebalanceCause) {
        let now = ctx.now;
        let window = ctx.config.rebalance_coalesce;
        match &mut self.pending {
            Some(p) => {
                p.due = (now + window).min(p.first + ctx.config.rebalance_coalesce_max);
            }
            None => {
                self.pending = Some(PendingRebalance {
                    first: now,
                    due: now + window,
                    cause,
                });
            }
        }
        self.schedule_group_timer(ctx);
    }

    /// Computes a new target assignment in a new generation.
    fn rebalance(&mut self, ctx: &mut Ctx<'_>) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        self.generation += 1;
        let generation = self.generation;
        let topics: Vec<u32> = self
            .topics
            .iter()
            .map(|t| if t.subscribers > 0 { t.partitions } else { 0 })
            .collect();
        let owned: Vec<Vec<TopicPartition>> = self
            .members
            .values()
            .map(|m| m.owned.iter().copied().collect())
            .collect();
        let inputs: Vec<AssignorMember<'_>> = self
            .members
            .values()
            .zip(&owned)
            .map(|(m, owned)| AssignorMember {
                id: &m.id,
                subscription: &m.subscription,
                owned,
            })
            .collect();
        let targets = ctx.assignor.assign(&AssignmentInput {
            topics: &topics,
            members: &inputs,
        });
        drop(inputs);
        let mut moved = 0;
        self.target_owner.clear();
        for (m, target) in self.members.values_mut().zip(targets) {
            for tp in &target {
                self.target_owner.insert(*tp, m.id.clone());
            }
            let target: BTreeSet<TopicPartition> = target.into_iter().collect();
            moved += target.difference(&m.owned).count();
            m.target = target;
            m.generation = generation;
            m.assignment_dirty = true;
        }
        // A topic no member subscribes to any more is dropped from the work.
        let first = match self.reconciling {
            Some((since, _)) => since.min(pending.first),
            None => pending.first,
        };
        self.reconciling = Some((first, generation));
        self.snapshot_dirty = true;
        ctx.event(Event::RebalanceStarted {
            group: self.name.to_string(),
            generation,
            cause: pending.cause,
            partitions_moved: moved,
        });
    }

    /// Moves the group toward its target: asks owners to release partitions that move,
    /// grants free partitions to their targets, pushes what changed. A partition is never
    /// granted while another member owns it or while it is held for an expelled member.
    pub(crate) fn reconcile(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let before = self.held.len();
        self.held.retain(|(until, _)| *until > now);
        if self.held.len() != before {
            self.snapshot_dirty = true;
        }
        let held: BTreeSet<TopicPartition> = self
            .held
            .iter()
            .flat_map(|(_, tps)| tps.iter().copied())
            .collect();

        let ids: Vec<Arc<str>> = self.members.keys().cloned().collect();
        let mut all_settled = self.pending.is_none();
        for id in &ids {
            // Grants: target partitions nobody owns and nobody holds.
            let Some(m) = self.members.get(id) else {
                continue;
            };
            let grants: Vec<TopicPartition> = m
                .target
                .difference(&m.owned)
                .filter(|tp| !self.owners.contains_key(tp) && !held.contains(tp))
                .copied()
                .collect();
            for tp in &grants {
                self.owners.insert(*tp, id.clone());
            }
            let Some(m) = self.members.get_mut(id) else {
                continue;
            };
            if !grants.is_empty() {
                m.owned.extend(grants);
                m.assignment_dirty = true;
                self.snapshot_dirty = true;
            }
            if m.owned != m.target {
                all_settled = false;
            }
            // Revocations: owned partitions that are no longer in the target.
            let revoking = m.revoking();
            if revoking.is_empty() {
                m.revoke_deadline = None;
            } else if m.revoke_deadline.is_none() {
                let deadline = now + m.rebalance_timeout;
                m.revoke_deadline = Some(deadline);
                let key = TimerKey::Member {
                    group: self.name.clone(),
                    member: id.clone(),
                };
                ctx.timers.schedule(&mut m.timer_at, deadline, key);
            }
            let m = &self.members[id];
            if m.assignment_dirty {
                let push = Push::Assignment(AssignmentPush {
                    group: self.name.to_string(),
                    member_id: id.to_string(),
                    generation: m.generation,
                    partitions: self.to_wire(&m.owned),
                });
                ctx.push(m.conn, push);
            }
            // A revoke set that changed is pushed again, including when it became empty
            // because a newer target gave the partitions back: the member must hear that
            // it keeps them.
            if revoking != m.revoke_pushed {
                let push = Push::Revoke(RevokePush {
                    group: self.name.to_string(),
                    member_id: id.to_string(),
                    generation: m.generation,
                    partitions: self.to_wire(&revoking),
                });
                ctx.push(m.conn, push);
            }
            let m = self.members.get_mut(id).expect("member exists");
            m.assignment_dirty = false;
            m.revoke_pushed = revoking;
        }
        if all_settled {
            if let Some((since, generation)) = self.reconciling.take() {
                if !self.members.is_empty() {
                    ctx.event(Event::RebalanceCompleted {
                        group: self.name.to_string(),
                        generation,
                        duration: now.saturating_duration_since(since),
                    });
                }
            }
        }
        self.schedule_group_timer(ctx);
    }

    /// Releases partitions a member acknowledged and grants each onward to the member
    /// the target gives it to, pushing only to the members whose assignment changed.
    /// The incremental twin of [`Self::reconcile`] for the hottest path of a rebalance:
    /// it costs O(partitions acknowledged), not O(members).
    pub(crate) fn acknowledge_and_grant(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: &Arc<str>,
        acked: &[TopicPartition],
    ) {
        if !self.acknowledge(id, acked) {
            return;
        }
        let mut changed: Vec<Arc<str>> = vec![id.clone()];
        let held_any = !self.held.is_empty();
        for tp in acked {
            if self.owners.contains_key(tp) {
                continue;
            }
            if held_any && self.held.iter().any(|(_, tps)| tps.contains(tp)) {
                continue;
            }
            let Some(to) = self.target_owner.get(tp) else {
                continue;
            };
            let Some(m) = self.members.get_mut(to) else {
                continue;
            };
            if m.target.contains(tp) && m.owned.insert(*tp) {
                self.owners.insert(*tp, to.clone());
                m.assignment_dirty = true;
                changed.push(to.clone());
            }
        }
        changed.sort();
        changed.dedup();
        for member in &changed {
            let Some(m) = self.members.get_mut(member) else {
                continue;
            };
            if m.owned.is_subset(&m.target) {
                m.revoke_deadline = None;
                m.revoke_pushed.clear();
            }
            m.assignment_dirty = false;
            let push = Push::Assignment(AssignmentPush {
                group: self.name.to_string(),
                member_id: member.to_string(),
                generation: m.generation,
                partitions: self.to_wire(&self.members[member].owned),
            });
            ctx.push(self.members[member].conn, push);
        }
        let unsettled = changed
            .iter()
            .filter_map(|id| self.members.get(id))
            .any(|m| m.owned != m.target);
        if !unsettled {
            self.check_settled(ctx);
        }
    }

    /// Emits `RebalanceCompleted` once every member holds exactly its target.
    fn check_settled(&mut self, ctx: &mut Ctx<'_>) {
        if self.reconciling.is_none() || self.pending.is_some() {
            return;
        }
        if self.members.values().all(|m| m.owned == m.target) {
            if let Some((since, generation)) = self.reconciling.take() {
                ctx.event(Event::RebalanceCompleted {
                    group: self.name.to_string(),
                    generation,
                    duration: ctx.now.saturating_duration_since(since),
                });
            }
        }
    }

    /// Releases partitions a member acknowledged. Only partitions it owns and no longer
    /// targets are released; anything else in the list is ignored.
    fn acknowledge(&mut self, id: &Arc<str>, acked: &[TopicPartition]) -> bool {
        let Some(m) = self.members.get_mut(id) else {
            return false;
        };
        let mut changed = false;
        for tp in acked {
            if !m.target.contains(tp) && m.owned.remove(tp) {
                m.released.insert(*tp);
                self.owners.remove(tp);
                changed = true;
            }
        }
        if changed {
            m.assignment_dirty = true;
            self.snapshot_dirty = true;
        }
        changed
    }

    // ----------------------------------------------------------------------------------
    // Inspection and persistence
    // ----------------------------------------------------------------------------------

    pub(crate) fn describe_member(&self, m: &Member, now: Instant) -> MemberDescription {
        let pending_revoke: Vec<TopicPartition> = m.revoking();
        let pending_grant: Vec<TopicPartition> = m.target.difference(&m.owned).copied().collect();
        MemberDescription {
            member_id: m.id.to_string(),
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            liveness: m.liveness.liveness(now),
            since_heartbeat_ms: duration_ms(now.saturating_duration_since(m.liveness.last_heard())),
            since_progress_ms: duration_ms(now.saturating_duration_since(m.last_progress_at)),
            owned: self.to_wire(&m.owned),
            pending_revoke: self.to_wire(&pending_revoke),
            pending_grant: self.to_wire(&pending_grant),
        }
    }

    /// The group's durable state at `now`.
    pub(crate) fn snapshot(&self, now: Instant) -> GroupSnapshot {
        let remaining = |until: Instant| duration_ms(until.saturating_duration_since(now));
        let pairs = |tps: &mut dyn Iterator<Item = &TopicPartition>| -> Vec<(u32, u32)> {
            tps.map(|tp| (tp.topic, tp.partition)).collect()
        };
        let mut instances: Vec<InstanceSnapshot> = self
            .instances
            .iter()
            .map(|(instance_id, i)| InstanceSnapshot {
                instance_id: instance_id.clone(),
                epoch: i.epoch,
                member_id: i.member_id.to_string(),
            })
            .collect();
        instances.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        GroupSnapshot {
            group: self.name.to_string(),
            generation: self.generation,
            topics: self
                .topics
                .iter()
                .map(|t| (t.name.clone(), t.partitions))
                .collect(),
            members: self
                .members
                .values()
                .map(|m| MemberSnapshot {
                    member_id: m.id.to_string(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    join_token: m.join_token,
                    session_timeout_ms: duration_ms(m.session_timeout) as u32,
                    progress_timeout_ms: duration_ms(m.progress_timeout) as u32,
                    rebalance_timeout_ms: duration_ms(m.rebalance_timeout) as u32,
                    subscription: m.subscription.clone(),
                    generation: m.generation,
                    owned: pairs(&mut m.owned.iter()),
                    target: pairs(&mut m.target.iter()),
                    lease_remaining_ms: Some(remaining(m.lease_until)),
                })
                .collect(),
            held: self
                .held
                .iter()
                .filter(|(until, _)| *until > now)
                .map(|(until, tps)| HeldSnapshot {
                    remaining_ms: remaining(*until),
                    partitions: pairs(&mut tps.iter()),
                })
                .collect(),
            rebalance_pending: self.pending.as_ref().map(|p| p.cause.as_str().to_owned()),
            instances,
        }
    }

    /// Rebuilds a group from its snapshot; every member gets fresh deadlines from `now`.
    /// Holds and leases run for what they had left when the snapshot was taken, counted
    /// again from `now`; a rebalance that was pending is asked for again.
    pub(crate) fn restore(ctx: &mut Ctx<'_>, snapshot: GroupSnapshot) -> Self {
        let now = ctx.now;
        let mut group = Self::new(Arc::from(snapshot.group.as_str()), 0);
        group.generation = snapshot.generation;
        for (name, partitions) in snapshot.topics {
            let idx = group.topics.len() as u32;
            group.topic_index.insert(name.clone(), idx);
            group.topics.push(Topic {
                name,
                partitions,
                subscribers: 0,
            });
        }
        let topic_count = group.topics.len() as u32;
        let tp = |(topic, partition): &(u32, u32)| TopicPartition {
            topic: *topic,
            partition: *partition,
        };
        for i in snapshot.instances {
            group.instances.insert(
                i.instance_id,
                Instance {
                    epoch: i.epoch,
                    member_id: Arc::from(i.member_id.as_str()),
                },
            );
        }
        for ms in snapshot.members {
            let subscription: Vec<u32> = ms
                .subscription
                .iter()
                .copied()
                .filter(|&t| t < topic_count)
                .collect();
            for &t in &subscription {
                group.topics[t as usize].subscribers += 1;
            }
            let mut member = group.new_member(
                now,
                Arc::from(ms.member_id.as_str()),
                ms.instance_id,
                ms.client_id,
                ms.join_token,
                None,
                (
                    Duration::from_millis(u64::from(ms.session_timeout_ms)),
                    Duration::from_millis(u64::from(ms.progress_timeout_ms)),
                    Duration::from_millis(u64::from(ms.rebalance_timeout_ms)),
                ),
                subscription,
            );
            member.generation = ms.generation;
            if let Some(remaining) = ms.lease_remaining_ms {
                member.lease_until = now + Duration::from_millis(remaining);
            }
            // A snapshot written before instances were recorded: the member is its
            // instance's latest incarnation.
            if let Some(instance) = &member.instance_id {
                if !group.instances.contains_key(instance) {
                    group.instances.insert(
                        instance.clone(),
                        Instance {
                            epoch: 1,
                            member_id: member.id.clone(),
                        },
                    );
                }
            }
            // A partition claimed twice (impossible unless the file was edited) stays
            // with the first claimant.
            member.owned = ms
                .owned
                .iter()
                .map(tp)
                .filter(|tp| !group.owners.contains_key(tp))
                .collect();
            member.target = ms.target.iter().map(tp).collect();
            for t in &member.target {
                group.target_owner.insert(*t, member.id.clone());
            }
            group.insert_member(ctx, member);
        }
        for h in snapshot.held {
            let until = now + Duration::from_millis(h.remaining_ms);
            let partitions: Vec<TopicPartition> = h.partitions.iter().map(tp).collect();
            group.held.push((until, partitions));
        }
        if group.members.values().any(|m| m.owned != m.target) {
            group.reconciling = Some((now, group.generation));
        }
        if let Some(cause) = snapshot.rebalance_pending {
            let cause = RebalanceCause::parse(&cause).unwrap_or(RebalanceCause::Join);
            group.trigger_rebalance(ctx, cause);
        }
        group.snapshot_dirty = false;
        group.reconcile(ctx);
        group.snapshot_dirty = false;
        group
    }
}

pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
