//! `commit`: many members committing offsets of their partitions at once, each commit
//! acknowledged only once durable: throughput and latency.

use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::common::{
    member_specs, sleep_or, Check, CommonArgs, CpuMark, GeneratorInfo, Machine, Progress, Report,
};
use crate::driver::{Counters, Driver, Load, Plan};
use crate::stats::{fmt_count, kv, table, Percentiles, LATENCY_HEADER};
use crate::target::{StoreKind, Target};

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

pub(crate) async fn run(args: &CommitArgs) -> Result<bool, String> {
    let common = &args.common;
    let mut machine = Machine::now();
    let members = common.members_or(1_000);
    let groups = common.groups_or(10);
    let partitions = common
        .partitions
        .unwrap_or_else(|| u32::try_from(members.div_ceil(groups) * 4).unwrap_or(u32::MAX));
    let session = common.session_timeout.unwrap_or(Duration::from_secs(30));
    let interval = common.interval.unwrap_or(Duration::from_secs(1));
    let duration = common.duration.unwrap_or(Duration::from_secs(10));
    let per_conn = common.per_conn(members);
    let opts = common.target_options()?;
    let target = Target::start(&opts).await?;
    let info = target.info(&opts);
    let driver = Driver::start(
        target.addr,
        Plan {
            members: member_specs(
                members,
                groups,
                partitions,
                session,
                Duration::from_secs(3600),
                false,
            ),
            per_conn,
            load: Load::Commits {
                inflight: args.inflight.max(1),
                offsets: args.offsets_per_commit.max(1),
                period: interval,
            },
            connect_concurrency: 256,
            join_concurrency: common.join_concurrency,
            auto_join: true,
            observe: false,
        },
    );
    let shared = driver.shared.clone();
    let progress = Progress::start(shared.clone(), members, common.quiet);
    let outcome = async {
        if !driver.wait_connected(common.setup_timeout).await {
            return Err("not every connection could be opened".to_owned());
        }
        progress.phase("joining");
        if !driver.wait_joined(common.setup_timeout).await {
            return Err("not every member could join".to_owned());
        }
        progress.phase("warming up");
        sleep_or(&shared.stop, args.warmup).await;
        let from = Instant::now();
        let until = from + duration;
        let c = &shared.counters;
        let answers0 = Counters::get(&c.commit_answers);
        shared.set_window(from, until);
        shared.commit_latency.reset();
        let mark = CpuMark::take(&target);
        progress.phase("measuring");
        tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
        let (wall, cpu, _) = mark.since(&target);
        let answers = Counters::get(&c.commit_answers) - answers0;
        progress.phase("draining");
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok((wall, cpu, answers))
    }
    .await;
    progress.stop();
    let connections = driver.connections;
    driver.stop(Duration::from_secs(10)).await;
    target.stop().await;
    machine.finish();
    let (wall, cpu, answers) = outcome?;
    let c = &shared.counters;
    let f = CommitFigures {
        members,
        groups,
        partitions_per_group: partitions,
        inflight_per_member: args.inflight,
        offsets_per_commit: args.offsets_per_commit,
        store: opts.store,
        window_s: wall,
        acknowledged_offsets_per_s: Counters::get(&c.commit_window_ok) as f64 / wall,
        commit_requests_per_s: answers as f64 / wall,
        latency: Percentiles::of(&shared.commit_latency.merged()),
        rejected_offsets: Counters::get(&c.commit_window_err),
        rejected_offsets_total: Counters::get(&c.commit_offsets_err),
        coordinator_cpu_s: cpu,
        coordinator_cores: cpu.map(|s| s / wall),
        expulsions: c.expelled(),
    };
    let mut text = kv(&[
        ("layout", format!("{} members in {} groups ({} partitions each), {} commits outstanding per member, {} offset(s) per commit", fmt_count(members as f64), groups, partitions, f.inflight_per_member, f.offsets_per_commit)),
        ("store", format!("{:?}{}", f.store, if f.store == StoreKind::Memory { " (not durable: figures are not comparable)" } else { " in a temporary directory; every answer waits for its batch's fsync" })),
        ("window", format!("{:.1} s: {} acknowledged commits/s ({} requests/s), {} offsets rejected ({} over the whole run, rebalances while joining included)", f.window_s, fmt_count(f.acknowledged_offsets_per_s), fmt_count(f.commit_requests_per_s), f.rejected_offsets, f.rejected_offsets_total)),
        ("coordinator CPU", f.coordinator_cpu_s.map_or("n/a".into(), |v| format!("{v:.2} s ({:.2} cores)", v / wall))),
        ("expulsions", f.expulsions.to_string()),
    ]);
    text.push('\n');
    text.push_str(&table(
        &LATENCY_HEADER,
        &[f.latency.row("commit, sent to durable answer")],
    ));
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
    let report = Report {
        scenario: "commit",
        command: crate::common::command_line(),
        machine,
        coordinator: Some(info),
        generator: Some(GeneratorInfo::new(
            members,
            connections,
            per_conn,
            "closed loop: each member keeps its commits outstanding, cycling over its partitions"
                .to_owned(),
        )),
        text,
        checks,
        figures: f,
        notes: vec![],
    };
    report.emit(common.json.as_ref())
}
