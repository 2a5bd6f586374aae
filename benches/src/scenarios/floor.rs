//! `floor`: what the network path alone costs on this machine. A bare echo server, no
//! coordinator logic, answers each Heartbeat frame with a Heartbeat response, driven as
//! `steady` drives rollcall with one member per connection. Its figure is steady's
//! headline figure, heartbeats per second of server CPU (user + system, every thread of
//! the server), so that rollcall's `steady` figures can be held against the ceiling
//! measured the same day on the same machine. With `--beats-per-frame N` (N > 1) it is
//! the floor of the batched case instead, as `steady --members-per-conn N
//! --batch-heartbeats` drives rollcall: each connection sends one Heartbeats frame of N
//! beats per round and is answered with one Heartbeats response of N results, and the
//! figures count beats (renewals), as steady's do with batching.
//!
//! The server runs in a process of its own, this binary re-executed as the hidden
//! `floor-server` subcommand, so that its CPU time (`/proc/<pid>/stat`) is its alone.
//! It prints its bound address on stdout and serves until its stdin closes (this
//! process ends or lets go of it), it is killed, or its `--lifetime` is over. It is a
//! tokio multi-thread runtime with tokio's default worker count, as `rollcall serve`
//! (or `--server-threads`), with one task per connection. That task reads what has
//! arrived (one read, with room to spare for the largest frame it has seen), decodes
//! every complete frame with the protocol's `Codec` (every beat of a Heartbeats frame
//! included), answers each Heartbeat request with a Heartbeat response encoded once at
//! start-up, and each Heartbeats request of n beats with a Heartbeats response of n
//! results (each the OK result rollcall gives, a generation and a session timeout)
//! encoded the first time the connection sees n beats and kept for the next frames of
//! n; either answer is copied and given the request's correlation id (the cheapest way
//! to send the same bytes as rollcall), and every answer of that read goes out in one
//! write: one read and one write per frame with one frame outstanding. Any other frame
//! closes the connection.
//!
//! The generator opens `--conns` connections from this process, 256 at once, then
//! sends real Heartbeat frames (the protocol crate's encoding, ids of the lengths
//! rollcall's steady runs put on the wire), one outstanding per connection at most: at
//! `--rate` heartbeats per second over all of them, connection `i` of `n` on the fixed
//! timeline `start + (i / n) * period + k * period` (a beat due while the last is
//! unanswered goes as soon as it is answered, and counts as late), or closed loop, the
//! next sent as soon as the last is answered. With `--beats-per-frame N`, connection
//! `i` speaks for members `i * N .. (i + 1) * N` (member `m` in group `g{m % groups}`,
//! `conns * N / 100` groups, as steady lays them out) and each frame is a Heartbeats
//! request renewing all N of them, so `--rate` beats per second are `--rate / N` frames
//! per second. After `--warmup`, the `--duration` window is measured: heartbeats
//! (beats) answered in it, the server's CPU time and this process's.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clap::Args;
use rollcall_protocol::{
    Body, Codec, ErrorCode, Frame, HeartbeatRequest, HeartbeatResponse, HeartbeatResult,
    HeartbeatsRequest, HeartbeatsResponse, Request, Response, DEFAULT_MAX_FRAME_SIZE,
    LENGTH_PREFIX_SIZE, MAX_BEATS,
};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

use crate::common::{command_line, group_name, Check, GeneratorInfo, Machine, Report};
use crate::procfs;
use crate::scenarios::connections::{connection_cap, open_each, Opened};
use crate::stats::{fmt_bytes, fmt_count, kv, table, Percentiles, SharedHistogram, LATENCY_HEADER};

/// Connections being opened at once.
const CONNECT_CONCURRENCY: usize = 256;

/// Time one connection is given to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Time the server is given to print its address.
const SERVER_START: Duration = Duration::from_secs(30);

/// Time the server is given to exit once its stdin is closed, before it is killed.
const SERVER_STOP: Duration = Duration::from_secs(5);

/// Time the connections' tasks are given to end once the window is over.
const DRIVER_STOP: Duration = Duration::from_secs(10);

/// Time a run may take besides its setup timeout, warm-up and duration: the server's
/// start and stop, the tasks' end, the report.
const MARGIN: Duration = Duration::from_secs(60);

/// A heartbeat sent more than this after its intended time counts as late (as in
/// `steady`).
const LATE: Duration = Duration::from_millis(2);

/// Latency samples a connection buffers before adding them to the shared histograms.
const LOCAL_SAMPLES: usize = 128;

/// Room made in a read buffer before each read: far more than a heartbeat frame (a
/// connection that has seen larger frames, Heartbeats of many beats, makes this much
/// more than the largest).
const READ_ROOM: usize = 4096;

/// Where an encoded frame's correlation id starts: after the length prefix, the kind
/// (1 byte), the API key (2) and the API version (2).
const CORRELATION_AT: usize = LENGTH_PREFIX_SIZE + 5;

/// The generation and session timeout the canned answers carry (any values do: they
/// only give them the size of rollcall's), in a Heartbeat response or in each result of
/// a Heartbeats response.
const CANNED: HeartbeatResponse = HeartbeatResponse {
    generation: 1,
    session_timeout_ms: 10_000,
};

/// Members per group, as `steady` lays them out by default (member `i` in group
/// `g{i % groups}`, `members / 100` groups): group names of the same length. The
/// members are the connections times `--beats-per-frame`.
const MEMBERS_PER_GROUP: usize = 100;

/// Window phases, as the connections' tasks see them.
const WARMING_UP: u8 = 0;
const MEASURING: u8 = 1;
const OVER: u8 = 2;

#[derive(Debug, Clone, Args)]
pub(crate) struct FloorArgs {
    /// Connections, `--beats-per-frame` members on each (one frame outstanding at
    /// most). Each one is an open file in this process and in the server's, so at most
    /// the open-file limit (`ulimit -n`) less 1,000: 19,000 under a limit of 20,000.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) conns: usize,
    /// Members per connection, all renewed by each frame: 1 sends Heartbeat frames; N
    /// above 1 sends Heartbeats frames of N beats (as `steady --members-per-conn N
    /// --batch-heartbeats`), answered with N results. At most the protocol's maximum
    /// beats per frame (10,000).
    #[arg(long, default_value_t = 1)]
    pub(crate) beats_per_frame: usize,
    /// Offered heartbeats (beats, renewals) per second over all connections, spread
    /// evenly over them: `--rate / --beats-per-frame` frames per second.
    #[arg(long, default_value_t = 10_000.0, conflicts_with = "closed_loop")]
    pub(crate) rate: f64,
    /// Each connection sends its next frame as soon as the last is answered
    /// (saturation).
    #[arg(long)]
    pub(crate) closed_loop: bool,
    /// Measured duration.
    #[arg(long, value_parser = crate::common::duration, default_value = "15s")]
    pub(crate) duration: Duration,
    /// Time between the last connection opened and the start of the measured window.
    #[arg(long, value_parser = crate::common::duration, default_value = "2s")]
    pub(crate) warmup: Duration,
    /// The server's tokio worker threads; default: tokio's default (one per CPU), as
    /// `rollcall serve` runs.
    #[arg(long)]
    pub(crate) server_threads: Option<usize>,
    /// Time allowed to start the server and open every connection before giving up.
    #[arg(long, value_parser = crate::common::duration, default_value = "60s")]
    pub(crate) setup_timeout: Duration,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub(crate) quiet: bool,
}

impl FloorArgs {
    /// The longest the run may take, all phases included.
    pub(crate) fn hard_cap(&self) -> Duration {
        self.setup_timeout + self.warmup + self.duration + MARGIN
    }

    fn say(&self, begin: Instant, line: &str) {
        if !self.quiet {
            eprintln!("[{:6.1}s] {line}", begin.elapsed().as_secs_f64());
        }
    }
}

/// The echo server's options (the hidden `floor-server` subcommand).
#[derive(Debug, Clone, Args)]
pub(crate) struct FloorServerArgs {
    /// Address to listen on (loopback only).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub(crate) listen: SocketAddr,
    /// Tokio worker threads; default: tokio's default (one per CPU).
    #[arg(long)]
    pub(crate) server_threads: Option<usize>,
    /// The server stops by itself after this long, whatever happens.
    #[arg(long, value_parser = crate::common::duration, default_value = "1h")]
    pub(crate) lifetime: Duration,
}

impl FloorServerArgs {
    pub(crate) fn hard_cap(&self) -> Duration {
        self.lifetime
    }
}

/// What one floor run measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FloorFigures {
    pub(crate) conns: usize,
    /// Beats in each frame (members per connection): 1, Heartbeat frames; more,
    /// Heartbeats frames of that many beats.
    pub(crate) beats_per_frame: usize,
    /// Groups the heartbeats name (as `steady` lays its members out).
    pub(crate) groups: usize,
    /// Bytes of the longest request frame sent (the member ids grow with the member's
    /// number), a Heartbeat or a Heartbeats of `beats_per_frame` beats, and of its
    /// answer, length prefixes included.
    pub(crate) request_frame_bytes: usize,
    pub(crate) response_frame_bytes: usize,
    /// `--server-threads`; `None`: tokio's default.
    pub(crate) server_threads: Option<usize>,
    pub(crate) closed_loop: bool,
    /// Beats (renewals) per second; `None` in closed loop.
    pub(crate) offered_hb_per_s: Option<f64>,
    /// Between two frames of a connection; `None` in closed loop.
    pub(crate) heartbeat_interval_ms: Option<f64>,
    /// From the server's start to the last connection opened.
    pub(crate) setup_s: f64,
    pub(crate) warmup_s: f64,
    pub(crate) window_s: f64,
    /// Beats sent in the window, per second.
    pub(crate) sent_hb_per_s: f64,
    /// Beats (renewals) answered in the window, per second: frames answered times
    /// `beats_per_frame`.
    pub(crate) handled_hb_per_s: f64,
    /// Frames answered in the window, per second.
    pub(crate) handled_frames_per_s: f64,
    /// Beats sent in the window more than 2 ms after their intended time.
    pub(crate) late_sends_pct: f64,
    pub(crate) rtt_from_intended: Percentiles,
    pub(crate) rtt_from_sent: Percentiles,
    /// The server's user + system CPU seconds over the window, every thread.
    pub(crate) server_cpu_s: f64,
    pub(crate) server_cores: f64,
    /// Beats (renewals) answered in the window per server CPU-second; `None` when the
    /// server's CPU time did not move (a window too short for the clock ticks).
    pub(crate) hb_per_cpu_s: Option<f64>,
    pub(crate) cpu_us_per_hb: Option<f64>,
    /// This process's CPU seconds over the window (the generator).
    pub(crate) client_cpu_s: f64,
    pub(crate) client_cores: f64,
    pub(crate) server_peak_rss_bytes: Option<u64>,
    /// Answers that were not the one expected (a Heartbeat response; a Heartbeats
    /// response of one OK result per beat).
    pub(crate) heartbeat_errors: u64,
    pub(crate) connections_lost: u64,
}

// ---------------------------------------------------------------------------------
// The server.

/// The answer to every heartbeat, length prefix included, correlation id 0.
fn canned_answer() -> Result<Bytes, String> {
    encode_answer(Response::Heartbeat(CANNED))
}

/// The answer to every Heartbeats request of `beats` beats: as many results, each the
/// OK result rollcall gives (the Heartbeat answer's generation and session timeout);
/// length prefix included, correlation id 0.
fn canned_batch_answer(beats: usize) -> Result<Bytes, String> {
    let ok = HeartbeatResult::from_response(Response::Heartbeat(CANNED));
    encode_answer(Response::Heartbeats(HeartbeatsResponse {
        results: vec![ok; beats],
    }))
}

fn encode_answer(response: Response) -> Result<Bytes, String> {
    let mut buf = BytesMut::new();
    Frame::response(0, response)
        .encode(&mut buf, DEFAULT_MAX_FRAME_SIZE)
        .map_err(|e| format!("cannot encode the answer: {e}"))?;
    Ok(buf.freeze())
}

/// Appends `answer` to `out` with `correlation_id` in place of its own.
fn put_answer(out: &mut BytesMut, answer: &[u8], correlation_id: u32) {
    let at = out.len() + CORRELATION_AT;
    out.extend_from_slice(answer);
    out[at..at + 4].copy_from_slice(&correlation_id.to_be_bytes());
}

/// The `floor-server` subcommand: runs on a runtime of its own (not the generator's),
/// built here.
pub(crate) fn serve(args: &FloorServerArgs) -> ExitCode {
    match serve_until_told(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rollcall-bench floor-server: {e}");
            ExitCode::from(2)
        }
    }
}

fn serve_until_told(args: &FloorServerArgs) -> Result<(), String> {
    if !args.listen.ip().is_loopback() {
        return Err(format!(
            "--listen {} is not a loopback address: the floor is measured on 127.0.0.1 only",
            args.listen
        ));
    }
    let answer = canned_answer()?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    match args.server_threads {
        Some(0) => return Err("--server-threads must be at least 1".to_owned()),
        Some(n) => {
            builder.worker_threads(n);
        }
        None => {}
    }
    let runtime = builder
        .enable_all()
        .thread_name("floor-server")
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let stop = CancellationToken::new();
    {
        // Stdin closed: the generator is done (or gone).
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("floor-stdin".into())
            .spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
                stop.cancel();
            })
            .map_err(|e| format!("stdin thread: {e}"))?;
    }
    let lifetime = args.lifetime;
    let listen = args.listen;
    let result = runtime.block_on(async move {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{addr}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("cannot print the address: {e}"))?;
        }
        let end = tokio::time::sleep(lifetime);
        tokio::pin!(end);
        let mut accept_errors = 0u64;
        // Bounded by the lifetime.
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = &mut end => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        tokio::spawn(echo(stream, answer.clone()));
                    }
                    Err(e) => {
                        // Out of files, most likely: say so once, and let a close make room.
                        accept_errors += 1;
                        if accept_errors == 1 {
                            eprintln!("rollcall-bench floor-server: accept failed: {e}");
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
            }
        }
        Ok(())
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// One connection: every Heartbeat request answered with `answer`, every Heartbeats
/// request with the canned answer of its beat count (encoded when the connection first
/// sees that count, kept while the count stays the same), each given the request's
/// correlation id; whatever one read brought is answered in one write.
async fn echo(mut stream: TcpStream, answer: Bytes) {
    let _ = stream.set_nodelay(true);
    let mut codec = Codec::default();
    let mut read = BytesMut::new();
    let mut write = BytesMut::new();
    let mut batch_answer: Option<(usize, Bytes)> = None;
    let mut room = READ_ROOM;
    // Bounded by the peer: ends when it closes, fails or sends anything else.
    loop {
        // Reclaims the room of the frames already decoded (they are dropped by now).
        read.reserve(room);
        match stream.read_buf(&mut read).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        // Bounded: each turn takes a frame out of what was read.
        loop {
            let before = read.len();
            match codec.decode(&mut read) {
                Ok(Some(Frame {
                    correlation_id,
                    body: Body::Request(Request::Heartbeat(_)),
                })) => put_answer(&mut write, &answer, correlation_id),
                Ok(Some(Frame {
                    correlation_id,
                    body: Body::Request(Request::Heartbeats(HeartbeatsRequest { beats })),
                })) => {
                    let n = beats.len();
                    if batch_answer.as_ref().is_none_or(|(count, _)| *count != n) {
                        match canned_batch_answer(n) {
                            Ok(canned) => batch_answer = Some((n, canned)),
                            Err(_) => return,
                        }
                    }
                    if let Some((_, canned)) = &batch_answer {
                        put_answer(&mut write, canned, correlation_id);
                    }
                    // The next frame of this size is read whole in one read, with room to
                    // spare: a read that fills the buffer leaves the socket marked readable,
                    // and the next read would be one more system call, failing.
                    room = room.max(before - read.len() + READ_ROOM);
                }
                Ok(None) => break,
                // The floor speaks nothing but heartbeats.
                Ok(Some(_)) | Err(_) => return,
            }
        }
        if !write.is_empty() {
            if stream.write_all(&write).await.is_err() {
                return;
            }
            write.clear();
        }
    }
}

/// The server process, killed if still running when dropped.
#[derive(Debug)]
struct ServerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    addr: SocketAddr,
}

impl ServerProcess {
    /// Starts this binary as `floor-server` and reads the address it bound.
    async fn spawn(threads: Option<usize>, lifetime: Duration) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
        let mut cmd = Command::new(&exe);
        cmd.args(["floor-server", "--listen", "127.0.0.1:0"])
            .args(["--lifetime", &format!("{}s", lifetime.as_secs().max(1))]);
        if let Some(n) = threads {
            cmd.args(["--server-threads", &n.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {} floor-server: {e}", exe.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads the address, then keeps the pipe open until the server exits.
        std::thread::Builder::new()
            .name("floor-server-out".into())
            .spawn(move || {
                let mut lines = BufReader::new(stdout).lines();
                let first = match lines.next() {
                    Some(Ok(line)) => line
                        .trim()
                        .parse::<SocketAddr>()
                        .map_err(|e| format!("the server printed '{line}', not its address: {e}")),
                    _ => Err("the server exited before printing its address".to_owned()),
                };
                let _ = tx.send(first);
                for _ in lines.by_ref() {}
            })
            .map_err(|e| format!("server output thread: {e}"))?;
        let addr = tokio::task::spawn_blocking(move || {
            rx.recv_timeout(SERVER_START).map_err(|_| {
                format!(
                    "the server did not print its address within {} s",
                    SERVER_START.as_secs()
                )
            })?
        })
        .await
        .map_err(|e| e.to_string())?;
        match addr {
            Ok(addr) => Ok(Self { child, stdin, addr }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes the server's stdin and waits for it to exit; kills it past
    /// [`SERVER_STOP`].
    async fn stop(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + SERVER_STOP;
        // Bounded by the deadline.
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => break,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    /// A run interrupted or failed still leaves no server behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------
// The generator.

/// What the connections' tasks count and record, shared.
#[derive(Debug)]
struct Shared {
    phase: AtomicU8,
    stop: CancellationToken,
    sent: AtomicU64,
    answered: AtomicU64,
    /// Beats, as `sent` and `answered`.
    window_sent: AtomicU64,
    window_answered: AtomicU64,
    window_late: AtomicU64,
    /// Frames answered in the window.
    window_frames: AtomicU64,
    errors: AtomicU64,
    lost: AtomicU64,
    rtt_intended: SharedHistogram,
    rtt_sent: SharedHistogram,
}

impl Shared {
    fn measuring(&self) -> bool {
        self.phase.load(Ordering::Relaxed) == MEASURING
    }
}

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// How a connection paces its heartbeats.
#[derive(Debug, Clone, Copy)]
enum Pace {
    /// On the global timeline: the first at `first`, then one every `period`.
    Periodic {
        first: Instant,
        period: Duration,
    },
    ClosedLoop,
}

/// The Heartbeat of member `i`: its group and member id as long as rollcall's
/// (`g{i % groups}`, as `steady` names them, and the coordinator's
/// `m<n>-<start ms, hex><nonce, hex>-<shard>`).
fn heartbeat(i: usize, groups: usize, start_ms: u128) -> HeartbeatRequest {
    HeartbeatRequest {
        group: group_name(i % groups).into(),
        member_id: format!("m{i}-{start_ms:x}{:04x}-{}", 0x5eed, i % 2).into(),
        generation: 1,
        sequence: 0,
        progress: 0,
        acked_revocations: Vec::new(),
    }
}

/// What connection `conn` sends each round: with one beat per frame the Heartbeat of
/// member `conn`, as steady with one member per connection; with more, a Heartbeats
/// request of the beats of members `conn * beats .. (conn + 1) * beats`, as steady's
/// connections hold their members.
fn request(conn: usize, beats: usize, groups: usize, start_ms: u128) -> Request {
    if beats == 1 {
        return Request::Heartbeat(heartbeat(conn, groups, start_ms));
    }
    Request::Heartbeats(HeartbeatsRequest {
        beats: (conn * beats..(conn + 1) * beats)
            .map(|i| heartbeat(i, groups, start_ms))
            .collect(),
    })
}

/// Bytes of `request`'s frame, length prefix included.
fn frame_bytes(request: &Request) -> usize {
    let body = match request {
        Request::Heartbeat(beat) => beat.encoded_len(),
        Request::Heartbeats(r) => {
            4 + r
                .beats
                .iter()
                .map(HeartbeatRequest::encoded_len)
                .sum::<usize>()
        }
        _ => 0,
    };
    LENGTH_PREFIX_SIZE + rollcall_protocol::HEADER_SIZE + body
}

/// The next beat of each member `request` renews: sequence and progress advance.
fn advance(request: &mut Request) {
    let next = |beat: &mut HeartbeatRequest| {
        beat.sequence += 1;
        beat.progress += 1;
    };
    match request {
        Request::Heartbeat(beat) => next(beat),
        Request::Heartbeats(r) => r.beats.iter_mut().for_each(next),
        _ => {}
    }
}

/// Whether `response` is the answer expected to a request of `beats` beats: a
/// Heartbeat response to a Heartbeat, a Heartbeats response of as many OK results to a
/// Heartbeats request.
fn expected(response: &Response, beats: usize, batched: bool) -> bool {
    match response {
        Response::Heartbeat(_) => !batched,
        Response::Heartbeats(r) => {
            batched
                && r.results.len() == beats
                && r.results.iter().all(|r| r.code == ErrorCode::None)
        }
        _ => false,
    }
}

/// Reads until `codec` yields a frame.
async fn next_frame(
    stream: &mut TcpStream,
    codec: &mut Codec,
    read: &mut BytesMut,
) -> Result<Frame, String> {
    // Bounded by the peer: every turn reads at least a byte, or ends.
    loop {
        if let Some(frame) = codec.decode(read).map_err(|e| e.to_string())? {
            return Ok(frame);
        }
        read.reserve(READ_ROOM);
        match stream.read_buf(read).await {
            Ok(0) => return Err("closed".to_owned()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// One connection's heartbeats, until the stop.
async fn drive(
    mut stream: TcpStream,
    key: usize,
    request: Request,
    pace: Pace,
    shared: Arc<Shared>,
) {
    let mut codec = Codec::default();
    let mut read = BytesMut::new();
    let mut write = BytesMut::new();
    let (beats, batched) = match &request {
        Request::Heartbeats(r) => (r.beats.len(), true),
        _ => (1, false),
    };
    let n = beats as u64;
    let mut frame = Frame::request(0, request);
    let mut from_intended = Vec::with_capacity(LOCAL_SAMPLES);
    let mut from_sent = Vec::with_capacity(LOCAL_SAMPLES);
    let mut next = match pace {
        Pace::Periodic { first, .. } => first,
        Pace::ClosedLoop => Instant::now(),
    };
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    // Bounded by the stop, which ends the run's window.
    loop {
        if let Pace::Periodic { .. } = pace {
            tokio::select! {
                () = shared.stop.cancelled() => break,
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(next)) => {}
            }
        } else if shared.stop.is_cancelled() {
            break;
        }
        frame.correlation_id = frame.correlation_id.wrapping_add(1);
        if let Body::Request(request) = &mut frame.body {
            advance(request);
        }
        write.clear();
        if frame.encode(&mut write, DEFAULT_MAX_FRAME_SIZE).is_err() {
            inc(&shared.errors);
            break;
        }
        let sent = Instant::now();
        let intended = match pace {
            Pace::Periodic { .. } => next,
            Pace::ClosedLoop => sent,
        };
        add(&shared.sent, n);
        if shared.measuring() {
            add(&shared.window_sent, n);
            if sent.saturating_duration_since(intended) > LATE {
                add(&shared.window_late, n);
            }
        }
        if stream.write_all(&write).await.is_err() {
            inc(&shared.lost);
            break;
        }
        let answer = tokio::select! {
            () = shared.stop.cancelled() => break,
            answer = next_frame(&mut stream, &mut codec, &mut read) => answer,
        };
        match answer {
            // Latency is recorded once per frame: every beat of it has the same.
            Ok(Frame {
                correlation_id,
                body: Body::Response(response),
            }) if correlation_id == frame.correlation_id && expected(&response, beats, batched) => {
                let now = Instant::now();
                add(&shared.answered, n);
                if shared.measuring() {
                    add(&shared.window_answered, n);
                    inc(&shared.window_frames);
                    from_sent.push(micros(now - sent));
                    if let Pace::Periodic { .. } = pace {
                        from_intended.push(micros(now.saturating_duration_since(intended)));
                    }
                    if from_sent.len() >= LOCAL_SAMPLES {
                        shared.rtt_sent.record_micros(key, &from_sent);
                        shared.rtt_intended.record_micros(key, &from_intended);
                        from_sent.clear();
                        from_intended.clear();
                    }
                }
            }
            Ok(_) => {
                inc(&shared.errors);
                break;
            }
            Err(_) => {
                inc(&shared.lost);
                break;
            }
        }
        if let Pace::Periodic { period, .. } = pace {
            next += period;
        }
    }
    shared.rtt_sent.record_micros(key, &from_sent);
    shared.rtt_intended.record_micros(key, &from_intended);
}

/// Opens `n` plain connections to `addr`, [`CONNECT_CONCURRENCY`] at once, until
/// `deadline`.
async fn open(addr: SocketAddr, n: usize, deadline: Instant) -> Opened {
    let connect = || async move {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| "connect timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(stream)
    };
    open_each(n, CONNECT_CONCURRENCY, deadline, connect, |_, _| {}).await
}

/// A line per second on stderr until `stop`.
fn progress(shared: Arc<Shared>, begin: Instant, server_pid: u32, conns: usize) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        ticks.tick().await;
        let mut last_answered = get(&shared.answered);
        let mut last_cpu = procfs::process_cpu_seconds(server_pid);
        let mut last_at = Instant::now();
        // Bounded: a run never lasts a day.
        for _ in 0..86_400 {
            tokio::select! {
                () = shared.stop.cancelled() => break,
                _ = ticks.tick() => {}
            }
            let answered = get(&shared.answered);
            let cpu = procfs::process_cpu_seconds(server_pid);
            let now = Instant::now();
            let wall = now.duration_since(last_at).as_secs_f64().max(1e-9);
            let cores = match (cpu, last_cpu) {
                (Some(c), Some(l)) => format!("{:.3}", (c - l) / wall),
                _ => "?".to_owned(),
            };
            let phase = match shared.phase.load(Ordering::Relaxed) {
                WARMING_UP => "warming up",
                MEASURING => "measuring",
                _ => "stopping",
            };
            eprintln!(
                "[{:6.1}s] {phase}: conns {} hb/s {} errors {} lost {} server cores {cores}",
                begin.elapsed().as_secs_f64(),
                fmt_count(conns as f64),
                fmt_count((answered - last_answered) as f64 / wall),
                get(&shared.errors),
                get(&shared.lost),
            );
            last_answered = answered;
            last_cpu = cpu;
            last_at = now;
        }
    });
}

/// CPU seconds of the server and of this process at an instant.
#[derive(Debug, Clone, Copy)]
struct Mark {
    at: Instant,
    server: f64,
    client: f64,
}

impl Mark {
    fn take(server_pid: u32) -> Result<Self, String> {
        let read = |pid: u32, whose: &str| {
            procfs::process_cpu_seconds(pid)
                .ok_or_else(|| format!("cannot read the {whose}'s CPU time from /proc/{pid}/stat"))
        };
        Ok(Self {
            at: Instant::now(),
            server: read(server_pid, "server")?,
            client: read(std::process::id(), "generator")?,
        })
    }
}

/// What the window measured, before it is turned into figures.
#[derive(Debug)]
struct Window {
    setup: Duration,
    begin: Mark,
    end: Mark,
    server_peak_rss: Option<u64>,
}

/// The `floor` subcommand: prints its report, writes its JSON when asked, and returns
/// whether every check was met.
pub(crate) async fn run(args: &FloorArgs) -> Result<bool, String> {
    if args.conns == 0 {
        return Err("--conns must be at least 1".to_owned());
    }
    if !(1..=MAX_BEATS).contains(&args.beats_per_frame) {
        return Err(format!(
            "--beats-per-frame {} is out of range: from 1 to {MAX_BEATS}, the most beats the protocol takes in one Heartbeats frame",
            args.beats_per_frame
        ));
    }
    let rate_ok = args.rate.is_finite() && args.rate > 0.0;
    if !args.closed_loop && !rate_ok {
        return Err("--rate must be above 0".to_owned());
    }
    if args.duration.is_zero() {
        return Err("--duration must be above 0".to_owned());
    }
    if args.server_threads == Some(0) {
        return Err("--server-threads must be at least 1".to_owned());
    }
    if let Some(cap) = connection_cap(std::process::id()) {
        if args.conns > cap {
            return Err(format!(
                "--conns {} does not fit this process's open-file limit: at most {cap}",
                args.conns
            ));
        }
    }
    let beats = args.beats_per_frame;
    let members = args.conns.saturating_mul(beats);
    let mut machine = Machine::now();
    let groups = (members / MEMBERS_PER_GROUP).max(1);
    let start_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let requests: Vec<Request> = (0..args.conns)
        .map(|i| request(i, beats, groups, start_ms))
        .collect();
    let request_frame_bytes = requests.iter().map(frame_bytes).max().unwrap_or_default();
    let response_frame_bytes = if beats == 1 {
        canned_answer()?.len()
    } else {
        canned_batch_answer(beats)?.len()
    };
    let largest = request_frame_bytes.max(response_frame_bytes);
    if largest > LENGTH_PREFIX_SIZE + DEFAULT_MAX_FRAME_SIZE {
        return Err(format!(
            "--beats-per-frame {beats} makes frames of {largest} bytes, above the protocol's default maximum of {} (length prefix excluded): fewer beats per frame",
            DEFAULT_MAX_FRAME_SIZE
        ));
    }

    let begin = Instant::now();
    args.say(begin, "starting the server");
    let server = ServerProcess::spawn(args.server_threads, args.hard_cap()).await?;
    let shared = Arc::new(Shared {
        phase: AtomicU8::new(WARMING_UP),
        stop: CancellationToken::new(),
        sent: AtomicU64::new(0),
        answered: AtomicU64::new(0),
        window_sent: AtomicU64::new(0),
        window_answered: AtomicU64::new(0),
        window_late: AtomicU64::new(0),
        window_frames: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        rtt_intended: SharedHistogram::new(procfs::cpus() * 4),
        rtt_sent: SharedHistogram::new(procfs::cpus() * 4),
    });
    let measured = measure(args, &server, &shared, requests, begin).await;
    shared.stop.cancel();
    server.stop().await;
    let window = measured?;
    machine.finish();

    let wall = window.end.at.duration_since(window.begin.at).as_secs_f64();
    let server_cpu = (window.end.server - window.begin.server).max(0.0);
    let client_cpu = (window.end.client - window.begin.client).max(0.0);
    let answered = get(&shared.window_answered);
    let sent = get(&shared.window_sent);
    let hb_per_cpu = (server_cpu > 0.0).then(|| answered as f64 / server_cpu);
    let period = (!args.closed_loop).then(|| frame_period(args));
    let f = FloorFigures {
        conns: args.conns,
        beats_per_frame: beats,
        groups,
        request_frame_bytes,
        response_frame_bytes,
        server_threads: args.server_threads,
        closed_loop: args.closed_loop,
        offered_hb_per_s: (!args.closed_loop).then_some(args.rate),
        heartbeat_interval_ms: period.map(|p| p.as_secs_f64() * 1000.0),
        setup_s: window.setup.as_secs_f64(),
        warmup_s: args.warmup.as_secs_f64(),
        window_s: wall,
        sent_hb_per_s: sent as f64 / wall,
        handled_hb_per_s: answered as f64 / wall,
        handled_frames_per_s: get(&shared.window_frames) as f64 / wall,
        late_sends_pct: if sent > 0 {
            100.0 * get(&shared.window_late) as f64 / sent as f64
        } else {
            0.0
        },
        rtt_from_intended: Percentiles::of(&shared.rtt_intended.merged()),
        rtt_from_sent: Percentiles::of(&shared.rtt_sent.merged()),
        server_cpu_s: server_cpu,
        server_cores: server_cpu / wall,
        hb_per_cpu_s: hb_per_cpu,
        cpu_us_per_hb: hb_per_cpu.map(|r| 1e6 / r),
        client_cpu_s: client_cpu,
        client_cores: client_cpu / wall,
        server_peak_rss_bytes: window.server_peak_rss,
        heartbeat_errors: get(&shared.errors),
        connections_lost: get(&shared.lost),
    };
    let report = Report {
        scenario: "floor",
        command: command_line(),
        machine,
        coordinator: None,
        generator: Some(generator(&f)),
        text: render(&f),
        checks: checks(&f),
        notes: notes(&f),
        figures: f,
    };
    report.emit(args.json.as_ref())
}

/// Everything between the server's start and its stop.
async fn measure(
    args: &FloorArgs,
    server: &ServerProcess,
    shared: &Arc<Shared>,
    requests: Vec<Request>,
    begin: Instant,
) -> Result<Window, String> {
    let pid = server.pid();
    if let Some(cap) = connection_cap(pid) {
        if args.conns > cap {
            return Err(format!(
                "--conns {} does not fit the server's open-file limit: at most {cap}",
                args.conns
            ));
        }
    }
    args.say(
        begin,
        &format!(
            "server pid {pid} on {}; opening {} connections",
            server.addr,
            fmt_count(args.conns as f64)
        ),
    );
    let opened = open(server.addr, args.conns, begin + args.setup_timeout).await;
    if opened.streams.len() < args.conns {
        return Err(format!(
            "{} of {} connections opened{}{}",
            opened.streams.len(),
            args.conns,
            if opened.timed_out {
                " within --setup-timeout"
            } else {
                ""
            },
            opened
                .first_error
                .map_or(String::new(), |e| format!("; the first failure: {e}"))
        ));
    }
    let setup = begin.elapsed();
    if !args.quiet {
        progress(shared.clone(), begin, pid, args.conns);
    }

    let start = Instant::now() + Duration::from_millis(10);
    let n = args.conns as f64;
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (stream, request)) in opened.streams.into_iter().zip(requests).enumerate() {
        let pace = if args.closed_loop {
            Pace::ClosedLoop
        } else {
            let period = frame_period(args);
            Pace::Periodic {
                first: start + period.mul_f64(i as f64 / n),
                period,
            }
        };
        tasks.spawn(drive(stream, i, request, pace, shared.clone()));
    }
    let sleep_until = |at: Instant| tokio::time::sleep_until(tokio::time::Instant::from_std(at));
    let window_from = start + args.warmup;
    sleep_until(window_from).await;
    let begin_mark = Mark::take(pid)?;
    shared.phase.store(MEASURING, Ordering::Relaxed);
    sleep_until(begin_mark.at + args.duration).await;
    shared.phase.store(OVER, Ordering::Relaxed);
    let end_mark = Mark::take(pid)?;
    let server_peak_rss = procfs::peak_rss_bytes(pid);
    shared.stop.cancel();
    let _ = tokio::time::timeout(DRIVER_STOP, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    Ok(Window {
        setup,
        begin: begin_mark,
        end: end_mark,
        server_peak_rss,
    })
}

/// Between two frames of a connection in open loop: `--rate` beats per second over
/// every connection, `--beats-per-frame` in each frame.
fn frame_period(args: &FloorArgs) -> Duration {
    Duration::from_secs_f64(args.conns as f64 * args.beats_per_frame as f64 / args.rate)
}

fn load_label(f: &FloorFigures) -> String {
    let what = if f.beats_per_frame == 1 {
        "heartbeat".to_owned()
    } else {
        format!("Heartbeats frame of {} beats", f.beats_per_frame)
    };
    if f.closed_loop {
        format!("closed loop: one {what} outstanding per connection")
    } else {
        format!(
            "open loop: {} hb/s offered, each connection every {:.1} ms on a fixed timeline, one {what} outstanding at most (latency from the intended send time)",
            fmt_count(f.offered_hb_per_s.unwrap_or_default()),
            f.heartbeat_interval_ms.unwrap_or_default()
        )
    }
}

fn generator(f: &FloorFigures) -> GeneratorInfo {
    GeneratorInfo {
        driver: "raw TCP with the protocol's Codec, one task per connection",
        members: f.conns * f.beats_per_frame,
        connections: f.conns,
        members_per_conn: f.beats_per_frame,
        multiplexed: f.beats_per_frame > 1,
        batch_heartbeats: f.beats_per_frame > 1,
        load: load_label(f),
    }
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "n/a".to_owned(), f)
}

fn render(f: &FloorFigures) -> String {
    let threads = f.server_threads.map_or_else(
        || format!("tokio's default ({})", procfs::cpus()),
        |n| n.to_string(),
    );
    let answers = if f.beats_per_frame == 1 {
        format!(
            "a canned Heartbeat answer ({} B) per Heartbeat frame ({} B)",
            f.response_frame_bytes, f.request_frame_bytes
        )
    } else {
        format!(
            "a canned Heartbeats answer of {n} results ({} B) per Heartbeats frame of {n} beats ({} B)",
            f.response_frame_bytes,
            f.request_frame_bytes,
            n = f.beats_per_frame
        )
    };
    let mut out = kv(&[
        (
            "server",
            format!(
                "bare echo in a process of its own, {threads} worker threads, one task per connection; {answers}"
            ),
        ),
        (
            "setup",
            format!(
                "{:.1} s to start the server and open {} connections; {:.1} s warm-up",
                f.setup_s,
                fmt_count(f.conns as f64),
                f.warmup_s
            ),
        ),
        (
            "window",
            format!(
                "{:.1} s: sent {} hb/s, handled {} hb/s ({} beats per frame, {} frames/s), {:.2} % sent over 2 ms late",
                f.window_s,
                fmt_count(f.sent_hb_per_s),
                fmt_count(f.handled_hb_per_s),
                f.beats_per_frame,
                fmt_count(f.handled_frames_per_s),
                f.late_sends_pct
            ),
        ),
        (
            "server CPU",
            format!(
                "{:.2} s ({:.3} cores); {} hb per CPU-second ({} us CPU per hb); peak RSS {}",
                f.server_cpu_s,
                f.server_cores,
                opt(f.hb_per_cpu_s, fmt_count),
                opt(f.cpu_us_per_hb, |v| format!("{v:.2}")),
                opt(f.server_peak_rss_bytes, fmt_bytes),
            ),
        ),
        (
            "errors",
            format!(
                "heartbeat errors {}, connections lost {}",
                f.heartbeat_errors, f.connections_lost
            ),
        ),
    ]);
    out.push('\n');
    out.push_str(&table(
        &[
            "offered hb/s",
            "handled hb/s",
            "server cores",
            "hb per server CPU-s",
            "client cores",
        ],
        &[vec![
            f.offered_hb_per_s
                .map_or_else(|| "closed loop".to_owned(), fmt_count),
            fmt_count(f.handled_hb_per_s),
            format!("{:.3}", f.server_cores),
            opt(f.hb_per_cpu_s, fmt_count),
            format!("{:.3}", f.client_cores),
        ]],
    ));
    out.push('\n');
    let mut latencies = vec![f.rtt_from_sent.row("heartbeat RTT, from actual send")];
    if !f.closed_loop {
        latencies.insert(
            0,
            f.rtt_from_intended.row("heartbeat RTT, from intended send"),
        );
    }
    out.push_str(&table(&LATENCY_HEADER, &latencies));
    out
}

fn checks(f: &FloorFigures) -> Vec<Check> {
    let mut checks = vec![Check::new(
        "heartbeats answered without error",
        "0 errors, 0 connections lost",
        format!(
            "{} errors, {} connections lost",
            f.heartbeat_errors, f.connections_lost
        ),
        f.heartbeat_errors == 0 && f.connections_lost == 0,
    )];
    if let Some(offered) = f.offered_hb_per_s {
        // Below it, the figure is not one at the offered rate.
        checks.push(Check::new(
            "offered rate handled",
            format!("within 10 % of {}", fmt_count(offered)),
            fmt_count(f.handled_hb_per_s),
            (f.handled_hb_per_s - offered).abs() <= 0.1 * offered,
        ));
    }
    checks
}

fn notes(f: &FloorFigures) -> Vec<String> {
    let mut notes = vec![
        "no coordinator: the server only decodes heartbeats and writes a canned answer; its hb per CPU-second is the ceiling of rollcall's steady figure on this machine".to_owned(),
    ];
    if f.beats_per_frame > 1 {
        notes.push(format!(
            "{n} beats per Heartbeats frame: hb figures count beats (renewals), as steady's do with --batch-heartbeats; compare with steady --members-per-conn {n} --batch-heartbeats",
            n = f.beats_per_frame
        ));
    }
    if f.hb_per_cpu_s.is_none() {
        notes.push(
            "the server's CPU time did not move over the window (clock ticks of 10 ms): run longer or faster"
                .to_owned(),
        );
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canned_answer_is_a_heartbeat_response_with_the_request_id() {
        let answer = canned_answer().unwrap();
        let mut out = BytesMut::new();
        put_answer(&mut out, &answer, 7);
        put_answer(&mut out, &answer, 0xdead_beef);
        let mut codec = Codec::default();
        for id in [7, 0xdead_beef] {
            let frame = codec.decode(&mut out).unwrap().unwrap();
            assert_eq!(frame, Frame::response(id, Response::Heartbeat(CANNED)));
        }
        assert!(out.is_empty());
    }

    #[test]
    fn the_batch_answer_has_an_ok_result_per_beat_and_the_request_id() {
        let answer = canned_batch_answer(100).unwrap();
        let mut out = BytesMut::new();
        put_answer(&mut out, &answer, 9);
        let frame = Codec::default().decode(&mut out).unwrap().unwrap();
        assert_eq!(frame.correlation_id, 9);
        let Body::Response(response) = &frame.body else {
            panic!("not a response: {frame:?}");
        };
        assert!(expected(response, 100, true), "{response:?}");
        assert!(!expected(response, 99, true));
        assert!(!expected(response, 100, false));
        let Response::Heartbeats(r) = response else {
            unreachable!()
        };
        assert_eq!(
            r.results[0],
            HeartbeatResult::from_response(Response::Heartbeat(CANNED))
        );
        // Header, error code, count, and per result a code, a generation, a timeout
        // and an empty message.
        assert_eq!(answer.len(), LENGTH_PREFIX_SIZE + 9 + 2 + 4 + 100 * 12);
    }

    #[test]
    fn a_batched_request_renews_a_connections_members_as_steady_lays_them_out() {
        let single = request(3, 1, 10, 0);
        assert!(matches!(single, Request::Heartbeat(_)));
        let mut batch = request(3, 100, 100, 0x19a_0000_0000);
        let Request::Heartbeats(r) = &batch else {
            panic!("not a Heartbeats request: {batch:?}");
        };
        assert_eq!(r.beats.len(), 100);
        assert_eq!(&*r.beats[0].member_id, "m300-19a000000005eed-0");
        assert_eq!(&*r.beats[0].group, "g0");
        assert_eq!(&*r.beats[99].group, "g99");
        let bytes = frame_bytes(&batch);
        let mut encoded = BytesMut::new();
        Frame::request(1, batch.clone())
            .encode(&mut encoded, DEFAULT_MAX_FRAME_SIZE)
            .unwrap();
        assert_eq!(bytes, encoded.len());
        advance(&mut batch);
        let Request::Heartbeats(r) = &batch else {
            unreachable!()
        };
        assert!(r.beats.iter().all(|b| b.sequence == 1 && b.progress == 1));
    }

    #[test]
    fn heartbeats_are_as_long_as_steady_ones() {
        let beat = heartbeat(999, 10, 0x19a_0000_0000);
        assert_eq!(&*beat.group, "g9");
        assert_eq!(beat.member_id.len(), "m999-19a000000005eed-1".len());
        assert!((20..=24).contains(&beat.member_id.len()));
    }
}
