//! The expulsion rate limit.

use super::*;
use crate::core::guards::Hold;
use crate::core::CoreConfig;

/// At two per second, a second's worth passes at once; the next waits for its slot,
/// and keeps it when looked at again; nothing is held at or past its bound.
#[test]
fn a_seconds_worth_passes_and_the_rest_wait_for_their_slot() {
    let mut t = TestContext::with_config(CoreConfig {
        max_expulsion_rate: 2.0,
        ..CoreConfig::default()
    });
    let ms: Vec<M> = (1..=3).map(|c| joined(&mut t, c).0).collect();
    let now = t.now + secs(20);
    let far = (now + secs(10), now + secs(10));
    assert_eq!(t.core.rate_limit(now, far, "g", &ms[0].id), None);
    assert_eq!(t.core.rate_limit(now, far, "g", &ms[1].id), None);
    let slot = now + 500 * MS;
    let held = Some(Hold::RateLimit { recheck: slot });
    assert_eq!(t.core.rate_limit(now, far, "g", &ms[2].id), held);
    assert_eq!(t.core.rate_limit(now + MS, far, "g", &ms[2].id), held);
    assert_eq!(t.core.rate_limit(slot, far, "g", &ms[2].id), None);
    // Past its bound, nothing waits.
    let mut t2 = TestContext::with_config(CoreConfig {
        max_expulsion_rate: 2.0,
        ..CoreConfig::default()
    });
    let ms: Vec<M> = (1..=3).map(|c| joined(&mut t2, c).0).collect();
    for m in &ms[..2] {
        t2.core.rate_limit(now, far, "g", &m.id);
    }
    assert_eq!(t2.core.rate_limit(now, (now, now), "g", &ms[2].id), None);
}

#[test]
fn a_rate_of_zero_limits_nothing() {
    let mut t = TestContext::with_config(CoreConfig {
        max_expulsion_rate: 0.0,
        ..CoreConfig::default()
    });
    let ms: Vec<M> = (1..=5).map(|c| joined(&mut t, c).0).collect();
    let now = t.now + secs(20);
    for m in &ms {
        assert_eq!(
            t.core.rate_limit(now, (now + secs(1), now), "g", &m.id),
            None
        );
    }
}
