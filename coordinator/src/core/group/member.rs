//! One member's clocks: its timeouts, its session (through its liveness watch), its
//! progress and revocation deadlines, its lease, and which of them expels it. What the
//! guards do to these clocks (a pause moves them, an isolation gives silence back) is
//! in `core/guards/`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::assignor::TopicPartition;
use super::super::liveness::{Detector, Fleet, Watch};
use super::super::ConnId;
use super::PartitionSet;

/// The timeouts a member asked for at join (and may change by rejoining), in whole
/// milliseconds as the join gives them: 16 bytes where four `Duration`s take 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// Silence longer than this expels the member.
    pub(crate) session_ms: u32,
    /// A progress counter stuck this long expels the member.
    pub(crate) progress_ms: u32,
    /// A revocation unacknowledged this long expels the member.
    pub(crate) rebalance_ms: u32,
    /// How long after a frame from the member it may still be acting on its partitions
    /// (at most `session`): the partitions of a member expelled, or whose connection
    /// closed, are granted that long after its last frame.
    pub(crate) lease_ms: u32,
}

impl Timeouts {
    pub(crate) fn session(self) -> Duration {
        Duration::from_millis(u64::from(self.session_ms))
    }

    pub(crate) fn progress(self) -> Duration {
        Duration::from_millis(u64::from(self.progress_ms))
    }

    pub(crate) fn rebalance(self) -> Duration {
        Duration::from_millis(u64::from(self.rebalance_ms))
    }

    pub(crate) fn lease(self) -> Duration {
        Duration::from_millis(u64::from(self.lease_ms))
    }
}

/// What a member declared about itself at join beyond its subscription and timeouts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct About {
    /// Its free-form client name.
    pub(crate) client_id: Box<str>,
    /// Where it runs and what it can take, if it declared any of it.
    pub(crate) placement: Option<Box<super::Placement>>,
}

/// One member of a group.
///
/// Laid out for the renewal, the coordinator's most frequent work: a member's lines
/// are rarely in cache when its heartbeat arrives (every member of the shard is
/// touched once per heartbeat interval), so a renewal costs about one wait for memory
/// per line it touches. The fields a renewal reads or writes come first, `liveness`
/// last among them with its own hot fields first, so that they fill the first
/// five cache lines (`RENEWAL_LINES`) of a 64-byte-aligned member, and the rest (ids,
/// partition sets, what only a rebalance or a timer reads) follow. Rust lays out a
/// struct as it likes, which spread a renewal over 7 of the 8 lines of a member, hence
/// `repr(C)`; `renewal_fields_fill_the_first_lines` checks the layout.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Member {
    // What a renewal touches.
    pub(crate) conn: Option<ConnId>,
    pub(crate) timeouts: Timeouts,
    pub(crate) progress: u64,
    /// Generation of the member's current assignment.
    pub(crate) generation: u32,
    /// The member's process stood down and has not been heard since.
    pub(crate) stood_down: bool,
    /// The member's connection closed (its process most likely crashed: a crashed
    /// process closes its sockets) and it has not been heard on another since: it is
    /// expelled when its lease runs out instead of at its session deadline.
    pub(crate) conn_closed: bool,
    /// What the member owes since it was restored from a snapshot ([`UNHEARD`],
    /// [`NO_BEAT`]); 0 for a member heard since, or never restored. One byte where two
    /// flags would push the renewal's fields onto another line.
    pub(crate) since_restore: u8,
    /// The last target computed while the member was suspect left out partitions it
    /// would otherwise have been given: it gets a rebalance when it recovers.
    pub(crate) restricted: bool,
    /// The latest instant the member's own lease can run to: every answer the
    /// coordinator sends promises the member its lease timeout from the moment the
    /// member sent the request, which is never later than the moment it was received.
    /// Only ever moves later, except when the member stands down (it then ends now).
    /// Partitions of a removed member are held until then.
    pub(crate) lease_until: Instant,
    /// When a frame from the member last arrived. Unlike the liveness policy's view,
    /// never shifted by a guard: the guards judge real silence by it.
    pub(crate) heard_at: Instant,
    /// The slot the expulsion rate limit reserved for the member's expiry.
    pub(crate) expel_slot: Option<Instant>,
    pub(crate) timer_at: Option<Instant>,
    pub(crate) progress_deadline: Instant,
    pub(crate) last_progress_at: Instant,
    /// The partitions the member is asked to release, in order, each with when it was
    /// first asked (shifted by the coordinator's own pauses and by what isolations gave
    /// back); empty when it releases nothing. Each revocation has its own rebalance
    /// timeout: the oldest one still unanswered decides when the member is expelled
    /// ([`Self::revoke_deadline`]).
    pub(crate) revoking_since: Box<[Revocation]>,
    /// Its hot fields first, its cold ones last (see [`Watch`]).
    pub(crate) liveness: Watch,
    // What a renewal does not touch.
    pub(crate) id: Arc<str>,
    pub(crate) instance_id: Option<Box<str>>,
    /// What it declared about itself that only joins, describes, snapshots and
    /// rebalances read (one box, so that a member stays within 512 bytes).
    pub(crate) about: Box<About>,
    pub(crate) join_token: u64,
    /// Topic indexes, ascending.
    pub(crate) subscription: Box<[u32]>,
    /// Partitions granted to the member and not yet released.
    pub(crate) owned: PartitionSet,
    /// What the last rebalance wants the member to own.
    pub(crate) target: PartitionSet,
    /// The revoke set last pushed, to push again only when it changes.
    pub(crate) revoke_pushed: Box<[TopicPartition]>,
    /// Partitions the member released, to tell a late commit "revoked" from "not owner".
    pub(crate) released: PartitionSet,
    /// The assignment changed since it was last pushed.
    pub(crate) assignment_dirty: bool,
    /// Restores the wait for progress that began at `progress_credit_at` has been
    /// carried through (saturating; see [`Self::progress_restores`]): each one halves
    /// its checkpoint interval ([`checkpoint_interval`]).
    pub(crate) progress_restores: u8,
    /// What isolations have given back to the current wait for progress, in all: at
    /// most one expel threshold (whole milliseconds, rounded up, so that the field
    /// takes padding and a member still fits 512 bytes).
    pub(crate) progress_credit_ms: u32,
    /// The progress counter the wait `progress_credit_ms` belongs to began at: progress
    /// that moves the counter starts a new wait with nothing given back, without a write
    /// on the heartbeat path.
    pub(crate) progress_credit_at: u64,
    /// When the member's waits were last written into a snapshot (taken, or asked for
    /// by a checkpoint): a wait that has run a checkpoint interval past it asks for
    /// another ([`Self::checkpoint_due`]), so that a restore loses little of it.
    pub(crate) noted_at: Instant,
}

/// In [`Member::since_restore`]: restored from a snapshot and not heard from since. It
/// may have died around the restart, so it is granted nothing new until it is heard (it
/// keeps its session).
pub(crate) const UNHEARD: u8 = 1;

/// In [`Member::since_restore`]: restored, and no heartbeat of it read since. Its waits
/// for progress and for revocations are judged only once one is (see
/// [`Member::judged_progress`]), or, for a revocation carried over, once the session
/// the restore gave it has run out ([`Revocation::deferred_to`]).
pub(crate) const NO_BEAT: u8 = 2;

/// Cache lines of a [`Member`] that a renewal touches (see its layout).
#[cfg(test)]
pub(crate) const RENEWAL_LINES: usize = 5;

impl Member {
    pub(crate) fn session_timeout(&self) -> Duration {
        self.timeouts.session()
    }

    pub(crate) fn progress_timeout(&self) -> Duration {
        self.timeouts.progress()
    }

    pub(crate) fn rebalance_timeout(&self) -> Duration {
        self.timeouts.rebalance()
    }

    pub(crate) fn lease_timeout(&self) -> Duration {
        self.timeouts.lease()
    }

    /// The silence that expels the member: its session timeout under the fixed rule,
    /// what the adaptive detector learned (at most the session timeout) under the
    /// other. The guards scale by it: a pause, an isolation and how long they hold a
    /// member are measured against what would expel it, not against a session timeout
    /// its detector may never let it reach.
    pub(crate) fn expel_after(&self) -> Duration {
        self.liveness.thresholds().expel_after
    }

    /// Loads a field from each of the five cache lines a renewal touches,
    /// ahead of the renewal (see `Coordinator::touch_members`).
    pub(crate) fn touch(&self) {
        std::hint::black_box((self.conn, self.heard_at, self.liveness.touch()));
    }

    pub(crate) fn session_deadline(&self) -> Instant {
        self.liveness.deadline()
    }

    /// Whether a deadline that expels the member has passed at `now`: its session
    /// (silence), its progress, or its oldest unanswered revocation.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.session_deadline() <= now
            || self.judged_progress().is_some_and(|p| p <= now)
            || self.judged_revocation().is_some_and(|r| r <= now)
    }

    /// The progress deadline, once the member can be judged by it: not while no
    /// heartbeat of it has been read since a restore. A restore carries the elapsed part
    /// of each wait over, so a deadline may have passed by the time the member's first
    /// heartbeat arrives, and that heartbeat carries the progress (and the
    /// acknowledgements) made before the restart, which the store may never have seen.
    /// A member that is never heard again is expelled at its session deadline, counted
    /// from the restore. One heard only through other requests (a rejoin, a commit)
    /// keeps its session; a revocation the restore carried over is judged even so once
    /// the session the restore gave it has run out ([`Self::judged_revocation`]).
    pub(crate) fn judged_progress(&self) -> Option<Instant> {
        (!self.awaiting_beat()).then_some(self.progress_deadline)
    }

    /// Restored and not heard from since ([`UNHEARD`]).
    pub(crate) fn unheard(&self) -> bool {
        self.since_restore & UNHEARD != 0
    }

    /// Restored and no heartbeat of it read since ([`NO_BEAT`]).
    pub(crate) fn awaiting_beat(&self) -> bool {
        self.since_restore & NO_BEAT != 0
    }

    /// The revocation deadline ([`Self::revoke_deadline`]) as the member is judged by
    /// it: while no heartbeat of it has been read since a restore (see
    /// [`Self::judged_progress`]), each revocation the restore carried over is judged
    /// no earlier than the end of the session the restore gave the member
    /// ([`Revocation::deferred_to`]). A rejoin renews the member's session, not that: a
    /// member that rejoins without acknowledging keeps the time its revocation has
    /// waited, as if it had beaten, and does not hold the partition for as long as it
    /// keeps rejoining.
    pub(crate) fn judged_revocation(&self) -> Option<Instant> {
        if !self.awaiting_beat() {
            return self.revoke_deadline();
        }
        let timeout = self.rebalance_timeout();
        self.revoking_since
            .iter()
            .map(|r| (r.since + timeout).max(r.deferred_to))
            .min()
    }

    /// Of the member's deadlines that have passed at `now` (silence, its lease after its
    /// connection closed, progress, its oldest unanswered revocation), the one that
    /// passed first, and when; at the same instant in that order. A guard may hold a
    /// member past one deadline until another passes too: the expulsion names the one
    /// the member failed first, not whichever is looked at first.
    pub(crate) fn expiry(&self, now: Instant) -> Option<(Expiry, Instant)> {
        [
            (Expiry::Silence, Some(self.session_deadline())),
            (Expiry::Closed, self.conn_closed.then_some(self.lease_until)),
            (Expiry::Progress, self.judged_progress()),
            (Expiry::Revocation, self.judged_revocation()),
        ]
        .into_iter()
        .filter_map(|(expiry, deadline)| Some((expiry, deadline.filter(|&d| d <= now)?)))
        .min_by_key(|&(_, deadline)| deadline)
    }

    /// When the member's timer must fire next: its next deadline
    /// ([`Self::next_judgment`]) or its next checkpoint ([`Self::checkpoint_due`]).
    pub(crate) fn next_deadline(&self) -> Instant {
        let next = self.next_judgment();
        self.checkpoint_due().map_or(next, |due| next.min(due))
    }

    /// The member's next deadline: session, suspicion, progress, revocation, or its
    /// lease once its connection closed. Only what a renewal reads: a heartbeat asks
    /// whether it came earlier. (A checkpoint never does: renewals only move it later.)
    pub(crate) fn next_judgment(&self) -> Instant {
        let mut next = self.session_deadline();
        for at in [
            self.judged_progress(),
            self.liveness.suspect_at(),
            self.judged_revocation(),
        ]
        .into_iter()
        .flatten()
        {
            next = next.min(at);
        }
        if self.conn_closed {
            next = next.min(self.lease_until);
        }
        next
    }

    /// Any frame from the member renews its session (and, with the answer, its lease).
    /// Returns whether it had stood down: the snapshot must say it no longer has.
    #[must_use]
    pub(crate) fn heard(&mut self, now: Instant) -> bool {
        self.renew_session(now);
        self.lease_until = self.lease_until.max(now + self.lease_timeout());
        std::mem::take(&mut self.stood_down)
    }

    /// The member's session runs from `now` (its lease is another matter: see
    /// [`Self::heard`]).
    pub(crate) fn renew_session(&mut self, now: Instant) {
        self.liveness.heard(now);
        self.heard_at = self.heard_at.max(now);
        self.expel_slot = None;
    }

    /// The member now talks over `conn` (a join, or a request on a new connection).
    /// Returns whether it was waiting to be heard (its connection had closed, or it was
    /// not heard since a restore): it takes grants again, so the caller reconciles.
    #[must_use]
    pub(crate) fn bind(&mut self, conn: ConnId) -> bool {
        self.conn = Some(conn);
        let closed = std::mem::take(&mut self.conn_closed);
        let unheard = self.unheard();
        self.since_restore &= !UNHEARD;
        closed || unheard
    }

    /// Whether new partitions may be granted to the member at `now`: not while its
    /// process stood down (it is gone until its replacement arrives), its connection is
    /// closed (it is most likely gone, and expelled when its lease runs out), it has not
    /// been heard since a restore, or it is suspect (it keeps what it owns).
    pub(crate) fn takes_grants(&self, now: Instant) -> bool {
        !self.stood_down && !self.conn_closed && !self.unheard() && !self.liveness.is_suspect(now)
    }

    /// Applies the timeouts of a rejoin. The session deadline follows the new session
    /// timeout at once; the lease already promised is kept (it only grows), so a shorter
    /// timeout never frees partitions before the member's longer lease ran out. New
    /// session or lease timeouts (so a new heartbeat rhythm) start the member's arrivals
    /// over. Returns whether anything changed.
    pub(crate) fn set_timeouts(
        &mut self,
        timeouts: Timeouts,
        detector: &dyn Detector,
        shadow: Option<&dyn Detector>,
        fleet: &Fleet,
    ) -> bool {
        let old = self.timeouts;
        let changed = timeouts != old;
        self.timeouts = timeouts;
        if (timeouts.session_ms, timeouts.lease_ms) != (old.session_ms, old.lease_ms) {
            self.liveness
                .reset(timeouts.session(), detector, shadow, fleet);
        }
        if timeouts.progress_ms != old.progress_ms {
            // What the guards added (a pause or an isolation the wait overlapped) is the
            // coordinator's, not the member's: it stays with the new timeout.
            let shifted = self
                .progress_deadline
                .saturating_duration_since(self.last_progress_at + old.progress());
            self.progress_deadline = self.last_progress_at + timeouts.progress() + shifted;
        }
        changed
    }

    /// The progress clock renews only when the counter advances. Every heartbeat reports
    /// it: the member's waits are judged from its first one after a restore on.
    pub(crate) fn report_progress(&mut self, now: Instant, progress: u64) {
        if self.since_restore & NO_BEAT != 0 {
            self.since_restore &= !NO_BEAT;
        }
        if progress > self.progress {
            self.progress = progress;
            self.progress_deadline = now + self.progress_timeout();
            self.last_progress_at = now;
        }
    }

    /// How many restores the current wait for progress has been carried through: those
    /// recorded for the counter it began at (progress starts a new wait, without a
    /// write on the heartbeat path, as for [`Self::progress_credit_ms`]).
    pub(crate) fn progress_restores(&self) -> u8 {
        if self.progress_credit_at == self.progress {
            self.progress_restores
        } else {
            0
        }
    }

    /// How long the current wait for progress has counted against the member at `now`:
    /// its progress timeout less what remains of it (pauses and what isolations gave
    /// back are not counted).
    pub(crate) fn progress_waited(&self, now: Instant) -> Duration {
        let remaining = self.progress_deadline.saturating_duration_since(now);
        self.progress_timeout().saturating_sub(remaining)
    }

    /// When the member's waits next need a checkpoint: a wait that can expel it (for
    /// progress, or a revocation) has counted a checkpoint interval
    /// ([`checkpoint_interval`]) past what the last snapshot recorded of it (or since it
    /// began, if later). The snapshot then taken records it again, so a restore resumes
    /// it with at most that much of its elapsed time unrecorded.
    pub(crate) fn checkpoint_due(&self) -> Option<Instant> {
        let progress = {
            let every = checkpoint_interval(self.progress_timeout(), self.progress_restores());
            let began = self
                .progress_deadline
                .checked_sub(self.progress_timeout())
                .unwrap_or(self.noted_at);
            began.max(self.noted_at) + every
        };
        let revocations = self.revoking_since.iter().map(|r| {
            let every = checkpoint_interval(self.rebalance_timeout(), r.restores);
            r.since.max(self.noted_at) + every
        });
        revocations.chain([progress]).min()
    }

    pub(crate) fn revoking(&self) -> Vec<TopicPartition> {
        self.owned.difference(&self.target).copied().collect()
    }

    /// When the member is expelled for not releasing a partition: a rebalance timeout
    /// (the one it asked for last) after the oldest revocation it has not answered.
    pub(crate) fn revoke_deadline(&self) -> Option<Instant> {
        let oldest = self.revoking_since.iter().map(|r| r.since).min()?;
        Some(oldest + self.rebalance_timeout())
    }

    /// Brings [`Self::revoking_since`] up to what the member is asked to release now: a
    /// partition newly asked is waited for from `now`, one still asked keeps its start
    /// (and what isolations gave it), one released or no longer asked is dropped.
    pub(crate) fn note_revocations(&mut self, now: Instant) {
        let old = &self.revoking_since;
        let kept = |tp: &TopicPartition| match old.binary_search_by(|r| r.tp.cmp(tp)) {
            Ok(i) => old[i],
            Err(_) => Revocation {
                tp: *tp,
                since: now,
                credit: Duration::ZERO,
                restores: 0,
                deferred_to: now,
            },
        };
        let revoking: Box<[Revocation]> = self.owned.difference(&self.target).map(kept).collect();
        self.revoking_since = revoking;
    }
}

impl Member {
    /// Drops from [`Self::revoking_since`] what the member is no longer asked to release
    /// (released, or given back by a newer target), asking nothing new: the throttled
    /// twin of the first half of [`Self::note_revocations`]. Returns how many it dropped.
    pub(crate) fn prune_revocations(&mut self) -> usize {
        let before = self.revoking_since.len();
        if self
            .revoking_since
            .iter()
            .all(|r| self.owned.contains(&r.tp) && !self.target.contains(&r.tp))
        {
            return 0;
        }
        let kept: Box<[Revocation]> = self
            .revoking_since
            .iter()
            .filter(|r| self.owned.contains(&r.tp) && !self.target.contains(&r.tp))
            .copied()
            .collect();
        self.revoking_since = kept;
        before - self.revoking_since.len()
    }

    /// Partitions the member owns, no longer targets and is not asked to release yet:
    /// revocations a cap keeps waiting (0 when nothing caps them, once
    /// [`Self::note_revocations`] ran).
    pub(crate) fn revocations_waiting(&self) -> usize {
        self.owned
            .difference(&self.target)
            .count()
            .saturating_sub(self.revoking_since.len())
    }

    /// Asks the member to release up to `limit` more of the partitions waiting for it
    /// ([`Self::revocations_waiting`]), lowest first, each waited for from `now`.
    /// Returns how many it asked and how many still wait.
    pub(crate) fn ask_revocations(&mut self, now: Instant, limit: usize) -> (usize, usize) {
        let old = &self.revoking_since;
        let mut asked = 0;
        let mut waiting = 0;
        let mut next: Vec<Revocation> = Vec::with_capacity(old.len() + limit.min(64));
        for tp in self.owned.difference(&self.target) {
            match old.binary_search_by(|r| r.tp.cmp(tp)) {
                Ok(i) => next.push(old[i]),
                Err(_) if asked < limit => {
                    asked += 1;
                    next.push(Revocation {
                        tp: *tp,
                        since: now,
                        credit: Duration::ZERO,
                        restores: 0,
                        deferred_to: now,
                    });
                }
                Err(_) => waiting += 1,
            }
        }
        if asked > 0 {
            self.revoking_since = next.into_boxed_slice();
        }
        (asked, waiting)
    }
}

/// Which of a member's deadlines expels it ([`Member::expiry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Its session: silence.
    Silence,
    /// Its connection closed and its lease ran out.
    Closed,
    /// Its progress counter did not move for its progress timeout.
    Progress,
    /// It did not acknowledge a revocation within its rebalance timeout.
    Revocation,
}

/// A partition a member is asked to release.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Revocation {
    pub(crate) tp: TopicPartition,
    /// When it was first asked, moved later by the coordinator's pauses and by what
    /// isolations gave back to its wait.
    pub(crate) since: Instant,
    /// What isolations gave back to its wait, in all: at most one expel threshold.
    pub(crate) credit: Duration,
    /// Restores its wait has been carried through (saturating): each one halves its
    /// checkpoint interval ([`checkpoint_interval`]).
    pub(crate) restores: u8,
    /// A wait a restore carried over is not judged, until a heartbeat of the member is
    /// read, before this: the end of the session the restore gave the member (moved by
    /// the coordinator's pauses). That heartbeat may carry an acknowledgement the store
    /// never saw; a rejoin, which carries none, does not put it off. For a revocation
    /// asked since the restore, when it was asked: nothing to wait for.
    pub(crate) deferred_to: Instant,
}

/// A wait that can expel a member is recorded again (a checkpoint: its group is
/// snapshotted) whenever it has counted this share of its timeout past what the last
/// snapshot recorded of it.
pub(crate) const CHECKPOINT_SHARE: u32 = 8;

/// After this many restores within one wait its checkpoint interval stops halving.
pub(crate) const CHECKPOINT_HALVINGS: u8 = 6;

/// A checkpoint interval is never shorter than this.
pub(crate) const CHECKPOINT_FLOOR: Duration = Duration::from_millis(10);

/// How often a wait of `timeout` that has been carried through `restores` restores is
/// checkpointed: an eighth of its timeout, halved by each restore (at most
/// [`CHECKPOINT_HALVINGS`] times), never below [`CHECKPOINT_FLOOR`]. A restore resumes a
/// wait from what the store recorded, so the running time between a wait's last
/// checkpoint and a crash is not counted: at most one interval (and the time the write
/// of the checkpoint takes) per restore. Halving it at each restore bounds the total over
/// any number of restores: an eighth, a sixteenth and so on add up to a quarter of the
/// timeout (see DETECTION.md, "Restarts and takeovers").
pub(crate) fn checkpoint_interval(timeout: Duration, restores: u8) -> Duration {
    let halvings = restores.min(CHECKPOINT_HALVINGS);
    (timeout / CHECKPOINT_SHARE / (1u32 << halvings)).max(CHECKPOINT_FLOOR)
}
