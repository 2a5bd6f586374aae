//! A member's set of partitions, kept as one sorted slice of exactly its length.
//!
//! Members usually hold a handful of partitions, often one: a `BTreeSet` costs a
//! 112-byte node for a single entry and 24 bytes in the member, this costs 8 bytes per
//! entry and 16 in the member. Lookups are binary searches; a change reallocates the
//! slice, so changes come in bulk ([`PartitionSet::extend`],
//! [`PartitionSet::remove_sorted`]): one pass over the set however many partitions
//! change.

use super::super::TopicPartition;

/// Partitions in ascending order, each once: iterates in the order a `BTreeSet` would.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PartitionSet(Box<[TopicPartition]>);

impl PartitionSet {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The partitions, ascending.
    pub(crate) fn as_slice(&self) -> &[TopicPartition] {
        &self.0
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, TopicPartition> {
        self.0.iter()
    }

    pub(crate) fn contains(&self, tp: &TopicPartition) -> bool {
        self.0.binary_search(tp).is_ok()
    }

    /// Removes every partition of `gone` (ascending, each once) that is here, in one
    /// pass; returns how many were removed.
    pub(crate) fn remove_sorted(&mut self, gone: &[TopicPartition]) -> usize {
        if gone.is_empty() {
            return 0;
        }
        let mut v = std::mem::take(&mut self.0).into_vec();
        let before = v.len();
        v.retain(|tp| gone.binary_search(tp).is_err());
        let removed = before - v.len();
        self.0 = v.into_boxed_slice();
        removed
    }

    /// Partitions here and not in `other`, ascending.
    pub(crate) fn difference<'a>(
        &'a self,
        other: &'a Self,
    ) -> impl Iterator<Item = &'a TopicPartition> + 'a {
        self.0.iter().filter(move |tp| !other.contains(tp))
    }

    /// Builds the set from `v` in any order, duplicates allowed.
    fn from_vec(mut v: Vec<TopicPartition>) -> Self {
        // A stable sort: it finds runs already in order (a set plus partitions appended
        // after it) and merges them in linear time.
        v.sort();
        v.dedup();
        Self(v.into_boxed_slice())
    }
}

impl From<Vec<TopicPartition>> for PartitionSet {
    fn from(v: Vec<TopicPartition>) -> Self {
        Self::from_vec(v)
    }
}

impl FromIterator<TopicPartition> for PartitionSet {
    fn from_iter<I: IntoIterator<Item = TopicPartition>>(iter: I) -> Self {
        Self::from_vec(iter.into_iter().collect())
    }
}

impl Extend<TopicPartition> for PartitionSet {
    /// Adds every partition of `iter`, in one reallocation and one sort.
    fn extend<I: IntoIterator<Item = TopicPartition>>(&mut self, iter: I) {
        let mut v = std::mem::take(&mut self.0).into_vec();
        let before = v.len();
        v.extend(iter);
        if v.len() != before {
            *self = Self::from_vec(v);
        } else {
            self.0 = v.into_boxed_slice();
        }
    }
}

impl<'a> IntoIterator for &'a PartitionSet {
    type Item = &'a TopicPartition;
    type IntoIter = std::slice::Iter<'a, TopicPartition>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn tp((topic, partition): (u32, u32)) -> TopicPartition {
        TopicPartition { topic, partition }
    }

    /// Small topic and partition numbers, so that operations hit and miss alike.
    fn tps() -> impl Strategy<Value = Vec<TopicPartition>> {
        prop::collection::vec((0..3u32, 0..12u32).prop_map(tp), 0..24)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(TopicPartition),
        Remove(TopicPartition),
        RemoveSorted(Vec<TopicPartition>),
        Extend(Vec<TopicPartition>),
    }

    fn op() -> impl Strategy<Value = Op> {
        let one = (0..3u32, 0..12u32).prop_map(tp);
        prop_oneof![
            one.clone().prop_map(Op::Insert),
            one.prop_map(Op::Remove),
            tps().prop_map(Op::RemoveSorted),
            tps().prop_map(Op::Extend),
        ]
    }

    fn same(set: &PartitionSet, model: &BTreeSet<TopicPartition>) {
        let got: Vec<_> = set.iter().copied().collect();
        let want: Vec<_> = model.iter().copied().collect();
        assert_eq!(got, want);
        assert_eq!(set.len(), model.len());
        assert_eq!(set.is_empty(), model.is_empty());
    }

    proptest! {
        #[test]
        fn behaves_as_a_btreeset(start in tps(), ops in prop::collection::vec(op(), 0..40)) {
            let mut set: PartitionSet = start.iter().copied().collect();
            let mut model: BTreeSet<TopicPartition> = start.iter().copied().collect();
            same(&set, &model);
            for op in ops {
                match op {
                    Op::Insert(t) => {
                        set.extend([t]);
                        model.insert(t);
                    }
                    Op::Remove(t) => {
                        prop_assert_eq!(set.remove_sorted(&[t]), usize::from(model.remove(&t)));
                    }
                    Op::RemoveSorted(mut gone) => {
                        gone.sort();
                        gone.dedup();
                        let want = gone.iter().filter(|t| model.remove(t)).count();
                        prop_assert_eq!(set.remove_sorted(&gone), want);
                    }
                    Op::Extend(more) => {
                        set.extend(more.iter().copied());
                        model.extend(more);
                    }
                }
                same(&set, &model);
            }
        }

        #[test]
        fn compares_as_btreesets_do(a in tps(), b in tps()) {
            let (sa, sb): (PartitionSet, PartitionSet) =
                (a.iter().copied().collect(), b.iter().copied().collect());
            let (ma, mb): (BTreeSet<_>, BTreeSet<_>) =
                (a.iter().copied().collect(), b.iter().copied().collect());
            for t in a.iter().chain(&b) {
                prop_assert_eq!(sa.contains(t), ma.contains(t));
            }
            prop_assert_eq!(sa == sb, ma == mb);
            let got: Vec<_> = sa.difference(&sb).copied().collect();
            let want: Vec<_> = ma.difference(&mb).copied().collect();
            prop_assert_eq!(got, want);
            let sorted: Vec<_> = ma.iter().copied().collect();
            let from_vec = PartitionSet::from(a.clone());
            prop_assert_eq!(from_vec.as_slice(), sorted.as_slice());
        }
    }

    #[test]
    fn an_empty_set_allocates_nothing_and_one_entry_costs_eight_bytes() {
        assert_eq!(std::mem::size_of::<PartitionSet>(), 16);
        let mut set = PartitionSet::new();
        assert!(set.is_empty() && !set.contains(&tp((0, 0))));
        set.extend([tp((0, 0))]);
        assert_eq!(std::mem::size_of_val(set.as_slice()), 8);
    }
}
