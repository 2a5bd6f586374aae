//! Admin commands (`groups`, `describe`, `offsets`): one request to a running
//! coordinator over the wire protocol.

use super::*;

#[derive(Debug)]
pub(super) enum Admin {
    Groups,
    Describe(String),
    Offsets(String, Vec<String>),
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

pub(super) fn admin_command(args: &AdminArgs, admin: Admin) -> ExitCode {
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
    match runtime.block_on(admin_run(args, admin)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rollcall: {e}");
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

pub(super) async fn admin_run(args: &AdminArgs, admin: Admin) -> Result<String, AdminError> {
    let request = match &admin {
        Admin::Groups => Request::ListGroups,
        Admin::Describe(group) => Request::DescribeGroup(DescribeGroupRequest {
            group: group.clone(),
        }),
        Admin::Offsets(group, topics) => Request::FetchOffsets(FetchOffsetsRequest {
            group: group.clone(),
            topics: topics.clone(),
        }),
    };
    let response = admin_request(args, request).await?;
    match (admin, response) {
        (Admin::Describe(group) | Admin::Offsets(group, _), Response::Error(e))
            if e.code == ErrorCode::UnknownGroup =>
        {
            Err(AdminError::UnknownGroup(group))
        }
        (_, Response::Error(e)) => Err(AdminError::Refused {
            code: e.code,
            message: e.message,
        }),
        (Admin::Groups, Response::ListGroups(r)) => Ok(render_groups(&r, args.json)),
        (Admin::Describe(_), Response::DescribeGroup(r)) => Ok(render_describe(&r, args.json)),
        (Admin::Offsets(group, _), Response::FetchOffsets(r)) => {
            Ok(render_offsets(&group, &r, args.json))
        }
        (_, other) => Err(AdminError::Unexpected(format!("{other:?}"))),
    }
}

/// Connects, handshakes, sends `request` and returns its answer, all within `--timeout`.
async fn admin_request(args: &AdminArgs, request: Request) -> Result<Response, AdminError> {
    let software = concat!("rollcall-cli/", env!("CARGO_PKG_VERSION"));
    let exchange = async {
        let mut conn = Connection::connect(args.addr.as_str(), software, args.timeout).await?;
        conn.request(request).await
    };
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
