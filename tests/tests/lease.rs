//! Member leases end to end: a member cut off from the coordinator stands down before
//! its partitions can move, and one whose acknowledgements are merely slow does not; a
//! blip longer than the lease timeout but shorter than the session suspends a member and
//! resumes it; a crashed process's partitions move after its lease timeout, not its
//! session timeout; and an expelled member's partitions move as soon as its application
//! has taken the loss, not at the end of its lease.
//!
//! A proxy sits between one member and the coordinator. It can delay traffic, or drop it
//! silently in both directions while keeping the connection open (a network partition,
//! not a closed socket), and it records when it last forwarded a byte from the member to
//! the coordinator. That instant bounds the coordinator's side from below: the
//! coordinator cannot have heard the member later, so it cannot expel it before that
//! instant plus the session timeout, and cannot grant its partitions before then.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rollcall_client::{
    Client, ClientConfig, Event, ExpelReason, LostReason, Member, MemberConfig, PartitionSet,
};
use rollcall_coordinator::server::{ServerConfig, ServerHandle};
use rollcall_tests::proxy::{Direction, Proxy};
use rollcall_tests::{bounded, start};

const SESSION: Duration = Duration::from_millis(600);
const MARGIN: Duration = Duration::from_millis(60);

/// A member whose application logs every event with the instant it saw it and releases
/// revoked partitions at once.
struct App {
    member: Arc<Member>,
    events: Arc<Mutex<Vec<(Instant, Event)>>>,
    _client: Client,
}

fn client_config() -> ClientConfig {
    let mut config = ClientConfig::default();
    config.reconnect_base = Duration::from_millis(20);
    config.reconnect_max = Duration::from_millis(200);
    config
}

async fn connect(addr: SocketAddr) -> Client {
    bounded("connect", Client::connect(addr, client_config()))
        .await
        .expect("connects")
}

impl App {
    async fn start(addr: SocketAddr) -> Self {
        let member_config = MemberConfig::new("leases", [("t", 4)])
            .with_session_timeout(SESSION)
            .with_lease_margin(MARGIN)
            .with_rebalance_timeout(Duration::from_secs(5));
        Self::start_with(addr, member_config).await
    }

    async fn start_with(addr: SocketAddr, member_config: MemberConfig) -> Self {
        let client = connect(addr).await;
        let member = Arc::new(
            bounded("join", client.join(member_config))
                .await
                .expect("joins"),
        );
        let events = Arc::new(Mutex::new(Vec::new()));
        let (m, e) = (member.clone(), events.clone());
        tokio::spawn(async move {
            while let Some(event) = m.next_event().await {
                if let Event::RevokeRequested { partitions, .. } = &event {
                    m.ack_revocation(partitions.iter().cloned())
                        .expect("the client is open");
                }
                e.lock().push((Instant::now(), event));
            }
        });
        Self {
            member,
            events,
            _client: client,
        }
    }

    fn owned(&self) -> usize {
        self.member.assignment().partitions.len()
    }

    fn lost(&self) -> Vec<(Instant, usize, LostReason)> {
        self.events
            .lock()
            .iter()
            .filter_map(|(at, e)| match e {
                Event::Lost { partitions, reason } => Some((*at, partitions.len(), *reason)),
                _ => None,
            })
            .collect()
    }

    fn log(&self) -> Vec<Event> {
        self.events.lock().iter().map(|(_, e)| e.clone()).collect()
    }

    /// When the application was first told it holds `n` partitions.
    fn first_holding(&self, n: usize) -> Option<Instant> {
        let mut held = 0usize;
        for (at, e) in self.events.lock().iter() {
            match e {
                Event::Assigned { partitions, .. } => held += partitions.len(),
                Event::Lost { partitions, .. } => held -= partitions.len(),
                Event::RevokeRequested { partitions, .. } => held -= partitions.len(),
                _ => {}
            }
            if held == n {
                return Some(*at);
            }
        }
        None
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    bounded(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

async fn coordinator() -> ServerHandle {
    start(ServerConfig::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_member_stands_down_before_the_coordinator_can_grant_its_partitions() {
    let server = coordinator().await;
    let proxy = Proxy::start(server.local_addr()).await;
    let a = App::start(proxy.addr()).await;
    let b = App::start(server.local_addr()).await;
    until("balanced", || a.owned() == 2 && b.owned() == 2).await;
    until("b's application holds 2", || b.first_holding(2).is_some()).await;

    proxy.set_blackhole(Direction::Both, true);
    until("b takes everything", || b.first_holding(4).is_some()).await;
    let granted_seen = b.first_holding(4).expect("b holds 4");
    until("a told of its loss", || !a.lost().is_empty()).await;
    let last_heard = proxy
        .last_forwarded(Direction::ToUpstream)
        .expect("a was heard");

    let lost = a.lost();
    assert_eq!(lost.len(), 1, "{lost:?}");
    let (stood_down, count, reason) = lost[0];
    assert_eq!((count, reason), (2, LostReason::LeaseExpired));
    // The coordinator heard `a` no later than `last_heard`, so it could grant a's
    // partitions no earlier than `last_heard + SESSION`. The member stood down before.
    let earliest_grant = last_heard + SESSION;
    assert!(
        stood_down < earliest_grant,
        "a stood down {:?} after the earliest possible grant",
        stood_down - earliest_grant
    );
    assert!(
        stood_down < granted_seen,
        "b was handed the partitions {:?} before a stood down",
        stood_down - granted_seen
    );
    // And it stood down close to where its lease said it would: within the session.
    assert!(stood_down - last_heard < SESSION);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_acknowledgements_within_the_lease_do_not_make_a_member_stand_down() {
    let server = coordinator().await;
    // 100 ms each way: every acknowledgement arrives 200 ms (a third of the session)
    // after its heartbeat was sent, within the 540 ms lease it renews. A join followed by
    // its first heartbeat takes two round trips (400 ms) before the first renewal, which
    // is why a delay approaching a quarter of the lease each way would not do.
    let proxy = Proxy::start(server.local_addr()).await;
    proxy.set_delay(Direction::Both, Duration::from_millis(100));
    let a = App::start(proxy.addr()).await;
    let b = App::start(server.local_addr()).await;
    until("balanced", || a.owned() == 2 && b.owned() == 2).await;
    until("a holds a lease", || a.member.lease_deadline().is_some()).await;
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        let lease = a.member.lease_deadline();
        assert!(lease.is_some(), "the lease lapsed: {:?}", a.events.lock());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(a.lost().is_empty(), "{:?}", a.lost());
    assert!(b.lost().is_empty(), "{:?}", b.lost());
    assert_eq!((a.owned(), b.owned()), (2, 2));
}

/// A group whose members have a long session and a short lease timeout.
fn long_session(session: Duration, lease: Duration) -> MemberConfig {
    MemberConfig::new("leases", [("t", 4)])
        .with_session_timeout(session)
        .with_heartbeat_interval(Duration::from_millis(200))
        .with_lease_timeout(lease)
        .with_rebalance_timeout(Duration::from_secs(5))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blip_longer_than_the_lease_but_shorter_than_the_session_suspends_and_resumes() {
    let server = coordinator().await;
    let proxy = Proxy::start(server.local_addr()).await;
    let config = long_session(Duration::from_secs(4), Duration::from_secs(1));
    let a = App::start_with(proxy.addr(), config.clone()).await;
    let b = App::start_with(server.local_addr(), config).await;
    until("balanced", || a.owned() == 2 && b.owned() == 2).await;
    until("both applications hold 2", || {
        a.first_holding(2).is_some() && b.first_holding(2).is_some()
    })
    .await;
    let held: PartitionSet = a.member.assignment().partitions;
    let generation = a.member.assignment().generation;
    let (a_before, b_before) = (a.log().len(), b.log().len());

    // Nothing gets through for 1.6 s, with the connection open: longer than the lease
    // (1 s less its margin), well within the session (4 s) and the client's own stall
    // detection (a session timeout).
    proxy.freeze(Direction::Both);
    let frozen_at = Instant::now();
    until("a suspended", || a.member.is_suspended()).await;
    assert!(frozen_at.elapsed() < Duration::from_secs(1));
    let deadline = a.member.lease_deadline().expect("still a member");
    assert!(deadline <= Instant::now());
    tokio::time::sleep(Duration::from_millis(1600).saturating_sub(frozen_at.elapsed())).await;
    proxy.thaw(Direction::Both);
    until("a resumed", || !a.member.is_suspended()).await;
    until("a's application told", || a.log().len() >= a_before + 2).await;

    assert_eq!(
        a.log()[a_before..],
        [
            Event::Suspended {
                partitions: held.clone()
            },
            Event::Resumed {
                partitions: held.clone()
            }
        ]
    );
    assert_eq!(a.member.assignment().partitions, held);
    assert_eq!(a.member.assignment().generation, generation);
    assert!(a.member.lease_deadline().unwrap() > Instant::now());
    // Nobody else noticed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(b.log().len(), b_before, "{:?}", b.log());
    assert_eq!(b.member.assignment().generation, generation);
    assert!(a.lost().is_empty() && b.lost().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_process_s_partitions_move_after_its_lease_not_its_session() {
    let server = coordinator().await;
    let session = Duration::from_secs(10);
    let lease = Duration::from_secs(1);
    let config = long_session(session, lease);
    let b = App::start_with(server.local_addr(), config.clone()).await;
    let client = connect(server.local_addr()).await;
    let a = bounded("join", client.join(config)).await.expect("joins");
    until("balanced", || {
        a.assignment().partitions.len() == 2 && b.owned() == 2
    })
    .await;
    until("b's application holds 2", || b.first_holding(2).is_some()).await;

    // The process dies: its client and member go, and with them the connection.
    drop(a);
    drop(client);
    let crashed_at = Instant::now();
    until("b takes everything", || b.first_holding(4).is_some()).await;
    let took = b.first_holding(4).unwrap() - crashed_at;
    // The lease timeout from a's last heartbeat, plus scheduling: far from the session.
    assert!(took < session / 2, "partitions moved after {took:?}");
    assert!(took < lease + Duration::from_millis(800), "{took:?}");
    assert!(b.lost().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expelled_member_s_partitions_move_once_its_application_moves_past_the_loss() {
    let server = coordinator().await;
    let lease = Duration::from_secs(8);
    let config = MemberConfig::new("leases", [("t", 4)])
        .with_session_timeout(Duration::from_secs(10))
        .with_heartbeat_interval(Duration::from_millis(300))
        .with_lease_timeout(lease)
        .with_rebalance_timeout(Duration::from_secs(5));
    let b = App::start_with(server.local_addr(), config.clone()).await;
    let client = connect(server.local_addr()).await;
    let a = bounded(
        "join",
        client.join(config.with_progress_timeout(Duration::from_millis(600))),
    )
    .await
    .expect("joins");
    let first = bounded("a's assignment", a.next_event()).await;
    assert!(matches!(first, Some(Event::Assigned { .. })), "{first:?}");
    until("balanced", || {
        a.assignment().partitions.len() == 2 && b.owned() == 2
    })
    .await;
    until("b's application holds 2", || b.first_holding(2).is_some()).await;

    // a's application is stuck: heartbeats go on, progress does not, and the
    // coordinator expels it. It holds a's partitions for a's lease (8 s).
    until("a expelled", || a.member_id().is_none()).await;
    let expelled_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.owned(), 2, "granted before the loss was taken");

    // The application comes back and takes the loss. Being told is not having
    // stopped (its workers may still be at it): nothing moves yet.
    let lost = bounded("a's loss", a.next_event()).await;
    assert_eq!(
        lost,
        Some(Event::Lost {
            partitions: (0..4)
                .map(|p| rollcall_client::TopicPartition::new("t", p))
                .filter(|p| !b.member.assignment().partitions.contains(p))
                .collect(),
            reason: LostReason::Expelled(ExpelReason::ProgressExpired)
        })
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    // (Taking the loss was progress, so `a` may have rejoined meanwhile; what it lost
    // is still held, for nobody.)
    assert!(
        b.first_holding(3).is_none() && b.first_holding(4).is_none(),
        "granted before the application moved past the loss: {:?}",
        b.log()
    );
    // It asks for the next event: it has stopped, and the client relinquishes. Asking
    // is also progress, so `a` rejoins as a new member: the partitions held for the old
    // one go to whichever live member the assignment names, at once.
    let taken_at = Instant::now();
    let a_events = Arc::new(Mutex::new(Vec::new()));
    let (a, log) = (Arc::new(a), a_events.clone());
    let a_loop = a.clone();
    tokio::spawn(async move {
        while let Some(event) = a_loop.next_event().await {
            if let Event::RevokeRequested { partitions, .. } = &event {
                let _ = a_loop.ack_revocation(partitions.iter().cloned());
            }
            log.lock().push(event);
        }
    });
    until("every partition owned by a live member", || {
        b.owned() + a.assignment().partitions.len() == 4
    })
    .await;
    let granted = Instant::now();
    assert!(
        granted - taken_at < Duration::from_secs(2),
        "granted {:?} after the loss was confirmed",
        granted - taken_at
    );
    // Well before the lease would have let them go.
    assert!(granted < expelled_at + lease - Duration::from_secs(4));
    assert!(b.lost().is_empty());
}

/// A member dropped without leaving, on a connection other members keep open: it
/// leaves `unconfirmed`, so its partitions move after its lease, not its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_member_s_partitions_move_after_its_lease_on_a_shared_connection() {
    let server = coordinator().await;
    let session = Duration::from_secs(10);
    let lease = Duration::from_secs(1);
    let config = long_session(session, lease);
    let b = App::start_with(server.local_addr(), config.clone()).await;
    let client = connect(server.local_addr()).await;
    let a = bounded("join", client.join(config.clone()))
        .await
        .expect("joins");
    // A second member keeps the connection busy and open.
    let other = bounded(
        "join other",
        client.join(MemberConfig::new("elsewhere", [("x", 1)])),
    )
    .await
    .expect("joins");
    until("balanced", || {
        a.assignment().partitions.len() == 2 && b.owned() == 2
    })
    .await;
    until("b's application holds 2", || b.first_holding(2).is_some()).await;

    drop(a);
    let dropped_at = Instant::now();
    until("b takes everything", || b.first_holding(4).is_some()).await;
    let took = b.first_holding(4).unwrap() - dropped_at;
    assert!(took < session / 2, "partitions moved after {took:?}");
    assert!(took < lease + Duration::from_millis(800), "{took:?}");
    assert!(b.lost().is_empty());
    drop(other);
    drop(client);
}
