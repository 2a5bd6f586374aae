//! What carries a connection's frames: the socket itself, or a TLS session over it run
//! by the connection's own task (`tls_io.rs`).

use super::*;

/// What carries a connection's frames.
#[derive(Debug)]
pub(super) enum Transport {
    /// The socket itself.
    Plain,
    /// A TLS session over the socket, run by the connection's task: rustls decrypts
    /// what the task reads from the socket and encrypts what it writes to it, and never
    /// touches the socket itself.
    Tls(Box<rustls::ServerConnection>),
}

impl Transport {
    /// TLS with the newest configuration if the listener speaks TLS, else plain.
    /// `None` if the session cannot be set up (logged).
    pub(super) fn new(ctx: &ConnContext, peer: SocketAddr) -> Option<Self> {
        let Some(tls) = &ctx.tls else {
            return Some(Self::Plain);
        };
        match rustls::ServerConnection::new(tls.current()) {
            Ok(session) => Some(Self::Tls(Box::new(session))),
            Err(e) => {
                warn!(%peer, error = %e, "cannot start a TLS session; closing");
                None
            }
        }
    }
}
