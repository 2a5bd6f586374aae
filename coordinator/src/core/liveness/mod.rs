//! How the core judges whether a member's process is there.
//!
//! Every member has a [`Watch`]: when it was last heard, its heartbeat [`Arrivals`], and
//! its state (alive or suspect). Every group has a [`Fleet`]: what its members have
//! shown together of their long gaps. A [`Detector`] turns a member's arrivals and its
//! group's fleet into [`Thresholds`]: how long a silence may last before the member is
//! suspect, and before it is expelled. The group's detector is chosen by a [`DetectorKind`]; a second
//! detector may run in shadow, judged on the same arrivals and never acted on.
//!
//! [`Replay`] runs the same rules over a trace of arrival times, for studying detectors
//! offline (the `rollcall-bench detector` lab).
//!
//! A new detector is one implementation of [`Detector`] and one variant of
//! [`DetectorKind`]; configuration, parsing and the command line follow from the variant.

mod adaptive;
pub mod advice;
mod arrivals;
pub mod fleet;
mod histogram;
mod replay;
pub mod tail;
mod watch;

use std::fmt::{self, Debug};
use std::str::FromStr;
use std::time::Duration;

pub use self::adaptive::{Adaptive, ExpelBasis, OWN_CLEAN_GAPS};
pub use self::arrivals::{Arrivals, BeatGap};
pub use self::fleet::Fleet;
pub use self::replay::{Pending, Replay, Verdicts};
pub use self::watch::{Beat, Judge, Transition, Watch};

use super::config::UnknownName;

/// The built-in failure detectors, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum DetectorKind {
    /// A fixed session timeout ([`FixedTimeout`]).
    #[default]
    Fixed,
    /// Thresholds that follow the member's own heartbeat gaps, bounded by a floor and by
    /// the session timeout ([`Adaptive`]).
    Adaptive,
}

impl DetectorKind {
    /// Every detector.
    pub const ALL: [Self; 2] = [Self::Fixed, Self::Adaptive];

    /// The detector's name, as configuration and output spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fixed => "fixed",
            Self::Adaptive => "adaptive",
        }
    }

    /// The detector named `name` by [`Self::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The detector, with `settings`.
    pub fn build(self, settings: &DetectorSettings) -> Box<dyn Detector> {
        match self {
            Self::Fixed => Box::new(FixedTimeout),
            Self::Adaptive => Box::new(Adaptive::new(settings)),
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

/// Settings of the detectors and of the suspect state.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectorSettings {
    /// Consecutive on-time heartbeats a suspect member needs to be alive again.
    pub recover_beats: u32,
    /// Adaptive: the suspicion level (φ) at which the bulk of the gaps convicts.
    pub phi_threshold: f64,
    /// Adaptive: the suspicion level (φ) at which a member becomes suspect.
    pub phi_suspect: f64,
    /// Adaptive: gaps a member must have shown before its own gaps judge it; a younger
    /// member is judged by the fixed rule.
    pub min_history: u32,
    /// Adaptive: never expelled for a silence shorter than this.
    pub floor: Duration,
    /// Adaptive: a silence must exceed the longest gap remembered by this factor.
    pub tail_headroom: f64,
    /// Adaptive: where the group has shown long gaps (the tail regime), a member is
    /// expelled before its session timeout only after a silence whose chance, at the
    /// upper confidence bound of the group's tail, is at most this per gap.
    pub expel_epsilon: f64,
    /// Adaptive: pooled gaps without a surprise (a long gap that ended, a lost beat, a
    /// member expelled for silence that beat again) after which a group's members may
    /// be judged by their own recent gaps alone (the clean regime).
    pub clean_gaps: u64,
    /// Adaptive: the fewest long gaps the group's tail is fitted from; with fewer, the
    /// tail regime expels at the session timeout.
    pub tail_min_exceedances: u64,
    /// Confidence of the bounds the adaptive detector and the advisor rest on.
    pub confidence: f64,
}

impl Default for DetectorSettings {
    fn default() -> Self {
        Self {
            recover_beats: 3,
            phi_threshold: 8.0,
            phi_suspect: 3.0,
            min_history: 60,
            floor: Duration::from_secs(1),
            tail_headroom: 1.15,
            expel_epsilon: 1e-6,
            clean_gaps: 20_000,
            tail_min_exceedances: tail::MIN_EXCEEDANCES,
            confidence: 0.95,
        }
    }
}

/// How long a member's silence may last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// A longer silence makes the member suspect.
    pub suspect_after: Duration,
    /// A longer silence expels it.
    pub expel_after: Duration,
}

/// Gaps a member must have shown before its rhythm can move its suspicion threshold
/// ([`Thresholds::fixed_for`]): the span of the moving mean.
pub const RHYTHM_HISTORY: u32 = 16;

impl Thresholds {
    /// The fixed rule: expelled after the session timeout, suspect after half of it.
    pub fn fixed(session: Duration) -> Self {
        Self {
            suspect_after: session / 2,
            expel_after: session,
        }
    }

    /// The fixed rule for a member that has shown `arrivals`: as [`Self::fixed`], but
    /// never suspect for a silence its own rhythm shows. Once it has shown
    /// [`RHYTHM_HISTORY`] gaps, suspicion comes no sooner than 1.25 times its moving
    /// mean gap, and no later than nine tenths of the session timeout (so suspicion
    /// still comes before expulsion).
    ///
    /// This bounds what suspicion withholds. A suspect member gets no new partitions
    /// until it beats on time again, and a member that steadily beats later than half
    /// its session (a heartbeat interval set too long, a slow host) never would: it
    /// stayed suspect, and short of its share, for as long as it lived. Now it recovers
    /// after about [`RHYTHM_HISTORY`] gaps plus its recovery beats, unless its rhythm is
    /// within a tenth of its session timeout, where suspicion is the truth. A member
    /// beating at a third of its session, as clients do by default, is judged exactly
    /// as before.
    pub fn fixed_for(arrivals: &Arrivals, session: Duration) -> Self {
        let mut t = Self::fixed(session);
        if arrivals.learned() >= RHYTHM_HISTORY {
            let rhythm = arrivals.mean().mul_f32(1.25);
            t.suspect_after = t.suspect_after.max(rhythm.min(session.mul_f32(0.9)));
        }
        t
    }
}

/// Judges how long a member's silence may last, from its heartbeat arrivals.
pub trait Detector: Debug + Send + Sync {
    /// Which detector this is.
    fn kind(&self) -> DetectorKind;
    /// The thresholds for a member that asked for `session` and has shown `arrivals`,
    /// in a group whose members have shown `fleet`. `expel_after` is never above
    /// `session`, `suspect_after` never above `expel_after`. A detector may keep what
    /// it computed from the fleet in `arrivals`, for the member's next heartbeat.
    fn thresholds(&self, arrivals: &mut Arrivals, fleet: &Fleet, session: Duration) -> Thresholds;
    /// Which regime sets the member's expulsion threshold (the fixed rule: always its
    /// session timeout).
    fn basis(&self, arrivals: &Arrivals, fleet: &Fleet, session: Duration) -> ExpelBasis {
        let _ = (arrivals, fleet, session);
        ExpelBasis::Session
    }
}

/// A fixed session timeout: expelled `session` after the last frame, whatever the gaps;
/// suspect after half of it, or later for a member whose steady rhythm is slower
/// ([`Thresholds::fixed_for`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct FixedTimeout;

impl Detector for FixedTimeout {
    fn kind(&self) -> DetectorKind {
        DetectorKind::Fixed
    }

    fn thresholds(&self, arrivals: &mut Arrivals, _: &Fleet, session: Duration) -> Thresholds {
        Thresholds::fixed_for(arrivals, session)
    }
}
