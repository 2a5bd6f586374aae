//! `capacity`: capacity-weighted and load-balanced assignment, in two runs on fresh
//! coordinators.
//!
//! 1. Members declaring capacities 1 : 2 : 4 (Join version 3), every partition of the
//!    same load: each member's share against its capacity's (target: within ±5 %).
//! 2. 20 members of equal capacity over 1,000 partitions whose loads follow Zipf
//!    (s = 1.1), reported with their heartbeats (Heartbeat version 1). The most loaded
//!    member is measured under the count-balanced assignment, then under the group's
//!    `balance = load` (AlterGroupConfig), against the mean member load and against the
//!    heaviest partition (which alone is about 3.6 times the mean: the issue's "within
//!    10 % of the mean" cannot be met, so the achievable bound, max ≤ 1.10 × max(mean,
//!    heaviest), is checked beside it). Then every load changes (a new draw) and the
//!    partitions moved by each rebalance are held against the churn budget.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rollcall_protocol::AlterGroupConfigRequest;
use serde::Serialize;

use crate::common::{group_name, Check, CommonArgs};
use crate::driver::{Load, PartitionLoads};
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup};
use crate::scenarios::fleet::{alter_config, member_loads, placement, Log};
use crate::stats::kv;
use crate::tracker::Tracker;

#[derive(Debug, Clone, Args)]
pub(crate) struct CapacityArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Run 1: members (capacities 1, 2, 4 in turn).
    #[arg(long, default_value_t = 6)]
    pub(crate) weighted_members: usize,
    /// Run 1: partitions.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) weighted_partitions: u32,
    /// Run 2: the Zipf exponent of the partitions' loads.
    #[arg(long, default_value_t = 1.1)]
    pub(crate) zipf: f64,
    /// Run 2: the group's churn budget, per mille of the partitions a rebalance may
    /// move beyond those that must.
    #[arg(long, default_value_t = 100)]
    pub(crate) churn_budget: u16,
    /// Seed of the loads' placement over the partitions (the change uses the next).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Time the group must show no push before it counts as settled: longer than the
    /// coordinator's interval between load checks (5 s), so that a check found nothing
    /// more to move.
    #[arg(long, value_parser = crate::common::duration, default_value = "6s")]
    pub(crate) quiet_for: Duration,
}

/// How load sits on the members.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LoadView {
    pub(crate) max_member_load: f64,
    pub(crate) mean_member_load: f64,
    pub(crate) heaviest_partition: f64,
    /// Most loaded member / mean.
    pub(crate) max_over_mean: f64,
    /// Most loaded member / max(mean, heaviest partition).
    pub(crate) max_over_bound: f64,
    /// The coordinator's view (DescribeGroup): the largest and the total of the
    /// loads it holds for the members.
    pub(crate) coordinator_max_load: f64,
    pub(crate) coordinator_total_load: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Rebalance {
    pub(crate) generation: u32,
    pub(crate) partitions_moved: usize,
}

#[derive(Debug, Serialize)]
pub(crate) struct CapacityFigures {
    pub(crate) weighted_members: usize,
    pub(crate) weighted_partitions: u32,
    pub(crate) capacities: Vec<u32>,
    pub(crate) weighted_counts: Vec<usize>,
    /// Each member's count / its capacity's share, less 1, per cent.
    pub(crate) weighted_deviation_pct: Vec<f64>,
    pub(crate) weighted_worst_pct: f64,
    pub(crate) members: usize,
    pub(crate) partitions: u32,
    pub(crate) zipf_s: f64,
    pub(crate) count_balanced: LoadView,
    pub(crate) load_balanced: LoadView,
    /// Rebalances (by generation) after `balance = load`, and partitions each moved.
    pub(crate) switch_rebalances: Vec<Rebalance>,
    pub(crate) after_change: LoadView,
    pub(crate) change_rebalances: Vec<Rebalance>,
    pub(crate) churn_budget_partitions: usize,
}

/// Zipf loads: the partition at rank r (from 1) carries 1 / r^s, ranks shuffled over
/// the partitions by `seed`.
fn zipf_loads(partitions: u32, s: f64, seed: u64) -> Vec<f64> {
    let mut ranks: Vec<u32> = (1..=partitions).collect();
    ranks.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(seed));
    ranks.iter().map(|r| 1.0 / f64::from(*r).powf(s)).collect()
}

fn load_view(tracker: &Tracker, loads: &[f64]) -> LoadView {
    let live: Vec<usize> = (0..tracker.owned.len())
        .filter(|m| tracker.live[*m])
        .collect();
    let member_loads: Vec<f64> = live
        .iter()
        .map(|m| tracker.owned[*m].iter().map(|p| loads[*p as usize]).sum())
        .collect();
    let total: f64 = loads.iter().sum();
    let mean = total / live.len().max(1) as f64;
    let max = member_loads.iter().copied().fold(0.0, f64::max);
    let heaviest = loads.iter().copied().fold(0.0, f64::max);
    LoadView {
        max_member_load: max,
        mean_member_load: mean,
        heaviest_partition: heaviest,
        max_over_mean: max / mean,
        max_over_bound: max / mean.max(heaviest),
        coordinator_max_load: f64::NAN,
        coordinator_total_load: f64::NAN,
    }
}

/// Adds the coordinator's view of the members' loads.
async fn with_coordinator(mut v: LoadView, endpoint: &crate::target::Endpoint) -> LoadView {
    if let Ok(loads) = member_loads(endpoint, &group_name(0)).await {
        v.coordinator_max_load = loads.iter().copied().fold(0.0, f64::max);
        v.coordinator_total_load = loads.iter().sum();
    }
    v
}

/// Partitions moved per generation, from the revocations the members saw.
fn rebalances(log: &Log) -> Vec<Rebalance> {
    // A revoke push lists all the member is asked for: count each partition once.
    let mut by_generation: BTreeMap<u32, BTreeSet<(usize, u32)>> = BTreeMap::new();
    for r in &log.revocations {
        let set = by_generation.entry(r.generation).or_default();
        set.extend(r.partitions.iter().map(|p| (r.member, *p)));
    }
    by_generation
        .into_iter()
        .map(|(generation, moved)| Rebalance {
            generation,
            partitions_moved: moved.len(),
        })
        .collect()
}

fn describe(v: &LoadView) -> String {
    format!(
        "most loaded member {:.3} = {:.2} × the mean {:.3}, {:.2} × max(mean, heaviest partition {:.3}); the coordinator holds loads {:.3} at most, {:.3} in all",
        v.max_member_load, v.max_over_mean, v.mean_member_load, v.max_over_bound, v.heaviest_partition,
        v.coordinator_max_load, v.coordinator_total_load
    )
}

fn describe_moves(r: &[Rebalance]) -> String {
    if r.is_empty() {
        return "none".to_owned();
    }
    r.iter()
        .map(|r| format!("{} (generation {})", r.partitions_moved, r.generation))
        .collect::<Vec<_>>()
        .join(", ")
}

impl CapacityArgs {
    /// Run 1: the weighted members' counts.
    async fn weighted(&self, quiet: Duration) -> Result<(Vec<u32>, Vec<usize>), String> {
        let common = &self.common;
        let members = self.weighted_members.max(1);
        let partitions = self.weighted_partitions;
        let session = common.session_timeout.unwrap_or(Duration::from_secs(10));
        let interval = common.interval.unwrap_or(Duration::from_millis(500));
        let capacities: Vec<u32> = (0..members).map(|i| [1, 2, 4][i % 3]).collect();
        let placements = capacities
            .iter()
            .enumerate()
            .map(|(i, c)| Some(placement(format!("host-{i}"), String::new(), *c, &[])))
            .collect();
        let setup = Setup {
            observe: true,
            placements,
            ..Setup::new(
                common,
                members,
                1,
                partitions,
                session,
                Load::Periodic { period: interval },
            )
        };
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let limit = Instant::now() + common.setup_timeout;
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            let mut log = Log::new(members);
            rig.phase("weighted: settling");
            if !log
                .quiet(&mut tracker, &mut observations, quiet, limit)
                .await
            {
                return Err("the weighted group did not settle".to_owned());
            }
            Ok(tracker.owned.iter().map(Vec::len).collect())
        }
        .await;
        rig.finish().await;
        Ok((capacities, outcome?))
    }
}

impl Scenario for CapacityArgs {
    const NAME: &'static str = "capacity";
    type Figures = CapacityFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        Duration::from_secs(180)
    }

    async fn run(&self) -> Result<Outcome<CapacityFigures>, String> {
        let common = &self.common;
        let quiet = self.quiet_for;
        let (capacities, weighted_counts) = self.weighted(quiet).await?;
        let total_capacity: u32 = capacities.iter().sum();
        let deviation: Vec<f64> = capacities
            .iter()
            .zip(&weighted_counts)
            .map(|(c, n)| {
                let share = f64::from(self.weighted_partitions) * f64::from(*c)
                    / f64::from(total_capacity.max(1));
                100.0 * (*n as f64 / share - 1.0)
            })
            .collect();
        let worst = deviation.iter().map(|d| d.abs()).fold(0.0, f64::max);

        // Run 2: Zipf loads.
        let members = common.members_or(20);
        let partitions = common.partitions.unwrap_or(1_000);
        let session = common.session_timeout.unwrap_or(Duration::from_secs(10));
        let interval = common.interval.unwrap_or(Duration::from_millis(200));
        let first = zipf_loads(partitions, self.zipf, self.seed);
        let second = zipf_loads(partitions, self.zipf, self.seed.wrapping_add(1));
        let table = Arc::new(PartitionLoads::new(&first));
        let setup = Setup {
            observe: true,
            loads: Some(table.clone()),
            ..Setup::new(
                common,
                members,
                1,
                partitions,
                session,
                Load::Periodic { period: interval },
            )
        };
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let endpoint = rig.target.endpoint();
        let setup_timeout = common.setup_timeout;
        let churn_budget = self.churn_budget;
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            let mut log = Log::new(members);
            rig.phase("zipf: settling, count-balanced");
            if !log
                .quiet(
                    &mut tracker,
                    &mut observations,
                    quiet,
                    Instant::now() + setup_timeout,
                )
                .await
            {
                return Err("the group did not settle".to_owned());
            }
            // Every member has reported its loads by now (heartbeats every interval).
            let count_balanced = with_coordinator(load_view(&tracker, &first), &endpoint).await;
            log.clear_moves();
            rig.phase("zipf: balance = load");
            alter_config(
                &endpoint,
                AlterGroupConfigRequest {
                    group: group_name(0),
                    balance: Some(1),
                    churn_budget_permille: Some(churn_budget),
                    ..Default::default()
                },
            )
            .await?;
            // The switch, and the rebalances load reports cause after it.
            tokio::time::sleep(interval * 2).await;
            if !log
                .quiet(
                    &mut tracker,
                    &mut observations,
                    quiet,
                    Instant::now() + setup_timeout,
                )
                .await
            {
                return Err("the group did not settle under balance = load".to_owned());
            }
            let load_balanced = with_coordinator(load_view(&tracker, &first), &endpoint).await;
            let switch = rebalances(&log);
            log.clear_moves();
            rig.phase("zipf: loads changed");
            table.set_all(&second);
            tokio::time::sleep(interval * 2).await;
            if !log
                .quiet(
                    &mut tracker,
                    &mut observations,
                    quiet,
                    Instant::now() + setup_timeout,
                )
                .await
            {
                return Err("the group did not settle after the loads changed".to_owned());
            }
            let after_change = with_coordinator(load_view(&tracker, &second), &endpoint).await;
            let change = rebalances(&log);
            Ok::<_, String>((count_balanced, load_balanced, switch, after_change, change))
        }
        .await;
        let finished = rig.finish().await;
        let (count_balanced, load_balanced, switch, after_change, change) = outcome?;
        let budget = usize::from(self.churn_budget) * partitions as usize / 1000;
        let f = CapacityFigures {
            weighted_members: self.weighted_members,
            weighted_partitions: self.weighted_partitions,
            capacities,
            weighted_counts,
            weighted_deviation_pct: deviation,
            weighted_worst_pct: worst,
            members,
            partitions,
            zipf_s: self.zipf,
            count_balanced,
            load_balanced,
            switch_rebalances: switch,
            after_change,
            change_rebalances: change,
            churn_budget_partitions: budget,
        };
        let text = kv(&[
            (
                "run 1, capacities",
                format!(
                    "{} members with capacities {:?}, {} partitions of equal load: counts {:?}, {:?} % off their share (worst {:.2} %)",
                    f.weighted_members,
                    f.capacities,
                    f.weighted_partitions,
                    f.weighted_counts,
                    f.weighted_deviation_pct.iter().map(|d| (d * 100.0).round() / 100.0).collect::<Vec<_>>(),
                    f.weighted_worst_pct
                ),
            ),
            (
                "run 2, layout",
                format!(
                    "{members} members, {partitions} partitions, loads Zipf s = {} reported with heartbeats every {} ms",
                    self.zipf,
                    interval.as_millis()
                ),
            ),
            ("count-balanced", describe(&f.count_balanced)),
            ("balance = load", describe(&f.load_balanced)),
            ("  rebalances, partitions moved", describe_moves(&f.switch_rebalances)),
            ("loads changed", describe(&f.after_change)),
            (
                "  rebalances, partitions moved",
                format!("{} (churn budget {} partitions)", describe_moves(&f.change_rebalances), budget),
            ),
        ]);
        let max_change = f
            .change_rebalances
            .iter()
            .map(|r| r.partitions_moved)
            .max()
            .unwrap_or(0);
        let max_switch = f
            .switch_rebalances
            .iter()
            .map(|r| r.partitions_moved)
            .max()
            .unwrap_or(0);
        let checks = vec![
            Check::new(
                "capacities 1:2:4: each member within ±5 % of its share",
                "<= 5 %",
                format!("{:.2} %", f.weighted_worst_pct),
                f.weighted_worst_pct <= 5.0,
            ),
            Check::new(
                "Zipf, balance = load: most loaded member within 10 % of the mean (infeasible: the heaviest partition alone exceeds it)",
                "<= 1.10 × mean",
                format!("{:.2} × (count-balanced {:.2} ×)", f.load_balanced.max_over_mean, f.count_balanced.max_over_mean),
                f.load_balanced.max_over_mean <= 1.10,
            ),
            Check::new(
                "Zipf, balance = load: most loaded member within 10 % of max(mean, heaviest partition)",
                "<= 1.10 ×",
                format!("{:.2} × (count-balanced {:.2} ×)", f.load_balanced.max_over_bound, f.count_balanced.max_over_bound),
                f.load_balanced.max_over_bound <= 1.10,
            ),
            Check::new(
                "partitions moved per rebalance, at most the churn budget",
                format!("<= {budget}"),
                format!("{} (after the switch {max_switch})", max_change),
                max_change <= budget && max_switch <= budget,
            ),
        ];
        let notes = vec![
            format!(
                "with Zipf s = {} the heaviest partition alone is {:.2} × the mean member load",
                self.zipf,
                f.count_balanced.heaviest_partition / f.count_balanced.mean_member_load
            ),
            "run 1 keeps the default balance (count): with equal loads, counts are loads".to_owned(),
            "the members count as moved every partition revoked from them; no member joins or leaves, so none must move".to_owned(),
        ];
        let load = format!(
            "heartbeats every {} ms carrying the loads of the owned partitions",
            interval.as_millis()
        );
        Ok(Outcome {
            notes,
            ..finished.outcome(load, f, text, checks)
        })
    }
}
