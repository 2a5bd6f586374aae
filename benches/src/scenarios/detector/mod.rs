//! `detector`: the detector lab. Replays a group's heartbeat traces (a CSV file of
//! arrivals and the coordinator's recorded events, or a synthetic preset of many
//! members) through the coordinator itself
//! ([`GroupReplay`](rollcall_coordinator::core::replay::GroupReplay): a real
//! `Coordinator`, driven per input as the server drives it: joins, heartbeats with
//! their sequence numbers, connections and leases, the guards) over a sweep of the
//! detectors' settings, for each kind of crash of member 0 (its process, or silence),
//! and measures each setting's quality of service: false suspicions, false expulsions
//! over every member, detection time of the crash, mistake duration and query accuracy
//! (see [`qos`]). No server is started: the figures are the coordinator's own, the
//! network stack left out.
//!
//! A trace is streamed, never held: each run reads (or generates) its inputs once and
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
use self::qos::{CrashKind, Setting, SettingQos};
use self::replay::{scan, Clock, Replayed, Rules, Timeline};
use self::trace::{Params, Source};
use crate::common::{command_line, Check, Machine, Report};

/// Arrivals kept for the timeline chart at most.
const TIMELINE_ARRIVALS: usize = 5_000;
/// Bands kept per setting for the timeline chart at most.
const TIMELINE_BANDS: usize = 2_000;
/// Inputs between two looks at the clock (progress lines, time limit).
const CLOCK_EVERY: u64 = 1 << 14;

/// The best fixed timeout of each run, found after the fact: just over member 0's
/// longest gap (so no false expulsion of it), a timeout nobody could have chosen in
/// advance; for a process crash, the lease expels sooner when it is shorter.
#[derive(Debug, Clone, Serialize)]
struct BestFixed {
    crash: CrashKind,
    timeout_by_run_s: Vec<f64>,
    detection_by_run_s: Vec<f64>,
    detection_mean_s: Option<f64>,
    detection_median_s: Option<f64>,
}

impl Default for BestFixed {
    fn default() -> Self {
        Self {
            crash: CrashKind::Silent,
            timeout_by_run_s: Vec::new(),
            detection_by_run_s: Vec::new(),
            detection_mean_s: None,
            detection_median_s: None,
        }
    }
}

/// The shortest swept fixed timeout without a false expulsion of any member in any run.
#[derive(Debug, Clone, Serialize)]
struct BestSwept {
    crash: CrashKind,
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
    /// Members of the group (of a file: those seen).
    members: usize,
    session_s: f64,
    crash_kinds: Vec<CrashKind>,
    no_seq: bool,
    no_conn: bool,
    /// Inputs replayed (arrivals and events), over every run.
    inputs: u64,
    wall_s: f64,
    /// Per setting, per crash kind.
    settings: Vec<SettingQos>,
    best_fixed_per_trace: Vec<BestFixed>,
    best_swept_fixed: Vec<BestSwept>,
}

/// The lab's result before it is reported.
struct Lab {
    figures: Figures,
    text: String,
    checks: Vec<Check>,
    notes: Vec<String>,
}

/// What the lab replays: the trace, when member 0's process dies and how, the group,
/// the runs and their seeds, and the settings swept.
struct Plan<'a> {
    source: &'a Source,
    /// The synthetic trace's parameters; `None` for a file.
    preset: Option<&'a Params>,
    crash: Option<f64>,
    kinds: Vec<CrashKind>,
    /// Members of a synthetic group; of a file, those seen.
    members: usize,
    /// A synthetic group's other members beat until then.
    others_until: f64,
    rules: Rules,
    runs: usize,
    seeds: Vec<u64>,
    /// The session timeout: the adaptive detector's bound, and a fixed timeout.
    session: f64,
    /// The heartbeat interval (a file's is taken as 1 s), for the default lease.
    interval: f64,
    lease: Option<f64>,
    settings: Vec<Setting>,
    longest_session: f64,
}

impl Plan<'_> {
    /// The lease the members of `setting` join with: `--lease`, or the client's default
    /// (3 intervals and 250 ms), at most the setting's session timeout.
    fn lease_for(&self, setting: &Setting) -> f64 {
        self.lease
            .unwrap_or(3.0 * self.interval + 0.25)
            .min(setting.session_s)
    }

    /// `results`' entries for crash kind `kind`, setting by setting.
    fn of_kind<'r>(&self, results: &'r [SettingQos], kind: CrashKind) -> Vec<&'r SettingQos> {
        results.iter().filter(|r| r.crash == kind).collect()
    }
}

/// What the runs add up to: each setting's quality of service over every run, per crash
/// kind, and the best fixed timeouts.
struct Summary {
    results: Vec<SettingQos>,
    best_fixed: Vec<BestFixed>,
    best_swept: Vec<BestSwept>,
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
    if replayed.inputs == 0 {
        return Err("the trace has no arrivals".into());
    }
    let wall_s = clock.started.elapsed().as_secs_f64();
    let arrivals = replayed.inputs;
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
            members: plan.members,
            session_s: plan.session,
            crash_kinds: plan.kinds.clone(),
            no_seq: plan.rules.no_seq,
            no_conn: plan.rules.no_conn,
            inputs: arrivals,
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
    let (crash, runs, preset, members) = match source {
        Source::Csv(path) => {
            let (found, _, members) = scan(path, args.member.clone(), clock)?;
            let crash = args.crash.or(found);
            if crash.is_none() {
                notes.push(
                    "the trace has no crash (no crash line, no --crash): no detection time; accuracy up to the last arrival"
                        .into(),
                );
            }
            (crash, 1, None, members)
        }
        Source::Synthetic(p) => (
            Some(p.crash()),
            args.runs.unwrap_or(20).max(1),
            Some(p),
            args.members.unwrap_or(20).max(1),
        ),
    };
    let session = args
        .session
        .unwrap_or_else(|| preset.map_or(10.0, |p| p.preset.session()));
    let settings = args.sweep(session)?;
    let longest_session = settings.iter().map(|s| s.session_s).fold(0.0, f64::max);
    let seeds: Vec<u64> = (0..runs as u64)
        .map(|i| args.seed.saturating_add(i))
        .collect();
    if args.lease.is_some_and(|l| l <= 0.0) {
        return Err("--lease must be above zero".into());
    }
    // A synthetic group's other members beat until three session timeouts after the
    // crash; their expulsions count until two after it (one still silent then has been
    // silent longer than its session, so the fixed rule expels it too).
    let window = 2.0 * session.max(longest_session);
    let others_until = crash.map_or(f64::INFINITY, |c| c + 1.5 * window);
    let count_until = match preset {
        Some(_) => crash.map_or(f64::INFINITY, |c| c + window),
        None => f64::INFINITY,
    };
    Ok(Plan {
        source,
        preset,
        crash,
        kinds: args.crash_kinds(),
        members,
        others_until,
        rules: Rules {
            no_seq: args.no_seq,
            no_conn: args.no_conn,
            count_until,
        },
        runs,
        seeds,
        session,
        interval: preset.map_or(1.0, |p| p.get(trace::Param::Interval)),
        lease: args.lease,
        settings,
        longest_session,
    })
}

/// Each setting's quality of service over the runs, per crash kind; the best fixed
/// timeout per trace, and the shortest swept fixed timeout without a false expulsion.
fn summarise(plan: &Plan<'_>, replayed: Replayed) -> Summary {
    let Replayed {
        per_setting, best, ..
    } = replayed;
    let keys = plan
        .settings
        .iter()
        .flat_map(|s| plan.kinds.iter().map(move |&k| (s, k)));
    let results: Vec<SettingQos> = keys
        .zip(&per_setting)
        .map(|((s, k), runs)| SettingQos::of(s, k, runs))
        .collect();
    let best_fixed = best
        .into_iter()
        .filter(|b| !b.detection_by_run_s.is_empty())
        .map(|mut b| {
            b.detection_mean_s = qos::mean(&b.detection_by_run_s);
            b.detection_median_s = crate::stats::median(&mut b.detection_by_run_s.clone());
            b
        })
        .collect();
    let best_swept = plan
        .kinds
        .iter()
        .filter_map(|&k| {
            results
                .iter()
                .filter(|r| {
                    r.crash == k
                        && r.setting.detector == DetectorKind::Fixed
                        && r.false_expulsions == 0
                })
                .min_by(|a, b| a.setting.session_s.total_cmp(&b.setting.session_s))
                .map(|r| BestSwept {
                    crash: k,
                    timeout_s: r.setting.session_s,
                    detection_median_s: r.detection_median_s,
                    detection_mean_s: r.detection_mean_s,
                })
        })
        .collect();
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
