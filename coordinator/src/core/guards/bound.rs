//! What the guards share: how long any of them may hold an expiry (the hold bound),
//! and the pauses remembered to count a member's real silence.
//!
//! Each deadline is held at most one more expel threshold past it, and a deadline for
//! silence never past two expel thresholds of *real* silence: the time since the
//! member's last frame less the part of it the coordinator was paused (the pause guard
//! measured those pauses and moved the deadlines by them already).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::super::group::{Expiry, Member};

/// Pauses the guards remember, to count a member's real silence without them. A
/// member is expelled within two expel thresholds of real silence, so only pauses
/// within that matter; a coordinator paused more often than this within one member's
/// silence counts the older ones as silence.
pub const PAUSE_MEMORY: usize = 64;

/// The last [`PAUSE_MEMORY`] pauses the pause guard measured (from, to), oldest first.
#[derive(Debug, Default)]
pub(crate) struct Pauses(VecDeque<(Instant, Instant)>);

impl Pauses {
    /// How much of the time from `from` to `to` the coordinator was paused, as far as
    /// the pause guard measured (and remembers).
    pub(crate) fn between(&self, from: Instant, to: Instant) -> Duration {
        self.0
            .iter()
            .map(|&(a, b)| b.min(to).saturating_duration_since(a.max(from)))
            .sum()
    }

    /// The pause guard measured a pause from `from` to `to`.
    pub(crate) fn push(&mut self, from: Instant, to: Instant) {
        if self.0.len() == PAUSE_MEMORY {
            self.0.pop_front();
        }
        self.0.push_back((from, to));
    }
}

/// An expiry the guards may hold: the deadline it is for, the bound past which no
/// guard holds it, and when to look at the member again at the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) deadline: Instant,
    pub(crate) bound: Instant,
    pub(crate) look_by: Instant,
}

/// What the guards read of a member whose timer fired, taken once so that each guard
/// can then act on the coordinator.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject {
    /// The silence that expels it ([`Member::expel_after`]): every guard scales by it.
    pub(crate) expel_after: Duration,
    /// When a frame from it last arrived.
    pub(crate) heard_at: Instant,
    /// A deadline that expels it has passed (silence, its lease after its connection
    /// closed, progress, a revocation).
    pub(crate) expiring: bool,
    /// Its connection is open.
    pub(crate) connected: bool,
    /// Frames from it may be waiting unread: its connection is open, it has not been
    /// heard since a restore, or its connection closed while its lease still runs (it
    /// may be resuming on a new connection, whose first frames, an acknowledgement or
    /// a beat, are among those waiting).
    pub(crate) may_wait: bool,
    /// What it failed first is silence (or its lease after its connection closed): the
    /// rate limit counts only those. Expiries for progress or a revocation are judged
    /// on what the member's frames said (a counter that did not move, an
    /// acknowledgement that did not come), and where frames may be missing the other
    /// guards already hold them; a storm of those comes from the members' side (one
    /// rebalance asking many at once, a stall they share), where spreading the
    /// expulsions out only leaves partitions longer with members that do not let go of
    /// them. (A member's reserved slot is also forgotten whenever it is heard, which a
    /// member that beats without answering is, every beat.) One held past its
    /// revocation deadline until its session passed too is expelled for the
    /// revocation.
    pub(crate) for_silence: bool,
    /// The deadline held and its bound; `None` if no deadline the bound covers passed.
    pub(crate) span: Option<Span>,
}

impl Subject {
    pub(crate) fn of(m: &Member, now: Instant, pauses: &Pauses) -> Self {
        let paused = pauses.between(m.heard_at, now);
        // A member resuming after its connection closed is never held past its lease,
        // which ends its membership anyway (a crashed process closes its sockets, and
        // is expelled when its lease runs out, held or not).
        let resuming = m.conn_closed && m.lease_until > now;
        let span = hold_bound(m, now, paused).map(|(deadline, bound, look_by)| Span {
            deadline,
            bound: if resuming {
                bound.min(m.lease_until)
            } else {
                bound
            },
            look_by: if resuming {
                look_by.min(m.lease_until)
            } else {
                look_by
            },
        });
        let expiry = m.expiry(now);
        Self {
            expel_after: m.expel_after(),
            heard_at: m.heard_at,
            expiring: expiry.is_some(),
            connected: m.conn.is_some(),
            may_wait: m.conn.is_some() || m.unheard() || resuming,
            for_silence: m.session_deadline() <= now
                && matches!(expiry, Some((Expiry::Silence | Expiry::Closed, _))),
            span,
        }
    }
}

/// How long a guard may hold `m`'s expiry at `now`: of its deadlines that have passed
/// (silence, progress, its oldest unanswered revocation), the one whose bound comes
/// first, with that bound; `None` if none has passed. Each deadline is held at most one
/// more expel threshold past it: what a member needs to be heard again once the
/// coordinator hears or reads its frames, whatever the deadline, since its heartbeats
/// carry its progress and acknowledgements. Silence is never held past two expel
/// thresholds of real silence either (`paused`: the part of the time since the
/// member's last frame the coordinator was paused, which is not its silence), so a
/// dead member is expelled within that, whatever else is pending.
///
/// Also when to look at the member again at the latest: that bound, or the first of
/// its deadlines still to pass, if sooner. A deadline that passes during a hold may
/// bring a bound of its own that comes first (a session deadline that a give-back has
/// moved up to two expel thresholds of silence is its own bound).
pub(crate) fn hold_bound(
    m: &Member,
    now: Instant,
    paused: Duration,
) -> Option<(Instant, Instant, Instant)> {
    let expel_after = m.expel_after();
    let session = m.session_deadline();
    let real = m.heard_at + paused + 2 * expel_after;
    // Each deadline with its bound.
    let deadlines = [
        Some((session, (session + expel_after).min(real.max(session)))),
        m.judged_progress().map(|d| (d, d + expel_after)),
        m.judged_revocation().map(|d| (d, d + expel_after)),
    ];
    let passed = deadlines.iter().flatten().filter(|&&(d, _)| d <= now);
    let (deadline, bound) = passed.min_by_key(|&&(_, bound)| bound).copied()?;
    let look_by = deadlines
        .iter()
        .flatten()
        .map(|&(d, _)| d)
        .filter(|&d| d > now)
        .fold(bound, Instant::min);
    Some((deadline, bound, look_by))
}
