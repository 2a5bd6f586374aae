//! A quick run of the `connections` scenario end to end: the `rollcall-bench` binary
//! opens 200 connections to a coordinator process it spawns (`rollcall-bench-serve`),
//! leaves them idle for 1 s and closes them. The run must finish, open and hold every
//! connection, and read the coordinator's memory at each step. Whether the 8 KiB target
//! is met is not judged here: 200 connections are too few for a steady figure.

use std::time::Duration;

mod support;

use support::{run_bench, Run};

#[test]
fn connections_smoke_spawned() {
    let Run {
        status,
        report,
        json: v,
    } = run_bench(
        "connections",
        &[
            "--conns",
            "200",
            "--idle",
            "1s",
            "--store",
            "memory",
            "--setup-timeout",
            "20s",
        ],
        Duration::from_secs(60),
    );
    // 0: every check met; 1: one missed (the memory target may be, at this size); 2: the
    // run failed.
    assert!(
        matches!(status.code(), Some(0 | 1)),
        "exit {status}:\n{report}"
    );
    assert_eq!(v["scenario"], "connections", "{report}");
    let f = &v["figures"];
    assert_eq!(f["connections"], 200, "{report}");
    assert_eq!(f["connections_opened"], 200, "{report}");
    assert_eq!(f["connections_failed"], 0, "{report}");
    assert_eq!(f["connections_open_after_idle"], 200, "{report}");
    assert_eq!(f["bytes_received_while_idle"], 0, "{report}");
    assert_eq!(f["idle_ms"], 1_000, "{report}");
    let bytes = |name: &str| f[name].as_u64().unwrap_or_default();
    for name in [
        "rss_before_bytes",
        "rss_connected_bytes",
        "rss_idle_bytes",
        "peak_rss_bytes",
        "rss_after_close_bytes",
    ] {
        assert!(bytes(name) > 0, "{name} not read:\n{report}");
    }
    assert!(
        bytes("peak_rss_bytes") >= bytes("rss_idle_bytes"),
        "{report}"
    );
    // A connection costs something, and not a megabyte.
    let per_conn = f["memory_per_conn_bytes"]
        .as_f64()
        .expect("a figure per connection");
    assert!(per_conn > 0.0 && per_conn < 1_048_576.0, "{report}");
    let checks = v["checks"].as_array().expect("checks");
    assert_eq!(checks.len(), 2, "{report}");
    assert_eq!(checks[0]["what"], "memory per idle connection", "{report}");
    assert_eq!(checks[1]["met"], true, "{report}");
    assert_eq!(
        status.code() == Some(0),
        checks[0]["met"] == true,
        "{report}"
    );
}
