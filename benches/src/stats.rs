//! Latency histograms, their percentile summaries, and the plain-text table printer.

use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Largest recordable value: one hour, in microseconds.
const MAX_MICROS: u64 = 3_600_000_000;

/// A new histogram of microseconds with three significant digits.
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("valid histogram bounds")
}

/// Records `d` in `h` as whole microseconds (at least 1, saturating at the maximum).
pub(crate) fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(MAX_MICROS);
    h.saturating_record(us.clamp(1, MAX_MICROS));
}

/// A histogram many tasks record into: split into independently locked shards, each
/// task recording into the shard its id picks, merged when read.
#[derive(Debug)]
pub(crate) struct SharedHistogram {
    shards: Box<[Mutex<Histogram<u64>>]>,
}

impl SharedHistogram {
    pub(crate) fn new(shards: usize) -> Self {
        Self {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(new_histogram()))
                .collect(),
        }
    }

    /// Adds a batch of microsecond samples through shard `key % shards`.
    pub(crate) fn record_micros(&self, key: usize, samples: &[u64]) {
        if samples.is_empty() {
            return;
        }
        let shard = &self.shards[key % self.shards.len()];
        let mut h = shard.lock().unwrap_or_else(|e| e.into_inner());
        for &us in samples {
            h.saturating_record(us.clamp(1, MAX_MICROS));
        }
    }

    /// Every shard merged.
    pub(crate) fn merged(&self) -> Histogram<u64> {
        let mut out = new_histogram();
        for shard in self.shards.iter() {
            let h = shard.lock().unwrap_or_else(|e| e.into_inner());
            out.add(&*h).expect("same bounds");
        }
        out
    }

    /// Forgets every sample.
    pub(crate) fn reset(&self) {
        for shard in self.shards.iter() {
            shard.lock().unwrap_or_else(|e| e.into_inner()).reset();
        }
    }
}

/// Percentiles of a latency distribution, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Percentiles {
    pub(crate) count: u64,
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) p999_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) mean_ms: f64,
}

impl Percentiles {
    pub(crate) fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
            mean_ms: h.mean() / 1000.0,
        }
    }

    /// Percentiles of a list of durations.
    pub(crate) fn of_durations(samples: &[Duration]) -> Self {
        let mut h = new_histogram();
        for d in samples {
            record(&mut h, *d);
        }
        Self::of(&h)
    }

    /// One table row: name, count and the percentiles.
    pub(crate) fn row(&self, name: &str) -> Vec<String> {
        vec![
            name.to_owned(),
            self.count.to_string(),
            fmt_ms(self.p50_ms),
            fmt_ms(self.p90_ms),
            fmt_ms(self.p99_ms),
            fmt_ms(self.p999_ms),
            fmt_ms(self.max_ms),
        ]
    }
}

/// The header matching [`Percentiles::row`].
pub(crate) const LATENCY_HEADER: [&str; 7] =
    ["latency (ms)", "count", "p50", "p90", "p99", "p99.9", "max"];

pub(crate) fn fmt_ms(ms: f64) -> String {
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.3}")
    }
}

/// A number with thousands separators.
pub(crate) fn fmt_count(n: f64) -> String {
    let rounded = n.round();
    if !rounded.is_finite() {
        return n.to_string();
    }
    let digits = format!("{}", rounded.abs() as u64);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}

pub(crate) fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

/// Left-aligned first column, right-aligned others, two spaces apart.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            } else {
                widths.push(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let head: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&head).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let w = widths[i];
            if i == 0 {
                line.push_str(&format!("{cell:<w$}"));
            } else {
                line.push_str(&format!("  {cell:>w$}"));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Two-column key/value table.
pub(crate) fn kv(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{k:<width$}  {v}\n"));
    }
    out
}

/// A scenario's usual body: its key/value lines, then a latency table.
pub(crate) fn summary(lines: &[(&str, String)], latencies: &[Vec<String>]) -> String {
    let mut out = kv(lines);
    out.push('\n');
    out.push_str(&table(&LATENCY_HEADER, latencies));
    out
}

/// The median of some numbers (mean of the two middle ones for an even count).
pub(crate) fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let samples: Vec<Duration> = (1..=1000).map(Duration::from_micros).collect();
        let p = Percentiles::of_durations(&samples);
        assert_eq!(p.count, 1000);
        assert!((p.p50_ms - 0.5).abs() < 0.01, "{p:?}");
        assert!((p.p99_ms - 0.99).abs() < 0.01, "{p:?}");
        assert!((p.max_ms - 1.0).abs() < 0.01, "{p:?}");
    }

    #[test]
    fn shared_histogram_merges_shards() {
        let h = SharedHistogram::new(4);
        h.record_micros(0, &[10, 20]);
        h.record_micros(3, &[30]);
        assert_eq!(h.merged().len(), 3);
        h.reset();
        assert_eq!(h.merged().len(), 0);
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_count(1_234_567.0), "1,234,567");
        assert_eq!(fmt_count(12.0), "12");
        assert_eq!(fmt_bytes(2048), "2.0 KiB");
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        let t = table(&["a", "bb"], &[vec!["x".into(), "1".into()]]);
        assert_eq!(t, "a  bb\nx   1\n");
    }
}
