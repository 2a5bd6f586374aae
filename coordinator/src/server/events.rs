//! What the core reports as events, logged and counted: one arm per event.

use std::time::Duration;

use tracing::{debug, info, warn};

use super::metrics::{GuardTransition, Metrics, Reservation};
use crate::core::{Event, Guard};

/// Logs `event` of shard `shard` and counts it in the metrics.
pub(crate) fn log_event(shard: usize, m: &Metrics, event: Event) {
    match event {
        Event::MembersDrained {
            group,
            members,
            drained,
        } => info!(
            shard,
            group,
            members = ?members,
            drained,
            "members drained or undrained"
        ),
        Event::GroupConfigChanged { group } => info!(shard, group, "group settings changed"),
        Event::MemberJoined {
            group,
            member_id,
            instance_id,
        } => info!(
            shard,
            group,
            member_id,
            instance_id = instance_id.as_deref(),
            "member joined"
        ),
        Event::MemberReplaced {
            group,
            old_member_id,
            new_member_id,
            instance_id,
        } => info!(
            shard,
            group, old_member_id, new_member_id, instance_id, "static member replaced"
        ),
        Event::MemberRemoved {
            group,
            member_id,
            reason,
        } => {
            m.expulsion(reason).increment(1);
            info!(
                shard,
                group,
                member_id,
                reason = reason.as_str(),
                "member removed"
            );
        }
        Event::RebalanceStarted {
            group,
            generation,
            cause,
            partitions_moved,
        } => {
            m.rebalance_started(cause).increment(1);
            info!(
                shard,
                group,
                generation,
                cause = cause.as_str(),
                partitions_moved,
                "rebalance started"
            );
        }
        Event::RebalanceCompleted {
            group,
            generation,
            duration,
        } => {
            m.rebalances_completed.increment(1);
            m.rebalance_duration.record(duration.as_secs_f64());
            info!(
                shard,
                group,
                generation,
                duration_ms = duration_ms(duration),
                "rebalance completed"
            );
        }
        Event::QuotaRefused { group, quota } => {
            m.quota_refused(quota).increment(1);
            debug!(
                shard,
                group,
                quota = quota.as_str(),
                "refused: quota reached"
            );
        }
        Event::CommitsAccepted { group, count } => {
            m.commits_accepted.increment(count as u64);
            debug!(shard, group, count, "offsets committed");
        }
        Event::CommitRejected { group, reason } => {
            m.commit_rejected(reason).increment(1);
            debug!(
                shard,
                group,
                reason = reason.as_str(),
                "offset commit rejected"
            );
        }
        Event::IsolationSuspected {
            silent_for,
            members,
        } => {
            m.isolations.increment(1);
            m.guard(Guard::Isolation, GuardTransition::Held)
                .increment(1);
            warn!(
                shard,
                silent_for_ms = duration_ms(silent_for),
                members,
                "every member is silent; suspecting the coordinator's own network and holding expulsions"
            );
        }
        Event::IsolationEnded { silent_for } => {
            m.guard(Guard::Isolation, GuardTransition::Released)
                .increment(1);
            info!(
                shard,
                silent_for_ms = duration_ms(silent_for),
                "members heard again; members not already overdue got the silence back"
            );
        }
        Event::HoldExpired {
            guard,
            group,
            member_id,
            held_for,
        } => {
            m.guard(guard, GuardTransition::BoundReached).increment(1);
            warn!(
                shard,
                guard = guard.as_str(),
                group,
                member_id,
                held_for_ms = duration_ms(held_for),
                "a guard held a member as long as it may; expelling it"
            );
        }
        Event::PauseDetected { late_by, .. } => {
            m.pauses.increment(1);
            m.guard(Guard::Pause, GuardTransition::Held).increment(1);
            warn!(
                shard,
                late_by_ms = duration_ms(late_by),
                "coordinator was paused; every member's deadlines were extended and expulsions wait for queued frames"
            );
        }
        Event::ExpulsionRateLimited => {
            m.guard(Guard::RateLimit, GuardTransition::Held)
                .increment(1);
            debug!(
                shard,
                "expiry for silence waits for the expulsion rate limit"
            );
        }
        Event::BacklogDetected { lag } => {
            m.guard(Guard::Backlog, GuardTransition::Held).increment(1);
            warn!(
                shard,
                lag_ms = duration_ms(lag),
                "coordinator behind its members' frames; holding expulsions"
            );
        }
        Event::BacklogEnded { lasted, worst } => {
            m.guard(Guard::Backlog, GuardTransition::Released)
                .increment(1);
            info!(
                shard,
                lasted_ms = duration_ms(lasted),
                worst_ms = duration_ms(worst),
                "coordinator caught up; expiries judged as usual"
            );
        }
        Event::MemberSuspected {
            group,
            member_id,
            silence,
            expel_after,
        } => {
            m.suspected.increment(1);
            info!(
                shard,
                group,
                member_id,
                silent_ms = duration_ms(silence),
                expel_after_ms = duration_ms(expel_after),
                "member suspect: keeps its partitions, given nothing new"
            );
        }
        Event::MemberRecovered {
            group,
            member_id,
            suspect_for,
        } => {
            m.recovered.increment(1);
            info!(
                shard,
                group,
                member_id,
                suspect_for_ms = duration_ms(suspect_for),
                "member alive again"
            );
        }
        Event::ShadowVerdict {
            group,
            member_id,
            detector,
            verdict,
            silence,
        } => {
            m.shadow_verdict(detector, verdict).increment(1);
            info!(
                shard,
                group,
                member_id,
                detector = detector.as_str(),
                verdict = verdict.as_str(),
                silent_ms = duration_ms(silence),
                "shadow detector verdict (not acted on)"
            );
        }
        Event::FalseExpulsion {
            group,
            member_id,
            detector,
        } => {
            m.false_expulsion(detector).increment(1);
            info!(
                shard,
                group,
                member_id,
                detector = detector.as_str(),
                "member expelled for silence beat again: a false expulsion"
            );
        }
        Event::PartitionsReserved {
            group,
            instance_id,
            member_id,
            partitions,
            delay,
        } => {
            m.reservation(Reservation::Started).increment(1);
            info!(
                shard,
                group,
                instance_id,
                member_id,
                partitions,
                delay_ms = duration_ms(delay),
                "partitions reserved for a departed static member"
            );
        }
        Event::ReservationReturned {
            group,
            instance_id,
            member_id,
            partitions,
        } => {
            m.reservation(Reservation::Returned).increment(1);
            info!(
                shard,
                group,
                instance_id,
                member_id,
                partitions,
                "static member back within its departure delay"
            );
        }
        Event::ReservationEnded {
            group,
            instance_id,
            partitions,
            reason,
        } => {
            m.reservation(Reservation::Ended(reason)).increment(1);
            info!(
                shard,
                group,
                instance_id,
                partitions,
                reason = reason.as_str(),
                "reservation ended: its partitions move"
            );
        }
        Event::PauseGraceEnded { .. } => {
            m.guard(Guard::Pause, GuardTransition::Released)
                .increment(1);
            debug!(shard, "grace after a pause is over");
        }
    }
}

pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
