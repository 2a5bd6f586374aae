//! `throttle`: a burst of members joins a settled group whose revocations are capped
//! (AlterGroupConfig `max_revoking`), and the same burst on a fresh coordinator
//! without the cap. Members take `--ack-delay` to acknowledge each revocation; the
//! partitions in revocation, as the members see them (listed by a revoke push and not
//! yet acknowledged), are counted at every push and acknowledgement, and the largest
//! count is held against the cap. Beside it: the time from the burst to the final
//! assignment, capped and uncapped.

use std::time::{Duration, Instant};

use clap::Args;
use rollcall_protocol::AlterGroupConfigRequest;
use serde::Serialize;

use crate::common::{group_name, Check, CommonArgs};
use crate::driver::Load;
use crate::harness::{Finished, Outcome, Rig, RunOptions, Scenario, Setup};
use crate::scenarios::fleet::{alter_config, ms, Log};
use crate::stats::{fmt_count, kv};

#[derive(Debug, Clone, Args)]
pub(crate) struct ThrottleArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Members of the group before the burst (`--members`: those that join in it).
    #[arg(long, default_value_t = 50)]
    pub(crate) initial: usize,
    /// The cap: partitions in revocation at once in the group.
    #[arg(long, default_value_t = 200)]
    pub(crate) max_revoking: u32,
    /// How long a member takes to acknowledge a revocation.
    #[arg(long, value_parser = crate::common::duration, default_value = "20ms")]
    pub(crate) ack_delay: Duration,
    /// Skip the uncapped run.
    #[arg(long)]
    pub(crate) capped_only: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct Burst {
    /// The cap (0: none).
    pub(crate) max_revoking: u32,
    /// Most partitions in revocation at once, as the members saw it.
    pub(crate) max_in_revocation: usize,
    pub(crate) partitions_revoked: usize,
    pub(crate) revoke_pushes: usize,
    /// The burst's joins released to the last grant of the final assignment.
    pub(crate) final_assignment_ms: Option<f64>,
    pub(crate) settled: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct ThrottleFigures {
    pub(crate) initial: usize,
    pub(crate) joining: usize,
    pub(crate) partitions: u32,
    pub(crate) ack_delay_ms: f64,
    pub(crate) capped: Burst,
    pub(crate) uncapped: Option<Burst>,
}

impl ThrottleArgs {
    async fn burst(&self, cap: u32) -> Result<(Burst, Finished), String> {
        let common = &self.common;
        let joining = common.members_or(50);
        let initial = self.initial.max(1);
        let members = initial + joining;
        let partitions = common.partitions.unwrap_or(10_000);
        let session = common.session_timeout.unwrap_or(Duration::from_secs(10));
        let interval = common.interval.unwrap_or(Duration::from_millis(500));
        let setup = Setup {
            observe: true,
            ack_delay: self.ack_delay,
            late_from: initial,
            ..Setup::new(
                common,
                members,
                1,
                partitions,
                session,
                Load::Periodic { period: interval },
            )
        };
        if !initial.is_multiple_of(setup.per_conn) {
            return Err(format!(
                "the first {initial} members must fill whole connections ({} per connection)",
                setup.per_conn
            ));
        }
        let mut rig = Rig::start(common, setup).await?;
        let mut observations = rig.observations()?;
        let endpoint = rig.target.endpoint();
        let setup_timeout = common.setup_timeout;
        let outcome = async {
            rig.connected().await?;
            let mut tracker = rig.tracker();
            // The burst's members are not there yet.
            for m in initial..members {
                tracker.live[m] = false;
            }
            let mut log = Log::new(members);
            rig.phase(&format!("settling {initial} members"));
            let limit = Instant::now() + setup_timeout;
            log.absorb(&mut tracker, &mut observations, limit, |t, _| t.settled(0))
                .await;
            if !tracker.settled(0) {
                return Err("the first members did not settle".to_owned());
            }
            if cap > 0 {
                let settings = alter_config(
                    &endpoint,
                    AlterGroupConfigRequest {
                        group: group_name(0),
                        max_revoking: Some(cap),
                        ..Default::default()
                    },
                )
                .await?;
                if settings.max_revoking != cap {
                    return Err(format!(
                        "the group's max_revoking is {}, not {cap}",
                        settings.max_revoking
                    ));
                }
            }
            log.clear_moves();
            log.last_assigned = None;
            for m in initial..members {
                tracker.live[m] = true;
            }
            rig.phase(&format!("{joining} members joining (cap {cap})"));
            let released = Instant::now();
            rig.driver.release_late_joins();
            let limit = Instant::now() + setup_timeout;
            log.absorb(&mut tracker, &mut observations, limit, |t, _| t.settled(0))
                .await;
            let settled = tracker.settled(0);
            let last = log.last_assigned;
            // The last acknowledgements' answers.
            log.absorb(
                &mut tracker,
                &mut observations,
                Instant::now() + Duration::from_millis(200),
                |_, _| false,
            )
            .await;
            let (max_in_revocation, partitions_revoked) = log.in_revocation();
            Ok::<_, String>(Burst {
                max_revoking: cap,
                max_in_revocation,
                partitions_revoked,
                revoke_pushes: log.revocations.len(),
                final_assignment_ms: settled
                    .then(|| last.map(|l| ms(l.saturating_duration_since(released))))
                    .flatten(),
                settled,
            })
        }
        .await;
        let finished = rig.finish().await;
        Ok((outcome?, finished))
    }
}

fn describe(b: &Burst) -> String {
    format!(
        "at most {} partitions in revocation at once; {} revoked in {} pushes; final assignment {}",
        fmt_count(b.max_in_revocation as f64),
        fmt_count(b.partitions_revoked as f64),
        b.revoke_pushes,
        b.final_assignment_ms
            .map_or("not reached".to_owned(), |t| format!(
                "{t:.0} ms after the burst"
            )),
    )
}

impl Scenario for ThrottleArgs {
    const NAME: &'static str = "throttle";
    type Figures = ThrottleFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        self.common.setup_timeout * 3 + Duration::from_secs(60)
    }

    async fn run(&self) -> Result<Outcome<ThrottleFigures>, String> {
        if self.max_revoking == 0 {
            return Err("--max-revoking must be at least 1".into());
        }
        let (capped, finished) = self.burst(self.max_revoking).await?;
        let uncapped = if self.capped_only {
            None
        } else {
            Some(self.burst(0).await?.0)
        };
        let common = &self.common;
        let joining = common.members_or(50);
        let partitions = common.partitions.unwrap_or(10_000);
        let interval = common.interval.unwrap_or(Duration::from_millis(500));
        let f = ThrottleFigures {
            initial: self.initial,
            joining,
            partitions,
            ack_delay_ms: ms(self.ack_delay),
            capped,
            uncapped,
        };
        let mut rows = vec![
            (
                "layout",
                format!(
                    "{} members joining a group of {} with {} partitions; revocations acknowledged after {} ms",
                    joining,
                    self.initial,
                    fmt_count(f64::from(partitions)),
                    f.ack_delay_ms
                ),
            ),
            ("capped", format!("max_revoking {}: {}", self.max_revoking, describe(&f.capped))),
        ];
        if let Some(u) = &f.uncapped {
            rows.push(("uncapped", describe(u)));
        }
        let text = kv(&rows);
        let checks = vec![
            Check::new(
                "partitions in revocation at once, capped",
                format!("<= {}", self.max_revoking),
                f.capped.max_in_revocation.to_string(),
                f.capped.max_in_revocation <= self.max_revoking as usize,
            ),
            Check::new(
                "final assignment reached, capped",
                "yes",
                if f.capped.settled { "yes" } else { "no" },
                f.capped.settled,
            ),
        ];
        let notes = vec![
            "partitions in revocation are counted from the members' side: a revoke push lists every partition its member is asked for (less those it has acknowledged already), the acknowledgement sent --ack-delay later takes them off; the coordinator's own count also includes the time each push and acknowledgement travel".to_owned(),
            "the uncapped run is a fresh coordinator with the same members and burst".to_owned(),
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
