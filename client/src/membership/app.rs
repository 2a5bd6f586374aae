//! Time and the application: lease and session expiry, events taken, progress,
//! acknowledged revocations, leaving and commits.

use super::*;

impl Membership {
    /// Timers due at `now`: the session bound, the lease, leave bounds and relinquishes
    /// given up. Heartbeats and joins due are produced by [`Membership::poll_transmit`].
    pub fn handle_timeout(&mut self, now: Instant) {
        self.relinquishes.retain(|r| now < r.give_up_at);
        if !matches!(self.phase, Phase::Active) {
            return;
        }
        // The session bound first: with `L = T` it passes with the lease, and the loss
        // alone is reported.
        if self.session_bound.is_some_and(|b| now >= b) {
            let old = self.end_membership(LostReason::LeaseExpired);
            if self.leaving.is_some() {
                self.finish_leave(Err(LeaveError::Unconfirmed));
            } else {
                // The coordinator may still know the member: rejoin as it.
                self.rejoin(old, now);
            }
            return;
        }
        if self.lease.is_some_and(|l| now >= l) {
            self.suspend();
        }
        let leave_expired = self.leaving.as_ref().is_some_and(|l| match l.sent {
            Some(sent) => now >= sent + self.session_timeout,
            None => !self.connected && now >= l.deadline,
        });
        if leave_expired {
            self.finish_leave(Err(LeaveError::Unconfirmed));
        }
    }

    /// The application has moved past the event that carried `ticket` (it asked for the
    /// next one, so it stopped acting on the partitions it lost): a Relinquish waiting
    /// for it goes out with the next [`Membership::poll_transmit`] (at once if
    /// connected, otherwise after reconnecting), unless given up already.
    pub fn handle_taken(&mut self, ticket: Ticket, now: Instant) {
        for r in &mut self.relinquishes {
            if r.ticket == ticket && r.state == RelinquishState::Untaken && now < r.give_up_at {
                r.state = RelinquishState::Due;
            }
        }
    }

    /// The application's progress counter. Once expelled for lack of progress, the
    /// member rejoins when it advances.
    pub fn set_progress(&mut self, progress: u64, now: Instant) {
        if progress <= self.progress {
            return;
        }
        self.progress = progress;
        if let Phase::AwaitingProgress { since } = self.phase {
            if progress > since {
                self.rejoin(None, now);
            }
        }
    }

    /// The application releases `partitions` (answering revocation requests), each with
    /// the generation of the latest [`Event::RevokeRequested`] naming it that the
    /// application was given; a heartbeat carrying the acknowledgement goes out at once.
    ///
    /// Partitions not being revoked are ignored, and so are partitions whose current
    /// revocation was announced after that event: the application is answering an
    /// earlier request (the partition was lost and assigned again since, and the
    /// events saying so are still on their way to it), and it will act on the
    /// `Assigned` before it sees the new request. A partition whose revocation the
    /// coordinator has withdrawn since (its latest revoke set no longer lists it) stays
    /// the member's and is announced again.
    pub fn ack(
        &mut self,
        partitions: impl IntoIterator<Item = (TopicPartition, u32)>,
        now: Instant,
    ) {
        let mut send = false;
        let mut kept = PartitionSet::new();
        for (tp, seen) in partitions {
            let Some(h) = self.holdings.get_mut(&tp) else {
                continue;
            };
            match *h {
                Hold::Revoking { announced } if announced <= seen => {}
                _ => continue,
            }
            if self.revoke_requested.contains(&tp) {
                *h = Hold::Released;
                self.acks_unsent.insert(tp);
                send = true;
            } else if self.leaving.is_some() {
                // A local leave's revocations need no acknowledgement: the leave
                // releases everything.
                *h = Hold::Released;
            } else {
                *h = Hold::Owned;
                kept.insert(tp);
            }
        }
        if !kept.is_empty() {
            self.emit(Event::Assigned {
                partitions: kept,
                generation: self.generation,
            });
        }
        if send && matches!(self.phase, Phase::Active) && self.connected {
            self.next_beat = Some(now);
        }
    }

    /// Starts a graceful leave: every owned partition is revoked locally (the application
    /// gets a [`Event::RevokeRequested`]); the leave is sent once all are acknowledged or
    /// at `now + timeout`, whichever is first.
    pub fn leave(&mut self, timeout: Duration, now: Instant) {
        match self.phase {
            Phase::Active if self.leaving.is_none() => {
                let mut newly = PartitionSet::new();
                for (tp, h) in &mut self.holdings {
                    if *h == Hold::Owned {
                        *h = Hold::Revoking {
                            announced: self.generation,
                        };
                        newly.insert(tp.clone());
                    }
                }
                if !newly.is_empty() {
                    self.emit(Event::RevokeRequested {
                        partitions: newly,
                        generation: self.generation,
                    });
                }
                self.leaving = Some(Leaving {
                    deadline: now + timeout,
                    sent: None,
                });
            }
            Phase::Active => {}
            Phase::Joining(_) | Phase::AwaitingProgress { .. } | Phase::Finished => {
                self.phase = Phase::Finished;
                self.leave_result = Some(Ok(()));
            }
        }
    }

    /// A commit from the application: checked against what the member holds, then turned
    /// into a request for the caller to send.
    pub fn commit(
        &mut self,
        offsets: Vec<Offset>,
        _now: Instant,
    ) -> Result<(RequestId, Request), CommitError> {
        let member_id = match (&self.phase, &self.member_id) {
            (Phase::Active, Some(id)) if self.leaving.as_ref().is_none_or(|l| l.sent.is_none()) => {
                id.clone()
            }
            _ => return Err(self.inactive_error()),
        };
        if !self.connected {
            return Err(CommitError::Unavailable {
                reason: "not connected to the coordinator".to_owned(),
            });
        }
        let mut not_owned = Vec::new();
        let mut released = Vec::new();
        for o in &offsets {
            match self.holdings.get(&o.partition) {
                Some(Hold::Owned | Hold::Revoking { .. }) => {}
                Some(Hold::Released) => released.push(o.partition.clone()),
                None => not_owned.push(o.partition.clone()),
            }
        }
        if !not_owned.is_empty() {
            return Err(CommitError::NotOwner {
                partitions: not_owned,
            });
        }
        if !released.is_empty() {
            return Err(CommitError::PartitionRevoked {
                partitions: released,
            });
        }
        let request = Request::CommitOffsets(CommitOffsetsRequest {
            group: self.settings.group.clone(),
            member_id: Some(member_id),
            generation: self.generation,
            offsets: offsets
                .into_iter()
                .map(|o| OffsetCommit {
                    topic: o.partition.topic,
                    partition: o.partition.partition,
                    offset: o.offset,
                    metadata: o.metadata,
                })
                .collect(),
        });
        let id = self.request_id();
        self.in_flight.insert(
            id,
            InFlight::Commit {
                incarnation: self.incarnation,
            },
        );
        Ok((id, request))
    }

    /// Loads the application reports for partitions (it should own them: the
    /// coordinator ignores others): sent with the next heartbeat, once. A later report
    /// for the same partition before that replaces the earlier one.
    pub fn report_load(&mut self, loads: impl IntoIterator<Item = (TopicPartition, f64)>) {
        self.loads_unsent.extend(loads);
    }

    /// A Drain (or undrain) of this member, by its own member id, to send on its own
    /// connection (a graceful scale-in: the member stays, its partitions move).
    pub fn drain_request(&self, drained: bool) -> Result<Request, RequestError> {
        let member_id = match (&self.phase, &self.member_id) {
            (Phase::Active, Some(id)) => id.clone(),
            _ => {
                return Err(RequestError::Unavailable {
                    reason: "not a member of the group right now".to_owned(),
                })
            }
        };
        if !self.connected {
            return Err(RequestError::Unavailable {
                reason: "not connected to the coordinator".to_owned(),
            });
        }
        Ok(Request::Drain(DrainRequest {
            group: self.settings.group.clone(),
            member_id,
            label: String::new(),
            drained,
        }))
    }

    /// Forgets a request that will not be sent after all.
    pub(crate) fn forget(&mut self, id: RequestId) {
        self.in_flight.remove(&id);
    }

    /// The response to a commit issued by [`Membership::commit`].
    pub fn handle_commit_response(
        &mut self,
        id: RequestId,
        response: Response,
        now: Instant,
    ) -> Result<(), CommitError> {
        let current = matches!(
            self.in_flight.remove(&id),
            Some(InFlight::Commit { incarnation }) if incarnation == self.incarnation
        ) && matches!(self.phase, Phase::Active);
        match response {
            Response::CommitOffsets(r) => {
                let refused: Vec<(TopicPartition, ErrorCode)> = r
                    .results
                    .into_iter()
                    .filter(|p| p.error != ErrorCode::None)
                    .map(|p| (TopicPartition::new(p.topic, p.partition), p.error))
                    .collect();
                let Some((_, first)) = refused.first() else {
                    return Ok(());
                };
                let first = *first;
                if refused.iter().any(|(_, c)| *c != first) {
                    return Err(CommitError::Refused { refused });
                }
                let partitions = refused.into_iter().map(|(tp, _)| tp).collect();
                Err(match first {
                    ErrorCode::NotOwner => CommitError::NotOwner { partitions },
                    ErrorCode::PartitionRevoked => CommitError::PartitionRevoked { partitions },
                    ErrorCode::MetadataTooLarge => CommitError::MetadataTooLarge { partitions },
                    code => CommitError::Refused {
                        refused: partitions.into_iter().map(|tp| (tp, code)).collect(),
                    },
                })
            }
            Response::Error(e) => Err(match e.code {
                ErrorCode::UnknownMember => {
                    if current {
                        self.membership_gone(now, true);
                    }
                    CommitError::UnknownMember
                }
                ErrorCode::MemberExpelled => {
                    if current {
                        self.membership_gone(now, true);
                    }
                    CommitError::Expelled
                }
                ErrorCode::FencedInstance => {
                    if current {
                        let old = self.end_membership(LostReason::Fenced);
                        self.relinquish_after_lost(old, now);
                        self.fail(FatalError::Fenced {
                            message: e.message.clone(),
                        });
                    }
                    CommitError::Fenced
                }
                ErrorCode::UnknownGroup => CommitError::UnknownGroup,
                // Sent again by the application once the member is connected to the
                // group's coordinator.
                code if matches!(
                    code.action(),
                    ClientAction::Retry | ClientAction::FindCoordinator
                ) =>
                {
                    CommitError::Unavailable {
                        reason: format!("{code}: {}", e.message),
                    }
                }
                code => CommitError::Rejected {
                    code,
                    message: e.message,
                },
            }),
            other => Err(CommitError::Unavailable {
                reason: format!(
                    "unexpected response to a commit (api key {})",
                    other.api_key()
                ),
            }),
        }
    }

    /// The application dropped the member without leaving. A dynamic member that is
    /// still in the group leaves `unconfirmed`: the application may still be acting on
    /// its partitions, so the coordinator holds them until this member's lease has run
    /// out (a lease, not a session, after its last heartbeat). A static member sends
    /// nothing: its next process takes over, or its session expires.
    pub(crate) fn abandon(&self) -> Option<Request> {
        if !matches!(self.phase, Phase::Active) || self.settings.instance_id.is_some() {
            return None;
        }
        if self.leaving.as_ref().is_some_and(|l| l.sent.is_some()) {
            return None;
        }
        Some(Request::Leave(LeaveRequest {
            group: self.settings.group.clone(),
            member_id: self.member_id.clone()?,
            mode: LeaveMode::Unconfirmed,
        }))
    }
}
