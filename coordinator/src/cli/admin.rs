//! Admin commands (`groups`, `describe`, `offsets`): one request to a running
//! coordinator over the wire protocol.

use super::*;

#[derive(Debug)]
pub(super) enum Admin {
    Groups,
    Describe(String),
    Offsets(String, Vec<String>),
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

pub(super) async fn admin_run(args: &AdminArgs, admin: Admin) -> Result<String, String> {
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
pub(super) async fn admin_request(addr: &str, request: Request) -> Result<Response, String> {
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
