//! DescribeGroup (API key 7, versions 0 to 2): one group's members, their liveness and
//! partitions; version 1 adds how the group's detector judges each member, version 2
//! describes the members a page at a time.

use bytes::{BufMut, BytesMut};

use super::list_groups::decode_state;
use super::{decode_tps, encode_tps, GroupState, Page, TopicPartitions};
use crate::wire::{put_bool, put_count, put_opt_string, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Describe one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupRequest {
    /// The group.
    pub group: String,
    /// Ask for the detection details of the group and each member (version 1; the
    /// body is the same as version 0's). Version 2 always has them: a request with a
    /// `page` is sent at version 2 and decodes with `detection` set.
    pub detection: bool,
    /// Version 2: a page of the members, by member id (the cursor is the last member
    /// id of the previous page). `None`: every member, in one answer.
    pub page: Option<Page<String>>,
}

impl DescribeGroupRequest {
    /// The lowest version that can carry the request.
    pub(crate) fn version(&self) -> u16 {
        if self.page.is_some() {
            2
        } else {
            u16::from(self.detection)
        }
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        if let Some(page) = &self.page {
            put_opt_string(buf, page.after.as_deref())?;
            buf.put_u32(page.limit);
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let page = if version >= 2 {
            Some(Page {
                after: r.opt_string("after")?,
                limit: r.u32("limit")?,
            })
        } else {
            None
        };
        Ok(Self {
            group,
            detection: version >= 1,
            page,
        })
    }
}

/// How a group judges its members' silence (DescribeGroup version 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDetection {
    /// The detector that acts: `fixed` or `adaptive`.
    pub detector: String,
    /// The detector run in shadow (reported, never acted on), if any.
    pub shadow: Option<String>,
}

/// How the group's detector judges one member (DescribeGroup version 1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberDetection {
    /// Milliseconds the member has been in its liveness state.
    pub in_state_ms: u64,
    /// Suspicion level of the current silence, φ = −log10 of the chance that a
    /// healthy member's heartbeat gap is that long, in hundredths (0 while the member
    /// has too few gaps to judge by).
    pub phi_centi: u32,
    /// The silence after which the member is suspect, milliseconds.
    pub suspect_after_ms: u32,
    /// The silence after which it is expelled, milliseconds.
    pub expel_after_ms: u32,
    /// Heartbeat gaps learned.
    pub gaps: u32,
    /// Heartbeats sent that never arrived (gaps in sequence numbers).
    pub beats_lost: u64,
    /// Heartbeats that arrived after a silence past the suspicion threshold.
    pub beats_late: u64,
    /// Heartbeat gap percentiles over the last 512 to 1,024 gaps, milliseconds.
    pub gap_p50_ms: u32,
    /// 99th percentile gap.
    pub gap_p99_ms: u32,
    /// 99.9th percentile gap.
    pub gap_p999_ms: u32,
    /// Longest gap remembered.
    pub gap_max_ms: u32,
}

impl MemberDetection {
    /// Encoded size, bytes.
    pub const SIZE: usize = 8 + 4 * 4 + 8 + 8 + 4 * 4;

    fn encode(&self, buf: &mut BytesMut) {
        buf.put_u64(self.in_state_ms);
        buf.put_u32(self.phi_centi);
        buf.put_u32(self.suspect_after_ms);
        buf.put_u32(self.expel_after_ms);
        buf.put_u32(self.gaps);
        buf.put_u64(self.beats_lost);
        buf.put_u64(self.beats_late);
        buf.put_u32(self.gap_p50_ms);
        buf.put_u32(self.gap_p99_ms);
        buf.put_u32(self.gap_p999_ms);
        buf.put_u32(self.gap_max_ms);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            in_state_ms: r.u64("in state")?,
            phi_centi: r.u32("phi")?,
            suspect_after_ms: r.u32("suspect after")?,
            expel_after_ms: r.u32("expel after")?,
            gaps: r.u32("gaps")?,
            beats_lost: r.u64("beats lost")?,
            beats_late: r.u64("beats late")?,
            gap_p50_ms: r.u32("gap p50")?,
            gap_p99_ms: r.u32("gap p99")?,
            gap_p999_ms: r.u32("gap p99.9")?,
            gap_max_ms: r.u32("gap max")?,
        })
    }
}

/// How the coordinator judges a member's liveness right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// Heard from recently.
    Alive,
    /// Silent for longer than usual but not yet past its deadline.
    Suspect,
}

impl Liveness {
    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Alive => 0,
            Self::Suspect => 1,
        }
    }

    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Alive,
            1 => Self::Suspect,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alive => "alive",
            Self::Suspect => "suspect",
        }
    }
}

/// One member as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// Static instance id, if any.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Liveness.
    pub liveness: Liveness,
    /// Milliseconds since the last frame from the member.
    pub since_heartbeat_ms: u64,
    /// Milliseconds since the member's progress counter last advanced.
    pub since_progress_ms: u64,
    /// Partitions the member owns (including those pending revocation).
    pub owned: Vec<TopicPartitions>,
    /// Owned partitions the member has been asked to release.
    pub pending_revoke: Vec<TopicPartitions>,
    /// Partitions assigned to the member that wait for their previous owner to release them.
    pub pending_grant: Vec<TopicPartitions>,
    /// How the detector judges it (version 1 only).
    pub detection: Option<MemberDetection>,
}

impl MemberDescription {
    /// Its encoded size, bytes, in an answer with the detection details (version 1 and
    /// 2) or without (version 0).
    pub fn encoded_len(&self, detection: bool) -> usize {
        let tps = |l: &[TopicPartitions]| -> usize {
            4 + l
                .iter()
                .map(|t| 2 + t.topic.len() + 4 + 4 * t.partitions.len())
                .sum::<usize>()
        };
        2 + self.member_id.len()
            + 1
            + self.instance_id.as_ref().map_or(0, |i| 2 + i.len())
            + 2
            + self.client_id.len()
            + 1
            + 8
            + 8
            + tps(&self.owned)
            + tps(&self.pending_revoke)
            + tps(&self.pending_grant)
            + if detection { MemberDetection::SIZE } else { 0 }
    }
}

/// The answer to describe group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupResponse {
    /// Group id.
    pub group: String,
    /// State.
    pub state: GroupState,
    /// Generation.
    pub generation: u32,
    /// Assignor name.
    pub assignor: String,
    /// Members, by member id.
    pub members: Vec<MemberDescription>,
    /// How the group judges its members' silence (versions 1 and 2; they also
    /// describe every member's detection). Boxed to keep [`Response`](crate::Response)
    /// small.
    pub detection: Option<Box<GroupDetection>>,
    /// Version 2 only (with `detection`): whether members after the last one described
    /// remain (ask again with its id as the cursor). `None` is a version 0 or 1 answer.
    pub more: Option<bool>,
}

impl DescribeGroupResponse {
    /// The version the response is encoded in: 2 when it answers a page, 1 when it
    /// carries detection details.
    pub(crate) fn version(&self) -> u16 {
        if self.more.is_some() {
            2
        } else {
            u16::from(self.detection.is_some())
        }
    }

    /// The encoded size of the body, error code included, bytes.
    pub fn encoded_len(&self) -> usize {
        let detection = self.detection.is_some() || self.more.is_some();
        2 + 2
            + self.group.len()
            + 1
            + 4
            + 2
            + self.assignor.len()
            + self
                .detection
                .as_ref()
                .map_or(if detection { 2 + 1 } else { 0 }, |d| {
                    2 + d.detector.len() + 1 + d.shadow.as_ref().map_or(0, |s| 2 + s.len())
                })
            + 4
            + self
                .members
                .iter()
                .map(|m| m.encoded_len(detection))
                .sum::<usize>()
            + usize::from(self.more.is_some())
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        buf.put_u8(self.state.to_u8());
        buf.put_u32(self.generation);
        put_string(buf, &self.assignor)?;
        let detection = self.version() >= 1;
        if detection {
            let d = self.detection.as_deref();
            put_string(buf, d.map_or("", |d| &d.detector))?;
            put_opt_string(buf, d.and_then(|d| d.shadow.as_deref()))?;
        }
        put_count(buf, self.members.len())?;
        for m in &self.members {
            put_string(buf, &m.member_id)?;
            put_opt_string(buf, m.instance_id.as_deref())?;
            put_string(buf, &m.client_id)?;
            buf.put_u8(m.liveness.to_u8());
            buf.put_u64(m.since_heartbeat_ms);
            buf.put_u64(m.since_progress_ms);
            encode_tps(buf, &m.owned)?;
            encode_tps(buf, &m.pending_revoke)?;
            encode_tps(buf, &m.pending_grant)?;
            if detection {
                m.detection.unwrap_or_default().encode(buf);
            }
        }
        if let Some(more) = self.more {
            put_bool(buf, more);
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let state = decode_state(r)?;
        let generation = r.u32("generation")?;
        let assignor = r.string("assignor")?;
        let detection = if version >= 1 {
            Some(Box::new(GroupDetection {
                detector: r.string("detector")?,
                shadow: r.opt_string("shadow detector")?,
            }))
        } else {
            None
        };
        let min_member = 34
            + if version >= 1 {
                MemberDetection::SIZE
            } else {
                0
            };
        let members = r.array("members", min_member, |r| {
            Ok(MemberDescription {
                member_id: r.string("member id")?,
                instance_id: r.opt_string("instance id")?,
                client_id: r.string("client id")?,
                liveness: Liveness::from_u8(r.u8("liveness")?).ok_or(DecodeError::Invalid {
                    what: "liveness",
                    reason: "unknown liveness value",
                })?,
                since_heartbeat_ms: r.u64("since heartbeat")?,
                since_progress_ms: r.u64("since progress")?,
                owned: decode_tps(r, "owned")?,
                pending_revoke: decode_tps(r, "pending revoke")?,
                pending_grant: decode_tps(r, "pending grant")?,
                detection: if version >= 1 {
                    Some(MemberDetection::decode(r)?)
                } else {
                    None
                },
            })
        })?;
        Ok(Self {
            group,
            state,
            generation,
            assignor,
            detection,
            members,
            more: if version >= 2 {
                Some(r.bool("more")?)
            } else {
                None
            },
        })
    }
}
