//! Micro-benchmark of the core's share of a batched renewal: a Heartbeats frame of 100
//! beats decoded from its bytes and handled by the sans-IO core, as a shard does it.
//!
//! The coordinator holds 10,000 members in 100 groups, served by 100 connections of 100
//! members each, laid out as `rollcall-bench steady --members 10000 --groups 100
//! --members-per-conn 100 --batch-heartbeats` lays them out (member `i` in group
//! `g{i % 100}`, on connection `i / 100`). The frames go round the connections, and
//! simulated time moves 1 ms per frame, so every member renews every 100 ms and its
//! state is as cold in cache as a real round leaves it. The figure is per beat.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rollcall_coordinator::core::{Coordinator, CoreConfig};
use rollcall_protocol::{
    Body, Codec, Frame, HeartbeatRequest, HeartbeatsRequest, JoinRequest, Request, Response,
    TopicSubscription, DEFAULT_MAX_FRAME_SIZE,
};
use tokio_util::codec::Decoder;

const MEMBERS: usize = 10_000;
const GROUPS: usize = 100;
const PER_CONN: usize = 100;
/// More than the last-level cache of the machines the figures come from (32 MiB).
const EVICT_BYTES: usize = 48 << 20;
/// Simulated time between two frames: a round of all connections takes 100 ms.
const FRAME_GAP: Duration = Duration::from_millis(1);

struct Fleet {
    core: Coordinator,
    now: Instant,
    /// Per connection, its members as (group, member id, generation).
    conns: Vec<Vec<(String, String, u32)>>,
    sequence: u64,
}

impl Fleet {
    fn new() -> Self {
        let now = Instant::now();
        let config = CoreConfig {
            max_members_per_group: MEMBERS,
            ..CoreConfig::default()
        };
        let mut core = Coordinator::new(config);
        let mut conns = vec![Vec::new(); MEMBERS / PER_CONN];
        for i in 0..MEMBERS {
            let group = format!("g{}", i % GROUPS);
            let conn = (i / PER_CONN) as u64;
            let join = Request::Join(JoinRequest {
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
            let j = match core.handle_request(now, conn, join) {
                Response::Join(j) => j,
                other => panic!("member {i} was not let in: {other:?}"),
            };
            conns[conn as usize].push((group, j.member_id, j.generation));
        }
        let mut fleet = Self {
            core,
            now,
            conns,
            sequence: 0,
        };
        // One round to learn each member's generation after every join.
        for conn in 0..fleet.conns.len() {
            let Response::Heartbeats(h) = fleet.round(conn) else {
                panic!("connection {conn} was not answered");
            };
            for (member, result) in fleet.conns[conn].iter_mut().zip(h.results) {
                member.2 = result.generation;
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
        self.now += FRAME_GAP;
        let mut buf = BytesMut::from(wire);
        let frame = Codec::new(DEFAULT_MAX_FRAME_SIZE)
            .decode(&mut buf)
            .expect("the frame decodes")
            .expect("a whole frame");
        let Body::Request(request) = frame.body else {
            panic!("a request");
        };
        let response = self.core.handle_request(self.now, conn as u64, request);
        // The shard's timer wakes about as often as frames arrive.
        self.core.handle_timeout(self.now);
        while self.core.poll_output().is_some() {}
        response
    }

    fn round(&mut self, conn: usize) -> Response {
        let wire = self.frame(conn);
        self.handle(conn, &wire)
    }
}

fn bench(c: &mut Criterion) {
    let mut fleet = Fleet::new();
    // The frames are made once: the sequence numbers stay the same round after round,
    // which the core counts as neither lost nor late.
    let frames: Vec<BytesMut> = (0..fleet.conns.len()).map(|c| fleet.frame(c)).collect();
    let mut group = c.benchmark_group("core");
    group.throughput(Throughput::Elements(PER_CONN as u64));
    let mut next = 0;
    group.bench_function("heartbeats_of_100_among_10000_members", |b| {
        b.iter(|| {
            let conn = next;
            next = (next + 1) % frames.len();
            black_box(fleet.handle(conn, &frames[conn]))
        })
    });
    // The same after the caches were emptied, as a frame finds them when the
    // coordinator's thread wakes after the load generator and the kernel ran.
    let mut evict = vec![0u8; EVICT_BYTES];
    group.bench_function("heartbeats_of_100_among_10000_members_cold", |b| {
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
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
