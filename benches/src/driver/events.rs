//! A connection task's inputs: frames, timers and commands, and what each member does
//! about them.

use super::*;

impl ConnTask {
    pub(super) fn local(&self, member: usize) -> Option<usize> {
        let first = self.members.first()?.index;
        let local = member.checked_sub(first)?;
        (local < self.members.len()).then_some(local)
    }

    pub(super) fn correlation(&mut self) -> u32 {
        let id = self.next_correlation;
        self.next_correlation = self.next_correlation.wrapping_add(1).max(1);
        id
    }

    pub(super) fn schedule(&mut self, local: usize, at: Instant) {
        let m = &mut self.members[local];
        m.timer_stamp += 1;
        self.timers
            .push(TimerEntry(std::cmp::Reverse(at), local, m.timer_stamp));
    }

    /// The first slot of the member's place on the global timeline at or after `t`.
    /// With batching every member of the connection has its first member's place, so
    /// that their beats fall due together and share a frame.
    pub(super) fn next_slot(&self, local: usize, period: Duration, t: Instant) -> Instant {
        let place = if self.shared.batch { 0 } else { local };
        self.shared
            .slot_at_or_after(self.members[place].index, period, t)
    }

    pub(super) fn on_command(&mut self, cmd: Cmd) -> Option<Exit> {
        let now = Instant::now();
        match cmd {
            Cmd::Kill {
                member,
                close,
                reply,
            } => {
                let local = self.local(member)?;
                let m = &mut self.members[local];
                let _ = reply.send(m.last_sent);
                m.phase = Phase::Dead;
                m.timer_stamp += 1;
                if close && self.members.iter().all(|m| m.phase == Phase::Dead) {
                    return Some(Exit::Closed);
                }
            }
            Cmd::Stall { member, reply } => {
                let local = self.local(member)?;
                let m = &mut self.members[local];
                m.progress_frozen = true;
                let _ = reply.send(m.last_progress_sent);
            }
            Cmd::Pause {
                member,
                silence,
                reply,
            } => {
                let local = self.local(member)?;
                let m = &mut self.members[local];
                let last = m.last_sent;
                let _ = reply.send(last);
                let resume = last.unwrap_or(now) + silence;
                m.paused_until = Some(resume);
                self.schedule(local, resume);
            }
            Cmd::Restart {
                member,
                down,
                reply,
            } => {
                let local = self.local(member)?;
                let _ = reply.send(self.members[local].last_sent);
                for m in &mut self.members {
                    if m.phase == Phase::Dead {
                        continue;
                    }
                    m.phase = Phase::Unjoined;
                    m.member_id = None;
                    m.owned.clear();
                    m.generation = 0;
                    m.commits_inflight = 0;
                    m.paused_until = None;
                    m.relinquish_at = None;
                    m.relinquished = false;
                    m.timer_stamp += 1;
                    self.shared.observe(Obs::Restarting { member: m.index });
                }
                self.by_id.clear();
                return Some(Exit::Restart(down));
            }
        }
        None
    }

    pub(super) fn send_join(&mut self, permit: OwnedSemaphorePermit) {
        let Some(local) = self.members.iter().position(|m| m.phase == Phase::Unjoined) else {
            self.joins_waiting = 0;
            return;
        };
        self.joins_waiting = self.joins_waiting.saturating_sub(1);
        let m = &mut self.members[local];
        m.phase = Phase::Joining;
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        let request = Request::Join(JoinRequest {
            placement: m.spec.placement.clone(),
            group: m.spec.group.clone(),
            member_id: None,
            instance_id: m.spec.instance_id.clone(),
            client_id: "rollcall-bench".to_owned(),
            join_token: rand::random::<u64>() | 1,
            subscription: vec![TopicSubscription {
                topic: TOPIC.to_owned(),
                partitions: m.spec.partitions,
            }],
            session_timeout_ms: ms(m.spec.session_timeout),
            progress_timeout_ms: ms(m.spec.progress_timeout),
            rebalance_timeout_ms: ms(m.spec.rebalance_timeout),
            lease_timeout_ms: m.spec.lease_timeout.map_or(0, |d| ms(d).max(1)),
            detector: m.spec.detector.clone().unwrap_or_default(),
        });
        let id = self.correlation();
        self.pending.insert(
            id,
            Pending::Join {
                local,
                sent: Instant::now(),
                _permit: permit,
            },
        );
        inc(&self.shared.counters.joins_sent);
        self.outbox.push(Frame::request(id, request));
    }

    pub(super) fn fire_timers(&mut self, now: Instant) {
        let period = match self.shared.load {
            Load::Periodic { period } | Load::Commits { period, .. } => period,
            Load::ClosedLoop => return,
        };
        // With batching, the beats due now, sent together once every timer due has fired.
        let mut round = Vec::new();
        while let Some(top) = self.timers.peek() {
            let at = top.0 .0;
            if at > now {
                break;
            }
            let TimerEntry(_, local, stamp) = self.timers.pop().expect("peeked");
            let m = &mut self.members[local];
            if stamp != m.timer_stamp {
                continue;
            }
            if m.phase == Phase::Dead && m.relinquish_at.is_some() {
                // Expelled while paused: the pause is over.
                self.send_relinquish(local, now);
                continue;
            }
            if m.phase != Phase::Active {
                continue;
            }
            let resumed = m.paused_until.take().is_some();
            if self.shared.batch {
                round.push((local, at));
            } else {
                self.send_heartbeat(local, at, now);
            }
            let next = if resumed {
                self.next_slot(local, period, now + Duration::from_nanos(1))
            } else {
                at + period
            };
            self.schedule(local, next);
        }
        if !round.is_empty() {
            self.send_beats(round, now);
        }
    }

    /// Closed loop with batching: a Heartbeats request carrying every active member,
    /// unless the last round is still unanswered.
    pub(super) fn send_round(&mut self, now: Instant) {
        if self.rounds_outstanding > 0 {
            return;
        }
        let due: Vec<(usize, Instant)> = (0..self.members.len())
            .filter(|&local| self.members[local].phase == Phase::Active)
            .map(|local| (local, now))
            .collect();
        self.rounds_outstanding = self.send_beats(due, now);
    }

    /// One Heartbeats request (or as few as fit a frame) for these members' beats,
    /// intended at the given instants and sent `now`; returns the number of frames.
    pub(super) fn send_beats(&mut self, due: Vec<(usize, Instant)>, now: Instant) -> usize {
        let mut beats = Vec::with_capacity(due.len());
        let mut members = Vec::with_capacity(due.len());
        for (local, intended) in due {
            if let Some(beat) = self.beat(local, intended, now) {
                beats.push(beat);
                members.push((local, intended));
            }
        }
        let sizes = HeartbeatsRequest::batch_sizes(&beats, self.max_frame_size);
        let frames = sizes.len();
        let mut beats = beats.into_iter();
        let mut members = members.into_iter();
        for size in sizes {
            let chunk: Vec<(usize, Instant)> = members.by_ref().take(size).collect();
            let request = Request::Heartbeats(HeartbeatsRequest {
                beats: beats.by_ref().take(size).collect(),
            });
            self.count_frame(chunk[0].1);
            let id = self.correlation();
            self.pending.insert(
                id,
                Pending::Beats {
                    beats: chunk,
                    sent: now,
                },
            );
            self.outbox.push(Frame::request(id, request));
        }
        frames
    }

    fn count_frame(&self, intended: Instant) {
        let c = &self.shared.counters;
        inc(&c.hb_frames_sent);
        if self.shared.in_window(intended) {
            inc(&c.hb_window_frames);
        }
    }

    pub(super) fn send_heartbeat(&mut self, local: usize, intended: Instant, now: Instant) {
        let Some(beat) = self.beat(local, intended, now) else {
            return;
        };
        let id = self.correlation();
        self.pending.insert(
            id,
            Pending::Heartbeat {
                local,
                intended,
                sent: now,
            },
        );
        self.count_frame(intended);
        self.outbox
            .push(Frame::request(id, Request::Heartbeat(beat)));
    }

    /// The member's next heartbeat, intended at `intended` and sent `now`, counted as
    /// sent; `None` if it has no member id.
    fn beat(&mut self, local: usize, intended: Instant, now: Instant) -> Option<HeartbeatRequest> {
        let m = &mut self.members[local];
        let member_id = m.member_id.clone()?;
        m.sequence += 1;
        if !m.progress_frozen {
            m.progress += 1;
            m.last_progress_sent = Some(now);
        }
        m.last_sent = Some(now);
        let loads = match &self.shared.loads {
            Some(table) => m
                .owned
                .iter()
                .filter_map(|&partition| {
                    Some(PartitionLoad {
                        topic: TOPIC.to_owned(),
                        partition,
                        load: table.get(partition)?,
                    })
                })
                .collect(),
            None => Vec::new(),
        };
        let beat = HeartbeatRequest {
            loads,
            group: m.spec.group.clone().into(),
            member_id: member_id.into(),
            generation: m.generation,
            sequence: m.sequence,
            progress: m.progress,
            acked_revocations: Vec::new(),
        };
        let c = &self.shared.counters;
        inc(&c.hb_sent);
        if self.shared.in_window(intended) {
            inc(&c.hb_window_sent);
            if now.saturating_duration_since(intended) > Duration::from_millis(2) {
                inc(&c.hb_window_late);
            }
        }
        Some(beat)
    }

    /// Acknowledges the revocations whose delay is over.
    pub(super) fn send_due_acks(&mut self, now: Instant) {
        while self.delayed_acks.front().is_some_and(|a| a.0 <= now) {
            let (_, local, partitions, pushed) = self.delayed_acks.pop_front().expect("front");
            if self.members[local].phase == Phase::Active {
                self.send_ack(local, partitions, pushed);
            }
        }
    }

    pub(super) fn send_ack(
        &mut self,
        local: usize,
        partitions: Vec<TopicPartitions>,
        pushed: Instant,
    ) {
        let now = Instant::now();
        let acked: Vec<u32> = if self.shared.observations.is_some() {
            let mut v: Vec<u32> = partitions
                .iter()
                .filter(|tp| tp.topic == TOPIC)
                .flat_map(|tp| tp.partitions.iter().copied())
                .collect();
            v.sort_unstable();
            v
        } else {
            Vec::new()
        };
        let m = &mut self.members[local];
        let Some(member_id) = m.member_id.clone() else {
            return;
        };
        m.sequence += 1;
        if !m.progress_frozen {
            m.progress += 1;
            m.last_progress_sent = Some(now);
        }
        m.last_sent = Some(now);
        let request = Request::Heartbeat(HeartbeatRequest {
            loads: Vec::new(),
            group: m.spec.group.clone().into(),
            member_id: member_id.into(),
            generation: m.generation,
            sequence: m.sequence,
            progress: m.progress,
            acked_revocations: partitions,
        });
        let id = self.correlation();
        self.pending.insert(
            id,
            Pending::Ack {
                local,
                sent: now,
                pushed,
                partitions: acked,
            },
        );
        inc(&self.shared.counters.acks_sent);
        self.outbox.push(Frame::request(id, request));
    }

    /// The member was told it is expelled: unless relinquishing is off, its application
    /// stops acting at once and confirms it (a paused member once its pause is over).
    pub(super) fn stand_down(&mut self, local: usize, now: Instant) {
        if !self.shared.relinquish {
            return;
        }
        let m = &mut self.members[local];
        if m.relinquished || m.relinquish_at.is_some() {
            return;
        }
        match m.paused_until {
            Some(resume) if resume > now => {
                m.relinquish_at = Some(resume);
                self.schedule(local, resume);
            }
            _ => self.send_relinquish(local, now),
        }
    }

    pub(super) fn send_relinquish(&mut self, local: usize, now: Instant) {
        let m = &mut self.members[local];
        m.relinquish_at = None;
        let Some(member_id) = m.member_id.clone() else {
            return;
        };
        m.relinquished = true;
        let request = Request::Relinquish(RelinquishRequest {
            group: m.spec.group.clone(),
            member_id,
        });
        let member = m.index;
        let id = self.correlation();
        self.pending.insert(id, Pending::Relinquish);
        inc(&self.shared.counters.relinquish_sent);
        self.shared.observe(Obs::Relinquished { member, at: now });
        self.outbox.push(Frame::request(id, request));
    }

    pub(super) fn pump_commits(&mut self, local: usize) {
        let Load::Commits {
            inflight, offsets, ..
        } = self.shared.load
        else {
            return;
        };
        loop {
            let m = &mut self.members[local];
            if m.phase != Phase::Active || m.owned.is_empty() || m.commits_inflight >= inflight {
                return;
            }
            let Some(member_id) = m.member_id.clone() else {
                return;
            };
            let mut batch = Vec::with_capacity(offsets);
            for _ in 0..offsets.min(m.owned.len()).max(1) {
                let partition = m.owned[m.commit_cursor % m.owned.len()];
                m.commit_cursor = m.commit_cursor.wrapping_add(1);
                batch.push(OffsetCommit {
                    topic: TOPIC.to_owned(),
                    partition,
                    offset: m.next_offset,
                    metadata: String::new(),
                });
            }
            m.next_offset += 1;
            m.commits_inflight += 1;
            let request = Request::CommitOffsets(CommitOffsetsRequest {
                group: m.spec.group.clone(),
                member_id: Some(member_id),
                generation: m.generation,
                offsets: batch,
            });
            let id = self.correlation();
            self.pending.insert(
                id,
                Pending::Commit {
                    local,
                    sent: Instant::now(),
                },
            );
            inc(&self.shared.counters.commit_requests);
            self.outbox.push(Frame::request(id, request));
        }
    }

    pub(super) fn on_frame(&mut self, frame: Frame) {
        let now = Instant::now();
        match frame.body {
            Body::Response(response) => {
                if let Some(pending) = self.pending.remove(&frame.correlation_id) {
                    self.on_response(pending, response, now);
                }
            }
            Body::Push(push) => self.on_push(push, now),
            Body::Request(_) | Body::Unsupported(_) => {
                inc(&self.shared.counters.protocol_errors);
            }
        }
    }

    /// The answer to one member's periodic or closed-loop heartbeat, alone or as its
    /// result in a Heartbeats answer: latency from the intended send time, expulsions.
    fn on_beat_answer(
        &mut self,
        local: usize,
        intended: Instant,
        sent: Instant,
        response: Response,
        now: Instant,
    ) {
        let c = &self.shared.counters;
        if self.shared.in_window(intended) {
            inc(&c.hb_window_answered);
            self.local_intended.push(micros(now - intended));
            self.local_service.push(micros(now - sent));
        }
        match response {
            Response::Heartbeat(_) => {
                inc(&c.hb_ok);
                let m = &mut self.members[local];
                m.last_answered = m.last_answered.max(Some(sent));
            }
            Response::Error(e) => {
                inc(&c.hb_err);
                let m = &mut self.members[local];
                self.shared.observe(Obs::HeartbeatError {
                    member: m.index,
                    at: now,
                    code: e.code,
                });
                if matches!(
                    e.code,
                    ErrorCode::MemberExpelled
                        | ErrorCode::UnknownMember
                        | ErrorCode::FencedInstance
                ) {
                    let was_active = m.phase == Phase::Active;
                    m.phase = Phase::Dead;
                    if was_active && e.code == ErrorCode::MemberExpelled {
                        self.stand_down(local, now);
                    }
                }
            }
            _ => inc(&c.protocol_errors),
        }
    }

    pub(super) fn on_response(&mut self, pending: Pending, response: Response, now: Instant) {
        let c = &self.shared.counters;
        match pending {
            Pending::Join { local, sent, .. } => {
                self.local_join.push(micros(now - sent));
                let m = &mut self.members[local];
                match response {
                    Response::Join(r) => {
                        inc(&c.joins_ok);
                        m.phase = Phase::Active;
                        m.generation = r.generation;
                        m.member_id = Some(r.member_id.clone());
                        self.by_id.insert(r.member_id.clone(), local);
                        self.shared.observe(Obs::Joined {
                            member: m.index,
                            at: now,
                            member_id: r.member_id,
                        });
                        match self.shared.load {
                            Load::ClosedLoop if self.shared.batch => self.send_round(now),
                            Load::ClosedLoop => self.send_heartbeat(local, now, now),
                            Load::Periodic { period } | Load::Commits { period, .. } => {
                                let at = self.next_slot(local, period, now);
                                self.schedule(local, at);
                            }
                        }
                    }
                    other => {
                        m.phase = Phase::Dead;
                        let (code, message) = match other {
                            Response::Error(e) => (e.code, e.message),
                            other => (ErrorCode::Internal, format!("unexpected {other:?}")),
                        };
                        if c.joins_err.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("join refused: {code}: {message}");
                        }
                        self.shared.observe(Obs::JoinFailed {
                            member: m.index,
                            code,
                            message,
                        });
                    }
                }
            }
            Pending::Heartbeat {
                local,
                intended,
                sent,
            } => {
                self.on_beat_answer(local, intended, sent, response, now);
                if matches!(self.shared.load, Load::ClosedLoop)
                    && self.members[local].phase == Phase::Active
                {
                    self.send_heartbeat(local, now, now);
                }
            }
            Pending::Beats { beats, sent } => {
                let answers = split_answer(beats.len(), response);
                for ((local, intended), answer) in beats.into_iter().zip(answers) {
                    self.on_beat_answer(local, intended, sent, answer, now);
                }
                if matches!(self.shared.load, Load::ClosedLoop) {
                    self.rounds_outstanding = self.rounds_outstanding.saturating_sub(1);
                    self.send_round(now);
                }
            }
            Pending::Ack {
                local,
                sent,
                pushed,
                partitions,
            } => {
                if matches!(response, Response::Heartbeat(_)) {
                    let m = &mut self.members[local];
                    m.last_answered = m.last_answered.max(Some(sent));
                    self.shared.observe(Obs::Acked {
                        member: m.index,
                        pushed,
                        sent,
                        at: now,
                        partitions,
                    });
                }
            }
            Pending::Relinquish => match response {
                Response::Relinquish => inc(&c.relinquish_ok),
                other => {
                    if c.relinquish_err.fetch_add(1, Ordering::Relaxed) < 5 {
                        eprintln!("relinquish refused: {other:?}");
                    }
                }
            },
            Pending::Commit { local, sent } => {
                inc(&c.commit_answers);
                let window = self.shared.in_window(sent);
                if window {
                    inc(&c.commit_window_answers);
                    self.local_commit.push(micros(now - sent));
                }
                match response {
                    Response::CommitOffsets(r) => {
                        let ok = r
                            .results
                            .iter()
                            .filter(|p| p.error == ErrorCode::None)
                            .count() as u64;
                        let err = r.results.len() as u64 - ok;
                        c.commit_offsets_ok.fetch_add(ok, Ordering::Relaxed);
                        c.commit_offsets_err.fetch_add(err, Ordering::Relaxed);
                        if window {
                            c.commit_window_ok.fetch_add(ok, Ordering::Relaxed);
                            c.commit_window_err.fetch_add(err, Ordering::Relaxed);
                        }
                    }
                    _ => {
                        inc(&c.commit_offsets_err);
                        if window {
                            inc(&c.commit_window_err);
                        }
                    }
                }
                let m = &mut self.members[local];
                m.commits_inflight = m.commits_inflight.saturating_sub(1);
                self.pump_commits(local);
            }
        }
        if self.local_intended.len() >= LOCAL_SAMPLES
            || self.local_commit.len() >= LOCAL_SAMPLES
            || self.local_join.len() >= LOCAL_SAMPLES
        {
            self.flush_samples();
        }
    }

    pub(super) fn on_push(&mut self, push: Push, now: Instant) {
        let c = &self.shared.counters;
        let flatten = |tps: &[TopicPartitions]| -> Vec<u32> {
            let mut out: Vec<u32> = tps
                .iter()
                .filter(|tp| tp.topic == TOPIC)
                .flat_map(|tp| tp.partitions.iter().copied())
                .collect();
            out.sort_unstable();
            out
        };
        match push {
            Push::Assignment(p) => {
                inc(&c.pushes_assignment);
                let Some(&local) = self.by_id.get(&p.member_id) else {
                    return;
                };
                let m = &mut self.members[local];
                if m.phase != Phase::Active {
                    return;
                }
                m.generation = p.generation;
                m.owned = flatten(&p.partitions);
                if self.shared.observations.is_some() {
                    self.shared.observe(Obs::Assigned {
                        member: m.index,
                        at: now,
                        generation: p.generation,
                        partitions: m.owned.clone(),
                    });
                }
                self.pump_commits(local);
            }
            Push::Revoke(p) => {
                inc(&c.pushes_revoke);
                let Some(&local) = self.by_id.get(&p.member_id) else {
                    return;
                };
                let m = &mut self.members[local];
                if m.phase != Phase::Active || m.paused_until.is_some() {
                    return;
                }
                m.generation = m.generation.max(p.generation);
                let revoked = flatten(&p.partitions);
                m.owned.retain(|x| revoked.binary_search(x).is_err());
                self.shared.observe(Obs::Revoked {
                    member: m.index,
                    at: now,
                    generation: p.generation,
                    partitions: revoked,
                });
                if self.shared.ack_delay.is_zero() {
                    self.send_ack(local, p.partitions, now);
                } else {
                    let due = now + self.shared.ack_delay;
                    self.delayed_acks.push_back((due, local, p.partitions, now));
                }
            }
            Push::Expelled(p) => {
                let counter = match p.reason {
                    ExpelReason::SessionExpired => &c.expelled_session,
                    ExpelReason::ProgressExpired => &c.expelled_progress,
                    ExpelReason::RebalanceTimeout => &c.expelled_rebalance,
                    ExpelReason::Fenced | ExpelReason::Left => &c.expelled_fenced,
                };
                inc(counter);
                let Some(local) = self.by_id.remove(&p.member_id) else {
                    return;
                };
                let m = &mut self.members[local];
                let was_active = m.phase == Phase::Active;
                m.phase = Phase::Dead;
                self.shared.observe(Obs::Expelled {
                    member: m.index,
                    at: now,
                    reason: p.reason,
                    last_answered: m.last_answered,
                });
                if was_active {
                    self.stand_down(local, now);
                }
            }
            Push::Shutdown(_) => inc(&c.shutdown_pushes),
        }
    }

    pub(super) fn flush_samples(&mut self) {
        let s = &self.shared;
        s.hb_intended.record_micros(self.key, &self.local_intended);
        s.hb_service.record_micros(self.key, &self.local_service);
        s.commit_latency.record_micros(self.key, &self.local_commit);
        s.join_latency.record_micros(self.key, &self.local_join);
        self.local_intended.clear();
        self.local_service.clear();
        self.local_commit.clear();
        self.local_join.clear();
    }
}
