//! What arrives from the links: frames (answers and pushes), and connections being
//! made, lost or failing, with the reconnection or the search for a coordinator that
//! follows.

use super::*;

impl Driver {
    pub(super) fn on_inbound(&mut self, inbound: Inbound, now: Instant) {
        let Inbound { link, epoch, event } = inbound;
        if self.links.get(&link).is_none_or(|l| l.epoch != epoch) {
            // From an earlier attempt, or a link since dropped.
            return;
        }
        match event {
            ConnEvent::Opened(result) => {
                if let Some(l) = self.links.get_mut(&link) {
                    l.connecting = None;
                }
                match *result {
                    Ok(opened) => self.on_connected(link, opened, now),
                    Err(e) => self.connect_failed(link, &e, now),
                }
            }
            ConnEvent::Frame(frame) => self.on_frame(link, frame, now),
            ConnEvent::Lost(reason) => self.disconnect(link, &reason, now),
        }
    }

    fn on_frame(&mut self, link: LinkId, frame: Frame, now: Instant) {
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        l.last_frame_at = now;
        let std_now = now.into_std();
        match frame.body {
            Body::Response(response) => {
                let Some((pending, _)) = l.pending.remove(&frame.correlation_id) else {
                    debug!(
                        correlation = frame.correlation_id,
                        "response to an unknown request"
                    );
                    return;
                };
                self.on_response(link, pending, response, now);
            }
            Body::Push(Push::Shutdown(p)) => {
                info!(message = %p.message, "coordinator shutting down; reconnecting");
                self.disconnect(link, "coordinator shutting down", now);
            }
            Body::Push(push) => self.route_push(link, push, std_now),
            Body::Request(_) | Body::Unsupported(_) => {
                debug!(header = ?frame.body, "ignoring an unexpected frame");
            }
        }
    }

    fn on_response(&mut self, link: LinkId, pending: Pending, response: Response, now: Instant) {
        let std_now = now.into_std();
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
            Pending::Ask(reply) => {
                let _ = reply.send(Ok(response));
            }
            Pending::Fetch(mut pages) => {
                let more = match &response {
                    Response::FetchOffsets(r) => r.more == Some(true),
                    _ => false,
                };
                if let Response::Error(e) = &response {
                    if matches!(
                        e.code,
                        ErrorCode::NotCoordinator | ErrorCode::CoordinatorLoading
                    ) {
                        let reason = format!("{}: {}", e.code, e.message);
                        self.park_fetch(pages, reason, now);
                        return;
                    }
                }
                match fetch_result(response) {
                    Ok(offsets) => {
                        let last = offsets.keys().next_back().map(|tp| OffsetCursor {
                            topic: tp.topic.clone(),
                            partition: tp.partition,
                        });
                        pages.got.extend(offsets);
                        match last {
                            Some(after) if more => {
                                pages.after = Some(after.clone());
                                let request = pages.request(true, Some(after));
                                self.send(link, Pending::Fetch(pages), request);
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
            Pending::Beats(beats) => self.on_beats_answer(link, beats, response, std_now),
            Pending::Find(seeker) => {
                let asked = self
                    .links
                    .get(&link)
                    .map(|l| l.addr().to_owned())
                    .unwrap_or_default();
                let rng = &mut self.rng;
                let found = match seeker {
                    Seeker::Member(key) => self.slots.get_mut(&key).map(|s| &mut s.search),
                    Seeker::Fetch(key) => self.fetches.get_mut(&key).map(|f| &mut f.pages.search),
                }
                .map(|search| search.answered(response, &asked, std_now, rng));
                match (seeker, found) {
                    (_, None) => {}
                    (Seeker::Member(key), Some(Some(addr))) => {
                        debug!(key, %addr, "coordinator found");
                        self.place(key, addr, now);
                    }
                    (Seeker::Fetch(key), Some(Some(addr))) => self.fetch_found(key, addr, now),
                    (_, Some(None)) => {
                        debug!(?seeker, %asked, "no coordinator for the group there yet; asking again");
                    }
                }
            }
            Pending::Abandoned => {
                debug!(?response, "answer to a dropped member's leave");
            }
        }
    }

    /// A push goes to the memberships on the link it came on that it names (or, before
    /// a join's answer named the member, that may be it).
    fn route_push(&mut self, link: LinkId, push: Push, now: std::time::Instant) {
        let on_link = |s: &&Slot| s.link == Some(link);
        let exact: Vec<u64> = self
            .slots
            .iter()
            .filter(|(_, s)| on_link(s) && s.m.accepts_push(&push))
            .map(|(k, _)| *k)
            .collect();
        let targets = if exact.is_empty() {
            self.slots
                .iter()
                .filter(|(_, s)| on_link(s) && s.m.accepts_early_push(&push))
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

    fn on_connected(&mut self, link: LinkId, opened: Opened, now: Instant) {
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        info!(addr = %l.addr(), "connected");
        let conn = Connection::start(opened, &self.inbound_tx, link, l.epoch);
        let features = conn.features;
        l.conn = Some(conn);
        l.reset(now);
        self.note_features(link, features);
        for slot in self.slots.values_mut().filter(|s| s.link == Some(link)) {
            slot.m.handle_connected(now.into_std(), features);
        }
        self.resume_fetches(link);
    }

    /// `link`'s connection is gone. Its memberships suspend (their leases cannot be
    /// renewed until they are connected again); those on the bootstrap link wait for
    /// it to reconnect, those on a coordinator's link find their coordinator again
    /// (it may have failed, and another taken its groups over), and that link is
    /// dropped.
    pub(super) fn disconnect(&mut self, link: LinkId, reason: &str, now: Instant) {
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        if l.conn.take().is_none() {
            return;
        }
        warn!(addr = %l.addr(), reason, "connection lost");
        let pending: Vec<Pending> = l.pending.drain().map(|(_, (p, _))| p).collect();
        for pending in pending {
            match pending {
                Pending::Fetch(pages) => {
                    let _ = pages.reply.send(Err(RequestError::Unavailable {
                        reason: format!("connection lost: {reason}"),
                    }));
                }
                Pending::Ask(reply) => {
                    let _ = reply.send(Err(RequestError::Unavailable {
                        reason: format!("connection lost: {reason}"),
                    }));
                }
                _ => {}
            }
        }
        let std_now = now.into_std();
        if link == BOOTSTRAP {
            for parked in self.fetches.values_mut() {
                parked.pages.search.link_lost(link);
            }
        } else {
            // A question asked there goes to the next address.
            let addr = l.addr().to_owned();
            self.questions_missed(link, &addr, now);
        }
        let commits = format!("connection lost before the answer: {reason}");
        for slot in self.slots.values_mut() {
            slot.search.link_lost(link);
            if slot.link != Some(link) {
                continue;
            }
            slot.m.handle_disconnected(std_now);
            slot.fail_commits(&commits);
            if link != BOOTSTRAP {
                slot.link = None;
                slot.search.start(std_now, &mut self.rng);
            }
        }
        if link == BOOTSTRAP {
            self.schedule_reconnect(link, reason, now);
        } else {
            self.links.remove(&link);
        }
    }

    /// A connection attempt failed. The bootstrap link tries its next address, with
    /// backoff; the memberships waiting for a coordinator's link find their coordinator
    /// again. TLS failures (a certificate expired or refused) are logged as warnings:
    /// they do not pass by themselves.
    fn connect_failed(&mut self, link: LinkId, error: &ConnectError, now: Instant) {
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        if let ConnectError::Tls(_) = error {
            warn!(addr = %l.addr(), %error, "cannot connect over TLS; retrying with backoff");
        }
        if link == BOOTSTRAP {
            l.rotate();
            self.schedule_reconnect(link, &error.to_string(), now);
            return;
        }
        debug!(addr = %l.addr(), %error, "cannot connect to the coordinator found");
        let addr = l.addr().to_owned();
        self.links.remove(&link);
        self.questions_missed(link, &addr, now);
        self.fetches_unreachable(link, &format!("cannot connect to {addr}: {error}"), now);
        let std_now = now.into_std();
        for slot in self.slots.values_mut().filter(|s| s.link == Some(link)) {
            slot.link = None;
            slot.search.start(std_now, &mut self.rng);
        }
    }

    /// The first attempt after a working connection was lost waits at most
    /// `reconnect_base` (50 ms by default; the backoff is reset on every successful
    /// connection), well within any lease: suspended members resume as soon as the
    /// coordinator answers again.
    fn schedule_reconnect(&mut self, link: LinkId, reason: &str, now: Instant) {
        let Some(l) = self.links.get_mut(&link) else {
            return;
        };
        let delay = l.backoff.next_delay(&mut self.rng);
        debug!(reason, ?delay, "reconnecting");
        l.reconnect_at = Some(now + delay);
    }
}
