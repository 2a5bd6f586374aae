//! What the core's state costs in resident memory: per group, member, partition, topic
//! and committed offset, every name at its longest (255 bytes). These are the figures
//! the memory budget in ARCHITECTURE.md ("Resource limits") multiplies by the quotas;
//! the test fails if a cost grows past its figure there. Measured as the growth of a
//! process's resident set (Linux), so it counts what the allocator keeps too: each kind
//! is built in a process of its own (this test binary run again for one `#[ignore]`d
//! test), where nothing else allocates or has freed memory to reuse.

use std::time::{Duration, Instant};

use rollcall_coordinator::core::{Coordinator, CoreConfig};
use rollcall_protocol::{
    CommitOffsetsRequest, JoinRequest, OffsetCommit, Request, Response, TopicSubscription,
};

/// The per-unit costs the budget states, bytes (ARCHITECTURE.md, Resource limits).
const GROUP: u64 = 3 << 10;
const MEMBER: u64 = 3584;
const PARTITION: u64 = 200;
const TOPIC: u64 = 1536;
const OFFSET: u64 = 640;

const NAME: usize = rollcall_coordinator::core::MAX_NAME_BYTES;

fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|kib| kib * 1024)
}

/// A name of the longest length, unique by `i`.
fn long(prefix: &str, i: usize) -> String {
    let mut name = format!("{prefix}-{i}-");
    let fill = NAME - name.len();
    name.push_str(&"x".repeat(fill));
    name
}

fn join(
    group: String,
    token: u64,
    instance: Option<String>,
    topics: Vec<(String, u32)>,
) -> Request {
    Request::Join(JoinRequest {
        placement: None,
        group,
        member_id: None,
        instance_id: instance,
        client_id: long("client", token as usize),
        join_token: token,
        subscription: topics
            .into_iter()
            .map(|(topic, partitions)| TopicSubscription { topic, partitions })
            .collect(),
        session_timeout_ms: 30_000,
        progress_timeout_ms: 600_000,
        rebalance_timeout_ms: 60_000,
        lease_timeout_ms: 0,
        detector: String::new(),
    })
}

fn drain(core: &mut Coordinator) {
    while core.poll_output().is_some() {}
    drop(core.take_records());
}

/// Runs the rebalances due and drains what they produced.
fn settle(core: &mut Coordinator, now: &mut Instant) {
    *now += Duration::from_secs(1);
    while core.poll_timeout().is_some_and(|t| t <= *now) {
        core.handle_timeout(*now);
        drain(core);
    }
}

fn accepted(effects: &rollcall_coordinator::core::Effects) {
    let r = &effects.response;
    assert!(
        matches!(r, Response::Join(_) | Response::CommitOffsets(_)),
        "refused: {r:?}"
    );
}

/// Prints the resident growth per unit of what `build` makes, for the driver to read.
fn measure(units: u64, build: impl FnOnce() -> Coordinator) {
    let before = rss().expect("VmRSS");
    let core = build();
    let after = rss().expect("VmRSS");
    println!("COST {}", after.saturating_sub(before) / units);
    drop(core);
}

fn config() -> CoreConfig {
    CoreConfig {
        max_partitions_per_group: 100_000,
        max_groups: usize::MAX,
        max_members: usize::MAX,
        max_partitions: u64::MAX,
        max_offsets: usize::MAX,
        ..CoreConfig::default()
    }
}

/// Groups without members, each created by an administrative commit of one offset
/// (of a one-byte topic, so the offset adds little).
#[test]
#[ignore = "a measurement the budget test runs in a process of its own"]
fn cost_of_a_group() {
    let now = Instant::now();
    measure(20_000, || {
        let mut core = Coordinator::new(config());
        for i in 0..20_000 {
            let commit = Request::CommitOffsets(CommitOffsetsRequest {
                group: long("group", i),
                member_id: None,
                generation: 0,
                offsets: vec![OffsetCommit {
                    topic: "t".into(),
                    partition: 0,
                    offset: 1,
                    metadata: String::new(),
                }],
            });
            accepted(&core.handle_request(now, 1, commit));
            if i % 1_000 == 999 {
                drain(&mut core);
            }
        }
        core
    });
}

/// Static members (the longest ids) in groups of 100.
#[test]
#[ignore = "a measurement the budget test runs in a process of its own"]
fn cost_of_a_member() {
    let mut now = Instant::now();
    measure(20_000, || {
        let mut core = Coordinator::new(config());
        for i in 0..20_000 {
            let topic = long("topic", 0);
            let instance = Some(long("instance", i));
            accepted(&core.handle_request(
                now,
                1,
                join(
                    long("group", i / 100),
                    i as u64 + 1,
                    instance,
                    vec![(topic, 100)],
                ),
            ));
            if i % 100 == 99 {
                drain(&mut core);
            }
        }
        settle(&mut core, &mut now);
        core
    });
}

/// Partitions: one group of 100,000 partitions in one topic, 10 members.
#[test]
#[ignore = "a measurement the budget test runs in a process of its own"]
fn cost_of_a_partition() {
    let mut now = Instant::now();
    measure(100_000, || {
        let mut core = Coordinator::new(config());
        for m in 0..10 {
            accepted(&core.handle_request(
                now,
                1,
                join(
                    long("group", 0),
                    m + 1,
                    None,
                    vec![(long("topic", 0), 100_000)],
                ),
            ));
        }
        settle(&mut core, &mut now);
        core
    });
}

/// Topics of one partition each, the longest names, in groups of 1,000 (each counts as
/// one partition against the partition quotas).
#[test]
#[ignore = "a measurement the budget test runs in a process of its own"]
fn cost_of_a_topic() {
    let mut now = Instant::now();
    measure(20_000, || {
        let mut core = Coordinator::new(config());
        for g in 0..20 {
            let subscription = (0..1_000).map(|t| (long("topic", t), 1)).collect();
            accepted(&core.handle_request(
                now,
                1,
                join(long("group", g), g as u64 + 1, None, subscription),
            ));
            drain(&mut core);
        }
        settle(&mut core, &mut now);
        core
    });
}

/// Committed offsets: administrative commits of the longest topic names, no metadata.
#[test]
#[ignore = "a measurement the budget test runs in a process of its own"]
fn cost_of_an_offset() {
    let now = Instant::now();
    measure(100_000, || {
        let mut core = Coordinator::new(config());
        for g in 0..100 {
            let commit = Request::CommitOffsets(CommitOffsetsRequest {
                group: long("group", g),
                member_id: None,
                generation: 0,
                offsets: (0..1_000)
                    .map(|p| OffsetCommit {
                        topic: long("topic", p as usize % 10),
                        partition: p,
                        offset: 1,
                        metadata: String::new(),
                    })
                    .collect(),
            });
            accepted(&core.handle_request(now, 1, commit));
            drain(&mut core);
        }
        core
    });
}

/// Runs one measurement in a process of its own and returns what it printed.
fn cost(test: &str) -> u64 {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{test} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.split("COST ").nth(1)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{test} printed no cost: {stdout}"))
}

#[test]
fn state_costs_stay_within_the_budgets_figures() {
    if rss().is_none() {
        eprintln!("no /proc/self/status: resident memory cannot be read here");
        return;
    }
    let mut over = Vec::new();
    for (what, test, budget) in [
        ("a group (no member, one offset)", "cost_of_a_group", GROUP),
        (
            "a member (static, in a group of 100)",
            "cost_of_a_member",
            MEMBER,
        ),
        ("a partition (assigned)", "cost_of_a_partition", PARTITION),
        (
            "a topic of one partition (assigned)",
            "cost_of_a_topic",
            TOPIC,
        ),
        (
            "a committed offset (no metadata)",
            "cost_of_an_offset",
            OFFSET,
        ),
    ] {
        let cost = cost(test);
        println!("{what}: {cost} bytes (budget {budget})");
        if cost > budget {
            over.push(format!(
                "{what} costs {cost} bytes, the budget says {budget}"
            ));
        }
    }
    assert!(over.is_empty(), "{}", over.join("; "));
}
