//! The failover scenario's members: real client-crate members (which find each group's
//! coordinator and follow it when it moves), many per `Client`, each taking its events
//! at once and counting what matters here: `Lost` events, revocations and assignments
//! after the groups settled.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollcall_client::raw::Connection;
use rollcall_client::{Client, ClientConfig, Event, Member, MemberConfig};
use rollcall_protocol::{FindCoordinatorRequest, Request, Response};
use tokio::task::JoinHandle;

use crate::common::group_name;

/// What the members were told that a failover must not cause.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) lost: AtomicU64,
    /// Revocations after [`Fleet::mark_settled`].
    pub(crate) revocations: AtomicU64,
    /// Assignments after [`Fleet::mark_settled`].
    pub(crate) assignments: AtomicU64,
    pub(crate) fatal: AtomicU64,
    settled: AtomicBool,
}

/// How the members are laid out and what they ask for.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) groups: usize,
    pub(crate) per_group: usize,
    pub(crate) partitions: u32,
    pub(crate) per_client: usize,
    pub(crate) session: Duration,
    pub(crate) lease: Duration,
    pub(crate) heartbeat: Duration,
}

/// Every member, and the clients they share.
pub(crate) struct Fleet {
    pub(crate) members: Vec<Arc<Member>>,
    /// Each member's group index.
    pub(crate) group_of: Vec<usize>,
    pub(crate) tally: Arc<Tally>,
    pub(crate) clients: usize,
    /// A member's lease, less its margin: how far past the send time of a heartbeat
    /// its acknowledgement moves the lease deadline.
    renewal: Duration,
    tasks: Vec<JoinHandle<()>>,
    _clients: Vec<Client>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

/// The clients' reconnection backoff, as the report states it: part of what a member
/// waits after its coordinator died.
pub(crate) const RECONNECT: &str = "exponential from 50 ms, at most 500 ms, full jitter";

fn client_config() -> ClientConfig {
    let mut config = ClientConfig::default();
    config.client_software = "rollcall-bench-failover".into();
    config.reconnect_base = Duration::from_millis(50);
    config.reconnect_max = Duration::from_millis(500);
    config.connect_timeout = Duration::from_secs(5);
    config
}

impl Fleet {
    /// Connects the clients (each bootstrapped from every coordinator) and joins every
    /// member; member `i` joins group `i % groups` on client `i / per_client`, so one
    /// client's members live on every coordinator.
    pub(crate) async fn join(
        bootstrap: &[SocketAddr],
        layout: &Layout,
        progress: bool,
    ) -> Result<Self, String> {
        let members = layout.groups * layout.per_group;
        let clients = members.div_ceil(layout.per_client);
        let mut all = Vec::with_capacity(clients);
        for c in 0..clients {
            // Each client starts from another coordinator, knowing them all.
            let first = bootstrap[c % bootstrap.len()];
            let mut config = client_config();
            config.bootstrap = bootstrap.iter().map(ToString::to_string).collect();
            let client = Client::connect(first, config)
                .await
                .map_err(|e| format!("client connect: {e}"))?;
            all.push(client);
        }
        let template = MemberConfig::new(group_name(0), [("t", layout.partitions)])
            .with_session_timeout(layout.session)
            .with_lease_timeout(layout.lease)
            .with_heartbeat_interval(layout.heartbeat)
            .with_rebalance_timeout(layout.session);
        template.validate().map_err(|e| e.to_string())?;
        let renewal = template.effective_lease_timeout() - template.effective_lease_margin();
        // Each client joins its members one after another; the clients at once.
        let joined = Arc::new(AtomicU64::new(0));
        let mut joins = Vec::with_capacity(clients);
        for (c, client) in all.iter().enumerate() {
            let client = client.clone();
            let template = template.clone();
            let joined = joined.clone();
            let range = c * layout.per_client..((c + 1) * layout.per_client).min(members);
            let groups = layout.groups;
            joins.push(tokio::spawn(async move {
                let mut out = Vec::with_capacity(range.len());
                for i in range {
                    let mut config = template.clone();
                    config.group = group_name(i % groups);
                    let member = client
                        .join(config)
                        .await
                        .map_err(|e| format!("member {i} join: {e}"))?;
                    joined.fetch_add(1, Ordering::Relaxed);
                    out.push(member);
                }
                Ok::<_, String>(out)
            }));
        }
        let reporter = progress.then(|| {
            let joined = joined.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    eprintln!(
                        "[failover] joining: {}/{members}",
                        joined.load(Ordering::Relaxed)
                    );
                }
            })
        });
        let mut list = Vec::with_capacity(members);
        for join in joins {
            let part = join.await.map_err(|e| e.to_string())??;
            list.extend(part.into_iter().map(Arc::new));
        }
        if let Some(r) = reporter {
            r.abort();
        }
        let tally = Arc::new(Tally::default());
        let tasks = list
            .iter()
            .map(|member| tokio::spawn(follow(member.clone(), tally.clone())))
            .collect();
        Ok(Self {
            group_of: (0..members).map(|i| i % layout.groups).collect(),
            members: list,
            tally,
            clients,
            renewal,
            tasks,
            _clients: all,
        })
    }

    /// From now on, assignments count as moves.
    pub(crate) fn mark_settled(&self) {
        self.tally.settled.store(true, Ordering::SeqCst);
    }

    /// Whether every group's partitions are each held by one of its members, evenly,
    /// nothing being revoked and no member suspended.
    pub(crate) fn settled(&self, partitions: u32) -> bool {
        let mut held: BTreeMap<usize, (usize, usize, usize)> = BTreeMap::new();
        for (member, group) in self.members.iter().zip(&self.group_of) {
            let a = member.assignment();
            if member.is_suspended() || !a.revoking.is_empty() || a.generation == 0 {
                return false;
            }
            let n = a.partitions.len();
            let e = held.entry(*group).or_insert((0, usize::MAX, 0));
            *e = (e.0 + n, e.1.min(n), e.2.max(n));
        }
        held.values()
            .all(|(total, lo, hi)| *total == partitions as usize && hi - lo <= 1)
    }

    /// Whether member `i` had a heartbeat sent after `since` acknowledged, and is not
    /// suspended.
    pub(crate) fn answered_since(&self, i: usize, since: Instant) -> bool {
        let m = &self.members[i];
        !m.is_suspended() && m.lease_deadline().is_some_and(|d| d > since + self.renewal)
    }

    /// Each group's generation: the highest its members know.
    pub(crate) fn generations(&self) -> Vec<u32> {
        let mut out = vec![0; self.group_of.iter().max().map_or(0, |g| g + 1)];
        for (member, group) in self.members.iter().zip(&self.group_of) {
            out[*group] = out[*group].max(member.assignment().generation);
        }
        out
    }

    /// Members suspended now.
    pub(crate) fn suspended(&self) -> usize {
        self.members.iter().filter(|m| m.is_suspended()).count()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Takes `member`'s events as they come: releases at once what is asked back, and
/// counts what a failover must not cause.
async fn follow(member: Arc<Member>, tally: Arc<Tally>) {
    while let Some(event) = member.next_event().await {
        match event {
            Event::Lost { .. } => {
                tally.lost.fetch_add(1, Ordering::Relaxed);
            }
            Event::RevokeRequested { partitions, .. } => {
                if tally.settled.load(Ordering::SeqCst) {
                    tally.revocations.fetch_add(1, Ordering::Relaxed);
                }
                let _ = member.ack_revocation(partitions);
            }
            Event::Assigned { .. } if tally.settled.load(Ordering::SeqCst) => {
                tally.assignments.fetch_add(1, Ordering::Relaxed);
            }
            Event::Fatal(_) => {
                tally.fatal.fetch_add(1, Ordering::Relaxed);
                return;
            }
            _ => {}
        }
    }
}

/// Which coordinator serves each of `groups` groups, as the coordinator at `ask`
/// answers FindCoordinator; `None` for a group it answers with an error.
pub(crate) async fn placement(
    ask: SocketAddr,
    groups: usize,
) -> Result<Vec<Option<SocketAddr>>, String> {
    let mut conn = Connection::connect(ask, "rollcall-bench-failover", Duration::from_secs(5))
        .await
        .map_err(|e| format!("find coordinator: {e}"))?;
    let mut out = Vec::with_capacity(groups);
    for g in 0..groups {
        let request = Request::FindCoordinator(FindCoordinatorRequest {
            group: group_name(g),
        });
        let answer = conn
            .request(request)
            .await
            .map_err(|e| format!("find coordinator: {e}"))?;
        out.push(match answer {
            Response::FindCoordinator(found) => found.addr.parse().ok(),
            _ => None,
        });
    }
    Ok(out)
}
