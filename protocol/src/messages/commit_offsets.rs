//! CommitOffsets (API key 4): commit offsets, fenced by membership and ownership.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_count, put_opt_string, put_string, Reader};
use crate::{DecodeError, EncodeError, ErrorCode};

/// One offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommit {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// The offset (the next record to process, by convention).
    pub offset: i64,
    /// Free-form metadata, bounded by the coordinator's limit.
    pub metadata: String,
}

/// Commit offsets, fenced by membership and ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOffsetsRequest {
    /// The group.
    pub group: String,
    /// The committing member; `None` is an administrative commit, accepted only while
    /// the group has no members.
    pub member_id: Option<String>,
    /// The generation the member's assignment carries.
    pub generation: u32,
    /// The offsets.
    pub offsets: Vec<OffsetCommit>,
}

impl CommitOffsetsRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_opt_string(buf, self.member_id.as_deref())?;
        buf.put_u32(self.generation);
        put_count(buf, self.offsets.len())?;
        for o in &self.offsets {
            put_string(buf, &o.topic)?;
            buf.put_u32(o.partition);
            buf.put_i64(o.offset);
            put_string(buf, &o.metadata)?;
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            member_id: r.opt_string("member id")?,
            generation: r.u32("generation")?,
            offsets: r.array("offsets", 16, |r| {
                Ok(OffsetCommit {
                    topic: r.string("topic")?,
                    partition: r.u32("partition")?,
                    offset: r.i64("offset")?,
                    metadata: r.string("metadata")?,
                })
            })?,
        })
    }
}

/// The outcome for one committed partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionResult {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// `ErrorCode::None` if stored, otherwise why not.
    pub error: ErrorCode,
}

/// The answer to a commit. Sent only after every accepted offset is durable.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommitOffsetsResponse {
    /// One result per requested offset, in request order.
    pub results: Vec<PartitionResult>,
}

impl CommitOffsetsResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_count(buf, self.results.len())?;
        for p in &self.results {
            put_string(buf, &p.topic)?;
            buf.put_u32(p.partition);
            buf.put_u16(p.error.to_u16());
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            results: r.array("results", 8, |r| {
                let topic = r.string("topic")?;
                let partition = r.u32("partition")?;
                let error =
                    ErrorCode::from_u16(r.u16("error code")?).ok_or(DecodeError::Invalid {
                        what: "error code",
                        reason: "unknown error code",
                    })?;
                Ok(PartitionResult {
                    topic,
                    partition,
                    error,
                })
            })?,
        })
    }
}
