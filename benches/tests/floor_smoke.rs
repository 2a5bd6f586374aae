//! Quick runs of the `floor` scenario end to end: the `rollcall-bench` binary starts its
//! echo server (itself, as `floor-server`) and drives it from a few connections. At
//! 2,000 heartbeats per second over 20 connections for 1 s after a 200 ms warm-up, the
//! run must finish by itself, handle the offered rate and read the server's CPU time
//! (2,000/s rather than fewer: that CPU time moves in clock ticks of 10 ms, and a
//! slower second can spend less than one). Closed loop, it must report no offered rate.

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Runs `rollcall-bench floor <args> --quiet --json <tmp>` for at most 30 s; returns its
/// exit status, its output and its JSON report.
fn run_floor(name: &str, args: &[&str]) -> (ExitStatus, String, serde_json::Value) {
    let json = std::env::temp_dir().join(format!(
        "rollcall-bench-floor-smoke-{name}-{}.json",
        std::process::id()
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_rollcall-bench"))
        .arg("floor")
        .args(args)
        .args(["--setup-timeout", "10s", "--quiet", "--json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rollcall-bench starts");
    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the floor smoke run took over {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("output");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!("the JSON report was not written ({e}), exit {status}:\n{report}")
    });
    let _ = std::fs::remove_file(&json);
    let v = serde_json::from_str(&text).expect("valid JSON");
    (status, report, v)
}

#[test]
fn floor_smoke_open_loop() {
    let (status, report, v) = run_floor(
        "open",
        &[
            "--conns",
            "20",
            "--rate",
            "2000",
            "--duration",
            "1s",
            "--warmup",
            "200ms",
        ],
    );
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
    let (status, report, v) = run_floor(
        "closed",
        &[
            "--conns",
            "10",
            "--closed-loop",
            "--server-threads",
            "1",
            "--duration",
            "500ms",
            "--warmup",
            "100ms",
        ],
    );
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
