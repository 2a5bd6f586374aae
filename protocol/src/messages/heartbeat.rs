//! Heartbeat (API key 2, versions 0 and 1): renews the session, reports progress,
//! acknowledges revocations; version 1 adds the load of the member's partitions.

use bytes::{BufMut, BytesMut};
use bytestring::ByteString;

use super::{decode_tps, encode_tps, TopicPartitions};
use crate::wire::{put_count, put_string, Reader};
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
    /// The load of partitions the member owns (version 1; empty: none reported, sent at
    /// version 0).
    pub loads: Vec<PartitionLoad>,
}

/// The load a member reports for one partition it owns (Heartbeat version 1): an opaque
/// number (messages a second, CPU) the load-balanced assignor weighs.
#[derive(Debug, Clone)]
pub struct PartitionLoad {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// Its load: finite and not negative, or the coordinator refuses the beat.
    pub load: f64,
}

/// Loads compare by their bits, so equality is total (a NaN equals itself, and a
/// decoded load equals what was encoded).
impl PartialEq for PartitionLoad {
    fn eq(&self, other: &Self) -> bool {
        self.topic == other.topic
            && self.partition == other.partition
            && self.load.to_bits() == other.load.to_bits()
    }
}

impl Eq for PartitionLoad {}

impl PartitionLoad {
    /// Its encoded size, bytes.
    pub fn encoded_len(&self) -> usize {
        2 + self.topic.len() + 4 + 8
    }

    fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.topic)?;
        buf.put_u32(self.partition);
        buf.put_f64(self.load);
        Ok(())
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            topic: r.string("topic")?,
            partition: r.u32("partition")?,
            load: f64::from_bits(r.u64("load")?),
        })
    }
}

impl HeartbeatRequest {
    /// The lowest version that can carry the request: 1 when it reports loads.
    pub(crate) fn version(&self) -> u16 {
        u16::from(!self.loads.is_empty())
    }

    /// The encoded size of the body, in bytes (as [`Self::encode`] writes it: at
    /// version 1 when it reports loads, as in a Heartbeats request at version 1).
    pub fn encoded_len(&self) -> usize {
        self.encoded_len_at(self.version())
    }

    /// The encoded size of the body at `version` (in a Heartbeats request at version 1,
    /// every beat has its loads array, empty or not).
    pub fn encoded_len_at(&self, version: u16) -> usize {
        let acks: usize = self
            .acked_revocations
            .iter()
            .map(|t| 2 + t.topic.len() + 4 + 4 * t.partitions.len())
            .sum();
        let loads = if version >= 1 {
            4 + self
                .loads
                .iter()
                .map(PartitionLoad::encoded_len)
                .sum::<usize>()
        } else {
            0
        };
        2 + self.group.len() + 2 + self.member_id.len() + 4 + 8 + 8 + 4 + acks + loads
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        self.encode_at(self.version(), buf)
    }

    /// Encodes the body at `version`; version 0 cannot carry loads.
    pub(crate) fn encode_at(&self, version: u16, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_string(buf, &self.member_id)?;
        buf.put_u32(self.generation);
        buf.put_u64(self.sequence);
        buf.put_u64(self.progress);
        encode_tps(buf, &self.acked_revocations)?;
        if version >= 1 {
            put_count(buf, self.loads.len())?;
            for load in &self.loads {
                load.encode(buf)?;
            }
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.shared_string("group")?,
            member_id: r.shared_string("member id")?,
            generation: r.u32("generation")?,
            sequence: r.u64("sequence")?,
            progress: r.u64("progress")?,
            acked_revocations: decode_tps(r, "acked revocations")?,
            loads: if version >= 1 {
                r.array("loads", 14, PartitionLoad::decode)?
            } else {
                Vec::new()
            },
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
