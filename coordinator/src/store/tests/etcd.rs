//! The etcd store against the same expectations as the others (round trips, retention,
//! deletions, floors, one shard's groups), and what only a shared store has: fenced
//! writes, one slot loaded alone, a batch larger than one transaction, durability
//! across an etcd restart. Each test starts its own etcd and skips loudly without one.

use crate::cluster::testing::EtcdProcess;
use crate::cluster::{ClusterError, ClusterOptions, Etcd, EtcdStore};
use crate::server::slot_of;

use super::seam::{check_floors_per_group, check_load_groups};
use super::*;

const SLOTS: u32 = 8;

/// An etcd, a runtime for the client, and coordinators connected to it.
struct Cluster {
    etcd: EtcdProcess,
    runtime: tokio::runtime::Runtime,
}

impl Cluster {
    fn start(test: &str) -> Option<Self> {
        let etcd = EtcdProcess::start(test)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Some(Self { etcd, runtime })
    }

    fn connect(&self, id: &str) -> Arc<Etcd> {
        let opts = ClusterOptions {
            endpoints: vec![self.etcd.endpoint()],
            name: "store".to_owned(),
            id: id.to_owned(),
            advertise: format!("{id}:9092"),
            lease_ttl: Duration::from_secs(5),
            slots: SLOTS,
        };
        self.runtime.block_on(Etcd::connect(&opts)).unwrap()
    }

    /// A coordinator that owns every slot, and its store. With `load`, every slot is
    /// loaded once adopted, as a coordinator does before serving it (its writes then
    /// read no infos); without, every write reads them.
    fn owner_of_all_loaded(&self, id: &str, load: bool) -> (Arc<Etcd>, Arc<EtcdStore>) {
        let etcd = self.connect(id);
        let store = etcd.store();
        for slot in 0..SLOTS {
            let token = self.runtime.block_on(etcd.claim(slot)).unwrap().unwrap();
            store.adopt(slot, token);
            if load {
                store.load_slot(slot).unwrap();
            }
        }
        (etcd, store)
    }

    fn owner_of_all(&self, id: &str) -> (Arc<Etcd>, Arc<EtcdStore>) {
        self.owner_of_all_loaded(id, true)
    }
}

#[test]
fn etcd_round_trips_offsets_and_snapshots() {
    let Some(cluster) = Cluster::start("store-round-trip") else {
        return;
    };
    let (_etcd, store) = cluster.owner_of_all("a");
    store.write(&sample_records()).unwrap();
    assert_eq!(sorted(store.load().unwrap()), expected_sample());
    store.write(&[]).unwrap();
    assert_eq!(sorted(store.load().unwrap()), expected_sample());
}

#[test]
fn etcd_purges_only_groups_empty_for_longer_than_retention() {
    for load in [true, false] {
        let Some(cluster) = Cluster::start("store-retention") else {
            return;
        };
        let (_etcd, store) = cluster.owner_of_all_loaded("a", load);
        let clock = TestClock::at_ms(START_MS);
        store.set_clock(clock.clock());
        check_retention(&*store, &clock, &|group| store.empty_since(group).unwrap());
    }
}

#[test]
fn etcd_group_deleted_removes_the_group_in_record_order() {
    for load in [true, false] {
        let Some(cluster) = Cluster::start("store-deleted") else {
            return;
        };
        let (_etcd, store) = cluster.owner_of_all_loaded("a", load);
        let clock = TestClock::at_ms(START_MS);
        store.set_clock(clock.clock());
        check_group_deleted(&*store, &clock, &|group| store.empty_since(group).unwrap());
    }
}

#[test]
fn etcd_keeps_a_floor_per_group_and_loads_one_shards_groups() {
    let Some(cluster) = Cluster::start("store-seam") else {
        return;
    };
    let (_etcd, store) = cluster.owner_of_all("a");
    check_floors_per_group(&*store);
    let (_other, second) = {
        // A second cluster name: a store of its own in the same etcd.
        let opts = ClusterOptions {
            endpoints: vec![cluster.etcd.endpoint()],
            name: "store-two".to_owned(),
            id: "b".to_owned(),
            advertise: "b:9092".to_owned(),
            lease_ttl: Duration::from_secs(5),
            slots: SLOTS,
        };
        let etcd = cluster.runtime.block_on(Etcd::connect(&opts)).unwrap();
        for slot in 0..SLOTS {
            let token = cluster.runtime.block_on(etcd.claim(slot)).unwrap().unwrap();
            etcd.store().adopt(slot, token);
        }
        let store = etcd.store();
        (etcd, store)
    };
    check_load_groups(&*second);
}

#[test]
fn etcd_loads_one_slot_alone() {
    let Some(cluster) = Cluster::start("store-slot") else {
        return;
    };
    let (_etcd, store) = cluster.owner_of_all("a");
    store.write(&sample_records()).unwrap();
    store
        .write(&[
            Record::Group(snapshot("gone", 4, &[])),
            Record::GroupDeleted {
                group: "gone".into(),
            },
        ])
        .unwrap();
    let mut all = RestoredState::default();
    for slot in 0..SLOTS {
        let state = store.load_slot(slot).unwrap();
        assert!(state
            .groups
            .iter()
            .all(|g| slot_of(&g.group, SLOTS) == slot));
        assert!(state
            .offsets
            .iter()
            .all(|o| slot_of(&o.group, SLOTS) == slot));
        assert!(state.floors.iter().all(|(g, _)| slot_of(g, SLOTS) == slot));
        all.groups.extend(state.groups);
        all.offsets.extend(state.offsets);
        all.floors.extend(state.floors);
    }
    let mut expected = expected_sample();
    expected.floors = vec![("gone".to_owned(), 4)];
    assert_eq!(sorted(all), expected, "the slots together are everything");
}

#[test]
fn etcd_refuses_a_write_after_another_owner_claimed_the_slot() {
    let Some(cluster) = Cluster::start("store-fenced") else {
        return;
    };
    let (a, old) = cluster.owner_of_all("a");
    let b = cluster.connect("b");
    let group = "billing";
    let slot = slot_of(group, SLOTS);
    let other = (0..100)
        .map(|i| format!("g{i}"))
        .find(|g| slot_of(g, SLOTS) != slot)
        .unwrap();
    old.write(&[offset(group, "t", 0, 1, "")]).unwrap();

    // The owner key goes (a release, or the lease expiring) and b claims the slot; a's
    // store still holds its old token.
    cluster.runtime.block_on(a.release(slot)).unwrap();
    let token = cluster.runtime.block_on(b.claim(slot)).unwrap().unwrap();
    let new = b.store();
    new.adopt(slot, token);

    let refused = old.write(&[offset(group, "t", 0, 2, ""), offset(&other, "t", 0, 2, "")]);
    assert_eq!(refused, Err(StoreError::Fenced { slot }));
    assert_eq!(
        offset_of(&new.load().unwrap(), &other, "t", 0),
        None,
        "all or nothing"
    );
    // a still writes the slots it owns; b writes its own.
    old.write(&[offset(&other, "t", 0, 3, "")]).unwrap();
    new.write(&[offset(group, "t", 0, 4, "")]).unwrap();
    let state = new.load_slot(slot).unwrap();
    assert_eq!(offset_of(&state, group, "t", 0), Some(4));
    // b cannot write a slot it never adopted.
    assert_eq!(
        new.write(&[offset(&other, "t", 0, 5, "")]),
        Err(StoreError::Fenced {
            slot: slot_of(&other, SLOTS)
        })
    );
}

#[test]
fn etcd_refuses_a_write_after_the_lease_is_revoked() {
    let Some(cluster) = Cluster::start("store-revoked") else {
        return;
    };
    let (a, store) = cluster.owner_of_all("a");
    store.write(&[offset("g", "t", 0, 1, "")]).unwrap();
    cluster.runtime.block_on(a.leave());
    let slot = slot_of("g", SLOTS);
    assert_eq!(
        store.write(&[offset("g", "t", 0, 2, "")]),
        Err(StoreError::Fenced { slot })
    );
    assert_eq!(offset_of(&store.load().unwrap(), "g", "t", 0), Some(1));
}

#[test]
fn etcd_splits_a_batch_larger_than_one_transaction() {
    let Some(cluster) = Cluster::start("store-split") else {
        return;
    };
    let (_etcd, store) = cluster.owner_of_all("a");
    let mut records = Vec::new();
    for g in 0..300 {
        records.push(Record::Group(snapshot(&format!("group-{g}"), 1, &["m"])));
        records.push(offset(&format!("group-{g}"), "t", 0, g, ""));
    }
    // One group with more offsets than one transaction holds.
    for p in 0..(3 * crate::cluster::MAX_TXN_OPS as u32) {
        records.push(offset("wide", "t", p, i64::from(p), "m"));
    }
    // Snapshots larger than one request: several chunks by size.
    let members: Vec<String> = (0..2000).map(|m| format!("member-{m}")).collect();
    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    for g in 0..3 {
        records.push(Record::Group(snapshot(&format!("big-{g}"), 2, &members)));
    }
    store.write(&records).unwrap();
    let state = store.load().unwrap();
    assert_eq!(state.groups.len(), 303);
    assert_eq!(state.offsets.len(), 300 + 3 * crate::cluster::MAX_TXN_OPS);
    assert_eq!(offset_of(&state, "wide", "t", 200), Some(200));

    // Deleting the wide group with an offset after it: the stored ones go one by one.
    store
        .write(&[
            Record::GroupDeleted {
                group: "wide".into(),
            },
            offset("wide", "t", 7, 70, ""),
        ])
        .unwrap();
    let state = store.load().unwrap();
    let wide: Vec<i64> = state
        .offsets
        .iter()
        .filter(|o| o.group == "wide")
        .map(|o| o.offset)
        .collect();
    assert_eq!(wide, [70]);
}

#[test]
fn etcd_keeps_the_data_across_an_etcd_restart() {
    let Some(mut cluster) = Cluster::start("store-restart") else {
        return;
    };
    let (_etcd, store) = cluster.owner_of_all("a");
    store.write(&sample_records()).unwrap();
    cluster.etcd.restart();
    assert_eq!(sorted(store.load().unwrap()), expected_sample());
    // The lease outlived the short outage: the same owner writes on.
    store
        .write(&[offset("billing", "orders", 0, 99, "")])
        .unwrap();
    let state = store.load().unwrap();
    assert_eq!(offset_of(&state, "billing", "orders", 0), Some(99));
}

#[test]
fn etcd_retries_a_write_through_a_short_outage_and_gives_up_at_the_deadline() {
    let Some(mut cluster) = Cluster::start("store-outage") else {
        return;
    };
    let (etcd, store) = cluster.owner_of_all("a");
    store.write(&[offset("g", "t", 0, 1, "")]).unwrap();

    // etcd comes back within the lease: the write waits for it and succeeds.
    cluster.etcd.kill();
    let written = std::thread::scope(|s| {
        let writer = s.spawn(|| store.write(&[offset("g", "t", 0, 2, "")]));
        std::thread::sleep(Duration::from_millis(500));
        cluster.etcd.restart();
        writer.join().unwrap()
    });
    assert_eq!(written, Ok(()));
    assert_eq!(offset_of(&store.load().unwrap(), "g", "t", 0), Some(2));

    // etcd stays away: the write is tried until shortly before the acting deadline (an
    // etcd election may end meanwhile), and fails by then, not later.
    cluster.etcd.kill();
    let deadline = etcd.acting_deadline();
    let failed = store.write(&[offset("g", "t", 0, 3, "")]);
    assert!(matches!(failed, Err(StoreError::Io(_))), "{failed:?}");
    let now = Instant::now();
    let early = deadline.saturating_duration_since(now);
    assert!(
        early < Duration::from_millis(250),
        "gave up {early:?} before the deadline"
    );
    let late = now.saturating_duration_since(deadline);
    assert!(
        late < Duration::from_secs(3),
        "gave up {late:?} after the deadline"
    );
}

#[test]
fn etcd_requests_that_fail_at_once_are_tried_until_shortly_before_the_deadline() {
    let Some(mut cluster) = Cluster::start("store-retry") else {
        return;
    };
    let (etcd, store) = cluster.owner_of_all("a");
    // No renewal is answered any more: the acting deadline stays where it is.
    cluster.etcd.kill();
    let deadline = etcd.acting_deadline();
    let mut tries = 0;
    let result = cluster.runtime.block_on(store.retry(|| {
        tries += 1;
        async { Err::<(), _>(ClusterError::Etcd("etcdserver: leader changed".into())) }
    }));
    let now = Instant::now();
    assert!(matches!(result, Err(StoreError::Io(_))), "{result:?}");
    // Not a whole backoff (up to a second) early: an etcd election that ends in the
    // meantime keeps the coordinator's slots.
    let early = deadline.saturating_duration_since(now);
    assert!(
        early < Duration::from_millis(50),
        "gave up {early:?} before the deadline, after {tries} tries"
    );
    assert!(
        now < deadline + Duration::from_millis(50),
        "tried past the deadline"
    );
}

#[test]
fn etcd_writes_under_way_land_in_submission_order_and_stay_fenced() {
    let Some(cluster) = Cluster::start("store-pipelined") else {
        return;
    };
    let (a, store) = cluster.owner_of_all("a");
    let committer = GroupCommitter::new(store.clone()).unwrap();
    assert!(committer.writes_in_flight() > 1);
    // Many batches to the same keys (and a group's snapshot and info), submitted
    // without waiting: each lands after the one before it.
    let answers: Vec<_> = (0..60)
        .map(|i| {
            let mut records = vec![offset("g", "t", 0, i, ""), offset("h", "t", 0, i, "")];
            if i % 7 == 0 {
                records.push(Record::Group(snapshot("g", i as u32 + 1, &["m"])));
            }
            committer.submit(records)
        })
        .collect();
    for answer in answers {
        answer.blocking_recv().unwrap().unwrap();
    }
    let state = store.load().unwrap();
    assert_eq!(offset_of(&state, "g", "t", 0), Some(59));
    assert_eq!(offset_of(&state, "h", "t", 0), Some(59));
    let g = state.groups.iter().find(|s| s.group == "g").unwrap();
    assert_eq!(g.generation, 57);

    // The lease goes while writes are under way: every write after is refused, and
    // nothing lands after the refusal.
    let slot = slot_of("g", SLOTS);
    let before: Vec<_> = (0..5)
        .map(|i| committer.submit(vec![offset("g", "t", 0, 100 + i, "")]))
        .collect();
    cluster.runtime.block_on(a.leave());
    let after: Vec<_> = (0..5)
        .map(|i| committer.submit(vec![offset("g", "t", 0, 200 + i, "")]))
        .collect();
    let mut landed = None;
    for (i, answer) in before.into_iter().enumerate() {
        match answer.blocking_recv().unwrap() {
            Ok(()) => landed = Some(100 + i as i64),
            Err(e) => assert_eq!(e, StoreError::Fenced { slot }),
        }
    }
    for answer in after {
        assert_eq!(
            answer.blocking_recv().unwrap(),
            Err(StoreError::Fenced { slot })
        );
    }
    assert_eq!(
        offset_of(&store.load().unwrap(), "g", "t", 0),
        Some(landed.unwrap_or(59))
    );
}

/// Durable offset commits per second through a [`GroupCommitter`] over the etcd store
/// and over redb, in the same run: `clients` tasks each commit one offset at a time
/// for `secs` seconds. A figure, not a check:
///
/// `cargo test -p rollcall-coordinator --features cluster --release --lib
///  store::tests::etcd::durable_commits_per_second -- --ignored --nocapture`
#[test]
#[ignore = "a measurement; run it by name"]
fn durable_commits_per_second() {
    let Some(cluster) = Cluster::start("store-bench") else {
        return;
    };
    let secs = std::env::var("ROLLCALL_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5u64);
    let clients = 256u32;
    let (_etcd, etcd_store) = cluster.owner_of_all("a");
    let dir = TempDir::new("bench-redb");
    let redb: Arc<dyn Store> = Arc::new(RedbStore::open(dir.path()).unwrap());
    for (name, store) in [("redb", redb), ("etcd", etcd_store as Arc<dyn Store>)] {
        let committer = Arc::new(GroupCommitter::new(store).unwrap());
        let until = Instant::now() + Duration::from_secs(secs);
        let started = Instant::now();
        let latencies = cluster.runtime.block_on(async {
            let tasks: Vec<_> = (0..clients)
                .map(|t| {
                    let committer = Arc::clone(&committer);
                    tokio::spawn(async move {
                        let mut latencies = Vec::new();
                        let mut i = 0;
                        while Instant::now() < until {
                            let sent = Instant::now();
                            committer
                                .commit(vec![offset(&format!("g{}", t % 300), "t", t, i, "")])
                                .await
                                .unwrap();
                            latencies.push(sent.elapsed());
                            i += 1;
                        }
                        latencies
                    })
                })
                .collect();
            let mut all = Vec::new();
            for task in tasks {
                all.extend(task.await.unwrap());
            }
            all
        });
        let elapsed = started.elapsed().as_secs_f64();
        let mut latencies = latencies;
        latencies.sort();
        let stats = committer.stats();
        let p99 = latencies[latencies.len() * 99 / 100];
        eprintln!(
            "{name}: {:.0} commits/s, p99 {:.1} ms, {} batches ({:.0} records each)",
            latencies.len() as f64 / elapsed,
            p99.as_secs_f64() * 1000.0,
            stats.batches,
            stats.records as f64 / stats.batches.max(1) as f64,
        );
    }
}
