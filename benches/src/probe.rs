//! An administrative connection: lists and describes groups while a scenario runs, to
//! see the coordinator's own view beside what the members saw.

use std::time::{Duration, Instant};

use rollcall_client::raw::Connection;
use rollcall_protocol::{GroupListing, GroupState, Request, Response};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::target::Endpoint;

const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(crate) struct Admin {
    conn: Connection,
}

impl Admin {
    pub(crate) async fn connect(endpoint: &Endpoint) -> Result<Self, String> {
        let options = endpoint.options("rollcall-bench-admin", ANSWER_TIMEOUT);
        let conn = Connection::connect_with(&endpoint.addr.to_string(), &options)
            .await
            .map_err(|e| format!("admin connect: {e}"))?;
        Ok(Self { conn })
    }

    pub(crate) async fn request(&mut self, request: Request) -> Result<Response, String> {
        self.conn
            .request(request)
            .await
            .map_err(|e| format!("admin request: {e}"))
    }

    pub(crate) async fn list_groups(&mut self) -> Result<Vec<GroupListing>, String> {
        match self
            .request(Request::ListGroups(Default::default()))
            .await?
        {
            Response::ListGroups(r) => Ok(r.groups),
            other => Err(format!("unexpected list answer {other:?}")),
        }
    }
}

/// One observed change of the group list.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub(crate) at: Instant,
    pub(crate) groups: Vec<GroupListing>,
}

impl Snapshot {
    /// Total members over every group.
    pub(crate) fn members(&self) -> u64 {
        self.groups.iter().map(|g| u64::from(g.members)).sum()
    }

    /// Every group stable (or at least `expected` groups, all stable).
    pub(crate) fn all_stable(&self, expected: usize) -> bool {
        self.groups.len() >= expected && self.groups.iter().all(|g| g.state == GroupState::Stable)
    }

    pub(crate) fn generation(&self, group: &str) -> Option<u32> {
        self.groups
            .iter()
            .find(|g| g.group == group)
            .map(|g| g.generation)
    }
}

/// Polls the group list every `interval` until `stop`, sending each snapshot that
/// differs from the last. Bounded by `limit` in any case.
pub(crate) fn spawn_poller(
    endpoint: Endpoint,
    interval: Duration,
    limit: Duration,
    stop: CancellationToken,
) -> mpsc::UnboundedReceiver<Snapshot> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let Ok(mut admin) = Admin::connect(&endpoint).await else {
            return;
        };
        let deadline = Instant::now() + limit;
        let mut last: Option<Vec<GroupListing>> = None;
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while Instant::now() < deadline {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = ticks.tick() => {}
            }
            let Ok(groups) = admin.list_groups().await else {
                break;
            };
            let at = Instant::now();
            if last.as_ref() != Some(&groups) {
                last = Some(groups.clone());
                if tx.send(Snapshot { at, groups }).is_err() {
                    break;
                }
            }
        }
    });
    rx
}
