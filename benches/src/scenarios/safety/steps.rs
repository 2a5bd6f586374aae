//! How the safety run does each fault and waits for the cluster to recover from it,
//! and how the oracle reads the records between faults.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rollcall_tests::fleet::{check, lost_commits, Fleet, Record};
use rollcall_tests::proxy::{Direction, Proxy};

use super::faults::Fault;
use super::{FaultRound, SafetyArgs};
use crate::common::group_name;
use crate::scenarios::failover::cluster::{Coordinators, Etcd};
use crate::scenarios::failover::members::placement;
use crate::scenarios::failover::spread;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A fault's round, or the round so far and why the run cannot go on.
pub(super) type Step = Result<FaultRound, (FaultRound, String)>;

/// The run's state between faults.
pub(super) struct Run<'a> {
    pub(super) args: &'a SafetyArgs,
    pub(super) fleet: &'a mut Fleet,
    /// Every record so far, in order (taken from the fleet as the run goes).
    pub(super) archive: Vec<Record>,
    pub(super) settled_at: Instant,
    pub(super) lost: Vec<String>,
    pub(super) exited: Vec<(String, String)>,
}

impl Run<'_> {
    /// Joins one more member to the group with the fewest members of those served by
    /// coordinator `on` (of all, when `None`); returns the group.
    pub(super) async fn join_one(
        &mut self,
        nodes: &Coordinators,
        on: Option<usize>,
    ) -> Result<String, String> {
        let placed = placement(nodes.alive()[0], self.args.groups).await?;
        let on = on.map(|i| Some(nodes.addrs()[i]));
        let mut sizes = vec![0usize; self.args.groups];
        for group in &self.fleet.groups {
            if let Some(g) = group
                .strip_prefix('g')
                .and_then(|g| g.parse::<usize>().ok())
            {
                sizes[g] += 1;
            }
        }
        let g = (0..self.args.groups)
            .filter(|g| on.is_none_or(|a| placed[*g] == a))
            .min_by_key(|g| (sizes[*g], *g))
            .ok_or("the coordinator to be hit serves no group")?;
        // Member k of every group lives on client k.
        self.fleet.add(sizes[g], &group_name(g)).await?;
        Ok(group_name(g))
    }

    /// Kills coordinator `i`, waits until every member is answered again, restarts it
    /// and waits until the cluster has settled again.
    pub(super) async fn kill(&mut self, nodes: &mut Coordinators, i: usize) -> Step {
        let mut round = FaultRound::new(Fault::Kill, nodes.id(i).to_owned());
        let at = Instant::now();
        nodes.kill(i);
        round.answered_ms = self.answered(at).await.map(ms);
        round.commits_again_ms = self.commits_again(at).await.map(ms);
        if let Err(e) = nodes.restart(i).await {
            return Err((round, e));
        }
        self.recovered(nodes, at, round).await
    }

    /// Swallows coordinator `i`'s etcd traffic until every group is served by
    /// another coordinator and every member answered, then lets it through again
    /// (its connections closed, so that it starts afresh) and waits until the cluster
    /// has settled again.
    pub(super) async fn cut(
        &mut self,
        nodes: &mut Coordinators,
        proxies: &[Proxy],
        i: usize,
    ) -> Step {
        let mut round = FaultRound::new(Fault::Cut, nodes.id(i).to_owned());
        let at = Instant::now();
        for p in proxies {
            p.set_blackhole(Direction::Both, true);
        }
        let adopted = adopted(nodes, self.args.groups, i, at + self.args.setup_timeout).await;
        round.adopted_ms = adopted.is_ok().then(|| ms(at.elapsed()));
        round.answered_ms = self.answered(at).await.map(ms);
        round.commits_again_ms = self.commits_again(at).await.map(ms);
        for p in proxies {
            p.set_blackhole(Direction::Both, false);
            p.cut();
        }
        if let Err(e) = adopted {
            return Err((round, e));
        }
        self.recovered(nodes, at, round).await
    }

    /// Kills the etcd leader, waits until commits are accepted again and every member
    /// answered, restarts it on its data and waits until the cluster has settled again.
    pub(super) async fn kill_leader(&mut self, etcd: &mut Etcd, nodes: &mut Coordinators) -> Step {
        let mut round = FaultRound::new(Fault::LeaderKill, String::new());
        let asked = Instant::now();
        let leader = loop {
            if let Some(l) = etcd.leader().await {
                break l;
            }
            if asked.elapsed() > self.args.setup_timeout {
                return Err((round, "the etcd members agree on no leader".into()));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        round.target = format!("e{leader}");
        let at = Instant::now();
        etcd.kill(leader);
        round.commits_again_ms = self.commits_again(at).await.map(ms);
        round.answered_ms = self.answered(at).await.map(ms);
        if let Err(e) = etcd.restart(leader).await {
            return Err((round, e));
        }
        self.recovered(nodes, at, round).await
    }

    /// Restarts the coordinators that exited by themselves, then waits until every
    /// group is spread over every coordinator, the groups have settled and every
    /// member had a heartbeat sent after now answered.
    async fn recovered(
        &mut self,
        nodes: &mut Coordinators,
        at: Instant,
        round: FaultRound,
    ) -> Step {
        let mut round = round;
        let deadline = Instant::now() + self.args.setup_timeout;
        for (id, status) in nodes.exited() {
            self.exited.push((id.clone(), status));
            let Some(i) = (0..self.args.cluster.coordinators).find(|i| nodes.id(*i) == id) else {
                continue;
            };
            if let Err(e) = nodes.restart(i).await {
                return Err((round, e));
            }
        }
        let restored = Instant::now();
        if let Err(e) = spread(nodes, self.args.groups, deadline).await {
            return Err((round, e));
        }
        loop {
            let answered = self.fleet.answered_since(restored);
            if self.fleet.settled() && answered == self.fleet.members.len() {
                round.recovered_ms = Some(ms(at.elapsed()));
                return Ok(round);
            }
            if Instant::now() > deadline {
                let why = format!(
                    "not settled again within {:?} of the restore ({answered} of {} members answered)",
                    self.args.setup_timeout,
                    self.fleet.members.len()
                );
                return Err((round, why));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How long after `since` every member had a heartbeat sent after it answered
    /// (at most the setup timeout).
    async fn answered(&self, since: Instant) -> Option<Duration> {
        loop {
            if self.fleet.answered_since(since) == self.fleet.members.len() {
                return Some(since.elapsed());
            }
            if since.elapsed() > self.args.setup_timeout {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How long after `since` the first commit sent after it was accepted (at most
    /// the setup timeout).
    async fn commits_again(&mut self, since: Instant) -> Option<Duration> {
        let mut from = self.archive.len();
        loop {
            self.archive.extend(self.fleet.take_records());
            let first = self.archive[from..]
                .iter()
                .filter_map(|r| match r {
                    Record::Commit {
                        sent,
                        done,
                        accepted: true,
                        ..
                    } if *sent >= since => Some(*done),
                    _ => None,
                })
                .min();
            if let Some(done) = first {
                return Some(done - since);
            }
            from = self.archive.len();
            if since.elapsed() > self.args.setup_timeout {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The offsets committed now, asked again for a while if a coordinator cannot
    /// answer yet.
    pub(super) async fn committed(
        &self,
    ) -> Result<std::collections::BTreeMap<(String, rollcall_client::TopicPartition), i64>, String>
    {
        let mut tries = 0;
        loop {
            match self.fleet.try_committed().await {
                Ok(c) => return Ok(c),
                Err(e) if tries >= 20 => return Err(e),
                Err(_) => tries += 1,
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Runs the oracle over everything recorded so far, and checks that every commit
    /// acknowledged so far is still there; fills in `round`'s counts.
    pub(super) async fn read(&mut self, round: &mut FaultRound) {
        self.archive.extend(self.fleet.take_records());
        // Read after the records: every commit they hold was answered before.
        let committed = self.committed().await;
        let (archive, groups) = (&self.archive, &self.fleet.groups);
        let settled_at = self.settled_at;
        let verdict =
            tokio::task::block_in_place(|| check(archive, groups, settled_at, Instant::now()));
        let lost = match committed {
            Ok(committed) => lost_commits(&verdict, &committed),
            Err(e) => vec![format!("offsets not read after fault {}: {e}", round.n)],
        };
        round.violations_so_far = verdict.violations.len();
        round.lost_commits = lost.len();
        round.lost_events_so_far = verdict.lost.len();
        round.moves_so_far = verdict.moves.len();
        for l in lost {
            if !self.lost.contains(&l) {
                self.lost.push(l);
            }
        }
    }
}

/// Waits (until `deadline`) until the coordinators other than `cut` answer that they
/// serve every group between them.
async fn adopted(
    nodes: &Coordinators,
    groups: usize,
    cut: usize,
    deadline: Instant,
) -> Result<(), String> {
    let cut_addr = nodes.addrs()[cut];
    let others: Vec<SocketAddr> = nodes
        .alive()
        .into_iter()
        .filter(|a| *a != cut_addr)
        .collect();
    let ask = *others.first().ok_or("no coordinator left to take over")?;
    loop {
        if let Ok(placed) = placement(ask, groups).await {
            if placed
                .iter()
                .all(|p| p.is_some_and(|a| others.contains(&a)))
            {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} cut off from etcd: its groups were not served by another coordinator in time",
                nodes.id(cut)
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the members of a finding's group recorded about its partition (a finding
/// reads `group/topic-partition: ...`), one line each, times from `settled_at`: the
/// evidence to trace it with. At most `limit` lines a finding, the last ones.
pub(super) fn evidence(
    records: &[Record],
    groups: &[String],
    findings: &[String],
    settled_at: Instant,
    limit: usize,
) -> Vec<Vec<String>> {
    let since = |at: &Instant| at.saturating_duration_since(settled_at).as_secs_f64();
    findings
        .iter()
        .map(|finding| {
            let Some((group, partition)) = finding
                .split(':')
                .next()
                .and_then(|key| key.split_once('/'))
            else {
                return Vec::new();
            };
            let names = |ps: &rollcall_client::PartitionSet| {
                ps.iter().any(|p| p.to_string() == partition)
            };
            let mut lines: Vec<String> = records
                .iter()
                .filter_map(|r| match r {
                    Record::Event { at, member, event } if groups[*member] == group => {
                        let about = match event {
                            rollcall_client::Event::Assigned { partitions, .. }
                            | rollcall_client::Event::Resumed { partitions }
                            | rollcall_client::Event::Suspended { partitions }
                            | rollcall_client::Event::RevokeRequested { partitions, .. }
                            | rollcall_client::Event::Lost { partitions, .. } => names(partitions),
                            _ => true,
                        };
                        about.then(|| format!("{:.3} s member {member}: {event:?}", since(at)))
                    }
                    Record::Released {
                        at,
                        member,
                        partitions,
                    } if groups[*member] == group && names(partitions) => {
                        Some(format!("{:.3} s member {member}: released", since(at)))
                    }
                    Record::Commit {
                        member,
                        partitions,
                        offset,
                        sent,
                        done,
                        accepted,
                    } if groups[*member] == group && names(partitions) => Some(format!(
                        "{:.3} s member {member}: commit {offset} sent, answered at {:.3} s, accepted {accepted}",
                        since(sent),
                        since(done)
                    )),
                    _ => None,
                })
                .collect();
            if lines.len() > limit {
                lines.drain(..lines.len() - limit);
            }
            lines
        })
        .collect()
}
