//! Rendering admin answers as tables or JSON.

use rollcall_protocol::ExpelBasis;

use super::*;
use crate::core::liveness::advice::Target;
#[cfg(test)]
use crate::core::liveness::advice::DEFAULT_PAUSE_FLOOR;

mod advice;

use advice::{advice_text, group_advice, summary_text, AdviceJson, SummaryJson};
#[cfg(test)]
use rollcall_protocol::DetectionSummary;

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
