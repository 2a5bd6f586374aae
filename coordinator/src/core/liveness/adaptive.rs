//! The adaptive detector: thresholds that follow the member's own heartbeat gaps.
//!
//! A member is expelled after a silence of
//!
//! ```text
//! clamp(max(mean + z·sd, headroom · longest), floor, session)
//! ```
//!
//! where `mean` and `sd` follow the last few dozen gaps (the spread at least a tenth of
//! the mean), `z` is where the suspicion level φ of a normal fit reaches its threshold,
//! and `longest` is the longest gap of the last 512 to 1,024. The two terms answer the
//! two ways plain φ accrual goes wrong:
//!
//! - **Heavy tails.** Real gaps have heavier tails than a normal fit, and a pause that
//!   happens once a few minutes is far too rare for the fit to learn but certain to come
//!   back. The longest gap is remembered for hundreds of beats, long after the mean and
//!   spread have forgotten it, so a member that paused once keeps that much slack until
//!   it has been calm for a long while.
//! - **No history.** A member with fewer than `min_history` gaps (a young member, or
//!   one whose arrivals were reset) is judged by the fixed rule (with its bound on
//!   suspicion, `Thresholds::fixed_for`), since a fit from a
//!   handful of gaps is a guess; the floor bounds how eager the detector can ever get,
//!   and the session timeout bounds how patient.
//!
//! A member becomes suspect where φ reaches its suspicion level (never after its
//! expulsion threshold, never before half the floor).

use std::time::Duration;

use super::arrivals::sigmas_for_phi;
use super::{Arrivals, Detector, DetectorKind, DetectorSettings, Thresholds};

/// Thresholds from the member's recent gaps; see the module documentation.
#[derive(Debug, Clone)]
pub struct Adaptive {
    expel_sigmas: f64,
    suspect_sigmas: f64,
    min_history: u32,
    floor: Duration,
    tail_headroom: f64,
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
        }
    }
}

impl Detector for Adaptive {
    fn kind(&self) -> DetectorKind {
        DetectorKind::Adaptive
    }

    fn thresholds(&self, arrivals: &Arrivals, session: Duration) -> Thresholds {
        if arrivals.learned() < self.min_history.max(2) {
            return Thresholds::fixed_for(arrivals, session);
        }
        let mean = arrivals.mean().as_secs_f64();
        let sd = arrivals.std_dev().as_secs_f64().max(mean / 10.0);
        let tail = arrivals.longest().as_secs_f64() * self.tail_headroom;
        let floor = self.floor.min(session);
        let expel = secs((mean + self.expel_sigmas * sd).max(tail)).clamp(floor, session);
        let suspect = secs(mean + self.suspect_sigmas * sd).clamp(floor / 2, expel);
        Thresholds {
            suspect_after: suspect,
            expel_after: expel,
        }
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn learned(gaps: impl IntoIterator<Item = u64>) -> Arrivals {
        let mut a = Arrivals::default();
        for g in gaps {
            a.learn(Duration::from_millis(g));
        }
        a
    }

    #[test]
    fn a_young_member_is_judged_by_the_fixed_rule() {
        let d = Adaptive::new(&DetectorSettings::default());
        let session = Duration::from_secs(10);
        let a = learned([1000; 10]);
        assert_eq!(d.thresholds(&a, session), Thresholds::fixed(session));
    }

    #[test]
    fn calm_beats_give_short_thresholds_within_the_bounds() {
        let d = Adaptive::new(&DetectorSettings::default());
        let session = Duration::from_secs(10);
        let t = d.thresholds(&learned((0..200).map(|i| 980 + (i % 5) * 10)), session);
        assert!(t.expel_after < Duration::from_millis(1800), "{t:?}");
        assert!(t.expel_after > Duration::from_millis(1000), "{t:?}");
        assert!(t.suspect_after <= t.expel_after);
        assert!(t.suspect_after > Duration::from_millis(1000), "{t:?}");
        // Fast beats never push below the floor; slow ones never past the session.
        let fast = d.thresholds(&learned([10; 200]), session);
        assert_eq!(fast.expel_after, DetectorSettings::default().floor);
        let slow = d.thresholds(&learned([9000; 200]), session);
        assert_eq!(slow.expel_after, session);
    }

    #[test]
    fn a_pause_is_remembered_long_after_the_mean_forgot_it() {
        let d = Adaptive::new(&DetectorSettings::default());
        let session = Duration::from_secs(30);
        let gaps = (0..100)
            .map(|_| 1000)
            .chain([4000])
            .chain((0..300).map(|_| 1000));
        let t = d.thresholds(&learned(gaps), session);
        let headroom = DetectorSettings::default().tail_headroom;
        assert!(
            t.expel_after >= Duration::from_secs_f64(4.0 * headroom - 0.01),
            "{t:?}"
        );
        assert!(
            t.expel_after <= Duration::from_secs_f64(4.0 * headroom + 0.1),
            "{t:?}"
        );
    }
}
