//! What the most expensive join costs the core: a join that creates a group of the
//! largest size the server allows (100,000 partitions), its rebalance and its snapshot;
//! and how long a shard is held when several such rebalances fall due at once, now that
//! due timers run a slice at a time. The times are printed, not asserted (run with
//! `--nocapture`; in a release build for figures worth quoting); what is asserted is
//! that each slice runs at most one of the largest rebalances.

use std::time::{Duration, Instant};

use rollcall_coordinator::core::{Coordinator, CoreConfig, Event, Output, TIMER_SLICE};
use rollcall_coordinator::server::DEFAULT_MAX_PARTITIONS_PER_GROUP;
use rollcall_protocol::{JoinRequest, Request, Response, TopicSubscription};

fn join(group: &str, token: u64, topics: Vec<(String, u32)>) -> Request {
    Request::Join(JoinRequest {
        placement: None,
        group: group.into(),
        member_id: None,
        instance_id: None,
        client_id: "max-join".into(),
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

/// Drains the core's outputs; returns the rebalances started among them.
fn drain(core: &mut Coordinator) -> usize {
    let mut rebalances = 0;
    while let Some(o) = core.poll_output() {
        if matches!(o, Output::Event(Event::RebalanceStarted { .. })) {
            rebalances += 1;
        }
    }
    rebalances
}

fn config() -> CoreConfig {
    CoreConfig {
        max_partitions_per_group: DEFAULT_MAX_PARTITIONS_PER_GROUP,
        ..CoreConfig::default()
    }
}

/// One join creating a group of `topics`, joined by `members` members: the times of
/// the join, of the rebalance when it falls due, and of taking the group's snapshot.
fn one_group(label: &str, members: u64, topics: Vec<(String, u32)>) {
    let mut core = Coordinator::new(config());
    let mut now = Instant::now();
    let started = Instant::now();
    for m in 0..members {
        let r = core
            .handle_request(now, m, join("g", m + 1, topics.clone()))
            .response;
        assert!(matches!(r, Response::Join(_)), "{r:?}");
    }
    let joined = started.elapsed();
    drain(&mut core);
    drop(core.take_records());
    now += Duration::from_secs(1);
    let started = Instant::now();
    core.handle_timeout(now);
    let rebalanced = started.elapsed();
    assert_eq!(drain(&mut core), 1);
    let started = Instant::now();
    let records = core.take_records();
    let snapshot = started.elapsed();
    assert_eq!(records.len(), 1);
    println!(
        "{label}: {members} join(s) {joined:?}, rebalance {rebalanced:?}, snapshot {snapshot:?}"
    );
}

#[test]
fn a_max_size_join_costs_one_rebalance_of_its_group() {
    let largest = DEFAULT_MAX_PARTITIONS_PER_GROUP;
    one_group(
        "one topic of 100,000 partitions, one member",
        1,
        vec![("t".into(), largest)],
    );
    one_group(
        "10,000 topics of 10 partitions, one member",
        1,
        (0..10_000).map(|i| (format!("topic-{i:05}"), 10)).collect(),
    );
    one_group(
        "one topic of 100,000 partitions, 100 members",
        100,
        vec![("t".into(), largest)],
    );
}

/// Three of the largest groups fall due at once. Before slicing, one call ran all
/// three rebalances, holding the shard for their sum; now each call runs one, and the
/// shard takes requests between calls.
#[test]
fn rebalances_due_at_once_run_one_slice_per_call() {
    assert!(u64::from(DEFAULT_MAX_PARTITIONS_PER_GROUP) >= TIMER_SLICE);
    let mut core = Coordinator::new(config());
    let mut now = Instant::now();
    let groups = 3;
    for g in 0..groups {
        let r = core
            .handle_request(
                now,
                1,
                join(
                    &format!("g{g}"),
                    g + 1,
                    vec![("t".into(), DEFAULT_MAX_PARTITIONS_PER_GROUP)],
                ),
            )
            .response;
        assert!(matches!(r, Response::Join(_)), "{r:?}");
    }
    drain(&mut core);
    drop(core.take_records());
    now += Duration::from_secs(1);
    let mut calls = Vec::new();
    let mut total = Duration::ZERO;
    while core.poll_timeout().is_some_and(|t| t <= now) {
        let started = Instant::now();
        core.handle_timeout(now);
        let took = started.elapsed();
        total += took;
        let rebalances = drain(&mut core);
        assert!(
            rebalances <= 1,
            "one call ran {rebalances} of the largest rebalances"
        );
        calls.push((took, rebalances));
    }
    let rebalanced: usize = calls.iter().map(|c| c.1).sum();
    assert_eq!(rebalanced, groups as usize);
    let longest = calls.iter().map(|c| c.0).max().unwrap_or_default();
    println!(
        "{groups} largest rebalances due at once: {} calls, longest {longest:?}, all {total:?} (one call before slicing)",
        calls.len()
    );
}
