//! DescribeGroup (API key 7, versions 0 and 1): one group's members, their liveness and
//! partitions; version 1 adds how the group's detector judges each member.

use bytes::{BufMut, BytesMut};

use super::list_groups::decode_state;
use super::{decode_tps, encode_tps, GroupState, TopicPartitions};
use crate::wire::{put_count, put_opt_string, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Describe one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupRequest {
    /// The group.
    pub group: String,
    /// Ask for the detection details of the group and each member (version 1; the
    /// body is the same at both versions).
    pub detection: bool,
}

impl DescribeGroupRequest {
    /// The lowest version that can carry the request.
    pub(crate) fn version(&self) -> u16 {
        u16::from(self.detection)
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            detection: version >= 1,
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
    const SIZE: usize = 8 + 4 * 4 + 8 + 8 + 4 * 4;

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
    /// How the group judges its members' silence (version 1 only; version 1 also
    /// describes every member's detection). Boxed to keep [`Response`](crate::Response)
    /// small.
    pub detection: Option<Box<GroupDetection>>,
}

impl DescribeGroupResponse {
    /// The version the response is encoded in: 1 when it carries detection details.
    pub(crate) fn version(&self) -> u16 {
        u16::from(self.detection.is_some())
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        buf.put_u8(self.state.to_u8());
        buf.put_u32(self.generation);
        put_string(buf, &self.assignor)?;
        if let Some(d) = &self.detection {
            put_string(buf, &d.detector)?;
            put_opt_string(buf, d.shadow.as_deref())?;
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
            if self.detection.is_some() {
                m.detection.unwrap_or_default().encode(buf);
            }
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
        Ok(Self {
            group,
            state,
            generation,
            assignor,
            detection,
            members: r.array("members", min_member, |r| {
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
            })?,
        })
    }
}
