//! A batch's net effect on one group of the etcd store, and retention's view of it
//! (see `store.rs`).

use std::collections::{BTreeMap, HashMap};

use super::chunks::Op;
use super::codec::{Info, VALUE_FORMAT};
use super::keys::Keys;
use super::store::EtcdStore;
use crate::core::Record;
use crate::store::retention::IdleMarks;
use crate::store::{snapshot_json, StoreError};

/// The net effect of a batch on one group.
#[derive(Debug)]
pub(super) struct GroupWrite {
    pub(super) slot: u32,
    pub(super) group: String,
    before: Info,
    pub(super) info: Info,
    /// `Some(None)`: delete the snapshot; `Some(Some(value))`: put it.
    snapshot: Option<Option<Vec<u8>>>,
    /// Offsets put after the last deletion, by key.
    offsets: BTreeMap<String, Vec<u8>>,
    /// A deletion removes every offset stored before it.
    deleted: bool,
}

impl GroupWrite {
    pub(super) fn new(slot: u32, group: String, info: Info) -> Self {
        Self {
            slot,
            group,
            before: info.clone(),
            info,
            snapshot: None,
            offsets: BTreeMap::new(),
            deleted: false,
        }
    }

    pub(super) fn apply(&mut self, keys: &Keys, record: &Record) -> Result<(), StoreError> {
        match record {
            Record::Offset(o) => {
                let mut value = Vec::with_capacity(9 + o.metadata.len());
                value.push(VALUE_FORMAT);
                value.extend_from_slice(&o.offset.to_le_bytes());
                value.extend_from_slice(o.metadata.as_bytes());
                self.offsets.insert(
                    keys.offset(self.slot, &o.group, &o.topic, o.partition),
                    value,
                );
            }
            Record::Group(snapshot) => {
                let mut value = vec![VALUE_FORMAT];
                snapshot_json::encode(snapshot, &mut value).map_err(|e| {
                    StoreError::Io(format!(
                        "cannot encode snapshot of group {:?}: {e}",
                        snapshot.group
                    ))
                })?;
                self.snapshot = Some(Some(value));
                // The snapshot's generation is above the floor: it speaks for it.
                self.info.generation = Some(snapshot.generation);
                self.info.floor = None;
            }
            Record::GroupDeleted { .. } => {
                if let Some(generation) = self.info.generation.take() {
                    self.info.floor = Some(self.info.floor.unwrap_or(0).max(generation));
                    self.snapshot = Some(None);
                }
                self.offsets.clear();
                self.deleted = true;
            }
        }
        Ok(())
    }

    /// The operations: the individual offset ones, and the ones that must land
    /// together (offset range deletion, snapshot, info).
    pub(super) async fn ops(&self, store: &EtcdStore) -> Result<(Vec<Op>, Vec<Op>), StoreError> {
        let keys = store.keys();
        let mut offsets = Vec::new();
        let mut last = Vec::new();
        if self.deleted {
            let prefix = keys.offsets(self.slot, &self.group);
            if self.offsets.is_empty() {
                last.push(Op::DeletePrefix(prefix));
            } else {
                // etcd refuses a put inside a range deleted by the same transaction:
                // delete the stored offsets one by one instead.
                for (key, _) in store.scan(prefix, true).await? {
                    if !self.offsets.contains_key(&key) {
                        offsets.push(Op::Delete(key));
                    }
                }
            }
        }
        for (key, value) in &self.offsets {
            offsets.push(Op::Put(key.clone(), value.clone()));
        }
        match &self.snapshot {
            Some(Some(value)) => last.push(Op::Put(
                keys.snapshot(self.slot, &self.group),
                value.clone(),
            )),
            Some(None) => last.push(Op::Delete(keys.snapshot(self.slot, &self.group))),
            None => {}
        }
        if self.info != self.before {
            let key = keys.info(self.slot, &self.group);
            if self.info.is_empty() {
                last.push(Op::Delete(key));
            } else {
                let json =
                    serde_json::to_vec(&self.info).map_err(|e| StoreError::Io(e.to_string()))?;
                last.push(Op::Put(key, json));
            }
        }
        Ok((offsets, last))
    }
}

/// Retention's view of the batch's groups.
pub(super) struct Marks<'a, 'g> {
    pub(super) groups: &'a mut [GroupWrite],
    pub(super) index: &'a HashMap<&'g str, usize>,
}

impl IdleMarks for Marks<'_, '_> {
    fn marked(&self, group: &str) -> Result<bool, StoreError> {
        Ok(self.groups[self.index[group]].info.since.is_some())
    }

    fn mark(&mut self, group: &str, since_ms: u64) -> Result<(), StoreError> {
        self.groups[self.index[group]].info.since = Some(since_ms);
        Ok(())
    }

    fn unmark(&mut self, group: &str) -> Result<(), StoreError> {
        self.groups[self.index[group]].info.since = None;
        Ok(())
    }

    fn has_snapshot(&self, group: &str) -> Result<bool, StoreError> {
        Ok(self.groups[self.index[group]].info.generation.is_some())
    }
}
