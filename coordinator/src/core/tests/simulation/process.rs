//! The client processes: a membership (the client crate's state machine), its
//! connection to the coordinator (stall detection, reconnection with backoff), and the
//! application around it (progress, releasing revoked partitions, commits), plus what
//! can happen to a process: network cuts and crashes.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rand::Rng;

use super::client::{Backoff, Membership, ReqId, Tp};
use super::oracle::Crash;
use super::world::{CoreState, Ev, ToClient, World};
use crate::core::ConnId;

/// How an application answers revocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AckPolicy {
    /// Within 30 ms.
    Prompt,
    /// After 0.3 to 1.5 rebalance timeouts.
    Late,
    /// Not until the faults stop.
    Never,
}

/// One client process: a membership, its connection and its application.
#[derive(Debug)]
pub(super) struct Process {
    pub(super) group: usize,
    pub(super) m: Membership,
    /// For static members: how many processes used the instance id before this one.
    pub(super) epoch: u64,
    pub(super) alive: bool,
    pub(super) conn: Option<ConnId>,
    pub(super) connecting: Option<u64>,
    pub(super) attempts: u64,
    pub(super) reconnect_at: Option<Instant>,
    pub(super) conn_backoff: Backoff,
    /// Until when the process's network is cut.
    pub(super) cut_until: Instant,
    /// Whether the cut holds traffic until it heals (as TCP retransmits) rather than
    /// killing the connection's stream.
    pub(super) cut_hold: bool,
    pub(super) last_frame_at: Instant,
    /// Requests written and not answered, with when (the driver's stall detection).
    pub(super) pending: HashMap<ReqId, Instant>,
    /// Leaves sent, and whether the application had released everything by then.
    pub(super) leave_released_all: HashMap<ReqId, bool>,
    pub(super) progress: u64,
    pub(super) stalled_until: Option<Instant>,
    pub(super) ack: AckPolicy,
    pub(super) acks_due: BTreeMap<Tp, Instant>,
    pub(super) next_commit: Instant,
    pub(super) offset: i64,
    pub(super) wake_at: Option<Instant>,
}

impl Process {
    pub(super) fn is_live(&self) -> bool {
        self.alive && !self.m.is_finished()
    }
}

impl World {
    pub(super) fn add_process(
        &mut self,
        group: usize,
        m: Membership,
        epoch: u64,
        ack: AckPolicy,
    ) -> usize {
        let now = self.now;
        let p = self.procs.len();
        self.procs.push(Process {
            group,
            m,
            epoch,
            alive: true,
            conn: None,
            connecting: None,
            attempts: 0,
            reconnect_at: None,
            conn_backoff: Backoff::new(Duration::from_millis(50), Duration::from_secs(5)),
            cut_until: now,
            cut_hold: false,
            last_frame_at: now,
            pending: HashMap::new(),
            leave_released_all: HashMap::new(),
            progress: 0,
            stalled_until: None,
            ack,
            acks_due: BTreeMap::new(),
            next_commit: now,
            offset: 0,
            wake_at: None,
        });
        self.process_wake(p);
        p
    }

    pub(super) fn deliver(&mut self, p: usize, conn: ConnId, msg: ToClient) {
        let now = self.now;
        let proc = &mut self.procs[p];
        if !proc.alive || proc.conn != Some(conn) || self.broken.contains(&conn) {
            return;
        }
        proc.last_frame_at = now;
        if self.oracle.verbose {
            let line = format!("process {p} receives {msg:?}");
            self.oracle.log(now, line);
        }
        let proc = &mut self.procs[p];
        match msg {
            ToClient::Response { id, response } => {
                proc.pending.remove(&id);
                proc.m.handle_response(id, response, now);
            }
            ToClient::Push(push) => {
                if proc.m.accepts_push(&push) || proc.m.accepts_early_push(&push) {
                    proc.m.handle_push(push, now);
                }
            }
        }
        self.process_wake(p);
    }

    pub(super) fn ack_delay(&mut self, p: usize) -> Duration {
        let proc = &self.procs[p];
        let policy = if self.quiet {
            AckPolicy::Prompt
        } else {
            proc.ack
        };
        match policy {
            AckPolicy::Prompt => self
                .rng
                .gen_range(Duration::ZERO..Duration::from_millis(30)),
            AckPolicy::Late => proc
                .m
                .settings
                .rebalance_timeout
                .mul_f64(self.rng.gen_range(0.3..1.5)),
            AckPolicy::Never => Duration::from_secs(24 * 3600),
        }
    }

    /// Runs a process: its application, its membership's timers, its connection, and
    /// whatever it has to send.
    pub(super) fn process_wake(&mut self, p: usize) {
        let now = self.now;
        if !self.procs[p].alive {
            return;
        }
        // The application: progress, and releasing what it is asked to.
        let proc = &mut self.procs[p];
        if proc.stalled_until.is_none_or(|t| now >= t) {
            proc.progress += 1;
            proc.m.set_progress(proc.progress, now);
        }
        let revoking = proc.m.revoking();
        proc.acks_due.retain(|tp, _| revoking.contains(tp));
        let fresh: Vec<Tp> = revoking
            .into_iter()
            .filter(|tp| !proc.acks_due.contains_key(tp))
            .collect();
        let asked = !fresh.is_empty();
        for tp in fresh {
            let d = self.ack_delay(p);
            self.procs[p].acks_due.insert(tp, now + d);
        }
        // A stall waits to be aimed at the next revocation's deadline.
        if asked && self.aim_next_revocation && !self.quiet && self.aim_at_revocation(p) {
            self.aim_next_revocation = false;
        }
        let proc = &mut self.procs[p];
        let due: Vec<Tp> = proc
            .acks_due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(tp, _)| tp.clone())
            .collect();
        if !due.is_empty() {
            for tp in &due {
                proc.acks_due.remove(tp);
            }
            proc.m.ack(due, now);
        }
        proc.m.handle_timeout(now);
        // The connection: stall detection, reconnection.
        if proc.conn.is_some() && self.stall_deadline(p).is_some_and(|d| d <= now) {
            self.client_disconnect(p);
        }
        let proc = &self.procs[p];
        if proc.conn.is_none()
            && proc.connecting.is_none()
            && proc.reconnect_at.is_none_or(|t| t <= now)
        {
            self.start_connect(p);
        }
        // What the membership sends.
        for _ in 0..8 {
            let Some((id, request)) = self.procs[p].m.poll_transmit(now) else {
                break;
            };
            self.send_request(p, id, request);
        }
        // Commits, in groups that commit.
        let proc = &self.procs[p];
        if self.groups[proc.group].commits
            && proc.m.is_active()
            && proc.conn.is_some()
            && proc.next_commit <= now
        {
            let held = proc.m.held();
            let next = now
                + self
                    .rng
                    .gen_range(Duration::from_millis(500)..Duration::from_secs(3));
            let pick = (!held.is_empty()).then(|| self.rng.gen_range(0..held.len()));
            let proc = &mut self.procs[p];
            proc.next_commit = next;
            if let Some(i) = pick {
                proc.offset += 1;
                if let Some((id, request)) = proc.m.commit(&held[i], proc.offset) {
                    self.send_request(p, id, request);
                }
            }
        }
        self.schedule_wake(p);
    }

    pub(super) fn stall_deadline(&self, p: usize) -> Option<Instant> {
        let proc = &self.procs[p];
        let oldest = proc
            .pending
            .values()
            .filter(|sent| **sent >= proc.last_frame_at)
            .min()?;
        Some(*oldest + proc.m.settings.session_timeout)
    }

    pub(super) fn schedule_wake(&mut self, p: usize) {
        let now = self.now;
        let stall = self.stall_deadline(p);
        let proc = &self.procs[p];
        if !proc.alive {
            return;
        }
        let mut next = proc.m.poll_timeout();
        let mut add = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        add(proc.acks_due.values().min().copied());
        if proc.conn.is_none() && proc.connecting.is_none() {
            add(proc.reconnect_at);
        }
        add(stall);
        if self.groups[proc.group].commits && proc.m.is_active() && proc.conn.is_some() {
            add(Some(proc.next_commit));
        }
        if proc.m.wants_progress() {
            add(Some(
                proc.stalled_until
                    .filter(|t| *t > now)
                    .unwrap_or(now + Duration::from_millis(100)),
            ));
        }
        let Some(next) = next else {
            return;
        };
        // Nothing is due twice at the same instant.
        let next = next.max(now + Duration::from_micros(100));
        if proc.wake_at.is_none_or(|w| next < w) {
            self.procs[p].wake_at = Some(next);
            self.push(next, Ev::Wake(p));
        }
    }

    pub(super) fn start_connect(&mut self, p: usize) {
        let proc = &mut self.procs[p];
        proc.attempts += 1;
        let attempt = proc.attempts;
        proc.connecting = Some(attempt);
        let at = self.now
            + self
                .rng
                .gen_range(Duration::from_micros(500)..Duration::from_millis(10));
        self.push(at, Ev::Connected { proc: p, attempt });
    }

    pub(super) fn connected(&mut self, p: usize, attempt: u64) {
        let now = self.now;
        let proc = &self.procs[p];
        if !proc.alive || proc.connecting != Some(attempt) {
            return;
        }
        let ok = match self.state {
            CoreState::Down { .. } => false,
            CoreState::Paused { until, .. } => {
                // The handshake waits for the coordinator to run again.
                let at = until + self.rng.gen_range(Duration::ZERO..Duration::from_millis(5));
                self.push(at, Ev::Connected { proc: p, attempt });
                return;
            }
            CoreState::Running => proc.cut_until <= now,
        };
        let proc = &mut self.procs[p];
        proc.connecting = None;
        if !ok {
            proc.reconnect_at = Some(now + proc.conn_backoff.next_delay(&mut self.rng));
            self.process_wake(p);
            return;
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        self.vlog(|_| format!("process {p} connects on conn {conn}"));
        let proc = &mut self.procs[p];
        self.open_conns.insert(conn, p);
        proc.conn = Some(conn);
        proc.reconnect_at = None;
        proc.conn_backoff.reset();
        proc.last_frame_at = now;
        proc.pending.clear();
        proc.m.handle_connected(now);
        self.process_wake(p);
    }

    /// The client closes its connection (stall detection). Over a cut network the close
    /// never reaches the coordinator, which keeps a half-open connection.
    pub(super) fn client_disconnect(&mut self, p: usize) {
        let now = self.now;
        let proc = &mut self.procs[p];
        let Some(conn) = proc.conn.take() else {
            return;
        };
        proc.m.handle_disconnected(now);
        proc.pending.clear();
        proc.reconnect_at = Some(now + proc.conn_backoff.next_delay(&mut self.rng));
        self.vlog(|_| format!("process {p} closes conn {conn} (no answer)"));
        self.send_closed(p, conn);
    }

    /// The coordinator went away: the client sees its connection reset.
    pub(super) fn client_lost_conn(&mut self, p: usize) {
        let now = self.now;
        let proc = &mut self.procs[p];
        if proc.conn.take().is_none() {
            return;
        }
        proc.m.handle_disconnected(now);
        proc.pending.clear();
        proc.reconnect_at = Some(now + proc.conn_backoff.next_delay(&mut self.rng));
    }

    /// The process's network is cut for `len`: its connection's stream dies silently,
    /// or (`hold`) its traffic waits until the cut heals. New connections fail meanwhile.
    pub(super) fn cut(&mut self, p: usize, len: Duration, hold: bool) {
        let now = self.now;
        let proc = &mut self.procs[p];
        proc.cut_until = proc.cut_until.max(now + len);
        proc.cut_hold = hold;
        if !hold {
            if let Some(conn) = proc.conn {
                self.broken.insert(conn);
                // The client notices through its stall detection, or at the latest when
                // the kernel gives up retransmitting (scaled down from minutes).
                let at = now
                    + self
                        .rng
                        .gen_range(Duration::from_secs(5)..Duration::from_secs(15));
                self.push(at, Ev::ConnError { proc: p, conn });
            }
        }
        self.log(format!(
            "process {p}: network cut for {len:?} ({})",
            if hold {
                "traffic held"
            } else {
                "connection dies silently"
            }
        ));
    }

    /// A process dies, closing its connection (the coordinator sees the close) or not
    /// (power loss: silence).
    pub(super) fn crash(&mut self, p: usize, close: bool) {
        let now = self.now;
        let proc = &mut self.procs[p];
        if !proc.alive {
            return;
        }
        proc.alive = false;
        let cut = proc.cut_until > now;
        let conn = proc.conn.filter(|c| close && !self.broken.contains(c));
        // Only a close the coordinator sees at once earns the tight bound of check 4.
        let closed_conn = conn.filter(|_| !cut);
        let member = proc.m.member_id().unwrap_or("-").to_owned();
        let close_arrives = conn.and_then(|conn| self.send_closed(p, conn));
        self.counts.crashes += 1;
        self.crashes.push(Crash {
            proc: p,
            at: now,
            closed_conn,
            close_arrives,
        });
        self.log(format!(
            "process {p} ({member}) crashes, {}",
            if closed_conn.is_some() {
                "connection closed"
            } else {
                "silently"
            }
        ));
    }
}
