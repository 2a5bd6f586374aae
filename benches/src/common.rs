//! What every scenario shares: its command-line options, the coordinator it runs
//! against, member layout, progress lines, and the report.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::driver::{default_members_per_conn, Counters, MemberSpec, Shared};
use crate::procfs;
use crate::stats::{fmt_count, kv, table};
use crate::target::{sibling_binary, Mode, StoreKind, Target, TargetInfo, TargetOptions};

/// Parses a duration such as `500ms`, `10s` or `2m`.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    rollcall_coordinator::server::parse_duration(text).map_err(|e| e.to_string())
}

/// Parses a comma-separated list of durations.
pub(crate) fn durations(text: &str) -> Result<Vec<Duration>, String> {
    text.split(',').map(|s| duration(s.trim())).collect()
}

/// Parses a comma-separated list of counts (`1000,10000`, also `10k`).
pub(crate) fn counts(text: &str) -> Result<Vec<usize>, String> {
    text.split(',')
        .map(|s| {
            let s = s.trim();
            let (digits, mult) = match s.strip_suffix(['k', 'K']) {
                Some(d) => (d, 1_000),
                None => (s, 1),
            };
            digits
                .parse::<usize>()
                .map(|n| n * mult)
                .map_err(|_| format!("invalid count '{s}'"))
        })
        .collect()
}

/// Options every scenario takes.
#[derive(Debug, Clone, Args)]
pub(crate) struct CommonArgs {
    /// Members (default depends on the scenario).
    #[arg(long)]
    pub(crate) members: Option<usize>,
    /// Groups the members are spread over, round robin (default depends on the scenario).
    #[arg(long)]
    pub(crate) groups: Option<usize>,
    /// Partitions of each group's one topic (default depends on the scenario).
    #[arg(long)]
    pub(crate) partitions: Option<u32>,
    /// Measured duration (default depends on the scenario).
    #[arg(long, value_parser = duration)]
    pub(crate) duration: Option<Duration>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Use the coordinator already running at this address.
    #[arg(long, value_name = "ADDR", conflicts_with = "spawn")]
    pub(crate) addr: Option<String>,
    /// With --addr: the coordinator's process id, to read its CPU time and memory.
    #[arg(long, requires = "addr")]
    pub(crate) pid: Option<u32>,
    /// Start a separate `rollcall serve` process (the honest way to measure its CPU
    /// and memory). Default: a coordinator inside this process.
    #[arg(long)]
    pub(crate) spawn: bool,
    /// The `rollcall` binary for --spawn; default: the one next to this binary.
    #[arg(long, value_name = "PATH")]
    pub(crate) rollcall_bin: Option<PathBuf>,
    /// Serve and connect over TLS: the coordinator (in this process or --spawn) gets a
    /// certificate for 127.0.0.1 from a CA made for the run, and every connection of
    /// the load generator verifies it. Not with --addr.
    #[arg(long, conflicts_with = "addr")]
    pub(crate) tls: bool,
    /// Members sharing one connection; default 1 up to 5,000 members, otherwise enough
    /// to stay under --max-conns connections.
    #[arg(long)]
    pub(crate) members_per_conn: Option<usize>,
    /// Most connections the generator opens when choosing --members-per-conn.
    #[arg(long, default_value_t = 15_000)]
    pub(crate) max_conns: usize,
    /// Renew a connection's members with one Heartbeats request (API key 9) per round
    /// instead of one Heartbeat each: the members of a connection share the place on
    /// the timeline of its first member, and every beat due in a round goes in one
    /// frame (closed loop: one such frame outstanding per connection). Latency is still
    /// per member from its intended send time, and the figures count beats, not frames.
    /// Needs a coordinator that lists key 9. Default: off, one Heartbeat per member.
    #[arg(long)]
    pub(crate) batch_heartbeats: bool,
    /// The coordinator's store (in-process or spawned coordinators only).
    #[arg(long, value_enum, default_value_t = StoreKind::Redb)]
    pub(crate) store: StoreKind,
    /// etcd endpoints for `--store etcd`, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    pub(crate) etcd: Vec<String>,
    /// Frames the coordinator queues per connection before it disconnects the client
    /// as too slow (its --send-buffer); default: the coordinator's own default.
    #[arg(long)]
    pub(crate) send_buffer: Option<usize>,
    /// The coordinator's shards; default: the number of CPUs.
    #[arg(long)]
    pub(crate) shards: Option<usize>,
    /// Session timeout the members ask for (default depends on the scenario).
    #[arg(long, value_parser = duration)]
    pub(crate) session_timeout: Option<Duration>,
    /// Lease timeout the members ask for (Join version 1): how long after its last frame
    /// an expelled member's partitions wait, and how soon a member whose connection
    /// closed is expelled. At most the session timeout. Default: none, the session
    /// timeout (the Join is sent at version 0).
    #[arg(long, value_parser = duration)]
    pub(crate) lease_timeout: Option<Duration>,
    /// The failure detector the members ask their groups to use (Join version 2:
    /// `fixed`, `adaptive`). Default: the coordinator's (`rollcall serve --detector`).
    #[arg(long)]
    pub(crate) detector: Option<String>,
    /// Heartbeat interval of each member (default depends on the scenario).
    #[arg(long, value_parser = duration)]
    pub(crate) interval: Option<Duration>,
    /// Joins outstanding at once while members are joining (lower it to ramp large
    /// member counts up gently; join-storm sends every join at once regardless).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) join_concurrency: usize,
    /// Time allowed to connect and join every member before giving up.
    #[arg(long, value_parser = duration, default_value = "5m")]
    pub(crate) setup_timeout: Duration,
    /// No progress lines on stderr.
    #[arg(long)]
    pub(crate) quiet: bool,
}

/// Whether members confirm their expulsions (scenarios that expel live members).
#[derive(Debug, Clone, Args)]
pub(crate) struct StandDownArgs {
    /// A member told it is expelled (an Expelled push or a `member_expelled` answer)
    /// confirms it at once with a Relinquish, as an application that takes the `Lost`
    /// event instantly would; a paused member once its pause is over. The default.
    #[arg(long, overrides_with = "no_relinquish")]
    pub(crate) relinquish: bool,
    /// A member told it is expelled sends nothing more (a client that does not speak
    /// Relinquish): what is held for it waits for its lease.
    #[arg(long, overrides_with = "relinquish")]
    pub(crate) no_relinquish: bool,
}

impl StandDownArgs {
    pub(crate) fn enabled(&self) -> bool {
        !self.no_relinquish
    }
}

impl CommonArgs {
    pub(crate) fn members_or(&self, default: usize) -> usize {
        self.members.unwrap_or(default).max(1)
    }

    pub(crate) fn groups_or(&self, default: usize) -> usize {
        self.groups.unwrap_or(default).max(1)
    }

    /// Partitions per group: `--partitions`, or `per_member` for each member a group
    /// holds.
    pub(crate) fn partitions_or_per_member(
        &self,
        members: usize,
        groups: usize,
        per_member: usize,
    ) -> u32 {
        self.partitions.unwrap_or_else(|| {
            u32::try_from(members.div_ceil(groups) * per_member).unwrap_or(u32::MAX)
        })
    }

    /// Connections the generator will open at most, allowing for this process's file
    /// limit when the coordinator shares it.
    pub(crate) fn connection_cap(&self) -> usize {
        if self.addr.is_none() && !self.spawn {
            // Both ends of every connection live in this process.
            self.max_conns.min(9_000)
        } else {
            self.max_conns
        }
    }

    pub(crate) fn per_conn(&self, members: usize) -> usize {
        self.members_per_conn
            .unwrap_or_else(|| default_members_per_conn(members, self.connection_cap()))
            .max(1)
    }

    pub(crate) fn target_options(&self) -> Result<TargetOptions, String> {
        let mode = if let Some(addr) = &self.addr {
            Mode::External {
                addr: addr.clone(),
                pid: self.pid,
            }
        } else if self.spawn {
            let bin = match &self.rollcall_bin {
                Some(p) => p.clone(),
                None => sibling_binary().ok_or(
                    "no rollcall binary next to rollcall-bench: build it (cargo build --release -p rollcall-coordinator) or pass --rollcall-bin",
                )?,
            };
            Mode::Spawn(bin)
        } else {
            Mode::InProcess
        };
        Ok(TargetOptions {
            mode,
            store: self.store,
            shards: self.shards.unwrap_or_else(procfs::cpus).max(1),
            max_connections: self.max_conns.max(16) + 1_000,
            min_session_timeout: Duration::from_millis(100),
            max_members_per_group: 100_000,
            send_buffer: self.send_buffer,
            tls: self.tls,
            etcd: self.etcd.clone(),
        })
    }
}

/// Member specifications: member `i` in group `g{i % groups}`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn member_specs(
    members: usize,
    groups: usize,
    partitions: u32,
    session_timeout: Duration,
    progress_timeout: Duration,
    lease_timeout: Option<Duration>,
    static_ids: bool,
) -> Vec<MemberSpec> {
    (0..members)
        .map(|i| MemberSpec {
            group: group_name(i % groups),
            instance_id: static_ids.then(|| format!("instance-{i}")),
            partitions,
            session_timeout,
            progress_timeout,
            rebalance_timeout: Duration::from_secs(60),
            lease_timeout,
            detector: None,
            placement: None,
            late: false,
        })
        .collect()
}

pub(crate) fn group_name(g: usize) -> String {
    format!("g{g}")
}

/// The machine, as the report records it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Machine {
    pub(crate) cpus: usize,
    pub(crate) load_before: Option<f64>,
    pub(crate) load_after: Option<f64>,
}

impl Machine {
    pub(crate) fn now() -> Self {
        Self {
            cpus: procfs::cpus(),
            load_before: procfs::load_average(),
            load_after: None,
        }
    }

    pub(crate) fn finish(&mut self) {
        self.load_after = procfs::load_average();
    }
}

/// How the load was generated.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GeneratorInfo {
    pub(crate) driver: &'static str,
    pub(crate) members: usize,
    pub(crate) connections: usize,
    pub(crate) members_per_conn: usize,
    pub(crate) multiplexed: bool,
    /// Heartbeats went out as one Heartbeats request per connection per round
    /// (`--batch-heartbeats`), not one Heartbeat per member.
    pub(crate) batch_heartbeats: bool,
    pub(crate) load: String,
}

impl GeneratorInfo {
    pub(crate) fn new(
        members: usize,
        connections: usize,
        per_conn: usize,
        batch_heartbeats: bool,
        load: String,
    ) -> Self {
        Self {
            driver: "raw protocol (Codec over a Framed TCP or TLS stream), one task per connection",
            members,
            connections,
            members_per_conn: per_conn,
            multiplexed: per_conn > 1,
            batch_heartbeats,
            load,
        }
    }
}

/// A target and whether the run met it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) what: String,
    pub(crate) target: String,
    pub(crate) measured: String,
    pub(crate) met: bool,
}

impl Check {
    pub(crate) fn new(
        what: impl Into<String>,
        target: impl Into<String>,
        measured: impl Into<String>,
        met: bool,
    ) -> Self {
        Self {
            what: what.into(),
            target: target.into(),
            measured: measured.into(),
            met,
        }
    }
}

/// A scenario's report: printed as text, optionally written as JSON.
#[derive(Debug, Serialize)]
pub(crate) struct Report<F: Serialize> {
    pub(crate) scenario: &'static str,
    pub(crate) command: String,
    pub(crate) machine: Machine,
    pub(crate) coordinator: Option<TargetInfo>,
    pub(crate) generator: Option<GeneratorInfo>,
    pub(crate) figures: F,
    pub(crate) checks: Vec<Check>,
    pub(crate) notes: Vec<String>,
    #[serde(skip)]
    pub(crate) text: String,
}

impl<F: Serialize> Report<F> {
    /// Prints the report and writes the JSON file if asked. Returns whether every check
    /// was met.
    pub(crate) fn emit(&self, json: Option<&PathBuf>) -> Result<bool, String> {
        let mut out = String::new();
        out.push_str(&format!("== rollcall-bench {} ==\n", self.scenario));
        let mut head = vec![
            ("command", self.command.clone()),
            (
                "machine",
                format!(
                    "{} CPUs, load average {} before, {} after",
                    self.machine.cpus,
                    self.machine
                        .load_before
                        .map_or("?".into(), |l| format!("{l:.2}")),
                    self.machine
                        .load_after
                        .map_or("?".into(), |l| format!("{l:.2}")),
                ),
            ),
        ];
        if let Some(c) = &self.coordinator {
            head.push((
                "coordinator",
                format!(
                    "{} (store {:?}, {} shards{}{}); {}",
                    c.mode,
                    c.store,
                    c.shards,
                    if c.tls { ", TLS" } else { "" },
                    c.pid.map_or(String::new(), |p| format!(", pid {p}")),
                    c.resource_note
                ),
            ));
        }
        if let Some(g) = &self.generator {
            head.push((
                "generator",
                format!(
                    "{}; {} members on {} connections ({}); {}; {}",
                    g.driver,
                    fmt_count(g.members as f64),
                    fmt_count(g.connections as f64),
                    if g.multiplexed {
                        format!("multiplexed, {} members per connection", g.members_per_conn)
                    } else {
                        "one member per connection".to_owned()
                    },
                    if g.batch_heartbeats {
                        "one Heartbeats frame per connection per round"
                    } else {
                        "one Heartbeat frame per member"
                    },
                    g.load
                ),
            ));
        }
        out.push_str(&kv(&head));
        out.push('\n');
        out.push_str(&self.text);
        if !self.checks.is_empty() {
            out.push('\n');
            let rows: Vec<Vec<String>> = self
                .checks
                .iter()
                .map(|c| {
                    vec![
                        c.what.clone(),
                        c.target.clone(),
                        c.measured.clone(),
                        if c.met { "met" } else { "MISSED" }.to_owned(),
                    ]
                })
                .collect();
            out.push_str(&table(&["check", "target", "measured", ""], &rows));
        }
        for note in &self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        print!("{out}");
        if let Some(path) = json {
            let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
            std::fs::write(path, text + "\n")
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        Ok(self.checks.iter().all(|c| c.met))
    }
}

/// The command line as run, for the report.
pub(crate) fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// A line per second on stderr while a scenario runs.
#[derive(Debug, Clone)]
pub(crate) struct Progress {
    phase: Arc<Mutex<String>>,
    stop: CancellationToken,
}

impl Progress {
    /// Lines about the connections and heartbeats of `shared`, and about the joins of
    /// `members` when they join (`None`: heartbeats without joins, as `floor` sends).
    pub(crate) fn start(shared: Arc<Shared>, members: Option<usize>, quiet: bool) -> Self {
        let phase = Arc::new(Mutex::new("connecting".to_owned()));
        let stop = CancellationToken::new();
        if !quiet {
            let phase = phase.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let begin = Instant::now();
                let c = &shared.counters;
                let mut last_hb = 0;
                let mut last_commits = 0;
                let mut ticks = tokio::time::interval(Duration::from_secs(1));
                ticks.tick().await;
                // Bounded: a scenario never runs for more than a day.
                for _ in 0..86_400 {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        _ = ticks.tick() => {}
                    }
                    let hb = Counters::get(&c.hb_ok) + Counters::get(&c.hb_err);
                    let commits = Counters::get(&c.commit_offsets_ok);
                    let label = phase.lock().map(|p| p.clone()).unwrap_or_default();
                    let joined = members.map_or_else(String::new, |members| {
                        format!(
                            " joined {}/{}",
                            fmt_count(Counters::get(&c.joins_ok) as f64),
                            fmt_count(members as f64),
                        )
                    });
                    let mut line = format!(
                        "[{:6.1}s] {label}: conns {}{joined} hb/s {} errors {} expelled {}",
                        begin.elapsed().as_secs_f64(),
                        fmt_count(Counters::get(&c.conns_ready) as f64),
                        fmt_count((hb - last_hb) as f64),
                        Counters::get(&c.hb_err) + Counters::get(&c.joins_err),
                        c.expelled(),
                    );
                    if commits > 0 {
                        line.push_str(&format!(
                            " commits/s {}",
                            fmt_count((commits - last_commits) as f64)
                        ));
                    }
                    eprintln!("{line}");
                    last_hb = hb;
                    last_commits = commits;
                }
            });
        }
        Self { phase, stop }
    }

    pub(crate) fn phase(&self, label: &str) {
        if let Ok(mut p) = self.phase.lock() {
            label.clone_into(&mut p);
        }
    }

    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }
}

/// A process whose CPU time a scenario measures (the coordinator, or `floor`'s echo
/// server), and the load generator's beside it.
pub(crate) trait CpuSource {
    /// CPU seconds the measured process has used so far.
    fn cpu_seconds(&self) -> Option<f64>;
    /// CPU seconds of the load generator so far, when it can be told apart.
    fn generator_cpu_seconds(&self) -> Option<f64>;
}

impl CpuSource for Target {
    fn cpu_seconds(&self) -> Option<f64> {
        Self::cpu_seconds(self)
    }

    fn generator_cpu_seconds(&self) -> Option<f64> {
        Self::generator_cpu_seconds(self)
    }
}

/// CPU seconds and wall time between two marks of a coordinator (or another measured
/// process).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuMark {
    at: Instant,
    coordinator: Option<f64>,
    generator: Option<f64>,
}

impl CpuMark {
    pub(crate) fn take(target: &impl CpuSource) -> Self {
        Self {
            at: Instant::now(),
            coordinator: target.cpu_seconds(),
            generator: target.generator_cpu_seconds(),
        }
    }

    /// (wall seconds, coordinator CPU seconds, generator CPU seconds) since `self`.
    pub(crate) fn since(&self, target: &impl CpuSource) -> (f64, Option<f64>, Option<f64>) {
        let now = Self::take(target);
        let wall = now.at.duration_since(self.at).as_secs_f64();
        let diff = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
        (
            wall,
            diff(now.coordinator, self.coordinator),
            diff(now.generator, self.generator),
        )
    }
}

/// Waits until every heartbeat sent in the window was answered, at most `limit`.
pub(crate) async fn drain_window(shared: &Shared, limit: Duration) {
    let deadline = Instant::now() + limit;
    let c = &shared.counters;
    while Instant::now() < deadline {
        let sent = c.hb_window_sent.load(Ordering::Relaxed);
        let answered = c.hb_window_answered.load(Ordering::Relaxed);
        if answered >= sent {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sleeps `d`, or less if `stop` is cancelled.
pub(crate) async fn sleep_or(stop: &CancellationToken, d: Duration) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = tokio::time::sleep(d) => {}
    }
}
