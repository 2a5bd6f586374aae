//! Quick runs of the `floor` scenario end to end: the `rollcall-bench` binary starts its
//! echo server (itself, as `floor-server`) and drives it from a few connections. At
//! 2,000 heartbeats per second over 20 connections for 1 s after a 200 ms warm-up, the
//! run must finish by itself, handle the offered rate and read the server's CPU time
//! (2,000/s rather than fewer: that CPU time moves in clock ticks of 10 ms, and a
//! slower second can spend less than one). Closed loop, it must report no offered rate.
//! Batched (`--beats-per-frame 50`), 50,000 beats per second over 20 connections are
//! 1,000 Heartbeats frames per second: the figures must count the beats, and a beat
//! count the protocol does not take must be refused before anything starts.

use std::process::Command;
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

/// Figure `name` of a report's figures, which must be a number.
fn figure(figures: &serde_json::Value, name: &str, report: &str) -> f64 {
    figures[name]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} missing:\n{report}"))
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
    let num = |name: &str| figure(f, name, &report);
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

#[test]
fn floor_smoke_batched() {
    let Run {
        status,
        report,
        json: v,
    } = run_floor(&[
        "--conns",
        "20",
        "--beats-per-frame",
        "50",
        "--rate",
        "50000",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
    ]);
    assert!(status.success(), "exit {status}:\n{report}");
    assert!(report.contains("50 beats per frame"), "{report}");
    let f = &v["figures"];
    assert_eq!(f["beats_per_frame"], 50, "{report}");
    assert_eq!(f["groups"], 10, "{report}");
    assert_eq!(f["offered_hb_per_s"], 50000.0, "{report}");
    assert_eq!(f["heartbeat_errors"], 0, "{report}");
    assert_eq!(f["connections_lost"], 0, "{report}");
    // A Heartbeats answer: length, header, error code, count, and 12 bytes per result.
    assert_eq!(
        f["response_frame_bytes"],
        4 + 9 + 2 + 4 + 50 * 12,
        "{report}"
    );
    assert_eq!(v["generator"]["members_per_conn"], 50, "{report}");
    assert_eq!(v["generator"]["batch_heartbeats"], true, "{report}");
    let num = |name: &str| figure(f, name, &report);
    // 50 beats of at least 28 bytes each.
    assert!(num("request_frame_bytes") > 50.0 * 28.0, "{report}");
    assert!(num("hb_per_cpu_s") > 0.0, "{report}");
    // Answered at all (how many is the benchmark's business, not a smoke test's: a
    // loaded machine may fall behind the offered rate).
    let handled = num("handled_hb_per_s");
    assert!(handled > 0.0, "{report}");
    // Renewals, not frames: 50 per frame answered.
    let frames = num("handled_frames_per_s");
    assert!(
        (handled / frames - 50.0).abs() < 0.5,
        "{handled} hb/s in {frames} frames/s:\n{report}"
    );
}

#[test]
fn floor_refuses_beat_counts_the_protocol_does_not_take() {
    for beats in ["0", "10001"] {
        let out = Command::new(env!("CARGO_BIN_EXE_rollcall-bench"))
            .args(["floor", "--quiet", "--beats-per-frame", beats])
            .output()
            .expect("rollcall-bench runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{beats}: {stderr}");
        assert!(
            stderr.contains("--beats-per-frame") && stderr.contains("10000"),
            "{beats}: {stderr}"
        );
    }
}
