//! The backlog guard: the shell reported the coordinator behind (a ready task, or a
//! queued request, run late), so members' frames may be waiting unread. Also the
//! breather: an expiry found at the core's first, late, run after its deadline waits a
//! moment for the shell to read what arrived before it (see `mod.rs` for the rule
//! and its bound).

use std::time::{Duration, Instant};

use rollcall_protocol::ArrivalKind;

use super::super::{Coordinator, Event, Output};
use super::bound::{Span, Subject};
use super::{Guard, Hold, Verdict};

/// Lateness at which the coordinator counts as behind its members' frames.
pub const BACKLOG_FLOOR: Duration = Duration::from_millis(100);

/// How long an expiry found by a late first run after its deadline waits for the shell
/// to read what arrived before it (see [`Coordinator::breather`]).
pub const BREATHER: Duration = Duration::from_millis(1);

/// How long after the last report of lateness the coordinator still counts as behind
/// (frames delayed by the backlog arrive after it has drained).
pub const BACKLOG_MEMORY: Duration = Duration::from_secs(1);

/// A stretch of time in which the shell reported the coordinator behind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Behind {
    pub(crate) since: Instant,
    pub(crate) last: Instant,
    pub(crate) worst: Duration,
}

impl Coordinator {
    /// The shell's report of how far behind the coordinator is at `now`: the lateness
    /// of its runtime in running ready tasks, or of the shard in handling queued
    /// requests, whichever is worse. Opens or extends a backlog (at least
    /// [`BACKLOG_FLOOR`]), or closes one not reported for [`BACKLOG_MEMORY`].
    pub fn observe_lag(&mut self, now: Instant, lag: Duration) {
        if lag >= BACKLOG_FLOOR {
            self.trace_shard(now, ArrivalKind::Lag, lag);
            match &mut self.guards.behind {
                Some(b) => {
                    b.last = now;
                    b.worst = b.worst.max(lag);
                }
                None => {
                    self.guards.behind = Some(Behind {
                        since: now,
                        last: now,
                        worst: lag,
                    });
                    self.outputs
                        .push_back(Output::Event(Event::BacklogDetected { lag }));
                }
            }
        } else if let Some(b) = self.guards.behind {
            if now.saturating_duration_since(b.last) > BACKLOG_MEMORY {
                self.guards.behind = None;
                self.outputs.push_back(Output::Event(Event::BacklogEnded {
                    lasted: b.last.saturating_duration_since(b.since),
                    worst: b.worst,
                }));
            }
        }
    }

    /// Not run since before the deadline, and running late: the core may have been
    /// stalled over it, too briefly (or too close to its end) for the timers to run late
    /// enough to show a pause or a backlog. Frames that arrived before the deadline may
    /// still be unread, since the shell may run timers before it reads every connection.
    /// One [`BREATHER`] lets it read them; the core has then run since the deadline, so
    /// this holds once.
    pub(super) fn breather(&self, m: &Subject, span: &Span, now: Instant) -> Option<Hold> {
        let first_late_run =
            self.ran_before.is_some_and(|ran| ran < span.deadline) && now > span.deadline;
        (first_late_run && m.may_wait).then_some(Hold::Backlog {
            recheck: now + BREATHER,
        })
    }

    /// The backlog guard's verdict on an expiry: evidence is a report of lateness
    /// within the last [`BACKLOG_MEMORY`], for a member whose frames may be waiting
    /// ([`Subject::may_wait`]). Held until the backlog has had time to drain, at most
    /// to the bound.
    pub(super) fn backlog_hold(
        &mut self,
        m: &Subject,
        span: &Span,
        now: Instant,
        group: &str,
        member: &str,
    ) -> Verdict {
        let Some(b) = self.guards.behind.filter(|_| m.may_wait) else {
            return Verdict::NoEvidence;
        };
        if now.saturating_duration_since(b.last) > BACKLOG_MEMORY {
            return Verdict::NoEvidence;
        }
        if now < span.bound {
            let drain = b.worst.clamp(BACKLOG_FLOOR, BACKLOG_MEMORY);
            return Verdict::Hold(Hold::Backlog {
                recheck: span.look_by.min(now + drain),
            });
        }
        self.hold_expired(Guard::Backlog, span, now, group, member);
        Verdict::Expired
    }
}
