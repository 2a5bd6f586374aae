//! The shard's own tests: the joiner's ordering, and the stage with two shards.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::BytesMut;
use metrics::Counter;
use rollcall_protocol::{
    Body, Codec, ErrorCode, Frame, HeartbeatResponse, HeartbeatResult, HeartbeatsResponse, Push,
    Response, ShutdownPush,
};
use tokio::time::Instant;
use tokio_util::codec::Decoder;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rollcall_protocol::{
    HeartbeatRequest, HeartbeatsRequest, JoinRequest, LeaveMode, LeaveRequest, Request,
    TopicPartitions, TopicSubscription,
};
use tokio_util::sync::CancellationToken;

use super::stage::Taken;
use super::{shard_of, slot_of, Joiner, Reply, Shard, ShardContext};
use crate::core::{ConnId, Coordinator, CoreConfig};
use crate::server::metrics::Metrics;
use crate::server::registry::{BufferBudget, ConnHandle, ConnState, Registry, SendLimits};
use crate::store::memory::MemoryStore;
use crate::store::{GroupCommitter, Store};

fn push(message: &str) -> Frame {
    Frame::push(Push::Shutdown(ShutdownPush {
        message: message.into(),
    }))
}

/// Room for every frame a test queues on a connection.
fn limits() -> Arc<SendLimits> {
    Arc::new(SendLimits {
        frames: 1000,
        bytes: 1 << 22,
        max_frame_size: 1 << 20,
        too_large: Counter::noop(),
        budget: Arc::new(BufferBudget::new(usize::MAX)),
    })
}

/// The frames queued on `state`, decoded, in order.
fn queued(state: &ConnState) -> Vec<Frame> {
    let mut out = VecDeque::new();
    state.take(&mut out);
    out.into_iter()
        .map(|bytes| {
            Codec::default()
                .decode(&mut BytesMut::from(&bytes[..]))
                .expect("decodes")
                .expect("whole")
        })
        .collect()
}

/// A shard that answers its part of a split Heartbeats request early holds its
/// pushes to the requesting connection until the last part is in and the response
/// is sent.
#[test]
fn pushes_a_split_heartbeats_request_caused_follow_its_response() {
    let (mine, my_state) = ConnHandle::new(limits());
    let metrics = Metrics::new();
    let ok = |generation| {
        Response::Heartbeats(HeartbeatsResponse {
            results: vec![HeartbeatResult::from_response(Response::Heartbeat(
                HeartbeatResponse {
                    generation,
                    session_timeout_ms: 1000,
                },
            ))],
        })
    };
    let joiner = Joiner::new(mine, 77, Instant::now(), 2, 2, None);
    // The first shard answers beat 1 and pushes.
    joiner.fill(&[1], ok(5), &metrics, false);
    joiner.push(push("mine"));
    assert!(
        queued(&my_state).is_empty(),
        "a push went before the response"
    );
    // The second shard answers beat 0: the response, then the push held for it.
    joiner.fill(&[0], ok(6), &metrics, false);
    joiner.push(push("later"));
    let frames = queued(&my_state);
    let kinds: Vec<String> = frames
        .iter()
        .map(|f| match &f.body {
            Body::Response(Response::Heartbeats(h)) => {
                assert_eq!(f.correlation_id, 77);
                let generations: Vec<u32> = h.results.iter().map(|r| r.generation).collect();
                assert_eq!(generations, [6, 5]);
                assert!(h.results.iter().all(|r| r.code == ErrorCode::None));
                "response".to_owned()
            }
            Body::Push(Push::Shutdown(s)) => s.message.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["response", "mine", "later"]);
}

/// A connection's earlier split request still open holds the pushes a later one
/// releases: each push follows every response of a part its shard had handled.
#[test]
fn pushes_released_by_a_later_split_request_wait_for_an_earlier_one() {
    let (mine, my_state) = ConnHandle::new(limits());
    let metrics = Metrics::new();
    let ok = || {
        Response::Heartbeats(HeartbeatsResponse {
            results: vec![HeartbeatResult::from_response(Response::Heartbeat(
                HeartbeatResponse {
                    generation: 1,
                    session_timeout_ms: 1000,
                },
            ))],
        })
    };
    let first = Joiner::new(mine.clone(), 1, Instant::now(), 2, 2, None);
    let second = Joiner::new(mine.clone(), 2, Instant::now(), 2, 2, Some(first.clone()));
    // Shard 0 answers both requests' parts, then pushes: it goes through the second.
    first.fill(&[0], ok(), &metrics, false);
    second.fill(&[0], ok(), &metrics, false);
    second.push(push("a"));
    // Shard 1 answers the second request first: its response goes, the push waits
    // for the first's.
    second.fill(&[1], ok(), &metrics, false);
    second.push(push("b"));
    let kinds = |frames: Vec<Frame>| -> Vec<String> {
        frames
            .iter()
            .map(|f| match &f.body {
                Body::Response(_) => format!("response {}", f.correlation_id),
                Body::Push(Push::Shutdown(s)) => s.message.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    };
    assert_eq!(kinds(queued(&my_state)), ["response 2"]);
    assert!(second.is_open(), "an earlier request is still open");
    first.fill(&[1], ok(), &metrics, false);
    second.push(push("c"));
    assert_eq!(kinds(queued(&my_state)), ["response 1", "a", "b", "c"]);
    // Both closed: a third request does not keep the chain.
    assert!(!second.is_open());
    let third = Joiner::new(mine, 3, Instant::now(), 1, 1, Some(second));
    assert!(third.parts.lock().before.is_none());
}

/// The shards of a two-shard server, over a memory store, and a connection to
/// watch.
struct TwoShards {
    shards: [Arc<Shard>; 2],
    registry: Arc<Registry>,
    limits: Arc<SendLimits>,
}

impl TwoShards {
    fn new() -> Self {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let registry = Arc::new(Registry::default());
        let ctx = Arc::new(ShardContext {
            committer: Arc::new(GroupCommitter::new(store).expect("committer")),
            registry: registry.clone(),
            metrics: Arc::new(Metrics::new()),
            stats_interval: Duration::from_secs(60),
            fatal: CancellationToken::new(),
            failed: AtomicBool::new(false),
            directory: crate::server::Directory::single(),
            on_store_failure: None,
        });
        // Rebalances at once: no timer to wait for.
        let config = CoreConfig {
            rebalance_coalesce: Duration::ZERO,
            rebalance_coalesce_max: Duration::ZERO,
            ..CoreConfig::default()
        };
        let shard = |i| Shard::new(i, Coordinator::new(config.clone()), ctx.clone());
        Self {
            shards: [shard(0), shard(1)],
            registry,
            limits: limits(),
        }
    }

    fn connect(&self, conn: ConnId) -> (ConnHandle, Arc<ConnState>) {
        let (handle, state) = ConnHandle::new(self.limits.clone());
        self.registry.insert(conn, handle.clone());
        (handle, state)
    }

    /// Runs the shard's due timers, then makes durable and sends what it staged, as
    /// its timer task and sender stage do.
    async fn flush(&self, shard: usize) {
        self.shards[shard].input(|core, now| {
            if core.poll_timeout().is_some_and(|d| d <= now) {
                core.handle_timeout(now);
            }
        });
        loop {
            match self.shards[shard].take_open() {
                Taken::Batch(mut batch) => {
                    let durable = match batch.durable.take() {
                        Some(answer) => answer.await.expect("answered"),
                        None => Ok(()),
                    };
                    assert!(self.shards[shard].finish(batch, durable));
                }
                Taken::Nothing | Taken::Closed => return,
            }
        }
    }

    /// Sends `request` from `conn` to `shard` as a whole request, and flushes.
    async fn request(&self, shard: usize, conn: (ConnId, &ConnHandle), request: Request) {
        let (conn, to) = conn;
        let reply = Reply::Frame {
            to: to.clone(),
            correlation_id: 0,
            api: request.api_key(),
            received: Instant::now(),
        };
        self.shards[shard].request(conn, request, reply);
        self.flush(shard).await;
    }
}

fn join(group: &str, token: u64) -> Request {
    Request::Join(JoinRequest {
        placement: None,
        group: group.to_owned(),
        member_id: None,
        instance_id: None,
        client_id: "test".to_owned(),
        join_token: token,
        subscription: vec![TopicSubscription {
            topic: "t".to_owned(),
            partitions: 2,
        }],
        session_timeout_ms: 10_000,
        progress_timeout_ms: 60_000,
        rebalance_timeout_ms: 30_000,
        lease_timeout_ms: 0,
        detector: String::new(),
    })
}

fn beat(
    group: &str,
    member: &str,
    generation: u32,
    acks: Vec<TopicPartitions>,
) -> HeartbeatRequest {
    HeartbeatRequest {
        loads: Vec::new(),
        group: group.into(),
        member_id: member.into(),
        generation,
        sequence: 1,
        progress: 1,
        acked_revocations: acks,
    }
}

/// The member ids the join responses among `frames` gave, in order.
fn joined(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|f| match &f.body {
            Body::Response(Response::Join(j)) => Some(j.member_id.clone()),
            _ => None,
        })
        .collect()
}

/// A push that another input of a shard causes (here another member's leave) after
/// the shard answered its part of a split Heartbeats request follows that
/// request's response on the requesting connection. Before, it overtook the
/// response: the client dropped the partition the response confirmed released
/// after it had seen the Assignment that gave the partition back, and the
/// partition stayed with a member that did not know it had it.
#[tokio::test]
async fn pushes_a_shard_makes_after_its_part_of_a_split_request_follow_the_response() {
    let server = TwoShards::new();
    let name = |shard| {
        (0..)
            .map(|i| format!("g{i}"))
            .find(|g| shard_of(g, 2) == shard)
            .expect("a group on each shard")
    };
    let (ga, gb) = (name(0), name(1));
    let (one, mine) = server.connect(1);
    let (two, theirs) = server.connect(2);
    // On connection 1, member m of ga (shard 0) and member x of gb (shard 1).
    server.request(0, (1, &one), join(&ga, 1)).await;
    server.request(1, (1, &one), join(&gb, 2)).await;
    let frames = queued(&mine);
    let ids = joined(&frames);
    let (m, x) = (ids[0].clone(), ids[1].clone());
    // n joins ga on connection 2: m is asked to release a partition.
    server.request(0, (2, &two), join(&ga, 3)).await;
    let frames = queued(&mine);
    let (generation, revoked) = frames
        .iter()
        .find_map(|f| match &f.body {
            Body::Push(Push::Revoke(r)) if r.member_id == m => {
                Some((r.generation, r.partitions.clone()))
            }
            _ => None,
        })
        .expect("m is asked to release a partition");
    let n = joined(&queued(&theirs))[0].clone();
    // One Heartbeats request from connection 1: m acknowledges (shard 0), x beats
    // (shard 1).
    let joiner = Joiner::new(one.clone(), 99, Instant::now(), 2, 2, None);
    let part = |beat, i| {
        (
            Request::Heartbeats(HeartbeatsRequest { beats: vec![beat] }),
            Reply::Part {
                joiner: joiner.clone(),
                indices: vec![i],
            },
        )
    };
    let (request, reply) = part(beat(&ga, &m, generation, revoked.clone()), 0);
    server.shards[0].request(1, request, reply);
    server.flush(0).await;
    // Before shard 1 takes its part, n leaves: the partition goes back to m.
    server
        .request(
            0,
            (2, &two),
            Request::Leave(LeaveRequest {
                group: ga.clone(),
                member_id: n,
                mode: LeaveMode::Released,
            }),
        )
        .await;
    let (request, reply) = part(beat(&gb, &x, 1, Vec::new()), 1);
    server.shards[1].request(1, request, reply);
    server.flush(1).await;
    let frames = queued(&mine);
    let response = frames
        .iter()
        .position(|f| f.correlation_id == 99 && matches!(f.body, Body::Response(_)))
        .expect("the Heartbeats response");
    let regrant = frames
        .iter()
        .position(|f| match &f.body {
            Body::Push(Push::Assignment(a)) => {
                a.member_id == m
                    && a.partitions.iter().any(|t| {
                        revoked.iter().any(|r| {
                            r.topic == t.topic
                                && t.partitions.iter().any(|p| r.partitions.contains(p))
                        })
                    })
            }
            _ => false,
        })
        .expect("the partition goes back to m");
    assert!(
        response < regrant,
        "the Assignment giving the partition back overtook the response confirming its release: {frames:?}"
    );
}

#[test]
fn shard_of_is_stable_and_in_range() {
    // Fixed values: a group must map to the same shard in every build and run.
    assert_eq!(shard_of("", 7), (0xcbf2_9ce4_8422_2325u64 % 7) as usize);
    assert_eq!(shard_of("orders", 1), 0);
    let a = shard_of("orders", 16);
    assert_eq!(a, shard_of("orders", 16));
    assert!(a < 16);
    let spread: std::collections::HashSet<usize> =
        (0..200).map(|i| shard_of(&format!("g{i}"), 8)).collect();
    assert_eq!(spread.len(), 8);
}

#[test]
fn slot_of_is_stable_in_range_and_agrees_with_shard_of() {
    // Fixed values: every coordinator of a cluster, in every build, must agree.
    assert_eq!(slot_of("", 64), (0xcbf2_9ce4_8422_2325u64 % 64) as u32);
    assert_eq!(slot_of("orders", 1), 0);
    assert_eq!(slot_of("orders", 0), 0);
    for i in 0..200 {
        let group = format!("g{i}");
        let slot = slot_of(&group, 64);
        assert!(slot < 64);
        // The same hash: with equal counts, slot and shard are the same number.
        assert_eq!(slot as usize, shard_of(&group, 64));
    }
    let spread: std::collections::HashSet<u32> =
        (0..500).map(|i| slot_of(&format!("g{i}"), 16)).collect();
    assert_eq!(spread.len(), 16);
}
