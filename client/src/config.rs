//! Client and member configuration, and its validation.

use std::collections::BTreeSet;
use std::time::Duration;

use rollcall_protocol::{JoinPlacement, TopicRacks, DEFAULT_MAX_FRAME_SIZE};

use crate::error::ConfigError;
use crate::tls::TlsConfig;
use crate::types::TopicSubscription;

/// How a [`Client`](crate::Client) connects, and reconnects after losing its connection.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Sent in the version handshake, for the coordinator's logs.
    pub client_software: String,
    /// Bounds a connection attempt: TCP connect plus the version handshake. Default 5 s.
    pub connect_timeout: Duration,
    /// The first reconnection delay bound. Default 50 ms.
    ///
    /// Reconnection uses exponential backoff with full jitter: attempt `n` (from 0) waits
    /// a uniformly random time in `[0, min(reconnect_max, reconnect_base * 2^n)]`, so a
    /// fleet that lost its coordinator at once does not come back in lockstep.
    pub reconnect_base: Duration,
    /// The largest reconnection delay bound. Default 5 s.
    pub reconnect_max: Duration,
    /// The largest frame accepted from the coordinator, bytes. Default 1 MiB.
    pub max_frame_size: usize,
    /// TLS, for a coordinator whose listener speaks it; `None` (the default): plain TCP.
    /// A TLS failure while reconnecting (a certificate that expired, say) is retried
    /// with backoff like any other failed attempt, and logged.
    pub tls: Option<TlsConfig>,
    /// The user and password every connection authenticates with (SCRAM-SHA-256),
    /// after the version handshake. `None` (the default): no authentication, for a
    /// coordinator without an auth file, or one that takes the client certificate's
    /// name as the principal.
    pub credentials: Option<Credentials>,
    /// More coordinator addresses (`host:port`) to start from, after the one given to
    /// [`Client::connect`](crate::Client::connect): tried in turn when the first
    /// connection cannot be made or is lost. Empty by default.
    ///
    /// Coordinators may share their groups (a cluster): a member starts on the
    /// connection to one of these; if that coordinator does not serve the group
    /// (`not_coordinator`), the client asks where the group is served
    /// (FindCoordinator) and moves the member there, keeping its member id,
    /// generation and partitions, and does so again whenever the group moves or its
    /// coordinator fails. Members of one client may so live on different coordinators,
    /// one connection each. A coordinator that knows no coordinator for the group (its
    /// view is stale, or the group is between coordinators) makes the client ask the
    /// next of these addresses, in turn, with backoff.
    pub bootstrap: Vec<String>,
}

impl ClientConfig {
    /// More coordinator addresses to start from (see [`ClientConfig::bootstrap`]).
    pub fn with_bootstrap<S: Into<String>>(mut self, addrs: impl IntoIterator<Item = S>) -> Self {
        self.bootstrap = addrs.into_iter().map(Into::into).collect();
        self
    }

    /// Authenticates every connection as `username` with `password`.
    pub fn with_credentials(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.credentials = Some(Credentials::new(username, password));
        self
    }
}

/// A user and password for SCRAM-SHA-256. The password is never sent: the client
/// proves it knows it, and checks that the coordinator holds the user's credential.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user.
    pub username: String,
    password: String,
}

impl Credentials {
    /// A user and its password.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }

    pub(crate) fn password(&self) -> &str {
        &self.password
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            client_software: concat!("rollcall-client/", env!("CARGO_PKG_VERSION")).to_owned(),
            connect_timeout: Duration::from_secs(5),
            reconnect_base: Duration::from_millis(50),
            reconnect_max: Duration::from_secs(5),
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            credentials: None,
            tls: None,
            bootstrap: Vec::new(),
        }
    }
}

impl ClientConfig {
    /// Connects over TLS.
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// How each connection attempt is made.
    pub(crate) fn connect_options(&self) -> crate::raw::ConnectOptions {
        crate::raw::ConnectOptions {
            client_software: self.client_software.clone(),
            timeout: self.connect_timeout,
            tls: self.tls.clone(),
            max_frame_size: self.max_frame_size,
            credentials: self.credentials.clone(),
        }
    }
}

/// Default session timeout.
pub(crate) const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// Default heartbeat interval, as a divisor of the session timeout.
pub(crate) const DEFAULT_HEARTBEATS_PER_SESSION: u32 = 5;
/// Default progress timeout.
pub(crate) const DEFAULT_PROGRESS_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Default rebalance timeout.
pub(crate) const DEFAULT_REBALANCE_TIMEOUT: Duration = Duration::from_secs(60);
/// Smallest default lease safety margin.
pub(crate) const MIN_DEFAULT_LEASE_MARGIN: Duration = Duration::from_millis(5);
/// Heartbeat intervals in the default lease timeout.
pub(crate) const DEFAULT_LEASE_INTERVALS: u32 = 3;
/// Slack added to the default lease timeout, for a late beat.
pub(crate) const DEFAULT_LEASE_SLACK: Duration = Duration::from_millis(250);

/// How one member joins its group, and the timeouts that govern it.
///
/// # Timeouts
///
/// - **Session timeout `T`** (default 10 s): the coordinator expels a member it has heard
///   nothing from for `T`. Any frame counts; heartbeats are what keep an idle member
///   heard.
/// - **Heartbeat interval `I`** (default `T / 5`, so 2 s): heartbeats go out at uniformly
///   random intervals in `[0.8 I, I]` so that a fleet restarted together does not beat in
///   lockstep; `I` is the longest gap between two beats. A session therefore survives
///   `floor(T / I) - 1` consecutive lost beats (4 with the defaults), less whatever the
///   network delays the next one. Raising `T` or lowering `I` tolerates more loss but
///   detects a dead process later or costs more traffic; a false expulsion costs a
///   rebalance and moving the member's partitions, so keep a margin. The coordinator may
///   suggest a shorter interval at join, which is then used instead.
/// - **Progress timeout** (default 5 min): a member whose heartbeats continue but whose
///   application makes no progress for this long is expelled (reason
///   `ProgressExpired`). Progress is every call to
///   [`Member::next_event`](crate::Member::next_event) or
///   [`Member::mark_progress`](crate::Member::mark_progress), every poll of the
///   [`Member::events`](crate::Member::events) stream, and the time spent waiting
///   inside `next_event` or on the stream.
/// - **Rebalance timeout** (default 60 s): how long the application may take to
///   acknowledge a revocation before the member is expelled.
/// - **Lease timeout `L`** (default `min(T, 3 I + 250 ms)`, so 6.25 s): how long the
///   member may act on its partitions without hearing from the coordinator. The
///   coordinator extends the lease it promises a member to `received + L` on every frame
///   it receives from it, and never hands the partitions of a member it expelled (or
///   whose connection closed, as a crashed process's does) to another member before that
///   promise has run out; a member whose connection closed and that does not come back
///   on another connection within `L` is expelled then, without waiting for `T`. The
///   default lets two consecutive beats go missing (`3 I`) and the next one arrive up to
///   250 ms late before the coordinator gives up on the member, and is capped by `T`. A
///   shorter `L` moves a crashed member's partitions sooner; a longer one rides out
///   longer network blips without suspending. `L` must not exceed `T`.
/// - **Lease safety margin `M`** (default 5 % of `L`, at least 5 ms): each acknowledged
///   heartbeat extends the member's lease to `sent + L - M`, where `sent` is when that
///   heartbeat was written. The coordinator hands a silent member's partitions to
///   another member no earlier than `received + L` for the last frame it received, and
///   `received >= sent`, so while the lease runs no other member can own them; `M`
///   absorbs the two clocks running at slightly different rates. Because the lease is
///   measured from the *send* time of the last acknowledged beat, `L - M` must cover two
///   heartbeat intervals without a renewal plus a round trip, `L - M > 2 I + RTT` (RTT
///   the round trip to the coordinator), for the member not to suspend when a beat is
///   lost: the beat after the last acknowledged one (sent within `I`) may be lost, and
///   the one after that (sent within `2 I`) must then be acknowledged, one round trip
///   later, before the lease ends. With the defaults `L - M = 0.95 (3 I + 250 ms) = 2.85 I + 237.5 ms`,
///   which leaves `0.85 I + 237.5 ms` (1.94 s with `I` = 2 s) for the round trip.
///   Configuration checks only the weaker `L - M > I` (or the lease would lapse between
///   two beats).
///
/// When the lease runs out, the member *suspends*: the application is told at once
/// ([`Event::Suspended`](crate::Event::Suspended)) and must stop acting on its
/// partitions, but the member keeps them and keeps heartbeating. The next acknowledgement
/// resumes it ([`Event::Resumed`](crate::Event::Resumed)). Losing the connection suspends
/// at once, before the lease runs out. Only when no heartbeat has been acknowledged for
/// `T - M` after it was sent does the member report its partitions lost (reason
/// [`LostReason::LeaseExpired`](crate::LostReason::LeaseExpired)) and rejoin: by then the
/// coordinator may have expelled it. With `L = T` the two bounds coincide and the member
/// reports the loss without suspending first.
///
/// A coordinator too old to know lease timeouts (it does not accept version 1 of the
/// join) keeps every member's partitions for the session timeout; on a connection to
/// such a coordinator the member joins without a lease timeout and uses `L = T`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MemberConfig {
    /// The group to join.
    pub group: String,
    /// Subscribed topics with their partition counts.
    pub topics: Vec<TopicSubscription>,
    /// Static membership: a stable id for this process across restarts. A process that
    /// restarts with the same id within its session timeout takes its partitions back
    /// without a rebalance; a second live process with the same id fences the first.
    /// The takeover does not wait for the previous holder's lease, so the id must name
    /// one process at a time: a fenced process learns of it from
    /// [`Event::Fatal`](crate::Event::Fatal), and its commits are refused.
    pub instance_id: Option<String>,
    /// Free-form name shown by the coordinator's describe. Default `"rollcall-client"`.
    pub client_id: String,
    /// Session timeout `T`.
    pub session_timeout: Duration,
    /// Heartbeat interval `I`; `None` means `T / 5`.
    pub heartbeat_interval: Option<Duration>,
    /// Progress timeout.
    pub progress_timeout: Duration,
    /// Rebalance timeout.
    pub rebalance_timeout: Duration,
    /// Lease timeout `L`; `None` means `min(T, 3 I + 250 ms)`.
    pub lease_timeout: Option<Duration>,
    /// Lease safety margin `M`; `None` means 5 % of `L`, at least 5 ms.
    pub lease_margin: Option<Duration>,
    /// The failure detector the group is to judge its members' silence with (`fixed`,
    /// `adaptive`); `None` leaves it to the coordinator. The first member of a group
    /// chooses; a later join naming another detector is refused. Ignored by a
    /// coordinator without Join version 2.
    pub detector: Option<String>,
    /// An operator's name for where the member runs (a host name): `rollcall drain
    /// GROUP --label L` drains every member with label `L`. Empty (the default): none.
    pub label: String,
    /// The member's rack (zone); the assignor prefers owners in a partition's preferred
    /// rack. Empty (the default): none.
    pub rack: String,
    /// The member's weight against the others' (a machine twice as big: 2). `None`
    /// (the default): undeclared, counted as 1. Must not be 0.
    pub capacity: Option<u32>,
    /// Preferred racks of subscribed topics' partitions: `(topic, racks)` where
    /// `racks[i]` is partition `i`'s rack ("" for none), as many as the topic has
    /// partitions in [`MemberConfig::topics`].
    pub topic_racks: Vec<(String, Vec<String>)>,
}

impl MemberConfig {
    /// A member of `group` subscribing to `topics` (name, partition count), with every
    /// other setting at its default.
    pub fn new<S: Into<String>>(
        group: impl Into<String>,
        topics: impl IntoIterator<Item = (S, u32)>,
    ) -> Self {
        Self {
            group: group.into(),
            topics: topics.into_iter().map(TopicSubscription::from).collect(),
            instance_id: None,
            client_id: "rollcall-client".to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            heartbeat_interval: None,
            progress_timeout: DEFAULT_PROGRESS_TIMEOUT,
            rebalance_timeout: DEFAULT_REBALANCE_TIMEOUT,
            lease_timeout: None,
            lease_margin: None,
            detector: None,
            label: String::new(),
            rack: String::new(),
            capacity: None,
            topic_racks: Vec::new(),
        }
    }

    /// Sets the static instance id.
    pub fn with_instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Sets the client id.
    pub fn with_client_id(mut self, id: impl Into<String>) -> Self {
        self.client_id = id.into();
        self
    }

    /// Sets the session timeout (and, unless set explicitly, the derived interval, lease
    /// timeout and margin follow it).
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Sets the heartbeat interval.
    pub fn with_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = Some(interval);
        self
    }

    /// Sets the progress timeout.
    pub fn with_progress_timeout(mut self, timeout: Duration) -> Self {
        self.progress_timeout = timeout;
        self
    }

    /// Sets the rebalance timeout.
    pub fn with_rebalance_timeout(mut self, timeout: Duration) -> Self {
        self.rebalance_timeout = timeout;
        self
    }

    /// Sets the lease timeout (and, unless set explicitly, the margin follows it).
    pub fn with_lease_timeout(mut self, timeout: Duration) -> Self {
        self.lease_timeout = Some(timeout);
        self
    }

    /// Sets the lease safety margin.
    pub fn with_lease_margin(mut self, margin: Duration) -> Self {
        self.lease_margin = Some(margin);
        self
    }

    /// Asks for the group's failure detector (`fixed`, `adaptive`).
    pub fn with_detector(mut self, detector: impl Into<String>) -> Self {
        self.detector = Some(detector.into());
        self
    }

    /// Sets the label (an operator's name for where the member runs, by which it can
    /// be drained).
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Sets the member's rack (zone).
    pub fn with_rack(mut self, rack: impl Into<String>) -> Self {
        self.rack = rack.into();
        self
    }

    /// Sets the member's capacity (weight against the others'; at least 1).
    pub fn with_capacity(mut self, capacity: u32) -> Self {
        self.capacity = Some(capacity);
        self
    }

    /// Declares the preferred rack of each partition of `topic` (`racks[i]` for
    /// partition `i`, "" for none).
    pub fn with_topic_racks<S: Into<String>>(
        mut self,
        topic: impl Into<String>,
        racks: impl IntoIterator<Item = S>,
    ) -> Self {
        self.topic_racks
            .push((topic.into(), racks.into_iter().map(Into::into).collect()));
        self
    }

    /// What the member declares in a Join version 3, if anything.
    fn placement(&self) -> Result<Option<JoinPlacement>, ConfigError> {
        if self.capacity == Some(0) {
            return Err(ConfigError::ZeroCapacity);
        }
        let mut seen = BTreeSet::new();
        for (topic, racks) in &self.topic_racks {
            let Some(t) = self.topics.iter().find(|t| &t.topic == topic) else {
                return Err(ConfigError::RacksForUnsubscribedTopic {
                    topic: topic.clone(),
                });
            };
            if racks.len() != t.partitions as usize {
                return Err(ConfigError::RacksCount {
                    topic: topic.clone(),
                    racks: racks.len(),
                    partitions: t.partitions,
                });
            }
            if !seen.insert(topic.as_str()) {
                return Err(ConfigError::DuplicateTopic {
                    topic: topic.clone(),
                });
            }
        }
        if self.label.is_empty()
            && self.rack.is_empty()
            && self.capacity.is_none()
            && self.topic_racks.is_empty()
        {
            return Ok(None);
        }
        Ok(Some(JoinPlacement {
            label: self.label.clone(),
            rack: self.rack.clone(),
            capacity: self.capacity.unwrap_or(0),
            topic_racks: self
                .topic_racks
                .iter()
                .map(|(topic, racks)| TopicRacks {
                    topic: topic.clone(),
                    racks: racks.clone(),
                })
                .collect(),
        }))
    }

    /// The heartbeat interval in effect before the coordinator suggests one.
    pub fn effective_heartbeat_interval(&self) -> Duration {
        self.heartbeat_interval
            .unwrap_or(self.session_timeout / DEFAULT_HEARTBEATS_PER_SESSION)
    }

    /// The lease timeout in effect (against a coordinator that knows lease timeouts).
    pub fn effective_lease_timeout(&self) -> Duration {
        self.lease_timeout.unwrap_or_else(|| {
            let derived = self
                .effective_heartbeat_interval()
                .saturating_mul(DEFAULT_LEASE_INTERVALS)
                .saturating_add(DEFAULT_LEASE_SLACK);
            derived.min(self.session_timeout)
        })
    }

    /// The lease safety margin in effect.
    pub fn effective_lease_margin(&self) -> Duration {
        self.lease_margin
            .unwrap_or_else(|| (self.effective_lease_timeout() / 20).max(MIN_DEFAULT_LEASE_MARGIN))
    }

    /// Checks the configuration; [`Client::join`](crate::Client::join) does the same.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.resolve().map(drop)
    }

    pub(crate) fn resolve(&self) -> Result<Settings, ConfigError> {
        if self.group.is_empty() {
            return Err(ConfigError::EmptyGroup);
        }
        if self.topics.is_empty() {
            return Err(ConfigError::NoTopics);
        }
        let mut seen = BTreeSet::new();
        for t in &self.topics {
            if t.topic.is_empty() {
                return Err(ConfigError::EmptyTopic);
            }
            if t.partitions == 0 {
                return Err(ConfigError::NoPartitions {
                    topic: t.topic.clone(),
                });
            }
            if !seen.insert(t.topic.as_str()) {
                return Err(ConfigError::DuplicateTopic {
                    topic: t.topic.clone(),
                });
            }
        }
        if self.instance_id.as_deref() == Some("") {
            return Err(ConfigError::EmptyInstanceId);
        }
        let session_timeout = self.session_timeout;
        let heartbeat_interval = self.effective_heartbeat_interval();
        let lease_timeout = self.effective_lease_timeout();
        let lease_margin = self.effective_lease_margin();
        for (which, d) in [
            ("session timeout", session_timeout),
            ("heartbeat interval", heartbeat_interval),
            ("lease timeout", lease_timeout),
            ("progress timeout", self.progress_timeout),
            ("rebalance timeout", self.rebalance_timeout),
        ] {
            if d.is_zero() {
                return Err(ConfigError::ZeroTimeout { which });
            }
        }
        let session_timeout_ms = millis("session timeout", session_timeout)?;
        let progress_timeout_ms = millis("progress timeout", self.progress_timeout)?;
        let rebalance_timeout_ms = millis("rebalance timeout", self.rebalance_timeout)?;
        let lease_timeout_ms = millis("lease timeout", lease_timeout)?;
        if lease_timeout_ms == 0 {
            return Err(ConfigError::ZeroTimeout {
                which: "lease timeout",
            });
        }
        // The coordinator sees whole milliseconds: the client counts its lease from the
        // same figures, never from the fraction the wire drops.
        let session_timeout = Duration::from_millis(session_timeout_ms.into());
        let lease_timeout = Duration::from_millis(lease_timeout_ms.into());
        if heartbeat_interval >= session_timeout {
            return Err(ConfigError::HeartbeatIntervalTooLong {
                interval: heartbeat_interval,
                session_timeout,
            });
        }
        if lease_margin >= session_timeout {
            return Err(ConfigError::LeaseMarginTooLarge {
                margin: lease_margin,
                session_timeout,
            });
        }
        if lease_timeout > session_timeout {
            return Err(ConfigError::LeaseTimeoutTooLong {
                lease_timeout,
                session_timeout,
            });
        }
        if lease_timeout.saturating_sub(lease_margin) <= heartbeat_interval {
            return Err(ConfigError::LeaseShorterThanInterval {
                lease: lease_timeout.saturating_sub(lease_margin),
                interval: heartbeat_interval,
            });
        }
        let placement = self.placement()?.map(Box::new);
        Ok(Settings {
            placement,
            group: self.group.clone(),
            subscription: self
                .topics
                .iter()
                .map(|t| rollcall_protocol::TopicSubscription {
                    topic: t.topic.clone(),
                    partitions: t.partitions,
                })
                .collect(),
            instance_id: self.instance_id.clone(),
            client_id: self.client_id.clone(),
            session_timeout,
            session_timeout_ms,
            heartbeat_interval,
            progress_timeout_ms,
            rebalance_timeout_ms,
            lease_timeout,
            lease_timeout_ms,
            lease_margin,
            detector: self.detector.clone().unwrap_or_default(),
        })
    }
}

fn millis(which: &'static str, d: Duration) -> Result<u32, ConfigError> {
    u32::try_from(d.as_millis()).map_err(|_| ConfigError::TimeoutTooLarge { which, value: d })
}

/// A validated member configuration, with every default resolved.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) group: String,
    pub(crate) subscription: Vec<rollcall_protocol::TopicSubscription>,
    pub(crate) instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) session_timeout: Duration,
    pub(crate) session_timeout_ms: u32,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) progress_timeout_ms: u32,
    pub(crate) rebalance_timeout_ms: u32,
    /// `L`, at most the session timeout.
    pub(crate) lease_timeout: Duration,
    pub(crate) lease_timeout_ms: u32,
    pub(crate) lease_margin: Duration,
    /// The detector to ask for; empty for the coordinator's choice.
    pub(crate) detector: String,
    /// What the member declares at join (Join version 3), if anything.
    pub(crate) placement: Option<Box<JoinPlacement>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> MemberConfig {
        MemberConfig::new("g", [("t", 4)])
    }

    #[test]
    fn defaults_are_valid_and_documented() {
        let c = base();
        let s = c.resolve().unwrap();
        assert_eq!(s.session_timeout, Duration::from_secs(10));
        assert_eq!(s.heartbeat_interval, Duration::from_secs(2));
        // L = min(T, 3 I + 250 ms) = min(10 s, 6.25 s); M = 5 % of L.
        assert_eq!(s.lease_timeout, Duration::from_millis(6250));
        assert_eq!(s.lease_timeout_ms, 6250);
        assert_eq!(s.lease_margin, Duration::from_micros(312_500));
        // L - M covers two intervals and leaves the rest for the round trip.
        assert!(s.lease_timeout - s.lease_margin > 2 * s.heartbeat_interval);
        assert_eq!(s.progress_timeout_ms, 300_000);
        assert_eq!(s.rebalance_timeout_ms, 60_000);
        let short = base().with_session_timeout(Duration::from_millis(60));
        assert_eq!(short.effective_lease_margin(), MIN_DEFAULT_LEASE_MARGIN);
    }

    #[test]
    fn the_default_lease_follows_the_interval_and_is_capped_by_the_session() {
        // I = 1 s explicitly: L = 3.25 s.
        let c = base().with_heartbeat_interval(Duration::from_secs(1));
        assert_eq!(c.effective_lease_timeout(), Duration::from_millis(3250));
        assert_eq!(c.effective_lease_margin(), Duration::from_micros(162_500));
        // T = 600 ms, I = 120 ms: 3 I + 250 ms = 610 ms > T, so L = T.
        let c = base().with_session_timeout(Duration::from_millis(600));
        assert_eq!(c.effective_lease_timeout(), Duration::from_millis(600));
        assert_eq!(c.effective_lease_margin(), Duration::from_millis(30));
        c.validate().unwrap();
        // An explicit lease is taken as given, and the margin follows it.
        let c = base().with_lease_timeout(Duration::from_secs(4));
        assert_eq!(c.effective_lease_timeout(), Duration::from_secs(4));
        assert_eq!(c.effective_lease_margin(), Duration::from_millis(200));
        let s = c.resolve().unwrap();
        assert_eq!(
            (s.lease_timeout, s.lease_timeout_ms),
            (Duration::from_secs(4), 4000)
        );
        // L = T is allowed.
        base()
            .with_lease_timeout(Duration::from_secs(10))
            .validate()
            .unwrap();
    }

    #[test]
    fn the_subscription_reaches_the_join_request_as_declared() {
        let mut c = MemberConfig::new("g", [("a", 3)]);
        assert_eq!(c.topics, vec![TopicSubscription::new("a", 3)]);
        c.topics.push(("b", 2).into());
        let wire = |topic: &str, partitions| rollcall_protocol::TopicSubscription {
            topic: topic.to_owned(),
            partitions,
        };
        assert_eq!(
            c.resolve().unwrap().subscription,
            vec![wire("a", 3), wire("b", 2)]
        );
    }

    #[test]
    fn invalid_configurations_are_refused() {
        type Check = fn(&ConfigError) -> bool;
        let cases: Vec<(MemberConfig, Check)> = vec![
            (MemberConfig::new("", [("t", 1)]), |e| {
                matches!(e, ConfigError::EmptyGroup)
            }),
            (MemberConfig::new("g", Vec::<(String, u32)>::new()), |e| {
                matches!(e, ConfigError::NoTopics)
            }),
            (MemberConfig::new("g", [("", 1)]), |e| {
                matches!(e, ConfigError::EmptyTopic)
            }),
            (MemberConfig::new("g", [("t", 0)]), |e| {
                matches!(e, ConfigError::NoPartitions { .. })
            }),
            (MemberConfig::new("g", [("t", 1), ("t", 2)]), |e| {
                matches!(e, ConfigError::DuplicateTopic { .. })
            }),
            (base().with_instance_id(""), |e| {
                matches!(e, ConfigError::EmptyInstanceId)
            }),
            (base().with_session_timeout(Duration::ZERO), |e| {
                matches!(e, ConfigError::ZeroTimeout { .. })
            }),
            (base().with_progress_timeout(Duration::ZERO), |e| {
                matches!(e, ConfigError::ZeroTimeout { .. })
            }),
            (base().with_rebalance_timeout(Duration::ZERO), |e| {
                matches!(e, ConfigError::ZeroTimeout { .. })
            }),
            (base().with_heartbeat_interval(Duration::ZERO), |e| {
                matches!(e, ConfigError::ZeroTimeout { .. })
            }),
            (
                base().with_heartbeat_interval(Duration::from_secs(10)),
                |e| matches!(e, ConfigError::HeartbeatIntervalTooLong { .. }),
            ),
            (base().with_lease_margin(Duration::from_secs(10)), |e| {
                matches!(e, ConfigError::LeaseMarginTooLarge { .. })
            }),
            (
                base()
                    .with_heartbeat_interval(Duration::from_secs(5))
                    .with_lease_margin(Duration::from_secs(5)),
                |e| matches!(e, ConfigError::LeaseShorterThanInterval { .. }),
            ),
            (base().with_lease_timeout(Duration::ZERO), |e| {
                matches!(e, ConfigError::ZeroTimeout { .. })
            }),
            (
                base().with_lease_timeout(Duration::from_millis(10_001)),
                |e| matches!(e, ConfigError::LeaseTimeoutTooLong { .. }),
            ),
            (
                // L - M = 2 s is not longer than I = 2 s.
                base()
                    .with_lease_timeout(Duration::from_millis(2100))
                    .with_lease_margin(Duration::from_millis(100)),
                |e| matches!(e, ConfigError::LeaseShorterThanInterval { .. }),
            ),
            (
                // A margin as long as the lease.
                base()
                    .with_lease_timeout(Duration::from_secs(3))
                    .with_lease_margin(Duration::from_secs(3)),
                |e| matches!(e, ConfigError::LeaseShorterThanInterval { .. }),
            ),
            (
                base().with_lease_timeout(Duration::from_secs(u64::from(u32::MAX))),
                |e| {
                    matches!(
                        e,
                        ConfigError::TimeoutTooLarge {
                            which: "lease timeout",
                            ..
                        }
                    )
                },
            ),
            (
                base().with_progress_timeout(Duration::from_secs(u64::from(u32::MAX))),
                |e| matches!(e, ConfigError::TimeoutTooLarge { .. }),
            ),
        ];
        for (config, expected) in cases {
            let err = config.validate().unwrap_err();
            assert!(expected(&err), "{config:?} gave {err:?}");
            assert!(!err.to_string().is_empty());
        }
    }
}
