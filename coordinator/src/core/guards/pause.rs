//! The pause guard: the coordinator was woken later than it asked, so it was not
//! running. Each member's deadlines move by the part of its wait the pause overlapped,
//! and a grace lets frames queued in the pause be read before a member whose silence it
//! overlapped is judged (see `mod.rs` for the rule and its bound).

use std::time::{Duration, Instant};

use rollcall_protocol::ArrivalKind;

use super::super::group::Member;
use super::super::{Coordinator, Event, Output};
use super::bound::Subject;
use super::Hold;

/// A wake-up later than this may be a pause of the coordinator; below it, lateness is
/// scheduling noise and never counts.
pub const PAUSE_FLOOR: Duration = Duration::from_millis(50);

/// A quarter of `expel_after`, at least [`PAUSE_FLOOR`] and at most `pause_guard`
/// ([`CoreConfig::pause_guard`](super::super::CoreConfig::pause_guard)): both how late
/// a wake-up must be to be a pause and how long the grace after one lasts.
pub(crate) fn quarter_of(expel_after: Duration, pause_guard: Duration) -> Duration {
    (expel_after / 4).clamp(PAUSE_FLOOR, pause_guard.max(PAUSE_FLOOR))
}

impl Coordinator {
    /// The pause guard: closes a grace that is over; then, if woken later than the
    /// threshold past the earliest deadline, shifts members' deadlines by the delay and
    /// opens a new grace.
    pub(in super::super) fn detect_pause(&mut self, now: Instant) {
        if let Some(woken) = self.guards.pause_woken_at {
            if now.saturating_duration_since(woken) >= self.config.pause_guard {
                self.guards.pause_woken_at = None;
                self.outputs
                    .push_back(Output::Event(Event::PauseGraceEnded {
                        late_by: now.saturating_duration_since(woken + self.config.pause_guard),
                    }));
            }
        }
        let Some(expected) = self.timers.peek() else {
            return;
        };
        // The core ran at `ran_before` (inputs, say, whose scheduling may have left an
        // entry in the past): it was not paused before then.
        let since = self.ran_before.map_or(expected, |ran| ran.max(expected));
        let late_by = now.saturating_duration_since(since);
        if late_by <= PAUSE_FLOOR {
            return;
        }
        // Recorded whether or not it reaches the threshold, which depends on the
        // members' (a replay applies it to its own).
        self.trace_shard(now, ArrivalKind::Pause, late_by);
        if late_by <= self.pause_threshold() {
            return;
        }
        for group in self.groups.values_mut() {
            for m in group.members.values_mut() {
                m.pause_passed(now, late_by);
            }
            // Holds are not shifted: they protect leases the members measure on their
            // own clocks, which a pause of the coordinator does not stop.
        }
        let until = now + self.config.pause_guard;
        self.guards.pauses.push(since, now);
        self.guards.pause_woken_at = Some(now);
        self.outputs
            .push_back(Output::Event(Event::PauseDetected { late_by, until }));
    }

    /// How late a wake-up must be to count as a pause of the coordinator: a quarter of
    /// the shortest expel threshold in the shard (a stall that ate that much of a
    /// member's allowed silence is the coordinator's, not the member's), at least
    /// [`PAUSE_FLOOR`] and at most [`CoreConfig::pause_guard`](super::super::CoreConfig::pause_guard).
    /// Scans the members; asked only when a wake-up is later than the floor.
    pub(crate) fn pause_threshold(&self) -> Duration {
        let shortest = self
            .groups
            .values()
            .flat_map(|g| g.members.values())
            .map(|m| m.expel_after())
            .min()
            .unwrap_or(self.config.pause_guard);
        quarter_of(shortest, self.config.pause_guard)
    }

    /// The grace after a pause. Queued frames may carry heartbeats, progress and
    /// acknowledgements alike, from any member whose silence the pause overlapped: one
    /// whose connection closed (or that the coordinator has not seen since a restart)
    /// may have frames queued on a new connection. A member heard since the wake has
    /// nothing of its own in the pause: its later frames say more than any queued one.
    /// (Held too, one that joined after the wake and whose connection then closed was
    /// kept past its lease to the end of a grace that was never its own.)
    pub(super) fn pause_hold(&self, m: &Subject, now: Instant) -> Option<Hold> {
        let woken = self.guards.pause_woken_at?;
        let until = woken + quarter_of(m.expel_after, self.config.pause_guard);
        (m.expiring && now < until && m.heard_at <= woken).then_some(Hold::Pause { until })
    }
}

impl Member {
    /// The coordinator was paused for `paused` up to `now`: only the part of the
    /// member's silence (and of its wait for progress) that the pause overlaps is not
    /// counted. A member heard in the queued frames read on waking gets nothing.
    ///
    /// Unlike what an isolation gives back, this is not capped: a pause is the
    /// coordinator's own downtime, measured, not inferred, and nothing runs in it (no
    /// expulsion, no grant, no answer a member's work may wait for), so every deadline
    /// and bound of the core counts the time it runs, and moves by the pause. Capped, a
    /// single long pause would expel a member whose revocation push, or the commit answer
    /// its progress waited for, the pause kept from it.
    pub(crate) fn pause_passed(&mut self, now: Instant, paused: Duration) {
        let silent = now.saturating_duration_since(self.heard_at);
        self.liveness.pause_passed(paused.min(silent));
        let stuck = now.saturating_duration_since(self.last_progress_at);
        self.progress_deadline += paused.min(stuck);
        for r in &mut self.revoking_since {
            r.since += paused;
            r.deferred_to += paused;
        }
    }
}
