//! `steady`: members heartbeating at a fixed offered rate (or closed loop) for a
//! duration: latency, throughput, the coordinator's CPU and memory, false expulsions.
//! `scale` runs it over a sweep of member counts.

use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::common::{drain_window, Check, CommonArgs, CpuMark, GeneratorInfo};
use crate::driver::{Counters, Load};
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup, MARGIN};
use crate::stats::{fmt_bytes, fmt_count, summary, table, Percentiles};
use crate::target::TargetInfo;

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
    /// One Heartbeats frame per connection per round (`--batch-heartbeats`); the hb
    /// figures count beats (member renewals) either way.
    pub(crate) batch_heartbeats: bool,
    pub(crate) setup_s: f64,
    pub(crate) window_s: f64,
    pub(crate) sent_hb_per_s: f64,
    /// Frames that carried those beats, per second: equal to `sent_hb_per_s` without
    /// batching.
    pub(crate) sent_hb_frames_per_s: f64,
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
) -> Result<(SteadyFigures, Option<TargetInfo>), String> {
    let groups = common.groups_or((members / 100).max(1));
    let partitions = common.partitions_or_per_member(members, groups, 1);
    let period = match rate {
        Some(r) if r > 0.0 => Duration::from_secs_f64(members as f64 / r),
        Some(_) => return Err("--rate must be above 0".into()),
        None => common.interval.unwrap_or(Duration::from_secs(1)),
    };
    let session = common
        .session_timeout
        .unwrap_or_else(|| (period * 3).max(Duration::from_secs(10)));
    let duration = common.duration.unwrap_or(Duration::from_secs(20));
    let load = if closed_loop {
        Load::ClosedLoop
    } else {
        Load::Periodic { period }
    };
    let setup = Setup::new(common, members, groups, partitions, session, load);
    let rig = Rig::start(common, setup).await?;
    let outcome = async {
        rig.connected().await?;
        rig.joined().await?;
        let setup = rig.started.elapsed();
        rig.warm_up(warmup).await;
        let shared = &rig.shared;
        let from = Instant::now();
        let until = from + duration;
        shared.set_window(from, until);
        shared.hb_intended.reset();
        shared.hb_service.reset();
        let mark = CpuMark::take(&rig.target);
        rig.phase("measuring");
        tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
        let (wall, coordinator_cpu, generator_cpu) = mark.since(&rig.target);
        rig.phase("draining");
        drain_window(shared, Duration::from_secs(5)).await;
        Ok::<_, String>((setup, wall, coordinator_cpu, generator_cpu))
    }
    .await;
    let rss_before = rig.rss_before;
    let rss_after = rig.target.rss();
    let peak = rig.target.peak_rss();
    let per_conn = rig.setup.per_conn;
    let done = rig.finish().await;
    let (setup, wall, coordinator_cpu, generator_cpu) = outcome?;

    let shared = &done.shared;
    let c = &shared.counters;
    let sent = Counters::get(&c.hb_window_sent);
    let frames = Counters::get(&c.hb_window_frames);
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
        connections: done.connections,
        members_per_conn: per_conn,
        session_timeout_ms: session.as_millis() as u64,
        heartbeat_interval_ms: (!closed_loop).then_some(period.as_secs_f64() * 1000.0),
        offered_hb_per_s: (!closed_loop).then(|| members as f64 / period.as_secs_f64()),
        closed_loop,
        batch_heartbeats: common.batch_heartbeats,
        setup_s: setup.as_secs_f64(),
        window_s: wall,
        sent_hb_per_s: sent as f64 / wall,
        sent_hb_frames_per_s: frames as f64 / wall,
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
    Ok((figures, Some(done.coordinator)))
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "n/a".to_owned(), f)
}

pub(crate) fn load_label(f: &SteadyFigures) -> String {
    match (f.closed_loop, f.batch_heartbeats) {
        (true, false) => "closed loop: one heartbeat outstanding per member".to_owned(),
        (true, true) => {
            "closed loop: one Heartbeats frame outstanding per connection, renewing every member on it"
                .to_owned()
        }
        (false, batch) => format!(
            "open loop: {} hb/s offered, each member every {:.1} ms on a fixed timeline{} (latency from the intended send time)",
            fmt_count(f.offered_hb_per_s.unwrap_or_default()),
            f.heartbeat_interval_ms.unwrap_or_default(),
            if batch {
                ", a connection's members at its first member's place"
            } else {
                ""
            }
        ),
    }
}

pub(crate) fn render(f: &SteadyFigures) -> String {
    summary(
        &[
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
                "{:.1} s: sent {} hb/s in {} frames/s, handled {} hb/s, {:.2} % sent over 2 ms late, {} unanswered",
                f.window_s,
                fmt_count(f.sent_hb_per_s),
                fmt_count(f.sent_hb_frames_per_s),
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
        ],
        &[
            f.rtt_from_intended.row("heartbeat RTT, from intended send"),
            f.rtt_from_sent.row("heartbeat RTT, from actual send"),
            f.join_latency.row("join (setup)"),
        ],
    )
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

/// How the members' load is generated, as the report's generator line says it.
fn generator(f: &SteadyFigures) -> GeneratorInfo {
    GeneratorInfo::new(
        f.members,
        f.connections,
        f.members_per_conn,
        f.batch_heartbeats,
        load_label(f),
    )
}

impl Scenario for SteadyArgs {
    const NAME: &'static str = "steady";
    type Figures = SteadyFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        self.warmup
    }

    async fn run(&self) -> Result<Outcome<SteadyFigures>, String> {
        let members = self.common.members_or(1_000);
        let (figures, info) = measure(
            &self.common,
            members,
            self.rate,
            self.closed_loop,
            self.warmup,
        )
        .await?;
        let mut notes = Vec::new();
        if info.as_ref().is_some_and(|i| i.mode == "in-process") {
            notes.push(
                "memory figures include the load generator; use --spawn for the coordinator alone"
                    .to_owned(),
            );
        }
        Ok(Outcome {
            coordinator: info,
            generator: Some(generator(&figures)),
            text: render(&figures),
            checks: checks(&figures),
            figures,
            notes,
        })
    }
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

impl Scenario for ScaleArgs {
    const NAME: &'static str = "scale";
    type Figures = ScaleFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        self.warmup
    }

    /// One steady run per count, each with its own setup, duration (20 s when not
    /// given), warm-up and margin.
    fn hard_cap(&self) -> Duration {
        let runs = self.counts.len() as u32;
        (self.common.setup_timeout
            + self.common.duration.unwrap_or(Duration::from_secs(20))
            + self.warmup
            + MARGIN)
            * runs.max(1)
    }

    async fn run(&self) -> Result<Outcome<ScaleFigures>, String> {
        let mut runs = Vec::new();
        let mut info = None;
        for &members in &self.counts {
            if !self.common.quiet {
                eprintln!("scale: {members} members");
            }
            let (f, i) = measure(&self.common, members, None, false, self.warmup).await?;
            info = i;
            runs.push(f);
        }
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
        Ok(Outcome {
            coordinator: info,
            generator: runs.last().map(generator),
            text,
            checks,
            figures: ScaleFigures { runs },
            notes: vec![
                "each count runs against a fresh coordinator; generator details shown for the largest"
                    .to_owned(),
            ],
        })
    }
}
