//! Which groups this coordinator serves: the gate every group-scoped request passes
//! before it reaches a shard.
//!
//! A single coordinator serves every group, and its directory says so without looking
//! at anything: it holds no table, and a lookup is one test of an `Option`, so the
//! heartbeat path takes no lock and allocates nothing for it. A coordinator that shares
//! its groups with others (a cluster) keeps, per slot (`slot_of`), whether it serves the
//! slot, is loading it, knows who serves it, or knows nothing; the slot manager sets
//! these, connections read them with one atomic load (and, for a slot served
//! elsewhere, one short lock to copy the owner's address).
//!
//! Requests naming a group that is not [`Lookup::Here`] are answered
//! `coordinator_loading` or `not_coordinator` by the connection (each beat of a
//! Heartbeats request on its own), and FindCoordinator is answered from here too. So is
//! ListCoordinators: the slot manager also keeps here the cluster's other coordinators
//! (the live ones and the slots' owners), which a single coordinator has none of.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use rollcall_protocol::CoordinatorListing;

use super::shard::slot_of;

/// Where a group is served, as this coordinator knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Here: requests go on to the shards.
    Here,
    /// Here, but the slot is being loaded (or handed over): `coordinator_loading`.
    Loading,
    /// By the coordinator advertising this address: `not_coordinator`.
    Elsewhere(Arc<str>),
    /// By nobody this coordinator knows of: `not_coordinator`.
    Unknown,
}

const UNKNOWN: u8 = 0;
const HERE: u8 = 1;
const LOADING: u8 = 2;
const ELSEWHERE: u8 = 3;

/// The groups this coordinator serves. Cloning shares it: the connections and the slot
/// manager hold the same one.
#[derive(Debug, Clone, Default)]
pub struct Directory {
    /// `None`: a single coordinator, which serves every group.
    slots: Option<Arc<Slots>>,
}

#[derive(Debug)]
struct Slots {
    /// Set while this coordinator can act for no slot (its etcd lease is not fresh):
    /// it takes no client connections, so that clients find the others.
    away: AtomicBool,
    states: Box<[AtomicU8]>,
    /// Each slot's owner's address, while its state is `ELSEWHERE`.
    owners: Box<[Mutex<Option<Arc<str>>>]>,
    /// The cluster's other coordinators, by id.
    others: Mutex<Arc<[CoordinatorListing]>>,
}

impl Directory {
    /// A single coordinator's: every group is here.
    pub fn single() -> Self {
        Self { slots: None }
    }

    /// A cluster member's, over `slots` slots, none of them known yet.
    pub fn cluster(slots: u32) -> Self {
        let n = slots.max(1) as usize;
        Self {
            slots: Some(Arc::new(Slots {
                away: AtomicBool::new(false),
                states: (0..n).map(|_| AtomicU8::new(UNKNOWN)).collect(),
                owners: (0..n).map(|_| Mutex::new(None)).collect(),
                others: Mutex::new(Arc::from([])),
            })),
        }
    }

    /// Whether every group is here whatever happens (a single coordinator).
    #[inline]
    pub(crate) fn is_single(&self) -> bool {
        self.slots.is_none()
    }

    /// The number of slots; `None` for a single coordinator.
    pub fn slots(&self) -> Option<u32> {
        self.slots.as_ref().map(|s| s.states.len() as u32)
    }

    /// Where `group` is served.
    #[inline]
    pub(crate) fn lookup(&self, group: &str) -> Lookup {
        match &self.slots {
            None => Lookup::Here,
            Some(slots) => slots.lookup(slot_of(group, slots.states.len() as u32)),
        }
    }

    /// Whether `group` is served here (the common case, checked without copying an
    /// address).
    #[inline]
    pub(crate) fn is_here(&self, group: &str) -> bool {
        match &self.slots {
            None => true,
            Some(slots) => {
                let slot = slot_of(group, slots.states.len() as u32) as usize;
                slots.states[slot].load(Ordering::Acquire) == HERE
            }
        }
    }

    /// Whether this coordinator has stepped out of its cluster for now (it can act for
    /// no slot): new connections are closed at once.
    pub(crate) fn is_away(&self) -> bool {
        self.slots
            .as_ref()
            .is_some_and(|s| s.away.load(Ordering::Acquire))
    }

    /// Steps out (`true`) or back in; returns whether that changed anything.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn set_away(&self, away: bool) -> bool {
        self.slots
            .as_ref()
            .is_some_and(|s| s.away.swap(away, Ordering::AcqRel) != away)
    }

    /// The cluster's other coordinators, by id (none for a single coordinator).
    pub(crate) fn others(&self) -> Arc<[CoordinatorListing]> {
        match &self.slots {
            None => Arc::from([]),
            Some(slots) => slots.others.lock().clone(),
        }
    }

    /// The cluster's other coordinators are these (sorted by id here).
    #[cfg_attr(not(any(feature = "testing", feature = "cluster")), allow(dead_code))]
    pub(crate) fn set_others(&self, mut others: Vec<CoordinatorListing>) {
        let Some(slots) = &self.slots else {
            debug_assert!(false, "a single coordinator has no other coordinators");
            return;
        };
        others.sort();
        *slots.others.lock() = Arc::from(others);
    }

    /// This coordinator serves `slot`.
    #[cfg_attr(not(any(feature = "testing", feature = "cluster")), allow(dead_code))]
    pub(crate) fn set_here(&self, slot: u32) {
        self.set(slot, HERE, None);
    }

    /// This coordinator is loading `slot` (or handing it over): its requests are
    /// answered `coordinator_loading`.
    #[cfg_attr(not(any(feature = "testing", feature = "cluster")), allow(dead_code))]
    pub(crate) fn set_loading(&self, slot: u32) {
        self.set(slot, LOADING, None);
    }

    /// The coordinator advertising `addr` serves `slot`.
    #[cfg_attr(not(any(feature = "testing", feature = "cluster")), allow(dead_code))]
    pub(crate) fn set_elsewhere(&self, slot: u32, addr: Arc<str>) {
        self.set(slot, ELSEWHERE, Some(addr));
    }

    /// Nobody this coordinator knows of serves `slot`.
    #[cfg_attr(not(any(feature = "testing", feature = "cluster")), allow(dead_code))]
    pub(crate) fn set_unknown(&self, slot: u32) {
        self.set(slot, UNKNOWN, None);
    }

    #[cfg_attr(not(any(feature = "testing", feature = "cluster")), allow(dead_code))]
    fn set(&self, slot: u32, state: u8, owner: Option<Arc<str>>) {
        let Some(slots) = &self.slots else {
            debug_assert!(false, "a single coordinator's directory has no slots");
            return;
        };
        let Some(cell) = slots.states.get(slot as usize) else {
            debug_assert!(false, "slot {slot} out of range");
            return;
        };
        // The address first, so that a reader who sees ELSEWHERE finds it (or a newer
        // one): both are written under the slot's lock.
        let mut guard = slots.owners[slot as usize].lock();
        *guard = owner;
        cell.store(state, Ordering::Release);
    }
}

impl Slots {
    fn lookup(&self, slot: u32) -> Lookup {
        let slot = slot as usize;
        match self.states[slot].load(Ordering::Acquire) {
            HERE => Lookup::Here,
            LOADING => Lookup::Loading,
            ELSEWHERE => match &*self.owners[slot].lock() {
                Some(addr) => Lookup::Elsewhere(addr.clone()),
                // Changed since the load: whatever it is now, it is not an address.
                None => Lookup::Unknown,
            },
            _ => Lookup::Unknown,
        }
    }
}

/// Public setters for tests in other crates (the `testing` feature): the slot manager
/// sets a directory within the crate.
#[cfg(any(test, feature = "testing"))]
impl Directory {
    /// [`Directory::set_here`] for a test.
    pub fn test_set_here(&self, slot: u32) {
        self.set_here(slot);
    }

    /// [`Directory::set_loading`] for a test.
    pub fn test_set_loading(&self, slot: u32) {
        self.set_loading(slot);
    }

    /// [`Directory::set_elsewhere`] for a test.
    pub fn test_set_elsewhere(&self, slot: u32, addr: &str) {
        self.set_elsewhere(slot, Arc::from(addr));
    }

    /// [`Directory::set_unknown`] for a test.
    pub fn test_set_unknown(&self, slot: u32) {
        self.set_unknown(slot);
    }

    /// [`Directory::set_others`] for a test: (id, address) pairs.
    pub fn test_set_others(&self, others: &[(&str, &str)]) {
        self.set_others(
            others
                .iter()
                .map(|(id, addr)| CoordinatorListing {
                    id: (*id).into(),
                    addr: (*addr).into(),
                })
                .collect(),
        );
    }

    /// Where `group` is served, for a test.
    pub fn test_lookup(&self, group: &str) -> Lookup {
        self.lookup(group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_coordinator_serves_every_group() {
        let d = Directory::single();
        assert!(d.is_single());
        assert_eq!(d.slots(), None);
        for g in ["a", "billing", ""] {
            assert_eq!(d.lookup(g), Lookup::Here);
            assert!(d.is_here(g));
        }
        assert_eq!(
            std::mem::size_of::<Directory>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn a_cluster_directory_answers_per_slot() {
        let d = Directory::cluster(8);
        let shared = d.clone();
        let slot = slot_of("billing", 8);
        assert_eq!(d.lookup("billing"), Lookup::Unknown);
        assert!(!d.is_here("billing"));
        shared.set_loading(slot);
        assert_eq!(d.lookup("billing"), Lookup::Loading);
        shared.set_here(slot);
        assert_eq!(d.lookup("billing"), Lookup::Here);
        assert!(d.is_here("billing"));
        shared.set_elsewhere(slot, Arc::from("10.0.0.2:7070"));
        assert_eq!(
            d.lookup("billing"),
            Lookup::Elsewhere(Arc::from("10.0.0.2:7070"))
        );
        assert!(!d.is_here("billing"));
        shared.set_unknown(slot);
        assert_eq!(d.lookup("billing"), Lookup::Unknown);
        // Another slot's group is untouched by all this.
        let other = (0..100)
            .map(|i| format!("g{i}"))
            .find(|g| slot_of(g, 8) != slot)
            .unwrap();
        assert_eq!(d.lookup(&other), Lookup::Unknown);
    }

    #[test]
    fn the_other_coordinators_are_kept_by_id() {
        assert!(Directory::single().others().is_empty());
        let d = Directory::cluster(8);
        assert!(d.others().is_empty());
        d.clone().test_set_others(&[("c3", "h3:1"), ("c2", "h2:1")]);
        let others = d.others();
        let ids: Vec<&str> = others.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["c2", "c3"]);
    }
}
