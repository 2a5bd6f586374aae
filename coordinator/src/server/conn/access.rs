//! Authentication and access checks, between the handshake and the shards: the
//! Authenticate exchange is answered here, and every other request is let through,
//! answered `authentication_required` or `not_authorized`, or (a Heartbeats request
//! with some beats denied) split. With no auth file, everything passes untouched.

use rollcall_protocol::{AuthenticateResponse, Request};

use super::*;
use crate::core::Authority;
use crate::server::auth::{Operation, Step};

/// What became of a request at the access check.
pub(super) enum Access {
    /// Allowed: on to the shards.
    Pass(Request),
    /// Answered here.
    Answered,
    /// Answered here (if it could be), and the connection ends so.
    Exit(Exit),
}

/// The answer to a request the principal may not make. It says the same whether or not
/// the group exists.
pub(super) fn not_authorized(api: ApiKey) -> Response {
    Response::error(
        api as u16,
        ErrorCode::NotAuthorized,
        "not authorized for this operation on this group",
    )
}

impl Connection {
    /// The authority this connection's identity has over an operator's request on
    /// `group`: an operator's without access rules or with `admin` on the group, else a
    /// member's (which may drain only members bound to this connection).
    pub(super) fn authority(&mut self, group: &str) -> Authority {
        match self.auth.as_mut() {
            Some(auth) if self.ctx.security.is_some() => {
                if auth.allows(Operation::Admin, group) {
                    Authority::Operator
                } else {
                    Authority::Member
                }
            }
            _ => Authority::Operator,
        }
    }

    /// Counts the connection against its principal's limit once it has one; answers
    /// `too_many_connections` and closes if the principal has its maximum.
    fn hold_principal(
        &mut self,
        correlation_id: u32,
        api: ApiKey,
        received: Instant,
    ) -> Option<Access> {
        if self.principal_slot.is_some() {
            return None;
        }
        let principal = self.auth.as_ref()?.principal()?.to_owned();
        match self.ctx.per_principal.take(Arc::from(principal.as_str())) {
            Some(slot) => {
                self.principal_slot = Some(Box::new(slot));
                None
            }
            None => {
                self.ctx
                    .metrics
                    .protocol_error(ProtocolError::TooManyConnectionsPerPrincipal)
                    .increment(1);
                warn!(conn = self.id, peer = %self.peer, principal,
                    max = self.ctx.per_principal.max(),
                    "connection refused: too many connections of this principal");
                self.reply(
                    correlation_id,
                    Response::error(
                        api as u16,
                        ErrorCode::TooManyConnections,
                        "this principal has its maximum number of connections; retry later",
                    ),
                    api,
                    received,
                );
                Some(Access::Exit(Exit::Protocol))
            }
        }
    }

    pub(super) fn check_access(
        &mut self,
        correlation_id: u32,
        request: Request,
        received: Instant,
    ) -> Access {
        let api = request.api_key();
        if let Request::Authenticate(r) = &request {
            return self.authenticate(correlation_id, &r.mechanism, &r.payload, received);
        }
        let Some(security) = &self.ctx.security else {
            return Access::Pass(request);
        };
        let auth = self.auth.get_or_insert_with(|| {
            Box::new(ConnAuth::new(security.clone(), self.tls_identity.clone()))
        });
        let authenticated = auth.is_authenticated();
        if authenticated {
            if let Some(exit) = self.hold_principal(correlation_id, api, received) {
                return exit;
            }
        }
        let Some(auth) = self.auth.as_mut() else {
            return Access::Pass(request);
        };
        if !authenticated {
            self.ctx
                .metrics
                .denied(api, ErrorCode::AuthenticationRequired)
                .increment(1);
            self.reply(
                correlation_id,
                Response::error(
                    api as u16,
                    ErrorCode::AuthenticationRequired,
                    "this coordinator requires authentication: send Authenticate (SCRAM-SHA-256) or connect with a client certificate",
                ),
                api,
                received,
            );
            return Access::Answered;
        }
        let Some(operation) = Operation::of(&request) else {
            return Access::Pass(request);
        };
        match &request {
            // Filtered by group when answered.
            Request::ListGroups(_) => Access::Pass(request),
            // A request of too many beats is refused whole by the routing, whatever its
            // groups: a split would answer it beat by beat, past the limit.
            Request::Heartbeats(r) if r.beats.len() > MAX_BEATS => Access::Pass(request),
            Request::Heartbeats(r) => {
                let denied: Vec<bool> = r
                    .beats
                    .iter()
                    .map(|b| !auth.allows(operation, &b.group))
                    .collect();
                if !denied.contains(&true) {
                    return Access::Pass(request);
                }
                let count = denied.iter().filter(|d| **d).count();
                self.ctx
                    .metrics
                    .denied(api, ErrorCode::NotAuthorized)
                    .increment(count as u64);
                debug!(conn = self.id, peer = %self.peer, beats = count, "heartbeats not authorized");
                let Request::Heartbeats(r) = request else {
                    return Access::Answered;
                };
                match self.split_heartbeats(correlation_id, r, received, &denied) {
                    Some(exit) => Access::Exit(exit),
                    None => Access::Answered,
                }
            }
            _ => {
                let group = request.group().unwrap_or_default();
                if auth.allows(operation, group) {
                    return Access::Pass(request);
                }
                // A member's drain of itself needs only `join`; the core checks that the
                // member is bound to this connection (see `Connection::authority`).
                if matches!(&request, Request::Drain(d) if !d.member_id.is_empty())
                    && auth.allows(Operation::Join, group)
                {
                    return Access::Pass(request);
                }
                self.ctx
                    .metrics
                    .denied(api, ErrorCode::NotAuthorized)
                    .increment(1);
                debug!(conn = self.id, peer = %self.peer, api = api.as_str(), group,
                    operation = operation.as_str(), "request not authorized");
                self.reply(correlation_id, not_authorized(api), api, received);
                Access::Answered
            }
        }
    }

    fn authenticate(
        &mut self,
        correlation_id: u32,
        mechanism: &str,
        payload: &str,
        received: Instant,
    ) -> Access {
        let api = ApiKey::Authenticate;
        let Some(security) = &self.ctx.security else {
            return self.authentication_failed(
                correlation_id,
                "this coordinator does not authenticate (it has no auth file)".into(),
                received,
            );
        };
        let auth = self.auth.get_or_insert_with(|| {
            Box::new(ConnAuth::new(security.clone(), self.tls_identity.clone()))
        });
        match auth.step(mechanism, payload) {
            Step::Continue(payload) => {
                self.reply(
                    correlation_id,
                    Response::Authenticate(AuthenticateResponse {
                        payload,
                        complete: false,
                        principal: String::new(),
                    }),
                    api,
                    received,
                );
                Access::Answered
            }
            Step::Done { principal, payload } => {
                self.ctx.metrics.authentications_ok.increment(1);
                if let Some(exit) = self.hold_principal(correlation_id, api, received) {
                    return exit;
                }
                debug!(conn = self.id, peer = %self.peer, principal, "authenticated");
                self.reply(
                    correlation_id,
                    Response::Authenticate(AuthenticateResponse {
                        payload,
                        complete: true,
                        principal,
                    }),
                    api,
                    received,
                );
                Access::Answered
            }
            Step::Already(message) => {
                self.reply(
                    correlation_id,
                    Response::error(api as u16, ErrorCode::InvalidRequest, message),
                    api,
                    received,
                );
                Access::Answered
            }
            Step::Failed(message) => self.authentication_failed(correlation_id, message, received),
        }
    }

    /// Answers `authentication_failed` and closes: a failed exchange is not retried on
    /// the same connection, which bounds guesses to one per connection (and per
    /// handshake deadline's worth of work).
    fn authentication_failed(
        &mut self,
        correlation_id: u32,
        message: String,
        received: Instant,
    ) -> Access {
        self.ctx.metrics.authentications_failed.increment(1);
        warn!(conn = self.id, peer = %self.peer, reason = %message, "authentication failed");
        self.reply(
            correlation_id,
            Response::error(
                ApiKey::Authenticate as u16,
                ErrorCode::AuthenticationFailed,
                format!("authentication failed: {message}"),
            ),
            ApiKey::Authenticate,
            received,
        );
        Access::Exit(Exit::Protocol)
    }
}
