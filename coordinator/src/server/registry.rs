//! The connections the server has open, by [`ConnId`], and the bounded queue of frames
//! waiting to be written to each.
//!
//! Shards send pushes through the registry and responses through the handle carried by
//! the request. A send never waits: a connection whose queue is full belongs to a client
//! that does not read, and is disconnected instead of letting the server's memory grow.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use rollcall_protocol::Frame;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::core::ConnId;

/// What a connection's writer and everyone sending to it share.
#[derive(Debug, Default)]
pub(crate) struct ConnState {
    /// Cancelled to close the connection at once.
    pub(crate) kill: CancellationToken,
    /// Set when the connection was killed because its queue was full.
    pub(crate) overflowed: AtomicBool,
}

/// A way to queue frames for one connection.
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle {
    tx: mpsc::Sender<Frame>,
    state: Arc<ConnState>,
}

/// What became of a frame handed to [`ConnHandle::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Queued for writing.
    Queued,
    /// The queue was full: the connection is being closed and the frame dropped.
    Overflow,
    /// The connection is gone.
    Closed,
}

impl ConnHandle {
    /// A handle and the receiving end of its queue of `capacity` frames.
    pub(crate) fn new(capacity: usize) -> (Self, mpsc::Receiver<Frame>, Arc<ConnState>) {
        let (tx, rx) = mpsc::channel(capacity);
        let state = Arc::new(ConnState::default());
        (
            Self {
                tx,
                state: state.clone(),
            },
            rx,
            state,
        )
    }

    /// Closes the connection at once.
    pub(crate) fn kill(&self) {
        self.state.kill.cancel();
    }

    /// Queues `frame` without waiting; on a full queue, kills the connection.
    pub(crate) fn send(&self, frame: Frame) -> Sent {
        match self.tx.try_send(frame) {
            Ok(()) => Sent::Queued,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.state.overflowed.store(true, Ordering::Relaxed);
                self.state.kill.cancel();
                Sent::Overflow
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Sent::Closed,
        }
    }
}

/// Open connections, by id. Split into independently locked parts so that connections
/// opening and closing do not contend with pushes to other connections.
#[derive(Debug)]
pub(crate) struct Registry {
    parts: Box<[RwLock<HashMap<ConnId, ConnHandle>>]>,
    /// When a request was last read on any connection.
    pub(crate) traffic: Traffic,
}

const PARTS: usize = 16;

impl Default for Registry {
    fn default() -> Self {
        Self {
            parts: (0..PARTS).map(|_| RwLock::default()).collect(),
            traffic: Traffic::default(),
        }
    }
}

/// When the server last read a request on any connection: the evidence the isolation
/// guard needs that the coordinator, not its members, has gone deaf. Kept at
/// millisecond resolution in one atomic, written only when it moves.
#[derive(Debug)]
pub(crate) struct Traffic {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Default for Traffic {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Traffic {
    /// A request was read at `at`.
    pub(crate) fn heard(&self, at: Instant) {
        let ms =
            u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX);
        if self.last_ms.load(Ordering::Relaxed) < ms {
            self.last_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// When a request was last read, if ever.
    pub(crate) fn last(&self) -> Option<Instant> {
        match self.last_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.epoch + std::time::Duration::from_millis(ms)),
        }
    }
}

impl Registry {
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

    /// Queues `frame` for `conn`, if it is still open.
    pub(crate) fn send(&self, conn: ConnId, frame: Frame) -> Sent {
        let part = self.part(conn).read();
        match part.get(&conn) {
            Some(handle) => handle.send(frame),
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
mod tests {
    use super::*;
    use rollcall_protocol::{Push, ShutdownPush};

    fn push() -> Frame {
        Frame::push(Push::Shutdown(ShutdownPush {
            message: "x".into(),
        }))
    }

    #[test]
    fn full_queue_kills_the_connection_instead_of_growing() {
        let registry = Registry::default();
        let (handle, mut rx, state) = ConnHandle::new(2);
        registry.insert(7, handle);
        assert_eq!(registry.send(7, push()), Sent::Queued);
        assert_eq!(registry.send(7, push()), Sent::Queued);
        assert!(!state.kill.is_cancelled());
        assert_eq!(registry.send(7, push()), Sent::Overflow);
        assert!(state.kill.is_cancelled());
        assert!(state.overflowed.load(Ordering::Relaxed));
        // Only what fitted was queued.
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn sends_to_unknown_or_closed_connections_are_dropped() {
        let registry = Registry::default();
        assert_eq!(registry.send(1, push()), Sent::Closed);
        let (handle, rx, _) = ConnHandle::new(2);
        registry.insert(1, handle);
        assert_eq!(registry.len(), 1);
        drop(rx);
        assert_eq!(registry.send(1, push()), Sent::Closed);
        registry.remove(1);
        assert_eq!(registry.len(), 0);
        assert_eq!(registry.send(1, push()), Sent::Closed);
    }
}
