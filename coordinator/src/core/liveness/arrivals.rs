//! What the coordinator has observed of one member's heartbeats, on its own clock: the
//! gaps between arrivals (a fast-moving mean and spread, a slowly forgetting histogram
//! and the longest recent gap), and the beats that were lost or late. A gap that ended
//! a run of lost beats (the sequence numbers jumped) is not the member's rhythm: it
//! stays out of the mean and spread, and only the histogram and the longest gap keep
//! it.
//!
//! Bounded whatever the member's age: the histogram halves its counts every [`WINDOW`]
//! gaps instead of keeping the gaps themselves. About 90 bytes while the gaps fall in a
//! few of its buckets, as a steady member's do, and 160 more once they spread wider.

use std::time::{Duration, Instant};

use super::histogram::Counts;

/// Gaps per histogram window: every `WINDOW` gaps the counts are halved and the longest
/// gap of the window before is forgotten, so the histogram and the tail memory cover
/// the last `WINDOW` to `2 * WINDOW` gaps, the older half at half weight.
pub(super) const WINDOW: u32 = 512;

/// Weight of the newest gap in the moving mean and spread (about the last 16 gaps).
const EWMA_WEIGHT: f32 = 1.0 / 16.0;

/// Sub-buckets per doubling of the gap: bucket edges are about 19% apart.
const SUB_BUCKETS: u32 = 4;
/// Octaves covered, from 1 ms: gaps up to 2^20 ms (about 17 minutes) are told apart.
const OCTAVES: u32 = 20;
const BUCKETS: usize = (SUB_BUCKETS * (OCTAVES - 1)) as usize;
const MAX_GAP_MS: u32 = (1 << OCTAVES) - 1;

/// One member's heartbeat arrivals.
///
/// What every heartbeat writes comes first, the counts of lost and late beats last
/// (see `Watch`).
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Arrivals {
    /// When the last heartbeat arrived; `None` when the next gap must not be learned (no
    /// heartbeat yet, or the coordinator itself was paused since).
    last_beat: Option<Instant>,
    /// Highest heartbeat sequence number seen.
    last_sequence: u64,
    /// Gaps learned, saturating.
    learned: u32,
    /// Moving mean of the gaps, seconds.
    mean: f32,
    /// Moving variance of the gaps, seconds squared.
    variance: f32,
    /// Gaps counted in this window (at most [`WINDOW`]).
    window_gaps: u16,
    /// Gaps learned since the member's last surprise (see `Fleet`), saturating;
    /// `u16::MAX` while it has shown none.
    since_surprise: u16,
    /// The longest gap of this window and of the one before, milliseconds.
    longest: [u32; 2],
    /// Gap histogram, in milliseconds on a log scale.
    counts: Counts<BUCKETS>,
    /// The adaptive detector's cached tail threshold, milliseconds, for the fleet fit
    /// of `tail_epoch` (its low bits) and a mean gap of `tail_mean_ms`.
    tail_ms: u32,
    tail_epoch: u16,
    tail_mean_ms: u16,
    /// Heartbeats the member sent that never arrived (gaps in the sequence numbers),
    /// saturating.
    lost: u32,
    /// Heartbeats that arrived after the member was already suspect-worthy: the silence
    /// before them was longer than the detector's suspicion threshold (saturating).
    late: u32,
}

impl Default for Arrivals {
    fn default() -> Self {
        Self {
            last_beat: None,
            last_sequence: 0,
            learned: 0,
            mean: 0.0,
            variance: 0.0,
            counts: Counts::default(),
            window_gaps: 0,
            longest: [0; 2],
            since_surprise: u16::MAX,
            tail_ms: 0,
            tail_epoch: u16::MAX,
            tail_mean_ms: 0,
            lost: 0,
            late: 0,
        }
    }
}

impl Arrivals {
    /// Bytes from the start that every heartbeat touches: all but the counts of lost
    /// and late beats.
    #[cfg(test)]
    pub(crate) const RENEWAL_BYTES: usize = std::mem::offset_of!(Self, lost);

    /// A heartbeat with `sequence` arrived at `now`. Returns the gap since the previous
    /// heartbeat, if it was learned, and the beats lost just before this one (the jump
    /// of the sequence numbers). A gap after lost beats is learned without moving the
    /// mean and spread.
    pub fn beat(&mut self, now: Instant, sequence: u64) -> BeatGap {
        let mut lost = 0;
        if sequence > self.last_sequence {
            if self.last_sequence != 0 {
                lost = sequence - self.last_sequence - 1;
                let counted = u32::try_from(lost).unwrap_or(u32::MAX);
                self.lost = self.lost.saturating_add(counted);
            }
            self.last_sequence = sequence;
        }
        let gap = self
            .last_beat
            .map(|last| now.saturating_duration_since(last));
        self.last_beat = Some(now);
        if let Some(gap) = gap {
            if lost == 0 {
                self.learn(gap);
            } else {
                self.learn_tail(gap);
            }
        }
        BeatGap { gap, lost }
    }

    /// Learns one gap between heartbeats.
    pub fn learn(&mut self, gap: Duration) {
        let secs = gap.as_secs_f32();
        self.learned = self.learned.saturating_add(1);
        // A plain average over the first gaps, then an exponentially weighted one.
        let weight = (1.0 / self.learned as f32).max(EWMA_WEIGHT);
        let delta = secs - self.mean;
        self.mean += weight * delta;
        self.variance = (1.0 - weight) * (self.variance + weight * delta * delta);
        self.count(gap);
    }

    /// Learns a gap that lost beats made: counted, but not part of the rhythm.
    fn learn_tail(&mut self, gap: Duration) {
        self.learned = self.learned.saturating_add(1);
        self.count(gap);
    }

    /// Counts a gap in the histogram, the longest gap and the gaps since a surprise.
    fn count(&mut self, gap: Duration) {
        self.since_surprise = self.since_surprise.saturating_add(1);
        let ms = u32::try_from(gap.as_millis())
            .unwrap_or(MAX_GAP_MS)
            .min(MAX_GAP_MS);
        self.counts.add(bucket_of(ms));
        self.longest[0] = self.longest[0].max(ms);
        self.window_gaps += 1;
        if u32::from(self.window_gaps) >= WINDOW {
            self.counts.halve();
            self.window_gaps = 0;
            self.longest = [0, self.longest[0]];
        }
    }

    /// The next gap spans something that is not the member's doing (a pause of the
    /// coordinator): it is not learned.
    pub fn skip_next(&mut self) {
        self.last_beat = None;
    }

    /// The member's latest gap, or its latest heartbeat, was a surprise (see `Fleet`).
    pub fn surprise(&mut self) {
        self.since_surprise = 0;
    }

    /// Gaps learned since the member's last surprise (saturating at `u16::MAX`, which
    /// is also what a member that showed none has).
    pub fn since_surprise(&self) -> u32 {
        u32::from(self.since_surprise)
    }

    /// The cached tail threshold, if it was computed from the fleet fit of `epoch` for
    /// a mean gap within a tenth of `mean` seconds.
    pub(super) fn cached_tail(&self, epoch: u32, mean: f32) -> Option<Duration> {
        let cached = f32::from(self.tail_mean_ms) / 1000.0;
        // Only the epoch's low bits are kept: a threshold cached 65,536 fits ago (18
        // hours of a fit every second, with no heartbeat of the member between) could
        // pass for a fresh one, and is at worst as old as that.
        (self.tail_epoch == epoch as u16
            && self.tail_mean_ms != u16::MAX
            && (mean - cached).abs() <= 0.1 * cached)
            .then(|| Duration::from_millis(u64::from(self.tail_ms)))
    }

    /// Caches the tail threshold `tail`, computed from the fleet fit of `epoch` for a
    /// mean gap of `mean` seconds.
    pub(super) fn cache_tail(&mut self, epoch: u32, mean: f32, tail: Duration) {
        self.tail_epoch = epoch as u16;
        self.tail_mean_ms = (mean * 1000.0).round().min(f32::from(u16::MAX)) as u16;
        self.tail_ms = u32::try_from(tail.as_millis()).unwrap_or(u32::MAX);
    }

    /// Counts a heartbeat that came after a silence the detector found suspicious.
    pub fn count_late(&mut self) {
        self.late = self.late.saturating_add(1);
    }

    /// Gaps learned so far (saturating).
    pub fn learned(&self) -> u32 {
        self.learned
    }

    /// Moving mean of the gaps, seconds.
    pub(super) fn mean_secs(&self) -> f32 {
        self.mean.max(0.0)
    }

    /// Moving mean of the gaps.
    pub fn mean(&self) -> Duration {
        Duration::from_secs_f32(self.mean.max(0.0))
    }

    /// Moving standard deviation of the gaps.
    pub fn std_dev(&self) -> Duration {
        Duration::from_secs_f32(self.variance.max(0.0).sqrt())
    }

    /// The longest gap in the tail memory (the last [`WINDOW`] to `2 * WINDOW` gaps).
    pub fn longest(&self) -> Duration {
        Duration::from_millis(u64::from(self.longest[0].max(self.longest[1])))
    }

    /// Heartbeats that never arrived.
    pub fn lost(&self) -> u64 {
        u64::from(self.lost)
    }

    /// Heartbeats that arrived late.
    pub fn late(&self) -> u64 {
        u64::from(self.late)
    }

    /// The gap at quantile `q` (0..=1) of the histogram: the upper edge of the bucket it
    /// falls in, never above the longest gap remembered. Zero before any gap.
    pub fn quantile(&self, q: f64) -> Duration {
        let total: u64 = self.counts.iter().map(|(_, c)| u64::from(c)).sum();
        if total == 0 {
            return self.longest();
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter() {
            seen += u64::from(c);
            if seen >= rank {
                let upper = upper_edge(i);
                return Duration::from_millis(u64::from(upper)).min(self.longest());
            }
        }
        self.longest()
    }

    /// Suspicion level of a silence of `silence`: φ = −log10 of the chance that a
    /// healthy member's gap is that long, under a normal fit of the recent gaps (the
    /// spread at least a tenth of the mean). 0 before enough gaps were seen.
    pub fn phi(&self, silence: Duration, min_history: u32) -> f64 {
        if self.learned < min_history.max(2) {
            return 0.0;
        }
        let mean = f64::from(self.mean);
        let sd = f64::from(self.variance.max(0.0).sqrt())
            .max(mean / 10.0)
            .max(1e-3);
        phi_of(normal_tail((silence.as_secs_f64() - mean) / sd))
    }
}

/// What a heartbeat showed ([`Arrivals::beat`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BeatGap {
    /// The gap since the previous heartbeat, if it was learned (not the first, nor one
    /// across a pause of the coordinator).
    pub gap: Option<Duration>,
    /// Heartbeats lost just before this one: the jump of its sequence number.
    pub lost: u64,
}

/// The chance that a standard normal variable exceeds `y`, by the logistic
/// approximation Akka uses (accurate to about 1e-4, and smooth far into the tail).
pub(super) fn normal_tail(y: f64) -> f64 {
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    if e.is_infinite() {
        return 1.0;
    }
    e / (1.0 + e)
}

/// φ of a probability: −log10, kept finite.
pub(super) fn phi_of(p: f64) -> f64 {
    (-p.max(1e-300).log10()).clamp(0.0, 300.0)
}

/// How many standard deviations above the mean a silence must be for φ to reach `phi`.
pub(super) fn sigmas_for_phi(phi: f64) -> f64 {
    let (mut lo, mut hi) = (0.0_f64, 40.0_f64);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if phi_of(normal_tail(mid)) < phi {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// The histogram bucket of a gap of `ms` milliseconds.
fn bucket_of(ms: u32) -> usize {
    let ms = ms.max(1);
    if ms < SUB_BUCKETS {
        return ms as usize;
    }
    let octave = 31 - ms.leading_zeros(); // >= 2
    let sub = (ms >> (octave - 2)) & (SUB_BUCKETS - 1);
    let i = SUB_BUCKETS * (octave - 1) + sub;
    (i as usize).min(BUCKETS - 1)
}

/// The largest gap, in milliseconds, that falls in bucket `i`.
fn upper_edge(i: usize) -> u32 {
    if i + 1 >= BUCKETS {
        return MAX_GAP_MS;
    }
    lower_edge(i + 1) - 1
}

fn lower_edge(i: usize) -> u32 {
    let i = i as u32;
    if i < SUB_BUCKETS {
        return i;
    }
    let octave = i / SUB_BUCKETS + 1;
    let sub = i % SUB_BUCKETS;
    (SUB_BUCKETS + sub) << (octave - 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_gap_in_order() {
        let mut last = 0;
        for ms in 1..200_000u32 {
            let b = bucket_of(ms);
            assert!(b >= last, "bucket order broken at {ms} ms");
            assert!(
                lower_edge(b) <= ms && ms <= upper_edge(b),
                "{ms} ms not in bucket {b}"
            );
            last = b;
        }
    }

    #[test]
    fn quantiles_follow_the_gaps_and_the_window_forgets() {
        let mut a = Arrivals::default();
        for _ in 0..990 {
            a.learn(Duration::from_millis(1000));
        }
        for _ in 0..10 {
            a.learn(Duration::from_millis(3000));
        }
        let p50 = a.quantile(0.5);
        assert!(p50 >= Duration::from_millis(1000) && p50 < Duration::from_millis(1200));
        assert!(a.quantile(0.999) >= Duration::from_millis(3000));
        assert_eq!(a.longest(), Duration::from_millis(3000));
        // Two more windows of calm forget the long gaps.
        for _ in 0..2 * WINDOW {
            a.learn(Duration::from_millis(1000));
        }
        assert_eq!(a.longest(), Duration::from_millis(1000));
        assert!(a.quantile(0.999) < Duration::from_millis(1200));
    }

    #[test]
    fn phi_grows_with_silence() {
        let mut a = Arrivals::default();
        for i in 0..100 {
            a.learn(Duration::from_millis(950 + (i % 10) * 10));
        }
        let low = a.phi(Duration::from_millis(1000), 10);
        let high = a.phi(Duration::from_millis(2000), 10);
        assert!(low < 1.0, "phi at the mean is {low}");
        assert!(high > 8.0, "phi at twice the mean is {high}");
        assert_eq!(Arrivals::default().phi(Duration::from_secs(9), 10), 0.0);
    }

    #[test]
    fn sigmas_invert_phi() {
        let z = sigmas_for_phi(8.0);
        assert!((5.0..5.8).contains(&z), "phi 8 at {z} sigmas");
        assert!((phi_of(normal_tail(z)) - 8.0).abs() < 1e-6);
        assert!(sigmas_for_phi(1.0) < sigmas_for_phi(3.0));
    }
}
