//! Heartbeats (API key 9): many members' heartbeats in one frame, for a client that
//! multiplexes members over one connection; one result per beat, in order.

use bytes::{BufMut, BytesMut};

use super::HeartbeatRequest;
use crate::wire::{put_count, put_string, Reader};
use crate::{DecodeError, EncodeError, ErrorCode};

/// The most beats one Heartbeats request may carry; more is `invalid_request`.
pub const MAX_BEATS: usize = 10_000;

/// Several members' heartbeats. Each beat is exactly a Heartbeat request's body and is
/// handled as if it had come alone; the members may be of any groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatsRequest {
    /// The beats, at least one and at most [`MAX_BEATS`].
    pub beats: Vec<HeartbeatRequest>,
}

impl HeartbeatsRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_count(buf, self.beats.len())?;
        for beat in &self.beats {
            beat.encode(buf)?;
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // group, member id, generation, sequence, progress, acked revocations: 2+2+4+8+8+4.
        Ok(Self {
            beats: r.array("beats", 28, HeartbeatRequest::decode)?,
        })
    }
}

/// The answer to one beat of a Heartbeats request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatResult {
    /// 0, or the error a Heartbeat request alone would have been answered with.
    pub code: ErrorCode,
    /// As in a Heartbeat response; 0 with an error.
    pub generation: u32,
    /// As in a Heartbeat response; 0 with an error.
    pub session_timeout_ms: u32,
    /// Empty, or the error's message.
    pub message: String,
}

impl HeartbeatResult {
    fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        buf.put_u16(self.code.to_u16());
        buf.put_u32(self.generation);
        buf.put_u32(self.session_timeout_ms);
        put_string(buf, &self.message)
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let code = ErrorCode::from_u16(r.u16("error code")?).ok_or(DecodeError::Invalid {
            what: "error code",
            reason: "unknown error code",
        })?;
        Ok(Self {
            code,
            generation: r.u32("generation")?,
            session_timeout_ms: r.u32("session timeout")?,
            message: r.string("message")?,
        })
    }
}

/// The answer to a Heartbeats request: one result per beat, in the request's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatsResponse {
    /// One per beat.
    pub results: Vec<HeartbeatResult>,
}

impl HeartbeatsResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_count(buf, self.results.len())?;
        for result in &self.results {
            result.encode(buf)?;
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            results: r.array("results", 12, HeartbeatResult::decode)?,
        })
    }
}
