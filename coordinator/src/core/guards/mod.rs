//! Guards that hold expulsions when the silence behind them is more likely the
//! coordinator's fault than the members'.
//!
//! A member is expelled when it is not heard (its session deadline), when its progress
//! counter does not move (its progress deadline), or when it does not acknowledge a
//! revocation (its revocation deadline, a rebalance timeout after the oldest one it has
//! not answered). The counter and the acknowledgements travel on its heartbeats, so a
//! coordinator that cannot hear a member, or has not read its frames yet, cannot hear
//! them either: the pause, isolation and backlog guards hold all three expiries alike.
//! The rate limit holds only expiries for silence.
//!
//! Every guard acts only on evidence about the coordinator, and every guard is bounded,
//! so that no guard can keep a dead member forever.
//!
//! Every figure below that scales with a member is measured against its *expel
//! threshold* (`Member::expel_after`): the silence that expels it, which is its session
//! timeout under the fixed detector and what the adaptive detector learned (at most the
//! session timeout) under the other. Measured against session timeouts, a pause or an
//! isolation a member's detector does not forgive (a 1.5 s stall with members expelled
//! after 1 s) went unrecognised, and those members were expelled.
//!
//! **The bound** of the isolation and backlog guards and of the rate limit: each
//! deadline is held at most one more expel threshold past it, whichever deadline it is
//! (once the coordinator hears or reads a live member's frames again, its next
//! heartbeat, with its progress and acknowledgements, comes within that); a deadline
//! for silence, moreover, never past two expel thresholds of real silence. When several
//! have passed, the first bound reached ends the hold, and the expulsion names the
//! deadline that passed first; a held member is looked at again when its next deadline
//! passes, too, since that one's bound may come first. So a dead member is expelled
//! within two expel thresholds of its last frame, whatever else it has pending. Real
//! silence is the time since the member's last frame less the part of it the
//! coordinator was paused: the pause guard remembers the last [`PAUSE_MEMORY`] pauses
//! it measured. (Counted as silence, a pause that moved a member's deadline left the
//! guards no room: a member whose beat arrived during a second, shorter stall was
//! expelled before it was read.)
//!
//! What the isolation guard gives back when frames return moves deadlines too, so it
//! is bounded as well, in wall time: the session never past two expel thresholds of
//! real silence; a wait for progress, and each revocation's wait, at most one expel
//! threshold over all the isolations it spans (counted per wait: progress, or a
//! revocation asked later, starts a new one). Given per isolation, a member that beats
//! but never acknowledges (or never progresses) kept its partitions for as long as the
//! isolations recurred, bounded only in the time the coordinator could hear it. So a
//! revocation is acknowledged, or its member expelled, within its rebalance timeout
//! plus two expel thresholds of its asking, and a stuck member is expelled within its
//! progress timeout plus two expel thresholds of its last progress, however often the
//! coordinator is isolated; time the coordinator was paused is not counted (see the
//! pause guard).
//!
//! - **Pause guard.** Evidence: the core was woken later than the deadline it asked for
//!   by more than a quarter of the shortest expel threshold in the shard (at least
//!   [`PAUSE_FLOOR`], at most
//!   [`CoreConfig::pause_guard`](super::CoreConfig::pause_guard)), so the coordinator
//!   itself was not running (a stopped process, a stalled runtime). Each member's
//!   deadlines are shifted by the part of its silence (of its wait for progress, of each
//!   revocation's wait) the pause overlaps (a member heard in the frames read on waking
//!   gains nothing), and no member whose silence the pause overlapped (last heard no
//!   later than the wake) is expelled for silence, progress, a revocation or a closed
//!   connection until a grace has passed since waking (a quarter of its expel
//!   threshold, at least `PAUSE_FLOOR`, at most `pause_guard`), so frames queued during
//!   the pause (on any connection, old or new) are read before anyone is judged. A
//!   member heard since the wake had nothing of its own queued that its later frames
//!   do not supersede. Leases
//!   are never shifted: they bound the members' own clocks. Bound: the grace opens only
//!   on a measured pause; silence while the coordinator runs counts as usual. What a
//!   pause shifts is not capped, unlike what an isolation gives back: a pause is the
//!   coordinator's own downtime, measured rather than inferred, in which nothing of it
//!   runs (no expulsion, no grant, no answer a member's work may wait for), so every
//!   bound of the core counts the time the coordinator runs. Capped in wall time, one
//!   long pause would expel a member whose revocation push, or the commit answer its
//!   progress waited for, the pause itself kept from it. Repeated pauses lengthen a
//!   wait in wall time by the time the coordinator was stopped, and by nothing else.
//! - **Isolation guard.** Evidence: the whole server (every connection of every shard,
//!   as the shell reports it) has heard nothing for at least half the expiring member's
//!   expel threshold, the shard has at least
//!   [`CoreConfig::isolation_min_members`](super::CoreConfig::isolation_min_members)
//!   members whose connections are open, and at least [`ISOLATION_SHARE_PERCENT`]
//!   percent of those are overdue (silent for more than half their expel threshold). A
//!   member whose connection closed is not evidence: a crashed process closes its
//!   sockets. Bound: as above. When frames arrive again, members with open connections
//!   that were not already overdue when the silence began get the silent time back
//!   (less any pause measured within it, which the pause guard already gave): the
//!   session all of it, but never past two expel thresholds of real silence; the
//!   progress clock and each revocation the part of their wait the silence overlapped,
//!   at most one expel threshold over all the isolations of that wait. The others get
//!   nothing, and any member with a deadline still past is judged at once.
//!
//! - **Backlog guard.** Evidence: the shell reports that the coordinator is behind (its
//!   runtime ran a ready task, or a shard a queued request, at least [`BACKLOG_FLOOR`]
//!   late) within the last [`BACKLOG_MEMORY`]: frames members sent may be waiting
//!   unread. An expiry of a member whose connection is open, that has not been heard
//!   since a restore, or whose connection closed while its lease still runs (the first
//!   frames of either, on a new connection, may be among them), is held while that
//!   lasts, and rechecked once the backlog has had time to drain. Bound: as above, and
//!   a member whose connection closed never past its lease. A shorter stall can go
//!   unreported: one that ends just after a deadline makes the timers barely late. So
//!   an expiry found at the core's first run after the deadline, when that run is
//!   late, is also held, for one [`BREATHER`], so that the shell reads what arrived
//!   before the deadline first (it may run timers before it reads every connection).
//!   Bound: one breather, since the core has then run since the deadline.
//!
//! - **Rate limit.** At most
//!   [`CoreConfig::max_expulsion_rate`](super::CoreConfig::max_expulsion_rate)
//!   expulsions for silence per second (a bucket holding a second's worth), so a storm
//!   of expiries (a cause nobody has recognised yet) plays out over seconds, not at
//!   once. Expiries for progress or a revocation are not limited: they are judged on
//!   what the member's own frames said, and a storm of them comes from the members'
//!   side (one rebalance asking many at once, a stall they share). Bound: as above.
//!
//! Silence is judged by when frames really arrived (`Member::heard_at`), never by the
//! deadlines the guards have shifted.
//!
//! One file per guard: `pause.rs`, `isolation.rs`, `backlog.rs` (with the breather),
//! `rate_limit.rs`; `bound.rs` holds what they share (the hold bound, and the pauses
//! remembered to count real silence). This file names the guards and decides, for an
//! expiry, which of them holds it ([`Coordinator::expiry_hold`]).

mod backlog;
mod bound;
mod isolation;
mod pause;
mod rate_limit;
#[cfg(test)]
mod tests;

use std::time::Instant;

pub use self::backlog::{BACKLOG_FLOOR, BACKLOG_MEMORY, BREATHER};
pub use self::bound::PAUSE_MEMORY;
pub use self::isolation::ISOLATION_SHARE_PERCENT;
pub use self::pause::PAUSE_FLOOR;

use self::backlog::Behind;
use self::bound::{Pauses, Span, Subject};
use self::isolation::Census;
use super::{Coordinator, Event, Output};

/// The guards, by name (the `guard` label of the metrics and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Guard {
    /// The coordinator was woken late (paused).
    Pause,
    /// The whole server heard nothing while most members fell silent.
    Isolation,
    /// The coordinator was behind its members' frames.
    Backlog,
    /// Expulsions for silence came faster than the rate limit.
    RateLimit,
}

impl Guard {
    /// Every guard.
    pub const ALL: [Self; 4] = [Self::Pause, Self::Isolation, Self::Backlog, Self::RateLimit];

    /// The guard's name, as metrics and logs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Isolation => "isolation",
            Self::Backlog => "backlog",
            Self::RateLimit => "rate_limit",
        }
    }
}

/// Why an expiry is held, and until when to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The coordinator was paused; frames may still be queued.
    Pause { until: Instant },
    /// The coordinator seems cut off from its members.
    Isolation { recheck: Instant },
    /// The coordinator is behind: frames may be waiting unread.
    Backlog { recheck: Instant },
    /// Too many expulsions at once: this one waits for its turn.
    RateLimit { recheck: Instant },
}

impl Hold {
    pub(crate) fn recheck_at(self) -> Instant {
        match self {
            Self::Pause { until } => until,
            Self::Isolation { recheck }
            | Self::Backlog { recheck }
            | Self::RateLimit { recheck } => recheck,
        }
    }
}

/// What the guards know about the coordinator.
#[derive(Debug, Default)]
pub(crate) struct Guards {
    /// When any member frame was last read anywhere on the server.
    pub(crate) last_frame_at: Option<Instant>,
    /// Set while the isolation guard holds: when the silence began.
    pub(crate) isolated_since: Option<Instant>,
    /// After a measured pause: when the core woke. A member whose silence the pause
    /// overlapped is not expelled before a grace has passed since then (a quarter of
    /// its expel threshold, at least `PAUSE_FLOOR`, at most `pause_guard`).
    pub(crate) pause_woken_at: Option<Instant>,
    /// The shard's connected and overdue member counts, computed at most once per
    /// instant (only when an expiry needs them).
    pub(crate) census: Option<(Instant, Census)>,
    /// Set while the coordinator is behind: since when, when it was last reported
    /// behind, and the worst lateness reported.
    pub(crate) behind: Option<Behind>,
    /// The rate limit's theoretical arrival time: when the next expulsion would be
    /// due if expulsions came exactly at the limit.
    pub(crate) tat: Option<Instant>,
    /// The last [`PAUSE_MEMORY`] pauses the pause guard measured: a member's real
    /// silence is the time since its last frame less the part of it the coordinator
    /// was paused.
    pub(crate) pauses: Pauses,
}

/// What a guard says about an expiry.
#[derive(Debug)]
enum Verdict {
    /// Held, until the hold says.
    Hold(Hold),
    /// The guard has evidence but its bound is reached: expelled now.
    Expired,
    /// The guard has no evidence: the next one decides.
    NoEvidence,
}

impl Coordinator {
    /// Whether a guard holds an expiry of `member` at `now`. The pause, isolation and
    /// backlog guards hold expiries for silence, for progress and for an unanswered
    /// revocation alike: the progress counter and the acknowledgements travel on the
    /// heartbeats, so a coordinator that cannot hear a member (or has not read its
    /// frames yet) cannot hear them either. The rate limit holds expiries for silence
    /// only (see [`Subject::for_silence`]).
    pub(super) fn expiry_hold(&mut self, now: Instant, group: &str, member: &str) -> Option<Hold> {
        let m = self.groups.get(group)?.members.get(member)?;
        let subject = Subject::of(m, now, &self.guards.pauses);
        if let Some(hold) = self.pause_hold(&subject, now) {
            return Some(hold);
        }
        let span = subject.span?;
        if let Some(hold) = self.breather(&subject, &span, now) {
            return Some(hold);
        }
        match self.backlog_hold(&subject, &span, now, group, member) {
            Verdict::Hold(hold) => return Some(hold),
            Verdict::Expired => return None,
            Verdict::NoEvidence => {}
        }
        match self.isolation_hold(&subject, &span, now, group, member) {
            Verdict::Hold(hold) => Some(hold),
            Verdict::Expired => None,
            Verdict::NoEvidence if subject.for_silence => {
                self.rate_limit(now, (span.bound, span.look_by), group, member)
            }
            Verdict::NoEvidence => None,
        }
    }
}

impl Coordinator {
    /// A guard with evidence reached its bound: the expiry is no longer held.
    fn hold_expired(&mut self, guard: Guard, span: &Span, now: Instant, group: &str, member: &str) {
        self.outputs.push_back(Output::Event(Event::HoldExpired {
            guard,
            group: group.to_owned(),
            member_id: member.to_owned(),
            held_for: now.saturating_duration_since(span.deadline),
        }));
    }
}
