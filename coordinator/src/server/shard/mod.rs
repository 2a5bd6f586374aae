//! A shard: one [`Coordinator`] (the single writer of its groups) behind a lock, the
//! requests handled on the connections' own tasks, and two tasks of its own: the timer
//! task and the sender stage, which makes records durable and only then releases what
//! they reveal.
//!
//! A connection handles a request by locking its group's shard, feeding the core and
//! taking what it produced. What reveals nothing that is not durable yet (a heartbeat,
//! usually) is answered at once, on the connection's task: no task hop, no wake-up. What
//! wrote records, or concerns a group that still has records or outputs on their way, is
//! added to the shard's *open batch*. The sender stage takes the open batch whenever
//! fewer than two batches are on their way to the store (so every batch shares one
//! snapshot per changed group and one durable transaction, however many requests it
//! holds, and the committer never waits for the stage), waits until its records are
//! durable, and sends its responses and pushes in order. A group is *pending* from
//! the moment the core has unflushed state for it until the batch carrying it has been
//! sent, and everything about a pending group goes through the stage, so nothing
//! overtakes what came before it about the same group.
//!
//! Timers run on the shard's timer task, woken at the core's next deadline (or earlier
//! when a request moved that deadline earlier).
//!
//! One idea per file: this one holds the shard itself, its routing ([`shard_of`], and
//! the cluster's [`slot_of`] beside it) and the inputs other than requests; `stage.rs`
//! the immediate-or-staged choice, the open batch and the sender stage (with
//! fail-stop); `joiner.rs` the [`Joiner`] that gathers a Heartbeats request split over
//! shards; `timer.rs` the timer task.

mod joiner;
#[cfg(feature = "cluster")]
mod ownership;
mod stage;
#[cfg(test)]
mod tests;
mod timer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rollcall_protocol::{ApiKey, Frame, ListGroupsRequest, Request, Response};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};

use super::directory::Lookup;
use super::metrics::Metrics;
use super::registry::{ConnHandle, Registry};
use crate::core::{ConnId, Coordinator};
use crate::store::GroupCommitter;

pub(crate) use joiner::Joiner;
pub(crate) use stage::Handled;
use stage::OpenBatch;

/// Outputs the open batch may hold before connections wait to hand it more.
const MAX_OPEN: usize = 65_536;

/// The stable shard of a group: FNV-1a of its id, so a group lands on the same shard in
/// every process and every run.
pub fn shard_of(group: &str, shards: usize) -> usize {
    (fnv1a64(group) % shards.max(1) as u64) as usize
}

/// The cluster slot of a group: the same FNV-1a as [`shard_of`], modulo the cluster's
/// slot count, so every coordinator of a cluster agrees on it. Slots and shards are
/// independent: a slot's groups spread over all of a process's shards.
pub fn slot_of(group: &str, slots: u32) -> u32 {
    (fnv1a64(group) % u64::from(slots.max(1))) as u32
}

/// 64-bit FNV-1a of a group id.
fn fnv1a64(group: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in group.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Where the answer to a request goes.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A frame to a connection.
    Frame {
        to: ConnHandle,
        correlation_id: u32,
        api: ApiKey,
        received: Instant,
    },
    /// This shard's beats of a Heartbeats request whose beats span shards: `indices`
    /// are their places in the request.
    Part {
        joiner: Arc<Joiner>,
        indices: Vec<usize>,
    },
}

impl Reply {
    /// Sends `response`. `quiet`: the sender is the connection's own task, which
    /// writes its queue next anyway, so it need not be woken.
    pub(crate) fn deliver(self, response: Response, metrics: &Metrics, quiet: bool) {
        match self {
            Self::Frame {
                to,
                correlation_id,
                api,
                received,
            } => {
                to.send(Frame::response(correlation_id, response), quiet);
                metrics
                    .duration(api)
                    .record(received.elapsed().as_secs_f64());
            }
            Self::Part { joiner, indices } => joiner.fill(&indices, response, metrics, quiet),
        }
    }
}

/// A shard's state, behind its lock.
#[derive(Debug)]
struct ShardState {
    core: Coordinator,
    open: OpenBatch,
    /// The number of the last batch the stage took.
    taken: u64,
    /// Groups with outputs in a batch the stage took and has not finished sending, with
    /// the last such batch.
    in_flight: HashMap<String, u64>,
    /// When the timer task will wake next.
    timer_at: Instant,
    /// Set when the server stops: the stage ends once everything is sent.
    closing: bool,
    /// Set when the shard dropped its groups without writing (cluster mode), until it
    /// adopts groups again: requests are refused `not_coordinator` meanwhile.
    abandoned: bool,
    /// Per connection, the last split Heartbeats request this shard handled a part of:
    /// pushes to the connection go through it while it is open (see [`Joiner`]).
    joiners: HashMap<ConnId, Arc<Joiner>>,
}

/// What a shard uses besides its core.
#[derive(Debug)]
pub(crate) struct ShardContext {
    pub(crate) committer: Arc<GroupCommitter>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) stats_interval: Duration,
    /// Cancelled to stop the server when a shard cannot go on (a failed durable write,
    /// a panic in the core).
    pub(crate) fatal: CancellationToken,
    /// Set with `fatal` by the shards, for requests to check cheaply.
    pub(crate) failed: AtomicBool,
    /// Which groups this coordinator acts for (all of them outside a cluster).
    pub(crate) directory: super::directory::Directory,
    /// Cluster mode: a failed durable write makes the shard abandon its groups and wakes
    /// the slot manager, instead of stopping the server.
    pub(crate) on_store_failure: Option<Arc<Notify>>,
}

impl ShardContext {
    /// A shard cannot go on: the server stops, and requests are refused meanwhile.
    fn fail(&self) {
        self.failed.store(true, Ordering::Release);
        self.fatal.cancel();
    }
}

/// One shard, shared by every connection and its own two tasks.
#[derive(Debug)]
pub(crate) struct Shard {
    index: usize,
    state: Mutex<ShardState>,
    ctx: Arc<ShardContext>,
    /// Wakes the timer task when a request moved the next deadline earlier.
    timer: Notify,
    /// Wakes the sender stage when the open batch or the core's records gained something.
    stage: Notify,
    /// Wakes connections waiting for room in the open batch.
    room: Notify,
    /// Outputs in the open batch.
    open_len: AtomicUsize,
    /// Batches up to this one are refused whatever their write's outcome: a batch
    /// before or with them failed (cluster mode; 0: none).
    poisoned_through: std::sync::atomic::AtomicU64,
}

/// Cancels the server's fatal token if a panic unwinds through a shard's lock: the
/// core's state can no longer be trusted.
struct PanicGuard<'a>(&'a ShardContext);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            error!("a shard's core panicked; stopping the server");
            self.0.fail();
        }
    }
}

impl Shard {
    pub(crate) fn new(index: usize, core: Coordinator, ctx: Arc<ShardContext>) -> Arc<Self> {
        Arc::new(Self {
            index,
            state: Mutex::new(ShardState {
                core,
                open: OpenBatch::default(),
                taken: 0,
                in_flight: HashMap::new(),
                timer_at: Instant::now(),
                closing: false,
                abandoned: false,
                joiners: HashMap::new(),
            }),
            ctx,
            timer: Notify::new(),
            stage: Notify::new(),
            room: Notify::new(),
            open_len: AtomicUsize::new(0),
            poisoned_through: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Whether the open batch is full: connections stop reading until it is not.
    pub(crate) fn is_full(&self) -> bool {
        self.open_len.load(Ordering::Acquire) >= MAX_OPEN
    }

    /// Waits while the open batch is full (its records are slow to become durable);
    /// returns how long, if it had to.
    pub(crate) async fn wait_for_room(&self) -> Option<Duration> {
        if self.open_len.load(Ordering::Acquire) < MAX_OPEN {
            return None;
        }
        let waiting = Instant::now();
        while self.open_len.load(Ordering::Acquire) >= MAX_OPEN {
            let room = self.room.notified();
            if self.open_len.load(Ordering::Acquire) < MAX_OPEN {
                break;
            }
            room.await;
        }
        Some(waiting.elapsed())
    }
    /// A connection that sent requests to this shard closed.
    pub(crate) fn disconnect(&self, conn: ConnId) {
        self.state.lock().joiners.remove(&conn);
        self.input(|core, now| core.handle_disconnect(now, conn));
    }

    /// The store found `group` empty for longer than the offsets `retention`; the core
    /// decides whether to delete it.
    pub(crate) fn remove_offsets(&self, group: &str, retention: Duration) {
        let directory = &self.ctx.directory;
        let deleted = self.input(|core, now| {
            // Under the lock a hand-back takes: a group whose slot moved is not ours to
            // delete.
            (directory.is_single() || matches!(directory.lookup(group), Lookup::Here))
                && core.remove_offsets(now, group, retention)
        });
        let shard = self.index;
        if deleted {
            info!(shard, group, "offsets retention expired; group deleted");
        } else {
            debug!(shard, group, "offsets retention: group in use, kept");
        }
    }

    /// This shard's groups (or a page of them), for a ListGroups answer.
    pub(crate) fn list_groups(&self, conn: ConnId, request: ListGroupsRequest) -> Response {
        self.input(|core, now| {
            core.handle_request(now, conn, Request::ListGroups(request))
                .response
        })
    }

    /// Feeds the core an input other than a request, and stages or sends its outputs.
    fn input<R>(&self, f: impl FnOnce(&mut Coordinator, std::time::Instant) -> R) -> R {
        let mut st = self.state.lock();
        let _guard = PanicGuard(&self.ctx);
        let result = f(&mut st.core, Instant::now().into_std());
        self.after_input(&mut st);
        result
    }
}
