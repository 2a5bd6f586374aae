//! One client connection, served by one task: it reads frames, answers the handshake
//! itself, hands each request to its group's shard (which answers it on this task when
//! nothing it reveals waits for durability, see [`super::shard`]) and writes the
//! connection's queue — its own answers and what shards and the sender stage queued for
//! it — without waiting on the socket. A heartbeat is read, handled and answered
//! without waking any other task.
//!
//! The reader enforces three deadlines: the handshake's (from the accept), a frame's
//! (from its first byte until it is whole) and, once handshaken, the idle one (from the
//! last whole frame). Frames already received are always read before a deadline is
//! judged, so a coordinator that was itself paused does not blame its peers.
//!
//! Over TLS the same task runs the TLS session without any further task or buffer
//! copy of its own: rustls is sans-IO here, fed what the socket holds and asked for
//! what to write (see `tls_io.rs`). The handshake deadline covers the TLS handshake
//! too.

use std::collections::VecDeque;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use rollcall_protocol::{
    supported_versions, ApiKey, ApiVersionsResponse, Body, Codec, ErrorCode, ErrorResponse, Frame,
    FrameError, FrameKind, Header, HeartbeatsRequest, ListGroupsRequest, ListGroupsResponse, Push,
    Request, Response, ShutdownPush, MAX_BEATS,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::{Decoder, Framed};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use self::counted::{Counted, Slot};
use super::auth::{ConnAuth, Operation, Security};
use super::metrics::{Metrics, ProtocolError};
use super::registry::{BufferBudget, ConnHandle, ConnState, Registry, SendLimits};
use super::shard::{shard_of, Handled, Joiner, Reply, Shard};
use super::tls::TlsContext;
use crate::core::ConnId;

mod access;
mod counted;
mod io;
mod tls_io;

use io::linger;

/// How long a closing connection keeps reading (and discarding) what the peer still
/// sends, so that closing with unread input does not reset the connection before the
/// peer has read the last answer.
const LINGER: Duration = Duration::from_millis(500);

/// Over-limit connections being answered at once; more are closed without an answer.
const MAX_REJECTING: usize = 256;

/// What every connection shares.
#[derive(Debug)]
pub(crate) struct ConnContext {
    pub(crate) shards: Vec<Arc<Shard>>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) codec: Codec,
    pub(crate) handshake_timeout: Duration,
    pub(crate) frame_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) limits: Arc<SendLimits>,
    pub(crate) max_connections: usize,
    pub(crate) active: AtomicUsize,
    /// Connections served per peer address, counted at accept and close.
    pub(crate) per_address: Arc<Counted<IpAddr>>,
    /// Connections authenticated per principal, counted when one authenticates and
    /// when it closes (only with an auth file).
    pub(crate) per_principal: Arc<Counted<Arc<str>>>,
    pub(crate) next_id: AtomicU64,
    /// Set when the server stops reading requests (shutdown has begun); see
    /// [`ConnContext::stop_reading`].
    pub(crate) stopping: AtomicBool,
    /// Cancelled once every in-flight batch has been sent: connections then say
    /// goodbye with a shutdown push and close.
    pub(crate) close: CancellationToken,
    pub(crate) rejecting: Arc<Semaphore>,
    /// Users and access rules; `None`: no authentication, everything allowed.
    pub(crate) security: Option<Arc<Security>>,
    /// The TLS configuration new connections use, if the listener speaks TLS.
    pub(crate) tls: Option<Arc<TlsContext>>,
    /// The threads connections run on; `None`: the runtime that accepted them.
    pub(crate) io: Option<super::io_threads::IoThreads>,
}

impl ConnContext {
    pub(crate) fn new(
        shards: Vec<Arc<Shard>>,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        config: &super::ServerConfig,
        security: Option<Arc<Security>>,
        tls: Option<Arc<TlsContext>>,
        io: Option<super::io_threads::IoThreads>,
    ) -> Self {
        let budget = Arc::new(BufferBudget::new(config.max_buffered_bytes));
        let limits = Arc::new(SendLimits {
            frames: config.send_buffer,
            bytes: config.send_buffer_bytes,
            max_frame_size: config.max_frame_size,
            budget: budget.clone(),
            too_large: metrics
                .protocol_error(ProtocolError::OutgoingTooLarge)
                .clone(),
        });
        Self {
            shards,
            registry,
            metrics,
            codec: Codec::new(config.max_frame_size),
            handshake_timeout: config.handshake_timeout,
            frame_timeout: config.frame_timeout,
            idle_timeout: config.idle_timeout,
            limits,
            max_connections: config.max_connections,
            active: AtomicUsize::new(0),
            per_address: Counted::new(config.max_connections_per_address),
            per_principal: Counted::new(config.max_connections_per_principal),
            next_id: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            close: CancellationToken::new(),
            rejecting: Arc::new(Semaphore::new(MAX_REJECTING)),
            security,
            tls,
            io,
        }
    }
}

impl ConnContext {
    /// Stops every connection reading requests: sets the flag and wakes every
    /// connection to see it (one that registers later sees the flag first thing).
    pub(crate) fn stop_reading(&self) {
        self.stopping.store(true, Ordering::Release);
        for handle in self.registry.handles() {
            handle.wake();
        }
    }
}

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

/// Why the read loop ended.
#[derive(Debug)]
enum Exit {
    /// The peer closed.
    Eof,
    /// A protocol error: answer queued, close cleanly.
    Protocol,
    /// No handshake in time.
    HandshakeTimeout,
    /// A frame begun and not finished in time: answer queued, close.
    FrameTimeout,
    /// Handshaken, and silent for the idle deadline.
    IdleTimeout,
    /// The connection was killed (slow reader, write failure).
    Killed,
    /// A shard is gone (the server is failing); close.
    ShardGone,
    /// The server is shutting down.
    Shutdown,
    /// A TLS error (a failed handshake, a bad record): alert queued, close.
    Tls,
}

/// What carries a connection's frames.
#[derive(Debug)]
enum Transport {
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
    fn new(ctx: &ConnContext, peer: SocketAddr) -> Option<Self> {
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

struct Connection {
    ctx: Arc<ConnContext>,
    id: ConnId,
    peer: SocketAddr,
    handle: ConnHandle,
    state: Arc<ConnState>,
    handshaken: bool,
    /// Authentication and access checks, when the server has an auth file.
    auth: Option<Box<ConnAuth>>,
    /// This connection's place in its principal's count, once authenticated.
    principal_slot: Option<Box<Slot<Arc<str>>>>,
    /// Shards this connection sent requests to, to tell them when it closes.
    used_shards: Vec<bool>,
    /// The joiner of the last Heartbeats request split across shards: the next one's
    /// pushes follow its response too while it is open.
    last_joiner: Option<Arc<Joiner>>,
    /// What has arrived and is not a whole frame yet (empty, and unallocated, between
    /// frames).
    read: BytesMut,
    /// Bytes the first read of the next wake asks for: what the last wake took, when
    /// that was more than one small read (see `io.rs`).
    read_hint: usize,
    /// The read buffer's size as counted against the shared buffer budget.
    read_counted: usize,
    /// Frames taken from the queue, being written; the first from `write_pos` on.
    writing: VecDeque<Bytes>,
    write_pos: usize,
    accepted: Instant,
    /// When the last whole frame arrived.
    last_frame: Instant,
    /// When the frame now partly read began, if one is.
    frame_started: Option<Instant>,
    transport: Transport,
    /// Over TLS, once the handshake is done: the identity the client's verified
    /// certificate names (see [`Connection::tls_identity`]).
    tls_identity: Option<String>,
    /// Over TLS: the handshake is done (and the identity recorded).
    tls_established: bool,
    /// Over TLS: nothing more is to be added to the session (a close_notify or a fatal
    /// alert is queued or sent).
    tls_closed: bool,
}

impl Connection {
    fn new(ctx: Arc<ConnContext>, id: ConnId, peer: SocketAddr, transport: Transport) -> Self {
        let (handle, state) = ConnHandle::new(ctx.limits.clone());
        let used_shards = vec![false; ctx.shards.len()];
        let now = Instant::now();
        Self {
            ctx,
            id,
            peer,
            handle,
            state,
            handshaken: false,
            auth: None,
            principal_slot: None,
            used_shards,
            last_joiner: None,
            read: BytesMut::new(),
            read_hint: 0,
            read_counted: 0,
            writing: VecDeque::new(),
            write_pos: 0,
            accepted: now,
            last_frame: now,
            frame_started: None,
            transport,
            tls_identity: None,
            tls_established: false,
            tls_closed: false,
        }
    }

    /// The identity of the client's certificate, over TLS with a client that presented
    /// one (and it verified): the certificate subject's Common Name, or, without one,
    /// its first DNS name.
    fn tls_identity(&self) -> Option<&str> {
        self.tls_identity.as_deref()
    }

    async fn serve(mut self, mut stream: TcpStream, reading: mpsc::Sender<()>) {
        self.ctx.registry.insert(self.id, self.handle.clone());
        debug!(conn = self.id, peer = %self.peer, "connection opened");

        let exit = self.read_loop(&stream).await;

        if !matches!(exit, Exit::Shutdown) {
            for (shard, used) in self.used_shards.iter().enumerate() {
                if *used {
                    self.ctx.shards[shard].disconnect(self.id);
                }
            }
        }
        // This connection sends nothing more to the shards.
        drop(reading);

        match exit {
            Exit::Shutdown => {
                let ctx = self.ctx.clone();
                if self.pump_until(&stream, ctx.close.cancelled()).await {
                    self.send(Frame::push(Push::Shutdown(ShutdownPush {
                        message: "the coordinator is shutting down; reconnect with backoff".into(),
                    })));
                }
            }
            Exit::HandshakeTimeout => {
                self.ctx
                    .metrics
                    .protocol_error(ProtocolError::HandshakeTimeout)
                    .increment(1);
                warn!(conn = self.id, peer = %self.peer, "no handshake within the deadline; closing");
            }
            Exit::FrameTimeout => {
                self.ctx
                    .metrics
                    .protocol_error(ProtocolError::FrameTimeout)
                    .increment(1);
                warn!(conn = self.id, peer = %self.peer, timeout = ?self.ctx.frame_timeout,
                    "frame not completed within the deadline; closing");
            }
            Exit::IdleTimeout => {
                self.ctx
                    .metrics
                    .protocol_error(ProtocolError::IdleTimeout)
                    .increment(1);
                debug!(conn = self.id, peer = %self.peer, timeout = ?self.ctx.idle_timeout,
                    "nothing received within the idle deadline; closing");
            }
            Exit::Eof | Exit::Protocol | Exit::Killed | Exit::ShardGone | Exit::Tls => {}
        }
        if self.state.over_budget.load(Ordering::Relaxed) {
            self.ctx
                .metrics
                .protocol_error(ProtocolError::BufferBudget)
                .increment(1);
            warn!(conn = self.id, peer = %self.peer, max = self.ctx.limits.budget_max(),
                "client does not read its frames and every connection's buffers are at their budget; disconnected");
        } else if self.state.overflowed.load(Ordering::Relaxed) {
            self.ctx
                .metrics
                .protocol_error(ProtocolError::SlowReader)
                .increment(1);
            warn!(conn = self.id, peer = %self.peer, max_frames = self.ctx.limits.frames,
                max_bytes = self.ctx.limits.bytes,
                "client does not read its frames; disconnected");
        }

        self.ctx.registry.remove(self.id);
        // What is queued (the last answers, the shutdown push) is written within a
        // bound; then the connection closes.
        let limit = self.ctx.handshake_timeout.max(Duration::from_secs(1));
        self.drain(&stream, limit).await;
        if !self.state.kill.is_cancelled() {
            let _ = tokio::time::timeout(limit, stream.shutdown()).await;
        }
        if matches!(exit, Exit::Protocol | Exit::FrameTimeout | Exit::Tls) {
            linger(stream).await;
        }
        self.ctx.limits.budget.resize(self.read_counted, 0);
        debug!(conn = self.id, peer = %self.peer, reason = ?exit, "connection closed");
    }

    /// When the deadline in force falls: the handshake's until the handshake, a partly
    /// read frame's, else the idle one.
    fn deadline(&self) -> Instant {
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

    async fn read_loop(&mut self, stream: &TcpStream) -> Exit {
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

    /// Refuses a frame the shared buffer budget has no room for: the stream is not at a
    /// frame boundary any more, so the answer concerns the connection (correlation id
    /// 0) and it closes. The client reconnects with backoff.
    fn read_over_budget(&mut self) -> Exit {
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
    fn frame_timed_out(&mut self) {
        let message = format!(
            "frame not completed within {}; closing the connection",
            super::format_duration(self.ctx.frame_timeout)
        );
        self.send(Frame::response(
            0,
            Response::error(0, ErrorCode::MalformedFrame, message),
        ));
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

    fn on_request(
        &mut self,
        correlation_id: u32,
        request: Request,
        received: Instant,
    ) -> Option<Exit> {
        let api = request.api_key();
        if super::is_member_traffic(&request) {
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
                if r.beats.iter().any(|b| shard_of(&b.group, shards) != first) {
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
            request => match request.group() {
                Some(group) => shard_of(group, self.ctx.shards.len()),
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
        let reply = Reply::Frame {
            to: self.handle.clone(),
            correlation_id,
            api,
            received,
        };
        self.hand_to_shard(shard, request, reply)
    }

    /// Hands `request` to `shard`; false if the shard is unavailable (answered).
    fn hand_to_shard(&mut self, shard: usize, request: Request, reply: Reply) -> Option<Exit> {
        self.used_shards[shard] = true;
        match self.ctx.shards[shard].request(self.id, request, reply) {
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

    /// A Heartbeats request whose beats belong to several shards, or some of whose
    /// beats are denied (`denied[i]`; empty when none is): each shard gets its beats,
    /// denied beats are answered `not_authorized`, and one answer goes back once every
    /// part is answered.
    fn split_heartbeats(
        &mut self,
        correlation_id: u32,
        request: HeartbeatsRequest,
        received: Instant,
        denied: &[bool],
    ) -> Option<Exit> {
        let shards = self.ctx.shards.len();
        let beats = request.beats.len();
        // Each beat's shard (`shards` for a denied beat), then parts of exactly their
        // size: grown by pushes, they moved every beat already in them on each doubling.
        let to: Vec<usize> = request
            .beats
            .iter()
            .enumerate()
            .map(|(i, beat)| match denied.get(i) {
                Some(true) => shards,
                _ => shard_of(&beat.group, shards),
            })
            .collect();
        let mut sizes = vec![0usize; shards + 1];
        for &shard in &to {
            sizes[shard] += 1;
        }
        let mut parts: Vec<(Vec<usize>, Vec<_>)> = sizes[..shards]
            .iter()
            .map(|&n| (Vec::with_capacity(n), Vec::with_capacity(n)))
            .collect();
        let mut refused = Vec::with_capacity(sizes[shards]);
        for ((i, beat), shard) in request.beats.into_iter().enumerate().zip(to) {
            if shard == shards {
                refused.push(i);
                continue;
            }
            let part = &mut parts[shard];
            part.0.push(i);
            part.1.push(beat);
        }
        let used =
            parts.iter().filter(|p| !p.0.is_empty()).count() + usize::from(!refused.is_empty());
        let joiner = Joiner::new(
            self.handle.clone(),
            correlation_id,
            received,
            beats,
            used,
            self.last_joiner.take(),
        );
        self.last_joiner = Some(joiner.clone());
        if !refused.is_empty() {
            Reply::Part {
                joiner: joiner.clone(),
                indices: refused,
            }
            .deliver(
                access::not_authorized(ApiKey::Heartbeats),
                &self.ctx.metrics,
                true,
            );
        }
        let mut exit = None;
        for (shard, (indices, beats)) in parts.into_iter().enumerate() {
            if indices.is_empty() {
                continue;
            }
            let reply = Reply::Part {
                joiner: joiner.clone(),
                indices,
            };
            let request = Request::Heartbeats(HeartbeatsRequest { beats });
            if let Some(e) = self.hand_to_shard(shard, request, reply) {
                exit = Some(e);
            }
        }
        exit
    }

    /// Asks every shard for its groups and answers with all of them, or with a page
    /// (version 1): each shard gives its own page after the cursor, and the answer is
    /// their first groups in order, up to the first group some shard may have left out,
    /// the limit and the frame.
    fn list_groups(&mut self, correlation_id: u32, request: ListGroupsRequest, received: Instant) {
        let mut groups = Vec::new();
        let mut failure = None;
        // The last group of each shard that has more after it: a group past the first
        // of them may come after groups that shard has not listed yet.
        let mut cut: Option<String> = None;
        for shard in &self.ctx.shards {
            match shard.list_groups(self.id, request.clone()) {
                Response::ListGroups(part) => {
                    if part.more == Some(true) {
                        if let Some(last) = part.groups.last() {
                            if cut.as_ref().is_none_or(|c| last.group < *c) {
                                cut = Some(last.group.clone());
                            }
                        }
                    }
                    groups.extend(part.groups);
                }
                other => failure = Some(other),
            }
        }
        groups.sort_by(|a, b| a.group.cmp(&b.group));
        if let Some(auth) = &mut self.auth {
            // Groups the principal may not describe are not shown: not even their names.
            groups.retain(|g| auth.allows(Operation::Describe, &g.group));
        }
        let response = match (failure, request.page) {
            (Some(failure), _) => failure,
            (None, None) => Response::ListGroups(ListGroupsResponse { groups, more: None }),
            (None, Some(page)) => {
                let mut more = cut.is_some();
                if let Some(cut) = &cut {
                    groups.retain(|g| g.group <= *cut);
                }
                let limit = if page.limit == 0 {
                    usize::MAX
                } else {
                    page.limit as usize
                };
                let mut room = self.ctx.codec.max_frame_size().saturating_sub(
                    rollcall_protocol::HEADER_SIZE
                        + ListGroupsResponse {
                            groups: Vec::new(),
                            more: Some(false),
                        }
                        .encoded_len(),
                );
                let mut kept = 0;
                for g in &groups {
                    let size = g.encoded_len();
                    if kept == limit || (kept > 0 && size > room) {
                        break;
                    }
                    room = room.saturating_sub(size);
                    kept += 1;
                }
                more |= kept < groups.len();
                groups.truncate(kept);
                Response::ListGroups(ListGroupsResponse {
                    groups,
                    more: Some(more),
                })
            }
        };
        self.reply(correlation_id, response, ApiKey::ListGroups, received);
    }

    /// Answers a request other than ApiVersions (of any key or version) that arrives
    /// before the handshake.
    fn handshake_required(&self, correlation_id: u32, api_key: u16) {
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

    fn on_unsupported(&mut self, header: Header) {
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

    fn on_frame_error(&mut self, error: FrameError) -> Exit {
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
    fn protocol_error(&mut self, header: Option<Header>, message: String) {
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

    fn reply(&self, correlation_id: u32, response: Response, api: ApiKey, received: Instant) {
        self.send(Frame::response(correlation_id, response));
        self.ctx
            .metrics
            .duration(api)
            .record(received.elapsed().as_secs_f64());
    }

    fn send(&self, frame: Frame) {
        // A full queue kills the connection; the read loop sees it next. Quiet: this
        // task writes its queue before it waits again.
        self.handle.send(frame, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection's task holds its future for its whole life: what the future
    /// keeps across its awaits (buffers, nested futures) is memory per connection.
    #[tokio::test]
    async fn a_connections_task_is_small() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let ctx = Arc::new(ConnContext::new(
            Vec::new(),
            Arc::new(Registry::default()),
            Arc::new(Metrics::new()),
            &super::super::ServerConfig::default(),
            None,
            None,
            None,
        ));
        let (reading, _done) = mpsc::channel(1);
        let task = Connection::new(ctx, 1, peer, Transport::Plain).serve(stream, reading);
        let size = std::mem::size_of_val(&task);
        assert!(
            size <= 2048,
            "a connection's future is {size} bytes; keep buffers on the heap and only while used"
        );
        drop(client);
    }
}
