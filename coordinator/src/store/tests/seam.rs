//! The seam a cluster needs: per-group generation floors (and the one floor earlier
//! files kept), one shard's groups loaded alone, and fencing tokens carried to the
//! store.

use parking_lot::Mutex;

use super::*;

/// Both stores keep a deleted group's generation under its own id until the group has
/// a snapshot again, and never under another group's.
pub(super) fn check_floors_per_group(store: &dyn Store) {
    store
        .write(&[
            Record::Group(snapshot("g", 5, &[])),
            Record::Group(snapshot("h", 2, &[])),
            Record::GroupDeleted { group: "g".into() },
        ])
        .unwrap();
    let state = store.load().unwrap();
    assert_eq!(state.floors, [("g".to_owned(), 5)]);
    assert_eq!(state.generation_floor, 0);
    // Created again: its snapshot speaks for it, and the floor goes.
    store
        .write(&[Record::Group(snapshot("g", 6, &[]))])
        .unwrap();
    assert!(store.load().unwrap().floors.is_empty());
    store
        .write(&[
            Record::GroupDeleted { group: "g".into() },
            Record::GroupDeleted { group: "h".into() },
            // Never snapshotted: nothing to keep.
            Record::GroupDeleted {
                group: "offsets-only".into(),
            },
        ])
        .unwrap();
    let mut floors = store.load().unwrap().floors;
    floors.sort();
    assert_eq!(floors, [("g".to_owned(), 6), ("h".to_owned(), 2)]);
}

#[test]
fn redb_keeps_a_floor_per_group() {
    let dir = TempDir::new("floors");
    let store = RedbStore::open(dir.path()).unwrap();
    check_floors_per_group(&store);
    drop(store);
    let store = RedbStore::open(dir.path()).unwrap();
    assert_eq!(store.load().unwrap().floors.len(), 2, "floors are durable");
}

#[test]
fn memory_keeps_a_floor_per_group() {
    check_floors_per_group(&MemoryStore::new());
}

/// A file as the first layout wrote it: no `floors` table, and the largest generation
/// of every group deleted in `info`'s `generation_floor`. It restores with that floor
/// under every group, and a deletion after the upgrade keeps its floor per group.
#[test]
fn redb_restores_a_file_that_kept_one_floor_for_every_group() {
    let dir = TempDir::new("old-floor");
    let store = RedbStore::open(dir.path()).unwrap();
    // Written table by table, as the first layout did (a write through the store would
    // create the `floors` table).
    let mut value = vec![1u8];
    snapshot_json::encode(&snapshot("billing", 3, &["m-1"]), &mut value).unwrap();
    store.put_raw("groups", b"billing", &value);
    let mut offset_value = vec![1u8];
    offset_value.extend_from_slice(&5i64.to_le_bytes());
    offset_value.extend_from_slice(b"kept");
    store.put_raw(
        "offsets",
        &RedbStore::offset_key("billing", "orders", 1),
        &offset_value,
    );
    store.put_raw("info", b"generation_floor", &7u32.to_le_bytes());
    drop(store);

    let store = RedbStore::open(dir.path()).unwrap();
    let state = store.load().unwrap();
    assert_eq!(state.generation_floor, 7);
    assert!(state.floors.is_empty());
    assert_eq!(state.groups.len(), 1);
    assert_eq!(offset_of(&state, "billing", "orders", 1), Some(5));

    // The core puts that floor under every group.
    let mut core = crate::core::Coordinator::new(crate::core::CoreConfig::default());
    let now = Instant::now();
    core.restore(now, state);
    let join = rollcall_protocol::Request::Join(rollcall_protocol::JoinRequest {
        placement: None,
        group: "new".into(),
        member_id: None,
        instance_id: None,
        client_id: "test".into(),
        join_token: 1,
        subscription: vec![rollcall_protocol::TopicSubscription {
            topic: "orders".into(),
            partitions: 1,
        }],
        session_timeout_ms: 10_000,
        progress_timeout_ms: 60_000,
        rebalance_timeout_ms: 30_000,
        lease_timeout_ms: 0,
        detector: String::new(),
    });
    match core.handle_request(now, 1, join).response {
        rollcall_protocol::Response::Join(j) => assert!(j.generation >= 7, "{j:?}"),
        other => panic!("{other:?}"),
    }

    // Deleted after the upgrade: its floor is its own, the old one is still read.
    store
        .write(&[Record::GroupDeleted {
            group: "billing".into(),
        }])
        .unwrap();
    let state = store.load().unwrap();
    assert_eq!(state.floors, [("billing".to_owned(), 3)]);
    assert_eq!(state.generation_floor, 7);
}

#[test]
fn redb_reports_a_floor_that_does_not_decode() {
    let dir = TempDir::new("bad-floor");
    let store = RedbStore::open(dir.path()).unwrap();
    store.put_raw("floors", b"g", &[1, 2]);
    let err = store.load().unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt { reason, .. } if reason.contains("\"g\"")),
        "{err:?}"
    );
}

/// One shard's groups load alone: their snapshots, offsets and floors, and the floor
/// under every group.
pub(super) fn check_load_groups(store: &dyn Store) {
    store.write(&sample_records()).unwrap();
    store
        .write(&[
            Record::Group(snapshot("gone", 4, &[])),
            Record::GroupDeleted {
                group: "gone".into(),
            },
        ])
        .unwrap();
    let keep = |g: &str| g == "billing" || g == "gone";
    let mut expected = expected_sample();
    expected.retain(keep);
    expected.floors = vec![("gone".to_owned(), 4)];
    assert_eq!(sorted(store.load_groups(&keep).unwrap()), expected);
    assert_eq!(expected.groups.len(), 1);
    assert_eq!(expected.offsets.len(), 3);
    let none = store.load_groups(&|_| false).unwrap();
    assert_eq!(none, RestoredState::default());
}

#[test]
fn redb_loads_one_shards_groups() {
    let dir = TempDir::new("load-groups");
    check_load_groups(&RedbStore::open(dir.path()).unwrap());
}

#[test]
fn memory_loads_one_shards_groups() {
    check_load_groups(&MemoryStore::new());
}

/// A store that remembers the token of every write.
#[derive(Debug, Default)]
struct Tokens {
    inner: MemoryStore,
    seen: Mutex<Vec<(FencingToken, usize)>>,
}

impl Store for Tokens {
    fn load(&self) -> Result<RestoredState, StoreError> {
        self.inner.load()
    }
    fn write(&self, records: &[Record]) -> Result<(), StoreError> {
        self.write_fenced(FencingToken::SOLE, records)
    }
    fn write_fenced(&self, token: FencingToken, records: &[Record]) -> Result<(), StoreError> {
        self.seen.lock().push((token, records.len()));
        self.inner.write(records)
    }
    fn expired_groups(&self, retention: Duration) -> Result<Vec<String>, StoreError> {
        self.inner.expired_groups(retention)
    }
}

/// The committer writes each submission with its owner's token, and never puts two
/// owners' records in one write.
#[test]
fn group_commit_writes_with_each_owners_token() {
    let store = Arc::new(Tokens::default());
    // Held up by a slow first write, the next submissions queue behind it together.
    store.inner.set_write_delay(Duration::from_millis(200));
    let committer = GroupCommitter::new(store.clone()).unwrap();
    let first = committer.submit(vec![offset("g", "t", 0, 0, "")]);
    wait_for(|| store.inner.write_calls() == 1);
    let answers = [
        committer.submit_fenced(FencingToken(3), vec![offset("g", "t", 0, 1, "")]),
        committer.submit_fenced(FencingToken(3), vec![offset("g", "t", 1, 1, "")]),
        committer.submit_fenced(FencingToken(4), vec![offset("h", "t", 0, 1, "")]),
    ];
    first.blocking_recv().unwrap().unwrap();
    for answer in answers {
        answer.blocking_recv().unwrap().unwrap();
    }
    assert_eq!(
        *store.seen.lock(),
        [
            (FencingToken::SOLE, 1),
            (FencingToken(3), 2),
            (FencingToken(4), 1)
        ]
    );
}

/// The stores with one writer accept any token.
#[test]
fn the_stores_with_one_writer_ignore_the_token() {
    let dir = TempDir::new("token");
    let redb = RedbStore::open(dir.path()).unwrap();
    let memory = MemoryStore::new();
    for store in [&redb as &dyn Store, &memory] {
        store
            .write_fenced(FencingToken(9), &[offset("g", "t", 0, 1, "")])
            .unwrap();
        store
            .write_fenced(FencingToken(2), &[offset("g", "t", 0, 2, "")])
            .unwrap();
        assert_eq!(offset_of(&store.load().unwrap(), "g", "t", 0), Some(2));
    }
}
