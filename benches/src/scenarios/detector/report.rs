//! The lab's report: its head, the quality-of-service tables, and the acceptance
//! checks: do no harm everywhere, and the presets' detection targets.

use rollcall_coordinator::core::DetectorKind;

use super::qos::{num, CrashKind, SettingQos};
use super::trace::{Param, Params, Preset};
use super::{BestFixed, BestSwept, DetectorArgs, Plan, Summary};
use crate::common::Check;
use crate::stats::{fmt_count, kv, table};

fn secs(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.2} s"))
}

fn two(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.2}"))
}

/// One row per setting: member 0's measures and the group's false expulsions from the
/// first crash kind's replay, and the detection time of each kind.
fn qos_table(plan: &Plan<'_>, results: &[SettingQos]) -> String {
    let kinds = &plan.kinds;
    let rows: Vec<Vec<String>> = results
        .chunks(kinds.len())
        .map(|per_kind| {
            let r = &per_kind[0];
            let mut row = vec![
                r.setting.detector.as_str().to_owned(),
                format!("{}{}", r.label, if r.setting.default { " *" } else { "" }),
                fmt_count(r.false_suspicions as f64),
                fmt_count(r.false_expulsions as f64),
                fmt_count(r.early as f64),
                format!("{}/{}", r.runs_with_false_expulsion, r.runs),
            ];
            for k in per_kind {
                row.push(two(k.detection_median_s));
                row.push(two(k.detection_mean_s));
            }
            row.push(format!("{:.1}", r.mistake_rate_per_h));
            row.push(format!("{:.5}", r.query_accuracy));
            row
        })
        .collect();
    let mut header = vec![
        "detector",
        "setting",
        "false susp.",
        "false exp.",
        "early",
        "m0 runs w/ f.e.",
    ];
    let names: Vec<String> = kinds
        .iter()
        .flat_map(|k| {
            [
                format!("{} median s", k.name()),
                format!("{} mean s", k.name()),
            ]
        })
        .collect();
    header.extend(names.iter().map(String::as_str));
    header.extend(["mistakes/h", "P_A"]);
    let mut out = table(&header, &rows);
    out.push_str(&format!(
        "* the coordinator's defaults. false exp.: every member's expulsions while alive ({} members; member 0 before its crash), totals over the runs; early: of them, those whose silence ended within the session timeout (the fixed rule at the session would not have expelled). Detection (crash to expulsion) is member 0's, per crash kind; false susp., mistakes/h (false suspicions per hour) and P_A (chance a query at a random time before the crash is answered right) are member 0's.\n",
        plan.members
    ));
    out
}

/// Seed 002's table: which fixed timeouts mourn member 0's pause, and the detection time
/// of each, with the best fixed timeout per trace and the adaptive detector.
fn seed002_table(plan: &Plan<'_>, summary: &Summary, kind: CrashKind) -> String {
    let runs = plan.runs;
    let results = plan.of_kind(&summary.results, kind);
    let row = |r: &SettingQos, name: String| {
        vec![
            name,
            if r.runs_with_false_expulsion == 0 {
                "no".to_owned()
            } else {
                format!("yes, in {}/{runs} runs", r.runs_with_false_expulsion)
            },
            secs(r.detection_median_s),
            fmt_count(r.false_expulsions as f64),
        ]
    };
    let mut rows: Vec<Vec<String>> = results
        .iter()
        .filter(|r| r.setting.detector == DetectorKind::Fixed)
        .map(|r| row(r, format!("fixed {}", r.label)))
        .collect();
    if let Some(b) = best_of(&summary.best_fixed, kind) {
        rows.push(vec![
            "best fixed (per trace)".into(),
            "no".into(),
            secs(b.detection_median_s),
            String::new(),
        ]);
    }
    for r in results
        .iter()
        .filter(|r| r.setting.detector == DetectorKind::Adaptive && r.setting.default)
    {
        rows.push(row(r, format!("adaptive {}", r.label)));
    }
    let mut out = format!(
        "seed 002: which timeouts mourn member 0's pause ({} crash)\n",
        kind.name()
    );
    out.push_str(&table(
        &[
            "detector",
            "mourns the pause (member 0)",
            "detection (median)",
            &format!("false expulsions, all members ({runs} runs)"),
        ],
        &rows,
    ));
    out
}

/// On seed 002's trace: every fixed timeout up to the pause must mourn it in every run,
/// and every one over the longest gap the trace can have (the pause, an interval, twice
/// the jitter and the 50 ms the held beats are spread over) in none. A check of the
/// lab and the trace more than of a detector.
fn seed002_pause_checks(p: &Params, results: &[&SettingQos], runs: usize) -> Vec<Check> {
    let pause = p.get(Param::Pause);
    let longest = pause + p.get(Param::Interval) + 2.0 * p.get(Param::Jitter) + 0.05;
    let fixed = || {
        results
            .iter()
            .filter(|r| r.setting.detector == DetectorKind::Fixed)
    };
    let short: Vec<&&SettingQos> = fixed().filter(|r| r.setting.session_s <= pause).collect();
    let long: Vec<&&SettingQos> = fixed().filter(|r| r.setting.session_s > longest).collect();
    let mut checks = Vec::new();
    if !short.is_empty() {
        let missed: Vec<String> = short
            .iter()
            .filter(|r| r.runs_with_false_expulsion < runs)
            .map(|r| format!("{} in {}/{runs}", r.label, r.runs_with_false_expulsion))
            .collect();
        checks.push(Check::new(
            format!(
                "fixed {}–{} s (≤ the {} s pause) mourn member 0's pause",
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
            .map(|r| format!("{}: {} false exp.", r.label, r.false_expulsions))
            .collect();
        checks.push(Check::new(
            format!(
                "fixed {}–{} s (> the longest possible gap, {} s) never expel a member",
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

fn best_of(best: &[BestFixed], kind: CrashKind) -> Option<&BestFixed> {
    best.iter().find(|b| b.crash == kind)
}

fn swept_of(best: &[BestSwept], kind: CrashKind) -> Option<&BestSwept> {
    best.iter().find(|b| b.crash == kind)
}

/// What the adaptive detector's detection time is held to.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// At most this many times the best fixed timeout's.
    AtMost(f64),
    /// Sooner than the best fixed timeout's by at least this fraction.
    Sooner(f64),
}

/// The adaptive detector's median detection time for a `kind` crash against the best
/// fixed timeout's, per trace and swept.
fn against_best(
    a: &SettingQos,
    best: Option<&BestFixed>,
    swept: Option<&BestSwept>,
    target: Target,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let Some(ad) = a.detection_median_s else {
        return checks;
    };
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
            format!(
                "adaptive detection of a {} crash (median) against {what}",
                a.crash.name()
            ),
            target_text,
            measured,
            met,
        ));
    }
    checks
}

/// Do no harm: the adaptive defaults expel no more live members than the fixed rule at
/// the same session timeout, and none the fixed rule would have kept.
fn harm_check(plan: &Plan<'_>, results: &[&SettingQos]) -> Vec<Check> {
    let fixed = results
        .iter()
        .find(|r| r.setting.detector == DetectorKind::Fixed && r.setting.session_s == plan.session);
    let adaptive = results
        .iter()
        .find(|r| r.setting.detector == DetectorKind::Adaptive && r.setting.default);
    let (Some(f), Some(a)) = (fixed, adaptive) else {
        return Vec::new();
    };
    vec![Check::new(
        format!(
            "do no harm: adaptive defaults against fixed {} s, false expulsions of all {} members",
            num(plan.session),
            plan.members
        ),
        "≤ fixed, 0 early",
        format!(
            "{} vs {} ({} early)",
            fmt_count(a.false_expulsions as f64),
            fmt_count(f.false_expulsions as f64),
            fmt_count(a.early as f64)
        ),
        a.false_expulsions <= f.false_expulsions && a.early == 0,
    )]
}

/// The report's head, the table of every setting and the best fixed timeouts.
pub(super) fn text(
    plan: &Plan<'_>,
    trace_name: &str,
    inputs: u64,
    wall_s: f64,
    summary: &Summary,
) -> String {
    let (runs, seeds, crash) = (plan.runs, &plan.seeds, plan.crash);
    let kinds: Vec<&str> = plan.kinds.iter().map(|k| k.name()).collect();
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
            "group",
            format!(
                "{} members; member 0 dies{} ({} crash, each replayed apart); lease {} s (fixed rule: at most its timeout)",
                plan.members,
                crash.map_or(String::new(), |c| format!(" at {} s", num(c))),
                kinds.join(" and "),
                num(plan.lease_for(&super::qos::Setting::fixed(plan.session)))
            ),
        ),
        (
            "inputs",
            format!(
                "{} replayed into each of {} settings × {} crash kinds{}{}",
                fmt_count(inputs as f64),
                plan.settings.len(),
                plan.kinds.len(),
                if plan.rules.no_seq {
                    "; without sequence numbers (--no-seq)"
                } else {
                    ""
                },
                if plan.rules.no_conn {
                    "; without connections (--no-conn)"
                } else {
                    ""
                },
            ),
        ),
        (
            "coordinator",
            format!(
                "the coordinator itself (core::replay::GroupReplay), session timeout {} s",
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
    text.push_str(&qos_table(plan, &summary.results));
    for b in &summary.best_fixed {
        text.push_str(&format!(
            "\nbest fixed timeout per trace, {} crash (just over member 0's longest gap{}): detection median {}, mean {}",
            b.crash.name(),
            if b.crash == CrashKind::Process && !plan.rules.no_conn {
                ", or the lease if shorter"
            } else {
                ""
            },
            secs(b.detection_median_s),
            secs(b.detection_mean_s)
        ));
    }
    text.push('\n');
    match summary.best_swept.first() {
        Some(b) => {
            let per_kind: Vec<String> = summary
                .best_swept
                .iter()
                .map(|b| format!("{} {}", b.crash.name(), secs(b.detection_median_s)))
                .collect();
            text.push_str(&format!(
                "best swept fixed timeout with no false expulsion of any member: {} s, detection median {}\n",
                num(b.timeout_s),
                per_kind.join(", ")
            ));
        }
        None => text.push_str("every swept fixed timeout made a false expulsion\n"),
    }
    text
}

/// The acceptance checks: do no harm on every trace; a preset's detection targets
/// (seed 002's table is added to `text`), each for the crash the coordinator can
/// tell, the other kind's figure reported beside it.
pub(super) fn preset_checks(
    args: &DetectorArgs,
    plan: &Plan<'_>,
    summary: &Summary,
    text: &mut String,
    notes: &mut Vec<String>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    let first = plan.kinds[0];
    checks.extend(harm_check(plan, &plan.of_kind(&summary.results, first)));
    let Some(p) = plan.preset else {
        return checks;
    };
    let session = plan.session;
    // The crash each target is checked for: a process crash where the coordinator can
    // tell it from a live member's silence (the connection closes), silence where the
    // target is about learning a calm member's rhythm.
    let (kind, target) = match p.preset {
        Preset::Seed002 => (CrashKind::Process, Some(Target::AtMost(1.3))),
        Preset::NoisyThenCalm => (CrashKind::Silent, Some(Target::Sooner(0.6))),
        Preset::HeavyTail | Preset::BurstLoss => (CrashKind::Process, None),
        Preset::Drift => (CrashKind::Process, None),
    };
    if p.preset == Preset::Seed002 {
        text.push('\n');
        text.push_str(&seed002_table(plan, summary, first));
        checks.extend(seed002_pause_checks(
            p,
            &plan.of_kind(&summary.results, first),
            plan.runs,
        ));
    }
    let adaptive = |k: CrashKind| {
        summary.results.iter().find(|r| {
            r.crash == k && r.setting.detector == DetectorKind::Adaptive && r.setting.default
        })
    };
    if !plan.kinds.contains(&kind) {
        notes.push(format!(
            "the {} preset's detection target is for a {} crash, not replayed (--crash-kind)",
            p.preset.name(),
            kind.name()
        ));
    } else if let Some(a) = adaptive(kind) {
        match target {
            Some(t) => checks.extend(against_best(
                a,
                best_of(&summary.best_fixed, kind),
                swept_of(&summary.best_swept, kind),
                t,
            )),
            None if matches!(p.preset, Preset::HeavyTail | Preset::BurstLoss) => {
                let d = a.detection_median_s;
                checks.push(Check::new(
                    format!(
                        "adaptive detection of a {} crash (median) against 0.6 × the {} s session",
                        kind.name(),
                        num(session)
                    ),
                    format!("≤ {:.2} s", 0.6 * session),
                    secs(d),
                    d.is_some_and(|d| d <= 0.6 * session),
                ));
            }
            None => {}
        }
    } else {
        notes.push(
            "the sweep has no adaptive setting at the coordinator's defaults (φ 8, floor 1 s): no detection checks".into(),
        );
    }
    // The other kind, reported beside the checked one.
    for &k in plan.kinds.iter().filter(|&&k| k != kind) {
        if let Some(a) = adaptive(k) {
            let best = best_of(&summary.best_fixed, k).and_then(|b| b.detection_median_s);
            notes.push(format!(
                "adaptive defaults, {} crash: detection median {} (best fixed per trace {}; session {} s), reported, not checked",
                k.name(),
                secs(a.detection_median_s),
                secs(best),
                num(session)
            ));
        }
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
