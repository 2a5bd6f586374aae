//! `rollcall serve`'s arguments: value types, flags with their environment variables
//! and defaults, and the layering of flags over the environment over a TOML file.
//!
//! Defaults come from [`ServerConfig::default`] (its `core` for the core's limits, which
//! lowers the partition limit to fit the frame size) and [`CoreConfig::default`] except the
//! four where a test server and a deployed one differ (listen and metrics addresses,
//! store, shards, connection threads), which are the `DEFAULT_*` constants here. The file's keys are the
//! flags' long names, read from clap's own argument list.

use super::*;

/// Where `rollcall serve` listens, and where the admin commands look, by default.
pub(super) const DEFAULT_LISTEN: &str = "127.0.0.1:7070";
/// Where `rollcall serve` serves metrics by default.
const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9464";
/// Where `rollcall serve` keeps its store by default.
const DEFAULT_DATA_DIR: &str = "./rollcall-data";

/// Why `rollcall serve`'s configuration was refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConfigError {
    /// The configuration file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: String, message: String },
    /// The file names an option `rollcall serve` does not have.
    #[error("config file {path}: unknown option '{key}' (options are the long flag names of `rollcall serve`, e.g. listen, handshake-timeout)")]
    UnknownOption { path: String, key: String },
    /// The file gives an option a table, array, float or date.
    #[error(
        "config file {path}: option '{key}' must be a string, integer or boolean, not {found}"
    )]
    ValueType {
        path: String,
        key: String,
        found: &'static str,
    },
    /// The file gives an option a value its flag would refuse.
    #[error("config file {path}: option '{key}': {message}")]
    Value {
        path: String,
        key: String,
        message: String,
    },
    /// The flags and environment, with the file's values, do not parse.
    #[error("{0}")]
    Usage(String),
    /// The values parse but do not fit together.
    #[error(transparent)]
    Invalid(#[from] InvalidConfig),
}

impl ConfigError {
    fn usage(e: &clap::Error) -> Self {
        Self::Usage(first_line(e))
    }
}

/// Clap's first line, which names the option and what is wrong with it.
pub(super) fn first_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let mut lines = rendered.lines();
    let line = lines.next().unwrap_or("invalid arguments");
    let mut text = line.trim_start_matches("error: ").to_owned();
    // "the following required arguments were not provided:" names them on the lines
    // that follow.
    if text.ends_with(':') {
        let named: Vec<&str> = lines.map(str::trim).take_while(|l| !l.is_empty()).collect();
        if !named.is_empty() {
            text.push(' ');
            text.push_str(&named.join(" "));
        }
    }
    text
}

/// A duration option, shown and parsed like `10s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dur(Duration);

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl FromStr for Dur {
    type Err = ParseValueError;
    fn from_str(s: &str) -> Result<Self, ParseValueError> {
        parse_duration(s).map(Self)
    }
}

/// A size option in bytes, shown like `1MiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Size(usize);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            n if n != 0 && n % (1 << 20) == 0 => write!(f, "{}MiB", n >> 20),
            n if n != 0 && n % (1 << 10) == 0 => write!(f, "{}KiB", n >> 10),
            n => write!(f, "{n}"),
        }
    }
}

impl FromStr for Size {
    type Err = ParseValueError;
    fn from_str(s: &str) -> Result<Self, ParseValueError> {
        parse_size(s).map(Self)
    }
}

/// The metrics endpoint's address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MetricsAddr(Option<SocketAddr>);

impl fmt::Display for MetricsAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(addr) => write!(f, "{addr}"),
            None => f.write_str("off"),
        }
    }
}

impl FromStr for MetricsAddr {
    type Err = ParseValueError;
    fn from_str(s: &str) -> Result<Self, ParseValueError> {
        match s.trim() {
            "" | "off" | "none" | "disabled" => Ok(Self(None)),
            addr => addr
                .parse()
                .map(|a| Self(Some(a)))
                .map_err(|_| ParseValueError {
                    what: "address",
                    text: addr.to_owned(),
                    expected: "IP:PORT, or off to disable",
                }),
        }
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Connection threads by default: half the CPUs, at least one, the rest left to the
/// store's writer and the machine's other work. On two CPUs shared with a load
/// generator, one thread gave more heartbeats per CPU-second than two at 1,000/s,
/// 10,000/s and in Heartbeats frames (BENCHMARKS.md, "Connection threads").
fn io_threads() -> usize {
    (cpus() / 2).max(1)
}

fn server_default() -> ServerConfig {
    ServerConfig::default()
}

fn core_default() -> CoreConfig {
    CoreConfig::default()
}

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// TOML file with any of these options (keys as the long flag names).
    #[arg(long, env = "ROLLCALL_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address the protocol listener binds.
    #[arg(
        long,
        env = "ROLLCALL_LISTEN",
        value_name = "ADDR",
        default_value = DEFAULT_LISTEN
    )]
    listen: SocketAddr,
    /// Address of the Prometheus endpoint (`GET /metrics`); `off` disables it.
    #[arg(
        long,
        env = "ROLLCALL_METRICS_ADDR",
        value_name = "ADDR|off",
        default_value = DEFAULT_METRICS_ADDR
    )]
    metrics_addr: MetricsAddr,
    /// Directory of the durable store (created if missing).
    #[arg(
        long,
        env = "ROLLCALL_DATA_DIR",
        value_name = "DIR",
        default_value = DEFAULT_DATA_DIR
    )]
    data_dir: PathBuf,
    /// Keep everything in memory instead of --data-dir: nothing survives a restart.
    #[arg(long, env = "ROLLCALL_IN_MEMORY", value_name = "BOOL", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    in_memory: bool,
    /// Number of shards (tasks owning a share of the groups); default: number of CPUs.
    #[arg(long, env = "ROLLCALL_SHARDS", value_name = "N", default_value_t = cpus())]
    shards: usize,
    /// Threads serving connections and shards, each a single-threaded runtime of its
    /// own; 0 serves them on the main runtime's workers. Default: half the CPUs, at
    /// least one.
    #[arg(long, env = "ROLLCALL_IO_THREADS", value_name = "N", default_value_t = io_threads())]
    io_threads: usize,
    /// Largest frame accepted or sent (e.g. 1MiB, 65536).
    #[arg(long, env = "ROLLCALL_MAX_FRAME_SIZE", value_name = "SIZE", default_value_t = Size(server_default().max_frame_size))]
    max_frame_size: Size,
    /// Connections served at once; over it, the first request is answered
    /// too_many_connections and the connection closed.
    #[arg(
        long,
        env = "ROLLCALL_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = server_default().max_connections
    )]
    max_connections: usize,
    /// Connections served at once from one IP address; over it, the first request is
    /// answered too_many_connections and the connection closed. 0: no limit.
    #[arg(
        long,
        env = "ROLLCALL_MAX_CONNECTIONS_PER_ADDRESS",
        value_name = "N",
        default_value_t = server_default().max_connections_per_address
    )]
    max_connections_per_address: usize,
    /// Connections authenticated as one principal at once (with --auth-file); one more
    /// is answered too_many_connections when it authenticates, and closed. 0: no limit.
    #[arg(
        long,
        env = "ROLLCALL_MAX_CONNECTIONS_PER_PRINCIPAL",
        value_name = "N",
        default_value_t = server_default().max_connections_per_principal
    )]
    max_connections_per_principal: usize,
    /// Time a new connection has to send its ApiVersions handshake.
    #[arg(long, env = "ROLLCALL_HANDSHAKE_TIMEOUT", value_name = "DURATION", default_value_t = Dur(server_default().handshake_timeout))]
    handshake_timeout: Dur,
    /// Time a frame has to arrive whole once its first byte has; a connection that
    /// leaves a frame unfinished longer is closed.
    #[arg(long, env = "ROLLCALL_FRAME_TIMEOUT", value_name = "DURATION", default_value_t = Dur(server_default().frame_timeout))]
    frame_timeout: Dur,
    /// Time a handshaken connection may send nothing before it is closed; must exceed
    /// --max-session-timeout (members heartbeat within their session timeout).
    #[arg(long, env = "ROLLCALL_IDLE_TIMEOUT", value_name = "DURATION", default_value_t = Dur(server_default().idle_timeout))]
    idle_timeout: Dur,
    /// Frames queued for one connection; a client that lets more pile up is disconnected.
    #[arg(
        long,
        env = "ROLLCALL_SEND_BUFFER",
        value_name = "FRAMES",
        default_value_t = server_default().send_buffer
    )]
    send_buffer: usize,
    /// Bytes queued for one connection (at least --max-frame-size); a client that lets
    /// more pile up is disconnected.
    #[arg(long, env = "ROLLCALL_SEND_BUFFER_BYTES", value_name = "SIZE", default_value_t = Size(server_default().send_buffer_bytes))]
    send_buffer_bytes: Size,
    /// Bytes of connection buffers over all connections together (beyond 64 KiB each,
    /// not counted): past it, a large frame is refused and a backlog disconnected.
    /// At least --max-frame-size + --send-buffer-bytes.
    #[arg(long, env = "ROLLCALL_MAX_BUFFERED_BYTES", value_name = "SIZE", default_value_t = Size(server_default().max_buffered_bytes))]
    max_buffered_bytes: Size,
    /// Time a graceful shutdown may take.
    #[arg(long, env = "ROLLCALL_SHUTDOWN_TIMEOUT", value_name = "DURATION", default_value_t = Dur(server_default().shutdown_timeout))]
    shutdown_timeout: Dur,
    /// Users (SCRAM credentials from `rollcall hash-password`) and access rules, in
    /// TOML. When set, every connection must authenticate, by SCRAM-SHA-256 or a
    /// verified client certificate, and everything no rule allows is denied. Reloaded
    /// when it changes. The format: README.md, "Authentication and access rules".
    #[arg(long, env = "ROLLCALL_AUTH_FILE", value_name = "FILE")]
    auth_file: Option<PathBuf>,
    /// How often the auth file is checked for changes (it is also reloaded on SIGHUP).
    #[arg(long, env = "ROLLCALL_AUTH_RELOAD_INTERVAL", value_name = "DURATION", default_value_t = Dur(server_default().auth_reload_interval))]
    auth_reload_interval: Dur,
    /// Committed offsets of groups empty for longer than this are deleted.
    #[arg(long, env = "ROLLCALL_OFFSETS_RETENTION", value_name = "DURATION", default_value_t = Dur(server_default().offsets_retention))]
    offsets_retention: Dur,
    /// How often expired offsets are purged (also once at start).
    #[arg(long, env = "ROLLCALL_RETENTION_INTERVAL", value_name = "DURATION", default_value_t = Dur(server_default().retention_interval))]
    retention_interval: Dur,
    /// Smallest session timeout a member may ask for.
    #[arg(long, env = "ROLLCALL_MIN_SESSION_TIMEOUT", value_name = "DURATION", default_value_t = Dur(core_default().min_session_timeout))]
    min_session_timeout: Dur,
    /// Largest session timeout a member may ask for.
    #[arg(long, env = "ROLLCALL_MAX_SESSION_TIMEOUT", value_name = "DURATION", default_value_t = Dur(core_default().max_session_timeout))]
    max_session_timeout: Dur,
    /// Largest progress timeout a member may ask for.
    #[arg(long, env = "ROLLCALL_MAX_PROGRESS_TIMEOUT", value_name = "DURATION", default_value_t = Dur(core_default().max_progress_timeout))]
    max_progress_timeout: Dur,
    /// Largest rebalance timeout a member may ask for.
    #[arg(long, env = "ROLLCALL_MAX_REBALANCE_TIMEOUT", value_name = "DURATION", default_value_t = Dur(core_default().max_rebalance_timeout))]
    max_rebalance_timeout: Dur,
    /// Most members in one group.
    #[arg(long, env = "ROLLCALL_MAX_MEMBERS_PER_GROUP", value_name = "N", default_value_t = core_default().max_members_per_group)]
    max_members_per_group: usize,
    /// Most partitions (over all topics) in one group; the answers about one member
    /// must fit --max-frame-size (about 130,000 partitions per MiB).
    #[arg(long, env = "ROLLCALL_MAX_PARTITIONS_PER_GROUP", value_name = "N", default_value_t = server_default().core.max_partitions_per_group)]
    max_partitions_per_group: u32,
    /// Largest commit metadata.
    #[arg(long, env = "ROLLCALL_MAX_METADATA_BYTES", value_name = "SIZE", default_value_t = Size(core_default().max_metadata_bytes))]
    max_metadata_bytes: Size,
    /// Most groups over the coordinator; a join or administrative commit that would
    /// create another is refused too_many_groups.
    #[arg(long, env = "ROLLCALL_MAX_GROUPS", value_name = "N", default_value_t = core_default().max_groups)]
    max_groups: usize,
    /// Most members over all groups (a group counts its members, or its remembered
    /// static instances if more); past it a join is refused too_many_members.
    #[arg(long, env = "ROLLCALL_MAX_MEMBERS", value_name = "N", default_value_t = core_default().max_members)]
    max_members: usize,
    /// Most partitions over all groups (a topic no member subscribes to any more
    /// counts as one); past it a join is refused too_many_partitions.
    #[arg(long, env = "ROLLCALL_MAX_PARTITIONS", value_name = "N", default_value_t = core_default().max_partitions)]
    max_partitions: u64,
    /// Most committed offsets kept for one group; a commit of another is refused
    /// too_many_offsets.
    #[arg(long, env = "ROLLCALL_MAX_OFFSETS_PER_GROUP", value_name = "N", default_value_t = core_default().max_offsets_per_group)]
    max_offsets_per_group: usize,
    /// Most commit metadata bytes kept for one group (at least --max-metadata-bytes).
    #[arg(long, env = "ROLLCALL_MAX_METADATA_BYTES_PER_GROUP", value_name = "SIZE", default_value_t = Size(core_default().max_metadata_bytes_per_group))]
    max_metadata_bytes_per_group: Size,
    /// Most committed offsets over all groups.
    #[arg(long, env = "ROLLCALL_MAX_OFFSETS", value_name = "N", default_value_t = core_default().max_offsets)]
    max_offsets: usize,
    /// Most commit metadata bytes over all groups.
    #[arg(long, env = "ROLLCALL_MAX_METADATA_BYTES_TOTAL", value_name = "SIZE", default_value_t = Size(core_default().max_metadata_bytes_total))]
    max_metadata_bytes_total: Size,
    /// Rebalance triggers closer together than this share one generation.
    #[arg(long, env = "ROLLCALL_REBALANCE_COALESCE", value_name = "DURATION", default_value_t = Dur(core_default().rebalance_coalesce))]
    rebalance_coalesce: Dur,
    /// Longest a rebalance is delayed by coalescing after its first trigger.
    #[arg(long, env = "ROLLCALL_REBALANCE_COALESCE_MAX", value_name = "DURATION", default_value_t = Dur(core_default().rebalance_coalesce_max))]
    rebalance_coalesce_max: Dur,
    /// Upper bound of the lateness that counts as a pause of the coordinator itself (a
    /// quarter of the shortest session counts already), and the grace after a pause in
    /// which nobody is expelled while queued frames are read.
    #[arg(long, env = "ROLLCALL_PAUSE_GUARD", value_name = "DURATION", default_value_t = Dur(core_default().pause_guard))]
    pause_guard: Dur,
    /// Fewest connected members in a shard for the isolation guard: when the whole
    /// server hears nothing and most of them are overdue, expulsions (for silence,
    /// progress or revocations) are held, at most one more session timeout past each
    /// deadline; 0 disables it.
    #[arg(long, env = "ROLLCALL_ISOLATION_MIN_MEMBERS", value_name = "N", default_value_t = core_default().isolation_min_members)]
    isolation_min_members: usize,
    /// Most members expelled for silence per second, over the whole server (further
    /// expiries wait their turn, at most one more session timeout); 0: no limit.
    #[arg(long, env = "ROLLCALL_MAX_EXPULSION_RATE", value_name = "PER_SECOND", default_value_t = core_default().max_expulsion_rate)]
    max_expulsion_rate: f64,
    /// Partition assignor: sticky, range or round-robin.
    #[arg(long, env = "ROLLCALL_ASSIGNOR", value_name = "NAME", default_value_t = core_default().assignor)]
    assignor: AssignorKind,
    /// Failure detector new groups judge their members' silence with: fixed (expelled
    /// after the session timeout) or adaptive (thresholds from each member's own
    /// heartbeat gaps, between --adaptive-floor and the session timeout).
    #[arg(long, env = "ROLLCALL_DETECTOR", value_name = "NAME", default_value_t = core_default().detector)]
    detector: DetectorKind,
    /// A second detector new groups run in shadow: its would-be suspicions and
    /// expulsions are logged and counted (rollcall_shadow_verdicts_total), never acted on.
    #[arg(long, env = "ROLLCALL_SHADOW_DETECTOR", value_name = "NAME")]
    shadow_detector: Option<DetectorKind>,
    /// Consecutive on-time heartbeats a suspect member needs to be alive again (and be
    /// given partitions again).
    #[arg(long, env = "ROLLCALL_RECOVER_BEATS", value_name = "N", default_value_t = core_default().detector_settings.recover_beats, value_parser = clap::value_parser!(u32).range(1..))]
    recover_beats: u32,
    /// Adaptive detector: the suspicion level (phi) at which the bulk of a member's gaps
    /// convicts it (8: about one healthy gap in 10^8 that long under a normal fit).
    #[arg(long, env = "ROLLCALL_ADAPTIVE_PHI", value_name = "PHI", default_value_t = core_default().detector_settings.phi_threshold)]
    adaptive_phi: f64,
    /// Adaptive detector: never expels for a silence shorter than this. Set it to the
    /// longest pause a healthy member must survive without having shown one before.
    #[arg(long, env = "ROLLCALL_ADAPTIVE_FLOOR", value_name = "DURATION", default_value_t = Dur(core_default().detector_settings.floor))]
    adaptive_floor: Dur,
    /// Adaptive detector: heartbeat gaps a member must have shown before they judge it;
    /// a younger member is judged by its session timeout.
    #[arg(long, env = "ROLLCALL_ADAPTIVE_MIN_HISTORY", value_name = "N", default_value_t = core_default().detector_settings.min_history)]
    adaptive_min_history: u32,
    /// Adaptive detector: in a group that has shown long gaps, a member is expelled
    /// before its session timeout only after a silence whose chance, at the 95 % upper
    /// bound of the group's fitted tail, is at most this per heartbeat gap.
    #[arg(long, env = "ROLLCALL_ADAPTIVE_EXPEL_EPSILON", value_name = "P", default_value_t = core_default().detector_settings.expel_epsilon)]
    adaptive_expel_epsilon: f64,
    /// Adaptive detector: heartbeat gaps a group must pool without a surprise (a long
    /// gap, lost beats, a member expelled for silence that beat again) before its
    /// members are judged by their own recent gaps alone.
    #[arg(long, env = "ROLLCALL_ADAPTIVE_CLEAN_GAPS", value_name = "N", default_value_t = core_default().detector_settings.clean_gaps)]
    adaptive_clean_gaps: u64,
    /// PEM file with the TLS certificate chain of the protocol listener (its own
    /// certificate first). With --tls-key, clients must connect over TLS (1.2 or 1.3).
    #[arg(long, env = "ROLLCALL_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// PEM file with the private key of --tls-cert.
    #[arg(long, env = "ROLLCALL_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// PEM file with the CA certificates that client certificates must chain to.
    #[arg(long, env = "ROLLCALL_TLS_CLIENT_CA", value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Whether clients must present a certificate: none, optional or required; by
    /// default required when --tls-client-ca is given, else none.
    #[arg(long, env = "ROLLCALL_TLS_CLIENT_AUTH", value_name = "MODE")]
    tls_client_auth: Option<ClientAuth>,
    /// How often the TLS files are checked for changes; changed files are read again
    /// and used for new connections (so is a SIGHUP), and a bad one is logged and
    /// ignored.
    #[arg(long, env = "ROLLCALL_TLS_RELOAD_INTERVAL", value_name = "DURATION", default_value_t = Dur(TlsSettings::default().reload_interval))]
    tls_reload_interval: Dur,
    /// Cluster mode: etcd endpoints, comma-separated (e.g. http://127.0.0.1:2379).
    /// The groups are then kept in etcd and shared with the cluster's other
    /// coordinators instead of in --data-dir. Needs a build with `--features cluster`.
    #[arg(
        long,
        env = "ROLLCALL_ETCD",
        value_name = "URL,...",
        value_delimiter = ','
    )]
    etcd: Vec<String>,
    /// The cluster's name (its keys live under /rollcall/NAME/ in etcd).
    #[arg(
        long,
        env = "ROLLCALL_CLUSTER",
        value_name = "NAME",
        default_value = "default"
    )]
    cluster: String,
    /// This coordinator's id in the cluster; default: its advertised address.
    #[arg(long, env = "ROLLCALL_CLUSTER_ID", value_name = "ID")]
    cluster_id: Option<String>,
    /// The address clients are sent to for this coordinator's groups (host:port);
    /// default: the address the listener bound.
    #[arg(long, env = "ROLLCALL_ADVERTISE", value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// Slots (shares of the groups) of a cluster created by this coordinator; an
    /// existing cluster keeps its own.
    #[arg(
        long,
        env = "ROLLCALL_CLUSTER_SLOTS",
        value_name = "N",
        default_value_t = 64
    )]
    cluster_slots: u32,
    /// Time-to-live of this coordinator's etcd lease: how long its slots wait after it
    /// dies before another coordinator takes them, and the longest it acts for them
    /// without renewing.
    #[arg(
        long,
        env = "ROLLCALL_ETCD_LEASE_TTL",
        value_name = "DURATION",
        default_value = "5s"
    )]
    etcd_lease_ttl: Dur,
}

impl ServeArgs {
    /// The arguments of `rollcall serve` from `argv` (the whole command line) and its
    /// matches: flags and environment over the `--config` file over defaults.
    ///
    /// The file's values are handed to clap as the flags they name, so they are parsed
    /// exactly as flags are; a value given by a flag or the environment is left alone.
    pub(super) fn layered(argv: &[OsString], matches: &ArgMatches) -> Result<Self, ConfigError> {
        let Some(path) = matches.get_one::<PathBuf>("config") else {
            return Self::from_arg_matches(matches).map_err(|e| ConfigError::usage(&e));
        };
        let shown = path.display().to_string();
        let mut from_file = Vec::new();
        for (key, text) in read_file(path)? {
            let Some(arg) = serve_command()
                .get_arguments()
                .find(|a| a.get_long() == Some(key.as_str()) && is_file_key(a))
                .cloned()
            else {
                return Err(ConfigError::UnknownOption { path: shown, key });
            };
            // Flags and the environment win; the file fills in the rest, options
            // without a default included.
            if !matches!(
                matches.value_source(arg.get_id().as_str()),
                None | Some(ValueSource::DefaultValue)
            ) {
                continue;
            }
            let flag = OsString::from(format!("--{key}={text}"));
            // Alone first, so that a bad value is blamed on the file.
            if let Err(e) = serve_command().try_get_matches_from(["serve".into(), flag.clone()]) {
                return Err(ConfigError::Value {
                    path: shown,
                    key,
                    message: first_line(&e),
                });
            }
            from_file.push(flag);
        }
        // The subcommand is the first argument after the program's name (there are no
        // global options), which may itself be called anything.
        let at = argv
            .iter()
            .skip(1)
            .position(|a| a == "serve")
            .map_or(argv.len(), |i| i + 2);
        let mut full = argv[..at].to_vec();
        full.extend(from_file);
        full.extend_from_slice(&argv[at..]);
        let all = Cli::command()
            .try_get_matches_from(full)
            .map_err(|e| ConfigError::usage(&e))?;
        let serve = all
            .subcommand_matches("serve")
            .ok_or_else(|| ConfigError::Usage("expected the serve command".into()))?;
        Self::from_arg_matches(serve).map_err(|e| ConfigError::usage(&e))
    }

    /// The server configuration these arguments describe.
    pub(super) fn into_config(self) -> Result<ServerConfig, ConfigError> {
        let core = CoreConfig {
            min_session_timeout: self.min_session_timeout.0,
            max_session_timeout: self.max_session_timeout.0,
            max_progress_timeout: self.max_progress_timeout.0,
            max_rebalance_timeout: self.max_rebalance_timeout.0,
            max_members_per_group: self.max_members_per_group,
            max_partitions_per_group: self.max_partitions_per_group,
            max_metadata_bytes: self.max_metadata_bytes.0,
            max_groups: self.max_groups,
            max_members: self.max_members,
            max_partitions: self.max_partitions,
            max_offsets_per_group: self.max_offsets_per_group,
            max_metadata_bytes_per_group: self.max_metadata_bytes_per_group.0,
            max_offsets: self.max_offsets,
            max_metadata_bytes_total: self.max_metadata_bytes_total.0,
            rebalance_coalesce: self.rebalance_coalesce.0,
            rebalance_coalesce_max: self.rebalance_coalesce_max.0,
            pause_guard: self.pause_guard.0,
            isolation_min_members: self.isolation_min_members,
            max_expulsion_rate: self.max_expulsion_rate,
            assignor: self.assignor,
            detector: self.detector,
            shadow_detector: self.shadow_detector,
            detector_settings: DetectorSettings {
                recover_beats: self.recover_beats,
                phi_threshold: self.adaptive_phi,
                floor: self.adaptive_floor.0,
                min_history: self.adaptive_min_history,
                expel_epsilon: self.adaptive_expel_epsilon,
                clean_gaps: self.adaptive_clean_gaps,
                ..core_default().detector_settings
            },
            ..CoreConfig::default()
        };
        let config = ServerConfig {
            listen: self.listen,
            advertise: self.advertise.clone(),
            metrics_addr: self.metrics_addr.0,
            store: if self.in_memory {
                StoreConfig::Memory
            } else {
                StoreConfig::Dir(self.data_dir)
            },
            shards: self.shards,
            io_threads: self.io_threads,
            max_frame_size: self.max_frame_size.0,
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            max_connections_per_principal: self.max_connections_per_principal,
            handshake_timeout: self.handshake_timeout.0,
            frame_timeout: self.frame_timeout.0,
            idle_timeout: self.idle_timeout.0,
            send_buffer: self.send_buffer,
            send_buffer_bytes: self.send_buffer_bytes.0,
            max_buffered_bytes: self.max_buffered_bytes.0,
            shutdown_timeout: self.shutdown_timeout.0,
            offsets_retention: self.offsets_retention.0,
            retention_interval: self.retention_interval.0,
            auth_file: self.auth_file,
            auth_reload_interval: self.auth_reload_interval.0,
            tls: TlsSettings {
                cert: self.tls_cert,
                key: self.tls_key,
                client_ca: self.tls_client_ca,
                client_auth: self.tls_client_auth,
                reload_interval: self.tls_reload_interval.0,
            },
            core,
            cluster: (!self.etcd.is_empty()).then_some(ClusterSettings {
                endpoints: self.etcd,
                name: self.cluster,
                id: self.cluster_id,
                slots: self.cluster_slots,
                lease_ttl: self.etcd_lease_ttl.0,
            }),
            ..ServerConfig::default()
        };
        config.validate()?;
        Ok(config)
    }
}

/// The `serve` subcommand as clap knows it.
pub(super) fn serve_command() -> clap::Command {
    Cli::command()
        .find_subcommand("serve")
        .cloned()
        .expect("the serve subcommand exists")
}

/// Whether a configuration file may set `arg`: every option of `serve` but the file's
/// own path.
fn is_file_key(arg: &clap::Arg) -> bool {
    !matches!(arg.get_id().as_str(), "config" | "help" | "version") && arg.get_long().is_some()
}

/// The keys a configuration file may hold: the long names of the serve options.
#[cfg(test)]
pub(super) fn file_keys() -> Vec<String> {
    serve_command()
        .get_arguments()
        .filter(|a| is_file_key(a))
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect()
}

/// The file's options as text, in the file's order, to be parsed like the flags.
fn read_file(path: &std::path::Path) -> Result<Vec<(String, String)>, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax {
            path: shown.clone(),
            message: e.message().lines().next().unwrap_or_default().to_owned(),
        })?;
    let mut values = Vec::new();
    for (key, value) in table {
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(ConfigError::ValueType {
                    path: shown,
                    key,
                    found: other.type_str(),
                })
            }
        };
        values.push((key, text));
    }
    Ok(values)
}
