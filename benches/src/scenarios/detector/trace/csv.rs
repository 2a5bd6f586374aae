//! Trace files: one arrival time per line, optionally a header line, `#` comments,
//! a `crash,<seconds>` line, and `time,member` lines of a group's trace.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

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
