//! The JSON form of a [`GroupSnapshot`] in the durable store.
//!
//! The store's own types, not the core's: the core's records can change shape freely,
//! and the file format changes only here, where a field added after the first release
//! gets a default so older files still load.

use serde::{Deserialize, Serialize};

use crate::core::{
    Balance, GroupConfig, GroupSnapshot, HeldSnapshot, InstanceSnapshot, MemberSnapshot,
    OperatorSnapshot, WaitSnapshot,
};

/// Encodes `snapshot` as JSON, appending to `out`.
pub(crate) fn encode(snapshot: &GroupSnapshot, out: &mut Vec<u8>) -> serde_json::Result<()> {
    serde_json::to_writer(out, &Group::from(snapshot))
}

/// Decodes a snapshot [`encode`] wrote (or an older version of it).
pub(crate) fn decode(json: &[u8]) -> serde_json::Result<GroupSnapshot> {
    serde_json::from_slice::<Group>(json).map(GroupSnapshot::from)
}

#[derive(Serialize, Deserialize)]
struct Group {
    group: String,
    generation: u32,
    topics: Vec<(String, u32)>,
    members: Vec<Member>,
    #[serde(default)]
    held: Vec<Held>,
    #[serde(default)]
    rebalance_pending: Option<String>,
    #[serde(default)]
    instances: Vec<Instance>,
    /// Empty in snapshots written before groups chose their detector.
    #[serde(default)]
    detector: String,
    /// Absent when nobody steered the group, and in snapshots written before operators
    /// could.
    #[serde(default, skip_serializing_if = "Operator::is_empty")]
    operator: Operator,
}

#[derive(Serialize, Deserialize, Default, PartialEq)]
struct Operator {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    config: Option<Config>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    drained_members: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    drained_labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    placements: Vec<(String, String, String, u32)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    preferred_racks: Vec<(u32, Vec<String>)>,
}

impl Operator {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A group's settings; a field absent takes its default.
#[derive(Serialize, Deserialize, Default, PartialEq)]
struct Config {
    #[serde(default)]
    departure_delay_ms: u32,
    #[serde(default)]
    max_revoking: u32,
    #[serde(default)]
    max_revoking_per_member: u32,
    /// "count" or "load"; anything else reads as "count".
    #[serde(default)]
    balance: String,
    #[serde(default = "default_permille")]
    churn_budget_permille: u16,
    #[serde(default = "default_permille")]
    imbalance_permille: u16,
}

fn default_permille() -> u16 {
    GroupConfig::DEFAULT_CHURN_BUDGET_PERMILLE
}

impl From<&OperatorSnapshot> for Operator {
    fn from(o: &OperatorSnapshot) -> Self {
        Self {
            config: o.config.map(|c| Config {
                departure_delay_ms: c.departure_delay_ms,
                max_revoking: c.max_revoking,
                max_revoking_per_member: c.max_revoking_per_member,
                balance: c.balance.as_str().to_owned(),
                churn_budget_permille: c.churn_budget_permille,
                imbalance_permille: c.imbalance_permille,
            }),
            drained_members: o.drained_members.clone(),
            drained_labels: o.drained_labels.clone(),
            placements: o.placements.clone(),
            preferred_racks: o.preferred_racks.clone(),
        }
    }
}

impl From<Operator> for OperatorSnapshot {
    fn from(o: Operator) -> Self {
        Self {
            config: o.config.map(|c| GroupConfig {
                departure_delay_ms: c.departure_delay_ms,
                max_revoking: c.max_revoking,
                max_revoking_per_member: c.max_revoking_per_member,
                balance: c.balance.parse().unwrap_or(Balance::Count),
                churn_budget_permille: c.churn_budget_permille,
                imbalance_permille: c.imbalance_permille,
            }),
            drained_members: o.drained_members,
            drained_labels: o.drained_labels,
            placements: o.placements,
            preferred_racks: o.preferred_racks,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Held {
    remaining_ms: u64,
    #[serde(default)]
    member_id: String,
    partitions: Vec<(u32, u32)>,
    /// Absent for a hold of a member's lease, and in snapshots written before
    /// reservations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reserved_for: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Instance {
    instance_id: String,
    epoch: u64,
    member_id: String,
    #[serde(default)]
    join_token: u64,
    #[serde(default)]
    fenced_tokens: Vec<u64>,
}

#[derive(Serialize, Deserialize)]
struct Member {
    member_id: String,
    instance_id: Option<String>,
    client_id: String,
    join_token: u64,
    session_timeout_ms: u32,
    progress_timeout_ms: u32,
    rebalance_timeout_ms: u32,
    #[serde(default)]
    lease_timeout_ms: u32,
    subscription: Vec<u32>,
    generation: u32,
    owned: Vec<(u32, u32)>,
    target: Vec<(u32, u32)>,
    #[serde(default)]
    lease_remaining_ms: Option<u64>,
    #[serde(default)]
    stood_down: bool,
    /// Absent when empty, and in snapshots written before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    released: Vec<(u32, u32)>,
    /// Absent when false, and in snapshots written before it was kept.
    #[serde(default, skip_serializing_if = "is_false")]
    restricted: bool,
    /// The wait for progress; absent in snapshots written before waits were kept (the
    /// restore then starts it afresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    progress: Option<Wait>,
    /// Each revocation's wait; absent when there is none, and in snapshots written
    /// before waits were kept (the restore then starts each afresh).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    revoking: Vec<Revoking>,
}

/// A wait that can expel a member ([`WaitSnapshot`]); fields at their default are left
/// out.
#[derive(Serialize, Deserialize)]
struct Wait {
    #[serde(default, skip_serializing_if = "is_zero")]
    counter: u64,
    waited_ms: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    credit_ms: u64,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    restores: u32,
}

/// A partition a member is asked to release, with its wait.
#[derive(Serialize, Deserialize)]
struct Revoking {
    tp: (u32, u32),
    #[serde(flatten)]
    wait: Wait,
}

fn is_false(b: &bool) -> bool {
    !b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl From<WaitSnapshot> for Wait {
    fn from(w: WaitSnapshot) -> Self {
        Self {
            counter: w.counter,
            waited_ms: w.waited_ms,
            credit_ms: w.credit_ms,
            restores: w.restores,
        }
    }
}

impl From<Wait> for WaitSnapshot {
    fn from(w: Wait) -> Self {
        Self {
            counter: w.counter,
            waited_ms: w.waited_ms,
            credit_ms: w.credit_ms,
            restores: w.restores,
        }
    }
}

impl From<&GroupSnapshot> for Group {
    fn from(s: &GroupSnapshot) -> Self {
        Self {
            group: s.group.clone(),
            generation: s.generation,
            topics: s.topics.clone(),
            members: s.members.iter().map(Member::from).collect(),
            held: s
                .held
                .iter()
                .map(|h| Held {
                    remaining_ms: h.remaining_ms,
                    member_id: h.member_id.clone(),
                    partitions: h.partitions.clone(),
                    reserved_for: h.reserved_for.clone(),
                })
                .collect(),
            rebalance_pending: s.rebalance_pending.clone(),
            detector: s.detector.clone(),
            operator: s
                .operator
                .as_deref()
                .map(Operator::from)
                .unwrap_or_default(),
            instances: s
                .instances
                .iter()
                .map(|i| Instance {
                    instance_id: i.instance_id.clone(),
                    epoch: i.epoch,
                    member_id: i.member_id.clone(),
                    join_token: i.join_token,
                    fenced_tokens: i.fenced_tokens.clone(),
                })
                .collect(),
        }
    }
}

impl From<Group> for GroupSnapshot {
    fn from(g: Group) -> Self {
        Self {
            group: g.group,
            generation: g.generation,
            topics: g.topics,
            members: g.members.into_iter().map(MemberSnapshot::from).collect(),
            held: g
                .held
                .into_iter()
                .map(|h| HeldSnapshot {
                    remaining_ms: h.remaining_ms,
                    member_id: h.member_id,
                    partitions: h.partitions,
                    reserved_for: h.reserved_for,
                })
                .collect(),
            rebalance_pending: g.rebalance_pending,
            detector: g.detector,
            operator: Some(OperatorSnapshot::from(g.operator))
                .filter(|o| !o.is_empty())
                .map(Box::new),
            instances: g
                .instances
                .into_iter()
                .map(|i| InstanceSnapshot {
                    instance_id: i.instance_id,
                    epoch: i.epoch,
                    member_id: i.member_id,
                    join_token: i.join_token,
                    fenced_tokens: i.fenced_tokens,
                })
                .collect(),
        }
    }
}

impl From<&MemberSnapshot> for Member {
    fn from(m: &MemberSnapshot) -> Self {
        Self {
            member_id: m.member_id.clone(),
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            join_token: m.join_token,
            session_timeout_ms: m.session_timeout_ms,
            progress_timeout_ms: m.progress_timeout_ms,
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            lease_timeout_ms: m.lease_timeout_ms,
            subscription: m.subscription.clone(),
            generation: m.generation,
            owned: m.owned.clone(),
            target: m.target.clone(),
            lease_remaining_ms: m.lease_remaining_ms,
            stood_down: m.stood_down,
            released: m.released.clone(),
            restricted: m.restricted,
            progress: m.progress.map(Wait::from),
            revoking: m
                .revoking
                .iter()
                .map(|&(tp, wait)| Revoking {
                    tp,
                    wait: wait.into(),
                })
                .collect(),
        }
    }
}

impl From<Member> for MemberSnapshot {
    fn from(m: Member) -> Self {
        Self {
            member_id: m.member_id,
            instance_id: m.instance_id,
            client_id: m.client_id,
            join_token: m.join_token,
            session_timeout_ms: m.session_timeout_ms,
            progress_timeout_ms: m.progress_timeout_ms,
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            lease_timeout_ms: m.lease_timeout_ms,
            subscription: m.subscription,
            generation: m.generation,
            owned: m.owned,
            target: m.target,
            lease_remaining_ms: m.lease_remaining_ms,
            stood_down: m.stood_down,
            released: m.released,
            restricted: m.restricted,
            progress: m.progress.map(WaitSnapshot::from),
            revoking: m
                .revoking
                .into_iter()
                .map(|r| (r.tp, r.wait.into()))
                .collect(),
        }
    }
}
