//! Core micro-benchmarks: handling one heartbeat, and memory per member.
//!
//! `cargo bench -p rollcall-coordinator --bench heartbeat`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use rollcall_coordinator::core::{Coordinator, CoreConfig, DetectorKind};
use rollcall_protocol::{HeartbeatRequest, JoinRequest, Request, Response, TopicSubscription};

/// A core with `groups` groups of `per_group` members, judged by `detector`, settled.
/// Each member joins on a connection of its own.
fn populated(
    groups: usize,
    per_group: usize,
    start: Instant,
    detector: DetectorKind,
) -> (Coordinator, Vec<(String, String)>) {
    let mut core = Coordinator::new(CoreConfig {
        detector,
        ..CoreConfig::default()
    });
    let mut members = Vec::with_capacity(groups * per_group);
    let mut token = 0;
    for g in 0..groups {
        let group = format!("group-{g}");
        for _ in 0..per_group {
            token += 1;
            let resp = core
                .handle_request(
                    start,
                    token,
                    Request::Join(JoinRequest {
                        placement: None,
                        group: group.clone(),
                        member_id: None,
                        instance_id: None,
                        client_id: "bench".into(),
                        join_token: token,
                        subscription: vec![TopicSubscription {
                            topic: "orders".into(),
                            partitions: per_group as u32 * 10,
                        }],
                        session_timeout_ms: 30_000,
                        progress_timeout_ms: 300_000,
                        rebalance_timeout_ms: 60_000,
                        lease_timeout_ms: 0,
                        detector: String::new(),
                    }),
                )
                .response;
            let Response::Join(j) = resp else {
                panic!("join refused: {resp:?}")
            };
            members.push((group.clone(), j.member_id));
        }
    }
    let settle = start + Duration::from_secs(1);
    core.handle_timeout(settle);
    while core.poll_output().is_some() {}
    let _durable_in_a_real_shell = core.take_records();
    (core, members)
}

fn heartbeat(c: &mut Criterion) {
    for detector in DetectorKind::ALL {
        heartbeat_with(c, detector);
    }
}

/// One heartbeat at a time to 10,000 members judged by `detector`; the fixed detector's
/// benchmark keeps its original name.
fn heartbeat_with(c: &mut Criterion, detector: DetectorKind) {
    let start = Instant::now();
    let (mut core, members) = populated(100, 100, start, detector);
    let mut now = start + Duration::from_secs(1);
    // Each member numbers its own beats, as a client does: a jump would be lost beats.
    let mut seqs = vec![1u64; members.len()];
    let mut i = 0usize;
    let name = match detector {
        DetectorKind::Fixed => "core_heartbeat_10000_members".to_owned(),
        other => format!("core_heartbeat_10000_members_{other}"),
    };
    c.bench_function(&name, |b| {
        b.iter_batched(
            || {
                i = (i + 1) % members.len();
                seqs[i] += 1;
                let seq = seqs[i];
                now += Duration::from_nanos(100);
                let (group, member_id) = &members[i];
                let conn = i as u64 + 1; // the connection it joined on
                let req = Request::Heartbeat(beat(group, member_id, seq));
                (now, conn, req)
            },
            |(now, conn, req)| handle(&mut core, now, conn, req),
            criterion::BatchSize::SmallInput,
        )
    });
}

/// A settled member's heartbeat: generation 1, progress moving with the sequence.
fn beat(group: &str, member_id: &str, seq: u64) -> HeartbeatRequest {
    HeartbeatRequest {
        loads: Vec::new(),
        group: group.to_owned().into(),
        member_id: member_id.to_owned().into(),
        generation: 1,
        sequence: seq,
        progress: seq,
        acked_revocations: Vec::new(),
    }
}

/// Hands `req` to the core and drains what it produced, as a shard does.
fn handle(core: &mut Coordinator, now: Instant, conn: u64, req: Request) {
    black_box(core.handle_request(now, conn, req).response);
    while let Some(out) = core.poll_output() {
        black_box(out);
    }
}

/// Resident set size of this process, bytes (Linux).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Prints the core's memory per member: resident memory grown by adding 100,000
/// members in 1,000 groups of 100 (each with its session, progress clock and 10
/// partitions), divided by the member count.
fn memory_per_member() {
    let before = rss_bytes();
    let (core, members) = populated(1_000, 100, Instant::now(), DetectorKind::Fixed);
    let after = rss_bytes();
    if let (Some(before), Some(after)) = (before, after) {
        let per = after.saturating_sub(before) as f64 / members.len() as f64;
        println!(
            "core_memory_per_member: {per:.0} bytes ({} members, {} timer entries, RSS +{:.1} MiB)",
            members.len(),
            core.timer_entries(),
            after.saturating_sub(before) as f64 / (1 << 20) as f64
        );
    }
    drop(core);
}

criterion_group!(benches, heartbeat);

fn main() {
    memory_per_member();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
