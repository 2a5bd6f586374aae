//! A connection's socket work, all on the connection's own task: reading what has
//! arrived (into the connection thread's buffer, or into the connection's own while a
//! frame is incomplete, see `read_loop.rs`), and writing the connection's queue with
//! vectored writes that never wait. Over TLS, reading and
//! writing go through the session instead (`tls_io.rs`); waiting, draining and
//! closing are the same.

use std::io::{self, IoSlice};

use crate::server::outbox::ConnState;

use tokio::io::Interest;

use super::*;

/// Bytes a first read asks for, into a buffer on the stack: most frames are far smaller.
const READ_CHUNK: usize = 1024;

/// Bytes read per wake, at most; the rest waits for the connection's next turn.
const READ_LIMIT: usize = 64 * 1024;

/// Frames handed to one vectored write, at most.
const WRITE_SLICES: usize = 64;

impl Connection {
    /// Drops the read buffer once it holds nothing: an idle connection keeps none.
    pub(super) fn release_read_buffer(&mut self) {
        if self.read.is_empty() && self.read.capacity() > 0 {
            self.read = BytesMut::new();
        }
    }

    /// Writes queued frames as far as the socket takes them without waiting. Fails
    /// (and kills the connection) if the socket fails.
    pub(super) fn flush(&mut self, stream: &TcpStream) -> Result<(), Exit> {
        if let Transport::Tls(_) = self.transport {
            return self.flush_tls(stream);
        }
        loop {
            let round = write_round(
                &mut self.writing,
                &mut self.write_pos,
                &self.state,
                |slices| stream.try_write_vectored(slices),
            );
            match round {
                Ok(Round::Wrote) => {}
                Ok(Round::Done | Round::Empty | Round::Blocked) => return Ok(()),
                Err(e) => {
                    debug!(conn = self.id, error = %e, "write failed; closing connection");
                    self.state.terminate();
                    return Err(Exit::Killed);
                }
            }
        }
    }

    /// Whether frames (or, over TLS, session bytes) wait to be written. Over TLS,
    /// frames count only once the session can carry them: a connection closing before
    /// its handshake was done (or after its session failed) has only the session's own
    /// bytes left to write.
    pub(super) fn has_output(&self) -> bool {
        let frames = !self.writing.is_empty() || self.state.has_queued();
        (frames && self.tls_carries_frames()) || self.tls_wants_write()
    }

    /// Whether writing waits for the socket to take more.
    pub(super) fn write_blocked(&self) -> bool {
        !self.writing.is_empty() || self.tls_wants_write()
    }

    /// Keeps writing what is queued (frames still arrive from the shards) until `until`
    /// completes. False if the connection was killed first.
    pub(super) async fn pump_until(
        &mut self,
        stream: &TcpStream,
        until: impl Future<Output = ()>,
    ) -> bool {
        tokio::pin!(until);
        loop {
            if self.flush(stream).is_err() {
                return false;
            }
            let blocked = self.write_blocked();
            tokio::select! {
                biased;
                () = self.state.kill.cancelled() => return false,
                () = &mut until => return true,
                _ = stream.writable(), if blocked => {}
                () = self.state.ready.notified() => {}
            }
        }
    }

    /// Writes everything queued, for at most `limit` (over TLS, then a close_notify);
    /// then the connection writes nothing more.
    pub(super) async fn drain(&mut self, stream: &TcpStream, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if self.flush(stream).is_err() {
                break;
            }
            if !self.has_output() && !self.tls_close_notify() {
                break;
            }
            tokio::select! {
                biased;
                () = self.state.kill.cancelled() => break,
                _ = stream.writable() => {}
                () = self.state.ready.notified() => {}
                () = tokio::time::sleep_until(deadline) => {
                    self.state.terminate();
                    break;
                }
            }
        }
        self.state.close();
    }
}

/// Reads what the socket holds into `buffer` without waiting. `Ok(0)`: the peer
/// closed. `read_hint` is the connection's: what its next wake asks for first.
///
/// A read that returns less than it asked for has emptied the socket's receive
/// queue, so the socket is marked not readable at once (through `try_io`, which
/// clears readiness only if no new event arrived since it was observed, and never
/// clears a hang-up) instead of by one more system call that would fail with
/// `WouldBlock`: one system call per request instead of two.
///
/// A small read goes through a buffer on the stack and leaves the connection's
/// buffer exactly as large as what arrived. A read that fills what it asked for is
/// followed by one asking for twice as much, straight into the connection's
/// buffer; and the next wake starts by asking for what this one took, with a
/// chunk to spare so that the read comes back short. A peer that sends large
/// frames (Heartbeats of many beats) is read with one system call per frame, not
/// one per kilobyte.
pub(super) fn read_some(
    stream: &TcpStream,
    buffer: &mut BytesMut,
    read_hint: &mut usize,
) -> io::Result<usize> {
    let socket = socket2::SockRef::from(stream);
    let mut want = (*read_hint).max(READ_CHUNK);
    let mut total = 0;
    let read = stream.try_io(Interest::READABLE, || loop {
        let ask = want.min(READ_LIMIT - total);
        let n = if ask <= READ_CHUNK {
            let mut scratch = [0u8; READ_CHUNK];
            let n = io::Read::read(&mut &*socket, &mut scratch[..ask])?;
            buffer.extend_from_slice(&scratch[..n]);
            n
        } else {
            let start = buffer.len();
            buffer.resize(start + ask, 0);
            let read = io::Read::read(&mut &*socket, &mut buffer[start..]);
            buffer.truncate(start + read.as_ref().map_or(0, |n| *n));
            read?
        };
        total += n;
        if n == 0 || total >= READ_LIMIT {
            return Ok(());
        }
        if n < ask {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        want = ask * 2;
    });
    *read_hint = if total > READ_CHUNK {
        (total + READ_CHUNK).min(READ_LIMIT)
    } else {
        0
    };
    match read {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && total > 0 => Ok(total),
        Err(e) => Err(e),
        Ok(()) => Ok(total),
    }
}

/// What one [`write_round`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Round {
    /// Nothing was queued.
    Empty,
    /// Everything taken was written, and nothing more waited when it was taken.
    Done,
    /// Something was written; more may wait.
    Wrote,
    /// The sink took nothing: it is full.
    Blocked,
}

/// Writes one round of frames through `write` (the socket, or a TLS session): the
/// rest of a write the sink did not take whole, else the oldest queued frames, taken
/// from the outbox into slots on the stack. A frame the sink does not take whole waits
/// in `writing` (from `write_pos`), which holds nothing, and no allocation, unless the
/// sink pushed back.
pub(super) fn write_round(
    writing: &mut VecDeque<Bytes>,
    write_pos: &mut usize,
    state: &ConnState,
    mut write: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
) -> io::Result<Round> {
    let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
    if !writing.is_empty() {
        let mut count = 0;
        for (slot, frame) in slices.iter_mut().zip(writing.iter()) {
            let from = if count == 0 { *write_pos } else { 0 };
            *slot = IoSlice::new(&frame[from..]);
            count += 1;
        }
        let mut n = match write(&slices[..count]) {
            Ok(0) => return Ok(Round::Blocked),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Round::Blocked),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(Round::Wrote),
            Err(e) => return Err(e),
        };
        let (mut frames, mut bytes) = (0, 0);
        while let Some(front) = writing.front() {
            let left = front.len() - *write_pos;
            if n < left {
                *write_pos += n;
                break;
            }
            n -= left;
            frames += 1;
            bytes += front.len();
            *write_pos = 0;
            writing.pop_front();
        }
        if writing.is_empty() {
            *writing = VecDeque::new();
        }
        if frames > 0 {
            state.written(frames, bytes);
        }
        return Ok(Round::Wrote);
    }
    let mut batch: [Option<Bytes>; WRITE_SLICES] = [const { None }; WRITE_SLICES];
    let (taken, more) = state.take_some(&mut batch);
    if taken == 0 {
        return Ok(Round::Empty);
    }
    for (slot, frame) in slices.iter_mut().zip(batch.iter().flatten()) {
        *slot = IoSlice::new(frame);
    }
    let result = write(&slices[..taken]);
    let mut n = match result {
        Ok(n) => n,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            0
        }
        Err(e) => return Err(e),
    };
    let (mut frames, mut bytes) = (0, 0);
    for frame in batch.into_iter().flatten() {
        if writing.is_empty() && n >= frame.len() {
            n -= frame.len();
            frames += 1;
            bytes += frame.len();
            continue;
        }
        if writing.is_empty() {
            *write_pos = n;
            n = 0;
        }
        writing.push_back(frame);
    }
    if frames > 0 {
        state.written(frames, bytes);
    }
    Ok(match (frames, writing.is_empty(), more) {
        (0, false, _) => Round::Blocked,
        (_, true, false) => Round::Done,
        _ => Round::Wrote,
    })
}

/// Reads and discards input until the peer closes or [`LINGER`] passes, so the peer
/// reads our last frames before it sees the connection go.
pub(super) async fn linger(mut stream: TcpStream) {
    // On the heap, and only while lingering: a buffer in the future would be in every
    // connection's task for its whole life.
    let mut scratch = vec![0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        loop {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
}
