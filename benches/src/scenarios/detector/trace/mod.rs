//! Heartbeat traces for the detector lab: arrival times (seconds, on the coordinator's
//! clock, in order) read from a CSV file or made by a synthetic generator, one at a
//! time: nothing holds a whole trace.
//!
//! Trace files are read in `csv.rs`, synthetic traces made in `synthetic.rs`.

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
