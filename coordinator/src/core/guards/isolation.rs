//! The isolation guard: the whole server heard nothing while most of a shard's
//! connected members fell silent, so the silence is more likely the coordinator's
//! (its network went away) than theirs. Holds their expiries while it lasts, and gives
//! the silence back, capped, when frames return (see `mod.rs` for the rule and its
//! bound).

use std::time::{Duration, Instant};

use super::super::group::Member;
use super::super::timers::TimerKey;
use super::super::{Coordinator, Event, Output};
use super::bound::{Span, Subject};
use super::{Guard, Guards, Hold, Verdict};

/// Share of a shard's connected members that must be overdue before a mass silence is
/// blamed on the coordinator (Kubernetes' node lifecycle controller uses 55% of a zone).
pub const ISOLATION_SHARE_PERCENT: usize = 55;

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

/// Whether a member that stopped being heard at `last_heard` was already overdue when
/// the server's silence began at `since`: such a member gets no time back.
pub(crate) fn silent_before(since: Instant, last_heard: Instant, expel_after: Duration) -> bool {
    since.saturating_duration_since(last_heard) > expel_after / 2
}

impl Guards {
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

impl Coordinator {
    /// A frame from a member of this shard arrived at `now`.
    pub(in super::super) fn member_heard(&mut self, now: Instant) {
        self.observe_traffic(now);
    }

    /// The server read a member frame at `at`, on any connection of any shard. The
    /// shell reports the whole server's latest before each batch, so the isolation
    /// guard judges silence across the server, not within one shard. Ends a held
    /// isolation: members that were not already overdue when the silence began get the
    /// silent time back; members silent since before it get nothing.
    pub fn observe_traffic(&mut self, at: Instant) {
        self.trace_silence(at);
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
        let unpaused = silent_for.saturating_sub(self.guards.pauses.between(since, at));
        // Never a timer in the past: the pause guard would take it for a pause.
        let judge_at = self.now.map_or(at, |now| now.max(at));
        for group in self.groups.values_mut() {
            for m in group.members.values_mut() {
                // A member whose connection closed was not cut off by the coordinator.
                if m.conn.is_some() && !silent_before(since, m.heard_at, m.expel_after()) {
                    let paused = self.guards.pauses.between(m.heard_at, at);
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

    /// The isolation guard's verdict on an expiry: evidence is a server silent for at
    /// least half the member's expel threshold while enough of the shard's connected
    /// members are overdue ([`Census::mass_silence`]). A member whose connection closed
    /// is not evidence: a crashed process closes its sockets.
    pub(super) fn isolation_hold(
        &mut self,
        m: &Subject,
        span: &Span,
        now: Instant,
        group: &str,
        member: &str,
    ) -> Verdict {
        let min = self.config.isolation_min_members;
        let evidence =
            min != 0 && m.connected && self.guards.server_silence(now) >= m.expel_after / 2;
        let census = evidence.then(|| self.census(now));
        let Some(census) = census.filter(|c| c.mass_silence(min)) else {
            return Verdict::NoEvidence;
        };
        if now >= span.bound {
            self.hold_expired(Guard::Isolation, span, now, group, member);
            return Verdict::Expired;
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
        Verdict::Hold(Hold::Isolation {
            recheck: span.look_by.min(now + m.expel_after / 4),
        })
    }
}

impl Member {
    /// Gives back a silence of `silent_for`, ended by frames at `at`, that the isolation
    /// guard blamed on the coordinator. The session gets up to all of it, but never past
    /// two expel thresholds of real silence (`paused`: the part of the time since the
    /// member's last frame the coordinator was paused, which is not its silence): a
    /// member that died as the silence began is still expelled within that bound. The
    /// progress counter and the acknowledgements travel on the same frames, so the
    /// progress and revocation clocks get back the part of their wait the silence
    /// overlapped (a revocation asked during it waited less),
    /// at most one expel threshold *over all the isolations of the wait*: no more than
    /// the guards may hold them past their deadlines, and a bound in wall time. Given
    /// per isolation, a member that beats but never acknowledges (or never progresses)
    /// kept its partitions for as long as isolations kept coming, whatever its rebalance
    /// (or progress) timeout. The session needs no such cap: its bound is already counted
    /// from the member's last frame.
    pub(crate) fn give_back(&mut self, at: Instant, silent_for: Duration, paused: Duration) {
        let expel_after = self.expel_after();
        let cap = self.heard_at + paused + 2 * expel_after;
        let room = cap.saturating_duration_since(self.session_deadline());
        self.liveness.extend(silent_for.min(room));
        let most = silent_for.min(expel_after);
        let given = if self.progress_credit_at == self.progress {
            Duration::from_millis(u64::from(self.progress_credit_ms))
        } else {
            Duration::ZERO
        };
        let stuck = at.saturating_duration_since(self.last_progress_at);
        let more = most.min(stuck).min(expel_after.saturating_sub(given));
        self.progress_deadline += more;
        let total_ms = (given + more).as_nanos().div_ceil(1_000_000);
        self.progress_credit_ms = u32::try_from(total_ms).unwrap_or(u32::MAX);
        if self.progress_credit_at != self.progress {
            // A new wait: the restores counted were another's.
            self.progress_restores = 0;
        }
        self.progress_credit_at = self.progress;
        for r in &mut self.revoking_since {
            let waited = at.saturating_duration_since(r.since);
            let more = most.min(waited).min(expel_after.saturating_sub(r.credit));
            r.since += more;
            r.credit += more;
        }
    }
}
