//! The timer task: runs the core's due timers a slice at a time, reports the guards'
//! evidence first, and refreshes the gauges.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::super::metrics::Metrics;
use super::{PanicGuard, Shard, ShardState};
use crate::core::CoreStats;

/// How often the timer task asks the core which groups run below the advised timeout
/// (it reads every member's gap histogram).
const ADVICE_EVERY: Duration = Duration::from_secs(10);

/// The false-expulsion rate the exported advice is computed for: one a year per group.
const ADVICE_PER_YEAR: f64 = 1.0;

/// How long the timer task leaves the shard to the connections between two slices of
/// due timers (see [`Coordinator::handle_timeout`]).
const SLICE_BREATHER: Duration = Duration::from_millis(1);

impl Shard {
    /// Wakes the timer task if the core's next deadline moved before its wake-up.
    pub(super) fn check_timer(&self, st: &mut ShardState) {
        if let Some(deadline) = st.core.poll_timeout() {
            let deadline = Instant::from_std(deadline);
            if deadline < st.timer_at {
                st.timer_at = deadline;
                self.timer.notify_one();
            }
        }
    }
    /// The timer task: runs the core's timers when due and refreshes the gauges, until
    /// `stop`.
    pub(crate) async fn run_timers(self: Arc<Self>, stop: CancellationToken) {
        let mut stats = CoreStats::default();
        let mut next_stats = Instant::now();
        let mut below_advice = 0usize;
        let mut next_advice = Instant::now() + ADVICE_EVERY;
        loop {
            let wake = {
                let mut st = self.state.lock();
                let wake = st
                    .core
                    .poll_timeout()
                    .map_or(next_stats, |d| Instant::from_std(d).min(next_stats));
                st.timer_at = wake;
                wake
            };
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = self.timer.notified() => continue,
                () = tokio::time::sleep_until(wake) => {}
            }
            let more = {
                let mut st = self.state.lock();
                let _guard = PanicGuard(&self.ctx);
                // Read under the lock, as every input's: the core's clock never goes back.
                let now = Instant::now();
                // Running late is the coordinator's own backlog, as is the runtime's lateness
                // in running ready tasks (the connections with frames to read).
                let late = now.saturating_duration_since(wake);
                let std_now = now.into_std();
                if let Some(last) = self.ctx.registry.traffic.last() {
                    st.core.observe_traffic(last.into_std().min(std_now));
                }
                st.core
                    .observe_lag(std_now, late.max(self.ctx.registry.lag.recent()));
                if st.core.poll_timeout().is_some_and(|d| d <= std_now) {
                    st.core.handle_timeout(std_now);
                }
                self.after_input(&mut st);
                // The core runs due timers a slice of work at a time: let the connections
                // have the shard between slices.
                let more = st.core.poll_timeout().is_some_and(|d| d <= std_now);
                if now >= next_advice {
                    let fresh = st.core.groups_below_advice(ADVICE_PER_YEAR);
                    self.ctx
                        .metrics
                        .groups_below_advice
                        .increment(fresh as f64 - below_advice as f64);
                    below_advice = fresh;
                    next_advice = now + ADVICE_EVERY;
                }
                if now >= next_stats {
                    let fresh = st.core.stats(std_now);
                    drop(st);
                    refresh_gauges(&self.ctx.metrics, fresh, stats);
                    stats = fresh;
                    next_stats = now + self.ctx.stats_interval;
                }
                more
            };
            if more {
                // A breather: the runtime polls its sockets and runs the connections
                // that have frames for this shard before the next slice.
                tokio::time::sleep(SLICE_BREATHER).await;
            }
        }
        // Take this shard's members out of the gauges it contributed to.
        refresh_gauges(&self.ctx.metrics, CoreStats::default(), stats);
        self.ctx
            .metrics
            .groups_below_advice
            .decrement(below_advice as f64);
    }
}

/// The gauges are sums over shards: each shard adds what changed since its last
/// refresh.
fn refresh_gauges(m: &Metrics, stats: CoreStats, before: CoreStats) {
    let delta = |now: usize, then: usize| now as f64 - then as f64;
    m.groups.increment(delta(stats.groups, before.groups));
    m.members_alive
        .increment(delta(stats.members_alive, before.members_alive));
    m.members_suspect
        .increment(delta(stats.members_suspect, before.members_suspect));
    m.groups_with_suspects.increment(delta(
        stats.groups_with_suspects,
        before.groups_with_suspects,
    ));
    m.partitions_reserved
        .increment(delta(stats.partitions_reserved, before.partitions_reserved));
    m.revocations_waiting
        .increment(delta(stats.revocations_waiting, before.revocations_waiting));
    m.drained_members
        .increment(delta(stats.members_drained, before.members_drained));
}
