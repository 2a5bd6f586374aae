//! Guards that hold expulsions for silence when the silence is more likely the
//! coordinator's fault than the members'.
//!
//! Both act only on evidence about the coordinator, and both are bounded, so that no
//! guard can keep a dead member forever:
//!
//! - **Pause guard.** Evidence: the core was woken later than the deadline it asked for
//!   by more than a quarter of the shortest session timeout in the shard (at least
//!   [`PAUSE_FLOOR`], at most
//!   [`CoreConfig::pause_guard`](super::CoreConfig::pause_guard)), so the coordinator
//!   itself was not running (a stopped process, a stalled runtime). Every deadline is
//!   shifted by the delay (the pause is nobody's fault), and for one more `pause_guard`
//!   after waking nobody is expelled for silence, so frames that queued up during the
//!   pause are read before anyone is judged. Bound: the window is `pause_guard` long
//!   and opens only on a measured pause; silence while the coordinator runs counts as
//!   usual.
//! - **Isolation guard.** Evidence: the whole server (every connection of every shard,
//!   as the shell reports it) has heard nothing for at least half the expiring member's
//!   session timeout, the shard has at least
//!   [`CoreConfig::isolation_min_members`](super::CoreConfig::isolation_min_members)
//!   members whose connections are open, and at least
//!   [`ISOLATION_SHARE_PERCENT`] percent of those are overdue (silent for more than
//!   half their session timeout). A member whose connection closed is not evidence: a
//!   crashed process closes its sockets. Bound: a member is held at most one more
//!   session timeout past its deadline, then expelled whatever the evidence. When
//!   frames arrive again, the members that were not already overdue when the silence
//!   began get the silent time back; those that were get nothing.

use std::time::{Duration, Instant};

/// A wake-up later than this may be a pause of the coordinator; below it, lateness is
/// scheduling noise and never counts.
pub const PAUSE_FLOOR: Duration = Duration::from_millis(50);

/// Share of a shard's connected members that must be overdue before a mass silence is
/// blamed on the coordinator (Kubernetes' node lifecycle controller uses 55% of a zone).
pub const ISOLATION_SHARE_PERCENT: usize = 55;

/// Why an expiry for silence is held, and until when to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The coordinator was paused; frames may still be queued.
    Pause { until: Instant },
    /// The coordinator seems cut off from its members.
    Isolation { recheck: Instant },
}

impl Hold {
    pub(crate) fn recheck_at(self) -> Instant {
        match self {
            Self::Pause { until } => until,
            Self::Isolation { recheck } => recheck,
        }
    }
}

/// What the guards know about the coordinator.
#[derive(Debug, Default)]
pub(crate) struct Guards {
    /// When any member frame was last read anywhere on the server.
    pub(crate) last_frame_at: Option<Instant>,
    /// Set while the isolation guard holds: when the silence began.
    pub(crate) isolated_since: Option<Instant>,
    /// After a measured pause: no expulsion for silence before this instant.
    pub(crate) pause_grace_until: Option<Instant>,
    /// The shard's connected and overdue member counts, computed at most once per
    /// instant (only when an expiry needs them).
    pub(crate) census: Option<(Instant, Census)>,
}

/// Counts of a shard's members for the isolation guard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Census {
    /// Members whose connection is open.
    pub(crate) connected: usize,
    /// Of those, members silent for more than half their session timeout.
    pub(crate) overdue: usize,
}

impl Census {
    pub(crate) fn count(
        &mut self,
        now: Instant,
        connected: bool,
        last_heard: Instant,
        session: Duration,
    ) {
        if connected {
            self.connected += 1;
            if now.saturating_duration_since(last_heard) > session / 2 {
                self.overdue += 1;
            }
        }
    }

    /// Whether enough members are silent at once to blame the coordinator.
    pub(crate) fn mass_silence(&self, min_members: usize) -> bool {
        min_members > 0
            && self.connected >= min_members
            && self.overdue * 100 >= self.connected * ISOLATION_SHARE_PERCENT
    }
}

impl Guards {
    /// How long the whole server has heard nothing.
    pub(crate) fn server_silence(&self, now: Instant) -> Duration {
        self.last_frame_at
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    /// A frame was read at `at` somewhere on the server.
    pub(crate) fn heard(&mut self, at: Instant) {
        if self.last_frame_at.map_or(true, |t| at > t) {
            self.last_frame_at = Some(at);
        }
    }
}

/// Whether a member that stopped being heard at `last_heard` was already overdue when
/// the server's silence began at `since`: such a member gets no time back.
pub(crate) fn silent_before(since: Instant, last_heard: Instant, session: Duration) -> bool {
    since.saturating_duration_since(last_heard) > session / 2
}
