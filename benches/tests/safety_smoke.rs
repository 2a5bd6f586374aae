//! A quick run of the `safety` scenario end to end (feature `cluster`): three etcd
//! members, three coordinators (`rollcall-bench-serve`, the `rollcall` command line
//! built with cluster mode), six groups of three members, one fault of each kind, each
//! just after a member joined one of the groups it hits: a coordinator killed, one
//! cut off from etcd, the etcd leader killed. The run must
//! finish by itself, every fault recovered from, and the oracle must find nothing.
//! Skipped (loudly) without an `etcd` binary, unless `ROLLCALL_REQUIRE_ETCD=1`.
#![cfg(feature = "cluster")]

use std::time::Duration;

// The scenario starts its own coordinators: `run_bench`, for one, is not used here.
#[allow(dead_code)]
mod support;

use support::{run_scenario, Run};

#[test]
fn safety_smoke() {
    if !rollcall_coordinator::cluster::testing::etcd_installed() {
        let message = "SKIPPED: safety_smoke needs the `etcd` binary on PATH (install etcd-server)";
        assert!(
            std::env::var("ROLLCALL_REQUIRE_ETCD").as_deref() != Ok("1"),
            "{message}, and ROLLCALL_REQUIRE_ETCD=1 requires it"
        );
        eprintln!("{message}");
        return;
    }
    let Run {
        status,
        report,
        json: v,
    } = run_scenario(
        "safety",
        &[
            "--rollcall-bin",
            env!("CARGO_BIN_EXE_rollcall-bench-serve"),
            "--groups",
            "6",
            "--members-per-group",
            "3",
            "--etcd-lease-ttl",
            "2s",
            "--slots",
            "8",
            "--session-timeout",
            "8s",
            "--commit-interval",
            "200ms",
            "--kills",
            "1",
            "--cuts",
            "1",
            "--leader-kills",
            "1",
            "--setup-timeout",
            "60s",
        ],
        Duration::from_secs(240),
    );
    assert_eq!(status.code(), Some(0), "exit {status}:\n{report}");
    assert_eq!(v["scenario"], "safety", "{report}");
    let f = &v["figures"];
    let faults = f["faults"].as_array().expect("faults");
    let kinds: Vec<&str> = faults.iter().filter_map(|r| r["fault"].as_str()).collect();
    assert_eq!(kinds, ["kill", "cut", "leader_kill"], "{report}");
    for r in faults {
        assert!(r["recovered_ms"].is_number(), "{report}");
        // A member joined just before each fault: partitions were moving.
        assert!(r["joined"].is_string(), "{report}");
    }
    assert_eq!(f["members"], 21, "{report}");
    assert!(faults[1]["adopted_ms"].is_number(), "{report}");
    assert!(f["commits_accepted"].as_u64() > Some(0), "{report}");
    for found in ["double_owners", "fenced_commits", "lost_commits"] {
        assert_eq!(
            f[found].as_array().map(Vec::len),
            Some(0),
            "{found}: {report}"
        );
    }
}
