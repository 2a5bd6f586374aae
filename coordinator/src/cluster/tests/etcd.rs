//! [`Etcd`] against a real etcd: registration, the slot count, claims and their
//! tokens, the view, leaving, and the acting deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::testing::EtcdProcess;
use super::super::{acting_window, ClusterError, ClusterOptions, ClusterView, Etcd};

pub(super) fn options(etcd: &EtcdProcess, id: &str, slots: u32) -> ClusterOptions {
    ClusterOptions {
        endpoints: vec![etcd.endpoint()],
        name: "test".to_owned(),
        id: id.to_owned(),
        advertise: format!("{id}.example:9092"),
        lease_ttl: Duration::from_secs(2),
        slots,
    }
}

/// Waits (up to 10 s) until the view satisfies `ok`.
async fn view_until(etcd: &Etcd, ok: impl Fn(&ClusterView) -> bool) -> ClusterView {
    let mut rx = etcd.view();
    let found = {
        let wait = rx.wait_for(|v| ok(v));
        match tokio::time::timeout(Duration::from_secs(10), wait).await {
            Ok(Ok(view)) => Some(view.clone()),
            _ => None,
        }
    };
    found.unwrap_or_else(|| panic!("the view never got there: {:?}", *rx.borrow()))
}

#[test]
fn the_acting_window_leaves_a_tenth_or_a_quarter_second() {
    assert_eq!(
        acting_window(Duration::from_secs(5)),
        Duration::from_millis(4500)
    );
    assert_eq!(
        acting_window(Duration::from_secs(1)),
        Duration::from_millis(750)
    );
    assert_eq!(
        acting_window(Duration::from_secs(2)),
        Duration::from_millis(1750)
    );
    assert_eq!(acting_window(Duration::from_millis(100)), Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinators_register_and_agree_on_the_first_slot_count() {
    let Some(etcd) = EtcdProcess::start("register") else {
        return;
    };
    let a = Etcd::connect(&options(&etcd, "a", 16)).await.unwrap();
    let b = Etcd::connect(&options(&etcd, "b", 64)).await.unwrap();
    assert_eq!((a.slots(), b.slots()), (16, 16), "the first count is kept");
    for c in [&a, &b] {
        let view = view_until(c, |v| v.coordinators.len() == 2).await;
        assert_eq!(view.coordinators["a"], "a.example:9092");
        assert_eq!(view.coordinators["b"], "b.example:9092");
    }
    let bad = ClusterOptions {
        name: "a/b".into(),
        ..options(&etcd, "c", 1)
    };
    assert!(matches!(
        Etcd::connect(&bad).await,
        Err(ClusterError::Invalid(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_per_slot_and_every_new_owner_has_a_larger_token() {
    let Some(etcd) = EtcdProcess::start("claim") else {
        return;
    };
    let a = Etcd::connect(&options(&etcd, "a", 8)).await.unwrap();
    let b = Etcd::connect(&options(&etcd, "b", 8)).await.unwrap();
    let first = a.claim(3).await.unwrap().expect("a free slot is claimed");
    assert_eq!(b.claim(3).await.unwrap(), None, "an owned slot is not");
    assert_eq!(
        a.claim(3).await.unwrap(),
        Some(first),
        "a claim again is the same"
    );
    let view = view_until(&b, |v| v.owners.contains_key(&3)).await;
    assert_eq!(
        view.owners[&3],
        ("a".to_owned(), "a.example:9092".to_owned(), first.0)
    );

    b.release(3).await.unwrap();
    assert_eq!(b.claim(3).await.unwrap(), None, "only the owner releases");
    a.release(3).await.unwrap();
    view_until(&b, |v| !v.owners.contains_key(&3)).await;
    let second = b.claim(3).await.unwrap().expect("a released slot is free");
    assert!(second > first, "{second:?} > {first:?}");
    view_until(&a, |v| v.owners.get(&3).is_some_and(|o| o.0 == "b")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_drops_the_registration_and_the_slots_at_once() {
    let Some(etcd) = EtcdProcess::start("leave") else {
        return;
    };
    let a = Etcd::connect(&options(&etcd, "a", 4)).await.unwrap();
    let b = Etcd::connect(&options(&etcd, "b", 4)).await.unwrap();
    a.claim(0).await.unwrap().unwrap();
    a.claim(1).await.unwrap().unwrap();
    view_until(&b, |v| v.owners.len() == 2 && v.coordinators.len() == 2).await;
    a.leave().await;
    assert!(a.acting_deadline() <= Instant::now());
    assert_eq!(a.claim(2).await, Err(ClusterError::LeaseLost));
    let view = view_until(&b, |v| v.owners.is_empty() && v.coordinators.len() == 1).await;
    assert!(view.coordinators.contains_key("b"));
    assert!(b.claim(0).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acting_deadline_moves_with_keepalives_and_stops_with_etcd() {
    let Some(mut etcd) = EtcdProcess::start("deadline") else {
        return;
    };
    let a: Arc<Etcd> = Etcd::connect(&options(&etcd, "a", 4)).await.unwrap();
    let start = Instant::now();
    let window = acting_window(Duration::from_secs(2));
    assert!(a.acting_deadline() <= start + window);
    assert!(a.acting_deadline() + Duration::from_millis(500) > start + window);
    // Renewed every ttl / 3: after two TTLs it is still ahead.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(a.acting_deadline() > Instant::now(), "kept alive");

    etcd.kill();
    let killed = Instant::now();
    // No renewal is answered any more: the deadline is at most a window after the kill.
    assert!(a.acting_deadline() <= killed + window);
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    assert!(a.acting_deadline() < Instant::now(), "stopped acting");
    assert!(matches!(a.claim(0).await, Err(ClusterError::LeaseLost)));
}
