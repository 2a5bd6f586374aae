//! Quick runs of the `floor` scenario end to end: the `rollcall-bench` binary starts its
//! echo server (itself, as `floor-server`) and drives it from a few connections. At
//! 2,000 heartbeats per second over 20 connections for 1 s after a 200 ms warm-up, the
//! run must finish by itself, handle the offered rate and read the server's CPU time
//! (2,000/s rather than fewer: that CPU time moves in clock ticks of 10 ms, and a
//! slower second can spend less than one). Closed loop, it must report no offered rate.

use std::time::Duration;

// The floor starts no coordinator: `run_bench`, which spawns one, is not used here.
#[allow(dead_code)]
mod support;

use support::{run_scenario, Run};

/// Runs `rollcall-bench floor <args>` for at most 30 s.
fn run_floor(args: &[&str]) -> Run {
    run_scenario(
        "floor",
        &[&["--setup-timeout", "10s"][..], args].concat(),
        Duration::from_secs(30),
    )
}

#[test]
fn floor_smoke_open_loop() {
    let Run {
        status,
        report,
        json: v,
    } = run_floor(&[
        "--conns",
        "20",
        "--rate",
        "2000",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
    ]);
    assert!(status.success(), "exit {status}:\n{report}");
    assert!(report.contains("hb per server CPU-s"), "{report}");
    assert_eq!(v["scenario"], "floor", "{report}");
    let f = &v["figures"];
    assert_eq!(f["conns"], 20, "{report}");
    assert_eq!(f["offered_hb_per_s"], 2000.0, "{report}");
    assert_eq!(f["heartbeat_errors"], 0, "{report}");
    assert_eq!(f["connections_lost"], 0, "{report}");
    let num = |name: &str| {
        f[name]
            .as_f64()
            .unwrap_or_else(|| panic!("{name} missing:\n{report}"))
    };
    assert!(num("window_s") >= 0.9, "{report}");
    assert!(num("server_cpu_s") > 0.0, "{report}");
    assert!(num("hb_per_cpu_s") > 0.0, "{report}");
    let handled = num("handled_hb_per_s");
    assert!(
        (1_400.0..=2_600.0).contains(&handled),
        "handled {handled} hb/s of 2,000 offered:\n{report}"
    );
}

#[test]
fn floor_smoke_closed_loop() {
    let Run {
        status,
        report,
        json: v,
    } = run_floor(&[
        "--conns",
        "10",
        "--closed-loop",
        "--server-threads",
        "1",
        "--duration",
        "500ms",
        "--warmup",
        "100ms",
    ]);
    assert!(status.success(), "exit {status}:\n{report}");
    let f = &v["figures"];
    assert!(f["offered_hb_per_s"].is_null(), "{report}");
    assert_eq!(f["closed_loop"], true, "{report}");
    assert_eq!(f["server_threads"], 1, "{report}");
    assert_eq!(f["heartbeat_errors"], 0, "{report}");
    assert!(
        f["handled_hb_per_s"].as_f64().unwrap_or_default() > 100.0,
        "{report}"
    );
}
