//! The safety run's report: the oracle's findings against the targets, and each kind
//! of fault's recovery times.

use std::time::Duration;

use super::faults::Fault;
use super::{SafetyArgs, SafetyFigures};
use crate::common::{Check, GeneratorInfo};
use crate::harness::Outcome;
use crate::stats::{fmt_ms, table, Percentiles};

/// At most this many findings of each kind are printed (the JSON has them all).
const SHOWN: usize = 10;

fn percentiles(values: impl Iterator<Item = f64>) -> Percentiles {
    let samples: Vec<Duration> = values
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .collect();
    Percentiles::of_durations(&samples)
}

pub(super) fn report(
    args: &SafetyArgs,
    f: SafetyFigures,
    generator: GeneratorInfo,
) -> Outcome<SafetyFigures> {
    let mut text = format!(
        "{} etcd member(s), {} coordinators (etcd lease TTL {} ms, {} slots); {} groups, {} members, {} partitions a group (session {} ms, lease {} ms, a commit every {} ms)\n\n",
        f.etcd_members,
        f.coordinators,
        f.etcd_lease_ttl_ms,
        f.slots,
        f.groups,
        f.members,
        f.partitions,
        f.session_timeout_ms,
        f.lease_timeout_ms,
        f.commit_interval_ms
    );
    let mut rows = Vec::new();
    for kind in [Fault::Kill, Fault::Cut, Fault::LeaderKill] {
        let of: Vec<_> = f.faults.iter().filter(|r| r.fault == kind).collect();
        if of.is_empty() {
            continue;
        }
        let answered = percentiles(of.iter().filter_map(|r| r.answered_ms));
        let again = percentiles(of.iter().filter_map(|r| r.commits_again_ms));
        let recovered = percentiles(of.iter().filter_map(|r| r.recovered_ms));
        rows.push(vec![
            kind.name().to_owned(),
            of.len().to_string(),
            fmt_ms(answered.p50_ms),
            fmt_ms(answered.max_ms),
            (of.len() as u64 - answered.count).to_string(),
            fmt_ms(again.p50_ms),
            fmt_ms(again.max_ms),
            fmt_ms(recovered.p50_ms),
            fmt_ms(recovered.max_ms),
        ]);
    }
    text.push_str(&table(
        &[
            "fault",
            "done",
            "answered p50 ms",
            "answered max ms",
            "not answered",
            "commits again p50 ms",
            "max ms",
            "recovered p50 ms",
            "max ms",
        ],
        &rows,
    ));
    text.push_str(&format!(
        "\nanswered: fault to every member's heartbeat answered again; commits again: to the first commit sent after it accepted; recovered: to every coordinator serving again, the groups settled and every member answered after the restore.\n\
         commits sent {}, accepted {}; members joined just before a fault {}; assignments and revocations after settling {}; Lost events {}; records read by the oracle {}\n",
        f.commits_sent,
        f.commits_accepted,
        f.faults.iter().filter(|r| r.joined.is_some()).count(),
        f.moves,
        f.lost_events,
        f.records
    ));
    let adopted = percentiles(f.faults.iter().filter_map(|r| r.adopted_ms));
    if adopted.count > 0 {
        text.push_str(&format!(
            "cuts: cut to every group served by another coordinator p50 {} ms, max {} ms\n",
            fmt_ms(adopted.p50_ms),
            fmt_ms(adopted.max_ms)
        ));
    }
    for (what, found) in [
        ("partitions held by two members at once", &f.double_owners),
        ("commits accepted from a fenced member", &f.fenced_commits),
        ("acknowledged commits lost", &f.lost_commits),
    ] {
        if !found.is_empty() {
            text.push_str(&format!("\n{what} ({}):\n", found.len()));
            for v in found.iter().take(SHOWN) {
                text.push_str(&format!("  {v}\n"));
            }
        }
    }
    let count = |kind| f.faults.iter().filter(|r| r.fault == kind).count();
    let done = format!(
        "{} kills, {} cuts, {} leader kills",
        count(Fault::Kill),
        count(Fault::Cut),
        count(Fault::LeaderKill)
    );
    let asked = format!(
        "{} kills, {} cuts, {} leader kills",
        args.kills, args.cuts, args.leader_kills
    );
    let recovered = f.faults.iter().all(|r| r.recovered_ms.is_some());
    let checks = vec![
        Check::new(
            "faults done, each recovered from",
            asked,
            done,
            f.stopped.is_none() && f.faults.len() == f.faults_planned && recovered,
        ),
        Check::new(
            "partitions owned by two members at once",
            "0",
            f.double_owners.len().to_string(),
            f.double_owners.is_empty(),
        ),
        Check::new(
            "acknowledged commits lost",
            "0",
            f.lost_commits.len().to_string(),
            f.lost_commits.is_empty() && f.commits_accepted > 0,
        ),
        Check::new(
            "commits accepted from a fenced member",
            "0",
            f.fenced_commits.len().to_string(),
            f.fenced_commits.is_empty(),
        ),
    ];
    let mut notes = Vec::new();
    if let Some(why) = &f.stopped {
        notes.push(format!("the run stopped early: {why}"));
    }
    if !f.coordinators_exited.is_empty() {
        notes.push(format!(
            "coordinators exited by themselves (restarted): {:?}",
            f.coordinators_exited
        ));
    }
    if f.lost_events > 0 {
        notes.push(format!(
            "not a safety target, but a failover shorter than the session should cause none: {} Lost events",
            f.lost_events
        ));
    }
    Outcome {
        coordinator: None,
        generator: Some(generator),
        figures: f,
        text,
        checks,
        notes,
    }
}
