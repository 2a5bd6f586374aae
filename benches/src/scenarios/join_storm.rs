//! `join-storm`: every member joins at once; how long until every group is stable.

use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::common::{group_name, Check, CommonArgs, CpuMark};
use crate::driver::{Counters, Load};
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup};
use crate::probe::spawn_poller;
use crate::stats::{fmt_count, median, summary, Percentiles};

#[derive(Debug, Clone, Args)]
pub(crate) struct JoinStormArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// How often the coordinator's group list is polled.
    #[arg(long, value_parser = crate::common::duration, default_value = "5ms")]
    pub(crate) poll: Duration,
    /// How long the groups must stay stable before the storm counts as over.
    #[arg(long, value_parser = crate::common::duration, default_value = "1s")]
    pub(crate) quiet_period: Duration,
}

#[derive(Debug, Serialize)]
pub(crate) struct JoinStormFigures {
    pub(crate) members: usize,
    pub(crate) groups: usize,
    pub(crate) partitions_per_group: u32,
    pub(crate) connections: usize,
    pub(crate) members_per_conn: usize,
    pub(crate) all_joins_answered_ms: Option<f64>,
    pub(crate) stable_members_view_ms: Option<f64>,
    pub(crate) stable_coordinator_view_ms: Option<f64>,
    pub(crate) generations_median: Option<f64>,
    pub(crate) generations_max: Option<u32>,
    pub(crate) partitions_revoked: u64,
    pub(crate) join_latency: Percentiles,
    pub(crate) coordinator_cpu_s: Option<f64>,
    pub(crate) expulsions: u64,
    pub(crate) join_errors: u64,
}

impl Scenario for JoinStormArgs {
    const NAME: &'static str = "join-storm";
    type Figures = JoinStormFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        Duration::from_secs(60)
    }

    async fn run(&self) -> Result<Outcome<JoinStormFigures>, String> {
        let common = &self.common;
        let members = common.members_or(10_000);
        let groups = common.groups_or(100);
        let partitions = common.partitions_or_per_member(members, groups, 10);
        let session = common.session_timeout.unwrap_or(Duration::from_secs(10));
        let interval = common.interval.unwrap_or(Duration::from_secs(1));
        let cap = common.duration.unwrap_or(Duration::from_secs(60));
        let load = Load::Periodic { period: interval };
        let setup = Setup {
            join_concurrency: members,
            auto_join: false,
            observe: true,
            ..Setup::new(common, members, groups, partitions, session, load)
        };
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let result = async {
            rig.connected().await?;
            let stop_poll = tokio_util::sync::CancellationToken::new();
            let mut snapshots = spawn_poller(
                rig.target.endpoint(),
                self.poll,
                cap + Duration::from_secs(10),
                stop_poll.clone(),
            );
            // Let the poller connect before the storm.
            tokio::time::sleep(Duration::from_millis(200)).await;
            rig.phase("storm");
            let mark = CpuMark::take(&rig.target);
            let t0 = Instant::now();
            rig.driver.release_joins();
            let mut tracker = rig.tracker();
            let mut settled = vec![false; groups];
            let mut settled_count = 0;
            let mut members_stable: Option<Instant> = None;
            let mut coordinator_stable: Option<Instant> = None;
            let mut last_snapshot = None;
            let deadline = t0 + cap;
            let mut batch = Vec::with_capacity(1024);
            loop {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                let quiet =
                    |t: Option<Instant>| t.is_some_and(|t| now.duration_since(t) >= self.quiet_period);
                if quiet(members_stable) && quiet(coordinator_stable) {
                    break;
                }
                tokio::select! {
                    n = observations.recv_many(&mut batch, 1024) => {
                        if n == 0 { break; }
                        for obs in batch.drain(..) {
                            let at = match &obs {
                                crate::driver::Obs::Assigned { at, .. }
                                | crate::driver::Obs::Revoked { at, .. }
                                | crate::driver::Obs::Joined { at, .. }
                                | crate::driver::Obs::Expelled { at, .. } => *at,
                                _ => Instant::now(),
                            };
                            if let Some(g) = tracker.apply(&obs) {
                                let now_settled = tracker.settled(g);
                                if now_settled != settled[g] {
                                    settled[g] = now_settled;
                                    if now_settled { settled_count += 1 } else { settled_count -= 1 }
                                }
                                if settled_count == groups {
                                    if members_stable.is_none() { members_stable = Some(at); }
                                } else {
                                    members_stable = None;
                                }
                            }
                        }
                    }
                    snap = snapshots.recv() => {
                        let Some(snap) = snap else { continue };
                        let stable = snap.all_stable(groups) && snap.members() == members as u64;
                        if stable {
                            if coordinator_stable.is_none() { coordinator_stable = Some(snap.at); }
                        } else {
                            coordinator_stable = None;
                        }
                        last_snapshot = Some(snap);
                    }
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
            stop_poll.cancel();
            let (_, cpu, _) = mark.since(&rig.target);
            let joined_at = tracker.last_joined;
            let since = |t: Option<Instant>| t.map(|t| t.duration_since(t0).as_secs_f64() * 1000.0);
            let mut gens: Vec<f64> = Vec::new();
            let mut gen_max = None;
            if let Some(s) = &last_snapshot {
                for g in 0..groups {
                    if let Some(generation) = s.generation(&group_name(g)) {
                        gens.push(f64::from(generation));
                        gen_max = Some(gen_max.map_or(generation, |m: u32| m.max(generation)));
                    }
                }
            }
            let shared = &rig.shared;
            let c = &shared.counters;
            Ok::<_, String>(JoinStormFigures {
                members,
                groups,
                partitions_per_group: partitions,
                connections: rig.driver.connections,
                members_per_conn: rig.setup.per_conn,
                all_joins_answered_ms: if Counters::get(&c.joins_ok) == members as u64 {
                    since(joined_at)
                } else {
                    None
                },
                stable_members_view_ms: since(members_stable),
                stable_coordinator_view_ms: since(coordinator_stable),
                generations_median: median(&mut gens),
                generations_max: gen_max,
                partitions_revoked: tracker.revocations,
                join_latency: Percentiles::of(&shared.join_latency.merged()),
                coordinator_cpu_s: cpu,
                expulsions: c.expelled(),
                join_errors: Counters::get(&c.joins_err).max(tracker.join_failures.len() as u64),
            })
        }
        .await;
        let done = rig.finish().await;
        let mut f = result?;
        // Connections add their samples to the shared histograms as they close.
        f.join_latency = Percentiles::of(&done.shared.join_latency.merged());
        let ms = |v: Option<f64>| v.map_or("not reached".to_owned(), |v| format!("{v:.0} ms"));
        let text = summary(
            &[
            (
                "layout",
                format!(
                    "{} members join {} groups ({} partitions each) at once",
                    fmt_count(members as f64),
                    groups,
                    fmt_count(f64::from(partitions))
                ),
            ),
            ("all joins answered", ms(f.all_joins_answered_ms)),
            (
                "stable, members' view",
                format!(
                    "{} (every partition owned exactly once, loads within one, nothing being revoked)",
                    ms(f.stable_members_view_ms)
                ),
            ),
            (
                "stable, coordinator's view",
                format!(
                    "{} (group list: every group stable with every member)",
                    ms(f.stable_coordinator_view_ms)
                ),
            ),
            (
                "generations per group",
                format!(
                    "median {}, max {}",
                    f.generations_median
                        .map_or("?".into(), |v| format!("{v:.1}")),
                    f.generations_max.map_or("?".into(), |v| v.to_string())
                ),
            ),
            ("partitions revoked", f.partitions_revoked.to_string()),
            (
                "coordinator CPU",
                f.coordinator_cpu_s
                    .map_or("n/a".into(), |v| format!("{v:.2} s during the storm")),
            ),
            (
                "errors",
                format!("expulsions {}, join errors {}", f.expulsions, f.join_errors),
            ),
            ],
            &[f.join_latency.row("join request RTT")],
        );
        let stable = f.stable_members_view_ms.unwrap_or(f64::INFINITY);
        let checks = vec![
            Check::new(
                "every group stable (members' view)",
                "<= 2000 ms",
                ms(f.stable_members_view_ms),
                stable <= 2000.0,
            ),
            Check::new(
                "no expulsions or join errors",
                "0",
                (f.expulsions + f.join_errors).to_string(),
                f.expulsions + f.join_errors == 0,
            ),
        ];
        let load = format!(
            "joins released together after every connection was open; heartbeats every {} ms",
            interval.as_millis()
        );
        Ok(done.outcome(load, f, text, checks))
    }
}
