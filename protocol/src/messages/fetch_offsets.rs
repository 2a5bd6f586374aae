//! FetchOffsets (API key 5, versions 0 and 1): read committed offsets. Version 1 reads
//! them a page at a time, in order of topic and partition.

use bytes::{BufMut, BytesMut};

use super::Page;
use crate::wire::{put_bool, put_count, put_opt_string, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Where a page of offsets starts: after this topic and partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OffsetCursor {
    /// Topic of the last offset of the previous page.
    pub topic: String,
    /// Its partition.
    pub partition: u32,
}

/// Fetch committed offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOffsetsRequest {
    /// The group.
    pub group: String,
    /// Topics to fetch; empty means every topic with a committed offset.
    pub topics: Vec<String>,
    /// Version 1: a page of the offsets, by topic then partition. `None` (version 0):
    /// every offset asked for, in one answer.
    pub page: Option<Page<OffsetCursor>>,
}

impl FetchOffsetsRequest {
    /// The lowest version that can carry the request.
    pub(crate) fn version(&self) -> u16 {
        u16::from(self.page.is_some())
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_count(buf, self.topics.len())?;
        for t in &self.topics {
            put_string(buf, t)?;
        }
        if let Some(page) = &self.page {
            put_opt_string(buf, page.after.as_ref().map(|c| c.topic.as_str()))?;
            buf.put_u32(page.after.as_ref().map_or(0, |c| c.partition));
            buf.put_u32(page.limit);
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let topics = r.array("topics", 2, |r| r.string("topic"))?;
        let page = if version >= 1 {
            let topic = r.opt_string("after topic")?;
            let partition = r.u32("after partition")?;
            Some(Page {
                after: topic.map(|topic| OffsetCursor { topic, partition }),
                limit: r.u32("limit")?,
            })
        } else {
            None
        };
        Ok(Self {
            group,
            topics,
            page,
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

impl CommittedOffset {
    /// Its encoded size, bytes.
    pub fn encoded_len(&self) -> usize {
        2 + self.topic.len() + 4 + 8 + 2 + self.metadata.len()
    }
}

/// The answer to a fetch of offsets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchOffsetsResponse {
    /// Committed offsets, ordered by topic then partition.
    pub offsets: Vec<CommittedOffset>,
    /// Version 1 only: whether offsets after the last one listed remain (ask again
    /// with it as the cursor). `None` is a version 0 answer.
    pub more: Option<bool>,
}

impl FetchOffsetsResponse {
    /// The version the response is encoded in: 1 when it answers a page.
    pub(crate) fn version(&self) -> u16 {
        u16::from(self.more.is_some())
    }

    /// The encoded size of the body, error code included, bytes.
    pub fn encoded_len(&self) -> usize {
        2 + 4
            + self
                .offsets
                .iter()
                .map(CommittedOffset::encoded_len)
                .sum::<usize>()
            + usize::from(self.more.is_some())
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_count(buf, self.offsets.len())?;
        for o in &self.offsets {
            put_string(buf, &o.topic)?;
            buf.put_u32(o.partition);
            buf.put_i64(o.offset);
            put_string(buf, &o.metadata)?;
        }
        if let Some(more) = self.more {
            put_bool(buf, more);
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            offsets: r.array("offsets", 16, |r| {
                Ok(CommittedOffset {
                    topic: r.string("topic")?,
                    partition: r.u32("partition")?,
                    offset: r.i64("offset")?,
                    metadata: r.string("metadata")?,
                })
            })?,
            more: if version >= 1 {
                Some(r.bool("more")?)
            } else {
                None
            },
        })
    }
}
