//! Cluster mode through etcd's own faults (feature `cluster`): three etcd members on
//! loopback, real `rollcall serve --etcd a,b,c` processes, and members through the client
//! crate recorded for the oracle (`rollcall_tests::fleet`). etcd's leader killed, one
//! member killed and restarted, and all of etcd down for 10 s. Without an `etcd` binary
//! each test prints `SKIPPED` and passes (fails with `ROLLCALL_REQUIRE_ETCD=1`).
//!
//! The coordinators' etcd lease is 2 s, etcd runs with its default timings (heartbeat
//! 100 ms, election timeout 1 s); the tests run one at a time and each is bounded.
#![cfg(feature = "cluster")]

use std::time::{Duration, Instant};

use rollcall_client::Event;
use rollcall_tests::cluster::{assert_safe, events_since, within, Cluster, ABANDONED, SERIAL};
use rollcall_tests::fleet::{group_names, Fleet, Timeouts};

const BIN: &str = env!("CARGO_BIN_EXE_rollcall-e2e");
const LEASE_TTL: &str = "2s";
/// The same, as a duration.
const TTL: Duration = Duration::from_secs(2);
const SLOTS: u32 = 8;
const PARTITIONS: u32 = 6;
const ETCD_MEMBERS: usize = 3;
/// Sessions of 8 s: longer than any gap in service a leader kill may cause (see
/// [`AFTER_LEADER_KILL`]).
const TIMEOUTS: Timeouts = Timeouts {
    session: Duration::from_secs(8),
    lease: Duration::from_secs(4),
    heartbeat: Duration::from_millis(250),
};
/// The longest a hand-off, a placement or a settling may take before a test fails.
const MOVE: Duration = Duration::from_secs(20);
/// How long etcd may take to elect a leader: its election timeout is 1 s, a candidate
/// waits up to twice that, and a split vote costs another round; more on a loaded
/// machine.
const ELECTION: Duration = Duration::from_secs(10);
/// Every member is answered again within this of the etcd leader's kill: a new leader
/// within about 3 s (a follower notices after its randomized 1-2 s election timeout, and
/// a split vote costs another round; up to 2.9 s was seen here), plus the
/// coordinators' lease TTL (2 s: one that stopped acting meanwhile acts again once a
/// keepalive is answered), plus 2 s to load its slots again, for clients to reconnect
/// and for a heartbeat (every 250 ms) to be answered. Under the 8 s session, so no
/// member can be lost.
const AFTER_LEADER_KILL: Duration = Duration::from_secs(7);
/// Rounds of the leader-kill test.
const LEADER_KILLS: usize = 3;
/// With a follower down or rejoining, service does not pause: every member has a
/// heartbeat (every 250 ms) answered within this.
const UNDISTURBED: Duration = Duration::from_secs(2);

/// Three etcd members, three coordinators on all of them, and a fleet of 9 groups of 3
/// members, settled and committing. `None` when etcd is not installed.
async fn start(test: &str, timeouts: Timeouts) -> Option<(Cluster, Fleet, Instant, Vec<u32>)> {
    let mut cluster = Cluster::start_on(test, BIN, LEASE_TTL, SLOTS, ETCD_MEMBERS)?;
    for _ in 0..3 {
        cluster.add(None).await;
    }
    cluster.wait_balanced(MOVE).await;
    let groups = group_names(test, 9);
    let fleet = Fleet::join(&cluster.alive(), &groups, 3, PARTITIONS, timeouts).await;
    fleet.wait_settled(MOVE).await;
    cluster.wait_placed(&groups, MOVE).await;
    let settled_at = Instant::now();
    let generations = fleet.generations();
    fleet.start_committing();
    tokio::time::sleep(Duration::from_millis(500)).await;
    Some((cluster, fleet, settled_at, generations))
}

/// How many times each coordinator has stopped acting for every slot so far.
fn abandons(cluster: &Cluster) -> Vec<usize> {
    (0..cluster.coordinators.len())
        .map(|i| cluster.log(i, &[ABANDONED]).len())
        .collect()
}

/// Kills etcd's leader while members heartbeat and commit, three rounds: the
/// coordinators carry on (or stop acting for a moment and come back), no member is
/// lost or rebalanced, and the killed member, restarted on its data, rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_etcd_s_leader_loses_no_member_and_no_commit() {
    let _serial = SERIAL.lock().await;
    within(Duration::from_secs(90), async {
        let Some((mut cluster, fleet, settled_at, generations)) =
            start("etcd-leader", TIMEOUTS).await
        else {
            return;
        };
        for round in 0..LEADER_KILLS {
            let before = abandons(&cluster);
            let leader = cluster.etcd.wait_leader(ELECTION).await;
            let term = cluster.etcd.term().await.expect("etcd answers");
            let killed_at = Instant::now();
            cluster.etcd.kill(leader);
            let next = cluster.etcd.wait_leader(ELECTION).await;
            let elected = killed_at.elapsed();
            assert_ne!(next, leader, "the killed member still leads");
            // The kill cost etcd its leader: the members held an election.
            let term_after = cluster.etcd.term().await.expect("etcd answers");
            assert!(
                term_after > term,
                "no election after e{leader} was killed: term {term_after}"
            );
            let took = fleet.wait_answered_since(killed_at, AFTER_LEADER_KILL).await;
            let after = abandons(&cluster);
            let stopped: Vec<usize> = (0..after.len())
                .filter(|i| after[*i] > before[*i])
                .collect();
            eprintln!(
                "round {round}: etcd leader e{leader} killed, e{next} elected after {elected:?}; coordinators that stopped acting for a while {stopped:?}; every member answered again {took:?} after the kill"
            );

            // Back on its data, it rejoins: all three members healthy and agreeing on
            // a leader, every slot served, every member answered.
            tokio::task::block_in_place(|| cluster.etcd.restart(leader));
            let back = Instant::now();
            cluster.etcd.wait_leader(ELECTION).await;
            cluster.wait_balanced(MOVE).await;
            cluster.wait_placed(&fleet.group_list(), MOVE).await;
            fleet.wait_answered_since(back, MOVE).await;
        }
        let exited = cluster.exited();
        assert!(exited.is_empty(), "coordinators exited: {exited:?}");
        let verdict = assert_safe(&fleet, settled_at, &generations).await;
        eprintln!("{} commits accepted", verdict.accepted);
    })
    .await;
}

/// Kills an etcd follower and restarts it on its data while members heartbeat and
/// commit: etcd keeps its quorum, so no coordinator steps out, no member is suspended,
/// and every one is answered throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_follower_killed_and_restarted_does_not_disturb_the_groups() {
    let _serial = SERIAL.lock().await;
    within(Duration::from_secs(90), async {
        let Some((mut cluster, fleet, settled_at, generations)) =
            start("etcd-follower", TIMEOUTS).await
        else {
            return;
        };
        let before = abandons(&cluster);
        let leader = cluster.etcd.wait_leader(ELECTION).await;
        let follower = (leader + 1) % ETCD_MEMBERS;
        let killed_at = Instant::now();
        cluster.etcd.kill(follower);
        // A few lease renewals and many commits with the member down.
        let took = fleet.wait_answered_since(killed_at, UNDISTURBED).await;
        tokio::time::sleep(TTL).await;
        fleet.wait_answered_since(Instant::now(), UNDISTURBED).await;

        tokio::task::block_in_place(|| cluster.etcd.restart(follower));
        let back = Instant::now();
        let rejoined = fleet.wait_answered_since(back, UNDISTURBED).await;
        tokio::time::sleep(TTL).await;
        fleet.wait_answered_since(Instant::now(), UNDISTURBED).await;
        cluster.etcd.wait_leader(ELECTION).await;
        eprintln!(
            "etcd follower e{follower} killed: every member answered {took:?} after; restarted: {rejoined:?} after"
        );

        assert_eq!(abandons(&cluster), before, "a coordinator stopped acting");
        let suspended: Vec<(usize, Event)> = events_since(&fleet, killed_at)
            .into_iter()
            .filter(|(_, e)| matches!(e, Event::Suspended { .. }))
            .collect();
        assert!(suspended.is_empty(), "members suspended: {suspended:#?}");
        let exited = cluster.exited();
        assert!(exited.is_empty(), "coordinators exited: {exited:?}");
        assert_safe(&fleet, settled_at, &generations).await;
    })
    .await;
}

/// How long all of etcd stays down: the figure the cluster is specified against, five
/// times the coordinators' lease TTL.
const OUTAGE: Duration = Duration::from_secs(10);
/// Sessions that outlast the outage: members go unanswered from when their coordinator
/// stops acting (within the TTL after etcd went away) until it serves again after etcd
/// is back: the outage, etcd's members healthy again (a second or two) and
/// [`AFTER_OUTAGE`], about 17 s at most. 20 s sessions outlast that, so no member may
/// be lost and no generation may change.
const OUTAGE_TIMEOUTS: Timeouts = Timeouts {
    session: Duration::from_secs(20),
    ..TIMEOUTS
};
/// Every member is answered again within this of etcd being back (all members healthy):
/// a keepalive answered (every TTL / 3, after the etcd client reconnects), the slots
/// claimed again at the next reconciliation (every 1 s) and loaded, clients reconnected
/// (backoff up to 200 ms) and a heartbeat (every 250 ms) answered: under 3 s, and 2 s
/// of room for a loaded machine.
const AFTER_OUTAGE: Duration = Duration::from_secs(5);

/// All of etcd down for 10 s (five lease TTLs), then back: every coordinator stops
/// acting by itself within its lease TTL, none exits, members see at most `Suspended`
/// then `Resumed` (their sessions are longer than the outage), and every one is
/// answered again soon after etcd is back, in the same generation, with every
/// acknowledged commit kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_are_served_again_after_all_of_etcd_was_down_for_ten_seconds() {
    let _serial = SERIAL.lock().await;
    within(Duration::from_secs(90), async {
        let Some((mut cluster, fleet, settled_at, generations)) =
            start("etcd-down", OUTAGE_TIMEOUTS).await
        else {
            return;
        };
        let all: Vec<usize> = (0..cluster.coordinators.len()).collect();
        let before = abandons(&cluster);
        let down_at = Instant::now();
        cluster.etcd.kill_all();
        // Each stops acting when its lease could no longer be known alive: at most the
        // TTL after its last keepalive answered, which was before etcd went away.
        let stopped = cluster.wait_abandoned(&all, &before, TTL).await;
        let down_for = OUTAGE.saturating_sub(down_at.elapsed());
        tokio::time::sleep(down_for).await;
        let exited = cluster.exited();
        assert!(exited.is_empty(), "coordinators exited without etcd: {exited:?}");

        tokio::task::block_in_place(|| cluster.etcd.restart_all());
        let up = Instant::now();
        let took = fleet.wait_answered_since(up, AFTER_OUTAGE).await;
        let counts = cluster.wait_balanced(MOVE).await;
        cluster.wait_placed(&fleet.group_list(), MOVE).await;
        eprintln!(
            "etcd down {:?}: coordinators stopped acting {stopped:?} after; slots {counts:?} again and every member answered {took:?} after etcd was back",
            up - down_at
        );
        let exited = cluster.exited();
        assert!(exited.is_empty(), "coordinators exited: {exited:?}");
        let told: Vec<(usize, Event)> = events_since(&fleet, settled_at)
            .into_iter()
            .filter(|(_, e)| !matches!(e, Event::Suspended { .. } | Event::Resumed { .. }))
            .collect();
        assert!(told.is_empty(), "members told more than Suspended and Resumed: {told:#?}");
        assert_safe(&fleet, settled_at, &generations).await;
    })
    .await;
}
