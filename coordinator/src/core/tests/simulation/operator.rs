//! The operator's side of the simulation: what drains, settings and departure delays
//! promise, as the oracle checks it (checks 10 to 13), and what the shell adds to the
//! clients' frames (placements at join, load reports in heartbeats).
//!
//! - *10.* Throttled moves: a partition is newly asked of a member only if the group's
//!   revocations (asked, not yet acknowledged or ended) number at most `max_revoking`
//!   with it, and the member's at most `max_revoking_per_member`. (Revocations asked
//!   before a cap was lowered may exceed it; nothing new is asked until they drop
//!   below. Without caps everything a member must release is asked at once, also of a
//!   member with no connection to hear it: it hears it when it comes back, and that is
//!   no new revocation, even if a cap was set meanwhile.)
//! - *11.* Reservations: a partition reserved for a departed static instance is owned by
//!   no member of another instance until the instance returns or the reservation ends,
//!   and it does not end as expired before its delay.
//! - *12.* Drains: a member whose drain was answered (by id, by its static instance,
//!   or by its label, also one it joined with later) owns nothing it did not own when
//!   the drain was answered, until it is undrained; and the coordinator still reports
//!   it drained (`DescribeGroup` version 4), across restarts.
//! - *13.* Liveness (with check 5 at the end of the quiet tail): every partition of a
//!   topic that some live undrained member subscribes to is owned by a live undrained
//!   member once nothing is held, reserved or revoking and the faults stopped.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use rollcall_protocol::{
    DescribeGroupResponse, GroupSettings, JoinPlacement, PartitionLoad, Push, Request, Response,
};

use super::oracle::{from_wire, Check, Oracle, Tp};
use super::process::Process;
use crate::core::{Balance, Event, GroupConfig};

/// A reservation as the oracle saw it made.
#[derive(Debug, Clone)]
pub(super) struct Reserved {
    instance: String,
    member: String,
    /// What the departed member owned and was not asked to release: part of what the
    /// core keeps for the instance.
    partitions: BTreeSet<Tp>,
    since: Instant,
    until: Instant,
}

/// What the oracle knows of the operator's controls.
#[derive(Debug, Default)]
pub(super) struct Operated {
    /// Each group's settings, as the last AlterGroupConfig answered them.
    pub(super) settings: HashMap<String, GroupSettings>,
    /// What each member was last asked to release (its last revoke push, less what
    /// it no longer owns by its assignment pushes), per group.
    asked: HashMap<String, BTreeMap<String, BTreeSet<Tp>>>,
    /// What each member owns and its target does not keep (asked, or waiting for room
    /// under the caps), as the last `DescribeGroup` showed it, per group.
    leaving: HashMap<String, BTreeMap<String, BTreeSet<Tp>>>,
    /// Members asked something new since the group was last described, per group.
    newly: HashMap<String, BTreeMap<String, BTreeSet<Tp>>>,
    /// Members whose partitions were reserved for their instance (their removal owes
    /// no rebalance), or who took their instance's reservation back (their join owes
    /// none).
    pub(super) returned: HashSet<String>,
    /// Drained members per group, with what each may still own (what it owned when
    /// its drain was answered).
    pub(super) drained: HashMap<String, BTreeMap<String, BTreeSet<Tp>>>,
    drained_instances: HashMap<String, BTreeSet<String>>,
    pub(super) drained_labels: HashMap<String, BTreeSet<String>>,
    /// Reservations per group.
    reservations: HashMap<String, Vec<Reserved>>,
    /// When the last reservation was made or ended.
    pub(super) last_reservation: Option<Instant>,
}

impl Operated {
    /// Offsets retention deleted `group` outright, its static instances with it.
    pub(super) fn forget_drained_instances(&mut self, group: &str) {
        self.drained_instances.remove(group);
    }

    /// Whether any member is asked to release something now.
    pub(super) fn revoking(&self) -> bool {
        self.asked
            .values()
            .any(|members| members.values().any(|a| !a.is_empty()))
    }

    /// Whether partitions are reserved anywhere.
    pub(super) fn reserving(&self) -> bool {
        self.reservations.values().any(|r| !r.is_empty())
    }

    /// What `member` was last pushed to release, if its group caps revocations
    /// (otherwise everything it must release is asked at once).
    pub(super) fn pushed_if_capped(&self, group: &str, member: &str) -> Option<BTreeSet<Tp>> {
        let s = self.settings.get(group)?;
        if s.max_revoking == 0 && s.max_revoking_per_member == 0 {
            return None;
        }
        Some(
            self.asked
                .get(group)
                .and_then(|a| a.get(member))
                .cloned()
                .unwrap_or_default(),
        )
    }

    pub(super) fn is_drained(&self, group: &str, member: &str) -> bool {
        self.drained
            .get(group)
            .is_some_and(|d| d.contains_key(member))
    }
}

impl Oracle {
    fn instance_of(&self, member: &str, procs: &[Process]) -> Option<String> {
        let info = self.members.get(member)?;
        procs[info.proc].config.instance_id.clone()
    }

    fn owned_by(&self, group: &str, member: &str) -> BTreeSet<Tp> {
        self.owners
            .get(group)
            .map(|o| {
                o.iter()
                    .filter(|(_, m)| *m == member)
                    .map(|(tp, _)| tp.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// An operator's request (or a member's self-drain) was answered.
    pub(super) fn on_operated(
        &mut self,
        now: Instant,
        request: &Request,
        response: &Response,
        procs: &[Process],
    ) {
        match (request, response) {
            (Request::AlterGroupConfig(r), Response::AlterGroupConfig(a)) => {
                self.log(now, format!("{} settings now {:?}", r.group, a.config));
                self.op.settings.insert(r.group.clone(), a.config);
            }
            (Request::Drain(r), Response::Drain(a)) => {
                let group = r.group.clone();
                if !r.label.is_empty() {
                    let labels = self.op.drained_labels.entry(group.clone()).or_default();
                    if r.drained {
                        labels.insert(r.label.clone());
                    } else {
                        labels.remove(&r.label);
                    }
                }
                for m in &a.members {
                    let instance = self.instance_of(m, procs);
                    if r.drained {
                        let owned = self.owned_by(&group, m);
                        self.op
                            .drained
                            .entry(group.clone())
                            .or_default()
                            .insert(m.clone(), owned);
                        if let (Some(i), false) = (instance, r.member_id.is_empty()) {
                            self.op
                                .drained_instances
                                .entry(group.clone())
                                .or_default()
                                .insert(i);
                        }
                    } else {
                        if let Some(d) = self.op.drained.get_mut(&group) {
                            d.remove(m);
                        }
                        if let (Some(i), false) = (instance, r.member_id.is_empty()) {
                            if let Some(d) = self.op.drained_instances.get_mut(&group) {
                                d.remove(&i);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// A push: a revoke push is what its member is asked to release now (a full set);
    /// an assignment push shows what it released.
    pub(super) fn on_push_operated(&mut self, push: &Push) {
        match push {
            Push::Revoke(r) => {
                let set = from_wire(&r.partitions);
                let asked = self.op.asked.entry(r.group.clone()).or_default();
                let old = asked.remove(&r.member_id).unwrap_or_default();
                let new: BTreeSet<Tp> = set.difference(&old).cloned().collect();
                if !new.is_empty() {
                    self.op
                        .newly
                        .entry(r.group.clone())
                        .or_default()
                        .entry(r.member_id.clone())
                        .or_default()
                        .extend(new);
                }
                asked.insert(r.member_id.clone(), set);
            }
            Push::Assignment(a) => {
                let owned = from_wire(&a.partitions);
                if let Some(set) = self
                    .op
                    .asked
                    .get_mut(&a.group)
                    .and_then(|m| m.get_mut(&a.member_id))
                {
                    set.retain(|tp| owned.contains(tp));
                }
            }
            _ => {}
        }
    }

    /// A member's join was answered: one joining with a drained instance or label is
    /// drained from the start.
    pub(super) fn on_join_answered(
        &mut self,
        request: &Request,
        response: &Response,
        label: Option<&str>,
    ) {
        let (Request::Join(j), Response::Join(a)) = (request, response) else {
            return;
        };
        let group = j.group.clone();
        let by_instance = j.instance_id.as_ref().is_some_and(|i| {
            self.op
                .drained_instances
                .get(&group)
                .is_some_and(|d| d.contains(i))
        });
        let by_label = label.is_some_and(|l| {
            self.op
                .drained_labels
                .get(&group)
                .is_some_and(|d| d.contains(l))
        });
        if (by_instance || by_label) && !self.op.is_drained(&group, &a.member_id) {
            let owned = self.owned_by(&group, &a.member_id);
            self.op
                .drained
                .entry(group)
                .or_default()
                .insert(a.member_id.clone(), owned);
        }
    }

    /// Reservations made, returned and ended.
    pub(super) fn on_operated_event(&mut self, now: Instant, event: &Event, procs: &[Process]) {
        match event {
            // A static replacement takes over what the old process owned: not a grant
            // (it is asked to release it at once if drained).
            Event::MemberReplaced {
                group,
                old_member_id,
                new_member_id,
                ..
            } => {
                let inherited = self.owned_by(group, old_member_id);
                if let Some(allowed) = self
                    .op
                    .drained
                    .get_mut(group)
                    .and_then(|d| d.get_mut(new_member_id))
                {
                    allowed.extend(inherited);
                }
            }
            Event::PartitionsReserved {
                group,
                instance_id,
                member_id,
                delay,
                ..
            } => {
                let asked = self
                    .op
                    .leaving
                    .get(group)
                    .and_then(|a| a.get(member_id))
                    .cloned()
                    .unwrap_or_default();
                let partitions: BTreeSet<Tp> = self
                    .owned_by(group, member_id)
                    .into_iter()
                    .filter(|tp| !asked.contains(tp))
                    .collect();
                self.log(
                    now,
                    format!(
                        "{} reserved for {instance_id} for {delay:?}: {partitions:?}",
                        self.who(member_id, procs)
                    ),
                );
                let list = self.op.reservations.entry(group.clone()).or_default();
                list.retain(|r| r.instance != *instance_id);
                list.push(Reserved {
                    instance: instance_id.clone(),
                    member: member_id.clone(),
                    partitions,
                    since: now,
                    until: now + *delay,
                });
                self.op.last_reservation = Some(now);
                self.op.returned.insert(member_id.clone());
            }
            Event::ReservationReturned {
                group,
                instance_id,
                member_id,
                ..
            } => {
                self.log(now, format!("reservation of {instance_id} returned"));
                self.op.returned.insert(member_id.clone());
                if let Some(list) = self.op.reservations.get_mut(group) {
                    list.retain(|r| r.instance != *instance_id);
                }
                self.op.last_reservation = Some(now);
            }
            Event::ReservationEnded {
                group,
                instance_id,
                reason,
                ..
            } => {
                let mut early = None;
                if let Some(list) = self.op.reservations.get_mut(group) {
                    if let Some(r) = list.iter().find(|r| r.instance == *instance_id) {
                        if *reason == crate::core::ReservationEnd::Expired && now < r.until {
                            early = Some(r.clone());
                        }
                    }
                    list.retain(|r| r.instance != *instance_id);
                }
                self.log(
                    now,
                    format!("reservation of {instance_id} ended ({})", reason.as_str()),
                );
                if let Some(r) = early {
                    let msg = format!(
                        "the reservation for {} of {group} (member {}, made at t={}) ended as \
                         expired at t={}, before its delay ran out at t={}",
                        r.instance,
                        r.member,
                        self.t(r.since),
                        self.t(now),
                        self.t(r.until)
                    );
                    self.report_violation(now, Check::Reserved, "reservation ended early", msg);
                }
                self.op.last_reservation = Some(now);
            }
            _ => {}
        }
    }

    /// Checks 10 to 12 against a group as `DescribeGroup` shows it (the oracle's owners
    /// are already updated).
    pub(super) fn on_describe_operated(
        &mut self,
        now: Instant,
        group: &str,
        described: Option<&DescribeGroupResponse>,
        procs: &[Process],
    ) {
        let Some(d) = described else {
            if let Some(settings) = self.op.settings.remove(group) {
                if settings != default_settings() {
                    let msg = format!(
                        "{group}, configured {settings:?}, was forgotten by the coordinator"
                    );
                    self.report_violation(now, Check::RevocationCap, "settings forgotten", msg);
                }
            }
            self.op.asked.remove(group);
            self.op.leaving.remove(group);
            self.op.reservations.remove(group);
            return;
        };
        // Check 10: caps on revocations, as pushed to the members.
        let present: BTreeSet<&str> = d.members.iter().map(|m| m.member_id.as_str()).collect();
        let leaving: BTreeMap<String, BTreeSet<Tp>> = d
            .members
            .iter()
            .map(|m| (m.member_id.clone(), from_wire(&m.pending_revoke)))
            .collect();
        let settings = self
            .op
            .settings
            .get(group)
            .copied()
            .unwrap_or_else(default_settings);
        // What a member was asked and no longer is (a restart forgets what was pushed;
        // a newer target gives partitions back) is no longer in revocation.
        let mut asked = self.op.asked.remove(group).unwrap_or_default();
        if settings.max_revoking == 0 && settings.max_revoking_per_member == 0 {
            // Uncapped, the core asks everything a member must release at once, whether
            // or not it has a connection to push the set on: a member away when it was
            // asked hears it only when it comes back (its rebalance timeout running all
            // along), and a cap set meanwhile must count it as asked before, not new.
            for (m, l) in &leaving {
                if !l.is_empty() {
                    asked.insert(m.clone(), l.clone());
                }
            }
        }
        asked.retain(|m, a| {
            if let Some(l) = leaving.get(m) {
                a.retain(|tp| l.contains(tp));
            }
            present.contains(m.as_str()) && !a.is_empty()
        });
        self.op.leaving.insert(group.to_owned(), leaving);
        let newly = self.op.newly.remove(group).unwrap_or_default();
        let total: usize = asked.values().map(BTreeSet::len).sum();
        let mut problems = Vec::new();
        for (m, new) in &newly {
            let Some(a) = asked.get(m) else { continue };
            let cap = settings.max_revoking_per_member as usize;
            if cap > 0 && a.len() > cap {
                problems.push((
                    "member cap",
                    format!(
                        "{} was asked to release {new:?}, making {} in revocation against a \
                         per-member cap of {cap} (asked: {a:?})",
                        self.who(m, procs),
                        a.len()
                    ),
                ));
            }
        }
        let cap = settings.max_revoking as usize;
        if !newly.is_empty() && cap > 0 && total > cap {
            problems.push((
                "group cap",
                format!(
                    "{group} has {total} partitions in revocation after new ones were asked \
                     ({newly:?}), against a cap of {cap}: {asked:?}"
                ),
            ));
        }
        for (kind, msg) in problems {
            self.report_violation(now, Check::RevocationCap, kind, msg);
        }
        self.op.asked.insert(group.to_owned(), asked);
        // The settings answered are the settings in force, across restarts.
        if let Some(described) = d.operator.as_ref().map(|o| o.config) {
            if described != settings {
                let msg = format!(
                    "{group} was last configured {settings:?}, but the coordinator describes \
                     {described:?}"
                );
                self.report_violation(now, Check::RevocationCap, "settings forgotten", msg);
            }
        }
        // Check 11: reserved partitions are owned by nobody else.
        let owners = self.owners.get(group).cloned().unwrap_or_default();
        let reservations = self.op.reservations.get(group).cloned().unwrap_or_default();
        for r in &reservations {
            for tp in &r.partitions {
                let Some(owner) = owners.get(tp) else {
                    continue;
                };
                if self.instance_of(owner, procs).as_deref() == Some(&r.instance) {
                    continue;
                }
                let msg = format!(
                    "partition {}/{} of {group}, reserved at t={} for {} (departed member {}) \
                     until t={}, is owned by {}",
                    tp.0,
                    tp.1,
                    self.t(r.since),
                    r.instance,
                    r.member,
                    self.t(r.until),
                    self.who(owner, procs)
                );
                self.report_violation(now, Check::Reserved, "reserved partition owned", msg);
            }
        }
        // Check 12: drained members are granted nothing and stay drained.
        let drained = self.op.drained.get(group).cloned().unwrap_or_default();
        for (m, allowed) in &drained {
            let Some(desc) = d.members.iter().find(|x| x.member_id == *m) else {
                continue;
            };
            let owned = from_wire(&desc.owned);
            let extra: Vec<&Tp> = owned.difference(allowed).collect();
            if !extra.is_empty() {
                let msg = format!(
                    "drained {} owns {extra:?}, which it did not own when its drain was \
                     answered (it owned {allowed:?})",
                    self.who(m, procs)
                );
                self.report_violation(now, Check::Drained, "drained member granted", msg);
            }
            if desc.operator.as_ref().is_some_and(|o| !o.drained) {
                let msg = format!(
                    "{} was drained, and not undrained, but the coordinator describes it as \
                     not drained",
                    self.who(m, procs)
                );
                self.report_violation(now, Check::Drained, "drain forgotten", msg);
            }
        }
    }
}

/// The settings of a group nobody configured.
fn default_settings() -> GroupSettings {
    let c = GroupConfig::default();
    GroupSettings {
        departure_delay_ms: c.departure_delay_ms,
        max_revoking: c.max_revoking,
        max_revoking_per_member: c.max_revoking_per_member,
        balance: u8::from(c.balance == Balance::Load),
        churn_budget_permille: c.churn_budget_permille,
        imbalance_permille: c.imbalance_permille,
    }
}

/// What a process declares when it joins: a label (its host), a rack, a capacity and,
/// now and then, the preferred racks of its topics' partitions.
pub(super) fn placement(
    label: usize,
    rack: usize,
    capacity: u32,
    topics: Option<&[(String, u32)]>,
) -> Box<JoinPlacement> {
    Box::new(JoinPlacement {
        label: format!("h{label}"),
        rack: format!("r{rack}"),
        capacity,
        topic_racks: topics
            .unwrap_or_default()
            .iter()
            .map(|(topic, n)| rollcall_protocol::TopicRacks {
                topic: topic.clone(),
                racks: (0..*n)
                    .map(|i| {
                        if i % 4 == 3 {
                            String::new()
                        } else {
                            format!("r{}", i % 3)
                        }
                    })
                    .collect(),
            })
            .collect(),
    })
}

/// A partition's load as the application reports it: skewed across partitions and
/// changing every ten seconds.
pub(super) fn load(topic: &str, partition: u32, elapsed: Duration) -> PartitionLoad {
    let epoch = elapsed.as_secs() / 10;
    let base = 1.0 + f64::from((partition * 7 + topic.len() as u32 * 3) % 11);
    let swing = 1.0 + ((epoch + u64::from(partition)) % 3) as f64;
    PartitionLoad {
        topic: topic.to_owned(),
        partition,
        load: base * swing,
    }
}
