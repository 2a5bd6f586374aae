//! Exponential backoff with full jitter, and heartbeat jitter.

use std::time::Duration;

use rand::Rng;

/// Exponential backoff with full jitter: attempt `n` waits a uniformly random time in
/// `[0, min(max, base * 2^n)]`.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// Delays bounded by `base` at first, doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max: max.max(base),
            attempt: 0,
        }
    }

    /// The next delay; each call doubles the bound until it reaches the maximum.
    pub fn next_delay(&mut self, rng: &mut impl Rng) -> Duration {
        let factor = 1u32 << self.attempt.min(20);
        let bound = self.base.saturating_mul(factor).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.gen_range(0..=nanos))
    }

    /// Back to the first delay, after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// The delay before the next heartbeat: uniformly random in `[0.8 * interval, interval]`,
/// so `interval` stays the longest gap while members started together drift apart.
pub(crate) fn heartbeat_delay(interval: Duration, rng: &mut impl Rng) -> Duration {
    interval.mul_f64(rng.gen_range(0.8..=1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn backoff_bound_doubles_up_to_the_maximum() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(100));
        let bounds = [10, 20, 40, 80, 100, 100, 100];
        for bound in bounds {
            let d = b.next_delay(&mut rng);
            assert!(d <= Duration::from_millis(bound), "{d:?} > {bound} ms");
        }
        b.reset();
        for _ in 0..100 {
            let mut fresh = b.clone();
            assert!(fresh.next_delay(&mut rng) <= Duration::from_millis(10));
        }
    }

    #[test]
    fn heartbeat_delays_spread_below_the_interval() {
        let mut rng = SmallRng::seed_from_u64(1);
        let interval = Duration::from_millis(1000);
        let delays: Vec<_> = (0..1000)
            .map(|_| heartbeat_delay(interval, &mut rng))
            .collect();
        assert!(delays
            .iter()
            .all(|d| *d >= Duration::from_millis(800) && *d <= interval));
        let min = delays.iter().min().unwrap();
        let max = delays.iter().max().unwrap();
        assert!(
            *max - *min > Duration::from_millis(150),
            "jitter too narrow"
        );
    }
}
