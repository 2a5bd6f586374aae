//! The detector lab's charts, as hand-written SVG: the trade-off between detection time
//! and mistakes (one curve per detector), and a timeline of a trace with each setting's
//! suspicions and expulsions.

use std::fmt::Write as _;

use super::qos::{num, Band, SettingQos};

const FONT: &str = "font-family=\"sans-serif\"";
const SUSPECT: &str = "#f2b134";
const EXPELLED: &str = "#d62728";
const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#ff7f0e", "#9467bd", "#2ca02c", "#8c564b",
];

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Tick values for a linear axis from 0 to at least `max`: (step, top).
fn linear_ticks(max: f64) -> (f64, f64) {
    let max = if max > 0.0 { max } else { 1.0 };
    let rough = max / 5.0;
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * magnitude);
    let top = (max / step).ceil().max(1.0) * step;
    (step, top)
}

/// A symmetric-log position: 0 at 0, then logarithmic (counts from 0 to thousands).
fn symlog(v: f64) -> f64 {
    (1.0 + v.max(0.0)).log10()
}

/// Ticks of a symlog axis up to at least `max`: 0, 1, 3, 10, 30, ...
fn symlog_ticks(max: f64) -> Vec<f64> {
    let mut ticks = vec![0.0];
    let mut decade = 1.0;
    // Bounded: 20 decades is far beyond any count.
    for _ in 0..20 {
        for m in [1.0, 3.0] {
            ticks.push(m * decade);
            if m * decade >= max {
                return ticks;
            }
        }
        decade *= 10.0;
    }
    ticks
}

/// What a panel puts on its x axis.
type Measure = fn(&SettingQos) -> f64;

/// One point of a curve.
struct Point {
    x: f64,
    y: f64,
    label: String,
    tip: String,
}

/// The trade-off chart: median detection time (y) against false expulsions per run
/// (left) and false suspicions per hour (right), one curve per detector (per floor
/// for the adaptive detector); `best_fixed` draws the per-trace best fixed timeout's
/// detection time as a line.
pub(crate) fn tradeoff(title: &str, settings: &[SettingQos], best_fixed: Option<f64>) -> String {
    let (w, h) = (1000.0, 500.0);
    let (top, plot_h, plot_w) = (60.0, 330.0, 400.0);
    let lefts = [70.0, 570.0];
    let mut series: Vec<String> = Vec::new();
    for s in settings {
        let name = s.setting.series();
        if !series.contains(&name) {
            series.push(name);
        }
    }
    let y_max = settings
        .iter()
        .filter_map(|s| s.detection_median_s)
        .chain(best_fixed)
        .fold(0.0, f64::max);
    let (y_step, y_top) = linear_ticks(y_max * 1.05);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" {FONT} font-size=\"12\">"
    );
    let _ = writeln!(out, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{}</text>",
        w / 2.0,
        esc(title)
    );
    let panels: [(&str, Measure); 2] = [
        (
            "false expulsions per run",
            SettingQos::false_expulsions_per_run,
        ),
        ("false suspicions per hour", |s| s.mistake_rate_per_h),
    ];
    for (panel, (x_label, x_of)) in panels.iter().enumerate() {
        let left = lefts[panel];
        // Where a label was written: a point on top of another gets none.
        let mut labelled: Vec<(i64, i64)> = Vec::new();
        let x_max = settings.iter().map(x_of).fold(1.0, f64::max);
        let ticks = symlog_ticks(x_max);
        let x_end = symlog(*ticks.last().unwrap_or(&1.0));
        let px = |v: f64| left + symlog(v) / x_end * plot_w;
        let py = |v: f64| top + plot_h - v / y_top * plot_h;
        // Axes and grid.
        let _ = writeln!(
            out,
            "<rect x=\"{left}\" y=\"{top}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#888\"/>"
        );
        for &t in &ticks {
            let x = px(t);
            let _ = writeln!(
                out,
                "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#eee\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                top + plot_h,
                top + plot_h + 16.0,
                num(t)
            );
        }
        let mut y = 0.0;
        // Bounded: linear_ticks gives at most about ten steps.
        for _ in 0..50 {
            if y > y_top + 1e-9 {
                break;
            }
            let yy = py(y);
            let _ = writeln!(
                out,
                "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{}\" y2=\"{yy:.1}\" stroke=\"#eee\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                left + plot_w,
                left - 6.0,
                yy + 4.0,
                num(y)
            );
            y += y_step;
        }
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{} (log scale)</text>",
            left + plot_w / 2.0,
            top + plot_h + 36.0,
            esc(x_label)
        );
        let _ = writeln!(
            out,
            "<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">median detection time (s)</text>",
            left - 44.0,
            top + plot_h / 2.0
        );
        if let Some(b) = best_fixed {
            let yy = py(b);
            let _ = writeln!(
                out,
                "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{}\" y2=\"{yy:.1}\" stroke=\"#555\" stroke-dasharray=\"5,4\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\" font-size=\"10\">best fixed per trace {} s</text>",
                left + plot_w,
                left + plot_w - 4.0,
                yy - 4.0,
                num((b * 100.0).round() / 100.0)
            );
        }
        for (i, name) in series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            let mut points: Vec<(f64, Point)> = settings
                .iter()
                .filter(|s| s.setting.series() == *name)
                .filter_map(|s| {
                    let y = s.detection_median_s?;
                    let order = s.setting.phi.unwrap_or(s.setting.session_s);
                    let label = match s.setting.phi {
                        Some(phi) => format!("φ{}", num(phi)),
                        None => format!("{}s", num(s.setting.session_s)),
                    };
                    let tip = format!(
                        "{} {}: {} false expulsions per run, {} false suspicions per hour, median detection {:.2} s",
                        s.setting.detector,
                        s.label,
                        num(s.false_expulsions_per_run()),
                        num(s.mistake_rate_per_h),
                        y
                    );
                    Some((
                        order,
                        Point {
                            x: x_of(s),
                            y,
                            label,
                            tip,
                        },
                    ))
                })
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let path: Vec<String> = points
                .iter()
                .map(|(_, p)| format!("{:.1},{:.1}", px(p.x), py(p.y)))
                .collect();
            let _ = writeln!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"/>",
                path.join(" ")
            );
            // Later curves are drawn with smaller dots, so one on top of another shows
            // as a dot in a ring.
            let r = (5.0 - 1.2 * i as f64).max(2.0);
            for (_, p) in &points {
                let (x, y) = (px(p.x), py(p.y));
                let _ = write!(
                    out,
                    "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r}\" fill=\"{colour}\"><title>{}</title></circle>",
                    esc(&p.tip),
                );
                let at = ((x / 6.0).round() as i64, (y / 6.0).round() as i64);
                if !labelled.contains(&at) {
                    labelled.push(at);
                    let _ = write!(
                        out,
                        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" fill=\"{colour}\">{}</text>",
                        x + 6.0,
                        y - 5.0,
                        esc(&p.label)
                    );
                }
                out.push('\n');
            }
        }
    }
    // Legend.
    let mut x = 70.0;
    let y = h - 40.0;
    for (i, name) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{colour}\" stroke-width=\"2\"/><circle cx=\"{}\" cy=\"{y}\" r=\"{}\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            x + 24.0,
            x + 12.0,
            (5.0 - 1.2 * i as f64).max(2.0),
            x + 30.0,
            y + 4.0,
            esc(name)
        );
        x += 40.0 + 7.0 * name.chars().count() as f64;
    }
    let _ = writeln!(
        out,
        "<text x=\"70\" y=\"{}\" font-size=\"10\" fill=\"#555\">Points: fixed timeouts (s) and adaptive φ thresholds; a dot in a ring is two settings that gave the same figures. Lower is faster detection; left is fewer mistakes.</text>",
        h - 14.0
    );
    out.push_str("</svg>\n");
    out
}

/// One row of the timeline: a setting and its bands.
pub(crate) struct Row {
    pub(crate) label: String,
    pub(crate) bands: Vec<Band>,
}

/// The timeline: the trace's arrivals from `from` to `to` seconds, and under them each
/// setting's suspicion (amber) and expulsion (red) over time; the crash as a line.
pub(crate) fn timeline(
    title: &str,
    from: f64,
    to: f64,
    arrivals: &[f64],
    crash: Option<f64>,
    rows: &[Row],
) -> String {
    let (label_w, plot_w, row_h, gap) = (190.0, 880.0, 12.0, 4.0);
    let top = 50.0;
    let plot_h = (rows.len() as f64 + 1.0) * (row_h + gap);
    let (w, h) = (label_w + plot_w + 30.0, top + plot_h + 80.0);
    let span = (to - from).max(1e-9);
    let px = |t: f64| label_w + (t.clamp(from, to) - from) / span * plot_w;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" {FONT} font-size=\"11\">"
    );
    let _ = writeln!(out, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>",
        w / 2.0,
        esc(title)
    );
    // Arrivals.
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">arrivals</text>",
        label_w - 6.0,
        top + row_h - 2.0
    );
    let mut ticks = String::new();
    for &a in arrivals.iter().filter(|&&a| a >= from && a <= to) {
        let _ = write!(ticks, "M{:.1} {top}v{row_h}", px(a));
    }
    let _ = writeln!(
        out,
        "<path d=\"{ticks}\" stroke=\"#333\" stroke-width=\"0.7\"/>"
    );
    for (i, row) in rows.iter().enumerate() {
        let y = top + (i as f64 + 1.0) * (row_h + gap);
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><rect x=\"{label_w}\" y=\"{y}\" width=\"{plot_w}\" height=\"{row_h}\" fill=\"#f4f8f4\"/>",
            label_w - 6.0,
            y + row_h - 2.0,
            esc(&row.label)
        );
        for b in &row.bands {
            if b.to < from || b.from > to {
                continue;
            }
            let (x0, x1) = (px(b.from), px(b.to.min(to)));
            let _ = writeln!(
                out,
                "<rect x=\"{x0:.1}\" y=\"{y}\" width=\"{:.1}\" height=\"{row_h}\" fill=\"{}\"/>",
                (x1 - x0).max(0.8),
                if b.expelled { EXPELLED } else { SUSPECT }
            );
        }
    }
    if let Some(c) = crash.filter(|c| (from..=to).contains(c)) {
        let x = px(c);
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"black\" stroke-dasharray=\"4,3\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">crash</text>",
            top - 4.0,
            top + plot_h,
            top - 8.0
        );
    }
    // Time axis.
    let axis_y = top + plot_h + 4.0;
    let (step, _) = linear_ticks(span / 2.0);
    let mut t = (from / step).ceil() * step;
    // Bounded: about ten ticks.
    for _ in 0..100 {
        if t > to + 1e-9 {
            break;
        }
        let x = px(t);
        let _ = writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{axis_y}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#888\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            axis_y + 5.0,
            axis_y + 18.0,
            num(t)
        );
        t += step;
    }
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time (s)</text>",
        label_w + plot_w / 2.0,
        axis_y + 34.0
    );
    let ly = h - 16.0;
    let _ = writeln!(
        out,
        "<rect x=\"{label_w}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{SUSPECT}\"/><text x=\"{}\" y=\"{ly}\">suspect</text><rect x=\"{}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{EXPELLED}\"/><text x=\"{}\" y=\"{ly}\">expelled (until it rejoins at its next beat)</text>",
        ly - 9.0,
        label_w + 18.0,
        label_w + 90.0,
        ly - 9.0,
        label_w + 108.0
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes() {
        assert_eq!(linear_ticks(4.3), (1.0, 5.0));
        assert_eq!(linear_ticks(0.0), (0.2, 1.0));
        assert_eq!(symlog_ticks(20.0), vec![0.0, 1.0, 3.0, 10.0, 30.0]);
        assert_eq!(symlog(0.0), 0.0);
        assert_eq!(esc("a<b&\"c\""), "a&lt;b&amp;&quot;c&quot;");
    }
}
