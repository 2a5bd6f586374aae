//! What arrives from the connection: frames (answers and pushes), and the connection
//! itself being made, lost or failing, with the reconnection it schedules.

use super::*;

impl Driver {
    pub(super) fn on_frame(&mut self, frame: Frame, now: Instant) {
        self.last_frame_at = now;
        let std_now = now.into_std();
        match frame.body {
            Body::Response(response) => {
                let Some((pending, _)) = self.pending.remove(&frame.correlation_id) else {
                    debug!(
                        correlation = frame.correlation_id,
                        "response to an unknown request"
                    );
                    return;
                };
                match pending {
                    Pending::Member { key, id } => {
                        if let Some(slot) = self.slots.get_mut(&key) {
                            slot.m.handle_response(id, response, std_now);
                        }
                    }
                    Pending::Commit { key, id } => {
                        if let Some(slot) = self.slots.get_mut(&key) {
                            let result = slot.m.handle_commit_response(id, response, std_now);
                            if let Some(reply) = slot.commits.remove(&id) {
                                let _ = reply.send(result);
                            }
                        }
                    }
                    Pending::Fetch(mut pages) => {
                        let more = match &response {
                            Response::FetchOffsets(r) => r.more == Some(true),
                            _ => false,
                        };
                        match fetch_result(response) {
                            Ok(offsets) => {
                                let last = offsets.keys().next_back().map(|tp| OffsetCursor {
                                    topic: tp.topic.clone(),
                                    partition: tp.partition,
                                });
                                pages.got.extend(offsets);
                                match last {
                                    Some(after) if more => {
                                        let request = pages.request(true, Some(after));
                                        self.send(Pending::Fetch(pages), request);
                                    }
                                    _ => {
                                        let _ = pages.reply.send(Ok(pages.got));
                                    }
                                }
                            }
                            Err(e) => {
                                let _ = pages.reply.send(Err(e));
                            }
                        }
                    }
                    Pending::Beats(beats) => self.on_beats_answer(beats, response, std_now),
                    Pending::Abandoned => {
                        debug!(?response, "answer to a dropped member's leave");
                    }
                }
            }
            Body::Push(Push::Shutdown(p)) => {
                info!(message = %p.message, "coordinator shutting down; reconnecting");
                self.disconnect("coordinator shutting down", now);
            }
            Body::Push(push) => self.route_push(push, std_now),
            Body::Request(_) | Body::Unsupported(_) => {
                debug!(header = ?frame.body, "ignoring an unexpected frame");
            }
        }
    }

    fn route_push(&mut self, push: Push, now: std::time::Instant) {
        let exact: Vec<u64> = self
            .slots
            .iter()
            .filter(|(_, s)| s.m.accepts_push(&push))
            .map(|(k, _)| *k)
            .collect();
        let targets = if exact.is_empty() {
            self.slots
                .iter()
                .filter(|(_, s)| s.m.accepts_early_push(&push))
                .map(|(k, _)| *k)
                .collect()
        } else {
            exact
        };
        for key in targets {
            if let Some(slot) = self.slots.get_mut(&key) {
                slot.m.handle_push(push.clone(), now);
            }
        }
    }

    pub(super) fn on_connected(&mut self, conn: Connection, now: Instant) {
        info!(addr = %self.addr, "connected");
        let features = conn.features;
        self.conn = Some(conn);
        self.last_frame_at = now;
        self.backoff.reset();
        self.next_correlation = HANDSHAKE_CORRELATION + 1;
        self.beats_refused = false;
        self.note_features(features);
        for slot in self.slots.values_mut() {
            slot.m.handle_connected(now.into_std(), features);
        }
    }

    pub(super) fn disconnect(&mut self, reason: &str, now: Instant) {
        if self.conn.take().is_none() {
            return;
        }
        warn!(addr = %self.addr, reason, "connection lost");
        for (_, (pending, _)) in self.pending.drain() {
            if let Pending::Fetch(pages) = pending {
                let _ = pages.reply.send(Err(RequestError::Unavailable {
                    reason: format!("connection lost: {reason}"),
                }));
            }
        }
        for slot in self.slots.values_mut() {
            slot.m.handle_disconnected(now.into_std());
            for (_, reply) in slot.commits.drain() {
                let _ = reply.send(Err(CommitError::Unavailable {
                    reason: format!("connection lost before the answer: {reason}"),
                }));
            }
        }
        self.schedule_reconnect(reason, now);
    }

    /// A connection attempt failed: retried with backoff. TLS failures (a certificate
    /// expired or refused) are logged as warnings: they do not pass by themselves.
    pub(super) fn connect_failed(&mut self, error: &ConnectError, now: Instant) {
        if let ConnectError::Tls(_) = error {
            warn!(addr = %self.addr, %error, "cannot connect over TLS; retrying with backoff");
        }
        self.schedule_reconnect(&error.to_string(), now);
    }

    /// The first attempt after a working connection was lost waits at most
    /// `reconnect_base` (50 ms by default; the backoff is reset on every successful
    /// connection), well within any lease: suspended members resume as soon as the
    /// coordinator answers again.
    pub(super) fn schedule_reconnect(&mut self, reason: &str, now: Instant) {
        let delay = self.backoff.next_delay(&mut self.rng);
        debug!(reason, ?delay, "reconnecting");
        self.reconnect_at = Some(now + delay);
    }
}
