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

use crate::common::{Check, CommonArgs};
use crate::driver::{Cmd, Load};
use crate::harness::{Outcome, Rig, Scenario, Setup};
use crate::stats::{fmt_ms, summary, table, Percentiles};
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

impl Scenario for StallArgs {
    const NAME: &'static str = "stall";
    type Figures = StallFigures;

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        Duration::from_secs(180)
    }

    async fn run(&self) -> Result<Outcome<StallFigures>, String> {
        let common = &self.common;
        let members = common.members_or(100);
        let groups = common.groups_or(1);
        let partitions = common.partitions.unwrap_or(100);
        let session = common.session_timeout.unwrap_or(Duration::from_secs(1));
        let interval = common.interval.unwrap_or(Duration::from_millis(100));
        let needed = self.stalled + self.pause.len() * self.paused_per_value;
        if needed >= members {
            return Err(format!(
                "{needed} stalled and paused members need more than {members} members"
            ));
        }
        let load = Load::Periodic { period: interval };
        let setup = Setup {
            progress_timeout: self.progress_timeout,
            observe: true,
            ..Setup::new(common, members, groups, partitions, session, load)
        };
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            rig.settled(&mut tracker, &mut observations).await?;
            // Every member has heartbeated (and reported progress) before it is steered.
            tracker
                .absorb_for(&mut observations, interval * 2 + Duration::from_millis(50))
                .await;

            // Stalls: progress stops, heartbeats go on.
            rig.phase("stalling");
            let mut last_progress = HashMap::new();
            for m in 0..self.stalled {
                let (reply, answer) = oneshot::channel();
                rig.driver.command(Cmd::Stall { member: m, reply });
                if let Ok(Some(t)) = answer.await {
                    last_progress.insert(m, t);
                }
            }
            let stalled: HashSet<usize> = (0..self.stalled).collect();
            let limit = Instant::now() + self.progress_timeout + Duration::from_secs(5);
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
            rig.phase("pausing");
            let mut paused: Vec<(usize, Duration, Instant)> = Vec::new();
            let mut next = self.stalled;
            for &pause in &self.pause {
                for _ in 0..self.paused_per_value {
                    let (reply, answer) = oneshot::channel();
                    rig.driver.command(Cmd::Pause {
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
            let longest = self.pause.iter().copied().max().unwrap_or_default();
            tracker
                .absorb_for(
                    &mut observations,
                    longest.max(session) + Duration::from_secs(2),
                )
                .await;
            Ok::<_, String>((tracker, last_progress, paused))
        }
        .await;
        let done = rig.finish().await;
        let (tracker, last_progress, paused) = outcome?;

        let expelled: HashMap<usize, (Instant, ExpelReason)> = tracker
            .expelled
            .iter()
            .map(|(m, at, r)| (*m, (*at, *r)))
            .collect();
        let mut stall_over = Vec::new();
        let mut stalled_progress = 0;
        let mut stalled_other = 0;
        for m in 0..self.stalled {
            match expelled.get(&m) {
                Some((at, ExpelReason::ProgressExpired)) => {
                    stalled_progress += 1;
                    if let Some(t) = last_progress.get(&m) {
                        stall_over.push(
                            at.saturating_duration_since(*t)
                                .saturating_sub(self.progress_timeout),
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
        for &pause in &self.pause {
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
        let steered: HashSet<usize> = (0..self.stalled)
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
            progress_timeout_ms: self.progress_timeout.as_millis() as u64,
            heartbeat_interval_ms: interval.as_millis() as u64,
            stalled: self.stalled,
            stalled_expelled_progress: stalled_progress,
            stalled_expelled_other: stalled_other,
            progress_expiry_over_timeout: Percentiles::of_durations(&stall_over),
            pauses: rows,
            false_expulsions,
            missed_expulsions: missed,
        };
        let mut text = summary(
            &[
            ("layout", format!("{members} members in {groups} group(s); session timeout {} ms, progress timeout {} ms, heartbeat every {} ms", f.session_timeout_ms, f.progress_timeout_ms, f.heartbeat_interval_ms)),
            ("stalled", format!("{} members stopped progress: {} expelled for progress, {} for another reason", f.stalled, f.stalled_expelled_progress, f.stalled_expelled_other)),
            ],
            &[f.progress_expiry_over_timeout
                .row("progress expiry, over the timeout")],
        );
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
        let load = format!(
            "heartbeats every {} ms; stalls and pauses steered per member",
            interval.as_millis()
        );
        Ok(Outcome {
            notes: vec!["pause lengths count from the member's last heartbeat; the coordinator counts from its receipt, a loopback round trip later".to_owned()],
            ..done.outcome(load, f, text, checks)
        })
    }
}
