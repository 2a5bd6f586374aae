//! What happens to the world: its random shape, the faults injected while the run is
//! noisy, and the restarts aimed at the moments a restart is most likely to lose state.

use std::time::{Duration, Instant};

use rand::Rng;
use rollcall_client::MemberConfig;
use rollcall_protocol::{AlterGroupConfigRequest, DrainRequest, ExpelReason, Request};

use super::oracle::Tp;
use super::process::{membership, AckPolicy};
use super::world::{Action, Ev, GroupSpec, World};
use crate::core::{Authority, Event};

/// Session timeouts (ms) and how often members pick them. The longest is only used in
/// some seeds: it makes the quiet tail long.
const SESSIONS: [(u64, u32); 4] = [(1_000, 35), (3_000, 30), (10_000, 25), (60_000, 10)];
/// Most live processes per group.
const MAX_PER_GROUP: usize = 10;
/// Mean time between two faults.
const FAULT_GAP: f64 = 0.6;

#[derive(Debug, Clone, Copy)]
enum Fault {
    Cut,
    Stuck,
    Crash,
    CrashGroup,
    CrashAll,
    Join,
    StaticReplace,
    Leave,
    Reconfigure,
    Stall,
    AckPolicy,
    Pause,
    Restart,
    Drain,
    AimedStall,
    Isolate,
    Takeovers,
    Operator,
}

const FAULTS: [(Fault, f64); 18] = [
    (Fault::Cut, 10.0),
    (Fault::Stuck, 3.0),
    (Fault::Crash, 4.0),
    (Fault::CrashGroup, 0.5),
    (Fault::CrashAll, 0.25),
    (Fault::Join, 4.0),
    (Fault::StaticReplace, 2.0),
    (Fault::Leave, 2.5),
    (Fault::Reconfigure, 2.0),
    (Fault::Stall, 2.0),
    (Fault::AckPolicy, 2.0),
    (Fault::Pause, 1.2),
    (Fault::Restart, 0.8),
    (Fault::Drain, 0.4),
    (Fault::AimedStall, 1.0),
    (Fault::Isolate, 0.8),
    (Fault::Takeovers, 0.8),
    (Fault::Operator, 3.0),
];

/// Labels (hosts) and racks members declare.
const LABELS: usize = 3;
const RACKS: usize = 3;

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

impl World {
    /// The world's random shape: groups, topics, first members, how long faults last.
    pub(super) fn setup(&mut self) {
        let groups = self.rng.gen_range(1..=3);
        self.long_sessions = self.rng.gen_bool(0.3);
        self.max_restarts = self.rng.gen_range(1..=6);
        for g in 0..groups {
            let topics = (0..self.rng.gen_range(1..=3))
                .map(|i| (["a", "b", "c"][i].to_owned(), self.rng.gen_range(1..=12)))
                .collect();
            let commits = self.rng.gen_bool(0.5);
            self.groups.push(GroupSpec {
                name: format!("g{g}"),
                topics,
                commits,
            });
        }
        for g in 0..groups {
            let n = if groups == 1 {
                self.rng.gen_range(2..=10)
            } else {
                self.rng.gen_range(2..=7)
            };
            for _ in 0..n {
                let instance = self.rng.gen_bool(0.4).then(|| self.new_instance(g));
                let delay = self.rng.gen_range(Duration::ZERO..ms(500));
                self.schedule_spawn(g, instance, delay);
            }
        }
        // Some groups are set up by the operator before anyone joins.
        for g in 0..groups {
            if self.rng.gen_bool(0.4) {
                self.alter_config(g);
            }
        }
        let faulty = self
            .rng
            .gen_range(Duration::from_secs(20)..Duration::from_secs(40));
        self.fault_end = self.start + faulty;
        self.push(self.fault_end, Ev::Quiet);
        let first = self.start + self.rng.gen_range(ms(500)..ms(1500));
        self.push(first, Ev::NextFault);
    }

    fn new_instance(&mut self, group: usize) -> String {
        self.next_instance += 1;
        format!("g{group}-i{}", self.next_instance)
    }

    fn pick_session(&mut self, not: Option<Duration>) -> Duration {
        let choices: Vec<(u64, u32)> = SESSIONS
            .iter()
            .copied()
            .filter(|(s, _)| {
                (self.long_sessions || self.fast_beats || *s < 60_000)
                    && (!self.fast_beats || *s >= 10_000)
                    && Some(ms(*s)) != not
            })
            .collect();
        let total: u32 = choices.iter().map(|(_, w)| w).sum();
        let mut x = self.rng.gen_range(0..total);
        for (s, w) in choices {
            if x < w {
                return ms(s);
            }
            x -= w;
        }
        unreachable!("weights cover the range")
    }

    /// Timeouts for a session timeout: heartbeats every third (or fifth) of it, or in a
    /// fast-beating world a tenth to a fortieth (at least 50 ms); half the
    /// members without a lease timeout (a version 0 join: the lease is the session), the
    /// others with one between two heartbeat intervals and the session; the client's
    /// default margin (5 % of the lease); progress and rebalance timeouts of a few
    /// seconds.
    fn with_session(&mut self, config: &mut MemberConfig, session: Duration) {
        config.session_timeout = session;
        let interval = if self.fast_beats {
            (session / self.rng.gen_range(10..=40)).max(ms(50))
        } else if self.rng.gen_bool(0.7) {
            session / 3
        } else {
            session / 5
        };
        config.heartbeat_interval = Some(interval);
        let lease = if self.rng.gen_bool(0.5) {
            session
        } else {
            let shortest = (interval * 2).max(ms(100));
            ms(self
                .rng
                .gen_range(shortest.as_millis() as u64..=session.as_millis() as u64))
        };
        config.lease_timeout = Some(lease);
        config.lease_margin = Some((lease / 20).max(ms(5)));
        config.progress_timeout = self
            .rng
            .gen_range(Duration::from_secs(2)..Duration::from_secs(20))
            .max(interval * 3);
        config.rebalance_timeout = self.rng.gen_range(ms(1000)..ms(6000));
    }

    fn new_config(&mut self, group: usize, instance: Option<String>) -> MemberConfig {
        let spec = &self.groups[group];
        let topics = spec.topics.clone();
        let name = spec.name.clone();
        let mut subscription: Vec<(String, u32)> = topics
            .iter()
            .filter(|_| self.rng.gen_bool(0.7))
            .cloned()
            .collect();
        if subscription.is_empty() {
            subscription.push(topics[self.rng.gen_range(0..topics.len())].clone());
        }
        let mut config =
            MemberConfig::new(name, subscription).with_client_id(format!("p{}", self.procs.len()));
        config.instance_id = instance;
        let session = self.pick_session(None);
        self.with_session(&mut config, session);
        config
    }

    /// A new process starts in `group`, with `instance` as its static instance id.
    pub(super) fn spawn(&mut self, group: usize, instance: Option<String>) {
        let live = self.live_in(group).len();
        if instance.is_none() && live >= MAX_PER_GROUP {
            return;
        }
        let config = self.new_config(group, instance.clone());
        let epoch = match &instance {
            Some(i) => {
                let next = self.instances.entry(i.clone()).or_insert(0);
                *next += 1;
                *next - 1
            }
            None => 0,
        };
        let seed = self.rng.gen();
        let line = format!(
            "process {} starts in {} ({}, session {:?}, rebalance {:?}, progress {:?})",
            self.procs.len(),
            config.group,
            instance
                .as_ref()
                .map_or_else(|| "dynamic".to_owned(), |i| format!("static {i} #{epoch}")),
            config.session_timeout,
            config.rebalance_timeout,
            config.progress_timeout,
        );
        self.log(line);
        let m = membership(&config, seed, self.now);
        let ack = self.ack_policy();
        let p = self.procs.len();
        if self.rng.gen_bool(0.7) {
            // A static instance is a host: it comes back with the same label.
            let label = match &instance {
                Some(i) => i.bytes().map(usize::from).sum::<usize>() % LABELS,
                None => self.rng.gen_range(0..LABELS),
            };
            let rack = self.rng.gen_range(0..RACKS);
            let capacity = self.rng.gen_range(0..=4);
            let topics = self.rng.gen_bool(0.3).then_some(config.topics.as_slice());
            let topics: Option<Vec<(String, u32)>> =
                topics.map(|t| t.iter().map(|t| (t.topic.clone(), t.partitions)).collect());
            self.placements.insert(
                p,
                super::operator::placement(label, rack, capacity, topics.as_deref()),
            );
        }
        if self.rng.gen_bool(0.5) {
            self.reports_load.insert(p);
        }
        self.add_process(group, config, m, epoch, ack);
    }

    fn ack_policy(&mut self) -> AckPolicy {
        match self.rng.gen_range(0..10) {
            0..=6 => AckPolicy::Prompt,
            7..=8 => AckPolicy::Late,
            _ => AckPolicy::Never,
        }
    }

    fn schedule_spawn(&mut self, group: usize, instance: Option<String>, delay: Duration) {
        self.pending_spawns += 1;
        self.push(self.now + delay, Ev::Do(Action::Spawn { group, instance }));
    }

    fn live_in(&self, group: usize) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|&p| self.procs[p].group == group && self.procs[p].is_live())
            .collect()
    }

    fn pick(&mut self, filter: impl Fn(&Self, usize) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.procs.len())
            .filter(|&p| self.procs[p].is_live() && filter(self, p))
            .collect();
        (!candidates.is_empty()).then(|| candidates[self.rng.gen_range(0..candidates.len())])
    }

    fn restart_downtime(&mut self) -> Duration {
        match self.rng.gen_range(0..10) {
            0..=3 => Duration::ZERO,
            4..=7 => self.rng.gen_range(Duration::ZERO..ms(300)),
            _ => self.rng.gen_range(ms(300)..ms(3000)),
        }
    }

    fn schedule_restart(&mut self, delay: Duration, why: &'static str) {
        let downtime = self.restart_downtime();
        self.push(self.now + delay, Ev::Do(Action::Restart { downtime, why }));
    }

    /// Restarts aimed at the moments the core's durable state is most likely to miss
    /// something: inside the coalescing window after a join or a leave, while partitions
    /// are held for an expelled member, and after a static replacement.
    pub(super) fn react(&mut self, event: &Event) {
        if self.quiet
            || self.counts.restarts >= self.max_restarts
            || self.calm_until.is_some_and(|t| self.now < t)
        {
            return;
        }
        let window = self.config.rebalance_coalesce;
        match event {
            Event::MemberJoined { .. } if self.rng.gen_bool(0.04) => {
                let d = self.rng.gen_range(Duration::ZERO..window);
                self.schedule_restart(d, "inside the coalescing window after a join");
            }
            Event::MemberRemoved {
                reason: ExpelReason::Left,
                ..
            } if self.rng.gen_bool(0.08) => {
                let d = self.rng.gen_range(Duration::ZERO..window);
                self.schedule_restart(d, "inside the coalescing window after a leave");
            }
            Event::MemberRemoved {
                member_id, reason, ..
            } if *reason != ExpelReason::Left && self.rng.gen_bool(0.12) => {
                let session = self
                    .oracle
                    .members
                    .get(member_id)
                    .map_or(ms(1000), |m| m.session);
                let d = if self.rng.gen_bool(0.5) {
                    self.rng.gen_range(Duration::ZERO..ms(100))
                } else {
                    self.rng.gen_range(Duration::ZERO..session)
                };
                self.schedule_restart(d, "while an expelled member's partitions may be held");
            }
            Event::MemberReplaced { .. } if self.rng.gen_bool(0.2) => {
                let d = self.rng.gen_range(Duration::ZERO..ms(1000));
                self.schedule_restart(d, "after a static replacement");
            }
            _ => {}
        }
    }

    /// The fault generator: one random fault, then the next one later.
    pub(super) fn next_fault(&mut self) {
        if self.quiet {
            return;
        }
        if let Some(calm) = self.calm_until.filter(|t| self.now < *t) {
            self.push(calm, Ev::NextFault);
            return;
        }
        let total: f64 = FAULTS.iter().map(|(_, w)| w).sum();
        let mut x = self.rng.gen_range(0.0..total);
        let mut fault = FAULTS[0].0;
        for (f, w) in FAULTS {
            if x < w {
                fault = f;
                break;
            }
            x -= w;
        }
        self.inject(fault);
        let u: f64 = self.rng.gen_range(0.0..1.0);
        let gap = Duration::from_secs_f64((-FAULT_GAP * (1.0 - u).ln()).min(5.0));
        self.push(self.now + gap, Ev::NextFault);
    }

    fn inject(&mut self, fault: Fault) {
        let now = self.now;
        match fault {
            Fault::Cut => {
                let Some(p) = self.pick(|_, _| true) else {
                    return;
                };
                let session = self.procs[p].config.session_timeout;
                let len = session.mul_f64(self.rng.gen_range(0.1..2.5));
                let hold = self.rng.gen_bool(0.5);
                self.cut(p, len, hold);
                if hold && session >= ms(3000) && self.rng.gen_bool(0.35) {
                    if self.rng.gen_bool(0.5) {
                        self.pause_at_deadline(p);
                    } else {
                        self.pause_over_deadline(p);
                    }
                }
            }
            Fault::Stuck => {
                // One connection's flow stalls in the network and is delivered late,
                // both ways, while new connections get through: the client gives up
                // on it and reconnects, sending again what went unanswered, and the
                // coordinator reads the old connection's frames (and its close) only
                // when the flow moves again, after the newer ones.
                let Some(p) = self.pick(|w, p| w.procs[p].conn.is_some()) else {
                    return;
                };
                let Some(conn) = self.procs[p].conn else {
                    return;
                };
                let session = self.procs[p].config.session_timeout;
                let len = session
                    .mul_f64(self.rng.gen_range(0.5..4.0))
                    .min(Duration::from_secs(40));
                let until = now + len;
                let held = self.stuck.entry(conn).or_insert(until);
                *held = (*held).max(until);
                self.log(format!(
                    "process {p}: connection {conn} stuck for {len:?}, new connections get through"
                ));
            }
            Fault::Crash => {
                let Some(p) = self.pick(|_, _| true) else {
                    return;
                };
                let close = self.rng.gen_bool(0.5);
                self.crash(p, close);
                let group = self.procs[p].group;
                let session = self.procs[p].config.session_timeout;
                match self.procs[p].config.instance_id.clone() {
                    // A static process comes back under its instance id, before or after
                    // its old member is expelled.
                    Some(instance) if self.rng.gen_bool(0.8) => {
                        // With a departure delay, within it or after it.
                        let delay = self.departure_delay(group);
                        let d = self.rng.gen_range(Duration::ZERO..session * 2 + delay * 2);
                        self.schedule_spawn(group, Some(instance), d);
                    }
                    None if self.rng.gen_bool(0.8) => {
                        let d = self.rng.gen_range(ms(200)..ms(4000));
                        self.schedule_spawn(group, None, d);
                    }
                    _ => {}
                }
            }
            Fault::CrashGroup => {
                let g = self.rng.gen_range(0..self.groups.len());
                self.log(format!("every process of g{g} crashes"));
                self.crash_group(g);
            }
            Fault::CrashAll => {
                self.log("every process of the coordinator crashes");
                for g in 0..self.groups.len() {
                    self.crash_group(g);
                }
            }
            Fault::Join => {
                let g = self.rng.gen_range(0..self.groups.len());
                if self.live_in(g).len() < MAX_PER_GROUP {
                    let instance = self.rng.gen_bool(0.3).then(|| self.new_instance(g));
                    self.spawn(g, instance);
                }
            }
            Fault::StaticReplace => {
                let Some(p) = self
                    .pick(|w, p| w.procs[p].config.instance_id.is_some() && w.procs[p].is_active())
                else {
                    return;
                };
                // The old process is alive; now and then it is also cut off, so that it
                // misses the news and comes back with its old member id later.
                if self.rng.gen_bool(0.5) {
                    let session = self.procs[p].config.session_timeout;
                    let len = session.mul_f64(self.rng.gen_range(0.3..1.5));
                    let hold = self.rng.gen_bool(0.5);
                    self.cut(p, len, hold);
                }
                self.counts.replacements += 1;
                let instance = self.procs[p].config.instance_id.clone();
                self.log(format!("process {p} is replaced by a new process"));
                self.spawn(self.procs[p].group, instance);
            }
            Fault::Leave => {
                let Some(p) = self.pick(|w, p| w.procs[p].is_active() && !w.procs[p].is_leaving())
                else {
                    return;
                };
                self.leave(p);
                if self.rng.gen_bool(0.7) {
                    let group = self.procs[p].group;
                    let instance = self.rng.gen_bool(0.3).then(|| self.new_instance(group));
                    let d = self.rng.gen_range(ms(500)..ms(5000));
                    self.schedule_spawn(group, instance, d);
                }
            }
            Fault::Reconfigure => {
                let Some(p) = self.pick(|w, p| w.procs[p].is_active() && !w.procs[p].is_leaving())
                else {
                    return;
                };
                let mut config = self.procs[p].config.clone();
                let session = self.pick_session(Some(config.session_timeout));
                let old = config.session_timeout;
                self.with_session(&mut config, session);
                self.log(format!(
                    "process {p} ({}) rejoins with session {old:?} -> {session:?}, rebalance \
                     {:?}, progress {:?}",
                    self.procs[p].m.member_id().unwrap_or("-"),
                    config.rebalance_timeout,
                    config.progress_timeout
                ));
                if self.reconfigure(p, config) {
                    self.counts.reconfigurations += 1;
                    self.process_wake(p);
                }
            }
            Fault::Stall => {
                let Some(p) = self.pick(|_, _| true) else {
                    return;
                };
                let progress = self.procs[p].config.progress_timeout;
                let len = progress.mul_f64(self.rng.gen_range(0.5..2.0));
                self.procs[p].stalled_until = Some(now + len);
                self.log(format!("process {p}: application stalls for {len:?}"));
            }
            Fault::AckPolicy => {
                let Some(p) = self.pick(|_, _| true) else {
                    return;
                };
                let policy = self.ack_policy();
                self.procs[p].ack = policy;
                self.log(format!("process {p}: acknowledges revocations {policy:?}"));
            }
            Fault::Pause => {
                let len = if self.rng.gen_bool(0.3) {
                    self.rng.gen_range(ms(100)..ms(2500))
                } else {
                    let session = match self.pick(|_, _| true) {
                        Some(p) => self.procs[p].config.session_timeout,
                        None => ms(1000),
                    };
                    session
                        .mul_f64(self.rng.gen_range(0.2..3.0))
                        .min(Duration::from_secs(30))
                };
                self.pause_begin(len);
            }
            Fault::AimedStall => self.aimed_stall(),
            Fault::Isolate => self.isolations(),
            Fault::Takeovers => self.takeovers(),
            Fault::Restart => {
                let downtime = self.restart_downtime();
                self.restart_begin(downtime, "at random");
            }
            Fault::Operator => self.operator(),
            Fault::Drain => {
                let g = self.rng.gen_range(0..self.groups.len());
                self.log(format!("every process of g{g} leaves"));
                for p in self.live_in(g) {
                    if self.procs[p].is_active() {
                        self.leave(p);
                    } else {
                        self.procs[p].m.leave(Duration::ZERO, now);
                    }
                }
                let n = self.rng.gen_range(2..=5);
                let d = self.rng.gen_range(ms(3000)..ms(8000));
                for _ in 0..n {
                    let instance = self.rng.gen_bool(0.3).then(|| self.new_instance(g));
                    let jitter = self.rng.gen_range(Duration::ZERO..ms(500));
                    self.schedule_spawn(g, instance, d + jitter);
                }
            }
        }
    }

    /// A coordinator pause that starts just before the session deadline of cut-off
    /// process `p` and outlasts the pause guard, while `p`'s traffic, held by the cut,
    /// reaches the paused coordinator: its frames wait in the backlog when the core
    /// wakes up late.
    fn pause_at_deadline(&mut self, p: usize) {
        let Some(member) = self.procs[p].m.member_id() else {
            return;
        };
        let Some(info) = self.oracle.members.get(member) else {
            return;
        };
        let deadline = info.last_arrival + info.session;
        let start = deadline
            .checked_sub(self.rng.gen_range(Duration::ZERO..ms(300)))
            .unwrap_or(deadline)
            .max(self.now);
        let longest = (info.session * 3).min(Duration::from_secs(30));
        let len = self.rng.gen_range(
            self.config.pause_guard + ms(200)..longest.max(self.config.pause_guard + ms(400)),
        );
        let heal = start + len.mul_f64(self.rng.gen_range(0.3..0.9));
        self.procs[p].cut_until = heal;
        self.log(format!(
            "process {p}: cut until t={}, coordinator pause of {len:?} planned at t={}",
            self.t(heal),
            self.t(start)
        ));
        self.push(start, Ev::Do(Action::Pause(len)));
    }

    /// A coordinator pause that ends just after the session deadline of cut-off process
    /// `p` (by less than 150 ms, so the core's earliest timer may be barely late when it
    /// wakes), while `p`'s traffic, held by the cut, reaches the paused coordinator
    /// before that deadline: timers run before `p`'s connection is read judge it with
    /// its beats unread.
    fn pause_over_deadline(&mut self, p: usize) {
        let Some(member) = self.procs[p].m.member_id() else {
            return;
        };
        let Some(info) = self.oracle.members.get(member) else {
            return;
        };
        let deadline = info.last_arrival + info.session;
        let end = deadline + self.rng.gen_range(Duration::ZERO..ms(150));
        let len = self.rng.gen_range(ms(100)..info.session / 2);
        let start = end.checked_sub(len).unwrap_or(self.now).max(self.now);
        if start >= deadline {
            return;
        }
        let heal = start + (deadline - start).mul_f64(self.rng.gen_range(0.1..0.9));
        self.procs[p].cut_until = heal;
        self.log(format!(
            "process {p}: cut until t={}, coordinator pause planned from t={} to t={}",
            self.t(heal),
            self.t(start),
            self.t(end)
        ));
        self.push(start, Ev::Do(Action::Pause(end - start)));
    }

    /// A coordinator stall aimed at a member's revocation or progress deadline, with
    /// the frame that answers it (an acknowledgement, a heartbeat carrying progress
    /// again) sent just before that deadline, so that it waits unread in the stall.
    /// A revocation pending now is the target, or else the next one an application is
    /// asked; otherwise an application stalls past its progress deadline and resumes
    /// just in time.
    fn aimed_stall(&mut self) {
        if self.rng.gen_bool(0.6) {
            let candidates: Vec<usize> = (0..self.procs.len())
                .filter(|&p| self.revocation_target(p).is_some())
                .collect();
            if candidates.is_empty() {
                self.aim_next_revocation = true;
            } else {
                let p = candidates[self.rng.gen_range(0..candidates.len())];
                self.aim_at_revocation(p);
            }
            return;
        }
        let Some(p) = self.pick(|w, p| w.procs[p].conn.is_some() && w.procs[p].is_active()) else {
            return;
        };
        let Some(deadline) = self.procs[p]
            .m
            .member_id()
            .and_then(|m| self.oracle.members.get(m))
            .filter(|info| info.removed.is_none())
            .map(|info| info.progress_deadline())
        else {
            return;
        };
        // The application resumes inside the stall, early enough for one heartbeat to
        // carry its progress before the deadline.
        let now = self.now;
        let beat = self.procs[p].config.effective_heartbeat_interval() + ms(60);
        let start = deadline
            .checked_sub(beat.mul_f64(self.rng.gen_range(1.05..1.6)))
            .unwrap_or(now)
            .max(now);
        let Some(latest) = deadline.checked_sub(beat).filter(|l| *l > start) else {
            return;
        };
        let resume = start + self.rng.gen_range(Duration::ZERO..latest - start);
        self.procs[p].stalled_until = Some(resume);
        let what = format!(
            "application stalls until t={}, its progress deadline is at t={}",
            self.t(resume),
            self.t(deadline)
        );
        self.stall_over(p, &what, deadline, start);
    }

    /// Restarts aimed at a wait that can expel a member, as a group whose coordinator
    /// fails over again and again would see them: two to five, each run shorter than the
    /// wait's timeout, with no other fault meanwhile. Half the time at a member asked to
    /// release partitions, whose application then withholds its acknowledgement until
    /// the faults stop; otherwise at one whose application stalls for its progress
    /// timeout or longer. A restore resumes the wait, and check 8 bounds it in running
    /// time across the restarts (a restart once started it over).
    fn takeovers(&mut self) {
        let revoking = self.rng.gen_bool(0.5);
        let candidates: Vec<usize> = (0..self.procs.len())
            .filter(|&p| {
                self.procs[p].is_live()
                    && self.procs[p]
                        .m
                        .member_id()
                        .and_then(|m| self.oracle.members.get(m))
                        .is_some_and(|info| {
                            info.removed.is_none()
                                && (!revoking || info.revocation_deadline().is_some())
                        })
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        let p = candidates[self.rng.gen_range(0..candidates.len())];
        let timeout = if revoking {
            let never = self.now + Duration::from_secs(24 * 3600);
            self.procs[p].ack = AckPolicy::Never;
            for due in self.procs[p].acks_due.values_mut() {
                *due = never;
            }
            self.log(format!(
                "process {p} stops acknowledging; restarts aimed at its revocation"
            ));
            self.procs[p].config.rebalance_timeout
        } else {
            let progress = self.procs[p].config.progress_timeout;
            let len = progress.mul_f64(self.rng.gen_range(1.0..2.0));
            self.procs[p].stalled_until = Some(self.now + len);
            self.log(format!(
                "process {p}: application stalls for {len:?}; restarts aimed at its progress"
            ));
            progress
        };
        let times = self.rng.gen_range(2..=5);
        self.max_restarts = self.max_restarts.max(self.counts.restarts + times);
        let mut at = Duration::ZERO;
        for _ in 0..times {
            at += timeout.mul_f64(self.rng.gen_range(0.1..0.5));
            let downtime = self.restart_downtime();
            let why = if revoking {
                "aimed at a withheld acknowledgement"
            } else {
                "aimed at a stalled application"
            };
            self.push(self.now + at, Ev::Do(Action::Restart { downtime, why }));
        }
        self.calm_until = Some(self.now + at);
    }

    /// The coordinator's own network goes away, one to four times in a row. Half the
    /// time aimed at a member asked to release partitions, with a session of 10 s at
    /// most that most members' do not exceed (no other fault meanwhile): its application stops
    /// acknowledging until the faults stop, and the isolations, scaled to its session,
    /// recur within its wait. Isolations that recur within one wait are what bounds
    /// what the isolation guard gives back.
    fn isolations(&mut self) {
        if self.rng.gen_bool(0.5) {
            // Members whose session at least three in five live processes do not
            // exceed: isolations scaled to it leave most members overdue, the guard's
            // evidence.
            let sessions: Vec<Duration> = (0..self.procs.len())
                .filter(|&p| self.procs[p].is_live())
                .map(|p| self.procs[p].config.session_timeout)
                .collect();
            let candidates: Vec<usize> = (0..self.procs.len())
                .filter(|&p| {
                    let proc = &self.procs[p];
                    let session = proc.config.session_timeout;
                    proc.is_live()
                        && session <= Duration::from_secs(10)
                        && sessions.iter().filter(|s| **s <= session).count() * 5
                            >= sessions.len() * 3
                        && proc
                            .m
                            .member_id()
                            .and_then(|m| self.oracle.members.get(m))
                            .is_some_and(|info| {
                                info.removed.is_none() && info.revocation_deadline().is_some()
                            })
                })
                .collect();
            if !candidates.is_empty() {
                let p = candidates[self.rng.gen_range(0..candidates.len())];
                let never = self.now + Duration::from_secs(24 * 3600);
                self.procs[p].ack = AckPolicy::Never;
                for due in self.procs[p].acks_due.values_mut() {
                    *due = never;
                }
                let session = self.procs[p].config.session_timeout;
                self.log(format!(
                    "process {p} stops acknowledging; isolations aimed at its revocation"
                ));
                let times = self.rng.gen_range(3..=4);
                // Each isolation and the gap after it last at most 1.9 sessions.
                self.calm_until = Some(self.now + session.mul_f64(1.9 * f64::from(times)));
                self.isolate(times, Some(session));
                return;
            }
        }
        let times = self.rng.gen_range(1..=4);
        self.isolate(times, None);
    }

    /// The coordinator's own network goes away: every live process's traffic is held
    /// (as TCP retransmits) or its stream dies silently, for 0.6 to 1.6 of a session
    /// timeout at least three in five of them have (0.7 to 1.4 of `session`, if given);
    /// then, `times - 1` more times, after a gap of 0.2 to 1 of the shortest session
    /// (0.1 to 0.5 of `session`).
    pub(super) fn isolate(&mut self, times: u32, session: Option<Duration>) {
        if self.quiet || times == 0 {
            return;
        }
        let live: Vec<usize> = (0..self.procs.len())
            .filter(|&p| self.procs[p].is_live())
            .collect();
        let mut sessions: Vec<Duration> = live
            .iter()
            .map(|&p| self.procs[p].config.session_timeout)
            .collect();
        sessions.sort();
        let Some(&shortest) = sessions.first() else {
            return;
        };
        let (len, gap) = match session {
            Some(s) => (
                s.mul_f64(self.rng.gen_range(0.7..1.4)),
                s.mul_f64(self.rng.gen_range(0.1..0.5)),
            ),
            None => {
                // Long enough for most members to be overdue, as the guard's evidence
                // asks.
                let most = sessions[(sessions.len() * 3).div_ceil(5) - 1];
                (
                    most.mul_f64(self.rng.gen_range(0.6..1.6)),
                    shortest.mul_f64(self.rng.gen_range(0.2..1.0)),
                )
            }
        };
        let hold = self.rng.gen_bool(0.7);
        self.log(format!(
            "the coordinator's network goes away for {len:?} ({} more times after)",
            times - 1
        ));
        for p in live {
            self.cut(p, len, hold);
        }
        if times > 1 {
            self.push(
                self.now + len + gap,
                Ev::Do(Action::Isolate(times - 1, session)),
            );
        }
    }

    /// Process `p`'s oldest unanswered revocation's deadline, and the partitions not
    /// answered, if its application knows them all, it can answer them at once, and
    /// the deadline leaves time to aim a stall at it.
    fn revocation_target(&self, p: usize) -> Option<(Instant, Vec<Tp>)> {
        let proc = &self.procs[p];
        if !proc.is_live() || proc.conn.is_none() || !proc.is_active() || proc.is_leaving() {
            return None;
        }
        let info = self.oracle.members.get(proc.m.member_id()?)?;
        let (deadline, tps) = info
            .revocation_deadline()
            .filter(|_| info.removed.is_none())?;
        (deadline > self.now + ms(400) && tps.iter().all(|tp| proc.acks_due.contains_key(tp)))
            .then_some((deadline, tps))
    }

    /// Aims a stall at process `p`'s revocation deadline, its application acknowledging
    /// just before it (30 to 250 ms: the acknowledgement reaches the coordinator before
    /// the deadline, unless a delay spike holds it). Returns whether it could.
    pub(super) fn aim_at_revocation(&mut self, p: usize) -> bool {
        let Some((deadline, tps)) = self.revocation_target(p) else {
            return false;
        };
        let sent = deadline - self.rng.gen_range(ms(30)..ms(250));
        for tp in tps {
            self.procs[p].acks_due.insert(tp, sent);
        }
        self.schedule_wake(p);
        let what = format!(
            "its revocation deadline is at t={}, its application acknowledges at t={}",
            self.t(deadline),
            self.t(sent)
        );
        self.stall_over(p, &what, deadline, sent);
        true
    }

    /// A coordinator stall from shortly before `from` to just after `deadline` of
    /// process `p`: a short one (the timers barely late: no pause measured) or a longer
    /// one the pause guard may measure.
    fn stall_over(&mut self, p: usize, what: &str, deadline: Instant, from: Instant) {
        let (start, end) = if self.rng.gen_bool(0.6) {
            (
                from.checked_sub(self.rng.gen_range(Duration::ZERO..ms(100))),
                deadline + self.rng.gen_range(Duration::ZERO..ms(100)),
            )
        } else {
            (
                from.checked_sub(self.rng.gen_range(Duration::ZERO..ms(1000))),
                deadline + self.rng.gen_range(ms(150)..ms(2500)),
            )
        };
        let start = start.unwrap_or(self.now).max(self.now);
        self.log(format!(
            "process {p}: {what}; coordinator stall planned from t={} to t={}",
            self.t(start),
            self.t(end)
        ));
        self.push(start, Ev::Do(Action::Pause(end - start)));
    }

    /// A graceful leave: the application is asked to release everything and the leave
    /// goes out once it did, or at the leave deadline with revocations still pending.
    fn leave(&mut self, p: usize) {
        let timeout = self.rng.gen_range(ms(200)..ms(3000));
        self.counts.leaves += 1;
        self.log(format!(
            "process {p} ({}) leaves within {timeout:?}",
            self.procs[p].m.member_id().unwrap_or("-")
        ));
        self.procs[p].m.leave(timeout, self.now);
        self.process_wake(p);
    }

    /// Every live process of a group crashes at once; the group comes back later.
    fn crash_group(&mut self, g: usize) {
        let mode = self.rng.gen_range(0..3);
        let mut instances = Vec::new();
        for p in self.live_in(g) {
            let close = match mode {
                0 => true,
                1 => false,
                _ => self.rng.gen_bool(0.5),
            };
            if let Some(i) = self.procs[p].config.instance_id.clone() {
                instances.push(i);
            }
            self.crash(p, close);
        }
        let d = self.rng.gen_range(ms(1000)..ms(8000));
        let mut spawned = 0;
        for i in instances {
            if self.rng.gen_bool(0.7) {
                let jitter = self.rng.gen_range(Duration::ZERO..ms(500));
                self.schedule_spawn(g, Some(i), d + jitter);
                spawned += 1;
            }
        }
        let dynamic = self.rng.gen_range(1..=3).max(2 - spawned.min(2));
        for _ in 0..dynamic {
            let jitter = self.rng.gen_range(Duration::ZERO..ms(500));
            self.schedule_spawn(g, None, d + jitter);
        }
    }

    /// The departure delay the operator last set on group `g`.
    fn departure_delay(&self, g: usize) -> Duration {
        self.oracle
            .op
            .settings
            .get(&self.groups[g].name)
            .map_or(Duration::ZERO, |s| {
                Duration::from_millis(u64::from(s.departure_delay_ms))
            })
    }

    /// The operator changes some of group `g`'s settings: the departure delay on (0.5
    /// to 8 s) or off, the caps on revocations set, lowered, raised or lifted, the
    /// balance switched between counts and load.
    fn alter_config(&mut self, g: usize) {
        let mut request = AlterGroupConfigRequest {
            group: self.groups[g].name.clone(),
            ..AlterGroupConfigRequest::default()
        };
        if self.rng.gen_bool(0.5) {
            request.departure_delay_ms = Some(if self.rng.gen_bool(0.3) {
                0
            } else {
                self.rng.gen_range(500..8_000)
            });
        }
        if self.rng.gen_bool(0.5) {
            request.max_revoking = Some(match self.rng.gen_range(0..4) {
                0 => 0,
                1 => 1,
                _ => self.rng.gen_range(2..8),
            });
        }
        if self.rng.gen_bool(0.4) {
            request.max_revoking_per_member = Some(match self.rng.gen_range(0..3) {
                0 => 0,
                1 => 1,
                _ => self.rng.gen_range(2..4),
            });
        }
        if self.rng.gen_bool(0.3) {
            request.balance = Some(self.rng.gen_range(0..=1));
            request.churn_budget_permille = Some(self.rng.gen_range(0..=1000));
            request.imbalance_permille = Some(self.rng.gen_range(0..=1000));
        }
        self.operate(0, Authority::Operator, Request::AlterGroupConfig(request));
    }

    /// The operator (or a member, for itself) drains or undrains members, by id or by
    /// label, or changes a group's settings.
    fn operator(&mut self) {
        let g = self.rng.gen_range(0..self.groups.len());
        let group = self.groups[g].name.clone();
        let drain = |member_id: String, label: String, drained: bool| {
            Request::Drain(DrainRequest {
                group: group.clone(),
                member_id,
                label,
                drained,
            })
        };
        let member_of = |w: &Self, p: usize| w.procs[p].m.member_id().map(str::to_owned);
        match self.rng.gen_range(0..10) {
            0..=1 => {
                let Some(p) = self.pick(|w, p| w.procs[p].group == g && w.procs[p].is_active())
                else {
                    return;
                };
                let Some(id) = member_of(self, p) else { return };
                self.log(format!("operator drains process {p} ({id})"));
                self.operate(0, Authority::Operator, drain(id, String::new(), true));
            }
            2 => {
                // A member drains itself on its own connection (a graceful scale-in).
                let Some(p) = self.pick(|w, p| {
                    w.procs[p].group == g && w.procs[p].is_active() && w.procs[p].conn.is_some()
                }) else {
                    return;
                };
                let (Some(id), Some(conn)) = (member_of(self, p), self.procs[p].conn) else {
                    return;
                };
                self.log(format!("process {p} ({id}) drains itself"));
                self.operate(conn, Authority::Member, drain(id, String::new(), true));
            }
            3..=4 => {
                let drained: Vec<String> = self
                    .oracle
                    .op
                    .drained
                    .get(&group)
                    .map(|d| d.keys().cloned().collect())
                    .unwrap_or_default();
                if drained.is_empty() {
                    return;
                }
                let id = drained[self.rng.gen_range(0..drained.len())].clone();
                self.log(format!("operator undrains {id}"));
                self.operate(0, Authority::Operator, drain(id, String::new(), false));
            }
            5 => {
                let label = format!("h{}", self.rng.gen_range(0..LABELS));
                self.log(format!("operator drains label {label} of {group}"));
                self.operate(0, Authority::Operator, drain(String::new(), label, true));
            }
            6 => {
                let label = format!("h{}", self.rng.gen_range(0..LABELS));
                self.log(format!("operator undrains label {label} of {group}"));
                self.operate(0, Authority::Operator, drain(String::new(), label, false));
            }
            _ => self.alter_config(g),
        }
    }

    /// At the start of the quiet tail, the operator undrains everything in some runs
    /// (in the others, drained members stay drained through the tail).
    pub(super) fn undrain_all(&mut self) {
        for g in 0..self.groups.len() {
            let group = self.groups[g].name.clone();
            let labels: Vec<String> = self
                .oracle
                .op
                .drained_labels
                .get(&group)
                .map(|l| l.iter().cloned().collect())
                .unwrap_or_default();
            for label in labels {
                let request = Request::Drain(DrainRequest {
                    group: group.clone(),
                    member_id: String::new(),
                    label,
                    drained: false,
                });
                self.operate(0, Authority::Operator, request);
            }
            let members: Vec<String> = self
                .oracle
                .op
                .drained
                .get(&group)
                .map(|d| d.keys().cloned().collect())
                .unwrap_or_default();
            for member_id in members {
                let request = Request::Drain(DrainRequest {
                    group: group.clone(),
                    member_id,
                    label: String::new(),
                    drained: false,
                });
                self.operate(0, Authority::Operator, request);
            }
        }
    }
}
