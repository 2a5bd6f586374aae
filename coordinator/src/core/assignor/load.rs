//! The sticky assignor's load balance ([`Balance::Load`](super::Balance::Load)), and the
//! imbalance measure that decides whether a load report is worth a rebalance.
//!
//! Each partition weighs its reported load; a partition without a report (or with a
//! report that is not a finite, non-negative number) weighs the mean of the reported
//! ones, or 1 when none is. A member's _load_ is the sum of its partitions' weights, and
//! what is balanced is load per unit of capacity. With no usable report on a topic
//! anyone takes, load balance is count balance (the other engines run instead).
//!
//! 1. **Keep.** Every member keeps every valid partition it owns (as in the count
//!    balance: the first owner that subscribes to it).
//! 2. **Must move.** The partitions nobody keeps (new, or whose owner left, stopped
//!    subscribing or is excluded) are placed heaviest first (ties by partition), each on
//!    the subscriber whose load per capacity is the lowest after taking it, then the one
//!    with the fewest partitions per capacity, then member order (longest processing
//!    time first, with capacities).
//! 3. **Improve.** Then, while the churn budget lasts, the most loaded member (per
//!    capacity; ties by member order) above the mean that can hand one partition to a
//!    subscriber of its topic with both ending below its load now does so: of such
//!    moves, the one that brings the larger of the two new loads per capacity lowest.
//!    Each move lowers the members' loads sorted in descending order, so this ends. Moving a
//!    partition away from the member that owned it costs one unit of the budget; moving
//!    it back refunds it; partitions placed in step 2 move freely. The budget is
//!    `⌊churn_budget_permille × partitions / 1000⌋`. Improvement stops when no member has
//!    such a move (or after a bounded number of moves).
//!
//! Guaranteed: every partition to exactly one subscriber; excluded members get nothing;
//! at most the budget of the partitions members kept are moved away from them; the
//! output is a function of the input. Not guaranteed: the best balance. Placing the
//! heaviest first puts a partition heavier than the mean on a member of its own, so the
//! most loaded member is near `max(mean, heaviest partition)` per capacity on skewed
//! loads (that bound is what [`imbalance`] measures against); with a small budget a
//! badly balanced start (a group that just grew) takes several rebalances to even out.
//! Load balance does not consider racks.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::capacity::capacity;
use super::sticky::Layout;
use super::{AssignmentInput, Subscribers, Subscriptions, TopicPartition, NONE};

/// Each partition's weight, by flat index (see [`Layout`]); `None` when no partition of
/// a subscribed topic has a usable report.
fn weights(
    input: &AssignmentInput<'_>,
    layout: &Layout<'_>,
    assignable: &[bool],
) -> Option<Vec<f64>> {
    let reported = |topic: usize, p: usize| {
        input
            .loads
            .get(topic)
            .and_then(|loads| loads.get(p))
            .copied()
            .filter(|l| l.is_finite() && *l >= 0.0)
    };
    let (mut sum, mut count) = (0.0_f64, 0_usize);
    for (topic, &partitions) in input.topics.iter().enumerate() {
        if !assignable[topic] {
            continue;
        }
        for p in 0..partitions as usize {
            if let Some(l) = reported(topic, p) {
                sum += l;
                count += 1;
            }
        }
    }
    if count == 0 {
        return None;
    }
    let mean = sum / count as f64;
    let mut weight = vec![0.0; layout.total()];
    for (topic, &partitions) in input.topics.iter().enumerate() {
        if !assignable[topic] {
            continue;
        }
        let start = layout.start[topic];
        for p in 0..partitions as usize {
            weight[start + p] = reported(topic, p).unwrap_or(mean);
        }
    }
    Some(weight)
}

/// A member by its load, then partition count, then position (loads are never NaN).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Least(f64, usize, usize);

impl Eq for Least {}

impl PartialOrd for Least {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Least {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0
            .total_cmp(&other.0)
            .then(self.1.cmp(&other.1))
            .then(self.2.cmp(&other.2))
    }
}

/// The valid owner of each partition (first member owning it that subscribes to it).
fn owners(
    input: &AssignmentInput<'_>,
    subscriptions: &Subscriptions,
    layout: &Layout<'_>,
) -> Vec<u32> {
    let mut owner = vec![NONE; layout.total()];
    for (m, member) in input.members.iter().enumerate() {
        let topics = subscriptions.of(m);
        for &tp in member.owned {
            let Some(index) = layout.index(tp) else {
                continue;
            };
            if owner[index] == NONE && topics.binary_search(&tp.topic).is_ok() {
                owner[index] = m as u32;
            }
        }
    }
    owner
}

/// Assigns by load; `None` when no partition has a usable report (the caller then
/// balances counts).
pub(super) fn assign_by_load(
    input: &AssignmentInput<'_>,
    subscriptions: &Subscriptions,
    subscribers: &Subscribers,
) -> Option<Vec<Vec<TopicPartition>>> {
    let n = subscriptions.members();
    let layout = Layout::new(input.topics);
    let assignable: Vec<bool> = (0..input.topics.len())
        .map(|t| !subscribers.slots(t).is_empty())
        .collect();
    let weight = weights(input, &layout, &assignable)?;
    let owner = owners(input, subscriptions, &layout);
    let cap: Vec<f64> = input
        .members
        .iter()
        .map(|m| capacity(m.capacity) as f64)
        .collect();
    let topic_of: Vec<u32> = (0..input.topics.len() as u32)
        .flat_map(|t| std::iter::repeat_n(t, input.topics[t as usize] as usize))
        .collect();

    // 1. Keep.
    let mut assigned = owner.clone();
    let mut load = vec![0.0_f64; n];
    let mut count = vec![0_usize; n];
    for (index, &m) in owner.iter().enumerate() {
        if m != NONE {
            load[m as usize] += weight[index];
            count[m as usize] += 1;
        }
    }

    // 2. Must move: heaviest first.
    let mut must: Vec<usize> = (0..layout.total())
        .filter(|&i| assigned[i] == NONE && assignable[topic_of[i] as usize])
        .collect();
    must.sort_by(|&a, &b| weight[b].total_cmp(&weight[a]).then(a.cmp(&b)));
    let better = |load: &[f64], count: &[usize], w: f64, a: usize, b: usize| {
        ((load[a] + w) / cap[a])
            .total_cmp(&((load[b] + w) / cap[b]))
            .then(((count[a] + 1) as f64 / cap[a]).total_cmp(&((count[b] + 1) as f64 / cap[b])))
            .then(a.cmp(&b))
    };
    if subscriptions.is_uniform() {
        // Every member can take every partition: within a capacity the best is the one
        // with the least load (then the fewest partitions, then member order), so one
        // heap per capacity spares scanning every member.
        let mut classes: Vec<f64> = cap.clone();
        classes.sort_by(f64::total_cmp);
        classes.dedup();
        let mut heaps: Vec<BinaryHeap<Reverse<Least>>> = vec![BinaryHeap::new(); classes.len()];
        for m in 0..n {
            let class = classes.partition_point(|&c| c < cap[m]);
            heaps[class].push(Reverse(Least(load[m], count[m], m)));
        }
        for index in must {
            let w = weight[index];
            let class = (0..heaps.len())
                .filter_map(|k| heaps[k].peek().map(|Reverse(l)| (k, l.2)))
                .min_by(|&(_, a), &(_, b)| better(&load, &count, w, a, b))
                .map(|(k, _)| k)
                .expect("members to place on");
            let Reverse(Least(_, _, m)) = heaps[class].pop().expect("a peeked member");
            assigned[index] = m as u32;
            load[m] += w;
            count[m] += 1;
            heaps[class].push(Reverse(Least(load[m], count[m], m)));
        }
    } else {
        for index in must {
            let w = weight[index];
            let m = subscribers
                .members(topic_of[index] as usize)
                .iter()
                .map(|&m| m as usize)
                .min_by(|&a, &b| better(&load, &count, w, a, b))
                .expect("an assignable topic has subscribers");
            assigned[index] = m as u32;
            load[m] += w;
            count[m] += 1;
        }
    }

    // 3. Improve, within the budget.
    let partitions = assignable
        .iter()
        .zip(input.topics)
        .filter(|(a, _)| **a)
        .map(|(_, &c)| c as usize)
        .sum::<usize>();
    let mut budget = usize::from(input.policy.churn_budget_permille.min(1000)) * partitions / 1000;
    let mut held: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (index, &m) in assigned.iter().enumerate() {
        if m != NONE {
            held[m as usize].push(index);
        }
    }
    let ratio = |load: &[f64], m: usize| load[m] / cap[m];
    // Each move lowers the loads per capacity sorted in descending order (the giver's
    // drops, the taker's stays below it), so this ends; the bound is a safeguard.
    let mut rounds = 4 * partitions + 16;
    // Only members above the mean give; takers are tried from the least loaded up.
    let (mut load_sum, mut cap_sum) = (0.0, 0.0);
    for m in 0..n {
        if !subscriptions.of(m).is_empty() {
            load_sum += load[m];
            cap_sum += cap[m];
        }
    }
    let mean = if cap_sum > 0.0 {
        load_sum / cap_sum
    } else {
        0.0
    };
    let mut order: Vec<usize> = (0..n)
        .filter(|&m| !subscriptions.of(m).is_empty())
        .collect();
    let mut ascending = order.clone();
    'improve: while rounds > 0 {
        rounds -= 1;
        order.sort_by(|&a, &b| ratio(&load, b).total_cmp(&ratio(&load, a)).then(a.cmp(&b)));
        ascending.sort_by(|&a, &b| ratio(&load, a).total_cmp(&ratio(&load, b)).then(a.cmp(&b)));
        for &giver in &order {
            let now = ratio(&load, giver);
            if now <= mean * (1.0 + 1e-9) {
                // Members at or below the mean have nothing to give.
                break;
            }
            let below = now * (1.0 - 1e-9);
            // The best move: (the pair's larger load after, position in the giver's
            // list, taker).
            let mut best: Option<(f64, usize, usize)> = None;
            for (k, &index) in held[giver].iter().enumerate() {
                let w = weight[index];
                if w <= 0.0 || (budget == 0 && owner[index] == giver as u32) {
                    continue;
                }
                let topic = topic_of[index];
                let giver_after = (load[giver] - w) / cap[giver];
                // Takers from the least loaded up: one at or above the best found so
                // far cannot beat it.
                for &taker in &ascending {
                    let bar = best.map_or(below, |(b, _, _)| b.min(below));
                    if ratio(&load, taker) >= bar {
                        break;
                    }
                    if taker == giver || subscriptions.of(taker).binary_search(&topic).is_err() {
                        continue;
                    }
                    let after = giver_after.max((load[taker] + w) / cap[taker]);
                    if after < bar {
                        best = Some((after, k, taker));
                    }
                }
            }
            let Some((_, k, taker)) = best else {
                continue;
            };
            let index = held[giver].swap_remove(k);
            if owner[index] == giver as u32 {
                budget -= 1;
            } else if owner[index] == taker as u32 {
                budget += 1;
            }
            let w = weight[index];
            load[giver] -= w;
            load[taker] += w;
            held[taker].push(index);
            assigned[index] = taker as u32;
            continue 'improve;
        }
        break;
    }

    let mut out: Vec<Vec<TopicPartition>> = vec![Vec::new(); n];
    for (index, &m) in assigned.iter().enumerate() {
        if m != NONE {
            let topic = topic_of[index];
            out[m as usize].push(TopicPartition {
                topic,
                partition: (index - layout.start[topic as usize]) as u32,
            });
        }
    }
    Some(out)
}

/// How far the current ownership is from balanced load: the most loaded member's load
/// per unit of capacity, over the best any assignment could do, minus one (0: as
/// balanced as possible; 0.25: the most loaded member carries 25 % more than it would
/// have to).
///
/// "The best any assignment could do" is the larger of the mean (the load of every
/// subscribed partition, owned or not, over the capacity of the members that subscribe
/// to something and are not excluded) and the heaviest partition over the largest
/// capacity: a partition heavier than the mean sets a floor no assignment goes under,
/// so a skewed load does not read as an imbalance a rebalance could fix. Weights are as
/// in load balance (unreported partitions weigh the mean of the reported ones, all 1
/// when none is reported: then this measures partition counts). Only valid ownership
/// counts (the first owner that subscribes; excluded members' partitions count for
/// nobody). Subscriptions are taken as given, so with different subscriptions the
/// figure may stay above 0 however the partitions are placed. Returns 0 for a group with
/// no load or no members.
pub fn imbalance(input: &AssignmentInput<'_>) -> f64 {
    let subscriptions = Subscriptions::new(input);
    let subscribers = subscriptions.by_topic();
    let layout = Layout::new(input.topics);
    let n = subscriptions.members();
    let assignable: Vec<bool> = (0..input.topics.len())
        .map(|t| {
            subscribers
                .members(t)
                .iter()
                .any(|&m| !input.members[m as usize].excluded)
        })
        .collect();
    let weight = weights(input, &layout, &assignable).unwrap_or_else(|| vec![1.0; layout.total()]);
    let owner = owners(input, &subscriptions, &layout);
    let mut load = vec![0.0_f64; n];
    let mut total = 0.0;
    let mut heaviest = 0.0_f64;
    for (topic, &partitions) in input.topics.iter().enumerate() {
        if !assignable[topic] {
            continue;
        }
        let start = layout.start[topic];
        for index in start..start + partitions as usize {
            let w = weight[index];
            total += w;
            heaviest = heaviest.max(w);
            let m = owner[index];
            if m != NONE && !input.members[m as usize].excluded {
                load[m as usize] += w;
            }
        }
    }
    let (mut capacity_sum, mut largest, mut worst) = (0.0, 0.0_f64, 0.0_f64);
    for (m, member) in input.members.iter().enumerate() {
        if member.excluded || subscriptions.of(m).is_empty() {
            continue;
        }
        let c = capacity(member.capacity) as f64;
        capacity_sum += c;
        largest = largest.max(c);
        worst = worst.max(load[m] / c);
    }
    if capacity_sum == 0.0 || total <= 0.0 {
        return 0.0;
    }
    let floor = (total / capacity_sum).max(heaviest / largest);
    (worst / floor - 1.0).max(0.0)
}
