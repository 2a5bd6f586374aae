//! Inspection: ListGroups, DescribeGroup and the counts behind the gauges.

use std::time::Instant;

use rollcall_protocol::{
    ApiKey, DescribeGroupResponse, ErrorCode, GroupDetection, GroupListing, ListGroupsResponse,
    Response,
};

use super::{refuse, Coordinator, CoreStats};

impl Coordinator {
    pub(super) fn list_groups(&self) -> Response {
        let mut groups: Vec<GroupListing> = self
            .groups
            .values()
            .map(|g| GroupListing {
                group: g.name.to_string(),
                state: g.state(),
                generation: g.generation,
                members: g.members.len() as u32,
            })
            .collect();
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        Response::ListGroups(ListGroupsResponse { groups })
    }

    /// Describes `group`; with `detection`, how its detector judges each member too.
    pub(super) fn describe(&self, now: Instant, group: &str, detection: bool) -> Response {
        let Some(g) = self.groups.get(group) else {
            return refuse(
                ApiKey::DescribeGroup,
                ErrorCode::UnknownGroup,
                format!("no group {group:?}"),
            );
        };
        Response::DescribeGroup(DescribeGroupResponse {
            group: g.name.to_string(),
            state: g.state(),
            generation: g.generation,
            assignor: self.assignor.name().to_owned(),
            members: g
                .members
                .values()
                .map(|m| g.describe_member(m, now, detection.then_some(&self.config)))
                .collect(),
            detection: detection.then(|| {
                Box::new(GroupDetection {
                    detector: g.detector.kind().as_str().to_owned(),
                    shadow: g.shadow.as_ref().map(|s| s.kind().as_str().to_owned()),
                })
            }),
        })
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
                let shortest = g.members.values().map(|m| m.session_timeout).min();
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
