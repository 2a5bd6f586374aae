//! Rendering admin answers as tables or JSON.

use super::*;

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
    members: Vec<MemberJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    advice: Option<AdviceJson>,
}

/// The advised session timeout and what it rests on.
#[derive(Debug, Serialize)]
pub(super) struct AdviceJson {
    session_timeout_ms: u64,
    false_expulsions_per_year: f64,
    members: usize,
    tail_probability_per_gap: f64,
    basis: &'static str,
    from_member: String,
    gaps: u32,
    assumptions: &'static str,
}

const ADVICE_ASSUMPTIONS: &str = "gaps independent and the recent window representative; \
     beyond p99.9 the tail is extrapolated as exponential; correlated stalls (pauses) \
     make the real rate higher";

/// The group's advice: the largest of its members' (the worst member decides).
fn group_advice(r: &DescribeGroupResponse, per_year: f64) -> Option<AdviceJson> {
    let members = r.members.len();
    r.members
        .iter()
        .filter_map(|m| {
            let d = m.detection.as_ref()?;
            let gaps = GapSummary {
                gaps: d.gaps,
                p50_ms: d.gap_p50_ms,
                p99_ms: d.gap_p99_ms,
                p999_ms: d.gap_p999_ms,
                max_ms: d.gap_max_ms,
            };
            Some((m, gaps, advise(&gaps, members, per_year)?))
        })
        .max_by_key(|(_, _, a)| a.timeout_ms)
        .map(|(m, gaps, a)| AdviceJson {
            session_timeout_ms: a.timeout_ms,
            false_expulsions_per_year: per_year,
            members,
            tail_probability_per_gap: a.tail_probability,
            basis: a.basis.as_str(),
            from_member: m.member_id.clone(),
            gaps: gaps.gaps,
            assumptions: ADVICE_ASSUMPTIONS,
        })
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

pub(super) fn render_describe(r: &DescribeGroupResponse, json: bool, per_year: f64) -> String {
    let advice = group_advice(r, per_year);
    if json {
        return to_json(&DescribeJson {
            group: r.group.clone(),
            state: r.state.as_str(),
            generation: r.generation,
            assignor: r.assignor.clone(),
            detector: r.detection.as_ref().map(|d| d.detector.clone()),
            shadow_detector: r.detection.as_ref().and_then(|d| d.shadow.clone()),
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
            advice,
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
            ],
            &detection,
        ));
        out.push('\n');
        match &advice {
            Some(a) => out.push_str(&format!(
                "advice: a session timeout of {} keeps false expulsions under {} a year across \
                 these {} members (from {}'s {} gaps, {}; each gap may exceed it with \
                 probability {:.1e})\n        assumes {}\n",
                format_ms(a.session_timeout_ms),
                per_year,
                a.members,
                a.from_member,
                a.gaps,
                a.basis.replace('_', " "),
                a.tail_probability_per_gap,
                ADVICE_ASSUMPTIONS
            )),
            None => out.push_str(&format!(
                "advice: none yet: no member has shown {MIN_GAPS} heartbeat gaps\n"
            )),
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
mod tests {
    use super::*;
    use rollcall_protocol::{GroupDetection, GroupState, Liveness, MemberDescription};

    fn member(id: &str, p50: u32, p99: u32, p999: u32, max: u32) -> MemberDescription {
        MemberDescription {
            member_id: id.into(),
            instance_id: None,
            client_id: "c".into(),
            liveness: Liveness::Alive,
            since_heartbeat_ms: 10,
            since_progress_ms: 10,
            owned: Vec::new(),
            pending_revoke: Vec::new(),
            pending_grant: Vec::new(),
            detection: Some(MemberDetection {
                in_state_ms: 1,
                phi_centi: 0,
                suspect_after_ms: 5_000,
                expel_after_ms: 10_000,
                gaps: 5_000,
                beats_lost: 0,
                beats_late: 0,
                gap_p50_ms: p50,
                gap_p99_ms: p99,
                gap_p999_ms: p999,
                gap_max_ms: max,
                expel_basis: None,
            }),
        }
    }

    fn described(members: Vec<MemberDescription>) -> DescribeGroupResponse {
        DescribeGroupResponse {
            group: "g".into(),
            state: GroupState::Stable,
            generation: 3,
            assignor: "sticky".into(),
            members,
            detection: Some(Box::new(GroupDetection {
                detector: "fixed".into(),
                shadow: None,
                summary: None,
            })),
            more: None,
        }
    }

    #[test]
    fn describe_advises_the_timeout_its_worst_member_needs() {
        let r = described(vec![
            member("calm", 1_000, 1_050, 1_100, 1_200),
            member("noisy", 1_000, 1_600, 2_400, 2_600),
        ]);
        let gaps = GapSummary {
            gaps: 5_000,
            p50_ms: 1_000,
            p99_ms: 1_600,
            p999_ms: 2_400,
            max_ms: 2_600,
        };
        let expected = advise(&gaps, 2, 1.0).unwrap();
        let text = render_describe(&r, false, 1.0);
        assert!(
            text.contains(&format!(
                "advice: a session timeout of {}",
                format_ms(expected.timeout_ms)
            )),
            "{text}"
        );
        assert!(text.contains("from noisy's 5000 gaps"), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(&render_describe(&r, true, 1.0)).unwrap();
        assert_eq!(
            json["advice"]["session_timeout_ms"],
            serde_json::json!(expected.timeout_ms)
        );
        assert_eq!(json["advice"]["from_member"], "noisy");
        // A stricter target never advises less.
        let strict: serde_json::Value =
            serde_json::from_str(&render_describe(&r, true, 0.001)).unwrap();
        assert!(strict["advice"]["session_timeout_ms"].as_u64().unwrap() >= expected.timeout_ms);
    }

    #[test]
    fn describe_says_when_there_is_too_little_to_advise_from() {
        let mut young = member("young", 1_000, 1_100, 1_200, 1_300);
        if let Some(d) = young.detection.as_mut() {
            d.gaps = 10;
        }
        let text = render_describe(&described(vec![young]), false, 1.0);
        assert!(text.contains("advice: none yet"), "{text}");
        let json = render_describe(&described(vec![]), true, 1.0);
        assert!(!json.contains("advice"), "{json}");
    }
}
