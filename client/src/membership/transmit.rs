//! Outputs: the requests to send, the events for the application, the results of
//! joins and leaves, and the next wake-up.

use super::*;

impl Membership {
    /// The next event for the application, with the ticket to pass to
    /// [`Membership::handle_taken`] once the application has taken it, if any.
    pub fn poll_event(&mut self) -> Option<(Event, Option<Ticket>)> {
        self.events.pop_front()
    }

    pub(super) fn emit(&mut self, event: Event) {
        self.events.push_back((event, None));
    }

    /// The outcome of the first join, once known.
    pub fn take_join_result(&mut self) -> Option<Result<(), FatalError>> {
        self.join_result.take()
    }

    /// The outcome of a leave, once known.
    pub fn take_leave_result(&mut self) -> Option<Result<(), LeaveError>> {
        self.leave_result.take()
    }

    /// When [`Membership::handle_timeout`] (and then `poll_transmit`) should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // A due Relinquish needs no wake-up: it goes out with the next `poll_transmit`,
        // which follows every input.
        let give_up = self.relinquishes.iter().map(|r| r.give_up_at).min();
        [give_up, self.phase_timeout()].into_iter().flatten().min()
    }

    pub(super) fn phase_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Joining(j) => (self.connected && j.in_flight.is_none()).then_some(j.not_before),
            Phase::Active => {
                let mut t = self.session_bound;
                let mut add = |x: Option<Instant>| {
                    if let Some(x) = x {
                        t = Some(t.map_or(x, |t| t.min(x)));
                    }
                };
                add(self.lease.filter(|_| !self.suspended));
                match &self.leaving {
                    Some(Leaving {
                        sent: Some(sent), ..
                    }) => add(Some(*sent + self.session_timeout)),
                    Some(Leaving {
                        deadline,
                        sent: None,
                    }) => {
                        add(Some(*deadline));
                        add(self.next_beat.filter(|_| self.connected));
                    }
                    None => add(self.next_beat.filter(|_| self.connected)),
                }
                t
            }
            Phase::AwaitingProgress { .. } | Phase::Finished => None,
        }
    }

    /// The next request to send, if any is due at `now`. The caller writes it at once:
    /// `now` is recorded as its send instant, which the lease is measured from.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<(RequestId, Request)> {
        if !self.connected {
            return None;
        }
        if let Some(request) = self.poll_relinquish(now) {
            return Some(request);
        }
        match &mut self.phase {
            Phase::Joining(j) => {
                if j.in_flight.is_some() || now < j.not_before {
                    return None;
                }
                let id = self.next_request;
                self.next_request += 1;
                j.in_flight = Some(id);
                let s = &self.settings;
                // 0 ("the session timeout") goes out as version 0, which every
                // coordinator accepts.
                let lease_timeout_ms = if self.features.lease_timeout {
                    match s.lease_timeout_ms {
                        ms if ms == s.session_timeout_ms => 0,
                        ms => ms,
                    }
                } else {
                    0
                };
                let request = Request::Join(JoinRequest {
                    // A coordinator without Join version 3 gets a plain join.
                    placement: if self.features.join_placement {
                        s.placement.clone()
                    } else {
                        None
                    },
                    group: s.group.clone(),
                    member_id: j.member_id.clone(),
                    instance_id: s.instance_id.clone(),
                    client_id: s.client_id.clone(),
                    join_token: j.token,
                    subscription: s.subscription.clone(),
                    session_timeout_ms: s.session_timeout_ms,
                    progress_timeout_ms: s.progress_timeout_ms,
                    rebalance_timeout_ms: s.rebalance_timeout_ms,
                    lease_timeout_ms,
                    detector: if self.features.join_detector {
                        s.detector.clone()
                    } else {
                        String::new()
                    },
                });
                self.in_flight.insert(id, InFlight::Join { sent: now });
                Some((id, request))
            }
            Phase::Active => {
                let member_id = self.member_id.clone()?;
                if let Some(leaving) = &mut self.leaving {
                    if leaving.sent.is_some() {
                        return None;
                    }
                    let all_acked = !self
                        .holdings
                        .values()
                        .any(|h| matches!(h, Hold::Revoking { .. }));
                    if all_acked || now >= leaving.deadline {
                        leaving.sent = Some(now);
                        let mode = if !all_acked {
                            // The application did not release everything in time: it is
                            // told now that the rest is lost, and the coordinator holds
                            // those partitions until this member's lease has run out.
                            self.report_unreleased_lost();
                            LeaveMode::Unconfirmed
                        } else if self.settings.instance_id.is_some() {
                            // A static member's process stops (for a restart, usually):
                            // it stays a member, and its next process takes over at once.
                            LeaveMode::StandDown
                        } else {
                            LeaveMode::Released
                        };
                        let id = self.request_id();
                        self.in_flight.insert(
                            id,
                            InFlight::Leave {
                                incarnation: self.incarnation,
                            },
                        );
                        let request = Request::Leave(LeaveRequest {
                            group: self.settings.group.clone(),
                            member_id,
                            mode,
                        });
                        return Some((id, request));
                    }
                }
                if !matches!(self.next_beat, Some(t) if now >= t) {
                    return None;
                }
                let acks = mem::take(&mut self.acks_unsent);
                let loads = mem::take(&mut self.loads_unsent);
                self.sequence += 1;
                let request = Request::Heartbeat(HeartbeatRequest {
                    // Sent once; a coordinator without Heartbeat version 1 gets none.
                    loads: if self.features.loads {
                        loads
                            .into_iter()
                            .map(|(tp, load)| PartitionLoad {
                                topic: tp.topic,
                                partition: tp.partition,
                                load,
                            })
                            .collect()
                    } else {
                        Vec::new()
                    },
                    group: self.settings.group.as_str().into(),
                    member_id: member_id.into(),
                    generation: self.generation,
                    sequence: self.sequence,
                    progress: self.progress,
                    acked_revocations: to_wire(&acks),
                });
                let id = self.request_id();
                self.in_flight.insert(
                    id,
                    InFlight::Heartbeat {
                        sent: now,
                        incarnation: self.incarnation,
                        acks,
                    },
                );
                self.next_beat = Some(now + heartbeat_delay(self.interval, &mut self.rng));
                Some((id, request))
            }
            Phase::AwaitingProgress { .. } | Phase::Finished => None,
        }
    }

    /// Brings the next heartbeat forward to `now` if it would be due within half the
    /// heartbeat interval, so that it can share a frame with others due now; returns
    /// whether it did (the heartbeat then comes from the next
    /// [`Membership::poll_transmit`]). A heartbeat is only ever brought forward, never
    /// put off, and the schedule restarts from the beat sent: early is harmless, late
    /// is not.
    pub(crate) fn pull_beat(&mut self, now: Instant) -> bool {
        let leave_sent = self.leaving.as_ref().is_some_and(|l| l.sent.is_some());
        if !self.connected
            || !matches!(self.phase, Phase::Active)
            || self.member_id.is_none()
            || leave_sent
        {
            return false;
        }
        match self.next_beat {
            Some(t) if t > now && t <= now + self.interval / 2 => {
                self.next_beat = Some(now);
                true
            }
            _ => false,
        }
    }

    /// The next due Relinquish, if any; dropped without sending if the coordinator does
    /// not know the request.
    pub(super) fn poll_relinquish(&mut self, now: Instant) -> Option<(RequestId, Request)> {
        let i = self
            .relinquishes
            .iter()
            .position(|r| r.state == RelinquishState::Due)?;
        if now >= self.relinquishes[i].give_up_at {
            self.relinquishes.remove(i);
            return None;
        }
        if !self.features.relinquish {
            let r = self.relinquishes.remove(i);
            debug!(
                group = %self.settings.group,
                member_id = %r.member_id,
                "the coordinator does not support relinquish; its hold runs out instead"
            );
            return None;
        }
        let id = self.request_id();
        let r = &mut self.relinquishes[i];
        r.state = RelinquishState::Sent;
        let ticket = r.ticket;
        let request = Request::Relinquish(RelinquishRequest {
            group: self.settings.group.clone(),
            member_id: r.member_id.clone(),
        });
        self.in_flight.insert(id, InFlight::Relinquish { ticket });
        Some((id, request))
    }

    pub(super) fn request_id(&mut self) -> RequestId {
        let id = self.next_request;
        self.next_request += 1;
        id
    }
}
