//! The plan: a pure function, tested over generated views.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::super::{plan, ClusterView};

fn view(live: &[&str], owners: &[(u32, &str)]) -> ClusterView {
    ClusterView {
        coordinators: live
            .iter()
            .map(|id| ((*id).to_owned(), format!("{id}:9092")))
            .collect(),
        owners: owners
            .iter()
            .map(|(slot, id)| (*slot, ((*id).to_owned(), format!("{id}:9092"), 1)))
            .collect(),
    }
}

/// The view in which every coordinator of `plan` owns what the plan gives it.
fn settled(live: &[String], plan: &BTreeMap<String, Vec<u32>>) -> ClusterView {
    ClusterView {
        coordinators: live.iter().map(|id| (id.clone(), id.clone())).collect(),
        owners: plan
            .iter()
            .flat_map(|(id, slots)| slots.iter().map(move |s| (*s, (id.clone(), id.clone(), 1))))
            .collect(),
    }
}

fn check_shape(slots: u32, view: &ClusterView, plan: &BTreeMap<String, Vec<u32>>) {
    let live: BTreeSet<&String> = view.coordinators.keys().collect();
    assert_eq!(plan.keys().collect::<BTreeSet<_>>(), live);
    if live.is_empty() {
        return;
    }
    let mut all: Vec<u32> = plan.values().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..slots).collect::<Vec<_>>(),
        "every slot exactly once"
    );
    let counts: Vec<usize> = plan.values().map(Vec::len).collect();
    let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(max - min <= 1, "counts within one of even: {counts:?}");
    // A live owner keeps as many of its slots as its share allows.
    for (id, target) in plan {
        let owned: BTreeSet<u32> = view
            .owners
            .iter()
            .filter(|(slot, (owner, _, _))| owner == id && **slot < slots)
            .map(|(slot, _)| *slot)
            .collect();
        let kept = target.iter().filter(|s| owned.contains(s)).count();
        assert_eq!(kept, owned.len().min(target.len()), "{id} keeps its own");
    }
}

#[test]
fn no_live_coordinator_means_no_plan() {
    assert!(plan(8, &view(&[], &[(0, "a")])).is_empty());
}

#[test]
fn a_single_coordinator_gets_every_slot() {
    let p = plan(4, &view(&["a"], &[(1, "b")]));
    assert_eq!(p["a"], vec![0, 1, 2, 3]);
}

#[test]
fn a_dead_owners_slots_go_to_the_live_ones() {
    let v = view(&["a", "b"], &[(0, "a"), (1, "c"), (2, "c"), (3, "b")]);
    let p = plan(4, &v);
    check_shape(4, &v, &p);
    assert!(p["a"].contains(&0) && p["b"].contains(&3));
}

#[test]
fn an_owner_over_its_share_gives_up_only_the_excess() {
    let v = view(&["a", "b"], &[(0, "a"), (1, "a"), (2, "a"), (3, "a")]);
    let p = plan(4, &v);
    assert_eq!(p["a"], vec![0, 1]);
    assert_eq!(p["b"], vec![2, 3]);
}

fn arb_view() -> impl Strategy<Value = (u32, ClusterView)> {
    (1u32..200, 0usize..8).prop_flat_map(|(slots, live)| {
        let ids: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
        let owners = proptest::collection::btree_map(0..slots + 4, 0usize..10, 0..=slots as usize);
        (Just(slots), Just(live), Just(ids), owners).prop_map(|(slots, live, ids, owners)| {
            let view = ClusterView {
                coordinators: ids[..live]
                    .iter()
                    .map(|id| (id.clone(), id.clone()))
                    .collect(),
                owners: owners
                    .into_iter()
                    .map(|(slot, i)| (slot, (ids[i].clone(), ids[i].clone(), 7)))
                    .collect(),
            };
            (slots, view)
        })
    })
}

proptest! {
    #[test]
    fn plans_cover_balance_keep_and_repeat((slots, view) in arb_view()) {
        let p = plan(slots, &view);
        check_shape(slots, &view, &p);
        prop_assert_eq!(&p, &plan(slots, &view));
    }

    #[test]
    fn a_join_moves_only_the_newcomers_share(slots in 1u32..300, n in 1usize..8) {
        let mut live: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
        let before = plan(slots, &settled(&live, &BTreeMap::new()));
        live.push("new".to_owned());
        let mut view = settled(&live, &before);
        view.coordinators.insert("new".to_owned(), "new".to_owned());
        let after = plan(slots, &view);
        check_shape(slots, &view, &after);
        let moved = (0..slots)
            .filter(|s| !after.iter().any(|(id, l)| l.contains(s) && before.get(id).is_some_and(|b| b.contains(s))))
            .count() as u32;
        prop_assert!(moved <= slots.div_ceil(n as u32 + 1), "moved {} of {}", moved, slots);
        prop_assert_eq!(moved, after["new"].len() as u32);
    }
}
