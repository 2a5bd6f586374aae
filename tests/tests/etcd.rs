//! Cluster mode's etcd part from outside the coordinator crate (feature `cluster`):
//! the shared etcd harness and two coordinators agreeing through it. Skipped loudly
//! without an `etcd` binary unless `ROLLCALL_REQUIRE_ETCD=1`.

#![cfg(feature = "cluster")]

use std::time::Duration;

use rollcall_coordinator::cluster::testing::EtcdProcess;
use rollcall_coordinator::cluster::{plan, ClusterOptions, Etcd};

fn options(etcd: &EtcdProcess, id: &str) -> ClusterOptions {
    ClusterOptions {
        endpoints: vec![etcd.endpoint()],
        name: "e2e".to_owned(),
        id: id.to_owned(),
        advertise: format!("127.0.0.1:{}", 9000 + id.len()),
        lease_ttl: Duration::from_secs(3),
        slots: 16,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_coordinators_claim_what_the_plan_gives_them() {
    let Some(etcd) = EtcdProcess::start("e2e-plan") else {
        return;
    };
    let a = Etcd::connect(&options(&etcd, "a")).await.unwrap();
    let b = Etcd::connect(&options(&etcd, "bb")).await.unwrap();
    let mut view = a.view();
    let both = view.wait_for(|v| v.coordinators.len() == 2);
    tokio::time::timeout(Duration::from_secs(10), both)
        .await
        .unwrap()
        .unwrap();
    let target = plan(a.slots(), &a.view().borrow());
    assert_eq!(
        target,
        plan(b.slots(), &b.view().borrow()),
        "one view, one plan"
    );
    for (coordinator, id) in [(&a, "a"), (&b, "bb")] {
        for slot in &target[id] {
            assert!(coordinator.claim(*slot).await.unwrap().is_some());
        }
    }
    let mut view = b.view();
    let owned = view.wait_for(|v| v.owners.len() == 16);
    let owned = tokio::time::timeout(Duration::from_secs(10), owned)
        .await
        .unwrap()
        .unwrap()
        .clone();
    assert_eq!(plan(16, &owned), target, "a settled view plans no move");
}
