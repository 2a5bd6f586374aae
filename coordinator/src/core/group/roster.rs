//! A group's members: in member-id order, found by hash.
//!
//! Every heartbeat looks its member up, and a `BTreeMap` keyed by the ids compared up
//! to a dozen strings per lookup, each behind a pointer of its own: the comparisons
//! were a third of a renewal's cost in Heartbeats frames. An [`IndexMap`] kept sorted
//! finds a member with one hash and one comparison, and still iterates in id order
//! (assignments, snapshots and answers are built in that order). Adding or removing a
//! member shifts the entries after it, which is linear in the group's size (at most
//! `max_members_per_group`, 10,000 by default). Joins and leaves are rare next to
//! heartbeats, and a generated id usually sorts after every id before it, so a join
//! mostly appends: a storm of 10,000 joins into one group costs what it did before.
//!
//! The keys are [`CompactString`]s, which hold an id of up to 24 bytes (a generated id
//! is about 20) inside the entry: the comparison that confirms a hash match reads the
//! entry it already loaded instead of following a pointer to another cache line.

use std::ops::{Deref, Index};
use std::sync::Arc;

use compact_str::CompactString;
use foldhash::fast::RandomState;
use indexmap::IndexMap;

use super::Member;

/// The members of one group, sorted by id.
///
/// Reads go through [`Deref`] to the map; changes go through the methods here, which
/// keep the order.
#[derive(Debug, Default)]
pub(crate) struct Roster(IndexMap<CompactString, Box<Member>, RandomState>);

impl Roster {
    /// Adds `member` in its place by id, replacing one with the same id.
    pub(crate) fn insert(&mut self, member: Member) {
        self.0
            .insert_sorted(CompactString::from(&*member.id), Box::new(member));
    }

    /// Removes and returns the member with id `id`, keeping the others in order.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Box<Member>> {
        self.0.shift_remove(id)
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Member> {
        self.0.get(id).map(|m| &**m)
    }

    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Box<Member>> {
        self.0.get_mut(id)
    }

    /// Where the member with id `id` is, trying `hint` (where it was before) first: a
    /// member found where it was costs one comparison instead of a hash lookup.
    pub(crate) fn find(&self, id: &str, hint: u32) -> Option<usize> {
        match self.0.get_index(hint as usize) {
            Some((key, _)) if key == id => Some(hint as usize),
            _ => self.0.get_index_of(id),
        }
    }

    /// The member at `index` (from [`Self::find`]).
    pub(crate) fn at_mut(&mut self, index: usize) -> &mut Member {
        &mut self.0[index]
    }

    pub(crate) fn contains_key(&self, id: &str) -> bool {
        self.0.contains_key(id)
    }

    /// The member with id `id`, and the id as the core shares it.
    pub(crate) fn get_key_value(&self, id: &str) -> Option<(&Arc<str>, &Member)> {
        self.get(id).map(|m| (&m.id, m))
    }

    /// Every member's id, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.values().map(|m| &m.id)
    }

    /// The members whose ids come after `after` (all of them for `None`), in id order.
    pub(crate) fn after(&self, after: Option<&str>) -> impl Iterator<Item = &Member> {
        let start = after.map_or(0, |after| {
            match self.0.binary_search_by(|id, _| id.as_str().cmp(after)) {
                Ok(at) => at + 1,
                Err(at) => at,
            }
        });
        self.0.as_slice()[start..].values().map(|m| &**m)
    }

    /// Every member, in id order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Box<Member>> {
        self.0.values_mut()
    }
}

/// `roster[id]`: the member with id `id`, which must be there.
impl<Q: AsRef<str> + ?Sized> Index<&Q> for Roster {
    type Output = Member;

    fn index(&self, id: &Q) -> &Member {
        match self.0.get(id.as_ref()) {
            Some(m) => m,
            None => panic!("no member {:?} in the roster", id.as_ref()),
        }
    }
}

impl Deref for Roster {
    type Target = IndexMap<CompactString, Box<Member>, RandomState>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Group, Timeouts};
    use super::*;
    use crate::core::CoreConfig;

    fn member(group: &Group, id: &str) -> Member {
        let timeouts = Timeouts {
            session_ms: 10_000,
            progress_ms: 10_000,
            rebalance_ms: 10_000,
            lease_ms: 10_000,
        };
        group.new_member(
            crate::core::tests::start_instant(),
            Arc::from(id),
            None,
            String::new(),
            0,
            None,
            timeouts,
            Vec::new(),
        )
    }

    fn ids<'a>(members: impl Iterator<Item = &'a Member>) -> Vec<String> {
        members.map(|m| m.id.to_string()).collect()
    }

    /// Inserts and removes in a scrambled order keep the members in id order, as the
    /// `BTreeMap` before did, and every member stays findable by id.
    #[test]
    fn keeps_id_order_through_inserts_and_removes() {
        let group = Group::new(Arc::from("g"), 0, &CoreConfig::default());
        let mut roster = Roster::default();
        let mut model = std::collections::BTreeSet::new();
        // A fixed scramble of 0..200 (7 is coprime with 200).
        for i in (0..200u32).map(|i| (i * 7 + 3) % 200) {
            let id = format!("m{i}-x");
            roster.insert(member(&group, &id));
            model.insert(id);
            if i % 3 == 0 {
                let gone = format!("m{}-x", i / 2);
                assert_eq!(roster.remove(&gone).is_some(), model.remove(&gone));
            }
        }
        assert_eq!(
            ids(roster.values().map(|m| &**m)),
            Vec::from_iter(model.clone())
        );
        for id in &model {
            assert_eq!(&*roster.get(id.as_str()).expect("present").id, id.as_str());
            assert!(roster.get_mut(id).is_some());
        }
        assert!(roster.get("m1000-x").is_none());
        // Pages start after a given id, present or not.
        let after: Vec<String> = model
            .iter()
            .filter(|id| id.as_str() > "m150")
            .cloned()
            .collect();
        assert_eq!(ids(roster.after(Some("m150"))), after);
        let first = model.iter().next().cloned().expect("members");
        assert_eq!(ids(roster.after(Some(&first))).len(), model.len() - 1);
        assert_eq!(ids(roster.after(None)).len(), model.len());
    }
}
