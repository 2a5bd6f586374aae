//! The rollcall client: what a worker embeds to take part in a consumer group.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod backoff;
mod config;
mod error;
mod membership;
mod types;

pub use config::{ClientConfig, MemberConfig};
pub use error::{
    CommitError, ConfigError, ConnectError, FatalError, JoinError, LeaveError, RequestError,
};
pub use types::{Assignment, Committed, Event, LostReason, Offset, PartitionSet, TopicPartition};
