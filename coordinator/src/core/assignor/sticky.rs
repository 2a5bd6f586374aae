//! The sticky assignor.
//!
//! Two algorithms, chosen by the shape of the subscriptions:
//!
//! - [`assign_uniform`], when every member subscribes to the same topics (the usual
//!   case): per-member quotas, in time linear in the partitions.
//! - [`assign_mixed`] otherwise: per-(topic, member) counts balanced by moving one
//!   partition at a time along paths of members, then turned into partitions.
//!
//! Both first validate each member's owned partitions: a partition is kept by the first
//! member (in member order) that owns it, exists and is subscribed to by that member;
//! other claims are dropped.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::{capacity, AssignmentInput, Subscribers, Subscriptions, TopicPartition, NONE};

/// When the partitions members own above an even share, times (members +
/// subscriptions), exceed this (about the cost of balancing them one round each),
/// [`assign_mixed`] caps what members keep before balancing.
const ROUNDS_BUDGET: usize = 1 << 20;

/// Where each topic's partitions start in a flat array of all the group's partitions.
pub(super) struct Layout<'a> {
    counts: &'a [u32],
    pub(super) start: Vec<usize>,
}

impl<'a> Layout<'a> {
    pub(super) fn new(counts: &'a [u32]) -> Self {
        let mut start = Vec::with_capacity(counts.len() + 1);
        let mut total = 0;
        start.push(0);
        for &count in counts {
            total += count as usize;
            start.push(total);
        }
        Self { counts, start }
    }

    pub(super) fn total(&self) -> usize {
        self.start[self.counts.len()]
    }

    /// The flat index of `tp`, if it exists.
    pub(super) fn index(&self, tp: TopicPartition) -> Option<usize> {
        let count = *self.counts.get(tp.topic as usize)?;
        (tp.partition < count).then(|| self.start[tp.topic as usize] + tp.partition as usize)
    }
}

/// Every member subscribes to the same topics: `topics`, cleaned (existing, with
/// partitions, ascending, no duplicates).
///
/// With `P` partitions over `N` members of equal capacity, every member's quota is
/// `P / N`, and the `P % N` members owning the most valid partitions (ties by member
/// order) get one more, which is the quota choice that moves the fewest partitions.
/// With unequal capacities the quotas are proportional to them (see
/// [`capacity::quotas`], which reduces to the same choice for equal ones). Each member keeps its
/// lowest owned partitions up to its quota; every other partition goes to a member
/// under quota, the least loaded first (ties by member order).
pub(super) fn assign_uniform(
    input: &AssignmentInput<'_>,
    topics: &[u32],
) -> Vec<Vec<TopicPartition>> {
    let n = input.members.len();
    let Some(first_capacity) = input.members.first().map(|m| m.capacity) else {
        return Vec::new();
    };
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
    let quota = if input.members.iter().all(|m| m.capacity == first_capacity) {
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
        quota
    } else {
        let capacities: Vec<u64> = input
            .members
            .iter()
            .map(|m| capacity::capacity(m.capacity))
            .collect();
        capacity::quotas(total, &capacities, &owned)
    };

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

/// Members subscribe to different topics.
///
/// Works on counts first: how many partitions of each topic each subscriber gets.
///
/// 1. Every member starts with its valid owned partitions (capped at the highest load of
///    a most balanced assignment when the start is very uneven).
/// 2. The partitions nobody keeps go, one by one, to the least loaded subscriber of
///    their topic, topics with the fewest subscribers first.
/// 3. While some member can pass a partition along a chain of members to a member with
///    at least two fewer (each link handing over a partition of a topic the next member
///    subscribes to), one partition moves along the chain that takes the fewest
///    partitions from their owners. When no such chain is left, no assignment under
///    these subscriptions is more balanced.
/// 4. A member that lost some of its own partitions of a topic gets one back from a
///    subscriber with one partition more that holds one it did not own; the balance
///    stays the same.
/// 5. Each member keeps its lowest owned partitions of each topic up to its count, and
///    the rest of each topic fills the remaining counts in member order.
pub(super) fn assign_mixed(
    input: &AssignmentInput<'_>,
    subscriptions: &Subscriptions,
    subscribers: &Subscribers,
) -> Vec<Vec<TopicPartition>> {
    let n = subscriptions.members();
    let layout = Layout::new(input.topics);
    let slots = subscribers.members.len();

    // The slot (topic, member) keeping each partition, and valid owned counts by slot.
    let mut owner = vec![NONE; layout.total()];
    let mut owned = vec![0_u32; slots];
    for (m, member) in input.members.iter().enumerate() {
        let topics = subscriptions.of(m);
        for &tp in member.owned {
            let Some(index) = layout.index(tp) else {
                continue;
            };
            let Ok(k) = topics.binary_search(&tp.topic) else {
                continue;
            };
            if owner[index] == NONE {
                let slot = subscribers.slot[subscriptions.start[m] + k];
                owner[index] = slot as u32;
                owned[slot] += 1;
            }
        }
    }

    // Target counts by slot, starting from what each member owns.
    let mut count = owned.clone();
    let mut load = vec![0_usize; n];
    for (slot, &c) in owned.iter().enumerate() {
        load[subscribers.members[slot] as usize] += c as usize;
    }

    // Balancing moves one partition per round, each round costing about members plus
    // subscriptions: too slow from a very uneven start (one member owning everything).
    // Every most balanced assignment has the same highest load, so anything a member owns
    // above it has to go anyway. When the rounds would cost too much, find that load from
    // scratch and let the surplus go at once. Which topics a member sheds is then chosen
    // by the plan from scratch, not by the rounds, so a few more partitions than
    // necessary may move; the result is as balanced either way.
    let assignable: usize = (0..input.topics.len())
        .filter(|&topic| !subscribers.slots(topic).is_empty())
        .map(|topic| input.topics[topic] as usize)
        .sum();
    let surplus: usize = load
        .iter()
        .map(|&l| l.saturating_sub(assignable.div_ceil(n.max(1))))
        .sum();
    if surplus.saturating_mul(n + slots) > ROUNDS_BUDGET {
        let none = vec![0; slots];
        let mut fresh = vec![0; slots];
        let mut fresh_load = vec![0; n];
        fill(input, subscribers, &mut fresh, &mut fresh_load);
        balance(
            subscriptions,
            subscribers,
            &none,
            &mut fresh,
            &mut fresh_load,
        );
        let cap = fresh_load.iter().copied().max().unwrap_or(0);
        for (m, l) in load.iter_mut().enumerate() {
            // First from the topics the plan from scratch gives the member fewer of, then
            // from any; last topics first, so the member keeps its lowest partitions.
            let entries = subscriptions.start[m]..subscriptions.start[m + 1];
            for above_plan in [true, false] {
                for &slot in subscribers.slot[entries.clone()].iter().rev() {
                    let floor = if above_plan { fresh[slot] } else { 0 };
                    let shed =
                        (count[slot].saturating_sub(floor) as usize).min(l.saturating_sub(cap));
                    count[slot] -= shed as u32;
                    *l -= shed;
                }
            }
        }
    }

    fill(input, subscribers, &mut count, &mut load);
    balance(subscriptions, subscribers, &owned, &mut count, &mut load);
    give_back(input, subscribers, &owned, &mut count, &mut load);

    // `owned` becomes how many owned partitions each slot keeps, `count` how many more it
    // takes.
    for (kept, target) in owned.iter_mut().zip(count.iter_mut()) {
        *kept = (*kept).min(*target);
        *target -= *kept;
    }
    let (mut kept, mut more) = (owned, count);
    let mut out: Vec<Vec<TopicPartition>> = load.iter().map(|&l| Vec::with_capacity(l)).collect();
    for (topic, &partitions) in input.topics.iter().enumerate() {
        let mut next = subscribers.slots(topic);
        if next.is_empty() {
            continue;
        }
        let start = layout.start[topic];
        let topic = topic as u32;
        for partition in 0..partitions {
            let tp = TopicPartition { topic, partition };
            let slot = owner[start + partition as usize];
            if slot != NONE && kept[slot as usize] > 0 {
                kept[slot as usize] -= 1;
                out[subscribers.members[slot as usize] as usize].push(tp);
                continue;
            }
            // Counts per topic add up to its partition count, so a slot is left.
            let slot = next
                .find(|&slot| more[slot] > 0)
                .expect("counts cover every partition");
            more[slot] -= 1;
            out[subscribers.members[slot] as usize].push(tp);
            if more[slot] > 0 {
                next = slot..next.end;
            }
        }
    }
    out
}

/// Hands the partitions not counted yet, one by one, to the least loaded subscriber of
/// their topic (ties by member order), topics with the fewest subscribers first.
fn fill(
    input: &AssignmentInput<'_>,
    subscribers: &Subscribers,
    count: &mut [u32],
    load: &mut [usize],
) {
    let mut open: Vec<(usize, u32, u32)> = Vec::new();
    for (topic, &partitions) in input.topics.iter().enumerate() {
        let range = subscribers.slots(topic);
        let counted: u32 = count[range.clone()].iter().sum();
        if !range.is_empty() && counted < partitions {
            open.push((range.len(), topic as u32, partitions - counted));
        }
    }
    open.sort_unstable();
    let mut least_loaded = BinaryHeap::new();
    for (_, topic, partitions) in open {
        least_loaded.clear();
        for slot in subscribers.slots(topic as usize) {
            let m = subscribers.members[slot];
            least_loaded.push(Reverse((load[m as usize], m, slot)));
        }
        for _ in 0..partitions {
            let Some(Reverse((l, m, slot))) = least_loaded.pop() else {
                break;
            };
            count[slot] += 1;
            load[m as usize] = l + 1;
            least_loaded.push(Reverse((l + 1, m, slot)));
        }
    }
}

/// Returns partitions to their owners where that keeps the balance: when a member holds
/// fewer of a topic than it owned, and another subscriber of the topic with exactly one
/// partition more holds one it did not own, that one moves back (their loads trade
/// places). Each return is one partition fewer leaving its owner.
fn give_back(
    input: &AssignmentInput<'_>,
    subscribers: &Subscribers,
    owned: &[u32],
    count: &mut [u32],
    load: &mut [usize],
) {
    let mut changed = true;
    while changed {
        changed = false;
        for topic in 0..input.topics.len() {
            let slots = subscribers.slots(topic);
            for to_slot in slots.clone() {
                while count[to_slot] < owned[to_slot] {
                    let to = subscribers.members[to_slot] as usize;
                    let Some(from_slot) = slots.clone().find(|&s| {
                        count[s] > owned[s] && load[subscribers.members[s] as usize] == load[to] + 1
                    }) else {
                        break;
                    };
                    count[from_slot] -= 1;
                    count[to_slot] += 1;
                    load[subscribers.members[from_slot] as usize] -= 1;
                    load[to] += 1;
                    changed = true;
                }
            }
        }
    }
}

/// How far a member or topic is from the receiving end of a chain, in partitions that
/// would leave their owner.
const FAR: u32 = u32::MAX;

/// Moves partitions (as counts by slot) along chains of members until no member can
/// pass one, directly or along a chain, to a member with at least two fewer.
///
/// Each round looks for the lowest load `level` such that some member at least two
/// above it can reach a member at most at `level`; [`Chains::search`] then finds, from
/// every member, the chain to a member at most at `level` that takes the fewest
/// partitions from their owners, and the most loaded member able to give (the cheapest
/// chain among those, then member order) passes one partition along its chain. The
/// lowest load is tried first, which is nearly always the one; otherwise
/// [`Levels::find`] finds it. A round costs O(members log members + subscriptions), and
/// every move lowers the sum of squared loads, so the rounds end.
fn balance(
    subscriptions: &Subscriptions,
    subscribers: &Subscribers,
    owned: &[u32],
    count: &mut [u32],
    load: &mut [usize],
) {
    let n = load.len();
    let topic_count = subscribers.start.len() - 1;
    let mut levels = Levels::new(n, topic_count);
    let mut chains = Chains::new(n, topic_count);
    loop {
        let (Some(&lowest), Some(&highest)) = (load.iter().min(), load.iter().max()) else {
            return;
        };
        if highest - lowest <= 1 {
            return;
        }
        let giver = |chains: &Chains, level: usize| {
            (0..n)
                .filter(|&m| chains.cost[m] != FAR && load[m] >= level + 2)
                .max_by_key(|&m| (load[m], Reverse(chains.cost[m]), Reverse(m)))
        };
        chains.search(subscriptions, subscribers, owned, count, load, lowest);
        let mut found = giver(&chains, lowest);
        if found.is_none() {
            let Some(level) = levels.find(subscriptions, subscribers, count, load, highest) else {
                return;
            };
            chains.search(subscriptions, subscribers, owned, count, load, level);
            found = giver(&chains, level);
        }
        let giver = found.expect("the level search found a giver");

        let mut m = giver;
        while let Some(step) = chains.link[m] {
            let (from_slot, to_slot) = if count[step.from_slot] > owned[step.from_slot] {
                (step.from_slot, step.to_slot)
            } else {
                spare_link(subscriptions, subscribers, owned, count, m, step.to)
                    .unwrap_or((step.from_slot, step.to_slot))
            };
            count[from_slot] -= 1;
            count[to_slot] += 1;
            m = step.to as usize;
        }
        load[giver] -= 1;
        load[m] += 1;
    }
}

/// Finds the lowest load at which balancing can move a partition.
struct Levels {
    order: Vec<u32>,
    reached: Vec<bool>,
    expanded: Vec<bool>,
    queue: Vec<u32>,
}

impl Levels {
    fn new(members: usize, topics: usize) -> Self {
        Self {
            order: (0..members as u32).collect(),
            reached: vec![false; members],
            expanded: vec![false; topics],
            queue: Vec::with_capacity(members),
        }
    }

    /// The lowest `level` such that a member at least two above it can pass a partition,
    /// directly or along a chain, to a member at most at `level`.
    ///
    /// Searches backwards from the least loaded members, level by level: the set of
    /// members that can reach some member at most at `level` only grows with `level`,
    /// so one search serves every level.
    fn find(
        &mut self,
        subscriptions: &Subscriptions,
        subscribers: &Subscribers,
        count: &[u32],
        load: &[usize],
        highest: usize,
    ) -> Option<usize> {
        let n = load.len();
        self.order.sort_unstable_by_key(|&m| (load[m as usize], m));
        self.reached.fill(false);
        self.expanded.fill(false);
        self.queue.clear();
        let (mut head, mut i) = (0, 0);
        while i < n {
            let level = load[self.order[i] as usize];
            if level + 2 > highest {
                return None;
            }
            let level_start = self.queue.len();
            while i < n && load[self.order[i] as usize] == level {
                let m = self.order[i];
                if !self.reached[m as usize] {
                    self.reached[m as usize] = true;
                    self.queue.push(m);
                }
                i += 1;
            }
            while head < self.queue.len() {
                let to = self.queue[head] as usize;
                head += 1;
                for &topic in subscriptions.of(to) {
                    if self.expanded[topic as usize] {
                        continue;
                    }
                    self.expanded[topic as usize] = true;
                    for from_slot in subscribers.slots(topic as usize) {
                        let from = subscribers.members[from_slot] as usize;
                        if count[from_slot] > 0 && !self.reached[from] {
                            self.reached[from] = true;
                            self.queue.push(from as u32);
                        }
                    }
                }
            }
            if self.queue[level_start..]
                .iter()
                .any(|&m| load[m as usize] >= level + 2)
            {
                return Some(level);
            }
        }
        None
    }
}

/// A link of a chain: the member hands a partition of the topic of `from_slot` to
/// member `to`, whose slot for that topic is `to_slot`.
#[derive(Debug, Clone, Copy)]
struct Link {
    to: u32,
    from_slot: usize,
    to_slot: usize,
}

/// The cheapest chains from every member to the members at most at a given load.
struct Chains {
    /// By member, then by topic (at `members + topic`): partitions the chain takes from
    /// their owners, or [`FAR`] if there is no chain.
    cost: Vec<u32>,
    /// By member: the first link of its cheapest chain (`None` at the receiving end).
    link: Vec<Option<Link>>,
    /// By topic: the member of the chain that receives a partition of that topic, and
    /// its slot.
    receiver: Vec<(u32, usize)>,
    queue: VecDeque<usize>,
}

impl Chains {
    fn new(members: usize, topics: usize) -> Self {
        Self {
            cost: vec![FAR; members + topics],
            link: vec![None; members],
            receiver: vec![(NONE, 0); topics],
            queue: VecDeque::new(),
        }
    }

    /// Searches backwards from every member at most at `level` (cost 0). A member
    /// reaches the topics it subscribes to at its own cost; a topic reaches each member
    /// holding one of its partitions at the topic's cost, plus one if all that member's
    /// partitions of the topic are its own. Costs are 0 or 1 per step, so a deque
    /// replaces the priority queue.
    fn search(
        &mut self,
        subscriptions: &Subscriptions,
        subscribers: &Subscribers,
        owned: &[u32],
        count: &[u32],
        load: &[usize],
        level: usize,
    ) {
        let n = load.len();
        self.cost.fill(FAR);
        self.link.fill(None);
        self.queue.clear();
        for (m, &l) in load.iter().enumerate() {
            if l <= level {
                self.cost[m] = 0;
                self.queue.push_back(m);
            }
        }
        while let Some(node) = self.queue.pop_front() {
            let cost = self.cost[node];
            if node < n {
                let entries = subscriptions.start[node]..subscriptions.start[node + 1];
                for (&topic, &to_slot) in subscriptions.topics[entries.clone()]
                    .iter()
                    .zip(&subscribers.slot[entries])
                {
                    let topic_node = n + topic as usize;
                    if cost < self.cost[topic_node] {
                        self.cost[topic_node] = cost;
                        self.receiver[topic as usize] = (node as u32, to_slot);
                        self.queue.push_front(topic_node);
                    }
                }
            } else {
                let topic = node - n;
                let (to, to_slot) = self.receiver[topic];
                for from_slot in subscribers.slots(topic) {
                    if count[from_slot] == 0 {
                        continue;
                    }
                    let from = subscribers.members[from_slot] as usize;
                    let step = u32::from(count[from_slot] <= owned[from_slot]);
                    if cost + step < self.cost[from] {
                        self.cost[from] = cost + step;
                        self.link[from] = Some(Link {
                            to,
                            from_slot,
                            to_slot,
                        });
                        if step == 0 {
                            self.queue.push_front(from);
                        } else {
                            self.queue.push_back(from);
                        }
                    }
                }
            }
        }
    }
}

/// A topic in which `from` holds a partition it did not own (so handing it over moves
/// nothing from its owner) and to which `to` subscribes, as the pair of slots.
fn spare_link(
    subscriptions: &Subscriptions,
    subscribers: &Subscribers,
    owned: &[u32],
    count: &[u32],
    from: usize,
    to: u32,
) -> Option<(usize, usize)> {
    let to = to as usize;
    let to_topics = subscriptions.of(to);
    let entries = subscriptions.start[from]..subscriptions.start[from + 1];
    entries.into_iter().find_map(|entry| {
        let from_slot = subscribers.slot[entry];
        if count[from_slot] <= owned[from_slot] {
            return None;
        }
        let k = to_topics.binary_search(&subscriptions.topics[entry]).ok()?;
        Some((from_slot, subscribers.slot[subscriptions.start[to] + k]))
    })
}
