//! Who owns what, as the members saw it: every partition's owner count from the
//! members' assignment pushes, when partitions were without an owner, and whether a
//! group has settled (every partition owned exactly once, balanced, nothing being
//! revoked).

use std::time::Instant;

use crate::driver::Obs;

/// A partition that had no owner between `since` and `granted`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gap {
    pub(crate) group: usize,
    pub(crate) partition: u32,
    pub(crate) since: Instant,
    pub(crate) granted: Instant,
}

#[derive(Debug)]
pub(crate) struct Tracker {
    member_group: Vec<usize>,
    group_members: Vec<Vec<usize>>,
    pub(crate) owned: Vec<Vec<u32>>,
    pub(crate) live: Vec<bool>,
    pub(crate) joined: Vec<bool>,
    pub(crate) assigned_once: Vec<bool>,
    awaiting: Vec<bool>,
    awaiting_count: Vec<usize>,
    pub(crate) member_generation: Vec<u32>,
    pub(crate) group_generation: Vec<u32>,
    counts: Vec<Vec<u16>>,
    unowned: Vec<usize>,
    doubled: Vec<usize>,
    unowned_since: Vec<Vec<Option<Instant>>>,
    pub(crate) gaps: Vec<Gap>,
    pub(crate) revocations: u64,
    pub(crate) last_joined: Option<Instant>,
    pub(crate) expelled: Vec<(usize, Instant, rollcall_protocol::ExpelReason)>,
    pub(crate) join_failures: Vec<(usize, rollcall_protocol::ErrorCode, String)>,
    pub(crate) heartbeat_errors: Vec<(usize, Instant, rollcall_protocol::ErrorCode)>,
}

impl Tracker {
    /// Applies observations as they arrive until `until`, or sooner once `done` holds.
    pub(crate) async fn absorb(
        &mut self,
        observations: &mut tokio::sync::mpsc::UnboundedReceiver<Obs>,
        until: Instant,
        done: impl FnMut(&Self) -> bool,
    ) {
        self.absorb_watching(observations, until, |_, _| {}, done)
            .await;
    }

    /// Like [`Self::absorb`], showing `watch` each observation before it is applied.
    pub(crate) async fn absorb_watching(
        &mut self,
        observations: &mut tokio::sync::mpsc::UnboundedReceiver<Obs>,
        until: Instant,
        mut watch: impl FnMut(&Self, &Obs),
        mut done: impl FnMut(&Self) -> bool,
    ) {
        let mut batch = Vec::with_capacity(256);
        while Instant::now() < until && !done(self) {
            tokio::select! {
                _ = observations.recv_many(&mut batch, 256) => {
                    for obs in batch.drain(..) {
                        watch(self, &obs);
                        self.apply(&obs);
                    }
                }
                () = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
            }
        }
    }

    /// Applies observations as they arrive for `d`.
    pub(crate) async fn absorb_for(
        &mut self,
        observations: &mut tokio::sync::mpsc::UnboundedReceiver<Obs>,
        d: std::time::Duration,
    ) {
        self.absorb(observations, Instant::now() + d, |_| false)
            .await;
    }

    /// Applies observations for two heartbeat intervals (and a little), so that every
    /// live member beating every `interval` has been heard once more.
    pub(crate) async fn absorb_beats(
        &mut self,
        observations: &mut tokio::sync::mpsc::UnboundedReceiver<Obs>,
        interval: std::time::Duration,
    ) {
        self.absorb_for(
            observations,
            interval * 2 + std::time::Duration::from_millis(50),
        )
        .await;
    }

    pub(crate) fn new(members: usize, groups: usize, partitions: u32) -> Self {
        let member_group: Vec<usize> = (0..members).map(|i| i % groups).collect();
        let mut group_members = vec![Vec::new(); groups];
        for (m, g) in member_group.iter().enumerate() {
            group_members[*g].push(m);
        }
        let p = partitions as usize;
        Self {
            member_group,
            group_members,
            owned: vec![Vec::new(); members],
            live: vec![true; members],
            joined: vec![false; members],
            assigned_once: vec![false; members],
            awaiting: vec![false; members],
            awaiting_count: vec![0; groups],
            member_generation: vec![0; members],
            group_generation: vec![0; groups],
            counts: vec![vec![0; p]; groups],
            unowned: vec![p; groups],
            doubled: vec![0; groups],
            unowned_since: vec![vec![None; p]; groups],
            gaps: Vec::new(),
            revocations: 0,
            last_joined: None,
            expelled: Vec::new(),
            join_failures: Vec::new(),
            heartbeat_errors: Vec::new(),
        }
    }

    pub(crate) fn group_of(&self, member: usize) -> usize {
        self.member_group[member]
    }

    pub(crate) fn groups(&self) -> usize {
        self.group_members.len()
    }

    fn add(&mut self, g: usize, p: u32, at: Instant) {
        let Some(count) = self.counts[g].get_mut(p as usize) else {
            return;
        };
        *count += 1;
        match *count {
            1 => {
                self.unowned[g] -= 1;
                if let Some(since) = self.unowned_since[g][p as usize].take() {
                    self.gaps.push(Gap {
                        group: g,
                        partition: p,
                        since,
                        granted: at,
                    });
                }
            }
            2 => self.doubled[g] += 1,
            _ => {}
        }
    }

    fn remove(&mut self, g: usize, p: u32, at: Instant) {
        let Some(count) = self.counts[g].get_mut(p as usize) else {
            return;
        };
        if *count == 0 {
            return;
        }
        *count -= 1;
        match *count {
            0 => {
                self.unowned[g] += 1;
                self.unowned_since[g][p as usize] = Some(at);
            }
            1 => self.doubled[g] -= 1,
            _ => {}
        }
    }

    /// Replaces a member's owned set (both sorted), updating the counts.
    fn set_owned(&mut self, m: usize, new: Vec<u32>, at: Instant) {
        let g = self.member_group[m];
        let old = std::mem::take(&mut self.owned[m]);
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            match (old.get(i), new.get(j)) {
                (Some(a), Some(b)) if a == b => {
                    i += 1;
                    j += 1;
                }
                (Some(a), Some(b)) if a < b => {
                    self.remove(g, *a, at);
                    i += 1;
                }
                (Some(a), None) => {
                    self.remove(g, *a, at);
                    i += 1;
                }
                (_, Some(b)) => {
                    self.add(g, *b, at);
                    j += 1;
                }
                (None, None) => break,
            }
        }
        self.owned[m] = new;
    }

    fn set_awaiting(&mut self, m: usize, value: bool) {
        if self.awaiting[m] != value {
            let g = self.member_group[m];
            self.awaiting[m] = value;
            if value {
                self.awaiting_count[g] += 1;
            } else {
                self.awaiting_count[g] -= 1;
            }
        }
    }

    /// Takes a member out (killed by the scenario, or expelled): its partitions have
    /// no owner from `at`.
    pub(crate) fn take_out(&mut self, m: usize, at: Instant) {
        if !self.live[m] {
            return;
        }
        self.live[m] = false;
        self.set_owned(m, Vec::new(), at);
        self.set_awaiting(m, false);
    }

    /// Applies an observation; returns the member's group.
    pub(crate) fn apply(&mut self, obs: &Obs) -> Option<usize> {
        match obs {
            Obs::Joined { member, at, .. } => {
                self.joined[*member] = true;
                self.last_joined = Some(self.last_joined.map_or(*at, |t| t.max(*at)));
                Some(self.member_group[*member])
            }
            Obs::JoinFailed {
                member,
                code,
                message,
            } => {
                self.join_failures.push((*member, *code, message.clone()));
                None
            }
            Obs::Assigned {
                member,
                at,
                generation,
                partitions,
            } => {
                let m = *member;
                if !self.live[m] {
                    return None;
                }
                self.assigned_once[m] = true;
                self.member_generation[m] = *generation;
                let g = self.member_group[m];
                self.group_generation[g] = self.group_generation[g].max(*generation);
                self.set_owned(m, partitions.clone(), *at);
                self.set_awaiting(m, false);
                Some(g)
            }
            Obs::Revoked {
                member,
                at,
                partitions,
                generation,
            } => {
                let m = *member;
                if !self.live[m] {
                    return None;
                }
                let g = self.member_group[m];
                self.group_generation[g] = self.group_generation[g].max(*generation);
                self.revocations += partitions.len() as u64;
                let keep: Vec<u32> = self.owned[m]
                    .iter()
                    .copied()
                    .filter(|p| partitions.binary_search(p).is_err())
                    .collect();
                self.set_owned(m, keep, *at);
                self.set_awaiting(m, true);
                Some(self.member_group[m])
            }
            Obs::Expelled {
                member, at, reason, ..
            } => {
                self.expelled.push((*member, *at, *reason));
                self.take_out(*member, *at);
                Some(self.member_group[*member])
            }
            Obs::HeartbeatError { member, at, code } => {
                self.heartbeat_errors.push((*member, *at, *code));
                None
            }
            Obs::Relinquished { .. } | Obs::Acked { .. } => None,
            Obs::Restarting { member } => {
                // The coordinator keeps a static member's partitions while it restarts;
                // its next assignment push tells whether any moved.
                self.joined[*member] = false;
                Some(self.member_group[*member])
            }
        }
    }

    pub(crate) fn is_owned(&self, g: usize, p: u32) -> bool {
        self.counts[g].get(p as usize).is_some_and(|c| *c > 0)
    }

    /// Every partition of `g` owned exactly once, nothing awaiting a revocation's
    /// confirmation, every live member joined and assigned, loads within one.
    pub(crate) fn settled(&self, g: usize) -> bool {
        if self.unowned[g] != 0 || self.doubled[g] != 0 || self.awaiting_count[g] != 0 {
            return false;
        }
        self.balanced_and_joined(g, 0)
    }

    /// Like [`Self::settled`] but allowing `orphans` unowned partitions (those of
    /// members killed and not yet replaced).
    pub(crate) fn settled_but(&self, g: usize, orphans: usize) -> bool {
        if self.unowned[g] != orphans || self.doubled[g] != 0 || self.awaiting_count[g] != 0 {
            return false;
        }
        orphans > 0 || self.balanced_and_joined(g, 0)
    }

    fn balanced_and_joined(&self, g: usize, _slack: usize) -> bool {
        let mut min = usize::MAX;
        let mut max = 0;
        for &m in &self.group_members[g] {
            if !self.live[m] {
                continue;
            }
            if !self.joined[m] || !self.assigned_once[m] {
                return false;
            }
            min = min.min(self.owned[m].len());
            max = max.max(self.owned[m].len());
        }
        min == usize::MAX || max - min <= 1
    }

    /// Every partition of `g` owned exactly once, nothing awaiting a revocation's
    /// confirmation, every live member joined and assigned; counts may differ (a
    /// weighted or rack-aware assignment).
    pub(crate) fn owned_once(&self, g: usize) -> bool {
        self.unowned[g] == 0
            && self.doubled[g] == 0
            && self.awaiting_count[g] == 0
            && self.group_members[g]
                .iter()
                .all(|&m| !self.live[m] || (self.joined[m] && self.assigned_once[m]))
    }

    pub(crate) fn all_settled(&self) -> bool {
        (0..self.groups()).all(|g| self.settled(g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn counts_owners_and_gaps() {
        let t0 = Instant::now();
        let mut t = Tracker::new(2, 1, 4);
        for m in 0..2 {
            t.apply(&Obs::Joined {
                member: m,
                at: t0,
                member_id: String::new(),
            });
        }
        t.apply(&Obs::Assigned {
            member: 0,
            at: t0,
            generation: 1,
            partitions: vec![0, 1, 2, 3],
        });
        assert!(!t.settled(0), "member 1 has nothing yet");
        let t1 = t0 + Duration::from_millis(5);
        t.apply(&Obs::Revoked {
            member: 0,
            at: t1,
            generation: 2,
            partitions: vec![2, 3],
        });
        assert_eq!(t.unowned[0], 2);
        let t2 = t0 + Duration::from_millis(7);
        t.apply(&Obs::Assigned {
            member: 0,
            at: t2,
            generation: 2,
            partitions: vec![0, 1],
        });
        t.apply(&Obs::Assigned {
            member: 1,
            at: t2,
            generation: 2,
            partitions: vec![2, 3],
        });
        assert!(t.settled(0));
        assert_eq!(t.gaps.len(), 2);
        assert_eq!(
            t.gaps[0].granted - t.gaps[0].since,
            Duration::from_millis(2)
        );
        t.take_out(1, t2);
        assert_eq!(t.unowned[0], 2);
        assert!(t.settled_but(0, 2));
    }
}
