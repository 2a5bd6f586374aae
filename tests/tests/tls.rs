//! TLS end to end, over real TCP on 127.0.0.1: a member over TLS, clients refused for
//! the right reasons (no TLS, an untrusted or expired server certificate, a missing,
//! expired or untrusted client certificate), the client certificate's identity on the
//! coordinator's side, a member retrying TLS failures until it trusts the renewed
//! certificate, the refusal of a connection over the limit, the shutdown push and
//! close_notify, certificates reloaded without a restart (on a change of the files
//! and on SIGHUP), and the command line: `serve` with bad files, admin commands over
//! TLS.
//!
//! Certificates are made here with rcgen: two CAs, server certificates for localhost and
//! 127.0.0.1, client certificates, and expired ones of each. The coordinator's log is
//! read where it is the only witness (the identity of a client certificate): in-process
//! servers log into a buffer this binary keeps.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rollcall_client::raw::{ConnectOptions, Connection};
use rollcall_client::{Client, ClientConfig, ConnectError, Event, MemberConfig, TlsConfig};
use rollcall_coordinator::server::{ClientAuth, ServerConfig, ServerHandle, TlsSettings};
use rollcall_protocol::{
    ApiVersionsRequest, Body, DescribeGroupRequest, ErrorCode, Frame, Push, Request, Response,
};
use rollcall_tests::proxy::Proxy;
use rollcall_tests::{
    bounded, http_get, run_cli, sample, start, test_config, CliOutput, RawClient, ServeProcess,
    TempDir, STEP,
};
use tokio::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_rollcall-e2e");

const SESSION: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------------

/// A certificate authority.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
struct Pair {
    cert: String,
    key: String,
}

/// Validity: current, or over a year ago.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Validity {
    Current,
    Expired,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key"))
            .expect("CA certificate");
        Self { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn issue(
        &self,
        cn: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        validity: Validity,
    ) -> Pair {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if validity == Validity::Expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for localhost and 127.0.0.1.
    fn server(&self, validity: Validity) -> Pair {
        self.issue(
            "rollcall coordinator",
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            validity,
        )
    }

    /// A client certificate with this Common Name.
    fn client(&self, cn: &str, validity: Validity) -> Pair {
        self.issue(cn, &[], ExtendedKeyUsagePurpose::ClientAuth, validity)
    }
}

/// Writes `text` to `path` in one step (a new file renamed over the old one), as a
/// certificate renewal would.
fn replace(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).expect("write");
    std::fs::rename(&staged, path).expect("rename");
}

/// A directory of PEM files.
struct Files {
    dir: TempDir,
}

impl Files {
    fn new(tag: &str) -> Self {
        Self {
            dir: TempDir::new(tag),
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        replace(&path, text);
        path
    }

    fn pair(&self, name: &str, pair: &Pair) -> (PathBuf, PathBuf) {
        (
            self.write(&format!("{name}.pem"), &pair.cert),
            self.write(&format!("{name}-key.pem"), &pair.key),
        )
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

// ---------------------------------------------------------------------------------------------
// The coordinator's log
// ---------------------------------------------------------------------------------------------

/// What the in-process coordinators of this binary logged.
fn log() -> &'static Mutex<Vec<u8>> {
    static LOG: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "warn,rollcall_coordinator=debug",
            ))
            .with_ansi(false)
            .with_writer(move || LogWriter(log))
            .try_init();
        log
    })
}

struct LogWriter(&'static Mutex<Vec<u8>>);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lines logged so far that contain every one of `patterns`.
fn logged(patterns: &[&str]) -> Vec<String> {
    let log = log().lock().expect("log lock");
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|line| patterns.iter().all(|p| line.contains(p)))
        .map(str::to_owned)
        .collect()
}

/// Polls `check` every 20 ms until it holds, failing the test after [`STEP`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {STEP:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Servers and clients
// ---------------------------------------------------------------------------------------------

fn tls_settings(cert: &Path, key: &Path) -> TlsSettings {
    TlsSettings {
        cert: Some(cert.to_owned()),
        key: Some(key.to_owned()),
        ..TlsSettings::default()
    }
}

async fn start_tls(tls: TlsSettings) -> ServerHandle {
    log();
    start(ServerConfig {
        tls,
        metrics_addr: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ..test_config()
    })
    .await
}

fn client_config(tls: TlsConfig) -> ClientConfig {
    let mut c = ClientConfig::default().with_tls(tls);
    c.reconnect_base = Duration::from_millis(20);
    c.reconnect_max = Duration::from_millis(200);
    c.connect_timeout = Duration::from_secs(2);
    c
}

fn options(tls: TlsConfig) -> ConnectOptions {
    ConnectOptions::new("rollcall-tls-test")
        .with_timeout(Duration::from_secs(2))
        .with_tls(tls)
}

/// A raw connection over TLS to `addr`, or why not.
async fn connect_raw(addr: SocketAddr, tls: TlsConfig) -> Result<Connection, ConnectError> {
    bounded(
        "connect",
        Connection::connect_with(&addr.to_string(), &options(tls)),
    )
    .await
}

/// The TLS failure of `result`, failing the test on anything else.
fn tls_failure<T>(result: Result<T, ConnectError>) -> String {
    match result {
        Err(ConnectError::Tls(message)) => message,
        Err(other) => panic!("expected a TLS error, got {other:?}"),
        Ok(_) => panic!("expected a TLS error, but the connection was made"),
    }
}

/// The value of `rollcall_protocol_errors_total{kind}` on `server`'s endpoint.
async fn protocol_errors(server: &ServerHandle, kind: &str) -> f64 {
    let addr = server.metrics_addr().expect("metrics served");
    let (_, body) = http_get(addr, "/metrics").await;
    sample(
        &body,
        &format!("rollcall_protocol_errors_total{{kind=\"{kind}\"}}"),
    )
    .unwrap_or(0.0)
}

fn member_config(group: &str) -> MemberConfig {
    MemberConfig::new(group, [("t", 4)])
        .with_session_timeout(SESSION)
        .with_rebalance_timeout(Duration::from_secs(5))
}

/// Takes `member`'s events for `window`, failing on any but assignments.
async fn stays_assigned(member: &rollcall_client::Member, window: Duration) {
    let until = Instant::now() + window;
    while let Ok(event) = tokio::time::timeout_at(until, member.next_event()).await {
        match event {
            Some(Event::Assigned { .. }) => {}
            other => panic!("the member was disturbed: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_joins_heartbeats_and_commits_over_tls() {
    let ca = Ca::new("rollcall test CA");
    let files = Files::new("tls-member");
    let ca_file = files.write("ca.pem", &ca.pem());
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let server = start_tls(tls_settings(&cert, &key)).await;

    let client = bounded(
        "client connect",
        Client::connect(
            server.local_addr(),
            client_config(TlsConfig::from_files(&ca_file, None)),
        ),
    )
    .await
    .expect("connects over TLS");
    let member = bounded("join", client.join(member_config("tls-member")))
        .await
        .expect("joins");
    let first = bounded("assignment", member.next_event()).await;
    assert!(matches!(first, Some(Event::Assigned { .. })), "{first:?}");
    // Several session timeouts: only heartbeats over TLS keep it in its group.
    stays_assigned(&member, SESSION * 3).await;
    assert!(!member.is_suspended());
    bounded(
        "commit",
        member.commit([(rollcall_client::TopicPartition::new("t", 1), 77)]),
    )
    .await
    .expect("commits");
    let committed = bounded("committed", member.committed(["t"]))
        .await
        .expect("reads its offsets");
    assert_eq!(
        committed[&rollcall_client::TopicPartition::new("t", 1)].offset,
        77
    );

    // A raw connection by name, localhost, over TLS too: the group is there.
    let mut raw = bounded(
        "raw connect",
        Connection::connect_with(
            &format!("localhost:{}", server.local_addr().port()),
            &options(TlsConfig::from_pem(ca.pem())),
        ),
    )
    .await
    .expect("raw connection over TLS");
    match bounded("list", raw.request(Request::ListGroups(Default::default()))).await {
        Ok(Response::ListGroups(list)) => {
            assert!(
                list.groups.iter().any(|g| g.group == "tls-member"),
                "{list:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(raw.into_transport().get_ref().is_tls());
    bounded("leave", member.leave(Duration::from_secs(2)))
        .await
        .expect("leaves");
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_is_refused_cleanly_and_the_failure_counted() {
    let ca = Ca::new("rollcall test CA");
    let files = Files::new("tls-plain");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let server = start_tls(tls_settings(&cert, &key)).await;
    let before = protocol_errors(&server, "tls_handshake_failed").await;

    // The client crate, plain: a clear error, at once.
    let started = Instant::now();
    let e = bounded(
        "plain connect",
        Connection::connect(server.local_addr(), "plain", Duration::from_secs(5)),
    )
    .await
    .expect_err("a plain handshake fails");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "it waited for the timeout"
    );
    assert!(
        matches!(&e, ConnectError::Protocol(m) if m.contains("answered in TLS")),
        "{e:?}"
    );

    // Frame by frame: no answer but a TLS alert, then the connection closes.
    let mut plain = RawClient::connect(server.local_addr()).await;
    let local = plain.stream_mut().local_addr().expect("local address");
    plain
        .send(Frame::request(
            1,
            Request::ApiVersions(ApiVersionsRequest {
                client_software: "plain".into(),
                versions: Vec::new(),
            }),
        ))
        .await;
    assert!(
        !matches!(plain.next_frame().await, Some(Ok(_))),
        "a TLS listener answered a plain frame"
    );
    assert!(plain.closed_within(STEP).await, "the connection stays open");

    let peer = format!("peer={local}");
    eventually("the failed handshake is logged", || {
        !logged(&["TLS handshake failed", &peer]).is_empty()
    })
    .await;
    let after = protocol_errors(&server, "tls_handshake_failed").await;
    assert!(after >= before + 2.0, "{before} -> {after}");
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trusting_another_ca_is_refused() {
    let ca = Ca::new("rollcall test CA");
    let other = Ca::new("another CA");
    let files = Files::new("tls-other-ca");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let server = start_tls(tls_settings(&cert, &key)).await;

    let message =
        tls_failure(connect_raw(server.local_addr(), TlsConfig::from_pem(other.pem())).await);
    assert!(message.contains("unknown issuer"), "{message}");
    let client = bounded(
        "client connect",
        Client::connect(
            server.local_addr(),
            client_config(TlsConfig::from_pem(other.pem())),
        ),
    )
    .await;
    let message = tls_failure(client);
    assert!(message.contains("unknown issuer"), "{message}");

    // The same server, trusted: fine. A name the certificate does not carry: refused.
    connect_raw(server.local_addr(), TlsConfig::from_pem(ca.pem()))
        .await
        .expect("trusted");
    let message = tls_failure(
        connect_raw(
            server.local_addr(),
            TlsConfig::from_pem(ca.pem()).with_server_name("elsewhere.example"),
        )
        .await,
    );
    assert!(
        message.contains("not valid for the server name"),
        "{message}"
    );
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_server_certificate_is_refused() {
    let ca = Ca::new("rollcall test CA");
    let files = Files::new("tls-expired");
    let (cert, key) = files.pair("server", &ca.server(Validity::Expired));
    let server = start_tls(tls_settings(&cert, &key)).await;
    let message =
        tls_failure(connect_raw(server.local_addr(), TlsConfig::from_pem(ca.pem())).await);
    assert!(message.contains("certificate expired"), "{message}");
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_checked_and_name_the_connection() {
    let ca = Ca::new("rollcall test CA");
    let clients = Ca::new("rollcall clients CA");
    let stranger = Ca::new("a stranger's CA");
    let files = Files::new("tls-client-auth");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let client_ca = files.write("client-ca.pem", &clients.pem());
    let server = start_tls(TlsSettings {
        client_ca: Some(client_ca),
        client_auth: Some(ClientAuth::Required),
        ..tls_settings(&cert, &key)
    })
    .await;
    let addr = server.local_addr();
    let trust = || TlsConfig::from_pem(ca.pem());
    let before = protocol_errors(&server, "tls_handshake_failed").await;

    let message = tls_failure(connect_raw(addr, trust()).await);
    assert!(
        message.contains("requires a client certificate"),
        "{message}"
    );

    let expired_cn = unique("expired");
    let expired = clients.client(&expired_cn, Validity::Expired);
    let message = tls_failure(
        connect_raw(
            addr,
            trust().with_client_cert_pem(expired.cert, expired.key),
        )
        .await,
    );
    assert!(message.contains("certificate expired"), "{message}");

    let untrusted = stranger.client(&unique("untrusted"), Validity::Current);
    let message = tls_failure(
        connect_raw(
            addr,
            trust().with_client_cert_pem(untrusted.cert, untrusted.key),
        )
        .await,
    );
    assert!(message.contains("unknown issuer"), "{message}");

    // A good one, from files: it works, and its Common Name is the connection's
    // identity.
    let cn = unique("worker");
    let (client_cert, client_key) = files.pair("client", &clients.client(&cn, Validity::Current));
    let message =
        tls_failure(connect_raw(addr, TlsConfig::from_files(files.path("ca.pem"), None)).await);
    assert!(message.contains("cannot read CA file"), "{message}");
    files.write("ca.pem", &ca.pem());
    let mut conn = connect_raw(
        addr,
        TlsConfig::from_files(files.path("ca.pem"), Some((client_cert, client_key))),
    )
    .await
    .expect("a trusted client certificate is accepted");
    assert!(matches!(
        bounded(
            "list",
            conn.request(Request::ListGroups(Default::default()))
        )
        .await,
        Ok(Response::ListGroups(_))
    ));
    let identity = format!("tls_identity={cn}");
    eventually("the identity is logged", || {
        !logged(&["TLS handshake done", &identity]).is_empty()
    })
    .await;
    // The refused ones are counted, and were never given an identity.
    assert!(logged(&[&format!("tls_identity={expired_cn}")]).is_empty());
    let after = protocol_errors(&server, "tls_handshake_failed").await;
    assert!(after >= before + 3.0, "{before} -> {after}");
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_client_certificates_may_be_left_out() {
    let ca = Ca::new("rollcall test CA");
    let clients = Ca::new("rollcall clients CA");
    let files = Files::new("tls-optional");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let server = start_tls(TlsSettings {
        client_ca: Some(files.write("client-ca.pem", &clients.pem())),
        client_auth: Some(ClientAuth::Optional),
        ..tls_settings(&cert, &key)
    })
    .await;
    let addr = server.local_addr();
    connect_raw(addr, TlsConfig::from_pem(ca.pem()))
        .await
        .expect("no client certificate is fine");
    let cn = unique("optional");
    let pair = clients.client(&cn, Validity::Current);
    connect_raw(
        addr,
        TlsConfig::from_pem(ca.pem()).with_client_cert_pem(pair.cert, pair.key),
    )
    .await
    .expect("a trusted client certificate is fine");
    let identity = format!("tls_identity={cn}");
    eventually("the identity is logged", || {
        !logged(&["TLS handshake done", &identity]).is_empty()
    })
    .await;
    // One that is offered must still be good.
    let expired = clients.client(&unique("expired"), Validity::Expired);
    let message = tls_failure(
        connect_raw(
            addr,
            TlsConfig::from_pem(ca.pem()).with_client_cert_pem(expired.cert, expired.key),
        )
        .await,
    );
    assert!(message.contains("certificate expired"), "{message}");
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_reloaded_for_new_connections_while_members_stay() {
    let old_ca = Ca::new("old CA");
    let new_ca = Ca::new("new CA");
    let files = Files::new("tls-reload");
    let (cert, key) = files.pair("server", &old_ca.server(Validity::Current));
    let server = start_tls(TlsSettings {
        reload_interval: Duration::from_millis(100),
        ..tls_settings(&cert, &key)
    })
    .await;
    let addr = server.local_addr();

    // A member trusting the old CA alone: it could not reconnect after the reload.
    let client = bounded(
        "client connect",
        Client::connect(addr, client_config(TlsConfig::from_pem(old_ca.pem()))),
    )
    .await
    .expect("connects");
    let member = bounded("join", client.join(member_config("tls-reload")))
        .await
        .expect("joins");
    let first = bounded("assignment", member.next_event()).await;
    assert!(matches!(first, Some(Event::Assigned { .. })), "{first:?}");

    let renewed = new_ca.server(Validity::Current);
    replace(&key, &renewed.key);
    replace(&cert, &renewed.cert);
    let deadline = Instant::now() + STEP;
    loop {
        match connect_raw(addr, TlsConfig::from_pem(new_ca.pem())).await {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline,
                "the new certificate is not served: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let message = tls_failure(connect_raw(addr, TlsConfig::from_pem(old_ca.pem())).await);
    assert!(message.contains("unknown issuer"), "{message}");
    // The member's connection is the one from before: it goes on heartbeating.
    let reloaded = Instant::now();
    stays_assigned(&member, SESSION * 2).await;
    assert!(!member.is_suspended());
    let lease = member.lease_deadline().expect("a lease");
    assert!(
        lease > reloaded.into_std(),
        "no heartbeat was acknowledged since the reload"
    );

    // A bad file: logged and counted, and the certificate in force stays.
    let cert_shown = cert.display().to_string();
    replace(&cert, "-----BEGIN CERTIFICATE-----\nnot base64 at all\n");
    eventually("the failed reload is logged", || {
        !logged(&["TLS reload failed", &cert_shown]).is_empty()
    })
    .await;
    let metrics = server.metrics_addr().expect("metrics");
    let (_, body) = http_get(metrics, "/metrics").await;
    let failed = sample(&body, "rollcall_tls_reloads_total{outcome=\"failed\"}").unwrap_or(0.0);
    assert!(failed >= 1.0, "{body}");
    connect_raw(addr, TlsConfig::from_pem(new_ca.pem()))
        .await
        .expect("the previous certificate is still served");
    stays_assigned(&member, SESSION / 2).await;
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_retries_tls_failures_and_resumes_once_it_trusts_the_certificate() {
    let old_ca = Ca::new("old CA");
    let new_ca = Ca::new("new CA");
    let files = Files::new("tls-retry");
    let (cert, key) = files.pair("server", &old_ca.server(Validity::Current));
    let trusted = files.write("trusted-ca.pem", &old_ca.pem());
    let server = start_tls(TlsSettings {
        reload_interval: Duration::from_millis(100),
        ..tls_settings(&cert, &key)
    })
    .await;
    let proxy = Proxy::start(server.local_addr()).await;
    let client = bounded(
        "client connect",
        Client::connect(
            proxy.addr(),
            client_config(TlsConfig::from_files(&trusted, None)),
        ),
    )
    .await
    .expect("connects");
    let member = bounded(
        "join",
        client.join(member_config("tls-retry").with_session_timeout(Duration::from_secs(10))),
    )
    .await
    .expect("joins");
    let first = bounded("assignment", member.next_event()).await;
    assert!(matches!(first, Some(Event::Assigned { .. })), "{first:?}");

    // The coordinator's certificate is renewed by a CA the client does not trust yet,
    // and the member's connection is lost.
    let renewed = new_ca.server(Validity::Current);
    replace(&key, &renewed.key);
    replace(&cert, &renewed.cert);
    let deadline = Instant::now() + STEP;
    while connect_raw(server.local_addr(), TlsConfig::from_pem(new_ca.pem()))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the new certificate is not served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.cut();
    let suspended = bounded("suspension", member.next_event()).await;
    assert!(
        matches!(suspended, Some(Event::Suspended { .. })),
        "{suspended:?}"
    );
    // Its reconnections fail on the certificate: retried, and logged as such.
    let addr = format!("addr={}", proxy.addr());
    eventually("the TLS failure is logged", || {
        logged(&["cannot connect over TLS", &addr, "unknown issuer"]).len() >= 2
    })
    .await;
    assert!(member.is_suspended());
    // Trusting the new CA (the file is read on each attempt), it gets through.
    replace(&trusted, &new_ca.pem());
    let resumed = bounded("resumption", member.next_event()).await;
    assert!(
        matches!(resumed, Some(Event::Resumed { .. })),
        "{resumed:?}"
    );
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_limit_a_tls_connection_is_answered_too_many_connections() {
    let ca = Ca::new("rollcall test CA");
    let files = Files::new("tls-limit");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let server = start(ServerConfig {
        max_connections: 1,
        tls: tls_settings(&cert, &key),
        ..test_config()
    })
    .await;
    let _first = connect_raw(server.local_addr(), TlsConfig::from_pem(ca.pem()))
        .await
        .expect("the first connection is served");
    match connect_raw(server.local_addr(), TlsConfig::from_pem(ca.pem())).await {
        Err(ConnectError::Refused { code, .. }) => assert_eq!(code, ErrorCode::TooManyConnections),
        other => panic!("expected too_many_connections, got {other:?}"),
    }
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_push_arrives_and_the_session_ends_with_close_notify() {
    let ca = Ca::new("rollcall test CA");
    let files = Files::new("tls-shutdown");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let server = start_tls(tls_settings(&cert, &key)).await;
    let conn = connect_raw(server.local_addr(), TlsConfig::from_pem(ca.pem()))
        .await
        .expect("connects");
    let mut transport = conn.into_transport();
    let stopping = tokio::spawn(server.shutdown());
    let mut pushed = false;
    loop {
        match bounded("next frame", transport.next()).await {
            Some(Ok(Frame {
                body: Body::Push(Push::Shutdown(_)),
                ..
            })) => pushed = true,
            Some(Ok(other)) => panic!("unexpected frame {other:?}"),
            // Without a close_notify, rustls reports the end as an error.
            Some(Err(e)) => panic!("the session did not end cleanly: {e}"),
            None => break,
        }
    }
    assert!(pushed, "no shutdown push");
    bounded("shutdown", stopping)
        .await
        .expect("joined")
        .expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_at_the_handshake_deadline() {
    let ca = Ca::new("rollcall test CA");
    let files = Files::new("tls-silent");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    log();
    let server = start(ServerConfig {
        handshake_timeout: Duration::from_millis(300),
        tls: tls_settings(&cert, &key),
        ..test_config()
    })
    .await;
    let mut silent = RawClient::connect(server.local_addr()).await;
    let started = Instant::now();
    assert!(silent.closed_within(STEP).await, "still open");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "closed early"
    );
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_still_in_their_tls_handshake_do_not_hold_up_shutdown() {
    let ca = Ca::new("rollcall test CA");
    let files = Files::new("tls-mid-handshake");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let server = start_tls(tls_settings(&cert, &key)).await;
    // One says nothing, one sends half a ClientHello.
    let mut silent = RawClient::connect(server.local_addr()).await;
    let mut halfway = RawClient::connect(server.local_addr()).await;
    halfway
        .send_raw(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    bounded("shutdown", server.shutdown())
        .await
        .expect("clean shutdown");
    // Well within the handshake deadline (5 s): they were closed, not waited for.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(silent.closed_within(STEP).await);
    assert!(halfway.closed_within(STEP).await);
}

// ---------------------------------------------------------------------------------------------
// The command line
// ---------------------------------------------------------------------------------------------

async fn rollcall(args: &[&str]) -> CliOutput {
    run_cli(BIN, args, None).await
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_unusable_tls_files_at_start() {
    let ca = Ca::new("rollcall test CA");
    let files = Files::new("tls-serve-bad");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let (other_cert, _) = files.pair("other", &ca.server(Validity::Current));
    let missing = files.path("missing.pem");
    let data = files.path("data");
    let serve = |cert: &Path, key: &Path| {
        vec![
            "serve".to_owned(),
            "--listen=127.0.0.1:0".to_owned(),
            "--metrics-addr=off".to_owned(),
            format!("--data-dir={}", text(&data)),
            format!("--tls-cert={}", text(cert)),
            format!("--tls-key={}", text(key)),
        ]
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rollcall(&args).await
    };

    let out = run(serve(&missing, &key)).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("tls-cert {}: cannot read", text(&missing))),
        "{}",
        out.stderr
    );
    let out = run(serve(&cert, &other_cert)).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("tls-key"), "{}", out.stderr);
    assert!(
        out.stderr.contains("holds no private key"),
        "{}",
        out.stderr
    );
    let mut only_cert = serve(&cert, &key);
    only_cert.pop();
    let out = run(only_cert).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("tls-key must be given with tls-cert"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_commands_connect_over_tls_and_sighup_reloads_the_certificate() {
    let old_ca = Ca::new("old CA");
    let new_ca = Ca::new("new CA");
    let clients = Ca::new("rollcall clients CA");
    let files = Files::new("tls-cli");
    let (cert, key) = files.pair("server", &old_ca.server(Validity::Current));
    let client_ca = files.write("client-ca.pem", &clients.pem());
    let old_ca_file = files.write("old-ca.pem", &old_ca.pem());
    let new_ca_file = files.write("new-ca.pem", &new_ca.pem());
    let (client_cert, client_key) = files.pair(
        "admin",
        &clients.client("rollcall-admin", Validity::Current),
    );
    let data = TempDir::new("tls-cli-data");
    let server = ServeProcess::start(
        BIN,
        data.path(),
        &[
            "--tls-cert",
            text(&cert),
            "--tls-key",
            text(&key),
            "--tls-client-ca",
            text(&client_ca),
            // Only a SIGHUP reloads within this test.
            "--tls-reload-interval",
            "1h",
        ],
    )
    .await;
    let addr = server.addr().to_string();
    let groups = |ca: &Path, client: bool| {
        let mut args = vec![
            "groups".to_owned(),
            "--addr".to_owned(),
            addr.clone(),
            "--timeout=3s".to_owned(),
            format!("--tls-ca={}", text(ca)),
        ];
        if client {
            args.push(format!("--tls-cert={}", text(&client_cert)));
            args.push(format!("--tls-key={}", text(&client_key)));
        }
        args
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        rollcall(&args).await
    };

    let out = run(groups(&old_ca_file, true)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("GROUP") || out.stdout.contains("no groups"),
        "{}",
        out.stdout
    );
    let out = run(groups(&old_ca_file, false)).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("requires a client certificate"),
        "{}",
        out.stderr
    );
    let out = rollcall(&["groups", "--addr", &addr, "--timeout=3s"]).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("connect with TLS"), "{}", out.stderr);
    let out = rollcall(&["groups", "--addr", &addr, "--tls-cert", text(&client_cert)]).await;
    assert_eq!(
        out.code,
        Some(2),
        "a client certificate without a CA or key: {}",
        out.stderr
    );

    // A renewed certificate from another CA, read on SIGHUP.
    let renewed = new_ca.server(Validity::Current);
    replace(&key, &renewed.key);
    replace(&cert, &renewed.cert);
    server.signal("HUP");
    let deadline = Instant::now() + STEP;
    loop {
        let out = run(groups(&new_ca_file, true)).await;
        if out.code == Some(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate is not served: {}",
            out.stderr
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!server
        .log_lines(&["SIGHUP: serving TLS certificate"])
        .is_empty());
    let out = run(groups(&old_ca_file, true)).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("unknown issuer"), "{}", out.stderr);
}

/// With an auth file, a verified client certificate's common name is the connection's
/// principal: it needs no password, and the access rules apply to it by that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificates_name_is_its_principal_under_the_access_rules() {
    let ca = Ca::new("rollcall test CA");
    let clients = Ca::new("rollcall clients CA");
    let files = Files::new("tls-principal");
    let (cert, key) = files.pair("server", &ca.server(Validity::Current));
    let client_ca = files.write("client-ca.pem", &clients.pem());
    let auth = files.write(
        "auth.toml",
        "[[acl]]\nprincipals = [\"worker-7\"]\ngroups = [\"orders\"]\noperations = [\"join\", \"describe\"]\n",
    );
    log();
    let server = start(ServerConfig {
        tls: TlsSettings {
            client_ca: Some(client_ca),
            client_auth: Some(ClientAuth::Optional),
            ..tls_settings(&cert, &key)
        },
        auth_file: Some(auth),
        ..test_config()
    })
    .await;
    let addr = server.local_addr();
    let worker = clients.client("worker-7", Validity::Current);
    let stranger = clients.client("worker-8", Validity::Current);
    let as_cert =
        |pair: Pair| TlsConfig::from_pem(ca.pem()).with_client_cert_pem(pair.cert, pair.key);

    let client = bounded(
        "connect",
        Client::connect(addr, client_config(as_cert(worker))),
    )
    .await
    .expect("the certificate admits the client");
    let member = bounded("join", client.join(member_config("orders")))
        .await
        .expect("worker-7 may join orders");
    stays_assigned(&member, Duration::from_millis(300)).await;
    let refused = bounded("join", client.join(member_config("billing"))).await;
    assert!(
        format!("{:?}", refused.err()).contains("NotAuthorized"),
        "worker-7 may not join billing"
    );

    // Another certificate from the same CA names another principal, with no rule.
    let mut other = connect_raw(addr, as_cert(stranger)).await.unwrap();
    let answer = bounded(
        "describe",
        other.request(Request::DescribeGroup(DescribeGroupRequest {
            operator: false,
            group: "orders".into(),
            detection: false,
            page: None,
            summary: false,
        })),
    )
    .await
    .unwrap();
    assert!(
        matches!(&answer, Response::Error(e) if e.code == ErrorCode::NotAuthorized),
        "{answer:?}"
    );
    // Without a certificate, the connection must authenticate first.
    let mut anonymous = connect_raw(addr, TlsConfig::from_pem(ca.pem()))
        .await
        .unwrap();
    let answer = bounded(
        "list",
        anonymous.request(Request::ListGroups(Default::default())),
    )
    .await
    .unwrap();
    assert!(
        matches!(&answer, Response::Error(e) if e.code == ErrorCode::AuthenticationRequired),
        "{answer:?}"
    );
    server.shutdown().await.expect("clean shutdown");
}
