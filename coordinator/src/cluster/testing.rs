//! A real etcd on loopback for tests: free ports, a data directory of its own, started
//! and waited for until healthy, killed (and its directory removed) on drop.
//!
//! Public under the `cluster` feature so that the coordinator's own tests and the
//! end-to-end `tests` crate share one harness. Not part of the stable API.
//!
//! When the `etcd` binary is not on `PATH`, [`EtcdProcess::start`] prints
//! `SKIPPED: ... (install etcd-server)` to stderr and returns `None`, so the test passes
//! vacuously; with `ROLLCALL_REQUIRE_ETCD=1` (set by `.ci/run`) it panics instead.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Operations etcd accepts in one transaction when started by [`EtcdProcess`]: etcd's
/// default, which the store's split of a batch keeps within (see `store.rs`).
pub const TEST_MAX_TXN_OPS: usize = 128;

/// How long a started etcd has to answer its health check.
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

/// One etcd member on loopback. Killed and its data removed on drop.
#[derive(Debug)]
pub struct EtcdProcess {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

impl EtcdProcess {
    /// Starts an etcd with a fresh data directory and waits until it is healthy. `None`
    /// (after a loud `SKIPPED` line naming `test`) when no `etcd` binary is installed,
    /// unless `ROLLCALL_REQUIRE_ETCD=1`, which makes that a panic.
    pub fn start(test: &str) -> Option<Self> {
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
        let dir = temp_dir(test);
        // Free ports are found by binding port 0; another process may take one before
        // etcd binds it, so a start that fails is tried again on other ports.
        let mut last = String::new();
        for _ in 0..5 {
            let mut process = Self {
                child: None,
                dir: dir.clone(),
                client_port: free_port(),
                peer_port: free_port(),
            };
            match process.launch() {
                Ok(()) => return Some(process),
                // Dropping it kills it and removes the directory; the next try makes
                // it again.
                Err(e) => last = e,
            }
        }
        panic!("etcd did not start: {last}");
    }

    /// The client endpoint, `127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// Kills etcd (SIGKILL) and waits for it, keeping its data directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data directory (after [`Self::kill`]) and
    /// waits until it is healthy.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.launch() {
            panic!("etcd did not restart: {e}");
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn launch(&mut self) -> Result<(), String> {
        fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let log = File::create(self.dir.join("etcd.log")).map_err(|e| e.to_string())?;
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .arg("--name=test")
            .arg(format!("--data-dir={}", self.data_dir().display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg(format!("--max-txn-ops={TEST_MAX_TXN_OPS}"))
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot run etcd: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + HEALTHY_WITHIN;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("etcd exited with {status}: {}", self.log_tail()));
                }
            }
            if healthy(self.client_port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "etcd not healthy within {HEALTHY_WITHIN:?}: {}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let start = log.len().saturating_sub(2000);
        log.get(start..).unwrap_or_default().to_owned()
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
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
