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
//!
//! The files: `admission.rs` (the connection limits at accept, and answering a refused
//! connection), `transport.rs` (plain or TLS), `read_loop.rs` (the loop, its deadlines,
//! and each whole frame handed on), `routing.rs` (a request to its group's shard, or
//! refused for a group not served here, and FindCoordinator and ListCoordinators),
//! `heartbeats.rs` (a Heartbeats request split across shards), `list_groups.rs`
//! (ListGroups merged across shards), `errors.rs` (answers to protocol errors),
//! `access.rs` (authentication and access), `io.rs` and `tls_io.rs` (the socket work),
//! `counted.rs` (connections per address and principal).

use std::collections::VecDeque;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use rollcall_protocol::{
    supported_versions, ApiKey, ApiVersionsResponse, Body, Codec, ErrorCode, ErrorResponse,
    FindCoordinatorResponse, Frame, FrameError, FrameKind, Header, HeartbeatsRequest,
    ListCoordinatorsResponse, ListGroupsRequest, ListGroupsResponse, Push, Request, Response,
    ShutdownPush, MAX_BEATS,
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
use super::budget::BufferBudget;
use super::directory::{Directory, Lookup};
use super::metrics::{Metrics, ProtocolError};
use super::outbox::{ConnHandle, ConnState, SendLimits};
use super::registry::Registry;
use super::shard::{shard_of, Handled, Joiner, Reply, Shard};
use super::tls::TlsContext;
use crate::core::ConnId;

mod access;
mod admission;
mod counted;
mod errors;
mod heartbeats;
mod io;
mod list_groups;
mod read_loop;
mod routing;
mod tls_io;
mod transport;

pub(crate) use admission::accept;
use transport::Transport;

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
    /// Which groups this coordinator serves (every one, unless it shares them).
    pub(crate) directory: Directory,
    /// The address this coordinator gives clients for the groups it serves.
    pub(crate) advertise: Arc<str>,
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
            directory: Directory::single(),
            advertise: Arc::from(config.advertise.as_deref().unwrap_or_default()),
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
    /// A request waiting for its shard's open batch to have room, if one is.
    held: Option<Box<routing::Holding>>,
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
            held: None,
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
mod tests;
