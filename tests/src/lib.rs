//! End-to-end test helpers: a raw protocol client over real TCP, a server started on an
//! ephemeral port, a proxy that stages network faults, and a bounded wait around
//! everything.
#![forbid(unsafe_code)]

#[cfg(feature = "cluster")]
pub mod cluster;
pub mod fleet;
pub mod proxy;
mod tempdir;

pub use tempdir::TempDir;

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::{SinkExt, StreamExt};
use parking_lot::Mutex;
use rollcall_coordinator::server::{Server, ServerConfig, ServerHandle};
use rollcall_protocol::{
    ApiVersionsResponse, Body, Codec, ExpelledPush, Frame, FrameError, HeartbeatRequest,
    JoinRequest, Push, Request, Response, TopicPartitions, TopicSubscription,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// How long any single step of a test may take before the test fails.
pub const STEP: Duration = Duration::from_secs(10);

/// Awaits `fut`, failing the test if it takes longer than [`STEP`].
pub async fn bounded<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(STEP, fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {STEP:?}: {what}"),
    }
}

/// What a run of the `rollcall` command gave.
#[derive(Debug)]
pub struct CliOutput {
    /// Its exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the `rollcall` binary `bin` with `args`, `stdin` written to it (none: it reads
/// end of file at once) and no `RUST_LOG`, within the test step's bound.
pub async fn run_cli(bin: &str, args: &[&str], stdin: Option<&str>) -> CliOutput {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(bin)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("runs");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input
            .write_all(text.as_bytes())
            .await
            .expect("writes stdin");
    }
    drop(input);
    let out = bounded("rollcall command", child.wait_with_output())
        .await
        .expect("finishes");
    CliOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A server configuration for tests: ephemeral port, in-memory store, two shards (so
/// routing across shards is exercised).
pub fn test_config() -> ServerConfig {
    ServerConfig {
        shards: 2,
        ..ServerConfig::default()
    }
}

/// Binds and spawns a server.
pub async fn start(config: ServerConfig) -> ServerHandle {
    bounded("server bind", Server::bind(config))
        .await
        .expect("server binds")
        .spawn()
}

/// A client speaking the raw protocol: frames in, frames out, nothing hidden.
#[derive(Debug)]
pub struct RawClient {
    framed: Framed<TcpStream, Codec>,
    next_id: u32,
    pushes: VecDeque<Push>,
    responses: VecDeque<Frame>,
}

impl RawClient {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = bounded("connect", TcpStream::connect(addr))
            .await
            .expect("connects");
        stream.set_nodelay(true).expect("nodelay");
        Self {
            framed: Framed::new(stream, Codec::default()),
            next_id: 1,
            pushes: VecDeque::new(),
            responses: VecDeque::new(),
        }
    }

    /// Connects and handshakes.
    pub async fn connected(addr: SocketAddr) -> Self {
        let mut c = Self::connect(addr).await;
        c.handshake().await;
        c
    }

    /// Sends ApiVersions and returns the coordinator's answer.
    pub async fn handshake(&mut self) -> ApiVersionsResponse {
        let id = self.next_id();
        let handshake = rollcall_client::raw::handshake(&mut self.framed, id, "rollcall-tests");
        match bounded("handshake", handshake).await {
            Ok(v) => v,
            Err(e) => panic!("handshake: {e}"),
        }
    }

    /// Authenticates as `user` with `password` (SCRAM-SHA-256); returns the principal.
    pub async fn authenticate(
        &mut self,
        user: &str,
        password: &str,
    ) -> Result<String, rollcall_client::ConnectError> {
        let id = self.next_id();
        self.next_id();
        let credentials = rollcall_client::Credentials::new(user, password);
        let exchange = rollcall_client::raw::authenticate(&mut self.framed, id, &credentials);
        bounded("authenticate", exchange).await
    }

    /// The next correlation id.
    pub fn next_id(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Sends `request` and waits for its response; pushes that arrive meanwhile are kept
    /// for [`Self::next_push`].
    pub async fn request(&mut self, request: Request) -> Response {
        let id = self.next_id();
        self.send(Frame::request(id, request)).await;
        self.response_to(id).await
    }

    /// Sends a frame.
    pub async fn send(&mut self, frame: Frame) {
        bounded("send frame", self.framed.send(frame))
            .await
            .expect("frame sent");
    }

    /// Writes raw bytes to the socket.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stream = self.framed.get_mut();
        bounded("send raw bytes", stream.write_all(bytes))
            .await
            .expect("bytes sent");
        bounded("flush", stream.flush()).await.expect("flushed");
    }

    /// Encodes a frame to bytes, length prefix included.
    pub fn encode(frame: &Frame) -> BytesMut {
        let mut buf = BytesMut::new();
        frame.encode(&mut buf, usize::MAX).expect("encodes");
        buf
    }

    /// Waits for the response with `correlation_id`, keeping pushes and other responses.
    pub async fn response_to(&mut self, correlation_id: u32) -> Response {
        if let Some(i) = self
            .responses
            .iter()
            .position(|f| f.correlation_id == correlation_id)
        {
            let frame = self.responses.remove(i).expect("present");
            return into_response(frame);
        }
        loop {
            let frame = self
                .next_frame()
                .await
                .unwrap_or_else(|| panic!("connection closed awaiting response {correlation_id}"))
                .unwrap_or_else(|e| panic!("bad frame awaiting response {correlation_id}: {e}"));
            match frame.body {
                Body::Push(push) => self.pushes.push_back(push),
                Body::Response(_) if frame.correlation_id == correlation_id => {
                    return into_response(frame)
                }
                _ => self.responses.push_back(frame),
            }
        }
    }

    /// The next push (kept earlier, or read now).
    pub async fn next_push(&mut self) -> Push {
        if let Some(push) = self.pushes.pop_front() {
            return push;
        }
        loop {
            let frame = self
                .next_frame()
                .await
                .expect("connection closed awaiting a push")
                .expect("good frame");
            match frame.body {
                Body::Push(push) => return push,
                _ => self.responses.push_back(frame),
            }
        }
    }

    /// The next push, reading for at most `wait`; `None` if none came.
    pub async fn try_next_push(&mut self, wait: Duration) -> Option<Push> {
        if let Some(push) = self.pushes.pop_front() {
            return Some(push);
        }
        tokio::time::timeout(wait, self.next_push()).await.ok()
    }

    /// Pushes read but not yet taken.
    pub fn buffered_pushes(&mut self) -> Vec<Push> {
        self.pushes.drain(..).collect()
    }

    /// The next frame off the wire, bounded by [`STEP`].
    pub async fn next_frame(&mut self) -> Option<Result<Frame, FrameError>> {
        bounded("next frame", self.framed.next()).await
    }

    /// Reads until the coordinator closes the connection, failing if it does not within
    /// [`STEP`]. Returns the frames read meanwhile.
    pub async fn expect_closed(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            match self.next_frame().await {
                None | Some(Err(_)) => return frames,
                Some(Ok(frame)) => frames.push(frame),
            }
        }
    }

    /// The socket, for tests that need to misbehave.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        self.framed.get_mut()
    }

    /// True if the coordinator closed the connection (reads EOF or an error), reading
    /// raw bytes for at most `wait`.
    pub async fn closed_within(&mut self, wait: Duration) -> bool {
        let stream = self.framed.get_mut();
        let mut buf = [0u8; 4096];
        tokio::time::timeout(wait, async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .is_ok()
    }
}

fn into_response(frame: Frame) -> Response {
    match frame.body {
        Body::Response(r) => r,
        other => panic!("expected a response, got {other:?}"),
    }
}

/// A join request for `group` subscribing to `topic` with `partitions` partitions.
pub fn join(group: &str, topic: &str, partitions: u32, session_ms: u32) -> JoinRequest {
    JoinRequest {
        placement: None,
        group: group.into(),
        member_id: None,
        instance_id: None,
        client_id: "rollcall-tests".into(),
        join_token: rand::random::<u64>() | 1,
        subscription: vec![TopicSubscription {
            topic: topic.into(),
            partitions,
        }],
        session_timeout_ms: session_ms,
        progress_timeout_ms: 60_000,
        rebalance_timeout_ms: session_ms.max(1_000),
        lease_timeout_ms: 0,
        detector: String::new(),
    }
}

/// Fetches `GET path` from `addr` over plain HTTP/1.1 and returns the status line and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    bounded("http get", async {
        let mut stream = TcpStream::connect(addr).await.expect("connects");
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("request sent");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("response read");
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.lines().next().unwrap_or_default().to_owned();
        (status, body.to_owned())
    })
    .await
}

/// The value of the sample `name` (with its labels exactly as rendered, e.g.
/// `rollcall_requests_total{api="heartbeat"}`) in a Prometheus text exposition.
pub fn sample(exposition: &str, name: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let value = rest.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// A member driven by hand: heartbeats when told, follows pushes, and acknowledges every
/// revocation with its next heartbeat.
#[derive(Debug)]
pub struct Member {
    /// Its connection.
    pub client: RawClient,
    /// Its group.
    pub group: String,
    /// Its member id.
    pub id: String,
    /// The generation of its latest assignment.
    pub generation: u32,
    /// What it owns.
    pub owned: Vec<TopicPartitions>,
    /// What it was asked to release and will acknowledge next.
    pub revoking: Vec<TopicPartitions>,
    /// Set once it is expelled.
    pub expelled: Option<ExpelledPush>,
    sequence: u64,
}

impl Member {
    /// Connects, handshakes and joins.
    pub async fn join(addr: SocketAddr, request: JoinRequest) -> Self {
        Self::join_on(RawClient::connected(addr).await, request).await
    }

    /// Joins on a connection already handshaken (and authenticated, where it must be).
    pub async fn join_on(mut client: RawClient, request: JoinRequest) -> Self {
        let group = request.group.clone();
        let response = client.request(Request::Join(request)).await;
        let Response::Join(joined) = response else {
            panic!("join refused: {response:?}");
        };
        let mut member = Self {
            client,
            group,
            id: joined.member_id,
            generation: joined.generation,
            owned: Vec::new(),
            revoking: Vec::new(),
            expelled: None,
            sequence: 0,
        };
        for push in member.client.buffered_pushes() {
            member.apply(push);
        }
        member
    }

    /// Sends a heartbeat (acknowledging pending revocations) and returns the answer.
    pub async fn heartbeat(&mut self) -> Response {
        self.sequence += 1;
        let acked = std::mem::take(&mut self.revoking);
        for released in &acked {
            for tp in &mut self.owned {
                if tp.topic == released.topic {
                    tp.partitions.retain(|p| !released.partitions.contains(p));
                }
            }
        }
        let response = self
            .client
            .request(Request::Heartbeat(HeartbeatRequest {
                loads: Vec::new(),
                group: self.group.clone().into(),
                member_id: self.id.clone().into(),
                generation: self.generation,
                sequence: self.sequence,
                progress: self.sequence,
                acked_revocations: acked,
            }))
            .await;
        for push in self.client.buffered_pushes() {
            self.apply(push);
        }
        response
    }

    /// Heartbeats, then follows whatever pushes arrive within `wait`.
    pub async fn tick(&mut self, wait: Duration) {
        let response = self.heartbeat().await;
        if let Response::Heartbeat(hb) = response {
            self.generation = self.generation.max(hb.generation);
        }
        while let Some(push) = self.client.try_next_push(wait).await {
            self.apply(push);
        }
    }

    /// Follows one push.
    pub fn apply(&mut self, push: Push) {
        match push {
            Push::Assignment(a) if a.member_id == self.id => {
                self.generation = a.generation;
                self.owned = a.partitions;
            }
            Push::Revoke(r) if r.member_id == self.id => {
                self.generation = self.generation.max(r.generation);
                self.revoking = r.partitions;
            }
            Push::Expelled(e) if e.member_id == self.id => self.expelled = Some(e),
            _ => {}
        }
    }

    /// How many partitions it owns.
    pub fn owned_count(&self) -> usize {
        self.owned.iter().map(|tp| tp.partitions.len()).sum()
    }
}

/// Starts `bin serve` (the `rollcall` command line) on a free port with its store in
/// `dir`, and returns the process and the address it listens on (read from its log).
pub async fn serve_process(
    bin: &str,
    dir: &std::path::Path,
) -> (tokio::process::Child, SocketAddr) {
    let listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let started = bounded(
        "serve start",
        spawn_serve(bin, dir, listen, &["--shards", "2"], None),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    (started.child, started.addr)
}

/// The line a [`ServeProcess`]'s log gets before each start of the process.
pub const SERVE_STARTING: &str = "rollcall-tests: serve starting";

/// Lines of a coordinator's log kept for failure messages (the most recent ones).
const LOG_LINES_KEPT: usize = 4_000;

/// A process started by [`spawn_serve`].
struct Started {
    child: tokio::process::Child,
    addr: SocketAddr,
}

/// Spawns `bin serve --listen listen ... args` with its store in `dir` and waits until it
/// logs its address. Every line of its log is appended to `log` (when given) and the log
/// is drained for as long as the process lives. An error if it exits first.
async fn spawn_serve(
    bin: &str,
    dir: &std::path::Path,
    listen: SocketAddr,
    args: &[&str],
    log: Option<Arc<Mutex<VecDeque<String>>>>,
) -> Result<Started, String> {
    use tokio::io::AsyncBufReadExt;
    let listen = listen.to_string();
    let mut child = tokio::process::Command::new(bin)
        .args([
            "serve",
            "--listen",
            &listen,
            "--metrics-addr",
            "off",
            "--shutdown-timeout",
            "5s",
            "--data-dir",
            dir.to_str().expect("utf-8 path"),
        ])
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawns");
    let stderr = child.stderr.take().expect("stderr piped");
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let keep = |log: &Option<Arc<Mutex<VecDeque<String>>>>, line: &str| {
        if let Some(log) = log {
            let mut log = log.lock();
            if log.len() == LOG_LINES_KEPT {
                log.pop_front();
            }
            log.push_back(line.to_owned());
        }
    };
    let mut seen = Vec::new();
    let addr = loop {
        let Some(line) = lines.next_line().await.expect("read log") else {
            let status = child.wait().await.expect("wait");
            return Err(format!(
                "serve {listen} exited ({status}) before listening: {}",
                seen.join(" | ")
            ));
        };
        keep(&log, &line);
        if let Some(rest) = line.split("listen=").nth(1) {
            let addr = rest.split_whitespace().next().expect("address");
            break addr.parse().expect("socket address");
        }
        seen.push(line);
    };
    // Keep draining the log so the process never blocks on a full pipe.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            keep(&log, &line);
        }
    });
    Ok(Started { child, addr })
}

/// A `rollcall serve` process under a test's control: it can be paused (SIGSTOP) and
/// resumed (SIGCONT), killed (SIGKILL) or terminated (SIGTERM), and restarted on the same
/// data directory, port and options. Its log is kept for failure messages.
#[derive(Debug)]
pub struct ServeProcess {
    bin: String,
    dir: std::path::PathBuf,
    args: Vec<String>,
    addr: SocketAddr,
    child: Option<tokio::process::Child>,
    log: Arc<Mutex<VecDeque<String>>>,
}

impl ServeProcess {
    /// Starts `bin serve` on a free port of 127.0.0.1 with its store in `dir` and the
    /// extra options `args` (e.g. `["--shards", "4"]`).
    pub async fn start(bin: &str, dir: &std::path::Path, args: &[&str]) -> Self {
        let mut process = Self {
            bin: bin.to_owned(),
            dir: dir.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            child: None,
            log: Arc::new(Mutex::new(VecDeque::new())),
        };
        process.spawn().await;
        process
    }

    async fn spawn(&mut self) {
        assert!(self.child.is_none(), "serve is already running");
        // Where one process's log ends and the next one's begins.
        self.log.lock().push_back(SERVE_STARTING.to_owned());
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        // A restart binds the port the previous process had; give the kernel a few tries.
        let mut tries = 0;
        let started = bounded("serve start", async {
            loop {
                let log = Some(self.log.clone());
                match spawn_serve(&self.bin, &self.dir, self.addr, &args, log).await {
                    Ok(started) => return started,
                    Err(e) if tries < 20 => {
                        tries += 1;
                        eprintln!("retrying serve start: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .await;
        self.addr = started.addr;
        self.child = Some(started.child);
    }

    /// The address it listens on (the same across restarts).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The running process's id.
    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .and_then(tokio::process::Child::id)
            .expect("serve is running")
    }

    /// Sends `signal` (a name `kill` knows: STOP, CONT, TERM, KILL) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {pid} failed: {status}");
    }

    /// Freezes the process (SIGSTOP): its sockets stay open, nothing is read or answered.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws a frozen process (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Kills the process (SIGKILL) and waits for it to exit.
    pub async fn kill(&mut self) -> std::process::ExitStatus {
        self.signal("KILL");
        self.reap().await
    }

    /// Asks the process to shut down gracefully (SIGTERM) and waits for it to exit.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        self.reap().await
    }

    async fn reap(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("serve is running");
        bounded("serve exits", child.wait()).await.expect("wait")
    }

    /// How the process exited, if it has (without waiting); `None` while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let status = child.try_wait().expect("try_wait")?;
        self.child = None;
        Some(status)
    }

    /// Starts the process again (after [`Self::kill`] or [`Self::terminate`]) on the same
    /// data directory, port and options.
    pub async fn restart(&mut self) {
        self.spawn().await;
    }

    /// The log lines kept so far that contain any of `patterns`.
    pub fn log_lines(&self, patterns: &[&str]) -> Vec<String> {
        self.log
            .lock()
            .iter()
            .filter(|line| patterns.iter().any(|p| line.contains(p)))
            .cloned()
            .collect()
    }
}
