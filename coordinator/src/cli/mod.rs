//! The `rollcall` command line: `serve` runs the coordinator; `groups`, `describe`,
//! `offsets`, `drain`, `undrain` and `config` ask a running one.
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
use rollcall_client::raw::{ConnectOptions, Connection};
use rollcall_client::{ConnectError, TlsConfig};
use rollcall_protocol::{
    AlterGroupConfigRequest, ApiKey, DescribeGroupRequest, DescribeGroupResponse, DrainRequest,
    DrainResponse, ErrorCode, FetchOffsetsRequest, FetchOffsetsResponse, FindCoordinatorRequest,
    GroupOperator, GroupSettings, ListGroupsRequest, ListGroupsResponse, MemberDetection,
    OffsetCursor, Page, Request, Response, TopicPartitions, TraceGroupRequest,
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::core::{AssignorKind, Balance, CoreConfig, DetectorKind, DetectorSettings};
use crate::server::{
    format_duration, parse_duration, parse_size, ClientAuth, ClusterSettings, InvalidConfig,
    ParseValueError, Server, ServerConfig, ServerError, StoreConfig, TlsSettings,
};

mod admin;
mod args;
mod cluster;
mod groups;
mod render;
mod serve;
mod trace;

use admin::*;
use args::*;
use cluster::*;
use groups::*;
use serve::*;
use trace::*;

pub use render::compact_partitions;
use render::*;

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
    #[command(flatten)]
    Admin(AdminCommand),
    /// Show a cluster's coordinators, which owns each slot, its groups per slot and how
    /// long each slot took to load, as etcd holds them (cluster mode, `serve --etcd`).
    /// Exit codes: 0 shown, 1 etcd unreachable or no such cluster, 2 built without
    /// cluster support.
    Cluster(ClusterArgs),
    /// Record a group's heartbeat arrivals (the coordinator's clock) as CSV, for
    /// `rollcall-bench detector`.
    Trace(TraceArgs),
    /// Read a password on standard input and print its SCRAM-SHA-256 credential, for a
    /// user's entry in the auth file (`--auth-file`). The password is not stored.
    ///
    /// The password is the first line of standard input without its line end: a
    /// trailing newline (or carriage return and newline) is dropped, so `echo pw` and
    /// `echo -n pw` give the same credential, and a password cannot end with one (a
    /// note on standard error says when one was dropped). Like the clients, it prepares
    /// the password with SASLprep (RFC 4013). The credential is
    /// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, base64 each (see
    /// docs/PROTOCOL.md, section 5.2).
    HashPassword(HashPasswordArgs),
}

#[derive(Debug, Args)]
struct HashPasswordArgs {
    /// PBKDF2 iterations: more makes each guess at a stolen credential slower (and each
    /// client login too).
    #[arg(long, default_value_t = rollcall_protocol::scram::DEFAULT_ITERATIONS)]
    iterations: u32,
}

/// `rollcall hash-password`: one line of standard input (without its line end) is the
/// password.
fn hash_password(args: HashPasswordArgs) -> ExitCode {
    use std::io::{BufRead, IsTerminal};
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("password (shown as typed; pipe it in to hide it): ");
    }
    let mut line = String::new();
    if let Err(e) = stdin.lock().read_line(&mut line) {
        eprintln!("rollcall: cannot read the password: {e}");
        return ExitCode::from(EXIT_RUNTIME);
    }
    let password = line.trim_end_matches(['\n', '\r']);
    if password.len() != line.len() {
        eprintln!("rollcall: the line end after the password is not part of it");
    }
    if password.is_empty() {
        eprintln!("rollcall: the password is empty");
        return ExitCode::from(EXIT_CONFIG);
    }
    match rollcall_protocol::scram::StoredCredential::generate(password, args.iterations) {
        Ok(credential) => {
            println!("{credential}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rollcall: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
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
    let argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let matches = match Cli::command().try_get_matches_from(&argv) {
        Ok(m) => m,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            eprintln!("rollcall: {}", first_line(&e));
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
        Command::Serve(_) => {
            let sub = matches.subcommand_matches("serve").expect("serve matched");
            serve(&argv, sub)
        }
        Command::Admin(command) => admin_command(command),
        Command::Cluster(args) => cluster_command(args),
        Command::Trace(args) => trace_command(args),
        Command::HashPassword(args) => hash_password(args),
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
        for key in file_keys() {
            assert!(
                help.contains(&format!("--{key}")),
                "{key} missing from help"
            );
        }
        assert!(help.contains("ROLLCALL_LISTEN"));
        assert!(help.contains("[default: 127.0.0.1:7070]"));
        assert!(help.contains("[default: 7d]"));
        assert!(help.contains("[default: 1MiB]"));
        assert!(file_keys().contains(&"detector".to_owned()));
        assert!(!file_keys().contains(&"config".to_owned()));
    }

    fn config_of(args: &[&str]) -> Result<ServerConfig, String> {
        let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        let matches = Cli::command()
            .try_get_matches_from(&argv)
            .map_err(|e| e.to_string())?;
        let sub = matches.subcommand_matches("serve").unwrap();
        ServeArgs::layered(&argv, sub)
            .and_then(ServeArgs::into_config)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("rollcall-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rollcall.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:9999\"\nhandshake-timeout = \"2s\"\nshards = 3\nmetrics-addr = \"off\"\nmax-frame-size = \"64KiB\"\nmax-partitions-per-group = 7000\nframe-timeout = \"2s\"\nmax-groups = 500\nmax-metadata-bytes-total = \"8MiB\"\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let c = config_of(&["rollcall", "serve", "--config", path, "--shards", "5"]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:9999".parse().unwrap());
        assert_eq!(c.handshake_timeout, Duration::from_secs(2));
        assert_eq!(c.shards, 5);
        assert_eq!(c.metrics_addr, None);
        assert_eq!(c.max_frame_size, 64 << 10);
        assert_eq!(c.core.max_partitions_per_group, 7000);
        assert_eq!(c.frame_timeout, Duration::from_secs(2));
        assert_eq!(c.send_buffer, 4096);
        assert_eq!(c.send_buffer_bytes, 4 << 20);
        assert_eq!(c.core.max_groups, 500);
        assert_eq!(c.core.max_metadata_bytes_total, 8 << 20);
        assert_eq!(c.core.max_members, CoreConfig::default().max_members);

        std::fs::write(
            &file,
            "assignor = \"range\"\ndetector = \"fixed\"\nin-memory = true\nsend-buffer = 64\n",
        )
        .unwrap();
        let c = config_of(&["rollcall", "serve", "--config", path, "--send-buffer=32"]).unwrap();
        assert_eq!(c.core.assignor, AssignorKind::Range);
        assert_eq!(c.core.detector, DetectorKind::Fixed);
        assert!(matches!(c.store, StoreConfig::Memory));
        assert_eq!(c.send_buffer, 32);

        std::fs::write(&file, "config = \"other.toml\"\n").unwrap();
        let e = config_of(&["rollcall", "serve", "--config", path]).unwrap_err();
        assert!(e.contains("unknown option 'config'"), "{e}");
        std::fs::write(&file, "assignor = \"best\"\n").unwrap();
        let e = config_of(&["rollcall", "serve", "--config", path]).unwrap_err();
        assert!(e.contains("option 'assignor'"), "{e}");
        assert!(e.contains("sticky, range, round-robin"), "{e}");
        std::fs::write(&file, "shards = [1]\n").unwrap();
        let e = config_of(&["rollcall", "serve", "--config", path]).unwrap_err();
        assert!(e.contains("must be a string, integer or boolean"), "{e}");
        std::fs::write(&file, "bogus = 1\n").unwrap();
        let e = config_of(&["rollcall", "serve", "--config", path]).unwrap_err();
        assert!(e.contains("unknown option 'bogus'"), "{e}");
        std::fs::write(&file, "handshake-timeout = \"soon\"\n").unwrap();
        let e = config_of(&["rollcall", "serve", "--config", path]).unwrap_err();
        assert!(e.contains("handshake-timeout"), "{e}");
        assert!(e.contains("invalid duration 'soon'"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_adaptive_expulsion_budget_comes_from_flags_and_is_checked() {
        let c = config_of(&["rollcall", "serve"]).unwrap();
        let d = DetectorSettings::default();
        assert_eq!(c.core.detector_settings.expel_epsilon, d.expel_epsilon);
        assert_eq!(c.core.detector_settings.clean_gaps, d.clean_gaps);
        let c = config_of(&[
            "rollcall",
            "serve",
            "--adaptive-expel-epsilon=1e-9",
            "--adaptive-clean-gaps=5000",
        ])
        .unwrap();
        assert_eq!(c.core.detector_settings.expel_epsilon, 1e-9);
        assert_eq!(c.core.detector_settings.clean_gaps, 5000);
        for bad in ["0", "1", "-1e-6", "NaN"] {
            let flag = format!("--adaptive-expel-epsilon={bad}");
            let e = config_of(&["rollcall", "serve", &flag]).unwrap_err();
            assert!(e.contains("adaptive-expel-epsilon"), "{bad}: {e}");
        }
    }

    #[test]
    fn tls_options_come_from_flags_and_the_file() {
        let dir = std::env::temp_dir().join(format!("rollcall-cli-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rollcall.toml");
        std::fs::write(
            &file,
            "tls-cert = \"server.pem\"\ntls-key = \"server-key.pem\"\ntls-client-ca = \"clients.pem\"\ntls-client-auth = \"optional\"\ntls-reload-interval = \"30s\"\nshadow-detector = \"adaptive\"\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let c = config_of(&["rollcall", "serve", "--config", path]).unwrap();
        assert_eq!(c.tls.cert, Some(PathBuf::from("server.pem")));
        assert_eq!(c.tls.key, Some(PathBuf::from("server-key.pem")));
        assert_eq!(c.tls.client_ca, Some(PathBuf::from("clients.pem")));
        assert_eq!(c.tls.client_auth, Some(ClientAuth::Optional));
        assert_eq!(c.tls.reload_interval, Duration::from_secs(30));
        // Options without a default are taken from the file too.
        assert_eq!(c.core.shadow_detector, Some(DetectorKind::Adaptive));
        // A flag wins over the file.
        let c = config_of(&[
            "rollcall",
            "serve",
            "--config",
            path,
            "--tls-cert",
            "other.pem",
        ])
        .unwrap();
        assert_eq!(c.tls.cert, Some(PathBuf::from("other.pem")));
        std::fs::remove_dir_all(&dir).unwrap();

        let c = config_of(&["rollcall", "serve"]).unwrap();
        assert!(!c.tls.enabled());
        assert_eq!(c.tls.reload_interval, Duration::from_secs(10));
        let e = config_of(&["rollcall", "serve", "--tls-cert", "server.pem"]).unwrap_err();
        assert!(e.contains("tls-key must be given with tls-cert"), "{e}");
        let e = config_of(&["rollcall", "serve", "--tls-client-ca", "clients.pem"]).unwrap_err();
        assert!(
            e.contains("tls-client-ca needs tls-cert and tls-key"),
            "{e}"
        );
        let e = config_of(&["rollcall", "serve", "--tls-client-auth", "sometimes"]).unwrap_err();
        assert!(
            e.contains("unknown client authentication 'sometimes'"),
            "{e}"
        );
    }

    #[test]
    fn admin_tls_flags_go_together() {
        let parses = |args: &[&str]| {
            let mut argv = vec!["rollcall", "groups"];
            argv.extend_from_slice(args);
            Cli::command().try_get_matches_from(argv).is_ok()
        };
        assert!(parses(&["--tls-ca", "ca.pem"]));
        assert!(parses(&[
            "--tls-ca",
            "ca.pem",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-server-name",
            "coordinator.internal"
        ]));
        assert!(!parses(&["--tls-cert", "c.pem", "--tls-key", "k.pem"]));
        assert!(!parses(&["--tls-ca", "ca.pem", "--tls-cert", "c.pem"]));
        assert!(!parses(&["--tls-ca", "ca.pem", "--tls-key", "k.pem"]));
        assert!(!parses(&["--tls-server-name", "coordinator.internal"]));
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
        let e = config_of(&["rollcall", "serve", "--assignor", "best"]).unwrap_err();
        assert!(e.contains("unknown assignor 'best'"), "{e}");
        let e = config_of(&["rollcall", "serve", "--detector", "psychic"]).unwrap_err();
        assert!(
            e.contains("unknown detector 'psychic': expected fixed"),
            "{e}"
        );
        assert!(config_of(&["rollcall", "serve", "--shards", "0"]).is_err());
        // A smaller frame without a smaller partition limit: the answers about one
        // member of a full group would not fit.
        let e = config_of(&["rollcall", "serve", "--max-frame-size", "64KiB"]).unwrap_err();
        assert!(e.contains("max-partitions-per-group"), "{e}");
        assert!(e.contains("at most 7849 fit"), "{e}");
        let e = config_of(&["rollcall", "serve", "--idle-timeout", "10m"]).unwrap_err();
        assert!(
            e.contains("idle-timeout (10m) must be more than max-session-timeout (30m)"),
            "{e}"
        );
        let e = config_of(&["rollcall", "serve", "--send-buffer-bytes", "512KiB"]).unwrap_err();
        assert!(e.contains("send-buffer-bytes"), "{e}");
        let e = config_of(&["rollcall", "serve", "--max-offsets", "0"]).unwrap_err();
        assert!(e.contains("max-offsets must be at least 1"), "{e}");
        let e = config_of(&[
            "rollcall",
            "serve",
            "--max-metadata-bytes-per-group",
            "1KiB",
        ])
        .unwrap_err();
        assert!(e.contains("less than max-metadata-bytes (4096)"), "{e}");
    }
}
