//! `drain`: an operator drains one member of a settled group (a Drain request, API key
//! 14). Its partitions must move to the others with the normal revoke → acknowledge →
//! grant, every one of them and no other partition, soon: the time from the request
//! to the last grant is given in milliseconds and in units of the slowest revocation
//! round trip (revoke push to the acknowledgement's answer, the member taking
//! `--ack-delay` to finish with the partitions, as an application would).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::common::{group_name, Check, CommonArgs};
use crate::driver::Load;
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup};
use crate::scenarios::fleet::{self, changed, ms, owners, Log};
use crate::stats::{fmt_count, kv};

#[derive(Debug, Clone, Args)]
pub(crate) struct DrainArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// How long a member takes to acknowledge a revocation (its application finishing
    /// with the partitions).
    #[arg(long, value_parser = crate::common::duration, default_value = "50ms")]
    pub(crate) ack_delay: Duration,
    /// The member drained (its index, from 0).
    #[arg(long, default_value_t = 0)]
    pub(crate) victim: usize,
    /// Time the group must show no push before it counts as settled, and after the
    /// drain before the moves are counted.
    #[arg(long, value_parser = crate::common::duration, default_value = "1s")]
    pub(crate) quiet_for: Duration,
}

#[derive(Debug, Serialize)]
pub(crate) struct DrainFigures {
    pub(crate) members: usize,
    pub(crate) partitions: u32,
    pub(crate) ack_delay_ms: f64,
    /// Partitions the drained member owned before the drain.
    pub(crate) victim_owned: usize,
    /// Of those, how many another member owns after it.
    pub(crate) moved: usize,
    /// What the drained member still owns after it.
    pub(crate) victim_left: usize,
    /// Partitions of the other members whose owner changed, or that were revoked from
    /// them, during the drain.
    pub(crate) other_moves: usize,
    /// The Drain request sent to the last of the drained member's partitions granted.
    pub(crate) done_ms: Option<f64>,
    /// The slowest revocation round trip: revoke push to the acknowledgement's answer.
    pub(crate) slowest_revocation_round_trip_ms: Option<f64>,
    /// The slowest acknowledgement alone: sent to answered.
    pub(crate) slowest_ack_answer_ms: Option<f64>,
    /// `done_ms` in units of the slowest revocation round trip.
    pub(crate) done_in_round_trips: Option<f64>,
    pub(crate) revoke_pushes: usize,
    pub(crate) generations: usize,
}

impl Scenario for DrainArgs {
    const NAME: &'static str = "drain";
    type Figures = DrainFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        Duration::from_secs(60)
    }

    async fn run(&self) -> Result<Outcome<DrainFigures>, String> {
        let common = &self.common;
        let members = common.members_or(10);
        let partitions = common.partitions.unwrap_or(1_000);
        let session = common.session_timeout.unwrap_or(Duration::from_secs(10));
        let interval = common.interval.unwrap_or(Duration::from_millis(500));
        if members < 2 || self.victim >= members {
            return Err("--members must be at least 2 and --victim below it".into());
        }
        let setup = Setup {
            observe: true,
            ack_delay: self.ack_delay,
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
        let quiet = self.quiet_for;
        let victim = self.victim;
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            let mut log = Log::new(members);
            rig.phase("settling");
            let deadline = Instant::now() + setup_timeout;
            if !log
                .quiet(&mut tracker, &mut observations, quiet, deadline)
                .await
            {
                return Err("the group did not settle before the drain".to_owned());
            }
            let before = owners(&tracker, partitions);
            let victim_set: BTreeSet<u32> = tracker.owned[victim].iter().copied().collect();
            let id = log.member_ids[victim]
                .clone()
                .ok_or("the victim has no member id")?;
            log.clear_moves();
            log.last_assigned = None;
            rig.phase("draining");
            let sent = Instant::now();
            let changed_members = fleet::drain(&endpoint, &group_name(0), &id, true).await?;
            if changed_members != [id.clone()] {
                return Err(format!("the drain changed {changed_members:?}, not [{id}]"));
            }
            let limit = Instant::now() + setup_timeout;
            let moved_off = |t: &crate::tracker::Tracker, _: &Log| {
                t.owned[victim].is_empty() && t.owned_once(0)
            };
            log.absorb(&mut tracker, &mut observations, limit, moved_off)
                .await;
            let done = moved_off(&tracker, &log)
                .then(|| log.last_assigned.map(|a| a.saturating_duration_since(sent)))
                .flatten();
            // Anything else that moves afterwards counts too.
            log.quiet(
                &mut tracker,
                &mut observations,
                quiet,
                Instant::now() + setup_timeout,
            )
            .await;
            let after = owners(&tracker, partitions);
            Ok::<_, String>((before, after, victim_set, done, log, tracker))
        }
        .await;
        let finished = rig.finish().await;
        let (before, after, victim_set, done, log, tracker) = outcome?;
        let moved = victim_set
            .iter()
            .filter(|p| after[**p as usize].is_some_and(|o| o != victim))
            .count();
        let mut others: BTreeSet<u32> = changed(&before, &after)
            .into_iter()
            .filter(|p| !victim_set.contains(p))
            .collect();
        for r in log.revocations.iter().filter(|r| r.member != victim) {
            others.extend(r.partitions.iter().copied());
        }
        let victim_acks = || log.acks.iter().filter(|a| a.member == victim);
        let slowest_rt = victim_acks().map(|a| a.round_trip()).max();
        let slowest_answer = victim_acks()
            .map(|a| a.at.saturating_duration_since(a.sent))
            .max();
        let generations: BTreeSet<u32> = log.revocations.iter().map(|r| r.generation).collect();
        let f = DrainFigures {
            members,
            partitions,
            ack_delay_ms: ms(self.ack_delay),
            victim_owned: victim_set.len(),
            moved,
            victim_left: tracker.owned[victim].len(),
            other_moves: others.len(),
            done_ms: done.map(ms),
            slowest_revocation_round_trip_ms: slowest_rt.map(ms),
            slowest_ack_answer_ms: slowest_answer.map(ms),
            done_in_round_trips: match (done, slowest_rt) {
                (Some(d), Some(r)) if !r.is_zero() => Some(d.as_secs_f64() / r.as_secs_f64()),
                _ => None,
            },
            revoke_pushes: log.revocations.len(),
            generations: generations.len(),
        };
        let opt =
            |v: Option<f64>, unit: &str| v.map_or("?".to_owned(), |v| format!("{v:.1}{unit}"));
        let text = kv(&[
            (
                "layout",
                format!(
                    "{members} members, {} partitions, member {victim} drained; revocations acknowledged after {} ms",
                    fmt_count(f64::from(partitions)),
                    f.ack_delay_ms
                ),
            ),
            (
                "drained member",
                format!(
                    "owned {}, {} moved to others, {} left with it",
                    f.victim_owned, f.moved, f.victim_left
                ),
            ),
            ("other partitions moved", f.other_moves.to_string()),
            (
                "drain to last grant",
                format!(
                    "{} = {} slowest revocation round trips ({}; its acknowledgement alone answered in {})",
                    opt(f.done_ms, " ms"),
                    opt(f.done_in_round_trips, ""),
                    opt(f.slowest_revocation_round_trip_ms, " ms"),
                    opt(f.slowest_ack_answer_ms, " ms"),
                ),
            ),
            (
                "revoke pushes",
                format!("{} in {} generation(s)", f.revoke_pushes, f.generations),
            ),
        ]);
        let checks = vec![
            Check::new(
                "every partition of the drained member moved",
                f.victim_owned.to_string(),
                f.moved.to_string(),
                f.victim_owned > 0 && f.moved == f.victim_owned && f.victim_left == 0,
            ),
            Check::new(
                "no other partition moved",
                "0",
                f.other_moves.to_string(),
                f.other_moves == 0,
            ),
            Check::new(
                "done within 3 revocation round trips of the slowest acknowledgement",
                "<= 3",
                opt(f.done_in_round_trips, ""),
                f.done_in_round_trips.is_some_and(|r| r <= 3.0),
            ),
        ];
        let notes = vec![
            "a revocation round trip is the member's view: the revoke push's arrival to its acknowledgement's answer, the acknowledgement sent --ack-delay after the push".to_owned(),
            "the rebalance a drain causes waits the coordinator's coalescing window (rebalance_coalesce, 20 ms by default) before it is computed".to_owned(),
        ];
        let load = format!(
            "heartbeats every {} ms; revocations acknowledged after {} ms",
            interval.as_millis(),
            self.ack_delay.as_millis()
        );
        Ok(Outcome {
            notes,
            ..finished.outcome(load, f, text, checks)
        })
    }
}
