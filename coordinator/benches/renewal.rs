//! Micro-benchmark of the core's share of a batched renewal: a Heartbeats frame of 100
//! beats decoded from its bytes and handled by the sans-IO core, as a shard does it.
//!
//! The coordinator holds 10,000 members in 100 groups, served by connections of 100 (or
//! 1,000) members each, laid out as `rollcall-bench steady --members 10000 --groups 100
//! --members-per-conn 100 --batch-heartbeats` lays them out (member `i` in group
//! `g{i % 100}`, on connection `i / 100`). The frames go round the connections, and
//! simulated time moves so that every member renews every 100 ms. The figures are per
//! beat.
//!
//! `cargo bench -p rollcall-coordinator --bench renewal`

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rollcall_coordinator::core::{Coordinator, CoreConfig};
use rollcall_protocol::{
    Body, Codec, ErrorCode, Frame, HeartbeatRequest, HeartbeatsRequest, JoinRequest, Request,
    Response, TopicSubscription, DEFAULT_MAX_FRAME_SIZE,
};
use tokio_util::codec::Decoder;

/// The coordinator's allocator (see its `main.rs`): where members lie in memory decides
/// what a cold renewal costs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MEMBERS: usize = 10_000;
const GROUPS: usize = 100;
/// More than the last-level cache of the machines the figures come from (32 MiB).
const EVICT_BYTES: usize = 48 << 20;
/// Every member renews every 100 ms of simulated time.
const ROUND: Duration = Duration::from_millis(100);

struct Fleet {
    core: Coordinator,
    now: Instant,
    /// Per connection, its members as (group, member id, generation).
    conns: Vec<Vec<(String, String, u32)>>,
    sequence: u64,
    /// Simulated time between two frames.
    frame_gap: Duration,
}

impl Fleet {
    /// The members, `per_conn` to a connection.
    fn new(per_conn: usize) -> Self {
        let now = Instant::now();
        let config = CoreConfig {
            max_members_per_group: MEMBERS,
            ..CoreConfig::default()
        };
        let mut core = Coordinator::new(config);
        let mut conns = vec![Vec::new(); MEMBERS / per_conn];
        for i in 0..MEMBERS {
            let group = format!("g{}", i % GROUPS);
            let conn = (i / per_conn) as u64;
            let join = Request::Join(JoinRequest {
                placement: None,
                group: group.clone(),
                member_id: None,
                instance_id: None,
                client_id: "bench".to_owned(),
                join_token: i as u64 + 1,
                // One partition per group: it stays with its first owner, so the joins
                // revoke nothing and every renewal takes the common path.
                subscription: vec![TopicSubscription {
                    topic: "t".to_owned(),
                    partitions: 1,
                }],
                session_timeout_ms: 10_000,
                progress_timeout_ms: 60_000,
                rebalance_timeout_ms: 60_000,
                lease_timeout_ms: 0,
                detector: String::new(),
            });
            let j = match core.handle_request(now, conn, join).response {
                Response::Join(j) => j,
                other => panic!("member {i} was not let in: {other:?}"),
            };
            conns[conn as usize].push((group, j.member_id, j.generation));
        }
        let mut fleet = Self {
            core,
            now,
            frame_gap: ROUND / (MEMBERS / per_conn) as u32,
            conns,
            sequence: 0,
        };
        // Rounds until each member beats with the generation of its assignment: the
        // first after the joins moves every member to its assignment's generation.
        for _ in 0..3 {
            for conn in 0..fleet.conns.len() {
                let Response::Heartbeats(h) = fleet.round(conn) else {
                    panic!("connection {conn} was not answered");
                };
                for (member, result) in fleet.conns[conn].iter_mut().zip(h.results) {
                    member.2 = result.generation;
                }
            }
        }
        fleet
    }

    /// The Heartbeats frame connection `conn` sends this round, encoded.
    fn frame(&mut self, conn: usize) -> BytesMut {
        self.sequence += 1;
        let beats = self.conns[conn]
            .iter()
            .map(|(group, id, generation)| HeartbeatRequest {
                loads: Vec::new(),
                group: group.as_str().into(),
                member_id: id.as_str().into(),
                generation: *generation,
                sequence: self.sequence,
                progress: self.sequence,
                acked_revocations: Vec::new(),
            })
            .collect();
        let frame = Frame::request(1, Request::Heartbeats(HeartbeatsRequest { beats }));
        let mut buf = BytesMut::new();
        frame
            .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
            .expect("the frame encodes");
        buf
    }

    /// Decodes `wire` and hands it to the core, as connection `conn`'s shard would.
    fn handle(&mut self, conn: usize, wire: &[u8]) -> Response {
        self.now += self.frame_gap;
        let mut buf = BytesMut::from(wire);
        let frame = Codec::new(DEFAULT_MAX_FRAME_SIZE)
            .decode(&mut buf)
            .expect("the frame decodes")
            .expect("a whole frame");
        let Body::Request(request) = frame.body else {
            panic!("a request");
        };
        let response = self
            .core
            .handle_request(self.now, conn as u64, request)
            .response;
        // The shard's timer wakes about as often as frames arrive.
        self.core.handle_timeout(self.now);
        while self.core.poll_output().is_some() {}
        response
    }

    /// Panics unless every beat of `frames` is answered as a renewal with nothing to
    /// tell: the figures are those of the common case.
    fn check_steady(&mut self, frames: &[BytesMut]) {
        for (conn, wire) in frames.iter().enumerate() {
            let Response::Heartbeats(h) = self.handle(conn, wire) else {
                panic!("connection {conn} was not answered");
            };
            for ((_, id, generation), result) in self.conns[conn].iter().zip(&h.results) {
                assert_eq!(
                    (result.code, result.generation),
                    (ErrorCode::None, *generation),
                    "member {id} is not in a steady state"
                );
            }
        }
        assert!(
            self.core.poll_output().is_none(),
            "no push in a steady state"
        );
    }

    fn round(&mut self, conn: usize) -> Response {
        let wire = self.frame(conn);
        self.handle(conn, &wire)
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("core");
    let mut evict = vec![0u8; EVICT_BYTES];
    for per_conn in [100, 1_000] {
        let mut fleet = Fleet::new(per_conn);
        // The frames are made once: the sequence numbers stay the same round after
        // round, which the core counts as neither lost nor late.
        let frames: Vec<BytesMut> = (0..fleet.conns.len()).map(|c| fleet.frame(c)).collect();
        fleet.check_steady(&frames);
        group.throughput(Throughput::Elements(per_conn as u64));
        let mut next = 0;
        if per_conn == 100 {
            group.bench_function(format!("heartbeats_of_{per_conn}_warm"), |b| {
                b.iter(|| {
                    let conn = next;
                    next = (next + 1) % frames.len();
                    black_box(fleet.handle(conn, &frames[conn]))
                })
            });
        }
        // After the caches were emptied, as a frame finds them when the coordinator's
        // thread wakes after the load generator and the kernel ran. Frames of 100 and
        // of 1,000 beats tell what a frame costs from what a beat costs.
        group.bench_function(format!("heartbeats_of_{per_conn}_cold"), |b| {
            b.iter_batched(
                || {
                    for line in evict.chunks_mut(64) {
                        line[0] = line[0].wrapping_add(1);
                    }
                },
                |()| {
                    let conn = next;
                    next = (next + 1) % frames.len();
                    black_box(fleet.handle(conn, &frames[conn]))
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
