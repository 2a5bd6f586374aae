//! Heartbeats (API key 9, versions 0 and 1): many members' heartbeats in one frame, for
//! a client that multiplexes members over one connection; one result per beat, in
//! order. At version 1 every beat is a Heartbeat version 1 body (with its loads).

use bytes::{BufMut, BytesMut};

use super::{HeartbeatRequest, HeartbeatResponse, Response};
use crate::wire::{put_count, put_string, Reader};
use crate::{ApiKey, DecodeError, EncodeError, ErrorCode, HEADER_SIZE};

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
    /// How to split `beats`, in order, into Heartbeats requests of at most
    /// [`MAX_BEATS`] beats whose frames fit `max_frame_size` (length prefix excluded):
    /// the number of beats in each. A beat too large for a frame of its own still gets
    /// one.
    pub fn batch_sizes<'a>(
        beats: impl IntoIterator<Item = &'a HeartbeatRequest>,
        max_frame_size: usize,
    ) -> Vec<usize> {
        let beats: Vec<&HeartbeatRequest> = beats.into_iter().collect();
        // A frame with a beat that reports loads goes at version 1, where every beat
        // has a loads array: counted for all, so that any split fits.
        let version = beats.iter().map(|b| b.version()).max().unwrap_or(0);
        let empty = HEADER_SIZE + 4;
        let mut sizes = Vec::new();
        let (mut count, mut size) = (0, empty);
        for beat in beats {
            let len = beat.encoded_len_at(version);
            if count > 0 && (count == MAX_BEATS || size + len > max_frame_size) {
                sizes.push(count);
                (count, size) = (0, empty);
            }
            count += 1;
            size += len;
        }
        if count > 0 {
            sizes.push(count);
        }
        sizes
    }

    /// The lowest version that can carry the request: 1 when a beat reports loads.
    pub(crate) fn version(&self) -> u16 {
        u16::from(self.beats.iter().any(|b| !b.loads.is_empty()))
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let version = self.version();
        put_count(buf, self.beats.len())?;
        for beat in &self.beats {
            beat.encode_at(version, buf)?;
        }
        Ok(())
    }

    pub(crate) fn decode(version: u16, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // group, member id, generation, sequence, progress, acked revocations: 2+2+4+8+8+4
        // (and the loads' count at version 1).
        let min = if version >= 1 { 32 } else { 28 };
        Ok(Self {
            beats: r.array("beats", min, |r| HeartbeatRequest::decode(version, r))?,
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
    /// The result standing for a lone Heartbeat's answer: a Heartbeat response or an
    /// error (any other answer is reported as an internal error).
    pub fn from_response(response: Response) -> Self {
        match response {
            Response::Heartbeat(h) => Self {
                code: ErrorCode::None,
                generation: h.generation,
                session_timeout_ms: h.session_timeout_ms,
                message: String::new(),
            },
            Response::Error(e) => Self::error(e.code, e.message),
            other => Self::error(
                ErrorCode::Internal,
                format!("unexpected answer to a heartbeat: {other:?}"),
            ),
        }
    }

    /// An error result.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            generation: 0,
            session_timeout_ms: 0,
            message: message.into(),
        }
    }

    /// The answer a lone Heartbeat carrying this beat would have had.
    pub fn into_response(self) -> Response {
        match self.code {
            ErrorCode::None => Response::Heartbeat(HeartbeatResponse {
                generation: self.generation,
                session_timeout_ms: self.session_timeout_ms,
            }),
            code => Response::error(ApiKey::Heartbeat as u16, code, self.message),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Frame, Request};

    fn beat(member: &str) -> HeartbeatRequest {
        HeartbeatRequest {
            group: "g0".into(),
            member_id: member.into(),
            generation: 1,
            sequence: 1,
            progress: 1,
            acked_revocations: Vec::new(),
            loads: Vec::new(),
        }
    }

    #[test]
    fn a_result_stands_for_a_lone_answer_both_ways() {
        let ok = Response::Heartbeat(HeartbeatResponse {
            generation: 3,
            session_timeout_ms: 10_000,
        });
        assert_eq!(
            HeartbeatResult::from_response(ok.clone()).into_response(),
            ok
        );
        let gone = Response::error(ApiKey::Heartbeat as u16, ErrorCode::UnknownMember, "gone");
        assert_eq!(
            HeartbeatResult::from_response(gone.clone()).into_response(),
            gone
        );
        let odd = HeartbeatResult::from_response(Response::Leave);
        assert_eq!(odd.code, ErrorCode::Internal);
    }

    #[test]
    fn beats_split_into_frames_that_fit() {
        let beats: Vec<HeartbeatRequest> = (0..7).map(|i| beat(&format!("m-{i}"))).collect();
        let len = beats[0].encoded_len();
        let mut encoded = BytesMut::new();
        Frame::request(1, Request::Heartbeat(beats[0].clone()))
            .encode(&mut encoded, usize::MAX)
            .unwrap();
        assert_eq!(
            encoded.len(),
            4 + 9 + len,
            "encoded_len is the encoded size"
        );
        assert_eq!(HeartbeatsRequest::batch_sizes(&beats, usize::MAX), [7]);
        // Room for three beats per frame.
        let max = 9 + 4 + 3 * len;
        let sizes = HeartbeatsRequest::batch_sizes(&beats, max);
        assert_eq!(sizes, [3, 3, 1]);
        let mut rest = &beats[..];
        for size in sizes {
            let (chunk, tail) = rest.split_at(size);
            rest = tail;
            let frame = Frame::request(
                1,
                Request::Heartbeats(HeartbeatsRequest {
                    beats: chunk.to_vec(),
                }),
            );
            assert!(frame.encode(&mut BytesMut::new(), max).is_ok());
        }
        let many = vec![beat("m"); MAX_BEATS + 1];
        assert_eq!(
            HeartbeatsRequest::batch_sizes(&many, usize::MAX),
            [MAX_BEATS, 1]
        );
        assert!(HeartbeatsRequest::batch_sizes(&[], usize::MAX).is_empty());
    }
}
