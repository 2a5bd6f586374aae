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
    /// The group's settings (DescribeGroup version 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<SettingsJson>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    drained_labels: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    reservations: Vec<ReservationJson>,
    members: Vec<MemberJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    advice: Option<AdviceJson>,
}

/// A group's operator settings.
#[derive(Debug, Serialize)]
pub(super) struct SettingsJson {
    departure_delay_ms: u32,
    max_revoking: u32,
    max_revoking_per_member: u32,
    balance: &'static str,
    churn_budget_permille: u16,
    imbalance_permille: u16,
}

impl From<&GroupSettings> for SettingsJson {
    fn from(c: &GroupSettings) -> Self {
        Self {
            departure_delay_ms: c.departure_delay_ms,
            max_revoking: c.max_revoking,
            max_revoking_per_member: c.max_revoking_per_member,
            balance: balance_name(c.balance),
            churn_budget_permille: c.churn_budget_permille,
            imbalance_permille: c.imbalance_permille,
        }
    }
}

#[derive(Debug, Serialize)]
pub(super) struct ReservationJson {
    instance_id: String,
    member_id: String,
    partitions: u32,
    remaining_ms: u32,
}

/// A member's placement, drained state and load (DescribeGroup version 4).
#[derive(Debug, Serialize)]
pub(super) struct MemberOperatorJson {
    label: String,
    rack: String,
    capacity: u32,
    drained: bool,
    load: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct ConfigJson {
    group: String,
    #[serde(flatten)]
    config: SettingsJson,
}

#[derive(Debug, Serialize)]
pub(super) struct DrainJson {
    group: String,
    drained: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    member: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    /// The members whose drained state changed.
    members: Vec<String>,
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
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    operator: Option<MemberOperatorJson>,
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
            config: r.operator.as_ref().map(|o| SettingsJson::from(&o.config)),
            drained_labels: r
                .operator
                .as_ref()
                .map_or_else(Vec::new, |o| o.drained_labels.clone()),
            reservations: r.operator.as_ref().map_or_else(Vec::new, |o| {
                o.reservations
                    .iter()
                    .map(|v| ReservationJson {
                        instance_id: v.instance_id.clone(),
                        member_id: v.member_id.clone(),
                        partitions: v.partitions,
                        remaining_ms: v.remaining_ms,
                    })
                    .collect()
            }),
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
                    operator: m.operator.as_ref().map(|o| MemberOperatorJson {
                        label: o.label.clone(),
                        rack: o.rack.clone(),
                        capacity: o.capacity.max(1),
                        drained: o.drained,
                        load: o.load,
                    }),
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
    if let Some(o) = &r.operator {
        out.push_str(&operator_text(o));
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
    // Where members run, what they weigh and carry: shown once any member declared
    // something, is drained or reported a load.
    let placed = r.members.iter().any(|m| {
        m.operator.as_ref().is_some_and(|o| {
            !o.label.is_empty() || !o.rack.is_empty() || o.capacity > 1 || o.drained || o.load > 0.0
        })
    });
    if placed {
        let rows: Vec<Vec<String>> = r
            .members
            .iter()
            .filter_map(|m| {
                let o = m.operator.as_ref()?;
                let dash = |s: &str| {
                    if s.is_empty() {
                        "-".to_owned()
                    } else {
                        s.to_owned()
                    }
                };
                Some(vec![
                    m.member_id.clone(),
                    dash(&o.label),
                    dash(&o.rack),
                    o.capacity.max(1).to_string(),
                    if o.drained { "yes" } else { "no" }.to_owned(),
                    format_load(o.load),
                ])
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            &["MEMBER", "LABEL", "RACK", "CAPACITY", "DRAINED", "LOAD"],
            &rows,
        ));
    }
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

/// The settings that differ from a default group's, drained labels and reservations:
/// nothing for a group nobody steered.
fn operator_text(o: &GroupOperator) -> String {
    let mut out = String::new();
    if o.config != default_settings() {
        out.push_str(&format!("settings:   {}\n", settings_line(&o.config)));
    }
    if !o.drained_labels.is_empty() {
        out.push_str(&format!(
            "drained:    label {}\n",
            o.drained_labels.join(", ")
        ));
    }
    for v in &o.reservations {
        out.push_str(&format!(
            "reserved:   {} partition{} for instance {} (was {}), {} left\n",
            v.partitions,
            if v.partitions == 1 { "" } else { "s" },
            v.instance_id,
            v.member_id,
            format_ms(u64::from(v.remaining_ms)),
        ));
    }
    out
}

/// A group nobody configured.
fn default_settings() -> GroupSettings {
    let d = crate::core::GroupConfig::default();
    GroupSettings {
        departure_delay_ms: d.departure_delay_ms,
        max_revoking: d.max_revoking,
        max_revoking_per_member: d.max_revoking_per_member,
        balance: 0,
        churn_budget_permille: d.churn_budget_permille,
        imbalance_permille: d.imbalance_permille,
    }
}

fn balance_name(balance: u8) -> &'static str {
    match balance {
        0 => "count",
        1 => "load",
        _ => "unknown",
    }
}

/// Per mille as a percentage: `10%`, `12.5%`.
fn format_permille(p: u16) -> String {
    if p.is_multiple_of(10) {
        format!("{}%", p / 10)
    } else {
        format!("{}.{}%", p / 10, p % 10)
    }
}

fn format_cap(n: u32) -> String {
    if n == 0 {
        "no cap".into()
    } else {
        n.to_string()
    }
}

fn format_load(load: f64) -> String {
    if load == 0.0 {
        "-".into()
    } else {
        format!("{load:.2}")
    }
}

/// The settings on one line, as `config` takes them.
fn settings_line(c: &GroupSettings) -> String {
    format!(
        "departure delay {}, max revoking {}, per member {}, balance {}, churn budget {}, imbalance {}",
        format_duration(Duration::from_millis(c.departure_delay_ms.into())),
        format_cap(c.max_revoking),
        format_cap(c.max_revoking_per_member),
        balance_name(c.balance),
        format_permille(c.churn_budget_permille),
        format_permille(c.imbalance_permille),
    )
}

/// `rollcall config`: the group's settings after the request.
pub(super) fn render_config(group: &str, c: &GroupSettings, json: bool) -> String {
    if json {
        return to_json(&ConfigJson {
            group: group.to_owned(),
            config: SettingsJson::from(c),
        });
    }
    let delay = if c.departure_delay_ms == 0 {
        "off".to_owned()
    } else {
        format_duration(Duration::from_millis(c.departure_delay_ms.into()))
    };
    let rows = vec![
        vec!["group".to_owned(), group.to_owned()],
        vec!["departure delay".to_owned(), delay],
        vec!["max revoking".to_owned(), format_cap(c.max_revoking)],
        vec![
            "max revoking per member".to_owned(),
            format_cap(c.max_revoking_per_member),
        ],
        vec!["balance".to_owned(), balance_name(c.balance).to_owned()],
        vec![
            "churn budget".to_owned(),
            format_permille(c.churn_budget_permille),
        ],
        vec![
            "imbalance".to_owned(),
            format_permille(c.imbalance_permille),
        ],
    ];
    table(&["SETTING", "VALUE"], &rows)
}

/// `rollcall drain` and `undrain`: what changed.
pub(super) fn render_drain(
    group: &str,
    member: Option<&str>,
    label: Option<&str>,
    drained: bool,
    r: &DrainResponse,
    json: bool,
) -> String {
    if json {
        return to_json(&DrainJson {
            group: group.to_owned(),
            drained,
            member: member.map(str::to_owned),
            label: label.map(str::to_owned),
            members: r.members.clone(),
        });
    }
    let verb = if drained { "drained" } else { "undrained" };
    let whom = match (member, label) {
        (_, Some(l)) => format!("label '{l}'"),
        (Some(m), None) => format!("member {m}"),
        (None, None) => "nothing".to_owned(),
    };
    if r.members.is_empty() {
        format!("{whom} in group '{group}': no member changed (already {verb}, or none has the label)\n")
    } else {
        format!(
            "{verb} {whom} in group '{group}': {}\n",
            r.members.join(", ")
        )
    }
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
