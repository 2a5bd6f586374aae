//! ListGroups (API key 6, versions 0 and 1): the groups the coordinator knows. Version
//! 0 has no request body and answers with every group; version 1 asks for a page of
//! them, in order of group id, and the answer says whether more follow.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_bool, put_count, put_opt_string, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// A page of an ordered listing: the entries after `after` (from the first when
/// `None`), at most `limit` of them (0: as many as fit one frame). The coordinator may
/// answer with fewer, to fit its frame size; the answer's `more` says whether to ask
/// again, from its last entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<C> {
    /// The last entry of the previous page (its cursor); `None` for the first page.
    pub after: Option<C>,
    /// The most entries wanted; 0 for no limit but the frame's.
    pub limit: u32,
}

impl<C> Default for Page<C> {
    /// The first page, as large as fits a frame.
    fn default() -> Self {
        Self {
            after: None,
            limit: 0,
        }
    }
}

/// Counts what a page has room for: entries up to its limit, bytes up to the answer's
/// frame. The first entry is always taken (one entry alone must fit the frame: the
/// server's configuration sees to it), so every page makes progress. One rule for every
/// paged answer, whoever assembles it.
#[derive(Debug)]
pub struct PageFit {
    entries: usize,
    limit: usize,
    room: usize,
}

impl PageFit {
    /// A page of at most `limit` entries (0: no limit) in a frame of at most
    /// `max_frame_size` bytes (header included, length prefix not), whose answer
    /// without entries takes `base` bytes of the body.
    pub fn new(limit: u32, max_frame_size: usize, base: usize) -> Self {
        Self {
            entries: 0,
            limit: if limit == 0 {
                usize::MAX
            } else {
                limit as usize
            },
            room: max_frame_size.saturating_sub(crate::HEADER_SIZE + base),
        }
    }

    /// Takes an entry of `size` bytes if the page has room for it.
    pub fn take(&mut self, size: usize) -> bool {
        if self.entries >= self.limit || (self.entries > 0 && size > self.room) {
            return false;
        }
        self.entries += 1;
        self.room = self.room.saturating_sub(size);
        true
    }
}

/// List the coordinator's groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsRequest {
    /// Version 1: a page of the groups, by group id (the cursor is the last group id
    /// of the previous page). `None` (version 0): every group, in one answer.
    pub page: Option<Page<String>>,
}

impl ListGroupsRequest {
    /// The lowest version that can carry the request.
    pub(crate) fn version(&self) -> u16 {
        u16::from(self.page.is_some())
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        if let Some(page) = &self.page {
            put_opt_string(buf, page.after.as_deref())?;
            buf.put_u32(page.limit);
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if version == 0 {
            return Ok(Self { page: None });
        }
        Ok(Self {
            page: Some(Page {
                after: r.opt_string("after")?,
                limit: r.u32("limit")?,
            }),
        })
    }
}

/// The state of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    /// No members.
    Empty,
    /// A rebalance is in progress: some partitions await revocation or grant.
    Reconciling,
    /// Every member holds its target assignment.
    Stable,
}

impl GroupState {
    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Empty => 0,
            Self::Reconciling => 1,
            Self::Stable => 2,
        }
    }

    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Empty,
            1 => Self::Reconciling,
            2 => Self::Stable,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Reconciling => "reconciling",
            Self::Stable => "stable",
        }
    }
}

/// One group in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group: String,
    /// State.
    pub state: GroupState,
    /// Generation.
    pub generation: u32,
    /// Number of members.
    pub members: u32,
}

impl GroupListing {
    /// Its encoded size, bytes.
    pub fn encoded_len(&self) -> usize {
        2 + self.group.len() + 1 + 4 + 4
    }
}

/// The answer to list groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsResponse {
    /// The groups, by group id: every one (version 0) or a page (version 1).
    pub groups: Vec<GroupListing>,
    /// Version 1 only: whether groups after the last one listed remain (ask again with
    /// it as the cursor). `None` is a version 0 answer.
    pub more: Option<bool>,
}

impl ListGroupsResponse {
    /// The version the response is encoded in: 1 when it answers a page.
    pub(crate) fn version(&self) -> u16 {
        u16::from(self.more.is_some())
    }

    /// The encoded size of the body, error code included, bytes.
    pub fn encoded_len(&self) -> usize {
        2 + 4
            + self
                .groups
                .iter()
                .map(GroupListing::encoded_len)
                .sum::<usize>()
            + usize::from(self.more.is_some())
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_count(buf, self.groups.len())?;
        for g in &self.groups {
            put_string(buf, &g.group)?;
            buf.put_u8(g.state.to_u8());
            buf.put_u32(g.generation);
            buf.put_u32(g.members);
        }
        if let Some(more) = self.more {
            put_bool(buf, more);
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            groups: r.array("groups", 11, |r| {
                Ok(GroupListing {
                    group: r.string("group")?,
                    state: decode_state(r)?,
                    generation: r.u32("generation")?,
                    members: r.u32("member count")?,
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

pub(crate) fn decode_state(r: &mut Reader<'_>) -> Result<GroupState, DecodeError> {
    GroupState::from_u8(r.u8("group state")?).ok_or(DecodeError::Invalid {
        what: "group state",
        reason: "unknown group state",
    })
}
