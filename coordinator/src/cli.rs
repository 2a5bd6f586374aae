//! The `rollcall` command line: `serve` runs the coordinator; `groups`, `describe` and
//! `offsets` ask a running one.
//!
//! Exit codes:
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success (for `serve`: a clean shutdown) |
//! | 1 | runtime error (coordinator unreachable, unknown group, failure while serving, shutdown timed out) |
//! | 2 | bad configuration or usage |
//! | 3 | the store cannot be used (cannot be opened, or is corrupt) |

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use futures_util::{SinkExt, StreamExt};
use rollcall_protocol::{
    supported_versions, ApiVersionsRequest, Body, Codec, DescribeGroupRequest,
    DescribeGroupResponse, ErrorCode, FetchOffsetsRequest, FetchOffsetsResponse, Frame,
    ListGroupsResponse, Request, Response, TopicPartitions,
};
use serde::Serialize;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use crate::core::{AssignorKind, CoreConfig};
use crate::server::{
    format_duration, parse_duration, parse_size, Server, ServerConfig, ServerError, StoreConfig,
};

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: a runtime error.
pub const EXIT_RUNTIME: u8 = 1;
/// Exit code: invalid configuration or usage.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code: the store cannot be used.
pub const EXIT_STORE: u8 = 3;

/// rollcall: a consumer-group coordinator.
#[derive(Debug, Parser)]
#[command(name = "rollcall", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the coordinator.
    ///
    /// Every option can also be set by its environment variable or in a TOML file
    /// given by --config (keys are the option names, e.g. `handshake-timeout = "5s"`).
    /// Precedence: flags, then environment, then file, then defaults. Durations take a
    /// unit: 500ms, 10s, 5m, 2h, 7d. Exit codes: 0 clean shutdown, 1 runtime error,
    /// 2 bad configuration, 3 store unusable.
    Serve(Box<ServeArgs>),
    /// List the coordinator's groups.
    Groups(AdminArgs),
    /// Describe a group: its state and every member's liveness and partitions.
    Describe {
        /// The group.
        group: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show a group's committed offsets.
    Offsets {
        /// The group.
        group: String,
        /// Only these topics (repeatable); every topic by default.
        #[arg(long = "topic", value_name = "TOPIC")]
        topics: Vec<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Debug, Args)]
struct AdminArgs {
    /// The coordinator to ask.
    #[arg(long, env = "ROLLCALL_ADDR", default_value = "127.0.0.1:7070")]
    addr: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Give up on the coordinator after this long.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
}

/// A duration option, shown and parsed like `10s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dur(Duration);

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
struct Size(usize);

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
struct MetricsAddr(Option<SocketAddr>);

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
struct AssignorName(AssignorKind);

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

fn default_shards() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn core_default() -> CoreConfig {
    CoreConfig::default()
}

#[derive(Debug, Args)]
struct ServeArgs {
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
const FILE_KEYS: &[&str] = &[
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
struct FileValues {
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
    fn into_config(self, matches: &ArgMatches) -> Result<ServerConfig, String> {
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

/// Runs the command line with the process's arguments.
pub fn main() -> ExitCode {
    run(std::env::args_os())
}

/// Runs the command line with `args` (the first is the program name).
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = match Cli::command().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // One line: clap's first line names the option and what is wrong with it.
            let rendered = e.render().to_string();
            let line = rendered.lines().next().unwrap_or("invalid arguments");
            eprintln!("rollcall: {}", line.trim_start_matches("error: "));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!(
                "rollcall: {}",
                e.to_string().lines().next().unwrap_or_default()
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match cli.command {
        Command::Serve(args) => {
            let sub = matches.subcommand_matches("serve").expect("serve matched");
            serve(*args, sub)
        }
        Command::Groups(admin) => admin_command(&admin, Admin::Groups),
        Command::Describe { group, admin } => admin_command(&admin, Admin::Describe(group)),
        Command::Offsets {
            group,
            topics,
            admin,
        } => admin_command(&admin, Admin::Offsets(group, topics)),
    }
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

fn serve(args: ServeArgs, matches: &ArgMatches) -> ExitCode {
    let config = match args.into_config(matches) {
        Ok(c) => c,
        Err(message) => {
            eprintln!("rollcall: invalid configuration: {message}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    init_logging("info");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rollcall")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rollcall: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    let code = runtime.block_on(async move {
        let server = match Server::bind(config).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rollcall: {e}");
                return match e {
                    ServerError::Config(_) => EXIT_CONFIG,
                    ServerError::Store(_) => EXIT_STORE,
                    _ => EXIT_RUNTIME,
                };
            }
        };
        let shutdown = CancellationToken::new();
        tokio::spawn(watch_signals(shutdown.clone()));
        match server.run(shutdown).await {
            Ok(()) => EXIT_OK,
            Err(e) => {
                eprintln!("rollcall: {e}");
                EXIT_RUNTIME
            }
        }
    });
    // Do not wait for stray tasks (e.g. lingering connections) past the shutdown.
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}

/// Cancels `shutdown` on SIGINT or SIGTERM; a second signal exits at once.
async fn watch_signals(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        for round in 0..2 {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            if round == 0 {
                tracing::info!(signal = name, "shutting down gracefully");
                shutdown.cancel();
            } else {
                tracing::warn!(signal = name, "second signal: exiting at once");
                std::process::exit(i32::from(EXIT_RUNTIME));
            }
        }
    }
    #[cfg(not(unix))]
    {
        if tokio::signal::ctrl_c().await.is_ok() {
            shutdown.cancel();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Admin commands
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
enum Admin {
    Groups,
    Describe(String),
    Offsets(String, Vec<String>),
}

fn admin_command(args: &AdminArgs, admin: Admin) -> ExitCode {
    init_logging("warn");
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rollcall: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    let outcome = runtime.block_on(async {
        tokio::time::timeout(args.timeout, admin_run(args, admin))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no answer from the coordinator at {} within {}",
                    args.addr,
                    format_duration(args.timeout)
                ))
            })
    });
    match outcome {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("rollcall: {message}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

async fn admin_run(args: &AdminArgs, admin: Admin) -> Result<String, String> {
    let (request, group) = match &admin {
        Admin::Groups => (Request::ListGroups, None),
        Admin::Describe(group) => (
            Request::DescribeGroup(DescribeGroupRequest {
                group: group.clone(),
            }),
            Some(group.as_str()),
        ),
        Admin::Offsets(group, topics) => (
            Request::FetchOffsets(FetchOffsetsRequest {
                group: group.clone(),
                topics: topics.clone(),
            }),
            Some(group.as_str()),
        ),
    };
    let response = admin_request(&args.addr, request).await?;
    let response = match response {
        Response::Error(e) if e.code == ErrorCode::UnknownGroup => {
            return Err(format!("group '{}' not found", group.unwrap_or_default()));
        }
        Response::Error(e) => {
            return Err(format!(
                "the coordinator refused: {} ({})",
                e.message, e.code
            ));
        }
        other => other,
    };
    match (admin, response) {
        (Admin::Groups, Response::ListGroups(r)) => Ok(render_groups(&r, args.json)),
        (Admin::Describe(_), Response::DescribeGroup(r)) => Ok(render_describe(&r, args.json)),
        (Admin::Offsets(group, _), Response::FetchOffsets(r)) => {
            Ok(render_offsets(&group, &r, args.json))
        }
        (_, other) => Err(format!("unexpected answer from the coordinator: {other:?}")),
    }
}

/// Connects, handshakes, sends `request` and returns its answer.
async fn admin_request(addr: &str, request: Request) -> Result<Response, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot connect to the coordinator at {addr}: {e}"))?;
    let mut framed = Framed::new(stream, Codec::default());
    let lost =
        |e: &dyn fmt::Display| format!("connection to the coordinator at {addr} failed: {e}");
    let hello = Request::ApiVersions(ApiVersionsRequest {
        client_software: concat!("rollcall-cli/", env!("CARGO_PKG_VERSION")).to_owned(),
        versions: supported_versions(),
    });
    for (correlation_id, request) in [(1, hello), (2, request)] {
        framed
            .send(Frame::request(correlation_id, request))
            .await
            .map_err(|e| lost(&e))?;
        let response = loop {
            match framed.next().await {
                None => return Err(lost(&"closed by the coordinator")),
                Some(Err(e)) => return Err(lost(&e)),
                Some(Ok(Frame {
                    correlation_id: id,
                    body: Body::Response(r),
                })) if id == correlation_id => break r,
                Some(Ok(_)) => {}
            }
        };
        if correlation_id == 2 {
            return Ok(response);
        }
        if let Response::Error(e) = response {
            return Err(format!("handshake refused: {} ({})", e.message, e.code));
        }
    }
    unreachable!("the loop returns on its second request")
}

#[derive(Debug, Serialize)]
struct GroupsJson {
    groups: Vec<GroupJson>,
}

#[derive(Debug, Serialize)]
struct GroupJson {
    group: String,
    state: &'static str,
    generation: u32,
    members: u32,
}

#[derive(Debug, Serialize)]
struct DescribeJson {
    group: String,
    state: &'static str,
    generation: u32,
    assignor: String,
    members: Vec<MemberJson>,
}

#[derive(Debug, Serialize)]
struct MemberJson {
    member_id: String,
    instance_id: Option<String>,
    client_id: String,
    liveness: &'static str,
    since_heartbeat_ms: u64,
    since_progress_ms: u64,
    owned: Vec<TopicJson>,
    pending_revoke: Vec<TopicJson>,
    pending_grant: Vec<TopicJson>,
}

#[derive(Debug, Serialize)]
struct TopicJson {
    topic: String,
    partitions: Vec<u32>,
}

#[derive(Debug, Serialize)]
struct OffsetsJson {
    group: String,
    offsets: Vec<OffsetJson>,
}

#[derive(Debug, Serialize)]
struct OffsetJson {
    topic: String,
    partition: u32,
    offset: i64,
    metadata: String,
}

fn topics_json(tps: &[TopicPartitions]) -> Vec<TopicJson> {
    tps.iter()
        .map(|tp| TopicJson {
            topic: tp.topic.clone(),
            partitions: tp.partitions.clone(),
        })
        .collect()
}

fn to_json<T: Serialize>(value: &T) -> String {
    let mut text =
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    text.push('\n');
    text
}

fn render_groups(r: &ListGroupsResponse, json: bool) -> String {
    if json {
        return to_json(&GroupsJson {
            groups: r
                .groups
                .iter()
                .map(|g| GroupJson {
                    group: g.group.clone(),
                    state: g.state.as_str(),
                    generation: g.generation,
                    members: g.members,
                })
                .collect(),
        });
    }
    if r.groups.is_empty() {
        return "no groups\n".into();
    }
    let rows = r
        .groups
        .iter()
        .map(|g| {
            vec![
                g.group.clone(),
                g.state.as_str().to_owned(),
                g.generation.to_string(),
                g.members.to_string(),
            ]
        })
        .collect::<Vec<_>>();
    table(&["GROUP", "STATE", "GENERATION", "MEMBERS"], &rows)
}

fn render_describe(r: &DescribeGroupResponse, json: bool) -> String {
    if json {
        return to_json(&DescribeJson {
            group: r.group.clone(),
            state: r.state.as_str(),
            generation: r.generation,
            assignor: r.assignor.clone(),
            members: r
                .members
                .iter()
                .map(|m| MemberJson {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    liveness: m.liveness.as_str(),
                    since_heartbeat_ms: m.since_heartbeat_ms,
                    since_progress_ms: m.since_progress_ms,
                    owned: topics_json(&m.owned),
                    pending_revoke: topics_json(&m.pending_revoke),
                    pending_grant: topics_json(&m.pending_grant),
                })
                .collect(),
        });
    }
    let mut out = format!(
        "group:      {}\nstate:      {}\ngeneration: {}\nassignor:   {}\nmembers:    {}\n",
        r.group,
        r.state.as_str(),
        r.generation,
        r.assignor,
        r.members.len()
    );
    if r.members.is_empty() {
        return out;
    }
    out.push('\n');
    let rows = r
        .members
        .iter()
        .map(|m| {
            vec![
                m.member_id.clone(),
                m.instance_id.clone().unwrap_or_else(|| "-".into()),
                if m.client_id.is_empty() {
                    "-".into()
                } else {
                    m.client_id.clone()
                },
                m.liveness.as_str().to_owned(),
                format_ago(m.since_heartbeat_ms),
                format_ago(m.since_progress_ms),
                compact_partitions(&m.owned),
                compact_partitions(&m.pending_revoke),
                compact_partitions(&m.pending_grant),
            ]
        })
        .collect::<Vec<_>>();
    out.push_str(&table(
        &[
            "MEMBER",
            "INSTANCE",
            "CLIENT",
            "LIVENESS",
            "HEARTBEAT",
            "PROGRESS",
            "OWNED",
            "REVOKING",
            "GRANTING",
        ],
        &rows,
    ));
    out
}

fn render_offsets(group: &str, r: &FetchOffsetsResponse, json: bool) -> String {
    if json {
        return to_json(&OffsetsJson {
            group: group.to_owned(),
            offsets: r
                .offsets
                .iter()
                .map(|o| OffsetJson {
                    topic: o.topic.clone(),
                    partition: o.partition,
                    offset: o.offset,
                    metadata: o.metadata.clone(),
                })
                .collect(),
        });
    }
    if r.offsets.is_empty() {
        return format!("no committed offsets for group '{group}'\n");
    }
    let rows = r
        .offsets
        .iter()
        .map(|o| {
            vec![
                o.topic.clone(),
                o.partition.to_string(),
                o.offset.to_string(),
                o.metadata.clone(),
            ]
        })
        .collect::<Vec<_>>();
    table(&["TOPIC", "PARTITION", "OFFSET", "METADATA"], &rows)
}

/// Left-aligned columns separated by two spaces; no trailing spaces.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            if i + 1 < row.len() {
                line.extend(std::iter::repeat(' ').take(width - cell.chars().count()));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `orders[0-4,7] payments[1]`, or `-` for none.
pub fn compact_partitions(tps: &[TopicPartitions]) -> String {
    let parts: Vec<String> = tps
        .iter()
        .filter(|tp| !tp.partitions.is_empty())
        .map(|tp| {
            let sorted: BTreeSet<u32> = tp.partitions.iter().copied().collect();
            let mut ranges: Vec<String> = Vec::new();
            let mut iter = sorted.into_iter().peekable();
            while let Some(start) = iter.next() {
                let mut end = start;
                while iter.peek() == Some(&(end + 1)) {
                    end += 1;
                    iter.next();
                }
                ranges.push(if start == end {
                    start.to_string()
                } else {
                    format!("{start}-{end}")
                });
            }
            format!("{}[{}]", tp.topic, ranges.join(","))
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

/// `350ms`, `4.2s`, `3m05s`, `2h10m`.
fn format_ago(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partitions: &[u32]) -> TopicPartitions {
        TopicPartitions {
            topic: topic.into(),
            partitions: partitions.to_vec(),
        }
    }

    #[test]
    fn partitions_are_compact() {
        assert_eq!(
            compact_partitions(&[tp("orders", &[0, 1, 2, 3, 4, 7]), tp("pay", &[1])]),
            "orders[0-4,7] pay[1]"
        );
        assert_eq!(
            compact_partitions(&[tp("x", &[5, 3, 4, 9, 10])]),
            "x[3-5,9-10]"
        );
        assert_eq!(compact_partitions(&[]), "-");
        assert_eq!(compact_partitions(&[tp("x", &[])]), "-");
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(format_ago(350), "350ms");
        assert_eq!(format_ago(4_200), "4.2s");
        assert_eq!(format_ago(185_000), "3m05s");
        assert_eq!(format_ago(7_800_000), "2h10m");
    }

    #[test]
    fn tables_align() {
        let t = table(&["A", "BB"], &[vec!["long".into(), "x".into()]]);
        assert_eq!(t, "A     BB\nlong  x\n");
    }

    #[test]
    fn help_names_every_option() {
        let mut cmd = Cli::command();
        let serve = cmd.find_subcommand_mut("serve").unwrap();
        let help = serve.render_long_help().to_string();
        for key in FILE_KEYS {
            assert!(
                help.contains(&format!("--{key}")),
                "{key} missing from help"
            );
        }
        assert!(help.contains("ROLLCALL_LISTEN"));
        assert!(help.contains("[default: 127.0.0.1:7070]"));
        assert!(help.contains("[default: 7d]"));
        assert!(help.contains("[default: 1MiB]"));
    }

    fn config_of(args: &[&str]) -> Result<ServerConfig, String> {
        let matches = Cli::command()
            .try_get_matches_from(args)
            .map_err(|e| e.to_string())?;
        let sub = matches.subcommand_matches("serve").unwrap();
        let serve = ServeArgs::from_arg_matches(sub).map_err(|e| e.to_string())?;
        serve.into_config(sub)
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("rollcall-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rollcall.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:9999\"\nhandshake-timeout = \"2s\"\nshards = 3\nmetrics-addr = \"off\"\nmax-frame-size = \"64KiB\"\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let c = config_of(&["rollcall", "serve", "--config", path, "--shards", "5"]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:9999".parse().unwrap());
        assert_eq!(c.handshake_timeout, Duration::from_secs(2));
        assert_eq!(c.shards, 5);
        assert_eq!(c.metrics_addr, None);
        assert_eq!(c.max_frame_size, 64 << 10);
        assert_eq!(c.send_buffer, 4096);

        std::fs::write(&file, "bogus = 1\n").unwrap();
        let e = config_of(&["rollcall", "serve", "--config", path]).unwrap_err();
        assert!(e.contains("unknown option 'bogus'"), "{e}");
        std::fs::write(&file, "handshake-timeout = \"soon\"\n").unwrap();
        let e = config_of(&["rollcall", "serve", "--config", path]).unwrap_err();
        assert!(e.contains("handshake-timeout"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn inconsistent_values_are_rejected() {
        let e = config_of(&[
            "rollcall",
            "serve",
            "--min-session-timeout",
            "10m",
            "--max-session-timeout",
            "1m",
        ])
        .unwrap_err();
        assert!(e.contains("min-session-timeout"), "{e}");
        assert!(config_of(&["rollcall", "serve", "--assignor", "best"]).is_err());
        assert!(config_of(&["rollcall", "serve", "--shards", "0"]).is_err());
    }
}
