//! Cluster mode end to end (feature `cluster`): a real etcd, real `rollcall serve --etcd`
//! processes, and members through the client crate, every grant, acknowledgement and
//! commit of theirs recorded for the oracle (`rollcall_tests::fleet`). Without an
//! `etcd` binary each test prints `SKIPPED` and passes (fails with
//! `ROLLCALL_REQUIRE_ETCD=1`).
//!
//! The coordinators' etcd lease is 2 s, so a failover takes a few seconds; the tests
//! run one at a time (their timings are part of what they check) and each is bounded.
#![cfg(feature = "cluster")]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rollcall_tests::cluster::{
    assert_safe, field, timestamp, within, Cluster, ABANDONED, ADOPTED, SERIAL,
};
use rollcall_tests::fleet::{group_names, Fleet, Timeouts};
use rollcall_tests::proxy::{Direction, Proxy};
use rollcall_tests::run_cli;

const BIN: &str = env!("CARGO_BIN_EXE_rollcall-e2e");
const LEASE_TTL: &str = "2s";
const SLOTS: u32 = 8;
const PARTITIONS: u32 = 6;
/// Members keep their sessions across any failover these tests cause.
const TIMEOUTS: Timeouts = Timeouts {
    session: Duration::from_secs(8),
    lease: Duration::from_secs(4),
    heartbeat: Duration::from_millis(250),
};
/// The longest a failover or a hand-off may take before a test fails.
const MOVE: Duration = Duration::from_secs(20);

/// The coordinator serving the most groups in `placement`, and those groups.
fn busiest(cluster: &Cluster, placement: &BTreeMap<String, SocketAddr>) -> (usize, Vec<String>) {
    let mut by: BTreeMap<SocketAddr, Vec<String>> = BTreeMap::new();
    for (group, addr) in placement {
        by.entry(*addr).or_default().push(group.clone());
    }
    let (addr, groups) = by
        .into_iter()
        .max_by_key(|(_, g)| g.len())
        .expect("some group placed");
    (cluster.index_of(addr).expect("a coordinator"), groups)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_s_groups_are_served_again_by_another_coordinator_without_a_rebalance() {
    let _serial = SERIAL.lock().await;
    let Some(mut cluster) = Cluster::start("kill", BIN, LEASE_TTL, SLOTS) else {
        return;
    };
    within(Duration::from_secs(150), async {
        for _ in 0..3 {
            cluster.add(None).await;
        }
        cluster.wait_balanced(MOVE).await;
        let groups = group_names("kill", 9);
        let fleet = Fleet::join(&cluster.alive(), &groups, 3, PARTITIONS, TIMEOUTS).await;
        fleet.wait_settled(MOVE).await;
        let settled_at = Instant::now();
        let generations = fleet.generations();
        fleet.start_committing();
        tokio::time::sleep(Duration::from_millis(500)).await;

        for round in 0..3 {
            let placement = cluster.wait_placed(&groups, MOVE).await;
            let (victim, served) = busiest(&cluster, &placement);
            let killed_at = Instant::now();
            cluster.kill(victim).await;
            let took = fleet.wait_answered_since(killed_at, MOVE).await;
            let after = cluster.wait_placed(&groups, MOVE).await;
            for group in &served {
                assert_ne!(after[group], placement[group], "{group} did not move");
            }
            eprintln!(
                "round {round}: killed c{victim} serving {} groups; every member answered again {took:?} after the kill",
                served.len()
            );
            // Back in the cluster, it takes its share again by graceful hand-offs.
            cluster.restart(victim).await;
            let back = Instant::now();
            cluster.wait_balanced(MOVE).await;
            fleet.wait_answered_since(back, MOVE).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let verdict = assert_safe(&fleet, settled_at, &generations).await;
        eprintln!("{} commits accepted", verdict.accepted);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_cut_off_from_etcd_stops_acting_before_another_takes_its_slots() {
    let _serial = SERIAL.lock().await;
    let Some(mut cluster) = Cluster::start("cut", BIN, LEASE_TTL, SLOTS) else {
        return;
    };
    within(Duration::from_secs(150), async {
        let etcd: SocketAddr = cluster.etcd.endpoint(0).parse().expect("etcd address");
        let proxy = Proxy::start(etcd).await;
        // c0 reaches etcd through the proxy; its clients reach it directly.
        let cut = cluster.add(Some(format!("http://{}", proxy.addr()))).await;
        cluster.add(None).await;
        cluster.add(None).await;
        cluster.wait_balanced(MOVE).await;
        let groups = group_names("cut", 12);
        let fleet = Fleet::join(&cluster.alive(), &groups, 3, PARTITIONS, TIMEOUTS).await;
        fleet.wait_settled(MOVE).await;
        let settled_at = Instant::now();
        let generations = fleet.generations();
        fleet.start_committing();
        let placement = cluster.wait_placed(&groups, MOVE).await;
        let cut_addr = cluster.coordinators[cut].process.addr();
        let stranded: Vec<&String> = groups
            .iter()
            .filter(|g| placement[*g] == cut_addr)
            .collect();
        assert!(!stranded.is_empty(), "c0 serves no group: {placement:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;

        let cut_at = Instant::now();
        proxy.set_blackhole(Direction::Both, true);
        let took = fleet.wait_answered_since(cut_at, MOVE).await;
        eprintln!(
            "c0 cut off from etcd while serving {} groups; every member answered again {took:?} after the cut",
            stranded.len()
        );

        // From the logs (one clock: one machine): c0 stopped acting before any other
        // coordinator adopted one of the slots it acted for.
        let stopped = cluster.log(cut, &[ABANDONED]);
        let mut exited = cluster.exited();
        let stopped_at = match stopped.first() {
            Some(line) => timestamp(line).to_owned(),
            // Its process stopped instead (a store write failed past its acting
            // deadline): its last word is the latest it can have acted.
            None => {
                assert!(
                    exited.iter().any(|(i, _)| *i == cut),
                    "c0 neither stopped acting nor exited"
                );
                let log = cluster.log(cut, &[""]);
                timestamp(log.last().expect("c0 logged")).to_owned()
            }
        };
        let mine = cluster.owned_slots_at(cut, &stopped_at);
        assert!(!mine.is_empty(), "c0 acted for no slot");
        for other in 1..cluster.coordinators.len() {
            for line in cluster.log(other, &[ADOPTED]) {
                let at = timestamp(&line);
                let Some(adopted) = field(&line, "slot").and_then(|s| mine.get(&s)) else {
                    continue;
                };
                assert!(
                    at <= adopted.as_str() || at > stopped_at.as_str(),
                    "c{other} adopted a slot of c0 before c0 stopped acting at {stopped_at}:\n{line}"
                );
            }
        }
        eprintln!("c0 stopped acting at {stopped_at} for slots {:?}", mine.keys());

        // The cut heals: c0 finds its lease gone.
        proxy.set_blackhole(Direction::Both, false);
        let healed = Instant::now();
        tokio::time::sleep(Duration::from_secs(4)).await;
        exited.extend(cluster.exited());
        eprintln!(
            "after the cut healed: c0 {}; it acts for {} slots",
            match exited.iter().find(|(i, _)| *i == cut) {
                Some((_, status)) => format!("exited ({status})"),
                None => "runs".to_owned(),
            },
            cluster.owned_slots(cut).len()
        );
        cluster.wait_balanced(MOVE).await;
        cluster.wait_placed(&groups, MOVE).await;
        fleet.wait_answered_since(healed, MOVE).await;
        assert_safe(&fleet, settled_at, &generations).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_out_to_three_coordinators_and_back_to_one_moves_groups_without_a_rebalance() {
    let _serial = SERIAL.lock().await;
    let Some(mut cluster) = Cluster::start("scale", BIN, LEASE_TTL, SLOTS) else {
        return;
    };
    within(Duration::from_secs(150), async {
        let first = cluster.add(None).await;
        cluster.wait_balanced(MOVE).await;
        let groups = group_names("scale", 9);
        // The members know only the first coordinator: they learn of the others from it.
        let fleet = Fleet::join(&cluster.alive(), &groups, 3, PARTITIONS, TIMEOUTS).await;
        fleet.wait_settled(MOVE).await;
        let settled_at = Instant::now();
        let generations = fleet.generations();
        fleet.start_committing();
        tokio::time::sleep(Duration::from_millis(500)).await;

        let out = Instant::now();
        let second = cluster.add(None).await;
        let third = cluster.add(None).await;
        let counts = cluster.wait_balanced(MOVE).await;
        let placement = cluster.wait_placed(&groups, MOVE).await;
        fleet.wait_answered_since(Instant::now(), MOVE).await;
        let used: std::collections::BTreeSet<_> = placement.values().collect();
        eprintln!(
            "scaled out in {:?}: slots {counts:?}, groups on {} coordinators",
            out.elapsed(),
            used.len()
        );
        assert!(used.len() > 1, "every group stayed on c0: {placement:?}");

        let back = Instant::now();
        for i in [third, second] {
            let status = cluster.terminate(i).await;
            assert!(status.success(), "c{i} exited with {status}");
        }
        let counts = cluster.wait_balanced(MOVE).await;
        assert_eq!(counts, [SLOTS as usize]);
        let placement = cluster.wait_placed(&groups, MOVE).await;
        let first_addr = cluster.coordinators[first].process.addr();
        assert!(
            placement.values().all(|a| *a == first_addr),
            "{placement:?}"
        );
        fleet.wait_answered_since(Instant::now(), MOVE).await;
        eprintln!("scaled back in {:?}", back.elapsed());
        assert_safe(&fleet, settled_at, &generations).await;
    })
    .await;
}

/// `rollcall cluster` shows every slot owned by a live coordinator with its load time,
/// and `rollcall describe` asked at any coordinator answers for a group served by
/// another (it follows `not_coordinator`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_command_shows_owners_and_admin_commands_follow_their_group() {
    let _serial = SERIAL.lock().await;
    let Some(mut cluster) = Cluster::start("show", BIN, LEASE_TTL, SLOTS) else {
        return;
    };
    within(Duration::from_secs(90), async {
        for _ in 0..2 {
            cluster.add(None).await;
        }
        cluster.wait_balanced(MOVE).await;
        let groups = group_names("show", 4);
        let fleet = Fleet::join(&cluster.alive(), &groups, 1, PARTITIONS, TIMEOUTS).await;
        fleet.wait_settled(MOVE).await;

        let endpoint = cluster.endpoint();
        let args = [
            "cluster",
            "--etcd",
            &endpoint,
            "--cluster",
            &cluster.name,
            "--json",
        ];
        let mut report = serde_json::Value::Null;
        let deadline = Instant::now() + MOVE;
        // Load times are noted just after each slot is served.
        while Instant::now() < deadline {
            let out = run_cli(BIN, &args, None).await;
            assert_eq!(out.code, Some(0), "{}", out.stderr);
            report = serde_json::from_str(&out.stdout).expect("JSON");
            let owners = report["owners"].as_object().expect("owners");
            if owners.len() == SLOTS as usize && owners.values().all(|o| o["loaded_ms"].is_u64()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(report["slots"], SLOTS, "{report}");
        let coordinators = report["coordinators"].as_object().expect("coordinators");
        assert_eq!(coordinators.len(), 2, "{report}");
        let owners = report["owners"].as_object().expect("owners");
        assert_eq!(owners.len(), SLOTS as usize, "{report}");
        for owner in owners.values() {
            let id = owner["id"].as_str().expect("id");
            assert!(coordinators.contains_key(id), "{owner} is not live");
            assert!(owner["loaded_ms"].is_u64(), "{report}");
        }
        let stored: u64 = report["groups"]
            .as_object()
            .expect("groups")
            .values()
            .filter_map(serde_json::Value::as_u64)
            .sum();
        assert_eq!(stored, groups.len() as u64, "{report}");
        let table = run_cli(
            BIN,
            &["cluster", "--etcd", &endpoint, "--cluster", &cluster.name],
            None,
        )
        .await;
        assert!(
            table
                .stdout
                .contains(&format!("{SLOTS} slots, {SLOTS} owned, 2 coordinators")),
            "{}",
            table.stdout
        );

        // Every group described through every coordinator, whichever serves it.
        for addr in cluster.alive() {
            for group in &groups {
                let addr = addr.to_string();
                let out = run_cli(BIN, &["describe", group, "--addr", &addr, "--json"], None).await;
                assert_eq!(
                    out.code,
                    Some(0),
                    "describe {group} at {addr}: {}",
                    out.stderr
                );
                assert!(out.stdout.contains(group.as_str()), "{}", out.stdout);
            }
            // A command that polls follows its group too.
            let addr = addr.to_string();
            let out = run_cli(
                BIN,
                &["trace", &groups[0], "--addr", &addr, "--duration", "300ms"],
                None,
            )
            .await;
            assert_eq!(
                out.code,
                Some(0),
                "trace {} at {addr}: {}",
                groups[0],
                out.stderr
            );
            assert!(out.stdout.starts_with("time_s,member_id"), "{}", out.stdout);
        }
    })
    .await;
}
