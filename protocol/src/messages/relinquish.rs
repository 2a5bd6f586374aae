//! Relinquish (API key 8): the process of a member the coordinator expelled (or fenced)
//! confirms that it has stopped acting on its partitions, so they need not wait for its
//! lease to run out.

use bytes::BytesMut;

use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Confirms that an expelled member's process no longer acts on its partitions.
///
/// Sent once the application has taken the member's `Lost` event. The coordinator grants
/// the partitions it was holding for that member at once. A member id the coordinator
/// does not remember as removed is answered `unknown_member` (nothing is held for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelinquishRequest {
    /// The member's group.
    pub group: String,
    /// The id the member had when it was expelled.
    pub member_id: String,
}

impl RelinquishRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        put_string(buf, &self.member_id)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
            member_id: r.string("member id")?,
        })
    }
}
