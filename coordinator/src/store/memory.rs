//! An in-memory [`Store`] for tests.
//!
//! It keeps the same retention bookkeeping as the durable store, counts its writes so
//! that tests can assert how records were batched, and can be told to write slowly or
//! to fail.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use super::{deletions, is_expired, system_clock, unix_ms, Clock, Store, StoreError};
use crate::core::{GroupSnapshot, OffsetRecord, Record, RestoredState};

/// Offsets by (group, topic, partition): (offset, metadata).
type OffsetMap = BTreeMap<(String, String, u32), (i64, String)>;

/// A [`Store`] that keeps everything in memory.
pub struct MemoryStore {
    state: Mutex<State>,
    clock: Clock,
    write_delay: Mutex<Duration>,
    fail_with: Mutex<Option<StoreError>>,
    write_calls: AtomicU64,
    records_written: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    offsets: OffsetMap,
    groups: BTreeMap<String, GroupSnapshot>,
    /// Group → wall-clock ms since which it has been empty and idle.
    empty_since: BTreeMap<String, u64>,
    /// Largest generation of any deleted group.
    generation_floor: u32,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("MemoryStore")
            .field("groups", &state.groups.len())
            .field("offsets", &state.offsets.len())
            .field("write_calls", &self.write_calls())
            .field("records_written", &self.records_written())
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store reading the system clock.
    pub fn new() -> Self {
        Self::with_clock(system_clock())
    }

    /// An empty store reading `clock` to date when groups become empty.
    pub fn with_clock(clock: Clock) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
            write_delay: Mutex::new(Duration::ZERO),
            fail_with: Mutex::new(None),
            write_calls: AtomicU64::new(0),
            records_written: AtomicU64::new(0),
        }
    }

    /// Makes every later [`Store::write`] take at least `delay`, like a slow fsync.
    pub fn set_write_delay(&self, delay: Duration) {
        *self.write_delay.lock() = delay;
    }

    /// Makes every later [`Store::write`] fail with `error` (and write nothing), or,
    /// with `None`, succeed again.
    pub fn set_fail_writes(&self, error: Option<StoreError>) {
        *self.fail_with.lock() = error;
    }

    /// How many times [`Store::write`] was called, failed calls included.
    pub fn write_calls(&self) -> u64 {
        self.write_calls.load(Ordering::Relaxed)
    }

    /// How many records successful writes made durable.
    pub fn records_written(&self) -> u64 {
        self.records_written.load(Ordering::Relaxed)
    }

    /// [`Store::expired_groups`] as if the wall clock read `now`.
    pub fn expired_groups_at(&self, now: SystemTime, retention: Duration) -> Vec<String> {
        let now_ms = unix_ms(now);
        self.state
            .lock()
            .empty_since
            .iter()
            .filter(|(_, since)| is_expired(**since, now_ms, retention))
            .map(|(group, _)| group.clone())
            .collect()
    }

    /// [`Store::purge_expired`] as if the wall clock read `now`.
    pub fn purge_expired_at(
        &self,
        now: SystemTime,
        retention: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let expired = self.expired_groups_at(now, retention);
        if !expired.is_empty() {
            self.write(&deletions(&expired))?;
        }
        Ok(expired)
    }

    /// When `group` became empty, as wall-clock ms since the UNIX epoch, if it is empty.
    pub fn empty_since(&self, group: &str) -> Option<u64> {
        self.state.lock().empty_since.get(group).copied()
    }
}

impl State {
    fn apply(&mut self, records: &[Record], now_ms: u64) {
        // Groups whose idleness an offset commit of this batch already updated; every
        // update of a batch uses the same `now_ms`, so once is enough until a snapshot
        // of the group changes it again.
        let mut touched: HashSet<&str> = HashSet::new();
        for record in records {
            match record {
                Record::Offset(offset) => {
                    self.offsets.insert(
                        (offset.group.clone(), offset.topic.clone(), offset.partition),
                        (offset.offset, offset.metadata.clone()),
                    );
                    if touched.insert(&offset.group)
                        && (self.empty_since.contains_key(&offset.group)
                            || !self.groups.contains_key(&offset.group))
                    {
                        self.empty_since.insert(offset.group.clone(), now_ms);
                    }
                }
                Record::Group(snapshot) => {
                    touched.remove(snapshot.group.as_str());
                    if snapshot.members.is_empty() {
                        self.empty_since
                            .entry(snapshot.group.clone())
                            .or_insert(now_ms);
                    } else {
                        self.empty_since.remove(&snapshot.group);
                    }
                    self.groups.insert(snapshot.group.clone(), snapshot.clone());
                }
                Record::GroupDeleted { group } => {
                    touched.remove(group.as_str());
                    self.empty_since.remove(group);
                    if let Some(snapshot) = self.groups.remove(group) {
                        self.generation_floor = self.generation_floor.max(snapshot.generation);
                    }
                    let first = (group.clone(), String::new(), 0);
                    let keys: Vec<_> = self
                        .offsets
                        .range(first..)
                        .take_while(|((g, _, _), _)| g == group)
                        .map(|(key, _)| key.clone())
                        .collect();
                    for key in keys {
                        self.offsets.remove(&key);
                    }
                }
            }
        }
    }
}

impl Store for MemoryStore {
    fn load(&self) -> Result<RestoredState, StoreError> {
        let state = self.state.lock();
        Ok(RestoredState {
            groups: state.groups.values().cloned().collect(),
            offsets: state
                .offsets
                .iter()
                .map(
                    |((group, topic, partition), (offset, metadata))| OffsetRecord {
                        group: group.clone(),
                        topic: topic.clone(),
                        partition: *partition,
                        offset: *offset,
                        metadata: metadata.clone(),
                    },
                )
                .collect(),
            generation_floor: state.generation_floor,
        })
    }

    fn write(&self, records: &[Record]) -> Result<(), StoreError> {
        self.write_calls.fetch_add(1, Ordering::Relaxed);
        let delay = *self.write_delay.lock();
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        if let Some(error) = self.fail_with.lock().clone() {
            return Err(error);
        }
        let now_ms = unix_ms((self.clock)());
        self.state.lock().apply(records, now_ms);
        self.records_written
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn expired_groups(&self, retention: Duration) -> Result<Vec<String>, StoreError> {
        Ok(self.expired_groups_at((self.clock)(), retention))
    }
}
