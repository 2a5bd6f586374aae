//! rollcall's wire protocol.
//!
//! A connection carries length-prefixed frames in both directions. Every frame has a
//! nine-byte header (kind, API key, API version, correlation id) and a body whose layout
//! depends on the header. The client sends requests; the coordinator answers each with a
//! response carrying the same correlation id, and sends pushes (assignment changes,
//! revocations, expulsions) whenever it decides them. `docs/PROTOCOL.md` gives the byte
//! layout of everything here.
//!
//! This crate knows nothing of groups: it turns bytes into [`Frame`]s and back. Decoding
//! is total: any input yields a frame or a typed error, never a panic, and never an
//! allocation larger than the frame's declared (capped) size.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod codec;
mod error;
mod messages;
pub mod scram;
mod wire;

/// The string type of the ids in a Heartbeat request: it can point into the frame it
/// was read from.
pub use bytestring::ByteString;
pub use codec::{Codec, DEFAULT_MAX_FRAME_SIZE};
pub use error::{ClientAction, DecodeError, EncodeError, ErrorCode, FrameError};
pub use messages::*;

use bytes::{BufMut, BytesMut};

/// Size of the length prefix.
pub const LENGTH_PREFIX_SIZE: usize = 4;
/// Size of the header that follows the length prefix.
pub const HEADER_SIZE: usize = 9;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Client to coordinator; answered by a response with the same correlation id.
    Request,
    /// Coordinator to client, answering a request.
    Response,
    /// Coordinator to client, unprompted. Correlation id is 0.
    Push,
}

impl FrameKind {
    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Request => 0,
            Self::Response => 1,
            Self::Push => 2,
        }
    }

    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Request,
            1 => Self::Response,
            2 => Self::Push,
            _ => return None,
        })
    }
}

/// Request APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum ApiKey {
    /// Version handshake; must be the first request on a connection.
    ApiVersions = 0,
    /// Join a group.
    Join = 1,
    /// Heartbeat.
    Heartbeat = 2,
    /// Leave a group.
    Leave = 3,
    /// Commit offsets.
    CommitOffsets = 4,
    /// Fetch offsets.
    FetchOffsets = 5,
    /// List groups.
    ListGroups = 6,
    /// Describe a group.
    DescribeGroup = 7,
    /// An expelled member's process stopped acting on its partitions.
    Relinquish = 8,
    /// Many members' heartbeats in one frame.
    Heartbeats = 9,
    /// A page of a group's heartbeat arrivals.
    TraceGroup = 10,
    /// One step of authentication.
    Authenticate = 11,
    /// Which coordinator serves a group.
    FindCoordinator = 12,
    /// The cluster's other coordinators.
    ListCoordinators = 13,
    /// Drain (or undrain) members: their partitions move to others while they stay.
    Drain = 14,
    /// Read or change a group's operator settings.
    AlterGroupConfig = 15,
}

impl ApiKey {
    /// Every request API.
    pub const ALL: [Self; 16] = [
        Self::ApiVersions,
        Self::Join,
        Self::Heartbeat,
        Self::Leave,
        Self::CommitOffsets,
        Self::FetchOffsets,
        Self::ListGroups,
        Self::DescribeGroup,
        Self::Relinquish,
        Self::Heartbeats,
        Self::TraceGroup,
        Self::Authenticate,
        Self::FindCoordinator,
        Self::ListCoordinators,
        Self::Drain,
        Self::AlterGroupConfig,
    ];

    /// From wire value.
    pub fn from_u16(v: u16) -> Option<Self> {
        Self::ALL.get(usize::from(v)).copied()
    }

    /// Snake-case name, used in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ApiVersions => "api_versions",
            Self::Join => "join",
            Self::Heartbeat => "heartbeat",
            Self::Leave => "leave",
            Self::CommitOffsets => "commit_offsets",
            Self::FetchOffsets => "fetch_offsets",
            Self::ListGroups => "list_groups",
            Self::DescribeGroup => "describe_group",
            Self::Relinquish => "relinquish",
            Self::Heartbeats => "heartbeats",
            Self::TraceGroup => "trace_group",
            Self::Authenticate => "authenticate",
            Self::FindCoordinator => "find_coordinator",
            Self::ListCoordinators => "list_coordinators",
            Self::Drain => "drain",
            Self::AlterGroupConfig => "alter_group_config",
        }
    }
}

/// Push kinds; their keys share the API key space with requests, from 64 up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum PushKey {
    /// A member's full assignment.
    Assignment = 64,
    /// Partitions a member must release.
    Revoke = 65,
    /// A member was expelled.
    Expelled = 66,
    /// The coordinator is going away.
    Shutdown = 67,
}

impl PushKey {
    /// Every push.
    pub const ALL: [Self; 4] = [
        Self::Assignment,
        Self::Revoke,
        Self::Expelled,
        Self::Shutdown,
    ];

    /// From wire value.
    pub fn from_u16(v: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u16 == v)
    }
}

/// The version of every push, and of every request and response at its lowest version.
pub const CURRENT_VERSION: u16 = 0;

/// The highest version of `key` this build speaks (the lowest is always 0). Join is at
/// version 3 (1 adds the lease timeout, 2 the detector, 3 the member's placement),
/// Leave at 1 (the leave mode) and Heartbeat and Heartbeats at 1 (partition loads),
/// their responses the same at every version and sent as version 0; ListGroups and
/// FetchOffsets are at 1 (a page), DescribeGroup at 4 (1 adds the detection details, 2
/// a page of members, 3 the group's detection summary, 4 the operator's view), their
/// answers sent at the request's version.
pub fn max_request_version(key: ApiKey) -> u16 {
    match key {
        ApiKey::DescribeGroup => 4,
        ApiKey::Join => 3,
        ApiKey::Leave
        | ApiKey::ListGroups
        | ApiKey::FetchOffsets
        | ApiKey::Heartbeat
        | ApiKey::Heartbeats => 1,
        // TraceGroup 1 adds sequence numbers and events; its answer is sent at the
        // request's version.
        ApiKey::TraceGroup => 1,
        _ => CURRENT_VERSION,
    }
}

/// What this build supports: every request API from version 0 to its
/// [`max_request_version`], and every push at version 0.
pub fn supported_versions() -> Vec<ApiVersionRange> {
    ApiKey::ALL
        .iter()
        .map(|k| (*k as u16, max_request_version(*k)))
        .chain(PushKey::ALL.iter().map(|k| (*k as u16, CURRENT_VERSION)))
        .map(|(api_key, max_version)| ApiVersionRange {
            api_key,
            min_version: CURRENT_VERSION,
            max_version,
        })
        .collect()
}

/// A frame header as it appears on the wire after the length prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Request, response or push.
    pub kind: FrameKind,
    /// The API (or push) key.
    pub api_key: u16,
    /// The API version the body is encoded in.
    pub api_version: u16,
    /// Pairs a response with its request; 0 for pushes.
    pub correlation_id: u32,
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Pairs a response with its request; 0 for pushes.
    pub correlation_id: u32,
    /// What the frame carries.
    pub body: Body,
}

/// What a frame carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// A request.
    Request(Request),
    /// A response.
    Response(Response),
    /// A push.
    Push(Push),
    /// A well-framed frame whose API key or version this build does not know. Its body
    /// was skipped; the connection stays usable. A coordinator answers it with
    /// `UnsupportedVersion` or `UnknownApi`, listing what it supports. (A response with
    /// an unknown key or version whose body is an error decodes as
    /// [`Response::Error`] instead: error bodies have one layout for every API.)
    Unsupported(Header),
}

impl Frame {
    /// A request frame.
    pub fn request(correlation_id: u32, request: Request) -> Self {
        Self {
            correlation_id,
            body: Body::Request(request),
        }
    }

    /// A response frame.
    pub fn response(correlation_id: u32, response: Response) -> Self {
        Self {
            correlation_id,
            body: Body::Response(response),
        }
    }

    /// A push frame.
    pub fn push(push: Push) -> Self {
        Self {
            correlation_id: 0,
            body: Body::Push(push),
        }
    }

    /// The header this frame is encoded with.
    pub fn header(&self) -> Header {
        let (kind, api_key, api_version) = match &self.body {
            Body::Request(r) => (FrameKind::Request, r.api_key() as u16, r.version()),
            Body::Response(r) => (FrameKind::Response, r.api_key(), r.version()),
            Body::Push(p) => (FrameKind::Push, p.key() as u16, CURRENT_VERSION),
            Body::Unsupported(h) => (h.kind, h.api_key, h.api_version),
        };
        Header {
            kind,
            api_key,
            api_version,
            correlation_id: self.correlation_id,
        }
    }

    /// Appends the frame, length prefix included, to `buf`. Fails without writing
    /// anything if a field is too long or the frame would exceed `max_frame_size`.
    pub fn encode(&self, buf: &mut BytesMut, max_frame_size: usize) -> Result<(), EncodeError> {
        let start = buf.len();
        let header = self.header();
        buf.put_u32(0); // patched below
        buf.put_u8(header.kind.to_u8());
        buf.put_u16(header.api_key);
        buf.put_u16(header.api_version);
        buf.put_u32(header.correlation_id);
        let result = match &self.body {
            Body::Request(r) => r.encode(buf),
            Body::Response(r) => r.encode(buf),
            Body::Push(p) => p.encode(buf),
            Body::Unsupported(_) => Ok(()),
        };
        let len = buf.len() - start - LENGTH_PREFIX_SIZE;
        let result = result.and_then(|()| match u32::try_from(len) {
            // The length prefix is a u32 whatever the configured maximum.
            Ok(prefix) if len <= max_frame_size => Ok(prefix),
            _ => Err(EncodeError::FrameTooLarge {
                len,
                max: max_frame_size,
            }),
        });
        match result {
            Ok(prefix) => {
                buf[start..start + LENGTH_PREFIX_SIZE].copy_from_slice(&prefix.to_be_bytes());
                Ok(())
            }
            Err(e) => {
                buf.truncate(start);
                Err(e)
            }
        }
    }

    /// Decodes one frame's header and body (`bytes` excludes the length prefix).
    pub fn decode(bytes: &[u8]) -> Result<Self, FrameError> {
        Self::decode_from(wire::Reader::new(bytes))
    }

    /// As [`Frame::decode`], but the ids of heartbeats point into `bytes` instead of
    /// being copied (what [`Codec`] does).
    pub fn decode_shared(bytes: &bytes::Bytes) -> Result<Self, FrameError> {
        Self::decode_from(wire::Reader::shared(bytes))
    }

    fn decode_from(mut r: wire::Reader<'_>) -> Result<Self, FrameError> {
        let malformed = |header, source| FrameError::Malformed { header, source };
        let header = (|| {
            let kind = r.u8("frame kind")?;
            let kind = FrameKind::from_u8(kind).ok_or(DecodeError::Invalid {
                what: "frame kind",
                reason: "must be 0 (request), 1 (response) or 2 (push)",
            })?;
            Ok(Header {
                kind,
                api_key: r.u16("api key")?,
                api_version: r.u16("api version")?,
                correlation_id: r.u32("correlation id")?,
            })
        })()
        .map_err(|e| malformed(None, e))?;

        let unsupported = |r: &mut wire::Reader<'_>| {
            // An error answer has the same layout whatever the API and version, so it
            // stays readable even when the rest of the API is not (the answer to a
            // request with a key or version the peer does not support).
            let body = match header.kind {
                FrameKind::Response => Response::decode_foreign_error(header.api_key, r)
                    .map_or(Body::Unsupported(header), Body::Response),
                FrameKind::Request | FrameKind::Push => Body::Unsupported(header),
            };
            Self {
                correlation_id: header.correlation_id,
                body,
            }
        };
        let version = header.api_version;
        let body = match header.kind {
            FrameKind::Request | FrameKind::Response => {
                let Some(key) = ApiKey::from_u16(header.api_key) else {
                    return Ok(unsupported(&mut r));
                };
                // A response is at version 0, or at its request's version where the
                // answer's body changed with it (DescribeGroup 1 to 3, ListGroups 1,
                // FetchOffsets 1).
                let max = max_request_version(key);
                if version > max {
                    return Ok(unsupported(&mut r));
                }
                if header.kind == FrameKind::Request {
                    Request::decode(key, version, &mut r).map(Body::Request)
                } else {
                    Response::decode(key, version, &mut r).map(Body::Response)
                }
            }
            FrameKind::Push => {
                let Some(key) = PushKey::from_u16(header.api_key) else {
                    return Ok(unsupported(&mut r));
                };
                if version != CURRENT_VERSION {
                    return Ok(unsupported(&mut r));
                }
                Push::decode(key, &mut r).map(Body::Push)
            }
        };
        let body = body
            .and_then(|b| r.finish().map(|()| b))
            .map_err(|e| malformed(Some(header), e))?;
        Ok(Self {
            correlation_id: header.correlation_id,
            body,
        })
    }
}
