//! The [`Joiner`]: one Heartbeats request whose beats span shards, answered once every
//! shard has answered its part, with the pushes that must follow that answer.

use std::sync::Arc;

use parking_lot::Mutex;
use rollcall_protocol::{ApiKey, ErrorCode, Frame, HeartbeatResult, HeartbeatsResponse, Response};
use tokio::time::Instant;

use super::super::metrics::Metrics;
use super::super::registry::{ConnHandle, Registry};
use crate::core::ConnId;

/// Gathers the answers of the shards a Heartbeats request's beats went to, and sends
/// the one response once every shard has answered.
///
/// The pushes a shard sends to the requesting connection after it handled its part
/// (those the part caused, and those any later input of that shard causes: a timer,
/// another member's request) follow that response, as every other request's follow
/// its own: each shard keeps the joiner of the last split request it handled a part
/// of, per connection, and queues its pushes to that connection through it until the
/// last part is in. A client that sees, say, an Assignment listing a partition it has
/// just acknowledged can then tell that the assignment is newer than the
/// acknowledgement.
///
/// A connection may have several split requests outstanding. Each joiner knows the
/// one the connection sent before it, while that one is still open, and a push
/// released by a newer joiner goes on through the older one: it follows every
/// response of a part its shard had handled before it.
#[derive(Debug)]
pub(crate) struct Joiner {
    to: ConnHandle,
    correlation_id: u32,
    received: Instant,
    pub(super) parts: Mutex<Parts>,
}

#[derive(Debug)]
pub(super) struct Parts {
    /// One slot per beat.
    results: Vec<Option<HeartbeatResult>>,
    /// Shards still to answer.
    waiting: usize,
    /// Pushes to the requesting connection, held until the response is sent.
    held: Vec<Frame>,
    /// The connection's split request before this one, while it is open. Locks are
    /// only ever taken from a newer joiner to an older one.
    pub(super) before: Option<Arc<Joiner>>,
}

impl Joiner {
    /// A joiner for a request of `beats` beats split over `shards` shards (and
    /// answers for denied beats), sent after `before`, the connection's previous split
    /// request, if any.
    pub(crate) fn new(
        to: ConnHandle,
        correlation_id: u32,
        received: Instant,
        beats: usize,
        shards: usize,
        before: Option<Arc<Self>>,
    ) -> Arc<Self> {
        let before = before.filter(|b| b.is_open());
        Arc::new(Self {
            to,
            correlation_id,
            received,
            parts: Mutex::new(Parts {
                results: vec![None; beats],
                waiting: shards,
                held: Vec::new(),
                before,
            }),
        })
    }

    /// Whether pushes to the connection must still wait: for this response or for an
    /// earlier split request's. Drops the link to an earlier request that is no longer
    /// open, so that a connection's chain of joiners holds only open ones.
    pub(crate) fn is_open(&self) -> bool {
        let mut parts = self.parts.lock();
        if parts.before.as_ref().is_some_and(|b| !b.is_open()) {
            parts.before = None;
        }
        parts.waiting > 0 || parts.before.is_some()
    }

    /// Queues `frame`, a push to the requesting connection, behind this response (and
    /// the earlier ones still open): held until they are sent, sent at once if they
    /// are.
    pub(super) fn push(&self, frame: Frame) {
        // Queued under the lock the response is sent under: a push seen after the
        // last part is in follows the response that part sent.
        let mut parts = self.parts.lock();
        if parts.waiting > 0 {
            parts.held.push(frame);
        } else if let Some(before) = &parts.before {
            before.push(frame);
        } else {
            self.to.send(frame, false);
        }
    }

    pub(super) fn fill(
        &self,
        indices: &[usize],
        response: Response,
        metrics: &Metrics,
        quiet: bool,
    ) {
        let results: Vec<HeartbeatResult> = match response {
            Response::Heartbeats(h) => h.results,
            // An answer for the whole part (an error) is each of its beats'.
            other => vec![HeartbeatResult::from_response(other); indices.len()],
        };
        let mut parts = self.parts.lock();
        for (i, result) in indices.iter().zip(results) {
            if let Some(slot) = parts.results.get_mut(*i) {
                *slot = Some(result);
            }
        }
        parts.waiting -= 1;
        if parts.waiting > 0 {
            return;
        }
        let results = std::mem::take(&mut parts.results)
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    HeartbeatResult::error(ErrorCode::Internal, "no shard answered this beat")
                })
            })
            .collect();
        let response = Response::Heartbeats(HeartbeatsResponse { results });
        // The response and the pushes held for it are queued under the lock, so that a
        // push another shard queues next comes after them.
        self.to
            .send(Frame::response(self.correlation_id, response), quiet);
        let held = std::mem::take(&mut parts.held);
        match &parts.before {
            Some(before) => held.into_iter().for_each(|push| before.push(push)),
            None => held.into_iter().for_each(|push| {
                self.to.send(push, quiet);
            }),
        }
        drop(parts);
        metrics
            .duration(ApiKey::Heartbeats)
            .record(self.received.elapsed().as_secs_f64());
    }
}

/// Sends a push to `conn`; through `after`, the joiner of the connection's open split
/// Heartbeats request, so that it follows that request's response.
pub(super) fn send_push(registry: &Registry, conn: ConnId, frame: Frame, after: Option<&Joiner>) {
    match after {
        Some(joiner) => joiner.push(frame),
        None => {
            registry.send(conn, frame);
        }
    }
}
