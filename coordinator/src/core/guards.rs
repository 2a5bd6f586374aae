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

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::group::{Expiry, Member};
use super::timers::TimerKey;
use super::{Coordinator, Event, Output};

/// A wake-up later than this may be a pause of the coordinator; below it, lateness is
/// scheduling noise and never counts.
pub const PAUSE_FLOOR: Duration = Duration::from_millis(50);

/// Pauses the guards remember, to count a member's real silence without them. A
/// member is expelled within two expel thresholds of real silence, so only pauses
/// within that matter; a coordinator paused more often than this within one member's
/// silence counts the older ones as silence.
pub const PAUSE_MEMORY: usize = 64;

/// Share of a shard's connected members that must be overdue before a mass silence is
/// blamed on the coordinator (Kubernetes' node lifecycle controller uses 55% of a zone).
pub const ISOLATION_SHARE_PERCENT: usize = 55;

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

/// Lateness at which the coordinator counts as behind its members' frames.
pub const BACKLOG_FLOOR: Duration = Duration::from_millis(100);

/// How long an expiry found by a late first run after its deadline waits for the shell
/// to read what arrived before it (see [`Coordinator::expiry_hold`]).
pub const BREATHER: Duration = Duration::from_millis(1);

/// How long after the last report of lateness the coordinator still counts as behind
/// (frames delayed by the backlog arrive after it has drained).
pub const BACKLOG_MEMORY: Duration = Duration::from_secs(1);

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
    /// After a measured pause: when the core woke. A member whose connection is open
    /// is not expelled for silence before a grace has passed since then (a quarter of
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
    /// The last [`PAUSE_MEMORY`] pauses the pause guard measured (from, to), oldest
    /// first: a member's real silence is the time since its last frame less the part
    /// of it the coordinator was paused.
    pub(crate) pauses: VecDeque<(Instant, Instant)>,
}

/// A stretch of time in which the shell reported the coordinator behind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Behind {
    pub(crate) since: Instant,
    pub(crate) last: Instant,
    pub(crate) worst: Duration,
}

/// Counts of a shard's members for the isolation guard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Census {
    /// Members whose connection is open.
    pub(crate) connected: usize,
    /// Of those, members silent for more than half their expel threshold.
    pub(crate) overdue: usize,
}

impl Census {
    pub(crate) fn count(
        &mut self,
        now: Instant,
        connected: bool,
        last_heard: Instant,
        expel_after: Duration,
    ) {
        if connected {
            self.connected += 1;
            if now.saturating_duration_since(last_heard) > expel_after / 2 {
                self.overdue += 1;
            }
        }
    }

    /// Whether enough members are silent at once to blame the coordinator.
    pub(crate) fn mass_silence(&self, min_members: usize) -> bool {
        min_members > 0
            && self.connected >= min_members
            && self.overdue * 100 >= self.connected * ISOLATION_SHARE_PERCENT
    }
}

impl Guards {
    /// How much of the time from `from` to `to` the coordinator was paused, as far as
    /// the pause guard measured (and remembers).
    pub(crate) fn paused_between(&self, from: Instant, to: Instant) -> Duration {
        self.pauses
            .iter()
            .map(|&(a, b)| b.min(to).saturating_duration_since(a.max(from)))
            .sum()
    }

    /// The pause guard measured a pause from `from` to `to`.
    fn paused(&mut self, from: Instant, to: Instant) {
        if self.pauses.len() == PAUSE_MEMORY {
            self.pauses.pop_front();
        }
        self.pauses.push_back((from, to));
    }

    /// How long the whole server has heard nothing.
    pub(crate) fn server_silence(&self, now: Instant) -> Duration {
        self.last_frame_at
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    /// A frame was read at `at` somewhere on the server.
    pub(crate) fn heard(&mut self, at: Instant) {
        if self.last_frame_at.is_none_or(|t| at > t) {
            self.last_frame_at = Some(at);
        }
    }
}

/// Whether a member that stopped being heard at `last_heard` was already overdue when
/// the server's silence began at `since`: such a member gets no time back.
pub(crate) fn silent_before(since: Instant, last_heard: Instant, expel_after: Duration) -> bool {
    since.saturating_duration_since(last_heard) > expel_after / 2
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
fn hold_bound(m: &Member, now: Instant, paused: Duration) -> Option<(Instant, Instant, Instant)> {
    let expel_after = m.expel_after();
    let session = m.session_deadline();
    let real = m.heard_at + paused + 2 * expel_after;
    // Each deadline with its bound.
    let deadlines = [
        Some((session, (session + expel_after).min(real.max(session)))),
        Some((m.progress_deadline, m.progress_deadline + expel_after)),
        m.revoke_deadline().map(|d| (d, d + expel_after)),
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

// The guards' side of the coordinator: traffic in, decisions out.
impl Coordinator {
    /// The pause guard: closes a grace that is over; then, if woken later than the
    /// threshold past the earliest deadline, shifts members' deadlines by the delay and
    /// opens a new grace.
    pub(super) fn detect_pause(&mut self, now: Instant) {
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
        if late_by <= PAUSE_FLOOR || late_by <= self.pause_threshold() {
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
        self.guards.paused(since, now);
        self.guards.pause_woken_at = Some(now);
        self.outputs
            .push_back(Output::Event(Event::PauseDetected { late_by, until }));
    }

    /// The expulsion rate limit (a generic cell rate algorithm: one expulsion every
    /// `1 / rate`, a second's worth at once). An expiry over the limit reserves the next
    /// free slot and is held until then, so each waiting member is looked at again
    /// once, at its own slot, never past `bound`, nor past `look_by` (see
    /// [`hold_bound`]).
    fn rate_limit(
        &mut self,
        now: Instant,
        (bound, look_by): (Instant, Instant),
        group: &str,
        member: &str,
    ) -> Option<Hold> {
        let rate = self.config.max_expulsion_rate;
        if rate.is_nan() || rate <= 0.0 || now >= bound {
            return None;
        }
        let m = self.groups.get_mut(group)?.members.get_mut(member)?;
        if let Some(slot) = m.expel_slot {
            return (slot > now).then_some(Hold::RateLimit {
                recheck: slot.min(look_by),
            });
        }
        let interval = Duration::from_secs_f64((1.0 / rate).min(3600.0));
        let tolerance = Duration::from_secs(1).saturating_sub(interval);
        let tat = self.guards.tat.map_or(now, |t| t.max(now));
        self.guards.tat = Some(tat + interval);
        let earliest = tat.checked_sub(tolerance).unwrap_or(now);
        if earliest <= now {
            return None;
        }
        m.expel_slot = Some(earliest);
        self.outputs
            .push_back(Output::Event(Event::ExpulsionRateLimited));
        Some(Hold::RateLimit {
            recheck: earliest.min(look_by),
        })
    }

    /// The shell's report of how far behind the coordinator is at `now`: the lateness
    /// of its runtime in running ready tasks, or of the shard in handling queued
    /// requests, whichever is worse. Opens or extends a backlog (at least
    /// [`BACKLOG_FLOOR`]), or closes one not reported for [`BACKLOG_MEMORY`].
    pub fn observe_lag(&mut self, now: Instant, lag: Duration) {
        if lag >= BACKLOG_FLOOR {
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

    /// A frame from a member of this shard arrived at `now`.
    pub(super) fn member_heard(&mut self, now: Instant) {
        self.observe_traffic(now);
    }

    /// The server read a member frame at `at`, on any connection of any shard. The
    /// shell reports the whole server's latest before each batch, so the isolation
    /// guard judges silence across the server, not within one shard. Ends a held
    /// isolation: members that were not already overdue when the silence began get the
    /// silent time back; members silent since before it get nothing.
    pub fn observe_traffic(&mut self, at: Instant) {
        self.guards.heard(at);
        let Some(since) = self.guards.isolated_since else {
            return;
        };
        if at <= since {
            return;
        }
        self.guards.isolated_since = None;
        let silent_for = at.saturating_duration_since(since);
        // A pause within the silence already moved every member's clocks by the part
        // of it each one's silence overlapped: only the rest is the isolation's to give
        // back. (Given twice, it moved a session deadline up to a pause past the wake,
        // where it outlived a rejoin that shortened the session.)
        let unpaused = silent_for.saturating_sub(self.guards.paused_between(since, at));
        // Never a timer in the past: the pause guard would take it for a pause.
        let judge_at = self.now.map_or(at, |now| now.max(at));
        for group in self.groups.values_mut() {
            for m in group.members.values_mut() {
                // A member whose connection closed was not cut off by the coordinator.
                if m.conn.is_some() && !silent_before(since, m.heard_at, m.expel_after()) {
                    let paused = self.guards.paused_between(m.heard_at, at);
                    m.give_back(at, unpaused, paused);
                }
                if m.expired(judge_at) {
                    // Held past its deadline and given nothing back: judged now, not at
                    // its next recheck.
                    let key = TimerKey::Member {
                        group: group.name.clone(),
                        member: m.id.clone(),
                    };
                    self.timers.schedule(&mut m.timer_at, judge_at, key);
                }
            }
        }
        self.outputs
            .push_back(Output::Event(Event::IsolationEnded { silent_for }));
    }

    /// How late a wake-up must be to count as a pause of the coordinator: a quarter of
    /// the shortest expel threshold in the shard (a stall that ate that much of a
    /// member's allowed silence is the coordinator's, not the member's), at least
    /// [`PAUSE_FLOOR`] and at most [`CoreConfig::pause_guard`]. Scans the
    /// members; asked only when a wake-up is later than the floor.
    pub(super) fn pause_threshold(&self) -> Duration {
        let shortest = self
            .groups
            .values()
            .flat_map(|g| g.members.values())
            .map(|m| m.expel_after())
            .min()
            .unwrap_or(self.config.pause_guard);
        self.quarter_of(shortest)
    }

    /// A quarter of `expel_after`, at least [`PAUSE_FLOOR`] and at most
    /// [`CoreConfig::pause_guard`]: both how late a wake-up must be to be a pause and
    /// how long the grace after one lasts.
    fn quarter_of(&self, expel_after: Duration) -> Duration {
        (expel_after / 4).clamp(PAUSE_FLOOR, self.config.pause_guard.max(PAUSE_FLOOR))
    }

    /// Every group's members counted at `now`, once per instant.
    fn census(&mut self, now: Instant) -> Census {
        if let Some((at, census)) = self.guards.census {
            if at == now {
                return census;
            }
        }
        let mut census = Census::default();
        for g in self.groups.values() {
            for m in g.members.values() {
                census.count(now, m.conn.is_some(), m.heard_at, m.expel_after());
            }
        }
        self.guards.census = Some((now, census));
        census
    }

    /// Whether a guard holds an expiry of `member` at `now`. The pause, isolation and
    /// backlog guards hold expiries for silence, for progress and for an unanswered
    /// revocation alike: the progress counter and the acknowledgements travel on the
    /// heartbeats, so a coordinator that cannot hear a member (or has not read its
    /// frames yet) cannot hear them either. The rate limit holds expiries for silence
    /// only (see below).
    pub(super) fn expiry_hold(&mut self, now: Instant, group: &str, member: &str) -> Option<Hold> {
        let m = self.groups.get(group)?.members.get(member)?;
        // What expels the member, not its session timeout: under the adaptive detector
        // a member may be expelled after far less silence.
        let expel_after = m.expel_after();
        // After a pause, queued frames may carry heartbeats, progress and
        // acknowledgements alike, from any member whose silence the pause overlapped:
        // one whose connection closed (or that the coordinator has not seen since a
        // restart) may have frames queued on a new connection. A member heard since the
        // wake has nothing of its own in the pause: its later frames say more than any
        // queued one. (Held too, one that joined after the wake and whose connection
        // then closed was kept past its lease to the end of a grace that was never its
        // own.)
        if let (Some(_), Some(woken)) = (m.expiry(now), self.guards.pause_woken_at) {
            let grace = self.quarter_of(expel_after);
            let until = woken + grace;
            if now < until && m.heard_at <= woken {
                return Some(Hold::Pause { until });
            }
        }
        let paused = self.guards.paused_between(m.heard_at, now);
        let (deadline, bound, look_by) = hold_bound(m, now, paused)?;
        // Frames may be waiting unread from a member whose connection is open, that has
        // not been heard since a restore, or whose connection closed while its lease
        // still runs: it may be resuming on a new connection, whose first frames (an
        // acknowledgement, a beat) are among those waiting. The last is never held past
        // its lease, which ends its membership anyway (a crashed process closes its
        // sockets, and is expelled when its lease runs out, held or not).
        let resuming = m.conn_closed && m.lease_until > now;
        let may_wait = m.conn.is_some() || m.unheard || resuming;
        let (bound, look_by) = if resuming {
            (bound.min(m.lease_until), look_by.min(m.lease_until))
        } else {
            (bound, look_by)
        };
        // Not run since before the deadline, and running late: the core may have been
        // stalled over it, too briefly (or too close to its end) for the timers to run
        // late enough to show a pause or a backlog. Frames that arrived before the
        // deadline may still be unread, since the shell may run timers before it reads
        // every connection. One breather lets it read them; the core has then run since
        // the deadline, so this holds once.
        let first_late_run = self.ran_before.is_some_and(|ran| ran < deadline) && now > deadline;
        if first_late_run && may_wait {
            return Some(Hold::Backlog {
                recheck: now + BREATHER,
            });
        }
        // The rate limit counts expulsions for silence only. A storm of those is what a
        // trouble of the coordinator's own that no guard recognised looks like.
        // Expiries for progress or a revocation are judged on what the member's frames
        // said (a counter that did not move, an acknowledgement that did not come), and
        // where frames may be missing the guards here already hold them; a storm of
        // those comes from the members' side (one rebalance asking many at once, a stall
        // they share), where spreading the expulsions out only leaves partitions longer
        // with members that do not let go of them. (A member's reserved slot is also
        // forgotten whenever it is heard, which a member that beats without answering
        // is, every beat.) An expiry is for silence when that is what the member failed
        // first: one held past its revocation deadline until its session passed too is
        // expelled for the revocation.
        let rate_limited = m.session_deadline() <= now
            && matches!(m.expiry(now), Some((Expiry::Silence | Expiry::Closed, _)));
        // A member not heard since a restore has no connection yet, but its first frames,
        // on a new one, may be among those waiting; so may those of a member resuming
        // after its connection closed.
        if let (Some(b), true) = (self.guards.behind, may_wait) {
            if now.saturating_duration_since(b.last) <= BACKLOG_MEMORY {
                if now < bound {
                    let drain = b.worst.clamp(BACKLOG_FLOOR, BACKLOG_MEMORY);
                    return Some(Hold::Backlog {
                        recheck: look_by.min(now + drain),
                    });
                }
                self.outputs.push_back(Output::Event(Event::HoldExpired {
                    guard: Guard::Backlog,
                    group: group.to_owned(),
                    member_id: member.to_owned(),
                    held_for: now.saturating_duration_since(deadline),
                }));
                return None;
            }
        }
        let min = self.config.isolation_min_members;
        let evidence =
            min != 0 && m.conn.is_some() && self.guards.server_silence(now) >= expel_after / 2;
        let census = evidence.then(|| self.census(now));
        let Some(census) = census.filter(|c| c.mass_silence(min)) else {
            return if rate_limited {
                self.rate_limit(now, (bound, look_by), group, member)
            } else {
                None
            };
        };
        if now >= bound {
            self.outputs.push_back(Output::Event(Event::HoldExpired {
                guard: Guard::Isolation,
                group: group.to_owned(),
                member_id: member.to_owned(),
                held_for: now.saturating_duration_since(deadline),
            }));
            return None;
        }
        if self.guards.isolated_since.is_none() {
            let since = self.guards.last_frame_at.unwrap_or(now);
            self.guards.isolated_since = Some(since);
            self.outputs
                .push_back(Output::Event(Event::IsolationSuspected {
                    silent_for: now.saturating_duration_since(since),
                    members: census.connected,
                }));
        }
        Some(Hold::Isolation {
            recheck: look_by.min(now + expel_after / 4),
        })
    }
}
