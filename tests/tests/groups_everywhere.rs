//! `rollcall groups` lists every group of a cluster, whichever coordinator it asks:
//! that coordinator names the others (ListCoordinators) and the command lists each
//! one's groups, naming any it could not ask. First with real servers in one process
//! whose directories are set by hand, then (feature `cluster`) with a real etcd and
//! `rollcall serve --etcd` processes.

use std::sync::Arc;

use rollcall_coordinator::server::{
    slot_of, Directory, Server, ServerConfig, ServerHandle, StoreConfig,
};
use rollcall_coordinator::store::MemoryStore;
use rollcall_protocol::{
    CommitOffsetsRequest, CoordinatorListing, ListCoordinatorsRequest, ListCoordinatorsResponse,
    OffsetCommit, Request, Response,
};
use rollcall_tests::{bounded, run_cli, RawClient};

const BIN: &str = env!("CARGO_BIN_EXE_rollcall-e2e");
const SLOTS: u32 = 16;

async fn serve(directory: &Directory) -> ServerHandle {
    let config = ServerConfig {
        store: StoreConfig::Custom(Arc::new(MemoryStore::new())),
        shards: 2,
        ..ServerConfig::default()
    };
    bounded("server bind", Server::bind(config))
        .await
        .expect("binds")
        .with_directory(directory.clone())
        .spawn()
}

/// Creates `group` at `addr` with an administrative commit.
async fn create(addr: std::net::SocketAddr, group: &str) {
    let mut raw = RawClient::connected(addr).await;
    let answer = raw
        .request(Request::CommitOffsets(CommitOffsetsRequest {
            group: group.into(),
            member_id: None,
            generation: 0,
            offsets: vec![OffsetCommit {
                topic: "t".into(),
                partition: 0,
                offset: 1,
                metadata: String::new(),
            }],
        }))
        .await;
    assert!(matches!(answer, Response::CommitOffsets(_)), "{answer:?}");
}

/// The groups `rollcall groups --json` lists at `addr`, its `unreachable` ids, and its
/// exit code and standard error.
async fn groups_at(addr: std::net::SocketAddr) -> (Vec<String>, Vec<String>, Option<i32>, String) {
    let addr = addr.to_string();
    let out = run_cli(BIN, &["groups", "--addr", &addr, "--json"], None).await;
    let json: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", out.stdout, out.stderr));
    let names = |key: &str, field: &str| -> Vec<String> {
        json[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|g| g[field].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    (
        names("groups", "group"),
        names("unreachable", "id"),
        out.code,
        out.stderr,
    )
}

/// Two groups in different slots.
fn two_groups() -> (String, String) {
    let first = "alpha".to_owned();
    let second = (0..1000)
        .map(|i| format!("beta-{i}"))
        .find(|g| slot_of(g, SLOTS) != slot_of(&first, SLOTS))
        .expect("a group in another slot");
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_lists_every_coordinator_s_groups_and_names_the_unreachable() {
    let (at_a, at_b) = two_groups();
    let dir_a = Directory::cluster(SLOTS);
    let dir_b = Directory::cluster(SLOTS);
    dir_a.test_set_here(slot_of(&at_a, SLOTS));
    dir_b.test_set_here(slot_of(&at_b, SLOTS));
    let a = serve(&dir_a).await;
    let b = serve(&dir_b).await;
    dir_a.test_set_elsewhere(slot_of(&at_b, SLOTS), &b.local_addr().to_string());
    dir_b.test_set_elsewhere(slot_of(&at_a, SLOTS), &a.local_addr().to_string());
    create(a.local_addr(), &at_a).await;
    create(b.local_addr(), &at_b).await;
    dir_a.test_set_others(&[("b", &b.local_addr().to_string())]);
    dir_b.test_set_others(&[("a", &a.local_addr().to_string())]);

    // Each coordinator names the other, never itself.
    let mut raw = RawClient::connected(a.local_addr()).await;
    let listed = raw
        .request(Request::ListCoordinators(ListCoordinatorsRequest))
        .await;
    assert_eq!(
        listed,
        Response::ListCoordinators(ListCoordinatorsResponse {
            coordinators: vec![CoordinatorListing {
                id: "b".into(),
                addr: b.local_addr().to_string(),
            }],
        })
    );

    // Asked at either, the command lists both groups.
    let mut expected = vec![at_a.clone(), at_b.clone()];
    expected.sort();
    for addr in [a.local_addr(), b.local_addr()] {
        let (groups, unreachable, code, stderr) = groups_at(addr).await;
        assert_eq!(groups, expected, "at {addr}: {stderr}");
        assert!(unreachable.is_empty(), "{unreachable:?}");
        assert_eq!(code, Some(0), "{stderr}");
    }
    let out = run_cli(
        BIN,
        &["groups", "--addr", &a.local_addr().to_string()],
        None,
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains(&at_a) && out.stdout.contains(&at_b),
        "{}",
        out.stdout
    );

    // A third coordinator that cannot be reached: what the others have is listed, the
    // missing one is named, and the command fails.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    dir_a.test_set_others(&[("b", &b.local_addr().to_string()), ("c", &dead)]);
    let (groups, unreachable, code, stderr) = groups_at(a.local_addr()).await;
    assert_eq!(groups, expected);
    assert_eq!(unreachable, ["c"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("coordinator c at") && stderr.contains(&dead),
        "{stderr}"
    );
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_coordinator_lists_no_others_and_its_own_groups() {
    let single = serve(&Directory::single()).await;
    create(single.local_addr(), "solo").await;
    let mut raw = RawClient::connected(single.local_addr()).await;
    let listed = raw
        .request(Request::ListCoordinators(ListCoordinatorsRequest))
        .await;
    assert_eq!(
        listed,
        Response::ListCoordinators(ListCoordinatorsResponse::default())
    );
    let (groups, unreachable, code, stderr) = groups_at(single.local_addr()).await;
    assert_eq!(groups, ["solo"]);
    assert!(unreachable.is_empty());
    assert_eq!(code, Some(0), "{stderr}");
    drop(single);
}

/// With etcd: three `rollcall serve --etcd` processes, groups spread over them, and
/// `rollcall groups` asked at each lists them all.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_groups_asked_anywhere_lists_every_group() {
    use std::time::{Duration, Instant};

    use rollcall_tests::cluster::Cluster;
    use rollcall_tests::fleet::{group_names, Fleet, Timeouts};

    let Some(mut cluster) = Cluster::start("groups", BIN, "2s", 8) else {
        return;
    };
    let test = async {
        for _ in 0..3 {
            cluster.add(None).await;
        }
        cluster.wait_balanced(Duration::from_secs(20)).await;
        let groups = group_names("everywhere", 12);
        let timeouts = Timeouts {
            session: Duration::from_secs(8),
            lease: Duration::from_secs(4),
            heartbeat: Duration::from_millis(250),
        };
        let fleet = Fleet::join(&cluster.alive(), &groups, 1, 2, timeouts).await;
        fleet.wait_settled(Duration::from_secs(20)).await;
        // The groups are spread: no coordinator serves them all.
        let placement = cluster.wait_placed(&groups, Duration::from_secs(20)).await;
        let places: std::collections::BTreeSet<_> = placement.values().collect();
        assert!(places.len() > 1, "{placement:?}");

        let mut expected = groups.clone();
        expected.sort();
        for addr in cluster.alive() {
            // Until every coordinator's view has the others (it comes with the etcd
            // watch, within a moment of the start).
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let (listed, unreachable, code, stderr) = groups_at(addr).await;
                if listed == expected && code == Some(0) {
                    assert!(unreachable.is_empty());
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "at {addr}: {listed:?} {unreachable:?} {code:?} {stderr}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        drop(fleet);
    };
    tokio::time::timeout(Duration::from_secs(90), test)
        .await
        .expect("the test took longer than 90 s");
}
