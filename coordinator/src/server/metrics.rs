//! Prometheus metrics: cached handles for the hot path, and a small HTTP endpoint that
//! renders them.
//!
//! Every metric handle is looked up once, when the server starts, so that recording on
//! the request path is an atomic add (no label strings built, no registry lookup).

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use rollcall_protocol::{ApiKey, ErrorCode, ExpelReason, Liveness};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::core::{DetectorKind, Guard, Quota, RebalanceCause, ReservationEnd, ShadowVerdict};

/// Buckets of `rollcall_request_duration_seconds`.
const REQUEST_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];

/// Buckets of `rollcall_rebalance_duration_seconds`.
const REBALANCE_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The exporter's configuration: which histograms are rendered with buckets.
fn builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("rollcall_request_duration_seconds".into()),
            REQUEST_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full("rollcall_rebalance_duration_seconds".into()),
            REBALANCE_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full("rollcall_cluster_slot_load_seconds".into()),
            REBALANCE_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full("rollcall_etcd_request_duration_seconds".into()),
            REQUEST_BUCKETS,
        )
}

/// What the endpoint serves before anything is recorded: every metric [`Metrics::new`]
/// registers, with its help text, type and every label value, rendered by a private
/// recorder configured as the installed one. Whatever reads the exported names (the
/// dashboard's test) reads them from here, so it cannot drift from the registration.
#[cfg(test)]
pub(crate) fn render_registered() -> String {
    let recorder = builder()
        .expect("the bucket lists are valid")
        .build_recorder();
    let handle = recorder.handle();
    let registered = metrics::with_local_recorder(&recorder, || {
        describe();
        Metrics::new()
    });
    let rendered = handle.render();
    drop(registered);
    rendered
}

/// Installs the process-wide Prometheus recorder, once. Returns its handle, or `None`
/// if another recorder was installed first (then the endpoint renders nothing).
pub(crate) fn install_recorder() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let handle = builder().ok()?.install_recorder().ok()?;
            // Histograms buffer their samples until upkeep folds them into buckets; run
            // it for the life of the process, whatever server instances come and go.
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new()
                .name("rollcall-metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(Duration::from_secs(5));
                    upkeep.run_upkeep();
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the metrics upkeep thread");
            }
            describe();
            Some(handle)
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    cluster::describe();
    describe_gauge!("rollcall_connections", "Open client connections.");
    describe_gauge!("rollcall_groups", "Groups known to the coordinator.");
    describe_gauge!("rollcall_members", "Members, by liveness.");
    describe_gauge!(
        "rollcall_groups_with_suspects",
        "Groups with at least one suspect member."
    );
    describe_gauge!(
        "rollcall_drained_members",
        "Members drained by an operator or by themselves: in their groups, given nothing."
    );
    describe_gauge!(
        "rollcall_groups_below_advised_timeout",
        "Groups whose shortest session timeout is below the one the timeout advisor gives for one false expulsion a year across the group (from the members' observed heartbeat gaps; refreshed every 10 s)."
    );
    describe_gauge!(
        "rollcall_reserved_partitions",
        "Partitions reserved for departed static members' instances (departure delays): owned by nobody until the instance returns or the delay ends."
    );
    describe_gauge!(
        "rollcall_revocations_waiting",
        "Revocations waiting for room under their group's caps on partitions in revocation."
    );
    describe_counter!(
        "rollcall_reservations_total",
        "Reservations of a departed static member's partitions (departure delays), by outcome."
    );
    describe_counter!("rollcall_heartbeats_total", "Heartbeats received.");
    describe_counter!("rollcall_requests_total", "Requests received, by API.");
    describe_histogram!(
        "rollcall_request_duration_seconds",
        Unit::Seconds,
        "Time from decoding a request to queueing its response, by API."
    );
    describe_counter!(
        "rollcall_rebalances_started_total",
        "Rebalances started, by first cause."
    );
    describe_counter!(
        "rollcall_rebalances_completed_total",
        "Rebalances completed."
    );
    describe_histogram!(
        "rollcall_rebalance_duration_seconds",
        Unit::Seconds,
        "Time from a rebalance's first trigger until every member holds its target."
    );
    describe_counter!(
        "rollcall_expulsions_total",
        "Members removed from their group, by reason."
    );
    describe_counter!("rollcall_commits_accepted_total", "Offsets committed.");
    describe_counter!(
        "rollcall_commits_rejected_total",
        "Offset commits refused, by reason."
    );
    describe_counter!(
        "rollcall_quota_refusals_total",
        "Requests (or offsets of a commit) refused because they would take a quota past its limit, by quota."
    );
    describe_counter!(
        "rollcall_protocol_errors_total",
        "Protocol errors and misbehaving connections, by kind."
    );
    describe_counter!(
        "rollcall_authentications_total",
        "Authentication exchanges that ended, by result (ok, failed)."
    );
    describe_counter!(
        "rollcall_requests_denied_total",
        "Requests refused before reaching a group, by API and reason: the access checks (authentication_required, not_authorized) and, where coordinators share their groups, the directory (not_coordinator, coordinator_loading); a Heartbeats request counts each refused beat."
    );
    describe_counter!(
        "rollcall_store_batches_total",
        "Batches of records made durable."
    );
    describe_counter!(
        "rollcall_store_failures_total",
        "Batches of records the store failed to make durable."
    );
    describe_counter!(
        "rollcall_tls_reloads_total",
        "Reloads of the TLS certificate, key and client CA files, by outcome: applied (new connections use them) or failed (the previous ones stay in force)."
    );
    describe_counter!(
        "rollcall_pauses_detected_total",
        "Times the coordinator found itself woken much later than it asked."
    );
    describe_counter!(
        "rollcall_isolations_suspected_total",
        "Times most members of a shard fell silent while the whole server heard nothing, and expulsions were held."
    );
    describe_counter!(
        "rollcall_liveness_transitions_total",
        "Members becoming suspect (silent past their detector's suspicion threshold) and recovering (several on-time heartbeats later)."
    );
    describe_counter!(
        "rollcall_shadow_verdicts_total",
        "What a group's shadow detector would have done, by detector and verdict: suspect or expel a member that then spoke again, or spare one the acting detector expelled."
    );
    describe_counter!(
        "rollcall_false_expulsions_total",
        "Members expelled for silence that beat again (proven false expulsions), by the detector that expelled them."
    );
    describe_counter!(
        "rollcall_guard_transitions_total",
        "Guards that hold expulsions (pause, isolation, backlog, rate_limit): when one starts holding, lets go, or expels a member it held as long as it may."
    );
}

/// What a guard did, the `transition` label of `rollcall_guard_transitions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GuardTransition {
    /// Started holding.
    Held,
    /// Let go: members are heard again, or the grace is over.
    Released,
    /// Held one member as long as it may, and let it be expelled.
    BoundReached,
}

impl GuardTransition {
    const ALL: [Self; 3] = [Self::Held, Self::Released, Self::BoundReached];

    fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Released => "released",
            Self::BoundReached => "bound_reached",
        }
    }
}

/// Kinds of protocol error, the label of `rollcall_protocol_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProtocolError {
    /// A frame that did not decode.
    MalformedFrame,
    /// A length prefix above the maximum.
    FrameTooLarge,
    /// A request with an unknown API key.
    UnknownApi,
    /// A request with an unsupported version.
    UnsupportedVersion,
    /// A request before the handshake.
    HandshakeRequired,
    /// No handshake within the deadline.
    HandshakeTimeout,
    /// A client that does not read its frames fast enough.
    SlowReader,
    /// A connection over the maximum.
    TooManyConnections,
    /// A connection over the maximum from one address.
    TooManyConnectionsPerAddress,
    /// A connection over the maximum of one principal, refused when it authenticated.
    TooManyConnectionsPerPrincipal,
    /// A connection closed because every connection's buffers together were at
    /// `max_buffered_bytes`: its large frame had no room, or its backlog grew.
    BufferBudget,
    /// A frame begun but not finished within the frame deadline.
    FrameTimeout,
    /// A handshaken connection silent for the idle deadline.
    IdleTimeout,
    /// A response or push that does not fit the maximum frame size: a response is
    /// answered `frame_too_large` in its place, a push is dropped.
    OutgoingTooLarge,
    /// A TLS handshake that failed: a client that does not speak TLS, or that refused
    /// the server's certificate, or whose certificate was refused.
    TlsHandshakeFailed,
    /// A TLS error after the handshake (a record that does not decrypt, an alert).
    Tls,
}

impl ProtocolError {
    const ALL: [Self; 16] = [
        Self::MalformedFrame,
        Self::FrameTooLarge,
        Self::UnknownApi,
        Self::UnsupportedVersion,
        Self::HandshakeRequired,
        Self::HandshakeTimeout,
        Self::SlowReader,
        Self::TooManyConnections,
        Self::TooManyConnectionsPerAddress,
        Self::TooManyConnectionsPerPrincipal,
        Self::BufferBudget,
        Self::FrameTimeout,
        Self::IdleTimeout,
        Self::OutgoingTooLarge,
        Self::TlsHandshakeFailed,
        Self::Tls,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::MalformedFrame => "malformed_frame",
            Self::FrameTooLarge => "frame_too_large",
            Self::UnknownApi => "unknown_api",
            Self::UnsupportedVersion => "unsupported_version",
            Self::HandshakeRequired => "handshake_required",
            Self::HandshakeTimeout => "handshake_timeout",
            Self::SlowReader => "slow_reader",
            Self::TooManyConnections => "too_many_connections",
            Self::TooManyConnectionsPerAddress => "too_many_connections_per_address",
            Self::TooManyConnectionsPerPrincipal => "too_many_connections_per_principal",
            Self::BufferBudget => "buffer_budget",
            Self::FrameTimeout => "frame_timeout",
            Self::IdleTimeout => "idle_timeout",
            Self::OutgoingTooLarge => "outgoing_too_large",
            Self::TlsHandshakeFailed => "tls_handshake_failed",
            Self::Tls => "tls_error",
        }
    }
}

/// The reasons a request is refused before it reaches a group, as
/// `rollcall_requests_denied_total` labels them.
const DENIED: [ErrorCode; 4] = [
    ErrorCode::AuthenticationRequired,
    ErrorCode::NotAuthorized,
    ErrorCode::NotCoordinator,
    ErrorCode::CoordinatorLoading,
];

/// What became of a reservation, as `rollcall_reservations_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reservation {
    Started,
    Returned,
    Ended(ReservationEnd),
}

/// Every metric handle the server records into.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub(crate) connections: Gauge,
    pub(crate) groups: Gauge,
    pub(crate) members_alive: Gauge,
    pub(crate) members_suspect: Gauge,
    pub(crate) groups_with_suspects: Gauge,
    pub(crate) drained_members: Gauge,
    pub(crate) groups_below_advice: Gauge,
    pub(crate) partitions_reserved: Gauge,
    pub(crate) revocations_waiting: Gauge,
    /// Reservations started and returned, then ended by `ReservationEnd::ALL`.
    reservations: Vec<Counter>,
    pub(crate) heartbeats: Counter,
    requests: Vec<Counter>,
    durations: Vec<Histogram>,
    rebalances_started: Vec<Counter>,
    pub(crate) rebalances_completed: Counter,
    pub(crate) rebalance_duration: Histogram,
    expulsions: Vec<Counter>,
    pub(crate) commits_accepted: Counter,
    commits_rejected: Vec<Counter>,
    quota_refusals: Vec<Counter>,
    protocol_errors: Vec<Counter>,
    pub(crate) store_batches: Counter,
    pub(crate) store_failures: Counter,
    pub(crate) tls_reloads_applied: Counter,
    pub(crate) tls_reloads_failed: Counter,
    pub(crate) pauses: Counter,
    pub(crate) isolations: Counter,
    guards: Vec<Counter>,
    pub(crate) suspected: Counter,
    pub(crate) recovered: Counter,
    shadow_verdicts: Vec<Counter>,
    /// Per detector, in the order of `DetectorKind::ALL`.
    false_expulsions: Vec<Counter>,
    pub(crate) authentications_ok: Counter,
    pub(crate) authentications_failed: Counter,
    /// Per API: authentication_required, then not_authorized.
    denied: Vec<[Counter; DENIED.len()]>,
    /// Cluster mode's.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) cluster: cluster::ClusterMetrics,
}

impl Metrics {
    /// Looks every handle up in the installed recorder (no-op handles if none is).
    pub(crate) fn new() -> Self {
        Self {
            connections: metrics::gauge!("rollcall_connections"),
            groups: metrics::gauge!("rollcall_groups"),
            members_alive: metrics::gauge!("rollcall_members", "liveness" => Liveness::Alive.as_str()),
            members_suspect: metrics::gauge!("rollcall_members", "liveness" => Liveness::Suspect.as_str()),
            groups_with_suspects: metrics::gauge!("rollcall_groups_with_suspects"),
            drained_members: metrics::gauge!("rollcall_drained_members"),
            groups_below_advice: metrics::gauge!("rollcall_groups_below_advised_timeout"),
            partitions_reserved: metrics::gauge!("rollcall_reserved_partitions"),
            revocations_waiting: metrics::gauge!("rollcall_revocations_waiting"),
            reservations: ["started", "returned"]
                .into_iter()
                .chain(ReservationEnd::ALL.iter().map(|e| e.as_str()))
                .map(|o| metrics::counter!("rollcall_reservations_total", "outcome" => o))
                .collect(),
            heartbeats: metrics::counter!("rollcall_heartbeats_total"),
            requests: ApiKey::ALL
                .iter()
                .map(|k| metrics::counter!("rollcall_requests_total", "api" => k.as_str()))
                .collect(),
            durations: ApiKey::ALL
                .iter()
                .map(|k| {
                    metrics::histogram!("rollcall_request_duration_seconds", "api" => k.as_str())
                })
                .collect(),
            rebalances_started: RebalanceCause::ALL
                .iter()
                .map(|c| metrics::counter!("rollcall_rebalances_started_total", "cause" => c.as_str()))
                .collect(),
            rebalances_completed: metrics::counter!("rollcall_rebalances_completed_total"),
            rebalance_duration: metrics::histogram!("rollcall_rebalance_duration_seconds"),
            expulsions: ExpelReason::ALL
                .iter()
                .map(|r| metrics::counter!("rollcall_expulsions_total", "reason" => r.as_str()))
                .collect(),
            commits_accepted: metrics::counter!("rollcall_commits_accepted_total"),
            commits_rejected: ErrorCode::ALL
                .iter()
                .map(|c| metrics::counter!("rollcall_commits_rejected_total", "reason" => c.as_str()))
                .collect(),
            quota_refusals: Quota::ALL
                .iter()
                .map(|q| metrics::counter!("rollcall_quota_refusals_total", "quota" => q.as_str()))
                .collect(),
            protocol_errors: ProtocolError::ALL
                .iter()
                .map(|k| metrics::counter!("rollcall_protocol_errors_total", "kind" => k.as_str()))
                .collect(),
            authentications_ok: metrics::counter!("rollcall_authentications_total", "result" => "ok"),
            authentications_failed: metrics::counter!("rollcall_authentications_total", "result" => "failed"),
            denied: ApiKey::ALL
                .iter()
                .map(|k| {
                    DENIED.map(|c| {
                        metrics::counter!(
                            "rollcall_requests_denied_total",
                            "api" => k.as_str(),
                            "reason" => c.as_str()
                        )
                    })
                })
                .collect(),
            store_batches: metrics::counter!("rollcall_store_batches_total"),
            store_failures: metrics::counter!("rollcall_store_failures_total"),
            tls_reloads_applied: metrics::counter!("rollcall_tls_reloads_total", "outcome" => "applied"),
            tls_reloads_failed: metrics::counter!("rollcall_tls_reloads_total", "outcome" => "failed"),
            pauses: metrics::counter!("rollcall_pauses_detected_total"),
            isolations: metrics::counter!("rollcall_isolations_suspected_total"),
            guards: Guard::ALL
                .iter()
                .flat_map(|g| {
                    GuardTransition::ALL.iter().map(|t| {
                        metrics::counter!(
                            "rollcall_guard_transitions_total",
                            "guard" => g.as_str(),
                            "transition" => t.as_str()
                        )
                    })
                })
                .collect(),
            suspected: metrics::counter!("rollcall_liveness_transitions_total", "transition" => "suspected"),
            recovered: metrics::counter!("rollcall_liveness_transitions_total", "transition" => "recovered"),
            shadow_verdicts: DetectorKind::ALL
                .iter()
                .flat_map(|d| {
                    ShadowVerdict::ALL.iter().map(|v| {
                        metrics::counter!(
                            "rollcall_shadow_verdicts_total",
                            "detector" => d.as_str(),
                            "verdict" => v.as_str()
                        )
                    })
                })
                .collect(),
            false_expulsions: DetectorKind::ALL
                .iter()
                .map(|d| metrics::counter!("rollcall_false_expulsions_total", "detector" => d.as_str()))
                .collect(),
            cluster: cluster::ClusterMetrics::new(),
        }
    }

    pub(crate) fn false_expulsion(&self, detector: DetectorKind) -> &Counter {
        let d = DetectorKind::ALL
            .iter()
            .position(|k| *k == detector)
            .unwrap_or(0);
        &self.false_expulsions[d]
    }

    pub(crate) fn shadow_verdict(
        &self,
        detector: DetectorKind,
        verdict: ShadowVerdict,
    ) -> &Counter {
        let d = DetectorKind::ALL
            .iter()
            .position(|k| *k == detector)
            .unwrap_or(0);
        let v = ShadowVerdict::ALL
            .iter()
            .position(|k| *k == verdict)
            .unwrap_or(0);
        &self.shadow_verdicts[d * ShadowVerdict::ALL.len() + v]
    }

    pub(crate) fn request(&self, api: ApiKey) -> &Counter {
        &self.requests[api as usize]
    }

    /// Requests refused by the access checks: `reason` is `AuthenticationRequired` or
    /// (anything else) `NotAuthorized`.
    pub(crate) fn denied(&self, api: ApiKey, reason: ErrorCode) -> &Counter {
        // Anything else is an access refusal.
        let i = DENIED.iter().position(|c| *c == reason).unwrap_or(1);
        &self.denied[api as usize][i]
    }

    pub(crate) fn guard(&self, guard: Guard, transition: GuardTransition) -> &Counter {
        &self.guards[guard as usize * GuardTransition::ALL.len() + transition as usize]
    }

    pub(crate) fn duration(&self, api: ApiKey) -> &Histogram {
        &self.durations[api as usize]
    }

    pub(crate) fn rebalance_started(&self, cause: RebalanceCause) -> &Counter {
        let i = RebalanceCause::ALL
            .iter()
            .position(|c| *c == cause)
            .unwrap_or(0);
        &self.rebalances_started[i]
    }

    pub(crate) fn expulsion(&self, reason: ExpelReason) -> &Counter {
        let i = ExpelReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        &self.expulsions[i]
    }

    pub(crate) fn commit_rejected(&self, reason: ErrorCode) -> &Counter {
        let i = ErrorCode::ALL
            .iter()
            .position(|c| *c == reason)
            .unwrap_or(0);
        &self.commits_rejected[i]
    }

    /// What became of reservations (departure delays).
    pub(crate) fn reservation(&self, outcome: Reservation) -> &Counter {
        let i = match outcome {
            Reservation::Started => 0,
            Reservation::Returned => 1,
            Reservation::Ended(end) => {
                2 + ReservationEnd::ALL
                    .iter()
                    .position(|e| *e == end)
                    .unwrap_or(0)
            }
        };
        &self.reservations[i]
    }

    pub(crate) fn quota_refused(&self, quota: Quota) -> &Counter {
        let i = Quota::ALL.iter().position(|q| *q == quota).unwrap_or(0);
        &self.quota_refusals[i]
    }

    pub(crate) fn protocol_error(&self, kind: ProtocolError) -> &Counter {
        let i = ProtocolError::ALL
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(0);
        &self.protocol_errors[i]
    }
}

/// Serves `GET /metrics` (and `GET /`) with the rendered metrics until `stop`.
pub(crate) async fn serve_http(
    listener: TcpListener,
    handle: Option<PrometheusHandle>,
    stop: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "metrics endpoint accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let served =
                tokio::time::timeout(Duration::from_secs(10), answer(stream, handle.as_ref()))
                    .await;
            if let Ok(Err(e)) = served {
                tracing::debug!(error = %e, "metrics request failed");
            }
        });
    }
}

async fn answer(mut stream: TcpStream, handle: Option<&PrometheusHandle>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 16 * 1024 {
            break;
        }
    }
    let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next(), parts.next());
    let (status, body) = match (method, path) {
        (Some("GET"), Some("/metrics" | "/")) => (
            "200 OK",
            handle.map(PrometheusHandle::render).unwrap_or_default(),
        ),
        (Some("GET"), _) => ("404 Not Found", "not found\n".to_owned()),
        _ => ("405 Method Not Allowed", "method not allowed\n".to_owned()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

pub(crate) mod cluster;
#[cfg(test)]
mod dashboard;
