//! A worker that takes part in a group and processes synthetic records.
//!
//! Each owned partition has an offset counter that advances every few milliseconds, as
//! if records were being processed. Offsets are committed periodically and on
//! revocation; assignment changes are logged. While the member is suspended (its lease
//! ran out or its connection dropped) processing and periodic commits pause, and they
//! pick up again when it resumes. Ctrl-C leaves the group gracefully.
//!
//! With a coordinator started by `cargo run --release --bin rollcall -- serve` (which
//! listens on 127.0.0.1:7070 by default):
//!
//! ```text
//! cargo run -p rollcall-client --example worker -- \
//!     --addr 127.0.0.1:7070 --group billing --topic orders --partitions 12
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use rollcall_client::{
    Client, ClientConfig, Event, LostReason, Member, MemberConfig, Offset, TopicPartition,
};
use tracing::{error, info, warn};

#[derive(Debug, Parser)]
#[command(about = "A rollcall worker processing synthetic records")]
struct Args {
    /// The coordinator's address (`rollcall serve` listens on 127.0.0.1:7070 by default);
    /// with a cluster, any of its coordinators, or several, comma-separated: the worker
    /// finds its group's coordinator and follows it.
    #[arg(long, default_value = "127.0.0.1:7070", value_delimiter = ',')]
    addr: Vec<String>,
    /// The group to join.
    #[arg(long)]
    group: String,
    /// The topic to consume.
    #[arg(long)]
    topic: String,
    /// The topic's partition count.
    #[arg(long)]
    partitions: u32,
    /// A static instance id, to get the same partitions back after a quick restart.
    #[arg(long)]
    instance_id: Option<String>,
    /// The session timeout, in milliseconds.
    #[arg(long)]
    session_timeout_ms: Option<u64>,
    /// How often a record is processed on each partition, in milliseconds.
    #[arg(long, default_value_t = 5)]
    record_interval_ms: u64,
    /// How often offsets are committed, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    commit_interval_ms: u64,
    /// How long a graceful leave may wait for the last commits.
    #[arg(long, default_value_t = 5000)]
    leave_timeout_ms: u64,
}

/// The next offset to process on each owned partition.
type Positions = BTreeMap<TopicPartition, i64>;

/// What the worker holds and whether it may act on it.
#[derive(Debug, Default)]
struct Work {
    positions: Positions,
    /// Between `Suspended` and `Resumed` (or `Lost`): hold everything, act on nothing.
    suspended: bool,
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    if let Err(e) = run(args).await {
        error!("{e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let (first, more) = args
        .addr
        .split_first()
        .ok_or("--addr names no coordinator")?;
    let client =
        Client::connect(first, ClientConfig::default().with_bootstrap(more.to_vec())).await?;
    let mut config = MemberConfig::new(&args.group, [(args.topic.as_str(), args.partitions)])
        .with_client_id("rollcall-example-worker");
    if let Some(id) = &args.instance_id {
        config = config.with_instance_id(id);
    }
    if let Some(ms) = args.session_timeout_ms {
        config = config.with_session_timeout(Duration::from_millis(ms));
    }
    let member = client.join(config).await?;
    info!(group = %args.group, member_id = ?member.member_id(), "joined");

    let mut work = Work::default();
    let mut records = tokio::time::interval(Duration::from_millis(args.record_interval_ms.max(1)));
    let mut commits = tokio::time::interval(Duration::from_millis(args.commit_interval_ms.max(1)));
    loop {
        tokio::select! {
            event = member.next_event() => {
                let Some(event) = event else { break };
                if !handle(&member, &args, &mut work, event).await {
                    return Err("the member cannot continue".into());
                }
            }
            _ = records.tick() => {
                // Processing one record on each partition is progress. Waiting while
                // suspended is too: the member is doing what it should.
                if !work.suspended {
                    for offset in work.positions.values_mut() {
                        *offset += 1;
                    }
                }
                member.mark_progress();
            }
            _ = commits.tick(), if !work.suspended => commit(&member, &work.positions, None).await,
            _ = tokio::signal::ctrl_c() => {
                info!("leaving");
                leave(&member, &args, &mut work).await;
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Acts on one event; `false` when the member cannot continue.
async fn handle(member: &Member, args: &Args, work: &mut Work, event: Event) -> bool {
    let positions = &mut work.positions;
    match event {
        Event::Assigned {
            partitions,
            generation,
        } => {
            // Resume from the committed offsets (0 where nothing was committed).
            let committed = member
                .committed([args.topic.as_str()])
                .await
                .unwrap_or_else(|e| {
                    warn!("cannot fetch committed offsets: {e}");
                    BTreeMap::new()
                });
            for p in &partitions {
                let from = committed.get(p).map_or(0, |c| c.offset);
                positions.insert(p.clone(), from);
            }
            info!(generation, partitions = %list(partitions.iter()), owned = positions.len(), "assigned");
        }
        Event::RevokeRequested {
            partitions,
            generation,
        } => {
            // Commit what was processed, then release.
            commit(member, positions, Some(&partitions)).await;
            for p in &partitions {
                positions.remove(p);
            }
            if let Err(e) = member.ack_revocation(partitions.iter().cloned()) {
                // Nothing reaches the coordinator any more: the session will expire.
                error!("cannot release {}: {e}", list(partitions.iter()));
                return false;
            }
            info!(generation, partitions = %list(partitions.iter()), owned = positions.len(), "released");
        }
        Event::Lost { partitions, reason } => {
            // Someone else may own them already: stop without committing.
            for p in &partitions {
                positions.remove(p);
            }
            warn!(%reason, partitions = %list(partitions.iter()), owned = positions.len(), "lost");
            // Every loss but a reassignment ends the membership, and any suspension with
            // it; partitions moved while the member was away leave it suspended.
            if reason != LostReason::Reassigned {
                work.suspended = false;
            }
        }
        Event::Suspended { partitions } => {
            // Maybe no longer the owner: pause everything, keep the positions.
            work.suspended = true;
            warn!(partitions = %list(partitions.iter()), "suspended; pausing");
        }
        Event::Resumed { partitions } => {
            work.suspended = false;
            info!(partitions = %list(partitions.iter()), "resumed");
        }
        Event::Fatal(e) => {
            error!("{e}");
            return false;
        }
        other => info!(?other, "unhandled event"),
    }
    true
}

/// Commits the positions of `only` (or of every owned partition).
async fn commit(
    member: &Member,
    positions: &Positions,
    only: Option<&rollcall_client::PartitionSet>,
) {
    let offsets: Vec<Offset> = positions
        .iter()
        .filter(|(p, _)| only.is_none_or(|only| only.contains(*p)))
        .map(|(p, o)| Offset::new(p.clone(), *o))
        .collect();
    if offsets.is_empty() {
        return;
    }
    // A write outside the coordinator would be bounded by the lease the same way.
    if let Some(deadline) = member.lease_deadline() {
        if deadline <= Instant::now() {
            warn!("lease expired; not committing");
            return;
        }
    }
    let count = offsets.len();
    match member.commit(offsets).await {
        Ok(()) => tracing::debug!(count, "committed"),
        Err(e) => warn!("commit failed: {e}"),
    }
}

/// Leaves gracefully: commits and releases whatever the leave revokes.
async fn leave(member: &Member, args: &Args, work: &mut Work) {
    let leave = member.leave(Duration::from_millis(args.leave_timeout_ms));
    tokio::pin!(leave);
    loop {
        tokio::select! {
            result = &mut leave => {
                match result {
                    Ok(()) => info!("left"),
                    Err(e) => warn!("{e}"),
                }
                return;
            }
            event = member.next_event() => match event {
                Some(event) => {
                    handle(member, args, work, event).await;
                }
                None => return,
            },
        }
    }
}

fn list<'a>(partitions: impl Iterator<Item = &'a TopicPartition>) -> String {
    partitions
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
