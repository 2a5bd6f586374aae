//! The client against a real coordinator over real TCP: sharing partitions, crashes,
//! progress expiry, revocations, static membership, connection loss, leases, expulsion,
//! graceful leave, coordinator restarts, the events stream, reading committed offsets,
//! members renewed together in Heartbeats frames and a connection task that is gone.
//!
//! Timeouts are short (session 400-600 ms) and every wait is bounded.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{FusedStream, StreamExt};
use futures_util::SinkExt;
use rollcall_client::{
    Client, ClientConfig, CommitError, Event, ExpelReason, LostReason, Member, MemberConfig,
    Offset, PartitionSet, RequestError, TopicPartition,
};
use rollcall_coordinator::server::{ServerConfig, ServerHandle, StoreConfig};
use rollcall_coordinator::store::MemoryStore;
use rollcall_protocol::{ApiKey, Body, Codec, ErrorCode, Frame, Request, Response};
use rollcall_tests::proxy::{Direction, Proxy};
use rollcall_tests::{bounded, start};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;

const SESSION: Duration = Duration::from_millis(400);

async fn start_server(store: StoreConfig) -> ServerHandle {
    start(ServerConfig {
        store,
        ..ServerConfig::default()
    })
    .await
}

fn client_config() -> ClientConfig {
    let mut c = ClientConfig::default();
    c.reconnect_base = Duration::from_millis(20);
    c.reconnect_max = Duration::from_millis(200);
    c.connect_timeout = Duration::from_secs(2);
    c
}

async fn connect(addr: SocketAddr) -> Client {
    bounded("client connect", Client::connect(addr, client_config()))
        .await
        .expect("client connects")
}

fn member_config(group: &str, partitions: u32) -> MemberConfig {
    MemberConfig::new(group, [("t", partitions)])
        .with_session_timeout(SESSION)
        .with_rebalance_timeout(Duration::from_secs(5))
}

fn tp(p: u32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn all(n: u32) -> PartitionSet {
    (0..n).map(tp).collect()
}

/// What an application was told, checked as it is told: a partition is assigned only
/// when not held, and revoked or lost only when held.
#[derive(Debug, Default)]
struct Ledger {
    owned: PartitionSet,
    log: Vec<(Instant, Event)>,
    violations: Vec<String>,
}

impl Ledger {
    fn apply(&mut self, event: &Event) {
        match event {
            Event::Assigned { partitions, .. } => {
                for p in partitions {
                    if !self.owned.insert(p.clone()) {
                        self.violations.push(format!("{p} assigned while held"));
                    }
                }
            }
            Event::RevokeRequested { partitions, .. } => {
                for p in partitions {
                    if !self.owned.contains(p) {
                        self.violations.push(format!("{p} revoked while not held"));
                    }
                }
            }
            Event::Lost { partitions, .. } => {
                for p in partitions {
                    if !self.owned.remove(p) {
                        self.violations.push(format!("{p} lost while not held"));
                    }
                }
            }
            _ => {}
        }
        self.log.push((Instant::now(), event.clone()));
    }

    fn released(&mut self, partitions: &PartitionSet) {
        for p in partitions {
            self.owned.remove(p);
        }
    }

    fn lost_events(&self) -> Vec<(Instant, PartitionSet, LostReason)> {
        self.log
            .iter()
            .filter_map(|(at, e)| match e {
                Event::Lost { partitions, reason } => Some((*at, partitions.clone(), *reason)),
                _ => None,
            })
            .collect()
    }

    /// Checks that the events from `from` on are only suspensions and resumptions of
    /// `held`, each suspension followed by its resumption; returns how many pairs.
    fn suspensions_since(&self, from: usize, held: &PartitionSet) -> usize {
        let events: Vec<&Event> = self.log[from..].iter().map(|(_, e)| e).collect();
        assert_eq!(events.len() % 2, 0, "{events:?}");
        for pair in events.chunks(2) {
            match pair {
                [Event::Suspended { partitions: s }, Event::Resumed { partitions: r }]
                    if s == held && r == held => {}
                other => panic!("not a suspension and its resumption: {other:?}"),
            }
        }
        events.len() / 2
    }

    /// When `p` was last assigned.
    fn assigned_at(&self, p: &TopicPartition) -> Option<Instant> {
        self.log.iter().rev().find_map(|(at, e)| match e {
            Event::Assigned { partitions, .. } if partitions.contains(p) => Some(*at),
            _ => None,
        })
    }
}

/// A member driven by its own task like a well-behaved application: it commits and
/// acknowledges revocations at once and records every event in a ledger.
struct Worker {
    ledger: Arc<shared::Mutex<Ledger>>,
    changed: watch::Receiver<u64>,
    member: Option<Arc<Member>>,
    client: Option<Client>,
    task: JoinHandle<()>,
}

/// A `std::sync::Mutex` whose lock survives a panicking holder (the panic is reported
/// by the test anyway).
mod shared {
    pub(crate) struct Mutex<T>(std::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(t: T) -> Self {
            Self(std::sync::Mutex::new(t))
        }

        pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }
}

impl Worker {
    async fn start(addr: SocketAddr, config: MemberConfig) -> Self {
        let client = connect(addr).await;
        let member = bounded("join", client.join(config)).await.expect("joins");
        Self::drive(client, member)
    }

    fn drive(client: Client, member: Member) -> Self {
        let member = Arc::new(member);
        let ledger = Arc::new(shared::Mutex::new(Ledger::default()));
        let (tx, changed) = watch::channel(0u64);
        let task = {
            let member = member.clone();
            let ledger = ledger.clone();
            tokio::spawn(async move {
                while let Some(event) = member.next_event().await {
                    ledger.lock().apply(&event);
                    if let Event::RevokeRequested { partitions, .. } = &event {
                        let offsets: Vec<Offset> = partitions
                            .iter()
                            .map(|p| Offset::new(p.clone(), 100 + i64::from(p.partition)))
                            .collect();
                        if let Err(e) = member.commit(offsets).await {
                            ledger
                                .lock()
                                .violations
                                .push(format!("commit before ack failed: {e}"));
                        }
                        ledger.lock().released(partitions);
                        if let Err(e) = member.ack_revocation(partitions.iter().cloned()) {
                            ledger
                                .lock()
                                .violations
                                .push(format!("acknowledgement failed: {e}"));
                        }
                    }
                    tx.send_modify(|n| *n += 1);
                }
            })
        };
        Self {
            ledger,
            changed,
            member: Some(member),
            client: Some(client),
            task,
        }
    }

    fn owned(&self) -> PartitionSet {
        self.ledger.lock().owned.clone()
    }

    fn member(&self) -> &Member {
        self.member.as_ref().expect("alive")
    }

    /// Waits until the partitions the application holds satisfy `pred`.
    async fn wait_for(&mut self, what: &str, pred: impl Fn(&PartitionSet) -> bool) {
        bounded(what, async {
            loop {
                if pred(&self.owned()) {
                    return;
                }
                if self.changed.changed().await.is_err() {
                    panic!("worker stopped while waiting for {what}");
                }
            }
        })
        .await;
    }

    /// Crashes: the task stops and the member and its connection are dropped, without
    /// leaving.
    fn kill(&mut self) {
        self.task.abort();
        self.member = None;
        self.client = None;
    }

    fn assert_consistent(&self) {
        let ledger = self.ledger.lock();
        assert!(ledger.violations.is_empty(), "{:?}", ledger.violations);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits until the workers' holdings are disjoint and cover `n` partitions, with each
/// holding one of `sizes`.
async fn wait_balanced(workers: &mut [&mut Worker], n: u32, sizes: &[usize]) {
    bounded("balanced assignment", async {
        loop {
            let sets: Vec<PartitionSet> = workers.iter().map(|w| w.owned()).collect();
            let union: PartitionSet = sets.iter().flatten().cloned().collect();
            let total: usize = sets.iter().map(PartitionSet::len).sum();
            if union == all(n)
                && total == n as usize
                && sets.iter().all(|s| sizes.contains(&s.len()))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// A relay between clients and the coordinator that decodes every frame, both ways,
/// passes it on unchanged and keeps it with the instant it passed.
struct Tap {
    addr: SocketAddr,
    frames: Arc<shared::Mutex<Vec<(Instant, Frame)>>>,
    task: JoinHandle<()>,
}

impl Tap {
    async fn start(upstream: SocketAddr) -> Self {
        Self::rewriting(upstream, |_| {}).await
    }

    /// A tap that passes the coordinator's frames on after `rewrite` (to play an older
    /// coordinator, say).
    async fn rewriting(upstream: SocketAddr, rewrite: fn(&mut Frame)) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("tap binds");
        let addr = listener.local_addr().expect("tap address");
        let frames = Arc::new(shared::Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let frames = frames.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        continue;
                    };
                    tokio::spawn(Self::relay(client, server, frames.clone(), rewrite));
                }
            }
        });
        Self { addr, frames, task }
    }

    async fn relay(
        client: TcpStream,
        server: TcpStream,
        frames: Arc<shared::Mutex<Vec<(Instant, Frame)>>>,
        rewrite: fn(&mut Frame),
    ) {
        let (mut to_client, mut from_client) = Framed::new(client, Codec::default()).split();
        let (mut to_server, mut from_server) = Framed::new(server, Codec::default()).split();
        let up = async {
            while let Some(Ok(frame)) = from_client.next().await {
                frames.lock().push((Instant::now(), frame.clone()));
                if to_server.send(frame).await.is_err() {
                    return;
                }
            }
        };
        let down = async {
            while let Some(Ok(mut frame)) = from_server.next().await {
                rewrite(&mut frame);
                frames.lock().push((Instant::now(), frame.clone()));
                if to_client.send(frame).await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            () = up => {}
            () = down => {}
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_partitions_evenly() {
    let server = start_server(StoreConfig::Memory).await;
    let addr = server.local_addr();
    let mut a = Worker::start(addr, member_config("even", 6)).await;
    let mut b = Worker::start(addr, member_config("even", 6)).await;
    let mut c = Worker::start(addr, member_config("even", 6)).await;
    wait_balanced(&mut [&mut a, &mut b, &mut c], 6, &[2]).await;
    for w in [&a, &b, &c] {
        w.assert_consistent();
        assert_eq!(w.member().assignment().partitions, w.owned());
        assert!(w.member().lease_deadline().unwrap() > Instant::now());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_members_share_one_connection() {
    let server = start_server(StoreConfig::Memory).await;
    let client = connect(server.local_addr()).await;
    let m1 = bounded("join 1", client.join(member_config("shared", 4)))
        .await
        .unwrap();
    let m2 = bounded("join 2", client.join(member_config("shared", 4)))
        .await
        .unwrap();
    let other = bounded("join other group", client.join(member_config("other", 3)))
        .await
        .unwrap();
    let mut a = Worker::drive(client.clone(), m1);
    let mut b = Worker::drive(client.clone(), m2);
    let mut c = Worker::drive(client, other);
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;
    c.wait_for("other group's partitions", |s| *s == all(3))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_member_s_partitions_move_within_its_session_timeout() {
    let server = start_server(StoreConfig::Memory).await;
    let addr = server.local_addr();
    let mut a = Worker::start(addr, member_config("crash", 6)).await;
    let mut b = Worker::start(addr, member_config("crash", 6)).await;
    let mut c = Worker::start(addr, member_config("crash", 6)).await;
    wait_balanced(&mut [&mut a, &mut b, &mut c], 6, &[2]).await;
    let killed_at = Instant::now();
    c.kill();
    wait_balanced(&mut [&mut a, &mut b], 6, &[3]).await;
    let took = killed_at.elapsed();
    // The session timeout, plus the coordinator's rebalance coalescing and scheduling.
    assert!(
        took <= SESSION + Duration::from_millis(300),
        "partitions moved after {took:?}"
    );
    a.assert_consistent();
    b.assert_consistent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_that_stops_asking_is_expelled_for_progress_and_told_so() {
    let server = start_server(StoreConfig::Memory).await;
    let client = connect(server.local_addr()).await;
    let config = member_config("progress", 2).with_progress_timeout(Duration::from_millis(600));
    let member = bounded("join", client.join(config)).await.unwrap();
    let mut ledger = Ledger::default();
    let first = bounded("first assignment", member.next_event())
        .await
        .unwrap();
    ledger.apply(&first);
    assert_eq!(ledger.owned, all(2));

    // The application is stuck in its own work: heartbeats go on, progress does not.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // A commit from the expelled member is refused with a typed error.
    let refused = bounded("commit after expulsion", member.commit([(tp(0), 5)])).await;
    assert_eq!(refused, Err(CommitError::Expelled));

    let event = bounded("expulsion event", member.next_event())
        .await
        .unwrap();
    ledger.apply(&event);
    assert_eq!(
        event,
        Event::Lost {
            partitions: all(2),
            reason: LostReason::Expelled(ExpelReason::ProgressExpired)
        }
    );
    // Asking was progress: the member rejoins and gets its partitions again.
    let again = bounded("reassignment", member.next_event()).await.unwrap();
    ledger.apply(&again);
    assert!(matches!(again, Event::Assigned { .. }), "{again:?}");
    assert_eq!(ledger.owned, all(2));
    assert!(ledger.violations.is_empty(), "{:?}", ledger.violations);
    // An application that keeps waiting for events is making progress.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiting = tokio::time::timeout(Duration::from_millis(1500), member.next_event()).await;
    assert!(
        waiting.is_err(),
        "unexpected event while waiting: {waiting:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_stream_counts_as_progress_only_while_it_is_awaited() {
    let server = start_server(StoreConfig::Memory).await;
    let client = connect(server.local_addr()).await;
    let config = member_config("stream", 2).with_progress_timeout(Duration::from_millis(600));
    let member = bounded("join", client.join(config)).await.unwrap();
    let mut events = member.events();
    let first = bounded("first assignment", events.next()).await;
    assert_eq!(
        first,
        Some(Event::Assigned {
            partitions: all(2),
            generation: member.assignment().generation
        })
    );

    // Awaiting the stream is progress, for longer than the progress timeout.
    let waiting = tokio::time::timeout(Duration::from_millis(1500), events.next()).await;
    assert!(
        waiting.is_err(),
        "unexpected event while waiting: {waiting:?}"
    );
    // The stream stays pending but nobody awaits it: the application is stuck.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let expelled = bounded("expulsion event", events.next()).await;
    assert_eq!(
        expelled,
        Some(Event::Lost {
            partitions: all(2),
            reason: LostReason::Expelled(ExpelReason::ProgressExpired)
        })
    );
    // Polling was progress: the member rejoins and gets its partitions again.
    let again = bounded("reassignment", events.next()).await;
    assert!(matches!(again, Some(Event::Assigned { .. })), "{again:?}");

    // The stream borrows the member: leaving while taking events from it.
    let leave = member.leave(Duration::from_secs(5));
    tokio::pin!(leave);
    let left = bounded("leave", async {
        loop {
            tokio::select! {
                r = &mut leave => return r,
                e = events.next() => {
                    if let Some(Event::RevokeRequested { partitions, .. }) = e {
                        member.ack_revocation(partitions).expect("acknowledged");
                    }
                }
            }
        }
    })
    .await;
    assert_eq!(left, Ok(()));
    assert_eq!(bounded("events end", events.next()).await, None);
    assert!(events.is_terminated());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_is_honoured_only_after_the_acknowledgement() {
    let server = start_server(StoreConfig::Memory).await;
    let addr = server.local_addr();
    let client = connect(addr).await;
    let a = bounded("join a", client.join(member_config("revoke", 4)))
        .await
        .unwrap();
    let mut ledger = Ledger::default();
    let first = bounded("a's assignment", a.next_event()).await.unwrap();
    ledger.apply(&first);
    assert_eq!(ledger.owned, all(4));

    let mut b = Worker::start(addr, member_config("revoke", 4)).await;
    let revoke = bounded("revocation", a.next_event()).await.unwrap();
    ledger.apply(&revoke);
    let Event::RevokeRequested { partitions, .. } = revoke else {
        panic!("expected a revocation, got {revoke:?}");
    };
    assert_eq!(partitions.len(), 2);
    assert_eq!(a.assignment().revoking, partitions);

    // Not acknowledged: the partitions stay with A, longer than a session timeout.
    tokio::time::sleep(SESSION + Duration::from_millis(200)).await;
    assert!(
        b.owned().is_empty(),
        "granted before the ack: {:?}",
        b.owned()
    );

    // A commit just before the acknowledgement is accepted.
    let offsets: Vec<Offset> = partitions
        .iter()
        .map(|p| Offset::new(p.clone(), 42))
        .collect();
    bounded("commit before ack", a.commit(offsets))
        .await
        .expect("commit on a partition being revoked is accepted");
    a.ack_revocation(partitions.iter().cloned())
        .expect("acknowledged");
    ledger.released(&partitions);
    b.wait_for("b's partitions", |s| *s == partitions).await;

    let committed = bounded("fetch", client.fetch_offsets("revoke", ["t"]))
        .await
        .unwrap();
    for p in &partitions {
        assert_eq!(committed[p].offset, 42);
    }
    // After the acknowledgement, commits on them are refused.
    let p = partitions.iter().next().unwrap().clone();
    let refused = bounded("commit after ack", a.commit([(p, 43)])).await;
    assert!(
        matches!(
            refused,
            Err(CommitError::PartitionRevoked { .. } | CommitError::NotOwner { .. })
        ),
        "{refused:?}"
    );
    assert_eq!(a.assignment().partitions, ledger.owned);
    b.assert_consistent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_restarted_within_its_session_gets_its_partitions_back_without_a_rebalance()
{
    let server = start_server(StoreConfig::Memory).await;
    let addr = server.local_addr();
    // A long session so that the restart is comfortably within it.
    let config = |id: &str| {
        member_config("static", 4)
            .with_session_timeout(Duration::from_secs(3))
            .with_instance_id(id)
    };
    let mut a = Worker::start(addr, config("a")).await;
    let mut b = Worker::start(addr, config("b")).await;
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;
    let a_partitions = a.owned();
    let generation = a.member().assignment().generation;
    let b_events = b.ledger.lock().log.len();

    a.kill();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut a2 = Worker::start(addr, config("a")).await;
    a2.wait_for("a's partitions back", |s| *s == a_partitions)
        .await;
    assert_eq!(a2.member().assignment().generation, generation);
    // B saw nothing: no revocation, no loss, no new assignment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.ledger.lock().log.len(), b_events);
    assert_eq!(b.member().assignment().generation, generation);
    a2.assert_consistent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_briefly_resumes_without_losing_anything() {
    let server = start_server(StoreConfig::Memory).await;
    let proxy = Proxy::start(server.local_addr()).await;
    let mut a = Worker::start(proxy.addr(), member_config("brief", 4)).await;
    let mut b = Worker::start(server.local_addr(), member_config("brief", 4)).await;
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;
    let before = a.owned();
    let events_before = a.ledger.lock().log.len();
    for _ in 0..3 {
        proxy.cut();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Long enough for a session to have expired had the member not resumed.
    tokio::time::sleep(SESSION * 2).await;
    assert_eq!(a.owned(), before);
    // Each cut suspended the member at once, and it resumed on reconnecting.
    let pairs = a.ledger.lock().suspensions_since(events_before, &before);
    assert!(pairs >= 1, "no suspension");
    assert!(!a.member().is_suspended());
    assert_eq!(a.member().assignment().partitions, before);
    a.assert_consistent();
    b.assert_consistent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_for_long_learns_its_partitions_were_lost_then_rejoins() {
    let server = start_server(StoreConfig::Memory).await;
    let proxy = Proxy::start(server.local_addr()).await;
    let mut a = Worker::start(proxy.addr(), member_config("long", 4)).await;
    let mut b = Worker::start(server.local_addr(), member_config("long", 4)).await;
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;
    let a_had = a.owned();

    proxy.set_refusing(true);
    proxy.cut();
    // Disconnected: commits fail as unavailable until the lease expires.
    let r = bounded(
        "commit while cut off",
        a.member().commit([(a_had.first().unwrap().clone(), 1)]),
    )
    .await;
    assert!(matches!(r, Err(CommitError::Unavailable { .. })), "{r:?}");
    a.wait_for("a's partitions lost", PartitionSet::is_empty)
        .await;
    let r = bounded(
        "commit after the lease",
        a.member().commit([(a_had.first().unwrap().clone(), 1)]),
    )
    .await;
    assert_eq!(r, Err(CommitError::LeaseExpired));
    b.wait_for("b takes everything", |s| *s == all(4)).await;

    proxy.set_refusing(false);
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;
    let lost = a.ledger.lock().lost_events();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].1, a_had);
    assert_eq!(lost[0].2, LostReason::LeaseExpired);
    a.assert_consistent();
    b.assert_consistent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_member_stands_down_before_its_partitions_move() {
    let server = start_server(StoreConfig::Memory).await;
    let proxy = Proxy::start(server.local_addr()).await;
    let session = Duration::from_millis(600);
    let config = member_config("lease", 4)
        .with_session_timeout(session)
        .with_lease_margin(Duration::from_millis(100));
    let mut a = Worker::start(proxy.addr(), config.clone()).await;
    let mut b = Worker::start(server.local_addr(), config).await;
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;
    let a_had = a.owned();
    let lease = a.member().lease_deadline().expect("a holds a lease");
    assert!(lease > Instant::now() && lease <= Instant::now() + session);

    // The connection freezes: the socket stays open, nothing gets through.
    proxy.freeze(Direction::Both);
    b.wait_for("b takes everything", |s| *s == all(4)).await;
    let lost = a.ledger.lock().lost_events();
    assert_eq!(lost.len(), 1, "{lost:?}");
    let (lost_at, partitions, reason) = lost[0].clone();
    assert_eq!(
        (partitions, reason),
        (a_had.clone(), LostReason::LeaseExpired)
    );
    for p in &a_had {
        let granted_at = b.ledger.lock().assigned_at(p).unwrap();
        assert!(
            lost_at < granted_at,
            "{p} granted to b {:?} before a stood down",
            lost_at - granted_at
        );
    }
    assert_eq!(a.member().lease_deadline(), None);

    // The member finds the connection dead, reconnects, learns it was expelled and
    // joins again.
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;
    assert_eq!(a.ledger.lock().lost_events().len(), 1);
    a.assert_consistent();
    b.assert_consistent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_leave_hands_partitions_over_at_once() {
    let server = start_server(StoreConfig::Memory).await;
    let addr = server.local_addr();
    // A long session: a hand-over that waited for it would time the test out.
    let config = member_config("leave", 4).with_session_timeout(Duration::from_secs(30));
    let mut b = Worker::start(addr, config.clone()).await;
    let client = connect(addr).await;
    let a = bounded("join a", client.join(config)).await.unwrap();
    let mut ledger = Ledger::default();
    b.wait_for("b settles", |s| s.len() == 2).await;
    while ledger.owned.len() != 2 {
        let e = bounded("a's assignment", a.next_event()).await.unwrap();
        ledger.apply(&e);
    }

    let started = Instant::now();
    let leave = a.leave(Duration::from_secs(5));
    tokio::pin!(leave);
    let result = bounded("leave", async {
        loop {
            tokio::select! {
                r = &mut leave => return r,
                e = a.next_event() => {
                    let Some(e) = e else { continue };
                    ledger.apply(&e);
                    if let Event::RevokeRequested { partitions, .. } = e {
                        let offsets: Vec<Offset> =
                            partitions.iter().map(|p| Offset::new(p.clone(), 7)).collect();
                        a.commit(offsets).await.expect("commit while leaving");
                        a.ack_revocation(partitions.iter().cloned())
                            .expect("ack while leaving");
                        ledger.released(&partitions);
                    }
                }
            }
        }
    })
    .await;
    assert_eq!(result, Ok(()));
    b.wait_for("b takes everything", |s| *s == all(4)).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(ledger.violations.is_empty());
    assert_eq!(ledger.lost_events().len(), 0);
    assert_eq!(bounded("events end", a.next_event()).await, None);
    let committed = bounded("fetch", client.fetch_offsets("leave", ["t"]))
        .await
        .unwrap();
    assert_eq!(committed.values().filter(|c| c.offset == 7).count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_survive_a_coordinator_restart() {
    let store = Arc::new(MemoryStore::new());
    let first = start_server(StoreConfig::Custom(store.clone())).await;
    let proxy = Proxy::start(first.local_addr()).await;
    let config = member_config("restart", 4).with_session_timeout(Duration::from_secs(3));
    let mut a = Worker::start(proxy.addr(), config.clone()).await;
    let mut b = Worker::start(proxy.addr(), config).await;
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;
    let (a_had, b_had) = (a.owned(), b.owned());
    let (a_events, b_events) = (a.ledger.lock().log.len(), b.ledger.lock().log.len());

    bounded("shutdown", first.shutdown())
        .await
        .expect("clean shutdown");
    let second = start_server(StoreConfig::Custom(store)).await;
    proxy.set_upstream(second.local_addr());
    // Both reconnect, resume, and keep their partitions: the restart suspended them
    // (their connections closed), and nothing else happened.
    let resumed = |w: &Worker, events: usize| {
        w.ledger.lock().log.len() >= events + 2
            && !w.member().is_suspended()
            && w.member()
                .lease_deadline()
                .is_some_and(|l| l > Instant::now() + Duration::from_secs(1))
    };
    bounded("resumed", async {
        while !(resumed(&a, a_events) && resumed(&b, b_events)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(a.owned(), a_had);
    assert_eq!(b.owned(), b_had);
    assert_eq!(a.ledger.lock().suspensions_since(a_events, &a_had), 1);
    assert_eq!(b.ledger.lock().suspensions_since(b_events, &b_had), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_or_refused_configurations_fail_the_join() {
    let server = start_server(StoreConfig::Memory).await;
    let client = connect(server.local_addr()).await;
    let bad = member_config("cfg", 2).with_heartbeat_interval(SESSION);
    assert!(matches!(
        client.join(bad).await,
        Err(rollcall_client::JoinError::Config(_))
    ));
    let _ok = bounded("join", client.join(member_config("cfg", 2)))
        .await
        .unwrap();
    // Another member declaring a different partition count is refused.
    let inconsistent = bounded("join", client.join(member_config("cfg", 3))).await;
    assert!(
        matches!(
            inconsistent,
            Err(rollcall_client::JoinError::Fatal(
                rollcall_client::FatalError::Refused { .. }
            ))
        ),
        "{inconsistent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_reads_its_own_group_s_committed_offsets() {
    let server = start_server(StoreConfig::Memory).await;
    let client = connect(server.local_addr()).await;
    let mine = bounded("join", client.join(member_config("mine", 2)))
        .await
        .unwrap();
    let other = bounded("join other", client.join(member_config("theirs", 2)))
        .await
        .unwrap();
    for m in [&mine, &other] {
        let first = bounded("assignment", m.next_event()).await;
        assert!(matches!(first, Some(Event::Assigned { .. })), "{first:?}");
    }
    let mut offset = Offset::new(tp(0), 5);
    offset.metadata = "five".to_owned();
    bounded("commit", mine.commit([offset])).await.unwrap();
    bounded("commit other", other.commit([(tp(0), 9), (tp(1), 9)]))
        .await
        .unwrap();

    let committed = bounded("committed", mine.committed(["t"])).await.unwrap();
    assert_eq!(committed.len(), 1, "{committed:?}");
    assert_eq!(committed[&tp(0)].offset, 5);
    assert_eq!(committed[&tp(0)].metadata, "five");
    // The same as naming the group, and an empty list means every topic.
    let fetched = bounded("fetch", client.fetch_offsets("mine", ["t"]))
        .await
        .unwrap();
    assert_eq!(committed, fetched);
    let every = bounded(
        "committed, every topic",
        mine.committed(Vec::<String>::new()),
    )
    .await
    .unwrap();
    assert_eq!(committed, every);
    let unknown = bounded("committed, another topic", mine.committed(["u"]))
        .await
        .unwrap();
    assert!(unknown.is_empty(), "{unknown:?}");
}

/// Offsets that do not fit one frame are fetched a page at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_larger_than_a_frame_are_fetched_in_pages() {
    let mut config = ServerConfig {
        max_frame_size: 8 << 10,
        ..ServerConfig::default()
    };
    config.core.max_partitions_per_group = 600;
    config.core.max_metadata_bytes = 1000;
    let server = start(config).await;
    let mut admin = rollcall_client::raw::Connection::connect(
        server.local_addr(),
        "tests",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    // 600 offsets, ~17 KiB to list, committed 200 at a time.
    for first in [0, 200, 400] {
        let offsets = (first..first + 200)
            .map(|p| rollcall_protocol::OffsetCommit {
                topic: "t".into(),
                partition: p,
                offset: i64::from(p) + 1,
                metadata: "meta".into(),
            })
            .collect();
        let r = admin
            .request(Request::CommitOffsets(
                rollcall_protocol::CommitOffsetsRequest {
                    group: "wide".into(),
                    member_id: None,
                    generation: 0,
                    offsets,
                },
            ))
            .await
            .unwrap();
        assert!(matches!(r, Response::CommitOffsets(_)), "commit refused");
    }
    let client = connect(server.local_addr()).await;
    let fetched = bounded("fetch", client.fetch_offsets("wide", ["t"]))
        .await
        .unwrap();
    assert_eq!(fetched.len(), 600);
    assert!(fetched
        .iter()
        .all(|(tp, c)| c.offset == i64::from(tp.partition) + 1 && c.metadata == "meta"));
}

#[test]
fn requests_report_a_connection_task_that_is_gone() {
    let server_runtime = tokio::runtime::Runtime::new().unwrap();
    let server = server_runtime.block_on(start_server(StoreConfig::Memory));
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (client, member) = client_runtime.block_on(async {
        let client = connect(server.local_addr()).await;
        let member = bounded("join", client.join(member_config("gone", 2)))
            .await
            .unwrap();
        let first = bounded("assignment", member.next_event()).await;
        assert!(matches!(first, Some(Event::Assigned { .. })), "{first:?}");
        (client, member)
    });
    // The connection task ends with its runtime, while the handles live on.
    drop(client_runtime);
    assert_eq!(member.ack_revocation(all(2)), Err(RequestError::Closed));
    server_runtime.block_on(async {
        let committed = bounded("committed", member.committed(["t"])).await;
        assert_eq!(committed, Err(RequestError::Closed));
        let fetched = bounded("fetch", client.fetch_offsets("gone", ["t"])).await;
        assert_eq!(fetched, Err(RequestError::Closed));
    });
}

/// One client carrying five members of two groups renews them together: for several
/// session timeouts nobody loses anything or is suspended, and the coordinator answered
/// Heartbeats requests of several beats, each member's beat in them accepted, while
/// lone Heartbeat frames were the exception.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_renews_members_of_two_groups_with_heartbeats_frames() {
    let server = start(rollcall_tests::test_config()).await;
    let tap = Tap::start(server.local_addr()).await;
    let client = connect(tap.addr).await;
    let mut workers = Vec::new();
    for (group, partitions) in [
        ("alpha", 6),
        ("alpha", 6),
        ("alpha", 6),
        ("beta", 4),
        ("beta", 4),
    ] {
        let member = bounded("join", client.join(member_config(group, partitions)))
            .await
            .expect("joins");
        workers.push(Worker::drive(client.clone(), member));
    }
    {
        let (alpha, beta) = workers.split_at_mut(3);
        let mut alpha: Vec<&mut Worker> = alpha.iter_mut().collect();
        wait_balanced(&mut alpha, 6, &[2]).await;
        let mut beta: Vec<&mut Worker> = beta.iter_mut().collect();
        wait_balanced(&mut beta, 4, &[2]).await;
    }

    let from = Instant::now();
    tokio::time::sleep(SESSION * 5).await;
    let until = Instant::now();

    for w in &workers {
        w.assert_consistent();
        assert_eq!(w.ledger.lock().lost_events(), Vec::new());
        assert_eq!(w.owned().len(), 2);
        assert!(!w.member().is_suspended());
        assert!(w.member().lease_deadline().unwrap() > Instant::now());
    }
    let ids: Vec<String> = workers
        .iter()
        .map(|w| w.member().member_id().expect("a member"))
        .collect();
    let frames = tap.frames.lock();
    let window = frames
        .iter()
        .filter(|(at, _)| (from..until).contains(at))
        .map(|(_, frame)| frame);
    let (mut batches, mut lone, mut answered) = (0, 0, 0);
    let mut beats: HashMap<&str, usize> = HashMap::new();
    for frame in window {
        match &frame.body {
            Body::Request(Request::Heartbeats(r)) => {
                batches += 1;
                assert!(r.beats.len() >= 2, "a round of one goes alone: {r:?}");
                for b in &r.beats {
                    *beats.entry(&*b.member_id).or_default() += 1;
                }
            }
            Body::Request(Request::Heartbeat(_)) => lone += 1,
            Body::Response(Response::Heartbeats(r)) => {
                answered += 1;
                assert!(r.results.iter().all(|r| r.code == ErrorCode::None), "{r:?}");
            }
            Body::Response(Response::Error(e)) => {
                assert_ne!(e.api_key, ApiKey::Heartbeats as u16, "{e:?}");
            }
            _ => {}
        }
    }
    // Every member heartbeats several times per session timeout: some 30 times in 2 s.
    for id in &ids {
        let n = beats.get(id.as_str()).copied().unwrap_or(0);
        assert!(
            n >= 8,
            "member {id} renewed {n} times in Heartbeats frames: {beats:?}"
        );
    }
    assert!(answered >= 8, "{answered} Heartbeats answers");
    assert!(
        lone * 4 <= batches,
        "{lone} lone Heartbeat frames beside {batches} Heartbeats frames"
    );
}

// ---------------------------------------------------------------------------------------
// Operator controls: self-drain, placement, load reports
// ---------------------------------------------------------------------------------------

/// The group as DescribeGroup version 4 shows it.
async fn describe_v4(addr: SocketAddr, group: &str) -> rollcall_protocol::DescribeGroupResponse {
    let mut admin = rollcall_tests::RawClient::connected(addr).await;
    let described = admin
        .request(Request::DescribeGroup(
            rollcall_protocol::DescribeGroupRequest {
                operator: true,
                group: group.into(),
                detection: true,
                page: Some(rollcall_protocol::Page {
                    after: None,
                    limit: 0,
                }),
                summary: true,
            },
        ))
        .await;
    match described {
        Response::DescribeGroup(d) => d,
        other => panic!("{other:?}"),
    }
}

/// A worker drains itself (a graceful scale-in): its partitions move to the others
/// through the normal revoke, acknowledge, grant, while it stays a member, heartbeats
/// and loses nothing; undrained, it is given its share again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_drains_itself_hands_its_partitions_over_and_stays_a_member() {
    let server = start_server(StoreConfig::Memory).await;
    let addr = server.local_addr();
    let mut a = Worker::start(addr, member_config("g-drain-self", 6)).await;
    let mut b = Worker::start(addr, member_config("g-drain-self", 6)).await;
    let mut c = Worker::start(addr, member_config("g-drain-self", 6)).await;
    wait_balanced(&mut [&mut a, &mut b, &mut c], 6, &[2]).await;
    let a_id = a.member().member_id().expect("a member");
    let before_b = b.owned();
    let before_c = c.owned();

    bounded("drain self", a.member().drain_self())
        .await
        .expect("the coordinator drains the member");
    a.wait_for("a drained", PartitionSet::is_empty).await;
    wait_balanced(&mut [&mut b, &mut c], 6, &[3]).await;
    // Only a's partitions moved: b and c kept theirs.
    assert!(b.owned().is_superset(&before_b) && c.owned().is_superset(&before_c));
    // Still a member, renewing its lease, having lost nothing.
    tokio::time::sleep(SESSION * 2).await;
    assert_eq!(a.member().member_id(), Some(a_id.clone()));
    assert!(!a.member().is_suspended());
    assert!(a.owned().is_empty());
    assert_eq!(a.ledger.lock().lost_events(), Vec::new());
    let d = describe_v4(addr, "g-drain-self").await;
    let described = d
        .members
        .iter()
        .find(|m| m.member_id == a_id)
        .expect("listed");
    assert!(
        described.operator.as_ref().is_some_and(|o| o.drained),
        "{d:?}"
    );

    bounded("undrain self", a.member().undrain_self())
        .await
        .expect("the coordinator undrains the member");
    wait_balanced(&mut [&mut a, &mut b, &mut c], 6, &[2]).await;
    for w in [&a, &b, &c] {
        w.assert_consistent();
    }
}

/// An operator drains a member by id and by label through the client's admin calls,
/// and reads and changes the group's settings; bad requests come back typed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_drains_by_member_and_label_and_alters_settings_through_the_client() {
    let server = start_server(StoreConfig::Memory).await;
    let addr = server.local_addr();
    let group = "g-drain-admin";
    let mut a = Worker::start(addr, member_config(group, 4).with_label("host-a")).await;
    let mut b = Worker::start(addr, member_config(group, 4).with_label("host-b")).await;
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;
    let admin = connect(addr).await;

    let drained = bounded("drain by label", admin.drain_label(group, "host-a"))
        .await
        .expect("drained");
    assert_eq!(drained, vec![a.member().member_id().unwrap()]);
    a.wait_for("a drained", PartitionSet::is_empty).await;
    b.wait_for("b has everything", |s| s == &all(4)).await;
    bounded("undrain by label", admin.undrain_label(group, "host-a"))
        .await
        .expect("undrained");
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;

    let b_id = b.member().member_id().unwrap();
    bounded("drain by id", admin.drain(group, b_id.clone()))
        .await
        .expect("drained");
    b.wait_for("b drained", PartitionSet::is_empty).await;
    bounded("undrain by id", admin.undrain(group, b_id))
        .await
        .expect("undrained");
    wait_balanced(&mut [&mut a, &mut b], 4, &[2]).await;

    let unknown = bounded("drain an unknown member", admin.drain(group, "nobody")).await;
    assert!(
        matches!(
            &unknown,
            Err(RequestError::Refused {
                code: ErrorCode::UnknownMember,
                ..
            })
        ),
        "{unknown:?}"
    );

    let settings = bounded("read settings", admin.group_config(group))
        .await
        .expect("read");
    assert_eq!(settings.max_revoking, 0);
    let settings = bounded(
        "alter settings",
        admin.alter_group_config(rollcall_client::AlterGroupConfigRequest {
            group: group.into(),
            max_revoking: Some(1),
            departure_delay_ms: Some(30_000),
            ..Default::default()
        }),
    )
    .await
    .expect("altered");
    assert_eq!(
        (settings.max_revoking, settings.departure_delay_ms),
        (1, 30_000)
    );
    let refused = bounded(
        "a churn budget over 100 %",
        admin.alter_group_config(rollcall_client::AlterGroupConfigRequest {
            group: group.into(),
            churn_budget_permille: Some(1001),
            ..Default::default()
        }),
    )
    .await;
    assert!(
        matches!(
            &refused,
            Err(RequestError::Refused {
                code: ErrorCode::InvalidRequest,
                ..
            })
        ),
        "{refused:?}"
    );
    a.assert_consistent();
    b.assert_consistent();
}

/// Hides Join versions above 2 and Heartbeat(s) versions above 0 from the client, as a
/// coordinator from before placements and loads would.
fn as_an_older_coordinator(frame: &mut Frame) {
    if let Body::Response(Response::ApiVersions(v)) = &mut frame.body {
        for r in &mut v.versions {
            let cap = match ApiKey::from_u16(r.api_key) {
                Some(ApiKey::Join) => 2,
                Some(ApiKey::Heartbeat | ApiKey::Heartbeats) => 0,
                _ => continue,
            };
            r.max_version = r.max_version.min(cap);
        }
    }
}

/// A member declaring a label, rack, capacity and preferred racks joins a group of
/// plain members and is weighed by its capacity; through a coordinator that does not
/// know Join version 3 the same member joins with a plain join and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placed_member_joins_plain_members_and_an_older_coordinator_alike() {
    let server = start_server(StoreConfig::Memory).await;
    let addr = server.local_addr();
    let placed = |group: &str| {
        member_config(group, 8)
            .with_label("big-host")
            .with_rack("eu-1a")
            .with_capacity(3)
            .with_topic_racks("t", ["eu-1a"; 8])
    };
    let mut plain = Worker::start(addr, member_config("g-placed", 8)).await;
    plain.wait_for("plain has all", |s| s == &all(8)).await;
    let mut big = Worker::start(addr, placed("g-placed")).await;
    // Capacities 1 : 3 over 8 partitions: 2 and 6.
    wait_balanced(&mut [&mut plain, &mut big], 8, &[2, 6]).await;
    assert_eq!(big.owned().len(), 6);
    let d = describe_v4(addr, "g-placed").await;
    let big_id = big.member().member_id().unwrap();
    let o = d
        .members
        .iter()
        .find(|m| m.member_id == big_id)
        .and_then(|m| m.operator.clone())
        .expect("described at version 4");
    assert_eq!(
        (o.label.as_str(), o.rack.as_str(), o.capacity),
        ("big-host", "eu-1a", 3)
    );

    // The older coordinator: a plain join goes out, and is accepted.
    let tap = Tap::rewriting(addr, as_an_older_coordinator).await;
    let client = connect(tap.addr).await;
    let member = bounded("join", client.join(placed("g-placed-old")))
        .await
        .expect("joins");
    let mut old = Worker::drive(client, member);
    old.wait_for("assigned", |s| s == &all(8)).await;
    old.member()
        .report_load(tp(0), 5.0)
        .expect("a load is taken and dropped");
    tokio::time::sleep(SESSION).await;
    let frames = tap.frames.lock();
    let joins: Vec<&rollcall_protocol::JoinRequest> = frames
        .iter()
        .filter_map(|(_, f)| match &f.body {
            Body::Request(Request::Join(j)) => Some(j),
            _ => None,
        })
        .collect();
    assert!(!joins.is_empty());
    assert!(joins.iter().all(|j| j.placement.is_none()), "{joins:?}");
    assert!(frames.iter().all(|(_, f)| match &f.body {
        Body::Request(Request::Heartbeat(h)) => h.loads.is_empty(),
        Body::Request(Request::Heartbeats(h)) => h.beats.iter().all(|b| b.loads.is_empty()),
        _ => true,
    }));
    drop(frames);
    old.assert_consistent();
    plain.assert_consistent();
    big.assert_consistent();
}

/// Loads two members of one client report ride on their next heartbeats (lone or in a
/// Heartbeats frame), each once, and reach describe as each member's total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_reports_ride_on_heartbeats_once_and_reach_describe() {
    let server = start_server(StoreConfig::Memory).await;
    let tap = Tap::start(server.local_addr()).await;
    let client = connect(tap.addr).await;
    let mut workers = Vec::new();
    for _ in 0..2 {
        let member = bounded("join", client.join(member_config("g-load", 4)))
            .await
            .expect("joins");
        workers.push(Worker::drive(client.clone(), member));
    }
    {
        let mut ws: Vec<&mut Worker> = workers.iter_mut().collect();
        wait_balanced(&mut ws, 4, &[2]).await;
    }
    let mut expected = HashMap::new();
    for (i, w) in workers.iter().enumerate() {
        let loads: Vec<(TopicPartition, f64)> =
            w.owned().into_iter().map(|p| (p, 1.5 + i as f64)).collect();
        expected.insert(w.member().member_id().unwrap(), 3.0 + 2.0 * i as f64);
        w.member().report_loads(loads).expect("reported");
    }
    assert!(matches!(
        workers[0].member().report_load(tp(0), f64::NAN),
        Err(RequestError::Refused {
            code: ErrorCode::InvalidRequest,
            ..
        })
    ));
    bounded("loads described", async {
        loop {
            let d = describe_v4(server.local_addr(), "g-load").await;
            let got: HashMap<String, f64> = d
                .members
                .iter()
                .filter_map(|m| Some((m.member_id.clone(), m.operator.as_ref()?.load)))
                .collect();
            if got == expected {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Several beats later, each report went out exactly once.
    tokio::time::sleep(SESSION * 2).await;
    let frames = tap.frames.lock();
    let mut sent: HashMap<(String, u32), usize> = HashMap::new();
    for (_, f) in frames.iter() {
        let beats: Vec<&rollcall_protocol::HeartbeatRequest> = match &f.body {
            Body::Request(Request::Heartbeat(h)) => vec![h],
            Body::Request(Request::Heartbeats(h)) => h.beats.iter().collect(),
            _ => continue,
        };
        for b in beats {
            for l in &b.loads {
                *sent
                    .entry((b.member_id.to_string(), l.partition))
                    .or_default() += 1;
            }
        }
    }
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert!(sent.values().all(|n| *n == 1), "{sent:?}");
    drop(frames);
    for w in &workers {
        w.assert_consistent();
    }
}
