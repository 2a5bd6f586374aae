//! ListGroups (API key 6): every group the coordinator knows; the request has no body.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_count, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// The state of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members.
    Empty,
    /// A rebalance is in progress: some partitions await revocation or grant.
    Reconciling,
    /// Every member holds its target assignment.
    Stable,
}

impl GroupState {
    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Empty => 0,
            Self::Reconciling => 1,
            Self::Stable => 2,
        }
    }

    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Empty,
            1 => Self::Reconciling,
            2 => Self::Stable,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Reconciling => "reconciling",
            Self::Stable => "stable",
        }
    }
}

/// One group in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group: String,
    /// State.
    pub state: GroupState,
    /// Generation.
    pub generation: u32,
    /// Number of members.
    pub members: u32,
}

/// The answer to list groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsResponse {
    /// Every group the coordinator knows, by name.
    pub groups: Vec<GroupListing>,
}

impl ListGroupsResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_count(buf, self.groups.len())?;
        for g in &self.groups {
            put_string(buf, &g.group)?;
            buf.put_u8(g.state.to_u8());
            buf.put_u32(g.generation);
            buf.put_u32(g.members);
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            groups: r.array("groups", 11, |r| {
                Ok(GroupListing {
                    group: r.string("group")?,
                    state: decode_state(r)?,
                    generation: r.u32("generation")?,
                    members: r.u32("member count")?,
                })
            })?,
        })
    }
}

pub(crate) fn decode_state(r: &mut Reader<'_>) -> Result<GroupState, DecodeError> {
    GroupState::from_u8(r.u8("group state")?).ok_or(DecodeError::Invalid {
        what: "group state",
        reason: "unknown group state",
    })
}
