//! Admission: a new socket is served only within the connection limits (in all, and
//! per peer address); one over a limit has its first request answered
//! `too_many_connections` and is closed, a bounded number at a time.

use super::*;

/// Takes over an accepted socket. `reading` is held while the connection may still
/// send requests to shards; shutdown waits for every such guard to drop.
pub(crate) fn accept(
    ctx: &Arc<ConnContext>,
    stream: TcpStream,
    peer: SocketAddr,
    reading: mpsc::Sender<()>,
    tracker: &tokio_util::task::TaskTracker,
) {
    let _ = stream.set_nodelay(true);
    let active = ctx.active.fetch_add(1, Ordering::AcqRel);
    if active >= ctx.max_connections {
        ctx.active.fetch_sub(1, Ordering::AcqRel);
        ctx.metrics
            .protocol_error(ProtocolError::TooManyConnections)
            .increment(1);
        warn!(%peer, max = ctx.max_connections, "connection refused: too many connections");
        refuse(
            ctx,
            stream,
            tracker,
            "the coordinator has its maximum number of connections; retry later",
        );
        return;
    }
    // An IPv4 peer on an IPv6 listener is the same address as on an IPv4 one.
    let Some(address) = ctx.per_address.take(peer.ip().to_canonical()) else {
        ctx.active.fetch_sub(1, Ordering::AcqRel);
        ctx.metrics
            .protocol_error(ProtocolError::TooManyConnectionsPerAddress)
            .increment(1);
        warn!(%peer, max = ctx.per_address.max(),
            "connection refused: too many connections from this address");
        refuse(
            ctx,
            stream,
            tracker,
            "the coordinator has its maximum number of connections from this address; retry later",
        );
        return;
    };
    ctx.metrics.connections.increment(1.0);
    let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
    let context = ctx.clone();
    // On a connection thread the socket moves to that thread's reactor, to be polled
    // by it alone.
    let stream = match ctx.io {
        Some(_) => Accepted::Moved(stream.into_std()),
        None => Accepted::Here(stream),
    };
    let connection = async move {
        match stream.register() {
            Ok(stream) => {
                if let Some(transport) = Transport::new(&context, peer) {
                    Connection::new(context.clone(), id, peer, transport)
                        .serve(stream, reading)
                        .await;
                }
            }
            Err(e) => warn!(%peer, error = %e, "cannot serve the connection on its thread"),
        }
        drop(address);
        context.active.fetch_sub(1, Ordering::AcqRel);
        context.metrics.connections.decrement(1.0);
    };
    match &ctx.io {
        Some(io) => io.spawn(tracker.track_future(connection)),
        None => drop(tracker.spawn(connection)),
    }
}

/// An accepted socket, on the reactor of the runtime that accepted it or on its way to
/// a connection thread's.
enum Accepted {
    Here(TcpStream),
    Moved(std::io::Result<std::net::TcpStream>),
}

impl Accepted {
    /// The socket, registered with the reactor of the runtime this runs on.
    fn register(self) -> std::io::Result<TcpStream> {
        match self {
            Self::Here(stream) => Ok(stream),
            Self::Moved(stream) => stream.and_then(TcpStream::from_std),
        }
    }
}

/// Answers the first request of a connection refused at accept, then closes it (at
/// most [`MAX_REJECTING`] at once; past that it is closed without an answer).
fn refuse(
    ctx: &Arc<ConnContext>,
    stream: TcpStream,
    tracker: &tokio_util::task::TaskTracker,
    message: &'static str,
) {
    match ctx.rejecting.clone().try_acquire_owned() {
        Ok(permit) => {
            let codec = ctx.codec;
            let timeout = ctx.handshake_timeout;
            let tls = ctx.tls.as_ref().map(|t| t.current());
            tracker.spawn(async move {
                match tls {
                    None => reject(stream, codec, timeout, message).await,
                    Some(config) => reject_tls(stream, config, codec, timeout, message).await,
                }
                drop(permit);
            });
        }
        Err(_) => drop(stream),
    }
}

/// Answers the first request of a connection over a limit with `TooManyConnections`
/// and closes it.
async fn reject(stream: TcpStream, codec: Codec, timeout: Duration, message: &'static str) {
    let mut frames = Framed::new(stream, codec);
    answer_rejected(&mut frames, timeout, message).await;
    linger(frames.into_inner()).await;
}

/// [`reject`] over TLS: the handshake first (within the handshake deadline), then the
/// same answer inside the session, and a close_notify. Rare enough to run through
/// tokio-rustls rather than the connection's own loop.
async fn reject_tls(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    codec: Codec,
    timeout: Duration,
    message: &'static str,
) {
    let peer = stream.peer_addr().ok();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let tls = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            debug!(?peer, error = %e, "TLS handshake of a refused connection failed");
            return;
        }
        Err(_) => return,
    };
    let mut frames = Framed::new(tls, codec);
    answer_rejected(&mut frames, timeout, message).await;
    let (stream, _) = frames.into_inner().into_inner();
    linger(stream).await;
}

/// Reads the first request and answers it `TooManyConnections` with `message`, then closes the
/// writing side (over TLS, with a close_notify).
async fn answer_rejected<S>(frames: &mut Framed<S, Codec>, timeout: Duration, message: &'static str)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let first = tokio::time::timeout(timeout, frames.next()).await;
    let (correlation_id, api_key) = match first {
        Ok(Some(Ok(frame))) => {
            let header = frame.header();
            (header.correlation_id, header.api_key)
        }
        Ok(Some(Err(FrameError::Malformed {
            header: Some(h), ..
        }))) => (h.correlation_id, h.api_key),
        Ok(Some(Err(_))) => (0, 0),
        // Closed, or silent past the deadline: nothing to answer.
        Ok(None) | Err(_) => return,
    };
    let answer = Frame::response(
        correlation_id,
        Response::error(api_key, ErrorCode::TooManyConnections, message),
    );
    let _ = tokio::time::timeout(timeout, async {
        let _ = frames.send(answer).await;
        let _ = SinkExt::<Frame>::close(frames).await;
    })
    .await;
}
