//! What members and operators declare that steers the assignment, as the assignor takes
//! it: rack names numbered, reported loads laid out by topic, and the check that lets a
//! load report start a rebalance only when the group is out of balance.
//!
//! Rack names are numbered afresh for every assignment, in ascending order of the names
//! the members declare (so the numbering is a function of the group's state, never of
//! hash-map order); a partition preferring a rack no member is in prefers none. When no
//! member declares a rack and load is not balanced, nothing here allocates.

use std::time::{Duration, Instant};

use super::super::assignor::{self, AssignmentInput, AssignorMember, Policy, NO_RACK};
use super::super::RebalanceCause;
use super::{Balance, Ctx, Group, Member};

/// A load report is weighed against the group's balance at most this often.
pub(crate) const LOAD_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// After checks find the group out of balance but the assignor would move nothing (the
/// balance is as good as the partitions allow), the next check waits twice as long each
/// time, up to 2^this intervals.
const LOAD_CHECK_MAX_BACKOFF: u32 = 4;

/// The steering data of one assignment, owned (so the group can be changed while it is
/// held): by roster position, each member's rack number; by topic index, each
/// partition's preferred rack and reported load. Every vector is empty when nothing
/// is declared.
#[derive(Debug, Default)]
pub(crate) struct Steering {
    /// By roster position ([`NO_RACK`]: none); empty when no member declares a rack.
    pub(crate) member_racks: Vec<u32>,
    /// By topic index; a topic without preferences has an empty vector.
    pub(crate) preferred_racks: Vec<Vec<u32>>,
    /// By topic index; a topic without reports has an empty vector, and a partition
    /// without one is NaN (the assignor counts it as the mean).
    pub(crate) loads: Vec<Vec<f64>>,
}

impl Steering {
    /// Member `i`'s rack number.
    pub(crate) fn rack_of(&self, i: usize) -> u32 {
        self.member_racks.get(i).copied().unwrap_or(NO_RACK)
    }

    /// The preferred rack of `tp`, if it has one.
    pub(crate) fn preferred(&self, topic: u32, partition: u32) -> Option<u32> {
        self.preferred_racks
            .get(topic as usize)?
            .get(partition as usize)
            .copied()
            .filter(|&r| r != NO_RACK)
    }
}

/// Load-check bookkeeping (in memory only).
#[derive(Debug, Default)]
pub(crate) struct LoadCheck {
    /// No check before this.
    next_at: Option<Instant>,
    /// Consecutive checks that found an imbalance the assignor could not improve.
    futile: u32,
}

/// A member's capacity as the assignor weighs it (at least 1).
pub(crate) fn capacity_of(m: &Member) -> u32 {
    m.about.placement.as_ref().map_or(1, |p| p.capacity.max(1))
}

/// A member's rack, if it declared one.
fn rack_name(m: &Member) -> Option<&str> {
    m.about
        .placement
        .as_deref()
        .map(|p| &*p.rack)
        .filter(|r| !r.is_empty())
}

impl Group {
    /// Numbers the racks and lays out the loads for an assignment.
    pub(crate) fn steering(&self) -> Steering {
        let mut s = Steering::default();
        if self.members.values().any(|m| rack_name(m).is_some()) {
            let mut names: Vec<&str> = self.members.values().filter_map(|m| rack_name(m)).collect();
            names.sort_unstable();
            names.dedup();
            let number = |name: &str| names.binary_search(&name).map_or(NO_RACK, |i| i as u32);
            s.member_racks = self
                .members
                .values()
                .map(|m| rack_name(m).map_or(NO_RACK, number))
                .collect();
            if self.topics.iter().any(|t| t.preferred_racks.is_some()) {
                s.preferred_racks = self
                    .topics
                    .iter()
                    .map(|t| {
                        t.preferred_racks
                            .as_deref()
                            .map(|racks| racks.iter().map(|r| number(r)).collect())
                            .unwrap_or_default()
                    })
                    .collect();
            }
        }
        if self.config.balance == Balance::Load && !self.loads.is_empty() {
            s.loads = vec![Vec::new(); self.topics.len()];
            for (tp, &load) in &self.loads {
                let Some(topic) = self.topics.get(tp.topic as usize) else {
                    continue;
                };
                if tp.partition >= topic.partitions {
                    continue;
                }
                let row = &mut s.loads[tp.topic as usize];
                if row.is_empty() {
                    row.resize(topic.partitions as usize, f64::NAN);
                }
                row[tp.partition as usize] = load;
            }
        }
        s
    }

    /// Partition counts by topic index, as the assignor takes them (0 for a topic
    /// nobody subscribes to any more).
    pub(crate) fn topic_counts(&self) -> Vec<u32> {
        self.topics
            .iter()
            .map(|t| if t.subscribers > 0 { t.partitions } else { 0 })
            .collect()
    }

    /// The members as the assignor sees them, in roster order.
    pub(crate) fn assignor_members<'a>(&'a self, s: &Steering) -> Vec<AssignorMember<'a>> {
        self.members
            .values()
            .enumerate()
            .map(|(i, m)| AssignorMember {
                capacity: capacity_of(m),
                excluded: self.is_drained(m),
                rack: s.rack_of(i),
                ..AssignorMember::new(&m.id, &m.subscription, m.owned.as_slice())
            })
            .collect()
    }

    /// The policy the operator set.
    pub(crate) fn policy(&self) -> Policy {
        Policy {
            balance: self.config.balance,
            churn_budget_permille: self.config.churn_budget_permille,
        }
    }

    /// The settings changed: the next load report is weighed at once.
    pub(crate) fn reset_load_check(&mut self) {
        self.load_check = None;
    }

    /// After a load report: with load balance, no rebalance pending or in progress and
    /// no partition reserved for a departed instance (its return, or the end of its
    /// delay, decides first), at most once per [`LOAD_CHECK_INTERVAL`], asks for a rebalance if the
    /// most loaded member (per unit of capacity) is more than the group's threshold
    /// above the balanced figure and the assignor would move something for it.
    pub(crate) fn consider_loads(&mut self, ctx: &mut Ctx<'_>) {
        if self.config.balance != Balance::Load
            || self.pending.is_some()
            || self.reconciling.is_some()
            || self.members.is_empty()
            || self.loads.is_empty()
            || self.partitions_reserved() > 0
        {
            return;
        }
        let now = ctx.now;
        let check = self.load_check.get_or_insert_with(Box::default);
        if check.next_at.is_some_and(|at| now < at) {
            return;
        }
        check.next_at = Some(now + LOAD_CHECK_INTERVAL);
        let threshold = f64::from(self.config.imbalance_permille) / 1000.0;
        let s = self.steering();
        let topics = self.topic_counts();
        let members = self.assignor_members(&s);
        let preferred: Vec<&[u32]> = s.preferred_racks.iter().map(Vec::as_slice).collect();
        let loads: Vec<&[f64]> = s.loads.iter().map(Vec::as_slice).collect();
        let input = AssignmentInput {
            preferred_racks: &preferred,
            loads: &loads,
            policy: self.policy(),
            ..AssignmentInput::new(&topics, &members)
        };
        if assignor::imbalance(&input) <= threshold {
            if let Some(check) = &mut self.load_check {
                check.futile = 0;
            }
            return;
        }
        // Out of balance: worth a generation only if the assignor would move something
        // (it may not, when the churn budget or a heavy partition stands in the way).
        let targets = ctx.assignor.assign(&input);
        let moves = members
            .iter()
            .zip(&targets)
            .any(|(m, target)| target.iter().any(|tp| m.owned.binary_search(tp).is_err()));
        drop(members);
        let Some(check) = &mut self.load_check else {
            return;
        };
        if !moves {
            check.futile = (check.futile + 1).min(LOAD_CHECK_MAX_BACKOFF);
            check.next_at = Some(now + LOAD_CHECK_INTERVAL * (1 << check.futile));
            return;
        }
        check.futile = 0;
        self.trigger_rebalance(ctx, RebalanceCause::LoadImbalance);
    }
}
