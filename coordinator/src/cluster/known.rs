//! What the etcd store knows of its adopted slots' `i/<group>` keys without reading
//! them, so a write usually costs no read before its transactions.
//!
//! Sound because only the owner writes a slot's keys, and its writes are prepared one
//! at a time in the order they are submitted (`pipeline.rs`): a write's infos are
//! recorded when it is prepared, so they are what etcd holds once every write under way
//! has landed, and the next write is prepared from them. After a slot is loaded whole,
//! a group of it with no entry has no info key. Adopting or forgetting a slot drops
//! what was known of it; a failed write (or one prepared after a failed write of the
//! same groups) drops what it touched, since some of its transactions may have landed
//! and those of the earlier one may not.

use std::collections::{HashMap, HashSet};

use super::codec::Info;
use crate::server::slot_of;

#[derive(Debug, Default)]
pub(crate) struct Known {
    /// Slots loaded whole since they were adopted.
    loaded: HashSet<u32>,
    /// Infos known exactly, by group.
    infos: HashMap<String, Info>,
}

impl Known {
    /// What `group` (of `slot`) holds, if known.
    pub(crate) fn get(&self, slot: u32, group: &str) -> Option<Info> {
        match self.infos.get(group) {
            Some(info) => Some(info.clone()),
            None => self.loaded.contains(&slot).then(Info::default),
        }
    }

    /// `slot` was read whole and these are its groups' infos.
    pub(crate) fn loaded(&mut self, slot: u32, infos: Vec<(String, Info)>) {
        self.loaded.insert(slot);
        self.infos.extend(infos);
    }

    /// A write was prepared: these are the groups' infos once it has landed.
    pub(crate) fn written(&mut self, infos: impl IntoIterator<Item = (String, Info)>) {
        self.infos.extend(infos);
    }

    /// A write failed: what it touched is unknown again.
    pub(crate) fn failed(&mut self, groups: &[(u32, String)]) {
        for (slot, group) in groups {
            self.loaded.remove(slot);
            self.infos.remove(group);
        }
    }

    /// `slot` changed hands: nothing about it is known.
    pub(crate) fn drop_slot(&mut self, slot: u32, slots: u32) {
        self.loaded.remove(&slot);
        self.infos.retain(|group, _| slot_of(group, slots) != slot);
    }
}
