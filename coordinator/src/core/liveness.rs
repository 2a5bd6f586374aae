//! How the core judges whether a member's process is there: the [`LivenessPolicy`]
//! interface, the built-in detectors, and [`DetectorKind`], which names them.
//!
//! A group builds every member's policy from its detector kind, so a new detector is
//! one new implementation and one new variant: configuration, parsing and the
//! command line follow from the variant.

use std::fmt::{self, Debug};
use std::str::FromStr;
use std::time::{Duration, Instant};

use rollcall_protocol::Liveness;

use super::config::UnknownName;

/// The built-in failure detectors, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DetectorKind {
    /// A fixed session timeout ([`FixedTimeout`]).
    #[default]
    Fixed,
}

impl DetectorKind {
    /// Every detector.
    pub const ALL: [Self; 1] = [Self::Fixed];

    /// The detector's name, as configuration and output spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fixed => "fixed",
        }
    }

    /// The detector named `name` by [`Self::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The policy judging one member first heard at `now`, which asked for
    /// `session_timeout`.
    pub fn build(self, now: Instant, session_timeout: Duration) -> Box<dyn LivenessPolicy> {
        match self {
            Self::Fixed => Box::new(FixedTimeout::new(now, session_timeout)),
        }
    }
}

impl fmt::Display for DetectorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DetectorKind {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Self::parse(s.trim()).ok_or_else(|| UnknownName::new("detector", s, Self::ALL))
    }
}

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
