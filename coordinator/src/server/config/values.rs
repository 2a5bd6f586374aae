//! The values the parsers of the command line and the file accept: durations and sizes.

use std::time::Duration;

/// A duration, size or address that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} '{text}': expected {expected}")]
pub struct ParseValueError {
    /// What was being parsed: `duration`, `size`, `address`.
    pub what: &'static str,
    /// The text given.
    pub text: String,
    /// What would have been accepted.
    pub expected: &'static str,
}

/// Parses a duration such as `500ms`, `10s`, `5m`, `2h`, `7d` or `1h30m`. A bare `0`
/// is zero. Units: `ms`, `s`, `m`, `h`, `d`.
pub fn parse_duration(text: &str) -> Result<Duration, ParseValueError> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let bad = || ParseValueError {
        what: "duration",
        text: text.to_owned(),
        expected: "a number and a unit (ms, s, m, h, d), e.g. 500ms, 10s, 7d",
    };
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let millis_per_unit: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        let millis = value.checked_mul(millis_per_unit).ok_or_else(bad)?;
        total = total
            .checked_add(Duration::from_millis(millis))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// Formats a duration the way [`parse_duration`] reads it, in its largest exact unit.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0".into();
    }
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

/// Parses a size in bytes: `1048576`, `512KiB`, `1MiB` (also `K`, `KB`, `M`, `MB`,
/// all binary multiples).
pub fn parse_size(text: &str) -> Result<usize, ParseValueError> {
    let s = text.trim();
    let bad = || ParseValueError {
        what: "size",
        text: text.to_owned(),
        expected: "bytes, e.g. 1048576, 512KiB or 1MiB",
    };
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits == 0 {
        return Err(bad());
    }
    let value: usize = s[..digits].parse().map_err(|_| bad())?;
    let multiple: usize = match s[digits..].trim() {
        "" | "B" => 1,
        "K" | "KB" | "KiB" | "k" | "kb" | "kib" => 1 << 10,
        "M" | "MB" | "MiB" | "m" | "mb" | "mib" => 1 << 20,
        _ => return Err(bad()),
    };
    value.checked_mul(multiple).ok_or_else(bad)
}
