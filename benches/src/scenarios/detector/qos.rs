//! The quality of service of a detector setting on a trace (Chen, Toueg and Aguilera's
//! measures): the coordinator's verdicts on the measured member (member 0) tallied
//! ([`Tally`]), and false expulsions counted over every member of the group.
//!
//! - **False suspicion**: the member became suspect before the crash.
//! - **False expulsion**: a member was expelled while alive (member 0 before its crash;
//!   the others at any time); *early* when the silence it was expelled for ended with a
//!   heartbeat within the session timeout, so that the fixed rule at that session
//!   would not have expelled it.
//! - **Detection time**: from the crash to the expulsion that followed it (0 when the
//!   member was already expelled, falsely, and not heard again).
//! - **Mistake duration**: time before the crash during which "is it alive?" was
//!   answered no (suspect, or expelled and not yet rejoined).
//! - **Query accuracy probability**: the fraction of the time from the first arrival to
//!   the crash (to the last arrival, without a crash) when that answer was right.

use std::time::{Duration, Instant};

use rollcall_coordinator::core::liveness::{Pending, Verdicts};
use rollcall_coordinator::core::{DetectorKind, DetectorSettings};
use serde::Serialize;

/// One detector setting of the sweep.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Setting {
    #[serde(serialize_with = "kind_name")]
    pub(crate) detector: DetectorKind,
    /// The session timeout: the fixed timeout itself, or the adaptive detector's bound.
    pub(crate) session_s: f64,
    /// Adaptive: the φ threshold.
    pub(crate) phi: Option<f64>,
    /// Adaptive: the floor, seconds.
    pub(crate) floor_s: Option<f64>,
    /// Whether these are the coordinator's default settings of the detector.
    pub(crate) default: bool,
}

fn kind_name<S: serde::Serializer>(k: &DetectorKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.as_str())
}

impl Setting {
    pub(crate) fn fixed(timeout: f64) -> Self {
        Self {
            detector: DetectorKind::Fixed,
            session_s: timeout,
            phi: None,
            floor_s: None,
            default: false,
        }
    }

    pub(crate) fn adaptive(session: f64, phi: f64, floor: f64) -> Self {
        let d = DetectorSettings::default();
        Self {
            detector: DetectorKind::Adaptive,
            session_s: session,
            phi: Some(phi),
            floor_s: Some(floor),
            default: phi == d.phi_threshold && floor == d.floor.as_secs_f64(),
        }
    }

    /// The coordinator's settings with this setting's values.
    pub(crate) fn settings(&self) -> DetectorSettings {
        let mut s = DetectorSettings::default();
        if let Some(phi) = self.phi {
            s.phi_threshold = phi;
        }
        if let Some(floor) = self.floor_s {
            s.floor = Duration::from_secs_f64(floor);
        }
        s
    }

    /// How the setting is named in tables and charts.
    pub(crate) fn label(&self) -> String {
        match self.detector {
            DetectorKind::Fixed => format!("{} s", num(self.session_s)),
            DetectorKind::Adaptive => format!(
                "φ {}, floor {} s",
                num(self.phi.unwrap_or_default()),
                num(self.floor_s.unwrap_or_default())
            ),
        }
    }

    /// The curve the setting belongs to in the chart.
    pub(crate) fn series(&self) -> String {
        match self.detector {
            DetectorKind::Fixed => "fixed".to_owned(),
            DetectorKind::Adaptive => format!(
                "adaptive, floor {} s",
                num(self.floor_s.unwrap_or_default())
            ),
        }
    }
}

/// A number without trailing zeros: `1.5`, `2`, `0.25`.
pub(crate) fn num(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A stretch of the timeline where the member was not taken for alive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Band {
    pub(crate) from: f64,
    /// `f64::INFINITY`: to the end of the chart.
    pub(crate) to: f64,
    pub(crate) expelled: bool,
}

/// What a run of one setting found: member 0's measures, and the group's false
/// expulsions.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunQos {
    pub(crate) false_suspicions: u64,
    /// Member 0's.
    pub(crate) false_expulsions: u64,
    /// Every member's.
    pub(crate) group_false_expulsions: u64,
    /// Every member's that the fixed rule at the session timeout would not have made.
    pub(crate) early: u64,
    /// Seconds wrongly taken for not alive.
    pub(crate) mistake_s: f64,
    /// Seconds observed: from the first arrival to the crash (or the last arrival).
    pub(crate) observed_s: f64,
    /// From the crash to the expulsion; `None` without a crash or an arrival.
    pub(crate) detection_s: Option<f64>,
    /// From the crash to the suspicion.
    pub(crate) suspicion_s: Option<f64>,
}

#[cfg(test)]
impl RunQos {
    /// The query accuracy probability.
    pub(crate) fn accuracy(&self) -> f64 {
        if self.observed_s > 0.0 {
            1.0 - self.mistake_s / self.observed_s
        } else {
            1.0
        }
    }
}

/// Member 0's verdicts over one run of one setting, arrival by arrival.
#[derive(Debug)]
pub(crate) struct Tally {
    epoch: Instant,
    crash: Option<Instant>,
    first: Option<Instant>,
    last: Option<Instant>,
    /// Since when the member has not been taken for alive.
    down_since: Option<Instant>,
    /// When it was expelled, if it has not been heard since.
    expelled_at: Option<Instant>,
    qos: RunQos,
    /// The suspicion and expulsion bands, when a timeline is recorded: the window and
    /// how many bands at most.
    timeline: Option<(f64, f64, usize)>,
    pub(crate) bands: Vec<Band>,
}

impl Tally {
    /// A member on a trace whose times count from `epoch`, its process dying at `crash`
    /// seconds. With `timeline` (from, to, most bands), the bands that fall in that
    /// window are kept.
    pub(crate) fn new(
        epoch: Instant,
        crash: Option<f64>,
        timeline: Option<(f64, f64, usize)>,
    ) -> Self {
        Self {
            epoch,
            crash: crash.map(|c| epoch + Duration::from_secs_f64(c)),
            first: None,
            last: None,
            down_since: None,
            expelled_at: None,
            qos: RunQos::default(),
            timeline,
            bands: Vec::new(),
        }
    }

    /// A heartbeat of the member arrived at `at` (on the trace's clock, counted from the
    /// epoch); its verdicts are observed after.
    pub(crate) fn arrived(&mut self, at: Instant) {
        self.first.get_or_insert(at);
        self.last = Some(at);
    }

    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64()
    }

    fn before_crash(&self, t: Instant) -> bool {
        !matches!(self.crash, Some(c) if t >= c)
    }

    /// Time in `[from, to)` that falls in the observed window, seconds.
    fn observed_part(&self, from: Instant, to: Option<Instant>) -> f64 {
        let end = match (to, self.crash) {
            (Some(t), Some(c)) => t.min(c),
            (Some(t), None) => t,
            (None, Some(c)) => c,
            (None, None) => self.last.unwrap_or(from),
        };
        let start = self.first.map_or(from, |f| from.max(f));
        end.saturating_duration_since(start).as_secs_f64()
    }

    fn band(&mut self, from: Instant, to: Option<Instant>, expelled: bool) {
        let Some((lo, hi, most)) = self.timeline else {
            return;
        };
        let from = self.secs(from);
        let to = to.map_or(f64::INFINITY, |t| self.secs(t));
        if to >= lo && from <= hi && self.bands.len() < most {
            self.bands.push(Band { from, to, expelled });
        }
    }

    /// The coordinator's verdicts on the member, in the order reached.
    pub(crate) fn observe(&mut self, v: Verdicts) {
        if let Some(s) = v.suspected {
            if self.before_crash(s) {
                self.qos.false_suspicions += 1;
            }
            self.down_since.get_or_insert(s);
        }
        if let Some(e) = v.expelled {
            if self.before_crash(e) {
                self.qos.false_expulsions += 1;
            }
            let since = *self.down_since.get_or_insert(e);
            self.band(since, Some(e), false);
            self.expelled_at = Some(e);
        }
        if let Some(a) = v.alive_again {
            if let Some(since) = self.down_since.take() {
                self.qos.mistake_s += self.observed_part(since, Some(a));
                match self.expelled_at.take() {
                    Some(e) => self.band(e, Some(a), true),
                    None => self.band(since, Some(a), false),
                }
            }
        }
    }

    /// The trace is over, and the member would be judged as `pending` says if nothing
    /// more were heard: what the run found.
    pub(crate) fn finish(mut self, pending: Pending) -> (RunQos, Vec<Band>) {
        if let Some(first) = self.first {
            let end = self.crash.or(self.last).unwrap_or(first);
            self.qos.observed_s = end.saturating_duration_since(first).as_secs_f64();
            if let Some(since) = self.down_since {
                self.qos.mistake_s += self.observed_part(since, None);
            }
            let suspected = self.down_since.or(pending.suspect_at);
            let expelled = self.expelled_at.or(pending.expel_at);
            // The bands still open at the end.
            match (self.down_since, self.expelled_at) {
                (Some(since), None) => self.band(since, pending.expel_at, false),
                (_, Some(e)) => self.band(e, None, true),
                (None, None) => {
                    if let Some(s) = pending.suspect_at {
                        self.band(s, pending.expel_at, false);
                    }
                }
            }
            if let Some(e) = pending.expel_at {
                self.band(e, None, true);
            }
            if let Some(c) = self.crash {
                let after = |t: Instant| t.saturating_duration_since(c).as_secs_f64();
                self.qos.detection_s = expelled.map(after);
                self.qos.suspicion_s = suspected.map(after);
            }
        }
        (self.qos, self.bands)
    }
}

/// How member 0's process dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum CrashKind {
    /// The process dies: its connection closes (the kernel closes its sockets) a moment
    /// later, and the coordinator expels it when its lease runs out.
    Process,
    /// The host or the network goes: nothing closes, only silence tells.
    Silent,
}

impl CrashKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Process => "process",
            Self::Silent => "silent",
        }
    }
}

/// One setting over every run, for one kind of crash.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SettingQos {
    #[serde(flatten)]
    pub(crate) setting: Setting,
    pub(crate) crash: CrashKind,
    pub(crate) label: String,
    pub(crate) runs: usize,
    /// Totals over the runs: member 0's false suspicions; every member's false
    /// expulsions, and of them those the fixed rule at the session would not have
    /// made; member 0's false expulsions.
    pub(crate) false_suspicions: u64,
    pub(crate) false_expulsions: u64,
    pub(crate) early: u64,
    pub(crate) member_false_expulsions: u64,
    /// Runs in which member 0 was falsely expelled.
    pub(crate) runs_with_false_expulsion: usize,
    /// Detection time over the runs with a crash, seconds.
    pub(crate) detection_mean_s: Option<f64>,
    pub(crate) detection_median_s: Option<f64>,
    pub(crate) detection_max_s: Option<f64>,
    pub(crate) suspicion_mean_s: Option<f64>,
    /// Mistake duration per run, mean, seconds.
    pub(crate) mistake_per_run_s: f64,
    /// False suspicions per hour observed.
    pub(crate) mistake_rate_per_h: f64,
    /// Mean length of a mistake (total mistake time / false suspicions), seconds.
    pub(crate) mistake_mean_s: Option<f64>,
    /// Query accuracy probability over all the time observed.
    pub(crate) query_accuracy: f64,
    pub(crate) detection_by_run_s: Vec<Option<f64>>,
}

impl SettingQos {
    pub(crate) fn of(setting: &Setting, crash: CrashKind, runs: &[RunQos]) -> Self {
        let detections: Vec<f64> = runs.iter().filter_map(|r| r.detection_s).collect();
        let suspicions: Vec<f64> = runs.iter().filter_map(|r| r.suspicion_s).collect();
        let false_suspicions = runs.iter().map(|r| r.false_suspicions).sum();
        let mistake: f64 = runs.iter().map(|r| r.mistake_s).sum();
        let observed: f64 = runs.iter().map(|r| r.observed_s).sum();
        Self {
            setting: setting.clone(),
            crash,
            label: setting.label(),
            runs: runs.len(),
            false_suspicions,
            false_expulsions: runs.iter().map(|r| r.group_false_expulsions).sum(),
            early: runs.iter().map(|r| r.early).sum(),
            member_false_expulsions: runs.iter().map(|r| r.false_expulsions).sum(),
            runs_with_false_expulsion: runs.iter().filter(|r| r.false_expulsions > 0).count(),
            detection_mean_s: mean(&detections),
            detection_median_s: crate::stats::median(&mut detections.clone()),
            detection_max_s: detections.iter().copied().reduce(f64::max),
            suspicion_mean_s: mean(&suspicions),
            mistake_per_run_s: mistake / runs.len().max(1) as f64,
            mistake_rate_per_h: if observed > 0.0 {
                false_suspicions as f64 / (observed / 3600.0)
            } else {
                0.0
            },
            mistake_mean_s: (false_suspicions > 0).then(|| mistake / false_suspicions as f64),
            query_accuracy: if observed > 0.0 {
                1.0 - mistake / observed
            } else {
                1.0
            },
            detection_by_run_s: runs.iter().map(|r| r.detection_s).collect(),
        }
    }

    /// False expulsions per run.
    pub(crate) fn false_expulsions_per_run(&self) -> f64 {
        self.false_expulsions as f64 / self.runs.max(1) as f64
    }
}

pub(crate) fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays `arrivals` (seconds) with a fixed timeout, through the one-member
    /// replay.
    fn run(timeout: f64, arrivals: &[f64], crash: Option<f64>) -> RunQos {
        use rollcall_coordinator::core::liveness::Replay;
        let epoch = Instant::now();
        let s = Setting::fixed(timeout);
        let mut r = Replay::new(
            s.detector,
            &s.settings(),
            Duration::from_secs_f64(s.session_s),
        );
        let mut t = Tally::new(epoch, crash, None);
        for &a in arrivals {
            let at = epoch + Duration::from_secs_f64(a);
            t.arrived(at);
            t.observe(r.arrive(at));
        }
        if let Some(c) = crash {
            t.observe(r.advance(epoch + Duration::from_secs_f64(c)));
        }
        t.finish(r.pending()).0
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// A tiny trace worked by hand. A fixed 4 s timeout: suspect after 2 s of silence,
    /// expelled after 4 s; alive again after three on-time beats (each within 2 s of
    /// the one before); an expelled member rejoins at its next beat.
    ///
    /// Arrivals 0 1 2 5 6 7 8 14 15, crash at 16:
    /// - gap 2 → 5: suspect at 4; beats 6, 7, 8 on time, alive again at 8: 4 s wrong.
    /// - gap 8 → 14: suspect at 10, expelled at 12, rejoins at 14: 4 s wrong.
    /// - after 15: suspect at 17, expelled at 19, both after the crash: detection 3 s,
    ///   suspicion 1 s.
    ///
    /// Observed 0 → 16: 16 s, 8 s of them wrong: accuracy 0.5.
    #[test]
    fn qos_of_a_hand_made_trace() {
        let arrivals = [0.0, 1.0, 2.0, 5.0, 6.0, 7.0, 8.0, 14.0, 15.0];
        let q = run(4.0, &arrivals, Some(16.0));
        assert_eq!(q.false_suspicions, 2, "{q:?}");
        assert_eq!(q.false_expulsions, 1, "{q:?}");
        assert!(close(q.mistake_s, 8.0), "{q:?}");
        assert!(close(q.observed_s, 16.0), "{q:?}");
        assert!(close(q.accuracy(), 0.5), "{q:?}");
        assert!(close(q.detection_s.unwrap(), 3.0), "{q:?}");
        assert!(close(q.suspicion_s.unwrap(), 1.0), "{q:?}");

        // A 6 s timeout (suspect after 3 s): the 3 s gap is in time; the 6 s gap is a
        // suspicion at 11 with no expulsion (the beat at 14 is exactly at the deadline,
        // in time), then 15 is only one beat of three: still suspect at the crash.
        // Wrong from 11 to 16: 5 s. Expelled at 21: detection 5 s; suspect since 11:
        // suspicion "after the crash" 0.
        let q = run(6.0, &arrivals, Some(16.0));
        assert_eq!((q.false_suspicions, q.false_expulsions), (1, 0), "{q:?}");
        assert!(close(q.mistake_s, 5.0), "{q:?}");
        assert!(close(q.detection_s.unwrap(), 5.0), "{q:?}");
        assert!(close(q.suspicion_s.unwrap(), 0.0), "{q:?}");

        // The crash before the last silence runs out: with a timeout of 1.5 s (suspect
        // after 0.75 s) the member rejoined at 14, is suspect again at 14.75 and is
        // expelled at 16.5, 0.5 s after the crash.
        let q = run(1.5, &arrivals, Some(16.0));
        assert!(close(q.detection_s.unwrap(), 0.5), "{q:?}");

        // Without a crash: observed to the last arrival, no detection.
        let q = run(4.0, &arrivals, None);
        assert!(close(q.observed_s, 15.0), "{q:?}");
        assert!(close(q.mistake_s, 8.0), "{q:?}");
        assert_eq!(q.detection_s, None);
    }

    /// Expelled before the crash and never heard again: a false expulsion, detection 0,
    /// and wrong from the suspicion to the crash.
    #[test]
    fn expelled_before_the_crash() {
        let q = run(2.0, &[0.0, 1.0], Some(10.0));
        assert_eq!((q.false_suspicions, q.false_expulsions), (1, 1), "{q:?}");
        assert!(close(q.mistake_s, 8.0), "{q:?}");
        assert!(close(q.detection_s.unwrap(), 0.0), "{q:?}");
        assert!(close(q.accuracy(), 0.2), "{q:?}");
    }

    #[test]
    fn aggregates_over_runs() {
        let s = Setting::fixed(4.0);
        let runs = [
            RunQos {
                false_suspicions: 2,
                false_expulsions: 1,
                group_false_expulsions: 1,
                early: 0,
                mistake_s: 8.0,
                observed_s: 16.0,
                detection_s: Some(3.0),
                suspicion_s: Some(1.0),
            },
            RunQos {
                observed_s: 16.0,
                detection_s: Some(1.0),
                suspicion_s: Some(0.0),
                ..RunQos::default()
            },
        ];
        let a = SettingQos::of(&s, CrashKind::Silent, &runs);
        assert_eq!((a.false_suspicions, a.false_expulsions), (2, 1));
        assert_eq!(a.runs_with_false_expulsion, 1);
        assert_eq!(a.detection_mean_s, Some(2.0));
        assert_eq!(a.detection_median_s, Some(2.0));
        assert_eq!(a.detection_max_s, Some(3.0));
        assert!(close(a.query_accuracy, 0.75));
        assert!(close(a.mistake_rate_per_h, 2.0 / (32.0 / 3600.0)));
        assert_eq!(a.mistake_mean_s, Some(4.0));
        assert_eq!(a.label, "4 s");
    }
}
