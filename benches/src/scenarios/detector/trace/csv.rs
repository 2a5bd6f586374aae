//! Trace files: arrival lines (`t`, `t,member` or `t,member,seq`), the coordinator's
//! event lines (`closed`, `opened`, `pause`, `lag`, `silent`), a `crash,<t>` line,
//! optionally a header line, and `#` comments.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::Input;

/// A line of a trace file that is neither an arrival, an event nor a crash: where and
/// why.
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
    /// A heartbeat, or an event the coordinator recorded.
    Input(Input),
    /// The process died at this time, seconds (`crash,<t>`).
    Crash(f64),
}

/// What the first field of an event line names.
const EVENTS: &str = "closed, opened, pause, lag, silent";

/// Reads a trace file line by line. Each line is one of:
///
/// - an arrival: `t` (one member), `t,member` or `t,member,seq` (a group's trace, as
///   `rollcall trace` writes it), `t` in seconds on the coordinator's clock and `seq`
///   the heartbeat's sequence number (without it, each member's beats are numbered 1,
///   2, 3…: no losses);
/// - an event: `closed,t,member` (its connection closed), `opened,t,member` (it is
///   heard on a new connection), `pause,t,dur` (the coordinator was paused for `dur`
///   seconds, measured at its wake `t`), `lag,t,dur` (the server reported it was `dur`
///   behind its frames), `silent,t,dur` (the whole server heard no member frame for
///   `dur` up to `t`);
/// - `crash,t`: when the measured member's process died.
///
/// Times are in order per member (equal times allowed); arrival lines have the same
/// number of fields throughout; a header may come first; blank lines and `#` comments
/// are skipped. Anything else is an error naming the line. Members are numbered in the
/// order they are first seen, the one named by [`Self::with_member`] (else the first)
/// being member 0: the one whose crash is measured.
#[derive(Debug)]
pub(crate) struct CsvReader<R> {
    input: R,
    path: String,
    line: u64,
    buf: String,
    /// Whether a line other than blanks and comments was seen (a header may only come
    /// first).
    seen: bool,
    crash_line: Option<u64>,
    /// Members by name, numbered as first seen (the chosen one 0).
    members: HashMap<String, usize>,
    /// Per member: its last arrival and its last sequence number.
    last: Vec<(f64, u64)>,
    /// Fields per arrival line, fixed by the first.
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
            crash_line: None,
            members: HashMap::new(),
            last: Vec::new(),
            columns: None,
        }
    }

    /// In a group trace, `member` is member 0, whose crash is measured (default: the
    /// first member in the file).
    pub(crate) fn with_member(mut self, member: Option<String>) -> Self {
        if let Some(m) = member {
            self.members.insert(m, 0);
            self.last.push((f64::NEG_INFINITY, 0));
        }
        self
    }

    /// Members seen so far.
    pub(crate) fn members(&self) -> usize {
        self.members.len()
    }

    fn error(&self, message: String) -> CsvError {
        CsvError {
            path: self.path.clone(),
            line: self.line,
            message,
        }
    }

    /// The member named `name`, numbered on first sight.
    fn member(&mut self, name: &str) -> Result<usize, CsvError> {
        if name.is_empty() {
            return Err(self.error("an empty member id".into()));
        }
        if let Some(&i) = self.members.get(name) {
            return Ok(i);
        }
        let i = self.members.len();
        self.members.insert(name.to_owned(), i);
        self.last.push((f64::NEG_INFINITY, 0));
        Ok(i)
    }

    /// The next arrival, event or crash; `None` at the end of the file.
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
            let text = std::mem::take(&mut self.buf);
            let result = self.parse(text.trim());
            self.buf = text;
            match result? {
                Some(line) => return Ok(Some(line)),
                None => continue,
            }
        }
    }

    /// One line's meaning; `None` for a blank line, a comment or a header.
    fn parse(&mut self, text: &str) -> Result<Option<Line>, CsvError> {
        if text.is_empty() || text.starts_with('#') {
            return Ok(None);
        }
        let first = !self.seen;
        self.seen = true;
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        let keyword = fields[0].to_ascii_lowercase();
        match keyword.as_str() {
            "crash" => {
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
            "closed" | "opened" => {
                let [_, t, member] = fields[..] else {
                    return Err(self.error(format!(
                        "'{text}': a connection line is '{keyword},<seconds>,<member>'"
                    )));
                };
                let t = self.time(t, "time")?;
                let member = self.member(member)?;
                self.in_order(member, t)?;
                return Ok(Some(Line::Input(if keyword == "closed" {
                    Input::Closed { t, member }
                } else {
                    Input::Opened { t, member }
                })));
            }
            "pause" | "lag" | "silent" => {
                let [_, t, dur] = fields[..] else {
                    return Err(self.error(format!(
                        "'{text}': a coordinator event is '{keyword},<seconds>,<duration in seconds>'"
                    )));
                };
                let t = self.time(t, "time")?;
                let dur = self.time(dur, "duration")?;
                return Ok(Some(Line::Input(match keyword.as_str() {
                    "pause" => Input::Pause { t, dur },
                    "lag" => Input::Lag { t, dur },
                    _ => Input::Silent { t, dur },
                })));
            }
            _ => {}
        }
        if first && fields[0].parse::<f64>().is_err() {
            // A header.
            return Ok(None);
        }
        if *self.columns.get_or_insert(fields.len()) != fields.len() {
            return Err(self.error(format!(
                "'{text}': {} fields where the first arrival line had {}",
                fields.len(),
                self.columns.unwrap_or_default()
            )));
        }
        let (t, member, seq) = match fields[..] {
            [t] => (t, None, None),
            [t, member] => (t, Some(member), None),
            [t, member, seq] => (t, Some(member), Some(seq)),
            _ => {
                return Err(self.error(format!(
                    "'{text}': expected an arrival ('t', 't,member' or 't,member,seq'), an event ({EVENTS}) or 'crash,<seconds>'"
                )))
            }
        };
        let t = self.time(t, "arrival time")?;
        let member = match member {
            Some(name) => self.member(name)?,
            // A one-member trace: member 0.
            None => {
                if self.last.is_empty() {
                    self.last.push((f64::NEG_INFINITY, 0));
                }
                0
            }
        };
        let seq = match seq {
            Some(s) => s.parse::<u64>().map_err(|_| {
                self.error(format!(
                    "'{s}' is not a valid sequence number (a whole number)"
                ))
            })?,
            None => self.last[member].1 + 1,
        };
        self.in_order(member, t)?;
        self.last[member].1 = seq;
        Ok(Some(Line::Input(Input::Beat { t, member, seq })))
    }

    /// A member's times must not go back.
    fn in_order(&mut self, member: usize, t: f64) -> Result<(), CsvError> {
        let last = self.last[member].0;
        if t < last {
            return Err(self.error(format!(
                "{t} s is before the member's line above it ({last} s): times must be in order"
            )));
        }
        self.last[member].0 = t;
        Ok(())
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
