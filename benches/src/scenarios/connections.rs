//! `connections`: the coordinator's memory per idle connection. Connections are opened
//! to a coordinator with none, each handshaken (ApiVersions) and then left silent; the
//! coordinator's resident memory before and after gives what each one costs it, and its
//! memory once they are closed again whether that is returned. Target: at most 8 KiB
//! per idle connection. Needs a coordinator process of its own: `--spawn`, or `--addr`
//! with `--pid`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Args;
use futures_util::StreamExt;
use rollcall_client::raw;
use serde::Serialize;
use tokio::net::TcpStream;

use crate::common::{Check, CommonArgs};
use crate::harness::{Outcome, RunOptions, Scenario, MARGIN};
use crate::procfs;
use crate::stats::{fmt_bytes, fmt_count, kv};
use crate::target::Target;

/// The target: coordinator memory per idle connection, bytes.
const TARGET_BYTES: f64 = 8_192.0;

/// Open files each process keeps for itself besides the connections (its listener,
/// store, runtime and standard streams), with room to spare.
const FILE_HEADROOM: usize = 1_000;

/// Connections being opened and handshaken at once.
const CONNECT_CONCURRENCY: usize = 256;

/// Time one connection is given to connect and handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the coordinator is left alone after start-up before its memory is read.
const START_SETTLE: Duration = Duration::from_secs(1);

/// How long the coordinator is given to notice the closes before its memory is read.
const CLOSE_SETTLE: Duration = Duration::from_secs(2);

/// The software name the connections give in their handshake.
const CLIENT_SOFTWARE: &str = "rollcall-bench-connections";

#[derive(Debug, Clone, Args)]
pub(crate) struct ConnectionsArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Connections opened and held idle. Each one is an open file in this process and
    /// in the coordinator's, so at most the open-file limit (`ulimit -n`) less 1,000
    /// kept for each process's other files: 19,000 under a limit of 20,000.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) conns: usize,
    /// How long the connections stay open and silent before the coordinator's memory is
    /// read. Must stay below the coordinator's --idle-timeout (default 1 h), after which
    /// it closes them.
    #[arg(long, value_parser = crate::common::duration, default_value = "10s")]
    pub(crate) idle: Duration,
}

#[derive(Debug, Serialize)]
pub(crate) struct ConnectionsFigures {
    /// `--conns`.
    pub(crate) connections: usize,
    /// Connections connected and handshaken.
    pub(crate) connections_opened: usize,
    pub(crate) connections_failed: usize,
    /// Connections still open when the memory was read after the idle period.
    pub(crate) connections_open_after_idle: usize,
    /// Bytes the coordinator sent on the connections after their handshakes (none
    /// expected).
    pub(crate) bytes_received_while_idle: u64,
    /// From the first connect to the last handshake answered.
    pub(crate) connect_ms: f64,
    /// `--idle`.
    pub(crate) idle_ms: u64,
    /// After start-up, settled for a second, with no connection.
    pub(crate) rss_before_bytes: Option<u64>,
    /// Right after the last handshake.
    pub(crate) rss_connected_bytes: Option<u64>,
    /// After the idle period, every connection still open.
    pub(crate) rss_idle_bytes: Option<u64>,
    /// VmHWM after the idle period.
    pub(crate) peak_rss_bytes: Option<u64>,
    /// A short while after every connection was closed.
    pub(crate) rss_after_close_bytes: Option<u64>,
    /// (idle − before) / connections open after the idle period.
    pub(crate) memory_per_conn_bytes: Option<f64>,
    /// Of the memory the connections added, the part given back once they closed
    /// (1.0: all of it).
    pub(crate) returned_after_close: Option<f64>,
}

impl ConnectionsArgs {
    /// Options of the other scenarios given here, where they mean nothing.
    fn inapplicable(&self) -> Vec<&'static str> {
        let c = &self.common;
        [
            ("--members", c.members.is_some()),
            ("--groups", c.groups.is_some()),
            ("--partitions", c.partitions.is_some()),
            ("--duration", c.duration.is_some()),
            ("--session-timeout", c.session_timeout.is_some()),
            ("--lease-timeout", c.lease_timeout.is_some()),
            ("--detector", c.detector.is_some()),
            ("--interval", c.interval.is_some()),
            ("--members-per-conn", c.members_per_conn.is_some()),
            ("--batch-heartbeats", c.batch_heartbeats),
            // It keeps only the sockets of handshaken connections: plain TCP.
            ("--tls", c.tls),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }

    fn say(&self, begin: Instant, line: &str) {
        if !self.common.quiet {
            eprintln!("[{:6.1}s] {line}", begin.elapsed().as_secs_f64());
        }
    }
}

/// The most connections that fit the open-file limit of process `pid`, if it has one.
pub(crate) fn connection_cap(pid: u32) -> Option<usize> {
    let limit = usize::try_from(procfs::open_files_limit(pid)?).ok()?;
    Some(limit.saturating_sub(FILE_HEADROOM))
}

/// Connections opened, and what went wrong with the others.
#[derive(Debug, Default)]
pub(crate) struct Opened {
    pub(crate) streams: Vec<TcpStream>,
    pub(crate) failed: usize,
    pub(crate) first_error: Option<String>,
    pub(crate) timed_out: bool,
}

/// Opens `n` connections with `connect`, `concurrency` at once, until `deadline`.
/// `progress` is called once a second with the number opened and failed so far.
pub(crate) async fn open_each<F, Fut>(
    n: usize,
    concurrency: usize,
    deadline: Instant,
    connect: F,
    mut progress: impl FnMut(usize, usize),
) -> Opened
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<TcpStream, String>>,
{
    let mut opened = Opened {
        streams: Vec::with_capacity(n),
        ..Opened::default()
    };
    let mut attempts = futures_util::stream::iter(0..n)
        .map(|_| connect())
        .buffer_unordered(concurrency);
    let give_up = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline));
    tokio::pin!(give_up);
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    ticks.tick().await;
    // Bounded: one turn per attempt, plus one a second until the deadline.
    loop {
        tokio::select! {
            next = attempts.next() => match next {
                None => break,
                Some(Ok(stream)) => opened.streams.push(stream),
                Some(Err(e)) => {
                    opened.failed += 1;
                    opened.first_error.get_or_insert(e);
                }
            },
            _ = ticks.tick() => progress(opened.streams.len(), opened.failed),
            () = &mut give_up => {
                opened.timed_out = true;
                break;
            }
        }
    }
    opened
}

/// Connects and handshakes `n` connections to `addr`, [`CONNECT_CONCURRENCY`] at once,
/// until `deadline`; then keeps only their sockets (the framing's buffers are the
/// generator's memory, not the coordinator's, and nothing more is read or sent).
/// `progress` is called once a second with the number opened and failed so far.
async fn open(
    addr: SocketAddr,
    n: usize,
    deadline: Instant,
    progress: impl FnMut(usize, usize),
) -> Opened {
    let connect = || async move {
        let (transport, _versions) = raw::connect(addr, CLIENT_SOFTWARE, CONNECT_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        transport
            .into_inner()
            .into_plain()
            .ok_or_else(|| "not a plain TCP connection".to_owned())
    };
    open_each(n, CONNECT_CONCURRENCY, deadline, connect, progress).await
}

/// Drops the connections the coordinator closed (or reset); returns the bytes it sent
/// on the others, which are read and discarded.
fn sweep(streams: &mut Vec<TcpStream>) -> u64 {
    let mut received = 0;
    let mut buf = [0u8; 256];
    streams.retain(|s| {
        // Bounded: a connection that keeps sending is looked at again next sweep.
        for _ in 0..16 {
            match s.try_read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => received += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
        true
    });
    received
}

impl Scenario for ConnectionsArgs {
    const NAME: &'static str = "connections";
    type Figures = ConnectionsFigures;

    fn options(&self) -> &dyn RunOptions {
        &self.common
    }

    fn extra_time(&self) -> Duration {
        // Start-up (30 s at most), the settles, and the connections' closing.
        Duration::from_secs(30) + START_SETTLE + CLOSE_SETTLE + Duration::from_secs(10)
    }

    fn hard_cap(&self) -> Duration {
        self.common.setup_timeout + self.idle + self.extra_time() + MARGIN
    }

    async fn run(&self) -> Result<Outcome<ConnectionsFigures>, String> {
        let common = &self.common;
        let unused = self.inapplicable();
        if !unused.is_empty() {
            return Err(format!(
                "{} do not apply to the connections scenario (it opens --conns connections and joins nothing)",
                unused.join(", ")
            ));
        }
        if !common.spawn && common.pid.is_none() {
            return Err(
                "the connections scenario measures the coordinator's own memory: use --spawn, or --addr with --pid"
                    .to_owned(),
            );
        }
        let conns = self.conns;
        if conns == 0 || self.idle.is_zero() {
            return Err("--conns and --idle must be above zero".to_owned());
        }
        if let Some(cap) = connection_cap(std::process::id()) {
            if conns > cap {
                return Err(format!(
                    "--conns {conns} does not fit this process's open-file limit: at most {cap}"
                ));
            }
        }
        let mut opts = common.target_options()?;
        opts.max_connections = opts.max_connections.max(conns + FILE_HEADROOM);
        let target = Target::start(&opts).await?;
        let info = target.info(&opts);
        let result = self.measure(&target).await;
        target.stop().await;
        let (f, notes) = result?;
        Ok(report(f, info, notes))
    }
}

impl ConnectionsArgs {
    /// Everything between the coordinator's start and its stop.
    async fn measure(&self, target: &Target) -> Result<(ConnectionsFigures, Vec<String>), String> {
        let conns = self.conns;
        let mut notes = Vec::new();
        if let Some(cap) = target.pid().and_then(connection_cap) {
            if conns > cap {
                return Err(format!(
                    "--conns {conns} does not fit the coordinator's open-file limit: at most {cap}"
                ));
            }
        }
        let begin = Instant::now();
        let rss = |t: &Target| t.rss().map_or("?".to_owned(), fmt_bytes);

        self.say(begin, "settling after start-up");
        tokio::time::sleep(START_SETTLE).await;
        let rss_before = target.rss().filter(|b| *b > 0);
        if rss_before.is_none() {
            return Err("cannot read the coordinator's memory from /proc".to_owned());
        }

        let t0 = Instant::now();
        let deadline = t0 + self.common.setup_timeout;
        let mut opened = open(target.addr, conns, deadline, |ok, failed| {
            self.say(
                begin,
                &format!(
                    "connecting: conns {}/{} failed {} coordinator RSS {}",
                    fmt_count(ok as f64),
                    fmt_count(conns as f64),
                    failed,
                    rss(target)
                ),
            );
        })
        .await;
        let connect_ms = t0.elapsed().as_secs_f64() * 1000.0;
        let rss_connected = target.rss();
        let connections_opened = opened.streams.len();
        if opened.timed_out {
            notes.push(format!(
                "the connections were not all open within --setup-timeout ({} s)",
                self.common.setup_timeout.as_secs()
            ));
        }
        if let Some(e) = &opened.first_error {
            notes.push(format!(
                "{} connections failed; the first: {e}",
                opened.failed
            ));
        }

        // Idle: nothing sent; once a second, closed connections are counted out.
        let idle_end = Instant::now() + self.idle;
        let mut received = 0;
        // Bounded: one turn a second of the idle period.
        loop {
            let left = idle_end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(Duration::from_secs(1))).await;
            received += sweep(&mut opened.streams);
            self.say(
                begin,
                &format!(
                    "idle: conns open {}/{} coordinator RSS {}",
                    fmt_count(opened.streams.len() as f64),
                    fmt_count(conns as f64),
                    rss(target)
                ),
            );
        }
        received += sweep(&mut opened.streams);
        let open_after_idle = opened.streams.len();
        let rss_idle = target.rss();
        let peak = target.peak_rss();
        if open_after_idle < connections_opened {
            notes.push(format!(
                "{} connections were closed during the idle period; the figure per connection counts those still open",
                connections_opened - open_after_idle
            ));
        }
        if received > 0 {
            notes.push(format!(
                "the coordinator sent {received} bytes on connections that sent nothing after their handshake"
            ));
        }

        self.say(begin, "closing every connection");
        drop(opened.streams);
        let close_end = Instant::now() + CLOSE_SETTLE;
        // Bounded: one turn a second of the settle.
        loop {
            let left = close_end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(Duration::from_secs(1))).await;
            self.say(begin, &format!("closed: coordinator RSS {}", rss(target)));
        }
        let rss_after_close = target.rss();

        let memory_per_conn_bytes = match (rss_before, rss_idle) {
            (Some(b), Some(a)) if open_after_idle > 0 => {
                Some((a as f64 - b as f64) / open_after_idle as f64)
            }
            _ => None,
        };
        let returned_after_close = match (rss_before, rss_idle, rss_after_close) {
            (Some(b), Some(i), Some(c)) if i > b => Some((i as f64 - c as f64) / (i - b) as f64),
            _ => None,
        };
        Ok((
            ConnectionsFigures {
                connections: conns,
                connections_opened,
                connections_failed: opened.failed,
                connections_open_after_idle: open_after_idle,
                bytes_received_while_idle: received,
                connect_ms,
                idle_ms: u64::try_from(self.idle.as_millis()).unwrap_or(u64::MAX),
                rss_before_bytes: rss_before,
                rss_connected_bytes: rss_connected,
                rss_idle_bytes: rss_idle,
                peak_rss_bytes: peak,
                rss_after_close_bytes: rss_after_close,
                memory_per_conn_bytes,
                returned_after_close,
            },
            notes,
        ))
    }
}

/// The report of a run.
fn report(
    f: ConnectionsFigures,
    info: crate::target::TargetInfo,
    mut notes: Vec<String>,
) -> Outcome<ConnectionsFigures> {
    let bytes = |v: Option<u64>| v.map_or("?".to_owned(), fmt_bytes);
    let per_conn = f
        .memory_per_conn_bytes
        .map_or("?".to_owned(), |v| format!("{} B", fmt_count(v)));
    let text = kv(&[
        (
            "layout",
            format!(
                "{} connections, {} handshaking at once, each sending one ApiVersions and then nothing for {} ms",
                fmt_count(f.connections as f64),
                CONNECT_CONCURRENCY.min(f.connections),
                f.idle_ms
            ),
        ),
        (
            "connections",
            format!(
                "{} opened in {:.0} ms, {} failed; {} still open after the idle period",
                fmt_count(f.connections_opened as f64),
                f.connect_ms,
                f.connections_failed,
                fmt_count(f.connections_open_after_idle as f64)
            ),
        ),
        (
            "RSS before",
            format!(
                "{} (after start-up, {} s settled, no connection)",
                bytes(f.rss_before_bytes),
                START_SETTLE.as_secs()
            ),
        ),
        (
            "RSS connected",
            format!("{} (right after the last handshake)", bytes(f.rss_connected_bytes)),
        ),
        (
            "RSS idle",
            format!(
                "{} (after {} ms idle); peak (VmHWM) {}",
                bytes(f.rss_idle_bytes),
                f.idle_ms,
                bytes(f.peak_rss_bytes)
            ),
        ),
        (
            "per idle connection",
            format!("{per_conn} ((RSS idle - RSS before) / connections open)"),
        ),
        (
            "RSS after closing",
            format!(
                "{} ({} s after every connection closed){}",
                bytes(f.rss_after_close_bytes),
                CLOSE_SETTLE.as_secs(),
                f.returned_after_close.map_or(String::new(), |r| format!(
                    "; {:.0} % of what the connections added returned",
                    r * 100.0
                ))
            ),
        ),
    ]);
    let checks = vec![
        Check::new(
            "memory per idle connection",
            "<= 8 KiB (8,192 B)",
            per_conn,
            f.memory_per_conn_bytes.is_some_and(|v| v <= TARGET_BYTES),
        ),
        Check::new(
            "connections held through the idle period",
            fmt_count(f.connections as f64),
            fmt_count(f.connections_open_after_idle as f64),
            f.connections_open_after_idle == f.connections,
        ),
    ];
    notes.push("RSS is the process's memory: the kernel's socket buffers are not in it".to_owned());
    Outcome {
        coordinator: Some(info),
        generator: None,
        figures: f,
        text,
        checks,
        notes,
    }
}
