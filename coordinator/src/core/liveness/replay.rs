//! One member's heartbeat arrivals replayed through the coordinator: a thin adapter
//! over [`GroupReplay`] for a group of one member, numbering its heartbeats 1, 2, 3…
//! (a trace of arrival times has no losses of its own). For offline study of detectors
//! (what a detector would have done on a recorded or synthetic trace); the core itself
//! never uses it.
//!
//! The rules are the coordinator's own, since it is the coordinator that judges (see
//! [`crate::core::replay`]):
//!
//! - The member becomes suspect when its silence reaches `suspect_after` (its timer
//!   fires then), and is expelled when it reaches `expel_after`. A heartbeat that
//!   arrives at the very instant of a deadline is in time: the timer runs after it.
//! - A suspect member is alive again after `recover_beats` consecutive on-time
//!   heartbeats.
//! - An expelled member's next heartbeat is refused; its client joins again at once and
//!   is judged as a new member from that arrival (no history, so the adaptive detector
//!   falls back to the fixed rule until it has shown enough gaps again).
//!
//! With one member, no lease shorter than the session and a server that hears frames
//! throughout, no guard has evidence to act on: the trace is taken to be the member's
//! alone. [`GroupReplay`] replays groups, connections and the server's own trouble.

use std::time::{Duration, Instant};

use super::{DetectorKind, DetectorSettings, Thresholds};
use crate::core::replay::{GroupReplay, ReplayConfig, Verdict};

pub use crate::core::replay::Pending;

/// What happened to the member up to an instant: in the silence before it, and at the
/// arrival there if there was one ([`Replay::arrive`], [`Replay::advance`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdicts {
    /// It became suspect, at this instant.
    pub suspected: Option<Instant>,
    /// It was expelled, at this instant.
    pub expelled: Option<Instant>,
    /// It was alive again (it recovered, or rejoined after an expulsion), at this
    /// instant: the arrival's.
    pub alive_again: Option<Instant>,
}

/// One member's arrivals replayed through the coordinator; see the module
/// documentation.
#[derive(Debug)]
pub struct Replay {
    group: GroupReplay,
    kind: DetectorKind,
    /// Heartbeat sequence numbers, one per arrival.
    sequence: u64,
}

impl Replay {
    /// A member, not yet heard, judged by `kind` with `settings`, which asked for
    /// `session` (for the fixed detector, the timeout itself; for the others, the bound
    /// their thresholds never exceed).
    pub fn new(kind: DetectorKind, settings: &DetectorSettings, session: Duration) -> Self {
        Self {
            group: GroupReplay::new(ReplayConfig::new(kind, settings, session)),
            kind,
            sequence: 0,
        }
    }

    /// Which detector judges the member.
    pub fn kind(&self) -> DetectorKind {
        self.kind
    }

    /// Fires the member's timers that fall before `now` (not at it), with nothing heard:
    /// what the core would have done by then.
    pub fn advance(&mut self, now: Instant) -> Verdicts {
        self.group.advance(now);
        self.verdicts()
    }

    /// A heartbeat arrived at `now`: fires the timers due before it, then judges it
    /// (recovery of a suspect member; a rejoin after an expulsion). An arrival earlier
    /// than the one before counts as simultaneous with it.
    pub fn arrive(&mut self, now: Instant) -> Verdicts {
        self.sequence += 1;
        self.group.beat(now, 0, self.sequence);
        self.verdicts()
    }

    fn verdicts(&mut self) -> Verdicts {
        let mut out = Verdicts::default();
        while let Some(j) = self.group.poll_verdict() {
            match j.verdict {
                Verdict::Suspected => {
                    out.suspected.get_or_insert(j.at);
                }
                Verdict::Expelled(_) => out.expelled = Some(j.at),
                Verdict::Recovered | Verdict::Rejoined => out.alive_again = Some(j.at),
            }
        }
        out
    }

    /// When the member would be suspected and expelled if nothing more were heard.
    pub fn pending(&self) -> Pending {
        self.group.pending(0)
    }

    /// The thresholds in force; `None` before the first arrival and while expelled.
    pub fn thresholds(&self) -> Option<Thresholds> {
        self.group.thresholds(0)
    }

    /// Whether the member is suspect (and not expelled) as of the last instant replayed.
    pub fn is_suspect(&self) -> bool {
        self.group.is_suspect(0)
    }

    /// Whether the member is expelled and not heard since.
    pub fn is_expelled(&self) -> bool {
        self.group.is_expelled(0)
    }
}
