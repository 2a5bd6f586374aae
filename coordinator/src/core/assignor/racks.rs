//! The sticky assignor's count balance when members declare racks, or when members of
//! unequal capacity subscribe to different topics.
//!
//! Every member that subscribes to something has a quota of the partitions, in
//! proportion to its capacity ([`capacity::quotas`]: within one of its exact share). A
//! rack's quota is the sum of its members'. For each rack `r`, `D_r` partitions prefer
//! it; `min(D_r, Q_r)` of them can be placed in it (its _home_ places), and the
//! `D_r − Q_r` beyond that (if any) must go elsewhere (its _overflow_). A partition
//! preferring a rack no member is in, or no rack, is _free_.
//!
//! 1. **Keep.** Each member (in member order) keeps its owned partitions that prefer its
//!    rack, lowest first, up to its quota. It then keeps other owned partitions (lowest
//!    first) up to its quota as long as its rack has places left beyond its home places,
//!    and, for a partition preferring another rack, that rack still has overflow to
//!    place: a partition never stays away from its rack when its rack has room for it.
//! 2. **Home.** Every partition not kept that prefers a rack goes to the member of that
//!    rack under quota with the most room left (ties by member order), while there is
//!    one subscribing to its topic.
//! 3. **Spread.** Every other partition goes to the rack, among those with a member
//!    under quota subscribing to its topic, holding the fewest of its topic per unit of
//!    the capacity subscribing to it there (ties by rack order), and within it to the
//!    member with the most room left. Each topic's partitions without a home are thus
//!    spread over racks in proportion to their capacity, so losing a rack loses only
//!    its share of each topic.
//! 4. If no subscriber of a topic is under quota (possible only when subscriptions
//!    differ), the partition goes to the subscriber with the fewest partitions per unit
//!    of capacity after taking it.
//!
//! Guaranteed when every member subscribes to the same topics: every member ends with
//! exactly its quota (so within one partition of its capacity share); the number of
//! partitions placed in their preferred rack is the most the quotas allow,
//! `Σ_r min(D_r, Q_r)`; a member keeps every owned partition it may (in its rack or
//! wanted nowhere in particular) up to its quota, so a departure moves only the
//! departed members' partitions when the others are under their new quotas. With
//! different subscriptions the result is valid (every partition once, only to a
//! subscriber) but the balance is greedy, not the best the subscriptions allow.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::capacity::{self, capacity};
use super::sticky::Layout;
use super::{AssignmentInput, Subscribers, Subscriptions, TopicPartition, NONE, NO_RACK};

pub(super) fn assign_with_racks(
    input: &AssignmentInput<'_>,
    subscriptions: &Subscriptions,
    subscribers: &Subscribers,
) -> Vec<Vec<TopicPartition>> {
    let n = subscriptions.members();
    let layout = Layout::new(input.topics);

    // The members' racks, numbered densely in ascending order of their ids.
    let mut racks: Vec<u32> = input.members.iter().map(|m| m.rack).collect();
    racks.sort_unstable();
    racks.dedup();
    let rack_of: Vec<usize> = input
        .members
        .iter()
        .map(|m| racks.binary_search(&m.rack).expect("a member's rack"))
        .collect();
    let rack_count = racks.len();

    // Each partition's preferred rack among the members' (NONE: free); NONE also for
    // partitions nobody subscribes to.
    let assignable = |topic: usize| !subscribers.slots(topic).is_empty();
    let mut preferred = vec![NONE; layout.total()];
    for (topic, &count) in input.topics.iter().enumerate() {
        if !assignable(topic) {
            continue;
        }
        let Some(prefs) = input.preferred_racks.get(topic) else {
            continue;
        };
        let start = layout.start[topic];
        for (p, &rack) in prefs.iter().take(count as usize).enumerate() {
            if rack != NO_RACK {
                if let Ok(r) = racks.binary_search(&rack) {
                    preferred[start + p] = r as u32;
                }
            }
        }
    }

    // Valid owners: the first member owning a partition that exists and that it
    // subscribes to.
    let mut owner = vec![NONE; layout.total()];
    let mut owned = vec![0_usize; n];
    for (m, member) in input.members.iter().enumerate() {
        let topics = subscriptions.of(m);
        for &tp in member.owned {
            let Some(index) = layout.index(tp) else {
                continue;
            };
            if owner[index] == NONE && topics.binary_search(&tp.topic).is_ok() {
                owner[index] = m as u32;
                owned[m] += 1;
            }
        }
    }

    let total: usize = (0..input.topics.len())
        .filter(|&t| assignable(t))
        .map(|t| input.topics[t] as usize)
        .sum();
    let capacities: Vec<u64> = (0..n)
        .map(|m| {
            if subscriptions.of(m).is_empty() {
                0
            } else {
                capacity(input.members[m].capacity)
            }
        })
        .collect();
    let quota = capacity::quotas(total, &capacities, &owned);

    // Rack quotas, home places and overflow.
    let mut rack_quota = vec![0_usize; rack_count];
    for m in 0..n {
        rack_quota[rack_of[m]] += quota[m];
    }
    let mut demand = vec![0_usize; rack_count];
    for &r in &preferred {
        if r != NONE {
            demand[r as usize] += 1;
        }
    }
    let home: Vec<usize> = (0..rack_count)
        .map(|r| demand[r].min(rack_quota[r]))
        .collect();
    let mut overflow: Vec<usize> = (0..rack_count).map(|r| demand[r] - home[r]).collect();
    let mut foreign: Vec<usize> = (0..rack_count).map(|r| rack_quota[r] - home[r]).collect();

    // 1. Keep.
    let mut assigned = vec![NONE; layout.total()];
    let mut count = vec![0_usize; n];
    for (m, member) in input.members.iter().enumerate() {
        let rack = rack_of[m] as u32;
        for &tp in member.owned {
            if count[m] == quota[m] {
                break;
            }
            let Some(index) = layout.index(tp) else {
                continue;
            };
            if owner[index] == m as u32 && preferred[index] == rack {
                assigned[index] = m as u32;
                count[m] += 1;
            }
        }
        for &tp in member.owned {
            if count[m] == quota[m] || foreign[rack as usize] == 0 {
                break;
            }
            let Some(index) = layout.index(tp) else {
                continue;
            };
            if owner[index] != m as u32 || assigned[index] != NONE {
                continue;
            }
            let pref = preferred[index];
            if pref == NONE {
                assigned[index] = m as u32;
            } else if overflow[pref as usize] > 0 {
                overflow[pref as usize] -= 1;
                assigned[index] = m as u32;
            } else {
                continue;
            }
            foreign[rack as usize] -= 1;
            count[m] += 1;
        }
    }

    // By rack: the topic's subscribers under quota, most room first.
    let mut open: Vec<BinaryHeap<(usize, Reverse<u32>)>> = vec![BinaryHeap::new(); rack_count];
    let fill_open =
        |open: &mut Vec<BinaryHeap<(usize, Reverse<u32>)>>, topic: usize, count: &[usize]| {
            open.iter_mut().for_each(BinaryHeap::clear);
            for &m in subscribers.members(topic) {
                let m = m as usize;
                if count[m] < quota[m] {
                    open[rack_of[m]].push((quota[m] - count[m], Reverse(m as u32)));
                }
            }
        };
    let take = |open: &mut Vec<BinaryHeap<(usize, Reverse<u32>)>>,
                rack: usize,
                count: &mut [usize]|
     -> Option<u32> {
        let (room, Reverse(m)) = open[rack].pop()?;
        count[m as usize] += 1;
        if room > 1 {
            open[rack].push((room - 1, Reverse(m)));
        }
        Some(m)
    };

    // 2. Home.
    for topic in 0..input.topics.len() {
        if !assignable(topic) {
            continue;
        }
        fill_open(&mut open, topic, &count);
        let range = layout.start[topic]..layout.start[topic + 1];
        for index in range {
            let pref = preferred[index];
            if assigned[index] == NONE && pref != NONE {
                if let Some(m) = take(&mut open, pref as usize, &mut count) {
                    assigned[index] = m;
                }
            }
        }
    }

    // 3. Spread, and 4. past the quotas.
    let mut held = vec![0_u64; rack_count];
    let mut weight = vec![0_u64; rack_count];
    for topic in 0..input.topics.len() {
        if !assignable(topic) {
            continue;
        }
        let range = layout.start[topic]..layout.start[topic + 1];
        if assigned[range.clone()].iter().all(|&m| m != NONE) {
            continue;
        }
        fill_open(&mut open, topic, &count);
        held.fill(0);
        weight.fill(0);
        for &m in subscribers.members(topic) {
            weight[rack_of[m as usize]] += capacities[m as usize];
        }
        for &m in &assigned[range.clone()] {
            if m != NONE {
                held[rack_of[m as usize]] += 1;
            }
        }
        for index in range {
            if assigned[index] != NONE {
                continue;
            }
            let rack = (0..rack_count)
                .filter(|&r| !open[r].is_empty())
                .min_by(|&a, &b| {
                    // held[a] / weight[a] against held[b] / weight[b]; weights are
                    // positive for racks with an open member.
                    (u128::from(held[a]) * u128::from(weight[b]))
                        .cmp(&(u128::from(held[b]) * u128::from(weight[a])))
                        .then(a.cmp(&b))
                });
            let m = match rack {
                Some(rack) => take(&mut open, rack, &mut count).expect("an open rack"),
                None => {
                    let m = *subscribers
                        .members(topic)
                        .iter()
                        .min_by(|&&a, &&b| {
                            let (a, b) = (a as usize, b as usize);
                            (u128::from(count[a] as u64 + 1) * u128::from(capacities[b]))
                                .cmp(&(u128::from(count[b] as u64 + 1) * u128::from(capacities[a])))
                                .then(a.cmp(&b))
                        })
                        .expect("an assignable topic has subscribers");
                    count[m as usize] += 1;
                    m
                }
            };
            held[rack_of[m as usize]] += 1;
            assigned[index] = m;
        }
    }

    let mut out: Vec<Vec<TopicPartition>> = count.iter().map(|&c| Vec::with_capacity(c)).collect();
    for (topic, &partitions) in input.topics.iter().enumerate() {
        let start = layout.start[topic];
        for partition in 0..partitions {
            let m = assigned[start + partition as usize];
            if m != NONE {
                out[m as usize].push(TopicPartition {
                    topic: topic as u32,
                    partition,
                });
            }
        }
    }
    out
}
