//! An administrative connection: lists and describes groups while a scenario runs, to
//! see the coordinator's own view beside what the members saw.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rollcall_protocol::{
    supported_versions, ApiVersionsRequest, Body, Codec, Frame, GroupListing, GroupState, Request,
    Response,
};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(crate) struct Admin {
    framed: Framed<TcpStream, Codec>,
    next: u32,
}

impl Admin {
    pub(crate) async fn connect(addr: SocketAddr) -> Result<Self, String> {
        let stream = tokio::time::timeout(ANSWER_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| "admin connect timed out".to_owned())?
            .map_err(|e| format!("admin connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut admin = Self {
            framed: Framed::new(stream, Codec::default()),
            next: 1,
        };
        let hello = Request::ApiVersions(ApiVersionsRequest {
            client_software: "rollcall-bench-admin".to_owned(),
            versions: supported_versions(),
        });
        match admin.request(hello).await? {
            Response::ApiVersions(_) => Ok(admin),
            other => Err(format!("admin handshake refused: {other:?}")),
        }
    }

    pub(crate) async fn request(&mut self, request: Request) -> Result<Response, String> {
        let id = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        let exchange = async {
            self.framed
                .send(Frame::request(id, request))
                .await
                .map_err(|e| format!("admin send: {e}"))?;
            loop {
                match self.framed.next().await {
                    None => return Err("admin connection closed".to_owned()),
                    Some(Err(e)) => return Err(format!("admin read: {e}")),
                    Some(Ok(Frame {
                        correlation_id,
                        body: Body::Response(r),
                    })) if correlation_id == id => return Ok(r),
                    Some(Ok(_)) => {}
                }
            }
        };
        tokio::time::timeout(ANSWER_TIMEOUT, exchange)
            .await
            .map_err(|_| "no admin answer within 10 s".to_owned())?
    }

    pub(crate) async fn list_groups(&mut self) -> Result<Vec<GroupListing>, String> {
        match self.request(Request::ListGroups).await? {
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
    addr: SocketAddr,
    interval: Duration,
    limit: Duration,
    stop: CancellationToken,
) -> mpsc::UnboundedReceiver<Snapshot> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let Ok(mut admin) = Admin::connect(addr).await else {
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
