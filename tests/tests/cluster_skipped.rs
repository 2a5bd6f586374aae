//! Without the `cluster` feature the cluster's end-to-end tests (`cluster.rs`,
//! `cluster_etcd_faults.rs`, `etcd.rs`) are not built. This says so where it cannot be
//! missed, so that a run that did not test cluster mode is not taken for one that did.

#![cfg(not(feature = "cluster"))]

use std::io::Write;

#[test]
fn cluster_tests_are_skipped_without_the_cluster_feature() {
    // Straight to the process's standard error: the test runner's capture would hide
    // `eprintln!`.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: the cluster tests need the `cluster` feature (protoc to build, etcd to run): \
         cargo test --workspace --all-features"
    );
    assert!(
        std::env::var_os("ROLLCALL_REQUIRE_CLUSTER").is_none(),
        "ROLLCALL_REQUIRE_CLUSTER is set but the cluster tests were not built: build with --all-features"
    );
}
