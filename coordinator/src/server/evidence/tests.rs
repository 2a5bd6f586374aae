use super::*;
use crate::core::guards::{BACKLOG_FLOOR, BACKLOG_MEMORY};
use std::time::Duration;

/// A stall of the backlog floor is seen as one (a reader's wait is taken whole, and
/// a probe due during the stall wakes at most one period less late than it
/// lasted), remembered for a few wakes, and forgotten well within the guard's
/// memory once the probe wakes on time again.
#[test]
fn lag_sees_a_floor_long_stall_and_forgets_it() {
    assert!(PROBE_EVERY * 4 <= BACKLOG_FLOOR);
    let lag = Lag::default();
    lag.saw(BACKLOG_FLOOR);
    assert_eq!(lag.recent(), BACKLOG_FLOOR);
    lag.probe_woke(0, BACKLOG_FLOOR - PROBE_EVERY);
    assert!(lag.recent() >= BACKLOG_FLOOR - PROBE_EVERY);
    let mut on_time_wakes = 0u32;
    while lag.recent() >= Duration::from_millis(1) {
        lag.probe_woke(0, Duration::ZERO);
        on_time_wakes += 1;
        assert!(on_time_wakes < 100, "the lag is never forgotten");
    }
    assert!(PROBE_EVERY * on_time_wakes < BACKLOG_MEMORY);
}

/// With a probe per connection thread, the worst thread counts, and each thread's
/// lateness fades with its own probe's wakes only.
#[test]
fn lag_is_the_worst_probe_and_each_fades_on_its_own() {
    let lag = Lag::new(2);
    lag.probe_woke(1, Duration::from_millis(200));
    lag.probe_woke(0, Duration::from_millis(5));
    assert_eq!(lag.recent(), Duration::from_millis(200));
    for _ in 0..10 {
        lag.probe_woke(0, Duration::ZERO);
    }
    assert_eq!(lag.recent(), Duration::from_millis(200));
    lag.probe_woke(1, Duration::ZERO);
    assert_eq!(lag.recent(), Duration::from_millis(150));
    // A held reader's wait is seen whatever the probes say.
    lag.saw(Duration::from_millis(300));
    assert_eq!(lag.recent(), Duration::from_millis(300));
}
