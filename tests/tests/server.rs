//! The server over real TCP: handshake, protocol errors, limits, routing to the core,
//! pushes, metrics, the admin commands and the `rollcall serve` process.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rollcall_coordinator::core::{Record, RestoredState};
use rollcall_coordinator::server::{ServerConfig, ServerError, StoreConfig};
use rollcall_coordinator::store::{Clock, MemoryStore, Store, StoreError};
use rollcall_protocol::{
    supported_versions, ApiKey, Body, CommitOffsetsRequest, DescribeGroupRequest, ErrorCode,
    ExpelReason, FetchOffsetsRequest, Frame, FrameKind, GroupState, Header, HeartbeatRequest,
    HeartbeatsRequest, LeaveRequest, OffsetCommit, Push, Request, Response, DEFAULT_MAX_FRAME_SIZE,
};
use rollcall_tests::{
    bounded, http_get, join, run_cli, sample, serve_process, start, test_config, CliOutput, Member,
    RawClient, TempDir,
};
use tokio::io::AsyncWriteExt;

fn error_of(response: Response) -> rollcall_protocol::ErrorResponse {
    match response {
        Response::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

async fn list_groups(client: &mut RawClient) -> Vec<String> {
    match client
        .request(Request::ListGroups(Default::default()))
        .await
    {
        Response::ListGroups(r) => r.groups.into_iter().map(|g| g.group).collect(),
        other => panic!("list groups failed: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Handshake and protocol errors
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn requests_before_the_handshake_are_refused_then_served() {
    let server = start(test_config()).await;
    let mut c = RawClient::connect(server.local_addr()).await;

    let e = error_of(c.request(Request::ListGroups(Default::default())).await);
    assert_eq!(e.code, ErrorCode::HandshakeRequired);
    assert_eq!(e.api_key, ApiKey::ListGroups as u16);

    let versions = c.handshake().await;
    assert_eq!(versions.versions, supported_versions());
    assert_eq!(versions.max_frame_size as usize, DEFAULT_MAX_FRAME_SIZE);
    assert!(list_groups(&mut c).await.is_empty());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn garbage_gets_malformed_frame_and_close_while_others_carry_on() {
    let server = start(test_config()).await;
    let mut bystander = RawClient::connected(server.local_addr()).await;

    // An invalid frame kind: the header is unreadable, so correlation id 0.
    let mut bad = RawClient::connected(server.local_addr()).await;
    bad.send_raw(&[0, 0, 0, 12, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
        .await;
    let frames = bad.expect_closed().await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].correlation_id, 0);
    let Body::Response(Response::Error(e)) = &frames[0].body else {
        panic!("{frames:?}");
    };
    assert_eq!(e.code, ErrorCode::MalformedFrame);

    // A readable header with a body that does not decode: answered with its
    // correlation id.
    let mut bad = RawClient::connected(server.local_addr()).await;
    let header = [0u8, 0, 1, 0, 0, 0, 0, 0, 42];
    let mut bytes = vec![0, 0, 0, (header.len() + 3) as u8];
    bytes.extend_from_slice(&header);
    bytes.extend_from_slice(&[0xff, 0xff, 0xff]);
    bad.send_raw(&bytes).await;
    let frames = bad.expect_closed().await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].correlation_id, 42);
    let Body::Response(Response::Error(e)) = &frames[0].body else {
        panic!("{frames:?}");
    };
    assert_eq!(e.code, ErrorCode::MalformedFrame);
    assert_eq!(e.api_key, ApiKey::Join as u16);

    assert!(list_groups(&mut bystander).await.is_empty());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn oversized_length_prefix_gets_frame_too_large_and_close() {
    let server = start(test_config()).await;
    let mut c = RawClient::connected(server.local_addr()).await;
    c.send_raw(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0]).await;
    let frames = c.expect_closed().await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].correlation_id, 0);
    let Body::Response(Response::Error(e)) = &frames[0].body else {
        panic!("{frames:?}");
    };
    assert_eq!(e.code, ErrorCode::FrameTooLarge);

    // Also before the handshake.
    let mut c = RawClient::connect(server.local_addr()).await;
    c.send_raw(&[0x7f, 0, 0, 0]).await;
    let frames = c.expect_closed().await;
    assert!(matches!(
        &frames[..],
        [Frame { body: Body::Response(Response::Error(e)), .. }] if e.code == ErrorCode::FrameTooLarge
    ));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn truncated_frame_then_close_is_harmless() {
    let server = start(test_config()).await;
    let mut c = RawClient::connected(server.local_addr()).await;
    // Declares 100 bytes, sends 20, closes its side.
    let mut bytes = vec![0, 0, 0, 100];
    bytes.extend_from_slice(&[0; 20]);
    c.send_raw(&bytes).await;
    bounded("shutdown write", c.stream_mut().shutdown())
        .await
        .unwrap();
    assert!(c.closed_within(Duration::from_secs(5)).await);

    let mut other = RawClient::connected(server.local_addr()).await;
    assert!(list_groups(&mut other).await.is_empty());
    server.shutdown().await.unwrap();
}

fn raw_request(api_key: u16, api_version: u16, correlation_id: u32) -> Frame {
    Frame {
        correlation_id,
        body: Body::Unsupported(Header {
            kind: FrameKind::Request,
            api_key,
            api_version,
            correlation_id,
        }),
    }
}

#[tokio::test]
async fn unknown_api_is_answered_with_what_is_supported_and_the_connection_works() {
    let server = start(test_config()).await;
    let mut c = RawClient::connected(server.local_addr()).await;
    c.send(raw_request(99, 0, 77)).await;
    let e = error_of(c.response_to(77).await);
    assert_eq!(e.code, ErrorCode::UnknownApi);
    assert_eq!(e.api_key, 99);
    assert_eq!(e.supported, supported_versions());
    assert!(list_groups(&mut c).await.is_empty());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn before_the_handshake_every_other_request_is_answered_handshake_required() {
    let server = start(test_config()).await;
    let mut c = RawClient::connect(server.local_addr()).await;
    // An unknown key, and a known key at an unknown version: the missing handshake is
    // what is wrong (docs/PROTOCOL.md §5.1), whatever the key.
    let unknown_join = rollcall_protocol::max_request_version(ApiKey::Join) + 1;
    for (api_key, version, id) in [(99, 0, 7), (ApiKey::Join as u16, unknown_join, 8)] {
        c.send(raw_request(api_key, version, id)).await;
        let e = error_of(c.response_to(id).await);
        assert_eq!(e.code, ErrorCode::HandshakeRequired, "key {api_key}");
        assert_eq!(e.api_key, api_key);
    }
    c.handshake().await;
    c.send(raw_request(99, 0, 9)).await;
    assert_eq!(error_of(c.response_to(9).await).code, ErrorCode::UnknownApi);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn unknown_version_is_answered_unsupported_version() {
    let server = start(test_config()).await;
    let mut c = RawClient::connect(server.local_addr()).await;
    // A future handshake version, before any handshake: answered, so the client can
    // fall back.
    c.send(raw_request(ApiKey::ApiVersions as u16, 3, 5)).await;
    let e = error_of(c.response_to(5).await);
    assert_eq!(e.code, ErrorCode::UnsupportedVersion);
    assert_eq!(e.supported, supported_versions());
    c.handshake().await;
    let unknown_join = rollcall_protocol::max_request_version(ApiKey::Join) + 1;
    c.send(raw_request(ApiKey::Join as u16, unknown_join, 6))
        .await;
    let e = error_of(c.response_to(6).await);
    assert_eq!(e.code, ErrorCode::UnsupportedVersion);
    assert_eq!(e.api_key, ApiKey::Join as u16);
    assert!(list_groups(&mut c).await.is_empty());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn no_handshake_within_the_deadline_closes_the_connection() {
    let server = start(ServerConfig {
        handshake_timeout: Duration::from_millis(200),
        ..test_config()
    })
    .await;
    let started = Instant::now();
    let mut silent = RawClient::connect(server.local_addr()).await;
    assert!(silent.closed_within(Duration::from_secs(5)).await);
    assert!(started.elapsed() >= Duration::from_millis(150));

    // A connection that handshakes in time stays open past the deadline.
    let mut ok = RawClient::connected(server.local_addr()).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(list_groups(&mut ok).await.is_empty());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn connections_over_the_maximum_are_answered_too_many_connections() {
    let server = start(ServerConfig {
        max_connections: 2,
        ..test_config()
    })
    .await;
    let addr = server.local_addr();
    let a = RawClient::connected(addr).await;
    let mut b = RawClient::connected(addr).await;

    let mut over = RawClient::connect(addr).await;
    let e = error_of(over.request(Request::ApiVersions(Default::default())).await);
    assert_eq!(e.code, ErrorCode::TooManyConnections);
    assert!(over.closed_within(Duration::from_secs(5)).await);

    // Closing one frees a slot.
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = RawClient::connect(addr).await;
        match c.request(Request::ApiVersions(Default::default())).await {
            Response::ApiVersions(_) => break,
            Response::Error(e) if e.code == ErrorCode::TooManyConnections => {
                assert!(Instant::now() < deadline, "slot never freed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(list_groups(&mut b).await.is_empty());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_read_is_disconnected() {
    let server = start(ServerConfig {
        send_buffer: 4,
        ..test_config()
    })
    .await;
    let addr = server.local_addr();
    // An administrative commit of large offsets makes every fetch answer ~800 KiB.
    let mut admin = RawClient::connected(addr).await;
    let offsets = (0..200)
        .map(|p| OffsetCommit {
            topic: "t".into(),
            partition: p,
            offset: 1,
            metadata: "x".repeat(4000),
        })
        .collect();
    let committed = admin
        .request(Request::CommitOffsets(CommitOffsetsRequest {
            group: "big".into(),
            member_id: None,
            generation: 0,
            offsets,
        }))
        .await;
    let Response::CommitOffsets(committed) = committed else {
        panic!("{committed:?}");
    };
    assert!(committed.results.iter().all(|r| r.error == ErrorCode::None));

    // Ask for far more than the socket buffers hold and never read.
    let mut lazy = RawClient::connected(addr).await;
    for id in 0..48 {
        lazy.send(Frame::request(
            1000 + id,
            Request::FetchOffsets(FetchOffsetsRequest {
                group: "big".into(),
                topics: vec![],
                page: None,
            }),
        ))
        .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        lazy.closed_within(Duration::from_secs(10)).await,
        "slow reader still connected"
    );

    // Everyone else is fine.
    assert_eq!(list_groups(&mut admin).await, vec!["big".to_owned()]);
    server.shutdown().await.unwrap();
}

/// A Heartbeats request of `beats` beats for members no group has.
fn many_beats(beats: usize) -> Request {
    Request::Heartbeats(HeartbeatsRequest {
        beats: (0..beats)
            .map(|i| HeartbeatRequest {
                loads: Vec::new(),
                group: "nowhere".into(),
                member_id: format!("nobody-{i:06}").into(),
                generation: 0,
                sequence: 1,
                progress: 0,
                acked_revocations: Vec::new(),
            })
            .collect(),
    })
}

/// Frames far larger than a first read (one larger than a wake reads at most) are
/// answered in order whether they arrive whole, back to back with small ones, or a
/// few hundred bytes at a time: the reads grow with what arrives and shrink again.
#[tokio::test]
async fn large_frames_are_served_whole_back_to_back_or_dribbled() {
    let server = start(test_config()).await;
    let mut c = RawClient::connected(server.local_addr()).await;
    for dribble in [false, true] {
        let mut expected = Vec::new();
        let mut bytes = Vec::new();
        for beats in [2_000, 0, 300, 0, 1, 0] {
            let id = c.next_id();
            let request = if beats == 0 {
                Request::ListGroups(Default::default())
            } else {
                many_beats(beats)
            };
            bytes.extend_from_slice(&RawClient::encode(&Frame::request(id, request)));
            expected.push((id, beats));
        }
        assert!(bytes.len() > 64 * 1024, "{} bytes", bytes.len());
        if dribble {
            for piece in bytes.chunks(700) {
                c.send_raw(piece).await;
                tokio::task::yield_now().await;
            }
        } else {
            c.send_raw(&bytes).await;
        }
        for (id, beats) in expected {
            match c.response_to(id).await {
                Response::Heartbeats(h) => {
                    assert_eq!(h.results.len(), beats, "dribbled: {dribble}");
                    assert!(h.results.iter().all(|r| r.code == ErrorCode::UnknownMember));
                }
                Response::ListGroups(l) => {
                    assert_eq!(beats, 0);
                    assert!(l.groups.is_empty());
                }
                other => panic!("request {id} ({beats} beats) answered {other:?}"),
            }
        }
    }
    server.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Through the core
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn join_heartbeat_commit_fetch_describe_leave() {
    let server = start(test_config()).await;
    let addr = server.local_addr();
    let mut m = Member::join(addr, join("g-basic", "orders", 4, 10_000)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.owned_count() < 4 {
        assert!(Instant::now() < deadline, "no assignment pushed: {m:?}");
        m.tick(Duration::from_millis(30)).await;
    }
    assert!(matches!(m.heartbeat().await, Response::Heartbeat(_)));

    let committed = m
        .client
        .request(Request::CommitOffsets(CommitOffsetsRequest {
            group: m.group.clone(),
            member_id: Some(m.id.clone()),
            generation: m.generation,
            offsets: vec![OffsetCommit {
                topic: "orders".into(),
                partition: 2,
                offset: 42,
                metadata: "meta".into(),
            }],
        }))
        .await;
    let Response::CommitOffsets(committed) = committed else {
        panic!("{committed:?}");
    };
    assert_eq!(committed.results[0].error, ErrorCode::None);

    let mut admin = RawClient::connected(addr).await;
    let fetched = admin
        .request(Request::FetchOffsets(FetchOffsetsRequest {
            group: "g-basic".into(),
            topics: vec![],
            page: None,
        }))
        .await;
    let Response::FetchOffsets(fetched) = fetched else {
        panic!("{fetched:?}");
    };
    assert_eq!(fetched.offsets.len(), 1);
    assert_eq!(fetched.offsets[0].offset, 42);

    let described = admin
        .request(Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "g-basic".into(),
            detection: false,
            page: None,
            summary: false,
        }))
        .await;
    let Response::DescribeGroup(d) = described else {
        panic!("{described:?}");
    };
    assert_eq!(d.state, GroupState::Stable);
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_id, m.id);
    assert_eq!(d.detection, None, "version 0 carries no detection");

    // Version 1 adds how the detector judges the group and each member.
    let described = admin
        .request(Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "g-basic".into(),
            detection: true,
            page: None,
            summary: false,
        }))
        .await;
    let Response::DescribeGroup(d) = described else {
        panic!("{described:?}");
    };
    let detection = d.detection.expect("version 1 describes the detector");
    assert_eq!(detection.detector, "fixed");
    let md = d.members[0].detection.expect("and each member");
    assert!(md.expel_after_ms > md.suspect_after_ms, "{md:?}");

    let left = m
        .client
        .request(Request::Leave(LeaveRequest {
            group: m.group.clone(),
            member_id: m.id.clone(),
            mode: rollcall_protocol::LeaveMode::Released,
        }))
        .await;
    assert_eq!(left, Response::Leave);
    let described = admin
        .request(Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "g-basic".into(),
            detection: false,
            page: None,
            summary: false,
        }))
        .await;
    let Response::DescribeGroup(d) = described else {
        panic!("{described:?}");
    };
    assert!(d.members.is_empty());

    let e = error_of(
        admin
            .request(Request::DescribeGroup(DescribeGroupRequest {
                operator: false,
                group: "no-such-group".into(),
                detection: false,
                page: None,
                summary: false,
            }))
            .await,
    );
    assert_eq!(e.code, ErrorCode::UnknownGroup);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_silent_member_is_expelled_and_the_others_get_its_partitions() {
    let server = start(test_config()).await;
    let addr = server.local_addr();
    // Sessions short enough for a quick test, long enough for a loaded machine.
    let mut a = Member::join(addr, join("g-expel", "orders", 4, 800)).await;
    let mut b = Member::join(addr, join("g-expel", "orders", 4, 800)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.owned_count() != 2 || b.owned_count() != 2 || !a.revoking.is_empty() {
        assert!(Instant::now() < deadline, "never balanced: {a:?} {b:?}");
        a.tick(Duration::from_millis(20)).await;
        b.tick(Duration::from_millis(20)).await;
    }

    // b falls silent (its connection stays open); a keeps beating.
    let silent_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.owned_count() != 4 {
        assert!(Instant::now() < deadline, "partitions never moved: {a:?}");
        a.tick(Duration::from_millis(40)).await;
    }
    assert!(silent_since.elapsed() >= Duration::from_millis(700));

    let push = bounded("expelled push", async {
        loop {
            if let Push::Expelled(e) = b.client.next_push().await {
                return e;
            }
        }
    })
    .await;
    assert_eq!(push.member_id, b.id);
    assert_eq!(push.reason, ExpelReason::SessionExpired);
    let e = error_of(b.heartbeat().await);
    assert_eq!(e.code, ErrorCode::MemberExpelled);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn groups_on_every_shard_are_listed_in_order() {
    let server = start(ServerConfig {
        shards: 4,
        ..test_config()
    })
    .await;
    let addr = server.local_addr();
    let mut admin = RawClient::connected(addr).await;
    let mut names: Vec<String> = (0..12).map(|i| format!("list-{i:02}")).collect();
    for name in names.iter().rev() {
        let r = admin
            .request(Request::CommitOffsets(CommitOffsetsRequest {
                group: name.clone(),
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
        assert!(matches!(r, Response::CommitOffsets(_)), "{r:?}");
    }
    names.sort();
    assert_eq!(list_groups(&mut admin).await, names);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn metrics_endpoint_shows_counters_moving() {
    let server = start(ServerConfig {
        metrics_addr: Some(([127, 0, 0, 1], 0).into()),
        stats_interval: Duration::from_millis(50),
        ..test_config()
    })
    .await;
    let metrics = server.metrics_addr().expect("metrics served");
    let addr = server.local_addr();

    let mut m = Member::join(addr, join("g-metrics", "orders", 2, 10_000)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.owned_count() < 2 {
        assert!(Instant::now() < deadline, "no assignment pushed");
        m.tick(Duration::from_millis(20)).await;
    }
    for _ in 0..3 {
        m.heartbeat().await;
    }

    let (status, body) = http_get(metrics, "/metrics").await;
    assert!(status.contains("200"), "{status}");
    let heartbeats = sample(&body, "rollcall_heartbeats_total").unwrap_or(0.0);
    assert!(heartbeats >= 3.0, "{body}");
    assert!(sample(&body, "rollcall_requests_total{api=\"join\"}").unwrap_or(0.0) >= 1.0);
    assert!(
        sample(&body, "rollcall_rebalances_started_total{cause=\"join\"}").unwrap_or(0.0) >= 1.0,
        "{body}"
    );
    assert!(body.contains("rollcall_request_duration_seconds_bucket{api=\"heartbeat\""));
    assert!(sample(&body, "rollcall_connections").unwrap_or(0.0) >= 1.0);

    for _ in 0..5 {
        m.heartbeat().await;
    }
    // Gauges are refreshed by the shards every stats interval.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, later) = http_get(metrics, "/metrics").await;
        let moved = sample(&later, "rollcall_heartbeats_total").unwrap_or(0.0) >= heartbeats + 5.0;
        let groups = sample(&later, "rollcall_groups").unwrap_or(0.0) >= 1.0;
        let alive = sample(&later, "rollcall_members{liveness=\"alive\"}").unwrap_or(0.0) >= 1.0;
        if moved && groups && alive {
            break;
        }
        assert!(Instant::now() < deadline, "metrics did not move:\n{later}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (status, _) = http_get(metrics, "/nope").await;
    assert!(status.contains("404"), "{status}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_pushes_goodbye_to_every_connection() {
    let server = start(test_config()).await;
    let mut a = RawClient::connected(server.local_addr()).await;
    // Not handshaken, but accepted (it was answered).
    let mut b = RawClient::connect(server.local_addr()).await;
    let e = error_of(b.request(Request::ListGroups(Default::default())).await);
    assert_eq!(e.code, ErrorCode::HandshakeRequired);
    bounded("shutdown", server.shutdown()).await.unwrap();
    for c in [&mut a, &mut b] {
        let frames = c.expect_closed().await;
        assert!(
            frames
                .iter()
                .any(|f| matches!(f.body, Body::Push(Push::Shutdown(_)))),
            "{frames:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The binary
// ---------------------------------------------------------------------------------------------

const BIN: &str = env!("CARGO_BIN_EXE_rollcall-e2e");

async fn rollcall(args: &[&str]) -> CliOutput {
    run_cli(BIN, args, None).await
}

#[tokio::test]
async fn admin_commands_print_groups_members_and_offsets() {
    let server = start(test_config()).await;
    let addr = server.local_addr().to_string();
    let mut m = Member::join(server.local_addr(), join("g-admin", "orders", 4, 10_000)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.owned_count() < 4 {
        assert!(Instant::now() < deadline, "no assignment pushed");
        m.tick(Duration::from_millis(20)).await;
    }
    let committed = m
        .client
        .request(Request::CommitOffsets(CommitOffsetsRequest {
            group: m.group.clone(),
            member_id: Some(m.id.clone()),
            generation: m.generation,
            offsets: vec![OffsetCommit {
                topic: "orders".into(),
                partition: 1,
                offset: 1234,
                metadata: String::new(),
            }],
        }))
        .await;
    assert!(matches!(committed, Response::CommitOffsets(_)));

    let out = rollcall(&["groups", "--addr", &addr]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.starts_with("GROUP"), "{}", out.stdout);
    assert!(out.stdout.contains("g-admin"), "{}", out.stdout);

    let out = rollcall(&["describe", "g-admin", "--addr", &addr]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("state:      stable"), "{}", out.stdout);
    assert!(out.stdout.contains(&m.id), "{}", out.stdout);
    assert!(out.stdout.contains("orders[0-3]"), "{}", out.stdout);

    let out = rollcall(&["describe", "g-admin", "--addr", &addr, "--json"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["group"], "g-admin");
    assert_eq!(json["members"][0]["member_id"], m.id.as_str());
    assert_eq!(
        json["members"][0]["owned"][0]["partitions"],
        serde_json::json!([0, 1, 2, 3])
    );

    let out = rollcall(&["offsets", "g-admin", "--addr", &addr]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("orders"), "{}", out.stdout);
    assert!(out.stdout.contains("1234"), "{}", out.stdout);
    let out = rollcall(&["offsets", "g-admin", "--addr", &addr, "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["offsets"][0]["offset"], 1234);

    let out = rollcall(&["describe", "nope", "--addr", &addr]).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("group 'nope' not found"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    server.shutdown().await.unwrap();
}

/// With frames too small for the whole answer, `rollcall groups`, `offsets` and
/// `describe` read it a page at a time, where a version 0 request is refused
/// `frame_too_large`.
#[tokio::test]
async fn admin_commands_page_through_answers_larger_than_a_frame() {
    let mut config = ServerConfig {
        max_frame_size: 8 << 10,
        ..test_config()
    };
    config.core.max_partitions_per_group = 100;
    config.core.max_metadata_bytes = 1000;
    let server = start(config).await;
    let addr = server.local_addr().to_string();
    let mut c = RawClient::connected(server.local_addr()).await;
    // 150 groups of ~210-byte names (~32 KiB of listings), one with 600 offsets (~16
    // KiB), one with 120 members (~16 KiB described).
    let names: Vec<String> = (0..150)
        .map(|i| format!("{i:03}-{}", "g".repeat(200)))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let batches = if i == 0 { 0..3 } else { 0..1 };
        for batch in batches {
            let offsets = (batch * 200..batch * 200 + if i == 0 { 200 } else { 1 })
                .map(|p| OffsetCommit {
                    topic: "orders".into(),
                    partition: p,
                    offset: i64::from(p),
                    metadata: "m".into(),
                })
                .collect();
            let r = c
                .request(Request::CommitOffsets(CommitOffsetsRequest {
                    group: name.clone(),
                    member_id: None,
                    generation: 0,
                    offsets,
                }))
                .await;
            assert!(matches!(r, Response::CommitOffsets(_)), "commit refused");
        }
    }
    for _ in 0..120 {
        let r = c
            .request(Request::Join(join("g-many", "t", 4, 10_000)))
            .await;
        assert!(matches!(r, Response::Join(_)), "{r:?}");
    }
    for request in [
        Request::ListGroups(Default::default()),
        Request::FetchOffsets(FetchOffsetsRequest {
            group: names[0].clone(),
            topics: vec![],
            page: None,
        }),
        Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "g-many".into(),
            detection: true,
            page: None,
            summary: false,
        }),
    ] {
        match c.request(request).await {
            Response::Error(e) => assert_eq!(e.code, ErrorCode::FrameTooLarge, "{e:?}"),
            other => panic!("a whole answer fitted a frame: {:?}", other.api_key()),
        }
    }

    let out = rollcall(&["groups", "--addr", &addr, "--json"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let listed: Vec<&str> = json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["group"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = names.iter().map(String::as_str).collect();
    expected.push("g-many");
    expected.sort_unstable();
    assert_eq!(listed, expected);

    let out = rollcall(&["offsets", &names[0], "--addr", &addr, "--json"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let partitions: Vec<u64> = json["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["partition"].as_u64().unwrap())
        .collect();
    assert_eq!(partitions, (0..600).collect::<Vec<u64>>());

    let out = rollcall(&["describe", "g-many", "--addr", &addr, "--json"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["members"].as_array().unwrap().len(), 120);
    server.shutdown().await.unwrap();
}

/// `rollcall trace` records a group's heartbeat arrivals on the coordinator's clock, as
/// the detector lab reads them.
#[tokio::test]
async fn trace_records_heartbeat_arrivals_as_csv() {
    let server = start(test_config()).await;
    let addr = server.local_addr().to_string();
    let mut m = Member::join(server.local_addr(), join("g-trace", "t", 2, 10_000)).await;
    m.tick(Duration::from_millis(100)).await;
    let tracing = {
        let (addr, member) = (addr.clone(), m.id.clone());
        tokio::spawn(async move {
            rollcall(&[
                "trace",
                "g-trace",
                "--addr",
                &addr,
                "--duration",
                "2s",
                "--member",
                &member,
            ])
            .await
        })
    };
    // Beats every 100 ms while the trace runs (it begins with its first request).
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2_300) {
        m.tick(Duration::from_millis(100)).await;
    }
    let out = bounded("rollcall trace", tracing).await.unwrap();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let times: Vec<f64> = out
        .stdout
        .lines()
        .map(|l| l.parse().unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert!(times.len() >= 8, "{times:?}\n{}", out.stderr);
    assert!(times.windows(2).all(|w| w[1] > w[0]), "{times:?}");
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let median = {
        let mut g = gaps.clone();
        g.sort_by(f64::total_cmp);
        g[g.len() / 2]
    };
    assert!((0.05..0.5).contains(&median), "gaps {gaps:?}");

    // Every member, with a header, without --member; an unknown group is an error.
    let out = rollcall(&["trace", "g-trace", "--addr", &addr, "--duration", "300ms"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout.lines().next(), Some("time_s,member_id,seq"));
    let out = rollcall(&["trace", "nope", "--addr", &addr, "--duration", "300ms"]).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("group 'nope' not found"),
        "{}",
        out.stderr
    );
    server.shutdown().await.unwrap();
}

/// `rollcall trace` polls five times a second over one connection, and opens another
/// when that one is cut: a connection per poll would handshake (with TLS or SCRAM, the
/// costly part of both) at every poll.
#[tokio::test]
async fn trace_polls_over_one_connection_and_reconnects_when_cut() {
    let server = start(test_config()).await;
    let proxy = rollcall_tests::proxy::Proxy::start(server.local_addr()).await;
    let mut m = Member::join(server.local_addr(), join("g-poll", "t", 2, 10_000)).await;
    m.tick(Duration::from_millis(100)).await;
    let tracing = {
        let addr = proxy.addr().to_string();
        tokio::spawn(async move {
            rollcall(&["trace", "g-poll", "--addr", &addr, "--duration", "3s"]).await
        })
    };
    // About seven polls before the cut, seven after it.
    let started = Instant::now();
    let mut cut = false;
    while started.elapsed() < Duration::from_millis(3_300) {
        m.tick(Duration::from_millis(100)).await;
        if !cut && started.elapsed() > Duration::from_millis(1_500) {
            proxy.cut();
            cut = true;
        }
    }
    let out = bounded("rollcall trace", tracing).await.unwrap();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // The member's heartbeats: `time,member,seq` lines.
    let arrivals = out
        .stdout
        .lines()
        .filter(|l| {
            let fields: Vec<&str> = l.split(',').collect();
            matches!(fields[..], [t, id, _] if id == m.id && t.parse::<f64>().is_ok())
        })
        .count();
    assert!(arrivals >= 20, "{arrivals} arrivals:\n{}", out.stdout);
    assert_eq!(
        proxy.accepted(),
        2,
        "one connection, then one after the cut"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn admin_commands_fail_cleanly_when_the_coordinator_is_unreachable() {
    // Bind and release a port so nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let out = rollcall(&["groups", "--addr", &addr]).await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("cannot connect"), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(!out.stderr.contains("panicked"));
}

#[tokio::test]
async fn bad_configuration_exits_2_with_one_line() {
    for args in [
        &["serve", "--shards", "0"][..],
        &["serve", "--handshake-timeout", "soon"],
        &["serve", "--listen", "nowhere"],
        &[
            "serve",
            "--min-session-timeout",
            "1h",
            "--max-session-timeout",
            "1m",
        ],
        &["serve", "--config", "/nonexistent/rollcall.toml"],
    ] {
        let out = rollcall(args).await;
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "{args:?}: {}",
            out.stderr
        );
    }
    let out = rollcall(&["serve", "--help"]).await;
    assert_eq!(out.code, Some(0));
    assert!(out.stdout.contains("--handshake-timeout"));
    assert!(out.stdout.contains("ROLLCALL_LISTEN"));
}

#[tokio::test]
async fn an_unusable_store_exits_3_naming_the_file() {
    let dir = TempDir::new("corrupt");
    std::fs::write(
        dir.path().join("rollcall.redb"),
        b"definitely not a database",
    )
    .unwrap();
    let out = rollcall(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-addr",
        "off",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(out.stderr.contains("rollcall.redb"), "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
}

#[tokio::test]
async fn a_truncated_store_exits_3_with_only_the_clean_message() {
    let dir = TempDir::new("truncated");
    let server = start(ServerConfig {
        store: StoreConfig::Dir(dir.path().to_owned()),
        ..test_config()
    })
    .await;
    let mut c = RawClient::connected(server.local_addr()).await;
    for batch in 0..10 {
        let offsets = (0..500)
            .map(|p| OffsetCommit {
                topic: format!("topic-{batch}"),
                partition: p,
                offset: 1,
                metadata: "meta".into(),
            })
            .collect();
        let committed = c
            .request(Request::CommitOffsets(CommitOffsetsRequest {
                group: format!("g-{batch}"),
                member_id: None,
                generation: 0,
                offsets,
            }))
            .await;
        assert!(matches!(committed, Response::CommitOffsets(_)));
    }
    drop(c);
    server.shutdown().await.unwrap();

    let file = dir.path().join("rollcall.redb");
    let full = std::fs::read(&file).unwrap();
    // Lengths at which redb itself panics while opening; the coordinator turns the
    // panic into its error, and nothing else reaches stderr.
    for len in [full.len() / 2, full.len() - 4096] {
        std::fs::write(&file, &full[..len]).unwrap();
        let out = rollcall(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-addr",
            "off",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ])
        .await;
        assert_eq!(out.code, Some(3), "truncated to {len}: {}", out.stderr);
        assert!(out.stderr.contains("rollcall.redb"), "{}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    }
}

fn sigterm(child: &tokio::process::Child) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

#[tokio::test]
async fn sigterm_shuts_down_cleanly_and_a_restart_restores_the_group() {
    let dir = TempDir::new("sigterm");
    let (mut child, addr) = serve_process(BIN, dir.path()).await;

    let mut m = Member::join(addr, join("g-restart", "orders", 3, 30_000)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.owned_count() < 3 {
        assert!(Instant::now() < deadline, "no assignment pushed");
        m.tick(Duration::from_millis(20)).await;
    }

    sigterm(&child);
    let frames = m.client.expect_closed().await;
    assert!(
        frames
            .iter()
            .any(|f| matches!(f.body, Body::Push(Push::Shutdown(_)))),
        "{frames:?}"
    );
    let status = bounded("exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));

    // The member's session and partitions survive the restart.
    let (mut child, addr) = serve_process(BIN, dir.path()).await;
    let mut admin = RawClient::connected(addr).await;
    let described = admin
        .request(Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "g-restart".into(),
            detection: false,
            page: None,
            summary: false,
        }))
        .await;
    let Response::DescribeGroup(d) = described else {
        panic!("{described:?}");
    };
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].member_id, m.id);
    sigterm(&child);
    let status = bounded("exit", child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(0));
}

// ---------------------------------------------------------------------------------------------
// Durability
// ---------------------------------------------------------------------------------------------

fn admin_commit(group: &str, offset: i64) -> Request {
    Request::CommitOffsets(CommitOffsetsRequest {
        group: group.into(),
        member_id: None,
        generation: 0,
        offsets: vec![OffsetCommit {
            topic: "t".into(),
            partition: 0,
            offset,
            metadata: String::new(),
        }],
    })
}

#[tokio::test]
async fn answers_wait_for_durability_and_leave_in_order() {
    let store = Arc::new(MemoryStore::new());
    store.set_write_delay(Duration::from_millis(200));
    let server = start(ServerConfig {
        store: StoreConfig::Custom(store.clone()),
        ..test_config()
    })
    .await;
    let mut c = RawClient::connected(server.local_addr()).await;
    let started = Instant::now();
    // A commit (slow to make durable) and then a describe of the same group, pipelined:
    // the describe needs no write but must not overtake the commit.
    c.send(Frame::request(100, admin_commit("durable", 7)))
        .await;
    c.send(Frame::request(
        101,
        Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "durable".into(),
            detection: false,
            page: None,
            summary: false,
        }),
    ))
    .await;
    let first = c.next_frame().await.unwrap().unwrap();
    assert_eq!(first.correlation_id, 100, "{first:?}");
    assert!(started.elapsed() >= Duration::from_millis(190));
    assert!(store.records_written() >= 1);
    let Body::Response(Response::CommitOffsets(r)) = first.body else {
        panic!("{first:?}");
    };
    assert_eq!(r.results[0].error, ErrorCode::None);
    let second = c.next_frame().await.unwrap().unwrap();
    assert_eq!(second.correlation_id, 101, "{second:?}");
    server.shutdown().await.unwrap();
}

/// A heartbeat reveals nothing that waits for durability: it is answered at once, even
/// while another group's records are on their way to a slow store, and ahead of that
/// group's answers on the same connection. What concerns the slow group itself waits.
#[tokio::test]
async fn a_heartbeat_does_not_wait_behind_another_groups_durable_write() {
    let store = Arc::new(MemoryStore::new());
    let server = start(ServerConfig {
        store: StoreConfig::Custom(store.clone()),
        ..test_config()
    })
    .await;
    let mut member = Member::join(server.local_addr(), join("quick", "t", 4, 10_000)).await;
    // Settled: its group's rebalance is durable and its assignment in hand.
    member.tick(Duration::from_millis(300)).await;
    assert_eq!(member.owned_count(), 4);
    store.set_write_delay(Duration::from_millis(300));
    let mut c = RawClient::connected(server.local_addr()).await;
    c.send(Frame::request(200, admin_commit("slow", 1))).await;
    c.send(Frame::request(
        201,
        Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "slow".into(),
            detection: false,
            page: None,
            summary: false,
        }),
    ))
    .await;
    // Let the commit reach the store and wait there.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let answer = member.heartbeat().await;
    let waited = started.elapsed();
    assert!(matches!(answer, Response::Heartbeat(_)), "{answer:?}");
    assert!(
        waited < Duration::from_millis(200),
        "the heartbeat waited {waited:?} behind another group's write"
    );
    // The slow group's answers come once its commit is durable, commit first.
    let first = c.next_frame().await.unwrap().unwrap();
    assert_eq!(first.correlation_id, 200, "{first:?}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    let second = c.next_frame().await.unwrap().unwrap();
    assert_eq!(second.correlation_id, 201, "{second:?}");
    store.set_write_delay(Duration::ZERO);
    assert!(matches!(member.heartbeat().await, Response::Heartbeat(_)));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_failing_store_answers_storage_failure_and_stops_the_server() {
    let store = Arc::new(MemoryStore::new());
    let server = start(ServerConfig {
        store: StoreConfig::Custom(store.clone()),
        ..test_config()
    })
    .await;
    let mut c = RawClient::connected(server.local_addr()).await;
    store.set_fail_writes(Some(StoreError::Io("disk on fire".into())));
    // A commit and, in the same read, a request about its group that writes nothing
    // but waits for the commit's batch (it could reveal what the batch writes).
    let mut both = RawClient::encode(&Frame::request(300, admin_commit("fragile", 1)));
    both.extend_from_slice(&RawClient::encode(&Frame::request(
        301,
        Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "fragile".into(),
            detection: false,
            page: None,
            summary: false,
        }),
    )));
    c.send_raw(&both).await;
    let e = error_of(c.response_to(300).await);
    assert_eq!(e.code, ErrorCode::StorageFailure);
    assert_eq!(e.api_key, ApiKey::CommitOffsets as u16);
    let e = error_of(c.response_to(301).await);
    assert_eq!(e.code, ErrorCode::StorageFailure, "{e:?}");

    // A failed durable write is fatal: the server stops rather than serve state the
    // store does not have, and says why.
    let stopped = bounded("server stops", server.shutdown()).await;
    assert!(
        matches!(&stopped, Err(ServerError::Runtime(m)) if m.contains("shard failed")),
        "{stopped:?}"
    );
}

/// Offsets retention deletes a group that stayed empty past the retention, and only
/// once the last commit the coordinator accepted for it is as old: the store judges
/// by its wall clock, the core by its own.
#[tokio::test]
async fn retention_purges_offsets_of_long_empty_groups() {
    // The store's wall clock is ours to move.
    let offset_ms = Arc::new(AtomicU64::new(0));
    let clock_offset = offset_ms.clone();
    let clock: Clock = Arc::new(move || {
        SystemTime::now() + Duration::from_millis(clock_offset.load(Ordering::Relaxed))
    });
    let store = Arc::new(MemoryStore::with_clock(clock));
    const RETENTION: Duration = Duration::from_millis(500);
    let server = start(ServerConfig {
        store: StoreConfig::Custom(store.clone()),
        offsets_retention: RETENTION,
        retention_interval: Duration::from_millis(50),
        ..test_config()
    })
    .await;
    let mut c = RawClient::connected(server.local_addr()).await;
    // No later than the core accepts the commit.
    let committed = Instant::now();
    let r = c.request(admin_commit("stale", 9)).await;
    assert!(matches!(r, Response::CommitOffsets(_)), "{r:?}");
    let fetch = || {
        Request::FetchOffsets(FetchOffsetsRequest {
            group: "stale".into(),
            topics: vec![],
            page: None,
        })
    };
    let Response::FetchOffsets(before) = c.request(fetch()).await else {
        panic!("fetch failed");
    };
    assert_eq!(before.offsets.len(), 1);

    // The store finds the group expired at once; the core keeps it until the commit it
    // accepted is older than the retention by its own clock.
    offset_ms.store(3_600_000, Ordering::Relaxed);
    let deadline = committed + Duration::from_secs(5);
    loop {
        let Response::FetchOffsets(now) = c.request(fetch()).await else {
            panic!("fetch failed");
        };
        if now.offsets.is_empty() {
            assert!(
                committed.elapsed() >= RETENTION,
                "purged before the retention"
            );
            break;
        }
        assert!(Instant::now() < deadline, "offsets never purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The fetch that saw nothing left after the deletion was durable.
    let stored = store.load().unwrap();
    assert!(
        stored.offsets.iter().all(|o| o.group != "stale"),
        "{stored:?}"
    );
    server.shutdown().await.unwrap();
}

/// A [`MemoryStore`] that remembers every group retention was told had expired, and
/// whose writes can be held back, like a very slow fsync.
#[derive(Debug, Default)]
struct WatchedStore {
    inner: MemoryStore,
    reported: parking_lot::Mutex<Vec<String>>,
    hold_writes: AtomicBool,
    writes_started: AtomicU64,
}

impl Store for WatchedStore {
    fn load(&self) -> Result<RestoredState, StoreError> {
        self.inner.load()
    }

    fn write(&self, records: &[Record]) -> Result<(), StoreError> {
        self.writes_started.fetch_add(1, Ordering::SeqCst);
        while self.hold_writes.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.inner.write(records)
    }

    fn expired_groups(&self, retention: Duration) -> Result<Vec<String>, StoreError> {
        let expired = self.inner.expired_groups(retention)?;
        self.reported.lock().extend(expired.iter().cloned());
        Ok(expired)
    }
}

/// The store finds a group empty for longer than the retention while a member that just
/// joined is still on its way to the store: the group's offsets survive, in the core, in
/// the store and across a restart.
#[tokio::test]
async fn retention_keeps_a_group_that_regained_a_member() {
    let offset_secs = Arc::new(AtomicU64::new(0));
    let clock_offset = offset_secs.clone();
    let clock: Clock = Arc::new(move || {
        SystemTime::now() + Duration::from_secs(clock_offset.load(Ordering::Relaxed))
    });
    let store = Arc::new(WatchedStore {
        inner: MemoryStore::with_clock(clock),
        ..WatchedStore::default()
    });
    let config = ServerConfig {
        store: StoreConfig::Custom(store.clone()),
        offsets_retention: Duration::from_secs(3600),
        retention_interval: Duration::from_millis(20),
        ..test_config()
    };
    let server = start(config.clone()).await;
    let addr = server.local_addr();
    let mut admin = RawClient::connected(addr).await;
    let r = admin.request(admin_commit("race", 9)).await;
    assert!(matches!(r, Response::CommitOffsets(_)), "{r:?}");

    // The join's snapshot, with its member, is held on its way to the store.
    store.hold_writes.store(true, Ordering::SeqCst);
    let writes = store.writes_started.load(Ordering::SeqCst);
    let mut member = RawClient::connected(addr).await;
    let join_id = member.next_id();
    member
        .send(Frame::request(
            join_id,
            Request::Join(join("race", "t", 1, 10_000)),
        ))
        .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.writes_started.load(Ordering::SeqCst) == writes {
        assert!(Instant::now() < deadline, "the join was never written");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The member is in the core; the store still sees the group empty, now for longer
    // than the retention.
    offset_secs.store(7200, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !store.reported.lock().iter().any(|g| g == "race") {
        assert!(Instant::now() < deadline, "retention never saw the group");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    store.hold_writes.store(false, Ordering::SeqCst);
    let joined = member.response_to(join_id).await;
    assert!(matches!(joined, Response::Join(_)), "{joined:?}");
    // More retention passes, now that the store knows of the member.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let fetch = Request::FetchOffsets(FetchOffsetsRequest {
        group: "race".into(),
        topics: vec![],
        page: None,
    });
    let Response::FetchOffsets(fetched) = admin.request(fetch.clone()).await else {
        panic!("fetch failed");
    };
    assert_eq!(fetched.offsets.len(), 1, "{fetched:?}");
    assert_eq!(fetched.offsets[0].offset, 9);
    let stored = store.load().unwrap();
    assert!(
        stored
            .offsets
            .iter()
            .any(|o| o.group == "race" && o.offset == 9),
        "{stored:?}"
    );
    drop(member);
    server.shutdown().await.unwrap();

    let server = start(config).await;
    let mut admin = RawClient::connected(server.local_addr()).await;
    let Response::FetchOffsets(fetched) = admin.request(fetch).await else {
        panic!("fetch failed");
    };
    assert_eq!(fetched.offsets.len(), 1, "{fetched:?}");
    assert_eq!(fetched.offsets[0].offset, 9);
    server.shutdown().await.unwrap();
}

/// Connections served on the main runtime (`io_threads: 0`) and spread over three
/// connection threads behave alike: members on different connections (so, with
/// threads, on different threads) are balanced by pushes, answered, and said goodbye
/// to at shutdown.
#[tokio::test]
async fn connections_are_served_alike_on_the_runtime_and_on_connection_threads() {
    for io_threads in [0, 3] {
        let server = start(ServerConfig {
            io_threads,
            ..test_config()
        })
        .await;
        let addr = server.local_addr();
        let group = format!("g-io-{io_threads}");
        let mut members = Vec::new();
        for _ in 0..3 {
            members.push(Member::join(addr, join(&group, "orders", 6, 10_000)).await);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while members
            .iter()
            .any(|m| m.owned_count() != 2 || !m.revoking.is_empty())
        {
            assert!(
                Instant::now() < deadline,
                "never balanced with {io_threads} threads: {members:?}"
            );
            for m in &mut members {
                m.tick(Duration::from_millis(20)).await;
            }
        }
        for m in &mut members {
            assert!(matches!(m.heartbeat().await, Response::Heartbeat(_)));
        }
        bounded("shutdown", server.shutdown()).await.unwrap();
        for m in &mut members {
            let last = bounded("close", m.client.expect_closed()).await;
            assert!(
                last.iter()
                    .any(|f| matches!(&f.body, Body::Push(Push::Shutdown(_)))),
                "no shutdown push with {io_threads} threads: {last:?}"
            );
        }
    }
}
