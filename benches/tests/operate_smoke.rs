//! Quick runs of the operator-control scenarios end to end (`drain`, `racks`,
//! `capacity`, `throttle`): the `rollcall-bench` binary against a coordinator process
//! it spawns, at small sizes, each holding the scenario to its own invariant. Timing
//! targets are not asserted (a debug build on a shared machine); a run that failed
//! (exit 2) fails the test.

use std::time::Duration;

mod support;

use support::{run_bench, Run};

const LIMIT: Duration = Duration::from_secs(120);

fn ran(run: &Run) {
    assert_ne!(
        run.status.code(),
        Some(2),
        "the run failed:\n{}",
        run.report
    );
}

#[test]
fn drain_moves_the_drained_members_partitions_and_no_other() {
    let run = run_bench(
        "drain",
        &[
            "--members",
            "4",
            "--partitions",
            "40",
            "--victim",
            "1",
            "--ack-delay",
            "20ms",
            "--quiet-for",
            "500ms",
            "--store",
            "memory",
            "--setup-timeout",
            "30s",
        ],
        LIMIT,
    );
    ran(&run);
    let (f, report) = (&run.json["figures"], &run.report);
    assert_eq!(f["victim_owned"], 10, "{report}");
    assert_eq!(f["moved"], 10, "{report}");
    assert_eq!(f["victim_left"], 0, "{report}");
    assert_eq!(f["other_moves"], 0, "{report}");
    assert!(f["done_ms"].as_f64().is_some(), "{report}");
    assert!(f["done_in_round_trips"].as_f64().is_some(), "{report}");
}

#[test]
fn racks_keep_partitions_in_their_rack_and_a_dead_rack_moves_only_its_own() {
    let run = run_bench(
        "racks",
        &[
            "--members",
            "6",
            "--racks",
            "3",
            "--partitions",
            "30",
            "--kill-rack",
            "2",
            "--session-timeout",
            "1s",
            "--interval",
            "200ms",
            "--quiet-for",
            "500ms",
            "--store",
            "memory",
            "--setup-timeout",
            "30s",
        ],
        LIMIT,
    );
    ran(&run);
    let (f, report) = (&run.json["figures"], &run.report);
    assert_eq!(f["killed_members"], 2, "{report}");
    assert_eq!(f["orphans"], 10, "{report}");
    assert_eq!(f["orphans_reowned"], 10, "{report}");
    assert_eq!(f["other_racks_moved"], 0, "{report}");
    assert!(
        f["settled"]["in_rack_pct"].as_f64().unwrap_or(0.0) >= 95.0,
        "{report}"
    );
    assert!(
        f["settled"]["member_spread"].as_f64().unwrap_or(9.0) <= 1.0,
        "{report}"
    );
}

#[test]
fn capacity_weights_members_and_load_balance_keeps_to_the_churn_budget() {
    let run = run_bench(
        "capacity",
        &[
            "--weighted-members",
            "3",
            "--weighted-partitions",
            "70",
            "--members",
            "6",
            "--partitions",
            "100",
            "--quiet-for",
            "6s",
            "--store",
            "memory",
            "--setup-timeout",
            "30s",
        ],
        LIMIT,
    );
    ran(&run);
    let (f, report) = (&run.json["figures"], &run.report);
    assert_eq!(
        f["weighted_counts"],
        serde_json::json!([10, 20, 40]),
        "{report}"
    );
    let budget = f["churn_budget_partitions"].as_u64().unwrap_or(0);
    assert_eq!(budget, 10, "{report}");
    for phase in ["switch_rebalances", "change_rebalances"] {
        for r in f[phase].as_array().expect("rebalances") {
            assert!(
                r["partitions_moved"].as_u64().unwrap_or(u64::MAX) <= budget,
                "{report}"
            );
        }
    }
    let count = f["count_balanced"]["max_over_bound"]
        .as_f64()
        .unwrap_or(0.0);
    let load = f["load_balanced"]["max_over_bound"]
        .as_f64()
        .unwrap_or(f64::MAX);
    assert!(load <= count + 1e-9, "{report}");
}

#[test]
fn throttle_never_has_more_than_the_cap_in_revocation() {
    let run = run_bench(
        "throttle",
        &[
            "--initial",
            "5",
            "--members",
            "5",
            "--partitions",
            "500",
            "--max-revoking",
            "20",
            "--ack-delay",
            "10ms",
            "--store",
            "memory",
            "--setup-timeout",
            "30s",
        ],
        LIMIT,
    );
    ran(&run);
    let (f, report) = (&run.json["figures"], &run.report);
    let capped = &f["capped"];
    assert_eq!(capped["settled"], true, "{report}");
    assert!(
        capped["max_in_revocation"].as_u64().unwrap_or(u64::MAX) <= 20,
        "{report}"
    );
    assert_eq!(capped["partitions_revoked"], 250, "{report}");
    let uncapped = &f["uncapped"];
    assert_eq!(uncapped["settled"], true, "{report}");
    assert!(
        uncapped["max_in_revocation"].as_u64().unwrap_or(0) > 20,
        "{report}"
    );
}
