//! `racks`: members in racks (Join version 3: a rack each, and the preferred rack of
//! every partition), partitions preferring racks evenly. Measures the share of
//! partitions owned in their preferred rack and the counts per member and per rack
//! against even; then kills every member of one rack and counts the partitions of the
//! other racks that moved (the target: none, only the dead rack's share moves).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::common::{Check, CommonArgs};
use crate::driver::{Cmd, Load};
use crate::harness::{Outcome, Rig, RunOptions, Scenario, Setup};
use crate::scenarios::fleet::{changed, owners, placement, Log};
use crate::stats::kv;
use crate::tracker::Tracker;

#[derive(Debug, Clone, Args)]
pub(crate) struct RacksArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Racks; member `i` is in rack `i % racks`, partition `p` prefers rack `p % racks`.
    #[arg(long, default_value_t = 3)]
    pub(crate) racks: usize,
    /// The rack whose members are killed.
    #[arg(long, default_value_t = 0)]
    pub(crate) kill_rack: usize,
    /// Time the group must show no push before it counts as settled.
    #[arg(long, value_parser = crate::common::duration, default_value = "1s")]
    pub(crate) quiet_for: Duration,
}

/// How an assignment sits on the racks.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RackView {
    /// Partitions owned by a member of their preferred rack, per cent.
    pub(crate) in_rack_pct: f64,
    pub(crate) per_member: Vec<usize>,
    pub(crate) per_rack: Vec<usize>,
    /// Even shares: partitions / live members, and per rack partitions × the rack's
    /// share of the live members.
    pub(crate) even_per_member: f64,
    pub(crate) even_per_rack: Vec<f64>,
    /// Largest distance of a member's (a rack's) count from its even share.
    pub(crate) member_spread: f64,
    pub(crate) rack_spread: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct RacksFigures {
    pub(crate) members: usize,
    pub(crate) racks: usize,
    pub(crate) partitions: u32,
    pub(crate) settled: RackView,
    pub(crate) killed_rack: usize,
    pub(crate) killed_members: usize,
    /// The killed rack's partitions, moved to survivors.
    pub(crate) orphans: usize,
    pub(crate) orphans_reowned: usize,
    /// Partitions the other racks' members owned before the kill that moved (changed
    /// owner, or were revoked from them on the way).
    pub(crate) other_racks_moved: usize,
    pub(crate) after_kill: RackView,
}

fn view(tracker: &Tracker, racks: usize, partitions: u32) -> RackView {
    let rack_of = |m: usize| m % racks;
    let own = owners(tracker, partitions);
    let in_rack = own
        .iter()
        .enumerate()
        .filter(|(p, o)| o.is_some_and(|m| rack_of(m) == p % racks))
        .count();
    let live: Vec<usize> = (0..tracker.owned.len())
        .filter(|m| tracker.live[*m])
        .collect();
    let per_member: Vec<usize> = (0..tracker.owned.len())
        .map(|m| {
            if tracker.live[m] {
                tracker.owned[m].len()
            } else {
                0
            }
        })
        .collect();
    let mut per_rack = vec![0; racks];
    for (m, n) in per_member.iter().enumerate() {
        per_rack[rack_of(m)] += n;
    }
    let total = f64::from(partitions);
    let even_per_member = total / live.len().max(1) as f64;
    let even_per_rack: Vec<f64> = (0..racks)
        .map(|r| {
            let n = live.iter().filter(|m| rack_of(**m) == r).count();
            total * n as f64 / live.len().max(1) as f64
        })
        .collect();
    let member_spread = live
        .iter()
        .map(|m| (per_member[*m] as f64 - even_per_member).abs())
        .fold(0.0, f64::max);
    let rack_spread = per_rack
        .iter()
        .zip(&even_per_rack)
        .map(|(n, e)| (*n as f64 - e).abs())
        .fold(0.0, f64::max);
    RackView {
        in_rack_pct: 100.0 * in_rack as f64 / total.max(1.0),
        per_member,
        per_rack,
        even_per_member,
        even_per_rack,
        member_spread,
        rack_spread,
    }
}

fn describe(v: &RackView) -> String {
    format!(
        "{:.1} % in their rack; per member {:?} (even {:.1}, farthest {:.1} off); per rack {:?} (even {:?}, farthest {:.1} off)",
        v.in_rack_pct,
        v.per_member,
        v.even_per_member,
        v.member_spread,
        v.per_rack,
        v.even_per_rack.iter().map(|e| (e * 10.0).round() / 10.0).collect::<Vec<_>>(),
        v.rack_spread
    )
}

impl Scenario for RacksArgs {
    const NAME: &'static str = "racks";
    type Figures = RacksFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        Duration::from_secs(90)
    }

    async fn run(&self) -> Result<Outcome<RacksFigures>, String> {
        let common = &self.common;
        let racks = self.racks.max(1);
        let members = common.members_or(12);
        let partitions = common.partitions.unwrap_or(120);
        let session = common.session_timeout.unwrap_or(Duration::from_secs(1));
        let interval = common.interval.unwrap_or(Duration::from_millis(200));
        if self.kill_rack >= racks || members <= racks {
            return Err("--kill-rack must be below --racks, and --members above it".into());
        }
        let preferred: Vec<String> = (0..partitions as usize)
            .map(|p| format!("rack-{}", p % racks))
            .collect();
        let placements = (0..members)
            .map(|i| {
                Some(placement(
                    format!("host-{i}"),
                    format!("rack-{}", i % racks),
                    0,
                    &preferred,
                ))
            })
            .collect();
        let setup = Setup {
            observe: true,
            placements,
            ..Setup::new(
                common,
                members,
                1,
                partitions,
                session,
                Load::Periodic { period: interval },
            )
        };
        let per_conn = setup.per_conn;
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let setup_timeout = common.setup_timeout;
        let quiet = self.quiet_for;
        let kill_rack = self.kill_rack;
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            let mut log = Log::new(members);
            rig.phase("settling");
            if !log
                .quiet(
                    &mut tracker,
                    &mut observations,
                    quiet,
                    Instant::now() + setup_timeout,
                )
                .await
            {
                return Err("the group did not settle".to_owned());
            }
            let settled = view(&tracker, racks, partitions);
            let before = owners(&tracker, partitions);
            let victims: Vec<usize> = (0..members).filter(|m| m % racks == kill_rack).collect();
            let orphans: BTreeSet<u32> = victims
                .iter()
                .flat_map(|m| tracker.owned[*m].iter().copied())
                .collect();
            log.clear_moves();
            rig.phase("killing a rack");
            for &victim in &victims {
                let (reply, answer) = oneshot::channel();
                rig.driver.command(Cmd::Kill {
                    member: victim,
                    close: per_conn == 1,
                    reply,
                });
                let _ = answer.await;
                tracker.take_out(victim, Instant::now());
            }
            rig.phase("re-settling");
            if !log
                .quiet(
                    &mut tracker,
                    &mut observations,
                    quiet,
                    Instant::now() + setup_timeout + session,
                )
                .await
            {
                return Err("the group did not settle after the kill".to_owned());
            }
            let after = owners(&tracker, partitions);
            let mut moved: BTreeSet<u32> = changed(&before, &after)
                .into_iter()
                .filter(|p| !orphans.contains(p))
                .collect();
            for r in &log.revocations {
                moved.extend(r.partitions.iter().copied());
            }
            let reowned = orphans
                .iter()
                .filter(|p| after[**p as usize].is_some())
                .count();
            let after_kill = view(&tracker, racks, partitions);
            Ok::<_, String>(RacksFigures {
                members,
                racks,
                partitions,
                settled,
                killed_rack: kill_rack,
                killed_members: victims.len(),
                orphans: orphans.len(),
                orphans_reowned: reowned,
                other_racks_moved: moved.len(),
                after_kill,
            })
        }
        .await;
        let finished = rig.finish().await;
        let f = outcome?;
        let text = kv(&[
            (
                "layout",
                format!(
                    "{members} members in {racks} racks (member i in rack i % {racks}), {partitions} partitions preferring rack p % {racks}"
                ),
            ),
            ("settled", describe(&f.settled)),
            (
                "killed",
                format!(
                    "rack {} ({} members, {} partitions): {} re-owned, {} partitions of the other racks moved",
                    f.killed_rack, f.killed_members, f.orphans, f.orphans_reowned, f.other_racks_moved
                ),
            ),
            ("after the kill", describe(&f.after_kill)),
        ]);
        let checks = vec![
            Check::new(
                "partitions owned in their preferred rack",
                ">= 95 %",
                format!("{:.1} %", f.settled.in_rack_pct),
                f.settled.in_rack_pct >= 95.0,
            ),
            Check::new(
                "counts within ±1 of even, per member",
                "<= 1 off",
                format!("{:.1} off", f.settled.member_spread),
                f.settled.member_spread <= 1.0,
            ),
            Check::new(
                "killing a rack moves only its partitions",
                "0 others",
                format!("{} others", f.other_racks_moved),
                f.other_racks_moved == 0 && f.orphans_reowned == f.orphans,
            ),
        ];
        let notes = vec![format!(
            "the rack's members are killed {} and expelled at the session timeout ({} ms)",
            if per_conn == 1 {
                "by closing their connections"
            } else {
                "silently (connections shared)"
            },
            session.as_millis()
        )];
        let load = format!("heartbeats every {} ms", interval.as_millis());
        Ok(Outcome {
            notes,
            ..finished.outcome(load, f, text, checks)
        })
    }
}
