//! How the core judges whether a member's process is there.
//!
//! One small interface, so a suspect state and adaptive detectors (phi accrual) can be
//! added without touching the rest of the core.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use rollcall_protocol::Liveness;

/// Judges one member's liveness from the times it was heard from.
pub trait LivenessPolicy: Debug + Send {
    /// A frame from the member arrived at `now`.
    fn heard(&mut self, now: Instant);
    /// When the member is to be declared dead if nothing more is heard.
    fn deadline(&self) -> Instant;
    /// How the member looks at `now` (before its deadline).
    fn liveness(&self, now: Instant) -> Liveness;
    /// Shifts every time it holds by `by` (used when the coordinator itself was paused,
    /// so that the pause is no member's fault).
    fn extend(&mut self, by: Duration);
    /// When the member was last heard from.
    fn last_heard(&self) -> Instant;
    /// The member asked for a new session timeout (a rejoin); the deadline follows it.
    fn set_timeout(&mut self, timeout: Duration);
}

/// A fixed session timeout: dead `timeout` after the last frame, suspect after half of it.
#[derive(Debug, Clone)]
pub struct FixedTimeout {
    timeout: Duration,
    last_heard: Instant,
}

impl FixedTimeout {
    /// A member first heard at `now`.
    pub fn new(now: Instant, timeout: Duration) -> Self {
        Self {
            timeout,
            last_heard: now,
        }
    }
}

impl LivenessPolicy for FixedTimeout {
    fn heard(&mut self, now: Instant) {
        if now > self.last_heard {
            self.last_heard = now;
        }
    }

    fn deadline(&self) -> Instant {
        self.last_heard + self.timeout
    }

    fn liveness(&self, now: Instant) -> Liveness {
        if now.saturating_duration_since(self.last_heard) > self.timeout / 2 {
            Liveness::Suspect
        } else {
            Liveness::Alive
        }
    }

    fn extend(&mut self, by: Duration) {
        self.last_heard += by;
    }

    fn last_heard(&self) -> Instant {
        self.last_heard
    }

    fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }
}
