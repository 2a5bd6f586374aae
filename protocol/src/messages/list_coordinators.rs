//! ListCoordinators (API key 13): the other coordinators of the answering one's
//! cluster, so that a tool can ask each of them what only it knows (its groups, for
//! ListGroups). A single coordinator answers with an empty list.

use bytes::BytesMut;

use crate::wire::{put_count, put_string, Reader};
use crate::{DecodeError, EncodeError};

/// Lists the other coordinators of the cluster. No body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListCoordinatorsRequest;

impl ListCoordinatorsRequest {
    pub(crate) fn encode(&self, _buf: &mut BytesMut) -> Result<(), EncodeError> {
        Ok(())
    }

    pub(crate) fn decode(_r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self)
    }
}

/// Another coordinator of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CoordinatorListing {
    /// Its id in the cluster.
    pub id: String,
    /// Its advertised address, `host:port`, as FindCoordinator would give it.
    pub addr: String,
}

/// The other coordinators the answering one knows: live, or owning a slot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListCoordinatorsResponse {
    /// By id; never the answering coordinator; empty for a single coordinator.
    pub coordinators: Vec<CoordinatorListing>,
}

impl ListCoordinatorsResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_count(buf, self.coordinators.len())?;
        for c in &self.coordinators {
            put_string(buf, &c.id)?;
            put_string(buf, &c.addr)?;
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            coordinators: r.array("coordinators", 4, |r| {
                Ok(CoordinatorListing {
                    id: r.string("coordinator id")?,
                    addr: r.string("address")?,
                })
            })?,
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use crate::{
        ApiKey, Body, DecodeError, Frame, FrameError, Request, Response, DEFAULT_MAX_FRAME_SIZE,
        LENGTH_PREFIX_SIZE,
    };

    use super::*;

    fn encoded(frame: &Frame) -> Vec<u8> {
        let mut buf = BytesMut::new();
        frame.encode(&mut buf, DEFAULT_MAX_FRAME_SIZE).unwrap();
        buf[LENGTH_PREFIX_SIZE..].to_vec()
    }

    fn answer() -> Response {
        Response::ListCoordinators(ListCoordinatorsResponse {
            coordinators: vec![
                CoordinatorListing {
                    id: "c2".into(),
                    addr: "10.0.0.2:7070".into(),
                },
                CoordinatorListing {
                    id: "c3".into(),
                    addr: "10.0.0.3:7070".into(),
                },
            ],
        })
    }

    #[test]
    fn request_and_answers_round_trip() {
        for frame in [
            Frame::request(5, Request::ListCoordinators(ListCoordinatorsRequest)),
            Frame::response(5, answer()),
            Frame::response(
                5,
                Response::ListCoordinators(ListCoordinatorsResponse::default()),
            ),
        ] {
            let bytes = encoded(&frame);
            assert_eq!(bytes[1..3], (ApiKey::ListCoordinators as u16).to_be_bytes());
            assert_eq!(Frame::decode(&bytes).unwrap(), frame);
        }
    }

    #[test]
    fn it_is_advertised_at_version_zero() {
        let range = crate::supported_versions()
            .into_iter()
            .find(|r| r.api_key == ApiKey::ListCoordinators as u16)
            .expect("advertised");
        assert_eq!((range.min_version, range.max_version), (0, 0));
        assert_eq!(ApiKey::ListCoordinators as u16, 13);
        assert_eq!(ApiKey::ListCoordinators.as_str(), "list_coordinators");
    }

    #[test]
    fn malformed_bodies_are_typed_errors() {
        let bytes = encoded(&Frame::response(5, answer()));
        for cut in crate::HEADER_SIZE..bytes.len() {
            match Frame::decode(&bytes[..cut]) {
                Err(FrameError::Malformed {
                    header: Some(_),
                    source: DecodeError::Truncated { .. },
                }) => {}
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        // The request has no body: any byte is trailing.
        let mut request = encoded(&Frame::request(
            5,
            Request::ListCoordinators(ListCoordinatorsRequest),
        ));
        request.push(0);
        assert!(matches!(
            Frame::decode(&request),
            Err(FrameError::Malformed {
                source: DecodeError::TrailingBytes { count: 1 },
                ..
            })
        ));
        // A count larger than the bytes that follow is refused before allocating.
        let mut huge = encoded(&Frame::response(
            5,
            Response::ListCoordinators(ListCoordinatorsResponse::default()),
        ));
        let end = huge.len();
        huge[end - 4..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(Frame::decode(&huge).is_err());
        // A version above 0 is not this build's: unsupported, not malformed.
        let mut v1 = encoded(&Frame::request(
            5,
            Request::ListCoordinators(ListCoordinatorsRequest),
        ));
        v1[4] = 1;
        assert!(matches!(
            Frame::decode(&v1).unwrap().body,
            Body::Unsupported(_)
        ));
    }
}
