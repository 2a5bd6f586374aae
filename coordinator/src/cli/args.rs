//! `rollcall serve`'s arguments: value types, flags with their environment variables
//! and defaults, and the layering of flags over the environment over a TOML file.

use super::*;

/// A duration option, shown and parsed like `10s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dur(Duration);

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "off" | "none" | "disabled" => Ok(Self(None)),
            addr => addr.parse().map(|a| Self(Some(a))).map_err(|_| {
                format!("invalid address '{addr}': expected IP:PORT, or off to disable")
            }),
        }
    }
}

/// The assignor, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AssignorName(AssignorKind);

impl fmt::Display for AssignorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            AssignorKind::Sticky => "sticky",
            AssignorKind::Range => "range",
            AssignorKind::RoundRobin => "round-robin",
        })
    }
}

impl FromStr for AssignorName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        AssignorKind::parse(s.trim())
            .map(Self)
            .ok_or_else(|| format!("unknown assignor '{s}': expected sticky, range or round-robin"))
    }
}

pub(super) fn default_shards() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub(super) fn core_default() -> CoreConfig {
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
        default_value = "127.0.0.1:7070"
    )]
    listen: SocketAddr,
    /// Address of the Prometheus endpoint (`GET /metrics`); `off` disables it.
    #[arg(
        long,
        env = "ROLLCALL_METRICS_ADDR",
        value_name = "ADDR|off",
        default_value = "127.0.0.1:9464"
    )]
    metrics_addr: MetricsAddr,
    /// Directory of the durable store (created if missing).
    #[arg(
        long,
        env = "ROLLCALL_DATA_DIR",
        value_name = "DIR",
        default_value = "./rollcall-data"
    )]
    data_dir: PathBuf,
    /// Keep everything in memory instead of --data-dir: nothing survives a restart.
    #[arg(long, env = "ROLLCALL_IN_MEMORY", value_name = "BOOL", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    in_memory: bool,
    /// Number of shards (tasks owning a share of the groups); default: number of CPUs.
    #[arg(long, env = "ROLLCALL_SHARDS", value_name = "N", default_value_t = default_shards())]
    shards: usize,
    /// Largest frame accepted or sent (e.g. 1MiB, 65536).
    #[arg(long, env = "ROLLCALL_MAX_FRAME_SIZE", value_name = "SIZE", default_value_t = Size(rollcall_protocol::DEFAULT_MAX_FRAME_SIZE))]
    max_frame_size: Size,
    /// Connections served at once; over it, the first request is answered
    /// too_many_connections and the connection closed.
    #[arg(
        long,
        env = "ROLLCALL_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = 10_000
    )]
    max_connections: usize,
    /// Time a new connection has to send its ApiVersions handshake.
    #[arg(long, env = "ROLLCALL_HANDSHAKE_TIMEOUT", value_name = "DURATION", default_value_t = Dur(Duration::from_secs(5)))]
    handshake_timeout: Dur,
    /// Frames queued for one connection; a client that lets more pile up is disconnected.
    #[arg(
        long,
        env = "ROLLCALL_SEND_BUFFER",
        value_name = "FRAMES",
        default_value_t = 4096
    )]
    send_buffer: usize,
    /// Time a graceful shutdown may take.
    #[arg(long, env = "ROLLCALL_SHUTDOWN_TIMEOUT", value_name = "DURATION", default_value_t = Dur(Duration::from_secs(10)))]
    shutdown_timeout: Dur,
    /// Committed offsets of groups empty for longer than this are deleted.
    #[arg(long, env = "ROLLCALL_OFFSETS_RETENTION", value_name = "DURATION", default_value_t = Dur(Duration::from_secs(7 * 86_400)))]
    offsets_retention: Dur,
    /// How often expired offsets are purged (also once at start).
    #[arg(long, env = "ROLLCALL_RETENTION_INTERVAL", value_name = "DURATION", default_value_t = Dur(Duration::from_secs(3600)))]
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
    /// Most partitions (over all topics) in one group.
    #[arg(long, env = "ROLLCALL_MAX_PARTITIONS_PER_GROUP", value_name = "N", default_value_t = core_default().max_partitions_per_group)]
    max_partitions_per_group: u32,
    /// Largest commit metadata.
    #[arg(long, env = "ROLLCALL_MAX_METADATA_BYTES", value_name = "SIZE", default_value_t = Size(core_default().max_metadata_bytes))]
    max_metadata_bytes: Size,
    /// Rebalance triggers closer together than this share one generation.
    #[arg(long, env = "ROLLCALL_REBALANCE_COALESCE", value_name = "DURATION", default_value_t = Dur(core_default().rebalance_coalesce))]
    rebalance_coalesce: Dur,
    /// Longest a rebalance is delayed by coalescing after its first trigger.
    #[arg(long, env = "ROLLCALL_REBALANCE_COALESCE_MAX", value_name = "DURATION", default_value_t = Dur(core_default().rebalance_coalesce_max))]
    rebalance_coalesce_max: Dur,
    /// Upper bound of the lateness that counts as a pause of the coordinator itself (a
    /// quarter of the shortest session counts already), and the grace after a pause in
    /// which nobody is expelled for silence while queued frames are read.
    #[arg(long, env = "ROLLCALL_PAUSE_GUARD", value_name = "DURATION", default_value_t = Dur(core_default().pause_guard))]
    pause_guard: Dur,
    /// Fewest connected members in a shard for the isolation guard: when the whole
    /// server hears nothing and most of them are overdue, expulsions for silence are
    /// held (at most one more session timeout); 0 disables it.
    #[arg(long, env = "ROLLCALL_ISOLATION_MIN_MEMBERS", value_name = "N", default_value_t = core_default().isolation_min_members)]
    isolation_min_members: usize,
    /// Partition assignor: sticky, range or round-robin.
    #[arg(long, env = "ROLLCALL_ASSIGNOR", value_name = "NAME", default_value_t = AssignorName(core_default().assignor))]
    assignor: AssignorName,
}

/// Keys a configuration file may hold: the long names of the serve options.
pub(super) const FILE_KEYS: &[&str] = &[
    "listen",
    "metrics-addr",
    "data-dir",
    "in-memory",
    "shards",
    "max-frame-size",
    "max-connections",
    "handshake-timeout",
    "send-buffer",
    "shutdown-timeout",
    "offsets-retention",
    "retention-interval",
    "min-session-timeout",
    "max-session-timeout",
    "max-progress-timeout",
    "max-rebalance-timeout",
    "max-members-per-group",
    "max-partitions-per-group",
    "max-metadata-bytes",
    "rebalance-coalesce",
    "rebalance-coalesce-max",
    "pause-guard",
    "isolation-min-members",
    "assignor",
];

/// The options of a configuration file, as text to parse like the flags.
#[derive(Debug, Default)]
pub(super) struct FileValues {
    path: String,
    values: std::collections::HashMap<String, String>,
}

impl FileValues {
    fn load(path: &std::path::Path) -> Result<Self, String> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {shown}: {e}"))?;
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let first = e.message().lines().next().unwrap_or_default().to_owned();
            format!("config file {shown} is not valid TOML: {first}")
        })?;
        let mut values = std::collections::HashMap::new();
        for (key, value) in table {
            if !FILE_KEYS.contains(&key.as_str()) {
                return Err(format!(
                    "config file {shown}: unknown option '{key}' (options are the long flag names of `rollcall serve`, e.g. listen, handshake-timeout)"
                ));
            }
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                other => {
                    return Err(format!(
                        "config file {shown}: option '{key}' must be a string, integer or boolean, not {}",
                        other.type_str()
                    ))
                }
            };
            values.insert(key, text);
        }
        Ok(Self {
            path: shown,
            values,
        })
    }

    /// The value of option `id` (a field name): the command line's or environment's if
    /// it was given there, else the file's, else the default.
    fn pick<T>(&self, matches: &ArgMatches, id: &str, given: T) -> Result<T, String>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        if matches.value_source(id) != Some(ValueSource::DefaultValue) {
            return Ok(given);
        }
        let key = id.replace('_', "-");
        match self.values.get(&key) {
            None => Ok(given),
            Some(text) => text
                .parse()
                .map_err(|e| format!("config file {}: option '{key}': {e}", self.path)),
        }
    }
}

impl ServeArgs {
    /// The server configuration: flags and environment over the file over defaults.
    pub(super) fn into_config(self, matches: &ArgMatches) -> Result<ServerConfig, String> {
        let file = match &self.config {
            Some(path) => FileValues::load(path)?,
            None => FileValues::default(),
        };
        let m = matches;
        let core = CoreConfig {
            min_session_timeout: file
                .pick(m, "min_session_timeout", self.min_session_timeout)?
                .0,
            max_session_timeout: file
                .pick(m, "max_session_timeout", self.max_session_timeout)?
                .0,
            max_progress_timeout: file
                .pick(m, "max_progress_timeout", self.max_progress_timeout)?
                .0,
            max_rebalance_timeout: file
                .pick(m, "max_rebalance_timeout", self.max_rebalance_timeout)?
                .0,
            max_members_per_group: file.pick(
                m,
                "max_members_per_group",
                self.max_members_per_group,
            )?,
            max_partitions_per_group: file.pick(
                m,
                "max_partitions_per_group",
                self.max_partitions_per_group,
            )?,
            max_metadata_bytes: file
                .pick(m, "max_metadata_bytes", self.max_metadata_bytes)?
                .0,
            rebalance_coalesce: file
                .pick(m, "rebalance_coalesce", self.rebalance_coalesce)?
                .0,
            rebalance_coalesce_max: file
                .pick(m, "rebalance_coalesce_max", self.rebalance_coalesce_max)?
                .0,
            pause_guard: file.pick(m, "pause_guard", self.pause_guard)?.0,
            isolation_min_members: file.pick(
                m,
                "isolation_min_members",
                self.isolation_min_members,
            )?,
            assignor: file.pick(m, "assignor", self.assignor)?.0,
            ..CoreConfig::default()
        };
        let in_memory = file.pick(m, "in_memory", self.in_memory)?;
        let data_dir: PathBuf = file.pick(m, "data_dir", self.data_dir)?;
        let config = ServerConfig {
            listen: file.pick(m, "listen", self.listen)?,
            metrics_addr: file.pick(m, "metrics_addr", self.metrics_addr)?.0,
            store: if in_memory {
                StoreConfig::Memory
            } else {
                StoreConfig::Dir(data_dir)
            },
            shards: file.pick(m, "shards", self.shards)?,
            max_frame_size: file.pick(m, "max_frame_size", self.max_frame_size)?.0,
            max_connections: file.pick(m, "max_connections", self.max_connections)?,
            handshake_timeout: file.pick(m, "handshake_timeout", self.handshake_timeout)?.0,
            send_buffer: file.pick(m, "send_buffer", self.send_buffer)?,
            shutdown_timeout: file.pick(m, "shutdown_timeout", self.shutdown_timeout)?.0,
            offsets_retention: file.pick(m, "offsets_retention", self.offsets_retention)?.0,
            retention_interval: file
                .pick(m, "retention_interval", self.retention_interval)?
                .0,
            core,
            ..ServerConfig::default()
        };
        config.validate()?;
        Ok(config)
    }
}
