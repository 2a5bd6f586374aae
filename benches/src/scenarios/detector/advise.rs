//! `detector --advise`: does the timeout advisor keep its promise on arrivals it has not
//! seen? Per run, the first `--train` of a group's heartbeats (every member of a
//! synthetic preset) is replayed through a real coordinator ([`GroupReplay`]) with the
//! preset's session timeout, and the advisor asked for a session timeout from the
//! summary of the group's pooled gaps the coordinator then holds (DescribeGroup
//! version 3's); the rest of the run is replayed through another coordinator with the
//! fixed detector at the advised timeout, and its expulsions (every member is alive:
//! each is a false one) counted. Over the runs, the
//! count must not exceed the upper 95 % Poisson quantile of what the advice promised
//! for the held-out member-time: `observed ≤ Poisson95(Σ promise × held-out years)`.

use std::time::{Duration, Instant};

use clap::Args;
use rollcall_coordinator::core::liveness::advice::{
    advise, poisson_quantile, Advice, Basis, Target, DEFAULT_PAUSE_FLOOR, MIN_POOLED_GAPS, MIN_SPAN,
};
use rollcall_coordinator::core::replay::{GroupReplay, ReplayConfig, Verdict};
use rollcall_coordinator::core::{DetectorKind, DetectorSettings};
use rollcall_protocol::{DetectionSummary, ExpelReason};
use serde::Serialize;

use super::trace::{seconds, Param, Params, Source};
use super::DetectorArgs;
use crate::common::{command_line, Check, Machine, Report};
use crate::stats::median;

/// Seconds in a year (365.25 days), as the advisor counts them.
const YEAR_S: f64 = 365.25 * 24.0 * 3600.0;
/// Members of a synthetic group by default.
const MEMBERS: usize = 20;
/// The trace's length by default: half to train on, half held out.
const DEFAULT_LENGTH_S: f64 = 3_600.0;

/// The options of `--advise`.
#[derive(Debug, Clone, Args)]
pub(crate) struct AdviseArgs {
    /// Check the timeout advisor instead of sweeping the detectors: advise from the
    /// first --train of each run, replay the rest with the fixed detector at the
    /// advised timeout, and compare its false expulsions with the promise (the trace
    /// is 1 h unless --duration says otherwise).
    #[arg(long)]
    pub(crate) advise: bool,
    /// With --advise: the part of each run the advisor learns from.
    #[arg(long, value_parser = seconds, default_value = "30m", requires = "advise")]
    pub(crate) train: f64,
    /// With --advise: the false expulsions a year across the group asked of the
    /// advisor.
    #[arg(long, default_value_t = 1.0, requires = "advise")]
    pub(crate) false_expulsions_per_year: f64,
}

/// One run's advice and what the held-out part made of it.
#[derive(Debug, Clone, Serialize)]
struct RunAdvice {
    seed: u64,
    /// `None`: the advisor had too little history.
    timeout_ms: Option<u64>,
    basis: Option<&'static str>,
    /// False expulsions a year across the group the advice promises.
    promise_per_year: Option<f64>,
    /// The gaps the advisor pooled, and over how long.
    pooled_gaps: u64,
    /// The recent gaps the tail counts are out of, the exceedances among them, the
    /// fitted shape ξ̂ and the bound the advisor used.
    tail_gaps: u64,
    exceedances: u64,
    shape: Option<f64>,
    shape_upper: Option<f64>,
    span_s: f64,
    /// Held-out member-years replayed.
    member_years: f64,
    /// The promise for them: `promise_per_year / members × member_years`.
    expected: f64,
    /// False expulsions the replay found.
    observed: u64,
    held_out_arrivals: u64,
}

#[derive(Debug, Serialize)]
struct AdviseFigures {
    trace: String,
    preset: Params,
    members: usize,
    runs: usize,
    train_s: f64,
    held_out_s: f64,
    false_expulsions_per_year: f64,
    per_run: Vec<RunAdvice>,
    /// Runs with advice.
    advised: usize,
    timeout_median_ms: Option<f64>,
    promise_median_per_year: Option<f64>,
    expected: f64,
    observed: u64,
    /// The most false expulsions the promise allows (upper 95 % Poisson quantile).
    allowed: u64,
    wall_s: f64,
}

/// A run's arrivals: `(seconds, member, sequence)`, in time order, each member's from
/// its own generator (the lab's: seed × the preset's multiplier + member), with the
/// sequence numbers its client would send (a beat lost in the network leaves a gap).
fn arrivals(params: &Params, seed: u64, members: usize) -> Vec<(f64, usize, u64)> {
    let mut all = Vec::new();
    for member in 0..members {
        for (t, seq) in params.generate_member(seed, member as u64, None) {
            all.push((t, member, seq));
        }
    }
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    all
}

/// Advises from the arrivals before `train`, replayed through a coordinator whose
/// members have the preset's session timeout: the group's summary is the one
/// DescribeGroup version 3 would report at `train`, from the coordinator's own fleet.
fn advice(
    all: &[(f64, usize, u64)],
    train: f64,
    start: Instant,
    session: Duration,
    target: &Target,
) -> (Advice, DetectionSummary) {
    let config = ReplayConfig::new(DetectorKind::Fixed, &DetectorSettings::default(), session);
    let mut replay = GroupReplay::new(config);
    for &(t, m, seq) in all.iter().take_while(|a| a.0 < train) {
        replay.beat(start + Duration::from_secs_f64(t), m, seq);
        while replay.poll_verdict().is_some() {}
    }
    let now = start + Duration::from_secs_f64(train);
    replay.advance(now);
    let summary = replay
        .coordinator()
        .detection_summaries(now)
        .into_iter()
        .next()
        .map(|(_, s)| s)
        .unwrap_or_default();
    (advise(&summary, target), summary)
}

/// Replays the arrivals from `train` on through a coordinator with the fixed detector
/// at `timeout`: its expulsions for silence.
fn held_out(all: &[(f64, usize, u64)], train: f64, start: Instant, timeout: Duration) -> u64 {
    let config = ReplayConfig::new(DetectorKind::Fixed, &DetectorSettings::default(), timeout);
    let mut replay = GroupReplay::new(config);
    let mut expelled = 0;
    for &(t, m, seq) in all.iter().filter(|a| a.0 >= train) {
        replay.beat(start + Duration::from_secs_f64(t), m, seq);
        while let Some(judged) = replay.poll_verdict() {
            if judged.verdict == Verdict::Expelled(ExpelReason::SessionExpired) {
                expelled += 1;
            }
        }
    }
    expelled
}

fn lab(args: &DetectorArgs) -> Result<(AdviseFigures, String, Vec<Check>), String> {
    let started = Instant::now();
    let a = &args.advise;
    if args.trace.is_some() {
        return Err("--advise replays synthetic groups: use --preset".into());
    }
    let Source::Synthetic(mut params) = args.source()? else {
        unreachable!("a file was refused above")
    };
    if args.duration.is_none() {
        let mut overrides = args.overrides();
        overrides.push((Param::Duration, DEFAULT_LENGTH_S.max(a.train * 2.0)));
        params = Params::new(params.preset, &overrides)?;
    }
    let length = params.get(Param::Duration);
    if !(a.train > 0.0 && a.train < length) {
        return Err(format!(
            "--train must be above 0 and below the trace's {length} s"
        ));
    }
    if !(a.false_expulsions_per_year > 0.0 && a.false_expulsions_per_year.is_finite()) {
        return Err("--false-expulsions-per-year must be above 0".into());
    }
    let members = args.members.unwrap_or(MEMBERS).max(1);
    let target = Target {
        per_year: a.false_expulsions_per_year,
        members,
        pause_floor: DEFAULT_PAUSE_FLOOR,
    };
    let runs = args.runs.unwrap_or(20).max(1);
    let session = Duration::from_secs_f64(args.session.unwrap_or(params.preset.session()));
    let start = Instant::now();
    let mut per_run = Vec::with_capacity(runs);
    for i in 0..runs {
        let seed = args.seed.saturating_add(i as u64);
        let all = arrivals(&params, seed, members);
        let (advice, summary) = advice(&all, a.train, start, session, &target);
        let (pooled_gaps, span_s) = (summary.pooled_gaps, summary.span_ms as f64 / 1000.0);
        let fitted = summary.scale_centi > 0;
        let (tail_gaps, exceedances) = (summary.tail_gaps, summary.exceedances);
        let shape = fitted.then(|| f64::from(summary.shape_milli) / 1000.0);
        let held_out_s = all.last().map_or(0.0, |l| l.0) - a.train;
        let member_years = members as f64 * held_out_s.max(0.0) / YEAR_S;
        let held_out_arrivals = all.iter().filter(|x| x.0 >= a.train).count() as u64;
        let run = match advice {
            Advice::NotYet { .. } => RunAdvice {
                seed,
                timeout_ms: None,
                basis: None,
                promise_per_year: None,
                pooled_gaps,
                tail_gaps,
                exceedances,
                shape,
                shape_upper: None,
                span_s,
                member_years,
                expected: 0.0,
                observed: 0,
                held_out_arrivals,
            },
            Advice::Timeout(t) => RunAdvice {
                seed,
                timeout_ms: Some(t.timeout_ms),
                basis: Some(t.basis.as_str()),
                promise_per_year: Some(t.promise_per_year),
                pooled_gaps,
                tail_gaps,
                exceedances,
                shape,
                shape_upper: t.shape_upper,
                span_s,
                member_years,
                expected: t.promise_per_year / members as f64 * member_years,
                observed: held_out(&all, a.train, start, Duration::from_millis(t.timeout_ms)),
                held_out_arrivals,
            },
        };
        if !args.quiet {
            eprintln!(
                "[{:7.1}s] run {}/{runs}: timeout {:?} ms ({}), promise {:.3} over the held-out part, {} false expulsions",
                started.elapsed().as_secs_f64(),
                i + 1,
                run.timeout_ms,
                run.basis.unwrap_or("no advice"),
                run.expected,
                run.observed
            );
        }
        if started.elapsed() > args.time_limit {
            return Err(format!(
                "stopped after {} s (--time-limit)",
                started.elapsed().as_secs()
            ));
        }
        per_run.push(run);
    }
    let expected: f64 = per_run.iter().map(|r| r.expected).sum::<f64>() + 0.0;
    let observed: u64 = per_run.iter().map(|r| r.observed).sum();
    let allowed = poisson_quantile(expected);
    let advised = per_run.iter().filter(|r| r.timeout_ms.is_some()).count();
    let mut timeouts: Vec<f64> = per_run
        .iter()
        .filter_map(|r| r.timeout_ms.map(|t| t as f64))
        .collect();
    let mut promises: Vec<f64> = per_run.iter().filter_map(|r| r.promise_per_year).collect();
    let figures = AdviseFigures {
        trace: params.describe(),
        preset: params.clone(),
        members,
        runs,
        train_s: a.train,
        held_out_s: length - a.train,
        false_expulsions_per_year: a.false_expulsions_per_year,
        advised,
        timeout_median_ms: median(&mut timeouts),
        promise_median_per_year: median(&mut promises),
        expected,
        observed,
        allowed,
        per_run,
        wall_s: started.elapsed().as_secs_f64(),
    };
    let text = text(&figures);
    // The runs whose advice met the target claim the most: they are checked apart.
    let meeting: Vec<&RunAdvice> = figures
        .per_run
        .iter()
        .filter(|r| matches!(r.basis, Some("observed" | "tail")))
        .collect();
    let meeting_expected: f64 = meeting.iter().map(|r| r.expected).sum::<f64>() + 0.0;
    let meeting_observed: u64 = meeting.iter().map(|r| r.observed).sum();
    let meeting_allowed = poisson_quantile(meeting_expected);
    let over: Vec<u64> = figures
        .per_run
        .iter()
        .filter(|r| r.observed > poisson_quantile(r.expected))
        .map(|r| r.seed)
        .collect();
    let checks = vec![
        Check::new(
            "no run's held-out false expulsions past its own promise",
            "every run ≤ Poisson 95 % of its promise",
            if over.is_empty() {
                "none past".to_owned()
            } else {
                format!("past in the runs of seeds {over:?}")
            },
            over.is_empty(),
        ),
        Check::new(
            "held-out false expulsions within the advisor's promise",
            format!("≤ {allowed} (Poisson 95 % of {expected:.3} promised)"),
            format!("{observed} in {advised} advised runs of {runs}"),
            observed <= allowed,
        ),
        Check::new(
            "the same, in the runs whose advice met the target",
            format!("≤ {meeting_allowed} (Poisson 95 % of {meeting_expected:.3} promised)"),
            format!("{meeting_observed} in {} runs", meeting.len()),
            meeting_observed <= meeting_allowed,
        ),
    ];
    Ok((figures, text, checks))
}

fn text(f: &AdviseFigures) -> String {
    let mut out = format!(
        "advisor check on {}: {} members, {} runs; advice from the first {:.0} s, held out \
         {:.0} s; asked for {} false expulsions a year\n",
        f.trace, f.members, f.runs, f.train_s, f.held_out_s, f.false_expulsions_per_year
    );
    out.push_str(&format!(
        "  the advisor needs {MIN_POOLED_GAPS} gaps over {} s\n",
        MIN_SPAN.as_secs()
    ));
    out.push_str(
        "  run  seed  gaps      m     ξ̂      ξ_U    timeout   basis         promise/yr  expected  observed\n",
    );
    for (i, r) in f.per_run.iter().enumerate() {
        out.push_str(&format!(
            "  {:>3}  {:>4}  {:>8}  {:>4}  {:>5}  {:>5}  {:>8}  {:<12}  {:>10}  {:>8.3}  {:>8}\n",
            i + 1,
            r.seed,
            r.pooled_gaps,
            r.exceedances,
            r.shape.map_or("-".into(), |x| format!("{x:.2}")),
            r.shape_upper.map_or("-".into(), |x| format!("{x:.2}")),
            r.timeout_ms
                .map_or("-".into(), |t| format!("{:.1}s", t as f64 / 1000.0)),
            r.basis.unwrap_or("no advice"),
            r.promise_per_year
                .map_or("-".into(), |p| format!("{p:.3e}")),
            r.expected,
            r.observed
        ));
    }
    out.push_str(&format!(
        "  total: {} false expulsions held out against {:.3} promised (at most {} at 95 %)\n",
        f.observed, f.expected, f.allowed
    ));
    let bases = [
        Basis::Observed,
        Basis::Tail,
        Basis::PauseFloor,
        Basis::Unreachable,
    ];
    let counts: Vec<String> = bases
        .iter()
        .map(|b| {
            let n = f
                .per_run
                .iter()
                .filter(|r| r.basis == Some(b.as_str()))
                .count();
            format!("{} {n}", b.as_str())
        })
        .collect();
    out.push_str(&format!("  bases: {}\n", counts.join(", ")));
    out
}

/// Runs the check on a blocking thread and reports it. Returns whether it was met.
pub(crate) async fn run(args: &DetectorArgs) -> Result<bool, String> {
    let mut machine = Machine::now();
    let owned = args.clone();
    let (figures, text, checks) = tokio::task::spawn_blocking(move || lab(&owned))
        .await
        .map_err(|e| format!("the advisor check failed: {e}"))??;
    machine.finish();
    let report = Report {
        scenario: "detector --advise",
        command: command_line(),
        machine,
        coordinator: None,
        generator: None,
        figures,
        checks,
        notes: Vec::new(),
        text,
    };
    report.emit(args.json.as_ref())
}
