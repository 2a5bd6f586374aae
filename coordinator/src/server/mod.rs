//! The tokio shell that serves the core over TCP.
//!
//! ```text
//!  accept ─► connection task ──lock──► shard (one Coordinator behind a mutex)
//!              ▲   │ answers that wait for nothing      │ open batch: records and the
//!              │   ▼ (written by the same task)         │ outputs that reveal them
//!              │  socket                                ▼
//!              └── outbox ◄── registry ◄── sender stage ─► group committer ─► redb
//!                                          (one per shard; sends once durable)
//! ```
//!
//! - Groups are spread over shards by a stable hash of the group id; each shard holds
//!   one [`Coordinator`](crate::core::Coordinator) behind a lock, so each group has a
//!   single writer. A connection handles its requests on its own task under that lock.
//! - A request whose answer reveals nothing that waits for durability (a heartbeat,
//!   usually) is answered at once and written by the same task: no task hop. Anything
//!   else joins the shard's open batch; the sender stage makes the batch's records
//!   durable before any of its responses or pushes leave, and batches of one shard
//!   leave in order. A group stays pending until its batch is sent, so nothing about a
//!   group overtakes what came before it.
//! - Timers run on a per-shard timer task; the stage and the timer task lock the shard
//!   as connections do.
//! - Each connection has an outbox of encoded frames, bounded in bytes and in frames.
//!   A client that does not read fills it and is disconnected: the server never
//!   buffers without bound and never blocks a shard on one slow client. A newer
//!   Assignment or Revoke push for a member replaces one still queued.
//! - A frame must arrive whole within the frame deadline of its first byte, and a
//!   handshaken connection that sends nothing for the idle deadline is closed, so a
//!   connection cannot hold a read buffer or a connection slot for ever.
//! - Over `max_connections`, a connection is accepted, its first request is answered
//!   `TooManyConnections`, and it is closed (at most 256 such answers are pending at
//!   once; past that, excess connections are closed without an answer).
//! - With a certificate and key configured, the listener speaks TLS: each connection
//!   runs its TLS session on its own task (rustls, sans-IO), and the certificate, key
//!   and client CA files are read again when they change or on SIGHUP, for new
//!   connections.
//! - Graceful shutdown stops accepting and reading requests, lets every shard's stage
//!   send what it has (records durable, answers sent), sends every connection a
//!   shutdown push, and closes them; members keep their sessions.

mod auth;
mod budget;
#[cfg(feature = "cluster")]
mod cluster;
mod config;
mod conn;
mod directory;
mod events;
mod evidence;
mod io_threads;
mod memory;
mod metrics;
mod outbox;
mod registry;
mod shard;
mod start;
mod store_tasks;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

pub use self::auth::AuthFileError;
pub use self::config::{
    format_duration, largest_member_answer, largest_offset_answer, max_partitions_for,
    parse_duration, parse_size, ClusterSettings, InvalidConfig, ParseValueError, ServerConfig,
    StoreConfig, DEFAULT_MAX_PARTITIONS_PER_GROUP,
};
pub use self::directory::{Directory, Lookup};
pub use self::shard::{shard_of, slot_of};

pub use self::tls::{ClientAuth, TlsError, TlsSettings};
/// What the server reports to the isolation guard as the last member frame it read
/// (`Coordinator::observe_traffic`): the core's own rule, so both count the same frames.
pub(crate) use crate::core::is_member_traffic;

use self::auth::Security;
use self::conn::ConnContext;
use self::metrics::Metrics;
use self::registry::Registry;
use self::shard::{Shard, ShardContext};
use self::start::{open_and_load, restore_cores};
use self::store_tasks::{retention, store_stats};
use crate::core::Coordinator;
use crate::store::{GroupCommitter, StoreError};

/// Why the server could not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is invalid.
    #[error("invalid configuration: {0}")]
    Config(#[from] InvalidConfig),
    /// The store cannot be used.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// A TLS certificate, key or CA file cannot be used.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The auth file cannot be used.
    #[error("{0}")]
    Auth(#[from] AuthFileError),
    /// Graceful shutdown did not finish in time.
    #[error("shutdown did not finish within {0:?}; some answers were not sent")]
    ShutdownTimedOut(Duration),
    /// Any other failure while running.
    #[error("{0}")]
    Runtime(String),
}

/// A bound, ready-to-run server.
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    listener: TcpListener,
    local_addr: SocketAddr,
    metrics_listener: Option<TcpListener>,
    metrics_addr: Option<SocketAddr>,
    prometheus: Option<metrics_exporter_prometheus::PrometheusHandle>,
    committer: Arc<GroupCommitter>,
    cores: Vec<Coordinator>,
    security: Option<Arc<Security>>,
    /// The TLS configuration read at bind, and what its reload task watches.
    tls: Option<(Arc<rustls::ServerConfig>, tls::TlsWatch)>,
    /// Which groups it serves: every one, unless set otherwise.
    directory: Directory,
    /// Cluster mode: the connection to etcd and this coordinator's lease.
    #[cfg(feature = "cluster")]
    cluster: Option<Arc<crate::cluster::Etcd>>,
}

impl Server {
    /// Validates `config`, opens and loads the store, restores the groups into their
    /// shards, and binds the listeners (port 0 picks a free port).
    pub async fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        config.validate()?;
        let security = match &config.auth_file {
            Some(path) => Some(Arc::new(Security::load(path)?)),
            None => None,
        };
        let tls = if config.tls.enabled() {
            let settings = config.tls.clone();
            let loaded = tokio::task::spawn_blocking(move || tls::load_initial(&settings))
                .await
                .map_err(|e| {
                    ServerError::Runtime(format!("reading the TLS files panicked: {e}"))
                })??;
            Some(loaded)
        } else {
            None
        };
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    what: "protocol",
                    addr: config.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| ServerError::Bind {
            what: "protocol",
            addr: config.listen,
            source,
        })?;
        #[cfg(feature = "cluster")]
        let advertise = config
            .advertise
            .clone()
            .unwrap_or_else(|| local_addr.to_string());

        #[cfg(feature = "cluster")]
        let cluster = match &config.cluster {
            Some(settings) => Some(cluster::connect(settings, &advertise).await?),
            None => None,
        };
        #[cfg(feature = "cluster")]
        let (store, restored) = match &cluster {
            // A cluster coordinator starts with no group: the slot manager claims its
            // share of the slots and loads them.
            Some(etcd) => (
                etcd.store() as Arc<dyn crate::store::Store>,
                crate::core::RestoredState::default(),
            ),
            None => open_and_load(&config.store).await?,
        };
        #[cfg(not(feature = "cluster"))]
        let (store, restored) = open_and_load(&config.store).await?;
        let committer = Arc::new(GroupCommitter::new(store)?);

        let cores = restore_cores(&config, restored);
        let (metrics_listener, metrics_addr, prometheus) = match config.metrics_addr {
            Some(addr) => {
                let bind_error = |source| ServerError::Bind {
                    what: "metrics",
                    addr,
                    source,
                };
                let l = TcpListener::bind(addr).await.map_err(bind_error)?;
                let bound = l.local_addr().map_err(bind_error)?;
                (Some(l), Some(bound), metrics::install_recorder())
            }
            None => (None, None, None),
        };
        Ok(Self {
            config,
            listener,
            local_addr,
            metrics_listener,
            metrics_addr,
            prometheus,
            committer,
            cores,
            security,
            tls,
            directory: Directory::single(),
            #[cfg(feature = "cluster")]
            cluster,
        })
    }

    /// Serves the groups `directory` says are here, and answers the others'
    /// requests `not_coordinator` or `coordinator_loading` (the directory is shared:
    /// whoever holds a clone changes what this server serves). A bound server serves
    /// every group.
    pub fn with_directory(mut self, directory: Directory) -> Self {
        self.directory = directory;
        self
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address of the Prometheus endpoint, if metrics are served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Runs on a new task; the handle stops it.
    pub fn spawn(self) -> ServerHandle {
        let shutdown = CancellationToken::new();
        let local_addr = self.local_addr;
        let metrics_addr = self.metrics_addr;
        let task = tokio::spawn(self.run(shutdown.clone()));
        ServerHandle {
            local_addr,
            metrics_addr,
            shutdown,
            task,
        }
    }

    /// Serves until `shutdown` is cancelled, then shuts down gracefully.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ServerError> {
        let Self {
            config,
            listener,
            local_addr,
            metrics_listener,
            metrics_addr,
            prometheus,
            committer,
            cores,
            security,
            tls,
            directory,
            #[cfg(feature = "cluster")]
            cluster,
        } = self;
        let metrics = Arc::new(Metrics::new());
        let registry = Arc::new(Registry::new(config.io_threads));
        // Connections run on threads of their own (see `io_threads`), or with `0` on
        // this runtime.
        let io = match config.io_threads {
            0 => None,
            n => Some(io_threads::IoThreads::start(n, &registry).map_err(|e| {
                ServerError::Runtime(format!("cannot start the connection threads: {e}"))
            })?),
        };
        let background = CancellationToken::new();
        // Cancelled if a shard dies: its groups are unreachable, so the server stops
        // (and a restart restores them from the store).
        let fatal = CancellationToken::new();

        // A cluster coordinator serves the slots its manager adopts; the directory a
        // test gave is kept otherwise.
        #[cfg(feature = "cluster")]
        let directory = match &cluster {
            Some(etcd) => Directory::cluster(etcd.slots()),
            None => directory,
        };
        // In a cluster, a shard whose write failed abandons its groups and wakes the
        // slot manager, which loads them again; a single coordinator stops instead.
        #[cfg(feature = "cluster")]
        let store_failure = cluster
            .as_ref()
            .map(|_| Arc::new(tokio::sync::Notify::new()));
        #[cfg(not(feature = "cluster"))]
        let store_failure: Option<Arc<tokio::sync::Notify>> = None;
        let shard_ctx = Arc::new(ShardContext {
            committer: committer.clone(),
            registry: registry.clone(),
            metrics: metrics.clone(),
            stats_interval: config.stats_interval,
            fatal: fatal.clone(),
            failed: std::sync::atomic::AtomicBool::new(false),
            directory: directory.clone(),
            on_store_failure: store_failure.clone(),
        });
        let shards: Vec<Arc<Shard>> = cores
            .into_iter()
            .enumerate()
            .map(|(index, core)| Shard::new(index, core, shard_ctx.clone()))
            .collect();
        let stop_timers = CancellationToken::new();
        let mut stages = Vec::with_capacity(shards.len());
        let mut timers = Vec::with_capacity(shards.len());
        // With connection threads, each shard's sender stage and timer run on one of
        // them: a request that stages a batch wakes the stage on the thread it runs on,
        // after the connection's turn, as on the main runtime, instead of waking another
        // thread to take the batch one request at a time.
        let spawn = |index: usize, task: BoxFuture| match &io {
            Some(io) => io.spawn_on(index, task),
            None => tokio::spawn(task),
        };
        for (index, shard) in shards.iter().enumerate() {
            let failed = FailGuard(Some(fatal.clone()));
            let stage = shard.clone();
            stages.push(spawn(
                index,
                Box::pin(async move {
                    // A panic unwinds through the guard, which raises the alarm.
                    if stage.run_stage().await {
                        failed.disarm();
                    }
                }),
            ));
            let failed = FailGuard(Some(fatal.clone()));
            let timer = shard.clone().run_timers(stop_timers.clone());
            timers.push(spawn(
                index,
                Box::pin(async move {
                    timer.await;
                    failed.disarm();
                }),
            ));
        }

        let mut helpers = Vec::new();
        if let Some(l) = metrics_listener {
            helpers.push(tokio::spawn(metrics::serve_http(
                l,
                prometheus,
                background.clone(),
            )));
        }
        if io.is_none() {
            // The connections run here: this runtime's lateness is theirs.
            helpers.push(tokio::spawn(evidence::probe_lag(
                registry.lag.clone(),
                0,
                background.clone(),
            )));
        }
        helpers.push(tokio::spawn(retention(
            committer.clone(),
            shards.clone(),
            config.offsets_retention,
            config.retention_interval,
            background.clone(),
        )));
        helpers.push(tokio::spawn(store_stats(
            committer.clone(),
            metrics.clone(),
            config.stats_interval,
            background.clone(),
        )));

        if let Some(security) = &security {
            helpers.push(tokio::spawn(
                security
                    .clone()
                    .watch(config.auth_reload_interval, background.clone()),
            ));
        }
        let tls = tls.map(|(server_config, watch)| {
            let context = Arc::new(tls::TlsContext::new(server_config));
            helpers.push(tokio::spawn(watch.run(
                context.clone(),
                metrics.clone(),
                background.clone(),
            )));
            context
        });
        let mut ctx = ConnContext::new(
            shards.clone(),
            registry.clone(),
            metrics.clone(),
            &config,
            security,
            tls,
            io,
        );
        ctx.directory = directory.clone();
        if config.advertise.is_none() {
            ctx.advertise = Arc::from(local_addr.to_string());
        }
        let ctx = Arc::new(ctx);
        // Cluster mode: the slot manager claims this coordinator's share of the slots,
        // and hands them all back when the server stops.
        #[cfg(feature = "cluster")]
        let slot_manager = match cluster {
            Some(etcd) => {
                let stop = CancellationToken::new();
                let (ready, loaded) = tokio::sync::oneshot::channel();
                let id = etcd.id().to_owned();
                let wait = etcd.lease_ttl() * 2;
                let manager = cluster::SlotManager::new(
                    etcd,
                    shards.clone(),
                    directory.clone(),
                    id,
                    metrics.clone(),
                    registry.clone(),
                    store_failure.unwrap_or_default(),
                );
                let task = tokio::spawn(manager.run(stop.clone(), ready));
                // Serve once the unowned slots this coordinator is given are loaded
                // (connections wait in the listen backlog meanwhile), or after twice
                // the lease TTL at most: the rest arrives as the others hand it over.
                if tokio::time::timeout(wait, loaded).await.is_err() {
                    warn!("the first slots took long to load; serving meanwhile");
                }
                Some((stop, task))
            }
            None => None,
        };
        let connections = TaskTracker::new();
        let (reading, mut readers_done) = mpsc::channel::<()>(1);
        info!(
            listen = %local_addr,
            metrics = ?metrics_addr,
            shards = shards.len(),
            tls = ctx.tls.is_some(),
            "rollcall coordinator serving"
        );

        let mut failure = None;
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => break,
                () = fatal.cancelled() => {
                    error!("a shard failed; shutting down");
                    failure = Some(ServerError::Runtime(
                        "a shard failed (see the log); restart to restore its groups from the store".into(),
                    ));
                    break;
                }
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) if ctx.directory.is_away() => {
                    // A cluster coordinator that can act for nothing sends clients on.
                    debug!(%peer, "closed: this coordinator acts for no slot now");
                    drop(stream);
                }
                Ok((stream, peer)) => {
                    conn::accept(&ctx, stream, peer, reading.clone(), &connections);
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        if failure.is_none() && fatal.is_cancelled() {
            // A shard failed while a shutdown was being asked for: still a failure.
            failure = Some(ServerError::Runtime(
                "a shard failed (see the log); restart to restore its groups from the store".into(),
            ));
        }
        drop(listener);
        info!("shutting down: no new connections, finishing in-flight requests");

        let graceful = async {
            // 0. A cluster coordinator hands its slots to the others first, while its
            //    shards still make records durable: members move without a rebalance.
            #[cfg(feature = "cluster")]
            if let Some((stop, task)) = slot_manager {
                stop.cancel();
                if let Err(e) = task.await {
                    error!(error = %e, "the slot manager failed");
                }
            }
            // 1. Connections stop reading requests; wait until none can send any more.
            ctx.stop_reading();
            drop(reading);
            let _ = readers_done.recv().await;
            // 2. Timers stop; each shard's sender stage sends what it was given once
            //    durable, and ends.
            stop_timers.cancel();
            for task in timers {
                if let Err(e) = task.await {
                    error!(error = %e, "shard timer task failed");
                }
            }
            for shard in &shards {
                shard.close();
            }
            for task in stages {
                if let Err(e) = task.await {
                    error!(error = %e, "shard sender stage failed");
                }
            }
            // 3. Every connection gets a shutdown push and closes.
            ctx.close.cancel();
            connections.close();
            connections.wait().await;
        };
        let outcome = match tokio::time::timeout(config.shutdown_timeout, graceful).await {
            Ok(()) => Ok(()),
            Err(_) => {
                for handle in registry.handles() {
                    handle.kill();
                }
                Err(ServerError::ShutdownTimedOut(config.shutdown_timeout))
            }
        };
        background.cancel();
        if let Some(io) = &ctx.io {
            // Connections still open past the shutdown timeout are dropped (closed).
            io.stop();
        }
        for helper in helpers {
            let _ = helper.await;
        }
        drop(ctx);
        drop(shards);
        // The committer's writer thread finishes what was submitted; joining it blocks.
        let _ = tokio::task::spawn_blocking(move || drop(committer)).await;
        match &outcome {
            Ok(()) => info!("shutdown complete"),
            Err(e) => warn!(error = %e, "shutdown incomplete"),
        }
        match failure {
            Some(e) => Err(e),
            None => outcome,
        }
    }
}

/// A shard's stage or timer task.
type BoxFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Cancels its token when dropped armed, e.g. by a panic unwinding through a shard.
#[derive(Debug)]
struct FailGuard(Option<CancellationToken>);

impl FailGuard {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for FailGuard {
    fn drop(&mut self) {
        if let Some(token) = self.0.take() {
            token.cancel();
        }
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    local_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ServerError>>,
}

impl ServerHandle {
    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address of the Prometheus endpoint, if metrics are served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Shuts the server down gracefully and waits for it.
    pub async fn shutdown(self) -> Result<(), ServerError> {
        self.shutdown.cancel();
        self.task
            .await
            .map_err(|e| ServerError::Runtime(format!("server task failed: {e}")))?
    }

    /// Stops the server without the graceful steps (in-flight answers may be lost),
    /// as a crash would.
    pub fn abort(self) {
        self.task.abort();
    }
}
