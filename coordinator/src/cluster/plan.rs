//! The target assignment of slots to live coordinators: a pure function of the view.
//!
//! Every coordinator computes the same plan from the same view, takes the slots the plan
//! gives it and hands off the ones it gives others; nobody coordinates beyond etcd's
//! owner keys (a claim still fails while the old owner's key exists).

use std::collections::BTreeMap;

use super::ClusterView;

/// The slots each live coordinator should own: every slot goes to exactly one live
/// coordinator, each gets `slots / n` or one more, and a slot stays with its current
/// owner when that owner is live and has not reached its share (so a change of members
/// moves as few slots as it can). Deterministic: the same view gives the same plan.
/// Every live coordinator has an entry (perhaps empty); with none live, the plan is
/// empty.
pub fn plan(slots: u32, view: &ClusterView) -> BTreeMap<String, Vec<u32>> {
    let mut out: BTreeMap<String, Vec<u32>> = view
        .coordinators
        .keys()
        .map(|id| (id.clone(), Vec::new()))
        .collect();
    if out.is_empty() {
        return out;
    }
    let n = out.len() as u32;
    let (base, extra) = (slots / n, slots % n);

    // The current owners' counts among live coordinators decide who gets the `extra`
    // larger shares: those holding most already, so fewer slots move.
    let mut held: BTreeMap<&str, u32> = view
        .coordinators
        .keys()
        .map(|id| (id.as_str(), 0))
        .collect();
    for (slot, (owner, _, _)) in &view.owners {
        if *slot < slots {
            if let Some(count) = held.get_mut(owner.as_str()) {
                *count += 1;
            }
        }
    }
    let mut order: Vec<(&str, u32)> = held.into_iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let quota: BTreeMap<&str, u32> = order
        .iter()
        .enumerate()
        .map(|(rank, (id, _))| (*id, base + u32::from((rank as u32) < extra)))
        .collect();

    // Keep what live owners hold, up to their share, lowest slots first.
    let mut free = Vec::new();
    for slot in 0..slots {
        let keeper = view
            .owners
            .get(&slot)
            .map(|(owner, _, _)| owner.as_str())
            .filter(|owner| quota.contains_key(owner));
        match keeper {
            Some(owner) if (out[owner].len() as u32) < quota[owner] => {
                if let Some(list) = out.get_mut(owner) {
                    list.push(slot);
                }
            }
            _ => free.push(slot),
        }
    }

    // The rest to whoever is furthest below its share (ties by id).
    for slot in free {
        let target = quota
            .iter()
            .map(|(id, q)| (*id, q - out[*id].len() as u32))
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
            .map(|(id, _)| id.to_owned());
        if let Some(list) = target.and_then(|id| out.get_mut(&id)) {
            list.push(slot);
        }
    }
    for list in out.values_mut() {
        list.sort_unstable();
    }
    out
}
