//! `failover`: a cluster of coordinators on etcd (one or three etcd members, all on
//! loopback), groups of client-crate members spread over them, and one coordinator
//! killed with SIGKILL, several times. Measures the time from the kill until every
//! member of the killed coordinator's groups has a heartbeat answered again (by the
//! coordinator that took the groups over), and counts what a failover must not cause:
//! rebalances and `Lost` events. Target: p99 within the coordinators' etcd lease TTL
//! plus 1 s; no rebalance, no `Lost`.
//!
//! Needs the `etcd` binary (`--etcd-bin`) and a `rollcall` built with the `cluster`
//! feature (`cargo build --release -p rollcall-coordinator --features cluster`).

pub(crate) mod cluster;
pub(crate) mod members;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use self::cluster::{ClusterArgs, Coordinators};
use self::members::{placement, Fleet, Layout};
use crate::common::{Check, GeneratorInfo};
use crate::harness::{Outcome, RunOptions, Scenario};
use crate::stats::{fmt_ms, median, table, Percentiles};

#[derive(Debug, Clone, Args)]
pub(crate) struct FailoverArgs {
    /// Groups.
    #[arg(long, default_value_t = 300)]
    pub(crate) groups: usize,
    /// Members per group.
    #[arg(long, default_value_t = 10)]
    pub(crate) members_per_group: usize,
    /// Partitions of each group's one topic; default: one per member.
    #[arg(long)]
    pub(crate) partitions: Option<u32>,
    /// Members sharing one client (so one connection per coordinator); at most 20,000
    /// connections in all.
    #[arg(long, default_value_t = 50)]
    pub(crate) members_per_client: usize,
    /// Session timeout the members ask for.
    #[arg(long, value_parser = crate::common::duration, default_value = "10s")]
    pub(crate) session_timeout: Duration,
    /// Lease timeout the members ask for.
    #[arg(long, value_parser = crate::common::duration, default_value = "3s")]
    pub(crate) lease_timeout: Duration,
    /// The members' heartbeat interval.
    #[arg(long, value_parser = crate::common::duration, default_value = "1s")]
    pub(crate) heartbeat_interval: Duration,
    /// Failovers: a coordinator killed, its groups served again, it restarted and its
    /// share handed back, this many times.
    #[arg(long, default_value_t = 3)]
    pub(crate) kills: usize,
    /// Time allowed to start everything and join every member, and for the cluster to
    /// settle again after each restart.
    #[arg(long, value_parser = crate::common::duration, default_value = "180s")]
    pub(crate) setup_timeout: Duration,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// No progress lines.
    #[arg(long)]
    pub(crate) quiet: bool,
    /// The cluster it runs on.
    #[command(flatten)]
    pub(crate) cluster: ClusterArgs,
}

impl RunOptions for FailoverArgs {
    fn setup_timeout(&self) -> Duration {
        self.setup_timeout
    }

    fn duration(&self) -> Option<Duration> {
        Some(Duration::ZERO)
    }

    fn json(&self) -> Option<&PathBuf> {
        self.json.as_ref()
    }
}

/// One failover.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Round {
    pub(crate) killed: String,
    pub(crate) groups_moved: usize,
    pub(crate) members_affected: usize,
    /// Kill to every affected member's heartbeat answered again.
    pub(crate) answered_again: Percentiles,
    /// Affected members with no heartbeat answered within the session timeout.
    pub(crate) not_answered: usize,
    /// Restart of the killed coordinator to every member answered and every
    /// coordinator serving groups again.
    pub(crate) rejoin_ms: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct FailoverFigures {
    pub(crate) etcd_members: u8,
    pub(crate) coordinators: usize,
    pub(crate) etcd_lease_ttl_ms: u64,
    pub(crate) slots: u32,
    pub(crate) groups: usize,
    pub(crate) members: usize,
    pub(crate) session_timeout_ms: u64,
    pub(crate) lease_timeout_ms: u64,
    pub(crate) rounds: Vec<Round>,
    /// Every round's samples together.
    pub(crate) answered_again: Percentiles,
    /// The median of the rounds' p99.
    pub(crate) median_p99_ms: f64,
    /// Generations the groups went through after they settled.
    pub(crate) rebalances: u64,
    pub(crate) revocations: u64,
    pub(crate) assignments_after_settling: u64,
    pub(crate) lost_events: u64,
    pub(crate) fatal_events: u64,
    pub(crate) coordinators_exited: Vec<(String, String)>,
}

impl Scenario for FailoverArgs {
    const NAME: &'static str = "failover";
    type Figures = FailoverFigures;

    fn options(&self) -> &dyn RunOptions {
        self
    }

    fn extra_time(&self) -> Duration {
        // Per failover: the session timeout at most for the members to come back, the
        // setup timeout at most for the restarted coordinator's share to come back.
        (self.session_timeout + self.setup_timeout + Duration::from_secs(10))
            * u32::try_from(self.kills).unwrap_or(u32::MAX)
            + self.setup_timeout
    }

    async fn run(&self) -> Result<Outcome<FailoverFigures>, String> {
        let members = self.groups * self.members_per_group;
        let clients = members.div_ceil(self.members_per_client.max(1));
        if clients * self.cluster.coordinators > 20_000 {
            return Err(format!(
                "{clients} clients on {} coordinators open more than 20,000 connections: raise --members-per-client",
                self.cluster.coordinators
            ));
        }
        if self.cluster.coordinators < 2 {
            return Err("--coordinators must be at least 2: someone must take over".into());
        }
        let bin = self.cluster.rollcall()?;
        let layout = Layout {
            groups: self.groups,
            per_group: self.members_per_group,
            partitions: self
                .partitions
                .unwrap_or(u32::try_from(self.members_per_group).unwrap_or(u32::MAX)),
            per_client: self.members_per_client.max(1),
            session: self.session_timeout,
            lease: self.lease_timeout,
            heartbeat: self.heartbeat_interval,
        };
        let say = |line: String| {
            if !self.quiet {
                eprintln!("[failover] {line}");
            }
        };
        say(format!(
            "starting {} etcd member(s)",
            self.cluster.etcd_members
        ));
        let etcd = self.cluster.start_etcd().await?;
        say(format!(
            "starting {} coordinators",
            self.cluster.coordinators
        ));
        let mut nodes = self
            .cluster
            .start_coordinators(
                bin,
                &etcd,
                Vec::new(),
                self.lease_timeout.min(self.session_timeout),
            )
            .await?;
        let setup_deadline = Instant::now() + self.setup_timeout;
        spread(&nodes, self.groups, setup_deadline).await?;
        say(format!("joining {members} members on {clients} clients"));
        let fleet = Fleet::join(&nodes.alive(), &layout, !self.quiet).await?;
        while !fleet.settled(layout.partitions) {
            if Instant::now() > setup_deadline {
                return Err("the groups did not settle".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        fleet.mark_settled();
        let before = fleet.generations();
        say("settled".into());

        let mut rounds = Vec::with_capacity(self.kills);
        let mut all_samples = Vec::new();
        for round in 0..self.kills {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let placed = spread(&nodes, self.groups, Instant::now() + self.setup_timeout).await?;
            let victim = busiest(&nodes, &placed);
            let victim_addr = nodes.addrs()[victim];
            let moved: Vec<usize> = (0..self.groups)
                .filter(|g| placed[*g] == victim_addr)
                .collect();
            let affected: Vec<usize> = (0..members)
                .filter(|m| moved.contains(&fleet.group_of[*m]))
                .collect();
            say(format!(
                "round {}: killing {} ({} groups, {} members)",
                round + 1,
                nodes.id(victim),
                moved.len(),
                affected.len()
            ));
            let killed_at = Instant::now();
            nodes.kill(victim);
            let (samples, missing) = wait_answered(
                &fleet,
                &affected,
                killed_at,
                self.session_timeout,
                |done, suspended| {
                    say(format!(
                        "round {}: {done}/{} answered again, {suspended} members suspended, {:.1} s after the kill",
                        round + 1,
                        affected.len(),
                        killed_at.elapsed().as_secs_f64()
                    ));
                },
            )
            .await;
            let answered = Percentiles::of_durations(&samples);
            say(format!(
                "round {}: p50 {} ms, p99 {} ms, max {} ms, {missing} not answered",
                round + 1,
                fmt_ms(answered.p50_ms),
                fmt_ms(answered.p99_ms),
                fmt_ms(answered.max_ms)
            ));
            all_samples.extend(samples);
            nodes.restart(victim).await?;
            let restarted = Instant::now();
            spread(&nodes, self.groups, restarted + self.setup_timeout).await?;
            let everyone: Vec<usize> = (0..members).collect();
            let (_, behind) =
                wait_answered(&fleet, &everyone, restarted, self.setup_timeout, |_, _| {}).await;
            if behind > 0 {
                return Err(format!(
                    "{behind} members had no heartbeat answered after {} came back",
                    nodes.id(victim)
                ));
            }
            let rejoin = restarted.elapsed();
            say(format!(
                "round {}: {} back and serving after {:.1} s",
                round + 1,
                nodes.id(victim),
                rejoin.as_secs_f64()
            ));
            rounds.push(Round {
                killed: nodes.id(victim).to_owned(),
                groups_moved: moved.len(),
                members_affected: affected.len(),
                answered_again: answered,
                not_answered: missing,
                rejoin_ms: rejoin.as_secs_f64() * 1000.0,
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = fleet.generations();
        let tally = &fleet.tally;
        let load = std::sync::atomic::Ordering::Relaxed;
        let mut p99s: Vec<f64> = rounds.iter().map(|r| r.answered_again.p99_ms).collect();
        let figures = FailoverFigures {
            etcd_members: self.cluster.etcd_members,
            coordinators: self.cluster.coordinators,
            etcd_lease_ttl_ms: self.cluster.etcd_lease_ttl.as_millis() as u64,
            slots: self.cluster.slots,
            groups: self.groups,
            members,
            session_timeout_ms: self.session_timeout.as_millis() as u64,
            lease_timeout_ms: self.lease_timeout.as_millis() as u64,
            answered_again: Percentiles::of_durations(&all_samples),
            median_p99_ms: median(&mut p99s).unwrap_or(0.0),
            rebalances: before
                .iter()
                .zip(&after)
                .map(|(b, a)| u64::from(a.saturating_sub(*b)))
                .sum(),
            revocations: tally.revocations.load(load),
            assignments_after_settling: tally.assignments.load(load),
            lost_events: tally.lost.load(load),
            fatal_events: tally.fatal.load(load),
            coordinators_exited: nodes.exited(),
            rounds,
        };
        let generator = GeneratorInfo {
            driver: "rollcall-client (the client crate): members share clients, one connection per client and coordinator, found with FindCoordinator",
            members,
            connections: fleet.clients * self.cluster.coordinators,
            members_per_conn: layout.per_client,
            multiplexed: layout.per_client > 1,
            batch_heartbeats: true,
            load: format!(
                "heartbeats every {} ms; partitions released at once when asked; reconnection backoff {}",
                self.heartbeat_interval.as_millis(),
                members::RECONNECT
            ),
        };
        drop(fleet);
        drop(nodes);
        drop(etcd);
        Ok(report(self, figures, generator))
    }
}

/// The coordinator (by index) serving the most groups of `placed`.
fn busiest(nodes: &Coordinators, placed: &[std::net::SocketAddr]) -> usize {
    let addrs = nodes.addrs();
    (0..addrs.len())
        .max_by_key(|i| placed.iter().filter(|a| **a == addrs[*i]).count())
        .unwrap_or(0)
}

/// Waits (until `deadline`) until every group is served by a live coordinator and
/// every live coordinator serves some group; returns where each group is served.
pub(crate) async fn spread(
    nodes: &Coordinators,
    groups: usize,
    deadline: Instant,
) -> Result<Vec<std::net::SocketAddr>, String> {
    let alive = nodes.alive();
    loop {
        let mut placed = Vec::new();
        if let Ok(answers) = placement(alive[0], groups).await {
            placed = answers
                .into_iter()
                .map_while(|a| a.filter(|a| alive.contains(a)))
                .collect();
        }
        let everyone_serves = alive.iter().all(|a| placed.contains(a));
        if placed.len() == groups && (everyone_serves || groups < alive.len()) {
            return Ok(placed);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the groups were not spread over the {} coordinators in time ({} of {groups} placed)",
                alive.len(),
                placed.len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (at most `limit`) until each of `members` had a heartbeat sent after `since`
/// answered; returns each one's time from `since` (polled every 10 ms) and how many
/// never were. `tick` hears the progress every second.
async fn wait_answered(
    fleet: &Fleet,
    members: &[usize],
    since: Instant,
    limit: Duration,
    mut tick: impl FnMut(usize, usize),
) -> (Vec<Duration>, usize) {
    let mut pending: Vec<usize> = members.to_vec();
    let mut samples = Vec::with_capacity(members.len());
    let mut next_tick = Instant::now() + Duration::from_secs(1);
    while !pending.is_empty() && since.elapsed() < limit {
        let now = Instant::now();
        pending.retain(|m| {
            if fleet.answered_since(*m, since) {
                samples.push(now - since);
                false
            } else {
                true
            }
        });
        if now >= next_tick {
            tick(samples.len(), fleet.suspended());
            next_tick = now + Duration::from_secs(1);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (samples, pending.len())
}

fn report(
    args: &FailoverArgs,
    f: FailoverFigures,
    generator: GeneratorInfo,
) -> Outcome<FailoverFigures> {
    let ttl_ms = f.etcd_lease_ttl_ms as f64;
    let mut text = format!(
        "{} etcd member(s), {} coordinators (etcd lease TTL {} ms, {} slots); {} groups, {} members (session {} ms, lease {} ms)\n\n",
        f.etcd_members,
        f.coordinators,
        f.etcd_lease_ttl_ms,
        f.slots,
        f.groups,
        f.members,
        f.session_timeout_ms,
        f.lease_timeout_ms
    );
    let mut rows: Vec<Vec<String>> = f
        .rounds
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                (i + 1).to_string(),
                r.killed.clone(),
                r.groups_moved.to_string(),
                r.members_affected.to_string(),
                fmt_ms(r.answered_again.p50_ms),
                fmt_ms(r.answered_again.p99_ms),
                fmt_ms(r.answered_again.max_ms),
                r.not_answered.to_string(),
                fmt_ms(r.rejoin_ms),
            ]
        })
        .collect();
    rows.push(vec![
        "all".into(),
        String::new(),
        String::new(),
        f.answered_again.count.to_string(),
        fmt_ms(f.answered_again.p50_ms),
        fmt_ms(f.answered_again.p99_ms),
        fmt_ms(f.answered_again.max_ms),
        f.rounds
            .iter()
            .map(|r| r.not_answered)
            .sum::<usize>()
            .to_string(),
        String::new(),
    ]);
    text.push_str(&table(
        &[
            "round",
            "killed",
            "groups",
            "members",
            "p50 ms",
            "p99 ms",
            "max ms",
            "not answered",
            "restart to served ms",
        ],
        &rows,
    ));
    text.push_str(&format!(
        "\nkill to every member of the killed coordinator's groups answered again; rebalances {}, revocations {}, assignments after settling {}, Lost events {}, fatal {}\n",
        f.rebalances, f.revocations, f.assignments_after_settling, f.lost_events, f.fatal_events
    ));
    let not_answered: usize = f.rounds.iter().map(|r| r.not_answered).sum();
    let checks = vec![
        Check::new(
            "kill to heartbeat answered again, p99 (median of rounds)",
            format!("<= {} ms (lease TTL + 1 s)", fmt_ms(ttl_ms + 1000.0)),
            format!("{} ms", fmt_ms(f.median_p99_ms)),
            f.median_p99_ms <= ttl_ms + 1000.0 && !f.rounds.is_empty(),
        ),
        Check::new(
            "members answered again",
            "all",
            format!("{not_answered} not"),
            not_answered == 0,
        ),
        Check::new(
            "rebalances caused",
            "0",
            f.rebalances.to_string(),
            f.rebalances == 0 && f.revocations == 0 && f.assignments_after_settling == 0,
        ),
        Check::new(
            "Lost events",
            "0",
            f.lost_events.to_string(),
            f.lost_events == 0 && f.fatal_events == 0,
        ),
    ];
    let mut notes = Vec::new();
    if !f.coordinators_exited.is_empty() {
        notes.push(format!(
            "coordinators exited by themselves: {:?}",
            f.coordinators_exited
        ));
    }
    if args.kills < 3 {
        notes.push("fewer than 3 rounds: the median of rounds is not a median of 3".into());
    }
    Outcome {
        coordinator: None,
        generator: Some(generator),
        figures: f,
        text,
        checks,
        notes,
    }
}
