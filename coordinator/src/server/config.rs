//! The server's configuration, constructible in code with defaults, and the parsers of
//! the human-friendly values (durations, sizes) the command line and the file accept.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::tls::{ClientAuth, TlsSettings};
use crate::core::CoreConfig;
use crate::store::Store;

/// Where the server keeps its durable state.
#[derive(Clone)]
pub enum StoreConfig {
    /// A redb file in this directory (created if missing).
    Dir(PathBuf),
    /// Nothing durable: an in-memory store, for tests and benchmarks.
    Memory,
    /// A store built by the caller (tests that inject failures, or share a store
    /// across restarts).
    Custom(Arc<dyn Store>),
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dir(dir) => f.debug_tuple("Dir").field(dir).finish(),
            Self::Memory => f.write_str("Memory"),
            Self::Custom(store) => f.debug_tuple("Custom").field(store).finish(),
        }
    }
}

/// Everything the server needs to run.
///
/// [`ServerConfig::default`] listens on `127.0.0.1:0` (an ephemeral port), serves no
/// metrics, keeps its state in memory and runs one shard: what a test wants. The
/// `rollcall serve` command builds one from its flags, environment and file.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address the protocol listener binds.
    pub listen: SocketAddr,
    /// Address of the Prometheus endpoint; `None` serves no metrics.
    pub metrics_addr: Option<SocketAddr>,
    /// Durable state.
    pub store: StoreConfig,
    /// Number of shards (tasks that each own the groups hashed to them).
    pub shards: usize,
    /// Threads serving connections, each with a single-threaded runtime of its own;
    /// `0` serves them on the runtime the server runs on.
    pub io_threads: usize,
    /// Largest frame accepted or sent, length prefix excluded.
    pub max_frame_size: usize,
    /// Connections served at once; more are answered `TooManyConnections` and closed.
    pub max_connections: usize,
    /// Connections served at once from one IP address; more from it are answered
    /// `TooManyConnections` and closed, as over `max_connections`. `0`: no limit.
    pub max_connections_per_address: usize,
    /// Connections authenticated as one principal at once (with an auth file); one more
    /// is answered `TooManyConnections` when it authenticates, and closed. `0`: no limit.
    pub max_connections_per_principal: usize,
    /// Time a new connection has to complete its ApiVersions handshake.
    pub handshake_timeout: Duration,
    /// Time a frame has to arrive whole once its first byte has: a connection that
    /// leaves a frame unfinished for longer is closed (it would otherwise hold a read
    /// buffer of up to `max_frame_size`, and a connection slot, for ever).
    pub frame_timeout: Duration,
    /// Time a handshaken connection may send nothing at all before it is closed. It
    /// must exceed the longest session timeout a member may ask for
    /// (`core.max_session_timeout`): a member heartbeats within its session timeout or
    /// is expelled anyway, so only connections that carry no live member (an idle admin
    /// connection, a peer that vanished without closing) ever reach it.
    pub idle_timeout: Duration,
    /// Frames queued for one connection before it is deemed too slow and disconnected.
    pub send_buffer: usize,
    /// Bytes (encoded frames, length prefixes included) queued for one connection
    /// before it is deemed too slow and disconnected. At least `max_frame_size`; a frame
    /// is always accepted into an empty queue, so one answer of any size fits.
    pub send_buffer_bytes: usize,
    /// Bytes of connection buffers (frames being read, frames queued) over all
    /// connections together, beyond 64 KiB each that is not counted: a large frame
    /// with no room is refused (`TooManyConnections`, and the connection closed), and a
    /// connection whose backlog would pass it is disconnected as a slow reader. At
    /// least `max_frame_size` + `send_buffer_bytes`.
    pub max_buffered_bytes: usize,
    /// Time graceful shutdown may take before the server gives up waiting.
    pub shutdown_timeout: Duration,
    /// Offsets of groups empty for longer than this are purged.
    pub offsets_retention: Duration,
    /// How often the retention purge runs (it also runs once at start).
    pub retention_interval: Duration,
    /// How often each shard refreshes the group and member gauges.
    pub stats_interval: Duration,
    /// The auth file (users and access rules, see `rollcall serve --help`); when set,
    /// every connection must authenticate and everything not allowed is denied.
    pub auth_file: Option<PathBuf>,
    /// How often the auth file is checked for changes (it is also reloaded on SIGHUP).
    pub auth_reload_interval: Duration,
    /// TLS on the protocol listener; off by default.
    pub tls: TlsSettings,
    /// The core's limits and tunables. `member_id_suffix` is made unique per start and
    /// per shard by the server.
    pub core: CoreConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics_addr: None,
            store: StoreConfig::Memory,
            shards: 1,
            io_threads: 1,
            max_frame_size: rollcall_protocol::DEFAULT_MAX_FRAME_SIZE,
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            max_connections_per_principal: 1_000,
            handshake_timeout: Duration::from_secs(5),
            frame_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60 * 60),
            send_buffer: 4096,
            send_buffer_bytes: 4 << 20,
            max_buffered_bytes: 1 << 30,
            shutdown_timeout: Duration::from_secs(10),
            offsets_retention: Duration::from_secs(7 * 24 * 60 * 60),
            retention_interval: Duration::from_secs(60 * 60),
            stats_interval: Duration::from_secs(1),
            auth_file: None,
            auth_reload_interval: Duration::from_secs(10),
            tls: TlsSettings::default(),
            core: CoreConfig {
                // The largest that keeps every push and a one-member Describe answer
                // within the default 1 MiB frame (see `largest_member_answer`).
                max_partitions_per_group: DEFAULT_MAX_PARTITIONS_PER_GROUP,
                ..CoreConfig::default()
            },
        }
    }
}

/// The default `core.max_partitions_per_group` of a server.
pub const DEFAULT_MAX_PARTITIONS_PER_GROUP: u32 = 100_000;

/// An upper bound, in bytes (length prefix excluded), of the largest frame the
/// coordinator sends about one member of a group of `partitions` partitions in one
/// topic: its Assignment or Revoke push, or the DescribeGroup answer for a group of that
/// one member. The Describe answer is the largest: it lists the member's owned
/// partitions, those pending revocation (a subset of the owned ones) and those pending
/// grant (disjoint from the owned ones), so at most twice the group's partitions, in
/// three lists.
///
/// Every name is counted at its longest (255 bytes; a member id 510). Encoding, from
/// `docs/PROTOCOL.md` §3, §6.9 and §7.1: a 9-byte header; a response's error code;
/// group, assignor, member id,
/// client id as strings (2 + length); the instance id as an optional string
/// (1 + 2 + length); state 1, generation 4, member count 4, liveness 1, two u64s; at
/// version 1 the detector and shadow detector names and the member's detection; each
/// partition list a u32 count, then per topic a string and a u32 count (at most 261
/// bytes), then 4 bytes per partition.
///
/// Each further topic adds at most 261 bytes per list. The default limits leave room
/// for hundreds of them (100,000 partitions need 802,466 of the 1,048,576 bytes); a
/// group with so many topics that an answer still does not fit gets the
/// `frame_too_large` error answer instead (see `docs/PROTOCOL.md` §2).
pub fn largest_member_answer(partitions: u64) -> u64 {
    const NAME: u64 = 2 + crate::core::MAX_NAME_BYTES as u64;
    const MEMBER_ID: u64 = 2 + crate::core::MAX_MEMBER_ID_BYTES as u64;
    const TOPIC: u64 = NAME + 4;
    // Version 1: the detector names (at most 16 bytes each) and the member's detection.
    const DETECTION: u64 = (2 + 16) + (1 + 2 + 16) + (8 + 4 * 4 + 8 + 8 + 4 * 4);
    let fixed = rollcall_protocol::HEADER_SIZE as u64
        + 2 // error code
        + NAME // group
        + 1 // state
        + 4 // generation
        + NAME // assignor
        + 4 // member count
        + MEMBER_ID
        + 1 + NAME // instance id
        + NAME // client id
        + 1 // liveness
        + 8 + 8 // since heartbeat, since progress
        + DETECTION
        + 1; // version 2: whether more members follow
    let lists = 3 * (4 + TOPIC);
    fixed + lists + 2 * 4 * partitions
}

impl ServerConfig {
    /// The smallest frame size that can carry the handshake and error answers.
    pub const MIN_FRAME_SIZE: usize = 1024;

    /// Checks the values against each other; the error names the option at fault.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        if self.shards == 0 {
            return Err(InvalidConfig::new("shards", "must be at least 1"));
        }
        if self.core.member_id_prefix.contains('#') {
            // `#` separates a static member id's instance id from its suffix.
            return Err(InvalidConfig::new(
                "member-id-prefix",
                "must not contain '#'",
            ));
        }
        if self.io_threads > 1024 {
            return Err(InvalidConfig::new(
                "io_threads",
                format!("is {}, at most 1024 allowed", self.io_threads),
            ));
        }
        if self.shards > 1024 {
            return Err(InvalidConfig::new(
                "shards",
                format!("is {}, at most 1024 allowed", self.shards),
            ));
        }
        if self.max_frame_size < Self::MIN_FRAME_SIZE {
            return Err(InvalidConfig::new(
                "max-frame-size",
                format!(
                    "is {} bytes, at least {} required",
                    self.max_frame_size,
                    Self::MIN_FRAME_SIZE
                ),
            ));
        }
        if u32::try_from(self.max_frame_size).is_err() {
            return Err(InvalidConfig::new(
                "max-frame-size",
                "must fit the 32-bit length prefix",
            ));
        }
        if self.max_connections == 0 {
            return Err(InvalidConfig::new("max-connections", "must be at least 1"));
        }
        if self.send_buffer == 0 {
            return Err(InvalidConfig::new(
                "send-buffer",
                "must be at least 1 frame",
            ));
        }
        if self.send_buffer_bytes < self.max_frame_size {
            return Err(InvalidConfig::new(
                "send-buffer-bytes",
                format!(
                    "is {} bytes, less than max-frame-size ({} bytes)",
                    self.send_buffer_bytes, self.max_frame_size
                ),
            ));
        }
        if self.auth_reload_interval.is_zero() {
            return Err(InvalidConfig::new(
                "auth-reload-interval",
                "must be more than 0",
            ));
        }
        if self.max_buffered_bytes < self.max_frame_size + self.send_buffer_bytes {
            return Err(InvalidConfig::new(
                "max-buffered-bytes",
                format!(
                    "({}) must be at least max-frame-size + send-buffer-bytes ({}): one connection must fit",
                    self.max_buffered_bytes,
                    self.max_frame_size + self.send_buffer_bytes
                ),
            ));
        }
        if self.handshake_timeout.is_zero() {
            return Err(InvalidConfig::new(
                "handshake-timeout",
                "must be more than 0",
            ));
        }
        if self.frame_timeout.is_zero() {
            return Err(InvalidConfig::new("frame-timeout", "must be more than 0"));
        }
        if self.idle_timeout <= self.core.max_session_timeout {
            return Err(InvalidConfig::new(
                "idle-timeout",
                format!(
                    "({}) must be more than max-session-timeout ({}): a member may be silent that long",
                    format_duration(self.idle_timeout),
                    format_duration(self.core.max_session_timeout)
                ),
            ));
        }
        if self.retention_interval.is_zero() {
            return Err(InvalidConfig::new(
                "retention-interval",
                "must be more than 0",
            ));
        }
        if self.stats_interval.is_zero() {
            return Err(InvalidConfig::new("stats-interval", "must be more than 0"));
        }
        self.validate_tls()?;
        let core = &self.core;
        let rate = core.max_expulsion_rate;
        if !(rate.is_finite() && rate >= 0.0) {
            return Err(InvalidConfig::new(
                "max-expulsion-rate",
                format!("({rate}) must be 0 (no limit) or more"),
            ));
        }
        let phi = core.detector_settings.phi_threshold;
        if !(phi.is_finite() && (1.0..=300.0).contains(&phi)) {
            return Err(InvalidConfig::new(
                "adaptive-phi",
                format!("({phi}) must be from 1 to 300"),
            ));
        }
        if core.min_session_timeout.is_zero() {
            return Err(InvalidConfig::new(
                "min-session-timeout",
                "must be more than 0",
            ));
        }
        if core.min_session_timeout > core.max_session_timeout {
            return Err(InvalidConfig::new(
                "min-session-timeout",
                format!(
                    "({}) exceeds max-session-timeout ({})",
                    format_duration(core.min_session_timeout),
                    format_duration(core.max_session_timeout)
                ),
            ));
        }
        if core.max_members_per_group == 0 {
            return Err(InvalidConfig::new(
                "max-members-per-group",
                "must be at least 1",
            ));
        }
        if core.max_partitions_per_group == 0 {
            return Err(InvalidConfig::new(
                "max-partitions-per-group",
                "must be at least 1",
            ));
        }
        let largest = largest_member_answer(u64::from(core.max_partitions_per_group));
        if largest > self.max_frame_size as u64 {
            return Err(InvalidConfig::new(
                "max-partitions-per-group",
                format!(
                    "({}) is too many for max-frame-size ({} bytes): the largest push or describe answer about one member could take {largest} bytes; at most {} fit",
                    core.max_partitions_per_group,
                    self.max_frame_size,
                    max_partitions_for(self.max_frame_size)
                ),
            ));
        }
        for (option, value) in [
            ("max-groups", core.max_groups as u64),
            ("max-members", core.max_members as u64),
            ("max-partitions", core.max_partitions),
            ("max-offsets", core.max_offsets as u64),
            (
                "max-metadata-bytes-total",
                core.max_metadata_bytes_total as u64,
            ),
        ] {
            if value == 0 {
                return Err(InvalidConfig::new(option, "must be at least 1"));
            }
        }
        if core.max_offsets_per_group == 0 {
            return Err(InvalidConfig::new(
                "max-offsets-per-group",
                "must be at least 1",
            ));
        }
        if core.max_metadata_bytes_per_group < core.max_metadata_bytes {
            return Err(InvalidConfig::new(
                "max-metadata-bytes-per-group",
                format!(
                    "({}) is less than max-metadata-bytes ({}): one offset's metadata could never be kept",
                    core.max_metadata_bytes_per_group, core.max_metadata_bytes
                ),
            ));
        }
        let offset = largest_offset_answer(core.max_metadata_bytes as u64);
        if offset > self.max_frame_size as u64 {
            return Err(InvalidConfig::new(
                "max-metadata-bytes",
                format!(
                    "({}) is too large for max-frame-size ({} bytes): a FetchOffsets answer of one offset could take {offset} bytes",
                    core.max_metadata_bytes, self.max_frame_size
                ),
            ));
        }
        if core.rebalance_coalesce > core.rebalance_coalesce_max {
            return Err(InvalidConfig::new(
                "rebalance-coalesce",
                format!(
                    "({}) exceeds rebalance-coalesce-max ({})",
                    format_duration(core.rebalance_coalesce),
                    format_duration(core.rebalance_coalesce_max)
                ),
            ));
        }
        Ok(())
    }
}

impl ServerConfig {
    /// TLS needs a certificate and its key together; client certificates need TLS and a
    /// CA to check them against.
    fn validate_tls(&self) -> Result<(), InvalidConfig> {
        let tls = &self.tls;
        match (&tls.cert, &tls.key) {
            (Some(_), None) => {
                return Err(InvalidConfig::new(
                    "tls-key",
                    "must be given with tls-cert: TLS needs the certificate's private key",
                ))
            }
            (None, Some(_)) => {
                return Err(InvalidConfig::new(
                    "tls-cert",
                    "must be given with tls-key: TLS needs the certificate the key belongs to",
                ))
            }
            _ => {}
        }
        if !tls.enabled() {
            if tls.client_ca.is_some() {
                return Err(InvalidConfig::new(
                    "tls-client-ca",
                    "needs tls-cert and tls-key: client certificates are only asked for over TLS",
                ));
            }
            if let Some(auth) = tls.client_auth {
                return Err(InvalidConfig::new(
                    "tls-client-auth",
                    format!("({auth}) needs tls-cert and tls-key: client certificates are only asked for over TLS"),
                ));
            }
        }
        match (tls.client_auth, &tls.client_ca) {
            (Some(auth @ (ClientAuth::Optional | ClientAuth::Required)), None) => {
                return Err(InvalidConfig::new(
                    "tls-client-auth",
                    format!("({auth}) needs tls-client-ca, the CA certificates client certificates must chain to"),
                ))
            }
            (Some(ClientAuth::None), Some(_)) => {
                return Err(InvalidConfig::new(
                    "tls-client-auth",
                    "(none) contradicts tls-client-ca: give optional or required, or drop tls-client-ca",
                ))
            }
            _ => {}
        }
        if tls.reload_interval.is_zero() {
            return Err(InvalidConfig::new(
                "tls-reload-interval",
                "must be more than 0",
            ));
        }
        Ok(())
    }
}

/// An upper bound, in bytes (length prefix excluded), of a FetchOffsets answer carrying
/// one offset whose metadata has `metadata` bytes: a 9-byte header, the error code, the
/// count, the offset (its topic at its longest, 255 bytes; partition, offset and the
/// metadata string) and, at version 1, the `more` flag (`docs/PROTOCOL.md` §6.7). A
/// paged FetchOffsets answer holds at least one offset, so this must fit the frame.
pub fn largest_offset_answer(metadata: u64) -> u64 {
    const TOPIC: u64 = 2 + crate::core::MAX_NAME_BYTES as u64;
    rollcall_protocol::HEADER_SIZE as u64 + 2 + 4 + TOPIC + 4 + 8 + 2 + metadata + 1
}

/// The most partitions per group whose [`largest_member_answer`] fits
/// `max_frame_size`.
pub fn max_partitions_for(max_frame_size: usize) -> u64 {
    (max_frame_size as u64).saturating_sub(largest_member_answer(0)) / 8
}

/// A configuration the server refuses: which option, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option} {reason}")]
pub struct InvalidConfig {
    /// The option at fault, as the command line spells it.
    pub option: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl InvalidConfig {
    fn new(option: &'static str, reason: impl Into<String>) -> Self {
        Self {
            option,
            reason: reason.into(),
        }
    }
}

/// A duration, size or address that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} '{text}': expected {expected}")]
pub struct ParseValueError {
    /// What was being parsed: `duration`, `size`, `address`.
    pub what: &'static str,
    /// The text given.
    pub text: String,
    /// What would have been accepted.
    pub expected: &'static str,
}

/// Parses a duration such as `500ms`, `10s`, `5m`, `2h`, `7d` or `1h30m`. A bare `0`
/// is zero. Units: `ms`, `s`, `m`, `h`, `d`.
pub fn parse_duration(text: &str) -> Result<Duration, ParseValueError> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let bad = || ParseValueError {
        what: "duration",
        text: text.to_owned(),
        expected: "a number and a unit (ms, s, m, h, d), e.g. 500ms, 10s, 7d",
    };
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let millis_per_unit: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        let millis = value.checked_mul(millis_per_unit).ok_or_else(bad)?;
        total = total
            .checked_add(Duration::from_millis(millis))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// Formats a duration the way [`parse_duration`] reads it, in its largest exact unit.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0".into();
    }
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

/// Parses a size in bytes: `1048576`, `512KiB`, `1MiB` (also `K`, `KB`, `M`, `MB`,
/// all binary multiples).
pub fn parse_size(text: &str) -> Result<usize, ParseValueError> {
    let s = text.trim();
    let bad = || ParseValueError {
        what: "size",
        text: text.to_owned(),
        expected: "bytes, e.g. 1048576, 512KiB or 1MiB",
    };
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits == 0 {
        return Err(bad());
    }
    let value: usize = s[..digits].parse().map_err(|_| bad())?;
    let multiple: usize = match s[digits..].trim() {
        "" | "B" => 1,
        "K" | "KB" | "KiB" | "k" | "kb" | "kib" => 1 << 10,
        "M" | "MB" | "MiB" | "m" | "mb" | "mib" => 1 << 20,
        _ => return Err(bad()),
    };
    value.checked_mul(multiple).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "10", "s", "10x", "1.5s", "-1s", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_format_round_trip() {
        for text in ["500ms", "10s", "5m", "2h", "7d", "1500ms", "0"] {
            let d = parse_duration(text).unwrap();
            assert_eq!(format_duration(d), text);
        }
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert!(parse_size("1GiB").is_err());
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn default_config_is_valid() {
        ServerConfig::default().validate().unwrap();
        let mut c = ServerConfig::default();
        c.core.min_session_timeout = c.core.max_session_timeout * 2;
        assert_eq!(c.validate().unwrap_err().option, "min-session-timeout");
    }

    #[test]
    fn partition_limit_must_fit_the_frame() {
        use rollcall_protocol::{
            AssignmentPush, DescribeGroupResponse, Frame, GroupDetection, GroupState, Liveness,
            MemberDescription, MemberDetection, Push, Response, TopicPartitions,
        };
        let c = ServerConfig::default();
        let fits = max_partitions_for(c.max_frame_size);
        assert!(u64::from(DEFAULT_MAX_PARTITIONS_PER_GROUP) <= fits);

        // The bound holds for real encodings with every name at its longest.
        let p = u32::try_from(fits).unwrap();
        let name = |c: char| c.to_string().repeat(crate::core::MAX_NAME_BYTES);
        let all = vec![TopicPartitions {
            topic: name('t'),
            partitions: (0..p).collect(),
        }];
        let half = vec![TopicPartitions {
            topic: name('t'),
            partitions: (0..p / 2).collect(),
        }];
        let describe = Frame::response(
            1,
            Response::DescribeGroup(DescribeGroupResponse {
                group: name('g'),
                state: GroupState::Reconciling,
                generation: 7,
                assignor: name('a'),
                members: vec![MemberDescription {
                    member_id: "m".repeat(crate::core::MAX_MEMBER_ID_BYTES),
                    instance_id: Some(name('i')),
                    client_id: name('c'),
                    liveness: Liveness::Suspect,
                    since_heartbeat_ms: 1,
                    since_progress_ms: 1,
                    owned: all.clone(),
                    pending_revoke: half.clone(),
                    pending_grant: half,
                    detection: Some(MemberDetection::default()),
                }],
                detection: Some(Box::new(GroupDetection {
                    detector: "x".repeat(16),
                    shadow: Some("x".repeat(16)),
                })),
                // A page (version 2): the largest answer.
                more: Some(true),
            }),
        );
        let push = Frame::push(Push::Assignment(AssignmentPush {
            group: name('g'),
            member_id: "m".repeat(crate::core::MAX_MEMBER_ID_BYTES),
            generation: 7,
            partitions: all,
        }));
        for frame in [describe, push] {
            let mut buf = bytes::BytesMut::new();
            frame.encode(&mut buf, c.max_frame_size).unwrap();
            assert!(buf.len() - 4 <= largest_member_answer(fits) as usize);
        }

        let mut c = ServerConfig::default();
        c.core.max_partitions_per_group = u32::try_from(fits + 1).unwrap();
        assert_eq!(c.validate().unwrap_err().option, "max-partitions-per-group");
        // The limit the core had before: an Assignment push of more than ~262,000
        // partitions cannot be encoded within 1 MiB.
        c.core.max_partitions_per_group = 1_000_000;
        assert!(c.validate().is_err());
        c.max_frame_size = 8 << 20;
        c.send_buffer_bytes = 8 << 20;
        c.validate().unwrap();
    }

    #[test]
    fn tls_options_are_checked_together() {
        let tls = |cert: bool, key: bool, ca: bool, auth: Option<ClientAuth>| ServerConfig {
            tls: TlsSettings {
                cert: cert.then(|| "cert.pem".into()),
                key: key.then(|| "key.pem".into()),
                client_ca: ca.then(|| "ca.pem".into()),
                client_auth: auth,
                ..TlsSettings::default()
            },
            ..ServerConfig::default()
        };
        let refused = |c: ServerConfig| c.validate().unwrap_err();
        tls(true, true, false, None).validate().unwrap();
        tls(true, true, true, None).validate().unwrap();
        tls(true, true, true, Some(ClientAuth::Optional))
            .validate()
            .unwrap();
        tls(true, true, true, Some(ClientAuth::Required))
            .validate()
            .unwrap();
        tls(true, true, false, Some(ClientAuth::None))
            .validate()
            .unwrap();

        let e = refused(tls(true, false, false, None));
        assert_eq!(e.option, "tls-key");
        assert!(e.to_string().contains("must be given with tls-cert"), "{e}");
        assert_eq!(refused(tls(false, true, false, None)).option, "tls-cert");
        let e = refused(tls(false, false, true, None));
        assert_eq!(e.option, "tls-client-ca");
        assert!(e.to_string().contains("needs tls-cert and tls-key"), "{e}");
        let e = refused(tls(false, false, false, Some(ClientAuth::Required)));
        assert_eq!(e.option, "tls-client-auth");
        let e = refused(tls(true, true, false, Some(ClientAuth::Required)));
        assert_eq!(e.option, "tls-client-auth");
        assert!(
            e.to_string().contains("(required) needs tls-client-ca"),
            "{e}"
        );
        assert_eq!(
            refused(tls(true, true, false, Some(ClientAuth::Optional))).option,
            "tls-client-auth"
        );
        let e = refused(tls(true, true, true, Some(ClientAuth::None)));
        assert!(e.to_string().contains("contradicts tls-client-ca"), "{e}");
        let mut c = tls(true, true, false, None);
        c.tls.reload_interval = Duration::ZERO;
        assert_eq!(refused(c).option, "tls-reload-interval");
    }

    #[test]
    fn the_buffer_budget_must_hold_one_connection() {
        let mut c = ServerConfig::default();
        c.max_buffered_bytes = c.max_frame_size + c.send_buffer_bytes - 1;
        let e = c.validate().unwrap_err();
        assert_eq!(e.option, "max-buffered-bytes", "{e}");
        c.max_buffered_bytes += 1;
        c.validate().unwrap();
    }

    #[test]
    fn quotas_are_checked() {
        let mut c = ServerConfig::default();
        c.core.max_groups = 0;
        assert_eq!(c.validate().unwrap_err().option, "max-groups");
        let mut c = ServerConfig::default();
        c.core.max_partitions = 0;
        assert_eq!(c.validate().unwrap_err().option, "max-partitions");
        let mut c = ServerConfig::default();
        c.core.max_metadata_bytes_per_group = c.core.max_metadata_bytes - 1;
        assert_eq!(
            c.validate().unwrap_err().option,
            "max-metadata-bytes-per-group"
        );
        // One offset with the largest metadata must fit a FetchOffsets answer.
        let mut c = ServerConfig::default();
        c.max_frame_size = 4096;
        c.send_buffer_bytes = c.max_frame_size;
        c.core.max_partitions_per_group = 100;
        let e = c.validate().unwrap_err();
        assert_eq!(e.option, "max-metadata-bytes", "{e}");
        c.core.max_metadata_bytes = 3000;
        c.validate().unwrap();
        assert!(largest_offset_answer(3000) <= 4096);
    }

    #[test]
    fn deadlines_and_send_buffer_are_checked() {
        let mut c = ServerConfig::default();
        c.idle_timeout = c.core.max_session_timeout;
        assert_eq!(c.validate().unwrap_err().option, "idle-timeout");
        let c = ServerConfig {
            frame_timeout: Duration::ZERO,
            ..ServerConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().option, "frame-timeout");
        let mut c = ServerConfig::default();
        c.send_buffer_bytes = c.max_frame_size - 1;
        assert_eq!(c.validate().unwrap_err().option, "send-buffer-bytes");
    }
}
