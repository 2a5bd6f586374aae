//! A quick run of the harness itself: a small steady scenario against an in-process
//! coordinator must see its heartbeats answered and nobody expelled.

use std::time::Duration;

use clap::Parser;

use crate::common::CommonArgs;
use crate::scenarios::steady;

#[derive(Debug, Parser)]
struct Wrapper {
    #[command(flatten)]
    common: CommonArgs,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(crate::target::GENERATOR_THREADS)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The arguments of a 1 s steady run of 50 members in 5 groups, every 100 ms, on the
/// memory store, with `extra` added.
fn args(extra: &[&str]) -> Wrapper {
    let base = [
        "smoke",
        "--members",
        "50",
        "--groups",
        "5",
        "--interval",
        "100ms",
        "--duration",
        "1s",
        "--store",
        "memory",
        "--quiet",
    ];
    Wrapper::parse_from(base.iter().chain(extra))
}

/// A 1 s steady run of 50 members, bounded to a minute.
fn measure(args: &Wrapper) -> (steady::SteadyFigures, Option<crate::target::TargetInfo>) {
    runtime()
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(60),
                steady::measure(&args.common, 50, None, false, Duration::from_millis(300)),
            )
            .await
        })
        .expect("the smoke run finished in time")
        .expect("the smoke run succeeded")
}

#[test]
fn steady_smoke_in_process() {
    let (f, info) = measure(&args(&[]));
    assert_eq!(info.map(|i| i.mode), Some("in-process"));
    assert_eq!(f.members, 50);
    assert_eq!(f.connections, 50, "one member per connection below 5,000");
    // 50 members every 100 ms for 1 s: about 500 heartbeats, every one answered.
    assert!(
        f.rtt_from_intended.count >= 300,
        "too few heartbeats answered: {f:?}"
    );
    assert_eq!(f.unanswered, 0, "{f:?}");
    assert_eq!(f.false_expulsions, 0, "{f:?}");
    assert_eq!(f.heartbeat_errors, 0, "{f:?}");
    assert_eq!(f.join_errors, 0, "{f:?}");
    assert!(f.handled_hb_per_s > 200.0, "{f:?}");
    assert!(f.rtt_from_intended.max_ms < 5_000.0, "{f:?}");
    assert!(f.coordinator_cpu_s.is_some());
}

#[test]
fn steady_smoke_with_batched_heartbeats() {
    let (f, _) = measure(&args(&["--members-per-conn", "10", "--batch-heartbeats"]));
    assert!(f.batch_heartbeats);
    assert_eq!(f.connections, 5);
    // Beats are counted per member, as without batching; frames per connection.
    assert!(
        f.rtt_from_intended.count >= 300,
        "too few heartbeats answered: {f:?}"
    );
    assert_eq!(f.unanswered, 0, "{f:?}");
    assert_eq!(f.false_expulsions, 0, "{f:?}");
    assert_eq!(f.heartbeat_errors, 0, "{f:?}");
    assert!(
        f.sent_hb_frames_per_s * 5.0 < f.sent_hb_per_s,
        "ten beats a frame: {f:?}"
    );
}

/// With `--tls`, the in-process coordinator serves TLS with a certificate made for the
/// run, and every member connects over it, verifying the certificate.
#[test]
fn steady_smoke_over_tls() {
    let (f, info) = measure(&args(&["--tls"]));
    assert_eq!(info.map(|i| i.tls), Some(true));
    assert_eq!(f.connections, 50);
    assert!(
        f.rtt_from_intended.count >= 300,
        "too few heartbeats answered: {f:?}"
    );
    assert_eq!(f.unanswered, 0, "{f:?}");
    assert_eq!(f.connections_failed, 0, "{f:?}");
    assert_eq!(f.false_expulsions, 0, "{f:?}");
    assert_eq!(f.heartbeat_errors, 0, "{f:?}");
}
