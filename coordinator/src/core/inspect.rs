//! Inspection: ListGroups, DescribeGroup and the counts behind the gauges.

use std::time::{Duration, Instant};

use rollcall_protocol::{
    ApiKey, DescribeGroupResponse, DetectionSummary, ErrorCode, ExpelBasis, GroupDetection,
    GroupListing, GroupOperator, ListGroupsResponse, MemberOperator, Page, PageFit, Reservation,
    Response,
};

use super::group::{Group, Member};
use super::liveness::advice::{advise, summarise, Advice, Target, DEFAULT_PAUSE_FLOOR};
use super::{refuse, Coordinator, CoreStats};

impl Coordinator {
    /// Every group (`page` is `None`, ListGroups version 0), or a page of them: those
    /// after the cursor, by group id, at most `limit` and no more than fit an answer of
    /// `max_answer_bytes` (at least one).
    pub(super) fn list_groups(&self, page: Option<&Page<String>>) -> Response {
        let after = page.and_then(|p| p.after.as_deref());
        let mut groups: Vec<&Group> = self
            .groups
            .values()
            .filter(|g| after.is_none_or(|a| &*g.name > a))
            .collect();
        groups.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        let listing = |g: &Group| GroupListing {
            group: g.name.to_string(),
            state: g.state(),
            generation: g.generation,
            members: g.members.len() as u32,
        };
        let Some(page) = page else {
            return Response::ListGroups(ListGroupsResponse {
                groups: groups.into_iter().map(listing).collect(),
                more: None,
            });
        };
        let mut fit = self.page_fit(page.limit, ListGroupsResponse::default().encoded_len() + 1);
        let mut listed = Vec::new();
        let mut more = false;
        for g in groups {
            let entry = listing(g);
            if !fit.take(entry.encoded_len()) {
                more = true;
                break;
            }
            listed.push(entry);
        }
        Response::ListGroups(ListGroupsResponse {
            groups: listed,
            more: Some(more),
        })
    }

    /// Describes `group`; with `detection`, how its detector judges each member too;
    /// with `page` (DescribeGroup version 2, which has the detection), only a page of
    /// its members: those after the cursor, by member id, at most `limit` and no more
    /// than fit an answer of `max_answer_bytes` (at least one); with `summary` and a
    /// page (version 3), what the detector has learned from all the members' gaps and
    /// each member's expel basis as well.
    pub(super) fn describe(
        &self,
        now: Instant,
        group: &str,
        detection: bool,
        page: Option<&Page<String>>,
        summary: bool,
        operator: bool,
    ) -> Response {
        let Some(g) = self.groups.get(group) else {
            return refuse(
                ApiKey::DescribeGroup,
                ErrorCode::UnknownGroup,
                format!("no group {group:?}"),
            );
        };
        let detection = detection || page.is_some();
        let operator = operator && page.is_some();
        let summary = (summary || operator) && page.is_some();
        let mut response = DescribeGroupResponse {
            group: g.name.to_string(),
            state: g.state(),
            generation: g.generation,
            assignor: self.assignor.name().to_owned(),
            members: Vec::new(),
            detection: detection.then(|| {
                Box::new(GroupDetection {
                    detector: g.detector.kind().as_str().to_owned(),
                    shadow: g.shadow.as_ref().map(|s| s.kind().as_str().to_owned()),
                    summary: summary
                        .then(|| detection_summary(g, now, self.config.detector_settings.floor)),
                })
            }),
            more: page.map(|_| false),
            operator: operator.then(|| Box::new(group_operator(g, now))),
        };
        let describe = |m: &Member| {
            let mut d = g.describe_member(m, now, detection.then_some(&self.config));
            if let Some(d) = d.detection.as_mut().filter(|_| summary) {
                d.expel_basis = Some(self.expel_basis(g, m));
            }
            if operator {
                d.operator = Some(member_operator(g, m));
            }
            d
        };
        let Some(page) = page else {
            response.members = g.members.values().map(|m| describe(m)).collect();
            return Response::DescribeGroup(response);
        };
        let mut fit = self.page_fit(page.limit, response.encoded_len());
        for m in g.members.after(page.after.as_deref()) {
            let entry = describe(m);
            let version = if operator {
                4
            } else if summary {
                3
            } else {
                2
            };
            if !fit.take(entry.encoded_len_at(version)) {
                response.more = Some(true);
                break;
            }
            response.members.push(entry);
        }
        Response::DescribeGroup(response)
    }

    /// What fits in a page of at most `limit` entries (0: no limit) whose answer without
    /// entries takes `base` bytes of the body.
    pub(super) fn page_fit(&self, limit: u32, base: usize) -> PageFit {
        PageFit::new(limit, self.config.max_answer_bytes, base)
    }

    /// Counts for gauges at `now`.
    pub fn stats(&self, now: Instant) -> CoreStats {
        let mut stats = CoreStats {
            groups: self.groups.len(),
            ..CoreStats::default()
        };
        for g in self.groups.values() {
            let mut suspects = 0;
            for m in g.members.values() {
                match m.liveness.liveness(now) {
                    rollcall_protocol::Liveness::Alive => stats.members_alive += 1,
                    rollcall_protocol::Liveness::Suspect => suspects += 1,
                }
            }
            stats.members_suspect += suspects;
            stats.members_drained += g.drained_count();
            stats.groups_with_suspects += usize::from(suspects > 0);
            stats.partitions_reserved += g.partitions_reserved();
            stats.revocations_waiting += g.revocations_waiting();
        }
        stats
    }

    /// Groups whose shortest member session timeout is below the timeout the advisor
    /// gives for `per_year` false expulsions a year across the group (see
    /// [`liveness::advice`](super::liveness::advice)), from the same summary of the
    /// group's pooled gaps that DescribeGroup version 3 reports: groups likely to expel
    /// a live member. Groups with too little history to advise from are not counted.
    pub fn groups_below_advice(&self, per_year: f64) -> usize {
        self.groups
            .values()
            .filter(|g| {
                let Some(shortest) = g.members.values().map(|m| m.session_timeout()).min() else {
                    return false;
                };
                let target = Target {
                    per_year,
                    members: g.members.len(),
                    pause_floor: DEFAULT_PAUSE_FLOOR,
                };
                // The summary's span is measured to the last time a member was heard:
                // the gauge is computed without a clock.
                let Some(newest) = g.members.values().map(|m| m.liveness.last_heard()).max() else {
                    return false;
                };
                let floor = self.config.detector_settings.floor;
                match advise(&detection_summary(g, newest, floor), &target) {
                    Advice::Timeout(t) => (shortest.as_millis() as u64) < t.timeout_ms,
                    Advice::NotYet { .. } => false,
                }
            })
            .count()
    }

    /// Every group's summary of its pooled heartbeat gaps at `now`, as DescribeGroup
    /// version 3 reports it and the timeout advisor reads it: for tools that drive a
    /// core themselves (the detector lab).
    pub fn detection_summaries(&self, now: Instant) -> Vec<(String, DetectionSummary)> {
        let floor = self.config.detector_settings.floor;
        self.groups
            .values()
            .map(|g| (g.name.to_string(), detection_summary(g, now, floor)))
            .collect()
    }

    /// What `m`'s expulsion deadline rests on, as the group's detector judges it.
    fn expel_basis(&self, g: &Group, m: &Member) -> ExpelBasis {
        use super::liveness::ExpelBasis as Basis;
        let arrivals = m.liveness.arrivals();
        match g.detector.basis(arrivals, &g.fleet, m.session_timeout()) {
            Basis::Young => ExpelBasis::Young,
            Basis::Clean => ExpelBasis::Clean,
            Basis::Tail => ExpelBasis::Tail,
            Basis::Session => ExpelBasis::Session,
        }
    }

    /// Number of timer entries (for tests and memory accounting).
    pub fn timer_entries(&self) -> usize {
        self.timers.len()
    }
}

/// The operator's view of `g` at `now` (DescribeGroup version 4).
fn group_operator(g: &Group, now: Instant) -> GroupOperator {
    GroupOperator {
        config: g.settings(),
        drained_labels: g.drained_labels.iter().map(|l| l.to_string()).collect(),
        reservations: g
            .held
            .iter()
            .filter_map(|h| {
                let instance = h.reserved_for.as_deref()?;
                let remaining = h.until.saturating_duration_since(now).as_millis();
                Some(Reservation {
                    instance_id: instance.to_owned(),
                    member_id: h.member.to_string(),
                    partitions: u32::try_from(h.partitions.len()).unwrap_or(u32::MAX),
                    remaining_ms: u32::try_from(remaining).unwrap_or(u32::MAX),
                })
            })
            .collect(),
    }
}

/// The operator's view of member `m` (DescribeGroup version 4).
fn member_operator(g: &Group, m: &Member) -> MemberOperator {
    let p = m.about.placement.as_deref();
    MemberOperator {
        label: p.map_or(String::new(), |p| p.label.to_string()),
        rack: p.map_or(String::new(), |p| p.rack.to_string()),
        capacity: p.map_or(1, |p| p.capacity),
        drained: g.is_drained(m),
        load: g.load_of(m),
    }
}

/// What the group's detector has learned from all its members' gaps at `now`, as
/// DescribeGroup version 3 reports it and the advisor reads it.
pub(crate) fn detection_summary(g: &Group, now: Instant, floor: Duration) -> DetectionSummary {
    summarise(
        &g.fleet,
        g.members.values().map(|m| m.liveness.arrivals()),
        floor,
        now,
    )
}
