//! The lab's report: its head, the quality-of-service tables, and the acceptance
//! checks of the presets that have targets.

use rollcall_coordinator::core::DetectorKind;

use super::qos::{num, SettingQos};
use super::trace::{Param, Params, Preset};
use super::{BestFixed, BestSwept, DetectorArgs, Plan, Summary};
use crate::common::Check;
use crate::stats::{fmt_count, kv, table};

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

/// The report's head, the table of every setting and the best fixed timeouts.
pub(super) fn text(
    plan: &Plan<'_>,
    trace_name: &str,
    arrivals: u64,
    wall_s: f64,
    summary: &Summary,
) -> String {
    let (runs, seeds, crash) = (plan.runs, &plan.seeds, plan.crash);
    let mut head = vec![
        (
            "trace",
            match plan.preset {
                Some(_) => format!(
                    "{trace_name}; {runs} runs, seeds {}–{}",
                    seeds[0],
                    seeds[seeds.len() - 1]
                ),
                None => trace_name.to_owned(),
            },
        ),
        (
            "arrivals",
            format!(
                "{} replayed into each of {} settings{}",
                fmt_count(arrivals as f64),
                plan.settings.len(),
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
                num(plan.session)
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
    text.push_str(&qos_table(&summary.results));
    if let Some(b) = &summary.best_fixed {
        text.push_str(&format!(
            "\nbest fixed timeout per trace (just over its longest gap; no false expulsion by construction): detection median {}, mean {}\n",
            secs(b.detection_median_s),
            secs(b.detection_mean_s)
        ));
    }
    match &summary.best_swept {
        Some(b) => text.push_str(&format!(
            "best swept fixed timeout with no false expulsion in any run: {} s, detection median {}, mean {}\n",
            num(b.timeout_s),
            secs(b.detection_median_s),
            secs(b.detection_mean_s)
        )),
        None => text.push_str("every swept fixed timeout made a false expulsion\n"),
    }
    text
}

/// The acceptance checks of a preset that has targets (seed 002's table is added to
/// `text`), and why there are none when the sweep cannot be held to them.
pub(super) fn preset_checks(
    args: &DetectorArgs,
    plan: &Plan<'_>,
    summary: &Summary,
    text: &mut String,
    notes: &mut Vec<String>,
) -> Vec<Check> {
    let (results, runs) = (&summary.results, plan.runs);
    let (best_fixed, best_swept) = (summary.best_fixed.as_ref(), summary.best_swept.as_ref());
    let adaptive = results
        .iter()
        .find(|r| r.setting.detector == DetectorKind::Adaptive && r.setting.default);
    let mut checks = Vec::new();
    let Some(p) = plan.preset else {
        return checks;
    };
    if p.preset == Preset::Seed002 {
        text.push('\n');
        text.push_str(&seed002_table(results, best_fixed, runs));
    }
    match (adaptive, p.preset) {
        (Some(a), Preset::Seed002) => {
            checks.extend(seed002_pause_checks(p, results, runs));
            checks.extend(adaptive_checks(
                a,
                best_fixed,
                best_swept,
                Target::AtMost(1.3),
            ));
        }
        (Some(a), Preset::NoisyThenCalm) => {
            checks.extend(adaptive_checks(
                a,
                best_fixed,
                best_swept,
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
    checks
}
