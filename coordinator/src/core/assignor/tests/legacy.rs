//! The sticky assignor's uniform path as it was before capacities: the reference that
//! the capacity-aware path must reproduce when every capacity is the same.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::super::sticky::Layout;
use super::super::{AssignmentInput, TopicPartition, NONE};

/// Every member subscribes to the same topics: `topics`, cleaned (existing, with
/// partitions, ascending, no duplicates).
///
/// With `P` partitions over `N` members, every member's quota is `P / N`, and the
/// `P % N` members owning the most valid partitions (ties by member order) get one more,
/// which is the quota choice that moves the fewest partitions. Each member keeps its
/// lowest owned partitions up to its quota; every other partition goes to a member
/// under quota, the least loaded first (ties by member order).
pub(in super::super) fn assign_uniform(
    input: &AssignmentInput<'_>,
    topics: &[u32],
) -> Vec<Vec<TopicPartition>> {
    let n = input.members.len();
    if n == 0 {
        return Vec::new();
    }
    let layout = Layout::new(input.topics);
    let mut subscribed = vec![false; input.topics.len()];
    for &topic in topics {
        subscribed[topic as usize] = true;
    }

    // The member keeping each partition, and how many valid partitions each one owns.
    let mut owner = vec![NONE; layout.total()];
    let mut owned = vec![0_usize; n];
    for (m, member) in input.members.iter().enumerate() {
        for &tp in member.owned {
            let Some(index) = layout.index(tp) else {
                continue;
            };
            if owner[index] == NONE && subscribed[tp.topic as usize] {
                owner[index] = m as u32;
                owned[m] += 1;
            }
        }
    }

    let total: usize = topics
        .iter()
        .map(|&topic| input.topics[topic as usize] as usize)
        .sum();
    let (base, extra) = (total / n, total % n);
    let mut quota = vec![base; n];
    if extra > 0 {
        let mut by_owned: Vec<u32> = (0..n as u32).collect();
        let key = |&m: &u32| (Reverse(owned[m as usize]), m);
        if extra < n {
            by_owned.select_nth_unstable_by_key(extra, key);
        }
        for &m in &by_owned[..extra] {
            quota[m as usize] += 1;
        }
    }

    // `owned` becomes the number of owned partitions each member still keeps.
    let mut out = Vec::with_capacity(n);
    let mut under_quota = BinaryHeap::new();
    for (m, (kept, &quota)) in owned.iter_mut().zip(&quota).enumerate() {
        *kept = (*kept).min(quota);
        if *kept < quota {
            under_quota.push(Reverse((*kept, m as u32)));
        }
        out.push(Vec::with_capacity(quota));
    }
    let mut kept = owned;

    // Partitions are visited in ascending order, so every list comes out sorted.
    for &topic in topics {
        let start = layout.start[topic as usize];
        for partition in 0..input.topics[topic as usize] {
            let tp = TopicPartition { topic, partition };
            let m = owner[start + partition as usize];
            if m != NONE && kept[m as usize] > 0 {
                kept[m as usize] -= 1;
                out[m as usize].push(tp);
                continue;
            }
            // The quotas add up to the partition count, so the partitions not kept are
            // exactly as many as the places left under quota.
            let Reverse((load, m)) = under_quota.pop().expect("quotas cover every partition");
            out[m as usize].push(tp);
            if load + 1 < quota[m as usize] {
                under_quota.push(Reverse((load + 1, m)));
            }
        }
    }
    out
}
