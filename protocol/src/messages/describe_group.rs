//! DescribeGroup (API key 7): one group's members, their liveness and partitions.

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
}

impl DescribeGroupRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
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
}

impl DescribeGroupResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        buf.put_u8(self.state.to_u8());
        buf.put_u32(self.generation);
        put_string(buf, &self.assignor)?;
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
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            state: decode_state(r)?,
            generation: r.u32("generation")?,
            assignor: r.string("assignor")?,
            members: r.array("members", 34, |r| {
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
                })
            })?,
        })
    }
}
