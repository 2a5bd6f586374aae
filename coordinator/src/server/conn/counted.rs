//! Connections counted per key (a peer's address, an authenticated principal) against
//! a maximum, so that no one peer or principal can take every connection slot.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;

/// How many connections each key holds, and the most one key may hold (0: no limit,
/// and then nothing is counted).
#[derive(Debug)]
pub(crate) struct Counted<K> {
    counts: Mutex<HashMap<K, usize>>,
    max: usize,
}

/// One connection's place in its key's count; given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot<K: Hash + Eq> {
    /// `None` when there is no limit (nothing was counted).
    held: Option<(Arc<Counted<K>>, K)>,
}

impl<K: Hash + Eq + Clone> Counted<K> {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            counts: Mutex::new(HashMap::new()),
            max,
        })
    }

    /// The most connections one key may hold (0: no limit).
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Counts one more connection of `key`: `None` if the key has its maximum.
    pub(crate) fn take(self: &Arc<Self>, key: K) -> Option<Slot<K>> {
        if self.max == 0 {
            return Some(Slot { held: None });
        }
        let mut counts = self.counts.lock();
        let count = counts.entry(key.clone()).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(Slot {
            held: Some((self.clone(), key)),
        })
    }
}

impl<K: Hash + Eq> Drop for Slot<K> {
    fn drop(&mut self) {
        let Some((counted, key)) = &self.held else {
            return;
        };
        let mut counts = counted.counts.lock();
        if let Some(count) = counts.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_maximum_and_gets_slots_back_when_dropped() {
        let counted = Counted::new(2);
        let a1 = counted.take("a").expect("first");
        let _a2 = counted.take("a").expect("second");
        assert!(counted.take("a").is_none(), "a third for the same key");
        let _b = counted.take("b").expect("another key is not affected");
        drop(a1);
        assert!(counted.take("a").is_some(), "the slot came back");
    }

    #[test]
    fn without_a_maximum_nothing_is_counted() {
        let counted = Counted::new(0);
        let slots: Vec<_> = (0..100)
            .map(|_| counted.take("a").expect("no limit"))
            .collect();
        assert!(counted.counts.lock().is_empty());
        drop(slots);
    }
}
