//! Both stores against the same expectations: round trips, atomic batches, retention's
//! marks, the generation floor, and every kind of damage a redb file can show.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

#[cfg(feature = "cluster")]
mod etcd;
mod pipelined;
mod seam;

use super::*;
use crate::core::{
    GroupSnapshot, HeldSnapshot, InstanceSnapshot, MemberSnapshot, OffsetRecord, Record,
    RestoredState,
};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "rollcall-store-{name}-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn file(&self) -> PathBuf {
        self.0.join(super::redb::FILE_NAME)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A clock the test sets, in ms since the UNIX epoch.
#[derive(Clone)]
struct TestClock(Arc<AtomicU64>);

impl TestClock {
    fn at_ms(ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(ms)))
    }

    fn set_ms(&self, ms: u64) {
        self.0.store(ms, Ordering::Relaxed);
    }

    fn clock(&self) -> Clock {
        let ms = Arc::clone(&self.0);
        Arc::new(move || SystemTime::UNIX_EPOCH + Duration::from_millis(ms.load(Ordering::Relaxed)))
    }
}

fn offset(group: &str, topic: &str, partition: u32, offset: i64, metadata: &str) -> Record {
    Record::Offset(OffsetRecord {
        group: group.to_owned(),
        topic: topic.to_owned(),
        partition,
        offset,
        metadata: metadata.to_owned(),
    })
}

fn member(id: &str) -> MemberSnapshot {
    MemberSnapshot {
        member_id: id.to_owned(),
        instance_id: Some(format!("{id}-instance")),
        client_id: "client".to_owned(),
        join_token: 42,
        session_timeout_ms: 10_000,
        progress_timeout_ms: 300_000,
        rebalance_timeout_ms: 60_000,
        lease_timeout_ms: 4_000,
        subscription: vec![0, 1],
        generation: 3,
        owned: vec![(0, 0), (1, 2)],
        target: vec![(0, 0), (0, 1), (1, 2)],
        lease_remaining_ms: Some(7_000),
        stood_down: false,
        released: vec![(0, 3)],
        restricted: false,
        progress: None,
        revoking: Vec::new(),
    }
}

fn snapshot(group: &str, generation: u32, members: &[&str]) -> GroupSnapshot {
    GroupSnapshot {
        operator: Default::default(),
        group: group.to_owned(),
        generation,
        topics: vec![("orders".to_owned(), 2), ("payments".to_owned(), 3)],
        members: members.iter().map(|id| member(id)).collect(),
        held: vec![HeldSnapshot {
            member_id: "gone".into(),
            remaining_ms: 4_000,
            partitions: vec![(1, 0)],
            reserved_for: None,
        }],
        rebalance_pending: Some("join".to_owned()),
        detector: "adaptive".to_owned(),
        instances: members
            .iter()
            .map(|id| InstanceSnapshot {
                instance_id: format!("{id}-instance"),
                epoch: 2,
                member_id: (*id).to_owned(),
                join_token: 42,
                fenced_tokens: vec![7],
            })
            .collect(),
    }
}

/// `state` with groups and offsets in a canonical order.
fn sorted(mut state: RestoredState) -> RestoredState {
    state.groups.sort_by(|a, b| a.group.cmp(&b.group));
    state
        .offsets
        .sort_by(|a, b| (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition)));
    state
}

fn offset_of(state: &RestoredState, group: &str, topic: &str, partition: u32) -> Option<i64> {
    state
        .offsets
        .iter()
        .find(|o| o.group == group && o.topic == topic && o.partition == partition)
        .map(|o| o.offset)
}

fn sample_records() -> Vec<Record> {
    vec![
        Record::Group(snapshot("billing", 3, &["m-1", "m-2"])),
        offset("billing", "orders", 0, 17, "checkpoint"),
        offset("billing", "orders", 1, 5, ""),
        offset("billing", "payments", 2, -1, "ünïcödé metadata"),
        Record::Group(snapshot("audit", 1, &[])),
        offset("audit", "orders", 7, i64::MAX, ""),
        offset("standalone", "t", u32::MAX, 0, "no membership"),
    ]
}

fn expected_sample() -> RestoredState {
    let records = sample_records();
    let mut state = RestoredState::default();
    for record in records {
        match record {
            Record::Offset(o) => state.offsets.push(o),
            Record::Group(g) => state.groups.push(g),
            Record::GroupDeleted { .. } => unreachable!("no deletions in the sample"),
        }
    }
    sorted(state)
}

// ---------------------------------------------------------------- redb

#[test]
fn redb_round_trips_offsets_and_snapshots() {
    let dir = TempDir::new("round-trip");
    let store = RedbStore::open(dir.path()).unwrap();
    assert_eq!(store.load().unwrap(), RestoredState::default());
    store.write(&sample_records()).unwrap();
    assert_eq!(sorted(store.load().unwrap()), expected_sample());
}

#[test]
fn redb_creates_missing_data_directory() {
    let dir = TempDir::new("mkdir");
    let nested = dir.path().join("a").join("b");
    let store = RedbStore::open(&nested).unwrap();
    assert_eq!(store.path(), nested.join("rollcall.redb"));
    assert!(nested.join("rollcall.redb").is_file());
    assert!(!nested.join("rollcall.redb.new").exists());
}

#[test]
fn redb_keeps_data_across_reopen() {
    let dir = TempDir::new("reopen");
    {
        let store = RedbStore::open(dir.path()).unwrap();
        store.write(&sample_records()).unwrap();
    }
    let store = RedbStore::open(dir.path()).unwrap();
    assert_eq!(sorted(store.load().unwrap()), expected_sample());
    store
        .write(&[offset("billing", "orders", 0, 18, "")])
        .unwrap();
    drop(store);
    let store = RedbStore::open(dir.path()).unwrap();
    assert_eq!(
        offset_of(&store.load().unwrap(), "billing", "orders", 0),
        Some(18)
    );
}

#[test]
fn redb_later_records_overwrite_earlier_ones() {
    let dir = TempDir::new("overwrite");
    let store = RedbStore::open(dir.path()).unwrap();
    store
        .write(&[
            offset("g", "t", 0, 1, "first"),
            offset("g", "t", 0, 2, "second"),
            Record::Group(snapshot("g", 1, &["a"])),
            Record::Group(snapshot("g", 2, &["a", "b"])),
        ])
        .unwrap();
    store
        .write(&[
            offset("g", "t", 0, 3, "third"),
            Record::Group(snapshot("g", 3, &["b"])),
        ])
        .unwrap();
    let state = store.load().unwrap();
    assert_eq!(
        state.offsets,
        vec![OffsetRecord {
            group: "g".to_owned(),
            topic: "t".to_owned(),
            partition: 0,
            offset: 3,
            metadata: "third".to_owned(),
        }]
    );
    assert_eq!(state.groups, vec![snapshot("g", 3, &["b"])]);
}

#[test]
fn redb_keeps_similar_keys_apart() {
    // Length prefixes keep ("ab", "c") and ("a", "bc") distinct.
    let dir = TempDir::new("keys");
    let store = RedbStore::open(dir.path()).unwrap();
    store
        .write(&[
            offset("ab", "c", 1, 1, ""),
            offset("a", "bc", 1, 2, ""),
            offset("", "", 0, 3, ""),
            offset("a\0b", "c", 1, 4, ""),
        ])
        .unwrap();
    let state = store.load().unwrap();
    assert_eq!(offset_of(&state, "ab", "c", 1), Some(1));
    assert_eq!(offset_of(&state, "a", "bc", 1), Some(2));
    assert_eq!(offset_of(&state, "", "", 0), Some(3));
    assert_eq!(offset_of(&state, "a\0b", "c", 1), Some(4));
}

#[test]
fn redb_empty_write_is_fine() {
    let dir = TempDir::new("empty-write");
    let store = RedbStore::open(dir.path()).unwrap();
    store.write(&[]).unwrap();
    assert_eq!(store.load().unwrap(), RestoredState::default());
}

#[test]
fn redb_rejects_garbage_file_without_touching_it() {
    let dir = TempDir::new("garbage");
    let garbage = b"this is not a database, just some text that happens to be here\n".repeat(100);
    fs::write(dir.file(), &garbage).unwrap();
    let err = RedbStore::open(dir.path()).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, StoreError::Open { .. }),
        "unexpected error {err:?}"
    );
    assert!(
        message.contains(&dir.file().display().to_string()),
        "{message}"
    );
    assert!(message.contains("not a redb database"), "{message}");
    assert_eq!(fs::read(dir.file()).unwrap(), garbage);
}

#[test]
fn redb_rejects_empty_file() {
    // The store is created under another name and renamed into place, so an empty
    // `rollcall.redb` is damage, not a fresh start.
    let dir = TempDir::new("empty-file");
    fs::write(dir.file(), b"").unwrap();
    let err = RedbStore::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&dir.file().display().to_string()),
        "{err}"
    );
    assert!(err.to_string().contains("empty"), "{err}");
    assert_eq!(fs::metadata(dir.file()).unwrap().len(), 0);
}

#[test]
fn redb_rejects_directory_in_place_of_file() {
    let dir = TempDir::new("dir-file");
    fs::create_dir(dir.file()).unwrap();
    let err = RedbStore::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn redb_rejects_data_dir_that_is_a_file() {
    let dir = TempDir::new("dir-is-file");
    let not_dir = dir.path().join("plain");
    fs::write(&not_dir, b"x").unwrap();
    let err = RedbStore::open(&not_dir).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&not_dir.display().to_string()),
        "{err}"
    );
}

#[test]
fn redb_rejects_truncated_file() {
    let dir = TempDir::new("truncated");
    {
        let store = RedbStore::open(dir.path()).unwrap();
        // Enough data for several pages.
        let records: Vec<Record> = (0..5_000)
            .map(|i| {
                offset(
                    &format!("group-{}", i % 50),
                    "topic",
                    i,
                    i64::from(i),
                    "meta",
                )
            })
            .collect();
        store.write(&records).unwrap();
        store
            .write(&[Record::Group(snapshot("g", 1, &["a"]))])
            .unwrap();
    }
    let full = fs::read(dir.file()).unwrap();
    let mut lengths = vec![1, 9, 100, 512, 4096, 4096 + 100];
    lengths.extend([
        full.len() / 4,
        full.len() / 2,
        full.len() - 4096,
        full.len() - 1,
    ]);
    for len in lengths {
        fs::write(dir.file(), &full[..len]).unwrap();
        let result = RedbStore::open(dir.path()).and_then(|s| s.load());
        let err = match result {
            Ok(state) => panic!(
                "truncated to {len} of {} bytes, loaded {} groups and {} offsets",
                full.len(),
                state.groups.len(),
                state.offsets.len()
            ),
            Err(err) => err,
        };
        assert!(
            matches!(err, StoreError::Open { .. } | StoreError::Corrupt { .. }),
            "truncated to {len}: {err:?}"
        );
        assert!(
            err.to_string().contains(&dir.file().display().to_string()),
            "truncated to {len}: {err}"
        );
    }
}

#[test]
fn redb_recovers_a_file_that_was_not_closed_cleanly() {
    // Copying the file while the store is open gives what a crash right after a durable
    // write leaves behind.
    let dir = TempDir::new("unclean");
    let copy = TempDir::new("unclean-copy");
    let store = RedbStore::open(dir.path()).unwrap();
    store.write(&sample_records()).unwrap();
    fs::copy(dir.file(), copy.file()).unwrap();
    store
        .write(&[offset("billing", "orders", 0, 99, "")])
        .unwrap();
    let recovered = RedbStore::open(copy.path()).unwrap();
    assert_eq!(sorted(recovered.load().unwrap()), expected_sample());
    recovered
        .write(&[offset("billing", "orders", 0, 100, "")])
        .unwrap();
    drop(recovered);
    let reopened = RedbStore::open(copy.path()).unwrap();
    assert_eq!(
        offset_of(&reopened.load().unwrap(), "billing", "orders", 0),
        Some(100)
    );
}

#[test]
fn redb_refuses_a_second_open_of_the_same_directory() {
    let dir = TempDir::new("twice");
    let _store = RedbStore::open(dir.path()).unwrap();
    let err = RedbStore::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("already open"), "{err}");
}

#[test]
fn redb_rejects_redb_database_that_is_not_a_store() {
    let dir = TempDir::new("foreign");
    drop(::redb::Database::create(dir.file()).unwrap());
    let err = RedbStore::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("not a rollcall store"), "{err}");
}

#[test]
fn redb_rejects_unknown_format_version() {
    let dir = TempDir::new("version");
    RedbStore::open(dir.path())
        .unwrap()
        .put_raw("info", b"format", &[9]);
    let err = RedbStore::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("format version 9"), "{err}");
}

#[test]
fn redb_reports_snapshot_that_does_not_decode() {
    let dir = TempDir::new("bad-snapshot");
    let store = RedbStore::open(dir.path()).unwrap();
    store.write(&sample_records()).unwrap();
    for (value, expected) in [
        (
            &b"\x01{\"group\": \"billing\", \"generation\": "[..],
            "does not decode",
        ),
        (&b"\x07{}"[..], "unknown format 7"),
        (&b""[..], "is empty"),
    ] {
        store.put_raw("groups", b"billing", value);
        let err = store.load().unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("billing"), "{message}");
        assert!(message.contains(expected), "{message}");
        assert!(
            message.contains(&dir.file().display().to_string()),
            "{message}"
        );
    }
    // A snapshot filed under another group's name.
    let mut misfiled = vec![1];
    super::snapshot_json::encode(&snapshot("audit", 1, &[]), &mut misfiled).unwrap();
    store.put_raw("groups", b"billing", &misfiled);
    let err = store.load().unwrap_err();
    assert!(err.to_string().contains("is of group"), "{err}");
}

#[test]
fn redb_reports_offset_that_does_not_decode() {
    let dir = TempDir::new("bad-offset");
    let store = RedbStore::open(dir.path()).unwrap();
    store.write(&sample_records()).unwrap();
    let key = RedbStore::offset_key("billing", "orders", 0);
    store.put_raw("offsets", &key, &[1, 2, 3]);
    let err = store.load().unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("too short"), "{err}");

    let mut bad_metadata = vec![1];
    bad_metadata.extend(5i64.to_le_bytes());
    bad_metadata.extend([0xff, 0xfe]);
    store.put_raw("offsets", &key, &bad_metadata);
    let err = store.load().unwrap_err();
    assert!(err.to_string().contains("not UTF-8"), "{err}");

    let fresh = TempDir::new("bad-offset-key");
    let store = RedbStore::open(fresh.path()).unwrap();
    store.put_raw("offsets", b"\x00\x00\x00\x09abc", &[1; 9]);
    let err = store.load().unwrap_err();
    assert!(err.to_string().contains("offset key"), "{err}");
}

#[test]
fn redb_reports_group_meta_that_does_not_decode() {
    let dir = TempDir::new("bad-meta");
    let store = RedbStore::open(dir.path()).unwrap();
    store.put_raw("group_meta", b"g", &[1, 2, 3]);
    let err = store.load().unwrap_err();
    assert!(err.to_string().contains("empty-since"), "{err}");
    let err = store.purge_expired(Duration::ZERO).unwrap_err();
    assert!(err.to_string().contains("empty-since"), "{err}");
}

// ---------------------------------------------------------------- retention

const DAY_MS: u64 = 24 * 60 * 60 * 1000;
const START_MS: u64 = 1_700_000_000_000;

/// The retention rules, on any store whose clock `clock` drives.
fn check_retention(
    store: &dyn Store,
    clock: &TestClock,
    empty_since: &dyn Fn(&str) -> Option<u64>,
) {
    let retention = Duration::from_millis(7 * DAY_MS);
    clock.set_ms(START_MS);
    store
        .write(&[
            // Empty from the start.
            Record::Group(snapshot("gone", 2, &[])),
            offset("gone", "t", 0, 10, ""),
            offset("gone", "u", 3, 11, ""),
            // Shares a prefix with "gone" but has members.
            Record::Group(snapshot("gone2", 1, &["a"])),
            offset("gone2", "t", 0, 12, ""),
            // Offsets without any snapshot.
            offset("loose", "t", 0, 13, ""),
            // Active.
            Record::Group(snapshot("busy", 1, &["a"])),
            offset("busy", "t", 0, 14, ""),
            // Empty, but later committed to.
            Record::Group(snapshot("touched", 1, &[])),
            // Empty, then rejoined.
            Record::Group(snapshot("rejoined", 1, &[])),
        ])
        .unwrap();
    assert_eq!(empty_since("gone"), Some(START_MS));
    assert_eq!(empty_since("loose"), Some(START_MS));
    assert_eq!(empty_since("busy"), None);
    assert_eq!(empty_since("gone2"), None);

    clock.set_ms(START_MS + DAY_MS);
    store
        .write(&[
            // Another empty snapshot keeps the earlier time.
            Record::Group(snapshot("gone", 3, &[])),
            Record::Group(snapshot("rejoined", 2, &["b"])),
            // Becomes empty a day later.
            Record::Group(snapshot("busy", 2, &[])),
        ])
        .unwrap();
    assert_eq!(empty_since("gone"), Some(START_MS));
    assert_eq!(empty_since("rejoined"), None);
    assert_eq!(empty_since("busy"), Some(START_MS + DAY_MS));

    clock.set_ms(START_MS + 5 * DAY_MS);
    store.write(&[offset("touched", "t", 0, 15, "")]).unwrap();
    assert_eq!(empty_since("touched"), Some(START_MS + 5 * DAY_MS));

    // Exactly the retention is not older than it.
    clock.set_ms(START_MS + 7 * DAY_MS);
    assert_eq!(
        store.purge_expired(retention).unwrap(),
        Vec::<String>::new()
    );

    clock.set_ms(START_MS + 7 * DAY_MS + 1);
    assert_eq!(
        store.purge_expired(retention).unwrap(),
        vec!["gone".to_owned(), "loose".to_owned()]
    );
    let state = sorted(store.load().unwrap());
    let groups: Vec<&str> = state.groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(groups, ["busy", "gone2", "rejoined", "touched"]);
    let offsets: Vec<(&str, i64)> = state
        .offsets
        .iter()
        .map(|o| (o.group.as_str(), o.offset))
        .collect();
    assert_eq!(offsets, [("busy", 14), ("gone2", 12), ("touched", 15)]);
    assert_eq!(empty_since("gone"), None);
    assert_eq!(empty_since("loose"), None);

    clock.set_ms(START_MS + 30 * DAY_MS);
    assert_eq!(
        store.purge_expired(retention).unwrap(),
        vec!["busy".to_owned(), "touched".to_owned()]
    );
    assert_eq!(
        store.purge_expired(retention).unwrap(),
        Vec::<String>::new()
    );
    let state = sorted(store.load().unwrap());
    assert_eq!(state.groups.len(), 2);
    assert_eq!(state.offsets.len(), 1);
}

#[test]
fn redb_purges_only_groups_empty_for_longer_than_retention() {
    let dir = TempDir::new("purge");
    let clock = TestClock::at_ms(START_MS);
    let store = RedbStore::open_with_clock(dir.path(), clock.clock()).unwrap();
    check_retention(&store, &clock, &|group| store.empty_since(group).unwrap());
    drop(store);
    // The purge was durable.
    let store = RedbStore::open(dir.path()).unwrap();
    assert_eq!(store.load().unwrap().groups.len(), 2);
}

#[test]
fn memory_purges_only_groups_empty_for_longer_than_retention() {
    let clock = TestClock::at_ms(START_MS);
    let store = MemoryStore::with_clock(clock.clock());
    check_retention(&store, &clock, &|group| store.empty_since(group));
}

#[test]
fn redb_purge_expired_at_uses_the_given_time() {
    let dir = TempDir::new("purge-at");
    let clock = TestClock::at_ms(START_MS);
    let store = RedbStore::open_with_clock(dir.path(), clock.clock()).unwrap();
    store
        .write(&[Record::Group(snapshot("g", 1, &[]))])
        .unwrap();
    let day = Duration::from_millis(DAY_MS);
    let at = |ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
    assert!(store
        .expired_groups_at(at(START_MS + DAY_MS), day)
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .expired_groups_at(at(START_MS + DAY_MS + 1), day)
            .unwrap(),
        ["g"]
    );
    assert_eq!(store.load().unwrap().groups.len(), 1);
    assert!(store
        .purge_expired_at(at(START_MS + DAY_MS), day)
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .purge_expired_at(at(START_MS + DAY_MS + 1), day)
            .unwrap(),
        ["g"]
    );
    // Everything is gone but the deleted group's generation, kept as its floor.
    assert_eq!(
        store.load().unwrap(),
        RestoredState {
            floors: vec![("g".to_owned(), 1)],
            ..RestoredState::default()
        }
    );
}

#[test]
fn memory_expired_groups_at_and_purge_expired_at_use_the_given_time() {
    let clock = TestClock::at_ms(START_MS);
    let store = MemoryStore::with_clock(clock.clock());
    store
        .write(&[
            Record::Group(snapshot("g", 1, &[])),
            offset("g", "t", 0, 1, ""),
        ])
        .unwrap();
    let day = Duration::from_millis(DAY_MS);
    let at = |ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
    assert!(store
        .expired_groups_at(at(START_MS + DAY_MS), day)
        .is_empty());
    assert_eq!(
        store.expired_groups_at(at(START_MS + DAY_MS + 1), day),
        ["g"]
    );
    assert!(store
        .purge_expired_at(at(START_MS + DAY_MS), day)
        .unwrap()
        .is_empty());
    assert_eq!(store.load().unwrap().offsets.len(), 1);
    assert_eq!(
        store
            .purge_expired_at(at(START_MS + DAY_MS + 1), day)
            .unwrap(),
        ["g"]
    );
    // Everything is gone but the deleted group's generation, kept as its floor.
    assert_eq!(
        store.load().unwrap(),
        RestoredState {
            floors: vec![("g".to_owned(), 1)],
            ..RestoredState::default()
        }
    );
}

// ---------------------------------------------------------------- group deletion

/// What [`Record::GroupDeleted`] does, on any store whose clock `clock` drives.
fn check_group_deleted(
    store: &dyn Store,
    clock: &TestClock,
    empty_since: &dyn Fn(&str) -> Option<u64>,
) {
    let retention = Duration::from_millis(7 * DAY_MS);
    let deleted = |group: &str| Record::GroupDeleted {
        group: group.to_owned(),
    };
    let offsets_of = |group: &str| -> Vec<(String, u32, i64)> {
        let mut offsets: Vec<_> = store
            .load()
            .unwrap()
            .offsets
            .into_iter()
            .filter(|o| o.group == group)
            .map(|o| (o.topic, o.partition, o.offset))
            .collect();
        offsets.sort();
        offsets
    };
    let snapshot_of = |group: &str| {
        store
            .load()
            .unwrap()
            .groups
            .into_iter()
            .find(|g| g.group == group)
    };

    clock.set_ms(START_MS);
    store
        .write(&[
            Record::Group(snapshot("gone", 2, &[])),
            offset("gone", "t", 0, 10, ""),
            offset("gone", "u", 3, 11, ""),
            // Shares a prefix with "gone".
            Record::Group(snapshot("gone2", 1, &[])),
            offset("gone2", "t", 0, 12, ""),
            Record::Group(snapshot("rejoined", 1, &[])),
            offset("rejoined", "t", 0, 13, ""),
            Record::Group(snapshot("revived", 1, &[])),
            offset("revived", "t", 0, 14, ""),
            offset("revived", "t", 1, 15, ""),
        ])
        .unwrap();

    // Asking which groups expired changes nothing.
    clock.set_ms(START_MS + 30 * DAY_MS);
    let before = sorted(store.load().unwrap());
    assert_eq!(
        store.expired_groups(retention).unwrap(),
        ["gone", "gone2", "rejoined", "revived"]
    );
    assert_eq!(sorted(store.load().unwrap()), before);
    assert_eq!(empty_since("gone"), Some(START_MS));

    // A deletion removes the group's offsets, snapshot and mark, and nothing else's.
    store.write(&[deleted("gone")]).unwrap();
    assert_eq!(offsets_of("gone"), []);
    assert_eq!(snapshot_of("gone"), None);
    assert_eq!(empty_since("gone"), None);
    assert_eq!(offsets_of("gone2"), [("t".to_owned(), 0, 12)]);
    assert_eq!(empty_since("gone2"), Some(START_MS));

    // Records after a deletion in the same batch apply afresh: a member rejoined.
    store
        .write(&[
            offset("rejoined", "t", 1, 16, ""),
            deleted("rejoined"),
            Record::Group(snapshot("rejoined", 1, &["m-1"])),
        ])
        .unwrap();
    assert_eq!(
        snapshot_of("rejoined"),
        Some(snapshot("rejoined", 1, &["m-1"]))
    );
    assert_eq!(offsets_of("rejoined"), []);
    assert_eq!(empty_since("rejoined"), None);

    // An offset committed after the deletion in the same batch survives, and its group
    // is idle from now.
    store
        .write(&[
            offset("gone2", "t", 0, 17, ""),
            deleted("gone2"),
            offset("gone2", "t", 1, 18, ""),
        ])
        .unwrap();
    assert_eq!(offsets_of("gone2"), [("t".to_owned(), 1, 18)]);
    assert_eq!(snapshot_of("gone2"), None);
    assert_eq!(empty_since("gone2"), Some(START_MS + 30 * DAY_MS));

    // Offsets committed in a later batch survive the deletion.
    store.write(&[deleted("revived")]).unwrap();
    clock.set_ms(START_MS + 31 * DAY_MS);
    store
        .write(&[offset("revived", "t", 1, 19, "after")])
        .unwrap();
    assert_eq!(offsets_of("revived"), [("t".to_owned(), 1, 19)]);
    assert_eq!(empty_since("revived"), Some(START_MS + 31 * DAY_MS));

    // Deleting a group the store does not have is harmless.
    store.write(&[deleted("never-was")]).unwrap();

    // The groups written to after their deletion are marked from then on.
    assert_eq!(
        store.expired_groups(retention).unwrap(),
        Vec::<String>::new()
    );
    clock.set_ms(START_MS + 38 * DAY_MS + 1);
    assert_eq!(
        store.expired_groups(retention).unwrap(),
        ["gone2", "revived"]
    );
    let state = sorted(store.load().unwrap());
    let groups: Vec<&str> = state.groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(groups, ["rejoined"]);
    let offsets: Vec<(&str, i64)> = state
        .offsets
        .iter()
        .map(|o| (o.group.as_str(), o.offset))
        .collect();
    assert_eq!(offsets, [("gone2", 18), ("revived", 19)]);
}

#[test]
fn redb_group_deleted_removes_the_group_in_record_order() {
    let dir = TempDir::new("deleted");
    let clock = TestClock::at_ms(START_MS);
    let store = RedbStore::open_with_clock(dir.path(), clock.clock()).unwrap();
    check_group_deleted(&store, &clock, &|group| store.empty_since(group).unwrap());
    let expected = sorted(store.load().unwrap());
    drop(store);
    // The deletions were durable.
    let store = RedbStore::open(dir.path()).unwrap();
    assert_eq!(sorted(store.load().unwrap()), expected);
}

#[test]
fn memory_group_deleted_removes_the_group_in_record_order() {
    let clock = TestClock::at_ms(START_MS);
    let store = MemoryStore::with_clock(clock.clock());
    check_group_deleted(&store, &clock, &|group| store.empty_since(group));
}

// ---------------------------------------------------------------- memory

#[test]
fn memory_round_trips_and_counts_writes() {
    let store = MemoryStore::new();
    store.write(&sample_records()).unwrap();
    store
        .write(&[offset("billing", "orders", 0, 18, "")])
        .unwrap();
    assert_eq!(store.write_calls(), 2);
    assert_eq!(store.records_written(), 8);
    let mut expected = expected_sample();
    expected.offsets[1].offset = 18;
    expected.offsets[1].metadata = String::new();
    assert_eq!(sorted(store.load().unwrap()), expected);

    store.set_fail_writes(Some(StoreError::Io("disk full".to_owned())));
    assert!(store.write(&[offset("x", "t", 0, 1, "")]).is_err());
    assert_eq!(store.write_calls(), 3);
    assert_eq!(store.records_written(), 8);
    assert_eq!(offset_of(&store.load().unwrap(), "x", "t", 0), None);
}

// ---------------------------------------------------------------- group commit

/// Waits until `condition` holds, for at most ten seconds.
fn wait_for(condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn group_commit_batches_submissions_that_arrive_during_a_write() {
    let store = Arc::new(MemoryStore::new());
    store.set_write_delay(Duration::from_millis(200));
    let committer = GroupCommitter::new(store.clone()).unwrap();

    let first = committer.submit(vec![offset("g", "t", 0, 0, "")]);
    // The writer is now inside the slow write; everything submitted meanwhile queues.
    wait_for(|| store.write_calls() == 1);
    let answers: Vec<_> = (1..=100)
        .map(|i| committer.submit(vec![offset("g", "t", i, i64::from(i), "")]))
        .collect();
    first.blocking_recv().unwrap().unwrap();
    for answer in answers {
        answer.blocking_recv().unwrap().unwrap();
    }
    assert_eq!(store.write_calls(), 2);
    assert_eq!(store.records_written(), 101);
    let stats = committer.stats();
    assert_eq!(stats.batches, 2);
    assert_eq!(stats.records, 101);
    assert_eq!(stats.submissions, 101);
    assert_eq!(stats.completed, 101);
    assert_eq!(stats.queued(), 0);
    assert_eq!(store.load().unwrap().offsets.len(), 101);
}

#[test]
fn group_commit_batches_concurrent_submitters() {
    let store = Arc::new(MemoryStore::new());
    store.set_write_delay(Duration::from_millis(5));
    let committer = Arc::new(GroupCommitter::new(store.clone()).unwrap());
    let threads: Vec<_> = (0..16u32)
        .map(|t| {
            let committer = Arc::clone(&committer);
            std::thread::spawn(move || {
                for i in 0..20 {
                    committer
                        .submit(vec![offset("g", "t", t, i, "")])
                        .blocking_recv()
                        .unwrap()
                        .unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(store.records_written(), 320);
    // Sequential writes would take 320; every submitter waits for its answer, so at
    // most 16 records are queued and batches are far fewer.
    assert!(store.write_calls() < 160, "{} writes", store.write_calls());
    let state = store.load().unwrap();
    assert!(state.offsets.iter().all(|o| o.offset == 19));
}

#[test]
fn group_commit_bounds_batch_size() {
    let store = Arc::new(MemoryStore::new());
    store.set_write_delay(Duration::from_millis(200));
    let committer = GroupCommitter::with_max_batch_records(store.clone(), 10).unwrap();
    let first = committer.submit(vec![offset("g", "t", 0, 0, "")]);
    wait_for(|| store.write_calls() == 1);
    let mut answers: Vec<_> = (1..=25)
        .map(|i| committer.submit(vec![offset("g", "t", i, 0, "")]))
        .collect();
    // Larger than the bound: written whole, alone.
    answers.push(committer.submit((0..30).map(|i| offset("h", "t", i, 0, "")).collect()));
    store.set_write_delay(Duration::ZERO);
    first.blocking_recv().unwrap().unwrap();
    for answer in answers {
        answer.blocking_recv().unwrap().unwrap();
    }
    // 1, then 10 + 10 + 5, then 30.
    assert_eq!(store.write_calls(), 5);
    assert_eq!(store.records_written(), 56);
}

#[test]
fn group_commit_reports_a_failed_write_to_every_waiter_and_keeps_going() {
    let store = Arc::new(MemoryStore::new());
    store.set_write_delay(Duration::from_millis(200));
    let committer = GroupCommitter::new(store.clone()).unwrap();
    let failure = StoreError::Io("no space left on device".to_owned());
    store.set_fail_writes(Some(failure.clone()));

    let first = committer.submit(vec![offset("g", "t", 0, 0, "")]);
    wait_for(|| store.write_calls() == 1);
    let answers: Vec<_> = (1..=10)
        .map(|i| committer.submit(vec![offset("g", "t", i, 0, "")]))
        .collect();
    assert_eq!(first.blocking_recv().unwrap(), Err(failure.clone()));
    for answer in answers {
        assert_eq!(answer.blocking_recv().unwrap(), Err(failure.clone()));
    }
    assert_eq!(committer.stats().failed_batches, 2);
    assert_eq!(committer.stats().records, 0);
    assert!(store.load().unwrap().offsets.is_empty());

    store.set_fail_writes(None);
    store.set_write_delay(Duration::ZERO);
    committer
        .submit(vec![offset("g", "t", 0, 1, "")])
        .blocking_recv()
        .unwrap()
        .unwrap();
    assert_eq!(store.load().unwrap().offsets.len(), 1);
    assert_eq!(committer.stats().records, 1);
}

#[test]
fn group_commit_empty_submission_is_a_barrier_without_a_write() {
    let store = Arc::new(MemoryStore::new());
    let committer = GroupCommitter::new(store.clone()).unwrap();
    committer
        .submit(Vec::new())
        .blocking_recv()
        .unwrap()
        .unwrap();
    assert_eq!(store.write_calls(), 0);

    store.set_write_delay(Duration::from_millis(100));
    let write = committer.submit(vec![offset("g", "t", 0, 0, "")]);
    let barrier = committer.submit(Vec::new());
    barrier.blocking_recv().unwrap().unwrap();
    // Answered no earlier than the write submitted before it.
    assert_eq!(store.records_written(), 1);
    write.blocking_recv().unwrap().unwrap();
}

#[test]
fn group_commit_drains_the_queue_when_dropped() {
    let store = Arc::new(MemoryStore::new());
    store.set_write_delay(Duration::from_millis(20));
    let committer = GroupCommitter::new(store.clone()).unwrap();
    let answers: Vec<_> = (0..50)
        .map(|i| committer.submit(vec![offset("g", "t", i, 0, "")]))
        .collect();
    drop(committer);
    assert_eq!(store.records_written(), 50);
    for answer in answers {
        answer.blocking_recv().unwrap().unwrap();
    }
}

#[test]
fn group_commit_survives_a_panicking_store() {
    #[derive(Debug)]
    struct Panics;
    impl Store for Panics {
        fn load(&self) -> Result<RestoredState, StoreError> {
            Ok(RestoredState::default())
        }
        fn write(&self, _: &[Record]) -> Result<(), StoreError> {
            panic!("simulated failure inside the store")
        }
        fn expired_groups(&self, _: Duration) -> Result<Vec<String>, StoreError> {
            Ok(Vec::new())
        }
    }
    let committer = GroupCommitter::new(Arc::new(Panics)).unwrap();
    for _ in 0..2 {
        let answer = committer
            .submit(vec![offset("g", "t", 0, 0, "")])
            .blocking_recv()
            .unwrap();
        assert!(matches!(answer, Err(StoreError::Io(_))), "{answer:?}");
    }
}

#[test]
fn group_commit_over_redb_from_async_tasks() {
    let dir = TempDir::new("commit-redb");
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.path()).unwrap());
    let committer = Arc::new(GroupCommitter::new(store).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..32u32)
            .map(|t| {
                let committer = Arc::clone(&committer);
                tokio::spawn(async move {
                    for i in 0..25 {
                        committer
                            .commit(vec![offset(&format!("g{}", t % 4), "t", t, i, "")])
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    let stats = committer.stats();
    assert_eq!(stats.records, 800);
    assert!(stats.batches <= 800);
    let state = committer.store().load().unwrap();
    assert_eq!(state.offsets.len(), 32);
    assert!(state.offsets.iter().all(|o| o.offset == 24));
}

/// The file format of a snapshot is the store's: these exact JSON texts must keep
/// loading, whatever shape the core's types take.
#[test]
fn snapshot_json_format_is_stable() {
    use super::snapshot_json::{decode, encode};
    // As the first release wrote it: no held partitions, instances, leases.
    let old = br#"{"group":"billing","generation":3,"topics":[["orders",4]],"members":[{"member_id":"m-1","instance_id":null,"client_id":"c","join_token":7,"session_timeout_ms":10000,"progress_timeout_ms":60000,"rebalance_timeout_ms":30000,"subscription":[0],"generation":3,"owned":[[0,1]],"target":[[0,1]]}]}"#;
    let s = decode(old).unwrap();
    assert_eq!(s.group, "billing");
    assert_eq!(s.generation, 3);
    assert_eq!(s.topics, vec![("orders".to_owned(), 4)]);
    let m = &s.members[0];
    assert_eq!((m.member_id.as_str(), m.join_token), ("m-1", 7));
    assert_eq!(m.session_timeout_ms, 10_000);
    assert_eq!(m.owned, vec![(0, 1)]);
    assert_eq!((m.lease_remaining_ms, m.stood_down), (None, false));
    assert!(m.released.is_empty() && !m.restricted);
    assert_eq!(
        m.lease_timeout_ms, 0,
        "no lease timeout: the session timeout"
    );
    assert!(s.held.is_empty() && s.instances.is_empty() && s.rebalance_pending.is_none());

    // Today's form round-trips, and names its fields as the file always has.
    let mut full = s.clone();
    full.held.push(HeldSnapshot {
        member_id: "m-0".into(),
        remaining_ms: 250,
        partitions: vec![(0, 2)],
        reserved_for: None,
    });
    full.instances.push(InstanceSnapshot {
        instance_id: "w".into(),
        epoch: 2,
        member_id: "w#m-2".into(),
        join_token: 9,
        fenced_tokens: vec![8],
    });
    full.rebalance_pending = Some("join".into());
    full.members[0].lease_remaining_ms = Some(900);
    full.members[0].lease_timeout_ms = 2_000;
    // Absent when empty or false: most members have released nothing and are not
    // restricted, and every snapshot is rewritten on each change.
    let mut json = Vec::new();
    encode(&full, &mut json).unwrap();
    let text = String::from_utf8(json).unwrap();
    assert!(
        !text.contains("released") && !text.contains("restricted"),
        "{text}"
    );
    full.members[0].released = vec![(0, 2), (0, 3)];
    full.members[0].restricted = true;
    let mut json = Vec::new();
    encode(&full, &mut json).unwrap();
    assert_eq!(decode(&json).unwrap(), full);
    let text = String::from_utf8(json).unwrap();
    for key in [
        "\"held\":[{\"remaining_ms\":250,\"member_id\":\"m-0\",\"partitions\":[[0,2]]}]",
        "\"lease_timeout_ms\":2000",
        "\"rebalance_pending\":\"join\"",
        "\"fenced_tokens\":[8]",
        "\"lease_remaining_ms\":900",
        "\"stood_down\":false",
        "\"released\":[[0,2],[0,3]]",
        "\"restricted\":true",
    ] {
        assert!(text.contains(key), "{key} missing from {text}");
    }
}

/// Snapshots written before members' waits were kept (the form of the release before
/// it, with every field that had then) still load, with no waits: the restore starts
/// them afresh, as it did then. Today's form keeps each wait, and leaves out what is at
/// its default.
#[test]
fn snapshot_json_keeps_waits_and_reads_snapshots_without_them() {
    use super::snapshot_json::{decode, encode};
    use crate::core::WaitSnapshot;
    let before = br#"{"group":"g","generation":4,"topics":[["orders",4]],"members":[{"member_id":"m-1","instance_id":null,"client_id":"c","join_token":7,"session_timeout_ms":10000,"progress_timeout_ms":60000,"rebalance_timeout_ms":30000,"lease_timeout_ms":3000,"subscription":[0],"generation":4,"owned":[[0,1],[0,2]],"target":[[0,1]],"lease_remaining_ms":2500,"stood_down":false,"released":[[0,3]],"restricted":true}],"held":[{"remaining_ms":250,"member_id":"m-0","partitions":[[0,0]]}],"rebalance_pending":null,"instances":[],"detector":"fixed"}"#;
    let s = decode(before).unwrap();
    let m = &s.members[0];
    assert_eq!(m.progress, None);
    assert!(m.revoking.is_empty());
    assert_eq!((m.released.as_slice(), m.restricted), (&[(0, 3)][..], true));

    let mut full = s.clone();
    full.members[0].progress = Some(WaitSnapshot {
        counter: 41,
        waited_ms: 12_000,
        credit_ms: 0,
        restores: 0,
    });
    full.members[0].revoking = vec![(
        (0, 2),
        WaitSnapshot {
            counter: 0,
            waited_ms: 9_500,
            credit_ms: 1_000,
            restores: 3,
        },
    )];
    let mut json = Vec::new();
    encode(&full, &mut json).unwrap();
    assert_eq!(decode(&json).unwrap(), full);
    let text = String::from_utf8(json).unwrap();
    for key in [
        "\"progress\":{\"counter\":41,\"waited_ms\":12000}",
        "\"revoking\":[{\"tp\":[0,2],\"waited_ms\":9500,\"credit_ms\":1000,\"restores\":3}]",
    ] {
        assert!(text.contains(key), "{key} missing from {text}");
    }
}
