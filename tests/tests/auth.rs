//! Authentication and per-group authorisation, end to end over TCP: a coordinator with
//! an auth file refuses the unauthenticated, closes on a wrong password, and keeps each
//! principal to the groups its rules name, for every operation; the client crate
//! authenticates with credentials; a changed file takes effect without a restart.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rollcall_client::{Client, ClientConfig, ConnectError, Event, MemberConfig};
use rollcall_coordinator::server::{ServerConfig, ServerHandle};
use rollcall_protocol::scram::StoredCredential;
use rollcall_protocol::{
    AuthenticateRequest, Body, CommitOffsetsRequest, DescribeGroupRequest, ErrorCode,
    FetchOffsetsRequest, Frame, FrameKind, Header, HeartbeatRequest, HeartbeatsRequest, LeaveMode,
    LeaveRequest, ListCoordinatorsRequest, ListCoordinatorsResponse, OffsetCommit,
    RelinquishRequest, Request, Response, TraceGroupRequest,
};
use rollcall_tests::{
    bounded, join, run_cli, start, test_config, CliOutput, Member, RawClient, TempDir,
};

/// Low iterations keep the tests quick; the protocol's floor is 4096.
const ITERATIONS: u32 = 4096;

fn credential(password: &str) -> String {
    StoredCredential::generate(password, ITERATIONS)
        .unwrap()
        .to_string()
}

/// alice may be a member of, commit to, fetch and describe `orders*`; bob the same on
/// `billing`; ops may describe and administer everything.
fn auth_file(dir: &TempDir) -> std::path::PathBuf {
    let path = dir.path().join("auth.toml");
    let text = format!(
        r#"
[users]
alice = "{alice}"
bob = "{bob}"
ops = "{ops}"

[[acl]]
principals = ["alice"]
groups = ["orders"]
group-prefixes = ["orders-"]
operations = ["join", "commit", "fetch", "describe"]

[[acl]]
principals = ["bob"]
groups = ["billing"]
operations = ["join", "commit", "fetch", "describe"]

[[acl]]
principals = ["ops"]
group-prefixes = [""]
operations = ["describe", "admin"]
"#,
        alice = credential("alice-pw"),
        bob = credential("bob-pw"),
        ops = credential("ops-pw"),
    );
    std::fs::write(&path, text).unwrap();
    path
}

async fn secured(dir: &TempDir) -> (ServerHandle, std::path::PathBuf) {
    let path = auth_file(dir);
    let server = start(ServerConfig {
        auth_file: Some(path.clone()),
        auth_reload_interval: Duration::from_millis(50),
        ..test_config()
    })
    .await;
    (server, path)
}

async fn as_user(addr: SocketAddr, user: &str, password: &str) -> RawClient {
    let mut client = RawClient::connected(addr).await;
    let principal = client
        .authenticate(user, password)
        .await
        .unwrap_or_else(|e| panic!("{user} authenticates: {e}"));
    assert_eq!(principal, user);
    client
}

fn code(response: &Response) -> ErrorCode {
    match response {
        Response::Error(e) => e.code,
        _ => ErrorCode::None,
    }
}

fn message(response: &Response) -> String {
    match response {
        Response::Error(e) => e.message.clone(),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn nothing_but_the_handshake_and_authentication_before_authenticating() {
    let dir = TempDir::new("auth-required");
    let (server, _) = secured(&dir).await;
    let mut client = RawClient::connected(server.local_addr()).await;
    for request in [
        Request::Join(join("orders", "t", 4, 10_000)),
        Request::ListGroups(Default::default()),
        Request::ListCoordinators(ListCoordinatorsRequest),
        Request::FetchOffsets(FetchOffsetsRequest {
            group: "orders".into(),
            topics: vec![],
            page: None,
        }),
    ] {
        let answer = client.request(request).await;
        assert_eq!(
            code(&answer),
            ErrorCode::AuthenticationRequired,
            "{answer:?}"
        );
        assert!(message(&answer).contains("Authenticate"), "{answer:?}");
    }
    // Still open: authenticating now works.
    assert_eq!(
        client.authenticate("alice", "alice-pw").await.unwrap(),
        "alice"
    );
    let joined = client
        .request(Request::Join(join("orders", "t", 4, 10_000)))
        .await;
    assert!(matches!(joined, Response::Join(_)), "{joined:?}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn any_authenticated_principal_may_list_the_coordinators() {
    // Like FindCoordinator, it names no group and reveals only addresses: alice, who
    // may describe only her own groups, is answered (a single coordinator: no others).
    let dir = TempDir::new("auth-list-coordinators");
    let (server, _) = secured(&dir).await;
    let mut alice = as_user(server.local_addr(), "alice", "alice-pw").await;
    let answer = alice
        .request(Request::ListCoordinators(ListCoordinatorsRequest))
        .await;
    assert_eq!(
        answer,
        Response::ListCoordinators(ListCoordinatorsResponse::default())
    );
}

#[tokio::test]
async fn a_wrong_password_or_an_unknown_user_fails_alike_and_closes_the_connection() {
    let dir = TempDir::new("auth-wrong");
    let (server, _) = secured(&dir).await;
    let mut messages = Vec::new();
    for (user, password) in [("alice", "wrong"), ("mallory", "alice-pw")] {
        let mut client = RawClient::connected(server.local_addr()).await;
        let failed = client.authenticate(user, password).await;
        let Err(ConnectError::Authentication(m)) = failed else {
            panic!("{user}: expected an authentication failure, got {failed:?}");
        };
        assert!(m.contains("authentication_failed"), "{m}");
        messages.push(m);
        assert!(
            client.closed_within(Duration::from_secs(3)).await,
            "the connection closes after a failed authentication"
        );
    }
    assert_eq!(
        messages[0], messages[1],
        "an unknown user reads as a wrong password"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_coordinator_without_an_auth_file_refuses_to_authenticate() {
    let server = start(test_config()).await;
    let mut client = RawClient::connected(server.local_addr()).await;
    let failed = client.authenticate("alice", "alice-pw").await;
    let Err(ConnectError::Authentication(m)) = failed else {
        panic!("{failed:?}");
    };
    assert!(m.contains("does not authenticate"), "{m}");
    server.shutdown().await.unwrap();
}

/// alice, a member of `orders`, tries every operation on bob's group `billing` (and on
/// a group that does not exist): each is refused alike, and bob is undisturbed.
#[tokio::test]
async fn a_member_of_one_group_can_do_nothing_to_another_nor_learn_of_it() {
    let dir = TempDir::new("auth-cross");
    let (server, _) = secured(&dir).await;
    let addr = server.local_addr();
    let bob_conn = as_user(addr, "bob", "bob-pw").await;
    let mut bob = Member::join_on(bob_conn, join("billing", "t", 4, 10_000)).await;
    bounded("bob's assignment", async {
        while bob.owned_count() < 4 {
            bob.tick(Duration::from_millis(20)).await;
        }
    })
    .await;
    let alice_conn = as_user(addr, "alice", "alice-pw").await;
    let mut alice = Member::join_on(alice_conn, join("orders", "t", 2, 10_000)).await;

    let commit = |group: &str, member_id: Option<String>| {
        Request::CommitOffsets(CommitOffsetsRequest {
            group: group.into(),
            member_id,
            generation: 1,
            offsets: vec![OffsetCommit {
                topic: "t".into(),
                partition: 0,
                offset: 99,
                metadata: String::new(),
            }],
        })
    };
    let beat = |group: &str, member_id: &str, generation: u32| HeartbeatRequest {
        loads: Vec::new(),
        group: group.into(),
        member_id: member_id.into(),
        generation,
        sequence: 1,
        progress: 1,
        acked_revocations: vec![],
    };
    for group in ["billing", "no-such-group"] {
        let attempts = [
            ("join", Request::Join(join(group, "t", 4, 10_000))),
            (
                "heartbeat",
                Request::Heartbeat(beat(group, &bob.id, bob.generation)),
            ),
            (
                "leave",
                Request::Leave(LeaveRequest {
                    group: group.into(),
                    member_id: bob.id.clone(),
                    mode: LeaveMode::Released,
                }),
            ),
            ("commit", commit(group, Some(bob.id.clone()))),
            ("admin commit", commit(group, None)),
            (
                "fetch",
                Request::FetchOffsets(FetchOffsetsRequest {
                    group: group.into(),
                    topics: vec![],
                    page: None,
                }),
            ),
            (
                "describe",
                Request::DescribeGroup(DescribeGroupRequest {
                    operator: false,
                    group: group.into(),
                    detection: true,
                    page: None,
                    summary: false,
                }),
            ),
            (
                "trace",
                Request::TraceGroup(TraceGroupRequest {
                    group: group.into(),
                    epoch: 0,
                    cursor: 0,
                    events: true,
                }),
            ),
            (
                "relinquish",
                Request::Relinquish(RelinquishRequest {
                    group: group.into(),
                    member_id: bob.id.clone(),
                }),
            ),
        ];
        for (what, request) in attempts {
            let answer = alice.client.request(request).await;
            assert_eq!(
                code(&answer),
                ErrorCode::NotAuthorized,
                "{what} on {group}: {answer:?}"
            );
            assert_eq!(
                message(&answer),
                "not authorized for this operation on this group",
                "{what} on {group}: the answer must not tell whether the group exists"
            );
        }
    }

    // A Heartbeats frame: alice's own beat is handled, the one for billing refused.
    let answer = alice
        .client
        .request(Request::Heartbeats(HeartbeatsRequest {
            beats: vec![
                beat("orders", &alice.id, alice.generation),
                beat("billing", &bob.id, bob.generation),
            ],
        }))
        .await;
    let Response::Heartbeats(results) = answer else {
        panic!("{answer:?}");
    };
    assert_eq!(results.results[0].code, ErrorCode::None, "{results:?}");
    assert_eq!(
        results.results[1].code,
        ErrorCode::NotAuthorized,
        "{results:?}"
    );

    // ListGroups shows alice her group only; ops sees both.
    let listed = |r: Response| match r {
        Response::ListGroups(l) => l.groups.into_iter().map(|g| g.group).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        listed(
            alice
                .client
                .request(Request::ListGroups(Default::default()))
                .await
        ),
        ["orders"]
    );
    let mut ops = as_user(addr, "ops", "ops-pw").await;
    assert_eq!(
        listed(ops.request(Request::ListGroups(Default::default())).await),
        ["billing", "orders"]
    );
    // ops may administer but not be a member.
    let answer = ops
        .request(Request::Join(join("billing", "t", 4, 10_000)))
        .await;
    assert_eq!(code(&answer), ErrorCode::NotAuthorized);

    // Bob was not touched: still a member with all four partitions and offsets unset.
    let answer = bob.heartbeat().await;
    assert!(matches!(answer, Response::Heartbeat(_)), "{answer:?}");
    assert_eq!(bob.owned_count(), 4);
    assert!(bob.expelled.is_none());
    let fetched = bob
        .client
        .request(Request::FetchOffsets(FetchOffsetsRequest {
            group: "billing".into(),
            topics: vec![],
            page: None,
        }))
        .await;
    let Response::FetchOffsets(fetched) = fetched else {
        panic!("{fetched:?}");
    };
    assert!(fetched.offsets.is_empty(), "{fetched:?}");
    server.shutdown().await.unwrap();
}

fn client_config() -> ClientConfig {
    let mut c = ClientConfig::default();
    c.connect_timeout = Duration::from_secs(2);
    c.reconnect_base = Duration::from_millis(20);
    c.reconnect_max = Duration::from_millis(200);
    c
}

#[tokio::test]
async fn the_client_crate_authenticates_with_its_credentials() {
    let dir = TempDir::new("auth-client");
    let (server, _) = secured(&dir).await;
    let addr = server.local_addr();

    let wrong = Client::connect(addr, client_config().with_credentials("alice", "nope")).await;
    assert!(
        matches!(&wrong, Err(ConnectError::Authentication(m)) if m.contains("authentication_failed")),
        "{wrong:?}"
    );
    let anonymous = bounded("connect", Client::connect(addr, client_config()))
        .await
        .unwrap();
    let refused = bounded(
        "join",
        anonymous.join(MemberConfig::new("orders", [("t", 2)])),
    )
    .await;
    assert!(
        format!("{:?}", refused.err()).contains("AuthenticationRequired"),
        "a join without credentials is refused for want of them"
    );

    let client = bounded(
        "connect",
        Client::connect(addr, client_config().with_credentials("alice", "alice-pw")),
    )
    .await
    .expect("alice connects");
    let member = bounded(
        "join",
        client.join(MemberConfig::new("orders-eu", [("t", 2)])),
    )
    .await
    .expect("alice may join orders-eu");
    bounded("assignment", async {
        loop {
            if let Some(Event::Assigned { partitions, .. }) = member.next_event().await {
                if !partitions.is_empty() {
                    return;
                }
            }
        }
    })
    .await;
    let refused = bounded(
        "join billing",
        client.join(MemberConfig::new("billing", [("t", 2)])),
    )
    .await;
    assert!(
        format!("{:?}", refused.err()).contains("NotAuthorized"),
        "alice may not join billing"
    );
    server.shutdown().await.unwrap();
}

/// Rules and users change with the file, without a restart: a rule taken away denies at
/// once; a user taken away must authenticate again (and cannot).
#[tokio::test]
async fn a_changed_auth_file_takes_effect_without_a_restart() {
    let dir = TempDir::new("auth-reload");
    let (server, path) = secured(&dir).await;
    let mut alice = as_user(server.local_addr(), "alice", "alice-pw").await;
    let fetch = || {
        Request::FetchOffsets(FetchOffsetsRequest {
            group: "orders".into(),
            topics: vec![],
            page: None,
        })
    };
    assert_eq!(code(&alice.request(fetch()).await), ErrorCode::None);

    let original = std::fs::read_to_string(&path).unwrap();
    let without_rules = original.split("[[acl]]").next().unwrap().to_owned();
    std::fs::write(&path, &without_rules).unwrap();
    wait_for_code(&mut alice, fetch, ErrorCode::NotAuthorized).await;

    // A file that does not parse changes nothing.
    std::fs::write(&path, "[[acl]]\nbroken = true\n").unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        code(&alice.request(fetch()).await),
        ErrorCode::NotAuthorized
    );

    // Without alice in it, her connection is no longer authenticated.
    let bob_only: String = without_rules
        .lines()
        .filter(|l| !l.starts_with("alice"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, bob_only).unwrap();
    wait_for_code(&mut alice, fetch, ErrorCode::AuthenticationRequired).await;
    server.shutdown().await.unwrap();
}

async fn wait_for_code(client: &mut RawClient, request: impl Fn() -> Request, want: ErrorCode) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = code(&client.request(request()).await);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "still {got} rather than {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The admin commands authenticate with --user and --password-file, and see what the
/// user's rules let them; `rollcall hash-password` makes the credential the file holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_commands_authenticate_and_hash_password_makes_a_working_credential() {
    let dir = TempDir::new("auth-cli");
    let hashed = run(
        &["hash-password", "--iterations", "4096"],
        Some("pa55 word\n"),
    )
    .await;
    assert_eq!(hashed.code, Some(0), "{}", hashed.stderr);
    let credential = hashed.stdout.trim().to_owned();
    assert!(
        credential.starts_with("SCRAM-SHA-256$4096:"),
        "{credential}"
    );
    assert!(
        !hashed.stdout.contains("pa55"),
        "the password is not printed"
    );
    assert!(
        hashed.stderr.contains("line end"),
        "the dropped newline is mentioned: {}",
        hashed.stderr
    );
    let path = dir.path().join("auth.toml");
    std::fs::write(
        &path,
        format!(
            "[users]\nauditor = \"{credential}\"\nmaker = \"{maker}\"\n\
             [[acl]]\nprincipals = [\"auditor\"]\ngroup-prefixes = [\"orders\"]\noperations = [\"describe\"]\n\
             [[acl]]\nprincipals = [\"maker\"]\ngroup-prefixes = [\"\"]\noperations = [\"join\"]\n",
            maker = self::credential("maker-pw"),
        ),
    )
    .unwrap();
    let server = start(ServerConfig {
        auth_file: Some(path),
        ..test_config()
    })
    .await;
    let addr = server.local_addr().to_string();
    let mut maker = as_user(server.local_addr(), "maker", "maker-pw").await;
    for group in ["orders", "billing"] {
        let joined = maker
            .request(Request::Join(join(group, "t", 1, 10_000)))
            .await;
        assert!(matches!(joined, Response::Join(_)), "{joined:?}");
    }
    let password = dir.path().join("password");
    std::fs::write(&password, "pa55 word\n").unwrap();
    let password_file = password.to_str().unwrap();
    let as_auditor = [
        "groups",
        "--addr",
        &addr,
        "--user",
        "auditor",
        "--password-file",
        password_file,
    ];
    let listed = run(&as_auditor, None).await;
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    assert!(listed.stdout.contains("orders"), "{}", listed.stdout);
    assert!(!listed.stdout.contains("billing"), "{}", listed.stdout);
    std::fs::write(&password, "wrong\n").unwrap();
    let refused = run(&as_auditor, None).await;
    assert_eq!(refused.code, Some(1));
    assert!(
        refused.stderr.contains("authentication failed"),
        "{}",
        refused.stderr
    );
    let anonymous = run(&["groups", "--addr", &addr], None).await;
    assert_eq!(anonymous.code, Some(1));
    assert!(
        anonymous.stderr.contains("authentication_required"),
        "{}",
        anonymous.stderr
    );
    server.shutdown().await.unwrap();
}

/// Runs the `rollcall` binary with `args` and `stdin`.
async fn run(args: &[&str], stdin: Option<&str>) -> CliOutput {
    run_cli(env!("CARGO_BIN_EXE_rollcall-e2e"), args, stdin).await
}

/// One principal can hold at most --max-connections-per-principal connections: one
/// more is refused when it authenticates, another principal is not, and a slot comes
/// back when a connection closes.
#[tokio::test]
async fn a_principal_past_its_connection_limit_is_refused_when_it_authenticates() {
    let dir = TempDir::new("auth-per-principal");
    let server = start(ServerConfig {
        auth_file: Some(auth_file(&dir)),
        max_connections_per_principal: 2,
        ..test_config()
    })
    .await;
    let addr = server.local_addr();
    let first = as_user(addr, "alice", "alice-pw").await;
    let _second = as_user(addr, "alice", "alice-pw").await;
    let mut third = RawClient::connected(addr).await;
    let refused = third.authenticate("alice", "alice-pw").await;
    assert!(
        matches!(&refused, Err(ConnectError::Authentication(m)) if m.contains("too_many_connections")),
        "{refused:?}"
    );
    assert!(third.closed_within(Duration::from_secs(3)).await);
    let _bob = as_user(addr, "bob", "bob-pw").await;

    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = RawClient::connected(addr).await;
        if again.authenticate("alice", "alice-pw").await.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed connection's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.shutdown().await.unwrap();
}

/// A connection whose user was removed from the file is no longer authenticated, and may
/// authenticate again on the same connection once the user is back. Authenticate on a
/// connection that is authenticated is answered `invalid_request`, and the connection
/// stays open and authenticated.
#[tokio::test]
async fn a_removed_user_added_back_authenticates_again_on_the_same_connection() {
    let dir = TempDir::new("auth-readd");
    let (server, path) = secured(&dir).await;
    let mut alice = as_user(server.local_addr(), "alice", "alice-pw").await;
    let fetch = || {
        Request::FetchOffsets(FetchOffsetsRequest {
            group: "orders".into(),
            topics: vec![],
            page: None,
        })
    };

    let again = alice
        .request(Request::Authenticate(AuthenticateRequest {
            mechanism: "SCRAM-SHA-256".into(),
            payload: "n,,n=alice,r=abcdefgh".into(),
        }))
        .await;
    assert_eq!(code(&again), ErrorCode::InvalidRequest, "{again:?}");
    assert_eq!(code(&alice.request(fetch()).await), ErrorCode::None);

    let original = std::fs::read_to_string(&path).unwrap();
    let without_alice: String = original
        .lines()
        .filter(|l| !l.starts_with("alice"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&path, without_alice).unwrap();
    wait_for_code(&mut alice, fetch, ErrorCode::AuthenticationRequired).await;

    std::fs::write(&path, &original).unwrap();
    // Once the file with alice is in force (a fresh connection can log in as her)...
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut probe = RawClient::connected(server.local_addr()).await;
        if probe.authenticate("alice", "alice-pw").await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "alice never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ...the connection she lost authenticates again.
    assert_eq!(
        alice.authenticate("alice", "alice-pw").await.unwrap(),
        "alice"
    );
    assert_eq!(code(&alice.request(fetch()).await), ErrorCode::None);
    server.shutdown().await.unwrap();
}

/// An unknown user is answered a server-first message like a known one's (its salt the
/// same every time for that name, its iteration count 4096), and fails only at the
/// proof.
#[tokio::test]
async fn an_unknown_user_gets_a_fake_server_first_message() {
    let dir = TempDir::new("auth-fake");
    let (server, _) = secured(&dir).await;
    let addr = server.local_addr();
    let first = |user: &str| {
        Request::Authenticate(AuthenticateRequest {
            mechanism: "SCRAM-SHA-256".into(),
            payload: format!("n,,n={user},r=clientnonce"),
        })
    };
    let salt_of = |response: Response| match response {
        Response::Authenticate(a) => {
            assert!(!a.complete, "{a:?}");
            assert!(a.payload.starts_with("r=clientnonce"), "{a:?}");
            let fields: Vec<&str> = a.payload.split(',').collect();
            assert_eq!(fields.len(), 3, "{a:?}");
            assert_eq!(fields[2], "i=4096", "{a:?}");
            fields[1].to_owned()
        }
        other => panic!("expected a server-first message, got {other:?}"),
    };
    let mut salts = Vec::new();
    for user in ["mallory", "mallory", "alice"] {
        let mut client = RawClient::connected(addr).await;
        salts.push(salt_of(client.request(first(user)).await));
    }
    assert_eq!(salts[0], salts[1], "an unknown user's salt is stable");
    assert_ne!(salts[0], salts[2]);
    server.shutdown().await.unwrap();
}

/// Which answer wins: an unknown API key is answered `unknown_api` even before
/// authenticating; once authenticated, a request the principal may not make is answered
/// `not_authorized` whatever else is wrong with it (the group would refuse it too).
#[tokio::test]
async fn not_authorized_comes_before_what_the_group_would_answer() {
    let dir = TempDir::new("auth-order");
    let (server, _) = secured(&dir).await;
    let addr = server.local_addr();
    let mut anonymous = RawClient::connected(addr).await;
    anonymous
        .send(Frame {
            correlation_id: 7,
            body: Body::Unsupported(Header {
                kind: FrameKind::Request,
                api_key: 99,
                api_version: 0,
                correlation_id: 7,
            }),
        })
        .await;
    assert_eq!(code(&anonymous.response_to(7).await), ErrorCode::UnknownApi);

    let mut alice = as_user(addr, "alice", "alice-pw").await;
    // A session timeout no coordinator accepts, on a group alice may not join.
    let answer = alice
        .request(Request::Join(join("billing", "t", 4, 1)))
        .await;
    assert_eq!(code(&answer), ErrorCode::NotAuthorized, "{answer:?}");
    // The same on her own group: the group's answer.
    let answer = alice
        .request(Request::Join(join("orders", "t", 4, 1)))
        .await;
    assert_eq!(
        code(&answer),
        ErrorCode::InvalidSessionTimeout,
        "{answer:?}"
    );
    // A heartbeat naming nobody, on a group she may not be a member of.
    let answer = alice
        .request(Request::Heartbeat(HeartbeatRequest {
            loads: Vec::new(),
            group: "billing".into(),
            member_id: "".into(),
            generation: 0,
            sequence: 1,
            progress: 0,
            acked_revocations: vec![],
        }))
        .await;
    assert_eq!(code(&answer), ErrorCode::NotAuthorized, "{answer:?}");
    server.shutdown().await.unwrap();
}

/// Nothing bounds how long a connection may stay unauthenticated but the idle deadline:
/// one that sends a frame within every idle timeout (each answered
/// `authentication_required`) stays open; a silent one is closed at the idle deadline.
#[tokio::test]
async fn an_unauthenticated_connection_lasts_until_the_idle_deadline() {
    let dir = TempDir::new("auth-idle");
    let idle_timeout = Duration::from_millis(500);
    let mut config = ServerConfig {
        auth_file: Some(auth_file(&dir)),
        idle_timeout,
        ..test_config()
    };
    config.core.max_session_timeout = Duration::from_millis(400);
    let server = start(config).await;
    let addr = server.local_addr();
    let started = Instant::now();
    let mut silent = RawClient::connected(addr).await;
    let mut talking = RawClient::connected(addr).await;
    while started.elapsed() < idle_timeout * 3 {
        let answer = talking
            .request(Request::ListGroups(Default::default()))
            .await;
        assert_eq!(code(&answer), ErrorCode::AuthenticationRequired);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(silent.closed_within(Duration::from_secs(3)).await);
    assert!(started.elapsed() >= idle_timeout);
    assert_eq!(
        talking.authenticate("alice", "alice-pw").await.unwrap(),
        "alice"
    );
    server.shutdown().await.unwrap();
}

/// A Heartbeats request of more beats than the protocol allows is refused whole, as it
/// is without an auth file, even when some of its beats name groups the principal may
/// not touch: the refusal of those beats must not answer it beat by beat.
#[tokio::test]
async fn too_many_beats_are_refused_whole_even_when_some_are_denied() {
    let dir = TempDir::new("auth-max-beats");
    let (server, _) = secured(&dir).await;
    let mut alice = as_user(server.local_addr(), "alice", "alice-pw").await;
    let beats = (0..=rollcall_protocol::MAX_BEATS)
        .map(|i| HeartbeatRequest {
            loads: Vec::new(),
            group: if i % 2 == 0 { "orders" } else { "billing" }.into(),
            member_id: format!("m-{i}").into(),
            generation: 1,
            sequence: 1,
            progress: 0,
            acked_revocations: vec![],
        })
        .collect();
    let answer = alice
        .request(Request::Heartbeats(HeartbeatsRequest { beats }))
        .await;
    assert_eq!(
        code(&answer),
        ErrorCode::InvalidRequest,
        "{}",
        message(&answer)
    );
    server.shutdown().await.unwrap();
}

/// Drain and AlterGroupConfig: `admin` drains anyone and sets anything; a member with
/// `join` alone may drain itself, on its own connection, and no one else; `describe`
/// reads the settings.
#[tokio::test]
async fn a_member_drains_itself_an_operator_drains_anyone() {
    use rollcall_protocol::{AlterGroupConfigRequest, DrainRequest};
    let dir = TempDir::new("auth-drain");
    let (server, _) = secured(&dir).await;
    let addr = server.local_addr();
    let mut a = Member::join_on(
        as_user(addr, "bob", "bob-pw").await,
        join("billing", "t", 4, 10_000),
    )
    .await;
    let mut b = Member::join_on(
        as_user(addr, "bob", "bob-pw").await,
        join("billing", "t", 4, 10_000),
    )
    .await;
    let drain = |member: &str, label: &str| {
        Request::Drain(DrainRequest {
            group: "billing".into(),
            member_id: member.into(),
            label: label.into(),
            drained: true,
        })
    };
    // b's connection may not drain a, nor a label; nor change the settings.
    let r = b.client.request(drain(&a.id, "")).await;
    assert_eq!(code(&r), ErrorCode::NotAuthorized, "{}", message(&r));
    let r = b.client.request(drain("", "host-1")).await;
    assert_eq!(code(&r), ErrorCode::NotAuthorized, "{}", message(&r));
    let set = Request::AlterGroupConfig(AlterGroupConfigRequest {
        group: "billing".into(),
        max_revoking: Some(10),
        ..Default::default()
    });
    let r = b.client.request(set.clone()).await;
    assert_eq!(code(&r), ErrorCode::NotAuthorized, "{}", message(&r));
    // A member drains itself on its own connection.
    let r = a.client.request(drain(&a.id, "")).await;
    assert!(
        matches!(&r, Response::Drain(d) if d.members == [a.id.clone()]),
        "{r:?}"
    );
    // ops drains by label and sets the settings; bob reads them.
    let mut ops = as_user(addr, "ops", "ops-pw").await;
    let r = ops.request(drain("", "host-1")).await;
    assert!(matches!(r, Response::Drain(_)), "{r:?}");
    let r = ops.request(set).await;
    assert!(
        matches!(&r, Response::AlterGroupConfig(c) if c.config.max_revoking == 10),
        "{r:?}"
    );
    let read = Request::AlterGroupConfig(AlterGroupConfigRequest {
        group: "billing".into(),
        ..Default::default()
    });
    let r = b.client.request(read).await;
    assert!(
        matches!(&r, Response::AlterGroupConfig(c) if c.config.max_revoking == 10),
        "{r:?}"
    );
    // alice (no rule on billing) may not even read.
    let mut alice = as_user(addr, "alice", "alice-pw").await;
    let r = alice
        .request(Request::AlterGroupConfig(AlterGroupConfigRequest {
            group: "billing".into(),
            ..Default::default()
        }))
        .await;
    assert_eq!(code(&r), ErrorCode::NotAuthorized);
    // a's partitions move to b.
    bounded("the drained member's partitions move", async {
        while b.owned_count() < 4 || a.owned_count() > 0 {
            a.tick(Duration::from_millis(20)).await;
            b.tick(Duration::from_millis(20)).await;
        }
    })
    .await;
}
