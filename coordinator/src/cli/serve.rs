//! Running the coordinator: `rollcall serve` until a signal, with a graceful shutdown.

use super::*;

pub(super) fn serve(argv: &[OsString], matches: &ArgMatches) -> ExitCode {
    let config = match ServeArgs::layered(argv, matches).and_then(ServeArgs::into_config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rollcall: invalid configuration: {e}");
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
                    ServerError::Config(_) | ServerError::Auth(_) | ServerError::Tls(_) => {
                        EXIT_CONFIG
                    }
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
pub(super) async fn watch_signals(shutdown: CancellationToken) {
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
