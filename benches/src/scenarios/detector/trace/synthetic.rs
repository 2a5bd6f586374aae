//! Synthetic traces: the presets and their parameters, and the generator of their
//! arrivals, deterministic from a seed.

use serde::Serialize;

/// The most arrivals a generated trace may have (`--duration` / `--interval`).
pub(crate) const MAX_GENERATED: f64 = 1e9;
/// A small deterministic generator (xorshift), the one the coordinator's replay tests
/// use, so a preset's seed `s` is their seed `s`.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    fn new(state: u64) -> Self {
        Self(if state == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            state
        })
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The synthetic traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Preset {
    /// Seed 002's: a beat every interval with ±jitter, a stop-the-world pause at
    /// pause-at whose held beats arrive together at its end, death at duration.
    Seed002,
    /// A beat every interval, each delayed by up to jitter (in order) for noisy-for, then
    /// by up to calm-jitter; death half an interval after the last.
    NoisyThenCalm,
    /// A beat every interval, delayed by up to jitter; before a beat, with chance
    /// pause-rate, a pause of Pareto length (scale pause, shape tail-shape, at most
    /// pause-cap) that holds the beats back; death at duration.
    HeavyTail,
    /// A beat every interval, delayed by up to jitter; beats lost in runs (a run starts
    /// with chance loss per beat, lasts burst beats on average); death at duration.
    BurstLoss,
    /// A beat whose interval drifts as interval × (1 + drift · sin(2πt / period)),
    /// delayed by up to jitter; death at duration.
    Drift,
}

impl Preset {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Seed002 => "seed002",
            Self::NoisyThenCalm => "noisy-then-calm",
            Self::HeavyTail => "heavy-tail",
            Self::BurstLoss => "burst-loss",
            Self::Drift => "drift",
        }
    }

    /// Mixed into the seed: the coordinator's replay tests use seed × 7919 for seed
    /// 002's trace and seed × 104,729 for noisy then calm.
    fn multiplier(self) -> u64 {
        match self {
            Self::Seed002 => 7919,
            Self::NoisyThenCalm => 104_729,
            Self::HeavyTail => 15_485_863,
            Self::BurstLoss => 32_452_843,
            Self::Drift => 49_979_687,
        }
    }

    /// The session timeout bounding the adaptive detector, unless `--session` says:
    /// what the coordinator's replay tests use.
    pub(crate) fn session(self) -> f64 {
        match self {
            Self::NoisyThenCalm => 30.0,
            _ => 10.0,
        }
    }
}

/// A generator parameter: its option name and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    Interval,
    Duration,
    Jitter,
    Pause,
    PauseAt,
    CalmJitter,
    NoisyFor,
    PauseRate,
    TailShape,
    PauseCap,
    Loss,
    Burst,
    Drift,
    Period,
}

impl Param {
    pub(crate) const ALL: [Self; 14] = [
        Self::Interval,
        Self::Duration,
        Self::Jitter,
        Self::Pause,
        Self::PauseAt,
        Self::CalmJitter,
        Self::NoisyFor,
        Self::PauseRate,
        Self::TailShape,
        Self::PauseCap,
        Self::Loss,
        Self::Burst,
        Self::Drift,
        Self::Period,
    ];

    pub(crate) fn option(self) -> &'static str {
        match self {
            Self::Interval => "--interval",
            Self::Duration => "--duration",
            Self::Jitter => "--jitter",
            Self::Pause => "--pause",
            Self::PauseAt => "--pause-at",
            Self::CalmJitter => "--calm-jitter",
            Self::NoisyFor => "--noisy-for",
            Self::PauseRate => "--pause-rate",
            Self::TailShape => "--tail-shape",
            Self::PauseCap => "--pause-cap",
            Self::Loss => "--loss",
            Self::Burst => "--burst",
            Self::Drift => "--drift",
            Self::Period => "--period",
        }
    }

    fn key(self) -> &'static str {
        &self.option()[2..]
    }

    /// The preset's default, `None` when the preset has no such parameter.
    fn default_for(self, preset: Preset) -> Option<f64> {
        use Preset as P;
        match (self, preset) {
            (Self::Interval, _) => Some(1.0),
            (Self::Duration, P::Seed002) => Some(100.0),
            (Self::Duration, P::NoisyThenCalm) => Some(1800.0),
            (Self::Duration, _) => Some(3600.0),
            (Self::Jitter, P::Seed002) => Some(0.1),
            (Self::Jitter, P::NoisyThenCalm) => Some(2.5),
            (Self::Jitter, _) => Some(0.05),
            (Self::Pause, P::Seed002) => Some(3.5),
            (Self::Pause, P::HeavyTail) => Some(0.5),
            (Self::PauseAt, P::Seed002) => Some(40.0),
            (Self::CalmJitter, P::NoisyThenCalm) => Some(0.05),
            (Self::NoisyFor, P::NoisyThenCalm) => Some(600.0),
            (Self::PauseRate, P::HeavyTail) => Some(0.005),
            (Self::TailShape, P::HeavyTail) => Some(1.5),
            (Self::PauseCap, P::HeavyTail) => Some(60.0),
            (Self::Loss, P::BurstLoss) => Some(0.01),
            (Self::Burst, P::BurstLoss) => Some(3.0),
            (Self::Drift, P::Drift) => Some(0.5),
            (Self::Period, P::Drift) => Some(1800.0),
            _ => None,
        }
    }
}

/// A preset's parameters, its defaults with the overrides given.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Params {
    pub(crate) preset: Preset,
    #[serde(flatten)]
    values: std::collections::BTreeMap<&'static str, f64>,
}

impl Params {
    /// `preset`'s parameters, each of `overrides` replacing its default. A parameter the
    /// preset does not have, or a value out of range, is an error.
    pub(crate) fn new(preset: Preset, overrides: &[(Param, f64)]) -> Result<Self, String> {
        let mut values = std::collections::BTreeMap::new();
        for p in Param::ALL {
            if let Some(v) = p.default_for(preset) {
                values.insert(p.key(), v);
            }
        }
        for &(p, v) in overrides {
            if p.default_for(preset).is_none() {
                let own: Vec<&str> = Param::ALL
                    .into_iter()
                    .filter(|p| p.default_for(preset).is_some())
                    .map(Param::option)
                    .collect();
                return Err(format!(
                    "{} does not apply to preset {} (its parameters: {})",
                    p.option(),
                    preset.name(),
                    own.join(", ")
                ));
            }
            values.insert(p.key(), v);
        }
        let params = Self { preset, values };
        params.validate()?;
        Ok(params)
    }

    pub(crate) fn get(&self, p: Param) -> f64 {
        self.values.get(p.key()).copied().unwrap_or(0.0)
    }

    fn validate(&self) -> Result<(), String> {
        let interval = self.get(Param::Interval);
        let duration = self.get(Param::Duration);
        if interval.is_nan() || interval <= 0.0 {
            return Err("--interval must be above zero".into());
        }
        if duration / interval > MAX_GENERATED {
            return Err(format!(
                "--duration / --interval gives over {MAX_GENERATED:e} beats"
            ));
        }
        for p in [Param::PauseRate, Param::Loss] {
            if self.values.contains_key(p.key()) && !(0.0..=1.0).contains(&self.get(p)) {
                return Err(format!("{} is a chance, from 0 to 1", p.option()));
            }
        }
        if self.values.contains_key("burst") && self.get(Param::Burst) < 1.0 {
            return Err("--burst is a mean run length in beats, at least 1".into());
        }
        if self.values.contains_key("tail-shape")
            && self.get(Param::TailShape).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        {
            return Err("--tail-shape must be above zero".into());
        }
        if self.values.contains_key("drift") && !(0.0..1.0).contains(&self.get(Param::Drift)) {
            return Err("--drift must be at least 0 and below 1".into());
        }
        if self.values.contains_key("period")
            && self.get(Param::Period).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        {
            return Err("--period must be above zero".into());
        }
        Ok(())
    }

    /// When the process dies, seconds.
    pub(crate) fn crash(&self) -> f64 {
        let interval = self.get(Param::Interval);
        let duration = self.get(Param::Duration);
        match self.preset {
            Preset::NoisyThenCalm => {
                // Half a second after the last beat sent, the sends counted exactly as
                // the generator counts them (bounded by the check in `validate`).
                let mut sent = 0.0;
                while sent < duration {
                    sent += interval;
                }
                sent + 0.5
            }
            _ => duration,
        }
    }

    /// One line describing the trace.
    pub(crate) fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        for (k, v) in &self.values {
            parts.push(format!("{k} {v}"));
        }
        format!("{} ({})", self.preset.name(), parts.join(", "))
    }

    /// The trace for `seed` (member 0's).
    #[cfg(test)]
    pub(crate) fn generate(&self, seed: u64) -> Generator {
        self.generate_member(seed, 0, None)
    }

    /// Member `member`'s trace for `seed` (its generator seeded with `seed × the
    /// preset's multiplier + member`, so member 0's is the coordinator's replay tests'
    /// trace), sent until `until` instead of the duration if given.
    pub(crate) fn generate_member(&self, seed: u64, member: u64, until: Option<f64>) -> Generator {
        let mut p = self.clone();
        if let Some(until) = until {
            p.values.insert(Param::Duration.key(), until);
        }
        Generator {
            rng: Rng::new(
                seed.wrapping_mul(self.preset.multiplier())
                    .wrapping_add(member),
            ),
            clock: match self.preset {
                Preset::NoisyThenCalm => 0.0,
                _ => self.get(Param::Interval),
            },
            p,
            last: None,
            bad: false,
            beats: 0,
            arrived: 0,
        }
    }
}

/// A synthetic trace, arrival by arrival: each arrival's time and the heartbeat's
/// sequence number. The client numbers every beat it sends, so a beat lost in the
/// network (`burst-loss`) leaves a gap in the numbers; a beat a pause held back is
/// sent late, not lost (and `seed002`'s beats held by its pause are sent as one).
#[derive(Debug, Clone)]
pub(crate) struct Generator {
    p: Params,
    rng: Rng,
    /// When the next beat is due to be sent (the preset's own schedule).
    clock: f64,
    last: Option<f64>,
    /// Burst loss: in a run of lost beats.
    bad: bool,
    /// Beats sent.
    beats: u64,
    /// Beats arrived.
    arrived: u64,
}

impl Iterator for Generator {
    type Item = (f64, u64);

    fn next(&mut self) -> Option<(f64, u64)> {
        let p = &self.p;
        let interval = p.get(Param::Interval);
        let duration = p.get(Param::Duration);
        let jitter = p.get(Param::Jitter);
        // Each turn sends one beat; bounded by the duration (at most MAX_GENERATED).
        for _ in 0..=(MAX_GENERATED as u64) {
            if self.clock >= duration {
                return None;
            }
            self.beats += 1;
            // The beat's sequence number: every beat sent is numbered, but the beats
            // held by a pause are not sent until it ends (one, in seed002).
            let seq = match p.preset {
                Preset::BurstLoss => self.beats,
                _ => self.arrived + 1,
            };
            let at = match p.preset {
                Preset::Seed002 => {
                    let (pause_at, pause) = (p.get(Param::PauseAt), p.get(Param::Pause));
                    let mut at = self.clock + (self.rng.unit() - 0.5) * (2.0 * jitter);
                    if (pause_at..pause_at + pause).contains(&at) {
                        at = pause_at + pause + self.rng.unit() * 0.05;
                    }
                    self.clock += interval;
                    // Beats held by the pause arrive together; one that would not be
                    // after the last is not seen.
                    if self.last.is_some_and(|last| at <= last) {
                        continue;
                    }
                    at
                }
                Preset::NoisyThenCalm => {
                    // As the coordinator's replay tests count: the clock is the last
                    // send (0 before the first), and a beat is sent while it is before
                    // the duration.
                    self.clock += interval;
                    let sent = self.clock;
                    let spread = if sent < p.get(Param::NoisyFor) {
                        jitter
                    } else {
                        p.get(Param::CalmJitter)
                    };
                    let at = sent + spread * self.rng.unit();
                    self.last.map_or(at, |l| at.max(l + 0.001))
                }
                Preset::HeavyTail => {
                    let mut send = self.clock;
                    if self.rng.unit() < p.get(Param::PauseRate) {
                        // Pareto by inversion; 1 - u is in (0, 1].
                        let u = 1.0 - self.rng.unit();
                        let pause = p.get(Param::Pause) * u.powf(-1.0 / p.get(Param::TailShape));
                        send += pause.min(p.get(Param::PauseCap));
                    }
                    if send >= duration {
                        self.clock = send;
                        return None;
                    }
                    self.clock = send + interval;
                    let at = send + jitter * self.rng.unit();
                    self.last.map_or(at, |l| at.max(l))
                }
                Preset::BurstLoss => {
                    let send = self.clock;
                    self.clock += interval;
                    let u = self.rng.unit();
                    self.bad = if self.bad {
                        u >= 1.0 / p.get(Param::Burst)
                    } else {
                        u < p.get(Param::Loss)
                    };
                    if self.bad {
                        continue;
                    }
                    let at = send + jitter * self.rng.unit();
                    self.last.map_or(at, |l| at.max(l))
                }
                Preset::Drift => {
                    let send = self.clock;
                    let phase = std::f64::consts::TAU * send / p.get(Param::Period);
                    self.clock += interval * (1.0 + p.get(Param::Drift) * phase.sin());
                    let at = send + jitter * self.rng.unit();
                    self.last.map_or(at, |l| at.max(l))
                }
            };
            self.last = Some(at);
            self.arrived += 1;
            return Some((at, seq));
        }
        None
    }
}
