//! Routing: a handshaken connection's request, once access allows it, goes to the shard
//! of its group (a Heartbeats request spanning shards is split, see `heartbeats.rs`; a
//! ListGroups request asks them all, see `list_groups.rs`), unless the directory says
//! the group is not served here: then it is answered `not_coordinator` or
//! `coordinator_loading` without reaching a shard (see `super::super::directory`).
//! FindCoordinator and ListCoordinators are answered here too, from the directory.

use super::*;

/// A request read while its shard's open batch was full: it waits, and the connection
/// reads nothing behind it, until the batch has room (see `read_loop.rs`).
#[derive(Debug)]
pub(super) struct Holding {
    /// The shard it waits for.
    pub(super) shard: usize,
    correlation_id: u32,
    received: Instant,
    request: Held,
}

/// What a held request is, past the access check.
#[derive(Debug)]
pub(super) enum Held {
    /// A request for one shard.
    Route(Request),
    /// A Heartbeats request to split, with the beats access denied.
    Split(HeartbeatsRequest, Vec<bool>),
}

impl Connection {
    /// Holds `request` until `shard` has room.
    pub(super) fn hold(
        &mut self,
        shard: usize,
        correlation_id: u32,
        received: Instant,
        request: Held,
    ) {
        self.held = Some(Box::new(Holding {
            shard,
            correlation_id,
            received,
            request,
        }));
    }

    /// Sends on the held request once its shard has room, then handles the frames
    /// read behind it (until one is held again).
    pub(super) fn release_held(&mut self) -> Option<Exit> {
        let held = *self.held.take()?;
        let exit = match held.request {
            Held::Route(request) => self.route(held.correlation_id, request, held.received),
            Held::Split(request, denied) => {
                self.split_heartbeats(held.correlation_id, request, held.received, &denied)
            }
        };
        if exit.is_some() || self.held.is_some() {
            return exit;
        }
        let now = Instant::now();
        self.decode_buffered(now).or_else(|| self.after_decode(now))
    }

    pub(super) fn on_request(
        &mut self,
        correlation_id: u32,
        request: Request,
        received: Instant,
    ) -> Option<Exit> {
        let api = request.api_key();
        if crate::server::is_member_traffic(&request) {
            self.ctx.registry.traffic.heard(received);
        }
        let metrics = &self.ctx.metrics;
        metrics.request(api).increment(1);
        match &request {
            Request::Heartbeat(_) => metrics.heartbeats.increment(1),
            Request::Heartbeats(r) => metrics.heartbeats.increment(r.beats.len() as u64),
            _ => {}
        }
        if let Request::ApiVersions(hello) = &request {
            if !self.handshaken {
                debug!(conn = self.id, peer = %self.peer, client = hello.client_software, "handshake");
            }
            self.handshaken = true;
            let max_frame_size = u32::try_from(self.ctx.codec.max_frame_size()).unwrap_or(u32::MAX);
            self.reply(
                correlation_id,
                Response::ApiVersions(ApiVersionsResponse {
                    versions: supported_versions(),
                    max_frame_size,
                }),
                api,
                received,
            );
            return None;
        }
        if !self.handshaken {
            self.handshake_required(correlation_id, api as u16);
            metrics
                .duration(api)
                .record(received.elapsed().as_secs_f64());
            return None;
        }
        let request = match self.check_access(correlation_id, request, received) {
            access::Access::Pass(request) => request,
            access::Access::Answered => return None,
            access::Access::Exit(exit) => return Some(exit),
        };
        self.route(correlation_id, request, received)
    }

    /// Sends a request access allows to its group's shard, or holds it while that
    /// shard's open batch is full.
    fn route(&mut self, correlation_id: u32, request: Request, received: Instant) -> Option<Exit> {
        let api = request.api_key();
        let shard = match &request {
            Request::Heartbeats(r) => {
                if r.beats.is_empty() || r.beats.len() > MAX_BEATS {
                    // The core refuses it too; no shard to ask.
                    self.reply(
                        correlation_id,
                        Response::error(
                            api as u16,
                            ErrorCode::InvalidRequest,
                            format!("a Heartbeats request carries 1 to {MAX_BEATS} beats"),
                        ),
                        api,
                        received,
                    );
                    return None;
                }
                let shards = self.ctx.shards.len();
                let first = shard_of(&r.beats[0].group, shards);
                let directory = &self.ctx.directory;
                if r.beats.iter().any(|b| shard_of(&b.group, shards) != first)
                    || (!directory.is_single()
                        && r.beats.iter().any(|b| !directory.is_here(&b.group)))
                {
                    let Request::Heartbeats(r) = request else {
                        return None;
                    };
                    return self.split_heartbeats(correlation_id, r, received, &[]);
                }
                first
            }
            Request::ListGroups(_) => {
                let Request::ListGroups(r) = request else {
                    return None;
                };
                self.list_groups(correlation_id, r, received);
                return None;
            }
            Request::FindCoordinator(r) => {
                let response = self.find_coordinator(&r.group);
                self.reply(correlation_id, response, api, received);
                return None;
            }
            Request::ListCoordinators(_) => {
                let coordinators = self.ctx.directory.others().to_vec();
                let response =
                    Response::ListCoordinators(ListCoordinatorsResponse { coordinators });
                self.reply(correlation_id, response, api, received);
                return None;
            }
            request => match request.group() {
                Some(group) => {
                    if !self.ctx.directory.is_single() {
                        if let Some(refusal) = self.gate(api, group) {
                            self.reply(correlation_id, refusal, api, received);
                            return None;
                        }
                    }
                    shard_of(group, self.ctx.shards.len())
                }
                None => {
                    self.reply(
                        correlation_id,
                        Response::error(
                            api as u16,
                            ErrorCode::InvalidRequest,
                            "this request names no group",
                        ),
                        api,
                        received,
                    );
                    return None;
                }
            },
        };
        if self.ctx.shards[shard].is_full() {
            self.hold(shard, correlation_id, received, Held::Route(request));
            return None;
        }
        let reply = Reply::Frame {
            to: self.handle.clone(),
            correlation_id,
            api,
            received,
        };
        self.hand_to_shard(shard, request, reply)
    }

    /// The answer to a request for `group` when this coordinator does not serve it:
    /// `coordinator_loading` while it loads the group, `not_coordinator` when another
    /// coordinator (or none known) serves it; `None` when it is served here.
    pub(super) fn gate(&self, api: ApiKey, group: &str) -> Option<Response> {
        let (code, message) = match self.ctx.directory.lookup(group) {
            Lookup::Here => return None,
            Lookup::Loading => (
                ErrorCode::CoordinatorLoading,
                format!("group {group:?} is loading; retry here after a backoff"),
            ),
            Lookup::Elsewhere(_) => (
                ErrorCode::NotCoordinator,
                format!("group {group:?} is served by another coordinator"),
            ),
            Lookup::Unknown => (
                ErrorCode::NotCoordinator,
                format!("group {group:?} is not served here, and its coordinator is not known yet"),
            ),
        };
        self.ctx.metrics.denied(api, code).increment(1);
        Some(Response::error(api as u16, code, message))
    }

    /// The answer to FindCoordinator: the advertised address of the coordinator that
    /// serves `group` (this one's, on a single coordinator).
    fn find_coordinator(&self, group: &str) -> Response {
        let api = ApiKey::FindCoordinator as u16;
        let addr = match self.ctx.directory.lookup(group) {
            Lookup::Here => self.ctx.advertise.to_string(),
            Lookup::Elsewhere(addr) => addr.to_string(),
            Lookup::Loading => {
                return Response::error(
                    api,
                    ErrorCode::CoordinatorLoading,
                    format!("group {group:?} is loading; ask again after a backoff"),
                )
            }
            Lookup::Unknown => {
                return Response::error(
                    api,
                    ErrorCode::NotCoordinator,
                    format!("no coordinator serves group {group:?} yet; ask again after a backoff"),
                )
            }
        };
        Response::FindCoordinator(FindCoordinatorResponse { addr })
    }

    /// Hands `request` to `shard`; false if the shard is unavailable (answered).
    pub(super) fn hand_to_shard(
        &mut self,
        shard: usize,
        request: Request,
        reply: Reply,
    ) -> Option<Exit> {
        self.used_shards[shard] = true;
        let authority = match &request {
            Request::Drain(_) | Request::AlterGroupConfig(_) => {
                let group = request.group().unwrap_or_default().to_owned();
                self.authority(&group)
            }
            _ => crate::core::Authority::Operator,
        };
        match self.ctx.shards[shard].request_as(self.id, request, reply, authority) {
            Handled::Answered | Handled::Staged => None,
            Handled::Unavailable(reply) => {
                let api = match &reply {
                    Reply::Frame { api, .. } => *api,
                    Reply::Part { .. } => ApiKey::Heartbeats,
                };
                reply.deliver(
                    Response::error(
                        api as u16,
                        ErrorCode::Internal,
                        "coordinator shard unavailable",
                    ),
                    &self.ctx.metrics,
                    true,
                );
                Some(Exit::ShardGone)
            }
        }
    }
}
