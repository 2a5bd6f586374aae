//! `commit`: many members committing offsets of their partitions at once, each commit
//! acknowledged only once durable: throughput and latency.

use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::common::{Check, CommonArgs, CpuMark};
use crate::driver::{Counters, Load};
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup};
use crate::stats::{fmt_count, summary, Percentiles};
use crate::target::StoreKind;

#[derive(Debug, Clone, Args)]
pub(crate) struct CommitArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Commit requests each member keeps outstanding.
    #[arg(long, default_value_t = 4)]
    pub(crate) inflight: usize,
    /// Offsets (partitions) per commit request.
    #[arg(long, default_value_t = 1)]
    pub(crate) offsets_per_commit: usize,
    /// Time between the last join and the start of the measured window.
    #[arg(long, value_parser = crate::common::duration, default_value = "2s")]
    pub(crate) warmup: Duration,
}

#[derive(Debug, Serialize)]
pub(crate) struct CommitFigures {
    pub(crate) members: usize,
    pub(crate) groups: usize,
    pub(crate) partitions_per_group: u32,
    pub(crate) inflight_per_member: usize,
    pub(crate) offsets_per_commit: usize,
    pub(crate) store: StoreKind,
    pub(crate) window_s: f64,
    pub(crate) acknowledged_offsets_per_s: f64,
    pub(crate) commit_requests_per_s: f64,
    pub(crate) latency: Percentiles,
    /// Offsets refused among the commits sent in the window.
    pub(crate) rejected_offsets: u64,
    /// Offsets refused over the whole run (joins and rebalances included).
    pub(crate) rejected_offsets_total: u64,
    pub(crate) coordinator_cpu_s: Option<f64>,
    pub(crate) coordinator_cores: Option<f64>,
    pub(crate) expulsions: u64,
}

impl Scenario for CommitArgs {
    const NAME: &'static str = "commit";
    type Figures = CommitFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        self.warmup
    }

    async fn run(&self) -> Result<Outcome<CommitFigures>, String> {
        let common = &self.common;
        let members = common.members_or(1_000);
        let groups = common.groups_or(10);
        let partitions = common.partitions_or_per_member(members, groups, 4);
        let session = common.session_timeout.unwrap_or(Duration::from_secs(30));
        let interval = common.interval.unwrap_or(Duration::from_secs(1));
        let duration = common.duration.unwrap_or(Duration::from_secs(10));
        let load = Load::Commits {
            inflight: self.inflight.max(1),
            offsets: self.offsets_per_commit.max(1),
            period: interval,
        };
        let setup = Setup::new(common, members, groups, partitions, session, load);
        let rig = Rig::start(common, setup).await?;
        let outcome = async {
            rig.connected().await?;
            rig.joined().await?;
            rig.warm_up(self.warmup).await;
            let shared = &rig.shared;
            let from = Instant::now();
            let until = from + duration;
            let c = &shared.counters;
            let answers0 = Counters::get(&c.commit_answers);
            shared.set_window(from, until);
            shared.commit_latency.reset();
            let mark = CpuMark::take(&rig.target);
            rig.phase("measuring");
            tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
            let (wall, cpu, _) = mark.since(&rig.target);
            let answers = Counters::get(&c.commit_answers) - answers0;
            rig.phase("draining");
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, String>((wall, cpu, answers))
        }
        .await;
        let done = rig.finish().await;
        let (wall, cpu, answers) = outcome?;
        let c = &done.shared.counters;
        let f = CommitFigures {
            members,
            groups,
            partitions_per_group: partitions,
            inflight_per_member: self.inflight,
            offsets_per_commit: self.offsets_per_commit,
            store: common.store,
            window_s: wall,
            acknowledged_offsets_per_s: Counters::get(&c.commit_window_ok) as f64 / wall,
            commit_requests_per_s: answers as f64 / wall,
            latency: Percentiles::of(&done.shared.commit_latency.merged()),
            rejected_offsets: Counters::get(&c.commit_window_err),
            rejected_offsets_total: Counters::get(&c.commit_offsets_err),
            coordinator_cpu_s: cpu,
            coordinator_cores: cpu.map(|s| s / wall),
            expulsions: c.expelled(),
        };
        let text = summary(
            &[
                ("layout", format!("{} members in {} groups ({} partitions each), {} commits outstanding per member, {} offset(s) per commit", fmt_count(members as f64), groups, partitions, f.inflight_per_member, f.offsets_per_commit)),
                ("store", format!("{:?}{}", f.store, match f.store { StoreKind::Memory => " (not durable: figures are not comparable)", StoreKind::Redb => " in a temporary directory; every answer waits for its batch's fsync", StoreKind::Etcd => " (a one-coordinator cluster; every answer waits for its batch's etcd transaction)" })),
                ("window", format!("{:.1} s: {} acknowledged commits/s ({} requests/s), {} offsets rejected ({} over the whole run, rebalances while joining included)", f.window_s, fmt_count(f.acknowledged_offsets_per_s), fmt_count(f.commit_requests_per_s), f.rejected_offsets, f.rejected_offsets_total)),
                ("coordinator CPU", f.coordinator_cpu_s.map_or("n/a".into(), |v| format!("{v:.2} s ({:.2} cores)", v / wall))),
                ("expulsions", f.expulsions.to_string()),
            ],
            &[f.latency.row("commit, sent to durable answer")],
        );
        let checks = vec![
            Check::new(
                "acknowledged commits per second",
                ">= 50,000",
                fmt_count(f.acknowledged_offsets_per_s),
                f.acknowledged_offsets_per_s >= 50_000.0,
            ),
            Check::new(
                "commit latency p99",
                "< 25 ms",
                format!("{:.2} ms", f.latency.p99_ms),
                f.latency.count > 0 && f.latency.p99_ms < 25.0,
            ),
            Check::new(
                "expulsions and rejected offsets",
                "0",
                (f.expulsions + f.rejected_offsets).to_string(),
                f.expulsions + f.rejected_offsets == 0,
            ),
        ];
        let load =
            "closed loop: each member keeps its commits outstanding, cycling over its partitions";
        Ok(done.outcome(load.to_owned(), f, text, checks))
    }
}
