//! Replaying the runs: each run's inputs (the members' arrivals and the coordinator's
//! recorded events, merged in time order) streamed once into a coordinator per setting
//! and crash kind ([`GroupReplay`]), with progress lines and the time limit (`Clock`),
//! and the timeline of the first run.

use std::time::{Duration, Instant};

use rollcall_coordinator::core::liveness::Verdicts;
use rollcall_coordinator::core::replay::{GroupReplay, ReplayConfig, Verdict};

use super::qos::{Band, CrashKind, RunQos, Setting, Tally};
use super::trace::{CsvReader, Input, Line, Merge, Source, Stream};
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

    /// Called every [`CLOCK_EVERY`] inputs: a progress line once a second, an error past
    /// the time limit.
    fn tick(&mut self, what: &str, count: u64) -> Result<(), String> {
        let now = Instant::now();
        let elapsed = now.duration_since(self.started);
        if elapsed > self.limit {
            return Err(format!(
                "stopped after {} s (--time-limit) while {what}: {} inputs",
                elapsed.as_secs(),
                fmt_count(count as f64)
            ));
        }
        if !self.quiet && now.duration_since(self.last_line) >= Duration::from_secs(1) {
            eprintln!(
                "[{:7.1}s] {what}: {} inputs",
                elapsed.as_secs_f64(),
                fmt_count(count as f64)
            );
            self.last_line = now;
        }
        Ok(())
    }
}

/// The timeline of the first run: member 0's arrivals, and its bands per setting.
#[derive(Debug, Default)]
pub(super) struct Timeline {
    pub(super) from: f64,
    pub(super) to: f64,
    pub(super) arrivals: Vec<f64>,
    pub(super) rows: Vec<Vec<Band>>,
    pub(super) truncated: bool,
}

/// How the lab replays: what every replay of a run shares.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rules {
    /// Renumber each member's beats 1, 2, 3… (`--no-seq`).
    pub(super) no_seq: bool,
    /// Replay no connection: nothing closes (`--no-conn`).
    pub(super) no_conn: bool,
    /// Other members' expulsions count until this many seconds (after it, a synthetic
    /// member's trace ends).
    pub(super) count_until: f64,
}

/// One setting and crash kind replayed over one run: the coordinator, member 0's
/// tally, and the group's false expulsions.
struct GroupTally {
    replay: GroupReplay,
    kind: CrashKind,
    epoch: Instant,
    crash: Option<Instant>,
    session: Duration,
    rules: Rules,
    tally: Tally,
    /// Per member: its last arrival before the input being replayed; the start of the
    /// silence an expulsion not yet proven was for; its beats so far (`--no-seq`).
    last: Vec<Option<Instant>>,
    expelled_from: Vec<Option<Instant>>,
    beats: Vec<u64>,
    false_expulsions: u64,
    early: u64,
    /// Inputs are being replayed (not the final run of the timers past the last).
    streaming: bool,
}

impl GroupTally {
    fn new(
        setting: &Setting,
        kind: CrashKind,
        lease: f64,
        epoch: Instant,
        crash: Option<f64>,
        rules: Rules,
        timeline: Option<(f64, f64, usize)>,
    ) -> Self {
        let session = Duration::from_secs_f64(setting.session_s);
        let config = ReplayConfig::new(setting.detector, &setting.settings(), session)
            .with_lease(Duration::from_secs_f64(lease));
        Self {
            replay: GroupReplay::new(config),
            kind,
            epoch,
            crash: crash.map(|c| epoch + Duration::from_secs_f64(c)),
            session,
            rules,
            tally: Tally::new(epoch, crash, timeline),
            last: Vec::new(),
            expelled_from: Vec::new(),
            beats: Vec::new(),
            false_expulsions: 0,
            early: 0,
            streaming: true,
        }
    }

    fn at(&self, t: f64) -> Instant {
        self.epoch + Duration::from_secs_f64(t)
    }

    fn grow(&mut self, member: usize) {
        if self.last.len() <= member {
            self.last.resize(member + 1, None);
            self.expelled_from.resize(member + 1, None);
            self.beats.resize(member + 1, 0);
        }
    }

    fn after_crash(&self, at: Instant) -> bool {
        self.crash.is_some_and(|c| at >= c)
    }

    fn input(&mut self, input: &Input) {
        let conn = !self.rules.no_conn;
        match *input {
            Input::Beat { t, member, seq } => {
                self.grow(member);
                let at = self.at(t);
                self.beats[member] += 1;
                let seq = if self.rules.no_seq {
                    self.beats[member]
                } else {
                    seq
                };
                self.replay.beat(at, member, seq);
                if member == 0 {
                    self.tally.arrived(at);
                }
                self.take();
                self.last[member] = Some(at);
                return;
            }
            Input::Closed { t, member } => {
                let at = self.at(t);
                // A silent crash closes nothing after it.
                let silenced =
                    member == 0 && self.kind == CrashKind::Silent && self.after_crash(at);
                if conn && !silenced {
                    self.replay.closed(at, member);
                }
            }
            Input::Opened { t, member } => {
                if conn {
                    self.replay.opened(self.at(t), member);
                }
            }
            Input::Pause { t, dur } => self.replay.paused(self.at(t), Duration::from_secs_f64(dur)),
            Input::Lag { t, dur } => self.replay.lagged(self.at(t), Duration::from_secs_f64(dur)),
            Input::Silent { t, dur } => {
                self.replay.silent(self.at(t), Duration::from_secs_f64(dur))
            }
            Input::ProcessDies { t } => {
                if conn && self.kind == CrashKind::Process {
                    self.replay.closed(self.at(t), 0);
                }
            }
        }
        self.take();
    }

    /// The coordinator's verdicts since the last look: member 0's to its tally, every
    /// member's false expulsions counted.
    fn take(&mut self) {
        let count_until = self
            .rules
            .count_until
            .is_finite()
            .then(|| self.at(self.rules.count_until));
        while let Some(j) = self.replay.poll_verdict() {
            self.grow(j.member);
            match j.verdict {
                Verdict::Expelled(_) => {
                    let live = if j.member == 0 {
                        !self.after_crash(j.at)
                    } else {
                        self.streaming && count_until.is_none_or(|u| j.at < u)
                    };
                    if live {
                        self.false_expulsions += 1;
                        self.expelled_from[j.member] = self.last[j.member];
                    }
                }
                Verdict::Rejoined => {
                    if let Some(from) = self.expelled_from[j.member].take() {
                        if j.at.saturating_duration_since(from) <= self.session {
                            self.early += 1;
                        }
                    }
                }
                Verdict::Suspected | Verdict::Recovered => {}
            }
            if j.member == 0 {
                let mut v = Verdicts::default();
                match j.verdict {
                    Verdict::Suspected => v.suspected = Some(j.at),
                    Verdict::Expelled(_) => v.expelled = Some(j.at),
                    Verdict::Recovered | Verdict::Rejoined => v.alive_again = Some(j.at),
                }
                self.tally.observe(v);
            }
        }
    }

    /// The inputs are over: the timers run on until two session timeouts after the
    /// crash (a dead member is expelled by then, guards included), then what the run
    /// found.
    fn finish(mut self) -> (RunQos, Vec<Band>) {
        self.streaming = false;
        if let Some(c) = self.crash {
            self.replay
                .advance(c + 2 * self.session + Duration::from_millis(1));
            self.take();
            // Member 0 expelled before its crash and not heard again: early when the
            // fixed rule at the session would have waited past the crash.
            if let Some(from) = self.expelled_from.first().copied().flatten() {
                if from + self.session >= c {
                    self.early += 1;
                }
            }
        }
        let pending = self.replay.pending(0);
        let (mut qos, bands) = self.tally.finish(pending);
        qos.group_false_expulsions = self.false_expulsions;
        qos.early = self.early;
        (qos, bands)
    }
}

/// What one run found: per setting and crash kind, and member 0's best fixed timeout.
struct RunResult {
    qos: Vec<RunQos>,
    best: Option<Best>,
    inputs: u64,
}

/// Member 0's trace: its longest gap and last arrival.
#[derive(Debug, Clone, Copy)]
struct Best {
    longest: f64,
    last: f64,
}

/// Replays one run: `stream` into every setting and crash kind (`tallies`, setting by
/// setting, each with its kinds).
fn replay_run(
    mut tallies: Vec<GroupTally>,
    stream: &mut Merge<'_>,
    clock: &mut Clock,
    what: &str,
    mut timeline: Option<&mut Timeline>,
    kinds: usize,
    crash: Option<f64>,
) -> Result<RunResult, String> {
    let mut count = 0u64;
    let mut last: Option<f64> = None;
    let mut longest = 0.0f64;
    // Bounded by the trace: a file's lines, or the generators' beats.
    while let Some(input) = stream.next_input()? {
        // A dead process sends nothing: a file's frames of member 0 after `--crash`
        // (a trace recorded without a crash) are not replayed.
        let dead = matches!(input, Input::Beat { t, member: 0, .. } | Input::Opened { t, member: 0 }
            if crash.is_some_and(|c| t >= c));
        if dead {
            count += 1;
            continue;
        }
        if let Input::Beat { t, member: 0, .. } = input {
            if let Some(l) = last {
                longest = longest.max(t - l);
            }
            last = Some(t);
            if let Some(tl) = timeline.as_deref_mut() {
                if t >= tl.from && t <= tl.to {
                    if tl.arrivals.len() < TIMELINE_ARRIVALS {
                        tl.arrivals.push(t);
                    } else {
                        tl.truncated = true;
                    }
                }
            }
        }
        for g in &mut tallies {
            g.input(&input);
        }
        if matches!(input, Input::ProcessDies { .. }) {
            // The lab's own input, not the trace's.
            continue;
        }
        count += 1;
        if count.is_multiple_of(CLOCK_EVERY) {
            clock.tick(what, count)?;
        }
    }
    let mut qos = Vec::with_capacity(tallies.len());
    for (i, g) in tallies.into_iter().enumerate() {
        let (q, bands) = g.finish();
        // The timeline shows each setting's first crash kind.
        if i % kinds == 0 {
            if let Some(tl) = timeline.as_deref_mut() {
                if bands.len() >= TIMELINE_BANDS {
                    tl.truncated = true;
                }
                tl.rows.push(bands);
            }
        }
        qos.push(q);
    }
    Ok(RunResult {
        qos,
        best: last.map(|last| Best { longest, last }),
        inputs: count,
    })
}

/// Reads a trace file once for its crash line, its arrival count and its members.
pub(super) fn scan(
    path: &std::path::Path,
    member: Option<String>,
    clock: &mut Clock,
) -> Result<(Option<f64>, u64, usize), String> {
    let mut r = CsvReader::open(path)
        .map_err(|e| e.to_string())?
        .with_member(member);
    let (mut crash, mut count) = (None, 0u64);
    while let Some(line) = r.next_line().map_err(|e| e.to_string())? {
        match line {
            Line::Crash(c) => crash = Some(c),
            Line::Input(_) => {
                count += 1;
                if count % CLOCK_EVERY == 0 {
                    clock.tick("scanning the trace for its crash line", count)?;
                }
            }
        }
    }
    Ok((crash, count, r.members()))
}

/// What every run found: per setting and crash kind, one result a run; the best fixed
/// timeout of each run, per crash kind; the inputs replayed in all.
pub(super) struct Replayed {
    pub(super) per_setting: Vec<Vec<RunQos>>,
    pub(super) best: Vec<BestFixed>,
    pub(super) inputs: u64,
}

/// The single input of the lab's own: member 0's process dying at `crash` (its
/// connection closing `delay` later, for the replays of a process crash).
fn process_dies<'a>(crash: Option<f64>, delay: f64) -> Stream<'a> {
    let mut once = crash.map(|c| Input::ProcessDies { t: c + delay });
    Box::new(move || Ok(once.take()))
}

/// Replays every run of `plan`, the first one drawn into `timeline` when asked.
pub(super) fn replay_runs(
    args: &DetectorArgs,
    plan: &Plan<'_>,
    clock: &mut Clock,
    mut timeline: Option<&mut Timeline>,
) -> Result<Replayed, String> {
    let (settings, crash, runs, kinds) = (&plan.settings, plan.crash, plan.runs, &plan.kinds);
    let mut per_setting: Vec<Vec<RunQos>> =
        vec![Vec::with_capacity(runs); settings.len() * kinds.len()];
    let mut best: Vec<BestFixed> = kinds
        .iter()
        .map(|&k| BestFixed {
            crash: k,
            ..BestFixed::default()
        })
        .collect();
    let mut inputs = 0u64;
    for (i, &seed) in plan.seeds.iter().enumerate() {
        let what = format!("run {}/{runs}", i + 1);
        let tl = if i == 0 { timeline.take() } else { None };
        let window = tl.as_ref().map(|t| (t.from, t.to, TIMELINE_BANDS));
        let epoch = Instant::now();
        let mut tallies = Vec::with_capacity(settings.len() * kinds.len());
        for s in settings {
            for &k in kinds {
                tallies.push(GroupTally::new(
                    s,
                    k,
                    plan.lease_for(s),
                    epoch,
                    crash,
                    plan.rules,
                    window,
                ));
            }
        }
        let mut sources: Vec<Stream<'_>> = Vec::new();
        match plan.source {
            Source::Csv(path) => {
                let mut r = CsvReader::open(path)
                    .map_err(|e| e.to_string())?
                    .with_member(args.member.clone());
                sources.push(Box::new(move || {
                    // Bounded by the file; crash lines were read by the scan.
                    loop {
                        match r.next_line().map_err(|e| e.to_string())? {
                            Some(Line::Input(input)) => return Ok(Some(input)),
                            Some(Line::Crash(_)) => {}
                            None => return Ok(None),
                        }
                    }
                }));
            }
            Source::Synthetic(p) => {
                for m in 0..plan.members {
                    let until = (m > 0).then_some(plan.others_until);
                    let mut g = p.generate_member(seed, m as u64, until);
                    sources.push(Box::new(move || {
                        Ok(g.next().map(|(t, seq)| Input::Beat { t, member: m, seq }))
                    }));
                }
            }
        }
        sources.push(process_dies(crash, args.close_delay));
        let mut stream = Merge::new(sources);
        let result = replay_run(tallies, &mut stream, clock, &what, tl, kinds.len(), crash)?;
        inputs += result.inputs;
        for (acc, q) in per_setting.iter_mut().zip(result.qos) {
            acc.push(q);
        }
        if let (Some(c), Some(b)) = (crash, result.best) {
            for bf in &mut best {
                let timeout = b.longest + 0.001;
                // A process crash is caught by the lease, if that is sooner.
                let wait = match bf.crash {
                    CrashKind::Process if !plan.rules.no_conn => {
                        timeout.min(plan.lease_for(&Setting::fixed(timeout)))
                    }
                    _ => timeout,
                };
                bf.timeout_by_run_s.push(timeout);
                bf.detection_by_run_s.push((b.last + wait - c).max(0.0));
            }
        }
    }
    Ok(Replayed {
        per_setting,
        best,
        inputs,
    })
}
