//! The durable [`Store`]: one redb database, `<data dir>/rollcall.redb`.
//!
//! # Layout
//!
//! Keys and values are plain bytes encoded here, so that data which does not decode is
//! reported as [`StoreError::Corrupt`] rather than trusted.
//!
//! | table        | key                                            | value                                   |
//! |--------------|------------------------------------------------|-----------------------------------------|
//! | `info`       | `"format"`                                     | format version, one byte                |
//! | `info`       | `"generation_floor"` (only in files written before `floors`) | u32 LE: largest generation of any group deleted then; read, never written |
//! | `offsets`    | u32 BE group len, group, u32 BE topic len, topic, u32 BE partition | format byte, i64 LE offset, metadata |
//! | `groups`     | group                                          | format byte, JSON of [`GroupSnapshot`] (`snapshot_json.rs`) |
//! | `group_meta` | group                                          | u64 LE wall-clock ms since empty        |
//! | `floors`     | group (absent until a deletion)                | u32 LE: largest generation of the deleted group, until it has a snapshot again |
//!
//! `floors` was added without a new format version: a file without it (written before)
//! reads as one with no floor per group, and its `generation_floor` is put under every
//! group. The store has one writer (the process that holds the file), so the fencing
//! token of [`Store::write_fenced`] is accepted and ignored.
//!
//! The length prefixes make all offsets of one group contiguous in key order, so a group
//! is deleted with one range scan.
//!
//! # Durability
//!
//! Every [`Store::write`] is one write transaction committed with
//! [`Durability::Immediate`]: it returns once the data is fsynced. A new database is
//! initialized under a temporary name and renamed into place, so `rollcall.redb` is
//! always either absent or a complete database, and anything else found under that name
//! is reported rather than overwritten.

use std::cell::Cell;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, SystemTime};

use redb::{
    Builder, Database, DatabaseError, Durability, ReadableTable, RepairSession, StorageError,
    Table, TableDefinition, TableError,
};

use super::retention::{deletions, expired, IdleMarks, Retention};
use super::snapshot_json;
use super::{system_clock, Clock, Store, StoreError};
use crate::core::{GroupSnapshot, OffsetRecord, Record, RestoredState};

mod open;

use open::{create_new, guard, open_error, open_existing};

/// The database's file name inside the data directory.
pub const FILE_NAME: &str = "rollcall.redb";

/// Name under which a new database is initialized before it is renamed to [`FILE_NAME`].
const NEW_FILE_NAME: &str = "rollcall.redb.new";

/// Version of the layout described in the module documentation.
const FORMAT_VERSION: u8 = 1;

/// Leading byte of every encoded offset value and group snapshot.
const VALUE_FORMAT: u8 = 1;

/// Key of the format version in [`INFO`].
const FORMAT_KEY: &[u8] = b"format";

/// Key of the generation floor in [`INFO`] of files written before [`FLOORS`]: the
/// largest generation of any group that was deleted then. Read, never written.
const GENERATION_FLOOR_KEY: &[u8] = b"generation_floor";

/// Page cache limit. The coordinator reads the file at start and for retention's marks,
/// and otherwise only writes, so the cache serves little; every byte of it is resident
/// memory (with 100,000 members a 256 MiB limit held ~20 MiB more than this one).
/// Pages beyond it are read from the file.
const CACHE_BYTES: usize = 16 * 1024 * 1024;

type BytesTable = TableDefinition<'static, &'static [u8], &'static [u8]>;

const INFO: BytesTable = TableDefinition::new("info");
const OFFSETS: BytesTable = TableDefinition::new("offsets");
const GROUPS: BytesTable = TableDefinition::new("groups");
const GROUP_META: BytesTable = TableDefinition::new("group_meta");
const FLOORS: BytesTable = TableDefinition::new("floors");

/// The durable store.
pub struct RedbStore {
    db: Database,
    path: PathBuf,
    clock: Clock,
}

impl fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens the store in `data_dir`, creating the directory and an empty store if
    /// missing. A database that was not closed cleanly is repaired (this reads the whole
    /// file). A file that is not a store, is damaged, or cannot be read is an error; it
    /// is never replaced by an empty store.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        Self::open_with_clock(data_dir, system_clock())
    }

    /// [`Self::open`], reading `clock` to date when groups become empty.
    pub fn open_with_clock(data_dir: &Path, clock: Clock) -> Result<Self, StoreError> {
        fs::create_dir_all(data_dir).map_err(|e| StoreError::Open {
            path: data_dir.display().to_string(),
            reason: format!("cannot create data directory: {e}"),
        })?;
        let path = data_dir.join(FILE_NAME);
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.len() == 0 => {
                // A store is created under another name and renamed into place once
                // initialized, so an empty file is damage, not a new store.
                return Err(StoreError::Corrupt {
                    path: path.display().to_string(),
                    reason: "the file is empty (truncated?)".to_owned(),
                });
            }
            Ok(meta) if meta.is_file() => {}
            Ok(_) => return Err(open_error(&path, "not a regular file")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_new(data_dir, &path)?,
            Err(e) => return Err(open_error(&path, e)),
        }
        let db = open_existing(&path)?;
        let store = Self { db, path, clock };
        store.check_format()?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`Store::expired_groups`] as if the wall clock read `now`.
    pub fn expired_groups_at(
        &self,
        now: SystemTime,
        retention: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.fail(e))?;
        let meta = txn.open_table(GROUP_META).map_err(|e| self.fail(e))?;
        let mut marks = Vec::new();
        for entry in meta.iter().map_err(|e| self.fail(e))? {
            let (key, value) = entry.map_err(|e| self.fail(e))?;
            let group = self.decode_group_key(key.value(), "group_meta")?;
            let since = self.decode_since(&group, value.value())?;
            marks.push((group, since));
        }
        Ok(expired(marks, now, retention))
    }

    /// [`Store::purge_expired`] as if the wall clock read `now`.
    pub fn purge_expired_at(
        &self,
        now: SystemTime,
        retention: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let expired = self.expired_groups_at(now, retention)?;
        if !expired.is_empty() {
            self.write_inner(&deletions(&expired))?;
        }
        Ok(expired)
    }

    /// When `group` became empty, as wall-clock ms since the UNIX epoch, if it is empty.
    pub fn empty_since(&self, group: &str) -> Result<Option<u64>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.fail(e))?;
        let meta = txn.open_table(GROUP_META).map_err(|e| self.fail(e))?;
        let value = meta.get(group.as_bytes()).map_err(|e| self.fail(e))?;
        value
            .map(|v| self.decode_since(group, v.value()))
            .transpose()
    }

    /// Checks that the database is a store of the layout this code reads.
    fn check_format(&self) -> Result<(), StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.fail(e))?;
        let info = match txn.open_table(INFO) {
            Ok(info) => info,
            Err(TableError::TableDoesNotExist(_)) => {
                return Err(open_error(
                    &self.path,
                    "a redb database but not a rollcall store (no format marker)",
                ))
            }
            Err(e) => return Err(self.fail(e)),
        };
        let version = info.get(FORMAT_KEY).map_err(|e| self.fail(e))?;
        match version.as_ref().map(|v| v.value()) {
            Some([FORMAT_VERSION]) => Ok(()),
            Some([other]) => Err(open_error(
                &self.path,
                format!(
                    "store format version {other} is not supported (this build reads version {FORMAT_VERSION})"
                ),
            )),
            _ => Err(self.corrupt("the format marker does not decode")),
        }
    }

    /// Reads what concerns the groups `keep` accepts; the body of [`Store::load`] and
    /// [`Store::load_groups`]. What it does not keep it does not decode (but checks that
    /// its key does).
    fn load_inner(&self, keep: &dyn Fn(&str) -> bool) -> Result<RestoredState, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.fail(e))?;
        let mut state = RestoredState::default();

        let groups = txn.open_table(GROUPS).map_err(|e| self.fail(e))?;
        for entry in groups.iter().map_err(|e| self.fail(e))? {
            let (key, value) = entry.map_err(|e| self.fail(e))?;
            let group = self.decode_group_key(key.value(), "groups")?;
            if keep(&group) {
                let snapshot = self.decode_snapshot(&group, value.value())?;
                state.groups.push(snapshot);
            }
        }

        let offsets = txn.open_table(OFFSETS).map_err(|e| self.fail(e))?;
        for entry in offsets.iter().map_err(|e| self.fail(e))? {
            let (key, value) = entry.map_err(|e| self.fail(e))?;
            let mut rest = key.value();
            if take_str(&mut rest).is_some_and(|group| !keep(group)) {
                continue;
            }
            state
                .offsets
                .push(self.decode_offset(key.value(), value.value())?);
        }

        match txn.open_table(FLOORS) {
            Ok(floors) => {
                for entry in floors.iter().map_err(|e| self.fail(e))? {
                    let (key, value) = entry.map_err(|e| self.fail(e))?;
                    let group = self.decode_group_key(key.value(), "floors")?;
                    let floor = self.decode_floor(&format!("of group {group:?}"), value.value())?;
                    if keep(&group) {
                        state.floors.push((group, floor));
                    }
                }
            }
            // A file written before floors were kept per group.
            Err(TableError::TableDoesNotExist(_)) => {}
            Err(e) => return Err(self.fail(e)),
        }

        let info = txn.open_table(INFO).map_err(|e| self.fail(e))?;
        if let Some(value) = info.get(GENERATION_FLOOR_KEY).map_err(|e| self.fail(e))? {
            state.generation_floor = self.decode_floor("under every group", value.value())?;
        }

        // Not part of the restored state, but checked so that damage is found at start
        // rather than at the first retention pass.
        let meta = txn.open_table(GROUP_META).map_err(|e| self.fail(e))?;
        for entry in meta.iter().map_err(|e| self.fail(e))? {
            let (key, value) = entry.map_err(|e| self.fail(e))?;
            let group = self.decode_group_key(key.value(), "group_meta")?;
            self.decode_since(&group, value.value())?;
        }
        Ok(state)
    }

    /// Applies `records` in one durable transaction; the body of [`Store::write`].
    fn write_inner(&self, records: &[Record]) -> Result<(), StoreError> {
        let mut retention = Retention::new((self.clock)());
        let mut txn = self.db.begin_write().map_err(|e| self.fail(e))?;
        txn.set_durability(Durability::Immediate);
        {
            let mut offsets = txn.open_table(OFFSETS).map_err(|e| self.fail(e))?;
            let mut groups = txn.open_table(GROUPS).map_err(|e| self.fail(e))?;
            let mut meta = txn.open_table(GROUP_META).map_err(|e| self.fail(e))?;
            let mut floors = txn.open_table(FLOORS).map_err(|e| self.fail(e))?;
            let mut key = Vec::with_capacity(256);
            let mut value = Vec::with_capacity(256);
            for record in records {
                retention.apply(
                    record,
                    &mut Marks {
                        store: self,
                        meta: &mut meta,
                        groups: &groups,
                    },
                )?;
                match record {
                    Record::Offset(offset) => {
                        encode_offset(offset, &mut key, &mut value);
                        offsets
                            .insert(key.as_slice(), value.as_slice())
                            .map_err(|e| self.fail(e))?;
                    }
                    Record::Group(snapshot) => {
                        value.clear();
                        value.push(VALUE_FORMAT);
                        snapshot_json::encode(snapshot, &mut value).map_err(|e| {
                            StoreError::Io(format!(
                                "{}: cannot encode snapshot of group {:?}: {e}",
                                self.path.display(),
                                snapshot.group
                            ))
                        })?;
                        groups
                            .insert(snapshot.group.as_bytes(), value.as_slice())
                            .map_err(|e| self.fail(e))?;
                        // The snapshot's generation is above the floor: it speaks for it.
                        floors
                            .remove(snapshot.group.as_bytes())
                            .map_err(|e| self.fail(e))?;
                    }
                    Record::GroupDeleted { group } => {
                        let removed = groups.remove(group.as_bytes()).map_err(|e| self.fail(e))?;
                        if let Some(value) = removed {
                            let generation = self.decode_snapshot(group, value.value())?.generation;
                            self.raise_floor(&mut floors, group, generation)?;
                        }
                        self.delete_offsets(group, &mut offsets, &mut key)?;
                    }
                }
            }
        }
        txn.commit().map_err(|e| self.fail(e))
    }

    /// Keeps `generation` as `group`'s floor if it is above it.
    fn raise_floor(
        &self,
        floors: &mut Table<'_, &'static [u8], &'static [u8]>,
        group: &str,
        generation: u32,
    ) -> Result<(), StoreError> {
        let floor = match floors.get(group.as_bytes()).map_err(|e| self.fail(e))? {
            Some(value) => value
                .value()
                .try_into()
                .map(u32::from_le_bytes)
                .unwrap_or(0),
            None => 0,
        };
        if generation > floor {
            floors
                .insert(group.as_bytes(), generation.to_le_bytes().as_slice())
                .map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    fn decode_floor(&self, what: &str, value: &[u8]) -> Result<u32, StoreError> {
        let bytes: [u8; 4] = value.try_into().map_err(|_| {
            self.corrupt(format!(
                "generation floor {what} is {} bytes, not 4",
                value.len()
            ))
        })?;
        Ok(u32::from_le_bytes(bytes))
    }

    /// Removes every offset of `group` (contiguous in key order); `prefix` is scratch.
    fn delete_offsets(
        &self,
        group: &str,
        offsets: &mut Table<'_, &'static [u8], &'static [u8]>,
        prefix: &mut Vec<u8>,
    ) -> Result<(), StoreError> {
        prefix.clear();
        push_bytes(prefix, group.as_bytes());
        let mut keys = Vec::new();
        for entry in offsets
            .range(prefix.as_slice()..)
            .map_err(|e| self.fail(e))?
        {
            let (key, _) = entry.map_err(|e| self.fail(e))?;
            if !key.value().starts_with(prefix) {
                break;
            }
            keys.push(key.value().to_vec());
        }
        for key in &keys {
            offsets.remove(key.as_slice()).map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    fn decode_group_key(&self, key: &[u8], table: &str) -> Result<String, StoreError> {
        String::from_utf8(key.to_vec()).map_err(|_| {
            self.corrupt(format!(
                "a key of table {table} is not UTF-8: {}",
                show_bytes(key)
            ))
        })
    }

    fn decode_snapshot(&self, group: &str, value: &[u8]) -> Result<GroupSnapshot, StoreError> {
        let json = match value.split_first() {
            Some((&VALUE_FORMAT, json)) => json,
            Some((other, _)) => {
                return Err(self.corrupt(format!(
                    "snapshot of group {group:?} has unknown format {other}"
                )))
            }
            None => return Err(self.corrupt(format!("snapshot of group {group:?} is empty"))),
        };
        let snapshot = snapshot_json::decode(json).map_err(|e| {
            self.corrupt(format!("snapshot of group {group:?} does not decode: {e}"))
        })?;
        if snapshot.group != group {
            return Err(self.corrupt(format!(
                "snapshot stored under group {group:?} is of group {:?}",
                snapshot.group
            )));
        }
        Ok(snapshot)
    }

    fn decode_offset(&self, key: &[u8], value: &[u8]) -> Result<OffsetRecord, StoreError> {
        let bad_key = |what: &str| {
            self.corrupt(format!(
                "offset key {} does not decode: {what}",
                show_bytes(key)
            ))
        };
        let mut rest = key;
        let group = take_str(&mut rest).ok_or_else(|| bad_key("bad group"))?;
        let topic = take_str(&mut rest).ok_or_else(|| bad_key("bad topic"))?;
        let partition = take_u32(&mut rest).ok_or_else(|| bad_key("bad partition"))?;
        if !rest.is_empty() {
            return Err(bad_key("trailing bytes"));
        }
        let bad_value = |what: &str| {
            self.corrupt(format!(
                "offset of group {group:?} topic {topic:?} partition {partition} does not decode: {what}"
            ))
        };
        let (format, rest) = value
            .split_first()
            .ok_or_else(|| bad_value("empty value"))?;
        if *format != VALUE_FORMAT {
            return Err(bad_value(&format!("unknown format {format}")));
        }
        let (offset, metadata) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| bad_value("value too short"))?;
        let metadata =
            std::str::from_utf8(metadata).map_err(|_| bad_value("metadata is not UTF-8"))?;
        Ok(OffsetRecord {
            group: group.to_owned(),
            topic: topic.to_owned(),
            partition,
            offset: i64::from_le_bytes(*offset),
            metadata: metadata.to_owned(),
        })
    }

    fn decode_since(&self, group: &str, value: &[u8]) -> Result<u64, StoreError> {
        let bytes: [u8; 8] = value.try_into().map_err(|_| {
            self.corrupt(format!(
                "empty-since time of group {group:?} does not decode: {} bytes, expected 8",
                value.len()
            ))
        })?;
        Ok(u64::from_le_bytes(bytes))
    }

    fn corrupt(&self, reason: impl fmt::Display) -> StoreError {
        StoreError::Corrupt {
            path: self.path.display().to_string(),
            reason: reason.to_string(),
        }
    }

    /// Maps a redb error met while using the open database.
    fn fail(&self, error: impl Into<redb::Error>) -> StoreError {
        match error.into() {
            redb::Error::Corrupted(reason) => self.corrupt(reason),
            other => StoreError::Io(format!("{}: {other}", self.path.display())),
        }
    }
}

type BytesTableOf<'t> = Table<'t, &'static [u8], &'static [u8]>;

/// Retention's view of the `group_meta` and `groups` tables inside a write.
struct Marks<'a, 't> {
    store: &'a RedbStore,
    meta: &'a mut BytesTableOf<'t>,
    groups: &'a BytesTableOf<'t>,
}

impl IdleMarks for Marks<'_, '_> {
    fn marked(&self, group: &str) -> Result<bool, StoreError> {
        let mark = self.meta.get(group.as_bytes());
        Ok(mark.map_err(|e| self.store.fail(e))?.is_some())
    }

    fn mark(&mut self, group: &str, since_ms: u64) -> Result<(), StoreError> {
        self.meta
            .insert(group.as_bytes(), since_ms.to_le_bytes().as_slice())
            .map_err(|e| self.store.fail(e))?;
        Ok(())
    }

    fn unmark(&mut self, group: &str) -> Result<(), StoreError> {
        self.meta
            .remove(group.as_bytes())
            .map_err(|e| self.store.fail(e))?;
        Ok(())
    }

    fn has_snapshot(&self, group: &str) -> Result<bool, StoreError> {
        let snapshot = self.groups.get(group.as_bytes());
        Ok(snapshot.map_err(|e| self.store.fail(e))?.is_some())
    }
}

impl Store for RedbStore {
    fn load(&self) -> Result<RestoredState, StoreError> {
        guard(&self.path, || self.load_inner(&|_| true))
    }

    fn load_groups(&self, keep: &dyn Fn(&str) -> bool) -> Result<RestoredState, StoreError> {
        guard(&self.path, || self.load_inner(keep))
    }

    fn write(&self, records: &[Record]) -> Result<(), StoreError> {
        guard(&self.path, || self.write_inner(records))
    }

    fn expired_groups(&self, retention: Duration) -> Result<Vec<String>, StoreError> {
        let now = (self.clock)();
        guard(&self.path, || self.expired_groups_at(now, retention))
    }
}

/// Appends `bytes` with a u32 big-endian length prefix.
fn push_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    // Group and topic names are bounded by the protocol far below 4 GiB.
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(bytes);
}

fn encode_offset(offset: &OffsetRecord, key: &mut Vec<u8>, value: &mut Vec<u8>) {
    key.clear();
    push_bytes(key, offset.group.as_bytes());
    push_bytes(key, offset.topic.as_bytes());
    key.extend_from_slice(&offset.partition.to_be_bytes());
    value.clear();
    value.push(VALUE_FORMAT);
    value.extend_from_slice(&offset.offset.to_le_bytes());
    value.extend_from_slice(offset.metadata.as_bytes());
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let (bytes, tail) = rest.split_first_chunk::<4>()?;
    *rest = tail;
    Some(u32::from_be_bytes(*bytes))
}

fn take_str<'a>(rest: &mut &'a [u8]) -> Option<&'a str> {
    let len = usize::try_from(take_u32(rest)?).ok()?;
    if rest.len() < len {
        return None;
    }
    let (bytes, tail) = rest.split_at(len);
    *rest = tail;
    std::str::from_utf8(bytes).ok()
}

/// Up to 64 bytes of `bytes`, escaped, for error messages.
fn show_bytes(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(64)];
    let mut out = shown.escape_ascii().to_string();
    if bytes.len() > shown.len() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
impl RedbStore {
    /// Writes raw bytes into one of the tables, to simulate damage.
    pub(super) fn put_raw(&self, table: &str, key: &[u8], value: &[u8]) {
        let definition = match table {
            "info" => INFO,
            "offsets" => OFFSETS,
            "groups" => GROUPS,
            "group_meta" => GROUP_META,
            "floors" => FLOORS,
            other => panic!("no table {other}"),
        };
        let txn = self.db.begin_write().unwrap();
        txn.open_table(definition)
            .unwrap()
            .insert(key, value)
            .unwrap();
        txn.commit().unwrap();
    }

    /// The encoded key of an offset.
    pub(super) fn offset_key(group: &str, topic: &str, partition: u32) -> Vec<u8> {
        let record = OffsetRecord {
            group: group.to_owned(),
            topic: topic.to_owned(),
            partition,
            offset: 0,
            metadata: String::new(),
        };
        let mut key = Vec::new();
        encode_offset(&record, &mut key, &mut Vec::new());
        key
    }
}
