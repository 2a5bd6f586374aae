//! The etcd harness itself.

use std::time::Duration;

use super::super::testing::EtcdProcess;

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
