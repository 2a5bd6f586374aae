//! Traces for the detector lab: a group's heartbeat arrivals (seconds, on the
//! coordinator's clock, in order, with their sequence numbers) and what the coordinator
//! recorded besides (connections, its own pauses, backlogs and silences), read from a
//! CSV file or made by a synthetic generator per member, one input at a time: nothing
//! holds a whole trace.
//!
//! Trace files are read in `csv.rs`, synthetic traces made in `synthetic.rs`; [`Merge`]
//! puts several time-ordered streams (the members' generators, a file and the lab's
//! own crash) into one.

mod csv;
mod synthetic;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub(crate) use csv::{CsvReader, Line};
pub(crate) use synthetic::{Param, Params, Preset};

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

#[derive(Debug, Clone)]
pub(crate) enum Source {
    Csv(PathBuf),
    Synthetic(Params),
}

/// One input of a replay: what the coordinator heard or recorded, at `t` seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Input {
    /// A heartbeat of `member` with sequence number `seq`.
    Beat { t: f64, member: usize, seq: u64 },
    /// `member`'s connection closed.
    Closed { t: f64, member: usize },
    /// `member` is heard on a new connection.
    Opened { t: f64, member: usize },
    /// The coordinator was paused for `dur` up to `t`.
    Pause { t: f64, dur: f64 },
    /// The server reported being `dur` behind its frames.
    Lag { t: f64, dur: f64 },
    /// The whole server heard no member frame for `dur` up to `t`.
    Silent { t: f64, dur: f64 },
    /// Member 0's process died, and its connection closes now (a process crash; a
    /// silent crash closes nothing).
    ProcessDies { t: f64 },
}

impl Input {
    pub(crate) fn t(&self) -> f64 {
        match *self {
            Self::Beat { t, .. }
            | Self::Closed { t, .. }
            | Self::Opened { t, .. }
            | Self::Pause { t, .. }
            | Self::Lag { t, .. }
            | Self::Silent { t, .. }
            | Self::ProcessDies { t } => t,
        }
    }
}

/// A stream of inputs in time order.
pub(crate) type Stream<'a> = Box<dyn FnMut() -> Result<Option<Input>, String> + 'a>;

/// Several time-ordered streams merged into one, in time order (at equal times, the
/// earlier stream first).
pub(crate) struct Merge<'a> {
    sources: Vec<Stream<'a>>,
    heads: Vec<Option<Input>>,
    done: Vec<bool>,
}

impl<'a> Merge<'a> {
    pub(crate) fn new(sources: Vec<Stream<'a>>) -> Self {
        let n = sources.len();
        Self {
            sources,
            heads: vec![None; n],
            done: vec![false; n],
        }
    }

    /// The next input of all the streams; `None` when all have ended.
    pub(crate) fn next_input(&mut self) -> Result<Option<Input>, String> {
        let mut best: Option<(usize, f64)> = None;
        for i in 0..self.sources.len() {
            if self.heads[i].is_none() && !self.done[i] {
                self.heads[i] = (self.sources[i])()?;
                self.done[i] = self.heads[i].is_none();
            }
            if let Some(h) = &self.heads[i] {
                if best.is_none_or(|(_, t)| h.t() < t) {
                    best = Some((i, h.t()));
                }
            }
        }
        Ok(best.and_then(|(i, _)| self.heads[i].take()))
    }
}
