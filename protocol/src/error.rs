//! Error codes carried on the wire, and the codec's own errors.

use thiserror::Error;

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $value:literal, $snake:literal, $action:ident; )*) => {
        /// Every error the coordinator can answer with. Values are stable: never renumber.
        ///
        /// Each variant's documentation says what it means and what a client should do.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $( $(#[$doc])* $name, )*
        }

        impl ErrorCode {
            /// Every code, in numeric order.
            pub const ALL: &'static [Self] = &[$( Self::$name, )*];

            /// Wire value.
            pub fn to_u16(self) -> u16 {
                match self { $( Self::$name => $value, )* }
            }

            /// From wire value; `None` for values this version does not know.
            pub fn from_u16(v: u16) -> Option<Self> {
                match v { $( $value => Some(Self::$name), )* _ => None }
            }

            /// Snake-case name, used in logs and metric labels.
            pub fn as_str(self) -> &'static str {
                match self { $( Self::$name => $snake, )* }
            }

            /// What a client should do on receiving it.
            pub fn action(self) -> ClientAction {
                match self { $( Self::$name => ClientAction::$action, )* }
            }
        }
    };
}

error_codes! {
    /// Success.
    None = 0, "none", Proceed;
    /// The API version is not supported; the response lists what is. Retry with a
    /// supported version, or give up if there is none.
    UnsupportedVersion = 1, "unsupported_version", GiveUp;
    /// The API key is unknown; the response lists what is supported. Give up on this call.
    UnknownApi = 2, "unknown_api", GiveUp;
    /// A request other than ApiVersions arrived before the handshake. Send ApiVersions first.
    HandshakeRequired = 3, "handshake_required", GiveUp;
    /// The frame could not be decoded. The coordinator closes the connection after answering.
    MalformedFrame = 4, "malformed_frame", GiveUp;
    /// The frame's declared length exceeds the maximum. The connection is closed.
    FrameTooLarge = 5, "frame_too_large", GiveUp;
    /// The group does not exist (describe, fetch). Nothing to retry.
    UnknownGroup = 6, "unknown_group", GiveUp;
    /// The member id is not known to the group (never joined, or forgotten). Rejoin.
    UnknownMember = 7, "unknown_member", Rejoin;
    /// The member was expelled (session, progress or rebalance timeout). Its partitions are
    /// lost; rejoin to get new ones.
    MemberExpelled = 8, "member_expelled", Rejoin;
    /// A newer process joined with the same static instance id. This process must stop:
    /// rejoining would fence the other one.
    FencedInstance = 9, "fenced_instance", GiveUp;
    /// The generation is newer than the group's, or otherwise impossible. Rejoin.
    IllegalGeneration = 10, "illegal_generation", Rejoin;
    /// A commit for a partition the member does not own and never owned. Do not retry.
    NotOwner = 11, "not_owner", GiveUp;
    /// A commit for a partition the member owned but has since released. Do not retry.
    PartitionRevoked = 12, "partition_revoked", GiveUp;
    /// The subscription declares a partition count that differs from the group's for
    /// the same topic. Fix the configuration.
    InconsistentSubscription = 13, "inconsistent_subscription", GiveUp;
    /// The group has its maximum number of members. Retry later or use another group.
    GroupFull = 14, "group_full", GiveUp;
    /// The session timeout is outside the coordinator's bounds (the message says which).
    InvalidSessionTimeout = 15, "invalid_session_timeout", GiveUp;
    /// A field is invalid (empty group, zero join token, bad timeout, ...). Fix the request.
    InvalidRequest = 16, "invalid_request", GiveUp;
    /// The group would exceed the maximum number of partitions.
    TooManyPartitions = 17, "too_many_partitions", GiveUp;
    /// Commit metadata exceeds the maximum size.
    MetadataTooLarge = 18, "metadata_too_large", GiveUp;
    /// The coordinator is shutting down. Reconnect (with backoff) and carry on.
    CoordinatorShuttingDown = 19, "coordinator_shutting_down", Retry;
    /// The coordinator could not make the change durable. Retry with backoff.
    StorageFailure = 20, "storage_failure", Retry;
    /// The coordinator has its maximum number of connections. Retry with backoff.
    TooManyConnections = 21, "too_many_connections", Retry;
    /// The member's group id, member id or instance id is already in use differently
    /// (e.g. a rejoin naming another group's member). Rejoin without a member id.
    InconsistentMember = 22, "inconsistent_member", Rejoin;
    /// An internal error. Retry with backoff; report it.
    Internal = 23, "internal", Retry;
    /// The coordinator requires authentication and this connection has not authenticated:
    /// send Authenticate (or connect with a client certificate), then retry.
    AuthenticationRequired = 24, "authentication_required", GiveUp;
    /// Authentication failed (unknown user, wrong password, unsupported mechanism, or an
    /// exchange out of order). The coordinator closes the connection after answering.
    AuthenticationFailed = 25, "authentication_failed", GiveUp;
    /// The connection's principal may not do this to this group. The answer is the same
    /// whether or not the group exists.
    NotAuthorized = 26, "not_authorized", GiveUp;
    /// The coordinator has its maximum number of groups: a Join or an administrative
    /// commit that would create a group is refused. Use an existing group, or retry
    /// once groups have gone.
    TooManyGroups = 27, "too_many_groups", GiveUp;
    /// The group has its maximum number of committed offsets or of commit metadata
    /// bytes, or the coordinator its maximum across groups (per partition, in a commit
    /// response). Offsets already committed can still be updated.
    TooManyOffsets = 28, "too_many_offsets", GiveUp;
    /// The coordinator has its maximum number of members across all its groups.
    /// Retry later or use another coordinator.
    TooManyMembers = 29, "too_many_members", GiveUp;
    /// This coordinator does not serve the group (another one does, or none does yet):
    /// find the group's coordinator (FindCoordinator, on any coordinator), connect
    /// there and retry, keeping the member id and generation. Not a reason to rejoin.
    NotCoordinator = 30, "not_coordinator", FindCoordinator;
    /// This coordinator is taking the group over and is still loading it: retry on the
    /// same coordinator after a backoff, keeping the member id and generation.
    CoordinatorLoading = 31, "coordinator_loading", Retry;
}

/// What a client should do with an error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAction {
    /// Not an error.
    Proceed,
    /// Transient: retry the same request with backoff.
    Retry,
    /// The membership is gone: join again (without the old member id).
    Rejoin,
    /// Permanent for this request: surface it to the application.
    GiveUp,
    /// Another coordinator serves the group: find it, connect there and retry the
    /// request, as the same member.
    FindCoordinator,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The body ended before a field did.
    #[error("frame truncated while reading {what}")]
    Truncated {
        /// The field being read.
        what: &'static str,
    },
    /// A field held a value the protocol does not allow.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// The field.
        what: &'static str,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The body was longer than its message.
    #[error("{count} unexpected bytes after the message")]
    TrailingBytes {
        /// How many bytes were left over.
        count: usize,
    },
}

/// A frame the codec refused, and why. Always fatal to the connection: after it, the
/// byte stream cannot be trusted to be at a frame boundary.
#[derive(Debug, Error)]
pub enum FrameError {
    /// The length prefix exceeds the configured maximum; nothing was allocated for it.
    #[error("frame of {declared} bytes exceeds the maximum of {max} bytes")]
    TooLarge {
        /// The declared length.
        declared: usize,
        /// The maximum.
        max: usize,
    },
    /// The length prefix is too small to hold a header.
    #[error("frame of {declared} bytes is shorter than the {min}-byte header")]
    TooShort {
        /// The declared length.
        declared: usize,
        /// The header size.
        min: usize,
    },
    /// The header or body could not be decoded. `header` is set when the header was
    /// readable, so the peer can be answered with the right correlation id.
    #[error("malformed frame: {source}")]
    Malformed {
        /// The header, if it was readable.
        header: Option<crate::Header>,
        /// What was wrong.
        source: DecodeError,
    },
    /// The frame could not be encoded.
    #[error("cannot encode frame: {0}")]
    Encode(#[from] EncodeError),
    /// The underlying transport failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a frame could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// A string longer than 65,535 bytes.
    #[error("string of {len} bytes exceeds 65535")]
    StringTooLong {
        /// Its length.
        len: usize,
    },
    /// An array with more than 2^32 - 1 elements.
    #[error("array of {len} elements is too long")]
    ArrayTooLong {
        /// Its length.
        len: usize,
    },
    /// The encoded frame exceeds the maximum frame size.
    #[error("encoded frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
}
