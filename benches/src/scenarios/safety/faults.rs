//! The safety run's faults: which ones, in what order, and on whom.

use serde::Serialize;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Fault {
    /// A coordinator killed with SIGKILL, restarted once its groups are served
    /// elsewhere.
    Kill,
    /// A coordinator's etcd traffic swallowed (its clients still reach it) until its
    /// etcd lease has expired and other coordinators serve its groups, then let through
    /// again.
    Cut,
    /// The etcd leader killed with SIGKILL, restarted on its data once the cluster
    /// serves again.
    LeaderKill,
}

impl Fault {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Kill => "kill",
            Self::Cut => "cut",
            Self::LeaderKill => "etcd leader kill",
        }
    }
}

/// `kills` kills, `cuts` cuts and `leader_kills` leader kills, interleaved: each
/// kind spread evenly over the run (the `i`-th of `n` at `(i + ½) / n` of it), ties
/// in that order. Deterministic.
pub(crate) fn schedule(kills: usize, cuts: usize, leader_kills: usize) -> Vec<Fault> {
    let mut placed: Vec<(f64, usize, Fault)> = Vec::new();
    for (rank, (fault, count)) in [
        (Fault::Kill, kills),
        (Fault::Cut, cuts),
        (Fault::LeaderKill, leader_kills),
    ]
    .into_iter()
    .enumerate()
    {
        for i in 0..count {
            placed.push(((i as f64 + 0.5) / count as f64, rank, fault));
        }
    }
    placed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    placed.into_iter().map(|(_, _, f)| f).collect()
}

/// The coordinator (by index, of `coordinators`) the `nth` fault of its kind hits:
/// kills and cuts each go round the coordinators, cuts one further on so that the
/// two do not always hit the same one.
pub(crate) fn victim(fault: Fault, nth: usize, coordinators: usize) -> usize {
    let shift = usize::from(fault == Fault::Cut);
    (nth + shift) % coordinators.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_has_every_fault_asked_for_spread_over_the_run() {
        let s = schedule(50, 20, 5);
        assert_eq!(s.len(), 75);
        let count = |f| s.iter().filter(|x| **x == f).count();
        assert_eq!(count(Fault::Kill), 50);
        assert_eq!(count(Fault::Cut), 20);
        assert_eq!(count(Fault::LeaderKill), 5);
        // Every fifth of the run has one leader kill and four cuts.
        for fifth in s.chunks(15) {
            let leader = fifth.iter().filter(|x| **x == Fault::LeaderKill).count();
            let cuts = fifth.iter().filter(|x| **x == Fault::Cut).count();
            assert_eq!((leader, cuts), (1, 4), "{s:?}");
        }
        assert_eq!(schedule(0, 0, 0), Vec::new());
        assert_eq!(
            schedule(1, 1, 1),
            vec![Fault::Kill, Fault::Cut, Fault::LeaderKill]
        );
    }

    #[test]
    fn kills_and_cuts_go_round_the_coordinators() {
        let kills: Vec<usize> = (0..4).map(|n| victim(Fault::Kill, n, 3)).collect();
        let cuts: Vec<usize> = (0..4).map(|n| victim(Fault::Cut, n, 3)).collect();
        assert_eq!(kills, [0, 1, 2, 0]);
        assert_eq!(cuts, [1, 2, 0, 1]);
    }
}
