//! A shard: one task owning one [`Coordinator`] (the single writer of its groups), and
//! the sender stage that releases each batch's outputs once its records are durable.
//!
//! The shard loop waits on its input queue and on one timer (the core's next deadline,
//! or the next gauge refresh, whichever is sooner). Each wake takes every queued input
//! up to a bound, feeds them to the core with one `now`, runs due timers, collects the
//! outputs in the order the core produced them and submits the batch's records to the
//! group committer. The batch then goes to the sender stage, which awaits durability
//! and sends; batches leave strictly in order, so a later batch's responses and pushes
//! never overtake an earlier one's, and the shard never waits on an fsync.

use std::sync::Arc;
use std::time::Duration;

use rollcall_protocol::{ApiKey, ErrorCode, Frame, Request, Response};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::metrics::{GuardTransition, Metrics};
use super::registry::{ConnHandle, Registry};
use crate::core::{ConnId, Coordinator, CoreStats, Event, Guard, Output, Record};
use crate::store::group_commit::CommitResult;
use crate::store::{GroupCommitter, StoreError};

/// Most inputs the shard handles in one wake.
const MAX_BATCH: usize = 512;

/// Most queued inputs handled before due timers run (the shard queue's capacity).
const DRAIN_BEFORE_TIMERS: usize = super::SHARD_QUEUE;

/// Batches queued between a shard and its sender stage.
const STAGE_QUEUE: usize = 1024;

/// What a shard is asked to do.
#[derive(Debug)]
pub(crate) enum ShardInput {
    /// A request for a group of this shard.
    Request {
        /// The requesting connection.
        conn: ConnId,
        /// Its correlation id.
        correlation_id: u32,
        /// The request.
        request: Request,
        /// Where the response goes.
        reply: ConnHandle,
        /// When the request was decoded.
        received: Instant,
    },
    /// This shard's part of a ListGroups.
    ListGroups {
        /// The requesting connection.
        conn: ConnId,
        /// Where this shard's answer goes.
        reply: oneshot::Sender<Response>,
    },
    /// A connection that sent requests to this shard closed.
    Disconnect(ConnId),
    /// The store found this group empty for longer than the offsets retention; the
    /// core decides whether to delete it.
    RemoveOffsets(String),
    /// Finish the inputs queued before this one, then stop.
    Shutdown,
}

/// One output of a batch, in the order the core produced it.
#[derive(Debug)]
enum Outgoing {
    Response {
        to: ConnHandle,
        frame: Frame,
        api: ApiKey,
        received: Instant,
        /// The request produced records: its answer stands only if they are durable.
        wrote: bool,
    },
    Push {
        conn: ConnId,
        frame: Frame,
    },
}

/// What a shard hands to its sender stage.
#[derive(Debug)]
struct Batch {
    durable: Option<oneshot::Receiver<CommitResult>>,
    outgoing: Vec<Outgoing>,
    /// The members whose Join this batch answers (group, member id): once the answers
    /// have left, the stage tells the shard, and their sessions count from then.
    joined: Vec<(String, String)>,
}

/// The stable shard of a group: FNV-1a of its id, so a group lands on the same shard in
/// every process and every run.
pub fn shard_of(group: &str, shards: usize) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in group.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % shards.max(1) as u64) as usize
}

/// A shard's task state.
#[derive(Debug)]
pub(crate) struct Shard {
    pub(crate) index: usize,
    pub(crate) core: Coordinator,
    pub(crate) inputs: mpsc::Receiver<ShardInput>,
    pub(crate) committer: Arc<GroupCommitter>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) stats_interval: Duration,
    /// Cancelled to stop the server when this shard cannot go on (a failed durable write).
    pub(crate) fatal: CancellationToken,
}

impl Shard {
    /// Runs the shard and its sender stage until a [`ShardInput::Shutdown`] (or every
    /// sender is gone) and every batch has been sent. Returns false if it had to stop
    /// for another reason (its sender stage failed).
    pub(crate) async fn run(mut self) -> bool {
        let (stage_tx, stage_rx) = mpsc::channel(STAGE_QUEUE);
        // Unbounded: at most one entry per join answered, and the stage must never wait
        // on the shard that waits on it.
        let (released_tx, mut released_rx) = mpsc::unbounded_channel();
        let stage = tokio::spawn(send_stage(
            stage_rx,
            released_tx,
            self.registry.clone(),
            self.metrics.clone(),
            self.fatal.clone(),
        ));
        let mut inputs = Vec::with_capacity(MAX_BATCH);
        let mut stats = CoreStats::default();
        let mut next_stats = Instant::now();
        let mut clean = true;
        loop {
            let wake = match self.core.poll_timeout() {
                Some(deadline) => Instant::from_std(deadline).min(next_stats),
                None => next_stats,
            };
            tokio::select! {
                biased;
                received = self.inputs.recv_many(&mut inputs, MAX_BATCH) => {
                    if received == 0 {
                        break;
                    }
                }
                Some(joined) = released_rx.recv() => {
                    self.core.answers_released(Instant::now().into_std(), &joined);
                }
                () = tokio::time::sleep_until(wake) => {}
            }
            let now = Instant::now();
            while let Ok(joined) = released_rx.try_recv() {
                self.core.answers_released(now.into_std(), &joined);
            }
            let (batch, stop) = self.process(now, &mut inputs);
            if now >= next_stats {
                stats = self.refresh_stats(now, stats);
                next_stats = now + self.stats_interval;
            }
            if let Some(batch) = batch {
                if stage_tx.send(batch).await.is_err() {
                    error!(shard = self.index, "shard sender stage stopped");
                    clean = false;
                    break;
                }
            }
            if stop {
                break;
            }
        }
        // Take this shard's members out of the gauges it contributed to.
        self.refresh_stats_to(CoreStats::default(), stats);
        drop(stage_tx);
        match stage.await {
            Ok(true) => {}
            Ok(false) => clean = false,
            Err(_) => {
                error!(shard = self.index, "shard sender stage panicked");
                clean = false;
            }
        }
        debug!(shard = self.index, "shard stopped");
        clean
    }

    /// Feeds `inputs` to the core and returns the batch to send, if any, and whether a
    /// shutdown was asked for.
    fn process(&mut self, now: Instant, inputs: &mut Vec<ShardInput>) -> (Option<Batch>, bool) {
        let std_now = now.into_std();
        if let Some(last) = self.registry.traffic.last() {
            self.core.observe_traffic(last.into_std().min(std_now));
        }

        let mut outgoing = Vec::with_capacity(inputs.len());
        let mut joined = Vec::new();
        let mut records: Vec<Record> = Vec::new();
        let mut stop = false;
        // Timers due now run after every request already queued has been handled: a
        // member whose heartbeat waits in the queue is not silent, the shard is behind.
        // The queue is bounded, so this drains at most what was queued when the timer
        // fell due (plus what arrives meanwhile, up to a bound) and never starves timers.
        let timers_due = self.core.poll_timeout().is_some_and(|d| d <= std_now);
        let mut budget = if timers_due { DRAIN_BEFORE_TIMERS } else { 0 };
        while budget > 0 {
            match self.inputs.try_recv() {
                Ok(input) => {
                    inputs.push(input);
                    budget -= 1;
                }
                Err(_) => break,
            }
        }
        // How late this batch is: the runtime's lateness in running ready tasks (the
        // connections' readers), or the oldest request's wait in the queue.
        let mut lag = self.registry.lag.recent();
        for input in inputs.drain(..) {
            match input {
                ShardInput::Request {
                    conn,
                    correlation_id,
                    request,
                    reply,
                    received,
                } => {
                    lag = lag.max(now.saturating_duration_since(received));
                    let api = request.api_key();
                    let join_group = match &request {
                        Request::Join(j) => Some(j.group.clone()),
                        _ => None,
                    };
                    let pending = self.core.records_pending();
                    let response = self.core.handle_request(std_now, conn, request);
                    if let (Some(group), Response::Join(j)) = (join_group, &response) {
                        joined.push((group, j.member_id.clone()));
                    }
                    // Records are taken once per batch (each changed group is written
                    // once); this request wrote if it added to them.
                    let wrote = self.core.records_pending() > pending;
                    outgoing.push(Outgoing::Response {
                        to: reply,
                        frame: Frame::response(correlation_id, response),
                        api,
                        received,
                        wrote,
                    });
                }
                ShardInput::ListGroups { conn, reply } => {
                    let response = self.core.handle_request(std_now, conn, Request::ListGroups);
                    let _ = reply.send(response);
                }
                ShardInput::Disconnect(conn) => self.core.handle_disconnect(std_now, conn),
                ShardInput::RemoveOffsets(group) => {
                    let deleted = self.core.remove_offsets(&group);
                    // Taken now, so the deletion is not counted as the next request's.
                    self.collect_records(&mut records);
                    let shard = self.index;
                    if deleted {
                        info!(shard, group, "offsets retention expired; group deleted");
                    } else {
                        debug!(shard, group, "offsets retention: group in use, kept");
                    }
                }
                ShardInput::Shutdown => stop = true,
            }
            self.drain_outputs(&mut outgoing);
        }
        self.core.observe_lag(std_now, lag);
        if self.core.poll_timeout().is_some_and(|d| d <= std_now) {
            self.core.handle_timeout(std_now);
            self.drain_outputs(&mut outgoing);
        }
        self.collect_records(&mut records);
        let durable = if records.is_empty() {
            None
        } else {
            Some(self.committer.submit(records))
        };
        if durable.is_none() && outgoing.is_empty() {
            return (None, stop);
        }
        (
            Some(Batch {
                durable,
                outgoing,
                joined,
            }),
            stop,
        )
    }

    /// Moves the core's new records into `records`; true if there were any.
    fn collect_records(&mut self, records: &mut Vec<Record>) -> bool {
        let new = self.core.take_records();
        if new.is_empty() {
            return false;
        }
        if records.is_empty() {
            *records = new;
        } else {
            records.extend(new);
        }
        true
    }

    fn drain_outputs(&mut self, outgoing: &mut Vec<Outgoing>) {
        while let Some(output) = self.core.poll_output() {
            match output {
                Output::Push { conn, push } => outgoing.push(Outgoing::Push {
                    conn,
                    frame: Frame::push(push),
                }),
                Output::Event(event) => self.on_event(event),
            }
        }
    }

    fn on_event(&self, event: Event) {
        let m = &self.metrics;
        let shard = self.index;
        match event {
            Event::MemberJoined {
                group,
                member_id,
                instance_id,
            } => info!(
                shard,
                group,
                member_id,
                instance_id = instance_id.as_deref(),
                "member joined"
            ),
            Event::MemberReplaced {
                group,
                old_member_id,
                new_member_id,
                instance_id,
            } => info!(
                shard,
                group, old_member_id, new_member_id, instance_id, "static member replaced"
            ),
            Event::MemberRemoved {
                group,
                member_id,
                reason,
            } => {
                m.expulsion(reason).increment(1);
                info!(
                    shard,
                    group,
                    member_id,
                    reason = reason.as_str(),
                    "member removed"
                );
            }
            Event::RebalanceStarted {
                group,
                generation,
                cause,
                partitions_moved,
            } => {
                m.rebalance_started(cause).increment(1);
                info!(
                    shard,
                    group,
                    generation,
                    cause = cause.as_str(),
                    partitions_moved,
                    "rebalance started"
                );
            }
            Event::RebalanceCompleted {
                group,
                generation,
                duration,
            } => {
                m.rebalances_completed.increment(1);
                m.rebalance_duration.record(duration.as_secs_f64());
                info!(
                    shard,
                    group,
                    generation,
                    duration_ms = duration_ms(duration),
                    "rebalance completed"
                );
            }
            Event::CommitsAccepted { group, count } => {
                m.commits_accepted.increment(count as u64);
                debug!(shard, group, count, "offsets committed");
            }
            Event::CommitRejected { group, reason } => {
                m.commit_rejected(reason).increment(1);
                debug!(
                    shard,
                    group,
                    reason = reason.as_str(),
                    "offset commit rejected"
                );
            }
            Event::IsolationSuspected {
                silent_for,
                members,
            } => {
                m.isolations.increment(1);
                m.guard(Guard::Isolation, GuardTransition::Held)
                    .increment(1);
                warn!(
                    shard,
                    silent_for_ms = duration_ms(silent_for),
                    members,
                    "every member is silent; suspecting the coordinator's own network and holding expulsions"
                );
            }
            Event::IsolationEnded { silent_for } => {
                m.guard(Guard::Isolation, GuardTransition::Released)
                    .increment(1);
                info!(
                    shard,
                    silent_for_ms = duration_ms(silent_for),
                    "members heard again; members not already overdue got the silence back"
                );
            }
            Event::HoldExpired {
                guard,
                group,
                member_id,
                held_for,
            } => {
                m.guard(guard, GuardTransition::BoundReached).increment(1);
                warn!(
                    shard,
                    guard = guard.as_str(),
                    group,
                    member_id,
                    held_for_ms = duration_ms(held_for),
                    "a guard held a silent member as long as it may; expelling it"
                );
            }
            Event::PauseDetected { late_by, .. } => {
                m.pauses.increment(1);
                m.guard(Guard::Pause, GuardTransition::Held).increment(1);
                warn!(
                    shard,
                    late_by_ms = duration_ms(late_by),
                    "coordinator was paused; every member's deadlines were extended and expulsions for silence wait for queued frames"
                );
            }
            Event::ExpulsionRateLimited => {
                m.guard(Guard::RateLimit, GuardTransition::Held)
                    .increment(1);
                debug!(
                    shard,
                    "expiry for silence waits for the expulsion rate limit"
                );
            }
            Event::BacklogDetected { lag } => {
                m.guard(Guard::Backlog, GuardTransition::Held).increment(1);
                warn!(
                    shard,
                    lag_ms = duration_ms(lag),
                    "coordinator behind its members' frames; holding expulsions for silence"
                );
            }
            Event::BacklogEnded { lasted, worst } => {
                m.guard(Guard::Backlog, GuardTransition::Released)
                    .increment(1);
                info!(
                    shard,
                    lasted_ms = duration_ms(lasted),
                    worst_ms = duration_ms(worst),
                    "coordinator caught up; expulsions for silence judged as usual"
                );
            }
            Event::MemberSuspected {
                group,
                member_id,
                silence,
                expel_after,
            } => {
                m.suspected.increment(1);
                info!(
                    shard,
                    group,
                    member_id,
                    silent_ms = duration_ms(silence),
                    expel_after_ms = duration_ms(expel_after),
                    "member suspect: keeps its partitions, given nothing new"
                );
            }
            Event::MemberRecovered {
                group,
                member_id,
                suspect_for,
            } => {
                m.recovered.increment(1);
                info!(
                    shard,
                    group,
                    member_id,
                    suspect_for_ms = duration_ms(suspect_for),
                    "member alive again"
                );
            }
            Event::ShadowVerdict {
                group,
                member_id,
                detector,
                verdict,
                silence,
            } => {
                m.shadow_verdict(detector, verdict).increment(1);
                info!(
                    shard,
                    group,
                    member_id,
                    detector = detector.as_str(),
                    verdict = verdict.as_str(),
                    silent_ms = duration_ms(silence),
                    "shadow detector verdict (not acted on)"
                );
            }
            Event::PauseGraceEnded { .. } => {
                m.guard(Guard::Pause, GuardTransition::Released)
                    .increment(1);
                debug!(shard, "grace after a pause is over");
            }
        }
    }

    fn refresh_stats(&self, now: Instant, before: CoreStats) -> CoreStats {
        let stats = self.core.stats(now.into_std());
        self.refresh_stats_to(stats, before);
        stats
    }

    /// The gauges are sums over shards: each shard adds what changed since its last
    /// refresh.
    fn refresh_stats_to(&self, stats: CoreStats, before: CoreStats) {
        let delta = |now: usize, then: usize| now as f64 - then as f64;
        let m = &self.metrics;
        m.groups.increment(delta(stats.groups, before.groups));
        m.members_alive
            .increment(delta(stats.members_alive, before.members_alive));
        m.members_suspect
            .increment(delta(stats.members_suspect, before.members_suspect));
        m.groups_with_suspects.increment(delta(
            stats.groups_with_suspects,
            before.groups_with_suspects,
        ));
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Sends each batch once its records are durable, in order.
///
/// A failed durable write is fatal (fail-stop, as databases do after a failed fsync):
/// the store's state can no longer be trusted to match the core's, and a store like redb
/// refuses every later write anyway. The batch's requests that wrote are answered
/// `storage_failure`, its pushes (which announce state that is not durable) are dropped,
/// and the stage stops, which stops the shard and with it the server. A restart
/// restores every group from what is durable, and members resume without a rebalance.
/// Returns false if it stopped for that reason.
async fn send_stage(
    mut batches: mpsc::Receiver<Batch>,
    released: mpsc::UnboundedSender<Vec<(String, String)>>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    fatal: CancellationToken,
) -> bool {
    while let Some(batch) = batches.recv().await {
        let durable = match batch.durable {
            None => Ok(()),
            Some(answer) => answer.await.unwrap_or(Err(StoreError::Closed)),
        };
        if let Err(e) = &durable {
            error!(error = %e, "records could not be made durable; answering storage_failure and stopping");
            fatal.cancel();
        }
        for item in batch.outgoing {
            match item {
                Outgoing::Response {
                    to,
                    frame,
                    api,
                    received,
                    wrote,
                } => {
                    let frame = match &durable {
                        Err(e) if wrote => Frame::response(
                            frame.correlation_id,
                            Response::error(
                                api as u16,
                                ErrorCode::StorageFailure,
                                format!("the change could not be made durable: {e}"),
                            ),
                        ),
                        _ => frame,
                    };
                    // A full queue closes the connection; the connection logs it.
                    to.send(frame);
                    metrics
                        .duration(api)
                        .record(received.elapsed().as_secs_f64());
                }
                Outgoing::Push { conn, frame } => {
                    if durable.is_ok() {
                        registry.send(conn, frame);
                    }
                }
            }
        }
        if durable.is_err() {
            return false;
        }
        if !batch.joined.is_empty() {
            // The shard may be gone already (shutdown): nothing to count then.
            let _ = released.send(batch.joined);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::shard_of;

    #[test]
    fn shard_of_is_stable_and_in_range() {
        // Fixed values: a group must map to the same shard in every build and run.
        assert_eq!(shard_of("", 7), (0xcbf2_9ce4_8422_2325u64 % 7) as usize);
        assert_eq!(shard_of("orders", 1), 0);
        let a = shard_of("orders", 16);
        assert_eq!(a, shard_of("orders", 16));
        assert!(a < 16);
        let spread: std::collections::HashSet<usize> =
            (0..200).map(|i| shard_of(&format!("g{i}"), 8)).collect();
        assert_eq!(spread.len(), 8);
    }
}
