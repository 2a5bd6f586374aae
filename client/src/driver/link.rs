//! Links: one per coordinator the memberships live on. A link is one connection (or the
//! attempts at one) with its own requests awaiting answers, correlation ids, backoff
//! and Heartbeats batching.
//!
//! The *bootstrap* link is made to the addresses the client was given, in turn: a new
//! membership starts there, and it is kept (reconnecting with backoff, to the next
//! address after a failed attempt) for as long as the client lives. A link to an
//! address FindCoordinator gave lives while memberships are on it: it is not
//! reconnected, its memberships find their coordinator again instead.

use super::*;

/// The bootstrap link's id.
pub(super) const BOOTSTRAP: LinkId = 0;

pub(super) struct Link {
    /// The addresses it connects to, in turn (one, but for the bootstrap link).
    addrs: Vec<String>,
    /// The one connected to, or to try next.
    at: usize,
    pub(super) conn: Option<Connection>,
    /// The connection attempt under way, if any.
    pub(super) connecting: Option<JoinHandle<()>>,
    pub(super) reconnect_at: Option<Instant>,
    pub(super) backoff: Backoff,
    /// Requests awaiting an answer, with when they were written.
    pub(super) pending: HashMap<u32, (Pending, Instant)>,
    next_correlation: u32,
    /// When the connection last delivered a frame.
    pub(super) last_frame_at: Instant,
    /// The coordinator of this connection did not answer a Heartbeats request as it
    /// should: each membership heartbeats alone until the next connection.
    pub(super) beats_refused: bool,
    /// The current connection attempt; what its tasks report carries it.
    pub(super) epoch: u64,
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(task) = self.connecting.take() {
            task.abort();
        }
    }
}

impl Link {
    pub(super) fn new(addrs: Vec<String>, config: &ClientConfig, now: Instant) -> Self {
        debug_assert!(!addrs.is_empty());
        Self {
            addrs,
            at: 0,
            conn: None,
            connecting: None,
            reconnect_at: None,
            backoff: Backoff::new(config.reconnect_base, config.reconnect_max),
            pending: HashMap::new(),
            next_correlation: HANDSHAKE_CORRELATION + 1,
            last_frame_at: now,
            beats_refused: false,
            epoch: 0,
        }
    }

    /// The address connected to, or to be tried next.
    pub(super) fn addr(&self) -> &str {
        &self.addrs[self.at]
    }

    /// Every address it connects to, in turn.
    pub(super) fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// The index in [`Link::addrs`] of the one connected to, or to try next.
    pub(super) fn at(&self) -> usize {
        self.at
    }

    /// Tries the next address next (after a failed attempt).
    pub(super) fn rotate(&mut self) {
        self.at = (self.at + 1) % self.addrs.len();
    }

    /// Connected at `at` (the bootstrap link's first connection).
    pub(super) fn connected_at(&mut self, at: usize) {
        self.at = at.min(self.addrs.len() - 1);
    }

    /// A fresh connection: correlation ids restart, batching is tried again.
    pub(super) fn reset(&mut self, now: Instant) {
        self.last_frame_at = now;
        self.backoff.reset();
        self.next_correlation = HANDSHAKE_CORRELATION + 1;
        self.beats_refused = false;
    }

    /// Whether heartbeats go out in rounds on the current connection.
    pub(super) fn batching(&self) -> bool {
        !self.beats_refused && self.conn.as_ref().is_some_and(|c| c.features.heartbeats)
    }

    pub(super) fn max_frame_size(&self) -> usize {
        self.conn.as_ref().map_or(usize::MAX, |c| c.max_frame_size)
    }

    /// Writes `request`, remembering `pending` for its answer; the correlation id, or
    /// `None` if not connected.
    pub(super) fn send(&mut self, pending: Pending, request: Request) -> Option<u32> {
        let conn = self.conn.as_ref()?;
        let correlation = self.next_correlation;
        self.next_correlation = match self.next_correlation.wrapping_add(1) {
            0 | HANDSHAKE_CORRELATION => HANDSHAKE_CORRELATION + 1,
            n => n,
        };
        if conn
            .writer
            .send(Frame::request(correlation, request))
            .is_err()
        {
            return None;
        }
        self.pending.insert(correlation, (pending, Instant::now()));
        Some(correlation)
    }

    /// When the connection is to be presumed dead: requests written since the last
    /// frame arrived have gone unanswered for `timeout` (the shortest session timeout
    /// of its members). A half-open connection (a peer gone without a reset) is found
    /// this way; by then every lease on it has run out anyway.
    pub(super) fn stall_deadline(&self, timeout: Duration) -> Option<Instant> {
        self.conn.as_ref()?;
        let oldest = self
            .pending
            .values()
            .map(|(_, sent)| *sent)
            .filter(|sent| *sent >= self.last_frame_at)
            .min()?;
        Some(oldest + timeout)
    }

    /// Whether a connection attempt is to start now.
    pub(super) fn wants_attempt(&self, now: Instant) -> bool {
        self.conn.is_none() && self.connecting.is_none() && self.reconnect_at.is_none_or_before(now)
    }

    /// Starts a connection attempt, reporting to `inbound`.
    pub(super) fn attempt(
        &mut self,
        id: LinkId,
        config: &ClientConfig,
        inbound: &mpsc::UnboundedSender<Inbound>,
    ) {
        self.reconnect_at = None;
        self.epoch += 1;
        self.connecting = Some(spawn_open(
            self.addr().to_owned(),
            config.clone(),
            inbound.clone(),
            id,
            self.epoch,
        ));
    }
}
