//! A real etcd on loopback for tests: one member ([`EtcdProcess`]) or several
//! ([`EtcdCluster`]), on free ports, each with a data directory of its own, started and
//! waited for until healthy; each member can be killed and restarted on its data; all
//! are killed (and their directory removed) on drop.
//!
//! Public under the `cluster` feature so that the coordinator's own tests and the
//! end-to-end `tests` crate share one harness. Not part of the stable API.
//!
//! When the `etcd` binary is not on `PATH`, [`EtcdProcess::start`] and
//! [`EtcdCluster::start`] print `SKIPPED: ... (install etcd-server)` to stderr and
//! return `None`, so the test passes vacuously; with `ROLLCALL_REQUIRE_ETCD=1` (set by
//! `.ci/run`) they panic instead.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use etcd_client::{Client, ConnectOptions};

/// Operations etcd accepts in one transaction when started by this harness: etcd's
/// default, which the store's split of a batch keeps within (see `store.rs`).
pub const TEST_MAX_TXN_OPS: usize = 128;

/// How long started etcd members have to answer their health check.
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

/// One etcd member on loopback. Killed and its data removed on drop.
#[derive(Debug)]
pub struct EtcdProcess {
    cluster: EtcdCluster,
}

impl EtcdProcess {
    /// Starts an etcd with a fresh data directory and waits until it is healthy. `None`
    /// (after a loud `SKIPPED` line naming `test`) when no `etcd` binary is installed,
    /// unless `ROLLCALL_REQUIRE_ETCD=1`, which makes that a panic.
    pub fn start(test: &str) -> Option<Self> {
        EtcdCluster::start(test, 1).map(|cluster| Self { cluster })
    }

    /// The client endpoint, `127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        self.cluster.endpoint(0)
    }

    /// Kills etcd (SIGKILL) and waits for it, keeping its data directory.
    pub fn kill(&mut self) {
        self.cluster.kill(0);
    }

    /// Starts etcd again on the same ports and data directory (after [`Self::kill`]) and
    /// waits until it is healthy.
    pub fn restart(&mut self) {
        self.cluster.restart(0);
    }
}

/// One member of an [`EtcdCluster`].
#[derive(Debug)]
struct Member {
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// An etcd cluster of one or more members on loopback (one Raft group, etcd's default
/// timings and fsync). Each member can be killed and restarted on its ports and data;
/// all are killed and their data removed on drop.
#[derive(Debug)]
pub struct EtcdCluster {
    bin: PathBuf,
    dir: PathBuf,
    members: Vec<Member>,
}

impl EtcdCluster {
    /// Starts `members` members with fresh data directories and waits until every one
    /// is healthy (the cluster has a leader). `None` (after a loud `SKIPPED` line naming
    /// `test`) when no `etcd` binary is installed, unless `ROLLCALL_REQUIRE_ETCD=1`,
    /// which makes that a panic.
    pub fn start(test: &str, members: usize) -> Option<Self> {
        if !etcd_installed() {
            let message =
                format!("SKIPPED: {test} needs the `etcd` binary on PATH (install etcd-server)");
            if std::env::var("ROLLCALL_REQUIRE_ETCD").is_ok_and(|v| v == "1") {
                panic!("{message}, and ROLLCALL_REQUIRE_ETCD=1 requires it");
            }
            // Written to the process's stderr, past the test harness's capture, so
            // the skip shows even when the test passes.
            let _ = writeln!(std::io::stderr(), "{message}");
            return None;
        }
        Some(Self::spawn(Path::new("etcd"), test, members).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Starts `members` members of the etcd binary `bin` (a path, or a name looked up
    /// on `PATH`) with fresh data directories named after `tag`, and waits until every
    /// one is healthy. An error when they do not start; no `SKIPPED` handling (for
    /// tools that start etcd themselves, such as a benchmark).
    pub fn spawn(bin: &Path, tag: &str, members: usize) -> Result<Self, String> {
        assert!(members > 0, "an etcd cluster needs a member");
        let dir = temp_dir(tag);
        // Free ports are found by binding port 0; another process may take one before
        // etcd binds it, so a start that fails is tried again on other ports.
        let mut last = String::new();
        for _ in 0..5 {
            let mut cluster = Self {
                bin: bin.to_owned(),
                dir: dir.clone(),
                members: (0..members)
                    .map(|_| Member {
                        client_port: free_port(),
                        peer_port: free_port(),
                        child: None,
                    })
                    .collect(),
            };
            match cluster.launch((0..members).collect()) {
                Ok(()) => return Ok(cluster),
                // Dropping it kills it and removes the directory; the next try makes
                // it again.
                Err(e) => last = e,
            }
        }
        Err(format!("etcd did not start: {last}"))
    }

    /// How many members it has (running or not).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no member (never: [`Self::start`] needs one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `i`'s client endpoint, `127.0.0.1:<port>`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.members[i].client_port)
    }

    /// Every member's client URL, `http://127.0.0.1:<port>`, in member order.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.len())
            .map(|i| format!("http://{}", self.endpoint(i)))
            .collect()
    }

    /// Whether member `i` runs (it was not killed, or was restarted since).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// Kills member `i` (SIGKILL) and waits for it, keeping its data directory.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its ports and data directory (killing it first if it
    /// runs) and waits until it is healthy: it needs a quorum of the members running.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        if let Err(e) = self.launch(vec![i]) {
            panic!("etcd member {i} did not restart: {e}");
        }
    }

    /// Kills every member (SIGKILL), keeping their data.
    pub fn kill_all(&mut self) {
        for i in 0..self.len() {
            self.kill(i);
        }
    }

    /// Starts every member that is not running again on its ports and data, and waits
    /// until all are healthy.
    pub fn restart_all(&mut self) {
        let stopped: Vec<usize> = (0..self.len()).filter(|i| !self.is_running(*i)).collect();
        if let Err(e) = self.launch(stopped) {
            panic!("etcd did not restart: {e}");
        }
    }

    /// The member that leads the Raft group, as the running members report it: `None`
    /// while they have none, or do not agree on one. Each member is asked for its
    /// status (its own id, and the leader's) with a timeout of one second.
    pub async fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for i in (0..self.len()).filter(|i| self.is_running(*i)) {
            let (id, leader, _) = member_status(&self.endpoint(i)).await?;
            ids.push((i, id));
            leaders.push(leader);
        }
        let leader = *leaders.first()?;
        if leader == 0 || leaders.iter().any(|l| *l != leader) {
            return None;
        }
        ids.into_iter()
            .find(|(_, id)| *id == leader)
            .map(|(i, _)| i)
    }

    /// The highest Raft term the running members report (each election begins a new
    /// term); `None` when none answers.
    pub async fn term(&self) -> Option<u64> {
        let mut term = None;
        for i in (0..self.len()).filter(|i| self.is_running(*i)) {
            if let Some((_, _, t)) = member_status(&self.endpoint(i)).await {
                term = term.max(Some(t));
            }
        }
        term
    }

    /// Waits (at most `within`) until the running members agree on a leader among
    /// them, and returns it.
    pub async fn wait_leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader().await {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "etcd elected no leader within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("e{i}"))
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("e{i}.log"))
    }

    /// Spawns members `which` (not running) and waits until each is healthy.
    fn launch(&mut self, which: Vec<usize>) -> Result<(), String> {
        fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let initial: Vec<String> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| format!("e{i}=http://127.0.0.1:{}", m.peer_port))
            .collect();
        // Unique to this cluster, so that a member never joins another test's cluster
        // that reused a port.
        let token = self.dir.file_name().map_or_else(
            || "rollcall-test".to_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        for &i in &which {
            // A restarted member reads its data directory and ignores the initial flags.
            let log = File::options()
                .create(true)
                .append(true)
                .open(self.log_path(i))
                .map_err(|e| e.to_string())?;
            let client = format!("http://{}", self.endpoint(i));
            let peer = format!("http://127.0.0.1:{}", self.members[i].peer_port);
            let child = Command::new(&self.bin)
                .arg(format!("--name=e{i}"))
                .arg(format!("--data-dir={}", self.data_dir(i).display()))
                .arg(format!("--listen-client-urls={client}"))
                .arg(format!("--advertise-client-urls={client}"))
                .arg(format!("--listen-peer-urls={peer}"))
                .arg(format!("--initial-advertise-peer-urls={peer}"))
                .arg(format!("--initial-cluster={}", initial.join(",")))
                .arg("--initial-cluster-state=new")
                .arg(format!("--initial-cluster-token={token}"))
                .arg(format!("--max-txn-ops={TEST_MAX_TXN_OPS}"))
                .arg("--log-level=warn")
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", self.bin.display()))?;
            self.members[i].child = Some(child);
        }
        let deadline = Instant::now() + HEALTHY_WITHIN;
        for &i in &which {
            loop {
                if let Some(child) = self.members[i].child.as_mut() {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!(
                            "etcd member {i} exited with {status}: {}",
                            self.log_tail(i)
                        ));
                    }
                }
                if healthy(self.members[i].client_port) {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "etcd member {i} not healthy within {HEALTHY_WITHIN:?}: {}",
                        self.log_tail(i)
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    fn log_tail(&self, i: usize) -> String {
        let log = fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let start = log.len().saturating_sub(2000);
        log.get(start..).unwrap_or_default().to_owned()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.kill_all();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The member at `endpoint`'s own id, the leader it knows (0: none) and its Raft term,
/// through the maintenance API's status call; `None` when it does not answer within a
/// second.
async fn member_status(endpoint: &str) -> Option<(u64, u64, u64)> {
    let timeout = Duration::from_secs(1);
    let ask = async {
        let options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout);
        let mut client = Client::connect([endpoint], Some(options)).await.ok()?;
        let status = client.status().await.ok()?;
        Some((
            status.header()?.member_id(),
            status.leader(),
            status.raft_term(),
        ))
    };
    tokio::time::timeout(timeout * 2, ask).await.ok().flatten()
}

/// Whether an `etcd` binary is on `PATH`.
pub fn etcd_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| is_file(&dir.join("etcd"))))
}

fn is_file(path: &Path) -> bool {
    path.metadata().is_ok_and(|m| m.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// etcd's `/health` answers `"health":"true"` once it has a leader.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}

fn temp_dir(test: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name: String = test
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    std::env::temp_dir().join(format!(
        "rollcall-etcd-{name}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}
