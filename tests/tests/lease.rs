//! Member leases end to end: a member cut off from the coordinator stands down before
//! its partitions can move, and one whose acknowledgements are merely slow does not.
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
use rollcall_client::{Client, ClientConfig, Event, LostReason, Member, MemberConfig};
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

impl App {
    async fn start(addr: SocketAddr) -> Self {
        let mut config = ClientConfig::default();
        config.reconnect_base = Duration::from_millis(20);
        config.reconnect_max = Duration::from_millis(200);
        let client = bounded("connect", Client::connect(addr, config))
            .await
            .expect("connects");
        let member_config = MemberConfig::new("leases", [("t", 4)])
            .with_session_timeout(SESSION)
            .with_lease_margin(MARGIN)
            .with_rebalance_timeout(Duration::from_secs(5));
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
