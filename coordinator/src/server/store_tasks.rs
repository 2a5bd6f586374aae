//! The server's background tasks over the store: offsets retention, and the group
//! committer's counters mirrored into metrics.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::metrics::Metrics;
use super::shard::Shard;
use super::{format_duration, shard_of};
use crate::store::GroupCommitter;

/// At start and every `interval`, asks the store which groups have been empty for
/// longer than `retention` and hands each to its shard. The store only reads here: the
/// shard's core decides (a member may have joined since the store last heard of the
/// group), and its deletion record is written in order with the shard's other records.
pub(super) async fn retention(
    committer: Arc<GroupCommitter>,
    shards: Vec<Arc<Shard>>,
    retention: Duration,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let store = committer.store().clone();
        let expired = tokio::task::spawn_blocking(move || store.expired_groups(retention)).await;
        match expired {
            Ok(Ok(groups)) => {
                if !groups.is_empty() {
                    debug!(groups = groups.len(), retention = %format_duration(retention), "groups past offsets retention");
                }
                for group in groups {
                    shards[shard_of(&group, shards.len())].remove_offsets(&group, retention);
                }
            }
            Ok(Err(e)) => warn!(error = %e, "offsets retention: reading expired groups failed"),
            Err(e) => warn!(error = %e, "offsets retention: reading expired groups panicked"),
        }
    }
}

/// Mirrors the group committer's counters into metrics.
pub(super) async fn store_stats(
    committer: Arc<GroupCommitter>,
    metrics: Arc<Metrics>,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(interval);
    let mut seen = crate::store::CommitterStats::default();
    loop {
        let stopping = tokio::select! {
            () = stop.cancelled() => true,
            _ = ticks.tick() => false,
        };
        let stats = committer.stats();
        metrics
            .store_batches
            .increment(stats.batches.saturating_sub(seen.batches));
        metrics
            .store_failures
            .increment(stats.failed_batches.saturating_sub(seen.failed_batches));
        seen = stats;
        if stopping {
            return;
        }
    }
}
