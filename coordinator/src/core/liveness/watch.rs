//! One member's liveness: when it was last heard, its heartbeat arrivals, and its state
//! (alive → suspect → expelled, back to alive only after several on-time heartbeats).

use std::time::{Duration, Instant};

use rollcall_protocol::Liveness;

use super::super::ShadowVerdict;
use super::fleet::Pooled;
use super::{Arrivals, Detector, DetectorSettings, Fleet, Thresholds};

/// A change worth an event, found when a frame arrives or a timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Silent past its suspicion threshold: it keeps what it owns and is given nothing
    /// new until it is alive again.
    Suspected {
        /// How long it had been silent.
        silence: Duration,
    },
    /// Enough consecutive on-time heartbeats after being suspect.
    Recovered {
        /// How long it was suspect.
        suspect_for: Duration,
    },
}

/// What a heartbeat changed ([`Watch::beat`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Beat {
    /// The member became suspect (its timer had not fired yet) or alive again.
    pub change: Option<Transition>,
    /// What the shadow detector would have done about the silence the heartbeat ended
    /// (suspected or expelled a member that spoke again), and that silence.
    pub shadow: Option<(ShadowVerdict, Duration)>,
    /// The heartbeat was a surprise that ended the group's clean spell: every member
    /// must be judged again ([`Watch::rejudge`]).
    pub gate_closed: bool,
}

/// How a group judges its members: its detectors and their settings, and the group's
/// size (the fleet's windows follow it).
#[derive(Debug, Clone, Copy)]
pub struct Judge<'a> {
    pub detector: &'a dyn Detector,
    pub shadow: Option<&'a dyn Detector>,
    pub settings: &'a DetectorSettings,
    pub members: usize,
}

/// A member's liveness, as the coordinator judges it.
///
/// What a heartbeat reads and writes comes first and its arrivals next (their own hot
/// fields first), what changes only with the member's state last: a member lays its
/// watch out at the end of the fields a renewal touches (see `Member`).
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Watch {
    /// When a frame from the member last arrived, shifted by the guards when the
    /// coordinator itself was at fault.
    last_heard: Instant,
    /// Silence that ended with the latest frame.
    last_silence: Duration,
    thresholds: Thresholds,
    /// On-time heartbeats since the member became suspect.
    streak: u32,
    suspect: bool,
    /// The guards gave back part of the silence since the last frame (the coordinator
    /// was at fault): the gap the next heartbeat ends is no evidence for the group's
    /// fleet.
    excused: bool,
    /// The shadow detector's thresholds, when the group runs one (boxed: most groups
    /// run none, and it would take 32 bytes in every member).
    shadow: Option<Box<Thresholds>>,
    arrivals: Arrivals,
    /// When the state last changed (or the member was first heard).
    since: Instant,
}

impl Watch {
    /// Bytes from the start of a watch that a heartbeat touches: everything before the
    /// cold fields of its arrivals.
    #[cfg(test)]
    pub(crate) const RENEWAL_BYTES: usize =
        std::mem::offset_of!(Self, arrivals) + Arrivals::RENEWAL_BYTES;

    /// A member first heard at `now`, which asked for `session`, in a group that has
    /// shown `fleet`.
    pub fn new(
        now: Instant,
        session: Duration,
        detector: &dyn Detector,
        shadow: Option<&dyn Detector>,
        fleet: &Fleet,
    ) -> Self {
        let mut arrivals = Arrivals::default();
        Self {
            last_heard: now,
            last_silence: Duration::ZERO,
            thresholds: detector.thresholds(&mut arrivals, fleet, session),
            shadow: shadow.map(|s| Box::new(s.thresholds(&mut arrivals, fleet, session))),
            arrivals,
            suspect: false,
            excused: false,
            since: now,
            streak: 0,
        }
    }

    /// A frame from the member arrived at `now`.
    pub fn heard(&mut self, now: Instant) {
        if now > self.last_heard {
            self.last_silence = now - self.last_heard;
            self.last_heard = now;
        } else {
            self.last_silence = Duration::ZERO;
        }
    }

    /// The frame heard at `now` (after [`Self::heard`]) was a heartbeat with `sequence`
    /// from a member whose session timeout is `session` (the one it was watched with
    /// since [`Self::new`] or [`Self::reset`]): learns its gap, counts it on time or
    /// late, pools it in the group's `fleet` (a long gap or lost beats are a
    /// surprise), and judges the member again. Returns what changed: suspicion (a beat
    /// later than the threshold whose timer had not fired yet) or recovery, what the
    /// shadow detector would have done, and whether the group's clean spell ended.
    pub fn beat(
        &mut self,
        now: Instant,
        sequence: u64,
        session: Duration,
        judge: Judge<'_>,
        fleet: &mut Fleet,
    ) -> Beat {
        let recover_beats = judge.settings.recover_beats;
        let silence = self.last_silence;
        let mut out = Beat::default();
        if silence > self.thresholds.suspect_after {
            self.arrivals.count_late();
            self.streak = 0;
            if !self.suspect {
                // Its timer had not fired yet: suspect as of now, recovering from here.
                self.suspect = true;
                self.since = now;
                out.change = Some(Transition::Suspected { silence });
            }
        } else if self.suspect {
            self.streak += 1;
            if self.streak >= recover_beats {
                out.change = Some(Transition::Recovered {
                    suspect_for: now.saturating_duration_since(self.since),
                });
                self.suspect = false;
                self.since = now;
                self.streak = 0;
            }
        }
        if let Some(s) = self.shadow.as_deref() {
            if silence > s.expel_after {
                out.shadow = Some((ShadowVerdict::Expel, silence));
            } else if silence > s.suspect_after {
                out.shadow = Some((ShadowVerdict::Suspect, silence));
            }
        }
        let settings = judge.settings;
        let was_clean = fleet.clean() >= settings.clean_gaps;
        // The gap is judged against the rhythm the member had before it.
        let (mean, rhythm) = (self.arrivals.mean_secs(), self.arrivals.learned() > 0);
        let seen = self.arrivals.beat(now, sequence);
        if seen.lost > 0 {
            fleet.lost(now, seen.lost);
            self.arrivals.surprise();
        } else if let Some(gap) = seen.gap.filter(|_| rhythm && !self.excused) {
            let (gap, mean, floor) = (gap.as_secs_f64(), f64::from(mean), settings.floor);
            if fleet.learn_secs(now, gap, mean, floor.as_secs_f64(), judge.members)
                == Pooled::Exceedance
            {
                self.arrivals.surprise();
            }
        }
        self.excused = false;
        fleet.refresh(now, settings.tail_min_exceedances, settings.confidence);
        out.gate_closed = was_clean && fleet.clean() < settings.clean_gaps;
        self.rejudge(session, judge.detector, judge.shadow, fleet);
        out
    }

    /// Judges the member again with what its group's `fleet` shows now.
    pub fn rejudge(
        &mut self,
        session: Duration,
        detector: &dyn Detector,
        shadow: Option<&dyn Detector>,
        fleet: &Fleet,
    ) {
        self.thresholds = detector.thresholds(&mut self.arrivals, fleet, session);
        let shadow = shadow.map(|s| s.thresholds(&mut self.arrivals, fleet, session));
        self.set_shadow(shadow);
    }

    /// Judges the member at `now` (its timer fired): alive and silent past its
    /// suspicion threshold makes it suspect.
    pub fn check(&mut self, now: Instant) -> Option<Transition> {
        let silence = now.saturating_duration_since(self.last_heard);
        // At the instant itself: the timer was set for it.
        if !self.suspect && silence >= self.thresholds.suspect_after {
            self.suspect = true;
            self.since = now;
            self.streak = 0;
            return Some(Transition::Suspected { silence });
        }
        None
    }

    /// Makes the member suspect as of `now` (restored as it was before a restart): only
    /// on-time heartbeats bring it back.
    pub fn suspect_from(&mut self, now: Instant) {
        self.suspect = true;
        self.since = now;
        self.streak = 0;
    }

    /// A field from each cache line of the watch a heartbeat touches, for
    /// `Member::touch`.
    pub fn touch(&self) -> (Instant, Duration, u32) {
        (
            self.last_heard,
            self.thresholds.suspect_after,
            self.arrivals.learned(),
        )
    }

    /// When the member is expelled if nothing more is heard.
    pub fn deadline(&self) -> Instant {
        self.last_heard + self.thresholds.expel_after
    }

    /// When the member becomes suspect if nothing more is heard (none while suspect).
    pub fn suspect_at(&self) -> Option<Instant> {
        (!self.suspect).then(|| self.last_heard + self.thresholds.suspect_after)
    }

    /// Whether the member is suspect at `now`.
    pub fn is_suspect(&self, now: Instant) -> bool {
        self.suspect
            || now.saturating_duration_since(self.last_heard) > self.thresholds.suspect_after
    }

    /// How the member looks at `now`.
    pub fn liveness(&self, now: Instant) -> Liveness {
        if self.is_suspect(now) {
            Liveness::Suspect
        } else {
            Liveness::Alive
        }
    }

    /// Since when the member has been in its state.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// Shifts the last-heard time by `by` (the coordinator itself was at fault): the
    /// gap the next heartbeat ends is not pooled in the group's fleet.
    pub fn extend(&mut self, by: Duration) {
        self.last_heard += by;
        self.excused |= !by.is_zero();
    }

    /// The coordinator was paused: the gap that spans the pause is not the member's.
    pub fn pause_passed(&mut self, by: Duration) {
        self.extend(by);
        self.arrivals.skip_next();
    }

    /// When the member was last heard from (as shifted by the guards).
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }

    /// The member asked for a new session timeout or heartbeat rhythm (a rejoin): its
    /// old gaps no longer describe it, so it starts over as a young member.
    pub fn reset(
        &mut self,
        session: Duration,
        detector: &dyn Detector,
        shadow: Option<&dyn Detector>,
        fleet: &Fleet,
    ) {
        self.arrivals = Arrivals::default();
        self.rejudge(session, detector, shadow, fleet);
    }

    /// Sets the shadow thresholds, in the box the member already has if any.
    fn set_shadow(&mut self, thresholds: Option<Thresholds>) {
        match (self.shadow.as_deref_mut(), thresholds) {
            (Some(old), Some(new)) => *old = new,
            (_, new) => self.shadow = new.map(Box::new),
        }
    }

    /// The thresholds in force.
    pub fn thresholds(&self) -> Thresholds {
        self.thresholds
    }

    /// The shadow detector's thresholds, if the group runs one.
    pub fn shadow_thresholds(&self) -> Option<Thresholds> {
        self.shadow.as_deref().copied()
    }

    /// The member's heartbeat arrivals.
    pub fn arrivals(&self) -> &Arrivals {
        &self.arrivals
    }
}
