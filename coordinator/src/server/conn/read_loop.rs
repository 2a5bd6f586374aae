//! The read loop: one task waits on the socket, its queue and one timer for every
//! deadline, reads what has arrived and hands each whole frame on.

use super::*;

impl Connection {
    /// When the deadline in force falls: the handshake's until the handshake, a partly
    /// read frame's, else the idle one.
    pub(super) fn deadline(&self) -> Instant {
        let mut due = if self.handshaken {
            self.last_frame + self.ctx.idle_timeout
        } else {
            self.accepted + self.ctx.handshake_timeout
        };
        if let Some(started) = self.frame_started {
            let frame_due = started + self.ctx.frame_timeout;
            due = if self.handshaken {
                frame_due
            } else {
                due.min(frame_due)
            };
        }
        due
    }

    pub(super) async fn read_loop(&mut self, stream: &TcpStream) -> Exit {
        // One timer for every deadline. It is moved only when the deadline moves
        // earlier; when it fires early (the idle deadline moved on since), it is moved
        // to the real deadline then, so a busy connection does not touch it per frame.
        let mut timer_at = self.deadline();
        let timer = tokio::time::sleep_until(timer_at);
        tokio::pin!(timer);
        // Made once and kept: a heartbeat should not pay for registering it anew. Kills
        // and the server's shutdown wake the task through it too, and are checked as
        // flags (a cancellation token's check takes a lock shared by every connection).
        let state = self.state.clone();
        let ready = state.ready.notified();
        tokio::pin!(ready);
        loop {
            if state.is_killed() {
                return Exit::Killed;
            }
            if self.ctx.stopping.load(Ordering::Acquire) {
                return Exit::Shutdown;
            }
            // Nothing more is read while a shard's open batch is full (its records are
            // slow to become durable): the time spent waiting is the coordinator's
            // backlog.
            if let Some(shard) = self.ctx.shards.iter().find(|s| s.is_full()) {
                let shard = shard.clone();
                if let Some(waited) = shard.wait_for_room().await {
                    self.ctx.registry.lag.saw(waited);
                }
                continue;
            }
            if let Err(exit) = self.flush(stream) {
                return exit;
            }
            let due = self.deadline();
            if due < timer_at {
                timer_at = due;
                timer.as_mut().reset(due);
            }
            let blocked = self.write_blocked();
            tokio::select! {
                biased;
                // Before the deadlines: what has arrived is read first.
                ready = stream.readable() => {
                    if ready.is_err() {
                        return Exit::Eof;
                    }
                    if let Some(exit) = self.read_frames(stream) {
                        return exit;
                    }
                }
                _ = stream.writable(), if blocked => {}
                () = &mut ready => ready.set(state.ready.notified()),
                () = &mut timer => {
                    let due = self.deadline();
                    if Instant::now() < due {
                        timer_at = due;
                        timer.as_mut().reset(due);
                        continue;
                    }
                    if self.frame_started.is_some() {
                        self.frame_timed_out();
                        return Exit::FrameTimeout;
                    }
                    return if self.handshaken {
                        Exit::IdleTimeout
                    } else {
                        Exit::HandshakeTimeout
                    };
                }
            }
        }
    }

    /// Reads what has arrived and handles every whole frame in it.
    fn read_frames(&mut self, stream: &TcpStream) -> Option<Exit> {
        let mut closed = false;
        match &self.transport {
            Transport::Plain => match self.read_some(stream) {
                Ok(0) => return Some(Exit::Eof),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
                Err(e) => {
                    debug!(conn = self.id, peer = %self.peer, error = %e, "read failed");
                    return Some(Exit::Eof);
                }
            },
            // The frames that came with the peer's close are handled first.
            Transport::Tls(_) => match self.read_tls(stream) {
                Ok(peer_closed) => closed = peer_closed,
                Err(exit) => return Some(exit),
            },
        }
        let mut codec = self.ctx.codec;
        let now = Instant::now();
        loop {
            match codec.decode(&mut self.read) {
                Ok(Some(frame)) => {
                    self.last_frame = now;
                    self.frame_started = None;
                    if let Some(exit) = self.on_frame(frame, now) {
                        return Some(exit);
                    }
                }
                Ok(None) => break,
                Err(e) => return Some(self.on_frame_error(e)),
            }
        }
        if self.read.is_empty() {
            self.frame_started = None;
            self.release_read_buffer();
        } else if self.frame_started.is_none() {
            self.frame_started = Some(now);
        }
        let size = self.read.capacity();
        if size != self.read_counted {
            if !self.ctx.limits.budget.resize(self.read_counted, size) {
                return Some(self.read_over_budget());
            }
            self.read_counted = size;
        }
        closed.then_some(Exit::Eof)
    }

    fn on_frame(&mut self, frame: Frame, received: Instant) -> Option<Exit> {
        let correlation_id = frame.correlation_id;
        match frame.body {
            Body::Request(request) => self.on_request(correlation_id, request, received),
            Body::Unsupported(header) if header.kind == FrameKind::Request => {
                self.on_unsupported(header);
                None
            }
            Body::Unsupported(header) => {
                self.protocol_error(Some(header), "expected a request frame".into());
                Some(Exit::Protocol)
            }
            body @ (Body::Response(_) | Body::Push(_)) => {
                let header = Frame {
                    correlation_id,
                    body,
                }
                .header();
                self.protocol_error(Some(header), "expected a request frame".into());
                Some(Exit::Protocol)
            }
        }
    }
}
