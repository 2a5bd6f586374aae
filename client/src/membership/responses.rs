//! Responses to the joins, heartbeats, leaves and relinquishes a membership sent: where
//! its lease, its suspension, its generation and its partitions' releases are settled.

use super::*;

impl Membership {
    /// The response to a join, heartbeat, leave or relinquish this membership issued.
    pub fn handle_response(&mut self, id: RequestId, response: Response, now: Instant) {
        match self.in_flight.remove(&id) {
            Some(InFlight::Join { sent }) => self.on_join_response(id, sent, response, now),
            Some(InFlight::Heartbeat {
                sent,
                incarnation,
                acks,
            }) => self.on_heartbeat_response(sent, incarnation, acks, response, now),
            Some(InFlight::Leave { incarnation }) => {
                if incarnation == self.incarnation && self.leaving.is_some() {
                    // A coordinator that does not serve the group did not take the
                    // leave: the group's coordinator holds the partitions until this
                    // member's lease has run out.
                    let moved = matches!(&response, Response::Error(e)
                        if matches!(e.code, ErrorCode::NotCoordinator | ErrorCode::CoordinatorLoading));
                    self.finish_leave(if moved {
                        Err(LeaveError::Unconfirmed)
                    } else {
                        Ok(())
                    });
                }
            }
            Some(InFlight::Relinquish { ticket }) => {
                if let Some(i) = self.relinquishes.iter().position(|r| r.ticket == ticket) {
                    let r = self.relinquishes.remove(i);
                    // The answer changes nothing: `unknown_member` only means that nothing
                    // was held for the member any more.
                    debug!(
                        group = %self.settings.group,
                        member_id = %r.member_id,
                        ?response,
                        "relinquish answered"
                    );
                }
            }
            Some(InFlight::Commit { .. }) | None => {}
        }
    }

    pub(super) fn on_join_response(
        &mut self,
        id: RequestId,
        sent: Instant,
        response: Response,
        now: Instant,
    ) {
        let Phase::Joining(j) = &mut self.phase else {
            return;
        };
        if j.in_flight != Some(id) {
            return;
        }
        j.in_flight = None;
        match response {
            Response::Join(r) => {
                let early = mem::take(&mut j.early_pushes);
                self.phase = Phase::Active;
                self.incarnation += 1;
                self.member_id = Some(r.member_id);
                self.generation = r.generation;
                self.session_timeout = self.settings.session_timeout;
                self.interval = match r.heartbeat_interval_ms {
                    0 => self.settings.heartbeat_interval,
                    ms => Duration::from_millis(ms.into()).min(self.settings.heartbeat_interval),
                };
                self.clear_lease();
                self.renew(sent);
                self.next_beat = Some(now + heartbeat_delay(self.interval, &mut self.rng));
                self.backoff.reset();
                if !self.join_reported {
                    self.join_reported = true;
                    self.join_result = Some(Ok(()));
                }
                for push in early {
                    if self.accepts_push(&push) {
                        self.handle_push(push, now);
                    }
                }
            }
            Response::Error(e) => match e.code {
                ErrorCode::FencedInstance => self.fail(FatalError::Fenced { message: e.message }),
                // The same join (token and member id), at the group's coordinator.
                ErrorCode::NotCoordinator => self.relocate(now),
                code => match code.action() {
                    ClientAction::Retry | ClientAction::FindCoordinator => {
                        j.not_before = now + self.backoff.next_delay(&mut self.rng)
                    }
                    ClientAction::Rejoin if j.member_id.is_some() => {
                        // The member to rejoin as is gone: join afresh.
                        j.member_id = None;
                        j.token = new_token(&mut self.rng);
                        j.not_before = now;
                    }
                    ClientAction::Rejoin => {
                        j.token = new_token(&mut self.rng);
                        j.not_before = now + self.backoff.next_delay(&mut self.rng);
                    }
                    ClientAction::GiveUp | ClientAction::Proceed => {
                        self.fail(FatalError::Refused {
                            code,
                            message: e.message,
                        })
                    }
                },
            },
            _ => j.not_before = now + self.backoff.next_delay(&mut self.rng),
        }
    }

    pub(super) fn on_heartbeat_response(
        &mut self,
        sent: Instant,
        incarnation: u64,
        acks: PartitionSet,
        response: Response,
        now: Instant,
    ) {
        if incarnation != self.incarnation || !matches!(self.phase, Phase::Active) {
            return;
        }
        match response {
            Response::Heartbeat(r) => {
                if r.session_timeout_ms > 0 {
                    self.session_timeout = Duration::from_millis(r.session_timeout_ms.into());
                }
                self.renew(sent);
                self.backoff.reset();
                for tp in acks {
                    if self.holdings.get(&tp) == Some(&Hold::Released) {
                        self.holdings.remove(&tp);
                        self.revoke_requested.remove(&tp);
                    }
                }
                self.resume_if_renewed(now);
            }
            Response::Error(e) => {
                self.requeue_acks(acks);
                match e.code {
                    ErrorCode::FencedInstance => {
                        let old = self.end_membership(LostReason::Fenced);
                        self.relinquish_after_lost(old, now);
                        self.fail(FatalError::Fenced { message: e.message });
                    }
                    // A coordinator that restarted since it expelled the member answers
                    // `unknown_member` (removals are not kept across restarts) while it
                    // still holds the partitions: relinquish after either.
                    ErrorCode::MemberExpelled | ErrorCode::UnknownMember => {
                        self.membership_gone(now, true)
                    }
                    ErrorCode::IllegalGeneration | ErrorCode::InconsistentMember => {
                        self.membership_gone(now, false)
                    }
                    // Still a member, served elsewhere: heartbeat there.
                    ErrorCode::NotCoordinator => self.relocate(now),
                    // Served here in a moment: beat again after a short backoff
                    // rather than a whole interval, since the lease is not renewed
                    // meanwhile. Never later than the beat already scheduled.
                    ErrorCode::CoordinatorLoading => {
                        let delay = self.backoff.next_delay(&mut self.rng);
                        let retry = now + delay;
                        self.next_beat = Some(self.next_beat.map_or(retry, |t| t.min(retry)));
                    }
                    // Transient or unexpected: the next beat tries again.
                    _ => {}
                }
            }
            _ => self.requeue_acks(acks),
        }
    }
}
