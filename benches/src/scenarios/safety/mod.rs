//! `safety`: the failover scenario's cluster (etcd members and `rollcall serve --etcd`
//! coordinators, all on loopback) under a long series of faults, one after another,
//! each followed by recovery before the next: a coordinator killed with SIGKILL (and
//! restarted), a coordinator cut off from etcd (a proxy between it and every etcd
//! member swallows its traffic until its etcd lease has expired and the others serve
//! its groups, then lets it through again), the etcd leader killed (and restarted on
//! its data). Its members are the end-to-end tests' fleet
//! ([`rollcall_tests::fleet::Fleet`]): they commit throughout and record every grant,
//! release, suspension, `Lost` and commit with its answer; after every fault and at the
//! end, the tests' own oracle ([`check`], [`lost_commits`], [`missing_commits`]) reads
//! everything recorded so far. Targets: no partition held by two members at once, no
//! acknowledged commit lost, no commit accepted from a fenced member. Also counted:
//! rebalances, `Lost` events and each fault's recovery time.
//!
//! Needs the `etcd` binary (`--etcd-bin`) and a `rollcall` built with the `cluster`
//! feature, as `failover` does.

mod faults;
mod report;
mod steps;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use rollcall_tests::fleet::{check, missing_commits, Fleet, Record, Timeouts};
use rollcall_tests::proxy::Proxy;
use serde::Serialize;

use self::faults::{schedule, victim, Fault};
use self::steps::Run;
use super::failover::cluster::ClusterArgs;
use super::failover::spread;
use crate::common::{group_name, GeneratorInfo};
use crate::harness::{Outcome, RunOptions, Scenario};

#[derive(Debug, Clone, Args)]
pub(crate) struct SafetyArgs {
    /// Groups.
    #[arg(long, default_value_t = 100)]
    pub(crate) groups: usize,
    /// Members per group (one client holds member `k` of every group).
    #[arg(long, default_value_t = 5)]
    pub(crate) members_per_group: usize,
    /// Partitions of each group's one topic (12 divide evenly over 3, 4 or 6
    /// members, so every member joining takes some).
    #[arg(long, default_value_t = 12)]
    pub(crate) partitions: u32,
    /// Just before each fault, join one more member to one of the groups it hits
    /// (the one with the fewest members), so that partitions are moving between
    /// members when it strikes: the revocations pending then must be carried over.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) churn: bool,
    /// Session timeout the members ask for.
    #[arg(long, value_parser = crate::common::duration, default_value = "10s")]
    pub(crate) session_timeout: Duration,
    /// Lease timeout the members ask for.
    #[arg(long, value_parser = crate::common::duration, default_value = "3s")]
    pub(crate) lease_timeout: Duration,
    /// The members' heartbeat interval.
    #[arg(long, value_parser = crate::common::duration, default_value = "1s")]
    pub(crate) heartbeat_interval: Duration,
    /// How often each member commits what it holds (every record is kept for the
    /// oracle until the end: a shorter interval costs memory).
    #[arg(long, value_parser = crate::common::duration, default_value = "1s")]
    pub(crate) commit_interval: Duration,
    /// Coordinators killed with SIGKILL (and restarted).
    #[arg(long, default_value_t = 50)]
    pub(crate) kills: usize,
    /// Coordinators cut off from etcd until others serve their groups.
    #[arg(long, default_value_t = 20)]
    pub(crate) cuts: usize,
    /// etcd leaders killed with SIGKILL (and restarted on their data).
    #[arg(long, default_value_t = 5)]
    pub(crate) leader_kills: usize,
    /// Time allowed to start everything and join every member, and for each fault's
    /// two phases (served again; then restored and settled).
    #[arg(long, value_parser = crate::common::duration, default_value = "120s")]
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

impl RunOptions for SafetyArgs {
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

/// One fault and what followed it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FaultRound {
    pub(crate) n: usize,
    pub(crate) fault: Fault,
    /// The coordinator's id, or the etcd member's name.
    pub(crate) target: String,
    /// The group a member joined just before the fault (with `--churn`).
    pub(crate) joined: Option<String>,
    /// Fault to every member having a heartbeat sent after it answered.
    pub(crate) answered_ms: Option<f64>,
    /// Fault to the first commit sent after it accepted.
    pub(crate) commits_again_ms: Option<f64>,
    /// Cuts: cut to every group served by another coordinator.
    pub(crate) adopted_ms: Option<f64>,
    /// Fault to everything restored and settled again (every group spread over every
    /// coordinator, every member answered after the restore, nothing being moved).
    pub(crate) recovered_ms: Option<f64>,
    /// What the oracle found over everything recorded until now.
    pub(crate) violations_so_far: usize,
    /// Acknowledged commits no longer there, found after this fault.
    pub(crate) lost_commits: usize,
    pub(crate) lost_events_so_far: usize,
    pub(crate) moves_so_far: usize,
}

#[derive(Debug, Serialize)]
pub(crate) struct SafetyFigures {
    pub(crate) etcd_members: u8,
    pub(crate) coordinators: usize,
    pub(crate) etcd_lease_ttl_ms: u64,
    pub(crate) slots: u32,
    pub(crate) groups: usize,
    pub(crate) members: usize,
    pub(crate) partitions: u32,
    pub(crate) session_timeout_ms: u64,
    pub(crate) lease_timeout_ms: u64,
    pub(crate) commit_interval_ms: u64,
    pub(crate) faults_planned: usize,
    pub(crate) faults: Vec<FaultRound>,
    /// Why the run stopped before its last fault, if it did.
    pub(crate) stopped: Option<String>,
    /// Partitions held by two members at once (the oracle's findings).
    pub(crate) double_owners: Vec<String>,
    /// Commits accepted from a member while another held the partition.
    pub(crate) fenced_commits: Vec<String>,
    /// For each finding of either kind (in the oracle's order), what the members of
    /// its group recorded about its partition.
    pub(crate) evidence: Vec<Vec<String>>,
    /// Acknowledged commits lost: found after a fault or at the end.
    pub(crate) lost_commits: Vec<String>,
    pub(crate) commits_sent: usize,
    pub(crate) commits_accepted: usize,
    pub(crate) lost_events: usize,
    /// Assignments and revocations after the groups first settled.
    pub(crate) moves: usize,
    pub(crate) coordinators_exited: Vec<(String, String)>,
    pub(crate) records: usize,
}

impl Scenario for SafetyArgs {
    const NAME: &'static str = "safety";
    type Figures = SafetyFigures;

    fn options(&self) -> &dyn RunOptions {
        self
    }

    fn extra_time(&self) -> Duration {
        // Per fault: its two phases, bounded by the setup timeout each, and the pauses.
        let faults = self.kills + self.cuts + self.leader_kills;
        (2 * self.setup_timeout + Duration::from_secs(30))
            * u32::try_from(faults).unwrap_or(u32::MAX)
    }

    async fn run(&self) -> Result<Outcome<SafetyFigures>, String> {
        if self.cluster.coordinators < 2 {
            return Err("--coordinators must be at least 2: someone must take over".into());
        }
        if self.leader_kills > 0 && self.cluster.etcd_members < 3 {
            return Err("--leader-kills needs --etcd-members 3".into());
        }
        let bin = self.cluster.rollcall()?;
        let say = |line: String| {
            if !self.quiet {
                eprintln!("[safety] {line}");
            }
        };
        say(format!(
            "starting {} etcd member(s)",
            self.cluster.etcd_members
        ));
        let mut etcd = self.cluster.start_etcd().await?;
        // Every coordinator reaches every etcd member through a proxy of its own, so
        // that any one can be cut off from etcd and not from its clients.
        let mut proxies: Vec<Vec<Proxy>> = Vec::new();
        for _ in 0..self.cluster.coordinators {
            let mut mine = Vec::new();
            for addr in etcd.client_addrs() {
                mine.push(Proxy::start(addr).await);
            }
            proxies.push(mine);
        }
        let etcd_of = proxies
            .iter()
            .map(|mine| {
                mine.iter()
                    .map(|p| format!("http://{}", p.addr()))
                    .collect()
            })
            .collect();
        say(format!(
            "starting {} coordinators",
            self.cluster.coordinators
        ));
        let mut nodes = self
            .cluster
            .start_coordinators(
                bin,
                &etcd,
                etcd_of,
                self.lease_timeout.min(self.session_timeout),
            )
            .await?;
        let setup_deadline = Instant::now() + self.setup_timeout;
        spread(&nodes, self.groups, setup_deadline).await?;
        let partitions = self.partitions;
        let names: Vec<String> = (0..self.groups).map(group_name).collect();
        let members = self.groups * self.members_per_group;
        say(format!("joining {members} members"));
        let timeouts = Timeouts {
            session: self.session_timeout,
            lease: self.lease_timeout,
            heartbeat: self.heartbeat_interval,
        };
        let mut fleet = Fleet::join_committing_every(
            &nodes.alive(),
            &names,
            self.members_per_group,
            partitions,
            timeouts,
            self.commit_interval,
        )
        .await;
        while !fleet.settled() {
            if Instant::now() > setup_deadline {
                return Err("the groups did not settle".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        fleet.start_committing();
        let settled_at = Instant::now();
        say("settled; committing".into());

        let plan = schedule(self.kills, self.cuts, self.leader_kills);
        let mut run = Run {
            args: self,
            fleet: &mut fleet,
            archive: Vec::new(),
            settled_at,
            lost: Vec::new(),
            exited: Vec::new(),
        };
        let mut rounds = Vec::with_capacity(plan.len());
        let mut stopped = None;
        let mut nth = [0usize; 3];
        for (n, fault) in plan.iter().copied().enumerate() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let kind = fault as usize;
            let target = victim(fault, nth[kind], self.cluster.coordinators);
            nth[kind] += 1;
            let joined = if self.churn {
                let on = (fault != Fault::LeaderKill).then_some(target);
                match run.join_one(&nodes, on).await {
                    Ok(group) => {
                        // The fault strikes 0 to 300 ms into the rebalance.
                        tokio::time::sleep(Duration::from_millis(100 * (n as u64 % 4))).await;
                        Some(group)
                    }
                    Err(e) => {
                        say(format!("stopping: {e}"));
                        stopped = Some(e);
                        break;
                    }
                }
            } else {
                None
            };
            let step = match fault {
                Fault::Kill => run.kill(&mut nodes, target).await,
                Fault::Cut => run.cut(&mut nodes, &proxies[target], target).await,
                Fault::LeaderKill => run.kill_leader(&mut etcd, &mut nodes).await,
            };
            let (mut round, failed) = match step {
                Ok(round) => (round, None),
                Err((round, why)) => (round, Some(why)),
            };
            round.n = n + 1;
            round.joined = joined;
            run.read(&mut round).await;
            say(progress(&round, plan.len()));
            rounds.push(round);
            if let Some(why) = failed {
                say(format!("stopping: {why}"));
                stopped = Some(why);
                break;
            }
        }
        run.fleet.stop_committing().await;
        let mut last = FaultRound::new(Fault::Kill, String::new());
        run.read(&mut last).await;
        let committed = run.committed().await;
        let verdict = check(&run.archive, &run.fleet.groups, settled_at, Instant::now());
        let members = run.fleet.members.len();
        match committed {
            Ok(committed) => run.lost.extend(missing_commits(&verdict, &committed)),
            Err(e) => run.lost.push(format!("offsets not read at the end: {e}")),
        }
        let (double_owners, fenced_commits) = split(&verdict.violations);
        let evidence = steps::evidence(
            &run.archive,
            &run.fleet.groups,
            &verdict.violations,
            settled_at,
            400,
        );
        let commits_sent = run
            .archive
            .iter()
            .filter(|r| matches!(r, Record::Commit { .. }))
            .count();
        let mut exited = std::mem::take(&mut run.exited);
        exited.extend(nodes.exited());
        let figures = SafetyFigures {
            etcd_members: self.cluster.etcd_members,
            coordinators: self.cluster.coordinators,
            etcd_lease_ttl_ms: self.cluster.etcd_lease_ttl.as_millis() as u64,
            slots: self.cluster.slots,
            groups: self.groups,
            members,
            partitions,
            session_timeout_ms: self.session_timeout.as_millis() as u64,
            lease_timeout_ms: self.lease_timeout.as_millis() as u64,
            commit_interval_ms: self.commit_interval.as_millis() as u64,
            faults_planned: plan.len(),
            faults: rounds,
            stopped,
            double_owners,
            fenced_commits,
            evidence,
            lost_commits: std::mem::take(&mut run.lost),
            commits_sent,
            commits_accepted: verdict.accepted,
            lost_events: verdict.lost.len(),
            moves: verdict.moves.len(),
            coordinators_exited: exited,
            records: run.archive.len(),
        };
        let generator = GeneratorInfo {
            driver: "rollcall-client (the client crate) through the end-to-end tests' fleet: client k holds member k of every group, every client bootstrapped from every coordinator",
            members,
            connections: self.members_per_group * self.cluster.coordinators,
            members_per_conn: self.groups.div_ceil(self.cluster.coordinators),
            multiplexed: true,
            batch_heartbeats: true,
            load: format!(
                "heartbeats every {} ms; each member commits what it holds every {} ms, and before acknowledging a revocation",
                self.heartbeat_interval.as_millis(),
                self.commit_interval.as_millis()
            ),
        };
        drop(fleet);
        drop(nodes);
        drop(proxies);
        drop(etcd);
        Ok(report::report(self, figures, generator))
    }
}

/// The oracle's findings, by kind: partitions held by two members at once, and
/// commits accepted from a member while another held the partition.
fn split(violations: &[String]) -> (Vec<String>, Vec<String>) {
    violations
        .iter()
        .cloned()
        .partition(|v| !v.contains("accepted while"))
}

fn progress(r: &FaultRound, of: usize) -> String {
    let secs = |ms: Option<f64>| ms.map_or("-".to_owned(), |ms| format!("{:.1} s", ms / 1000.0));
    format!(
        "{}/{of} {} {}: answered again {}, commits again {}, recovered {}; violations {}, lost commits {}, Lost {}, moves {}",
        r.n,
        r.fault.name(),
        r.target,
        secs(r.answered_ms),
        secs(r.commits_again_ms),
        secs(r.recovered_ms),
        r.violations_so_far,
        r.lost_commits,
        r.lost_events_so_far,
        r.moves_so_far
    )
}

impl FaultRound {
    fn new(fault: Fault, target: String) -> Self {
        Self {
            n: 0,
            fault,
            target,
            joined: None,
            answered_ms: None,
            commits_again_ms: None,
            adopted_ms: None,
            recovered_ms: None,
            violations_so_far: 0,
            lost_commits: 0,
            lost_events_so_far: 0,
            moves_so_far: 0,
        }
    }
}
