//! A quick run of the `failover` scenario end to end (feature `cluster`): one etcd
//! member, three coordinators (`rollcall-bench-serve`, the `rollcall` command line built
//! with cluster mode), six groups of three members, one coordinator killed once. The
//! run must finish by itself with every member of the killed coordinator's groups
//! answered again, no rebalance and no `Lost`. Skipped (loudly) without an `etcd`
//! binary, unless `ROLLCALL_REQUIRE_ETCD=1`.
#![cfg(feature = "cluster")]

use std::time::Duration;

// The scenario starts its own coordinators: `run_bench`, for one, is not used here.
#[allow(dead_code)]
mod support;

use support::{run_scenario, Run};

#[test]
fn failover_smoke() {
    if !rollcall_coordinator::cluster::testing::etcd_installed() {
        let message =
            "SKIPPED: failover_smoke needs the `etcd` binary on PATH (install etcd-server)";
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
        "failover",
        &[
            "--rollcall-bin",
            env!("CARGO_BIN_EXE_rollcall-bench-serve"),
            "--groups",
            "6",
            "--members-per-group",
            "3",
            "--members-per-client",
            "6",
            "--etcd-members",
            "1",
            "--etcd-lease-ttl",
            "2s",
            "--slots",
            "8",
            "--session-timeout",
            "8s",
            "--kills",
            "1",
            "--setup-timeout",
            "60s",
        ],
        Duration::from_secs(150),
    );
    // 0: every target met; 1: one missed (the time target may be, on a loaded
    // machine); what this checks is below.
    assert!(
        matches!(status.code(), Some(0 | 1)),
        "exit {status}:\n{report}"
    );
    assert_eq!(v["scenario"], "failover", "{report}");
    let f = &v["figures"];
    assert_eq!(f["members"], 18, "{report}");
    let rounds = f["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 1, "{report}");
    assert!(rounds[0]["members_affected"].as_u64() > Some(0), "{report}");
    assert_eq!(rounds[0]["not_answered"], 0, "{report}");
    assert_eq!(f["rebalances"], 0, "{report}");
    assert_eq!(f["revocations"], 0, "{report}");
    assert_eq!(f["lost_events"], 0, "{report}");
}
