//! The failover scenario's processes: an etcd cluster of one or three members and the
//! `rollcall serve --etcd` coordinators on it, all on loopback, every one stopped and
//! its data removed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::target::{sibling_binary, start_logged};

/// How long an etcd member or a coordinator has to come up.
const START_WITHIN: Duration = Duration::from_secs(60);

/// A directory of the run, removed when dropped.
#[derive(Debug)]
struct RunDir(PathBuf);

impl RunDir {
    fn new(tag: &str) -> Result<Self, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "rollcall-bench-{tag}-{}-{nanos:x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free loopback port (another process may take it before it is used: starts retry).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn stop(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// etcd members on loopback, one cluster.
#[derive(Debug)]
pub(crate) struct Etcd {
    bin: PathBuf,
    children: Vec<Option<Child>>,
    client_ports: Vec<u16>,
    peer_ports: Vec<u16>,
    dir: RunDir,
}

impl Etcd {
    /// Starts a cluster of `members` members of the `etcd` binary `bin`, with fsync on
    /// (etcd's default), and waits until every member reports itself healthy.
    pub(crate) async fn start(bin: &Path, members: usize) -> Result<Self, String> {
        let dir = RunDir::new("etcd")?;
        let client_ports = (0..members)
            .map(|_| free_port())
            .collect::<Result<Vec<_>, _>>()?;
        let peer_ports = (0..members)
            .map(|_| free_port())
            .collect::<Result<Vec<_>, _>>()?;
        let mut etcd = Self {
            bin: bin.to_owned(),
            children: Vec::new(),
            client_ports,
            peer_ports,
            dir,
        };
        for i in 0..members {
            let child = etcd.spawn(i)?;
            etcd.children.push(Some(child));
        }
        for i in 0..members {
            etcd.wait_healthy(i).await?;
        }
        Ok(etcd)
    }

    /// Starts member `i` on its data directory (a new one, or the one it had: etcd
    /// then ignores the initial cluster and rejoins with what it kept).
    fn spawn(&self, i: usize) -> Result<Child, String> {
        let initial: Vec<String> = self
            .peer_ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("e{i}=http://127.0.0.1:{p}"))
            .collect();
        let data = self.dir.0.join(format!("e{i}"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.0.join(format!("e{i}.log")))
            .map_err(|e| e.to_string())?;
        let client = format!("http://127.0.0.1:{}", self.client_ports[i]);
        let peer = format!("http://127.0.0.1:{}", self.peer_ports[i]);
        Command::new(&self.bin)
            .arg(format!("--name=e{i}"))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={}", initial.join(",")))
            .arg("--initial-cluster-state=new")
            .arg(format!(
                "--initial-cluster-token=bench-{}",
                std::process::id()
            ))
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run {}: {e} (install etcd-server)",
                    self.bin.display()
                )
            })
    }

    /// Waits until member `i` reports itself healthy (it has a leader).
    async fn wait_healthy(&mut self, i: usize) -> Result<(), String> {
        let deadline = Instant::now() + START_WITHIN;
        while !healthy(self.client_ports[i]).await {
            for child in self.children.iter_mut().flatten() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("an etcd member exited with {status}"));
                }
            }
            if Instant::now() > deadline {
                return Err(format!("etcd not healthy within {START_WITHIN:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Every member's client URL.
    pub(crate) fn endpoints(&self) -> Vec<String> {
        self.client_ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }

    /// Every member's client address.
    pub(crate) fn client_addrs(&self) -> Vec<SocketAddr> {
        self.client_ports
            .iter()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect()
    }

    /// The member (by index) that is the cluster's leader, as the running members
    /// report it; `None` while they do not agree on one.
    pub(crate) async fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for (i, port) in self.client_ports.iter().enumerate() {
            if self.children[i].is_none() {
                ids.push(None);
                continue;
            }
            let status = status(*port).await;
            ids.push(status.as_ref().map(|s| s.0.clone()));
            if let Some((_, leader)) = status {
                leaders.push(leader);
            }
        }
        let leader = leaders.first()?;
        if leaders.iter().any(|l| l != leader) {
            return None;
        }
        ids.iter().position(|id| id.as_ref() == Some(leader))
    }

    /// Kills member `i` with SIGKILL and reaps it; its data stays.
    pub(crate) fn kill(&mut self, i: usize) {
        stop(&mut self.children[i]);
    }

    /// Starts member `i` again on its data and waits until it is healthy.
    pub(crate) async fn restart(&mut self, i: usize) -> Result<(), String> {
        let child = self.spawn(i)?;
        self.children[i] = Some(child);
        self.wait_healthy(i).await
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for child in &mut self.children {
            stop(child);
        }
    }
}

/// etcd's `/health` answers `"health":"true"` once the member has a leader.
async fn healthy(port: u16) -> bool {
    let check = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let request = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        Some(response.contains("\"health\":\"true\""))
    };
    tokio::time::timeout(Duration::from_secs(2), check)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// A member's `(member_id, leader)` from `POST /v3/maintenance/status`, both as
/// etcd's JSON gateway writes them (decimal strings).
async fn status(port: u16) -> Option<(String, String)> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let request = format!(
            "POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        parse_status(&response)
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
}

/// The member id and leader in an HTTP answer to a status request.
pub(crate) fn parse_status(response: &str) -> Option<(String, String)> {
    let body = &response[response.find("\r\n\r\n")? + 4..];
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let id = text(&v["header"]["member_id"])?;
    let leader = text(&v["leader"])?;
    Some((id, leader))
}

/// The cluster a scenario runs on, as its command-line options: the etcd members and
/// the `rollcall serve --etcd` coordinators on them (`failover` and `safety`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ClusterArgs {
    /// etcd members (1 or 3; etcd leader kills need 3).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=3))]
    pub(crate) etcd_members: u8,
    /// The `etcd` binary.
    #[arg(long, value_name = "PATH", default_value = "etcd")]
    pub(crate) etcd_bin: PathBuf,
    /// Coordinators.
    #[arg(long, default_value_t = 3)]
    pub(crate) coordinators: usize,
    /// The coordinators' etcd lease TTL (`--etcd-lease-ttl`).
    #[arg(long, value_parser = crate::common::duration, default_value = "5s")]
    pub(crate) etcd_lease_ttl: Duration,
    /// The cluster's slots (`--cluster-slots`).
    #[arg(long, default_value_t = 64)]
    pub(crate) slots: u32,
    /// Each coordinator's shards; default: its own default.
    #[arg(long)]
    pub(crate) shards: Option<usize>,
    /// The `rollcall` binary (built with `--features cluster`); default: the one next
    /// to this binary.
    #[arg(long, value_name = "PATH")]
    pub(crate) rollcall_bin: Option<PathBuf>,
}

impl ClusterArgs {
    /// The `rollcall` binary to start.
    pub(crate) fn rollcall(&self) -> Result<PathBuf, String> {
        match &self.rollcall_bin {
            Some(b) => Ok(b.clone()),
            None => sibling_binary().ok_or_else(|| {
                "no rollcall binary next to rollcall-bench: build it (cargo build --release -p rollcall-coordinator --features cluster) or pass --rollcall-bin".to_owned()
            }),
        }
    }

    /// Starts the etcd members.
    pub(crate) async fn start_etcd(&self) -> Result<Etcd, String> {
        Etcd::start(&self.etcd_bin, usize::from(self.etcd_members)).await
    }

    /// Starts the coordinators, `bin` (from [`Self::rollcall`], found before anything is
    /// started), on `etcd`, coordinator `i` reaching it at `etcd_of[i]` when given,
    /// accepting sessions down to `min_session_timeout`.
    pub(crate) async fn start_coordinators(
        &self,
        bin: PathBuf,
        etcd: &Etcd,
        etcd_of: Vec<Vec<String>>,
        min_session_timeout: Duration,
    ) -> Result<Coordinators, String> {
        Coordinators::start(
            CoordinatorOptions {
                bin,
                etcd: etcd.endpoints(),
                etcd_of,
                lease_ttl: self.etcd_lease_ttl,
                slots: self.slots,
                shards: self.shards,
                min_session_timeout,
            },
            self.coordinators,
        )
        .await
    }
}

/// How the coordinators run.
#[derive(Debug, Clone)]
pub(crate) struct CoordinatorOptions {
    pub(crate) bin: PathBuf,
    pub(crate) etcd: Vec<String>,
    /// Coordinator `i`'s own etcd endpoints, for those that have them (such as
    /// proxies that can cut it off); the others use `etcd`.
    pub(crate) etcd_of: Vec<Vec<String>>,
    pub(crate) lease_ttl: Duration,
    pub(crate) slots: u32,
    pub(crate) shards: Option<usize>,
    pub(crate) min_session_timeout: Duration,
}

/// One coordinator process.
#[derive(Debug)]
struct Node {
    id: String,
    addr: SocketAddr,
    child: Option<Child>,
}

/// The cluster's coordinators, each a `rollcall serve --etcd` process.
#[derive(Debug)]
pub(crate) struct Coordinators {
    opts: CoordinatorOptions,
    name: String,
    nodes: Vec<Node>,
    dir: RunDir,
}

impl Coordinators {
    /// Starts `count` coordinators of a new cluster, one after another.
    pub(crate) async fn start(opts: CoordinatorOptions, count: usize) -> Result<Self, String> {
        let dir = RunDir::new("cluster")?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let mut this = Self {
            opts,
            name: format!("failover-{}-{nanos:x}", std::process::id()),
            nodes: Vec::new(),
            dir,
        };
        for i in 0..count {
            let id = format!("c{i}");
            let listen = SocketAddr::from(([127, 0, 0, 1], 0));
            let (child, addr) = this.spawn(&id, listen).await?;
            this.nodes.push(Node {
                id,
                addr,
                child: Some(child),
            });
        }
        Ok(this)
    }

    async fn spawn(&self, id: &str, listen: SocketAddr) -> Result<(Child, SocketAddr), String> {
        let data = self.dir.0.join(id);
        std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
        let o = &self.opts;
        // A node restarted has its index; one being started, the next.
        let index = (self.nodes.iter().position(|n| n.id == id)).unwrap_or(self.nodes.len());
        let etcd = o.etcd_of.get(index).unwrap_or(&o.etcd);
        let mut cmd = Command::new(&o.bin);
        cmd.arg("serve")
            .args(["--listen", &listen.to_string(), "--metrics-addr", "off"])
            .arg("--data-dir")
            .arg(&data)
            .args(["--etcd", &etcd.join(",")])
            .args(["--cluster", &self.name, "--cluster-id", id])
            .args(["--cluster-slots", &o.slots.to_string()])
            .args([
                "--etcd-lease-ttl",
                &format!("{}ms", o.lease_ttl.as_millis()),
            ])
            .args(["--max-connections-per-address", "0"])
            .args([
                "--min-session-timeout",
                &format!("{}ms", o.min_session_timeout.as_millis()),
            ]);
        if let Some(shards) = o.shards {
            cmd.args(["--shards", &shards.to_string()]);
        }
        start_logged(cmd, id, START_WITHIN).await
    }

    /// The addresses of the coordinators running.
    pub(crate) fn alive(&self) -> Vec<SocketAddr> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.addr)
            .collect()
    }

    /// Every coordinator's address, running or not, by index.
    pub(crate) fn addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|n| n.addr).collect()
    }

    /// Coordinator `i`'s id.
    pub(crate) fn id(&self, i: usize) -> &str {
        &self.nodes[i].id
    }

    /// Kills coordinator `i` with SIGKILL and reaps it.
    pub(crate) fn kill(&mut self, i: usize) {
        stop(&mut self.nodes[i].child);
    }

    /// Starts coordinator `i` again, same id and port (tried again while the port is
    /// not free yet).
    pub(crate) async fn restart(&mut self, i: usize) -> Result<(), String> {
        let (id, addr) = (self.nodes[i].id.clone(), self.nodes[i].addr);
        let mut last = String::new();
        for _ in 0..20 {
            match self.spawn(&id, addr).await {
                Ok((child, _)) => {
                    self.nodes[i].child = Some(child);
                    return Ok(());
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!("coordinator {id} did not restart: {last}"))
    }

    /// Coordinators that exited by themselves, with how.
    pub(crate) fn exited(&mut self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    out.push((node.id.clone(), status.to_string()));
                    node.child = None;
                }
            }
        }
        out
    }
}

impl Drop for Coordinators {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            stop(&mut node.child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_status;

    #[test]
    fn a_status_answer_gives_the_member_and_its_leader() {
        let answer = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"header\":{\"cluster_id\":\"1\",\"member_id\":\"42\",\"revision\":\"9\",\"raft_term\":\"2\"},\"version\":\"3.4.23\",\"dbSize\":\"20480\",\"leader\":\"7\",\"raftIndex\":\"12\",\"raftTerm\":\"2\"}";
        assert_eq!(parse_status(answer), Some(("42".into(), "7".into())));
        assert_eq!(
            parse_status("HTTP/1.0 503 Service Unavailable\r\n\r\n"),
            None
        );
    }
}
