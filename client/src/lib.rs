//! The rollcall client: what a worker embeds to take part in a consumer group.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backoff;
mod client;
mod config;
mod driver;
mod error;
mod membership;
mod types;

pub use client::{Client, Member};
pub use config::{ClientConfig, MemberConfig};
pub use error::{
    CommitError, ConfigError, ConnectError, FatalError, JoinError, LeaveError, RequestError,
};
pub use rollcall_protocol::{ErrorCode, ExpelReason, TopicSubscription};
pub use types::{Assignment, Committed, Event, LostReason, Offset, PartitionSet, TopicPartition};
