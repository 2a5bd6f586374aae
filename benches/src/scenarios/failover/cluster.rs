//! The failover scenario's processes: an etcd cluster of one or three members and the
//! `rollcall serve --etcd` coordinators on it, all on loopback, every one stopped and
//! its data removed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::target::start_logged;

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
    children: Vec<Option<Child>>,
    client_ports: Vec<u16>,
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
        let initial: Vec<String> = peer_ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("e{i}=http://127.0.0.1:{p}"))
            .collect();
        let mut etcd = Self {
            children: Vec::new(),
            client_ports: client_ports.clone(),
            dir,
        };
        for i in 0..members {
            let data = etcd.dir.0.join(format!("e{i}"));
            let log = std::fs::File::create(etcd.dir.0.join(format!("e{i}.log")))
                .map_err(|e| e.to_string())?;
            let client = format!("http://127.0.0.1:{}", client_ports[i]);
            let peer = format!("http://127.0.0.1:{}", peer_ports[i]);
            let child = Command::new(bin)
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
                .map_err(|e| format!("cannot run {}: {e} (install etcd-server)", bin.display()))?;
            etcd.children.push(Some(child));
        }
        let deadline = Instant::now() + START_WITHIN;
        for port in &client_ports {
            while !healthy(*port).await {
                for child in etcd.children.iter_mut().flatten() {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!("an etcd member exited with {status}"));
                    }
                }
                if Instant::now() > deadline {
                    return Err(format!("etcd not healthy within {START_WITHIN:?}"));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(etcd)
    }

    /// Every member's client URL.
    pub(crate) fn endpoints(&self) -> Vec<String> {
        self.client_ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
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

/// How the coordinators run.
#[derive(Debug, Clone)]
pub(crate) struct CoordinatorOptions {
    pub(crate) bin: PathBuf,
    pub(crate) etcd: Vec<String>,
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
        let mut cmd = Command::new(&o.bin);
        cmd.arg("serve")
            .args(["--listen", &listen.to_string(), "--metrics-addr", "off"])
            .arg("--data-dir")
            .arg(&data)
            .args(["--etcd", &o.etcd.join(",")])
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
