//! A real etcd and `rollcall serve --etcd` processes for the cluster tests (feature
//! `cluster`); their members are a [`Fleet`](crate::fleet::Fleet).
//!
//! etcd comes from the coordinator's own test harness
//! (`rollcall_coordinator::cluster::testing::EtcdCluster`, one member or several):
//! loopback ports, a data directory per member, killed on drop, and a loud `SKIPPED`
//! when no `etcd` binary is installed (a failure with `ROLLCALL_REQUIRE_ETCD=1`).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rollcall_client::Event;
pub use rollcall_coordinator::cluster::testing::{EtcdCluster, EtcdProcess};
use rollcall_protocol::{Body, Codec, FindCoordinatorRequest, Frame, Request, Response};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use crate::fleet::{check, missing_commits, Fleet, Record, Verdict};
use crate::{ServeProcess, TempDir, SERVE_STARTING};

/// One cluster test at a time in a test binary (each owns etcd and a cluster of
/// processes, and their timings are part of what it checks).
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs `test`, failing if it takes longer than `limit`.
pub async fn within<F: Future>(limit: Duration, test: F) -> F::Output {
    match tokio::time::timeout(limit, test).await {
        Ok(out) => out,
        Err(_) => panic!("the test took longer than {limit:?}"),
    }
}

/// The oracle's verdict on everything `fleet` recorded since `settled_at`, after its
/// commits stopped; fails the test on any violation, lost partition, rebalance,
/// generation other than `generations`, or missing commit.
pub async fn assert_safe(fleet: &Fleet, settled_at: Instant, generations: &[u32]) -> Verdict {
    fleet.stop_committing().await;
    let verdict = check(&fleet.records(), &fleet.groups, settled_at, Instant::now());
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    assert!(
        verdict.lost.is_empty(),
        "members saw Lost: {:#?}",
        verdict.lost
    );
    assert!(
        verdict.moves.is_empty(),
        "partitions moved: {:#?}",
        verdict.moves
    );
    assert_eq!(fleet.generations(), generations, "a generation changed");
    let committed = fleet.committed().await;
    let missing = missing_commits(&verdict, &committed);
    assert!(missing.is_empty(), "{missing:#?}");
    assert!(verdict.accepted > 0, "no commit was accepted");
    verdict
}

/// The events `fleet`'s members were told after `since`: (member, event), in order.
pub fn events_since(fleet: &Fleet, since: Instant) -> Vec<(usize, Event)> {
    fleet
        .records()
        .into_iter()
        .filter_map(|r| match r {
            Record::Event { at, member, event } if at > since => Some((member, event)),
            _ => None,
        })
        .collect()
}

/// One `rollcall serve --etcd` process of a [`Cluster`].
#[derive(Debug)]
pub struct Coordinator {
    /// Its cluster id (`--cluster-id`).
    pub id: String,
    /// The process.
    pub process: ServeProcess,
    /// False once killed or terminated (until restarted).
    pub alive: bool,
    _dir: TempDir,
}

/// A real etcd and the coordinators of one cluster on it.
#[derive(Debug)]
pub struct Cluster {
    /// The etcd members every coordinator uses (unless told another endpoint).
    pub etcd: EtcdCluster,
    /// The cluster's name, unique to the test.
    pub name: String,
    /// Its coordinators, in the order they were added.
    pub coordinators: Vec<Coordinator>,
    bin: String,
    lease_ttl: String,
    slots: u32,
    exits: Vec<(usize, std::process::ExitStatus)>,
}

impl Cluster {
    /// An etcd for `test`, and no coordinator yet; `None` (after a loud `SKIPPED`) when
    /// etcd is not installed. Coordinators run `bin` with an etcd lease of
    /// `lease_ttl` (such as `2s`) and a cluster of `slots` slots.
    pub fn start(test: &str, bin: &str, lease_ttl: &str, slots: u32) -> Option<Self> {
        Self::start_on(test, bin, lease_ttl, slots, 1)
    }

    /// As [`Self::start`], on an etcd of `etcd_members` members.
    pub fn start_on(
        test: &str,
        bin: &str,
        lease_ttl: &str,
        slots: u32,
        etcd_members: usize,
    ) -> Option<Self> {
        let etcd = EtcdCluster::start(test, etcd_members)?;
        Some(Self {
            etcd,
            name: format!("{test}-{:x}", rand::random::<u32>()),
            coordinators: Vec::new(),
            bin: bin.to_owned(),
            lease_ttl: lease_ttl.to_owned(),
            slots,
            exits: Vec::new(),
        })
    }

    /// Every etcd member's endpoint, as `--etcd` takes them (comma-separated).
    pub fn endpoint(&self) -> String {
        self.etcd.endpoints().join(",")
    }

    /// Starts a coordinator that reaches etcd at `etcd` (default: [`Self::endpoint`]),
    /// waits until it serves, and returns its index.
    pub async fn add(&mut self, etcd: Option<String>) -> usize {
        let index = self.coordinators.len();
        let id = format!("c{index}");
        let dir = TempDir::new(&format!("cluster-{id}"));
        let etcd = etcd.unwrap_or_else(|| self.endpoint());
        let slots = self.slots.to_string();
        let args = [
            "--shards",
            "2",
            "--etcd",
            &etcd,
            "--cluster",
            &self.name,
            "--cluster-id",
            &id,
            "--cluster-slots",
            &slots,
            "--etcd-lease-ttl",
            &self.lease_ttl,
        ];
        let process = ServeProcess::start(&self.bin, dir.path(), &args).await;
        self.coordinators.push(Coordinator {
            id,
            process,
            alive: true,
            _dir: dir,
        });
        index
    }

    /// The addresses of the coordinators alive.
    pub fn alive(&self) -> Vec<SocketAddr> {
        self.coordinators
            .iter()
            .filter(|c| c.alive)
            .map(|c| c.process.addr())
            .collect()
    }

    /// The index of the coordinator listening on `addr`.
    pub fn index_of(&self, addr: SocketAddr) -> Option<usize> {
        self.coordinators
            .iter()
            .position(|c| c.process.addr() == addr)
    }

    /// Kills coordinator `i` (SIGKILL).
    pub async fn kill(&mut self, i: usize) {
        self.coordinators[i].process.kill().await;
        self.coordinators[i].alive = false;
    }

    /// Stops coordinator `i` gracefully (SIGTERM: it hands its slots off first) and
    /// returns how it exited.
    pub async fn terminate(&mut self, i: usize) -> std::process::ExitStatus {
        let status = self.coordinators[i].process.terminate().await;
        self.coordinators[i].alive = false;
        status
    }

    /// Coordinators that exited by themselves, with how (each reported once).
    pub fn exited(&mut self) -> Vec<(usize, std::process::ExitStatus)> {
        self.note_exits();
        std::mem::take(&mut self.exits)
    }

    /// Marks the coordinators that exited by themselves as not alive, and keeps how
    /// they exited for [`Self::exited`].
    fn note_exits(&mut self) {
        for (i, c) in self.coordinators.iter_mut().enumerate() {
            if c.alive {
                if let Some(status) = c.process.exited() {
                    eprintln!("c{i} exited by itself ({status})");
                    c.alive = false;
                    self.exits.push((i, status));
                }
            }
        }
    }

    /// The slots coordinator `i` acts for, as its log tells: slots adopted, less
    /// those handed back, none after it stopped acting for every slot.
    pub fn owned_slots(&self, i: usize) -> BTreeSet<u32> {
        self.owned_slots_at(i, "~").into_keys().collect()
    }

    /// The slots coordinator `i` acted for just before the log timestamp `until`
    /// (exclusive), each with the timestamp of its adoption.
    pub fn owned_slots_at(&self, i: usize, until: &str) -> BTreeMap<u32, String> {
        let mut owned = BTreeMap::new();
        for line in self.log(i, &[ADOPTED, HANDED_BACK, ABANDONED, SERVE_STARTING]) {
            if line == SERVE_STARTING {
                // A new process: the last one acted for nothing once it was gone.
                owned.clear();
                continue;
            }
            if timestamp(&line) >= until {
                break;
            }
            if line.contains(ABANDONED) {
                owned.clear();
            } else if let Some(slot) = field(&line, "slot") {
                if line.contains(ADOPTED) {
                    owned.insert(slot, timestamp(&line).to_owned());
                } else {
                    owned.remove(&slot);
                }
            }
        }
        owned
    }

    /// Waits (at most `within`) until the coordinators alive act for every slot between
    /// them, evenly (within one slot); returns each one's count.
    pub async fn wait_balanced(&mut self, within: Duration) -> Vec<usize> {
        let deadline = Instant::now() + within;
        loop {
            self.note_exits();
            let counts: Vec<usize> = (0..self.coordinators.len())
                .filter(|i| self.coordinators[*i].alive)
                .map(|i| self.owned_slots(i).len())
                .collect();
            let total: usize = counts.iter().sum();
            let (lo, hi) = (counts.iter().min(), counts.iter().max());
            if total == self.slots as usize && lo.zip(hi).is_some_and(|(l, h)| h - l <= 1) {
                return counts;
            }
            assert!(
                Instant::now() < deadline,
                "slots not balanced within {within:?}: {counts:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts coordinator `i` again on its port, with its options.
    pub async fn restart(&mut self, i: usize) {
        self.coordinators[i].process.restart().await;
        self.coordinators[i].alive = true;
    }

    /// Which coordinator serves `group`, as the coordinator at `ask` answers
    /// FindCoordinator; `None` when it answers an error or cannot be reached.
    pub async fn find_on(ask: SocketAddr, group: &str) -> Option<SocketAddr> {
        let exchange = async {
            let stream = TcpStream::connect(ask).await.ok()?;
            let mut framed = Framed::new(stream, Codec::default());
            rollcall_client::raw::handshake(&mut framed, 1, "cluster-test")
                .await
                .ok()?;
            let request = Request::FindCoordinator(FindCoordinatorRequest {
                group: group.to_owned(),
            });
            framed.send(Frame::request(2, request)).await.ok()?;
            while let Some(Ok(frame)) = framed.next().await {
                if frame.correlation_id != 2 {
                    continue;
                }
                return match frame.body {
                    Body::Response(Response::FindCoordinator(found)) => found.addr.parse().ok(),
                    _ => None,
                };
            }
            None
        };
        tokio::time::timeout(Duration::from_secs(3), exchange)
            .await
            .ok()
            .flatten()
    }

    /// Where each of `groups` is served, as every live coordinator agrees; `None` for a
    /// group they do not all place on one live coordinator.
    pub async fn placement(&self, groups: &[String]) -> BTreeMap<String, Option<SocketAddr>> {
        let alive = self.alive();
        let mut out = BTreeMap::new();
        for group in groups {
            let mut answers = BTreeSet::new();
            for ask in &alive {
                answers.insert(Self::find_on(*ask, group).await);
            }
            let agreed = match answers.into_iter().collect::<Vec<_>>().as_slice() {
                [Some(addr)] if alive.contains(addr) => Some(*addr),
                _ => None,
            };
            out.insert(group.clone(), agreed);
        }
        out
    }

    /// Waits (at most `within`) until every group of `groups` is served by a live
    /// coordinator that every live one names; returns the placement.
    pub async fn wait_placed(
        &mut self,
        groups: &[String],
        within: Duration,
    ) -> BTreeMap<String, SocketAddr> {
        let deadline = Instant::now() + within;
        loop {
            self.note_exits();
            let placement = self.placement(groups).await;
            if placement.values().all(Option::is_some) {
                return placement
                    .into_iter()
                    .map(|(g, a)| (g, a.expect("placed")))
                    .collect();
            }
            assert!(
                Instant::now() < deadline,
                "groups not placed within {within:?}: {placement:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (at most `within`) until every coordinator in `which` has logged that it
    /// stopped acting for every slot more than `before` times; returns how long each
    /// took from the call, by index, as seen by polling their logs every 20 ms.
    pub async fn wait_abandoned(
        &self,
        which: &[usize],
        before: &[usize],
        within: Duration,
    ) -> BTreeMap<usize, Duration> {
        let start = Instant::now();
        let mut took = BTreeMap::new();
        loop {
            for (&i, &n) in which.iter().zip(before) {
                if !took.contains_key(&i) && self.log(i, &[ABANDONED]).len() > n {
                    took.insert(i, start.elapsed());
                }
            }
            if took.len() == which.len() {
                return took;
            }
            assert!(
                start.elapsed() < within,
                "coordinators still acting {within:?} after etcd went away: {:?} of {which:?} stopped",
                took.keys()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Coordinator `i`'s log lines that contain any of `patterns`.
    pub fn log(&self, i: usize, patterns: &[&str]) -> Vec<String> {
        self.coordinators[i].process.log_lines(patterns)
    }
}

/// What a coordinator logs when it has loaded a slot and serves it.
pub const ADOPTED: &str = "slot adopted";
/// What it logs when it has handed a slot back.
pub const HANDED_BACK: &str = "slot handed back";
/// What it logs when it stops acting for every slot (its etcd lease not renewed in time).
pub const ABANDONED: &str = "stopped acting for every slot";

/// The number in field `name=` of a log line.
pub fn field(line: &str, name: &str) -> Option<u32> {
    let rest = line.split(&format!(" {name}=")).nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The timestamp that starts a log line (RFC 3339, UTC, fixed width: comparable as
/// text, across processes of one machine).
pub fn timestamp(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or_default()
}
