//! A quick run of the `pause` scenario end to end: the `rollcall-bench` binary against a
//! coordinator process it spawns (`rollcall-bench-serve`, the `rollcall` command line),
//! stopped once for 6 s with 20 members and a 2 s session timeout (heartbeats every
//! 800 ms, so a dead member's expulsion lands well inside its bound on a loaded machine). No live member may be
//! expelled, and the two that die during the stop must be expelled within the session
//! timeout of the resume.

use std::time::Duration;

mod support;

use support::{run_bench, Run};

#[test]
fn pause_smoke_spawned() {
    let Run {
        status,
        report,
        json: v,
    } = run_bench(
        "pause",
        &[
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
        ],
        Duration::from_secs(60),
    );
    assert!(status.success(), "exit {status}:\n{report}");
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
