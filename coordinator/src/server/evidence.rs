//! What the shell sees of its own health, for the core's guards: when it last read a
//! member's request ([`Traffic`], for the isolation guard) and how late its runtimes
//! run ready tasks ([`Lag`], for the backlog guard).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

/// How late the runtime has lately been in running a task that was ready: the
/// evidence the backlog guard needs that frames wait unread because the coordinator,
/// not its members, is behind. The probe's lateness, in microseconds, as a maximum
/// that decays by a quarter per wake (so a stall is remembered for a few hundred
/// milliseconds after it ends).
#[derive(Debug)]
pub(crate) struct Lag {
    /// One per probe (one per runtime that serves connections), each the latest
    /// lateness its probe saw, decayed; a held reader's wait goes in the first.
    slots: Box<[AtomicU64]>,
}

impl Default for Lag {
    fn default() -> Self {
        Self::new(1)
    }
}

impl Lag {
    /// For `probes` probes (at least one).
    pub(crate) fn new(probes: usize) -> Self {
        Self {
            slots: (0..probes.max(1)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The runtimes' recent lateness: the worst of them.
    pub(crate) fn recent(&self) -> std::time::Duration {
        let us = self
            .slots
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        std::time::Duration::from_micros(us)
    }

    /// Something ready to run waited `late` (a reader held by a full shard queue).
    pub(crate) fn saw(&self, late: std::time::Duration) {
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        self.slots[0].fetch_max(us, Ordering::Relaxed);
    }

    /// Probe `probe` woke `late`: its slot forgets a quarter of what it remembers, and
    /// keeps the larger of that and `late`.
    fn probe_woke(&self, probe: usize, late: std::time::Duration) {
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        let slot = &self.slots[probe % self.slots.len()];
        let before = slot.load(Ordering::Relaxed);
        // A reader's report between the load and the store may be lost; the next one
        // (it is still waiting, or will wait again) brings it back.
        slot.store(us.max(before - before / 4), Ordering::Relaxed);
    }
}

/// How often the lag probe asks to be woken: a quarter of the lateness the backlog
/// guard acts on ([`crate::core::guards::BACKLOG_FLOOR`]), so a stall that long reads at least
/// three quarters of its length. Finer costs an idle coordinator for nothing: in a
/// virtual machine each wake of an idle process costs it about 90 µs of CPU, and a
/// 10 ms probe was most of an idle coordinator's 10 ms of CPU per second.
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_millis(25);

/// Wakes every [`PROBE_EVERY`] and records, as probe `probe`, how much later than
/// asked it ran: a task ready to run on the same runtime (a connection with frames to
/// read) waits about as long. Probe 0 also lets the allocator give memory back (see
/// `memory.rs`). Runs until `stop`.
pub(crate) async fn probe_lag(
    lag: Arc<Lag>,
    probe: usize,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut next = tokio::time::Instant::now() + PROBE_EVERY;
    // The first probe's wake also gives the allocator its chance to return memory
    // (see `memory.rs`), so that it costs no wake of its own.
    let give_back_every =
        (super::memory::GIVE_BACK_EVERY.as_millis() / PROBE_EVERY.as_millis()).max(1) as u32;
    let mut until_give_back = give_back_every;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let now = tokio::time::Instant::now();
        lag.probe_woke(probe, now.saturating_duration_since(next));
        until_give_back -= 1;
        if until_give_back == 0 {
            until_give_back = give_back_every;
            if probe == 0 {
                super::memory::give_back();
            }
        }
        next = now + PROBE_EVERY;
    }
}

/// When the server last read a request on any connection: the evidence the isolation
/// guard needs that the coordinator, not its members, has gone deaf. Kept at
/// millisecond resolution in one atomic, written only when it moves.
#[derive(Debug)]
pub(crate) struct Traffic {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Default for Traffic {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Traffic {
    /// A request was read at `at`.
    pub(crate) fn heard(&self, at: Instant) {
        let ms =
            u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX);
        if self.last_ms.load(Ordering::Relaxed) < ms {
            self.last_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// When a request was last read, if ever.
    pub(crate) fn last(&self) -> Option<Instant> {
        match self.last_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.epoch + std::time::Duration::from_millis(ms)),
        }
    }
}

#[cfg(test)]
mod tests;
