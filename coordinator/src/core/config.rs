//! The core's limits and tunables.

use std::fmt::Display;
use std::time::Duration;

use super::{AssignorKind, DetectorKind, DetectorSettings};

/// Limits and tunables of the core.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Smallest session timeout a member may ask for.
    pub min_session_timeout: Duration,
    /// Largest session timeout a member may ask for.
    pub max_session_timeout: Duration,
    /// Largest progress timeout a member may ask for.
    pub max_progress_timeout: Duration,
    /// Largest rebalance timeout a member may ask for.
    pub max_rebalance_timeout: Duration,
    /// Maximum members in one group.
    pub max_members_per_group: usize,
    /// Maximum partitions (over all topics) in one group.
    pub max_partitions_per_group: u32,
    /// Maximum commit metadata size, bytes.
    pub max_metadata_bytes: usize,
    /// Most groups over the coordinator ([`Totals`](super::Totals) counts them for every core that
    /// shares it: the server's shards). A Join or an administrative commit that would
    /// create one more is refused `too_many_groups`.
    pub max_groups: usize,
    /// Most members over the coordinator's groups; a group counts its members, or the
    /// static instances it remembers if those are more. A Join that would add one is
    /// refused `too_many_members`.
    pub max_members: usize,
    /// Most partitions over the coordinator's groups, counted as the per-group limit
    /// counts them (a topic no member subscribes to any more counts as one). A Join
    /// that would add partitions past it is refused `too_many_partitions`.
    pub max_partitions: u64,
    /// Most committed offsets (topic and partition) kept for one group; a commit of a
    /// new one past it is refused `too_many_offsets` (updating one is always allowed).
    pub max_offsets_per_group: usize,
    /// Most commit metadata bytes kept for one group; a commit whose metadata would
    /// take the group past it is refused `too_many_offsets`.
    pub max_metadata_bytes_per_group: usize,
    /// Most committed offsets over the coordinator's groups.
    pub max_offsets: usize,
    /// Most commit metadata bytes over the coordinator's groups.
    pub max_metadata_bytes_total: usize,
    /// The largest frame (length prefix excluded) the shell sends. Paged answers
    /// (ListGroups version 1, FetchOffsets version 1, DescribeGroup version 2) stop
    /// short of it, so they always fit.
    pub max_answer_bytes: usize,
    /// Rebalance triggers closer together than this share one generation.
    pub rebalance_coalesce: Duration,
    /// A rebalance is never delayed by coalescing more than this after its first trigger.
    pub rebalance_coalesce_max: Duration,
    /// The assignor.
    pub assignor: AssignorKind,
    /// The failure detector each new group judges its members' silence with.
    pub detector: DetectorKind,
    /// A second detector each new group runs in shadow (reported, never acted on).
    pub shadow_detector: Option<DetectorKind>,
    /// Settings of the detectors and of the suspect state.
    pub detector_settings: DetectorSettings,
    /// How many expelled member ids each group remembers, to answer them with the reason
    /// rather than "unknown member".
    pub expelled_memory: usize,
    /// The most lateness a wake-up needs to be taken for a pause of the coordinator
    /// itself (a quarter of the shortest session timeout suffices), and the grace after
    /// a pause in which nobody is expelled for silence (see [`guards`]).
    pub pause_guard: Duration,
    /// Fewest members with open connections a shard needs before the isolation guard
    /// may blame the coordinator's own connectivity for a mass silence (see
    /// [`guards`]). `0` disables the guard.
    pub isolation_min_members: usize,
    /// Most expulsions for silence per second (a token bucket holding a second's
    /// worth); further ones wait, within the guards' bound (see [`guards`]). `0`: no
    /// limit. The server shares its setting out among its shards.
    pub max_expulsion_rate: f64,
    /// Prefix of generated member ids (`<prefix><counter><suffix>`).
    pub member_id_prefix: String,
    /// Suffix of generated member ids; the shell makes it unique per process start and
    /// shard, so ids never repeat across restarts. It must start with a character that
    /// is not a digit. The counter comes before it so that ids of one core differ in
    /// their first few bytes: looking a member up compares less.
    pub member_id_suffix: String,
}

impl Default for CoreConfig {
    fn default() -> Self {
        Self {
            min_session_timeout: Duration::from_millis(100),
            max_session_timeout: Duration::from_secs(30 * 60),
            max_progress_timeout: Duration::from_secs(24 * 60 * 60),
            max_rebalance_timeout: Duration::from_secs(30 * 60),
            max_members_per_group: 10_000,
            max_partitions_per_group: 1_000_000,
            max_metadata_bytes: 4096,
            max_groups: 100_000,
            max_members: 200_000,
            max_partitions: 2_000_000,
            max_offsets_per_group: 100_000,
            max_metadata_bytes_per_group: 1 << 20,
            max_offsets: 2_000_000,
            max_metadata_bytes_total: 256 << 20,
            max_answer_bytes: rollcall_protocol::DEFAULT_MAX_FRAME_SIZE,
            rebalance_coalesce: Duration::from_millis(20),
            rebalance_coalesce_max: Duration::from_millis(250),
            assignor: AssignorKind::Sticky,
            detector: DetectorKind::Fixed,
            shadow_detector: None,
            detector_settings: DetectorSettings::default(),
            expelled_memory: 1024,
            pause_guard: Duration::from_secs(2),
            isolation_min_members: 3,
            max_expulsion_rate: 1000.0,
            member_id_prefix: "m".to_owned(),
            member_id_suffix: String::new(),
        }
    }
}

/// Longest group, topic, member, instance and client id accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// Longest member id the coordinator hands out, in bytes: a static member's id is its
/// instance id, `#`, and a suffix.
pub const MAX_MEMBER_ID_BYTES: usize = 2 * MAX_NAME_BYTES;

/// A name that is none of an enum's values (an assignor, a detector).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{name}': expected {expected}")]
pub struct UnknownName {
    /// What was named: `assignor`, `detector`.
    pub what: &'static str,
    /// The name given.
    pub name: String,
    /// The names accepted, comma-separated.
    pub expected: String,
}

impl UnknownName {
    /// `name` is none of `values`.
    pub fn new<T: Display>(
        what: &'static str,
        name: &str,
        values: impl IntoIterator<Item = T>,
    ) -> Self {
        let expected: Vec<String> = values.into_iter().map(|v| v.to_string()).collect();
        Self {
            what,
            name: name.to_owned(),
            expected: expected.join(", "),
        }
    }
}
