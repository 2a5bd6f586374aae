//! The lab's options, the trace they name and the settings they sweep.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use rollcall_coordinator::core::DetectorKind;

use super::qos::{CrashKind, Setting};
use super::trace::{seconds, Param, Params, Preset, Source};

/// Which crashes of member 0 to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CrashKinds {
    /// Its process dies: the connection closes.
    Process,
    /// Its host or network goes: only silence.
    Silent,
    /// Each, in its own replay.
    Both,
}

/// Which settings to sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Sweep {
    /// The fixed rule at the session timeout and the adaptive detector's defaults: what
    /// the checks compare.
    Defaults,
    /// Every fixed timeout of --timeouts and every adaptive setting of --phi × --floor,
    /// with the fixed rule at the session timeout.
    Full,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct DetectorArgs {
    /// A trace file: arrival lines `t`, `t,member` or `t,member,seq` (seconds, in
    /// order), the coordinator's event lines (`closed,t,member`, `opened,t,member`,
    /// `pause,t,dur`, `lag,t,dur`, `silent,t,dur`), optionally a header line, `#`
    /// comments, and a `crash,<seconds>` line saying when the measured member's process
    /// died. Read streaming (any length).
    #[arg(long, value_name = "FILE", conflicts_with = "preset")]
    pub(crate) trace: Option<PathBuf>,
    /// A synthetic trace (default: seed002).
    #[arg(long, value_enum)]
    pub(crate) preset: Option<Preset>,
    /// With --trace of a group (`time,member[,seq]` lines, as `rollcall trace GROUP`
    /// writes them): the member whose crash is measured (default: the first in the
    /// file). Every member of the file is replayed.
    #[arg(long, requires = "trace")]
    pub(crate) member: Option<String>,
    /// Members of a synthetic group, each with its own trace (seed × the preset's
    /// multiplier + member), all judged by one coordinator (default 20). Member 0 dies;
    /// the others beat on until two session timeouts after.
    #[arg(long, conflicts_with = "trace")]
    pub(crate) members: Option<usize>,
    /// How member 0 dies: its process (the connection closes --close-delay later, and
    /// the lease expels it), silently (host or network gone), or both, each in its own
    /// replay.
    #[arg(long, value_enum, default_value = "both")]
    pub(crate) crash_kind: CrashKinds,
    /// A process crash: how long after the crash its connection closes.
    #[arg(long, value_parser = seconds, default_value = "0.001")]
    pub(crate) close_delay: f64,
    /// The members' lease timeout (default: 3 heartbeat intervals and 250 ms, the
    /// client's default, at most the session timeout).
    #[arg(long, value_parser = seconds)]
    pub(crate) lease: Option<f64>,
    /// Ablation: replay without sequence numbers (each member's beats numbered 1, 2,
    /// 3…: losses look like lateness).
    #[arg(long)]
    pub(crate) no_seq: bool,
    /// Ablation: replay without connections (nothing closes: a process crash is silent).
    #[arg(long)]
    pub(crate) no_conn: bool,
    /// Settings swept: `defaults` (the fixed rule at the session timeout, the adaptive
    /// defaults) or `full`.
    #[arg(long, value_enum, default_value = "full")]
    pub(crate) sweep: Sweep,
    /// With --trace: when the process died, seconds (instead of the file's crash line).
    #[arg(long, value_parser = seconds, requires = "trace")]
    pub(crate) crash: Option<f64>,
    /// Seed of the first run; run i uses seed + i.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Runs of a synthetic trace, each with its own seed, averaged (default 20; a file
    /// is one run).
    #[arg(long)]
    pub(crate) runs: Option<usize>,
    /// Heartbeat interval (all presets; 1 s).
    #[arg(long, value_parser = seconds)]
    pub(crate) interval: Option<f64>,
    /// Length of the trace; the process dies at its end (seed002 100 s, noisy-then-calm
    /// 1800 s, others 3600 s).
    #[arg(long, value_parser = seconds)]
    pub(crate) duration: Option<f64>,
    /// Network jitter: seed002 ±0.1 s; noisy-then-calm's noisy delay 2.5 s; others a
    /// delay of up to 0.05 s.
    #[arg(long, value_parser = seconds)]
    pub(crate) jitter: Option<f64>,
    /// seed002: the pause (3.5 s); heavy-tail: the pauses' scale (0.5 s).
    #[arg(long, value_parser = seconds)]
    pub(crate) pause: Option<f64>,
    /// seed002: when the pause starts (40 s).
    #[arg(long, value_parser = seconds)]
    pub(crate) pause_at: Option<f64>,
    /// noisy-then-calm: delay of up to this once calm (0.05 s).
    #[arg(long, value_parser = seconds)]
    pub(crate) calm_jitter: Option<f64>,
    /// noisy-then-calm: how long the network is noisy (600 s).
    #[arg(long, value_parser = seconds)]
    pub(crate) noisy_for: Option<f64>,
    /// heavy-tail: chance of a pause before a beat (0.005).
    #[arg(long)]
    pub(crate) pause_rate: Option<f64>,
    /// heavy-tail: shape of the pauses' Pareto law (1.5; lower is heavier).
    #[arg(long)]
    pub(crate) tail_shape: Option<f64>,
    /// heavy-tail: the longest pause (60 s).
    #[arg(long, value_parser = seconds)]
    pub(crate) pause_cap: Option<f64>,
    /// burst-loss: chance that a run of lost beats starts at a beat (0.01).
    #[arg(long)]
    pub(crate) loss: Option<f64>,
    /// burst-loss: mean length of a run of lost beats, in beats (3).
    #[arg(long)]
    pub(crate) burst: Option<f64>,
    /// drift: how far the interval drifts, as a fraction of it (0.5).
    #[arg(long)]
    pub(crate) drift: Option<f64>,
    /// drift: the period of the drift (1800 s).
    #[arg(long, value_parser = seconds)]
    pub(crate) period: Option<f64>,
    /// Fixed detector: the session timeouts swept (default 1.5 s to 6 s by 0.5 s).
    #[arg(long, value_parser = seconds, value_delimiter = ',')]
    pub(crate) timeouts: Option<Vec<f64>>,
    /// Adaptive detector: the φ thresholds swept.
    #[arg(long, value_parser = super::trace::number, value_delimiter = ',', default_value = "2,4,8,16")]
    pub(crate) phi: Vec<f64>,
    /// Adaptive detector: the expulsion budgets per gap in the tail regime swept
    /// (default: the coordinator's).
    #[arg(long, value_parser = super::trace::number, value_delimiter = ',')]
    pub(crate) expel_epsilon: Vec<f64>,
    /// Adaptive detector: the pooled calm gaps that open the clean regime, swept
    /// (default: the coordinator's).
    #[arg(long, value_delimiter = ',')]
    pub(crate) clean_gaps: Vec<u64>,
    /// Adaptive detector: the floors swept.
    #[arg(long, value_parser = seconds, value_delimiter = ',', default_value = "0.5,1,2")]
    pub(crate) floor: Vec<f64>,
    /// The session timeout: the adaptive detector's bound, and a fixed timeout always
    /// swept (default 10 s; noisy-then-calm 30 s).
    #[arg(long, value_parser = seconds)]
    pub(crate) session: Option<f64>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Write the trade-off chart (SVG): detection time against false expulsions and
    /// against false suspicions per hour, one curve per detector.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
    /// Write a timeline (SVG) of the first run: arrivals, and each setting's suspicion
    /// and expulsion over time.
    #[arg(long, value_name = "FILE")]
    pub(crate) timeline_svg: Option<PathBuf>,
    /// Timeline start, seconds (default 0).
    #[arg(long, value_parser = seconds)]
    pub(crate) timeline_from: Option<f64>,
    /// Timeline end, seconds (default: the crash plus the longest session timeout).
    #[arg(long, value_parser = seconds)]
    pub(crate) timeline_to: Option<f64>,
    /// Stop with an error after this long.
    #[arg(long, value_parser = crate::common::duration, default_value = "1h")]
    pub(crate) time_limit: Duration,
    /// No progress lines on stderr.
    #[arg(long)]
    pub(crate) quiet: bool,
    #[command(flatten)]
    pub(crate) advise: Box<super::advise::AdviseArgs>,
}

impl DetectorArgs {
    /// The longest the lab may take.
    pub(crate) fn hard_cap(&self) -> Duration {
        self.time_limit + Duration::from_secs(30)
    }

    pub(super) fn overrides(&self) -> Vec<(Param, f64)> {
        let all = [
            (Param::Interval, self.interval),
            (Param::Duration, self.duration),
            (Param::Jitter, self.jitter),
            (Param::Pause, self.pause),
            (Param::PauseAt, self.pause_at),
            (Param::CalmJitter, self.calm_jitter),
            (Param::NoisyFor, self.noisy_for),
            (Param::PauseRate, self.pause_rate),
            (Param::TailShape, self.tail_shape),
            (Param::PauseCap, self.pause_cap),
            (Param::Loss, self.loss),
            (Param::Burst, self.burst),
            (Param::Drift, self.drift),
            (Param::Period, self.period),
        ];
        all.into_iter()
            .filter_map(|(p, v)| v.map(|v| (p, v)))
            .collect()
    }

    pub(super) fn source(&self) -> Result<Source, String> {
        let overrides = self.overrides();
        match &self.trace {
            Some(path) => {
                if let Some((p, _)) = overrides.first() {
                    return Err(format!(
                        "{} shapes a synthetic trace; it does not apply to --trace",
                        p.option()
                    ));
                }
                if self.runs.is_some_and(|r| r != 1) {
                    return Err("a trace file is one run: --runs does not apply".into());
                }
                Ok(Source::Csv(path.clone()))
            }
            None => Ok(Source::Synthetic(Params::new(
                self.preset.unwrap_or(Preset::Seed002),
                &overrides,
            )?)),
        }
    }

    /// The crash kinds replayed.
    pub(super) fn crash_kinds(&self) -> Vec<CrashKind> {
        match self.crash_kind {
            CrashKinds::Process => vec![CrashKind::Process],
            CrashKinds::Silent => vec![CrashKind::Silent],
            CrashKinds::Both => vec![CrashKind::Process, CrashKind::Silent],
        }
    }

    /// Every detector the coordinator has, each over its sweep; the fixed rule at
    /// `session` always.
    pub(super) fn sweep(&self, session: f64) -> Result<Vec<Setting>, String> {
        let timeouts = match self.sweep {
            Sweep::Full => self
                .timeouts
                .clone()
                .unwrap_or_else(|| (3..=12).map(|i| f64::from(i) * 0.5).collect()),
            Sweep::Defaults => Vec::new(),
        };
        if timeouts.iter().any(|&t| t <= 0.0) || self.floor.iter().any(|&f| f <= 0.0) {
            return Err("timeouts and floors must be above zero".into());
        }
        if self.phi.iter().any(|&p| p <= 0.0) {
            return Err("φ thresholds must be above zero".into());
        }
        if session <= 0.0 {
            return Err("--session must be above zero".into());
        }
        let d = rollcall_coordinator::core::DetectorSettings::default();
        let (phis, floors) = match self.sweep {
            Sweep::Full => (self.phi.clone(), self.floor.clone()),
            Sweep::Defaults => (vec![d.phi_threshold], vec![d.floor.as_secs_f64()]),
        };
        if self.expel_epsilon.iter().any(|&e| !(e > 0.0 && e < 1.0)) {
            return Err("--expel-epsilon is a chance per gap, above 0 and below 1".into());
        }
        let epsilons: Vec<Option<f64>> = if self.expel_epsilon.is_empty() {
            vec![None]
        } else {
            self.expel_epsilon.iter().copied().map(Some).collect()
        };
        let cleans: Vec<Option<u64>> = if self.clean_gaps.is_empty() {
            vec![None]
        } else {
            self.clean_gaps.iter().copied().map(Some).collect()
        };
        let mut out = Vec::new();
        for kind in DetectorKind::ALL {
            match kind {
                DetectorKind::Fixed => {
                    let mut all = timeouts.clone();
                    if !all.contains(&session) {
                        all.push(session);
                    }
                    all.sort_by(f64::total_cmp);
                    out.extend(all.into_iter().map(Setting::fixed));
                }
                DetectorKind::Adaptive => {
                    for &floor in &floors {
                        for &phi in &phis {
                            for &e in &epsilons {
                                for &c in &cleans {
                                    out.push(
                                        Setting::adaptive(session, phi, floor).with_model(e, c),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}
