//! FindCoordinator (API key 12): which coordinator serves a group. Any coordinator
//! answers it, for any group, whether or not it serves that group itself.

use bytes::BytesMut;

use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Asks which coordinator serves `group`.
///
/// Answered with the serving coordinator's advertised address, or with an error:
/// `coordinator_loading` (its owner is loading it, or handing it over: ask again after a
/// backoff) or `not_coordinator` (no owner is known yet: ask again after a backoff).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindCoordinatorRequest {
    /// The group.
    pub group: String,
}

impl FindCoordinatorRequest {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            group: r.string("group")?,
        })
    }
}

/// The coordinator that serves the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindCoordinatorResponse {
    /// Its advertised address, `host:port`: connect there (it may be the coordinator
    /// that answered).
    pub addr: String,
}

impl FindCoordinatorResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.addr)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            addr: r.string("address")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use crate::{
        ApiKey, Body, DecodeError, ErrorCode, Frame, FrameError, Request, Response,
        DEFAULT_MAX_FRAME_SIZE, LENGTH_PREFIX_SIZE,
    };

    use super::*;

    fn encoded(frame: &Frame) -> Vec<u8> {
        let mut buf = BytesMut::new();
        frame.encode(&mut buf, DEFAULT_MAX_FRAME_SIZE).unwrap();
        buf[LENGTH_PREFIX_SIZE..].to_vec()
    }

    #[test]
    fn request_and_answers_round_trip() {
        for frame in [
            Frame::request(
                7,
                Request::FindCoordinator(FindCoordinatorRequest {
                    group: "billing".into(),
                }),
            ),
            Frame::response(
                7,
                Response::FindCoordinator(FindCoordinatorResponse {
                    addr: "10.0.0.2:7070".into(),
                }),
            ),
            Frame::response(
                7,
                Response::error(
                    ApiKey::FindCoordinator as u16,
                    ErrorCode::CoordinatorLoading,
                    "loading",
                ),
            ),
        ] {
            let bytes = encoded(&frame);
            assert_eq!(bytes[1..3], (ApiKey::FindCoordinator as u16).to_be_bytes());
            assert_eq!(Frame::decode(&bytes).unwrap(), frame);
        }
    }

    #[test]
    fn the_errors_have_their_numbers_and_actions() {
        assert_eq!(ErrorCode::NotCoordinator.to_u16(), 30);
        assert_eq!(ErrorCode::CoordinatorLoading.to_u16(), 31);
        assert_eq!(ErrorCode::from_u16(30), Some(ErrorCode::NotCoordinator));
        assert_eq!(ErrorCode::from_u16(31), Some(ErrorCode::CoordinatorLoading));
        assert_eq!(
            ErrorCode::NotCoordinator.action(),
            crate::ClientAction::FindCoordinator
        );
        assert_eq!(
            ErrorCode::CoordinatorLoading.action(),
            crate::ClientAction::Retry
        );
        assert_eq!(ErrorCode::NotCoordinator.as_str(), "not_coordinator");
        assert_eq!(
            ErrorCode::CoordinatorLoading.as_str(),
            "coordinator_loading"
        );
    }

    #[test]
    fn it_is_advertised_at_version_zero() {
        let range = crate::supported_versions()
            .into_iter()
            .find(|r| r.api_key == ApiKey::FindCoordinator as u16)
            .expect("advertised");
        assert_eq!((range.min_version, range.max_version), (0, 0));
    }

    #[test]
    fn malformed_bodies_are_typed_errors() {
        let request = Frame::request(
            3,
            Request::FindCoordinator(FindCoordinatorRequest {
                group: "billing".into(),
            }),
        );
        let response = Frame::response(
            3,
            Response::FindCoordinator(FindCoordinatorResponse {
                addr: "10.0.0.2:7070".into(),
            }),
        );
        for frame in [request, response] {
            let bytes = encoded(&frame);
            // Every truncation of the body is refused as truncated.
            for cut in crate::HEADER_SIZE..bytes.len() {
                match Frame::decode(&bytes[..cut]) {
                    Err(FrameError::Malformed {
                        header: Some(_),
                        source: DecodeError::Truncated { .. },
                    }) => {}
                    other => panic!("cut at {cut}: {other:?}"),
                }
            }
            // A byte too many is refused as trailing.
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(matches!(
                Frame::decode(&longer),
                Err(FrameError::Malformed {
                    source: DecodeError::TrailingBytes { count: 1 },
                    ..
                })
            ));
        }
        // A string that is not UTF-8.
        let mut bad = encoded(&Frame::request(
            3,
            Request::FindCoordinator(FindCoordinatorRequest { group: "ab".into() }),
        ));
        let end = bad.len();
        bad[end - 1] = 0xff;
        assert!(matches!(
            Frame::decode(&bad),
            Err(FrameError::Malformed {
                source: DecodeError::Invalid { .. },
                ..
            })
        ));
        // A version above 0 is not this build's: unsupported, not malformed.
        let mut v1 = encoded(&Frame::request(
            3,
            Request::FindCoordinator(FindCoordinatorRequest { group: "g".into() }),
        ));
        v1[4] = 1;
        assert!(matches!(
            Frame::decode(&v1).unwrap().body,
            Body::Unsupported(_)
        ));
    }
}
