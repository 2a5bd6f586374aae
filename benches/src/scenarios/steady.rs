//! `steady`: members heartbeating at a fixed offered rate (or closed loop) for a
//! duration: latency, throughput, the coordinator's CPU and memory, false expulsions.
//! `scale` runs it over a sweep of member counts.

use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::common::{
    drain_window, member_specs, sleep_or, Check, CommonArgs, CpuMark, GeneratorInfo, Machine,
    Progress, Report,
};
use crate::driver::{Counters, Driver, Load, Plan};
use crate::stats::{fmt_bytes, fmt_count, kv, table, Percentiles, LATENCY_HEADER};
use crate::target::Target;

#[derive(Debug, Clone, Args)]
pub(crate) struct SteadyArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Offered heartbeats per second over all members; default: members / --interval.
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Each member keeps one heartbeat outstanding, the next sent as soon as the last is
    /// answered (saturation).
    #[arg(long, conflicts_with = "rate")]
    pub(crate) closed_loop: bool,
    /// Time between the last join and the start of the measured window.
    #[arg(long, value_parser = crate::common::duration, default_value = "3s")]
    pub(crate) warmup: Duration,
}

/// What one steady run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SteadyFigures {
    pub(crate) members: usize,
    pub(crate) groups: usize,
    pub(crate) partitions_per_group: u32,
    pub(crate) connections: usize,
    pub(crate) members_per_conn: usize,
    pub(crate) session_timeout_ms: u64,
    pub(crate) heartbeat_interval_ms: Option<f64>,
    pub(crate) offered_hb_per_s: Option<f64>,
    pub(crate) closed_loop: bool,
    pub(crate) setup_s: f64,
    pub(crate) window_s: f64,
    pub(crate) sent_hb_per_s: f64,
    pub(crate) handled_hb_per_s: f64,
    pub(crate) late_sends_pct: f64,
    pub(crate) unanswered: u64,
    pub(crate) rtt_from_intended: Percentiles,
    pub(crate) rtt_from_sent: Percentiles,
    pub(crate) join_latency: Percentiles,
    pub(crate) coordinator_cpu_s: Option<f64>,
    pub(crate) coordinator_cores: Option<f64>,
    pub(crate) hb_per_cpu_s: Option<f64>,
    pub(crate) cpu_us_per_hb: Option<f64>,
    pub(crate) cores_per_1000_members: Option<f64>,
    pub(crate) generator_cpu_s: Option<f64>,
    pub(crate) rss_before_bytes: Option<u64>,
    pub(crate) rss_after_bytes: Option<u64>,
    pub(crate) peak_rss_bytes: Option<u64>,
    pub(crate) memory_per_member_bytes: Option<f64>,
    pub(crate) false_expulsions: u64,
    pub(crate) heartbeat_errors: u64,
    pub(crate) join_errors: u64,
    pub(crate) connections_failed: u64,
    pub(crate) connections_lost: u64,
}

/// One steady run against a fresh coordinator.
pub(crate) async fn measure(
    common: &CommonArgs,
    members: usize,
    rate: Option<f64>,
    closed_loop: bool,
    warmup: Duration,
) -> Result<(SteadyFigures, Option<crate::target::TargetInfo>), String> {
    let groups = common.groups_or((members / 100).max(1));
    let partitions = common
        .partitions
        .unwrap_or_else(|| u32::try_from(members.div_ceil(groups)).unwrap_or(u32::MAX));
    let period = match rate {
        Some(r) if r > 0.0 => Duration::from_secs_f64(members as f64 / r),
        Some(_) => return Err("--rate must be above 0".into()),
        None => common.interval.unwrap_or(Duration::from_secs(1)),
    };
    let session = common
        .session_timeout
        .unwrap_or_else(|| (period * 3).max(Duration::from_secs(10)));
    let duration = common.duration.unwrap_or(Duration::from_secs(20));
    let per_conn = common.per_conn(members);
    let opts = common.target_options()?;
    let target = Target::start(&opts).await?;
    let info = target.info(&opts);
    let rss_before = target.rss();
    let plan = Plan {
        members: member_specs(
            members,
            groups,
            partitions,
            session,
            Duration::from_secs(3600),
            false,
        ),
        per_conn,
        load: if closed_loop {
            Load::ClosedLoop
        } else {
            Load::Periodic { period }
        },
        connect_concurrency: 256,
        join_concurrency: common.join_concurrency,
        auto_join: true,
        observe: false,
    };
    let setup_started = Instant::now();
    let driver = Driver::start(target.addr, plan);
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
        let setup = setup_started.elapsed();
        progress.phase("warming up");
        sleep_or(&shared.stop, warmup).await;
        let from = Instant::now();
        let until = from + duration;
        shared.set_window(from, until);
        shared.hb_intended.reset();
        shared.hb_service.reset();
        let mark = CpuMark::take(&target);
        progress.phase("measuring");
        tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
        let (wall, coordinator_cpu, generator_cpu) = mark.since(&target);
        progress.phase("draining");
        drain_window(&shared, Duration::from_secs(5)).await;
        Ok((setup, wall, coordinator_cpu, generator_cpu))
    }
    .await;
    let rss_after = target.rss();
    let peak = target.peak_rss();
    progress.stop();
    let connections = driver.connections;
    driver.stop(Duration::from_secs(10)).await;
    target.stop().await;
    let (setup, wall, coordinator_cpu, generator_cpu) = outcome?;

    let c = &shared.counters;
    let sent = Counters::get(&c.hb_window_sent);
    let answered = Counters::get(&c.hb_window_answered);
    let late = Counters::get(&c.hb_window_late);
    let handled = answered as f64 / wall;
    let hb_per_cpu = coordinator_cpu
        .filter(|s| *s > 0.0)
        .map(|s| answered as f64 / s);
    let figures = SteadyFigures {
        members,
        groups,
        partitions_per_group: partitions,
        connections,
        members_per_conn: per_conn,
        session_timeout_ms: session.as_millis() as u64,
        heartbeat_interval_ms: (!closed_loop).then_some(period.as_secs_f64() * 1000.0),
        offered_hb_per_s: (!closed_loop).then(|| members as f64 / period.as_secs_f64()),
        closed_loop,
        setup_s: setup.as_secs_f64(),
        window_s: wall,
        sent_hb_per_s: sent as f64 / wall,
        handled_hb_per_s: handled,
        late_sends_pct: if sent > 0 {
            100.0 * late as f64 / sent as f64
        } else {
            0.0
        },
        unanswered: sent.saturating_sub(answered),
        rtt_from_intended: Percentiles::of(&shared.hb_intended.merged()),
        rtt_from_sent: Percentiles::of(&shared.hb_service.merged()),
        join_latency: Percentiles::of(&shared.join_latency.merged()),
        coordinator_cpu_s: coordinator_cpu,
        coordinator_cores: coordinator_cpu.map(|s| s / wall),
        hb_per_cpu_s: hb_per_cpu,
        cpu_us_per_hb: hb_per_cpu.map(|r| 1e6 / r),
        cores_per_1000_members: coordinator_cpu.map(|s| s / wall / (members as f64 / 1000.0)),
        generator_cpu_s: generator_cpu,
        rss_before_bytes: rss_before,
        rss_after_bytes: rss_after,
        peak_rss_bytes: peak,
        memory_per_member_bytes: match (rss_before, rss_after) {
            (Some(b), Some(a)) => Some((a as f64 - b as f64) / members as f64),
            _ => None,
        },
        false_expulsions: c.expelled(),
        heartbeat_errors: Counters::get(&c.hb_err),
        join_errors: Counters::get(&c.joins_err),
        connections_failed: Counters::get(&c.conns_failed),
        connections_lost: Counters::get(&c.conns_lost),
    };
    Ok((figures, Some(info)))
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "n/a".to_owned(), f)
}

pub(crate) fn load_label(f: &SteadyFigures) -> String {
    if f.closed_loop {
        "closed loop: one heartbeat outstanding per member".to_owned()
    } else {
        format!(
            "open loop: {} hb/s offered, each member every {:.1} ms on a fixed timeline (latency from the intended send time)",
            fmt_count(f.offered_hb_per_s.unwrap_or_default()),
            f.heartbeat_interval_ms.unwrap_or_default()
        )
    }
}

pub(crate) fn render(f: &SteadyFigures) -> String {
    let mut out = kv(&[
        (
            "layout",
            format!(
                "{} members in {} groups ({} partitions each), session timeout {} ms",
                fmt_count(f.members as f64),
                fmt_count(f.groups as f64),
                fmt_count(f.partitions_per_group as f64),
                f.session_timeout_ms
            ),
        ),
        (
            "setup",
            format!("{:.1} s to connect and join every member", f.setup_s),
        ),
        (
            "window",
            format!(
                "{:.1} s: sent {} hb/s, handled {} hb/s, {:.2} % sent over 2 ms late, {} unanswered",
                f.window_s,
                fmt_count(f.sent_hb_per_s),
                fmt_count(f.handled_hb_per_s),
                f.late_sends_pct,
                f.unanswered
            ),
        ),
        (
            "coordinator CPU",
            format!(
                "{} s ({} cores); {} hb per CPU-second ({} us CPU per hb); {} cores per 1,000 members",
                opt(f.coordinator_cpu_s, |v| format!("{v:.2}")),
                opt(f.coordinator_cores, |v| format!("{v:.3}")),
                opt(f.hb_per_cpu_s, fmt_count),
                opt(f.cpu_us_per_hb, |v| format!("{v:.2}")),
                opt(f.cores_per_1000_members, |v| format!("{v:.4}")),
            ),
        ),
        (
            "generator CPU",
            format!("{} s", opt(f.generator_cpu_s, |v| format!("{v:.2}"))),
        ),
        (
            "memory",
            format!(
                "RSS {} before, {} after, peak {}; {} per member",
                opt(f.rss_before_bytes, fmt_bytes),
                opt(f.rss_after_bytes, fmt_bytes),
                opt(f.peak_rss_bytes, fmt_bytes),
                opt(f.memory_per_member_bytes, |v| format!("{v:.0} B")),
            ),
        ),
        (
            "errors",
            format!(
                "false expulsions {}, heartbeat errors {}, join errors {}, connections failed {} lost {}",
                f.false_expulsions,
                f.heartbeat_errors,
                f.join_errors,
                f.connections_failed,
                f.connections_lost
            ),
        ),
    ]);
    out.push('\n');
    out.push_str(&table(
        &LATENCY_HEADER,
        &[
            f.rtt_from_intended.row("heartbeat RTT, from intended send"),
            f.rtt_from_sent.row("heartbeat RTT, from actual send"),
            f.join_latency.row("join (setup)"),
        ],
    ));
    out
}

pub(crate) fn checks(f: &SteadyFigures) -> Vec<Check> {
    let mut checks = vec![
        Check::new(
            "false expulsions",
            "0",
            f.false_expulsions.to_string(),
            f.false_expulsions == 0 && f.heartbeat_errors == 0,
        ),
        Check::new(
            "heartbeat RTT p99 (from intended send)",
            "< 10 ms",
            format!("{:.3} ms", f.rtt_from_intended.p99_ms),
            f.rtt_from_intended.p99_ms < 10.0 && f.rtt_from_intended.count > 0,
        ),
    ];
    if let Some(peak) = f.peak_rss_bytes {
        checks.push(Check::new(
            "coordinator peak memory",
            "< 1 GiB",
            fmt_bytes(peak),
            peak < 1 << 30,
        ));
    }
    if let (Some(rate), Some(eff)) = (f.offered_hb_per_s, f.hb_per_cpu_s) {
        if (rate - 10_000.0).abs() < 1.0 {
            let (goal, label) = if f.members_per_conn >= 100 {
                (1_000_000.0, ">= 1,000,000 hb per CPU-second")
            } else {
                (60_000.0, ">= 60,000 hb per CPU-second")
            };
            checks.push(Check::new(
                format!(
                    "efficiency at 10,000 hb/s, {} member(s) per connection",
                    f.members_per_conn
                ),
                label,
                fmt_count(eff),
                eff >= goal,
            ));
        }
    }
    checks
}

pub(crate) async fn run(args: &SteadyArgs) -> Result<bool, String> {
    let mut machine = Machine::now();
    let members = args.common.members_or(1_000);
    let (figures, info) = measure(
        &args.common,
        members,
        args.rate,
        args.closed_loop,
        args.warmup,
    )
    .await?;
    machine.finish();
    let mut notes = Vec::new();
    if info.as_ref().is_some_and(|i| i.mode == "in-process") {
        notes.push(
            "memory figures include the load generator; use --spawn for the coordinator alone"
                .to_owned(),
        );
    }
    let report = Report {
        scenario: "steady",
        command: crate::common::command_line(),
        machine,
        coordinator: info,
        generator: Some(GeneratorInfo::new(
            figures.members,
            figures.connections,
            figures.members_per_conn,
            load_label(&figures),
        )),
        text: render(&figures),
        checks: checks(&figures),
        figures,
        notes,
    };
    report.emit(args.common.json.as_ref())
}

/// `scale`: the steady scenario over a sweep of member counts.
#[derive(Debug, Clone, Args)]
pub(crate) struct ScaleArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Member counts to run, e.g. 1000,10000,50000,100000 (also 10k).
    #[arg(long, value_parser = crate::common::counts, default_value = "1000,10000,50000,100000")]
    pub(crate) counts: std::vec::Vec<usize>,
    /// Time between the last join and the measured window.
    #[arg(long, value_parser = crate::common::duration, default_value = "3s")]
    pub(crate) warmup: Duration,
}

#[derive(Debug, Serialize)]
pub(crate) struct ScaleFigures {
    pub(crate) runs: Vec<SteadyFigures>,
}

pub(crate) async fn run_scale(args: &ScaleArgs) -> Result<bool, String> {
    let mut machine = Machine::now();
    let mut runs = Vec::new();
    let mut info = None;
    for &members in &args.counts {
        if !args.common.quiet {
            eprintln!("scale: {members} members");
        }
        let (f, i) = measure(&args.common, members, None, false, args.warmup).await?;
        info = i;
        runs.push(f);
    }
    machine.finish();
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|f| {
            vec![
                fmt_count(f.members as f64),
                format!("{}x{}", fmt_count(f.connections as f64), f.members_per_conn),
                fmt_count(f.handled_hb_per_s),
                opt(f.coordinator_cores, |v| format!("{v:.3}")),
                opt(f.cores_per_1000_members, |v| format!("{:.1}", v * 1000.0)),
                opt(f.hb_per_cpu_s, fmt_count),
                opt(f.memory_per_member_bytes, |v| format!("{v:.0}")),
                opt(f.peak_rss_bytes, fmt_bytes),
                format!("{:.3}", f.rtt_from_intended.p50_ms),
                format!("{:.3}", f.rtt_from_intended.p99_ms),
                f.false_expulsions.to_string(),
            ]
        })
        .collect();
    let text = table(
        &[
            "members",
            "conns x members",
            "hb/s",
            "CPU cores",
            "CPU ms/s per 1k members",
            "hb per CPU-s",
            "B/member",
            "peak RSS",
            "RTT p50 ms",
            "RTT p99 ms",
            "expelled",
        ],
        &rows,
    );
    let mut checks = Vec::new();
    for f in &runs {
        for mut c in self::checks(f) {
            c.what = format!("{} members: {}", fmt_count(f.members as f64), c.what);
            checks.push(c);
        }
    }
    let report = Report {
        scenario: "scale",
        command: crate::common::command_line(),
        machine,
        coordinator: info,
        generator: runs.last().map(|f| {
            GeneratorInfo::new(f.members, f.connections, f.members_per_conn, load_label(f))
        }),
        text,
        checks,
        figures: ScaleFigures { runs },
        notes: vec![
            "each count runs against a fresh coordinator; generator details shown for the largest"
                .to_owned(),
        ],
    };
    report.emit(args.common.json.as_ref())
}
