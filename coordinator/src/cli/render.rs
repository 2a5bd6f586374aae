//! Rendering admin answers as tables or JSON.

use rollcall_protocol::{DetectionSummary, ExpelBasis};

use super::*;
#[cfg(test)]
use crate::core::liveness::advice::DEFAULT_PAUSE_FLOOR;
use crate::core::liveness::advice::{
    advise, Advice, Basis, Target, CAP, CONFIDENCE, MIN_EXCEEDANCES, MIN_POOLED_GAPS, MIN_SPAN,
};

#[derive(Debug, Serialize)]
pub(super) struct GroupsJson {
    groups: Vec<GroupJson>,
    /// The coordinators whose groups are missing (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unreachable: Vec<UnreachedJson>,
}

#[derive(Debug, Serialize)]
pub(super) struct UnreachedJson {
    id: String,
    addr: String,
    error: String,
}

#[derive(Debug, Serialize)]
pub(super) struct GroupJson {
    group: String,
    state: &'static str,
    generation: u32,
    members: u32,
}

#[derive(Debug, Serialize)]
pub(super) struct DescribeJson {
    group: String,
    state: &'static str,
    generation: u32,
    assignor: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    detector: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow_detector: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<SummaryJson>,
    members: Vec<MemberJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    advice: Option<AdviceJson>,
}

/// What the detector has learned from the group's pooled gaps (DescribeGroup version 3).
#[derive(Debug, Serialize)]
pub(super) struct SummaryJson {
    pooled_gaps: u64,
    span_ms: u64,
    clean_gaps: u64,
    gap_median_ms: u32,
    gap_longest_ms: u32,
    longest_normalised: f64,
    tail_gaps: u64,
    threshold_normalised: f64,
    exceedances: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale_normalised: Option<f64>,
    loss_runs: u64,
    lost_beats: u64,
    tail: Vec<TailJson>,
}

#[derive(Debug, Serialize)]
pub(super) struct TailJson {
    over_normalised: f64,
    gaps: u64,
}

impl From<&DetectionSummary> for SummaryJson {
    fn from(s: &DetectionSummary) -> Self {
        let fitted = s.scale_centi > 0 && s.exceedances >= MIN_EXCEEDANCES;
        Self {
            pooled_gaps: s.pooled_gaps,
            span_ms: s.span_ms,
            clean_gaps: s.clean_gaps,
            gap_median_ms: s.gap_median_ms,
            gap_longest_ms: s.gap_longest_ms,
            longest_normalised: f64::from(s.longest_centi) / 100.0,
            tail_gaps: s.tail_gaps,
            threshold_normalised: f64::from(s.threshold_centi) / 100.0,
            exceedances: s.exceedances,
            shape: fitted.then(|| f64::from(s.shape_milli) / 1000.0),
            scale_normalised: fitted.then(|| f64::from(s.scale_centi) / 100.0),
            loss_runs: s.loss_runs,
            lost_beats: s.lost_beats,
            tail: s
                .tail
                .iter()
                .map(|t| TailJson {
                    over_normalised: f64::from(t.over_centi) / 100.0,
                    gaps: t.gaps,
                })
                .collect(),
        }
    }
}

/// The advised session timeout and what it rests on, or why there is none.
#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(super) enum AdviceJson {
    /// The coordinator does not report its group's pooled gaps (DescribeGroup below
    /// version 3).
    Unavailable,
    /// Too little history.
    NotYet {
        pooled_gaps: u64,
        span_ms: u64,
        needs_gaps: u64,
        needs_span_ms: u64,
    },
    /// A timeout.
    Timeout {
        session_timeout_ms: u64,
        basis: &'static str,
        false_expulsions_per_year: f64,
        members: usize,
        /// At most `false_expulsions_per_year` when the basis reaches the target.
        promise_per_year: f64,
        /// The chance per gap the target allows.
        allowed_per_gap: f64,
        /// The upper bound on the chance that a gap exceeds the timeout.
        bound_per_gap: f64,
        confidence: f64,
        gaps: u64,
        pooled_gaps: u64,
        span_ms: u64,
        longest_gap_ms: u64,
        pause_floor_ms: u64,
        floored: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        shape_upper: Option<f64>,
        assumptions: &'static str,
    },
}

const ADVICE_ASSUMPTIONS: &str = "gaps independent, the members of one rhythm and the \
     record representative of what comes; a pause that hits many members at once \
     expels them together";

/// The group's advice, from the summary of its pooled gaps (DescribeGroup version 3).
fn group_advice(r: &DescribeGroupResponse, target: &Target) -> Option<(AdviceJson, Advice)> {
    let d = r.detection.as_ref()?;
    let Some(summary) = &d.summary else {
        return Some((
            AdviceJson::Unavailable,
            Advice::NotYet {
                gaps: 0,
                span: Duration::ZERO,
            },
        ));
    };
    let advice = advise(summary, target);
    let json = match &advice {
        Advice::NotYet { gaps, span } => AdviceJson::NotYet {
            pooled_gaps: *gaps,
            span_ms: span.as_millis() as u64,
            needs_gaps: MIN_POOLED_GAPS,
            needs_span_ms: MIN_SPAN.as_millis() as u64,
        },
        Advice::Timeout(t) => AdviceJson::Timeout {
            session_timeout_ms: t.timeout_ms,
            basis: t.basis.as_str(),
            false_expulsions_per_year: target.per_year,
            members: target.members,
            promise_per_year: t.promise_per_year,
            allowed_per_gap: t.allowed,
            bound_per_gap: t.bound,
            confidence: CONFIDENCE,
            gaps: t.gaps,
            pooled_gaps: t.pooled,
            span_ms: t.span.as_millis() as u64,
            longest_gap_ms: t.longest_ms,
            pause_floor_ms: t.pause_floor_ms,
            floored: t.floored,
            shape_upper: t.shape_upper,
            assumptions: ADVICE_ASSUMPTIONS,
        },
    };
    Some((json, advice))
}

/// `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate a year, shortly: `0.31`, `12`, `1.6e5`.
fn per_year(rate: f64) -> String {
    if rate < 1.0 {
        format!("{rate:.2}")
    } else if rate < 10_000.0 {
        format!("{rate:.0}")
    } else {
        format!("{rate:.1e}")
    }
}

/// The advice as text: the timeout, then what the data supports, with its gaps, span,
/// confidence, basis and assumptions.
fn advice_text(advice: &Advice, summary: bool, target: &Target) -> String {
    let t = match advice {
        _ if !summary => {
            return "advice: none: the coordinator does not report the group's pooled gaps \
                    (DescribeGroup version 3)\n"
                .into()
        }
        Advice::NotYet { gaps, span } => {
            return format!(
                "advice: no advice yet: {} gaps over {}; the advisor needs {} gaps and {}\n",
                thousands(*gaps),
                format_ms(span.as_millis() as u64),
                thousands(MIN_POOLED_GAPS),
                format_ms(MIN_SPAN.as_millis() as u64),
            )
        }
        Advice::Timeout(t) => t,
    };
    let asked = per_year(target.per_year);
    let timeout = format_ms(t.timeout_ms);
    let mut out = match t.basis {
        Basis::Observed | Basis::Tail => format!(
            "advice: a session timeout of {timeout} keeps false expulsions under {asked} a \
             year across these {} members ({} basis)\n",
            target.members,
            t.basis.as_str()
        ),
        Basis::PauseFloor => format!(
            "advice: a session timeout of {timeout} (the pause floor); no timeout the data \
             supports keeps false expulsions under {asked} a year across these {} members\n",
            target.members
        ),
        Basis::Unreachable => format!(
            "advice: no timeout under {} keeps false expulsions under {asked} a year across \
             these {} members: the group's long gaps are {}; a session timeout of {timeout} \
             (the pause floor)\n",
            format_ms(CAP.as_millis() as u64),
            target.members,
            match t.shape_upper {
                Some(xi) if xi.is_finite() => format!("heavy-tailed (ξ ≤ {xi:.2})"),
                _ => "too heavy-tailed to bound (ξ̂ ≥ 0.5)".to_owned(),
            }
        ),
    };
    out.push_str(&format!(
        "        the data bounds a gap longer than {timeout} at ≤ {:.1e} ({:.0}%, {} gaps over \
         {}, the longest {}), so ≤ {} false expulsions a year\n",
        t.bound,
        CONFIDENCE * 100.0,
        thousands(t.gaps),
        format_ms(t.span.as_millis() as u64),
        format_ms(t.longest_ms),
        per_year(t.promise_per_year),
    ));
    if let Some(xi) = t.shape_upper.filter(|_| t.basis == Basis::Tail) {
        out.push_str(&format!(
            "        beyond the gaps counted, from a generalised Pareto fit of the long gaps \
             with shape ξ ≤ {xi:.2} (never lighter than exponential)\n"
        ));
    }
    let shown = if t.longest_ms < t.timeout_ms {
        "which none has shown"
    } else {
        "which some have come close to"
    };
    out.push_str(&format!(
        "        fewer only if no member pauses longer than {timeout}, {shown} (the floor: \
         the median gap + {})\n        assumes {ADVICE_ASSUMPTIONS}\n",
        format_ms(target.pause_floor.as_millis() as u64),
    ));
    out
}

/// The group's pooled gaps, as text.
fn summary_text(s: &DetectionSummary) -> String {
    let fit = if s.scale_centi > 0 && s.exceedances >= MIN_EXCEEDANCES {
        format!(
            "ξ {:.2}, σ {:.2}× the mean",
            f64::from(s.shape_milli) / 1000.0,
            f64::from(s.scale_centi) / 100.0
        )
    } else {
        format!("no fit below {MIN_EXCEEDANCES} exceedances")
    };
    format!(
        "gaps:       {} pooled over {} ({} since the last long gap), median {}, longest {} \
         ({:.2}× its member's mean)\ntail:       {} of {} over {:.2}× the mean ({fit}); \
         {} beats lost in {} runs\n",
        thousands(s.pooled_gaps),
        format_ms(s.span_ms),
        thousands(s.clean_gaps),
        format_ms(u64::from(s.gap_median_ms)),
        format_ms(u64::from(s.gap_longest_ms)),
        f64::from(s.longest_centi) / 100.0,
        thousands(s.exceedances),
        thousands(s.tail_gaps),
        f64::from(s.threshold_centi) / 100.0,
        thousands(s.lost_beats),
        thousands(s.loss_runs),
    )
}

#[derive(Debug, Serialize)]
pub(super) struct MemberJson {
    member_id: String,
    instance_id: Option<String>,
    client_id: String,
    liveness: &'static str,
    since_heartbeat_ms: u64,
    since_progress_ms: u64,
    owned: Vec<TopicJson>,
    pending_revoke: Vec<TopicJson>,
    pending_grant: Vec<TopicJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detection: Option<DetectionJson>,
}

#[derive(Debug, Serialize)]
pub(super) struct DetectionJson {
    in_state_ms: u64,
    phi: f64,
    suspect_after_ms: u32,
    expel_after_ms: u32,
    gaps: u32,
    beats_lost: u64,
    beats_late: u64,
    gap_p50_ms: u32,
    gap_p99_ms: u32,
    gap_p999_ms: u32,
    gap_max_ms: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    expel_basis: Option<&'static str>,
}

impl From<&MemberDetection> for DetectionJson {
    fn from(d: &MemberDetection) -> Self {
        Self {
            in_state_ms: d.in_state_ms,
            phi: f64::from(d.phi_centi) / 100.0,
            suspect_after_ms: d.suspect_after_ms,
            expel_after_ms: d.expel_after_ms,
            gaps: d.gaps,
            beats_lost: d.beats_lost,
            beats_late: d.beats_late,
            gap_p50_ms: d.gap_p50_ms,
            gap_p99_ms: d.gap_p99_ms,
            gap_p999_ms: d.gap_p999_ms,
            gap_max_ms: d.gap_max_ms,
            expel_basis: d.expel_basis.map(ExpelBasis::as_str),
        }
    }
}

#[derive(Debug, Serialize)]
pub(super) struct TopicJson {
    topic: String,
    partitions: Vec<u32>,
}

#[derive(Debug, Serialize)]
pub(super) struct OffsetsJson {
    group: String,
    offsets: Vec<OffsetJson>,
}

#[derive(Debug, Serialize)]
pub(super) struct OffsetJson {
    topic: String,
    partition: u32,
    offset: i64,
    metadata: String,
}

pub(super) fn topics_json(tps: &[TopicPartitions]) -> Vec<TopicJson> {
    tps.iter()
        .map(|tp| TopicJson {
            topic: tp.topic.clone(),
            partitions: tp.partitions.clone(),
        })
        .collect()
}

pub(super) fn to_json<T: Serialize>(value: &T) -> String {
    let mut text =
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    text.push('\n');
    text
}

pub(super) fn render_groups(r: &ListGroupsResponse, unreached: &[Unreached], json: bool) -> String {
    if json {
        return to_json(&GroupsJson {
            unreachable: unreached
                .iter()
                .map(|u| UnreachedJson {
                    id: u.id.clone(),
                    addr: u.addr.clone(),
                    error: u.error.clone(),
                })
                .collect(),
            groups: r
                .groups
                .iter()
                .map(|g| GroupJson {
                    group: g.group.clone(),
                    state: g.state.as_str(),
                    generation: g.generation,
                    members: g.members,
                })
                .collect(),
        });
    }
    if r.groups.is_empty() {
        return "no groups\n".into();
    }
    let rows = r
        .groups
        .iter()
        .map(|g| {
            vec![
                g.group.clone(),
                g.state.as_str().to_owned(),
                g.generation.to_string(),
                g.members.to_string(),
            ]
        })
        .collect::<Vec<_>>();
    table(&["GROUP", "STATE", "GENERATION", "MEMBERS"], &rows)
}

pub(super) fn render_describe(
    r: &DescribeGroupResponse,
    json: bool,
    per_year: f64,
    pause_floor: Duration,
) -> String {
    let target = Target {
        per_year,
        members: r.members.len(),
        pause_floor,
    };
    let advice = group_advice(r, &target);
    let summary = r.detection.as_ref().and_then(|d| d.summary.as_ref());
    if json {
        return to_json(&DescribeJson {
            group: r.group.clone(),
            state: r.state.as_str(),
            generation: r.generation,
            assignor: r.assignor.clone(),
            detector: r.detection.as_ref().map(|d| d.detector.clone()),
            shadow_detector: r.detection.as_ref().and_then(|d| d.shadow.clone()),
            summary: summary.map(SummaryJson::from),
            members: r
                .members
                .iter()
                .map(|m| MemberJson {
                    member_id: m.member_id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    liveness: m.liveness.as_str(),
                    since_heartbeat_ms: m.since_heartbeat_ms,
                    since_progress_ms: m.since_progress_ms,
                    owned: topics_json(&m.owned),
                    pending_revoke: topics_json(&m.pending_revoke),
                    pending_grant: topics_json(&m.pending_grant),
                    detection: m.detection.as_ref().map(DetectionJson::from),
                })
                .collect(),
            advice: advice.map(|(json, _)| json),
        });
    }
    let mut out = format!(
        "group:      {}\nstate:      {}\ngeneration: {}\nassignor:   {}\nmembers:    {}\n",
        r.group,
        r.state.as_str(),
        r.generation,
        r.assignor,
        r.members.len()
    );
    if let Some(d) = &r.detection {
        out.push_str(&format!(
            "detector:   {}{}\n",
            d.detector,
            d.shadow
                .as_ref()
                .map_or(String::new(), |s| format!(" (shadow: {s})"))
        ));
    }
    if let Some(s) = summary {
        out.push_str(&summary_text(s));
    }
    if r.members.is_empty() {
        return out;
    }
    out.push('\n');
    let rows = r
        .members
        .iter()
        .map(|m| {
            vec![
                m.member_id.clone(),
                m.instance_id.clone().unwrap_or_else(|| "-".into()),
                if m.client_id.is_empty() {
                    "-".into()
                } else {
                    m.client_id.clone()
                },
                m.liveness.as_str().to_owned(),
                format_ago(m.since_heartbeat_ms),
                format_ago(m.since_progress_ms),
                compact_partitions(&m.owned),
                compact_partitions(&m.pending_revoke),
                compact_partitions(&m.pending_grant),
            ]
        })
        .collect::<Vec<_>>();
    out.push_str(&table(
        &[
            "MEMBER",
            "INSTANCE",
            "CLIENT",
            "LIVENESS",
            "HEARTBEAT",
            "PROGRESS",
            "OWNED",
            "REVOKING",
            "GRANTING",
        ],
        &rows,
    ));
    let detection: Vec<Vec<String>> = r
        .members
        .iter()
        .filter_map(|m| {
            let d = m.detection.as_ref()?;
            Some(vec![
                m.member_id.clone(),
                m.liveness.as_str().to_owned(),
                format_ms(d.in_state_ms),
                format!("{:.2}", f64::from(d.phi_centi) / 100.0),
                format_ms(u64::from(d.suspect_after_ms)),
                format_ms(u64::from(d.expel_after_ms)),
                d.gaps.to_string(),
                [d.gap_p50_ms, d.gap_p99_ms, d.gap_p999_ms, d.gap_max_ms]
                    .map(|g| format_ms(u64::from(g)))
                    .join(" / "),
                d.beats_lost.to_string(),
                d.beats_late.to_string(),
                d.expel_basis.map_or("-", ExpelBasis::as_str).to_owned(),
            ])
        })
        .collect();
    if !detection.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &[
                "MEMBER",
                "STATE",
                "FOR",
                "PHI",
                "SUSPECT AFTER",
                "EXPEL AFTER",
                "GAPS",
                "GAP P50 / P99 / P99.9 / MAX",
                "LOST",
                "LATE",
                "BASIS",
            ],
            &detection,
        ));
        out.push('\n');
        if let Some((_, advice)) = &advice {
            out.push_str(&advice_text(advice, summary.is_some(), &target));
        }
    }
    out
}

/// A duration in milliseconds, shortly: `850ms`, `2.31s`, `4m05s`.
fn format_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.2}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
    }
}

pub(super) fn render_offsets(group: &str, r: &FetchOffsetsResponse, json: bool) -> String {
    if json {
        return to_json(&OffsetsJson {
            group: group.to_owned(),
            offsets: r
                .offsets
                .iter()
                .map(|o| OffsetJson {
                    topic: o.topic.clone(),
                    partition: o.partition,
                    offset: o.offset,
                    metadata: o.metadata.clone(),
                })
                .collect(),
        });
    }
    if r.offsets.is_empty() {
        return format!("no committed offsets for group '{group}'\n");
    }
    let rows = r
        .offsets
        .iter()
        .map(|o| {
            vec![
                o.topic.clone(),
                o.partition.to_string(),
                o.offset.to_string(),
                o.metadata.clone(),
            ]
        })
        .collect::<Vec<_>>();
    table(&["TOPIC", "PARTITION", "OFFSET", "METADATA"], &rows)
}

/// Left-aligned columns separated by two spaces; no trailing spaces.
pub(super) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            if i + 1 < row.len() {
                line.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `orders[0-4,7] payments[1]`, or `-` for none.
pub fn compact_partitions(tps: &[TopicPartitions]) -> String {
    let parts: Vec<String> = tps
        .iter()
        .filter(|tp| !tp.partitions.is_empty())
        .map(|tp| {
            let sorted: BTreeSet<u32> = tp.partitions.iter().copied().collect();
            let mut ranges: Vec<String> = Vec::new();
            let mut iter = sorted.into_iter().peekable();
            while let Some(start) = iter.next() {
                let mut end = start;
                while iter.peek() == Some(&(end + 1)) {
                    end += 1;
                    iter.next();
                }
                ranges.push(if start == end {
                    start.to_string()
                } else {
                    format!("{start}-{end}")
                });
            }
            format!("{}[{}]", tp.topic, ranges.join(","))
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

/// `350ms`, `4.2s`, `3m05s`, `2h10m`.
pub(super) fn format_ago(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

#[cfg(test)]
mod tests;
