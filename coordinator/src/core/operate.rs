//! An operator's controls: Drain (move a member's partitions off it while it stays in
//! the group) and AlterGroupConfig (a group's settings), and the member placements and
//! partition loads that members declare and report for them.

use std::collections::BTreeSet;
use std::time::Instant;

use rollcall_protocol::{
    AlterGroupConfigRequest, AlterGroupConfigResponse, ApiKey, DrainRequest, DrainResponse,
    ErrorCode, GroupSettings, JoinPlacement, PartitionLoad, Response,
};

use super::group::{Group, Member, Placement};
use super::{refuse, Balance, ConnId, Coordinator, Event, GroupConfig, RebalanceCause};
use super::{MAX_MEMBER_ID_BYTES, MAX_NAME_BYTES};

/// The longest departure delay a group may be set to: an hour.
pub const MAX_DEPARTURE_DELAY_MS: u32 = 3_600_000;

/// Who asks for an operator's request: the shell says, from its access rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Authority {
    /// An identity allowed to administer the group (or a coordinator without access
    /// rules): any drain, any settings.
    #[default]
    Operator,
    /// A member's identity only: it may drain or undrain a member bound to its own
    /// connection (a graceful scale-in), nothing else.
    Member,
}

impl Group {
    /// Whether `m` is drained: by its id, its static instance, or its label.
    pub(crate) fn is_drained(&self, m: &Member) -> bool {
        if self.drained_members.is_empty() && self.drained_labels.is_empty() {
            return false;
        }
        self.drained_members.contains(&*m.id)
            || m.instance_id
                .as_deref()
                .is_some_and(|i| self.drained_members.contains(i))
            || m.about
                .placement
                .as_deref()
                .is_some_and(|p| !p.label.is_empty() && self.drained_labels.contains(&p.label))
    }

    /// Members drained now.
    pub(crate) fn drained_count(&self) -> usize {
        if self.drained_members.is_empty() && self.drained_labels.is_empty() {
            return 0;
        }
        self.members.values().filter(|m| self.is_drained(m)).count()
    }

    /// Keeps the loads member `at` (its place in the roster) reported for partitions it
    /// owns; the others are ignored.
    pub(crate) fn record_loads(&mut self, at: usize, loads: &[PartitionLoad]) {
        let Some((_, m)) = self.members.get_index(at) else {
            return;
        };
        let owned: Vec<_> = loads
            .iter()
            .filter_map(|l| {
                let tp = self.resolve(&l.topic, l.partition)?;
                m.owned.contains(&tp).then_some((tp, l.load))
            })
            .collect();
        self.loads.extend(owned);
    }

    /// The sum of the loads last reported for the partitions `m` owns.
    pub(crate) fn load_of(&self, m: &Member) -> f64 {
        if self.loads.is_empty() {
            return 0.0;
        }
        m.owned.iter().filter_map(|tp| self.loads.get(tp)).sum()
    }

    /// Applies what a join declared about where the member runs: its placement, and
    /// the preferred racks of its topics (the last join that declares them wins).
    pub(crate) fn apply_placement(&mut self, member: &str, p: &JoinPlacement) {
        for t in &p.topic_racks {
            if let Some(&idx) = self.topic_index.get(&t.topic) {
                let racks: Box<[Box<str>]> = t.racks.iter().map(|r| r.as_str().into()).collect();
                let topic = &mut self.topics[idx as usize];
                if topic.preferred_racks.as_deref() != Some(&*racks) {
                    topic.preferred_racks = Some(racks);
                    self.snapshot_dirty = true;
                }
            }
        }
        if let Some(m) = self.members.get_mut(member) {
            let placement = Placement::boxed(&p.label, &p.rack, p.capacity);
            if m.about.placement != placement {
                m.about.placement = placement;
                self.snapshot_dirty = true;
            }
        }
    }

    /// The settings as the wire carries them.
    pub(crate) fn settings(&self) -> GroupSettings {
        settings_of(&self.config)
    }
}

fn settings_of(c: &GroupConfig) -> GroupSettings {
    GroupSettings {
        departure_delay_ms: c.departure_delay_ms,
        max_revoking: c.max_revoking,
        max_revoking_per_member: c.max_revoking_per_member,
        balance: match c.balance {
            Balance::Count => 0,
            Balance::Load => 1,
        },
        churn_budget_permille: c.churn_budget_permille,
        imbalance_permille: c.imbalance_permille,
    }
}

/// A Join's placement, checked: names within bounds, and preferred racks only for
/// topics of the subscription, one per partition.
pub(crate) fn check_placement(
    p: &JoinPlacement,
    subscription: &[(String, u32)],
) -> Result<(), String> {
    if p.label.len() > MAX_NAME_BYTES || p.rack.len() > MAX_NAME_BYTES {
        return Err(format!("label and rack are at most {MAX_NAME_BYTES} bytes"));
    }
    let mut seen = BTreeSet::new();
    for t in &p.topic_racks {
        let Some((_, count)) = subscription.iter().find(|(name, _)| *name == t.topic) else {
            return Err(format!(
                "preferred racks for topic {:?}, which the subscription does not name",
                t.topic
            ));
        };
        if !seen.insert(t.topic.as_str()) {
            return Err(format!("preferred racks for topic {:?} twice", t.topic));
        }
        if t.racks.len() != *count as usize {
            return Err(format!(
                "topic {:?} has {count} partitions, its preferred racks {}",
                t.topic,
                t.racks.len()
            ));
        }
        if t.racks.iter().any(|r| r.len() > MAX_NAME_BYTES) {
            return Err(format!("racks are at most {MAX_NAME_BYTES} bytes"));
        }
    }
    Ok(())
}

impl Coordinator {
    /// Drains (or undrains) a member or a label, for an operator, or a member bound to
    /// `conn` for itself. A change rebalances the group: a drained member is given
    /// nothing and its partitions move with the usual revoke, acknowledge and grant.
    pub(in crate::core) fn drain(
        &mut self,
        now: Instant,
        conn: ConnId,
        r: DrainRequest,
        authority: Authority,
    ) -> Response {
        let key = ApiKey::Drain;
        if r.member_id.is_empty() == r.label.is_empty() {
            return refuse(
                key,
                ErrorCode::InvalidRequest,
                "a drain names exactly one of a member id and a label",
            );
        }
        if r.member_id.len() > MAX_MEMBER_ID_BYTES || r.label.len() > MAX_NAME_BYTES {
            return refuse(
                key,
                ErrorCode::InvalidRequest,
                "member id or label too long",
            );
        }
        let own = !r.member_id.is_empty()
            && self.bound.get(&conn).is_some_and(|list| {
                list.iter()
                    .any(|(g, m)| **g == *r.group && **m == *r.member_id)
            });
        if authority == Authority::Member && !own {
            return refuse(
                key,
                ErrorCode::NotAuthorized,
                "a member may drain only itself, on its own connection",
            );
        }
        let (groups, mut ctx) = self.parts(now);
        let Some(g) = groups.get_mut(r.group.as_str()) else {
            return refuse(
                key,
                ErrorCode::UnknownGroup,
                format!("no group {:?}", r.group),
            );
        };
        // Forget drained ids of members that are gone (a static instance's stays).
        let (members, instances) = (&g.members, &g.instances);
        g.drained_members
            .retain(|d| members.contains_key(d) || instances.contains_key(&**d));
        let before: BTreeSet<&str> = g
            .members
            .values()
            .filter(|m| g.is_drained(m))
            .map(|m| &*m.id)
            .collect();
        let before: BTreeSet<String> = before.into_iter().map(str::to_owned).collect();
        if !r.member_id.is_empty() {
            let Some(m) = g.members.get(&r.member_id) else {
                return Self::member_gone(Some(g), key, &r.member_id);
            };
            let id: Box<str> = r.member_id.as_str().into();
            let instance: Option<Box<str>> = m.instance_id.clone();
            if r.drained {
                g.drained_members.insert(id);
                if let Some(i) = instance {
                    g.drained_members.insert(i);
                }
            } else {
                g.drained_members.remove(&id);
                if let Some(i) = instance {
                    g.drained_members.remove(&i);
                }
            }
        } else if r.drained {
            g.drained_labels.insert(r.label.as_str().into());
        } else {
            g.drained_labels.remove(r.label.as_str());
        }
        g.snapshot_dirty = true;
        let after: BTreeSet<String> = g
            .members
            .values()
            .filter(|m| g.is_drained(m))
            .map(|m| m.id.to_string())
            .collect();
        let changed: Vec<String> = before.symmetric_difference(&after).cloned().collect();
        if r.drained {
            for id in &changed {
                g.hold_back_drained(id);
            }
        }
        if !changed.is_empty() {
            g.trigger_rebalance(&mut ctx, RebalanceCause::Operator);
            ctx.event(Event::MembersDrained {
                group: r.group.clone(),
                members: changed.clone(),
                drained: r.drained,
            });
        }
        let group = r.group.clone();
        self.note_dirty(&group);
        Response::Drain(DrainResponse { members: changed })
    }

    /// Reads, or changes, a group's settings. Setting something on a group that does
    /// not exist creates it, empty: it is kept (like one with offsets) while its
    /// settings are not the default.
    pub(in crate::core) fn alter_group_config(
        &mut self,
        now: Instant,
        r: AlterGroupConfigRequest,
        authority: Authority,
    ) -> Response {
        let key = ApiKey::AlterGroupConfig;
        let reading = r.set_mask() == 0;
        if authority == Authority::Member && !reading {
            return refuse(
                key,
                ErrorCode::NotAuthorized,
                "not authorized to change the group's settings",
            );
        }
        if r.group.is_empty() || r.group.len() > MAX_NAME_BYTES {
            return refuse(
                key,
                ErrorCode::InvalidRequest,
                format!("group id must be 1 to {MAX_NAME_BYTES} bytes"),
            );
        }
        let current = self.groups.get(r.group.as_str()).map(|g| g.config);
        if reading {
            return match current {
                Some(c) => Response::AlterGroupConfig(AlterGroupConfigResponse {
                    config: settings_of(&c),
                }),
                None => refuse(
                    key,
                    ErrorCode::UnknownGroup,
                    format!("no group {:?}", r.group),
                ),
            };
        }
        let mut config = current.unwrap_or_default();
        if let Some(ms) = r.departure_delay_ms {
            if ms > MAX_DEPARTURE_DELAY_MS {
                return refuse(
                    key,
                    ErrorCode::InvalidRequest,
                    format!("departure delay {ms} ms is above the maximum of {MAX_DEPARTURE_DELAY_MS} ms (1 h)"),
                );
            }
            config.departure_delay_ms = ms;
        }
        if let Some(n) = r.max_revoking {
            config.max_revoking = n;
        }
        if let Some(n) = r.max_revoking_per_member {
            config.max_revoking_per_member = n;
        }
        if let Some(b) = r.balance {
            config.balance = match b {
                0 => Balance::Count,
                1 => Balance::Load,
                other => {
                    return refuse(
                        key,
                        ErrorCode::InvalidRequest,
                        format!("unknown balance {other}: 0 (count) or 1 (load)"),
                    )
                }
            };
        }
        for (name, value, field) in [
            (
                "churn budget",
                r.churn_budget_permille,
                &mut config.churn_budget_permille,
            ),
            (
                "imbalance",
                r.imbalance_permille,
                &mut config.imbalance_permille,
            ),
        ] {
            if let Some(v) = value {
                if v > 1000 {
                    return refuse(
                        key,
                        ErrorCode::InvalidRequest,
                        format!("{name} {v}\u{2030} is above 1000\u{2030}"),
                    );
                }
                *field = v;
            }
        }
        if current.is_none() && config.is_default() {
            // Nothing to keep: a group nobody configured has these.
            return Response::AlterGroupConfig(AlterGroupConfigResponse {
                config: settings_of(&config),
            });
        }
        if current.is_none() {
            if !self.groups.contains_key(r.group.as_str())
                && self.totals.groups() >= self.config.max_groups
            {
                let max = self.config.max_groups;
                return self.quota_refused(
                    key,
                    &r.group,
                    super::Quota::Groups,
                    ErrorCode::TooManyGroups,
                    format!("the coordinator has its maximum of {max} groups; group {:?} cannot be created", r.group),
                );
            }
            let floor = self.floor_of(&r.group);
            let name: std::sync::Arc<str> = r.group.as_str().into();
            let group = Group::new(name.clone(), floor, &self.config);
            self.groups.insert(name, group);
        }
        let (groups, mut ctx) = self.parts(now);
        let Some(g) = groups.get_mut(r.group.as_str()) else {
            return refuse(key, ErrorCode::Internal, "group vanished");
        };
        if g.config != config {
            let old = g.config;
            g.config = config;
            g.snapshot_dirty = true;
            ctx.event(Event::GroupConfigChanged {
                group: r.group.clone(),
            });
            // What the assignor balances changes the target. Caps that changed ask
            // the revocations they now leave room for (or, lifted, all that wait) at
            // once; a delay acts as departures come. Load reports are weighed afresh.
            g.reset_load_check();
            if !g.members.is_empty() {
                if old.balance != config.balance {
                    g.trigger_rebalance(&mut ctx, RebalanceCause::Operator);
                }
                if (old.max_revoking, old.max_revoking_per_member)
                    != (config.max_revoking, config.max_revoking_per_member)
                {
                    g.reconcile(&mut ctx);
                }
            }
        }
        let response = Response::AlterGroupConfig(AlterGroupConfigResponse {
            config: g.settings(),
        });
        let disposable = g.is_disposable();
        let group = r.group.clone();
        self.note_dirty(&group);
        if disposable {
            // Set back to the default on a group that holds nothing else.
            self.dispose_if_unused(now, &group);
        }
        response
    }
}
