//! `pause`: the coordinator itself stopped (SIGSTOP) for longer than the session
//! timeout, then resumed (SIGCONT), a few times over, while its members heartbeat on.
//! Target: no live member expelled after a resume, and a member that really died during
//! the stop (it sends nothing more, its connection left open) expelled within one session
//! timeout of the resume. Needs a coordinator process of its own: `--spawn`, or `--addr`
//! with `--pid`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::common::{Check, CommonArgs};
use crate::driver::{Cmd, Counters, Load, Shared};
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup};
use crate::stats::{fmt_count, fmt_ms, summary, table, Percentiles};
use crate::tracker::Tracker;

#[derive(Debug, Clone, Args)]
pub(crate) struct PauseArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Members that die right after the first SIGSTOP: they send nothing more and leave
    /// their connections open (a hung process). Spread over the groups.
    #[arg(long, default_value_t = 10)]
    pub(crate) die: usize,
    /// How long the coordinator stays stopped each time; default: 3 x the session
    /// timeout.
    #[arg(long, value_parser = crate::common::duration)]
    pub(crate) stop: Option<Duration>,
    /// Stops, one after another (members die in the first only).
    #[arg(long, default_value_t = 3)]
    pub(crate) rounds: usize,
}

impl PauseArgs {
    fn session(&self) -> Duration {
        self.common
            .session_timeout
            .unwrap_or(Duration::from_secs(3))
    }

    /// The client library's default: a fifth of the session timeout.
    fn interval(&self) -> Duration {
        self.common.interval.unwrap_or(self.session() / 5)
    }

    fn stop(&self) -> Duration {
        self.stop.unwrap_or(self.session() * 3)
    }

    /// How long expulsions are watched for after each resume, at least.
    fn watch(&self) -> Duration {
        self.session() * 2
    }

    /// How long after a resume a dead member still in is waited for, at most.
    fn watch_limit(&self) -> Duration {
        self.session() * 4
    }

    /// How long the groups are given to settle again after each round.
    fn settle_limit(&self) -> Duration {
        Duration::from_secs(10) + self.session()
    }
}

/// A member killed during a stop.
#[derive(Debug)]
struct Victim {
    member: usize,
    /// The send time of its last frame.
    last_sent: Option<Instant>,
}

/// One stop as it was run.
#[derive(Debug)]
struct Round {
    /// Just before the SIGSTOP was sent.
    stop_sent: Instant,
    /// When `kill -CONT` returned: the coordinator runs again no later.
    resumed: Instant,
    dead: Vec<Victim>,
    settled: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct PauseRound {
    pub(crate) round: usize,
    /// SIGSTOP sent to `kill -CONT` returned.
    pub(crate) stopped_ms: f64,
    pub(crate) died: usize,
    /// Live members expelled (an Expelled push, or a heartbeat refused) from this stop
    /// to the next.
    pub(crate) live_expelled: usize,
    pub(crate) dead_expelled: usize,
    /// Dead members expelled within one session timeout of the SIGCONT.
    pub(crate) dead_expelled_in_time: usize,
    /// SIGCONT to each dead member's Expelled push.
    pub(crate) dead_from_resume: Percentiles,
    /// Each dead member's last frame to the SIGSTOP.
    pub(crate) dead_silent_before_stop: Percentiles,
    /// Every group settled again before the next round.
    pub(crate) settled: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct PauseFigures {
    pub(crate) members: usize,
    pub(crate) groups: usize,
    pub(crate) partitions_per_group: u32,
    pub(crate) session_timeout_ms: u64,
    pub(crate) heartbeat_interval_ms: u64,
    /// `--stop`.
    pub(crate) stop_ms: u64,
    pub(crate) died: usize,
    /// Live members expelled after a resume, every round together.
    pub(crate) live_expelled: usize,
    /// Live members expelled before the first stop (while settling).
    pub(crate) live_expelled_before_first_stop: usize,
    pub(crate) dead_expelled: usize,
    pub(crate) dead_expelled_in_time: usize,
    /// SIGCONT to each dead member's Expelled push, every round together.
    pub(crate) dead_from_resume: Percentiles,
    pub(crate) connections_lost: u64,
    pub(crate) rounds: Vec<PauseRound>,
}

/// `count` members to kill at a given instant, spread over the groups: in each group
/// the live members whose heartbeat slots are farthest from that instant first, so that
/// each one's last heartbeat was read before the stop and none is sent during it (a
/// heartbeat sent during the stop is read only on resume, and restarts its session from
/// there). `until_next` tells the time from the instant to a member's next slot. Each
/// group keeps at least one live member.
fn choose_victims(
    tracker: &Tracker,
    period: Duration,
    count: usize,
    until_next: impl Fn(usize) -> Duration,
) -> Vec<usize> {
    let mut by_group: Vec<Vec<(Duration, usize)>> = vec![Vec::new(); tracker.groups()];
    for (m, live) in tracker.live.iter().enumerate() {
        if *live {
            let after = until_next(m).min(period);
            let before = period - after;
            by_group[tracker.group_of(m)].push((before.min(after), m));
        }
    }
    for candidates in &mut by_group {
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    }
    let mut chosen = Vec::with_capacity(count);
    let mut depth = 0;
    while chosen.len() < count {
        let before = chosen.len();
        for candidates in &by_group {
            if chosen.len() == count {
                break;
            }
            if depth + 1 < candidates.len() {
                chosen.push(candidates[depth].1);
            }
        }
        if chosen.len() == before {
            break;
        }
        depth += 1;
    }
    chosen
}

impl Scenario for PauseArgs {
    const NAME: &'static str = "pause";
    type Figures = PauseFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        let round = self.stop()
            + self.watch_limit()
            + self.settle_limit()
            + self.interval() * 2
            + Duration::from_secs(1);
        round * u32::try_from(self.rounds).unwrap_or(u32::MAX)
    }

    async fn run(&self) -> Result<Outcome<PauseFigures>, String> {
        let common = &self.common;
        if !common.spawn && common.pid.is_none() {
            return Err(
                "the pause scenario stops the coordinator's process (SIGSTOP): use --spawn, or --addr with --pid"
                    .to_owned(),
            );
        }
        let members = common.members_or(1_000);
        let groups = common.groups_or(10);
        let partitions = common.partitions_or_per_member(members, groups, 1);
        let session = self.session();
        let interval = self.interval();
        let stop = self.stop();
        if interval.is_zero() || interval >= session {
            return Err(format!(
                "--interval {} ms must be above zero and below the session timeout ({} ms)",
                interval.as_millis(),
                session.as_millis()
            ));
        }
        if stop.is_zero() || self.rounds == 0 {
            return Err("--stop and --rounds must be above zero".to_owned());
        }
        if self.die + groups > members {
            return Err(format!(
                "--die {} would leave a group without a live member: at most {} with {members} members in {groups} groups",
                self.die,
                members.saturating_sub(groups)
            ));
        }
        let load = Load::Periodic { period: interval };
        let setup = Setup {
            observe: true,
            ..Setup::new(common, members, groups, partitions, session, load)
        };
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            rig.settled(&mut tracker, &mut observations).await?;
            // Every member has heartbeated before the first stop.
            tracker.absorb_beats(&mut observations, interval).await;
            let mut rounds = Vec::with_capacity(self.rounds);
            for r in 0..self.rounds {
                let label = format!("round {}/{}", r + 1, self.rounds);
                let count = if r == 0 { self.die } else { 0 };
                let at = Instant::now() + Duration::from_millis(20);
                let shared: &Shared = &rig.shared;
                let victims = choose_victims(&tracker, interval, count, |m| {
                    shared
                        .slot_at_or_after(m, interval, at)
                        .saturating_duration_since(at)
                });
                tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                rig.phase(&format!("{label}: coordinator stopped"));
                let stop_sent = Instant::now();
                let frozen = rig.target.freeze()?;
                // Silent deaths: nothing more sent, the connection left open.
                let answers: Vec<_> = victims
                    .iter()
                    .map(|&member| {
                        let (reply, answer) = oneshot::channel();
                        rig.driver.command(Cmd::Kill {
                            member,
                            close: false,
                            reply,
                        });
                        (member, answer)
                    })
                    .collect();
                let mut dead = Vec::with_capacity(answers.len());
                for (member, answer) in answers {
                    let last_sent = answer.await.ok().flatten();
                    tracker.take_out(member, Instant::now());
                    dead.push(Victim { member, last_sent });
                }
                tokio::time::sleep_until(tokio::time::Instant::from_std(stop_sent + stop)).await;
                frozen.thaw()?;
                let resumed = Instant::now();
                rig.phase(&format!("{label}: resumed"));
                let watched = resumed + self.watch();
                tracker
                    .absorb(&mut observations, resumed + self.watch_limit(), |t| {
                        Instant::now() >= watched
                            && dead
                                .iter()
                                .all(|v| t.expelled.iter().any(|(m, _, _)| *m == v.member))
                    })
                    .await;
                rig.phase(&format!("{label}: settling"));
                tracker
                    .absorb(
                        &mut observations,
                        Instant::now() + self.settle_limit(),
                        Tracker::all_settled,
                    )
                    .await;
                let settled = tracker.all_settled();
                // Every live member heard from again before the next stop.
                tracker.absorb_beats(&mut observations, interval).await;
                rounds.push(Round {
                    stop_sent,
                    resumed,
                    dead,
                    settled,
                });
            }
            Ok::<_, String>((tracker, rounds))
        }
        .await;
        let done = rig.finish().await;
        let (tracker, rounds) = outcome?;

        let dead_set: HashSet<usize> = rounds
            .iter()
            .flat_map(|r| r.dead.iter().map(|v| v.member))
            .collect();
        // Live members in trouble (expelled, or a heartbeat refused), each once, at the
        // first sign of it.
        let mut troubled: HashMap<usize, Instant> = HashMap::new();
        let signs = tracker
            .expelled
            .iter()
            .map(|(m, at, _)| (*m, *at))
            .chain(tracker.heartbeat_errors.iter().map(|(m, at, _)| (*m, *at)));
        for (m, at) in signs.filter(|(m, _)| !dead_set.contains(m)) {
            troubled
                .entry(m)
                .and_modify(|t| *t = (*t).min(at))
                .or_insert(at);
        }
        let round_of = |t: Instant| rounds.iter().rposition(|r| r.stop_sent <= t);
        let mut expelled_at: HashMap<usize, Instant> = HashMap::new();
        for (m, at, _) in &tracker.expelled {
            expelled_at.entry(*m).or_insert(*at);
        }
        let mut all_from_resume = Vec::new();
        let mut round_rows = Vec::with_capacity(rounds.len());
        for (i, r) in rounds.iter().enumerate() {
            let mut from_resume = Vec::new();
            let mut silent = Vec::new();
            for v in &r.dead {
                if let Some(at) = expelled_at.get(&v.member) {
                    from_resume.push(at.saturating_duration_since(r.resumed));
                }
                if let Some(last) = v.last_sent {
                    silent.push(r.stop_sent.saturating_duration_since(last));
                }
            }
            all_from_resume.extend_from_slice(&from_resume);
            round_rows.push(PauseRound {
                round: i + 1,
                stopped_ms: r.resumed.duration_since(r.stop_sent).as_secs_f64() * 1000.0,
                died: r.dead.len(),
                live_expelled: troubled
                    .values()
                    .filter(|t| round_of(**t) == Some(i))
                    .count(),
                dead_expelled: from_resume.len(),
                dead_expelled_in_time: from_resume.iter().filter(|d| **d <= session).count(),
                dead_from_resume: Percentiles::of_durations(&from_resume),
                dead_silent_before_stop: Percentiles::of_durations(&silent),
                settled: r.settled,
            });
        }
        let f = PauseFigures {
            members,
            groups,
            partitions_per_group: partitions,
            session_timeout_ms: session.as_millis() as u64,
            heartbeat_interval_ms: interval.as_millis() as u64,
            stop_ms: stop.as_millis() as u64,
            died: dead_set.len(),
            live_expelled: round_rows.iter().map(|r| r.live_expelled).sum(),
            live_expelled_before_first_stop: troubled
                .values()
                .filter(|t| round_of(**t).is_none())
                .count(),
            dead_expelled: round_rows.iter().map(|r| r.dead_expelled).sum(),
            dead_expelled_in_time: round_rows.iter().map(|r| r.dead_expelled_in_time).sum(),
            dead_from_resume: Percentiles::of_durations(&all_from_resume),
            connections_lost: Counters::get(&done.shared.counters.conns_lost),
            rounds: round_rows,
        };

        let mut latencies = Vec::new();
        if f.died > 0 {
            latencies.push(
                f.dead_from_resume
                    .row("dead member: SIGCONT to Expelled push"),
            );
            if let Some(first) = f.rounds.first() {
                latencies.push(
                    first
                        .dead_silent_before_stop
                        .row("dead member: last frame to SIGSTOP"),
                );
            }
        }
        let mut text = summary(
            &[
                (
                    "layout",
                    format!(
                        "{} members in {} groups ({} partitions each); session timeout {} ms, heartbeat every {} ms",
                        fmt_count(members as f64),
                        groups,
                        fmt_count(f64::from(partitions)),
                        f.session_timeout_ms,
                        f.heartbeat_interval_ms
                    ),
                ),
                (
                    "stops",
                    format!(
                        "{} x SIGSTOP for {} ms, then SIGCONT; {} members died right after the first SIGSTOP",
                        f.rounds.len(),
                        f.stop_ms,
                        f.died
                    ),
                ),
                (
                    "live members expelled",
                    format!(
                        "{} after a resume, {} before the first stop; connections closed by the coordinator {}",
                        f.live_expelled, f.live_expelled_before_first_stop, f.connections_lost
                    ),
                ),
                (
                    "dead members expelled",
                    format!(
                        "{} of {}, {} within one session timeout ({} ms) of SIGCONT",
                        f.dead_expelled, f.died, f.dead_expelled_in_time, f.session_timeout_ms
                    ),
                ),
            ],
            &latencies,
        );
        text.push('\n');
        let rows: Vec<Vec<String>> = f
            .rounds
            .iter()
            .map(|r| {
                let dead_ms = |ms: f64| {
                    if r.dead_from_resume.count > 0 {
                        fmt_ms(ms)
                    } else {
                        "-".to_owned()
                    }
                };
                vec![
                    r.round.to_string(),
                    fmt_count(r.stopped_ms),
                    r.died.to_string(),
                    r.live_expelled.to_string(),
                    format!("{}/{}", r.dead_expelled, r.died),
                    format!("{}/{}", r.dead_expelled_in_time, r.died),
                    dead_ms(r.dead_from_resume.p50_ms),
                    dead_ms(r.dead_from_resume.max_ms),
                    if r.settled { "yes" } else { "no" }.to_owned(),
                ]
            })
            .collect();
        text.push_str(&table(
            &[
                "round",
                "stopped ms",
                "died",
                "live expelled",
                "dead expelled",
                "within session",
                "SIGCONT to expelled p50 ms",
                "max ms",
                "settled after",
            ],
            &rows,
        ));

        let mut checks = vec![Check::new(
            "live members expelled after a resume (every round)",
            "0",
            format!(
                "{} ({} before the first stop)",
                f.live_expelled, f.live_expelled_before_first_stop
            ),
            f.live_expelled == 0 && f.live_expelled_before_first_stop == 0,
        )];
        if f.died > 0 {
            checks.push(Check::new(
                "members dead during the stop expelled within one session timeout of SIGCONT",
                format!("all {}, max <= {} ms", f.died, f.session_timeout_ms),
                format!(
                    "{} of {}, max {} ms",
                    f.dead_expelled_in_time,
                    f.died,
                    if f.dead_from_resume.count > 0 {
                        fmt_ms(f.dead_from_resume.max_ms)
                    } else {
                        "-".to_owned()
                    }
                ),
                f.dead_expelled_in_time == f.died,
            ));
        }
        checks.push(Check::new(
            "connections closed by the coordinator",
            "0",
            f.connections_lost.to_string(),
            f.connections_lost == 0,
        ));
        let load = format!(
            "heartbeats every {} ms, sent on through the stops (they queue in the sockets); the dead send nothing more and keep their connections open",
            interval.as_millis()
        );
        Ok(Outcome {
            notes: vec![
                "times count from the return of `kill -CONT`: the coordinator runs again no later".to_owned(),
                "the dead are, in each group, the members whose heartbeat slots were farthest from the SIGSTOP: each one's last frame was read before the stop (a frame sent during the stop is read only on resume, and restarts the member's session from there)".to_owned(),
            ],
            ..done.outcome(load, f, text, checks)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victims_are_spread_over_groups_and_far_from_their_slots() {
        // 40 members in 4 groups beating every 400 ms, member i at 10 i ms into each
        // period; the stop comes 34 ms into one.
        let tracker = Tracker::new(40, 4, 10);
        let period = Duration::from_millis(400);
        let until_next = |m: usize| Duration::from_millis((10 * m as u64 + 400 - 34) % 400);
        let chosen = choose_victims(&tracker, period, 6, until_next);
        assert_eq!(chosen.len(), 6);
        let mut per_group = [0; 4];
        for &m in &chosen {
            per_group[tracker.group_of(m)] += 1;
            let after = until_next(m);
            assert!(
                after.min(period - after) >= Duration::from_millis(150),
                "member {m}: next slot {after:?} after the stop"
            );
        }
        assert_eq!(per_group, [2, 2, 1, 1], "{chosen:?}");
        // The best of group 3 is member 23, 196 ms before its next slot.
        assert_eq!(chosen[3], 23);
        // Each group keeps one live member, however many are asked for.
        assert_eq!(choose_victims(&tracker, period, 100, until_next).len(), 36);
    }
}
