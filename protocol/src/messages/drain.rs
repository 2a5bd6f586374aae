//! Drain (API key 14): move a member's partitions off it, or those of every member with
//! a label, while they stay in the group; or undo it.

use bytes::BytesMut;

use crate::wire::{put_bool, put_count, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Drain (or undrain) one member, or every member with a label. Exactly one of
/// `member_id` and `label` is non-empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainRequest {
    /// The group.
    pub group: String,
    /// The member to drain; "" when draining by label.
    pub member_id: String,
    /// The label whose members (now and later) are drained; "" when draining a member.
    pub label: String,
    /// `true`: drain; `false`: undrain.
    pub drained: bool,
}

impl DrainRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_string(buf, &self.member_id)?;
        put_string(buf, &self.label)?;
        put_bool(buf, self.drained);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            member_id: r.string("member id")?,
            label: r.string("label")?,
            drained: r.bool("drained")?,
        })
    }
}

/// The answer to a drain: the members whose drained state it changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainResponse {
    /// Member ids, sorted.
    pub members: Vec<String>,
}

impl DrainResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_count(buf, self.members.len())?;
        for m in &self.members {
            put_string(buf, m)?;
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            members: r.array("members", 2, |r| r.string("member id"))?,
        })
    }
}
