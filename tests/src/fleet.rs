//! Members through the client crate whose every grant, acknowledgement and commit is
//! recorded ([`Fleet`]), and the oracle that reads those records ([`check`]): no
//! partition acted on by two members at once, no commit accepted from a member while
//! another held the partition, every accepted commit still there.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rollcall_client::{
    Client, ClientConfig, Event, Member, MemberConfig, Offset, PartitionSet, TopicPartition,
};
use tokio::task::JoinHandle;

use crate::bounded;

/// The topic every member of a [`Fleet`] subscribes to.
pub const TOPIC: &str = "t";

/// What the members did and were told, in the order it happened.
#[derive(Debug, Clone)]
pub enum Record {
    /// Member `member` took `event` from its event stream at `at`.
    Event {
        at: Instant,
        member: usize,
        event: Event,
    },
    /// Member `member` released `partitions` (acknowledged their revocation) at `at`.
    Released {
        at: Instant,
        member: usize,
        partitions: PartitionSet,
    },
    /// Member `member` committed `offset` on `partitions`: sent at `sent`, answered
    /// at `done`; `accepted` when the coordinator acknowledged it whole.
    Commit {
        member: usize,
        partitions: PartitionSet,
        offset: i64,
        sent: Instant,
        done: Instant,
        accepted: bool,
    },
}

/// The timeouts a [`Fleet`]'s members ask for.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub session: Duration,
    pub lease: Duration,
    pub heartbeat: Duration,
}

/// Members of `groups` groups, `per_group` each, through the client crate: client `k`
/// (one process, in effect) holds member `k` of every group, so that one client's
/// members live on several coordinators. Each member takes its events at once,
/// commits what it holds every 100 ms while committing is on (suspended or not: the
/// coordinator fences), commits and acknowledges revocations at once, and records it
/// all.
pub struct Fleet {
    /// Each member's group.
    pub groups: Vec<String>,
    /// The members, by index.
    pub members: Vec<Arc<Member>>,
    /// Partitions per group.
    pub partitions: u32,
    /// What every member did and was told.
    pub records: Arc<Mutex<Vec<Record>>>,
    committing: Arc<AtomicBool>,
    /// Commits sent and not yet answered.
    in_flight: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
    clients: Vec<Client>,
    config: MemberConfig,
    /// How often each member commits what it holds while committing is on.
    commit_every: Duration,
    /// The next offset any member commits: offsets only grow, across members.
    next_offset: Arc<AtomicI64>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

/// The group names of a fleet of `groups` groups.
pub fn group_names(prefix: &str, groups: usize) -> Vec<String> {
    (0..groups).map(|g| format!("{prefix}-{g}")).collect()
}

/// A client that finds each group's coordinator from `bootstrap`.
pub async fn connect(bootstrap: &[SocketAddr]) -> Client {
    let mut config = ClientConfig::default();
    config.reconnect_base = Duration::from_millis(20);
    config.reconnect_max = Duration::from_millis(200);
    config.connect_timeout = Duration::from_secs(2);
    config.bootstrap = bootstrap[1..].iter().map(ToString::to_string).collect();
    bounded("client connect", Client::connect(bootstrap[0], config))
        .await
        .expect("client connects")
}

impl Fleet {
    /// Joins `per_group` members to each of `groups`, through clients bootstrapped
    /// from `bootstrap`; each member commits every 100 ms while committing is on.
    pub async fn join(
        bootstrap: &[SocketAddr],
        groups: &[String],
        per_group: usize,
        partitions: u32,
        timeouts: Timeouts,
    ) -> Self {
        let every = Duration::from_millis(100);
        Self::join_committing_every(bootstrap, groups, per_group, partitions, timeouts, every).await
    }

    /// [`Self::join`], each member committing every `commit_every` (a long run keeps
    /// fewer records with a longer one).
    pub async fn join_committing_every(
        bootstrap: &[SocketAddr],
        groups: &[String],
        per_group: usize,
        partitions: u32,
        timeouts: Timeouts,
        commit_every: Duration,
    ) -> Self {
        let config = MemberConfig::new("", [(TOPIC, partitions)])
            .with_session_timeout(timeouts.session)
            .with_lease_timeout(timeouts.lease)
            .with_heartbeat_interval(timeouts.heartbeat)
            .with_rebalance_timeout(Duration::from_secs(5));
        let records = Arc::new(Mutex::new(Vec::new()));
        let committing = Arc::new(AtomicBool::new(false));
        let next_offset = Arc::new(AtomicI64::new(1));
        let mut fleet = Self {
            groups: Vec::new(),
            members: Vec::new(),
            partitions,
            records,
            committing,
            in_flight: Arc::new(AtomicUsize::new(0)),
            tasks: Vec::new(),
            clients: Vec::new(),
            config,
            commit_every,
            next_offset: next_offset.clone(),
        };
        for k in 0..per_group {
            // Each client starts from another coordinator.
            let mut order = bootstrap.to_vec();
            order.rotate_left(k % bootstrap.len());
            fleet.clients.push(connect(&order).await);
        }
        for k in 0..per_group {
            for group in groups {
                let mut config = fleet.config.clone();
                config.group.clone_from(group);
                let member = bounded("join", fleet.clients[k].join(config))
                    .await
                    .unwrap_or_else(|e| panic!("{group}: join failed: {e}"));
                let index = fleet.members.len();
                fleet.groups.push(group.clone());
                fleet.members.push(Arc::new(member));
                fleet.spawn_member(index, next_offset.clone());
            }
        }
        fleet
    }

    /// Joins one more member to `group` through client `client` (of the `per_group`
    /// clients, by index), recorded like the others; returns its index. A join while
    /// the members commit starts a rebalance that moves partitions to it.
    pub async fn add(&mut self, client: usize, group: &str) -> Result<usize, String> {
        let mut config = self.config.clone();
        config.group = group.to_owned();
        let join = self.clients[client % self.clients.len()].join(config);
        let member = match tokio::time::timeout(crate::STEP, join).await {
            Ok(Ok(member)) => member,
            Ok(Err(e)) => return Err(format!("{group}: join failed: {e}")),
            Err(_) => return Err(format!("{group}: no join within {:?}", crate::STEP)),
        };
        let index = self.members.len();
        self.groups.push(group.to_owned());
        self.members.push(Arc::new(member));
        self.spawn_member(index, self.next_offset.clone());
        Ok(index)
    }

    fn spawn_member(&mut self, index: usize, next_offset: Arc<AtomicI64>) {
        let member = self.members[index].clone();
        let records = self.records.clone();
        let in_flight = self.in_flight.clone();
        let events = tokio::spawn({
            let member = member.clone();
            let records = records.clone();
            let next_offset = next_offset.clone();
            let in_flight = in_flight.clone();
            async move {
                while let Some(event) = member.next_event().await {
                    records.lock().push(Record::Event {
                        at: Instant::now(),
                        member: index,
                        event: event.clone(),
                    });
                    match event {
                        Event::RevokeRequested { partitions, .. } => {
                            let ledger = (&*next_offset, &*records, &*in_flight);
                            commit(&member, index, &partitions, ledger).await;
                            let _ = member.ack_revocation(partitions.iter().cloned());
                            records.lock().push(Record::Released {
                                at: Instant::now(),
                                member: index,
                                partitions,
                            });
                        }
                        Event::Fatal(_) => return,
                        _ => {}
                    }
                }
            }
        });
        let committing = self.committing.clone();
        let every = self.commit_every;
        let commits = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if !committing.load(Ordering::SeqCst) {
                    continue;
                }
                let assignment = member.assignment();
                let held: PartitionSet = assignment
                    .partitions
                    .difference(&assignment.revoking)
                    .cloned()
                    .collect();
                if !held.is_empty() {
                    commit(&member, index, &held, (&next_offset, &records, &in_flight)).await;
                }
            }
        });
        self.tasks.push(events);
        self.tasks.push(commits);
    }

    /// Starts the members' periodic commits.
    pub fn start_committing(&self) {
        self.committing.store(true, Ordering::SeqCst);
    }

    /// Stops the members' periodic commits and waits until every commit sent was
    /// answered (or gave up).
    pub async fn stop_committing(&self) {
        self.committing.store(false, Ordering::SeqCst);
        bounded("commits answered", async {
            // A commit task may have read the flag just before it changed.
            tokio::time::sleep(Duration::from_millis(150)).await;
            while self.in_flight.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    /// The distinct groups, in order.
    pub fn group_list(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.groups
            .iter()
            .filter(|g| seen.insert((*g).clone()))
            .cloned()
            .collect()
    }

    /// Whether every group's partitions are each held by exactly one of its members,
    /// evenly, nothing being revoked and no member suspended.
    pub fn settled(&self) -> bool {
        let mut held: BTreeMap<&str, Vec<PartitionSet>> = BTreeMap::new();
        for (member, group) in self.members.iter().zip(&self.groups) {
            let a = member.assignment();
            if member.is_suspended() || !a.revoking.is_empty() || a.generation == 0 {
                return false;
            }
            held.entry(group).or_default().push(a.partitions);
        }
        held.values().all(|sets| {
            let total: usize = sets.iter().map(PartitionSet::len).sum();
            let union: BTreeSet<&TopicPartition> = sets.iter().flatten().collect();
            let fair = (self.partitions as usize).div_ceil(sets.len());
            total == self.partitions as usize
                && union.len() == total
                && sets.iter().all(|s| s.len() + 1 >= fair && s.len() <= fair)
        })
    }

    /// Waits (at most `within`) until [`Self::settled`].
    pub async fn wait_settled(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.settled() {
            assert!(
                Instant::now() < deadline,
                "the groups did not settle within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Members whose latest acknowledged heartbeat was sent after `since`, of all.
    pub fn answered_since(&self, since: Instant) -> usize {
        let renewal = self.config.effective_lease_timeout() - self.config.effective_lease_margin();
        self.members
            .iter()
            .filter(|m| {
                !m.is_suspended() && m.lease_deadline().is_some_and(|d| d > since + renewal)
            })
            .count()
    }

    /// Waits (at most `within`) until every member has had a heartbeat sent after
    /// `since` acknowledged and is not suspended; returns how long after `since`.
    pub async fn wait_answered_since(&self, since: Instant, within: Duration) -> Duration {
        let deadline = Instant::now() + within;
        loop {
            let answered = self.answered_since(since);
            if answered == self.members.len() {
                return since.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "only {answered} of {} members had a heartbeat answered within {within:?}",
                self.members.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every member's generation, by index.
    pub fn generations(&self) -> Vec<u32> {
        self.members
            .iter()
            .map(|m| m.assignment().generation)
            .collect()
    }

    /// The offsets committed in every group, read through one of the fleet's clients.
    pub async fn committed(&self) -> BTreeMap<(String, TopicPartition), i64> {
        self.try_committed()
            .await
            .unwrap_or_else(|e| panic!("fetching offsets failed: {e}"))
    }

    /// [`Self::committed`], or the first group whose offsets could not be read (each
    /// read bounded by [`crate::STEP`]).
    pub async fn try_committed(&self) -> Result<BTreeMap<(String, TopicPartition), i64>, String> {
        let mut out = BTreeMap::new();
        for group in self.group_list() {
            let fetch = self.clients[0].fetch_offsets(group.clone(), [TOPIC]);
            let offsets = match tokio::time::timeout(crate::STEP, fetch).await {
                Ok(Ok(offsets)) => offsets,
                Ok(Err(e)) => return Err(format!("{group}: {e}")),
                Err(_) => return Err(format!("{group}: no answer within {:?}", crate::STEP)),
            };
            for (tp, c) in offsets {
                out.insert((group.clone(), tp), c.offset);
            }
        }
        Ok(out)
    }

    /// The records so far.
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().clone()
    }

    /// Takes the records so far, leaving none: a long run keeps them (in order) and
    /// reads them without holding up the members, which record as they go.
    pub fn take_records(&self) -> Vec<Record> {
        std::mem::take(&mut *self.records.lock())
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Commits `offset` (the next of `next_offset`, so offsets only grow) on `partitions`
/// for member `index`, bounded in time, and records it.
async fn commit(
    member: &Member,
    index: usize,
    partitions: &PartitionSet,
    (next_offset, records, in_flight): (&AtomicI64, &Mutex<Vec<Record>>, &AtomicUsize),
) {
    in_flight.fetch_add(1, Ordering::SeqCst);
    let offset = next_offset.fetch_add(1, Ordering::SeqCst);
    let offsets: Vec<Offset> = partitions
        .iter()
        .map(|p| Offset::new(p.clone(), offset))
        .collect();
    let sent = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), member.commit(offsets)).await;
    records.lock().push(Record::Commit {
        member: index,
        partitions: partitions.clone(),
        offset,
        sent,
        done: Instant::now(),
        accepted: matches!(result, Ok(Ok(()))),
    });
    in_flight.fetch_sub(1, Ordering::SeqCst);
}

/// What the oracle found in a fleet's records.
#[derive(Debug, Default)]
pub struct Verdict {
    /// A partition acted on by two members at once, or a commit accepted from a member
    /// while another held the partition.
    pub violations: Vec<String>,
    /// Every `Lost` event: (member, event).
    pub lost: Vec<(usize, Event)>,
    /// Assignments and revocations after the groups settled: (member, event).
    pub moves: Vec<(usize, Event)>,
    /// Commits accepted.
    pub accepted: usize,
    /// Per (group, partition): the highest offset accepted, and the highest sent.
    pub offsets: BTreeMap<(String, TopicPartition), (Option<i64>, i64)>,
}

/// A stretch of time during which a member acted on a partition: from the event that
/// gave it (Assigned, or Resumed) to the one that took it away (Suspended, Lost,
/// Fatal) or its release.
#[derive(Debug, Clone, Copy)]
struct Held {
    member: usize,
    from: Instant,
    to: Instant,
}

/// Reads `records` of members in `groups` (by member index): ownership, commits,
/// losses, and moves after `settled_at`. The records end at `end`.
pub fn check(records: &[Record], groups: &[String], settled_at: Instant, end: Instant) -> Verdict {
    let mut verdict = Verdict::default();
    let mut open: BTreeMap<(usize, TopicPartition), Instant> = BTreeMap::new();
    let mut held: BTreeMap<(String, TopicPartition), Vec<Held>> = BTreeMap::new();
    let mut close = |open: &mut BTreeMap<(usize, TopicPartition), Instant>,
                     member: usize,
                     p: &TopicPartition,
                     at: Instant| {
        if let Some(from) = open.remove(&(member, p.clone())) {
            held.entry((groups[member].clone(), p.clone()))
                .or_default()
                .push(Held {
                    member,
                    from,
                    to: at,
                });
        }
    };
    for record in records {
        match record {
            Record::Event { at, member, event } => {
                let member = *member;
                match event {
                    Event::Assigned { partitions, .. } | Event::Resumed { partitions } => {
                        for p in partitions {
                            open.entry((member, p.clone())).or_insert(*at);
                        }
                    }
                    Event::Suspended { .. } | Event::Fatal(_) => {
                        let mine: Vec<TopicPartition> = open
                            .keys()
                            .filter(|(m, _)| *m == member)
                            .map(|(_, p)| p.clone())
                            .collect();
                        for p in &mine {
                            close(&mut open, member, p, *at);
                        }
                    }
                    Event::Lost { partitions, .. } => {
                        for p in partitions {
                            close(&mut open, member, p, *at);
                        }
                    }
                    _ => {}
                }
                if matches!(event, Event::Lost { .. }) {
                    verdict.lost.push((member, event.clone()));
                }
                if *at > settled_at
                    && matches!(
                        event,
                        Event::Assigned { .. } | Event::RevokeRequested { .. }
                    )
                {
                    verdict.moves.push((member, event.clone()));
                }
            }
            Record::Released {
                at,
                member,
                partitions,
            } => {
                for p in partitions {
                    close(&mut open, *member, p, *at);
                }
            }
            Record::Commit {
                member,
                partitions,
                offset,
                accepted,
                ..
            } => {
                for p in partitions {
                    let entry = verdict
                        .offsets
                        .entry((groups[*member].clone(), p.clone()))
                        .or_insert((None, *offset));
                    entry.1 = entry.1.max(*offset);
                    if *accepted {
                        entry.0 = Some(entry.0.map_or(*offset, |o| o.max(*offset)));
                    }
                }
                if *accepted {
                    verdict.accepted += 1;
                }
            }
        }
    }
    for (member, p) in open.keys().cloned().collect::<Vec<_>>() {
        close(&mut open, member, &p, end);
    }
    for ((group, p), stretches) in &mut held {
        stretches.sort_by_key(|h| h.from);
        // Two members at once: a stretch that starts before an earlier one of another
        // member ends.
        let mut latest: Option<Held> = None;
        for h in stretches.iter() {
            if let Some(l) = latest {
                if h.from < l.to && h.member != l.member {
                    verdict.violations.push(format!(
                        "{group}/{p}: member {} acted from {:?} while member {} did until {:?} after",
                        h.member,
                        h.from - settled_at.min(h.from),
                        l.member,
                        l.to - h.from
                    ));
                }
            }
            if latest.is_none_or(|l| h.to > l.to) {
                latest = Some(*h);
            }
        }
    }
    // A commit accepted while another member held the partition from before it was
    // sent to after it was answered: the coordinator took it from a fenced member.
    for record in records {
        let Record::Commit {
            member,
            partitions,
            offset,
            sent,
            done,
            accepted: true,
        } = record
        else {
            continue;
        };
        for p in partitions {
            let key = (groups[*member].clone(), p.clone());
            let others = held.get(&key).into_iter().flatten();
            for h in others.filter(|h| h.member != *member) {
                if h.from <= *sent && *done <= h.to {
                    verdict.violations.push(format!(
                        "{}/{p}: commit {offset} of member {member} accepted while member {} held it",
                        key.0, h.member
                    ));
                }
            }
        }
    }
    verdict
}

/// Acknowledged commits no longer there: per partition, the committed offset is below
/// the highest accepted in the records `verdict` read (every one of them answered
/// before `committed` was read). Offsets only grow, so later commits do not hide a
/// loss from this check, which can run at any time, while members commit.
pub fn lost_commits(
    verdict: &Verdict,
    committed: &BTreeMap<(String, TopicPartition), i64>,
) -> Vec<String> {
    let mut lost = Vec::new();
    for (key, (accepted, _)) in &verdict.offsets {
        let Some(accepted) = accepted else { continue };
        let found = committed.get(key).copied();
        if found.is_none_or(|f| f < *accepted) {
            lost.push(format!(
                "{}/{}: committed {found:?}, accepted up to {accepted}",
                key.0, key.1
            ));
        }
    }
    lost
}

/// Checks that every commit the coordinators accepted is there: per partition, the
/// committed offset is at least the highest accepted and at most the highest sent.
pub fn missing_commits(
    verdict: &Verdict,
    committed: &BTreeMap<(String, TopicPartition), i64>,
) -> Vec<String> {
    let mut missing = Vec::new();
    for (key, (accepted, sent)) in &verdict.offsets {
        let found = committed.get(key).copied();
        let ok = match (accepted, found) {
            (None, _) => found.is_none_or(|f| f <= *sent),
            (Some(a), Some(f)) => *a <= f && f <= *sent,
            (Some(_), None) => false,
        };
        if !ok {
            missing.push(format!(
                "{}/{}: committed {found:?}, accepted up to {accepted:?}, sent up to {sent}",
                key.0, key.1
            ));
        }
    }
    missing
}

#[cfg(test)]
mod tests;
