//! Replaying the runs: each run's arrivals streamed once into every setting, with
//! progress lines and the time limit (`Clock`), and the timeline of the first run.

use std::time::{Duration, Instant};

use super::qos::{Band, RunQos, Setting, Tally};
use super::trace::{CsvReader, Line, Source};
use super::{BestFixed, DetectorArgs, Plan, CLOCK_EVERY, TIMELINE_ARRIVALS, TIMELINE_BANDS};
use crate::stats::fmt_count;

#[derive(Debug)]
pub(super) struct Clock {
    pub(super) started: Instant,
    last_line: Instant,
    limit: Duration,
    quiet: bool,
}

impl Clock {
    pub(super) fn new(limit: Duration, quiet: bool) -> Self {
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

/// The timeline of the first run.
#[derive(Debug, Default)]
pub(super) struct Timeline {
    pub(super) from: f64,
    pub(super) to: f64,
    pub(super) arrivals: Vec<f64>,
    pub(super) rows: Vec<Vec<Band>>,
    pub(super) truncated: bool,
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
pub(super) fn scan(
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

/// What every run found: per setting, one result a run; the best fixed timeout of
/// each run; the arrivals replayed in all.
pub(super) struct Replayed {
    pub(super) per_setting: Vec<Vec<RunQos>>,
    pub(super) best: BestFixed,
    pub(super) arrivals: u64,
}

/// Replays every run of `plan`, the first one drawn into `timeline` when asked.
pub(super) fn replay_runs(
    args: &DetectorArgs,
    plan: &Plan<'_>,
    clock: &mut Clock,
    mut timeline: Option<&mut Timeline>,
) -> Result<Replayed, String> {
    let (settings, crash, runs) = (&plan.settings, plan.crash, plan.runs);
    let mut per_setting: Vec<Vec<RunQos>> = vec![Vec::with_capacity(runs); settings.len()];
    let mut best = BestFixed::default();
    let mut arrivals = 0u64;
    for (i, &seed) in plan.seeds.iter().enumerate() {
        let what = format!("run {}/{runs}", i + 1);
        let tl = if i == 0 { timeline.take() } else { None };
        let result = match plan.source {
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
                replay_run(settings, crash, &mut next, clock, &what, tl)?
            }
            Source::Synthetic(p) => {
                let mut g = p.generate(seed);
                let mut next = || Ok(g.next());
                replay_run(settings, crash, &mut next, clock, &what, tl)?
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
    Ok(Replayed {
        per_setting,
        best,
        arrivals,
    })
}
