//! Offsets: commits (fenced by membership and ownership), fetches, and the deletion of
//! a group whose offsets retention expired.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_protocol::{
    ApiKey, CommitOffsetsRequest, CommitOffsetsResponse, CommittedOffset, ErrorCode,
    FetchOffsetsRequest, FetchOffsetsResponse, OffsetCommit, PartitionResult, Response,
};

use super::group::{Ctx, Group, Usage};
use super::membership::quota_event;
use super::{
    refuse, ConnId, Coordinator, CoreConfig, Event, OffsetRecord, Output, Quota, Record,
    MAX_NAME_BYTES,
};

impl Coordinator {
    pub(super) fn commit(
        &mut self,
        now: Instant,
        conn: ConnId,
        r: CommitOffsetsRequest,
    ) -> Response {
        let max_metadata = self.config.max_metadata_bytes;
        let others = self.usage_besides(&r.group);
        let floor = self.floor_of(&r.group);
        let (groups, mut ctx) = self.parts(now);
        let config = ctx.config;
        let group_name = r.group.clone();
        let reject = |ctx: &mut Ctx<'_>, reason: ErrorCode| {
            ctx.outputs.push_back(Output::Event(Event::CommitRejected {
                group: group_name.clone(),
                reason,
            }));
        };
        if r.group.is_empty() || r.group.len() > MAX_NAME_BYTES {
            return refuse(
                ApiKey::CommitOffsets,
                ErrorCode::InvalidRequest,
                format!("group id must be 1 to {MAX_NAME_BYTES} bytes"),
            );
        }
        if let Some(o) = r
            .offsets
            .iter()
            .find(|o| o.topic.is_empty() || o.topic.len() > MAX_NAME_BYTES)
        {
            reject(&mut ctx, ErrorCode::InvalidRequest);
            return refuse(
                ApiKey::CommitOffsets,
                ErrorCode::InvalidRequest,
                format!(
                    "topic names must be 1 to {MAX_NAME_BYTES} bytes; one is {} bytes",
                    o.topic.len()
                ),
            );
        }
        if r.member_id.is_none()
            && !groups.contains_key(r.group.as_str())
            && others.groups >= config.max_groups
        {
            reject(&mut ctx, ErrorCode::TooManyGroups);
            ctx.outputs.push_back(quota_event(&r.group, Quota::Groups));
            return refuse(
                ApiKey::CommitOffsets,
                ErrorCode::TooManyGroups,
                format!(
                    "the coordinator has its maximum of {} groups; group {:?} cannot be created",
                    config.max_groups, r.group
                ),
            );
        }
        let member = match &r.member_id {
            None => {
                let group = groups
                    .entry(Arc::from(r.group.as_str()))
                    .or_insert_with_key(|name| Group::new(name.clone(), floor, config));
                if !group.members.is_empty() {
                    reject(&mut ctx, ErrorCode::InvalidRequest);
                    return refuse(
                        ApiKey::CommitOffsets,
                        ErrorCode::InvalidRequest,
                        "commits without a member id are accepted only while the group has no members",
                    );
                }
                None
            }
            Some(member_id) => {
                let found = groups.get_mut(r.group.as_str()).and_then(|g| {
                    g.members
                        .get_key_value(member_id.as_str())
                        .map(|(k, _)| k.clone())
                });
                let Some(id) = found else {
                    let resp = Self::member_gone(
                        groups.get(r.group.as_str()),
                        ApiKey::CommitOffsets,
                        member_id,
                    );
                    if let Response::Error(e) = &resp {
                        reject(&mut ctx, e.code);
                    }
                    return resp;
                };
                Some(id)
            }
        };
        let Some(group) = groups.get_mut(r.group.as_str()) else {
            return refuse(ApiKey::CommitOffsets, ErrorCode::Internal, "group vanished");
        };
        let mut rebound = false;
        if r.generation > group.generation && member.is_some() {
            reject(&mut ctx, ErrorCode::IllegalGeneration);
            return refuse(
                ApiKey::CommitOffsets,
                ErrorCode::IllegalGeneration,
                format!(
                    "generation {} is newer than the group's {}",
                    r.generation, group.generation
                ),
            );
        }
        if let Some(id) = &member {
            let m = group.members.get_mut(id).expect("member exists");
            if m.heard(now) {
                group.snapshot_dirty = true;
            }
            if m.conn != Some(conn) {
                if let Some(trace) = super::trace::live(&mut group.trace, now) {
                    trace.rebinding(now, m, conn);
                }
                let resumed = m.bind(conn);
                group.push_state(&mut ctx, id);
                if resumed {
                    group.reconcile(&mut ctx);
                }
                rebound = true;
            }
        }
        let mut results = Vec::with_capacity(r.offsets.len());
        let mut accepted = 0;
        for o in r.offsets {
            let mut error = if o.metadata.len() > max_metadata {
                ErrorCode::MetadataTooLarge
            } else if let Some(id) = &member {
                let m = &group.members[id];
                match group.resolve(&o.topic, o.partition) {
                    Some(tp) if m.owned.contains(&tp) && group.granted_by(&tp, r.generation) => {
                        ErrorCode::None
                    }
                    // Granted after the frame's generation: the commit is from an
                    // earlier ownership of the partition, which was revoked.
                    Some(tp) if m.owned.contains(&tp) => ErrorCode::PartitionRevoked,
                    Some(tp) if m.released.contains(&tp) => ErrorCode::PartitionRevoked,
                    _ => ErrorCode::NotOwner,
                }
            } else {
                ErrorCode::None
            };
            if error == ErrorCode::None {
                if let Some(quota) = offset_quota(group, &others, config, &o) {
                    ctx.outputs.push_back(quota_event(&r.group, quota));
                    error = ErrorCode::TooManyOffsets;
                }
            }
            if error == ErrorCode::None {
                accepted += 1;
                ctx.records.push(Record::Offset(OffsetRecord {
                    group: r.group.clone(),
                    topic: o.topic.clone(),
                    partition: o.partition,
                    offset: o.offset,
                    metadata: o.metadata.clone(),
                }));
                group.put_offset(o.topic.clone(), o.partition, o.offset, o.metadata);
            } else {
                reject(&mut ctx, error);
            }
            results.push(PartitionResult {
                topic: o.topic,
                partition: o.partition,
                error,
            });
        }
        if accepted > 0 {
            group.committed_at = Some(now);
            ctx.outputs.push_back(Output::Event(Event::CommitsAccepted {
                group: r.group.clone(),
                count: accepted,
            }));
        }
        if let (true, Some(id)) = (rebound, &member) {
            self.bind(conn, &r.group, id);
        }
        Response::CommitOffsets(CommitOffsetsResponse { results })
    }

    /// The group's committed offsets (of `r.topics`, or every topic), by topic then
    /// partition: all of them, or with a page (FetchOffsets version 1) those after the
    /// cursor, at most `limit` and no more than fit an answer of `max_answer_bytes` (at
    /// least one).
    pub(super) fn fetch(&self, r: FetchOffsetsRequest) -> Response {
        let more = r.page.as_ref().map(|_| false);
        let Some(group) = self.groups.get(r.group.as_str()) else {
            return Response::FetchOffsets(FetchOffsetsResponse {
                offsets: Vec::new(),
                more,
            });
        };
        let wanted = |topic: &str| r.topics.is_empty() || r.topics.iter().any(|t| t == topic);
        let entry = |((topic, partition), (offset, metadata)): (&(String, u32), &(i64, String))| {
            CommittedOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: *offset,
                metadata: metadata.clone(),
            }
        };
        let Some(page) = &r.page else {
            let offsets = group
                .offsets
                .iter()
                .filter(|((topic, _), _)| wanted(topic))
                .map(entry)
                .collect();
            return Response::FetchOffsets(FetchOffsetsResponse { offsets, more });
        };
        let from = match &page.after {
            Some(c) => Bound::Excluded((c.topic.clone(), c.partition)),
            None => Bound::Unbounded,
        };
        let base = FetchOffsetsResponse {
            offsets: Vec::new(),
            more,
        }
        .encoded_len();
        let mut fit = self.page_fit(page.limit, base);
        let mut response = FetchOffsetsResponse {
            offsets: Vec::new(),
            more,
        };
        for o in group
            .offsets
            .range((from, Bound::Unbounded))
            .filter(|((topic, _), _)| wanted(topic))
            .map(entry)
        {
            if !fit.take(o.encoded_len()) {
                response.more = Some(true);
                break;
            }
            response.offsets.push(o);
        }
        Response::FetchOffsets(response)
    }

    /// The store found `group` empty for longer than the offsets `retention`; the core,
    /// which is ahead of the store, decides at `now`. Returns whether the group was
    /// deleted.
    ///
    /// A group with members (one may have joined while its snapshot was still on its way
    /// to the store), with partitions held for an expelled member, or with a commit this
    /// core accepted less than `retention` ago (an admin commit to the empty group, read
    /// or made durable after the store looked: deleting would lose an offset already
    /// acknowledged) is kept and nothing is recorded; the store still finds it expired
    /// on a later pass if it stays empty. Otherwise the group is forgotten, offsets and all, and a
    /// [`Record::GroupDeleted`] asks the store to do the same, in order with every other
    /// record. A group the core does not know is deleted too: the store may hold
    /// something the core does not. A group with operator settings that are not the
    /// default, or drained labels, loses its offsets but is kept, recorded again after
    /// the deletion (the returned `true` then means its offsets are gone).
    #[must_use = "false means the group was not removed (a member joined since)"]
    pub fn remove_offsets(&mut self, now: Instant, group: &str, retention: Duration) -> bool {
        if let Some(g) = self.groups.get(group) {
            let committed = g
                .committed_at
                .is_some_and(|at| now.saturating_duration_since(at) < retention);
            if !g.members.is_empty() || !g.held.is_empty() || committed {
                return false;
            }
            if !g.config.is_default() || !g.drained_labels.is_empty() {
                // The operator's settings and drained labels outlive the offsets (a
                // configured group is kept while its settings are not the default): the
                // offsets go, the group stays, recorded again without them.
                let g = self.groups.get_mut(group).expect("looked up above");
                g.offsets.clear();
                g.committed_at = None;
                let snapshot = g.snapshot(now);
                self.records.push(Record::GroupDeleted {
                    group: group.to_owned(),
                });
                self.records.push(Record::Group(snapshot));
                self.account(group);
                return true;
            }
            self.generation_floor = self.generation_floor.max(g.generation);
            // Out of the table, so no dirty snapshot of it follows the deletion. Its
            // timer entries are dropped when they fire (or re-check a new group of the
            // same name, as any early entry does).
            self.remove_group(group);
        }
        self.records.push(Record::GroupDeleted {
            group: group.to_owned(),
        });
        true
    }
}

/// The quota that keeping `o` would take past its limit, if any: the group's offsets or
/// metadata bytes, or the coordinator's (`others`: what every other group holds).
/// Updating an offset the group already has adds no offset, only the change in its
/// metadata's size.
fn offset_quota(
    group: &Group,
    others: &Usage,
    config: &CoreConfig,
    o: &OffsetCommit,
) -> Option<Quota> {
    let old = group.offsets.get(&(o.topic.clone(), o.partition));
    let adds_offset = usize::from(old.is_none());
    let metadata = group.metadata_bytes + o.metadata.len() - old.map_or(0, |(_, m)| m.len());
    let offsets = group.offsets.len() + adds_offset;
    if adds_offset > 0 && offsets > config.max_offsets_per_group {
        Some(Quota::GroupOffsets)
    } else if metadata > group.metadata_bytes && metadata > config.max_metadata_bytes_per_group {
        Some(Quota::GroupOffsetMetadata)
    } else if adds_offset > 0 && others.offsets + offsets > config.max_offsets {
        Some(Quota::Offsets)
    } else if metadata > group.metadata_bytes
        && others.metadata_bytes + metadata > config.max_metadata_bytes_total
    {
        Some(Quota::OffsetMetadata)
    } else {
        None
    }
}
