//! An in-memory [`Store`] for tests.
//!
//! It keeps retention's marks and per-group generation floors like any store, counts
//! its writes so that tests can assert how records were batched, and can be told to
//! write slowly or to fail. It has one writer, so it ignores fencing tokens
//! ([`Store::write_fenced`]'s default).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use super::retention::{deletions, expired, IdleMarks, Retention};
use super::{system_clock, Clock, Store, StoreError};
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
    /// Largest generation of each deleted group that has no snapshot since.
    floors: BTreeMap<String, u32>,
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
        let marks: Vec<(String, u64)> = self
            .state
            .lock()
            .empty_since
            .iter()
            .map(|(group, since)| (group.clone(), *since))
            .collect();
        expired(marks, now, retention)
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

/// Retention's view of the state's marks and snapshots.
struct Marks<'a> {
    empty_since: &'a mut BTreeMap<String, u64>,
    groups: &'a BTreeMap<String, GroupSnapshot>,
}

impl IdleMarks for Marks<'_> {
    fn marked(&self, group: &str) -> Result<bool, StoreError> {
        Ok(self.empty_since.contains_key(group))
    }

    fn mark(&mut self, group: &str, since_ms: u64) -> Result<(), StoreError> {
        self.empty_since.insert(group.to_owned(), since_ms);
        Ok(())
    }

    fn unmark(&mut self, group: &str) -> Result<(), StoreError> {
        self.empty_since.remove(group);
        Ok(())
    }

    fn has_snapshot(&self, group: &str) -> Result<bool, StoreError> {
        Ok(self.groups.contains_key(group))
    }
}

impl State {
    fn apply(&mut self, records: &[Record], now: SystemTime) -> Result<(), StoreError> {
        let mut retention = Retention::new(now);
        for record in records {
            retention.apply(
                record,
                &mut Marks {
                    empty_since: &mut self.empty_since,
                    groups: &self.groups,
                },
            )?;
            match record {
                Record::Offset(offset) => {
                    self.offsets.insert(
                        (offset.group.clone(), offset.topic.clone(), offset.partition),
                        (offset.offset, offset.metadata.clone()),
                    );
                }
                Record::Group(snapshot) => {
                    // The snapshot's generation is above the floor: it speaks for it.
                    self.floors.remove(&snapshot.group);
                    self.groups.insert(snapshot.group.clone(), snapshot.clone());
                }
                Record::GroupDeleted { group } => {
                    if let Some(snapshot) = self.groups.remove(group) {
                        let floor = self.floors.entry(group.clone()).or_default();
                        *floor = (*floor).max(snapshot.generation);
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
        Ok(())
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
            floors: state
                .floors
                .iter()
                .map(|(group, floor)| (group.clone(), *floor))
                .collect(),
            generation_floor: 0,
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
        let now = (self.clock)();
        self.state.lock().apply(records, now)?;
        self.records_written
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn expired_groups(&self, retention: Duration) -> Result<Vec<String>, StoreError> {
        Ok(self.expired_groups_at((self.clock)(), retention))
    }
}
