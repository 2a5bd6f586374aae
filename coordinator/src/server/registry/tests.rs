use super::*;
use crate::server::outbox::tests::{drain, limits, push};
use std::sync::atomic::Ordering;

#[test]
fn full_queue_kills_the_connection_instead_of_growing() {
    let registry = Registry::default();
    let (handle, state) = ConnHandle::new(limits(2, 1 << 20));
    registry.insert(7, handle);
    assert_eq!(registry.send(7, push()), Sent::Queued);
    assert_eq!(registry.send(7, push()), Sent::Queued);
    assert!(!state.kill.is_cancelled());
    assert_eq!(registry.send(7, push()), Sent::Overflow);
    assert!(state.kill.is_cancelled());
    assert!(state.overflowed.load(Ordering::Relaxed));
    // Only what fitted was queued.
    assert_eq!(drain(&state).len(), 2);
}

#[test]
fn sends_to_unknown_or_closed_connections_are_dropped() {
    let registry = Registry::default();
    assert_eq!(registry.send(1, push()), Sent::Closed);
    let (handle, state) = ConnHandle::new(limits(2, 1 << 20));
    registry.insert(1, handle);
    assert_eq!(registry.len(), 1);
    state.close();
    assert_eq!(registry.send(1, push()), Sent::Closed);
    registry.remove(1);
    assert_eq!(registry.len(), 0);
    assert_eq!(registry.send(1, push()), Sent::Closed);
}
