//! Connection threads: each runs a current-thread tokio runtime of its own and serves
//! the connections handed to it for their whole life.
//!
//! On the multi-thread runtime, a connection's frames arrive on whichever worker
//! polled the socket, and a worker that queues a woken task wakes a parked worker to
//! steal it: at a thousand heartbeats a second, most heartbeats woke a second thread
//! that found nothing to do (1.8 context switches per heartbeat, where one thread
//! needs one). Here a connection's socket, timer and task belong to one thread, which
//! wakes for its own frames only; the threads share nothing but the shards' locks and
//! the registry. Each shard's timer and sender stage run on one of these threads too
//! (shard `i` on thread `i` modulo their number), so that a request which stages a
//! batch wakes the stage on its own thread: it runs after the connection's turn and
//! takes everything the turn staged, as it did on the main runtime. The store's writer
//! is a thread of its own.
//!
//! A new connection goes to the thread serving the fewest. Each thread also runs the
//! lag probe for its own runtime (see [`probe_lag`]): a connection with frames ready
//! waits as long as its thread is late.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use super::evidence::probe_lag;
use super::registry::Registry;

/// The connection threads. Dropping this stops them; a thread that stops drops the
/// connections it still serves.
#[derive(Debug)]
pub(crate) struct IoThreads {
    threads: Box<[IoThread]>,
    stop: CancellationToken,
}

#[derive(Debug)]
struct IoThread {
    runtime: Handle,
    /// Connections it serves now.
    serving: Arc<AtomicUsize>,
}

impl IoThreads {
    /// Starts `count` threads (at least one), each probing its runtime's lateness into
    /// its own slot of `registry.lag`.
    pub(crate) fn start(count: usize, registry: &Arc<Registry>) -> std::io::Result<Self> {
        let stop = CancellationToken::new();
        // Dropped on an early return, it stops the threads already started.
        let mut started = Self {
            threads: Box::default(),
            stop: stop.clone(),
        };
        let mut threads = Vec::with_capacity(count);
        for index in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            threads.push(IoThread {
                runtime: runtime.handle().clone(),
                serving: Arc::default(),
            });
            let stop = stop.clone();
            let lag = registry.lag.clone();
            std::thread::Builder::new()
                .name(format!("rollcall-io-{index}"))
                .spawn(move || {
                    runtime.block_on(probe_lag(lag, index, stop));
                    // The runtime is dropped here, with any connection still on it.
                })?;
        }
        started.threads = threads.into_boxed_slice();
        Ok(started)
    }

    /// Serves `connection` on the thread serving the fewest connections.
    pub(crate) fn spawn(&self, connection: impl Future<Output = ()> + Send + 'static) {
        let Some(thread) = self
            .threads
            .iter()
            .min_by_key(|t| t.serving.load(Ordering::Relaxed))
        else {
            return;
        };
        let serving = thread.serving.clone();
        serving.fetch_add(1, Ordering::Relaxed);
        thread.runtime.spawn(async move {
            let _served = Served(serving);
            connection.await;
        });
    }

    /// Runs `task` on thread `index` (modulo their number), for its whole life.
    pub(crate) fn spawn_on<T: Send + 'static>(
        &self,
        index: usize,
        task: impl Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.threads[index % self.threads.len()].runtime.spawn(task)
    }

    /// Stops every thread; connections still on them are dropped (closed).
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for IoThreads {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Counts a connection off its thread when the connection ends or is dropped.
struct Served(Arc<AtomicUsize>);

impl Drop for Served {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
