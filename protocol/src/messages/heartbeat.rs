//! Heartbeat (API key 2): renews the session, reports progress, acknowledges
//! revocations.

use bytes::{BufMut, BytesMut};
use bytestring::ByteString;

use super::{decode_tps, encode_tps, TopicPartitions};
use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError};

/// A heartbeat: renews the session, reports progress, acknowledges revocations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    /// The member's group. A [`ByteString`] (build one from a `String` or `&str` with
    /// `.into()`): a decoded heartbeat's ids point into the frame instead of being
    /// allocated, which was a tenth of the coordinator's work on a Heartbeats frame.
    pub group: ByteString,
    /// The member id from join.
    pub member_id: ByteString,
    /// The generation of the member's latest assignment.
    pub generation: u32,
    /// Increments by one per heartbeat sent, so lost beats can be told from late ones.
    pub sequence: u64,
    /// The application's progress counter; the progress clock renews when it advances.
    pub progress: u64,
    /// Partitions the member has finished with and releases (answers to a revoke push).
    pub acked_revocations: Vec<TopicPartitions>,
}

impl HeartbeatRequest {
    /// The encoded size of the body, in bytes (as [`Self::encode`] writes it).
    pub fn encoded_len(&self) -> usize {
        let acks: usize = self
            .acked_revocations
            .iter()
            .map(|t| 2 + t.topic.len() + 4 + 4 * t.partitions.len())
            .sum();
        2 + self.group.len() + 2 + self.member_id.len() + 4 + 8 + 8 + 4 + acks
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_string(buf, &self.member_id)?;
        buf.put_u32(self.generation);
        buf.put_u64(self.sequence);
        buf.put_u64(self.progress);
        encode_tps(buf, &self.acked_revocations)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.shared_string("group")?,
            member_id: r.shared_string("member id")?,
            generation: r.u32("generation")?,
            sequence: r.u64("sequence")?,
            progress: r.u64("progress")?,
            acked_revocations: decode_tps(r, "acked revocations")?,
        })
    }
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatResponse {
    /// The generation of the member's current assignment. When it differs from the
    /// generation the member sent, the coordinator has also pushed the assignment again.
    pub generation: u32,
    /// The member's session timeout as the coordinator applies it; the member's lease is
    /// measured against it.
    pub session_timeout_ms: u32,
}

impl HeartbeatResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        buf.put_u32(self.generation);
        buf.put_u32(self.session_timeout_ms);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            generation: r.u32("generation")?,
            session_timeout_ms: r.u32("session timeout")?,
        })
    }
}
