//! Groups that move between coordinators, with the client following them: two (then
//! three) real servers in one process share one store, and their directories are set
//! by hand, as a cluster's slot manager sets them. Also: a client's members joining
//! through one coordinator and living on their groups' coordinators, and a client that
//! starts and carries on at any address of its list. A member whose group moves keeps its
//! member id, generation and partitions, and its application sees at most `Suspended`
//! then `Resumed`, never `Lost`; a member of a group that stays is not disturbed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rollcall_client::{Client, ClientConfig, Event, Member, MemberConfig, PartitionSet};
use rollcall_coordinator::server::{
    slot_of, Directory, Server, ServerConfig, ServerHandle, StoreConfig,
};
use rollcall_coordinator::store::MemoryStore;
use rollcall_protocol::{DescribeGroupRequest, ErrorCode, Request, Response};
use rollcall_tests::{bounded, RawClient};

const SLOTS: u32 = 16;
const SESSION: Duration = Duration::from_secs(6);
const PARTITIONS: u32 = 4;

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

/// Two groups in different slots.
fn groups() -> (String, String) {
    let moving = "moving".to_owned();
    let staying = (0..1000)
        .map(|i| format!("staying-{i}"))
        .find(|g| slot_of(g, SLOTS) != slot_of(&moving, SLOTS))
        .expect("a group in another slot");
    (moving, staying)
}

/// Every event a member's application was given, taken as an application does
/// (acknowledging revocations at once).
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Event>>>);

impl Log {
    fn follow(member: Arc<Member>) -> Self {
        let log = Self::default();
        let events = log.0.clone();
        tokio::spawn(async move {
            while let Some(event) = member.next_event().await {
                if let Event::RevokeRequested { partitions, .. } = &event {
                    let _ = member.ack_revocation(partitions.clone());
                }
                events.lock().push(event);
            }
        });
        log
    }

    fn events(&self) -> Vec<Event> {
        self.0.lock().clone()
    }

    fn lost(&self) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, Event::Lost { .. }))
            .count()
    }

    /// The events after the first `from`, but for `Suspended` and `Resumed`.
    fn others_since(&self, from: usize) -> Vec<Event> {
        self.events()
            .into_iter()
            .skip(from)
            .filter(|e| !matches!(e, Event::Suspended { .. } | Event::Resumed { .. }))
            .collect()
    }
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    bounded(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

fn all() -> PartitionSet {
    (0..PARTITIONS)
        .map(|p| rollcall_client::TopicPartition::new("t", p))
        .collect()
}

/// The member `member_id` was heard by the coordinator at `addr` within the last
/// `within`.
async fn heard_at(
    addr: std::net::SocketAddr,
    group: &str,
    member_id: &str,
    within: Duration,
) -> bool {
    let mut raw = RawClient::connected(addr).await;
    let answer = raw
        .request(Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: group.into(),
            detection: false,
            page: None,
            summary: false,
        }))
        .await;
    match answer {
        Response::DescribeGroup(d) => d.members.iter().any(|m| {
            m.member_id == member_id && u128::from(m.since_heartbeat_ms) < within.as_millis()
        }),
        _ => false,
    }
}

/// The member's lease, or now if it has none.
fn lease(member: &Member) -> Instant {
    member.lease_deadline().unwrap_or_else(Instant::now)
}

/// The member is not suspended, and its lease was renewed by heartbeats sent well
/// after the one that gave it the lease `before` (three intervals and more).
fn renewed_since(member: &Member, before: Instant) -> bool {
    !member.is_suspended()
        && member
            .lease_deadline()
            .is_some_and(|l| l > before + Duration::from_millis(600))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_follows_its_group_to_another_coordinator_and_back_after_a_failure() {
    let (moving, staying) = groups();
    let (slot, other) = (slot_of(&moving, SLOTS), slot_of(&staying, SLOTS));
    let store = Arc::new(MemoryStore::new());
    let dir_a = Directory::cluster(SLOTS);
    dir_a.test_set_here(slot);
    dir_a.test_set_here(other);
    let a = serve(&store, &dir_a).await;

    let client = bounded("connect", Client::connect(a.local_addr(), client_config()))
        .await
        .expect("connects");
    let config = |group: &str| {
        MemberConfig::new(group, [("t", PARTITIONS)])
            .with_session_timeout(SESSION)
            .with_heartbeat_interval(Duration::from_millis(200))
            .with_lease_timeout(Duration::from_secs(1))
    };
    let mover = Arc::new(
        bounded("join", client.join(config(&moving)))
            .await
            .expect("joins"),
    );
    let stayer = Arc::new(
        bounded("join", client.join(config(&staying)))
            .await
            .expect("joins"),
    );
    let (mover_log, stayer_log) = (Log::follow(mover.clone()), Log::follow(stayer.clone()));
    wait_for("assigned", || {
        mover.assignment().partitions == all() && stayer.assignment().partitions == all()
    })
    .await;
    let id = mover.member_id().expect("a member");
    let generation = mover.assignment().generation;
    let settled = mover_log.events().len();

    // B takes the group over from what A made durable, and A stops serving it.
    let dir_b = Directory::cluster(SLOTS);
    dir_b.test_set_here(slot);
    dir_b.test_set_elsewhere(other, &a.local_addr().to_string());
    let b = serve(&store, &dir_b).await;
    let (moved_at, stayer_lease) = (lease(&mover), lease(&stayer));
    dir_a.test_set_elsewhere(slot, &b.local_addr().to_string());

    wait_for("renewed at B", || renewed_since(&mover, moved_at)).await;
    // Heard there lately (its restore, at least 600 ms ago, does not count).
    assert!(heard_at(b.local_addr(), &moving, &id, Duration::from_millis(400)).await);
    assert_eq!(mover.member_id().as_deref(), Some(id.as_str()));
    assert_eq!(mover.assignment().partitions, all());
    assert_eq!(mover.assignment().generation, generation);
    // A refuses the group now; the other group stays there, undisturbed.
    let mut raw = RawClient::connected(a.local_addr()).await;
    let refused = raw
        .request(Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: moving.clone(),
            detection: false,
            page: None,
            summary: false,
        }))
        .await;
    assert!(matches!(refused, Response::Error(e) if e.code == ErrorCode::NotCoordinator));
    let stayer_id = stayer.member_id().expect("a member");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        heard_at(
            a.local_addr(),
            &staying,
            &stayer_id,
            Duration::from_millis(400)
        )
        .await
    );
    assert!(renewed_since(&stayer, stayer_lease));

    // A move shorter than the lease is not even a pause.
    let moved_back = mover_log.events().len();
    assert_eq!(moved_back, settled, "{:?}", mover_log.events());

    // B fails: C takes the group over from what B made durable, and A says so.
    bounded("B stops", b.shutdown()).await.expect("stops");
    let dir_c = Directory::cluster(SLOTS);
    dir_c.test_set_here(slot);
    let c = serve(&store, &dir_c).await;
    let failed_at = lease(&mover);
    dir_a.test_set_elsewhere(slot, &c.local_addr().to_string());
    wait_for("renewed at C", || renewed_since(&mover, failed_at)).await;
    assert!(heard_at(c.local_addr(), &moving, &id, Duration::from_millis(400)).await);
    assert_eq!(mover.member_id().as_deref(), Some(id.as_str()));
    assert_eq!(mover.assignment().partitions, all());

    // Nothing but a pause, and never a loss, for either member.
    assert_eq!(
        mover_log.others_since(settled),
        vec![],
        "{:?}",
        mover_log.events()
    );
    assert_eq!(mover_log.lost(), 0);
    assert!(
        stayer_log
            .events()
            .iter()
            .all(|e| matches!(e, Event::Assigned { .. })),
        "{:?}",
        stayer_log.events()
    );
    let pauses = mover_log
        .events()
        .into_iter()
        .skip(moved_back)
        .filter(|e| matches!(e, Event::Suspended { .. }))
        .count();
    assert!(pauses <= 1, "{:?}", mover_log.events());
    drop((a, c));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_given_several_addresses_starts_and_carries_on_at_any_of_them() {
    // An address nobody listens on: bound, then closed.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let store = Arc::new(MemoryStore::new());
    let a = serve(&store, &Directory::single()).await;
    let config = client_config().with_bootstrap([a.local_addr().to_string()]);
    // The first address fails: the next one is used.
    let client = bounded("connect", Client::connect(dead, config))
        .await
        .expect("connects to the second address");
    let member = Arc::new(
        bounded(
            "join",
            client.join(
                MemberConfig::new("several", [("t", PARTITIONS)])
                    .with_session_timeout(SESSION)
                    .with_heartbeat_interval(Duration::from_millis(200)),
            ),
        )
        .await
        .expect("joins"),
    );
    let log = Log::follow(member.clone());
    wait_for("assigned", || member.assignment().partitions == all()).await;
    let id = member.member_id().expect("a member");

    // A second coordinator, restored from what the first made durable, comes up at the
    // address that was dead, and the first stops: the client, its connection lost,
    // tries the next address of its list and carries on there as the same member.
    let b_config = ServerConfig {
        listen: dead,
        store: StoreConfig::Custom(store.clone()),
        shards: 2,
        ..ServerConfig::default()
    };
    let b = bounded("server bind", Server::bind(b_config))
        .await
        .expect("binds the once dead address")
        .spawn();
    let before = lease(&member);
    bounded("A stops", a.shutdown()).await.expect("stops");
    wait_for("renewed at B", || renewed_since(&member, before)).await;
    assert!(heard_at(b.local_addr(), "several", &id, Duration::from_millis(400)).await);
    assert_eq!(member.member_id().as_deref(), Some(id.as_str()));
    assert_eq!(member.assignment().partitions, all());
    assert_eq!(log.lost(), 0, "{:?}", log.events());
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_one_client_join_and_live_on_their_groups_coordinators() {
    let (there, here) = groups();
    let (slot_there, slot_here) = (slot_of(&there, SLOTS), slot_of(&here, SLOTS));
    let store = Arc::new(MemoryStore::new());
    let dir_a = Directory::cluster(SLOTS);
    let a = serve(&store, &dir_a).await;
    let b = serve(&store, &Directory::single()).await;
    dir_a.test_set_here(slot_here);
    dir_a.test_set_elsewhere(slot_there, &b.local_addr().to_string());

    let client = bounded("connect", Client::connect(a.local_addr(), client_config()))
        .await
        .expect("connects");
    let config = |group: &str| {
        MemberConfig::new(group, [("t", PARTITIONS)])
            .with_session_timeout(SESSION)
            .with_heartbeat_interval(Duration::from_millis(200))
    };
    // Joined through A; the one whose group B serves is sent there, and joins there.
    let far = Arc::new(
        bounded("join", client.join(config(&there)))
            .await
            .expect("joins"),
    );
    let near = Arc::new(
        bounded("join", client.join(config(&here)))
            .await
            .expect("joins"),
    );
    let (far_log, near_log) = (Log::follow(far.clone()), Log::follow(near.clone()));
    wait_for("assigned", || {
        far.assignment().partitions == all() && near.assignment().partitions == all()
    })
    .await;
    let (far_lease, near_lease) = (lease(&far), lease(&near));
    wait_for("renewed", || {
        renewed_since(&far, far_lease) && renewed_since(&near, near_lease)
    })
    .await;
    let (far_id, near_id) = (far.member_id().unwrap(), near.member_id().unwrap());
    let fresh = Duration::from_millis(400);
    assert!(heard_at(b.local_addr(), &there, &far_id, fresh).await);
    assert!(heard_at(a.local_addr(), &here, &near_id, fresh).await);
    // A never took the other group in.
    let mut raw = RawClient::connected(a.local_addr()).await;
    dir_a.test_set_here(slot_there);
    let described = raw
        .request(Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: there.clone(),
            detection: false,
            page: None,
            summary: false,
        }))
        .await;
    assert!(
        matches!(&described, Response::Error(e) if e.code == ErrorCode::UnknownGroup),
        "{described:?}"
    );
    assert_eq!(far_log.lost() + near_log.lost(), 0);
    drop((a, b));
}
