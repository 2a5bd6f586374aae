//! `stall`: members whose heartbeats continue but whose progress counter stops (they
//! must be expelled soon after the progress timeout), and members that pause entirely
//! for a while (they must be expelled exactly when the pause exceeds the session
//! timeout).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use clap::Args;
use rollcall_protocol::ExpelReason;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::common::{member_specs, Check, CommonArgs, GeneratorInfo, Machine, Progress, Report};
use crate::driver::{Cmd, Driver, Load, Plan};
use crate::stats::{fmt_ms, kv, table, Percentiles, LATENCY_HEADER};
use crate::target::Target;
use crate::tracker::Tracker;

/// Pauses closer than this to the session timeout are not judged either way.
const BAND: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Args)]
pub(crate) struct StallArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Members whose progress stops.
    #[arg(long, default_value_t = 10)]
    pub(crate) stalled: usize,
    /// Progress timeout every member asks for.
    #[arg(long, value_parser = crate::common::duration, default_value = "2s")]
    pub(crate) progress_timeout: Duration,
    /// Pause lengths (silence from the last heartbeat), comma-separated.
    #[arg(long, value_parser = crate::common::durations, default_value = "500ms,900ms,1100ms,1500ms")]
    pub(crate) pause: std::vec::Vec<Duration>,
    /// Members paused for each pause length.
    #[arg(long, default_value_t = 5)]
    pub(crate) paused_per_value: usize,
}

#[derive(Debug, Serialize)]
pub(crate) struct PauseRow {
    pub(crate) pause_ms: f64,
    pub(crate) members: usize,
    pub(crate) expected_expelled: Option<bool>,
    pub(crate) expelled: usize,
    pub(crate) over_timeout: Percentiles,
}

#[derive(Debug, Serialize)]
pub(crate) struct StallFigures {
    pub(crate) members: usize,
    pub(crate) session_timeout_ms: u64,
    pub(crate) progress_timeout_ms: u64,
    pub(crate) heartbeat_interval_ms: u64,
    pub(crate) stalled: usize,
    pub(crate) stalled_expelled_progress: usize,
    pub(crate) stalled_expelled_other: usize,
    /// Last progress-advancing heartbeat to the expulsion push, less the progress timeout.
    pub(crate) progress_expiry_over_timeout: Percentiles,
    pub(crate) pauses: Vec<PauseRow>,
    pub(crate) false_expulsions: usize,
    pub(crate) missed_expulsions: usize,
}

pub(crate) async fn run(args: &StallArgs) -> Result<bool, String> {
    let common = &args.common;
    let mut machine = Machine::now();
    let members = common.members_or(100);
    let groups = common.groups_or(1);
    let partitions = common.partitions.unwrap_or(100);
    let session = common.session_timeout.unwrap_or(Duration::from_secs(1));
    let interval = common.interval.unwrap_or(Duration::from_millis(100));
    let needed = args.stalled + args.pause.len() * args.paused_per_value;
    if needed >= members {
        return Err(format!(
            "{needed} stalled and paused members need more than {members} members"
        ));
    }
    let per_conn = common.per_conn(members);
    let opts = common.target_options()?;
    let target = Target::start(&opts).await?;
    let info = target.info(&opts);
    let mut driver = Driver::start(
        target.addr,
        Plan {
            members: member_specs(
                members,
                groups,
                partitions,
                session,
                args.progress_timeout,
                false,
            ),
            per_conn,
            load: Load::Periodic { period: interval },
            connect_concurrency: 256,
            join_concurrency: common.join_concurrency,
            auto_join: true,
            observe: true,
        },
    );
    let shared = driver.shared.clone();
    let progress = Progress::start(shared.clone(), members, common.quiet);
    let mut observations = driver.observations.take().ok_or("no observations")?;
    let outcome = async {
        if !driver.wait_connected(common.setup_timeout).await {
            return Err("not every connection could be opened".to_owned());
        }
        let mut tracker = Tracker::new(members, groups, partitions);
        progress.phase("settling");
        tracker
            .absorb(
                &mut observations,
                Instant::now() + common.setup_timeout,
                Tracker::all_settled,
            )
            .await;
        if !tracker.all_settled() {
            return Err("the groups did not settle".to_owned());
        }
        // Every member has heartbeated (and reported progress) before it is steered.
        let beats = Instant::now() + interval * 2 + Duration::from_millis(50);
        tracker.absorb(&mut observations, beats, |_| false).await;

        // Stalls: progress stops, heartbeats go on.
        progress.phase("stalling");
        let mut last_progress = HashMap::new();
        for m in 0..args.stalled {
            let (reply, answer) = oneshot::channel();
            driver.command(Cmd::Stall { member: m, reply });
            if let Ok(Some(t)) = answer.await {
                last_progress.insert(m, t);
            }
        }
        let stalled: HashSet<usize> = (0..args.stalled).collect();
        let limit = Instant::now() + args.progress_timeout + Duration::from_secs(5);
        tracker
            .absorb(&mut observations, limit, |t| {
                stalled
                    .iter()
                    .all(|m| t.expelled.iter().any(|(e, _, _)| e == m))
            })
            .await;
        // Let the group settle again before the pauses.
        tracker
            .absorb(
                &mut observations,
                Instant::now() + Duration::from_secs(10),
                Tracker::all_settled,
            )
            .await;

        // Pauses: silence for a while, then carry on.
        progress.phase("pausing");
        let mut paused: Vec<(usize, Duration, Instant)> = Vec::new();
        let mut next = args.stalled;
        for &pause in &args.pause {
            for _ in 0..args.paused_per_value {
                let (reply, answer) = oneshot::channel();
                driver.command(Cmd::Pause {
                    member: next,
                    silence: pause,
                    reply,
                });
                if let Ok(Some(t)) = answer.await {
                    paused.push((next, pause, t));
                }
                next += 1;
            }
        }
        let longest = args.pause.iter().copied().max().unwrap_or_default();
        let limit = Instant::now() + longest.max(session) + Duration::from_secs(2);
        tracker.absorb(&mut observations, limit, |_| false).await;
        Ok((tracker, last_progress, paused))
    }
    .await;
    progress.stop();
    let connections = driver.connections;
    driver.stop(Duration::from_secs(10)).await;
    target.stop().await;
    machine.finish();
    let (tracker, last_progress, paused) = outcome?;

    let expelled: HashMap<usize, (Instant, ExpelReason)> = tracker
        .expelled
        .iter()
        .map(|(m, at, r)| (*m, (*at, *r)))
        .collect();
    let mut stall_over = Vec::new();
    let mut stalled_progress = 0;
    let mut stalled_other = 0;
    for m in 0..args.stalled {
        match expelled.get(&m) {
            Some((at, ExpelReason::ProgressExpired)) => {
                stalled_progress += 1;
                if let Some(t) = last_progress.get(&m) {
                    stall_over.push(
                        at.saturating_duration_since(*t)
                            .saturating_sub(args.progress_timeout),
                    );
                }
            }
            Some(_) => stalled_other += 1,
            None => {}
        }
    }
    let mut rows = Vec::new();
    let mut false_expulsions = 0;
    let mut missed = 0;
    for &pause in &args.pause {
        let group: Vec<&(usize, Duration, Instant)> =
            paused.iter().filter(|p| p.1 == pause).collect();
        let expected = if pause + BAND < session {
            Some(false)
        } else if pause > session + BAND {
            Some(true)
        } else {
            None
        };
        let mut over = Vec::new();
        let mut count = 0;
        for (m, _, last) in &group {
            if let Some((at, _)) = expelled.get(m) {
                count += 1;
                over.push(at.saturating_duration_since(*last).saturating_sub(session));
            }
        }
        match expected {
            Some(false) => false_expulsions += count,
            Some(true) => missed += group.len() - count,
            None => {}
        }
        rows.push(PauseRow {
            pause_ms: pause.as_secs_f64() * 1000.0,
            members: group.len(),
            expected_expelled: expected,
            expelled: count,
            over_timeout: Percentiles::of_durations(&over),
        });
    }
    let steered: HashSet<usize> = (0..args.stalled)
        .chain(paused.iter().map(|p| p.0))
        .collect();
    false_expulsions += expelled.keys().filter(|m| !steered.contains(m)).count();
    false_expulsions += tracker
        .heartbeat_errors
        .iter()
        .filter(|(m, _, _)| !steered.contains(m))
        .count();
    let f = StallFigures {
        members,
        session_timeout_ms: session.as_millis() as u64,
        progress_timeout_ms: args.progress_timeout.as_millis() as u64,
        heartbeat_interval_ms: interval.as_millis() as u64,
        stalled: args.stalled,
        stalled_expelled_progress: stalled_progress,
        stalled_expelled_other: stalled_other,
        progress_expiry_over_timeout: Percentiles::of_durations(&stall_over),
        pauses: rows,
        false_expulsions,
        missed_expulsions: missed,
    };
    let mut text = kv(&[
        ("layout", format!("{members} members in {groups} group(s); session timeout {} ms, progress timeout {} ms, heartbeat every {} ms", f.session_timeout_ms, f.progress_timeout_ms, f.heartbeat_interval_ms)),
        ("stalled", format!("{} members stopped progress: {} expelled for progress, {} for another reason", f.stalled, f.stalled_expelled_progress, f.stalled_expelled_other)),
    ]);
    text.push('\n');
    text.push_str(&table(
        &LATENCY_HEADER,
        &[f.progress_expiry_over_timeout
            .row("progress expiry, over the timeout")],
    ));
    text.push('\n');
    let pause_rows: Vec<Vec<String>> = f
        .pauses
        .iter()
        .map(|r| {
            vec![
                format!("{:.0} ms", r.pause_ms),
                r.members.to_string(),
                match r.expected_expelled {
                    Some(true) => "all",
                    Some(false) => "none",
                    None => "too close to judge",
                }
                .to_owned(),
                r.expelled.to_string(),
                if r.over_timeout.count > 0 {
                    fmt_ms(r.over_timeout.p50_ms)
                } else {
                    "-".into()
                },
                if r.over_timeout.count > 0 {
                    fmt_ms(r.over_timeout.max_ms)
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "pause",
            "members",
            "expected expelled",
            "expelled",
            "over timeout p50 ms",
            "max ms",
        ],
        &pause_rows,
    ));
    let checks = vec![
        Check::new(
            "stalled members expelled for progress",
            f.stalled.to_string(),
            f.stalled_expelled_progress.to_string(),
            f.stalled_expelled_progress == f.stalled,
        ),
        Check::new(
            "progress expiry within the timeout + 10 ms (p99)",
            "<= 10 ms over",
            format!("{:.1} ms over", f.progress_expiry_over_timeout.p99_ms),
            f.progress_expiry_over_timeout.count > 0
                && f.progress_expiry_over_timeout.p99_ms <= 10.0,
        ),
        Check::new(
            "expulsions of members paused shorter than the session timeout (or not steered)",
            "0",
            f.false_expulsions.to_string(),
            f.false_expulsions == 0,
        ),
        Check::new(
            "members paused longer than the session timeout left in",
            "0",
            f.missed_expulsions.to_string(),
            f.missed_expulsions == 0,
        ),
    ];
    let report = Report {
        scenario: "stall",
        command: crate::common::command_line(),
        machine,
        coordinator: Some(info),
        generator: Some(GeneratorInfo::new(members, connections, per_conn, format!("heartbeats every {} ms; stalls and pauses steered per member", interval.as_millis()))),
        text,
        checks,
        figures: f,
        notes: vec!["pause lengths count from the member's last heartbeat; the coordinator counts from its receipt, a loopback round trip later".to_owned()],
    };
    report.emit(common.json.as_ref())
}
