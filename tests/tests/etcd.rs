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

/// A coordinator cut off from etcd for longer than its lease's TTL finds the lease gone
/// when the cut heals, and takes a new one by itself (its acting deadline moves into
/// the future again), rather than retrying the old one for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_to_a_cut_is_replaced_once_etcd_is_reachable_again() {
    use rollcall_tests::proxy::{Direction, Proxy};
    use std::time::Instant;

    let Some(etcd) = EtcdProcess::start("lease-after-cut") else {
        return;
    };
    let proxy = Proxy::start(etcd.endpoint().parse().expect("etcd address")).await;
    let options = ClusterOptions {
        endpoints: vec![format!("http://{}", proxy.addr())],
        name: "lease-after-cut".into(),
        id: "c".into(),
        advertise: "127.0.0.1:1".into(),
        lease_ttl: Duration::from_secs(2),
        slots: 4,
    };
    let coordinator = Etcd::connect(&options).await.expect("connects");
    let first = coordinator.lease_id();
    proxy.set_blackhole(Direction::Both, true);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        coordinator.acting_deadline() <= Instant::now(),
        "still acting while cut off for twice the lease's TTL"
    );
    proxy.set_blackhole(Direction::Both, false);
    let healed = Instant::now();
    while coordinator.acting_deadline() <= Instant::now() {
        assert!(
            healed.elapsed() < Duration::from_secs(8),
            "no new lease within 8 s of the cut healing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(coordinator.lease_id(), first, "the expired lease came back");
    eprintln!("a new lease {:?} after the cut healed", healed.elapsed());
}
