//! Durable state behind a small trait.
//!
//! The core produces [`Record`]s; the shell hands them to a [`Store`], which makes them
//! durable in one transaction per call. At start the shell loads a [`RestoredState`]
//! and gives it to the core.

use std::fmt::Debug;
use std::time::Duration;

use crate::core::{Record, RestoredState};

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store file could not be opened, or its contents are not a valid store.
    #[error("cannot open store {path}: {reason}")]
    Open {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The store holds data that does not decode.
    #[error("store {path} is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A write or read failed.
    #[error("store i/o failed: {0}")]
    Io(String),
}

/// Durable storage of offsets and group snapshots.
pub trait Store: Debug + Send + Sync {
    /// Everything stored: every group's last snapshot and every offset.
    fn load(&self) -> Result<RestoredState, StoreError>;

    /// Makes `records` durable, all or nothing, before returning.
    fn write(&self, records: &[Record]) -> Result<(), StoreError>;

    /// Removes the offsets and snapshots of groups that have had no members for longer
    /// than `retention`, and returns their names.
    fn purge_expired(&self, retention: Duration) -> Result<Vec<String>, StoreError>;
}
