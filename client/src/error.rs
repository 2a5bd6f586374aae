//! Typed errors.

use std::time::Duration;

use rollcall_protocol::ErrorCode;
use thiserror::Error;

use crate::types::TopicPartition;

/// A member configuration the client refuses before contacting the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A capacity of 0 was declared (leave it undeclared for the default of 1).
    #[error("the capacity must be at least 1")]
    ZeroCapacity,
    /// Preferred racks were given for a topic the member does not subscribe to.
    #[error("preferred racks for topic '{topic}', which is not subscribed")]
    RacksForUnsubscribedTopic {
        /// The topic.
        topic: String,
    },
    /// Preferred racks were given for another number of partitions than subscribed.
    #[error("topic '{topic}': {racks} preferred racks for {partitions} partitions")]
    RacksCount {
        /// The topic.
        topic: String,
        /// Racks given.
        racks: usize,
        /// Partitions subscribed.
        partitions: u32,
    },
    /// The group name is empty.
    #[error("the group name is empty")]
    EmptyGroup,
    /// No topic is subscribed.
    #[error("the subscription names no topic")]
    NoTopics,
    /// A topic name is empty.
    #[error("a subscribed topic name is empty")]
    EmptyTopic,
    /// A topic is declared with zero partitions.
    #[error("topic {topic:?} is declared with zero partitions")]
    NoPartitions {
        /// The topic.
        topic: String,
    },
    /// A topic is subscribed twice.
    #[error("topic {topic:?} is subscribed twice")]
    DuplicateTopic {
        /// The topic.
        topic: String,
    },
    /// The static instance id is empty (use `None` for a dynamic member).
    #[error("the static instance id is empty")]
    EmptyInstanceId,
    /// A timeout or interval is zero.
    #[error("the {which} is zero")]
    ZeroTimeout {
        /// Which setting.
        which: &'static str,
    },
    /// A timeout does not fit the wire's 32-bit milliseconds.
    #[error("the {which} of {value:?} exceeds 2^32 - 1 ms")]
    TimeoutTooLarge {
        /// Which setting.
        which: &'static str,
        /// Its value.
        value: Duration,
    },
    /// The heartbeat interval is not shorter than the session timeout.
    #[error("heartbeat interval {interval:?} must be shorter than the session timeout {session_timeout:?}")]
    HeartbeatIntervalTooLong {
        /// The interval.
        interval: Duration,
        /// The session timeout.
        session_timeout: Duration,
    },
    /// The lease safety margin is not shorter than the session timeout.
    #[error("lease safety margin {margin:?} must be shorter than the session timeout {session_timeout:?}")]
    LeaseMarginTooLarge {
        /// The margin.
        margin: Duration,
        /// The session timeout.
        session_timeout: Duration,
    },
    /// The lease timeout is longer than the session timeout.
    #[error(
        "lease timeout {lease_timeout:?} must not exceed the session timeout {session_timeout:?}"
    )]
    LeaseTimeoutTooLong {
        /// The lease timeout.
        lease_timeout: Duration,
        /// The session timeout.
        session_timeout: Duration,
    },
    /// Lease timeout minus margin does not exceed the heartbeat interval: the lease
    /// would lapse between two beats.
    #[error("lease of {lease:?} (lease timeout minus margin) must exceed the heartbeat interval {interval:?}")]
    LeaseShorterThanInterval {
        /// Lease timeout minus margin (zero if the margin is not shorter).
        lease: Duration,
        /// The interval.
        interval: Duration,
    },
}

/// Why [`Client::connect`](crate::Client::connect) failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The address could not be resolved or connected to.
    #[error("cannot connect: {0}")]
    Io(#[from] std::io::Error),
    /// The connection or handshake did not complete within the connect timeout.
    #[error("connection attempt timed out")]
    Timeout,
    /// The coordinator answered the handshake with an error.
    #[error("handshake refused: {code}: {message}")]
    Refused {
        /// The error code.
        code: ErrorCode,
        /// The coordinator's explanation.
        message: String,
    },
    /// The coordinator does not support an API version this client needs.
    #[error("the coordinator does not support {api} at version 0")]
    Unsupported {
        /// The missing API.
        api: &'static str,
    },
    /// The coordinator sent something other than a handshake answer, or closed.
    #[error("handshake failed: {0}")]
    Protocol(String),
    /// Authentication failed: wrong user or password, a coordinator that does not
    /// authenticate, or one that does not hold the user's credential (it may not be the
    /// real coordinator).
    #[error("authentication failed: {0}")]
    Authentication(String),
    /// TLS failed: a certificate or key file that cannot be used, the coordinator's
    /// certificate refused (expired, unknown issuer, another name), the client's refused
    /// by the coordinator, or a coordinator that does not speak TLS.
    #[error("TLS: {0}")]
    Tls(String),
}

/// Why a member is finished. Carried by [`Event::Fatal`](crate::Event::Fatal) and by
/// [`JoinError`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FatalError {
    /// Another process joined with the same static instance id. Rejoining would fence
    /// that process in turn, so this one must stop.
    #[error("fenced: another process joined with the same instance id: {message}")]
    Fenced {
        /// The coordinator's explanation.
        message: String,
    },
    /// The coordinator refuses the member's configuration (inconsistent subscription,
    /// session timeout out of bounds, group full, too many partitions, ...).
    #[error("join refused: {code}: {message}")]
    Refused {
        /// The error code.
        code: ErrorCode,
        /// The coordinator's explanation.
        message: String,
    },
}

/// Why [`Client::join`](crate::Client::join) failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The configuration is invalid; nothing was sent.
    #[error("invalid member configuration: {0}")]
    Config(#[from] ConfigError),
    /// The coordinator refused the join, or fenced it.
    #[error(transparent)]
    Fatal(#[from] FatalError),
    /// The client's connection task is gone.
    #[error("the client is closed")]
    Closed,
}

/// Why a commit failed. Commits are fenced: only the current owner of a partition can
/// commit it, so most of these mean "you no longer own it; stop".
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CommitError {
    /// Partitions the member does not own (and has not released).
    #[error("not the owner of {partitions:?}")]
    NotOwner {
        /// The partitions concerned.
        partitions: Vec<TopicPartition>,
    },
    /// Partitions the member has already released.
    #[error("partitions already released: {partitions:?}")]
    PartitionRevoked {
        /// The partitions concerned.
        partitions: Vec<TopicPartition>,
    },
    /// Metadata over the coordinator's limit.
    #[error("metadata too large for {partitions:?}")]
    MetadataTooLarge {
        /// The partitions concerned.
        partitions: Vec<TopicPartition>,
    },
    /// Several partitions were refused for different reasons (or for a reason without a
    /// variant of its own). Partitions not listed were stored.
    #[error("commit refused for {refused:?}")]
    Refused {
        /// Each refused partition and why.
        refused: Vec<(TopicPartition, ErrorCode)>,
    },
    /// Another process took the member's static instance id.
    #[error("the member was fenced by another instance")]
    Fenced,
    /// The member was expelled from its group.
    #[error("the member was expelled")]
    Expelled,
    /// The coordinator does not know the member.
    #[error("the coordinator does not know the member")]
    UnknownMember,
    /// The coordinator does not know the group.
    #[error("the coordinator does not know the group")]
    UnknownGroup,
    /// The member's lease expired; its partitions were reported lost.
    #[error("the member's lease expired")]
    LeaseExpired,
    /// The member is not (or no longer) in its group: it has not joined yet, is
    /// rejoining, or has left.
    #[error("the member is not in its group")]
    NotMember,
    /// The coordinator is unreachable or temporarily unable to commit; the commit may or
    /// may not have been stored. Retrying the same offsets is safe.
    #[error("coordinator unavailable: {reason}")]
    Unavailable {
        /// What happened.
        reason: String,
    },
    /// The coordinator refused the commit for a member-level reason without a variant of
    /// its own.
    #[error("commit refused: {code}: {message}")]
    Rejected {
        /// The error code.
        code: ErrorCode,
        /// The coordinator's explanation.
        message: String,
    },
    /// The member or its client is closed.
    #[error("the member is closed")]
    Closed,
}

/// Why [`Member::leave`](crate::Member::leave) could not confirm the leave.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LeaveError {
    /// The coordinator did not confirm the leave in time (unreachable, or slow). The
    /// member stopped heartbeating: the coordinator removes it after its session timeout.
    #[error("the coordinator did not confirm the leave; the session will expire instead")]
    Unconfirmed,
    /// The member or its client is closed.
    #[error("the member is closed")]
    Closed,
}

/// Why a request other than a join, commit or leave failed: fetching offsets, or
/// [`Member::ack_revocation`](crate::Member::ack_revocation) (which only fails with
/// [`RequestError::Closed`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The coordinator is unreachable right now; retry later.
    #[error("coordinator unavailable: {reason}")]
    Unavailable {
        /// What happened.
        reason: String,
    },
    /// The coordinator refused the request.
    #[error("request refused: {code}: {message}")]
    Refused {
        /// The error code.
        code: ErrorCode,
        /// The coordinator's explanation.
        message: String,
    },
    /// The client is closed.
    #[error("the client is closed")]
    Closed,
}
