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
//!
//! Here, the lab in its steps: the plan (`args.rs` reads the options), the replay
//! (`replay.rs`), the summary, the report (`report.rs`) and the charts (`charts.rs`).

mod advise;
mod args;
mod charts;
mod qos;
mod replay;
mod report;
mod svg;
#[cfg(test)]
mod tests;
mod trace;

use rollcall_coordinator::core::DetectorKind;
use serde::Serialize;

pub(crate) use self::args::DetectorArgs;
use self::qos::{Setting, SettingQos};
use self::replay::{scan, Clock, Replayed, Timeline};
use self::trace::{Params, Source};
use crate::common::{command_line, Check, Machine, Report};

/// Arrivals kept for the timeline chart at most.
const TIMELINE_ARRIVALS: usize = 5_000;
/// Bands kept per setting for the timeline chart at most.
const TIMELINE_BANDS: usize = 2_000;
/// Arrivals between two looks at the clock (progress lines, time limit).
const CLOCK_EVERY: u64 = 1 << 14;

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

/// The lab's result before it is reported.
struct Lab {
    figures: Figures,
    text: String,
    checks: Vec<Check>,
    notes: Vec<String>,
}

/// What the lab replays: the trace, when its process dies, the runs and their seeds,
/// and the settings swept.
struct Plan<'a> {
    source: &'a Source,
    /// The synthetic trace's parameters; `None` for a file.
    preset: Option<&'a Params>,
    crash: Option<f64>,
    runs: usize,
    seeds: Vec<u64>,
    /// The session timeout bounding the adaptive detector.
    session: f64,
    settings: Vec<Setting>,
    longest_session: f64,
}

/// What the runs add up to: each setting's quality of service over every run, and the
/// best fixed timeouts.
struct Summary {
    results: Vec<SettingQos>,
    best_fixed: Option<BestFixed>,
    best_swept: Option<BestSwept>,
}

fn lab(args: &DetectorArgs) -> Result<Lab, String> {
    let source = args.source()?;
    let mut clock = Clock::new(args.time_limit, args.quiet);
    let mut notes = Vec::new();
    let plan = plan(args, &source, &mut clock, &mut notes)?;
    let mut timeline = (args.timeline_svg.is_some()).then(|| Timeline {
        from: args.timeline_from.unwrap_or(0.0),
        to: args
            .timeline_to
            .or(plan.crash.map(|c| c + plan.longest_session))
            .unwrap_or(f64::INFINITY),
        ..Timeline::default()
    });
    let replayed = replay::replay_runs(args, &plan, &mut clock, timeline.as_mut())?;
    if replayed.arrivals == 0 {
        return Err("the trace has no arrivals".into());
    }
    let wall_s = clock.started.elapsed().as_secs_f64();
    let arrivals = replayed.arrivals;
    let summary = summarise(&plan, replayed);
    let (trace_name, file) = match &source {
        Source::Csv(path) => (
            format!("file {}", path.display()),
            Some(path.display().to_string()),
        ),
        Source::Synthetic(p) => (p.describe(), None),
    };
    let mut text = report::text(&plan, &trace_name, arrivals, wall_s, &summary);
    let checks = report::preset_checks(args, &plan, &summary, &mut text, &mut notes);
    charts::draw(args, &plan, &trace_name, &summary, timeline, &mut notes)?;
    let Summary {
        results,
        best_fixed,
        best_swept,
    } = summary;
    let preset = plan.preset;
    Ok(Lab {
        figures: Figures {
            source: if preset.is_some() { "preset" } else { "file" },
            trace: trace_name,
            preset: preset.cloned(),
            file,
            runs: plan.runs,
            seeds: if preset.is_some() {
                plan.seeds
            } else {
                Vec::new()
            },
            crash_s: plan.crash,
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

/// The plan of the lab: a file's crash (from `--crash`, else a scan of the file), or a
/// preset's; the runs, their seeds, and the settings to sweep.
fn plan<'a>(
    args: &DetectorArgs,
    source: &'a Source,
    clock: &mut Clock,
    notes: &mut Vec<String>,
) -> Result<Plan<'a>, String> {
    let (crash, runs, preset) = match source {
        Source::Csv(path) => {
            let crash = match args.crash {
                Some(c) => Some(c),
                None => scan(path, args.member.clone(), clock)?.0,
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
    let seeds: Vec<u64> = (0..runs as u64)
        .map(|i| args.seed.saturating_add(i))
        .collect();
    Ok(Plan {
        source,
        preset,
        crash,
        runs,
        seeds,
        session,
        settings,
        longest_session,
    })
}

/// Each setting's quality of service over the runs, the best fixed timeout per trace,
/// and the shortest swept fixed timeout without a false expulsion.
fn summarise(plan: &Plan<'_>, replayed: Replayed) -> Summary {
    let Replayed {
        per_setting,
        mut best,
        ..
    } = replayed;
    let results: Vec<SettingQos> = plan
        .settings
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
    Summary {
        results,
        best_fixed,
        best_swept,
    }
}

/// Runs the lab on a blocking thread, prints its report and writes its JSON. Returns
/// whether every check was met.
pub(crate) async fn run(args: &DetectorArgs) -> Result<bool, String> {
    if args.advise.advise {
        return advise::run(args).await;
    }
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
