//! `detector`: the detector lab. Replays heartbeat traces (a CSV file of arrival times,
//! or a synthetic preset) through the coordinator's own failure detectors
//! ([`Replay`](rollcall_coordinator::core::liveness::Replay): the core's `Watch` and
//! `Detector`, not a copy) over a sweep of their settings, and measures each setting's
//! quality of service: false suspicions and expulsions, detection time of the crash,
//! mistake duration and query accuracy (see [`qos`]). No coordinator is started: the
//! replay is the core's arithmetic alone, the guards and the network stack left out.
//!
//! A trace is streamed, never held: each run reads (or generates) its arrivals once and
//! feeds every setting as it goes, so memory does not grow with the trace. A file
//! without `--crash` is read once more beforehand to find its crash line.

mod qos;
mod svg;
mod trace;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use rollcall_coordinator::core::DetectorKind;
use serde::Serialize;

use self::qos::{num, Band, RunQos, Setting, SettingQos, Tally};
use self::trace::{seconds, CsvReader, Line, Param, Params, Preset, Source};
use crate::common::{command_line, Check, Machine, Report};
use crate::stats::{fmt_count, kv, table};

/// Arrivals kept for the timeline chart at most.
const TIMELINE_ARRIVALS: usize = 5_000;
/// Bands kept per setting for the timeline chart at most.
const TIMELINE_BANDS: usize = 2_000;
/// Arrivals between two looks at the clock (progress lines, time limit).
const CLOCK_EVERY: u64 = 1 << 14;

#[derive(Debug, Clone, Args)]
pub(crate) struct DetectorArgs {
    /// A trace file: one arrival time in seconds per line, in order; optionally a
    /// header line, `#` comments, and a `crash,<seconds>` line saying when the process
    /// died. Read streaming (any length).
    #[arg(long, value_name = "FILE", conflicts_with = "preset")]
    pub(crate) trace: Option<PathBuf>,
    /// A synthetic trace (default: seed002).
    #[arg(long, value_enum)]
    pub(crate) preset: Option<Preset>,
    /// With --trace of a group (`time,member` lines, as `rollcall trace GROUP` writes
    /// them): the member whose arrivals to replay (default: the first in the file).
    #[arg(long, requires = "trace")]
    pub(crate) member: Option<String>,
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
    #[arg(long, value_parser = trace::number, value_delimiter = ',', default_value = "2,4,8,16")]
    pub(crate) phi: Vec<f64>,
    /// Adaptive detector: the floors swept.
    #[arg(long, value_parser = seconds, value_delimiter = ',', default_value = "0.5,1,2")]
    pub(crate) floor: Vec<f64>,
    /// Adaptive detector: the session timeout bounding it, as in the coordinator
    /// (default 10 s; noisy-then-calm 30 s).
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
}

impl DetectorArgs {
    /// The longest the lab may take.
    pub(crate) fn hard_cap(&self) -> Duration {
        self.time_limit + Duration::from_secs(30)
    }

    fn overrides(&self) -> Vec<(Param, f64)> {
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

    fn source(&self) -> Result<Source, String> {
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

    /// Every detector the coordinator has, each over its sweep.
    fn sweep(&self, session: f64) -> Result<Vec<Setting>, String> {
        let timeouts = self
            .timeouts
            .clone()
            .unwrap_or_else(|| (3..=12).map(|i| f64::from(i) * 0.5).collect());
        if timeouts.iter().any(|&t| t <= 0.0) || self.floor.iter().any(|&f| f <= 0.0) {
            return Err("timeouts and floors must be above zero".into());
        }
        if self.phi.iter().any(|&p| p <= 0.0) {
            return Err("φ thresholds must be above zero".into());
        }
        if session <= 0.0 {
            return Err("--session must be above zero".into());
        }
        let mut out = Vec::new();
        for kind in DetectorKind::ALL {
            match kind {
                DetectorKind::Fixed => out.extend(timeouts.iter().map(|&t| Setting::fixed(t))),
                DetectorKind::Adaptive => {
                    for &floor in &self.floor {
                        for &phi in &self.phi {
                            out.push(Setting::adaptive(session, phi, floor));
                        }
                    }
                }
            }
        }
        if out.is_empty() {
            return Err("nothing to sweep".into());
        }
        Ok(out)
    }
}

/// Progress lines and the time limit.
#[derive(Debug)]
struct Clock {
    started: Instant,
    last_line: Instant,
    limit: Duration,
    quiet: bool,
}

impl Clock {
    fn new(limit: Duration, quiet: bool) -> Self {
        let now = Instant::now();
        Self {
            started: now,
            last_line: now,
            limit,
            quiet,
        }
    }

    /// Called every [`CLOCK_EVERY`] arrivals: a progress line once a second, an error
    /// past the time limit.
    fn tick(&mut self, what: &str, count: u64) -> Result<(), String> {
        let now = Instant::now();
        let elapsed = now.duration_since(self.started);
        if elapsed > self.limit {
            return Err(format!(
                "stopped after {} s (--time-limit) while {what}: {} arrivals",
                elapsed.as_secs(),
                fmt_count(count as f64)
            ));
        }
        if !self.quiet && now.duration_since(self.last_line) >= Duration::from_secs(1) {
            eprintln!(
                "[{:7.1}s] {what}: {} arrivals",
                elapsed.as_secs_f64(),
                fmt_count(count as f64)
            );
            self.last_line = now;
        }
        Ok(())
    }
}

/// The best fixed timeout of each run, found after the fact: just over the run's longest
/// gap (so no false expulsion), a timeout nobody could have chosen in advance.
#[derive(Debug, Clone, Default, Serialize)]
struct BestFixed {
    timeout_by_run_s: Vec<f64>,
    detection_by_run_s: Vec<f64>,
    detection_mean_s: Option<f64>,
    detection_median_s: Option<f64>,
}

/// The shortest swept fixed timeout without a false expulsion in any run.
#[derive(Debug, Clone, Serialize)]
struct BestSwept {
    timeout_s: f64,
    detection_median_s: Option<f64>,
    detection_mean_s: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Figures {
    /// `preset` or `file`.
    source: &'static str,
    trace: String,
    preset: Option<Params>,
    file: Option<String>,
    runs: usize,
    seeds: Vec<u64>,
    crash_s: Option<f64>,
    arrivals: u64,
    wall_s: f64,
    settings: Vec<SettingQos>,
    best_fixed_per_trace: Option<BestFixed>,
    best_swept_fixed: Option<BestSwept>,
}

/// The timeline of the first run.
#[derive(Debug, Default)]
struct Timeline {
    from: f64,
    to: f64,
    arrivals: Vec<f64>,
    rows: Vec<Vec<Band>>,
    truncated: bool,
}

/// What one run found: per setting, and its best fixed timeout.
struct RunResult {
    qos: Vec<RunQos>,
    best: Option<(f64, f64)>,
    arrivals: u64,
}

/// Replays one run: `arrivals` streamed once into every setting.
fn replay_run(
    settings: &[Setting],
    crash: Option<f64>,
    next: &mut dyn FnMut() -> Result<Option<f64>, String>,
    clock: &mut Clock,
    what: &str,
    mut timeline: Option<&mut Timeline>,
) -> Result<RunResult, String> {
    let epoch = Instant::now();
    let window = timeline.as_ref().map(|t| (t.from, t.to, TIMELINE_BANDS));
    let mut tallies: Vec<Tally> = settings
        .iter()
        .map(|s| Tally::new(s, epoch, crash, window))
        .collect();
    let mut count = 0u64;
    let mut last: Option<f64> = None;
    let mut longest = 0.0f64;
    // Bounded by the trace: a file's lines, or a generator's beats.
    while let Some(at) = next()? {
        if let Some(l) = last {
            longest = longest.max(at - l);
        }
        last = Some(at);
        let instant = epoch + Duration::from_secs_f64(at);
        for t in &mut tallies {
            t.arrive(instant);
        }
        if let Some(tl) = timeline.as_deref_mut() {
            if at >= tl.from && at <= tl.to {
                if tl.arrivals.len() < TIMELINE_ARRIVALS {
                    tl.arrivals.push(at);
                } else {
                    tl.truncated = true;
                }
            }
        }
        count += 1;
        if count.is_multiple_of(CLOCK_EVERY) {
            clock.tick(what, count)?;
        }
    }
    let mut qos = Vec::with_capacity(settings.len());
    for t in tallies {
        let (q, bands) = t.finish();
        if let Some(tl) = timeline.as_deref_mut() {
            if bands.len() >= TIMELINE_BANDS {
                tl.truncated = true;
            }
            tl.rows.push(bands);
        }
        qos.push(q);
    }
    let best = match (crash, last) {
        (Some(c), Some(l)) => {
            let timeout = longest + 0.001;
            Some((timeout, (l + timeout - c).max(0.0)))
        }
        _ => None,
    };
    Ok(RunResult {
        qos,
        best,
        arrivals: count,
    })
}

/// Reads a trace file once for its crash line and its arrival count.
fn scan(
    path: &std::path::Path,
    member: Option<String>,
    clock: &mut Clock,
) -> Result<(Option<f64>, u64), String> {
    let mut r = CsvReader::open(path)
        .map_err(|e| e.to_string())?
        .with_member(member);
    let (mut crash, mut count) = (None, 0u64);
    while let Some(line) = r.next_line().map_err(|e| e.to_string())? {
        match line {
            Line::Crash(c) => crash = Some(c),
            Line::Arrival(_) => {
                count += 1;
                if count % CLOCK_EVERY == 0 {
                    clock.tick("scanning the trace for its crash line", count)?;
                }
            }
        }
    }
    Ok((crash, count))
}

/// The lab's result before it is reported.
struct Lab {
    figures: Figures,
    text: String,
    checks: Vec<Check>,
    notes: Vec<String>,
}

fn lab(args: &DetectorArgs) -> Result<Lab, String> {
    let source = args.source()?;
    let mut clock = Clock::new(args.time_limit, args.quiet);
    let mut notes = Vec::new();
    let (crash, runs, preset) = match &source {
        Source::Csv(path) => {
            let crash = match args.crash {
                Some(c) => Some(c),
                None => scan(path, args.member.clone(), &mut clock)?.0,
            };
            if crash.is_none() {
                notes.push(
                    "the trace has no crash (no crash line, no --crash): no detection time; accuracy up to the last arrival"
                        .into(),
                );
            }
            (crash, 1, None)
        }
        Source::Synthetic(p) => (Some(p.crash()), args.runs.unwrap_or(20).max(1), Some(p)),
    };
    let session = args
        .session
        .unwrap_or_else(|| preset.map_or(10.0, |p| p.preset.session()));
    let settings = args.sweep(session)?;
    let longest_session = settings.iter().map(|s| s.session_s).fold(0.0, f64::max);
    let mut timeline = (args.timeline_svg.is_some()).then(|| Timeline {
        from: args.timeline_from.unwrap_or(0.0),
        to: args
            .timeline_to
            .or(crash.map(|c| c + longest_session))
            .unwrap_or(f64::INFINITY),
        ..Timeline::default()
    });
    let seeds: Vec<u64> = (0..runs as u64)
        .map(|i| args.seed.saturating_add(i))
        .collect();
    let mut per_setting: Vec<Vec<RunQos>> = vec![Vec::with_capacity(runs); settings.len()];
    let mut best = BestFixed::default();
    let mut arrivals = 0u64;
    for (i, &seed) in seeds.iter().enumerate() {
        let what = format!("run {}/{runs}", i + 1);
        let tl = if i == 0 { timeline.as_mut() } else { None };
        let result = match &source {
            Source::Csv(path) => {
                let mut r = CsvReader::open(path)
                    .map_err(|e| e.to_string())?
                    .with_member(args.member.clone());
                let mut next = || -> Result<Option<f64>, String> {
                    // Bounded by the file; crash lines were read by the scan.
                    loop {
                        match r.next_line().map_err(|e| e.to_string())? {
                            Some(Line::Arrival(a)) => return Ok(Some(a)),
                            Some(Line::Crash(_)) => {}
                            None => return Ok(None),
                        }
                    }
                };
                replay_run(&settings, crash, &mut next, &mut clock, &what, tl)?
            }
            Source::Synthetic(p) => {
                let mut g = p.generate(seed);
                let mut next = || Ok(g.next());
                replay_run(&settings, crash, &mut next, &mut clock, &what, tl)?
            }
        };
        arrivals += result.arrivals;
        for (acc, q) in per_setting.iter_mut().zip(result.qos) {
            acc.push(q);
        }
        if let Some((timeout, detection)) = result.best {
            best.timeout_by_run_s.push(timeout);
            best.detection_by_run_s.push(detection);
        }
    }
    if arrivals == 0 {
        return Err("the trace has no arrivals".into());
    }
    let wall_s = clock.started.elapsed().as_secs_f64();
    let results: Vec<SettingQos> = settings
        .iter()
        .zip(&per_setting)
        .map(|(s, runs)| SettingQos::of(s, runs))
        .collect();
    let best_fixed = (!best.detection_by_run_s.is_empty()).then(|| {
        best.detection_mean_s = qos::mean(&best.detection_by_run_s);
        best.detection_median_s = crate::stats::median(&mut best.detection_by_run_s.clone());
        best
    });
    let best_swept = results
        .iter()
        .filter(|r| r.setting.detector == DetectorKind::Fixed && r.false_expulsions == 0)
        .min_by(|a, b| a.setting.session_s.total_cmp(&b.setting.session_s))
        .map(|r| BestSwept {
            timeout_s: r.setting.session_s,
            detection_median_s: r.detection_median_s,
            detection_mean_s: r.detection_mean_s,
        });

    // The report.
    let (trace_name, file) = match &source {
        Source::Csv(path) => (
            format!("file {}", path.display()),
            Some(path.display().to_string()),
        ),
        Source::Synthetic(p) => (p.describe(), None),
    };
    let mut head = vec![
        (
            "trace",
            match preset {
                Some(_) => format!(
                    "{trace_name}; {runs} runs, seeds {}–{}",
                    seeds[0],
                    seeds[seeds.len() - 1]
                ),
                None => trace_name.clone(),
            },
        ),
        (
            "arrivals",
            format!(
                "{} replayed into each of {} settings{}",
                fmt_count(arrivals as f64),
                settings.len(),
                crash.map_or(String::new(), |c| format!(
                    "; the process dies at {} s",
                    num(c)
                ))
            ),
        ),
        (
            "detectors",
            format!(
                "the coordinator's own (liveness::Replay); adaptive bounded by a session timeout of {} s",
                num(session)
            ),
        ),
        ("replay", format!("{wall_s:.2} s")),
    ];
    if runs > 1 {
        head.push((
            "figures",
            format!(
                "false suspicions and expulsions are totals over the {runs} runs; the rest per run"
            ),
        ));
    }
    let mut text = kv(&head);
    text.push('\n');
    text.push_str(&qos_table(&results));
    if let Some(b) = &best_fixed {
        text.push_str(&format!(
            "\nbest fixed timeout per trace (just over its longest gap; no false expulsion by construction): detection median {}, mean {}\n",
            secs(b.detection_median_s),
            secs(b.detection_mean_s)
        ));
    }
    match &best_swept {
        Some(b) => text.push_str(&format!(
            "best swept fixed timeout with no false expulsion in any run: {} s, detection median {}, mean {}\n",
            num(b.timeout_s),
            secs(b.detection_median_s),
            secs(b.detection_mean_s)
        )),
        None => text.push_str("every swept fixed timeout made a false expulsion\n"),
    }
    let adaptive = results
        .iter()
        .find(|r| r.setting.detector == DetectorKind::Adaptive && r.setting.default);
    let mut checks = Vec::new();
    if let Some(p) = preset {
        if p.preset == Preset::Seed002 {
            text.push('\n');
            text.push_str(&seed002_table(&results, best_fixed.as_ref(), runs));
        }
        match (adaptive, p.preset) {
            (Some(a), Preset::Seed002) => {
                checks.extend(seed002_pause_checks(p, &results, runs));
                checks.extend(adaptive_checks(
                    a,
                    best_fixed.as_ref(),
                    best_swept.as_ref(),
                    Target::AtMost(1.3),
                ));
            }
            (Some(a), Preset::NoisyThenCalm) => {
                checks.extend(adaptive_checks(
                    a,
                    best_fixed.as_ref(),
                    best_swept.as_ref(),
                    Target::Sooner(0.6),
                ));
            }
            (None, Preset::Seed002 | Preset::NoisyThenCalm) => notes.push(
                "the sweep has no adaptive setting at the coordinator's defaults (φ 8, floor 1 s): no acceptance checks".into(),
            ),
            _ => {}
        }
        if (!args.overrides().is_empty() || args.session.is_some())
            && matches!(p.preset, Preset::Seed002 | Preset::NoisyThenCalm)
        {
            notes.push(
                "the preset's parameters or session were changed: its targets were set for the defaults".into(),
            );
        }
    }

    // Charts.
    let title = format!(
        "{} — {}",
        match preset {
            Some(p) => p.preset.name().to_owned(),
            None => trace_name.clone(),
        },
        if runs > 1 {
            format!("{runs} runs")
        } else {
            "1 run".to_owned()
        }
    );
    if let Some(path) = &args.svg {
        let chart = svg::tradeoff(
            &format!("Detection time against mistakes: {title}"),
            &results,
            best_fixed.as_ref().and_then(|b| b.detection_median_s),
        );
        write(path, &chart)?;
        notes.push(format!("trade-off chart written to {}", path.display()));
    }
    if let (Some(path), Some(tl)) = (&args.timeline_svg, timeline) {
        let last_band = tl
            .rows
            .iter()
            .flatten()
            .map(|b| if b.to.is_finite() { b.to } else { b.from })
            .chain(tl.arrivals.last().copied())
            .fold(tl.from, f64::max);
        let to = if tl.to.is_finite() {
            tl.to
        } else {
            last_band + longest_session
        };
        let to = if tl.truncated {
            tl.arrivals.last().copied().unwrap_or(to).min(to)
        } else {
            to
        };
        let rows: Vec<svg::Row> = settings
            .iter()
            .zip(tl.rows)
            .map(|(s, bands)| svg::Row {
                label: format!("{} {}", s.detector, s.label()),
                bands,
            })
            .collect();
        let chart = svg::timeline(
            &format!("Suspicion and expulsion over time: {title}, first run"),
            tl.from,
            to,
            &tl.arrivals,
            crash,
            &rows,
        );
        write(path, &chart)?;
        if tl.truncated {
            notes.push(format!(
                "the timeline was cut at {} s (at most {TIMELINE_ARRIVALS} arrivals and {TIMELINE_BANDS} bands per setting are drawn; see --timeline-from/--timeline-to)",
                num(to)
            ));
        }
        notes.push(format!("timeline written to {}", path.display()));
    }

    Ok(Lab {
        figures: Figures {
            source: if preset.is_some() { "preset" } else { "file" },
            trace: trace_name,
            preset: preset.cloned(),
            file,
            runs,
            seeds: if preset.is_some() { seeds } else { Vec::new() },
            crash_s: crash,
            arrivals,
            wall_s,
            settings: results,
            best_fixed_per_trace: best_fixed,
            best_swept_fixed: best_swept,
        },
        text,
        checks,
        notes,
    })
}

fn write(path: &std::path::Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn secs(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.2} s"))
}

fn qos_table(results: &[SettingQos]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            vec![
                r.setting.detector.as_str().to_owned(),
                format!("{}{}", r.label, if r.setting.default { " *" } else { "" }),
                fmt_count(r.false_suspicions as f64),
                fmt_count(r.false_expulsions as f64),
                format!("{}/{}", r.runs_with_false_expulsion, r.runs),
                r.detection_mean_s.map_or("–".into(), |v| format!("{v:.2}")),
                r.detection_median_s
                    .map_or("–".into(), |v| format!("{v:.2}")),
                r.detection_max_s.map_or("–".into(), |v| format!("{v:.2}")),
                format!("{:.1}", r.mistake_per_run_s),
                format!("{:.1}", r.mistake_rate_per_h),
                format!("{:.5}", r.query_accuracy),
            ]
        })
        .collect();
    let mut out = table(
        &[
            "detector",
            "setting",
            "false susp.",
            "false exp.",
            "runs w/ f.e.",
            "detect mean s",
            "median s",
            "max s",
            "mistake s/run",
            "mistakes/h",
            "P_A",
        ],
        &rows,
    );
    out.push_str(
        "* the coordinator's defaults. detect: crash to expulsion. mistake: time wrongly not taken for alive (suspect or expelled) before the crash; mistakes/h: false suspicions per hour; P_A: chance a query at a random time before the crash is answered right.\n",
    );
    out
}

/// Seed 002's table: which fixed timeouts mourn the pause, and the detection time of
/// each, with the best fixed timeout per trace and the adaptive detector.
fn seed002_table(results: &[SettingQos], best: Option<&BestFixed>, runs: usize) -> String {
    let mut rows: Vec<Vec<String>> = results
        .iter()
        .filter(|r| r.setting.detector == DetectorKind::Fixed)
        .map(|r| {
            vec![
                format!("fixed {}", r.label),
                if r.runs_with_false_expulsion == 0 {
                    "no".to_owned()
                } else {
                    format!("yes, in {}/{runs} runs", r.runs_with_false_expulsion)
                },
                secs(r.detection_median_s),
                fmt_count(r.false_expulsions as f64),
            ]
        })
        .collect();
    if let Some(b) = best {
        rows.push(vec![
            "best fixed (per trace)".into(),
            "no".into(),
            secs(b.detection_median_s),
            "0".into(),
        ]);
    }
    for r in results
        .iter()
        .filter(|r| r.setting.detector == DetectorKind::Adaptive && r.setting.default)
    {
        rows.push(vec![
            format!("adaptive {}", r.label),
            if r.runs_with_false_expulsion == 0 {
                "no".to_owned()
            } else {
                format!("yes, in {}/{runs} runs", r.runs_with_false_expulsion)
            },
            secs(r.detection_median_s),
            fmt_count(r.false_expulsions as f64),
        ]);
    }
    let mut out = "seed 002: which timeouts mourn the pause\n".to_owned();
    out.push_str(&table(
        &[
            "detector",
            "mourns the pause",
            "detection (median)",
            &format!("false expulsions ({runs} runs)"),
        ],
        &rows,
    ));
    out
}

/// On seed 002's trace: every fixed timeout up to the pause must mourn it in every run,
/// and every one over the longest gap the trace can have (the pause, an interval, twice
/// the jitter and the 50 ms the held beats are spread over) in none. A check of the
/// lab and the trace more than of a detector.
fn seed002_pause_checks(p: &Params, results: &[SettingQos], runs: usize) -> Vec<Check> {
    let pause = p.get(Param::Pause);
    let longest = pause + p.get(Param::Interval) + 2.0 * p.get(Param::Jitter) + 0.05;
    let fixed = || {
        results
            .iter()
            .filter(|r| r.setting.detector == DetectorKind::Fixed)
    };
    let short: Vec<&SettingQos> = fixed().filter(|r| r.setting.session_s <= pause).collect();
    let long: Vec<&SettingQos> = fixed().filter(|r| r.setting.session_s > longest).collect();
    let mut checks = Vec::new();
    if !short.is_empty() {
        let missed: Vec<String> = short
            .iter()
            .filter(|r| r.runs_with_false_expulsion < runs)
            .map(|r| format!("{} in {}/{runs}", r.label, r.runs_with_false_expulsion))
            .collect();
        checks.push(Check::new(
            format!(
                "fixed {}–{} s (≤ the {} s pause) mourn the pause",
                num(short[0].setting.session_s),
                num(short[short.len() - 1].setting.session_s),
                num(pause)
            ),
            "in every run",
            if missed.is_empty() {
                format!("each in {runs}/{runs} runs")
            } else {
                missed.join(", ")
            },
            missed.is_empty(),
        ));
    }
    if !long.is_empty() {
        let mourned: Vec<String> = long
            .iter()
            .filter(|r| r.false_expulsions > 0)
            .map(|r| format!("{} in {}/{runs}", r.label, r.runs_with_false_expulsion))
            .collect();
        checks.push(Check::new(
            format!(
                "fixed {}–{} s (> the longest possible gap, {} s) never do",
                num(long[0].setting.session_s),
                num(long[long.len() - 1].setting.session_s),
                num(longest)
            ),
            "in no run",
            if mourned.is_empty() {
                "in no run".to_owned()
            } else {
                mourned.join(", ")
            },
            mourned.is_empty(),
        ));
    }
    checks
}

/// What the adaptive detector's detection time is held to against the best fixed.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// At most this many times the best fixed timeout's.
    AtMost(f64),
    /// Sooner than the best fixed timeout's by at least this fraction.
    Sooner(f64),
}

/// The adaptive detector at the coordinator's defaults: no false expulsion, and its
/// median detection time against the best fixed timeout's, per trace and swept.
fn adaptive_checks(
    a: &SettingQos,
    best: Option<&BestFixed>,
    swept: Option<&BestSwept>,
    target: Target,
) -> Vec<Check> {
    let mut checks = vec![Check::new(
        format!("adaptive ({}): false expulsions", a.label),
        "0",
        fmt_count(a.false_expulsions as f64),
        a.false_expulsions == 0,
    )];
    let compared = [
        (
            "the best fixed timeout per trace",
            best.and_then(|b| b.detection_median_s),
        ),
        (
            "the best swept fixed timeout with no false expulsion",
            swept.and_then(|b| b.detection_median_s),
        ),
    ];
    let Some(ad) = a.detection_median_s else {
        return checks;
    };
    for (what, fixed) in compared {
        let Some(fixed) = fixed else {
            continue;
        };
        let ratio = if fixed > 0.0 {
            ad / fixed
        } else {
            f64::INFINITY
        };
        let (target_text, measured, met) = match target {
            Target::AtMost(x) => (
                format!("≤ {x}×"),
                format!("{ad:.2} s vs {fixed:.2} s: {ratio:.2}×"),
                ratio <= x,
            ),
            Target::Sooner(x) => (
                format!("≥ {:.0}% sooner", x * 100.0),
                format!(
                    "{ad:.2} s vs {fixed:.2} s: {:.0}% sooner",
                    (1.0 - ratio) * 100.0
                ),
                1.0 - ratio >= x,
            ),
        };
        checks.push(Check::new(
            format!("adaptive detection (median) against {what}"),
            target_text,
            measured,
            met,
        ));
    }
    checks
}

/// Runs the lab on a blocking thread, prints its report and writes its JSON. Returns
/// whether every check was met.
pub(crate) async fn run(args: &DetectorArgs) -> Result<bool, String> {
    let mut machine = Machine::now();
    let owned = args.clone();
    let lab = tokio::task::spawn_blocking(move || lab(&owned))
        .await
        .map_err(|e| format!("the lab failed: {e}"))??;
    machine.finish();
    let report = Report {
        scenario: "detector",
        command: command_line(),
        machine,
        coordinator: None,
        generator: None,
        figures: lab.figures,
        checks: lab.checks,
        notes: lab.notes,
        text: lab.text,
    };
    report.emit(args.json.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: DetectorArgs,
    }

    fn args(extra: &[&str]) -> DetectorArgs {
        Wrapper::parse_from(
            std::iter::once("lab")
                .chain(extra.iter().copied())
                .chain(["--quiet"]),
        )
        .args
    }

    /// A short seed 002 run end to end: the figures, the checks and both charts.
    #[test]
    fn smoke_seed002() {
        let dir = std::env::temp_dir().join(format!("rollcall-lab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (chart, timeline) = (dir.join("chart.svg"), dir.join("timeline.svg"));
        let a = args(&[
            "--preset",
            "seed002",
            "--runs",
            "3",
            "--svg",
            chart.to_str().unwrap(),
            "--timeline-svg",
            timeline.to_str().unwrap(),
        ]);
        let out = lab(&a).expect("the lab runs");
        let f = &out.figures;
        assert_eq!(f.runs, 3);
        assert_eq!(f.crash_s, Some(100.0));
        assert_eq!(
            f.settings.len(),
            10 + 12,
            "10 fixed timeouts, 4 φ × 3 floors"
        );
        let fixed = |t: f64| {
            f.settings
                .iter()
                .find(|s| s.setting.detector == DetectorKind::Fixed && s.setting.session_s == t)
                .expect("swept")
        };
        assert_eq!(
            fixed(1.5).runs_with_false_expulsion,
            3,
            "1.5 s mourns the pause"
        );
        assert_eq!(fixed(6.0).false_expulsions, 0);
        assert!(
            out.checks.iter().all(|c| c.met),
            "{:?}\n{}",
            out.checks,
            out.text
        );
        assert!(out.text.contains("mourns the pause"), "{}", out.text);
        for path in [&chart, &timeline] {
            let svg = std::fs::read_to_string(path).expect("written");
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A trace file streamed: the crash line found, the QoS of the hand-made trace of
    /// `qos`'s tests; a bad line is an error naming it.
    #[test]
    fn smoke_csv() {
        let dir = std::env::temp_dir().join(format!("rollcall-lab-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let good = dir.join("good.csv");
        std::fs::write(&good, "arrival_s\n0\n1\n2\n5\n6\n7\n8\n14\n15\ncrash,16\n").expect("write");
        let a = args(&[
            "--trace",
            good.to_str().unwrap(),
            "--timeouts",
            "4s",
            "--phi",
            "8",
            "--floor",
            "1",
        ]);
        let out = lab(&a).expect("the lab runs");
        let f = &out.figures;
        assert_eq!((f.arrivals, f.crash_s), (9, Some(16.0)));
        let s = &f.settings[0];
        assert_eq!((s.false_suspicions, s.false_expulsions), (2, 1));
        assert_eq!(s.detection_median_s, Some(3.0));
        assert!((s.query_accuracy - 0.5).abs() < 1e-9);
        let bad = dir.join("bad.csv");
        std::fs::write(&bad, "0\n1\n1.5.2\n").expect("write");
        let a = args(&["--trace", bad.to_str().unwrap()]);
        let e = lab(&a).err().expect("a bad line is an error");
        assert!(e.contains("bad.csv:3:"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
