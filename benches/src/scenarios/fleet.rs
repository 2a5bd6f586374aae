//! What the operator-control scenarios (`drain`, `racks`, `capacity`, `throttle`)
//! share: the administrative requests they send, a log of what the members saw beside
//! the [`Tracker`], and waiting until a group is quiet.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rollcall_protocol::{
    AlterGroupConfigRequest, DescribeGroupRequest, DrainRequest, GroupSettings, JoinPlacement,
    Page, Request, Response, TopicRacks,
};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::driver::{Obs, TOPIC};
use crate::probe::Admin;
use crate::target::Endpoint;
use crate::tracker::Tracker;

/// Changes (or reads) a group's operator settings; returns them as they are after.
pub(crate) async fn alter_config(
    endpoint: &Endpoint,
    request: AlterGroupConfigRequest,
) -> Result<GroupSettings, String> {
    let mut admin = Admin::connect(endpoint).await?;
    match admin.request(Request::AlterGroupConfig(request)).await? {
        Response::AlterGroupConfig(r) => Ok(r.config),
        Response::Error(e) => Err(format!(
            "AlterGroupConfig refused: {}: {}",
            e.code, e.message
        )),
        other => Err(format!("unexpected AlterGroupConfig answer {other:?}")),
    }
}

/// Drains (or undrains) one member by id; returns the members it changed.
pub(crate) async fn drain(
    endpoint: &Endpoint,
    group: &str,
    member_id: &str,
    drained: bool,
) -> Result<Vec<String>, String> {
    let mut admin = Admin::connect(endpoint).await?;
    let request = Request::Drain(DrainRequest {
        group: group.to_owned(),
        member_id: member_id.to_owned(),
        label: String::new(),
        drained,
    });
    match admin.request(request).await? {
        Response::Drain(r) => Ok(r.members),
        Response::Error(e) => Err(format!("Drain refused: {}: {}", e.code, e.message)),
        other => Err(format!("unexpected Drain answer {other:?}")),
    }
}

/// A Join v3 placement: a rack, a capacity and the preferred rack of every partition
/// of the one topic (empty: none).
pub(crate) fn placement(
    label: String,
    rack: String,
    capacity: u32,
    topic_racks: &[String],
) -> Box<JoinPlacement> {
    Box::new(JoinPlacement {
        label,
        rack,
        capacity,
        topic_racks: if topic_racks.is_empty() {
            Vec::new()
        } else {
            vec![TopicRacks {
                topic: TOPIC.to_owned(),
                racks: topic_racks.to_vec(),
            }]
        },
    })
}

/// One revoke push a member saw.
#[derive(Debug, Clone)]
pub(crate) struct Revocation {
    pub(crate) member: usize,
    pub(crate) at: Instant,
    pub(crate) generation: u32,
    pub(crate) partitions: Vec<u32>,
}

/// One answered acknowledgement of a revocation.
#[derive(Debug, Clone)]
pub(crate) struct Ack {
    pub(crate) member: usize,
    /// When the revoke push arrived.
    pub(crate) pushed: Instant,
    /// When the acknowledgement was sent.
    pub(crate) sent: Instant,
    /// When its answer came.
    pub(crate) at: Instant,
    pub(crate) partitions: Vec<u32>,
}

impl Ack {
    /// Revoke push to the acknowledgement's answer, as the member saw it.
    pub(crate) fn round_trip(&self) -> Duration {
        self.at.saturating_duration_since(self.pushed)
    }
}

/// What the members saw besides ownership: their ids, revocations, acknowledgements,
/// and when ownership last changed.
#[derive(Debug, Default)]
pub(crate) struct Log {
    pub(crate) member_ids: Vec<Option<String>>,
    pub(crate) revocations: Vec<Revocation>,
    pub(crate) acks: Vec<Ack>,
    /// The last assignment push, and the last push of any kind.
    pub(crate) last_assigned: Option<Instant>,
    pub(crate) last_change: Option<Instant>,
    /// Every assignment push: (arrival, member, generation, partitions).
    pub(crate) assignments: Vec<(Instant, usize, u32, Vec<u32>)>,
}

impl Log {
    pub(crate) fn new(members: usize) -> Self {
        Self {
            member_ids: vec![None; members],
            ..Self::default()
        }
    }

    /// Forgets the revocations, acknowledgements and assignments seen so far.
    pub(crate) fn clear_moves(&mut self) {
        self.revocations.clear();
        self.acks.clear();
        self.assignments.clear();
    }

    /// The partitions in revocation as the members saw them, replayed in time order:
    /// a revoke push lists every partition its member is asked for at the time (less
    /// those it has acknowledged already, whose release is under way), an
    /// acknowledgement sent takes its partitions off, an assignment of a later
    /// generation that gives a partition back makes it revocable again (one of the
    /// same generation may still list a partition being released: an owner keeps a
    /// partition until the coordinator has its acknowledgement). Returns the most in revocation at
    /// once, over every member, and how many (member, partition) revocations there
    /// were.
    pub(crate) fn in_revocation(&self) -> (usize, usize) {
        enum Ev<'a> {
            Ack(&'a [u32]),
            Assigned(u32, &'a [u32]),
            Revoke(u32, &'a [u32]),
        }
        let mut events: Vec<(Instant, u8, usize, Ev<'_>)> = Vec::new();
        for a in &self.acks {
            events.push((a.sent, 0, a.member, Ev::Ack(&a.partitions)));
        }
        for (at, m, generation, p) in &self.assignments {
            events.push((*at, 1, *m, Ev::Assigned(*generation, p)));
        }
        for r in &self.revocations {
            events.push((r.at, 2, r.member, Ev::Revoke(r.generation, &r.partitions)));
        }
        events.sort_by_key(|(at, order, m, _)| (*at, *order, *m));
        let members = self.member_ids.len();
        let mut asked: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); members];
        // Released partitions, with the generation of the push that asked for them.
        let mut released: Vec<BTreeMap<u32, u32>> = vec![BTreeMap::new(); members];
        let mut generation = vec![0u32; members];
        let (mut now, mut max, mut total) = (0usize, 0usize, 0usize);
        for (_, _, m, ev) in events {
            let (Some(asked), Some(released), Some(generation)) =
                (asked.get_mut(m), released.get_mut(m), generation.get_mut(m))
            else {
                continue;
            };
            match ev {
                Ev::Ack(ps) => {
                    for p in ps {
                        if asked.remove(p) {
                            now -= 1;
                        }
                        released.insert(*p, *generation);
                    }
                }
                Ev::Assigned(g, ps) => {
                    for p in ps {
                        if released.get(p).is_some_and(|r| *r < g) {
                            released.remove(p);
                        }
                    }
                }
                Ev::Revoke(g, ps) => {
                    *generation = g;
                    let new: BTreeSet<u32> = ps
                        .iter()
                        .copied()
                        .filter(|p| !released.contains_key(p))
                        .collect();
                    total += new.difference(asked).count();
                    now = now - asked.len() + new.len();
                    *asked = new;
                }
            }
            max = max.max(now);
        }
        (max, total)
    }

    fn record(&mut self, obs: &Obs) {
        match obs {
            Obs::Joined {
                member, member_id, ..
            } => {
                if let Some(slot) = self.member_ids.get_mut(*member) {
                    *slot = Some(member_id.clone());
                }
            }
            Obs::Assigned {
                member,
                at,
                generation,
                partitions,
            } => {
                self.last_assigned = Some(*at);
                self.last_change = Some(*at);
                self.assignments
                    .push((*at, *member, *generation, partitions.clone()));
            }
            Obs::Revoked {
                member,
                at,
                generation,
                partitions,
            } => {
                self.last_change = Some(*at);
                self.revocations.push(Revocation {
                    member: *member,
                    at: *at,
                    generation: *generation,
                    partitions: partitions.clone(),
                });
            }
            Obs::Acked {
                member,
                pushed,
                sent,
                at,
                partitions,
            } => self.acks.push(Ack {
                member: *member,
                pushed: *pushed,
                sent: *sent,
                at: *at,
                partitions: partitions.clone(),
            }),
            _ => {}
        }
    }

    /// Applies observations to `tracker` (recording them here) until `until`, or
    /// sooner once `done` holds.
    pub(crate) async fn absorb(
        &mut self,
        tracker: &mut Tracker,
        observations: &mut UnboundedReceiver<Obs>,
        until: Instant,
        mut done: impl FnMut(&Tracker, &Self) -> bool,
    ) {
        let mut batch = Vec::with_capacity(256);
        while Instant::now() < until && !done(tracker, self) {
            tokio::select! {
                n = observations.recv_many(&mut batch, 256) => {
                    if n == 0 {
                        return;
                    }
                    for obs in batch.drain(..) {
                        self.record(&obs);
                        tracker.apply(&obs);
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
    }

    /// Waits (at most until `until`) for group 0 to be owned exactly once with nothing
    /// being revoked and no push for `quiet` (counted from the call at the earliest). Returns whether it was.
    pub(crate) async fn quiet(
        &mut self,
        tracker: &mut Tracker,
        observations: &mut UnboundedReceiver<Obs>,
        quiet: Duration,
        until: Instant,
    ) -> bool {
        // Quiet counts from the call at the earliest.
        let start = Instant::now();
        let done = |t: &Tracker, log: &Self| {
            t.owned_once(0) && log.last_change.map_or(start, |c| c.max(start)).elapsed() >= quiet
        };
        self.absorb(tracker, observations, until, done).await;
        done(tracker, self)
    }
}

/// The owner of every partition of group 0 (`None`: nobody).
pub(crate) fn owners(tracker: &Tracker, partitions: u32) -> Vec<Option<usize>> {
    let mut out = vec![None; partitions as usize];
    for (m, owned) in tracker.owned.iter().enumerate() {
        if tracker.group_of(m) != 0 {
            continue;
        }
        for &p in owned {
            if let Some(slot) = out.get_mut(p as usize) {
                *slot = Some(m);
            }
        }
    }
    out
}

/// Partitions whose owner differs between `before` and `after`.
pub(crate) fn changed(before: &[Option<usize>], after: &[Option<usize>]) -> Vec<u32> {
    before
        .iter()
        .zip(after)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(p, _)| p as u32)
        .collect()
}

/// Milliseconds of a duration, for figures.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The loads the coordinator holds for each member of `group` (DescribeGroup version
/// 4: the sum of the loads it last reported for the partitions it owns).
pub(crate) async fn member_loads(endpoint: &Endpoint, group: &str) -> Result<Vec<f64>, String> {
    let mut admin = Admin::connect(endpoint).await?;
    let request = Request::DescribeGroup(DescribeGroupRequest {
        group: group.to_owned(),
        detection: false,
        // Version 4 (the operator's view) is paged.
        page: Some(Page::default()),
        summary: false,
        operator: true,
    });
    match admin.request(request).await? {
        Response::DescribeGroup(r) => Ok(r
            .members
            .iter()
            .map(|m| m.operator.as_ref().map_or(0.0, |o| o.load))
            .collect()),
        Response::Error(e) => Err(format!("DescribeGroup refused: {}: {}", e.code, e.message)),
        other => Err(format!("unexpected DescribeGroup answer {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revoke(log: &mut Log, member: usize, at: Instant, generation: u32, partitions: &[u32]) {
        log.record(&Obs::Revoked {
            member,
            at,
            generation,
            partitions: partitions.to_vec(),
        });
    }

    fn ack(log: &mut Log, member: usize, sent: Instant, partitions: &[u32]) {
        log.record(&Obs::Acked {
            member,
            pushed: sent,
            sent,
            at: sent,
            partitions: partitions.to_vec(),
        });
    }

    #[test]
    fn revoke_pushes_list_every_partition_asked_and_acknowledged_ones_are_not_counted_again() {
        let t = Instant::now();
        let ms = |n: u64| t + Duration::from_millis(n);
        let mut log = Log::new(2);
        revoke(&mut log, 0, ms(1), 2, &[1, 2]);
        revoke(&mut log, 1, ms(2), 2, &[7]);
        // A later push repeats what is still asked and adds one.
        revoke(&mut log, 0, ms(3), 2, &[1, 2, 3]);
        assert_eq!(log.in_revocation(), (4, 4));
        ack(&mut log, 0, ms(4), &[1, 2]);
        // A push sent before the acknowledgement arrived still lists 1 and 2.
        revoke(&mut log, 0, ms(5), 2, &[1, 2, 3]);
        ack(&mut log, 0, ms(6), &[3]);
        ack(&mut log, 1, ms(6), &[7]);
        assert_eq!(log.in_revocation(), (4, 4));
        // An assignment of the same generation listing a released partition does not
        // make it revocable again; one of a later generation does.
        log.record(&Obs::Assigned {
            member: 0,
            at: ms(7),
            generation: 2,
            partitions: vec![1],
        });
        revoke(&mut log, 0, ms(8), 2, &[1]);
        assert_eq!(log.in_revocation(), (4, 4));
        log.record(&Obs::Assigned {
            member: 0,
            at: ms(9),
            generation: 3,
            partitions: vec![1],
        });
        revoke(&mut log, 0, ms(10), 3, &[1]);
        assert_eq!(log.in_revocation(), (4, 5));
    }

    #[test]
    fn owners_and_changes() {
        let before = vec![Some(0), Some(1), None];
        let after = vec![Some(0), Some(2), Some(1)];
        assert_eq!(changed(&before, &after), vec![1, 2]);
    }
}
