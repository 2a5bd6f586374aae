//! Every message body: requests, responses and pushes. Each message has a file of its
//! own (its types, encoder and decoder together); this file holds the shared pieces and
//! the dispatch by API or push key.
//!
//! The byte layout of each is given in `docs/PROTOCOL.md`; keep the two in step.

mod api_versions;
mod assignment;
mod authenticate;
mod commit_offsets;
mod describe_group;
mod drain;
mod error;
mod expelled;
mod fetch_offsets;
mod find_coordinator;
mod group_config;
mod heartbeat;
mod heartbeats;
mod join;
mod leave;
mod list_coordinators;
mod list_groups;
mod relinquish;
mod revoke;
mod shutdown;
mod trace_group;

use bytes::{BufMut, BytesMut};

pub use self::api_versions::{ApiVersionRange, ApiVersionsRequest, ApiVersionsResponse};
pub use self::assignment::AssignmentPush;
pub use self::authenticate::{AuthenticateRequest, AuthenticateResponse};
pub use self::commit_offsets::{
    CommitOffsetsRequest, CommitOffsetsResponse, OffsetCommit, PartitionResult,
};
pub use self::describe_group::{
    DescribeGroupRequest, DescribeGroupResponse, DetectionSummary, ExpelBasis, GroupDetection,
    GroupOperator, Liveness, MemberDescription, MemberDetection, MemberOperator, Reservation,
    TailCount,
};
pub use self::drain::{DrainRequest, DrainResponse};
pub use self::error::ErrorResponse;
pub use self::expelled::{ExpelReason, ExpelledPush};
pub use self::fetch_offsets::{
    CommittedOffset, FetchOffsetsRequest, FetchOffsetsResponse, OffsetCursor,
};
pub use self::find_coordinator::{FindCoordinatorRequest, FindCoordinatorResponse};
pub use self::group_config::{AlterGroupConfigRequest, AlterGroupConfigResponse, GroupSettings};
pub use self::heartbeat::{HeartbeatRequest, HeartbeatResponse, PartitionLoad};
pub use self::heartbeats::{HeartbeatResult, HeartbeatsRequest, HeartbeatsResponse, MAX_BEATS};
pub use self::join::{JoinPlacement, JoinRequest, JoinResponse, TopicRacks, TopicSubscription};
pub use self::leave::{LeaveMode, LeaveRequest};
pub use self::list_coordinators::{
    CoordinatorListing, ListCoordinatorsRequest, ListCoordinatorsResponse,
};
pub use self::list_groups::{
    GroupListing, GroupState, ListGroupsRequest, ListGroupsResponse, Page, PageFit,
};
pub use self::relinquish::RelinquishRequest;
pub use self::revoke::RevokePush;
pub use self::shutdown::ShutdownPush;
pub use self::trace_group::{Arrival, ArrivalKind, TraceGroupRequest, TraceGroupResponse};

use crate::wire::{put_count, put_string, Reader};
use crate::{ApiKey, DecodeError, EncodeError, ErrorCode, PushKey};

/// A topic and some of its partitions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TopicPartitions {
    /// Topic name.
    pub topic: String,
    /// Partition indexes, ascending.
    pub partitions: Vec<u32>,
}

impl TopicPartitions {
    fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.topic)?;
        put_count(buf, self.partitions.len())?;
        for p in &self.partitions {
            buf.put_u32(*p);
        }
        Ok(())
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let topic = r.string("topic")?;
        let partitions = r.array("partitions", 4, |r| r.u32("partition"))?;
        Ok(Self { topic, partitions })
    }
}

pub(crate) fn encode_tps(buf: &mut BytesMut, tps: &[TopicPartitions]) -> Result<(), EncodeError> {
    put_count(buf, tps.len())?;
    for tp in tps {
        tp.encode(buf)?;
    }
    Ok(())
}

pub(crate) fn decode_tps(
    r: &mut Reader<'_>,
    what: &'static str,
) -> Result<Vec<TopicPartitions>, DecodeError> {
    r.array(what, 6, TopicPartitions::decode)
}

/// A request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Version handshake (API key 0).
    ApiVersions(ApiVersionsRequest),
    /// Join (API key 1).
    Join(JoinRequest),
    /// Heartbeat (API key 2).
    Heartbeat(HeartbeatRequest),
    /// Leave (API key 3).
    Leave(LeaveRequest),
    /// Commit offsets (API key 4).
    CommitOffsets(CommitOffsetsRequest),
    /// Fetch offsets (API key 5).
    FetchOffsets(FetchOffsetsRequest),
    /// List groups (API key 6).
    ListGroups(ListGroupsRequest),
    /// Describe a group (API key 7).
    DescribeGroup(DescribeGroupRequest),
    /// An expelled member's process stopped acting on its partitions (API key 8).
    Relinquish(RelinquishRequest),
    /// Many members' heartbeats in one frame (API key 9).
    Heartbeats(HeartbeatsRequest),
    /// A page of a group's heartbeat arrivals (API key 10).
    TraceGroup(TraceGroupRequest),
    /// One step of authentication (API key 11).
    Authenticate(AuthenticateRequest),
    /// Which coordinator serves a group (API key 12).
    FindCoordinator(FindCoordinatorRequest),
    /// The cluster's other coordinators (API key 13).
    ListCoordinators(ListCoordinatorsRequest),
    /// Drain or undrain members (API key 14).
    Drain(DrainRequest),
    /// Read or change a group's operator settings (API key 15).
    AlterGroupConfig(AlterGroupConfigRequest),
}

impl Request {
    /// The request's API key.
    pub fn api_key(&self) -> ApiKey {
        match self {
            Self::ApiVersions(_) => ApiKey::ApiVersions,
            Self::Join(_) => ApiKey::Join,
            Self::Heartbeat(_) => ApiKey::Heartbeat,
            Self::Leave(_) => ApiKey::Leave,
            Self::CommitOffsets(_) => ApiKey::CommitOffsets,
            Self::FetchOffsets(_) => ApiKey::FetchOffsets,
            Self::ListGroups(_) => ApiKey::ListGroups,
            Self::DescribeGroup(_) => ApiKey::DescribeGroup,
            Self::Relinquish(_) => ApiKey::Relinquish,
            Self::Heartbeats(_) => ApiKey::Heartbeats,
            Self::TraceGroup(_) => ApiKey::TraceGroup,
            Self::Authenticate(_) => ApiKey::Authenticate,
            Self::FindCoordinator(_) => ApiKey::FindCoordinator,
            Self::ListCoordinators(_) => ApiKey::ListCoordinators,
            Self::Drain(_) => ApiKey::Drain,
            Self::AlterGroupConfig(_) => ApiKey::AlterGroupConfig,
        }
    }

    /// The group the request addresses, if any (a Heartbeats request has one per beat).
    pub fn group(&self) -> Option<&str> {
        match self {
            Self::Join(r) => Some(&r.group),
            Self::Heartbeat(r) => Some(&r.group),
            Self::Leave(r) => Some(&r.group),
            Self::CommitOffsets(r) => Some(&r.group),
            Self::FetchOffsets(r) => Some(&r.group),
            Self::DescribeGroup(r) => Some(&r.group),
            Self::Relinquish(r) => Some(&r.group),
            Self::TraceGroup(r) => Some(&r.group),
            Self::FindCoordinator(r) => Some(&r.group),
            Self::Drain(r) => Some(&r.group),
            Self::AlterGroupConfig(r) => Some(&r.group),
            Self::ApiVersions(_)
            | Self::ListGroups(_)
            | Self::Heartbeats(_)
            | Self::Authenticate(_)
            | Self::ListCoordinators(_) => None,
        }
    }

    /// The API version the request is encoded in: the lowest that can carry it.
    pub fn version(&self) -> u16 {
        match self {
            Self::Join(r) => r.version(),
            Self::Leave(r) => r.version(),
            Self::DescribeGroup(r) => r.version(),
            Self::ListGroups(r) => r.version(),
            Self::FetchOffsets(r) => r.version(),
            Self::TraceGroup(r) => r.version(),
            Self::Heartbeat(r) => r.version(),
            Self::Heartbeats(r) => r.version(),
            _ => 0,
        }
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        match self {
            Self::ApiVersions(r) => r.encode(buf),
            Self::Join(r) => r.encode(buf),
            Self::Heartbeat(r) => r.encode(buf),
            Self::Leave(r) => r.encode(buf),
            Self::CommitOffsets(r) => r.encode(buf),
            Self::FetchOffsets(r) => r.encode(buf),
            Self::ListGroups(r) => r.encode(buf),
            Self::DescribeGroup(r) => r.encode(buf),
            Self::Relinquish(r) => r.encode(buf),
            Self::Heartbeats(r) => r.encode(buf),
            Self::TraceGroup(r) => r.encode(buf),
            Self::Authenticate(r) => r.encode(buf),
            Self::FindCoordinator(r) => r.encode(buf),
            Self::ListCoordinators(r) => r.encode(buf),
            Self::Drain(r) => r.encode(buf),
            Self::AlterGroupConfig(r) => r.encode(buf),
        }
    }

    pub(crate) fn decode(
        key: ApiKey,
        version: u16,
        r: &mut Reader<'_>,
    ) -> Result<Self, DecodeError> {
        Ok(match key {
            ApiKey::ApiVersions => Self::ApiVersions(ApiVersionsRequest::decode(r)?),
            ApiKey::Join => Self::Join(JoinRequest::decode(version, r)?),
            ApiKey::Heartbeat => Self::Heartbeat(HeartbeatRequest::decode(version, r)?),
            ApiKey::Leave => Self::Leave(LeaveRequest::decode(version, r)?),
            ApiKey::CommitOffsets => Self::CommitOffsets(CommitOffsetsRequest::decode(r)?),
            ApiKey::FetchOffsets => Self::FetchOffsets(FetchOffsetsRequest::decode(version, r)?),
            ApiKey::ListGroups => Self::ListGroups(ListGroupsRequest::decode(version, r)?),
            ApiKey::DescribeGroup => Self::DescribeGroup(DescribeGroupRequest::decode(version, r)?),
            ApiKey::Relinquish => Self::Relinquish(RelinquishRequest::decode(r)?),
            ApiKey::Heartbeats => Self::Heartbeats(HeartbeatsRequest::decode(version, r)?),
            ApiKey::TraceGroup => Self::TraceGroup(TraceGroupRequest::decode(version, r)?),
            ApiKey::Authenticate => Self::Authenticate(AuthenticateRequest::decode(r)?),
            ApiKey::FindCoordinator => Self::FindCoordinator(FindCoordinatorRequest::decode(r)?),
            ApiKey::ListCoordinators => Self::ListCoordinators(ListCoordinatorsRequest::decode(r)?),
            ApiKey::Drain => Self::Drain(DrainRequest::decode(r)?),
            ApiKey::AlterGroupConfig => Self::AlterGroupConfig(AlterGroupConfigRequest::decode(r)?),
        })
    }
}

/// A response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Answer to ApiVersions.
    ApiVersions(ApiVersionsResponse),
    /// Answer to Join.
    Join(JoinResponse),
    /// Answer to Heartbeat.
    Heartbeat(HeartbeatResponse),
    /// Answer to Leave.
    Leave,
    /// Answer to CommitOffsets.
    CommitOffsets(CommitOffsetsResponse),
    /// Answer to FetchOffsets.
    FetchOffsets(FetchOffsetsResponse),
    /// Answer to ListGroups.
    ListGroups(ListGroupsResponse),
    /// Answer to DescribeGroup.
    DescribeGroup(DescribeGroupResponse),
    /// Answer to Relinquish: the held partitions were released.
    Relinquish,
    /// Answer to Heartbeats: one result per beat.
    Heartbeats(HeartbeatsResponse),
    /// Answer to TraceGroup: a page of arrivals.
    TraceGroup(TraceGroupResponse),
    /// Answer to Authenticate: the coordinator's message for this step.
    Authenticate(AuthenticateResponse),
    /// Answer to FindCoordinator: the group's coordinator.
    FindCoordinator(FindCoordinatorResponse),
    /// Answer to ListCoordinators: the cluster's other coordinators.
    ListCoordinators(ListCoordinatorsResponse),
    /// Answer to Drain: the members it changed.
    Drain(DrainResponse),
    /// Answer to AlterGroupConfig: the group's settings.
    AlterGroupConfig(AlterGroupConfigResponse),
    /// Any request refused.
    Error(ErrorResponse),
}

impl Response {
    /// An error answer to a request with `api_key`.
    pub fn error(api_key: u16, code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Error(ErrorResponse {
            api_key,
            code,
            message: message.into(),
            supported: Vec::new(),
        })
    }

    /// The API key this response answers.
    pub fn api_key(&self) -> u16 {
        let key = match self {
            Self::ApiVersions(_) => ApiKey::ApiVersions,
            Self::Join(_) => ApiKey::Join,
            Self::Heartbeat(_) => ApiKey::Heartbeat,
            Self::Leave => ApiKey::Leave,
            Self::CommitOffsets(_) => ApiKey::CommitOffsets,
            Self::FetchOffsets(_) => ApiKey::FetchOffsets,
            Self::ListGroups(_) => ApiKey::ListGroups,
            Self::DescribeGroup(_) => ApiKey::DescribeGroup,
            Self::Relinquish => ApiKey::Relinquish,
            Self::Heartbeats(_) => ApiKey::Heartbeats,
            Self::TraceGroup(_) => ApiKey::TraceGroup,
            Self::Authenticate(_) => ApiKey::Authenticate,
            Self::FindCoordinator(_) => ApiKey::FindCoordinator,
            Self::ListCoordinators(_) => ApiKey::ListCoordinators,
            Self::Drain(_) => ApiKey::Drain,
            Self::AlterGroupConfig(_) => ApiKey::AlterGroupConfig,
            Self::Error(e) => return e.api_key,
        };
        key as u16
    }

    /// The body: an error code (0 unless an error), then the API's fields.
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        if let Self::Error(e) = self {
            return e.encode(buf);
        }
        buf.put_u16(ErrorCode::None.to_u16());
        match self {
            Self::ApiVersions(r) => r.encode(buf),
            Self::Join(r) => r.encode(buf),
            Self::Heartbeat(r) => r.encode(buf),
            Self::Leave => Ok(()),
            Self::CommitOffsets(r) => r.encode(buf),
            Self::FetchOffsets(r) => r.encode(buf),
            Self::ListGroups(r) => r.encode(buf),
            Self::DescribeGroup(r) => r.encode(buf),
            Self::Relinquish => Ok(()),
            Self::Heartbeats(r) => r.encode(buf),
            Self::TraceGroup(r) => r.encode(buf),
            Self::Authenticate(r) => r.encode(buf),
            Self::FindCoordinator(r) => r.encode(buf),
            Self::ListCoordinators(r) => r.encode(buf),
            Self::Drain(r) => r.encode(buf),
            Self::AlterGroupConfig(r) => r.encode(buf),
            Self::Error(_) => unreachable!("handled above"),
        }
    }

    /// The API version the response is encoded in: 0, except the answers whose body
    /// changed with their request's version: a DescribeGroup answer carrying detection
    /// details (1), a page of members (2), a page with the group's detection summary
    /// (3) or with the operator's view too (4), a ListGroups or FetchOffsets answer carrying a page (1), and a TraceGroup
    /// answer carrying events (1).
    pub fn version(&self) -> u16 {
        match self {
            Self::DescribeGroup(r) => r.version(),
            Self::ListGroups(r) => r.version(),
            Self::FetchOffsets(r) => r.version(),
            Self::TraceGroup(r) => r.version(),
            _ => 0,
        }
    }

    pub(crate) fn decode(
        key: ApiKey,
        version: u16,
        r: &mut Reader<'_>,
    ) -> Result<Self, DecodeError> {
        let code = r.u16("error code")?;
        let code = ErrorCode::from_u16(code).ok_or(DecodeError::Invalid {
            what: "error code",
            reason: "unknown error code",
        })?;
        if code != ErrorCode::None {
            return Ok(Self::Error(ErrorResponse::decode_tail(
                key as u16, code, r,
            )?));
        }
        Ok(match key {
            ApiKey::ApiVersions => Self::ApiVersions(ApiVersionsResponse::decode(r)?),
            ApiKey::Join => Self::Join(JoinResponse::decode(r)?),
            ApiKey::Heartbeat => Self::Heartbeat(HeartbeatResponse::decode(r)?),
            ApiKey::Leave => Self::Leave,
            ApiKey::CommitOffsets => Self::CommitOffsets(CommitOffsetsResponse::decode(r)?),
            ApiKey::FetchOffsets => Self::FetchOffsets(FetchOffsetsResponse::decode(version, r)?),
            ApiKey::ListGroups => Self::ListGroups(ListGroupsResponse::decode(version, r)?),
            ApiKey::DescribeGroup => {
                Self::DescribeGroup(DescribeGroupResponse::decode(version, r)?)
            }
            ApiKey::Relinquish => Self::Relinquish,
            ApiKey::Heartbeats => Self::Heartbeats(HeartbeatsResponse::decode(r)?),
            ApiKey::TraceGroup => Self::TraceGroup(TraceGroupResponse::decode(version, r)?),
            ApiKey::Authenticate => Self::Authenticate(AuthenticateResponse::decode(r)?),
            ApiKey::FindCoordinator => Self::FindCoordinator(FindCoordinatorResponse::decode(r)?),
            ApiKey::ListCoordinators => {
                Self::ListCoordinators(ListCoordinatorsResponse::decode(r)?)
            }
            ApiKey::Drain => Self::Drain(DrainResponse::decode(r)?),
            ApiKey::AlterGroupConfig => {
                Self::AlterGroupConfig(AlterGroupConfigResponse::decode(r)?)
            }
        })
    }

    /// Decodes the body of a response whose API key or version this build does not know,
    /// if it is an error. An error body has the same layout for every API and version,
    /// so the answer to a request this build sent with a key or version the peer does
    /// not support (`UnknownApi`, `UnsupportedVersion`) stays readable. `None` when the
    /// body is anything else, including a success body; the caller then skips it.
    pub(crate) fn decode_foreign_error(api_key: u16, r: &mut Reader<'_>) -> Option<Self> {
        let code = ErrorCode::from_u16(r.u16("error code").ok()?)?;
        if code == ErrorCode::None {
            return None;
        }
        let response = ErrorResponse::decode_tail(api_key, code, r).ok()?;
        r.finish().ok()?;
        Some(Self::Error(response))
    }
}

/// A push body: a notification the coordinator sends without a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    /// Assignment changed (push key 64).
    Assignment(AssignmentPush),
    /// Revocation requested (push key 65).
    Revoke(RevokePush),
    /// Expelled (push key 66).
    Expelled(ExpelledPush),
    /// Coordinator shutting down (push key 67).
    Shutdown(ShutdownPush),
}

impl Push {
    /// The group the push is about (none for Shutdown).
    pub fn group(&self) -> Option<&str> {
        match self {
            Self::Assignment(p) => Some(&p.group),
            Self::Revoke(p) => Some(&p.group),
            Self::Expelled(p) => Some(&p.group),
            Self::Shutdown(_) => None,
        }
    }

    /// The push's key.
    pub fn key(&self) -> PushKey {
        match self {
            Self::Assignment(_) => PushKey::Assignment,
            Self::Revoke(_) => PushKey::Revoke,
            Self::Expelled(_) => PushKey::Expelled,
            Self::Shutdown(_) => PushKey::Shutdown,
        }
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        match self {
            Self::Assignment(p) => p.encode(buf),
            Self::Revoke(p) => p.encode(buf),
            Self::Expelled(p) => p.encode(buf),
            Self::Shutdown(p) => p.encode(buf),
        }
    }

    pub(crate) fn decode(key: PushKey, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(match key {
            PushKey::Assignment => Self::Assignment(AssignmentPush::decode(r)?),
            PushKey::Revoke => Self::Revoke(RevokePush::decode(r)?),
            PushKey::Expelled => Self::Expelled(ExpelledPush::decode(r)?),
            PushKey::Shutdown => Self::Shutdown(ShutdownPush::decode(r)?),
        })
    }
}
