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
//! per second. After `--warmup`, the `--duration` window is measured as `steady`
//! measures it, by the same code: the beats intended in it and their answers (counted
//! in the load generator's `Shared`, drained for up to 5 s after the window), the
//! server's CPU time and this process's (`CpuMark`); the progress lines are the
//! harness's.
//!
//! Here, the options, the figures and the run; the echo server in `server.rs`, its
//! process in `process.rs`, the generator in `generator.rs`, the report in `report.rs`.

mod generator;
mod process;
mod report;
mod server;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rollcall_protocol::{Request, DEFAULT_MAX_FRAME_SIZE, LENGTH_PREFIX_SIZE, MAX_BEATS};
use serde::Serialize;

use crate::common::{drain_window, CpuMark, Progress};
use crate::driver::{Counters, Load, Shared};
use crate::harness::{Outcome, RunOptions, Scenario};
use crate::procfs;
use crate::scenarios::connections::connection_cap;
use crate::stats::Percentiles;
use generator::{frame_bytes, open, request, Pace};
use process::ServerProcess;
pub(crate) use server::serve;
use server::{canned_answer, canned_batch_answer};

/// Time the connections' tasks are given to end once the window is over.
const DRIVER_STOP: Duration = Duration::from_secs(10);

/// Time the answers to the beats of the window are waited for once it is over (as
/// `steady` waits).
const DRAIN: Duration = Duration::from_secs(5);

/// Room made in a read buffer before each read: far more than a heartbeat frame (a
/// connection that has seen larger frames, Heartbeats of many beats, makes this much
/// more than the largest).
const READ_ROOM: usize = 4096;

/// Members per group, as `steady` lays them out by default (member `i` in group
/// `g{i % groups}`, `members / 100` groups): group names of the same length. The
/// members are the connections times `--beats-per-frame`.
const MEMBERS_PER_GROUP: usize = 100;

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

impl RunOptions for FloorArgs {
    fn setup_timeout(&self) -> Duration {
        self.setup_timeout
    }

    fn duration(&self) -> Option<Duration> {
        Some(self.duration)
    }

    fn json(&self) -> Option<&PathBuf> {
        self.json.as_ref()
    }
}

impl FloorArgs {
    /// The options that make no sense, or that this process or the protocol cannot
    /// hold, refused before anything starts.
    fn check(&self) -> Result<(), String> {
        if self.conns == 0 {
            return Err("--conns must be at least 1".to_owned());
        }
        if !(1..=MAX_BEATS).contains(&self.beats_per_frame) {
            return Err(format!(
                "--beats-per-frame {} is out of range: from 1 to {MAX_BEATS}, the most beats the protocol takes in one Heartbeats frame",
                self.beats_per_frame
            ));
        }
        let rate_ok = self.rate.is_finite() && self.rate > 0.0;
        if !self.closed_loop && !rate_ok {
            return Err("--rate must be above 0".to_owned());
        }
        if self.duration.is_zero() {
            return Err("--duration must be above 0".to_owned());
        }
        if self.server_threads == Some(0) {
            return Err("--server-threads must be at least 1".to_owned());
        }
        if let Some(cap) = connection_cap(std::process::id()) {
            if self.conns > cap {
                return Err(format!(
                    "--conns {} does not fit this process's open-file limit: at most {cap}",
                    self.conns
                ));
            }
        }
        Ok(())
    }

    /// Between two frames of a connection in open loop: `--rate` beats per second over
    /// every connection, `--beats-per-frame` in each frame.
    fn frame_period(&self) -> Duration {
        Duration::from_secs_f64(self.conns as f64 * self.beats_per_frame as f64 / self.rate)
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

/// The frames a run sends and answers: each connection's request, and the longest
/// request and its answer in bytes, length prefixes included.
struct Frames {
    groups: usize,
    requests: Vec<Request>,
    request_bytes: usize,
    response_bytes: usize,
}

impl Frames {
    fn new(args: &FloorArgs) -> Result<Self, String> {
        let beats = args.beats_per_frame;
        let members = args.conns.saturating_mul(beats);
        let groups = (members / MEMBERS_PER_GROUP).max(1);
        let start_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let requests: Vec<Request> = (0..args.conns)
            .map(|i| request(i, beats, groups, start_ms))
            .collect();
        let request_bytes = requests.iter().map(frame_bytes).max().unwrap_or_default();
        let response_bytes = if beats == 1 {
            canned_answer()?.len()
        } else {
            canned_batch_answer(beats)?.len()
        };
        let largest = request_bytes.max(response_bytes);
        if largest > LENGTH_PREFIX_SIZE + DEFAULT_MAX_FRAME_SIZE {
            return Err(format!(
                "--beats-per-frame {beats} makes frames of {largest} bytes, above the protocol's default maximum of {} (length prefix excluded): fewer beats per frame",
                DEFAULT_MAX_FRAME_SIZE
            ));
        }
        Ok(Self {
            groups,
            requests,
            request_bytes,
            response_bytes,
        })
    }
}

/// What the window measured, before it is turned into figures.
#[derive(Debug)]
struct Window {
    /// From the server's start to the last connection opened.
    setup: Duration,
    wall: f64,
    server_cpu: f64,
    client_cpu: f64,
    server_peak_rss: Option<u64>,
}

impl Scenario for FloorArgs {
    const NAME: &'static str = "floor";
    type Figures = FloorFigures;

    fn options(&self) -> &dyn RunOptions {
        self
    }

    fn extra_time(&self) -> Duration {
        self.warmup
    }

    async fn run(&self) -> Result<Outcome<FloorFigures>, String> {
        self.check()?;
        let frames = Frames::new(self)?;
        let load = if self.closed_loop {
            Load::ClosedLoop
        } else {
            Load::Periodic {
                period: self.frame_period(),
            }
        };
        let shared = Arc::new(Shared::heartbeats_only(load, self.beats_per_frame > 1));
        let progress = Progress::start(shared.clone(), None, self.quiet);
        progress.phase("starting the server");
        let begin = Instant::now();
        let server = match ServerProcess::spawn(self.server_threads, self.hard_cap()).await {
            Ok(server) => server,
            Err(e) => {
                progress.stop();
                return Err(e);
            }
        };
        let measured = measure(self, &server, &shared, &progress, frames.requests, begin).await;
        progress.stop();
        shared.stop.cancel();
        server.stop().await;
        let window = measured?;
        let f = figures(
            self,
            &shared,
            &window,
            frames.groups,
            frames.request_bytes,
            frames.response_bytes,
        );
        Ok(Outcome {
            coordinator: None,
            generator: Some(report::generator(&f)),
            text: report::render(&f),
            checks: report::checks(&f),
            notes: report::notes(&f),
            figures: f,
        })
    }
}

/// Everything between the server's start and its stop.
async fn measure(
    args: &FloorArgs,
    server: &ServerProcess,
    shared: &Arc<Shared>,
    progress: &Progress,
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
    if !args.quiet {
        eprintln!("server pid {pid} on {}", server.addr);
    }
    progress.phase("connecting");
    let opened = open(server.addr, args.conns, begin + args.setup_timeout, shared).await;
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

    let start = Instant::now() + Duration::from_millis(10);
    let n = args.conns as f64;
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (stream, request)) in opened.streams.into_iter().zip(requests).enumerate() {
        let pace = if args.closed_loop {
            Pace::ClosedLoop
        } else {
            let period = args.frame_period();
            Pace::Periodic {
                first: start + period.mul_f64(i as f64 / n),
                period,
            }
        };
        tasks.spawn(generator::drive(stream, i, request, pace, shared.clone()));
    }
    progress.phase("warming up");
    let sleep_until = |at: Instant| tokio::time::sleep_until(tokio::time::Instant::from_std(at));
    sleep_until(start + args.warmup).await;
    // The window, as `steady` measures it.
    let from = Instant::now();
    let until = from + args.duration;
    shared.set_window(from, until);
    let mark = CpuMark::take(server);
    progress.phase("measuring");
    sleep_until(until).await;
    let (wall, server_cpu, client_cpu) = mark.since(server);
    let server_peak_rss = procfs::peak_rss_bytes(pid);
    progress.phase("draining");
    drain_window(shared, DRAIN).await;
    shared.stop.cancel();
    let _ = tokio::time::timeout(DRIVER_STOP, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    let cpu = |cpu: Option<f64>, whose: &str, pid: u32| {
        cpu.map(|s| s.max(0.0))
            .ok_or_else(|| format!("cannot read the {whose}'s CPU time from /proc/{pid}/stat"))
    };
    Ok(Window {
        setup,
        wall,
        server_cpu: cpu(server_cpu, "server", pid)?,
        client_cpu: cpu(client_cpu, "generator", std::process::id())?,
        server_peak_rss,
    })
}

/// The figures of a run from what its connections counted and its window measured.
fn figures(
    args: &FloorArgs,
    shared: &Shared,
    window: &Window,
    groups: usize,
    request_frame_bytes: usize,
    response_frame_bytes: usize,
) -> FloorFigures {
    let c = &shared.counters;
    let wall = window.wall;
    let server_cpu = window.server_cpu;
    let answered = Counters::get(&c.hb_window_answered);
    let sent = Counters::get(&c.hb_window_sent);
    let late = Counters::get(&c.hb_window_late);
    let hb_per_cpu = (server_cpu > 0.0).then(|| answered as f64 / server_cpu);
    let period = (!args.closed_loop).then(|| args.frame_period());
    FloorFigures {
        conns: args.conns,
        beats_per_frame: args.beats_per_frame,
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
        handled_frames_per_s: answered as f64 / args.beats_per_frame as f64 / wall,
        late_sends_pct: if sent > 0 {
            100.0 * late as f64 / sent as f64
        } else {
            0.0
        },
        rtt_from_intended: Percentiles::of(&shared.hb_intended.merged()),
        rtt_from_sent: Percentiles::of(&shared.hb_service.merged()),
        server_cpu_s: server_cpu,
        server_cores: server_cpu / wall,
        hb_per_cpu_s: hb_per_cpu,
        cpu_us_per_hb: hb_per_cpu.map(|r| 1e6 / r),
        client_cpu_s: window.client_cpu,
        client_cores: window.client_cpu / wall,
        server_peak_rss_bytes: window.server_peak_rss,
        heartbeat_errors: Counters::get(&c.hb_err),
        connections_lost: Counters::get(&c.conns_lost),
    }
}
