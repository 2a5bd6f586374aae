//! The lab's charts: detection time against mistakes over the sweep, and the first
//! run's timeline of suspicion and expulsion.

use super::qos::{num, CrashKind};
use super::replay::Timeline;
use super::{svg, DetectorArgs, Plan, Summary, TIMELINE_ARRIVALS, TIMELINE_BANDS};

fn write(path: &std::path::Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Writes the charts asked for (`--svg`, `--timeline-svg`), noting each in `notes`.
pub(super) fn draw(
    args: &DetectorArgs,
    plan: &Plan<'_>,
    trace_name: &str,
    summary: &Summary,
    timeline: Option<Timeline>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let (runs, crash, longest_session) = (plan.runs, plan.crash, plan.longest_session);
    let title = format!(
        "{} — {}",
        match plan.preset {
            Some(p) => p.preset.name().to_owned(),
            None => trace_name.to_owned(),
        },
        if runs > 1 {
            format!("{runs} runs")
        } else {
            "1 run".to_owned()
        }
    );
    // The trade-off is drawn for a silent crash when it was replayed: silence is
    // what detectors judge.
    let kind = if plan.kinds.contains(&CrashKind::Silent) {
        CrashKind::Silent
    } else {
        plan.kinds[0]
    };
    if let Some(path) = &args.svg {
        let results: Vec<_> = plan
            .of_kind(&summary.results, kind)
            .into_iter()
            .cloned()
            .collect();
        let chart = svg::tradeoff(
            &format!(
                "Detection time ({} crash) against mistakes: {title}",
                kind.name()
            ),
            &results,
            summary
                .best_fixed
                .iter()
                .find(|b| b.crash == kind)
                .and_then(|b| b.detection_median_s),
        );
        write(path, &chart)?;
        notes.push(format!("trade-off chart written to {}", path.display()));
    }
    if let (Some(path), Some(tl)) = (&args.timeline_svg, timeline) {
        let last_band = tl
            .rows
            .iter()
            .flatten()
            .map(|b| if b.to.is_finite() { b.to } else { b.from })
            .chain(tl.arrivals.last().copied())
            .fold(tl.from, f64::max);
        let to = if tl.to.is_finite() {
            tl.to
        } else {
            last_band + longest_session
        };
        let to = if tl.truncated {
            tl.arrivals.last().copied().unwrap_or(to).min(to)
        } else {
            to
        };
        let rows: Vec<svg::Row> = plan
            .settings
            .iter()
            .zip(tl.rows)
            .map(|(s, bands)| svg::Row {
                label: format!("{} {}", s.detector, s.label()),
                bands,
            })
            .collect();
        let chart = svg::timeline(
            &format!(
                "Suspicion and expulsion of member 0 over time ({} crash): {title}, first run",
                plan.kinds[0].name()
            ),
            tl.from,
            to,
            &tl.arrivals,
            crash,
            &rows,
        );
        write(path, &chart)?;
        if tl.truncated {
            notes.push(format!(
                "the timeline was cut at {} s (at most {TIMELINE_ARRIVALS} arrivals and {TIMELINE_BANDS} bands per setting are drawn; see --timeline-from/--timeline-to)",
                num(to)
            ));
        }
        notes.push(format!("timeline written to {}", path.display()));
    }
    Ok(())
}
