//! The durable store as the simulation models it: exactly the records the core asked to
//! make durable, applied as `store/memory.rs` applies them.

use std::collections::BTreeMap;

use crate::core::{GroupSnapshot, OffsetRecord, Record, RestoredState};

#[derive(Debug, Default)]
pub(super) struct Durable {
    groups: BTreeMap<String, GroupSnapshot>,
    offsets: BTreeMap<(String, String, u32), (i64, String)>,
    generation_floor: u32,
}

impl Durable {
    pub(super) fn apply(&mut self, records: &[Record]) {
        for record in records {
            match record {
                Record::Offset(o) => {
                    self.offsets.insert(
                        (o.group.clone(), o.topic.clone(), o.partition),
                        (o.offset, o.metadata.clone()),
                    );
                }
                // The last snapshot of a group replaces the previous one.
                Record::Group(snapshot) => {
                    self.groups.insert(snapshot.group.clone(), snapshot.clone());
                }
                Record::GroupDeleted { group } => {
                    if let Some(g) = self.groups.remove(group) {
                        self.generation_floor = self.generation_floor.max(g.generation);
                    }
                    self.offsets.retain(|(g, _, _), _| g != group);
                }
            }
        }
    }

    /// What a restarted coordinator is restored from.
    pub(super) fn load(&self) -> RestoredState {
        RestoredState {
            groups: self.groups.values().cloned().collect(),
            offsets: self
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
            generation_floor: self.generation_floor,
        }
    }

    pub(super) fn has_offsets(&self, group: &str) -> bool {
        self.offsets.keys().any(|(g, _, _)| g == group)
    }
}
