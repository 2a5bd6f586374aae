//! Every message body: requests, responses and pushes, with their encoders and decoders.
//!
//! The byte layout of each is given in `docs/PROTOCOL.md`; keep the two in step.

use bytes::{BufMut, BytesMut};

use crate::wire::{put_count, put_opt_string, put_string, Reader};
use crate::{ApiKey, DecodeError, EncodeError, ErrorCode};

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

fn encode_tps(buf: &mut BytesMut, tps: &[TopicPartitions]) -> Result<(), EncodeError> {
    put_count(buf, tps.len())?;
    for tp in tps {
        tp.encode(buf)?;
    }
    Ok(())
}

fn decode_tps(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<TopicPartitions>, DecodeError> {
    r.array(what, 6, TopicPartitions::decode)
}

/// A topic a member subscribes to, with the partition count it believes the topic has.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicSubscription {
    /// Topic name.
    pub topic: String,
    /// Number of partitions (partitions are numbered `0..partitions`).
    pub partitions: u32,
}

/// The range of versions one side supports for one API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersionRange {
    /// The API (request key or push key).
    pub api_key: u16,
    /// Lowest supported version.
    pub min_version: u16,
    /// Highest supported version.
    pub max_version: u16,
}

fn encode_versions(buf: &mut BytesMut, v: &[ApiVersionRange]) -> Result<(), EncodeError> {
    put_count(buf, v.len())?;
    for r in v {
        buf.put_u16(r.api_key);
        buf.put_u16(r.min_version);
        buf.put_u16(r.max_version);
    }
    Ok(())
}

fn decode_versions(r: &mut Reader<'_>) -> Result<Vec<ApiVersionRange>, DecodeError> {
    r.array("api versions", 6, |r| {
        Ok(ApiVersionRange {
            api_key: r.u16("api key")?,
            min_version: r.u16("min version")?,
            max_version: r.u16("max version")?,
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// The first request on every connection: the client's supported API versions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsRequest {
    /// Free-form client software name and version, for logs.
    pub client_software: String,
    /// What the client supports.
    pub versions: Vec<ApiVersionRange>,
}

/// Join a group, or rejoin it with a known member id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    /// Group to join; created by its first join.
    pub group: String,
    /// The member id from an earlier join, when rejoining after a lost connection.
    pub member_id: Option<String>,
    /// Static membership: a stable id for this process across restarts.
    pub instance_id: Option<String>,
    /// Free-form client name, shown by describe.
    pub client_id: String,
    /// Client-chosen nonzero token; a join retried with the same token (after a lost
    /// response) returns the same member instead of creating a second one.
    pub join_token: u64,
    /// Topics with the partition counts the member believes they have.
    pub subscription: Vec<TopicSubscription>,
    /// Session clock: silence longer than this expels the member.
    pub session_timeout_ms: u32,
    /// Progress clock: no advance of the progress counter for this long expels the member.
    pub progress_timeout_ms: u32,
    /// How long the member may take to acknowledge a revocation.
    pub rebalance_timeout_ms: u32,
}

/// A heartbeat: renews the session, reports progress, acknowledges revocations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatRequest {
    /// The member's group.
    pub group: String,
    /// The member id from join.
    pub member_id: String,
    /// The generation of the member's latest assignment.
    pub generation: u32,
    /// Increments by one per heartbeat sent, so lost beats can be told from late ones.
    pub sequence: u64,
    /// The application's progress counter; the progress clock renews when it advances.
    pub progress: u64,
    /// Partitions the member has finished with and releases (answers to a revoke push).
    pub acked_revocations: Vec<TopicPartitions>,
}

/// Leave a group gracefully: the member's partitions are released at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveRequest {
    /// The member's group.
    pub group: String,
    /// The member id from join.
    pub member_id: String,
    /// What the member did with its partitions. [`LeaveMode::Released`] is sent at
    /// version 0 (which has no such field); any other mode needs version 1.
    pub mode: LeaveMode,
}

/// How a member leaves (Leave version 1; version 0 always means `Released`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LeaveMode {
    /// The application released every partition: they move at once.
    #[default]
    Released = 0,
    /// The member leaves without the application having confirmed that it released
    /// every partition (its leave deadline passed): the member is removed at once, but
    /// its partitions move only when its lease has run out.
    Unconfirmed = 1,
    /// A static member's process shuts down for a restart and has stopped acting on
    /// its partitions: it stays a member (no rebalance) until a new process joins with
    /// the same instance id, which takes over at once, or until its session expires.
    StandDown = 2,
}

impl LeaveMode {
    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Released),
            1 => Some(Self::Unconfirmed),
            2 => Some(Self::StandDown),
            _ => None,
        }
    }

    /// Snake-case name, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Released => "released",
            Self::Unconfirmed => "unconfirmed",
            Self::StandDown => "stand_down",
        }
    }
}

/// One offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommit {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// The offset (the next record to process, by convention).
    pub offset: i64,
    /// Free-form metadata, bounded by the coordinator's limit.
    pub metadata: String,
}

/// Commit offsets, fenced by membership and ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOffsetsRequest {
    /// The group.
    pub group: String,
    /// The committing member; `None` is an administrative commit, accepted only while
    /// the group has no members.
    pub member_id: Option<String>,
    /// The generation the member's assignment carries.
    pub generation: u32,
    /// The offsets.
    pub offsets: Vec<OffsetCommit>,
}

/// Fetch committed offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOffsetsRequest {
    /// The group.
    pub group: String,
    /// Topics to fetch; empty means every topic with a committed offset.
    pub topics: Vec<String>,
}

/// Describe one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupRequest {
    /// The group.
    pub group: String,
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
    ListGroups,
    /// Describe a group (API key 7).
    DescribeGroup(DescribeGroupRequest),
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
            Self::ListGroups => ApiKey::ListGroups,
            Self::DescribeGroup(_) => ApiKey::DescribeGroup,
        }
    }

    /// The group the request addresses, if any.
    pub fn group(&self) -> Option<&str> {
        match self {
            Self::Join(r) => Some(&r.group),
            Self::Heartbeat(r) => Some(&r.group),
            Self::Leave(r) => Some(&r.group),
            Self::CommitOffsets(r) => Some(&r.group),
            Self::FetchOffsets(r) => Some(&r.group),
            Self::DescribeGroup(r) => Some(&r.group),
            Self::ApiVersions(_) | Self::ListGroups => None,
        }
    }

    /// The API version the request is encoded in: the lowest that can carry it.
    pub fn version(&self) -> u16 {
        match self {
            Self::Leave(r) if r.mode != LeaveMode::Released => 1,
            _ => 0,
        }
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        match self {
            Self::ApiVersions(r) => {
                put_string(buf, &r.client_software)?;
                encode_versions(buf, &r.versions)?;
            }
            Self::Join(r) => {
                put_string(buf, &r.group)?;
                put_opt_string(buf, r.member_id.as_deref())?;
                put_opt_string(buf, r.instance_id.as_deref())?;
                put_string(buf, &r.client_id)?;
                buf.put_u64(r.join_token);
                put_count(buf, r.subscription.len())?;
                for s in &r.subscription {
                    put_string(buf, &s.topic)?;
                    buf.put_u32(s.partitions);
                }
                buf.put_u32(r.session_timeout_ms);
                buf.put_u32(r.progress_timeout_ms);
                buf.put_u32(r.rebalance_timeout_ms);
            }
            Self::Heartbeat(r) => {
                put_string(buf, &r.group)?;
                put_string(buf, &r.member_id)?;
                buf.put_u32(r.generation);
                buf.put_u64(r.sequence);
                buf.put_u64(r.progress);
                encode_tps(buf, &r.acked_revocations)?;
            }
            Self::Leave(r) => {
                put_string(buf, &r.group)?;
                put_string(buf, &r.member_id)?;
                if r.mode != LeaveMode::Released {
                    buf.put_u8(r.mode as u8);
                }
            }
            Self::CommitOffsets(r) => {
                put_string(buf, &r.group)?;
                put_opt_string(buf, r.member_id.as_deref())?;
                buf.put_u32(r.generation);
                put_count(buf, r.offsets.len())?;
                for o in &r.offsets {
                    put_string(buf, &o.topic)?;
                    buf.put_u32(o.partition);
                    buf.put_i64(o.offset);
                    put_string(buf, &o.metadata)?;
                }
            }
            Self::FetchOffsets(r) => {
                put_string(buf, &r.group)?;
                put_count(buf, r.topics.len())?;
                for t in &r.topics {
                    put_string(buf, t)?;
                }
            }
            Self::ListGroups => {}
            Self::DescribeGroup(r) => put_string(buf, &r.group)?,
        }
        Ok(())
    }

    pub(crate) fn decode(
        key: ApiKey,
        version: u16,
        r: &mut Reader<'_>,
    ) -> Result<Self, DecodeError> {
        let req = match key {
            ApiKey::ApiVersions => Self::ApiVersions(ApiVersionsRequest {
                client_software: r.string("client software")?,
                versions: decode_versions(r)?,
            }),
            ApiKey::Join => Self::Join(JoinRequest {
                group: r.string("group")?,
                member_id: r.opt_string("member id")?,
                instance_id: r.opt_string("instance id")?,
                client_id: r.string("client id")?,
                join_token: r.u64("join token")?,
                subscription: r.array("subscription", 6, |r| {
                    Ok(TopicSubscription {
                        topic: r.string("topic")?,
                        partitions: r.u32("partition count")?,
                    })
                })?,
                session_timeout_ms: r.u32("session timeout")?,
                progress_timeout_ms: r.u32("progress timeout")?,
                rebalance_timeout_ms: r.u32("rebalance timeout")?,
            }),
            ApiKey::Heartbeat => Self::Heartbeat(HeartbeatRequest {
                group: r.string("group")?,
                member_id: r.string("member id")?,
                generation: r.u32("generation")?,
                sequence: r.u64("sequence")?,
                progress: r.u64("progress")?,
                acked_revocations: decode_tps(r, "acked revocations")?,
            }),
            ApiKey::Leave => Self::Leave(LeaveRequest {
                group: r.string("group")?,
                member_id: r.string("member id")?,
                mode: if version >= 1 {
                    LeaveMode::from_u8(r.u8("leave mode")?).ok_or(DecodeError::Invalid {
                        what: "leave mode",
                        reason: "must be 0 (released), 1 (unconfirmed) or 2 (stand down)",
                    })?
                } else {
                    LeaveMode::Released
                },
            }),
            ApiKey::CommitOffsets => Self::CommitOffsets(CommitOffsetsRequest {
                group: r.string("group")?,
                member_id: r.opt_string("member id")?,
                generation: r.u32("generation")?,
                offsets: r.array("offsets", 16, |r| {
                    Ok(OffsetCommit {
                        topic: r.string("topic")?,
                        partition: r.u32("partition")?,
                        offset: r.i64("offset")?,
                        metadata: r.string("metadata")?,
                    })
                })?,
            }),
            ApiKey::FetchOffsets => Self::FetchOffsets(FetchOffsetsRequest {
                group: r.string("group")?,
                topics: r.array("topics", 2, |r| r.string("topic"))?,
            }),
            ApiKey::ListGroups => Self::ListGroups,
            ApiKey::DescribeGroup => Self::DescribeGroup(DescribeGroupRequest {
                group: r.string("group")?,
            }),
        };
        Ok(req)
    }
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// The answer to the version handshake.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsResponse {
    /// What the coordinator supports (requests and pushes).
    pub versions: Vec<ApiVersionRange>,
    /// The largest frame the coordinator accepts, in bytes (length prefix excluded).
    pub max_frame_size: u32,
}

/// The answer to a join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResponse {
    /// The member's id (fresh, or the one the same join token received before).
    pub member_id: String,
    /// The group's generation at the time of the join. The member's first assignment
    /// follows by push.
    pub generation: u32,
    /// The heartbeat interval the coordinator suggests.
    pub heartbeat_interval_ms: u32,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatResponse {
    /// The generation of the member's current assignment. When it differs from the
    /// generation the member sent, the coordinator has also pushed the assignment again.
    pub generation: u32,
    /// The member's session timeout as the coordinator applies it; the member's lease is
    /// measured against it.
    pub session_timeout_ms: u32,
}

/// The outcome for one committed partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionResult {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// `ErrorCode::None` if stored, otherwise why not.
    pub error: ErrorCode,
}

/// The answer to a commit. Sent only after every accepted offset is durable.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommitOffsetsResponse {
    /// One result per requested offset, in request order.
    pub results: Vec<PartitionResult>,
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

/// The answer to a fetch of offsets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchOffsetsResponse {
    /// Committed offsets, ordered by topic then partition.
    pub offsets: Vec<CommittedOffset>,
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

/// How the coordinator judges a member's liveness right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// Heard from recently.
    Alive,
    /// Silent for longer than usual but not yet past its deadline.
    Suspect,
}

impl Liveness {
    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::Alive => 0,
            Self::Suspect => 1,
        }
    }

    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Alive,
            1 => Self::Suspect,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alive => "alive",
            Self::Suspect => "suspect",
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

/// The answer to list groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsResponse {
    /// Every group the coordinator knows, by name.
    pub groups: Vec<GroupListing>,
}

/// One member as described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// Static instance id, if any.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Liveness.
    pub liveness: Liveness,
    /// Milliseconds since the last frame from the member.
    pub since_heartbeat_ms: u64,
    /// Milliseconds since the member's progress counter last advanced.
    pub since_progress_ms: u64,
    /// Partitions the member owns (including those pending revocation).
    pub owned: Vec<TopicPartitions>,
    /// Owned partitions the member has been asked to release.
    pub pending_revoke: Vec<TopicPartitions>,
    /// Partitions assigned to the member that wait for their previous owner to release them.
    pub pending_grant: Vec<TopicPartitions>,
}

/// The answer to describe group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeGroupResponse {
    /// Group id.
    pub group: String,
    /// State.
    pub state: GroupState,
    /// Generation.
    pub generation: u32,
    /// Assignor name.
    pub assignor: String,
    /// Members, by member id.
    pub members: Vec<MemberDescription>,
}

/// An error answer to any request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse {
    /// The API key of the request it answers (echoed from the request header).
    pub api_key: u16,
    /// What went wrong (never `ErrorCode::None`).
    pub code: ErrorCode,
    /// A human-readable explanation.
    pub message: String,
    /// For `UnsupportedVersion` and `UnknownApi`: what the coordinator supports.
    pub supported: Vec<ApiVersionRange>,
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
            Self::Error(e) => return e.api_key,
        };
        key as u16
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        if let Self::Error(e) = self {
            buf.put_u16(e.code.to_u16());
            put_string(buf, &e.message)?;
            return encode_versions(buf, &e.supported);
        }
        buf.put_u16(ErrorCode::None.to_u16());
        match self {
            Self::ApiVersions(r) => {
                encode_versions(buf, &r.versions)?;
                buf.put_u32(r.max_frame_size);
            }
            Self::Join(r) => {
                put_string(buf, &r.member_id)?;
                buf.put_u32(r.generation);
                buf.put_u32(r.heartbeat_interval_ms);
            }
            Self::Heartbeat(r) => {
                buf.put_u32(r.generation);
                buf.put_u32(r.session_timeout_ms);
            }
            Self::Leave => {}
            Self::CommitOffsets(r) => {
                put_count(buf, r.results.len())?;
                for p in &r.results {
                    put_string(buf, &p.topic)?;
                    buf.put_u32(p.partition);
                    buf.put_u16(p.error.to_u16());
                }
            }
            Self::FetchOffsets(r) => {
                put_count(buf, r.offsets.len())?;
                for o in &r.offsets {
                    put_string(buf, &o.topic)?;
                    buf.put_u32(o.partition);
                    buf.put_i64(o.offset);
                    put_string(buf, &o.metadata)?;
                }
            }
            Self::ListGroups(r) => {
                put_count(buf, r.groups.len())?;
                for g in &r.groups {
                    put_string(buf, &g.group)?;
                    buf.put_u8(g.state.to_u8());
                    buf.put_u32(g.generation);
                    buf.put_u32(g.members);
                }
            }
            Self::DescribeGroup(r) => {
                put_string(buf, &r.group)?;
                buf.put_u8(r.state.to_u8());
                buf.put_u32(r.generation);
                put_string(buf, &r.assignor)?;
                put_count(buf, r.members.len())?;
                for m in &r.members {
                    put_string(buf, &m.member_id)?;
                    put_opt_string(buf, m.instance_id.as_deref())?;
                    put_string(buf, &m.client_id)?;
                    buf.put_u8(m.liveness.to_u8());
                    buf.put_u64(m.since_heartbeat_ms);
                    buf.put_u64(m.since_progress_ms);
                    encode_tps(buf, &m.owned)?;
                    encode_tps(buf, &m.pending_revoke)?;
                    encode_tps(buf, &m.pending_grant)?;
                }
            }
            Self::Error(_) => unreachable!("handled above"),
        }
        Ok(())
    }

    pub(crate) fn decode(key: ApiKey, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let code = r.u16("error code")?;
        let code = ErrorCode::from_u16(code).ok_or(DecodeError::Invalid {
            what: "error code",
            reason: "unknown error code",
        })?;
        if code != ErrorCode::None {
            return Self::decode_error_tail(key as u16, code, r);
        }
        let resp = match key {
            ApiKey::ApiVersions => Self::ApiVersions(ApiVersionsResponse {
                versions: decode_versions(r)?,
                max_frame_size: r.u32("max frame size")?,
            }),
            ApiKey::Join => Self::Join(JoinResponse {
                member_id: r.string("member id")?,
                generation: r.u32("generation")?,
                heartbeat_interval_ms: r.u32("heartbeat interval")?,
            }),
            ApiKey::Heartbeat => Self::Heartbeat(HeartbeatResponse {
                generation: r.u32("generation")?,
                session_timeout_ms: r.u32("session timeout")?,
            }),
            ApiKey::Leave => Self::Leave,
            ApiKey::CommitOffsets => Self::CommitOffsets(CommitOffsetsResponse {
                results: r.array("results", 8, |r| {
                    let topic = r.string("topic")?;
                    let partition = r.u32("partition")?;
                    let error =
                        ErrorCode::from_u16(r.u16("error code")?).ok_or(DecodeError::Invalid {
                            what: "error code",
                            reason: "unknown error code",
                        })?;
                    Ok(PartitionResult {
                        topic,
                        partition,
                        error,
                    })
                })?,
            }),
            ApiKey::FetchOffsets => Self::FetchOffsets(FetchOffsetsResponse {
                offsets: r.array("offsets", 16, |r| {
                    Ok(CommittedOffset {
                        topic: r.string("topic")?,
                        partition: r.u32("partition")?,
                        offset: r.i64("offset")?,
                        metadata: r.string("metadata")?,
                    })
                })?,
            }),
            ApiKey::ListGroups => Self::ListGroups(ListGroupsResponse {
                groups: r.array("groups", 11, |r| {
                    Ok(GroupListing {
                        group: r.string("group")?,
                        state: decode_state(r)?,
                        generation: r.u32("generation")?,
                        members: r.u32("member count")?,
                    })
                })?,
            }),
            ApiKey::DescribeGroup => Self::DescribeGroup(DescribeGroupResponse {
                group: r.string("group")?,
                state: decode_state(r)?,
                generation: r.u32("generation")?,
                assignor: r.string("assignor")?,
                members: r.array("members", 34, |r| {
                    Ok(MemberDescription {
                        member_id: r.string("member id")?,
                        instance_id: r.opt_string("instance id")?,
                        client_id: r.string("client id")?,
                        liveness: Liveness::from_u8(r.u8("liveness")?).ok_or(
                            DecodeError::Invalid {
                                what: "liveness",
                                reason: "unknown liveness value",
                            },
                        )?,
                        since_heartbeat_ms: r.u64("since heartbeat")?,
                        since_progress_ms: r.u64("since progress")?,
                        owned: decode_tps(r, "owned")?,
                        pending_revoke: decode_tps(r, "pending revoke")?,
                        pending_grant: decode_tps(r, "pending grant")?,
                    })
                })?,
            }),
        };
        Ok(resp)
    }
}

impl Response {
    fn decode_error_tail(
        api_key: u16,
        code: ErrorCode,
        r: &mut Reader<'_>,
    ) -> Result<Self, DecodeError> {
        Ok(Self::Error(ErrorResponse {
            api_key,
            code,
            message: r.string("error message")?,
            supported: decode_versions(r)?,
        }))
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
        let response = Self::decode_error_tail(api_key, code, r).ok()?;
        r.finish().ok()?;
        Some(response)
    }
}

fn decode_state(r: &mut Reader<'_>) -> Result<GroupState, DecodeError> {
    GroupState::from_u8(r.u8("group state")?).ok_or(DecodeError::Invalid {
        what: "group state",
        reason: "unknown group state",
    })
}

// ---------------------------------------------------------------------------------------------
// Pushes
// ---------------------------------------------------------------------------------------------

/// Why a member was removed from its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpelReason {
    /// No frame from the member within its session timeout.
    SessionExpired,
    /// The member's progress counter did not advance within its progress timeout.
    ProgressExpired,
    /// The member did not acknowledge a revocation within its rebalance timeout.
    RebalanceTimeout,
    /// A newer process joined with the same static instance id.
    Fenced,
    /// The member left.
    Left,
}

impl ExpelReason {
    /// Wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            Self::SessionExpired => 1,
            Self::ProgressExpired => 2,
            Self::RebalanceTimeout => 3,
            Self::Fenced => 4,
            Self::Left => 5,
        }
    }

    /// From wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::SessionExpired,
            2 => Self::ProgressExpired,
            3 => Self::RebalanceTimeout,
            4 => Self::Fenced,
            5 => Self::Left,
            _ => return None,
        })
    }

    /// Snake-case name, used in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionExpired => "session_expired",
            Self::ProgressExpired => "progress_expired",
            Self::RebalanceTimeout => "rebalance_timeout",
            Self::Fenced => "fenced",
            Self::Left => "left",
        }
    }
}

/// The member's full current assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentPush {
    /// The group.
    pub group: String,
    /// The member.
    pub member_id: String,
    /// The generation this assignment belongs to.
    pub generation: u32,
    /// Every partition the member owns now (a full set, not a delta).
    pub partitions: Vec<TopicPartitions>,
}

/// A request to release partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokePush {
    /// The group.
    pub group: String,
    /// The member.
    pub member_id: String,
    /// The generation that moves them.
    pub generation: u32,
    /// Every owned partition the member must release (a full set, not a delta).
    pub partitions: Vec<TopicPartitions>,
}

/// The member is no longer in the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpelledPush {
    /// The group.
    pub group: String,
    /// The member.
    pub member_id: String,
    /// Why.
    pub reason: ExpelReason,
    /// A human-readable explanation.
    pub message: String,
}

/// The coordinator is shutting down; memberships are kept until their sessions expire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownPush {
    /// A human-readable explanation.
    pub message: String,
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
    /// The push's key.
    pub fn key(&self) -> crate::PushKey {
        match self {
            Self::Assignment(_) => crate::PushKey::Assignment,
            Self::Revoke(_) => crate::PushKey::Revoke,
            Self::Expelled(_) => crate::PushKey::Expelled,
            Self::Shutdown(_) => crate::PushKey::Shutdown,
        }
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        match self {
            Self::Assignment(p) => {
                put_string(buf, &p.group)?;
                put_string(buf, &p.member_id)?;
                buf.put_u32(p.generation);
                encode_tps(buf, &p.partitions)?;
            }
            Self::Revoke(p) => {
                put_string(buf, &p.group)?;
                put_string(buf, &p.member_id)?;
                buf.put_u32(p.generation);
                encode_tps(buf, &p.partitions)?;
            }
            Self::Expelled(p) => {
                put_string(buf, &p.group)?;
                put_string(buf, &p.member_id)?;
                buf.put_u8(p.reason.to_u8());
                put_string(buf, &p.message)?;
            }
            Self::Shutdown(p) => put_string(buf, &p.message)?,
        }
        Ok(())
    }

    pub(crate) fn decode(key: crate::PushKey, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use crate::PushKey;
        Ok(match key {
            PushKey::Assignment => Self::Assignment(AssignmentPush {
                group: r.string("group")?,
                member_id: r.string("member id")?,
                generation: r.u32("generation")?,
                partitions: decode_tps(r, "partitions")?,
            }),
            PushKey::Revoke => Self::Revoke(RevokePush {
                group: r.string("group")?,
                member_id: r.string("member id")?,
                generation: r.u32("generation")?,
                partitions: decode_tps(r, "partitions")?,
            }),
            PushKey::Expelled => Self::Expelled(ExpelledPush {
                group: r.string("group")?,
                member_id: r.string("member id")?,
                reason: ExpelReason::from_u8(r.u8("reason")?).ok_or(DecodeError::Invalid {
                    what: "expel reason",
                    reason: "unknown expel reason",
                })?,
                message: r.string("message")?,
            }),
            PushKey::Shutdown => Self::Shutdown(ShutdownPush {
                message: r.string("message")?,
            }),
        })
    }
}
