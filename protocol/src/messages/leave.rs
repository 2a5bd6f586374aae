//! Leave (API key 3, versions 0 and 1): leave a group; version 1 says how.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Leave a group gracefully: the member's partitions are released at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveRequest {
    /// The member's group.
    pub group: String,
    /// The member id from join.
    pub member_id: String,
    /// What the member did with its partitions. [`LeaveMode::Released`] is sent at
    /// version 0 (which has no such field); any other mode needs version 1.
    pub mode: LeaveMode,
}

impl LeaveRequest {
    /// The lowest version that can carry the request.
    pub(crate) fn version(&self) -> u16 {
        if self.mode == LeaveMode::Released {
            0
        } else {
            1
        }
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_string(buf, &self.member_id)?;
        if self.version() >= 1 {
            buf.put_u8(self.mode as u8);
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            member_id: r.string("member id")?,
            mode: if version >= 1 {
                LeaveMode::from_u8(r.u8("leave mode")?).ok_or(DecodeError::Invalid {
                    what: "leave mode",
                    reason: "must be 0 (released), 1 (unconfirmed) or 2 (stand down)",
                })?
            } else {
                LeaveMode::Released
            },
        })
    }
}

/// How a member leaves (Leave version 1; version 0 always means `Released`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LeaveMode {
    /// The application released every partition: they move at once.
    #[default]
    Released = 0,
    /// The member leaves without the application having confirmed that it released
    /// every partition (its leave deadline passed): the member is removed at once, but
    /// its partitions move only when its lease has run out.
    Unconfirmed = 1,
    /// A static member's process shuts down for a restart and has stopped acting on
    /// its partitions: it stays a member (no rebalance) until a new process joins with
    /// the same instance id, which takes over at once, or until its session expires.
    StandDown = 2,
}

impl LeaveMode {
    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Released),
            1 => Some(Self::Unconfirmed),
            2 => Some(Self::StandDown),
            _ => None,
        }
    }

    /// Snake-case name, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::Unconfirmed => "unconfirmed",
            Self::StandDown => "stand_down",
        }
    }
}
