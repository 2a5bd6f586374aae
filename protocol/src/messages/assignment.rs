//! Assignment (push key 64): the member's full current assignment.

use bytes::{BufMut, BytesMut};

use super::{decode_tps, encode_tps, TopicPartitions};
use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError};

/// The member's full current assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentPush {
    /// The group.
    pub group: String,
    /// The member.
    pub member_id: String,
    /// The generation this assignment belongs to.
    pub generation: u32,
    /// Every partition the member owns now (a full set, not a delta).
    pub partitions: Vec<TopicPartitions>,
}

impl AssignmentPush {
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
