//! The coordinator's gate, over real TCP: a server whose directory (set by hand here, by
//! the slot manager in a cluster) says a group is not served here answers its requests
//! `not_coordinator` or `coordinator_loading` without handling them, each beat of a
//! Heartbeats request on its own, and answers FindCoordinator for any group.

use rollcall_coordinator::server::{slot_of, Directory, Server};
use rollcall_protocol::{
    ApiKey, ErrorCode, FetchOffsetsRequest, FindCoordinatorRequest, FindCoordinatorResponse,
    HeartbeatRequest, HeartbeatsRequest, Request, Response,
};
use rollcall_tests::{bounded, join, test_config, Member, RawClient};

const SLOTS: u32 = 16;

/// Two groups in different slots.
fn two_groups() -> (String, String) {
    let a = "gate-a".to_owned();
    let b = (0..1000)
        .map(|i| format!("gate-b{i}"))
        .find(|g| slot_of(g, SLOTS) != slot_of(&a, SLOTS))
        .expect("a group in another slot");
    (a, b)
}

async fn start_with(directory: Directory) -> rollcall_coordinator::server::ServerHandle {
    bounded("server bind", Server::bind(test_config()))
        .await
        .expect("binds")
        .with_directory(directory)
        .spawn()
}

fn error_code(response: &Response) -> Option<ErrorCode> {
    match response {
        Response::Error(e) => Some(e.code),
        _ => None,
    }
}

fn beat(m: &Member, sequence: u64) -> HeartbeatRequest {
    HeartbeatRequest {
        loads: Vec::new(),
        group: m.group.clone().into(),
        member_id: m.id.clone().into(),
        generation: m.generation,
        sequence,
        progress: sequence,
        acked_revocations: Vec::new(),
    }
}

#[tokio::test]
async fn a_single_coordinator_names_itself_for_every_group() {
    let server = rollcall_tests::start(test_config()).await;
    let mut client = RawClient::connected(server.local_addr()).await;
    for group in ["a", "billing", "z"] {
        let answer = client
            .request(Request::FindCoordinator(FindCoordinatorRequest {
                group: group.into(),
            }))
            .await;
        assert_eq!(
            answer,
            Response::FindCoordinator(FindCoordinatorResponse {
                addr: server.local_addr().to_string()
            })
        );
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_advertised_address_is_the_configured_one() {
    let config = rollcall_coordinator::server::ServerConfig {
        advertise: Some("coordinator-1.example:7070".into()),
        ..test_config()
    };
    let server = rollcall_tests::start(config).await;
    let mut client = RawClient::connected(server.local_addr()).await;
    let answer = client
        .request(Request::FindCoordinator(FindCoordinatorRequest {
            group: "g".into(),
        }))
        .await;
    assert_eq!(
        answer,
        Response::FindCoordinator(FindCoordinatorResponse {
            addr: "coordinator-1.example:7070".into()
        })
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn requests_for_groups_not_here_are_refused_before_any_shard() {
    let (a, b) = two_groups();
    let directory = Directory::cluster(SLOTS);
    directory.test_set_here(slot_of(&a, SLOTS));
    directory.test_set_here(slot_of(&b, SLOTS));
    let server = start_with(directory.clone()).await;
    let addr = server.local_addr();

    let mut ma = Member::join(addr, join(&a, "t", 4, 10_000)).await;
    let mut mb = Member::join(addr, join(&b, "t", 4, 10_000)).await;
    assert!(matches!(ma.heartbeat().await, Response::Heartbeat(_)));

    // `b` moves away: its requests are refused, `a`'s are not.
    directory.test_set_elsewhere(slot_of(&b, SLOTS), "10.0.0.2:7070");
    let refused = mb.heartbeat().await;
    assert_eq!(
        error_code(&refused),
        Some(ErrorCode::NotCoordinator),
        "{refused:?}"
    );
    assert_eq!(refused.api_key(), ApiKey::Heartbeat as u16);
    assert!(matches!(ma.heartbeat().await, Response::Heartbeat(_)));
    let fetch = mb
        .client
        .request(Request::FetchOffsets(FetchOffsetsRequest {
            group: b.clone(),
            topics: Vec::new(),
            page: None,
        }))
        .await;
    assert_eq!(error_code(&fetch), Some(ErrorCode::NotCoordinator));
    let joined = mb
        .client
        .request(Request::Join(join(&b, "t", 4, 10_000)))
        .await;
    assert_eq!(error_code(&joined), Some(ErrorCode::NotCoordinator));
    let found = mb
        .client
        .request(Request::FindCoordinator(FindCoordinatorRequest {
            group: b.clone(),
        }))
        .await;
    assert_eq!(
        found,
        Response::FindCoordinator(FindCoordinatorResponse {
            addr: "10.0.0.2:7070".into()
        })
    );

    // Loading, then unknown.
    directory.test_set_loading(slot_of(&b, SLOTS));
    assert_eq!(
        error_code(&mb.heartbeat().await),
        Some(ErrorCode::CoordinatorLoading)
    );
    let found = mb
        .client
        .request(Request::FindCoordinator(FindCoordinatorRequest {
            group: b.clone(),
        }))
        .await;
    assert_eq!(error_code(&found), Some(ErrorCode::CoordinatorLoading));
    directory.test_set_unknown(slot_of(&b, SLOTS));
    assert_eq!(
        error_code(&mb.heartbeat().await),
        Some(ErrorCode::NotCoordinator)
    );
    let found = mb
        .client
        .request(Request::FindCoordinator(FindCoordinatorRequest {
            group: b.clone(),
        }))
        .await;
    assert_eq!(error_code(&found), Some(ErrorCode::NotCoordinator));

    // Back here: the member was never touched, and carries on as it was.
    directory.test_set_here(slot_of(&b, SLOTS));
    assert!(matches!(mb.heartbeat().await, Response::Heartbeat(_)));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn each_beat_of_a_heartbeats_request_is_gated_on_its_own() {
    let (a, b) = two_groups();
    let directory = Directory::cluster(SLOTS);
    directory.test_set_here(slot_of(&a, SLOTS));
    directory.test_set_here(slot_of(&b, SLOTS));
    let server = start_with(directory.clone()).await;
    let addr = server.local_addr();
    let ma = Member::join(addr, join(&a, "t", 4, 10_000)).await;
    let mb = Member::join(addr, join(&b, "t", 4, 10_000)).await;
    let mut client = RawClient::connected(addr).await;

    let beats = |seq| {
        Request::Heartbeats(HeartbeatsRequest {
            beats: vec![beat(&ma, seq), beat(&mb, seq), beat(&ma, seq + 1)],
        })
    };
    let Response::Heartbeats(all) = client.request(beats(1)).await else {
        panic!("a Heartbeats answer");
    };
    assert!(
        all.results.iter().all(|r| r.code == ErrorCode::None),
        "{all:?}"
    );

    for (set, code) in [
        (0, ErrorCode::NotCoordinator),
        (1, ErrorCode::CoordinatorLoading),
    ] {
        match set {
            0 => directory.test_set_elsewhere(slot_of(&b, SLOTS), "10.0.0.2:7070"),
            _ => directory.test_set_loading(slot_of(&b, SLOTS)),
        }
        let Response::Heartbeats(answer) = client.request(beats(10 + set)).await else {
            panic!("a Heartbeats answer");
        };
        let codes: Vec<ErrorCode> = answer.results.iter().map(|r| r.code).collect();
        assert_eq!(codes, [ErrorCode::None, code, ErrorCode::None]);
        assert_eq!(answer.results[0].session_timeout_ms, 10_000);
        assert!(answer.results[1].message.contains(&b), "{answer:?}");
    }
    // Every beat of one group not here, in a request of that group alone.
    let Response::Heartbeats(answer) = client
        .request(Request::Heartbeats(HeartbeatsRequest {
            beats: vec![beat(&mb, 20), beat(&mb, 21)],
        }))
        .await
    else {
        panic!("a Heartbeats answer");
    };
    assert!(answer
        .results
        .iter()
        .all(|r| r.code == ErrorCode::CoordinatorLoading));
    server.shutdown().await.unwrap();
}
