//! Heartbeat traces for the detector lab: arrival times (seconds, on the coordinator's
//! clock, in order) read from a CSV file or made by a synthetic generator, one at a
//! time: nothing holds a whole trace.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// The most arrivals a generated trace may have (`--duration` / `--interval`).
pub(crate) const MAX_GENERATED: f64 = 1e9;

/// Parses a time in seconds: `1.5`, `1.5s`, `250ms`, `2m`, `1h`.
pub(crate) fn seconds(text: &str) -> Result<f64, String> {
    let s = text.trim();
    let (number, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    match number.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
        _ => Err(format!(
            "invalid time '{text}': expected seconds (1.5, 1.5s) or 250ms, 2m, 1h"
        )),
    }
}

/// Parses a finite number.
pub(crate) fn number(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("invalid number '{}'", text.trim())),
    }
}

// ----------------------------------------------------------------------------------
// CSV
// ----------------------------------------------------------------------------------

/// A line of a trace file that is neither an arrival nor a crash: where and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CsvError {
    pub(crate) path: String,
    /// 1-based; 0 when the file could not be opened or read at all.
    pub(crate) line: u64,
    pub(crate) message: String,
}

impl fmt::Display for CsvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.path, self.message)
        } else {
            write!(f, "{}:{}: {}", self.path, self.line, self.message)
        }
    }
}

/// One meaningful line of a trace file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Line {
    /// A heartbeat arrived at this time, seconds.
    Arrival(f64),
    /// The process died at this time, seconds (`crash,<t>`).
    Crash(f64),
}

/// Reads a trace file line by line: one arrival time in seconds per line, in order
/// (equal times allowed); optionally a header as the first line, a `crash,<t>` line,
/// blank lines and `#` comments. Anything else is an error naming the line.
#[derive(Debug)]
pub(crate) struct CsvReader<R> {
    input: R,
    path: String,
    line: u64,
    buf: String,
    /// Whether a line other than blanks and comments was seen (a header may only come
    /// first).
    seen: bool,
    last: Option<f64>,
    crash_line: Option<u64>,
    /// In a group trace (`time,member` lines, as `rollcall trace` writes them), the
    /// member whose arrivals are read: the one asked for, or else the first seen.
    member: Option<String>,
    /// Fields per arrival line, fixed by the first (1, or 2 in a group trace).
    columns: Option<usize>,
}

impl CsvReader<BufReader<File>> {
    /// Opens `path`.
    pub(crate) fn open(path: &Path) -> Result<Self, CsvError> {
        let file = File::open(path).map_err(|e| CsvError {
            path: path.display().to_string(),
            line: 0,
            message: format!("cannot open: {e}"),
        })?;
        Ok(Self::new(
            BufReader::with_capacity(1 << 16, file),
            path.display().to_string(),
        ))
    }
}

impl<R: BufRead> CsvReader<R> {
    /// Reads `input`, named `path` in errors.
    pub(crate) fn new(input: R, path: String) -> Self {
        Self {
            input,
            path,
            line: 0,
            buf: String::new(),
            seen: false,
            last: None,
            crash_line: None,
            member: None,
            columns: None,
        }
    }

    /// In a group trace, reads only `member`'s arrivals (default: the first member's).
    pub(crate) fn with_member(mut self, member: Option<String>) -> Self {
        self.member = member;
        self
    }

    fn error(&self, message: String) -> CsvError {
        CsvError {
            path: self.path.clone(),
            line: self.line,
            message,
        }
    }

    /// The next arrival or crash; `None` at the end of the file.
    pub(crate) fn next_line(&mut self) -> Result<Option<Line>, CsvError> {
        // Bounded by the file: every turn consumes a line.
        loop {
            self.buf.clear();
            let n = self.input.read_line(&mut self.buf).map_err(|e| CsvError {
                path: self.path.clone(),
                line: self.line + 1,
                message: format!("cannot read: {e}"),
            })?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            let text = self.buf.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let first = !self.seen;
            self.seen = true;
            let fields: Vec<&str> = text.split(',').map(str::trim).collect();
            if fields[0].eq_ignore_ascii_case("crash") {
                let [_, t] = fields[..] else {
                    return Err(self.error(format!("'{text}': a crash line is 'crash,<seconds>'")));
                };
                let t = self.time(t, "crash time")?;
                if let Some(first) = self.crash_line {
                    return Err(
                        self.error(format!("a second crash line (the first is line {first})"))
                    );
                }
                self.crash_line = Some(self.line);
                return Ok(Some(Line::Crash(t)));
            }
            if first && fields[0].parse::<f64>().is_err() {
                // A header.
                continue;
            }
            if *self.columns.get_or_insert(fields.len()) != fields.len() {
                return Err(self.error(format!(
                    "'{text}': {} fields where the first arrival line had {}",
                    fields.len(),
                    self.columns.unwrap_or_default()
                )));
            }
            match fields[..] {
                [_] => {}
                // A group trace's line: the arrival of one member.
                [_, member] if !member.is_empty() => match &self.member {
                    Some(wanted) if wanted != member => continue,
                    Some(_) => {}
                    None => {
                        eprintln!(
                            "{}: a group trace; reading member {member}'s arrivals (choose with --member)",
                            self.path
                        );
                        self.member = Some(member.to_owned());
                    }
                },
                _ => {
                    return Err(self.error(format!(
                        "'{text}': expected one arrival time in seconds, 'time,member', or 'crash,<seconds>'"
                    )))
                }
            }
            let t = self.time(fields[0], "arrival time")?;
            if let Some(last) = self.last {
                if t < last {
                    return Err(self.error(format!(
                        "arrival {t} s is before the one above it ({last} s): arrivals must be in order"
                    )));
                }
            }
            self.last = Some(t);
            return Ok(Some(Line::Arrival(t)));
        }
    }

    fn time(&self, text: &str, what: &str) -> Result<f64, CsvError> {
        match text.parse::<f64>() {
            Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
            _ => Err(self.error(format!(
                "'{text}' is not a valid {what} (seconds, a finite number, at least 0)"
            ))),
        }
    }
}

// ----------------------------------------------------------------------------------
// Synthetic traces
// ----------------------------------------------------------------------------------

/// A small deterministic generator (xorshift), the one the coordinator's replay tests
/// use, so a preset's seed `s` is their seed `s`.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    fn new(state: u64) -> Self {
        Self(if state == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            state
        })
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The synthetic traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Preset {
    /// Seed 002's: a beat every interval with ±jitter, a stop-the-world pause at
    /// pause-at whose held beats arrive together at its end, death at duration.
    Seed002,
    /// A beat every interval, each delayed by up to jitter (in order) for noisy-for, then
    /// by up to calm-jitter; death half an interval after the last.
    NoisyThenCalm,
    /// A beat every interval, delayed by up to jitter; before a beat, with chance
    /// pause-rate, a pause of Pareto length (scale pause, shape tail-shape, at most
    /// pause-cap) that holds the beats back; death at duration.
    HeavyTail,
    /// A beat every interval, delayed by up to jitter; beats lost in runs (a run starts
    /// with chance loss per beat, lasts burst beats on average); death at duration.
    BurstLoss,
    /// A beat whose interval drifts as interval × (1 + drift · sin(2πt / period)),
    /// delayed by up to jitter; death at duration.
    Drift,
}

impl Preset {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Seed002 => "seed002",
            Self::NoisyThenCalm => "noisy-then-calm",
            Self::HeavyTail => "heavy-tail",
            Self::BurstLoss => "burst-loss",
            Self::Drift => "drift",
        }
    }

    /// Mixed into the seed: the coordinator's replay tests use seed × 7919 for seed
    /// 002's trace and seed × 104,729 for noisy then calm.
    fn multiplier(self) -> u64 {
        match self {
            Self::Seed002 => 7919,
            Self::NoisyThenCalm => 104_729,
            Self::HeavyTail => 15_485_863,
            Self::BurstLoss => 32_452_843,
            Self::Drift => 49_979_687,
        }
    }

    /// The session timeout bounding the adaptive detector, unless `--session` says:
    /// what the coordinator's replay tests use.
    pub(crate) fn session(self) -> f64 {
        match self {
            Self::NoisyThenCalm => 30.0,
            _ => 10.0,
        }
    }
}

/// A generator parameter: its option name and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    Interval,
    Duration,
    Jitter,
    Pause,
    PauseAt,
    CalmJitter,
    NoisyFor,
    PauseRate,
    TailShape,
    PauseCap,
    Loss,
    Burst,
    Drift,
    Period,
}

impl Param {
    pub(crate) const ALL: [Self; 14] = [
        Self::Interval,
        Self::Duration,
        Self::Jitter,
        Self::Pause,
        Self::PauseAt,
        Self::CalmJitter,
        Self::NoisyFor,
        Self::PauseRate,
        Self::TailShape,
        Self::PauseCap,
        Self::Loss,
        Self::Burst,
        Self::Drift,
        Self::Period,
    ];

    pub(crate) fn option(self) -> &'static str {
        match self {
            Self::Interval => "--interval",
            Self::Duration => "--duration",
            Self::Jitter => "--jitter",
            Self::Pause => "--pause",
            Self::PauseAt => "--pause-at",
            Self::CalmJitter => "--calm-jitter",
            Self::NoisyFor => "--noisy-for",
            Self::PauseRate => "--pause-rate",
            Self::TailShape => "--tail-shape",
            Self::PauseCap => "--pause-cap",
            Self::Loss => "--loss",
            Self::Burst => "--burst",
            Self::Drift => "--drift",
            Self::Period => "--period",
        }
    }

    fn key(self) -> &'static str {
        &self.option()[2..]
    }

    /// The preset's default, `None` when the preset has no such parameter.
    fn default_for(self, preset: Preset) -> Option<f64> {
        use Preset as P;
        match (self, preset) {
            (Self::Interval, _) => Some(1.0),
            (Self::Duration, P::Seed002) => Some(100.0),
            (Self::Duration, P::NoisyThenCalm) => Some(1800.0),
            (Self::Duration, _) => Some(3600.0),
            (Self::Jitter, P::Seed002) => Some(0.1),
            (Self::Jitter, P::NoisyThenCalm) => Some(2.5),
            (Self::Jitter, _) => Some(0.05),
            (Self::Pause, P::Seed002) => Some(3.5),
            (Self::Pause, P::HeavyTail) => Some(0.5),
            (Self::PauseAt, P::Seed002) => Some(40.0),
            (Self::CalmJitter, P::NoisyThenCalm) => Some(0.05),
            (Self::NoisyFor, P::NoisyThenCalm) => Some(600.0),
            (Self::PauseRate, P::HeavyTail) => Some(0.005),
            (Self::TailShape, P::HeavyTail) => Some(1.5),
            (Self::PauseCap, P::HeavyTail) => Some(60.0),
            (Self::Loss, P::BurstLoss) => Some(0.01),
            (Self::Burst, P::BurstLoss) => Some(3.0),
            (Self::Drift, P::Drift) => Some(0.5),
            (Self::Period, P::Drift) => Some(1800.0),
            _ => None,
        }
    }
}

/// A preset's parameters, its defaults with the overrides given.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Params {
    pub(crate) preset: Preset,
    #[serde(flatten)]
    values: std::collections::BTreeMap<&'static str, f64>,
}

impl Params {
    /// `preset`'s parameters, each of `overrides` replacing its default. A parameter the
    /// preset does not have, or a value out of range, is an error.
    pub(crate) fn new(preset: Preset, overrides: &[(Param, f64)]) -> Result<Self, String> {
        let mut values = std::collections::BTreeMap::new();
        for p in Param::ALL {
            if let Some(v) = p.default_for(preset) {
                values.insert(p.key(), v);
            }
        }
        for &(p, v) in overrides {
            if p.default_for(preset).is_none() {
                let own: Vec<&str> = Param::ALL
                    .into_iter()
                    .filter(|p| p.default_for(preset).is_some())
                    .map(Param::option)
                    .collect();
                return Err(format!(
                    "{} does not apply to preset {} (its parameters: {})",
                    p.option(),
                    preset.name(),
                    own.join(", ")
                ));
            }
            values.insert(p.key(), v);
        }
        let params = Self { preset, values };
        params.validate()?;
        Ok(params)
    }

    pub(crate) fn get(&self, p: Param) -> f64 {
        self.values.get(p.key()).copied().unwrap_or(0.0)
    }

    fn validate(&self) -> Result<(), String> {
        let interval = self.get(Param::Interval);
        let duration = self.get(Param::Duration);
        if interval.is_nan() || interval <= 0.0 {
            return Err("--interval must be above zero".into());
        }
        if duration / interval > MAX_GENERATED {
            return Err(format!(
                "--duration / --interval gives over {MAX_GENERATED:e} beats"
            ));
        }
        for p in [Param::PauseRate, Param::Loss] {
            if self.values.contains_key(p.key()) && !(0.0..=1.0).contains(&self.get(p)) {
                return Err(format!("{} is a chance, from 0 to 1", p.option()));
            }
        }
        if self.values.contains_key("burst") && self.get(Param::Burst) < 1.0 {
            return Err("--burst is a mean run length in beats, at least 1".into());
        }
        if self.values.contains_key("tail-shape")
            && self.get(Param::TailShape).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        {
            return Err("--tail-shape must be above zero".into());
        }
        if self.values.contains_key("drift") && !(0.0..1.0).contains(&self.get(Param::Drift)) {
            return Err("--drift must be at least 0 and below 1".into());
        }
        if self.values.contains_key("period")
            && self.get(Param::Period).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        {
            return Err("--period must be above zero".into());
        }
        Ok(())
    }

    /// When the process dies, seconds.
    pub(crate) fn crash(&self) -> f64 {
        let interval = self.get(Param::Interval);
        let duration = self.get(Param::Duration);
        match self.preset {
            Preset::NoisyThenCalm => {
                // Half a second after the last beat sent, the sends counted exactly as
                // the generator counts them (bounded by the check in `validate`).
                let mut sent = 0.0;
                while sent < duration {
                    sent += interval;
                }
                sent + 0.5
            }
            _ => duration,
        }
    }

    /// One line describing the trace.
    pub(crate) fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        for (k, v) in &self.values {
            parts.push(format!("{k} {v}"));
        }
        format!("{} ({})", self.preset.name(), parts.join(", "))
    }

    /// The trace for `seed`.
    pub(crate) fn generate(&self, seed: u64) -> Generator {
        Generator {
            p: self.clone(),
            rng: Rng::new(seed.wrapping_mul(self.preset.multiplier())),
            clock: match self.preset {
                Preset::NoisyThenCalm => 0.0,
                _ => self.get(Param::Interval),
            },
            last: None,
            bad: false,
            beats: 0,
        }
    }
}

/// A synthetic trace, arrival by arrival.
#[derive(Debug, Clone)]
pub(crate) struct Generator {
    p: Params,
    rng: Rng,
    /// When the next beat is due to be sent (the preset's own schedule).
    clock: f64,
    last: Option<f64>,
    /// Burst loss: in a run of lost beats.
    bad: bool,
    beats: u64,
}

impl Iterator for Generator {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        let p = &self.p;
        let interval = p.get(Param::Interval);
        let duration = p.get(Param::Duration);
        let jitter = p.get(Param::Jitter);
        // Each turn sends one beat; bounded by the duration (at most MAX_GENERATED).
        for _ in 0..=(MAX_GENERATED as u64) {
            if self.clock >= duration {
                return None;
            }
            self.beats += 1;
            let at = match p.preset {
                Preset::Seed002 => {
                    let (pause_at, pause) = (p.get(Param::PauseAt), p.get(Param::Pause));
                    let mut at = self.clock + (self.rng.unit() - 0.5) * (2.0 * jitter);
                    if (pause_at..pause_at + pause).contains(&at) {
                        at = pause_at + pause + self.rng.unit() * 0.05;
                    }
                    self.clock += interval;
                    // Beats held by the pause arrive together; one that would not be
                    // after the last is not seen.
                    if self.last.is_some_and(|last| at <= last) {
                        continue;
                    }
                    at
                }
                Preset::NoisyThenCalm => {
                    // As the coordinator's replay tests count: the clock is the last
                    // send (0 before the first), and a beat is sent while it is before
                    // the duration.
                    self.clock += interval;
                    let sent = self.clock;
                    let spread = if sent < p.get(Param::NoisyFor) {
                        jitter
                    } else {
                        p.get(Param::CalmJitter)
                    };
                    let at = sent + spread * self.rng.unit();
                    self.last.map_or(at, |l| at.max(l + 0.001))
                }
                Preset::HeavyTail => {
                    let mut send = self.clock;
                    if self.rng.unit() < p.get(Param::PauseRate) {
                        // Pareto by inversion; 1 - u is in (0, 1].
                        let u = 1.0 - self.rng.unit();
                        let pause = p.get(Param::Pause) * u.powf(-1.0 / p.get(Param::TailShape));
                        send += pause.min(p.get(Param::PauseCap));
                    }
                    if send >= duration {
                        self.clock = send;
                        return None;
                    }
                    self.clock = send + interval;
                    let at = send + jitter * self.rng.unit();
                    self.last.map_or(at, |l| at.max(l))
                }
                Preset::BurstLoss => {
                    let send = self.clock;
                    self.clock += interval;
                    let u = self.rng.unit();
                    self.bad = if self.bad {
                        u >= 1.0 / p.get(Param::Burst)
                    } else {
                        u < p.get(Param::Loss)
                    };
                    if self.bad {
                        continue;
                    }
                    let at = send + jitter * self.rng.unit();
                    self.last.map_or(at, |l| at.max(l))
                }
                Preset::Drift => {
                    let send = self.clock;
                    let phase = std::f64::consts::TAU * send / p.get(Param::Period);
                    self.clock += interval * (1.0 + p.get(Param::Drift) * phase.sin());
                    let at = send + jitter * self.rng.unit();
                    self.last.map_or(at, |l| at.max(l))
                }
            };
            self.last = Some(at);
            return Some(at);
        }
        None
    }
}

/// Where a run's arrivals come from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    Csv(PathBuf),
    Synthetic(Params),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<Line>, CsvError> {
        let mut r = CsvReader::new(text.as_bytes(), "t.csv".into());
        let mut out = Vec::new();
        for _ in 0..1000 {
            match r.next_line()? {
                Some(l) => out.push(l),
                None => return Ok(out),
            }
        }
        panic!("the reader did not end");
    }

    #[test]
    fn a_group_trace_is_read_for_one_member() {
        let text = "time_s,member_id\n0.5,a\n0.6,b\n1.5,a\n0.4,b\n2.5,a\n";
        let read = |member: Option<&str>| {
            let mut r = CsvReader::new(text.as_bytes(), "t.csv".into())
                .with_member(member.map(str::to_owned));
            let mut times = Vec::new();
            while let Some(line) = r.next_line().unwrap() {
                if let Line::Arrival(t) = line {
                    times.push(t);
                }
            }
            times
        };
        assert_eq!(read(None), vec![0.5, 1.5, 2.5]);
        assert_eq!(read(Some("a")), vec![0.5, 1.5, 2.5]);
        // b's own arrivals out of order are an error, but not a's.
        let mut r = CsvReader::new(text.as_bytes(), "t.csv".into()).with_member(Some("b".into()));
        let mut result = Ok(None);
        for _ in 0..10 {
            result = r.next_line();
            if !matches!(result, Ok(Some(_))) {
                break;
            }
        }
        let e = result.unwrap_err();
        assert_eq!(e.line, 5, "{e:?}");
    }

    #[test]
    fn csv_lines_headers_comments_and_crash() {
        let lines = read("time\n# a comment\n0.5\n\n1.5\r\n1.5\ncrash,3\n2.25\n").expect("valid");
        assert_eq!(
            lines,
            vec![
                Line::Arrival(0.5),
                Line::Arrival(1.5),
                Line::Arrival(1.5),
                Line::Crash(3.0),
                Line::Arrival(2.25),
            ]
        );
        assert_eq!(read("").expect("empty"), vec![]);
    }

    #[test]
    fn csv_bad_lines_are_errors_with_their_line_number() {
        let cases = [
            ("1\n2\nabc\n4\n", 3, "not a valid arrival time"),
            ("time\nsecs\n", 2, "not a valid arrival time"),
            ("1\n2,3\n", 2, "2 fields where the first arrival line had 1"),
            ("1,a,b\n", 1, "expected one arrival time"),
            ("1\n0.5\n", 2, "must be in order"),
            ("1\n-2\n", 2, "at least 0"),
            ("1\nNaN\n", 2, "finite"),
            ("1\ninf\n", 2, "finite"),
            ("crash\n", 1, "crash line is"),
            ("crash,x\n", 1, "not a valid crash time"),
            (
                "crash,1\n\ncrash,2\n",
                3,
                "second crash line (the first is line 1)",
            ),
        ];
        for (text, line, what) in cases {
            let e = read(text).expect_err(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(what), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("t.csv:{line}: ")), "{e}");
        }
        // Invalid UTF-8 is a read error, not a panic.
        let mut r = CsvReader::new(&b"1\n\xff\xfe\n"[..], "t.csv".into());
        assert_eq!(r.next_line(), Ok(Some(Line::Arrival(1.0))));
        let e = r.next_line().expect_err("invalid UTF-8");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("cannot read"), "{e}");
    }

    #[test]
    fn times_parse_with_units() {
        assert_eq!(seconds("1.5"), Ok(1.5));
        assert_eq!(seconds("1.5s"), Ok(1.5));
        assert_eq!(seconds("250ms"), Ok(0.25));
        assert_eq!(seconds("2m"), Ok(120.0));
        assert!(seconds("-1").is_err());
        assert!(seconds("fast").is_err());
        assert_eq!(number(" 8"), Ok(8.0));
        assert!(number("NaN").is_err());
    }

    /// The seed 002 preset is the trace of the coordinator's replay tests.
    #[test]
    fn seed002_is_the_coordinators_trace() {
        let p = Params::new(Preset::Seed002, &[]).expect("defaults");
        assert_eq!(p.crash(), 100.0);
        let arrivals: Vec<f64> = p.generate(1).collect();
        // Beats 1..=99, the ones held by the pause arriving as one.
        assert!((95..=99).contains(&arrivals.len()), "{}", arrivals.len());
        assert!(arrivals.windows(2).all(|w| w[1] > w[0]));
        let longest = arrivals.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
        assert!((3.4..4.7).contains(&longest), "{longest}");
        // The same seed, the same trace; another seed, another.
        assert_eq!(arrivals, p.generate(1).collect::<Vec<_>>());
        assert_ne!(arrivals, p.generate(2).collect::<Vec<_>>());
    }

    #[test]
    fn every_preset_generates_an_ordered_bounded_trace() {
        for preset in [
            Preset::Seed002,
            Preset::NoisyThenCalm,
            Preset::HeavyTail,
            Preset::BurstLoss,
            Preset::Drift,
        ] {
            let p = Params::new(preset, &[(Param::Duration, 300.0)]).expect("valid");
            let arrivals: Vec<f64> = p.generate(7).collect();
            assert!(arrivals.len() > 100, "{preset:?}: {}", arrivals.len());
            assert!(arrivals.len() <= 300, "{preset:?}: {}", arrivals.len());
            assert!(arrivals.windows(2).all(|w| w[1] >= w[0]), "{preset:?}");
            assert!(*arrivals.last().unwrap() <= p.crash() + 1.0, "{preset:?}");
        }
        assert_eq!(
            Params::new(Preset::NoisyThenCalm, &[])
                .expect("defaults")
                .crash(),
            1800.5
        );
        let e = Params::new(Preset::Drift, &[(Param::Loss, 0.1)]).expect_err("not drift's");
        assert!(e.contains("--loss does not apply to preset drift"), "{e}");
        assert!(Params::new(Preset::Seed002, &[(Param::Interval, 0.0)]).is_err());
    }
}
