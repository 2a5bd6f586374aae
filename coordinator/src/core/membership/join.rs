//! Join, step by step: validation (in `validate.rs`), a rejoin naming a member that is
//! gone, the group quota, the group and its detector, a rejoin of a live member, a
//! static instance's replacement, the member quotas, and the new member.

use std::sync::Arc;
use std::time::Instant;

use rollcall_protocol::{ApiKey, ErrorCode, JoinRequest, JoinResponse, Response};

use super::super::group::{Ctx, Group, Timeouts};
use super::super::{refuse, ConnId, Coordinator, CoreConfig, Event, Output, Quota};
use super::super::{DetectorKind, RebalanceCause};
use super::{heartbeat_interval_ms, quota_event, refusal_response};

/// What the coordinator's quotas leave a group, besides what it already holds.
#[derive(Clone, Copy)]
struct Room {
    /// Partitions the group's subscriptions may reach.
    partitions: u64,
    /// Members (or remembered static instances) of every other group.
    others_members: usize,
}

impl Coordinator {
    pub(in crate::core) fn join(&mut self, now: Instant, conn: ConnId, r: JoinRequest) -> Response {
        self.heard_on(now, conn, &r.group);
        let timeouts = match self.validate_join(&r) {
            Ok(t) => t,
            Err(resp) => return resp,
        };
        let subscription: Vec<(String, u32)> = r
            .subscription
            .iter()
            .map(|t| (t.topic.clone(), t.partitions))
            .collect();
        if let Err(resp) = self.check_named_member(&r) {
            return resp;
        }
        if let Err(resp) = self.check_group_quota(&r) {
            return resp;
        }
        let others = self.usage_besides(&r.group);
        let room = Room {
            partitions: self.config.max_partitions.saturating_sub(others.partitions),
            others_members: others.members,
        };
        let floor = self.floor_of(&r.group);
        let (groups, mut ctx) = self.parts(now);
        let group = match open_group(groups, ctx.config, floor, &r) {
            Ok(group) => group,
            Err(resp) => return resp,
        };
        match live_member(group, &r, &subscription) {
            Err(resp) => return resp,
            Ok(Some(id)) => {
                let response = Self::rejoin(
                    group,
                    &mut ctx,
                    conn,
                    &id,
                    &subscription,
                    timeouts,
                    room.partitions,
                );
                if let (Response::Join(_), Some(p)) = (&response, r.placement.as_deref()) {
                    // A new label may drain the member, or undrain it.
                    let drained = |g: &Group| g.members.get(&id).is_some_and(|m| g.is_drained(m));
                    let before = drained(group);
                    group.apply_placement(&id, p);
                    let after = drained(group);
                    if after != before {
                        if after {
                            group.hold_back_drained(&id);
                        }
                        group.trigger_rebalance(&mut ctx, RebalanceCause::Operator);
                    }
                }
                return response;
            }
            Ok(None) => {}
        }
        let replacing = match replaced_instance(group, &r) {
            Ok(replacing) => replacing,
            Err(resp) => return resp,
        };
        if let Err(resp) = check_room(group, &mut ctx, &r, &subscription, &replacing, room) {
            return resp;
        }
        self.add_member(now, conn, &r, &subscription, timeouts, replacing)
    }

    /// A rejoin naming a member that is gone is told so (a stale incarnation of a
    /// static instance is fenced): the member's partitions are lost, and it joins
    /// again afresh, or gives up if fenced.
    fn check_named_member(&self, r: &JoinRequest) -> Result<(), Response> {
        if let Some(old) = &r.member_id {
            let group = self.groups.get(r.group.as_str());
            let known = group.is_some_and(|g| g.members.contains_key(old.as_str()));
            if !known {
                return Err(Self::member_gone(group, ApiKey::Join, old));
            }
        }
        Ok(())
    }

    /// A join that would create a group past the coordinator's group quota is refused.
    fn check_group_quota(&mut self, r: &JoinRequest) -> Result<(), Response> {
        let max_groups = self.config.max_groups;
        if !self.groups.contains_key(r.group.as_str()) && self.totals.groups() >= max_groups {
            return Err(self.quota_refused(
                ApiKey::Join,
                &r.group,
                Quota::Groups,
                ErrorCode::TooManyGroups,
                format!("the coordinator has its maximum of {max_groups} groups; group {:?} cannot be created", r.group),
            ));
        }
        Ok(())
    }

    /// The id of the next new member. Static member ids name their instance, so a
    /// request from any older incarnation can be fenced from the id alone (see
    /// `Group::gone_reason`).
    fn next_member_id(&mut self, instance_id: Option<&str>) -> Arc<str> {
        let c = &self.config;
        let n = self.next_member;
        self.next_member += 1;
        Arc::from(match instance_id {
            Some(instance) => format!("{instance}#{}{n}{}", c.member_id_prefix, c.member_id_suffix),
            None => format!("{}{n}{}", c.member_id_prefix, c.member_id_suffix),
        })
    }

    /// Adds a new member (in place of `replacing`, the static instance's member it
    /// takes over, if any), and answers its join.
    fn add_member(
        &mut self,
        now: Instant,
        conn: ConnId,
        r: &JoinRequest,
        subscription: &[(String, u32)],
        timeouts: Timeouts,
        replacing: Option<Arc<str>>,
    ) -> Response {
        let member_id = self.next_member_id(r.instance_id.as_deref());
        let (groups, mut ctx) = self.parts(now);
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return refuse(ApiKey::Join, ErrorCode::Internal, "group vanished");
        };
        let old_subscription = replacing
            .as_ref()
            .map(|old| group.unsubscribe_for_replacement(old));
        let topics = group.subscribe(subscription);
        let subscription_changed = old_subscription.is_some_and(|old| old != topics);
        if let Some(instance) = &r.instance_id {
            group.register_instance(instance, member_id.clone(), r.join_token);
        }
        let mut member = group.new_member(
            now,
            member_id.clone(),
            r.instance_id.clone(),
            r.client_id.clone(),
            r.join_token,
            Some(conn),
            timeouts,
            topics,
        );
        if let Some(p) = r.placement.as_deref() {
            member.about.placement =
                super::super::group::Placement::boxed(&p.label, &p.rack, p.capacity);
        }
        match replacing {
            Some(old) => {
                // A replacement drained where the old process was not (a drained
                // label it declares) takes over only what the old one owned; one
                // undrained where the old one was drained gets a share. Either way
                // the group rebalances.
                let old_drained = group.members.get(&old).is_some_and(|m| group.is_drained(m));
                let new_drained = group.is_drained(&member);
                if new_drained && !old_drained {
                    group.hold_back_drained(&old);
                }
                group.replace_member(&mut ctx, &old, member, subscription_changed);
                if new_drained != old_drained {
                    group.trigger_rebalance(&mut ctx, RebalanceCause::Operator);
                }
            }
            None => {
                // An instance back within its departure delay takes its reserved
                // partitions back without a rebalance.
                let returned = group.take_reservation(&mut ctx, &mut member);
                group.insert_member(&mut ctx, member);
                ctx.outputs.push_back(Output::Event(Event::MemberJoined {
                    group: r.group.clone(),
                    member_id: member_id.to_string(),
                    instance_id: r.instance_id.clone(),
                }));
                if returned {
                    group.reconcile(&mut ctx);
                } else {
                    group.trigger_rebalance(&mut ctx, RebalanceCause::Join);
                }
            }
        }
        if let Some(p) = r.placement.as_deref() {
            // The topics' preferred racks (the member's placement is already set).
            group.apply_placement(&member_id, p);
        }
        Response::Join(JoinResponse {
            member_id: member_id.to_string(),
            generation: group.generation,
            heartbeat_interval_ms: heartbeat_interval_ms(timeouts.lease()),
        })
    }

    /// A join for a member that is still in the group: rebinds it, applies a changed
    /// subscription (within `partition_room`, what the coordinator's partition quota
    /// leaves the group) or timeouts, and pushes its state again.
    fn rejoin(
        group: &mut Group,
        ctx: &mut Ctx<'_>,
        conn: ConnId,
        id: &Arc<str>,
        subscription: &[(String, u32)],
        timeouts: Timeouts,
        partition_room: u64,
    ) -> Response {
        let now = ctx.now;
        if !group.subscription_is(&group.members[id], subscription) {
            if let Err(refusal) = group.check_subscription(
                subscription,
                ctx.config,
                group.members.get(id),
                partition_room,
            ) {
                let name = group.name.clone();
                return refusal_response(ctx, &name, refusal);
            }
            group.unsubscribe_for_replacement(id);
            let topics = group.subscribe(subscription);
            if let Some(m) = group.members.get_mut(id) {
                m.subscription = topics.into_boxed_slice();
            }
            group.snapshot_dirty = true;
            group.trigger_rebalance(ctx, RebalanceCause::Subscription);
        }
        let Some(m) = group.members.get_mut(id) else {
            return refuse(ApiKey::Join, ErrorCode::Internal, "member vanished");
        };
        if m.set_timeouts(
            timeouts,
            &*group.detector,
            group.shadow.as_deref(),
            &group.fleet,
        ) {
            // Timeouts decide expiry and holds: a restart must bring the new ones back.
            group.snapshot_dirty = true;
        }
        if m.heard(now) {
            group.snapshot_dirty = true;
        }
        if let Some(trace) = super::super::trace::live(&mut group.trace, now) {
            trace.rebinding(now, m, conn);
        }
        let resumed = m.bind(conn);
        // A shorter timeout can bring a deadline forward.
        group.schedule_member(ctx, id);
        let generation = group.generation;
        group.push_state(ctx, id);
        if resumed {
            group.reconcile(ctx);
        }
        Response::Join(JoinResponse {
            member_id: id.to_string(),
            generation,
            heartbeat_interval_ms: heartbeat_interval_ms(timeouts.lease()),
        })
    }
}

/// The group the join names, created if it is new (above the generation `floor`). The
/// first member chooses the group's detector; later joins must agree.
fn open_group<'g>(
    groups: &'g mut std::collections::HashMap<Arc<str>, Group, foldhash::fast::RandomState>,
    config: &CoreConfig,
    floor: u32,
    r: &JoinRequest,
) -> Result<&'g mut Group, Response> {
    let group = groups
        .entry(Arc::from(r.group.as_str()))
        .or_insert_with_key(|name| Group::new(name.clone(), floor, config));
    if let Some(kind) = DetectorKind::parse(&r.detector) {
        if group.members.is_empty() {
            group.set_detector(kind, config);
        } else if group.detector.kind() != kind {
            return Err(refuse(
                ApiKey::Join,
                ErrorCode::InvalidRequest,
                format!(
                    "group {:?} judges its members with the {} detector; the join asks for {kind}",
                    r.group,
                    group.detector.kind()
                ),
            ));
        }
    }
    Ok(group)
}

/// The live member this join is from, if any: a rejoin naming a live member, or a
/// retried join (same token, and the same instance, client and subscription: a token
/// that merely collides with another member's is not that member). A rejoin naming a
/// live member with another instance id is refused: joined anew, it would leave the
/// named member in the group, holding its partitions until its session ran out.
fn live_member(
    group: &Group,
    r: &JoinRequest,
    subscription: &[(String, u32)],
) -> Result<Option<Arc<str>>, Response> {
    Ok(match &r.member_id {
        Some(id) => match (group.members.get_key_value(id.as_str()), &r.instance_id) {
            (Some((_, m)), Some(instance))
                if m.instance_id.as_deref() != Some(instance.as_str()) =>
            {
                return Err(refuse(
                    ApiKey::Join,
                    ErrorCode::InconsistentMember,
                    match &m.instance_id {
                        Some(own) => {
                            format!("member {id:?} is instance {own:?}, not {instance:?}")
                        }
                        None => format!("member {id:?} has no instance id, not {instance:?}"),
                    },
                ));
            }
            (found, _) => found.map(|(k, _)| k.clone()),
        },
        None => group
            .tokens
            .get(&r.join_token)
            .filter(|id| {
                group.members.get(id).is_some_and(|m| {
                    m.instance_id.as_deref() == r.instance_id.as_deref()
                        && *m.about.client_id == *r.client_id
                        && group.subscription_is(m, subscription)
                })
            })
            .cloned(),
    })
}

/// The member of the join's static instance that this join takes over, if any. A join
/// retried by a process whose incarnation newer ones have superseded (its response was
/// lost meanwhile) must not take the instance back.
fn replaced_instance(group: &Group, r: &JoinRequest) -> Result<Option<Arc<str>>, Response> {
    let Some(instance) = &r.instance_id else {
        return Ok(None);
    };
    if r.member_id.is_none() && group.token_fenced(instance, r.join_token) {
        return Err(refuse(
            ApiKey::Join,
            ErrorCode::FencedInstance,
            format!("a newer process took instance id {instance:?} since this join was first sent"),
        ));
    }
    Ok(group.instance_member(instance))
}

/// Whether the group has room for the new member: its subscription within the
/// partition quotas, and (unless it replaces a member) the group's and the
/// coordinator's member quotas.
fn check_room(
    group: &Group,
    ctx: &mut Ctx<'_>,
    r: &JoinRequest,
    subscription: &[(String, u32)],
    replacing: &Option<Arc<str>>,
    room: Room,
) -> Result<(), Response> {
    let replaced = replacing.as_ref().and_then(|id| group.members.get(id));
    if let Err(refusal) =
        group.check_subscription(subscription, ctx.config, replaced, room.partitions)
    {
        return Err(refusal_response(ctx, &r.group, refusal));
    }
    if replacing.is_some() {
        return Ok(());
    }
    let max_members = ctx.config.max_members_per_group;
    if group.members.len() >= max_members {
        ctx.outputs
            .push_back(quota_event(&r.group, Quota::GroupMembers));
        return Err(refuse(
            ApiKey::Join,
            ErrorCode::GroupFull,
            format!(
                "group {:?} has its maximum of {max_members} members",
                r.group
            ),
        ));
    }
    // The group counts its members, or its static instances if more.
    let max_total_members = ctx.config.max_members;
    let new_instance = r
        .instance_id
        .as_ref()
        .is_some_and(|i| !group.instances.contains_key(i));
    let before = group.usage().members;
    let after = (group.members.len() + 1).max(group.instances.len() + usize::from(new_instance));
    if after > before && room.others_members + after > max_total_members {
        ctx.outputs.push_back(quota_event(&r.group, Quota::Members));
        return Err(refuse(
            ApiKey::Join,
            ErrorCode::TooManyMembers,
            format!(
                "the coordinator has its maximum of {max_total_members} members over all groups"
            ),
        ));
    }
    Ok(())
}
