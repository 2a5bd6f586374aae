//! Inspection: ListGroups, DescribeGroup and the counts behind the gauges.

use std::time::Instant;

use rollcall_protocol::{
    ApiKey, DescribeGroupResponse, ErrorCode, GroupDetection, GroupListing, ListGroupsResponse,
    Page, PageFit, Response,
};

use super::group::{Group, Member};
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
    /// than fit an answer of `max_answer_bytes` (at least one).
    pub(super) fn describe(
        &self,
        now: Instant,
        group: &str,
        detection: bool,
        page: Option<&Page<String>>,
    ) -> Response {
        let Some(g) = self.groups.get(group) else {
            return refuse(
                ApiKey::DescribeGroup,
                ErrorCode::UnknownGroup,
                format!("no group {group:?}"),
            );
        };
        let detection = detection || page.is_some();
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
                    summary: None,
                })
            }),
            more: page.map(|_| false),
        };
        let describe = |m: &Member| g.describe_member(m, now, detection.then_some(&self.config));
        let Some(page) = page else {
            response.members = g.members.values().map(|m| describe(m)).collect();
            return Response::DescribeGroup(response);
        };
        let mut fit = self.page_fit(page.limit, response.encoded_len());
        for m in g.members.after(page.after.as_deref()) {
            let entry = describe(m);
            if !fit.take(entry.encoded_len(true)) {
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
            stats.groups_with_suspects += usize::from(suspects > 0);
        }
        stats
    }

    /// Groups whose shortest member session timeout is below the timeout the advisor
    /// gives for `per_year` false expulsions a year across the group (see
    /// [`liveness::advice`](super::liveness::advice)): groups likely to expel a live
    /// member. Costs a look at every member's gap histogram.
    pub fn groups_below_advice(&self, per_year: f64) -> usize {
        use super::liveness::advice::{advise, GapSummary};
        self.groups
            .values()
            .filter(|g| {
                let n = g.members.len();
                let advised = g
                    .members
                    .values()
                    .filter_map(|m| advise(&GapSummary::of(m.liveness.arrivals()), n, per_year))
                    .map(|a| a.timeout_ms)
                    .max();
                let shortest = g.members.values().map(|m| m.session_timeout()).min();
                match (advised, shortest) {
                    (Some(advised), Some(shortest)) => (shortest.as_millis() as u64) < advised,
                    _ => false,
                }
            })
            .count()
    }

    /// Number of timer entries (for tests and memory accounting).
    pub fn timer_entries(&self) -> usize {
        self.timers.len()
    }
}
