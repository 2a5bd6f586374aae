//! [`ServerConfig::validate`]: the values checked against each other, one concern at a
//! time. The checks run in this order, so the first fault found is the one reported.

use std::time::Duration;

use super::{format_duration, ServerConfig};

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
    pub(super) fn new(option: &'static str, reason: impl Into<String>) -> Self {
        Self {
            option,
            reason: reason.into(),
        }
    }
}

/// A timeout or interval, `option`, that must be more than zero.
fn positive(option: &'static str, value: Duration) -> Result<(), InvalidConfig> {
    if value.is_zero() {
        return Err(InvalidConfig::new(option, "must be more than 0"));
    }
    Ok(())
}

impl ServerConfig {
    /// The smallest frame size that can carry the handshake and error answers.
    pub const MIN_FRAME_SIZE: usize = 1024;

    /// Checks the values against each other; the error names the option at fault.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        self.validate_cluster()?;
        self.check_threads()?;
        self.check_connections()?;
        positive("auth-reload-interval", self.auth_reload_interval)?;
        self.check_buffer_budget()?;
        self.check_timeouts()?;
        self.validate_tls()?;
        self.check_detection()?;
        self.check_group_limits()?;
        self.check_member_answer_fits()?;
        self.check_quotas()?;
        self.check_offset_answer_fits()?;
        self.check_rebalance()
    }

    /// Shards, I/O threads and the member id prefix.
    fn check_threads(&self) -> Result<(), InvalidConfig> {
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
        Ok(())
    }

    /// The frame size, the connection limit and each connection's send queue.
    fn check_connections(&self) -> Result<(), InvalidConfig> {
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
        Ok(())
    }

    /// The buffer budget over all connections holds one connection's buffers.
    fn check_buffer_budget(&self) -> Result<(), InvalidConfig> {
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
        Ok(())
    }

    /// The connections' deadlines and the periodic tasks' intervals.
    fn check_timeouts(&self) -> Result<(), InvalidConfig> {
        positive("handshake-timeout", self.handshake_timeout)?;
        positive("frame-timeout", self.frame_timeout)?;
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
        positive("retention-interval", self.retention_interval)?;
        positive("stats-interval", self.stats_interval)
    }

    /// The expulsion rate limit, the adaptive detector's threshold and budget, and the bounds of
    /// the session timeouts members may ask for.
    fn check_detection(&self) -> Result<(), InvalidConfig> {
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
        let epsilon = core.detector_settings.expel_epsilon;
        if !(epsilon.is_finite() && epsilon > 0.0 && epsilon < 1.0) {
            return Err(InvalidConfig::new(
                "adaptive-expel-epsilon",
                format!("({epsilon}) must be above 0 and below 1"),
            ));
        }
        positive("min-session-timeout", core.min_session_timeout)?;
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
        Ok(())
    }

    /// The per-group member and partition limits.
    fn check_group_limits(&self) -> Result<(), InvalidConfig> {
        let core = &self.core;
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
        Ok(())
    }

    /// The coordinator-wide quotas, and the per-group offset and metadata quotas.
    fn check_quotas(&self) -> Result<(), InvalidConfig> {
        let core = &self.core;
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
        Ok(())
    }

    /// The rebalance coalescing window within its maximum.
    fn check_rebalance(&self) -> Result<(), InvalidConfig> {
        let core = &self.core;
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
    /// Cluster mode needs the `cluster` feature, endpoints, a name that fits in a key,
    /// slots, and a lease long enough to renew.
    fn validate_cluster(&self) -> Result<(), InvalidConfig> {
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        if !cfg!(feature = "cluster") {
            return Err(InvalidConfig::new(
                "--etcd",
                "needs a rollcall built with cluster support: \
                 cargo build --release --features cluster (it needs protoc to build)",
            ));
        }
        if cluster.endpoints.is_empty() || cluster.endpoints.iter().any(|e| e.trim().is_empty()) {
            return Err(InvalidConfig::new(
                "--etcd",
                "must name at least one endpoint",
            ));
        }
        if cluster.name.is_empty()
            || !cluster
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            return Err(InvalidConfig::new(
                "--cluster",
                "must be letters, digits, '-', '_' or '.'",
            ));
        }
        if !(1..=65_536).contains(&cluster.slots) {
            return Err(InvalidConfig::new("--cluster-slots", "must be 1 to 65536"));
        }
        if cluster.lease_ttl < Duration::from_secs(2) {
            return Err(InvalidConfig::new(
                "--etcd-lease-ttl",
                "must be at least 2s (etcd's lease granularity is a second)",
            ));
        }
        Ok(())
    }
}
