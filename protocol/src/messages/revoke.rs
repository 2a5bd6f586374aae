//! Revoke (push key 65): partitions the member must release.

use bytes::{BufMut, BytesMut};

use super::{decode_tps, encode_tps, TopicPartitions};
use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError};

/// A request to release partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokePush {
    /// The group.
    pub group: String,
    /// The member.
    pub member_id: String,
    /// The generation that moves them.
    pub generation: u32,
    /// Every owned partition the member must release (a full set, not a delta).
    pub partitions: Vec<TopicPartitions>,
}

impl RevokePush {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_string(buf, &self.member_id)?;
        buf.put_u32(self.generation);
        encode_tps(buf, &self.partitions)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            member_id: r.string("member id")?,
            generation: r.u32("generation")?,
            partitions: decode_tps(r, "partitions")?,
        })
    }
}
