//! The server's configuration, constructible in code with defaults: its fields and
//! defaults here, its checks in `validate.rs` (the TLS ones in `tls.rs`), the frame
//! sizes its limits must fit in `frames.rs`, and the parsers of the human-friendly
//! values (durations, sizes) the command line and the file accept in `values.rs`.

mod frames;
#[cfg(test)]
mod tests;
mod tls_options;
mod validate;
mod values;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::tls::TlsSettings;
use crate::core::CoreConfig;
use crate::store::Store;

pub use frames::{largest_member_answer, largest_offset_answer, max_partitions_for};
pub use validate::InvalidConfig;
pub use values::{format_duration, parse_duration, parse_size, ParseValueError};

/// Where the server keeps its durable state.
#[derive(Clone)]
pub enum StoreConfig {
    /// A redb file in this directory (created if missing).
    Dir(PathBuf),
    /// Nothing durable: an in-memory store, for tests and benchmarks.
    Memory,
    /// A store built by the caller (tests that inject failures, or share a store
    /// across restarts).
    Custom(Arc<dyn Store>),
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dir(dir) => f.debug_tuple("Dir").field(dir).finish(),
            Self::Memory => f.write_str("Memory"),
            Self::Custom(store) => f.debug_tuple("Custom").field(store).finish(),
        }
    }
}

/// Everything the server needs to run.
///
/// [`ServerConfig::default`] listens on `127.0.0.1:0` (an ephemeral port), serves no
/// metrics, keeps its state in memory and runs one shard: what a test wants. The
/// `rollcall serve` command builds one from its flags, environment and file.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address the protocol listener binds.
    pub listen: SocketAddr,
    /// The address (`host:port`) clients are told to connect to for the groups this
    /// coordinator serves (FindCoordinator); `None`: the address the listener bound.
    pub advertise: Option<String>,
    /// Address of the Prometheus endpoint; `None` serves no metrics.
    pub metrics_addr: Option<SocketAddr>,
    /// Durable state.
    pub store: StoreConfig,
    /// Number of shards (tasks that each own the groups hashed to them).
    pub shards: usize,
    /// Threads serving connections, each with a single-threaded runtime of its own;
    /// `0` serves them on the runtime the server runs on.
    pub io_threads: usize,
    /// Largest frame accepted or sent, length prefix excluded.
    pub max_frame_size: usize,
    /// Connections served at once; more are answered `TooManyConnections` and closed.
    pub max_connections: usize,
    /// Connections served at once from one IP address; more from it are answered
    /// `TooManyConnections` and closed, as over `max_connections`. `0`: no limit.
    pub max_connections_per_address: usize,
    /// Connections authenticated as one principal at once (with an auth file); one more
    /// is answered `TooManyConnections` when it authenticates, and closed. `0`: no limit.
    pub max_connections_per_principal: usize,
    /// Time a new connection has to complete its ApiVersions handshake.
    pub handshake_timeout: Duration,
    /// Time a frame has to arrive whole once its first byte has: a connection that
    /// leaves a frame unfinished for longer is closed (it would otherwise hold a read
    /// buffer of up to `max_frame_size`, and a connection slot, for ever).
    pub frame_timeout: Duration,
    /// Time a handshaken connection may send nothing at all before it is closed. It
    /// must exceed the longest session timeout a member may ask for
    /// (`core.max_session_timeout`): a member heartbeats within its session timeout or
    /// is expelled anyway, so only connections that carry no live member (an idle admin
    /// connection, a peer that vanished without closing) ever reach it.
    pub idle_timeout: Duration,
    /// Frames queued for one connection before it is deemed too slow and disconnected.
    pub send_buffer: usize,
    /// Bytes (encoded frames, length prefixes included) queued for one connection
    /// before it is deemed too slow and disconnected. At least `max_frame_size`; a frame
    /// is always accepted into an empty queue, so one answer of any size fits.
    pub send_buffer_bytes: usize,
    /// Bytes of connection buffers (frames being read, frames queued) over all
    /// connections together, beyond 64 KiB each that is not counted: a large frame
    /// with no room is refused (`TooManyConnections`, and the connection closed), and a
    /// connection whose backlog would pass it is disconnected as a slow reader. At
    /// least `max_frame_size` + `send_buffer_bytes`.
    pub max_buffered_bytes: usize,
    /// Time graceful shutdown may take before the server gives up waiting.
    pub shutdown_timeout: Duration,
    /// Offsets of groups empty for longer than this are purged.
    pub offsets_retention: Duration,
    /// How often the retention purge runs (it also runs once at start).
    pub retention_interval: Duration,
    /// How often each shard refreshes the group and member gauges.
    pub stats_interval: Duration,
    /// The auth file (users and access rules, see `rollcall serve --help`); when set,
    /// every connection must authenticate and everything not allowed is denied.
    pub auth_file: Option<PathBuf>,
    /// How often the auth file is checked for changes (it is also reloaded on SIGHUP).
    pub auth_reload_interval: Duration,
    /// TLS on the protocol listener; off by default.
    pub tls: TlsSettings,
    /// The core's limits and tunables. `member_id_suffix` is made unique per start and
    /// per shard by the server.
    pub core: CoreConfig,
    /// Cluster mode: the groups live in etcd and are shared with other coordinators
    /// (`store` is then unused). `None`: one process owns every group of its store.
    pub cluster: Option<ClusterSettings>,
}

/// Where a cluster's coordinators meet, and how this one takes part (see the
/// `cluster` module, built with the `cluster` feature).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// etcd endpoints (`http://host:port`).
    pub endpoints: Vec<String>,
    /// The cluster's name: every key lives under `/rollcall/<name>/`.
    pub name: String,
    /// This coordinator's id among the cluster's; default: the advertised address.
    pub id: Option<String>,
    /// The number of slots, used only when the cluster is created (then kept in etcd).
    pub slots: u32,
    /// The time-to-live of this coordinator's etcd lease: how long its slots stay
    /// owned after it dies, and the longest it acts without renewing.
    pub lease_ttl: Duration,
}

impl ClusterSettings {
    /// The defaults for `endpoints`: cluster `default`, 64 slots, a 5 s lease.
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            name: "default".into(),
            id: None,
            slots: 64,
            lease_ttl: Duration::from_secs(5),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            metrics_addr: None,
            store: StoreConfig::Memory,
            shards: 1,
            io_threads: 1,
            max_frame_size: rollcall_protocol::DEFAULT_MAX_FRAME_SIZE,
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            max_connections_per_principal: 1_000,
            handshake_timeout: Duration::from_secs(5),
            frame_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60 * 60),
            send_buffer: 4096,
            send_buffer_bytes: 4 << 20,
            max_buffered_bytes: 1 << 30,
            shutdown_timeout: Duration::from_secs(10),
            offsets_retention: Duration::from_secs(7 * 24 * 60 * 60),
            retention_interval: Duration::from_secs(60 * 60),
            stats_interval: Duration::from_secs(1),
            auth_file: None,
            auth_reload_interval: Duration::from_secs(10),
            tls: TlsSettings::default(),
            core: CoreConfig {
                // The largest that keeps every push and a one-member Describe answer
                // within the default 1 MiB frame (see `largest_member_answer`).
                max_partitions_per_group: DEFAULT_MAX_PARTITIONS_PER_GROUP,
                ..CoreConfig::default()
            },
            cluster: None,
        }
    }
}

/// The default `core.max_partitions_per_group` of a server.
pub const DEFAULT_MAX_PARTITIONS_PER_GROUP: u32 = 100_000;
