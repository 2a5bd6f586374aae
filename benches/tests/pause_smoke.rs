//! A quick run of the `pause` scenario end to end: the `rollcall-bench` binary against a
//! coordinator process it spawns (`rollcall-bench-serve`, the `rollcall` command line),
//! stopped once for 6 s with 20 members and a 2 s session timeout (heartbeats every
//! 800 ms, so a dead member's expulsion lands well inside its bound on a loaded machine). No live member may be
//! expelled, and the two that die during the stop must be expelled within the session
//! timeout of the resume.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn pause_smoke_spawned() {
    let json = std::env::temp_dir().join(format!(
        "rollcall-bench-pause-smoke-{}.json",
        std::process::id()
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_rollcall-bench"))
        .args([
            "pause",
            "--spawn",
            "--rollcall-bin",
            env!("CARGO_BIN_EXE_rollcall-bench-serve"),
            "--members",
            "20",
            "--groups",
            "2",
            "--session-timeout",
            "2s",
            "--interval",
            "800ms",
            "--stop",
            "6s",
            "--rounds",
            "1",
            "--die",
            "2",
            "--store",
            "memory",
            "--setup-timeout",
            "20s",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rollcall-bench starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the pause smoke run took over 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("output");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(status.success(), "exit {status}:\n{report}");
    let text = std::fs::read_to_string(&json).expect("the JSON report was written");
    let _ = std::fs::remove_file(&json);
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(v["scenario"], "pause", "{report}");
    let f = &v["figures"];
    assert_eq!(f["members"], 20, "{report}");
    assert_eq!(f["died"], 2, "{report}");
    assert_eq!(f["live_expelled"], 0, "{report}");
    assert_eq!(f["dead_expelled_in_time"], 2, "{report}");
    assert_eq!(f["rounds"].as_array().map(Vec::len), Some(1), "{report}");
    assert!(
        f["rounds"][0]["stopped_ms"].as_f64().unwrap_or_default() >= 6_000.0,
        "{report}"
    );
}
