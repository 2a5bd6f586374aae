//! Shutdown (push key 67): the coordinator is going away; memberships are kept.

use bytes::BytesMut;

use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError};

/// The coordinator is shutting down; memberships are kept until their sessions expire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownPush {
    /// A human-readable explanation.
    pub message: String,
}

impl ShutdownPush {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.message)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            message: r.string("message")?,
        })
    }
}
