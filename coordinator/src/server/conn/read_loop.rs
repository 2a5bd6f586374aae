//! The read loop: one task waits on the socket, its queue and one timer for every
//! deadline, reads what has arrived and hands each whole frame on.

use std::cell::Cell;

use super::*;

thread_local! {
    /// The read buffer of the connections this thread serves, for whichever is
    /// reading with no frame partly read.
    static THREAD_READ: Cell<BytesMut> = Cell::new(BytesMut::new());
}

/// Bytes the thread's read buffer holds room for at the start of a read.
const THREAD_READ_SIZE: usize = 4096;

/// A thread's read buffer grown past this (by a large read, or to the size of a frame
/// begun in it) is not kept for the next connection.
const THREAD_READ_MAX: usize = 64 * 1024 + 4096;

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
            // A request for a shard whose open batch is full (its records are slow to
            // become durable) waits, and nothing more is read behind it, until the
            // batch has room: the time spent waiting is the coordinator's backlog.
            // Connections that send nothing to that shard read on.
            if let Some(shard) = self.held.as_ref().map(|h| h.shard) {
                // What was answered before it goes out first.
                if let Err(exit) = self.flush(stream) {
                    return exit;
                }
                let shard = self.ctx.shards[shard].clone();
                if let Some(waited) = shard.wait_for_room().await {
                    self.ctx.registry.lag.saw(waited);
                }
                if let Some(exit) = self.release_held() {
                    return exit;
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

    /// Reads what has arrived and handles every whole frame in it (until a request
    /// waits for its shard's room, see [`Connection::held`]).
    fn read_frames(&mut self, stream: &TcpStream) -> Option<Exit> {
        let mut closed = false;
        match &self.transport {
            Transport::Plain if self.read.is_empty() => return self.read_frames_shared(stream),
            Transport::Plain => match io::read_some(stream, &mut self.read, &mut self.read_hint) {
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
        let now = Instant::now();
        if let Some(exit) = self.decode_buffered(now) {
            return Some(exit);
        }
        if let Some(exit) = self.after_decode(now) {
            return Some(exit);
        }
        closed.then_some(Exit::Eof)
    }

    /// [`Connection::read_frames`] on a plain connection with no frame partly read
    /// (nearly every wake): what arrived is read into the connection thread's buffer,
    /// kept from wake to wake, and only the beginning of a frame not yet whole (or
    /// what follows a held request) is copied into the connection's own buffer. A
    /// heartbeat allocates no read buffer, and an idle connection holds none.
    fn read_frames_shared(&mut self, stream: &TcpStream) -> Option<Exit> {
        let mut buffer = THREAD_READ.take();
        // Takes back the space of frames already dropped, or starts a new buffer if
        // one is still held (a request waiting for its shard).
        buffer.reserve(THREAD_READ_SIZE);
        let read = io::read_some(stream, &mut buffer, &mut self.read_hint);
        let exit = match read {
            Ok(0) => Some(Exit::Eof),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                THREAD_READ.set(buffer);
                return None;
            }
            Err(e) => {
                debug!(conn = self.id, peer = %self.peer, error = %e, "read failed");
                Some(Exit::Eof)
            }
        };
        let now = Instant::now();
        let exit = exit.or_else(|| self.decode(&mut buffer, now));
        if exit.is_none() && !buffer.is_empty() {
            if buffer.capacity() > THREAD_READ_MAX {
                // The codec made it the size of the frame begun in it: it is the
                // connection's now.
                self.read = std::mem::take(&mut buffer);
            } else {
                self.read = BytesMut::from(&buffer[..]);
                buffer.clear();
                if self.held.is_none() {
                    // What remains is less than a frame: the codec reserves the rest
                    // of it once its length is known (it returns nothing else).
                    let mut codec = self.ctx.codec;
                    let _ = codec.decode(&mut self.read);
                }
            }
        }
        if buffer.capacity() <= THREAD_READ_MAX {
            THREAD_READ.set(buffer);
        }
        if exit.is_some() {
            return exit;
        }
        self.after_decode(now)
    }

    /// Handles every whole frame in the connection's buffer, until a request is held.
    pub(super) fn decode_buffered(&mut self, now: Instant) -> Option<Exit> {
        let mut buffer = std::mem::take(&mut self.read);
        let exit = self.decode(&mut buffer, now);
        self.read = buffer;
        exit
    }

    /// Handles every whole frame in `buffer`, until a request is held.
    fn decode(&mut self, buffer: &mut BytesMut, now: Instant) -> Option<Exit> {
        let mut codec = self.ctx.codec;
        while self.held.is_none() {
            match codec.decode(buffer) {
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
        None
    }

    /// After frames were handled: the frame deadline starts with a frame's first byte,
    /// an empty buffer is dropped, and the buffer's size is counted against the budget.
    pub(super) fn after_decode(&mut self, now: Instant) -> Option<Exit> {
        if self.read.is_empty() {
            self.frame_started = None;
            self.release_read_buffer();
        } else if self.frame_started.is_none() && self.held.is_none() {
            self.frame_started = Some(now);
        }
        let size = self.read.capacity();
        if size != self.read_counted {
            if !self.ctx.limits.budget.resize(self.read_counted, size) {
                return Some(self.read_over_budget());
            }
            self.read_counted = size;
        }
        None
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
