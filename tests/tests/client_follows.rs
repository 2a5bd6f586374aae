//! The client finding a group's coordinator on its own: a fetch of committed offsets
//! follows its group to the coordinator that serves it (and waits out a loading one),
//! and a search answered "no coordinator known here" asks the client's next address.
//! Real servers in one process share one store; their directories are set by hand, as
//! a cluster's slot manager sets them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rollcall_client::{Client, ClientConfig, Committed, MemberConfig, TopicPartition};
use rollcall_coordinator::server::{
    slot_of, Directory, Server, ServerConfig, ServerHandle, StoreConfig,
};
use rollcall_coordinator::store::MemoryStore;
use rollcall_protocol::{CommitOffsetsRequest, OffsetCommit, Request, Response};
use rollcall_tests::{bounded, RawClient};

const SLOTS: u32 = 16;
const GROUP: &str = "ledger";

async fn serve(store: &Arc<MemoryStore>, directory: &Directory) -> ServerHandle {
    let config = ServerConfig {
        store: StoreConfig::Custom(store.clone()),
        shards: 2,
        ..ServerConfig::default()
    };
    bounded("server bind", Server::bind(config))
        .await
        .expect("binds")
        .with_directory(directory.clone())
        .spawn()
}

fn client_config() -> ClientConfig {
    let mut c = ClientConfig::default();
    c.reconnect_base = Duration::from_millis(20);
    c.reconnect_max = Duration::from_millis(200);
    c.connect_timeout = Duration::from_secs(2);
    c
}

/// Commits offsets 0..3 of topic `t` for the group at `addr` (an administrative commit).
async fn commit_at(addr: std::net::SocketAddr) -> BTreeMap<TopicPartition, Committed> {
    let mut raw = RawClient::connected(addr).await;
    let offsets: Vec<OffsetCommit> = (0..3)
        .map(|p| OffsetCommit {
            topic: "t".into(),
            partition: p,
            offset: 100 + i64::from(p),
            metadata: String::new(),
        })
        .collect();
    let answer = raw
        .request(Request::CommitOffsets(CommitOffsetsRequest {
            group: GROUP.into(),
            member_id: None,
            generation: 0,
            offsets: offsets.clone(),
        }))
        .await;
    assert!(matches!(answer, Response::CommitOffsets(_)), "{answer:?}");
    offsets
        .into_iter()
        .map(|o| {
            (
                TopicPartition::new(o.topic, o.partition),
                Committed {
                    offset: o.offset,
                    metadata: o.metadata,
                },
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_follows_its_group_to_its_coordinator_and_waits_out_a_load() {
    let slot = slot_of(GROUP, SLOTS);
    let store = Arc::new(MemoryStore::new());
    let dir_b = Directory::cluster(SLOTS);
    dir_b.test_set_here(slot);
    let b = serve(&store, &dir_b).await;
    let committed = commit_at(b.local_addr()).await;
    // A knows B serves the group.
    let dir_a = Directory::cluster(SLOTS);
    dir_a.test_set_elsewhere(slot, &b.local_addr().to_string());
    let a = serve(&store, &dir_a).await;

    let client = bounded("connect", Client::connect(a.local_addr(), client_config()))
        .await
        .expect("connects");
    let got = bounded("fetch", client.fetch_offsets(GROUP, Vec::<String>::new()))
        .await
        .expect("fetched at the group's coordinator");
    assert_eq!(got, committed);

    // B is loading the group (taking it over) for a while: the fetch waits for it.
    dir_b.test_set_loading(slot);
    let loading = dir_b.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        loading.test_set_here(slot);
    });
    let got = bounded("fetch", client.fetch_offsets(GROUP, ["t"]))
        .await
        .expect("fetched once loaded");
    assert_eq!(got, committed);
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_that_finds_no_coordinator_fails_as_unavailable_in_bounded_time() {
    let slot = slot_of(GROUP, SLOTS);
    let store = Arc::new(MemoryStore::new());
    let dir_a = Directory::cluster(SLOTS);
    dir_a.test_set_loading(slot);
    let a = serve(&store, &dir_a).await;
    let client = bounded("connect", Client::connect(a.local_addr(), client_config()))
        .await
        .expect("connects");
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        client.fetch_offsets(GROUP, Vec::<String>::new()),
    )
    .await
    .expect("gives up by itself");
    assert!(
        matches!(&result, Err(rollcall_client::RequestError::Unavailable { reason })
            if reason.contains("coordinator_loading")),
        "{result:?}"
    );
    // Not at once: it kept asking for a while.
    assert!(started.elapsed() >= Duration::from_millis(300));
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_that_knows_no_owner_sends_the_question_to_the_next_address() {
    let slot = slot_of(GROUP, SLOTS);
    let store = Arc::new(MemoryStore::new());
    // B serves the group; C knows it; A, the client's first address, knows nothing of
    // the group's slot (between owners, as far as it can tell).
    let dir_b = Directory::cluster(SLOTS);
    dir_b.test_set_here(slot);
    let b = serve(&store, &dir_b).await;
    let committed = commit_at(b.local_addr()).await;
    let dir_c = Directory::cluster(SLOTS);
    dir_c.test_set_elsewhere(slot, &b.local_addr().to_string());
    let c = serve(&store, &dir_c).await;
    let a = serve(&store, &Directory::cluster(SLOTS)).await;

    let config = client_config().with_bootstrap([c.local_addr().to_string()]);
    let client = bounded("connect", Client::connect(a.local_addr(), config))
        .await
        .expect("connects to A");
    // A member joins through A and lives at B.
    let member = bounded(
        "join",
        client.join(
            MemberConfig::new(GROUP, [("t", 3)])
                .with_session_timeout(Duration::from_secs(6))
                .with_heartbeat_interval(Duration::from_millis(200)),
        ),
    )
    .await
    .expect("joins at B");
    assert!(member.member_id().is_some());
    // A fetch asked through A is answered at B too.
    let got = bounded("fetch", client.fetch_offsets(GROUP, Vec::<String>::new()))
        .await
        .expect("fetched at B");
    assert_eq!(got, committed);
    drop((a, b, c));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_cannot_be_reached_passes_the_question_on() {
    let slot = slot_of(GROUP, SLOTS);
    let store = Arc::new(MemoryStore::new());
    let dir_b = Directory::cluster(SLOTS);
    dir_b.test_set_here(slot);
    let b = serve(&store, &dir_b).await;
    let committed = commit_at(b.local_addr()).await;
    let dir_c = Directory::cluster(SLOTS);
    dir_c.test_set_elsewhere(slot, &b.local_addr().to_string());
    let c = serve(&store, &dir_c).await;
    let a = serve(&store, &Directory::cluster(SLOTS)).await;
    // The client's second address: nobody listens there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();

    let config = client_config().with_bootstrap([dead, c.local_addr().to_string()]);
    let client = bounded("connect", Client::connect(a.local_addr(), config))
        .await
        .expect("connects to A");
    // A knows nobody, the next address cannot be reached, the one after knows B.
    let got = bounded("fetch", client.fetch_offsets(GROUP, Vec::<String>::new()))
        .await
        .expect("fetched at B");
    assert_eq!(got, committed);
    drop((a, b, c));
}
