//! The etcd harness itself.

use std::time::Duration;

use super::super::testing::{EtcdCluster, EtcdProcess};

#[test]
fn the_harness_starts_a_healthy_etcd_and_restarts_it_on_its_data() {
    let Some(mut etcd) = EtcdProcess::start("harness") else {
        return;
    };
    let endpoint = etcd.endpoint();
    let put = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &endpoint, "put", "k", "v"])
        .output()
        .unwrap();
    assert!(put.status.success(), "{put:?}");
    etcd.restart();
    let get = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &endpoint, "get", "k", "--print-value-only"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "v");
    etcd.kill();
    std::thread::sleep(Duration::from_millis(10));
    assert!(std::net::TcpStream::connect(&endpoint).is_err());
}

#[test]
fn a_three_member_etcd_keeps_a_quorum_through_a_leader_kill_and_restarts_its_members() {
    let Some(mut etcd) = EtcdCluster::start("harness-three", 3) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let within = Duration::from_secs(20);
    let etcdctl = |endpoints: &[String], args: &[&str]| {
        let out = std::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &endpoints.join(",")])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(etcd.len(), 3);
    etcdctl(&etcd.endpoints(), &["put", "k", "v"]);

    let leader = runtime.block_on(etcd.wait_leader(within));
    let term = runtime.block_on(etcd.term()).expect("a term");
    etcd.kill(leader);
    assert!(!etcd.is_running(leader));
    let next = runtime.block_on(etcd.wait_leader(within));
    assert_ne!(next, leader, "a killed member still leads");
    let elected = runtime.block_on(etcd.term()).expect("a term");
    assert!(
        elected > term,
        "no election after the leader's kill: term {elected}"
    );
    let alive: Vec<String> = (0..3)
        .filter(|i| *i != leader)
        .map(|i| etcd.endpoint(i))
        .collect();
    etcdctl(&alive, &["put", "k", "w"]);

    // Back on its data, it serves (a linearizable read through it) what was written
    // without it.
    etcd.restart(leader);
    let only = [etcd.endpoint(leader)];
    assert_eq!(
        etcdctl(&only, &["get", "k", "--print-value-only"]),
        "w",
        "the restarted member does not serve the latest value"
    );

    etcd.kill_all();
    assert_eq!(runtime.block_on(etcd.leader()), None);
    etcd.restart_all();
    runtime.block_on(etcd.wait_leader(within));
    assert_eq!(
        etcdctl(&etcd.endpoints(), &["get", "k", "--print-value-only"]),
        "w"
    );
}
