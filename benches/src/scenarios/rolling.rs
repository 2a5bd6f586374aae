//! `rolling-restart`: static members (instance ids) restarted one after another, each
//! back within its session timeout. Target: no rebalance, no partition moved.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::common::{group_name, Check, CommonArgs};
use crate::driver::{Cmd, Load, Obs};
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup};
use crate::probe::Admin;
use crate::stats::{summary, Percentiles};

#[derive(Debug, Clone, Args)]
pub(crate) struct RollingArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Members restarted, one after another; default: all of them, at most 20.
    #[arg(long)]
    pub(crate) restarts: Option<usize>,
    /// How long each member stays down (connection closed, nothing sent).
    #[arg(long, value_parser = crate::common::duration, default_value = "200ms")]
    pub(crate) down: Duration,
    /// Time between one member being back and the next one going down.
    #[arg(long, value_parser = crate::common::duration, default_value = "300ms")]
    pub(crate) gap: Duration,
}

#[derive(Debug, Serialize)]
pub(crate) struct RollingFigures {
    pub(crate) members: usize,
    pub(crate) groups: usize,
    pub(crate) partitions_per_group: u32,
    pub(crate) session_timeout_ms: u64,
    pub(crate) down_ms: u64,
    pub(crate) restarts: usize,
    pub(crate) recovered: usize,
    /// Generations the coordinator went through (group list, before and after).
    pub(crate) rebalances: u64,
    /// Highest generation seen in pushes after, less before.
    pub(crate) generations_in_pushes: u64,
    pub(crate) partitions_moved: usize,
    pub(crate) partitions_revoked: u64,
    /// Connection closed to the restarted member holding its assignment again.
    pub(crate) restart_to_assignment: Percentiles,
    /// Its join answered to its assignment push.
    pub(crate) join_to_assignment: Percentiles,
    pub(crate) expulsions: usize,
}

async fn generations(admin: &mut Admin, groups: usize) -> Result<Vec<u32>, String> {
    let list = admin.list_groups().await?;
    Ok((0..groups)
        .map(|g| {
            let name = group_name(g);
            list.iter()
                .find(|l| l.group == name)
                .map_or(0, |l| l.generation)
        })
        .collect())
}

impl Scenario for RollingArgs {
    const NAME: &'static str = "rolling-restart";
    type Figures = RollingFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        Duration::from_secs(600)
    }

    async fn run(&self) -> Result<Outcome<RollingFigures>, String> {
        let common = &self.common;
        let members = common.members_or(100);
        let groups = common.groups_or(1);
        let partitions = common.partitions.unwrap_or(1_000);
        let session = common.session_timeout.unwrap_or(Duration::from_secs(10));
        let interval = common.interval.unwrap_or(Duration::from_secs(1));
        let restarts = self.restarts.unwrap_or(20).min(members);
        if self.down >= session {
            return Err("--down must be shorter than the session timeout".into());
        }
        if members > common.connection_cap() {
            return Err("rolling-restart needs one connection per member: too many members".into());
        }
        let load = Load::Periodic { period: interval };
        let setup = Setup {
            static_ids: true,
            per_conn: 1,
            observe: true,
            ..Setup::new(common, members, groups, partitions, session, load)
        };
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            let mut batch = Vec::with_capacity(256);
            rig.settled(&mut tracker, &mut observations).await?;
            // A moment for the coordinator to report the groups stable too.
            tokio::time::sleep(Duration::from_millis(500)).await;
            for obs in std::iter::from_fn(|| observations.try_recv().ok()) {
                tracker.apply(&obs);
            }
            let mut admin = Admin::connect(&rig.target.endpoint()).await?;
            let before = generations(&mut admin, groups).await?;
            let pushed_before: Vec<u32> = tracker.group_generation.clone();
            let owners_before: Vec<Vec<u32>> = tracker.owned.clone();
            let revoked_before = tracker.revocations;
            let mut restart_to_assignment = Vec::new();
            let mut join_to_assignment = Vec::new();
            rig.phase("restarting");
            for member in 0..restarts {
                let (reply, answer) = oneshot::channel();
                rig.driver.command(Cmd::Restart { member, down: self.down, reply });
                let _ = answer.await;
                let down_at = Instant::now();
                let mut joined_at = None;
                let limit = down_at + session + Duration::from_secs(5);
                'wait: while Instant::now() < limit {
                    tokio::select! {
                        _ = observations.recv_many(&mut batch, 256) => {
                            for obs in batch.drain(..) {
                                tracker.apply(&obs);
                                match obs {
                                    Obs::Joined { member: m, at, .. } if m == member => joined_at = Some(at),
                                    Obs::Assigned { member: m, at, .. } if m == member && joined_at.is_some() => {
                                        restart_to_assignment.push(at - down_at);
                                        if let Some(j) = joined_at { join_to_assignment.push(at - j); }
                                        break 'wait;
                                    }
                                    _ => {}
                                }
                            }
                        }
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
                tokio::time::sleep(self.gap).await;
            }
            rig.phase("checking");
            tracker
                .absorb_for(&mut observations, Duration::from_secs(1))
                .await;
            let after = generations(&mut admin, groups).await?;
            let rebalances: u64 = before.iter().zip(&after).map(|(b, a)| u64::from(a.saturating_sub(*b))).sum();
            let pushed: u64 = pushed_before
                .iter()
                .zip(&tracker.group_generation)
                .map(|(b, a)| u64::from(a.saturating_sub(*b)))
                .sum();
            let mut owner_before: HashMap<(usize, u32), usize> = HashMap::new();
            for (m, owned) in owners_before.iter().enumerate() {
                for p in owned {
                    owner_before.insert((tracker.group_of(m), *p), m);
                }
            }
            let mut moved = 0;
            for (m, owned) in tracker.owned.iter().enumerate() {
                for p in owned {
                    if owner_before.get(&(tracker.group_of(m), *p)) != Some(&m) {
                        moved += 1;
                    }
                }
            }
            Ok::<_, String>(RollingFigures {
                members,
                groups,
                partitions_per_group: partitions,
                session_timeout_ms: session.as_millis() as u64,
                down_ms: self.down.as_millis() as u64,
                restarts,
                recovered: restart_to_assignment.len(),
                rebalances,
                generations_in_pushes: pushed,
                partitions_moved: moved,
                partitions_revoked: tracker.revocations - revoked_before,
                restart_to_assignment: Percentiles::of_durations(&restart_to_assignment),
                join_to_assignment: Percentiles::of_durations(&join_to_assignment),
                expulsions: tracker.expelled.len(),
            })
        }
        .await;
        let done = rig.finish().await;
        let f = outcome?;
        let text = summary(
            &[
            ("layout", format!("{} static members in {} group(s), {} partitions each; session timeout {} ms", members, groups, partitions, f.session_timeout_ms)),
            ("restarts", format!("{} members restarted one after another, each down {} ms; {} back with an assignment", f.restarts, f.down_ms, f.recovered)),
            ("rebalances", format!("{} (group list generations), {} (generations seen in pushes)", f.rebalances, f.generations_in_pushes)),
            ("partitions", format!("{} moved, {} revoked", f.partitions_moved, f.partitions_revoked)),
            ("expulsions", f.expulsions.to_string()),
            ],
            &[
                f.restart_to_assignment
                    .row("connection closed to assignment back"),
                f.join_to_assignment
                    .row("rejoin answered to assignment push"),
            ],
        );
        let checks = vec![
            Check::new(
                "rebalances caused by restarts",
                "0",
                f.rebalances.to_string(),
                f.rebalances == 0 && f.generations_in_pushes == 0,
            ),
            Check::new(
                "partitions moved",
                "0",
                f.partitions_moved.to_string(),
                f.partitions_moved == 0,
            ),
            Check::new(
                "every restarted member back",
                f.restarts.to_string(),
                f.recovered.to_string(),
                f.recovered == f.restarts,
            ),
            Check::new(
                "expulsions",
                "0",
                f.expulsions.to_string(),
                f.expulsions == 0,
            ),
        ];
        let load = format!("static members, heartbeats every {} ms; each restart closes the connection without a leave and rejoins with the same instance id", interval.as_millis());
        Ok(done.outcome(load, f, text, checks))
    }
}
