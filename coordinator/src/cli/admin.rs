//! Admin commands (`groups`, `describe`, `offsets`): one request to a running
//! coordinator over the wire protocol. A new one is a variant of [`AdminCommand`] with
//! its arms here, and its rendering in `render.rs`.

use super::*;

/// The commands that ask a running coordinator.
#[derive(Debug, Subcommand)]
pub(super) enum AdminCommand {
    /// List the groups: in a cluster, every coordinator's (the coordinator asked
    /// names the others).
    Groups {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Describe a group: its state and every member's liveness and partitions.
    Describe {
        /// The group.
        group: String,
        /// The false expulsions per year, across the group, that the advised session
        /// timeout is computed for (from the members' observed heartbeat gaps).
        #[arg(long, default_value_t = 1.0, value_name = "RATE", value_parser = positive_rate)]
        false_expulsions_per_year: f64,
        /// The least the advised timeout exceeds the median heartbeat gap by: a margin
        /// for pauses the group has not shown, which its gaps cannot tell of.
        #[arg(long, default_value = "3s", value_name = "DURATION", value_parser = parse_duration)]
        advice_pause_floor: Duration,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Drain a member, or every member with a label (now and later): it stays in the
    /// group and keeps heartbeating, is given nothing new, and its partitions move to
    /// the others (revoke, acknowledge, grant). Durable until `undrain`.
    Drain {
        #[command(flatten)]
        target: DrainTarget,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Undo `drain`: the member (or the label's members) may be given partitions again.
    Undrain {
        #[command(flatten)]
        target: DrainTarget,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Show a group's operator settings, or change those given (the others stay as
    /// they are). Configuring a group that does not exist yet creates it, empty.
    Config {
        /// The group.
        group: String,
        #[command(flatten)]
        change: ConfigChange,
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

/// Whom `drain` and `undrain` name.
#[derive(Debug, Args)]
pub(super) struct DrainTarget {
    /// The group.
    group: String,
    /// The member id (as `describe` shows it).
    #[arg(required_unless_present = "label", conflicts_with = "label")]
    member: Option<String>,
    /// Every member that declared this label at join (a host name, say), instead of
    /// one member.
    #[arg(long, value_name = "LABEL", value_parser = non_empty)]
    label: Option<String>,
}

/// The settings `config` changes; none given: it only shows them.
#[derive(Debug, Args)]
pub(super) struct ConfigChange {
    /// How long a departed static member's partitions stay reserved, unowned, for its
    /// instance to come back to (0: off; at most 1h). Its work waits meanwhile.
    #[arg(long, value_name = "DURATION", value_parser = departure_delay)]
    departure_delay: Option<u32>,
    /// At most this many partitions in revocation at once in the group (0: no cap).
    #[arg(long, value_name = "N")]
    max_revoking: Option<u32>,
    /// At most this many partitions in revocation at once per member (0: no cap).
    #[arg(long, value_name = "N")]
    max_revoking_per_member: Option<u32>,
    /// What the assignor balances: `count` (partitions per capacity) or `load`
    /// (reported load per capacity).
    #[arg(long, value_name = "count|load", value_parser = balance)]
    balance: Option<u8>,
    /// Load balance: the share of partitions a rebalance may move beyond those that
    /// must, e.g. 10% (0% to 100%, to a tenth of a percent).
    #[arg(long, value_name = "PERCENT", value_parser = permille)]
    churn_budget: Option<u16>,
    /// Load balance: how far above the mean the most loaded member must be before a
    /// load report rebalances, e.g. 10%.
    #[arg(long, value_name = "PERCENT", value_parser = permille)]
    imbalance: Option<u16>,
}

impl ConfigChange {
    fn request(&self, group: &str) -> AlterGroupConfigRequest {
        AlterGroupConfigRequest {
            group: group.to_owned(),
            departure_delay_ms: self.departure_delay,
            max_revoking: self.max_revoking,
            max_revoking_per_member: self.max_revoking_per_member,
            balance: self.balance,
            churn_budget_permille: self.churn_budget,
            imbalance_permille: self.imbalance,
        }
    }
}

/// The longest departure delay a group may have.
const MAX_DEPARTURE_DELAY: Duration = Duration::from_secs(3600);

fn non_empty(text: &str) -> Result<String, String> {
    if text.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(text.to_owned())
    }
}

/// A departure delay, milliseconds: a duration of at most an hour.
fn departure_delay(text: &str) -> Result<u32, String> {
    let d = parse_duration(text).map_err(|e| e.to_string())?;
    if d > MAX_DEPARTURE_DELAY {
        return Err(format!(
            "{} is longer than the longest departure delay, 1h",
            format_duration(d)
        ));
    }
    u32::try_from(d.as_millis()).map_err(|_| "too long".into())
}

fn balance(text: &str) -> Result<u8, String> {
    match text.parse::<Balance>().map_err(|e| e.to_string())? {
        Balance::Count => Ok(0),
        Balance::Load => Ok(1),
    }
}

/// A percentage (`10%`, `12.5%`, or without the sign) as per mille, 0 to 1000.
pub(super) fn permille(text: &str) -> Result<u16, String> {
    let bad = || format!("invalid percentage '{text}': expected a share such as 10% or 12.5%");
    let number = text.trim().trim_end_matches('%').trim();
    let (whole, tenths) = match number.split_once('.') {
        Some((w, t)) if t.len() == 1 => (w, t),
        Some(_) => {
            return Err(format!(
                "invalid percentage '{text}': at most one decimal (a tenth of a percent)"
            ))
        }
        None => (number, "0"),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(tenths) {
        return Err(bad());
    }
    let value = whole
        .parse::<u32>()
        .ok()
        .and_then(|w| w.checked_mul(10))
        .and_then(|w| w.checked_add(tenths.parse::<u32>().ok()?))
        .ok_or_else(bad)?;
    if value > 1000 {
        return Err(format!("invalid percentage '{text}': at most 100%"));
    }
    Ok(value as u16)
}

/// A rate above zero.
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
        Ok(_) => Err("must be a number above 0".into()),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

#[derive(Debug, Args)]
pub(super) struct AdminArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// How a command reaches a running coordinator: the options every command that asks
/// one shares.
#[derive(Debug, Args)]
pub(super) struct ConnectArgs {
    /// The coordinator to ask.
    #[arg(long, env = "ROLLCALL_ADDR", default_value = DEFAULT_LISTEN)]
    addr: String,
    /// Give up on the coordinator after this long.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
    /// Connect over TLS, trusting the CA certificates in this PEM file to have signed
    /// the coordinator's certificate.
    #[arg(long, env = "ROLLCALL_TLS_CA", value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// PEM file with the client certificate chain to present over TLS (with --tls-key).
    #[arg(
        long,
        env = "ROLLCALL_TLS_CLIENT_CERT",
        value_name = "FILE",
        requires = "tls_ca",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// PEM file with the private key of --tls-cert.
    #[arg(
        long,
        env = "ROLLCALL_TLS_CLIENT_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// The name the coordinator's certificate must carry, if not the host of --addr.
    #[arg(
        long,
        env = "ROLLCALL_TLS_SERVER_NAME",
        value_name = "NAME",
        requires = "tls_ca"
    )]
    tls_server_name: Option<String>,
    /// Authenticate as this user (SCRAM-SHA-256), with the password in --password-file.
    #[arg(
        long,
        env = "ROLLCALL_USER",
        value_name = "NAME",
        requires = "password_file"
    )]
    user: Option<String>,
    /// File whose first line is --user's password (kept off the command line, where
    /// other users of the machine could read it).
    #[arg(
        long,
        env = "ROLLCALL_PASSWORD_FILE",
        value_name = "FILE",
        requires = "user"
    )]
    password_file: Option<PathBuf>,
}

impl ConnectArgs {
    /// How to connect, as `software`; fails if the password file cannot be read.
    fn options(&self, software: &str) -> Result<ConnectOptions, ConnectError> {
        let mut options = ConnectOptions::new(software).with_timeout(self.timeout);
        if let (Some(user), Some(file)) = (&self.user, &self.password_file) {
            let text = std::fs::read_to_string(file).map_err(|e| {
                ConnectError::Authentication(format!(
                    "cannot read the password file {}: {e}",
                    file.display()
                ))
            })?;
            let password = text.lines().next().unwrap_or_default();
            options = options.with_credentials(rollcall_client::Credentials::new(user, password));
        }
        if let Some(ca) = &self.tls_ca {
            let client = self.tls_cert.clone().zip(self.tls_key.clone());
            let mut tls = TlsConfig::from_files(ca, client);
            if let Some(name) = &self.tls_server_name {
                tls = tls.with_server_name(name);
            }
            options = options.with_tls(tls);
        }
        Ok(options)
    }
}

impl AdminArgs {
    /// `--timeout`.
    pub(super) fn timeout(&self) -> Duration {
        self.connect.timeout
    }
}

impl AdminCommand {
    pub(super) fn args(&self) -> &AdminArgs {
        match self {
            Self::Groups { admin }
            | Self::Describe { admin, .. }
            | Self::Offsets { admin, .. }
            | Self::Drain { admin, .. }
            | Self::Undrain { admin, .. }
            | Self::Config { admin, .. } => admin,
        }
    }

    /// The group the command names, if any.
    fn group(&self) -> Option<&str> {
        match self {
            Self::Groups { .. } => None,
            Self::Describe { group, .. }
            | Self::Offsets { group, .. }
            | Self::Config { group, .. } => Some(group),
            Self::Drain { target, .. } | Self::Undrain { target, .. } => Some(&target.group),
        }
    }

    /// Asks the coordinator: one request, or as many pages as the answer takes where
    /// the coordinator reads it a page at a time (ListGroups and FetchOffsets version
    /// 1, DescribeGroup version 2), gathered into one answer.
    pub(super) async fn ask(&self, conn: &mut Connection) -> Result<Response, ConnectError> {
        let supports = |key: ApiKey, version: u16| {
            conn.versions()
                .versions
                .iter()
                .any(|r| r.api_key == key as u16 && r.max_version >= version)
        };
        match self {
            Self::Groups { .. } => {
                if !supports(ApiKey::ListGroups, 1) {
                    return conn
                        .request(Request::ListGroups(ListGroupsRequest::default()))
                        .await;
                }
                let mut all = ListGroupsResponse::default();
                let mut after = None;
                loop {
                    let page = Some(Page { after, limit: 0 });
                    match conn
                        .request(Request::ListGroups(ListGroupsRequest { page }))
                        .await?
                    {
                        Response::ListGroups(r) => {
                            let more = r.more == Some(true);
                            all.groups.extend(r.groups);
                            after = all.groups.last().map(|g| g.group.clone());
                            if !more || after.is_none() {
                                return Ok(Response::ListGroups(all));
                            }
                        }
                        other => return Ok(other),
                    }
                }
            }
            Self::Describe { group, .. } => {
                if !supports(ApiKey::DescribeGroup, 2) {
                    // A coordinator without DescribeGroup version 1 is asked at version
                    // 0: the answer then has no detection details.
                    return conn
                        .request(Request::DescribeGroup(DescribeGroupRequest {
                            operator: false,
                            group: group.clone(),
                            detection: supports(ApiKey::DescribeGroup, 1),
                            page: None,
                            summary: false,
                        }))
                        .await;
                }
                // Version 3 adds the group's detection summary and each member's expel
                // basis (every page repeats the summary; the first page's is kept).
                let summary = supports(ApiKey::DescribeGroup, 3);
                let operator = supports(ApiKey::DescribeGroup, 4);
                let mut all: Option<DescribeGroupResponse> = None;
                loop {
                    let after = all
                        .as_ref()
                        .and_then(|a| a.members.last())
                        .map(|m| m.member_id.clone());
                    let request = Request::DescribeGroup(DescribeGroupRequest {
                        // Version 4 adds the group's settings, drains, reservations and
                        // each member's placement and load.
                        operator,
                        group: group.clone(),
                        detection: true,
                        page: Some(Page { after, limit: 0 }),
                        summary,
                    });
                    match conn.request(request).await? {
                        Response::DescribeGroup(r) => {
                            let more = r.more == Some(true) && !r.members.is_empty();
                            let whole = match all.take() {
                                None => r,
                                Some(mut whole) => {
                                    whole.members.extend(r.members);
                                    whole
                                }
                            };
                            if !more {
                                return Ok(Response::DescribeGroup(DescribeGroupResponse {
                                    more: None,
                                    ..whole
                                }));
                            }
                            all = Some(whole);
                        }
                        other => return Ok(other),
                    }
                }
            }
            Self::Drain { target, .. } | Self::Undrain { target, .. } => {
                let key = ApiKey::Drain;
                if !supports(key, 0) {
                    return Err(ConnectError::Unsupported { api: key.as_str() });
                }
                conn.request(Request::Drain(DrainRequest {
                    group: target.group.clone(),
                    member_id: target.member.clone().unwrap_or_default(),
                    label: target.label.clone().unwrap_or_default(),
                    drained: matches!(self, Self::Drain { .. }),
                }))
                .await
            }
            Self::Config { group, change, .. } => {
                let key = ApiKey::AlterGroupConfig;
                if !supports(key, 0) {
                    return Err(ConnectError::Unsupported { api: key.as_str() });
                }
                conn.request(Request::AlterGroupConfig(change.request(group)))
                    .await
            }
            Self::Offsets { group, topics, .. } => {
                let request = |page| {
                    Request::FetchOffsets(FetchOffsetsRequest {
                        group: group.clone(),
                        topics: topics.clone(),
                        page,
                    })
                };
                if !supports(ApiKey::FetchOffsets, 1) {
                    return conn.request(request(None)).await;
                }
                let mut all = FetchOffsetsResponse::default();
                let mut after = None;
                loop {
                    match conn
                        .request(request(Some(Page { after, limit: 0 })))
                        .await?
                    {
                        Response::FetchOffsets(r) => {
                            let more = r.more == Some(true);
                            all.offsets.extend(r.offsets);
                            after = all.offsets.last().map(|o| OffsetCursor {
                                topic: o.topic.clone(),
                                partition: o.partition,
                            });
                            if !more || after.is_none() {
                                return Ok(Response::FetchOffsets(all));
                            }
                        }
                        other => return Ok(other),
                    }
                }
            }
        }
    }

    /// The answer as the user sees it (with, for `groups`, the coordinators whose
    /// groups could not be listed).
    fn render(&self, response: Response, unreached: &[Unreached]) -> Result<String, AdminError> {
        let json = self.args().json;
        match (self, response) {
            (_, Response::Error(e)) if e.code == ErrorCode::UnknownGroup => Err(
                AdminError::UnknownGroup(self.group().unwrap_or_default().to_owned()),
            ),
            (_, Response::Error(e)) => Err(AdminError::Refused {
                code: e.code,
                message: e.message,
            }),
            (Self::Groups { .. }, Response::ListGroups(r)) => {
                Ok(render_groups(&r, unreached, json))
            }
            (
                Self::Describe {
                    false_expulsions_per_year,
                    advice_pause_floor,
                    ..
                },
                Response::DescribeGroup(r),
            ) => Ok(render_describe(
                &r,
                json,
                *false_expulsions_per_year,
                *advice_pause_floor,
            )),
            (Self::Offsets { group, .. }, Response::FetchOffsets(r)) => {
                Ok(render_offsets(group, &r, json))
            }
            (Self::Drain { target, .. } | Self::Undrain { target, .. }, Response::Drain(r)) => {
                Ok(render_drain(
                    &target.group,
                    target.member.as_deref(),
                    target.label.as_deref(),
                    matches!(self, Self::Drain { .. }),
                    &r,
                    json,
                ))
            }
            (Self::Config { group, .. }, Response::AlterGroupConfig(r)) => {
                Ok(render_config(group, &r.config, json))
            }
            (_, other) => Err(AdminError::Unexpected(format!("{other:?}"))),
        }
    }
}

/// Why an admin command failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum AdminError {
    /// The coordinator could not be reached, or broke off the exchange.
    #[error("coordinator at {addr}: {source}")]
    Connection {
        addr: String,
        #[source]
        source: ConnectError,
    },
    /// Connecting or the answer took longer than `--timeout`.
    #[error("no answer from the coordinator at {addr} within {timeout}")]
    Timeout { addr: String, timeout: String },
    /// The group named does not exist.
    #[error("group '{0}' not found")]
    UnknownGroup(String),
    /// The coordinator answered with an error.
    #[error("the coordinator refused: {message} ({code})")]
    Refused { code: ErrorCode, message: String },
    /// The coordinator answered with a response of the wrong kind.
    #[error("unexpected answer from the coordinator: {0}")]
    Unexpected(String),
}

/// Logging at `warn` and a single-threaded runtime, for a command that talks to a
/// coordinator; the exit code to stop with if the runtime cannot start.
pub(super) fn client_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    init_logging("warn");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("rollcall: cannot start the runtime: {e}");
            ExitCode::from(EXIT_RUNTIME)
        })
}

pub(super) fn admin_command(command: AdminCommand) -> ExitCode {
    let runtime = match client_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let outcome = runtime.block_on(async {
        let (response, unreached) = if let AdminCommand::Groups { .. } = command {
            list_everywhere(&command).await?
        } else {
            let response = within_timeout(command.args(), async {
                let mut conn = connect(command.args()).await?;
                let response = command.ask(&mut conn).await?;
                follow(&command, conn, response).await
            })
            .await?;
            (response, Vec::new())
        };
        Ok::<_, AdminError>((command.render(response, &unreached)?, unreached))
    });
    match outcome {
        Ok((text, unreached)) => {
            print!("{text}");
            for u in &unreached {
                eprintln!(
                    "rollcall: the groups of coordinator {} at {} are missing: {}",
                    u.id, u.addr, u.error
                );
            }
            if unreached.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_RUNTIME)
            }
        }
        Err(e) => {
            eprintln!("rollcall: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// Hops a cluster coordinator's answer makes a command take at most: one coordinator
/// points to the group's, which may have handed it on meanwhile.
const MAX_HOPS: usize = 4;

/// In a cluster, asks the group's own coordinator: an answer `not_coordinator` sends
/// the command to the address FindCoordinator gives, and `coordinator_loading` asks
/// again shortly (all within `--timeout`).
async fn follow(
    command: &AdminCommand,
    mut conn: Connection,
    mut response: Response,
) -> Result<Response, ConnectError> {
    let Some(group) = command.group() else {
        return Ok(response);
    };
    for _ in 0..MAX_HOPS {
        let Response::Error(error) = &response else {
            break;
        };
        match error.code {
            ErrorCode::NotCoordinator => {
                let find = Request::FindCoordinator(FindCoordinatorRequest {
                    group: group.to_owned(),
                });
                let Response::FindCoordinator(found) = conn.request(find).await? else {
                    break;
                };
                conn = connect_to(command.args(), Some(&found.addr)).await?;
            }
            ErrorCode::CoordinatorLoading => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => break,
        }
        response = command.ask(&mut conn).await?;
    }
    Ok(response)
}

/// Connects to the coordinator `args` names and handshakes.
pub(super) async fn connect(args: &AdminArgs) -> Result<Connection, ConnectError> {
    connect_to(args, None).await
}

/// Connects to `addr` (default: the coordinator `args` names) with the options of
/// `args`, and handshakes.
pub(super) async fn connect_to(
    args: &AdminArgs,
    addr: Option<&str>,
) -> Result<Connection, ConnectError> {
    let software = concat!("rollcall-cli/", env!("CARGO_PKG_VERSION"));
    let args = &args.connect;
    let addr = addr.unwrap_or(&args.addr);
    Connection::connect_with(addr, &args.options(software)?).await
}

/// One connection kept across the requests of a command that polls (`rollcall
/// trace`): a connection per poll would handshake (and, with TLS or SCRAM, do the
/// costly part of both) five times a second for as long as the command runs. In a
/// cluster it follows the group to its coordinator, as the one-shot commands do.
pub(super) struct AdminSession<'a> {
    args: &'a AdminArgs,
    conn: Option<Connection>,
    /// The group's coordinator, once a coordinator pointed to it.
    found: Option<String>,
}

impl<'a> AdminSession<'a> {
    /// A session that connects on its first request.
    pub(super) fn new(args: &'a AdminArgs) -> Self {
        Self {
            args,
            conn: None,
            found: None,
        }
    }

    /// Sends `request` and returns its answer, each attempt within `--timeout`. When the
    /// connection fails (the coordinator restarted or closed it since the last
    /// request), one new connection is tried before the failure is reported. An answer
    /// `not_coordinator` sends the request to the group's coordinator (FindCoordinator);
    /// `coordinator_loading` asks again shortly.
    pub(super) async fn request(&mut self, request: Request) -> Result<Response, AdminError> {
        let mut response = self.once(request.clone()).await?;
        for _ in 0..MAX_HOPS {
            let (Response::Error(error), Some(group)) = (&response, request.group()) else {
                break;
            };
            match error.code {
                ErrorCode::NotCoordinator => {
                    let find = Request::FindCoordinator(FindCoordinatorRequest {
                        group: group.to_owned(),
                    });
                    let Response::FindCoordinator(found) = self.once(find).await? else {
                        break;
                    };
                    self.found = Some(found.addr);
                    self.conn = None;
                }
                ErrorCode::CoordinatorLoading => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => break,
            }
            response = self.once(request.clone()).await?;
        }
        Ok(response)
    }

    async fn once(&mut self, request: Request) -> Result<Response, AdminError> {
        if let Some(conn) = self.conn.as_mut() {
            if let Ok(response) = within_timeout(self.args, conn.request(request.clone())).await {
                return Ok(response);
            }
            self.conn = None;
        }
        let addr = self.found.as_deref();
        let (conn, response) = within_timeout(self.args, async {
            let mut conn = connect_to(self.args, addr).await?;
            let response = conn.request(request).await?;
            Ok((conn, response))
        })
        .await?;
        self.conn = Some(conn);
        Ok(response)
    }
}

/// Runs an exchange with the coordinator within `--timeout`.
pub(super) async fn within_timeout<T>(
    args: &AdminArgs,
    exchange: impl std::future::Future<Output = Result<T, ConnectError>>,
) -> Result<T, AdminError> {
    let args = &args.connect;
    let outcome = tokio::time::timeout(args.timeout, exchange)
        .await
        .unwrap_or(Err(ConnectError::Timeout));
    outcome.map_err(|e| match e {
        ConnectError::Timeout => AdminError::Timeout {
            addr: args.addr.clone(),
            timeout: format_duration(args.timeout),
        },
        source => AdminError::Connection {
            addr: args.addr.clone(),
            source,
        },
    })
}
