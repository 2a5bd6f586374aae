//! Protocol errors: answers to frames that cannot be served (before the handshake, of
//! an unknown API or version, malformed, too large, left unfinished, or past the
//! buffer budget), each counted and logged.

use super::*;

impl Connection {
    /// Answers a request other than ApiVersions (of any key or version) that arrives
    /// before the handshake.
    pub(super) fn handshake_required(&self, correlation_id: u32, api_key: u16) {
        self.ctx
            .metrics
            .protocol_error(ProtocolError::HandshakeRequired)
            .increment(1);
        warn!(conn = self.id, peer = %self.peer, api_key, "request before the handshake");
        self.send(Frame::response(
            correlation_id,
            Response::error(
                api_key,
                ErrorCode::HandshakeRequired,
                "send ApiVersions first",
            ),
        ));
    }

    pub(super) fn on_unsupported(&mut self, header: Header) {
        // Before the handshake only ApiVersions is answered on its merits (at a version
        // this coordinator does not speak: unsupported_version, listing those it does, so
        // the client can fall back).
        if !self.handshaken && header.api_key != ApiKey::ApiVersions as u16 {
            self.handshake_required(header.correlation_id, header.api_key);
            return;
        }
        let (code, kind, what) = if ApiKey::from_u16(header.api_key).is_some() {
            (
                ErrorCode::UnsupportedVersion,
                ProtocolError::UnsupportedVersion,
                format!(
                    "version {} of API {} is not supported",
                    header.api_version, header.api_key
                ),
            )
        } else {
            (
                ErrorCode::UnknownApi,
                ProtocolError::UnknownApi,
                format!("unknown API key {}", header.api_key),
            )
        };
        self.ctx.metrics.protocol_error(kind).increment(1);
        warn!(conn = self.id, peer = %self.peer, api_key = header.api_key,
            api_version = header.api_version, "{what}");
        self.send(Frame::response(
            header.correlation_id,
            Response::Error(ErrorResponse {
                api_key: header.api_key,
                code,
                message: what,
                supported: supported_versions(),
            }),
        ));
    }

    pub(super) fn on_frame_error(&mut self, error: FrameError) -> Exit {
        match error {
            FrameError::TooLarge { .. } => {
                self.ctx
                    .metrics
                    .protocol_error(ProtocolError::FrameTooLarge)
                    .increment(1);
                warn!(conn = self.id, peer = %self.peer, error = %error, "closing connection");
                self.send(Frame::response(
                    0,
                    Response::error(0, ErrorCode::FrameTooLarge, error.to_string()),
                ));
                Exit::Protocol
            }
            FrameError::Malformed { header, .. } => {
                self.protocol_error(header, error.to_string());
                Exit::Protocol
            }
            FrameError::TooShort { .. } | FrameError::Encode(_) => {
                self.protocol_error(None, error.to_string());
                Exit::Protocol
            }
            FrameError::Io(e) => {
                debug!(conn = self.id, peer = %self.peer, error = %e, "read failed");
                Exit::Eof
            }
        }
    }

    /// Answers a frame that could not be used with `MalformedFrame`.
    pub(super) fn protocol_error(&mut self, header: Option<Header>, message: String) {
        self.ctx
            .metrics
            .protocol_error(ProtocolError::MalformedFrame)
            .increment(1);
        warn!(conn = self.id, peer = %self.peer, error = %message, "malformed frame; closing connection");
        let (correlation_id, api_key) = header.map_or((0, 0), |h| (h.correlation_id, h.api_key));
        self.send(Frame::response(
            correlation_id,
            Response::error(api_key, ErrorCode::MalformedFrame, message),
        ));
    }

    /// Refuses a frame the shared buffer budget has no room for: the stream is not at a
    /// frame boundary any more, so the answer concerns the connection (correlation id
    /// 0) and it closes. The client reconnects with backoff.
    pub(super) fn read_over_budget(&mut self) -> Exit {
        self.read = BytesMut::new();
        self.ctx
            .metrics
            .protocol_error(ProtocolError::BufferBudget)
            .increment(1);
        warn!(conn = self.id, peer = %self.peer, max = self.ctx.limits.budget_max(),
            "no room for a large frame: every connection's buffers are at their budget; closing");
        self.send(Frame::response(
            0,
            Response::error(
                0,
                ErrorCode::TooManyConnections,
                "the coordinator's connection buffers are at their budget; retry later",
            ),
        ));
        Exit::Protocol
    }

    /// Answers a frame left unfinished past the frame deadline, before closing.
    pub(super) fn frame_timed_out(&mut self) {
        let message = format!(
            "frame not completed within {}; closing the connection",
            crate::server::format_duration(self.ctx.frame_timeout)
        );
        self.send(Frame::response(
            0,
            Response::error(0, ErrorCode::MalformedFrame, message),
        ));
    }
}
