//! `stall`: members whose heartbeats continue but whose progress counter stops (they
//! must be expelled soon after the progress timeout), and members that pause entirely
//! for a while (they must be expelled exactly when the pause exceeds the session
//! timeout). A stalled member's process confirms its expulsion with a Relinquish
//! (unless `--no-relinquish`): its partitions must then move at once; without it they
//! wait for its lease (its last frame plus the lease timeout).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use clap::Args;
use rollcall_protocol::ExpelReason;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::common::{Check, CommonArgs, StandDownArgs};
use crate::driver::{Cmd, Load, Obs};
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup};
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
    #[command(flatten)]
    pub(crate) stand_down: StandDownArgs,
}

/// A stalled member's expulsion as its process saw it.
#[derive(Debug)]
struct StallEnd {
    expelled_at: Instant,
    /// What it owned when the expulsion reached it.
    owned: Vec<u32>,
    last_answered: Option<Instant>,
    relinquished_at: Option<Instant>,
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
    /// `--lease-timeout`; none: the session timeout.
    pub(crate) lease_timeout_ms: Option<u64>,
    /// Expelled members confirm it with a Relinquish.
    pub(crate) relinquish: bool,
    pub(crate) relinquish_sent: u64,
    pub(crate) relinquish_refused: u64,
    /// Partitions the stalled members owned when their expulsion reached them, and how
    /// many of those were granted to another member before the run ended.
    pub(crate) stalled_partitions: usize,
    pub(crate) stalled_partitions_granted: usize,
    /// Relinquish sent to the first grant to another member, per partition of a stalled
    /// member.
    pub(crate) relinquish_to_grant: Percentiles,
    /// The expulsion push to that grant, per partition.
    pub(crate) expulsion_to_grant: Percentiles,
    /// The member's last heartbeat answered as a member to that grant, per partition:
    /// without Relinquish at least the lease.
    pub(crate) last_answered_to_grant: Percentiles,
    /// Partitions granted before their member's last answered heartbeat plus the lease,
    /// without Relinquish (a hold released early).
    pub(crate) granted_before_lease: usize,
    pub(crate) pauses: Vec<PauseRow>,
    pub(crate) false_expulsions: usize,
    pub(crate) missed_expulsions: usize,
}

impl Scenario for StallArgs {
    const NAME: &'static str = "stall";
    type Figures = StallFigures;

    fn options(&self) -> &dyn RunOptions {
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
        let relinquish = self.stand_down.enabled();
        let lease = common.lease_timeout;
        let setup = Setup {
            progress_timeout: self.progress_timeout,
            observe: true,
            relinquish,
            ..Setup::new(common, members, groups, partitions, session, load)
        };
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            rig.settled(&mut tracker, &mut observations).await?;
            // Every member has heartbeated (and reported progress) before it is steered.
            tracker.absorb_beats(&mut observations, interval).await;

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
            let mut ends: HashMap<usize, StallEnd> = HashMap::new();
            let mut watch = |t: &Tracker, obs: &Obs| match obs {
                Obs::Expelled {
                    member,
                    at,
                    last_answered,
                    ..
                } if stalled.contains(member) => {
                    ends.entry(*member).or_insert_with(|| StallEnd {
                        expelled_at: *at,
                        owned: t.owned[*member].clone(),
                        last_answered: *last_answered,
                        relinquished_at: None,
                    });
                }
                Obs::Relinquished { member, at } => {
                    if let Some(end) = ends.get_mut(member) {
                        end.relinquished_at.get_or_insert(*at);
                    }
                }
                _ => {}
            };
            let limit = Instant::now() + self.progress_timeout + Duration::from_secs(5);
            tracker
                .absorb_watching(&mut observations, limit, &mut watch, |t| {
                    stalled
                        .iter()
                        .all(|m| t.expelled.iter().any(|(e, _, _)| e == m))
                })
                .await;
            // Let the group settle again before the pauses (without Relinquish, the
            // stalled members' partitions wait for their lease).
            tracker
                .absorb_watching(
                    &mut observations,
                    Instant::now() + Duration::from_secs(10) + lease.unwrap_or_default(),
                    &mut watch,
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
            Ok::<_, String>((tracker, last_progress, paused, ends))
        }
        .await;
        let done = rig.finish().await;
        let (tracker, last_progress, paused, ends) = outcome?;

        // Each stalled member's partitions: from its stand-down to their first grant.
        let held_for = lease.unwrap_or(session);
        let mut stalled_partitions = 0;
        let mut granted = 0;
        let mut granted_before_lease = 0;
        let (mut from_relinquish, mut from_expulsion, mut from_last) =
            (Vec::new(), Vec::new(), Vec::new());
        for (m, end) in &ends {
            let g = tracker.group_of(*m);
            stalled_partitions += end.owned.len();
            for gap in tracker.gaps.iter().filter(|gap| {
                gap.group == g
                    && gap.since == end.expelled_at
                    && end.owned.binary_search(&gap.partition).is_ok()
            }) {
                granted += 1;
                from_expulsion.push(gap.granted.saturating_duration_since(end.expelled_at));
                if let Some(t) = end.relinquished_at {
                    from_relinquish.push(gap.granted.saturating_duration_since(t));
                }
                if let Some(t) = end.last_answered {
                    let d = gap.granted.saturating_duration_since(t);
                    from_last.push(d);
                    if !relinquish && d < held_for {
                        granted_before_lease += 1;
                    }
                }
            }
        }
        let c = &done.shared.counters;
        let relinquish_sent = crate::driver::Counters::get(&c.relinquish_sent);
        let relinquish_refused = crate::driver::Counters::get(&c.relinquish_err);

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
            lease_timeout_ms: lease.map(|l| l.as_millis() as u64),
            relinquish,
            relinquish_sent,
            relinquish_refused,
            stalled_partitions,
            stalled_partitions_granted: granted,
            relinquish_to_grant: Percentiles::of_durations(&from_relinquish),
            expulsion_to_grant: Percentiles::of_durations(&from_expulsion),
            last_answered_to_grant: Percentiles::of_durations(&from_last),
            granted_before_lease,
            pauses: rows,
            false_expulsions,
            missed_expulsions: missed,
        };
        let lease_text = f
            .lease_timeout_ms
            .map_or(String::new(), |l| format!(", lease timeout {l} ms"));
        let stand_down = if relinquish {
            format!(
                "confirmed by Relinquish at once ({} sent, {} refused); {} of {} partitions of the stalled members granted again",
                f.relinquish_sent, f.relinquish_refused, f.stalled_partitions_granted, f.stalled_partitions
            )
        } else {
            format!(
                "not confirmed (--no-relinquish): the partitions wait for the lease; {} of {} granted again, {} before the last answered heartbeat + {} ms",
                f.stalled_partitions_granted,
                f.stalled_partitions,
                f.granted_before_lease,
                held_for.as_millis()
            )
        };
        let mut grant_rows = vec![f
            .progress_expiry_over_timeout
            .row("progress expiry, over the timeout")];
        if relinquish {
            grant_rows.push(
                f.relinquish_to_grant
                    .row("stalled member's partition: Relinquish sent to grant"),
            );
        }
        grant_rows.extend([
            f.expulsion_to_grant
                .row("stalled member's partition: expulsion push to grant"),
            f.last_answered_to_grant
                .row("stalled member's partition: last answered heartbeat to grant"),
        ]);
        let mut text = summary(
            &[
            ("layout", format!("{members} members in {groups} group(s); session timeout {} ms{lease_text}, progress timeout {} ms, heartbeat every {} ms", f.session_timeout_ms, f.progress_timeout_ms, f.heartbeat_interval_ms)),
            ("stalled", format!("{} members stopped progress: {} expelled for progress, {} for another reason", f.stalled, f.stalled_expelled_progress, f.stalled_expelled_other)),
            ("stand-down", stand_down),
            ],
            &grant_rows,
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
        let mut checks = vec![
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
        if relinquish {
            let r = &f.relinquish_to_grant;
            checks.push(Check::new(
                "stalled member's partitions granted after its Relinquish (p99)",
                "<= 50 ms",
                format!(
                    "{:.1} ms ({} of {} partitions)",
                    r.p99_ms, r.count, f.stalled_partitions
                ),
                r.count > 0 && r.count == f.stalled_partitions as u64 && r.p99_ms <= 50.0,
            ));
        } else {
            checks.push(Check::new(
                "stalled member's partitions granted before its last answered heartbeat + the lease",
                "0",
                f.granted_before_lease.to_string(),
                f.granted_before_lease == 0,
            ));
        }
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
