//! The connections the server has open, by [`ConnId`]: shards send pushes through the
//! registry (and responses through the handle carried by the request). Each
//! connection's queue is its outbox (`outbox.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use rollcall_protocol::Frame;

use crate::core::ConnId;

use super::evidence::{Lag, Traffic};
use super::outbox::Sent;
// Where the shard finds the handle (and its tests the rest) it names with the registry.
pub(crate) use super::outbox::ConnHandle;
#[cfg(test)]
pub(crate) use super::{
    budget::BufferBudget,
    outbox::{ConnState, SendLimits},
};

/// Open connections, by id. Split into independently locked parts so that connections
/// opening and closing do not contend with pushes to other connections.
#[derive(Debug)]
pub(crate) struct Registry {
    parts: Box<[RwLock<HashMap<ConnId, ConnHandle>>]>,
    /// When a request was last read on any connection: evidence for the isolation
    /// guard, kept here because every connection and shard holds the registry.
    pub(crate) traffic: Traffic,
    /// How late the runtimes run ready tasks (see [`super::evidence::probe_lag`]):
    /// evidence for the backlog guard, shared with the probes.
    pub(crate) lag: Arc<Lag>,
}

const PARTS: usize = 16;

impl Default for Registry {
    fn default() -> Self {
        Self::new(1)
    }
}

impl Registry {
    /// For connections served by `runtimes` runtimes, each probed for its lateness.
    pub(crate) fn new(runtimes: usize) -> Self {
        Self {
            parts: (0..PARTS).map(|_| RwLock::default()).collect(),
            traffic: Traffic::default(),
            lag: Arc::new(Lag::new(runtimes)),
        }
    }

    fn part(&self, conn: ConnId) -> &RwLock<HashMap<ConnId, ConnHandle>> {
        // Connection ids are sequential, so the low bits spread them evenly.
        &self.parts[(conn % PARTS as u64) as usize]
    }

    pub(crate) fn insert(&self, conn: ConnId, handle: ConnHandle) {
        self.part(conn).write().insert(conn, handle);
    }

    pub(crate) fn remove(&self, conn: ConnId) {
        self.part(conn).write().remove(&conn);
    }

    /// Queues `frame` for `conn`, if it is still open. The frame is encoded outside
    /// the lock.
    pub(crate) fn send(&self, conn: ConnId, frame: Frame) -> Sent {
        let handle = self.part(conn).read().get(&conn).cloned();
        match handle {
            Some(handle) => handle.send(frame, false),
            None => Sent::Closed,
        }
    }

    /// Every open connection.
    pub(crate) fn handles(&self) -> Vec<ConnHandle> {
        self.parts
            .iter()
            .flat_map(|p| p.read().values().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// The number of open connections.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.parts.iter().map(|p| p.read().len()).sum()
    }
}

#[cfg(test)]
mod tests;
