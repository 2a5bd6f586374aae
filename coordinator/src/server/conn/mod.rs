//! One client connection: a reader that decodes frames, answers the handshake itself and
//! routes requests to shards, and a writer task that drains the connection's bounded
//! queue into the socket, many frames per flush.
//!
//! The reader enforces three deadlines: the handshake's (from the accept), a frame's
//! (from its first byte until it is whole) and, once handshaken, the idle one (from the
//! last whole frame). Frames already received are always read before a deadline is
//! judged, so a coordinator that was itself paused does not blame its peers.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use rollcall_protocol::{
    supported_versions, ApiKey, ApiVersionsResponse, Body, Codec, ErrorCode, ErrorResponse, Frame,
    FrameError, FrameKind, Header, ListGroupsResponse, Push, Request, Response, ShutdownPush,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::metrics::{Metrics, ProtocolError};
use super::registry::{ConnHandle, ConnState, Registry, SendLimits};
use super::shard::{shard_of, ShardInput};
use crate::core::ConnId;

mod writer;

use writer::{finish_writer, linger, write_loop};

/// Frames the writer takes off the queue before each flush, at most.
const WRITE_BATCH: usize = 256;

/// The writer's buffer: smaller frames are gathered in it, larger ones written directly.
const WRITE_BUFFER: usize = 8 * 1024;

/// How long a closing connection keeps reading (and discarding) what the peer still
/// sends, so that closing with unread input does not reset the connection before the
/// peer has read the last answer.
const LINGER: Duration = Duration::from_millis(500);

/// Over-limit connections being answered at once; more are closed without an answer.
const MAX_REJECTING: usize = 256;

/// What every connection shares.
#[derive(Debug)]
pub(crate) struct ConnContext {
    pub(crate) shards: Vec<mpsc::Sender<ShardInput>>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) codec: Codec,
    pub(crate) handshake_timeout: Duration,
    pub(crate) frame_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) limits: Arc<SendLimits>,
    pub(crate) max_connections: usize,
    pub(crate) active: AtomicUsize,
    pub(crate) next_id: AtomicU64,
    /// Cancelled when the server stops reading requests (shutdown has begun).
    pub(crate) stop_reading: CancellationToken,
    /// Cancelled once every in-flight batch has been sent: connections then say
    /// goodbye with a shutdown push and close.
    pub(crate) close: CancellationToken,
    pub(crate) rejecting: Arc<Semaphore>,
}

impl ConnContext {
    pub(crate) fn new(
        shards: Vec<mpsc::Sender<ShardInput>>,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        config: &super::ServerConfig,
    ) -> Self {
        let limits = Arc::new(SendLimits {
            frames: config.send_buffer,
            bytes: config.send_buffer_bytes,
            max_frame_size: config.max_frame_size,
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
            next_id: AtomicU64::new(1),
            stop_reading: CancellationToken::new(),
            close: CancellationToken::new(),
            rejecting: Arc::new(Semaphore::new(MAX_REJECTING)),
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
        match ctx.rejecting.clone().try_acquire_owned() {
            Ok(permit) => {
                let codec = ctx.codec;
                let timeout = ctx.handshake_timeout;
                tracker.spawn(async move {
                    reject(stream, codec, timeout).await;
                    drop(permit);
                });
            }
            Err(_) => drop(stream),
        }
        return;
    }
    ctx.metrics.connections.increment(1.0);
    let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
    let ctx = ctx.clone();
    tracker.spawn(async move {
        Connection::new(ctx.clone(), id, peer)
            .serve(stream, reading)
            .await;
        ctx.active.fetch_sub(1, Ordering::AcqRel);
        ctx.metrics.connections.decrement(1.0);
    });
}

/// Answers the first request of a connection over the limit with `TooManyConnections`
/// and closes it.
async fn reject(stream: TcpStream, codec: Codec, timeout: Duration) {
    let (read, write) = stream.into_split();
    let mut frames = FramedRead::new(read, codec);
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
    let mut sink = FramedWrite::new(write, codec);
    let answer = Frame::response(
        correlation_id,
        Response::error(
            api_key,
            ErrorCode::TooManyConnections,
            "the coordinator has its maximum number of connections; retry later",
        ),
    );
    let _ = tokio::time::timeout(timeout, async {
        let _ = sink.send(answer).await;
        let _ = SinkExt::<Frame>::close(&mut sink).await;
    })
    .await;
    linger(frames.into_inner()).await;
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
}

struct Connection {
    ctx: Arc<ConnContext>,
    id: ConnId,
    peer: SocketAddr,
    handle: ConnHandle,
    state: Arc<ConnState>,
    queue: Option<mpsc::Receiver<Bytes>>,
    handshaken: bool,
    /// Shards this connection sent requests to, to tell them when it closes.
    used_shards: Vec<bool>,
}

impl Connection {
    fn new(ctx: Arc<ConnContext>, id: ConnId, peer: SocketAddr) -> Self {
        let (handle, queue, state) = ConnHandle::new(ctx.limits.clone());
        let used_shards = vec![false; ctx.shards.len()];
        Self {
            ctx,
            id,
            peer,
            handle,
            state,
            queue: Some(queue),
            handshaken: false,
            used_shards,
        }
    }

    async fn serve(mut self, stream: TcpStream, reading: mpsc::Sender<()>) {
        let (read, write) = stream.into_split();
        let queue = self.queue.take().expect("queue taken once");
        let writer = tokio::spawn(write_loop(
            queue,
            BufWriter::with_capacity(WRITE_BUFFER, write),
            self.state.clone(),
            // Frames taken off the queue count against the bound too.
            self.ctx.limits.frames.clamp(1, WRITE_BATCH),
        ));
        self.ctx.registry.insert(self.id, self.handle.clone());
        debug!(conn = self.id, peer = %self.peer, "connection opened");

        let mut frames = FramedRead::new(read, self.ctx.codec);
        let exit = self.read_loop(&mut frames).await;

        if !matches!(exit, Exit::Shutdown) {
            for (shard, used) in self.used_shards.iter().enumerate() {
                if *used {
                    let _ = self.ctx.shards[shard]
                        .send(ShardInput::Disconnect(self.id))
                        .await;
                }
            }
        }
        // This connection sends nothing more to the shards.
        drop(reading);

        match exit {
            Exit::Shutdown => {
                tokio::select! {
                    () = self.ctx.close.cancelled() => {
                        self.handle.send(Frame::push(Push::Shutdown(ShutdownPush {
                            message: "the coordinator is shutting down; reconnect with backoff".into(),
                        })));
                    }
                    () = self.state.kill.cancelled() => {}
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
            Exit::Eof | Exit::Protocol | Exit::Killed | Exit::ShardGone => {}
        }
        if self.state.overflowed.load(Ordering::Relaxed) {
            self.ctx
                .metrics
                .protocol_error(ProtocolError::SlowReader)
                .increment(1);
            warn!(conn = self.id, peer = %self.peer, max_frames = self.ctx.limits.frames,
                max_bytes = self.ctx.limits.bytes,
                "client does not read its frames; disconnected");
        }

        self.ctx.registry.remove(self.id);
        let state = self.state.clone();
        let Self { handle, ctx, .. } = self;
        drop(handle);
        // The writer ends once every queued frame is written and every handle to the
        // queue is gone (in-flight batches of the shards may still hold one briefly).
        finish_writer(
            writer,
            &state,
            ctx.handshake_timeout.max(Duration::from_secs(1)),
        )
        .await;
        if matches!(exit, Exit::Protocol | Exit::FrameTimeout) {
            linger(frames.into_inner()).await;
        }
        debug!(conn = self.id, peer = %self.peer, reason = ?exit, "connection closed");
    }

    async fn read_loop(&mut self, frames: &mut FramedRead<OwnedReadHalf, Codec>) -> Exit {
        let handshake_deadline = tokio::time::sleep(self.ctx.handshake_timeout);
        tokio::pin!(handshake_deadline);
        // Armed while a frame is partly read, from when its first byte was seen.
        let frame_deadline = tokio::time::sleep(self.ctx.frame_timeout);
        tokio::pin!(frame_deadline);
        let mut partial = false;
        // From the last whole frame; judged once handshaken, and only between frames.
        let idle_deadline = tokio::time::sleep(self.ctx.idle_timeout);
        tokio::pin!(idle_deadline);
        loop {
            let started = !frames.read_buffer().is_empty();
            if started && !partial {
                frame_deadline
                    .as_mut()
                    .reset(Instant::now() + self.ctx.frame_timeout);
            }
            partial = started;
            let next = tokio::select! {
                biased;
                () = self.state.kill.cancelled() => return Exit::Killed,
                () = self.ctx.stop_reading.cancelled() => return Exit::Shutdown,
                // Before the deadlines: what has arrived is read first.
                next = next_or_started(frames, partial) => next,
                () = &mut handshake_deadline, if !self.handshaken => {
                    return Exit::HandshakeTimeout;
                }
                () = &mut frame_deadline, if partial => {
                    self.frame_timed_out();
                    return Exit::FrameTimeout;
                }
                () = &mut idle_deadline, if self.handshaken && !partial => {
                    return Exit::IdleTimeout;
                }
            };
            // `None`: a frame's first bytes arrived; its deadline is armed above.
            let Some(next) = next else { continue };
            idle_deadline
                .as_mut()
                .reset(Instant::now() + self.ctx.idle_timeout);
            // The next frame, if begun, gets a deadline of its own.
            partial = false;
            let exit = match next {
                None => Some(Exit::Eof),
                Some(Ok(frame)) => self.on_frame(frame).await,
                Some(Err(e)) => Some(self.on_frame_error(e)),
            };
            if let Some(exit) = exit {
                return exit;
            }
        }
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

    async fn on_frame(&mut self, frame: Frame) -> Option<Exit> {
        let correlation_id = frame.correlation_id;
        match frame.body {
            Body::Request(request) => self.on_request(correlation_id, request).await,
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

    async fn on_request(&mut self, correlation_id: u32, request: Request) -> Option<Exit> {
        let received = Instant::now();
        let api = request.api_key();
        if matches!(
            api,
            ApiKey::Join | ApiKey::Heartbeat | ApiKey::Leave | ApiKey::CommitOffsets
        ) {
            self.ctx.registry.traffic.heard(received);
        }
        let metrics = &self.ctx.metrics;
        metrics.request(api).increment(1);
        if api == ApiKey::Heartbeat {
            metrics.heartbeats.increment(1);
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
        let shard = match request.group() {
            Some(group) => shard_of(group, self.ctx.shards.len()),
            None => {
                // ListGroups, the only request without a group.
                self.list_groups(correlation_id, received).await;
                return None;
            }
        };
        self.used_shards[shard] = true;
        let input = ShardInput::Request {
            conn: self.id,
            correlation_id,
            request,
            reply: self.handle.clone(),
            received,
        };
        // A full shard queue holds this connection's reader, and so every frame behind
        // it, unread: the time spent waiting for room is the coordinator's backlog.
        let sent = match self.ctx.shards[shard].try_send(input) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(input)) => {
                let waiting = tokio::time::Instant::now();
                let sent = self.ctx.shards[shard].send(input).await.map_err(drop);
                self.ctx.registry.lag.saw(waiting.elapsed());
                sent
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
        };
        if sent.is_err() {
            self.reply(
                correlation_id,
                Response::error(
                    api as u16,
                    ErrorCode::Internal,
                    "coordinator shard unavailable",
                ),
                api,
                received,
            );
            return Some(Exit::ShardGone);
        }
        None
    }

    /// Asks every shard for its groups; a task merges the answers, so this connection
    /// keeps reading meanwhile.
    async fn list_groups(&mut self, correlation_id: u32, received: Instant) {
        let mut answers = Vec::with_capacity(self.ctx.shards.len());
        for shard in &self.ctx.shards {
            let (tx, rx) = oneshot::channel();
            let input = ShardInput::ListGroups {
                conn: self.id,
                reply: tx,
            };
            if shard.send(input).await.is_ok() {
                answers.push(rx);
            }
        }
        let handle = self.handle.clone();
        let metrics = self.ctx.metrics.clone();
        tokio::spawn(async move {
            let mut groups = Vec::new();
            let mut failure = None;
            for answer in answers {
                match answer.await {
                    Ok(Response::ListGroups(part)) => groups.extend(part.groups),
                    Ok(Response::Error(e)) => failure = Some(Response::Error(e)),
                    Ok(_) | Err(_) => {
                        failure = Some(Response::error(
                            ApiKey::ListGroups as u16,
                            ErrorCode::Internal,
                            "a coordinator shard did not answer",
                        ));
                    }
                }
            }
            groups.sort_by(|a, b| a.group.cmp(&b.group));
            let response = failure.unwrap_or(Response::ListGroups(ListGroupsResponse { groups }));
            handle.send(Frame::response(correlation_id, response));
            metrics
                .duration(ApiKey::ListGroups)
                .record(received.elapsed().as_secs_f64());
        });
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
        // A full queue kills the connection; the read loop sees it next.
        self.handle.send(frame);
    }
}

/// Reads the next frame, like `frames.next()`, but returns `None` as soon as the first
/// bytes of a frame are buffered while `partial` is false, so its deadline can be armed.
fn next_or_started(
    frames: &mut FramedRead<OwnedReadHalf, Codec>,
    partial: bool,
) -> impl Future<Output = Option<Option<Result<Frame, FrameError>>>> + '_ {
    std::future::poll_fn(move |cx| match frames.poll_next_unpin(cx) {
        Poll::Ready(next) => Poll::Ready(Some(next)),
        Poll::Pending if !partial && !frames.read_buffer().is_empty() => Poll::Ready(None),
        Poll::Pending => Poll::Pending,
    })
}
