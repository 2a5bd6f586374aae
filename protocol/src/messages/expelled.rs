//! Expelled (push key 66): the member is no longer in the group, and why.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Why a member was removed from its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpelReason {
    /// No frame from the member within its session timeout.
    SessionExpired,
    /// The member's progress counter did not advance within its progress timeout.
    ProgressExpired,
    /// The member did not acknowledge a revocation within its rebalance timeout.
    RebalanceTimeout,
    /// A newer process joined with the same static instance id.
    Fenced,
    /// The member left.
    Left,
}

impl ExpelReason {
    /// Every reason.
    pub const ALL: [Self; 5] = [
        Self::SessionExpired,
        Self::ProgressExpired,
        Self::RebalanceTimeout,
        Self::Fenced,
        Self::Left,
    ];

    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::SessionExpired => 1,
            Self::ProgressExpired => 2,
            Self::RebalanceTimeout => 3,
            Self::Fenced => 4,
            Self::Left => 5,
        }
    }

    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::SessionExpired,
            2 => Self::ProgressExpired,
            3 => Self::RebalanceTimeout,
            4 => Self::Fenced,
            5 => Self::Left,
            _ => return None,
        })
    }

    /// Snake-case name, used in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionExpired => "session_expired",
            Self::ProgressExpired => "progress_expired",
            Self::RebalanceTimeout => "rebalance_timeout",
            Self::Fenced => "fenced",
            Self::Left => "left",
        }
    }
}

/// The member is no longer in the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpelledPush {
    /// The group.
    pub group: String,
    /// The member.
    pub member_id: String,
    /// Why.
    pub reason: ExpelReason,
    /// A human-readable explanation.
    pub message: String,
}

impl ExpelledPush {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_string(buf, &self.member_id)?;
        buf.put_u8(self.reason.to_u8());
        put_string(buf, &self.message)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            member_id: r.string("member id")?,
            reason: ExpelReason::from_u8(r.u8("reason")?).ok_or(DecodeError::Invalid {
                what: "expel reason",
                reason: "unknown expel reason",
            })?,
            message: r.string("message")?,
        })
    }
}
