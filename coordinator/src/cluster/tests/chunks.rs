//! Packing a batch's operations into transactions within etcd's limits.

use super::super::chunks::{Chunks, Op};
use super::super::{MAX_TXN_BYTES, MAX_TXN_OPS};

fn put(key: &str, bytes: usize) -> Op {
    Op::Put(key.to_owned(), vec![0; bytes])
}

#[test]
fn small_groups_share_a_transaction_and_never_straddle_two() {
    let mut chunks = Chunks::default();
    for g in 0..100 {
        let offsets = vec![put(&format!("o{g}"), 10)];
        chunks.add(
            g % 4,
            offsets,
            vec![put(&format!("g{g}"), 10), put(&format!("i{g}"), 10)],
        );
    }
    let done = chunks.finish();
    assert_eq!(
        done.len(),
        3,
        "300 operations in 128-operation transactions, by group"
    );
    for chunk in &done {
        assert!(chunk.ops.len() <= MAX_TXN_OPS);
        assert_eq!(
            chunk.ops.len() % 3,
            0,
            "a group's three operations stay together"
        );
        assert_eq!(chunk.slots.len(), 4);
    }
}

#[test]
fn a_wide_group_puts_its_offsets_first_and_the_rest_together_last() {
    let mut chunks = Chunks::default();
    let offsets: Vec<Op> = (0..300).map(|p| put(&format!("o{p}"), 10)).collect();
    let last = vec![Op::DeletePrefix("o".into()), put("g", 10), put("i", 10)];
    chunks.add(1, offsets, last.clone());
    let done = chunks.finish();
    assert_eq!(done.len(), 3);
    assert!(done.iter().all(|c| c.ops.len() <= MAX_TXN_OPS));
    let final_ops = &done[2].ops;
    assert_eq!(final_ops[final_ops.len() - 3..], last[..]);
}

#[test]
fn transactions_stay_under_the_request_size() {
    let mut chunks = Chunks::default();
    for g in 0..5 {
        chunks.add(
            0,
            Vec::new(),
            vec![put(&format!("g{g}"), MAX_TXN_BYTES / 3)],
        );
    }
    let done = chunks.finish();
    assert_eq!(
        done.iter().map(|c| c.ops.len()).collect::<Vec<_>>(),
        [2, 2, 1]
    );
    // One value over the limit goes alone (etcd then decides).
    let mut chunks = Chunks::default();
    chunks.add(0, Vec::new(), vec![put("a", 10)]);
    chunks.add(0, Vec::new(), vec![put("huge", MAX_TXN_BYTES + 1)]);
    assert_eq!(chunks.finish().len(), 2);
}
