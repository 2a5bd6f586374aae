//! What every connection task shares: the counters, latency histograms, the
//! measurement window, the stop, and the permits to connect and join.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use super::{Load, Obs, PartitionLoads, Plan};
use crate::stats::SharedHistogram;

/// Counters shared by every connection.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) conns_ready: AtomicU64,
    pub(crate) conns_failed: AtomicU64,
    pub(crate) conns_lost: AtomicU64,
    pub(crate) joins_sent: AtomicU64,
    pub(crate) joins_ok: AtomicU64,
    pub(crate) joins_err: AtomicU64,
    /// Heartbeats sent: renewals, each member's beat counted once, batched or not.
    pub(crate) hb_sent: AtomicU64,
    /// Frames that carried the periodic or closed-loop heartbeats (a Heartbeat, or a
    /// Heartbeats request with many beats); revocation acknowledgements not included.
    pub(crate) hb_frames_sent: AtomicU64,
    /// Of those, frames whose (first) beat was intended in the measured window.
    pub(crate) hb_window_frames: AtomicU64,
    pub(crate) hb_ok: AtomicU64,
    pub(crate) hb_err: AtomicU64,
    pub(crate) hb_window_sent: AtomicU64,
    pub(crate) hb_window_answered: AtomicU64,
    pub(crate) hb_window_late: AtomicU64,
    pub(crate) acks_sent: AtomicU64,
    pub(crate) commit_requests: AtomicU64,
    pub(crate) commit_answers: AtomicU64,
    pub(crate) commit_offsets_ok: AtomicU64,
    pub(crate) commit_offsets_err: AtomicU64,
    pub(crate) commit_window_ok: AtomicU64,
    pub(crate) commit_window_answers: AtomicU64,
    pub(crate) commit_window_err: AtomicU64,
    pub(crate) pushes_assignment: AtomicU64,
    pub(crate) pushes_revoke: AtomicU64,
    pub(crate) expelled_session: AtomicU64,
    pub(crate) expelled_progress: AtomicU64,
    pub(crate) expelled_rebalance: AtomicU64,
    pub(crate) expelled_fenced: AtomicU64,
    pub(crate) shutdown_pushes: AtomicU64,
    pub(crate) relinquish_sent: AtomicU64,
    pub(crate) relinquish_ok: AtomicU64,
    pub(crate) relinquish_err: AtomicU64,
    pub(crate) protocol_errors: AtomicU64,
}

pub(super) fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    pub(crate) fn expelled(&self) -> u64 {
        Self::get(&self.expelled_session)
            + Self::get(&self.expelled_progress)
            + Self::get(&self.expelled_rebalance)
            + Self::get(&self.expelled_fenced)
    }
}

/// What every connection task shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The time base of the heartbeat timeline and of the measurement window.
    pub(crate) start: Instant,
    pub(crate) counters: Counters,
    /// Heartbeat latency from the intended send time.
    pub(crate) hb_intended: SharedHistogram,
    /// Heartbeat latency from the actual send time.
    pub(crate) hb_service: SharedHistogram,
    pub(crate) commit_latency: SharedHistogram,
    pub(crate) join_latency: SharedHistogram,
    pub(super) window_from: AtomicU64,
    pub(super) window_until: AtomicU64,
    pub(crate) stop: CancellationToken,
    pub(super) join_go: CancellationToken,
    /// Lets the late members (a second wave) join.
    pub(super) late_go: CancellationToken,
    pub(super) ack_delay: Duration,
    pub(super) loads: Option<Arc<PartitionLoads>>,
    pub(super) connect_permits: Arc<Semaphore>,
    pub(super) join_permits: Arc<Semaphore>,
    pub(super) observations: Option<mpsc::UnboundedSender<Obs>>,
    pub(super) load: Load,
    pub(super) members: usize,
    pub(super) relinquish: bool,
    pub(super) batch: bool,
}

impl Shared {
    pub(super) fn new(plan: &Plan, observations: Option<mpsc::UnboundedSender<Obs>>) -> Self {
        let join_go = CancellationToken::new();
        if plan.auto_join {
            join_go.cancel();
        }
        let shards = 64;
        Self {
            start: Instant::now(),
            counters: Counters::default(),
            hb_intended: SharedHistogram::new(shards),
            hb_service: SharedHistogram::new(shards),
            commit_latency: SharedHistogram::new(shards),
            join_latency: SharedHistogram::new(shards),
            window_from: AtomicU64::new(u64::MAX),
            window_until: AtomicU64::new(u64::MAX),
            stop: CancellationToken::new(),
            join_go,
            late_go: CancellationToken::new(),
            ack_delay: plan.ack_delay,
            loads: plan.loads.clone(),
            connect_permits: Arc::new(Semaphore::new(plan.connect_concurrency.max(1))),
            join_permits: Arc::new(Semaphore::new(plan.join_concurrency.max(1))),
            observations,
            load: plan.load,
            members: plan.members.len(),
            relinquish: plan.relinquish,
            batch: plan.batch_heartbeats,
        }
    }

    /// What the connections of a generator of heartbeats alone share (`floor`'s, which
    /// joins no member): the counters, latency histograms, measurement window and stop
    /// that the driver's connections share, counted and read the same way.
    pub(crate) fn heartbeats_only(load: Load, batch_heartbeats: bool) -> Self {
        let plan = Plan {
            members: Vec::new(),
            per_conn: 1,
            load,
            connect_concurrency: 1,
            join_concurrency: 1,
            auto_join: true,
            observe: false,
            relinquish: false,
            batch_heartbeats,
            ack_delay: Duration::ZERO,
            loads: None,
        };
        Self::new(&plan, None)
    }

    pub(super) fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether a heartbeat intended at `t` is measured (see [`Shared::set_window`]).
    pub(crate) fn in_window(&self, t: Instant) -> bool {
        let n = self.nanos(t);
        n >= self.window_from.load(Ordering::Relaxed)
            && n < self.window_until.load(Ordering::Relaxed)
    }

    /// Measure heartbeats intended (and commits sent) in `[from, until)`.
    pub(crate) fn set_window(&self, from: Instant, until: Instant) {
        self.window_until
            .store(self.nanos(until), Ordering::Relaxed);
        self.window_from.store(self.nanos(from), Ordering::Relaxed);
    }

    /// The first heartbeat slot of `member` on the global timeline at or after `t`:
    /// member `i` of `n` beats at `start + (i / n) * period + k * period`.
    pub(crate) fn slot_at_or_after(&self, member: usize, period: Duration, t: Instant) -> Instant {
        let index = member as u128;
        let members = self.members.max(1) as u128;
        let period_ns = period.as_nanos().max(1);
        let phase = Duration::from_nanos(u64::try_from(period_ns * index / members).unwrap_or(0));
        let origin = self.start + phase;
        if t <= origin {
            return origin;
        }
        let since = (t - origin).as_nanos();
        let k = since.div_ceil(period_ns);
        origin + Duration::from_nanos(u64::try_from(k * period_ns).unwrap_or(u64::MAX / 2))
    }

    pub(super) fn observe(&self, obs: Obs) {
        if let Some(tx) = &self.observations {
            let _ = tx.send(obs);
        }
    }
}
