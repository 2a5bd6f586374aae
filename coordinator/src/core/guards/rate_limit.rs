//! The expulsion rate limit: at most
//! [`CoreConfig::max_expulsion_rate`](super::super::CoreConfig::max_expulsion_rate)
//! expulsions for silence per second, so that a storm of expiries (a cause nobody has
//! recognised yet) plays out over seconds, not at once.

use std::time::{Duration, Instant};

use super::super::{Coordinator, Event, Output};
use super::Hold;

impl Coordinator {
    /// The expulsion rate limit (a generic cell rate algorithm: one expulsion every
    /// `1 / rate`, a second's worth at once). An expiry over the limit reserves the next
    /// free slot and is held until then, so each waiting member is looked at again
    /// once, at its own slot, never past `bound`, nor past `look_by` (see
    /// [`hold_bound`](super::bound::hold_bound)).
    pub(super) fn rate_limit(
        &mut self,
        now: Instant,
        (bound, look_by): (Instant, Instant),
        group: &str,
        member: &str,
    ) -> Option<Hold> {
        let rate = self.config.max_expulsion_rate;
        if rate.is_nan() || rate <= 0.0 || now >= bound {
            return None;
        }
        let m = self.groups.get_mut(group)?.members.get_mut(member)?;
        if let Some(slot) = m.expel_slot {
            return (slot > now).then_some(Hold::RateLimit {
                recheck: slot.min(look_by),
            });
        }
        let interval = Duration::from_secs_f64((1.0 / rate).min(3600.0));
        let tolerance = Duration::from_secs(1).saturating_sub(interval);
        let tat = self.guards.tat.map_or(now, |t| t.max(now));
        self.guards.tat = Some(tat + interval);
        let earliest = tat.checked_sub(tolerance).unwrap_or(now);
        if earliest <= now {
            return None;
        }
        m.expel_slot = Some(earliest);
        self.outputs
            .push_back(Output::Event(Event::ExpulsionRateLimited));
        Some(Hold::RateLimit {
            recheck: earliest.min(look_by),
        })
    }
}
