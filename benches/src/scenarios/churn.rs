//! `churn`: members killed abruptly at a fixed rate. Measures how soon the coordinator
//! notices (against the session timeout, or the lease timeout for a closed connection
//! with `--lease-timeout`), how soon every survivor holds its final assignment, and how
//! long each moved partition had no owner.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::common::{group_name, Check, CommonArgs, StandDownArgs};
use crate::driver::{Cmd, Load, Obs};
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup};
use crate::probe::spawn_poller;
use crate::stats::{fmt_count, median, summary, Percentiles};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum KillMode {
    /// Close the member's connection (it must be alone on it) and send nothing more (a
    /// crashed process: its sockets close). With `--lease-timeout`, the coordinator
    /// expels it when its lease runs out.
    Drop,
    /// Keep the connection open but send nothing more (a hung process); the expulsion
    /// push then arrives and dates the detection exactly.
    Silent,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct ChurnArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Kills per second.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) rate: f64,
    /// Number of kills; default: --duration times --rate.
    #[arg(long)]
    pub(crate) kills: Option<usize>,
    /// How a member is killed. `drop` needs one member per connection
    /// (`--members-per-conn 1`). Default: `drop` when every member is alone on its
    /// connection, otherwise `silent` (the report says so).
    #[arg(long, value_enum)]
    pub(crate) kill_mode: Option<KillMode>,
    /// How often the coordinator's group list is polled (the describe-based view).
    #[arg(long, value_parser = crate::common::duration, default_value = "1ms")]
    pub(crate) poll: Duration,
    /// Seed of the choice of victims.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Only members expelled while alive (false expulsions) confirm anything: a killed
    /// member never does.
    #[command(flatten)]
    pub(crate) stand_down: StandDownArgs,
}

#[derive(Debug)]
struct Kill {
    member: usize,
    group: usize,
    killed_at: Instant,
    last_heartbeat: Instant,
    orphans: Vec<u32>,
    generation_before: u32,
    expelled_listed: Option<Instant>,
    expelled_pushed: Option<Instant>,
    first_grant: Option<Instant>,
    resolved: Option<Instant>,
    stable_listed: Option<Instant>,
    generation_after: Option<u32>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChurnFigures {
    pub(crate) members: usize,
    pub(crate) groups: usize,
    pub(crate) partitions_per_group: u32,
    pub(crate) session_timeout_ms: u64,
    /// `--lease-timeout`; none: the session timeout.
    pub(crate) lease_timeout_ms: Option<u64>,
    /// The timeout detection is measured against: the lease for dropped connections
    /// with a lease timeout, otherwise the session timeout.
    pub(crate) detection_timeout_ms: u64,
    pub(crate) heartbeat_interval_ms: u64,
    pub(crate) kill_mode: KillMode,
    /// Members expelled while alive confirm it with a Relinquish.
    pub(crate) relinquish: bool,
    pub(crate) kills: usize,
    pub(crate) kills_resolved: usize,
    /// Last heartbeat to the member's disappearance from the group list.
    pub(crate) detection_listed: Percentiles,
    /// The same, less the detection timeout.
    pub(crate) detection_listed_over_timeout: Percentiles,
    /// Last heartbeat to the expulsion push, less the session timeout (silent kills
    /// only).
    pub(crate) detection_pushed_over_timeout: Percentiles,
    /// Last heartbeat to the first survivor assignment that takes one of its partitions.
    pub(crate) detection_first_grant: Percentiles,
    /// Expulsion to every survivor holding its final assignment (members' view).
    pub(crate) rebalance: Percentiles,
    /// Expulsion to the group listed stable again (coordinator's view).
    pub(crate) rebalance_listed: Percentiles,
    /// Kill to grant, for each of the killed members' partitions.
    pub(crate) orphan_unowned_from_kill: Percentiles,
    /// Expulsion to grant, for each of the killed members' partitions.
    pub(crate) orphan_unowned_from_expulsion: Percentiles,
    /// Release to grant, for partitions moved between survivors.
    pub(crate) survivor_moves_unowned: Percentiles,
    pub(crate) generations_per_kill_median: Option<f64>,
    pub(crate) generations_per_kill_max: Option<u32>,
    pub(crate) false_expulsions: usize,
}

fn durations_of(values: impl Iterator<Item = Option<Duration>>) -> Percentiles {
    let v: Vec<Duration> = values.flatten().collect();
    Percentiles::of_durations(&v)
}

impl Scenario for ChurnArgs {
    const NAME: &'static str = "churn";
    type Figures = ChurnFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        Duration::from_secs(120)
    }

    async fn run(&self) -> Result<Outcome<ChurnFigures>, String> {
        let common = &self.common;
        let members = common.members_or(1_000);
        let groups = common.groups_or(1);
        let partitions = common.partitions.unwrap_or(10_000);
        let session = common.session_timeout.unwrap_or(Duration::from_secs(1));
        let interval = common.interval.unwrap_or(Duration::from_millis(100));
        let duration = common.duration.unwrap_or(Duration::from_secs(10));
        if self.rate <= 0.0 {
            return Err("--rate must be above 0".into());
        }
        let kills_wanted = self
            .kills
            .unwrap_or_else(|| (duration.as_secs_f64() * self.rate).round() as usize)
            .min(members.saturating_sub(groups))
            .max(1);
        let load = Load::Periodic { period: interval };
        let setup = Setup {
            observe: true,
            relinquish: self.stand_down.enabled(),
            ..Setup::new(common, members, groups, partitions, session, load)
        };
        let per_conn = setup.per_conn;
        let mode = match self.kill_mode {
            Some(KillMode::Drop) if per_conn > 1 => {
                return Err(format!(
                    "--kill-mode drop closes the member's connection, so it needs one member per connection (--members-per-conn 1); with {per_conn} per connection use --kill-mode silent"
                ))
            }
            Some(mode) => mode,
            None if per_conn > 1 => KillMode::Silent,
            None => KillMode::Drop,
        };
        let lease = common.lease_timeout;
        // A closed connection is expelled when its lease runs out; an open but silent
        // one at its session deadline.
        let detection_timeout = match (mode, lease) {
            (KillMode::Drop, Some(lease)) => lease,
            _ => session,
        };
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let stop_poll = tokio_util::sync::CancellationToken::new();
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            // Settle: every member joined and the assignment stable.
            rig.settled(&mut tracker, &mut observations)
                .await
                .map_err(|_| "the group did not settle before the kills".to_owned())?;
            let mut batch = Vec::with_capacity(1024);
            // Every member has heartbeated before the first kill.
            tracker
                .absorb_beats(&mut observations, interval)
                .await;
            let mut snapshots = spawn_poller(
                rig.target.endpoint(),
                self.poll,
                duration + session + Duration::from_secs(60),
                stop_poll.clone(),
            );
            let mut last_snapshot = loop {
                match tokio::time::timeout(Duration::from_secs(10), snapshots.recv()).await {
                    Ok(Some(s)) if s.all_stable(groups) => break s,
                    Ok(Some(_)) => {}
                    _ => return Err("the group list never showed the groups stable".to_owned()),
                }
            };
            let mut victims: Vec<usize> = (0..members).collect();
            victims.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(self.seed));
            let mut victims = victims.into_iter();
            let mut killed: Vec<Kill> = Vec::new();
            let mut killed_set = HashSet::new();
            rig.phase("killing");
            let start = Instant::now();
            let period = Duration::from_secs_f64(1.0 / self.rate);
            let end_limit = start + period * kills_wanted as u32 + session + Duration::from_secs(10);
            loop {
                let now = Instant::now();
                let all_done = killed.len() == kills_wanted
                    && killed.iter().all(|k| k.resolved.is_some() && k.stable_listed.is_some());
                if all_done || now > end_limit {
                    break;
                }
                let next_kill = (killed.len() < kills_wanted).then(|| start + period * killed.len() as u32);
                let sleep_to = next_kill.unwrap_or(now + Duration::from_millis(50)).max(now);
                tokio::select! {
                    biased;
                    n = observations.recv_many(&mut batch, 1024) => {
                        if n == 0 { break; }
                        for obs in batch.drain(..) {
                            if let Obs::Expelled { member, at, .. } = &obs {
                                if let Some(k) = killed.iter_mut().find(|k| k.member == *member) {
                                    k.expelled_pushed.get_or_insert(*at);
                                }
                            }
                            let assigned_at = match &obs { Obs::Assigned { at, .. } => Some(*at), _ => None };
                            let Some(g) = tracker.apply(&obs) else { continue };
                            let Some(at) = assigned_at else { continue };
                            // Orphans still without an owner, per unresolved kill of the group.
                            let open: Vec<(usize, usize)> = killed
                                .iter()
                                .enumerate()
                                .filter(|(_, k)| k.group == g && k.resolved.is_none())
                                .map(|(i, k)| (i, k.orphans.iter().filter(|p| !tracker.is_owned(g, **p)).count()))
                                .collect();
                            let total: usize = open.iter().map(|(_, n)| n).sum();
                            for &(i, remaining) in &open {
                                let k = &mut killed[i];
                                if remaining < k.orphans.len() {
                                    k.first_grant.get_or_insert(at);
                                }
                                if remaining == 0 && tracker.settled_but(g, total) {
                                    k.resolved = Some(at);
                                }
                            }
                        }
                    }
                    snap = snapshots.recv() => {
                        let Some(snap) = snap else { continue };
                        for g in 0..groups {
                            let name = group_name(g);
                            let before = last_snapshot.groups.iter().find(|l| l.group == name).map_or(0, |l| l.members);
                            let Some(now_listed) = snap.groups.iter().find(|l| l.group == name) else { continue };
                            let gone = before.saturating_sub(now_listed.members) as usize;
                            let mut waiting: Vec<&mut Kill> = killed
                                .iter_mut()
                                .filter(|k| k.group == g && k.expelled_listed.is_none())
                                .collect();
                            waiting.sort_by_key(|k| k.last_heartbeat);
                            for k in waiting.into_iter().take(gone) {
                                k.expelled_listed = Some(snap.at);
                            }
                            if now_listed.state == rollcall_protocol::GroupState::Stable {
                                for k in killed.iter_mut().filter(|k| k.group == g && k.expelled_listed.is_some() && k.stable_listed.is_none()) {
                                    if now_listed.generation > k.generation_before {
                                        k.stable_listed = Some(snap.at);
                                        k.generation_after = Some(now_listed.generation);
                                    }
                                }
                            }
                        }
                        last_snapshot = snap;
                    }
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(sleep_to)) => {
                        if next_kill.is_some_and(|t| Instant::now() >= t) {
                            let Some(victim) = victims.by_ref().find(|v| tracker.live[*v] && !killed_set.contains(v)) else { continue };
                            let (reply, answer) = oneshot::channel();
                            let cmd = Cmd::Kill { member: victim, close: mode == KillMode::Drop, reply };
                            rig.driver.command(cmd);
                            let last = answer.await.ok().flatten();
                            let killed_at = Instant::now();
                            let g = tracker.group_of(victim);
                            let orphans = tracker.owned[victim].clone();
                            tracker.take_out(victim, killed_at);
                            killed_set.insert(victim);
                            let generation_before = last_snapshot.generation(&group_name(g)).unwrap_or(0);
                            killed.push(Kill {
                                member: victim,
                                group: g,
                                killed_at,
                                last_heartbeat: last.unwrap_or(killed_at),
                                orphans,
                                generation_before,
                                expelled_listed: None,
                                expelled_pushed: None,
                                first_grant: None,
                                resolved: None,
                                stable_listed: None,
                                generation_after: None,
                            });
                        }
                    }
                }
            }
            Ok::<_, String>((killed, tracker, killed_set))
        }
        .await;
        stop_poll.cancel();
        let done = rig.finish().await;
        let (killed, tracker, killed_set) = outcome?;

        let over = |d: Duration| d.saturating_sub(detection_timeout);
        let over_session = |d: Duration| d.saturating_sub(session);
        let since = |a: Option<Instant>, b: Instant| a.map(|a| a.saturating_duration_since(b));
        let trigger = |k: &Kill| k.expelled_pushed.or(k.expelled_listed);
        let mut orphan_from_kill = Vec::new();
        let mut orphan_from_expulsion = Vec::new();
        let mut orphan_keys = HashSet::new();
        for k in &killed {
            // A killed member's partitions lose their owner at the very instant of its kill.
            for gap in tracker.gaps.iter().filter(|gap| {
                gap.group == k.group
                    && gap.since == k.killed_at
                    && k.orphans.binary_search(&gap.partition).is_ok()
            }) {
                if orphan_keys.insert((gap.group, gap.partition, gap.since)) {
                    orphan_from_kill.push(gap.granted - gap.since);
                    if let Some(t) = trigger(k) {
                        orphan_from_expulsion.push(gap.granted.saturating_duration_since(t));
                    }
                }
            }
        }
        let first_kill = killed.iter().map(|k| k.killed_at).min();
        let survivor_moves: Vec<Duration> = tracker
            .gaps
            .iter()
            .filter(|g| {
                first_kill.is_some_and(|t| g.since >= t)
                    && !orphan_keys.contains(&(g.group, g.partition, g.since))
            })
            .map(|g| g.granted - g.since)
            .collect();
        let false_expulsions = tracker
            .expelled
            .iter()
            .filter(|(m, _, _)| !killed_set.contains(m))
            .count()
            + tracker
                .heartbeat_errors
                .iter()
                .filter(|(m, _, _)| !killed_set.contains(m))
                .count();
        let generations: Vec<u32> = killed
            .iter()
            .filter_map(|k| {
                k.generation_after
                    .map(|g| g.saturating_sub(k.generation_before))
            })
            .collect();
        let f = ChurnFigures {
            members,
            groups,
            partitions_per_group: partitions,
            session_timeout_ms: session.as_millis() as u64,
            lease_timeout_ms: lease.map(|l| l.as_millis() as u64),
            detection_timeout_ms: detection_timeout.as_millis() as u64,
            heartbeat_interval_ms: interval.as_millis() as u64,
            kill_mode: mode,
            relinquish: self.stand_down.enabled(),
            kills: killed.len(),
            kills_resolved: killed.iter().filter(|k| k.resolved.is_some()).count(),
            detection_listed: durations_of(
                killed
                    .iter()
                    .map(|k| since(k.expelled_listed, k.last_heartbeat)),
            ),
            detection_listed_over_timeout: durations_of(
                killed
                    .iter()
                    .map(|k| since(k.expelled_listed, k.last_heartbeat).map(over)),
            ),
            detection_pushed_over_timeout: durations_of(
                killed
                    .iter()
                    .map(|k| since(k.expelled_pushed, k.last_heartbeat).map(over_session)),
            ),
            detection_first_grant: durations_of(
                killed
                    .iter()
                    .map(|k| since(k.first_grant, k.last_heartbeat)),
            ),
            rebalance: durations_of(
                killed
                    .iter()
                    .map(|k| trigger(k).and_then(|t| since(k.resolved, t))),
            ),
            rebalance_listed: durations_of(
                killed
                    .iter()
                    .map(|k| trigger(k).and_then(|t| since(k.stable_listed, t))),
            ),
            orphan_unowned_from_kill: Percentiles::of_durations(&orphan_from_kill),
            orphan_unowned_from_expulsion: Percentiles::of_durations(&orphan_from_expulsion),
            survivor_moves_unowned: Percentiles::of_durations(&survivor_moves),
            generations_per_kill_median: median(
                &mut generations
                    .iter()
                    .map(|g| f64::from(*g))
                    .collect::<Vec<_>>(),
            ),
            generations_per_kill_max: generations.iter().copied().max(),
            false_expulsions,
        };
        let mut rows = vec![
            f.detection_listed
                .row("detection: last heartbeat to gone from group list"),
            f.detection_listed_over_timeout
                .row(if detection_timeout == session {
                    "  same, less the session timeout"
                } else {
                    "  same, less the lease timeout"
                }),
        ];
        if mode == KillMode::Silent {
            rows.push(
                f.detection_pushed_over_timeout
                    .row("  expulsion push, less the session timeout"),
            );
        }
        rows.extend([
            f.detection_first_grant
                .row("last heartbeat to first survivor grant"),
            f.rebalance
                .row("rebalance: expulsion to all survivors final"),
            f.rebalance_listed
                .row("rebalance: expulsion to group listed stable"),
            f.orphan_unowned_from_kill
                .row("moved partition unowned, from kill"),
            f.orphan_unowned_from_expulsion
                .row("moved partition unowned, from expulsion"),
            f.survivor_moves_unowned
                .row("survivor-to-survivor move unowned"),
        ]);
        let lease_text = f
            .lease_timeout_ms
            .map_or(String::new(), |l| format!(", lease timeout {l} ms"));
        let text = summary(
            &[
            ("layout", format!(
                "{} members in {} group(s), {} partitions each; session timeout {} ms{lease_text}, heartbeat every {} ms",
                fmt_count(members as f64), groups, fmt_count(f64::from(partitions)), f.session_timeout_ms, f.heartbeat_interval_ms)),
            ("kills", format!(
                "{} at {}/s ({:?} mode), {} resolved; generations per kill: median {}, max {}",
                f.kills, self.rate, mode, f.kills_resolved,
                f.generations_per_kill_median.map_or("?".into(), |v| format!("{v:.1}")),
                f.generations_per_kill_max.map_or("?".into(), |v| v.to_string()))),
            ("false expulsions", f.false_expulsions.to_string()),
            ],
            &rows,
        );
        let detection = if mode == KillMode::Silent {
            &f.detection_pushed_over_timeout
        } else {
            &f.detection_listed_over_timeout
        };
        let mut checks = vec![Check::new(
            if detection_timeout == session {
                "detection within session timeout + 10 ms (p99)"
            } else {
                "detection within lease timeout + 10 ms (p99)"
            },
            "<= 10 ms over",
            format!("{:.1} ms over", detection.p99_ms),
            detection.count > 0 && detection.p99_ms <= 10.0,
        )];
        if let (KillMode::Drop, Some(lease)) = (mode, lease) {
            let limit = lease.as_secs_f64() * 1000.0 + 200.0;
            let grants = &f.orphan_unowned_from_kill;
            checks.push(Check::new(
                "orphaned partition granted within lease + 200 ms of the kill (p99)",
                format!("<= {limit:.0} ms"),
                format!("{:.1} ms", grants.p99_ms),
                grants.count > 0 && grants.p99_ms <= limit,
            ));
        }
        checks.extend([
            Check::new(
                "every survivor holds its final assignment after an expulsion (p99)",
                "<= 50 ms",
                format!("{:.1} ms", f.rebalance.p99_ms),
                f.rebalance.count > 0 && f.rebalance.p99_ms <= 50.0,
            ),
            Check::new(
                "every kill resolved",
                f.kills.to_string(),
                f.kills_resolved.to_string(),
                f.kills_resolved == f.kills,
            ),
            Check::new(
                "false expulsions",
                "0",
                f.false_expulsions.to_string(),
                f.false_expulsions == 0,
            ),
        ]);
        let mut notes = vec![
            "the rebalance after an expulsion waits the coordinator's coalescing window (rebalance_coalesce, 20 ms by default) before it is computed".to_owned(),
            format!("the group list is polled every {} ms, so the listed times are late by up to that plus a round trip", self.poll.as_secs_f64() * 1000.0),
        ];
        if mode == KillMode::Silent && self.kill_mode.is_none() {
            notes.push(format!("{per_conn} members per connection: the kills are silent (the connection stays open for the others); --kill-mode drop needs --members-per-conn 1"));
        }
        let load = format!(
            "heartbeats every {} ms; revocations acknowledged at once",
            interval.as_millis()
        );
        Ok(Outcome {
            notes,
            ..done.outcome(load, f, text, checks)
        })
    }
}
