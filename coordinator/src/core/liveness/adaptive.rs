//! The adaptive detector: suspect quickly, convict on evidence.
//!
//! **Suspicion** follows the member's own recent gaps: a member becomes suspect where
//! the suspicion level φ of a normal fit of its last few dozen gaps (the spread at
//! least a tenth of the mean) reaches its level, never before half the floor and never
//! after its expulsion threshold. Suspicion only withholds new partitions, so it may be
//! quick.
//!
//! **Expulsion** before the session timeout needs evidence that the member's silence is
//! not one a live member shows. Three regimes:
//!
//! 1. *Young*: a member with fewer than `min_history` gaps (a new member, or one whose
//!    arrivals were reset) is judged by the fixed rule (with its bound on suspicion,
//!    `Thresholds::fixed_for`): a fit from a handful of gaps is a guess.
//! 2. *Clean*: the group went `clean_gaps` pooled gaps without a surprise (see
//!    [`Fleet`]) and the member itself showed none in its last 1,024 gaps. The
//!    member's own gaps judge it:
//!
//!    ```text
//!    clamp(max(mean + z·sd, headroom · longest), floor, session)
//!    ```
//!
//!    where `z` is where φ reaches its threshold and `longest` the longest gap of the
//!    last 512 to 1,024. At 95 % confidence, a group that went `n` pooled gaps without
//!    a surprise shows one in at most `3/n` of its gaps (the rule of three).
//! 3. *Tail* (otherwise): the group has shown long gaps, or not yet shown enough calm.
//!    The member is expelled after the clean regime's silence or after the shortest
//!    silence `t` whose chance, at the upper confidence bounds of the group's fitted
//!    tail ([`Fit::exceed_upper`](super::fleet::Fit::exceed_upper)), is at most
//!    `expel_epsilon` per gap, whichever is longer; at the session timeout if no
//!    silence up to it is that unlikely, or if the tail has too few long gaps to fit.
//!
//! The first early conviction of a live member in the clean regime is proven by its
//! next heartbeat (refused: it was expelled for silence), which is a surprise and
//! closes the gate for the whole group; every member is judged again at once, and its
//! deadline only moves later. The tail threshold is cached in the member's arrivals
//! and computed again only when the fleet's fit changed (at most once a second) or the
//! member's mean gap moved by a tenth.

use std::time::Duration;

use super::arrivals::{sigmas_for_phi, WINDOW};
use super::fleet::{self, Fleet};
use super::{Arrivals, Detector, DetectorKind, DetectorSettings, Thresholds};

/// Gaps of its own a member must have shown without a surprise to be judged in the
/// clean regime: the span of its histogram and of its longest gap.
pub const OWN_CLEAN_GAPS: u32 = 2 * WINDOW;

/// Which regime set a member's expulsion threshold ([`Detector::basis`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpelBasis {
    /// Too few gaps of its own: the fixed rule.
    Young,
    /// The clean regime: its own recent gaps.
    Clean,
    /// The tail regime, with a threshold below the session timeout.
    Tail,
    /// The tail regime, at the session timeout (or the fixed detector).
    Session,
}

impl ExpelBasis {
    /// The basis's name, as output spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Young => "young",
            Self::Clean => "clean",
            Self::Tail => "tail",
            Self::Session => "session",
        }
    }
}

/// Thresholds from the member's recent gaps and its group's fleet; see the module
/// documentation.
#[derive(Debug, Clone)]
pub struct Adaptive {
    expel_sigmas: f64,
    suspect_sigmas: f64,
    min_history: u32,
    floor: Duration,
    tail_headroom: f64,
    epsilon: f64,
    clean_gaps: u64,
}

/// What a member's own recent gaps say ([`Adaptive::body`]).
struct Body {
    /// The clean regime's expulsion threshold.
    expel: Duration,
    /// Where φ reaches the suspicion level.
    suspect: Duration,
}

impl Adaptive {
    /// The detector with `settings`.
    pub fn new(settings: &DetectorSettings) -> Self {
        Self {
            expel_sigmas: sigmas_for_phi(settings.phi_threshold),
            suspect_sigmas: sigmas_for_phi(settings.phi_suspect.min(settings.phi_threshold)),
            min_history: settings.min_history,
            floor: settings.floor,
            tail_headroom: settings.tail_headroom.max(1.0),
            epsilon: settings.expel_epsilon.clamp(0.0, 1.0),
            clean_gaps: settings.clean_gaps,
        }
    }

    /// The member's own gaps' thresholds; `None` for a young member.
    fn body(&self, arrivals: &Arrivals, session: Duration) -> Option<Body> {
        if arrivals.learned() < self.min_history.max(2) {
            return None;
        }
        let mean = arrivals.mean().as_secs_f64();
        let sd = arrivals.std_dev().as_secs_f64().max(mean / 10.0);
        let tail = arrivals.longest().as_secs_f64() * self.tail_headroom;
        let floor = self.floor.min(session);
        Some(Body {
            expel: secs((mean + self.expel_sigmas * sd).max(tail)).clamp(floor, session),
            suspect: secs(mean + self.suspect_sigmas * sd),
        })
    }

    /// Whether the member is judged in the clean regime.
    fn clean(&self, arrivals: &Arrivals, fleet: &Fleet) -> bool {
        fleet.clean() >= self.clean_gaps && arrivals.since_surprise() >= OWN_CLEAN_GAPS
    }

    /// The tail regime's threshold for a member whose mean gap is `mean` seconds: the
    /// shortest silence the fleet's fit bounds at `expel_epsilon`, at most `session`.
    fn tail(&self, mean: f32, fleet: &Fleet, session: Duration) -> Duration {
        let mean = f64::from(mean);
        let u = fleet::threshold(mean, self.floor);
        let t = fleet
            .fit()
            .expel_after(mean, u, u, session.as_secs_f64(), self.epsilon);
        // Whole milliseconds, rounded up, as the cache keeps it.
        Duration::from_millis((t * 1000.0).ceil() as u64).min(session)
    }

    /// [`Self::tail`], as cached in the member's arrivals.
    fn tail_cached(&self, arrivals: &mut Arrivals, fleet: &Fleet, session: Duration) -> Duration {
        let mean = arrivals.mean_secs();
        if let Some(t) = arrivals.cached_tail(fleet.epoch(), mean) {
            return t.min(session);
        }
        let t = self.tail(mean, fleet, session);
        arrivals.cache_tail(fleet.epoch(), mean, t);
        t
    }

    fn judged(&self, body: Body, expel: Duration, session: Duration) -> Thresholds {
        let floor = self.floor.min(session);
        Thresholds {
            suspect_after: body.suspect.clamp(floor / 2, expel),
            expel_after: expel,
        }
    }

    /// The regime that sets the member's expulsion threshold.
    fn expel_basis(&self, arrivals: &Arrivals, fleet: &Fleet, session: Duration) -> ExpelBasis {
        let Some(body) = self.body(arrivals, session) else {
            return ExpelBasis::Young;
        };
        if self.clean(arrivals, fleet) {
            return ExpelBasis::Clean;
        }
        if body
            .expel
            .max(self.tail(arrivals.mean_secs(), fleet, session))
            >= session
        {
            ExpelBasis::Session
        } else {
            ExpelBasis::Tail
        }
    }
}

impl Detector for Adaptive {
    fn kind(&self) -> DetectorKind {
        DetectorKind::Adaptive
    }

    fn thresholds(&self, arrivals: &mut Arrivals, fleet: &Fleet, session: Duration) -> Thresholds {
        let Some(body) = self.body(arrivals, session) else {
            return Thresholds::fixed_for(arrivals, session);
        };
        let expel = if self.clean(arrivals, fleet) {
            body.expel
        } else {
            body.expel.max(self.tail_cached(arrivals, fleet, session))
        };
        self.judged(body, expel, session)
    }

    fn basis(&self, arrivals: &Arrivals, fleet: &Fleet, session: Duration) -> ExpelBasis {
        self.expel_basis(arrivals, fleet, session)
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests;
