//! FetchOffsets (API key 5): read committed offsets.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_count, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Fetch committed offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOffsetsRequest {
    /// The group.
    pub group: String,
    /// Topics to fetch; empty means every topic with a committed offset.
    pub topics: Vec<String>,
}

impl FetchOffsetsRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_count(buf, self.topics.len())?;
        for t in &self.topics {
            put_string(buf, t)?;
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            topics: r.array("topics", 2, |r| r.string("topic"))?,
        })
    }
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// Offset.
    pub offset: i64,
    /// Metadata committed with it.
    pub metadata: String,
}

/// The answer to a fetch of offsets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchOffsetsResponse {
    /// Committed offsets, ordered by topic then partition.
    pub offsets: Vec<CommittedOffset>,
}

impl FetchOffsetsResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
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
            offsets: r.array("offsets", 16, |r| {
                Ok(CommittedOffset {
                    topic: r.string("topic")?,
                    partition: r.u32("partition")?,
                    offset: r.i64("offset")?,
                    metadata: r.string("metadata")?,
                })
            })?,
        })
    }
}
