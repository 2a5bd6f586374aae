//! Resource limits under attack, over real TCP: connections that never finish a frame,
//! connections that never say anything, a client that never reads, and limits that
//! would not fit the frame size. Every limit is set small so each test takes a second
//! or two.

use std::time::{Duration, Instant};

use rollcall_coordinator::server::{
    max_partitions_for, Server, ServerConfig, ServerError, DEFAULT_MAX_PARTITIONS_PER_GROUP,
};
use rollcall_protocol::{
    Body, CommitOffsetsRequest, ErrorCode, FetchOffsetsRequest, Frame, OffsetCommit, Request,
    Response,
};
use rollcall_tests::{bounded, join, start, test_config, Member, RawClient};

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

/// Commits `count` offsets with `metadata_bytes` of metadata each to `group`, as an
/// administrator (no member id).
async fn commit(client: &mut RawClient, group: &str, first: u32, count: u32, metadata: usize) {
    let offsets = (first..first + count)
        .map(|p| OffsetCommit {
            topic: "t".into(),
            partition: p,
            offset: 1,
            metadata: "x".repeat(metadata),
        })
        .collect();
    let committed = client
        .request(Request::CommitOffsets(CommitOffsetsRequest {
            group: group.into(),
            member_id: None,
            generation: 0,
            offsets,
        }))
        .await;
    let Response::CommitOffsets(committed) = committed else {
        panic!("{committed:?}");
    };
    assert!(committed.results.iter().all(|r| r.error == ErrorCode::None));
}

fn fetch(group: &str) -> Request {
    Request::FetchOffsets(FetchOffsetsRequest {
        group: group.into(),
        topics: vec![],
        page: None,
    })
}

#[tokio::test]
async fn slowloris_connections_are_closed_after_the_frame_deadline() {
    let frame_timeout = Duration::from_millis(400);
    let server = start(ServerConfig {
        frame_timeout,
        // Far longer than the test: only the frame deadline can close them.
        handshake_timeout: Duration::from_secs(30),
        ..test_config()
    })
    .await;
    let addr = server.local_addr();
    let mut member = Member::join(addr, join("g-steady", "orders", 4, 10_000)).await;

    // Each opens a frame and stops: half a length prefix, a prefix announcing 1 MiB
    // (the coordinator reserves it), or a prefix and part of the body; half of them
    // after a handshake.
    let started = Instant::now();
    let mut attackers = Vec::new();
    for i in 0..24 {
        let mut c = if i % 2 == 0 {
            RawClient::connected(addr).await
        } else {
            RawClient::connect(addr).await
        };
        let mut partial = 1_048_576u32.to_be_bytes().to_vec();
        match i % 3 {
            0 => partial.truncate(2),
            1 => {}
            _ => partial.extend_from_slice(&[0u8; 100]),
        }
        c.send_raw(&partial).await;
        attackers.push(c);
    }

    // The member keeps heartbeating without an error meanwhile.
    while started.elapsed() < frame_timeout * 2 {
        let response = member.heartbeat().await;
        assert!(matches!(response, Response::Heartbeat(_)), "{response:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The first is told why, then closed.
    let first = &mut attackers[0];
    match bounded("frame deadline answer", first.next_frame()).await {
        Some(Ok(Frame {
            correlation_id: 0,
            body: Body::Response(Response::Error(e)),
        })) => {
            assert_eq!(e.code, ErrorCode::MalformedFrame);
            assert!(e.message.contains("not completed within 400ms"), "{e:?}");
        }
        other => panic!("expected the frame deadline's answer, got {other:?}"),
    }
    for (i, c) in attackers.iter_mut().enumerate() {
        assert!(
            c.closed_within(Duration::from_secs(3)).await,
            "attacker {i} still connected"
        );
    }
    assert!(started.elapsed() >= frame_timeout);

    // The member was never disturbed, and a whole frame sent slowly but in time passes.
    assert!(matches!(member.heartbeat().await, Response::Heartbeat(_)));
    let mut slow = RawClient::connected(addr).await;
    let bytes = RawClient::encode(&Frame::request(40, Request::ListGroups(Default::default())));
    slow.send_raw(&bytes[..3]).await;
    tokio::time::sleep(frame_timeout / 2).await;
    slow.send_raw(&bytes[3..]).await;
    assert!(matches!(
        slow.response_to(40).await,
        Response::ListGroups(_)
    ));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_idle_handshaken_connection_is_closed_after_the_idle_deadline() {
    let idle_timeout = Duration::from_millis(500);
    let mut config = ServerConfig {
        idle_timeout,
        ..test_config()
    };
    config.core.max_session_timeout = Duration::from_millis(400);
    let server = start(config).await;
    let addr = server.local_addr();

    let started = Instant::now();
    let mut idle = RawClient::connected(addr).await;
    let mut busy = RawClient::connected(addr).await;
    // A connection that speaks more often than the deadline stays open.
    while started.elapsed() < idle_timeout * 2 {
        assert!(list_groups(&mut busy).await.is_empty());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(idle.closed_within(Duration::from_secs(3)).await);
    assert!(started.elapsed() >= idle_timeout);
    assert!(list_groups(&mut busy).await.is_empty());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_read_is_disconnected_by_queued_bytes() {
    let max_frame_size = 64 << 10;
    let mut config = ServerConfig {
        max_frame_size,
        // Far more frames than the test queues: only the bytes can overflow.
        send_buffer: 4096,
        send_buffer_bytes: max_frame_size,
        ..test_config()
    };
    config.core.max_partitions_per_group = 1000;
    let server = start(config).await;
    let addr = server.local_addr();
    // Every fetch is answered with ~56 KiB.
    let mut admin = RawClient::connected(addr).await;
    commit(&mut admin, "big", 0, 14, 4000).await;

    // 400 answers, ~22 MiB: more than the socket buffers hold, far fewer than 4096
    // frames. It never reads.
    let mut lazy = RawClient::connected(addr).await;
    let mut pipelined = bytes::BytesMut::new();
    for id in 0..400 {
        pipelined.extend_from_slice(&RawClient::encode(&Frame::request(100 + id, fetch("big"))));
    }
    lazy.send_raw(&pipelined).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        lazy.closed_within(Duration::from_secs(3)).await,
        "slow reader still connected"
    );

    // Everyone else is fine, and a client that reads gets the same answers.
    assert_eq!(list_groups(&mut admin).await, vec!["big".to_owned()]);
    for _ in 0..5 {
        let Response::FetchOffsets(f) = admin.request(fetch("big")).await else {
            panic!("fetch failed");
        };
        assert_eq!(f.offsets.len(), 14);
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_partition_limit_that_does_not_fit_the_frame_is_refused() {
    for (max_frame_size, partitions) in [
        // The limit the core allows on its own: its pushes do not fit 1 MiB.
        (1 << 20, 1_000_000),
        (
            1 << 20,
            u32::try_from(max_partitions_for(1 << 20)).unwrap() + 1,
        ),
        (64 << 10, DEFAULT_MAX_PARTITIONS_PER_GROUP),
    ] {
        let mut config = ServerConfig {
            max_frame_size,
            ..test_config()
        };
        config.core.max_partitions_per_group = partitions;
        match Server::bind(config).await {
            Err(ServerError::Config(e)) => {
                assert_eq!(e.option, "max-partitions-per-group", "{e}");
                assert!(e.reason.contains("at most"), "{e}");
            }
            Err(e) => panic!("{partitions} in {max_frame_size}: {e}"),
            Ok(_) => panic!("{partitions} partitions accepted with {max_frame_size}-byte frames"),
        }
    }
    // The largest that fits is accepted.
    let mut config = test_config();
    config.core.max_partitions_per_group = u32::try_from(max_partitions_for(1 << 20)).unwrap();
    let server = start(config).await;
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_answer_too_large_for_a_frame_is_refused_frame_too_large() {
    let max_frame_size = 4096;
    let mut config = ServerConfig {
        max_frame_size,
        ..test_config()
    };
    config.core.max_partitions_per_group = 100;
    // One offset with the largest metadata must still fit an answer.
    config.core.max_metadata_bytes = 1500;
    let server = start(config).await;
    let mut c = RawClient::connected(server.local_addr()).await;
    // Two commits that each fit a frame; their offsets together do not.
    commit(&mut c, "wide", 0, 2, 1500).await;
    commit(&mut c, "wide", 2, 2, 1500).await;
    let e = error_of(c.request(fetch("wide")).await);
    assert_eq!(e.code, ErrorCode::FrameTooLarge);
    assert!(e.message.contains("maximum of 4096"), "{e:?}");
    // The connection stays usable.
    assert_eq!(list_groups(&mut c).await, vec!["wide".to_owned()]);
    server.shutdown().await.unwrap();
}

/// Every connection's buffers together are bounded: with room for two frames of 1 MiB
/// being read, a third connection that starts one is told and closed, the two keep
/// their place, a member elsewhere keeps heartbeating, and the room comes back when
/// the two go.
#[tokio::test]
async fn large_frames_past_the_shared_buffer_budget_are_refused() {
    let server = start(ServerConfig {
        max_frame_size: 1 << 20,
        send_buffer_bytes: 1 << 20,
        max_buffered_bytes: 2 << 20,
        handshake_timeout: Duration::from_secs(30),
        frame_timeout: Duration::from_secs(30),
        ..test_config()
    })
    .await;
    let addr = server.local_addr();
    let mut member = Member::join(addr, join("g-steady", "orders", 4, 10_000)).await;
    let start_large_frame = || async {
        let mut c = RawClient::connected(addr).await;
        let mut partial = 1_000_000u32.to_be_bytes().to_vec();
        partial.extend_from_slice(&[0u8; 100]);
        c.send_raw(&partial).await;
        c
    };
    let mut first = start_large_frame().await;
    let mut second = start_large_frame().await;
    let mut third = start_large_frame().await;
    match bounded("the refusal", third.next_frame()).await {
        Some(Ok(Frame {
            correlation_id: 0,
            body: Body::Response(Response::Error(e)),
        })) => {
            assert_eq!(e.code, ErrorCode::TooManyConnections);
            assert!(e.message.contains("buffers are at their budget"), "{e:?}");
        }
        other => panic!("expected the budget's answer, got {other:?}"),
    }
    assert!(third.closed_within(Duration::from_secs(3)).await);
    let response = member.heartbeat().await;
    assert!(matches!(response, Response::Heartbeat(_)), "{response:?}");
    assert!(!first.closed_within(Duration::from_millis(100)).await);
    assert!(!second.closed_within(Duration::from_millis(100)).await);

    drop(first);
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = start_large_frame().await;
        if !again.closed_within(Duration::from_millis(200)).await {
            break;
        }
        assert!(Instant::now() < deadline, "the budget was never given back");
    }
    let response = member.heartbeat().await;
    assert!(matches!(response, Response::Heartbeat(_)), "{response:?}");
    server.shutdown().await.unwrap();
}
