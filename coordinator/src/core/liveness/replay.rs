//! One member's heartbeat arrivals replayed through a detector, judged by the rules the
//! core applies to a live member: the same [`Watch`], the same [`Detector`], with its
//! timer firing when the core's would. For offline study of detectors (what a detector
//! would have done on a recorded or synthetic trace); the core itself never uses it.
//!
//! Deterministic and sans-IO like the rest of the core: time arrives as `now`, never read
//! from a clock. The rules, as the core applies them:
//!
//! - The member becomes suspect when its silence reaches `suspect_after` (its timer
//!   fires then), and is expelled when it reaches `expel_after`. A heartbeat that
//!   arrives at the very instant of a deadline is in time: the timer is taken to fire
//!   after it.
//! - A suspect member is alive again after `recover_beats` consecutive on-time
//!   heartbeats.
//! - An expelled member's next heartbeat is refused; its client rejoins at once and is
//!   judged as a new member from that arrival (no history, so the adaptive detector
//!   falls back to the fixed rule until it has shown enough gaps again).
//!
//! The guards (pause, backlog, isolation, rate limit) are the coordinator's own trouble
//! and are not replayed: the trace is taken to be the member's alone.

use std::time::{Duration, Instant};

use super::{
    Detector, DetectorKind, DetectorSettings, Fleet, Judge, Thresholds, Transition, Watch,
};

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

/// When the member would be suspected and expelled if nothing more were heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// When it becomes suspect; `None` when it is already suspect or expelled.
    pub suspect_at: Option<Instant>,
    /// When it is expelled; `None` when it already is.
    pub expel_at: Option<Instant>,
}

/// One member's arrivals replayed through a detector; see the module documentation.
#[derive(Debug)]
pub struct Replay {
    detector: Box<dyn Detector>,
    session: Duration,
    settings: DetectorSettings,
    /// The member's group, of this member alone.
    fleet: Fleet,
    /// The member's liveness; `None` before its first arrival and while it is expelled.
    watch: Option<Watch>,
    /// Heartbeat sequence numbers, one per arrival (a trace has no losses of its own).
    sequence: u64,
    /// The member was expelled and has not been heard since.
    expelled: bool,
}

impl Replay {
    /// A member, not yet heard, judged by `kind` with `settings`, which asked for
    /// `session` (for the fixed detector, the timeout itself; for the others, the bound
    /// their thresholds never exceed).
    pub fn new(kind: DetectorKind, settings: &DetectorSettings, session: Duration) -> Self {
        Self {
            detector: kind.build(settings),
            session,
            settings: settings.clone(),
            fleet: Fleet::default(),
            watch: None,
            sequence: 0,
            expelled: false,
        }
    }

    /// Which detector judges the member.
    pub fn kind(&self) -> DetectorKind {
        self.detector.kind()
    }

    /// Fires the member's timers that fall before `now` (not at it), with nothing heard:
    /// what the core would have done by then.
    pub fn advance(&mut self, now: Instant) -> Verdicts {
        let mut out = Verdicts::default();
        let Some(w) = self.watch.as_mut() else {
            return out;
        };
        if let Some(at) = w.suspect_at() {
            if at < now {
                if let Some(Transition::Suspected { .. }) = w.check(at) {
                    out.suspected = Some(at);
                }
            }
        }
        let deadline = w.deadline();
        if deadline < now {
            out.expelled = Some(deadline);
            self.watch = None;
            self.expelled = true;
        }
        out
    }

    /// A heartbeat arrived at `now`: fires the timers due before it, then judges it
    /// (recovery of a suspect member; a rejoin after an expulsion). An arrival earlier
    /// than the one before counts as simultaneous with it.
    pub fn arrive(&mut self, now: Instant) -> Verdicts {
        let mut out = self.advance(now);
        self.sequence += 1;
        match self.watch.as_mut() {
            Some(w) => {
                w.heard(now);
                let judge = Judge {
                    detector: &*self.detector,
                    shadow: None,
                    settings: &self.settings,
                    members: 1,
                };
                let beat = w.beat(now, self.sequence, self.session, judge, &mut self.fleet);
                match beat.change {
                    Some(Transition::Recovered { .. }) => out.alive_again = Some(now),
                    // Only at the instant of its timer, which fired above.
                    Some(Transition::Suspected { .. }) => out.suspected = Some(now),
                    None => {}
                }
            }
            None => {
                if std::mem::take(&mut self.expelled) {
                    // Its refused heartbeat proves the expulsion false.
                    self.fleet.false_expulsion();
                    out.alive_again = Some(now);
                }
                let mut w = Watch::new(now, self.session, &*self.detector, None, &self.fleet);
                let judge = Judge {
                    detector: &*self.detector,
                    shadow: None,
                    settings: &self.settings,
                    members: 1,
                };
                w.beat(now, self.sequence, self.session, judge, &mut self.fleet);
                self.watch = Some(w);
            }
        }
        out
    }

    /// When the member would be suspected and expelled if nothing more were heard.
    pub fn pending(&self) -> Pending {
        match &self.watch {
            Some(w) => Pending {
                suspect_at: w.suspect_at(),
                expel_at: Some(w.deadline()),
            },
            None => Pending {
                suspect_at: None,
                expel_at: None,
            },
        }
    }

    /// The thresholds in force; `None` before the first arrival and while expelled.
    pub fn thresholds(&self) -> Option<Thresholds> {
        self.watch.as_ref().map(Watch::thresholds)
    }

    /// Whether the member is suspect (and not expelled) as of the last instant replayed.
    pub fn is_suspect(&self) -> bool {
        self.watch
            .as_ref()
            .is_some_and(|w| w.suspect_at().is_none())
    }

    /// Whether the member is expelled and not heard since.
    pub fn is_expelled(&self) -> bool {
        self.expelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, secs: f64) -> Instant {
        start + Duration::from_secs_f64(secs)
    }

    /// A fixed 4 s timeout (suspect after 2 s), beats every second, by hand: a 3 s gap
    /// is a suspicion that three on-time beats end; a 5 s gap an expulsion and a
    /// rejoin; a beat at the very deadline is in time.
    #[test]
    fn a_fixed_timeout_replayed_by_hand() {
        let start = crate::core::tests::start_instant();
        let mut r = Replay::new(
            DetectorKind::Fixed,
            &DetectorSettings::default(),
            Duration::from_secs(4),
        );
        assert_eq!(r.kind(), DetectorKind::Fixed);
        assert_eq!(r.pending().expel_at, None, "not heard yet");
        for s in 0..=10 {
            assert_eq!(r.arrive(at(start, f64::from(s))), Verdicts::default());
        }
        // 3 s of silence: suspect at 12, not expelled.
        let v = r.arrive(at(start, 13.0));
        assert_eq!(v.suspected, Some(at(start, 12.0)));
        assert_eq!(v.expelled, None);
        assert!(r.is_suspect());
        assert_eq!(r.pending().suspect_at, None, "already suspect");
        // Three on-time beats: alive again at the third.
        assert_eq!(r.arrive(at(start, 14.0)), Verdicts::default());
        assert_eq!(r.arrive(at(start, 15.0)), Verdicts::default());
        assert_eq!(r.arrive(at(start, 16.0)).alive_again, Some(at(start, 16.0)));
        assert!(!r.is_suspect());
        // A beat exactly at the deadline (after a suspicion) is in time.
        let v = r.arrive(at(start, 20.0));
        assert_eq!(v.suspected, Some(at(start, 18.0)));
        assert_eq!(v.expelled, None);
        // Still suspect (a late beat does not count towards recovery); 5 s of silence:
        // expelled at 24, rejoined at 25.
        let v = r.arrive(at(start, 25.0));
        assert_eq!(
            v,
            Verdicts {
                suspected: None,
                expelled: Some(at(start, 24.0)),
                alive_again: Some(at(start, 25.0)),
            }
        );
        assert!(!r.is_expelled() && !r.is_suspect(), "a new member");
        // Silence from here: pending verdicts, then the timers fire.
        assert_eq!(
            r.pending(),
            Pending {
                suspect_at: Some(at(start, 27.0)),
                expel_at: Some(at(start, 29.0)),
            }
        );
        assert_eq!(
            r.advance(at(start, 27.0)),
            Verdicts::default(),
            "not before"
        );
        let v = r.advance(at(start, 40.0));
        assert_eq!(v.suspected, Some(at(start, 27.0)));
        assert_eq!(v.expelled, Some(at(start, 29.0)));
        assert!(r.is_expelled());
        assert_eq!(r.thresholds(), None);
    }

    /// The adaptive detector, replayed: a young member is judged by the session
    /// timeout, a calm one (in a group, of itself alone, that has shown enough calm)
    /// by its own gaps, always within the session.
    #[test]
    fn adaptive_follows_the_members_gaps_within_its_session() {
        let start = crate::core::tests::start_instant();
        let session = Duration::from_secs(10);
        let settings = DetectorSettings {
            clean_gaps: 100,
            ..DetectorSettings::default()
        };
        let mut r = Replay::new(DetectorKind::Adaptive, &settings, session);
        r.arrive(start);
        assert_eq!(r.thresholds(), Some(Thresholds::fixed(session)));
        for s in 1..=200 {
            let v = r.arrive(at(start, f64::from(s)));
            assert_eq!(v, Verdicts::default(), "a calm member at {s} s");
        }
        let t = r.thresholds().expect("heard");
        assert!(t.expel_after < Duration::from_secs(2), "{t:?}");
        assert!(t.expel_after >= DetectorSettings::default().floor);
        // Replays are deterministic: the same arrivals, the same verdicts.
        let mut again = Replay::new(DetectorKind::Adaptive, &settings, session);
        for s in 0..=200 {
            again.arrive(at(start, f64::from(s)));
        }
        assert_eq!(again.pending(), r.pending());
    }
}
