//! `rollcall-bench`: load scenarios against a rollcall coordinator.
//!
//! Each subcommand runs one scenario against a coordinator started in this process
//! (default), spawned as a separate `rollcall serve` process (`--spawn`, the honest way
//! to measure its CPU and memory), or already running (`--addr`). Members are spoken
//! for on the raw protocol, many per connection when there are many. Every run is
//! bounded in time and stops by itself; it prints a table on stdout, progress lines on
//! stderr, and with `--json FILE` writes its figures as JSON. The exit code is 0 when
//! every target checked was met, 1 when one was missed, 2 when the run failed.
//!
//! Two subcommands start no coordinator: `detector` replays heartbeat traces through
//! the coordinator's failure detectors, and `floor` drives a bare echo server of the
//! same heartbeat frames (this binary re-executed as the hidden `floor-server`), whose
//! heartbeats per second of server CPU are the ceiling of `steady`'s on this machine.

#![forbid(unsafe_code)]

mod common;
mod driver;
mod harness;
mod probe;
mod procfs;
mod scenarios;
mod stats;
mod target;
mod tracker;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::harness::Scenario;

/// Load scenarios against a rollcall coordinator.
#[derive(Debug, Parser)]
#[command(name = "rollcall-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    scenario: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Members heartbeating at a fixed offered rate (or closed loop): heartbeat RTT,
    /// throughput, coordinator CPU and memory, false expulsions.
    Steady(scenarios::steady::SteadyArgs),
    /// Every member joins at once: time until every group is stable.
    JoinStorm(scenarios::join_storm::JoinStormArgs),
    /// Members killed abruptly at a rate: detection and rebalance latency, time
    /// partitions spend without an owner.
    Churn(scenarios::churn::ChurnArgs),
    /// Members whose progress stops, and members that pause entirely: expulsions
    /// only when (and soon after) a timeout is exceeded.
    Stall(scenarios::stall::StallArgs),
    /// The coordinator stopped (SIGSTOP) for longer than the session timeout, then
    /// resumed, a few times: no live member expelled, members that died during the stop
    /// expelled within one session timeout of the resume. Needs --spawn (or --addr with
    /// --pid).
    Pause(scenarios::pause::PauseArgs),
    /// Static members restarted one after another: rebalances caused and partitions
    /// moved.
    RollingRestart(scenarios::rolling::RollingArgs),
    /// Durable offset commits from many members at once: throughput and latency.
    Commit(scenarios::commit::CommitArgs),
    /// A cluster of coordinators on etcd (one or three members, spawned here), one
    /// coordinator killed with SIGKILL, several times: time until every member of its
    /// groups has a heartbeat answered again, rebalances and `Lost` events caused.
    /// Needs `etcd` and a `rollcall` built with `--features cluster`.
    Failover(scenarios::failover::FailoverArgs),
    /// The failover cluster (three etcd members by default) under a long series of
    /// faults, each recovered from before the next: coordinators killed with SIGKILL,
    /// coordinators cut off from etcd, etcd leaders killed. The end-to-end tests'
    /// oracle reads every grant, release and commit the members recorded: no partition
    /// held by two members at once, no acknowledged commit lost, no commit accepted
    /// from a fenced member. Needs `etcd` and a `rollcall` built with `--features
    /// cluster`.
    Safety(scenarios::safety::SafetyArgs),
    /// The steady scenario over a sweep of member counts: the cost curve.
    Scale(scenarios::steady::ScaleArgs),
    /// Connections opened, handshaken (ApiVersions) and left silent: the coordinator's
    /// memory per idle connection (target: at most 8 KiB), its peak, and what it returns
    /// once they close. Needs --spawn (or --addr with --pid). --conns is capped by the
    /// open-file limit, less 1,000 (19,000 under a limit of 20,000).
    Connections(scenarios::connections::ConnectionsArgs),
    /// The detector lab: heartbeat traces (a CSV file of arrival times, or a synthetic
    /// preset) replayed through the coordinator's own failure detectors over a sweep of
    /// their settings: false suspicions and expulsions, detection time, mistake
    /// duration, query accuracy; a table, JSON and SVG charts. Starts no coordinator.
    Detector(Box<scenarios::detector::DetectorArgs>),
    /// The floor of the network path on this machine: a bare echo server in a process
    /// of its own, no coordinator logic, answering each Heartbeat frame with a canned
    /// Heartbeat response, driven like `steady` with one member per connection (or,
    /// with `--beats-per-frame N`, Heartbeats frames of N beats answered with N
    /// results, like `steady --batch-heartbeats`). Gives heartbeats per second of
    /// server CPU, the ceiling of steady's figure. Starts no coordinator.
    Floor(scenarios::floor::FloorArgs),
    /// One member of a settled group drained (Drain, API key 14): its partitions moved
    /// to the others and no other, time to the last grant in milliseconds and in
    /// revocation round trips.
    Drain(scenarios::drain::DrainArgs),
    /// Members in racks and partitions preferring racks (Join version 3): the share
    /// owned in their rack, counts per member and per rack against even; then one
    /// rack's members killed: partitions of the other racks moved.
    Racks(scenarios::racks::RacksArgs),
    /// Capacity-weighted members (1 : 2 : 4) against their shares; Zipf loads
    /// reported with heartbeats under count and then load balance (AlterGroupConfig):
    /// the most loaded member against the mean and the heaviest partition; a change
    /// of loads: partitions moved per rebalance against the churn budget.
    Capacity(scenarios::capacity::CapacityArgs),
    /// A burst of members joining a group whose revocations are capped
    /// (AlterGroupConfig max_revoking): most partitions in revocation at once, time to
    /// the final assignment, beside the same burst uncapped.
    Throttle(scenarios::throttle::ThrottleArgs),
    /// The echo server of `floor`, run by it in a process of its own: prints its
    /// address on stdout and serves until its stdin closes.
    #[command(hide = true)]
    FloorServer(scenarios::floor::FloorServerArgs),
}

impl Command {
    /// The longest the scenario may take, all phases included.
    fn hard_cap(&self) -> Duration {
        match self {
            Self::Steady(a) => a.hard_cap(),
            Self::JoinStorm(a) => a.hard_cap(),
            Self::Churn(a) => a.hard_cap(),
            Self::Stall(a) => a.hard_cap(),
            Self::Pause(a) => a.hard_cap(),
            Self::RollingRestart(a) => a.hard_cap(),
            Self::Commit(a) => a.hard_cap(),
            Self::Failover(a) => a.hard_cap(),
            Self::Safety(a) => a.hard_cap(),
            Self::Scale(a) => a.hard_cap(),
            Self::Connections(a) => a.hard_cap(),
            Self::Detector(a) => a.hard_cap(),
            Self::Floor(a) => a.hard_cap(),
            Self::Drain(a) => a.hard_cap(),
            Self::Racks(a) => a.hard_cap(),
            Self::Capacity(a) => a.hard_cap(),
            Self::Throttle(a) => a.hard_cap(),
            Self::FloorServer(a) => a.hard_cap(),
        }
    }

    async fn run(&self) -> Result<bool, String> {
        match self {
            Self::Steady(a) => harness::run(a).await,
            Self::JoinStorm(a) => harness::run(a).await,
            Self::Churn(a) => harness::run(a).await,
            Self::Stall(a) => harness::run(a).await,
            Self::Pause(a) => harness::run(a).await,
            Self::RollingRestart(a) => harness::run(a).await,
            Self::Commit(a) => harness::run(a).await,
            Self::Failover(a) => harness::run(a).await,
            Self::Safety(a) => harness::run(a).await,
            Self::Scale(a) => harness::run(a).await,
            Self::Connections(a) => harness::run(a).await,
            Self::Detector(a) => scenarios::detector::run(a).await,
            Self::Floor(a) => harness::run(a).await,
            Self::Drain(a) => harness::run(a).await,
            Self::Racks(a) => harness::run(a).await,
            Self::Capacity(a) => harness::run(a).await,
            Self::Throttle(a) => harness::run(a).await,
            // Served on a runtime of its own, before this one is built (see `main`).
            Self::FloorServer(_) => {
                Err("floor-server does not run on the generator's runtime".into())
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::FloorServer(args) = &cli.scenario {
        // Its CPU time is what `floor` measures: its own runtime, sized as asked, not
        // the generator's.
        return scenarios::floor::serve(args);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(procfs::cpus())
        .thread_name(target::GENERATOR_THREADS)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rollcall-bench: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let cap = cli.scenario.hard_cap();
    let outcome = runtime.block_on(async {
        tokio::select! {
            result = tokio::time::timeout(cap, cli.scenario.run()) => match result {
                Ok(r) => r,
                Err(_) => Err(format!(
                    "the run exceeded its hard cap of {} s and was stopped",
                    cap.as_secs()
                )),
            },
            // Dropping the scenario stops a spawned coordinator and removes its data.
            signal = interrupted() => Err(format!("interrupted by {signal}")),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("rollcall-bench: {e}");
            ExitCode::from(2)
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

#[cfg(test)]
mod smoke;
