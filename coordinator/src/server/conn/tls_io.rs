//! A TLS connection's socket work, on the connection's own task like the plain one:
//! the socket's bytes go into the rustls session and the plaintext it yields into the
//! read buffer, where the frame codec finds it as it would the socket's; queued frames
//! go into the session and the records it makes out to the socket, until the socket
//! would block. Nothing here waits: the read loop waits on the socket's readiness as
//! for a plain connection, and on its writability while the session has records to
//! send.

use std::io::{self, Read};

use super::io::{write_round, Round};

use tokio::io::Interest;

use super::*;

/// Plaintext bytes read per wake, at most, as for a plain connection.
const READ_LIMIT: usize = 64 * 1024;

/// Plaintext taken out of the session per call.
const PLAINTEXT_CHUNK: usize = 4096;

impl Connection {
    /// Whether the session has records to send (handshake messages, alerts, encrypted
    /// frames).
    pub(super) fn tls_wants_write(&self) -> bool {
        matches!(&self.transport, Transport::Tls(tls) if tls.wants_write())
    }

    /// Whether frames can be written: always on a plain connection; over TLS, once
    /// the handshake is done and until the session is closed.
    pub(super) fn tls_carries_frames(&self) -> bool {
        match &self.transport {
            Transport::Plain => true,
            Transport::Tls(tls) => !tls.is_handshaking() && !self.tls_closed,
        }
    }

    /// Reads what the socket holds into the session, and the plaintext it yields into
    /// the read buffer. `Ok(true)`: the peer closed (after what was read now). A TLS
    /// error queues its alert and ends the connection.
    pub(super) fn read_tls(&mut self, stream: &TcpStream) -> Result<bool, Exit> {
        let socket = socket2::SockRef::from(stream);
        let mut total = 0;
        let mut closed = false;
        while !closed && total < READ_LIMIT {
            let Transport::Tls(tls) = &mut self.transport else {
                return Ok(false);
            };
            // Through `try_io`, so that a read that would block clears the readiness.
            match stream.try_io(Interest::READABLE, || tls.read_tls(&mut &*socket)) {
                Ok(0) => closed = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    debug!(conn = self.id, peer = %self.peer, error = %e, "read failed");
                    return Err(Exit::Eof);
                }
            }
            if let Err(e) = tls.process_new_packets() {
                return Err(self.tls_failed(&e));
            }
            let mut scratch = [0u8; PLAINTEXT_CHUNK];
            loop {
                match tls.reader().read(&mut scratch) {
                    Ok(0) => {
                        // close_notify: a clean end.
                        closed = true;
                        break;
                    }
                    Ok(n) => {
                        self.read.extend_from_slice(&scratch[..n]);
                        total += n;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        // The socket closed without a close_notify.
                        closed = true;
                        break;
                    }
                }
            }
            if !self.tls_established {
                self.tls_handshake_done();
            }
        }
        Ok(closed)
    }

    /// Records the client's identity once the handshake is done.
    fn tls_handshake_done(&mut self) {
        let Transport::Tls(tls) = &self.transport else {
            return;
        };
        if tls.is_handshaking() {
            return;
        }
        self.tls_established = true;
        self.tls_identity = tls
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|cert| super::super::tls::identity(cert));
        let version = tls.protocol_version();
        let suite = tls.negotiated_cipher_suite().map(|s| s.suite());
        debug!(conn = self.id, peer = %self.peer, ?version, ?suite,
            tls_identity = %self.tls_identity().unwrap_or("-"), "TLS handshake done");
    }

    /// A TLS error: counted, logged, and answered with the alert rustls queued; the
    /// connection then closes.
    fn tls_failed(&mut self, error: &rustls::Error) -> Exit {
        self.tls_closed = true;
        let kind = if self.tls_established {
            ProtocolError::Tls
        } else {
            ProtocolError::TlsHandshakeFailed
        };
        self.ctx.metrics.protocol_error(kind).increment(1);
        if self.tls_established {
            warn!(conn = self.id, peer = %self.peer, %error, "TLS error; closing connection");
        } else {
            warn!(conn = self.id, peer = %self.peer, %error, "TLS handshake failed; closing connection");
        }
        Exit::Tls
    }

    /// Writes what the session holds, then queued frames through it, as far as the
    /// socket takes them without waiting. Frames wait until the handshake is done.
    /// Fails (and kills the connection) if the socket fails.
    pub(super) fn flush_tls(&mut self, stream: &TcpStream) -> Result<(), Exit> {
        let socket = socket2::SockRef::from(stream);
        let mut done = false;
        loop {
            let Transport::Tls(tls) = &mut self.transport else {
                return Ok(());
            };
            while tls.wants_write() {
                match stream.try_io(Interest::WRITABLE, || tls.write_tls(&mut &*socket)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        debug!(conn = self.id, error = %e, "write failed; closing connection");
                        self.state.terminate();
                        return Err(Exit::Killed);
                    }
                }
            }
            if tls.is_handshaking() || self.tls_closed {
                // Frames wait for the handshake; after the session closed they are
                // never written (see `has_output`).
                return Ok(());
            }
            if done {
                // The records of the last frames are written above.
                return Ok(());
            }
            // The session takes what fits its buffer (and encrypts it); the frames it took
            // count as written, the rest stays queued.
            let round = write_round(
                &mut self.writing,
                &mut self.write_pos,
                &self.state,
                |slices| io::Write::write_vectored(&mut tls.writer(), slices),
            );
            match round {
                Ok(Round::Empty | Round::Blocked) => return Ok(()),
                Ok(Round::Done) => done = true,
                Ok(Round::Wrote) => {}
                Err(e) => {
                    debug!(conn = self.id, error = %e, "TLS write failed; closing connection");
                    self.state.terminate();
                    return Err(Exit::Killed);
                }
            }
        }
    }

    /// Queues the session's close_notify, once, unless the session failed. Whether
    /// one was queued now.
    pub(super) fn tls_close_notify(&mut self) -> bool {
        let Transport::Tls(tls) = &mut self.transport else {
            return false;
        };
        if self.tls_closed {
            return false;
        }
        self.tls_closed = true;
        tls.send_close_notify();
        true
    }
}
