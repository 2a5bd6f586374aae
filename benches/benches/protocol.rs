//! Micro-benchmarks of the wire protocol's hot path: the heartbeat, which every member
//! sends every few seconds, encoded into a reused buffer and decoded through the codec.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rollcall_protocol::{
    Codec, Frame, HeartbeatRequest, Request, TopicPartitions, DEFAULT_MAX_FRAME_SIZE,
};
use tokio_util::codec::Decoder;

/// A heartbeat as a member in steady state sends it: nothing to acknowledge.
fn heartbeat() -> Frame {
    Frame::request(
        1_234,
        Request::Heartbeat(HeartbeatRequest {
            loads: Vec::new(),
            group: "payments-ledger".into(),
            member_id: "m-7f3a9c2e41d05b68".into(),
            generation: 42,
            sequence: 1_000_000,
            progress: 987_654_321,
            acked_revocations: Vec::new(),
        }),
    )
}

/// A heartbeat that acknowledges a revocation of a few partitions.
fn heartbeat_with_acks() -> Frame {
    let mut frame = heartbeat();
    if let rollcall_protocol::Body::Request(Request::Heartbeat(h)) = &mut frame.body {
        h.acked_revocations = vec![TopicPartitions {
            topic: "payments".into(),
            partitions: vec![3, 7, 11, 19],
        }];
    }
    frame
}

fn encoded(frame: &Frame) -> BytesMut {
    let mut buf = BytesMut::new();
    frame
        .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
        .expect("heartbeat encodes");
    buf
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("protocol");
    for (name, frame) in [
        ("heartbeat", heartbeat()),
        ("heartbeat_with_acks", heartbeat_with_acks()),
    ] {
        let wire = encoded(&frame);
        group.throughput(Throughput::Bytes(wire.len() as u64));

        let mut buf = BytesMut::with_capacity(4096);
        group.bench_function(format!("encode/{name}"), |b| {
            b.iter(|| {
                buf.clear();
                black_box(&frame)
                    .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
                    .expect("encodes");
                black_box(buf.len())
            });
        });

        // Each iteration copies the frame's bytes into the reused buffer (as a socket
        // read would) and decodes them.
        let mut codec = Codec::default();
        let mut buf = BytesMut::with_capacity(4096);
        group.bench_function(format!("decode/{name}"), |b| {
            b.iter(|| {
                buf.extend_from_slice(black_box(&wire));
                let frame = codec.decode(&mut buf).expect("decodes").expect("whole");
                black_box(frame)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
